"""remote: the remote tier's infrastructure and figures, one wing: the project's own S3-compatible server
(server), the link shaped with a network namespace and tc (link), the two together as a scenario's [remote]
session (tier), a user's bucket mirrored into a local folder before it is imported (bucket), and the readers'
counters merged into a visit's remote figures, with the remote table's columns (counters). Imports no other
wing."""

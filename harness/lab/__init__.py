"""lab: the project's own test store and network, one wing: its S3-compatible server (server:
moto's server mode), the link shaped with a network namespace and tc (link), and the two together
as a scenario's [remote] session (session). What the readers count is measure's (remotecounters); a
user's bucket mirrored before it is imported is data's (bucket). Imports only the shared base
modules."""

"""Storage strategies: how samples lie on disk and how a batch is read back."""
# Registered on import of this package (strategies.registry imports the built-in storages through it);
# litdata itself is imported only when the storage is selected (an optional extra).
from strategies.storage import litdata as _litdata  # noqa: F401,E402

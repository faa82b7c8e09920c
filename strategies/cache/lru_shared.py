"""The shared scope of the lru cache: one cache-server process per rank, used by all its DataLoader workers.

:class:`CacheServer` starts a :class:`multiprocessing.managers.BaseManager` server ("spawn" context: a fresh
interpreter, nothing inherited from the rank) that holds :class:`~strategies.cache.lru.LRUStore` objects.
:class:`SharedStore` is the client side: it pickles to (address, authkey, store name) and connects lazily
once per process, so a CachedFetch pickled into a DataLoader worker reaches the same store. A batch costs
at most two round trips (``get_many``, then ``put_many`` for the misses). Values cross as pickled bytes
(plain pickle, so tensors are copied rather than turned into shared-memory handles); the server never
unpickles them and never imports torch.

The server stops when the CacheServer is closed or collected, when the rank process exits (the manager's
own finaliser), or within a second of the rank process dying without cleaning up (it watches its parent).
"""
from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import signal
import threading
import time
import uuid
from multiprocessing.managers import BaseManager, BaseProxy

from strategies.cache.lru import LRUStore

_STORES: dict[str, LRUStore] = {}  # in the server process: store name -> store


def _create_store(name: str, capacity_bytes: int) -> LRUStore:
    _STORES[name] = LRUStore(capacity_bytes)
    return _STORES[name]


def _open_store(name: str) -> LRUStore:
    return _STORES[name]


class StoreProxy(BaseProxy):
    _exposed_ = ("get_many", "put_many", "stats", "keys")

    def get_many(self, keys):
        return self._callmethod("get_many", (keys,))

    def put_many(self, items):
        return self._callmethod("put_many", (items,))

    def stats(self):
        return self._callmethod("stats")

    def keys(self):
        return self._callmethod("keys")


class CacheManager(BaseManager):
    pass


CacheManager.register("create_store", callable=_create_store, proxytype=StoreProxy)
CacheManager.register("open_store", callable=_open_store, proxytype=StoreProxy)


def _serve_init(parent_pid: int) -> None:
    """Runs in the server: ignore Ctrl-C (the rank shuts us down) and exit if the rank dies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch_parent() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        server = getattr(mp.current_process(), "_manager_server", None)
        if server is not None:
            server.stop_event.set()  # serve_forever exits cleanly within a second
            time.sleep(5)
        os._exit(0)

    threading.Thread(target=watch_parent, name="watch-parent", daemon=True).start()


class CacheServer:
    """A running cache-server process, owned by the process that created it."""

    def __init__(self):
        self.authkey = os.urandom(32)
        self._manager = CacheManager(authkey=self.authkey, ctx=mp.get_context("spawn"))
        self._manager.start(_serve_init, (os.getpid(),))
        self.address = self._manager.address
        self.pid = self._manager._process.pid

    def new_store(self, capacity_bytes: int) -> "SharedStore":
        name = uuid.uuid4().hex
        self._manager.create_store(name, capacity_bytes)  # the server keeps it in _STORES
        return SharedStore(self.address, self.authkey, name, owner=self)

    def close(self) -> None:
        self._manager.shutdown()  # idempotent; also runs at exit and when the manager is collected


class SharedStore:
    """Client of one store in a CacheServer; same methods as LRUStore; reconnects once per process."""

    def __init__(self, address, authkey: bytes, name: str, owner: CacheServer | None = None):
        self.address, self.authkey, self.name = address, authkey, name
        self._owner = owner  # keeps the server alive while the creating process uses this store
        self._proxy, self._pid = None, None

    def _remote(self) -> StoreProxy:
        if self._pid != os.getpid():
            manager = CacheManager(address=self.address, authkey=self.authkey)
            manager.connect()
            self._proxy, self._pid = manager.open_store(self.name), os.getpid()
        return self._proxy

    def get_many(self, keys) -> dict:
        blobs = self._remote().get_many(list(keys))
        return {k: pickle.loads(b) for k, b in blobs.items()}

    def put_many(self, items) -> None:
        blobs = [(k, pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL), n) for k, v, n in items]
        if blobs:
            self._remote().put_many(blobs)

    def stats(self) -> dict:
        return self._remote().stats()

    def keys(self) -> list:
        return self._remote().keys()

    def __getstate__(self) -> dict:
        return {"address": self.address, "authkey": self.authkey, "name": self.name}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["address"], state["authkey"], state["name"])

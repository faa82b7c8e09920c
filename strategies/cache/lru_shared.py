"""The shared scope of the lru cache: one cache-server process per rank, used by all its DataLoader
workers.

:class:`CacheServer` runs ``python -m strategies.cache.lru_shared`` as a child process: a
:class:`multiprocessing.managers.BaseManager` server holding
:class:`~strategies.cache.lrumap.LRUStore` objects. A plain subprocess rather than a
multiprocessing one: it does not re-import the rank's main module (which would pull torch into the
server) and it watches its stdin, so it exits as soon as the rank closes the pipe, on purpose or by
dying in any way. :class:`SharedStore` is the client: it pickles to (address, authkey, store name)
and connects lazily once per process, so a CachedFetch pickled into a DataLoader worker reaches the
same store. A batch costs at most two round trips (``get_many``, then ``put_many`` for the misses).
Values cross as pickled bytes (plain pickle: tensors are copied, never turned into shared-memory
handles); the server never unpickles them.
"""
from __future__ import annotations

import io
import os
import pickle
import signal
import subprocess
import sys
import threading
import weakref
from multiprocessing.managers import BaseManager, BaseProxy

from strategies.cache.lrumap import LRUStore

_STORES: dict[str, LRUStore] = {}  # in the server process: store name -> store


def _tensor_from_numpy(array):
    import torch

    return torch.from_numpy(array)


class _ValuePickler(pickle.Pickler):
    """Plain pickle, but a dense CPU tensor travels as its numpy array (far cheaper than torch's
    reducer)."""

    def reducer_override(self, obj):
        if type(obj).__name__ == "Tensor" and type(obj).__module__ == "torch" and obj.device.type == "cpu" \
                and not obj.requires_grad and str(obj.layout) == "torch.strided":
            try:
                return _tensor_from_numpy, (obj.numpy(),)
            except (TypeError, RuntimeError):  # a dtype numpy lacks (bfloat16, ...)
                pass
        return NotImplemented


def dumps(value) -> bytes:
    buf = io.BytesIO()
    _ValuePickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return buf.getvalue()


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


def serve() -> None:
    """The server process: authkey (hex) on stdin, address on stdout; stops at EOF on stdin."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the rank, and the rank stops us
    authkey = bytes.fromhex(sys.stdin.readline().strip())
    server = CacheManager(authkey=authkey).get_server()
    print(server.address, flush=True)

    def stop_at_eof() -> None:
        sys.stdin.read()
        server.stop_event.set()

    threading.Thread(target=stop_at_eof, daemon=True).start()
    server.serve_forever()  # returns by sys.exit once stop_event is set


def _stop(proc: subprocess.Popen) -> None:
    try:
        proc.stdin.close()
        proc.wait(timeout=5)
    except Exception:
        proc.kill()
        proc.wait()


class CacheServer:
    """A running cache-server process, owned by the process that created it."""

    def __init__(self):
        self.authkey = os.urandom(32)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self._proc = subprocess.Popen([sys.executable, "-m", "strategies.cache.lru_shared"], env=env,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._finalizer = weakref.finalize(self, _stop, self._proc)
        self._proc.stdin.write(self.authkey.hex().encode() + b"\n")
        self._proc.stdin.flush()
        address = self._proc.stdout.readline().decode().strip()
        self._proc.stdout.close()
        if not address:
            self.close()
            raise RuntimeError("cache lru: the shared cache server failed to start (see its stderr)")
        self.address, self.pid = address, self._proc.pid
        self._manager = CacheManager(address=self.address, authkey=self.authkey)
        self._manager.connect()

    def new_store(self, capacity_bytes: int) -> SharedStore:
        name = os.urandom(8).hex()
        self._manager.create_store(name, capacity_bytes)  # the server keeps it in _STORES
        return SharedStore(self.address, self.authkey, name, owner=self)

    def close(self) -> None:
        self._finalizer()  # idempotent; also runs when this object is collected or at exit


class SharedStore:
    """Client of one store in a CacheServer; same methods as LRUStore; reconnects once per
    process."""

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
        blobs = [(k, dumps(v), n) for k, v, n in items]
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


if __name__ == "__main__":
    serve()

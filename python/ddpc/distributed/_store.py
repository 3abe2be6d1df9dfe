"""Key-value stores shaped like torch.distributed's: TCPStore (the C store,
whose server runs in the master's process), FileStore (a file that every
rank opens), HashStore (this process only) and PrefixStore (another store's
keys under a prefix). Values are bytes (a str is stored encoded); ``add``
keeps counters as decimal text, as PyTorch's stores do.
``init_process_group(store=...)`` takes any of them (a HashStore for one rank).

Errors, as torch.distributed's: a ``get`` or ``wait`` that passes its
deadline raises DistStoreTimeoutError (a DistStoreError, and a
DistTimeoutError as ddpc's timeouts are); a key deleted under a ``get``,
a refused client (a wrong token) or a malformed reply DistStoreError; a
TCPStore whose server cannot be reached or whose connection breaks
DistNetworkError (DistNetworkTimeoutError, also a DistTimeoutError, where
no connection came before the timeout)."""

import base64
import fcntl
import json
import os
import threading
import time
from datetime import timedelta

from .. import _C
from .._C import DistStoreError, DistStoreTimeoutError

_STORE_TIMEOUT = timedelta(seconds=300)  # PyTorch's default for every store


def _seconds(timeout, default=None):
    if timeout is None:
        return default
    if isinstance(timeout, timedelta):
        return timeout.total_seconds()
    return float(timeout)


def _as_bytes(value):
    return value.encode() if isinstance(value, str) else bytes(value)


class Store:
    """Base of the stores, as ``torch.distributed.Store``: ``timeout`` is the
    deadline of ``get`` and ``wait`` where they are given none."""

    def __init__(self, timeout=_STORE_TIMEOUT):
        self._timeout_s = _seconds(timeout)

    @property
    def timeout(self):
        return timedelta(seconds=self._timeout_s)

    def set_timeout(self, timeout):
        self._timeout_s = _seconds(timeout)


class TCPStore(Store):
    """Key-value store over TCP; the master (``is_master=True``) hosts the server.

    ``token`` (default: ``DDPC_STORE_TOKEN`` from the environment, as set by
    ddpc-run) must match between server and clients; other clients are refused.

    Differences from PyTorch: ``world_size``, ``wait_for_workers`` and
    ``use_libuv`` are ignored, ``master_listen_fd`` is refused, and with
    ``multi_tenant`` a port still has one master (a second one fails: the
    port is in use); ``set_timeout`` bounds ``get`` and ``wait``, while the
    other calls keep the timeout the store was made with.
    """

    def __init__(self, host_name, port, world_size=None, is_master=False, timeout=_STORE_TIMEOUT,
                 wait_for_workers=True, multi_tenant=False, master_listen_fd=None, use_libuv=True, *, token=None):
        del wait_for_workers, multi_tenant, use_libuv
        if master_listen_fd is not None:
            raise ValueError("TCPStore: master_listen_fd is not supported: ddpc's store server binds its own socket "
                             "(pass the port instead)")
        super().__init__(timeout)
        if token is None:
            token = os.environ.get("DDPC_STORE_TOKEN", "")
        self.world_size = world_size
        self._c = _C.Store(str(host_name), int(port), bool(is_master), token, self._timeout_s)
        self.host = host_name

    @property
    def port(self):
        return self._c.port

    def set(self, key, value):
        self._c.set(key, _as_bytes(value))

    def get(self, key):
        return self._c.get(key, self._timeout_s)

    def add(self, key, amount):
        return self._c.add(key, int(amount))

    def compare_set(self, key, expected_value, desired_value):
        """Sets ``key`` to ``desired_value`` where it holds ``expected_value``
        (or is missing and ``expected_value`` is empty); returns the value it
        holds afterwards (``expected_value`` where it is still missing)."""
        return self._c.compare_set(key, _as_bytes(expected_value), _as_bytes(desired_value))

    def wait(self, keys, timeout=None):
        self._c.wait(list(keys), _seconds(timeout, self._timeout_s))

    def check(self, keys):
        return self._c.check(list(keys))

    def delete_key(self, key):
        return self._c.delete_key(key)

    def num_keys(self):
        return self._c.num_keys()

    def __reduce__(self):
        raise TypeError("cannot pickle a TCPStore: it is tied to this process's connection")


class _DictStore(Store):
    """A store kept as a dict of bytes that ``_update(fn)`` hands to ``fn``
    under a lock (``fn``'s changes are kept; its result is returned)."""

    def _update(self, fn):
        raise NotImplementedError

    def set(self, key, value):
        value = _as_bytes(value)
        self._update(lambda d: d.__setitem__(key, value))

    def add(self, key, amount):
        def add(d):
            value = int(d.get(key, b"0")) + int(amount)
            d[key] = str(value).encode()
            return value

        return self._update(add)

    def compare_set(self, key, expected_value, desired_value):
        """Sets ``key`` to ``desired_value`` where it holds ``expected_value``
        (or is missing and ``expected_value`` is empty); returns the value it
        holds afterwards (``expected_value`` where it is still missing)."""
        expected, desired = _as_bytes(expected_value), _as_bytes(desired_value)

        def compare_set(d):
            if d.get(key, b"" if not expected else None) == expected:
                d[key] = desired
            return d.get(key, expected)

        return self._update(compare_set)

    def check(self, keys):
        return self._update(lambda d: all(k in d for k in keys))

    def delete_key(self, key):
        return self._update(lambda d: d.pop(key, None) is not None)

    def num_keys(self):
        return self._update(len)

    def wait(self, keys, timeout=None):
        timeout_s = _seconds(timeout, self._timeout_s)
        deadline = time.monotonic() + timeout_s
        delay = 0.001
        while not self.check(keys):
            if time.monotonic() > deadline:
                raise DistStoreTimeoutError(f"{type(self).__name__} wait for {list(keys)} timed out after "
                                            f"{timeout_s:.1f} s")
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def get(self, key):
        self.wait([key])
        value = self._update(lambda d: d.get(key))
        if value is None:
            raise DistStoreError(f"store key '{key}' vanished (deleted by another client)")
        return value


class FileStore(_DictStore):
    """Key-value store in a file shared by all ranks (a local or network file
    system), serialised with an exclusive lock. Waits poll the file. Unlike
    PyTorch's, the file holds ddpc's own format (JSON) and stays when the
    last store on it is gone."""

    def __init__(self, file_name, world_size=-1):
        super().__init__()
        self.path = file_name
        self.world_size = world_size
        with open(self.path, "a"):
            pass

    def _update(self, fn):
        with open(self.path, "r+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                text = f.read()
                data = {k: base64.b64decode(v) for k, v in json.loads(text).items()} if text else {}
                result = fn(data)
                f.seek(0)
                f.truncate()
                f.write(json.dumps({k: base64.b64encode(v).decode() for k, v in data.items()}))
                f.flush()
                return result
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)


class HashStore(_DictStore):
    """Key-value store in this process's memory, shared by its threads."""

    def __init__(self):
        super().__init__()
        self._data = {}
        self._lock = threading.Lock()

    def _update(self, fn):
        with self._lock:
            return fn(self._data)


class PrefixStore(Store):
    """The keys of ``store`` under ``prefix + "/"``; ``timeout`` and
    ``num_keys`` are the underlying store's."""

    def __init__(self, prefix, store):
        if not isinstance(store, Store):
            raise TypeError(f"PrefixStore: store must be a ddpc.distributed store, got {type(store).__name__}")
        self.prefix = f"{prefix}/"
        self.underlying_store = store

    @property
    def timeout(self):
        return self.underlying_store.timeout

    def set_timeout(self, timeout):
        self.underlying_store.set_timeout(timeout)

    def set(self, key, value):
        self.underlying_store.set(self.prefix + key, value)

    def get(self, key):
        return self.underlying_store.get(self.prefix + key)

    def add(self, key, amount):
        return self.underlying_store.add(self.prefix + key, amount)

    def compare_set(self, key, expected_value, desired_value):
        return self.underlying_store.compare_set(self.prefix + key, expected_value, desired_value)

    def wait(self, keys, timeout=None):
        self.underlying_store.wait([self.prefix + k for k in keys], timeout)

    def check(self, keys):
        return self.underlying_store.check([self.prefix + k for k in keys])

    def delete_key(self, key):
        return self.underlying_store.delete_key(self.prefix + key)

    def num_keys(self):
        return self.underlying_store.num_keys()

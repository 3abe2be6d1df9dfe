"""Key-value stores shaped like torch.distributed's: TCPStore (the C store,
whose server runs in the master's process), FileStore (a file that every
rank opens), HashStore (this process only) and PrefixStore (another store's
keys under a prefix). Values are bytes (a str is stored encoded); ``add``
keeps counters as decimal text, as PyTorch's stores do.
``init_process_group(store=...)`` takes any of them (a HashStore for one rank).

Every store has PyTorch 2.15's extended API (``has_extended_api()`` is True):
``append``, ``multi_get``, ``multi_set``, ``list_keys``, ``barrier``,
``clone`` and the queues ``queue_push``, ``queue_pop``, ``queue_len``. A
queue is kept apart from the keys, as in PyTorch: ``list_keys`` and
``num_keys`` leave it out, while ``check`` and ``wait`` see a non-empty queue
under its key as present.

Errors, as torch.distributed's: a ``get`` or ``wait`` that passes its
deadline raises DistStoreTimeoutError (a DistStoreError, and a
DistTimeoutError as ddpc's timeouts are); a key deleted under a ``get``,
a refused client (a wrong token) or a malformed reply DistStoreError; a
TCPStore whose server cannot be reached or whose connection breaks
DistNetworkError (DistNetworkTimeoutError, also a DistTimeoutError, where
no connection came before the timeout). A ``queue_pop`` that blocks and
finds no item before the store's timeout raises DistStoreTimeoutError too,
and one with ``block=False`` on an empty queue QueueEmptyError (a
DistStoreError)."""

import base64
import fcntl
import json
import operator
import os
import threading
import time
from datetime import timedelta

from .. import _C
from .._C import DistStoreError, DistStoreTimeoutError, QueueEmptyError

_STORE_TIMEOUT = timedelta(seconds=300)  # PyTorch's default for every store


def _seconds(timeout, default=None):
    if timeout is None:
        return default
    if isinstance(timeout, timedelta):
        return timeout.total_seconds()
    return float(timeout)


def _as_bytes(value):
    return value.encode() if isinstance(value, str) else bytes(value)


def _check_multi_set(keys, values):
    keys, values = list(keys), list(values)
    if len(keys) != len(values):
        raise DistStoreError(f"multi_set: keys and values must be of the same length, got {len(keys)} keys and "
                             f"{len(values)} values")
    return keys, [_as_bytes(v) for v in values]


def _check_world_size(world_size):
    world_size = int(world_size)
    if world_size < 1:
        raise ValueError(f"barrier: world_size must be at least 1, got {world_size}")
    return world_size


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

    def has_extended_api(self):
        """Whether the store has append, multi_get, multi_set, queues and the rest (every ddpc store has)."""
        return True


class TCPStore(Store):
    """Key-value store over TCP; the master (``is_master=True``) hosts the server.

    ``token`` (default: ``DDPC_STORE_TOKEN`` from the environment, as set by
    ddpc-run) must match between server and clients; other clients are refused.

    Each operation is one request that the server carries out at once (a
    ``multi_set`` is seen whole or not at all); a blocked ``queue_pop``,
    ``wait`` or ``barrier`` waits on the server, not by polling, and each
    pushed item wakes one blocked ``queue_pop``. ``clone()`` opens a new
    connection to the same server, for another thread.

    Differences from PyTorch: ``world_size``, ``wait_for_workers`` and
    ``use_libuv`` are ignored (``libuvBackend`` is False: ddpc's server is
    its own), ``master_listen_fd`` is refused, and with ``multi_tenant`` a
    port still has one master (a second one fails: the port is in use);
    ``set_timeout`` bounds ``get``, ``wait``, ``multi_get``, ``queue_pop``
    and ``barrier``, while the other calls keep the timeout the store was
    made with.
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
        self._host = host_name

    @property
    def host(self):
        return self._host

    @property
    def port(self):
        return self._c.port

    @property
    def libuvBackend(self):  # noqa: N802 (PyTorch's name)
        return False

    def clone(self):
        """A new TCPStore on a connection of its own to the same server (not
        the server's owner: the server lives as long as this store's master)."""
        clone = TCPStore.__new__(TCPStore)
        Store.__init__(clone, self.timeout)
        clone.world_size = self.world_size
        clone._c = self._c.clone()
        clone._host = self._host
        return clone

    def set(self, key, value):
        self._c.set(key, _as_bytes(value))

    def get(self, key):
        return self._c.get(key, self._timeout_s)

    def add(self, key, amount):
        return self._c.add(key, operator.index(amount))  # an int, as PyTorch's: 1.7 is an error, not 1

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

    def append(self, key, value):
        self._c.append(key, _as_bytes(value))

    def multi_get(self, keys):
        return self._c.multi_get(list(keys), self._timeout_s)

    def multi_set(self, keys, values):
        self._c.multi_set(*_check_multi_set(keys, values))

    def list_keys(self):
        return self._c.list_keys()

    def barrier(self, key, world_size, timeout=None):
        self._c.barrier(key, _check_world_size(world_size), _seconds(timeout, self._timeout_s))

    def queue_push(self, key, value):
        self._c.queue_push(key, _as_bytes(value))

    def queue_pop(self, key, block=True):
        return self._c.queue_pop(key, bool(block), self._timeout_s)

    def queue_len(self, key):
        return self._c.queue_len(key)

    def __reduce__(self):
        raise TypeError("cannot pickle a TCPStore: it is tied to this process's connection")


class _DictStore(Store):
    """A store kept as a dict of bytes and a dict of queues (lists of bytes)
    that ``_locked(fn)`` hands to ``fn(keys, queues)`` under a lock (``fn``'s
    changes are kept; its result is returned). Blocking calls poll. A store
    of this kind is safe to share between threads: ``clone()`` is the store
    itself, as PyTorch's HashStore's is."""

    def _locked(self, fn):
        raise NotImplementedError

    def _update(self, fn):
        return self._locked(lambda keys, queues: fn(keys))

    def _poll(self, attempt, timeout_s, what):
        """The first result of ``attempt()`` that is not None, trying until ``timeout_s`` passes."""
        deadline = time.monotonic() + timeout_s
        delay = 0.001
        while True:
            result = attempt()
            if result is not None:
                return result
            if time.monotonic() > deadline:
                raise DistStoreTimeoutError(f"{type(self).__name__} {what} timed out after {timeout_s:.1f} s")
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def clone(self):
        return self

    def set(self, key, value):
        value = _as_bytes(value)
        self._update(lambda d: d.__setitem__(key, value))

    def add(self, key, amount):
        def add(d):
            value = int(d.get(key, b"0")) + operator.index(amount)
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
        return self._locked(lambda d, queues: all(k in d or bool(queues.get(k)) for k in keys))

    def delete_key(self, key):
        return self._update(lambda d: d.pop(key, None) is not None)

    def num_keys(self):
        return self._update(len)

    def list_keys(self):
        return self._update(list)

    def wait(self, keys, timeout=None):
        keys = list(keys)
        self._poll(lambda: True if self.check(keys) else None, _seconds(timeout, self._timeout_s),
                   f"wait for {keys}")

    def get(self, key):
        return self.multi_get([key])[0]

    def multi_get(self, keys):
        keys = list(keys)
        self.wait(keys)
        values = self._update(lambda d: [d.get(k) for k in keys])
        for k, value in zip(keys, values):
            if value is None:
                raise DistStoreError(f"store key '{k}' vanished (deleted by another client)")
        return values

    def multi_set(self, keys, values):
        keys, values = _check_multi_set(keys, values)
        self._update(lambda d: d.update(zip(keys, values)))

    def append(self, key, value):
        value = _as_bytes(value)
        self._update(lambda d: d.__setitem__(key, d.get(key, b"") + value))

    def barrier(self, key, world_size, timeout=None):
        world_size = _check_world_size(world_size)
        self.add(key, 1)
        self._poll(lambda: True if int(self._update(lambda d: d.get(key, b"0"))) >= world_size else None,
                   _seconds(timeout, self._timeout_s), f"barrier '{key}' of {world_size} workers")

    def queue_push(self, key, value):
        value = _as_bytes(value)
        self._locked(lambda d, queues: queues.setdefault(key, []).append(value))

    def queue_pop(self, key, block=True):
        def pop(d, queues):
            queue = queues.get(key)
            if not queue:
                return None
            value = queue.pop(0)
            if not queue:
                del queues[key]
            return value

        if block:
            return self._poll(lambda: self._locked(pop), self._timeout_s, f"queue_pop from '{key}'")
        value = self._locked(pop)
        if value is None:
            raise QueueEmptyError(f"store queue '{key}' is empty")
        return value

    def queue_len(self, key):
        return self._locked(lambda d, queues: len(queues.get(key, ())))


# FileStore's file: {_FILE_FORMAT: 2, "keys": ..., "queues": ...}; before the queues, the keys alone.
_FILE_FORMAT = "ddpc FileStore format"


class FileStore(_DictStore):
    """Key-value store in a file shared by all ranks (a local or network file
    system), serialised with an exclusive lock. Waits poll the file. Unlike
    PyTorch's, the file holds ddpc's own format (JSON: the keys and the
    queues, values in base64) and stays when the last store on it is gone."""

    def __init__(self, file_name, world_size=-1):
        super().__init__()
        self.path = file_name
        self.world_size = world_size
        with open(self.path, "a"):
            pass

    def _locked(self, fn):
        with open(self.path, "r+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                text = f.read()
                state = json.loads(text) if text else {}
                if state.get(_FILE_FORMAT) != 2:  # an earlier ddpc's file: its keys only
                    state = {"keys": state, "queues": {}}
                keys = {k: base64.b64decode(v) for k, v in state["keys"].items()}
                queues = {k: [base64.b64decode(v) for v in q] for k, q in state["queues"].items()}
                result = fn(keys, queues)
                f.seek(0)
                f.truncate()
                f.write(json.dumps({_FILE_FORMAT: 2,
                                    "keys": {k: base64.b64encode(v).decode() for k, v in keys.items()},
                                    "queues": {k: [base64.b64encode(v).decode() for v in q]
                                               for k, q in queues.items()}}))
                f.flush()
                return result
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)


class HashStore(_DictStore):
    """Key-value store in this process's memory, shared by its threads."""

    def __init__(self):
        super().__init__()
        self._data = {}
        self._queues = {}
        self._lock = threading.Lock()

    def _locked(self, fn):
        with self._lock:
            return fn(self._data, self._queues)


class PrefixStore(Store):
    """The keys of ``store`` under ``prefix + "/"``, queue and barrier keys
    included; ``list_keys`` gives the keys under the prefix without it, while
    ``timeout`` and ``num_keys`` are the underlying store's."""

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

    def append(self, key, value):
        self.underlying_store.append(self.prefix + key, value)

    def multi_get(self, keys):
        return self.underlying_store.multi_get([self.prefix + k for k in keys])

    def multi_set(self, keys, values):
        keys, values = _check_multi_set(keys, values)
        self.underlying_store.multi_set([self.prefix + k for k in keys], values)

    def list_keys(self):
        n = len(self.prefix)
        return [k[n:] for k in self.underlying_store.list_keys() if k.startswith(self.prefix)]

    def barrier(self, key, world_size, timeout=None):
        self.underlying_store.barrier(self.prefix + key, world_size, timeout)

    def queue_push(self, key, value):
        self.underlying_store.queue_push(self.prefix + key, value)

    def queue_pop(self, key, block=True):
        return self.underlying_store.queue_pop(self.prefix + key, block)

    def queue_len(self, key):
        return self.underlying_store.queue_len(self.prefix + key)

    def clone(self):
        """A PrefixStore with the same prefix over a clone of the underlying store."""
        clone = PrefixStore.__new__(PrefixStore)
        clone.prefix = self.prefix
        clone.underlying_store = self.underlying_store.clone()
        return clone

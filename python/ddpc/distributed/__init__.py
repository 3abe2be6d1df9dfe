"""ddpc.distributed: process groups and collectives, shaped like torch.distributed.

The work happens in _C (store, groups, shared-memory and TCP collectives, all
with the GIL released); this module resolves the rendezvous from the
environment or an init_method, checks arguments, and adapts ddpc tensors,
numpy arrays and CUDA tensors to the C calls.

Differences from PyTorch: ``recv`` without ``src`` is for the cpu backend;
an async ``all_gather`` into a list, ``gather``, ``scatter`` or async
collective on a CUDA tensor staged by the cpu backend finishes with a copy,
made by ``Work.wait()``, or, if the handle was dropped unwaited, by the
group's next call after the collective is done; ``all_to_all`` is sends
and receives tagged ``-2**31``; ``TCPStore`` and ``FileStore`` differ as their docstrings say.

Errors: every failure of a collective, the store or a connection is a
``DistError`` (a RuntimeError), of torch.distributed's subclass for what
failed: ``DistBackendError`` for a collective that failed in the backend (a
peer died or left mid-collective, the ranks disagreed about it, an NCCL call
failed), ``DistNetworkError`` for a store that cannot be reached or whose
connection was lost, ``DistStoreError`` for a store that refused or failed a
request. Timeouts are ``DistTimeoutError`` (also a TimeoutError): a
collective's (``DistBackendTimeoutError``, a DistBackendError too, as
PyTorch's NCCL watchdog raises), the store's (``DistStoreTimeoutError``, a
DistStoreError too) and a connection's that never came (``DistNetworkTimeoutError``, a
DistNetworkError too). ``QueueEmptyError`` (a DistStoreError) is a store's
``queue_pop(key, block=False)`` on an empty queue. Debugging: ``DebugLevel``
(from ``DDPC_DISTRIBUTED_DEBUG`` or ``TORCH_DISTRIBUTED_DEBUG``) and
``breakpoint``; ``_debug.py`` says what each level does.

Environment: ``DDPC_STORE_TOKEN`` is the job's store secret (ddpc-run and
ddpc.spawn make one); ``DDPC_HOST_ID`` overrides how ranks decide they share
a host (hostname and boot id by default), and ``DDPC_IFADDR`` the address a
rank advertises to peers on other hosts (by default the local address of its
connection to the store).
"""

import atexit
import collections
import contextlib
import ctypes
import functools
import inspect
import numbers
import os
import pickle
import socket
import sys
import threading
import time
import types
import warnings
from datetime import timedelta
from urllib.parse import parse_qsl, urlencode, urlparse, urlunparse

import numpy as np

from .. import _C, profiler
from .._C import (DistBackendError, DistBackendTimeoutError, DistError, DistNetworkError, DistNetworkTimeoutError,
                  DistStoreError, DistStoreTimeoutError, DistTimeoutError, QueueEmptyError)
from .._dtype import device as _device_of, real_pairs
from .._procs import new_token
from ..tensor import _refresh, _write_back
from . import _debug
from ._debug import DebugLevel, breakpoint, get_debug_level, set_debug_level, set_debug_level_from_env
from ._process_group import (AllgatherOptions, AllreduceCoalescedOptions, AllreduceOptions, AllToAllOptions,
                             BarrierOptions, BroadcastOptions, GatherOptions, ReduceOptions, ReduceScatterOptions,
                             ScatterOptions, _CollectiveMethods)
from ._store import FileStore, HashStore, PrefixStore, Store, TCPStore, _seconds

__all__ = [
    "Backend", "DeviceMesh", "DistError", "DistTimeoutError", "FileStore", "GroupMember", "ProcessGroup", "ReduceOp",
    "TCPStore", "HashStore", "PrefixStore", "Store",
    "P2POp", "Work", "all_gather", "all_gather_into_tensor", "all_gather_object", "all_reduce", "all_to_all",
    "all_to_all_single", "barrier", "batch_isend_irecv", "broadcast", "broadcast_object_list", "destroy_process_group",
    "gather", "gather_object", "get_backend", "get_default_backend_for_device", "get_group_rank",
    "get_process_group_ranks", "get_rank", "get_world_size", "group", "init_device_mesh", "init_process_group",
    "irecv", "is_available", "is_backend_available", "is_gloo_available", "is_initialized", "is_mpi_available",
    "is_nccl_available", "isend", "monitored_barrier", "new_group", "recv", "reduce", "reduce_scatter",
    "reduce_scatter_tensor", "scatter", "scatter_object_list", "send", "shared_buffer",
]
__all__ += [
    "DebugLevel", "DistBackendError", "DistBackendTimeoutError", "DistNetworkError", "DistNetworkTimeoutError",
    "DistStoreError", "DistStoreTimeoutError", "QueueEmptyError", "breakpoint", "default_pg_timeout", "get_debug_level",
    "get_pg_count", "is_ucc_available", "is_xccl_available", "set_debug_level", "set_debug_level_from_env",
    "supports_complex",
]
__all__ += [
    "all_gather_coalesced", "all_gather_single", "all_reduce_coalesced", "gather_into_tensor", "gather_single",
    "get_backend_config", "reduce_scatter_single", "register_rendezvous_handler", "rendezvous", "set_timeout",
    "split_group",
]
__all__ += [
    "AllToAllOptions", "AllgatherOptions", "AllreduceCoalescedOptions", "AllreduceOptions", "BarrierOptions",
    "BroadcastOptions", "GatherOptions", "ReduceOptions", "ReduceScatterOptions", "ScatterOptions",
]

_DTYPE_CODES = {"float32": 0, "float64": 1, "float16": 2, "bfloat16": 3, "int32": 4, "int64": 5, "uint8": 6,
                "complex64": 7, "complex128": 8, "bool": 9}
_DTYPE_NAMES = {code: name for name, code in _DTYPE_CODES.items()}
_DEFAULT_TIMEOUT = timedelta(minutes=30)  # PyTorch's for gloo: a dead peer is noticed in seconds anyway
default_pg_timeout = _DEFAULT_TIMEOUT  # torch.distributed's name for it
# How long rank 0 keeps the store up at shutdown for the others to leave.
_SHUTDOWN_GRACE_S = 10.0
# The tag of the messages all_to_all sends, out of the way of the tags users pick.
_ALL_TO_ALL_TAG = -(2**31)
# The tag of send_object_list's messages, likewise.
_OBJECT_TAG = -(2**31) + 1
# The tag of gather_object's and scatter_object_list's messages: apart from
# send_object_list's, so that their receives never take a send_object_list
# message that is still waiting for its recv_object_list.
_COLLECTIVE_OBJECT_TAG = -(2**31) + 2


class ReduceOp:
    """Reduction operations: ``ReduceOp.SUM``, ``AVG``, ``MIN``, ``MAX``,
    ``PRODUCT`` (also ``PROD``), and for integer tensors on the cpu backend
    the bitwise ``BAND``, ``BOR`` and ``BXOR`` (NCCL has none, as in PyTorch)."""

    SUM = _C.REDUCE_OPS["SUM"]
    AVG = _C.REDUCE_OPS["AVG"]
    MIN = _C.REDUCE_OPS["MIN"]
    MAX = _C.REDUCE_OPS["MAX"]
    PRODUCT = PROD = _C.REDUCE_OPS["PROD"]
    BAND = _C.REDUCE_OPS["BAND"]
    BOR = _C.REDUCE_OPS["BOR"]
    BXOR = _C.REDUCE_OPS["BXOR"]


class Backend:
    CPU = "cpu"
    GLOO = "gloo"
    NCCL = "nccl"


def is_available():
    return True


def is_gloo_available():
    """Whether the host backend is there (always: ddpc's cpu backend answers to "gloo")."""
    return True


def is_nccl_available():
    return "nccl" in _C.backends()


def is_mpi_available():
    return False


def is_ucc_available():
    """False: ddpc has no UCC backend."""
    return False


def is_xccl_available():
    """False: ddpc has no XCCL (Intel GPU) backend."""
    return False


def is_backend_available(backend):
    """Whether this build can run ``backend`` ("cpu" or its alias "gloo", "nccl")."""
    name = str(backend).lower()
    return name in ("cpu", "gloo") or (name == "nccl" and is_nccl_available())


def get_default_backend_for_device(device):
    """The backend for tensors on ``device`` (a device, or its type): "cpu" for
    the host, "nccl" for CUDA, as PyTorch's (which names gloo for the host)."""
    from .._dtype import device as _device
    return "nccl" if _device(device).type == "cuda" else "cpu"


# ---- groups ------------------------------------------------------------------------


class GroupMember:
    """``GroupMember.NON_GROUP_MEMBER`` is what new_group returns on ranks outside the group."""

    NON_GROUP_MEMBER = object()
    WORLD = None


group = GroupMember  # dist.group.WORLD, as in PyTorch


class ProcessGroup(_CollectiveMethods):
    """A set of ranks that run collectives together. ``rank()`` and ``size()``
    are within the group; ``ranks`` are the members' ranks in the default group.
    As PyTorch's, it also runs collectives itself (``pg.allreduce([t]).wait()``,
    see _process_group.py) and has ``name()``, ``group_name``, ``group_desc``
    and ``bound_device_id``."""

    def __init__(self, c_group, ranks, backend, store, prefix, timeout_s):
        self._c = c_group
        self.ranks = list(ranks)
        self.backend = backend
        self._backend_name = backend  # what get_backend() and name() say: "gloo" where asked for by that name
        self._timeout_s = timeout_s   # of its collectives without one of their own (set_timeout changes it)
        self.group_name = prefix      # unique in the job: its keys' prefix in the store
        self.group_desc = "undefined"
        self._store = store
        self._prefix = prefix  # of the group's keys in the store
        self._monitored = 0    # monitored_barrier calls so far
        self._dropped = collections.deque()  # (C work, finish) of handles dropped before wait()
        self._host = None      # on a default nccl group: the cpu group of the same ranks that takes host tensors

    def _finish_dropped(self, wait=False):
        """Makes the copies that finish collectives whose handles were dropped
        unwaited: of those done (with ``wait``, of all, each waited for), so
        that a result lands although nobody waits for it. A failed one's
        error had nobody to go to: its copy is skipped."""
        for _ in range(len(self._dropped)):  # appends from other threads meanwhile wait for the next look
            c_work, finish = self._dropped.popleft()
            if not wait and not c_work.is_completed():
                self._dropped.append((c_work, finish))
                continue
            try:
                c_work.wait(None)
            except DistError:
                continue
            finish()

    def rank(self):
        return self._c.rank

    def size(self):
        return self._c.size

    def name(self):
        """The backend's name, as get_backend gives it."""
        return self._backend_name

    @property
    def bound_device_id(self):
        """The device init_process_group was given as ``device_id`` (a ddpc.device), or None."""
        return _world.bound_device if self in (_world.default, getattr(_world.default, "_host", None)) else None

    def _close(self, wait):
        """Closes the group (and its host companion); with ``wait``, after finishing dropped collectives.
        The pinned blocks that staged CUDA tensors on the cpu backend (cached for reuse) are freed."""
        for g in (self._host, self):
            if g is not None and g._c is not None:
                if wait:
                    g._finish_dropped(wait=True)
                g._c.close()
                g._c = None
            if g is not None:
                g._store = None
        _C.cuda_host_empty_cache()

    def __reduce__(self):
        raise TypeError("cannot pickle a ProcessGroup: it is tied to this process's connections and shared memory")

    def __repr__(self):
        return f"ProcessGroup(rank={self._c.rank}, size={self._c.size}, backend={self.backend!r})"


class _World:
    def __init__(self):
        self.store = None        # the _C.Store every group of this job uses
        self.owns_store = False  # made by init_process_group (not passed as store=)
        self.rendezvous_file = None  # file:// init on rank 0: removed when the group ends
        self.prefix = ""         # of this init's keys in the store
        self.default = None      # ProcessGroup of all ranks
        self.groups = []
        self.next_group_id = 1
        self.local_groups = {}   # members -> groups they made with use_local_synchronization
        self.rank = -1
        self.timeout = None
        self.device = None       # this rank's GPU on the nccl backend
        self.bound_device = None  # init_process_group's device_id (the default group's bound_device_id)


_world = _World()


def _forget_parent_group():
    """In a forked child: the parent's groups and store are not this process's
    to use or to close (the C side forgets the parent's monitor likewise), so
    the child starts with no group and may create its own."""
    global _world
    if _world.default is not None:
        # Freeing the copies would tear down what the parent still uses (the
        # store thread's wake pipe is shared) and wait for threads that do not
        # exist here, so they keep a reference that is never dropped, not even
        # when the interpreter exits.
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(_world))
        _world = _World()
        GroupMember.WORLD = None


os.register_at_fork(after_in_child=_forget_parent_group)


def _env_int(name, low, high=None):
    """Environment variable ``name`` as an integer in [low, high]."""
    value = os.environ[name]
    try:
        n = int(value)
    except ValueError:
        n = None
    if n is None or n < low or (high is not None and n > high):
        wanted = f"an integer >= {low}" if high is None else f"an integer from {low} to {high}"
        raise ValueError(f"environment variable {name}={value!r} is not {wanted}")
    return n


def _rank_and_size_from_env(rank, world_size):
    env = os.environ
    for rk, sk in (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS"),
                   ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")):
        if rk in env and sk in env:
            if rank < 0:
                rank = _env_int(rk, 0)
            if world_size < 0:
                world_size = _env_int(sk, 1)
            break
    if rank < 0 or world_size < 0:
        raise ValueError("rank and world size are unknown: pass rank= and world_size=, or set RANK and WORLD_SIZE "
                         "(ddpc-run does), or run under srun or mpirun")
    return rank, world_size


def _master_from_env():
    addr = os.environ.get("MASTER_ADDR")
    if not addr or not os.environ.get("MASTER_PORT"):
        raise ValueError("env:// needs MASTER_ADDR and MASTER_PORT in the environment (ddpc-run sets them)")
    return addr, _env_int("MASTER_PORT", 1, 65535)


def _url_rank_and_size(url):
    """The rank and world size in a rendezvous URL's query (where rendezvous()
    puts its arguments), else from the environment, checked."""
    query = dict(parse_qsl(url.query))
    try:
        rank, world_size = int(query.get("rank", -1)), int(query.get("world_size", -1))
    except ValueError:
        raise ValueError(f"rendezvous: rank and world_size in {url.geturl()!r} must be integers") from None
    rank, world_size = _rank_and_size_from_env(rank, world_size)
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in [0, {world_size})")
    return rank, world_size


def _env_rendezvous_handler(url, timeout=_DEFAULT_TIMEOUT, **kwargs):
    """env://: MASTER_ADDR and MASTER_PORT name rank 0's TCPStore; the rank and
    world size come from the URL, else RANK and WORLD_SIZE (or SLURM's or Open MPI's)."""
    del kwargs
    rank, world_size = _url_rank_and_size(urlparse(url))
    addr, port = _master_from_env()
    yield TCPStore(addr, port, world_size, rank == 0, timeout), rank, world_size
    raise RuntimeError("Unable to perform re-rendezvous using env:// method")


def _tcp_rendezvous_handler(url, timeout=_DEFAULT_TIMEOUT, **kwargs):
    """tcp://host:port: rank 0 hosts the TCPStore there."""
    del kwargs
    parsed = urlparse(url)
    if not parsed.hostname or not parsed.port:
        raise ValueError(f"init_method {url!r} must be tcp://host:port")
    rank, world_size = _url_rank_and_size(parsed)
    yield TCPStore(parsed.hostname, parsed.port, world_size, rank == 0, timeout), rank, world_size
    raise RuntimeError("Unable to perform re-rendezvous using tcp:// method")


def _file_rendezvous_handler(url, **kwargs):
    """file:///path: a FileStore on a file every rank reaches."""
    del kwargs
    parsed = urlparse(url)
    if not parsed.path:
        raise ValueError(f"init_method {url!r} must be file:///path")
    rank, world_size = _url_rank_and_size(parsed)
    yield FileStore(parsed.path, world_size), rank, world_size
    raise RuntimeError("Unable to perform re-rendezvous using file:// method")


_rendezvous_handlers = {"env": _env_rendezvous_handler, "tcp": _tcp_rendezvous_handler,
                        "file": _file_rendezvous_handler}


def register_rendezvous_handler(scheme, handler):
    """Makes ``rendezvous`` (and init_process_group's ``init_method``) take
    URLs of ``scheme``: ``handler(url, **kwargs)`` is a generator that yields
    (store, rank, world size), where the store is a ddpc.distributed store.
    A scheme already registered is a RuntimeError, as in PyTorch."""
    if scheme in _rendezvous_handlers:
        raise RuntimeError(f"Rendezvous handler for {scheme}:// already registered")
    _rendezvous_handlers[scheme] = handler


def rendezvous(url, rank=-1, world_size=-1, **kwargs):
    """The generator of (store, rank, world size) that the handler of
    ``url``'s scheme makes: ``env://``, ``tcp://host:port``, ``file:///path``
    or one registered with register_rendezvous_handler. ``rank`` and
    ``world_size`` (where not -1) go to the handler in the URL's query, as
    in PyTorch; ``kwargs`` (``timeout``) are the handler's. ddpc's handlers
    give a TCPStore (rank 0 hosts it) or a FileStore; where the URL has no
    rank or world size they read them from the environment, as
    init_process_group does."""
    if not isinstance(url, str):
        raise RuntimeError(f"`url` must be a string. {type(url)}: {url}")
    for name, value in (("rank", rank), ("world_size", world_size)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise RuntimeError(f"`{name}` must be an integer. {value}")
    parsed = urlparse(url)
    if rank != -1 or world_size != -1:
        query = parse_qsl(parsed.query)
        if any(k in ("rank", "world_size") for k, _ in query):
            raise ValueError(f"rendezvous: the url {url!r} has rank or world_size in it already; pass them in one "
                             "place")
        query += [(k, str(v)) for k, v in (("rank", rank), ("world_size", world_size)) if v != -1]
        url = urlunparse(parsed._replace(query=urlencode(query)))
    if parsed.scheme not in _rendezvous_handlers:
        raise RuntimeError(f"No rendezvous handler for {parsed.scheme}:// (ddpc has env://, tcp://host:port and "
                           "file:///path; register_rendezvous_handler adds others)")
    return _rendezvous_handlers[parsed.scheme](url, **kwargs)


def _store_through(store, rank, world_size, timeout_s):
    """A _C.Store of this init's own, made through ``store``, one that the
    groups cannot talk to (a FileStore, a HashStore): rank 0 hosts it and
    publishes its address and secret there, the others read them. The key
    is named by the ranks' count of their inits in ``store`` (per world
    size), so that a store used again does not hand out an earlier address."""
    key = f"ddpc/store/w{world_size}i{(store.add(f'ddpc/inits/{world_size}', 1) - 1) // world_size}"
    if rank == 0:
        token = os.environ.get("DDPC_STORE_TOKEN") or new_token()
        c_store = _C.Store(socket.gethostname(), 0, True, token, timeout_s)
        store.set(key, f"{socket.gethostname()} {c_store.port} {token}")
        return c_store
    store.wait([key], timeout_s)
    host, port, token = store.get(key).decode().split()
    return _C.Store(host, int(port), False, token, timeout_s)


def _groups_store(store, rank, world_size, timeout_s):
    """For init_process_group(store=...): the _C.Store the groups use, the
    prefix of this init's keys in it (a PrefixStore's), and whether this
    init made it (through ``store``, which the groups cannot talk to)."""
    base, prefix = store, ""
    while isinstance(base, PrefixStore):
        base, prefix = base.underlying_store, base.prefix + prefix
    if isinstance(base, TCPStore):
        return base._c, prefix, False
    if not isinstance(base, Store):
        raise TypeError("store= must be a ddpc.distributed store (TCPStore, FileStore, HashStore or a PrefixStore of "
                        f"one), got {type(base).__name__}")
    if isinstance(base, HashStore) and world_size > 1:
        raise ValueError(f"store=HashStore() cannot join {world_size} ranks: it lives in one process's memory, and "
                         "ddpc's ranks are processes; pass a TCPStore or a FileStore")
    return _store_through(store, rank, world_size, timeout_s), "", True


def _backend_request(backend):
    """init_process_group's ``backend`` as (a backend, or None to choose one;
    whether an nccl group gets a cpu companion for host tensors). Takes
    PyTorch's per-device form too: "cpu:gloo,cuda:nccl" is nccl with a cpu
    companion, "cuda:gloo" the cpu backend (which also stages CUDA tensors)."""
    if backend is None:
        return None, True
    text = str(backend).lower()
    if ":" not in text:
        return text, False
    pairs = [part.strip().split(":", 1) for part in text.split(",")]
    if any(len(p) != 2 or p[0] not in ("cpu", "cuda") or p[1] not in ("gloo", "cpu", "nccl") for p in pairs):
        raise ValueError(f"unknown backend {backend!r} (use 'cpu', 'gloo', 'nccl' or a device form such as "
                         "'cpu:gloo,cuda:nccl')")
    chosen = dict(pairs)
    if chosen.get("cpu") == "nccl":
        raise ValueError(f"backend {backend!r}: nccl reduces CUDA tensors only; give the cpu device 'gloo'")
    return ("nccl", "cpu" in chosen) if chosen.get("cuda") == "nccl" else ("cpu", False)


def _pick_backend(backend, store, prefix, rank, world_size, timeout_s, device):
    if backend is not None:
        backend = str(backend).lower()
        if backend == "gloo":
            return "cpu"
        if backend not in ("cpu", "nccl"):
            raise ValueError(f"unknown backend {backend!r} (use 'cpu', 'gloo' or 'nccl')")
        return backend
    # nccl only when this build can run it and every rank has a GPU of its own
    # (NCCL refuses two ranks on one GPU): say, 2 ranks on a machine with 1 GPU
    # get the cpu backend, which also stages CUDA tensors.
    if "nccl" not in _C.backends():
        return "cpu"
    gpu = ""
    if 0 <= device < _C.cuda_device_count():
        gpu = f"{socket.gethostname()}/{_C.cuda_properties(device)['pci_bus_id']}"
    store.set(f"{prefix}gpus/{rank}", gpu.encode())
    gpus = [store.get(f"{prefix}gpus/{r}", timeout_s) for r in range(world_size)]
    return "nccl" if all(gpus) and len(set(gpus)) == world_size else "cpu"


def _rank_device(device_id):
    """This rank's GPU: ``device_id`` if given, else LOCAL_RANK (as ddpc-run sets it)."""
    if device_id is None:
        return _env_int("LOCAL_RANK", 0) if "LOCAL_RANK" in os.environ else 0
    if isinstance(device_id, int):
        return device_id
    index = getattr(device_id, "index", None)
    if index is None:
        from .._dtype import device as _device
        index = _device(device_id).index
    return 0 if index is None else int(index)


def _make_group(store, prefix, rank, size, ranks, backend, timeout_s):
    """The C process group of the cpu backend, or the NCCL communicator's adapter."""
    if backend == "nccl":
        from .._nccl import NcclGroup
        return NcclGroup(store, prefix + "nccl", rank, size, _world.device, timeout_s, socket.gethostname())
    return _C.ProcessGroup(store, prefix, rank, size, ranks, backend, timeout_s)


def _new_process_group(store, prefix, rank, ranks, backend, timeout_s, with_host):
    """A ProcessGroup of ``ranks`` (this rank being ``rank`` among them). An
    nccl one ``with_host`` also gets a cpu group of the same ranks, which
    takes the collectives of host tensors (as PyTorch's default backend
    pairs gloo with nccl)."""
    group = ProcessGroup(_make_group(store, prefix, rank, len(ranks), ranks, backend, timeout_s), ranks, backend,
                         store, prefix, timeout_s)
    if backend == "nccl" and with_host:
        try:
            group._host = ProcessGroup(_make_group(store, prefix + "host/", rank, len(ranks), ranks, "cpu", timeout_s),
                                       ranks, "cpu", store, prefix + "host/", timeout_s)
        except BaseException:
            group._close(wait=False)
            raise
    return group


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None,
                       group_name="", pg_options=None, device_id=None):
    """Joins the default process group (collective: every rank calls it).

    ``init_method``: ``env://`` (default; RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT, or SLURM_PROCID/SLURM_NTASKS, OMPI_COMM_WORLD_RANK/SIZE),
    ``tcp://host:port``, ``file:///path``, or a scheme added with
    register_rendezvous_handler (see ``rendezvous``). ``backend``: ``"cpu"`` (alias
    ``"gloo"``), ``"nccl"``, or PyTorch's per-device form
    (``"cpu:gloo,cuda:nccl"``: nccl paired with a cpu group for host
    tensors). By default nccl when every rank has a GPU of its own, paired
    (as PyTorch pairs gloo with nccl) with a cpu group that takes the
    collectives of host tensors and arrays, else cpu (which also takes CUDA
    tensors, staged through the host). Every collective fails with
    DistTimeoutError after ``timeout`` and with DistError as soon as a peer
    dies.

    ``store`` (instead of ``init_method``; give ``rank`` and ``world_size``
    with it): a TCPStore that every rank reaches, or a FileStore (rank 0
    hosts a TCP store of this init's own and publishes its address in the
    file; a HashStore does the same for one rank, since it cannot reach
    other processes), or a PrefixStore of one (this init's keys go under
    its prefix). A missing ``rank`` or ``world_size`` is a ValueError
    (PyTorch asserts).
    """
    del group_name, pg_options
    if _world.default is not None:
        raise RuntimeError("the default process group is already initialised; call destroy_process_group() first")
    timeout_s = _seconds(timeout, _DEFAULT_TIMEOUT.total_seconds())
    if store is not None:
        if init_method is not None:
            raise ValueError("init_process_group: pass init_method or store=, not both")
        if rank < 0 or world_size < 1:
            raise ValueError("with store=, pass rank= and world_size= too (they are not read from the environment)")
        if rank >= world_size:
            raise ValueError(f"rank {rank} is not in [0, {world_size})")
        c_store, key_prefix, made_store = _groups_store(store, rank, world_size, timeout_s)
    else:
        init_method = init_method or "env://"
        store, rank, world_size = next(rendezvous(init_method, rank, world_size, timeout=timedelta(seconds=timeout_s)))
        if not 0 <= rank < world_size:
            raise ValueError(f"init_method {init_method!r} gave rank {rank}, not in [0, {world_size})")
        c_store, key_prefix, _ = _groups_store(store, rank, world_size, timeout_s)
        made_store = True
        if rank == 0 and urlparse(init_method).scheme == "file":
            _world.rendezvous_file = urlparse(init_method).path
    # A store passed as store= outlives destroy_process_group() with the keys
    # of the group it served, so each init's keys get a prefix of their own:
    # the ranks count their inits in the store, per world size (a job of
    # another size may follow on the same store).
    count = c_store.add(f"{key_prefix}ddpc/inits/{world_size}", 1)
    prefix = f"{key_prefix}w{world_size}i{(count - 1) // world_size}/"
    _world.device = _rank_device(device_id)
    gloo = str(backend).lower() == "gloo"
    backend, with_host = _backend_request(backend)
    backend = _pick_backend(backend, c_store, prefix, rank, world_size, timeout_s, _world.device)
    _C.monitor_start(c_store, rank, prefix)
    try:
        default = _new_process_group(c_store, prefix + "g0/", rank, list(range(world_size)), backend, timeout_s,
                                     with_host)
    except BaseException:
        _C.monitor_stop(1.0)
        raise
    _world.store = c_store
    _world.owns_store = made_store
    _world.prefix = prefix
    _world.rank = rank
    _world.timeout = timeout_s
    _world.default = default
    _world.bound_device = None if device_id is None else _device_of(device_id)
    if gloo:
        default._backend_name = "gloo"
    default.group_desc = "default_pg"
    GroupMember.WORLD = _world.default


def is_initialized():
    return _world.default is not None


def _on_host(t):
    """Whether ``t`` (a tensor, buffer or array) lives in host memory."""
    if isinstance(t, np.ndarray):
        return True
    buf = getattr(t, "_buf", t)
    return isinstance(buf, _C.Buffer) and buf.device < 0


_HOST = object()  # _group's tensor for work done on the host (objects, shared buffers)


class _NotInitializedError(ValueError, RuntimeError):
    """What a call that needs the default group raises before
    init_process_group: a ValueError, as PyTorch raises there, that is also
    the RuntimeError that ddpc raised, for code that catches that."""


def _group(group, tensor=None):
    """The ProcessGroup that ``group`` names (None: the default one); given the
    collective's ``tensor``, the host companion of an nccl group where the
    tensor lives on the host."""
    if _world.default is None:
        raise _NotInitializedError("Default process group has not been initialized, please make sure to call "
                                   "init_process_group.")
    if group is None:
        group = _world.default
    elif group is GroupMember.NON_GROUP_MEMBER:
        raise ValueError("this rank is not a member of the group")
    elif not isinstance(group, ProcessGroup):
        raise TypeError(f"group must be a ProcessGroup, got {type(group).__name__}")
    if group._c is None:
        raise ValueError("the process group was destroyed")
    if group._host is not None and (tensor is _HOST or tensor is not None and _on_host(tensor)):
        group = group._host
    if group._dropped:
        group._finish_dropped()
    return group


def get_rank(group=None):
    if group is GroupMember.NON_GROUP_MEMBER:
        return -1
    return _group(group).rank()


def get_world_size(group=None):
    if group is GroupMember.NON_GROUP_MEMBER:
        return -1
    return _group(group).size()


def get_backend(group=None):
    """The group's backend: "nccl", "cpu", or "gloo" where it was asked for by
    that name (the cpu backend either way)."""
    return _group(group)._backend_name


def get_group_rank(group, global_rank):
    """The rank within ``group`` of default-group rank ``global_rank``."""
    return _group_rank(_group(group), global_rank, "global_rank")


def get_global_rank(group, group_rank):
    """The default-group rank of member ``group_rank`` of ``group`` (None: the default group)."""
    return _group(group).ranks[group_rank]


def collective_device(group=None):
    """Where this rank's tensors for ``group``'s collectives must live: its GPU
    on the nccl backend, the host on the cpu backend (which also stages CUDA tensors)."""
    return f"cuda:{_world.device}" if _group(group).backend == "nccl" else "cpu"


def _metadata_device(group=None):
    """Where small data that starts on the host (model descriptions, flags,
    checkpoints) crosses ``group``: the host where the group takes host
    tensors (the cpu backend, or nccl with its host companion), else its GPU."""
    return "cpu" if _group(group, _HOST).backend == "cpu" else collective_device(group)


def shared_buffer(nbytes, group=None):
    """``nbytes`` of zeroed host memory that every rank of ``group`` on this
    host maps, or None where the group has no other rank on this host or is
    not on the cpu backend. An all_reduce of a tensor lying in it, at the
    same offset on every rank, reduces the ranks' data where they are instead
    of copying them through the staging areas (about half the memory
    traffic); DistributedDataParallel keeps its buckets in one. Collective:
    the group's ranks call it in the same order, with the same size.
    ``buffer.peer(j)`` is the j-th local rank's buffer as this rank maps it,
    and ``buffer.signal(offset, value)`` with the group's C handle's
    ``await_value(buffer, offset, value)`` order protocols of one's own over
    them (DistributedDataParallel's exchange of linear weight gradients)."""
    g = _group(group, _HOST)
    if g.backend != "cpu" or g._c.local_size < 2:
        return None
    return g._c.share(int(nbytes))


def new_group(ranks=None, timeout=None, backend=None, pg_options=None, use_local_synchronization=False,
              group_desc=None):
    """A group of some ranks of the default group. Every rank of the default
    group must call it, in the same order; ranks outside get
    ``GroupMember.NON_GROUP_MEMBER``. With ``use_local_synchronization=True``
    only the members call it (in the same order among themselves).
    ``pg_options`` (NCCL's tuning in PyTorch) is taken for PyTorch's
    signature; ``group_desc`` becomes the group's ``group_desc``."""
    del pg_options
    world = _group(None)
    given = list(range(world.size()) if ranks is None else (int(r) for r in ranks))
    if len(set(given)) != len(given):
        raise ValueError(f"new_group: ranks must not repeat, got {given}")
    ranks = sorted(given)
    if not ranks or ranks[0] < 0 or ranks[-1] >= world.size():
        raise ValueError(f"new_group: ranks must be in [0, {world.size()}), got {ranks}")
    if use_local_synchronization:
        if _world.rank not in ranks:
            return GroupMember.NON_GROUP_MEMBER
        group_id = _local_group_id(ranks)
    else:
        group_id = _world.next_group_id
        _world.next_group_id += 1
        if _world.rank not in ranks:
            return GroupMember.NON_GROUP_MEMBER
    with_host = backend is None and world._host is not None
    name = world._backend_name if backend is None else str(backend).lower()
    backend = world.backend if backend is None else ("cpu" if backend == "gloo" else backend)
    return _add_group(ranks, group_id, backend, name, with_host, _seconds(timeout, _world.timeout), group_desc)


def _group_with(ranks):
    """This process's live group whose members are ``ranks``, or None. Of
    several, the latest made (the default group last): the members made
    them in one order, so each finds the same one."""
    members = sorted(ranks)
    for g in [*reversed(_world.groups), _world.default]:
        if g is not None and sorted(g.ranks) == members:
            return g
    return None


def _local_group_id(ranks):
    """The id of a group that only its members make: named by them (in the
    order given) and how many such groups they made before, so that ranks
    outside need not count it."""
    members = "-".join(map(str, ranks))
    count = _world.local_groups[members] = _world.local_groups.get(members, 0) + 1
    return f"l{members}n{count}"


def _add_group(ranks, group_id, backend, name, with_host, timeout_s, desc=None):
    """This rank's new ProcessGroup of ``ranks`` (default-group ranks, in
    group-rank order), its keys named by ``group_id``."""
    group = _new_process_group(_world.store, f"{_world.prefix}g{group_id}/", ranks.index(_world.rank), ranks,
                               backend, timeout_s, with_host)
    if name == "gloo":
        group._backend_name = name
    if desc is not None:
        group.group_desc = desc
    _world.groups.append(group)
    return group


def split_group(parent_pg=None, split_ranks=None, timeout=None, pg_options=None, group_desc=None, backend=None):
    """Splits ``parent_pg`` (default: the default group) into the groups of
    ``split_ranks``, lists of ranks within the parent (disjoint; each list's
    order is its group's rank order); returns the one this rank is in, or
    ``GroupMember.NON_GROUP_MEMBER`` where it is in none. Every rank of the
    parent calls it with the same lists; only the members of each split
    make it (ranks outside the parent need not call it). ``backend``
    keeps a part of the parent's backends (say, "cpu:gloo" of a
    "cpu:gloo,cuda:nccl" parent, see get_backend_config); ``timeout`` is
    new_group's; ``pg_options`` is taken for PyTorch's signature;
    ``group_desc`` becomes the group's ``group_desc``."""
    del pg_options
    if not split_ranks:
        raise ValueError("split_group: split_ranks cannot be None or empty")
    parent = _group(parent_pg)
    owner = {}
    for split in split_ranks:
        if not isinstance(split, (list, tuple)) or not split:
            raise ValueError(f"split_group: each split must be a non-empty list of ranks, got {split!r}")
        for r in split:
            if isinstance(r, bool) or not isinstance(r, numbers.Integral) or not 0 <= r < parent.size():
                raise ValueError(f"split_group: rank {r!r} of split {list(split)} is not a rank of the parent group "
                                 f"(ranks within it, in [0, {parent.size()}))")
            if r in owner:
                raise ValueError(f"split_group: rank {r} is in two splits ({owner[r]} and {list(split)}); splits "
                                 "must be disjoint")
            owner[r] = list(split)
    mine = owner.get(parent.rank())
    if mine is None:
        return GroupMember.NON_GROUP_MEMBER
    ranks = [parent.ranks[r] for r in mine]
    kind, with_host = _split_backend(parent, backend)
    name = parent._backend_name if backend is None else str(backend).lower()
    return _add_group(ranks, _local_group_id(ranks), kind, name, with_host, _seconds(timeout, _world.timeout),
                      group_desc)


def _split_backend(parent, backend):
    """(backend, with a host companion) of a split of ``parent``: the
    parent's, or the part of them that ``backend`` names."""
    if backend is None:
        return parent.backend, parent._host is not None
    kind, with_host = _backend_request(backend)
    kind = "cpu" if kind == "gloo" else kind
    has = {parent.backend} | ({"cpu"} if parent._host is not None else set())
    if kind not in has or (with_host and "cpu" not in has):
        raise ValueError(f"split_group: backend {backend!r} is not among the parent group's "
                         f"({get_backend_config(parent)})")
    return kind, with_host


def get_backend_config(group=None):
    """The group's backends by device, as PyTorch writes them (lower case,
    "device:backend" pairs): ddpc's cpu backend (named "cpu" or "gloo")
    plays gloo's part, and also takes CUDA tensors (staged through the
    host), so it is "cpu:gloo,cuda:gloo", as PyTorch's gloo; an nccl group
    with a cpu companion for host tensors (the default on GPUs) is
    "cpu:gloo,cuda:nccl", an nccl group alone "cuda:nccl"."""
    if group is GroupMember.NON_GROUP_MEMBER:
        raise ValueError("get_backend_config: this rank is not a member of the group")
    g = _group(group)
    if g.backend != "nccl":
        return "cpu:gloo,cuda:gloo"
    return "cpu:gloo,cuda:nccl" if g._host is not None else "cuda:nccl"


def set_timeout(timeout, group=None):
    """Sets the timeout (a timedelta, or seconds) of ``group``'s (default:
    the default group's) collectives from now on, its cpu companion's
    too: a collective that takes longer raises DistBackendTimeoutError.
    Collectives already enqueued keep the timeout they were enqueued with,
    and a collective given a timeout of its own (``opts.timeout`` of
    ProcessGroup's methods, barrier's ``timeout``) keeps that one. Groups
    made later keep the timeout init_process_group was given."""
    if group is GroupMember.NON_GROUP_MEMBER:
        raise ValueError("set_timeout: this rank is not a member of the group")
    g = _group(group)
    seconds = _seconds(timeout)
    if seconds is None or not seconds > 0:
        raise ValueError(f"set_timeout: the timeout must be positive, got {timeout!r}")
    for pg in (g, g._host):
        if pg is not None:
            pg._c.set_timeout(seconds)
            pg._timeout_s = seconds


def get_pg_count():
    """How many process groups this rank made since init_process_group, as
    PyTorch counts them: the default group and each new_group call (new_group
    counts on ranks outside the group too, except with
    use_local_synchronization); 0 without a default group."""
    if _world.default is None:
        return 0
    return _world.next_group_id + sum(_world.local_groups.values())


def new_subgroups(group_size=None, group=None, timeout=None, backend=None, pg_options=None):
    """Splits the default group into groups of ``group_size`` consecutive ranks
    (default: LOCAL_WORLD_SIZE, the ranks per node that ddpc-run and torchrun
    set, else the number of GPUs here); returns (this rank's group, all of
    them), where the groups this rank is not in are
    ``GroupMember.NON_GROUP_MEMBER``. Every rank must call it, as new_group.
    ``group`` must be None (ddpc splits the default group only) and
    ``pg_options`` is ignored."""
    del pg_options
    if group is not None:
        raise ValueError("new_subgroups: ddpc splits the default group only (group=None)")
    world = _group(None)
    if group_size is None:
        group_size = int(os.environ.get("LOCAL_WORLD_SIZE") or 0) or _C.cuda_device_count()
        if not group_size:
            raise ValueError("new_subgroups: give group_size (LOCAL_WORLD_SIZE is not set and there is no GPU)")
    if group_size <= 0 or world.size() % group_size:
        raise ValueError(f"new_subgroups: group_size {group_size} must be positive and divide the world size "
                         f"{world.size()}")
    subgroups = [new_group(range(start, start + group_size), timeout=timeout, backend=backend)
                 for start in range(0, world.size(), group_size)]
    return subgroups[_world.rank // group_size], subgroups


def new_subgroups_by_enumeration(ranks_per_subgroup_list, timeout=None, backend=None, pg_options=None):
    """A group for each list of ranks in ``ranks_per_subgroup_list`` (no rank
    in two of them); returns (this rank's group, or None where it is in
    none, all of them), as torch.distributed's. Every rank must call it, as
    new_group. ``pg_options`` is ignored."""
    del pg_options
    seen = {}
    for ranks in ranks_per_subgroup_list:
        for r in ranks:
            if r in seen:
                raise ValueError(f"new_subgroups_by_enumeration: rank {r} is in more than one subgroup")
            seen[r] = True
    subgroups = [new_group(ranks, timeout=timeout, backend=backend) for ranks in ranks_per_subgroup_list]
    mine = next((s for s, ranks in zip(subgroups, ranks_per_subgroup_list) if _world.rank in ranks), None)
    return mine, subgroups


def get_node_local_rank(fallback_rank=None):
    """This process's rank on its node: LOCAL_RANK, which ddpc-run and torchrun
    set, else ``fallback_rank``; without either it raises."""
    if "LOCAL_RANK" in os.environ:
        return _env_int("LOCAL_RANK", 0)
    if fallback_rank is not None:
        return int(fallback_rank)
    raise RuntimeError("LOCAL_RANK is not set (start the processes with ddpc-run or torchrun), and no "
                       "fallback_rank was given")


def is_torchelastic_launched():
    """Whether this process was started by an elastic launcher: torchrun, or
    ddpc-run, which sets TORCHELASTIC_RUN_ID as torchrun does (the variable
    PyTorch checks)."""
    return os.environ.get("TORCHELASTIC_RUN_ID") is not None


def destroy_process_group(group=None):
    """Releases a group; without an argument, every group and the rendezvous.

    Rank 0 hosts the store, so it waits (briefly) for the other ranks to leave
    before closing it."""
    if _world.default is None:
        return
    if group is GroupMember.NON_GROUP_MEMBER:  # a rank outside the group has nothing to release (as PyTorch)
        return
    if group is not None and group is not _world.default:
        group = _group(group)
        group._close(wait=True)
        _world.groups = [g for g in _world.groups if g is not group]
        return
    _leave(wait_for_others=True)


def _leave(wait_for_others, at_exit=False):
    """Releases every group and the rendezvous. With ``wait_for_others``,
    rank 0 waits for the others to leave before it closes the store it
    hosts, and the others wait for that (each wait brief), unless ``at_exit``:
    no init follows in a process that ends, and one that ends early (say by
    sys.exit(1), which sets no sys.last_value) must not outlive its exit
    while the others work on."""
    if _world.default is None:
        return
    size = _world.default.size()
    for g in _world.groups + [_world.default]:
        g._close(wait_for_others)
    grace = min(_world.timeout, _SHUTDOWN_GRACE_S)
    _C.monitor_stop(grace)
    if wait_for_others and size > 1:
        try:
            if _world.rank == 0:
                _world.store.wait_departed(size, grace)
                if not _world.owns_store:
                    _world.store.set(_world.prefix + "released", b"")
            elif not at_exit:
                # An init from here on must not begin before rank 0 has seen
                # every rank leave (it would count as still here) and closed
                # the store it made (it would be joined); the closing ends
                # this wait by dropping the connection.
                _world.store.wait([_world.prefix + "released"], grace)
        except DistError:
            pass
    if _world.rendezvous_file:
        # Its address would be stale: the next job on the same file:// path starts afresh.
        with contextlib.suppress(OSError):
            os.remove(_world.rendezvous_file)
    _world.__init__()
    GroupMember.WORLD = None


def _leave_at_exit():
    # An uncaught exception (whose traceback Python has printed, setting
    # sys.last_value) ends this process: the other ranks may be waiting for
    # this one and leave only once they learn it is gone, so rank 0 does not
    # wait for them.
    _leave(wait_for_others=getattr(sys, "last_value", None) is None, at_exit=True)


atexit.register(_leave_at_exit)


# ---- tensors -----------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _np_dtype_name(dtype):
    """A numpy dtype's name, remembered: numpy works ``dtype.name`` out in
    Python each time, a cost every collective on an array would pay."""
    return dtype.name


def _dtype_code(name):
    try:
        return _DTYPE_CODES[name]
    except KeyError:
        raise TypeError(f"dtype {name} is not supported by collectives") from None


class _Arg:
    """A tensor argument as the C layer takes it: host memory and a dtype code.

    On the cpu backend, CUDA tensors are staged through a pinned host buffer
    (from the pinned blocks _C caches for reuse, freed when the group closes)
    and ``finish()`` copies the result back to the device; the nccl backend
    takes CUDA buffers as they are."""

    def __init__(self, t, group, writable=True):
        buf = getattr(t, "_buf", t)
        self.device_buf = self.copy = None
        if group.backend == "nccl" and not (isinstance(buf, _C.Buffer) and buf.device >= 0):
            raise TypeError(f"the nccl backend reduces CUDA tensors; got {type(t).__name__} on the host (move "
                            "it with .cuda(), use backend='cpu', or init_process_group() without a backend, "
                            "which pairs nccl with a cpu group for host tensors)")
        if isinstance(buf, _C.Buffer):
            self.code = _dtype_code(buf.dtype)
            self.numel = buf.numel
            buf = real_pairs(buf)  # a complex tensor as its view_as_real pairs, as in PyTorch
            # A copy standing for a view (x.t(), x[:, 0]) goes with its source's current values, and a result
            # written into it goes back into the source when the collective finishes, as through PyTorch's view.
            self.copy = t if getattr(t, "_not_a_view", None) is not None else None  # (a Tensor's; a Buffer is itself)
            if self.copy is not None:
                _refresh(t)
                if not writable:
                    self.copy = None
            if writable:
                buf.bump_version()  # an in-place write, as autograd counts them
            if buf.device >= 0 and group.backend != "nccl":
                # A blocking copy waits for the compute stream only: a whole-device
                # synchronize would also wait for NCCL work of other groups, which may
                # need peers that are waiting in this collective.
                host = _C.Buffer(buf.shape, buf.dtype, -1, pin_memory=True)
                _C.copy(host, buf)
                self.device_buf = buf if writable else None
                buf = host
            self.obj = buf
        elif isinstance(t, np.ndarray):
            if not t.flags.c_contiguous:
                raise ValueError("collectives need C-contiguous numpy arrays")
            if writable and not t.flags.writeable:
                raise ValueError("collective output array is read-only")
            if not t.dtype.isnative:
                raise TypeError(f"the array's bytes are in the other byte order ({t.dtype.str}); convert it first, "
                                "e.g. a.astype(a.dtype.newbyteorder('='))")
            self.code = _dtype_code(_np_dtype_name(t.dtype))
            self.numel = t.size
            self.obj = t
        else:
            raise TypeError(f"collectives take ddpc.Tensor or numpy.ndarray, got {type(t).__name__}")

    def finish(self):
        if self.device_buf is not None:
            _C.copy(self.device_buf, self.obj)
        if self.copy is not None:
            _write_back(self.copy)

    def after(self):
        """What must run once the collective is done, or None."""
        return self.finish if self.device_buf is not None or self.copy is not None else None


_UNSET = object()  # (a Future's value not given)
_futures_lock = threading.Lock()  # a Future's completion against then() registering on it


class Future:
    """A value that an asynchronous collective delivers, like
    ``torch.futures.Future``: ``wait()`` (or ``value()``) waits and returns
    it (or raises the collective's error); ``done()`` says whether waiting
    would return at once. What comm hooks return, and what
    ``Work.get_future()`` gives (its value is the list of the collective's
    output tensors, as in PyTorch). ``then(fn)`` is a new Future whose value
    is ``fn(this_future)``: fn runs once, when this one completes (at once if
    it has), and an error it raises is the new Future's. A collective's
    Future completes when something waits for it, or for a Future after it,
    or asks whether it is done (ddpc has no completion thread), where
    PyTorch's completes on its own. ``Future()`` alone is completed by
    ``set_result`` or ``set_exception``, as PyTorch's (waiting for it blocks
    until then); ``devices`` is taken and changes nothing."""

    def __init__(self, work=None, value=_UNSET, parent=None, fn=None, *, devices=None):
        del devices  # (PyTorch's CUDA devices to synchronise; a value here is ready when set)
        self._work, self._parent, self._fn = work, parent, fn
        self._value = None if value is _UNSET else value
        self._error, self._children = None, []
        self._done = threading.Event()
        self._by_hand = work is None and parent is None and value is _UNSET
        if work is None and parent is None and value is not _UNSET:
            self._done.set()
        if parent is not None:
            with _futures_lock:
                waiting = not parent._done.is_set()
                if waiting:
                    parent._children.append(self)
            if not waiting:
                self._run(parent)

    def _run(self, parent):
        """A then() Future: fn on its completed parent."""
        try:
            value, error = self._fn(parent), None
        except Exception as e:  # noqa: BLE001  (whatever fn raises is this Future's error)
            value, error = None, e
            if e is not parent._error:  # the callback's own error, as PyTorch's RuntimeError; a failed
                # collective's error (re-raised by the callback's wait) stays itself, DistError and all
                error = RuntimeError(f"Got the following error when running the callback: {type(e).__name__}: {e}")
                error.__cause__ = e
        self._complete(value, error)

    def _complete(self, value, error):
        with _futures_lock:
            self._value, self._error = value, error
            self._done.set()
            children, self._children = self._children, []
        for child in children:
            child._run(self)

    def wait(self):
        if not self._done.is_set():
            if self._work is not None:
                try:
                    self._work.wait()
                except Exception as e:  # noqa: BLE001  (the collective's error, for every waiter)
                    self._complete(None, e)
                else:
                    self._complete(self._value, None)
            elif self._parent is not None:
                self._parent.wait()  # (completes this one, raising or not)
            self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value

    def value(self):
        return self.wait()

    def then(self, fn):
        return Future(parent=self, fn=fn)

    def done(self):
        if not self._done.is_set():
            ready = self._work.is_completed() if self._work is not None else \
                self._parent is not None and self._parent.done()
            if ready:
                try:
                    self.wait()
                except Exception:  # noqa: BLE001  (done, with an error that wait() raises)
                    pass
        return self._done.is_set()

    def set_result(self, result):
        """Completes a ``Future()`` with ``result``."""
        self._complete_by_hand(result, None)

    def set_exception(self, error):
        """Completes a ``Future()`` with an error that ``wait()`` raises."""
        if not isinstance(error, BaseException):
            raise TypeError(f"set_exception takes an exception, got {type(error).__name__}")
        self._complete_by_hand(None, error)

    def _complete_by_hand(self, value, error):
        if not self._by_hand or self._done.is_set():
            raise RuntimeError("Future can only be marked completed once (and only one made without a collective "
                               "or a value)")
        self._complete(value, error)


def collect_all(futures):
    """A Future whose value, once every one of ``futures`` is done, is that list."""
    futures = list(futures)
    return Future(_All(futures), futures)


def wait_all(futures):
    """Waits for every one of ``futures`` and returns their values, in order."""
    return [f.wait() for f in futures]


class _All:
    """Several futures waited for as one collective (collect_all's)."""

    def __init__(self, futures):
        self._futures = futures

    def wait(self):
        for f in self._futures:
            try:
                f.wait()
            except Exception:  # noqa: BLE001  (as PyTorch's: each future keeps its error, for its own wait)
                pass

    def is_completed(self):
        return all(f.done() for f in self._futures)


class Work:
    """Handle of an asynchronous collective (``async_op=True``)."""

    def __init__(self, c_work, finish=None, ranks=None, source=None, group=None, outputs=None):
        self._c = c_work
        self._finish = finish
        self._group = group    # finishes the collective if this handle is dropped unwaited
        self._ranks = ranks    # an irecv from any rank: its group's members, to name the sender
        self._source = source  # an irecv from a given rank: that rank
        self._outputs = outputs  # what get_future() delivers

    def get_future(self):
        """A Future whose value, once the collective is done, is the list of its output tensors."""
        return Future(self, list(self._outputs or ()))

    def __del__(self):
        if self._finish is not None and self._group is not None and self._group._c is not None:
            self._group._dropped.append((self._c, self._finish))

    def source_rank(self):
        """The rank (in the default group) that sent what a finished ``irecv`` received."""
        if self._source is not None:
            return self._source
        if self._ranks is None:
            raise RuntimeError("source_rank() is for the handle of an irecv")
        sender = self._c.source()
        if sender < 0:
            raise RuntimeError("source_rank(): the irecv failed; wait() raises its error")
        return self._ranks[sender]

    def wait(self, timeout=None):
        """Blocks until the collective is done (raising its error if it failed)."""
        frame = profiler._open_wait() if profiler._is_profiler_enabled else None
        try:
            self._c.wait(_seconds(timeout))
            if self._finish is not None:
                finish, self._finish = self._finish, None
                finish()
        finally:
            if frame is not None:
                profiler._close(frame)
        return True

    def is_completed(self):
        return self._c.is_completed()

    def exception(self):
        """The error of a collective that failed (what wait() raises); None while it runs and once it succeeded."""
        if not self._c.is_completed():
            return None
        try:
            self._c.wait(0)  # done: returns, or raises its error, at once
        except Exception as e:  # noqa: BLE001  (whichever error the collective ended with is the answer)
            return e
        return None

    def is_success(self):
        """False once the collective failed, as PyTorch's (which also says True while it runs)."""
        return self.exception() is None

    def result(self):
        """The output tensors of a completed collective, as get_future() delivers them; its error if it failed."""
        if not self.is_completed():
            raise RuntimeError("result(): the collective has not completed; wait() for it first")
        self.wait()  # at once: raises the collective's error, copies staged outputs back to their devices
        return list(self._outputs or ())

    def __reduce__(self):
        raise TypeError("cannot pickle a Work handle")


def _launch(api, g, c_call, async_op, finish, *args, outputs=None, timeout=None):
    """Runs a C collective of group ``g`` for function ``api`` synchronously
    or wraps its async handle (whose future delivers ``outputs``). The
    collective's ``timeout`` (seconds) is fixed as it is queued: None is the
    group's at that moment."""
    if _debug.detail and g.backend == "cpu":
        _debug.log_collective(g, api, args, _dtype_name)
    if profiler._is_profiler_enabled:
        c_call = profiler._collective(c_call, g, args, api)
    if async_op:
        return Work(c_call(*args, True, timeout=timeout), finish, group=g, outputs=outputs)
    c_call(*args, False, timeout=timeout)
    if finish is not None:
        finish()
    if g._dropped:
        g._finish_dropped()  # the collectives queued before this one are done too
    return None


def _finisher(*fns):
    fns = [f for f in fns if f is not None]
    if not fns:
        return None

    def finish():
        for f in fns:
            f()

    return finish


_REQUIRED = object()


def _global_peer(g, rank, group_rank, what, default=_REQUIRED):
    """The default-group rank of a peer given as ``what`` (a default-group
    rank) or as ``group_<what>`` (its rank within g), as PyTorch takes either;
    ``default`` where neither is given."""
    if group_rank is None:
        if rank is None and default is _REQUIRED:
            raise ValueError(f"give {what} or group_{what}")
        return default if rank is None else rank
    if rank is not None:
        raise ValueError(f"give {what} or group_{what}, not both")
    if not 0 <= group_rank < g.size():
        raise ValueError(f"group_{what} {group_rank} is out of range for a group of {g.size()} members")
    return g.ranks[group_rank]


def _group_rank(g, rank, what):
    if rank not in g.ranks:
        raise ValueError(f"{what} {rank} is not a member of the group (members: {g.ranks})")
    return g.ranks.index(rank)


_BITWISE_OPS = (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR)


def supports_complex(reduceOp):  # noqa: N803  (PyTorch's argument name)
    """Whether ``reduceOp`` reduces complex tensors: SUM and AVG do (part by
    part); MIN, MAX, PRODUCT and the bitwise ops do not, as in PyTorch."""
    if isinstance(reduceOp, bool) or reduceOp not in _C.REDUCE_OPS.values():
        raise ValueError(f"unknown reduce op {reduceOp!r}; use ddpc.distributed.ReduceOp")
    return reduceOp in (ReduceOp.SUM, ReduceOp.AVG)


def _reduce_op(op, g, code):
    """``op`` checked against the group's backend and the tensor's dtype ``code``."""
    if op not in _C.REDUCE_OPS.values():
        raise ValueError(f"unknown reduce op {op!r}; use ddpc.distributed.ReduceOp")
    if _dtype_name(code).startswith("complex") and op not in (ReduceOp.SUM, ReduceOp.AVG):
        name = next(k for k, v in _C.REDUCE_OPS.items() if v == op)
        raise ValueError(f"ReduceOp.{name} is not supported on complex tensors (only SUM and AVG, as in PyTorch)")
    if op in _BITWISE_OPS:
        if g.backend == "nccl":
            raise ValueError("the nccl backend has no bitwise reductions (BAND, BOR, BXOR); reduce host tensors on "
                             "the cpu backend")
        if _dtype_name(code) not in ("int32", "int64", "uint8", "bool"):
            raise TypeError(f"bitwise reductions take integer tensors, got {_dtype_name(code)}")
    return int(op)


# ---- collectives -------------------------------------------------------------------


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduces ``tensor`` across the group in place. AVG of integers truncates
    toward zero; on the cpu backend it is exact (summed in a wider type), on
    nccl NCCL's sum wraps around first."""
    return _all_reduce("all_reduce", tensor, op, _group(group, tensor), async_op)


def _all_reduce(api, tensor, op, g, async_op, timeout=None):
    a = _Arg(tensor, g)
    return _launch(api, g, g._c.all_reduce, async_op, _finisher(a.after()), a.obj, a.code,
                   _reduce_op(op, g, a.code), outputs=[tensor], timeout=timeout)


def broadcast(tensor, src=None, group=None, async_op=False, group_src=None):
    """Copies ``tensor`` of rank ``src`` (a rank of the default group; or
    ``group_src``, a rank within ``group``) to every member."""
    return _broadcast(tensor, src, group, async_op, group_src)


def _broadcast(tensor, src, group, async_op, group_src, timeout=None):
    g = _group(group, tensor)
    src = _global_peer(g, src, group_src, "src")
    a = _Arg(tensor, g)
    return _launch("broadcast", g, g._c.broadcast, async_op, _finisher(a.after()), a.obj, a.code,
                   _group_rank(g, src, "src"), outputs=[tensor], timeout=timeout)


def all_gather_single(output_tensor, input_tensor, group=None, async_op=False):
    """Concatenates every rank's ``input_tensor`` (in rank order) into
    ``output_tensor``, which holds group-size times its elements: their
    concatenation along dim 0 or their stack (a new leading dim of the
    group's size), which share one layout."""
    g = _group(group, output_tensor)
    return _all_gather_tensor("all_gather_single", g, output_tensor, input_tensor, async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """Concatenates every rank's ``input_tensor`` (in rank order) into
    ``output_tensor``; ``all_gather_single`` under its older name."""
    g = _group(group, output_tensor)
    return _all_gather_tensor("all_gather_into_tensor", g, output_tensor, input_tensor, async_op)


def _all_gather_tensor(api, g, output_tensor, input_tensor, async_op):
    out, inp = _Arg(output_tensor, g), _Arg(input_tensor, g, writable=False)
    _check_blocks(api, g, out, inp, gathering=True)
    return _launch(api, g, g._c.all_gather, async_op, _finisher(out.after()),
                   out.obj, _apart_from(inp.obj, out.obj), out.code, outputs=[output_tensor])


def _check_blocks(api, g, out, inp, gathering):
    """Checks _Args ``out`` and ``inp`` of one dtype, the output (``gathering``)
    or the input holding one block of the other per member of g. Only the
    element count is checked, as PyTorch does: a concatenation and a stack
    of the blocks share one layout."""
    if out.code != inp.code:
        raise TypeError(f"{api}: input and output dtypes differ ({_dtype_name(inp.code)} and {_dtype_name(out.code)})")
    whole, block = ("output", "input") if gathering else ("input", "output")
    wanted = g.size() * (inp.numel if gathering else out.numel)
    if (out.numel if gathering else inp.numel) != wanted:
        raise ValueError(f"{api}: output has {out.numel} elements and input {inp.numel}; with {g.size()} ranks the "
                         f"{whole} must hold {g.size()} times the {block}'s elements ({wanted}: the concatenation or "
                         "the stack of the ranks' blocks)")


def _as_buffer(obj):
    """A _C.Buffer over a buffer or C-contiguous numpy array (bfloat16 ones too)."""
    if isinstance(obj, _C.Buffer):
        return obj
    if _np_dtype_name(obj.dtype) == "bfloat16":  # ml_dtypes arrays don't export the buffer protocol; view the bits
        return _C.Buffer.from_object(obj.view(np.uint16), "bfloat16")
    return _C.Buffer.from_object(obj)


def _overlap(x, y):
    a, b = _as_buffer(x), _as_buffer(y)
    return a.device == b.device and a.nbytes and b.nbytes and a.data_ptr < b.data_ptr + b.nbytes and \
        b.data_ptr < a.data_ptr + a.nbytes


def _copy_of(x):
    a = _as_buffer(x)
    copy = _C.Buffer(a.shape, a.dtype, a.device)
    _C.copy(copy, a)
    return copy


def _apart_from(inp, out):
    """``inp``, or a copy of it where it overlaps ``out`` (a buffer, or a list
    of them: an in-place gather, whose input is this rank's block of the
    output): the C layer reads its input while it writes the output."""
    outs = out if isinstance(out, list) else [out]
    return _copy_of(inp) if any(_overlap(inp, o) for o in outs) else inp


def _apart(inputs, out):
    """``inputs`` (a scattering collective's list), each that overlaps
    ``out`` replaced by a copy (see _apart_from)."""
    return [_copy_of(x) if _overlap(x, out) else x for x in inputs] if isinstance(inputs, list) else \
        _apart_from(inputs, out)


def _copy_out(dst, src_buf):
    """Copies a _C.Buffer into a tensor or array of as many elements."""
    if isinstance(dst, np.ndarray):
        _C.copy(_as_buffer(dst), src_buf.view(0, dst.shape))
    else:
        dst._buf.bump_version()
        _C.copy(dst._buf, src_buf.view(0, dst._buf.shape))


def _dtype_name(code):
    return _DTYPE_NAMES[code]


def _member_args(what, tensors, g, like, writable=False):
    """_Args of a list of one tensor per group member, each of ``like``'s dtype and size."""
    if tensors is None or len(tensors) != g.size():
        got = "none" if tensors is None else len(tensors)
        raise ValueError(f"{what}: the list needs one tensor per group member ({g.size()}), got {got}")
    args = [_Arg(t, g, writable=writable) for t in tensors]
    if any(a.numel != like.numel or a.code != like.code for a in args):
        raise ValueError(f"{what}: every tensor in the list must have the dtype and number of elements of "
                         f"the other tensor ({_dtype_name(like.code)}, {like.numel} elements)")
    return args


def _scratch(g, like, numel):
    """``numel`` elements of ``like``'s dtype where g's collectives take them (its GPU on nccl, else the
    host). A complex one goes to the backend as its real pairs (``real_pairs``), as ``like.obj`` does."""
    return _C.Buffer((numel,), _dtype_name(like.code), like.obj.device if g.backend == "nccl" else -1)


def _elements(a):
    """The elements of _Arg ``a`` in its own dtype (a complex tensor's, not its real pairs')."""
    return _as_buffer(a.obj).view(0, (a.numel,), _dtype_name(a.code))


def _member_blocks(g, like):
    """A flat buffer of one ``like``-sized block per group member, where g's collectives take it."""
    return _scratch(g, like, g.size() * like.numel)


def _blocks_of(what, g, like, tensors):
    """_member_blocks holding ``tensors`` (one per member, checked), in rank order."""
    blocks = _member_blocks(g, like)
    for r, a in enumerate(_member_args(what, tensors, g, like)):
        _C.copy(blocks.view(r * like.numel, (like.numel,)), _elements(a))
    return blocks


def _whole(what, g, like, tensors, gathering):
    """The whole of a collective given as ``tensors`` (one per member, of
    ``like``'s dtype and size, checked), as (what the C call takes, its
    finish). The cpu backend takes the list of their buffers, which it
    writes (``gathering``) or reads in place; an nccl call takes one buffer,
    which the tensors are copied into, or out of after the call."""
    if g.backend == "nccl":
        if not gathering:
            return real_pairs(_blocks_of(what, g, like, tensors)), None
        _member_args(what, tensors, g, like)
        flat = _member_blocks(g, like)
        return real_pairs(flat), _filler(tensors, flat, like.numel)
    args = _member_args(what, tensors, g, like, writable=gathering)
    return [a.obj for a in args], _finisher(*(a.after() for a in args if a.after()))


def _filler(tensors, blocks, numel):
    """A finish that copies block r (``numel`` elements) of ``blocks`` into ``tensors[r]``."""

    def finish():
        for r, t in enumerate(tensors):
            _copy_out(t, blocks.view(r * numel, (numel,)))

    return finish


def _all_gather_list(what, g, tensor_list, tensor, async_op, timeout=None):
    """all_gather into a list."""
    inp = _Arg(tensor, g, writable=False)
    outs, finish = _whole(what, g, inp, tensor_list, gathering=True)
    return _launch(what, g, g._c.all_gather, async_op, finish, outs, _apart_from(inp.obj, outs), inp.code,
                   outputs=tensor_list, timeout=timeout)


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """Fills ``tensor_list[r]`` with rank r's ``tensor``."""
    return _all_gather_list("all_gather", _group(group, tensor), tensor_list, tensor, async_op)


def gather(tensor, gather_list=None, dst=None, group=None, async_op=False, group_dst=None):
    """Rank ``dst`` (default 0; or ``group_dst`` within the group) receives
    every rank's ``tensor`` in ``gather_list`` (in rank order); the other
    ranks pass no list."""
    g = _group(group, tensor)
    dst = _global_peer(g, dst, group_dst, "dst", 0)
    root = _group_rank(g, dst, "dst")
    if g.rank() != root and gather_list:
        raise ValueError("gather: only rank dst passes a gather_list")
    inp = _Arg(tensor, g, writable=False)
    if g.rank() != root:
        return _launch("gather", g, g._c.gather, async_op, None, None, inp.obj, inp.code, root)
    outs, finish = _whole("gather", g, inp, gather_list, gathering=True)
    return _launch("gather", g, g._c.gather, async_op, finish, outs, _apart_from(inp.obj, outs), inp.code, root,
                   outputs=gather_list)


def gather_single(tensor, gather_tensor=None, dst=None, group=None, async_op=False, group_dst=None):
    """Rank ``dst`` (default 0; or ``group_dst`` within the group) receives
    every rank's ``tensor`` (in rank order) in ``gather_tensor``, which
    holds group-size times its elements (the concatenation or the stack of
    the ranks' tensors); the other ranks' ``gather_tensor`` is not used."""
    g = _group(group, tensor)
    dst = _global_peer(g, dst, group_dst, "dst", 0)
    root = _group_rank(g, dst, "dst")
    if g.rank() == root:
        if gather_tensor is None:
            raise ValueError("gather_single: gather_tensor must be given on the destination rank")
        out, inp = _Arg(gather_tensor, g), _Arg(tensor, g, writable=False)
        _check_blocks("gather_single", g, out, inp, gathering=True)
        return _launch("gather_single", g, g._c.gather, async_op, _finisher(out.after()), out.obj,
                       _apart_from(inp.obj, out.obj), out.code, root, outputs=[gather_tensor])
    inp = _Arg(tensor, g, writable=False)
    return _launch("gather_single", g, g._c.gather, async_op, None, None, inp.obj, inp.code, root)


def gather_into_tensor(tensor, gather_tensor=None, dst=None, group=None, async_op=False, group_dst=None):
    """``gather_single`` under its older name."""
    return gather_single(tensor, gather_tensor, dst, group, async_op, group_dst)


def scatter(tensor, scatter_list=None, src=None, group=None, async_op=False, group_src=None):
    """Copies rank ``src``'s (default 0; or ``group_src``'s) ``scatter_list[r]``
    into rank r's ``tensor``; the other ranks pass no list."""
    g = _group(group, tensor)
    src = _global_peer(g, src, group_src, "src", 0)
    root = _group_rank(g, src, "src")
    if g.rank() != root and scatter_list:
        raise ValueError("scatter: only rank src passes a scatter_list")
    out = _Arg(tensor, g)
    ins = _apart(_whole("scatter", g, out, scatter_list, gathering=False)[0], out.obj) if g.rank() == root else None
    return _launch("scatter", g, g._c.scatter, async_op, _finisher(out.after()), out.obj, ins,
                   out.code, root, outputs=[tensor])


def reduce(tensor, dst=None, op=ReduceOp.SUM, group=None, async_op=False, group_dst=None):
    """Reduces ``tensor`` across the group into rank ``dst``'s (or
    ``group_dst``'s) ``tensor``; the other ranks' tensors are left as they were."""
    return _reduce(tensor, dst, op, group, async_op, group_dst)


def _reduce(tensor, dst, op, group, async_op, group_dst, timeout=None):
    g = _group(group, tensor)
    dst = _global_peer(g, dst, group_dst, "dst")
    root = _group_rank(g, dst, "dst")
    a = _Arg(tensor, g, writable=g.rank() == root)
    return _launch("reduce", g, g._c.reduce, async_op, _finisher(a.after()), a.obj, a.code,
                   _reduce_op(op, g, a.code), root, outputs=[tensor], timeout=timeout)


def reduce_scatter_single(output, input, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduces ``input`` across ranks; rank r receives block r of the result.
    ``input`` holds group-size times the output's elements: the blocks'
    concatenation along dim 0 or their stack, which share one layout."""
    return _reduce_scatter_tensor("reduce_scatter_single", _group(group, output), output, input, op, async_op)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduces ``input`` (size x the output's elements) across ranks; rank r
    receives block r. ``reduce_scatter_single`` under its older name."""
    return _reduce_scatter_tensor("reduce_scatter_tensor", _group(group, output), output, input, op, async_op)


def _reduce_scatter_tensor(api, g, output, input, op, async_op):
    out, inp = _Arg(output, g), _Arg(input, g, writable=False)
    _check_blocks(api, g, out, inp, gathering=False)
    return _launch(api, g, g._c.reduce_scatter, async_op, _finisher(out.after()), out.obj,
                   _apart_from(inp.obj, out.obj), out.code, _reduce_op(op, g, out.code), outputs=[output])


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduces ``input_list[r]`` across ranks into rank r's ``output``."""
    g = _group(group, output)
    out = _Arg(output, g)
    ins = _whole("reduce_scatter", g, out, input_list, gathering=False)[0]
    return _launch("reduce_scatter", g, g._c.reduce_scatter, async_op, _finisher(out.after()),
                   out.obj, _apart(ins, out.obj), out.code, _reduce_op(op, g, out.code))


def _by_dtype(args):
    """Indices into the list of _Args ``args``, grouped by dtype (in order of first appearance)."""
    groups = {}
    for i, a in enumerate(args):
        groups.setdefault(a.code, []).append(i)
    return list(groups.values())


def _coalesced_result(works, async_op, outputs):
    """What the coalesced collectives return: None, or a Future of ``outputs`` once every launch is done, as in
    PyTorch (whose coalesced calls return their work's future, not the work)."""
    return Future(_Works(works), outputs) if async_op else None


def _deprecated(api):
    warnings.warn(f"ddpc.distributed.{api} will be deprecated, as torch.distributed's is: call its per-tensor "
                  "collective on each tensor, or on one flat tensor of them", FutureWarning, stacklevel=4)


def all_reduce_coalesced(tensors, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduces every tensor of ``tensors`` (a list, or one tensor) in place,
    as ``all_reduce`` on each, with one all-reduce per dtype over a flat
    buffer of the tensors of that dtype. Like PyTorch's, it does not check
    that the ranks pass tensors of the same shapes, and is deprecated
    (a FutureWarning). PyTorch refuses tensors of different dtypes; ddpc
    reduces each dtype's on its own. Async: a Future of the tensors."""
    _deprecated("all_reduce_coalesced")
    tensors = list(tensors) if isinstance(tensors, (list, tuple)) else [tensors]
    if not tensors:
        raise ValueError("all_reduce_coalesced: tensors must hold at least one tensor")
    g = _group(group, tensors[0])
    args = [_Arg(t, g) for t in tensors]
    works = []
    for idx in _by_dtype(args):
        like = args[idx[0]]
        code = _reduce_op(op, g, like.code)
        flat = _scratch(g, like, sum(args[i].numel for i in idx))
        views, start = [], 0
        for i in idx:
            views.append((tensors[i], flat.view(start, (args[i].numel,))))
            _C.copy(views[-1][1], _elements(args[i]))
            start += args[i].numel

        def finish(views=views):
            for t, view in views:
                _copy_out(t, view)

        works.append(_launch("all_reduce_coalesced", g, g._c.all_reduce, async_op, finish, real_pairs(flat),
                             like.code, code, outputs=[tensors[i] for i in idx]))
    return _coalesced_result(works, async_op, tensors)


def all_gather_coalesced(output_tensor_lists, input_tensor_list, group=None, async_op=False):
    """Fills ``output_tensor_lists[r][i]`` with rank r's ``input_tensor_list[i]``,
    with one all-gather per dtype of a flat buffer of the inputs of that
    dtype. Like PyTorch's, it does not check that the ranks pass tensors of
    the same shapes, and is deprecated (a FutureWarning). Async: a Future
    of the output tensors, rank by rank in one list, as PyTorch's."""
    _deprecated("all_gather_coalesced")
    ins = list(input_tensor_list)
    if not ins:
        raise ValueError("all_gather_coalesced: input_tensor_list must hold at least one tensor")
    g = _group(group, ins[0])
    args = [_Arg(t, g, writable=False) for t in ins]
    if not isinstance(output_tensor_lists, list) or len(output_tensor_lists) != g.size():
        got = len(output_tensor_lists) if isinstance(output_tensor_lists, list) else type(output_tensor_lists).__name__
        raise ValueError(f"all_gather_coalesced: output_tensor_lists must be a list of one list per group member "
                         f"({g.size()}), got {got}")
    for r, outs in enumerate(output_tensor_lists):
        if len(outs) != len(ins):
            raise ValueError(f"all_gather_coalesced: output_tensor_lists[{r}] holds {len(outs)} tensors, "
                             f"input_tensor_list {len(ins)}")
        for i, (t, a) in enumerate(zip(outs, args)):
            out = _Arg(t, g)
            if out.code != a.code or out.numel != a.numel:
                raise ValueError(f"all_gather_coalesced: output_tensor_lists[{r}][{i}] ({_dtype_name(out.code)}, "
                                 f"{out.numel} elements) differs from input_tensor_list[{i}] "
                                 f"({_dtype_name(a.code)}, {a.numel} elements)")
    works = []
    for idx in _by_dtype(args):
        like = args[idx[0]]
        offsets = list(np.cumsum([0] + [args[i].numel for i in idx]))
        block = int(offsets[-1])
        mine, out = _scratch(g, like, block), _scratch(g, like, g.size() * block)
        for i, start in zip(idx, offsets):
            _C.copy(mine.view(int(start), (args[i].numel,)), _elements(args[i]))

        def finish(idx=idx, offsets=offsets, block=block, out=out):
            for r, outs in enumerate(output_tensor_lists):
                for i, start in zip(idx, offsets):
                    _copy_out(outs[i], out.view(r * block + int(start), (args[i].numel,)))

        works.append(_launch("all_gather_coalesced", g, g._c.all_gather, async_op, finish, real_pairs(out),
                             real_pairs(mine), like.code))
    return _coalesced_result(works, async_op, [t for outs in output_tensor_lists for t in outs])


@contextlib.contextmanager
def coalesce(group=None):
    """Collectives issued inside the block are launched together when it ends
    (ncclGroupStart/End on the nccl backend; the cpu backend already queues
    them in order, so there it changes nothing)."""
    g = _group(group)
    if g.backend != "nccl":
        yield
        return
    g._c.coalesce_start()
    try:
        yield
    finally:
        g._c.coalesce_end()


def barrier(group=None, async_op=False, device_ids=None, timeout=None):
    """Waits until every rank of the group has entered the barrier (at most
    ``timeout``, a timedelta or seconds; the group's by default). A barrier
    that times out fails the group, as any collective that times out does."""
    del device_ids
    g = _group(group)
    return _launch("barrier", g, g._c.barrier, async_op, None, timeout=_seconds(timeout))


def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """A barrier that names who did not come: the group's first rank waits
    for each other member, up to ``timeout`` (the group's by default) in all,
    and raises DistTimeoutError naming the first one missing (with
    ``wait_all_ranks``, every one missing); the others raise DistTimeoutError
    if it does not release them in that time. Goes through the store, not
    the backend, so it also finds a rank stuck before its collectives."""
    g = _group(group)
    timeout_s = _seconds(timeout, _world.timeout)
    g._monitored += 1
    key = f"{g._prefix}monitored/{g._monitored}/"
    if g.rank() != 0:
        g._store.set(key + str(g.rank()), b"")
        try:
            g._store.wait([key + "released"], timeout_s)
        except DistTimeoutError:
            raise DistTimeoutError(f"monitored_barrier: rank {g.ranks[0]} did not release rank {g.ranks[g.rank()]} "
                                   f"within {timeout_s:g} s: some member did not reach the barrier "
                                   f"(rank {g.ranks[0]}'s error names it)") from None
        return
    deadline = time.monotonic() + timeout_s
    missing = []
    for r in range(1, g.size()):
        try:
            g._store.wait([key + str(r)], max(deadline - time.monotonic(), 0.001))
        except DistTimeoutError:
            missing.append(g.ranks[r])
            if not wait_all_ranks:
                break
    if missing:
        raise DistTimeoutError(f"monitored_barrier: rank{'s' if len(missing) > 1 else ''} "
                               f"{', '.join(map(str, missing))} did not reach the barrier within {timeout_s:g} s")
    g._store.set(key + "released", b"")


def _p2p(tensor, peer, group, tag, sending, async_op):
    g = _group(group, tensor)
    if peer is None and g.backend == "nccl":
        raise ValueError("the nccl backend receives from a given rank only: pass src=")
    a = _Arg(tensor, g, writable=not sending)
    call = g._c.send if sending else g._c.recv
    if profiler._is_profiler_enabled:
        call = profiler._collective(call, g, (a.obj,), "send" if sending else "recv" if peer is not None else
                                    "recv_any_source")
    peer_rank = -1 if peer is None else _group_rank(g, peer, "dst" if sending else "src")
    finish = None if sending else _finisher(a.after())
    if async_op:
        work = call(a.obj, a.code, peer_rank, int(tag), True)
        if sending:
            return Work(work)
        return Work(work, finish, g.ranks if peer is None else None, peer, g)
    sender = call(a.obj, a.code, peer_rank, int(tag), False)
    if finish is not None:
        finish()
    return None if sending else g.ranks[peer_rank if sender is None else sender]


def send(tensor, dst=None, group=None, tag=0, group_dst=None):
    """Sends ``tensor`` to rank ``dst`` (or ``group_dst`` within the group);
    the matching recv must have the same size, dtype and tag."""
    _p2p(tensor, _global_peer(_group(group), dst, group_dst, "dst"), group, tag, True, False)


def recv(tensor, src=None, group=None, tag=0, group_src=None):
    """Receives into ``tensor`` the oldest message from rank ``src`` sent with
    ``tag``, or without ``src`` the first such message from any rank (cpu
    backend); its size and dtype must be those of ``tensor``. Returns the
    sender's rank.

    On the cpu backend messages are matched by tag, as in PyTorch's gloo
    backend: messages with other tags that the sender sent first are kept
    until the receives for their tags take them, each tag's in the order sent.
    The nccl backend ignores tags, as PyTorch's does: a rank's messages arrive
    in the order it sent them. ``group_src`` names the sender by its rank
    within the group instead."""
    return _p2p(tensor, _global_peer(_group(group), src, group_src, "src", None), group, tag, False, False)


def isend(tensor, dst=None, group=None, tag=0, group_dst=None):
    return _p2p(tensor, _global_peer(_group(group), dst, group_dst, "dst"), group, tag, True, True)


def irecv(tensor, src=None, group=None, tag=0, group_src=None):
    """Asynchronous recv, matched by tag like ``recv``; without ``src`` the
    handle's ``source_rank()`` names the sender once done."""
    return _p2p(tensor, _global_peer(_group(group), src, group_src, "src", None), group, tag, False, True)


class P2POp:
    """One send or receive for ``batch_isend_irecv``: ``op`` is ``isend`` or ``irecv``."""

    def __init__(self, op, tensor, peer=None, group=None, tag=0, group_peer=None):
        if op not in (isend, irecv):
            raise ValueError("P2POp: op must be ddpc.distributed.isend or ddpc.distributed.irecv")
        if group_peer is not None:
            peer = _global_peer(_group(group), peer, group_peer, "peer")
        if peer is None and op is isend:
            raise ValueError("P2POp: an isend needs a peer")
        self.op, self.tensor, self.peer, self.group, self.tag = op, tensor, peer, group, tag


def batch_isend_irecv(p2p_op_list):
    """Starts every op of the list (as one NCCL group on the nccl backend) and
    returns their handles."""
    if not p2p_op_list or not all(isinstance(p, P2POp) for p in p2p_op_list):
        raise ValueError("batch_isend_irecv takes a non-empty list of P2POp")
    with coalesce(p2p_op_list[0].group):
        return [p.op(p.tensor, p.peer, p.group, p.tag) for p in p2p_op_list]


class _Works(Work):
    """One handle for the several sends and receives of an all_to_all."""

    def __init__(self, works):
        super().__init__(None)
        self._works = works

    def wait(self, timeout=None):
        for w in self._works:
            w.wait(timeout)
        return True

    def is_completed(self):
        return all(w.is_completed() for w in self._works)

    def exception(self):
        return next((e for e in (w.exception() for w in self._works) if e is not None), None)


def _exchange(what, g, outs, ins, async_op):
    """Sends ``ins[r]`` to member r and receives ``outs[r]`` from it (both
    lists of contiguous tensors, arrays or buffers, one per member)."""
    n, me = g.size(), g.rank()
    for name, blocks in (("output", outs), ("input", ins)):
        if len(blocks) != n:
            raise ValueError(f"{what}: the {name} list needs one tensor per group member ({n}), got {len(blocks)}")
    # An input block the outputs overlap (all_to_all_single(x, x)) is sent from a copy: a block received
    # could otherwise overwrite it before it is sent.
    outs_bufs = [getattr(o, "_buf", o) for o in outs]
    ins = [_copy_of(getattr(i, "_buf", i)) if any(_overlap(getattr(i, "_buf", i), o) for o in outs_bufs) else i
           for i in ins]
    mine_in, mine_out = _Arg(ins[me], g, writable=False), _Arg(outs[me], g)
    if mine_in.numel != mine_out.numel or mine_in.code != mine_out.code:
        raise ValueError(f"{what}: this rank's own input and output blocks differ in dtype or size")
    _C.copy(_as_buffer(mine_out.obj), _as_buffer(mine_in.obj))
    mine_out.finish()
    frame = profiler._open_collective(what, g, None) if profiler._is_profiler_enabled else None
    try:
        return _exchange_blocks(g, outs, ins, async_op)
    finally:
        if frame is not None:
            profiler._close(frame)


def _exchange_blocks(g, outs, ins, async_op):
    n, me = g.size(), g.rank()
    works = []
    with coalesce(g):
        # Round k: send to the member k ahead while receiving from the one k
        # behind, so every send meets a receive posted in the same order.
        for k in range(1, n):
            to, frm = (me + k) % n, (me - k) % n
            works.append(isend(ins[to], g.ranks[to], g, _ALL_TO_ALL_TAG))
            works.append(irecv(outs[frm], g.ranks[frm], g, _ALL_TO_ALL_TAG))
    handle = _Works(works)
    if async_op:
        return handle
    handle.wait()
    return None


def _row_blocks(what, t, splits, n):
    """Views of consecutive blocks of ``t``'s rows (dim 0), ``splits[r]`` rows
    each, or equal blocks."""
    if isinstance(t, np.ndarray) and not t.flags.c_contiguous:
        raise ValueError(f"all_to_all_single: the {what} array must be C-contiguous")
    buf = _as_buffer(getattr(t, "_buf", t))
    if not buf.shape:
        raise ValueError(f"all_to_all_single: the {what} must have at least one dimension")
    rows = buf.shape[0]
    if splits is None:
        if rows % n:
            raise ValueError(f"all_to_all_single: the {what} has {rows} rows, not a multiple of the group size {n}; "
                             f"pass {what}_split_sizes")
        splits = [rows // n] * n
    splits = [int(k) for k in splits]
    if len(splits) != n or min(splits) < 0 or sum(splits) != rows:
        raise ValueError(f"all_to_all_single: {what}_split_sizes must be {n} non-negative row counts adding up "
                         f"to the {what}'s {rows} rows, got {splits}")
    per_row = buf.numel // rows if rows else 0
    views, start = [], 0
    for k in splits:
        views.append(buf.view(start * per_row, (k, *buf.shape[1:])))
        start += k
    return views


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None, async_op=False):
    """Block r of ``input`` (rows along dim 0: ``input_split_sizes[r]`` of
    them, or equal blocks) goes to rank r, where it becomes the block of
    ``output`` from this rank."""
    g = _group(group, output)
    outs = _row_blocks("output", output, output_split_sizes, g.size())
    ins = _row_blocks("input", input, input_split_sizes, g.size())
    handle = _exchange("all_to_all_single", g, outs, ins, async_op)
    if handle is not None:
        handle._outputs = [output]  # what its future delivers, as PyTorch's
    return handle


def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False):
    """Sends ``input_tensor_list[r]`` to rank r and receives rank r's tensor for
    this rank into ``output_tensor_list[r]``."""
    outs = list(output_tensor_list)
    return _exchange("all_to_all", _group(group, outs[0] if outs else None), outs, list(input_tensor_list), async_op)


# ---- Python objects (pickled: unpickling runs code, so exchange objects only among trusted ranks) ----


def _to_group(g, arr):
    """A numpy array where ``g``'s collectives take it: itself on the cpu backend, a copy on this rank's GPU on nccl."""
    if g.backend != "nccl":
        return arr
    buf = _C.Buffer(arr.shape, arr.dtype.name, _world.device)
    _C.copy(buf, _C.Buffer.from_object(arr))
    return buf


def _to_numpy(x, dtype):
    if isinstance(x, np.ndarray):
        return x
    host = np.empty(x.shape, dtype)
    _C.copy(_C.Buffer.from_object(host), x)  # blocking: done when it returns
    return host


def _broadcast_array(g, arr, src):
    """Rank ``src``'s numpy array ``arr`` (each rank passes one of that shape), broadcast through g."""
    on = _to_group(g, arr)
    broadcast(on, src, g)
    return _to_numpy(on, arr.dtype)


def _all_gather_array(g, arr):
    """Every member's 1-d numpy array ``arr`` (all of one size), concatenated in rank order."""
    out = _to_group(g, np.empty(g.size() * arr.size, arr.dtype))
    all_gather_into_tensor(out, _to_group(g, arr), g)
    return _to_numpy(out, arr.dtype)


def _object_bytes(obj):
    """``obj`` pickled, as a numpy byte array: what the object calls move."""
    return np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), dtype=np.uint8)


def _bytes_object(data):
    """The object that byte array ``data`` (an ``_object_bytes``) holds."""
    return pickle.loads(data.tobytes())


def _bytes_objects(payload, sizes):
    """The objects of ``payload``, pickles of ``sizes`` bytes one after the other."""
    ends = np.cumsum(sizes)
    return [_bytes_object(payload[end - size:end]) for size, end in zip(sizes, ends)]


def _send_bytes(g, data, dst, tag):
    """Sends byte array ``data`` (if any) to rank ``dst`` of g."""
    if data.size:
        send(_to_group(g, data), dst, g, tag)


def _recv_bytes(g, size, src, tag):
    """The ``size`` bytes (if any) that rank ``src`` of g sends with ``_send_bytes``."""
    buf = _to_group(g, np.empty(size, np.uint8))
    if size:
        recv(buf, src, g, tag)
    return _to_numpy(buf, np.uint8)


def _gather_objects(g, obj):
    """Every member's ``obj``, in rank order (an all_gather of their pickles)."""
    data = _object_bytes(obj)
    sizes = _all_gather_array(g, np.array([data.size], np.int64))
    width = int(sizes.max())
    mine = np.zeros(width, np.uint8)
    mine[:data.size] = data
    out = _all_gather_array(g, mine).reshape(g.size(), width)
    return [_bytes_object(row[:size]) for row, size in zip(out, sizes)]


def _broadcast_objects(g, objects, src, count):
    """Rank ``src``'s list ``objects`` on every member (a broadcast of its
    length, the pickles' sizes and the pickles); ``count`` is what the other
    members expect, checked once they have taken part."""
    src_rank = _group_rank(g, src, "src")
    at_src = g.rank() == src_rank
    n = int(_broadcast_array(g, np.array([len(objects) if at_src else 0], np.int64), src)[0])
    data = [_object_bytes(o) for o in objects] if at_src else []
    sizes = np.array([d.size for d in data] if at_src else [0] * n, np.int64)
    if n:
        sizes = _broadcast_array(g, sizes, src)
    payload = np.concatenate(data) if data else np.empty(int(sizes.sum()), np.uint8)
    if payload.size:
        payload = _broadcast_array(g, payload, src)
    if at_src:
        return list(objects)
    if count != n:
        raise ValueError(f"rank {src} sent {n} objects, this rank's list holds {count}")
    return _bytes_objects(payload, sizes)


def all_gather_object(object_list, obj, group=None):
    """Fills ``object_list[r]`` with rank r's ``obj`` (any picklable object);
    entries past the group's size are left as they are."""
    g = _group(group, _HOST)
    if len(object_list) < g.size():  # (a longer one keeps its entries past the group's, as PyTorch's)
        raise ValueError(f"all_gather_object: object_list needs one entry per group member ({g.size()}), "
                         f"got {len(object_list)}")
    object_list[:g.size()] = _gather_objects(g, obj)


def gather_object(obj, object_gather_list=None, dst=None, group=None, group_dst=None):
    """Rank ``dst`` (default 0; or ``group_dst``) receives every rank's ``obj``
    in ``object_gather_list``. As in PyTorch, the ranks all_gather their
    pickles' sizes, and each pickle then travels to rank dst alone."""
    g = _group(group, _HOST)
    dst = _global_peer(g, dst, group_dst, "dst", 0)
    at_dst = g.rank() == _group_rank(g, dst, "dst")
    if at_dst and (object_gather_list is None or len(object_gather_list) < g.size()):
        raise ValueError(f"gather_object: rank dst needs an object_gather_list of {g.size()} entries")
    if not at_dst and object_gather_list:
        raise ValueError("gather_object: only rank dst passes an object_gather_list")
    data = _object_bytes(obj)
    sizes = _all_gather_array(g, np.array([data.size], np.int64))
    if not at_dst:
        _send_bytes(g, data, dst, _COLLECTIVE_OBJECT_TAG)
        return
    # Every pickle is received before any is unpickled: one that fails to
    # unpickle leaves no message behind to confuse the next call.
    pickles = [data if r == g.rank() else _recv_bytes(g, int(size), g.ranks[r], _COLLECTIVE_OBJECT_TAG)
               for r, size in enumerate(sizes)]
    object_gather_list[:g.size()] = [_bytes_object(p) for p in pickles]


def broadcast_object_list(object_list, src=None, group=None, device=None, group_src=None):
    """Replaces the entries of ``object_list`` with rank ``src``'s (default 0;
    or ``group_src``'s; every rank's list has the same length)."""
    del device  # where the pickles travel follows the group's backend
    g = _group(group, _HOST)
    object_list[:] = _broadcast_objects(g, object_list, _global_peer(g, src, group_src, "src", 0), len(object_list))


def scatter_object_list(scatter_object_output_list, scatter_object_input_list=None, src=None, group=None,
                        group_src=None):
    """Sets ``scatter_object_output_list[0]`` to rank ``src``'s (default 0; or
    ``group_src``'s) ``scatter_object_input_list[r]`` on rank r. As in
    PyTorch, rank src broadcasts the pickles' sizes, and each rank then
    receives its own pickle alone."""
    g = _group(group, _HOST)
    src = _global_peer(g, src, group_src, "src", 0)
    at_src = g.rank() == _group_rank(g, src, "src")
    if not scatter_object_output_list:
        raise ValueError("scatter_object_list: the output list needs at least one entry")
    if at_src and (scatter_object_input_list is None or len(scatter_object_input_list) != g.size()):
        raise ValueError(f"scatter_object_list: rank src needs an input list of {g.size()} entries")
    data = [_object_bytes(o) for o in scatter_object_input_list] if at_src else []
    sizes = _broadcast_array(g, np.array([d.size for d in data] if at_src else [0] * g.size(), np.int64), src)
    if not at_src:
        scatter_object_output_list[0] = _bytes_object(_recv_bytes(g, int(sizes[g.rank()]), src,
                                                                  _COLLECTIVE_OBJECT_TAG))
        return
    for r, d in enumerate(data):
        if r != g.rank():
            _send_bytes(g, d, g.ranks[r], _COLLECTIVE_OBJECT_TAG)
    scatter_object_output_list[0] = _bytes_object(data[g.rank()])  # a copy, as every other rank gets


def send_object_list(object_list, dst=None, group=None, device=None, group_dst=None):
    """Sends the objects of ``object_list`` (picklable) to rank ``dst``, whose
    ``recv_object_list`` passes a list of the same length: first their
    count and pickles' sizes, then the pickles."""
    del device  # where the pickles travel follows the group's backend
    g = _group(group, _HOST)
    dst = _global_peer(g, dst, group_dst, "dst")
    data = [_object_bytes(o) for o in object_list]
    send(_to_group(g, np.array([len(data)] + [d.size for d in data], np.int64)), dst, g, _OBJECT_TAG)
    if data:
        _send_bytes(g, np.concatenate(data), dst, _OBJECT_TAG)


def recv_object_list(object_list, src=None, group=None, device=None, group_src=None):
    """Fills ``object_list`` with the objects rank ``src`` (without src, any
    rank, on the cpu backend) sent with ``send_object_list``; returns the
    sender's rank. A list of another length than the sender's is a
    mismatch of the two calls: both raise DistError."""
    del device
    g = _group(group, _HOST)
    src = _global_peer(g, src, group_src, "src", None)
    header = _to_group(g, np.zeros(1 + len(object_list), np.int64))
    sender = recv(header, src, g, _OBJECT_TAG)
    sizes = _to_numpy(header, np.int64)[1:]
    object_list[:] = _bytes_objects(_recv_bytes(g, int(sizes.sum()), sender, _OBJECT_TAG), sizes)
    return sender


def get_process_group_ranks(group):
    """The default-group ranks of ``group``'s members, in group-rank order."""
    return list(_group(group).ranks)


def _members_only(fn):
    """A collective called on a rank outside its group does nothing (with a
    warning), as in PyTorch, so that code calling it on every rank runs."""
    at = list(inspect.signature(fn).parameters).index("group")

    @functools.wraps(fn)
    def collective(*args, **kwargs):
        if kwargs.get("group", args[at] if len(args) > at else None) is GroupMember.NON_GROUP_MEMBER:
            warnings.warn(f"{fn.__name__} on rank {_world.rank}, which is not a member of the group: nothing done",
                          stacklevel=2)
            return None
        return fn(*args, **kwargs)

    return collective


for _name in ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "gather", "scatter",
              "reduce_scatter", "reduce_scatter_tensor", "all_gather_single", "gather_single", "gather_into_tensor",
              "reduce_scatter_single", "all_reduce_coalesced", "all_gather_coalesced", "all_to_all", "all_to_all_single",
              "barrier", "monitored_barrier", "send", "recv", "isend", "irecv", "all_gather_object", "gather_object",
              "broadcast_object_list", "scatter_object_list", "send_object_list", "recv_object_list"):
    globals()[_name] = _members_only(globals()[_name])


def _register_elastic_modules():
    """torchelastic's path to ``record``: ddpc.distributed.elastic.multiprocessing.errors."""
    from .. import _elastic
    names = ["elastic", "elastic.multiprocessing", "elastic.multiprocessing.errors"]
    modules = [types.ModuleType(f"{__name__}.{n}") for n in names]
    modules[-1].record = _elastic.record
    modules[0].multiprocessing, modules[1].errors = modules[1], modules[2]
    for module in modules:
        sys.modules[module.__name__] = module
    globals()["elastic"] = modules[0]


_register_elastic_modules()


from .device_mesh import DeviceMesh, init_device_mesh  # noqa: E402  (it builds on the functions above)
from ..nn.parallel import BuiltinCommHookType, GradBucket  # noqa: E402  (DistributedDataParallel's comm hook types)

__all__ += ["BuiltinCommHookType", "GradBucket"]

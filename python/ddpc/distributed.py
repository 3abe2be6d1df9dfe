"""ddpc.distributed: process groups and collectives, shaped like torch.distributed.

The work happens in _C (store, groups, shared-memory and TCP collectives, all
with the GIL released); this module resolves the rendezvous from the
environment or an init_method, checks arguments, and adapts ddpc tensors,
numpy arrays and CUDA tensors to the C calls.

Differences from PyTorch: ``recv`` needs an explicit ``src``; ``Work.wait()``
must be called before reading the result of an async ``all_gather`` into a
list or of an async collective on a CUDA tensor (both finish with a copy);
``TCPStore`` ignores ``world_size`` and ``wait_for_workers``.

Environment: ``DDPC_STORE_TOKEN`` is the job's store secret (ddpc-run and
ddpc.spawn make one); ``DDPC_HOST_ID`` overrides how ranks decide they share
a host (hostname and boot id by default), and ``DDPC_IFADDR`` the address a
rank advertises to peers on other hosts (by default the local address of its
connection to the store).
"""

import atexit
import base64
import contextlib
import ctypes
import fcntl
import json
import os
import socket
import sys
import time
from datetime import timedelta
from urllib.parse import urlparse

import numpy as np

from . import _C
from ._C import DistError, DistTimeoutError

__all__ = [
    "Backend", "DistError", "DistTimeoutError", "FileStore", "GroupMember", "ProcessGroup", "ReduceOp", "TCPStore",
    "Work", "all_gather", "all_gather_into_tensor", "all_reduce", "barrier", "broadcast", "destroy_process_group",
    "get_backend", "get_rank", "get_world_size", "init_process_group", "irecv", "is_available", "is_initialized",
    "isend", "new_group", "recv", "reduce_scatter_tensor", "send", "shared_buffer",
]

_DTYPE_CODES = {"float32": 0, "float64": 1, "float16": 2, "bfloat16": 3, "int32": 4, "int64": 5, "uint8": 6}
_DEFAULT_TIMEOUT = timedelta(minutes=5)
# How long rank 0 keeps the store up at shutdown for the others to leave.
_SHUTDOWN_GRACE_S = 10.0


class ReduceOp:
    """Reduction operations: ``ReduceOp.SUM``, ``AVG``, ``MIN``, ``MAX``, ``PROD``."""

    SUM = _C.REDUCE_OPS["SUM"]
    AVG = _C.REDUCE_OPS["AVG"]
    MIN = _C.REDUCE_OPS["MIN"]
    MAX = _C.REDUCE_OPS["MAX"]
    PROD = _C.REDUCE_OPS["PROD"]


class Backend:
    CPU = "cpu"
    GLOO = "gloo"
    NCCL = "nccl"


def is_available():
    return True


def _seconds(timeout, default=None):
    if timeout is None:
        return default
    if isinstance(timeout, timedelta):
        return timeout.total_seconds()
    return float(timeout)


# ---- stores ------------------------------------------------------------------------


class TCPStore:
    """Key-value store over TCP; the master (``is_master=True``) hosts the server.

    ``token`` (default: ``DDPC_STORE_TOKEN`` from the environment, as set by
    ddpc-run) must match between server and clients; other clients are refused.
    """

    def __init__(self, host_name, port, world_size=None, is_master=False, timeout=timedelta(seconds=300),
                 wait_for_workers=True, token=None):
        if token is None:
            token = os.environ.get("DDPC_STORE_TOKEN", "")
        self.world_size = world_size
        self._timeout = _seconds(timeout)
        self._c = _C.Store(str(host_name), int(port), bool(is_master), token, self._timeout)
        self.host = host_name

    @property
    def port(self):
        return self._c.port

    @property
    def timeout(self):
        return timedelta(seconds=self._timeout)

    def set(self, key, value):
        self._c.set(key, value.encode() if isinstance(value, str) else bytes(value))

    def get(self, key):
        return self._c.get(key)

    def add(self, key, amount):
        return self._c.add(key, int(amount))

    def wait(self, keys, timeout=None):
        self._c.wait(list(keys), _seconds(timeout))

    def check(self, keys):
        return self._c.check(list(keys))

    def delete_key(self, key):
        return self._c.delete_key(key)

    def num_keys(self):
        return self._c.num_keys()

    def __reduce__(self):
        raise TypeError("cannot pickle a TCPStore: it is tied to this process's connection")


class FileStore:
    """Key-value store in a file shared by all ranks (a local or network file
    system), serialised with an exclusive lock. Waits poll the file."""

    def __init__(self, file_name, world_size=-1):
        self.path = file_name
        self.world_size = world_size
        self.timeout = _DEFAULT_TIMEOUT
        with open(self.path, "a"):
            pass

    def _update(self, fn):
        with open(self.path, "r+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                text = f.read()
                data = json.loads(text) if text else {}
                result = fn(data)
                f.seek(0)
                f.truncate()
                f.write(json.dumps(data))
                f.flush()
                return result
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def set(self, key, value):
        value = value.encode() if isinstance(value, str) else bytes(value)
        self._update(lambda d: d.__setitem__(key, base64.b64encode(value).decode()))

    def add(self, key, amount):
        def add(d):
            value = (int(base64.b64decode(d[key])) if key in d else 0) + int(amount)
            d[key] = base64.b64encode(str(value).encode()).decode()
            return value

        return self._update(add)

    def check(self, keys):
        return self._update(lambda d: all(k in d for k in keys))

    def delete_key(self, key):
        return self._update(lambda d: d.pop(key, None) is not None)

    def num_keys(self):
        return self._update(len)

    def wait(self, keys, timeout=None):
        deadline = time.monotonic() + _seconds(timeout, self.timeout.total_seconds())
        delay = 0.001
        while not self.check(keys):
            if time.monotonic() > deadline:
                raise DistTimeoutError(f"FileStore wait for {list(keys)} timed out")
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def get(self, key):
        self.wait([key])
        return base64.b64decode(self._update(lambda d: d[key]))


# ---- groups ------------------------------------------------------------------------


class GroupMember:
    """``GroupMember.NON_GROUP_MEMBER`` is what new_group returns on ranks outside the group."""

    NON_GROUP_MEMBER = object()
    WORLD = None


class ProcessGroup:
    """A set of ranks that run collectives together. ``rank()`` and ``size()``
    are within the group; ``ranks`` are the members' ranks in the default group."""

    def __init__(self, c_group, ranks, backend, store):
        self._c = c_group
        self.ranks = list(ranks)
        self.backend = backend
        self._store = store

    def rank(self):
        return self._c.rank

    def size(self):
        return self._c.size

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
        self.rank = -1
        self.timeout = None
        self.device = None       # this rank's GPU on the nccl backend


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


def _connect_store(init_method, rank, world_size, timeout_s):
    """The _C.Store for an init_method: env://, tcp://host:port, or file:///path
    (where rank 0 publishes its store's address in the file)."""
    token = os.environ.get("DDPC_STORE_TOKEN", "")
    url = urlparse(init_method)
    if url.scheme == "env":
        rank, world_size = _rank_and_size_from_env(rank, world_size)
        addr, port = _master_from_env()
    elif url.scheme == "tcp":
        rank, world_size = _rank_and_size_from_env(rank, world_size)
        if not url.hostname or not url.port:
            raise ValueError(f"init_method {init_method!r} must be tcp://host:port")
        addr, port = url.hostname, url.port
    elif url.scheme == "file":
        rank, world_size = _rank_and_size_from_env(rank, world_size)
        fstore = FileStore(url.path, world_size)
        if rank == 0:
            store = _C.Store(socket.gethostname(), 0, True, token, timeout_s)
            fstore.set("ddpc/master", f"{socket.gethostname()} {store.port}")
            return store, rank, world_size
        fstore.timeout = timedelta(seconds=timeout_s)
        addr, port = fstore.get("ddpc/master").decode().split()
        port = int(port)
    else:
        raise ValueError(f"unsupported init_method {init_method!r} (use env://, tcp://host:port or file:///path)")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in [0, {world_size})")
    return _C.Store(addr, port, rank == 0, token, timeout_s), rank, world_size


def _pick_backend(backend, store, prefix, rank, world_size, timeout_s):
    if backend is not None:
        backend = str(backend).lower()
        if backend == "gloo":
            return "cpu"
        if backend not in ("cpu", "nccl"):
            raise ValueError(f"unknown backend {backend!r} (use 'cpu', 'gloo' or 'nccl')")
        return backend
    # nccl only when every rank has a GPU and this build can run it.
    if "nccl" not in _C.backends():
        return "cpu"
    store.set(f"{prefix}gpus/{rank}", str(_C.cuda_device_count()).encode())
    every_rank_has_gpu = all(int(store.get(f"{prefix}gpus/{r}", timeout_s)) > 0 for r in range(world_size))
    return "nccl" if every_rank_has_gpu else "cpu"


def _rank_device(device_id):
    """This rank's GPU: ``device_id`` if given, else LOCAL_RANK (as ddpc-run sets it)."""
    if device_id is None:
        return _env_int("LOCAL_RANK", 0) if "LOCAL_RANK" in os.environ else 0
    if isinstance(device_id, int):
        return device_id
    index = getattr(device_id, "index", None)
    if index is None:
        from ._dtype import device as _device
        index = _device(device_id).index
    return 0 if index is None else int(index)


def _make_group(store, prefix, rank, size, ranks, backend, timeout_s):
    """The C process group of the cpu backend, or the NCCL communicator's adapter."""
    if backend == "nccl":
        from ._nccl import NcclGroup
        return NcclGroup(store, prefix + "nccl", rank, size, _world.device, timeout_s, socket.gethostname())
    return _C.ProcessGroup(store, prefix, rank, size, ranks, backend, timeout_s)


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None,
                       group_name="", device_id=None):
    """Joins the default process group (collective: every rank calls it).

    ``init_method``: ``env://`` (default; RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT, or SLURM_PROCID/SLURM_NTASKS, OMPI_COMM_WORLD_RANK/SIZE),
    ``tcp://host:port`` or ``file:///path``. ``backend``: ``"cpu"`` (alias
    ``"gloo"``) or ``"nccl"``; by default nccl when every rank has a GPU,
    else cpu. Every collective fails with DistTimeoutError after ``timeout``
    and with DistError as soon as a peer dies.
    """
    del group_name
    if _world.default is not None:
        raise RuntimeError("the default process group is already initialised; call destroy_process_group() first")
    timeout_s = _seconds(timeout, _DEFAULT_TIMEOUT.total_seconds())
    if store is not None:
        if not isinstance(store, TCPStore):
            raise TypeError("store= must be a ddpc.distributed.TCPStore")
        if rank < 0 or world_size < 0:
            raise ValueError("with store=, pass rank= and world_size= too")
        c_store = store._c
    else:
        c_store, rank, world_size = _connect_store(init_method or "env://", rank, world_size, timeout_s)
        if rank == 0 and urlparse(init_method or "").scheme == "file":
            _world.rendezvous_file = urlparse(init_method).path
    # A store passed as store= outlives destroy_process_group() with the keys
    # of the group it served, so each init's keys get a prefix of their own:
    # the ranks count their inits in the store, per world size (a job of
    # another size may follow on the same store).
    prefix = f"w{world_size}i{(c_store.add(f'ddpc/inits/{world_size}', 1) - 1) // world_size}/"
    backend = _pick_backend(backend, c_store, prefix, rank, world_size, timeout_s)
    _world.device = _rank_device(device_id)
    _C.monitor_start(c_store, rank, prefix)
    try:
        c_group = _make_group(c_store, prefix + "g0/", rank, world_size, list(range(world_size)), backend,
                              timeout_s)
    except BaseException:
        _C.monitor_stop(1.0)
        raise
    _world.store = c_store
    _world.owns_store = store is None
    _world.prefix = prefix
    _world.rank = rank
    _world.timeout = timeout_s
    _world.default = ProcessGroup(c_group, range(world_size), backend, c_store)
    GroupMember.WORLD = _world.default


def is_initialized():
    return _world.default is not None


def _group(group):
    if _world.default is None:
        raise RuntimeError("the default process group is not initialised; call init_process_group() first")
    if group is None:
        return _world.default
    if group is GroupMember.NON_GROUP_MEMBER:
        raise ValueError("this rank is not a member of the group")
    if not isinstance(group, ProcessGroup):
        raise TypeError(f"group must be a ProcessGroup, got {type(group).__name__}")
    if group._c is None:
        raise ValueError("the process group was destroyed")
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
    return _group(group).backend


def get_global_rank(group, group_rank):
    """The default-group rank of member ``group_rank`` of ``group`` (None: the default group)."""
    return _group(group).ranks[group_rank]


def collective_device(group=None):
    """Where this rank's tensors for ``group``'s collectives must live: its GPU
    on the nccl backend, the host on the cpu backend (which also stages CUDA tensors)."""
    return f"cuda:{_world.device}" if _group(group).backend == "nccl" else "cpu"


def shared_buffer(nbytes, group=None):
    """``nbytes`` of zeroed host memory that every rank of ``group`` on this
    host maps, or None where the group has no other rank on this host or is
    not on the cpu backend. An all_reduce of a tensor lying in it, at the
    same offset on every rank, reduces the ranks' data where they are instead
    of copying them through the staging areas (about half the memory
    traffic); DistributedDataParallel keeps its buckets in one. Collective:
    the group's ranks call it in the same order, with the same size."""
    g = _group(group)
    if g.backend != "cpu" or g._c.local_size < 2:
        return None
    return g._c.share(int(nbytes))


def new_group(ranks=None, timeout=None, backend=None):
    """A group of some ranks of the default group. Every rank of the default
    group must call it, in the same order; ranks outside get
    ``GroupMember.NON_GROUP_MEMBER``."""
    world = _group(None)
    ranks = sorted(set(range(world.size()) if ranks is None else (int(r) for r in ranks)))
    if not ranks or ranks[0] < 0 or ranks[-1] >= world.size():
        raise ValueError(f"new_group: ranks must be in [0, {world.size()}), got {ranks}")
    group_id = _world.next_group_id
    _world.next_group_id += 1
    if _world.rank not in ranks:
        return GroupMember.NON_GROUP_MEMBER
    backend = world.backend if backend is None else ("cpu" if backend == "gloo" else backend)
    timeout_s = _seconds(timeout, _world.timeout)
    c_group = _make_group(_world.store, f"{_world.prefix}g{group_id}/", ranks.index(_world.rank), len(ranks), ranks,
                          backend, timeout_s)
    group = ProcessGroup(c_group, ranks, backend, _world.store)
    _world.groups.append(group)
    return group


def destroy_process_group(group=None):
    """Releases a group; without an argument, every group and the rendezvous.

    Rank 0 hosts the store, so it waits (briefly) for the other ranks to leave
    before closing it."""
    if _world.default is None:
        return
    if group is not None and group is not _world.default:
        group = _group(group)
        group._c.close()
        group._c = None
        _world.groups = [g for g in _world.groups if g is not group]
        return
    _leave(wait_for_others=True)


def _leave(wait_for_others):
    """Releases every group and the rendezvous. With ``wait_for_others``,
    rank 0 waits for the others to leave before it closes the store it
    hosts, and the others wait for that (each wait brief)."""
    if _world.default is None:
        return
    size = _world.default.size()
    for g in _world.groups + [_world.default]:
        if g._c is not None:
            g._c.close()
            g._c = None
        g._store = None
    grace = min(_world.timeout, _SHUTDOWN_GRACE_S)
    _C.monitor_stop(grace)
    if wait_for_others and size > 1:
        try:
            if _world.rank == 0:
                _world.store.wait_departed(size, grace)
                if not _world.owns_store:
                    _world.store.set(_world.prefix + "released", b"")
            else:
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
    _leave(wait_for_others=getattr(sys, "last_value", None) is None)


atexit.register(_leave_at_exit)


# ---- tensors -----------------------------------------------------------------------


def _dtype_code(name):
    try:
        return _DTYPE_CODES[name]
    except KeyError:
        raise TypeError(f"dtype {name} is not supported by collectives") from None


class _Arg:
    """A tensor argument as the C layer takes it: host memory and a dtype code.

    On the cpu backend, CUDA tensors are staged through a pinned host buffer
    and ``finish()`` copies the result back to the device; the nccl backend
    takes CUDA buffers as they are."""

    def __init__(self, t, group, writable=True):
        buf = getattr(t, "_buf", t)
        self.device_buf = None
        if group.backend == "nccl" and not (isinstance(buf, _C.Buffer) and buf.device >= 0):
            raise TypeError(f"the nccl backend reduces CUDA tensors; got {type(t).__name__} on the host "
                            "(move it with .cuda(), or use backend='cpu')")
        if isinstance(buf, _C.Buffer):
            self.code = _dtype_code(buf.dtype)
            self.numel = buf.numel
            if writable:
                buf.bump_version()  # an in-place write, as autograd counts them
            if buf.device >= 0 and group.backend != "nccl":
                host = _C.Buffer(buf.shape, buf.dtype, -1, pin_memory=True)
                _C.copy(host, buf)
                _C.cuda_synchronize(buf.device)
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
            self.code = _dtype_code("bfloat16" if t.dtype.name == "bfloat16" else t.dtype.name)
            self.numel = t.size
            self.obj = t
        else:
            raise TypeError(f"collectives take ddpc.Tensor or numpy.ndarray, got {type(t).__name__}")

    def finish(self):
        if self.device_buf is not None:
            _C.copy(self.device_buf, self.obj)
            _C.cuda_synchronize(self.device_buf.device)


class Work:
    """Handle of an asynchronous collective (``async_op=True``)."""

    def __init__(self, c_work, finish=None, ranks=None, source=None):
        self._c = c_work
        self._finish = finish
        self._ranks = ranks    # an irecv from any rank: its group's members, to name the sender
        self._source = source  # an irecv from a given rank: that rank

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
        self._c.wait(_seconds(timeout))
        if self._finish is not None:
            finish, self._finish = self._finish, None
            finish()
        return True

    def is_completed(self):
        return self._c.is_completed()

    def __reduce__(self):
        raise TypeError("cannot pickle a Work handle")


def _launch(c_call, async_op, finish, *args):
    """Runs a C collective synchronously or wraps its async handle."""
    if async_op:
        return Work(c_call(*args, True), finish)
    c_call(*args, False)
    if finish is not None:
        finish()
    return None


def _finisher(*fns):
    fns = [f for f in fns if f is not None]
    if not fns:
        return None

    def finish():
        for f in fns:
            f()

    return finish


def _group_rank(g, rank, what):
    if rank not in g.ranks:
        raise ValueError(f"{what} {rank} is not a member of the group (members: {g.ranks})")
    return g.ranks.index(rank)


def _reduce_op(op):
    if op not in _C.REDUCE_OPS.values():
        raise ValueError(f"unknown reduce op {op!r}; use ddpc.distributed.ReduceOp")
    return int(op)


# ---- collectives -------------------------------------------------------------------


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduces ``tensor`` across the group in place. AVG of integers truncates."""
    g = _group(group)
    a = _Arg(tensor, g)
    return _launch(g._c.all_reduce, async_op, _finisher(a.device_buf and a.finish), a.obj, a.code, _reduce_op(op))


def broadcast(tensor, src, group=None, async_op=False):
    """Copies ``tensor`` of rank ``src`` (a rank of the default group) to every member."""
    g = _group(group)
    a = _Arg(tensor, g)
    return _launch(g._c.broadcast, async_op, _finisher(a.device_buf and a.finish), a.obj, a.code,
                   _group_rank(g, src, "src"))


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """Concatenates every rank's ``input_tensor`` (in rank order) into ``output_tensor``."""
    g = _group(group)
    out, inp = _Arg(output_tensor, g), _Arg(input_tensor, g, writable=False)
    if out.code != inp.code:
        raise TypeError("all_gather_into_tensor: input and output dtypes differ")
    return _launch(g._c.all_gather, async_op, _finisher(out.device_buf and out.finish), out.obj, inp.obj, out.code, 0)


def _copy_out(dst, src_buf):
    """Copies a host _C.Buffer into a tensor or array of the same size."""
    if isinstance(dst, np.ndarray):
        memoryview(dst).cast("B")[:] = memoryview(src_buf).cast("B")
    else:
        dst._buf.bump_version()
        _C.copy(dst._buf, src_buf.view(0, dst._buf.shape))


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """Fills ``tensor_list[r]`` with rank r's ``tensor``."""
    g = _group(group)
    inp = _Arg(tensor, g, writable=False)
    if len(tensor_list) != g.size():
        raise ValueError(f"all_gather: tensor_list has {len(tensor_list)} entries for a group of {g.size()}")
    dtype = next(k for k, v in _DTYPE_CODES.items() if v == inp.code)
    for t in tensor_list:
        o = _Arg(t, g, writable=False)
        if o.numel != inp.numel or o.code != inp.code:
            raise ValueError("all_gather: every output must have the input's dtype and number of elements")
    out = _C.Buffer((g.size() * inp.numel,), dtype, inp.obj.device if g.backend == "nccl" else -1)

    def finish():
        for r, t in enumerate(tensor_list):
            _copy_out(t, out.view(r * inp.numel, (inp.numel,)))

    return _launch(g._c.all_gather, async_op, finish, out, inp.obj, inp.code, 0)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduces ``input`` (size x the output's elements) across ranks; rank r
    receives block r."""
    g = _group(group)
    out, inp = _Arg(output, g), _Arg(input, g, writable=False)
    if out.code != inp.code:
        raise TypeError("reduce_scatter_tensor: input and output dtypes differ")
    return _launch(g._c.reduce_scatter, async_op, _finisher(out.device_buf and out.finish), out.obj, inp.obj,
                   out.code, _reduce_op(op))


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


def barrier(group=None, async_op=False, device_ids=None):
    """Waits until every rank of the group has entered the barrier."""
    del device_ids
    return _launch(_group(group)._c.barrier, async_op, None)


def _p2p(tensor, peer, group, tag, sending, async_op):
    g = _group(group)
    if peer is None and g.backend == "nccl":
        raise ValueError("the nccl backend receives from a given rank only: pass src=")
    a = _Arg(tensor, g, writable=not sending)
    call = g._c.send if sending else g._c.recv
    peer_rank = -1 if peer is None else _group_rank(g, peer, "dst" if sending else "src")
    finish = None if sending else _finisher(a.device_buf and a.finish)
    if async_op:
        work = call(a.obj, a.code, peer_rank, int(tag), True)
        if sending:
            return Work(work)
        return Work(work, finish, g.ranks if peer is None else None, peer)
    sender = call(a.obj, a.code, peer_rank, int(tag), False)
    if finish is not None:
        finish()
    return None if sending else g.ranks[peer_rank if sender is None else sender]


def send(tensor, dst, group=None, tag=0):
    """Sends ``tensor`` to rank ``dst``; the matching recv must have the same size, dtype and tag."""
    _p2p(tensor, dst, group, tag, True, False)


def recv(tensor, src=None, group=None, tag=0):
    """Receives into ``tensor`` from rank ``src``, or without ``src`` from
    whichever rank's send with this tag comes first (cpu backend). Returns the
    sender's rank."""
    return _p2p(tensor, src, group, tag, False, False)


def isend(tensor, dst, group=None, tag=0):
    return _p2p(tensor, dst, group, tag, True, True)


def irecv(tensor, src=None, group=None, tag=0):
    """Asynchronous recv; without ``src`` the handle's ``source_rank()`` names the sender once done."""
    return _p2p(tensor, src, group, tag, False, True)

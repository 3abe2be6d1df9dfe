"""ddpc.multiprocessing, shaped like torch.multiprocessing: the standard
library's multiprocessing (Process, Queue, get_context, set_start_method, ...)
with ``spawn`` and ``start_processes`` from ``ddpc.spawn``, so that
``import torch.multiprocessing as mp; mp.spawn(main, args=(world,), nprocs=world)``
ports by renaming.

A cpu tensor crosses to another process by name, as in PyTorch: passed to a
Process started with 'spawn' or 'forkserver', in ``spawn``'s args (forked
children included), or put on a Queue or Pipe, its storage is moved into
shared memory in place (``Tensor.share_memory_()``; every tensor viewing it,
a module's parameter included, follows) and it is pickled as its segment's
name, offset, shape and dtype, and the receiver maps the same memory, so
each process sees the others' writes (a model trained in spawned children is
the parent's; lock-free Hogwild training, as in PyTorch's
examples/mnist_hogwild). A child forked with a Process shares what is in
shared memory by inheriting the mapping, and has a copy of anything else. A
non-leaf tensor that requires grad is refused, as in PyTorch.

Where ddpc differs: a cuda tensor is pickled with its data, so the receiver
gets a copy (PyTorch passes CUDA IPC handles), and so, with a warning, is a
cpu tensor whose memory a numpy array views (its memory can't move; PyTorch
moves it, leaving the array on freed memory), and so is an instance of a
Tensor subclass other than Parameter. ``spawn`` also fills in, where the
parent has not set them, the variables ``init_process_group()`` reads, as
``ddpc.spawn`` does. Plain ``pickle`` and ``copy.deepcopy`` copy tensors,
shared ones too, as in PyTorch.

How long shared memory lives: a segment (``/dev/shm/ddpc_<pid>_<n>``, named
after the process that made it) counts its references, one for each process
that holds it and one for each pickle sent but not unpickled yet, so it
outlives its maker until the receiver has it. A process drops its references
when it frees the tensors or ends normally (sys.exit, the end of a
multiprocessing child, forked ones included), and the last reference removes
the name. A process killed by a signal (SIGKILL, or SIGTERM, which
``Process.terminate()`` sends, unless handled) drops none, so its segments
stay in /dev/shm until removed (``rm /dev/shm/ddpc_<pid>_*``); a pickle never
unpickled keeps its segment there too, and one unpickled twice drops a
reference it was not given. ``spawn`` drops, for a child a signal ended
(one it stopped after another failed, say), the references taken for the
tensors it sent that child, so that a failed run leaves the parent's
segments (a model in ``args``) to the parent alone. PyTorch's
'file_system' strategy has the same limits; its 'file_descriptor'
strategy, which passes descriptors instead of names, has no ddpc
equivalent, so both names mean the segments above.
"""

import contextlib
import io
import multiprocessing as _mp
import threading
import warnings
from multiprocessing import reduction as _reduction
from multiprocessing import util as _util

from . import _C
from .spawn import ProcessException, ProcessExitedException, ProcessRaisedException, SpawnContext, spawn
from .tensor import Tensor

ProcessContext = SpawnContext
_SHARING_STRATEGIES = ("file_descriptor", "file_system")
_sharing_strategy = "file_descriptor"
globals().update((name, getattr(_mp, name)) for name in _mp.__all__)  # as torch.multiprocessing re-exports them


def _rebuild_shared_tensor(name, offset, shape, dtype_name, requires_grad):
    t = Tensor(_C.Buffer.from_shared(name, offset, shape, dtype_name))
    t.requires_grad = requires_grad
    return t


def _check_sendable(t):
    """Refuses, with PyTorch's message, to send a non-leaf tensor that requires grad to another process."""
    if t.requires_grad and not t.is_leaf:
        raise RuntimeError("Cowardly refusing to serialize non-leaf tensor which requires_grad, since autograd "
                           "does not support crossing process boundaries.  If you just want to transfer the data, "
                           "call detach() on the tensor before serializing (e.g., putting it on the queue).")


def _reduce_tensor(t):
    """How multiprocessing pickles a Tensor (and, through its own reduction, a
    Parameter), as PyTorch's reduction does: a cpu tensor's storage moves into
    shared memory in place (every tensor viewing it follows) and the tensor is
    sent by its segment's name; a cuda tensor is sent with its data, and so,
    with a warning, is one whose memory a numpy array (or another consumer
    of its address) views, which can't move (see Tensor.share_memory_)."""
    _check_sendable(t)
    if t.is_cuda:
        return t.__reduce__()
    try:
        t.share_memory_()
    except BufferError as e:
        warnings.warn(f"ddpc.multiprocessing: a tensor is sent to another process as a copy, so that process's "
                      f"writes into it will not show in this one: {e}", RuntimeWarning, stacklevel=2)
        return t.__reduce__()
    name, offset = t._buf.send_shared()
    log = getattr(_sends, "log", None)
    if log is not None:
        log.append(t._buf)
    return _rebuild_shared_tensor, (name, offset, t.shape, t.dtype.name, t.requires_grad)


_sends = threading.local()


@contextlib.contextmanager
def _recording_sends():
    """The buffers of the tensors sent by name while inside, one per
    reference taken: spawn gives back those of a child killed by a signal,
    which never drops them (``Buffer.unsend_shared``)."""
    _sends.log = sent = []
    try:
        yield sent
    finally:
        _sends.log = None


class _CheckingPickler(_reduction.ForkingPickler):
    """Walks what it pickles as multiprocessing's pickler does, but leaves the
    tensors it meets where they are and sends none of them; counts them."""

    def __init__(self, file):
        super().__init__(file)
        self.tensors = 0
        self.dispatch_table[Tensor] = self._check_only

    def _check_only(self, t):
        _check_sendable(t)
        self.tensors += 1
        return int, ()  # nothing of t is sent: it stays where it is, and no reference to a segment is taken


def _tensors_to_send(obj):
    """How many tensors pickling ``obj`` for another process would send;
    raises what that pickling would raise, without moving a tensor into
    shared memory or leaving a reference to a segment behind (as a pickle
    that fails part of the way would)."""
    pickler = _CheckingPickler(io.BytesIO())
    pickler.dump(obj)
    return pickler.tensors


def _release_shared_memory_at_exit(_=None):
    # A forked child ends with os._exit, past atexit and with its objects never
    # freed, so the references go with the finalizers every multiprocessing
    # process runs as it ends (a child starts with none: register_after_fork).
    # -100: after those that flush Queues, whose pickling takes references.
    _util.Finalize(None, _C.release_shared_memory, exitpriority=-100)


_reduction.ForkingPickler.register(Tensor, _reduce_tensor)
_release_shared_memory_at_exit()
_util.register_after_fork(_release_shared_memory_at_exit, _release_shared_memory_at_exit)


def start_processes(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """``spawn`` with the start method chosen, as torch.multiprocessing's (whose default is ``'spawn'``)."""
    return spawn(fn, args, nprocs, join, daemon, start_method)


def set_sharing_strategy(new_strategy):
    """Takes torch.multiprocessing's strategy names so that scripts which set
    one run; both share through named segments, as 'file_system' does (see
    the module's docstring)."""
    global _sharing_strategy
    if new_strategy not in _SHARING_STRATEGIES:
        raise ValueError(f"unknown sharing strategy {new_strategy!r} (one of {', '.join(_SHARING_STRATEGIES)})")
    _sharing_strategy = new_strategy


def get_sharing_strategy():
    return _sharing_strategy


def get_all_sharing_strategies():
    return set(_SHARING_STRATEGIES)


__all__ = list(_mp.__all__) + ["ProcessContext", "ProcessException", "ProcessExitedException", "ProcessRaisedException",
                               "SpawnContext", "get_all_sharing_strategies", "get_sharing_strategy",
                               "set_sharing_strategy", "spawn", "start_processes"]

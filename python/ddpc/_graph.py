"""``ddpc.autograd.graph``, shaped like torch.autograd.graph: hooks on what
the graph saves (``saved_tensors_hooks``, ``save_on_cpu``,
``disable_saved_tensors_hooks``), on several tensors' gradients at once
(``register_multi_grad_hook``), the graph's ``Node`` base class and
``increment_version``.

Where ddpc differs: a node that saves its own output hands the pack hook
that output detached (same memory, no ``grad_fn``), where PyTorch hands the
output itself; some ops save other tensors than PyTorch's (``linear`` packs
its input and weight twice each, a product both operands even where one
needs no gradient), so the number of pack calls can differ; and the tensors
a checkpointed segment saves are not packed (checkpoint recomputes them),
as in PyTorch, nor are the segment's inputs, which PyTorch packs. PyTorch
checks no versions once hooks hold a saved tensor; ddpc still raises where
the unpacked tensor is the packed memory and that memory was changed in
place since (a copy, as ``save_on_cpu`` makes, is never checked).
"""

import threading

from . import _saved
from . import autograd as _ag
from .autograd import Node, RemovableHandle
from .tensor import Tensor

__all__ = ["Node", "disable_saved_tensors_hooks", "increment_version", "register_multi_grad_hook", "save_on_cpu",
           "saved_tensors_hooks"]


class saved_tensors_hooks:
    """Inside the with-block, every tensor an op saves for backward goes
    through ``pack_hook(tensor)``, and the graph keeps what it returns;
    backward calls ``unpack_hook(packed)`` for it once per pass and must get
    back a tensor with the original's values. Nested blocks: the innermost
    pair applies. Hooks are per thread."""

    def __init__(self, pack_hook, unpack_hook):
        self.pack_hook, self.unpack_hook = pack_hook, unpack_hook

    def __enter__(self):
        _saved.push(self.pack_hook, self.unpack_hook)
        return self

    def __exit__(self, *exc):
        _saved.pop()
        return False


class save_on_cpu(saved_tensors_hooks):
    """Saved tensors kept in host memory (pinned with ``pin_memory``, so the
    copy back may overlap compute) and copied back to their device when
    backward needs them: device memory for activations is traded for copies.
    ``device_type`` names the accelerator whose memory is spared."""

    def __init__(self, pin_memory=False, device_type="cuda"):
        if device_type not in ("cuda", "cpu"):
            raise ValueError(f"save_on_cpu: device_type must be 'cuda' or 'cpu', got {device_type!r}")
        pin = bool(pin_memory)

        def pack_to_cpu(t):
            t = t.detach()
            if not t.is_cuda:
                return t.device, t
            return t.device, (t.to(device="cpu").pin_memory() if pin else t.to(device="cpu"))

        def unpack_from_cpu(packed):
            device, t = packed
            return t.to(device=device, non_blocking=pin)

        super().__init__(pack_to_cpu, unpack_from_cpu)


class disable_saved_tensors_hooks:
    """Inside the with-block, pushing saved-tensor hooks raises RuntimeError
    with ``error_message`` (for code whose saved tensors must not be
    touched); entering it while hooks are on raises that too, as PyTorch."""

    def __init__(self, error_message):
        self.error_message = str(error_message)

    def __enter__(self):
        self.prev = _saved.disable(self.error_message)
        return self

    def __exit__(self, *exc):
        _saved.enable(self.prev)
        return False

    def __call__(self, fn):
        def wrapper(*args, **kwargs):
            with disable_saved_tensors_hooks(self.error_message):
                return fn(*args, **kwargs)

        wrapper.__name__ = getattr(fn, "__name__", "wrapper")
        wrapper.__doc__ = getattr(fn, "__doc__", None)
        return wrapper


def increment_version(tensor):
    """Counts an in-place write into ``tensor`` that autograd did not see
    (one made through another library), so that backward refuses saved
    copies of its old values. Takes a tensor or a sequence of tensors."""
    for t in (tensor,) if isinstance(tensor, Tensor) else tensor:
        if not isinstance(t, Tensor):
            raise TypeError(f"increment_version expects tensors, got {type(t).__name__}")
        t._buf.bump_version()


class _MultiGradHook:
    """The state of one register_multi_grad_hook: the gradients one backward
    pass has brought so far, keyed by the pass (its list of queued callbacks)."""

    def __init__(self, tensors, fn, mode):
        self.tensors, self.fn, self.mode = tensors, fn, mode
        self.lock = threading.Lock()
        self.pass_id, self.grads, self.fired = None, None, False

    def hook(self, i, grad):
        with self.lock:
            pass_id = _ag._mode.callbacks  # held, so that a later pass's list cannot take its id
            if pass_id is not self.pass_id:
                self.pass_id, self.grads, self.fired = pass_id, [None] * len(self.tensors), False
                if self.mode == "all" and _ag._mode.callbacks is not None:
                    _ag.queue_callback(self.finish)
            if self.fired:
                return None
            if self.mode == "any":
                self.fired = True
                call = (grad,)
            else:
                self.grads[i] = grad
                if any(g is None for g, t in zip(self.grads, self.tensors) if self.reached(t)):
                    return None
                self.fired = True
                call = (tuple(self.grads),)
        self.fn(*call)
        return None

    @staticmethod
    def reached(t):
        """Whether the running pass delivers a gradient to t."""
        e = _ag._edge(t)
        return e is not None and id(e) in _ag._mode.pass_edges

    def finish(self):
        """At the end of a pass: tensors the pass started from carry no edge
        count, so "all" fires here if they kept it waiting."""
        with self.lock:
            if self.fired:
                return
            self.fired = True
            grads = tuple(self.grads)
        self.fn(grads)


def register_multi_grad_hook(tensors, fn, *, mode="all"):
    """``mode="all"``: ``fn(grads)`` runs once per backward pass, when the
    gradients of all of ``tensors`` that the pass reaches are computed, with
    one entry per tensor (None for those it does not reach). ``mode="any"``:
    ``fn(grad)`` runs once per pass, with the first of those gradients.
    Returns a handle whose ``remove()`` unregisters it."""
    if mode not in ("all", "any"):
        raise ValueError(f"register_multi_grad_hook: mode must be 'all' or 'any', got {mode!r}")
    tensors = tuple(tensors)
    for t in tensors:
        if not isinstance(t, Tensor) or not t.requires_grad:
            raise RuntimeError("register_multi_grad_hook: every tensor must be a ddpc tensor that requires grad")
    state = _MultiGradHook(tensors, fn, mode)
    handles = [t.register_hook(lambda g, i=i: state.hook(i, g)) for i, t in enumerate(tensors)]
    return _Handles(handles)


class _Handles(RemovableHandle):
    """One handle over the handles of several hooks."""

    def __init__(self, handles):
        super().__init__({})
        self.handles = handles

    def remove(self):
        for h in self.handles:
            h.remove()


"""Saved-tensor hooks: what a recorded op keeps for its backward, passed
through a pair of user functions (``ddpc.autograd.graph.saved_tensors_hooks``).

While hooks are pushed in a thread, every node recorded there hands each
tensor it saves to the innermost ``pack_hook`` and keeps only what that
returns, with the pair's ``unpack_hook``; the engine unpacks them all when
the node runs in a backward pass (once per pass; a retained graph keeps the
packed values for the next one) and drops them with the graph otherwise.
The hot path of recording reads only ``active``, the number of pushed pairs
over all threads.
"""

import threading
import weakref

from . import autograd as _ag
from .tensor import Tensor, _shares_memory

active = 0


class _State(threading.local):
    stack = ()  # the pushed (pack_hook, unpack_hook) pairs, innermost last
    disabled = None  # the message of the innermost disable_saved_tensors_hooks, if any


_state = _State()
_lock = threading.Lock()


def push(pack_hook, unpack_hook):
    global active
    if _state.disabled is not None:
        raise RuntimeError(_state.disabled)
    _state.stack = _state.stack + ((pack_hook, unpack_hook),)
    with _lock:
        active += 1


def pop():
    global active
    _state.stack = _state.stack[:-1]
    with _lock:
        active -= 1


def disable(message):
    """Refuses hooks from now on in this thread (raising ``message``); returns the previous message."""
    if _state.stack:
        raise RuntimeError(message)
    prev, _state.disabled = _state.disabled, message
    return prev


def enable(prev):
    _state.disabled = prev


def hooks():
    """The innermost pushed pair of this thread, or None."""
    stack = _state.stack
    return stack[-1] if stack else None


class _Slot:
    """One packed tensor: the pack hook's value, the version of the memory it
    was packed from (held weakly, so that packing may free that memory), and
    the edge the tensor had in the graph, which an unpacked copy takes again
    in a create_graph pass."""

    __slots__ = ("value", "memory", "version", "edge")

    def __init__(self, t, pack_hook):
        buf = t._buf
        version = buf.version
        self.value = pack_hook(t)
        if buf.version != version:
            raise RuntimeError("A saved tensor pack hook is modifying its input in place. Tensors provided as input "
                               "to pack hook cannot be modified by in-place operations as this can lead to "
                               "unexpected side-effects.")
        self.memory, self.version = weakref.ref(buf), version
        edge = _ag._edge(t)
        self.edge = weakref.ref(edge) if isinstance(edge, Tensor) else edge

    def unpack(self, unpack_hook, node, i):
        t = unpack_hook(self.value)
        if not isinstance(t, Tensor):
            raise TypeError(f"Output of saved tensor unpack_hook expected to be a Tensor but got result of type "
                            f"{type(t).__name__}")
        buf = self.memory()
        # A copy holds the values of the forward pass whatever happened since;
        # the packed memory itself must not have changed.
        if buf is not None and buf.version != self.version and _shares_memory(t, Tensor(buf)):
            raise RuntimeError(
                f"one of the tensors needed for gradient computation has been modified by an in-place operation: "
                f"tensor {i} saved by {node.name()} (shape {tuple(t.shape)}, {t.dtype}) is at version "
                f"{buf.version}; expected version {self.version} instead. Make the in-place change after "
                "backward(), or on a copy (.clone())")
        if self.edge is not None and _ag.is_grad_enabled() and not t.requires_grad:
            t = _reattached(t, self.edge)
        return t


def _reattached(t, edge):
    """t standing in the graph where the packed tensor stood (a create_graph pass differentiates through it)."""
    t = t.detach()  # the hook's own tensor stays as it is
    if isinstance(edge, weakref.ref):
        leaf = edge()
        return t if leaf is None else _ag._attach(t, _ag._ViewBackward(leaf))
    return _ag._attach(t, edge)


class Packed:
    """Stands in for a node's saved tuple while hooks hold its tensors."""

    __slots__ = ("items", "unpack_hook")

    def __init__(self, saved, pair):
        pack_hook, self.unpack_hook = pair
        self.items = tuple(_Slot(t, pack_hook) if isinstance(t, Tensor) else t for t in saved)

    def unpack(self, node):
        """The saved tuple again, each tensor through the unpack hook."""
        return tuple(s.unpack(self.unpack_hook, node, i) if type(s) is _Slot else s for i, s in enumerate(self.items))

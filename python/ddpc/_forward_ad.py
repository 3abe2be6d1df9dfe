"""``ddpc.autograd.forward_ad``, shaped like torch.autograd.forward_ad:
``make_dual`` gives a tensor a tangent inside a ``dual_level``, and
``unpack_dual`` reads the tangent that ops carried to a result.

ddpc carries no tangents through its ops. A dual tensor is instead a node
in the reverse graph (an identity on its primal), and ``unpack_dual(y)``
computes y's tangent J t when asked, by reverse mode twice: the gradient of
y against a zero cotangent u that requires grad is J^T u, a linear function
of u recorded with ``create_graph``; the gradient in u of <J^T u, t> is J t.
So forward mode covers exactly the ops that have double backward (as
``ddpc.func.jvp``, which computes the same), and an op without one raises
NotImplementedError naming it. A custom autograd.Function's tangent is its
``jvp`` (its node records, in the first pass, its backward as a linear
function whose transpose is jvp), and one without jvp raises
NotImplementedError, as in PyTorch. A gradient cut from u (a backward or hook
that detaches it) would make the tangent silently zero: it raises instead,
unless the Jacobian it stands for is zero (a step function's, say).

Where ddpc differs: ops record the graph (grad mode must be on, and a dual
tensor requires grad); each ``unpack_dual`` costs two backward passes over
the graph behind its argument; tangents are not themselves differentiable;
``unpack_dual(y).primal`` is ``y`` itself.
"""

import collections
import weakref

from . import autograd as _ag
from ._function import NoJvpError, forward_mode_pass
from .tensor import Tensor, arange, zeros

__all__ = ["UnpackedDualTensor", "dual_level", "enter_dual_level", "exit_dual_level", "make_dual", "unpack_dual"]

UnpackedDualTensor = collections.namedtuple("UnpackedDualTensor", ["primal", "tangent"])


class _Level:
    """The dual tensors made at one level, held weakly (through their nodes, which the graph keeps)."""

    def __init__(self):
        self.duals = []


_current = []  # the open level, if any (PyTorch has one level at a time)


def enter_dual_level():
    """Opens a new forward grad level and returns its index; its tangents live until exit_dual_level."""
    if _current:
        raise RuntimeError("Nested forward mode AD is not supported at the moment")
    _current.append(_Level())
    return 0


def exit_dual_level(*, level=None):
    """Closes the open level: the dual tensors made in it lose their tangents."""
    if not _current or (level is not None and level != 0):
        raise RuntimeError(f"Trying to exit a forward AD level ({level}) that was not the last one entered")
    _current.pop().duals.clear()


class dual_level:
    """A with-block inside which dual tensors carry tangents."""

    def __enter__(self):
        return enter_dual_level()

    def __exit__(self, *exc):
        exit_dual_level()
        return False


class _DualNode(_ag.Node):
    """The node of a dual tensor: the identity on its primal, with the tangent beside it."""

    passes_through = True
    double_backward = True

    def __init__(self, primal, tangent, level):
        super().__init__((primal,), ())
        self.tangent, self.level = tangent, level

    def backward(self, g):
        return (g,)

    def name(self):
        return "MakeDualBackward"


def _level(level, what):
    if level is not None and level != 0:
        raise RuntimeError(f"{what}: there is no forward AD level {level}; ddpc has one level, 0")
    return _current[0] if _current else None


def make_dual(tensor, tangent, *, level=None):
    """A tensor with ``tensor``'s values whose tangent is ``tangent`` at the open level."""
    lvl = _level(level, "make_dual")
    if lvl is None:
        raise RuntimeError("To create a dual tensor, you must be inside a forward AD level (dual_level())")
    if not isinstance(tensor, Tensor) or not isinstance(tangent, Tensor):
        raise TypeError("make_dual: expected two ddpc tensors, got "
                        f"{type(tensor).__name__} and {type(tangent).__name__}")
    if not tensor.dtype.is_floating_point:
        raise ValueError(f"make_dual: expected a floating point primal, got {tensor.dtype}")
    if tangent.shape != tensor.shape or tangent.dtype is not tensor.dtype or tangent.device != tensor.device:
        raise ValueError(f"make_dual: the tangent must be like the primal ({tuple(tensor.shape)}, {tensor.dtype}, "
                         f"{tensor.device}); got ({tuple(tangent.shape)}, {tangent.dtype}, {tangent.device})")
    if not _ag.is_grad_enabled():
        raise RuntimeError("make_dual: ddpc computes tangents from the recorded graph, so forward AD needs grad mode "
                           "on (not inside no_grad)")
    node = _DualNode(tensor, tangent.detach(), lvl)
    lvl.duals.append(weakref.ref(node))
    return _ag._attach(tensor.detach(), node)


def unpack_dual(tensor, *, level=None):
    """(primal, tangent) of ``tensor`` at the open level; the tangent is None
    where ``tensor`` does not depend on a dual tensor of that level."""
    lvl = _level(level, "unpack_dual")
    if lvl is None or not isinstance(tensor, Tensor) or not tensor.requires_grad or \
            not tensor.dtype.is_floating_point:
        return UnpackedDualTensor(tensor, None)
    if isinstance(tensor.grad_fn, _DualNode) and tensor.grad_fn.level is lvl:
        return UnpackedDualTensor(tensor, tensor.grad_fn.tangent)
    nodes = [n for n in (r() for r in lvl.duals) if n is not None]
    if not nodes:
        return UnpackedDualTensor(tensor, None)
    return UnpackedDualTensor(tensor, _tangent(tensor, nodes))


def _tangent(y, nodes):
    """J t for y over the dual nodes ``nodes``, by reverse mode twice (see the module docstring)."""
    targets = [_ag._attach(n.tangent.detach(), n) for n in nodes]
    u = zeros(y.shape, dtype=y.dtype, device=y.device, requires_grad=True)
    try:
        with _ag.enable_grad(), forward_mode_pass():
            grads = _ag.grad(y, targets, u, retain_graph=True, create_graph=True, allow_unused=True)
            check_linked((y,), targets, grads, "unpack_dual")
            terms = [(g * n.tangent).sum() for g, n in zip(grads, nodes) if g is not None]
            if not terms:
                return None
            dot = terms[0]
            for t in terms[1:]:
                dot = dot + t
        if not dot.requires_grad:
            return zeros(y.shape, dtype=y.dtype, device=y.device)
        (jt,) = _ag.grad(dot, u, allow_unused=True, materialize_grads=True)
    except NoJvpError:
        raise
    except NotImplementedError as e:
        raise NotImplementedError(f"forward-mode AD (unpack_dual) needs double backward of every op between the "
                                  f"dual tensors and the result: {e}") from None
    return jt


def check_linked(outputs, inputs, transposed, what):
    """Raises where an entry of ``transposed`` (J^T u for ``outputs`` over
    ``inputs``, computed at u = 0 with create_graph) does not depend on u
    although J is not zero: it is J^T r for a generic r that tells them apart."""
    loose = [i for i, t in enumerate(transposed) if t is not None and not t.requires_grad]
    if not loose:
        return
    live = [o for o in outputs if o.requires_grad]
    # sqrt(1), sqrt(2), ...: no pattern (constant, alternating, summing to 0) that a Jacobian's null space might hold
    probe = [arange(1, o.numel() + 1, dtype=o.dtype, device=o.device).sqrt().reshape(o.shape) for o in live]
    with forward_mode_pass():
        got = _ag.grad(live, [inputs[i] for i in loose], probe, retain_graph=True, allow_unused=True)
    for i, g in zip(loose, got):
        if g is not None and bool((g != 0).any()):
            raise RuntimeError(f"{what}: forward mode computes tangents by differentiating gradients, and the "
                               f"gradient for input {i} was computed by a backward (or a hook) that detaches it "
                               "from the gradient it got, so its tangent cannot be derived; write that backward "
                               "in differentiable ops (or give a custom Function a jvp)")

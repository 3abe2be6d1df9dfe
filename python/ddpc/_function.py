"""Custom differentiable operations, as torch.autograd.Function.

A subclass gives two static methods: ``forward(ctx, *args)``, which computes
its outputs (with no graph recorded) and saves what backward needs with
``ctx.save_for_backward``, and ``backward(ctx, *grads)``, which takes one
gradient per output and returns one per input of forward (None where an
input needs none). ``MyOp.apply(*args)`` runs forward and records one node.
PyTorch's newer form works too: ``forward(*args)`` without ctx, and
``setup_context(ctx, inputs, output)`` saving what backward needs.

The node is the ``ctx``: the engine checks the saved tensors' versions before
backward (an in-place change since forward raises, as for ddpc's own ops) and
frees them after it unless retain_graph. In a ``create_graph=True`` pass
backward runs with grad mode on, so a backward written in differentiable ops
can be differentiated again, as in PyTorch; under ``once_differentiable``
such a pass computes the gradient with grad mode off, and differentiating
that gradient again raises. A forward that modifies an input in place
says so with ``ctx.mark_dirty(input)`` and returns that input, which then
takes the function's node as its history, as PyTorch's.

Forward mode (``ddpc.autograd.forward_ad``, ``ddpc.func.jvp``) calls the
static method ``jvp(ctx, *tangents)``, as PyTorch's: one tangent per input
of forward (zeros for a tensor input without one, None for other inputs),
one tangent returned per output; ``ctx.saved_tensors`` there gives what
``ctx.save_for_forward`` saved. A Function without jvp raises in forward
mode, as in PyTorch; ddpc's own Functions, whose backward is written in
differentiable ops, take their tangents from double backward instead, as
ddpc's other ops.
"""

import contextlib
import inspect
import threading

from ._saved import Packed
from . import autograd as _ag
from .autograd import Node, _attach, _mode, _packed, _reduce_to, no_grad
from .tensor import Tensor, zeros


class NoJvpError(NotImplementedError):
    """A custom Function without jvp reached in forward mode."""


class _ForwardMode(threading.local):
    """Whether the backward pass running on this thread builds the transposed
    Jacobian J^T u that forward mode differentiates in u (see _forward_ad)."""

    active = False


_forward_mode = _ForwardMode()


@contextlib.contextmanager
def forward_mode_pass():
    """Inside: a custom Function's node records its backward as a function of
    its output gradients whose own backward is the Function's jvp, so that
    forward mode by reverse mode twice gives the tangent jvp defines."""
    outer = _forward_mode.active
    _forward_mode.active = True
    try:
        yield
    finally:
        _forward_mode.active = outer


class _OutputGrads:
    """The gradients of some of a multi-output function's outputs, gathered by
    the engine (which sums two gradients of one node with ``+``) before backward runs."""

    __slots__ = ("grads",)

    def __init__(self, grads):
        self.grads = grads

    def __add__(self, other):
        grads = dict(self.grads)
        for i, g in other.grads.items():
            grads[i] = grads[i] + g if i in grads else g
        return _OutputGrads(grads)


class _OutputOf(Node):
    """Output ``index`` of a multi-output function: hands its gradient to the function's node."""

    passes_through = True
    double_backward = True

    def __init__(self, fn, index):
        super().__init__(())
        self.edges = (fn,)
        self.index = index

    def backward(self, g):
        return (_OutputGrads({self.index: g}),)

    def output_of(self):
        return self.edges[0], self.index

    def name(self):
        return self.edges[0].name()


class FunctionCtx(Node):
    """What forward and backward share: ``save_for_backward``, ``saved_tensors``,
    ``needs_input_grad``, ``mark_non_differentiable``, ``set_materialize_grads``,
    ``save_for_forward``; other attributes set in forward are kept for backward
    and jvp. Each Function has its own subclass, named as PyTorch's grad_fn
    (``MyOpBackward``)."""

    passes_through = True  # backward may hand back the incoming gradient itself
    in_jvp = False
    saved_for_forward = ()

    def __init__(self, fn, args):
        self.once = getattr(fn.backward, "_once_differentiable", False)
        super().__init__(args)
        self._fn = fn
        self._inputs = tuple((a.shape, a.dtype, a.device) if isinstance(a, Tensor) else None for a in args)
        self.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad and _mode.enabled for a in args)
        self.non_differentiable = ()
        self.dirty = ()
        self.materialize_grads = True
        self.outputs = ()

    @property
    def double_backward(self):
        return not self.once or self.uses_jvp()

    def uses_jvp(self):
        """Whether this node's part of a forward-mode pass comes from the Function's jvp (see forward_mode_pass)."""
        return _forward_mode.active and not self._fn.__module__.startswith("ddpc.")

    def save_for_backward(self, *tensors):
        if not all(t is None or isinstance(t, Tensor) for t in tensors):
            raise TypeError("save_for_backward takes tensors (or None) only; keep other values as ctx attributes")
        self.saved, self.saved_versions = _packed(tensors)

    def save_for_forward(self, *tensors):
        """Keeps tensors for jvp, where ``saved_tensors`` gives them (as PyTorch's)."""
        if not all(t is None or isinstance(t, Tensor) for t in tensors):
            raise TypeError("save_for_forward takes tensors (or None) only; keep other values as ctx attributes")
        self.saved_for_forward = tensors

    @property
    def saved_tensors(self):
        if self.in_jvp:
            return self.saved_for_forward
        if self.saved is None:
            raise RuntimeError("trying to backward through the graph a second time (or to read saved tensors after "
                               "they were freed); pass retain_graph=True to the first backward()")
        if type(self.saved) is Packed:  # read outside the backward pass
            return self.saved.unpack(self)
        return self.saved

    def mark_non_differentiable(self, *outputs):
        self.non_differentiable += outputs

    def set_materialize_grads(self, value):
        self.materialize_grads = bool(value)

    def mark_dirty(self, *tensors):
        self.dirty += tensors

    def name(self):
        return f"{self._fn.__name__}Backward"

    def grad_outputs(self, g):
        if type(g) is not _OutputGrads:
            return (g,)
        return tuple(g.grads.get(i) for i in range(len(self.outputs)))

    def from_grad_outputs(self, grads):
        if len(self.outputs) == 1:
            return grads[0]
        return _OutputGrads({i: x for i, x in enumerate(grads) if x is not None})

    def backward(self, g):
        grads = g.grads if type(g) is _OutputGrads else {0: g}
        outs = []
        for i, (shape, dtype, device) in enumerate(self.outputs):
            got = grads.get(i)
            if got is None and self.materialize_grads and shape is not None:
                got = zeros(shape, dtype=dtype, device=device)
            outs.append(got)
        if self.uses_jvp():
            if self._fn.jvp is Function.jvp:
                raise NoJvpError("You must implement the jvp function for custom autograd.Function to use "
                                          f"it with forward mode AD ({self._fn.__name__} has none)")
            res = _Transposed.apply(self, *outs)
        else:
            res = self._fn.backward(self, *outs)
        res = res if isinstance(res, tuple) else (res,)
        if len(res) > len(self._inputs) and all(gi is None for gi in res[len(self._inputs):]):
            res = res[:len(self._inputs)]  # trailing Nones beyond the inputs are allowed, as in PyTorch
        if len(res) != len(self._inputs):
            raise RuntimeError(f"function {self.name()} returned an incorrect number of gradients (expected "
                               f"{len(self._inputs)}, got {len(res)})")
        out = []
        for i, (gi, want, need) in enumerate(zip(res, self._inputs, self.needs_input_grad)):
            if gi is None or not need:
                out.append(None)
                continue
            if not isinstance(gi, Tensor):
                raise TypeError(f"function {self.name()} returned a {type(gi).__name__} as the gradient of input "
                                f"{i}; expected a tensor or None")
            if tuple(gi.shape) != tuple(want[0]) and not _expandable(want[0], gi.shape):
                raise RuntimeError(f"function {self.name()} returned an invalid gradient at index {i}: got shape "
                                   f"{tuple(gi.shape)} but expected shape compatible with {tuple(want[0])}")
            out.append(_reduce_to(gi, want[0], want[1]))  # a gradient of the input broadcast: summed back, as PyTorch's
        return tuple(out)


def _node_classes(fn):
    """The node classes of Function ``fn``, a FunctionCtx and an _OutputOf
    (for each output of several), both named ``fnBackward`` as PyTorch's
    grad_fn; made once per Function."""
    classes = fn.__dict__.get("_node_classes")
    if classes is None:
        name = f"{fn.__name__}Backward"
        classes = tuple(type(name, (base,), {"__module__": fn.__module__}) for base in (FunctionCtx, _OutputOf))
        fn._node_classes = classes
    return classes


def _expandable(shape, target):
    """Whether a tensor of ``shape`` broadcasts to ``target``."""
    return len(shape) <= len(target) and all(s in (1, t) for s, t in zip(reversed(shape), reversed(target)))


class Function:
    """Base class of custom differentiable operations (see the module docstring)."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError("custom functions are not instantiated: call MyFunction.apply(*args)")

    @staticmethod
    def forward(ctx, *args):
        raise NotImplementedError("a Function subclass must define forward(ctx, *args)")

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError("a Function subclass must define backward(ctx, *grads) to be differentiated")

    @staticmethod
    def jvp(ctx, *tangents):
        """Forward mode's rule, where a subclass defines it: the tangents of
        the outputs from those of the inputs (see the module docstring)."""
        raise NotImplementedError

    @staticmethod
    def setup_context(ctx, inputs, output):
        """PyTorch's newer form, where a subclass defines it: forward(*args)
        takes no ctx, and setup_context(ctx, inputs, output) then saves what
        backward needs."""
        raise NotImplementedError

    @classmethod
    def apply(cls, *args, **kwargs):
        new_style = cls.setup_context is not Function.setup_context
        if kwargs or new_style:  # as PyTorch's: bound to forward's parameters (defaults too), passed by position
            bound = inspect.signature(cls.forward).bind(*((() if new_style else (None,)) + args), **kwargs)
            bound.apply_defaults()
            args = bound.args if new_style else bound.args[1:]
        ctx_class, output_class = _node_classes(cls)
        ctx = ctx_class(cls, args)
        with no_grad():
            if new_style:
                result = cls.forward(*args)
                cls.setup_context(ctx, args, result)
            else:
                result = cls.forward(ctx, *args)
        single = not isinstance(result, tuple)
        outputs = (result,) if single else result
        _check_dirty(ctx, args, outputs)
        # An input handed back as an output becomes a new tensor over the same
        # memory, unless forward marked it dirty: then the input itself is the output.
        outputs = tuple(o.detach() if isinstance(o, Tensor) and any(o is a for a in args)
                        and not any(o is d for d in ctx.dirty) else o for o in outputs)
        ctx.outputs = tuple((o.shape, o.dtype, o.device) if isinstance(o, Tensor) else (None, None, None)
                            for o in outputs)
        differentiable = [isinstance(o, Tensor) and o.dtype.is_floating_point
                          and not any(o is n for n in ctx.non_differentiable) for o in outputs]
        if any(ctx.needs_input_grad) and any(differentiable):
            for i, (o, d) in enumerate(zip(outputs, differentiable)):
                if d:
                    _attach(o, ctx if single else output_class(ctx, i))
                    if any(o is t for t in ctx.dirty):  # written in place: as after any in-place op
                        _ag._follow_retain(o)
                        _ag._propagate(o)
        return outputs[0] if single else outputs


class _Transposed(Function):
    """A custom Function's backward, as a function of its output gradients, in
    a forward-mode pass: its values are the Function's backward, and its own
    backward, the transpose of that linear map, is the Function's jvp."""

    @staticmethod
    def forward(ctx, fn_ctx, *grads):
        ctx.fn_ctx = fn_ctx
        res = fn_ctx._fn.backward(fn_ctx, *grads)
        # A new tensor per output: backward may return one tensor as the gradient of two inputs.
        return tuple(r.detach() if isinstance(r, Tensor) else r for r in (res if isinstance(res, tuple) else (res,)))

    @staticmethod
    def backward(ctx, *tangents):
        fn_ctx = ctx.fn_ctx
        n = len(fn_ctx._inputs)
        tangents = tuple(t if t is not None or want is None else zeros(want[0], dtype=want[1], device=want[2])
                         for t, want in zip(tangents + (None,) * n, fn_ctx._inputs))
        fn_ctx.in_jvp = True
        try:
            res = fn_ctx._fn.jvp(fn_ctx, *tangents)
        finally:
            fn_ctx.in_jvp = False
        return (None,) + (res if isinstance(res, tuple) else (res,))


def _check_dirty(ctx, args, outputs):
    """The inputs forward marked dirty: each must be an input, returned as an
    output, and one whose history autograd can take over (not a leaf that
    requires grad, not a view of another tensor). The in-place op that
    changed it moved its version on, so nodes that saved its old values
    refuse to use them."""
    for t in ctx.dirty:
        if not any(t is a for a in args):
            raise RuntimeError(f"{ctx.name()}: mark_dirty takes only the function's inputs")
        if not any(t is o for o in outputs):
            raise RuntimeError(f"{ctx.name()}: an input marked dirty must be returned as an output")
        in_graph = t.requires_grad and _mode.enabled
        if in_graph and t.grad_fn is None:
            raise RuntimeError(f"{ctx.name()}: a leaf tensor that requires grad is being used in an in-place "
                               "operation")
        if in_graph:  # a view of another tensor: that tensor takes the write too (see apply)
            _ag._writable_history(t, f"{ctx.name()} (an input marked dirty)")


def once_differentiable(fn):
    """Marks a backward as not differentiable twice: a gradient a create_graph pass computes through it raises
    when differentiated again."""
    fn._once_differentiable = True
    return fn

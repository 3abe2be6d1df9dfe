"""Reverse-mode automatic differentiation over ddpc's ops.

Each differentiable op computes its result with the _C ops and, when grad
mode is on and an input requires grad, records a ``Node`` as the result's
``grad_fn``: the edges to its inputs' nodes (or to leaf tensors) and what it
saved for the backward pass. ``backward`` walks that graph once: it counts how
many edges reach every node and leaf, runs each node when all of its gradient
has arrived (latest-created first among the ready ones, as PyTorch does), and
accumulates a leaf's gradient the moment its last contribution arrives. That
is when the leaf's ``register_hook`` functions see the gradient and its
``register_post_accumulate_grad_hook`` functions fire, so a data-parallel
reducer can start communicating a parameter's gradient while the rest of the
backward pass is still running.

Broadcasting is PyTorch's (numpy's) rule: shapes aligned at their last dims
must match or be 1 there. A tensor whose shape is a suffix of the other's (a
bias row, a scalar) goes through the row-broadcast op; any other pair through
the general strided one.
"""

import builtins
import collections
import copy
import functools
import heapq
import inspect
import itertools
import math
import numbers
import sys
import threading
import traceback
import warnings
import weakref

import numpy as np

from . import _C, _indexing, _saved, profiler
from ._C import ArgumentError, DtypeError, IndexOutOfRangeError
from ._dtype import checked_memory_format, result_type
from .backends import alert_not_deterministic
from .amp import autocast_op
from .tensor import (_ADD, _BITAND, _BITOR, _BITXOR, _DIV, _EQ, _GE, _GT, _INT_BOUNDS, _LE, _LSHIFT, _LT, _MAX, _MIN,
                     _MUL, _NE, _POWER, _RDIV, _RLSHIFT, _RPOWER, _RRSHIFT, _RSHIFT,
                     _RSUB, _SUB, Tensor, _check_no_grad_inplace, _copy_view, _CopyOf, _is_float_scalar, _read,
                     _refresh, _reshaped_copy_view, _shares_memory, _write_back,
                     bfloat16, bool_, float16, float32, float64, get_default_dtype, get_dtype, int32, int64, promote,
                     uint8)
from .tensor import _along
from .tensor import cat as _cat_storage
from .tensor import stack as _stack_storage

# The unary op codes of csrc/ops_nn.h.
(_RELU, _GELU, _TANH, _SIGMOID, _EXP, _LOG, _POW, _LEAKY_RELU, _ELU, _SILU, _SOFTPLUS, _MISH, _HARDTANH, _HARDSWISH,
 _HARDSIGMOID, _ABS, _SQRT, _RSQRT, _SQUARE, _SIN, _COS, _LOG1P, _EXPM1, _ERF, _RECIPROCAL, _SIGN, _FLOOR, _CEIL, _TRUNC,
 _ROUND, _CLAMP, _ISNAN, _ISINF, _ISFINITE, _LOG2, _LOG10, _EXP2, _SINH, _COSH, _ASINH, _ATAN, _TAN, _ASIN, _ACOS,
 _ACOSH, _ATANH, _ERFC, _LGAMMA, _ERFINV, _NDTRI, _ERFCX, _DIGAMMA, _POLYGAMMA, _I0, _I0E, _I1, _I1E, _BESSEL_J0,
 _BESSEL_J1, _BESSEL_Y0, _BESSEL_Y1, _BESSEL_K0, _BESSEL_K1, _BESSEL_K0E, _BESSEL_K1E, _SPHERICAL_BESSEL_J0,
 _AIRY_AI) = range(67)


# ---- grad mode ---------------------------------------------------------------------

class _GradMode(threading.local):
    enabled = True
    sole_leaves = frozenset()  # ids of the leaves one gradient reaches in the running backward pass
    pass_edges = frozenset()  # ids of the edges the running backward pass delivers gradients to
    callbacks = None  # functions to run when the running backward pass ends (queue_callback)
    inference = False  # inside inference_mode()
    recording = None  # the nodes a checkpointed forward creates, in order (see ddpc.utils.checkpoint)


_mode = _GradMode()


def is_grad_enabled():
    """Whether ops record the graph in this thread."""
    return _mode.enabled


class _ModeContext:
    """Sets grad mode for a with-block, or for every call of a decorated function."""

    _mode_value = True

    def __enter__(self):
        self.prev = _mode.enabled
        _mode.enabled = self._mode_value
        return self

    def __exit__(self, *exc):
        _mode.enabled = self.prev
        return False

    def _for_call(self):
        """A context manager that sets the mode for one call of a decorated function."""
        return set_grad_enabled(self._mode_value)

    def __call__(self, fn):
        if inspect.isgeneratorfunction(fn):
            def wrapper(*args, **kwargs):  # the mode holds in the generator's body, each time it runs
                gen = fn(*args, **kwargs)
                sent = None
                while True:
                    with self._for_call():
                        try:
                            item = gen.send(sent)
                        except StopIteration as stop:
                            return stop.value
                    sent = yield item
        else:
            def wrapper(*args, **kwargs):
                with self._for_call():
                    return fn(*args, **kwargs)

        wrapper.__name__ = getattr(fn, "__name__", "wrapper")
        wrapper.__doc__ = getattr(fn, "__doc__", None)
        return wrapper

    def __new__(cls, *args, **kwargs):
        # A bare @no_grad (or @enable_grad, @inference_mode) decorates the function, as PyTorch's do.
        if cls in (no_grad, enable_grad, inference_mode) and len(args) == 1 and not kwargs and callable(args[0]) \
                and not isinstance(args[0], bool):
            return cls()(args[0])
        return super().__new__(cls)


class no_grad(_ModeContext):
    """Ops inside record no graph (context manager or decorator)."""

    _mode_value = False


class enable_grad(_ModeContext):
    """Re-enables graph recording inside a ``no_grad`` region."""

    _mode_value = True


class set_grad_enabled(_ModeContext):
    """Sets grad mode: at once when called, like PyTorch, and for a with-block."""

    def __init__(self, mode):
        self._mode_value = bool(mode)
        self.prev = _mode.enabled
        _mode.enabled = self._mode_value

    def __enter__(self):
        _mode.enabled = self._mode_value  # self.prev was taken before __init__ changed the mode
        return self

    def __call__(self, fn):
        _mode.enabled = self.prev  # used as a decorator: only the calls change the mode
        return super().__call__(fn)


class inference_mode(_ModeContext):
    """As no_grad (ddpc has no separate inference tensors), and
    ``is_inference_mode_enabled()`` says True inside; ``inference_mode(False)``
    turns both off, re-enabling grad mode inside no_grad, as PyTorch's."""

    def __init__(self, mode=True):
        self.mode = bool(mode)

    def __enter__(self):
        self.prev = _mode.enabled, _mode.inference
        _mode.enabled, _mode.inference = not self.mode, self.mode
        return self

    def __exit__(self, *exc):
        _mode.enabled, _mode.inference = self.prev
        return False

    def _for_call(self):
        return inference_mode(self.mode)


def is_inference_mode_enabled():
    """Whether this thread is inside inference_mode()."""
    return _mode.inference


# ---- anomaly detection --------------------------------------------------------------

class _Anomaly:
    """Anomaly mode, process-wide as PyTorch's: nodes keep the stack that created
    them, and backward names the node whose gradient fails or holds NaN."""

    enabled = False
    check_nan = True


def is_anomaly_enabled():
    return _Anomaly.enabled


def is_anomaly_check_nan_enabled():
    return _Anomaly.check_nan


class set_detect_anomaly:
    """Turns anomaly detection on or off, at once and for a with-block: while
    on, every recorded op keeps the stack of the forward call that made it,
    and an error in its backward, or (``check_nan``) NaN in a gradient it
    returns, raises naming it and warns with that stack. It slows every op."""

    def __init__(self, mode, check_nan=True):
        self.prev = (_Anomaly.enabled, _Anomaly.check_nan)
        _Anomaly.enabled, _Anomaly.check_nan = bool(mode), bool(check_nan)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _Anomaly.enabled, _Anomaly.check_nan = self.prev
        return False


def set_anomaly_enabled(enabled, check_nan=True):
    set_detect_anomaly(enabled, check_nan)


class detect_anomaly:
    """Anomaly detection on (see ``set_detect_anomaly``) inside a with-block,
    or for every call of a decorated function."""

    def __init__(self, check_nan=True):
        self.check_nan = check_nan
        warnings.warn("Anomaly Detection has been enabled. This mode will increase the runtime and should only be "
                      "enabled for debugging.")

    def __enter__(self):
        self.mode = set_detect_anomaly(True, self.check_nan)
        return self

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)
        return wrapper


_PACKAGE_DIR = __file__.rsplit("/", 1)[0] + "/"


def _forward_trace():
    """The stack of the running forward call, up to the call into ddpc."""
    frames = traceback.extract_stack()
    while frames and frames[-1].filename.startswith(_PACKAGE_DIR):
        frames.pop()
    return "".join(traceback.format_list(frames))


def _anomaly_checked_backward(node, g):
    """node.backward(g) in anomaly mode: an error, or NaN in a returned
    gradient, warns with the stack that created the node and raises."""
    try:
        in_grads = node.backward(g)
        if _Anomaly.check_nan:
            for i, ig in enumerate(in_grads):
                if isinstance(ig, Tensor) and ig.dtype.is_floating_point and ig.detach().isnan().any().item():
                    raise RuntimeError(f"Function '{node.name()}' returned nan values in its {i}th output.")
    except Exception:
        trace = getattr(node, "trace", None) or "(not kept: the node was made before anomaly detection was on)\n"
        warnings.warn(f"Error detected in {node.name()}. Traceback of forward call that caused the error:\n{trace}",
                      stacklevel=2)
        raise
    return in_grads


# ---- graph --------------------------------------------------------------------------

_sequence = itertools.count()


class RemovableHandle:
    """Returned by the register_*hook methods; ``remove()`` unregisters the hook."""

    _ids = itertools.count()

    def __init__(self, hooks, extra_dict=None):
        self.hooks = hooks
        self.id = next(RemovableHandle._ids)
        # Tables of the hook's flags (PyTorch's with_kwargs and always_call ones), cleared with it.
        self.extra_dicts = () if extra_dict is None else tuple(extra_dict) if isinstance(extra_dict, (list, tuple)) \
            else (extra_dict,)

    def remove(self):
        self.hooks.pop(self.id, None)
        for d in self.extra_dicts:
            d.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


class Node:
    """A recorded op. ``edges`` holds, per input, the input's Node, the input
    itself when it is a leaf that requires grad, or None; ``next_functions``
    shows them as PyTorch does, (node, output index) pairs with an
    AccumulateGrad node standing for each such leaf.

    Subclasses implement ``backward(grad)`` returning one gradient per input
    (None for inputs that need none), and set ``passes_through`` when a
    returned gradient may be the incoming one or a view of it (such gradients
    are copied before they become a leaf's ``.grad``). A subclass that sets
    ``double_backward`` computes its backward with recorded ops whenever grad
    mode is on, as it is in a ``create_graph=True`` pass, so that gradients
    of its gradients exist; such a pass runs any other node with grad mode
    off and gives its gradients a grad_fn that raises when differentiated.
    """

    passes_through = False
    double_backward = False
    node_hooks = None  # a _NodeHooks once register_prehook or register_hook was called
    retain = None  # retain_grad's keep(grad) of the tensor this node made, run after its tensor hooks

    def __init__(self, inputs, saved=()):
        self.edges = tuple(_edge(t) for t in inputs)
        self.seq = next(_sequence)
        if _saved.active and saved:
            self.saved, self.saved_versions = _packed(saved)
        else:
            self.saved = saved
            # In-place writes counted on each saved tensor's memory so far: backward
            # refuses to run on a saved tensor changed since (its gradient would be wrong).
            self.saved_versions = tuple((t._buf, t._buf.version) if isinstance(t, Tensor) else None for t in saved)
        self.pre_hooks = None
        if _mode.recording is not None:
            _mode.recording.append(self)
        if _Anomaly.enabled:
            self.trace = _forward_trace()

    def check_saved(self):
        for i, (t, saved) in enumerate(zip(self.saved, self.saved_versions)):
            if saved is not None and isinstance(t, Tensor) and t._not_a_view is not None:
                t._buf  # a copy standing for a view takes its source's writes, counting them as its own
            if saved is not None and saved[0].version != saved[1]:
                raise RuntimeError(
                    f"one of the tensors needed for gradient computation has been modified by an in-place operation: "
                    f"tensor {i} saved by {self.name()} (shape {tuple(t.shape)}, {t.dtype}) is at version "
                    f"{saved[0].version}; expected version {saved[1]} instead. Make the in-place change after "
                    "backward(), or on a copy (.clone())")

    @property
    def next_functions(self):
        return tuple(_public_edge(e) for e in self.edges)

    @property
    def metadata(self):
        """A dict kept with the node for the caller's own use, as PyTorch's."""
        meta = self.__dict__.get("_metadata")
        if meta is None:
            meta = self._metadata = {}
        return meta

    def input_wanted(self, i):
        """Whether the running backward pass takes a gradient for input i: not
        where the input needs none, nor where autograd.grad asks for others only
        (so that a node without some gradient raises only when that one is asked for)."""
        e = self.edges[i]
        return e is not None and id(e) in _mode.pass_edges

    def name(self):
        return type(self).__name__.lstrip("_")

    def __repr__(self):
        return f"<{self.name()}>"

    def register_prehook(self, fn):
        """``fn(grad_outputs)`` runs before this node's backward, with the
        tuple of the gradients of its outputs; a tuple it returns replaces them."""
        return self._hooks().add("pre", fn)

    def register_hook(self, fn):
        """``fn(grad_inputs, grad_outputs)`` runs after this node's backward
        with the gradients it computed for its inputs (None where an input
        takes none) and those of its outputs; a tuple it returns replaces grad_inputs."""
        return self._hooks().add("post", fn)

    def _hooks(self):
        if self.node_hooks is None:
            self.node_hooks = _NodeHooks()
        return self.node_hooks

    def grad_outputs(self, g):
        """The engine's gradient for this node as PyTorch's tuple of output gradients."""
        return (g,)

    def from_grad_outputs(self, grads):
        """grad_outputs' inverse."""
        if grads[0] is None:
            raise RuntimeError(f"a pre-hook of {self.name()} returned None for the gradient of its output; ddpc "
                               "needs a tensor there")
        return grads[0]


def _public_edge(e):
    """An edge as PyTorch's next_functions shows it: (node, output index)."""
    if e is None:
        return None, 0
    if isinstance(e, Tensor):
        return AccumulateGrad.of(e), 0
    output_of = getattr(e, "output_of", None)  # one output of a node with several
    return output_of() if output_of is not None else (e, 0)


class AccumulateGrad(Node):
    """The node that stands for a leaf tensor requiring grad in
    ``next_functions``, as PyTorch's (one per leaf, kept while the leaf
    lives): ``variable`` is the leaf. Its hooks are the leaf's: one
    registered with ``register_hook`` runs once the gradient is in the leaf's
    ``.grad`` (Horovod's and Apex's way of launching a reduction per
    parameter), one with ``register_prehook`` before, with the gradient
    arriving (it may return a replacement)."""

    def __init__(self, variable):  # (no inputs, nothing recorded)
        self.edges, self.variable = (), variable

    @staticmethod
    def of(leaf):
        node = leaf.__dict__.get("_accumulate_grad")
        if node is None:
            node = leaf._accumulate_grad = AccumulateGrad(leaf)
        return node

    def name(self):
        return "torch::autograd::AccumulateGrad"

    def __repr__(self):
        return "<AccumulateGrad>"

    def register_hook(self, fn):
        """``fn(grad_inputs, grad_outputs)`` once the gradient is accumulated: ((), (the leaf's .grad,))."""
        return self.variable.register_post_accumulate_grad_hook(lambda leaf: fn((), (leaf.grad,)))

    def register_prehook(self, fn):
        """``fn((grad,))`` with each gradient arriving for the leaf; a tuple it returns replaces it."""
        def hook(g):
            res = fn((g,))
            return None if res is None else _hook_result(fn, res, (g,), self, "grad_outputs")[0]

        return self.variable.register_hook(hook)

    def backward(self, g):
        raise RuntimeError("AccumulateGrad stands for a leaf in next_functions; backward runs through the leaf")


class _NodeHooks:
    """A node's register_prehook and register_hook functions, in registration order."""

    __slots__ = ("pre", "post")

    def __init__(self):
        self.pre, self.post = {}, {}

    def add(self, kind, fn):
        hooks = getattr(self, kind)
        handle = RemovableHandle(hooks)
        hooks[handle.id] = fn
        return handle

    def run_pre(self, node, g):
        for fn in list(self.pre.values()):
            outs = node.grad_outputs(g)
            res = fn(outs)
            if res is not None:
                g = node.from_grad_outputs(_hook_result(fn, res, outs, node, "grad_outputs"))
        return g

    def run_post(self, node, g, in_grads):
        if not self.post:
            return in_grads
        in_grads = tuple(_dense(ig, False)[0] if type(ig) is _Scattered else ig for ig in in_grads)
        outs = node.grad_outputs(g)
        for fn in list(self.post.values()):
            res = fn(in_grads, outs)
            if res is not None:
                in_grads = _hook_result(fn, res, in_grads, node, "grad_inputs")
        return in_grads


def _hook_result(fn, res, like, node, what):
    """A node hook's replacement for ``like``, checked as PyTorch checks it."""
    name = getattr(fn, "__name__", repr(fn))
    if not isinstance(res, (tuple, list)):
        raise TypeError(f"expected tuple, but hook '{name}' of {node.name()} returned '{type(res).__name__}'")
    if len(res) != len(like):
        raise RuntimeError(f"hook '{name}' of {node.name()} has returned an incorrect number of values (got "
                           f"{len(res)}, but expected {len(like)})")
    for i, (new, old) in enumerate(zip(res, like)):
        if new is None:
            continue
        if not isinstance(new, Tensor):
            raise TypeError(f"hook '{name}' of {node.name()} returned a {type(new).__name__} in {what}[{i}]; "
                            "expected a tensor or None")
        if old is not None and tuple(new.shape) != tuple(old.shape):
            raise RuntimeError(f"hook '{name}' of {node.name()} has changed the size of {what}[{i}]: got "
                               f"{tuple(new.shape)}, expected {tuple(old.shape)}")
    return tuple(res)


def _packed(saved):
    """(saved, saved_versions) of a node recorded while saved-tensor hooks may
    be on: the tensors packed by this thread's innermost hooks (which then
    check versions at unpacking), except in a checkpointed segment, whose
    saved tensors checkpoint itself drops and recomputes."""
    pair = _saved.hooks()
    if pair is None or _mode.recording is not None:
        return saved, tuple((t._buf, t._buf.version) if isinstance(t, Tensor) else None for t in saved)
    return _saved.Packed(saved, pair), ()


class Recompute:
    """Stands in for the saved tensors of the nodes a checkpointed forward
    recorded (see ddpc.utils.checkpoint): the first of those nodes that
    backward runs calls ``restore()``, which recomputes the forward and gives
    every node of the segment its saved tensors back."""

    __slots__ = ("restore",)

    def __init__(self, restore):
        self.restore = restore


class recording:
    """Collects into ``nodes`` every Node created in this thread inside the with-block."""

    def __init__(self, nodes):
        self.nodes = nodes

    def __enter__(self):
        self.prev, _mode.recording = _mode.recording, self.nodes
        return self.nodes

    def __exit__(self, *exc):
        _mode.recording = self.prev
        return False


def _edge(t):
    if isinstance(t, Tensor) and t.requires_grad:
        return t.grad_fn if t.grad_fn is not None else t
    return None


def _needs_grad(*inputs):
    if not _mode.enabled:
        return False
    return any(isinstance(t, Tensor) and t.requires_grad for t in inputs)


def _attach(out, node):
    out.requires_grad = True
    out.grad_fn = node
    return out


def _attach_view(out, a, sel, make_node, writable=True):
    """Makes out, a tensor over a's elements ``sel`` (None: all of them,
    reshaped), a view in the graph, as PyTorch's views are. Where out shares
    a's memory, it remembers a and sel (made with grad mode on; unless not
    ``writable``: then such a write is refused), so that an
    in-place write into out is also one into a (``_propagate``); where it
    has a history, or may get one, a remembers it, so that an in-place write
    into a gives out its new history too (``_rebase_views``)."""
    if not _mode.enabled:
        return out
    if a.requires_grad:
        _attach(out, make_node(a))
    if out._buf.base is not None:
        if writable:
            out._view_of = (a, sel)
        _track_view(a, out, make_node)
    return out


def _track_view(a, out, make_node):
    """Remembers out, a view of a's memory, in a (unless a is a leaf that
    requires grad, which no write in the graph changes)."""
    if a.grad_fn is not None or not a.requires_grad:
        views = a.__dict__.get("_graph_views")
        if views is None:
            views = a._graph_views = _Views()
        views.add(out, make_node)


class _Views:
    """The views of a computed tensor made in the graph: (view, its memory,
    the node maker) with weak references, dropping the dead ones whenever the
    list has doubled since the last look (so that a loop taking many views of
    one tensor stays linear)."""

    __slots__ = ("items", "limit")

    def __init__(self):
        self.items, self.limit = [], 16

    def add(self, view, make_node):
        self.items.append((weakref.ref(view), weakref.ref(view._buf), make_node))
        if len(self.items) > self.limit:
            self.items = [v for v in self.items if v[0]() is not None]
            self.limit = builtins.max(16, 2 * len(self.items))

    def replace(self, view, by):
        """Follows ``by`` (on the same memory) where ``view`` was followed."""
        self.items = [(weakref.ref(by), weakref.ref(by._buf), make) if v() is view else (v, buf, make)
                      for v, buf, make in self.items]

    def __iter__(self):
        return iter(self.items)


def _rebase_views(t):
    """After an in-place write gave t new history: each view of t made in the
    graph, whose elements the write may have changed, now reads them from t's
    new history (and so on for the views of those views), as in PyTorch."""
    for view, buf, make_node in t.__dict__.get("_graph_views", ()):
        v = view()
        if v is None or v._buf is not buf():  # gone, or no longer a view of t (.data, set_)
            continue
        v.grad_fn, v.requires_grad = make_node(t), True
        _follow_retain(v)
        _rebase_views(v)


# ---- the engine ----------------------------------------------------------------------

def _grad_out(edge, shape, ref):
    """Where a backward op puts the gradient it sends along `edge`: a new tensor;
    or, when `edge` is a leaf that this gradient alone reaches and that has no
    gradient yet, the memory its owner asked its gradients to land in
    (``leaf._grad_into``: DistributedDataParallel's bucket slots), which spares
    copying the gradient there afterwards. The leaf's ``.grad`` then is that memory."""
    into = edge.__dict__.get("_grad_into") if isinstance(edge, Tensor) else None
    if (into is not None and edge.grad is None and id(edge) in _mode.sole_leaves
            and not edge.__dict__.get("_grad_hooks") and into.shape == tuple(shape) and into.dtype is ref.dtype
            and into._buf.device == ref._buf.device):
        return into
    return _empty(shape, ref)


def _exchanged_grad(edge, g, x):
    """A linear layer's weight gradient g.T @ x when its weight is a leaf that
    DistributedDataParallel averages by exchanging (g, x) between the ranks
    of a host (``leaf._grad_exchange``, see nn/_grad_exchange.py), under the
    conditions of _grad_out: the tensor the average will land in; else None."""
    take = edge.__dict__.get("_grad_exchange") if isinstance(edge, Tensor) else None
    if take is None or edge.grad is not None or id(edge) not in _mode.sole_leaves or edge.__dict__.get("_grad_hooks"):
        return None
    return take(edge, g, x)


def _hooked(fn, grad):
    """``fn(grad)``: None keeps ``grad``; a replacement must look like it."""
    res = fn(grad)
    if res is None:
        return None
    if not isinstance(res, Tensor) or res.shape != grad.shape or res.dtype is not grad.dtype \
            or res._buf.device != grad._buf.device:
        got = (f"{tuple(res.shape)}, {res.dtype}, {res.device}" if isinstance(res, Tensor) else type(res).__name__)
        raise RuntimeError(f"a gradient hook must return None or a tensor like its argument "
                           f"({tuple(grad.shape)}, {grad.dtype}, {grad.device}); got {got}")
    return res


class _Scattered:
    """A gradient that is zero but for ``g`` at the elements ``sel`` selects of a
    tensor of ``shape`` (what an index or slice passes back). The engine keeps
    it in this form and adds it into the sum of its input's other gradients,
    so that T slices of one tensor (an RNN's time steps) cost T slices, not T
    tensors of the whole shape."""

    __slots__ = ("shape", "sel", "g")

    def __init__(self, shape, sel, g):
        self.shape, self.sel, self.g = shape, sel, g

    def add_into(self, dense):
        self.sel.add_into(dense._buf, self.g._buf)
        return dense

    def dense(self):
        out = _zeros(self.shape, self.g)
        return self.add_into(out)


def _dense(grad, owned):
    """(grad, owned) with a _Scattered gradient made a tensor (which the engine then owns)."""
    return (grad.dense(), True) if type(grad) is _Scattered else (grad, owned)


def _sum_grads(acc, acc_owned, ig, ig_owned):
    """The sum of two gradients of one input; a _Scattered one is added into the
    other in place where the engine owns it."""
    if type(ig) is _Scattered:
        acc, ig = ig, acc
        acc_owned, ig_owned = ig_owned, acc_owned
    if type(acc) is not _Scattered:
        return acc + ig
    if type(ig) is _Scattered or not ig_owned:
        ig = _dense(ig, False)[0] if type(ig) is _Scattered else ig.clone()
    return acc.add_into(ig)


def _accumulate_leaf(leaf, grad, owned):
    grad, owned = _dense(grad, owned)
    hooks = leaf.__dict__.get("_grad_hooks")
    if hooks:
        for fn in list(hooks.values()):
            res = _hooked(fn, grad)
            if res is not None:
                grad, owned = res, False
    if leaf.grad is None:  # (a gradient a hook was handed may be kept by it: the next accumulation must not change it)
        leaf.grad = grad if owned and not hooks else grad.clone()
    elif _mode.enabled or leaf.grad.is_sparse:  # create_graph: the sum stays in the graph; sparse ones concatenate
        leaf.grad = grad + leaf.grad if leaf.grad.is_sparse and not grad.is_sparse else leaf.grad + grad
    else:
        leaf.grad.add_(grad)
    post = leaf.__dict__.get("_post_accumulate_hooks")
    if post:
        for fn in sorted(post.values(), key=_runs_last):
            fn(leaf)


def _run_last(hook):
    """Marks a post-accumulate-grad hook that runs after the leaf's others,
    whenever it was registered: a data-parallel reducer's, which starts the
    gradient's all-reduce, so that the others see this rank's own gradient
    (PyTorch's reducer hooks the AccumulateGrad node, whose hooks run after
    the tensor's)."""
    hook.runs_last = True
    return hook


def _runs_last(hook):
    return getattr(hook, "runs_last", False)  # (a bound method reads its function's attribute)


def _run_backward(roots, retain_graph, targets=None, create_graph=False):
    """One backward pass from ``roots``, (tensor, gradient, owned) triples.

    ``targets`` None: every leaf reached accumulates its gradient. Otherwise
    only the tensors it names get one: it maps the edge of each (its grad_fn,
    or the leaf itself) to a function that takes (gradient, owned), and only
    the nodes that lead to one of them run. With ``create_graph`` the nodes
    run with grad mode on, so the gradients are recorded in the graph too."""
    seeds = {}
    for i, (t, g, owned) in enumerate(roots):
        if not t.requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have a grad_fn")
        e = _edge(t)
        k = id(e)
        seeds[k] = (e, (_sum_grads(*seeds[k][1], g, owned), True) if k in seeds else (g, owned))
    outer = _mode.sole_leaves, _mode.pass_edges, _mode.callbacks
    _mode.callbacks = []
    try:
        _run_graph(list(seeds.values()), retain_graph, targets, create_graph)
        callbacks = _mode.callbacks
        _mode.callbacks = None  # a callback's own backward passes or callbacks are not part of this pass
        for fn in callbacks:
            fn()
    finally:
        _mode.sole_leaves, _mode.pass_edges, _mode.callbacks = outer


def _run_graph(seeds, retain_graph, targets, create_graph):
    nodes = [e for e, _ in seeds if isinstance(e, Node)]
    seen = {id(n) for n in nodes}
    stack = list(nodes)
    deps = {}
    while stack:
        for e in stack.pop().edges:
            if e is None:
                continue
            k = id(e)
            deps[k] = deps.get(k, 0) + 1
            if k not in seen and isinstance(e, Node):
                seen.add(k)
                nodes.append(e)
                stack.append(e)
    expands = None  # every node runs
    if targets is not None:
        # Only the nodes a target lies at or below run (inputs are created
        # before the ops that read them, so by seq children come first).
        wanted = set(targets)
        for node in sorted(nodes, key=lambda n: n.seq):
            if any(id(e) in wanted for e in node.edges if e is not None):
                wanted.add(id(node))
        expands = {id(n) for n in nodes if any(id(e) in wanted for e in n.edges if e is not None)}
        deps = {}
        for node in nodes:
            if id(node) in expands:
                for e in node.edges:
                    if e is not None and id(e) in wanted:
                        deps[id(e)] = deps.get(id(e), 0) + 1
    # Only where the pass accumulates, and keeps no graph of the gradients, may
    # a leaf's gradient land in its owner's memory (_grad_out).
    _mode.sole_leaves = frozenset(k for k, n in deps.items() if n == 1) \
        if targets is None and not create_graph else frozenset()
    _mode.pass_edges = frozenset(deps)
    grads, ready = {}, []
    for e, g in seeds:
        grads[id(e)] = g
    with set_grad_enabled(create_graph):
        for e, _ in seeds:
            if deps.get(id(e), 0) == 0:
                _deliver(e, grads, ready, targets)
        _run_nodes(ready, grads, deps, retain_graph, targets, expands)


def _deliver(e, grads, ready, targets):
    """Edge e has all of its gradient: queue its node, or hand a leaf its gradient."""
    if isinstance(e, Node):
        heapq.heappush(ready, (-e.seq, e))
    elif targets is None:
        _accumulate_leaf(e, *grads.pop(id(e)))
    else:
        targets[id(e)](*grads.pop(id(e)))


def queue_callback(fn):
    """Runs ``fn()`` once the backward pass now running has delivered every
    gradient (from a hook during backward; like PyTorch's
    ``Variable._execution_engine.queue_callback``)."""
    if _mode.callbacks is None:
        raise RuntimeError("queue_callback() is for hooks that run during a backward pass")
    _mode.callbacks.append(fn)


def _run_nodes(ready, grads, deps, retain_graph, targets, expands):
    while ready:
        _, node = heapq.heappop(ready)
        g, owned = _dense(*grads.pop(id(node)))
        expand = expands is None or id(node) in expands
        if node.pre_hooks:
            for fn in list(node.pre_hooks.values()):
                res = _hooked(fn, g)
                if res is not None:
                    g, owned = res, False
        if node.retain is not None:  # after every tensor hook, as PyTorch's retains_grad hook
            node.retain(g)
        if node.node_hooks is not None and node.node_hooks.pre:
            g, owned = node.node_hooks.run_pre(node, g), False
        if targets is not None and id(node) in targets:
            targets[id(node)](g, owned)
        if not expand:
            continue
        # The saved tensors are reached only now, after the hooks, as in PyTorch: a hook may
        # bring back what a checkpointed segment recomputes from (FSDP regathers its parameters).
        if type(node.saved) is Recompute:
            node.saved.restore()
        if node.saved is None:
            raise RuntimeError(
                f"trying to backward through {node.name()} a second time: its saved tensors were freed after "
                "the first backward; pass retain_graph=True to the first backward() to keep them")
        packed = node.saved if type(node.saved) is _saved.Packed else None
        if packed is not None:
            node.saved = packed.unpack(node)
        node.check_saved()
        once = _mode.enabled and not node.double_backward
        if once:
            _mode.enabled = False
        rec = profiler._is_profiler_enabled and profiler._open(node.name(), (g,))
        in_grads = _anomaly_checked_backward(node, g) if _Anomaly.enabled else node.backward(g)
        if rec:
            profiler._close(rec)
        if once:
            _mode.enabled = True
            in_grads = _differentiated_once(node, g, in_grads)
        if node.node_hooks is not None:
            in_grads = node.node_hooks.run_post(node, g, in_grads)
        if not retain_graph:
            if packed is not None or node.saved != ():  # a node that saved nothing runs again, as PyTorch's
                node.saved = None
        elif packed is not None:
            node.saved = packed  # the next pass unpacks again
        owned = not node.passes_through
        for e, ig in zip(node.edges, in_grads):
            k = id(e)
            if e is None or k not in deps:
                continue
            if ig is not None:
                if k in grads:
                    grads[k] = (_sum_grads(*grads[k], ig, owned), True)
                else:
                    grads[k] = (ig, owned)
            _arrived(e, deps, grads, ready, targets)


class _NoDoubleBackward(Node):
    """The grad_fn of a gradient that a create_graph pass computed through a
    node without double backward: it stands where the gradient's graph would
    be and raises once a later backward reaches it."""

    def __init__(self, node, g):
        super().__init__(())
        grads_in = g.grads.values() if hasattr(g, "grads") else (g,)  # a custom Function's several outputs
        self.edges = node.edges + tuple(_edge(x) for x in grads_in)
        self.of = node.name()

    def backward(self, g):
        raise NotImplementedError(
            f"ddpc has no double backward for {self.of}: a gradient computed through it with create_graph=True "
            "can be used, but not differentiated again")

    def name(self):
        return f"NoDoubleBackward({self.of})"


def _differentiated_once(node, g, in_grads):
    """in_grads, computed with grad mode off by a node without double
    backward in a create_graph pass, each given a _NoDoubleBackward."""
    return tuple(None if ig is None else _attach(_dense(ig, False)[0].detach(), _NoDoubleBackward(node, g))
                 for ig in in_grads)


def _arrived(e, deps, grads, ready, targets):
    """Counts one edge into e as delivered; once all have come, e runs, or
    with no gradient at all, nothing flows past it either."""
    k = id(e)
    deps[k] -= 1
    if deps[k]:
        return
    if k not in grads:
        _drain(e, deps, grads, ready, targets)
    else:
        _deliver(e, grads, ready, targets)


def _drain(e, deps, grads, ready, targets):
    """Counts a gradient-less node's edges as delivered, so later nodes still run."""
    if not isinstance(e, Node):
        return
    for sub in e.edges:
        if sub is not None and id(sub) in deps:
            _arrived(sub, deps, grads, ready, targets)


def _roots(tensors, grads, what, create_graph=False):
    """(tensor, gradient, owned) triples for the tensors a pass starts from;
    with ``create_graph`` a given gradient keeps its own graph."""
    tensors = (tensors,) if isinstance(tensors, Tensor) else tuple(tensors)
    if grads is None or isinstance(grads, Tensor):
        grads = (grads,) * len(tensors) if grads is None else (grads,)
    grads = tuple(grads)
    if len(grads) != len(tensors):
        raise RuntimeError(f"{what}: got {len(grads)} gradients for {len(tensors)} tensors")
    roots = []
    for t, g in zip(tensors, grads):
        if not isinstance(t, Tensor):
            raise TypeError(f"{what}: expected tensors, got {type(t).__name__}")
        if g is None:
            if t.numel() != 1:
                raise RuntimeError(f"grad can be implicitly created only for scalar outputs; this output has shape "
                                   f"{t.shape}, pass its gradient")
            roots.append((t, Tensor(_C.Buffer(t.shape, t._buf.dtype, t._buf.device)).fill_(1), True))
            continue
        if not isinstance(g, Tensor):
            g = _like_scalar(g, t)
        if g.shape != t.shape:
            raise RuntimeError(f"gradient has shape {g.shape}, but the output has shape {t.shape}")
        if g.dtype is not t.dtype:  # cast to the output's dtype, as PyTorch's engine casts it
            g = (g if create_graph else g.detach()).to(dtype=t.dtype)
            roots.append((t, g, True))
            continue
        roots.append((t, g if create_graph else g.detach(), False))
    return roots


def _targets(inputs, what):
    inputs = (inputs,) if isinstance(inputs, Tensor) else tuple(inputs)
    if not inputs:
        raise RuntimeError(f"{what}: inputs must not be empty")
    for t in inputs:
        if not isinstance(t, Tensor) or not t.requires_grad:
            raise RuntimeError("one of the differentiated tensors does not require grad")
    return inputs


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """Computes the gradient of ``tensors`` (one or a sequence, weighted by
    ``grad_tensors``: None for a scalar's 1) with respect to the graph's leaves
    and accumulates it into their ``.grad``; with ``inputs``, only into those
    tensors' ``.grad`` (a non-leaf input keeps its gradient there too).

    ``create_graph=True`` records the gradients' own graph, so they can be
    differentiated again (gradient penalties, Hessian-vector products); the
    graph is then retained unless ``retain_graph=False``. Where ddpc differs:
    only the ops whose nodes set ``Node.double_backward`` support it; through
    any other op the gradient is computed, and a later backward that reaches
    that part of its graph raises NotImplementedError naming the op."""
    create_graph = bool(create_graph)
    retain_graph = create_graph if retain_graph is None else bool(retain_graph)
    roots = _roots(tensors, grad_tensors, "backward", create_graph)
    if inputs is None:
        _run_backward(roots, retain_graph, None, create_graph)
        return
    targets = {}
    for t in _targets(inputs, "backward"):
        if t.grad_fn is None:
            targets[id(t)] = functools.partial(_accumulate_leaf, t)
        else:
            targets[id(t.grad_fn)] = functools.partial(_accumulate_non_leaf, t)
    _run_backward(roots, retain_graph, targets, create_graph)


def _accumulate_non_leaf(t, grad, owned):
    if t.grad_fn.retain is not None and t.__dict__.get("_retains_grad"):
        return  # retain_grad has put it in .grad already
    t.grad = (grad if owned else grad.clone()) if t._grad is None else t._grad + grad  # (_grad: not warned of)


def Variable(data, requires_grad=False, volatile=False):
    """PyTorch's old wrapper, now a tensor itself: a leaf sharing ``data``'s
    memory, requiring grad as asked (``volatile`` is taken and ignored, as
    PyTorch has since 0.4)."""
    del volatile
    t = data.detach()
    t.requires_grad = bool(requires_grad)
    return t


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, only_inputs=True,
         allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """The gradients of ``outputs`` (weighted by ``grad_outputs``) with respect
    to each of ``inputs``, returned as a tuple; no tensor's ``.grad`` changes.
    An input the outputs do not depend on raises, unless ``allow_unused``
    (its gradient is then None, or zeros with ``materialize_grads``). Only the
    ops between the outputs and the inputs run backward. ``create_graph`` is
    as for ``backward``. ``only_inputs`` is taken for PyTorch's signature
    (which ignores it too). With ``is_grads_batched`` the first dim of each
    grad_outputs tensor is a batch: one vector-Jacobian product per index,
    stacked (one backward pass each, where PyTorch vmaps)."""
    del only_inputs
    if is_grads_batched:
        from ._autograd_functional import _batched_grad  # (that module imports this one)

        return _batched_grad(outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused,
                             materialize_grads)
    create_graph = bool(create_graph)
    retain_graph = create_graph if retain_graph is None else bool(retain_graph)
    if allow_unused is None:
        allow_unused = materialize_grads
    elif materialize_grads and not allow_unused:
        raise ArgumentError("grad: materialize_grads=True needs allow_unused to be True or None")
    inputs = _targets(inputs, "grad")
    got = {}

    def keep(k, grad, owned):  # once per pass: a target's gradient is complete when it arrives
        got[k] = grad if owned else grad.clone()

    targets = {}
    for t in inputs:
        e = _edge(t)
        if id(e) not in targets:
            if t.grad_fn is None:
                targets[id(e)] = functools.partial(_keep_leaf, t, functools.partial(keep, id(e)))
            else:
                targets[id(e)] = functools.partial(keep, id(e))
    _run_backward(_roots(outputs, grad_outputs, "grad", create_graph), retain_graph, targets, create_graph)
    out = []
    for i, t in enumerate(inputs):
        g = got.get(id(_edge(t)))
        if g is None and not allow_unused:
            raise RuntimeError(f"one of the differentiated tensors (input {i}) appears to not have been used in the "
                               "graph; set allow_unused=True if this is the desired behavior")
        if g is None and materialize_grads:
            g = Tensor(_C.Buffer(t.shape, t._buf.dtype, t._buf.device)).fill_(0)
        out.append(g)
    return tuple(out)


def _keep_leaf(leaf, keep, grad, owned):
    """A leaf's gradient for autograd.grad: its hooks see it, nothing accumulates."""
    grad, owned = _dense(grad, owned)
    for fn in list(leaf.__dict__.get("_grad_hooks", {}).values()):
        res = _hooked(fn, grad)
        if res is not None:
            grad, owned = res, False
    keep(grad, owned)


def _like_scalar(value, ref):
    from .tensor import tensor as _tensor

    return _tensor(value, dtype=ref.dtype, device=ref.device)


# ---- helpers -------------------------------------------------------------------------

def _output(node, value):
    """``value``, an output of ``node`` that it saved detached, as its backward
    uses it: itself; or, in a create_graph pass, a tensor over the same memory
    whose grad_fn is a copy of ``node``, so that gradients written in terms of
    the output differentiate through it."""
    if not _mode.enabled:
        return value
    twin = copy.copy(node)
    twin.seq, twin.pre_hooks, twin.node_hooks, twin.retain = next(_sequence), None, None, None
    return _attach(value.detach(), twin)


def _empty(shape, ref, dtype=None):
    return Tensor(_C.Buffer(tuple(shape), (dtype or ref.dtype).name, ref._buf.device))


def _zeros(shape, ref, dtype=None):
    """Zeros of ``shape`` in ref's dtype (or ``dtype``) on ref's device, outside the graph."""
    out = _empty(shape, ref, dtype)
    _C.fill(out._buf, 0.0)
    return out


def _host_tensor(arr, device, dtype=int64):
    """A numpy array as a tensor on ``device``."""
    from .tensor import tensor as _tensor

    return _tensor(np.ascontiguousarray(arr), dtype=dtype, device=device)


def _is_suffix(small, big):
    """Whether a tensor of shape `small` broadcasts over `big` by repetition."""
    small = tuple(small)
    while small and small[0] == 1:
        small = small[1:]
    return len(small) <= len(big) and tuple(big[len(big) - len(small):]) == small


def _broadcast_shape(x, y):
    """numpy's broadcast of shapes x and y (aligned at their last dims)."""
    n = len(x) if len(x) > len(y) else len(y)  # (max is the tensor op here)
    x, y = (1,) * (n - len(x)) + tuple(x), (1,) * (n - len(y)) + tuple(y)
    if any(p != q and 1 not in (p, q) for p, q in zip(x, y)):
        raise ArgumentError(f"shapes {x} and {y} do not broadcast: each dim must match or be 1")
    return tuple(q if p == 1 else p for p, q in zip(x, y))


def _sum_rows(g, n):
    """g [..., n] summed over everything before its last n elements."""
    out = _empty((n,), g)
    if not n:
        return out
    flat = g.reshape(-1, n)
    _C.sum_dim(out._buf, flat._buf, 0)
    return out


def _reduce_to(g, shape, dtype):
    """Sums g over the dims it was broadcast across, back to `shape` (recorded in a create_graph pass)."""
    shape = tuple(shape)
    if g.shape != shape and _mode.enabled and g.requires_grad:
        lead = g.ndim - len(shape)
        dims = tuple(range(lead)) + tuple(lead + d for d, s in enumerate(shape) if s == 1 and g.shape[lead + d] != 1)
        g = reshape(sum(g, dims) if dims else g, shape)
    elif g.shape != shape:
        if g.dtype in _HALVES:  # the sums of _C run in float32 and float64
            g = g.float()
        n = math.prod(shape)
        if g.numel() == n:  # broadcast over leading dims of size 1 only
            g = g.reshape(shape)
        elif _is_suffix(shape, g.shape):
            g = _sum_rows(g, n).reshape(shape)
        else:  # a dim of 1 inside, e.g. (N, 1) against (N, D): sum the extra leading dims, then along each such dim
            lead = g.ndim - len(shape)
            if lead:
                rest = g.shape[lead:]
                g = _sum_rows(g, math.prod(rest)).reshape(rest)
            for d, s in enumerate(shape):
                if s == 1 and g.shape[d] != 1:
                    out = _empty(g.shape[:d] + g.shape[d + 1:], g)
                    _C.sum_dim(out._buf, g._buf, d)
                    g = out.reshape(g.shape[:d] + (1,) + g.shape[d + 1:])
    return g if g.dtype is dtype else g.to(dtype=dtype)


def _as_float(t):
    """t in a float dtype for the real ops of _C; a complex t is refused, in the caller's name."""
    if t.dtype.is_complex:
        raise DtypeError(f"{sys._getframe(1).f_code.co_name.strip('_')} does not support {t.dtype}")
    return t if t.dtype.is_floating_point else t.to(dtype=get_default_dtype())


# The nn ops of _C take float32 and float64. For 16-bit floats the ops below
# compute in float32 and round the result once to the 16-bit dtype (as the
# elementwise ops do); both casts are in the graph, so gradients take the same
# way back.
_HALVES = (float16, bfloat16)


# ---- arithmetic -------------------------------------------------------------------------

class _ScalarBackward(Node):
    """a op s for a python number s."""

    double_backward = True

    def __init__(self, a, op, s, out):
        # s / a keeps a, not its output, as PyTorch's reciprocal does (an in-place change of the output is
        # allowed). The output is saved detached: out -> grad_fn -> out would be a reference cycle.
        super().__init__((a,), (a,) if op == _RDIV else (a, out.detach()) if op == _RPOWER else ())
        self.op, self.s, self.dtype = op, s, a.dtype
        self.passes_through = op in (_ADD, _SUB)

    # PyTorch's node names (s / a is its reciprocal times s)
    _NAMES = {_ADD: "AddBackward0", _SUB: "SubBackward0", _RSUB: "RsubBackward1", _MUL: "MulBackward0",
              _DIV: "DivBackward0", _RDIV: "MulBackward0", _RPOWER: "PowBackward2"}

    def name(self):
        return self._NAMES.get(self.op, "ScalarBackward")

    def backward(self, g):
        op, s = self.op, self.s
        if op in (_ADD, _SUB):
            r = g
        elif op == _RSUB:
            r = neg(g)
        elif op == _MUL:
            r = _binary(g, s, _MUL)
        elif op == _DIV:
            r = _binary(g, s, _DIV)
        elif op == _RPOWER:  # s ** a: g * out * log(s)
            r = _binary(mul(g, _output(self, self.saved[1])),
                        math.log(s) if s > 0 else math.nan if s < 0 else -math.inf, _MUL)
            if s == 0:  # as PyTorch's: 0 where a >= 0 (out * log(0) would be 0 * -inf there)
                r = where(self.saved[0].detach() >= 0, 0.0, r)
        else:  # s / a: -g * s / a^2
            a, = self.saved
            r = neg(div(_binary(g, s, _MUL), mul(a, a)))
        return (r if r.dtype is self.dtype else r.to(dtype=self.dtype),)


class _BinaryBackward(Node):
    def __init__(self, a, b, op, out):
        # As PyTorch, a product keeps each operand only where the other's gradient reads it, and a quotient
        # its operands, not its output: an in-place change of what no gradient reads is allowed. The output
        # of a power is saved detached: out -> grad_fn -> out would be a reference cycle.
        wants_a, wants_b = a.requires_grad, b.requires_grad
        saved = {_MUL: (a if wants_b else None, b if wants_a else None), _DIV: (a if wants_b else None, b),
                 _MAX: (a, b), _MIN: (a, b), _POWER: (a, b, out.detach())}.get(op, ())
        super().__init__((a, b), saved)
        self.op = op
        self.double_backward = op in (_ADD, _SUB, _MUL, _DIV, _MAX, _MIN, _POWER)
        self.shapes = (a.shape, b.shape)
        self.dtypes = (a.dtype, b.dtype)
        self.passes_through = op in (_ADD, _SUB)

    _NAMES = {_ADD: "AddBackward0", _SUB: "SubBackward0", _MUL: "MulBackward0", _DIV: "DivBackward0",
              _MAX: "MaximumBackward0", _MIN: "MinimumBackward0", _POWER: "PowBackward1"}

    def name(self):  # PyTorch's node names
        return self._NAMES.get(self.op, "BinaryBackward")

    def backward(self, g):
        (sa, sb), (da, db) = self.shapes, self.dtypes
        need_a, need_b = self.edges[0] is not None, self.edges[1] is not None
        ga = gb = None
        if self.op == _ADD:
            ga = _reduce_to(g, sa, da) if need_a else None
            gb = _reduce_to(g, sb, db) if need_b else None
        elif self.op == _SUB:
            ga = _reduce_to(g, sa, da) if need_a else None
            gb = _reduce_to(neg(g), sb, db) if need_b else None
        elif self.op == _MUL:
            a, b = self.saved
            ga = _reduce_to(mul(g, b), sa, da) if need_a else None
            gb = _reduce_to(mul(g, a), sb, db) if need_b else None
        elif self.op in (_MAX, _MIN):
            # PyTorch's rule: the operand that lost gets 0, each gets half on a tie, and both get all of it
            # beside a NaN. Operand x lost where x < y (maximum): its share is 1 - ((x < y) + (x <= y)) / 2.
            a, b = (t.detach() for t in self.saved)  # the shares are constants
            lt, le = (_LT, _LE) if self.op == _MAX else (_GT, _GE)
            ga = _reduce_to(mul(g, rsub(mul(add(_binary(a, b, lt), _binary(a, b, le)), 0.5), 1)), sa, da) \
                if need_a else None
            gb = _reduce_to(mul(g, rsub(mul(add(_binary(b, a, lt), _binary(b, a, le)), 0.5), 1)), sb, db) \
                if need_b else None
        elif self.op == _POWER:
            # PyTorch's masks: no gradient to a where b is 0, nor to b where a is 0 and b >= 0
            # (0 ** b is constant there). As in PyTorch, a's masked gradient is +0 and b's is g times 0.
            a, b, out = self.saved
            out = _output(self, out)
            ga = _reduce_to(where(b == 0, 0.0, mul(g, mul(b, pow(a, sub(b, 1))))), sa, da) if need_a else None
            gb = _reduce_to(mul(g, where(logical_and(a == 0, b >= 0), 0.0, mul(out, log(a)))), sb, db) \
                if need_b else None
        else:  # a / b: g / b and -g * a / b^2
            a, b = self.saved
            ga = _reduce_to(div(g, b), sa, da) if need_a else None
            gb = _reduce_to(neg(div(mul(g, a), mul(b, b))), sb, db) if need_b else None
        return ga, gb


# b op a for the op a op b (binary_rows repeats its second operand).
_SWAPPED = {_ADD: _ADD, _SUB: _RSUB, _MUL: _MUL, _DIV: _RDIV, _MAX: _MAX, _MIN: _MIN, _EQ: _EQ, _NE: _NE, _LT: _GT,
            _LE: _GE, _GT: _LT, _GE: _LE, _POWER: _RPOWER, _RPOWER: _POWER, _BITAND: _BITAND, _BITOR: _BITOR,
            _BITXOR: _BITXOR, _LSHIFT: _RLSHIFT, _RLSHIFT: _LSHIFT, _RSHIFT: _RRSHIFT, _RRSHIFT: _RSHIFT}


_BOOL_SUB = ("Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or "
             "`logical_xor()` operator instead.")
_BOOL_SUB_ONE = ("Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying to invert a "
                 "mask, use the `~` or `logical_not()` operator instead.")
_BOOL_NEG = ("Negation, the `-` operator, on a bool tensor is not supported. If you are trying to invert a mask, use "
             "the `~` or `logical_not()` operator instead.")


def check_bool_sub(a, b):
    """PyTorch refuses a - b where either operand is bool (a Python bool counts as one)."""
    a_bool, b_bool = (v.dtype is bool_ if isinstance(v, Tensor) else isinstance(v, (bool, np.bool_)) for v in (a, b))
    if a_bool or b_bool:
        raise RuntimeError(_BOOL_SUB if a_bool and b_bool else _BOOL_SUB_ONE)


def _binary(a, b, op):
    """a op b for op in add/sub/mul/div, a a Tensor, b a Tensor or a number."""
    if op in (_SUB, _RSUB):
        check_bool_sub(a, b)
    if _complex.is_complex_operand(a) or _complex.is_complex_operand(b):
        return _complex.binary(a, b, op)
    if isinstance(b, Tensor) and b.is_sparse:  # dense + sparse is dense (sparse + x goes through SparseTensor)
        if op not in (_ADD, _SUB):
            raise NotImplementedError("mul or div of a dense tensor by a sparse COO one: convert it with .to_dense() "
                                      "first")
        from ._sparse_coo import add_into_dense

        return add_into_dense(a, b, 1 if op == _ADD else -1)
    if not isinstance(b, Tensor):
        if isinstance(b, numbers.Number):
            out = a._binary(b, op)
            if _needs_grad(a):
                _attach(out, _ScalarBackward(a, op, b, out))
            return out
        from .tensor import tensor as _tensor

        b = _tensor(b, device=a.device)
    if b._buf.device != a._buf.device:
        raise ArgumentError(f"tensors are on different devices ({a.device} and {b.device})")
    if a.shape == b.shape:
        out = a._binary(b, op)
    else:
        dt = result_type(a, b)
        if not dt.is_floating_point and op == _DIV:
            dt = get_default_dtype()
        if dt in _HALVES:
            return _binary(a.to(dtype=float32), b.to(dtype=float32), op).to(dtype=dt)
        x, y = (a if a.dtype is dt else a.to(dtype=dt)), (b if b.dtype is dt else b.to(dtype=dt))
        if _is_suffix(b.shape, a.shape):
            out = _empty(a.shape, x)
            _C.binary_rows(op, out._buf, x._buf, y._buf)
            big, small = a.shape, b.shape
        elif _is_suffix(a.shape, b.shape):
            out = _empty(b.shape, y)
            _C.binary_rows(_SWAPPED[op], out._buf, y._buf, x._buf)
            big, small = b.shape, a.shape
        else:  # numpy's rule in general, e.g. (N, D) - (N, 1)
            big = small = _broadcast_shape(a.shape, b.shape)
            out = _empty(big, x)
            _C.binary_broadcast(op, out._buf, x._buf, y._buf)
        if len(small) > len(big):  # the repeated operand's extra leading dims (all 1) stay in the result
            out = out.reshape((1,) * (len(small) - len(big)) + big)
    if _needs_grad(a, b):
        _attach(out, _BinaryBackward(a, b, op, out))
    return out


def add(a, b):
    return _binary(a, b, _ADD)


def sub(a, b):
    return _binary(a, b, _SUB)


def mul(a, b):
    return _binary(a, b, _MUL)


def div(a, b):
    return _binary(a, b, _DIV)


def rsub(a, s):
    """s - a for a number s."""
    if isinstance(s, Tensor):
        return sub(s, a)
    return _binary(a, s, _RSUB)


def rdiv(a, s):
    """s / a for a number s."""
    if isinstance(s, Tensor):
        return div(s, a)
    return _binary(a, s, _RDIV)


def neg(input):
    if input.dtype is bool_:
        raise RuntimeError(_BOOL_NEG)
    return _binary(input, -1, _MUL)


# ---- unary functions ---------------------------------------------------------------------

class _UnaryBackward(Node):
    _NAMES = ("ReluBackward", "GeluBackward", "TanhBackward", "SigmoidBackward", "ExpBackward", "LogBackward",
              "PowBackward", "LeakyReluBackward", "EluBackward", "SiluBackward", "SoftplusBackward", "MishBackward",
              "HardtanhBackward", "HardswishBackward", "HardsigmoidBackward", "AbsBackward", "SqrtBackward",
              "RsqrtBackward", "PowBackward", "SinBackward", "CosBackward", "Log1PBackward", "Expm1Backward",
              "ErfBackward", "ReciprocalBackward", "SignBackward", "FloorBackward", "CeilBackward", "TruncBackward",
              "RoundBackward", "ClampBackward", "IsnanBackward", "IsinfBackward", "IsfiniteBackward", "Log2Backward",
              "Log10Backward", "Exp2Backward", "SinhBackward", "CoshBackward", "AsinhBackward", "AtanBackward",
              "TanBackward", "AsinBackward", "AcosBackward", "AcoshBackward", "AtanhBackward", "ErfcBackward",
              "LgammaBackward", "ErfinvBackward", "SpecialNdtriBackward", "SpecialErfcxBackward", "DigammaBackward",
              "PolygammaBackward", "I0Backward", "SpecialI0EBackward", "SpecialI1Backward", "SpecialI1EBackward",
              "SpecialBesselJ0Backward", "SpecialBesselJ1Backward", "SpecialBesselY0Backward",
              "SpecialBesselY1Backward", "SpecialModifiedBesselK0Backward", "SpecialModifiedBesselK1Backward")
    # The ops whose derivative needs the output; the others' needs the input.
    _USES_OUTPUT = (_TANH, _SIGMOID, _EXP, _EXP2, _SQRT, _RSQRT, _EXPM1, _RECIPROCAL, _TAN, _ERFINV, _NDTRI)
    double_backward = True

    def __init__(self, x, op, p, q, out):
        # The output is saved detached: out -> grad_fn -> out would be a reference cycle.
        super().__init__((x,), (out.detach() if op in self._USES_OUTPUT else x,))
        self.op, self.p, self.q = op, p, q

    def name(self):
        return self._NAMES[self.op]

    def _raw(self, g, s):
        gx = _empty(s.shape, s)
        _C.unary_backward(self.op, gx._buf, g._buf, s._buf, self.p, self.q)
        return gx

    def backward(self, g):
        (s,) = self.saved
        if not _mode.enabled:
            return (self._raw(g, s),)
        # create_graph: g times the derivative, recorded. The derivative of a
        # piecewise-linear op is piecewise constant: the kernel's, as a constant.
        if self.op in self._USES_OUTPUT:
            s = _output(self, s)
        derivative = _DERIVATIVES.get(self.op)
        if derivative is None:
            ones = _empty(s.shape, s)
            _C.fill(ones._buf, 1.0)
            slope = self._raw(ones, s.detach())
            with no_grad():
                out = mul(g, slope)
            return (_attach(out, _SlopeBackward(g, s, slope)) if _needs_grad(g, s) else out,)
        return (mul(g, derivative(s, self.p, self.q)),)


class _SlopeBackward(Node):
    """g * slope, the gradient of a piecewise-linear op at x (relu, hardtanh,
    ...): slope times the incoming gradient for g, and zeros for x, the
    derivative of a piecewise-constant slope, as PyTorch's double backward
    gives (so that a parameter reached only through x gets a zero gradient,
    not None, and weight decay still applies to it)."""

    double_backward = True

    def __init__(self, g, x, slope):
        super().__init__((g, x), ())
        self.slope, self.x_shape, self.x = slope, tuple(x.shape), x.detach()

    def backward(self, gg):
        return (mul(gg, self.slope) if self.edges[0] is not None else None,
                _zeros(self.x_shape, self.x) if self.edges[1] is not None else None)


class _ZeroBackward(Node):
    """An output that is piecewise constant in its inputs and that PyTorch
    still records (div's rounding modes, the 0-norm): each input's gradient
    is zeros, of its shape and dtype."""

    double_backward = True  # zeros are constants: a create_graph pass has nothing to record

    def __init__(self, inputs, name):
        super().__init__(inputs, ())
        self.like, self._name = tuple((t.shape, t.dtype) for t in inputs), name

    def name(self):
        return self._name

    def backward(self, g):
        return tuple(_zeros(shape, g, dtype) if e is not None else None
                     for (shape, dtype), e in zip(self.like, self.edges))


def _between(x, lo, hi):
    """Where lo <= x <= hi, as a constant mask."""
    x = x.detach()
    return logical_and(x >= lo, x <= hi)


def _gelu_derivative(x, p, q):
    """Phi(x) + x phi(x)."""
    cdf = mul(add(erf(mul(x, math.sqrt(0.5))), 1.0), 0.5)
    return add(cdf, mul(x, mul(exp(mul(square(x), -0.5)), 1 / math.sqrt(2 * math.pi))))


def _silu_derivative(x, p, q):
    s = sigmoid(x)
    return mul(s, add(mul(x, rsub(s, 1.0)), 1.0))


def _mish_derivative(x, p, q):
    t = tanh(softplus(x))
    return add(t, mul(mul(x, sigmoid(x)), rsub(square(t), 1.0)))


# The derivatives of the smooth unary ops, in recorded ops of the saved tensor
# (the output for _UnaryBackward._USES_OUTPUT, else the input); the others'
# are piecewise constant.
_DERIVATIVES = {
    _GELU: _gelu_derivative,
    _TANH: lambda y, p, q: rsub(square(y), 1.0),
    _SIGMOID: lambda y, p, q: mul(y, rsub(y, 1.0)),
    _EXP: lambda y, p, q: y,
    _LOG: lambda x, p, q: reciprocal(x),
    _POW: lambda x, p, q: mul(pow(x, p - 1), p) if p else mul(x.detach(), 0.0),
    _ELU: lambda x, p, q: where(x.detach() > 0, 1.0, mul(exp(x), p)),
    _SILU: _silu_derivative,
    _SOFTPLUS: lambda x, p, q: where(mul(x.detach(), p) > q, 1.0, sigmoid(mul(x, p))),
    _MISH: _mish_derivative,
    _HARDSWISH: lambda x, p, q: where(_between(x, -3.0, 3.0), add(div(x, 3.0), 0.5),
                                      (x.detach() > 3).to(dtype=x.dtype)),
    _SQRT: lambda y, p, q: rdiv(y, 0.5),
    _RSQRT: lambda y, p, q: mul(pow(y, 3.0), -0.5),
    _SQUARE: lambda x, p, q: mul(x, 2.0),
    _SIN: lambda x, p, q: cos(x),
    _COS: lambda x, p, q: neg(sin(x)),
    _LOG1P: lambda x, p, q: reciprocal(add(x, 1.0)),
    _EXPM1: lambda y, p, q: add(y, 1.0),
    _ERF: lambda x, p, q: mul(exp(neg(square(x))), 2 / math.sqrt(math.pi)),
    _RECIPROCAL: lambda y, p, q: neg(square(y)),
    _LOG2: lambda x, p, q: reciprocal(mul(x, math.log(2.0))),
    _LOG10: lambda x, p, q: reciprocal(mul(x, math.log(10.0))),
    _EXP2: lambda y, p, q: mul(y, math.log(2.0)),
    _SINH: lambda x, p, q: cosh(x),
    _COSH: lambda x, p, q: sinh(x),
    _ASINH: lambda x, p, q: rsqrt(add(square(x), 1.0)),
    _ATAN: lambda x, p, q: reciprocal(add(square(x), 1.0)),
    _TAN: lambda y, p, q: add(square(y), 1.0),
    _ASIN: lambda x, p, q: rsqrt(rsub(square(x), 1.0)),
    _ACOS: lambda x, p, q: neg(rsqrt(rsub(square(x), 1.0))),
    _ACOSH: lambda x, p, q: rsqrt(sub(square(x), 1.0)),
    _ATANH: lambda x, p, q: reciprocal(rsub(square(x), 1.0)),
    _ERFC: lambda x, p, q: mul(exp(neg(square(x))), -2 / math.sqrt(math.pi)),
    _LGAMMA: lambda x, p, q: digamma(x),
    _ERFINV: lambda y, p, q: mul(exp(square(y)), math.sqrt(math.pi) / 2),
    _NDTRI: lambda y, p, q: mul(exp(mul(square(y), 0.5)), math.sqrt(2 * math.pi)),
    _ERFCX: lambda x, p, q: sub(mul(mul(x, erfcx(x)), 2.0), 2 / math.sqrt(math.pi)),
    _DIGAMMA: lambda x, p, q: polygamma(1, x),
    _POLYGAMMA: lambda x, p, q: polygamma(int(p) + 1, x),
    _I0: lambda x, p, q: i1(x),
    _I0E: lambda x, p, q: sub(i1e(x), mul(i0e(x), sign(x.detach()))),
    _I1: lambda x, p, q: _bessel_i1_derivative(x, i0, i1, 0.0),
    _I1E: lambda x, p, q: _bessel_i1_derivative(x, i0e, i1e, 1.0),
    _BESSEL_J0: lambda x, p, q: neg(bessel_j1(x)),
    _BESSEL_J1: lambda x, p, q: _bessel_order_one_derivative(x, bessel_j0, bessel_j1, 1.0, 0.5),
    _BESSEL_Y0: lambda x, p, q: neg(bessel_y1(x)),
    _BESSEL_Y1: lambda x, p, q: _bessel_order_one_derivative(x, bessel_y0, bessel_y1, 1.0, None),
    _BESSEL_K0: lambda x, p, q: neg(modified_bessel_k1(x)),
    _BESSEL_K1: lambda x, p, q: _bessel_order_one_derivative(x, modified_bessel_k0, modified_bessel_k1, -1.0, None),
}


def _bessel_order_one_derivative(x, order_zero, order_one, sign, at_zero):
    """sign * order_zero(x) - order_one(x) / x: J1's and Y1's derivatives
    (sign 1), K1's (sign -1). J1's is 1/2 at 0 (``at_zero``), where the quotient
    is 0 / 0: there x is replaced by 1 in the quotient, so that no NaN reaches
    its gradient."""
    if at_zero is None:
        return sub(mul(order_zero(x), sign), div(order_one(x), x))
    zero = x.detach() == 0
    safe = where(zero, 1.0, x)
    return where(zero, at_zero, sub(mul(order_zero(x), sign), div(order_one(safe), safe)))


def _bessel_i1_derivative(x, i0_of, i1_of, scaled):
    """i0(x) - i1(x) / x (i1's derivative; scaled = 1 for i1e's,
    i0e(x) - i1e(x) (sign(x) + 1 / x)), and 1/2 at 0, where the quotient is 0 / 0:
    there x is replaced by 1 in the quotient, so that no NaN reaches its gradient."""
    zero = x.detach() == 0
    safe = where(zero, 1.0, x)
    ratio = mul(i1_of(safe), add(reciprocal(safe), sign(x.detach()) * scaled))
    return where(zero, 0.5, sub(i0_of(x), ratio))


def _unary(x, op, p=0.0, q=0.0):
    if not isinstance(x, Tensor):
        raise TypeError(f"expected a ddpc.Tensor, got {type(x).__name__}")
    if x.dtype.is_complex:
        return _complex.real_unary(x, op)
    if x.dtype in _HALVES:
        return _unary(x.float(), op, p, q).to(dtype=x.dtype)
    x = _as_float(x)
    out = _empty(x.shape, x)
    p, q = float(p), float(q)
    _C.unary(op, out._buf, x._buf, p, q)
    if _needs_grad(x):
        _attach(out, _UnaryBackward(x, op, p, q, out))
    return out


def relu(x):
    """max(x, 0); integer tensors keep their dtype, as in PyTorch, which refuses bool ones."""
    if isinstance(x, Tensor) and x.dtype is bool_:
        raise DtypeError("Boolean inputs not supported for relu")
    if isinstance(x, Tensor) and not x.dtype.is_floating_point:
        return maximum(x, 0)
    return _unary(x, _RELU)


def gelu(input, approximate="none"):
    """x * Phi(x) (Phi the normal distribution function); ``approximate='tanh'``
    is 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x**3))), composed of the elementwise ops."""
    if approximate == "tanh":
        if input.dtype in _HALVES:
            return gelu(input.float(), approximate).to(dtype=input.dtype)
        inner = mul(add(input, mul(pow(input, 3), 0.044715)), math.sqrt(2 / math.pi))
        return mul(mul(input, 0.5), add(tanh(inner), 1.0))
    if approximate != "none":
        raise ArgumentError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _unary(input, _GELU)


def tanh(input):
    return _unary(input, _TANH)


def sigmoid(input):
    return _unary(input, _SIGMOID)


@autocast_op("float32_cuda")
def exp(input):
    return _unary(input, _EXP)


@autocast_op("float32_cuda")
def log(input):
    return _unary(input, _LOG)


@autocast_op("float32_cuda")
def pow(input, exponent):
    """x ** exponent, the exponent a number or a tensor (broadcast), or a
    number to the powers of a tensor (``pow(2, t)``, as ``2 ** t``). Integer
    tensors stay integers with integer exponents. As PyTorch, a negative
    number exponent of an integer tensor is refused, while negative exponents
    in a tensor give 1 for a base of 1, +-1 for -1 and 0 for any other base."""
    if isinstance(input, numbers.Number) and isinstance(exponent, Tensor):
        return exponent.__rpow__(input)
    if input.dtype.is_complex:
        return _complex.pow(input, exponent)
    if isinstance(exponent, Tensor) or not input.dtype.is_floating_point:
        if isinstance(exponent, Tensor) and input.dtype is bool_ and exponent.dtype is bool_:
            raise NotImplementedError("pow: not implemented for bool tensors")
        if (isinstance(exponent, numbers.Integral) and exponent < 0 and not input.dtype.is_floating_point):
            raise RuntimeError("Integers to negative integer powers are not allowed.")
        return _binary(input, _operand(exponent, input, "pow"), _POWER)
    if not isinstance(exponent, numbers.Number):
        raise TypeError(f"pow: the exponent must be a number or a ddpc.Tensor, got {type(exponent).__name__}")
    return _unary(input, _POW, float(exponent))


def rpow(x, base):
    """base ** x for a number ``base`` (Python's ``base ** tensor``)."""
    if not isinstance(base, numbers.Number):
        raise TypeError(f"pow: the base must be a number or a ddpc.Tensor, got {type(base).__name__}")
    return _binary(x, base, _RPOWER)


def leaky_relu(x, negative_slope=0.01):
    """x where x > 0, else negative_slope * x."""
    return _unary(x, _LEAKY_RELU, negative_slope)


def elu(x, alpha=1.0):
    """x where x > 0, else alpha * (exp(x) - 1)."""
    return _unary(x, _ELU, alpha)


def silu(x):
    """x * sigmoid(x)."""
    return _unary(x, _SILU)


def softplus(input, beta=1.0, threshold=20.0):
    """log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold."""
    return _unary(input, _SOFTPLUS, beta, threshold)


def mish(x):
    """x * tanh(softplus(x))."""
    return _unary(x, _MISH)


def hardtanh(x, min_val=-1.0, max_val=1.0):
    """x clamped to [min_val, max_val]; an integer tensor stays integer, its
    bounds truncated to ints, as PyTorch."""
    if min_val > max_val:
        raise ArgumentError(f"hardtanh: min_val ({min_val}) cannot be greater than max_val ({max_val})")
    if not x.dtype.is_floating_point:
        return clamp(x, int(min_val), int(max_val))
    return _unary(x, _HARDTANH, min_val, max_val)


def relu6(x):
    """min(max(x, 0), 6): hardtanh over [0, 6], as PyTorch computes it."""
    return hardtanh(x, 0, 6)


def hardswish(x):
    """x * relu6(x + 3) / 6."""
    return _unary(x, _HARDSWISH)


def hardsigmoid(x):
    """relu6(x + 3) / 6."""
    return _unary(x, _HARDSIGMOID)


# ---- elementwise math ----------------------------------------------------------------------
# PyTorch's elementwise functions: unary ones through the unary op table,
# maximum and minimum through the broadcasting binary ops, selections through
# _C.where, and the rest composed of those. Masks are bool tensors, as
# comparisons give (uint8 ones still work as conditions).

# Exact on integers, which keep their dtype (the other unary functions compute in float32).
_INTEGER_UNARY = (_ABS, _SQUARE, _SIGN, _FLOOR, _CEIL, _TRUNC, _ROUND)
# Those that PyTorch has no bool kernel for.
_NOT_FOR_BOOL = {_ABS: "abs", _FLOOR: "floor", _CEIL: "ceil", _TRUNC: "trunc", _ROUND: "round"}


def _math(x, op, p=0.0, q=0.0):
    if op == _SQUARE and isinstance(x, Tensor) and x.dtype.is_complex:
        return mul(x, x)
    if not (isinstance(x, Tensor) and not x.dtype.is_floating_point and not x.dtype.is_complex and
            op in _INTEGER_UNARY):
        return _unary(x, op, p, q)
    if x.dtype is bool_ and op in _NOT_FOR_BOOL:
        raise NotImplementedError(f"{_NOT_FOR_BOOL[op]}: not implemented for bool tensors")
    if op == _SQUARE:  # a mask's square is int64, as PyTorch's pow(mask, 2)
        return mul(x, x.to(dtype=int64) if x.dtype is bool_ else x)
    if op == _SIGN and x.dtype is bool_:  # a mask's sign is the mask, as PyTorch's
        return clone(x)
    if op in (_ABS, _SIGN):
        sgn = sub(x._binary(0, _GT), x._binary(0, _LT))
        return mul(x, sgn) if op == _ABS else sgn
    return clone(x)  # integers are whole already


def abs(input):
    return _math(input, _ABS)


def sqrt(input):
    return _math(input, _SQRT)


@autocast_op("float32_cuda")
def rsqrt(input):
    """1 / sqrt(x)."""
    return _math(input, _RSQRT)


def square(input):
    return _math(input, _SQUARE)


def sin(input):
    return _math(input, _SIN)


def cos(input):
    return _math(input, _COS)


@autocast_op("float32_cuda")
def log1p(input):
    """log(1 + x), accurate for small x."""
    return _math(input, _LOG1P)


@autocast_op("float32_cuda")
def expm1(input):
    """exp(x) - 1, accurate for small x."""
    return _math(input, _EXPM1)


def erf(input):
    return _math(input, _ERF)


@autocast_op("float32_cuda")
def reciprocal(input):
    return _math(input, _RECIPROCAL)


@autocast_op("float32_cuda")
def log2(input):
    return _math(input, _LOG2)


@autocast_op("float32_cuda")
def log10(input):
    return _math(input, _LOG10)


def exp2(input):
    """2 ** x."""
    return _math(input, _EXP2)


@autocast_op("float32_cuda")
def sinh(input):
    return _math(input, _SINH)


@autocast_op("float32_cuda")
def cosh(input):
    return _math(input, _COSH)


def asinh(input):
    return _math(input, _ASINH)


def atan(input):
    return _math(input, _ATAN)


@autocast_op("float32_cuda")
def tan(input):
    return _math(input, _TAN)


@autocast_op("float32_cuda")
def asin(input):
    """arcsin; NaN outside [-1, 1]."""
    return _math(input, _ASIN)


@autocast_op("float32_cuda")
def acos(input):
    """arccos; NaN outside [-1, 1]."""
    return _math(input, _ACOS)


def acosh(input):
    """arccosh; NaN below 1."""
    return _math(input, _ACOSH)


def atanh(input):
    """arctanh; +-inf at +-1, NaN outside [-1, 1]."""
    return _math(input, _ATANH)


arcsin, arccos, arctan, arcsinh, arccosh, arctanh = asin, acos, atan, asinh, acosh, atanh


def erfc(input):
    """1 - erf(x), accurate where erf(x) is close to 1."""
    return _math(input, _ERFC)


@autocast_op("float32_cuda")
def erfinv(input):
    """The inverse of erf on [-1, 1]: +-inf at +-1, NaN outside."""
    return _math(input, _ERFINV)


def lgamma(input):
    """log |Gamma(x)|: inf at 0 and the negative integers."""
    return _math(input, _LGAMMA)


def digamma(input):
    """d/dx log Gamma(x): -inf at 0 (inf at -0), NaN at the negative integers, as
    PyTorch; its gradient is polygamma(1, x), recorded, so derivatives of any
    order exist."""
    return _math(input, _DIGAMMA)


def polygamma(n, input):
    """The n-th derivative of digamma (n = 0: digamma itself), by the Hurwitz
    zeta function; its gradient is polygamma(n + 1, x), recorded. For n >= 1 it
    is infinite at 0 and at the negative integers (PyTorch's trigamma gives a
    huge finite number there instead, from sin(pi x) rounding off 0); at +-inf
    it gives PyTorch's values."""
    if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 0:
        raise ArgumentError(f"polygamma: n must be a non-negative int, got {n!r}")
    return digamma(input) if n == 0 else _math(input, _POLYGAMMA, int(n))


def mvlgamma(input, p):
    """The log of the multivariate gamma function of dimension p:
    p (p - 1) / 4 log(pi) + sum_i<p lgamma(x - i / 2). Every element must
    exceed (p - 1) / 2, as PyTorch checks."""
    if not isinstance(p, numbers.Integral) or p < 1:
        raise ArgumentError(f"mvlgamma: p must be a positive int, got {p!r}")
    x = _as_float(input)
    if x.numel() and not bool(all_(x.detach() > (p - 1) / 2)):
        raise ArgumentError(f"mvlgamma: all elements must be greater than (p-1)/2 = {(p - 1) / 2}")
    terms = stack([lgamma(sub(x, i / 2)) for i in range(p)])
    return add(sum(terms, 0), p * (p - 1) / 4 * math.log(math.pi))


def i0(input):
    """The modified Bessel function of the first kind of order 0; its gradient
    is i1. NaN at +-inf, as PyTorch's."""
    return _math(input, _I0)


def i0e(input):
    """i0(x) * exp(-|x|), finite where i0 overflows."""
    return _math(input, _I0E)


def i1(input):
    """The modified Bessel function of the first kind of order 1 (NaN at +-inf, as PyTorch's)."""
    return _math(input, _I1)


def i1e(input):
    """i1(x) * exp(-|x|)."""
    return _math(input, _I1E)


# The Bessel functions of torch.special beyond i0 and i1 (kernels/bessel.h,
# Cephes' approximations, good to about 1e-15 where PyTorch's lose up to 1e-7
# near x = 5). Those that PyTorch differentiates (J0, J1, Y0, Y1, K0, K1) have
# gradients in recorded ops, so derivatives of any order exist; the others,
# as PyTorch's, give a result that does not require grad.

def bessel_j0(input):
    """The Bessel function of the first kind of order 0; its gradient is
    -bessel_j1 (NaN at +-inf, as PyTorch's and SciPy's)."""
    return _unary(input, _BESSEL_J0)


def bessel_j1(input):
    """The Bessel function of the first kind of order 1; its gradient is
    J0(x) - J1(x) / x (1/2 at 0)."""
    return _unary(input, _BESSEL_J1)


def bessel_y0(input):
    """The Bessel function of the second kind of order 0: -inf at 0, NaN for
    x < 0; its gradient is -bessel_y1."""
    return _unary(input, _BESSEL_Y0)


def bessel_y1(input):
    """The Bessel function of the second kind of order 1: -inf at 0, NaN for
    x < 0; its gradient is Y0(x) - Y1(x) / x."""
    return _unary(input, _BESSEL_Y1)


def modified_bessel_k0(input):
    """The modified Bessel function of the second kind of order 0: inf at 0,
    NaN for x < 0; its gradient is -modified_bessel_k1."""
    return _unary(input, _BESSEL_K0)


def modified_bessel_k1(input):
    """The modified Bessel function of the second kind of order 1: inf at 0,
    NaN for x < 0; its gradient is -K0(x) - K1(x) / x."""
    return _unary(input, _BESSEL_K1)


def _without_gradient(input, op):
    if not isinstance(input, Tensor):
        raise TypeError(f"expected a ddpc.Tensor, got {type(input).__name__}")
    return _unary(input.detach(), op)


def scaled_modified_bessel_k0(input):
    """exp(x) * modified_bessel_k0(x), finite where K0 underflows. Not
    differentiable: as PyTorch's, its result does not require grad."""
    return _without_gradient(input, _BESSEL_K0E)


def scaled_modified_bessel_k1(input):
    """exp(x) * modified_bessel_k1(x). Not differentiable, as PyTorch's."""
    return _without_gradient(input, _BESSEL_K1E)


def spherical_bessel_j0(input):
    """sin(x) / x, 1 at 0 and 0 at +-inf. Not differentiable, as PyTorch's."""
    return _without_gradient(input, _SPHERICAL_BESSEL_J0)


def airy_ai(input):
    """The Airy function Ai (NaN at +-inf, as PyTorch's). Not
    differentiable, as PyTorch's."""
    return _without_gradient(input, _AIRY_AI)


def erfcx(input):
    """exp(x^2) * erfc(x), finite and accurate where erfc underflows."""
    return _math(input, _ERFCX)


def ndtri(input):
    """The standard normal quantile: the x with ndtr(x) = p (-inf at 0, inf at 1,
    NaN outside [0, 1]), accurate in both tails."""
    return _math(input, _NDTRI)


def sign(input):
    """-1, 0 or 1 (0 for NaN, as in PyTorch); its gradient is 0."""
    return _math(input, _SIGN)


def floor(input):
    return _math(input, _FLOOR)


def ceil(input):
    return _math(input, _CEIL)


def trunc(input):
    return _math(input, _TRUNC)


def round(input, decimals=0):
    """Rounds half to even, to ``decimals`` decimal places (negative: to tens, hundreds, ...)."""
    if not isinstance(decimals, numbers.Integral):
        raise TypeError(f"round: decimals must be an int, got {type(decimals).__name__}")
    return _math(input, _ROUND, int(decimals))


def _predicate(x, op):
    if not isinstance(x, Tensor):
        raise TypeError(f"expected a ddpc.Tensor, got {type(x).__name__}")
    if x.dtype.is_complex:  # nan or inf where either part is; finite where both are
        parts = _predicate(_complex.view_as_real(x.detach()), op)
        return parts.amin(-1) if op == _ISFINITE else parts.amax(-1)
    if not x.dtype.is_floating_point:  # integers are finite
        from .tensor import full

        return full(x.shape, op == _ISFINITE, dtype=bool_, device=x.device)
    with no_grad():
        return _unary(x.detach(), op).to(dtype=bool_)


def isnan(input):
    return _predicate(input, _ISNAN)


def isinf(input):
    return _predicate(input, _ISINF)


def isfinite(input):
    return _predicate(input, _ISFINITE)


def _operand(v, ref, what):
    """A tensor operand on ref's device: ``v`` itself, or a number as a 0-d tensor of
    ref's dtype, as PyTorch promotes: the default float dtype for a float beside an
    integer tensor, int64 for an integer beside a bool one."""
    from .tensor import tensor as _tensor

    if isinstance(v, Tensor):
        if v._buf.device != ref._buf.device:
            raise ArgumentError(f"{what}: tensors are on different devices ({ref.device} and {v.device})")
        return v
    if not isinstance(v, numbers.Number):
        raise TypeError(f"{what}: expected a ddpc.Tensor or a number, got {type(v).__name__}")
    if ref.dtype.is_floating_point:
        dt = ref.dtype
    elif _is_float_scalar(v):
        dt = get_default_dtype()
    elif ref.dtype is bool_ and not isinstance(v, (bool, np.bool_)):
        dt = int64  # bool with an int number is int64
    else:
        dt = ref.dtype
    return _tensor(v, dtype=dt, device=ref.device)


def maximum(input, other):
    """The larger of a and b elementwise, broadcast (NaN if either is NaN); on a tie each gets half the gradient."""
    return _binary(input, _operand(other, input, "maximum"), _MAX)


def minimum(input, other):
    """The smaller of a and b elementwise, broadcast (NaN if either is NaN); on a tie each gets half the gradient."""
    return _binary(input, _operand(other, input, "minimum"), _MIN)


def _int_clamp_bound(v, dt):
    """An integer bound clipped to what dtype dt holds (a bound beyond it changes nothing)."""
    lo, hi = (0, 256) if dt is uint8 else _INT_BOUNDS[dt]
    return lo if v < lo else hi - 1 if v >= hi else int(v)


def clamp(input, min=None, max=None):
    """x limited to [min, max] (each a number, a tensor that broadcasts, or None);
    where min > max the result is max. Number bounds pass the gradient strictly
    inside them (not at a bound, nor at NaN); tensor bounds are maximum and
    minimum, so a tie shares the gradient, as in PyTorch."""
    if min is None and max is None:
        raise ArgumentError("clamp: at least one of min and max must be given")
    if input.dtype.is_complex:
        raise DtypeError(f"clamp is not supported for complex types ({input.dtype})")
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        if min is not None:
            input = maximum(input, _operand(min, input, "clamp"))
        if max is not None:
            input = minimum(input, _operand(max, input, "clamp"))
        return input
    bounds = [v for v in (min, max) if v is not None]
    if not isinstance(input, Tensor):
        raise TypeError(f"expected a ddpc.Tensor, got {type(input).__name__}")
    if input.dtype is bool_:
        if all(isinstance(v, (bool, np.bool_)) for v in bounds):
            raise DtypeError("clamp is not implemented for bool tensors with bool bounds")
        input = input.to(dtype=int64)  # bool with number bounds is int64 (or a float), as PyTorch promotes
    if not input.dtype.is_floating_point and not any(_is_float_scalar(v) for v in bounds):
        with no_grad():
            if min is not None:
                input = input._binary(_int_clamp_bound(min, input.dtype), _MAX)
            if max is not None:
                input = input._binary(_int_clamp_bound(max, input.dtype), _MIN)
        return input
    lo = -math.inf if min is None else float(min)
    hi = math.inf if max is None else float(max)
    if math.isnan(lo) or math.isnan(hi):  # every element NaN and a zero gradient, as PyTorch gives
        return add(mul(input, 0.0), math.nan)
    return _unary(input, _CLAMP, lo, hi)


def clamp_min(x, min):
    return clamp(x, min, None)


def clamp_max(x, max):
    return clamp(x, None, max)


clip = clamp
absolute = abs


class _WhereBackward(Node):
    double_backward = True

    def __init__(self, mask, a, b):
        super().__init__((a, b), (mask,))
        self.shapes, self.dtypes = (a.shape, b.shape), (a.dtype, b.dtype)

    def backward(self, g):
        (mask,) = self.saved
        zero = _zeros((), g)
        pick = where if _mode.enabled else _select_where
        grads = []
        for i, (edge, shape, dtype) in enumerate(zip(self.edges, self.shapes, self.dtypes)):
            picked = (g, zero) if i == 0 else (zero, g)
            grads.append(None if edge is None else _reduce_to(pick(mask, *picked), shape, dtype))
        return grads


def _mask(cond):
    """cond as a mask for _C.where: bool, or uint8 of 0 and 1 (any non-zero element is true)."""
    if not isinstance(cond, Tensor):
        raise TypeError(f"the condition must be a ddpc.Tensor, got {type(cond).__name__}")
    return cond.detach() if cond.dtype in (bool_, uint8) else cond._compare(0, _NE)


def _bool_mask(mask, what):
    """Refuses a mask that is not bool, as PyTorch's masked ops do."""
    if not isinstance(mask, Tensor):
        raise TypeError(f"{what}: the mask must be a ddpc.Tensor, got {type(mask).__name__}")
    if mask.dtype is not bool_:
        raise DtypeError(f"{what} only supports boolean masks, but got mask with dtype {mask.dtype}")


def _select_where(mask, a, b):
    """mask ? a : b over the broadcast of the three shapes (a and b of one dtype); outside the graph."""
    out = _empty(_broadcast_shape(_broadcast_shape(mask.shape, a.shape), b.shape), a)
    _C.where(out._buf, mask._buf, a._buf, b._buf)
    return out


def where(condition, input=None, other=None):
    """input where the bool condition holds, else other, elementwise with
    broadcasting; input and other are tensors or numbers. A uint8 condition
    is taken with PyTorch's deprecation warning, other dtypes are refused.
    With the condition alone, nonzero(condition, as_tuple=True)."""
    if input is None and other is None:
        return nonzero(condition, as_tuple=True)
    if isinstance(condition, Tensor) and condition.dtype is not bool_:
        if condition.dtype is not uint8:
            raise DtypeError(f"where expected condition to be a boolean tensor, but got a tensor with dtype "
                             f"{condition.dtype}")
        warnings.warn("where received a uint8 condition tensor. This behavior is deprecated and will be removed "
                      "in a future version of PyTorch. Use a boolean condition instead.", stacklevel=2)
    if not isinstance(input, Tensor) and not isinstance(other, Tensor):
        ref = Tensor(_C.Buffer((), (get_default_dtype() if any(_is_float_scalar(v) for v in (input, other))
                                    else int64).name,
                               condition._buf.device))
        input, other = _operand(input, ref, "where"), _operand(other, ref, "where")
    elif not isinstance(input, Tensor):
        input = _operand(input, other, "where")
    else:
        other = _operand(other, input, "where")
    mask = _mask(condition)
    if mask._buf.device != input._buf.device or input._buf.device != other._buf.device:
        raise ArgumentError(f"where: tensors are on different devices ({condition.device}, {input.device}, "
                            f"{other.device})")
    dt = result_type(input, other)
    if dt.is_complex:
        return _complex.where(mask, input.to(dtype=dt), other.to(dtype=dt))
    a = input.detach() if input.dtype is dt else input.detach().to(dtype=dt)
    b = other.detach() if other.dtype is dt else other.detach().to(dtype=dt)
    out = _select_where(mask, a, b)
    if _needs_grad(input, other):
        _attach(out, _WhereBackward(mask, input, other))
    return out


def masked_fill(x, mask, value):
    """x with ``value`` (a number or a 0-d tensor) where ``mask`` holds; x and
    mask broadcast together, as in PyTorch (the in-place form keeps x's shape).
    The mask must be bool; a number x's dtype can't hold is refused, as by fill_."""
    _bool_mask(mask, "masked_fill_")
    if isinstance(value, Tensor):
        if value.ndim:
            raise ArgumentError(f"masked_fill: value must be a number or a 0-d tensor, got shape {value.shape}")
        value = value if value.dtype is x.dtype else value.to(dtype=x.dtype)
    else:
        from .tensor import full as _full

        value = _full((), value, dtype=x.dtype, device=x.device)
    return where(mask, value, x)


def lerp(input, end, weight):
    """input + weight * (end - input), as PyTorch computes it: from end's side where weight >= 0.5."""
    d = sub(end, input)
    if isinstance(weight, numbers.Number):
        return add(input, mul(d, weight)) if builtins.abs(weight) < 0.5 else sub(end, mul(d, 1 - weight))
    return where(abs(weight.detach()) < 0.5, add(input, mul(weight, d)), sub(end, mul(d, rsub(weight, 1))))


def addcmul(input, tensor1, tensor2, value=1):
    """input + value * tensor1 * tensor2."""
    return add(input, mul(mul(tensor1, tensor2), value))


def addcdiv(input, tensor1, tensor2, value=1):
    """input + value * tensor1 / tensor2."""
    return add(input, mul(div(tensor1, tensor2), value))


class _NanToNumBackward(Node):
    """The gradient passes where the input was finite; the replaced elements are constants."""

    double_backward = True

    def __init__(self, x):
        super().__init__((x,), (x.detach(),))

    def backward(self, g):
        (x,) = self.saved
        return (where(isfinite(x), g, 0.0),)


def nan_to_num(input, nan=0.0, posinf=None, neginf=None):
    """x with NaN, +inf and -inf replaced by nan, posinf and neginf (by default
    the dtype's largest and lowest finite values), in one pass of the _C op;
    the gradient passes where x is finite; a complex x has each part replaced."""
    if input.dtype.is_complex:
        return _complex.view_as_complex(nan_to_num(_complex.view_as_real(input), nan, posinf, neginf).contiguous())
    if not input.dtype.is_floating_point:
        return clone(input)
    big = _FLOAT_MAX[input.dtype]
    out = _empty(input.shape, input)
    _C.nan_to_num(out._buf, input.detach().contiguous()._buf, float(nan), big if posinf is None else float(posinf),
                  -big if neginf is None else float(neginf))
    if _needs_grad(input):
        _attach(out, _NanToNumBackward(input))
    return out


_FLOAT_MAX = {float16: 65504.0, bfloat16: 3.3895313892515355e38, float32: 3.4028234663852886e38,
              float64: 1.7976931348623157e308}


def logical_not(input):
    return _mask(input)._compare(0, _EQ)


def _logical(a, b, op):
    """op over the truth (0 or 1) of a's and b's elements."""
    with no_grad():
        return _binary(a.detach()._compare(0, _NE), _operand(b, a, "logical op").detach()._compare(0, _NE), op)


def logical_and(input, other):
    return _logical(input, other, _MUL)


def logical_or(input, other):
    return _logical(input, other, _MAX)


def logical_xor(input, other):
    return _logical(input, other, _NE)


def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """|a - b| <= atol + rtol * |b| elementwise (a mask), or a == b (infinities);
    NaNs are close to each other only with ``equal_nan``. Two tensors must
    have one dtype, as in PyTorch."""
    if isinstance(input, Tensor) and isinstance(other, Tensor) and input.dtype is not other.dtype:
        raise DtypeError(f"isclose: {input.dtype} did not match {other.dtype}")
    if _complex.is_complex_operand(input) or _complex.is_complex_operand(other):
        return _complex.isclose(input, other, rtol, atol, equal_nan)
    with no_grad():
        other = _operand(other, input, "isclose").detach()
        input = input.detach()
        if not promote(input.dtype, other.dtype).is_floating_point:
            input, other = input.to(dtype=float64), other.to(dtype=float64)
        err = abs(sub(input, other))
        close = logical_or(input == other, logical_and(isfinite(err), err <= add(mul(abs(other), rtol), atol)))
        return logical_or(close, logical_and(isnan(input), isnan(other))) if equal_nan else close


def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """Whether every element of a is close to b's (see isclose)."""
    close = isclose(input, other, rtol, atol, equal_nan)
    return close.numel() == 0 or bool(close.min().item())


def equal(input, other):
    """Whether a and b have the same shape and elements."""
    if input.shape != other.shape:
        return False
    same = input.detach() == other.detach()
    return same.numel() == 0 or bool(same.min().item())


# ---- linear algebra ------------------------------------------------------------------------

def _batch_slices(shape, batch):
    """For each slice of the broadcast batch shape ``batch`` (in order), the
    flat index of the slice of an operand whose batch dims are ``shape``."""
    own = np.arange(math.prod(shape)).reshape(shape)
    return np.broadcast_to(own, batch).ravel().tolist()


def _batched_gemm(out_shape, x, y, trans_x, trans_y, xi, yi):
    """One GEMM per batch slice: out[i] = op(x[xi[i]]) @ op(y[yi[i]]), x and y
    (batch, rows, cols) views of contiguous storage, so no operand is copied."""
    out = _empty(out_shape, x)
    for i, (p, q) in enumerate(zip(xi, yi)):
        _C.gemm(out[i]._buf, x[p]._buf, y[q]._buf, trans_x, trans_y)
    return out


def _as_batches(t):
    """t (..., r, c) as a contiguous (batch, r, c) tensor outside the graph."""
    return t.detach().contiguous().reshape((math.prod(t.shape[:-2]),) + t.shape[-2:])


class _MatmulBackward(Node):
    """ga[i] = g[i] @ b[j]^T and gb[j] = a[i]^T @ g[i] for each batch slice,
    summed over the batch dims an operand was broadcast across."""

    double_backward = True

    def __init__(self, a, b, batch):
        # As PyTorch: each operand is saved only for the other's gradient, so that an in-place change of a
        # constant operand is no error.
        super().__init__((a, b), (a if _edge(b) is not None else None, b if _edge(a) is not None else None))
        self.batch, self.shapes, self.dtypes = batch, (a.shape, b.shape), (a.dtype, b.dtype)

    def backward(self, g):
        a, b = self.saved
        (sa, sb), (da, db) = self.shapes, self.dtypes
        want_a, want_b = self.edges[0] is not None, self.edges[1] is not None
        if _mode.enabled:
            return (_reduce_to(matmul(g, transpose(b, -1, -2)), sa, da) if want_a else None,
                    _reduce_to(matmul(transpose(a, -1, -2), g), sb, db) if want_b else None)
        m, k, n = sa[-2], sa[-1], sb[-1]
        g3 = _as_batches(g)
        ai, bi, gi = _batch_slices(sa[:-2], self.batch), _batch_slices(sb[:-2], self.batch), range(len(g3))
        ga = gb = None
        if want_a:
            ga = _batched_gemm((len(g3), m, k), g3, _as_batches(b), False, True, gi, bi)
            ga = _reduce_to(ga.reshape(self.batch + (m, k)), sa, da)
        if want_b:
            gb = _batched_gemm((len(g3), k, n), _as_batches(a), g3, True, False, ai, gi)
            gb = _reduce_to(gb.reshape(self.batch + (k, n)), sb, db)
        return ga, gb


@profiler._counts_flops(profiler._matmul_flops)
@autocast_op("lower")
def matmul(input, other):
    """a @ b as torch.matmul: a 1-d a is a row, a 1-d b a column (both dropped
    from the result); the dims before the last two broadcast, and each batch
    slice is one GEMM on views of the operands (one GEMM in all where b is 2-d).
    Integer tensors multiply in float64, exact while the sums stay below 2**53
    in magnitude (where PyTorch's would wrap around on overflow)."""
    if not isinstance(input, Tensor) or not isinstance(other, Tensor):
        raise TypeError(f"matmul needs two ddpc tensors, got {type(input).__name__} and {type(other).__name__}")
    if input.ndim == 0 or other.ndim == 0:
        raise ArgumentError(f"matmul: both operands need at least 1 dim, got shapes {input.shape} and {other.shape}")
    if input._buf.device != other._buf.device:
        raise ArgumentError(f"matmul: tensors are on different devices ({input.device} and {other.device})")
    if input.dtype.is_complex or other.dtype.is_complex:
        return _complex.matmul(input, other)
    if input.dtype is not other.dtype:
        raise DtypeError(f"matmul: dtypes differ ({input.dtype} and {other.dtype})")
    if input.shape[-1] != other.shape[-2 if other.ndim > 1 else 0]:
        raise ArgumentError(f"matmul: shapes {input.shape} and {other.shape} cannot be multiplied")
    if input.ndim == 1:
        out = matmul(reshape(input, (1, input.shape[0])), other)
        return reshape(out, out.shape[:-2] + out.shape[-1:] if other.ndim > 1 else ())
    if other.ndim == 1:
        return reshape(matmul(input, reshape(other, (other.shape[0], 1))), input.shape[:-1])
    if input.dtype in _HALVES:
        return matmul(input.float(), other.float()).to(dtype=input.dtype)
    if not input.dtype.is_floating_point:
        return matmul(input.to(dtype=float64), other.to(dtype=float64)).to(dtype=input.dtype)
    m, k, n = input.shape[-2], input.shape[-1], other.shape[-1]
    if input.ndim > 2 and other.ndim == 2:  # the batch folds into a's rows
        return reshape(matmul(reshape(input, (math.prod(input.shape[:-1]), k)), other), input.shape[:-1] + (n,))
    batch = _broadcast_shape(input.shape[:-2], other.shape[:-2])
    out = _batched_gemm((math.prod(batch), m, n), _as_batches(input), _as_batches(other), False, False,
                        _batch_slices(input.shape[:-2], batch), _batch_slices(other.shape[:-2], batch))
    out = reshape(out, batch + (m, n))
    if _needs_grad(input, other):
        _attach(out, _MatmulBackward(input, other, batch))
    return out


class _LinearBackward(Node):
    double_backward = True

    def __init__(self, x, weight, bias, x2):
        # As PyTorch: the weight is saved only for x's gradient, x only for the weight's, so that
        # a change to the other one (a frozen first layer's weight) is no error. x and weight
        # themselves are for a create_graph pass, which needs them in the graph.
        keep_w, keep_x = _edge(x) is not None, _edge(weight) is not None
        super().__init__((x, weight, bias), (x2 if keep_x else None, weight.detach() if keep_w else None,
                                             x if keep_x else None, weight if keep_w else None))
        self.in_shape, self.out_shape = x.shape, (x2.shape[0], weight.shape[0])
        self.bias_shape = None if bias is None else bias.shape

    def backward(self, g):
        x2, w, x, weight = self.saved
        g2 = g.reshape(self.out_shape)  # not -1: out_features may be 0
        gx = gw = gb = None
        if _mode.enabled:
            if self.edges[0] is not None:
                gx = reshape(matmul(g2, weight), self.in_shape)
            if self.edges[1] is not None:
                gw = matmul(transpose(g2), reshape(x, x2.shape))
            if self.edges[2] is not None:
                gb = sum(g2, 0)
            return gx, gw, gb
        if self.edges[0] is not None:
            gx = _empty((self.out_shape[0], w.shape[1]), g2)
            _C.gemm(gx._buf, g2._buf, w._buf)
            gx = gx.reshape(self.in_shape)
        if self.edges[1] is not None:
            gw = _exchanged_grad(self.edges[1], g2, x2)
            if gw is None:
                gw = _grad_out(self.edges[1], (self.out_shape[1], x2.shape[1]), g2)
                _C.gemm(gw._buf, g2._buf, x2._buf, True, False)
        if self.edges[2] is not None:
            gb = _grad_out(self.edges[2], self.bias_shape, g2)
            _C.sum_dim(gb._buf, g2._buf, 0)
        return gx, gw, gb


@profiler._counts_flops(profiler._linear_flops)
@autocast_op("lower")
def linear(input, weight, bias=None):
    """x @ weight.T + bias in one GEMM with the bias fused; x is [..., in]. A 1-d
    weight (in,) without a bias gives x @ weight, as in PyTorch."""
    if weight.ndim == 1 and bias is None:
        out = linear(input, reshape(weight, (1, weight.shape[0])))
        return reshape(out, out.shape[:-1])
    if input.ndim < 1 or input.shape[-1] != weight.shape[1]:
        raise ArgumentError(f"linear: input of shape {input.shape} does not end in in_features={weight.shape[1]}")
    if input.dtype is not weight.dtype:
        raise DtypeError(f"linear: input is {input.dtype} but the weight is {weight.dtype}")
    if input._buf.device != weight._buf.device or (bias is not None and bias._buf.device != weight._buf.device):
        raise ArgumentError(f"linear: input on {input.device}, weight on {weight.device}")
    if input.dtype.is_complex:  # x @ weight.T from real products (no conjugate, as PyTorch's)
        out = _complex.matmul(input, transpose(weight, 0, 1))
        return out if bias is None else add(out, bias)
    if input.dtype in _HALVES:
        return linear(input.float(), weight.float(), None if bias is None else bias.float()).to(dtype=input.dtype)
    x2 = input.detach().reshape(math.prod(input.shape[:-1]), weight.shape[1])  # not -1: in_features may be 0
    out = _empty((x2.shape[0], weight.shape[0]), input)
    _C.gemm(out._buf, x2._buf, weight._buf, False, True, None if bias is None else bias._buf)
    out = out.reshape(input.shape[:-1] + (weight.shape[0],))
    if _needs_grad(input, weight, bias):
        _attach(out, _LinearBackward(input, weight, bias, x2))
    return out


class _TransposeBackward(Node):
    double_backward = True

    def backward(self, g):
        return (transpose(g) if _mode.enabled else _transpose_storage(g),)


def _transpose_storage(a):
    out = _empty((a.shape[1], a.shape[0]), a)
    _C.transpose(out._buf, a._buf)
    return out


# ---- reductions ----------------------------------------------------------------------------

class _SumBackward(Node):
    double_backward = True

    def __init__(self, a, dim, keepdim):
        super().__init__((a,), ())
        self.shape, self.dim, self.keepdim = a.shape, dim, keepdim

    def backward(self, g):
        if _mode.enabled:
            kept = tuple(1 if self.dim is None or d == self.dim else s for d, s in enumerate(self.shape))
            return (expand(reshape(g, kept), self.shape),)
        if self.keepdim:
            g = g.reshape(()) if self.dim is None else g.reshape(self.shape[:self.dim] + self.shape[self.dim + 1:])
        return (_expand(g, self.shape, self.dim),)


def _expand(g, shape, dim):
    """g broadcast back over `dim` of `shape` (over every dim when dim is None)."""
    out = _empty(shape, g)
    if dim is None:
        _C.fill(out._buf, 0.0)
        _C.binary_rows(_ADD, out._buf, out._buf, g.reshape(1)._buf)
        return out
    outer, inner = 1, 1
    for s in shape[:dim]:
        outer *= s
    for s in shape[dim + 1:]:
        inner *= s
    n = shape[dim]
    if outer == 1:
        _C.fill(out._buf, 0.0)
        _C.binary_rows(_ADD, out._buf, out._buf, g.reshape(inner)._buf)
        return out
    # Repeat along a middle or last dim: per outer slice, ones[n,1] @ g[1,inner].
    ones = Tensor(_C.Buffer((n, 1), g.dtype.name, g._buf.device)).fill_(1)
    o3, g2 = out.reshape(outer, n, inner), g.reshape(outer, 1, inner)
    if inner == 1:
        _C.gemm(out.reshape(outer, n)._buf, g.reshape(outer, 1)._buf, ones.reshape(1, n)._buf)
        return out
    for i in range(outer):
        _C.gemm(o3[i]._buf, ones._buf, g2[i]._buf)
    return out


def _one_dim(a, dim):
    """The dim a reduction runs along: one int (or a 1-tuple) within a's dims,
    made non-negative (0 for a 0-d tensor)."""
    if isinstance(dim, (tuple, list)):
        if len(dim) != 1:
            raise ArgumentError("ddpc reduces along one dim at a time")
        dim = dim[0]
    return _dim(a, dim)


@autocast_op("float32_cuda")
def sum(input, dim=None, keepdim=False, *, dtype=None):
    """The sum of all elements or over ``dim``, in ``dtype`` when given (a cast
    first, as PyTorch's, and the int64 sum of integers cast back, wrapping)."""
    if dtype is not None or input.dtype is bool_:  # bool sums count, in int64
        return sum(input.to(dtype=dtype or int64), dim, keepdim).to(dtype=dtype or int64)
    if input.dtype.is_complex:
        return _complex.sum(input, dim, keepdim)
    if isinstance(dim, (tuple, list)) and len(dim) != 1:
        dims = _dims(input, dim or None)  # none for a 0-d tensor, whose sum is still int64 for integers
        return _over_dims(sum, input, dims, keepdim) if dims else sum(input, None, keepdim)
    if input.ndim == 0 and dim is not None:  # a 0-d tensor reduces along dim 0 or -1, as if it had one of size 1
        _one_dim(input, dim)
        return sum(reshape(input, (1,)), 0)
    if input.dtype in _HALVES:  # summed in float32, which the backward pass's broadcast also needs
        return sum(input.float(), dim, keepdim).to(dtype=input.dtype)
    if dim is None:
        dt = input.dtype if input.dtype.is_floating_point else get_dtype("int64")
        out = Tensor(_C.Buffer((), dt.name, input._buf.device))
        _C.sum(out._buf, input._buf)
        if keepdim:
            out = out.reshape((1,) * input.ndim)
    else:
        dim = _one_dim(input, dim)
        # Integers sum exactly in int64, as the sum over every element does.
        src = input if input.dtype.is_floating_point or input.dtype is int64 else input.to(dtype=int64)
        shape = input.shape[:dim] + input.shape[dim + 1:]
        out = _empty(shape, src)
        _C.sum_dim(out._buf, src._buf, dim)
        if keepdim:
            out = out.reshape(input.shape[:dim] + (1,) + input.shape[dim + 1:])
    if _needs_grad(input):
        _attach(out, _SumBackward(input, dim, keepdim))
    return out


class _ExtremeBackward(Node):
    """The gradient of max/min along a dim goes to where each was taken."""

    double_backward = True

    def __init__(self, a, dim, keepdim, indices):
        super().__init__((a,), (indices,))  # saved: indices changed in place before backward raise
        self.shape, self.dim, self.keepdim = a.shape, dim, keepdim

    def backward(self, g):
        (indices,) = self.saved
        ga = _empty(self.shape, g)
        _C.put_dim(ga._buf, g._buf, indices._buf, self.dim)
        if _needs_grad(g):  # create_graph: the adjoint takes the incoming gradient at the same indices
            dim = self.dim
            _attach(ga, AdjointBackward(g, lambda u: reshape(gather(u, dim, indices.unsqueeze(dim)), indices.shape),
                                        "MaxBackwardBackward"))
        return (ga,)


MinMax = collections.namedtuple("MinMax", "values indices")
MinMax.__doc__ = "What max(dim) and min(dim) return, as torch.return_types.max: (values, indices)."


def extreme(a, dim, keepdim, want_max):
    """max or min of ``a``: of all elements (``dim`` None: a 0-d tensor), or
    along ``dim`` with the first index each was taken at (a MinMax)."""
    if a.dtype in _HALVES or a.dtype is bool_:  # bool through its bytes
        res = extreme(a.to(dtype=uint8 if a.dtype is bool_ else float32), dim, keepdim, want_max)
        return res.to(dtype=a.dtype) if dim is None else MinMax(res.values.to(dtype=a.dtype), res.indices)
    if dim is None:
        if a.numel() == 0:
            raise ArgumentError(f"{'max' if want_max else 'min'}() of an empty tensor: give a dim")
        return _tied(a, extreme(a.detach().reshape(-1), 0, False, want_max).values)
    dim = _one_dim(a, dim)
    if a.ndim == 0:
        res = extreme(reshape(a, (1,)), 0, False, want_max)
        return MinMax(reshape(res.values, ()), res.indices.reshape(()))
    if a.shape[dim] == 0:
        raise IndexError(f"{'max' if want_max else 'min'}(): dim {dim} has no elements to choose from")
    shape = a.shape[:dim] + a.shape[dim + 1:]
    values, indices = _empty(shape, a), _empty(shape, a, int64)
    _C.extreme_dim(values._buf, indices._buf, a._buf, dim, want_max)
    if _needs_grad(a):
        _attach(values, _ExtremeBackward(a, dim, keepdim, indices))
    if keepdim:
        kept = a.shape[:dim] + (1,) + a.shape[dim + 1:]
        values, indices = reshape(values, kept), indices.reshape(kept)
    return MinMax(values, indices)


def arg_extreme(a, dim, keepdim, want_max):
    """argmax or argmin: along ``dim``, or (None) the index into the flattened tensor."""
    if dim is None:  # keepdim keeps every dim of the input, each of length 1
        return extreme(a.reshape(-1), 0, keepdim, want_max).indices.reshape((1,) * a.ndim if keepdim else ())
    return extreme(a.detach(), dim, keepdim, want_max).indices


def max(input, dim=None, keepdim=False, *, other=None):
    """The largest element, or with ``dim`` (values, indices) along it (a NaN
    wins, as in PyTorch); with a tensor ``other`` (or in place of dim), maximum(a, it)."""
    if other is not None:
        return maximum(input, other)
    return maximum(input, dim) if isinstance(dim, Tensor) else extreme(input, dim, keepdim, True)


def min(input, dim=None, keepdim=False, *, other=None):
    """The smallest element, or with ``dim`` (values, indices) along it (a NaN
    wins, as in PyTorch); with a tensor ``other`` (or in place of dim), minimum(a, it)."""
    if other is not None:
        return minimum(input, other)
    return minimum(input, dim) if isinstance(dim, Tensor) else extreme(input, dim, keepdim, False)


def argmax(input, dim=None, keepdim=False):
    return arg_extreme(input, dim, keepdim, True)


def argmin(input, dim=None, keepdim=False):
    return arg_extreme(input, dim, keepdim, False)


def mean(input, dim=None, keepdim=False, *, dtype=None):
    """The mean of all elements or over ``dim``, in ``dtype`` when given (a cast first, as PyTorch's)."""
    if dtype is not None:
        return mean(input.to(dtype=dtype), dim, keepdim)
    if input.dtype.is_complex:
        return _complex.mean(input, dim, keepdim)
    if not input.dtype.is_floating_point:
        from .tensor import _TYPE_NAMES

        raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either a floating point or "
                           f"complex dtype. Got: {_TYPE_NAMES[input.dtype][:-len('Tensor')]}")
    if input.dtype in _HALVES:  # a 16-bit sum of many elements would overflow before the division
        return mean(input.float(), dim, keepdim).to(dtype=input.dtype)
    n = math.prod(input.shape[d] for d in _reduction_dims(input, dim))
    return div(sum(input, dim, keepdim), n) if n else add(sum(input, dim, keepdim), float("nan"))


# ---- reductions, scans, splitting, gather / scatter and sorting ----------------------------
# PyTorch's names and semantics over the fold, gather and scatter ops of
# csrc/ops_dim.c; compositions of the ops above where that is exact.

_FOLD_SUM, _FOLD_PROD, _FOLD_LOGSUMEXP = 0, 1, 2
_CUMULATIVE, _REVERSE, _EXCLUSIVE = 1, 2, 4


def _dims(a, dim):
    """``dim`` (None: every dim, an int or a sequence) as sorted, distinct non-negative dims;
    none for a 0-d tensor, whose reductions along dim 0 or -1 leave it as it is."""
    if a.ndim == 0:
        named = () if dim is None else (dim,) if isinstance(dim, numbers.Integral) else tuple(dim)
        for d in named:
            _dim(a, int(d))
        if len(named) > 1:  # its one dim, 0 or -1, named twice
            raise ArgumentError(f"dim {named} names a dim twice")
        return ()
    if dim is None:
        return tuple(range(a.ndim))
    dims = sorted({_dim(a, int(d)) for d in ((dim,) if isinstance(dim, numbers.Integral) else dim)})
    if not isinstance(dim, numbers.Integral) and len(dims) != len(dim):
        raise ArgumentError(f"dim {tuple(dim)} names a dim twice")
    return tuple(dims)


def _reduction_dims(a, dim):
    """The dims a reduction runs over: None, () and [] are every dim, as for
    PyTorch's sum, mean, amax, var and logsumexp (all and any take () as none)."""
    if dim is None or (not isinstance(dim, numbers.Integral) and len(dim) == 0):
        return tuple(range(a.ndim))
    return _dims(a, dim)


def _kept_shape(a, dims):
    return tuple(1 if d in dims else s for d, s in enumerate(a.shape))


def _reduced(out, a, dims, keepdim):
    """out (reduced with keepdim) reshaped to drop ``dims`` unless keepdim."""
    if keepdim:
        return reshape(out, _kept_shape(a, dims))
    return reshape(out, tuple(s for d, s in enumerate(a.shape) if d not in dims))


def _over_dims(fn, a, dims, keepdim):
    """fn(t, d, keepdim=True) applied along each of ``dims`` in turn."""
    out = a
    for d in dims:
        out = fn(out, d, True)
    return _reduced(out, a, dims, keepdim)


def _fold_dtype(a, dtype):
    """The dtype sums and products run in: ``dtype``, else int64 for integers, else a's."""
    if dtype is not None:
        return get_dtype(dtype)
    if a.dtype.is_complex:
        raise DtypeError(f"running sums and products of {a.dtype} are not supported (sum, mean and cumsum are)")
    return a.dtype if a.dtype.is_floating_point else int64


def _folds_in_int64(dt):
    """Whether sums and products in dt run in int64, then wrap back to dt as
    PyTorch's: the integer dtypes narrower than int64."""
    return not (dt.is_floating_point or dt.is_complex or dt in (int64, bool_))


def _fold(a, dim, op, flags):
    """The fold op of _C along one dim (a float32, float64 or int64, outside the graph)."""
    shape = a.shape if flags & _CUMULATIVE else a.shape[:dim] + a.shape[dim + 1:]
    out = _empty(shape, a)
    _C.fold_dim(out._buf, a.detach()._buf, dim, op, flags)
    return out


class _CumsumBackward(Node):
    double_backward = True

    def __init__(self, a, dim):
        super().__init__((a,), ())
        self.dim, self.dtype = dim, a.dtype

    def backward(self, g):
        if _mode.enabled:  # create_graph: running sums from the end, recorded
            return (flip(cumsum(flip(g, (self.dim,)), self.dim), (self.dim,)).to(dtype=self.dtype),)
        return (_fold(g, self.dim, _FOLD_SUM, _CUMULATIVE | _REVERSE).to(dtype=self.dtype),)


def cumsum(input, dim, dtype=None):
    """Running sums along ``dim`` (integers sum in int64 unless ``dtype`` says otherwise)."""
    if input.dtype.is_complex and dtype is None:
        return _complex.cumsum(input, dim)
    dt = _fold_dtype(input, dtype)
    if dt in _HALVES:
        return cumsum(input.to(dtype=float32), dim).to(dtype=dt)
    if _folds_in_int64(dt):
        return cumsum(input.to(dtype=dt), dim).to(dtype=dt)
    x = input if input.dtype is dt else input.to(dtype=dt)
    if x.ndim == 0:
        return clone(x)
    out = _fold(x, _dim(x, dim), _FOLD_SUM, _CUMULATIVE)
    if _needs_grad(x) and dt.is_floating_point:
        _attach(out, _CumsumBackward(x, _dim(x, dim)))
    return out


def _running(a, dim, step):
    """The running fold of ``a`` along ``dim`` in recorded ops, one slice at a
    time (out_k = step(out_k-1, a_k)): what a create_graph pass
    differentiates for the scans and products."""
    parts = []
    for k in range(a.shape[dim]):
        x = index(a, _along(dim, slice(k, k + 1)))
        parts.append(x if not parts else step(parts[-1], x))
    return cat(parts, dim)


def _logaddexp(u, v):
    from ._pointwise import logaddexp  # built on this module

    return logaddexp(u, v)


class _ScanBackward(Node):
    """A product or scan along a dim: in a create_graph pass, its running fold
    in recorded ops (``_running``) differentiated again."""

    double_backward = True
    _STEP, _LAST = None, False

    def __init__(self, a, dim, saved):
        # a itself is for a create_graph pass, which needs it in the graph.
        super().__init__((a,), saved + (a,))
        self.dim = dim

    def backward(self, g):
        a, d = self.saved[-1], self.dim
        if not _mode.enabled:
            return self._backward(g)
        if not a.shape[d]:  # nothing to run along: an empty gradient
            return (_empty(a.shape, a),)
        step = type(self)._STEP

        def forward(x):
            run = _running(x, d, step)
            return index(run, _along(d, -1)) if self._LAST else run

        return recomputed_grads(self, g, forward, (a,))


class _ProdBackward(_ScanBackward):
    """d prod / d a_k is the product of the others: the exclusive running
    products from both ends multiplied, which stays exact where a has zeros."""

    _STEP, _LAST = staticmethod(mul), True

    def __init__(self, a, dim, keepdim):
        super().__init__(a, dim, (a.detach(),))
        self.keepdim = keepdim

    def _backward(self, g):
        a = self.saved[0]
        others = _fold(a, self.dim, _FOLD_PROD, _CUMULATIVE | _EXCLUSIVE)
        others = others._binary(_fold(a, self.dim, _FOLD_PROD, _CUMULATIVE | _EXCLUSIVE | _REVERSE), _MUL)
        g = g.reshape(_kept_shape(a, (self.dim,)))
        with no_grad():
            return (mul(others, g),)


@autocast_op("float32")
def prod(input, dim=None, keepdim=False, dtype=None):
    """The product of all elements, or along one ``dim`` (integers multiply in int64;
    as in PyTorch, ``dim`` is one int, not a tuple). float32 multiplies in
    float32, as PyTorch's prod, so a running product that leaves float32's
    range gives inf or 0 even where the whole product would fit; the order is
    along the dim, where PyTorch's vectorised loop over a long contiguous line
    interleaves lanes, so which partial product overflows there may differ.
    16-bit floats multiply in float32 (PyTorch's round each partial product
    to their own type)."""
    if dim is not None and not isinstance(dim, numbers.Integral):
        raise TypeError(f"prod(): argument 'dim' must be int, not {type(dim).__name__}")
    if input.dtype.is_complex:
        return _complex.prod(input if dtype is None else input.to(dtype=dtype), dim, keepdim)
    dt = _fold_dtype(input, dtype)
    if dt in _HALVES:
        return prod(input.to(dtype=float32), dim, keepdim).to(dtype=dt)
    if _folds_in_int64(dt):
        return prod(input.to(dtype=dt), dim, keepdim).to(dtype=dt)
    x = input if input.dtype is dt else input.to(dtype=dt)
    if dim is None:
        return reshape(prod(reshape(x, (-1,)), 0), (1,) * input.ndim if keepdim else ())
    d = _dim(x, dim)
    if x.ndim == 0:
        return clone(x)
    out = _fold(x, d, _FOLD_PROD, 0)
    if _needs_grad(x) and dt.is_floating_point:
        _attach(out, _ProdBackward(x, d, keepdim))
    return reshape(out, _kept_shape(x, (d,))) if keepdim else out


class _CumprodBackward(_ScanBackward):
    _STEP = staticmethod(mul)

    def __init__(self, a, dim, out):
        super().__init__(a, dim, (a.detach(), out.detach()))

    def _backward(self, g):
        a, out = self.saved[:2]
        d = self.dim
        with no_grad():
            if not int(sum(a == 0).item()):
                # sum over j >= k of g_j * out_j / a_k
                return (_fold(mul(g, out), d, _FOLD_SUM, _CUMULATIVE | _REVERSE)._binary(a, _DIV),)
            # With zeros, position k's gradient is the sum over j >= k of g_j times
            # the running product with a_k left out (set to 1): one pass per k.
            from .tensor import full
            parts = []
            for k in range(a.shape[d]):
                at_k = full(_kept_shape(a, (d,)), k, dtype=int64, device=a.device)
                running = _fold(scatter(a, d, at_k, value=1.0), d, _FOLD_PROD, _CUMULATIVE)
                part = _fold(mul(g, running), d, _FOLD_SUM, _CUMULATIVE | _REVERSE)
                parts.append(permute(part.narrow(d, k, 1), _to_front(a, d)))
            return (permute(cat(parts), _from_front(a, d)).contiguous(),)


def cumprod(input, dim, dtype=None):
    """Running products along ``dim`` (integers multiply in int64). The
    gradient is exact also where the input has zeros (one pass per position
    along ``dim`` then)."""
    dt = _fold_dtype(input, dtype)
    if dt in _HALVES:
        return cumprod(input.to(dtype=float32), dim).to(dtype=dt)
    if _folds_in_int64(dt):
        return cumprod(input.to(dtype=dt), dim).to(dtype=dt)
    x = input if input.dtype is dt else input.to(dtype=dt)
    if x.ndim == 0:
        return clone(x)
    out = _fold(x, _dim(x, dim), _FOLD_PROD, _CUMULATIVE)
    if _needs_grad(x) and dt.is_floating_point:
        _attach(out, _CumprodBackward(x, _dim(x, dim), out))
    return out


class _LogcumsumexpBackward(_ScanBackward):
    """PyTorch's rule: the gradient of x_j is sum over i >= j of g_i exp(x_j - out_i),
    its positive and negative terms each summed in log space (a reverse running
    logsumexp), so that no term over- or underflows."""

    _STEP = staticmethod(_logaddexp)

    def __init__(self, a, dim, out):
        super().__init__(a, dim, (a.detach(), out.detach()))

    def _backward(self, g):
        a, out = self.saved[:2]
        lowest = float(np.finfo(a.dtype.name).min)  # PyTorch's stand-in for log(0): keeps -inf - -inf out
        with no_grad():
            log_abs = log(abs(g))

            def part(keep):
                logs = where(keep, log_abs, lowest)
                return exp(add(_fold(sub(logs, out), self.dim, _FOLD_LOGSUMEXP, _CUMULATIVE | _REVERSE), a))

            return (sub(part(g > 0), part(g < 0)),)


def logcumsumexp(input, dim):
    """log(cumsum(exp(a))) along ``dim``: a running log-add-exp in double, which
    keeps a running maximum, so terms far below a slice's largest value still
    count (as PyTorch's). Floating dtypes only (16-bit ones computed in float32)."""
    if not input.dtype.is_floating_point:
        raise DtypeError(f"logcumsumexp() needs a floating dtype, got {input.dtype}")
    if input.dtype in _HALVES:
        return logcumsumexp(input.to(dtype=float32), dim).to(dtype=input.dtype)
    if input.ndim == 0:
        return clone(input)
    d = _dim(input, dim)
    out = _fold(input, d, _FOLD_LOGSUMEXP, _CUMULATIVE)
    if _needs_grad(input):
        _attach(out, _LogcumsumexpBackward(input, d, out))
    return out


def _correction(unbiased, correction):
    if correction is not None and unbiased is not None:
        raise ArgumentError("give either unbiased or correction, not both")
    if correction is not None:
        return correction
    return 1 if unbiased is None or unbiased else 0


def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """(variance, mean) over ``dim``: the squared deviations summed and divided
    by max(0, N - correction), as torch 2.x (correction 1 by default)."""
    if not input.dtype.is_floating_point:
        raise DtypeError(f"var() needs a floating dtype, got {input.dtype}; cast with .float() first")
    if isinstance(dim, bool):  # var(unbiased) as torch's positional form
        dim, unbiased = None, dim
    dims = _reduction_dims(input, dim)
    n = math.prod(input.shape[d] for d in dims)
    c = _correction(unbiased, correction)
    if _moments_in_one_op(input, dims):
        outer, inner = math.prod(input.shape[:dims[0]]), math.prod(input.shape[dims[-1] + 1:])
        v, m = _empty(_kept_shape(input, dims), input), _empty(_kept_shape(input, dims), input)
        _C.var_dim(v._buf, m._buf, input._buf.view(0, (outer, n, inner)), 1, float(c))
    else:
        m = mean(input, dims, keepdim=True)
        dev = sub(input, m)
        v = div(sum(mul(dev, dev), dims, keepdim=True), float(n - c) if n > c else 0.0)
    return _reduced(v, input, dims, keepdim), _reduced(m, input, dims, keepdim)


def _moments_in_one_op(input, dims):
    """Whether var_dim computes the variance and mean: a host float32 or
    float64 tensor that needs no gradient, over adjacent dims."""
    return (input._buf.device < 0 and input.dtype in (float32, float64) and not _needs_grad(input) and
            bool(dims) and dims[-1] - dims[0] == len(dims) - 1)


def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return var_mean(input, dim, unbiased, keepdim, correction=correction)[0]


class _StdBackward(Node):
    """d sqrt(v) = 1 / (2 sqrt(v)), taken as 0 where v is 0: as in PyTorch, a
    slice of equal values gets no gradient through its std, not NaN."""

    def __init__(self, v, out):
        super().__init__((v,), (out,))

    double_backward = True

    def backward(self, g):
        (out,) = self.saved
        return (where(out == 0, 0.0, div(g, mul(_output(self, out), 2.0))),)


def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    v, m = var_mean(input, dim, unbiased, keepdim, correction=correction)
    out = sqrt(v.detach())
    if _needs_grad(v):
        _attach(out, _StdBackward(v, out.detach()))
    return out, m


def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return std_mean(input, dim, unbiased, keepdim, correction=correction)[0]


class _AmaxBackward(Node):
    """The gradient of amax/amin is split evenly among the elements equal to
    the result, as in PyTorch; ``nan_equal`` (max, min and median of all
    elements) also counts a NaN result's NaNs as equal to it."""

    double_backward = True

    def __init__(self, a, dims, kept, nan_equal=False):
        super().__init__((a,), (a.detach(), kept))
        self.dims, self.nan_equal = dims, nan_equal

    def backward(self, g):
        a, kept = self.saved
        hit = a == kept
        if self.nan_equal:
            hit = logical_or(hit, logical_and(isnan(a), isnan(kept)))
        hit = hit.to(dtype=g.dtype)
        share = div(g.reshape(kept.shape), sum(hit, self.dims, keepdim=True))
        return (mul(hit, share),)


def _tied(a, value):
    """``value``, one of a's elements chosen over all of them (max, min,
    median), whose gradient is split evenly among the elements equal to it,
    as PyTorch's (NaN counting as equal to NaN)."""
    out = value.detach().clone()
    if _needs_grad(a):
        _attach(out, _AmaxBackward(a, tuple(range(a.ndim)), value.detach().reshape((1,) * a.ndim), True))
    return out


def _amax(a, dim, keepdim, want_max):
    dims = _reduction_dims(a, dim)
    if a.numel() == 0 and any(a.shape[d] == 0 for d in dims):
        raise ArgumentError(f"{'amax' if want_max else 'amin'}() of an empty dim")
    if a.dtype in _HALVES or a.dtype is bool_:
        return _amax(a.to(dtype=uint8 if a.dtype is bool_ else float32), dim, keepdim, want_max).to(dtype=a.dtype)
    kept = a.detach().reshape(a.shape if a.ndim else (1,))
    for d in dims:
        kept = extreme(kept, d, True, want_max).values
    kept = kept.reshape(_kept_shape(a, dims))
    out = _reduced(kept, a, dims, keepdim).detach().clone()
    if _needs_grad(a):
        _attach(out, _AmaxBackward(a, dims, kept))
    return out


def amax(input, dim=(), keepdim=False):
    """The largest values over ``dim`` (all dims when empty); NaN wins."""
    return _amax(input, dim, keepdim, True)


def amin(input, dim=(), keepdim=False):
    return _amax(input, dim, keepdim, False)


def logsumexp(input, dim, keepdim=False):
    """log(sum(exp(a))) over ``dim``, shifted by the largest value so that it
    neither overflows nor underflows. ``dim=()`` reduces every dim (PyTorch 2.x
    does so with keepdim=True and raises without)."""
    dims = _reduction_dims(input, dim)
    if builtins.any(input.shape[d] == 0 for d in dims):  # the sum of no terms is 0, its log -inf
        m = _empty(_kept_shape(input, dims), input).zero_()
    else:
        m = amax(input.detach(), dims, keepdim=True)
        m = where(isfinite(m), m, 0.0)  # rows whose largest value is infinite or NaN are shifted by 0 instead
    out = add(log(sum(exp(sub(input, m)), dims, keepdim=True)), m)
    return _reduced(out, input, dims, keepdim)


def _nonzero_mask(a):
    return (a.detach() != 0)


def _count_nonzero(a, dim, keepdim):
    return sum(_nonzero_mask(a).to(dtype=int64), _reduction_dims(a, dim), keepdim)


def _no_dims(dim):
    """Whether ``dim`` is an empty sequence: all and any then reduce no dim, as in PyTorch."""
    return dim is not None and not isinstance(dim, numbers.Integral) and len(dim) == 0


def all_(input, dim=None, keepdim=False):
    """Whether every element (along ``dim``) is non-zero, as bool; true over
    none; ``dim=()`` reduces nothing: each element's own truth."""
    if _no_dims(dim):
        return _nonzero_mask(input)
    return _count_nonzero(input.detach() == 0, dim, keepdim) == 0


def any_(input, dim=None, keepdim=False):
    """Whether some element (along ``dim``) is non-zero, as bool; false over
    none; ``dim=()`` reduces nothing, as in all."""
    if _no_dims(dim):
        return _nonzero_mask(input)
    return _count_nonzero(input, dim, keepdim) != 0


def count_nonzero(input, dim=None):
    """How many elements (along ``dim``) are non-zero, as int64."""
    return _count_nonzero(input, dim, False)


def norm(input, p="fro", dim=None, keepdim=False, dtype=None):
    """The vector p-norm over ``dim`` (every dim when None): p 2 or 'fro'
    (the same over a whole tensor), 1, inf, -inf, 0 or any other number; or
    the nuclear norm (p 'nuc') of a 2-d input, or over two dims."""
    if dtype is not None:
        input = input.to(dtype=dtype)
    if input.dtype.is_complex and p != "nuc":  # the norm of |z|, a real tensor, as PyTorch's
        input = abs(input)
    if not input.dtype.is_floating_point:
        raise DtypeError(f"norm() needs a floating dtype, got {input.dtype}")
    if input.dtype.name in ("float16", "bfloat16"):  # powers summed in float32, as PyTorch's (|x| > 256 overflows)
        return norm(input.float(), p, dim, keepdim).to(dtype=input.dtype)
    dims = _reduction_dims(input, dim)
    if p == "nuc":
        from .linalg import matrix_norm

        if dim is None and input.ndim != 2:
            raise ArgumentError(f"norm: p='nuc' needs a 2-d input or two dims, got shape {input.shape}")
        return matrix_norm(input, "nuc", (-2, -1) if dim is None else dim, keepdim)
    if isinstance(p, str) and p != "fro":
        raise ArgumentError(f"norm: p={p!r} is not supported (2, 'fro', 'nuc', 1, inf, -inf, 0 or a number)")
    if p == -math.inf:
        return amin(abs(input), dims, keepdim)
    from ._linalg import _pnorm  # built on this module

    return _pnorm(input, 2.0 if p == "fro" else float(p), dims, keepdim)


# -- splitting and layout --

def split_with_sizes(a, split_sizes, dim=0):
    d = _dim(a, dim)
    if builtins.sum(split_sizes) != a.shape[d] or any(s < 0 for s in split_sizes):
        raise ArgumentError(f"split_with_sizes: sizes {list(split_sizes)} do not add up to {a.shape[d]} (dim {d})")
    out, start = [], 0
    for s in split_sizes:
        out.append(a.narrow(d, start, s))
        start += s
    return tuple(out)


def split(a, split_size_or_sections, dim=0):
    """Pieces of ``split_size`` along ``dim`` (the last may be smaller), or of the sizes listed."""
    if not isinstance(split_size_or_sections, numbers.Integral):
        return split_with_sizes(a, list(split_size_or_sections), dim)
    n, s = a.shape[_dim(a, dim)], int(split_size_or_sections)
    if s <= 0 and n:
        raise ArgumentError(f"split: the split size must be positive, got {s}")
    sizes = [s] * (n // s) + ([n % s] if n % s else []) if n else [0]
    return split_with_sizes(a, sizes, dim)


def chunk(input, chunks, dim=0):
    """At most ``chunks`` pieces of ceil(n / chunks) along ``dim`` (``chunks`` empty ones of an empty dim), as torch."""
    if chunks <= 0:
        raise ArgumentError(f"chunk: chunks must be positive, got {chunks}")
    n = input.shape[_dim(input, dim)]
    return split(input, -(-n // chunks), dim) if n else split_with_sizes(input, [0] * chunks, dim)


def tensor_split(input, indices_or_sections, dim=0):
    """``sections`` pieces as equal as can be (the first n % sections one longer), or pieces between indices;
    a 0-d integer tensor is a number of sections and a 1-d one indices, as in PyTorch."""
    d = _dim(input, dim)
    n = input.shape[d]
    if isinstance(indices_or_sections, Tensor):
        if indices_or_sections.ndim > 1 or indices_or_sections.dtype.is_floating_point:
            raise DtypeError("tensor_split: a tensor of sections or indices must be a 0- or 1-d integer tensor, got "
                             f"{indices_or_sections.dtype} of shape {tuple(indices_or_sections.shape)}")
        indices_or_sections = indices_or_sections.tolist()
    if isinstance(indices_or_sections, numbers.Integral):
        k = int(indices_or_sections)
        if k <= 0:
            raise ArgumentError(f"tensor_split: sections must be positive, got {k}")
        return split_with_sizes(input, [n // k + (i < n % k) for i in range(k)], d)
    bounds = [0] + [builtins.min(builtins.max(int(i) + (n if i < 0 else 0), 0), n) for i in indices_or_sections] + [n]
    return tuple(input.narrow(d, lo, builtins.max(hi - lo, 0)) if hi >= lo else input.narrow(d, lo, 0)
                 for lo, hi in zip(bounds, bounds[1:]))


def unbind(input, dim=0):
    d = _dim(input, dim)
    return tuple(input.select(d, i) for i in range(input.shape[d]))


def flip(input, dims):
    """a with the order of ``dims`` reversed: one strided copy walking those dims backwards."""
    dims = _dims(input, dims)
    strides = list(_indexing.contiguous_strides(input.shape))
    offset = 0
    for d in dims:
        offset += (input.shape[d] - 1) * strides[d] if input.shape[d] else 0
        strides[d] = -strides[d]
    sel = _indexing.Region(offset, input.shape, strides)
    if input.numel() == 0 or sel.is_view():  # nothing moves: no dims, or only dims of size 1
        return clone(input)
    out = Tensor(sel.read(input._buf))  # a copy, as PyTorch's flip: writes into it stay in it
    return _attach(out, _SelectBackward(input, sel)) if _needs_grad(input) else out


def roll(input, shifts, dims=None):
    """Elements shifted ``shifts`` places along ``dims`` (of the flattened tensor when None), wrapping around."""
    if dims is None:
        return reshape(roll(reshape(input, (-1,)), shifts, 0), input.shape)
    shifts = (shifts,) if isinstance(shifts, numbers.Integral) else tuple(shifts)
    dims = (dims,) if isinstance(dims, numbers.Integral) else tuple(dims)
    if len(shifts) != len(dims):
        raise ArgumentError(f"roll: {len(shifts)} shifts for {len(dims)} dims")
    out = input
    for s, d in zip(shifts, dims):
        d = _dim(input, d)
        n = input.shape[d]
        if n and s % n:
            out = out.index_select(d, _host_tensor(np.roll(np.arange(n), s), input.device))
    return out if out is not input else clone(input)


def _triangle(a, diagonal, lower):
    if a.ndim < 2:
        raise ArgumentError(f"{'tril' if lower else 'triu'}: needs at least 2 dims, got shape {a.shape}")
    from .tensor import arange
    rows, cols = a.shape[-2], a.shape[-1]
    if not (rows and cols):
        return clone(a)
    with no_grad():  # column minus row, for each element
        offset = sub(arange(cols, device=a.device).reshape(1, cols), arange(rows, device=a.device).reshape(rows, 1))
    keep = (offset <= diagonal) if lower else (offset >= diagonal)
    return where(keep, a, False if a.dtype is bool_ else 0)


def tril(input, diagonal=0):
    """The lower triangle of the last two dims; the rest is zero (also where it held an inf or NaN, as in
    PyTorch) and takes no gradient."""
    return _triangle(input, diagonal, True)


def triu(input, diagonal=0):
    """The upper triangle of the last two dims; the rest is zero, as tril."""
    return _triangle(input, diagonal, False)


def unflatten(input, dim, sizes):
    d = _dim(input, dim)
    if -1 in sizes:
        sizes = tuple(s if s != -1 else input.shape[d] // builtins.max(1, -math.prod(sizes)) for s in sizes)
    return reshape(input, input.shape[:d] + tuple(sizes) + input.shape[d + 1:])


def repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    """Each element (each slice along ``dim``; of the flattened tensor when
    None) repeated ``repeats`` times: a number, or a tensor of one count per
    element. ``output_size`` is checked against the result's length along the
    dim (PyTorch takes it to spare a device sync). With only a 1-d integer
    tensor of counts, the indices 0, 1, ... each repeated as often as counted,
    in the counts' dtype, as torch.repeat_interleave(repeats)."""
    if repeats is None:
        if not isinstance(input, Tensor) or input.ndim != 1 or input.dtype.is_floating_point:
            raise ArgumentError("repeat_interleave(repeats): repeats must be a 1-d integer tensor")
        out = _repeated(_host_tensor(np.arange(input.shape[0]), input.device, input.dtype), input, 0)
    else:
        out = _repeated(input, repeats, dim)
    length = out.shape[0 if repeats is None or dim is None else _dim(input, dim)]
    if output_size is not None and length != output_size:
        raise ArgumentError(f"repeat_interleave: output_size {output_size} is not the repeated length {length}")
    return out


def _repeated(input, repeats, dim):
    if dim is None:
        input, dim = reshape(input, (-1,)), 0
    d = _dim(input, dim)
    n = input.shape[d]
    if isinstance(repeats, numbers.Integral):
        if repeats < 0:
            raise ArgumentError(f"repeat_interleave: negative repeats {repeats}")
        shape = input.shape[:d + 1] + (int(repeats),) + input.shape[d + 1:]
        return _own(reshape(expand(reshape(input, input.shape[:d + 1] + (1,) + input.shape[d + 1:]), shape),
                            input.shape[:d] + (n * int(repeats),) + input.shape[d + 1:]), input)
    counts = repeats.detach().cpu().numpy().reshape(-1) if isinstance(repeats, Tensor) else list(repeats)
    if len(counts) == 1:
        return _repeated(input, int(counts[0]), d)
    if len(counts) != n or any(c < 0 for c in counts):
        raise ArgumentError(f"repeat_interleave: {len(counts)} repeats for a dim of {n} (each >= 0)")
    return input.index_select(d, _host_tensor(np.repeat(np.arange(n), counts), input.device))


def diff(input, n=1, dim=-1, prepend=None, append=None):
    """Differences of neighbours along ``dim``, ``n`` times (after prepend and append are joined on)."""
    d = _dim(input, dim)
    if prepend is not None or append is not None:
        parts = [p for p in (prepend, input, append) if p is not None]
        input = permute(cat([permute(p, _to_front(p, d)) for p in parts]), _from_front(input, d))
    for _ in range(n):
        m = input.shape[d]
        if m == 0:
            break
        input = sub(input.narrow(d, 1, m - 1), input.narrow(d, 0, m - 1))
    return input


def _to_front(a, d):
    return [d] + [i for i in range(a.ndim) if i != d]


def _from_front(a, d):
    order = _to_front(a, d)
    return [order.index(i) for i in range(a.ndim)]


# -- gather and scatter --

def _index_args(a, dim, index, what):
    if isinstance(index, Tensor) and index.dtype is int32:  # token ids often come as int32
        index = index.to(dtype=int64)
    if not isinstance(index, Tensor) or index.dtype is not int64:
        raise DtypeError(f"{what}: the index must be an int64 (or int32) tensor")
    if index._buf.device != a._buf.device:
        raise ArgumentError(f"{what}: the index is on {index.device}, the tensor on {a.device}")
    return _dim(a, dim), index.detach().contiguous()


class _GatherBackward(Node):
    double_backward = True

    def __init__(self, a, dim, index):
        super().__init__((a,), (index,))  # saved: an index changed in place before backward raises
        self.shape, self.dim = a.shape, dim

    def backward(self, g):
        (index,) = self.saved
        if _mode.enabled:  # create_graph: the recorded scatter-add into zeros
            from .tensor import zeros
            return (_scatter(zeros(self.shape, dtype=g.dtype, device=g.device), self.dim, index, g, True,
                             "gather"),)
        wide = _scatter_add_dtype(g.dtype)
        ga = _zeros(self.shape, g, wide)
        alert_not_deterministic("gather's backward", ga)
        _C.scatter_dim(ga._buf, g.to(dtype=wide).contiguous()._buf, index._buf, self.dim, True)
        return (ga.to(dtype=g.dtype),)


def gather(input, dim, index):
    """out[i][j][k] = a[i][index[i][j][k]][k] for dim 1 (likewise for any dim); out has index's shape.
    An index out of range raises IndexOutOfRangeError; on a GPU (as for
    every op that takes an index tensor) when the host next waits for the
    device, and the device stays usable, where PyTorch's device-side assert
    leaves it unusable."""
    d, index = _index_args(input, dim, index, "gather")
    if input.ndim == 0:
        return reshape(gather(reshape(input, (1,)), 0, index.reshape(-1)), index.shape)
    if input.dtype.is_complex:
        return _complex.gather(input, d, index)
    out = _empty(index.shape, input)
    _C.gather_dim(out._buf, input.detach().contiguous()._buf, index._buf, d)
    if _needs_grad(input) and input.dtype.is_floating_point:
        _attach(out, _GatherBackward(input, d, index))
    return out


def _padded(g, shape):
    """g (the index's shape) placed at the front of zeros of ``shape``."""
    if g.shape == tuple(shape):
        return g
    out = _zeros(shape, g)
    _indexing.select(out.shape, tuple(slice(0, s) for s in g.shape)).write(out._buf, g._buf)
    return out


class _ScatterBackward(Node):
    double_backward = True

    def __init__(self, a, src, dim, index, accumulate):
        super().__init__((a, src), (index,))  # saved: an index changed in place before backward raises
        self.dim, self.accumulate = dim, accumulate
        self.src_shape = None if not isinstance(src, Tensor) else src.shape

    def _recorded(self, g, index):
        ga = gsrc = None
        if self.edges[0] is not None:
            ga = g if self.accumulate else _scatter(g, self.dim, index, 0.0, False, "scatter")
        if self.edges[1] is not None:
            gsrc = gather(g, self.dim, index)
            if gsrc.shape != tuple(self.src_shape):
                front = _indexing.select(self.src_shape, tuple(slice(0, s) for s in gsrc.shape))
                gsrc = _place(self.src_shape, front, gsrc)
        return ga, gsrc

    def backward(self, g):
        (index,) = self.saved
        if _mode.enabled:  # create_graph
            return self._recorded(g, index)
        g = g.contiguous()
        ga = gsrc = None
        if self.edges[0] is not None:
            ga = g
            if not self.accumulate:  # the overwritten elements take no gradient
                ga = g.clone()
                zeros = _zeros(index.shape, g)
                _C.scatter_dim(ga._buf, zeros._buf, index._buf, self.dim, False)
        if self.edges[1] is not None:
            taken = _empty(index.shape, g)
            _C.gather_dim(taken._buf, g._buf, index._buf, self.dim)
            gsrc = _padded(taken, self.src_shape)
        return ga, gsrc


def _scatter_add_dtype(dt):
    """The dtype _C.scatter_dim adds in for ``dt``: float32, float64 or int64."""
    if dt.is_floating_point:
        return float32 if dt in _HALVES else dt
    return int64


def _scatter(a, dim, index, src, accumulate, what):
    d, index = _index_args(a, dim, index, what)
    if not isinstance(src, Tensor):
        from .tensor import full
        src = full(index.shape, src, dtype=a.dtype, device=a.device)
    if src.dtype is not a.dtype:
        raise DtypeError(f"{what}: the source is {src.dtype}, the tensor {a.dtype}")
    wide = _scatter_add_dtype(a.dtype)
    if accumulate and wide is not a.dtype:
        return _scatter(a.to(dtype=wide), d, index, src.to(dtype=wide), True, what).to(dtype=a.dtype)
    if a.ndim == 0:  # as a tensor of shape (1,), so that the backward pass has a dim to gather along
        return reshape(_scatter(reshape(a, (1,)), d, index.reshape(1), reshape(src, (1,)), accumulate, what), ())
    out = clone(a.detach())
    if accumulate:
        alert_not_deterministic(what, out)
    _C.scatter_dim(out._buf, src.detach().contiguous()._buf, index._buf, d, accumulate)
    if _needs_grad(a, src) and a.dtype.is_floating_point:
        _attach(out, _ScatterBackward(a, src, d, index, accumulate))
    return out


def scatter(input, dim, index, src=None, value=None, reduce=None):
    """a copy of ``input`` with out[i][index[i][j][k]][k] = src[i][j][k] (dim 1)
    or = ``value``; ``reduce='add'`` adds and ``reduce='multiply'`` multiplies
    instead (repeats all taking part, as scatter_reduce's 'sum' and 'prod').
    Where indices repeat without reduce, one write lands. Unlike PyTorch's,
    the reducing forms are differentiable (scatter_add's and scatter_reduce's
    gradients). An index out of range raises as in gather."""
    if reduce not in (None, "add", "multiply"):
        raise ArgumentError(f"scatter: reduce must be 'add' or 'multiply', got {reduce!r}")
    if (src is None) == (value is None):
        if src is None:
            raise ArgumentError("scatter: give src or value")
    if reduce == "multiply":
        from ._layout import scatter_reduce
        from .tensor import full

        if not isinstance(src, Tensor):  # a number, given as src or value
            _, index = _index_args(input, dim, index, "scatter")
            src = full(index.shape, value if src is None else src, dtype=input.dtype, device=input.device)
        return scatter_reduce(input, dim, index, src, "prod")
    return _scatter(input, dim, index, src if src is not None else value, reduce == "add", "scatter")


def scatter_add(input, dim, index, src):
    """a copy of ``input`` with src added at index along ``dim`` (repeats add up)."""
    return _scatter(input, dim, index, src, True, "scatter_add")


def index_add(input, dim, index, source, alpha=1):
    """a copy of ``input`` with alpha * source[..., k, ...] added at input[..., index[k], ...] along ``dim``;
    ``index`` is 0- or 1-d, and a 0-d input takes a 0-d source at one index (as if both were of shape (1,))."""
    if not isinstance(index, Tensor) or index.ndim > 1:
        raise ArgumentError("index_add: the index must be a 0- or 1-d integer tensor")
    d = _dim(input, dim)
    if input.ndim == 0:
        if source.ndim or index.numel() != 1:
            raise ArgumentError("index_add: a 0-d tensor takes a 0-d source at one index, got source of shape "
                                f"{source.shape} and {index.numel()} indices")
        return reshape(index_add(reshape(input, (1,)), 0, index, reshape(source, (1,)), alpha), ())
    index = reshape(index, (-1,))
    if source.ndim != input.ndim or source.shape[d] != index.shape[0] or any(
            source.shape[i] != input.shape[i] for i in range(input.ndim) if i != d):
        raise ArgumentError(f"index_add: source of shape {source.shape} does not fit {input.shape} with "
                            f"{index.shape[0]} "
                            f"indices along dim {d}")
    full_index = index.reshape(tuple(-1 if i == d else 1 for i in range(input.ndim))).expand(source.shape)
    return scatter_add(input, d, full_index.contiguous(), source if alpha == 1 else mul(source, alpha))


def take(input, index):
    """a's elements, as if flattened, at ``index`` (negative indices count from the end); out has index's shape."""
    flat = reshape(input, (-1,))
    idx = index.detach().reshape(-1)
    n = flat.shape[0]
    if idx.numel():
        idx = idx._binary((idx < 0).to(dtype=int64)._binary(n, _MUL), _ADD)
    return reshape(gather(flat, 0, idx), index.shape)


def _nonzero(a, coords):
    """Where a is non-zero, by the _C nonzero op on a's device: flat indices
    [count], or coordinates [count, a.ndim] with ``coords``. The count is the
    one value that reaches the host (the result's size depends on it, as in PyTorch)."""
    mask = a.detach() if a.dtype is bool_ else a.detach()._compare(0, _NE)
    count = _empty((), mask, int64)
    _C.count_nonzero(count._buf, mask._buf)
    count = int(count.item())
    out = _empty((count, a.ndim) if coords else (count,), mask, int64)
    _C.nonzero(out._buf, mask._buf)
    return out


def take_along_dim(input, indices, dim=None):
    """a's elements at ``indices`` along ``dim`` (gather with a and indices
    broadcast over the other dims), or over the flattened a when dim is None."""
    if dim is None:
        return gather(reshape(input, (-1,)), 0, reshape(indices, (-1,)))
    d = _dim(input, dim)
    if indices.ndim != input.ndim:
        raise ArgumentError(f"take_along_dim: indices of {indices.ndim} dims for a tensor of {input.ndim}")
    shape = _broadcast_shape(input.shape[:d] + (1,) + input.shape[d + 1:],
                             indices.shape[:d] + (1,) + indices.shape[d + 1:])
    return gather(expand(input, shape[:d] + (input.shape[d],) + shape[d + 1:]), d,
                  expand(indices, shape[:d] + (indices.shape[d],) + shape[d + 1:]))


def index_put(a, indices, values, accumulate=False):
    """a with a[indices] set to ``values``, or with ``accumulate`` added to it
    (repeated indices adding up); ``indices`` is a tuple of integer tensors
    for a's leading dims, broadcast together, as in PyTorch."""
    indices = tuple(indices)
    if not accumulate:
        out = clone(a)
        out[indices] = values
        return out
    lead = a.shape[:len(indices)]
    shape = functools.reduce(_broadcast_shape, (i.shape for i in indices), ())
    flat = outside = None
    for i, n in zip(indices, lead):
        i = expand(i.detach().to(dtype=int64), shape)
        i = where(i < 0, add(i, n), i)
        if len(indices) > 1:  # an index past its dim would land in the next row of the flat positions
            bad = logical_or(i < 0, i >= n)
            outside = bad if outside is None else logical_or(outside, bad)
        flat = i if flat is None else add(mul(flat, n), i)
    width = math.prod(a.shape[len(indices):])  # named, not -1, which an empty tensor leaves ambiguous
    rows = reshape(a, (math.prod(lead), width))
    if outside is not None:  # made a row past the end, which index_add refuses (on a GPU, with no host sync)
        flat = where(outside, rows.shape[0], flat)
    vals = values if isinstance(values, Tensor) else _operand(values, a, "index_put")
    vals = reshape(expand(vals.to(dtype=a.dtype), shape + a.shape[len(indices):]), (math.prod(shape), width))
    return reshape(index_add(rows, 0, reshape(flat, (-1,)), vals), a.shape)


def nonzero(input, *, as_tuple=False):
    """The coordinates of a's non-zero elements in row-major order, as an int64
    [count, a.ndim] tensor, or (``as_tuple``) one 1-d tensor per dim."""
    if not as_tuple:
        return _nonzero(input, True)
    if input.ndim == 0:
        return (_nonzero(reshape(input, (1,)), False),)
    coords = _nonzero(input, True)
    return tuple(coords.select(1, d).contiguous() for d in range(input.ndim))


def argwhere(input):
    """nonzero(a): the coordinates of the non-zero elements, one row each."""
    return nonzero(input)


def masked_select(input, mask):
    """The elements where ``mask`` (broadcast with a's shape) is non-zero, as a
    1-d tensor, selected on a's device; only their count reaches the host.
    The mask must be bool, as in PyTorch."""
    if not isinstance(mask, Tensor) or mask.dtype is not bool_:
        raise DtypeError("masked_select: expected BoolTensor for mask")
    shape = _broadcast_shape(mask.shape, input.shape)
    if mask.shape != shape:
        mask = expand(mask.detach(), shape)
    if input.shape != shape:
        input = expand(input, shape)
    return gather(reshape(input, (-1,)), 0, _nonzero(mask.contiguous(), False))


# -- sorting --

SortResult = collections.namedtuple("SortResult", "values indices")
SortResult.__doc__ = "What sort and topk return, as torch.return_types.sort: (values, indices)."


def _retyped(x, dtype_name):
    """The contiguous tensor x's memory read as another dtype of its item size (bool as uint8 and back)."""
    return Tensor(x._buf.view(0, tuple(x.shape), dtype_name))


def _sort(a, d, descending):
    """(values, indices) of a sorted stably along dim d by the _C sort op, outside the graph."""
    x = a.detach().contiguous()
    if x.dtype.name == "bool":  # the C sort has no bool loop; as uint8 False (0) sorts before True (1) alike
        values, indices = _sort(_retyped(x, "uint8"), d, descending)
        return _retyped(values, "bool"), indices
    values, indices = _empty(x.shape, x), _empty(x.shape, x, int64)
    _C.sort_dim(indices._buf, values._buf, x._buf, d, bool(descending))
    return values, indices


def sort(input, dim=-1, descending=False, stable=False):
    """(values, indices) sorted along ``dim``; the sort is always stable and
    NaN sorts as the largest value (last ascending, first descending), as in
    PyTorch. It runs on a's device (a merge sort per line on the host, CUB's
    segmented sort on a GPU); gradients flow back to where each value came from."""
    if input.ndim == 0:
        return SortResult(clone(input), _like_scalar(0, input).to(dtype=int64))
    d = _dim(input, dim)
    values, indices = _sort(input, d, descending)
    if _needs_grad(input) and input.dtype.is_floating_point:
        _attach(values, _GatherBackward(input, d, indices))
    return SortResult(values, indices)


def argsort(input, dim=-1, descending=False, stable=False):
    return sort(input, dim, descending, stable).indices


def msort(input):
    """a sorted along its first dim (the values of sort(a, 0))."""
    return sort(input, 0).values


def topk(input, k, dim=-1, largest=True, sorted=True):
    """The ``k`` largest (smallest) elements along ``dim`` and their indices, in
    sorted order, ties in index order (``sorted=False`` gives the same). Bool
    tensors are taken too (True the larger), which PyTorch refuses."""
    d = _dim(input, dim)
    n = input.shape[d] if input.ndim else 1
    if not 0 <= k <= n:
        raise ArgumentError(f"topk: k={k} is out of range for a dim of size {n}")
    if input.ndim == 0:
        return sort(input)
    values, indices = _sort(input, d, largest)
    if k < n:
        values, indices = values.narrow(d, 0, k).contiguous(), indices.narrow(d, 0, k).contiguous()
    if _needs_grad(input) and input.dtype.is_floating_point:
        _attach(values, _GatherBackward(input, d, indices))
    return SortResult(values, indices)


def unique(a, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """The distinct elements, sorted (also with ``sorted=False``), with where each
    element went (``return_inverse``) and how often each occurs (``return_counts``).
    Built on the sort op on a's device; the number of distinct elements reaches
    the host. Every NaN is distinct, as in PyTorch. Not differentiable. With
    ``dim``, the distinct slices along it (_stats._unique_dim)."""
    if dim is not None:
        from ._stats import _unique_dim

        return _unique_dim(a, dim, return_inverse, return_counts)
    values, order = _sort(reshape(a.detach(), (-1,)), 0, False)
    return _runs(values, order, a.shape, return_inverse, return_counts)


def _runs(values, order, shape, return_inverse, return_counts):
    """unique's and unique_consecutive's result from the runs of equal values
    along dim 0 of ``values`` (a NaN equal to nothing): the first of each run,
    and with ``return_inverse`` each element's run number, put back where
    ``order`` (None: in place) says the element came from, in ``shape``; with
    ``return_counts`` the runs' lengths."""
    from .tensor import full

    n = values.shape[0]
    with no_grad():
        # A run of equal values starts at 0 and wherever a value differs from the one before.
        starts = full((n,), True, device=values.device)
        if n > 1:
            differs = values.narrow(0, 1, n - 1)._compare(values.narrow(0, 0, n - 1), _NE)
            if differs.ndim > 1:
                differs = any_(differs.reshape(n - 1, -1), 1)
            starts = cat([starts.narrow(0, 0, 1), differs])
        first = _nonzero(starts, False)
        out = [values.index_select(0, first)]
        if return_inverse:
            run = _fold(starts.to(dtype=int64), 0, _FOLD_SUM, _CUMULATIVE)._binary(1, _SUB)
            if order is not None:
                inverse = _empty((n,), run)
                _C.scatter_dim(inverse._buf, run._buf, order._buf, 0, False)
                run = inverse
            out.append(run.reshape(shape))
        if return_counts:
            out.append(diff(first, append=full((1,), n, dtype=int64, device=values.device)))
    return out[0] if len(out) == 1 else tuple(out)


def unique_consecutive(input, return_inverse=False, return_counts=False, dim=None):
    """The first element of each run of equal consecutive elements (of the
    flattened input, or slices along ``dim``), with each element's run number
    (``return_inverse``) and the runs' lengths (``return_counts``), as
    PyTorch's. A NaN equals nothing. Not differentiable."""
    if dim is None:
        return _runs(reshape(input.detach(), (-1,)), None, input.shape, return_inverse, return_counts)
    d = _dim(input, dim)
    res = _runs(input.detach().movedim(d, 0), None, (input.shape[d],), return_inverse, return_counts)
    if isinstance(res, tuple):
        return (res[0].movedim(0, d),) + res[1:]
    return res.movedim(0, d)


# -- matrix products --

def _check_mat(a, b, what, nd_a, nd_b):
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise TypeError(f"{what} takes ddpc tensors")
    if a.ndim != nd_a or b.ndim != nd_b:
        raise ArgumentError(f"{what}: expected {nd_a}-d and {nd_b}-d operands, got shapes {a.shape} and {b.shape}")


def mm(input, b):
    _check_mat(input, b, "mm", 2, 2)
    return matmul(input, b)


@autocast_op("lower_cuda")
def mv(input, v):
    _check_mat(input, v, "mv", 2, 1)
    return matmul(input, v)


def dot(input, b):
    _check_mat(input, b, "dot", 1, 1)
    if input.shape != b.shape:
        raise ArgumentError(f"dot: shapes {input.shape} and {b.shape} differ")
    out = sum(mul(input, b))
    return out if out.dtype is input.dtype else out.to(dtype=input.dtype)  # integers keep their dtype, as torch.dot's


def outer(input, b):
    _check_mat(input, b, "outer", 1, 1)
    return mul(reshape(input, (-1, 1)), reshape(b, (1, -1)))


@autocast_op("lower")
def addmm(input, m1, m2, *, beta=1, alpha=1):
    """beta * input + alpha * (m1 @ m2), input broadcast to the product's shape."""
    prod_ = mm(m1, m2)
    prod_ = prod_ if alpha == 1 else mul(prod_, alpha)
    return add(prod_, input) if beta == 1 else add(prod_, mul(input, beta))


@autocast_op("lower")
def bmm(input, b):
    """a[i] @ b[i] for each batch entry i (matmul without broadcasting)."""
    _check_mat(input, b, "bmm", 3, 3)
    if input.shape[0] != b.shape[0] or input.shape[2] != b.shape[1]:
        raise ArgumentError(f"bmm: shapes {input.shape} and {b.shape} cannot be multiplied batch by batch")
    return matmul(input, b)


# ---- shape ops ------------------------------------------------------------------------------

class _ViewBackward(Node):
    passes_through = True
    double_backward = True

    def __init__(self, a):
        super().__init__((a,), ())
        self.shape = a.shape

    def backward(self, g):
        return (g.reshape(self.shape),)


def reshape(input, shape):
    shape = input._normalize_shape(shape)
    out = Tensor(input._buf.view(0, shape))
    out._not_a_view = _reshaped_copy_view(input, shape)
    if out._not_a_view is False:  # a copy of its own, as PyTorch's reshape makes of such a view
        out = Tensor(_C.Buffer(shape, input._buf.dtype, input._buf.device))
        _C.copy(out._buf, input._buf.view(0, shape))
    return _attach_view(out, input, None, _ViewBackward)


def alias(a):
    """A tensor over a's elements that is not marked as a copy (``contiguous()``)."""
    out = Tensor(a._buf.view(0, a.shape))
    return _attach_view(out, a, None, _ViewBackward)


class _SelectBackward(Node):
    """The gradient of a selection of a's elements (an index, permute): zeros
    but for the incoming gradient at the selected elements."""

    double_backward = True

    def __init__(self, a, sel):
        super().__init__((a,), ())
        self.shape, self.dtype, self.sel = a.shape, a.dtype, sel

    def backward(self, g):
        if _mode.enabled:
            return (_place(self.shape, self.sel, g),)
        return (_Scattered(self.shape, self.sel, g),)


class _PlaceBackward(Node):
    """The gradient of _place: the placed elements' gradient, selected again."""

    double_backward = True

    def __init__(self, g, sel):
        super().__init__((g,), ())
        self.sel = sel

    def backward(self, g):
        return (_select(g, self.sel, "indexing"),)


class AdjointBackward(Node):
    """The gradient of a linear map whose adjoint is ``adjoint`` (unfold's is
    fold, and fold's unfold; a gradient op's is the op it differentiates)."""

    double_backward = True  # where adjoint records its result

    def __init__(self, input, adjoint, name):
        super().__init__((input,), ())
        self.adjoint, self._name = adjoint, name

    def name(self):
        return self._name

    def backward(self, g):
        return (self.adjoint(g),)


def recomputed_grads(node, g, forward, inputs):
    """A fused node's gradients in a create_graph pass: ``forward``, the
    node's op in recorded ops, runs again on stand-ins for its live
    ``inputs`` (one per input, None where absent) and is differentiated with
    create_graph. Each stand-in is a view of its input, so that an input
    computed from another still gets its own partial derivative."""
    stand_ins = [None if e is None else alias(t) for t, e in zip(inputs, node.edges)]
    out = forward(*(t if s is None else s for s, t in zip(stand_ins, inputs)))
    got = iter(grad(out, [s for s in stand_ins if s is not None], g, create_graph=True, allow_unused=True))
    return tuple(None if s is None else next(got) for s in stand_ins)


def _place(shape, sel, g):
    """Zeros of ``shape`` but for ``g`` added at the elements ``sel`` selects,
    recorded: a selection's gradient in a create_graph pass."""
    out = _Scattered(shape, sel, g).dense()
    if _needs_grad(g):
        _attach(out, _PlaceBackward(g, sel))
    return out


def _select(a, sel, what):
    return _attach_view(_read(a, sel, what), a, sel, functools.partial(_SelectBackward, sel=sel))


def index(a, idx):
    return _select(a, _indexing.select(a.shape, idx), "indexing")


def _dim(a, d, ndim=None):
    """Dim ``d`` of a (of ``ndim`` dims if given), counted from the front; a 0-d tensor takes 0 and -1."""
    n = a.ndim if ndim is None else ndim
    n = n if n else 1
    if not -n <= d < n:  # PyTorch's words
        raise IndexOutOfRangeError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {d})")
    return d % n


def permute(input, dims):
    """input's dims in the order ``dims`` (a copy unless the order keeps the elements' order)."""
    dims = tuple(_dim(input, int(d)) for d in dims)
    if sorted(dims) != list(range(input.ndim)):
        raise ArgumentError(f"permute: {dims} is not an ordering of the {input.ndim} dims of a tensor of shape "
                            f"{input.shape}")
    strides = _indexing.contiguous_strides(input.shape)
    sel = _indexing.Region(0, [input.shape[d] for d in dims], [strides[d] for d in dims])
    return _select(input, sel, "permute")


def transpose(input, dim0=0, dim1=1):
    d0, d1 = _dim(input, dim0), _dim(input, dim1)
    if input.ndim < 2 or d0 == d1:  # nothing moves
        return reshape(input, input.shape)
    if input.ndim > 2:
        dims = list(range(input.ndim))
        dims[d0], dims[d1] = dims[d1], dims[d0]
        return permute(input, dims)
    out = _transpose_storage(input)  # the tiled 2-d kernel
    out._not_a_view = _CopyOf(input, _indexing.Region(0, out.shape, (1, input.shape[1])), "transpose")
    if _needs_grad(input):
        _attach(out, _TransposeBackward((input,)))
    return out


class _ExpandBackward(Node):
    double_backward = True

    def __init__(self, a):
        super().__init__((a,), ())
        self.shape, self.dtype = a.shape, a.dtype

    def backward(self, g):
        return (_reduce_to(g, self.shape, self.dtype),)


def expand(a, shape):
    """a repeated along its dims of size 1 (and new leading dims) to ``shape``; -1 keeps a dim."""
    shape = list(shape)
    lead = len(shape) - a.ndim
    if lead < 0:
        raise ArgumentError(f"expand: the shape {tuple(shape)} has fewer dims than the tensor's {a.shape}")
    for d, s in enumerate(shape):
        if s == -1:
            if d < lead:
                raise ArgumentError(f"expand: -1 is not allowed for a new leading dim ({tuple(shape)})")
            shape[d] = a.shape[d - lead]
    shape = tuple(shape)
    if shape == a.shape:
        return reshape(a, shape)
    try:
        strides = _indexing.broadcast_strides(a.shape, shape, "the tensor")
    except ValueError:
        raise ArgumentError(f"expand: the tensor of shape {a.shape} can't be expanded to {shape} (only dims of "
                            "size 1 repeat)") from None
    out = _read(a, _indexing.Region(0, shape, strides), "expand")
    if _needs_grad(a):
        _attach(out, _ExpandBackward(a))
    return out


# ---- in-place writes ------------------------------------------------------------------
# A write into a tensor that takes part in the graph (it requires grad, or
# what is written does) is recorded as PyTorch does: the tensor's memory gets
# the new values and the tensor takes the write's node as its history, whose
# edge to the old values is the tensor's previous history.


def _source_of(t):
    """(tensor, selection) where t is a view made in the graph of that
    tensor's elements (selection None: all of them, reshaped), or a copy
    standing for them; None where t owns its memory, or its source is unknown."""
    view = t.__dict__.get("_view_of")
    if view is not None and t._buf.base is not None and (t._buf.base is view[0]._buf or
                                                          t._buf.base is view[0]._buf.base):
        return view
    c = t._not_a_view
    if c is not None and c.source is not None and c.sel is not None:
        return c.source, c.sel
    return None


def _writable_history(t, what):
    """A tensor standing for ``t`` before the write (same memory, t's
    history), once the write is one autograd can follow: into t and, where t
    is a view (or a copy standing for one), into the tensors it views."""
    v = t
    while True:
        if v.requires_grad and v.grad_fn is None:
            whose = "a leaf tensor that requires grad" if v is t else "a view of a leaf tensor that requires grad"
            raise RuntimeError(f"{what}: {whose} can't be modified in place while grad mode is on; wrap the "
                               "update in ddpc.no_grad()")
        if v._not_a_view is not None and v._not_a_view.source is None:
            break  # a copy whose writes go nowhere (repeated elements): refused below, even where it is a view
        link = _source_of(v)
        if link is None:
            break
        v = link[0]
    if v._not_a_view is not None:
        raise RuntimeError(f"{what}: this tensor is a copy made by {v._not_a_view.what} (a view in PyTorch, but ddpc "
                           "tensors are contiguous), and a write into it can't be followed by autograd; write "
                           "through an index of the tensor it came from (x[index] = value)")
    if v._buf.views_shared:
        raise RuntimeError(f"{what}: this tensor shares memory with another one (a view made with grad mode off, "
                           "or by detach()), and autograd can't follow a write into it to that tensor; write "
                           "into that tensor, or build the result out of place (x = x + y, ddpc.cat, ddpc.stack)")
    _refresh(t, _reread)
    old = Tensor(t._buf)
    old.requires_grad, old.grad_fn = t.requires_grad, t.grad_fn
    return old


def rearrange_in_place(t, method, args, kwargs, what):
    """t rearranged in place by the Tensor method ``method`` (t_, transpose_,
    squeeze_, unsqueeze_), as PyTorch's in-place view ops: t takes the
    rearrangement's shape, memory and history, and stays a view of its old
    elements, which a stand-in tensor now holds with t's old history, views
    and links. Where the elements keep their places (squeeze, unsqueeze) t is
    a view of that memory; where they move (a transpose: ddpc tensors are
    contiguous) t is a copy standing for them, written back when written into."""
    if _mode.enabled and t.requires_grad:
        _writable_history(t, what)  # (the checks, a leaf's refusal among them, and refresh of a write into t)
    else:
        _check_no_grad_inplace(t, what)
    new = getattr(t, method)(*args, **kwargs)
    old = Tensor(t._buf)
    old.requires_grad, old.grad_fn, old._not_a_view = t.requires_grad, t.grad_fn, t._not_a_view
    for name in ("_graph_views", "_view_of"):
        if name in t.__dict__:
            setattr(old, name, t.__dict__.pop(name))
    if "_view_of" in old.__dict__:  # old is the view its source now follows
        source_views = old._view_of[0].__dict__.get("_graph_views")
        if source_views is not None:
            source_views.replace(t, old)
    moved = new._buf.base is None or not (new._buf.base is t._buf or new._buf.base is t._buf.base)
    t._buf = new._buf
    if moved:  # a copy of old's elements in their new order
        rel = new._not_a_view.sel if new._not_a_view is not None else None
        t._not_a_view = _CopyOf(old, rel, what) if isinstance(rel, _indexing.Region) else None
    else:
        t._not_a_view = _copy_view(old)
        if _mode.enabled:
            t._view_of = (old, None)
            _track_view(old, t, _ViewBackward)
    if new.requires_grad:
        t.grad_fn, t.requires_grad = new.grad_fn, True
        _follow_retain(t)
    return t


def _reread(t, source, sel):
    """After _refresh gave the copy t its source's current elements: t's
    history is that of those elements (the source's, selected), and t's views
    read from it."""
    if source.requires_grad:
        t.grad_fn, t.requires_grad = _SelectBackward(source, sel), True
        _rebase_views(t)


def _write_into(t, sel, values, node):
    """Writes ``values`` into t's selection ``sel`` (None: all of t) and makes ``node`` t's history."""
    t._buf.bump_version()
    if sel is None:
        _C.copy(t._buf, values._buf)
    else:
        sel.write(t._buf, values._buf)
    _write_back(t)
    t.grad_fn = node
    t.requires_grad = node is not None
    if node is not None:
        _follow_retain(t)
        _propagate(t)
    return t


def _follow_retain(t):
    """After t took new history: ``retain_grad``'s .grad is the new value's gradient, as in PyTorch."""
    keep = t.__dict__.get("_retain_keep")
    if keep is not None:
        if t._retained_by.retain is keep:
            t._retained_by.retain = None
        t.grad_fn.retain, t._retained_by = keep, t.grad_fn


def _propagate(t):
    """After an in-place write into t: where t is a view of another tensor,
    that tensor's history becomes its old one with t's new values written
    into t's part (PyTorch's CopySlices), and so on up to the tensor owning
    the memory; the views of each then read from its new history."""
    link = _source_of(t)
    if link is not None:
        src, sel = link
        old = Tensor(src._buf)
        old.requires_grad, old.grad_fn = src.requires_grad, src.grad_fn
        value = t if sel is not None else reshape(t, src.shape)
        src.grad_fn, src.requires_grad = _WriteBackward(old, value, sel), True
        _follow_retain(src)
        _propagate(src)
    _rebase_views(t)


def inplace_binary(t, other, op):
    """``t op= other`` (add, sub, mul, div) recorded in the graph."""
    old = _writable_history(t, "in-place op")
    if op in (_MUL, _DIV) and isinstance(other, Tensor) and other.requires_grad:
        old = clone(old)  # the node keeps this operand for other's gradient, and t's memory is about to change
    res = check_inplace_result(t, _binary(old, other, op))
    return _write_into(t, None, res, res.grad_fn)


def inplace_apply(t, fn, what, others=()):
    """``fn(t)`` written into t, for the ``inplace=True`` forms of the nn
    functions and the ``_`` methods: computed aside, then t holds the result
    (and whatever t is a copy of, where PyTorch would write through a view).
    In the graph (t or one of the ``others`` fn reads requires grad) t takes
    the result's history, as after PyTorch's in-place op; fn then runs on a
    copy of t's old values, which its node may save while t's memory changes."""
    if not (_mode.enabled and (t.requires_grad or any(isinstance(o, Tensor) and o.requires_grad for o in others))):
        _check_no_grad_inplace(t, what)
        with no_grad():
            res = check_inplace_result(t, fn(t.detach()))
        t._buf.bump_version()
        _C.copy(t._buf, res._buf)
        _write_back(t)
        return t
    old = _writable_history(t, what)
    res = check_inplace_result(t, fn(clone(old)))
    return _write_into(t, None, res, res.grad_fn)


def check_inplace_result(t, res):
    """An in-place op's result, computed aside, checked to fit the tensor it goes
    into and cast to its dtype: as in PyTorch, any cast but floating to integer,
    complex to real, or anything but bool to bool."""
    if res.shape != t.shape:
        raise ArgumentError(f"in-place op: the result's shape {res.shape} is not the tensor's {t.shape}")
    if (res.dtype.is_floating_point and not (t.dtype.is_floating_point or t.dtype.is_complex)) or \
            (res.dtype.is_complex and not t.dtype.is_complex) or (t.dtype is bool_ and res.dtype is not bool_):
        raise DtypeError(f"result type {res.dtype} can't be cast to the in-place output's dtype {t.dtype}")
    return res if res.dtype is t.dtype else res.to(dtype=t.dtype)


class _WriteBackward(Node):
    """``t[index] = value`` (sel None: all of t): the gradient of the old values
    is the incoming one with the written part zeroed; the value's is the
    written part, summed over the dims the value was broadcast along."""

    double_backward = True

    def __init__(self, old, value, sel):
        super().__init__((old, value), ())
        self.sel, self.value_shape, self.value_dtype = sel, value.shape, value.dtype

    def backward(self, g):
        need_old, need_value = self.edges[0] is not None, self.edges[1] is not None
        gv = go = None
        if need_value:
            part = g if self.sel is None else _select(g, self.sel, "indexing") if _mode.enabled \
                else Tensor(self.sel.read(g._buf))
            gv = _reduce_to(clone(part), self.value_shape, self.value_dtype)
        if need_old and self.sel is None:  # all overwritten: zeros, as PyTorch's (not None: optimizers skip those)
            go = _zeros(g.shape, g)
        elif need_old:
            zero = _zeros((), g)
            if _mode.enabled:  # create_graph: g times a mask that is 0 where written
                kept = _empty(g.shape, g)
                _C.fill(kept._buf, 1.0)
                self.sel.write(kept._buf, zero._buf)
                go = mul(g, kept)
            else:
                go = clone(g)
                self.sel.write(go._buf, zero._buf)
        return go, gv


def write(t, sel, value):
    """``t[index] = value`` (``sel`` the index's selection, or None for
    ``t.copy_(value)``) recorded in the graph; ``value`` is a tensor of t's
    dtype and device that broadcasts to the part written."""
    old = _writable_history(t, "copy_" if sel is None else "item assignment")
    node = _WriteBackward(old, value, sel) if _needs_grad(old, value) else None
    if sel is not None and _shares_memory(value, t):
        value = clone(value.detach())
    return _write_into(t, sel, value.detach(), node)


class _CatBackward(Node):
    passes_through = True
    double_backward = True

    def __init__(self, tensors, dim):
        super().__init__(tensors, ())
        self.sizes = [t.shape[dim] for t in tensors]
        self.dim = dim
        self.dtypes = [t.dtype for t in tensors]

    def backward(self, g):
        grads, at = [], 0
        for n, dt in zip(self.sizes, self.dtypes):
            part = index(g, _along(self.dim, slice(at, at + n)))
            grads.append(part if part.dtype is dt else part.to(dtype=dt))
            at += n
        return grads


class _StackBackward(_CatBackward):
    def __init__(self, tensors, dim):
        Node.__init__(self, tensors, ())
        self.dim = dim
        self.dtypes = [t.dtype for t in tensors]

    def backward(self, g):
        return [index(g, _along(self.dim, i)) if g.dtype is dt else index(g, _along(self.dim, i)).to(dtype=dt)
                for i, dt in enumerate(self.dtypes)]


def cat(tensors, dim=0):
    """Concatenates tensors along ``dim`` (all other dims equal). As in
    PyTorch, 1-d tensors of no elements (``tensor([])``, a loop's empty start)
    are left out, though their dtypes take part in the result's."""
    _check_sequence(tensors, "cat")
    tensors = list(tensors)
    kept = [t for t in tensors if not (isinstance(t, Tensor) and t.shape == (0,))]
    if kept and len(kept) < len(tensors):
        dt = functools.reduce(promote, (t.dtype for t in tensors if isinstance(t, Tensor)))
        return cat([t if t.dtype is dt else t.to(dtype=dt) for t in kept], dim)
    out = _cat_storage(tensors, dim)
    if _needs_grad(*tensors):
        _attach(out, _CatBackward(tensors, dim % out.ndim))
    return out


def _check_sequence(tensors, op):
    """A tensor where a sequence of them belongs (``cat(a, b)``, the brackets forgotten) is PyTorch's TypeError,
    not an error from iterating over its rows."""
    if isinstance(tensors, Tensor):
        raise TypeError(f"{op}(): argument 'tensors' (position 1) must be tuple of Tensors, not Tensor")


def stack(tensors, dim=0):
    """Stacks equal-shape tensors along a new dim ``dim``."""
    _check_sequence(tensors, "stack")
    tensors = list(tensors)
    out = _stack_storage(tensors, dim)
    if _needs_grad(*tensors):
        _attach(out, _StackBackward(tensors, dim % out.ndim))
    return out


class _CloneBackward(Node):
    passes_through = True
    double_backward = True

    def backward(self, g):
        return (g,)


def _own(t, source):
    """t, the result of an op on ``source`` that PyTorch always copies, where
    it has memory of its own, else a clone of it: ddpc composes such ops of
    views, which are ``source`` itself, share its memory or write back into
    it where the op moves nothing (padding by 0, repeating once)."""
    return t if t is not source and t._buf.base is None and t._not_a_view is None else clone(t)


def clone(input, *, memory_format=None):
    """A copy of ``input`` that autograd follows (``memory_format`` is checked
    and, ddpc tensors being row-major, lays nothing out differently)."""
    if memory_format is not None:
        checked_memory_format(memory_format, "clone")
    buf = _C.Buffer(input.shape, input._buf.dtype, input._buf.device)
    _C.copy(buf, input._buf)
    out = Tensor(buf)
    if _needs_grad(input):
        _attach(out, _CloneBackward((input,)))
    return out


class _ToBackward(Node):
    double_backward = True

    def __init__(self, a, out):
        super().__init__((a,), ())
        self.device, self.dtype = a.device, a.dtype
        # A copy to the same device and dtype hands the incoming gradient back as it is.
        self.passes_through = out.device == a.device and out.dtype is a.dtype

    def backward(self, g):
        if g.dtype.is_complex and not self.dtype.is_complex:  # the gradient of a real input is the real part
            g = _complex.real(g)
        return (g.to(device=self.device, dtype=self.dtype),)


def record_to(src, out):
    """Records a device or dtype conversion done by Tensor.to; gradients flow
    only into floating outputs (an integer cast ends the graph, as in PyTorch)."""
    if out is not src and (out.dtype.is_floating_point or out.dtype.is_complex) and _needs_grad(src):
        _attach(out, _ToBackward(src, out))
    return out


# ---- nn functions with fused kernels --------------------------------------------------------

class _DropoutBackward(Node):
    """Dropout's gradient is the same dropout (the same mask and scale) of the incoming one."""

    double_backward = True

    def __init__(self, x, p, seed, offset):
        super().__init__((x,), ())
        self.p, self.seed, self.offset = p, seed, offset

    def backward(self, g):
        return (_dropout_with(g, self.p, self.seed, self.offset),)


def _dropout_with(x, p, seed, offset):
    """Dropout of x with the mask that (seed, offset) draws."""
    out = _empty(x.shape, x)
    _C.dropout(out._buf, x._buf, p, seed, offset)
    if _needs_grad(x):
        _attach(out, _DropoutBackward(x, p, seed, offset))
    return out


def dropout(x, p=0.5, training=True):
    from .tensor import _draws_from

    if not 0 <= p <= 1:
        raise ArgumentError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0:
        return x
    if x.dtype in _HALVES:
        return dropout(x.float(), p, training).to(dtype=x.dtype)
    seed, offset = _draws_from().take(x.numel())
    return _dropout_with(x, float(p), seed, offset)


def _inverse_counts(indices, like):
    """(V, 1): 1 / how often each of like's V rows occurs in indices (1 for none), in like's dtype."""
    from .tensor import ones, zeros

    counts = scatter_add(zeros(like.shape[0], dtype=like.dtype, device=like.device), 0, indices,
                         ones(indices.shape, dtype=like.dtype, device=like.device))
    return reciprocal(clamp_min(counts, 1.0)).reshape(-1, 1)


class _EmbeddingBackward(Node):
    double_backward = True

    def __init__(self, weight, idx, padding_idx, scale_grad_by_freq):
        super().__init__((weight,), (idx,))
        self.shape, self.padding_idx, self.scale_grad_by_freq = weight.shape, padding_idx, scale_grad_by_freq

    def backward(self, g):
        (idx,) = self.saved
        if g.dtype in _HALVES:  # summed in float32
            return (self.backward(g.float())[0].to(dtype=g.dtype),)
        gw = _zeros(self.shape, g)
        alert_not_deterministic("embedding's backward", gw)
        _C.index_add_rows(gw._buf, g.reshape(-1, self.shape[1])._buf, idx._buf)
        scale = _inverse_counts(idx, gw) if self.scale_grad_by_freq else None
        if scale is not None:  # each row's gradient over how often the batch looks it up
            _C.binary_broadcast(_MUL, gw._buf, gw._buf, scale._buf)
        if self.padding_idx is not None:
            _C.fill(gw._getitem(self.padding_idx)._buf, 0.0)
        if _needs_grad(g):  # create_graph: the adjoint looks the rows up again (none for padding_idx)
            _attach(gw, AdjointBackward(g, functools.partial(self._rows, idx, g.shape, scale),
                                        "EmbeddingBackwardBackward"))
        return (gw,)

    def _rows(self, idx, shape, scale, u):
        rows = index(u if scale is None else mul(u, scale), idx)
        if self.padding_idx is not None:
            rows = where((idx == self.padding_idx).reshape(idx.shape + (1,)), 0.0, rows)
        return reshape(rows, shape)


def _values_of(*scalars):
    """0-d tensors of one dtype and device as Python numbers, read from the device in one copy."""
    return tuple(stack(scalars).cpu().numpy().tolist())


def _range_of(t):
    """(min, max) of a non-empty tensor, read from its device in one copy."""
    return _values_of(amin(t), amax(t))


def _renorm_rows_(weight, idx, max_norm, norm_type):
    """PyTorch's embedding_renorm_: the rows of ``weight`` at ``idx`` whose
    ``norm_type``-norm exceeds ``max_norm`` are scaled down to it, in place."""
    with no_grad():
        rows = unique(idx)
        picked = weight.detach()[rows]
        norms = norm(picked, norm_type, 1, keepdim=True)
        weight[rows] = mul(picked, where(norms > max_norm, mul(reciprocal(add(norms, 1e-7)), max_norm), 1.0))


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False, sparse=False):
    """Rows of ``weight`` [N, D] at the int64 indices ``input`` (any shape): shape input.shape + (D,).
    The row at ``padding_idx`` gets no gradient. With ``max_norm``, the rows
    looked up are first renormalised in place to at most that norm, as in
    PyTorch; with ``scale_grad_by_freq`` each row's gradient is divided by
    how often ``input`` holds it. With ``sparse``, the weight's gradient is a
    sparse COO tensor: one row per index looked up (uncoalesced), as PyTorch's.
    An index out of range raises IndexOutOfRangeError, on a GPU when the host
    next waits for the device (see gather)."""
    if weight.ndim != 2:
        raise ArgumentError(f"embedding: the weight must be 2-d, got shape {weight.shape}")
    if input.dtype is int32:
        input = input.to(dtype=int64)
    if input.dtype is not int64:
        raise DtypeError(f"embedding: indices must be int64 or int32, got {input.dtype}")
    if input._buf.device != weight._buf.device:
        raise ArgumentError(f"embedding: indices on {input.device} and weight on {weight.device}")
    n = weight.shape[0]
    if padding_idx is not None:
        if not -n <= padding_idx < n:
            raise ArgumentError(f"embedding: padding_idx {padding_idx} is out of range for {n} rows")
        padding_idx %= n
    idx = input.detach().reshape(-1)
    if max_norm is not None and idx.numel():
        _renorm_rows_(weight, idx, max_norm, norm_type)
    out = _empty(tuple(input.shape) + (weight.shape[1],), weight)
    _C.index_rows(out.reshape(-1, weight.shape[1])._buf, weight._buf, idx._buf)
    if _needs_grad(weight):
        node = _EmbeddingSparseBackward if sparse else _EmbeddingBackward
        _attach(out, node(weight, idx, padding_idx, bool(scale_grad_by_freq)))
    return out


class _EmbeddingSparseBackward(Node):
    """embedding's backward with sparse=True: a sparse COO gradient holding one row per lookup."""

    def __init__(self, weight, idx, padding_idx, scale_grad_by_freq):
        super().__init__((weight,), (idx,))
        self.shape, self.padding_idx, self.scale_grad_by_freq = weight.shape, padding_idx, scale_grad_by_freq

    def name(self):
        return "EmbeddingBackward"

    def backward(self, g):
        from ._sparse_coo import rows_gradient

        if self.scale_grad_by_freq:
            raise RuntimeError("embedding_backward: scale_grad_by_freq not supported with sparse gradients")
        (idx,) = self.saved
        return (rows_gradient(idx, g.reshape(-1, self.shape[1]), self.shape, self.padding_idx),)


class _CTCBackward(Node):
    def __init__(self, log_probs, args, nll, log_alpha, zero_infinity):
        super().__init__((log_probs,), (log_probs.detach(), nll, log_alpha))
        self.args, self.zero_infinity = args, zero_infinity

    def backward(self, g):
        lp, nll, log_alpha = self.saved
        grad, log_beta = _empty(lp.shape, lp), _empty(log_alpha.shape, log_alpha)
        _C.ctc_loss_backward(grad._buf, log_beta._buf, g.contiguous()._buf, nll._buf, log_alpha._buf, lp._buf,
                             *self.args, self.zero_infinity)
        return (grad,)


def _lengths(lengths, n, what):
    """Per-sample lengths (a tensor, a sequence or, for one sample, an int) as a list of n ints."""
    if isinstance(lengths, Tensor):
        lengths = lengths.detach().cpu().numpy().reshape(-1).tolist()
    elif isinstance(lengths, numbers.Integral):
        lengths = [lengths]
    lengths = [int(v) for v in lengths]
    if len(lengths) != n:
        raise ArgumentError(f"ctc_loss: {what} must have {n} entries, one per sample, got {len(lengths)}")
    return lengths


def ctc_nll(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    """Each sample's CTC negative log-likelihood, (N,), for ``F.ctc_loss``:
    log_probs (T, N, C); targets (N, S) padded or 1-d, the samples' labels one
    after another. Computed in float32 for 16-bit log-probabilities."""
    if log_probs.dtype in _HALVES:
        return ctc_nll(log_probs.float(), targets, input_lengths, target_lengths, blank,
                       zero_infinity).to(dtype=log_probs.dtype)
    if log_probs.ndim != 3 or not log_probs.dtype.is_floating_point:
        raise ArgumentError(f"ctc_loss: log_probs must be a floating (T, N, C) tensor, got {log_probs.dtype} "
                            f"{tuple(log_probs.shape)}")
    if targets.dtype.is_floating_point:
        raise DtypeError(f"ctc_loss: targets must be integers, got {targets.dtype}")
    T, N, C = log_probs.shape
    ilen, tlen = _lengths(input_lengths, N, "input_lengths"), _lengths(target_lengths, N, "target_lengths")
    for n, (i, t) in enumerate(zip(ilen, tlen)):
        if not 0 <= i <= T:
            raise ArgumentError(f"ctc_loss: input length {i} of sample {n} is outside [0, {T}]")
        if t < 0 or (targets.ndim == 2 and t > targets.shape[1]):
            raise ArgumentError(f"ctc_loss: target length {t} of sample {n} does not fit the targets {targets.shape}")
    if targets.ndim == 2:
        if targets.shape[0] != N:
            raise ArgumentError(f"ctc_loss: padded targets must have {N} rows, got {targets.shape[0]}")
        offsets = [n * targets.shape[1] for n in range(N)]
    elif targets.ndim == 1:
        offsets = np.concatenate([[0], np.cumsum(tlen)[:-1]]).tolist() if N else []
        if builtins.sum(tlen) > targets.shape[0]:
            raise ArgumentError(f"ctc_loss: the target lengths add up to {builtins.sum(tlen)}, targets has "
                                f"{targets.shape[0]}")
    else:
        raise ArgumentError(f"ctc_loss: targets must be (N, S) or 1-d, got {tuple(targets.shape)}")
    device = log_probs._buf.device
    flat = targets.detach().reshape(-1).to(dtype=int64, device=log_probs.device).contiguous()
    if device >= 0 and flat.numel():  # the C op checks host labels itself
        # Only the labels within the target lengths, as the host op: the padding may hold anything.
        if targets.ndim == 2:
            used = np.arange(targets.shape[1]) < np.asarray(tlen, np.int64)[:, None]
        else:
            used = np.arange(targets.shape[0]) < builtins.sum(tlen)
        used = _host_tensor(used.reshape(-1), log_probs.device, bool_)
        labels = where(used, flat, 0)
        blanks = sum(logical_and(used, flat == int(blank)))
        low, high, n_blank = _values_of(amin(labels), amax(labels), blanks)
        if low < 0 or high >= C or n_blank:
            label = low if low < 0 else high if high >= C else int(blank)
            raise ArgumentError(f"ctc_loss: target label {label} is not a class in [0, {C}) other than the blank "
                             f"{int(blank)}")
    args = (flat._buf,) + tuple(_host_tensor(np.asarray(v, np.int64), log_probs.device)._buf
                                for v in (offsets, tlen, ilen)) + (int(blank),)
    lp = log_probs.detach().contiguous()
    nll = _empty((N,), lp)
    log_alpha = _empty((N, T, 2 * builtins.max(tlen, default=0) + 1), lp, float64)
    _C.ctc_loss(nll._buf, log_alpha._buf, lp._buf, *args)
    if _needs_grad(log_probs):
        _attach(nll, _CTCBackward(log_probs, args, nll.detach(), log_alpha, bool(zero_infinity)))
    if zero_infinity:
        nll = where(isinf(nll.detach()), 0.0, nll)
    return nll


class _LayerNormBackward(Node):
    double_backward = True

    def __init__(self, x, weight, bias, normalized_shape, rows, w, mean, rstd, eps):
        # x and weight themselves are for a create_graph pass, which needs them in the graph.
        super().__init__((x, weight, bias), (rows, w, x, weight))
        self.x_shape, self.w_shape, self.mean, self.rstd, self.eps = x.shape, normalized_shape, mean, rstd, eps

    def _recorded(self, g):
        """The gradients in recorded ops of x, the weight and g: with xhat = (x - mean) rstd and
        h = g w, dx = rstd (h - mean(h) - xhat mean(h xhat)), dw = sum(g xhat), db = sum(g)."""
        rows, _, x, weight = self.saved
        x, g = reshape(x, rows.shape), reshape(g, rows.shape)
        centred = sub(x, mean(x, -1, keepdim=True))
        rstd = rsqrt(add(mean(square(centred), -1, keepdim=True), self.eps))
        xhat = mul(centred, rstd)
        h = g if weight is None else mul(g, reshape(weight, (rows.shape[1],)))
        gx = mul(rstd, sub(sub(h, mean(h, -1, keepdim=True)), mul(xhat, mean(mul(h, xhat), -1, keepdim=True))))
        return (reshape(gx, self.x_shape), reshape(sum(mul(g, xhat), 0), self.w_shape),
                reshape(sum(g, 0), self.w_shape))

    def backward(self, g):
        if _mode.enabled:
            return self._recorded(g)
        rows, w = self.saved[:2]
        gx, gw, gb = _empty(rows.shape, rows), _empty(w.shape, w), _empty(w.shape, w)
        _C.layer_norm_backward(gx._buf, gw._buf, gb._buf, g.reshape(rows.shape)._buf, rows._buf, self.mean._buf,
                               self.rstd._buf, w._buf)
        return gx.reshape(self.x_shape), gw.reshape(self.w_shape), gb.reshape(self.w_shape)


@autocast_op("float32_cuda")
def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalises over the last ``len(normalized_shape)`` dims (mean 0, variance 1, then * weight + bias)."""
    normalized_shape = (normalized_shape,) if isinstance(normalized_shape, numbers.Integral) else \
        tuple(normalized_shape)
    k = len(normalized_shape)
    if k == 0 or tuple(input.shape[input.ndim - k:]) != normalized_shape:
        raise ArgumentError(f"layer_norm: normalized_shape {normalized_shape} is not the input's last dims "
                            f"{input.shape}")
    for p, name in ((weight, "weight"), (bias, "bias")):
        if p is not None and tuple(p.shape) != normalized_shape:
            raise ArgumentError(f"layer_norm: {name} has shape {p.shape}, expected {normalized_shape}")
    if input.dtype in _HALVES:
        return layer_norm(input.float(), normalized_shape, weight if weight is None else weight.float(),
                          bias if bias is None else bias.float(), eps).to(dtype=input.dtype)
    d = math.prod(normalized_shape)
    rows = input.reshape(-1, d) if input.numel() else input.reshape(0, d)
    from .tensor import full

    w = weight.reshape(d) if weight is not None else full((d,), 1.0, dtype=input.dtype, device=input.device)
    b = bias.reshape(d) if bias is not None else full((d,), 0.0, dtype=input.dtype, device=input.device)
    w, b = w.detach(), b.detach()
    y = _empty(rows.shape, rows)
    mean, rstd = _empty((rows.shape[0],), rows), _empty((rows.shape[0],), rows)
    _C.layer_norm(y._buf, mean._buf, rstd._buf, rows._buf, w._buf, b._buf, float(eps))
    y = y.reshape(input.shape)
    if _needs_grad(input, weight, bias):
        _attach(y, _LayerNormBackward(input, weight, bias, normalized_shape, rows.detach(), w, mean, rstd, float(eps)))
    return y


class _SoftmaxBackward(Node):
    double_backward = True

    def __init__(self, x, out, take_log):
        super().__init__((x,), (out.detach(),))
        self.take_log = take_log

    def name(self):
        return "LogSoftmaxBackward" if self.take_log else "SoftmaxBackward"

    def backward(self, g):
        (y,) = self.saved
        if _mode.enabled:  # along the last dim: y (g - sum(g y)), or for log_softmax g - exp(y) sum(g)
            y = _output(self, y)
            if self.take_log:
                return (sub(g, mul(exp(y), sum(g, -1, keepdim=True))),)
            return (mul(y, sub(g, sum(mul(g, y), -1, keepdim=True))),)
        gx = _empty(y.shape, y)
        _C.softmax_backward(gx._buf, g._buf, y._buf, self.take_log)
        return (gx,)


def _softmax(x, dim, take_log):
    if x.ndim == 0:
        _dim(x, dim)
        return _softmax(reshape(x, (1,)), 0, take_log).reshape(())
    dim = _dim(x, dim)
    if dim != x.ndim - 1:  # the op runs along the last dim: the others move there and back
        return _softmax(x.movedim(dim, -1), -1, take_log).movedim(-1, dim)
    if x.dtype in _HALVES:
        return _softmax(x.float(), dim, take_log).to(dtype=x.dtype)
    src = _as_float(x.detach())
    out = _empty(src.shape, src)
    _C.softmax(out._buf, src._buf, take_log)
    if _needs_grad(x):
        _attach(out, _SoftmaxBackward(x, out, take_log))
    return out


@autocast_op("float32_cuda")
def softmax(x, dim):
    """exp(x) / sum(exp(x)) along dim."""
    return _softmax(x, dim, False)


@autocast_op("float32_cuda")
def log_softmax(x, dim):
    """x - log(sum(exp(x))) along dim, computed stably."""
    return _softmax(x, dim, True)


_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


def _reduction_code(reduction):
    try:
        return _REDUCTIONS[reduction]
    except KeyError:
        raise ArgumentError(f"reduction must be 'none', 'mean' or 'sum', got {reduction!r}") from None


def _no_grad_weight(t, name, what):
    """A weight argument as a constant: like PyTorch, ddpc refuses one that requires grad."""
    if t is not None and _needs_grad(t):
        raise RuntimeError(f"{what} is not differentiable with respect to {name}: it can't require grad")
    return None if t is None else t.detach()


class _CrossEntropyBackward(Node):
    double_backward = True

    def __init__(self, input, target, rows, tgt, weight, args):
        """rows, tgt, weight: what the forward op took (args its other arguments)."""
        # The input itself is for a create_graph pass, which needs it in the graph.
        super().__init__((input, target), (rows, tgt, weight, input))
        self.args = args

    def name(self):
        return "NllLossBackward" if self.args[3] else "CrossEntropyLossBackward"

    def _raw(self, g, log_probs):
        rows, tgt, weight, _ = self.saved
        gx = _empty(rows.shape, rows)
        _C.cross_entropy_backward(gx._buf, g._buf, rows._buf, tgt._buf, None if weight is None else weight._buf,
                                  *self.args[:3], log_probs)
        return gx

    def _recorded(self, g):
        """The input's gradient in recorded ops. The loss is -sum(q * log_softmax(x)) (or -sum(q * x) for
        log-probabilities) with q fixed by the targets, weights, smoothing and reduction, so it is
        g (softmax(x) sum(q) - q); -q is the gradient with respect to log-probabilities at g = 1."""
        if self.edges[1] is not None:
            raise NotImplementedError("create_graph=True: ddpc has no double backward for cross_entropy with "
                                      "class-probability targets that require grad")
        ones = _empty(g.shape, g)
        _C.fill(ones._buf, 1.0)
        q = self._raw(ones, True)  # -q
        scale = reshape(g, (-1, 1)) if g.ndim else g
        if self.args[3]:
            return mul(q, scale)
        x = self.saved[3]
        return mul(add(mul(softmax(x, -1), neg(sum(q, -1, keepdim=True))), q), scale)

    def backward(self, g):
        rows, tgt, weight, _ = self.saved
        _, eps, red, log_probs = self.args
        gx = gt = None
        if self.edges[0] is not None:
            gx = self._recorded(g) if _mode.enabled else self._raw(g, log_probs)
        if self.edges[1] is not None:  # class probabilities: -(1 - eps) * weight * log-probability
            gt = (rows if log_probs else _softmax(rows, -1, True)) * -(1 - eps)
            if weight is not None:
                gt = gt * weight
            gt = gt * (g.reshape(-1, 1) if red == 0 else g / rows.shape[0] if red == 1 else g)
        return gx, gt


def _class_rows(t, n, c):
    """An input or probability target with the classes along dim 1 (or 0 when 1-d) as n rows of c."""
    if t.ndim == 2:
        return t
    return reshape(t.movedim(1, -1) if t.ndim > 2 else t, (n, c))


@autocast_op("float32")
def cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                  log_probs=False):
    """Softmax cross entropy of logits with the classes along dim 1 ([N, C],
    or [C], or [N, C, d1, ...]) against int64 (or uint8, as PyTorch takes)
    class indices ([N], [], or [N, d1, ...]) or against class probabilities
    shaped like the logits; the negative log likelihood (nll_loss) when
    ``log_probs`` says the input holds log-probabilities. ``weight`` [C] weighs
    the classes; the mean divides by the summed weights of the targets'
    classes (by the number of rows for class probabilities), as in PyTorch. A class index out of range (and not
    ``ignore_index``) raises IndexOutOfRangeError; on a GPU its row's loss is
    NaN and the error is raised when the host next waits for the device (see
    gather)."""
    what = "nll_loss" if log_probs else "cross_entropy"
    red = _reduction_code(reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ArgumentError(f"label_smoothing must be between 0.0 and 1.0, got {label_smoothing}")
    if not isinstance(target, Tensor):
        raise TypeError(f"{what}: target must be a ddpc tensor of class indices or class probabilities")
    weight = _no_grad_weight(weight, "weight", what)
    if input.dtype in _HALVES:
        return cross_entropy(input.float(), target.float() if target.dtype.is_floating_point else target,
                             None if weight is None else weight.float(), ignore_index, reduction, label_smoothing,
                             log_probs).to(dtype=input.dtype)
    if input.ndim == 0:
        raise ArgumentError(f"{what}: the input needs a dim of classes, got a 0-d tensor")
    c = input.shape[1 if input.ndim > 1 else 0]
    out_shape = input.shape[:1] + input.shape[2:] if input.ndim > 1 else ()
    n = math.prod(out_shape)
    if weight is not None and weight.shape != (c,):
        raise ArgumentError(f"{what}: weight must have one element per class ({c}), got shape {weight.shape}")
    rows = _class_rows(input, n, c)
    x = _as_float(rows.detach())
    if target.dtype.is_floating_point:
        if log_probs or target.shape == out_shape:  # float class indices: PyTorch's words
            raise DtypeError(f"{what}: expected target dtype to be Long or Byte, but got {target.dtype}")
        if target.shape != input.shape:
            raise ArgumentError(f"{what}: class probabilities must be shaped like the input {input.shape}, got "
                                f"{target.shape}")
        target = _class_rows(target, n, c)
        tgt = target.detach() if target.dtype is x.dtype else target.detach().to(dtype=x.dtype)
    else:
        if target.dtype not in (int64, uint8):
            raise DtypeError(f"{what}: expected target dtype to be Long or Byte, but got {target.dtype}")
        if target.shape != out_shape:
            raise ArgumentError(f"{what}: class indices must have shape {out_shape} for an input of shape "
                                f"{input.shape}, got {target.shape}")
        tgt = (target if target.dtype is int64 else target.to(dtype=int64)).reshape(n).detach()
        target = None
    for t in (tgt, weight):
        if t is not None and t._buf.device != x._buf.device:
            raise ArgumentError(f"{what}: input on {input.device}, target or weight on {t.device}")
    if weight is not None and weight.dtype is not x.dtype:
        weight = weight.to(dtype=x.dtype)
    args = (int(ignore_index), float(label_smoothing), red, bool(log_probs))
    out = _empty((n,) if red == 0 else (), x)
    _C.cross_entropy(out._buf, x._buf, tgt._buf, None if weight is None else weight._buf, *args)
    if _needs_grad(rows, target):
        _attach(out, _CrossEntropyBackward(rows, target, x, tgt, weight, args))
    return reshape(out, out_shape) if red == 0 and out.shape != out_shape else out


# The loss codes of kernels/pointwise_loss.h.
_MSE, _L1, _SMOOTH_L1, _HUBER, _BCE, _BCE_LOGITS, _KL_DIV, _KL_DIV_LOG_TARGET = range(8)
_LOSS_NAMES = ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy",
               "binary_cross_entropy_with_logits", "kl_div", "kl_div")


class _PointwiseLossBackward(Node):
    _NAMES = ("MseLossBackward", "L1LossBackward", "SmoothL1LossBackward", "HuberLossBackward",
              "BinaryCrossEntropyBackward", "BinaryCrossEntropyWithLogitsBackward", "KlDivBackward", "KlDivBackward")
    double_backward = True

    def __init__(self, input, target, kind, x, y, pos_weight, p, red):
        """x, y, pos_weight: what the forward op took."""
        if kind == _L1:  # the gradient is sign(x - y): only that difference is saved, as PyTorch's abs saves it
            saved = (sub(x, y),)
        else:  # input and target themselves are for a create_graph pass, which needs them in the graph.
            saved = (x, y, pos_weight, input, target)
        super().__init__((input, target), saved)
        self.kind, self.p, self.red, self.dtypes = kind, p, red, (input.dtype, target.dtype)

    def name(self):
        return self._NAMES[self.kind]

    def backward(self, g):
        grads = []
        for wrt_target, (edge, dtype) in enumerate(zip(self.edges, self.dtypes)):
            if edge is None:
                grads.append(None)
                continue
            if self.kind == _L1:  # in recorded ops, for a create_graph pass too (sign's derivative is 0)
                (d,) = self.saved
                slope = sign(d)
                gi = mul(neg(slope) if wrt_target else slope, div(g, d.numel()) if self.red == 1 else g)
            elif _mode.enabled:  # create_graph: in recorded ops
                gi = self._recorded(g, wrt_target)
            else:
                x, y, pw = self.saved[:3]
                gi = _empty(x.shape, x)
                _C.loss_backward(self.kind, wrt_target, gi._buf, g._buf, x._buf, y._buf,
                                 None if pw is None else pw._buf, self.p, self.red)
            grads.append(gi if gi.dtype is dtype else gi.to(dtype=dtype))
        return grads

    def _recorded(self, g, wrt_target):
        """The gradient with respect to the input (or the target) in recorded
        ops of both and g: the loss's derivative (kernels/pointwise_loss.h's
        ddpc_loss_grad) times g, or times g / n for a mean."""
        x, y, pw, input, target = self.saved
        x, y = (input if input.requires_grad else x), (target if target.requires_grad else y)
        d, kind, p = sub(x, y), self.kind, self.p
        if kind == _MSE:
            dx, dy = mul(d, 2.0), mul(d, -2.0)
        elif kind in (_SMOOTH_L1, _HUBER):  # piecewise: constant slopes, linear inside |d| <= p
            dx = sign(d.detach())
            if kind == _HUBER:
                dx = mul(dx, p)
            if p > 0:
                dx = where(_between(d, -p, p), div(d, p) if kind == _SMOOTH_L1 else d, dx)
            dy = neg(dx)
        elif kind == _BCE:
            dx = div(d, clamp_min(mul(x, rsub(x, 1.0)), 1e-12))
            dy = sub(log1p(neg(x)), log(x))
        elif kind == _BCE_LOGITS and pw is None:
            dx, dy = sub(sigmoid(x), y), sub(softplus(neg(x)), softplus(x))
        elif kind == _BCE_LOGITS:
            dx = sub(mul(add(mul(y, sub(pw, 1.0)), 1.0), sigmoid(x)), mul(y, pw))
            dy = sub(mul(softplus(neg(x)), pw), softplus(x))
        elif kind == _KL_DIV:
            dx, dy = neg(y), sub(add(log(y), 1.0), x)
        else:  # KL divergence with a log target
            dx, dy = neg(exp(y)), mul(exp(y), add(neg(d), 1.0))
        scale = div(g, x.numel()) if self.red == 1 else g
        return mul(dy if wrt_target else dx, scale)


@autocast_op("float32")
def pointwise_loss(kind, input, target, reduction="mean", p=0.0, weight=None, pos_weight=None):
    """The elementwise loss ``kind`` (kernels/pointwise_loss.h; p is
    smooth_l1's beta and huber's delta) of input against target, both
    broadcast to one shape, then reduced. ``weight`` multiplies each element's
    loss before the reduction; ``pos_weight`` weighs the positive term of
    binary_cross_entropy_with_logits. Neither takes a gradient, as in PyTorch."""
    what = _LOSS_NAMES[kind]
    red = _reduction_code(reduction)
    if not isinstance(input, Tensor) or not isinstance(target, Tensor):
        raise TypeError(f"{what}: input and target must be ddpc tensors")
    weight, pos_weight = _no_grad_weight(weight, "weight", what), _no_grad_weight(pos_weight, "pos_weight", what)
    promoted = result_type(input, target)
    if promoted.is_floating_point and promoted is not input.dtype:  # as PyTorch: float16 and float32 give float32
        input = input.to(dtype=promoted)
    if input.dtype in _HALVES:
        return pointwise_loss(kind, input.float(), target.float(), reduction, p,
                              *(None if w is None else w.float() for w in (weight, pos_weight))).to(dtype=input.dtype)
    if weight is not None:
        loss = pointwise_loss(kind, input, target, "none", p, None, pos_weight)
        loss = mul(loss, expand(weight if weight.dtype is loss.dtype else weight.to(dtype=loss.dtype), loss.shape))
        return loss if red == 0 else sum(loss) if red == 2 else mean(loss)
    if input.shape != target.shape:
        shape = _broadcast_shape(input.shape, target.shape)
        input, target = expand(input, shape), expand(target, shape)
    x = _as_float(input.detach())
    y = target.detach() if target.dtype is x.dtype else target.detach().to(dtype=x.dtype)
    if pos_weight is not None:
        pos_weight = expand(pos_weight if pos_weight.dtype is x.dtype else pos_weight.to(dtype=x.dtype), x.shape)
    pw = None if pos_weight is None else pos_weight._buf
    if red and x._buf.device >= 0:
        # On a GPU the fused reduction runs in one block: the elementwise losses,
        # then the device-wide sum, use the whole GPU.
        each = _empty(x.shape, x)
        _C.loss(kind, each._buf, x._buf, y._buf, pw, float(p), 0)
        out = _empty((), x)
        _C.sum(out._buf, each._buf)
        if red == 1:
            _C.scalar(_DIV, out._buf, out._buf, float(x.numel()))
    else:
        out = _empty(x.shape if red == 0 else (), x)
        _C.loss(kind, out._buf, x._buf, y._buf, pw, float(p), red)
    if _needs_grad(input, target):
        _attach(out, _PointwiseLossBackward(input, target, kind, x, y, pos_weight, float(p), red))
    return out


from . import _complex  # noqa: E402  (built on Node above)
from . import _function as function  # noqa: E402  (built on Node above)
from . import _graph as graph  # noqa: E402  (built on Node above)
from . import _forward_ad as forward_ad  # noqa: E402  (built on grad above)
from ._function import Function, FunctionCtx, once_differentiable  # noqa: E402,F401
from . import _autograd_functional as functional  # noqa: E402  (built on grad above)
from ._gradcheck import GradcheckError, gradcheck, gradgradcheck  # noqa: E402,F401  (built on grad above)

# import ddpc.autograd.functional, .function and .profiler work as in PyTorch
# (custom ops import once_differentiable from .function; scripts take record_function from .profiler).
sys.modules[__name__ + ".functional"] = functional
sys.modules[__name__ + ".function"] = function
sys.modules[__name__ + ".graph"] = graph
sys.modules[__name__ + ".forward_ad"] = forward_ad
sys.modules[__name__ + ".profiler"] = profiler

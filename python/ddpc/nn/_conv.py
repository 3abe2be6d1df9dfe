"""Convolution and pooling over the last one to three dims, as
torch.nn.functional's conv1d/2d/3d, conv_transpose1d/2d/3d, fold, unfold,
max_pool1d/2d/3d, avg_pool1d/2d/3d, adaptive_avg_pool1d/2d/3d and
adaptive_max_pool1d/2d/3d, with their gradients, and the padding of torch's
F.pad that the convolutions' padding modes share.
A transposed convolution is a convolution's input gradient (and fold and
unfold col2im and im2col), so both are built from the same steps.

PyTorch's geometry rules live here, checked in one place for each kind
(``conv_geometry``, ``pool_geometry``): output sizes, 'valid' and 'same'
padding, ceil_mode's rule that the last window starts inside the input or its
left padding, and what is refused (ValueError). The work is _C ops over
volumes of 1 to 3 spatial dims (one n-d implementation in C: a 1-d or 2-d
op is the 3-d one with leading sizes of 1). A convolution takes the batch
in steps of a few samples (see _COLUMN_BYTES): im2col of the step into a
[C*prod(kernel), n*prod(out)] matrix, one GEMM per group into
[O, n*prod(out)], and a copy that swaps the two leading dims into
(n, O, *out) (none for a step of one
sample, whose GEMM writes the output in place), then the bias while the
step is still in cache. A pointwise convolution (1x1, stride 1, no padding)
skips im2col: its columns are the image with the leading dims swapped, a
view for one sample. The backward pass walks the same steps: one GEMM per
group for each gradient, and col2im. It takes the columns again instead of
keeping them from the forward pass: one more im2col, against holding KH*KW
times the input in memory for every layer. The host temporaries are kept
per thread between calls (see _Scratch).
"""

import math
import numbers
import threading

import numpy as np

from .. import _C
from .. import autograd as _ag
from .._C import ArgumentError, DtypeError
from ..backends import alert_not_deterministic
from ..amp import autocast_op
from ..tensor import _ADD, Tensor, arange, full, int64, tensor

PADDING_MODES = ("zeros", "reflect", "replicate", "circular")
PAD_MODES = ("constant", "reflect", "replicate", "circular")


# ---- geometry ------------------------------------------------------------------------

def as_tuple(value, n, name):
    """``value`` as n ints: an int repeated, or a sequence of n ints."""
    if isinstance(value, numbers.Integral):
        return (int(value),) * n
    try:
        t = tuple(value)
    except TypeError:
        t = None
    if t is None or len(t) != n or not all(isinstance(v, numbers.Integral) for v in t):
        raise ArgumentError(f"{name} must be an int or a tuple of {n} ints, got {value!r}")
    return tuple(int(v) for v in t)


def padding_pairs(padding, kernel, stride, dilation):
    """(before, after) per dim for an int or tuple ``padding``, 'valid' or
    'same' (the odd one left over goes after, as in PyTorch)."""
    n = len(kernel)
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * n
        if padding != "same":
            raise ArgumentError(f"Invalid padding string {padding!r}, should be one of ('valid', 'same')")
        if any(s != 1 for s in stride):
            raise ArgumentError("padding='same' is not supported for strided convolutions")
        totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
        return tuple((t // 2, t - t // 2) for t in totals)
    pad = as_tuple(padding, n, "padding")
    if any(p < 0 for p in pad):
        raise ArgumentError(f"negative padding is not supported, got padding={padding}")
    return tuple((p, p) for p in pad)


def _check_positive(values, name, what):
    if any(v <= 0 for v in values):
        raise ArgumentError(f"{what}: {name} must be greater than zero, got {name}={values}")


def _check_ranks(name, nd, x_shape, w_shape, weight_dims):
    if len(x_shape) not in (nd + 1, nd + 2):
        raise ArgumentError(f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to {name}, but got input of "
                            f"size: {list(x_shape)}")
    if len(w_shape) != nd + 2:
        raise ArgumentError(f"{name}: the weight must be {nd + 2}-d ({weight_dims}, *kernel_size), got shape "
                            f"{tuple(w_shape)}")


def conv_geometry(name, nd, x_shape, w_shape, stride, padding, dilation, groups):
    """(stride, padding before each dim, dilation, output size) of a
    convolution of an input of ``x_shape`` by a weight of ``w_shape``."""
    _check_ranks(name, nd, x_shape, w_shape, "out_channels, in_channels / groups")
    if not isinstance(groups, numbers.Integral) or groups <= 0:
        raise ArgumentError(f"{name}: groups must be a positive integer, got {groups!r}")
    channels, (out_channels, group_channels), kernel = x_shape[-nd - 1], w_shape[:2], tuple(w_shape[2:])
    if out_channels % groups:
        raise ArgumentError(f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, but "
                            f"got weight of size {list(w_shape)} instead")
    if channels != group_channels * groups:
        raise ArgumentError(f"Given groups={groups}, weight of size {list(w_shape)}, expected input{list(x_shape)} to "
                            f"have {group_channels * groups} channels, but got {channels} channels instead")
    _check_positive(kernel, "kernel_size", name)
    stride, dilation = as_tuple(stride, nd, "stride"), as_tuple(dilation, nd, "dilation")
    _check_positive(stride, "stride", name)
    _check_positive(dilation, "dilation", name)
    pads = padding_pairs(padding, kernel, stride, dilation)
    padded = [i + b + a for i, (b, a) in zip(x_shape[-nd:], pads)]
    spans = [d * (k - 1) + 1 for k, d in zip(kernel, dilation)]
    if any(p < s for p, s in zip(padded, spans)):
        raise ArgumentError(f"{name}: calculated padded input size per channel: ({' x '.join(map(str, padded))}). "
                            f"Kernel size: ({' x '.join(map(str, spans))}). Kernel size can't be greater than actual "
                            "input size")
    out = tuple((p - s) // st + 1 for p, s, st in zip(padded, spans, stride))
    return stride, tuple(b for b, _ in pads), dilation, out


def _check_planes(name, nd, input, integers=()):
    """An (N, C, *nd) or (C, *nd) input with non-empty channel and spatial
    dims, of a floating-point dtype or one of ``integers``."""
    if not isinstance(input, Tensor):
        raise TypeError(f"{name}: the input must be a ddpc tensor, got {type(input).__name__}")
    if input.ndim not in (nd + 1, nd + 2) or 0 in input.shape[-nd - 1:]:
        raise ArgumentError(f"{name}: expected a {nd + 1}-d or {nd + 2}-d (batched) input with non-empty channel and "
                            f"spatial dims, got shape {tuple(input.shape)}")
    if not input.dtype.is_floating_point and input.dtype.name not in integers:
        kinds = " or ".join(("floating-point",) + integers)
        raise DtypeError(f"{name}: needs a {kinds} input, got {input.dtype}")


def pool_geometry(name, nd, x_shape, kernel_size, stride, padding, dilation, ceil_mode):
    """(kernel, stride, padding, dilation, output size) of a max or average
    pool, with PyTorch's output size: the last window starts inside the input
    or its left padding, also with ceil_mode."""
    kernel = as_tuple(kernel_size, nd, "kernel_size")
    stride = kernel if stride is None or (not isinstance(stride, numbers.Integral) and len(stride) == 0) \
        else as_tuple(stride, nd, "stride")
    pad, dilation = as_tuple(padding, nd, "padding"), as_tuple(dilation, nd, "dilation")
    for values, what in ((kernel, "kernel_size"), (stride, "stride"), (dilation, "dilation")):
        _check_positive(values, what, name)
    if any(p < 0 or p > k // 2 for p, k in zip(pad, kernel)):
        raise ArgumentError(f"{name}: pad should be at most half of kernel size and non-negative, but got "
                            f"padding={pad} and kernel_size={kernel}")
    out = []
    for i, k, s, p, d in zip(x_shape[-nd:], kernel, stride, pad, dilation):
        o = (i + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
        if ceil_mode and (o - 1) * s >= i + p:
            o -= 1
        out.append(o)
    if any(o < 1 for o in out):
        raise ArgumentError(f"{name}: given input size: ({'x'.join(map(str, x_shape[-nd - 1:]))}). Calculated output "
                            f"size: ({'x'.join(map(str, [x_shape[-nd - 1]] + out))}). Output size is too small")
    return kernel, stride, pad, dilation, tuple(out)


# ---- convolution ---------------------------------------------------------------------

# The samples of one step are as many as keep its column matrix, and its
# output in GEMM layout, within this many bytes (and at least one): on the
# host the columns then stay in a core's cache between im2col and the GEMMs
# that read them, which took less CPU time than steps of 8 to 80 MiB with
# their fewer, larger GEMMs; a GPU takes larger steps, for larger GEMMs.
_COLUMN_BYTES = {"cpu": 2 << 20, "cuda": 256 << 20}


def _steps(x, taps, o, out):
    """Ranges [n0, n1) of the batch, each sample's columns being ``taps`` rows
    and its output ``o`` rows of ``out`` positions; one empty range for an
    empty batch, so that the gradient GEMMs still write their (zero) result."""
    n = x.shape[0]
    per_sample = max(taps, o) * math.prod(out) * x.element_size()
    step = max(1, _COLUMN_BYTES["cpu" if x._buf.device < 0 else "cuda"] // max(per_sample, 1))
    return [(n0, min(n, n0 + step)) for n0 in range(0, max(n, 1), step)]


class _Scratch(threading.local):
    """Each thread's host buffers for a convolution's temporaries, kept
    between calls: a fresh allocation of tens of megabytes comes from mmap
    and faults in every page again (a Conv2d 64->64 k3 on 128x128 images,
    whose one sample's columns take 36 MiB, took 1.6x the CPU time). They
    hold the largest step seen: 2 MiB each, or one sample's columns and
    output where those are larger."""

    def __init__(self):
        self.buffers = {}


_scratch = _Scratch()


def _temporary(slot, shape, dtype, device):
    """A buffer of ``shape`` for one of a convolution's temporaries (``slot``
    names which, so that two live at once never share memory): this thread's
    kept one on the host, a new one on a GPU (whose allocator caches)."""
    if device >= 0:
        return _C.Buffer(shape, dtype, device)
    key, numel = (slot, dtype), math.prod(shape)
    buf = _scratch.buffers.get(key)
    if buf is None or buf.numel < numel:
        buf = _scratch.buffers[key] = _C.Buffer((numel,), dtype, device)
    return buf.view(0, tuple(shape))


def _samples(t, n0, n1):
    """Samples [n0, n1) of t (N, ...) as a buffer of their own shape."""
    inner = math.prod(t.shape[1:])
    return t._buf.view(n0 * inner, (n1 - n0,) + tuple(t.shape[1:]))


def _matrix(buf, rows):
    return buf.view(0, (rows, buf.numel // rows if rows else 0))


def _group_gemm(out, a, b, groups, trans_a=False, trans_b=False, accumulate=False):
    """out (+)= op(a) @ op(b) block by block: each operand a 2-d buffer whose
    rows split into ``groups`` contiguous blocks, one per group."""
    blocks = []
    for m in (out, a, b):
        rows, cols = m.shape[0] // groups, m.shape[1]
        blocks.append([m.view(g * rows * cols, (rows, cols)) for g in range(groups)])
    for o, x, y in zip(*blocks):
        _C.gemm(o, x, y, trans_a, trans_b, None, accumulate)


def _swap_leading(dst, src):
    """dst (B, A, ...) = src (A, B, ...) with its two leading dims swapped."""
    (a, b), inner = src.shape[:2], math.prod(src.shape[2:])
    if src.numel:
        _C.strided_copy(dst, 0, (a * inner, inner, 1), src, 0, (inner, b * inner, 1), (b, a, inner))


def _channels_first(src, slot):
    """The buffer src (n, O, ...) as a buffer (O, n, ...): a view for one
    sample ((1, O) and (O, 1) lay out alike), else a copy into the
    temporary ``slot``."""
    if src.shape[0] == 1:
        return src.view(0, (src.shape[1], 1) + tuple(src.shape[2:]))
    out = _temporary(slot, (src.shape[1], src.shape[0]) + tuple(src.shape[2:]), src.dtype, src.device)
    _swap_leading(out, src)
    return out


def _pointwise(kernel, geometry, size, out):
    """Whether each output position reads one input position, the same one:
    then the columns are the image with its two leading dims swapped. The
    image's spatial ``size`` must equal ``out``: a transposed convolution's
    output_padding (possible at stride 1 with dilation) makes it larger."""
    return (all(k == 1 for k in kernel) and all(s == 1 for s in geometry[0]) and not any(geometry[1])
            and tuple(size) == tuple(out))


def _columns(x, kernel, out, geometry):
    """im2col of the image buffer x (N, C, *in): (C, *kernel, N, *out), in
    the temporary that the input gradient's columns reuse once these are read."""
    if _pointwise(kernel, geometry, x.shape[2:], out):
        return _channels_first(x, "columns").view(0, (x.shape[1],) + tuple(kernel) + (x.shape[0],) + tuple(out))
    col = _temporary("columns", (x.shape[1],) + tuple(kernel) + (x.shape[0],) + tuple(out), x.dtype, x.device)
    _C.im2col(col, x, *geometry)
    return col


def _weight_grad_step(gw, g_t, x_n, kernel, out, geometry, groups, accumulate):
    """gw (O, C / groups, *kernel) (+)= g_t [O, n*out] @ columns(x_n)^T: one
    step's share of a convolution's weight gradient."""
    o, taps = g_t.shape[0], x_n.shape[1] * math.prod(kernel)
    col = _columns(x_n, kernel, out, geometry)
    _group_gemm(_matrix(gw, o), _matrix(g_t, o), _matrix(col, taps), groups, trans_b=True, accumulate=accumulate)


def _input_grad_step(gx_n, g_t, w, geometry, groups):
    """gx_n (n, C, *in) = col2im(W^T @ g_t [O, n*out]): one step of a
    convolution's input gradient, which is also the transposed convolution."""
    (n, c), o, kernel, out = gx_n.shape[:2], w.shape[0], tuple(w.shape[2:]), tuple(g_t.shape[2:])
    taps, pointwise = c * math.prod(kernel), _pointwise(kernel, geometry, gx_n.shape[2:], out)
    # A pointwise convolution's col2im is the swap back, none for one sample (see _channels_first)
    pointwise_one = pointwise and n == 1
    gcol = gx_n if pointwise_one else _temporary("columns", (c,) + kernel + (n,) + out, gx_n.dtype, gx_n.device)
    _group_gemm(_matrix(gcol, taps), _matrix(w, o), _matrix(g_t, o), groups, trans_a=True)
    if pointwise and not pointwise_one:
        _swap_leading(gx_n, gcol.view(0, (c, n) + out))
    elif not pointwise:
        _C.col2im(gx_n, gcol, *geometry)


def _bias_grad(g, edge):
    """g (N, O, ...) summed over the batch (long contiguous rows, the fast way), then over the positions."""
    o, positions = g.shape[1], math.prod(g.shape[2:])
    over_batch = _ag._empty((o, positions), g)
    _C.sum_dim(over_batch._buf, g._buf.view(0, (g.shape[0], o, positions)), 0)
    gb = _ag._grad_out(edge, (o,), g)
    _C.sum_dim(gb._buf, over_batch._buf, 1)
    return gb


def _weight_grad(g, x, kernel, geometry, groups, into=None):
    """The weight gradient (O, C / groups, *kernel) of the convolution of x
    (N, C, *in) whose output (N, O, *out) has the gradient g, into ``into``
    when given; recorded when g or x requires grad (a create_graph pass)."""
    o, out = g.shape[1], tuple(g.shape[2:])
    gw = into if into is not None else _ag._empty((o, x.shape[1] // groups) + tuple(kernel), g)
    for n0, n1 in _steps(x, x.shape[1] * math.prod(kernel), o, out):
        g_t = _channels_first(_samples(g, n0, n1), "out")
        _weight_grad_step(gw._buf, g_t, _samples(x, n0, n1), tuple(kernel), out, geometry, groups, n0 > 0)
    if _ag._needs_grad(g, x):
        _ag._attach(gw, _WeightGradBackward(g, x, geometry, groups))
    return gw


class _WeightGradBackward(_ag.Node):
    """The gradient of _weight_grad, bilinear in (g, x): for an incoming U
    shaped like the weight, g's is the convolution of x by U and x's the
    transposed convolution of g by U."""

    double_backward = True

    def __init__(self, g, x, geometry, groups):
        super().__init__((g, x), (g, x))
        self.geometry, self.groups = geometry, groups

    def backward(self, u):
        g, x = self.saved
        return (_conv_planes(x, u, None, self.geometry, tuple(g.shape[2:]), self.groups),
                _transposed_planes(g, u, None, self.geometry, tuple(x.shape[2:]), self.groups))


def _bias_grad_recorded(g):
    return _ag.sum(g, (0,) + tuple(range(2, g.ndim)))


class _ConvBackward(_ag.Node):
    double_backward = True

    def __init__(self, input, weight, bias, x, w, geometry, groups):
        # input and weight themselves are for a create_graph pass, which needs them in the graph.
        super().__init__((input, weight, bias), (x, w, input, weight))
        self.geometry, self.groups = geometry, groups

    def name(self):
        return "ConvolutionBackward"

    def backward(self, g):
        x, w, input, weight = self.saved
        (c, o), kernel, out = (x.shape[1], w.shape[0]), w.shape[2:], tuple(g.shape[2:])
        need_x, need_w, need_b = (e is not None for e in self.edges)
        if _ag._mode.enabled:  # create_graph: the transposed convolution of g, and the recorded weight gradient
            return (_transposed_planes(g, weight, None, self.geometry, tuple(x.shape[2:]), self.groups)
                    if need_x else None,
                    _weight_grad(g, input, kernel, self.geometry, self.groups) if need_w else None,
                    _bias_grad_recorded(g) if need_b else None)
        gx = _ag._empty(x.shape, g) if need_x else None
        gw = _ag._grad_out(self.edges[1], w.shape, g) if need_w else None
        for n0, n1 in _steps(x, c * math.prod(kernel), o, out):
            g_t = _channels_first(_samples(g, n0, n1), "out")
            if need_w:
                _weight_grad_step(gw._buf, g_t, _samples(x, n0, n1), kernel, out, self.geometry, self.groups, n0 > 0)
            if need_x:
                _input_grad_step(_samples(gx, n0, n1), g_t, w._buf, self.geometry, self.groups)
        return gx, gw, _bias_grad(g, self.edges[2]) if need_b else None


def _conv_planes(input, weight, bias, geometry, out, groups):
    """The convolution of batched ``input`` (N, C, *in) by ``weight`` (O, C / groups, *kernel)."""
    x, w = input.detach(), weight.detach()
    (n, c), o, kernel = x.shape[:2], w.shape[0], w.shape[2:]
    taps = c * math.prod(kernel)
    y = _ag._empty((n, o) + tuple(out), x)
    for n0, n1 in _steps(x, taps, o, out):
        col = _columns(_samples(x, n0, n1), kernel, out, geometry)
        one = n1 - n0 == 1  # then the GEMM writes into y itself (see _channels_first)
        y_t = _samples(y, n0, n1) if one else _temporary("out", (o, n1 - n0) + tuple(out), x.dtype.name, x._buf.device)
        _group_gemm(_matrix(y_t, o), _matrix(w._buf, o), _matrix(col, taps), groups)
        if not one:
            _swap_leading(_samples(y, n0, n1), y_t)
        if bias is not None:  # while the step's output is still in cache, in rows of whole planes
            y_n = _samples(y, n0, n1).view(0, (n1 - n0, o, math.prod(out)))
            _C.binary_broadcast(_ADD, y_n, y_n, bias.detach()._buf.view(0, (o, 1)))
    if _ag._needs_grad(input, weight, bias):
        _ag._attach(y, _ConvBackward(input, weight, bias, x, w, geometry, groups))
    return y


def _check_conv_operands(name, input, weight, bias, out_channels):
    for t, what in ((input, "input"), (weight, "weight"), (bias, "bias")):
        if not (isinstance(t, Tensor) or (what == "bias" and t is None)):
            raise TypeError(f"{name}: the {what} must be a ddpc tensor, got {type(t).__name__}")
    if not input.dtype.is_floating_point or input.dtype is not weight.dtype or \
            (bias is not None and bias.dtype is not weight.dtype):
        raise DtypeError(f"{name}: input, weight and bias must share one floating-point dtype, got {input.dtype}, "
                         f"{weight.dtype} and {None if bias is None else bias.dtype}")
    if input._buf.device != weight._buf.device or (bias is not None and bias._buf.device != weight._buf.device):
        raise ArgumentError(f"{name}: input on {input.device}, weight on {weight.device}"
                            + ("" if bias is None else f", bias on {bias.device}"))
    if bias is not None and tuple(bias.shape) != (out_channels,):
        raise ArgumentError(f"{name}: the bias must have shape ({out_channels},), got {tuple(bias.shape)}")


@autocast_op("lower")
def convolution(name, nd, input, weight, bias, stride, padding, dilation, groups):
    """conv1d, conv2d or conv3d (nd = 1, 2, 3), batched or not."""
    _check_conv_operands(name, input, weight, bias, weight.shape[0])
    stride, pad, dilation, out = conv_geometry(name, nd, input.shape, weight.shape, stride, padding, dilation,
                                               groups)
    if input.dtype in _ag._HALVES:
        return convolution(name, nd, input.float(), weight.float(), None if bias is None else bias.float(), stride,
                           padding, dilation, groups).to(dtype=input.dtype)
    x = input if input.ndim == nd + 2 else input.unsqueeze(0)
    y = _conv_planes(x, weight, bias, (stride, pad, dilation), out, groups)
    return y if input.ndim == nd + 2 else y.reshape(y.shape[1:])


# ---- transposed convolution, fold and unfold ------------------------------------------

def transposed_geometry(name, nd, x_shape, w_shape, stride, padding, output_padding, dilation, groups):
    """(stride, padding, dilation, output size) of a transposed convolution of
    ``x_shape`` by a weight of ``w_shape`` (in_channels, out_channels / groups, *kernel)."""
    _check_ranks(name, nd, x_shape, w_shape, "in_channels, out_channels / groups")
    if not isinstance(groups, numbers.Integral) or groups <= 0 or w_shape[0] % groups:
        raise ArgumentError(f"{name}: groups must be a positive integer dividing the weight's {w_shape[0]} input "
                            f"channels, got {groups!r}")
    if x_shape[-nd - 1] != w_shape[0]:
        raise ArgumentError(f"{name}: the input has {x_shape[-nd - 1]} channels, the weight expects {w_shape[0]}")
    if isinstance(padding, str):
        raise ArgumentError(f"{name}: padding must be an int or a tuple of ints (PyTorch's transposed convolutions "
                            f"take no '{padding}')")
    kernel = tuple(w_shape[2:])
    stride, dilation = as_tuple(stride, nd, "stride"), as_tuple(dilation, nd, "dilation")
    padding, output_padding = as_tuple(padding, nd, "padding"), as_tuple(output_padding, nd, "output_padding")
    for values, what in ((kernel, "kernel_size"), (stride, "stride"), (dilation, "dilation")):
        _check_positive(values, what, name)
    if any(p < 0 for p in padding + output_padding):
        raise ArgumentError(f"{name}: negative padding {padding} or output_padding {output_padding}")
    if any(op >= max(s, d) for op, s, d in zip(output_padding, stride, dilation)):
        raise ArgumentError(f"{name}: output padding must be smaller than either stride or dilation, got "
                            f"output_padding={output_padding}, stride={stride}, dilation={dilation}")
    out = tuple((i - 1) * s - 2 * p + d * (k - 1) + op + 1
                for i, s, p, d, k, op in zip(x_shape[-nd:], stride, padding, dilation, kernel, output_padding))
    if any(o <= 0 for o in out):
        raise ArgumentError(f"{name}: the output size {out} is too small (input {tuple(x_shape[-nd:])}, padding "
                            f"{padding})")
    return stride, padding, dilation, out


class _ConvTransposeBackward(_ConvBackward):
    """A transposed convolution is the input gradient of the convolution by the
    same weight, so its input's gradient is that convolution of g and its
    weight's gradient that convolution's weight gradient, the roles swapped."""

    def backward(self, g):
        x, w, input, weight = self.saved
        need_x, need_w, need_b = (e is not None for e in self.edges)
        if _ag._mode.enabled:  # create_graph
            x, w = input, weight
        gx = _conv_planes(g, w, None, self.geometry, tuple(x.shape[2:]), self.groups) if need_x else None
        gw = None
        if need_w:
            into = None if _ag._mode.enabled else _ag._grad_out(self.edges[1], w.shape, g)
            gw = _weight_grad(x, g, w.shape[2:], self.geometry, self.groups, into)
        if need_b:
            return gx, gw, _bias_grad_recorded(g) if _ag._mode.enabled else _bias_grad(g, self.edges[2])
        return gx, gw, None


@autocast_op("lower")
def conv_transpose(name, nd, input, weight, bias, stride, padding, output_padding, groups, dilation):
    """conv_transpose1d, conv_transpose2d or conv_transpose3d (nd = 1, 2, 3), batched or not."""
    _check_conv_operands(name, input, weight, bias, weight.shape[1] * groups)
    stride, padding, dilation, out = transposed_geometry(name, nd, input.shape, weight.shape, stride, padding,
                                                         output_padding, dilation, groups)
    if input.dtype in _ag._HALVES:
        return conv_transpose(name, nd, input.float(), weight.float(), None if bias is None else bias.float(), stride,
                              padding, output_padding, groups, dilation).to(dtype=input.dtype)
    x = input if input.ndim == nd + 2 else input.unsqueeze(0)
    y = _transposed_planes(x, weight, bias, (stride, padding, dilation), out, groups)
    return y if input.ndim == nd + 2 else y.reshape(y.shape[1:])


def _transposed_planes(x, weight, bias, geometry, out, groups):
    """The transposed convolution of batched ``x`` (N, C, *in) by ``weight``
    (C, O / groups, *kernel), of spatial size ``out``: the input gradient of
    the convolution by that weight."""
    n, o = x.shape[0], weight.shape[1] * groups
    xd, w = x.detach(), weight.detach()
    y = _ag._empty((n, o) + tuple(out), xd)
    for n0, n1 in _steps(xd, o * math.prod(w.shape[2:]), x.shape[1], tuple(x.shape[2:])):
        _input_grad_step(_samples(y, n0, n1), _channels_first(_samples(xd, n0, n1), "out"), w._buf, geometry, groups)
    if bias is not None:
        planes = y._buf.view(0, (n, o, math.prod(y.shape[2:])))
        _C.binary_broadcast(_ADD, planes, planes, bias.detach()._buf.view(0, (o, 1)))
    if _ag._needs_grad(x, weight, bias):
        _ag._attach(y, _ConvTransposeBackward(x, weight, bias, xd, w, geometry, groups))
    return y


def _window_args(name, kernel_size, dilation, padding, stride):
    kernel, dilation = as_tuple(kernel_size, 2, "kernel_size"), as_tuple(dilation, 2, "dilation")
    padding, stride = as_tuple(padding, 2, "padding"), as_tuple(stride, 2, "stride")
    for values, what in ((kernel, "kernel_size"), (dilation, "dilation"), (stride, "stride")):
        _check_positive(values, what, name)
    if any(p < 0 for p in padding):
        raise ArgumentError(f"{name}: padding must be non-negative, got {padding}")
    return kernel, (stride, padding, dilation)


def _blocks(size, kernel, geometry):
    (stride, padding, dilation) = geometry
    return tuple((s + 2 * p - d * (k - 1) - 1) // st + 1
                 for s, k, st, p, d in zip(size, kernel, stride, padding, dilation))


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """The sliding blocks of (N, C, H, W) or (C, H, W) ``input``, as torch's
    F.unfold: (N, C * KH * KW, L) with L the blocks' count; im2col."""
    if not isinstance(input, Tensor) or input.ndim not in (3, 4):
        raise ArgumentError("Input Error: Only 3D or 4D input Tensors are supported (got "
                            f"{getattr(input, 'ndim', type(input).__name__)}D)")
    if input.dtype in _ag._HALVES:  # im2col moves float32 and float64
        return unfold(input.float(), kernel_size, dilation, padding, stride).to(dtype=input.dtype)
    kernel, geometry = _window_args("unfold", kernel_size, dilation, padding, stride)
    x = input if input.ndim == 4 else input.unsqueeze(0)
    blocks = _blocks(x.shape[2:], kernel, geometry)
    if any(b <= 0 for b in blocks):
        raise ArgumentError(f"unfold: no block of {kernel} fits the padded input {tuple(x.shape[2:])}")
    xd = x.detach()
    col = _ag._empty((x.shape[1],) + kernel + (x.shape[0],) + blocks, xd)
    _C.im2col(col._buf, xd._buf, *geometry)
    taps, n = x.shape[1] * math.prod(kernel), x.shape[0]
    out = _ag._empty((n, taps, math.prod(blocks)), xd)
    _swap_leading(out._buf, col._buf.view(0, (taps, n, math.prod(blocks))))
    if _ag._needs_grad(input):
        _ag._attach(out, _ag.AdjointBackward(
            x, lambda g: fold(g, x.shape[2:], kernel_size, dilation, padding, stride), "Im2ColBackward"))
    return out if input.ndim == 4 else out.squeeze(0)


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """Sums the sliding blocks of (N, C * KH * KW, L) or (C * KH * KW, L) ``input``
    into (N, C, *output_size), as torch's F.fold (col2im: overlapping blocks add up)."""
    if not isinstance(input, Tensor) or input.ndim not in (2, 3):
        raise ArgumentError("Input Error: Only unbatched (2D) or batched (3D) input Tensors are supported (got "
                            f"{getattr(input, 'ndim', type(input).__name__)}D)")
    if input.dtype in _ag._HALVES:  # col2im adds in float32 and float64
        return fold(input.float(), output_size, kernel_size, dilation, padding, stride).to(dtype=input.dtype)
    kernel, geometry = _window_args("fold", kernel_size, dilation, padding, stride)
    size = as_tuple(output_size, 2, "output_size")
    x = input if input.ndim == 3 else input.unsqueeze(0)
    n, taps, length = x.shape
    blocks = _blocks(size, kernel, geometry)
    if taps % math.prod(kernel):
        raise ArgumentError("fold: expected size of input's dimension 1 to be divisible by the product of "
                            f"kernel_size, but got input.size(1)={taps} and kernel_size={kernel}")
    if math.prod(blocks) != length or any(b <= 0 for b in blocks):
        raise ArgumentError(f"fold: given output_size={size}, kernel_size={kernel}, dilation={geometry[2]}, "
                            f"padding={geometry[1]}, stride={geometry[0]}, expected size of input's dimension 2 to "
                            f"match the calculated number of sliding blocks {' * '.join(map(str, blocks))} = "
                            f"{math.prod(blocks)}, but got input.size(2)={length}")
    xd = x.detach().contiguous()
    c = taps // math.prod(kernel)
    col = _ag._empty((c,) + kernel + (n,) + blocks, xd)
    _swap_leading(col._buf.view(0, (taps, n, length)), xd._buf)
    out = _ag._empty((n, c) + size, xd)
    _C.col2im(out._buf, col._buf, *geometry)
    if _ag._needs_grad(input):
        _ag._attach(out, _ag.AdjointBackward(x, lambda g: unfold(g, kernel_size, dilation, padding, stride),
                                             "Col2ImBackward"))
    return out if input.ndim == 3 else out.squeeze(0)


# ---- padding (F.pad, and the padding modes of Conv1d and Conv2d) ----------------------------

def pad_by_mode(input, pads, mode):
    """``input`` padded along its last len(pads) dims by (before, after)
    elements each, as PyTorch's 'reflect', 'replicate' or 'circular' modes:
    one gather per dim, so the gradient adds up where an element repeats.
    A negative pad crops, as in PyTorch: 'reflect' and 'replicate' still
    reflect about (or repeat) the edges of the whole input, 'circular' wraps
    around what is left after cropping."""
    nd = len(pads)
    for i, (before, after) in enumerate(pads):
        if not before and not after:
            continue
        dim = input.ndim - nd + i
        n = input.shape[dim]
        if mode == "circular":
            if before > n or after > n:
                raise ArgumentError(f"circular padding ({before}, {after}) wraps around more than once over the input "
                                    f"size {n} of dim {dim}")
            start, stop = max(-before, 0), n - max(-after, 0)
            if stop < start:
                raise ArgumentError(f"pad: the negative padding ({before}, {after}) of dim {dim} crops more than its "
                                    f"size {n}")
            input, n = input.narrow(dim, start, stop - start), stop - start
            before, after = max(before, 0), max(after, 0)
            if not before and not after:
                continue
            if before > n or after > n:
                raise ArgumentError(f"circular padding ({before}, {after}) wraps around more than once over the size "
                                    f"{n} left of dim {dim} after cropping")
        elif n + before + after <= 0:
            raise ArgumentError(f"pad: input size {n} of dim {dim} is too small for {mode} padding ({before}, {after}): "
                                f"calculated output size {n + before + after}")
        idx = np.arange(-before, n + after)
        if mode == "reflect":
            if before >= n or after >= n:
                raise ArgumentError(f"reflect padding ({before}, {after}) must be less than the input size {n} of dim "
                                    f"{dim}")
            idx = np.abs(idx)
            idx = np.where(idx >= n, 2 * (n - 1) - idx, idx)
        elif mode == "replicate":
            idx = np.clip(idx, 0, n - 1)
        else:
            idx = idx % n
        input = input.index_select(dim, tensor(idx.astype(np.int64), device=input.device))
    return input


def _pad_constant(input, pads, value):
    """``input`` cropped where a pad is negative, then with ``value`` cat
    before and after along each of its last len(pads) dims."""
    nd = len(pads)
    for i, (before, after) in enumerate(pads):
        dim = input.ndim - nd + i
        n = input.shape[dim]
        start, stop = max(-before, 0), n - max(-after, 0)
        if stop < start:
            raise ArgumentError(f"pad: the negative padding ({before}, {after}) of dim {dim} crops more than its size "
                                f"{n}")
        input = input.narrow(dim, start, stop - start)
        pieces = []
        for width in (before, input, after):
            if isinstance(width, Tensor):
                pieces.append(width)
            elif width > 0:
                pieces.append(full(input.shape[:dim] + (width,) + input.shape[dim + 1:], value, dtype=input.dtype,
                                   device=input.device))
        input = _ag.cat(pieces, dim) if len(pieces) > 1 else input
    return input


def pad(input, pad, mode="constant", value=None):
    """torch.nn.functional.pad: ``pad`` holds (before, after) pairs from the
    last dim backwards; 'constant' pads with ``value`` (0 for None); the
    other modes pad the last one to three dims of a batched or unbatched
    input, as PyTorch does. A negative pad crops, in every mode."""
    if not isinstance(input, Tensor):
        raise TypeError(f"pad: the input must be a ddpc tensor, got {type(input).__name__}")
    if mode not in PAD_MODES:
        raise ArgumentError(f"pad: mode must be one of {PAD_MODES}, got {mode!r}")
    try:
        widths = tuple(pad)
    except TypeError:
        widths = None
    if widths is None or len(widths) % 2 or not all(isinstance(w, numbers.Integral) for w in widths):
        raise ArgumentError(f"pad: the padding must be a sequence of an even number of ints, got {pad!r}")
    if len(widths) // 2 > input.ndim:
        raise ArgumentError(f"pad: padding length {len(widths)} is too large for a {input.ndim}-d input; at most "
                            f"{2 * input.ndim}")
    pads = tuple((int(widths[i]), int(widths[i + 1])) for i in range(len(widths) - 2, -1, -2))
    if mode == "constant":
        return _ag._own(_pad_constant(input, pads, 0.0 if value is None else value), input)  # a copy, as PyTorch's
    if value:
        raise ArgumentError(f"pad: padding mode {mode!r} doesn't take in value argument")
    if not 1 <= len(pads) <= 3 or input.ndim not in (len(pads) + 1, len(pads) + 2):
        raise NotImplementedError(f"pad: mode {mode!r} pads the last 1 to 3 dims of an input with one or two dims "
                                  f"more, got a padding of length {len(widths)} for a {input.ndim}-d input")
    # PyTorch's CPU autocast casts reflection_pad1d/2d and replication_pad1d/2d/3d, not reflection_pad3d nor circular
    if mode == "replicate" or (mode == "reflect" and len(pads) < 3):
        return _ag._own(_pad_by_mode_float32_cpu(input, pads, mode), input)
    return _ag._own(pad_by_mode(input, pads, mode), input)


_pad_by_mode_float32_cpu = autocast_op("float32_cpu")(pad_by_mode)


# ---- pooling ------------------------------------------------------------------------

def _volumes(input, nd):
    """``input`` as (P, *spatial) volumes of its last nd dims, in the graph."""
    return input.reshape((math.prod(input.shape[:-nd]),) + tuple(input.shape[-nd:]))


class _MaxPoolBackward(_ag.Node):
    double_backward = True

    def __init__(self, x, indices):
        super().__init__((x,), (indices,))
        self.shape = x.shape

    def name(self):
        return "MaxPoolBackward"

    def backward(self, g):
        (indices,) = self.saved
        gx = _ag._empty(self.shape, g)
        alert_not_deterministic("max pooling's backward", gx)
        _C.max_pool_backward(gx._buf, g._buf, indices._buf)
        if _ag._needs_grad(g):  # create_graph: the adjoint takes each window's gradient at its maximum
            flat = indices.reshape(indices.shape[0], -1)
            _ag._attach(gx, _ag.AdjointBackward(g, lambda u: _ag.gather(u.reshape(u.shape[0], -1), 1, flat).reshape(
                g.shape), "MaxPoolBackwardBackward"))
        return (gx,)


def _max_volumes(input, nd, out, geometry):
    """The largest element of each window of ``input``'s volumes, into
    ``out`` (nd sizes), and its flattened position in its volume; the _C op's
    ``geometry`` is (kernel, stride, padding, dilation), or Nones for
    adaptive windows."""
    if input.dtype in _ag._HALVES:
        values, indices = _max_volumes(input.float(), nd, out, geometry)
        return values.to(dtype=input.dtype), indices
    x = _volumes(input, nd)
    shape = (x.shape[0],) + tuple(out)
    values, indices = _ag._empty(shape, x), _ag._empty(shape, x, int64)
    _C.max_pool(values._buf, indices._buf, x.detach()._buf, *geometry)
    if _ag._needs_grad(x):
        _ag._attach(values, _MaxPoolBackward(x, indices))
    shape = tuple(input.shape[:-nd]) + tuple(out)
    return values.reshape(shape), Tensor(indices._buf.view(0, shape))


def _integer_windows(x, nd, kernel, stride, padding, dilation, out, fill):
    """The pooling windows of the integer volumes x (P, *in) as (P, *out,
    prod(kernel)), elements in the order a window is scanned, ``fill``
    where a window reaches past the input: the _C pools take floating point
    only, and a round trip through float64 would change large int64 values."""
    pads = tuple((p, max(0, (o - 1) * s + (k - 1) * d + 1 - p - n))
                 for k, s, p, d, o, n in zip(kernel, stride, padding, dilation, out, x.shape[1:]))
    x = _pad_constant(x, pads, fill)
    for i in range(nd):
        x = x.unfold(1 + i, (kernel[i] - 1) * dilation[i] + 1, stride[i]).narrow(1 + i, 0, out[i])
        if dilation[i] > 1:
            x = x[..., ::dilation[i]]
    return x.reshape(tuple(x.shape[:1 + nd]) + (math.prod(kernel),))


def _max_integer_volumes(input, nd, out, geometry):
    """_max_volumes of an integer input: each window's largest element and
    the flattened position of its first occurrence, as PyTorch's CPU pools."""
    kernel, stride, pad, dilation = geometry
    x = _volumes(input, nd)
    lowest = int(np.iinfo(np.dtype(input.dtype.name)).min)
    windows = _integer_windows(x, nd, kernel, stride, pad, dilation, out, lowest)
    positions = arange(math.prod(x.shape[1:]), device=input.device).reshape((1,) + tuple(x.shape[1:]))
    positions = _integer_windows(positions, nd, kernel, stride, pad, dilation, out, -1)
    values = windows.amax(-1)
    hits = (windows == values.unsqueeze(-1)) & (positions >= 0)
    rank = arange(windows.shape[-1], device=input.device)
    first = _ag.where(hits, rank, windows.shape[-1]).amin(-1, keepdim=True)
    indices = positions.expand(windows.shape).gather(-1, first).squeeze(-1)
    shape = tuple(input.shape[:-nd]) + tuple(out)
    return values.reshape(shape), indices.reshape(shape)


def max_pool(name, nd, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    _check_planes(name, nd, input, ("uint8", "int32", "int64"))
    kernel, stride, pad, dilation, out = pool_geometry(name, nd, input.shape, kernel_size, stride, padding,
                                                       dilation, ceil_mode)
    volumes = _max_volumes if input.dtype.is_floating_point else _max_integer_volumes
    values, indices = volumes(input, nd, out, (kernel, stride, pad, dilation))
    return (values, indices) if return_indices else values


class _AvgPoolBackward(_ag.Node):
    double_backward = True

    def __init__(self, x, args):
        super().__init__((x,), ())
        self.shape, self.args = x.shape, args

    def name(self):
        return "AvgPoolBackward"

    def backward(self, g):
        gx = _ag._empty(self.shape, g)
        alert_not_deterministic("average pooling's backward", gx)
        _C.avg_pool_backward(gx._buf, g._buf, *self.args)
        if _ag._needs_grad(g):  # create_graph: the adjoint of this gradient is the pool itself
            nd = g.ndim - 1
            _ag._attach(gx, _ag.AdjointBackward(g, lambda u: _avg_volumes(u, nd, g.shape[1:], self.args),
                                                "AvgPoolBackwardBackward"))
        return (gx,)


def _avg_volumes(input, nd, out, args):
    """The average pool of ``input``'s volumes into ``out`` (nd sizes) with the
    _C op's geometry ``args``."""
    if input.dtype in _ag._HALVES:
        return _avg_volumes(input.float(), nd, out, args).to(dtype=input.dtype)
    x = _volumes(input, nd)
    y = _ag._empty((x.shape[0],) + tuple(out), x)
    _C.avg_pool(y._buf, x.detach()._buf, *args)
    if _ag._needs_grad(x):
        _ag._attach(y, _AvgPoolBackward(x, args))
    return y.reshape(tuple(input.shape[:-nd]) + tuple(out))


def _avg_integer_volumes(input, nd, out, args):
    """_avg_volumes of an int64 input as PyTorch's CPU pools: each window's
    int64 sum divided by its divisor in integer arithmetic, rounding toward zero."""
    kernel, stride, pad, count_include_pad, divisor_override = args
    x = _volumes(input, nd)
    sums = _integer_windows(x, nd, kernel, stride, pad, (1,) * nd, out, 0).sum(-1)
    if divisor_override:
        divisor = np.full(out, divisor_override, dtype=np.int64)
    else:
        divisor = np.ones((), dtype=np.int64)
        for k, s, p, n, o in zip(kernel, stride, pad, x.shape[1:], out):
            start = np.arange(o, dtype=np.int64) * s - p
            stop = np.minimum(start + k, n + p)  # a ceil_mode window's part past the padding does not count
            if not count_include_pad:
                start, stop = np.maximum(start, 0), np.minimum(stop, n)
            divisor = np.multiply.outer(divisor, stop - start)
    quotient = sums.div(tensor(divisor, device=input.device), rounding_mode="trunc")
    return quotient.reshape(tuple(input.shape[:-nd]) + tuple(out))


def avg_pool(name, nd, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    _check_planes(name, nd, input, ("int64",))
    kernel, stride, pad, _, out = pool_geometry(name, nd, input.shape, kernel_size, stride, padding, 1, ceil_mode)
    if divisor_override is not None and (not isinstance(divisor_override, numbers.Integral) or divisor_override == 0):
        raise ArgumentError(f"{name}: divisor_override must be a non-zero int, got {divisor_override!r}")
    volumes = _avg_volumes if input.dtype.is_floating_point else _avg_integer_volumes
    return volumes(input, nd, out, (kernel, stride, pad, bool(count_include_pad), int(divisor_override or 0)))


_SIZE_WORDS = {1: "an int", 2: "a pair of ints", 3: "a triple of ints"}


def _adaptive_size(name, nd, input, output_size):
    """The output size of an adaptive pool: ``output_size`` an int or nd
    ints, None in it keeping the input's size."""
    _check_planes(name, nd, input)
    sizes = (output_size,) * nd if output_size is None or isinstance(output_size, numbers.Integral) \
        else tuple(output_size)
    if len(sizes) != nd or not all(s is None or isinstance(s, numbers.Integral) for s in sizes):
        raise ArgumentError(f"{name}: output_size must be {_SIZE_WORDS[nd]} or None, got {output_size!r}")
    out = tuple(int(i if s is None else s) for s, i in zip(sizes, input.shape[-nd:]))
    if any(o < 0 for o in out):
        raise ArgumentError(f"{name}: elements of output_size must be >= 0, got {out}")
    return out


def adaptive_avg_pool(name, nd, input, output_size):
    """The mean over PyTorch's adaptive windows: along each dim, output i
    averages inputs [floor(i * in / out), ceil((i + 1) * in / out)); None in
    ``output_size`` keeps the input's size."""
    out = _adaptive_size(name, nd, input, output_size)
    return _avg_volumes(input, nd, out, (None, None, None, True, 0))


def adaptive_max_pool(name, nd, input, output_size, return_indices):
    """The largest element over PyTorch's adaptive windows (those of
    adaptive_avg_pool) and, with ``return_indices``, its flattened position
    in its volume, as PyTorch numbers it."""
    out = _adaptive_size(name, nd, input, output_size)
    values, indices = _max_volumes(input, nd, out, (None, None, None, None))
    return (values, indices) if return_indices else values


# ---- max unpooling ----------------------------------------------------------------------

class _MaxUnpoolBackward(_ag.Node):
    """Each input's gradient is the output gradient at its index."""

    double_backward = True

    def __init__(self, x, indices):
        super().__init__((x,), (indices,))
        self.shape = x.shape

    def name(self):
        return "MaxUnpoolBackward"

    def backward(self, g):
        (indices,) = self.saved
        if _ag._mode.enabled:  # create_graph
            return (_ag.gather(g, 1, indices),)
        gx = _ag._empty(self.shape, g)
        _C.gather_dim(gx._buf, g._buf, indices._buf, 1)
        return (gx,)


def _unpool_size(nd, input, kernel, stride, padding, output_size):
    """PyTorch's output size of a max unpool: the pool's input size, or
    ``output_size`` (nd or nd + 2 ints) within a stride of it."""
    default = tuple((i - 1) * s + k - 2 * p for i, k, s, p in zip(input.shape[-nd:], kernel, stride, padding))
    if output_size is None:
        return default
    size = tuple(output_size)
    if len(size) == nd + 2:
        size = size[2:]
    if len(size) != nd:
        raise ArgumentError(f"output_size should be a sequence containing {nd} or {nd + 2} elements, but it has a "
                            f"length of '{len(size)}'")
    for d, (o, s) in enumerate(zip(size, stride)):
        if not default[d] - s < o < default[d] + s:
            raise ArgumentError(f'invalid output_size "{output_size}" (dim {d} must be between {default[d] - s} and '
                                f'{default[d] + s})')
    return tuple(int(o) for o in size)


def max_unpool(name, nd, input, indices, kernel_size, stride, padding, output_size):
    """The inverse of a max pool as far as it goes: zeros, each input value
    placed at its index (flattened in its volume, as the max pools return
    them); where indices repeat one of the values lands, as in PyTorch."""
    _check_planes(name, nd, input)
    kernel = as_tuple(kernel_size, nd, "kernel_size")
    stride = kernel if stride is None else as_tuple(stride, nd, "stride")
    padding = as_tuple(padding, nd, "padding")
    if not isinstance(indices, Tensor) or indices.dtype is not int64:
        raise DtypeError(f"{name}: indices must be an int64 ddpc tensor, got "
                         f"{getattr(indices, 'dtype', type(indices).__name__)}")
    if tuple(indices.shape) != tuple(input.shape):
        raise ArgumentError(f"Expected shape of indices to be same as that of the input tensor ({list(input.shape)}) "
                            f"but got indices tensor with shape: {list(indices.shape)}")
    if indices._buf.device != input._buf.device:
        raise ArgumentError(f"{name}: input on {input.device}, indices on {indices.device}")
    out = _unpool_size(nd, input, kernel, stride, padding, output_size)
    if input.dtype in _ag._HALVES:
        return max_unpool(name, nd, input.float(), indices, kernel, stride, padding, out).to(dtype=input.dtype)
    planes, volume = math.prod(input.shape[:-nd]), math.prod(input.shape[-nd:])
    x = input.reshape((planes, volume))
    at = Tensor(indices.detach().contiguous()._buf.view(0, (planes, volume)))
    y = _ag._empty((planes, math.prod(out)), x)
    _C.fill(y._buf, 0.0)
    _C.scatter_dim(y._buf, x.detach()._buf, at._buf, 1, False)
    if _ag._needs_grad(x):
        _ag._attach(y, _MaxUnpoolBackward(x, at))
    return y.reshape(tuple(input.shape[:-nd]) + out)

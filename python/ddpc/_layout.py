"""PyTorch's stacking, tiling, splitting, rotating, integrating, windowing and
index-writing functions, composed of autograd.py's reshape, expand, cat, flip,
cumsum, index and item assignment, so their gradients come from those ops'
backward passes; scatter_reduce runs the scatter ops of csrc/ops_dim.c and
has its own backward node. Index arrays built with numpy are host-side
metadata (one integer per selected slice, window element or combination).
"""

import math
import numbers

import numpy as np

from . import _C, _indexing
from . import autograd as _ag
from ._C import ArgumentError, DtypeError, IndexOutOfRangeError
from .backends import alert_not_deterministic
from ._dtype import bfloat16, float16, float32, float64, iinfo, int32, int64, uint8
from .tensor import Tensor, _CopyOf, _size_args, full, ones, tensor, zeros


def _tensors(args, what):
    """The tensors passed as ``f(a, b, ...)`` or ``f([a, b, ...])``."""
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        args = tuple(args[0])
    for t in args:
        if not isinstance(t, Tensor):
            raise TypeError(f"{what} takes ddpc tensors, got {type(t).__name__}")
    return args


# ---- at least n dims, stacking -----------------------------------------------------------

def _atleast(n, args, what):
    shape_of = {1: lambda s: s or (1,), 2: lambda s: ((1,) * (2 - len(s)) + s) if len(s) < 2 else s,
                3: lambda s: {0: (1, 1, 1), 1: (1,) + s + (1,), 2: s + (1,)}.get(len(s), s)}[n]
    single = len(args) == 1 and isinstance(args[0], Tensor)
    out = tuple(_ag.reshape(t, shape_of(t.shape)) for t in _tensors(args, what))
    return out[0] if single else out


def atleast_1d(*tensors):
    """Each tensor with a 0-d one made 1-d (one tensor in, one out; else a tuple)."""
    return _atleast(1, tensors, "atleast_1d")


def atleast_2d(*tensors):
    """Each tensor with leading dims of 1 added up to 2 dims."""
    return _atleast(2, tensors, "atleast_2d")


def atleast_3d(*tensors):
    """Each tensor made 3-d as PyTorch: (1, 1, 1), (1, N, 1) or (M, N, 1)."""
    return _atleast(3, tensors, "atleast_3d")


def hstack(tensors):
    """The tensors joined along dim 1 (dim 0 for 1-d ones)."""
    ts = _ag_tuple(atleast_1d(*_tensors((tensors,), "hstack")))
    return _ag.cat(ts, 0 if ts[0].ndim == 1 else 1)


def vstack(tensors):
    """The tensors, made at least 2-d, joined along dim 0."""
    return _ag.cat(_ag_tuple(atleast_2d(*_tensors((tensors,), "vstack"))), 0)


row_stack = vstack


def dstack(tensors):
    """The tensors, made at least 3-d, joined along dim 2."""
    return _ag.cat(_ag_tuple(atleast_3d(*_tensors((tensors,), "dstack"))), 2)


def column_stack(tensors):
    """The tensors as columns: 0- and 1-d ones become (N, 1), then all join along dim 1."""
    ts = [_ag.reshape(t, (t.numel(), 1)) if t.ndim < 2 else t for t in _tensors((tensors,), "column_stack")]
    return _ag.cat(ts, 1)


def _ag_tuple(t):
    return (t,) if isinstance(t, Tensor) else t


def tile(input, dims):
    """input repeated dims[d] times along each dim; with fewer dims than input
    has, leading 1s are assumed (unlike repeat, which needs all of them)."""
    dims = _size_args((dims,) if isinstance(dims, numbers.Integral) else tuple(dims))
    return input.repeat((1,) * (input.ndim - len(dims)) + dims)


def broadcast_to(input, size):
    """input expanded to ``size`` (a copy where PyTorch gives a view; see Tensor)."""
    return _ag.expand(input, _size_args((size,) if isinstance(size, numbers.Integral) else tuple(size)))


def cartesian_prod(*tensors):
    """Every combination of one element of each 1-d tensor, as rows (a 1-d tensor given alone is returned)."""
    ts = _tensors(tensors, "cartesian_prod")
    if any(t.ndim != 1 for t in ts):
        raise ArgumentError(f"cartesian_prod: expected 1-d tensors, got shapes {[t.shape for t in ts]}")
    if len(ts) == 1:
        return ts[0]
    from .tensor import meshgrid

    return _ag.stack([_ag.reshape(g, (-1,)) for g in meshgrid(*ts, indexing="ij")], 1)


def _triangle_indices(row, col, offset, dtype, device, lower):
    if row < 0 or col < 0:
        raise ArgumentError(f"{'tril' if lower else 'triu'}_indices: row and col must be non-negative, got {row}, "
                            f"{col}")
    r, c = (np.tril_indices if lower else np.triu_indices)(row, offset, col)
    return tensor(np.stack([r, c]).astype(np.int64), dtype=dtype, device=device)


def tril_indices(row, col, offset=0, *, dtype=int64, device=None):
    """The (row, column) indices of the lower triangle of a row x col matrix, as a 2 x N tensor in row-major order."""
    return _triangle_indices(row, col, offset, dtype, device, True)


def triu_indices(row, col, offset=0, *, dtype=int64, device=None):
    """The (row, column) indices of the upper triangle of a row x col matrix, as a 2 x N tensor in row-major order."""
    return _triangle_indices(row, col, offset, dtype, device, False)


def trapezoid(y, x=None, *, dx=None, dim=-1):
    """The integral of y along ``dim`` by the trapezoid rule, at the sample points
    x (a tensor along that dim, or broadcasting with y), else spaced dx apart (default 1)."""
    if x is not None and dx is not None:
        raise TypeError("trapezoid: give x or dx, not both")
    d = _ag._dim(y, dim)
    n = y.shape[d]
    if n == 0:
        return _ag.sum(y, d)
    pairs = _ag.add(y.narrow(d, 1, n - 1), y.narrow(d, 0, n - 1))
    if x is None:
        return _ag.mul(_ag.sum(pairs, d), 0.5 * (1.0 if dx is None else dx))
    if x.ndim == 1:
        if x.shape[0] != n:
            raise ArgumentError(f"trapezoid: x has {x.shape[0]} points but y has {n} along dim {d}")
        x = _ag.reshape(x, (n,) + (1,) * (y.ndim - d - 1))
        steps = _ag.diff(x, dim=0)
    else:
        steps = _ag.diff(x, dim=d)
    return _ag.mul(_ag.sum(_ag.mul(pairs, steps), d), 0.5)


def trapz(y, x=None, *, dx=None, dim=-1):
    """trapezoid under its older name."""
    return trapezoid(y, x, dx=dx, dim=dim)


def cumulative_trapezoid(y, x=None, *, dx=None, dim=-1):
    """The running integral of y along ``dim`` by the trapezoid rule (one element
    fewer than y along dim), at sample points x or spaced dx apart, as trapezoid."""
    if x is not None and dx is not None:
        raise TypeError("cumulative_trapezoid: give x or dx, not both")
    d = _ag._dim(y, dim)
    n = y.shape[d]
    if n == 0:
        return _ag.clone(y)
    pairs = _ag.add(y.narrow(d, 1, n - 1), y.narrow(d, 0, n - 1))
    if x is None:
        return _ag.cumsum(_ag.mul(pairs, 0.5 * (1.0 if dx is None else dx)), d)
    if x.ndim == 1:
        if x.shape[0] != n:
            raise ArgumentError(f"cumulative_trapezoid: x has {x.shape[0]} points but y has {n} along dim {d}")
        steps = _ag.reshape(_ag.diff(x, dim=0), (n - 1,) + (1,) * (y.ndim - d - 1))
    else:
        steps = _ag.diff(x, dim=d)
    return _ag.cumsum(_ag.mul(_ag.mul(pairs, steps), 0.5), d)


def _along_dim(coef, d, ndim):
    """A 1-d coefficient tensor shaped to broadcast along dim d of ndim dims."""
    return _ag.reshape(coef, tuple(-1 if i == d else 1 for i in range(ndim)))


def _uniform_gradient(f, d, h, edge_order):
    n = f.shape[d]
    inner = _ag.mul(_ag.sub(f.narrow(d, 2, n - 2), f.narrow(d, 0, n - 2)), 0.5 / h)
    if edge_order == 1:
        first = _ag.div(_ag.sub(f.narrow(d, 1, 1), f.narrow(d, 0, 1)), h)
        last = _ag.div(_ag.sub(f.narrow(d, n - 1, 1), f.narrow(d, n - 2, 1)), h)
    else:
        first = _ag.div(_ag.add(_ag.add(_ag.mul(f.narrow(d, 0, 1), -1.5), _ag.mul(f.narrow(d, 1, 1), 2.0)),
                                _ag.mul(f.narrow(d, 2, 1), -0.5)), h)
        last = _ag.div(_ag.add(_ag.add(_ag.mul(f.narrow(d, n - 3, 1), 0.5), _ag.mul(f.narrow(d, n - 2, 1), -2.0)),
                               _ag.mul(f.narrow(d, n - 1, 1), 1.5)), h)
    return _ag.cat([first, inner, last], d)


def _three_point(f, d, start, coefs):
    """sum_j coefs[j] * f[start + j along d], coefs 1-d tensors along d (as many as the result's length there)."""
    m = coefs[0].shape[0]
    out = None
    for j, c in enumerate(coefs):
        term = _ag.mul(f.narrow(d, start + j, m), _along_dim(c, d, f.ndim))
        out = term if out is None else _ag.add(out, term)
    return out


def _coordinate_gradient(f, d, x, edge_order):
    """numpy's second-order differences at the sample points x (1-d, along d)."""
    n = f.shape[d]
    if x.ndim != 1 or x.shape[0] != n:
        raise ArgumentError(f"gradient: expected each coordinate tensor to be 1-d with {n} points, got shape {x.shape}")
    x = x.to(dtype=f.dtype)
    dx = _ag.diff(x)
    h1, h2 = dx.narrow(0, 0, n - 2), dx.narrow(0, 1, n - 2)
    s = _ag.add(h1, h2)
    inner = _three_point(f, d, 0, [_ag.neg(_ag.div(h2, _ag.mul(h1, s))), _ag.div(_ag.sub(h2, h1), _ag.mul(h1, h2)),
                                   _ag.div(h1, _ag.mul(h2, s))])
    if edge_order == 1:
        first = _three_point(f, d, 0, [_ag.neg(_ag.reciprocal(dx.narrow(0, 0, 1))), _ag.reciprocal(dx.narrow(0, 0, 1))])
        last = _three_point(f, d, n - 2, [_ag.neg(_ag.reciprocal(dx.narrow(0, n - 2, 1))),
                                          _ag.reciprocal(dx.narrow(0, n - 2, 1))])
    else:
        a1, a2 = dx.narrow(0, 0, 1), dx.narrow(0, 1, 1)
        sa = _ag.add(a1, a2)
        first = _three_point(f, d, 0, [_ag.neg(_ag.div(_ag.add(_ag.mul(a1, 2.0), a2), _ag.mul(a1, sa))),
                                       _ag.div(sa, _ag.mul(a1, a2)), _ag.neg(_ag.div(a1, _ag.mul(a2, sa)))])
        b1, b2 = dx.narrow(0, n - 3, 1), dx.narrow(0, n - 2, 1)
        sb = _ag.add(b1, b2)
        last = _three_point(f, d, n - 3, [_ag.div(b2, _ag.mul(b1, sb)), _ag.neg(_ag.div(sb, _ag.mul(b1, b2))),
                                          _ag.div(_ag.add(_ag.mul(b2, 2.0), b1), _ag.mul(b2, sb))])
    return _ag.cat([first, inner, last], d)


def gradient(input, *, spacing=1, dim=None, edge_order=1):
    """The derivative of input along each dim (``dim``: an int, a list, or
    all), estimated by central differences inside and one-sided ones of
    ``edge_order`` 1 or 2 at the ends, as numpy.gradient: samples ``spacing``
    apart (a number, or one per dim), or at the coordinates of a list of
    1-d tensors (one per dim). A tuple, one tensor per dim; integer input
    gives float32. Differentiable."""
    if not isinstance(input, Tensor):
        raise TypeError(f"gradient: expected a ddpc.Tensor, got {type(input).__name__}")
    if edge_order not in (1, 2):
        raise ArgumentError("torch.gradient only supports edge_order=1 and edge_order=2.")
    dims = list(range(input.ndim)) if dim is None else [dim] if isinstance(dim, numbers.Integral) else list(dim)
    dims = [_ag._dim(input, d) for d in dims]
    if isinstance(spacing, (list, tuple)):
        if len(spacing) != len(dims):
            raise ArgumentError("torch.gradient expected spacing to be unspecified, a scalar, or a list of length "
                                f"{len(dims)} (one per dim), got {len(spacing)}")
        spacings = list(spacing)
    else:
        spacings = [spacing] * len(dims)
    f = input if input.dtype.is_floating_point else input.to(dtype=float32)
    out = []
    for d, h in zip(dims, spacings):
        if f.shape[d] < edge_order + 1:
            raise ArgumentError("torch.gradient expected each dimension size to be at least edge_order+1")
        if isinstance(h, Tensor) and h.ndim == 1:
            out.append(_coordinate_gradient(f, d, h, edge_order))
        else:
            out.append(_uniform_gradient(f, d, float(h), edge_order))
    return tuple(out)


def rot90(input, k=1, dims=(0, 1)):
    """input turned by 90 degrees k times in the plane of ``dims``, from the
    first dim towards the second (a copy where PyTorch gives a view)."""
    dims = tuple(dims)
    if len(dims) != 2:
        raise ArgumentError(f"rot90: expected 2 dims, got {len(dims)}")
    if input.ndim < 2:
        raise ArgumentError(f"rot90: needs at least 2 dims, got {input.ndim}")
    d0, d1 = _ag._dim(input, dims[0]), _ag._dim(input, dims[1])
    if d0 == d1:
        raise ArgumentError(f"rot90: the two dims must differ, got {dims}")
    k %= 4
    if k == 1:
        return _ag.transpose(_ag.flip(input, (d1,)), d0, d1)
    if k == 2:
        return _ag.flip(input, (d0, d1))
    if k == 3:
        return _ag.transpose(_ag.flip(input, (d0,)), d0, d1)
    return _ag.clone(input)


def vander(x, N=None, increasing=False):
    """The Vandermonde matrix of the 1-d x: column j holds x ** (N - 1 - j), or
    x ** j when ``increasing``; N columns (default len(x)). Integer x gives
    int64, as PyTorch. Built as running products, so differentiable."""
    if not isinstance(x, Tensor) or x.ndim != 1:
        raise ArgumentError("vander: x must be a 1-d tensor")
    n = x.shape[0] if N is None else int(N)
    if n < 0:
        raise ArgumentError(f"vander: N must be non-negative, got {n}")
    if not x.dtype.is_floating_point:
        x = x.to(dtype=int64)
    if n == 0:
        return _ag.reshape(x, (-1, 1)).narrow(1, 0, 0).contiguous()
    first = ones((x.shape[0], 1), dtype=x.dtype, device=x.device)
    powers = first if n == 1 else _ag.cumprod(
        _ag.cat([first, _ag.expand(_ag.reshape(x, (-1, 1)), (x.shape[0], n - 1))], 1), 1)
    return powers if increasing else _ag.flip(powers, (1,))


def combinations(input, r=2, with_replacement=False):
    """The length-r combinations of the 1-d input's elements, as rows in
    lexicographic order of their positions (itertools.combinations, or
    combinations_with_replacement); r = 0 gives an empty 1-d tensor."""
    if not isinstance(input, Tensor) or input.ndim != 1:
        raise ArgumentError("combinations: expected a 1-d tensor")
    if not isinstance(r, numbers.Integral) or r < 0:
        raise ArgumentError(f"combinations: r must be a non-negative int, got {r}")
    if r == 0:
        return input.narrow(0, 0, 0).contiguous()
    n = input.shape[0]
    # Every r-tuple of positions, kept where the positions increase (or do not decrease), as PyTorch builds them.
    grid = np.indices((n,) * r).reshape(r, -1)
    keep = np.all(grid[1:] >= grid[:-1] + (0 if with_replacement else 1), axis=0)
    idx = tensor(grid[:, keep].T.reshape(-1).copy(), device=input.device)
    return _ag.reshape(input.index_select(0, idx), (-1, r))


def _split_along(input, indices_or_sections, dim, min_ndim, what):
    if input.ndim < min_ndim:
        raise ArgumentError(f"{what} requires a tensor with at least {min_ndim} dims, but got one with {input.ndim}")
    if isinstance(indices_or_sections, numbers.Integral):
        n = input.shape[dim]
        if indices_or_sections == 0 or n % indices_or_sections:
            raise ArgumentError(f"{what} attempted to split along dimension {dim}, but the size of the dimension {n} "
                                f"is not divisible by the split_size {indices_or_sections}!")
    return _ag.tensor_split(input, indices_or_sections, dim)


def hsplit(input, indices_or_sections):
    """tensor_split along dim 1 (dim 0 of a 1-d tensor); a section count must divide the dim."""
    return _split_along(input, indices_or_sections, 1 if input.ndim > 1 else 0, 1, "hsplit")


def vsplit(input, indices_or_sections):
    """tensor_split along dim 0 of a tensor of at least 2 dims; a section count must divide the dim."""
    return _split_along(input, indices_or_sections, 0, 2, "vsplit")


def dsplit(input, indices_or_sections):
    """tensor_split along dim 2 of a tensor of at least 3 dims; a section count must divide the dim."""
    return _split_along(input, indices_or_sections, 2, 3, "dsplit")


def is_nonzero(input):
    """Whether the one element of input is non-zero (reads it on the host);
    RuntimeError for no or several elements, as PyTorch."""
    if input.numel() != 1:
        raise RuntimeError("Boolean value of Tensor with " + ("no values" if input.numel() == 0
                                                              else "more than one value") + " is ambiguous")
    return bool(input.detach().reshape(()).item() != 0)


# ---- windows and index writes -------------------------------------------------------------

def unfold(input, dimension, size, step):
    """The windows of ``size`` elements, ``step`` apart, along ``dimension``: that
    dim becomes the window count and a last dim of ``size`` is added (a copy
    where PyTorch gives a view; gradients of overlapping windows add up). A
    write into windows that do not overlap lands in input, as through
    PyTorch's view; one into overlapping windows is refused (PyTorch's
    writes each shared element once per window it is in)."""
    d = _ag._dim(input, dimension)
    n = input.shape[d] if input.ndim else 1
    if size < 0 or size > n or step <= 0:
        raise ArgumentError(f"unfold: size {size} and step {step} do not fit dim {d} of size {n} (0 <= size <= "
                            "the dim's size, step > 0)")
    if input.ndim == 0:  # one window of its element, or an empty one
        return _ag.reshape(input, (1,)).narrow(0, 0, size)
    count = (n - size) // step + 1
    if step >= size:  # each element in one window at most: the strided selection PyTorch's view is
        strides = _indexing.contiguous_strides(input.shape)
        return _ag._select(input, _indexing.Region(0, input.shape[:d] + (count,) + input.shape[d + 1:] + (size,),
                                                   strides[:d] + (step * strides[d],) + strides[d + 1:]
                                                   + (strides[d],)), "unfold")
    idx = (np.arange(count)[:, None] * step + np.arange(size)).reshape(-1)
    windows = input.index_select(d, tensor(idx, device=input.device))
    windows = _ag.reshape(windows, input.shape[:d] + (count, size) + input.shape[d + 1:]).movedim(d + 1, -1)
    windows._not_a_view = _CopyOf(None, None, "unfold")  # (windows may overlap: a write is refused, not lost)
    return windows


def _along(input, dim, index, what):
    """The index of input's slices at ``index`` (0- or 1-d) along ``dim``. A 0-d
    input has one slice, as if of shape (1,) (PyTorch's rule): its index is
    True, or False where ``index`` is empty."""
    d = _ag._dim(input, dim)
    if not isinstance(index, Tensor) or index.ndim > 1 or index.dtype.is_floating_point:
        raise IndexError(f"{what}: index must be a 0- or 1-d integer tensor")
    if input.ndim == 0:
        if index.numel() and bool(_ag.any_(_ag.logical_or(index < -1, index > 0))):
            raise IndexOutOfRangeError(f"{what}: a 0-d tensor takes only index 0 (or -1), got {index.tolist()}")
        return (index.numel() > 0,)
    return (slice(None),) * d + (_ag.reshape(index, (-1,)),)


def index_fill_(input, dim, index, value):
    """Sets input's slices at ``index`` along ``dim`` to ``value`` (a number or a 0-d tensor), in place."""
    if isinstance(value, Tensor) and value.ndim:
        raise ArgumentError(f"index_fill_: value must be a number or a 0-d tensor, got shape {value.shape}")
    input[_along(input, dim, index, "index_fill_")] = value
    return input


def index_copy_(input, dim, index, source):
    """Copies source's slices along ``dim`` into input's at ``index``, in place.
    A 0- or 1-d input also takes a 0-d source for one index, as in PyTorch."""
    sel = _along(input, dim, index, "index_copy_")
    n = index.numel()
    if input.ndim <= 1 and source.ndim == 0:
        if n != 1:
            raise ArgumentError(f"index_copy_: a 0-d source goes to one index, got {n}")
    else:
        d = _ag._dim(input, dim)
        want = input.shape[:d] + (n,) + input.shape[d + 1:]
        if source.shape != want:
            raise ArgumentError(f"index_copy_: source has shape {source.shape}, expected {want}")
    input[sel] = source
    return input


def index_fill(input, dim, index, value):
    """index_fill_ on a copy of input."""
    return index_fill_(_ag.clone(input), dim, index, value)


def index_copy(input, dim, index, source):
    """index_copy_ on a copy of input."""
    return index_copy_(_ag.clone(input), dim, index, source)


def masked_scatter(input, mask, source):
    """input with the elements where ``mask`` (broadcast to input's shape) holds
    taken from source's first elements, in row-major order; the mask must be bool, as in PyTorch."""
    _ag._bool_mask(mask, "masked_scatter_")
    m = _ag.expand(mask.detach(), input.shape)
    # Element i of the result takes source's element (the count of mask elements up to i) - 1.
    pos = _ag.cumsum(_ag.reshape(m, (-1,)).to(dtype=int64), 0)
    count = int(pos[-1].item()) if pos.numel() else 0
    if count > source.numel():
        raise ArgumentError(f"masked_scatter: the mask selects {count} elements but source has only {source.numel()}")
    if count == 0:
        return _ag.clone(input)
    picked = _ag.reshape(_ag.reshape(source, (-1,))[_ag.clamp_min(_ag.sub(pos, 1), 0)], input.shape)
    return _ag.where(m, picked.to(dtype=input.dtype), input)


def masked_scatter_(input, mask, source):
    """masked_scatter written into input."""
    return _ag.inplace_apply(input, lambda t: masked_scatter(t, mask, source), "masked_scatter_", (source,))


# ---- scatter with a reduction -------------------------------------------------------------

_REDUCE_OPS = {"prod": 0, "amax": 1, "amin": 2}  # the op codes of csrc/ops_dim.h's scatter_reduce_dim


def _reduce_dtype(dt, reduce):
    """The dtype the C ops reduce dt in: sums add float32, float64 or int64; the
    other reductions take float32, float64, int32 or int64 (16-bit floats go
    through float32, uint8 through a wider integer, whose low bits wrap alike)."""
    if dt in (float16, bfloat16):
        return float32
    if reduce in ("sum", "mean"):
        return dt if dt in (float32, float64) else int64
    return int32 if dt is uint8 else dt


def _identity(reduce, dt):
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    if dt.is_floating_point:
        return -math.inf if reduce == "amax" else math.inf
    info = iinfo(dt)
    return info.min if reduce == "amax" else info.max


def _scatter_reduce_values(a, d, index, src, reduce, include_self):
    """(result, count): a with src reduced into it at index along d, outside the
    graph, in a's dtype; count (float64) the number of values each mean averaged."""
    work = _reduce_dtype(a.dtype, reduce)
    with _ag.no_grad():
        out = _ag.clone(a.detach().to(dtype=work).contiguous())
        s = src.detach().to(dtype=work).contiguous()
        if not include_self:  # the scattered-to elements start from the reduction's identity
            _C.scatter_dim(out._buf, full(index.shape, _identity(reduce, work), dtype=work, device=a.device)._buf,
                           index._buf, d, False)
        if reduce not in ("amax", "amin"):  # (the extremes are exact in any order)
            alert_not_deterministic(f"scatter_reduce with reduce={reduce!r}", out)
        if reduce in _REDUCE_OPS:
            _C.scatter_reduce_dim(out._buf, s._buf, index._buf, d, _REDUCE_OPS[reduce])
        else:
            _C.scatter_dim(out._buf, s._buf, index._buf, d, True)
        count = None
        if reduce == "mean":
            count = (ones if include_self else zeros)(a.shape, dtype=float64, device=a.device)
            _C.scatter_dim(count._buf, ones(index.shape, dtype=float64, device=a.device)._buf, index._buf, d, True)
            count = _ag.where(count == 0, 1.0, count)
            mean = _ag.div(out.to(dtype=float64), count)
            out = mean if work.is_floating_point else _ag.floor(mean)
        return out.to(dtype=a.dtype), count


class _ScatterReduceBackward(_ag.Node):
    """PyTorch's gradients of scatter_reduce: sums pass the gradient through,
    means divide it by the count, products by the element (with the product
    of the others where it is 0), and amax / amin share it among the elements
    equal to the result."""

    def __init__(self, a, src, d, index, reduce, include_self, result, count):
        super().__init__((a, src), (a.detach(), src.detach(), result, count, index))
        self.d, self.reduce, self.include_self = d, reduce, include_self

    def backward(self, g):
        a, src, result, count, index = self.saved
        d, reduce = self.d, self.reduce
        dt = g.dtype
        if dt in (float16, bfloat16):  # the scatter ops add float32 and float64
            a, src, result, g = a.float(), src.float(), result.float(), g.float()
        g = g.contiguous()
        if reduce == "sum":
            g_self, g_taken = g, _ag.gather(g, d, index)
        elif reduce == "mean":
            g_self = _ag.div(g, count.to(dtype=g.dtype))
            g_taken = _ag.gather(g_self, d, index)
        elif reduce == "prod":
            # Where a is 0 its gradient is the product of the rest: recompute with 1 in its place.
            masked_a = _ag.where(a == 0, 1.0, a)
            masked_result = _scatter_reduce_values(masked_a, d, index, src, reduce, self.include_self)[0]
            g_self = _ag.div(_ag.mul(g, masked_result), masked_a)
            taken = _taken(src, index)
            zero = taken == 0
            zeros_there = _ag.gather(_ag.scatter_add(zeros(a.shape, dtype=g.dtype, device=g.device), d, index,
                                                     zero.to(dtype=g.dtype)), d, index)
            single = _ag.logical_and(zero, zeros_there == 1)
            masked_src = _padded_like(_ag.where(single, 1.0, taken), src)
            others = _scatter_reduce_values(a, d, index, masked_src, reduce, self.include_self)[0]
            g_taken = _ag.where(single, _ag.gather(_ag.mul(g, others), d, index),
                                _ag.div(_ag.gather(_ag.mul(g, result), d, index), _ag.where(zero, 1.0, taken)))
        else:
            value = _ag.gather(result, d, index)
            self_is = (a == result).to(dtype=g.dtype)
            if not self.include_self:
                self_is = _ag.scatter(self_is, d, index, value=0.0)
            src_is = (_taken(src, index) == value).to(dtype=g.dtype)
            share = _ag.div(g, _ag.scatter_add(self_is, d, index, src_is))
            g_self = _ag.mul(self_is, share)
            g_taken = _ag.mul(src_is, _ag.gather(share, d, index))
        if not self.include_self:
            g_self = _ag.scatter(g_self, d, index, value=0.0)
        g_self = g_self.to(dtype=dt) if self.edges[0] is not None else None
        g_src = None
        if self.edges[1] is not None:
            g_src = _ag._padded(g_taken.contiguous(), src.shape).to(dtype=dt)
        return g_self, g_src


def _taken(src, index):
    """The part of src that the index reaches (its leading corner of index's shape)."""
    if src.shape == index.shape:
        return src
    return src[tuple(slice(0, n) for n in index.shape)].contiguous()


def _padded_like(part, src):
    """src with its leading corner of part's shape replaced by part."""
    if part.shape == src.shape:
        return part
    out = _ag.clone(src)
    out[tuple(slice(0, n) for n in part.shape)] = part
    return out


def scatter_reduce(input, dim, index, src, reduce, *, include_self=True):
    """input with each src[i][j][k] reduced into input[i][index[i][j][k]][k]
    (dim 1; likewise for any dim) by ``reduce``: 'sum', 'prod', 'mean',
    'amax' or 'amin'; without ``include_self`` the elements scattered to
    reduce only what lands there. Means of integers round down, as
    PyTorch's; amax and amin propagate NaN. Runs on input's device (scatter
    and scatter-reduce ops with atomics on a GPU); 16-bit floats reduce in
    float32. Gradients as PyTorch's, to input and src, except that amax and
    amin without include_self share the gradient among the reduced elements
    equal to the result only, where PyTorch also counts an equal input
    element that took no part."""
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
        raise ArgumentError(f"scatter_reduce: reduce must be 'sum', 'prod', 'mean', 'amax' or 'amin', got {reduce!r}")
    if not isinstance(src, Tensor) or src.dtype is not input.dtype:
        raise DtypeError("scatter_reduce: src must be a tensor of input's dtype")
    d, index = _ag._index_args(input, dim, index, "scatter_reduce")
    if input.ndim == 0:
        flat = scatter_reduce(_ag.reshape(input, (1,)), 0, index.reshape(1), _ag.reshape(src, (1,)), reduce,
                              include_self=include_self)
        return _ag.reshape(flat, ())
    result, count = _scatter_reduce_values(input, d, index, src, reduce, include_self)
    if _ag._needs_grad(input, src) and input.dtype.is_floating_point:
        _ag._attach(result, _ScatterReduceBackward(input, src, d, index, reduce, include_self, result.detach(),
                                                   count))
    return result


def index_reduce(input, dim, index, source, reduce, *, include_self=True):
    """input with each slice source[..., k, ...] (along ``dim``) reduced into
    input[..., index[k], ...] by ``reduce``: 'prod', 'mean', 'amax' or
    'amin', as PyTorch's index_reduce: scatter_reduce with the 1-d index
    spread over source's other dims, so its rounding, devices and gradients."""
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise ArgumentError(f"index_reduce(): Expected reduce to be one of prod, mean, amax or amin, got {reduce}.")
    if not isinstance(index, Tensor) or index.ndim > 1:
        raise IndexError("index_reduce(): Index is supposed to be a vector")
    d = _ag._dim(input, dim)
    index = _ag.reshape(index, (-1,))
    if not isinstance(source, Tensor) or source.ndim != input.ndim or source.shape[d] != index.shape[0] or any(
            source.shape[i] != input.shape[i] for i in range(input.ndim) if i != d):
        raise ArgumentError(f"index_reduce(): source of shape {getattr(source, 'shape', None)} does not fit "
                            f"{input.shape} with {index.shape[0]} indices along dim {d}")
    spread = _ag.expand(_ag.reshape(index, tuple(-1 if i == d else 1 for i in range(input.ndim))), source.shape)
    return scatter_reduce(input, d, spread.contiguous(), source, reduce, include_self=include_self)


def put(input, index, source, accumulate=False):
    """input with the elements at the flat (row-major) positions ``index``
    set to source's elements (added to them with ``accumulate``); negative
    positions count from the end. Differentiable: index_put on the flat tensor."""
    if not isinstance(index, Tensor) or index.dtype is not int64:
        raise TypeError("put(): Expected a long tensor for index")
    if not isinstance(source, Tensor) or source.dtype is not input.dtype:
        raise DtypeError(f"put(): self and source expected to have the same dtype, got {input.dtype} and "
                         f"{getattr(source, 'dtype', type(source).__name__)}")
    if source.numel() != index.numel():
        raise ArgumentError("put_(): Expected source and index to have the same number of elements, but got source "
                            f"with {source.numel()} elements and index with {index.numel()} elements")
    flat = _ag.reshape(input, (-1,))
    out = _ag.index_put(flat, (_ag.reshape(index, (-1,)),), _ag.reshape(source, (-1,)), accumulate)
    return _ag.reshape(out, input.shape)


def _scattered(input, src, sel, want, what):
    """A copy of input with its elements ``sel`` (of shape ``want``) replaced
    by src; gradients reach both (input's is 0 where src went)."""
    if not isinstance(src, Tensor):
        raise TypeError(f"{what}: src must be a ddpc tensor, got {type(src).__name__}")
    if tuple(src.shape) != tuple(want):
        raise ArgumentError(f"{what}: expected src to have a size equal to the slice of self. src size = "
                            f"{list(src.shape)}, slice size = {list(want)}")
    out = _ag.clone(input)
    out[sel] = src
    return out


def select_scatter(input, src, dim, index):
    """A copy of input with input.select(dim, index) replaced by src."""
    d = _ag._dim(input, dim)
    n = input.shape[d]
    if not -n <= index < n:
        raise IndexOutOfRangeError(f"select_scatter(): index {index} out of range for tensor of size "
                                   f"{list(input.shape)} at "
                                   f"dimension {d}")
    sel = (slice(None),) * d + (index % n,)
    return _scattered(input, src, sel, input.shape[:d] + input.shape[d + 1:], "select_scatter")


def slice_scatter(input, src, dim=0, start=None, end=None, step=1):
    """A copy of input with input[..., start:end:step, ...] (along dim) replaced by src."""
    d = _ag._dim(input, dim)
    if step <= 0:
        raise ArgumentError("slice_scatter(): slice step must be positive")
    part = slice(start, end, step)
    want = input.shape[:d] + (len(range(*part.indices(input.shape[d]))),) + input.shape[d + 1:]
    return _scattered(input, src, (slice(None),) * d + (part,), want, "slice_scatter")


def diagonal_scatter(input, src, offset=0, dim1=0, dim2=1):
    """A copy of input with its diagonal (input.diagonal(offset, dim1, dim2):
    the diagonal as the last dim) replaced by src."""
    d1, d2 = _ag._dim(input, dim1), _ag._dim(input, dim2)
    if d1 == d2:
        raise ArgumentError(f"diagonal_scatter(): diagonal dimensions cannot be identical {dim1}, {dim2}")
    k = int(offset)
    rows = np.arange(max(0, -k), max(0, min(input.shape[d1], input.shape[d2] - k)))
    sel = [slice(None)] * input.ndim
    sel[d1], sel[d2] = rows, rows + k
    rest = tuple(n for i, n in enumerate(input.shape) if i not in (d1, d2))
    want = rest + (len(rows),)
    if not isinstance(src, Tensor) or tuple(src.shape) != want:
        return _scattered(input, src, tuple(sel), want, "diagonal_scatter")  # raises
    # numpy's rule, which item assignment follows: two index arrays side by side
    # put their dim where they stand, apart they put it first.
    at = min(d1, d2) if abs(d1 - d2) == 1 else 0
    moved = src.movedim(-1, at)
    return _scattered(input, moved, tuple(sel), moved.shape, "diagonal_scatter")


def fill_diagonal_(input, fill_value, wrap=False):
    """Sets the main diagonal (input[i, i, ...]; all dims equal beyond 2-d) to
    fill_value, in place; with ``wrap``, a tall matrix's diagonal starts again
    below each square block, as in PyTorch."""
    if input.ndim < 2:
        raise ArgumentError(f"fill_diagonal_: needs at least 2 dims, got shape {input.shape}")
    if input.ndim > 2 and len(set(input.shape)) != 1:
        raise ArgumentError(f"fill_diagonal_: all dims must be equal beyond 2-d, got shape {input.shape}")
    rows, cols = input.shape[0], input.shape[1]
    step = sum(int(np.prod(input.shape[k + 1:])) for k in range(input.ndim))
    end = input.numel() if wrap and input.ndim == 2 and rows > cols + 1 else min(rows, cols) * step
    flat = np.arange(0, end, step)
    idx = np.unravel_index(flat, input.shape)
    input[idx] = fill_value
    return input


def diag_embed(input, offset=0, dim1=-2, dim2=-1):
    """Each last-dim vector of ``input`` (..., n) laid on diagonal ``offset``
    of an (n + |offset|)-square matrix whose rows and columns become dims
    ``dim1`` and ``dim2`` of the result (counted in its ndim + 1 dims).
    Differentiable: the matrices are written by item assignment."""
    if not isinstance(input, Tensor):
        raise TypeError(f"diag_embed takes a ddpc tensor, got {type(input).__name__}")
    nd = input.ndim + 1
    d1, d2 = (_ag._dim(input, d, nd) for d in (dim1, dim2))
    if d1 == d2:
        raise ArgumentError(f"diag_embed: diagonal dimensions cannot be identical {dim1}, {dim2}")
    k, n = int(offset), input.shape[-1]
    m = n + abs(k)
    out = zeros(tuple(input.shape[:-1]) + (m, m), dtype=input.dtype, device=input.device)
    rows = np.arange(n) + max(-k, 0)
    out[..., rows, rows + k] = input
    return out.movedim((nd - 2, nd - 1), (d1, d2))


def diagflat(input, offset=0):
    """``input`` flattened, laid on diagonal ``offset`` of a square matrix."""
    return diag_embed(_ag.reshape(input, (-1,)), offset)


def unravel_index(indices, shape):
    """The coordinates in a tensor of ``shape`` of flat (row-major) ``indices``
    (an int or an integer tensor): a tuple of int64 tensors, one per dim, in
    the indices' shape. Negative indices count from the end, as PyTorch's."""
    shape = tuple(int(s) for s in ((shape,) if isinstance(shape, numbers.Integral) else shape))
    if any(s < 0 for s in shape):
        raise ArgumentError(f"unravel_index: 'shape' cannot have negative values, but got {shape}")
    if not isinstance(indices, Tensor):
        indices = tensor(indices, dtype=int64)
    if indices.dtype.is_floating_point:
        raise DtypeError(f"unravel_index: expected 'indices' to be an integer tensor, but got {indices.dtype}")
    size = math.prod(shape)
    flat = indices.detach().to(dtype=int64)
    if flat.numel():
        low, high = _ag._range_of(flat)
        if low < -size or high >= size:
            raise ArgumentError(f"unravel_index: index out of bounds for a tensor of shape {shape}")
    flat = flat % size if size else flat
    coords = []
    for s in reversed(shape):
        coords.append(flat % s if s else flat)
        flat = flat // s if s else flat
    return tuple(reversed(coords))


__all__ = ["atleast_1d", "atleast_2d", "atleast_3d", "broadcast_to", "cartesian_prod", "column_stack", "combinations",
           "cumulative_trapezoid", "diag_embed", "diagflat", "diagonal_scatter", "dsplit", "dstack", "gradient",
           "hsplit", "hstack", "index_copy", "index_fill", "index_reduce", "is_nonzero", "masked_scatter", "put",
           "rot90", "row_stack", "scatter_reduce", "select_scatter", "slice_scatter", "tile", "trapezoid", "trapz",
           "tril_indices", "triu_indices", "unravel_index", "vander", "vsplit", "vstack"]

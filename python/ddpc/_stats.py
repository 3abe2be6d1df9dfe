"""PyTorch's searching, counting, binning and order-statistic functions.

searchsorted, bucketize, cummax and cummin run the binary-search and running-
extreme ops of csrc/ops_search.c on the tensor's device. The order statistics
(median, quantile, kthvalue, mode) sort each line with the sort op and take
their elements with gather, so gradients flow to the selected elements through
gather's backward pass. bincount and histc add into bins with scatter_add.
Everything stays on the tensor's device; bincount reads its largest input on
the host, as PyTorch does, because the result's size depends on it.
"""

import collections
import math
import numbers

from . import _C
from . import autograd as _ag
from ._C import ArgumentError, DtypeError, IndexOutOfRangeError
from ._dtype import bool_, float32, float64, int32, int64, promote
from ._layout import scatter_reduce
from .amp import autocast_op
from .tensor import Tensor, arange, linspace, ones, tensor, zeros

_HALVES = _ag._HALVES

Cummax = collections.namedtuple("cummax", "values indices")
Cummin = collections.namedtuple("cummin", "values indices")
Median = collections.namedtuple("median", "values indices")
Nanmedian = collections.namedtuple("nanmedian", "values indices")
Kthvalue = collections.namedtuple("kthvalue", "values indices")
Mode = collections.namedtuple("mode", "values indices")
Aminmax = collections.namedtuple("aminmax", "min max")
for _t in (Cummax, Cummin, Median, Nanmedian, Kthvalue, Mode, Aminmax):
    _t.__doc__ = f"What {_t.__name__} returns, as torch.return_types.{_t.__name__}."


def _check_tensor(t, what, name="input"):
    if not isinstance(t, Tensor):
        raise TypeError(f"{what}: {name} must be a ddpc.Tensor, got {type(t).__name__}")


# ---- binary search ---------------------------------------------------------------------

def searchsorted(sorted_sequence, input, *, out_int32=False, right=False, side=None, sorter=None):
    """For each element of ``input``, the index in the last dim of
    ``sorted_sequence`` where it would be inserted to keep it sorted: before
    equal elements, or after them with ``right=True`` (or ``side='right'``).
    ``sorted_sequence`` is 1-d or has input's leading dims; ``sorter`` (int64,
    its shape) orders an unsorted sequence, as argsort gives. ``input`` may be
    a number (a 0-d result). A binary search per element on the tensors'
    device; int64 positions, int32 with ``out_int32``. NaN follows PyTorch's
    comparisons: a NaN value goes to the end. A sorter entry out of range
    raises ``IndexOutOfRangeError``; on a GPU the kernel finds it, and the
    error is raised when the host next waits for the device."""
    what = "searchsorted"
    _check_tensor(sorted_sequence, what, "sorted_sequence")
    if side not in (None, "left", "right"):
        raise ArgumentError(f"{what}: side must be 'left' or 'right', got {side!r}")
    if side == "left" and right:
        raise ArgumentError(f"{what}: side and right can't be set to opposites, got side 'left' with right True")
    right = bool(right) or side == "right"
    scalar = not isinstance(input, Tensor)
    values = (tensor(input, dtype=sorted_sequence.dtype, device=sorted_sequence.device) if scalar
              else input.detach())
    if scalar and sorted_sequence.ndim != 1:
        raise ArgumentError(f"{what}: a number as input needs a 1-d sorted_sequence, got {sorted_sequence.ndim} dims")
    if sorted_sequence.ndim == 0:
        raise ArgumentError(f"{what}: sorted_sequence must have at least one dim")
    if sorted_sequence._buf.device != values._buf.device:
        raise ArgumentError(f"{what}: sorted_sequence is on {sorted_sequence.device}, input on {values.device}")
    if sorted_sequence.ndim > 1 and (values.ndim != sorted_sequence.ndim
                                     or values.shape[:-1] != sorted_sequence.shape[:-1]):
        raise ArgumentError(f"{what}: sorted_sequence of shape {sorted_sequence.shape} and input of shape "
                            f"{values.shape} must have the same leading dims, or the sequence must be 1-d")
    dt = promote(sorted_sequence.dtype, values.dtype)
    seq = sorted_sequence.detach().to(dtype=dt).contiguous()
    values = values.to(dtype=dt).contiguous()
    order = None
    if sorter is not None:
        if not isinstance(sorter, Tensor) or sorter.dtype is not int64 or sorter.shape != seq.shape:
            raise ArgumentError(f"{what}: sorter must be an int64 tensor of sorted_sequence's shape {seq.shape}")
        order = sorter.detach().contiguous()
    out = _ag._empty(values.shape, values, int32 if out_int32 else int64)
    _C.searchsorted(out._buf, seq._buf, values._buf, None if order is None else order._buf, right)
    return out


def bucketize(input, boundaries, *, out_int32=False, right=False):
    """The bucket of each element of ``input`` among the sorted 1-d
    ``boundaries``: i with boundaries[i-1] < x <= boundaries[i], or
    boundaries[i-1] <= x < boundaries[i] with ``right=True``
    (searchsorted(boundaries, input, right=right))."""
    _check_tensor(boundaries, "bucketize", "boundaries")
    if boundaries.ndim != 1:
        raise ArgumentError(f"bucketize: boundaries must be 1-d, got shape {boundaries.shape}")
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)


# ---- running extremes ------------------------------------------------------------------

def _cum_extreme(input, dim, want_max, result):
    _check_tensor(input, result.__name__)
    d = _ag._dim(input, dim)
    x = input.detach().contiguous()
    if input.ndim == 0:
        x = x.reshape(1)
    values, indices = _ag._empty(x.shape, x), _ag._empty(x.shape, x, int64)
    _C.cum_extreme(values._buf, indices._buf, x._buf, d, want_max)
    values, indices = values.reshape(input.shape), indices.reshape(input.shape)
    if _ag._needs_grad(input) and input.dtype.is_floating_point:
        _ag._attach(values, _ag._GatherBackward(input, d, indices) if input.ndim else _ag._CloneBackward((input,)))
    return result(values, indices)


def cummax(input, dim):
    """(values, indices): the running maximum along ``dim`` and the index it was
    taken at, as PyTorch: a NaN propagates, ties take the latest index. The
    gradient goes to the selected elements."""
    return _cum_extreme(input, dim, True, Cummax)


def cummin(input, dim):
    """(values, indices): the running minimum along ``dim``, as cummax."""
    return _cum_extreme(input, dim, False, Cummin)


# ---- order statistics ------------------------------------------------------------------

def _line(input, dim, what):
    """(a, d): input with dim d to reduce (None flattens), refusing an empty dim."""
    _check_tensor(input, what)
    a = input.reshape(-1) if dim is None else (input.reshape(1) if input.ndim == 0 else input)
    d = 0 if dim is None else _ag._dim(input, dim)
    if a.shape[d] == 0:
        raise IndexError(f"{what}: cannot compute it over a dim of size 0 (dim {d} of shape {input.shape})")
    return a, d


def _nan_count(a, d):
    """The NaN per line along d (kept), int64; zeros for integer dtypes."""
    if not a.dtype.is_floating_point:
        return _ag._like_scalar(0, a).to(dtype=int64)
    return _ag.sum(_ag.isnan(a.detach()).to(dtype=int64), d, keepdim=True)


def _take(a, d, indices, keepdim, input, dim):
    """The elements of a at ``indices`` (int64, kept dim d): (values, indices),
    values differentiable through gather, shaped as a reduction of input over dim."""
    values = _ag.gather(a, d, indices)
    if dim is None:
        return values.reshape(()), indices.reshape(())
    if not keepdim or input.ndim == 0:
        shape = input.shape[:d] + input.shape[d + 1:] if input.ndim else ()
        values, indices = values.reshape(shape), indices.reshape(shape)
    return values, indices


# Positions per line up to which selecting each one (linear time) beats one sort of the line
# (measured on lines of 1000: two selections take 0.7x the sort, six 1.7x).
_SELECTS_PER_SORT = 2


def _sorted_positions(a, d, pos):
    """Where the elements at stable sorted positions ``pos`` (int64, a's shape
    but for dim d) along d of a came from: selected per line without sorting
    on the host, read off the sorted order on a GPU or for many positions."""
    d %= a.ndim
    with _ag.no_grad():
        if a.is_cuda or pos.shape[d] > _SELECTS_PER_SORT:
            return _ag.gather(_ag._sort(a, d, False)[1], d, pos)
        x = a.detach().contiguous()
        if x.dtype.name == "bool":  # no bool loop in the C select: select the same bytes as uint8
            x = _ag._retyped(x, "uint8")
        columns = []
        for j in range(pos.shape[d]):
            at = pos.narrow(d, j, 1).contiguous()
            columns.append(_ag._empty(at.shape, x, int64))
            _C.select_dim(columns[-1]._buf, x._buf, d, at._buf)
        return columns[0] if len(columns) == 1 else _ag.cat(columns, d)


def _order_stat(input, dim, keepdim, what, position):
    """(values, indices) of the element at sorted position position(n, nan_count) along dim."""
    a, d = _line(input, dim, what)
    n = a.shape[d]
    with _ag.no_grad():
        pos = position(n, _nan_count(a, d))
        pos = _ag.expand(pos, a.shape[:d] + (1,) + a.shape[d + 1:]).contiguous()
    return _take(a, d, _sorted_positions(a, d, pos), keepdim, input, dim)


def _half_down(t):
    """floor(t / 2) of a non-negative int64 tensor."""
    return _ag.floor(_ag.div(t.to(dtype=float64), 2.0)).to(dtype=int64)


def _median_position(n, nans):
    # The lower of the two middle elements; a line holding NaN gives its first NaN, as PyTorch.
    return _ag.where(nans > 0, _ag.rsub(nans, n), _ag._like_scalar((n - 1) // 2, nans))


def _nanmedian_position(n, nans):
    return _half_down(_ag.clamp_min(_ag.rsub(nans, n - 1), 0))


def median(input, dim=None, keepdim=False):
    """The median: the lower of the two middle values of an even count. Without
    ``dim``, a 0-d tensor over all elements; with it, (values, indices) along
    it. NaN anywhere in a line makes its median NaN (the first NaN's index)."""
    if dim is None:
        if input.numel() == 0:
            if not input.dtype.is_floating_point:
                raise IndexError("median: an empty integer tensor has no median")
            return _ag._like_scalar(math.nan, input)
        return _ag._tied(input, _order_stat(input.detach(), None, False, "median", _median_position)[0])
    return Median(*_order_stat(input, dim, keepdim, "median", _median_position))


def nanmedian(input, dim=None, keepdim=False):
    """median ignoring NaN: the lower middle value of the elements that are not
    NaN (NaN where all are)."""
    if dim is None:
        if input.numel() == 0:
            return median(input)
        return _ag._tied(input, _order_stat(input.detach(), None, False, "nanmedian", _nanmedian_position)[0])
    return Nanmedian(*_order_stat(input, dim, keepdim, "nanmedian", _nanmedian_position))


def kthvalue(input, k, dim=-1, keepdim=False):
    """(values, indices): the k-th smallest element along ``dim`` (k from 1; NaN
    counts as the largest value, ties in index order). Bool tensors are taken
    too (False below True), which PyTorch refuses."""
    a, d = _line(input, dim, "kthvalue")
    n = a.shape[d]
    if not isinstance(k, numbers.Integral) or not 1 <= k <= n:
        raise IndexOutOfRangeError(f"kthvalue: k={k} is out of range for a dim of size {n}")
    return Kthvalue(*_order_stat(input, dim, keepdim, "kthvalue",
                                 lambda n, nans: _ag._like_scalar(k - 1, nans)))


def mode(input, dim=-1, keepdim=False):
    """(values, indices): the most frequent value along ``dim`` (the smallest
    among equally frequent ones) and the index of its last occurrence, as
    PyTorch's. Every NaN counts as distinct."""
    a, d = _line(input, dim, "mode")
    values, order = _ag._sort(a, d, False)
    n = a.shape[d]
    with _ag.no_grad():
        # Each sorted element's run of equal values starts at the latest
        # position up to it where the value differs from the one before.
        steps = arange(n, device=a.device).reshape((n,) + (1,) * (a.ndim - d - 1))
        starts = ones(values.narrow(d, 0, 1).shape, dtype=bool_, device=a.device)
        if n > 1:
            starts = _ag.cat([starts, values.narrow(d, 1, n - 1)._compare(values.narrow(d, 0, n - 1), _ag._NE)], d)
        run_length = _ag.sub(steps, cummax(_ag.where(starts, steps, 0), d).values)
        pos = _ag.argmax(run_length, d, keepdim=True)
    return Mode(*_take(a, d, _ag.gather(order, d, pos), keepdim, input, dim))


def aminmax(input, *, dim=None, keepdim=False):
    """(min, max) of input over all elements, or along ``dim`` (empty where the
    other dims are, as PyTorch's)."""
    _check_tensor(input, "aminmax")
    if dim is None:
        if input.numel() == 0:
            raise ArgumentError("aminmax: cannot compute it over an empty tensor; give a dim of non-zero size")
        flat = input.reshape(-1)
        shape = (1,) * input.ndim if keepdim else ()
        return Aminmax(_ag.amin(flat, 0).reshape(shape), _ag.amax(flat, 0).reshape(shape))
    return Aminmax(_ag.amin(input, dim, keepdim), _ag.amax(input, dim, keepdim))


_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile(input, q, dim, keepdim, interpolation, ignore_nan, what):
    _check_tensor(input, what)
    if input.dtype not in (float32, float64):
        raise DtypeError(f"{what}: the input must be float32 or float64, got {input.dtype}")
    if interpolation not in _INTERPOLATIONS:
        raise ArgumentError(f"{what}: interpolation must be one of {', '.join(_INTERPOLATIONS)}, got {interpolation!r}")
    scalar_q = not isinstance(q, Tensor) or q.ndim == 0
    if isinstance(q, Tensor):
        if q.ndim > 1:
            raise ArgumentError(f"{what}: q must be a number or a 0- or 1-d tensor, got shape {q.shape}")
        if q.dtype is not input.dtype:
            raise DtypeError(f"{what}: q is {q.dtype} but the input is {input.dtype}")
        if q._buf.device != input._buf.device:
            raise ArgumentError(f"{what}: q is on {q.device}, the input on {input.device}")
        qs = q.detach().reshape(-1)
        if qs.numel() and bool(_ag.any_(_ag.logical_or(qs < 0, qs > 1))):
            raise ArgumentError(f"{what}: q values must be in the range [0, 1]")
    else:
        if not 0 <= q <= 1:
            raise ArgumentError(f"{what}: q must be in the range [0, 1], got {q}")
        qs = tensor([float(q)], dtype=input.dtype, device=input.device)
    if input.numel() == 0:  # also along a dim that has elements, as PyTorch's
        raise ArgumentError(f"{what}: the input must be non-empty, got shape {input.shape}")
    a, d = _line(input, dim, what)
    a = a.movedim(d, -1) if d != a.ndim - 1 else a
    n = a.shape[-1]
    with _ag.no_grad():
        nans = _nan_count(a, -1).to(dtype=a.dtype)
        qs_line = qs.reshape((1,) * (a.ndim - 1) + (-1,))
        if ignore_nan:  # over the elements that are not NaN; all NaN gives rank 0, a NaN
            rank = _ag.mul(qs_line, _ag.clamp_min(_ag.rsub(nans, n - 1), 0))
        else:  # a line holding NaN takes its last element, a NaN
            rank = _ag.where(nans > 0, float(n - 1), _ag.mul(qs_line, float(n - 1)))
        if interpolation == "nearest":
            rank = _ag.round(rank)
        lower, upper = _ag.floor(rank), _ag.ceil(rank)
        if interpolation == "lower":
            upper = lower
        elif interpolation == "higher":
            lower = upper
        weight = _ag.sub(rank, lower)
        lower = lower.to(dtype=int64).contiguous()
        upper = upper.to(dtype=int64).contiguous()
        both = interpolation not in ("lower", "higher", "nearest")
        count = lower.shape[-1]
        where = _sorted_positions(a, -1, _ag.cat([lower, upper], -1) if both else lower)
    below = _ag.gather(a, -1, where.narrow(-1, 0, count))
    if both:
        above = _ag.gather(a, -1, where.narrow(-1, count, count))
        out = _ag.lerp(below, above, 0.5 if interpolation == "midpoint" else weight)
    else:
        out = below
    out = out.movedim(-1, 0)  # (q, the other dims in order)
    if keepdim:  # a 0-d input stays 0-d, as in PyTorch
        kept = (1,) * input.ndim if dim is None or not input.ndim else input.shape[:d] + (1,) + input.shape[d + 1:]
        out = out.reshape(out.shape[:1] + kept)
    return out.reshape(out.shape[1:]) if scalar_q else out


@autocast_op("float32_cpu")
def quantile(input, q, dim=None, keepdim=False, *, interpolation="linear"):
    """The q-th quantiles of input (over all elements, or along ``dim``): q a
    number or a 0- or 1-d tensor of input's dtype in [0, 1]; a 1-d q adds a
    leading dim. Between two sorted elements ``interpolation`` takes 'linear',
    'lower', 'higher', 'midpoint' or 'nearest' (half to even). float32 and
    float64; a line holding NaN gives NaN. Differentiable. A tensor q is
    checked on the host (one read), as PyTorch checks it."""
    return _quantile(input, q, dim, keepdim, interpolation, False, "quantile")


@autocast_op("float32_cpu")
def nanquantile(input, q, dim=None, keepdim=False, *, interpolation="linear"):
    """quantile over the elements that are not NaN (NaN where all are)."""
    return _quantile(input, q, dim, keepdim, interpolation, True, "nanquantile")


# ---- counting and binning --------------------------------------------------------------

def bincount(input, weights=None, minlength=0):
    """How often each value 0, 1, ... occurs in the 1-d non-negative integer
    ``input`` (at least ``minlength`` bins), or the sum of ``weights`` per
    value. int64 without weights; with them their dtype for float32 and
    float64, float64 otherwise (as PyTorch). The bins are added on input's
    device; its largest value reaches the host (the result's size depends on
    it). Not differentiable."""
    _check_tensor(input, "bincount")
    if input.ndim != 1 or input.dtype.is_floating_point:
        raise ArgumentError(f"bincount: input must be a 1-d integer tensor, got shape {input.shape} {input.dtype}")
    if not isinstance(minlength, numbers.Integral) or minlength < 0:
        raise ArgumentError(f"bincount: minlength must be a non-negative int, got {minlength}")
    if weights is not None and (not isinstance(weights, Tensor) or weights.shape != input.shape):
        raise ArgumentError("bincount: weights must be a tensor of input's shape")
    with _ag.no_grad():
        idx = input.detach().to(dtype=int64).contiguous()
        size = minlength
        if idx.numel():
            lo, hi = _ag.stack(list(aminmax(idx))).tolist()  # one read from the device
            if lo < 0:
                raise ArgumentError(f"bincount: input must be non-negative, got {lo}")
            size = max(size, hi + 1)
        if weights is None:
            dt, src = int64, ones(idx.shape, dtype=int64, device=input.device)
        else:
            dt = weights.dtype if weights.dtype in (float32, float64) else float64
            src = weights.detach().to(dtype=dt).contiguous()
        return _ag.scatter_add(zeros(size, dtype=dt, device=input.device), 0, idx, src)


def _dense_ranks(x):
    """Each element's rank within its column of the 2-d x, equal values
    sharing one (0, 1, ... with no gaps; every NaN its own, last): one sort
    of every column, a running count of the value changes, scattered back."""
    n, m = x.shape
    values, order = _ag._sort(x, 0, False)
    changes = (values.narrow(0, 1, n - 1) != values.narrow(0, 0, n - 1)).to(dtype=int64)
    runs = _ag.cumsum(_ag.cat([zeros((1, m), dtype=int64, device=x.device), changes]), 0)
    ranks = _ag._empty((n, m), runs)
    _C.scatter_dim(ranks._buf, runs._buf, order._buf, 0, False)
    return ranks


def _unique_dim(input, dim, return_inverse=False, return_counts=False):
    """unique(input, dim=dim): the distinct slices along ``dim`` in
    lexicographic order (always sorted, as PyTorch's), with each slice's
    position among them and their counts. A slice holding NaN equals no
    other. On input's device, without a loop over slices: the ranks of each
    column of the slices, then of pairs of rank columns, log2(slice size)
    times, until one rank per slice remains; the number of distinct slices
    reaches the host. Not differentiable."""
    _check_tensor(input, "unique")
    d = _ag._dim(input, dim)
    if any(s == 0 for i, s in enumerate(input.shape) if i != d):
        raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so unique cannot be applied")
    n = input.shape[d]
    with _ag.no_grad():
        front = _ag.permute(input.detach(), _ag._to_front(input, d)).contiguous()
        if n == 0:
            empty = zeros(0, dtype=int64, device=input.device)
            out = [_ag.clone(input.detach())] + [empty] * (bool(return_inverse) + bool(return_counts))
            return out[0] if len(out) == 1 else tuple(out)
        ranks = _dense_ranks(front.reshape(n, math.prod(front.shape[1:])))
        while ranks.shape[1] > 1:  # ranks below n: a pair of them, as r0 * n + r1, fits in int64
            if ranks.shape[1] % 2:
                ranks = _ag.cat([ranks, zeros((n, 1), dtype=int64, device=input.device)], 1)
            pairs = ranks.reshape(n, ranks.shape[1] // 2, 2)
            ranks = _dense_ranks(pairs.select(2, 0) * n + pairs.select(2, 1))
        rank = ranks.reshape(n)
        k = int(_ag.amax(rank, 0).item()) + 1
        first = scatter_reduce(zeros(k, dtype=int64, device=input.device) + n, 0, rank,
                               arange(n, device=input.device), "amin")
        out = [_ag.permute(front.index_select(0, first), _ag._from_front(input, d)).contiguous()]
        if return_inverse:
            out.append(rank)
        if return_counts:
            out.append(_ag.scatter_add(zeros(k, dtype=int64, device=input.device), 0, rank,
                                       ones(n, dtype=int64, device=input.device)))
    return out[0] if len(out) == 1 else tuple(out)


def histc(input, bins=100, min=0, max=0):
    """A histogram of ``bins`` equal bins over [min, max] (the data's own range
    when min and max are equal, widened by 1 each way if all elements are
    equal); elements outside the range and NaN are not counted, the last bin
    includes max. Float input; the counts have its dtype. The data's range is
    read to the host, as PyTorch reads it, to refuse one that is not finite
    (the data holds NaN or an infinity)."""
    _check_tensor(input, "histc")
    if not input.dtype.is_floating_point:
        raise DtypeError(f"histc: the input must be a floating tensor, got {input.dtype}")
    if not isinstance(bins, numbers.Integral) or bins <= 0:
        raise ArgumentError(f"histc: bins must be a positive int, got {bins}")
    if min > max:
        raise ArgumentError(f"histc: max must be larger than min, got min {min} and max {max}")
    if not (math.isfinite(min) and math.isfinite(max)):
        raise ArgumentError(f"histc: range of [{min}, {max}] is not finite")
    with _ag.no_grad():
        x = input.detach().reshape(-1).to(dtype=float64)
        lo = _ag._like_scalar(float(min), x)
        hi = _ag._like_scalar(float(max), x)
        if min == max and x.numel():
            lo, hi = _ag.amin(x, 0), _ag.amax(x, 0)
            data_lo, data_hi = lo.item(), hi.item()
            if not (math.isfinite(data_lo) and math.isfinite(data_hi)):
                raise ArgumentError(f"histc: range of [{data_lo}, {data_hi}] is not finite")
        if min == max:
            same = lo == hi
            lo, hi = _ag.where(same, _ag.sub(lo, 1.0), lo), _ag.where(same, _ag.add(hi, 1.0), hi)
        inside = _ag.logical_and(x >= lo, x <= hi)
        at = _ag.floor(_ag.div(_ag.mul(_ag.sub(x, lo), float(bins)), _ag.sub(hi, lo)))
        at = _ag.where(inside, _ag.clamp(at, 0.0, float(bins - 1)), float(bins)).to(dtype=int64)
        counts = _ag.scatter_add(zeros(bins + 1, dtype=int64, device=input.device), 0, at.contiguous(),
                                 ones(at.shape, dtype=int64, device=input.device))
        return counts.narrow(0, 0, bins).to(dtype=input.dtype)


Histogram = collections.namedtuple("histogram", "hist bin_edges")
Histogramdd = collections.namedtuple("histogramdd", "hist bin_edges")
Histogram.__doc__ = "What histogram returns, as torch.return_types.histogram: (hist, bin_edges)."
Histogramdd.__doc__ = "What histogramdd returns, as torch.return_types.histogramdd: (hist, bin_edges)."


def _bin_edges(points, bins, bounds, what):
    """The edges (one tensor per dim, in points' dtype) of histogramdd's bins
    over the (N, D) points: given, or ``bins`` equal bins over ``range`` or
    the data's range (widened by 0.5 each way when all values are equal);
    ``bounds`` is histogramdd's ``range``. Equal bins' edges are linspace's,
    correctly rounded to the dtype (PyTorch's may differ in the last bit)."""
    d = points.shape[1]
    if isinstance(bins, Tensor) or (isinstance(bins, (list, tuple)) and bins and isinstance(bins[0], Tensor)):
        edges = [bins] if isinstance(bins, Tensor) else list(bins)
        if len(edges) != d:
            raise ArgumentError(f"{what}: expected {d} bin tensors, got {len(edges)}")
        for e in edges:
            if e.ndim != 1 or e.numel() < 1:
                raise ArgumentError(f"{what}: bins tensors must be 1-d with at least one edge")
            if e.dtype is not points.dtype:
                raise DtypeError(f"{what}: input tensor and bins tensors should have the same dtype, got "
                                 f"{points.dtype} and {e.dtype}")
            if e.numel() > 1 and bool(_ag.any_(_ag.diff(e.detach()) < 0)):
                raise ArgumentError(f"{what}: bin edges must not decrease")
        return [e.detach().to(device=points.device) for e in edges]
    counts = [bins] * d if isinstance(bins, numbers.Integral) else [int(b) for b in bins]
    if len(counts) != d or any(c <= 0 for c in counts):
        raise ArgumentError(f"{what}: expected {d} positive bin counts, got {bins}")
    if bounds is not None:
        bounds = [float(r) for r in bounds]
        if len(bounds) != 2 * d:
            raise ArgumentError(f"{what}: expected {2 * d} range values (a min and a max per dim), got {len(bounds)}")
        lows, highs = bounds[0::2], bounds[1::2]
    elif points.shape[0]:
        low, high = aminmax(points, dim=0)
        lows, highs = _ag.stack([low, high]).to(dtype=float64).tolist()  # one read from the device
    else:
        lows, highs = [0.0] * d, [1.0] * d
    edges = []
    for k, (lo, hi, n) in enumerate(zip(lows, highs, counts)):
        if lo > hi:
            raise ArgumentError(f"{what}: min should not exceed max, but got min {lo} max {hi} for dimension {k}")
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ArgumentError(f"{what}: dimension {k}'s range [{lo}, {hi}] is not finite")
        if lo == hi and bounds is None:
            lo, hi = lo - 0.5, hi + 0.5
        edges.append(linspace(lo, hi, n + 1, dtype=points.dtype, device=points.device))
    return edges


def _histogramdd(points, bins, bounds, weight, density, what):
    """(hist, edges) of the (N, D) points: each point's bin along each dim is
    where a binary search puts it among the edges (the last bin holding its
    right edge), the bins are added with scatter_add on the points' device."""
    if not points.dtype.is_floating_point:
        raise DtypeError(f"{what}: expected a floating tensor, got {points.dtype}")
    if weight is not None and (not isinstance(weight, Tensor) or weight.numel() != points.shape[0]):
        raise ArgumentError(f"{what}: weight must be a tensor with one element per point")
    edges = _bin_edges(points, bins, bounds, what)
    with _ag.no_grad():
        x = points.detach()
        sizes = [e.numel() - 1 for e in edges]
        flat = zeros(x.shape[0], dtype=int64, device=x.device)
        inside = ones(x.shape[0], dtype=bool_, device=x.device)
        for k, e in enumerate(edges):  # one pass per dim
            col = x.select(1, k).contiguous()
            last = e.narrow(0, e.numel() - 1, 1)
            at = _ag.sub(searchsorted(e, col, right=True), 1)
            at = _ag.where(col == last, sizes[k] - 1, at)
            inside = _ag.logical_and(inside, _ag.logical_and(at >= 0, at < sizes[k]))
            flat = _ag.add(_ag.mul(flat, sizes[k]), at)
        total = math.prod(sizes)
        flat = _ag.where(inside, flat, total).contiguous()
        # Counts add exactly (and so deterministically) in int64, weights in float64.
        dt = int64 if weight is None else float64
        src = ones(x.shape[0], dtype=int64, device=x.device) if weight is None else \
            weight.detach().reshape(-1).to(dtype=float64).contiguous()
        hist = _ag.scatter_add(zeros(total + 1, dtype=dt, device=x.device), 0, flat, src).narrow(0, 0, total)
        hist = hist.reshape(sizes).to(dtype=float64)
        if density:
            volume = ones(sizes, dtype=float64, device=x.device)
            for k, e in enumerate(edges):
                width = _ag.diff(e.to(dtype=float64))
                volume = _ag.mul(volume, width.reshape([-1 if i == k else 1 for i in range(len(sizes))]))
            hist = _ag.div(hist, _ag.mul(_ag.sum(hist), volume))
        return hist.to(dtype=points.dtype), edges



def histogram(input, bins, *, range=None, weight=None, density=False):
    """(hist, bin_edges): the counts (or sums of ``weight``) of input's
    elements in ``bins`` equal bins over ``range`` (min, max), or the data's
    range, or between the edges of a 1-d ``bins`` tensor; each bin holds its
    left edge, the last one its right edge too; elements outside and NaN are
    not counted. ``density`` divides by the total and the bin widths. Float
    input; hist has its dtype. As PyTorch's; bins edges that decrease are
    refused, where PyTorch's result is undefined. Not differentiable."""
    _check_tensor(input, "histogram")
    if weight is not None and (not isinstance(weight, Tensor) or weight.shape != input.shape):
        raise ArgumentError("histogram: weight must be a tensor of input's shape")
    hist, edges = _histogramdd(input.reshape(-1, 1), bins, range, weight, density, "histogram")
    return Histogram(hist, edges[0])


def histogramdd(input, bins, *, range=None, weight=None, density=False):
    """(hist, bin_edges) of the points in input's last dim (N points of D
    coordinates in an (..., D) tensor): a D-dim histogram whose bins are
    given per dim as counts (an int for all dims, or a list) over ``range``
    (a min and a max per dim, flat) or the data's range, or as tensors of
    edges; the rest as histogram."""
    _check_tensor(input, "histogramdd")
    if input.ndim < 1:
        raise ArgumentError("histogramdd: input must have at least 1 dim")
    if weight is not None and (not isinstance(weight, Tensor) or weight.shape != input.shape[:-1]):
        raise ArgumentError(f"histogramdd: weight must be a tensor of shape {input.shape[:-1]}")
    hist, edges = _histogramdd(input.reshape(-1, input.shape[-1]), bins, range, weight, density, "histogramdd")
    return Histogramdd(hist, tuple(edges))


def isin(elements, test_elements, *, assume_unique=False, invert=False):
    """Whether each element of ``elements`` is in ``test_elements`` (either
    may be a number), as bool in elements' shape; ``invert`` negates it.
    A binary search of each element in the sorted test elements on the
    tensors' device; ``assume_unique`` changes nothing. NaN is in nothing."""
    if not isinstance(elements, Tensor) and not isinstance(test_elements, Tensor):
        raise TypeError("isin takes at least one ddpc tensor")
    device = (elements if isinstance(elements, Tensor) else test_elements).device
    if not isinstance(elements, Tensor):
        elements = tensor(elements, device=device)
    if not isinstance(test_elements, Tensor):
        test_elements = tensor([test_elements], device=device)
    common = promote(elements.dtype, test_elements.dtype)
    with _ag.no_grad():
        values = elements.detach().to(dtype=common)
        pool = _ag.sort(test_elements.detach().reshape(-1).to(dtype=common))[0]
        if pool.numel() == 0:
            found = zeros(values.shape, dtype=bool_, device=device)
        else:
            # The binary search needs a pool without NaN (sorted last): they take
            # the largest other value; a hit on one of them counts for nothing.
            is_nan = _ag.isnan(pool)
            filled = _ag.where(is_nan, _ag.amax(_ag.where(is_nan, -math.inf, pool)), pool) \
                if common.is_floating_point else pool
            at = searchsorted(filled, values.reshape(-1)).clamp_max(pool.numel() - 1)
            hit = _ag.logical_and(filled.index_select(0, at) == values.reshape(-1),
                                  _ag.logical_not(is_nan.index_select(0, at)))
            found = hit.reshape(values.shape)
    return _ag.logical_not(found) if invert else found


__all__ = ["aminmax", "bincount", "bucketize", "cummax", "cummin", "histc", "histogram", "histogramdd", "isin",
           "kthvalue", "median", "mode", "nanmedian", "nanquantile", "quantile", "searchsorted"]

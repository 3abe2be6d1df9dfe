"""PyTorch's products, contractions and distances (einsum, tensordot, kron,
cdist, the add*-products, cross, diagonal and trace), composed of autograd.py's
permute, reshape, index, matmul and reductions, so their gradients come from
those ops' backward passes. Index arrays built with numpy are host-side
metadata (a few integers per selected row or diagonal element).
"""

import math
import numbers

import numpy as np

from . import _indexing
from . import autograd as _ag
from ._C import ArgumentError, DtypeError
from ._dtype import float32
from .amp import autocast_op
from .tensor import Tensor, _CopyOf, tensor, zeros


def _check_tensors(what, *tensors):
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"{what} takes ddpc tensors, got {type(t).__name__}")


# ---- diagonals ------------------------------------------------------------------------

def diagonal(input, offset=0, dim1=0, dim2=1):
    """The elements input[..., i, i + offset] of the dims dim1 and dim2, as a new
    last dim (a copy where PyTorch gives a view; differentiable)."""
    _check_tensors("diagonal", input)
    if input.ndim < 2:
        raise ArgumentError(f"diagonal: needs at least 2 dims, got shape {input.shape}")
    d1, d2 = _ag._dim(input, dim1), _ag._dim(input, dim2)
    if d1 == d2:
        raise ArgumentError(f"diagonal: dim1 and dim2 are both dim {d1}")
    x = input.movedim((d1, d2), (-2, -1))
    rows, cols = x.shape[-2], x.shape[-1]
    k = int(offset)
    i = np.arange(max(0, -k), max(max(0, -k), min(rows, cols - k)))
    out = x[(Ellipsis, i, i + k)]
    # A write into it (K.diagonal().add_(eps)) goes back into input, as through PyTorch's view:
    # the diagonal is the region of x's elements (cols + 1) apart from its first.
    strides = _indexing.contiguous_strides(x.shape)
    first = int(i[0]) * cols + int(i[0]) + k if len(i) else 0
    out._not_a_view = _CopyOf(x, _indexing.Region(first, out.shape, strides[:-2] + (cols + 1,)), "diagonal")
    return out


@autocast_op("float32_cpu")
def trace(input):
    """The sum of the main diagonal of a 2-d tensor (integers sum to int64)."""
    if not isinstance(input, Tensor) or input.ndim != 2:
        raise ArgumentError(f"trace: expected a 2-d tensor, got {getattr(input, 'shape', type(input).__name__)}")
    return _ag.sum(diagonal(input))


def block_diag(*tensors):
    """The tensors (0-, 1- or 2-d; a 1-d one is a row) as blocks along the diagonal
    of a 2-d tensor of their promoted dtype, zeros elsewhere."""
    _check_tensors("block_diag", *tensors)
    blocks = []
    for t in tensors:
        if t.ndim > 2:
            raise ArgumentError(f"block_diag: the tensors must have at most 2 dims, got shape {t.shape}")
        blocks.append(t.reshape((1,) * (2 - t.ndim) + t.shape))
    if not blocks:
        return zeros(1, 0)
    dt = blocks[0].dtype
    for b in blocks[1:]:
        dt = _ag.promote(dt, b.dtype)
    width = sum(b.shape[1] for b in blocks)
    rows, at = [], 0
    for b in blocks:
        left = zeros(b.shape[0], at, dtype=dt, device=b.device)
        right = zeros(b.shape[0], width - at - b.shape[1], dtype=dt, device=b.device)
        rows.append(_ag.cat([left, b.to(dtype=dt), right], 1))
        at += b.shape[1]
    return _ag.cat(rows, 0)


# ---- matrix products with an added term ---------------------------------------------------

def _scaled_sum(input, product, beta, alpha):
    """beta * input + alpha * product, broadcast; with beta 0, input is ignored
    (NaN and inf in it do not propagate), as in PyTorch."""
    product = product if alpha == 1 else _ag.mul(product, alpha)
    if _ag._broadcast_shape(input.shape, product.shape) != product.shape:
        raise ArgumentError(f"the added tensor's shape {input.shape} does not broadcast to the product's "
                            f"{product.shape}")
    if beta == 0:
        return product
    return _ag.add(product, input if beta == 1 else _ag.mul(input, beta))


@autocast_op("lower")
def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """beta * input + alpha * (batch1 @ batch2), batch by batch."""
    return _scaled_sum(input, _ag.bmm(batch1, batch2), beta, alpha)


@autocast_op("lower")
def addbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """beta * input + alpha * the sum over the batch of batch1[i] @ batch2[i]."""
    return _scaled_sum(input, _ag.sum(_ag.bmm(batch1, batch2), 0), beta, alpha)


def addmv(input, mat, vec, *, beta=1, alpha=1):
    """beta * input + alpha * (mat @ vec)."""
    return _scaled_sum(input, _ag.mv(mat, vec), beta, alpha)


def addr(input, vec1, vec2, *, beta=1, alpha=1):
    """beta * input + alpha * outer(vec1, vec2)."""
    return _scaled_sum(input, _ag.outer(vec1, vec2), beta, alpha)


# ---- contractions ------------------------------------------------------------------------

def tensordot(a, b, dims=2):
    """The sum over the last ``dims`` dims of a and the first ``dims`` of b (or over
    the dims listed in ``dims = (dims_a, dims_b)``) of their product: one matmul."""
    _check_tensors("tensordot", a, b)
    if isinstance(dims, numbers.Integral):
        if dims < 0:
            raise ArgumentError(f"tensordot: dims must be non-negative, got {dims}")
        da, db = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        da, db = ([d] if isinstance(d, numbers.Integral) else list(d) for d in dims)
    da, db = [_ag._dim(a, d) for d in da], [_ag._dim(b, d) for d in db]
    if len(da) != len(db) or any(a.shape[i] != b.shape[j] for i, j in zip(da, db)):
        raise ArgumentError(f"tensordot: dims {da} of shape {a.shape} and {db} of shape {b.shape} do not match")
    free_a = [d for d in range(a.ndim) if d not in da]
    free_b = [d for d in range(b.ndim) if d not in db]
    k = math.prod(a.shape[d] for d in da)
    x = _ag.reshape(_ag.permute(a, free_a + da), (math.prod(a.shape[d] for d in free_a), k))
    y = _ag.reshape(_ag.permute(b, db + free_b), (k, math.prod(b.shape[d] for d in free_b)))
    return _ag.reshape(_ag.matmul(x, y), tuple(a.shape[d] for d in free_a) + tuple(b.shape[d] for d in free_b))


def kron(input, other):
    """The Kronecker product: block (i, j, ...) of the result is a[i, j, ...] * b."""
    _check_tensors("kron", input, other)
    n = max(input.ndim, other.ndim)
    sa, sb = (1,) * (n - input.ndim) + input.shape, (1,) * (n - other.ndim) + other.shape
    x = _ag.reshape(input, tuple(v for s in sa for v in (s, 1)))
    y = _ag.reshape(other, tuple(v for s in sb for v in (1, s)))
    return _ag.reshape(_ag.mul(x, y), tuple(p * q for p, q in zip(sa, sb)))


def _parse_operand(term, ndim, what):
    """The labels of one einsum operand: letters, and ('...', i) for each dim the ellipsis covers."""
    if term.count("...") > 1 or "." in term.replace("...", ""):
        raise ArgumentError(f"{what}: invalid subscripts {term!r}")
    head, dots, tail = term.partition("...")
    for c in head + tail:
        if not c.isalpha():
            raise ArgumentError(f"{what}: invalid subscript {c!r}: subscripts are letters and '...'")
    n_ell = ndim - len(head) - len(tail) if dots else 0
    if n_ell < 0 or (not dots and len(head) != ndim):
        raise ArgumentError(f"{what}: subscripts {term!r} do not fit an operand of {ndim} dims")
    return list(head) + [("...", i) for i in range(n_ell)] + list(tail), n_ell


def _take_diagonals(t, labels):
    """t with each label repeated in ``labels`` reduced to its diagonal (moved last)."""
    while True:
        dup = next((lab for lab in labels if labels.count(lab) > 1), None)
        if dup is None:
            return t, labels
        i = labels.index(dup)
        j = labels.index(dup, i + 1)
        if t.shape[i] != t.shape[j]:
            raise ArgumentError(f"einsum: subscript {dup!r} is repeated for dims of sizes {t.shape[i]} and "
                                f"{t.shape[j]}")
        t = diagonal(t, 0, i, j)
        labels = [lab for k, lab in enumerate(labels) if k not in (i, j)] + [dup]


def _sum_labels(t, labels, gone):
    dims = [k for k, lab in enumerate(labels) if lab in gone]
    if not dims:
        return t, labels
    return _ag.sum(t, dims), [lab for lab in labels if lab not in gone]


def _contract(x, lx, y, ly, keep):
    """The product of two labelled operands summed over the labels they share
    that ``keep`` does not hold, as one batched matmul."""
    shared = [lab for lab in lx if lab in ly]
    batch = [lab for lab in shared if lab in keep]
    summed = [lab for lab in shared if lab not in keep]
    only_x = [lab for lab in lx if lab not in ly]
    only_y = [lab for lab in ly if lab not in lx]
    size = {}
    for t, labels in ((x, lx), (y, ly)):
        for lab, s in zip(labels, t.shape):
            size[lab] = s if size.get(lab, 1) == 1 else size[lab]
    # A summed dim of size 1 on one side broadcasts over the other's.
    x = _ag.expand(x, tuple(size[lab] if lab in summed else s for lab, s in zip(lx, x.shape)))
    y = _ag.expand(y, tuple(size[lab] if lab in summed else s for lab, s in zip(ly, y.shape)))
    x = _ag.permute(x, [lx.index(lab) for lab in batch + only_x + summed])
    y = _ag.permute(y, [ly.index(lab) for lab in batch + summed + only_y])
    k = math.prod(size[lab] for lab in summed)
    xb, yb = x.shape[:len(batch)], y.shape[:len(batch)]
    x = _ag.reshape(x, xb + (math.prod(x.shape[len(batch):len(batch) + len(only_x)]), k))
    y = _ag.reshape(y, yb + (k, math.prod(y.shape[len(batch) + len(summed):])))
    out = _ag.matmul(x, y)
    shape = out.shape[:len(batch)] + tuple(size[lab] for lab in only_x) + tuple(size[lab] for lab in only_y)
    return _ag.reshape(out, shape), batch + only_x + only_y


def _sublist_equation(args):
    """The equation and operands of einsum's sublist form (op, dims, op, dims, ..., [output dims])."""
    pairs, out = (args[:-1], args[-1]) if len(args) % 2 else (args, None)

    def term(dims):
        letters = []
        for d in dims:
            if d is Ellipsis:
                letters.append("...")
            elif isinstance(d, numbers.Integral) and 0 <= d < 52:  # A-Z, then a-z: sorted as the numbers
                letters.append(chr(ord("A") + d) if d < 26 else chr(ord("a") + d - 26))
            else:
                raise ArgumentError(f"einsum: a sublist holds integers in [0, 52) and Ellipsis, got {d!r}")
        return "".join(letters)

    equation = ",".join(term(dims) for dims in pairs[1::2])
    return equation + ("" if out is None else "->" + term(out)), tuple(pairs[0::2])


def einsum(equation, *operands):
    """Sums of products of the operands' elements, as torch.einsum: letters label
    dims, '...' the dims not labelled (broadcast across operands), a letter
    repeated in one operand takes the diagonal, and '->' names the output's
    labels (without it: the letters that occur once, in alphabetical order,
    after the ellipsis's dims). Operands are contracted left to right, each
    pair in one batched matmul (no search for the cheapest order). The
    sublist form einsum(op1, dims1, op2, dims2, ..., [out_dims]) labels dims
    with integers below 52 and Ellipsis, as PyTorch's."""
    if not isinstance(equation, str) and isinstance(equation, Tensor):
        equation, operands = _sublist_equation((equation,) + operands)
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not isinstance(equation, str):
        raise TypeError(f"einsum: the equation must be a string, got {type(equation).__name__}")
    _check_tensors("einsum", *operands)
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise ArgumentError(f"einsum: the equation has {len(terms)} operands but {len(operands)} tensors were given")
    parsed = [_parse_operand(term, t.ndim, "einsum") for term, t in zip(terms, operands)]
    n_ell = max(n for _, n in parsed)
    # Ellipsis dims are aligned at their last dims across operands, as in broadcasting.
    labels = [[lab if not isinstance(lab, tuple) else ("...", lab[1] + n_ell - n) for lab in ls] for ls, n in parsed]
    ellipsis = [("...", i) for i in range(n_ell)]
    if arrow:
        out_labels, out_n = _parse_operand(rhs, len(rhs.replace("...", "")) + (n_ell if "..." in rhs else 0),
                                           "einsum")
        if out_n not in (0, n_ell):
            raise ArgumentError(f"einsum: invalid output subscripts {rhs!r}")
        seen = [lab for ls in labels for lab in ls]
        for lab in out_labels:
            if out_labels.count(lab) > 1:
                raise ArgumentError(f"einsum: output subscript {lab!r} appears more than once")
            if lab not in seen and not isinstance(lab, tuple):
                raise ArgumentError(f"einsum: output subscript {lab!r} does not appear in the operands")
    else:
        letters = [lab for ls in labels for lab in ls if not isinstance(lab, tuple)]
        out_labels = ellipsis + sorted(lab for lab in set(letters) if letters.count(lab) == 1)
    tensors = list(operands)
    for i, t in enumerate(tensors):
        tensors[i], labels[i] = _take_diagonals(t, labels[i])
    # Each operand first sums the labels that no other operand nor the output holds.
    for i in range(len(tensors)):
        others = set(out_labels).union(*(labels[j] for j in range(len(tensors)) if j != i))
        tensors[i], labels[i] = _sum_labels(tensors[i], labels[i], set(labels[i]) - others)
    out, lo = tensors[0], labels[0]
    for i in range(1, len(tensors)):
        keep = set(out_labels).union(*labels[i + 1:])
        out, lo = _contract(out, lo, tensors[i], labels[i], keep)
    out, lo = _sum_labels(out, lo, set(lo) - set(out_labels))
    missing = [lab for lab in out_labels if lab not in lo]  # ellipsis dims no operand has
    if missing:
        out, lo = _ag.reshape(out, (1,) * len(missing) + out.shape), missing + lo
    return _ag.permute(out, [lo.index(lab) for lab in out_labels]) if lo != out_labels else out


# ---- distances and norms -------------------------------------------------------------------

def _pnorm(d, p, dim, keepdim=False):
    """The p-norm of d over ``dim`` whose gradient is 0 (not NaN) where the norm
    is 0, as PyTorch's cdist and dist take it. A negative p has no value over
    no elements (PyTorch raises too); its norm is 0 where an element is 0 and
    inf where all are inf."""
    if p < 0:
        dims = _ag._reduction_dims(d, dim)
        if any(d.shape[k] == 0 for k in dims):
            raise ArgumentError(f"the {p:g} norm over an empty dim has no value (a negative order has no identity)")
        return _ag.pow(_ag.sum(_ag.pow(_ag.abs(d), p), dims, keepdim), 1.0 / p)
    if p == 0:  # the number of non-zero elements: piecewise constant, its gradient zeros
        out = _ag.sum((d.detach() != 0).to(dtype=d.dtype), dim, keepdim)
        return _ag._attach(out, _ag._ZeroBackward((d,), "NormBackward")) if _ag._needs_grad(d) else out
    if p == math.inf:
        return _ag.amax(_ag.abs(d), dim, keepdim)
    if p == 1:
        return _ag.sum(_ag.abs(d), dim, keepdim)
    powered = _ag.sum(_ag.mul(d, d) if p == 2 else _ag.pow(_ag.abs(d), p), dim, keepdim)
    zero = powered.detach() == 0
    return _ag.where(zero, 0.0, _ag.pow(_ag.where(zero, 1.0, powered), 1.0 / p))


def _check_p(p, what):
    if not isinstance(p, numbers.Real) or p < 0:
        raise ArgumentError(f"{what}: p must be a non-negative number, got {p!r}")
    return float(p)


def dist(input, other, p=2):
    """The p-norm of input - other (broadcast)."""
    _check_tensors("dist", input, other)
    return _pnorm(_ag.sub(input, other), _check_p(p, "dist"), None)


@autocast_op("float32")
def cdist(x1, x2, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary"):
    """The p-norm distance between each row of x1 (..., P, M) and each row of x2
    (..., R, M), as (..., P, R). For p = 2 with more than 25 rows (or with
    compute_mode 'use_mm_for_euclid_dist') it is sqrt(|x|^2 + |y|^2 - 2 x.y),
    one matmul, as in PyTorch; otherwise the differences are formed, which takes
    memory for P * R * M elements."""
    _check_tensors("cdist", x1, x2)
    p = _check_p(p, "cdist")
    if x1.ndim < 2 or x2.ndim < 2 or x1.shape[-1] != x2.shape[-1]:
        raise ArgumentError(f"cdist: expected (..., P, M) and (..., R, M) tensors, got {x1.shape} and {x2.shape}")
    if not x1.dtype.is_floating_point or not x2.dtype.is_floating_point:
        raise DtypeError(f"cdist: expected floating tensors, got {x1.dtype} and {x2.dtype}")
    modes = ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist")
    if compute_mode not in modes:
        raise ArgumentError(f"cdist: compute_mode must be one of {modes}, got {compute_mode!r}")
    use_mm = p == 2 and (compute_mode == "use_mm_for_euclid_dist" or (
        compute_mode == modes[0] and (x1.shape[-2] > 25 or x2.shape[-2] > 25)))
    if use_mm:
        sq1 = _ag.sum(_ag.mul(x1, x1), -1, keepdim=True)
        sq2 = _ag.sum(_ag.mul(x2, x2), -1).unsqueeze(-2)
        sq = _ag.clamp_min(_ag.sub(_ag.add(sq1, sq2), _ag.mul(_ag.matmul(x1, x2.mT), 2)), 0.0)
        zero = sq.detach() == 0
        return _ag.where(zero, 0.0, _ag.sqrt(_ag.where(zero, 1.0, sq)))
    d = _ag.sub(x1.unsqueeze(-2), x2.unsqueeze(-3))
    return _pnorm(d, p, -1)


def renorm(input, p, dim, maxnorm):
    """input with each slice along ``dim`` whose p-norm exceeds maxnorm scaled to
    norm maxnorm (by maxnorm / (norm + 1e-7), as PyTorch)."""
    _check_tensors("renorm", input)
    p = _check_p(p, "renorm")
    if p == 0:
        raise ArgumentError("renorm: p must be positive")
    d = _ag._dim(input, dim)
    others = [k for k in range(input.ndim) if k != d]
    norms = _pnorm(input, p, others, keepdim=True) if others else _ag.abs(input)
    factor = _ag.where(norms.detach() > maxnorm, _ag.rdiv(_ag.add(norms, 1e-7), maxnorm), 1.0)
    return _ag.mul(input, factor)


def cross(input, other, dim=None):
    """The cross product of 3-vectors along ``dim`` (input and other broadcast);
    with no dim, the first dim of size 3, as torch.cross."""
    _check_tensors("cross", input, other)
    shape = _ag._broadcast_shape(input.shape, other.shape)
    a, b = _ag.expand(input, shape), _ag.expand(other, shape)
    if dim is None:
        dim = next((k for k, s in enumerate(shape) if s == 3), None)
        if dim is None:
            raise ArgumentError(f"cross: no dim of size 3 in shape {shape}")
    d = _ag._dim(a, dim)
    if shape[d] != 3:
        raise ArgumentError(f"cross: dim {d} has size {shape[d]}, not 3")
    i1, i2 = tensor([1, 2, 0], device=a.device), tensor([2, 0, 1], device=a.device)
    return _ag.sub(_ag.mul(a.index_select(d, i1), b.index_select(d, i2)),
                   _ag.mul(a.index_select(d, i2), b.index_select(d, i1)))


# ---- covariance ----------------------------------------------------------------------

def cov(input, *, correction=1, fweights=None, aweights=None):
    """The covariance matrix of the variables in input's rows (observations in
    its columns; a 1-d input is one variable, giving a 0-d result), with
    integer frequency weights ``fweights`` and observation weights ``aweights``
    per column, and ``correction`` subtracted from the (weighted) observation
    count, as PyTorch. Where that count is not positive the result is inf or
    NaN (PyTorch also warns). Integer input gives float32. The weights' signs
    are checked on the host."""
    _check_tensors("cov", input)
    if input.ndim > 2:
        raise ArgumentError(f"cov: expected a tensor of at most 2 dims, got {input.ndim}")
    x = _ag.reshape(input, (1, -1)) if input.ndim < 2 else input
    if not x.dtype.is_floating_point:
        x = x.to(dtype=float32)
    n = x.shape[1]
    w = None
    for name, wt, integral in (("fweights", fweights, True), ("aweights", aweights, False)):
        if wt is None:
            continue
        _check_tensors("cov", wt)
        if wt.ndim != 1 or wt.shape[0] != n:
            raise ArgumentError(f"cov: {name} must be 1-d with one weight per observation ({n}), got shape {wt.shape}")
        if integral and wt.dtype.is_floating_point:
            raise DtypeError(f"cov: fweights must be integral, got {wt.dtype}")
        if wt.numel() and float(_ag.amin(wt.detach(), 0).item()) < 0:
            raise ArgumentError(f"cov: {name} cannot be negative")
        wt = wt.to(dtype=x.dtype)
        w = wt if w is None else _ag.mul(w, wt)
    if w is None:
        avg = _ag.div(_ag.sum(x, 1), float(n))
        norm = _ag._like_scalar(float(n - correction), x)
    else:
        w_sum = _ag.sum(w)
        avg = _ag.div(_ag.sum(_ag.mul(x, w), 1), w_sum)
        if aweights is not None and correction != 0:
            aw = aweights.to(dtype=x.dtype)
            norm = _ag.sub(w_sum, _ag.div(_ag.mul(_ag.sum(_ag.mul(w, aw)), float(correction)), w_sum))
        else:
            norm = _ag.sub(w_sum, float(correction))
    norm = _ag.where(norm.detach() <= 0, 0.0, norm)
    centred = _ag.sub(x, _ag.reshape(avg, (-1, 1)))
    c = _ag.matmul(centred, (centred if w is None else _ag.mul(centred, w)).t())
    c = _ag.div(c, norm)
    return _ag.reshape(c, ()) if c.shape == (1, 1) else c


def corrcoef(input):
    """The Pearson correlation coefficients of the variables in input's rows:
    cov(input) over the product of the standard deviations, clipped to [-1, 1]."""
    c = cov(input)
    if c.ndim == 0:
        return _ag.div(c, c)
    std = _ag.sqrt(diagonal(c))
    c = _ag.div(_ag.div(c, _ag.reshape(std, (-1, 1))), _ag.reshape(std, (1, -1)))
    return _ag.clamp(c, -1.0, 1.0)


__all__ = ["addbmm", "addmv", "addr", "baddbmm", "block_diag", "cdist", "corrcoef", "cov", "cross", "diagonal", "dist",
           "einsum", "kron", "renorm", "tensordot", "trace"]

"""torch.nn.functional.embedding_bag: the sums, means or maxima of bags of
rows of a table, without materialising the rows of every bag, and their
gradients for the table and the per-sample weights. PyTorch's argument rules
and errors live here; the work is the _C embedding_bag ops, which take the
bags as B + 1 offsets (the last one the end of the last bag)."""

import numbers

import numpy as np

from .. import _C
from .. import autograd as _ag
from .._C import ArgumentError, DtypeError
from ..backends import alert_not_deterministic
from .._dtype import int32, int64
from .._sparse_coo import rows_gradient
from ..tensor import _MUL, Tensor, arange, ones_like, tensor, zeros_like

MODES = ("sum", "mean", "max")


class _EmbeddingBagBackward(_ag.Node):
    def __init__(self, weight, per_sample_weights, w, bags, argmax, scale_grad_by_freq, sparse):
        saved = (w, argmax) + bags[:3]
        super().__init__((weight, per_sample_weights), saved)
        self.mode, self.padding_idx = bags[3:]
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse

    def name(self):
        return "EmbeddingBagBackward"

    def backward(self, g):
        w, argmax, indices, offsets, weights = self.saved
        need_w, need_s = (e is not None for e in self.edges)
        args = (indices._buf, offsets._buf)
        gw = gs = None
        if need_w and self.sparse:
            gw = self._sparse_weight_grad(g, indices, offsets, weights, w.shape)
        elif need_w:
            gw = _ag._grad_out(self.edges[0], w.shape, g)
            alert_not_deterministic("embedding_bag's backward", gw)
            _C.embedding_bag_backward(gw._buf, g._buf, None if argmax is None else argmax._buf, *args,
                                      None if weights is None else weights._buf, self.mode, self.padding_idx)
            if self.scale_grad_by_freq:  # each row's gradient over how often the batch looks it up
                _C.binary_broadcast(_MUL, gw._buf, gw._buf, _ag._inverse_counts(indices, w)._buf)
        if need_s:
            gs = _ag._grad_out(self.edges[1], indices.shape, g)
            _C.embedding_bag_weights_backward(gs._buf, g._buf, w._buf, *args, self.padding_idx)
        return gw, gs

    def _sparse_weight_grad(self, g, indices, offsets, weights, shape):
        """The table's gradient as a sparse COO tensor: each index's row is its
        bag's gradient (over the bag's size in mode 'mean', times its weight
        with per_sample_weights), as PyTorch's sparse embedding_bag backward."""
        if self.scale_grad_by_freq:
            raise RuntimeError("embedding_backward: scale_grad_by_freq not supported with sparse gradients")
        pad = None if self.padding_idx < 0 else self.padding_idx
        counts = _ag.diff(offsets)
        bag_of = _ag.repeat_interleave(arange(counts.shape[0], dtype=int64, device=g.device), counts)
        rows = g.index_select(0, bag_of)
        if self.mode == MODES.index("mean"):
            taken = (indices != pad).to(dtype=g.dtype) if pad is not None else ones_like(indices, dtype=g.dtype)
            sizes = _ag.index_add(zeros_like(counts, dtype=g.dtype), 0, bag_of, taken)
            rows = _ag.div(rows, _ag.clamp_min(sizes.index_select(0, bag_of), 1.0).reshape(-1, 1))
        if weights is not None:
            rows = _ag.mul(rows, weights.reshape(-1, 1))
        return rows_gradient(indices, rows, shape, pad)


def _as_index(t, what):
    if not isinstance(t, Tensor) or t.dtype not in (int32, int64):
        raise DtypeError(f"embedding_bag: {what} must be an int64 or int32 ddpc tensor, got "
                         f"{getattr(t, 'dtype', type(t).__name__)}")
    return t.detach().to(dtype=int64).contiguous()


def _check_indices(indices, rows):
    if indices.numel():
        low, high = indices.min().item(), indices.max().item()
        if low < 0 or high >= rows:
            raise ArgumentError(f"embedding_bag: index {low if low < 0 else high} is out of range for {rows} rows")


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False, mode="mean",
                  sparse=False, per_sample_weights=None, include_last_offset=False, padding_idx=None):
    """The bags of rows of ``weight`` (V, D) at the indices ``input``, summed,
    averaged or maxed per bag into (B, D), as torch's F.embedding_bag: a 2-d
    ``input`` (B, L) is B bags of L; a 1-d one is cut into bags that start
    at ``offsets`` (with ``include_last_offset`` offsets has one more
    element, the input's length: the last bag runs to the end of the input
    whatever it says, as in PyTorch). ``per_sample_weights`` (mode 'sum' only) scales each row;
    rows at ``padding_idx`` are left out of their bags; an empty bag gives
    zeros. With ``max_norm``, the rows looked up (padding_idx's too) are
    first renormalised in place to at most that ``norm_type``-norm; with
    ``scale_grad_by_freq`` (not in mode 'max') each row's gradient is
    divided by how often the input holds it; both as PyTorch's. With
    ``sparse`` (not in mode 'max') the weight's gradient is a sparse COO
    tensor with one row per index, as PyTorch's. An index out of the table
    raises IndexOutOfRangeError, and malformed offsets ArgumentError; on a
    GPU the kernel finds them (skipping the index, clamping the offsets) and
    the error is raised when the host next waits for the device."""
    return bags(input, weight, offsets, max_norm, norm_type, scale_grad_by_freq, mode, sparse, per_sample_weights,
                include_last_offset, padding_idx)[0]


def bags(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False, mode="mean",
         sparse=False, per_sample_weights=None, include_last_offset=False, padding_idx=None):
    """(bags, argmax, indices, offsets): embedding_bag's result, the row each
    maximum came from in mode 'max' (else None), and the flat indices and
    the bag starts (the input's length appended) it read."""
    if not isinstance(weight, Tensor) or weight.ndim != 2 or not weight.dtype.is_floating_point:
        raise ArgumentError("embedding_bag: the weight must be a 2-d floating-point ddpc tensor, got "
                            f"{getattr(weight, 'shape', type(weight).__name__)}")
    if mode not in MODES:
        raise ArgumentError("mode has to be one of sum, mean or max")
    if sparse and mode == "max":
        raise ArgumentError("max mode does not support sparse weights")
    if sparse and weight.dtype in _ag._HALVES:
        raise NotImplementedError(f"embedding_bag: sparse gradients of a {weight.dtype} table are not supported; use "
                                  "a float32 table or sparse=False")
    if scale_grad_by_freq and mode == "max":
        raise ArgumentError("max mode does not support scaling the gradient by the frequency")
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. per_sample_weights is only "
                                  f"supported for mode='sum' (got mode='{mode}')")
    indices = _as_index(input, "input")
    if per_sample_weights is not None:
        if not isinstance(per_sample_weights, Tensor) or tuple(per_sample_weights.shape) != tuple(input.shape):
            raise ArgumentError(f"embedding_bag: If per_sample_weights ({getattr(per_sample_weights, 'shape', None)}) "
                                f"is not None, then it must have the same shape as the input ({tuple(input.shape)})")
        if per_sample_weights.dtype is not weight.dtype:
            raise DtypeError(f"embedding_bag: per_sample_weights is {per_sample_weights.dtype}, the weight "
                             f"{weight.dtype}")
    if indices.ndim == 2:
        if offsets is not None:
            raise ArgumentError("if input is 2D, then offsets has to be None, as input is treated is a mini-batch of "
                                f"fixed length sequences. However, found offsets of type {type(offsets).__name__}")
        offsets = arange(0, indices.numel(), max(indices.shape[1], 1), dtype=int64, device=indices.device)
        include_last_offset = False  # a row is a bag, whatever the flag (as PyTorch)
        indices = indices.reshape(-1)
        if per_sample_weights is not None:
            per_sample_weights = per_sample_weights.reshape(-1)
    elif indices.ndim == 1:
        if offsets is None:
            raise ArgumentError("offsets has to be a 1D Tensor but got None")
        if not isinstance(offsets, Tensor) or offsets.ndim != 1:
            raise ArgumentError("offsets has to be a 1D Tensor")
        offsets = _as_index(offsets, "offsets")
    else:
        raise ArgumentError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension {indices.ndim}")
    if indices._buf.device != weight._buf.device or offsets._buf.device != weight._buf.device:
        raise ArgumentError(f"embedding_bag: input on {indices.device}, offsets on {offsets.device}, weight on "
                            f"{weight.device}")
    rows = weight.shape[0]
    if padding_idx is not None:
        if not isinstance(padding_idx, numbers.Integral) or not -rows <= padding_idx < rows:
            raise ArgumentError(f"padding_idx must be within the number of embeddings, {-rows} through {rows - 1}, but "
                                f"got {padding_idx}")
        padding_idx %= rows
    n = end = indices.numel()
    if include_last_offset:  # the last bag runs to the end of the input whatever the last offset says, as in PyTorch
        if offsets.numel() == 0:
            raise ArgumentError("embedding_bag: include_last_offset needs at least one offset")
        last = offsets[-1].item()
        if last > n:
            raise ArgumentError(f"offsets[-1] can not be greater than input's length {n} but got offsets[-1] of {last}")
        offsets = offsets[:-1]
        if offsets.numel() == 0:  # the last offset alone: no bags
            end = 0
    offsets = _ag.cat([offsets, tensor(np.array([end], dtype=np.int64), device=offsets.device)])
    if max_norm is not None and n:  # on the table itself, before a 16-bit one is widened
        _check_indices(indices, rows)  # (before the renorm indexes the table with them)
        _ag._renorm_rows_(weight, indices, max_norm, norm_type)
    if weight.dtype in _ag._HALVES:
        out, argmax, _, _ = bags(indices, weight.float(), offsets, mode=mode, include_last_offset=True,
                                 per_sample_weights=None if per_sample_weights is None else per_sample_weights.float(),
                                 padding_idx=padding_idx, scale_grad_by_freq=scale_grad_by_freq)
        return out.to(dtype=weight.dtype), argmax, indices, offsets
    w = weight.detach().contiguous()
    weights = None if per_sample_weights is None else per_sample_weights.detach().contiguous()
    count = offsets.numel() - 1
    out = _ag._empty((count, weight.shape[1]), w)
    argmax = _ag._empty((count, weight.shape[1]), w, int64) if mode == "max" else None
    code, pad = MODES.index(mode), -1 if padding_idx is None else padding_idx
    _C.embedding_bag(out._buf, None if argmax is None else argmax._buf, w._buf, indices._buf, offsets._buf,
                     None if weights is None else weights._buf, code, pad)
    if _ag._needs_grad(weight, per_sample_weights):
        _ag._attach(out, _EmbeddingBagBackward(weight, per_sample_weights, w, (indices, offsets, weights, code, pad),
                                               argmax, scale_grad_by_freq, bool(sparse)))
    return out, argmax, indices, offsets

"""Sparse COO tensors, as torch.sparse_coo: an int64 ``indices`` tensor
(sparse_dim, nnz) and a ``values`` tensor (nnz, *dense_dims) over a size of
sparse_dim + dense_dim dims. Uncoalesced tensors may repeat an index (the
values at one index add up); ``coalesce()`` sorts the indices and sums the
repeats. Every step is a vectorised dense op (unique, index_add,
index_select, cat) on the tensors' device: indices become flat row-major
keys over the sparse dims, so a hybrid tensor (an embedding gradient: rows of
a table) is handled as the rows of a (prod(sparse sizes), *dense_dims) table.

What needs dense storage raises NotImplementedError naming the op and
suggesting ``.to_dense()``.
"""

import math
import numbers
import sys

from . import _C
from . import autograd as _ag
from ._C import DtypeError
from ._dtype import float32, int64, sparse_coo
from .tensor import Size, Tensor, _size_args, tensor, zeros


def _dense_only(name):
    def refuse(self, *args, **kwargs):
        raise NotImplementedError(f"{name}: not supported on a sparse COO tensor (layout ddpc.sparse_coo); convert "
                                  f"it with .to_dense() first")

    refuse.__name__ = name
    return refuse


def _row_strides(sizes):
    strides, step = [], 1
    for s in reversed(sizes):
        strides.append(step)
        step *= s
    return strides[::-1]


def flat_keys(indices, sizes):
    """The row-major position of each index column over the sparse dims ``sizes``: (nnz,) int64."""
    keys = None
    for d, stride in enumerate(_row_strides(sizes)):
        term = indices[d] * stride if stride != 1 else indices[d]
        keys = term if keys is None else keys + term
    if keys is None:
        return zeros((indices.shape[1],), dtype=int64, device=indices.device)
    return keys.contiguous()


def _unflat(keys, sizes):
    """The index columns (len(sizes), n) of row-major positions ``keys``."""
    rows = [(keys // stride) % s for stride, s in zip(_row_strides(sizes), sizes)]
    if not rows:
        return zeros((0, keys.shape[0]), dtype=int64, device=keys.device)
    return _ag.stack(rows, 0)


class SparseTensor(Tensor):
    """A sparse COO tensor (``ddpc.sparse_coo_tensor`` makes one). It is a
    ``ddpc.Tensor`` (isinstance holds, as in PyTorch); ops that need dense
    storage raise NotImplementedError naming the op."""

    is_sparse = True
    layout = sparse_coo

    def __init__(self, indices, values, size, coalesced=False, requires_grad=False):
        self._sp_indices, self._sp_values = indices, values
        self._size = Size(tuple(int(s) for s in size))
        self._coalesced = bool(coalesced)
        self.grad, self.grad_fn = None, None
        self.requires_grad = requires_grad

    @property
    def _buf(self):
        caller = sys._getframe(1).f_code.co_name.lstrip("_") or "this op"
        raise NotImplementedError(f"{caller}: not supported on a sparse COO tensor (layout ddpc.sparse_coo); convert "
                                  f"it with .to_dense() first")

    # ---- metadata -------------------------------------------------------------------
    @property
    def shape(self):
        return self._size

    def size(self, dim=None):
        return self._size if dim is None else self._size[dim]

    @property
    def dtype(self):
        return self._sp_values.dtype

    @property
    def device(self):
        return self._sp_values.device

    @property
    def is_cuda(self):
        return self._sp_values.is_cuda

    @property
    def ndim(self):
        return len(self._size)

    def dim(self):
        return len(self._size)

    def numel(self):
        return math.prod(self._size)

    def element_size(self):
        return self._sp_values.element_size()

    def sparse_dim(self):
        return self._sp_indices.shape[0]

    def dense_dim(self):
        return self._sp_values.ndim - 1

    def _nnz(self):
        return self._sp_indices.shape[1]

    def is_coalesced(self):
        return self._coalesced

    def is_contiguous(self, memory_format=None):
        raise RuntimeError("is_contiguous: sparse COO tensors do not have is_contiguous (no strides)")

    def _indices(self):
        return self._sp_indices

    def _values(self):
        return self._sp_values

    def indices(self):
        if not self._coalesced:
            raise RuntimeError("Cannot get indices on an uncoalesced tensor, please call .coalesce() first")
        return self._sp_indices

    def values(self):
        if not self._coalesced:
            raise RuntimeError("Cannot get values on an uncoalesced tensor, please call .coalesce() first")
        return self._sp_values

    def _sparse_sizes(self):
        return tuple(self._size[:self.sparse_dim()])

    def _keys(self):
        return flat_keys(self._sp_indices, self._sparse_sizes())

    def _like(self, values, coalesced=None):
        """This tensor's indices with other values."""
        return SparseTensor(self._sp_indices, values, self._size, self._coalesced if coalesced is None else coalesced)

    # ---- conversion -----------------------------------------------------------------
    def coalesce(self):
        """This tensor with sorted, distinct indices, the values at each summed (self where coalesced already)."""
        if self._coalesced:
            return self
        with _ag.no_grad():
            values = self._sp_values.detach()
            if self._nnz() == 0:
                return SparseTensor(self._sp_indices, values, self._size, True)
            distinct, where = _ag.unique(self._keys(), return_inverse=True)
            summed = zeros((distinct.shape[0],) + tuple(values.shape[1:]), dtype=values.dtype, device=values.device)
            summed = _ag.index_add(summed, 0, where, values)
            return SparseTensor(_unflat(distinct, self._sparse_sizes()), summed, self._size, True)

    def to_dense(self, dtype=None, *, masked_grad=None):
        """The dense tensor: zeros with the values added at their indices (differentiable in the values)."""
        del masked_grad
        values = self._sp_values if dtype is None else self._sp_values.to(dtype=dtype)
        rows = math.prod(self._sparse_sizes())
        table = zeros((rows,) + tuple(values.shape[1:]), dtype=values.dtype, device=values.device)
        if self._nnz():
            table = _ag.index_add(table, 0, self._keys(), values)
        return _ag.reshape(table, self._size)

    def to_sparse(self, sparse_dim=None, *, layout=None, blocksize=None, dense_dim=None):
        if (sparse_dim is not None and sparse_dim != self.sparse_dim()) or layout not in (None, sparse_coo):
            raise RuntimeError("to_sparse: a sparse COO tensor converts to the same sparse_dim and layout only")
        return self

    def to(self, *args, **kwargs):
        """Indices and values moved (device) and the values cast (dtype), as Tensor.to."""
        values = self._sp_values.to(*args, **kwargs)
        indices = self._sp_indices.to(device=values.device)
        return SparseTensor(indices, values, self._size, self._coalesced, self.requires_grad)

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None, non_blocking=False):
        return self.to("cuda" if device is None else device if not isinstance(device, int) else f"cuda:{device}")

    def float(self):
        return self.to(dtype=float32)

    def double(self):
        return self.to(dtype="float64")

    def half(self):
        return self.to(dtype="float16")

    def clone(self, *, memory_format=None):
        return SparseTensor(self._sp_indices.clone(), self._sp_values.detach().clone(), self._size, self._coalesced)

    def detach(self):
        return SparseTensor(self._sp_indices, self._sp_values.detach(), self._size, self._coalesced)

    def detach_(self):
        self.grad_fn = None
        self.requires_grad = False
        return self

    @property
    def data(self):
        return self.detach()

    # ---- arithmetic -----------------------------------------------------------------
    def add(self, other, *, alpha=1):
        if isinstance(other, SparseTensor):
            return add_sparse(self, other, alpha)
        if isinstance(other, Tensor):
            raise RuntimeError("add(sparse, dense) is not supported. Use add(dense, sparse) instead.")
        raise TypeError(f"add: a sparse tensor adds a sparse or dense tensor, got {type(other).__name__}")

    def __add__(self, other):
        return self.add(other)

    def __radd__(self, other):
        if isinstance(other, Tensor):
            return add_into_dense(other, self, 1)
        return self.add(other)

    def sub(self, other, *, alpha=1):
        return self.add(other, alpha=-alpha)

    def __sub__(self, other):
        return self.sub(other)

    def __neg__(self):
        return self._like(_ag.neg(self._sp_values))

    def neg(self):
        return -self

    def mul(self, other):
        return self._like(_ag.mul(self._sp_values, _scalar(other, "mul")))

    __mul__ = __rmul__ = mul

    def div(self, other):
        return self._like(_ag.div(self._sp_values, _scalar(other, "div")))

    __truediv__ = div

    def add_(self, other, *, alpha=1):
        if not isinstance(other, SparseTensor):
            raise RuntimeError("add_: a sparse tensor adds a sparse tensor in place; for a dense one use "
                               "dense.add_(sparse) or sparse.to_dense()")
        out = add_sparse(self, other, alpha)
        self._sp_indices, self._sp_values, self._coalesced = out._sp_indices, out._sp_values, out._coalesced
        return self

    def sub_(self, other, *, alpha=1):
        return self.add_(other, alpha=-alpha)

    def mul_(self, other):
        self._sp_values.mul_(_scalar(other, "mul_"))
        return self

    def div_(self, other, *, rounding_mode=None):
        if rounding_mode is not None:
            raise NotImplementedError("div_: rounding_mode is not supported on a sparse COO tensor")
        self._sp_values.div_(_scalar(other, "div_"))
        return self

    def zero_(self):
        """Drops every element (nnz becomes 0), as PyTorch's zero_ on a sparse tensor."""
        self._sp_indices = self._sp_indices.narrow(1, 0, 0).contiguous()
        self._sp_values = self._sp_values.narrow(0, 0, 0).contiguous()
        self._coalesced = True
        return self

    def sum(self, dim=None, keepdim=False, *, dtype=None):
        if dim is not None or keepdim:
            raise NotImplementedError("sum: over dims of a sparse COO tensor use ddpc.sparse.sum(input, dim)")
        return _ag.sum(self._sp_values if dtype is None else self._sp_values.to(dtype=dtype))

    def norm(self, p="fro", dim=None, keepdim=False, dtype=None):
        if dim is not None:
            raise NotImplementedError("norm: over dims of a sparse COO tensor convert it with .to_dense() first")
        return _ag.norm(self.coalesce()._sp_values, 2 if p == "fro" else p, None, False, dtype)

    # ---- printing and pickling ------------------------------------------------------
    def __repr__(self):
        def nested(prefix, t):  # the inner tensors without the dtype, which the outer line gives
            return prefix + t._repr(prefix, extras=False)

        size = "(" + ", ".join(str(s) for s in self._size) + ("," if len(self._size) == 1 else "") + ")"
        extras = [f"size={size}", f"nnz={self._nnz()}"]
        if self.dtype not in (float32, int64):
            extras.append(f"dtype={self.dtype!r}")
        if self.is_cuda:
            extras.append(f"device='{self.device}'")
        extras.append("layout=ddpc.sparse_coo")
        if self.grad_fn is not None:
            extras.append(f"grad_fn={self.grad_fn!r}")
        elif self.requires_grad:
            extras.append("requires_grad=True")
        lines = [nested("tensor(indices=", self._sp_indices) + ",", nested("       values=", self._sp_values) + ","]
        tail, width = "       ", 7
        for i, e in enumerate(extras):
            part = e + ("," if i < len(extras) - 1 else ")")
            if width + len(part) + 1 > 80 and tail.strip():
                lines.append(tail.rstrip())
                tail, width = "       ", 7
            tail += part + " "
            width += len(part) + 1
        lines.append(tail.rstrip())
        return "\n".join(lines)

    __str__ = __repr__

    def __reduce__(self):
        return (_rebuild_sparse, (self._sp_indices.cpu(), self._sp_values.detach().cpu(), tuple(self._size),
                                  str(self.device), self._coalesced, self.requires_grad))


def _rebuild_sparse(indices, values, size, device, coalesced, requires_grad):
    values, indices = values.to(device), indices.to(device)
    return SparseTensor(indices, values, size, coalesced, requires_grad)


# Tensor methods that hold for any layout.
_INHERITED = ("requires_grad_", "register_hook", "register_post_accumulate_grad_hook", "backward", "is_floating_point",
              "get_device", "type")

# Every other public Tensor method needs dense storage: it raises, naming itself.
for _name in dir(Tensor):
    if (not _name.startswith("_") and _name not in SparseTensor.__dict__ and _name not in _INHERITED
            and callable(getattr(Tensor, _name, None))):
        setattr(SparseTensor, _name, _dense_only(_name))
del _name


def _scalar(value, what):
    if isinstance(value, Tensor) and not value.is_sparse and value.numel() == 1:
        return value.reshape(())
    if isinstance(value, numbers.Number):
        return value
    raise NotImplementedError(f"{what}: a sparse COO tensor is multiplied or divided by a scalar only, got "
                              f"{type(value).__name__}")


def _check_same_shape(a, b, what):
    if tuple(a.shape) != tuple(b.shape):
        raise RuntimeError(f"{what}: sizes of the tensors must match, got {list(a.shape)} and {list(b.shape)}")
    if a.device != b.device:
        raise RuntimeError(f"{what}: tensors are on different devices ({a.device} and {b.device})")


def add_sparse(a, b, alpha=1):
    """a + alpha * b for two sparse tensors: their indices and values
    concatenated, coalesced where both were (as PyTorch's result)."""
    _check_same_shape(a, b, "add")
    if a.sparse_dim() != b.sparse_dim():
        raise RuntimeError(f"add: sparse tensors with different sparse_dim ({a.sparse_dim()} and {b.sparse_dim()}) "
                           "do not add")
    bv = b._sp_values if alpha == 1 else _ag.mul(b._sp_values, alpha)
    dt = a.dtype if a.dtype is b.dtype else _ag.result_type(a._sp_values, b._sp_values)
    out = SparseTensor(_ag.cat([a._sp_indices, b._sp_indices], 1),
                       _ag.cat([a._sp_values.to(dtype=dt), bv.to(dtype=dt)], 0), a._size)
    return out.coalesce() if a._coalesced and b._coalesced else out


def add_into_dense(dense, sparse, alpha=1, out=None):
    """dense + alpha * sparse as a dense tensor; with ``out`` (dense itself: the
    in-place add_) only the rows the sparse tensor holds are touched."""
    _check_same_shape(dense, sparse, "add")
    values = sparse._sp_values if alpha == 1 else _ag.mul(sparse._sp_values, alpha)
    if out is not None:
        if sparse._nnz():
            add_rows_(table_of(out, sparse), sparse._keys(), values)
        return out
    table = table_of(dense, sparse)
    if not sparse._nnz():
        return _ag.clone(dense)
    rows = _ag.reshape(values.to(dtype=dense.dtype), (sparse._nnz(), table.shape[1]))
    return _ag.reshape(_ag.index_add(table, 0, sparse._keys(), rows), dense.shape)


def from_dense(t, sparse_dim=None):
    """A dense tensor as a coalesced sparse one over its first ``sparse_dim`` dims
    (all by default): the index rows whose dense part has a nonzero element."""
    sd = t.ndim if sparse_dim is None else int(sparse_dim)
    if t.dtype.is_complex:
        raise DtypeError(f"to_sparse: ddpc's sparse tensors do not hold {t.dtype}")
    if not 0 <= sd <= t.ndim:
        raise RuntimeError(f"to_sparse: sparse_dim must be within 0 and {t.ndim}, got {sparse_dim}")
    sizes = tuple(t.shape[:sd])
    with _ag.no_grad():
        table = t.detach().reshape((math.prod(sizes),) + tuple(t.shape[sd:]))
        nonzero = table != 0
        if table.ndim > 1:
            nonzero = _ag.any_(nonzero.reshape(table.shape[0], -1), 1)
        keys = _ag.nonzero(nonzero.reshape(-1)).reshape(-1)
        return SparseTensor(_unflat(keys, sizes), table.index_select(0, keys), t.shape, True)


def sparse_coo_tensor(indices, values, size=None, *, dtype=None, device=None, requires_grad=False,
                      check_invariants=None, is_coalesced=None):
    """A sparse COO tensor with ``indices`` (sparse_dim, nnz) and ``values``
    (nnz, *dense_dims), as torch.sparse_coo_tensor; without ``size`` the
    smallest that holds the indices. Indices are checked against the size
    (PyTorch checks only with ``check_invariants``; the check costs one read
    of their range). ``is_coalesced=True`` promises sorted distinct indices."""
    del check_invariants
    if not isinstance(values, Tensor):
        values = tensor(values, dtype=dtype, device=device)
    elif dtype is not None or device is not None:
        values = values.to(device=device, dtype=dtype)
    idx = indices if isinstance(indices, Tensor) else tensor(indices, dtype=int64)
    idx = idx.detach().to(dtype=int64, device=values.device).contiguous()
    values = values.detach().contiguous()
    if idx.ndim != 2:
        raise RuntimeError(f"indices must be sparse_dim x nnz, but got: {list(idx.shape)}")
    if values.ndim == 0:
        raise RuntimeError("values must have at least 1 dim (nnz), but got a 0-d tensor")
    sd, nnz = idx.shape
    if values.shape[0] != nnz:
        raise RuntimeError(f"indices and values must have same nnz, but got nnz from indices: {nnz}, nnz from "
                           f"values: {values.shape[0]}")
    dense = tuple(values.shape[1:])
    if size is None:
        high = _ag.amax(idx, 1).cpu().tolist() if nnz else [-1] * sd
        size = tuple(h + 1 for h in high) + dense
    size = _size_args(tuple(size) if not isinstance(size, numbers.Integral) else (size,))
    if len(size) != sd + len(dense):
        raise RuntimeError(f"'len(size) == sparse_dim + dense_dim' is not satisfied: len(size) = {len(size)}, "
                           f"sparse_dim = {sd}, dense_dim = {len(dense)}")
    if tuple(size[sd:]) != dense:
        raise RuntimeError(f"values has incorrect size, expected {[nnz] + list(size[sd:])}, got {list(values.shape)}")
    if nnz and sd:
        low, high = _ag.amin(idx, 1).cpu().tolist(), _ag.amax(idx, 1).cpu().tolist()
        for d in range(sd):
            if low[d] < 0:
                raise RuntimeError(f"found negative index {low[d]} for dim {d}")
            if high[d] >= size[d]:
                raise RuntimeError(f"size is inconsistent with indices: for dim {d}, size is {size[d]} but found "
                                   f"index {high[d]}")
    out = SparseTensor(idx, values, size, bool(is_coalesced) or nnz <= 1)
    if requires_grad:
        out.requires_grad = True
    return out



def rows_gradient(indices, rows, shape, padding_idx=None):
    """The sparse gradient of a (V, D) table whose rows ``indices`` (1-d) were
    looked up and got the gradients ``rows`` (n, D): one entry per lookup,
    uncoalesced, those at ``padding_idx`` left out (as PyTorch's embedding backward)."""
    with _ag.no_grad():
        if padding_idx is not None:
            keep = _ag.nonzero(indices != padding_idx).reshape(-1)
            indices, rows = indices.index_select(0, keep), rows.index_select(0, keep)
        else:
            rows = _ag.clone(rows.contiguous())
        return SparseTensor(indices.reshape(1, -1).contiguous(), rows, shape, indices.shape[0] <= 1)


def table_of(dense, sparse):
    """``dense`` (of sparse's shape) viewed as (rows over the sparse dims, elements of the dense dims)."""
    rows = math.prod(sparse._sparse_sizes())
    return dense.reshape(rows, dense.numel() // rows if rows else 0)


def add_rows_(table, keys, rows):
    """table[keys[i]] += rows[i] in place (repeated keys add up): one _C op over the rows only."""
    rows = rows.reshape(keys.shape[0], table.shape[1]).to(dtype=table.dtype).contiguous()
    table._buf.bump_version()
    _C.index_add_rows(table._buf, rows._buf, keys.contiguous()._buf)

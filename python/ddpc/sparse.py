"""ddpc.sparse: torch.sparse's functions over sparse COO tensors (sum, mm,
addmm); the tensors themselves are ddpc._sparse_coo's."""

import numbers

from . import autograd as _ag
from ._dtype import int64
from ._sparse_coo import SparseTensor, sparse_coo_tensor
from .tensor import tensor, zeros_like


def _sparse_arg(t, what):
    if not isinstance(t, SparseTensor):
        raise TypeError(f"{what}: expected a sparse COO tensor, got {type(t).__name__}")
    return t


def sum(input, dim=None, dtype=None):
    """The sum of all elements (a dense 0-d tensor), or over ``dim`` (an int or
    a sequence): over sparse dims only the result stays sparse, as PyTorch's;
    once every sparse dim is summed it is dense."""
    t = _sparse_arg(input, "sparse.sum").coalesce()
    if dtype is not None:
        t = t.to(dtype=dtype)
    if dim is None:
        return _ag.sum(t._values())
    dims = sorted({_ag._dim(t, d) for d in ((dim,) if isinstance(dim, numbers.Integral) else dim)})
    sd = t.sparse_dim()
    values = t._values()
    dense_dims = [d - sd + 1 for d in dims if d >= sd]
    if dense_dims:
        values = _ag.sum(values, tuple(dense_dims))
    kept = [d for d in range(sd) if d not in dims]
    size = [s for d, s in enumerate(t.shape) if d not in dims]
    if not kept:
        return _ag.sum(values, 0)
    indices = t._indices().index_select(0, tensor(kept, dtype=int64, device=t.device))
    return SparseTensor(indices, values, size).coalesce()


def addmm(mat, mat1, mat2, *, beta=1.0, alpha=1.0):
    """beta * mat + alpha * (mat1 @ mat2) for a sparse 2-d mat1 and dense 2-d
    mat and mat2 (dense result): each nonzero mat1[i, k] adds
    mat1[i, k] * mat2[k] into row i."""
    s = _sparse_arg(mat1, "sparse.addmm")
    if s.ndim != 2 or s.sparse_dim() != 2 or mat2.ndim != 2:
        raise RuntimeError(f"addmm: matrices expected, got {s.ndim}D and {mat2.ndim}D tensors (mat1 with 2 sparse "
                           f"dims)")
    if s.shape[1] != mat2.shape[0]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({s.shape[0]}x{s.shape[1]} and "
                           f"{mat2.shape[0]}x{mat2.shape[1]})")
    rows, cols = s._indices()[0], s._indices()[1]
    terms = _ag.mul(mat2.index_select(0, cols), _ag.reshape(s._values(), (-1, 1)))
    return _ag.index_add(zeros_like(mat) if beta == 0 else _ag.mul(mat, beta), 0, rows, terms, alpha)


def mm(mat1, mat2):
    """mat1 @ mat2 for a sparse 2-d mat1 and a dense 2-d mat2: a dense result."""
    from .tensor import zeros

    s = _sparse_arg(mat1, "sparse.mm")
    n = mat2.shape[1] if mat2.ndim == 2 else 0
    return addmm(zeros((s.shape[0], n), dtype=mat2.dtype, device=mat2.device), s, mat2, beta=0.0)


__all__ = ["addmm", "mm", "sparse_coo_tensor", "sum"]

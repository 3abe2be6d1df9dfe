"""PyTorch's top-level matrix functions (torch.det, torch.svd, torch.qr,
torch.inverse, torch.cholesky_solve, ...) and the Tensor methods of the same
names, in terms of ddpc.linalg (so they compute on the host as it does, and
differentiate, twice too, as it does). Where ddpc differs: qr and cholesky,
which recent PyTorch releases removed in favour of torch.linalg.qr and
torch.linalg.cholesky, are kept here for scripts written against older ones."""

import collections
import math

from . import autograd as _ag
from . import linalg as _lin
from ._C import ArgumentError
from .amp import autocast_op
from .tensor import zeros

SVDResult = collections.namedtuple("SVDResult", "U S V")
QRResult = collections.namedtuple("QRResult", "Q R")
TriangularSolveResult = collections.namedtuple("TriangularSolveResult", "solution cloned_coefficient")
LUUnpackResult = collections.namedtuple("LUUnpackResult", "P L U")


def det(input):
    """The determinant of each square matrix of input (torch.det, as linalg.det)."""
    return _lin.det(input)


def slogdet(input):
    """(sign, logabsdet) of each square matrix of input (as linalg.slogdet)."""
    return _lin.slogdet(input)


def logdet(input):
    """log(det(input)): NaN where the determinant is negative, -inf where it is 0."""
    sign, logabsdet = _lin.slogdet(input)
    return _ag.where(sign < 0, math.nan, logabsdet)


@autocast_op("float32_cpu")
def inverse(input):
    """The inverse of each square matrix of input (as linalg.inv)."""
    return _lin.inv(input)


@autocast_op("float32_cpu")
def pinverse(input, rcond=1e-15):
    """The pseudo-inverse, singular values at or below rcond times the largest taken as zero."""
    return _lin.pinv(input, rtol=rcond)


def matrix_power(input, n):
    return _lin.matrix_power(input, n)


def matrix_exp(input):
    return _lin.matrix_exp(input)


@autocast_op("float32_cpu")
def svd(input, some=True, compute_uv=True):
    """(U, S, V) with input = U diag(S) V^T (V, not linalg.svd's Vh); ``some``
    gives the reduced factors. With compute_uv False, U and V are zeros of
    shapes (m, m) and (n, n), as in PyTorch."""
    if not compute_uv:
        m, n = input.shape[-2:]
        batch = input.shape[:-2]
        return SVDResult(zeros(batch + (m, m), dtype=input.dtype, device=input.device), _lin.svdvals(input),
                         zeros(batch + (n, n), dtype=input.dtype, device=input.device))
    U, S, Vh = _lin.svd(input, full_matrices=not some)
    return SVDResult(U, S, Vh.mT)


@autocast_op("float32_cpu")
def qr(input, some=True):
    """(Q, R): the reduced factors with ``some``, the complete ones without."""
    return QRResult(*_lin.qr(input, "reduced" if some else "complete"))


@autocast_op("float32_cpu")
def cholesky(input, upper=False):
    return _lin.cholesky(input, upper=upper)


@autocast_op("float32_cpu")
def cholesky_solve(input, input2, upper=False):
    """The solution X of A X = input, A = L L^T given its Cholesky factor
    ``input2`` (A = U^T U with ``upper``): two triangular solves."""
    if upper:
        Y = _lin.solve_triangular(input2.mT, input, upper=False)
        return _lin.solve_triangular(input2, Y, upper=True)
    Y = _lin.solve_triangular(input2, input, upper=False)
    return _lin.solve_triangular(input2.mT, Y, upper=True)


@autocast_op("float32_cpu")
def cholesky_inverse(input, upper=False):
    """The inverse of A = L L^T (U^T U with ``upper``) from its Cholesky factor ``input``."""
    eye = _lin._eye(input.shape[-1], input)
    return cholesky_solve(_ag.expand(eye, input.shape), input, upper)


@autocast_op("float32_cpu")
def lu_solve(b, LU_data, LU_pivots):
    """The solution X of A X = b from lu_factor's (LU, pivots) of A (as linalg.lu_solve)."""
    return _lin.lu_solve(LU_data, LU_pivots, b)


def lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    """(P, L, U) from lu_factor's packed (LU, pivots): A = P L U, L unit lower
    triangular (m x k), U upper triangular (k x n); what is not unpacked is an
    empty tensor. Differentiable in LU_data (through L and U)."""
    if LU_data.ndim < 2:
        raise ArgumentError(f"lu_unpack: LU_data must be at least 2-d, got shape {LU_data.shape}")
    m, n = LU_data.shape[-2:]
    if LU_pivots.shape != LU_data.shape[:-2] + (min(m, n),) or LU_pivots.dtype.is_floating_point:
        raise ArgumentError("lu_unpack: LU_pivots must be an integer tensor of shape "
                            f"{LU_data.shape[:-2] + (min(m, n),)}, got {LU_pivots.shape} {LU_pivots.dtype}")
    empty = zeros(0, dtype=LU_data.dtype, device=LU_data.device)
    L, U = _lin._unpack(LU_data, m, n) if unpack_data else (empty, empty)
    P = _lin._permutation_matrices(LU_pivots, m, LU_data) if unpack_pivots else empty
    return LUUnpackResult(P, L, U)


def chain_matmul(*matrices):
    """The product of the 2-d matrices, in the cheapest order (linalg.multi_dot); one matrix is returned as is."""
    if not matrices:
        raise ArgumentError("chain_matmul(): Expected one or more matrices")
    for t in matrices:
        if t.ndim != 2:
            raise ArgumentError(f"chain_matmul(): Tensor dimension is {t.ndim}, expected 2 instead.")
    return _ag.clone(matrices[0]) if len(matrices) == 1 else _lin.multi_dot(matrices)


def frobenius_norm(input, dim, keepdim=False):
    """The 2-norm of the elements over one or two dims (linalg.vector_norm)."""
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    if len(dims) > 2:
        raise ArgumentError(f"frobenius_norm: Expected at most 2 dimensions, but got {len(dims)} dimensions instead.")
    return _lin.vector_norm(input, 2, dims, keepdim)


def nuclear_norm(input, dim=(-2, -1), keepdim=False):
    """The sum of the singular values of the matrices over the two dims ``dim``
    (linalg.matrix_norm 'nuc'); ``nuclear_norm(input, keepdim)`` takes the last two."""
    if isinstance(dim, bool):
        dim, keepdim = (-2, -1), dim
    return _lin.matrix_norm(input, "nuc", dim, keepdim)


@autocast_op("float32_cpu")
def triangular_solve(b, A, upper=True, transpose=False, unitriangular=False):
    """(solution, cloned_coefficient): X with A X = b (A^T X = b with
    ``transpose``) reading A's upper or lower triangle, and a copy of A."""
    coefficient = A.mT if transpose else A
    X = _lin.solve_triangular(coefficient, b, upper=upper != bool(transpose), unitriangular=unitriangular)
    return TriangularSolveResult(X, A.clone())


__all__ = ["chain_matmul", "cholesky", "cholesky_inverse", "cholesky_solve", "det", "frobenius_norm", "inverse",
           "logdet", "lu_solve", "lu_unpack", "matrix_exp", "matrix_power", "nuclear_norm", "pinverse", "qr",
           "slogdet", "svd", "triangular_solve"]

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
from .tensor import zeros

SVDResult = collections.namedtuple("SVDResult", "U S V")
QRResult = collections.namedtuple("QRResult", "Q R")
TriangularSolveResult = collections.namedtuple("TriangularSolveResult", "solution cloned_coefficient")


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


def inverse(input):
    """The inverse of each square matrix of input (as linalg.inv)."""
    return _lin.inv(input)


def pinverse(input, rcond=1e-15):
    """The pseudo-inverse, singular values at or below rcond times the largest taken as zero."""
    return _lin.pinv(input, rtol=rcond)


def matrix_power(input, n):
    return _lin.matrix_power(input, n)


def matrix_exp(input):
    return _lin.matrix_exp(input)


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


def qr(input, some=True):
    """(Q, R): the reduced factors with ``some``, the complete ones without."""
    return QRResult(*_lin.qr(input, "reduced" if some else "complete"))


def cholesky(input, upper=False):
    return _lin.cholesky(input, upper=upper)


def cholesky_solve(input, input2, upper=False):
    """The solution X of A X = input, A = L L^T given its Cholesky factor
    ``input2`` (A = U^T U with ``upper``): two triangular solves."""
    if upper:
        Y = _lin.solve_triangular(input2.mT, input, upper=False)
        return _lin.solve_triangular(input2, Y, upper=True)
    Y = _lin.solve_triangular(input2, input, upper=False)
    return _lin.solve_triangular(input2.mT, Y, upper=True)


def cholesky_inverse(input, upper=False):
    """The inverse of A = L L^T (U^T U with ``upper``) from its Cholesky factor ``input``."""
    eye = _lin._eye(input.shape[-1], input)
    return cholesky_solve(_ag.expand(eye, input.shape), input, upper)


def lu_solve(b, LU_data, LU_pivots):
    """The solution X of A X = b from lu_factor's (LU, pivots) of A (as linalg.lu_solve)."""
    return _lin.lu_solve(LU_data, LU_pivots, b)


def triangular_solve(b, A, upper=True, transpose=False, unitriangular=False):
    """(solution, cloned_coefficient): X with A X = b (A^T X = b with
    ``transpose``) reading A's upper or lower triangle, and a copy of A."""
    coefficient = A.mT if transpose else A
    X = _lin.solve_triangular(coefficient, b, upper=upper != bool(transpose), unitriangular=unitriangular)
    return TriangularSolveResult(X, A.clone())


__all__ = ["cholesky", "cholesky_inverse", "cholesky_solve", "det", "inverse", "logdet", "lu_solve", "matrix_exp",
           "matrix_power", "pinverse", "qr", "slogdet", "svd", "triangular_solve"]

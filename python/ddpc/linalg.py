"""ddpc.linalg: PyTorch's torch.linalg for ddpc tensors.

Factorizations, inverses and solves run on the host through numpy.linalg
(LAPACK), on zero-copy numpy views of host tensors, in the input's float32 or
float64; every function batches over the leading dims. A cuda tensor is
copied to the host, factored there and its results copied back to its device:
ddpc has no cuSOLVER path yet, so on a GPU these functions wait for the device
and pay two copies. 16-bit floats are refused (as PyTorch's CPU kernels refuse
them) and so are integers, with TypeError where PyTorch raises
NotImplementedError. A singular or non-positive-definite matrix raises
``LinAlgError`` (a RuntimeError, as torch.linalg.LinAlgError).

numpy.linalg has no LU factorization nor triangular solve: ``lu_factor``
factors column halves recursively (the elimination proper runs on panels of
16 columns, the rest is matrix products, all vectorised over the batch), and
``solve_triangular`` solves with LAPACK's general solver on the triangle it
reads, which gives the same solution at the cost of a general
solve.

Gradients: each factorization is a ddpc.autograd.Function whose backward is
PyTorch's formula written in recorded ddpc ops (matmul, and this module's
solves and inverses), so ``create_graph=True`` differentiates through them
again. The others (norms, lstsq, lu_solve, matrix_power, multi_dot, ...)
are compositions of differentiable ops.

ddpc has no complex dtype, so ``eig``, ``eigvals`` and the other functions with
complex results are absent.
"""

import collections
import math
import numbers

import numpy as np

from . import _linalg as _la
from . import autograd as _ag
from ._C import ArgumentError, DtypeError
from ._dtype import bool_
from ._function import Function
from .amp import autocast_op
from .tensor import Tensor, bfloat16, float16, from_numpy, int32, int64, zeros


class LinAlgError(RuntimeError):
    """A matrix the operation cannot handle: singular, or not positive-definite (as torch.linalg.LinAlgError)."""


QR = collections.namedtuple("QR", "Q R")
SVD = collections.namedtuple("SVD", "U S Vh")
EighResult = collections.namedtuple("EighResult", "eigenvalues eigenvectors")
SlogdetResult = collections.namedtuple("SlogdetResult", "sign logabsdet")
LstsqResult = collections.namedtuple("LstsqResult", "solution residuals rank singular_values")
InvExResult = collections.namedtuple("InvExResult", "inverse info")
SolveExResult = collections.namedtuple("SolveExResult", "result info")
CholeskyExResult = collections.namedtuple("CholeskyExResult", "L info")
LUFactorResult = collections.namedtuple("LUFactorResult", "LU pivots")
LUFactorExResult = collections.namedtuple("LUFactorExResult", "LU pivots info")
LUResult = collections.namedtuple("LUResult", "P L U")


# ---- host arrays and checks --------------------------------------------------------------

def _floating(A, what):
    """A, checked: a float32 or float64 tensor."""
    if not isinstance(A, Tensor):
        raise TypeError(f"linalg.{what}: expected a ddpc tensor, got {type(A).__name__}")
    if A.dtype in (float16, bfloat16):
        raise DtypeError(f"linalg.{what}: Low precision dtypes not supported. Got {A.dtype}")
    if not A.dtype.is_floating_point:
        raise DtypeError(f"linalg.{what}: Expected a floating point tensor as input. Got {A.dtype}")
    return A


def _matrices(A, what, square=False):
    """A, checked: a float32 or float64 tensor of at least 2 dims (square ones if ``square``)."""
    _floating(A, what)
    if A.ndim < 2:
        raise ArgumentError(f"linalg.{what}: The input tensor A must have at least 2 dimensions, got shape {A.shape}")
    if square and A.shape[-1] != A.shape[-2]:
        raise ArgumentError(f"linalg.{what}: A must be batches of square matrices, but they are {A.shape[-2]} by "
                            f"{A.shape[-1]} matrices")
    return A


def _same_kind(A, B, what):
    if not isinstance(B, Tensor):
        raise TypeError(f"linalg.{what}: expected a ddpc tensor, got {type(B).__name__}")
    if B.dtype is not A.dtype:
        raise DtypeError(f"linalg.{what}: Expected A and B to have the same dtype, but found A of type {A.dtype} and "
                         f"B of type {B.dtype} instead")
    if B._buf.device != A._buf.device:
        raise ArgumentError(f"linalg.{what}: A is on {A.device} but B on {B.device}")


def _host(t):
    """t's elements as a numpy array: a zero-copy view of a host tensor, a host copy of a cuda one."""
    return t.detach().cpu().numpy()


def _like(arr, ref, dtype=None):
    """A numpy result as a tensor on ref's device, of ref's dtype unless ``dtype`` (no copy on the host)."""
    arr = np.array(arr, dtype=np.dtype((dtype or ref.dtype).name), order="C", copy=None)  # 0-d stays 0-d
    out = from_numpy(arr)
    return out.to(device=ref.device) if ref.is_cuda else out


def _eye(n, ref):
    return _like(np.eye(n), ref)


def _is_vector_rhs(A, B):
    """Whether B holds vectors rather than matrices, by torch.linalg.solve's rule."""
    return B.ndim == 1 or (B.ndim == A.ndim - 1 and B.shape == A.shape[:-1])


# Column blocks at most this wide are eliminated one column at a time; wider
# ones split in two, so that most of the work is matrix products (BLAS 3).
_LU_PANEL = 16


def _lu_host(a):
    """LU factorization with partial pivoting of the matrices a (..., m, n), as
    LAPACK's getrf (which numpy.linalg does not expose): the packed factors,
    the 1-based row interchanges (int32) and info, the 1-based index of the
    first zero pivot (0 where there is none). Recursive on column halves
    (Toledo's algorithm), every step vectorised over the batch."""
    m, n = a.shape[-2:]
    k = min(m, n)
    lu = np.array(a, dtype=a.dtype).reshape((math.prod(a.shape[:-2]), m, n))
    piv = np.zeros((lu.shape[0], k), np.int32)
    info = np.zeros(lu.shape[0], np.int32)
    _lu_columns(lu, 0, k, piv, info)
    if n > k:  # a wide matrix: the columns right of the square part belong to U
        lu[:, :, k:] = _unit_lower_solve(lu[:, :, :k], lu[:, :, k:])
    return lu.reshape(a.shape), piv.reshape(a.shape[:-2] + (k,)), info.reshape(a.shape[:-2])


def _unit_lower_solve(packed, rhs):
    """L^{-1} rhs for the unit lower triangle L of the square matrices ``packed``."""
    w = packed.shape[-1]
    return np.linalg.solve(np.tril(packed, -1) + np.eye(w, dtype=packed.dtype), rhs)


def _lu_columns(lu, c0, c1, piv, info):
    """Factors columns c0..c1 of lu (b, m, n) in place, rows c0 and below,
    where the columns before c0 are factored and their updates applied.
    Row interchanges move whole rows, so every column sees them."""
    if c1 - c0 > _LU_PANEL:
        h = (c0 + c1) // 2
        _lu_columns(lu, c0, h, piv, info)
        lu[:, c0:h, h:c1] = _unit_lower_solve(lu[:, c0:h, c0:h], lu[:, c0:h, h:c1])
        lu[:, h:, h:c1] -= lu[:, h:, c0:h] @ lu[:, c0:h, h:c1]
        _lu_columns(lu, h, c1, piv, info)
        return
    _lu_panel(lu, c0, c1, piv, info)


def _lu_panel(lu, c0, c1, piv, info):
    """Eliminates columns c0..c1 of lu one at a time. The panel is worked on
    transposed, so that each step's operands are contiguous rows; its row
    interchanges swap whole rows of lu (two per matrix and step)."""
    batch = np.arange(lu.shape[0])
    panel = np.ascontiguousarray(np.swapaxes(lu[:, c0:, c0:c1], 1, 2))  # (b, columns, rows c0 and below)
    for j in range(c1 - c0):
        p = j + np.argmax(np.abs(panel[:, j, j:]), axis=1)
        piv[:, c0 + j] = c0 + p + 1
        panel[batch, :, j], panel[batch, :, p] = panel[batch, :, p], panel[batch, :, j].copy()
        lu[batch, c0 + j], lu[batch, c0 + p] = lu[batch, c0 + p], lu[batch, c0 + j].copy()
        pivot = panel[:, j, j]
        zero = pivot == 0
        info[(info == 0) & zero] = c0 + j + 1
        panel[:, j, j + 1:] /= np.where(zero, 1, pivot)[:, None]  # a zero pivot's column is zero below it
        panel[:, j + 1:, j + 1:] -= panel[:, j + 1:, j, None] * panel[:, j, None, j + 1:]
    lu[:, c0:, c0:c1] = np.swapaxes(panel, 1, 2)


def _singular_message(what, info, action):
    if not info.any():  # LAPACK met a zero pivot that this elimination's rounding did not
        return f"linalg.{what}: the {action} could not be completed because the input matrix is singular."
    bad = np.flatnonzero(info.reshape(-1))[0]
    where = f"(Batch element {bad}): " if info.ndim else ""
    return (f"linalg.{what}: {where}The diagonal element {info.reshape(-1)[bad]} is zero, the {action} could not be "
            "completed because the input matrix is singular.")


def _nonsingular(what, fn, a, *rest, check_errors=True, action="inversion"):
    """fn(a, *rest) over the square matrices a and their info (0, or the first
    zero pivot of a's LU); a singular matrix raises LinAlgError, or with
    ``check_errors`` False gives NaN in its slot of the result."""
    with np.errstate(all="ignore"):
        try:
            return fn(a, *rest), np.zeros(a.shape[:-2], np.int32)
        except np.linalg.LinAlgError:
            info = _lu_host(a)[2]
            if check_errors:
                raise LinAlgError(_singular_message(what, info, action)) from None
            bad = (info != 0)[..., None, None]
            out = fn(np.where(bad, np.eye(a.shape[-1], dtype=a.dtype), a), *rest)
            return np.where(bad, np.nan, out), info


def _reduce(g, shape):
    return _ag._reduce_to(g, shape, g.dtype) if g is not None else None


def _unsqueeze_scalar(x):
    """x (...) as (..., 1, 1), to scale a batch of matrices."""
    return x.reshape(x.shape + (1, 1))


def _diag_embed(x):
    """The vectors x (..., k) as diagonal matrices (..., k, k), recorded."""
    k = x.shape[-1]
    return _ag.mul(x.unsqueeze(-1), _eye(k, x))


# ---- inverses and solves ------------------------------------------------------------------

class _Inverse(Function):
    @staticmethod
    def forward(ctx, A, check_errors):
        x, info = _nonsingular("inv", np.linalg.inv, _host(A), check_errors=check_errors)
        X = _like(x, A)
        ctx.save_for_backward(X)
        info = _like(info, A, int32)
        ctx.mark_non_differentiable(info)
        return X, info

    @staticmethod
    def backward(ctx, g, _):
        X, = ctx.saved_tensors
        Xt = X.mT
        return -(Xt @ g @ Xt), None


@autocast_op("float32_cpu")
def inv_ex(A, *, check_errors=False):
    """(inverse, info): A's inverse and, per matrix, 0 or the 1-based index of
    the first zero pivot of its LU factorization (the inverse is NaN there)."""
    _matrices(A, "inv_ex", square=True)
    return InvExResult(*_Inverse.apply(A, bool(check_errors)))


@autocast_op("float32_cpu")
def inv(A):
    """The inverse of each square matrix of A; a singular one raises LinAlgError."""
    _matrices(A, "inv", square=True)
    return _Inverse.apply(A, True)[0]


class _Solve(Function):
    """X = A^{-1} B for matrices B (..., n, k), batch dims broadcast."""

    @staticmethod
    def forward(ctx, A, B, check_errors):
        a, b = _host(A), _host(B)
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        a, b = np.broadcast_to(a, batch + a.shape[-2:]), np.broadcast_to(b, batch + b.shape[-2:])
        x, info = _nonsingular("solve", np.linalg.solve, a, b, check_errors=check_errors, action="solve")
        X = _like(x, A)
        ctx.save_for_backward(A, X)
        ctx.shapes = A.shape, B.shape
        info = _like(info, A, int32)
        ctx.mark_non_differentiable(info)
        return X, info

    @staticmethod
    def backward(ctx, g, _):
        A, X = ctx.saved_tensors
        gB = solve(A.mT, g)
        gA = -(gB @ X.mT) if ctx.needs_input_grad[0] else None
        return _reduce(gA, ctx.shapes[0]), _reduce(gB, ctx.shapes[1]), None


def solve_ex(A, B, *, left=True, check_errors=False):
    """(result, info): the solution X of A X = B (X A = B with ``left=False``)
    and info as inv_ex's. B is a batch of vectors where B.ndim == 1 or B's shape
    is A.shape[:-1], as in PyTorch; batch dims broadcast."""
    _matrices(A, "solve", square=True)
    _same_kind(A, B, "solve")
    vector = _is_vector_rhs(A, B)
    if vector:
        B = B.unsqueeze(-1)
    elif not left:
        B = B.mT
    if B.shape[-2] != A.shape[-1]:
        raise ArgumentError(f"linalg.solve: incompatible shapes of A {A.shape} and B {B.shape}")
    X, info = _Solve.apply(A if left else A.mT, B, bool(check_errors))
    return SolveExResult(X.squeeze(-1) if vector else (X if left else X.mT), info)


@autocast_op("float32_cpu")
def solve(A, B, *, left=True):
    """The solution X of A X = B (X A = B with ``left=False``); see solve_ex. A
    singular A raises LinAlgError."""
    return solve_ex(A, B, left=left, check_errors=True).result


def _triangle(A, upper, unitriangular):
    """The triangle of A that a triangular solve reads (with ones on the diagonal if ``unitriangular``)."""
    T = _ag.triu(A) if upper else _ag.tril(A)
    if unitriangular:
        T = _ag.add(_ag.triu(T, 1) if upper else _ag.tril(T, -1), _eye(A.shape[-1], A))
    return T


def solve_triangular(A, B, *, upper, left=True, unitriangular=False):
    """The solution X of A X = B (X A = B with ``left=False``) reading only A's
    upper or lower triangle (and taking its diagonal as ones with
    ``unitriangular``). Where ddpc differs: LAPACK's general solver runs on
    that triangle (numpy.linalg has no trsm), so the cost is a general solve's,
    and a zero on the diagonal raises LinAlgError where PyTorch gives inf."""
    _matrices(A, "solve_triangular", square=True)
    _same_kind(A, B, "solve_triangular")
    if B.ndim < 2:
        raise ArgumentError(f"linalg.solve_triangular: B must have at least 2 dimensions, got shape {B.shape}")
    return solve(_triangle(A, upper, unitriangular), B, left=left)


class _Det(Function):
    @staticmethod
    def forward(ctx, A):
        with np.errstate(all="ignore"):
            d = np.linalg.det(_host(A))
        D = _like(d, A)
        ctx.save_for_backward(A, D)
        ctx.singular = bool(np.any(d == 0))
        return D

    @staticmethod
    def backward(ctx, g):
        A, D = ctx.saved_tensors
        return _unsqueeze_scalar(g) * _cofactors(A, D, ctx.singular)


def _cofactors(A, D, singular):
    """The matrix of cofactors of A (the gradient of det(A)): det(A) A^{-T}, or,
    where some A is singular, det(U) det(V) U diag(the products of all singular
    values but one) V^T from A's SVD, which is defined there too."""
    if not singular:
        return _unsqueeze_scalar(D) * inv(A).mT
    U, S, Vh = svd(A)
    one = _like(np.ones(S.shape[:-1] + (1,)), S)
    before = _ag.cumprod(_ag.cat([one, S[..., :-1]], -1), -1)
    after = _ag.flip(_ag.cumprod(_ag.flip(_ag.cat([S[..., 1:], one], -1), [-1]), -1), [-1])
    with _ag.no_grad():
        sign = _ag.mul(det(U), det(Vh))
    return _unsqueeze_scalar(sign) * ((U * _ag.mul(before, after).unsqueeze(-2)) @ Vh)


def det(A):
    """The determinant of each square matrix of A. Its gradient is the matrix of
    cofactors, also at singular matrices; its second derivatives at a matrix
    of rank n - 2 or less are NaN, as in PyTorch (they go through the SVD,
    whose gradient is undefined at repeated singular values)."""
    _matrices(A, "det", square=True)
    return _Det.apply(A)


class _Slogdet(Function):
    @staticmethod
    def forward(ctx, A):
        with np.errstate(all="ignore"):
            sign, logabsdet = np.linalg.slogdet(_host(A))
        ctx.save_for_backward(A)
        sign = _like(sign, A)
        ctx.mark_non_differentiable(sign)
        return sign, _like(logabsdet, A)

    @staticmethod
    def backward(ctx, _, g):
        A, = ctx.saved_tensors
        return _unsqueeze_scalar(g) * inv(A).mT


def slogdet(A):
    """(sign, logabsdet): det(A) = sign * exp(logabsdet), without overflow; sign 0 and logabsdet -inf where singular."""
    _matrices(A, "slogdet", square=True)
    return SlogdetResult(*_Slogdet.apply(A))


# ---- factorizations ---------------------------------------------------------------------

def _cholesky_info(a):
    """Per matrix of a, 0 or the order of the first leading minor that is not
    positive-definite, found by bisection (a minor contains the smaller ones,
    so once one fails all larger ones do)."""
    def fails(m, k):
        try:
            np.linalg.cholesky(m[:k, :k])
            return False
        except np.linalg.LinAlgError:
            return True

    info = np.zeros(a.shape[:-2], np.int32)
    n = a.shape[-1]
    for idx in np.ndindex(a.shape[:-2]):  # only when some matrix failed: the error path
        m = a[idx]
        if not fails(m, n):
            continue
        lo, hi = 1, n
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if fails(m, mid) else (mid + 1, hi)
        info[idx] = lo
    return info


class _Cholesky(Function):
    @staticmethod
    def forward(ctx, A, upper, check_errors):
        a = _host(A)
        with np.errstate(all="ignore"):
            try:
                low, info = np.linalg.cholesky(a), np.zeros(a.shape[:-2], np.int32)
            except np.linalg.LinAlgError:
                info = _cholesky_info(a)
                if check_errors:
                    bad = np.flatnonzero(info.reshape(-1))[0]
                    where = f"(Batch element {bad}): " if info.ndim else ""
                    raise LinAlgError(
                        f"linalg.cholesky: {where}The factorization could not be completed because the input is not "
                        f"positive-definite (the leading minor of order {info.reshape(-1)[bad]} is not "
                        "positive-definite).") from None
                fail = (info != 0)[..., None, None]
                low = np.where(fail, np.nan, np.linalg.cholesky(np.where(fail, np.eye(a.shape[-1], dtype=a.dtype), a)))
        L = _like(np.swapaxes(low, -1, -2) if upper else low, A)
        ctx.save_for_backward(L)
        ctx.upper = upper
        info = _like(info, A, int32)
        ctx.mark_non_differentiable(info)
        return L, info

    @staticmethod
    def backward(ctx, gL, _):
        L, = ctx.saved_tensors
        if ctx.upper:
            L, gL = L.mT, gL.mT
        gA = _ag.tril(L.mT @ gL)
        gA = 0.5 * (gA + _ag.tril(gA, -1).mT)
        gA = solve_triangular(L.mT, gA, upper=True)
        return solve_triangular(L, gA, upper=False, left=False), None, None


@autocast_op("float32_cpu")
def cholesky_ex(A, *, upper=False, check_errors=False):
    """(L, info): the Cholesky factor L of each symmetric positive-definite
    matrix of A (reading its lower triangle), A = L L^T (U^T U with ``upper``),
    and per matrix 0 or the order of the first leading minor that is not
    positive-definite (L is NaN there)."""
    _matrices(A, "cholesky", square=True)
    return CholeskyExResult(*_Cholesky.apply(A, bool(upper), bool(check_errors)))


@autocast_op("float32_cpu")
def cholesky(A, *, upper=False):
    """The Cholesky factor of A (see cholesky_ex); a matrix that is not positive-definite raises LinAlgError."""
    return cholesky_ex(A, upper=upper, check_errors=True).L


class _QR(Function):
    @staticmethod
    def forward(ctx, A, mode):
        a = _host(A)
        if mode == "r":
            Q, R = _like(np.zeros((0,)), A), _like(np.linalg.qr(a, mode="r"), A)
            ctx.mark_non_differentiable(Q, R)
            return Q, R
        Q, R = (_like(x, A) for x in np.linalg.qr(a, mode=mode))
        ctx.save_for_backward(Q, R)
        ctx.mode = mode
        return Q, R

    @staticmethod
    def backward(ctx, gQ, gR):
        Q, R = ctx.saved_tensors
        m, n = Q.shape[-2], R.shape[-1]
        if m < n or (ctx.mode == "complete" and m > n):
            raise NotImplementedError("linalg.qr: ddpc differentiates the QR decomposition where m >= n, in mode "
                                      "'reduced' (or 'complete' with m == n)")
        # A = QR: gA = (gQ + Q copyltu(M)) R^{-T} with M = R gR^T - gQ^T Q,
        # copyltu(M) the symmetric matrix with M's lower triangle.
        M = R @ gR.mT - gQ.mT @ Q
        low = _ag.tril(M, -1)
        gA = gQ + Q @ (low + low.mT + _ag.tril(M) - low)
        return solve_triangular(R.mT, gA, upper=False, left=False), None


@autocast_op("float32_cpu")
def qr(A, mode="reduced"):
    """(Q, R) with A = Q R, Q's columns orthonormal and R upper triangular:
    mode 'reduced' (Q m x k, R k x n, k = min(m, n)), 'complete' (Q m x m) or
    'r' (R alone; Q is empty, as in PyTorch)."""
    _matrices(A, "qr")
    if mode not in ("reduced", "complete", "r"):
        raise ArgumentError(f"linalg.qr: qr received unrecognized mode '{mode}' but expected one of 'reduced' "
                            "(default), 'r', or 'complete'")
    return QR(*_QR.apply(A, mode))


def _skew(X):
    return X - X.mT


class _SVD(Function):
    @staticmethod
    def forward(ctx, A, full_matrices):
        u, s, vh = np.linalg.svd(_host(A), full_matrices=full_matrices)
        U, S, Vh = _like(u, A), _like(s, A), _like(vh, A)
        ctx.save_for_backward(U, S, Vh)
        ctx.set_materialize_grads(False)
        return U, S, Vh

    @staticmethod
    def backward(ctx, gU, gS, gVh):
        U, S, Vh = ctx.saved_tensors
        m, n, k = U.shape[-2], Vh.shape[-1], S.shape[-1]
        if U.shape[-1] != k or Vh.shape[-2] != k:  # full_matrices: the extra columns do not enter, as in PyTorch
            U, Vh = U[..., :k], Vh[..., :k, :]
            gU = gU[..., :k] if gU is not None else None
            gVh = gVh[..., :k, :] if gVh is not None else None
        if gU is None and gVh is None:
            return (U * gS.unsqueeze(-2)) @ Vh, None
        # PyTorch's svd_backward: the off-diagonal part divided by E_jk = S_k^2 - S_j^2.
        S2 = S * S
        E = S2.unsqueeze(-2) - S2.unsqueeze(-1) + _eye(k, S)
        Sr, Sc = S.unsqueeze(-2), S.unsqueeze(-1)
        if gU is not None and gVh is not None:
            inner = (_skew(U.mT @ gU) * Sr + Sc * _skew(Vh @ gVh.mT)) / E
        elif gU is not None:
            inner = (_skew(U.mT @ gU) / E) * Sr
        else:
            inner = Sc * (_skew(Vh @ gVh.mT) / E)
        if gS is not None:
            inner = inner + _diag_embed(gS)
        if m > k and gU is not None:
            gA = U @ inner
            gUSinv = gU / Sr
            gA = (gA + gUSinv - U @ (U.mT @ gUSinv)) @ Vh
        elif n > k and gVh is not None:
            gA = inner @ Vh
            SinvgVh = gVh / Sc
            gA = U @ (gA + SinvgVh - (SinvgVh @ Vh.mT) @ Vh)
        else:
            gA = U @ (inner @ Vh)
        return gA, None


@autocast_op("float32_cpu")
def svd(A, full_matrices=True, *, driver=None):
    """(U, S, Vh) with A = U diag(S) Vh, S descending. Its gradient is PyTorch's:
    well defined for losses that do not depend on the signs of U's and V's
    columns, and infinite where two singular values are equal. ``driver`` is
    accepted for PyTorch's signature (it selects a cuSOLVER routine there)."""
    _matrices(A, "svd")
    return SVD(*_SVD.apply(A, bool(full_matrices)))


@autocast_op("float32_cpu")
def svdvals(A, *, driver=None):
    """A's singular values, descending (differentiable: U diag(gS) Vh)."""
    _matrices(A, "svdvals")
    if _ag._needs_grad(A):
        return _SVD.apply(A, False)[1]
    return _like(np.linalg.svd(_host(A), compute_uv=False), A)


def _check_uplo(UPLO, what):
    if UPLO not in ("L", "U"):
        raise ArgumentError(f"linalg.{what}: UPLO must be 'L' or 'U', got {UPLO!r}")


class _Eigh(Function):
    @staticmethod
    def forward(ctx, A, UPLO):
        w, v = np.linalg.eigh(_host(A), UPLO=UPLO)
        L, V = _like(w, A), _like(v, A)
        ctx.save_for_backward(L, V)
        ctx.set_materialize_grads(False)
        return L, V

    @staticmethod
    def backward(ctx, gL, gV):
        L, V = ctx.saved_tensors
        if gV is None:
            return (V * gL.unsqueeze(-2)) @ V.mT, None
        # PyTorch's: the skew part of V^T gV over E_ij = L_j - L_i, gL on the diagonal.
        E = L.unsqueeze(-2) - L.unsqueeze(-1) + _eye(L.shape[-1], L)
        inner = 0.5 * _skew(V.mT @ gV) / E
        if gL is not None:
            inner = inner + _diag_embed(gL)
        return V @ inner @ V.mT, None


@autocast_op("float32_cpu")
def eigh(A, UPLO="L"):
    """(eigenvalues, eigenvectors) of the symmetric matrices A, reading the
    lower (``UPLO='L'``) or upper triangle; eigenvalues ascending. The gradient
    (PyTorch's) assumes A symmetric and is infinite at repeated eigenvalues
    unless the loss depends only on them."""
    _matrices(A, "eigh", square=True)
    _check_uplo(UPLO, "eigh")
    return EighResult(*_Eigh.apply(A, UPLO))


@autocast_op("float32_cpu")
def eigvalsh(A, UPLO="L"):
    """The eigenvalues of the symmetric matrices A, ascending (see eigh)."""
    _matrices(A, "eigvalsh", square=True)
    _check_uplo(UPLO, "eigvalsh")
    if _ag._needs_grad(A):
        return _Eigh.apply(A, UPLO)[0]
    return _like(np.linalg.eigvalsh(_host(A), UPLO=UPLO), A)


# ---- pseudo-inverse, least squares and rank ------------------------------------------------

def _cutoff(s, atol, rtol, shape, dtype):
    """PyTorch's threshold for the singular values (or |eigenvalues|) s (..., k)
    counted as non-zero: max(atol, rtol * the largest), rtol defaulting to
    eps * max(m, n) unless a positive atol is given."""
    def value(v):
        return _host(v) if isinstance(v, Tensor) else (0.0 if v is None else float(v))

    a = value(atol)
    if rtol is None:
        r = np.finfo(np.dtype(dtype.name)).eps * max(shape[-2:]) if atol is None or np.all(a <= 0) else 0.0
    else:
        r = value(rtol)
    smax = s.max(-1, initial=0.0)
    return np.maximum(a, r * smax)


class _Pinv(Function):
    @staticmethod
    def forward(ctx, A, atol, rtol, hermitian):
        a = _host(A)
        if hermitian:
            w, v = np.linalg.eigh(a)
            keep = np.abs(w) > _cutoff(np.abs(w), atol, rtol, a.shape, A.dtype)[..., None]
            p = (v * np.where(keep, 1 / np.where(keep, w, 1), 0)[..., None, :]) @ np.swapaxes(v, -1, -2)
        else:
            u, s, vh = np.linalg.svd(a, full_matrices=False)
            keep = s > _cutoff(s, atol, rtol, a.shape, A.dtype)[..., None]
            p = (np.swapaxes(vh, -1, -2) * np.where(keep, 1 / np.where(keep, s, 1), 0)[..., None, :]) \
                @ np.swapaxes(u, -1, -2)
        P = _like(p, A)
        ctx.save_for_backward(A, P)
        return P

    @staticmethod
    def backward(ctx, g):
        A, P = ctx.saved_tensors  # PyTorch's pinv_backward
        m, n = A.shape[-2:]
        Ph, gh = P.mT, g.mT
        if m <= n:
            K = gh @ P
            KPh = K @ Ph
            return -(P @ K).mT + KPh - (A @ P) @ KPh + (Ph @ P) @ (gh - K @ A), None, None, None
        K = P @ gh
        PhK = Ph @ K
        return -(K @ P).mT + (gh - A @ K) @ P @ Ph + PhK - PhK @ P @ A, None, None, None


def pinv(A, *, atol=None, rtol=None, hermitian=False):
    """The Moore-Penrose pseudo-inverse of A from its SVD (its eigendecomposition
    with ``hermitian``), singular values at or below max(atol, rtol * the
    largest) taken as zero (see matrix_rank for the defaults)."""
    _matrices(A, "pinv", square=hermitian)
    return _Pinv.apply(A, atol, rtol, bool(hermitian))


@autocast_op("float32_cpu")
def matrix_rank(A, *, atol=None, rtol=None, hermitian=False):
    """The number of singular values (|eigenvalues| with ``hermitian``) of A
    above max(atol, rtol * the largest), rtol defaulting to eps * max(m, n)
    when atol is not positive, as int64."""
    _matrices(A, "matrix_rank", square=hermitian)
    a = _host(A)
    s = np.abs(np.linalg.eigvalsh(a)) if hermitian else np.linalg.svd(a, compute_uv=False)
    return _like((s > _cutoff(s, atol, rtol, a.shape, A.dtype)[..., None]).sum(-1), A, int64)


_LSTSQ_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


@autocast_op("float32_cpu")
def lstsq(A, B, rcond=None, *, driver=None):
    """(solution, residuals, rank, singular_values): the X minimising |A X - B|
    (the minimum-norm one where A is rank-deficient), as pinv(A, rtol=rcond) @ B
    (rcond defaulting to eps * max(m, n)); residuals, the squared residual of
    each column, where m > n, every A has full rank and the driver is not
    'gelsy' (else empty); rank except with 'gels'; singular_values with
    'gelsd' and 'gelss'. Where ddpc differs: every driver computes through the
    SVD, so results agree with LAPACK's drivers to rounding, not bit for bit."""
    _matrices(A, "lstsq")
    _same_kind(A, B, "lstsq")
    if driver not in (None,) + _LSTSQ_DRIVERS:
        raise ArgumentError(f"torch.linalg.lstsq: parameter `driver` should be one of {_LSTSQ_DRIVERS}")
    driver = driver or "gelsy"
    vector = _is_vector_rhs(A, B)
    Bm = B.unsqueeze(-1) if vector else B
    m, n = A.shape[-2:]
    if Bm.ndim < 2 or Bm.shape[-2] != m:
        raise ArgumentError(f"torch.linalg.lstsq: input.size(-2) should match other.size(-2), got A {A.shape} and "
                            f"B {B.shape}")
    rtol = float(np.finfo(np.dtype(A.dtype.name)).eps * max(m, n)) if rcond is None or rcond < 0 else rcond
    X = pinv(A, rtol=rtol) @ Bm
    s = np.linalg.svd(_host(A), compute_uv=False)
    ranks = (s > rtol * s.max(-1, initial=0.0)[..., None]).sum(-1)
    empty = zeros(0, dtype=A.dtype, device=A.device)
    if m > n and driver != "gelsy" and np.all(ranks == n):
        residuals = _ag.sum(_ag.square(A @ X - Bm), -2)
        residuals = residuals.squeeze(-1) if vector else residuals
    else:
        residuals = empty
    rank = zeros(0, dtype=int64, device=A.device) if driver == "gels" else _like(ranks, A, int64)
    singular_values = _like(s, A) if driver in ("gelsd", "gelss") else empty
    return LstsqResult(X.squeeze(-1) if vector else X, residuals, rank, singular_values)


# ---- matrix functions ----------------------------------------------------------------------

def matrix_power(A, n):
    """A to the integer power n by repeated squaring (n < 0: of inv(A); n = 0: the identity)."""
    _matrices(A, "matrix_power", square=True)
    if not isinstance(n, numbers.Integral):
        raise TypeError(f"linalg.matrix_power: n must be an integer, got {type(n).__name__}")
    if n == 0:  # the identity, in the graph with a zero gradient (also where A holds inf or NaN)
        return _ag.where(zeros(A.shape, dtype=bool_, device=A.device), A, _eye(A.shape[-1], A))
    base, n = (inv(A), -n) if n < 0 else (A, n)
    out = None
    while n:
        if n & 1:
            out = base if out is None else out @ base
        n >>= 1
        if n:
            base = base @ base
    return out


# Padé [13/13] coefficients (Higham, "The scaling and squaring method for the
# matrix exponential revisited", 2005), and the 1-norm up to which it is accurate in float64.
_PADE13 = (64764752532480000., 32382376266240000., 7771770303897600., 1187353796428800., 129060195264000.,
           10559470521600., 670442572800., 33522128640., 1323241920., 40840800., 960960., 16380., 182., 1.)
_THETA13 = 5.371920351148152


def _expm_host(a):
    """exp of the matrices a by scaling and squaring with the Padé [13/13]
    approximant, each matrix scaled by its own power of two."""
    norm = np.abs(a).sum(-2).max(-1, initial=0.0)
    s = np.maximum(0, np.ceil(np.log2(np.maximum(norm, np.finfo(np.float64).tiny) / _THETA13))).astype(np.int64)
    a = a / np.exp2(s)[..., None, None].astype(a.dtype)
    b = _PADE13
    eye = np.eye(a.shape[-1], dtype=a.dtype)
    a2 = a @ a
    a4 = a2 @ a2
    a6 = a4 @ a2
    u = a @ (a6 @ (b[13] * a6 + b[11] * a4 + b[9] * a2) + b[7] * a6 + b[5] * a4 + b[3] * a2 + b[1] * eye)
    v = a6 @ (b[12] * a6 + b[10] * a4 + b[8] * a2) + b[6] * a6 + b[4] * a4 + b[2] * a2 + b[0] * eye
    r = np.linalg.solve(v - u, v + u)
    for step in range(int(s.max(initial=0))):
        r = np.where((s > step)[..., None, None], r @ r, r)
    return r


class _MatrixExp(Function):
    @staticmethod
    def forward(ctx, A):
        ctx.save_for_backward(A)
        with np.errstate(all="ignore"):
            return _like(_expm_host(_host(A).astype(np.float64)), A)

    @staticmethod
    def backward(ctx, g):
        A, = ctx.saved_tensors
        # The gradient is the upper right block of exp([[A^T, g], [0, A^T]]) (Mathias, 1996).
        n = A.shape[-1]
        At = A.mT
        top = _ag.cat([At, g], -1)
        bottom = _ag.cat([_ag.mul(At, 0.0), At], -1)
        return matrix_exp(_ag.cat([top, bottom], -2))[..., :n, n:]


def matrix_exp(A):
    """The matrix exponential of each square matrix of A (computed in float64 and
    rounded once to A's dtype)."""
    _matrices(A, "matrix_exp", square=True)
    return _MatrixExp.apply(A)


def multi_dot(tensors):
    """The product of the matrices in ``tensors`` (the first may be a row
    vector, the last a column vector), multiplied in the order that takes
    the fewest scalar multiplications."""
    tensors = list(tensors)
    if len(tensors) < 2:
        raise ArgumentError(f"multi_dot(): expected at least 2 tensors but got {len(tensors)}")
    first_vec, last_vec = tensors[0].ndim == 1, tensors[-1].ndim == 1
    if first_vec:
        tensors[0] = tensors[0].unsqueeze(0)
    if last_vec:
        tensors[-1] = tensors[-1].unsqueeze(-1)
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor) or t.ndim != 2:
            raise ArgumentError(f"multi_dot(): tensor {i} must be 2-D (the first and last may be 1-D)")
        if i and tensors[i - 1].shape[1] != t.shape[0]:
            raise ArgumentError(f"multi_dot(): tensors {i - 1} and {i} with shapes {tensors[i - 1].shape} and "
                                f"{t.shape} cannot be multiplied")
    dims = [tensors[0].shape[0]] + [t.shape[1] for t in tensors]
    k = len(tensors)
    cost = [[0] * k for _ in range(k)]
    split = [[0] * k for _ in range(k)]
    for span in range(1, k):  # the classic matrix-chain order over the k factors
        for i in range(k - span):
            j = i + span
            cost[i][j], split[i][j] = min((cost[i][s] + cost[s + 1][j] + dims[i] * dims[s + 1] * dims[j + 1], s)
                                          for s in range(i, j))

    def product(i, j):
        return tensors[i] if i == j else product(i, split[i][j]) @ product(split[i][j] + 1, j)

    out = product(0, k - 1)
    if first_vec:
        out = out.squeeze(0)
    if last_vec:
        out = out.squeeze(-1)
    return out


@autocast_op("float32_cpu")
def tensorinv(A, ind=2):
    """The inverse of A in the sense of tensordot: A's first ``ind`` dims
    against the rest, as one square matrix, inverted; shape A.shape[ind:] + A.shape[:ind]."""
    _floating(A, "tensorinv")
    if ind <= 0:
        raise ArgumentError(f"linalg.tensorinv: Expected a strictly positive integer for 'ind', but got {ind}")
    rows, cols = math.prod(A.shape[:ind]), math.prod(A.shape[ind:])
    if rows != cols:
        raise ArgumentError("linalg.tensorinv: Expected self to satisfy the requirement prod(self.shape[ind:]) == "
                            f"prod(self.shape[:ind]), but got {cols} != {rows}")
    return inv(A.reshape(rows, cols)).reshape(A.shape[ind:] + A.shape[:ind])


@autocast_op("float32_cpu")
def tensorsolve(A, B, dims=None):
    """The X with tensordot(A, X, X.ndim) = B: A's dims ``dims`` moved last,
    then A's leading B.ndim dims against the rest as one square system."""
    _floating(A, "tensorsolve")
    _same_kind(A, B, "tensorsolve")
    if dims is not None:
        dims = [_ag._dim(A, d) for d in dims]
        A = A.movedim(dims, list(range(A.ndim - len(dims), A.ndim)))
    x_shape = A.shape[B.ndim:]
    rows, cols = math.prod(B.shape), math.prod(x_shape)
    if A.shape[:B.ndim] != B.shape or rows != cols:
        raise ArgumentError(f"linalg.tensorsolve: A of shape {A.shape} and B of shape {B.shape} do not form a square "
                            "system (A.shape must start with B.shape and the remaining dims hold as many elements)")
    return solve(A.reshape(rows, cols), B.reshape(rows)).reshape(x_shape)


matmul = _ag.matmul


# ---- LU ----------------------------------------------------------------------------------

def _permutations(pivots, m):
    """The row order P^T applies (int64, (..., m)) from LAPACK's 1-based row interchanges."""
    piv = np.asarray(pivots, dtype=np.int64).reshape((math.prod(pivots.shape[:-1]), pivots.shape[-1])) - 1
    perm = np.tile(np.arange(m), (piv.shape[0], 1))
    batch = np.arange(piv.shape[0])
    for j in range(piv.shape[1]):  # one swap per factored column, over the whole batch at once
        perm[batch, j], perm[batch, piv[:, j]] = perm[batch, piv[:, j]], perm[batch, j].copy()
    return perm.reshape(pivots.shape[:-1] + (m,))


def _unpack(LU, m, n):
    k = min(m, n)
    L = _ag.add(_ag.tril(LU[..., :, :k], -1), _like(np.eye(m, k), LU))
    U = _ag.triu(LU[..., :k, :])
    return L, U


class _LUFactor(Function):
    @staticmethod
    def forward(ctx, A, check_errors):
        lu, piv, info = _lu_host(_host(A))
        if check_errors and np.any(info):
            raise LinAlgError(_singular_message("lu_factor", info, "factorization"))
        LU = _like(lu, A)
        ctx.save_for_backward(LU)
        pivots, info = _like(piv, A, int32), _like(info, A, int32)
        ctx.pivots = piv
        ctx.mark_non_differentiable(pivots, info)
        return LU, pivots, info

    @staticmethod
    def backward(ctx, gLU, _, __):
        LU, = ctx.saved_tensors
        m, n = LU.shape[-2:]
        if m != n:
            raise NotImplementedError("linalg.lu_factor: ddpc differentiates the LU factorization of square "
                                      "matrices only")
        # PyTorch's linalg_lu_backward for square A = P L U:
        # gA = P L^{-T} (tril(L^T gL, -1) + triu(gU U^T)) U^{-T}.
        L, U = _unpack(LU, m, n)
        gL, gU = _ag.tril(gLU, -1), _ag.triu(gLU)
        phi = _ag.tril(L.mT @ gL, -1) + _ag.triu(gU @ U.mT)
        gA = solve_triangular(L.mT, phi, upper=True, unitriangular=True)
        gA = solve_triangular(U.mT, gA, upper=False, left=False)
        return _permute_rows(gA, ctx.pivots, inverse=True), None


def _permute_rows(X, pivots, inverse=False):
    """P^T X (the rows in the factorization's order), or P X with ``inverse``."""
    perm = _permutations(pivots, X.shape[-2])
    if inverse:
        perm = np.argsort(perm, axis=-1)
    index = _like(np.broadcast_to(perm[..., None], perm.shape + (X.shape[-1],)), X, int64)
    return _ag.gather(X, -2, _ag.expand(index, X.shape[:-2] + index.shape[-2:]) if index.ndim < X.ndim else index)


def lu_factor_ex(A, *, pivot=True, check_errors=False):
    """(LU, pivots, info): A = P L U packed as in LAPACK's getrf (L's unit
    diagonal implied), the 1-based row interchanges (int32) and per matrix 0
    or the first zero pivot. ``pivot=False`` is refused on the host, as in PyTorch."""
    _matrices(A, "lu_factor")
    if not pivot:
        raise RuntimeError("linalg.lu_factor: LU without pivoting is not implemented on the CPU")
    return LUFactorExResult(*_LUFactor.apply(A, bool(check_errors)))


def lu_factor(A, *, pivot=True):
    """(LU, pivots) of lu_factor_ex; a singular matrix raises LinAlgError, as in PyTorch."""
    LU, pivots, _ = lu_factor_ex(A, pivot=pivot, check_errors=True)
    return LUFactorResult(LU, pivots)


def lu(A, *, pivot=True):
    """(P, L, U) with A = P L U: P a permutation matrix, L unit lower triangular
    (m x k), U upper triangular (k x n). Differentiable through L and U for square A."""
    LU, pivots, _ = lu_factor_ex(A, pivot=pivot)
    m, n = A.shape[-2:]
    L, U = _unpack(LU, m, n)
    return LUResult(_permutation_matrices(pivots, m, A), L, U)


def _permutation_matrices(pivots, m, ref):
    """The permutation matrices P (m x m, ref's dtype and device) of LAPACK's
    1-based row interchanges ``pivots`` (..., k): A = P L U."""
    perm = _permutations(_host(pivots), m)
    P = np.zeros(perm.shape + (m,), dtype=np.dtype(ref.dtype.name))
    np.put_along_axis(P, perm[..., None, :], 1.0, axis=-2)  # column j of P is e_{perm[j]}
    return _like(P, ref)


def lu_solve(LU, pivots, B, *, left=True, adjoint=False):
    """The solution X of A X = B (X A = B with ``left=False``; A^T in place of
    A with ``adjoint``) from A's lu_factor, by two triangular solves
    (differentiable in LU and B)."""
    _matrices(LU, "lu_solve", square=True)
    _same_kind(LU, B, "lu_solve")
    n = LU.shape[-1]
    L, U = _unpack(LU, n, n)
    piv = _host(pivots)
    if left != adjoint:  # A X = B, or X A^T = B: X^T = A^{-1} B^T
        rhs = B if left else B.mT
        X = solve_triangular(U, solve_triangular(L, _permute_rows(rhs, piv), upper=False, unitriangular=True),
                             upper=True)
        return X if left else X.mT
    # A^T X = B, or X A = B: X^T = A^{-T} B^T, with A^T = U^T L^T P^T
    rhs = B if adjoint else B.mT
    Y = solve_triangular(L.mT, solve_triangular(U.mT, rhs, upper=False), upper=True, unitriangular=True)
    X = _permute_rows(Y, piv, inverse=True)
    return X if adjoint else X.mT


# ---- products and norms --------------------------------------------------------------------

def vecdot(x, y, *, dim=-1):
    """The dot products of x and y (broadcast) along ``dim``."""
    return _ag.sum(_ag.mul(x, y), dim)


def cross(input, other, *, dim=-1):
    """The cross product of 3-vectors along ``dim`` (default the last), input and other broadcast."""
    return _la.cross(input, other, dim)


def diagonal(A, *, offset=0, dim1=-2, dim2=-1):
    """The diagonal of each matrix of A (torch.diagonal with the last two dims by default)."""
    return _la.diagonal(A, offset, dim1, dim2)


def vander(x, *, N=None):
    """The Vandermonde matrices of the vectors x (..., n): columns x^0, x^1, ...,
    x^(N-1) (N defaulting to n), as running products (differentiable)."""
    if not isinstance(x, Tensor):
        raise TypeError(f"linalg.vander: expected a ddpc tensor, got {type(x).__name__}")
    if x.ndim < 1:
        raise ArgumentError("linalg.vander: x must have at least one dimension")
    N = x.shape[-1] if N is None else int(N)
    if N <= 0:
        raise ArgumentError(f"linalg.vander: N must be greater than 1, got {N}")
    ones = _ag.add(_ag.mul(x.unsqueeze(-1), 0), 1)
    if N == 1:
        return ones
    powers = _ag.cumprod(_ag.expand(x.unsqueeze(-1), x.shape + (N - 1,)), -1)
    return _ag.cat([ones, powers], -1)


def _float_norm_input(x, dtype, what):
    if not isinstance(x, Tensor):
        raise TypeError(f"linalg.{what}: expected a ddpc tensor, got {type(x).__name__}")
    if dtype is not None:
        x = x.to(dtype=dtype)
    if not x.dtype.is_floating_point:
        raise DtypeError(f"linalg.{what}: Expected a floating point tensor as input. Got {x.dtype}")
    return x


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    """The vector ord-norm of x over ``dim`` (every element when None): ord any
    real number, inf or -inf (max or min |x|), 0 (the number of non-zero
    elements). The 2-norm's gradient is 0 where the norm is 0, as in PyTorch.
    A complex x gives the real norm of its magnitudes |x|."""
    if dtype is not None:
        x = x.to(dtype=dtype)
    if x.dtype.is_complex:
        x = _ag.abs(x)
    x = _float_norm_input(x, None, "vector_norm")
    if isinstance(ord, str) or not isinstance(ord, numbers.Real):
        raise ArgumentError(f"linalg.vector_norm: ord must be a real number, got {ord!r}")
    if x.dtype.name in ("float16", "bfloat16"):  # powers summed in float32, as PyTorch's
        return vector_norm(x.float(), ord, dim, keepdim).to(dtype=x.dtype)
    dims = None if dim is None else ([dim] if isinstance(dim, numbers.Integral) else list(dim))
    if dims is not None and not dims:
        dims = None
    if x.ndim == 0:  # the norm of its one element, 0-d also with keepdim (as PyTorch's)
        _ag._dims(x, dims)
        return vector_norm(x.reshape(1), ord)
    if ord == -math.inf:
        out = _ag.amin(_ag.abs(x), tuple(dims) if dims is not None else tuple(range(x.ndim)), keepdim)
    else:
        out = _la._pnorm(x, float(ord), dims if dims is not None else list(range(x.ndim)), keepdim)
    return out


def _largest(x, dim, keepdim):
    """The largest of non-negative x along ``dim``; 0 along an empty dim, as PyTorch's matrix norms take it."""
    return _ag.sum(x, dim, keepdim) if x.shape[dim] == 0 else _ag.amax(x, dim, keepdim)


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None):
    """The matrix norm of the matrices over the two dims ``dim``: 'fro', 'nuc'
    (the sum of the singular values), 2 and -2 (the largest and the smallest),
    1 and -1 (the largest and smallest column sum of |A|), inf and -inf (row sums)."""
    A = _float_norm_input(A, dtype, "matrix_norm")
    if A.ndim < 2:
        raise ArgumentError(f"linalg.matrix_norm: The input tensor A must have at least 2 dimensions, got {A.shape}")
    d0, d1 = (_ag._dim(A, d) for d in dim)
    if d0 == d1:
        raise ArgumentError(f"linalg.matrix_norm: dims must be different, got {tuple(dim)}")
    if ord == "fro":
        return vector_norm(A, 2, (d0, d1), keepdim)
    if ord in ("nuc", 2, -2):
        s = svdvals(A.movedim((d0, d1), (-2, -1)) if (d0, d1) != (A.ndim - 2, A.ndim - 1) else A)
        out = _ag.sum(s, -1) if ord == "nuc" else (_largest(s, -1, False) if ord == 2 else _ag.amin(s, -1))
        return out.unsqueeze(min(d0, d1)).unsqueeze(max(d0, d1)) if keepdim else out
    if ord in (1, -1, math.inf, -math.inf):
        summed, over = (d0, d1) if ord in (1, -1) else (d1, d0)
        pick = _largest if ord > 0 else _ag.amin
        out = pick(_ag.sum(_ag.abs(A), summed, keepdim=True), over, True)
        return out if keepdim else out.squeeze(max(d0, d1)).squeeze(min(d0, d1))
    raise ArgumentError(f"linalg.matrix_norm: Order {ord!r} not supported.")


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None):
    """A vector norm (dim an int, or A 1-d) or a matrix norm (dim a pair, or A
    2-d) as torch.linalg.norm; with neither ord nor dim, the 2-norm of all of A's elements."""
    if dim is not None:
        dims = (dim,) if isinstance(dim, numbers.Integral) else tuple(dim)
        if len(dims) == 1:
            return vector_norm(A, 2 if ord is None else ord, dims, keepdim, dtype=dtype)
        if len(dims) == 2:
            return matrix_norm(A, "fro" if ord is None else ord, dims, keepdim, dtype=dtype)
        raise ArgumentError(f"linalg.norm: If dim is specified, it must be of length 1 or 2. Got {list(dims)}")
    if ord is None:
        return vector_norm(A, 2, None, keepdim, dtype=dtype)
    if A.ndim == 1:
        return vector_norm(A, ord, None, keepdim, dtype=dtype)
    if A.ndim == 2:
        return matrix_norm(A, ord, (-2, -1), keepdim, dtype=dtype)
    raise ArgumentError(f"linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. Got {A.ndim}D.")


@autocast_op("float32_cpu")
def cond(A, p=None):
    """The condition number of A in the matrix norm p: for None and 2 the
    ratio of the largest singular value to the smallest (-2: its inverse),
    else norm(A, p) * norm(inv(A), p) (square A; inf where A is singular)."""
    _matrices(A, "cond")
    if p in (None, 2, -2):
        s = svdvals(A)
        big, small = s[..., 0], s[..., -1]
        return _ag.div(small, big) if p == -2 else _ag.div(big, small)
    _matrices(A, "cond", square=True)
    inverse, info = inv_ex(A)
    out = _ag.mul(matrix_norm(A, p), matrix_norm(inverse, p))
    return _ag.where(info.detach() != 0, math.inf, out)


@autocast_op("float32_cpu")
def householder_product(A, tau):
    """The first n columns of the product H_1 ... H_k of the Householder
    reflectors H_i = I - tau_i v_i v_i^T, v_i the i-th column of A below its
    diagonal with 1 on it (LAPACK's orgqr), as a product of recorded rank-one
    updates (one per reflector)."""
    _matrices(A, "householder_product")
    _same_kind(A, tau, "householder_product")
    m, n = A.shape[-2:]
    k = tau.shape[-1]
    if n > m or k > n:
        raise ArgumentError(f"torch.linalg.householder_product: expected m >= n >= k, got A {A.shape} and tau "
                            f"{tau.shape}")
    V = _ag.add(_ag.tril(A[..., :, :k], -1), _like(np.eye(m, k), A))
    Q = _ag.expand(_like(np.eye(m, n), A), A.shape[:-2] + (m, n))
    for i in range(k - 1, -1, -1):  # Q <- H_i Q, from the last reflector to the first
        v = V[..., :, i:i + 1]
        Q = Q - _unsqueeze_scalar(tau[..., i]) * (v @ (v.mT @ Q))
    return Q


__all__ = ["QR", "SVD", "CholeskyExResult", "EighResult", "InvExResult", "LUFactorExResult", "LUFactorResult",
           "LUResult", "LinAlgError", "LstsqResult", "SlogdetResult", "SolveExResult", "cholesky", "cholesky_ex",
           "cond", "cross", "det", "diagonal", "eigh", "eigvalsh", "householder_product", "inv", "inv_ex", "lstsq",
           "lu", "lu_factor", "lu_factor_ex", "lu_solve", "matmul", "matrix_exp", "matrix_norm", "matrix_power",
           "matrix_rank", "multi_dot", "norm", "pinv", "qr", "slogdet", "solve", "solve_ex", "solve_triangular", "svd",
           "svdvals", "tensorinv", "tensorsolve", "vander", "vecdot", "vector_norm"]

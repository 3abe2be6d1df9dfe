"""ddpc.linalg and the top-level matrix functions against numpy and closed
forms (A inv(A) = I, the factorizations' reconstructions, the normal
equations of least squares), batched; their errors; gradients against
central differences in float64 for every differentiable function, and
Hessian-vector products (create_graph) for the main ones; CUDA tensors
against the host (marked gpu)."""

import math

import numpy as np
import pytest
from numeric import numeric_grad
from test_double_backward import check_hvp

import ddpc
from ddpc import linalg as LA

RNG = np.random.default_rng(3)
A = RNG.standard_normal((2, 3, 4, 4))           # a batch of square matrices
B = RNG.standard_normal((2, 3, 4, 2))
TALL = RNG.standard_normal((2, 5, 3))
WIDE = RNG.standard_normal((2, 3, 5))
SPD = A @ np.swapaxes(A, -1, -2) + 4 * np.eye(4)


def t(a, dtype="float64", **kw):
    return ddpc.tensor(np.asarray(a), dtype=dtype, **kw)


def tol(dtype):
    return {"rtol": 1e-4, "atol": 1e-4} if dtype == "float32" else {"rtol": 1e-10, "atol": 1e-10}


def sym(x):
    """x's symmetric part, so that a function of symmetric matrices has a gradient at any x."""
    return (x + x.mT) * 0.5


# ---- values ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_inverses_solves_and_determinants(dtype):
    a, b = t(A, dtype), t(B, dtype)
    inv = LA.inv(a)
    assert inv.dtype.name == dtype and inv.shape == A.shape
    np.testing.assert_allclose((a @ inv).numpy(), np.broadcast_to(np.eye(4), A.shape), **tol(dtype))
    x = LA.solve(a, b)
    np.testing.assert_allclose((a @ x).numpy(), B, **tol(dtype))
    v = LA.solve(a, b[..., 0])  # B.shape == A.shape[:-1]: vectors
    assert v.shape == (2, 3, 4)
    np.testing.assert_allclose(v.numpy(), np.linalg.solve(A, B[..., :1])[..., 0], **tol(dtype))
    right = LA.solve(a, t(np.swapaxes(B, -1, -2), dtype), left=False)
    np.testing.assert_allclose((right @ a).numpy(), np.swapaxes(B, -1, -2), **tol(dtype))
    np.testing.assert_allclose(LA.solve(a[0], t(B[0, 0, :, 0], dtype)).numpy(),  # a 1-d B broadcasts over the batch
                               np.linalg.solve(A[0], np.broadcast_to(B[0, 0, :, :1], (3, 4, 1)))[..., 0], **tol(dtype))
    np.testing.assert_allclose(LA.det(a).numpy(), np.linalg.det(A), **tol(dtype))
    sign, logabsdet = LA.slogdet(a)
    np.testing.assert_allclose(sign.numpy(), np.sign(np.linalg.det(A)))
    np.testing.assert_allclose(logabsdet.numpy(), np.log(np.abs(np.linalg.det(A))), **tol(dtype))
    assert ddpc.logdet(t(SPD[0, 0], dtype)).item() == pytest.approx(np.log(np.linalg.det(SPD[0, 0])), rel=1e-5)
    assert math.isnan(ddpc.logdet(t(-np.eye(3), dtype)).item())
    assert ddpc.logdet(t(np.zeros((2, 2)), dtype)).item() == -math.inf


def test_ex_forms_report_singular_matrices_in_info():
    m = t(np.stack([np.eye(3), np.diag([1.0, 0.0, 2.0])]))
    inverse, info = LA.inv_ex(m)
    assert info.dtype is ddpc.int32 and info.tolist() == [0, 2]
    np.testing.assert_array_equal(inverse[0].numpy(), np.eye(3))
    assert np.isnan(inverse[1].numpy()).all()
    result, info = LA.solve_ex(m, t(np.ones((2, 3, 1))))
    assert info.tolist() == [0, 2] and result[0].numpy().ravel().tolist() == [1.0, 1.0, 1.0]
    L, info = LA.cholesky_ex(t(np.stack([np.eye(3), np.diag([1.0, 1.0, -1.0]), np.diag([-1.0, 1.0, 1.0])])))
    assert info.tolist() == [0, 3, 1]
    np.testing.assert_array_equal(L[0].numpy(), np.eye(3))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_factorizations_reconstruct_their_input(dtype):
    a, spd = t(A, dtype), t(SPD, dtype)
    L = LA.cholesky(spd)
    np.testing.assert_allclose((L @ L.mT).numpy(), SPD, **tol(dtype))
    np.testing.assert_allclose(L.numpy(), np.tril(L.numpy()))
    U = LA.cholesky(spd, upper=True)
    np.testing.assert_allclose((U.mT @ U).numpy(), SPD, **tol(dtype))
    for x in (TALL, WIDE):
        m, n = x.shape[-2:]
        Q, R = LA.qr(t(x, dtype))
        assert Q.shape == (2, m, min(m, n)) and R.shape == (2, min(m, n), n)
        np.testing.assert_allclose((Q @ R).numpy(), x, **tol(dtype))
        np.testing.assert_allclose((Q.mT @ Q).numpy(), np.broadcast_to(np.eye(min(m, n)), (2, min(m, n), min(m, n))),
                                   **tol(dtype))
        np.testing.assert_allclose(R.numpy(), np.triu(R.numpy()))
        Qc, Rc = LA.qr(t(x, dtype), mode="complete")
        assert Qc.shape == (2, m, m)
        np.testing.assert_allclose((Qc @ Rc).numpy(), x, **tol(dtype))
        Q0, R0 = LA.qr(t(x, dtype), mode="r")
        assert Q0.numel() == 0
        np.testing.assert_allclose(np.abs(R0.numpy()), np.abs(R.numpy()), **tol(dtype))
        U, S, Vh = LA.svd(t(x, dtype), full_matrices=False)
        np.testing.assert_allclose((U * S.unsqueeze(-2) @ Vh).numpy(), x, **tol(dtype))
        np.testing.assert_allclose(S.numpy(), np.linalg.svd(x, compute_uv=False), **tol(dtype))
        np.testing.assert_allclose(LA.svdvals(t(x, dtype)).numpy(), S.numpy(), **tol(dtype))
        Uf, _, Vhf = LA.svd(t(x, dtype))
        assert Uf.shape == (2, m, m) and Vhf.shape == (2, n, n)
    w, V = LA.eigh(spd)
    np.testing.assert_allclose(w.numpy(), np.linalg.eigvalsh(SPD), **tol(dtype))
    np.testing.assert_allclose((V * w.unsqueeze(-2) @ V.mT).numpy(), SPD, **tol(dtype))
    np.testing.assert_allclose(LA.eigvalsh(spd).numpy(), w.numpy(), **tol(dtype))
    lower_only = np.tril(A) + np.tril(A, -1).swapaxes(-1, -2)  # what UPLO='L' reads of A
    np.testing.assert_allclose(LA.eigvalsh(a).numpy(), np.linalg.eigvalsh(lower_only), **tol(dtype))
    upper_only = np.triu(A) + np.triu(A, 1).swapaxes(-1, -2)
    np.testing.assert_allclose(LA.eigh(a, UPLO="U").eigenvalues.numpy(), np.linalg.eigvalsh(upper_only), **tol(dtype))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_lu_factor_lu_and_lu_solve(dtype):
    a, b = t(A, dtype), t(B, dtype)
    P, L, U = LA.lu(a)
    np.testing.assert_allclose((P @ L @ U).numpy(), A, **tol(dtype))
    assert np.all(np.abs(np.tril(L.numpy(), -1)) <= 1 + 1e-6)  # partial pivoting
    np.testing.assert_array_equal(np.diagonal(L.numpy(), 0, -2, -1), 1)
    LU, pivots = LA.lu_factor(a)
    assert pivots.dtype is ddpc.int32 and pivots.shape == (2, 3, 4) and pivots.numpy().min() >= 1
    for left in (True, False):
        for adjoint in (False, True):
            rhs = B if left else np.swapaxes(B, -1, -2)
            x = LA.lu_solve(LU, pivots, t(rhs, dtype), left=left, adjoint=adjoint).numpy()
            op = np.swapaxes(A, -1, -2) if adjoint else A
            np.testing.assert_allclose(op @ x if left else x @ op, rhs, **tol(dtype))
    np.testing.assert_allclose(ddpc.lu_solve(b, LU, pivots).numpy(), np.linalg.solve(A, B), **tol(dtype))
    tall = LA.lu(t(TALL, dtype))  # rectangular: L is m x k, U is k x n
    assert tall.L.shape == (2, 5, 3) and tall.U.shape == (2, 3, 3)
    np.testing.assert_allclose((tall.P @ tall.L @ tall.U).numpy(), TALL, **tol(dtype))
    for shape in ((3, 40, 40), (2, 50, 37), (37, 50)):  # wider than one panel: the recursive steps run
        big = RNG.standard_normal(shape)
        P, L, U = LA.lu(t(big, dtype))
        np.testing.assert_allclose((P @ L @ U).numpy(), big, rtol=1e-4 if dtype == "float32" else 1e-12,
                                   atol=1e-4 if dtype == "float32" else 1e-12)
        assert np.all(np.abs(np.tril(L.numpy(), -1)) <= 1 + 1e-6)
    singular = RNG.standard_normal((40, 40))
    singular[:, 25] = 0
    assert LA.lu_factor_ex(t(singular, dtype)).info.item() == 26
    _, _, info = LA.lu_factor_ex(t(np.diag([1.0, 0.0, 3.0]), dtype))
    assert info.item() == 2
    with pytest.raises(LA.LinAlgError, match="singular"):
        LA.lu_factor(t(np.zeros((3, 3)), dtype))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pinv_lstsq_rank_and_triangular_solves(dtype):
    for x in (TALL, WIDE):
        p = LA.pinv(t(x, dtype)).numpy()
        np.testing.assert_allclose(p, np.linalg.pinv(x), **tol(dtype))
    rank2 = TALL[0] @ np.diag([1.0, 1.0, 0.0]) @ RNG.standard_normal((3, 3))
    np.testing.assert_allclose(LA.pinv(t(rank2, dtype)).numpy(), np.linalg.pinv(rank2), rtol=1e-3, atol=1e-4)
    assert LA.matrix_rank(t(rank2, dtype)).item() == 2 and LA.matrix_rank(t(TALL, dtype)).tolist() == [3, 3]
    assert LA.matrix_rank(t(rank2, dtype), atol=1e3).item() == 0
    assert LA.matrix_rank(t(SPD[0, 0], dtype), hermitian=True).item() == 4
    np.testing.assert_allclose(LA.pinv(t(SPD, dtype), hermitian=True).numpy(), np.linalg.inv(SPD), **tol(dtype))
    rhs = RNG.standard_normal((2, 5, 2))
    X, residuals, rank, sv = LA.lstsq(t(TALL, dtype), t(rhs, dtype), driver="gelsd")
    # The normal equations A^T (A X - B) = 0, and the residuals |A X - B|^2 per column.
    np.testing.assert_allclose(np.swapaxes(TALL, -1, -2) @ (TALL @ X.numpy() - rhs), 0, atol=1e-4)
    np.testing.assert_allclose(residuals.numpy(), ((TALL @ X.numpy() - rhs) ** 2).sum(-2), **tol(dtype))
    assert rank.tolist() == [3, 3] and sv.shape == (2, 3)
    default = LA.lstsq(t(TALL, dtype), t(rhs, dtype))
    assert default.residuals.numel() == 0 and default.singular_values.numel() == 0
    assert LA.lstsq(t(TALL, dtype), t(rhs, dtype), driver="gels").rank.numel() == 0
    under = LA.lstsq(t(WIDE, dtype), t(rhs[:, :3], dtype)).solution.numpy()  # the minimum-norm solution
    np.testing.assert_allclose(under, np.linalg.pinv(WIDE) @ rhs[:, :3], **tol(dtype))
    up = np.triu(A) + 3 * np.eye(4)
    x = LA.solve_triangular(t(A + 3 * np.eye(4), dtype), t(B, dtype), upper=True).numpy()
    np.testing.assert_allclose(up @ x, B, **tol(dtype))
    unit = np.tril(A, -1) + np.eye(4)
    x = LA.solve_triangular(t(A, dtype), t(np.swapaxes(B, -1, -2), dtype), upper=False, left=False,
                            unitriangular=True).numpy()
    np.testing.assert_allclose(x @ unit, np.swapaxes(B, -1, -2), **tol(dtype))
    sol, coefficient = ddpc.triangular_solve(t(B, dtype), t(up, dtype), transpose=True)
    np.testing.assert_allclose(np.swapaxes(up, -1, -2) @ sol.numpy(), B, **tol(dtype))
    np.testing.assert_array_equal(coefficient.numpy(), up.astype(dtype))


def _expm_series(a, terms=60):
    out, term = np.eye(a.shape[-1]), np.eye(a.shape[-1])
    for k in range(1, terms):
        term = term @ a / k
        out = out + term
    return out


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matrix_functions(dtype):
    a = t(A, dtype)
    for n in (0, 1, 2, 5, -1, -3):
        want = np.linalg.matrix_power(A, n)
        np.testing.assert_allclose(LA.matrix_power(a, n).numpy(), want, rtol=1e-3 if dtype == "float32" else 1e-9,
                                   atol=1e-3 if dtype == "float32" else 1e-9)
    for scale in (0.1, 1.0, 6.0):  # 6: the scaling and squaring steps run
        got = LA.matrix_exp(t(A[0, 0] * scale, dtype)).numpy()
        np.testing.assert_allclose(got, _expm_series(A[0, 0] * scale, 200), rtol=1e-5 if dtype == "float32" else 1e-11)
    rot = LA.matrix_exp(t([[0.0, -1.0], [1.0, 0.0]], dtype)).numpy()  # a rotation by one radian
    np.testing.assert_allclose(rot, [[math.cos(1), -math.sin(1)], [math.sin(1), math.cos(1)]], **tol(dtype))
    mats = [RNG.standard_normal(s) for s in ((3, 6), (6, 2), (2, 7), (7,))]
    np.testing.assert_allclose(LA.multi_dot([t(m, dtype) for m in mats]).numpy(), np.linalg.multi_dot(mats),
                               **tol(dtype))
    v = RNG.standard_normal(3)
    np.testing.assert_allclose(LA.multi_dot([t(v, dtype), t(mats[0], dtype), t(mats[1], dtype)]).numpy(),
                               v @ mats[0] @ mats[1], **tol(dtype))
    x = RNG.standard_normal((2, 4))
    np.testing.assert_allclose(LA.vander(t(x, dtype)).numpy(), np.stack([np.vander(r, increasing=True) for r in x]),
                               **tol(dtype))
    assert LA.vander(t(x, dtype), N=6).shape == (2, 4, 6)
    np.testing.assert_allclose(LA.vecdot(t(A, dtype), t(A, dtype), dim=-2).numpy(), (A * A).sum(-2), **tol(dtype))
    u, w = RNG.standard_normal((4, 3)), RNG.standard_normal((4, 3))
    np.testing.assert_allclose(LA.cross(t(u, dtype), t(w, dtype)).numpy(), np.cross(u, w), **tol(dtype))
    np.testing.assert_allclose(LA.diagonal(t(A, dtype), offset=1).numpy(), np.diagonal(A, 1, -2, -1), **tol(dtype))
    ti = RNG.standard_normal((4, 6, 8, 3))
    np.testing.assert_allclose(LA.tensorinv(t(ti, dtype)).numpy(), np.linalg.tensorinv(ti), **tol(dtype))
    ts, tb = RNG.standard_normal((6, 4, 2, 3, 4)), RNG.standard_normal((6, 4))
    np.testing.assert_allclose(LA.tensorsolve(t(ts, dtype), t(tb, dtype)).numpy(), np.linalg.tensorsolve(ts, tb),
                               **tol(dtype))
    moved = np.moveaxis(ts, -1, 0).copy()
    np.testing.assert_allclose(LA.tensorsolve(t(moved, dtype), t(tb, dtype), dims=(0,)).numpy(),
                               np.linalg.tensorsolve(moved, tb, axes=(0,)), **tol(dtype))
    assert LA.matmul is ddpc.matmul
    # householder_product against the Q of numpy's QR rebuilt from LAPACK-style reflectors.
    x = TALL[0]
    h, tau = np.linalg.qr(x, mode="raw")
    np.testing.assert_allclose(LA.householder_product(t(h.T.copy(), dtype), t(tau, dtype)).numpy(),
                               np.linalg.qr(x)[0], **tol(dtype))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_norms_and_condition_numbers(dtype):
    a = t(A, dtype)
    for ord in ("fro", "nuc", 2, -2, 1, -1, math.inf, -math.inf):
        want = np.linalg.norm(A, ord, axis=(-2, -1))
        np.testing.assert_allclose(LA.matrix_norm(a, ord).numpy(), want, **tol(dtype))
        np.testing.assert_allclose(LA.norm(a, ord, dim=(1, 3)).numpy(), np.linalg.norm(A, ord, axis=(1, 3)),
                                   **tol(dtype))
        assert LA.matrix_norm(a, ord, keepdim=True).shape == (2, 3, 1, 1)
        assert LA.norm(a, ord, dim=(0, 2), keepdim=True).shape == (1, 3, 1, 4)
    for ord in (2, 1, 3.5, 0, math.inf, -math.inf, -1):
        np.testing.assert_allclose(LA.vector_norm(a, ord, dim=-1).numpy(), np.linalg.norm(A, ord, axis=-1),
                                   **tol(dtype))
        np.testing.assert_allclose(LA.norm(a, ord, dim=1).numpy(), np.linalg.norm(A, ord, axis=1), **tol(dtype))
    np.testing.assert_allclose(LA.vector_norm(a).numpy(), np.linalg.norm(A.ravel()), **tol(dtype))
    np.testing.assert_allclose(LA.norm(a).numpy(), np.linalg.norm(A.ravel()), **tol(dtype))
    np.testing.assert_allclose(LA.norm(a[0, 0], 1).numpy(), np.linalg.norm(A[0, 0], 1), **tol(dtype))
    np.testing.assert_allclose(LA.norm(a[0, 0, 0], 1).numpy(), np.linalg.norm(A[0, 0, 0], 1), **tol(dtype))
    assert LA.vector_norm(a, dim=(0, 2), keepdim=True).shape == (1, 3, 1, 4)
    for p in (None, 2, -2, 1, -1, "fro", "nuc", math.inf):
        np.testing.assert_allclose(LA.cond(a, p).numpy(), np.linalg.cond(A, p),
                                   rtol=1e-3 if dtype == "float32" else 1e-9)
    assert LA.cond(t(np.diag([1.0, 0.0]), dtype), 1).item() == math.inf
    assert LA.vector_norm(t([3, 4], dtype), dtype=ddpc.float64).dtype is ddpc.float64
    # ddpc.norm (torch.norm) takes the nuclear norm of a matrix, or over two dims.
    np.testing.assert_allclose(ddpc.norm(a[0, 0], "nuc").numpy(), np.linalg.norm(A[0, 0], "nuc"), **tol(dtype))
    np.testing.assert_allclose(a.norm("nuc", dim=(1, 3)).numpy(), np.linalg.norm(A, "nuc", axis=(1, 3)), **tol(dtype))
    with pytest.raises(ValueError, match="2-d input or two dims"):
        ddpc.norm(a, "nuc")


def test_top_level_forms_and_tensor_methods():
    a, spd = t(A[0, 0]), t(SPD[0, 0])
    assert ddpc.det(a).item() == pytest.approx(np.linalg.det(A[0, 0])) and a.det().item() == ddpc.det(a).item()
    np.testing.assert_allclose(a.inverse().numpy(), np.linalg.inv(A[0, 0]), rtol=1e-12)
    np.testing.assert_allclose(ddpc.pinverse(t(TALL[0])).numpy(), np.linalg.pinv(TALL[0]), rtol=1e-10)
    np.testing.assert_allclose(t(TALL[0]).pinverse().numpy(), np.linalg.pinv(TALL[0]), rtol=1e-10)
    np.testing.assert_allclose(a.matrix_power(3).numpy(), np.linalg.matrix_power(A[0, 0], 3), rtol=1e-12)
    np.testing.assert_allclose(a.matrix_exp().numpy(), LA.matrix_exp(a).numpy())
    sign, logabsdet = a.slogdet()
    assert sign.item() * math.exp(logabsdet.item()) == pytest.approx(np.linalg.det(A[0, 0]))
    assert spd.logdet().item() == pytest.approx(np.log(np.linalg.det(SPD[0, 0])))
    U, S, V = ddpc.svd(t(TALL[0]))  # V, not Vh; reduced by default
    assert U.shape == (5, 3) and V.shape == (3, 3)
    np.testing.assert_allclose((U * S @ V.mT).numpy(), TALL[0], atol=1e-12)
    U, S, V = t(TALL[0]).svd(some=False)
    assert U.shape == (5, 5)
    U, S, V = ddpc.svd(t(TALL[0]), compute_uv=False)
    assert U.shape == (5, 5) and V.shape == (3, 3) and not U.numpy().any()
    Q, _ = t(TALL[0]).qr()
    assert Q.shape == (5, 3) and ddpc.qr(t(TALL[0]), some=False).Q.shape == (5, 5)
    L = spd.cholesky()
    np.testing.assert_allclose((L @ L.mT).numpy(), SPD[0, 0], rtol=1e-12)
    b = t(B[0, 0])
    np.testing.assert_allclose(b.cholesky_solve(L).numpy(), np.linalg.solve(SPD[0, 0], B[0, 0]), rtol=1e-10)
    Up = ddpc.cholesky(spd, upper=True)
    np.testing.assert_allclose(ddpc.cholesky_solve(b, Up, upper=True).numpy(), np.linalg.solve(SPD[0, 0], B[0, 0]),
                               rtol=1e-10)
    np.testing.assert_allclose(L.cholesky_inverse().numpy(), np.linalg.inv(SPD[0, 0]), rtol=1e-10)
    np.testing.assert_allclose(ddpc.cholesky_inverse(Up, upper=True).numpy(), np.linalg.inv(SPD[0, 0]), rtol=1e-10)


# ---- errors ------------------------------------------------------------------------------

def test_errors():
    with pytest.raises(TypeError, match="floating point"):
        LA.inv(ddpc.tensor([[1, 2], [3, 4]]))
    with pytest.raises(TypeError, match="Low precision"):
        LA.det(t(np.eye(2), "float16"))
    with pytest.raises(ValueError, match="square"):
        LA.inv(t(np.ones((2, 3))))
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        LA.det(t([1.0, 2.0]))
    with pytest.raises(LA.LinAlgError, match=r"diagonal element 2 is zero.*singular"):
        LA.inv(t([[1.0, 2.0], [2.0, 4.0]]))
    with pytest.raises(RuntimeError, match=r"\(Batch element 1\).*singular"):
        LA.solve(t(np.stack([np.eye(2), np.zeros((2, 2))])), t(np.ones((2, 2, 1))))
    with pytest.raises(LA.LinAlgError, match="leading minor of order 2 is not positive-definite"):
        LA.cholesky(t(np.diag([1.0, -2.0, 3.0])))
    with pytest.raises(TypeError, match="same dtype"):
        LA.solve(t(np.eye(2)), t(np.ones(2), "float32"))
    with pytest.raises(ValueError, match="incompatible"):
        LA.solve(t(np.eye(2)), t(np.ones((3, 1))))
    with pytest.raises(ValueError, match="mode"):
        LA.qr(t(np.eye(2)), mode="full")
    with pytest.raises(ValueError, match="UPLO"):
        LA.eigh(t(np.eye(2)), UPLO="X")
    with pytest.raises(ValueError, match="driver"):
        LA.lstsq(t(np.eye(2)), t(np.eye(2)), driver="gelsx")
    with pytest.raises(ValueError, match="Order"):
        LA.matrix_norm(t(np.eye(2)), 3)
    with pytest.raises(ValueError, match="1D or 2D"):
        LA.norm(t(A), 1)
    with pytest.raises(ValueError, match="at least 2 tensors"):
        LA.multi_dot([t(np.eye(2))])
    with pytest.raises(TypeError, match="integer"):
        LA.matrix_power(t(np.eye(2)), 1.5)
    with pytest.raises(ValueError, match="prod"):
        LA.tensorinv(t(np.ones((2, 3, 4))), ind=1)
    with pytest.raises(ValueError, match="square system"):
        LA.tensorsolve(t(np.ones((2, 3, 4))), t(np.ones(2)))
    x = t(TALL[0], requires_grad=True)
    with pytest.raises(RuntimeError, match="non-differentiable|does not require grad"):
        LA.qr(x, mode="r").R.sum().backward()
    with pytest.raises(NotImplementedError, match="m >= n"):
        LA.qr(t(WIDE[0], requires_grad=True)).Q.sum().backward()


# ---- gradients ------------------------------------------------------------------------------

def _check_grad(fn, *arrays, rtol=1e-5, atol=1e-7):
    """fn's gradient (its output weighted by fixed numbers, summed) against central differences, in float64."""
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    out = fn(*[t(a) for a in arrays])
    w = np.random.default_rng(7).standard_normal(out.shape)
    ts = [t(a, requires_grad=True) for a in arrays]
    (fn(*ts) * t(w)).sum().backward()
    for i, a in enumerate(arrays):
        def f(v, i=i):
            return float((fn(*[t(v if j == i else b) for j, b in enumerate(arrays)]).numpy() * w).sum())

        np.testing.assert_allclose(ts[i].grad.numpy(), numeric_grad(f, a), rtol=rtol, atol=atol, err_msg=f"input {i}")


def _svd_gauge_free(x):
    """Functions of svd's outputs that do not depend on the signs of the singular vectors."""
    U, S, Vh = LA.svd(x, full_matrices=False)
    return (U * S.unsqueeze(-2)) @ Vh + (U @ U.mT).sum() * 0.3 + (Vh.mT @ Vh).sum() * 0.2 + S.sum()


def _eigh_gauge_free(x):
    w, V = LA.eigh(sym(x))
    return (V * w.unsqueeze(-2)) @ V.mT + (V ** 4).sum() + (w ** 2).sum()


SMALL = A[0, :2]
PIV = LA.lu_factor(t(SMALL)).pivots

GRADIENT_CASES = {
    "inv": (LA.inv, [SMALL]),
    "solve": (LA.solve, [SMALL, B[0, :2]]),
    "solve_vector_broadcast": (LA.solve, [SMALL, B[0, 0, :, 0]]),
    "solve_left_false": (lambda a, b: LA.solve(a, b, left=False), [SMALL, B[0, :2].swapaxes(-1, -2)]),
    "det": (LA.det, [SMALL]),
    "det_singular": (LA.det, [np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])]),
    "slogdet": (lambda a: LA.slogdet(a).logabsdet, [SMALL]),
    "logdet": (ddpc.logdet, [SPD[0, :2]]),
    "cholesky": (lambda a: LA.cholesky(sym(a)), [SPD[0, :2]]),
    "cholesky_upper": (lambda a: LA.cholesky(sym(a), upper=True), [SPD[0, :2]]),
    "qr": (lambda a: LA.qr(a).Q * 2 + LA.qr(a).R.sum(), [TALL]),
    "qr_square_complete": (lambda a: LA.qr(a, mode="complete").R + LA.qr(a, mode="complete").Q, [SMALL]),
    "svd": (_svd_gauge_free, [TALL]),
    "svd_wide": (_svd_gauge_free, [WIDE]),
    "svd_full_matrices": (lambda a: LA.svd(a).S + (LA.svd(a).U[..., :3] @ LA.svd(a).U[..., :3].mT).sum(), [TALL]),
    "svdvals": (LA.svdvals, [TALL]),
    "eigh": (_eigh_gauge_free, [SMALL]),
    "eigvalsh": (lambda a: LA.eigvalsh(sym(a)), [SMALL]),
    "pinv": (LA.pinv, [TALL]),
    "pinv_wide": (LA.pinv, [WIDE]),
    "pinv_hermitian": (lambda a: LA.pinv(sym(a), hermitian=True), [SPD[0, :2]]),
    "lstsq": (lambda a, b: LA.lstsq(a, b).solution, [TALL, RNG.standard_normal((2, 5, 2))]),
    "lstsq_residuals": (lambda a, b: LA.lstsq(a, b, driver="gelsd").residuals, [TALL, RNG.standard_normal((2, 5, 2))]),
    "matrix_exp": (LA.matrix_exp, [SMALL]),
    "matrix_exp_scaled": (LA.matrix_exp, [SMALL * 4]),
    "matrix_power": (lambda a: LA.matrix_power(a, 3), [SMALL]),
    "matrix_power_negative": (lambda a: LA.matrix_power(a, -2), [SMALL]),
    "solve_triangular": (lambda a, b: LA.solve_triangular(a, b, upper=True), [SMALL + 3 * np.eye(4), B[0, :2]]),
    "solve_triangular_unit_right": (lambda a, b: LA.solve_triangular(a, b, upper=False, left=False,
                                                                      unitriangular=True),
                                    [SMALL, B[0, :2].swapaxes(-1, -2)]),
    "lu_factor": (lambda a: LA.lu_factor(a).LU, [SMALL]),
    "lu": (lambda a: LA.lu(a).L * 2 + LA.lu(a).U, [SMALL]),
    "lu_solve": (lambda lu, b: LA.lu_solve(lu, PIV, b), [LA.lu_factor(t(SMALL)).LU.numpy(), B[0, :2]]),
    "lu_solve_adjoint": (lambda lu, b: LA.lu_solve(lu, PIV, b, adjoint=True), [LA.lu_factor(t(SMALL)).LU.numpy(),
                                                                              B[0, :2]]),
    "cholesky_solve": (lambda b, a: ddpc.cholesky_solve(b, LA.cholesky(sym(a))), [B[0, 0], SPD[0, 0]]),
    "cholesky_inverse": (lambda a: ddpc.cholesky_inverse(LA.cholesky(sym(a))), [SPD[0, 0]]),
    "multi_dot": (lambda a, b, c: LA.multi_dot([a, b, c]), [TALL[0], WIDE[0], TALL[1]]),
    "householder_product": (LA.householder_product, [TALL[0], RNG.standard_normal(2)]),
    "vander": (LA.vander, [RNG.standard_normal((2, 3))]),
    "tensorinv": (LA.tensorinv, [RNG.standard_normal((2, 3, 6))]),
    "tensorsolve": (LA.tensorsolve, [RNG.standard_normal((2, 3, 6)), RNG.standard_normal((2, 3))]),
    "vecdot": (lambda a, b: LA.vecdot(a, b, dim=-2), [TALL, TALL[::-1].copy()]),
    "vector_norm": (lambda a: LA.vector_norm(a, 3.0, dim=-1), [TALL]),
    "vector_norm_inf": (lambda a: LA.vector_norm(a, -math.inf, dim=(0, 2)), [TALL]),
    "cond": (LA.cond, [SMALL]),
    "cond_fro": (lambda a: LA.cond(a, "fro"), [SMALL]),
}
GRADIENT_CASES.update({f"matrix_norm_{ord}": ((lambda a, ord=ord: LA.matrix_norm(a, ord)), [SMALL])
                       for ord in ("fro", "nuc", 2, -2, 1, -1, math.inf, -math.inf)})


@pytest.mark.parametrize("name", sorted(GRADIENT_CASES))
def test_gradients_match_central_differences(name):
    fn, arrays = GRADIENT_CASES[name]
    _check_grad(fn, *arrays)


def test_gradients_at_zero_and_singular_points():
    x = t(np.zeros(4), requires_grad=True)
    LA.vector_norm(x).backward()
    assert x.grad.tolist() == [0.0] * 4  # PyTorch's subgradient, not NaN
    z = t(np.zeros((3, 3)), requires_grad=True)
    LA.det(z).backward()
    assert not z.grad.numpy().any()
    d = t(np.diag([2.0, 3.0, 0.0]), requires_grad=True)
    LA.det(d).backward()  # the cofactors: only the (2, 2) one is non-zero
    np.testing.assert_allclose(d.grad.numpy(), np.diag([0.0, 0.0, 6.0]), atol=1e-12)


def test_zero_norms_are_recorded_with_zero_gradients():
    """The 0-norm counts the non-zero elements: piecewise constant, so its
    gradient is zeros, but it is in the graph, as PyTorch's."""
    x, y = t([1.5, 0.0, -2.0], requires_grad=True), t([1.5, 1.0, 3.0], requires_grad=True)
    norms = (LA.vector_norm(x, 0), ddpc.norm(x, 0), x.norm(0, dim=0), ddpc.dist(x, y, 0))
    assert [n.item() for n in norms] == [2.0] * 4 and all(n.requires_grad for n in norms)
    sum(norms).backward()
    assert x.grad.tolist() == [0.0] * 3 and y.grad.tolist() == [0.0] * 3


HVP_CASES = {
    "inv": (lambda a: (LA.inv(a) ** 2).sum(), [A[0, 0]]),
    "solve": (lambda a, b: (LA.solve(a, b) ** 2).sum(), [A[0, 0], B[0, 0]]),
    "det": (lambda a: (LA.det(a) ** 2).sum(), [A[0]]),
    "slogdet": (lambda a: (LA.slogdet(a).logabsdet ** 2).sum(), [A[0]]),
    "cholesky": (lambda a: (LA.cholesky(sym(a)) ** 3).sum(), [SPD[0, 0]]),
    "qr": (lambda a: (LA.qr(a).Q ** 3).sum() + (LA.qr(a).R ** 3).sum(), [TALL[0]]),
    "svd": (lambda a: (_svd_gauge_free(a) ** 2).sum(), [TALL[0]]),
    "svdvals": (lambda a: (LA.svdvals(a) ** 3).sum(), [WIDE[0]]),
    "eigh": (lambda a: (_eigh_gauge_free(a) ** 2).sum(), [A[0, 0]]),
    "pinv": (lambda a: (LA.pinv(a) ** 3).sum(), [TALL[0]]),
    "lstsq": (lambda a, b: (LA.lstsq(a, b).solution ** 3).sum(), [TALL[0], RNG.standard_normal((5, 2))]),
    "matrix_exp": (lambda a: (LA.matrix_exp(a) ** 2).sum(), [A[0, 0] * 0.5]),
    "solve_triangular": (lambda a, b: (LA.solve_triangular(a, b, upper=False) ** 2).sum(),
                         [A[0, 0] + 3 * np.eye(4), B[0, 0]]),
    "lu_factor": (lambda a: (LA.lu_factor(a).LU ** 3).sum(), [A[0, 0]]),
    "matrix_norm_nuc": (lambda a: LA.matrix_norm(a, "nuc") ** 2, [A[0, 0]]),
    "matrix_norm_2": (lambda a: LA.matrix_norm(a, 2) ** 2, [A[0, 0]]),
    "vector_norm": (lambda a: LA.vector_norm(a, 3.0) ** 2, [A[0, 0]]),
}


@pytest.mark.parametrize("name", sorted(HVP_CASES))
def test_second_derivatives(name):
    fn, arrays = HVP_CASES[name]
    check_hvp(fn, *arrays, rtol=1e-4, atol=1e-6)


# ---- CUDA tensors ---------------------------------------------------------------------------

@pytest.mark.gpu
def test_cuda_tensors_give_the_host_results():
    cases = [
        (lambda a: LA.inv(a), [A]), (lambda a, b: LA.solve(a, b), [A, B]), (lambda a: LA.det(a), [A]),
        (lambda a: LA.slogdet(a).logabsdet, [A]), (lambda a: LA.cholesky(sym(a)), [SPD]),
        (lambda a: LA.qr(a).R.abs(), [TALL]), (lambda a: LA.svdvals(a), [TALL]), (lambda a: LA.eigvalsh(sym(a)), [A]),
        (lambda a: LA.pinv(a), [TALL]), (lambda a, b: LA.lstsq(a, b).solution, [TALL, TALL]),
        (lambda a: LA.matrix_exp(a), [A]), (lambda a: LA.lu_factor(a).LU, [A]),
        (lambda a: LA.matrix_norm(a, "nuc"), [A]), (lambda a: LA.vector_norm(a, 3.0, dim=-1), [A]),
    ]
    for fn, arrays in cases:
        host = [t(a, requires_grad=True) for a in arrays]
        dev = [t(a, device="cuda", requires_grad=True) for a in arrays]
        out_h, out_d = fn(*host), fn(*dev)
        assert out_d.device.type == "cuda"
        np.testing.assert_allclose(out_d.cpu().numpy(), out_h.numpy(), rtol=1e-9, atol=1e-9)
        out_h.sum().backward()
        out_d.sum().backward()
        for h, d in zip(host, dev):
            assert d.grad.device.type == "cuda"
            np.testing.assert_allclose(d.grad.cpu().numpy(), h.grad.numpy(), rtol=1e-8, atol=1e-8)
    assert LA.matrix_rank(t(TALL, device="cuda")).device.type == "cuda"
    assert LA.lu_factor(t(A, device="cuda")).pivots.device.type == "cuda"

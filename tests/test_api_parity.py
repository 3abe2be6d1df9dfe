"""PyTorch's tensor methods and top-level functions that ported scripts use
most, against numpy: elementwise math, division with rounding, NaN-aware and
cumulative reductions, contractions (einsum, tensordot, kron, cdist), layout
(diagonal, tile, stacks, unfold), index writes, random fills and sampling,
metadata; gradients against central differences, and errors on bad input."""

import math

import numpy as np
import pytest
from numeric import numeric_grad

import ddpc


def _check_grad(fn, *arrays, rtol=1e-5, atol=1e-7):
    """fn's gradient through ddpc (summed output times fixed weights) against central differences, in float64."""
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    out = fn(*[ddpc.tensor(a) for a in arrays])
    w = np.random.default_rng(7).standard_normal(out.shape)
    ts = [ddpc.tensor(a, requires_grad=True) for a in arrays]
    (fn(*ts) * ddpc.tensor(w)).sum().backward()
    for i, a in enumerate(arrays):
        def f(v, i=i):
            args = [ddpc.tensor(v if j == i else b) for j, b in enumerate(arrays)]
            return float((fn(*args).numpy() * w).sum())

        np.testing.assert_allclose(ts[i].grad.numpy(), numeric_grad(f, a), rtol=rtol, atol=atol, err_msg=f"input {i}")


RNG = np.random.default_rng(0)
A = RNG.standard_normal((3, 4))
B = RNG.standard_normal((3, 4))
POS = RNG.uniform(0.2, 2.0, (3, 4))


# ---- elementwise math ---------------------------------------------------------------------

@pytest.mark.parametrize("name,ref,data", [
    ("log2", np.log2, POS), ("log10", np.log10, POS), ("exp2", np.exp2, A), ("sinh", np.sinh, A),
    ("cosh", np.cosh, A), ("asinh", np.arcsinh, A), ("atan", np.arctan, A), ("frac", lambda v: v - np.trunc(v), A * 3),
    ("sgn", np.sign, A), ("logit", lambda v: np.log(v / (1 - v)), POS / 2.5),
])
def test_unary_functions_match_numpy_with_gradients(name, ref, data):
    fn = getattr(ddpc, name)
    for dt in ("float32", "float64"):
        got = fn(ddpc.tensor(data, dtype=dt)).numpy()
        np.testing.assert_allclose(got, ref(data), rtol=1e-6 if dt == "float32" else 1e-12, atol=1e-6)
        assert getattr(ddpc.tensor(data, dtype=dt), name)().dtype.name == dt
    if name not in ("sgn",):
        _check_grad(fn, data if name != "frac" else data + 0.01)


def test_new_unary_ops_on_integers_and_16_bit_floats():
    assert ddpc.log2(ddpc.tensor([1, 8])).tolist() == [0.0, 3.0]
    h = ddpc.tensor([0.5, 1.0], dtype=ddpc.float16)
    assert ddpc.sinh(h).dtype is ddpc.float16
    np.testing.assert_allclose(ddpc.cosh(h).float().numpy(), np.cosh([0.5, 1.0]), rtol=1e-3)


def test_binary_functions_match_numpy_with_gradients():
    for name, ref in (("atan2", np.arctan2), ("hypot", np.hypot)):
        np.testing.assert_allclose(getattr(ddpc, name)(ddpc.tensor(A), ddpc.tensor(B)).numpy(), ref(A, B), rtol=1e-6)
        _check_grad(getattr(ddpc, name), A, B)
    # Broadcast operands and numbers; the quadrants and the origin.
    np.testing.assert_allclose(ddpc.atan2(ddpc.tensor(A), ddpc.tensor(B[0])).numpy(), np.arctan2(A, B[0]), rtol=1e-6)
    y, x = np.array([1.0, 1, -1, -1, 0, 0, 2, -2]), np.array([1.0, -1, 1, -1, 0, -3, 0, 0])
    np.testing.assert_allclose(ddpc.atan2(ddpc.tensor(y), ddpc.tensor(x)).numpy(), np.arctan2(y, x), rtol=1e-12)
    _check_grad(lambda a, b: ddpc.atan2(a, b), A, B[:1])
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -2.5, 1e300])
    y, x = np.repeat(special, len(special)), np.tile(special, len(special))
    got = ddpc.atan2(ddpc.tensor(y), ddpc.tensor(x)).numpy()
    np.testing.assert_array_equal(got, np.arctan2(y, x))  # also signed zeros and infinities, as C's atan2
    np.testing.assert_array_equal(np.signbit(got), np.signbit(np.arctan2(y, x)))
    assert ddpc.tensor([3.0]).hypot(4.0).item() == 5.0
    big = ddpc.tensor([1e200, 1e-200, np.inf, np.nan, 0.0], dtype=ddpc.float64)
    other = ddpc.tensor([1e200, 1e-200, np.nan, -np.inf, 0.0], dtype=ddpc.float64)
    np.testing.assert_allclose(ddpc.hypot(big, other).numpy(), np.hypot(big.numpy(), other.numpy()), rtol=1e-15)
    assert ddpc.arctan2 is ddpc.atan2


def test_xlogy_is_zero_where_x_is_zero():
    x, y = np.array([0.0, 0.0, 2.0, 1.5]), np.array([0.0, 3.0, 0.5, np.nan])
    got = ddpc.xlogy(ddpc.tensor(x), ddpc.tensor(y)).numpy()
    np.testing.assert_allclose(got, [0.0, 0.0, 2 * np.log(0.5), np.nan])
    xt = ddpc.tensor(x[:3], requires_grad=True)
    ddpc.xlogy(xt, ddpc.tensor(y[:3])).sum().backward()
    assert np.all(np.isfinite(xt.grad.numpy())) and xt.grad.numpy()[0] == 0
    _check_grad(ddpc.xlogy, A, POS)


def test_xlogy_and_xlog1py_give_x_the_log_as_gradient_also_where_x_is_zero():
    # PyTorch's rule: d/dx x*log(y) = log(y), zero only where y is outside the log's domain
    x = ddpc.tensor([0.0, 0.0, 0.0, 1.0], dtype=ddpc.float64, requires_grad=True)
    y = ddpc.tensor([0.2, 0.0, -1.0, 0.3], dtype=ddpc.float64, requires_grad=True)
    out = ddpc.xlogy(x, y)
    out.sum().backward()
    np.testing.assert_array_equal(out.detach().numpy(), [0.0, 0.0, 0.0, np.log(0.3)])
    np.testing.assert_allclose(x.grad.numpy(), [np.log(0.2), 0.0, 0.0, np.log(0.3)])
    np.testing.assert_allclose(y.grad.numpy(), [0.0, 0.0, 0.0, 1 / 0.3])
    x.grad = None
    ddpc.special.xlog1py(x, ddpc.tensor([0.5, -1.0, -2.0, 1.0], dtype=ddpc.float64)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [np.log1p(0.5), 0.0, 0.0, np.log(2.0)])
    # Dirichlet at concentration 1 (a uniform prior): d/dc_i log p = log x_i + digamma(sum c) - digamma(c_i)
    c = ddpc.ones(3, dtype=ddpc.float64, requires_grad=True)
    ddpc.distributions.Dirichlet(c).log_prob(ddpc.tensor([0.2, 0.3, 0.5], dtype=ddpc.float64)).backward()
    np.testing.assert_allclose(c.grad.numpy(), np.log([0.2, 0.3, 0.5]) + 1.5, rtol=1e-12)


def test_logit_eps_clamps():
    p = np.array([0.0, 0.3, 1.0])
    got = ddpc.logit(ddpc.tensor(p), eps=1e-3).numpy()
    q = np.clip(p, 1e-3, 1 - 1e-3)
    np.testing.assert_allclose(got, np.log(q / (1 - q)), rtol=1e-6)


def test_hardshrink_method_and_function():
    x = ddpc.tensor(A)
    np.testing.assert_allclose(x.hardshrink(0.5).numpy(), np.where(np.abs(A) > 0.5, A, 0))
    np.testing.assert_allclose(ddpc.nn.functional.hardshrink(x).numpy(), np.where(np.abs(A) > 0.5, A, 0))
    _check_grad(lambda t: t.hardshrink(0.3), A)


def test_bitwise_not_on_integers():
    assert ddpc.bitwise_not(ddpc.tensor([0, 5, -3])).tolist() == [-1, -6, 2]
    assert ddpc.bitwise_not(ddpc.tensor([0, 200], dtype=ddpc.uint8)).tolist() == [255, 55]
    # ~ is bitwise on uint8 and logical on bool, as in PyTorch
    assert (~ddpc.tensor([0, 200], dtype=ddpc.uint8)).tolist() == [255, 55]
    assert (~ddpc.tensor([True, False])).tolist() == [False, True]
    with pytest.raises(TypeError, match="integer"):
        ddpc.bitwise_not(ddpc.tensor([1.0]))


# ---- division with rounding ----------------------------------------------------------------

def test_remainder_and_fmod_follow_divisor_and_dividend_signs():
    a = np.array([-7.0, -7.0, 7.0, 7.0, 5.5, -0.0, 3.0])
    b = np.array([3.0, -3.0, 3.0, -3.0, 2.0, 2.0, np.inf])
    for dt in ("float32", "float64"):
        at, bt = ddpc.tensor(a, dtype=dt), ddpc.tensor(b, dtype=dt)
        np.testing.assert_array_equal(ddpc.remainder(at, bt).numpy(), [2.0, -1.0, 1.0, -2.0, 1.5, 0.0, 3.0])
        np.testing.assert_array_equal(ddpc.fmod(at, bt).numpy(), np.fmod(a, b).astype(dt))
        assert ddpc.remainder(at, bt).dtype.name == dt
    ia, ib = np.array([-7, 7, 9, -9, 0]), np.array([3, -3, 4, 4, 5])
    assert ddpc.remainder(ddpc.tensor(ia), ddpc.tensor(ib)).tolist() == (ia % ib).tolist()
    assert ddpc.fmod(ddpc.tensor(ia), ddpc.tensor(ib)).tolist() == np.fmod(ia, ib).tolist()
    assert (ddpc.tensor(ia) % 4).tolist() == (ia % 4).tolist() and (ddpc.tensor(ia) // 4).tolist() == (ia // 4).tolist()
    # float32 inputs whose quotient rounds to an integer still give the exact remainder
    x = np.float32(np.nextafter(np.float32(3.0), np.float32(0)))
    tenth = np.float32(0.1)
    assert ddpc.remainder(ddpc.tensor([x]), float(tenth)).numpy()[0] == np.float32(np.fmod(np.float64(x), tenth))
    big = (RNG.standard_normal(1000) * 50).astype(np.float32)
    div = (RNG.standard_normal(1000)).astype(np.float32)
    np.testing.assert_array_equal(ddpc.fmod(ddpc.tensor(big), ddpc.tensor(div)).numpy(), np.fmod(big, div))
    np.testing.assert_array_equal(ddpc.remainder(ddpc.tensor(big), ddpc.tensor(div)).numpy(),
                                  np.remainder(big.astype(np.float64), div.astype(np.float64)).astype(np.float32))


def test_remainder_gradients_and_errors():
    _check_grad(ddpc.remainder, A * 3, B + np.sign(B))
    _check_grad(ddpc.fmod, A * 3, B + np.sign(B))
    with pytest.raises(ZeroDivisionError):
        ddpc.remainder(ddpc.tensor([3]), ddpc.tensor([0]))
    assert math.isnan(ddpc.fmod(ddpc.tensor([3.0]), 0.0).item())
    with pytest.raises(TypeError):
        ddpc.fmod("a", 2)


def test_floor_divide_div_rounding_modes_and_true_divide():
    a, b = np.array([-7.0, 7.0, -7.5, 1.0]), np.array([2.0, -2.0, 2.0, 0.0])
    at, bt = ddpc.tensor(a), ddpc.tensor(b)
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(ddpc.floor_divide(at, bt).numpy(), np.floor_divide(a, b))
        np.testing.assert_array_equal(at.div(bt, rounding_mode="trunc").numpy(), np.trunc(a / b))
        np.testing.assert_array_equal(ddpc.div(at, bt, rounding_mode="floor").numpy(), np.floor(a / b))
    assert ddpc.div(ddpc.tensor([7]), 2).dtype is ddpc.float32
    assert ddpc.div(ddpc.tensor([-7]), 2, rounding_mode="trunc").tolist() == [-3]
    assert ddpc.true_divide(ddpc.tensor([1]), 2).tolist() == [0.5]
    with pytest.raises(ValueError, match="rounding_mode"):
        ddpc.div(at, bt, rounding_mode="round")


def test_function_forms_of_arithmetic_and_comparisons():
    x, y = ddpc.tensor(A), ddpc.tensor(B)
    np.testing.assert_allclose(ddpc.add(x, y, alpha=2).numpy(), A + 2 * B)
    np.testing.assert_allclose(ddpc.sub(x, y, alpha=0.5).numpy(), A - 0.5 * B)
    np.testing.assert_allclose(x.add(y, alpha=3).numpy(), A + 3 * B)
    np.testing.assert_allclose(ddpc.mul(x, 2).numpy(), A * 2)
    np.testing.assert_allclose(ddpc.add(1.0, x).numpy(), A + 1)
    np.testing.assert_allclose(ddpc.pow(x, 2).numpy(), A ** 2)
    np.testing.assert_allclose(ddpc.neg(x).numpy(), -A)
    for name, op in (("eq", np.equal), ("ne", np.not_equal), ("gt", np.greater), ("ge", np.greater_equal),
                     ("lt", np.less), ("le", np.less_equal)):
        np.testing.assert_array_equal(getattr(ddpc, name)(x, y).numpy(), op(A, B).astype(np.uint8))
    assert ddpc.narrow(x, 1, 1, 2).shape == (3, 2) and ddpc.t(x).shape == (4, 3)
    assert ddpc.movedim(ddpc.zeros(2, 3, 4), 0, -1).shape == (3, 4, 2)
    assert ddpc.moveaxis(ddpc.zeros(2, 3, 4), 0, -1).shape == (3, 4, 2)
    assert ddpc.swapaxes(ddpc.zeros(2, 3, 4), 0, 2).shape == ddpc.swapdims(ddpc.zeros(2, 3, 4), 0, 2).shape == (4, 3, 2)
    assert not ddpc.detach(x.requires_grad_()).requires_grad
    np.testing.assert_allclose(ddpc.softmax(ddpc.tensor(A), 1).numpy(),
                               np.exp(A) / np.exp(A).sum(1, keepdims=True), rtol=1e-6)
    with pytest.raises(TypeError, match="ddpc.Tensor"):
        ddpc.narrow([1, 2], 0, 0, 1)


def test_softmax_methods_take_dim_and_dtype():
    x = ddpc.tensor(A, dtype=ddpc.float32)
    assert x.softmax(0, dtype=ddpc.float64).dtype is ddpc.float64
    np.testing.assert_allclose(x.log_softmax(-1).numpy(), A - np.log(np.exp(A).sum(-1, keepdims=True)), rtol=1e-5)
    _check_grad(lambda t: t.softmax(1), A)


# ---- reductions -----------------------------------------------------------------------------

def test_nansum_nanmean_skip_nan():
    a = A.copy()
    a[0, 1] = a[2, 3] = np.nan
    t = ddpc.tensor(a)
    np.testing.assert_allclose(ddpc.nansum(t).item(), np.nansum(a))
    np.testing.assert_allclose(t.nansum(1).numpy(), np.nansum(a, 1))
    np.testing.assert_allclose(t.nanmean(0, keepdim=True).numpy(), np.nanmean(a, 0, keepdims=True))
    assert math.isnan(ddpc.nanmean(ddpc.tensor([np.nan])).item())
    assert ddpc.nansum(ddpc.tensor([1, 2])).item() == 3
    g = ddpc.tensor(a, requires_grad=True)
    ddpc.nanmean(g, 1).sum().backward()
    want = np.where(np.isnan(a), 0, 1 / (~np.isnan(a)).sum(1, keepdims=True))
    np.testing.assert_allclose(g.grad.numpy(), want)


def test_logcumsumexp_is_stable():
    a = A * 30
    want = np.logaddexp.accumulate(a, axis=1)
    np.testing.assert_allclose(ddpc.logcumsumexp(ddpc.tensor(a), 1).numpy(), want, rtol=1e-10)
    np.testing.assert_allclose(ddpc.tensor(a).logcumsumexp(0).numpy(), np.logaddexp.accumulate(a, axis=0),
                               rtol=1e-10)
    big = ddpc.tensor([1000.0, 1000.0], dtype=ddpc.float32)
    np.testing.assert_allclose(big.logcumsumexp(0).numpy(), [1000.0, 1000.0 + math.log(2)], rtol=1e-6)
    _check_grad(lambda t: ddpc.logcumsumexp(t, 1), A)


# ---- products and contractions ---------------------------------------------------------------

@pytest.mark.parametrize("eq,shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("ij,jk", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(4, 4)]), ("ii", [(4, 4)]), ("ij->", [(3, 4)]), ("ij->ji", [(3, 4)]), ("i,j->ij", [(3,), (4,)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]), ("i,i->", [(4,), (4,)]), ("bii->bi", [(2, 3, 3)]),
    ("ijk,ikl,lm->jm", [(2, 3, 4), (2, 4, 5), (5, 6)]), ("...i,i", [(2, 3, 4), (4,)]), ("iij->j", [(3, 3, 2)]),
    ("ab...,b->a...", [(2, 3, 4, 5), (3,)]), ("i,i,i->i", [(3,), (3,), (3,)]),
])
def test_einsum_matches_numpy_with_gradients(eq, shapes):
    arrays = [RNG.standard_normal(s) for s in shapes]
    got = ddpc.einsum(eq, *[ddpc.tensor(a) for a in arrays]).numpy()
    np.testing.assert_allclose(got, np.einsum(eq, *arrays), rtol=1e-10, atol=1e-12)
    _check_grad(lambda *ts: ddpc.einsum(eq, *ts).reshape(-1) + 0, *arrays)


def test_einsum_takes_a_list_and_refuses_bad_equations():
    a, b = ddpc.tensor(A), ddpc.tensor(B)
    np.testing.assert_allclose(ddpc.einsum("ij,ij->i", [a, b]).numpy(), (A * B).sum(1))
    for eq, msg in (("ij->k", "does not appear"), ("ij,jk", "operands"), ("ijk->i", "do not fit"),
                    ("ij->ii", "more than once"), ("i1->i", "invalid")):
        with pytest.raises(ValueError, match=msg):
            ddpc.einsum(eq, a)
    with pytest.raises(ValueError, match="repeated"):
        ddpc.einsum("ii->i", a)


def test_tensordot_kron_and_products_with_an_added_term():
    a, b = RNG.standard_normal((2, 3, 4)), RNG.standard_normal((3, 4, 5))
    np.testing.assert_allclose(ddpc.tensordot(ddpc.tensor(a), ddpc.tensor(b)).numpy(), np.tensordot(a, b), rtol=1e-12)
    np.testing.assert_allclose(ddpc.tensordot(ddpc.tensor(a), ddpc.tensor(b), ([1], [0])).numpy(),
                               np.tensordot(a, b, ([1], [0])), rtol=1e-12)
    _check_grad(lambda x, y: ddpc.tensordot(x, y, 1), A, B.T)
    np.testing.assert_allclose(ddpc.kron(ddpc.tensor(A), ddpc.tensor(B[:2, :2])).numpy(), np.kron(A, B[:2, :2]))
    np.testing.assert_allclose(ddpc.tensor(A[0]).kron(ddpc.tensor(B)).numpy(), np.kron(A[0], B))
    _check_grad(ddpc.kron, A[:2], B[:2, :3])
    m1, m2, inp = RNG.standard_normal((2, 3, 4)), RNG.standard_normal((2, 4, 5)), RNG.standard_normal((3, 5))
    np.testing.assert_allclose(ddpc.baddbmm(ddpc.tensor(inp), ddpc.tensor(m1), ddpc.tensor(m2), beta=0.5,
                                            alpha=2).numpy(), 0.5 * inp + 2 * m1 @ m2, rtol=1e-12)
    np.testing.assert_allclose(ddpc.tensor(inp).addbmm(ddpc.tensor(m1), ddpc.tensor(m2)).numpy(),
                               inp + (m1 @ m2).sum(0), rtol=1e-12)
    np.testing.assert_allclose(ddpc.addmv(ddpc.tensor(A[:, 0]), ddpc.tensor(A), ddpc.tensor(B[0]), beta=2).numpy(),
                               2 * A[:, 0] + A @ B[0], rtol=1e-12)
    np.testing.assert_allclose(ddpc.addr(ddpc.tensor(A), ddpc.tensor(B[:, 0]), ddpc.tensor(B[0]), alpha=3).numpy(),
                               A + 3 * np.outer(B[:, 0], B[0]), rtol=1e-12)
    nan = ddpc.full((3, 5), math.nan)
    assert not ddpc.baddbmm(nan, ddpc.tensor(m1), ddpc.tensor(m2), beta=0).isnan().any()
    _check_grad(lambda i, x, y: ddpc.baddbmm(i, x, y, beta=0.5), inp, m1, m2)
    with pytest.raises(ValueError, match="broadcast"):
        ddpc.addmv(ddpc.zeros(4), ddpc.tensor(A), ddpc.tensor(B[0]))
    with pytest.raises(ValueError, match="dims"):
        ddpc.tensordot(ddpc.tensor(a), ddpc.tensor(b), ([0], [0]))


def _cdist(x, y, p):
    d = np.abs(x[..., :, None, :] - y[..., None, :, :])
    if p == 0:
        return (d != 0).sum(-1).astype(float)
    if p == np.inf:
        return d.max(-1)
    return (d ** p).sum(-1) ** (1 / p)


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0, 0.5, np.inf, 0.0])
def test_cdist_matches_numpy(p):
    x, y = RNG.standard_normal((2, 5, 3)), RNG.standard_normal((2, 4, 3))
    np.testing.assert_allclose(ddpc.cdist(ddpc.tensor(x), ddpc.tensor(y), p=p).numpy(), _cdist(x, y, p), rtol=1e-10)
    if p:
        _check_grad(lambda a, b: ddpc.cdist(a, b, p=p), x, y, rtol=1e-4, atol=1e-6)


def test_cdist_matmul_path_and_zero_distance_gradient():
    x, y = RNG.standard_normal((30, 3)), RNG.standard_normal((27, 3))
    np.testing.assert_allclose(ddpc.cdist(ddpc.tensor(x), ddpc.tensor(y)).numpy(), _cdist(x, y, 2), rtol=1e-9)
    _check_grad(lambda a, b: ddpc.cdist(a, b, compute_mode="use_mm_for_euclid_dist"), x[:4], y[:3], rtol=1e-4)
    t = ddpc.tensor(x[:3], requires_grad=True)
    ddpc.cdist(t, t.detach()).sum().backward()
    assert np.all(np.isfinite(t.grad.numpy()))
    with pytest.raises(ValueError, match="P, M"):
        ddpc.cdist(ddpc.zeros(3, 2), ddpc.zeros(3, 4))
    with pytest.raises(ValueError, match="non-negative"):
        ddpc.cdist(ddpc.zeros(3, 2), ddpc.zeros(3, 2), p=-1)


def test_dist_renorm_cross():
    np.testing.assert_allclose(ddpc.dist(ddpc.tensor(A), ddpc.tensor(B), 3).item(),
                               (np.abs(A - B) ** 3).sum() ** (1 / 3))
    _check_grad(lambda a, b: ddpc.dist(a, b), A, B)
    x = ddpc.tensor(A, requires_grad=True)
    ddpc.dist(x, x.detach()).backward()
    assert np.all(x.grad.numpy() == 0)
    norms = np.linalg.norm(A, axis=1, keepdims=True)
    want = np.where(norms > 1.0, A * (1.0 / (norms + 1e-7)), A)
    np.testing.assert_allclose(ddpc.tensor(A).renorm(2, 0, 1.0).numpy(), want, rtol=1e-10)
    _check_grad(lambda a: ddpc.renorm(a, 2, 0, 1.0), A)
    a, b = RNG.standard_normal((4, 3)), RNG.standard_normal((4, 3))
    np.testing.assert_allclose(ddpc.cross(ddpc.tensor(a), ddpc.tensor(b), dim=1).numpy(), np.cross(a, b), rtol=1e-12)
    np.testing.assert_allclose(ddpc.tensor(a.T).cross(ddpc.tensor(b.T)).numpy(), np.cross(a, b).T, rtol=1e-12)
    _check_grad(lambda u, v: ddpc.cross(u, v, dim=1), a, b)
    with pytest.raises(ValueError, match="not 3"):
        ddpc.cross(ddpc.tensor(A), ddpc.tensor(B), dim=1)


# ---- diagonals and layout ---------------------------------------------------------------------

def test_diagonal_trace_and_fill_diagonal():
    x = RNG.standard_normal((3, 4, 5))
    for off, d1, d2 in ((0, 0, 1), (1, 0, 1), (-1, 1, 2), (2, 2, 0), (7, 0, 1)):
        np.testing.assert_array_equal(ddpc.tensor(x).diagonal(off, d1, d2).numpy(), np.diagonal(x, off, d1, d2))
    _check_grad(lambda t: ddpc.diagonal(t, 1, 1, 2), x)
    assert ddpc.trace(ddpc.tensor(A)).item() == pytest.approx(np.trace(A))
    assert ddpc.tensor([[1, 2], [3, 4]]).trace().item() == 5
    with pytest.raises(ValueError, match="2-d"):
        ddpc.trace(ddpc.tensor(x))
    for shape, wrap in (((3, 3), False), ((7, 3), False), ((7, 3), True), ((3, 5), True), ((3, 3, 3), False)):
        t = ddpc.zeros(*shape).fill_diagonal_(2.0, wrap=wrap)
        want = np.zeros(shape)
        np.fill_diagonal(want, 2.0, wrap=wrap)
        np.testing.assert_array_equal(t.numpy(), want, err_msg=f"{shape} wrap={wrap}")


def test_tile_stacks_and_atleast():
    a = np.arange(6.0).reshape(2, 3)
    t = ddpc.tensor(a)
    np.testing.assert_array_equal(t.tile(2).numpy(), np.tile(a, 2))
    np.testing.assert_array_equal(ddpc.tile(t, (2, 1, 2)).numpy(), np.tile(a, (2, 1, 2)))
    v = ddpc.tensor([1.0, 2.0])
    for name in ("hstack", "vstack", "dstack", "column_stack"):
        np.testing.assert_array_equal(getattr(ddpc, name)([t, t]).numpy(), getattr(np, name)([a, a]), err_msg=name)
        np.testing.assert_array_equal(getattr(ddpc, name)((v, v)).numpy(), getattr(np, name)([[1.0, 2.0]] * 2),
                                      err_msg=name)
    assert ddpc.atleast_1d(ddpc.tensor(1.0)).shape == (1,)
    assert ddpc.atleast_2d(v).shape == (1, 2)
    assert [s.shape for s in ddpc.atleast_3d(ddpc.tensor(1.0), v, t)] == [(1, 1, 1), (1, 2, 1), (2, 3, 1)]
    assert ddpc.broadcast_to(v, (3, 2)).shape == (3, 2)
    _check_grad(lambda x, y: ddpc.hstack([x, y]), A, B)
    with pytest.raises(TypeError):
        ddpc.vstack([t, a])


def test_block_diag_cartesian_prod_and_triangle_indices():
    a, b = np.arange(4.0).reshape(2, 2), np.array([5.0, 6.0, 7.0])
    got = ddpc.block_diag(ddpc.tensor(a), ddpc.tensor(b), ddpc.tensor(8.0)).numpy()
    want = np.zeros((4, 6))
    want[:2, :2], want[2, 2:5], want[3, 5] = a, b, 8.0
    np.testing.assert_array_equal(got, want)
    _check_grad(lambda x, y: ddpc.block_diag(x, y), A, B[:2])
    got = ddpc.cartesian_prod(ddpc.tensor([1, 2]), ddpc.tensor([3, 4, 5])).tolist()
    assert got == [[1, 3], [1, 4], [1, 5], [2, 3], [2, 4], [2, 5]]
    assert ddpc.tril_indices(3, 4, 1).tolist() == [list(r) for r in np.tril_indices(3, 1, 4)]
    assert ddpc.triu_indices(4, 3, -1).tolist() == [list(r) for r in np.triu_indices(4, -1, 3)]
    assert ddpc.tril_indices(3, 3).dtype is ddpc.int64


def test_trapezoid():
    y = RNG.standard_normal((3, 5))
    np.testing.assert_allclose(ddpc.trapezoid(ddpc.tensor(y)).numpy(), np.trapezoid(y) if hasattr(np, "trapezoid")
                               else np.trapz(y))
    x = np.cumsum(RNG.uniform(0.1, 1, 5))
    trap = getattr(np, "trapezoid", None) or np.trapz
    np.testing.assert_allclose(ddpc.trapezoid(ddpc.tensor(y), ddpc.tensor(x)).numpy(), trap(y, x))
    np.testing.assert_allclose(ddpc.trapezoid(ddpc.tensor(y), dx=0.5, dim=0).numpy(), trap(y, dx=0.5, axis=0))
    _check_grad(lambda a, b: ddpc.trapezoid(a, b), y, x)


def test_unfold_windows_and_overlapping_gradients():
    x = RNG.standard_normal((2, 7, 3))
    got = ddpc.tensor(x).unfold(1, 3, 2).numpy()
    want = np.stack([x[:, i:i + 3] for i in range(0, 5, 2)], 1).transpose(0, 1, 3, 2)
    np.testing.assert_array_equal(got, want)
    _check_grad(lambda t: t.unfold(1, 3, 1), x)
    assert ddpc.arange(5).unfold(0, 2, 2).tolist() == [[0, 1], [2, 3]]
    with pytest.raises(ValueError, match="size"):
        ddpc.zeros(3).unfold(0, 4, 1)


def test_index_fill_copy_and_masked_scatter():
    idx = ddpc.tensor([0, 2])
    t = ddpc.tensor(A)
    want = A.copy()
    want[:, [0, 2]] = -1
    np.testing.assert_array_equal(t.index_fill(1, idx, -1.0).numpy(), want)
    np.testing.assert_array_equal(ddpc.index_fill(t, 1, idx, ddpc.tensor(-1.0)).numpy(), want)
    src = RNG.standard_normal((3, 2))
    want = A.copy()
    want[:, [0, 2]] = src
    np.testing.assert_array_equal(t.index_copy(1, idx, ddpc.tensor(src)).numpy(), want)
    c = t.clone()
    assert c.index_copy_(1, idx, ddpc.tensor(src)) is c
    np.testing.assert_array_equal(c.numpy(), want)
    _check_grad(lambda a, s: ddpc.index_copy(a, 1, idx, s), A, src)
    _check_grad(lambda a: a.index_fill(0, ddpc.tensor([1]), 2.0), A)
    mask = A > 0
    source = RNG.standard_normal(12)
    want = A.copy()
    want[mask] = source[:mask.sum()]
    np.testing.assert_array_equal(ddpc.masked_scatter(t, ddpc.tensor(mask),
                                                      ddpc.tensor(source)).numpy(), want)
    c = t.clone()
    c.masked_scatter_(ddpc.tensor(mask), ddpc.tensor(source))
    np.testing.assert_array_equal(c.numpy(), want)
    _check_grad(lambda a, s: a.masked_scatter(ddpc.tensor(mask), s), A, source)
    with pytest.raises(ValueError, match="selects"):
        t.masked_scatter(ddpc.ones(3, 4, dtype=ddpc.bool), ddpc.zeros(5))
    with pytest.raises(ddpc.DtypeError, match="only supports boolean masks"):
        t.masked_scatter(ddpc.tensor(mask.astype(np.uint8)), ddpc.tensor(source))  # as PyTorch refuses it
    with pytest.raises(ValueError, match="source has shape"):
        t.index_copy(1, idx, ddpc.zeros(3, 3))
    with pytest.raises(IndexError, match="integer"):
        t.index_fill(1, ddpc.tensor([0.0]), 1.0)


# ---- metadata and autograd helpers -------------------------------------------------------------

def test_metadata_methods():
    x = ddpc.zeros(2, 3, 4)
    assert x.nelement() == 24 and x.stride() == (12, 4, 1) and x.stride(1) == 4
    assert x.storage_offset() == 0 and x[1].storage_offset() == 12 and x[1, 2:].storage_offset() == 20
    assert x.is_floating_point() and not ddpc.is_floating_point(ddpc.zeros(1, dtype=ddpc.int64))
    assert x.type() == "ddpc.FloatTensor" and ddpc.zeros(1, dtype=ddpc.uint8).type() == "ddpc.ByteTensor"
    assert x.type(ddpc.float64).dtype is ddpc.float64
    assert x.type("torch.LongTensor").dtype is ddpc.int64 and x.type("ddpc.HalfTensor").dtype is ddpc.float16
    with pytest.raises(ValueError, match="unknown tensor type"):
        x.type("torch.ComplexTensor")


def test_retain_grad_keeps_a_non_leaf_gradient():
    x = ddpc.tensor(A, requires_grad=True)
    y = x * 2
    y.retain_grad()
    y.retain_grad()  # once only
    assert y.retains_grad and not x.retains_grad
    (y * y).sum().backward(retain_graph=True)
    np.testing.assert_allclose(y.grad.numpy(), 4 * A)
    (y * 3).sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), 4 * A + 3)
    x.retain_grad()  # a leaf keeps its gradient anyway
    with pytest.raises(RuntimeError, match="requires_grad=False"):
        ddpc.zeros(2).retain_grad()


# ---- random fills and sampling -------------------------------------------------------------------

def test_in_place_random_fills_have_the_asked_distribution():
    ddpc.manual_seed(0)
    n = 200_000
    u = ddpc.empty(n).uniform_(-2, 3).numpy()
    assert u.min() >= -2 and u.max() < 3 and abs(u.mean() - 0.5) < 0.02
    z = ddpc.empty(n, dtype=ddpc.float64).normal_(1.0, 2.0).numpy()
    assert abs(z.mean() - 1) < 0.02 and abs(z.std() - 2) < 0.02
    b = ddpc.empty(n).bernoulli_(0.3).numpy()
    assert set(np.unique(b)) == {0.0, 1.0} and abs(b.mean() - 0.3) < 0.01
    e = ddpc.empty(n, dtype=ddpc.float64).exponential_(2.0).numpy()
    assert e.min() >= 0 and abs(e.mean() - 0.5) < 0.01
    r = ddpc.empty(n, dtype=ddpc.int32).random_(3, 7).numpy()
    assert set(np.unique(r)) == {3, 4, 5, 6}
    assert set(np.unique(ddpc.empty(1000, dtype=ddpc.int64).random_(4).numpy())) == {0, 1, 2, 3}
    assert ddpc.empty(1000, dtype=ddpc.uint8).random_().numpy().max() > 200
    assert ddpc.empty(1000).random_().numpy().max() <= 2 ** 24
    p = ddpc.tensor([0.0, 1.0, 0.5]).expand(1000, 3).contiguous()
    drawn = ddpc.empty(1000, 3).bernoulli_(p).numpy()
    assert drawn[:, 0].max() == 0 and drawn[:, 1].min() == 1 and 0.4 < drawn[:, 2].mean() < 0.6
    ddpc.manual_seed(5)
    first = ddpc.empty(8).normal_().numpy()
    ddpc.manual_seed(5)
    np.testing.assert_array_equal(ddpc.empty(8).normal_().numpy(), first)
    g = ddpc.Generator(3)
    np.testing.assert_array_equal(ddpc.empty(4).uniform_(generator=g).numpy(),
                                  ddpc.empty(4).uniform_(generator=ddpc.Generator(3)).numpy())


def test_creation_functions_draw_from_a_given_generator():
    before = ddpc.default_generator.get_state().numpy().copy()
    draws = [(lambda g: ddpc.rand(3, generator=g)), (lambda g: ddpc.randn(2, 2, generator=g)),
             (lambda g: ddpc.randint(0, 100, (5,), generator=g)), (lambda g: ddpc.randperm(6, generator=g))]
    for draw in draws:
        a, b = draw(ddpc.Generator(11)).numpy(), draw(ddpc.Generator(11)).numpy()
        np.testing.assert_array_equal(a, b)
        assert not np.array_equal(a, draw(ddpc.Generator(12)).numpy())
    g = ddpc.Generator(11)
    assert not np.array_equal(ddpc.rand(3, generator=g).numpy(), ddpc.rand(3, generator=g).numpy())  # g moves on
    np.testing.assert_array_equal(ddpc.default_generator.get_state().numpy(), before)  # the global one did not
    with pytest.raises(TypeError, match="ddpc.Generator"):
        ddpc.randn(2, generator=np.random.default_rng(0))


def test_random_fills_refuse_bad_arguments_and_grad_leaves():
    with pytest.raises(ValueError, match="probabilities"):
        ddpc.empty(3).bernoulli_(1.5)
    with pytest.raises(ValueError, match="from < to"):
        ddpc.empty(3).random_(5, 2)
    with pytest.raises(ValueError, match="lambd"):
        ddpc.empty(3).exponential_(0)
    with pytest.raises(TypeError, match="floating"):
        ddpc.empty(3, dtype=ddpc.int64).normal_()
    with pytest.raises(RuntimeError, match="requires grad"):
        ddpc.zeros(3, requires_grad=True).uniform_()


def test_bernoulli_normal_poisson_functions():
    ddpc.manual_seed(1)
    p = ddpc.full((100_000,), 0.25)
    assert abs(ddpc.bernoulli(p).mean().item() - 0.25) < 0.01
    assert abs(p.bernoulli(0.75).mean().item() - 0.75) < 0.01
    z = ddpc.normal(ddpc.full((100_000,), 3.0), ddpc.full((100_000,), 0.5)).numpy()
    assert abs(z.mean() - 3) < 0.01 and abs(z.std() - 0.5) < 0.01
    assert ddpc.normal(2.0, 1.0, (3, 4)).shape == (3, 4)
    assert ddpc.normal(ddpc.zeros(2, 1), 1.0).shape == (2, 1)
    with pytest.raises(TypeError, match="size"):
        ddpc.normal(0.0, 1.0)
    rates = np.array([0.0, 0.5, 4.0, 30.0])
    draws = ddpc.poisson(ddpc.tensor(np.repeat(rates[None], 20_000, 0))).numpy()
    assert draws[:, 0].max() == 0 and np.all(draws == np.round(draws))
    np.testing.assert_allclose(draws.mean(0), rates, rtol=0.03, atol=0.01)
    np.testing.assert_allclose(draws.var(0), rates, rtol=0.06, atol=0.01)
    with pytest.raises(ValueError, match=">= 0"):
        ddpc.poisson(ddpc.tensor([-1.0]))


@pytest.mark.parametrize("rate", [0.7, 9.99, 10.0, 37.5, 2e4])
def test_poisson_draws_follow_the_probabilities_on_both_sides_of_the_method_switch(rate):
    ddpc.manual_seed(4)
    draws = ddpc.poisson(ddpc.full((50_000,), rate, dtype=ddpc.float64)).numpy()
    k = np.arange(max(0, int(rate - 6 * rate ** 0.5)), int(rate + 6 * rate ** 0.5) + 2)
    log_pmf = k * math.log(rate) - rate - np.array([math.lgamma(v + 1) for v in k])
    freq = (draws[:, None] == k[None]).mean(0)
    pmf = np.exp(log_pmf)
    assert np.all(np.abs(freq - pmf) <= 5 * np.sqrt(pmf * (1 - pmf) / 50_000) + 1e-4)


@pytest.mark.parametrize("count, prob", [(0, 0.3), (12, 0.3), (25, 0.38), (26, 0.4), (300, 0.8), (5000, 0.02),
                                         (40, 1.0), (40, 0.0)])
def test_binomial_draws_follow_the_probabilities(count, prob):
    ddpc.manual_seed(5)
    draws = ddpc.binomial(ddpc.full((50_000,), float(count)), ddpc.full((50_000,), prob)).numpy()
    assert draws.dtype == np.float32 and draws.min() >= 0 and draws.max() <= count
    k = np.arange(count + 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_terms = (np.where(k == 0, 0.0, k * np.log(prob))
                     + np.where(k == count, 0.0, (count - k) * np.log1p(-prob)))
    log_choose = np.array([math.lgamma(count + 1) - math.lgamma(v + 1) - math.lgamma(count - v + 1) for v in k])
    pmf = np.exp(log_choose + log_terms)
    freq = np.bincount(draws.astype(np.int64), minlength=count + 1) / 50_000
    assert np.all(np.abs(freq - pmf) <= 5 * np.sqrt(pmf * (1 - pmf) / 50_000) + 1e-4)


def test_multinomial_with_and_without_replacement():
    ddpc.manual_seed(2)
    w = ddpc.tensor([1.0, 0.0, 3.0, 0.0])
    draws = ddpc.multinomial(w, 20_000, replacement=True).numpy()
    assert set(np.unique(draws)) == {0, 2} and abs((draws == 2).mean() - 0.75) < 0.02
    rows = ddpc.multinomial(ddpc.tensor([[1.0, 1, 1, 1], [0, 5, 1, 0]]), 2)
    assert rows.shape == (2, 2) and rows.dtype is ddpc.int64
    r = rows.numpy()
    assert r[0, 0] != r[0, 1] and set(r[1]) == {1, 2}
    assert sorted(w.multinomial(2).tolist()) == [0, 2]
    firsts = np.array([ddpc.multinomial(ddpc.tensor([1.0, 9.0]), 1).item() for _ in range(400)])
    assert 0.85 < firsts.mean() < 0.95
    with pytest.raises(ValueError, match="without replacement"):
        ddpc.multinomial(w, 3)
    with pytest.raises(ValueError, match="non-negative"):
        ddpc.multinomial(ddpc.tensor([1.0, -1.0]), 1)
    with pytest.raises(ValueError, match="finite"):
        ddpc.multinomial(ddpc.tensor([[1.0, 1.0], [math.nan, 1.0]]), 1, replacement=True)
    with pytest.raises(ValueError, match="1-d or 2-d"):
        ddpc.multinomial(ddpc.ones(2, 2, 2), 1)
    with pytest.raises(ValueError, match="every weight of a row is zero"):
        ddpc.multinomial(ddpc.tensor([[1.0, 1.0], [0.0, 0.0]]), 1, replacement=True)


def test_multinomial_without_replacement_draws_in_order_of_the_remaining_weights():
    # P(first = i, second = j) = w_i / W * w_j / (W - w_i), for every row at once.
    ddpc.manual_seed(3)
    w = np.array([1.0, 2.0, 3.0, 4.0])
    draws = ddpc.multinomial(ddpc.tensor(np.tile(w, (20_000, 1))), 2).numpy()
    assert draws.shape == (20_000, 2) and np.all(draws[:, 0] != draws[:, 1])
    pairs = np.zeros((4, 4))
    np.add.at(pairs, (draws[:, 0], draws[:, 1]), 1)
    want = w[:, None] / 10 * w[None, :] / (10 - w[:, None]) * (1 - np.eye(4))
    assert np.all(np.abs(pairs / 20_000 - want) <= 5 * np.sqrt(want * (1 - want) / 20_000)), pairs / 20_000
    full = ddpc.multinomial(ddpc.tensor([[0.0, 5.0, 1.0, 2.0]] * 3), 3).numpy()
    assert all(sorted(row) == [1, 2, 3] for row in full)
    counts = ddpc.multinomial(ddpc.tensor([[1.0, 3.0], [3.0, 1.0]]), 20_000, replacement=True).numpy()
    np.testing.assert_allclose((counts == 1).mean(1), [0.75, 0.25], atol=0.02)


@pytest.mark.gpu
@pytest.mark.parametrize("draw", [lambda w: ddpc.poisson(w * 30), lambda w: ddpc.binomial(ddpc.floor(w * 50), w / 2)])
def test_poisson_and_binomial_on_a_gpu_draw_what_the_host_draws(draw):
    w = np.random.default_rng(6).uniform(0.0, 2.0, (64, 100))
    draws = []
    for device in ("cpu", "cuda"):
        ddpc.manual_seed(7)
        draws.append(draw(ddpc.tensor(w, device=device)).cpu().numpy())
    np.testing.assert_array_equal(draws[1], draws[0])


@pytest.mark.gpu
@pytest.mark.parametrize("replacement", [True, False])
def test_multinomial_on_a_gpu_draws_what_the_host_draws(replacement):
    w = np.random.default_rng(4).uniform(0.0, 2.0, (64, 100))
    draws = []
    for device in ("cpu", "cuda"):
        ddpc.manual_seed(5)
        out = ddpc.multinomial(ddpc.tensor(w, device=device), 30, replacement)
        assert out.device.type == device and out.dtype is ddpc.int64
        draws.append(out.cpu().numpy())
    np.testing.assert_array_equal(draws[1], draws[0])

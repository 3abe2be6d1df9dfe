"""The trigonometric inverses, the error, gamma and Bessel functions and
ddpc.special (also the incomplete gamma and Hurwitz zeta functions and the
orthogonal polynomials): values against Python's math module and closed
forms, PyTorch's edge values, gradients against central differences and
second derivatives, the in-place forms and the aliases (tests against SciPy
are in test_special_scipy.py)."""

import math

import numpy as np
import pytest

import ddpc
from ddpc import autograd as ag
from ddpc import special
from numeric import numeric_grad
from test_double_backward import check_hvp

EULER_GAMMA = 0.57721566490153286061
ZETA3 = 1.20205690315959428540

# name: (ddpc function, math's function, inputs where both are defined)
MATH_CASES = {
    "tan": (ddpc.tan, math.tan, [-1.4, -0.3, 0.0, 0.7, 1.5, 10.0]),
    "asin": (ddpc.asin, math.asin, [-1.0, -0.5, 0.0, 0.3, 0.99, 1.0]),
    "acos": (ddpc.acos, math.acos, [-1.0, -0.5, 0.0, 0.3, 0.99, 1.0]),
    "atan": (ddpc.atan, math.atan, [-50.0, -1.0, 0.0, 0.3, 7.0]),
    "acosh": (ddpc.acosh, math.acosh, [1.0, 1.5, 3.0, 1e5]),
    "atanh": (ddpc.atanh, math.atanh, [-0.99, -0.5, 0.0, 0.3, 0.9]),
    "erf": (ddpc.erf, math.erf, [-3.0, -0.5, 0.0, 0.2, 1.0, 6.0]),
    "erfc": (ddpc.erfc, math.erfc, [-3.0, -0.5, 0.0, 0.2, 1.0, 6.0, 20.0]),
    "lgamma": (ddpc.lgamma, math.lgamma, [-2.5, -0.5, 1e-8, 0.5, 1.0, 2.0, 3.7, 100.0, 1e10]),
}


@pytest.mark.parametrize("dtype", [ddpc.float32, ddpc.float64])
@pytest.mark.parametrize("name", list(MATH_CASES))
def test_values_match_math(name, dtype):
    fn, ref, xs = MATH_CASES[name]
    got = fn(ddpc.tensor(xs, dtype=dtype))
    assert got.dtype is dtype
    tol = 2e-6 if dtype is ddpc.float32 else 1e-14
    np.testing.assert_allclose(got.numpy(), [ref(x) for x in xs], rtol=tol, atol=tol)


@pytest.mark.parametrize("name", ["tan", "asin", "acos", "acosh", "atanh", "erfc", "erfinv", "lgamma", "digamma",
                                  "i0"])
def test_integer_inputs_compute_in_float32(name):
    x = ddpc.tensor([0, 1, 2, -1])
    got = getattr(ddpc, name)(x)
    assert got.dtype is ddpc.float32
    np.testing.assert_array_equal(got.numpy(), getattr(ddpc, name)(x.float()).numpy())


def test_pytorch_edge_values():
    inf, nan = math.inf, math.nan
    cases = [
        (ddpc.erfinv, [1.0, -1.0, 1.5, -2.0, 0.0, nan], [inf, -inf, nan, nan, 0.0, nan]),
        (ddpc.lgamma, [0.0, -1.0, -2.0, inf, -inf, nan], [inf, inf, inf, inf, inf, nan]),
        (ddpc.digamma, [0.0, -0.0, -1.0, -2.0, inf, -inf, nan], [-inf, inf, nan, nan, inf, nan, nan]),
        (ddpc.acosh, [0.5, inf], [nan, inf]),
        (ddpc.atanh, [1.0, -1.0, 1.5], [inf, -inf, nan]),
        (ddpc.asin, [1.5, -inf], [nan, nan]),
        (ddpc.i0, [inf, -inf, nan, 1000.0], [nan, nan, nan, inf]),
        (special.i0e, [inf, -inf, 0.0], [0.0, 0.0, 1.0]),
        (special.i1, [0.0, inf, -inf, -1000.0], [0.0, nan, nan, -inf]),
        (special.ndtri, [0.0, 1.0, 0.5, -0.1, 1.1], [-inf, inf, 0.0, nan, nan]),
        (special.erfcx, [0.0, inf, -inf, -30.0], [1.0, 0.0, inf, inf]),
        (lambda t: ddpc.polygamma(1, t), [0.0, -1.0, -3.0, inf, -inf], [inf, inf, inf, 0.0, nan]),
        (lambda t: ddpc.polygamma(2, t), [0.0, -1.0, inf, -inf], [-inf, -inf, nan, -inf]),
    ]
    for dtype in (ddpc.float32, ddpc.float64):
        for fn, xs, want in cases:
            np.testing.assert_array_equal(fn(ddpc.tensor(xs, dtype=dtype)).numpy().astype(np.float64), want)
    assert math.copysign(1, ddpc.erfinv(ddpc.tensor([-0.0], dtype=ddpc.float64)).item()) == -1


def test_digamma_closed_forms():
    n = np.arange(1.0, 40.0)
    d = ddpc.digamma(ddpc.tensor(n, dtype=ddpc.float64)).numpy()
    assert d[0] == pytest.approx(-EULER_GAMMA, rel=1e-15)
    np.testing.assert_allclose(d[1:], d[:-1] + 1 / n[:-1], rtol=1e-14)  # psi(n + 1) = psi(n) + 1/n
    half = ddpc.digamma(ddpc.tensor([0.5, -0.5], dtype=ddpc.float64)).numpy()
    np.testing.assert_allclose(half, [-EULER_GAMMA - 2 * math.log(2), -EULER_GAMMA - 2 * math.log(2) + 2], rtol=1e-14)
    # the reflection psi(1 - x) - psi(x) = pi / tan(pi x)
    x = np.array([-7.3, -2.9, -0.2, 0.25, 3.6])
    lhs = ddpc.digamma(ddpc.tensor(1 - x)) - ddpc.digamma(ddpc.tensor(x))
    np.testing.assert_allclose(lhs.numpy(), np.pi / np.tan(np.pi * x), rtol=1e-12)


def test_polygamma_closed_forms():
    one = ddpc.tensor([1.0], dtype=ddpc.float64)
    assert ddpc.polygamma(1, one).item() == pytest.approx(math.pi ** 2 / 6, rel=1e-15)
    assert ddpc.polygamma(2, one).item() == pytest.approx(-2 * ZETA3, rel=1e-15)
    assert ddpc.polygamma(3, one * 0.5).item() == pytest.approx(math.pi ** 4, rel=1e-14)
    assert ddpc.polygamma(0, one).item() == ddpc.digamma(one).item()
    # psi_n(x) = psi_n(x + 1) - (-1)^n n! / x^(n+1), also for negative x (and trigamma's reflection there)
    x = np.array([-40.3, -3.7, -0.6, 0.1, 0.7, 2.2, 15.0, 1e4])
    for n in (1, 2, 3, 6):
        lhs = ddpc.polygamma(n, ddpc.tensor(x)).numpy()  # the larger side: no cancellation in the check
        rhs = ddpc.polygamma(n, ddpc.tensor(x + 1)).numpy() - (-1) ** n * math.factorial(n) / x ** (n + 1)
        np.testing.assert_allclose(lhs, rhs, rtol=1e-12, err_msg=f"n = {n}")
    with pytest.raises(ValueError):
        ddpc.polygamma(-1, one)
    # past n = 170, n! and so the result overflow (at once, not after counting to n)
    big = ddpc.polygamma(2 ** 30, ddpc.tensor([0.5, 0.25], dtype=ddpc.float64)).numpy()
    np.testing.assert_array_equal(big, [-math.inf, -math.inf])
    out = ddpc.empty(2)
    with pytest.raises(ValueError, match="polygamma"):  # the C op checks the order itself
        ddpc._C.unary(ag._POLYGAMMA, out._buf, ddpc.tensor([1.0, 2.0])._buf, 0.5, 0.0)


def test_error_function_inverses():
    y = np.concatenate([np.linspace(-0.999999, 0.999999, 101), [1e-300, -1e-12, 0.5, 1 - 2 ** -52]])
    x = ddpc.erfinv(ddpc.tensor(y))
    np.testing.assert_allclose(ddpc.erf(x).numpy(), y, rtol=1e-15, atol=1e-300)
    tail = 1 - y[y > 0.5]  # 1 - erf(x), where erf(x) itself would have lost the digits
    np.testing.assert_allclose(ddpc.erfc(x[ddpc.tensor(y > 0.5)]).numpy(), tail, rtol=1e-12)
    for dtype in (ddpc.float32, ddpc.float64):
        t = ddpc.tensor([-1.2, -0.4, 0.0, 0.9, 1.1], dtype=dtype)  # erfinv is ill-conditioned near +-1
        np.testing.assert_allclose(ddpc.erfinv(ddpc.erf(t)).numpy(), t.numpy(), rtol=2e-5 if dtype is ddpc.float32
                                   else 1e-13)
    # ndtri inverts ndtr, down to probabilities far below what 1 - p could hold
    p = np.array([1e-300, 1e-50, 1e-10, 0.01, 0.3, 0.5, 0.7, 0.99, 1 - 1e-10])
    x = special.ndtri(ddpc.tensor(p))
    np.testing.assert_allclose(special.ndtr(x).numpy(), p, rtol=1e-12)
    lo = np.array([-40.0, -10.0, -3.0])
    # (x^2 times the rounding of x / sqrt 2 in the reference and here)
    np.testing.assert_allclose(special.ndtr(ddpc.tensor(lo)).numpy(), [0.5 * math.erfc(-v / math.sqrt(2)) for v in lo],
                               rtol=1e-13)
    # float32 is computed in float64 and rounded once: within half an ulp, far into the left tail too
    x32 = np.linspace(-12, 6, 20001).astype(np.float32)
    want = np.array([0.5 * math.erfc(-float(v) / math.sqrt(2)) for v in x32])
    got = special.ndtr(ddpc.tensor(x32))
    assert got.dtype is ddpc.float32
    ulps = np.abs(got.numpy().astype(np.float64) - want) / np.spacing(want.astype(np.float32)).astype(np.float64)
    assert ulps.max() <= 0.5 + 1e-6, ulps.max()


def test_erfcx_and_log_ndtr():
    x = np.array([-5.0, -1.0, 0.0, 0.5, 3.0, 11.9, 12.0, 25.0])
    want = [math.exp(v * v) * math.erfc(v) for v in x]
    np.testing.assert_allclose(special.erfcx(ddpc.tensor(x)).numpy(), want, rtol=2e-14)
    big = np.array([30.0, 1e3, 1e8])  # where erfc underflows: the asymptotic series
    np.testing.assert_allclose(special.erfcx(ddpc.tensor(big)).numpy(),
                               1 / (big * math.sqrt(math.pi))
                               * (1 - 1 / (2 * big ** 2) + 3 / (4 * big ** 4) - 15 / (8 * big ** 6)
                                  + 105 / (16 * big ** 8)),
                               rtol=1e-12)
    mid = np.array([-3.0, -1.0, -0.5, 0.0, 2.0, 8.0])
    want = [math.log(0.5 * math.erfc(-v / math.sqrt(2))) if v < 0 else math.log1p(-0.5 * math.erfc(v / math.sqrt(2)))
            for v in mid]
    np.testing.assert_allclose(special.log_ndtr(ddpc.tensor(mid)).numpy(), want, rtol=1e-13)
    far = np.array([-40.0, -1e3])  # log Phi(x) = -x^2/2 - log(-x sqrt(2 pi)) + log(1 - 1/x^2 + 3/x^4 - ...)
    series = -1 / far ** 2 + 3 / far ** 4 - 15 / far ** 6 + 105 / far ** 8 - 945 / far ** 10
    want = -far ** 2 / 2 - np.log(-far * math.sqrt(2 * math.pi)) + np.log1p(series)
    np.testing.assert_allclose(special.log_ndtr(ddpc.tensor(far)).numpy(), want, rtol=1e-14)
    edges = special.log_ndtr(ddpc.tensor([math.inf, -math.inf, math.nan])).numpy()
    np.testing.assert_array_equal(edges, [0.0, -math.inf, math.nan])


def _bessel_series(nu, x):
    """I_nu(x) by its power series, summed exactly enough with math.fsum."""
    q, terms = x * x / 4, [(x / 2) ** nu]
    for k in range(1, 300):
        terms.append(terms[-1] * q / (k * (k + nu)))
    return math.fsum(terms)


def test_bessel_functions_by_their_series():
    x = np.array([-45.0, -29.99, -3.0, -0.1, 0.0, 1e-5, 0.5, 2.0, 17.5, 30.0, 60.0])
    for nu, fn, scaled in [(0, ddpc.i0, False), (0, special.i0e, True), (1, special.i1, False),
                           (1, special.i1e, True)]:
        want = np.array([_bessel_series(nu, v) * (math.exp(-abs(v)) if scaled else 1) for v in x])
        np.testing.assert_allclose(fn(ddpc.tensor(x)).numpy(), want, rtol=1e-14, err_msg=fn.__name__)
        got32 = fn(ddpc.tensor(x, dtype=ddpc.float32)).numpy()
        np.testing.assert_allclose(got32, want.astype(np.float32), rtol=1e-6, err_msg=fn.__name__)
    # far out, the scaled ones against their asymptotic series
    x = np.array([1e4, 1e8])
    np.testing.assert_allclose(special.i0e(ddpc.tensor(x)).numpy(),
                               (1 + 1 / (8 * x) + 9 / (128 * x * x)) / np.sqrt(2 * np.pi * x), rtol=1e-12)
    np.testing.assert_allclose(special.i1e(ddpc.tensor(-x)).numpy(),
                               -(1 - 3 / (8 * x) - 15 / (128 * x * x)) / np.sqrt(2 * np.pi * x), rtol=1e-12)


# name: (function, inputs inside its domain)
GRAD_CASES = {
    "tan": (ddpc.tan, [-1.2, 0.3, 1.0]), "asin": (ddpc.asin, [-0.9, 0.1, 0.6]),
    "acos": (ddpc.acos, [-0.9, 0.1, 0.6]), "acosh": (ddpc.acosh, [1.2, 2.0, 9.0]),
    "atanh": (ddpc.atanh, [-0.9, 0.1, 0.6]), "erfc": (ddpc.erfc, [-1.5, 0.2, 2.0]),
    "erfinv": (ddpc.erfinv, [-0.95, 0.1, 0.7]), "lgamma": (ddpc.lgamma, [-2.5, 0.3, 7.0]),
    "digamma": (ddpc.digamma, [-2.5, 0.3, 7.0]), "polygamma1": (lambda t: ddpc.polygamma(1, t), [-2.5, 0.3, 7.0]),
    "polygamma3": (lambda t: ddpc.polygamma(3, t), [-2.5, 0.3, 7.0]), "i0": (ddpc.i0, [-3.0, 0.4, 2.0]),
    "i0e": (special.i0e, [-3.0, 0.4, 35.0]), "i1": (special.i1, [-3.0, 0.0, 2.0]),
    "i1e": (special.i1e, [-3.0, 0.2, 35.0]), "erfcx": (special.erfcx, [-2.0, 0.5, 15.0]),
    "ndtri": (special.ndtri, [0.01, 0.4, 0.97]), "ndtr": (special.ndtr, [-3.0, 0.1, 2.0]),
    "log_ndtr": (special.log_ndtr, [-30.0, -1.5, 0.1, 2.0]), "entr": (special.entr, [0.1, 1.0, 3.0]),
    "multigammaln": (lambda t: special.multigammaln(t, 3), [1.2, 2.0, 5.0]),
    "xlog1py": (lambda t: special.xlog1py(t, t * t), [-0.5, 0.3, 2.0]),
}


@pytest.mark.parametrize("name", list(GRAD_CASES))
def test_gradients_match_central_differences(name):
    fn, xs = GRAD_CASES[name]
    x = np.array(xs)
    w = np.linspace(0.5, 1.5, x.size)
    t = ddpc.tensor(x, requires_grad=True)
    (fn(t) * ddpc.tensor(w)).sum().backward()
    want = numeric_grad(lambda v: float((fn(ddpc.tensor(v)).numpy() * w).sum()), x, eps=1e-5)
    np.testing.assert_allclose(t.grad.numpy(), want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", [n for n in GRAD_CASES if n not in ("entr",)])
def test_second_derivatives(name):
    fn, xs = GRAD_CASES[name]
    check_hvp(lambda t: (fn(t) * t * t).sum(), np.array(xs), rtol=1e-5, atol=1e-6)


def test_bessel_i1_gradients_at_zero():
    for fn in (special.i1, special.i1e):
        t = ddpc.tensor([0.0], dtype=ddpc.float64, requires_grad=True)
        fn(t).backward()
        assert t.grad.item() == 0.5


def test_gradient_names():
    t = ddpc.tensor([0.5], requires_grad=True)
    assert ddpc.lgamma(t).grad_fn.name() == "LgammaBackward"
    assert ddpc.polygamma(2, t).grad_fn.name() == "PolygammaBackward"
    assert special.i1e(t).grad_fn.name() == "SpecialI1EBackward"


INPLACE = ["tan", "asin", "acos", "atan", "acosh", "atanh", "asinh", "sinh", "cosh", "erfc", "erfinv", "lgamma",
           "digamma", "i0", "exp2", "log2", "log10", "frac", "sgn", "logit", "arcsin", "arccos", "arctan", "arcsinh",
           "arccosh", "arctanh"]


@pytest.mark.parametrize("name", INPLACE)
def test_inplace_methods(name):
    x = np.array([0.2, 0.45, 0.7]) + (1.5 if name in ("acosh", "arccosh") else 0)
    t = ddpc.tensor(x)
    want = getattr(t, name)().numpy()
    assert getattr(t, name + "_")() is t
    np.testing.assert_array_equal(t.numpy(), want)
    if hasattr(ddpc, name + "_"):
        u = ddpc.tensor(x)
        getattr(ddpc, name + "_")(u)
        np.testing.assert_array_equal(u.numpy(), want)
    # in a graph: a non-leaf changes in place and its gradient flows back through the op
    leaf = ddpc.tensor(x, requires_grad=True)
    y = leaf * 1.0
    getattr(y, name + "_")()
    y.sum().backward()
    g = ddpc.tensor(x, requires_grad=True)
    getattr(g, name)().sum().backward()
    np.testing.assert_allclose(leaf.grad.numpy(), g.grad.numpy())
    with pytest.raises(RuntimeError):
        getattr(ddpc.tensor(x, requires_grad=True), name + "_")()


@pytest.mark.parametrize("name", ["hypot", "atan2", "arctan2", "xlogy"])
def test_binary_inplace_methods(name):
    a, b = ddpc.tensor([0.5, 2.0, 3.0]), ddpc.tensor([1.5, 0.25, 4.0])
    want = getattr(a, name)(b).numpy()
    assert getattr(a, name + "_")(b) is a
    np.testing.assert_array_equal(a.numpy(), want)
    if name == "xlogy":
        c = ddpc.tensor([0.5, 2.0, 3.0])
        ddpc.xlogy_(c, b)
        np.testing.assert_array_equal(c.numpy(), want)


def test_polygamma_and_mvlgamma_inplace():
    t = ddpc.tensor([0.5, 2.0])
    want = ddpc.polygamma(2, t).numpy()
    np.testing.assert_array_equal(t.polygamma_(2).numpy(), want)
    t = ddpc.tensor([2.5, 4.0], dtype=ddpc.float64)
    want = [math.lgamma(v) + math.lgamma(v - 0.5) + 0.5 * math.log(math.pi) for v in (2.5, 4.0)]
    np.testing.assert_allclose(t.mvlgamma_(2).numpy(), want, rtol=1e-15)
    with pytest.raises(ValueError):
        ddpc.mvlgamma(ddpc.tensor([0.2]), 2)


def test_aliases():
    assert ddpc.arcsin is ddpc.asin and ddpc.arccos is ddpc.acos and ddpc.arctan is ddpc.atan
    assert ddpc.arcsinh is ddpc.asinh and ddpc.arccosh is ddpc.acosh and ddpc.arctanh is ddpc.atanh
    assert ddpc.arctan2 is ddpc.atan2
    t = ddpc.tensor([0.25, 0.5])
    for alias, name in [("arcsin", "asin"), ("arccos", "acos"), ("arctan", "atan"), ("arcsinh", "asinh"),
                        ("arctanh", "atanh")]:
        np.testing.assert_array_equal(getattr(t, alias)().numpy(), getattr(t, name)().numpy())
    np.testing.assert_array_equal(t.arctan2(t + 1).numpy(), ddpc.atan2(t, t + 1).numpy())
    assert special.psi is special.digamma and special.gammaln is ddpc.lgamma
    np.testing.assert_array_equal(special.expit(t).numpy(), ddpc.sigmoid(t).numpy())


@pytest.mark.parametrize("dtype", [ddpc.float16, ddpc.bfloat16])
def test_half_precision_computes_in_float32(dtype):
    x = ddpc.tensor([0.1, 0.5, 2.0], dtype=dtype)
    for fn in (ddpc.tan, ddpc.erfinv, ddpc.lgamma, ddpc.digamma, ddpc.i0, special.i1e, special.ndtri):
        got = fn(x)
        assert got.dtype is dtype
        np.testing.assert_array_equal(got.float().numpy(), fn(x.float()).to(dtype=dtype).float().numpy())


def test_special_module_compositions():
    x = np.array([0.0, 0.5, 2.0, -1.0, math.nan])
    np.testing.assert_array_equal(special.entr(ddpc.tensor(x)).numpy(),
                                  [0.0, -0.5 * math.log(0.5), -2 * math.log(2.0), -math.inf, math.nan])
    a, b = ddpc.tensor([0.0, 2.0, 0.0]), ddpc.tensor([5.0, 1e-10, math.nan])
    np.testing.assert_allclose(special.xlog1py(a, b).numpy(), [0.0, 2 * math.log1p(1e-10), math.nan], rtol=1e-6)
    p = np.array([1.2, 3.0, 7.5])
    want = [0.25 * 3 * 2 * math.log(math.pi) + sum(math.lgamma(v - i / 2) for i in range(3)) for v in p]
    np.testing.assert_allclose(special.multigammaln(ddpc.tensor(p, dtype=ddpc.float64), 3).numpy(), want,
                               rtol=1e-15)
    m = ddpc.tensor([[1.0, 2.0, 3.0]])
    np.testing.assert_allclose(special.logsumexp(m, 1).numpy(), [math.log(sum(math.exp(v) for v in (1, 2, 3)))],
                               rtol=1e-6)
    np.testing.assert_allclose(special.softmax(m, 1, dtype=ddpc.float64).numpy().sum(), 1.0)
    assert special.log_softmax(m, 1, dtype=ddpc.float64).dtype is ddpc.float64
    np.testing.assert_array_equal(special.round(ddpc.tensor([0.5, 1.5, 2.25]), decimals=1).numpy(),
                                  np.round(np.array([0.5, 1.5, 2.25], dtype=np.float32), 1))
    for name in special.__all__:
        assert callable(getattr(special, name))


# ---- gammainc, gammaincc, zeta, the Bessel functions and the polynomials -----------------------------------------


def test_incomplete_gamma_closed_forms():
    x = np.array([0.0, 1e-3, 0.5, 2.0, 30.0])
    t = ddpc.tensor(x)
    one = ddpc.ones(5, dtype=ddpc.float64)
    np.testing.assert_allclose(special.gammainc(one, t).numpy(), -np.expm1(-x), rtol=1e-15)  # P(1, x) = 1 - e^-x
    np.testing.assert_allclose(special.gammaincc(one, t).numpy(), np.exp(-x), rtol=1e-14)
    # P(1/2, x) = erf(sqrt x), Q(1/2, x) = erfc(sqrt x)
    np.testing.assert_allclose(special.gammainc(one * 0.5, t).numpy(), [math.erf(math.sqrt(v)) for v in x],
                               rtol=1e-14)
    np.testing.assert_allclose(special.gammaincc(one * 0.5, t).numpy(), [math.erfc(math.sqrt(v)) for v in x],
                               rtol=1e-13)
    # Q(n, x) = e^-x sum_k<n x^k / k! for whole n, and P + Q = 1
    n = ddpc.tensor([3.0, 7.0, 25.0], dtype=ddpc.float64)
    xs = ddpc.tensor([2.0, 9.0, 24.0], dtype=ddpc.float64)
    want = [math.exp(-b) * math.fsum(b ** k / math.factorial(k) for k in range(int(a))) for a, b in
            zip([3, 7, 25], [2.0, 9.0, 24.0])]
    np.testing.assert_allclose(special.gammaincc(n, xs).numpy(), want, rtol=1e-13)
    np.testing.assert_allclose((special.gammainc(n, xs) + special.gammaincc(n, xs)).numpy(), 1.0, rtol=1e-15)
    # the edges: a < 0 or x < 0 is NaN, P(0, x) = 1, P(a, 0) = 0, both 0 or both infinite NaN
    a = ddpc.tensor([-1.0, 2.0, 0.0, 3.0, 0.0, math.inf, math.inf, 2.0], dtype=ddpc.float64)
    x = ddpc.tensor([1.0, -1.0, 2.0, 0.0, 0.0, math.inf, 5.0, math.inf], dtype=ddpc.float64)
    np.testing.assert_array_equal(special.gammainc(a, x).numpy(), [math.nan, math.nan, 1, 0, math.nan, math.nan, 0, 1])
    np.testing.assert_array_equal(special.gammaincc(a, x).numpy(), [math.nan, math.nan, 0, 1, math.nan, math.nan, 1, 0])


def test_incomplete_gamma_dtypes_broadcasting_and_errors():
    a = ddpc.tensor([[0.5], [2.0]])
    x = ddpc.tensor([0.25, 1.0, 4.0], dtype=ddpc.float64)
    out = special.gammainc(a, x)
    assert out.dtype is ddpc.float64 and tuple(out.shape) == (2, 3)
    np.testing.assert_allclose(out.numpy(), special.gammainc(a.double().expand(2, 3), x.expand(2, 3)).numpy(),
                               rtol=0)
    assert special.gammainc(ddpc.tensor([1, 2]), ddpc.tensor([0.5, 1.5])).dtype is ddpc.float32
    assert special.gammaincc(ddpc.tensor([1.5]), ddpc.tensor(2.0, dtype=ddpc.float64)).dtype is ddpc.float32
    half = special.gammainc(a.to(dtype=ddpc.float16), x.float().to(dtype=ddpc.float16))
    assert half.dtype is ddpc.float16
    np.testing.assert_allclose(half.float().numpy(), out.numpy(), rtol=2e-3)
    with pytest.raises(TypeError):
        special.gammainc(ddpc.tensor([1.0]), 2.0)  # PyTorch takes tensors only
    with pytest.raises(TypeError):
        special.gammaincc(1.0, ddpc.tensor([1.0]))
    with pytest.raises(NotImplementedError):
        special.gammainc(ddpc.tensor([1, 2]), ddpc.tensor([1, 2]))
    with pytest.raises(ValueError):  # the C op's own broadcasting check
        special.gammainc(ddpc.tensor([1.0, 2.0]), ddpc.tensor([1.0, 2.0, 3.0]))
    # the torch-level names and the Tensor methods, also in place
    np.testing.assert_array_equal(ddpc.igamma(a, x).numpy(), out.numpy())
    np.testing.assert_array_equal(ddpc.igammac(a, x).numpy(), special.gammaincc(a, x).numpy())
    t = ddpc.tensor([0.5, 2.0, 3.0], dtype=ddpc.float64)
    y = ddpc.tensor([1.0, 1.0, 5.0], dtype=ddpc.float64)
    want, want_c = t.igamma(y).numpy(), t.igammac(y).numpy()
    np.testing.assert_array_equal(t.clone().igamma_(y).numpy(), want)
    u = t.clone()
    assert u.igammac_(y) is u
    np.testing.assert_array_equal(u.numpy(), want_c)


@pytest.mark.parametrize("upper", [False, True])
def test_incomplete_gamma_gradient(upper):
    fn = special.gammaincc if upper else special.gammainc
    a = np.array([0.5, 1.0, 2.5, 7.0, 40.0])
    x = np.array([0.3, 2.0, 1.7, 9.0, 38.0])
    w = np.linspace(0.5, 1.5, x.size)
    t = ddpc.tensor(x, requires_grad=True)
    (fn(ddpc.tensor(a), t) * ddpc.tensor(w)).sum().backward()
    want = numeric_grad(lambda v: float((fn(ddpc.tensor(a), ddpc.tensor(v)).numpy() * w).sum()), x, eps=1e-6)
    np.testing.assert_allclose(t.grad.numpy(), want, rtol=1e-7, atol=1e-10)
    # the gradient is recorded: second derivatives exist
    check_hvp(lambda v: (fn(ddpc.tensor(a), v) * v).sum(), x, rtol=1e-5, atol=1e-6)
    # a broadcast x gets its gradient summed back
    s = ddpc.tensor([1.7], dtype=ddpc.float64, requires_grad=True)
    fn(ddpc.tensor(a), s).sum().backward()
    assert tuple(s.grad.shape) == (1,)
    np.testing.assert_allclose(s.grad.numpy(), [numeric_grad(lambda v: float(fn(ddpc.tensor(a), ddpc.tensor(v)).numpy()
                                                                               .sum()), np.array([1.7]))[0]],
                               rtol=1e-7)
    # with respect to a there is none, as in PyTorch: asking for it raises; asking for x's only does not
    aa = ddpc.tensor(a, requires_grad=True)
    xx = ddpc.tensor(x, requires_grad=True)
    out = fn(aa, xx)
    assert out.grad_fn.name() == ("IgammacBackward" if upper else "IgammaBackward")
    (gx,) = ddpc.autograd.grad(out.sum(), [xx], retain_graph=True)
    np.testing.assert_allclose(gx.numpy(), t.grad.numpy() / w, rtol=1e-12)
    with pytest.raises(NotImplementedError, match="igammac: input" if upper else "igamma: input"):
        out.sum().backward()


def test_zeta_values_and_gradient():
    s = ddpc.tensor([2.0, 4.0, 3.0, 2.0], dtype=ddpc.float64)
    q = ddpc.tensor([1.0, 1.0, 0.5, 3.0], dtype=ddpc.float64)
    np.testing.assert_allclose(special.zeta(s, q).numpy(),
                               [math.pi ** 2 / 6, math.pi ** 4 / 90, 7 * ZETA3, math.pi ** 2 / 6 - 1.25], rtol=1e-15)
    # zeta(s, q) - zeta(s, q + 1) = q^-s for a real s
    sv, qv = np.array([1.5, 2.7, 6.2]), np.array([0.3, 4.0, 11.5])
    diff = special.zeta(ddpc.tensor(sv), ddpc.tensor(qv)) - special.zeta(ddpc.tensor(sv), ddpc.tensor(qv + 1))
    np.testing.assert_allclose(diff.numpy(), qv ** -sv, rtol=1e-13)
    # polygamma(n, x) = (-1)^(n+1) n! zeta(n + 1, x)
    x = ddpc.tensor([0.7, 3.2], dtype=ddpc.float64)
    np.testing.assert_allclose(special.zeta(4.0, x).numpy() * 6, ddpc.polygamma(3, x).numpy(), rtol=1e-15)
    assert special.zeta(ddpc.tensor([2, 3]), 2).dtype is ddpc.float32
    assert special.zeta(2.0, ddpc.tensor([2.0], dtype=ddpc.float64)).dtype is ddpc.float64
    edges = special.zeta(ddpc.tensor([1.0, 0.5, 2.0, 2.5, 2.0], dtype=ddpc.float64),
                         ddpc.tensor([2.0, 2.0, -3.0, -0.5, math.inf], dtype=ddpc.float64)).numpy()
    np.testing.assert_array_equal(edges, [math.inf, math.nan, math.inf, math.nan, math.nan])
    # d/dq zeta(s, q) = -s zeta(s + 1, q); none with respect to s
    qv = np.array([0.4, 1.3, 6.0])
    sv = np.array([2.5, 3.0, 1.7])
    t = ddpc.tensor(qv, requires_grad=True)
    special.zeta(ddpc.tensor(sv), t).sum().backward()
    want = numeric_grad(lambda v: float(special.zeta(ddpc.tensor(sv), ddpc.tensor(v)).numpy().sum()), qv, eps=1e-6)
    np.testing.assert_allclose(t.grad.numpy(), want, rtol=1e-7)
    check_hvp(lambda v: (special.zeta(ddpc.tensor(sv), v) * v).sum(), qv, rtol=1e-5, atol=1e-6)
    with pytest.raises(NotImplementedError, match="zeta"):
        special.zeta(ddpc.tensor(sv, requires_grad=True), ddpc.tensor(qv)).sum().backward()


BESSEL_GRAD_CASES = {
    "bessel_j0": [-7.0, 0.0, 0.4, 3.3, 12.0], "bessel_j1": [-7.0, 0.0, 0.4, 3.3, 12.0],
    "bessel_y0": [0.4, 3.3, 5.5, 12.0], "bessel_y1": [0.4, 3.3, 5.5, 12.0],
    "modified_bessel_i0": [-3.0, 0.4, 9.0], "modified_bessel_i1": [-3.0, 0.0, 9.0],
    "modified_bessel_k0": [0.3, 1.9, 2.1, 9.0], "modified_bessel_k1": [0.3, 1.9, 2.1, 9.0],
}


@pytest.mark.parametrize("name", list(BESSEL_GRAD_CASES))
def test_bessel_gradients(name):
    fn = getattr(special, name)
    x = np.array(BESSEL_GRAD_CASES[name])
    t = ddpc.tensor(x, requires_grad=True)
    fn(t).sum().backward()
    want = numeric_grad(lambda v: float(fn(ddpc.tensor(v)).numpy().sum()), x, eps=1e-5)
    np.testing.assert_allclose(t.grad.numpy(), want, rtol=1e-6, atol=1e-7)
    check_hvp(lambda v: (fn(v) * v).sum(), x, rtol=1e-5, atol=1e-6)


def test_bessel_identities_and_no_gradient_forms():
    x = np.array([0.3, 1.0, 2.5, 4.9, 5.1, 11.0, 40.0])
    t = ddpc.tensor(x)
    j0, j1, y0, y1 = (getattr(special, f"bessel_{n}")(t).numpy() for n in ("j0", "j1", "y0", "y1"))
    np.testing.assert_allclose(j1 * y0 - j0 * y1, 2 / (np.pi * x), rtol=1e-13)  # the Wronskian
    k0, k1 = special.modified_bessel_k0(t).numpy(), special.modified_bessel_k1(t).numpy()
    i0, i1 = special.modified_bessel_i0(t).numpy(), special.modified_bessel_i1(t).numpy()
    np.testing.assert_allclose(i0 * k1 + i1 * k0, 1 / x, rtol=1e-13)
    np.testing.assert_allclose(special.scaled_modified_bessel_k0(t).numpy(), k0 * np.exp(x), rtol=1e-13)
    np.testing.assert_allclose(special.scaled_modified_bessel_k1(t).numpy(), k1 * np.exp(x), rtol=1e-13)
    np.testing.assert_allclose(special.spherical_bessel_j0(t).numpy(), np.sin(x) / x, rtol=1e-15)
    # Ai(0) = 3^(-2/3) / Gamma(2/3); Ai'' = x Ai, by second differences
    assert special.airy_ai(ddpc.tensor([0.0], dtype=ddpc.float64)).item() == pytest.approx(
        3 ** (-2 / 3) / math.gamma(2 / 3), rel=1e-15)
    h, xs = 1e-3, np.array([-6.0, -1.0, 0.5, 3.0])
    ai = [special.airy_ai(ddpc.tensor(xs + d)).numpy() for d in (-h, 0.0, h)]
    np.testing.assert_allclose((ai[0] - 2 * ai[1] + ai[2]) / h ** 2, xs * ai[1], rtol=1e-5, atol=1e-8)
    # PyTorch differentiates none of these: their results do not require grad
    g = ddpc.tensor(x, requires_grad=True)
    for name in ("scaled_modified_bessel_k0", "scaled_modified_bessel_k1", "spherical_bessel_j0", "airy_ai"):
        assert not getattr(special, name)(g).requires_grad, name
    for name in ("bessel_j0", "modified_bessel_k1"):
        assert getattr(special, name)(g).requires_grad, name
    assert special.bessel_y1(g).grad_fn.name() == "SpecialBesselY1Backward"
    assert special.bessel_j0(ddpc.tensor([1, 2])).dtype is ddpc.float32
    assert special.airy_ai(ddpc.tensor([0.5], dtype=ddpc.bfloat16)).dtype is ddpc.bfloat16


def test_orthogonal_polynomials_broadcast_and_closed_forms():
    x = ddpc.tensor([-0.8, -0.1, 0.35, 0.9], dtype=ddpc.float64)
    n = ddpc.tensor([[0], [1], [2], [3], [9], [30]])
    xv, nv = x.numpy(), n.numpy()
    theta = np.arccos(xv)
    cases = {
        "chebyshev_polynomial_t": np.cos(nv * theta),
        "chebyshev_polynomial_u": np.sin((nv + 1) * theta) / np.sin(theta),
        "chebyshev_polynomial_v": np.cos((nv + 0.5) * theta) / np.cos(theta / 2),
        "chebyshev_polynomial_w": np.sin((nv + 0.5) * theta) / np.sin(theta / 2),
    }
    for name, want in cases.items():
        got = getattr(special, name)(x, n)
        assert tuple(got.shape) == (6, 4) and got.dtype is ddpc.float64 and not got.requires_grad
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12, err_msg=name)
        shifted = getattr(special, "shifted_" + name)((x + 1) / 2, n)
        np.testing.assert_allclose(shifted.numpy(), want, rtol=1e-12, atol=1e-12, err_msg="shifted " + name)
    xv = np.array([-1.5, 0.3, 2.0])
    t = ddpc.tensor(xv)
    np.testing.assert_allclose(special.hermite_polynomial_h(t, 3).numpy(), 8 * xv ** 3 - 12 * xv, rtol=1e-14)
    np.testing.assert_allclose(special.hermite_polynomial_he(t, 4).numpy(), xv ** 4 - 6 * xv ** 2 + 3, rtol=1e-14)
    np.testing.assert_allclose(special.laguerre_polynomial_l(t, 3).numpy(),
                               (-xv ** 3 + 9 * xv ** 2 - 18 * xv + 6) / 6, rtol=1e-14)
    np.testing.assert_allclose(special.legendre_polynomial_p(t, 3).numpy(), (5 * xv ** 3 - 3 * xv) / 2, rtol=1e-14)
    # the degree a number or a tensor, the point a number too; integers give float32
    assert special.legendre_polynomial_p(ddpc.tensor([1, 2]), 2).dtype is ddpc.float32
    np.testing.assert_allclose(special.legendre_polynomial_p(0.5, ddpc.tensor([2, 3])).numpy(), [-0.125, -0.4375],
                               rtol=1e-7)
    # at +-1 the closed values
    pm = ddpc.tensor([1.0, -1.0], dtype=ddpc.float64)
    np.testing.assert_array_equal(special.chebyshev_polynomial_u(pm, 5).numpy(), [6, -6])
    np.testing.assert_array_equal(special.chebyshev_polynomial_v(pm, 5).numpy(), [1, -11])
    np.testing.assert_array_equal(special.chebyshev_polynomial_w(pm, 4).numpy(), [9, 1])

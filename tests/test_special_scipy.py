"""ddpc.special's incomplete gamma, Hurwitz zeta, Bessel and Airy functions
and orthogonal polynomials against scipy.special (skipped without SciPy):
float64 over grids that cross each algorithm's branch points and out to
large arguments, the edge values (zeros, negatives, infinities, NaN), and
float32 results rounded from the same double computation."""

import math

import numpy as np
import pytest

import ddpc
from ddpc import special

sc = pytest.importorskip("scipy.special")

INF, NAN = math.inf, math.nan


def _check(got, want, rtol, atol=0.0, what=""):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    same = np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True) | (got == want)
    assert same.all(), f"{what}: ddpc {got[~same]} where SciPy has {want[~same]} at {np.flatnonzero(~same)}"


def _grid(*axes):
    return [g.ravel() for g in np.meshgrid(*axes, indexing="ij")]


# a from tiny to huge, x around each: the series, the continued fraction, Q's small-x series and the
# uniform expansion near x = a (for 20 < a < 200 within 30%, beyond 200 within 4.5 sqrt(a))
SHAPES = [1e-10, 1e-3, 0.1, 0.5, 1.0, 1.5, 2.5, 7.0, 19.5, 21.0, 55.0, 150.0, 199.0, 201.0, 1e3, 1e4, 1e6]
RATIOS = [1e-3, 0.05, 0.3, 0.69, 0.8, 0.95, 1.0, 1.03, 1.2, 1.31, 2.0, 5.0, 40.0]


@pytest.mark.parametrize("fn, ref", [(special.gammainc, "gammainc"), (special.gammaincc, "gammaincc")])
def test_incomplete_gamma_matches_scipy(fn, ref):
    a, r = _grid(np.array(SHAPES), np.array(RATIOS))
    x = np.concatenate([a * r, [0.4, 0.5, 0.6, 1.05, 1.1, 1.15] * 3])
    a = np.concatenate([a, np.repeat([0.2, 0.45, 1.3], 6)])
    want = getattr(sc, ref)(a, x)
    got = fn(ddpc.tensor(a), ddpc.tensor(x))
    assert got.dtype is ddpc.float64
    # relative to the value, and to 1 where the other function is the one near 1
    _check(got.numpy(), want, rtol=5e-13, atol=1e-15, what=ref)
    got32 = fn(ddpc.tensor(a, dtype=ddpc.float32), ddpc.tensor(x, dtype=ddpc.float32))
    want32 = getattr(sc, ref)(a.astype(np.float32).astype(np.float64), x.astype(np.float32).astype(np.float64))
    _check(got32.numpy(), want32.astype(np.float32), rtol=1e-6, atol=1e-30, what=f"{ref} float32")


def test_incomplete_gamma_edges_match_scipy():
    a, x = _grid(np.array([0.0, 1e-300, 0.5, 3.0, 1e300, INF, -1.0, NAN]),
                 np.array([0.0, 1e-300, 0.5, 3.0, 1e300, INF, -1.0, NAN]))
    # PyTorch's order of checks (which ddpc keeps): x = 0 and an infinite a or x decide before a NaN in the other
    lower = [(((a == INF) | (x == 0)) & (np.isnan(a) | np.isnan(x)), 0.0), (np.isnan(a) & (x == INF), 1.0)]
    for name in ("gammainc", "gammaincc"):
        want = getattr(sc, name)(a, x)
        for where, p in lower:
            want[where] = p if name == "gammainc" else 1 - p
        _check(getattr(special, name)(ddpc.tensor(a), ddpc.tensor(x)).numpy(), want, rtol=1e-14, what=name)
    # P + Q = 1, and each accurate where it is the small one
    a, x = np.array([3.0, 40.0, 500.0]), np.array([60.0, 3.0, 700.0])
    q = special.gammaincc(ddpc.tensor(a), ddpc.tensor(x)).numpy()
    p = special.gammainc(ddpc.tensor(a), ddpc.tensor(x)).numpy()
    np.testing.assert_allclose(q[[0, 2]], sc.gammaincc(a, x)[[0, 2]], rtol=1e-12)
    np.testing.assert_allclose(p[1], sc.gammainc(a, x)[1], rtol=1e-12)
    assert q[0] < 1e-15 and p[1] < 1e-15


def test_zeta_matches_scipy():
    s, q = _grid(np.array([1.0 + 1e-9, 1.001, 1.5, 2.0, 3.0, 4.5, 7.0, 20.0, 60.0]),
                 np.array([1e-8, 0.1, 0.5, 1.0, 1.7, 9.5, 10.5, 100.0, 1e8]))
    _check(special.zeta(ddpc.tensor(s), ddpc.tensor(q)).numpy(), sc.zeta(s, q), rtol=1e-13, what="zeta")
    # negative q with a whole s: the terms change sign, so the error is relative to the largest, |q - round(q)|^-s
    s, q = _grid(np.array([2.0, 3.0, 4.0]), np.array([-0.5, -2.5, -7.3, -40.75]))
    got = special.zeta(ddpc.tensor(s), ddpc.tensor(q)).numpy()
    _check(got, sc.zeta(s, q), rtol=0, atol=1e-13 * np.abs(q - np.round(q)) ** -s, what="zeta at negative q")
    q32 = q.astype(np.float32).astype(np.float64)
    _check(special.zeta(ddpc.tensor(s, dtype=ddpc.float32), ddpc.tensor(q32, dtype=ddpc.float32)).numpy(),
           sc.zeta(s, q32).astype(np.float32), rtol=2e-7, atol=2e-7 * np.abs(q32 - np.round(q32)) ** -s,
           what="zeta float32")
    # the edges, where SciPy and PyTorch agree: poles, the domain's bounds, NaN, s = inf but for q > 1
    s, q = _grid(np.array([1.0, 0.5, -2.0, 2.0, 2.5, INF, NAN]), np.array([1.0, 0.0, -1.0, -0.5, 0.5, 2.0, -INF, NAN]))
    want = sc.zeta(s, q)
    _check(special.zeta(ddpc.tensor(s), ddpc.tensor(q)).numpy(), want, rtol=1e-14, what="zeta edges")


BESSEL = {
    "bessel_j0": sc.j0, "bessel_j1": sc.j1, "bessel_y0": sc.y0, "bessel_y1": sc.y1,
    "modified_bessel_i0": sc.i0, "modified_bessel_i1": sc.i1, "modified_bessel_k0": sc.k0,
    "modified_bessel_k1": sc.k1, "scaled_modified_bessel_k0": sc.k0e, "scaled_modified_bessel_k1": sc.k1e,
    "spherical_bessel_j0": lambda x: sc.spherical_jn(0, x), "airy_ai": lambda x: sc.airy(x)[0],
}
OSCILLATING = ("bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1")


def _envelope(x):
    """sqrt(2 / (pi |x|)), the amplitude J and Y of orders 0 and 1 oscillate within far out."""
    return np.sqrt(2 / (np.pi * np.maximum(np.abs(x), 1e-300)))


# both sides of every branch point (1e-5, 2, 2.09, 5, 8), the zeros' neighbourhoods and far out
POINTS = np.concatenate([np.linspace(-30, 30, 241), [1e-6, 1.9999, 2.0, 2.0001, 2.089, 2.09, 2.091, 4.999, 5.0, 5.001,
                                                      8.32, 8.33, 2.404825557695773, 3.831705970207512, 50.0, 99.0,
                                                      103.0, 300.0, 700.0, 1e4]])


@pytest.mark.parametrize("name", list(BESSEL))
def test_bessel_functions_match_scipy(name):
    fn, ref = getattr(special, name), BESSEL[name]
    x = np.concatenate([POINTS, -POINTS])
    want = ref(x)
    got = fn(ddpc.tensor(x)).numpy()
    # relative, and absolute against the function's scale where it oscillates through its zeros
    scale = np.abs(want) if name.startswith(("modified", "scaled")) else np.maximum(np.abs(want), 1e-3)
    if name in OSCILLATING:  # past 8 the error is one of the phase x - pi/4 against the envelope; SciPy before
        # 1.18 shares ddpc's (Cephes's) and lands within 5e-14 of it, SciPy 1.18's is more accurate there
        scale = np.where(np.abs(x) > 8, np.maximum(scale, 20 * _envelope(x) * np.abs(x) * np.finfo(float).eps
                                                   / 5e-14), scale)
    if name == "airy_ai":  # its phase (2/3) |x|^(3/2) carries |x|^(3/2) ulp of rounding in either library
        scale = np.where(x < -2, np.abs(x) ** -0.25 * np.maximum(1, np.abs(x) ** 1.5 / 20), np.abs(want))
    finite = np.isfinite(want)
    _check(got[finite], want[finite], rtol=0, atol=5e-14 * scale[finite] + 1e-300, what=name)
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(got[np.isinf(want)], want[np.isinf(want)])
    got32 = fn(ddpc.tensor(x, dtype=ddpc.float32)).numpy()
    want32 = ref(x.astype(np.float32).astype(np.float64))
    finite = np.isfinite(want32) & (np.abs(want32) < 3e38) & (np.abs(want32) > 1e-37)
    _check(got32[finite], want32[finite].astype(np.float32), rtol=0,
           atol=2e-7 * np.maximum(scale[finite], np.abs(want32[finite])), what=f"{name} float32")


def test_bessel_edges_match_scipy():
    x = np.array([0.0, -0.0, 1e-300, -1e-300, INF, -INF, NAN, 1e300, -1e300])
    for name, ref in BESSEL.items():
        want = ref(x)
        if name == "airy_ai":  # PyTorch's: NaN at +-inf, 0 far right (SciPy: NaN past 1e10 too)
            want = np.where(np.isinf(x), NAN, np.where(x > 1e10, 0.0, want))
        if name.startswith("modified_bessel_i"):  # PyTorch's: NaN at +-inf
            want = np.where(np.isinf(x), NAN, want)
        got = getattr(special, name)(ddpc.tensor(x)).numpy()
        if name in OSCILLATING:  # at +-1e300 the phase is lost in either library: within the envelope is all
            far = (np.abs(x) == 1e300) & ~np.isnan(want)  # (Y's NaN at -1e300 is checked below)
            assert (np.abs(got[far]) <= _envelope(x[far])).all(), f"{name}: {got[far]} at +-1e300"
            got, want = got[~far], want[~far]
        _check(got, want, rtol=1e-14, atol=1e-160, what=name)


POLYNOMIALS = {
    "chebyshev_polynomial_t": sc.eval_chebyt, "chebyshev_polynomial_u": sc.eval_chebyu,
    "chebyshev_polynomial_v": lambda n, x: np.where(x == -1, (2 * n + 1) * (-1.0) ** n,
                                                     np.cos((n + 0.5) * np.arccos(x)) / np.cos(np.arccos(x) / 2)),
    "chebyshev_polynomial_w": lambda n, x: np.where(x == 1, 2 * n + 1.0,
                                                     np.sin((n + 0.5) * np.arccos(x)) / np.sin(np.arccos(x) / 2)),
    "shifted_chebyshev_polynomial_t": sc.eval_sh_chebyt, "shifted_chebyshev_polynomial_u": sc.eval_sh_chebyu,
    "hermite_polynomial_h": sc.eval_hermite, "hermite_polynomial_he": sc.eval_hermitenorm,
    "laguerre_polynomial_l": sc.eval_laguerre, "legendre_polynomial_p": sc.eval_legendre,
}


@pytest.mark.parametrize("name", list(POLYNOMIALS))
def test_orthogonal_polynomials_match_scipy(name):
    ref = POLYNOMIALS[name]
    unit = name.startswith("shifted")
    x = np.linspace(0, 1, 21) if unit else np.concatenate([np.linspace(-1, 1, 21), [-3.5, 2.25, 7.0]])
    if name in ("chebyshev_polynomial_v", "chebyshev_polynomial_w"):
        x = np.linspace(-1, 1, 21)  # the trigonometric reference holds on [-1, 1]
    n = np.array([0, 1, 2, 3, 6, 7, 8, 9, 10, 25, 60])
    xs, ns = _grid(x, n)
    got = getattr(special, name)(ddpc.tensor(xs), ddpc.tensor(ns))
    assert got.dtype is ddpc.float64  # an integer degree takes x's dtype
    want = ref(ns, xs)
    # the recurrences lose a few ulp of the largest value of a degree per step near the roots
    scale = np.maximum(1, np.abs(want))
    _check(got.numpy(), want, rtol=0, atol=1e-12 * ns * scale + 1e-14, what=name)
    got32 = getattr(special, name)(ddpc.tensor(xs, dtype=ddpc.float32), ddpc.tensor(ns))
    assert got32.dtype is ddpc.float32
    want32 = ref(ns, xs.astype(np.float32).astype(np.float64))
    _check(got32.numpy(), want32.astype(np.float32), rtol=0, atol=1e-6 * scale + 1e-6 * ns * scale, what=name)


def test_polynomial_degrees_as_pytorch():
    x = ddpc.tensor([0.3, -0.7, 1.0, -1.0], dtype=ddpc.float64)
    for name in POLYNOMIALS:
        fn = getattr(special, name)
        np.testing.assert_array_equal(fn(x, -1).numpy(), 0.0, err_msg=name)  # negative: 0
        np.testing.assert_array_equal(fn(x, NAN).numpy(), 0.0, err_msg=name)  # no degree at all: 0
        np.testing.assert_array_equal(fn(x, 2.7).numpy(), fn(x, 2).numpy(), err_msg=name)  # truncated
    # past degree 512 (128 for float32) the Hermite polynomials are NaN, as PyTorch's
    assert math.isnan(special.hermite_polynomial_h(x, 513)[0].item())
    assert math.isnan(special.hermite_polynomial_he(x.float(), 129)[0].item())
    np.testing.assert_allclose(special.hermite_polynomial_he(x.float(), 128).numpy()[:2],
                               sc.eval_hermitenorm(128, [0.3, -0.7]).astype(np.float32), rtol=1e-5)

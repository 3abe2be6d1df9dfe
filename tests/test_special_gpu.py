"""The special functions' CUDA kernels against the host loops (marked gpu):
the same formulas of kernels/special_functions.h, bessel.h and
special_binary.h and the same libm functions, so outputs and gradients
agree to a few units in the last place over edge values and inside each
domain."""

import math

import numpy as np
import pytest

import ddpc
from ddpc import special

pytestmark = pytest.mark.gpu

INF, NAN = math.inf, math.nan
EDGE = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -3.0, INF, -INF, NAN, 1e-30, 1e-5, 0.999, -0.999, 12.5, 29.9, 30.0,
        -30.0, 100.0, -100.5, 1e10, -1e10, 1e30]
PROBABILITIES = [0.0, 1.0, 0.5, 1e-30, 1e-5, 0.3, 0.999, -0.1, 1.1, NAN]
WIDE = [-2.5, -0.7, 0.3, 1.7, 6.0, 35.0]
UNIT = [-0.9, -0.3, 0.2, 0.7]
POSITIVE = [0.3, 1.9, 2.1, 4.9, 5.1, 30.0]

CASES = [
    ("tan", ddpc.tan, EDGE, [-1.3, -0.2, 0.4, 1.1]), ("asin", ddpc.asin, EDGE, UNIT), ("acos", ddpc.acos, EDGE, UNIT),
    ("acosh", ddpc.acosh, EDGE, [1.1, 2.0, 30.0]), ("atanh", ddpc.atanh, EDGE, UNIT),
    ("erfc", ddpc.erfc, EDGE, WIDE), ("erfinv", ddpc.erfinv, EDGE, UNIT), ("lgamma", ddpc.lgamma, EDGE, WIDE),
    ("digamma", ddpc.digamma, EDGE, WIDE), ("polygamma1", lambda t: ddpc.polygamma(1, t), EDGE, WIDE),
    ("polygamma4", lambda t: ddpc.polygamma(4, t), EDGE, WIDE), ("i0", ddpc.i0, EDGE, WIDE),
    ("i0e", special.i0e, EDGE, WIDE), ("i1", special.i1, EDGE, WIDE), ("i1e", special.i1e, EDGE, WIDE),
    ("erfcx", special.erfcx, EDGE, WIDE), ("ndtri", special.ndtri, PROBABILITIES, [0.01, 0.3, 0.99]),
    ("log_ndtr", special.log_ndtr, EDGE, WIDE),
    ("bessel_j0", special.bessel_j0, EDGE, WIDE), ("bessel_j1", special.bessel_j1, EDGE, WIDE),
    ("bessel_y0", special.bessel_y0, EDGE, POSITIVE), ("bessel_y1", special.bessel_y1, EDGE, POSITIVE),
    ("modified_bessel_k0", special.modified_bessel_k0, EDGE, POSITIVE),
    ("modified_bessel_k1", special.modified_bessel_k1, EDGE, POSITIVE),
]

# Without a gradient (as in PyTorch): outputs only.
VALUE_CASES = [
    ("scaled_modified_bessel_k0", special.scaled_modified_bessel_k0),
    ("scaled_modified_bessel_k1", special.scaled_modified_bessel_k1),
    ("spherical_bessel_j0", special.spherical_bessel_j0), ("airy_ai", special.airy_ai),
]


def _run(fn, values, device, dtype, grad):
    t = ddpc.tensor(np.array(values), dtype=dtype, device=device, requires_grad=grad)
    out = fn(t)
    if not grad:
        return out.cpu().numpy()
    out.sum().backward()
    return t.grad.cpu().numpy()


@pytest.mark.parametrize("dtype", [ddpc.float32, ddpc.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name, fn, values, grad_at", CASES, ids=[c[0] for c in CASES])
def test_cuda_matches_host(name, fn, values, grad_at, dtype):
    rtol = 1e-5 if dtype is ddpc.float32 else 1e-13
    for what, xs, grad in (("output", values, False), ("gradient", grad_at, True)):
        host, dev = _run(fn, xs, "cpu", dtype, grad), _run(fn, xs, "cuda", dtype, grad)
        np.testing.assert_allclose(dev, host, rtol=rtol, atol=0, equal_nan=True, err_msg=f"{name} {what}")


def test_cuda_second_derivative_matches_host():
    grads = []
    for device in ("cpu", "cuda"):
        t = ddpc.tensor([0.3, 1.7, -2.5], dtype=ddpc.float64, device=device, requires_grad=True)
        (g,) = ddpc.autograd.grad((ddpc.digamma(t) * special.i1e(t)).sum(), [t], create_graph=True)
        (h,) = ddpc.autograd.grad(g.sum(), [t])
        grads.append(h.cpu().numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-13)


@pytest.mark.parametrize("dtype", [ddpc.float32, ddpc.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name, fn", VALUE_CASES, ids=[c[0] for c in VALUE_CASES])
def test_cuda_matches_host_without_gradient(name, fn, dtype):
    rtol = 1e-5 if dtype is ddpc.float32 else 1e-13
    xs = EDGE + [-2.2, -2.0, 2.08, 2.1, 8.4, 104.0]
    host, dev = _run(fn, xs, "cpu", dtype, False), _run(fn, xs, "cuda", dtype, False)
    np.testing.assert_allclose(dev, host, rtol=rtol, atol=0, equal_nan=True, err_msg=name)


# The special functions of two arguments (one broadcasting kernel): first and second operands, broadcast.
SHAPES = [0.0, 1e-10, 0.5, 1.0, 2.5, 25.0, 250.0, INF, -1.0, NAN]
BINARY_CASES = [
    ("gammainc", special.gammainc, SHAPES, [0.0, 0.3, 1.0, 1.2, 2.4, 24.0, 260.0, 1e4, INF, NAN]),
    ("gammaincc", special.gammaincc, SHAPES, [0.0, 0.3, 1.0, 1.2, 2.4, 24.0, 260.0, 1e4, INF, NAN]),
    ("zeta", special.zeta, [1.0, 1.5, 2.0, 3.0, 7.5, INF, NAN, 0.5], [1.0, 0.5, -0.5, -2.0, 3.0, 20.0, NAN, INF]),
] + [(name, getattr(special, name), [-1.0, -0.6, 0.0, 0.3, 1.0, 2.5], [-1.0, 0.0, 1.0, 2.0, 5.0, 8.0, 9.0, 40.0])
     for name in ("chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
                  "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u",
                  "shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_w", "hermite_polynomial_h",
                  "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p")]


@pytest.mark.parametrize("dtype", [ddpc.float32, ddpc.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name, fn, first, second", BINARY_CASES, ids=[c[0] for c in BINARY_CASES])
def test_cuda_binary_matches_host(name, fn, first, second, dtype):
    # gammainc(250, 24) is exp(a log x - x - lgamma(a)) with terms near 1e3, whose ulps (2e-13) the two
    # devices' exp and lgamma round differently: 1e-12 in float64.
    rtol = 1e-5 if dtype is ddpc.float32 else 1e-12
    outs = []
    for device in ("cpu", "cuda"):
        a = ddpc.tensor(np.array(first)[:, None], dtype=dtype, device=device)
        b = ddpc.tensor(np.array(second)[None, :], dtype=dtype, device=device)
        outs.append(fn(a, b).cpu().numpy())
    np.testing.assert_allclose(outs[1], outs[0], rtol=rtol, atol=0, equal_nan=True, err_msg=name)


@pytest.mark.parametrize("fn", [special.gammainc, special.gammaincc, special.zeta],
                         ids=["gammainc", "gammaincc", "zeta"])
def test_cuda_binary_gradient_matches_host(fn):
    grads = []
    for device in ("cpu", "cuda"):
        a = ddpc.tensor([2.5, 7.0, 40.0], dtype=ddpc.float64, device=device)
        x = ddpc.tensor([1.7, 9.0, 38.0], dtype=ddpc.float64, device=device, requires_grad=True)
        fn(a, x).sum().backward()
        grads.append(x.grad.cpu().numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-13)

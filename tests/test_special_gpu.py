"""The special functions' CUDA kernels against the host loops (marked gpu):
the same formulas of kernels/special_functions.h and the same libm
functions, so outputs and gradients agree to a few units in the last place
over edge values and inside each domain."""

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

CASES = [
    ("tan", ddpc.tan, EDGE, [-1.3, -0.2, 0.4, 1.1]), ("asin", ddpc.asin, EDGE, UNIT), ("acos", ddpc.acos, EDGE, UNIT),
    ("acosh", ddpc.acosh, EDGE, [1.1, 2.0, 30.0]), ("atanh", ddpc.atanh, EDGE, UNIT),
    ("erfc", ddpc.erfc, EDGE, WIDE), ("erfinv", ddpc.erfinv, EDGE, UNIT), ("lgamma", ddpc.lgamma, EDGE, WIDE),
    ("digamma", ddpc.digamma, EDGE, WIDE), ("polygamma1", lambda t: ddpc.polygamma(1, t), EDGE, WIDE),
    ("polygamma4", lambda t: ddpc.polygamma(4, t), EDGE, WIDE), ("i0", ddpc.i0, EDGE, WIDE),
    ("i0e", special.i0e, EDGE, WIDE), ("i1", special.i1, EDGE, WIDE), ("i1e", special.i1e, EDGE, WIDE),
    ("erfcx", special.erfcx, EDGE, WIDE), ("ndtri", special.ndtri, PROBABILITIES, [0.01, 0.3, 0.99]),
    ("log_ndtr", special.log_ndtr, EDGE, WIDE),
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

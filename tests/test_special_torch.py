"""Optional: the trigonometric inverses, the error, gamma and Bessel
functions, their aliases and in-place forms, and ddpc.special against
PyTorch on the same inputs (skipped when torch is not installed): outputs
over edge values (zeros of both signs, +-1, infinities, NaN, tiny and large
numbers, the poles of lgamma and digamma), gradients inside each domain;
gammainc, gammaincc, zeta and the orthogonal polynomials over broadcast grids,
with the gradients PyTorch has and the errors where it has none.

The comparison runs in a child process that imports torch before ddpc (see
test_nn_torch.py) and fails there, printing what differs.
"""

import math
import sys

import pytest
from procs import run_torch_case


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matches_pytorch(dtype):
    out = run_torch_case(__file__, dtype)
    assert out.strip().endswith("ok"), out


INF, NAN = math.inf, math.nan
EDGE = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, -7.0, INF, -INF, NAN, 1e-30, -1e-30, 1e-5, -1e-5,
        0.999, -0.999, 1.5, -2.5, 12.5, 30.0, -30.0, 100.0, -100.5, 1e10, -1e10, 1e30, -1e30]
PROBABILITIES = [0.0, 1.0, 0.5, 1e-30, 1e-5, 0.3, 0.999, 1 - 1e-7, -0.1, 1.1, NAN, INF]

# name: (function of the library module and a tensor, its inputs, inputs for its gradient)
UNIT = [-0.9, -0.3, 0.2, 0.7]
WIDE = [-2.5, -0.7, 0.3, 1.7, 6.0]
POSITIVE = [0.05, 0.3, 1.7, 6.0, 40.0]
# (J, Y and Ai oscillate with a phase that no float carries past about 1e3: there both libraries give noise)
MODERATE = [v for v in EDGE if not 1e3 < abs(v) < INF]
CASES = {
    "tan": (lambda L, x: L.tan(x), EDGE, [-1.3, -0.2, 0.4, 1.1]),
    "asin": (lambda L, x: L.asin(x), EDGE, UNIT), "acos": (lambda L, x: L.acos(x), EDGE, UNIT),
    "atan": (lambda L, x: L.atan(x), EDGE, WIDE), "atanh": (lambda L, x: L.atanh(x), EDGE, UNIT),
    "acosh": (lambda L, x: L.acosh(x), EDGE, [1.1, 2.0, 30.0]),
    "arcsin": (lambda L, x: L.arcsin(x), EDGE, UNIT), "arccos": (lambda L, x: L.arccos(x), EDGE, UNIT),
    "arctan": (lambda L, x: L.arctan(x), EDGE, WIDE), "arcsinh": (lambda L, x: L.arcsinh(x), EDGE, WIDE),
    "arccosh": (lambda L, x: L.arccosh(x), EDGE, [1.1, 2.0]), "arctanh": (lambda L, x: L.arctanh(x), EDGE, UNIT),
    "arctan2": (lambda L, x: L.arctan2(x, x * 0.5 + 1), [0.5, -2.0, 3.0], WIDE),
    "erfc": (lambda L, x: L.erfc(x), EDGE, WIDE), "erfinv": (lambda L, x: L.erfinv(x), EDGE, UNIT),
    "lgamma": (lambda L, x: L.lgamma(x), EDGE, WIDE), "digamma": (lambda L, x: L.digamma(x), EDGE, WIDE),
    # (PyTorch's trigamma is finite at the negative integers, from sin(pi x) rounding off 0; ddpc's is inf)
    "polygamma1": (lambda L, x: L.polygamma(1, x), [v for v in EDGE if not (v < 0 and v.is_integer())], WIDE),
    "polygamma2": (lambda L, x: L.polygamma(2, x), EDGE, WIDE),
    "polygamma3": (lambda L, x: L.polygamma(3, x), EDGE, WIDE),
    "i0": (lambda L, x: L.i0(x), EDGE, WIDE),
    "i0e": (lambda L, x: L.special.i0e(x), EDGE, WIDE), "i1": (lambda L, x: L.special.i1(x), EDGE, WIDE),
    "i1e": (lambda L, x: L.special.i1e(x), EDGE, WIDE),
    "erfcx": (lambda L, x: L.special.erfcx(x), EDGE, WIDE),
    # (PyTorch's ndtr is (1 + erf(x / sqrt 2)) / 2, which loses the left tail that ddpc's erfc form keeps)
    "ndtr": (lambda L, x: L.special.ndtr(x), [v for v in EDGE if not v < -5], WIDE),
    "ndtri": (lambda L, x: L.special.ndtri(x), PROBABILITIES, [0.01, 0.3, 0.8, 0.99]),
    "log_ndtr": (lambda L, x: L.special.log_ndtr(x), EDGE, [-30.0, -2.5, -0.7, 0.3, 1.7, 6.0]),
    "entr": (lambda L, x: L.special.entr(x), EDGE, POSITIVE),
    "expit": (lambda L, x: L.special.expit(x), EDGE, WIDE),
    "logit": (lambda L, x: L.special.logit(x), PROBABILITIES, [0.01, 0.3, 0.8, 0.99]),
    "logit_eps": (lambda L, x: L.special.logit(x, eps=1e-3), PROBABILITIES, [0.01, 0.3, 0.8, 0.99]),
    "gammaln": (lambda L, x: L.special.gammaln(x), EDGE, WIDE),
    "psi": (lambda L, x: L.special.psi(x), EDGE, WIDE),
    "polygamma_special": (lambda L, x: L.special.polygamma(2, x), [0.3, 2.0, -1.5], WIDE),
    "multigammaln": (lambda L, x: L.special.multigammaln(x, 3), [1.01, 1.5, 3.0, 30.0, 1e10], [1.2, 2.0, 5.0]),
    "mvlgamma": (lambda L, x: L.mvlgamma(x, 2), [0.51, 1.5, 3.0], [1.2, 2.0, 5.0]),
    "xlog1py": (lambda L, x: L.special.xlog1py(x, x * x), EDGE, WIDE),
    "xlogy": (lambda L, x: L.special.xlogy(x, x * x), EDGE, WIDE),
    "sinc": (lambda L, x: L.special.sinc(x), EDGE, WIDE),
    "erf": (lambda L, x: L.special.erf(x), EDGE, WIDE),
    "exp2": (lambda L, x: L.special.exp2(x), EDGE, WIDE),
    "expm1": (lambda L, x: L.special.expm1(x), EDGE, WIDE),
    "log1p": (lambda L, x: L.special.log1p(x), EDGE, POSITIVE),
    "special_erfinv": (lambda L, x: L.special.erfinv(x), EDGE, UNIT),
    "special_erfc": (lambda L, x: L.special.erfc(x), EDGE, WIDE),
    "special_i0": (lambda L, x: L.special.i0(x), EDGE, WIDE),
    "logsumexp": (lambda L, x: L.special.logsumexp(x.reshape(1, -1), 1), [0.3, -2.0, 5.0], WIDE),
    "softmax": (lambda L, x: L.special.softmax(x, 0), [0.3, -2.0, 5.0], WIDE),
    "log_softmax": (lambda L, x: L.special.log_softmax(x, 0), [0.3, -2.0, 5.0], WIDE),
    "round": (lambda L, x: L.special.round(x), [0.5, 1.5, -2.5, 0.2], None),
    "bessel_j0": (lambda L, x: L.special.bessel_j0(x), MODERATE, WIDE),
    "bessel_j1": (lambda L, x: L.special.bessel_j1(x), MODERATE, WIDE + [0.0]),
    "bessel_y0": (lambda L, x: L.special.bessel_y0(x), MODERATE, POSITIVE),
    "bessel_y1": (lambda L, x: L.special.bessel_y1(x), MODERATE, POSITIVE),
    "modified_bessel_i0": (lambda L, x: L.special.modified_bessel_i0(x), EDGE, WIDE),
    "modified_bessel_i1": (lambda L, x: L.special.modified_bessel_i1(x), EDGE, WIDE),
    "modified_bessel_k0": (lambda L, x: L.special.modified_bessel_k0(x), EDGE, POSITIVE),
    "modified_bessel_k1": (lambda L, x: L.special.modified_bessel_k1(x), EDGE, POSITIVE),
    "scaled_modified_bessel_k0": (lambda L, x: L.special.scaled_modified_bessel_k0(x), EDGE, None),
    "scaled_modified_bessel_k1": (lambda L, x: L.special.scaled_modified_bessel_k1(x), EDGE, None),
    "spherical_bessel_j0": (lambda L, x: L.special.spherical_bessel_j0(x), EDGE, None),
    "airy_ai": (lambda L, x: L.special.airy_ai(x), MODERATE + [-2.09, 2.09, 8.4, 104.0], None),
}

INPLACE = ["tan", "asin", "acos", "atan", "acosh", "atanh", "asinh", "sinh", "cosh", "erfc", "erfinv", "lgamma",
           "digamma", "i0", "exp2", "log2", "log10", "frac", "sgn", "logit", "arcsin", "arccos", "arctan", "arcsinh",
           "arccosh", "arctanh"]
BINARY_INPLACE = ["hypot", "atan2", "arctan2", "xlogy"]


# PyTorch's trigamma (polygamma(1, x), also digamma's gradient) is good to about 1e-9 only
TRIGAMMA = {"polygamma1", "digamma gradient", "psi gradient", "polygamma_1"}
# PyTorch's J0, J1, Y0, Y1 and Ai leave out the leading 1 of Cephes' denominators (ddpc's have it, as Cephes and
# SciPy): they lose up to 1e-6 of the function's scale near x = 5 (and x = -2.09 for Ai), and so do the gradients
# made of them. PyTorch's asymptotic series of the incomplete gamma function takes pi in float (1e-8).
CEPHES = {"bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "airy_ai", "gammainc", "gammaincc"}


def _close(name, what, got, want, f32):
    import numpy as np

    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    # float32 results: PyTorch computes special functions in float arithmetic (some within a few
    # hundred ulp near their zeros), ddpc in double rounded once
    rtol, atol = (2e-5, 1e-6) if f32 else (1e-12, 1e-300)
    if not f32 and (name in TRIGAMMA or f"{name} {what}" in TRIGAMMA):
        rtol = 1e-8
    if name in CEPHES:
        rtol, atol = max(rtol, 1e-6), max(atol, 1e-6)
    if name in POLYNOMIALS:  # near a root the last bits of the recurrence's cancellation are all that is left
        atol = max(atol, 1e-13)
    same = np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True) | (got == want)
    assert same.all(), f"{name} {what}: ddpc {got[~same]} where PyTorch has {want[~same]}"


def main(dtype):
    import numpy as np
    import torch

    import ddpc

    f32 = dtype == "float32"
    for name, (fn, values, grad_at) in CASES.items():
        x = np.array(values, dtype=dtype)
        got, want = fn(ddpc, ddpc.tensor(x)), fn(torch, torch.tensor(x))
        assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1], f"{name}: {got.dtype}, {want.dtype}"
        _close(name, "output", got.numpy(), want.numpy(), f32)
        if grad_at is None:
            continue
        x = np.array(grad_at, dtype=dtype)
        grads = []
        for lib in (ddpc, torch):
            t = lib.tensor(x, requires_grad=True)
            out = fn(lib, t)
            out.backward(lib.tensor(np.linspace(0.5, 1.5, out.numel()).reshape(tuple(out.shape)).astype(dtype)))
            grads.append(t.grad.numpy())
        _close(name, "gradient", *grads, f32)

    # integers compute in float32, as PyTorch's default dtype
    ints = np.array([0, 1, 2, -1, 5], dtype=np.int64)
    for name in ("tan", "asin", "acos", "acosh", "atanh", "erfc", "erfinv", "lgamma", "digamma", "i0"):
        got, want = getattr(ddpc, name)(ddpc.tensor(ints)), getattr(torch, name)(torch.tensor(ints))
        assert want.dtype == torch.float32 and got.dtype is ddpc.float32, name
        _close(name, "integer input", got.numpy(), want.numpy(), True)

    # the in-place methods and, where PyTorch has them, the module-level in-place functions
    x = np.array([0.2, 0.45, 0.7, -0.3], dtype=dtype)
    for name in INPLACE:
        v = x + 1.5 if name in ("acosh", "arccosh") else x
        a, b = ddpc.tensor(v), torch.tensor(v)
        getattr(a, name + "_")()
        getattr(b, name + "_")()
        _close(name + "_", "in place", a.numpy(), b.numpy(), f32)
        assert hasattr(ddpc, name + "_") == hasattr(torch, name + "_"), f"{name}_: module-level form"
        if hasattr(torch, name + "_"):
            a, b = ddpc.tensor(v), torch.tensor(v)
            getattr(ddpc, name + "_")(a)
            getattr(torch, name + "_")(b)
            _close(name + "_", "module-level in place", a.numpy(), b.numpy(), f32)
    y = np.array([1.5, 0.25, 4.0, 2.0], dtype=dtype)
    for name in BINARY_INPLACE:
        a, b = ddpc.tensor(x), torch.tensor(x)
        getattr(a, name + "_")(ddpc.tensor(y))
        getattr(b, name + "_")(torch.tensor(y))
        _close(name + "_", "in place", a.numpy(), b.numpy(), f32)
    for n in (1, 3):
        a, b = ddpc.tensor(x), torch.tensor(x)
        a.polygamma_(n)
        b.polygamma_(n)
        _close(f"polygamma_{n}", "in place", a.numpy(), b.numpy(), f32)
    a, b = ddpc.tensor(x + 2), torch.tensor(x + 2)
    a.mvlgamma_(3)
    b.mvlgamma_(3)
    _close("mvlgamma_", "in place", a.numpy(), b.numpy(), f32)

    _two_argument_functions(np, torch, ddpc, dtype)

    # 16-bit floats keep their dtype
    h = np.array([0.1, 0.5, 2.0], dtype=np.float32)
    for name in ("tan", "erfinv", "lgamma", "digamma", "i0"):
        got = getattr(ddpc, name)(ddpc.tensor(h).to(dtype=ddpc.bfloat16)).float().numpy()
        want = getattr(torch, name)(torch.tensor(h).to(torch.bfloat16)).float().numpy()
        np.testing.assert_allclose(got, want, rtol=1e-2, err_msg=f"{name} bfloat16")
    print("ok")


POLYNOMIALS = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
               "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
               "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he",
               "laguerre_polynomial_l", "legendre_polynomial_p"]


def _two_argument_functions(np, torch, ddpc, dtype):
    """gammainc, gammaincc, zeta and the polynomials: values over broadcast grids, the gradients that exist and
    the errors of those that do not, the torch-level igamma and igammac and the Tensor methods."""
    f32 = dtype == "float32"

    def pair(lib, a, b, grad=False):
        return (lib.tensor(np.array(a, dtype=dtype)[:, None], requires_grad=grad),
                lib.tensor(np.array(b, dtype=dtype)[None, :], requires_grad=grad))

    shapes = [0.0, 1e-3, 0.5, 1.0, 2.5, 7.0, 25.0, 40.0, 300.0, INF, -1.0, NAN]
    points = [0.0, 0.3, 1.0, 1.2, 2.4, 9.0, 24.0, 45.0, 290.0, INF, -1.0, NAN]
    for name in ("gammainc", "gammaincc"):
        got, want = (getattr(L.special, name)(*pair(L, shapes, points)) for L in (ddpc, torch))
        _close(name, "output", got.numpy(), want.numpy(), f32)
        got, want = (getattr(L, name.replace("gammainc", "igamma"))(*pair(L, shapes, points)) for L in (ddpc, torch))
        _close(name, "torch-level", got.numpy(), want.numpy(), f32)
        grads = []
        for L in (ddpc, torch):
            a, x = pair(L, [0.5, 2.5, 40.0], [0.3, 2.4, 45.0])
            x.requires_grad_(True)
            getattr(L.special, name)(a, x).sum().backward()
            grads.append(x.grad.numpy())
            a.requires_grad_(True)
            try:
                getattr(L.special, name)(a, x).sum().backward()
                raise AssertionError(f"{name}: {L.__name__} differentiated it in the first argument")
            except NotImplementedError:
                pass
            for bad in ((a, 2.0), (2.0, x)):
                try:
                    getattr(L.special, name)(*bad)
                    raise AssertionError(f"{name}: {L.__name__} took a number")
                except TypeError:
                    pass
        _close(name, "gradient", *grads, f32)
        t, u = (L.tensor(np.array([0.5, 2.0, 3.0], dtype=dtype)) for L in (ddpc, torch))
        y, z = (L.tensor(np.array([1.0, 1.0, 5.0], dtype=dtype)) for L in (ddpc, torch))
        method = name.replace("gammainc", "igamma") + "_"
        getattr(t, method)(y)
        getattr(u, method)(z)
        _close(name, "in place", t.numpy(), u.numpy(), f32)

    s_values = [1.0, 1.5, 2.0, 3.0, 7.5, 0.5, INF, NAN]
    q_values = [1.0, 0.5, 2.0, 20.0, 0.0, -0.5, -2.0, -INF, NAN]
    got, want = (L.special.zeta(*pair(L, s_values, q_values)) for L in (ddpc, torch))
    _close("zeta", "output", got.numpy(), want.numpy(), f32)
    for L in (ddpc, torch):  # a number on either side, integers to float32
        assert str(L.special.zeta(L.tensor([2, 3]), 2).dtype).endswith("float32"), L.__name__
        assert str(L.special.zeta(2.0, L.tensor([1.5], dtype=getattr(L, dtype))).dtype).endswith(dtype), L.__name__
    grads = []
    for L in (ddpc, torch):
        s, q = pair(L, [2.5, 3.0], [0.4, 1.3, 6.0])
        q.requires_grad_(True)
        L.special.zeta(s, q).sum().backward()
        grads.append(q.grad.numpy())
        s.requires_grad_(True)
        try:
            L.special.zeta(s, q).sum().backward()
            raise AssertionError(f"zeta: {L.__name__} differentiated it in s")
        except NotImplementedError:
            pass
    _close("zeta", "gradient", *grads, f32)

    xs, degrees = [-1.2, -1.0, -0.5, 0.0, 0.3, 0.5, 1.0, 2.5], [-1.0, 0.0, 1.0, 2.0, 5.0, 7.0, 9.0, 12.0, 30.0]
    for name in POLYNOMIALS:
        got, want = (getattr(L.special, name)(*pair(L, xs, degrees, grad=True)) for L in (ddpc, torch))
        assert got.requires_grad == want.requires_grad, name
        # (PyTorch's float32 recurrences run in float, ddpc's in double)
        _close(name, "output", got.detach().numpy(), want.detach().numpy(), f32)
        for n in (3, 3.7):
            got, want = (getattr(L.special, name)(L.tensor(np.array(xs, dtype=dtype)), n) for L in (ddpc, torch))
            _close(name, "number degree", got.numpy(), want.numpy(), f32)
        got, want = (getattr(L.special, name)(L.tensor([0, 1, 2]), L.tensor([2, 3, 4])) for L in (ddpc, torch))
        assert str(got.dtype).endswith("float32") and str(want.dtype).endswith("float32"), name
        _close(name, "integers", got.numpy(), want.numpy(), True)


if __name__ == "__main__":
    main(sys.argv[1])

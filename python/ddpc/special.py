"""ddpc.special: PyTorch's torch.special functions that ddpc computes.

The special functions themselves (erfc, erfcx, erfinv, ndtri, lgamma,
digamma, polygamma, i0, i0e, i1, i1e and the Bessel and Airy functions) are
unary C ops (csrc/ops_nn.c, their formulas in kernels/special_functions.h and
kernels/bessel.h, shared with the CUDA kernels) whose gradients are recorded
ops, so derivatives of any order exist; those of two arguments (gammainc,
gammaincc, zeta and the orthogonal polynomials) are one broadcasting C op
(kernels/special_binary.h). The rest are composed of those and of ddpc's
other differentiable ops. Integer tensors compute in float32; float16 and
bfloat16 in float32, rounded once (where PyTorch has no half-precision
kernel, as for zeta, the Bessel functions and the polynomials, ddpc still
computes them).
"""

import math

from . import _C, _pointwise
from . import autograd as _ag
from ._dtype import float64
from .tensor import Tensor

# The op codes of kernels/special_binary.h.
(_GAMMAINC, _GAMMAINCC, _ZETA, _CHEBYSHEV_T, _CHEBYSHEV_U, _CHEBYSHEV_V, _CHEBYSHEV_W, _SHIFTED_CHEBYSHEV_T,
 _SHIFTED_CHEBYSHEV_U, _SHIFTED_CHEBYSHEV_V, _SHIFTED_CHEBYSHEV_W, _HERMITE_H, _HERMITE_HE, _LAGUERRE_L,
 _LEGENDRE_P) = range(15)

erf = _ag.erf
erfc = _ag.erfc
erfcx = _ag.erfcx
erfinv = _ag.erfinv
expit = _ag.sigmoid
exp2 = _ag.exp2
expm1 = _ag.expm1
log1p = _ag.log1p
gammaln = _ag.lgamma
digamma = psi = _ag.digamma
polygamma = _ag.polygamma
multigammaln = _ag.mvlgamma
i0 = _ag.i0
i0e = _ag.i0e
i1 = _ag.i1
i1e = _ag.i1e
modified_bessel_i0 = _ag.i0
modified_bessel_i1 = _ag.i1
bessel_j0 = _ag.bessel_j0
bessel_j1 = _ag.bessel_j1
bessel_y0 = _ag.bessel_y0
bessel_y1 = _ag.bessel_y1
modified_bessel_k0 = _ag.modified_bessel_k0
modified_bessel_k1 = _ag.modified_bessel_k1
scaled_modified_bessel_k0 = _ag.scaled_modified_bessel_k0
scaled_modified_bessel_k1 = _ag.scaled_modified_bessel_k1
spherical_bessel_j0 = _ag.spherical_bessel_j0
airy_ai = _ag.airy_ai
ndtri = _ag.ndtri
logit = _pointwise.logit
sinc = _pointwise.sinc
xlogy = _pointwise.xlogy
xlog1py = _pointwise.xlog1py
logsumexp = _ag.logsumexp


def round(input, decimals=0):
    """torch.special.round: ddpc.round."""
    return _ag.round(input, decimals)


def softmax(input, dim, *, dtype=None):
    """exp(x) / sum(exp(x)) along dim (computed in ``dtype`` when given)."""
    return _ag.softmax(input if dtype is None else input.to(dtype=dtype), dim)


def log_softmax(input, dim, *, dtype=None):
    """x - log(sum(exp(x))) along dim (computed in ``dtype`` when given)."""
    return _ag.log_softmax(input if dtype is None else input.to(dtype=dtype), dim)


def ndtr(input):
    """The standard normal distribution function: erfc(-x / sqrt 2) / 2,
    accurate in both tails (no cancellation against 1 for negative x).
    Narrower floats are computed in float64 and rounded once: rounding
    -x / sqrt 2 to float32 alone cost up to about 170 ulps in the left tail."""
    x = _ag._as_float(_checked(input, "ndtr"))
    if x.dtype is not float64:
        return ndtr(x.double()).to(dtype=x.dtype)
    return _ag.mul(_ag.erfc(_ag.mul(x, -math.sqrt(0.5))), 0.5)


def log_ndtr(input):
    """log(ndtr(x)), finite far into the left tail: below -1 it is
    log(erfcx(-x / sqrt 2) / 2) - x^2 / 2, elsewhere log1p(-erfc(x / sqrt 2) / 2).
    Each branch sees its own side of -1 only, so that the other's infinities
    reach neither the value nor the gradient."""
    x = _ag._as_float(_checked(input, "log_ndtr"))
    if x.dtype in _ag._HALVES:
        return log_ndtr(x.float()).to(dtype=x.dtype)
    left = _ag.minimum(x, -1.0)
    right = _ag.maximum(x, -1.0)
    tail = _ag.sub(_ag.log(_ag.mul(_ag.erfcx(_ag.mul(left, -math.sqrt(0.5))), 0.5)), _ag.mul(_ag.square(left), 0.5))
    body = _ag.log1p(_ag.mul(_ag.erfc(_ag.mul(right, math.sqrt(0.5))), -0.5))
    return _ag.where(x.detach() < -1, tail, body)


def entr(input):
    """-x log(x) for x > 0, 0 at 0 and -inf below (NaN stays NaN), as
    PyTorch's. Its gradient is -(log(x) + 1) for x > 0 and 0 elsewhere, where
    PyTorch's is inf at 0 and NaN below."""
    x = _ag._as_float(_checked(input, "entr"))
    d = x.detach()
    out = _ag.where(d < 0, -math.inf, _ag.neg(_pointwise.xlogy(x, x)))
    return _ag.where(_ag.isnan(d), math.nan, out)


def _special_binary(op, a, b):
    """op(a, b) by the C op of kernels/special_binary.h: a and b float tensors
    of one dtype (16-bit floats through float32, rounded once), broadcast.
    The result records no gradient."""
    if a.dtype in _ag._HALVES:
        return _special_binary(op, a.float(), b.float()).to(dtype=a.dtype)
    out = _ag._empty(_ag._broadcast_shape(a.shape, b.shape), a, a.dtype)
    _C.special_binary(op, out._buf, a.detach()._buf, b.detach()._buf)
    return out


class _SecondArgumentBackward(_ag.Node):
    """The gradient of a special function of two arguments with respect to the
    second, ``derivative(first, second)`` in recorded ops (so derivatives of any
    order exist); with respect to the first, as in PyTorch, there is none, and
    a backward pass that asks for it raises NotImplementedError."""

    double_backward = True

    def __init__(self, a, x, derivative, name, first):
        # x itself is for a create_graph pass, which needs it in the graph.
        super().__init__((a, x), (a.detach(), x.detach(), x))
        self.derivative, self._name, self.first = derivative, name, first
        self.shape, self.dtype = x.shape, x.dtype

    def name(self):
        return self._name

    def backward(self, g):
        if self.input_wanted(0):
            raise NotImplementedError(f"the derivative for '{self.first}' is not implemented.")
        a, x = self.saved[0], self.saved[2] if _ag._mode.enabled else self.saved[1]
        return None, _ag._reduce_to(_ag.mul(g, self.derivative(a, x)), self.shape, self.dtype)


def _gamma_density(a, x):
    """x^(a-1) e^-x / Gamma(a), P(a, x)'s derivative in x, by PyTorch's formula."""
    return _ag.exp(_ag.sub(_ag.sub(_ag.mul(_ag.log(x), _ag.sub(a, 1.0)), x), _ag.lgamma(a)))


def _incomplete_gamma(input, other, upper):
    what = "igammac" if upper else "igamma"
    if not isinstance(input, Tensor) or not isinstance(other, Tensor):
        bad = other if isinstance(input, Tensor) else input
        raise TypeError(f"{what}: expected ddpc.Tensor arguments, got {type(bad).__name__}")
    if not (input.dtype.is_floating_point or other.dtype.is_floating_point):
        raise NotImplementedError(f"{what}: not implemented for integer tensors ({input.dtype} and {other.dtype}), "
                                  "as in PyTorch")
    a, x = _pointwise._float_pair(input, other, what)
    out = _special_binary(_GAMMAINCC if upper else _GAMMAINC, a, x)
    if _ag._needs_grad(a, x):
        derivative = (lambda s, t: _ag.neg(_gamma_density(s, t))) if upper else _gamma_density
        _ag._attach(out, _SecondArgumentBackward(a, x, derivative, "IgammacBackward" if upper else "IgammaBackward",
                                                 what + ": input"))
    return out


def gammainc(input, other):
    """The regularized lower incomplete gamma function
    P(a, x) = 1 / Gamma(a) * integral_0^x t^(a-1) e^-t dt, a = input, x = other
    (both tensors, broadcast; PyTorch's igamma). Cephes' and SciPy's algorithm,
    with their edge values: NaN for a < 0 or x < 0, P(0, x) = 1 for x > 0.
    Differentiable in x (x^(a-1) e^-x / Gamma(a)); a backward pass that needs
    the gradient with respect to a raises NotImplementedError, as PyTorch's."""
    return _incomplete_gamma(input, other, False)


def gammaincc(input, other):
    """The regularized upper incomplete gamma function Q(a, x) = 1 - P(a, x),
    accurate where P is near 1 (PyTorch's igammac); arguments, edge values and
    gradients as gammainc's (the gradient in x is negated)."""
    return _incomplete_gamma(input, other, True)


def zeta(input, other):
    """The Hurwitz zeta function sum_k>=0 (q + k)^-s, s = input, q = other
    (tensors or numbers, broadcast; integers give float32), with PyTorch's edge
    values: inf at s = 1 and at q = 0 or a negative integer, NaN for s < 1 and
    for q < 0 with s not a whole number, NaN at q = inf. Differentiable in q
    (-s zeta(s + 1, q)); a backward pass that needs the gradient with respect
    to s raises NotImplementedError, as PyTorch's."""
    s, q = _pointwise._float_pair(input, other, "zeta")
    out = _special_binary(_ZETA, s, q)
    if _ag._needs_grad(s, q):
        _ag._attach(out, _SecondArgumentBackward(s, q, lambda a, x: _ag.mul(zeta(_ag.add(a, 1.0), x), _ag.neg(a)),
                                                 "SpecialZetaBackward", "zeta"))
    return out


def _polynomial(op, what, doc):
    def polynomial(input, n):
        x, degree = _pointwise._float_pair(input, n, what)
        return _special_binary(op, x, degree)

    polynomial.__name__ = polynomial.__qualname__ = what
    polynomial.__doc__ = doc + """ The degree n is a tensor or a number,
    broadcast against x (integers give float32); it is truncated to a whole
    number, and a negative one gives 0. By the three-term recurrence, as
    PyTorch evaluates it (in double, rounded once for float32); not
    differentiable: as PyTorch's, the result does not require grad."""
    return polynomial


chebyshev_polynomial_t = _polynomial(_CHEBYSHEV_T, "chebyshev_polynomial_t",
                                     "The Chebyshev polynomial of the first kind T_n(x).")
chebyshev_polynomial_u = _polynomial(_CHEBYSHEV_U, "chebyshev_polynomial_u",
                                     "The Chebyshev polynomial of the second kind U_n(x).")
chebyshev_polynomial_v = _polynomial(_CHEBYSHEV_V, "chebyshev_polynomial_v",
                                     "The Chebyshev polynomial of the third kind V_n(x).")
chebyshev_polynomial_w = _polynomial(_CHEBYSHEV_W, "chebyshev_polynomial_w",
                                     "The Chebyshev polynomial of the fourth kind W_n(x).")
shifted_chebyshev_polynomial_t = _polynomial(_SHIFTED_CHEBYSHEV_T, "shifted_chebyshev_polynomial_t",
                                             "The shifted Chebyshev polynomial of the first kind T_n(2x - 1).")
shifted_chebyshev_polynomial_u = _polynomial(_SHIFTED_CHEBYSHEV_U, "shifted_chebyshev_polynomial_u",
                                             "The shifted Chebyshev polynomial of the second kind U_n(2x - 1).")
shifted_chebyshev_polynomial_v = _polynomial(_SHIFTED_CHEBYSHEV_V, "shifted_chebyshev_polynomial_v",
                                             "The shifted Chebyshev polynomial of the third kind V_n(2x - 1).")
shifted_chebyshev_polynomial_w = _polynomial(_SHIFTED_CHEBYSHEV_W, "shifted_chebyshev_polynomial_w",
                                             "The shifted Chebyshev polynomial of the fourth kind W_n(2x - 1).")
hermite_polynomial_h = _polynomial(_HERMITE_H, "hermite_polynomial_h",
                                   "The physicists' Hermite polynomial H_n(x) (NaN past degree 512, 128 for "
                                   "float32, as PyTorch's).")
hermite_polynomial_he = _polynomial(_HERMITE_HE, "hermite_polynomial_he",
                                    "The probabilists' Hermite polynomial He_n(x) (NaN past degree 512, 128 for "
                                    "float32, as PyTorch's).")
laguerre_polynomial_l = _polynomial(_LAGUERRE_L, "laguerre_polynomial_l", "The Laguerre polynomial L_n(x).")
legendre_polynomial_p = _polynomial(_LEGENDRE_P, "legendre_polynomial_p", "The Legendre polynomial P_n(x).")


def _checked(input, what):
    if not isinstance(input, Tensor):
        raise TypeError(f"{what}: expected a ddpc.Tensor, got {type(input).__name__}")
    return input


__all__ = ["airy_ai", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "chebyshev_polynomial_t",
           "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w", "digamma", "entr", "erf",
           "erfc", "erfcx", "erfinv", "exp2", "expit", "expm1", "gammainc", "gammaincc", "gammaln",
           "hermite_polynomial_h", "hermite_polynomial_he", "i0", "i0e", "i1", "i1e", "laguerre_polynomial_l",
           "legendre_polynomial_p", "log1p", "log_ndtr", "log_softmax", "logit", "logsumexp", "modified_bessel_i0",
           "modified_bessel_i1", "modified_bessel_k0", "modified_bessel_k1", "multigammaln", "ndtr", "ndtri",
           "polygamma", "psi", "round", "scaled_modified_bessel_k0", "scaled_modified_bessel_k1",
           "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
           "shifted_chebyshev_polynomial_w", "sinc", "softmax", "spherical_bessel_j0", "xlog1py", "xlogy", "zeta"]

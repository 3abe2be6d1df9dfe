"""ddpc.special: PyTorch's torch.special functions that ddpc computes.

The special functions themselves (erfc, erfcx, erfinv, ndtri, lgamma,
digamma, polygamma, i0, i0e, i1, i1e) are unary C ops (csrc/ops_nn.c, their
formulas in kernels/special_functions.h, shared with the CUDA kernels) whose
gradients are recorded ops, so derivatives of any order exist; the rest are
composed of those and of ddpc's other differentiable ops. Integer tensors
compute in float32; float16 and bfloat16 in float32, rounded once.
"""

import math

from . import _pointwise
from . import autograd as _ag
from .tensor import Tensor

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
    accurate in both tails (no cancellation against 1 for negative x)."""
    return _ag.mul(_ag.erfc(_ag.mul(_ag._as_float(_checked(input, "ndtr")), -math.sqrt(0.5))), 0.5)


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


def _checked(input, what):
    if not isinstance(input, Tensor):
        raise TypeError(f"{what}: expected a ddpc.Tensor, got {type(input).__name__}")
    return input


__all__ = ["digamma", "entr", "erf", "erfc", "erfcx", "erfinv", "exp2", "expit", "expm1", "gammaln", "i0", "i0e", "i1",
           "i1e", "log1p", "log_ndtr", "log_softmax", "logit", "logsumexp", "multigammaln", "ndtr", "ndtri",
           "polygamma", "psi", "round", "sinc", "softmax", "xlog1py", "xlogy"]

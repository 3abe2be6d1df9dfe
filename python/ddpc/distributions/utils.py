"""Helpers shared by the distributions: parameter broadcasting, draws from
ddpc's generator, the probability/logit conversions, a lazily computed and
cached attribute, the storage of a probs-or-logits parameter, and the
packing of a matrix's lower triangle into a vector and back."""

import math
import numbers

from .. import autograd as _ag
from .._dtype import finfo
from .._layout import tril_indices
from ..tensor import Tensor, broadcast_tensors, get_default_dtype, rand, randn, tensor, zeros

euler_gamma = 0.57721566490153286060


def broadcast_all(*values):
    """Broadcasts numbers and tensors to one shape; numbers become tensors of
    the first tensor's dtype and device (the default dtype when all are numbers)."""
    ref = next((v for v in values if isinstance(v, Tensor)), None)
    for v in values:
        if not isinstance(v, (Tensor, numbers.Number)):
            raise ValueError(f"Input arguments must all be instances of numbers.Number or Tensor, got "
                             f"{type(v).__name__}")
    dtype = ref.dtype if ref is not None and ref.dtype.is_floating_point else get_default_dtype()
    device = ref.device if ref is not None else None
    tensors = [v if isinstance(v, Tensor) else tensor(float(v), dtype=dtype, device=device) for v in values]
    return broadcast_tensors(*tensors)


def as_parameter(value, like):
    """A number becomes a 0-d tensor of like's dtype (when floating) and
    device; a tensor stays."""
    if isinstance(value, Tensor):
        return value
    return tensor(float(value), dtype=like.dtype if like.dtype.is_floating_point else get_default_dtype(),
                  device=like.device)


def standard_normal(shape, like):
    """Draws of N(0, 1) of ``shape`` with like's dtype and device, from ddpc's generator."""
    return randn(tuple(shape), dtype=like.dtype, device=like.device)


def standard_uniform(shape, like):
    """Draws from [0, 1) of ``shape`` with like's dtype and device, from ddpc's generator."""
    return rand(tuple(shape), dtype=like.dtype, device=like.device)


def clamp_probs(probs):
    """Keeps probabilities inside [eps, 1 - eps] of their dtype, away from the
    0 and 1 whose logits are infinite."""
    eps = finfo(probs.dtype).eps
    return _ag.clamp(probs, eps, 1 - eps)


def logits_to_probs(logits, is_binary=False):
    """Probabilities from logits: sigmoid for one binary event, softmax over the
    last dim for a categorical one."""
    return _ag.sigmoid(logits) if is_binary else _ag.softmax(logits, -1)


def probs_to_logits(probs, is_binary=False):
    """Logits from probabilities (clamped away from 0 and 1): log-odds for a
    binary event, log-probabilities for a categorical one."""
    clamped = clamp_probs(probs)
    if is_binary:
        return _ag.sub(_ag.log(clamped), _ag.log1p(_ag.neg(clamped)))
    return _ag.log(clamped)


def sum_rightmost(value, dim):
    """Sums value over its ``dim`` rightmost dimensions."""
    if dim == 0:
        return value
    return value.reshape(value.shape[:value.ndim - dim] + (-1,)).sum(-1)


def finite_min(dtype):
    """The most negative finite number of dtype: stands for log(0) where -inf would give NaN."""
    return finfo(dtype).min


class lazy_property:
    """A property computed on first access and then stored on the instance
    (gradients recorded), as the logits of a distribution given probs."""

    def __init__(self, wrapped):
        self.wrapped = wrapped
        self.__doc__ = wrapped.__doc__
        self.__name__ = wrapped.__name__

    def __get__(self, instance, obj_type=None):
        if instance is None:
            return self
        with _ag.enable_grad():
            value = self.wrapped(instance)
        setattr(instance, self.wrapped.__name__, value)
        return value


def one_of_probs_logits(probs, logits):
    """The one parameter given of probs and logits (exactly one must be)."""
    if (probs is None) == (logits is None):
        raise ValueError("Either `probs` or `logits` must be specified, but not both.")
    return probs if probs is not None else logits


class ProbsOrLogits:
    """For the families parameterized by probs or by logits: ``_param`` is the
    one stored (probs where both are), for its shape, dtype and device."""

    @property
    def _param(self):
        return self.__dict__["probs"] if "probs" in self.__dict__ else self.__dict__["logits"]

    @property
    def param_shape(self):
        return self._param.shape


class BinaryProbsOrLogits(ProbsOrLogits):
    """For the families of one binary event given by probs or by logits (the
    log-odds): the other is computed on first use."""

    def _set_probs_or_logits(self, probs, logits):
        """Stores the one given of probs and logits as a tensor and returns it."""
        one_of_probs_logits(probs, logits)
        if probs is not None:
            (self.probs,) = broadcast_all(probs)
        else:
            (self.logits,) = broadcast_all(logits)
        return self._param

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits, is_binary=True)


def tril_matrix_to_vec(mat, diag=0):
    """The entries of the lower triangle of each D x D matrix (on and below
    diagonal ``diag``) as a vector, in row order."""
    n = mat.shape[-1]
    if not -n <= diag < n:
        raise ValueError(f"diag ({diag}) provided is outside [{-n}, {n - 1}].")
    rows, cols = tril_indices(n, n, diag, device=mat.device)
    return mat[..., rows, cols]


def vec_to_tril_matrix(vec, diag=0):
    """The D x D lower-triangular matrices (zero above diagonal ``diag``)
    whose lower triangles, in row order, are the vectors along vec's last dim."""
    # The positive root of D^2 + (1 + 2 diag) D - |diag| (diag + 1) - 2 len(vec) = 0.
    b = 1 + 2 * diag
    n = (-b + math.sqrt(b * b + 8 * vec.shape[-1] + 4 * abs(diag) * (diag + 1))) / 2
    if round(n) - n > finfo(vec.dtype).eps:
        raise ValueError(f"The size of last dimension is {vec.shape[-1]} which cannot be expressed as the lower "
                         "triangular part of a square D x D matrix.")
    n = round(n)
    mat = zeros(tuple(vec.shape[:-1]) + (n, n), dtype=vec.dtype, device=vec.device)
    rows, cols = tril_indices(n, n, diag, device=vec.device)
    mat[..., rows, cols] = vec
    return mat

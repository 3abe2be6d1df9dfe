"""Binomial distribution: successes in ``total_count`` trials of probability
``probs`` (or sigmoid(``logits``))."""

from .. import autograd as _ag
from .._random import binomial
from ..tensor import arange
from . import constraints
from .distribution import Distribution
from .utils import BinaryProbsOrLogits, broadcast_all, one_of_probs_logits

__all__ = ["Binomial"]


def clamp_by_zero(x):
    """max(x, 0), with gradient 1/2 at 0 (as PyTorch's)."""
    return (_ag.clamp(x, 0, None) + x - _ag.clamp(x, None, 0)) / 2


def same_count(total_count, what):
    """The one total count of a batch, for the functions that enumerate 0..n."""
    count = int(_ag.amax(total_count).item())
    if not _ag.amin(total_count).item() == count:
        raise NotImplementedError(f"Inhomogeneous total count not supported by `{what}`.")
    return count


class Binomial(BinaryProbsOrLogits, Distribution):
    """Counts in {0, ..., total_count}; total_count (a non-negative integer,
    as a number or a tensor) broadcasts with probs or logits (one of them)."""

    arg_constraints = {"total_count": constraints.nonnegative_integer, "probs": constraints.unit_interval,
                       "logits": constraints.real}
    has_enumerate_support = True

    def __init__(self, total_count=1, probs=None, logits=None, validate_args=None):
        one_of_probs_logits(probs, logits)
        if probs is not None:
            self.total_count, self.probs = broadcast_all(total_count, probs)
        else:
            self.total_count, self.logits = broadcast_all(total_count, logits)
        self.total_count = self.total_count.to(dtype=self._param.dtype)
        super().__init__(self._param.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_parameters(Binomial, batch_shape, _instance, ("total_count", "probs", "logits"))

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.integer_interval(0, self.total_count)

    @property
    def mean(self):
        return self.total_count * self.probs

    @property
    def mode(self):
        return _ag.minimum(_ag.floor((self.total_count + 1) * self.probs), self.total_count)

    @property
    def variance(self):
        return self.total_count * self.probs * (1 - self.probs)

    def sample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        with _ag.no_grad():
            return binomial(self.total_count.expand(shape), self.probs.expand(shape))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        log_factorial_n = _ag.lgamma(self.total_count + 1)
        log_factorial_k = _ag.lgamma(value + 1)
        log_factorial_nmk = _ag.lgamma(self.total_count - value + 1)
        # n log(1 + e^logits) without overflow: n (max(logits, 0) + log1p(e^-|logits|)).
        normalize_term = (self.total_count * clamp_by_zero(self.logits)
                          + self.total_count * _ag.log1p(_ag.exp(-_ag.abs(self.logits))) - log_factorial_n)
        return value * self.logits - log_factorial_k - log_factorial_nmk - normalize_term

    def entropy(self):
        same_count(self.total_count, "entropy")
        log_prob = self.log_prob(self.enumerate_support(False))
        return -(_ag.exp(log_prob) * log_prob).sum(0)

    def enumerate_support(self, expand=True):
        count = same_count(self.total_count, "enumerate_support")
        values = arange(1 + count, dtype=self._param.dtype, device=self._param.device)
        values = values.reshape((-1,) + (1,) * len(self._batch_shape))
        return values.expand((-1,) + self._batch_shape) if expand else values

"""Negative binomial distribution: failures before ``total_count`` successes
of probability 1 - ``probs`` (PyTorch's convention: probs is that of a
counted event; logits = log(probs / (1 - probs)))."""

from .. import autograd as _ag
from .._random import poisson
from ..nn.functional import logsigmoid
from . import constraints
from .distribution import Distribution
from .gamma import Gamma
from .utils import BinaryProbsOrLogits, broadcast_all, lazy_property, one_of_probs_logits

__all__ = ["NegativeBinomial"]


class NegativeBinomial(BinaryProbsOrLogits, Distribution):
    """Counts k >= 0 with probability
    Gamma(k + r) / (k! Gamma(r)) probs^k (1 - probs)^r, r = total_count (real,
    >= 0). Draws are Poisson draws of Gamma(r, (1 - probs) / probs) rates."""

    arg_constraints = {"total_count": constraints.greater_than_eq(0),
                       "probs": constraints.half_open_interval(0.0, 1.0), "logits": constraints.real}
    support = constraints.nonnegative_integer

    def __init__(self, total_count, probs=None, logits=None, validate_args=None):
        one_of_probs_logits(probs, logits)
        if probs is not None:
            self.total_count, self.probs = broadcast_all(total_count, probs)
        else:
            self.total_count, self.logits = broadcast_all(total_count, logits)
        self.total_count = self.total_count.to(dtype=self._param.dtype)
        super().__init__(self._param.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_parameters(NegativeBinomial, batch_shape, _instance, ("total_count", "probs", "logits"))

    @property
    def mean(self):
        return self.total_count * _ag.exp(self.logits)

    @property
    def mode(self):
        return _ag.clamp(_ag.floor((self.total_count - 1) * _ag.exp(self.logits)), 0.0, None)

    @property
    def variance(self):
        return self.mean / _ag.sigmoid(-self.logits)

    @lazy_property
    def _gamma(self):
        return Gamma(concentration=self.total_count, rate=_ag.exp(-self.logits), validate_args=False)

    def sample(self, sample_shape=()):
        with _ag.no_grad():
            return poisson(self._gamma.sample(sample_shape))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        log_unnormalized_prob = self.total_count * logsigmoid(-self.logits) + value * logsigmoid(self.logits)
        log_normalization = (-_ag.lgamma(self.total_count + value) + _ag.lgamma(1.0 + value)
                             + _ag.lgamma(self.total_count))
        # total_count + value == 0 is the certain count 0: probability 1.
        log_normalization = _ag.where(self.total_count + value == 0.0, 0.0, log_normalization)
        return log_unnormalized_prob - log_normalization

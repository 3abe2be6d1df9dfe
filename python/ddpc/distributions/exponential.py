"""Exponential distribution of rate ``rate``."""

from .. import autograd as _ag
from ..tensor import zeros_like
from . import constraints
from .exp_family import ExponentialFamily
from .utils import broadcast_all, standard_uniform

__all__ = ["Exponential"]


class Exponential(ExponentialFamily):
    """The exponential distribution: density rate * exp(-rate * x) on x >= 0."""

    arg_constraints = {"rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True
    _mean_carrier_measure = 0

    def __init__(self, rate, validate_args=None):
        (self.rate,) = broadcast_all(rate)
        super().__init__(self.rate.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_parameters(Exponential, batch_shape, _instance, ("rate",))

    @property
    def mean(self):
        return _ag.reciprocal(self.rate)

    @property
    def mode(self):
        return zeros_like(self.rate)

    @property
    def stddev(self):
        return _ag.reciprocal(self.rate)

    @property
    def variance(self):
        return self.rate.pow(-2)

    def rsample(self, sample_shape=()):
        u = standard_uniform(self._extended_shape(sample_shape), self.rate)
        return -_ag.log1p(-u) / self.rate

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return _ag.log(self.rate) - self.rate * value

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 1 - _ag.exp(-self.rate * value)

    def icdf(self, value):
        return -_ag.log1p(-value) / self.rate

    def entropy(self):
        return 1.0 - _ag.log(self.rate)

    @property
    def _natural_params(self):
        return (-self.rate,)

    def _log_normalizer(self, x):
        return -_ag.log(-x)

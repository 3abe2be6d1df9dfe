"""Normal (Gaussian) distribution N(loc, scale ** 2)."""

import math

from .. import autograd as _ag
from . import constraints
from .exp_family import ExponentialFamily
from .utils import broadcast_all, standard_normal

__all__ = ["Normal"]


class Normal(ExponentialFamily):
    """The normal distribution of mean ``loc`` and standard deviation ``scale``."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True
    _mean_carrier_measure = 0

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = broadcast_all(loc, scale)
        super().__init__(self.loc.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_parameters(Normal, batch_shape, _instance, ("loc", "scale"))

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def stddev(self):
        return self.scale

    @property
    def variance(self):
        return self.stddev.pow(2)

    def rsample(self, sample_shape=()):
        eps = standard_normal(self._extended_shape(sample_shape), self.loc)
        return self.loc + eps * self.scale

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        var = self.scale ** 2
        return -((value - self.loc) ** 2) / (2 * var) - _ag.log(self.scale) - math.log(math.sqrt(2 * math.pi))

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 0.5 * (1 + _ag.erf((value - self.loc) * _ag.reciprocal(self.scale) / math.sqrt(2)))

    def icdf(self, value):
        return self.loc + self.scale * _ag.erfinv(2 * value - 1) * math.sqrt(2)

    def entropy(self):
        return 0.5 + 0.5 * math.log(2 * math.pi) + _ag.log(self.scale)

    @property
    def _natural_params(self):
        return self.loc / self.scale.pow(2), -0.5 * _ag.reciprocal(self.scale.pow(2))

    def _log_normalizer(self, x, y):
        return -0.25 * x.pow(2) / y + 0.5 * _ag.log(-math.pi / y)

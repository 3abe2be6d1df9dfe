"""Laplace (double exponential) distribution of location ``loc`` and scale ``scale``."""

import math

from .. import autograd as _ag
from .._dtype import finfo
from . import constraints
from .distribution import Distribution
from .utils import broadcast_all, standard_uniform

__all__ = ["Laplace"]


class Laplace(Distribution):
    """Density exp(-|x - loc| / scale) / (2 * scale)."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = broadcast_all(loc, scale)
        super().__init__(self.loc.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_parameters(Laplace, batch_shape, _instance, ("loc", "scale"))

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        return 2 * self.scale.pow(2)

    @property
    def stddev(self):
        return math.sqrt(2) * self.scale

    def rsample(self, sample_shape=()):
        # u uniform on [eps - 1, 1): log1p(-|u|) stays finite.
        eps = finfo(self.loc.dtype).eps
        u = standard_uniform(self._extended_shape(sample_shape), self.loc) * (2 - eps) + (eps - 1)
        return self.loc - self.scale * _ag.sign(u) * _ag.log1p(-_ag.abs(u))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return -_ag.log(2 * self.scale) - _ag.abs(value - self.loc) / self.scale

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 0.5 - 0.5 * _ag.sign(value - self.loc) * _ag.expm1(-_ag.abs(value - self.loc) / self.scale)

    def icdf(self, value):
        term = value - 0.5
        return self.loc - self.scale * _ag.sign(term) * _ag.log1p(-2 * _ag.abs(term))

    def entropy(self):
        return 1 + _ag.log(2 * self.scale)

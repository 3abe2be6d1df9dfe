"""Cauchy (Lorentz) distribution of location ``loc`` and scale ``scale``."""

import math

from .. import autograd as _ag
from ..tensor import full_like
from . import constraints
from .distribution import Distribution
from .utils import broadcast_all, standard_uniform

__all__ = ["Cauchy"]


class Cauchy(Distribution):
    """The ratio of two independent standard normals, shifted by loc and scaled
    by scale. Its mean is undefined (NaN) and its variance infinite."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = broadcast_all(loc, scale)
        super().__init__(self.loc.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_parameters(Cauchy, batch_shape, _instance, ("loc", "scale"))

    @property
    def mean(self):
        return full_like(self.loc, math.nan)

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        return full_like(self.loc, math.inf)

    def rsample(self, sample_shape=()):
        u = standard_uniform(self._extended_shape(sample_shape), self.loc)
        return self.loc + self.scale * _ag.tan(math.pi * (u - 0.5))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return -math.log(math.pi) - _ag.log(self.scale) - _ag.log1p(((value - self.loc) / self.scale) ** 2)

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return _ag.atan((value - self.loc) / self.scale) / math.pi + 0.5

    def icdf(self, value):
        return _ag.tan(math.pi * (value - 0.5)) * self.scale + self.loc

    def entropy(self):
        return math.log(4 * math.pi) + _ag.log(self.scale)

"""Uniform distribution on the half-open interval [low, high)."""

import math

from .. import autograd as _ag
from . import constraints
from .distribution import Distribution
from .utils import broadcast_all, standard_uniform

__all__ = ["Uniform"]


class Uniform(Distribution):
    """Draws uniformly from [low, high)."""

    arg_constraints = {"low": constraints.dependent(is_discrete=False, event_dim=0),
                       "high": constraints.dependent(is_discrete=False, event_dim=0)}
    has_rsample = True

    def __init__(self, low, high, validate_args=None):
        self.low, self.high = broadcast_all(low, high)
        super().__init__(self.low.shape, validate_args=validate_args)
        if self._validate_args and not bool(_ag.all_(self.low < self.high)):
            raise ValueError("Uniform is not defined when low>= high")

    def expand(self, batch_shape, _instance=None):
        return self._expand_parameters(Uniform, batch_shape, _instance, ("low", "high"))

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        return constraints.interval(self.low, self.high)

    @property
    def mean(self):
        return (self.high + self.low) / 2

    @property
    def mode(self):
        return self.high * math.nan

    @property
    def stddev(self):
        return (self.high - self.low) / 12 ** 0.5

    @property
    def variance(self):
        return (self.high - self.low).pow(2) / 12

    def rsample(self, sample_shape=()):
        rand = standard_uniform(self._extended_shape(sample_shape), self.low)
        return self.low + rand * (self.high - self.low)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        lb = (self.low <= value).to(dtype=self.low.dtype)
        ub = (self.high > value).to(dtype=self.low.dtype)
        return _ag.log(lb * ub) - _ag.log(self.high - self.low)

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return _ag.clamp((value - self.low) / (self.high - self.low), 0, 1)

    def icdf(self, value):
        return value * (self.high - self.low) + self.low

    def entropy(self):
        return _ag.log(self.high - self.low)

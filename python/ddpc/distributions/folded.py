"""Folded: |X| for X symmetric about 0 with a ``scale``, the shared part of
HalfNormal and HalfCauchy."""

import math

from .. import autograd as _ag
from ..tensor import full_like, zeros_like
from . import constraints
from .transformed_distribution import TransformedDistribution
from .transforms import AbsTransform

__all__ = ["Folded"]


class Folded(TransformedDistribution):
    """|X| with X ~ base_dist, a distribution symmetric about 0: its density
    on [0, inf) is twice X's."""

    arg_constraints = {"scale": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, base_dist, validate_args=None):
        super().__init__(base_dist, AbsTransform(), validate_args=validate_args)

    @property
    def scale(self):
        return self.base_dist.scale

    @property
    def mode(self):
        return zeros_like(self.scale)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        log_prob = self.base_dist.log_prob(value) + math.log(2)
        return _ag.where(value >= 0, log_prob, full_like(log_prob, -math.inf))

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 2 * self.base_dist.cdf(value) - 1

    def icdf(self, prob):
        return self.base_dist.icdf((prob + 1) / 2)

    def entropy(self):
        return self.base_dist.entropy() - math.log(2)

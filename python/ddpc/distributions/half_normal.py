"""HalfNormal: |X| with X ~ Normal(0, scale)."""

import math

from .. import autograd as _ag
from ..tensor import full_like, zeros_like
from . import constraints
from .normal import Normal
from .transformed_distribution import TransformedDistribution
from .transforms import AbsTransform

__all__ = ["HalfNormal"]


def folded_log_prob(dist, value):
    """The log density of |X| for X symmetric about 0: twice X's density on
    value >= 0, and -inf below 0."""
    if dist._validate_args:
        dist._validate_sample(value)
    log_prob = dist.base_dist.log_prob(value) + math.log(2)
    return _ag.where(value >= 0, log_prob, full_like(log_prob, -math.inf))


class HalfNormal(TransformedDistribution):
    """The absolute value of a centred normal of standard deviation scale.
    ddpc has no erfinv yet, so HalfNormal has no icdf."""

    arg_constraints = {"scale": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, scale, validate_args=None):
        base_dist = Normal(0, scale, validate_args=False)
        super().__init__(base_dist, AbsTransform(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(HalfNormal, _instance)
        return super().expand(batch_shape, _instance=new)

    @property
    def scale(self):
        return self.base_dist.scale

    @property
    def mean(self):
        return self.scale * math.sqrt(2 / math.pi)

    @property
    def mode(self):
        return zeros_like(self.scale)

    @property
    def variance(self):
        return self.scale.pow(2) * (1 - 2 / math.pi)

    def log_prob(self, value):
        return folded_log_prob(self, value)

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 2 * self.base_dist.cdf(value) - 1

    def entropy(self):
        return self.base_dist.entropy() - math.log(2)

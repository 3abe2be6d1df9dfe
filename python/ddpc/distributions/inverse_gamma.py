"""Inverse gamma distribution: 1 / X with X ~ Gamma(concentration, rate)."""

import math

from .. import autograd as _ag
from ..tensor import tensor
from . import constraints
from .gamma import Gamma
from .transformed_distribution import TransformedDistribution
from .transforms import PowerTransform

__all__ = ["InverseGamma"]


class InverseGamma(TransformedDistribution):
    """The reciprocal of a Gamma(concentration, rate) variable; its mean is
    infinite for concentration <= 1 and its variance for concentration <= 2."""

    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, concentration, rate, validate_args=None):
        base_dist = Gamma(concentration, rate, validate_args=validate_args)
        neg_one = tensor(-1.0, dtype=base_dist.rate.dtype, device=base_dist.rate.device)
        super().__init__(base_dist, PowerTransform(neg_one), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(InverseGamma, _instance)
        return super().expand(batch_shape, _instance=new)

    @property
    def concentration(self):
        return self.base_dist.concentration

    @property
    def rate(self):
        return self.base_dist.rate

    @property
    def mean(self):
        return _ag.where(self.concentration > 1, self.rate / (self.concentration - 1), math.inf)

    @property
    def mode(self):
        return self.rate / (self.concentration + 1)

    @property
    def variance(self):
        result = self.rate.square() / ((self.concentration - 1).square() * (self.concentration - 2))
        return _ag.where(self.concentration > 2, result, math.inf)

    def entropy(self):
        return (self.concentration + _ag.log(self.rate) + _ag.lgamma(self.concentration)
                - (1 + self.concentration) * _ag.digamma(self.concentration))

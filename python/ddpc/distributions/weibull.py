"""Weibull distribution of scale ``scale`` and shape ``concentration``."""

from .. import autograd as _ag
from ..tensor import ones_like
from . import constraints
from .exponential import Exponential
from .transformed_distribution import TransformedDistribution
from .transforms import AffineTransform, PowerTransform
from .utils import broadcast_all, euler_gamma

__all__ = ["Weibull"]


class Weibull(TransformedDistribution):
    """scale * E^(1 / concentration) with E standard exponential: density
    (k / s) (x / s)^(k - 1) exp(-(x / s)^k)."""

    arg_constraints = {"scale": constraints.positive, "concentration": constraints.positive}
    support = constraints.positive

    def __init__(self, scale, concentration, validate_args=None):
        self.scale, self.concentration = broadcast_all(scale, concentration)
        self.concentration_reciprocal = _ag.reciprocal(self.concentration)
        base_dist = Exponential(ones_like(self.scale), validate_args=validate_args)
        transforms = [PowerTransform(exponent=self.concentration_reciprocal), AffineTransform(loc=0, scale=self.scale)]
        super().__init__(base_dist, transforms, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Weibull, _instance)
        batch_shape = tuple(batch_shape)
        new.scale = self.scale.expand(batch_shape)
        new.concentration = self.concentration.expand(batch_shape)
        new.concentration_reciprocal = _ag.reciprocal(new.concentration)
        transforms = [PowerTransform(exponent=new.concentration_reciprocal), AffineTransform(loc=0, scale=new.scale)]
        super(Weibull, new).__init__(self.base_dist.expand(batch_shape), transforms, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self):
        return self.scale * _ag.exp(_ag.lgamma(1 + self.concentration_reciprocal))

    @property
    def mode(self):
        return self.scale * ((self.concentration - 1) / self.concentration) ** self.concentration_reciprocal

    @property
    def variance(self):
        return self.scale.pow(2) * (_ag.exp(_ag.lgamma(1 + 2 * self.concentration_reciprocal))
                                    - _ag.exp(2 * _ag.lgamma(1 + self.concentration_reciprocal)))

    def entropy(self):
        return (euler_gamma * (1 - self.concentration_reciprocal)
                + _ag.log(self.scale * self.concentration_reciprocal) + 1)

"""Gumbel (type-I extreme value) distribution of location ``loc`` and scale ``scale``."""

import math

from .. import autograd as _ag
from .._dtype import finfo
from ..tensor import full_like
from . import constraints
from .transformed_distribution import TransformedDistribution
from .transforms import AffineTransform, ExpTransform
from .uniform import Uniform
from .utils import broadcast_all, euler_gamma

__all__ = ["Gumbel"]


class Gumbel(TransformedDistribution):
    """loc - scale * log(-log(U)) with U uniform on (0, 1): the distribution of
    the maximum of many draws."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = broadcast_all(loc, scale)
        fi = finfo(self.loc.dtype)
        base_dist = Uniform(full_like(self.loc, fi.tiny), full_like(self.loc, 1 - fi.eps), validate_args=validate_args)
        transforms = [ExpTransform().inv, AffineTransform(loc=0, scale=-1), ExpTransform().inv,
                      AffineTransform(loc=self.loc, scale=-self.scale)]
        super().__init__(base_dist, transforms, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Gumbel, _instance)
        new.loc = self.loc.expand(tuple(batch_shape))
        new.scale = self.scale.expand(tuple(batch_shape))
        return super().expand(batch_shape, _instance=new)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        y = (self.loc - value) / self.scale
        return (y - _ag.exp(y)) - _ag.log(self.scale)

    @property
    def mean(self):
        return self.loc + self.scale * euler_gamma

    @property
    def mode(self):
        return self.loc

    @property
    def stddev(self):
        return (math.pi / math.sqrt(6)) * self.scale

    @property
    def variance(self):
        return self.stddev.pow(2)

    def entropy(self):
        return _ag.log(self.scale) + (1 + euler_gamma)

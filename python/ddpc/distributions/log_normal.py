"""LogNormal: exp of a Normal(loc, scale)."""

from .. import autograd as _ag
from . import constraints
from .normal import Normal
from .transformed_distribution import TransformedDistribution
from .transforms import ExpTransform

__all__ = ["LogNormal"]


class LogNormal(TransformedDistribution):
    """X = exp(Y) with Y ~ Normal(loc, scale)."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        base_dist = Normal(loc, scale, validate_args=validate_args)
        super().__init__(base_dist, ExpTransform(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(LogNormal, _instance)
        return super().expand(batch_shape, _instance=new)

    @property
    def loc(self):
        return self.base_dist.loc

    @property
    def scale(self):
        return self.base_dist.scale

    @property
    def mean(self):
        return _ag.exp(self.loc + self.scale.pow(2) / 2)

    @property
    def mode(self):
        return _ag.exp(self.loc - self.scale.square())

    @property
    def variance(self):
        scale_sq = self.scale.pow(2)
        return _ag.expm1(scale_sq) * _ag.exp(2 * self.loc + scale_sq)

    def entropy(self):
        return self.base_dist.entropy() + self.loc

"""Kumaraswamy distribution on [0, 1] of concentrations ``concentration1`` and ``concentration0``."""

import math

from .. import autograd as _ag
from ..tensor import full_like
from . import constraints
from .transformed_distribution import TransformedDistribution
from .transforms import AffineTransform, PowerTransform
from .uniform import Uniform
from .utils import broadcast_all, euler_gamma

__all__ = ["Kumaraswamy"]


def _moments(a, b, n):
    """E[X^n] = b B(1 + n / a, b) of Kumaraswamy(a, b)."""
    arg1 = 1 + n / a
    return b * _ag.exp(_ag.lgamma(arg1) + _ag.lgamma(b) - _ag.lgamma(arg1 + b))


class Kumaraswamy(TransformedDistribution):
    """Density a b x^(a - 1) (1 - x^a)^(b - 1) with a = concentration1 and
    b = concentration0: (1 - U^(1 / b))^(1 / a) with U uniform on [0, 1]."""

    arg_constraints = {"concentration1": constraints.positive, "concentration0": constraints.positive}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, concentration1, concentration0, validate_args=None):
        self.concentration1, self.concentration0 = broadcast_all(concentration1, concentration0)
        base_dist = Uniform(full_like(self.concentration0, 0), full_like(self.concentration0, 1),
                            validate_args=validate_args)
        transforms = [PowerTransform(exponent=_ag.reciprocal(self.concentration0)),
                      AffineTransform(loc=1.0, scale=-1.0),
                      PowerTransform(exponent=_ag.reciprocal(self.concentration1))]
        super().__init__(base_dist, transforms, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Kumaraswamy, _instance)
        new.concentration1 = self.concentration1.expand(tuple(batch_shape))
        new.concentration0 = self.concentration0.expand(tuple(batch_shape))
        return super().expand(batch_shape, _instance=new)

    @property
    def mean(self):
        return _moments(self.concentration1, self.concentration0, 1)

    @property
    def mode(self):
        log_mode = (_ag.reciprocal(self.concentration0) * _ag.log1p(-self.concentration0)
                    - _ag.log1p(-self.concentration0 * self.concentration1))
        below_one = _ag.logical_or(self.concentration0 < 1, self.concentration1 < 1)
        return _ag.exp(_ag.where(below_one, math.nan, log_mode))

    @property
    def variance(self):
        return _moments(self.concentration1, self.concentration0, 2) - self.mean.pow(2)

    def entropy(self):
        t1 = 1 - _ag.reciprocal(self.concentration1)
        t0 = 1 - _ag.reciprocal(self.concentration0)
        H0 = _ag.digamma(self.concentration0 + 1) + euler_gamma
        return t0 + t1 * H0 - _ag.log(self.concentration1) - _ag.log(self.concentration0)

"""HalfCauchy: |X| with X ~ Cauchy(0, scale)."""

import math

from ..tensor import full_like
from .cauchy import Cauchy
from .folded import Folded

__all__ = ["HalfCauchy"]


class HalfCauchy(Folded):
    """The absolute value of a centred Cauchy of scale ``scale``; its mean and
    variance are infinite."""

    def __init__(self, scale, validate_args=None):
        super().__init__(Cauchy(0, scale, validate_args=False), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(HalfCauchy, _instance)
        return super().expand(batch_shape, _instance=new)

    @property
    def mean(self):
        return full_like(self.scale, math.inf)

    @property
    def variance(self):
        return self.base_dist.variance

"""Fisher-Snedecor (F) distribution with ``df1`` and ``df2`` degrees of freedom."""

import math

from .. import autograd as _ag
from .._dtype import finfo
from . import constraints
from .distribution import Distribution
from .gamma import Gamma
from .utils import broadcast_all

__all__ = ["FisherSnedecor"]


class FisherSnedecor(Distribution):
    """(U1 / df1) / (U2 / df2) with U1, U2 chi-squared of df1 and df2 degrees
    of freedom. The mean is NaN for df2 <= 2, the mode for df1 <= 2 and the
    variance for df2 <= 4."""

    arg_constraints = {"df1": constraints.positive, "df2": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, df1, df2, validate_args=None):
        self.df1, self.df2 = broadcast_all(df1, df2)
        self._gamma1 = Gamma(self.df1 * 0.5, self.df1)
        self._gamma2 = Gamma(self.df2 * 0.5, self.df2)
        super().__init__(self.df1.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._expand_parameters(FisherSnedecor, batch_shape, _instance, ("df1", "df2"))
        new._gamma1 = self._gamma1.expand(batch_shape)
        new._gamma2 = self._gamma2.expand(batch_shape)
        return new

    @property
    def mean(self):
        df2 = _ag.where(self.df2 <= 2, math.nan, self.df2)
        return df2 / (df2 - 2)

    @property
    def mode(self):
        mode = (self.df1 - 2) / self.df1 * self.df2 / (self.df2 + 2)
        return _ag.where(self.df1 <= 2, math.nan, mode)

    @property
    def variance(self):
        df2 = _ag.where(self.df2 <= 4, math.nan, self.df2)
        return 2 * df2.pow(2) * (self.df1 + df2 - 2) / (self.df1 * (df2 - 2).pow(2) * (df2 - 4))

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        tiny = finfo(self.df1.dtype).tiny
        X1 = self._gamma1.rsample(sample_shape).reshape(shape)
        X2 = _ag.clamp(self._gamma2.rsample(sample_shape).reshape(shape), tiny, None)
        return _ag.clamp(X1 / X2, tiny, None)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        ct1 = self.df1 * 0.5
        ct2 = self.df2 * 0.5
        ct3 = self.df1 / self.df2
        t1 = _ag.lgamma(ct1 + ct2) - _ag.lgamma(ct1) - _ag.lgamma(ct2)
        t2 = ct1 * _ag.log(ct3) + (ct1 - 1) * _ag.log(value)
        t3 = (ct1 + ct2) * _ag.log1p(ct3 * value)
        return t1 + t2 - t3

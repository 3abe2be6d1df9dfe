"""Student's t distribution with ``df`` degrees of freedom, location ``loc``
and scale ``scale``."""

import math

from .. import autograd as _ag
from . import constraints
from .chi2 import Chi2
from .distribution import Distribution
from .utils import broadcast_all, standard_normal

__all__ = ["StudentT"]


class StudentT(Distribution):
    """loc + scale * Z / sqrt(V / df) with Z standard normal and V ~ Chi2(df).
    The mean is NaN for df <= 1; the variance is infinite for 1 < df <= 2 and
    NaN for df <= 1."""

    arg_constraints = {"df": constraints.positive, "loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, df, loc=0.0, scale=1.0, validate_args=None):
        self.df, self.loc, self.scale = broadcast_all(df, loc, scale)
        self._chi2 = Chi2(self.df)
        super().__init__(self.df.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._expand_parameters(StudentT, batch_shape, _instance, ("df", "loc", "scale"))
        new._chi2 = self._chi2.expand(batch_shape)
        return new

    @property
    def mean(self):
        return _ag.where(self.df <= 1, math.nan, self.loc)

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        finite = self.scale.pow(2) * self.df / (self.df - 2)
        return _ag.where(self.df > 2, finite, _ag.where(self.df > 1, math.inf, math.nan))

    def rsample(self, sample_shape=()):
        X = standard_normal(self._extended_shape(sample_shape), self.df)
        Z = self._chi2.rsample(sample_shape)
        return self.loc + self.scale * (X * _ag.rsqrt(Z / self.df))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        y = (value - self.loc) / self.scale
        Z = (_ag.log(self.scale) + 0.5 * _ag.log(self.df) + 0.5 * math.log(math.pi) + _ag.lgamma(0.5 * self.df)
             - _ag.lgamma(0.5 * (self.df + 1.0)))
        return -0.5 * (self.df + 1.0) * _ag.log1p(y ** 2.0 / self.df) - Z

    def entropy(self):
        lbeta = _ag.lgamma(0.5 * self.df) + math.lgamma(0.5) - _ag.lgamma(0.5 * (self.df + 1))
        return (_ag.log(self.scale)
                + 0.5 * (self.df + 1) * (_ag.digamma(0.5 * (self.df + 1)) - _ag.digamma(0.5 * self.df))
                + 0.5 * _ag.log(self.df) + lbeta)

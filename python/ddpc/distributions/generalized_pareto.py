"""Generalized Pareto distribution of location ``loc``, scale ``scale`` and
shape ``concentration``."""

import math

from .. import autograd as _ag
from . import constraints
from .distribution import Distribution
from .utils import broadcast_all, standard_uniform

__all__ = ["GeneralizedPareto"]


class GeneralizedPareto(Distribution):
    """Survival function (1 + concentration z)^(-1 / concentration) of
    z = (x - loc) / scale, and exp(-z) where concentration is 0 (within
    1e-8, as torch.isclose decides). Its special cases are the Exponential
    (loc 0, concentration 0), the Pareto (concentration > 0, loc = scale /
    concentration) and the Uniform (concentration -1). The support is
    [loc, inf) for concentration >= 0 and [loc, loc - scale / concentration]
    below."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive, "concentration": constraints.real}
    has_rsample = True

    def __init__(self, loc, scale, concentration, validate_args=None):
        self.loc, self.scale, self.concentration = broadcast_all(loc, scale, concentration)
        super().__init__(self.loc.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_parameters(GeneralizedPareto, batch_shape, _instance, ("loc", "scale", "concentration"))

    def _zero_and_safe_concentration(self):
        """Where the concentration counts as 0, and the concentration with 1
        there (so that the branch for a nonzero one stays finite)."""
        eq_zero = _ag.isclose(self.concentration, 0.0)
        return eq_zero, _ag.where(eq_zero, 1.0, self.concentration)

    def rsample(self, sample_shape=()):
        return self.icdf(standard_uniform(self._extended_shape(sample_shape), self.loc))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        z = self._z(value)
        eq_zero, safe_conc = self._zero_and_safe_concentration()
        y = 1 / safe_conc + 1
        where_nonzero = _ag.where(y == 0, y, y * _ag.log1p(safe_conc * z))
        return -_ag.log(self.scale) - _ag.where(eq_zero, z, where_nonzero)

    def log_survival_function(self, value):
        """log P(X > value)."""
        if self._validate_args:
            self._validate_sample(value)
        z = self._z(value)
        eq_zero, safe_conc = self._zero_and_safe_concentration()
        return _ag.where(eq_zero, -z, -_ag.log1p(safe_conc * z) / safe_conc)

    def log_cdf(self, value):
        """log P(X <= value)."""
        return _ag.log1p(-_ag.exp(self.log_survival_function(value)))

    def cdf(self, value):
        return _ag.exp(self.log_cdf(value))

    def icdf(self, value):
        eq_zero, safe_conc = self._zero_and_safe_concentration()
        log_u = _ag.log1p(-value)
        where_nonzero = self.loc + self.scale / safe_conc * _ag.expm1(-safe_conc * log_u)
        return _ag.where(eq_zero, self.loc - self.scale * log_u, where_nonzero)

    def _z(self, x):
        return (x - self.loc) / self.scale

    @property
    def mean(self):
        valid = self.concentration < 1
        safe_conc = _ag.where(valid, self.concentration, 0.5)
        return _ag.where(valid, self.loc + self.scale / (1 - safe_conc), math.nan)

    @property
    def variance(self):
        valid = self.concentration < 0.5
        safe_conc = _ag.where(valid, self.concentration, 0.25)
        return _ag.where(valid, self.scale ** 2 / ((1 - safe_conc) ** 2 * (1 - 2 * safe_conc)), math.nan)

    def entropy(self):
        return (_ag.log(self.scale) + self.concentration + 1).expand(self._batch_shape)

    @property
    def mode(self):
        return self.loc

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        lower = self.loc
        upper = _ag.where(self.concentration < 0, lower - self.scale / self.concentration, math.inf)
        return constraints.interval(lower, upper)

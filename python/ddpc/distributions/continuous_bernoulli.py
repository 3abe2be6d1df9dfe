"""ContinuousBernoulli: the continuous distribution on [0, 1] with density
proportional to p ** x * (1 - p) ** (1 - x) (Loaiza-Ganem and Cunningham,
2019), the likelihood the Bernoulli stands in for in VAEs of images."""

import math

from .. import autograd as _ag
from ..nn.functional import binary_cross_entropy_with_logits
from ..tensor import full_like, ones_like, zeros_like
from . import constraints
from .exp_family import ExponentialFamily
from .utils import (BinaryProbsOrLogits, broadcast_all, clamp_probs, lazy_property, logits_to_probs,
                    one_of_probs_logits, standard_uniform)

__all__ = ["ContinuousBernoulli"]


class ContinuousBernoulli(BinaryProbsOrLogits, ExponentialFamily):
    """Give probs (in [0, 1], clamped away from 0 and 1) or logits, not both.
    Near probs = 0.5 the closed forms divide 0 by 0, so inside ``lims`` they
    are replaced by their Taylor expansions, as torch's. Probs outside [0, 1]
    raise whenever validation is on (torch checks them only when
    validate_args is given)."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.unit_interval
    _mean_carrier_measure = 0
    has_rsample = True

    def __init__(self, probs=None, logits=None, lims=(0.499, 0.501), validate_args=None):
        one_of_probs_logits(probs, logits)
        if probs is not None:
            (probs,) = broadcast_all(probs)
            checking = self._validate_args if validate_args is None else validate_args
            # Checked here: the clamp below would hide values outside [0, 1].
            if checking and not bool(_ag.all_(self.arg_constraints["probs"].check(probs))):
                raise ValueError("The parameter probs has invalid values")
            probs = clamp_probs(probs)
        param = self._set_probs_or_logits(probs, logits)
        self._lims = lims
        super().__init__(param.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._expand_parameters(ContinuousBernoulli, batch_shape, _instance, ("probs", "logits"))
        new._lims = self._lims
        return new

    @lazy_property
    def probs(self):
        return clamp_probs(logits_to_probs(self.logits, is_binary=True))

    def _outside_unstable_region(self):
        return _ag.logical_or(self.probs <= self._lims[0], self.probs > self._lims[1])

    def _cut_probs(self):
        """probs, with lims[0] inside the unstable region (where the Taylor forms are used)."""
        return _ag.where(self._outside_unstable_region(), self.probs, full_like(self.probs, self._lims[0]))

    def _cont_bern_log_norm(self):
        """The log normalizing constant as a function of probs."""
        cut_probs = self._cut_probs()
        below_half = _ag.where(cut_probs <= 0.5, cut_probs, zeros_like(cut_probs))
        above_half = _ag.where(cut_probs >= 0.5, cut_probs, ones_like(cut_probs))
        log_norm = _ag.log(_ag.abs(_ag.log1p(-cut_probs) - _ag.log(cut_probs))) - _ag.where(
            cut_probs <= 0.5, _ag.log1p(-2.0 * below_half), _ag.log(2.0 * above_half - 1.0))
        x = (self.probs - 0.5).pow(2)
        taylor = math.log(2.0) + (4.0 / 3.0 + 104.0 / 45.0 * x) * x
        return _ag.where(self._outside_unstable_region(), log_norm, taylor)

    @property
    def mean(self):
        cut_probs = self._cut_probs()
        mus = cut_probs / (2.0 * cut_probs - 1.0) + _ag.reciprocal(_ag.log1p(-cut_probs) - _ag.log(cut_probs))
        x = self.probs - 0.5
        taylor = 0.5 + (1.0 / 3.0 + 16.0 / 45.0 * x.pow(2)) * x
        return _ag.where(self._outside_unstable_region(), mus, taylor)

    @property
    def variance(self):
        cut_probs = self._cut_probs()
        variances = cut_probs * (cut_probs - 1.0) / (1.0 - 2.0 * cut_probs).pow(2) + _ag.reciprocal(
            (_ag.log1p(-cut_probs) - _ag.log(cut_probs)).pow(2))
        x = (self.probs - 0.5).pow(2)
        taylor = 1.0 / 12.0 - (1.0 / 15.0 - 128.0 / 945.0 * x) * x
        return _ag.where(self._outside_unstable_region(), variances, taylor)

    def rsample(self, sample_shape=()):
        return self.icdf(standard_uniform(self._extended_shape(sample_shape), self.probs))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        return -binary_cross_entropy_with_logits(logits, value, reduction="none") + self._cont_bern_log_norm()

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        cut_probs = self._cut_probs()
        cdfs = (cut_probs.pow(value) * (1.0 - cut_probs).pow(1.0 - value) + cut_probs - 1.0) / (2.0 * cut_probs - 1.0)
        unbounded = _ag.where(self._outside_unstable_region(), cdfs, value)
        return _ag.where(value <= 0.0, zeros_like(value), _ag.where(value >= 1.0, ones_like(value), unbounded))

    def icdf(self, value):
        cut_probs = self._cut_probs()
        inverted = (_ag.log1p(-cut_probs + value * (2.0 * cut_probs - 1.0)) - _ag.log1p(-cut_probs)) / (
            _ag.log(cut_probs) - _ag.log1p(-cut_probs))
        return _ag.where(self._outside_unstable_region(), inverted, value)

    def entropy(self):
        log_probs0 = _ag.log1p(-self.probs)
        log_probs1 = _ag.log(self.probs)
        return self.mean * (log_probs0 - log_probs1) - self._cont_bern_log_norm() - log_probs0

    @property
    def _natural_params(self):
        return (self.logits,)

    def _log_normalizer(self, x):
        """The log normalizing constant as a function of the natural parameter."""
        outside = _ag.logical_or(x <= self._lims[0] - 0.5, x > self._lims[1] - 0.5)
        cut = _ag.where(outside, x, full_like(x, self._lims[0] - 0.5))
        log_norm = _ag.log(_ag.abs(_ag.expm1(cut))) - _ag.log(_ag.abs(cut))
        taylor = 0.5 * x + x.pow(2) / 24.0 - x.pow(4) / 2880.0
        return _ag.where(outside, log_norm, taylor)

"""Geometric distribution: the number of failures before the first success
of Bernoulli trials of success probability ``probs``."""

from .. import autograd as _ag
from .._dtype import finfo
from ..nn.functional import binary_cross_entropy_with_logits
from ..tensor import zeros_like
from . import constraints
from .distribution import Distribution
from .utils import BinaryProbsOrLogits, broadcast_all, standard_uniform

__all__ = ["Geometric"]


class Geometric(BinaryProbsOrLogits, Distribution):
    """P(k) = (1 - p) ** k * p for k = 0, 1, 2, ...; give probs (in (0, 1]) or
    logits, not both."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.nonnegative_integer

    def __init__(self, probs=None, logits=None, validate_args=None):
        param = self._set_probs_or_logits(probs, logits)
        super().__init__(param.shape, validate_args=validate_args)
        if self._validate_args and probs is not None and not bool(_ag.all_(self.probs > 0)):
            raise ValueError(f"Expected parameter probs ({type(self.probs).__name__} of shape "
                             f"{tuple(self.probs.shape)}) of distribution {self!r} to be positive but found invalid "
                             f"values:\n{self.probs}")

    def expand(self, batch_shape, _instance=None):
        return self._expand_parameters(Geometric, batch_shape, _instance, ("probs", "logits"))

    @property
    def mean(self):
        return _ag.reciprocal(self.probs) - 1

    @property
    def mode(self):
        return zeros_like(self.probs)

    @property
    def variance(self):
        return (_ag.reciprocal(self.probs) - 1) / self.probs

    def sample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        tiny = finfo(self.probs.dtype).tiny
        with _ag.no_grad():
            u = _ag.clamp(standard_uniform(shape, self.probs), tiny, None)
            return _ag.floor(_ag.log(u) / _ag.log1p(-self.probs))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        value, probs = broadcast_all(value, self.probs)
        # (1 - p) ** 0 is 1 also for p = 1, where 0 * log(0) would give NaN.
        probs_of_failures = _ag.where(_ag.logical_and(probs == 1, value == 0), _ag.mul(probs, 0.0), probs)
        return value * _ag.log1p(-probs_of_failures) + _ag.log(self.probs)

    def entropy(self):
        return binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none") / self.probs

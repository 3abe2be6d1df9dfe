"""Bernoulli distribution: 1 with probability ``probs`` (or sigmoid(``logits``)), else 0."""

from .. import autograd as _ag
from ..nn.functional import binary_cross_entropy_with_logits
from ..tensor import arange, full_like
from .._random import bernoulli
from . import constraints
from .exp_family import ExponentialFamily
from .utils import BinaryProbsOrLogits, broadcast_all

__all__ = ["Bernoulli"]


class Bernoulli(BinaryProbsOrLogits, ExponentialFamily):
    """Draws 1 with probability probs and 0 otherwise; give probs or logits (the
    log-odds), not both."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.boolean
    has_enumerate_support = True
    _mean_carrier_measure = 0

    def __init__(self, probs=None, logits=None, validate_args=None):
        param = self._set_probs_or_logits(probs, logits)
        super().__init__(param.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_parameters(Bernoulli, batch_shape, _instance, ("probs", "logits"))

    @property
    def mean(self):
        return self.probs

    @property
    def mode(self):
        mode = (self.probs >= 0.5).to(dtype=self.probs.dtype)
        return _ag.where(self.probs == 0.5, full_like(mode, float("nan")), mode)

    @property
    def variance(self):
        return self.probs * (1 - self.probs)

    def sample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        with _ag.no_grad():
            return bernoulli(self.probs.expand(shape))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        return -binary_cross_entropy_with_logits(logits, value.to(dtype=logits.dtype), reduction="none")

    def entropy(self):
        return binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none")

    def enumerate_support(self, expand=True):
        values = arange(2, dtype=self._param.dtype, device=self._param.device)
        values = values.reshape((-1,) + (1,) * len(self._batch_shape))
        return values.expand((-1,) + self._batch_shape) if expand else values

    @property
    def _natural_params(self):
        return (_ag.log(self.probs / (1 - self.probs)),)

    def _log_normalizer(self, x):
        return _ag.log1p(_ag.exp(x))

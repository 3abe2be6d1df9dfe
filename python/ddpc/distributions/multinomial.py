"""Multinomial distribution: the counts of each of the categories in
``total_count`` independent Categorical draws."""

import math

from .. import autograd as _ag
from ..tensor import broadcast_tensors, ones_like, tensor, zeros
from . import constraints
from .binomial import Binomial
from .categorical import Categorical
from .distribution import Distribution

__all__ = ["Multinomial"]


class Multinomial(Distribution):
    """Count vectors summing to ``total_count`` (an int, the same for the whole
    batch) over the categories of probs or logits along the last dim.
    log_prob does not check that a value sums to total_count, as PyTorch's."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}

    def __init__(self, total_count=1, probs=None, logits=None, validate_args=None):
        if not isinstance(total_count, int):
            raise NotImplementedError("inhomogeneous total_count is not supported")
        self.total_count = total_count
        self._categorical = Categorical(probs=probs, logits=logits)
        self._binomial = Binomial(total_count=total_count, probs=self.probs)
        super().__init__(self._categorical.batch_shape, self._categorical.param_shape[-1:],
                         validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Multinomial, _instance)
        batch_shape = tuple(batch_shape)
        new.total_count = self.total_count
        new._categorical = self._categorical.expand(batch_shape)
        new._binomial = self._binomial.expand(batch_shape + self.event_shape)
        super(Multinomial, new).__init__(batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @constraints.dependent_property(is_discrete=True, event_dim=1)
    def support(self):
        return constraints.multinomial(self.total_count)

    @property
    def logits(self):
        return self._categorical.logits

    @property
    def probs(self):
        return self._categorical.probs

    @property
    def param_shape(self):
        return self._categorical.param_shape

    @property
    def mean(self):
        return self.probs * self.total_count

    @property
    def variance(self):
        return self.total_count * self.probs * (1 - self.probs)

    def sample(self, sample_shape=()):
        sample_shape = (sample_shape,) if isinstance(sample_shape, int) else tuple(sample_shape)
        with _ag.no_grad():
            draws = self._categorical.sample((self.total_count,) + sample_shape)
            draws = draws.movedim(0, -1)
            counts = zeros(self._extended_shape(sample_shape), dtype=draws.dtype, device=draws.device)
            counts = _ag.scatter_add(counts, -1, draws, ones_like(draws))
            return counts.to(dtype=self.probs.dtype)

    def entropy(self):
        n = tensor(float(self.total_count), dtype=self.probs.dtype, device=self.probs.device)
        term1 = n * self._categorical.entropy() - _ag.lgamma(n + 1)
        support = self._binomial.enumerate_support(expand=False)[1:]
        binomial_probs = _ag.exp(self._binomial.log_prob(support))
        weights = _ag.lgamma(support + 1)
        return term1 + (binomial_probs * weights).sum(0).sum(-1)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_tensors(self.logits, value.to(dtype=self.logits.dtype))
        log_factorial_n = _ag.lgamma(value.sum(-1) + 1)
        log_factorial_xs = _ag.lgamma(value + 1).sum(-1)
        # 0 * log(0) is 0: a category of probability 0 drawn no time costs nothing.
        logits = _ag.where(_ag.logical_and(value == 0, logits == -math.inf), 0.0, logits)
        return log_factorial_n - log_factorial_xs + (logits * value).sum(-1)

"""Categorical distribution over {0, ..., K - 1} with probabilities ``probs``
(or softmax(``logits``)) along the last dim."""

import math

from .. import autograd as _ag
from .._stats import searchsorted
from ..tensor import arange, broadcast_tensors, full
from . import constraints
from .distribution import Distribution
from .utils import (ProbsOrLogits, finite_min, lazy_property, logits_to_probs, one_of_probs_logits, probs_to_logits,
                    standard_uniform)

__all__ = ["Categorical"]


class Categorical(ProbsOrLogits, Distribution):
    """Draws an index in {0, ..., K - 1}: probs (non-negative, normalized along
    the last dim) or logits (unnormalized log-probabilities), not both. The
    last dim indexes the categories; the others are batch dims.

    Samples are drawn by inverting the cumulative probabilities with uniform
    draws of ddpc's generator (on the parameters' device), so ddpc.manual_seed
    makes them reproducible; they are not PyTorch's numbers."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.independent(constraints.real, 1)}
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        param = one_of_probs_logits(probs, logits)
        if param.ndim < 1:
            raise ValueError(f"`{'probs' if probs is not None else 'logits'}` parameter must be at least "
                             "one-dimensional.")
        if probs is not None:
            self.probs = probs / probs.sum(-1, keepdim=True)
        else:
            self.logits = logits - _ag.logsumexp(logits, -1, keepdim=True)
        self._num_events = self._param.shape[-1]
        super().__init__(self._param.shape[:-1], validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._expand_parameters(Categorical, batch_shape, _instance, ("probs", "logits"), (self._num_events,))
        new._num_events = self._num_events
        return new

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.integer_interval(0, self._num_events - 1)

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits)

    @property
    def mean(self):
        return full(self._extended_shape(), math.nan, dtype=self.probs.dtype, device=self.probs.device)

    @property
    def mode(self):
        return _ag.argmax(self.probs, -1)

    @property
    def variance(self):
        return full(self._extended_shape(), math.nan, dtype=self.probs.dtype, device=self.probs.device)

    def sample(self, sample_shape=()):
        sample_shape = (sample_shape,) if isinstance(sample_shape, int) else tuple(sample_shape)
        with _ag.no_grad():
            cumulative = _ag.cumsum(self.probs, -1).reshape(-1, self._num_events)
            u = standard_uniform((cumulative.shape[0], math.prod(sample_shape)), cumulative) * cumulative[:, -1:]
            # The index is the number of categories whose cumulative probability
            # the draw reaches (a binary search per draw): zero-probability
            # categories are never drawn; the clamp only guards rounding.
            index = _ag.clamp(searchsorted(cumulative, u, right=True), None, self._num_events - 1)
            return index.t().reshape(sample_shape + self._batch_shape)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        value = value.long().unsqueeze(-1)
        value, log_pmf = broadcast_tensors(value, self.logits)
        return _ag.gather(log_pmf, -1, value[..., :1]).squeeze(-1)

    def entropy(self):
        logits = _ag.clamp(self.logits, finite_min(self.logits.dtype), None)
        return -(logits * self.probs).sum(-1)

    def enumerate_support(self, expand=True):
        values = arange(self._num_events, device=self._param.device)
        values = values.reshape((-1,) + (1,) * len(self._batch_shape))
        return values.expand((-1,) + self._batch_shape) if expand else values

"""ExponentialFamily: distributions whose density is
exp(<t(x), theta> - F(theta) + k(x)); the entropy and the KL divergence
between two members of one family follow from the log normalizer F by
automatic differentiation (Bregman divergence)."""

from .. import autograd as _ag
from .distribution import Distribution
from .utils import sum_rightmost

__all__ = ["ExponentialFamily"]


class ExponentialFamily(Distribution):
    """A distribution of an exponential family. Subclasses give
    ``_natural_params``, ``_log_normalizer`` and ``_mean_carrier_measure``
    (the expected carrier measure E[k(x)])."""

    @property
    def _natural_params(self):
        """The natural parameters theta, a tuple of tensors."""
        raise NotImplementedError

    def _log_normalizer(self, *natural_params):
        """The log normalizer F(theta)."""
        raise NotImplementedError

    @property
    def _mean_carrier_measure(self):
        raise NotImplementedError

    def _log_normalizer_with_gradients(self):
        """The natural parameters (as new leaves), F at them and grad F (the
        expected sufficient statistics), differentiable again."""
        natural_params = [p.detach().requires_grad_() for p in self._natural_params]
        with _ag.enable_grad():
            log_normal = self._log_normalizer(*natural_params)
            gradients = _ag.grad(log_normal.sum(), natural_params, create_graph=True)
        return natural_params, log_normal, gradients

    def entropy(self):
        """-E[k(x)] + F(theta) - <theta, grad F(theta)>, by the Bregman divergence."""
        natural_params, log_normal, gradients = self._log_normalizer_with_gradients()
        result = log_normal - self._mean_carrier_measure
        for theta, g in zip(natural_params, gradients):
            result = result - sum_rightmost(theta * g, len(self.event_shape))
        return result

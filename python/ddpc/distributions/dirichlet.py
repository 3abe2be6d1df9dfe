"""Dirichlet distribution on the simplex, of concentrations ``concentration``
along the last dim."""

from .. import autograd as _ag
from .._dtype import finfo, float64
from .._pointwise import xlogy
from ..nn.functional import one_hot
from . import constraints
from .exp_family import ExponentialFamily
from .gamma import rsample_standard_gamma

__all__ = ["Dirichlet"]


class Dirichlet(ExponentialFamily):
    """Vectors on the simplex with density proportional to prod x_i^(a_i - 1).
    Draws are Gamma(a_i, 1) draws divided by their sum, and their gradient
    is the gamma draws' implicit one carried through that division (PyTorch
    differentiates the Dirichlet's own cdf instead: the same expectation of
    the gradient, not the same gradient of each draw)."""

    arg_constraints = {"concentration": constraints.independent(constraints.positive, 1)}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, concentration, validate_args=None):
        if concentration.ndim < 1:
            raise ValueError("`concentration` parameter must be at least one-dimensional.")
        self.concentration = concentration
        super().__init__(concentration.shape[:-1], concentration.shape[-1:], validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_parameters(Dirichlet, batch_shape, _instance, ("concentration",), self.event_shape)

    def rsample(self, sample_shape=()):
        """Gamma draws normalised in float64, as PyTorch: at small concentrations
        they are far below float32's smallest normal number, where clamping
        them would tie the coordinates. As PyTorch's, the coordinates are then
        kept inside (0, 1), so that log_prob stays finite; that moves a draw by
        a rounding error and leaves its gradient alone."""
        concentration = self.concentration.expand(self._extended_shape(sample_shape))
        gammas = rsample_standard_gamma(concentration.to(dtype=float64))
        x = (gammas / gammas.sum(-1, keepdim=True)).to(dtype=concentration.dtype)
        info = finfo(x.dtype)
        inside = _ag.clamp(x.detach(), info.tiny, 1.0 - info.eps / 2)
        return x + (inside - x.detach())

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return (xlogy(self.concentration - 1.0, value).sum(-1) + _ag.lgamma(self.concentration.sum(-1))
                - _ag.lgamma(self.concentration).sum(-1))

    @property
    def mean(self):
        return self.concentration / self.concentration.sum(-1, keepdim=True)

    @property
    def mode(self):
        concentrationm1 = _ag.clamp(self.concentration - 1, 0.0, None)
        mode = concentrationm1 / concentrationm1.sum(-1, keepdim=True)
        # With every concentration below 1 the density is largest at a vertex.
        vertex = one_hot(_ag.argmax(mode, -1), concentrationm1.shape[-1]).to(dtype=mode.dtype)
        all_below_one = _ag.all_(self.concentration < 1, -1).unsqueeze(-1)
        return _ag.where(all_below_one, vertex, mode)

    @property
    def variance(self):
        con0 = self.concentration.sum(-1, keepdim=True)
        return self.concentration * (con0 - self.concentration) / (con0.pow(2) * (con0 + 1))

    def entropy(self):
        k = self.concentration.shape[-1]
        a0 = self.concentration.sum(-1)
        return (_ag.lgamma(self.concentration).sum(-1) - _ag.lgamma(a0) - (k - a0) * _ag.digamma(a0)
                - ((self.concentration - 1.0) * _ag.digamma(self.concentration)).sum(-1))

    @property
    def _natural_params(self):
        return (self.concentration,)

    def _log_normalizer(self, x):
        return _ag.lgamma(x).sum(-1) - _ag.lgamma(x.sum(-1))

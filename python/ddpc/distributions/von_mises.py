"""Von Mises distribution: a circular distribution of angles, of mean
direction ``loc`` and ``concentration``."""

import math

from .. import autograd as _ag
from .._dtype import float64
from .._pointwise import remainder
from .._random import rejection_rounds, uniform_draws
from . import constraints
from .distribution import Distribution
from .utils import broadcast_all

__all__ = ["VonMises"]


def _log_i0(x):
    """log I0(x) through the exponentially scaled Bessel function, which stays finite for large x."""
    return _ag.log(_ag.i0e(x)) + x


def _best_fisher(loc, concentration):
    """Von Mises draws (flat float64 tensors) by Best and Fisher's rejection
    from a wrapped Cauchy envelope, in [-pi, pi)."""
    kappa = concentration
    tau = 1 + _ag.sqrt(1 + 4 * kappa ** 2)
    rho = (tau - _ag.sqrt(2 * tau)) / (2 * kappa)
    # For small kappa the expression above cancels: its Taylor expansion is 1 / kappa + kappa.
    proposal_r = _ag.where(kappa < 1e-5, 1 / kappa + kappa, (1 + rho ** 2) / (2 * rho))

    def propose(kappa, r):
        z = _ag.cos(math.pi * uniform_draws(kappa.shape, kappa.device, None))
        u2 = uniform_draws(kappa.shape, kappa.device, None)
        u3 = uniform_draws(kappa.shape, kappa.device, None)
        f = (1 + r * z) / (r + z)
        c = kappa * (r - f)
        accept = _ag.logical_or(c * (2 - c) - u2 > 0, _ag.log(c / u2) + 1 - c >= 0)
        return accept, _ag.sign(u3 - 0.5) * _ag.acos(_ag.clamp(f, -1.0, 1.0))

    x = rejection_rounds((kappa, proposal_r), propose)
    return remainder(x + math.pi + loc, 2 * math.pi) - math.pi


class VonMises(Distribution):
    """Density exp(concentration * cos(x - loc)) / (2 pi I0(concentration));
    loc and values are angles (any real number, taken modulo 2 pi), draws lie
    in [-pi, pi). mean and variance are the circular ones. I0 is evaluated
    through ddpc.special.i0e (PyTorch uses polynomial approximations good to
    about 3e-7, so log_prob differs from PyTorch's by that much)."""

    arg_constraints = {"loc": constraints.real, "concentration": constraints.positive}
    support = constraints.real
    has_rsample = False

    def __init__(self, loc, concentration, validate_args=None):
        self.loc, self.concentration = broadcast_all(loc, concentration)
        super().__init__(self.loc.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_parameters(VonMises, batch_shape, _instance, ("loc", "concentration"))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return (self.concentration * _ag.cos(value - self.loc) - math.log(2 * math.pi)
                - _log_i0(self.concentration))

    def sample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        with _ag.no_grad():
            loc = self.loc.detach().to(dtype=float64).expand(shape).reshape(-1)
            kappa = self.concentration.detach().to(dtype=float64).expand(shape).reshape(-1)
            return _best_fisher(loc, kappa).to(dtype=self.loc.dtype).reshape(shape)

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        return 1 - _ag.i1e(self.concentration) / _ag.i0e(self.concentration)

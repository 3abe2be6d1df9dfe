"""LKJ distribution over the lower Cholesky factors of correlation matrices."""

import math

from .. import autograd as _ag
from .._dtype import finfo
from .._layout import diag_embed
from ..tensor import arange, zeros
from . import constraints
from .beta import Beta
from .distribution import Distribution
from .utils import broadcast_all, standard_normal

__all__ = ["LKJCholesky"]


class LKJCholesky(Distribution):
    """The distribution of the Cholesky factor L of a ``dim`` x ``dim``
    correlation matrix M = L L^T whose density is proportional to
    det(M)^(concentration - 1) (uniform over correlation matrices for
    concentration 1).

    Draws use the onion method (Lewandowski, Kurowicka and Joe, 2009,
    section 3.2) for all rows and batch elements at once: row k > 0 of L is
    sqrt(y_k) u_k on its k entries below the diagonal, with u_k uniform on the
    unit sphere and y_k ~ Beta(k / 2, concentration + (dim - 1 - k) / 2), and
    its diagonal entry takes the rest of the unit norm. PyTorch's sampler
    draws y_k from Beta(k - 1 / 2, ...) instead, which gives the rows below
    the second the wrong marginals (the correlations' variances differ from
    the LKJ distribution's); ddpc follows the paper. No rsample: the draws
    are not reparameterized.
    """

    arg_constraints = {"concentration": constraints.positive}
    support = constraints.corr_cholesky

    def __init__(self, dim, concentration=1.0, validate_args=None):
        if dim < 2:
            raise ValueError(f"Expected dim to be an integer greater than or equal to 2. Found dim={dim}.")
        self.dim = dim
        (self.concentration,) = broadcast_all(concentration)
        # The Beta draws of section 3.2 of the paper, one per row: row k > 0
        # takes Beta(k / 2, marginal_conc - (k - 1) / 2); row 0's is unused.
        marginal_conc = self.concentration + 0.5 * (self.dim - 2)
        offset = _ag.cat([zeros((1,), dtype=self.concentration.dtype, device=self.concentration.device),
                          arange(self.dim - 1, dtype=self.concentration.dtype, device=self.concentration.device)])
        self._beta = Beta(0.5 * (offset + 1), marginal_conc.unsqueeze(-1) - 0.5 * offset)
        super().__init__(self.concentration.shape, (dim, dim), validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(LKJCholesky, _instance)
        batch_shape = tuple(batch_shape)
        new.dim = self.dim
        new.concentration = self.concentration.expand(batch_shape)
        new._beta = self._beta.expand(batch_shape + (self.dim,))
        super(LKJCholesky, new).__init__(batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def sample(self, sample_shape=()):
        with _ag.no_grad():
            y = self._beta.sample(sample_shape).unsqueeze(-1)
            u_normal = _ag.tril(standard_normal(self._extended_shape(sample_shape), y), -1)
            norm = _ag.sqrt((u_normal * u_normal).sum(-1, keepdim=True))
            # The first row has no entry below the diagonal: its 0 / 0 becomes 0.
            u_hypersphere = _ag.where(norm > 0, u_normal / _ag.where(norm > 0, norm, 1.0), 0.0)
            w = _ag.sqrt(y) * u_hypersphere
            # The clamp keeps the diagonal real where rounding leaves the row's norm above 1.
            diag_elems = _ag.sqrt(_ag.clamp(1 - (w * w).sum(-1), finfo(w.dtype).tiny, None))
            return w + diag_embed(diag_elems)

    def log_prob(self, value):
        # The density of M is proportional to det(M)^(concentration - 1) =
        # prod_i L_ii^(2 (concentration - 1)), and the Jacobian of L -> M is
        # prod_i L_ii^(D - i) (i from 1): the density of L is prod_i L_ii^order_i
        # with order_i = 2 (concentration - 1) + D - i (the first factor is 1).
        if self._validate_args:
            self._validate_sample(value)
        diag_elems = value.diagonal(dim1=-2, dim2=-1)[..., 1:]
        order = arange(2, self.dim + 1, dtype=self.concentration.dtype, device=self.concentration.device)
        order = 2 * (self.concentration - 1).unsqueeze(-1) + self.dim - order
        unnormalized_log_pdf = (order * _ag.log(diag_elems)).sum(-1)
        # The normalizing constant (page 1999 of the paper); its pi term is
        # D (D - 1) / 4 log(pi), of which mvlgamma holds (D - 1) (D - 2) / 4 log(pi).
        dm1 = self.dim - 1
        alpha = self.concentration + 0.5 * dm1
        denominator = _ag.lgamma(alpha) * dm1
        numerator = _ag.mvlgamma(alpha - 0.5, dm1)
        pi_constant = 0.5 * dm1 * math.log(math.pi)
        return unnormalized_log_pdf - (pi_constant + numerator - denominator)

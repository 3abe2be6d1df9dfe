"""Wishart distribution over positive-definite matrices, of ``df`` degrees of
freedom and scale matrix given by its covariance, its precision or its
lower Cholesky factor."""

import math
import numbers
import warnings

from .. import autograd as _ag
from .. import linalg
from .._dtype import finfo
from .._layout import diag_embed
from .._matrix import cholesky_solve
from ..tensor import Tensor, arange, broadcast_shapes, eye, tensor
from . import constraints
from .chi2 import Chi2
from .exp_family import ExponentialFamily
from .multivariate_normal import half_log_det, scale_tril_of
from .utils import lazy_property, standard_normal

__all__ = ["Wishart"]

_LOG_2 = math.log(2)


def _mvdigamma(x, p):
    """The derivative of mvlgamma(x, p): the sum of digamma(x - i / 2) over i < p."""
    halves = arange(p, dtype=x.dtype, device=x.device) / 2
    return _ag.digamma(x.unsqueeze(-1) - halves).sum(-1)


class Wishart(ExponentialFamily):
    """The distribution of X^T X for the df x p matrix X whose rows are drawn
    from N(0, covariance_matrix) (df need not be an integer, only above
    p - 1). Give exactly one of a positive-definite ``covariance_matrix``, a
    positive-definite ``precision_matrix`` or its lower Cholesky factor
    ``scale_tril``; everything is computed from scale_tril (the others are
    factorized once). Its mean is df * covariance_matrix.

    Draws use the Bartlett decomposition: L A A^T L^T with L = scale_tril
    and A lower triangular, sqrt(Chi2(df - i)) on its diagonal and standard
    normals below it. They are reparameterized (the chi-squared draws carry
    the implicit gradient with respect to df). For df close to p - 1 a draw
    can be numerically singular; rsample redraws those (each round draws the
    whole shape again and keeps the new matrices only where the old ones
    fail the positive-definite check), at most ``max_try_correction``
    rounds, with a warning, as PyTorch. PyTorch's first check has its
    polarity inverted (it redraws the valid draws, keeps the singular ones
    and warns whenever a draw is valid); ddpc redraws the singular ones and
    warns only when there are some.
    """

    support = constraints.positive_definite
    has_rsample = True
    _mean_carrier_measure = 0

    @property
    def arg_constraints(self):
        return {"covariance_matrix": constraints.positive_definite,
                "precision_matrix": constraints.positive_definite,
                "scale_tril": constraints.lower_cholesky,
                "df": constraints.greater_than(self.event_shape[-1] - 1)}

    def __init__(self, df, covariance_matrix=None, precision_matrix=None, scale_tril=None, validate_args=None):
        given = [(name, m) for name, m in (("covariance_matrix", covariance_matrix),
                                           ("precision_matrix", precision_matrix), ("scale_tril", scale_tril))
                 if m is not None]
        if len(given) != 1:
            raise ValueError("Exactly one of covariance_matrix or precision_matrix or scale_tril may be specified.")
        ((name, param),) = given
        if param.ndim < 2:
            raise ValueError("scale_tril must be at least two-dimensional, with optional leading batch dimensions")
        if isinstance(df, numbers.Number):
            batch_shape = tuple(param.shape[:-2])
            self.df = tensor(float(df), dtype=param.dtype, device=param.device)
        elif isinstance(df, Tensor):
            batch_shape = broadcast_shapes(tuple(param.shape[:-2]), tuple(df.shape))
            self.df = df.expand(batch_shape)
        else:
            raise TypeError(f"df must be a number or a Tensor, got {type(df).__name__}")
        event_shape = tuple(param.shape[-2:])
        p = event_shape[-1]
        if bool(_ag.any_(self.df <= p - 1)):
            raise ValueError(f"Value of df={df} expected to be greater than ndim - 1 = {p - 1}.")
        setattr(self, name, param.expand(batch_shape + (-1, -1)))
        if bool(_ag.any_(self.df < p)):
            warnings.warn("Low df values detected. Singular samples are highly likely to occur for ndim - 1 < df < "
                          "ndim.", stacklevel=2)
        super().__init__(batch_shape, event_shape, validate_args=validate_args)
        self._unbroadcasted_scale_tril = scale_tril_of(scale_tril, covariance_matrix, precision_matrix)
        self._dist_chi2 = self._bartlett_chi2()

    def _bartlett_chi2(self):
        """Chi2(df - i) for the i-th diagonal entry of the Bartlett factor."""
        p = self._event_shape[-1]
        offsets = arange(p, dtype=self._unbroadcasted_scale_tril.dtype, device=self._unbroadcasted_scale_tril.device)
        return Chi2(self.df.unsqueeze(-1) - offsets.expand(self._batch_shape + (p,)))

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Wishart, _instance)
        batch_shape = tuple(batch_shape)
        matrix_shape = batch_shape + self.event_shape
        new._unbroadcasted_scale_tril = self._unbroadcasted_scale_tril.expand(matrix_shape)
        new.df = self.df.expand(batch_shape)
        for name in ("covariance_matrix", "scale_tril", "precision_matrix"):
            if name in self.__dict__:
                setattr(new, name, self.__dict__[name].expand(matrix_shape))
        super(Wishart, new).__init__(batch_shape, self.event_shape, validate_args=False)
        new._dist_chi2 = new._bartlett_chi2()
        new._validate_args = self._validate_args
        return new

    @lazy_property
    def scale_tril(self):
        return self._unbroadcasted_scale_tril.expand(self._batch_shape + self._event_shape)

    @lazy_property
    def covariance_matrix(self):
        L = self._unbroadcasted_scale_tril
        return _ag.matmul(L, L.mT).expand(self._batch_shape + self._event_shape)

    @lazy_property
    def precision_matrix(self):
        L = self._unbroadcasted_scale_tril
        identity = eye(self._event_shape[-1], dtype=L.dtype, device=L.device)
        return cholesky_solve(identity.expand(L.shape), L).expand(self._batch_shape + self._event_shape)

    def _df_matrix(self):
        """df with two trailing dims of size 1, to scale matrices."""
        return self.df.reshape(self._batch_shape + (1, 1))

    @property
    def mean(self):
        return self._df_matrix() * self.covariance_matrix

    @property
    def mode(self):
        factor = self.df - self.covariance_matrix.shape[-1] - 1
        factor = _ag.where(factor <= 0, math.nan, factor)
        return factor.reshape(self._batch_shape + (1, 1)) * self.covariance_matrix

    @property
    def variance(self):
        V = self.covariance_matrix
        diag_V = V.diagonal(dim1=-2, dim2=-1)
        return self._df_matrix() * (V.pow(2) + diag_V.unsqueeze(-1) * diag_V.unsqueeze(-2))

    def _bartlett_sampling(self, sample_shape):
        # sqrt of a chi-squared draw kept at least eps, so A stays invertible.
        chi = _ag.clamp(_ag.sqrt(self._dist_chi2.rsample(sample_shape)), finfo(self.df.dtype).eps, None)
        below = _ag.tril(standard_normal(self._extended_shape(sample_shape), chi), -1)
        factor = _ag.matmul(self._unbroadcasted_scale_tril, diag_embed(chi) + below)
        return _ag.matmul(factor, factor.mT)

    def rsample(self, sample_shape=(), max_try_correction=None):
        """A reparameterized draw; a numerically singular one is drawn again,
        at most max_try_correction (None: 10) rounds."""
        if max_try_correction is None:
            max_try_correction = 10
        sample = self._bartlett_sampling(sample_shape)
        valid = self.support.check(sample)
        if not bool(_ag.all_(valid)):
            warnings.warn("Singular sample detected.", stacklevel=2)
            for _ in range(max_try_correction):
                redrawn = self._bartlett_sampling(sample_shape)
                sample = _ag.where(valid.unsqueeze(-1).unsqueeze(-1), sample, redrawn)
                valid = self.support.check(sample)
                if bool(_ag.all_(valid)):
                    break
        return sample

    def _log_det_scale(self):
        """p log(2) / 2 + log det(scale_tril): a term of the log normalizer per degree of freedom."""
        return self._event_shape[-1] * _LOG_2 / 2 + half_log_det(self._unbroadcasted_scale_tril)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        nu = self.df
        p = self._event_shape[-1]
        trace = cholesky_solve(value, self._unbroadcasted_scale_tril).diagonal(dim1=-2, dim2=-1).sum(-1)
        return (-nu * self._log_det_scale() - _ag.mvlgamma(nu / 2, p)
                + (nu - p - 1) / 2 * linalg.slogdet(value).logabsdet - trace / 2)

    def entropy(self):
        nu = self.df
        p = self._event_shape[-1]
        return ((p + 1) * self._log_det_scale() + _ag.mvlgamma(nu / 2, p) - (nu - p - 1) / 2 * _mvdigamma(nu / 2, p)
                + nu * p / 2)

    @property
    def _natural_params(self):
        p = self._event_shape[-1]
        return -self.precision_matrix / 2, (self.df - p - 1) / 2

    def _log_normalizer(self, x, y):
        p = self._event_shape[-1]
        return ((y + (p + 1) / 2) * (-linalg.slogdet(-2 * x).logabsdet + _LOG_2 * p)
                + _ag.mvlgamma(y + (p + 1) / 2, p))

"""Multivariate normal distribution whose covariance is a low-rank matrix
plus a diagonal: cov_factor @ cov_factor.T + diag(cov_diag). Determinants
and solves go through the m x m capacitance matrix (m the rank) instead of
the n x n covariance."""

import math

from .. import autograd as _ag
from .. import linalg
from ..tensor import broadcast_tensors, eye
from . import constraints
from .distribution import Distribution
from .multivariate_normal import batch_mahalanobis, batch_mv, half_log_det
from .utils import lazy_property, standard_normal

__all__ = ["LowRankMultivariateNormal"]


def diag_embed(vectors):
    """Diagonal matrices with the vectors (along the last dim) on their diagonals."""
    n = vectors.shape[-1]
    return vectors.unsqueeze(-1) * eye(n, dtype=vectors.dtype, device=vectors.device)


def _batch_capacitance_tril(W, D):
    """The Cholesky factor of the capacitance matrix C = I + W^T D^{-1} W."""
    m = W.shape[-1]
    K = _ag.matmul(W.mT / D.unsqueeze(-2), W) + eye(m, dtype=W.dtype, device=W.device)
    return linalg.cholesky(K)


def batch_lowrank_logdet(W, D, capacitance_tril):
    """log det(W W^T + D) = log det(C) + log det(D) (the matrix determinant lemma)."""
    return 2 * half_log_det(capacitance_tril) + _ag.log(D).sum(-1)


def batch_lowrank_mahalanobis(W, D, x, capacitance_tril):
    """x^T (W W^T + D)^{-1} x by Woodbury's identity
    inv(W W^T + D) = inv(D) - inv(D) W inv(C) W^T inv(D)."""
    Wt_Dinv_x = batch_mv(W.mT / D.unsqueeze(-2), x)
    return (x.pow(2) / D).sum(-1) - batch_mahalanobis(capacitance_tril, Wt_Dinv_x)


def woodbury_factor(W, D, capacitance_tril):
    """A = inv(L_C) W^T inv(D), so that inv(W W^T + D) = inv(D) - A^T A."""
    return linalg.solve_triangular(capacitance_tril, W.mT / D.unsqueeze(-2), upper=False)


class LowRankMultivariateNormal(Distribution):
    """The multivariate normal distribution of mean ``loc`` and covariance
    cov_factor @ cov_factor.T + diag(cov_diag): cov_factor of shape
    batch_shape + (n, m), cov_diag (positive) of shape batch_shape + (n,).
    Where ddpc differs: the arguments are validated before the capacitance
    matrix is factored, so a non-positive cov_diag raises ValueError (PyTorch
    may raise its LinAlgError from the factorization first)."""

    arg_constraints = {"loc": constraints.real_vector, "cov_factor": constraints.independent(constraints.real, 2),
                       "cov_diag": constraints.independent(constraints.positive, 1)}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, cov_factor, cov_diag, validate_args=None):
        if loc.ndim < 1:
            raise ValueError("loc must be at least one-dimensional.")
        event_shape = tuple(loc.shape[-1:])
        if cov_factor.ndim < 2:
            raise ValueError("cov_factor must be at least two-dimensional, with optional leading batch dimensions")
        if tuple(cov_factor.shape[-2:-1]) != event_shape:
            raise ValueError(f"cov_factor must be a batch of matrices with shape {event_shape[0]} x m")
        if tuple(cov_diag.shape[-1:]) != event_shape:
            raise ValueError(f"cov_diag must be a batch of vectors with shape {event_shape}")
        try:
            loc_, self.cov_factor, cov_diag_ = broadcast_tensors(loc.unsqueeze(-1), cov_factor, cov_diag.unsqueeze(-1))
        except (RuntimeError, ValueError) as e:
            raise ValueError(f"Incompatible batch shapes: loc {tuple(loc.shape)}, cov_factor "
                             f"{tuple(cov_factor.shape)}, cov_diag {tuple(cov_diag.shape)}") from e
        self.loc = loc_[..., 0]
        self.cov_diag = cov_diag_[..., 0]
        self._unbroadcasted_cov_factor = cov_factor
        self._unbroadcasted_cov_diag = cov_diag
        super().__init__(self.loc.shape[:-1], event_shape, validate_args=validate_args)
        self._capacitance_tril = _batch_capacitance_tril(cov_factor, cov_diag)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(LowRankMultivariateNormal, _instance)
        loc_shape = tuple(batch_shape) + self.event_shape
        new.loc = self.loc.expand(loc_shape)
        new.cov_diag = self.cov_diag.expand(loc_shape)
        new.cov_factor = self.cov_factor.expand(loc_shape + tuple(self.cov_factor.shape[-1:]))
        new._unbroadcasted_cov_factor = self._unbroadcasted_cov_factor
        new._unbroadcasted_cov_diag = self._unbroadcasted_cov_diag
        new._capacitance_tril = self._capacitance_tril
        super(LowRankMultivariateNormal, new).__init__(tuple(batch_shape), self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _matrix_shape(self):
        return self._batch_shape + self._event_shape + self._event_shape

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @lazy_property
    def variance(self):
        return (self._unbroadcasted_cov_factor.pow(2).sum(-1) + self._unbroadcasted_cov_diag).expand(
            self._batch_shape + self._event_shape)

    @lazy_property
    def scale_tril(self):
        # W W^T + D = D^1/2 (I + D^-1/2 W W^T D^-1/2) D^1/2, and the middle
        # matrix has eigenvalues of at least 1: well conditioned for Cholesky.
        n = self._event_shape[0]
        cov_diag_sqrt = _ag.sqrt(self._unbroadcasted_cov_diag).unsqueeze(-1)
        Dinvsqrt_W = self._unbroadcasted_cov_factor / cov_diag_sqrt
        K = _ag.matmul(Dinvsqrt_W, Dinvsqrt_W.mT) + eye(n, dtype=Dinvsqrt_W.dtype, device=Dinvsqrt_W.device)
        return (cov_diag_sqrt * linalg.cholesky(K)).expand(self._matrix_shape())

    @lazy_property
    def covariance_matrix(self):
        W = self._unbroadcasted_cov_factor
        return (_ag.matmul(W, W.mT) + diag_embed(self._unbroadcasted_cov_diag)).expand(self._matrix_shape())

    @lazy_property
    def precision_matrix(self):
        A = woodbury_factor(self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag, self._capacitance_tril)
        precision = diag_embed(_ag.reciprocal(self._unbroadcasted_cov_diag)) - _ag.matmul(A.mT, A)
        return precision.expand(self._matrix_shape())

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        eps_W = standard_normal(shape[:-1] + tuple(self.cov_factor.shape[-1:]), self.loc)
        eps_D = standard_normal(shape, self.loc)
        return (self.loc + batch_mv(self._unbroadcasted_cov_factor, eps_W)
                + _ag.sqrt(self._unbroadcasted_cov_diag) * eps_D)

    def _logdet(self):
        return batch_lowrank_logdet(self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag,
                                    self._capacitance_tril)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        M = batch_lowrank_mahalanobis(self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag, value - self.loc,
                                      self._capacitance_tril)
        return -0.5 * (self._event_shape[0] * math.log(2 * math.pi) + self._logdet() + M)

    def entropy(self):
        H = 0.5 * (self._event_shape[0] * (1.0 + math.log(2 * math.pi)) + self._logdet())
        return H.expand(self._batch_shape)

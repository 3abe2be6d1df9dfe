"""Multivariate normal distribution N(loc, covariance_matrix), given by its
covariance, its precision or the lower Cholesky factor of its covariance,
and the batched matrix helpers it shares with LowRankMultivariateNormal."""

import math

from .. import autograd as _ag
from .. import linalg
from ..tensor import broadcast_shapes, eye
from . import constraints
from .distribution import Distribution
from .utils import lazy_property, standard_normal

__all__ = ["MultivariateNormal"]


def batch_mv(bmat, bvec):
    """Matrix-vector products over batch shapes that broadcast."""
    return _ag.matmul(bmat, bvec.unsqueeze(-1)).squeeze(-1)


def batch_mahalanobis(bL, bx):
    """x^T (L L^T)^{-1} x for lower-triangular factors bL and vectors bx whose
    batch shapes broadcast, in bL's dtype. The dims bx has beyond bL's batch dims become the
    columns of one triangular solve, so L is not repeated for every draw."""
    n = bx.shape[-1]
    outer = bx.ndim - bL.ndim + 1
    if outer < 0:
        bx = bx.reshape((1,) * -outer + tuple(bx.shape))
        outer = 0
    outer_shape = tuple(bx.shape[:outer])
    inner = broadcast_shapes(tuple(bL.shape[:-2]), tuple(bx.shape[outer:-1]))
    columns = bx.expand(outer_shape + inner + (n,)).reshape((math.prod(outer_shape),) + inner + (n,)).movedim(0, -1)
    # PyTorch's solve_triangular reads B in A's dtype, so the distance has bL's dtype (a float32 distribution's
    # log_prob of a float64 value is float32 there); ddpc's refuses mixed dtypes, so the cast is explicit.
    solved = linalg.solve_triangular(bL.expand(inner + (n, n)), columns.to(bL.dtype), upper=False)
    return solved.pow(2).sum(-2).movedim(-1, 0).reshape(outer_shape + inner)


def half_log_det(scale_tril):
    """log det(L) of lower-triangular factors: half the log-determinant of L L^T."""
    return _ag.log(scale_tril.diagonal(dim1=-2, dim2=-1)).sum(-1)


def _precision_to_scale_tril(P):
    """The lower Cholesky factor of inv(P), from the Cholesky factor of P with
    its rows and columns reversed (no explicit inverse of P)."""
    Lf = linalg.cholesky(_ag.flip(P, (-2, -1)))
    L_inv = _ag.flip(Lf, (-2, -1)).mT
    identity = eye(P.shape[-1], dtype=P.dtype, device=P.device)
    return linalg.solve_triangular(L_inv, identity, upper=False)


def scale_tril_of(scale_tril, covariance_matrix, precision_matrix):
    """The lower Cholesky factor of the covariance, from whichever of the three
    parametrisations was given (the others None)."""
    if scale_tril is not None:
        return scale_tril
    if covariance_matrix is not None:
        return linalg.cholesky(covariance_matrix)
    return _precision_to_scale_tril(precision_matrix)


class MultivariateNormal(Distribution):
    """The multivariate normal distribution of mean vector ``loc``, given by
    exactly one of a positive-definite ``covariance_matrix``, a positive-definite
    ``precision_matrix`` or the lower-triangular ``scale_tril`` (positive
    diagonal) with covariance scale_tril @ scale_tril.T. The matrix's batch
    dims broadcast with loc's. The factorizations run on the host (see
    ddpc.linalg)."""

    arg_constraints = {"loc": constraints.real_vector, "covariance_matrix": constraints.positive_definite,
                       "precision_matrix": constraints.positive_definite, "scale_tril": constraints.lower_cholesky}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, covariance_matrix=None, precision_matrix=None, scale_tril=None, validate_args=None):
        if loc.ndim < 1:
            raise ValueError("loc must be at least one-dimensional.")
        given = [(name, m) for name, m in (("scale_tril", scale_tril), ("covariance_matrix", covariance_matrix),
                                           ("precision_matrix", precision_matrix)) if m is not None]
        if len(given) != 1:
            raise ValueError("Exactly one of covariance_matrix or precision_matrix or scale_tril may be specified.")
        ((name, matrix),) = given
        if matrix.ndim < 2:
            raise ValueError(f"{name} matrix must be at least two-dimensional, with optional leading batch "
                             "dimensions")
        batch_shape = broadcast_shapes(tuple(matrix.shape[:-2]), tuple(loc.shape[:-1]))
        setattr(self, name, matrix.expand(batch_shape + (-1, -1)))
        self.loc = loc.expand(batch_shape + (-1,))
        super().__init__(batch_shape, self.loc.shape[-1:], validate_args=validate_args)
        self._unbroadcasted_scale_tril = scale_tril_of(scale_tril, covariance_matrix, precision_matrix)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(MultivariateNormal, _instance)
        batch_shape = tuple(batch_shape)
        n = self._event_shape[0]
        new.loc = self.loc.expand(batch_shape + (n,))
        new._unbroadcasted_scale_tril = self._unbroadcasted_scale_tril
        for name in ("covariance_matrix", "scale_tril", "precision_matrix"):
            if name in self.__dict__:
                setattr(new, name, self.__dict__[name].expand(batch_shape + (n, n)))
        super(MultivariateNormal, new).__init__(batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _matrix_shape(self):
        return self._batch_shape + self._event_shape + self._event_shape

    @lazy_property
    def scale_tril(self):
        return self._unbroadcasted_scale_tril.expand(self._matrix_shape())

    @lazy_property
    def covariance_matrix(self):
        L = self._unbroadcasted_scale_tril
        return _ag.matmul(L, L.mT).expand(self._matrix_shape())

    @lazy_property
    def precision_matrix(self):
        return self._unbroadcasted_scale_tril.cholesky_inverse().expand(self._matrix_shape())

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        return self._unbroadcasted_scale_tril.pow(2).sum(-1).expand(self._batch_shape + self._event_shape)

    def rsample(self, sample_shape=()):
        eps = standard_normal(self._extended_shape(sample_shape), self.loc)
        return self.loc + batch_mv(self._unbroadcasted_scale_tril, eps)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        M = batch_mahalanobis(self._unbroadcasted_scale_tril, value - self.loc)
        return -0.5 * (self._event_shape[0] * math.log(2 * math.pi) + M) - half_log_det(self._unbroadcasted_scale_tril)

    def entropy(self):
        H = 0.5 * self._event_shape[0] * (1.0 + math.log(2 * math.pi)) + half_log_det(self._unbroadcasted_scale_tril)
        return H.expand(self._batch_shape)

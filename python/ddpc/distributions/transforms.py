"""Transforms: invertible (or not) maps with the log absolute determinant of
their Jacobian, as torch.distributions.transforms; TransformedDistribution
pushes a base distribution through them."""

import math
import numbers
import operator
from functools import reduce

from .. import autograd as _ag
from .. import linalg
from .._dtype import finfo
from .._layout import diag_embed
from ..nn.functional import softplus
from ..tensor import Tensor, broadcast_shapes, eq, eye, full_like, ones, zeros, zeros_like
from . import constraints
from .utils import lazy_property, sum_rightmost, tril_matrix_to_vec, vec_to_tril_matrix

__all__ = ["AbsTransform", "AffineTransform", "CatTransform", "ComposeTransform", "CorrCholeskyTransform",
           "CumulativeDistributionTransform", "ExpTransform", "IndependentTransform", "LowerCholeskyTransform",
           "PositiveDefiniteTransform", "PowerTransform", "ReshapeTransform", "SigmoidTransform", "SoftmaxTransform",
           "SoftplusTransform", "StackTransform", "StickBreakingTransform", "TanhTransform", "Transform",
           "identity_transform"]


class Transform:
    """A map x -> y with ``_call``, its inverse ``_inverse`` and
    ``log_abs_det_jacobian(x, y)``. ``cache_size=1`` keeps the latest (x, y)
    pair so that inverting a value the transform just produced returns the
    original x exactly (as TransformedDistribution.rsample then log_prob does).

    ``domain`` and ``codomain`` are constraints; ``bijective`` and ``sign``
    (of the Jacobian's determinant) describe the map."""

    bijective = False
    domain = constraints.real
    codomain = constraints.real

    def __init__(self, cache_size=0):
        if cache_size not in (0, 1):
            raise ValueError("cache_size must be 0 or 1")
        self._cache_size = cache_size
        self._inv = None
        if cache_size == 1:
            self._cached_x_y = None, None
        super().__init__()

    @property
    def event_dim(self):
        if self.domain.event_dim == self.codomain.event_dim:
            return self.domain.event_dim
        raise ValueError("Please use either .domain.event_dim or .codomain.event_dim")

    @property
    def inv(self):
        """The inverse transform; ``t.inv.inv is t``."""
        if self._inv is None:
            self._inv = _InverseTransform(self)
        return self._inv

    @property
    def sign(self):
        """The sign of the Jacobian's determinant (for bijective transforms)."""
        raise NotImplementedError

    def with_cache(self, cache_size=1):
        if self._cache_size == cache_size:
            return self
        if type(self).__init__ is Transform.__init__:
            return type(self)(cache_size=cache_size)
        raise NotImplementedError(f"{type(self)}.with_cache is not implemented")

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = object.__hash__

    def __call__(self, x):
        if self._cache_size == 0:
            return self._call(x)
        x_old, y_old = self._cached_x_y
        if x is x_old:
            return y_old
        y = self._call(x)
        self._cached_x_y = x, y
        return y

    def _inv_call(self, y):
        if self._cache_size == 0:
            return self._inverse(y)
        x_old, y_old = self._cached_x_y
        if y is y_old:
            return x_old
        x = self._inverse(y)
        self._cached_x_y = x, y
        return x

    def _call(self, x):
        raise NotImplementedError

    def _inverse(self, y):
        raise NotImplementedError

    def log_abs_det_jacobian(self, x, y):
        """log |dy/dx| at the pair (x, y = self(x))."""
        raise NotImplementedError

    def __repr__(self):
        return self.__class__.__name__ + "()"

    def forward_shape(self, shape):
        """The shape of the output for an input of ``shape``."""
        return tuple(shape)

    def inverse_shape(self, shape):
        """The shape of the input for an output of ``shape``."""
        return tuple(shape)


class _InverseTransform(Transform):
    """The inverse of a transform; reach it as ``transform.inv``."""

    def __init__(self, transform):
        super().__init__(cache_size=transform._cache_size)
        self._inv = transform

    @constraints.dependent_property(is_discrete=False)
    def domain(self):
        return self._inv.codomain

    @constraints.dependent_property(is_discrete=False)
    def codomain(self):
        return self._inv.domain

    @property
    def bijective(self):
        return self._inv.bijective

    @property
    def sign(self):
        return self._inv.sign

    @property
    def inv(self):
        return self._inv

    def with_cache(self, cache_size=1):
        return self.inv.with_cache(cache_size).inv

    def __eq__(self, other):
        return isinstance(other, _InverseTransform) and self._inv == other._inv

    __hash__ = object.__hash__

    def __repr__(self):
        return f"{self.__class__.__name__}({self._inv!r})"

    def __call__(self, x):
        return self._inv._inv_call(x)

    def log_abs_det_jacobian(self, x, y):
        return -self._inv.log_abs_det_jacobian(y, x)

    def forward_shape(self, shape):
        return self._inv.inverse_shape(shape)

    def inverse_shape(self, shape):
        return self._inv.forward_shape(shape)


class ComposeTransform(Transform):
    """The transforms of ``parts`` applied in order (an empty list is the identity)."""

    def __init__(self, parts, cache_size=0):
        if cache_size:
            parts = [part.with_cache(cache_size) for part in parts]
        super().__init__(cache_size=cache_size)
        self.parts = list(parts)

    def __eq__(self, other):
        return isinstance(other, ComposeTransform) and self.parts == other.parts

    __hash__ = object.__hash__

    @constraints.dependent_property(is_discrete=False)
    def domain(self):
        if not self.parts:
            return constraints.real
        domain = self.parts[0].domain
        event_dim = self.parts[-1].codomain.event_dim
        for part in reversed(self.parts):
            event_dim = max(event_dim + part.domain.event_dim - part.codomain.event_dim, part.domain.event_dim)
        if event_dim > domain.event_dim:
            domain = constraints.independent(domain, event_dim - domain.event_dim)
        return domain

    @constraints.dependent_property(is_discrete=False)
    def codomain(self):
        if not self.parts:
            return constraints.real
        codomain = self.parts[-1].codomain
        event_dim = self.parts[0].domain.event_dim
        for part in self.parts:
            event_dim = max(event_dim + part.codomain.event_dim - part.domain.event_dim, part.codomain.event_dim)
        if event_dim > codomain.event_dim:
            codomain = constraints.independent(codomain, event_dim - codomain.event_dim)
        return codomain

    @lazy_property
    def bijective(self):
        return all(p.bijective for p in self.parts)

    @lazy_property
    def sign(self):
        return reduce(operator.mul, (p.sign for p in self.parts), 1)

    @property
    def inv(self):
        if self._inv is None:
            self._inv = ComposeTransform([p.inv for p in reversed(self.parts)])
            self._inv._inv = self
        return self._inv

    def with_cache(self, cache_size=1):
        if self._cache_size == cache_size:
            return self
        return ComposeTransform(self.parts, cache_size=cache_size)

    def __call__(self, x):
        for part in self.parts:
            x = part(x)
        return x

    def log_abs_det_jacobian(self, x, y):
        if not self.parts:
            return zeros_like(x)
        xs = [x]
        for part in self.parts[:-1]:
            xs.append(part(xs[-1]))
        xs.append(y)
        terms = []
        event_dim = self.domain.event_dim
        for part, x_in, y_out in zip(self.parts, xs[:-1], xs[1:]):
            terms.append(sum_rightmost(part.log_abs_det_jacobian(x_in, y_out), event_dim - part.domain.event_dim))
            event_dim += part.codomain.event_dim - part.domain.event_dim
        return reduce(operator.add, terms)

    def forward_shape(self, shape):
        for part in self.parts:
            shape = part.forward_shape(shape)
        return tuple(shape)

    def inverse_shape(self, shape):
        for part in reversed(self.parts):
            shape = part.inverse_shape(shape)
        return tuple(shape)

    def __repr__(self):
        return self.__class__.__name__ + "(\n    " + ",\n    ".join(repr(p) for p in self.parts) + "\n)"


identity_transform = ComposeTransform([])


class IndependentTransform(Transform):
    """base_transform with its ``reinterpreted_batch_ndims`` rightmost batch dims
    treated as event dims (its log-determinant summed over them)."""

    def __init__(self, base_transform, reinterpreted_batch_ndims, cache_size=0):
        super().__init__(cache_size=cache_size)
        self.base_transform = base_transform.with_cache(cache_size)
        self.reinterpreted_batch_ndims = reinterpreted_batch_ndims

    def with_cache(self, cache_size=1):
        if self._cache_size == cache_size:
            return self
        return IndependentTransform(self.base_transform, self.reinterpreted_batch_ndims, cache_size=cache_size)

    @constraints.dependent_property(is_discrete=False)
    def domain(self):
        return constraints.independent(self.base_transform.domain, self.reinterpreted_batch_ndims)

    @constraints.dependent_property(is_discrete=False)
    def codomain(self):
        return constraints.independent(self.base_transform.codomain, self.reinterpreted_batch_ndims)

    @property
    def bijective(self):
        return self.base_transform.bijective

    @property
    def sign(self):
        return self.base_transform.sign

    def _call(self, x):
        if x.ndim < self.domain.event_dim:
            raise ValueError("Too few dimensions on input")
        return self.base_transform(x)

    def _inverse(self, y):
        if y.ndim < self.codomain.event_dim:
            raise ValueError("Too few dimensions on input")
        return self.base_transform.inv(y)

    def log_abs_det_jacobian(self, x, y):
        return sum_rightmost(self.base_transform.log_abs_det_jacobian(x, y), self.reinterpreted_batch_ndims)

    def __repr__(self):
        return f"{self.__class__.__name__}({self.base_transform!r}, {self.reinterpreted_batch_ndims})"

    def forward_shape(self, shape):
        return self.base_transform.forward_shape(shape)

    def inverse_shape(self, shape):
        return self.base_transform.inverse_shape(shape)


class ReshapeTransform(Transform):
    """Reshapes the rightmost ``in_shape`` dims into ``out_shape`` (of as
    many elements); the Jacobian is the identity's."""

    bijective = True

    def __init__(self, in_shape, out_shape, cache_size=0):
        self.in_shape = tuple(in_shape)
        self.out_shape = tuple(out_shape)
        if math.prod(self.in_shape) != math.prod(self.out_shape):
            raise ValueError("in_shape, out_shape have different numbers of elements")
        super().__init__(cache_size=cache_size)

    @constraints.dependent_property(is_discrete=False)
    def domain(self):
        return constraints.independent(constraints.real, len(self.in_shape))

    @constraints.dependent_property(is_discrete=False)
    def codomain(self):
        return constraints.independent(constraints.real, len(self.out_shape))

    def with_cache(self, cache_size=1):
        if self._cache_size == cache_size:
            return self
        return ReshapeTransform(self.in_shape, self.out_shape, cache_size=cache_size)

    def _call(self, x):
        return x.reshape(tuple(x.shape[:x.ndim - len(self.in_shape)]) + self.out_shape)

    def _inverse(self, y):
        return y.reshape(tuple(y.shape[:y.ndim - len(self.out_shape)]) + self.in_shape)

    def log_abs_det_jacobian(self, x, y):
        return zeros(tuple(x.shape[:x.ndim - len(self.in_shape)]), dtype=x.dtype, device=x.device)

    @staticmethod
    def _replace_rightmost(shape, old, new):
        shape = tuple(shape)
        if len(shape) < len(old):
            raise ValueError("Too few dimensions on input")
        cut = len(shape) - len(old)
        if shape[cut:] != old:
            raise ValueError(f"Shape mismatch: expected {shape[cut:]} but got {old}")
        return shape[:cut] + new

    def forward_shape(self, shape):
        return self._replace_rightmost(shape, self.in_shape, self.out_shape)

    def inverse_shape(self, shape):
        return self._replace_rightmost(shape, self.out_shape, self.in_shape)


class ExpTransform(Transform):
    """y = exp(x)."""

    domain = constraints.real
    codomain = constraints.positive
    bijective = True
    sign = +1

    def __eq__(self, other):
        return isinstance(other, ExpTransform)

    __hash__ = object.__hash__

    def _call(self, x):
        return _ag.exp(x)

    def _inverse(self, y):
        return _ag.log(y)

    def log_abs_det_jacobian(self, x, y):
        return x


class PowerTransform(Transform):
    """y = x ** exponent on the positive numbers."""

    domain = constraints.positive
    codomain = constraints.positive
    bijective = True

    def __init__(self, exponent, cache_size=0):
        super().__init__(cache_size=cache_size)
        self.exponent = exponent

    def with_cache(self, cache_size=1):
        if self._cache_size == cache_size:
            return self
        return PowerTransform(self.exponent, cache_size=cache_size)

    @lazy_property
    def sign(self):
        if isinstance(self.exponent, numbers.Number):
            return (self.exponent > 0) - (self.exponent < 0)
        return _ag.sign(self.exponent)

    def __eq__(self, other):
        if not isinstance(other, PowerTransform):
            return False
        return _same(self.exponent, other.exponent)

    __hash__ = object.__hash__

    def _call(self, x):
        return _ag.pow(x, self.exponent)

    def _inverse(self, y):
        return _ag.pow(y, 1 / self.exponent)

    def log_abs_det_jacobian(self, x, y):
        return _ag.log(_ag.abs(self.exponent * y / x))

    def forward_shape(self, shape):
        return broadcast_shapes(tuple(shape), getattr(self.exponent, "shape", ()))

    def inverse_shape(self, shape):
        return broadcast_shapes(tuple(shape), getattr(self.exponent, "shape", ()))


def _clipped_sigmoid(x):
    """sigmoid(x) kept inside [tiny, 1 - eps] of x's dtype."""
    fi = finfo(x.dtype)
    return _ag.clamp(_ag.sigmoid(x), fi.tiny, 1.0 - fi.eps)


class SigmoidTransform(Transform):
    """y = 1 / (1 + exp(-x)), kept away from 0 and 1."""

    domain = constraints.real
    codomain = constraints.unit_interval
    bijective = True
    sign = +1

    def __eq__(self, other):
        return isinstance(other, SigmoidTransform)

    __hash__ = object.__hash__

    def _call(self, x):
        return _clipped_sigmoid(x)

    def _inverse(self, y):
        fi = finfo(y.dtype)
        y = _ag.clamp(y, fi.tiny, 1.0 - fi.eps)
        return _ag.log(y) - _ag.log1p(-y)

    def log_abs_det_jacobian(self, x, y):
        return -softplus(-x) - softplus(x)


class SoftplusTransform(Transform):
    """y = log(1 + exp(x)) (x itself where x > 20)."""

    domain = constraints.real
    codomain = constraints.positive
    bijective = True
    sign = +1

    def __eq__(self, other):
        return isinstance(other, SoftplusTransform)

    __hash__ = object.__hash__

    def _call(self, x):
        return softplus(x)

    def _inverse(self, y):
        return _ag.log(-_ag.expm1(-y)) + y

    def log_abs_det_jacobian(self, x, y):
        return -softplus(-x)


class TanhTransform(Transform):
    """y = tanh(x); the inverse is atanh. The log-determinant is computed as
    2 * (log 2 - x - softplus(-2x)), which stays accurate for large |x|."""

    domain = constraints.real
    codomain = constraints.interval(-1.0, 1.0)
    bijective = True
    sign = +1

    def __eq__(self, other):
        return isinstance(other, TanhTransform)

    __hash__ = object.__hash__

    def _call(self, x):
        return _ag.tanh(x)

    def _inverse(self, y):
        return 0.5 * (_ag.log1p(y) - _ag.log1p(-y))

    def log_abs_det_jacobian(self, x, y):
        return 2.0 * (math.log(2.0) - x - softplus(-2.0 * x))


class AbsTransform(Transform):
    """y = |x|; not bijective: the inverse gives the non-negative root."""

    domain = constraints.real
    codomain = constraints.positive

    def __eq__(self, other):
        return isinstance(other, AbsTransform)

    __hash__ = object.__hash__

    def _call(self, x):
        return _ag.abs(x)

    def _inverse(self, y):
        return y


class AffineTransform(Transform):
    """y = loc + scale * x; ``event_dim`` rightmost dims form one event (the
    log-determinant is summed over them)."""

    bijective = True

    def __init__(self, loc, scale, event_dim=0, cache_size=0):
        super().__init__(cache_size=cache_size)
        self.loc = loc
        self.scale = scale
        self._event_dim = event_dim

    @property
    def event_dim(self):
        return self._event_dim

    @constraints.dependent_property(is_discrete=False)
    def domain(self):
        return constraints.real if self.event_dim == 0 else constraints.independent(constraints.real, self.event_dim)

    @constraints.dependent_property(is_discrete=False)
    def codomain(self):
        return constraints.real if self.event_dim == 0 else constraints.independent(constraints.real, self.event_dim)

    def with_cache(self, cache_size=1):
        if self._cache_size == cache_size:
            return self
        return AffineTransform(self.loc, self.scale, self.event_dim, cache_size=cache_size)

    def __eq__(self, other):
        if not isinstance(other, AffineTransform):
            return False
        return _same(self.loc, other.loc) and _same(self.scale, other.scale)

    __hash__ = object.__hash__

    @property
    def sign(self):
        if isinstance(self.scale, numbers.Real):
            return 1 if float(self.scale) > 0 else -1 if float(self.scale) < 0 else 0
        return _ag.sign(self.scale)

    def _call(self, x):
        return self.loc + self.scale * x

    def _inverse(self, y):
        return (y - self.loc) / self.scale

    def log_abs_det_jacobian(self, x, y):
        shape = x.shape
        if isinstance(self.scale, numbers.Number):
            result = full_like(x, math.log(abs(self.scale)))
        else:
            result = _ag.log(_ag.abs(self.scale))
        if self.event_dim:
            result = result.reshape(result.shape[:result.ndim - self.event_dim] + (-1,)).sum(-1)
            shape = shape[:len(shape) - self.event_dim]
        return result.expand(shape)

    def forward_shape(self, shape):
        return broadcast_shapes(tuple(shape), getattr(self.loc, "shape", ()), getattr(self.scale, "shape", ()))

    def inverse_shape(self, shape):
        return broadcast_shapes(tuple(shape), getattr(self.loc, "shape", ()), getattr(self.scale, "shape", ()))


def _same(a, b):
    """Whether two numbers or tensors hold equal values."""
    if isinstance(a, numbers.Number) and isinstance(b, numbers.Number):
        return a == b
    return bool(_ag.all_(eq(a, b) if isinstance(a, Tensor) else eq(b, a)))


class SoftmaxTransform(Transform):
    """Unconstrained vectors to the simplex: exp(x) normalized along the last
    dim. Not bijective (adding a constant to x gives the same y); the inverse is log."""

    domain = constraints.real_vector
    codomain = constraints.simplex

    def __eq__(self, other):
        return isinstance(other, SoftmaxTransform)

    __hash__ = object.__hash__

    def _call(self, x):
        probs = _ag.exp(x - _ag.amax(x, -1, keepdim=True))
        return probs / probs.sum(-1, keepdim=True)

    def _inverse(self, y):
        return _ag.log(y)

    def forward_shape(self, shape):
        if len(shape) < 1:
            raise ValueError("Too few dimensions on input")
        return tuple(shape)

    def inverse_shape(self, shape):
        if len(shape) < 1:
            raise ValueError("Too few dimensions on input")
        return tuple(shape)


class StickBreakingTransform(Transform):
    """Unconstrained vectors of size K - 1 to the simplex of size K by stick
    breaking: each coordinate takes a sigmoid share of what is left. Bijective,
    with an offset that maps zero to the uniform point of the simplex."""

    domain = constraints.real_vector
    codomain = constraints.simplex
    bijective = True

    def __eq__(self, other):
        return isinstance(other, StickBreakingTransform)

    __hash__ = object.__hash__

    @staticmethod
    def _offset(x, size):
        """log(K - 1), log(K - 2), ..., log(1) for the K - 1 coordinates."""
        counts = ones(size, dtype=x.dtype, device=x.device).cumsum(-1)
        return _ag.log(size + 1 - counts)

    def _call(self, x):
        z = _clipped_sigmoid(x - self._offset(x, x.shape[-1]))
        remaining = _ag.cumprod(1 - z, -1)
        one = ones(x.shape[:-1] + (1,), dtype=x.dtype, device=x.device)
        return _ag.cat([z, one], -1) * _ag.cat([one, remaining], -1)

    def _inverse(self, y):
        y_crop = y[..., :-1]
        survival = _ag.clamp(1 - y_crop.cumsum(-1), finfo(y.dtype).tiny, None)
        return _ag.log(y_crop) - _ag.log(survival) + self._offset(y, y_crop.shape[-1])

    def log_abs_det_jacobian(self, x, y):
        x = x - self._offset(x, x.shape[-1])
        return (-x - softplus(-x) + _ag.log(y[..., :-1])).sum(-1)

    def forward_shape(self, shape):
        if len(shape) < 1:
            raise ValueError("Too few dimensions on input")
        return tuple(shape[:-1]) + (shape[-1] + 1,)

    def inverse_shape(self, shape):
        if len(shape) < 1:
            raise ValueError("Too few dimensions on input")
        return tuple(shape[:-1]) + (shape[-1] - 1,)


def _shift_right_with_one(t):
    """t moved one place right along its last dim, with a 1 in front (its last entry dropped)."""
    one = ones(tuple(t.shape[:-1]) + (1,), dtype=t.dtype, device=t.device)
    return _ag.cat([one, t[..., :-1]], -1)


class CorrCholeskyTransform(Transform):
    """Unconstrained vectors of size D (D - 1) / 2 to Cholesky factors of D x D
    correlation matrices (lower triangular, positive diagonal, rows of unit
    norm). The vector fills the strict lower triangle in row order; each row
    r = tanh(x) is then made a unit vector by a signed stick breaking:
    y_ij = r_ij sqrt(1 - sum_{k<j} y_ik^2), with the diagonal taking the rest.
    The log-determinant is that of the map from x to the strict lower
    triangle of y (the diagonal is determined by it)."""

    domain = constraints.real_vector
    codomain = constraints.corr_cholesky
    bijective = True

    def _call(self, x):
        eps = finfo(x.dtype).eps
        r = vec_to_tril_matrix(_ag.clamp(_ag.tanh(x), -1 + eps, 1 - eps), diag=-1)
        # sign(r) sqrt(z (1 - z) cumprod) = r sqrt((1 - z) cumprod) with z = r^2.
        remaining = _ag.cumprod(_ag.sqrt(1 - r * r), -1)
        r = r + eye(r.shape[-1], dtype=r.dtype, device=r.device)
        return r * _shift_right_with_one(remaining)

    def _inverse(self, y):
        remaining = _shift_right_with_one(1 - _ag.cumsum(y * y, -1))
        t = tril_matrix_to_vec(y, diag=-1) / _ag.sqrt(tril_matrix_to_vec(remaining, diag=-1))
        return 0.5 * (_ag.log1p(t) - _ag.log1p(-t))

    def log_abs_det_jacobian(self, x, y):
        # Below the first subdiagonal, 1 - cumsum(y^2) is already the share
        # left before each entry, so no shift is needed (this also holds for D = 2).
        remaining = tril_matrix_to_vec(1 - _ag.cumsum(y * y, -1), diag=-2)
        stick_breaking_logdet = 0.5 * _ag.log(remaining).sum(-1)
        tanh_logdet = -2 * (x + softplus(-2 * x) - math.log(2.0)).sum(-1)
        return stick_breaking_logdet + tanh_logdet

    def forward_shape(self, shape):
        if len(shape) < 1:
            raise ValueError("Too few dimensions on input")
        n = shape[-1]
        d = round((0.25 + 2 * n) ** 0.5 + 0.5)
        if d * (d - 1) // 2 != n:
            raise ValueError("Input is not a flattened lower-diagonal number")
        return tuple(shape[:-1]) + (d, d)

    def inverse_shape(self, shape):
        if len(shape) < 2:
            raise ValueError("Too few dimensions on input")
        if shape[-2] != shape[-1]:
            raise ValueError("Input is not square")
        d = shape[-1]
        return tuple(shape[:-2]) + (d * (d - 1) // 2,)


class LowerCholeskyTransform(Transform):
    """Unconstrained square matrices to lower-triangular ones with a positive
    diagonal: the strict lower triangle is kept and the diagonal exponentiated
    (the upper triangle is dropped, so the map is not bijective)."""

    domain = constraints.independent(constraints.real, 2)
    codomain = constraints.lower_cholesky

    def __eq__(self, other):
        return isinstance(other, LowerCholeskyTransform)

    __hash__ = object.__hash__

    def _call(self, x):
        return _ag.tril(x, -1) + diag_embed(_ag.exp(x.diagonal(dim1=-2, dim2=-1)))

    def _inverse(self, y):
        return _ag.tril(y, -1) + diag_embed(_ag.log(y.diagonal(dim1=-2, dim2=-1)))


class PositiveDefiniteTransform(Transform):
    """Unconstrained square matrices to positive-definite ones: L L^T with L
    the LowerCholeskyTransform of the input (not bijective)."""

    domain = constraints.independent(constraints.real, 2)
    codomain = constraints.positive_definite

    def __eq__(self, other):
        return isinstance(other, PositiveDefiniteTransform)

    __hash__ = object.__hash__

    def _call(self, x):
        x = LowerCholeskyTransform()(x)
        return _ag.matmul(x, x.mT)

    def _inverse(self, y):
        return LowerCholeskyTransform().inv(linalg.cholesky(y))


def _check_pieces(t, dim, size, expected, what):
    """Checks that ``dim`` is a dim of t and that it has ``expected`` entries."""
    if not -t.ndim <= dim < t.ndim:
        raise ValueError(f"{what}: dim {dim} out of range for a tensor of {t.ndim} dims")
    if t.shape[dim] != expected:
        raise ValueError(f"{what}: size {t.shape[dim]} of dim {dim} must equal {size} {expected}")


class CatTransform(Transform):
    """The transforms of ``tseq`` applied to consecutive pieces of ``dim`` of
    sizes ``lengths`` (1 each when None), as torch.cat joins tensors."""

    def __init__(self, tseq, dim=0, lengths=None, cache_size=0):
        if not all(isinstance(t, Transform) for t in tseq):
            raise TypeError("CatTransform: every element of tseq must be a Transform")
        if cache_size:
            tseq = [t.with_cache(cache_size) for t in tseq]
        super().__init__(cache_size=cache_size)
        self.transforms = list(tseq)
        self.lengths = [1] * len(self.transforms) if lengths is None else list(lengths)
        if len(self.lengths) != len(self.transforms):
            raise ValueError(f"CatTransform: {len(self.transforms)} transforms but {len(self.lengths)} lengths")
        self.dim = dim

    @property
    def event_dim(self):
        return max(t.event_dim for t in self.transforms)

    @property
    def length(self):
        return sum(self.lengths)

    def with_cache(self, cache_size=1):
        if self._cache_size == cache_size:
            return self
        return CatTransform(self.transforms, self.dim, self.lengths, cache_size)

    def _pieces(self, t):
        _check_pieces(t, self.dim, "length", self.length, "CatTransform")
        return _ag.split_with_sizes(t, self.lengths, self.dim)

    def _call(self, x):
        return _ag.cat([t(piece) for t, piece in zip(self.transforms, self._pieces(x))], self.dim)

    def _inverse(self, y):
        return _ag.cat([t.inv(piece) for t, piece in zip(self.transforms, self._pieces(y))], self.dim)

    def log_abs_det_jacobian(self, x, y):
        event_dim = self.event_dim
        terms = [sum_rightmost(t.log_abs_det_jacobian(xp, yp), event_dim - t.event_dim)
                 for t, xp, yp in zip(self.transforms, self._pieces(x), self._pieces(y))]
        # Pieces of a batch dim stay side by side; pieces of an event dim add up.
        dim = (self.dim - x.ndim if self.dim >= 0 else self.dim) + event_dim
        return _ag.cat(terms, dim) if dim < 0 else reduce(operator.add, terms)

    @property
    def bijective(self):
        return all(t.bijective for t in self.transforms)

    @constraints.dependent_property(is_discrete=False)
    def domain(self):
        return constraints.cat([t.domain for t in self.transforms], self.dim, self.lengths)

    @constraints.dependent_property(is_discrete=False)
    def codomain(self):
        return constraints.cat([t.codomain for t in self.transforms], self.dim, self.lengths)


class StackTransform(Transform):
    """The transforms of ``tseq`` applied to the slices of ``dim``, as
    torch.stack joins tensors."""

    def __init__(self, tseq, dim=0, cache_size=0):
        if not all(isinstance(t, Transform) for t in tseq):
            raise TypeError("StackTransform: every element of tseq must be a Transform")
        if cache_size:
            tseq = [t.with_cache(cache_size) for t in tseq]
        super().__init__(cache_size=cache_size)
        self.transforms = list(tseq)
        self.dim = dim

    def with_cache(self, cache_size=1):
        if self._cache_size == cache_size:
            return self
        return StackTransform(self.transforms, self.dim, cache_size)

    def _slices(self, t):
        _check_pieces(t, self.dim, "the number of transforms", len(self.transforms), "StackTransform")
        return _ag.unbind(t, self.dim)

    def _call(self, x):
        return _ag.stack([t(s) for t, s in zip(self.transforms, self._slices(x))], self.dim)

    def _inverse(self, y):
        return _ag.stack([t.inv(s) for t, s in zip(self.transforms, self._slices(y))], self.dim)

    def log_abs_det_jacobian(self, x, y):
        return _ag.stack([t.log_abs_det_jacobian(xs, ys)
                          for t, xs, ys in zip(self.transforms, self._slices(x), self._slices(y))], self.dim)

    @property
    def bijective(self):
        return all(t.bijective for t in self.transforms)

    @constraints.dependent_property(is_discrete=False)
    def domain(self):
        return constraints.stack([t.domain for t in self.transforms], self.dim)

    @constraints.dependent_property(is_discrete=False)
    def codomain(self):
        return constraints.stack([t.codomain for t in self.transforms], self.dim)


class CumulativeDistributionTransform(Transform):
    """y = distribution.cdf(x), onto the unit interval; the inverse is its icdf
    and the log-determinant its log density (as a Gaussian copula is built
    from a MultivariateNormal and the cdf of Normal(0, 1))."""

    bijective = True
    codomain = constraints.unit_interval
    sign = +1

    def __init__(self, distribution, cache_size=0):
        super().__init__(cache_size=cache_size)
        self.distribution = distribution

    @property
    def domain(self):
        return self.distribution.support

    def _call(self, x):
        return self.distribution.cdf(x)

    def _inverse(self, y):
        return self.distribution.icdf(y)

    def log_abs_det_jacobian(self, x, y):
        return self.distribution.log_prob(x)

    def with_cache(self, cache_size=1):
        if self._cache_size == cache_size:
            return self
        return CumulativeDistributionTransform(self.distribution, cache_size=cache_size)

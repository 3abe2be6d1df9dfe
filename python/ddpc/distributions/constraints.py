"""Constraints: the regions a parameter or a value must lie in, as
torch.distributions.constraints. ``check(value)`` gives a bool tensor
over the value's batch dims: true where the event is valid."""

from .. import autograd as _ag
from .. import linalg
from .._dtype import bool_, finfo
from ..tensor import full

__all__ = ["Constraint", "boolean", "cat", "corr_cholesky", "dependent", "dependent_property", "greater_than",
           "greater_than_eq", "half_open_interval", "independent", "integer_interval", "interval", "is_dependent",
           "less_than", "lower_cholesky", "lower_triangular", "MixtureSameFamilyConstraint", "multinomial",
           "nonnegative", "nonnegative_integer", "one_hot", "positive", "positive_definite", "positive_integer",
           "positive_semidefinite", "real", "real_vector", "simplex", "square", "stack", "symmetric", "unit_interval"]


class Constraint:
    """A region over which a variable is valid. ``is_discrete`` says whether the
    region is discrete, ``event_dim`` how many rightmost dims make one event."""

    is_discrete = False
    event_dim = 0

    def check(self, value):
        """A bool tensor of shape value.shape[:value.ndim - event_dim]: true where
        the event satisfies the constraint."""
        raise NotImplementedError

    def __repr__(self):
        return self.__class__.__name__[1:] + "()"


class _Dependent(Constraint):
    """A placeholder for a variable whose support depends on other variables:
    it cannot be checked."""

    def __init__(self, *, is_discrete=NotImplemented, event_dim=NotImplemented):
        self._is_discrete = is_discrete
        self._event_dim = event_dim
        super().__init__()

    @property
    def is_discrete(self):
        if self._is_discrete is NotImplemented:
            raise NotImplementedError(".is_discrete cannot be determined statically")
        return self._is_discrete

    @property
    def event_dim(self):
        if self._event_dim is NotImplemented:
            raise NotImplementedError(".event_dim cannot be determined statically")
        return self._event_dim

    def __call__(self, *, is_discrete=NotImplemented, event_dim=NotImplemented):
        return _Dependent(is_discrete=self._is_discrete if is_discrete is NotImplemented else is_discrete,
                          event_dim=self._event_dim if event_dim is NotImplemented else event_dim)

    def check(self, value):
        raise ValueError("Cannot determine validity of dependent constraint")


def is_dependent(constraint):
    """Whether constraint is a dependent one (not checkable)."""
    return isinstance(constraint, _Dependent)


class _DependentProperty(property, _Dependent):
    """A property on instances and a dependent constraint on the class, as
    ``@constraints.dependent_property(is_discrete=False, event_dim=0) def support``."""

    def __init__(self, fn=None, *, is_discrete=NotImplemented, event_dim=NotImplemented):
        property.__init__(self, fn)
        self._is_discrete = is_discrete
        self._event_dim = event_dim

    def __call__(self, fn):
        return _DependentProperty(fn, is_discrete=self._is_discrete, event_dim=self._event_dim)


class _IndependentConstraint(Constraint):
    """base_constraint with its ``reinterpreted_batch_ndims`` rightmost batch dims
    made part of the event: an event is valid when all its entries are."""

    def __init__(self, base_constraint, reinterpreted_batch_ndims):
        if not isinstance(base_constraint, Constraint):
            raise TypeError(f"base_constraint must be a Constraint, got {type(base_constraint).__name__}")
        if not isinstance(reinterpreted_batch_ndims, int) or reinterpreted_batch_ndims < 0:
            raise ValueError(f"reinterpreted_batch_ndims must be an int >= 0, got {reinterpreted_batch_ndims!r}")
        self.base_constraint = base_constraint
        self.reinterpreted_batch_ndims = reinterpreted_batch_ndims
        super().__init__()

    @property
    def is_discrete(self):
        return self.base_constraint.is_discrete

    @property
    def event_dim(self):
        return self.base_constraint.event_dim + self.reinterpreted_batch_ndims

    def check(self, value):
        result = self.base_constraint.check(value)
        if result.ndim < self.reinterpreted_batch_ndims:
            raise ValueError(f"Expected value.dim() >= {self.event_dim} but got {value.ndim}")
        return _all_rightmost(result, self.reinterpreted_batch_ndims)

    def __repr__(self):
        return f"{self.__class__.__name__[1:]}({self.base_constraint!r}, {self.reinterpreted_batch_ndims})"


def _all_rightmost(result, ndims):
    """Whether all entries of the ``ndims`` rightmost dims of a bool result are true."""
    if ndims == 0:
        return result
    return _ag.all_(result.reshape(result.shape[:result.ndim - ndims] + (-1,)), -1)


class MixtureSameFamilyConstraint(Constraint):
    """The component distribution's constraint checked on a value of
    MixtureSameFamily: the component dim is added back before checking."""

    def __init__(self, base_constraint):
        if not isinstance(base_constraint, Constraint):
            raise TypeError(f"base_constraint must be a Constraint, got {type(base_constraint).__name__}")
        self.base_constraint = base_constraint
        super().__init__()

    @property
    def is_discrete(self):
        return self.base_constraint.is_discrete

    @property
    def event_dim(self):
        return self.base_constraint.event_dim

    def check(self, value):
        if value.ndim < self.event_dim:
            raise ValueError(f"Expected value.dim() >= {self.event_dim} but got {value.ndim}")
        result = self.base_constraint.check(value.unsqueeze(-1 - self.event_dim))
        return _ag.all_(result, -1)

    def __repr__(self):
        return f"{self.__class__.__name__}({self.base_constraint!r})"


def _is_integer(value):
    """1 where value holds an integer (always for integer dtypes; never for NaN or infinities)."""
    if not value.dtype.is_floating_point:
        return value == value
    return _ag.logical_and(value == _ag.floor(value), _ag.isfinite(value))


class _Boolean(Constraint):
    """{0, 1}."""

    is_discrete = True

    def check(self, value):
        return _ag.logical_or(value == 0, value == 1)


class _OneHot(Constraint):
    """One-hot vectors: 0s and a single 1 along the last dim."""

    is_discrete = True
    event_dim = 1

    def check(self, value):
        is_boolean = _ag.all_(_ag.logical_or(value == 0, value == 1), -1)
        return _ag.logical_and(is_boolean, value.sum(-1) == 1)


class _IntegerInterval(Constraint):
    """The integers of [lower_bound, upper_bound]."""

    is_discrete = True

    def __init__(self, lower_bound, upper_bound):
        self.lower_bound = lower_bound
        self.upper_bound = upper_bound
        super().__init__()

    def check(self, value):
        inside = _ag.logical_and(value >= self.lower_bound, value <= self.upper_bound)
        return _ag.logical_and(inside, _is_integer(value))

    def __repr__(self):
        return f"{self.__class__.__name__[1:]}(lower_bound={self.lower_bound}, upper_bound={self.upper_bound})"


class _IntegerGreaterThan(Constraint):
    """The integers >= lower_bound."""

    is_discrete = True

    def __init__(self, lower_bound):
        self.lower_bound = lower_bound
        super().__init__()

    def check(self, value):
        return _ag.logical_and(_is_integer(value), value >= self.lower_bound)

    def __repr__(self):
        return f"{self.__class__.__name__[1:]}(lower_bound={self.lower_bound})"


class _Real(Constraint):
    """The extended real line (infinities included, NaN excluded)."""

    def check(self, value):
        return value == value


class _GreaterThan(Constraint):
    """(lower_bound, inf]."""

    def __init__(self, lower_bound):
        self.lower_bound = lower_bound
        super().__init__()

    def check(self, value):
        return value > self.lower_bound

    def __repr__(self):
        return f"{self.__class__.__name__[1:]}(lower_bound={self.lower_bound})"


class _GreaterThanEq(_GreaterThan):
    """[lower_bound, inf]."""

    def check(self, value):
        return value >= self.lower_bound


class _LessThan(Constraint):
    """[-inf, upper_bound)."""

    def __init__(self, upper_bound):
        self.upper_bound = upper_bound
        super().__init__()

    def check(self, value):
        return value < self.upper_bound

    def __repr__(self):
        return f"{self.__class__.__name__[1:]}(upper_bound={self.upper_bound})"


class _Interval(Constraint):
    """[lower_bound, upper_bound]."""

    def __init__(self, lower_bound, upper_bound):
        self.lower_bound = lower_bound
        self.upper_bound = upper_bound
        super().__init__()

    def check(self, value):
        return _ag.logical_and(value >= self.lower_bound, value <= self.upper_bound)

    def __repr__(self):
        return f"{self.__class__.__name__[1:]}(lower_bound={self.lower_bound}, upper_bound={self.upper_bound})"


class _HalfOpenInterval(_Interval):
    """[lower_bound, upper_bound)."""

    def check(self, value):
        return _ag.logical_and(value >= self.lower_bound, value < self.upper_bound)


class _Multinomial(Constraint):
    """Non-negative count vectors along the last dim whose sum is at most
    upper_bound (as PyTorch's, the values need not be integers)."""

    is_discrete = True
    event_dim = 1

    def __init__(self, upper_bound):
        self.upper_bound = upper_bound
        super().__init__()

    def check(self, value):
        return _ag.logical_and(_ag.all_(value >= 0, -1), value.sum(-1) <= self.upper_bound)


class _Simplex(Constraint):
    """Non-negative vectors summing to 1 (within 1e-6) along the last dim."""

    event_dim = 1

    def check(self, value):
        nonnegative = _ag.all_(value >= 0, -1)
        return _ag.logical_and(nonnegative, _ag.abs(value.sum(-1) - 1) < 1e-6)


class _Square(Constraint):
    """Square matrices."""

    event_dim = 2

    def check(self, value):
        return full(value.shape[:-2], value.shape[-2] == value.shape[-1], dtype=bool_, device=value.device)


class _Symmetric(_Square):
    """Symmetric square matrices (entries equal to their transposes' within an
    absolute 1e-6)."""

    def check(self, value):
        square_check = super().check(value)
        if not bool(_ag.all_(square_check)):
            return square_check
        return _all_rightmost(_ag.isclose(value, value.mT, atol=1e-6), 2)


class _PositiveSemidefinite(_Symmetric):
    """Symmetric matrices whose eigenvalues are non-negative."""

    def check(self, value):
        sym_check = super().check(value)
        if not bool(_ag.all_(sym_check)):
            return sym_check
        return _ag.all_(linalg.eigvalsh(value) >= 0, -1)


class _PositiveDefinite(_Symmetric):
    """Symmetric matrices with a Cholesky factorization (positive eigenvalues)."""

    def check(self, value):
        sym_check = super().check(value)
        if not bool(_ag.all_(sym_check)):
            return sym_check
        return linalg.cholesky_ex(value).info == 0


class _LowerTriangular(Constraint):
    """Square lower-triangular matrices."""

    event_dim = 2

    def check(self, value):
        return _all_rightmost(_ag.tril(value) == value, 2)


class _LowerCholesky(Constraint):
    """Square lower-triangular matrices with a positive diagonal: Cholesky factors."""

    event_dim = 2

    def check(self, value):
        lower_triangular = _all_rightmost(_ag.tril(value) == value, 2)
        positive_diagonal = _ag.all_(value.diagonal(dim1=-2, dim2=-1) > 0, -1)
        return _ag.logical_and(lower_triangular, positive_diagonal)


class _CorrCholesky(Constraint):
    """Cholesky factors of correlation matrices: lower Cholesky factors whose
    rows have unit Euclidean norm (within 10 * D * eps of the dtype)."""

    event_dim = 2

    def check(self, value):
        tol = finfo(value.dtype).eps * value.shape[-1] * 10
        row_norm = linalg.norm(value.detach(), dim=-1)
        unit_row_norm = _ag.all_(_ag.abs(row_norm - 1.0) <= tol, -1)
        return _ag.logical_and(lower_cholesky.check(value), unit_row_norm)


class _Cat(Constraint):
    """Constraints applied to consecutive pieces of ``dim``, of sizes ``lengths``
    (1 each when None), as torch.cat joins tensors."""

    def __init__(self, cseq, dim=0, lengths=None):
        self.cseq = list(cseq)
        self.lengths = [1] * len(self.cseq) if lengths is None else list(lengths)
        if len(self.lengths) != len(self.cseq):
            raise ValueError(f"cat: {len(self.cseq)} constraints but {len(self.lengths)} lengths")
        self.dim = dim
        super().__init__()

    @property
    def is_discrete(self):
        return any(c.is_discrete for c in self.cseq)

    @property
    def event_dim(self):
        return max(c.event_dim for c in self.cseq)

    def check(self, value):
        checks = [c.check(piece) for c, piece in zip(self.cseq, _ag.split_with_sizes(value, self.lengths, self.dim))]
        return _ag.cat(checks, self.dim)


class _Stack(Constraint):
    """Constraints applied to the slices of ``dim``, as torch.stack joins tensors."""

    def __init__(self, cseq, dim=0):
        self.cseq = list(cseq)
        self.dim = dim
        super().__init__()

    @property
    def is_discrete(self):
        return any(c.is_discrete for c in self.cseq)

    @property
    def event_dim(self):
        event_dim = max(c.event_dim for c in self.cseq)
        return event_dim + 1 if self.dim + event_dim < 0 else event_dim

    def check(self, value):
        if not -value.ndim <= self.dim < value.ndim:
            raise ValueError(f"stack: dim {self.dim} out of range for a value of {value.ndim} dims")
        slices = _ag.unbind(value, self.dim)
        return _ag.stack([c.check(v) for c, v in zip(self.cseq, slices)], self.dim)


dependent = _Dependent()
dependent_property = _DependentProperty
independent = _IndependentConstraint
boolean = _Boolean()
one_hot = _OneHot()
nonnegative_integer = _IntegerGreaterThan(0)
positive_integer = _IntegerGreaterThan(1)
integer_interval = _IntegerInterval
real = _Real()
real_vector = independent(real, 1)
positive = _GreaterThan(0.0)
nonnegative = _GreaterThanEq(0.0)
greater_than = _GreaterThan
greater_than_eq = _GreaterThanEq
less_than = _LessThan
unit_interval = _Interval(0.0, 1.0)
interval = _Interval
half_open_interval = _HalfOpenInterval
simplex = _Simplex()
multinomial = _Multinomial
square = _Square()
symmetric = _Symmetric()
positive_semidefinite = _PositiveSemidefinite()
positive_definite = _PositiveDefinite()
lower_triangular = _LowerTriangular()
lower_cholesky = _LowerCholesky()
corr_cholesky = _CorrCholesky()
cat = _Cat
stack = _Stack

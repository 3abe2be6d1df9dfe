"""Distribution: the base class of the probability distributions, as
torch.distributions.Distribution: batch and event shapes, argument and
sample validation, sample under no_grad over rsample, and the interface
(log_prob, cdf, icdf, entropy, mean, mode, variance) the families fill in."""

import warnings

from .. import autograd as _ag
from ..tensor import Size, Tensor
from . import constraints
from .utils import lazy_property

__all__ = ["Distribution"]


def _shape(size):
    """A shape given as an int, a tuple, a list or a tensor's shape, as a ``Size`` (as PyTorch's shapes are)."""
    return Size((size,) if isinstance(size, int) else tuple(size))


class Distribution:
    """The abstract base class of probability distributions.

    Args:
        batch_shape (tuple): the shape over which parameters are batched.
        event_shape (tuple): the shape of one sample (without batching).
        validate_args (bool, optional): whether to check parameters and values;
            None takes the default (on unless Python runs with -O; see
            set_default_validate_args).
    """

    has_rsample = False
    has_enumerate_support = False
    _validate_args = __debug__

    @staticmethod
    def set_default_validate_args(value):
        """Turns argument and sample validation on or off for the distributions
        created afterwards without an explicit validate_args."""
        if value not in (True, False):
            raise ValueError
        Distribution._validate_args = value

    def __init__(self, batch_shape=(), event_shape=(), validate_args=None):
        self._batch_shape = _shape(batch_shape)
        self._event_shape = _shape(event_shape)
        if validate_args is not None:
            self._validate_args = validate_args
        if self._validate_args:
            try:
                arg_constraints = self.arg_constraints
            except NotImplementedError:
                arg_constraints = {}
                warnings.warn(f"{self.__class__} does not define `arg_constraints`. Please set "
                              "`arg_constraints = {}` or initialize the distribution with `validate_args=False` "
                              "to turn off validation.", stacklevel=2)
            for param, constraint in arg_constraints.items():
                if constraints.is_dependent(constraint):
                    continue
                if param not in self.__dict__ and isinstance(getattr(type(self), param), lazy_property):
                    continue
                value = getattr(self, param)
                if not bool(_ag.all_(constraint.check(value))):
                    raise ValueError(f"Expected parameter {param} ({type(value).__name__} of shape "
                                     f"{tuple(value.shape)}) of distribution {self!r} to satisfy the constraint "
                                     f"{constraint!r}, but found invalid values:\n{value}")
        super().__init__()

    def expand(self, batch_shape, _instance=None):
        """A new distribution with the batch dims expanded to batch_shape (the
        parameters are expanded views; no checks or broadcasting are repeated)."""
        raise NotImplementedError

    @property
    def batch_shape(self):
        """The shape over which parameters are batched."""
        return self._batch_shape

    @property
    def event_shape(self):
        """The shape of one sample, without batching."""
        return self._event_shape

    @property
    def arg_constraints(self):
        """A dict from argument names to the Constraint each must satisfy."""
        raise NotImplementedError

    @property
    def support(self):
        """The Constraint of the distribution's support."""
        raise NotImplementedError

    @property
    def mean(self):
        raise NotImplementedError

    @property
    def mode(self):
        raise NotImplementedError(f"{self.__class__} does not implement mode")

    @property
    def variance(self):
        raise NotImplementedError

    @property
    def stddev(self):
        return _ag.sqrt(self.variance)

    def sample(self, sample_shape=()):
        """A sample of shape sample_shape + batch_shape + event_shape, outside the graph."""
        with _ag.no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=()):
        """A reparameterized sample: differentiable with respect to the parameters."""
        raise NotImplementedError

    def log_prob(self, value):
        """The log of the density or mass function at value."""
        raise NotImplementedError

    def cdf(self, value):
        """The cumulative distribution function at value."""
        raise NotImplementedError

    def icdf(self, value):
        """The inverse cumulative distribution function at value."""
        raise NotImplementedError

    def enumerate_support(self, expand=True):
        """All values of a discrete distribution along dim 0: shape
        (cardinality,) + batch_shape + event_shape (batch dims of size 1 when not expand)."""
        raise NotImplementedError

    def entropy(self):
        """The entropy, of shape batch_shape."""
        raise NotImplementedError

    def perplexity(self):
        """exp(entropy)."""
        return _ag.exp(self.entropy())

    def _extended_shape(self, sample_shape=()):
        """sample_shape + batch_shape + event_shape."""
        return _shape(sample_shape) + self._batch_shape + self._event_shape

    def _validate_sample(self, value):
        """Checks that value's rightmost dims match the event shape, that it
        broadcasts with batch_shape + event_shape and lies in the support."""
        if not isinstance(value, Tensor):
            raise ValueError("The value argument to log_prob must be a Tensor")
        event_dim_start = value.ndim - len(self._event_shape)
        if tuple(value.shape[event_dim_start:]) != self._event_shape:
            raise ValueError(f"The right-most size of value must match event_shape: {value.shape} vs "
                             f"{self._event_shape}.")
        expected_shape = self._batch_shape + self._event_shape
        for i, j in zip(reversed(value.shape), reversed(expected_shape)):
            if i != 1 and j != 1 and i != j:
                raise ValueError(f"Value is not broadcastable with batch_shape+event_shape: {value.shape} vs "
                                 f"{expected_shape}.")
        try:
            support = self.support
        except NotImplementedError:
            warnings.warn(f"{self.__class__} does not define `support` to enable sample validation. Please "
                          "initialize the distribution with `validate_args=False` to turn off validation.",
                          stacklevel=2)
            return
        if not bool(_ag.all_(support.check(value))):
            raise ValueError(f"Expected value argument ({type(value).__name__} of shape {tuple(value.shape)}) to be "
                             f"within the support ({support!r}) of the distribution {self!r}, but found invalid "
                             f"values:\n{value}")

    def _expand_parameters(self, cls, batch_shape, _instance, names, param_event_shape=()):
        """expand for a family of class cls whose parameters are the tensors
        ``names`` of shape batch_shape + param_event_shape: each one this
        instance holds is expanded (a view) onto the new instance."""
        new = self._get_checked_instance(cls, _instance)
        batch_shape = tuple(batch_shape)
        for name in names:
            if name in self.__dict__:
                setattr(new, name, self.__dict__[name].expand(batch_shape + tuple(param_event_shape)))
        super(cls, new).__init__(batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _get_checked_instance(self, cls, _instance=None):
        if _instance is None and type(self).__init__ != cls.__init__:
            raise NotImplementedError(f"Subclass {self.__class__.__name__} of {cls.__name__} that defines a custom "
                                      "__init__ method must also define a custom .expand() method.")
        return self.__new__(type(self)) if _instance is None else _instance

    def __repr__(self):
        names = [k for k in self.arg_constraints if k in self.__dict__]
        return self.__class__.__name__ + "(" + ", ".join(f"{p}: {_brief(self.__dict__[p])}" for p in names) + ")"


def _brief(param):
    """A parameter as torch's repr of a distribution shows it: a 0-d tensor's
    number, a one-element tensor, or else the shape."""
    if param.ndim == 0:
        return param.item()
    return param if param.numel() == 1 else param.shape

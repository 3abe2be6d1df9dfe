"""PyTorch's alias names and the in-place forms of existing ops, attached to
Tensor from tables, and the torch-level functions of the same names.

The ``_`` forms compute the op aside and write the result into the tensor
through autograd.inplace_apply, as the other ``_`` methods do (comparisons
and logical ops write 0 or 1 in the tensor's dtype, as PyTorch's). The
in-place view ops (t_, transpose_, swapaxes_, swapdims_, squeeze_,
unsqueeze_) change the tensor's shape; ddpc tensors are contiguous, so a
transposing one gives the tensor a transposed copy of its elements, which
writes into it reach (PyTorch only changes its strides); see
autograd.rearrange_in_place.
"""

import functools
import inspect
import types

from . import _linalg
from . import autograd as _ag
from ._C import ArgumentError
from ._dtype import uint8
from .tensor import Tensor, _size_args

# alias -> the Tensor method it names
_ALIASES = {"multiply": "mul", "divide": "div", "subtract": "sub", "greater": "gt", "greater_equal": "ge",
            "less": "lt", "less_equal": "le", "not_equal": "ne", "negative": "neg", "fix": "trunc", "ger": "outer"}

# in-place form -> the Tensor method whose result it writes into the tensor
_INPLACE = {"multiply_": "mul", "divide_": "div", "subtract_": "sub", "true_divide_": "true_divide",
            "greater_": "gt", "greater_equal_": "ge", "less_": "lt", "less_equal_": "le", "not_equal_": "ne",
            "eq_": "eq", "ne_": "ne", "gt_": "gt", "ge_": "ge", "lt_": "lt", "le_": "le", "negative_": "neg",
            "fix_": "trunc", "tril_": "tril", "triu_": "triu", "cumsum_": "cumsum", "cumprod_": "cumprod",
            "renorm_": "renorm", "remainder_": "remainder", "fmod_": "fmod", "floor_divide_": "floor_divide",
            "logical_and_": "logical_and", "logical_or_": "logical_or", "logical_xor_": "logical_xor",
            "logical_not_": "logical_not", "bitwise_not_": "bitwise_not"}

# in-place view op -> the Tensor method giving the new arrangement
_INPLACE_VIEWS = {"t_": "t", "transpose_": "transpose", "swapaxes_": "transpose", "swapdims_": "transpose",
                  "squeeze_": "squeeze", "unsqueeze_": "unsqueeze"}


def _inplace(name, method):
    def op(self, *args, **kwargs):
        return _ag.inplace_apply(self, lambda t: getattr(t, method)(*args, **kwargs), name,
                                 args + tuple(kwargs.values()))

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"``{method}`` written into this tensor."
    return op


def _inplace_view(name, method):
    def op(self, *args, **kwargs):
        return _ag.rearrange_in_place(self, method, args, kwargs, name)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"This tensor rearranged by ``{method}``, in place (see ddpc._aliases)."
    return op


def positive(input):
    """The tensor itself."""
    return input


def ravel(input):
    """The elements as a 1-d tensor."""
    return input.reshape(-1)


def fliplr(input):
    """Flipped left to right: along dim 1 (at least 2 dims)."""
    if input.ndim < 2:
        raise ArgumentError("fliplr: input must be >= 2-d")
    return input.flip(1)


def flipud(input):
    """Flipped upside down: along dim 0 (at least 1 dim)."""
    if input.ndim < 1:
        raise ArgumentError("flipud: input must be >= 1-d")
    return input.flip(0)


def inner(input, other):
    """The sum of products over the last dims of both (a product with a 0-d operand)."""
    if input.ndim == 0 or other.ndim == 0:
        return input * other
    return _linalg.tensordot(input, other, ([-1], [-1]))


def vdot(input, other):
    """The dot product of two 1-d tensors, input conjugated first (as PyTorch's)."""
    if input.ndim != 1 or other.ndim != 1:
        raise ArgumentError(f"vdot: expected 1-d tensors, got {input.ndim}-d and {other.ndim}-d")
    return input.conj().dot(other)


def is_signed(input):
    """Whether the dtype holds negative values (all ddpc dtypes but uint8)."""
    return input.dtype is not uint8


def is_same_size(input, other):
    return tuple(input.shape) == tuple(other.shape)


def is_complex(input):
    """Whether the dtype is complex64 or complex128."""
    return input.dtype.is_complex


def sum_to_size(self, *size):
    """The sum of this tensor down to ``size``, to which its shape must
    broadcast: over the leading dims size lacks and the dims where size is 1."""
    size = tuple(_size_args(size))
    lead = self.ndim - len(size)
    if lead < 0 or any(s != n and s != 1 for s, n in zip(size, self.shape[lead:])):
        raise ArgumentError(f"sum_to_size: size {list(size)} is not expandable to shape {list(self.shape)}")
    dims = list(range(lead)) + [lead + i for i, s in enumerate(size) if s == 1 and self.shape[lead + i] != 1]
    return (self.sum(dims, keepdim=True) if dims else self).reshape(size)


for _name, _method in _ALIASES.items():
    setattr(Tensor, _name, getattr(Tensor, _method))
for _name, _method in _INPLACE.items():
    setattr(Tensor, _name, _inplace(_name, _method))
for _name, _method in _INPLACE_VIEWS.items():
    setattr(Tensor, _name, _inplace_view(_name, _method))
for _fn in (positive, ravel, fliplr, flipud, inner, vdot, is_signed, is_same_size, is_complex, sum_to_size):
    setattr(Tensor, _fn.__name__, _fn)
Tensor.__pos__ = positive  # +t


# ---- the torch-level functions -------------------------------------------------------------


def select(input, dim, index):
    """The slice of input at ``index`` along ``dim`` (that dim removed)."""
    return input.select(dim, index)


def concat(tensors, dim=0):
    """cat under the name of PyTorch's alias."""
    return _ag.cat(tensors, dim)


def concatenate(tensors, axis=0):
    """cat with numpy's argument name ``axis``, as PyTorch's concatenate."""
    return _ag.cat(tensors, axis)


def greater(input, other): return input.gt(other)
def greater_equal(input, other): return input.ge(other)
def less(input, other): return input.lt(other)
def less_equal(input, other): return input.le(other)
def not_equal(input, other): return input.ne(other)
def negative(input): return input.neg()
def fix(input): return input.trunc()
def ger(input, vec2): return input.outer(vec2)


# PyTorch's argument parser takes numpy's names for two arguments of every
# native op: ``axis`` for ``dim`` and ``keepdims`` for ``keepdim`` (Spinning
# Up's SAC sums log-probabilities with ``.sum(axis=-1)``).
_NUMPY_NAMES = (("axis", "dim"), ("keepdims", "keepdim"))


def _with_numpy_names(fn):
    @functools.wraps(fn)
    def op(*args, **kwargs):
        if kwargs and ("axis" in kwargs or "keepdims" in kwargs):  # the common call pays two checks at most
            for numpy_name, name in _NUMPY_NAMES:
                if numpy_name in kwargs:
                    if name in kwargs:
                        raise TypeError(f"{fn.__name__}() got both {name!r} and its alias {numpy_name!r}")
                    kwargs[name] = kwargs.pop(numpy_name)
        return fn(*args, **kwargs)
    return op


def take_numpy_names(owner):
    """Lets each function of ``owner`` (a class, or a module's globals) that
    has a ``dim`` or ``keepdim`` argument, and no ``axis`` of its own, take
    numpy's names for them as well."""
    items = vars(owner) if isinstance(owner, type) else owner
    for name, fn in list(items.items()):
        if not isinstance(fn, types.FunctionType) or name.startswith("__"):
            continue
        code = inspect.unwrap(fn).__code__
        args = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        if ("dim" in args or "keepdim" in args) and "axis" not in args:
            if isinstance(owner, type):
                setattr(owner, name, _with_numpy_names(fn))
            else:
                owner[name] = _with_numpy_names(fn)


__all__ = ["concat", "concatenate", "fix", "fliplr", "flipud", "ger", "greater", "greater_equal", "inner",
           "is_complex", "is_same_size", "is_signed", "less", "less_equal", "negative", "not_equal", "positive",
           "ravel", "select", "vdot"]

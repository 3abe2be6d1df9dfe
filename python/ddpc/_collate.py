"""Collation: ``default_collate``, ``default_convert`` and PyTorch's extension
point for them, ``collate(batch, collate_fn_map=...)`` with the functions of
``default_collate_fn_map`` (``torch.utils.data._utils.collate``, which is this
module under ``ddpc.utils.data._utils.collate``).

``collate`` hands a batch to the function ``collate_fn_map`` keeps for the
type of its first sample, else to that of the first key (a type or a tuple
of types) the sample is an instance of, in the map's order; it takes mappings
apart by key, namedtuples by field and other sequences by position, and
collates each part so again; anything else is a TypeError. ``default_collate``
is ``collate`` with ``default_collate_fn_map``, so adding to that map (as
PyTorch's documentation shows) extends it.
"""

import collections.abc
import copy

import numpy as np

from ._C import ArgumentError
from .autograd import stack
from .tensor import Tensor, from_numpy

__all__ = ["collate", "collate_float_fn", "collate_int_fn", "collate_numpy_array_fn", "collate_numpy_scalar_fn",
           "collate_str_fn", "collate_tensor_fn", "default_collate", "default_collate_err_msg_format",
           "default_collate_fn_map", "default_convert"]

default_collate_err_msg_format = ("default_collate: batch must contain tensors, numpy arrays, numbers, dicts or "
                                  "lists; found {}")

# Integer dtypes ddpc has no tensors of, and the smallest of its own that holds all their values.
_WIDENED = {np.dtype(np.int8): np.int32, np.dtype(np.int16): np.int32, np.dtype(np.uint16): np.int32,
            np.dtype(np.uint32): np.int64}


def _to_tensor(arr):
    arr = np.asarray(arr)
    if arr.dtype == np.uint64:
        raise TypeError("a uint64 array or scalar has no ddpc dtype that holds all its values (int64 ends at "
                        "2**63 - 1): convert it in the data set or in a collate_fn of your own")
    if arr.dtype in _WIDENED:
        arr = arr.astype(_WIDENED[arr.dtype], order="C")
    elif not arr.flags.c_contiguous:  # not for 0-d arrays, always contiguous: np.ascontiguousarray makes them 1-d
        arr = np.ascontiguousarray(arr)
    try:
        return from_numpy(arr)
    except TypeError:  # a dtype ddpc has no tensor for (strings, objects, other byte order): keep the array
        return arr


def _rebuild(like, mapping):
    """A mapping of ``like``'s type holding ``mapping``'s items, or a dict where that type cannot be made so."""
    try:
        return type(like)(mapping)
    except TypeError:
        return mapping


def collate(batch, *, collate_fn_map=None):
    """Collates a list of samples by ``collate_fn_map`` (see the module's docstring), as PyTorch's ``collate``."""
    elem = batch[0]
    if collate_fn_map is not None:
        if type(elem) in collate_fn_map:
            return collate_fn_map[type(elem)](batch, collate_fn_map=collate_fn_map)
        for kind in collate_fn_map:
            if isinstance(elem, kind):
                return collate_fn_map[kind](batch, collate_fn_map=collate_fn_map)
    if isinstance(elem, collections.abc.Mapping):
        collated = {k: collate([s[k] for s in batch], collate_fn_map=collate_fn_map) for k in elem}
        if type(elem) is dict:
            return collated
        if isinstance(elem, collections.abc.MutableMapping):  # a copy keeps more than the items (a default_factory)
            clone = copy.copy(elem)
            clone.update(collated)
            return clone
        return _rebuild(elem, collated)
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuples keep their type
        return type(elem)(*(collate(field, collate_fn_map=collate_fn_map) for field in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        if any(len(s) != len(elem) for s in batch):
            raise ValueError("each sample in a batch must have the same number of fields")
        # Each field is the tuple zip makes, so strings come out a tuple, as from PyTorch's.
        fields = [collate(field, collate_fn_map=collate_fn_map) for field in zip(*batch)]
        if isinstance(elem, tuple) or type(elem) is list:
            return fields
        try:  # another sequence type, as PyTorch's: a copy holding the fields, or one made of them
            if isinstance(elem, collections.abc.MutableSequence):
                clone = copy.copy(elem)
                for i, field in enumerate(fields):
                    clone[i] = field
                return clone
            return type(elem)(fields)
        except TypeError:
            return fields
    if elem is None:
        raise TypeError("default_collate: a sample (or a field of one) is None, which has no batched form: return "
                        "a value from the data set, or pass a collate_fn that handles None")
    raise TypeError(default_collate_err_msg_format.format(type(elem)))


def _same_shapes(batch):
    """batch, refused as PyTorch's stack refuses samples of different shapes
    (variable-length samples want a collate_fn that pads them)."""
    first = tuple(batch[0].shape)
    for i, item in enumerate(batch):
        if tuple(item.shape) != first:
            raise ArgumentError(f"stack expects each tensor to be equal size, but got {list(first)} at entry 0 and "
                                f"{list(item.shape)} at entry {i} (a collate_fn can pad samples of different sizes)")
    return batch


def collate_tensor_fn(batch, *, collate_fn_map=None):
    """Tensors stacked along a new dim 0 (in the autograd graph where one requires grad)."""
    return stack(_same_shapes(batch))


def collate_numpy_array_fn(batch, *, collate_fn_map=None):
    """Arrays stacked into a tensor (arrays of a dtype ddpc has no tensor of stay an array; see default_collate)."""
    return _to_tensor(np.stack(_same_shapes(batch)))


def collate_numpy_scalar_fn(batch, *, collate_fn_map=None):
    """numpy scalars into a 1-d tensor of their dtype (widened as arrays are)."""
    return _to_tensor(np.asarray(batch))


def collate_float_fn(batch, *, collate_fn_map=None):
    return _to_tensor(np.asarray(batch, dtype=np.float64))


def collate_int_fn(batch, *, collate_fn_map=None):
    """ints into int64, bools into bool, ints with floats among them into float32, as PyTorch's ``tensor()``."""
    arr = np.asarray(batch)
    return _to_tensor(arr if arr.dtype.kind == "b" else arr.astype(np.float32 if arr.dtype.kind == "f" else np.int64))


def collate_str_fn(batch, *, collate_fn_map=None):
    return batch


default_collate_fn_map = {Tensor: collate_tensor_fn, np.ndarray: collate_numpy_array_fn,
                          (np.bool_, np.number, np.object_): collate_numpy_scalar_fn, float: collate_float_fn,
                          int: collate_int_fn, str: collate_str_fn, bytes: collate_str_fn}


def default_collate(batch):
    """Stacks a list of samples: tensors and arrays along a new dim 0, numbers into a
    1-d tensor (int64 or float64), bools into a bool tensor, strings into a list
    (the strings of a tuple's or list's field into a tuple), tuples/lists per
    field (into a list), dicts per key; other types (None among them) are a
    TypeError, as in PyTorch. Unlike PyTorch, int8, int16 and uint16 arrays and
    numpy scalars become int32 tensors and uint32 ones int64 (ddpc has no such
    dtypes; every value is kept), and uint64 ones are a TypeError. It is
    ``collate(batch, collate_fn_map=default_collate_fn_map)``."""
    return collate(batch, collate_fn_map=default_collate_fn_map)


def default_convert(data):
    """What an unbatched sample (``batch_size=None``) is handed out as: numpy
    arrays and numpy scalars as tensors of their shape (a scalar's is ()), also
    inside dicts, tuples (which become lists, as in PyTorch) and lists;
    anything else as it is. Arrays of a dtype
    ddpc has no tensor of stay arrays, but int8, int16, uint16 and uint32 ones
    are widened as in ``default_collate``, and uint64 ones are a TypeError."""
    if isinstance(data, (np.ndarray, np.generic)) and not isinstance(data, (np.str_, np.bytes_)):
        return _to_tensor(data)
    if isinstance(data, collections.abc.Mapping):
        converted = {k: default_convert(v) for k, v in data.items()}
        return converted if type(data) is dict else _rebuild(data, converted)
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(v) for v in data))
    if isinstance(data, tuple):  # a plain tuple comes out a list, as from PyTorch's
        return [default_convert(v) for v in data]
    if isinstance(data, list):
        return type(data)(default_convert(v) for v in data)
    return data

"""Indexing on ddpc's contiguous buffers, as PyTorch indexes tensors.

``select(shape, index)`` turns an index into a selection of a tensor's
elements:

- ``Region``: basic indexing (ints, slices with any step, None,
  Ellipsis) along any dims, also what permute and expand read: the elements
  offset + sum over d of i_d * strides[d] of the contiguous buffer. Where they
  are contiguous the read is a view (x[2:5], x[1], x[None]); otherwise one
  strided-copy op copies them (x[:, 0], x[::2], x.t()), where PyTorch would
  give a non-contiguous view.
- ``Rows``: advanced indexing (integer tensors, arrays and lists, masks), in
  PyTorch's layout: ints select first; the broadcast index dims replace the
  indexed dims where those are adjacent, and lead otherwise. The positions
  are worked out on the host from the index (one copy to the host for an
  index on a GPU, as a mask needs anyway) and the elements move as rows: as
  long a run of trailing elements as is contiguous in the buffer.

Every selection reads (``read``), writes (``write``, the value broadcast to
its shape) and adds a gradient back (``add_into``), on _C.Buffers.
"""

import math
import numbers
import operator
import os
import sys
import warnings

import numpy as np

from . import _C
from ._C import ArgumentError, IndexOutOfRangeError
from ._dtype import real_pairs
from .backends import alert_not_deterministic

_ADD = 0  # _C.binary's code for addition (tensor.py names them all)


def contiguous_strides(shape):
    strides, n = [], 1
    for s in reversed(shape):
        strides.append(n)
        n *= s
    return tuple(reversed(strides))


def view_strides(shape, strides, new_shape):
    """The strides of elements laid out by (shape, strides) seen with the shape
    ``new_shape`` without moving them, or None where no strides can (PyTorch's
    rule for ``view``; ``reshape`` copies there)."""
    shape, new_shape = tuple(shape), tuple(new_shape)
    if not math.prod(shape):
        return contiguous_strides(new_shape)
    if not shape:
        return (1,) * len(new_shape)
    out = [0] * len(new_shape)
    d = len(new_shape) - 1
    base, old_n, new_n = strides[-1], 1, 1
    for i in range(len(shape) - 1, -1, -1):
        old_n *= shape[i]
        if i == 0 or (shape[i - 1] != 1 and strides[i - 1] != old_n * base):  # the end of a chunk of dims
            while d >= 0 and (new_n < old_n or new_shape[d] == 1):
                out[d] = new_n * base
                new_n *= new_shape[d]
                d -= 1
            if new_n != old_n:
                return None
            if i > 0:
                base, old_n, new_n = strides[i - 1], 1, 1
    return tuple(out) if d == -1 else None


def block_layout(shape, strides, first, n):
    """(shape, strides) of the ``n`` elements from the ``first`` on, in row-major
    order, of elements laid out by (shape, strides), where they form a box
    (a range of one dim, the dims after it whole, those before it fixed);
    else None."""
    index, rest = [], first
    for size in reversed(shape):
        index.append(rest % size)
        rest //= size
    index.reverse()
    unit = 1  # elements per step of dim k
    for k in range(len(shape) - 1, -1, -1):
        if n % unit == 0 and n // unit <= shape[k] - index[k]:
            return (n // unit,) + tuple(shape[k + 1:]), tuple(strides[k:])
        if index[k]:
            return None
        unit *= shape[k]
    return ((), ()) if not shape and n == 1 else None


def compose_layout(shape, strides, region, offset=0):
    """(shape, strides, offset) of the elements ``region`` selects from a
    row-major tensor whose own elements lie at offset + sum of i_d * strides[d]
    for each index i of shape in some memory, where they are strided in that
    memory; else None."""
    if not math.prod(region.shape):
        return tuple(region.shape), contiguous_strides(region.shape), offset
    flat = np.full(tuple(region.shape), region.offset, dtype=np.int64)
    for d, (n, st) in enumerate(zip(region.shape, region.strides)):
        flat = flat + (np.arange(n, dtype=np.int64) * st).reshape((n,) + (1,) * (len(region.shape) - d - 1))
    at = sum(i * st for i, st in zip(np.unravel_index(flat, tuple(shape)), strides)) if shape else flat * 0
    first = int(at.reshape(-1)[0])
    out = tuple(int(at[tuple(1 if e == d else 0 for e in range(at.ndim))]) - first if n > 1 else 0
                for d, n in enumerate(region.shape))
    want = np.full(at.shape, first, dtype=np.int64)
    for d, (n, st) in enumerate(zip(region.shape, out)):
        want = want + (np.arange(n, dtype=np.int64) * st).reshape((n,) + (1,) * (len(region.shape) - d - 1))
    return (tuple(region.shape), out, offset + first) if np.array_equal(at, want) else None


def compose(outer, inner):
    """The Region of outer's buffer holding the elements ``inner`` selects from
    the row-major tensor of outer's elements; None where they are not strided."""
    layout = compose_layout(outer.shape, outer.strides, inner, outer.offset)
    return None if layout is None else Region(layout[2], layout[0], layout[1])


def broadcast_strides(shape, target, what="value"):
    """The strides that read a contiguous ``shape`` as ``target`` by numpy's broadcasting (0 where repeated)."""
    lead = len(target) - len(shape)
    if lead < 0 or any(s not in (1, t) for s, t in zip(shape, target[lead:])):
        raise ArgumentError(f"shape mismatch: {what} of shape {tuple(shape)} cannot be broadcast to {tuple(target)}")
    own = contiguous_strides(shape)
    return (0,) * lead + tuple(0 if s == 1 else st for s, st in zip(shape, own))


def _broadcast_to(value, shape):
    """``value`` (a Buffer) as a contiguous Buffer of ``shape`` (itself when it has that shape)."""
    if tuple(value.shape) == tuple(shape):
        return value
    out = _C.Buffer(tuple(shape), value.dtype, value.device)
    src = broadcast_strides(value.shape, shape)
    if math.prod(shape):  # the contiguous strides of an empty shape may be 0, which strided_copy refuses
        _C.strided_copy(out, 0, contiguous_strides(shape), value, 0, src, shape)
    return out


class Region:
    """Elements offset + sum over d of i_d * strides[d], for each index i of shape."""

    __slots__ = ("offset", "shape", "strides")

    def __init__(self, offset, shape, strides):
        self.offset, self.shape, self.strides = offset, tuple(shape), tuple(strides)

    def is_view(self):
        """Whether the elements are contiguous in the buffer (in order)."""
        if not math.prod(self.shape):
            return True
        want = contiguous_strides(self.shape)
        return all(s == 1 or st == w for s, st, w in zip(self.shape, self.strides, want))

    def read(self, buf):
        if self.is_view():
            return buf.view(self.offset if math.prod(self.shape) else 0, self.shape)
        out = _C.Buffer(self.shape, buf.dtype, buf.device)
        self.read_into(out, buf)
        return out

    def read_into(self, out, buf):
        """out (contiguous, of the region's shape) = the region's elements of buf."""
        if math.prod(self.shape):
            _C.strided_copy(out, 0, contiguous_strides(self.shape), buf, self.offset, self.strides, self.shape)

    def write(self, buf, value):
        if not math.prod(self.shape):  # as in _broadcast_to
            return
        src = broadcast_strides(value.shape, self.shape)
        _C.strided_copy(buf, self.offset, self.strides, value, 0, src, self.shape)

    def add_into(self, gbuf, g):
        """gbuf += g (of the region's shape) at the region's elements, which are distinct."""
        part = self.read(gbuf)
        _C.binary(_ADD, real_pairs(part), real_pairs(part), real_pairs(g))
        if not self.is_view():
            self.write(gbuf, part)


class Rows:
    """Rows of ``width`` elements of the buffer: result row k is buffer row rows[k]."""

    __slots__ = ("shape", "rows", "width", "_idx")

    def __init__(self, shape, rows, width):
        self.shape, self.rows, self.width, self._idx = tuple(shape), rows, width, None

    def _index(self, buf):
        """The rows as an int64 Buffer on buf's device, made once (the backward pass uses it again)."""
        if self._idx is None or self._idx.device != buf.device:
            idx = _C.Buffer.from_object(self.rows)
            if buf.device >= 0:
                dev = _C.Buffer(tuple(idx.shape), "int64", buf.device)
                _C.copy(dev, idx)
                idx = dev
            self._idx = idx
        return self._idx

    def _table(self, buf):
        return buf.view(0, (buf.numel // self.width, self.width))

    def read(self, buf):
        out = _C.Buffer(self.shape, buf.dtype, buf.device)
        _C.index_rows(out.view(0, (len(self.rows), self.width)), self._table(buf), self._index(buf))
        return out

    def write(self, buf, value):
        value = _broadcast_to(value, self.shape)
        _C.put_rows(self._table(buf), value.view(0, (len(self.rows), self.width)), self._index(buf))

    def add_into(self, gbuf, g):
        """gbuf (zeros) += g at the rows; rows selected twice add up (16-bit floats in float32)."""
        if gbuf.dtype in ("float16", "bfloat16"):
            wide, g_wide = (_C.Buffer(tuple(b.shape), "float32", b.device) for b in (gbuf, g))
            _C.cast(wide, gbuf)
            _C.cast(g_wide, g)
            self.add_into(wide, g_wide)
            _C.cast(gbuf, wide)
            return
        alert_not_deterministic("indexing's backward (or index_put with accumulate)", gbuf)
        width = self.width * (2 if gbuf.dtype.startswith("complex") else 1)
        table, rows = real_pairs(gbuf).view(0, (gbuf.numel // self.width, width)), real_pairs(g)
        _C.index_add_rows(table, rows.view(0, (len(self.rows), width)), self._index(gbuf))


def _is_mask(item):
    if isinstance(item, np.ndarray):
        return item.dtype == np.bool_
    if hasattr(item, "_buf"):  # a ddpc Tensor: bool, or uint8 as PyTorch's deprecated byte masks
        return item._buf.dtype in ("bool", "uint8")
    return isinstance(item, (list, tuple)) and len(item) > 0 and all(isinstance(v, bool) for v in item)


def _host_array(item, what):
    if hasattr(item, "_buf"):
        item = item.cpu().numpy()
    arr = np.asarray(item)
    if arr.dtype != np.bool_ and not np.issubdtype(arr.dtype, np.integer):
        if arr.size or arr.dtype != np.float64:  # an empty list reads as float64
            raise IndexError(f"tensors used as indices must be integer or mask tensors, got {what} of {arr.dtype}")
    return arr


def _is_advanced(item):
    if hasattr(item, "_buf"):
        return item.ndim > 0 or item._buf.dtype in ("bool", "uint8")
    return isinstance(item, (list, tuple, range, np.ndarray))


def _is_bool(item):
    """A Python or numpy bool: like None, a new dim, of size 1 for True and 0 for False (as in PyTorch)."""
    return isinstance(item, (bool, np.bool_))


def _sequence_as_tuple(index):
    """Whether a list index is PyTorch's legacy form of a tuple: shorter than 32
    and holding a tensor, a sequence, a slice, Ellipsis or None (x[[rows, cols]]
    is x[rows, cols]). PyTorch 2.x still reads it so, with a deprecation warning."""
    return isinstance(index, list) and len(index) < 32 and any(
        hasattr(i, "_buf") or isinstance(i, (list, tuple, range, np.ndarray, slice)) or i is None or i is Ellipsis
        for i in index)


def _caller_level():
    """The stacklevel of the first frame outside ddpc, where the indexing was written."""
    frame, level, package = sys._getframe(1), 1, os.path.dirname(__file__)
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def _expand_index(index, ndim):
    """The index as a list with Ellipsis expanded, masks split into one int array per dim they cover."""
    if _sequence_as_tuple(index):
        warnings.warn("Using a non-tuple sequence for multidimensional indexing is deprecated in PyTorch; "
                      "use x[tuple(seq)] instead of x[seq]", UserWarning, stacklevel=_caller_level())
        index = tuple(index)
    if not isinstance(index, tuple):
        index = (index,)
    items = []
    for item in index:
        if _is_mask(item):
            mask = _host_array(item, "a mask").astype(bool)
            items.append(("mask", mask))
        elif _is_advanced(item):
            items.append(("ints", _host_array(item, "an index").astype(np.int64)))
        else:
            items.append(item)
    used = sum(1 if not isinstance(i, tuple) else (i[1].ndim if i[0] == "mask" else 1)
               for i in items if i is not None and i is not Ellipsis and not _is_bool(i))
    if sum(i is Ellipsis for i in items) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if used > ndim:
        raise IndexError(f"too many indices for tensor of dimension {ndim}")
    out = []
    for i in items:
        if i is Ellipsis:
            out.extend([slice(None)] * (ndim - used))
        else:
            out.append(i)
    if Ellipsis not in items:
        out.extend([slice(None)] * (ndim - used))
    return out


def select(shape, index):
    """The selection ``index`` makes of a contiguous tensor of ``shape``: a Region or Rows."""
    if shape and (type(index) is int or (type(index) is slice and index.step in (None, 1))):
        return _leading_rows(shape, index)  # the common x[i] and x[a:b], without the general parse
    items = _expand_index(index, len(shape))
    mask = items[0][1] if items and isinstance(items[0], tuple) and items[0][0] == "mask" else None
    if mask is not None and mask.ndim and mask.shape == tuple(shape[:mask.ndim]) and math.prod(shape) and \
            all(type(i) is slice and i == slice(None) for i in items[1:]):
        # x[mask] over the leading dims: the rows where it is set, in one flat pass
        rows, rest = np.flatnonzero(mask), tuple(shape[mask.ndim:])
        return Rows((len(rows),) + rest, rows, math.prod(rest))
    strides = contiguous_strides(shape)
    offset, out_shape, out_strides, adv = 0, [], [], []
    d = 0
    # True, False and 0-d masks add a dim of length 1 or 0; beside other
    # advanced indices (or each other) they index a new dim of length 1 with
    # [0] or [], which broadcasts with the others (PyTorch's and numpy's rule).
    # They are advanced indices, so the result is a copy, as PyTorch's.
    with_advanced = sum(_is_bool(i) or isinstance(i, tuple) for i in items) > 1
    for item in items:
        flag = _is_bool(item) or (isinstance(item, tuple) and item[0] == "mask" and item[1].ndim == 0)
        if item is None or flag:
            keep = 1 if item is None else int(bool(item if _is_bool(item) else item[1]))
            if flag:
                adv.append((len(out_shape), np.arange(keep)))
            out_shape.append(1 if item is None or with_advanced else keep)
            out_strides.append(0)
            continue
        if isinstance(item, tuple):  # advanced: ("ints", array) or ("mask", array)
            kind, arr = item
            if kind == "mask":
                covered = tuple(shape[d:d + arr.ndim])
                if arr.shape != covered:
                    raise IndexError(f"the shape of the mask {arr.shape} at index {d} does not match the shape of "
                                     f"the indexed tensor {covered}")
                for k, ints in enumerate(np.nonzero(arr)):
                    adv.append((len(out_shape), ints))
                    out_shape.append(shape[d + k])
                    out_strides.append(strides[d + k])
                d += arr.ndim
            else:
                adv.append((len(out_shape), arr))
                out_shape.append(shape[d])
                out_strides.append(strides[d])
                d += 1
            continue
        n, st = shape[d], strides[d]
        d += 1
        if isinstance(item, slice):
            start, stop, step = item.indices(n)  # a negative step walks backwards, as in numpy
            count = len(range(start, stop, step))
            if count:
                offset += start * st
            out_shape.append(count)
            out_strides.append(st * step)
        elif isinstance(item, numbers.Integral) or hasattr(item, "_buf") or hasattr(item, "__index__"):
            try:
                i = operator.index(item)
            except TypeError:
                raise IndexError(f"only integers, slices, None, ..., masks and integer tensors are valid "
                                 f"indices, got {type(item).__name__}") from None
            if not -n <= i < n:
                raise IndexOutOfRangeError(f"index {i} is out of range for dim {d - 1} of size {n}")
            offset += (i % n) * st
        else:
            raise IndexError(f"only integers, slices, None, ..., masks and integer tensors are valid indices, "
                             f"got {type(item).__name__}")
    region = Region(offset, out_shape, out_strides)
    return _rows(region, adv, math.prod(shape)) if adv else region


def _leading_rows(shape, index):
    n, rest = shape[0], tuple(shape[1:])
    row = math.prod(rest)
    if type(index) is int:
        if not -n <= index < n:
            raise IndexOutOfRangeError(f"index {index} is out of range for dim 0 of size {n}")
        return Region((index % n) * row, rest, contiguous_strides(rest))
    start, stop, _ = index.indices(n)
    count = max(stop - start, 0)
    return Region(start * row if count else 0, (count,) + rest, contiguous_strides(shape))


def _rows(region, adv, numel, whole_rows=True):
    """The Rows that advanced indices ``adv`` ((dim, int array) pairs) pick
    out of ``region``; rows of one element unless ``whole_rows``."""
    shape, strides = region.shape, region.strides
    dims = [d for d, _ in adv]
    try:
        idx = np.broadcast_arrays(*[a for _, a in adv])
    except ValueError:
        raise IndexError("shape mismatch: indexing tensors could not be broadcast together with shapes "
                         + " ".join(str(a.shape) for _, a in adv)) from None
    pos = np.full(idx[0].shape, region.offset, dtype=np.int64)
    for d, i in zip(dims, idx):
        n = shape[d]
        if i.size and (i.min() < -n or i.max() >= n):
            bad = i[(i < -n) | (i >= n)].flat[0]
            raise IndexOutOfRangeError(f"index {bad} is out of bounds for dim {d} with size {n}")
        pos += np.where(i < 0, i + n, i) * strides[d]
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    rest = [d for d in range(len(shape)) if d not in dims]
    before = [d for d in rest if d < dims[0]] if adjacent else []
    after = [d for d in rest if d not in before]
    out_shape = [shape[d] for d in before] + list(pos.shape) + [shape[d] for d in after]
    # The trailing dims contiguous in the buffer move together as one row.
    width, k = 1, len(after)
    while whole_rows and k and (shape[after[k - 1]] == 1 or strides[after[k - 1]] == width) and shape[after[k - 1]]:
        width *= shape[after[k - 1]]
        k -= 1
    axes = [(d, j) for j, d in enumerate(before)] + [(d, len(before) + pos.ndim + j) for j, d in enumerate(after[:k])]
    ndim = len(before) + pos.ndim + k
    grid = pos.reshape((1,) * len(before) + pos.shape + (1,) * k)
    for d, axis in axes:
        step = np.arange(shape[d], dtype=np.int64) * strides[d]
        grid = grid + step.reshape([shape[d] if a == axis else 1 for a in range(ndim)])
    grid = np.ascontiguousarray(grid).reshape(-1)
    if width > 1 and (numel % width or (grid % width).any()):
        return _rows(region, adv, numel, whole_rows=False)  # the rows would not start on multiples of their width
    return Rows(out_shape, grid // width if width > 1 else grid, width)

"""Storages, and the Tensor methods that lay a tensor out over its storage
(as_strided, as_strided_, as_strided_scatter, resize_, set_, is_set_to).

A tensor's storage is the _C.Buffer at the end of its buffer's chain of
bases: the memory that every view of it shares. ddpc buffers are contiguous,
so a layout of sizes and strides over a storage is a view of it only where
its elements are contiguous and in order; as_strided reads any other layout
as a copy that writes back, as x.t() does (see Tensor), and as_strided_,
which must keep the tensor on the storage, refuses it.
"""

import math
import numbers
import sys
import warnings

from . import _C, _indexing
from ._dtype import device_of
from .tensor import Tensor, _CopyOf, _check_no_grad_inplace, _copy_view, _in_graph, _read


def storage_root(buf):
    """The buffer owning (or importing) the memory that ``buf`` views."""
    while isinstance(buf.base, _C.Buffer):
        buf = buf.base
    return buf


class UntypedStorage:
    """The bytes a tensor views, as ``torch.UntypedStorage``: tensors viewing
    one buffer give storages with one ``data_ptr()``. Differences from
    PyTorch: a copy standing where PyTorch has a view (``x.t()``, see Tensor)
    has a storage of its own, and a storage can't be indexed or resized."""

    def __init__(self, root):
        self._root = root

    def data_ptr(self):
        return self._root.data_ptr

    def nbytes(self):
        return self._root.storage_nbytes

    def size(self):
        return self.nbytes()

    def element_size(self):
        return 1

    def __len__(self):
        return self.size()

    @property
    def device(self):
        return device_of(self._root.device)

    @property
    def is_cuda(self):
        return self._root.device >= 0

    def is_shared(self):
        return self._root.is_shared

    def is_pinned(self):
        return self._root.is_pinned

    def __repr__(self):
        return f"<ddpc.{type(self).__name__} of {self.nbytes()} bytes on {self.device}>"


class TypedStorage(UntypedStorage):
    """A storage counted in elements of ``dtype``, as ``torch.TypedStorage``
    (deprecated there, as here: ``Tensor.storage()`` warns)."""

    def __init__(self, root, dtype):
        super().__init__(root)
        self.dtype = dtype

    def element_size(self):
        return self.dtype.itemsize

    def size(self):
        return self.nbytes() // self.element_size()

    def untyped(self):
        return UntypedStorage(self._root)


def untyped_storage(t):
    return UntypedStorage(storage_root(t._buf))


def typed_storage(t):
    warnings.warn("TypedStorage is deprecated, as in PyTorch; use tensor.untyped_storage() instead of "
                  "tensor.storage()", UserWarning, stacklevel=3)
    return TypedStorage(storage_root(t._buf), t.dtype)


def _elements(t):
    """t's storage as a 1-d buffer of t's dtype."""
    root = storage_root(t._buf)
    return root.view(0, (root.storage_nbytes // t.element_size(),), t._buf.dtype)


def _ints(seq, what, name):
    if isinstance(seq, numbers.Integral):
        seq = (seq,)
    if not all(isinstance(v, numbers.Integral) for v in seq):
        raise TypeError(f"{what}: {name} must be a sequence of ints, got {seq!r}")
    return tuple(int(v) for v in seq)


def _layout(t, size, stride, storage_offset, what):
    """Checked (sizes, strides, storage offset) of a layout over t's storage."""
    size, stride = _ints(size, what, "size"), _ints(stride, what, "stride")
    offset = t.storage_offset() if storage_offset is None else storage_offset
    if not isinstance(offset, numbers.Integral):
        raise TypeError(f"{what}: storage_offset must be an int, got {offset!r}")
    if len(size) != len(stride):
        raise RuntimeError(f"{what}: mismatch in length of strides and shape ({len(stride)} strides for "
                           f"{len(size)} sizes)")
    if any(n < 0 for n in size):
        raise RuntimeError(f"{what}: negative size in {list(size)}")
    if any(s < 0 for s in stride):
        raise RuntimeError(f"{what}: negative strides are not supported, got strides: {list(stride)}")
    if offset < 0:
        raise RuntimeError(f"{what}: invalid storage offset {offset}")
    need = offset + _extent(size, stride)
    have = _elements(t).numel
    if math.prod(size) and need > have:
        raise RuntimeError(f"{what}: sizes {list(size)}, strides {list(stride)} and storage offset {offset} need a "
                           f"storage of {need} elements, out of bounds for this storage of {have}")
    return size, stride, int(offset)


def _extent(size, stride):
    """How many elements from the first that a layout reaches (0 for none)."""
    return 1 + sum((n - 1) * s for n, s in zip(size, stride)) if math.prod(size) else 0


def _overlaps(size, stride):
    """Whether two indices of the layout name one element (a sufficient test:
    dims in order of stride, each step clears the extent of the smaller ones)."""
    if not math.prod(size):
        return False
    reach = 0
    for s, n in sorted((s, n) for n, s in zip(size, stride) if n > 1):
        if s <= reach:
            return True
        reach += (n - 1) * s
    return False


def _grad_refused(t, what, why):
    if _in_graph(t, None):
        raise RuntimeError(f"{what}: {why} of a tensor that requires grad has no gradient in ddpc; use it under "
                           "ddpc.no_grad() or on .detach()")


def as_strided(t, size, stride, storage_offset=None):
    """The elements storage_offset + sum over d of i_d * stride[d] of t's
    storage, for each index i of ``size``: a view where they are contiguous
    and in order, else a copy that writes back (refusing writes where two
    indices name one element)."""
    size, stride, offset = _layout(t, size, stride, storage_offset, "as_strided")
    rel = offset - t.storage_offset()
    overlaps = _overlaps(size, stride)
    if rel >= 0 and rel + _extent(size, stride) <= t.numel():
        if overlaps:
            _grad_refused(t, "as_strided", "a layout naming an element twice")
        from .autograd import _select
        out = _select(t, _indexing.Region(rel, size, stride), "as_strided")
    else:
        _grad_refused(t, "as_strided", "a layout reaching outside the tensor's elements")
        out = _read(Tensor(_elements(t)), _indexing.Region(offset, size, stride), "as_strided")
    if overlaps:
        out._not_a_view = _CopyOf(None, None, "as_strided")
    return out


def as_strided_(t, size, stride, storage_offset=None):
    """t laid out as ``size`` over its storage from storage_offset, in place;
    ddpc keeps tensors contiguous, so the strides must be the contiguous ones
    (those of size-1 dims aside)."""
    size, stride, offset = _layout(t, size, stride, storage_offset, "as_strided_")
    _check_no_grad_inplace(t, "as_strided_")
    if not _indexing.Region(offset, size, stride).is_view():
        raise RuntimeError(f"as_strided_: strides {list(stride)} for sizes {list(size)} are not contiguous, and "
                           "ddpc tensors are; as_strided() gives a copy of that layout that writes back")
    _place_on_storage(t, offset, size, "as_strided_")
    return t


def _place_on_storage(t, offset, size, what):
    if t._not_a_view is not None:
        raise RuntimeError(f"{what}: this tensor is a copy made by {t._not_a_view.what} (a view in PyTorch, but ddpc "
                           "tensors are contiguous); .clone() it first")
    t._buf = _elements(t).view(offset, size)


def as_strided_scatter(t, src, size, stride, storage_offset=None):
    """A copy of t with ``src`` written at the elements that
    ``t.as_strided(size, stride, storage_offset)`` selects (the offset counted
    in t's storage, as in PyTorch); the layout must lie among t's elements."""
    size, stride, offset = _layout(t, size, stride, storage_offset, "as_strided_scatter")
    if not isinstance(src, Tensor):
        raise TypeError(f"as_strided_scatter: src must be a ddpc.Tensor, got {type(src).__name__}")
    if tuple(src.shape) != size:
        raise RuntimeError(f"as_strided_scatter: expected src to have a size equal to the slice of self. src size = "
                           f"{list(src.shape)}, slice size = {list(size)}")
    rel = offset - t.storage_offset()
    if rel < 0 or rel + _extent(size, stride) > t.numel():
        raise RuntimeError(f"as_strided_scatter: sizes {list(size)}, strides {list(stride)} and storage offset "
                           f"{offset} reach outside the tensor's {t.numel()} elements from storage offset "
                           f"{t.storage_offset()}")
    from .autograd import clone, write
    region = _indexing.Region(rel, size, stride)
    value = src.to(device=t.device, dtype=t.dtype)
    out = clone(t)
    if _in_graph(out, value):
        if _overlaps(size, stride):
            raise RuntimeError("as_strided_scatter: a layout naming an element twice has no gradient in ddpc")
        write(out, region, value)
    else:
        region.write(out._buf, value.detach()._buf)
    return out


def resize_(t, sizes, what="resize_"):
    """t of shape ``sizes``, in place: its elements keep their flat order and
    new ones are uninitialised, as in PyTorch. A tensor that fits in its
    storage stays on it; a larger one gets new memory, which ddpc gives only
    to a tensor whose storage nothing else views (PyTorch moves the storage
    under every tensor sharing it)."""
    sizes = _ints(sizes, what, "size")
    if any(n < 0 for n in sizes):
        raise RuntimeError(f"{what}: negative size in {list(sizes)}")
    if t.requires_grad:
        raise RuntimeError(f"{what}: cannot resize variables that require grad")
    if sizes == tuple(t.shape):
        return t
    offset, n = t.storage_offset(), math.prod(sizes)
    if offset + n <= _elements(t).numel:
        _place_on_storage(t, offset, sizes, what)
        return t
    root = storage_root(t._buf)
    # t alone holds the storage when nothing views it but t's buffer and no
    # other object refers to it: the references are t's buffer (or its
    # view's base), `root` here and getrefcount's argument.
    own = root.base is None and not root.is_shared and root.dtype == t._buf.dtype and sys.getrefcount(root) == 3 and (
        root.view_count == 0 if t._buf is root else t._buf.base is root and root.view_count == 1)
    if not own or t._not_a_view is not None:
        raise RuntimeError(f"{what}: trying to resize storage that is not resizable: ddpc grows only the storage of "
                           "a tensor that owns it alone (no other views, no numpy or shared memory); .clone() it "
                           "first")
    grown = _C.Buffer(sizes, t._buf.dtype, t._buf.device)
    if root.numel:
        _C.copy(grown.view(0, (root.numel,)), root.view(0, (root.numel,)))
    t._buf = grown
    return t


def set_(t, source=None, storage_offset=0, size=None, stride=None):
    """t made to view ``source`` (a tensor: its storage, shape and layout; a
    storage: ``size`` elements of it from storage_offset, all of it by
    default; nothing: an empty storage of its own)."""
    _check_no_grad_inplace(t, "set_")
    if source is None:
        t._buf, t._not_a_view = _C.Buffer((0,), t._buf.dtype, t._buf.device), None
    elif isinstance(source, Tensor):
        if source.dtype is not t.dtype:
            raise RuntimeError(f"set_: could not set a tensor of type {t.dtype} to one of type {source.dtype}")
        t._buf, t._not_a_view = source._buf, _copy_view(source)
    elif isinstance(source, UntypedStorage):
        item = t.element_size()
        whole = source._root.view(0, (source.nbytes() // item,), t._buf.dtype)
        size = (whole.numel - storage_offset,) if size is None else _ints(size, "set_", "size")
        stride = _indexing.contiguous_strides(size) if stride is None else _ints(stride, "set_", "stride")
        view = Tensor(whole)
        size, stride, offset = _layout(view, size, stride, storage_offset, "set_")
        if not _indexing.Region(offset, size, stride).is_view():
            raise RuntimeError(f"set_: strides {list(stride)} for sizes {list(size)} are not contiguous, and ddpc "
                               "tensors are")
        t._buf, t._not_a_view = whole.view(offset, size), None
    else:
        raise TypeError(f"set_: source must be a ddpc.Tensor or a storage, got {type(source).__name__}")
    return t


def is_set_to(t, other):
    """Whether t and other view the same elements of one storage in the same layout."""
    if not isinstance(other, Tensor):
        raise TypeError(f"is_set_to: expected a ddpc.Tensor, got {type(other).__name__}")
    if t._buf is other._buf:
        return True
    return (storage_root(t._buf) is storage_root(other._buf) and t.data_ptr() == other.data_ptr()
            and t.shape == other.shape and t.dtype is other.dtype and t._not_a_view is None
            and other._not_a_view is None)

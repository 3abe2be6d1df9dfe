"""ddpc.Tensor: a _C.Buffer with PyTorch's tensor API, and the factory functions.

Storage ops (copies, casts, fills, arithmetic, random numbers) are single calls
into _C; this module only checks arguments, picks dtypes and shapes views.
Differentiable ops (arithmetic, matmul, reductions, reshapes, indexing) go
through autograd.py, which records the graph when grad mode is on; in-place
ops never record and refuse tensors that require grad while it is on.
"""

import copy
import math
import numbers
import operator
import os
import threading
import warnings
import weakref

import numpy as np

from . import _C, _indexing, _tensor_str
from ._C import ArgumentError, DtypeError, IndexOutOfRangeError
from ._dtype import (bfloat16, bool_, checked_memory_format, complex64, complex128, complex_of,
                     contiguous_format, device, device_of, dtype, float16, float32, float64, get_dtype, int32, int64,
                     numpy_dtype, ordinal, preserve_format, promote, row_major_is, strided, uint8)

_ADD, _SUB, _MUL, _DIV, _RSUB, _RDIV, _EQ, _NE, _LT, _LE, _GT, _GE, _MAX, _MIN, _POWER, _RPOWER = range(16)
_BITAND, _BITOR, _BITXOR, _LSHIFT, _RSHIFT, _RLSHIFT, _RRSHIFT = range(16, 23)
_FMOD, _REMAINDER, _DIV_TRUNC, _DIV_FLOOR, _NEXTAFTER = range(23, 28)
_RAND_UNIFORM, _RAND_NORMAL, _RAND_INT = range(3)


class Generator:
    """A random state, like ``torch.Generator``: a seed and a counter of numbers
    drawn so far. ``ddpc.default_generator`` is the global one; samplers and
    ``random_split`` take one as ``generator=``.

    Every draw of n numbers uses counters [offset, offset + n) of the
    counter-based generator in _C, so the same seed gives the same numbers on
    the host and on any GPU: ``device`` (any, as in ``Generator("cuda")``)
    is kept for ``.device`` and changes no draw. ddpc also takes a seed in
    its place: ``Generator(3)`` is ``Generator().manual_seed(3)``.
    """

    def __init__(self, device="cpu"):
        if isinstance(device, numbers.Integral) and not isinstance(device, bool):
            device, seed = "cpu", device
        else:
            seed = _DEFAULT_SEED
        self._device = _device_class(device)
        self.manual_seed(seed)

    @property
    def device(self):
        return self._device

    def manual_seed(self, seed):
        """Starts the stream of seed (an int in [-2**63, 2**64), negative ones
        taken modulo 2**64, as PyTorch) from its first number; returns self."""
        seed = int(seed)
        if not -2 ** 63 <= seed < 2 ** 64:
            raise ValueError(f"manual_seed: the seed must be in [-2**63, 2**64), got {seed}")
        self._seed = seed & 0xFFFFFFFFFFFFFFFF
        self.offset = 0
        return self

    def seed(self):
        """Seeds the generator from the operating system's entropy; returns that seed."""
        return self.manual_seed(int.from_bytes(os.urandom(8), "little"))._seed

    def initial_seed(self):
        """The seed the generator was last seeded with."""
        return self._seed

    def get_state(self):
        """The state as a uint8 tensor of 16 bytes: the seed, then the offset (little-endian uint64s)."""
        return tensor(np.array([self._seed, self.offset], dtype="<u8").view(np.uint8))

    def set_state(self, new_state):
        """Restores a state that get_state returned."""
        if not isinstance(new_state, Tensor) or new_state.dtype is not uint8 or new_state.shape != (16,):
            got = f"{new_state.dtype} {new_state.shape}" if isinstance(new_state, Tensor) else type(new_state).__name__
            raise TypeError(f"set_state expects the uint8 tensor of 16 bytes that get_state returns, got {got}")
        self._seed, self.offset = (int(v) for v in new_state.cpu().numpy().view("<u8"))
        return self

    def clone_state(self):
        """A new generator on the same device in the same state, which then draws on by itself."""
        clone = Generator(self._device)
        clone._seed, clone.offset = self._seed, self.offset
        return clone

    def take(self, n):
        """(seed, offset) of the next n counters, which it marks as drawn."""
        offset = self.offset
        self.offset += max(int(n), 1)
        return self._seed, offset


_DEFAULT_SEED = 67280421310721  # a new torch.Generator's seed
_device_class = device  # (Generator.__init__'s argument of that name hides it)


# As PyTorch's, the global generator starts from a seed of the operating
# system's entropy (new Generators from the fixed default), so unseeded runs differ.
default_generator = Generator()
default_generator.seed()


class _ThreadDraws(threading.local):
    generator = None  # a DataLoader fetch thread's own (see data._ThreadedBatches); None: the global one


_thread_draws = _ThreadDraws()


def _draws_from():
    """The generator that draws without a ``generator=`` use on this thread:
    ddpc's global one, or the one a DataLoader's fetch thread was given, so
    that a data set's random augmentation in that thread neither depends on
    nor changes the order of the training loop's draws."""
    return _thread_draws.generator or default_generator


_default_dtype = float32


def get_default_dtype():
    """The dtype of floating tensors made without a dtype (float32 unless set_default_dtype changed it)."""
    return _default_dtype


def set_default_dtype(d):
    """Sets the dtype that creation functions give floating tensors by default."""
    global _default_dtype
    dt = get_dtype(d)
    if not dt.is_floating_point:
        raise DtypeError(f"only floating-point types are supported as the default type, got {dt}")
    _default_dtype = dt


def get_default_device():
    """The device that creation functions put tensors on by default: the host (see set_default_device)."""
    return _device_class("cpu")


def set_default_device(device):
    """As torch.set_default_device for "cpu" and None, which ddpc's creation
    functions use by default already. ddpc has no other default device:
    others raise NotImplementedError (give ``device=`` or move with ``.to``)."""
    if device is not None and _device_class(device).type != "cpu":
        raise NotImplementedError(f"set_default_device({device!r}): ddpc creates tensors on the host unless "
                                  "given device=; pass device= to the creation functions or move with .to()")


def manual_seed(seed):
    """Seeds the global generator (host and every device draw from it)."""
    return default_generator.manual_seed(seed)


def initial_seed():
    return default_generator.initial_seed()


def seed():
    """Seeds the global generator from the operating system's entropy; returns the seed."""
    return default_generator.seed()


def get_rng_state():
    """The global generator's state (a uint8 tensor; see Generator.get_state)."""
    return default_generator.get_state()


def set_rng_state(new_state):
    default_generator.set_state(new_state)


def _size_args(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    try:  # ints, and what stands for one (numpy integers, one-element integer tensors), as PyTorch takes
        return tuple(operator.index(s) for s in size)
    except TypeError:
        raise TypeError(f"size must be ints, got {size!r}") from None


def _size_or_keyword(args, value, what, name):
    """The sizes given to ``what`` as ``*args``, or by the keyword ``name`` PyTorch
    also takes (``zeros(size=(2, 3))``, ``x.permute(dims=(1, 0))``), in the form
    ``_size_args`` reads."""
    if value is None:
        return args
    if args:
        raise TypeError(f"{what}() got multiple values for argument '{name}'")
    return (value,)


Size = _C.Size
_dtype_type = dtype  # (Tensor.view's argument of that name hides it)


def _legacy_buffer(first, sizes, what, dtype=None):
    """The buffer of PyTorch's legacy constructors (``Tensor(2, 3)``: uninitialised
    of that size; ``Tensor([1, 2])``: of that data; ``Tensor()``: empty), in
    ``dtype`` (the default floating dtype for Tensor)."""
    spec = get_default_dtype() if dtype is None else dtype
    name = get_dtype(spec).name
    if isinstance(first, int) and not isinstance(first, bool) and all(isinstance(n, int) for n in sizes):
        return _C.Buffer((first, *sizes), name)
    if isinstance(first, Size) and not sizes:  # FloatTensor(x.size()): of that size, as PyTorch's
        return _C.Buffer(tuple(first), name)
    if isinstance(first, (tuple, list)) and not first and not sizes:
        return _C.Buffer((0,), name)
    if sizes:
        raise TypeError(f"{what}(*sizes) takes ints, or {what}(data) one sequence or array")
    if isinstance(first, Tensor):
        return first.detach().to(spec)._buf
    return tensor(first, dtype=spec)._buf


class Tensor:
    """An n-d array on the host or a CUDA device, shaped like ``torch.Tensor``.

    Differences from PyTorch: storage is always contiguous, so an index,
    permute or expand whose elements are not contiguous in the tensor gives a
    copy where PyTorch gives a view (x[:, 0], x[::2], x.t()), and
    ``is_contiguous()`` is False for it. In-place ops on such a copy are
    written back into the tensor it came from, as through PyTorch's view
    (``x[:, 0] += 1``, ``x.t().zero_()``), also in the graph; before such a
    write the copy takes that tensor's current values, so that writes made
    since through the tensor or another copy are kept. Reading the copy sees
    later changes of that tensor, as a read through the view would: it takes
    them before it is read, where that tensor's memory has been written since
    (its version changed; see _SyncedBuffer). A reshape of such a copy is a view
    of it where PyTorch's reshape of the view would be a view, and a tensor of
    its own where PyTorch's copies. Writes into a copy that can't be written
    back (an expand, or a view of such a copy) raise; ``contiguous()`` or
    ``clone()`` gives a tensor of its own.
    """

    __array_priority__ = 1000

    @property
    def _not_a_view(self):
        """A _CopyOf when this tensor is a copy where PyTorch has a view, else None."""
        return self.__dict__.get("_nav")

    @_not_a_view.setter
    def _not_a_view(self, c):
        # A copy with a source keeps its buffer as _b, read through _SyncedBuffer; others keep _buf.
        d = self.__dict__
        d["_nav"] = c
        if c and c.source is not None:  # (False: a reshape about to copy, see autograd.reshape)
            if "_buf" in d:
                d["_b"] = d.pop("_buf")
            if c.sel is not None and c.seen is None:
                c.seen = c.source._buf.version  # the copy was just taken from the source's current elements
        elif "_b" in d:
            d.setdefault("_buf", d["_b"])
            del d["_b"]
    is_sparse = False  # True for ddpc._sparse_coo.SparseTensor
    layout = strided

    def __init__(self, buf=(), *sizes, requires_grad=False):
        if not isinstance(buf, _C.Buffer):
            buf = _legacy_buffer(buf, sizes, "Tensor")
        elif sizes:
            raise TypeError("Tensor(buffer) takes one buffer")
        self._buf = buf
        self.requires_grad = requires_grad
        self._grad = None
        self.grad_fn = None

    # ---- metadata -------------------------------------------------------------
    @property
    def grad(self):
        """The gradient backward accumulated; None, with a UserWarning as PyTorch's,
        on a non-leaf tensor that does not retain its gradient."""
        if self._grad is None and self.grad_fn is not None and not self.__dict__.get("_retains_grad"):
            warnings.warn("The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its .grad "
                          "attribute won't be populated during autograd.backward(). If you indeed want the .grad "
                          "field to be populated for a non-leaf Tensor, use .retain_grad() on the non-leaf Tensor.",
                          UserWarning, stacklevel=2)
        return self._grad

    @grad.setter
    def grad(self, value):
        # As PyTorch's: a gradient unlike the tensor is refused here, rather than
        # broadcast into (or cast by) the optimizer's update later.
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(f"assigned grad expected to be a Tensor or None but got grad of type "
                                f"{type(value).__name__}")
            if value.dtype is not self.dtype:
                raise TypeError(f"assigned grad has data of a different type: {value.dtype} for a tensor of "
                                f"{self.dtype}")
            if value.device != self.device:
                raise TypeError(f"assigned grad has data located on a different device: {value.device} for a "
                                f"tensor on {self.device}")
            if tuple(value.shape) != tuple(self.shape):
                raise RuntimeError(f"attempting to assign a gradient of size {list(value.shape)} to a tensor of "
                                   f"size {list(self.shape)}; the gradient and the tensor must be the same size")
        self._grad = value

    @grad.deleter
    def grad(self):
        self._grad = None

    @property
    def _version(self):
        """How many in-place writes the tensor's memory has had (shared with its views), as PyTorch's."""
        return self._buf.version

    @property
    def requires_grad(self):
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value):
        # As PyTorch's: switched off on a computed tensor, it would cut that tensor's history out.
        if not value and self.__dict__.get("grad_fn") is not None:
            raise RuntimeError("you can only change requires_grad flags of leaf variables. If you want to use a "
                               "computed variable in a subgraph that doesn't require differentiation use "
                               "var_no_grad = var.detach().")
        if value and not (self.dtype.is_floating_point or self.dtype.is_complex):
            raise RuntimeError(f"only tensors of floating point and complex dtype can require gradients, this one is "
                               f"{self.dtype}")
        self._requires_grad = bool(value)

    @property
    def shape(self):
        return self._buf.shape

    def size(self, dim=None):
        """The shape as a ``Size`` (a tuple with ``numel()``), or one dim's length."""
        if dim is None:
            return self.shape
        if not self.ndim:
            raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
        return self._buf.shape[_ag._dim(self, dim)]

    @property
    def dtype(self):
        return get_dtype(self._buf.dtype)

    @property
    def device(self):
        return device_of(self._buf.device)

    @property
    def is_cuda(self):
        return self._buf.device >= 0

    @property
    def ndim(self):
        return self._buf.ndim

    def dim(self):
        return self._buf.ndim

    def numel(self):
        return self._buf.numel

    def element_size(self):
        return self._buf.itemsize

    @property
    def nbytes(self):
        return self._buf.nbytes

    def data_ptr(self):
        return self._buf.data_ptr

    def is_pinned(self):
        return self._buf.is_pinned

    def share_memory_(self):
        """Moves this tensor's storage into shared memory, in place, and returns
        this tensor (a no-op where it is shared already), as in PyTorch: every
        tensor viewing the storage follows it, and a shared tensor passed to a
        process of ``ddpc.multiprocessing`` or put on its Queue is mapped
        there, not copied, so each process sees the others' writes (see
        ddpc.multiprocessing for how long the memory lives).

        Differences from PyTorch: a cuda tensor raises, since ddpc does not
        share device memory between processes (PyTorch passes CUDA IPC
        handles; ddpc would give the other process a copy); while a numpy
        array, memoryview or DLPack consumer views the storage by address this
        raises BufferError, where PyTorch leaves it on freed memory; and on a
        copy that stands where PyTorch has a view (``x.t()``, see Tensor) it
        shares that copy, not ``x``. A tensor made with ``from_numpy`` stops
        sharing the array's memory, as in PyTorch."""
        if self.is_cuda:
            raise RuntimeError(f"share_memory_: ddpc does not share {self.device} memory between processes "
                               "(PyTorch passes CUDA IPC handles; a cuda tensor sent to another process arrives "
                               "as a copy); share a cpu model, or train on GPUs with DistributedDataParallel")
        self._buf.share_memory_()
        return self

    def is_shared(self):
        """Whether the storage is in shared memory; False for a cuda tensor
        (PyTorch says True: it shares device memory, ddpc does not)."""
        return self._buf.is_shared

    def is_contiguous(self, memory_format=contiguous_format):
        """Whether the tensor is contiguous in ``memory_format``: ddpc's are all
        row-major, which is channels_last only where PyTorch's rule says so
        (one channel, or one pixel)."""
        fmt = checked_memory_format(memory_format, "is_contiguous")
        return self._not_a_view is None and row_major_is(fmt, self.shape)

    def contiguous(self, memory_format=contiguous_format):
        """This tensor where ``is_contiguous(memory_format)``, else a new tensor
        with its elements, as PyTorch's: writes into it stay in it (a copy
        standing where PyTorch has a non-contiguous view, or a tensor asked
        for in a layout it is not in, which ddpc does not lay out differently)."""
        fmt = checked_memory_format(memory_format, "contiguous")
        return self if self._not_a_view is None and row_major_is(fmt, self.shape) else _ag.clone(self)

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    # ---- conversion -------------------------------------------------------------
    def numpy(self, *, force=False):
        """A zero-copy numpy view of a cpu tensor (``force``: of a detached
        host copy of any tensor, as PyTorch's)."""
        if force:
            return self.detach().cpu().resolve_conj().numpy()
        if self.is_cuda:
            raise TypeError(f"can't convert a {self.device} tensor to numpy; copy it to the host with .cpu() first")
        arr = np.asarray(self._buf)
        if arr.dtype.kind == "O":  # numpy wraps a buffer that refused the export (released storage): raise why
            memoryview(self._buf)
        return arr.view(numpy_dtype(self.dtype)) if self.dtype is bfloat16 else arr

    def __array__(self, dtype=None, copy=None):
        arr = self.numpy()
        if copy:
            arr = arr.copy()
        return arr if dtype is None else arr.astype(dtype, copy=False)

    def item(self):
        if self.numel() != 1:
            raise ArgumentError(f"item() needs a tensor with one element, this one has {self.numel()}")
        t = self.cpu()
        if t.dtype in (bfloat16, float16):
            t = t.to(float32)
        return t.numpy().reshape(()).item()

    def tolist(self):
        t = self.cpu()
        if t.dtype is bfloat16:
            t = t.to(float32)
        return t.numpy().tolist()

    def __format__(self, spec):
        """A 0-dim tensor formats as its number (``f"{loss:.4f}"``), as in PyTorch; others as their repr."""
        if self.ndim == 0:
            return format(self.item(), spec)
        return object.__format__(self, spec)

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __bool__(self):
        return bool(self.item())

    def __index__(self):
        if self.dtype.is_floating_point or self.numel() != 1:
            raise TypeError("only integer tensors of a single element can be used as an index")
        return int(self.item())

    def to(self, *args, non_blocking=False, copy=False, dtype=None, device=None, memory_format=preserve_format):
        """``to(device)``, ``to(dtype)``, ``to(device, dtype)`` or ``to(other_tensor)``;
        to bool is self != 0.
        ``memory_format`` lays nothing out differently (see ddpc.memory_format).
        A complex tensor cast to a real dtype keeps its real part, with the
        UserWarning PyTorch gives."""
        checked_memory_format(memory_format, "to")
        device, dtype = parse_to_args(args, device, dtype)
        if dtype is not None and get_dtype(dtype) is bool_ and self.dtype.is_complex:  # z != 0
            return (self.detach() != 0).to(device=device, non_blocking=non_blocking)
        out = self
        target_dtype = get_dtype(dtype) if dtype is not None else self.dtype
        target_dev = ordinal(device) if device is not None else self._buf.device
        if target_dev != self._buf.device:
            buf = _C.Buffer(self.shape, self._buf.dtype, target_dev)
            _C.copy(buf, self._buf, bool(non_blocking))
            out = Tensor(buf)
        if target_dtype is not self.dtype:
            if self.dtype.is_complex and not target_dtype.is_complex:
                warnings.warn("Casting complex values to real discards the imaginary part", UserWarning, stacklevel=2)
            buf = _C.Buffer(out.shape, target_dtype.name, out._buf.device)
            _C.cast(buf, out._buf)
            out = Tensor(buf)
        if out is self and (copy or memory_format._dim_order is not None):  # PyTorch copies into the layout
            out = self.clone()
        return _ag.record_to(self, out)

    def astype(self, dtype):
        return self.to(dtype=dtype)

    def float(self):
        return self.to(dtype=float32)

    def double(self):
        return self.to(dtype=float64)

    def half(self):
        return self.to(dtype=float16)

    def bfloat16(self):
        return self.to(dtype=bfloat16)

    def bool(self):
        return self.to(dtype=bool_)

    def long(self):
        return self.to(dtype=int64)

    def int(self):
        return self.to(dtype=int32)

    def cpu(self):
        return self.to(device="cpu")

    def cuda(self, device=None, non_blocking=False):
        dev = "cuda" if device is None else (f"cuda:{device}" if isinstance(device, int) else device)
        return self.to(device=dev, non_blocking=non_blocking)

    def pin_memory(self):
        if self.is_cuda:
            raise RuntimeError("pin_memory() applies to cpu tensors only")
        buf = _C.Buffer(self.shape, self._buf.dtype, -1, pin_memory=True)
        _C.copy(buf, self._buf)
        return Tensor(buf)

    def clone(self, *, memory_format=preserve_format):
        return _ag.clone(self, memory_format=memory_format)

    def detach(self):
        """A tensor sharing this one's storage, outside the graph."""
        out = Tensor(self._buf)
        out._not_a_view = _copy_view(self)
        return out

    def detach_(self):
        """Takes this tensor out of the graph; a view of a tensor that requires
        grad (or a copy standing for one) raises, as PyTorch's views do."""
        source = _ag._source_of(self)
        if source is not None and source[0].requires_grad:
            raise RuntimeError("Can't detach views in-place. Use detach() instead.")
        self.grad_fn = None
        self.requires_grad = False
        return self

    # ---- autograd -----------------------------------------------------------------
    @property
    def data(self):
        """This tensor's storage as a tensor outside the graph, whose in-place
        writes autograd does not count (as in PyTorch); assigning replaces the storage."""
        out = Tensor(self._buf.unversioned())
        out._not_a_view = _copy_view(self)
        return out

    @data.setter
    def data(self, value):
        if not isinstance(value, Tensor):
            raise TypeError(f"data must be a ddpc.Tensor, got {type(value).__name__}")
        if self.requires_grad and not (value.dtype.is_floating_point or value.dtype.is_complex):
            raise RuntimeError("data set to a tensor that requires gradients must be floating point or complex dtype")
        self._buf = value._buf

    @property
    def is_leaf(self):
        return self.grad_fn is None

    def requires_grad_(self, requires_grad=True):
        if not requires_grad and self.grad_fn is not None:
            raise RuntimeError("requires_grad can only be turned off on leaf tensors; use detach()")
        self.requires_grad = requires_grad
        return self

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Accumulates d(self)/d(leaf) into every leaf's .grad, or only into ``inputs``' (see ddpc.autograd)."""
        _ag.backward(self, gradient, retain_graph, create_graph, inputs)

    def register_hook(self, hook):
        """hook(grad) runs when this tensor's gradient is computed; returning a tensor replaces it."""
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self.grad_fn is not None:
            if self.grad_fn.pre_hooks is None:
                self.grad_fn.pre_hooks = {}
            hooks = self.grad_fn.pre_hooks
        else:
            hooks = self.__dict__.setdefault("_grad_hooks", {})
        handle = _ag.RemovableHandle(hooks)
        hooks[handle.id] = hook
        return handle

    def register_post_accumulate_grad_hook(self, hook):
        """hook(tensor) runs once per backward pass, right after this leaf's .grad is final."""
        if self.grad_fn is not None:
            raise RuntimeError("post accumulate grad hooks can only be registered on leaf tensors")
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        hooks = self.__dict__.setdefault("_post_accumulate_hooks", {})
        handle = _ag.RemovableHandle(hooks)
        hooks[handle.id] = hook
        return handle

    # ---- interop ------------------------------------------------------------------
    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        return self._buf.__dlpack__(stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)

    def __dlpack_device__(self):
        return self._buf.__dlpack_device__()

    @property
    def __cuda_array_interface__(self):
        if not self.is_cuda:
            raise AttributeError("__cuda_array_interface__ exists only on cuda tensors; cpu tensors offer __array__")
        if self.dtype is bfloat16:
            raise AttributeError("__cuda_array_interface__ has no bfloat16 typestr; use DLPack (__dlpack__)")
        return {
            "shape": self.shape,
            "typestr": numpy_dtype(self.dtype).str,
            "data": (self._buf.data_ptr, self._buf.readonly),
            "version": 3,
            "strides": None,
            "stream": _C.cuda_compute_stream(self._buf.device),
        }

    def __reduce__(self):
        """Pickles by value; a cuda tensor unpickles onto the same device index."""
        host = self.cpu()
        return (_rebuild_tensor, (bytes(memoryview(host._buf).cast("B")), self.shape, self.dtype.name,
                                  str(self.device), self.requires_grad))

    def __copy__(self):
        """``copy.copy``: a leaf of this class over this tensor's memory, as PyTorch's: it requires grad as
        this one, has no ``.grad``, and has this one's Python attributes (see ``__deepcopy__``)."""
        return _copied(self, self.detach() if self.is_sparse else self._buf, lambda value: value)

    def __deepcopy__(self, memo):
        """``copy.deepcopy``: a tensor of this class with memory of its own, as PyTorch's. Tensors that share
        memory (views, ``detach()``, a tensor and its slices) and are copied in one deepcopy share the copy's
        memory at the same places, so writes through one show in the others; the copy requires grad as this
        one, its ``.grad`` is a copy of this one's, and its Python attributes are copies of this one's. Only
        leaves can be copied (a computed tensor raises RuntimeError, as in PyTorch). Differences from
        PyTorch: a tensor ddpc copies where PyTorch has a view (``x[::2]``, ``x.t()``; see Tensor) copies as a
        tensor of its own, and attributes whose names begin with an underscore are left out (there ddpc keeps
        its autograd and view bookkeeping, which belongs to this tensor)."""
        if self.grad_fn is not None:
            raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support the deepcopy "
                               "protocol at the moment.  If you were attempting to deepcopy a module, this may be "
                               "because of a torch.nn.utils.weight_norm usage, see "
                               "https://github.com/pytorch/pytorch/pull/103001")
        if self.is_sparse:
            new = _copied(self, self.clone(), lambda value: copy.deepcopy(value, memo))
        else:
            # The memo maps the storage (which self keeps alive) to its copy, as PyTorch's storage deepcopy.
            root = _storage.storage_root(self._buf)
            twin = memo.get(id(root))
            if twin is None:
                twin = memo[id(root)] = Tensor(root).clone()._buf
            buf = twin if self._buf is root else twin.view(0, (root.storage_nbytes,), "uint8").view(
                self._buf.data_ptr - root.data_ptr, tuple(self.shape), self._buf.dtype)
            new = _copied(self, buf, lambda value: copy.deepcopy(value, memo))
        if self._grad is not None:
            new.grad = copy.deepcopy(self._grad, memo)
        return new

    # ---- views and indexing -------------------------------------------------------
    def _normalize_shape(self, shape):
        shape = list(_size_args(shape))
        unknown = [i for i, s in enumerate(shape) if s == -1]
        if len(unknown) > 1:
            raise ArgumentError("only one dimension can be -1")
        known = 1
        for s in shape:
            if s != -1:
                if s < 0:
                    raise ArgumentError(f"invalid shape {tuple(shape)}")
                known *= s
        if unknown:
            if known == 0 or self.numel() % known:
                raise ArgumentError(f"shape {tuple(shape)} is invalid for a tensor of {self.numel()} elements")
            shape[unknown[0]] = self.numel() // known
        elif known != self.numel():
            raise ArgumentError(f"shape {tuple(shape)} is invalid for a tensor of {self.numel()} elements")
        return tuple(shape)

    def reshape(self, *args, shape=None):
        return _ag.reshape(self, _size_or_keyword(args, shape, "reshape", "shape"))

    def view(self, *args, size=None, dtype=None):
        """reshape (ddpc's views are its reshapes), refused where PyTorch's
        view is, where its reshape would copy (a copy standing for a
        transposed or strided view whose elements no strides see in the new
        shape); or, given a dtype, the tensor's memory read as that dtype, as
        PyTorch's ``view(dtype)``."""
        shape = _size_or_keyword(args, size, "view", "size")
        if dtype is None and len(shape) == 1 and isinstance(shape[0], (_dtype_type, str, np.dtype, type)):
            dtype = shape[0]
        elif dtype is None:
            if _reshaped_copy_view(self, self._normalize_shape(shape)) is False:
                raise RuntimeError("view size is not compatible with input tensor's size and stride (at least one "
                                   "dimension spans across two contiguous subspaces). Use .reshape(...) instead.")
            return _ag.reshape(self, shape)
        return _view_as_dtype(self, get_dtype(dtype))

    def flatten(self, start_dim=0, end_dim=-1):
        if self.ndim == 0:
            return self.reshape(1)
        s, e = _ag._dim(self, start_dim), _ag._dim(self, end_dim)
        if s > e:
            raise ArgumentError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
        if s == e:  # nothing to merge: the tensor itself, as PyTorch returns
            return self
        return self.reshape(self.shape[:s] + (math.prod(self.shape[s:e + 1]),) + self.shape[e + 1:])

    def __getitem__(self, index):
        return _ag.index(self, index)

    def _getitem(self, index):
        """``self[index]`` outside the graph."""
        return _read(self, _indexing.select(self.shape, index), "indexing")

    def __setitem__(self, index, value):
        sel = _indexing.select(self.shape, index)
        if not isinstance(value, Tensor):
            value = full((), value, dtype=self.dtype, device=self.device) if isinstance(value, numbers.Number) \
                else tensor(value, dtype=self.dtype, device=self.device)
        extra = value.ndim - len(sel.shape)
        if extra > 0 and all(n == 1 for n in value.shape[:extra]):  # dropped, as PyTorch drops them
            value = value.reshape(value.shape[extra:])
        if _in_graph(self, value):
            _ag.write(self, sel, value.to(device=self.device, dtype=self.dtype))
            return
        _check_no_grad_inplace(self, "item assignment")
        src = value.detach().to(device=self.device, dtype=self.dtype)
        if _shares_memory(src, self):  # elements written early would be read later
            src = src.clone()
        self._buf.bump_version()
        sel.write(self._buf, src._buf)
        _write_back(self)

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    # ---- in-place storage ops ----------------------------------------------------
    def copy_(self, src, non_blocking=False):
        """Copies src (any device and dtype, broadcast to self's shape) into self."""
        if not isinstance(src, Tensor):
            src = tensor(src, dtype=self.dtype)
        if src.shape != self.shape:
            if src.numel() == 1 and not _in_graph(self, src):
                return self.fill_(src.item())
            if broadcast_shapes(src.shape, self.shape) != self.shape:
                raise ArgumentError(f"copy_: a source of shape {src.shape} does not broadcast to {self.shape}")
            src = src.expand(self.shape)
        if _in_graph(self, src):
            return _ag.write(self, None, src.to(device=self.device, dtype=self.dtype))
        _check_no_grad_inplace(self, "copy_")
        if src.dtype is not self.dtype:
            src = src.to(dtype=self.dtype) if src._buf.device == self._buf.device else src.to(device=self.device)
        self._buf.bump_version()
        if src.dtype is not self.dtype:
            _C.cast(self._buf, src._buf)
        else:
            _C.copy(self._buf, src._buf, bool(non_blocking))
        _write_back(self)
        return self

    def fill_(self, value):
        if self.grad_fn is not None and _ag.is_grad_enabled():  # recorded, as PyTorch's (no gradient flows back)
            return self.copy_(full(self.shape, value, dtype=self.dtype, device=self.device))
        _check_no_grad_inplace(self, "fill_")
        if isinstance(value, (complex, np.complexfloating)):
            if not self.dtype.is_complex:
                raise DtypeError(f"fill_: a complex value can't be stored in a {self.dtype} tensor")
            self._buf.bump_version()
            _C.fill(self._buf, float(value.real), float(value.imag))
            _write_back(self)
            return self
        if not isinstance(value, Tensor):
            _check_storable(value, self.dtype)
        if not self.dtype.is_floating_point and isinstance(value, numbers.Integral):
            value = _int_scalar(value, self.dtype)
            if abs(value) > _DOUBLE_INTS:
                # _C.fill takes a double: fill the value less its low 21 bits (exact
                # in a double), then add those bits, which int64 arithmetic keeps exact.
                low = value % (1 << 21)
                self._buf.bump_version()
                _C.fill(self._buf, float(value - low))
                _C.scalar(_ADD, self._buf, self._buf, float(low))
                _write_back(self)
                return self
        value = float(value)
        self._buf.bump_version()
        _C.fill(self._buf, value)
        _write_back(self)
        return self

    def zero_(self):
        return self.fill_(0)

    # ---- arithmetic --------------------------------------------------------------
    def _binary(self, other, op, out=None):
        if isinstance(other, numbers.Number):
            rdt = self.dtype
            if rdt is bool_ and not isinstance(other, (bool, np.bool_)):  # bool with an int number is int64
                rdt = int64
            if not rdt.is_floating_point and (_is_float_scalar(other) or op in (_DIV, _RDIV)):
                rdt = get_default_dtype()
            if not rdt.is_floating_point:
                other = _int_scalar(other, rdt)
                if abs(other) > _DOUBLE_INTS:  # _C.scalar's double would round it
                    return self._binary(full(self.shape, other, dtype=rdt, device=self.device), op, out)
            if out is not None and out.dtype is not rdt:
                return out.copy_(_ag.check_inplace_result(out, self._binary(other, op)))
            a = self if rdt is self.dtype else self.to(dtype=rdt)
            res = out if out is not None else Tensor(_C.Buffer(self.shape, rdt.name, self._buf.device))
            _check_inplace(out)
            _C.scalar(op, res._buf, a._buf, float(other))
            _write_back(res)
            return res
        if not isinstance(other, Tensor):
            other = tensor(other, device=self.device)
        if out is not None and _shares_memory(other, out) and not _same_memory(other, out):
            # The C loop would read elements of `other` it has already overwritten.
            other = other.detach().clone()
        if other.shape != self.shape:
            raise ArgumentError(f"shapes {self.shape} and {other.shape} differ (autograd's ops broadcast)")
        if other._buf.device != self._buf.device:
            raise ArgumentError(f"tensors are on different devices ({self.device} and {other.device})")
        rdt = promote(self.dtype, other.dtype)
        if not rdt.is_floating_point and op in (_DIV, _RDIV):
            rdt = get_default_dtype()
        if out is not None and out.dtype is not rdt:
            return out.copy_(_ag.check_inplace_result(out, self._binary(other, op)))
        a = self if rdt is self.dtype else self.to(dtype=rdt)
        b = other if rdt is other.dtype else other.to(dtype=rdt)
        res = out if out is not None else Tensor(_C.Buffer(self.shape, rdt.name, self._buf.device))
        _check_inplace(out)
        _C.binary(op, res._buf, a._buf, b._buf)
        _write_back(res)
        return res

    def __add__(self, o): return _ag.add(self, o)
    def __radd__(self, o): return _ag.add(self, o)
    def __sub__(self, o): return _ag.sub(self, o)
    def __rsub__(self, o): return _ag.rsub(self, o)
    def __mul__(self, o): return _ag.mul(self, o)
    def __rmul__(self, o): return _ag.mul(self, o)
    def __truediv__(self, o): return _ag.div(self, o)
    def __rtruediv__(self, o): return _ag.rdiv(self, o)
    def __neg__(self): return _ag.neg(self)
    def __pow__(self, e): return _ag.pow(self, e)
    def __rpow__(self, base): return _ag.rpow(self, base)
    def __ipow__(self, e): return self.pow_(e)
    def __matmul__(self, o): return _ag.matmul(self, o)
    def _inplace(self, o, op):
        if op == _SUB:
            _ag.check_bool_sub(self, o)
        if isinstance(o, Tensor) and o.is_sparse:  # the engine's dense_grad += sparse_grad, optimizers' p.add_(sparse)
            if op not in (_ADD, _SUB):
                raise NotImplementedError("in-place mul or div of a dense tensor by a sparse COO one: convert it "
                                          "with .to_dense() first")
            _check_no_grad_inplace(self, "in-place op")
            return _sparse_coo.add_into_dense(self, o, 1 if op == _ADD else -1, out=self)
        if _in_graph(self, o):
            return _ag.inplace_binary(self, o, op)
        if (isinstance(o, Tensor) and o.shape != self.shape) or _complex.is_complex_operand(o) or \
                self.dtype.is_complex:  # x += bias_row (or complex x): computed aside, then written
            _check_no_grad_inplace(self, "in-place op")
            with _ag.no_grad():
                res = _ag.check_inplace_result(self, _ag._binary(self.detach(), o.detach() if isinstance(o, Tensor)
                                                                 else o, op))
            self._buf.bump_version()
            _C.copy(self._buf, res._buf)
            _write_back(self)
            return self
        return self._binary(o, op, out=self)

    def __iadd__(self, o): return self._inplace(o, _ADD)
    def __isub__(self, o): return self._inplace(o, _SUB)
    def __imul__(self, o): return self._inplace(o, _MUL)
    def __itruediv__(self, o): return self._inplace(o, _DIV)
    def __ifloordiv__(self, o): return self.floor_divide_(o)
    def __imod__(self, o): return self.remainder_(o)

    def add(self, other, *, alpha=1): return _pw.add(self, other, alpha=alpha)
    def sub(self, other, *, alpha=1): return _pw.sub(self, other, alpha=alpha)
    mul = __mul__
    neg = __neg__
    pow = __pow__
    matmul = __matmul__
    mm = __matmul__

    def exp(self): return _ag.exp(self)
    def log(self): return _ag.log(self)
    def relu(self): return _ag.relu(self)
    def tanh(self): return _ag.tanh(self)
    def sigmoid(self): return _ag.sigmoid(self)

    # ---- layout: these copy where PyTorch views non-contiguous elements (see the class docstring)
    def t(self):
        if self.ndim > 2:
            raise RuntimeError(f"t() expects a tensor with <= 2 dims, but this one has {self.ndim}; use transpose")
        return _ag.transpose(self, 0, -1)

    @property
    def T(self):
        return _ag.permute(self, range(self.ndim - 1, -1, -1))

    @property
    def mT(self):
        return _ag.transpose(self, -2, -1)

    def transpose(self, dim0, dim1):
        return _ag.transpose(self, dim0, dim1)

    swapaxes = swapdims = transpose

    def permute(self, *args, dims=None):
        return _ag.permute(self, _size_args(_size_or_keyword(args, dims, "permute", "dims")))

    def moveaxis(self, source, destination):
        return self.movedim(source, destination)

    def movedim(self, source, destination):
        src = [source] if isinstance(source, numbers.Integral) else list(source)
        dst = [destination] if isinstance(destination, numbers.Integral) else list(destination)
        if len(src) != len(dst):
            raise ArgumentError(f"movedim: {len(src)} source dims but {len(dst)} destinations")
        src = [_ag._dim(self, d) for d in src]
        dst = [_ag._dim(self, d) for d in dst]
        order = [None] * self.ndim
        for s_, d_ in zip(src, dst):
            order[d_] = s_
        rest = iter(d for d in range(self.ndim) if d not in src)
        return _ag.permute(self, [d if d is not None else next(rest) for d in order])

    def unsqueeze(self, dim):
        d = _ag._dim(self, dim, self.ndim + 1)
        return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

    def squeeze(self, dim=None):
        if dim is None:
            dims = range(self.ndim)
        else:
            dims = [_ag._dim(self, d) for d in ((dim,) if isinstance(dim, numbers.Integral) else dim)]
            if len(set(dims)) != len(dims):
                raise ArgumentError(f"squeeze: dim {tuple(dim)} names a dim twice")
        return self.reshape(tuple(s for d, s in enumerate(self.shape) if not (d in dims and s == 1)))

    def expand(self, *args, size=None):
        return _ag.expand(self, _size_args(_size_or_keyword(args, size, "expand", "size")))

    def expand_as(self, other):
        return _ag.expand(self, other.shape)

    broadcast_to = expand

    def repeat(self, *args, repeats=None):
        """Tiles the tensor ``repeats[d]`` times along each dim (new leading dims for extra repeats)."""
        sizes = _size_args(_size_or_keyword(args, repeats, "repeat", "repeats"))
        if len(sizes) < self.ndim:
            raise ArgumentError(f"repeat: {len(sizes)} repeats for a tensor of {self.ndim} dims")
        shape = (1,) * (len(sizes) - self.ndim) + self.shape
        # (1, s0, 1, s1, ...) expanded to (r0, s0, r1, s1, ...) lays the copies out as tiles.
        inter = tuple(x for s_ in shape for x in (1, s_))
        tiled = tuple(x for r, s_ in zip(sizes, shape) for x in (r, s_))
        return _ag._own(self.reshape(inter).expand(tiled).reshape(tuple(r * s_ for r, s_ in zip(sizes, shape))), self)

    def narrow(self, dim, start, length):
        d = _ag._dim(self, dim)
        start = start + self.shape[d] if start < 0 else start
        if not (0 <= start and 0 <= length and start + length <= self.shape[d]):
            raise IndexOutOfRangeError(f"narrow: [{start}, {start + length}) is outside dim {d} of size "
                                       f"{self.shape[d]}")
        return self[(slice(None),) * d + (slice(start, start + length),)]

    def select(self, dim, index):
        return self[(slice(None),) * _ag._dim(self, dim) + (index,)]

    def index_select(self, dim, index):
        """The slices at ``index`` (0- or 1-d) along ``dim``; a 0-d tensor takes one index and gives a 0-d tensor."""
        sel = _lo._along(self, dim, index, "index_select")
        if self.ndim == 0:
            if index.numel() != 1:
                raise IndexOutOfRangeError(f"index_select: a 0-d tensor takes one index, got {index.numel()}")
            return self[sel].reshape(())
        return self[sel]

    def view_as(self, other):
        return self.reshape(other.shape)

    reshape_as = view_as

    # ---- comparisons ------------------------------------------------------------------
    def _compare(self, other, op):
        """Elementwise comparison, as a bool tensor; outside the graph."""
        if isinstance(other, (np.ndarray, list, tuple)):
            other = tensor(other, device=self.device)
        elif not isinstance(other, (Tensor, numbers.Number)):
            return NotImplemented
        a = self.detach()
        if a.dtype in (float16, bfloat16) and (isinstance(other, numbers.Number) or other.ndim == 0
                                               and other.dtype.is_floating_point):
            # As PyTorch: a float number (or 0-d float tensor) is compared in the 16-bit dtype, rounded to it.
            other = tensor(other.item() if isinstance(other, Tensor) else other, dtype=a.dtype).item()
        if isinstance(other, Tensor):
            other = other.detach()
        elif not (a.dtype.is_floating_point or a.dtype.is_complex) and not _is_float_scalar(other) and \
                not isinstance(other, complex):
            lo, hi = {uint8: (0, 256), bool_: (0, 2)}.get(a.dtype) or _INT_BOUNDS[a.dtype]
            if not lo <= other < hi:  # a value the dtype can't hold: compare in a wider one
                a = a.to(dtype=int64 if a.dtype is not int64 else float64)
        if a._buf.device < 0 and a.dtype in _COMPARED_DIRECTLY and (
                isinstance(other, Tensor) and other.dtype is a.dtype and other.shape == a.shape and
                other._buf.device == a._buf.device or
                isinstance(other, numbers.Real) and (a.dtype.is_floating_point or isinstance(other, numbers.Integral)
                                                     and abs(other) <= _DOUBLE_INTS)):
            res = Tensor(_C.Buffer(a.shape, "bool", a._buf.device))  # into bool in one host pass
            if isinstance(other, Tensor):
                _C.binary(op, res._buf, a._buf, other._buf)
            else:
                _C.scalar(op, res._buf, a._buf, float(other))
            return res
        with _ag.no_grad():
            res = _ag._binary(a, other, op)
        return res if res.dtype is bool_ else res.to(dtype=bool_)

    def __eq__(self, o): return self._compare(o, _EQ)
    def __ne__(self, o): return self._compare(o, _NE)
    def __lt__(self, o): return self._compare(o, _LT)
    def __le__(self, o): return self._compare(o, _LE)
    def __gt__(self, o): return self._compare(o, _GT)
    def __ge__(self, o): return self._compare(o, _GE)
    __hash__ = object.__hash__  # by identity, as PyTorch's (== compares elements)

    eq = __eq__
    ne = __ne__
    lt = __lt__
    le = __le__
    gt = __gt__
    ge = __ge__

    def add_(self, o, *, alpha=1):
        if self.dtype is bool_:  # PyTorch takes alpha as a bool here, so that mask.add_(mask2, alpha=2) stays bool
            alpha = bool(alpha)
        return self.__iadd__(o if alpha == 1 else o * alpha)
    def sub_(self, o, *, alpha=1):
        _ag.check_bool_sub(self, o)  # before alpha scales a bool o to int64
        return self.__isub__(o if alpha == 1 else o * alpha)
    def mul_(self, o): return self.__imul__(o)

    def div_(self, o, *, rounding_mode=None):
        if rounding_mode is None:
            return self.__itruediv__(o)
        return _ag.inplace_apply(self, lambda t: t.div(o, rounding_mode=rounding_mode), "div_", (o,))

    def sum(self, dim=None, keepdim=False, *, dtype=None):
        return _ag.sum(self, dim, keepdim, dtype=dtype)

    def mean(self, dim=None, keepdim=False, *, dtype=None):
        return _ag.mean(self, dim, keepdim, dtype=dtype)

    def max(self, dim=None, keepdim=False, *, other=None):
        return _ag.max(self, dim, keepdim, other=other)

    def min(self, dim=None, keepdim=False, *, other=None):
        return _ag.min(self, dim, keepdim, other=other)

    def argmax(self, dim=None, keepdim=False):
        return _ag.argmax(self, dim, keepdim)

    def argmin(self, dim=None, keepdim=False):
        return _ag.argmin(self, dim, keepdim)

    # ---- reductions, scans, splitting, gather / scatter, sorting (autograd.py has the docs)
    def prod(self, dim=None, keepdim=False, dtype=None): return _ag.prod(self, dim, keepdim, dtype)
    def cumsum(self, dim, dtype=None): return _ag.cumsum(self, dim, dtype)
    def cumprod(self, dim, dtype=None): return _ag.cumprod(self, dim, dtype)
    def var(self, dim=None, unbiased=None, keepdim=False, *, correction=None):
        return _ag.var(self, dim, unbiased, keepdim, correction=correction)
    def std(self, dim=None, unbiased=None, keepdim=False, *, correction=None):
        return _ag.std(self, dim, unbiased, keepdim, correction=correction)
    def norm(self, p="fro", dim=None, keepdim=False, dtype=None): return _ag.norm(self, p, dim, keepdim, dtype)
    def amax(self, dim=(), keepdim=False): return _ag.amax(self, dim, keepdim)
    def amin(self, dim=(), keepdim=False): return _ag.amin(self, dim, keepdim)
    def logsumexp(self, dim, keepdim=False): return _ag.logsumexp(self, dim, keepdim)
    def all(self, dim=None, keepdim=False): return _ag.all_(self, dim, keepdim)
    def any(self, dim=None, keepdim=False): return _ag.any_(self, dim, keepdim)
    def count_nonzero(self, dim=None): return _ag.count_nonzero(self, dim)
    def chunk(self, chunks, dim=0): return _ag.chunk(self, chunks, dim)
    def split(self, split_size, dim=0): return _ag.split(self, split_size, dim)
    def split_with_sizes(self, split_sizes, dim=0): return _ag.split_with_sizes(self, split_sizes, dim)
    def tensor_split(self, indices_or_sections, dim=0): return _ag.tensor_split(self, indices_or_sections, dim)
    def unbind(self, dim=0): return _ag.unbind(self, dim)
    def flip(self, *args, dims=None):
        return _ag.flip(self, _size_args(_size_or_keyword(args, dims, "flip", "dims")))
    def roll(self, shifts, dims=None): return _ag.roll(self, shifts, dims)
    def tril(self, diagonal=0): return _ag.tril(self, diagonal)
    def triu(self, diagonal=0): return _ag.triu(self, diagonal)
    def unflatten(self, dim, sizes): return _ag.unflatten(self, dim, sizes)
    def repeat_interleave(self, repeats, dim=None, *, output_size=None):
        return _ag.repeat_interleave(self, repeats, dim, output_size=output_size)
    def diff(self, n=1, dim=-1, prepend=None, append=None): return _ag.diff(self, n, dim, prepend, append)
    def gather(self, dim, index): return _ag.gather(self, dim, index)
    def scatter(self, dim, index, src=None, value=None, reduce=None):
        return _ag.scatter(self, dim, index, src, value, reduce)
    def scatter_add(self, dim, index, src): return _ag.scatter_add(self, dim, index, src)
    def index_add(self, dim, index, source, alpha=1): return _ag.index_add(self, dim, index, source, alpha)
    def scatter_(self, dim, index, src=None, value=None, reduce=None):
        return self.copy_(_ag.scatter(self, dim, index, src, value, reduce))
    def scatter_add_(self, dim, index, src): return self.copy_(_ag.scatter_add(self, dim, index, src))
    def index_add_(self, dim, index, source, alpha=1): return self.copy_(_ag.index_add(self, dim, index, source, alpha))
    def take(self, index): return _ag.take(self, index)
    def masked_select(self, mask): return _ag.masked_select(self, mask)
    def sort(self, dim=-1, descending=False, stable=False): return _ag.sort(self, dim, descending, stable)
    def argsort(self, dim=-1, descending=False, stable=False): return _ag.argsort(self, dim, descending, stable)
    def msort(self): return _ag.msort(self)
    def nonzero(self, *, as_tuple=False): return _ag.nonzero(self, as_tuple=as_tuple)
    def argwhere(self): return _ag.argwhere(self)
    def topk(self, k, dim=-1, largest=True, sorted=True): return _ag.topk(self, k, dim, largest, sorted)
    def unique(self, sorted=True, return_inverse=False, return_counts=False, dim=None):
        return _ag.unique(self, sorted, return_inverse, return_counts, dim)
    def bmm(self, other): return _ag.bmm(self, other)
    def mv(self, vec): return _ag.mv(self, vec)
    def dot(self, other): return _ag.dot(self, other)
    def outer(self, other): return _ag.outer(self, other)
    def addmm(self, mat1, mat2, *, beta=1, alpha=1): return _ag.addmm(self, mat1, mat2, beta=beta, alpha=alpha)
    # ---- elementwise math (autograd.py); the ``_`` forms write the result into the tensor
    def abs(self): return _ag.abs(self)
    def abs_(self): return _ag.inplace_apply(self, _ag.abs, "abs_")
    def exp_(self): return _ag.inplace_apply(self, _ag.exp, "exp_")
    def log_(self): return _ag.inplace_apply(self, _ag.log, "log_")
    def neg_(self): return _ag.inplace_apply(self, _ag.neg, "neg_")
    def relu_(self): return _ag.inplace_apply(self, _ag.relu, "relu_")
    def sigmoid_(self): return _ag.inplace_apply(self, _ag.sigmoid, "sigmoid_")
    def tanh_(self): return _ag.inplace_apply(self, _ag.tanh, "tanh_")
    def pow_(self, exponent): return _ag.inplace_apply(self, lambda t: _ag.pow(t, exponent), "pow_", (exponent,))
    absolute, absolute_, __abs__ = abs, abs_, abs
    def sqrt(self): return _ag.sqrt(self)
    def sqrt_(self): return _ag.inplace_apply(self, _ag.sqrt, "sqrt_")
    def rsqrt(self): return _ag.rsqrt(self)
    def rsqrt_(self): return _ag.inplace_apply(self, _ag.rsqrt, "rsqrt_")
    def square(self): return _ag.square(self)
    def square_(self): return _ag.inplace_apply(self, _ag.square, "square_")
    def sin(self): return _ag.sin(self)
    def sin_(self): return _ag.inplace_apply(self, _ag.sin, "sin_")
    def cos(self): return _ag.cos(self)
    def cos_(self): return _ag.inplace_apply(self, _ag.cos, "cos_")
    def log1p(self): return _ag.log1p(self)
    def log1p_(self): return _ag.inplace_apply(self, _ag.log1p, "log1p_")
    def expm1(self): return _ag.expm1(self)
    def expm1_(self): return _ag.inplace_apply(self, _ag.expm1, "expm1_")
    def erf(self): return _ag.erf(self)
    def erf_(self): return _ag.inplace_apply(self, _ag.erf, "erf_")
    def reciprocal(self): return _ag.reciprocal(self)
    def reciprocal_(self): return _ag.inplace_apply(self, _ag.reciprocal, "reciprocal_")
    def sign(self): return _ag.sign(self)
    def sign_(self): return _ag.inplace_apply(self, _ag.sign, "sign_")
    def floor(self): return _ag.floor(self)
    def floor_(self): return _ag.inplace_apply(self, _ag.floor, "floor_")
    def ceil(self): return _ag.ceil(self)
    def ceil_(self): return _ag.inplace_apply(self, _ag.ceil, "ceil_")
    def trunc(self): return _ag.trunc(self)
    def trunc_(self): return _ag.inplace_apply(self, _ag.trunc, "trunc_")
    def round(self, decimals=0): return _ag.round(self, decimals)
    def round_(self, decimals=0): return _ag.inplace_apply(self, lambda t: _ag.round(t, decimals), "round_")
    def __round__(self, ndigits=None): return _ag.round(self, ndigits or 0)
    def clamp(self, min=None, max=None): return _ag.clamp(self, min, max)
    def clamp_(self, min=None, max=None):
        return _ag.inplace_apply(self, lambda t: _ag.clamp(t, min, max), "clamp_", (min, max))
    clip, clip_ = clamp, clamp_
    def clamp_min(self, min): return _ag.clamp(self, min, None)
    def clamp_min_(self, min): return self.clamp_(min, None)
    def clamp_max(self, max): return _ag.clamp(self, None, max)
    def clamp_max_(self, max): return self.clamp_(None, max)
    def maximum(self, other): return _ag.maximum(self, other)
    def minimum(self, other): return _ag.minimum(self, other)
    def where(self, condition, other): return _ag.where(condition, self, other)
    def take_along_dim(self, indices, dim=None): return _ag.take_along_dim(self, indices, dim)
    def index_put(self, indices, values, accumulate=False): return _ag.index_put(self, indices, values, accumulate)
    def index_put_(self, indices, values, accumulate=False):
        return _ag.inplace_apply(self, lambda t: _ag.index_put(t, indices, values, accumulate), "index_put_",
                                 (values,))
    def masked_fill(self, mask, value): return _ag.masked_fill(self, mask, value)
    def masked_fill_(self, mask, value):
        return _ag.inplace_apply(self, lambda t: _ag.masked_fill(t, mask, value), "masked_fill_", (value,))
    def lerp(self, end, weight): return _ag.lerp(self, end, weight)
    def lerp_(self, end, weight):
        return _ag.inplace_apply(self, lambda t: _ag.lerp(t, end, weight), "lerp_", (end, weight))
    def addcmul(self, tensor1, tensor2, value=1): return _ag.addcmul(self, tensor1, tensor2, value)
    def addcmul_(self, tensor1, tensor2, value=1):
        return _ag.inplace_apply(self, lambda t: _ag.addcmul(t, tensor1, tensor2, value), "addcmul_",
                                 (tensor1, tensor2))
    def addcdiv(self, tensor1, tensor2, value=1): return _ag.addcdiv(self, tensor1, tensor2, value)
    def addcdiv_(self, tensor1, tensor2, value=1):
        return _ag.inplace_apply(self, lambda t: _ag.addcdiv(t, tensor1, tensor2, value), "addcdiv_",
                                 (tensor1, tensor2))
    def nan_to_num(self, nan=0.0, posinf=None, neginf=None): return _ag.nan_to_num(self, nan, posinf, neginf)
    def nan_to_num_(self, nan=0.0, posinf=None, neginf=None):
        return _ag.inplace_apply(self, lambda t: _ag.nan_to_num(t, nan, posinf, neginf), "nan_to_num_")
    def isnan(self): return _ag.isnan(self)
    def isinf(self): return _ag.isinf(self)
    def isfinite(self): return _ag.isfinite(self)
    def logical_not(self): return _ag.logical_not(self)
    def logical_and(self, other): return _ag.logical_and(self, other)
    def logical_or(self, other): return _ag.logical_or(self, other)
    def logical_xor(self, other): return _ag.logical_xor(self, other)
    def isclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
        return _ag.isclose(self, other, rtol, atol, equal_nan)
    def allclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
        return _ag.allclose(self, other, rtol, atol, equal_nan)
    def equal(self, other): return _ag.equal(self, other)

    # ---- complex numbers (see ddpc._complex)
    def conj(self): return _complex.conj(self)
    def conj_physical(self): return _complex.conj_physical(self)
    def resolve_conj(self): return self
    def resolve_neg(self): return self
    def is_conj(self): return False
    def is_neg(self): return False
    def angle(self): return _complex.angle(self)

    @property
    def real(self):
        """The real part (this tensor when real); writes reach this tensor, as through PyTorch's view."""
        return _complex.real(self)

    @real.setter
    def real(self, value):
        _complex.real(self).copy_(value)

    @property
    def imag(self):
        """The imaginary part of a complex tensor; writes reach this tensor, as through PyTorch's view."""
        return _complex.imag(self)

    @imag.setter
    def imag(self, value):
        _complex.imag(self).copy_(value)

    # ---- new tensors like this one (its dtype and device unless given)
    def type_as(self, other): return self.to(dtype=other.dtype)
    def new_empty(self, *args, size=None, dtype=None, device=None, requires_grad=False):
        return empty(*args, size=size, dtype=dtype or self.dtype, device=device or self.device,
                     requires_grad=requires_grad)
    def new_zeros(self, *args, size=None, dtype=None, device=None, requires_grad=False):
        return zeros(*args, size=size, dtype=dtype or self.dtype, device=device or self.device,
                     requires_grad=requires_grad)
    def new_ones(self, *args, size=None, dtype=None, device=None, requires_grad=False):
        return ones(*args, size=size, dtype=dtype or self.dtype, device=device or self.device,
                    requires_grad=requires_grad)
    def new_full(self, size, fill_value, dtype=None, device=None, requires_grad=False):
        return full(size, fill_value, dtype=dtype or self.dtype, device=device or self.device,
                    requires_grad=requires_grad)
    def new_tensor(self, data, dtype=None, device=None, requires_grad=False):
        return tensor(data, dtype=dtype or self.dtype, device=device or self.device, requires_grad=requires_grad)

    # ---- metadata, casts and autograd helpers in PyTorch's names ---------------------
    def nelement(self):
        return self.numel()

    def is_floating_point(self):
        return self.dtype.is_floating_point

    def stride(self, dim=None):
        """The steps, in elements, between neighbours along each dim. ddpc tensors
        are contiguous, so these are always the contiguous strides (PyTorch's
        differ for the views that ddpc copies, such as x.t())."""
        strides = _indexing.contiguous_strides(self.shape)
        return tuple(strides) if dim is None else strides[_ag._dim(self, dim)]

    def storage_offset(self):
        """Where this tensor starts in the storage it views, in elements (0 for a tensor of its own)."""
        base = self._buf.base
        return (self.data_ptr() - base.data_ptr) // self.element_size() if isinstance(base, _C.Buffer) else 0

    def type(self, dtype=None, non_blocking=False):
        """With no dtype, the type's name: 'ddpc.FloatTensor', 'ddpc.cuda.LongTensor'
        and so on (PyTorch's names begin with 'torch.'); with a dtype, or such a
        name (with 'ddpc.' or 'torch.'), the tensor cast to it."""
        if dtype is None:
            return ("ddpc.cuda." if self.is_cuda else "ddpc.") + _TYPE_NAMES[self.dtype]
        if isinstance(dtype, _LegacyTensorType):  # t.type(ddpc.FloatTensor)
            dtype = f"{dtype.__module__}.{dtype.__name__}"
        if isinstance(dtype, str) and dtype.endswith("Tensor"):
            prefix, _, name = dtype.rpartition(".")
            by_name = {v: k for k, v in _TYPE_NAMES.items()}
            if name not in by_name or prefix not in ("ddpc", "torch", "ddpc.cuda", "torch.cuda"):
                raise ArgumentError(f"type: unknown tensor type {dtype!r}")
            dev = "cuda" if prefix.endswith("cuda") else "cpu"
            return self.to(device=self.device if (dev == "cuda") == self.is_cuda else dev, dtype=by_name[name],
                           non_blocking=non_blocking)
        return self.to(dtype=dtype, non_blocking=non_blocking)

    def retain_grad(self):
        """Keeps this non-leaf tensor's gradient in ``.grad`` after backward (a leaf's is kept anyway)."""
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on a tensor that has requires_grad=False")
        if self.grad_fn is None or self.__dict__.get("_retains_grad"):
            return
        ref = weakref.ref(self)

        def keep(grad):
            t = ref()
            if t is not None:
                t.grad = grad.clone() if t.grad is None else t.grad + grad

        # Run by the node after the tensor's hooks; an in-place op that gives this tensor a
        # new history moves it there (autograd._follow_retain).
        self._retain_keep, self._retained_by = keep, self.grad_fn
        self.grad_fn.retain = keep
        self._retains_grad = True

    @property
    def retains_grad(self):
        return bool(self.__dict__.get("_retains_grad"))

    # ---- more math, in the functions of _pointwise, _linalg, _layout and _random ------
    def softmax(self, dim, dtype=None):
        return _ag.softmax(self if dtype is None else self.to(dtype=dtype), dim)

    def log_softmax(self, dim, dtype=None):
        return _ag.log_softmax(self if dtype is None else self.to(dtype=dtype), dim)

    def hardshrink(self, lambd=0.5): return _pw.hardshrink(self, lambd)
    def log2(self): return _ag.log2(self)
    def log2_(self): return _ag.inplace_apply(self, _ag.log2, "log2_")
    def log10(self): return _ag.log10(self)
    def log10_(self): return _ag.inplace_apply(self, _ag.log10, "log10_")
    def exp2(self): return _ag.exp2(self)
    def exp2_(self): return _ag.inplace_apply(self, _ag.exp2, "exp2_")
    def sinh(self): return _ag.sinh(self)
    def sinh_(self): return _ag.inplace_apply(self, _ag.sinh, "sinh_")
    def cosh(self): return _ag.cosh(self)
    def cosh_(self): return _ag.inplace_apply(self, _ag.cosh, "cosh_")
    def tan(self): return _ag.tan(self)
    def tan_(self): return _ag.inplace_apply(self, _ag.tan, "tan_")
    def asin(self): return _ag.asin(self)
    def asin_(self): return _ag.inplace_apply(self, _ag.asin, "asin_")
    def acos(self): return _ag.acos(self)
    def acos_(self): return _ag.inplace_apply(self, _ag.acos, "acos_")
    def atan(self): return _ag.atan(self)
    def atan_(self): return _ag.inplace_apply(self, _ag.atan, "atan_")
    def asinh(self): return _ag.asinh(self)
    def asinh_(self): return _ag.inplace_apply(self, _ag.asinh, "asinh_")
    def acosh(self): return _ag.acosh(self)
    def acosh_(self): return _ag.inplace_apply(self, _ag.acosh, "acosh_")
    def atanh(self): return _ag.atanh(self)
    def atanh_(self): return _ag.inplace_apply(self, _ag.atanh, "atanh_")
    arcsin, arcsin_, arccos, arccos_, arctan, arctan_ = asin, asin_, acos, acos_, atan, atan_
    arcsinh, arcsinh_, arccosh, arccosh_, arctanh, arctanh_ = asinh, asinh_, acosh, acosh_, atanh, atanh_
    def erfc(self): return _ag.erfc(self)
    def erfc_(self): return _ag.inplace_apply(self, _ag.erfc, "erfc_")
    def erfinv(self): return _ag.erfinv(self)
    def erfinv_(self): return _ag.inplace_apply(self, _ag.erfinv, "erfinv_")
    def lgamma(self): return _ag.lgamma(self)
    def lgamma_(self): return _ag.inplace_apply(self, _ag.lgamma, "lgamma_")
    def digamma(self): return _ag.digamma(self)
    def digamma_(self): return _ag.inplace_apply(self, _ag.digamma, "digamma_")
    def polygamma(self, n): return _ag.polygamma(n, self)
    def polygamma_(self, n): return _ag.inplace_apply(self, lambda t: _ag.polygamma(n, t), "polygamma_")
    def igamma(self, other): return _sp.gammainc(self, other)
    def igamma_(self, other): return _ag.inplace_apply(self, lambda t: _sp.gammainc(t, other), "igamma_", (other,))
    def igammac(self, other): return _sp.gammaincc(self, other)
    def igammac_(self, other): return _ag.inplace_apply(self, lambda t: _sp.gammaincc(t, other), "igammac_", (other,))
    def mvlgamma(self, p): return _ag.mvlgamma(self, p)
    def mvlgamma_(self, p): return _ag.inplace_apply(self, lambda t: _ag.mvlgamma(t, p), "mvlgamma_")
    def i0(self): return _ag.i0(self)
    def i0_(self): return _ag.inplace_apply(self, _ag.i0, "i0_")
    def atan2(self, other): return _pw.atan2(self, other)
    def atan2_(self, other): return _ag.inplace_apply(self, lambda t: _pw.atan2(t, other), "atan2_", (other,))
    arctan2, arctan2_ = atan2, atan2_
    def hypot(self, other): return _pw.hypot(self, other)
    def hypot_(self, other): return _ag.inplace_apply(self, lambda t: _pw.hypot(t, other), "hypot_", (other,))
    def xlogy(self, other): return _pw.xlogy(self, other)
    def xlogy_(self, other): return _ag.inplace_apply(self, lambda t: _pw.xlogy(t, other), "xlogy_", (other,))
    def logit(self, eps=None): return _pw.logit(self, eps)
    def logit_(self, eps=None): return _ag.inplace_apply(self, lambda t: _pw.logit(t, eps), "logit_")
    def sgn(self): return _pw.sgn(self)
    def sgn_(self): return _ag.inplace_apply(self, _pw.sgn, "sgn_")
    def frac(self): return _pw.frac(self)
    def frac_(self): return _ag.inplace_apply(self, _pw.frac, "frac_")
    def bitwise_not(self): return _pw.bitwise_not(self)
    def div(self, other, *, rounding_mode=None): return _pw.div(self, other, rounding_mode=rounding_mode)
    def true_divide(self, other): return _ag.div(self, other)
    def floor_divide(self, other): return _pw.floor_divide(self, other)
    def remainder(self, other): return _pw.remainder(self, other)
    def fmod(self, other): return _pw.fmod(self, other)
    def __mod__(self, other): return _pw.remainder(self, other)
    def __rmod__(self, other): return _pw.remainder(other, self)
    def __floordiv__(self, other): return _pw.floor_divide(self, other)
    def __rfloordiv__(self, other): return _pw.floor_divide(other, self)
    def __invert__(self): return _ag.logical_not(self) if self.dtype is bool_ else _pw.bitwise_not(self)
    def __and__(self, other): return _pw.bitwise_and(self, other)
    def __or__(self, other): return _pw.bitwise_or(self, other)
    def __xor__(self, other): return _pw.bitwise_xor(self, other)
    def __lshift__(self, other): return _pw.bitwise_left_shift(self, other)
    def __rshift__(self, other): return _pw.bitwise_right_shift(self, other)
    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__
    def __rlshift__(self, other): return _pw.bitwise_left_shift(other, self)
    def __rrshift__(self, other): return _pw.bitwise_right_shift(other, self)
    def __iand__(self, other): return _pw.bitwise_inplace(self, other, _BITAND, "bitwise_and_")
    def __ior__(self, other): return _pw.bitwise_inplace(self, other, _BITOR, "bitwise_or_")
    def __ixor__(self, other): return _pw.bitwise_inplace(self, other, _BITXOR, "bitwise_xor_")
    def __ilshift__(self, other): return _pw.bitwise_inplace(self, other, _LSHIFT, "bitwise_left_shift_")
    def __irshift__(self, other): return _pw.bitwise_inplace(self, other, _RSHIFT, "bitwise_right_shift_")
    bitwise_and, bitwise_or, bitwise_xor = __and__, __or__, __xor__
    bitwise_left_shift, bitwise_right_shift = __lshift__, __rshift__
    bitwise_and_, bitwise_or_, bitwise_xor_ = __iand__, __ior__, __ixor__
    bitwise_left_shift_, bitwise_right_shift_ = __ilshift__, __irshift__
    def nansum(self, dim=None, keepdim=False, *, dtype=None): return _pw.nansum(self, dim, keepdim, dtype=dtype)
    def nanmean(self, dim=None, keepdim=False, *, dtype=None): return _pw.nanmean(self, dim, keepdim, dtype=dtype)
    def logcumsumexp(self, dim): return _ag.logcumsumexp(self, dim)
    def diagonal(self, offset=0, dim1=0, dim2=1): return _la.diagonal(self, offset, dim1, dim2)
    def trace(self): return _la.trace(self)
    def baddbmm(self, batch1, batch2, *, beta=1, alpha=1):
        return _la.baddbmm(self, batch1, batch2, beta=beta, alpha=alpha)
    def addbmm(self, batch1, batch2, *, beta=1, alpha=1):
        return _la.addbmm(self, batch1, batch2, beta=beta, alpha=alpha)
    def addmv(self, mat, vec, *, beta=1, alpha=1): return _la.addmv(self, mat, vec, beta=beta, alpha=alpha)
    def addr(self, vec1, vec2, *, beta=1, alpha=1): return _la.addr(self, vec1, vec2, beta=beta, alpha=alpha)
    def cross(self, other, dim=None): return _la.cross(self, other, dim)
    def dist(self, other, p=2): return _la.dist(self, other, p)
    def renorm(self, p, dim, maxnorm): return _la.renorm(self, p, dim, maxnorm)
    def kron(self, other): return _la.kron(self, other)
    def det(self): return _mx.det(self)
    def logdet(self): return _mx.logdet(self)
    def slogdet(self): return _mx.slogdet(self)
    def inverse(self): return _mx.inverse(self)
    def pinverse(self, rcond=1e-15): return _mx.pinverse(self, rcond)
    def matrix_power(self, n): return _mx.matrix_power(self, n)
    def matrix_exp(self): return _mx.matrix_exp(self)
    def svd(self, some=True, compute_uv=True): return _mx.svd(self, some, compute_uv)
    def qr(self, some=True): return _mx.qr(self, some)
    def cholesky(self, upper=False): return _mx.cholesky(self, upper)
    def cholesky_solve(self, input2, upper=False): return _mx.cholesky_solve(self, input2, upper)
    def cholesky_inverse(self, upper=False): return _mx.cholesky_inverse(self, upper)
    def tile(self, *args, dims=None):
        return _lo.tile(self, _size_args(_size_or_keyword(args, dims, "tile", "dims")))
    def unfold(self, dimension, size, step): return _lo.unfold(self, dimension, size, step)
    def index_fill(self, dim, index, value): return _lo.index_fill(self, dim, index, value)
    def index_fill_(self, dim, index, value): return _lo.index_fill_(self, dim, index, value)
    def index_copy(self, dim, index, source): return _lo.index_copy(self, dim, index, source)
    def index_copy_(self, dim, index, source): return _lo.index_copy_(self, dim, index, source)
    def masked_scatter(self, mask, source): return _lo.masked_scatter(self, mask, source)
    def masked_scatter_(self, mask, source): return _lo.masked_scatter_(self, mask, source)
    def fill_diagonal_(self, fill_value, wrap=False): return _lo.fill_diagonal_(self, fill_value, wrap)
    def uniform_(self, from_=0.0, to=1.0, *, generator=None): return _rnd.uniform_(self, from_, to, generator=generator)
    def normal_(self, mean=0.0, std=1.0, *, generator=None): return _rnd.normal_(self, mean, std, generator=generator)
    def bernoulli_(self, p=0.5, *, generator=None): return _rnd.bernoulli_(self, p, generator=generator)
    def bernoulli(self, p=None, *, generator=None): return _rnd.bernoulli(self, p, generator=generator)
    def random_(self, *args, **kwargs): return _rnd.random_(self, *args, **kwargs)
    def exponential_(self, lambd=1.0, *, generator=None): return _rnd.exponential_(self, lambd, generator=generator)
    def multinomial(self, num_samples, replacement=False, *, generator=None):
        return _rnd.multinomial(self, num_samples, replacement, generator=generator)

    def bincount(self, weights=None, minlength=0): return _st.bincount(self, weights, minlength)
    def histc(self, bins=100, min=0, max=0): return _st.histc(self, bins, min, max)
    def cummax(self, dim): return _st.cummax(self, dim)
    def cummin(self, dim): return _st.cummin(self, dim)
    def median(self, dim=None, keepdim=False): return _st.median(self, dim, keepdim)
    def nanmedian(self, dim=None, keepdim=False): return _st.nanmedian(self, dim, keepdim)
    def quantile(self, q, dim=None, keepdim=False, *, interpolation="linear"):
        return _st.quantile(self, q, dim, keepdim, interpolation=interpolation)
    def nanquantile(self, q, dim=None, keepdim=False, *, interpolation="linear"):
        return _st.nanquantile(self, q, dim, keepdim, interpolation=interpolation)
    def kthvalue(self, k, dim=-1, keepdim=False): return _st.kthvalue(self, k, dim, keepdim)
    def mode(self, dim=-1, keepdim=False): return _st.mode(self, dim, keepdim)
    def aminmax(self, *, dim=None, keepdim=False): return _st.aminmax(self, dim=dim, keepdim=keepdim)
    def logaddexp(self, other): return _pw.logaddexp(self, other)
    def logaddexp2(self, other): return _pw.logaddexp2(self, other)
    def copysign(self, other): return _pw.copysign(self, other)
    def copysign_(self, other): return _ag.inplace_apply(self, lambda t: _pw.copysign(t, other), "copysign_", (other,))
    def signbit(self): return _pw.signbit(self)
    def heaviside(self, values): return _pw.heaviside(self, values)
    def deg2rad(self): return _pw.deg2rad(self)
    def deg2rad_(self): return _ag.inplace_apply(self, _pw.deg2rad, "deg2rad_")
    def rad2deg(self): return _pw.rad2deg(self)
    def rad2deg_(self): return _ag.inplace_apply(self, _pw.rad2deg, "rad2deg_")
    def sinc(self): return _pw.sinc(self)
    def sinc_(self): return _ag.inplace_apply(self, _pw.sinc, "sinc_")
    def frexp(self): return _pw.frexp(self)
    def ldexp(self, other): return _pw.ldexp(self, other)
    def ldexp_(self, other): return _ag.inplace_apply(self, lambda t: _pw.ldexp(t, other), "ldexp_", (other,))
    def gcd(self, other): return _pw.gcd(self, other)
    def gcd_(self, other): return _ag.inplace_apply(self, lambda t: _pw.gcd(t, other), "gcd_", (other,))
    def lcm(self, other): return _pw.lcm(self, other)
    def lcm_(self, other): return _ag.inplace_apply(self, lambda t: _pw.lcm(t, other), "lcm_", (other,))
    def rot90(self, k=1, dims=(0, 1)): return _lo.rot90(self, k, dims)
    def hsplit(self, indices_or_sections): return _lo.hsplit(self, indices_or_sections)
    def vsplit(self, indices_or_sections): return _lo.vsplit(self, indices_or_sections)
    def dsplit(self, indices_or_sections): return _lo.dsplit(self, indices_or_sections)
    def is_nonzero(self): return _lo.is_nonzero(self)
    def scatter_reduce(self, dim, index, src, reduce, *, include_self=True):
        return _lo.scatter_reduce(self, dim, index, src, reduce, include_self=include_self)
    def scatter_reduce_(self, dim, index, src, reduce, *, include_self=True):
        def reduced(t):
            return _lo.scatter_reduce(t, dim, index, src, reduce, include_self=include_self)
        return _ag.inplace_apply(self, reduced, "scatter_reduce_", (src,))
    def cov(self, *, correction=1, fweights=None, aweights=None):
        return _la.cov(self, correction=correction, fweights=fweights, aweights=aweights)
    def corrcoef(self): return _la.corrcoef(self)
    def float_power(self, exponent): return _pw.float_power(self, exponent)
    def float_power_(self, exponent): return _pw.float_power_(self, exponent)
    def heaviside_(self, values):
        return _ag.inplace_apply(self, lambda t: _pw.heaviside(t, values), "heaviside_", (values,))
    def nextafter(self, other): return _pw.nextafter(self, other)
    def nextafter_(self, other):
        return _ag.inplace_apply(self, lambda t: _pw.nextafter(t, other), "nextafter_", (other,))
    def isposinf(self): return _pw.isposinf(self)
    def isneginf(self): return _pw.isneginf(self)
    def isreal(self): return _pw.isreal(self)
    def fmax(self, other): return _pw.fmax(self, other)
    def fmin(self, other): return _pw.fmin(self, other)
    def diag(self, diagonal=0): return diag(self, diagonal)
    def diagflat(self, offset=0): return _lo.diagflat(self, offset)
    def diag_embed(self, offset=0, dim1=-2, dim2=-1): return _lo.diag_embed(self, offset, dim1, dim2)
    def put(self, index, source, accumulate=False): return _lo.put(self, index, source, accumulate)
    def put_(self, index, source, accumulate=False):
        return _ag.inplace_apply(self, lambda t: _lo.put(t, index, source, accumulate), "put_", (source,))
    def select_scatter(self, src, dim, index): return _lo.select_scatter(self, src, dim, index)
    def slice_scatter(self, src, dim=0, start=None, end=None, step=1):
        return _lo.slice_scatter(self, src, dim, start, end, step)
    def diagonal_scatter(self, src, offset=0, dim1=0, dim2=1):
        return _lo.diagonal_scatter(self, src, offset, dim1, dim2)
    def index_reduce(self, dim, index, source, reduce, *, include_self=True):
        return _lo.index_reduce(self, dim, index, source, reduce, include_self=include_self)
    def index_reduce_(self, dim, index, source, reduce, *, include_self=True):
        def reduced(t):
            return _lo.index_reduce(t, dim, index, source, reduce, include_self=include_self)
        return _ag.inplace_apply(self, reduced, "index_reduce_", (source,))
    def histogram(self, bins, *, range=None, weight=None, density=False):
        return _st.histogram(self, bins, range=range, weight=weight, density=density)
    def unique_consecutive(self, return_inverse=False, return_counts=False, dim=None):
        return _ag.unique_consecutive(self, return_inverse, return_counts, dim)
    def lu_solve(self, LU_data, LU_pivots): return _mx.lu_solve(self, LU_data, LU_pivots)
    def narrow_copy(self, dim, start, length): return _ag.clone(self.narrow(dim, start, length))
    # ddpc's splits are copies, so the unsafe forms (views without version tracking in PyTorch) are the same ops.
    def unsafe_split(self, split_size, dim=0): return _ag.split(self, split_size, dim)
    def unsafe_chunk(self, chunks, dim=0): return _ag.chunk(self, chunks, dim)
    def unsafe_split_with_sizes(self, split_sizes, dim=0): return _ag.split_with_sizes(self, split_sizes, dim)
    def cauchy_(self, median=0.0, sigma=1.0, *, generator=None):
        return _rnd.cauchy_(self, median, sigma, generator=generator)
    def geometric_(self, p, *, generator=None): return _rnd.geometric_(self, p, generator=generator)
    def log_normal_(self, mean=1.0, std=2.0, *, generator=None):
        return _rnd.log_normal_(self, mean, std, generator=generator)
    def new_empty_strided(self, size, stride, *, dtype=None, device=None, requires_grad=False):
        return empty_strided(size, stride, dtype=dtype or self.dtype, device=device or self.device,
                             requires_grad=requires_grad)

    @property
    def H(self):
        """The transpose of a matrix (conjugation is a no-op: ddpc has no complex dtypes)."""
        if self.ndim not in (0, 2):
            raise RuntimeError(f"tensor.H is only supported on matrices (2-D tensors). Got {self.ndim}-D tensor.")
        return self.T

    @property
    def mH(self):
        """The transpose of the last two dims (conjugation is a no-op: ddpc has no complex dtypes)."""
        if self.ndim < 2:
            raise RuntimeError(f"tensor.mH is only supported on matrices or batches of matrices. Got {self.ndim}-D "
                               "tensor.")
        return self.mT

    def adjoint(self): return self.mH

    @property
    def is_cpu(self):
        return self._buf.device < 0

    def get_device(self):
        """The CUDA ordinal, or -1 on the host."""
        return self._buf.device

    @property
    def itemsize(self):
        return self._buf.itemsize

    def ndimension(self): return self._buf.ndim

    def is_inference(self):
        """False: ddpc has no inference tensors (inference_mode is no_grad)."""
        return False

    def to_sparse(self, sparse_dim=None, *, layout=None, blocksize=None, dense_dim=None):
        """This tensor as a coalesced sparse COO one over its first ``sparse_dim``
        dims (all by default); only the COO layout is offered."""
        if (layout is not None and layout is not _sparse_coo.sparse_coo) or blocksize is not None \
                or dense_dim is not None:
            raise NotImplementedError(f"to_sparse: ddpc offers the sparse COO layout only, got layout={layout!r}")
        return _sparse_coo.from_dense(self, sparse_dim)

    def to_sparse_coo(self):
        return self.to_sparse()

    def to_dense(self, dtype=None, *, masked_grad=None):
        return self if dtype is None else self.to(dtype=dtype)

    def byte(self): return self.to(dtype=uint8)
    # ddpc has no int8 or int16: these raise the TypeError of an unknown dtype.
    def char(self): return self.to(dtype="int8")
    def short(self): return self.to(dtype="int16")

    # ---- storage and layout ------------------------------------------------------------
    def untyped_storage(self): return _storage.untyped_storage(self)
    def storage(self): return _storage.typed_storage(self)
    def as_strided(self, size, stride, storage_offset=None):
        return _storage.as_strided(self, size, stride, storage_offset)
    def as_strided_(self, size, stride, storage_offset=None):
        return _storage.as_strided_(self, size, stride, storage_offset)
    def as_strided_scatter(self, src, size, stride, storage_offset=None):
        return _storage.as_strided_scatter(self, src, size, stride, storage_offset)
    def resize_(self, *sizes, memory_format=None): return _storage.resize_(self, _size_args(sizes))
    def resize_as_(self, the_template, memory_format=None): return _storage.resize_(self, the_template.shape, "resize_as_")
    def set_(self, source=None, storage_offset=0, size=None, stride=None):
        return _storage.set_(self, source, storage_offset, size, stride)
    def is_set_to(self, tensor): return _storage.is_set_to(self, tensor)

    def resize(self, *sizes):
        """PyTorch's deprecated out-of-place resize: a reshape to as many elements."""
        warnings.warn("non-inplace resize is deprecated", UserWarning, stacklevel=2)
        sizes = _size_args(sizes)
        if math.prod(sizes) != self.numel():
            raise RuntimeError(f"requested resize to {'x'.join(map(str, sizes))} ({math.prod(sizes)} elements in "
                               f"total), but the given tensor has a size of {'x'.join(map(str, self.shape))} "
                               f"({self.numel()} elements); resize can only change the shape, keeping the number of "
                               "elements")
        return _ag.reshape(self, sizes)

    def resize_as(self, tensor):
        """PyTorch's deprecated out-of-place resize_as: a reshape to tensor's shape."""
        warnings.warn("non-inplace resize_as is deprecated", UserWarning, stacklevel=2)
        return _ag.reshape(self, tensor.shape) if tensor.numel() == self.numel() else self.resize(tensor.shape)

    def dim_order(self, *, ambiguity_check=False):
        """The dims from outermost to innermost in memory: always in order, as
        ddpc tensors are contiguous. ``ambiguity_check=True`` raises where two
        dims have one stride (a dim of size 1), a list of memory formats where
        contiguous_format is not among them, as in PyTorch."""
        strides = self.stride()
        if ambiguity_check is True and len(set(strides)) < len(strides) or (
                isinstance(ambiguity_check, (list, tuple)) and contiguous_format not in ambiguity_check):
            raise RuntimeError("The tensor does not have unique dim order, or cannot map to exact one of the given "
                               "memory formats.")
        if not isinstance(ambiguity_check, (bool, list, tuple)):
            raise TypeError(f"dim_order: ambiguity_check must be a bool or a list of memory formats, got "
                            f"{ambiguity_check!r}")
        return tuple(range(self.ndim))

    def const_data_ptr(self): return self.data_ptr()

    @property
    def output_nr(self):
        """Which output of its grad_fn this tensor is: 0 but for the outputs of
        a multi-output autograd.Function (ddpc records chunk, split, unbind and
        the like as one node per output, where PyTorch numbers them 0, 1, ...)."""
        return self.grad_fn.index if isinstance(self.grad_fn, _function._OutputOf) else 0

    def new(self, *args, device=None):
        """PyTorch's legacy constructor in this tensor's dtype and on its device
        (or ``device``): ``new(2, 3)`` or ``new(Size)`` uninitialised, ``new(data)``
        of that data, ``new()`` empty."""
        if len(args) == 1 and isinstance(args[0], Tensor) and args[0].dtype is not self.dtype:
            raise DtypeError(f"new: expected a tensor of {self.dtype}, got one of {args[0].dtype}")
        if len(args) == 1 and isinstance(args[0], Size):
            args = tuple(args[0])
        buf = _legacy_buffer(args[0] if args else (), args[1:], "new", self.dtype)
        return Tensor(buf).to(device=self.device if device is None else device)

    def apply_(self, callable):
        """Each element replaced by ``callable(element)``, in place; cpu only and
        slow, as in PyTorch (one Python call per element)."""
        return _each_element(self, "apply_", callable, ())
    def map_(self, tensor, callable):
        """Each element replaced by ``callable(element, other)``, ``tensor`` broadcast to this shape."""
        return _each_element(self, "map_", callable, (tensor,))
    def map2_(self, x, y, callable):
        """Each element replaced by ``callable(element, x's, y's)``, x and y broadcast to this shape."""
        return _each_element(self, "map2_", callable, (x, y))

    def addmm_(self, mat1, mat2, *, beta=1, alpha=1):
        return _ag.inplace_apply(self, lambda t: _ag.addmm(t, mat1, mat2, beta=beta, alpha=alpha), "addmm_",
                                 (mat1, mat2))
    def addmv_(self, mat, vec, *, beta=1, alpha=1):
        return _ag.inplace_apply(self, lambda t: _la.addmv(t, mat, vec, beta=beta, alpha=alpha), "addmv_", (mat, vec))
    def addr_(self, vec1, vec2, *, beta=1, alpha=1):
        return _ag.inplace_apply(self, lambda t: _la.addr(t, vec1, vec2, beta=beta, alpha=alpha), "addr_",
                                 (vec1, vec2))
    def addbmm_(self, batch1, batch2, *, beta=1, alpha=1):
        return _ag.inplace_apply(self, lambda t: _la.addbmm(t, batch1, batch2, beta=beta, alpha=alpha), "addbmm_",
                                 (batch1, batch2))
    def baddbmm_(self, batch1, batch2, *, beta=1, alpha=1):
        return _ag.inplace_apply(self, lambda t: _la.baddbmm(t, batch1, batch2, beta=beta, alpha=alpha), "baddbmm_",
                                 (batch1, batch2))

    def cfloat(self, memory_format=preserve_format): return self.to(dtype=complex64)
    def cdouble(self, memory_format=preserve_format): return self.to(dtype=complex128)
    def chalf(self, memory_format=preserve_format):
        raise DtypeError("chalf: ddpc has no complex32 dtype (its complex dtypes are complex64 and complex128: "
                         "cfloat(), cdouble())")

    def nonzero_static(self, *, size, fill_value=-1):
        """nonzero() cut or padded with rows of ``fill_value`` to ``size`` rows."""
        if not isinstance(size, numbers.Integral) or isinstance(size, bool) or size < 0:
            raise RuntimeError(f"nonzero_static: 'size' must be an non-negative integer, got {size!r}")
        found = _ag.nonzero(self.detach())[:size]
        if found.shape[0] == size:
            return found
        pad = full((size - found.shape[0], self.ndim), fill_value, dtype=int64, device=self.device)
        return cat([found, pad])

    def prelu(self, weight):
        from .nn import functional  # ddpc.nn builds on this module
        return functional.prelu(self, weight)

    def record_stream(self, stream):
        """Keeps this tensor's memory from reuse until ``stream``'s work queued
        so far is done. ddpc runs every op on a device on its one compute
        stream, which the caching allocator already orders reuse after, so for
        a ddpc.cuda stream this is a no-op; a cpu tensor raises
        NotImplementedError, as in PyTorch, and anything but a stream TypeError."""
        from .cuda import _ComputeStream
        if not isinstance(stream, _ComputeStream):
            raise TypeError(f"record_stream: expected a ddpc.cuda stream, got {type(stream).__name__}")
        if not self.is_cuda:
            raise NotImplementedError("record_stream: a cpu tensor has no stream to be recorded on")

    # ---- printing -------------------------------------------------------------------
    def __repr__(self):
        return self._repr()

    def _repr(self, lead="", extras=True):
        """The repr, laid out to follow ``lead`` on its first line (a sparse
        tensor's "indices="), without dtype and device when not ``extras``."""
        t = self.cpu()
        arr = t.to(float32).numpy() if t.dtype in (bfloat16, float16) else t.numpy()
        body = _tensor_str.format_elements(arr, lead=lead + "tensor(", options=_print_options.values)
        if not extras:
            return "tensor(" + body + ")"
        extras = []
        if self.is_cuda:
            extras.append(f"device='{self.device}'")
        if not self.numel() and self.ndim != 1 or not _print_options.values["edgeitems"] and \
                self.numel() > _print_options.values["threshold"]:  # as PyTorch: where the body hides the shape
            extras.append(f"size={tuple(self.shape)}")
        if self.dtype not in (get_default_dtype(), int64, complex_of(get_default_dtype()), bool_) or \
                not self.numel() and self.dtype is not get_default_dtype():  # an empty tensor's dtype shows
            extras.append(f"dtype={self.dtype!r}")
        if self.grad_fn is not None:
            extras.append(f"grad_fn={self.grad_fn!r}")
        elif self.requires_grad:
            extras.append("requires_grad=True")
        return "tensor(" + ", ".join([body] + extras) + ")"

    def _with_grad(self, requires_grad):
        self.requires_grad = requires_grad
        return self


class _PrintOptions:
    """How Tensor repr prints elements: PyTorch's layout (_tensor_str), with the options set_printoptions sets."""

    def __init__(self):
        self.values = dict(_tensor_str.DEFAULTS)


_print_options = _PrintOptions()


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None, profile=None, sci_mode=None):
    """How tensors print, as torch.set_printoptions: ``precision`` digits after
    the point (4), summaries ("...") beyond ``threshold`` elements (1000) with
    ``edgeitems`` (3) shown at each end, lines of ``linewidth`` characters
    (80), and ``sci_mode`` True (always scientific), False (never) or None
    (automatic). ``profile`` 'default', 'short' or 'full' sets the first four
    first."""
    if profile is not None:
        if profile not in _tensor_str.PROFILES:
            raise ArgumentError(f"set_printoptions: profile must be 'default', 'short' or 'full', got {profile!r}")
        _print_options.values.update(_tensor_str.PROFILES[profile])
    for name, value in (("precision", precision), ("threshold", threshold), ("edgeitems", edgeitems),
                        ("linewidth", linewidth)):
        if value is not None:
            if value < 0:
                raise ArgumentError(f"set_printoptions: {name} must be non-negative, got {value}")
            _print_options.values[name] = value
    _print_options.values["sci_mode"] = None if sci_mode is None else bool(sci_mode)


def _is_dtype_spec(a):
    if isinstance(a, (dtype, type, np.dtype)):
        return True
    if not isinstance(a, str) or a.startswith(("cpu", "cuda")):
        return False
    try:  # a string that names no dtype is a device, so its error names the devices
        get_dtype(a)
    except TypeError:
        return False
    return True


def parse_to_args(args, device, dtype):
    """(device, dtype) from the positional arguments of ``to()``: a device, a
    dtype, both, or a tensor whose device and dtype to take."""
    for a in args:
        if isinstance(a, Tensor):
            device, dtype = a.device, a.dtype
        elif _is_dtype_spec(a):
            dtype = a
        else:
            device = a
    return device, dtype


def zero_grads(params, set_to_none=True):
    """Sets each parameter's gradient to None, or to zeros in place, out of
    any graph (as PyTorch's): a gradient from backward(create_graph=True)
    would otherwise carry its graph, and the zeroing, into the next one."""
    for p in params:
        if p.grad is None:
            continue
        if set_to_none:
            p.grad = None
        else:
            if p.grad.grad_fn is not None:
                p.grad.detach_()
            else:
                p.grad.requires_grad_(False)
            p.grad.zero_()


# Integers up to this size are exact in a double (the _C ops' scalar argument).
_DOUBLE_INTS = 2 ** 53
_COMPARED_DIRECTLY = (float32, float64, int32, int64, uint8)
_INT_BOUNDS = {int32: (-2 ** 31, 2 ** 31), int64: (-2 ** 63, 2 ** 63)}


def _is_float_scalar(value):
    """Whether a number makes integer arithmetic float: Python and numpy floats
    (numpy's float32 and float16 are no subclasses of float)."""
    return isinstance(value, (float, np.floating))


def _int_scalar(value, dt):
    """value as a Python int for integer dtype dt, refusing what dt can't hold
    (C's conversion of such a value is undefined); uint8 takes values modulo
    256, as _C.scalar does, and bool any non-zero one as true."""
    if dt is bool_:
        return int(value != 0)
    value = int(value)
    if dt is uint8:
        return value % 256
    bounds = _INT_BOUNDS.get(dt)
    if bounds is not None and not bounds[0] <= value < bounds[1]:
        raise OverflowError(f"value {value} cannot be converted to {dt.name} without overflow")
    return value


def _check_storable(value, dt):
    """Refuses a number that PyTorch refuses to store in integer dtype dt (its
    fill_, full, item assignment and masked_fill check it): NaN, an infinity,
    or a value whose integer part dt can't hold, where uint8 also takes ints
    down to -255 (they wrap, as PyTorch lets them)."""
    if dt is uint8:
        bounds = (-255, 256) if isinstance(value, numbers.Integral) else (0, 256)
    else:
        bounds = _INT_BOUNDS.get(dt)
    if bounds is not None and isinstance(value, numbers.Real) and not bounds[0] <= value < bounds[1]:
        raise OverflowError(f"value {value} cannot be converted to {dt.name} without overflow")


def _shares_memory(a, b):
    """Whether the storage of a and b overlaps."""
    if a._buf.device != b._buf.device or not a.nbytes or not b.nbytes:
        return False
    return a.data_ptr() < b.data_ptr() + b.nbytes and b.data_ptr() < a.data_ptr() + a.nbytes


def _same_memory(a, b):
    """Whether a and b are the same elements (an elementwise op may then write one while reading the other)."""
    return (a._buf.device == b._buf.device and a.data_ptr() == b.data_ptr() and a.nbytes == b.nbytes
            and a.element_size() == b.element_size())


def _in_graph(t, value):
    """Whether an in-place write of ``value`` into ``t`` is recorded in the graph."""
    return _ag.is_grad_enabled() and (t.requires_grad or (isinstance(value, Tensor) and value.requires_grad))


class _CopyOf:
    """What a copy standing where PyTorch has a view stands for: the elements
    ``sel`` of ``source``, into which writes into the copy are written back
    (sel None: the copy is a view of ``source``, itself such a copy, and the
    write only goes on from there). With no source, writes are refused: the
    copy's elements repeat (expand). ``seen`` is the version of the source's
    memory the copy last took its elements from (see _SyncedBuffer)."""

    __slots__ = ("source", "sel", "what", "seen")

    def __init__(self, source, sel, what):
        self.source, self.sel, self.what, self.seen = source, sel, what, None


class _SyncedBuffer:
    """``Tensor._buf`` of a copy standing for part of another tensor (kept as
    ``_b``; every other tensor's ``_buf`` is in its ``__dict__``, which this
    non-data descriptor leaves alone): before it is read, the copy takes the
    part's current elements where that tensor's memory has been written
    since (its version changed), as a read through PyTorch's view would see
    them. The copy's own version counts that as a write into it, as PyTorch
    counts a write into the tensor viewed as one into each of its views."""

    def __get__(self, t, owner=None):
        if t is None:
            return self
        d = t.__dict__
        try:
            buf, c = d["_b"], d["_nav"]
        except KeyError:  # a tensor not yet initialised (being unpickled, say)
            raise AttributeError("_buf") from None
        source = c.source._buf  # itself brought up to date first, where it is such a copy too
        if c.sel is not None and c.seen != source.version:
            c.sel.read_into(buf, source)
            c.seen = source.version
            buf.bump_version()
        return buf


Tensor._buf = _SyncedBuffer()


def _read(t, sel, what):
    """t's elements in the selection ``sel`` as a tensor: a view of t where
    they are contiguous in it; else a copy, which remembers what it stands for
    where PyTorch would give a view (all but advanced indexing)."""
    buf = sel.read(t._buf)
    out = Tensor(buf)
    if buf.base is not None:  # a view (a new Buffer has no base)
        out._not_a_view = _copy_view(t)
    elif isinstance(sel, _indexing.Region):
        repeats = any(n > 1 and st == 0 for n, st in zip(sel.shape, sel.strides))
        # Repeated elements have no one place for a write: no source (its layout is kept for reshapes)
        out._not_a_view = _CopyOf(None if repeats else t, sel, what)
    return out


def _copy_view(t):
    """What a view (or reshape, or detached alias) of t stands for."""
    c = t._not_a_view
    if c is None or c.source is None:
        return c
    return _CopyOf(t, None, c.what)


def _reshaped_copy_view(t, shape):
    """What a reshape of t to ``shape`` stands for, as _copy_view; False where
    t is a copy standing for a strided part of another tensor that PyTorch's
    reshape would copy (no strides see those elements with the new shape), so
    that the reshape is a tensor of its own, whose writes stay in it."""
    layout = _strided_layout(t)
    if layout is None or _indexing.view_strides(*layout, shape) is not None:
        return _copy_view(t)
    return False


def _strided_layout(t):
    """(shape, strides) of PyTorch's view where t is a copy standing for one
    (strides counted in the elements of the tensor it was taken from); None
    where t is its own memory, or the layout is not known."""
    c = t._not_a_view
    if c is None or (c.source is None and c.sel is None):
        return None
    if c.sel is not None:
        if not isinstance(c.sel, _indexing.Region):
            return None
        # where c.source is itself such a copy, the layout is in its source's (an expand's has no source to write)
        outer = None if c.source is None else _strided_layout(c.source)
        if outer is None:
            return c.sel.shape, c.sel.strides
        layout = _indexing.compose_layout(*outer, c.sel)
        return None if layout is None else layout[:2]
    outer = _strided_layout(c.source)  # t is a view of the copy c.source: a block of its elements
    if outer is None or not t.numel():
        return outer and (t.shape, _indexing.contiguous_strides(t.shape))
    first = (t._buf.data_ptr - c.source._buf.data_ptr) // t.element_size()
    block = _indexing.block_layout(outer[0], outer[1], first, t.numel())
    if block is None:
        return None
    strides = _indexing.view_strides(*block, t.shape)
    return None if strides is None else (t.shape, strides)


def _check_writable(t, what):
    """Refuses a write into a copy that can't be written back where PyTorch
    would write through a view (and one whose source refuses the write)."""
    c = t._not_a_view
    if c is None:
        return
    if c.source is None:
        raise RuntimeError(f"{what}: this tensor is a copy made by {c.what} (a view in PyTorch, but ddpc tensors "
                           "are contiguous) whose elements can't be written back into the tensor it came from; "
                           "write through an index of that tensor (x[index] = value), or .clone() this one first "
                           "to change the copy only")
    _check_no_grad_inplace(c.source, what, refresh=False)


def _refresh(t, rebase=None):
    """Before a write into a copy standing for part of another tensor: the
    copy takes that part's current values, which writes into the tensor (or
    through another copy of it) may have changed since it was made, so that
    writing the copy back keeps them, as a write through PyTorch's view
    would. ``rebase(t, source, sel)`` then runs for each copy refreshed."""
    c = t._not_a_view
    if c is None or c.source is None:
        return
    _refresh(c.source, rebase)
    if c.sel is not None:
        source = c.source._buf
        c.sel.read_into(_memory(t), source)  # also what a write into source bypassing its version (numpy) left
        c.seen = source.version
        if rebase is not None:
            rebase(t, c.source, c.sel)


def _memory(t):
    """t's buffer as it is: t._buf of a copy standing for part of another
    tensor first takes that part's elements (see _SyncedBuffer)."""
    d = t.__dict__
    return d["_b"] if "_buf" not in d else d["_buf"]


def _write_back(t):
    """After a write into a copy that stands for part of another tensor, that
    part takes the new values, as it would through PyTorch's view."""
    c = t._not_a_view
    if c is not None and c.source is not None:
        source = c.source._buf
        if c.sel is not None:
            c.sel.write(source, _memory(t))  # as written (the part's elements are older)
        source.bump_version()
        if c.sel is not None:
            c.seen = source.version
        _write_back(c.source)


def _check_no_grad_inplace(t, what, refresh=True):
    """Refuses an in-place write into t that autograd would miss, or that
    would land in a copy only; where t is a copy standing for part of another
    tensor, ``refresh`` gives it that part's current values first. (Each
    write also bumps t's version once its arguments are checked, so that
    backward can tell a tensor it saved was changed.)"""
    _check_writable(t, what)
    if t.requires_grad and _ag.is_grad_enabled():
        raise RuntimeError(f"{what}: a tensor that requires grad can't be modified in place while grad mode is on; "
                           "wrap the update in ddpc.no_grad()")
    if refresh:
        _refresh(t)


def _each_element(t, what, fn, others):
    """t's elements replaced, in place, by fn(element, the others' elements):
    PyTorch's apply_, map_ and map2_, which call Python once per element."""
    if not callable(fn):
        raise TypeError(f"{what}: '{type(fn).__name__}' object is not callable")
    for o in (t, *others):
        if not isinstance(o, Tensor):
            raise TypeError(f"{what}: expected ddpc tensors, got {type(o).__name__}")
        if o.is_cuda:
            raise TypeError(f"{what} is only implemented on cpu tensors, got one on {o.device}")
        if o.dtype is not t.dtype:
            raise DtypeError(f"{what}: expected a tensor of {t.dtype} for the others, got {o.dtype}")
    if t.requires_grad:
        raise RuntimeError(f"Can't call {what}() on a tensor that requires grad; use t.detach().{what}() instead")
    cast = complex if t.dtype.is_complex else float if t.dtype.is_floating_point else bool if t.dtype is bool_ else int
    columns = [t.reshape(-1).tolist()] + [o.expand(t.shape).reshape(-1).tolist() for o in others]
    values = [cast(_callback_result(fn(*vs), what)) for vs in zip(*columns)]
    return t.copy_(tensor(values, dtype=t.dtype).reshape(t.shape))


def _callback_result(value, what):
    if not isinstance(value, numbers.Number):
        raise TypeError(f"{what}: the callable must return a number, not {type(value).__name__}")
    return value


def _check_inplace(out):
    if out is not None:
        _check_no_grad_inplace(out, "in-place op")
        out._buf.bump_version()


def _copied(t, data, copy_value):
    """A leaf copy of t for copy.copy and copy.deepcopy over data (a buffer, or a sparse tensor to take):
    of t's class, requiring grad as t, with copy_value of each of t's public Python attributes."""
    if isinstance(data, Tensor):
        new = data
    else:
        new = Tensor.__new__(type(t))
        Tensor.__init__(new, data)
    new.requires_grad = t.requires_grad
    for name, value in t.__dict__.items():
        if not name.startswith("_") and name != "grad_fn":
            new.__dict__[name] = copy_value(value)
    return new


def _rebuild_tensor(data, shape, dtype_name, device_str, requires_grad):
    buf = _C.Buffer(shape, dtype_name)
    np.asarray(buf).reshape(-1).view(np.uint8)[:] = np.frombuffer(data, np.uint8)
    t = Tensor(buf)
    if device_str != "cpu":
        dev = device(device_str)
        n = _C.cuda_device_count()
        if dev.index >= n:
            reason = _C.cuda_unavailable_reason() or f"this machine has {n} GPU(s)"
            raise RuntimeError(f"the tensor was pickled on {dev} but cannot be restored there: {reason}")
        t = t.to(dev)
    t.requires_grad = requires_grad
    return t


# ---- factories ---------------------------------------------------------------------

def _array_default_dtype(arr):
    """ddpc dtype for a numpy array given to tensor(): its own, or the nearest wider one."""
    try:
        return get_dtype(arr.dtype)
    except TypeError:
        if arr.dtype.kind in "iu" and arr.dtype.itemsize <= 2:
            return int32
        if arr.dtype.kind in "iu":
            return int64
        raise


def _view_as_dtype(t, dt):
    """t's memory read as dtype dt (Tensor.view(dtype)): the last dim scales by
    the ratio of the item sizes; outside the graph, as in PyTorch."""
    shape, a, b = list(t.shape), t.element_size(), dt.itemsize
    if a != b:
        if not shape:
            raise RuntimeError(f"view(dtype): a 0-d tensor of {t.dtype} can't be viewed as {dt}, whose item size "
                               "differs")
        if a > b:
            shape[-1] *= a // b
        elif shape[-1] % (b // a):
            raise RuntimeError(f"view(dtype): the last dim ({shape[-1]}) of a tensor of {t.dtype} must be a "
                               f"multiple of {b // a} to be viewed as {dt}")
        else:
            shape[-1] //= b // a
    out = Tensor(t._buf.view(0, tuple(shape), dt.name))
    out._not_a_view = _copy_view(t)
    return out


def _holds_double(data):
    """Whether (nested) sequence data holds a float64 or complex128 numpy scalar,
    array or tensor: these keep their precision in tensor(), as in PyTorch
    (Python floats take the default dtype)."""
    todo = [data]
    while todo:
        v = todo.pop()
        if isinstance(v, (list, tuple)):
            todo.extend(v)
        elif isinstance(v, (np.ndarray, np.generic)) and v.dtype in (np.float64, np.complex128):
            return True
        elif isinstance(v, Tensor) and v.dtype in (float64, complex128):
            return True
    return False


def tensor(data, dtype=None, device=None, requires_grad=False, pin_memory=False):
    """A new tensor holding a copy of data (nested lists, numbers, arrays, tensors)."""
    if isinstance(data, Tensor):
        src = data.detach()
        out = src.to(device=device if device is not None else src.device, dtype=dtype or src.dtype, copy=True)
        out.requires_grad = requires_grad
        return out
    if isinstance(data, np.ndarray) or hasattr(data, "__array_interface__"):
        arr = np.asarray(data)
        dt = get_dtype(dtype) if dtype is not None else _array_default_dtype(arr)
    else:
        arr = np.asarray(data)
        if arr.dtype == object:
            if all(isinstance(v, numbers.Integral) for v in arr.flat):  # ints too big even for uint64
                raise OverflowError(f"{type(data).__name__} data holds integers that don't fit in int64")
            raise TypeError(f"can't build a tensor from {type(data).__name__} data of mixed or ragged shape")
        if dtype is not None:
            dt = get_dtype(dtype)
            if arr.dtype.kind == "c" and not dt.is_complex:  # as PyTorch (a numpy array only warns, as it does)
                raise TypeError("must be real number, not complex")
        elif arr.dtype.kind == "f":
            dt = float64 if arr.dtype == np.float64 and _holds_double(data) else get_default_dtype()
        elif arr.dtype.kind == "b":
            dt = bool_
        elif arr.dtype.kind in "iu":
            dt = int64
        elif arr.dtype.kind == "c":
            dt = complex128 if arr.dtype == np.complex128 and _holds_double(data) else complex_of(get_default_dtype())
        else:
            raise TypeError(f"can't build a tensor from data of numpy dtype {arr.dtype}")
        bounds = _INT_BOUNDS.get(dt)
        if bounds is not None and arr.dtype.kind in "iu" and arr.size:
            # Python ints the dtype can't hold would wrap in the copy below.
            lo, hi = int(arr.min()), int(arr.max())
            if lo < bounds[0] or hi >= bounds[1]:
                raise OverflowError(f"value {hi if hi >= bounds[1] else lo} cannot be converted to {dt.name} "
                                    "without overflow")
    buf = _C.Buffer(arr.shape, dt.name, -1, pin_memory=pin_memory)
    dst = np.asarray(buf)
    if dt is bfloat16:
        src = Tensor(_C.Buffer.from_object(np.ascontiguousarray(arr, dtype=np.float32)))
        _C.cast(buf, src._buf)
    else:
        np.copyto(dst, arr, casting="unsafe")
    out = Tensor(buf)
    if device is not None:
        out = out.to(device=device)
    return out._with_grad(requires_grad)


def from_numpy(arr):
    """A tensor sharing arr's memory (no copy). A strided array (a transpose,
    a slice with steps) gives a copy standing for it, as for ddpc's other
    strided views (see Tensor): in-place writes into it reach the array."""
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"from_numpy expects a numpy.ndarray, got {type(arr).__name__}")
    if arr.flags.c_contiguous or not arr.size:
        arr = arr if arr.flags.c_contiguous else arr.copy()  # (an empty array: no memory to share)
        if arr.dtype.name == "bfloat16":  # ml_dtypes arrays don't export the buffer protocol; view the bits
            return Tensor(_C.Buffer.from_object(arr.view(np.uint16), "bfloat16"))
        return Tensor(_C.Buffer.from_object(arr))
    item = arr.itemsize
    if any(st < 0 for st in arr.strides):
        raise ValueError("from_numpy: at least one stride of the array is negative (PyTorch refuses such "
                         "arrays too); copy it with arr.copy() first")
    if any(st % item for st in arr.strides):
        raise ValueError(f"from_numpy: the array's strides {arr.strides} are not multiples of its item size {item}")
    span = sum((n - 1) * st for n, st in zip(arr.shape, arr.strides)) // item + 1
    memory = from_numpy(np.lib.stride_tricks.as_strided(arr, shape=(span,), strides=(item,)))
    return _read(memory, _indexing.Region(0, arr.shape, [st // item for st in arr.strides]), "from_numpy")


def from_dlpack(obj):
    """A tensor sharing the memory of any DLPack producer (numpy, PyTorch, CuPy, JAX) or capsule."""
    if hasattr(obj, "__dlpack__"):
        dev_type, dev_id = obj.__dlpack_device__()
        if dev_type == 2:  # CUDA: the producer orders its work before our compute stream
            capsule = obj.__dlpack__(stream=_C.cuda_compute_stream(dev_id))
        else:
            capsule = obj.__dlpack__()
    else:
        capsule = obj
    return Tensor(_C.Buffer.from_dlpack(capsule))


def _new(size, dtype, device, requires_grad=False, pin_memory=False, default=None):
    """A new tensor of dtype, else `default`, else the default float dtype."""
    dt = get_dtype(dtype) if dtype is not None else (default if default is not None else get_default_dtype())
    buf = _C.Buffer(_size_args(size), dt.name, ordinal(device), pin_memory=pin_memory)
    return Tensor(buf, requires_grad=requires_grad)


def empty(*args, size=None, dtype=None, device=None, requires_grad=False, pin_memory=False):
    return _new(_size_or_keyword(args, size, "empty", "size"), dtype, device, requires_grad, pin_memory)


def zeros(*args, size=None, dtype=None, device=None, requires_grad=False, pin_memory=False):
    size = _size_or_keyword(args, size, "zeros", "size")
    return _new(size, dtype, device, False, pin_memory).fill_(0)._with_grad(requires_grad)


def ones(*args, size=None, dtype=None, device=None, requires_grad=False, pin_memory=False):
    size = _size_or_keyword(args, size, "ones", "size")
    return _new(size, dtype, device, False, pin_memory).fill_(1)._with_grad(requires_grad)


def full(size, fill_value, dtype=None, device=None, requires_grad=False):
    """A tensor of ``size`` filled with ``fill_value``: the default dtype for a
    float, int64 for an int and bool for a bool, as PyTorch's."""
    fill_value = _number(fill_value)
    default = None if _is_float_scalar(fill_value) else bool_ if isinstance(fill_value, (bool, np.bool_)) else \
        complex_of(get_default_dtype()) if isinstance(fill_value, (complex, np.complexfloating)) else int64
    return _new(size, dtype, device, default=default).fill_(fill_value)._with_grad(requires_grad)


def _like(factory, name, input, dtype, device, requires_grad, memory_format, *args):
    """``factory(input.shape, *args)`` with input's dtype and device unless given: the ``*_like`` factories."""
    checked_memory_format(memory_format, name)
    return factory(input.shape, *args, dtype=dtype or input.dtype, device=device or input.device,
                   requires_grad=requires_grad)


def zeros_like(input, dtype=None, device=None, requires_grad=False, memory_format=preserve_format):
    return _like(zeros, "zeros_like", input, dtype, device, requires_grad, memory_format)


def ones_like(input, dtype=None, device=None, requires_grad=False, memory_format=preserve_format):
    return _like(ones, "ones_like", input, dtype, device, requires_grad, memory_format)


def empty_like(input, dtype=None, device=None, requires_grad=False, memory_format=preserve_format):
    return _like(empty, "empty_like", input, dtype, device, requires_grad, memory_format)


def _number(v):
    """A 0-d tensor given where a number goes, as that number (0-d float tensors stay floats)."""
    return v.item() if isinstance(v, Tensor) and v.ndim == 0 else v


def arange(start=0, end=None, step=1, dtype=None, device=None, requires_grad=False):
    start, end, step = _number(start), _number(end), _number(step)
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ArgumentError("arange: step must be non-zero")
    if (end - start) * step < 0:  # as PyTorch, where numpy gives an empty array
        raise ArgumentError(f"arange: the step {step} leads away from end={end} (start={start})")
    is_float = any(_is_float_scalar(v) for v in (start, end, step))
    dt = get_dtype(dtype) if dtype is not None else (get_default_dtype() if is_float else int64)
    values = np.arange(start, end, step, dtype=np.float64 if is_float or dt.is_floating_point else np.int64)
    return tensor(values, dtype=dt, device=device, requires_grad=requires_grad)


def _generator(generator):
    """The generator a random function draws from: the one given, else this thread's (see _draws_from)."""
    if generator is None:
        return _draws_from()
    if not isinstance(generator, Generator):
        raise TypeError(f"generator must be a ddpc.Generator, got {type(generator).__name__}")
    return generator


def _random(size, kind, a, b, dtype, device, requires_grad, default=None, generator=None):
    t = _new(size, dtype, device, default=default)
    return _rnd.fill_draws(t, kind, a, b, _generator(generator))._with_grad(requires_grad)


def rand(*args, size=None, generator=None, dtype=None, device=None, requires_grad=False):
    """Uniform on [0, 1), drawn from ``generator`` (the global one when None)."""
    size = _size_or_keyword(args, size, "rand", "size")
    return _random(size, _RAND_UNIFORM, 0.0, 1.0, dtype, device, requires_grad, generator=generator)


def randn(*args, size=None, generator=None, dtype=None, device=None, requires_grad=False):
    """Standard normal, drawn from ``generator`` (the global one when None)."""
    size = _size_or_keyword(args, size, "randn", "size")
    return _random(size, _RAND_NORMAL, 0.0, 1.0, dtype, device, requires_grad, generator=generator)


def randint(low=0, high=None, size=None, generator=None, dtype=None, device=None):
    """Integers uniform on [low, high), as PyTorch's: ``randint(high, size)``,
    ``randint(low, high, size)`` or by keyword; any range int64 holds, drawn
    exactly, into any integer, bool or float dtype that holds it."""
    if size is None and isinstance(high, (tuple, list)):
        low, high, size = 0, low, high
    if size is None:
        raise TypeError("randint() needs a size, e.g. randint(0, 10, (3,))")
    if high is None:
        low, high = 0, low
    dt = int64 if dtype is None else get_dtype(dtype)
    low, high = _rnd.int_range("randint", low, high, dt)
    return _random(tuple(size), _RAND_INT, low, high, dt, device, False, generator=generator)


# The largest n whose permutation a dtype holds exactly (PyTorch checks all but bfloat16's).
_RANDPERM_LIMITS = {uint8: 256, int32: 2 ** 31, float16: 2 ** 11 + 1, bfloat16: 2 ** 8 + 1, float32: 2 ** 24 + 1,
                    float64: 2 ** 53 + 1}


def randperm(n, generator=None, dtype=None, device=None):
    """A random permutation of 0..n-1 (drawn on the host, the same on every
    device kind), refusing a dtype that can't hold each of 0..n-1 exactly, as
    PyTorch (which lets bfloat16 through; ddpc refuses it above n = 257)."""
    if n < 0:
        raise ArgumentError(f"randperm: n must be non-negative, got {n}")
    dt = int64 if dtype is None else get_dtype(dtype)
    if dt is bool_ or dt.is_complex:
        raise NotImplementedError(f"randperm is not implemented for {dt.name}")
    if n > _RANDPERM_LIMITS.get(dt, n):
        raise ArgumentError(f"randperm: n={n} does not fit {dt.name} (at most n={_RANDPERM_LIMITS[dt]})")
    t = _new((n,), "int64", None)
    seed, offset = _generator(generator).take(n)
    _C.randperm(t._buf, seed, offset)
    if dt is not int64:
        t = t.to(dtype=dt)
    return t.to(device=device) if device is not None else t


# ---- more creation functions, broadcasting and grids ----------------------------------

def _float_values(values, dtype, device, requires_grad):
    """A tensor of float64 numpy values in dtype (the default float dtype if None)."""
    return tensor(values, dtype=dtype if dtype is not None else get_default_dtype(), device=device,
                  requires_grad=requires_grad)


def linspace(start, end, steps, dtype=None, device=None, requires_grad=False):
    """``steps`` values evenly spaced from start to end, both included."""
    if steps < 0:
        raise RuntimeError(f"linspace: number of steps must be non-negative, got {steps}")
    return _float_values(np.linspace(start, end, int(steps)), dtype, device, requires_grad)


def logspace(start, end, steps, base=10.0, dtype=None, device=None, requires_grad=False):
    """``base ** linspace(start, end, steps)``."""
    if steps < 0:
        raise RuntimeError(f"logspace: number of steps must be non-negative, got {steps}")
    return _float_values(np.logspace(start, end, int(steps), base=base), dtype, device, requires_grad)


def eye(n, m=None, dtype=None, device=None, requires_grad=False):
    """An n x m (n x n) matrix with ones on the diagonal."""
    m = n if m is None else m
    if n < 0 or m < 0:
        raise RuntimeError(f"eye: n and m must be non-negative, got {n} and {m}")
    return _float_values(np.eye(int(n), int(m)), dtype, device, requires_grad)


def full_like(input, fill_value, dtype=None, device=None, requires_grad=False, memory_format=preserve_format):
    return _like(full, "full_like", input, dtype, device, requires_grad, memory_format, fill_value)


def rand_like(input, dtype=None, device=None, requires_grad=False, memory_format=preserve_format):
    return _like(rand, "rand_like", input, dtype, device, requires_grad, memory_format)


def randn_like(input, dtype=None, device=None, requires_grad=False, memory_format=preserve_format):
    return _like(randn, "randn_like", input, dtype, device, requires_grad, memory_format)


def randint_like(input, low=0, high=None, dtype=None, device=None):
    """Integers uniform on [low, high) in t's shape; ``randint_like(t, high)`` as in PyTorch."""
    if high is None:
        low, high = 0, low
    return randint(low, high, input.shape, dtype=dtype or input.dtype, device=device or input.device)


def as_tensor(data, dtype=None, device=None):
    """data itself when it is a tensor of that dtype and device; a tensor sharing the memory of a
    contiguous numpy array of a ddpc dtype on the host; otherwise a copy, as ``tensor(data)``."""
    if isinstance(data, Tensor):
        return data.to(dtype=dtype or data.dtype, device=device if device is not None else data.device)
    if (isinstance(data, np.ndarray) and data.flags.c_contiguous and (device is None or ordinal(device) < 0)
            and data.dtype.name in ("float16", "float32", "float64", "int32", "int64", "uint8", "bool")
            and (dtype is None or get_dtype(dtype) is get_dtype(data.dtype))):
        return from_numpy(data)
    return tensor(data, dtype=dtype, device=device)


def asarray(obj, *, dtype=None, device=None, copy=None, requires_grad=False):
    """obj as a tensor, as torch.asarray: sharing obj's memory where it can (a
    tensor of that dtype and device, a contiguous numpy array or buffer of a
    ddpc dtype on the host), unless ``copy`` is True; ``copy=False`` raises
    where it can't share. Nested sequences and numbers are always copied."""
    if copy:
        out = tensor(obj, dtype=dtype, device=device)
    else:
        out = as_tensor(obj, dtype=dtype, device=device)
        if copy is False and not _shares_source(out, obj):
            raise ArgumentError(f"asarray: can't alias {type(obj).__name__} data without a copy (copy=False was given)")
    if requires_grad:
        out = out.detach() if out is obj else out  # a new leaf over obj's memory
        out.requires_grad = True
    return out


def _shares_source(out, obj):
    """Whether out holds obj's own elements (obj a tensor or a numpy array)."""
    if isinstance(obj, Tensor):
        return _same_memory(out, obj)
    if isinstance(obj, np.ndarray):
        return out.is_cpu and obj.nbytes == out.nbytes and out.data_ptr() == obj.__array_interface__["data"][0]
    return False


def scalar_tensor(s, *, dtype=None, device=None, requires_grad=False):
    """A 0-d tensor of the number s, of the default float dtype unless ``dtype`` (ints too, as PyTorch)."""
    if isinstance(s, Tensor):
        s = s.item()
    return full((), s, dtype=dtype or get_default_dtype(), device=device, requires_grad=requires_grad)


def empty_strided(size, stride, *, dtype=None, layout=None, device=None, requires_grad=False, pin_memory=False):
    """An uninitialised tensor of ``size``. ddpc tensors are contiguous, so the
    result has contiguous strides whatever ``stride`` asks (which must still
    give one non-negative stride per dim)."""
    size, stride = tuple(size), tuple(stride)
    if len(size) != len(stride):
        raise ArgumentError(f"empty_strided: mismatch in length of strides and shape ({len(stride)} strides for "
                            f"{len(size)} dims)")
    if any(st < 0 for st in stride):
        raise ArgumentError(f"empty_strided: strides must be non-negative, got {list(stride)}")
    return _new(size, dtype, device, requires_grad, pin_memory)


def frombuffer(buffer, *, dtype, count=-1, offset=0, requires_grad=False):
    """A 1-d tensor over the memory of an object that exposes the buffer
    protocol (no copy): ``count`` elements of ``dtype`` (all that fit when -1)
    from byte ``offset``."""
    dt = get_dtype(dtype)
    view = memoryview(buffer)
    if view.nbytes == 0:
        raise ArgumentError("frombuffer: both buffer length (0) and count (-1) must not be 0")
    if not 0 <= offset < view.nbytes:
        raise ArgumentError(f"frombuffer: offset ({offset} bytes) must be non-negative and no greater than buffer "
                            f"length ({view.nbytes} bytes) minus 1")
    if count <= 0 and count != -1:
        raise ArgumentError(f"frombuffer: count must be positive or -1, got {count}")
    if count == -1 and (view.nbytes - offset) % dt.itemsize:
        raise ArgumentError(f"frombuffer: buffer length ({view.nbytes - offset} bytes) after offset ({offset} bytes) "
                            f"must be a multiple of element size ({dt.itemsize})")
    if count > 0 and offset + count * dt.itemsize > view.nbytes:
        raise ArgumentError(f"frombuffer: requested buffer length ({count} * {dt.itemsize} bytes) after offset "
                            f"({offset} bytes) must not be greater than actual buffer length ({view.nbytes} bytes)")
    raw = np.frombuffer(buffer, dtype=np.uint16 if dt is bfloat16 else dt._np, count=count, offset=offset)
    out = Tensor(_C.Buffer.from_object(raw, "bfloat16") if dt is bfloat16 else _C.Buffer.from_object(raw))
    return out._with_grad(requires_grad)


def broadcast_shapes(*shapes):
    """The shape that tensors of the given shapes broadcast to."""
    out = ()
    for shape in shapes:
        out = _ag._broadcast_shape(out, (shape,) if isinstance(shape, numbers.Integral) else tuple(shape))
    return out


def broadcast_tensors(*tensors):
    """The tensors expanded to their common shape (views; differentiable)."""
    shape = broadcast_shapes(*(t.shape for t in tensors))
    return tuple(t.expand(shape) for t in tensors)


def meshgrid(*tensors, indexing="ij"):
    """Coordinate grids from 1-D tensors: with indexing="ij" output i varies along dim i; with
    "xy" the first two dims are swapped (Cartesian, as numpy's default)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise ArgumentError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    for t in tensors:
        if t.ndim > 1:
            raise ArgumentError(f"meshgrid expects 0-d or 1-d tensors, got shape {t.shape}")
    axes = list(range(len(tensors)))
    if indexing == "xy" and len(tensors) > 1:
        axes[0], axes[1] = 1, 0
    shape = [0] * len(tensors)
    for t, axis in zip(tensors, axes):
        shape[axis] = t.numel()
    grids = []
    for t, axis in zip(tensors, axes):
        view = [1] * len(tensors)
        view[axis] = t.numel()
        grids.append(t.reshape(view).expand(tuple(shape)))
    return tuple(grids)


def diag(input, diagonal=0):
    """A 1-d input becomes a square matrix with it on diagonal ``diagonal``; a 2-d input gives that
    diagonal as a 1-d tensor (differentiable both ways)."""
    k = int(diagonal)
    if input.ndim == 1:
        n = input.shape[0]
        out = zeros(n + abs(k), n + abs(k), dtype=input.dtype, device=input.device)
        rows = np.arange(n) + max(-k, 0)
        out[rows, rows + k] = input
        return out
    if input.ndim == 2:
        rows = np.arange(max(0, -k), min(input.shape[0], input.shape[1] - k))
        return input[rows, rows + k]
    raise ArgumentError(f"diag expects a 1-d or 2-d tensor, got shape {input.shape}")


def _gather_rows(tensors, name):
    tensors = list(tensors)
    if not tensors:
        raise ArgumentError(f"{name}() needs at least one tensor")
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"{name}() takes ddpc tensors, got {type(t).__name__}")
    first = tensors[0]
    for t in tensors[1:]:
        if t._buf.device != first._buf.device:
            raise ArgumentError(f"{name}(): tensors are on different devices ({first.device} and {t.device})")
    return tensors, first


def _cat_dim(dim, ndim, name):
    if not -ndim <= dim < ndim:
        raise IndexOutOfRangeError(f"{name}(): dim {dim} is out of range for {ndim} dims")
    return dim % ndim


def _along(dim, index):
    """The index that selects ``index`` along ``dim`` and everything along the dims before it."""
    return (slice(None),) * dim + (index,)


def stack(tensors, dim=0):
    """Stacks equal-shape tensors along a new dim ``dim``."""
    tensors, first = _gather_rows(tensors, "stack")
    for t in tensors[1:]:
        if t.shape != first.shape:
            raise ArgumentError(f"stack(): shapes {first.shape} and {t.shape} differ")
    dim = _cat_dim(dim, first.ndim + 1, "stack")
    dt = first.dtype
    for t in tensors[1:]:
        dt = promote(dt, t.dtype)
    out = empty(first.shape[:dim] + (len(tensors),) + first.shape[dim:], dtype=dt, device=first.device)
    for i, t in enumerate(tensors):
        out[_along(dim, i)] = t.detach()  # storage only: autograd's stack records the graph
    return out


def cat(tensors, dim=0):
    """Concatenates tensors along ``dim`` (all other dims equal)."""
    tensors, first = _gather_rows(tensors, "cat")
    if first.ndim == 0:
        raise ArgumentError("cat(): zero-dimensional tensors cannot be concatenated")
    dim = _cat_dim(dim, first.ndim, "cat")
    for t in tensors:
        if t.ndim != first.ndim or t.shape[:dim] != first.shape[:dim] or t.shape[dim + 1:] != first.shape[dim + 1:]:
            raise ArgumentError(f"cat(): shapes {first.shape} and {t.shape} differ beyond dim {dim}")
    dt = first.dtype
    for t in tensors[1:]:
        dt = promote(dt, t.dtype)
    total = sum(t.shape[dim] for t in tensors)
    out = empty(first.shape[:dim] + (total,) + first.shape[dim + 1:], dtype=dt, device=first.device)
    at = 0
    for t in tensors:
        out[_along(dim, slice(at, at + t.shape[dim]))] = t.detach()  # storage only: autograd's cat records the graph
        at += t.shape[dim]
    return out


# ---- top-level forms of Tensor methods (torch.flatten, torch.numel, ...) ----
def _method_of(input, name):
    if not isinstance(input, Tensor):
        raise TypeError(f"{name}() takes a ddpc.Tensor first, got {type(input).__name__}")
    return getattr(input, name)


def _named(fn, name):
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``input.{name}(...)``: see ddpc.Tensor.{name}."
    return fn


def _method_form(name):
    """The function ``name(input, *args, **kwargs)``: input's method of that name."""
    return _named(lambda input, *args, **kwargs: _method_of(input, name)(*args, **kwargs), name)


def _comparison_form(name):
    """The function ``name(input, other)``: input's comparison (or other binary method) of that name."""
    return _named(lambda input, other: _method_of(input, name)(other), name)


eq, ne, gt, ge, lt, le = map(_comparison_form, ("eq", "ne", "gt", "ge", "lt", "le"))
(narrow, t, detach, movedim, moveaxis, swapaxes, swapdims, softmax, log_softmax, is_floating_point) = map(
    _method_form, ("narrow", "t", "detach", "movedim", "moveaxis", "swapaxes", "swapdims", "softmax", "log_softmax",
                   "is_floating_point"))
# PyTorch's module-level in-place functions: ``ddpc.tan_(x)`` is ``x.tan_()``.
_INPLACE_FUNCTIONS = ("tan_", "asin_", "acos_", "atan_", "acosh_", "atanh_", "asinh_", "sinh_", "cosh_", "arcsin_",
                      "arccos_", "arctan_", "arcsinh_", "arccosh_", "arctanh_", "erfc_", "i0_", "exp2_", "log2_",
                      "log10_", "frac_", "logit_")
(tan_, asin_, acos_, atan_, acosh_, atanh_, asinh_, sinh_, cosh_, arcsin_, arccos_, arctan_, arcsinh_, arccosh_,
 arctanh_, erfc_, i0_, exp2_, log2_, log10_, frac_, logit_) = map(_method_form, _INPLACE_FUNCTIONS)
xlogy_ = _comparison_form("xlogy_")
# The others of PyTorch's module-level in-place functions that are Tensor methods.
_MORE_INPLACE_NAMES = ("abs_", "addmv_", "as_strided_", "ceil_", "clamp_", "clamp_max_", "clamp_min_", "clip_",
                       "cos_", "deg2rad_", "detach_", "erf_", "exp_", "expm1_", "fill_", "fix_", "floor_", "gcd_",
                       "index_put_", "lcm_", "ldexp_", "log1p_", "log_", "nan_to_num_", "neg_", "negative_",
                       "rad2deg_", "reciprocal_", "resize_as_", "round_", "rsqrt_", "sin_", "sinc_", "sqrt_",
                       "square_", "trunc_", "zero_")
_MORE_INPLACE = {name: _comparison_form(name) if name in ("gcd_", "lcm_", "ldexp_") else _method_form(name)
                 for name in _MORE_INPLACE_NAMES}  # (input, other), as PyTorch names their arguments
globals().update(_MORE_INPLACE)


def is_tensor(obj):
    return isinstance(obj, Tensor)


def numel(input):
    return input.numel()


def flatten(input, start_dim=0, end_dim=-1):
    return input.flatten(start_dim, end_dim)


def squeeze(input, dim=None):
    return input.squeeze(dim)


def unsqueeze(input, dim):
    return input.unsqueeze(dim)


def index_select(input, dim, index):
    return input.index_select(dim, index)


from . import autograd as _ag  # noqa: E402  (autograd builds on the Tensor class above)
from . import _layout as _lo, _linalg as _la, _pointwise as _pw, _random as _rnd  # noqa: E402  (as autograd)
from . import _sparse_coo  # noqa: E402  (as autograd)
from . import special as _sp  # noqa: E402  (as autograd)
from . import _stats as _st  # noqa: E402  (as autograd)
from . import _matrix as _mx  # noqa: E402  (as autograd)
from . import _complex  # noqa: E402  (as autograd)
from . import _function, _storage  # noqa: E402  (as autograd)

_TYPE_NAMES = {float32: "FloatTensor", float64: "DoubleTensor", float16: "HalfTensor", bfloat16: "BFloat16Tensor",
               int32: "IntTensor", int64: "LongTensor", uint8: "ByteTensor", complex64: "ComplexFloatTensor",
               complex128: "ComplexDoubleTensor", bool_: "BoolTensor"}


class _LegacyTensorType(type):
    """PyTorch's per-type tensor classes (``FloatTensor``, ``cuda.LongTensor``
    ...): calling one builds a ddpc Tensor as ``Tensor(...)`` does, in its
    dtype and on its device; ``isinstance`` checks the dtype and device."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and obj.dtype is get_dtype(cls.dtype) and obj.is_cuda == cls.is_cuda

    def __call__(cls, *args):
        t = Tensor(_legacy_buffer(args[0] if args else (), args[1:], cls.__name__, cls.dtype))
        return t.cuda() if cls.is_cuda else t


def _legacy_tensor_types(cuda=False):
    """name -> class, for the legacy per-type tensor classes on the host (or on a GPU)."""
    kinds = {"FloatTensor": float32, "DoubleTensor": float64, "HalfTensor": float16, "BFloat16Tensor": bfloat16,
             "LongTensor": int64, "IntTensor": int32, "ByteTensor": uint8, "BoolTensor": bool_}
    return {name: _LegacyTensorType(name, (), {"dtype": dt, "is_cuda": cuda, "__module__": "ddpc.cuda" if cuda
                                               else "ddpc"}) for name, dt in kinds.items()}

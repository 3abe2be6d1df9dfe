"""dtype and device objects, and their parsing from user input."""

import numpy as np

from . import _C
from ._C import ArgumentError


class dtype:
    """An element type, like ``torch.dtype``: ``ddpc.float32``, ``ddpc.bfloat16``, ..."""

    __slots__ = ("name", "itemsize", "is_floating_point", "is_complex", "_np")

    def __init__(self, name, itemsize, is_floating_point, np_dtype, is_complex=False):
        self.name = name
        self.itemsize = itemsize
        self.is_floating_point = is_floating_point
        self.is_complex = is_complex
        self._np = np_dtype

    def __repr__(self):
        return f"ddpc.{self.name}"

    def __reduce__(self):
        return (get_dtype, (self.name,))

    @property
    def is_signed(self):
        """Whether the dtype holds negative values (all but uint8 and bool)."""
        return self.name not in ("uint8", "bool")


float32 = dtype("float32", 4, True, np.dtype(np.float32))
float64 = dtype("float64", 8, True, np.dtype(np.float64))
float16 = dtype("float16", 2, True, np.dtype(np.float16))
bfloat16 = dtype("bfloat16", 2, True, None)
int32 = dtype("int32", 4, False, np.dtype(np.int32))
int64 = dtype("int64", 8, False, np.dtype(np.int64))
uint8 = dtype("uint8", 1, False, np.dtype(np.uint8))
complex64 = dtype("complex64", 8, False, np.dtype(np.complex64), is_complex=True)
complex128 = dtype("complex128", 16, False, np.dtype(np.complex128), is_complex=True)
cfloat, cdouble = complex64, complex128
bool_ = dtype("bool", 1, False, np.dtype(np.bool_))  # ddpc.bool (this name keeps Python's bool usable here)

_BY_NAME = {d.name: d for d in (float32, float64, float16, bfloat16, int32, int64, uint8, complex64, complex128,
                                bool_)}
_ALIASES = {"float": float32, "double": float64, "half": float16, "long": int64, "int": int32,
            "cfloat": complex64, "cdouble": complex128}
# PyTorch's names of the dtypes in its messages ("result type Float can't be cast to ... Long").
TORCH_NAMES = {float16: "Half", bfloat16: "BFloat16", float32: "Float", float64: "Double", complex64: "ComplexFloat",
               complex128: "ComplexDouble", int32: "Int", int64: "Long", uint8: "Byte", bool_: "Bool"}
# Promotion order for mixed-dtype arithmetic; float16 with bfloat16 gives float32, bool with any other dtype that one.
_RANK = {bool_: -1, uint8: 0, int32: 1, int64: 2, float16: 3, bfloat16: 3, float32: 4, float64: 5}
# The complex dtype of each real one and back (PyTorch's: complex32 is not in ddpc, so the 16-bit floats and the
# integers go to complex64).
_COMPLEX_OF = {float64: complex128, complex128: complex128}
_REAL_OF = {complex64: float32, complex128: float64}


def real_pairs(buf):
    """A complex _C.Buffer as a view of its (real, imaginary) pairs, shape (*shape, 2), for the real ops (a
    reduction, an optimizer step) that treat each part alike, as PyTorch's view_as_real; others as they are."""
    part = {"complex64": "float32", "complex128": "float64"}.get(buf.dtype)
    return buf if part is None else buf.view(0, tuple(buf.shape) + (2,), part)


def complex_of(d):
    """The complex dtype that holds values of dtype d (complex64 for float32 and below)."""
    return _COMPLEX_OF.get(d, complex64)


def real_of(d):
    """The real dtype of a complex dtype's parts (d itself for a real dtype)."""
    return _REAL_OF.get(d, d)


def _bfloat16_numpy():
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


def get_dtype(spec):
    """A ddpc dtype from a ddpc dtype, a name, a numpy dtype or a Python type."""
    if isinstance(spec, dtype):
        return spec
    if isinstance(spec, str):
        d = _BY_NAME.get(spec) or _ALIASES.get(spec)
        if d is None:
            raise TypeError(f"unknown dtype {spec!r} (ddpc supports {', '.join(_BY_NAME)})")
        return d
    if spec is float:
        return float32
    if spec is int:
        return int64
    if spec is bool:
        return bool_
    if spec is complex:
        return complex_of(_info_dtype(None))
    try:
        npd = np.dtype(spec)
    except TypeError:
        raise TypeError(f"unknown dtype {spec!r} (ddpc supports {', '.join(_BY_NAME)})") from None
    if npd.name == "bfloat16":
        return bfloat16
    for d in _BY_NAME.values():
        if d._np is not None and d._np == npd:
            return d
    raise TypeError(f"numpy dtype {npd} has no ddpc equivalent (ddpc supports {', '.join(_BY_NAME)})")


def numpy_dtype(d):
    """The numpy dtype matching a ddpc dtype (bfloat16 needs the ml_dtypes package)."""
    if d._np is not None:
        return d._np
    npd = _bfloat16_numpy()
    if npd is None:
        raise TypeError("numpy has no bfloat16; install ml_dtypes to view bfloat16 data in numpy, "
                        "or cast first with .float()")
    return npd


def promote(a, b):
    """Result dtype of an arithmetic op between two ddpc dtypes."""
    if a is b:
        return a
    if a.is_complex or b.is_complex:  # the complex dtype whose parts hold both: float64 + complex64 is complex128
        return complex_of(promote(real_of(a), real_of(b)))
    if {a, b} == {float16, bfloat16}:
        return float32
    return a if _RANK[a] >= _RANK[b] else b


def promote_types(type1, type2):
    """The dtype arithmetic between type1 and type2 gives (as torch.promote_types)."""
    return promote(get_dtype(type1), get_dtype(type2))


def can_cast(from_, to):
    """Whether PyTorch's casting rules allow from_ to become to: every cast but
    a floating one to an integer one, a complex one to a real one, and any
    but bool to bool."""
    to, from_ = get_dtype(to), get_dtype(from_)
    if to is bool_:
        return from_ is bool_
    if from_.is_complex:
        return to.is_complex
    return to.is_complex or to.is_floating_point or not from_.is_floating_point


def _operand_rank(x):
    """Who decides a result dtype first: a tensor with dims (2), a 0-d tensor (1), a number (0)."""
    if hasattr(x, "dtype") and hasattr(x, "ndim"):
        return 2 if x.ndim else 1
    return 0


def _operand_dtype(x):
    if _operand_rank(x):
        return x.dtype
    if isinstance(x, (bool, np.bool_)):
        return bool_
    if isinstance(x, (int, np.integer)):
        return int64
    if isinstance(x, (float, np.floating)):
        return _info_dtype(None)
    if isinstance(x, (complex, np.complexfloating)):
        return complex_of(_info_dtype(None))
    raise TypeError(f"result_type: expected a tensor or a number, got {type(x).__name__}")


def _operand_kind(x):
    """0 for bool, 1 for integers, 2 for floats, 3 for complex."""
    d = _operand_dtype(x)
    return 3 if d.is_complex else 2 if d.is_floating_point else 0 if d is bool_ else 1


def result_type(tensor1, tensor2):
    """Result dtype of an elementwise op between tensor1 and tensor2 (tensors
    or numbers), as PyTorch's: tensors with dims decide, then 0-d tensors, then
    numbers, and one of a lower rank counts only where it is of a higher kind
    (floating beside integer), so float32 (N,) op float64 () is float32, int64
    (N,) op 2.5 the default float dtype."""
    a, b = tensor1, tensor2
    if _operand_rank(a) == _operand_rank(b):
        return promote(_operand_dtype(a), _operand_dtype(b))
    high, low = (a, b) if _operand_rank(a) > _operand_rank(b) else (b, a)
    if _operand_kind(low) <= _operand_kind(high):
        return _operand_dtype(high)
    if _operand_kind(low) == 3 and _operand_kind(high) == 2:  # float64 (N,) op 1j is complex128
        return complex_of(_operand_dtype(high))
    return _operand_dtype(low)


# (bits, eps, max, smallest normal, decimal digits of precision) of each float dtype.
_FLOAT_LIMITS = {
    float16: (16, 2.0 ** -10, 65504.0, 2.0 ** -14, 3),
    bfloat16: (16, 2.0 ** -7, (2 - 2.0 ** -7) * 2.0 ** 127, 2.0 ** -126, 2),
    float32: (32, 2.0 ** -23, (2 - 2.0 ** -23) * 2.0 ** 127, 2.0 ** -126, 6),
    float64: (64, 2.0 ** -52, float(np.finfo(np.float64).max), 2.0 ** -1022, 15),
}
_INT_LIMITS = {uint8: (8, 0, 255), int32: (32, -2 ** 31, 2 ** 31 - 1), int64: (64, -2 ** 63, 2 ** 63 - 1)}


def _info_dtype(type):
    if type is None:
        from .tensor import get_default_dtype

        return get_default_dtype()
    return get_dtype(type)


class finfo:
    """The limits of a float dtype (the default dtype when none is given), as
    ``torch.finfo``: bits, eps (1 - the next number above 1), max, min (-max),
    tiny and smallest_normal (the smallest positive normal number), resolution
    (10 ** -digits of precision) and dtype (its name)."""

    __slots__ = ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution", "dtype")

    def __init__(self, type=None):
        d = _info_dtype(type)
        if d not in _FLOAT_LIMITS:
            raise TypeError(f"finfo() requires a floating point input type, got {d}; use ddpc.iinfo for it")
        self.bits, self.eps, self.max, self.tiny, digits = _FLOAT_LIMITS[d]
        self.min, self.smallest_normal, self.resolution, self.dtype = -self.max, self.tiny, 10.0 ** -digits, d.name

    def __repr__(self):
        return (f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, eps={self.eps:g}, "
                f"smallest_normal={self.smallest_normal:g}, tiny={self.tiny:g}, dtype={self.dtype})")


class iinfo:
    """The limits of an integer dtype, as ``torch.iinfo``: bits, min, max and dtype (its name)."""

    __slots__ = ("bits", "min", "max", "dtype")

    def __init__(self, type):
        d = get_dtype(type)
        if d not in _INT_LIMITS:
            raise TypeError(f"iinfo() requires an integer input type, got {d}; use ddpc.finfo for it")
        (self.bits, self.min, self.max), self.dtype = _INT_LIMITS[d], d.name

    def __repr__(self):
        return f"iinfo(min={self.min:g}, max={self.max:g}, dtype={self.dtype})"


class device:
    """A device, like ``torch.device``: ``device("cpu")``, ``device("cuda", 1)``, ``device("cuda:1")``.
    As in PyTorch, a cpu device may carry an index (``"cpu:0"``), which
    tensors do not keep (their device is ``cpu``)."""

    __slots__ = ("type", "index")

    def __init__(self, spec, index=None):
        if isinstance(spec, device):
            self.type, self.index = spec.type, spec.index
            return
        if isinstance(spec, int) and not isinstance(spec, bool):
            if spec < 0:
                raise ArgumentError(f"invalid device index {spec}")
            self.type, self.index = "cuda", spec
            return
        if not isinstance(spec, str):
            raise TypeError(f"device must be 'cpu', 'cuda', 'cuda:N', an int or a ddpc.device, got {spec!r}")
        kind, _, idx = spec.partition(":")
        if kind not in ("cpu", "cuda") or (idx and not idx.isdigit()) or (idx and index is not None):
            raise ArgumentError(f"invalid device {spec!r} (expected 'cpu', 'cpu:N', 'cuda' or 'cuda:N')")
        if index is not None and (isinstance(index, bool) or not isinstance(index, int) or index < -1):
            raise ArgumentError(f"invalid device index {index!r} for {spec!r}")
        self.type = kind
        self.index = int(idx) if idx else (None if index == -1 else index)

    @property
    def _ordinal(self):
        """-1 for cpu, else the CUDA ordinal (the current device for a bare 'cuda')."""
        if self.type == "cpu":
            return -1
        return self.index if self.index is not None else _C.cuda_current_device()

    def __eq__(self, other):
        try:
            other = device(other)
        except (TypeError, ValueError):
            return NotImplemented
        return self.type == other.type and self.index == other.index

    def __hash__(self):
        return hash((self.type, self.index))

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self):
        return f"device(type={self.type!r}" + ("" if self.index is None else f", index={self.index}") + ")"

    def __reduce__(self):
        return (device, (str(self),))


def ordinal(spec):
    """-1 for a cpu device spec, else the CUDA ordinal."""
    if spec is None:
        return -1
    return device(spec)._ordinal


def device_of(ordinal_):
    return device("cpu") if ordinal_ < 0 else device("cuda", ordinal_)


class memory_format:
    """A name of a memory layout, as torch.memory_format. ddpc keeps every
    tensor in row-major order: calls that take a ``memory_format`` accept
    these and lay nothing out differently (``channels_last`` changes speed
    in PyTorch, not values), while ``is_contiguous(memory_format=...)`` says
    truly whether the row-major layout is also that one."""

    def __init__(self, name, dim_order=None):
        self._name, self._dim_order = name, dim_order

    def __repr__(self):
        return f"ddpc.{self._name}"

    def __reduce__(self):
        return self._name


class layout:
    """A tensor layout, as torch.layout: ``ddpc.strided`` (dense) or ``ddpc.sparse_coo``."""

    def __init__(self, name):
        self._name = name

    def __repr__(self):
        return f"ddpc.{self._name}"

    def __reduce__(self):
        return self._name


strided = layout("strided")
sparse_coo = layout("sparse_coo")

contiguous_format = memory_format("contiguous_format")
preserve_format = memory_format("preserve_format")
# The dims from fastest- to slowest-varying in each channels-last layout.
channels_last = memory_format("channels_last", (1, 3, 2, 0))
channels_last_3d = memory_format("channels_last_3d", (1, 4, 3, 2, 0))


def checked_memory_format(fmt, what):
    if not isinstance(fmt, memory_format):
        raise TypeError(f"{what}: memory_format must be a ddpc memory format (e.g. ddpc.channels_last), got {fmt!r}")
    return fmt


def row_major_is(fmt, shape):
    """Whether a row-major tensor of ``shape`` is also laid out as ``fmt``
    (PyTorch's rule: the strides in the format's dim order grow as the sizes
    multiply, dims of size 1 ignored)."""
    if fmt._dim_order is None:
        return True
    if len(shape) != len(fmt._dim_order):
        return False
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    expected = 1
    for d in fmt._dim_order:
        if shape[d] != 1:
            if strides[d] != expected:
                return False
            expected *= shape[d]
    return True

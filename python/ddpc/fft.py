"""ddpc.fft: PyTorch's torch.fft for ddpc tensors.

The transforms (fft, ifft, rfft, irfft, hfft, ihfft and their 2-d and n-d
forms) take PyTorch's arguments (``n`` or ``s``, ``dim``, ``norm``, ``out``)
and give PyTorch's dtypes: float32 transforms to complex64 and float64 to
complex128, integer and bool inputs are taken as the default float dtype, and
float16 and bfloat16 are refused as PyTorch's CPU transforms refuse them
(its GPU transforms take them for powers of two). ``n`` and ``s`` pad the
input with zeros or cut it short first, ``-1`` in ``s`` keeping a dim's length.

Host tensors are transformed by numpy.fft (pocketfft, in the input's
precision) on zero-copy numpy views, the result written straight into the
memory of the returned tensor. cuda tensors are transformed by cuFFT
(csrc/ops_fft.c) on the device's compute stream: it transforms the last one
to three dims of a buffer, so the transformed dims are moved there (a copy
unless they are there already) and more than three take several passes.
c2r, the inverse of a one-sided spectrum, reads every input as numpy does,
on GPUs too (see csrc/ops_fft.h): the imaginary parts of the frequencies
that must be real are ignored, as is any want of Hermitian symmetry in the
other dims.

Every transform is one of three recorded ops: c2c, r2c (the one-sided
spectrum of a real signal, the last transformed dim cut to n // 2 + 1) and
c2r (its inverse); hfft and ihfft conjugate around them. Their gradients are
PyTorch's: c2c's is the c2c of the other sign with the same scaling; r2c's is
that of the gradient filled with zeros to the full spectrum, real part taken;
c2r's is the r2c of the gradient with the frequencies that stand for their
conjugates too counted twice. Backward passes are recorded ops, so gradients
of gradients exist.
"""

import math
import numbers

import numpy as np

from . import _C, _complex
from . import autograd as _ag
from ._C import ArgumentError, IndexOutOfRangeError
from ._dtype import (TORCH_NAMES, bfloat16, bool_, complex64, complex128, complex_of, float16, float32, float64,
                     get_dtype, int32, int64, numpy_dtype, ordinal, real_of, strided, uint8)
from .amp import autocast_op
from .autograd import Node
from .tensor import Tensor, from_numpy, get_default_dtype, tensor, zeros

__all__ = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "fft2", "ifft2", "rfft2", "irfft2", "hfft2", "ihfft2",
           "fftn", "ifftn", "rfftn", "irfftn", "hfftn", "ihfftn", "fftfreq", "rfftfreq", "fftshift", "ifftshift"]

# csrc/ops_fft.h's transform kinds.
_C2C, _R2C, _C2R = 0, 1, 2

# How a transform scales its result: by 1, by 1 / sqrt(n) or by 1 / n, n the
# number of points it transforms. A norm names one for each sign: "backward"
# leaves the forward transform unscaled and divides the inverse by n.
_NONE, _SQRT, _FULL = 0, 1, 2
_NORMS = ("backward", "ortho", "forward")

# numpy 2 computes float32 transforms in float32 and writes into out=.
_NUMPY_OUT = int(np.__version__.split(".")[0]) >= 2

# PyTorch's errors for a complex input where a real one is needed.
_RFFTN_REAL = "rfftn expects a real-valued input tensor, but got {}"
_IHFFTN_REAL = "Only supports floating-point dtypes, but found: {}"

_TORCH_NAMES = TORCH_NAMES


def _scaling(norm, forward):
    if norm is None:
        norm = "backward"
    if norm not in _NORMS:
        raise RuntimeError(f'Invalid normalization mode: "{norm}"')
    i = _NORMS.index(norm)
    return i if forward else _FULL - i


def _numpy_norm(scaling, forward):
    """numpy's norm for a transform of that sign and scaling."""
    return _NORMS[scaling if forward else _FULL - scaling]


def _factor(scaling, points):
    return 1.0 if scaling == _NONE else 1.0 / (math.sqrt(points) if scaling == _SQRT else points)


# ---- arguments ---------------------------------------------------------------------------

def _input(name, input, real_only=None):
    """input as a transform takes it: integers and bools as the default float
    dtype; complex refused where ``real_only``, the message with the dtype's name."""
    if not isinstance(input, Tensor):
        raise TypeError(f"{name}(): argument 'input' (position 1) must be Tensor, not {type(input).__name__}")
    dt = input.dtype
    if dt in (float16, bfloat16):
        raise NotImplementedError(f"Unsupported dtype {_TORCH_NAMES[dt]}")
    if dt.is_complex:
        if real_only:
            raise TypeError(real_only.format(_TORCH_NAMES[dt]))
        return input
    return input if dt.is_floating_point else input.to(dtype=get_default_dtype())


def _int_arg(name, what, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}(): argument '{what}' must be int, not {type(value).__name__}")
    return int(value)


def _wrap(d, ndim):
    if ndim == 0:
        raise IndexOutOfRangeError(f"Dimension specified as {d} but tensor has no dimensions")
    if not -ndim <= d < ndim:
        raise IndexOutOfRangeError(f"Dimension out of range (expected to be in range of [{-ndim}, {ndim - 1}], but "
                                   f"got {d})")
    return d % ndim


def _points(n):
    if n < 1:
        raise RuntimeError(f"Invalid number of data points ({n}) specified")
    return n


def _one_dim(name, x, n, dim):
    """((dim,), [n or None]) of a 1-d transform."""
    d = _wrap(_int_arg(name, "dim", dim), x.ndim)
    return (d,), [None if n is None else _points(_int_arg(name, "n", n))]


def _many_dims(name, x, s, dim):
    """(dims, sizes) of an n-d transform by PyTorch's rules, a size None where
    s leaves the input's length (no s, or -1): dims are ``dim``, else the last
    len(s) dims, else all of them."""
    if isinstance(s, numbers.Integral):
        s = (s,)
    if isinstance(dim, numbers.Integral):
        dim = (dim,)
    if dim is not None:
        dims = tuple(_wrap(_int_arg(name, "dim", d), x.ndim) for d in dim)
        if len(set(dims)) != len(dims):
            raise RuntimeError("FFT dims must be unique")
        if s is not None and len(s) != len(dims):
            raise RuntimeError("When given, dim and shape arguments must have the same length")
    elif s is not None:
        if len(s) > x.ndim:
            raise RuntimeError(f"Got shape with {len(s)} values but input tensor only has {x.ndim} dimensions.")
        dims = tuple(range(x.ndim - len(s), x.ndim))
    else:
        dims = tuple(range(x.ndim))
    if s is None:
        return dims, [None] * len(dims)
    sizes = [_int_arg(name, "s", n) for n in s]
    return dims, [None if n == -1 else _points(n) for n in sizes]


def _dims_sizes(name, x, s, dim, one):
    return _one_dim(name, x, s, dim) if one else _many_dims(name, x, s, dim)


def _resized(x, dims, sizes):
    """x cut short or padded with zeros at the end to ``sizes`` along ``dims`` (recorded ops)."""
    for d, n in zip(dims, sizes):
        m = x.shape[d]
        if n < m:
            x = x.narrow(d, 0, n)
        elif n > m:
            shape = list(x.shape)
            shape[d] = n - m
            x = _ag.cat([x, zeros(shape, dtype=x.dtype, device=x.device)], d)
    return x


def _out_for(name, out, input, shape, dtype):
    """out checked against a result of ``shape`` and ``dtype``: itself where
    the transform can write straight into it, else None (also without out)."""
    if out is None:
        return None
    if not isinstance(out, Tensor):
        raise TypeError(f"{name}(): argument 'out' must be Tensor, not {type(out).__name__}")
    if dtype.is_complex and not out.dtype.is_complex:
        raise RuntimeError(f"{name} expects a complex output tensor, but got {_TORCH_NAMES[out.dtype]}")
    if not dtype.is_complex and not out.dtype.is_floating_point:
        raise RuntimeError(f"{name} expects a floating point output tensor, but got {_TORCH_NAMES[out.dtype]}")
    if _ag.is_grad_enabled() and (input.requires_grad or out.requires_grad):
        raise RuntimeError(f"{name}(): functions with out=... arguments don't support automatic differentiation, but "
                           "one of the arguments requires grad.")
    if tuple(out.shape) != tuple(shape):
        raise RuntimeError(f"{name}: out has shape {tuple(out.shape)} but the result has shape {tuple(shape)} (ddpc "
                           "does not resize out= tensors)")
    if out._buf.device != input._buf.device:
        raise RuntimeError(f"{name}: out is on {out.device} but the input is on {input.device}")
    direct = out.dtype is dtype and not out.is_cuda and out._not_a_view is None
    if direct:
        out._buf.bump_version()
    return out if direct else None


def _deliver(out, result):
    """result, or out holding it."""
    if out is None or result is out:
        return result
    with _ag.no_grad():
        out.copy_(result)
    return out


# ---- the transforms ---------------------------------------------------------------------------

def _empty(shape, dtype, like):
    return Tensor(_C.Buffer(tuple(shape), dtype.name, like._buf.device))


def _numpy(fn, out, x, dims, norm, **kw):
    """out = fn(x) on the host, numpy writing into out's memory."""
    if _NUMPY_OUT:
        fn(x.numpy(), axes=dims, norm=norm, out=out.numpy(), **kw)
    else:
        out.numpy()[...] = fn(x.numpy(), axes=dims, norm=norm, **kw)


def _permuted(x, order):
    """x with its dims in ``order`` (unrecorded; a complex x through its (real, imaginary) pairs)."""
    if not x.dtype.is_complex:
        return x.permute(order).contiguous()
    pairs = _complex.view_as_real(x).permute(list(order) + [x.ndim]).contiguous()
    return _complex.view_as_complex(pairs)


def _device_pass(kind, x, dims, inverse, scaling, last_size=None):
    """One cuFFT call over up to three dims: they are moved to the end and back."""
    order = [d for d in range(x.ndim) if d not in dims] + list(dims)
    moved = x if order == list(range(x.ndim)) else _permuted(x, order)
    shape = list(moved.shape)
    if kind == _R2C:
        shape[-1] = shape[-1] // 2 + 1
        dtype = complex_of(x.dtype)
    elif kind == _C2R:
        shape[-1] = last_size
        dtype = real_of(x.dtype)
    else:
        dtype = x.dtype
    signal = shape if kind == _C2R else moved.shape
    out = _empty(shape, dtype, x)
    _C.fft(kind, out._buf, moved._buf, len(dims), inverse, _factor(scaling, math.prod(signal[-len(dims):])))
    return out if moved is x else _permuted(out, [order.index(d) for d in range(x.ndim)])


def _groups(dims):
    """dims in runs of at most three, the run with the last dim first."""
    return [dims[max(0, i - 3):i] for i in range(len(dims), 0, -3)]


def _on_device(kind, x, dims, inverse, scaling, last_size=None):
    """The transform on a GPU, in passes of cuFFT over at most three dims
    each: an r2c's first pass halves the last dim; a c2r is the inverse c2c
    over the other dims, then the c2r of the last (see csrc/ops_fft.h)."""
    with _ag.no_grad():
        if kind == _C2R:
            for g in _groups(dims[:-1]):
                x = _device_pass(_C2C, x, g, True, scaling)
            return _device_pass(_C2R, x, dims[-1:], True, scaling, last_size)
        groups = _groups(dims)
        if kind == _R2C:
            x = _device_pass(_R2C, x, groups[0], False, scaling)
            groups = groups[1:]
        elif not x.dtype.is_complex:
            x = x.to(dtype=complex_of(x.dtype))
        for g in groups:
            x = _device_pass(_C2C, x, g, inverse, scaling)
        return x


def _c2c(x, dims, forward, scaling, dest=None):
    """scaling times the DFT of x over dims, of the forward sign or the inverse;
    complex (a real x is taken as complex)."""
    dtype = x.dtype if x.dtype.is_complex else complex_of(x.dtype)
    if x.is_cuda:
        out = _on_device(_C2C, x, dims, not forward, scaling) if x.numel() else _empty(x.shape, dtype, x)
    else:
        out = dest if dest is not None else _empty(x.shape, dtype, x)
        if x.numel():
            _numpy(np.fft.fftn if forward else np.fft.ifftn, out, x, dims, _numpy_norm(scaling, forward))
    if _ag._needs_grad(x):
        _ag._attach(out, _FftC2CBackward(x, dims, forward, scaling))
    return out


def _r2c(x, dims, scaling, dest=None):
    """scaling times the one-sided DFT (forward sign) of the real x over dims,
    the last of which keeps n // 2 + 1 of its n frequencies."""
    shape = list(x.shape)
    shape[dims[-1]] = shape[dims[-1]] // 2 + 1
    if x.is_cuda:
        out = _on_device(_R2C, x, dims, False, scaling) if x.numel() else _empty(shape, complex_of(x.dtype), x)
    else:
        out = dest if dest is not None else _empty(shape, complex_of(x.dtype), x)
        if x.numel():
            _numpy(np.fft.rfftn, out, x, dims, _numpy_norm(scaling, True))
    if _ag._needs_grad(x):
        _ag._attach(out, _FftR2CBackward(x, dims, scaling))
    return out


def _c2r(x, dims, last_size, scaling, dest=None):
    """scaling times the real signal (inverse sign) of ``last_size`` points in
    dims[-1] whose one-sided spectrum over dims is the complex x."""
    shape = list(x.shape)
    shape[dims[-1]] = last_size
    if x.is_cuda:
        out = _on_device(_C2R, x, dims, True, scaling, last_size) if x.numel() else _empty(shape, real_of(x.dtype), x)
    else:
        out = dest if dest is not None else _empty(shape, real_of(x.dtype), x)
        if x.numel():
            _numpy(np.fft.irfftn, out, x, dims, _numpy_norm(scaling, False), s=[shape[d] for d in dims])
    if _ag._needs_grad(x):
        _ag._attach(out, _FftC2RBackward(x, dims, scaling))
    return out


def _real_part(z):
    return _complex.real(z).contiguous()  # a tensor of its own, not marked as a copy of z's memory


class _FftC2CBackward(Node):
    double_backward = True

    def __init__(self, x, dims, forward, scaling):
        super().__init__((x,))
        self.dims, self.forward, self.scaling = dims, forward, scaling
        self.real_input = not x.dtype.is_complex

    def backward(self, g):
        gx = _c2c(g, self.dims, not self.forward, self.scaling)
        return (_real_part(gx) if self.real_input else gx,)


class _FftR2CBackward(Node):
    """The one-sided spectrum's gradient, zeros for the frequencies it left
    out, through the c2c of the inverse sign; the real part for the real input."""
    double_backward = True

    def __init__(self, x, dims, scaling):
        super().__init__((x,))
        self.dims, self.scaling, self.n = dims, scaling, x.shape[dims[-1]]

    def backward(self, g):
        full = _resized(g, self.dims[-1:], [self.n])
        return (_real_part(_c2c(full, self.dims, False, self.scaling)),)


class _FftC2RBackward(Node):
    """The gradient's one-sided spectrum, the frequencies 1 to n - (n // 2 + 1)
    doubled: each stands for itself and its conjugate in the real signal
    (the zero frequency, and the n / 2 of an even n, for themselves only)."""
    double_backward = True

    def __init__(self, x, dims, scaling):
        super().__init__((x,))
        self.dims, self.scaling, self.half = dims, scaling, x.shape[dims[-1]]

    def backward(self, g):
        d = self.dims[-1]
        gx = _r2c(g, self.dims, self.scaling)
        doubled = g.shape[d] - self.half
        if doubled > 0:
            w = np.ones((self.half,) + (1,) * (g.ndim - 1 - d))
            w[1:1 + doubled] = 2
            gx = _ag.mul(gx, tensor(w, dtype=real_of(gx.dtype), device=gx.device))
        return (gx,)


# ---- the public functions ------------------------------------------------------------------------

def _complex_transform(name, input, s, dim, norm, forward, out, one=False):
    x = _input(name, input)
    dims, sizes = _dims_sizes(name, x, s, dim, one)
    sizes = [x.shape[d] if n is None else n for d, n in zip(dims, sizes)]
    for n in sizes:
        _points(n)
    scaling = _scaling(norm, forward)
    x = _resized(x, dims, sizes)
    dest = _out_for(name, out, input, x.shape, x.dtype if x.dtype.is_complex else complex_of(x.dtype))
    if not dims:  # a 0-d input, or dim=(): the input as complex
        return _deliver(out, _ag.clone(x) if x.dtype.is_complex else x.to(dtype=complex_of(x.dtype)))
    return _deliver(out, _c2c(x, dims, forward, scaling, dest))


def _half_spectrum(name, input, s, dim, norm, forward, out, one, real_only):
    """rfft (forward) and ihfft (not forward, the conjugate of the same transform)."""
    x = _input(name, input, real_only)
    dims, sizes = _dims_sizes(name, x, s, dim, one)
    if not dims:
        raise RuntimeError(f"{name} must transform at least one axis")
    sizes = [_points(x.shape[d] if n is None else n) for d, n in zip(dims, sizes)]
    scaling = _scaling(norm, forward)
    x = _resized(x, dims, sizes)
    shape = list(x.shape)
    shape[dims[-1]] = shape[dims[-1]] // 2 + 1
    dest = _out_for(name, out, input, shape, complex_of(x.dtype))
    if not forward:
        return _deliver(out, _complex.conj(_r2c(x, dims, scaling)))
    return _deliver(out, _r2c(x, dims, scaling, dest))


def _real_signal(name, input, s, dim, norm, forward, out, one):
    """irfft (not forward) and hfft (forward, of the conjugate): the input is
    the one-sided spectrum, its last dim n // 2 + 1 long for the n points out
    (by default n = 2 (m - 1) for m given)."""
    x = _input(name, input)
    dims, sizes = _dims_sizes(name, x, s, dim, one)
    if not dims:
        raise RuntimeError(f"{name} must transform at least one axis")
    last = sizes[-1] if sizes[-1] is not None else _points(2 * (x.shape[dims[-1]] - 1))
    sizes = [_points(x.shape[d] if n is None else n) for d, n in zip(dims[:-1], sizes[:-1])]
    scaling = _scaling(norm, forward)
    x = _resized(x, dims, sizes + [last // 2 + 1])
    if not x.dtype.is_complex:
        x = x.to(dtype=complex_of(x.dtype))
    elif forward:
        x = _complex.conj(x)
    shape = list(x.shape)
    shape[dims[-1]] = last
    return _deliver(out, _c2r(x, dims, last, scaling, _out_for(name, out, input, shape, real_of(x.dtype))))


@autocast_op("float32_cpu")
def fft(input, n=None, dim=-1, norm=None, *, out=None):
    """The discrete Fourier transform of input along ``dim`` (of n points:
    input padded with zeros or cut short to n)."""
    return _complex_transform("fft", input, n, dim, norm, True, out, one=True)


@autocast_op("float32_cpu")
def ifft(input, n=None, dim=-1, norm=None, *, out=None):
    """The inverse discrete Fourier transform along ``dim``."""
    return _complex_transform("ifft", input, n, dim, norm, False, out, one=True)


@autocast_op("float32_cpu")
def fft2(input, s=None, dim=(-2, -1), norm=None, *, out=None):
    """The 2-d discrete Fourier transform (fftn over two dims)."""
    return _complex_transform("fft2", input, s, dim, norm, True, out)


@autocast_op("float32_cpu")
def ifft2(input, s=None, dim=(-2, -1), norm=None, *, out=None):
    """The inverse 2-d transform (ifftn over two dims)."""
    return _complex_transform("ifft2", input, s, dim, norm, False, out)


@autocast_op("float32_cpu")
def fftn(input, s=None, dim=None, norm=None, *, out=None):
    """The n-d discrete Fourier transform over ``dim`` (the last len(s) dims
    when only s is given, every dim when neither is)."""
    return _complex_transform("fftn", input, s, dim, norm, True, out)


@autocast_op("float32_cpu")
def ifftn(input, s=None, dim=None, norm=None, *, out=None):
    """The inverse n-d transform, over the dims fftn takes."""
    return _complex_transform("ifftn", input, s, dim, norm, False, out)


@autocast_op("float32_cpu")
def rfft(input, n=None, dim=-1, norm=None, *, out=None):
    """The one-sided Fourier transform of a real input: frequencies 0 to n // 2."""
    return _half_spectrum("rfft", input, n, dim, norm, True, out, True, "rfft expects a real input tensor, but got {}")


@autocast_op("float32_cpu")
def rfft2(input, s=None, dim=(-2, -1), norm=None, *, out=None):
    """rfftn over two dims."""
    return _half_spectrum("rfftn", input, s, dim, norm, True, out, False, _RFFTN_REAL)


@autocast_op("float32_cpu")
def rfftn(input, s=None, dim=None, norm=None, *, out=None):
    """The one-sided n-d transform of a real input: the last of ``dim`` keeps frequencies 0 to n // 2."""
    return _half_spectrum("rfftn", input, s, dim, norm, True, out, False, _RFFTN_REAL)


@autocast_op("float32_cpu")
def ihfft(input, n=None, dim=-1, norm=None, *, out=None):
    """The inverse of hfft: the one-sided inverse transform of a real input."""
    return _half_spectrum("ihfft", input, n, dim, norm, False, out, True,
                          "ihfft expects a real input tensor, but got {}")


def ihfft2(input, s=None, dim=(-2, -1), norm=None, *, out=None):
    """ihfftn over two dims."""
    return _half_spectrum("ihfftn", input, s, dim, norm, False, out, False, _IHFFTN_REAL)


def ihfftn(input, s=None, dim=None, norm=None, *, out=None):
    """The inverse of hfftn: the conjugate of rfftn, scaled as an inverse transform."""
    return _half_spectrum("ihfftn", input, s, dim, norm, False, out, False, _IHFFTN_REAL)


@autocast_op("float32_cpu")
def irfft(input, n=None, dim=-1, norm=None, *, out=None):
    """The inverse of rfft: the real signal of n points (2 (m - 1) by default)
    whose one-sided spectrum input is."""
    return _real_signal("irfft", input, n, dim, norm, False, out, True)


@autocast_op("float32_cpu")
def irfft2(input, s=None, dim=(-2, -1), norm=None, *, out=None):
    """irfftn over two dims."""
    return _real_signal("irfftn", input, s, dim, norm, False, out, False)


@autocast_op("float32_cpu")
def irfftn(input, s=None, dim=None, norm=None, *, out=None):
    """The inverse of rfftn: a real signal, the last of ``dim`` n points long (2 (m - 1) by default)."""
    return _real_signal("irfftn", input, s, dim, norm, False, out, False)


@autocast_op("float32_cpu")
def hfft(input, n=None, dim=-1, norm=None, *, out=None):
    """The transform of a Hermitian-symmetric signal given by its first half:
    real, n points (2 (m - 1) by default)."""
    return _real_signal("hfft", input, n, dim, norm, True, out, True)


def hfft2(input, s=None, dim=(-2, -1), norm=None, *, out=None):
    """hfftn over two dims."""
    return _real_signal("hfftn", input, s, dim, norm, True, out, False)


def hfftn(input, s=None, dim=None, norm=None, *, out=None):
    """The n-d hfft: irfftn of the conjugate, scaled as a forward transform (real, the last of ``dim``
    n points long, 2 (m - 1) by default)."""
    return _real_signal("hfftn", input, s, dim, norm, True, out, False)


# ---- frequencies and shifts ------------------------------------------------------------------------

def _frequencies(name, values, n, d, out, dtype, layout, device, requires_grad):
    """values / (n d) as a tensor of ``dtype`` (the default float dtype): the
    product taken in that dtype (float32 for the 16-bit ones) with 1 / (n d)
    rounded to it, as PyTorch's."""
    if layout is not None and layout is not strided:
        raise ArgumentError(f"{name}: ddpc tensors are strided, got layout={layout}")
    dt = get_dtype(dtype) if dtype is not None else (out.dtype if out is not None else get_default_dtype())
    if not (dt.is_floating_point or dt.is_complex):
        raise RuntimeError(f"{name} requires a floating point or complex dtype")
    compute = float32 if dt in (float16, bfloat16) else dt
    step = 1.0 / (n * d) if n * d else math.copysign(math.inf, d) if n else 0.0
    with np.errstate(invalid="ignore"):  # d = 0: 0 * inf is NaN, as in PyTorch
        arr = values.astype(numpy_dtype(compute)) * np.asarray(step, dtype=numpy_dtype(compute))
    result = from_numpy(arr)
    if compute is not dt:
        result = result.to(dtype=dt)
    if device is not None and ordinal(device) != -1:
        result = result.to(device=device)
    if out is not None:
        return _deliver(out, result)
    return result.requires_grad_() if requires_grad else result


def fftfreq(n, d=1.0, *, out=None, dtype=None, layout=strided, device=None, requires_grad=False):
    """The frequencies of fft's n outputs for samples ``d`` apart: [0, 1, ...,
    (n - 1) // 2, -(n // 2), ..., -1] / (d n). Complex dtypes are taken too
    (the frequencies as their real parts), as PyTorch documents them."""
    n = _int_arg("fftfreq", "n", n)
    if n < 0:
        raise RuntimeError(f"Trying to create tensor with negative dimension {n}: [{n}]")
    k = np.arange(n)
    k[(n + 1) // 2:] -= n
    return _frequencies("fftfreq", k, n, d, out, dtype, layout, device, requires_grad)


def rfftfreq(n, d=1.0, *, out=None, dtype=None, layout=strided, device=None, requires_grad=False):
    """The frequencies of rfft's n // 2 + 1 outputs for n samples ``d`` apart: [0, 1, ..., n // 2] / (d n)."""
    n = _int_arg("rfftfreq", "n", n)
    if n < 0:
        raise RuntimeError(f"Trying to create tensor with negative dimension {n}: [{n}]")
    return _frequencies("rfftfreq", np.arange(n // 2 + 1), n, d, out, dtype, layout, device, requires_grad)


def _shift(input, dim, back):
    if not isinstance(input, Tensor):
        raise TypeError(f"argument 'input' must be Tensor, not {type(input).__name__}")
    if dim is None:
        dims = tuple(range(input.ndim))
    else:
        dims = tuple(_wrap(int(d), input.ndim) for d in ((dim,) if isinstance(dim, numbers.Integral) else dim))
    if not dims:
        return _ag.clone(input)
    return _ag.roll(input, [(input.shape[d] + 1) // 2 if back else input.shape[d] // 2 for d in dims], dims)


def fftshift(input, dim=None):
    """input with the zero frequency moved to the middle along ``dim`` (every dim when None)."""
    return _shift(input, dim, False)


def ifftshift(input, dim=None):
    """fftshift's inverse."""
    return _shift(input, dim, True)

"""Resampling of the last one to three dims, as
torch.nn.functional.interpolate and nn.Upsample in modes 'nearest',
'nearest-exact' and 'area' (the adaptive average pool) of 3-d to 5-d input,
'linear' (3-d), 'bilinear' and 'bicubic' (4-d) and 'trilinear' (5-d), with
their gradients.

Each dim is resampled in turn. Nearest modes gather one input element per
output element: min(floor(i * scale), n - 1), or with 'nearest-exact'
min(floor((i + 0.5) * scale), n - 1), where scale is 1 / scale_factor when
one is given, else in / out, computed in float32 as PyTorch does so that the
same elements are picked; on 4-d input, as PyTorch's kernel for it, 'nearest'
reads element i of a dim whose size is kept and i // 2 of one whose size
doubles, whatever the scale factor. Linear modes gather the two neighbours of
source position i * (n - 1) / (out - 1) (align_corners) or max((i + 0.5) * scale -
0.5, 0) and weigh them by their distances, in the input's precision (float32
below float64) as PyTorch does. The bicubic mode gathers the four
neighbours floor(x) - 1 .. floor(x) + 2 of source position x (clamped into
the input) and weighs them by Keys' cubic convolution with A = -0.75, as
PyTorch does, x being i * (n - 1) / (out - 1) (align_corners) or
(i + 0.5) * scale - 0.5, not clamped. The work is index_select,
multiplications and additions, whose gradients add up where an input
element is read more than once.
"""

import math
import numbers

import numpy as np

from .. import autograd as _ag
from .._C import ArgumentError, DtypeError
from .._dtype import float64
from ..tensor import Tensor, tensor
from . import _conv

_NEAREST_MODES = ("nearest", "nearest-exact")
_LINEAR_MODES = {"linear": 3, "bilinear": 4, "bicubic": 4, "trilinear": 5}
# Keys' cubic convolution parameter, PyTorch's
_CUBIC_A = -0.75


def _per_dim(value, nd, name):
    """``value`` (a number or a sequence of nd numbers) as a tuple of nd."""
    if isinstance(value, numbers.Number):
        return (value,) * nd
    t = tuple(value)
    if len(t) != nd:
        raise ArgumentError("interpolate: input and output must have the same number of spatial dimensions, but got "
                            f"input with {nd} spatial dimensions and {name} {value!r}")
    return t


def _nearest_index(n, out, scale, exact, shortcut=False):
    """The input element each of ``out`` output elements reads along a dim of
    size n; with ``shortcut``, element i when out == n and i // 2 when out == 2 * n."""
    if shortcut and not exact and out in (n, 2 * n):
        return np.arange(out) // (out // n)
    step = np.float32(1.0 / scale) if scale else np.float32(n) / np.float32(out)
    if exact:  # PyTorch forms (i + 0.5) * scale in double and floors it in float
        pos = ((np.arange(out) + 0.5) * np.float64(step)).astype(np.float32)
    else:
        pos = np.arange(out, dtype=np.float32) * step
    return np.minimum(np.floor(pos).astype(np.int64), n - 1)


def _linear_weights(n, out, scale, align_corners, real):
    """The two input elements each of ``out`` output elements reads along a
    dim of size n and their weights, in numpy type ``real``."""
    i = np.arange(out).astype(real)
    if align_corners:
        ratio = real(n - 1) / real(out - 1) if out > 1 else real(0)
        src = ratio * i
    else:
        ratio = real(1.0 / scale) if scale else real(n) / real(out)
        src = np.maximum(ratio * (i + real(0.5)) - real(0.5), real(0))
    lo = np.minimum(np.floor(src).astype(np.int64), n - 1)
    frac = np.clip(src - lo.astype(real), real(0), real(1))
    return lo, lo + (lo < n - 1), real(1) - frac, frac


def _cubic_weights(n, out, scale, align_corners, real):
    """The four input elements each of ``out`` output elements reads along a
    dim of size n (clamped into it) and their weights, in numpy type ``real``."""
    i = np.arange(out).astype(real)
    if align_corners:
        src = (real(n - 1) / real(out - 1) if out > 1 else real(0)) * i
    else:
        src = (real(1.0 / scale) if scale else real(n) / real(out)) * (i + real(0.5)) - real(0.5)
    base = np.floor(src)
    t, a = src - base, real(_CUBIC_A)

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    taps = [np.clip(base.astype(np.int64) + k, 0, n - 1) for k in (-1, 0, 1, 2)]
    return taps, [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _resample_dim(input, dim, n, out, scale, mode, align_corners):
    """input resampled from n to out elements along ``dim``."""
    def take(index):
        return input.index_select(dim, tensor(index, device=input.device))

    if mode in _NEAREST_MODES:
        # PyTorch's 'nearest' kernel for 4-d input (forward and backward) copies a dim whose size is kept and halves
        # the index of one whose size doubles; its 3-d and 5-d forwards do not (their backwards do, so that their
        # gradients are not those of their results: ddpc's are).
        return take(_nearest_index(n, out, scale, mode == "nearest-exact", shortcut=input.ndim == 4))
    real = np.float64 if input.dtype is float64 else np.float32
    if mode == "bicubic":
        taps, weights = _cubic_weights(n, out, scale, align_corners, real)
    else:
        lo, hi, w_lo, w_hi = _linear_weights(n, out, scale, align_corners, real)
        taps, weights = (lo, hi), (w_lo, w_hi)
    shape = (out,) + (1,) * (input.ndim - 1 - dim)
    terms = [take(index) * tensor(w.reshape(shape), dtype=input.dtype, device=input.device)
             for index, w in zip(taps, weights)]
    result = terms[0]
    for term in terms[1:]:
        result = result + term
    return result


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """Resamples (N, C, L) or (N, C, H, W) ``input`` to ``size`` or by ``scale_factor``."""
    if not isinstance(input, Tensor):
        raise TypeError(f"interpolate: the input must be a ddpc tensor, got {type(input).__name__}")
    if mode in _NEAREST_MODES or mode == "area":
        if align_corners is not None:
            raise ArgumentError("align_corners option can only be set with the interpolating modes: linear | bilinear "
                                "| bicubic | trilinear")
    elif mode in _LINEAR_MODES:
        align_corners = bool(align_corners)
        if input.ndim != _LINEAR_MODES[mode]:
            raise NotImplementedError(f"Got {input.ndim}D input, but {mode} mode needs {_LINEAR_MODES[mode]}D input")
        if not input.dtype.is_floating_point:
            raise DtypeError(f"interpolate: mode {mode!r} needs a floating-point input, got {input.dtype}")
    else:
        raise NotImplementedError(f"interpolate: ddpc implements modes 'nearest', 'nearest-exact', 'linear', "
                                  f"'bilinear', 'bicubic', 'trilinear' and 'area', got mode={mode!r}")
    if antialias:
        raise NotImplementedError("interpolate: ddpc does not implement antialias")
    if input.ndim not in (3, 4, 5):
        raise NotImplementedError(f"interpolate: input must be 3-d (N, C, L), 4-d (N, C, H, W) or 5-d "
                                  f"(N, C, D, H, W), got shape {tuple(input.shape)}")
    if (size is None) == (scale_factor is None):
        raise ArgumentError("only one of size or scale_factor should be defined" if size is not None else
                            "either size or scale_factor should be defined")
    nd, sizes = input.ndim - 2, tuple(input.shape[2:])
    if size is not None:
        if recompute_scale_factor:
            raise ArgumentError("recompute_scale_factor is not meaningful with an explicit size.")
        out, scales = _per_dim(size, nd, "output size"), (None,) * nd
        if not all(isinstance(o, numbers.Integral) and o > 0 for o in out):
            raise ArgumentError(f"interpolate: the output size must be positive ints, got {size!r}")
    else:
        scales = tuple(float(s) for s in _per_dim(scale_factor, nd, "scale_factor"))
        if any(not s > 0 for s in scales):
            raise ArgumentError(f"interpolate: scale_factor must be positive, got {scale_factor!r}")
        out = tuple(math.floor(n * s) for n, s in zip(sizes, scales))
        if any(o <= 0 for o in out):
            raise ArgumentError(f"interpolate: scale_factor {scale_factor!r} makes an empty output from input size "
                                f"{sizes}")
        if recompute_scale_factor:
            scales = (None,) * nd
    if mode == "area":
        return _conv.adaptive_avg_pool(f"adaptive_avg_pool{nd}d", nd, input, out)
    if mode == "bicubic":  # PyTorch copies the input when no size changes, else resamples every dim by its scale
        return _ag.clone(input) if out == sizes else _resample_dims(input, sizes, out, scales, mode, align_corners,
                                                                    every=True)
    return _ag._own(_resample_dims(input, sizes, out, scales, mode, align_corners, every=False), input)  # a copy


def _resample_dims(input, sizes, out, scales, mode, align_corners, every):
    """Each dim resampled in turn; with ``every`` false, only those whose
    size changes or (nearest modes) that have a scale factor."""
    for i, (n, o, s) in enumerate(zip(sizes, out, scales)):
        # A dim whose size is kept is a copy in PyTorch's linear modes whatever the scale, while its nearest modes
        # (but 'nearest' on 4-d input) still read element min(floor(i * float(1 / scale_factor)), n - 1), and with no
        # scale_factor element i.
        if every or o != n or (mode in _NEAREST_MODES and s is not None):
            input = _resample_dim(input, 2 + i, n, int(o), s, mode, align_corners)
    return input

"""Nearest-neighbour resampling of the last one or two dims, as
torch.nn.functional.interpolate(mode='nearest') and nn.Upsample, with its
gradient.

Output element i of a dim reads input element min(floor(i * scale), n - 1),
scale being 1 / scale_factor when one is given, else in / out: PyTorch's rule,
computed in float32 as PyTorch does, so that the same elements are picked. The
work is one gather (index_select) per dim; its gradient adds up where an
input element is read more than once.
"""

import math
import numbers

import numpy as np

from ..tensor import Tensor, tensor


def _per_dim(value, nd, name):
    """``value`` (a number or a sequence of nd numbers) as a tuple of nd."""
    if isinstance(value, numbers.Number):
        return (value,) * nd
    t = tuple(value)
    if len(t) != nd:
        raise ValueError(f"interpolate: input and output must have the same number of spatial dimensions, but got "
                         f"input with {nd} spatial dimensions and {name} {value!r}")
    return t


def _source_index(n, out, scale):
    """The input element each of ``out`` output elements reads along a dim of size n."""
    step = np.float32(1.0 / scale) if scale else np.float32(n) / np.float32(out)
    idx = np.floor(np.arange(out, dtype=np.float32) * step).astype(np.int64)
    return np.minimum(idx, n - 1)


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """Resamples (N, C, L) or (N, C, H, W) ``input`` to ``size`` or by ``scale_factor``."""
    if not isinstance(input, Tensor):
        raise TypeError(f"interpolate: the input must be a ddpc tensor, got {type(input).__name__}")
    if mode != "nearest" or antialias:
        raise NotImplementedError(f"interpolate: ddpc implements mode='nearest' without antialias only, got "
                                  f"mode={mode!r}, antialias={antialias}")
    if align_corners is not None:
        raise ValueError("align_corners option can only be set with the interpolating modes: linear | bilinear | "
                         "bicubic | trilinear")
    if input.ndim not in (3, 4):
        raise NotImplementedError(f"interpolate: input must be 3-d (N, C, L) or 4-d (N, C, H, W), got shape "
                                  f"{tuple(input.shape)}")
    if (size is None) == (scale_factor is None):
        raise ValueError("only one of size or scale_factor should be defined" if size is not None else
                         "either size or scale_factor should be defined")
    nd, sizes = input.ndim - 2, tuple(input.shape[2:])
    if size is not None:
        if recompute_scale_factor:
            raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
        out, scales = _per_dim(size, nd, "output size"), (None,) * nd
        if not all(isinstance(o, numbers.Integral) and o > 0 for o in out):
            raise ValueError(f"interpolate: the output size must be positive ints, got {size!r}")
    else:
        scales = tuple(float(s) for s in _per_dim(scale_factor, nd, "scale_factor"))
        if any(not s > 0 for s in scales):
            raise ValueError(f"interpolate: scale_factor must be positive, got {scale_factor!r}")
        out = tuple(math.floor(n * s) for n, s in zip(sizes, scales))
        if any(o <= 0 for o in out):
            raise ValueError(f"interpolate: scale_factor {scale_factor!r} makes an empty output from input size "
                             f"{sizes}")
        if recompute_scale_factor:
            scales = (None,) * nd
    for i, (n, o, s) in enumerate(zip(sizes, out, scales)):
        if o != n:
            idx = _source_index(n, int(o), s)
            input = input.index_select(2 + i, tensor(idx, device=input.device))
    return input

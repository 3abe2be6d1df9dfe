"""Fractional max pooling, as torch.nn.functional.fractional_max_pool2d and
fractional_max_pool3d (Graham's pseudo-random pooling regions).

Along each dim, output i of a volume takes the kernel-sized window starting
at trunc((i + u) * alpha) - trunc(u * alpha), alpha = (in - kernel) /
(out - 1), and the last window ends at the input's end; u is the volume's
random sample for that dim, in [0, 1). The starts are computed as PyTorch
computes them, in the sample's dtype, by elementwise ops on the device. The
windows' elements are then gathered into one tensor, [P, *out, taps], and
the largest of each is taken with its position: gather's and max's
backward passes give the input gradient. PyTorch's sample order is kept:
(W, H) for 2-d, (D, H, W) for 3-d.
"""

import math
import numbers

import numpy as np

from .. import autograd as _ag
from ..tensor import Tensor, arange, int64, rand, tensor
from . import _conv

_SAMPLE_ORDER = {2: (1, 0), 3: (0, 1, 2)}  # which spatial dim each of a volume's samples drives


def _starts(samples, size, out, kernel):
    """[P, out] window starts along one dim from the volumes' samples [P]."""
    if out == 1:
        return tensor([[size - kernel]], dtype=int64, device=samples.device).expand(samples.shape[0], 1)
    alpha = float(np.float32(size - kernel) / np.float32(out - 1)) if samples.dtype.name == "float32" \
        else (size - kernel) / (out - 1)
    u = samples.reshape(-1, 1)
    steps = arange(out - 1, dtype=samples.dtype, device=samples.device).reshape(1, -1)
    starts = ((steps + u) * alpha).to(dtype=int64) - (u * alpha).to(dtype=int64)
    last = tensor([[size - kernel]], dtype=int64, device=samples.device).expand(samples.shape[0], 1)
    return _ag.cat([starts, last], 1)


def _sizes(name, nd, input, kernel_size, output_size, output_ratio):
    kernel = _conv.as_tuple(kernel_size, nd, "kernel_size")
    if output_size is None and output_ratio is None:
        raise ValueError(f"{name} requires specifying either an output_size or an output_ratio")
    if output_size is None:
        ratio = (output_ratio,) * nd if isinstance(output_ratio, numbers.Real) else tuple(output_ratio)
        if len(ratio) != nd or not all(0 < r < 1 for r in ratio):
            raise ValueError(f"{name}: output_ratio must be {nd} numbers between 0 and 1, got {output_ratio!r}")
        out = tuple(int(n * r) for n, r in zip(input.shape[-nd:], ratio))
    else:
        out = _conv.as_tuple(output_size, nd, "output_size")
    for n, k, o in zip(input.shape[-nd:], kernel, out):
        if k < 1 or o < 1 or o + k - 1 > n:
            raise ValueError(f"{name}: an output size of {o} with a kernel of {k} does not fit an input of {n}")
    return kernel, out


def fractional_max_pool(name, nd, input, kernel_size, output_size, output_ratio, return_indices, _random_samples):
    """fractional_max_pool2d (nd = 2) or 3d of a batched or unbatched input."""
    _conv._check_planes(name, nd, input)
    kernel, out = _sizes(name, nd, input, kernel_size, output_size, output_ratio)
    x = input if input.ndim == nd + 2 else input.unsqueeze(0)
    if x.dtype in _ag._HALVES:
        values, indices = fractional_max_pool(name, nd, x.float(), kernel, out, None, True,
                                              None if _random_samples is None else _random_samples.float())
        values = values.to(dtype=input.dtype)
    else:
        n, c, spatial = x.shape[0], x.shape[1], tuple(x.shape[2:])
        samples = _random_samples
        if samples is None:
            samples = rand(n, c, nd, dtype=x.dtype, device=x.device)
        if not isinstance(samples, Tensor) or tuple(samples.shape) != (n, c, nd):
            raise ValueError(f"{name}: _random_samples must be a tensor of shape ({n}, {c}, {nd}), got "
                             f"{getattr(samples, 'shape', samples)}")
        samples = samples.detach().to(dtype=x.dtype).reshape(n * c, nd)
        # the flat position in a volume of each tap of each window: [P, *out, *kernel]
        position = None
        for d in range(nd):
            starts = _starts(samples[:, _SAMPLE_ORDER[nd].index(d)], spatial[d], out[d], kernel[d])
            taps = starts.reshape((n * c,) + (1,) * d + (out[d],) + (1,) * (2 * nd - d - 1)) + \
                arange(kernel[d], device=x.device).reshape((1,) * (nd + 1 + d) + (kernel[d],) + (1,) * (nd - d - 1))
            stride = math.prod(spatial[d + 1:])
            position = taps * stride if position is None else position + taps * stride
        position = position.reshape(n * c, math.prod(out) * math.prod(kernel))
        windows = _ag.gather(x.reshape(n * c, -1), 1, position).reshape(n * c, math.prod(out), math.prod(kernel))
        values, tap = windows.max(2)
        indices = _ag.gather(position.reshape(n * c, math.prod(out), -1), 2, tap.unsqueeze(2))
        values = values.reshape((n, c) + out)
        indices = indices.reshape((n, c) + out)
    if input.ndim == nd + 1:
        values, indices = values.squeeze(0), indices.squeeze(0)
    return (values, indices) if return_indices else values

"""Classic window functions for spectral analysis, as torch.hann_window,
hamming_window, blackman_window, bartlett_window and kaiser_window: 1-d tensors of
window_length samples, symmetric, or periodic (the first window_length of a
symmetric window one longer, for spectral analysis). The samples are
computed on the host in float64 (a closed form per sample, with numpy) and
cast to the dtype asked for.
"""

import numpy as np

from ._C import ArgumentError, DtypeError
from ._dtype import get_dtype
from .tensor import get_default_dtype, tensor


def _window(name, window_length, periodic, dtype, device, requires_grad, shape):
    """``shape(phase)`` over the samples, phase = n / (N - 1) in [0, 1] for
    the N samples of the symmetric window of which the result is a prefix."""
    dtype = get_default_dtype() if dtype is None else get_dtype(dtype)
    if not dtype.is_floating_point:
        raise DtypeError(f"{name} expects floating point dtypes, got: {dtype}")
    if window_length < 0:
        raise ArgumentError(f"{name} requires non-negative window_length, got window_length={window_length}")
    if window_length <= 1:
        values = np.ones(window_length)
    else:
        n = window_length + 1 if periodic else window_length
        values = shape(np.arange(window_length) / (n - 1))
    return tensor(values, dtype=dtype, device=device, requires_grad=requires_grad)


def hamming_window(window_length, periodic=True, alpha=0.54, beta=0.46, *, dtype=None, layout=None, device=None,
                   requires_grad=False):
    """alpha - beta * cos(2 pi n / (N - 1))."""
    return _window("hamming_window", window_length, periodic, dtype, device, requires_grad,
                   lambda phase: alpha - beta * np.cos(2 * np.pi * phase))


def hann_window(window_length, periodic=True, *, dtype=None, layout=None, device=None, requires_grad=False):
    """0.5 - 0.5 * cos(2 pi n / (N - 1))."""
    return _window("hann_window", window_length, periodic, dtype, device, requires_grad,
                   lambda phase: 0.5 - 0.5 * np.cos(2 * np.pi * phase))


def blackman_window(window_length, periodic=True, *, dtype=None, layout=None, device=None, requires_grad=False):
    """0.42 - 0.5 * cos(2 pi n / (N - 1)) + 0.08 * cos(4 pi n / (N - 1))."""
    return _window("blackman_window", window_length, periodic, dtype, device, requires_grad,
                   lambda phase: 0.42 - 0.5 * np.cos(2 * np.pi * phase) + 0.08 * np.cos(4 * np.pi * phase))


def bartlett_window(window_length, periodic=True, *, dtype=None, layout=None, device=None, requires_grad=False):
    """1 - |2 n / (N - 1) - 1|: a triangle."""
    return _window("bartlett_window", window_length, periodic, dtype, device, requires_grad,
                   lambda phase: 1 - np.abs(2 * phase - 1))


def kaiser_window(window_length, periodic=True, beta=12.0, *, dtype=None, layout=None, device=None,
                  requires_grad=False):
    """I0(beta sqrt(1 - (2 n / (N - 1) - 1) ** 2)) / I0(beta), I0 the modified Bessel function of order 0."""
    return _window("kaiser_window", window_length, periodic, dtype, device, requires_grad,
                   lambda phase: np.i0(beta * np.sqrt(np.clip(1 - (2 * phase - 1) ** 2, 0, None))) / np.i0(beta))


__all__ = ["bartlett_window", "blackman_window", "hamming_window", "hann_window", "kaiser_window"]

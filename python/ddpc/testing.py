"""ddpc.testing: ``assert_close`` and ``make_tensor``, as torch.testing's, so
tests written against PyTorch's port by changing the import.

``assert_close`` compares ddpc tensors, numpy arrays, Python numbers and
(nested) sequences and mappings of them. The default tolerances are
PyTorch's per dtype: 16-bit floats (1e-3, 1e-5) and bfloat16 (1.6e-2, 1e-5),
float32 and complex64 (1.3e-6, 1e-5), float64 and complex128 (1e-7, 1e-7),
and exact for integers and bool. Elements are close when ``|actual - expected| <= atol + rtol *
|expected|``; infinities must match exactly and NaN equals NaN only with
``equal_nan``. The values are compared on the host.
"""

import collections.abc
import numbers

import numpy as np

from ._dtype import bfloat16, bool_, complex64, complex128, finfo, float16, float32, float64, uint8
from .tensor import Tensor, rand, randint

__all__ = ["assert_close", "make_tensor"]

_TOLERANCES = {float16: (1e-3, 1e-5), bfloat16: (1.6e-2, 1e-5), float32: (1.3e-6, 1e-5), float64: (1e-7, 1e-7)}
_TOLERANCES.update({complex64: _TOLERANCES[float32], complex128: _TOLERANCES[float64]})


def _default_tolerances(dtype):
    """(rtol, atol) of a ddpc or numpy dtype: exact for integers and bool."""
    if isinstance(dtype, np.dtype):
        return {np.float16: _TOLERANCES[float16], np.float32: _TOLERANCES[float32],
                np.complex64: _TOLERANCES[float32]}.get(
            dtype.type, _TOLERANCES[float64] if dtype.kind in "fc" else (0.0, 0.0))
    return _TOLERANCES.get(dtype, (0.0, 0.0))


def _fail(text, path, msg):
    if path:
        text += f"\n\nThe failure occurred for item {''.join(f'[{key!r}]' for key in path)}"
    raise AssertionError(msg(text) if callable(msg) else msg if msg is not None else text)


def _check_attribute(name, actual, expected, path, msg):
    if actual != expected:
        _fail(f"The values for attribute '{name}' do not match: {actual} != {expected}.", path, msg)


def _host_values(t):
    """A tensor's values as a numpy array (bfloat16, which numpy lacks, as float32)."""
    if t.dtype is bfloat16:
        t = t.float()
    return t.detach().cpu().numpy()


def _compare_values(actual, expected, rtol, atol, equal_nan, scalar, path, msg):
    """Differences in the common dtype of tensor-likes, as PyTorch takes them;
    a scalar's as Python numbers (float64 or int64)."""
    common = np.result_type(actual, expected)
    if common.kind == "b" or scalar:
        common = np.dtype(np.float64 if common.kind in "fc" else np.int64)
    a, e = np.asarray(actual, dtype=common), np.asarray(expected, dtype=common)
    magnitude = np.abs(np.zeros(0, common)).dtype  # of a difference: a complex one's is real
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        close = a == e
        wide = {"c": np.complex128, "f": np.float64}.get(common.kind, np.int64)
        abs_diff = np.abs(a.astype(wide) - e.astype(wide)).astype(magnitude)
        if atol or rtol:
            finite = np.isfinite(a) & np.isfinite(e) if common.kind in "fc" else True
            close |= finite & (abs_diff <= atol + rtol * np.abs(e))
        if equal_nan and common.kind in "fc":
            close |= np.isnan(a) & np.isnan(e)
        if close.all():
            return
        # Integers' relative differences in float32 (float64 for scalars), as PyTorch gives them.
        ratio = magnitude if common.kind in "fc" else np.float64 if scalar else np.float32
        rel_diff = abs_diff.astype(ratio) / np.abs(e).astype(ratio)
    abs_diff, rel_diff = np.where(close, 0, abs_diff), np.where(close, 0, rel_diff)
    exact = rtol == 0 and atol == 0
    allowed = ("", "") if exact else (f" (up to {atol} allowed)", f" (up to {rtol} allowed)")
    word = "equal" if exact else "close"
    if scalar:
        text = (f"Scalars are not {word}!\n\nExpected {e.item()} but got {a.item()}.\n"
                f"Absolute difference: {abs_diff.item()}{allowed[0]}\n"
                f"Relative difference: {rel_diff.item()}{allowed[1]}")
    else:
        # The greatest difference, a NaN one first, as numpy's nanargmax would skip it.
        def worst(d):
            flat = np.asarray(d).reshape(-1)
            nan = np.isnan(flat) if flat.dtype.kind == "f" else np.zeros(flat.shape, bool)
            i = int(np.argmax(nan)) if nan.any() else int(np.argmax(flat))
            return flat[i].item(), tuple(int(k) for k in np.unravel_index(i, a.shape))
        mismatched, total = int((~close).sum()), close.size
        (abs_value, abs_at), (rel_value, rel_at) = worst(abs_diff), worst(rel_diff)
        text = (f"Tensor-likes are not {word}!\n\nMismatched elements: {mismatched} / {total} "
                f"({100 * mismatched / total:.1f}%)\n"
                f"Greatest absolute difference: {abs_value} at index {abs_at}{allowed[0]}\n"
                f"Greatest relative difference: {rel_value} at index {rel_at}{allowed[1]}")
    _fail(text, path, msg)


def _tolerances(dtype, rtol, atol):
    if (rtol is None) != (atol is None):
        raise ValueError(f"Both 'rtol' and 'atol' must be either specified or omitted, "
                         f"but got no {'rtol' if rtol is None else 'atol'}.")
    return _default_tolerances(dtype) if rtol is None else (rtol, atol)


def _assert_pair(actual, expected, path, options):
    rtol, atol, equal_nan, check_device, check_dtype, msg = options
    if isinstance(actual, (str, bytes)) or isinstance(expected, (str, bytes)):
        if actual != expected:
            _fail(f"{actual!r} != {expected!r}", path, msg)
        return
    if isinstance(actual, collections.abc.Mapping) and isinstance(expected, collections.abc.Mapping):
        if set(actual) != set(expected):
            missing = sorted(set(expected) - set(actual), key=repr)
            extra = sorted(set(actual) - set(expected), key=repr)
            _fail(f"The keys of the mappings do not match:\nMissing keys in the actual mapping: {missing}\n"
                  f"Extra keys in the actual mapping: {extra}", path, msg)
        for key in expected:
            _assert_pair(actual[key], expected[key], path + (key,), options)
        return
    if isinstance(actual, collections.abc.Sequence) and isinstance(expected, collections.abc.Sequence):
        if len(actual) != len(expected):
            _fail(f"The length of the sequences mismatch: {len(actual)} != {len(expected)}", path, msg)
        for i, (a, e) in enumerate(zip(actual, expected)):
            _assert_pair(a, e, path + (i,), options)
        return
    if isinstance(actual, Tensor) and isinstance(expected, Tensor):
        _check_attribute("shape", actual.shape, expected.shape, path, msg)
        if check_device:
            _check_attribute("device", actual.device, expected.device, path, msg)
        if check_dtype:
            _check_attribute("dtype", actual.dtype, expected.dtype, path, msg)
        r, a = _tolerances(expected.dtype if check_dtype else float64 if actual.dtype.is_floating_point or
                           expected.dtype.is_floating_point else expected.dtype, rtol, atol)
        _compare_values(_host_values(actual), _host_values(expected), r, a, equal_nan, actual.ndim == 0, path, msg)
        return
    if isinstance(actual, np.ndarray) and isinstance(expected, np.ndarray):
        _check_attribute("shape", actual.shape, expected.shape, path, msg)
        if check_dtype:
            _check_attribute("dtype", actual.dtype, expected.dtype, path, msg)
        r, a = _tolerances(np.result_type(actual, expected), rtol, atol)
        _compare_values(actual, expected, r, a, equal_nan, actual.ndim == 0, path, msg)
        return
    if isinstance(actual, numbers.Number) and isinstance(expected, numbers.Number):
        if check_dtype:
            _check_attribute("type", type(actual).__name__, type(expected).__name__, path, msg)
        r, a = _tolerances(np.result_type(type(actual), type(expected)), rtol, atol)
        _compare_values(actual, expected, r, a, equal_nan, True, path, msg)
        return
    raise TypeError(f"No comparison pair was able to handle inputs of type {type(actual)} and {type(expected)}.")


def assert_close(actual, expected, *, allow_subclasses=True, rtol=None, atol=None, equal_nan=False,
                 check_device=True, check_dtype=True, check_layout=True, check_stride=False, msg=None):
    """Raises AssertionError unless ``actual`` and ``expected`` are close (see
    the module docstring), with a message naming the mismatched elements and
    the greatest differences. ``msg`` replaces that message (a string) or
    receives it (a callable). ddpc tensors are always strided and compared
    by value, so ``check_layout``, ``check_stride`` and ``allow_subclasses``
    change nothing."""
    del allow_subclasses, check_layout, check_stride
    _assert_pair(actual, expected, (), (rtol, atol, equal_nan, check_device, check_dtype, msg))


def make_tensor(*shape, dtype, device="cpu", low=None, high=None, requires_grad=False, noncontiguous=False,
                exclude_zero=False, memory_format=None):
    """A tensor of ``shape`` filled with values drawn uniformly from [low,
    high) by ddpc's generator: floats from [-9, 9) by default, integers from
    [-9, 10) (uint8 from [0, 10), bool from [False, True]).
    ``exclude_zero`` replaces zeros with 1 for integers and the dtype's
    ``finfo.tiny`` for floats; ``noncontiguous`` gives the same values as a
    copy taken from every other element of a larger tensor (ddpc's form of a
    strided view, ``is_contiguous()`` False); ``memory_format`` is not
    supported."""
    if memory_format is not None:
        raise ValueError("make_tensor: memory_format is not supported (ddpc tensors are contiguous)")
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    if dtype.is_floating_point:
        lo, hi = -9.0 if low is None else float(low), 9.0 if high is None else float(high)
        if not lo <= hi:
            raise ValueError(f"make_tensor: low must not exceed high, got {lo} and {hi}")
        out = (rand(*shape, dtype=float64, device=device) * (hi - lo) + lo).to(dtype=dtype)
        zero_to = finfo(dtype).tiny
    else:
        lo = (0 if dtype in (uint8, bool_) else -9) if low is None else int(np.ceil(low))
        hi = (2 if dtype is bool_ else 10) if high is None else int(np.ceil(high))
        if not lo < hi:
            raise ValueError(f"make_tensor: low must be below high, got {lo} and {hi}")
        out = randint(lo, hi, tuple(shape), device=device).to(dtype=dtype)
        zero_to = 1
    if exclude_zero:
        out = out.masked_fill(out == 0, zero_to)
    if noncontiguous and out.numel() > 1:
        out = out.unsqueeze(-1).expand(*out.shape, 2).contiguous()[..., 0]
    return out.requires_grad_() if requires_grad else out

"""ddpc.nn.init: in-place initialisers drawing from ddpc's global generator."""

import inspect
import math
import warnings

import numpy as np

from .. import _random
from .. import autograd as _ag
from ..autograd import no_grad

__all__ = ["calculate_gain", "constant_", "dirac_", "eye_", "kaiming_normal_", "kaiming_uniform_", "normal_", "ones_",
           "orthogonal_", "sparse_", "trunc_normal_", "uniform_", "xavier_normal_", "xavier_uniform_", "zeros_"]


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    with no_grad():
        return _random.uniform_(tensor, a, b, generator=generator)


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    with no_grad():
        return _random.normal_(tensor, mean, std, generator=generator)


def constant_(tensor, val):
    with no_grad():
        return tensor.fill_(val)


def zeros_(tensor):
    return constant_(tensor, 0.0)


def ones_(tensor):
    return constant_(tensor, 1.0)


def _calculate_fan_in_and_fan_out(tensor):
    """(fan_in, fan_out) of a weight, as PyTorch's function of this name
    (private there too, and called by layers' reset_parameters)."""
    if tensor.ndim < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions")
    receptive = 1
    for s in tensor.shape[2:]:
        receptive *= s
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


_fans = _calculate_fan_in_and_fan_out


_LINEAR = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
           "sigmoid", "identity")


def calculate_gain(nonlinearity, param=None):
    """The recommended gain for a nonlinearity, as PyTorch's table."""
    if nonlinearity in _LINEAR:
        return 1.0
    if nonlinearity == "selu":
        return 3.0 / 4
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, (int, float)) and not isinstance(param, bool):
            slope = param
        else:  # as PyTorch's (True is no slope)
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    raise ValueError(f"unsupported nonlinearity {nonlinearity!r}")


def _kaiming_std(tensor, a, mode, nonlinearity):
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan_in, fan_out = _fans(tensor)
    fan = fan_in if mode == "fan_in" else fan_out
    return calculate_gain(nonlinearity, a) / math.sqrt(fan) if fan else 0.0


def kaiming_uniform_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    return normal_(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity), generator)


def _xavier_std(tensor, gain):
    fan_in, fan_out = _fans(tensor)
    return gain * math.sqrt(2.0 / (fan_in + fan_out))


def xavier_uniform_(tensor, gain=1.0, generator=None):
    bound = math.sqrt(3.0) * _xavier_std(tensor, gain)
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor, gain=1.0, generator=None):
    return normal_(tensor, 0.0, _xavier_std(tensor, gain), generator)


def _normal_cdf(z):
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """Draws from N(mean, std ** 2) restricted to [a, b] by inverting the
    normal cdf, as PyTorch: u uniform between the cdf's values at a and b,
    then mean + std * ndtri(u), clamped to [a, b] against rounding. ddpc
    works in float64 and on the lower tail (an interval above the mean is
    drawn mirrored), so a narrow interval or one far in a tail keeps its
    precision."""
    if not a < b:
        raise ValueError(f"trunc_normal_: expects a < b, got [{a}, {b}]")
    low, high = (a - mean) / std, (b - mean) / std
    mirrored = low + high > 0
    if mirrored:
        low, high = -high, -low
    with no_grad():
        u = _random.uniform_(tensor.new_empty(tensor.shape, dtype="float64"), _normal_cdf(low), _normal_cdf(high),
                             generator=generator)
        z = _ag.ndtri(u)
        if mirrored:
            z = _ag.neg(z)
        return tensor.copy_(_ag.clamp(_ag.add(_ag.mul(z, std), mean), a, b))


def orthogonal_(tensor, gain=1.0, generator=None):
    """A (semi-)orthogonal matrix over the first dim and the rest flattened, times
    gain, as PyTorch: the Q of a QR factorisation of a normal draw, with signs
    fixed by R's diagonal. The QR runs through numpy on the host (a one-off at
    initialisation)."""
    if tensor.ndim < 2:
        raise ValueError("orthogonal_: only tensors with 2 or more dims are supported")
    if tensor.numel() == 0:
        return tensor
    rows, cols = tensor.shape[0], tensor.numel() // tensor.shape[0]
    with no_grad():
        draw = _random.normal_(tensor.new_empty((rows, cols), dtype="float64", device="cpu"), generator=generator)
        flat = draw.numpy()
        if rows < cols:
            flat = flat.T
        q, r = np.linalg.qr(flat)
        q = q * np.sign(np.diag(r))
        if rows < cols:
            q = q.T
        tensor.copy_(tensor.new_tensor(q.reshape(tensor.shape) * gain))
    return tensor


def eye_(tensor):
    """The identity matrix (ones on the diagonal of a 2-d tensor, zeros elsewhere)."""
    if tensor.ndim != 2:
        raise ValueError("eye_: only 2-d tensors are supported")
    with no_grad():
        return tensor.zero_().fill_diagonal_(1)


def dirac_(tensor, groups=1):
    """The Dirac delta of a 3-, 4- or 5-d convolution weight: each of the first
    min(out / groups, in) channels of each group passes its input channel through
    at the kernel's centre; zeros elsewhere."""
    if tensor.ndim not in (3, 4, 5):
        raise ValueError("dirac_: only 3, 4 and 5-d tensors are supported")
    out_per_group = tensor.shape[0] // groups
    if tensor.shape[0] % groups:
        raise ValueError(f"dirac_: dim 0 ({tensor.shape[0]}) is not divisible by groups ({groups})")
    n = min(out_per_group, tensor.shape[1])
    out = (np.arange(groups)[:, None] * out_per_group + np.arange(n)).reshape(-1)
    centre = tuple(np.full(out.shape, s // 2) for s in tensor.shape[2:])
    with no_grad():
        tensor.zero_()
        tensor[(out, np.tile(np.arange(n), groups)) + centre] = 1
    return tensor


def sparse_(tensor, sparsity, std=0.01, generator=None):
    """N(0, std ** 2) with ceil(sparsity * rows) random elements of each column
    of a 2-d tensor set to zero."""
    if tensor.ndim != 2:
        raise ValueError("sparse_: only 2-d tensors are supported")
    rows, cols = tensor.shape
    zeros_per_column = int(math.ceil(sparsity * rows))
    with no_grad():
        normal_(tensor, 0.0, std, generator)
        if zeros_per_column and cols:
            keys = _random.uniform_(tensor.new_empty((rows, cols), dtype="float32"), generator=generator)
            tensor.scatter_(0, keys.argsort(0)[:zeros_per_column], value=0.0)
    return tensor


def _deprecated(new):
    """PyTorch's deprecated name without the underscore for ``new``: it warns and calls ``new``."""
    old_name = new.__name__[:-1]

    def init(*args, **kwargs):
        warnings.warn(f"`nn.init.{old_name}` is now deprecated in favor of `nn.init.{new.__name__}`.", FutureWarning,
                      stacklevel=2)
        return new(*args, **kwargs)

    init.__signature__ = inspect.signature(new)
    init.__name__ = init.__qualname__ = old_name
    init.__doc__ = f"Deprecated: {new.__name__}."
    return init


uniform, normal, constant, eye, dirac, xavier_uniform, xavier_normal, kaiming_uniform, kaiming_normal, orthogonal, \
    sparse = (_deprecated(f) for f in (uniform_, normal_, constant_, eye_, dirac_, xavier_uniform_, xavier_normal_,
                                       kaiming_uniform_, kaiming_normal_, orthogonal_, sparse_))

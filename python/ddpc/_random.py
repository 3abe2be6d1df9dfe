"""PyTorch's in-place random fills and random sampling functions over the
counter-based generator of _C (uniform, normal and integer draws). The
numbers drawn are ddpc's own: the same seed gives the same numbers on the
host and on any GPU, but not PyTorch's numbers.
"""

import numbers
from math import inf

from . import _C
from . import autograd as _ag
from ._dtype import bfloat16, float16, float32, float64, uint8
from ._stats import searchsorted
from .tensor import (_INT_BOUNDS, _RAND_INT, _RAND_NORMAL, _RAND_UNIFORM, Tensor, _check_no_grad_inplace, _write_back,
                     default_generator, empty)


def draw_(t, kind, a, b, generator=None):
    """Fills t in place with draws of ``kind`` (uniform on [a, b), normal with mean a
    and std b, or integers on [a, b)) from ``generator`` (the global one for None)."""
    _check_no_grad_inplace(t, "random fill")
    seed, offset = (generator or default_generator).take(t.numel())
    t._buf.bump_version()
    _C.random(t._buf, kind, seed, offset, float(a), float(b))
    _write_back(t)
    return t


def uniform_(t, a=0.0, b=1.0, *, generator=None):
    """Fills t with numbers drawn uniformly from [a, b)."""
    if not t.dtype.is_floating_point:
        raise TypeError(f"uniform_: expected a floating tensor, got {t.dtype}")
    return draw_(t, _RAND_UNIFORM, a, b, generator)


def normal_(t, mean=0.0, std=1.0, *, generator=None):
    """Fills t with numbers drawn from the normal distribution N(mean, std ** 2)."""
    if not t.dtype.is_floating_point:
        raise TypeError(f"normal_: expected a floating tensor, got {t.dtype}")
    if std < 0:
        raise ValueError(f"normal_: std must be >= 0, got {std}")
    return draw_(t, _RAND_NORMAL, mean, std, generator)


# The integers a float dtype holds exactly, from 0: PyTorch's default range of random_.
_FLOAT_INTS = {float16: 2 ** 11, bfloat16: 2 ** 8, float32: 2 ** 24, float64: 2 ** 53}


def random_(t, from_=0, to=None, *, generator=None):
    """Fills t with integers drawn uniformly from [from_, to); to None gives
    PyTorch's default: up to the dtype's largest value (for floats, the largest
    integer the mantissa holds exactly, included). ``random_(to)`` alone draws
    from [0, to). ddpc draws integers exactly from ranges up to 2**53 wide."""
    if to is None and from_ != 0:
        from_, to = 0, from_
    if to is None:
        to = _FLOAT_INTS[t.dtype] + 1 if t.dtype.is_floating_point else \
            (256 if t.dtype is uint8 else _INT_BOUNDS[t.dtype][1])
    if to <= from_:
        raise ValueError(f"random_: expects from < to, got [{from_}, {to})")
    if to - from_ > 2 ** 53:
        raise ValueError(f"random_: the range [{from_}, {to}) is wider than 2**53, more than ddpc draws exactly")
    return draw_(t, _RAND_INT, from_, to, generator)


def _filled(t, values, what):
    """Writes values (computed outside the graph) into t."""
    _check_no_grad_inplace(t, what)
    return t.copy_(values)


def exponential_(t, lambd=1.0, *, generator=None):
    """Fills t with draws from the exponential distribution of rate lambd: -log(1 - u) / lambd."""
    if lambd <= 0:
        raise ValueError(f"exponential_: lambd must be positive, got {lambd}")
    with _ag.no_grad():
        u = draw_(empty(t.shape, dtype=float64, device=t.device), _RAND_UNIFORM, 0.0, 1.0, generator)
        return _filled(t, _ag.mul(_ag.log1p(_ag.neg(u)), -1.0 / lambd), "exponential_")


def _probabilities(p, t, what):
    if isinstance(p, Tensor):
        p = p.detach()
        if p._buf.device != t._buf.device:
            raise ValueError(f"{what}: p is on {p.device} but the tensor on {t.device}")
        low, high = (_ag.amin(p).item(), _ag.amax(p).item()) if p.numel() else (0.0, 1.0)
    else:
        low = high = float(p)
    if not (0 <= low and high <= 1):
        raise ValueError(f"{what}: probabilities must be in [0, 1], got values in [{low}, {high}]")
    return p


def bernoulli_(t, p=0.5, *, generator=None):
    """Fills t with 1 with probability p (a number, or a tensor that broadcasts to t), else 0."""
    p = _probabilities(p, t, "bernoulli_")
    with _ag.no_grad():
        u = draw_(empty(t.shape, dtype=float64, device=t.device), _RAND_UNIFORM, 0.0, 1.0, generator)
        return _filled(t, u < (p.to(dtype=float64) if isinstance(p, Tensor) else p), "bernoulli_")


def bernoulli(input, p=None, *, generator=None):
    """A tensor like input of 1 with probability input (or p when given), else 0."""
    out = empty(input.shape, dtype=input.dtype, device=input.device)
    return bernoulli_(out, input if p is None else p, generator=generator)


def normal(mean, std=1.0, size=None, *, generator=None, dtype=None, device=None):
    """Draws from N(mean, std ** 2): mean and std numbers (then ``size`` is the
    shape) or tensors that broadcast (the result has their broadcast shape)."""
    if isinstance(mean, Tensor) or isinstance(std, Tensor):
        ref = mean if isinstance(mean, Tensor) else std
        shape = _ag._broadcast_shape(getattr(mean, "shape", ()), getattr(std, "shape", ()))
        if isinstance(std, Tensor) and std.numel() and _ag.amin(std.detach()).item() < 0:
            raise ValueError("normal: std must be >= 0")
        dt = ref.dtype if ref.dtype.is_floating_point else float32
        with _ag.no_grad():
            z = normal_(empty(shape, dtype=dt, device=ref.device), generator=generator)
            return _ag.add(_ag.mul(z, std.detach() if isinstance(std, Tensor) else std),
                           mean.detach() if isinstance(mean, Tensor) else mean)
    if size is None:
        raise TypeError("normal: with a number mean and std, give the size of the result")
    t = empty(*((size,) if isinstance(size, numbers.Integral) else tuple(size)), dtype=dtype, device=device)
    return normal_(t, mean, std, generator=generator)


def poisson(input, generator=None):
    """Draws from the Poisson distribution of rate input (elementwise): the number
    of arrivals in [0, rate] of a process whose gaps are exponential. This runs
    one round of tensor ops per arrival of the largest rate, so its cost grows
    with that rate (PyTorch switches to a rejection method for rates >= 10)."""
    if not input.dtype.is_floating_point:
        raise TypeError(f"poisson: expected a floating tensor of rates, got {input.dtype}")
    rate = input.detach().to(dtype=float64)
    if rate.numel() and not _ag.amin(rate).item() >= 0:
        raise ValueError("poisson: rates must be >= 0 (and not NaN)")
    with _ag.no_grad():
        count = _ag.mul(rate, 0.0)
        elapsed = _ag.mul(rate, 0.0)
        while True:
            gap = exponential_(empty(rate.shape, dtype=float64, device=rate.device), generator=generator)
            elapsed = _ag.add(elapsed, gap)
            arrived = (elapsed <= rate)
            if not rate.numel() or not _ag.amax(arrived).item():
                return count.to(dtype=input.dtype)
            count = _ag.add(count, arrived.to(dtype=float64))


def multinomial(input, num_samples, replacement=False, *, generator=None):
    """Indices drawn with probability proportional to input's non-negative
    weights (each row of a 2-d input gives a row of the int64 result); without
    replacement no index repeats. All rows are drawn at once on input's device:
    with replacement by a binary search of uniform draws in each row's
    cumulative weights; without replacement by an exponential race (each index
    gets an arrival time E / w with E ~ Exp(1), and the first num_samples to
    arrive are taken in arrival order), which draws the same distribution as
    drawing one index at a time and removing it."""
    if not isinstance(input, Tensor) or input.ndim not in (1, 2):
        raise ValueError(f"multinomial: expected a 1-d or 2-d tensor of weights, got "
                         f"{getattr(input, 'shape', type(input).__name__)}")
    if num_samples <= 0:
        raise ValueError(f"multinomial: num_samples must be positive, got {num_samples}")
    with _ag.no_grad():
        rows = input.detach().to(dtype=float64).reshape(-1, input.shape[-1])
        # NaN fails both comparisons, so two reductions check every weight.
        if not (_ag.amin(rows).item() >= 0 and _ag.amax(rows).item() < inf):
            raise ValueError("multinomial: the weights must be finite and non-negative")
        if replacement:
            cumulative = _ag.cumsum(rows, -1)
            fewest = 1 if _ag.amin(cumulative[:, -1]).item() > 0 else 0
        else:
            fewest = _ag.amin((rows > 0).sum(-1)).item()
        if fewest == 0:
            raise ValueError("multinomial: every weight of a row is zero")
        if not replacement and num_samples > fewest:
            raise ValueError(f"multinomial: {num_samples} draws without replacement, but a row has only {fewest} "
                             "weights > 0")
        u = draw_(empty((rows.shape[0], num_samples if replacement else rows.shape[1]), dtype=float64,
                        device=rows.device), _RAND_UNIFORM, 0.0, 1.0, generator)
        if replacement:
            # right=True skips zero-weight indices; the clamp only guards rounding.
            index = _ag.clamp(searchsorted(cumulative, _ag.mul(u, cumulative[:, -1:]), right=True), None,
                              rows.shape[1] - 1)
        else:
            arrival = _ag.where(rows > 0, _ag.div(_ag.neg(_ag.log1p(_ag.neg(u))), rows), inf)
            index = _ag.topk(arrival, num_samples, largest=False).indices
        return index.reshape(input.shape[:-1] + (num_samples,))


__all__ = ["bernoulli", "multinomial", "normal", "poisson"]

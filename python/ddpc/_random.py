"""PyTorch's in-place random fills and random sampling functions over the
counter-based generator of _C (uniform, normal and integer draws). The
numbers drawn are ddpc's own: the same seed gives the same numbers on the
host and on any GPU, but not PyTorch's numbers.
"""

import math
import numbers
import warnings
from math import inf, log1p, pi

from . import _C
from . import autograd as _ag
from ._C import ArgumentError, DtypeError
from ._dtype import bfloat16, bool_, finfo, float16, float32, float64, int64, real_of, real_pairs, uint8
from ._stats import searchsorted
from .tensor import (_INT_BOUNDS, _RAND_INT, _RAND_NORMAL, _RAND_UNIFORM, Tensor, _check_no_grad_inplace, _draws_from,
                     _write_back, arange, broadcast_tensors, empty, index_select, zeros)


def fill_draws(t, kind, a, b, generator=None):
    """Writes draws of ``kind`` (uniform on [a, b), normal with mean a and std b,
    or integers on [a, b)) from ``generator`` (the global one for None) into t's
    memory. A complex t gets them in each part, as PyTorch: uniform parts, or
    normal ones of variance std ** 2 / 2 (so that |z - a| ** 2 has mean std ** 2)."""
    if kind == _RAND_INT:
        if t.dtype.is_complex:
            raise DtypeError(f"random integers can't be drawn as {t.dtype}")
        return _fill_ints(t, a, b, generator or _draws_from())
    buf = real_pairs(t._buf)
    if t.dtype.is_complex and kind == _RAND_NORMAL:
        b = b * math.sqrt(0.5)
    seed, offset = (generator or _draws_from()).take(buf.numel)
    _C.random(buf, kind, seed, offset, float(a), float(b))
    return t


# The C generator draws an integer from a range up to this wide exactly: the
# top bits of one 53-bit uniform draw, or a + floor(u (b - a)) in a double.
_EXACT_INTS = 2 ** 53
# PyTorch takes the bounds of random integers as int64s.
_INT64_LOW, _INT64_END = -2 ** 63, 2 ** 63


def _offsets(shape, device, width, generator):
    """int64 integers uniform on [0, width), width <= 2**53, from one draw each."""
    out = empty(tuple(shape), dtype=int64, device=device)
    seed, offset = generator.take(out.numel())
    _C.random(out._buf, _RAND_INT, seed, offset, 0.0, float(width))
    return out


def _wide_ints(n, device, low, width, generator):
    """n int64 integers uniform on [low, low + width) for a width above 2**53
    (up to 2**64): x = hi 2**32 + lo from two draws of whole bits (hi of just
    enough of them to reach width), drawn again while x >= width (in fewer
    than half of the draws)."""
    high_bits = (width - 1).bit_length() - 32
    width_hi, width_lo = divmod(width, 2 ** 32)

    def propose(positions):
        hi = _offsets(positions.shape, device, 2 ** high_bits, generator)
        lo = _offsets(positions.shape, device, 2 ** 32, generator)
        accepted = _ag.logical_or(hi < width_hi, _ag.logical_and(hi == width_hi, lo < width_lo))
        hi = _ag.where(accepted, hi, 0)
        # low + x, added so that no partial sum of an accepted draw leaves
        # int64 (hi 2**32 alone may: hi goes up to 2**32 - 1).
        return accepted, _ag.add(_ag.add(_ag.add(lo, low), hi * 2 ** 31), hi * 2 ** 31)

    return rejection_rounds((arange(n, device=device),), propose, dtype=int64)


def _fill_ints(t, low, high, generator):
    """Writes integers uniform on [low, high) (int64 bounds) into t's memory:
    in one C call where doubles hold the whole range exactly, else through
    int64 draws of the offsets from low."""
    low, high = int(low), int(high)
    width = high - low
    if width <= _EXACT_INTS and -_EXACT_INTS <= low and high <= _EXACT_INTS and t.dtype is not bool_:
        seed, offset = generator.take(t.numel())
        _C.random(t._buf, _RAND_INT, seed, offset, float(low), float(high))
        return t
    with _ag.no_grad():
        if width <= _EXACT_INTS:
            values = _ag.add(_offsets(t.shape, t.device, width, generator), low)
        else:
            values = _wide_ints(t.numel(), t.device, low, width, generator)
        if t.dtype is int64:
            _C.copy(t._buf, values.reshape(t.shape)._buf, False)
        else:
            _C.cast(t._buf, values.reshape(t.shape)._buf)
    return t


def _integer(value, what):
    """value as an int, refusing a fractional number (PyTorch takes ints only)."""
    if isinstance(value, Tensor):
        value = value.item()
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real) and float(value).is_integer():
        return int(value)
    raise TypeError(f"{what} expects integer bounds, got {value!r}")


# The integers a float dtype holds exactly, from 0: PyTorch's default range of random_.
_FLOAT_INTS = {float16: 2 ** 11, bfloat16: 2 ** 8, float32: 2 ** 24, float64: 2 ** 53}


def _dtype_values(dt):
    """The smallest and largest values of dt: PyTorch's bounds for from and to - 1."""
    if dt is bool_:
        return 0, 1
    if dt is uint8:
        return 0, 255
    if dt.is_floating_point:
        largest = int(finfo(dt).max)
        return -largest, largest
    low, end = _INT_BOUNDS[dt]
    return low, end - 1


def int_range(what, low, high, dt):
    """The integer bounds [low, high) for draws into dt, refused as PyTorch's
    random_ refuses them: empty, or with low or high - 1 out of dt's range
    or of int64's. A float dt holds only some integers above 2 ** its
    mantissa bits; there the draws are rounded, with PyTorch's warning."""
    low, high = _integer(low, what), _integer(high, what)
    if not low < high:
        raise ArgumentError(f"{what}: expects from < to, got from={low} >= to={high}")
    smallest, largest = _dtype_values(dt)
    for name, value in (("from", low), ("to - 1", high - 1)):
        if not (smallest <= value <= largest and _INT64_LOW <= value < _INT64_END):
            raise ArgumentError(f"{what}: [{low}, {high}) does not fit {dt.name}: {name} = {value} is out of bounds "
                                f"[{max(smallest, _INT64_LOW)}, {min(largest, _INT64_END - 1)}]")
    if dt.is_floating_point and max(-low, high - 1) > _FLOAT_INTS[dt]:
        warnings.warn(f"{what}: [{low}, {high}) reaches beyond +-2**{_FLOAT_INTS[dt].bit_length() - 1}, where "
                      f"{dt.name} holds only some of the integers; the draws are rounded to it", stacklevel=3)
    return low, high


def draw_(t, kind, a, b, generator=None):
    """Fills t in place with draws (see fill_draws), as an in-place write."""
    _check_no_grad_inplace(t, "random fill")
    fill_draws(t, kind, a, b, generator)
    t._buf.bump_version()
    _write_back(t)
    return t


def uniform_(t, a=0.0, b=1.0, *, generator=None):
    """Fills t with numbers drawn uniformly from [a, b) (each part of a complex t).
    As PyTorch, a and b must be finite values of t's dtype with a <= b."""
    if not (t.dtype.is_floating_point or t.dtype.is_complex):
        raise DtypeError(f"uniform_: expected a floating tensor, got {t.dtype}")
    real = real_of(t.dtype) if t.dtype.is_complex else t.dtype
    largest = finfo(real).max
    for name, value in (("from", a), ("to", b)):
        if not -largest <= value <= largest:
            raise ArgumentError(f"uniform_: {name}={value} is out of bounds for {real.name}")
    if a > b:
        raise ArgumentError(f"uniform_: expects a [from, to) range, but got from={a} > to={b}")
    if b - a > largest:
        raise ArgumentError(f"uniform_: to - from = {b - a} is larger than the largest {real.name}")
    return draw_(t, _RAND_UNIFORM, a, b, generator)


def normal_(t, mean=0.0, std=1.0, *, generator=None):
    """Fills t with numbers drawn from the normal distribution N(mean, std ** 2)."""
    if not (t.dtype.is_floating_point or t.dtype.is_complex):
        raise DtypeError(f"normal_: expected a floating tensor, got {t.dtype}")
    _check_std(std, "normal_")
    return draw_(t, _RAND_NORMAL, mean, std, generator)


def _check_std(std, what):
    """Refuses a negative or NaN std (a number or a tensor), as PyTorch."""
    if isinstance(std, Tensor):
        if std.numel() and not _ag.amin(std.detach()).item() >= 0:
            raise ArgumentError(f"{what}: all elements of std must be >= 0 (and not NaN)")
    elif not std >= 0:
        raise ArgumentError(f"{what}: std must be >= 0, got {std}")


_NO_TO = object()


def random_(t, from_=None, to=_NO_TO, *, generator=None, **kwargs):
    """Fills t with integers drawn uniformly from [from_, to), PyTorch's
    overloads: ``random_()`` from 0, ``random_(to)`` from 0 to ``to``, and
    ``random_(from_, None)`` from ``from_``, each up to the dtype's largest
    value where no ``to`` is given (for floats, the largest integer the
    mantissa holds exactly, included). PyTorch's keyword ``from`` is taken
    too. Every range int64 holds is drawn exactly."""
    if "from" in kwargs:
        from_ = kwargs.pop("from")
    if kwargs:
        raise TypeError(f"random_() got an unexpected keyword argument {next(iter(kwargs))!r}")
    if to is _NO_TO:
        from_, to = (0, from_) if from_ is not None else (0, None)
    elif from_ is None:
        from_ = 0
    if t.dtype.is_complex:
        raise DtypeError(f"random_: random integers can't be drawn as {t.dtype}")
    if to is None:
        to = (_FLOAT_INTS[t.dtype] if t.dtype.is_floating_point else _dtype_values(t.dtype)[1]) + 1
    from_, to = int_range("random_", from_, to, t.dtype)
    return draw_(t, _RAND_INT, from_, to, generator)


def exponential_(t, lambd=1.0, *, generator=None):
    """Fills t with draws from the exponential distribution of rate lambd: -log(1 - u) / lambd."""
    if not lambd > 0:
        raise ArgumentError(f"exponential_: lambd must be positive, got {lambd}")
    _check_no_grad_inplace(t, "exponential_")  # (the fill itself runs outside grad mode)
    with _ag.no_grad():
        u = draw_(empty(t.shape, dtype=float64, device=t.device), _RAND_UNIFORM, 0.0, 1.0, generator)
        return t.copy_(_ag.mul(_ag.log1p(_ag.neg(u)), -1.0 / lambd))


def cauchy_(t, median=0.0, sigma=1.0, *, generator=None):
    """Fills t with draws from the Cauchy distribution: median + sigma * tan(pi (u - 1/2))."""
    if not t.dtype.is_floating_point:
        raise DtypeError(f"cauchy_: expected a floating tensor, got {t.dtype}")
    if not sigma > 0:
        raise ArgumentError(f"cauchy_ expects sigma > 0.0, but found sigma={sigma}")
    _check_no_grad_inplace(t, "cauchy_")  # (the fill itself runs outside grad mode)
    with _ag.no_grad():
        u = uniform_draws(t.shape, t.device, generator)
        return t.copy_(_ag.add(_ag.mul(_ag.tan(_ag.mul(_ag.sub(u, 0.5), pi)), sigma), median))


def log_normal_(t, mean=1.0, std=2.0, *, generator=None):
    """Fills t with exp(N(mean, std ** 2)) draws."""
    if not t.dtype.is_floating_point:
        raise DtypeError(f"log_normal_: expected a floating tensor, got {t.dtype}")
    if not std > 0:
        raise ArgumentError(f"log_normal_ expects std > 0.0, but found std={std}")
    _check_no_grad_inplace(t, "log_normal_")  # (the fill itself runs outside grad mode)
    with _ag.no_grad():
        z = draw_(empty(t.shape, dtype=float64, device=t.device), _RAND_NORMAL, mean, std, generator)
        return t.copy_(_ag.exp(z))


def geometric_(t, p, *, generator=None):
    """Fills t with the number of Bernoulli(p) trials up to the first
    success (1, 2, ...): ceil(log(1 - u) / log(1 - p))."""
    if not 0 < p < 1:
        raise ArgumentError(f"geometric_ expects p to be in (0, 1), but got p={p}")
    _check_no_grad_inplace(t, "geometric_")  # (the fill itself runs outside grad mode)
    with _ag.no_grad():
        u = uniform_draws(t.shape, t.device, generator)
        trials = _ag.clamp_min(_ag.ceil(_ag.div(_ag.log1p(_ag.neg(u)), log1p(-p))), 1.0)
        return t.copy_(trials)


def _probabilities(p, t, what):
    if isinstance(p, Tensor):
        p = p.detach()
        if p._buf.device != t._buf.device:
            raise ArgumentError(f"{what}: p is on {p.device} but the tensor on {t.device}")
        low, high = (_ag.amin(p).item(), _ag.amax(p).item()) if p.numel() else (0.0, 1.0)
    else:
        low = high = float(p)
    if not (0 <= low and high <= 1):
        raise ArgumentError(f"{what}: probabilities must be in [0, 1], got values in [{low}, {high}]")
    return p


def bernoulli_(t, p=0.5, *, generator=None):
    """Fills t with 1 with probability p (a number, or a tensor that broadcasts to t), else 0."""
    p = _probabilities(p, t, "bernoulli_")
    _check_no_grad_inplace(t, "bernoulli_")  # (the fill itself runs outside grad mode)
    with _ag.no_grad():
        u = draw_(empty(t.shape, dtype=float64, device=t.device), _RAND_UNIFORM, 0.0, 1.0, generator)
        return t.copy_(u < (p.to(dtype=float64) if isinstance(p, Tensor) else p))


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
        _check_std(std, "normal")
        # As PyTorch, the result has the dtype of mean (of std where mean is a number).
        dt = ref.dtype if ref.dtype.is_floating_point or ref.dtype.is_complex else float32
        with _ag.no_grad():
            z = normal_(empty(shape, dtype=dt, device=ref.device), generator=generator)
            return _ag.add(_ag.mul(z, std.detach().to(dtype=dt) if isinstance(std, Tensor) else std),
                           mean.detach().to(dtype=dt) if isinstance(mean, Tensor) else mean)
    if size is None:
        raise TypeError("normal: with a number mean and std, give the size of the result")
    t = empty(*((size,) if isinstance(size, numbers.Integral) else tuple(size)), dtype=dtype, device=device)
    return normal_(t, mean, std, generator=generator)


def uniform_draws(shape, device, generator):
    """float64 draws from [0, 1) of ``shape`` on ``device``."""
    return draw_(empty(tuple(shape), dtype=float64, device=device), _RAND_UNIFORM, 0.0, 1.0, generator)


# The rejection samplers over these rounds (gamma, Poisson and binomial here,
# von Mises in ddpc.distributions) accept a proposal with probability above
# 0.6, so this many rounds leave an element undrawn with probability below
# 1e-25: reaching the bound means a parameter is NaN or infinite. (Wide
# integer ranges accept above 0.5: below 1e-19 an element.)
_MAX_ROUNDS = 64


def rejection_rounds(params, propose, dtype=float64):
    """Draws one value (of ``dtype``) per element of the flat tensors ``params``
    by rounds of ``propose(*params_of_the_waiting)`` -> (accepted, values) over
    the elements still waiting, so Python loops over rounds, not elements."""
    n = params[0].numel()
    device = params[0].device
    out = zeros((n,), dtype=dtype, device=device)
    waiting = arange(n, device=device)
    for _ in range(_MAX_ROUNDS):
        if waiting.numel() == 0:
            return out
        accepted, values = propose(*(index_select(p, 0, waiting) for p in params))
        taken = _ag.nonzero(accepted, as_tuple=True)[0]
        out = _ag.index_put(out, (index_select(waiting, 0, taken),), index_select(values, 0, taken))
        waiting = index_select(waiting, 0, _ag.nonzero(_ag.logical_not(accepted), as_tuple=True)[0])
    if waiting.numel():
        raise ArgumentError("a rejection sampler accepted no draw: are the parameters finite?")
    return out


def _marsaglia_tsang(alpha, generator):
    """Gamma(alpha, 1) draws for a flat float64 tensor alpha >= 1 (Marsaglia and
    Tsang): d v with d = alpha - 1/3, v = (1 + z / sqrt(9 d))^3, z normal,
    accepted when log u < z^2 / 2 + d - d v + d log v."""

    def propose(a):
        d = a - 1.0 / 3.0
        z = draw_(empty(a.shape, dtype=float64, device=a.device), _RAND_NORMAL, 0.0, 1.0, generator)
        u = uniform_draws(a.shape, a.device, generator)
        v = (1 + z * _ag.rsqrt(9.0 * d)).pow(3)
        positive = v > 0
        log_v = _ag.log(_ag.where(positive, v, 1.0))
        return _ag.logical_and(positive, _ag.log(u) < 0.5 * z * z + d - d * v + d * log_v), d * v

    return rejection_rounds((alpha,), propose)


def standard_gamma(concentration, generator=None):
    """Gamma(concentration, 1) draws of concentration's shape and dtype, outside
    the graph. A concentration below 1 draws with concentration + 1 and
    multiplies by U^(1 / concentration). Draws are at least the dtype's
    smallest normal number, as PyTorch's, so their log stays finite."""
    with _ag.no_grad():
        alpha = concentration.detach().to(dtype=float64).reshape(-1)
        small = alpha < 1
        x = _marsaglia_tsang(_ag.where(small, alpha + 1, alpha), generator)
        boost = _ag.exp(_ag.log(uniform_draws(alpha.shape, alpha.device, generator)) / alpha)
        x = _ag.where(small, x * boost, x).to(dtype=concentration.dtype).reshape(concentration.shape)
        return _ag.clamp(x, finfo(concentration.dtype).tiny, None)


# Below this mean, Poisson and binomial draws search the cumulative
# probabilities (a round per value passed, few at small means); from it on,
# transformed rejection (PTRS, BTRS: Hoermann 1993) accepts in about 1.1 rounds.
_SEARCH_BELOW = 10.0
# Values the searches pass at most: at means below _SEARCH_BELOW a draw above
# it has probability below 1e-100, and the bound ends a search whose rounded
# cumulative sum stops short of a uniform draw just below 1.
_SEARCH_LIMIT = 256


def _poisson_search(rate, generator):
    """Poisson draws of rates below _SEARCH_BELOW: the smallest k whose
    cumulative probability reaches a uniform draw."""
    u = uniform_draws(rate.shape, rate.device, generator)
    pmf = _ag.exp(-rate)
    cdf = pmf
    count = _ag.mul(rate, 0.0)
    for k in range(1, _SEARCH_LIMIT + 1):
        passed = u > cdf
        if not rate.numel() or not _ag.amax(passed).item():
            return count
        count = count + passed.to(dtype=float64)
        pmf = pmf * rate / k
        cdf = cdf + pmf
    return count


def _poisson_ptrs(rate, generator):
    """Poisson draws of rates of at least _SEARCH_BELOW by the transformed
    rejection method with squeeze (PTRS)."""

    def propose(lam):
        b = 0.931 + 2.53 * _ag.sqrt(lam)
        a = -0.059 + 0.02483 * b
        inv_alpha = 1.1239 + 1.1328 / (b - 3.4)
        vr = 0.9277 - 3.6224 / (b - 2)
        u = uniform_draws(lam.shape, lam.device, generator) - 0.5
        v = uniform_draws(lam.shape, lam.device, generator)
        us = 0.5 - _ag.abs(u)
        k = _ag.floor((2 * a / us + b) * u + lam + 0.43)
        squeeze = _ag.logical_and(us >= 0.07, v <= vr)
        kept = _ag.clamp(k, 0, None)
        log_ratio = _ag.log(v * inv_alpha / (a / (us * us) + b))
        exact = log_ratio <= -lam + kept * _ag.log(lam) - _ag.lgamma(kept + 1)
        possible = _ag.logical_and(k >= 0, _ag.logical_not(_ag.logical_and(us < 0.013, v > us)))
        return _ag.logical_or(squeeze, _ag.logical_and(possible, exact)), k

    return rejection_rounds((rate,), propose)


def _split_by_mean(mean, params, small_draws, large_draws):
    """Draws with small_draws(*params) where mean < _SEARCH_BELOW and with
    large_draws over the others only (flat float64 tensors)."""
    large = mean >= _SEARCH_BELOW
    out = small_draws(*(_ag.where(large, 0.0, p) for p in params))
    index = _ag.nonzero(large, as_tuple=True)[0]
    if index.numel():
        drawn = large_draws(*(index_select(p, 0, index) for p in params))
        out = _ag.index_put(out, (index,), drawn)
    return out


def poisson(input, generator=None):
    """Draws from the Poisson distribution of rate input (elementwise): rates
    below 10 by searching the cumulative probabilities, larger ones by the
    transformed rejection method PTRS (PyTorch also switches at 10), every
    round over all the elements still waiting."""
    if not input.dtype.is_floating_point:
        raise DtypeError(f"poisson: expected a floating tensor of rates, got {input.dtype}")
    rate = input.detach().to(dtype=float64).reshape(-1)
    if rate.numel() and not _ag.amin(rate).item() >= 0:
        raise ArgumentError("poisson: rates must be >= 0 (and not NaN)")
    with _ag.no_grad():
        out = _split_by_mean(rate, (rate,), lambda r: _poisson_search(r, generator),
                             lambda r: _poisson_ptrs(r, generator))
        return out.to(dtype=input.dtype).reshape(input.shape)


def _binomial_search(count, prob, generator):
    """Binomial draws of means below _SEARCH_BELOW (prob <= 1/2): the smallest k
    whose cumulative probability reaches a uniform draw."""
    u = uniform_draws(count.shape, count.device, generator)
    odds = prob / (1 - prob)
    pmf = _ag.exp(count * _ag.log1p(-prob))
    cdf = pmf
    drawn = _ag.mul(count, 0.0)
    for k in range(1, _SEARCH_LIMIT + 1):
        passed = _ag.logical_and(u > cdf, drawn < count)
        if not count.numel() or not _ag.amax(passed).item():
            return drawn
        drawn = drawn + passed.to(dtype=float64)
        pmf = pmf * odds * (count - k + 1) / k
        cdf = cdf + pmf
    return drawn


def _binomial_btrs(count, prob, generator):
    """Binomial draws of means of at least _SEARCH_BELOW (prob <= 1/2) by the
    transformed rejection method with squeeze (BTRS)."""

    def propose(n, p):
        q = 1 - p
        spq = _ag.sqrt(n * p * q)
        b = 1.15 + 2.53 * spq
        a = -0.0873 + 0.0248 * b + 0.01 * p
        vr = 0.92 - 4.2 / b
        alpha = (2.83 + 5.1 / b) * spq
        m = _ag.floor((n + 1) * p)
        u = uniform_draws(n.shape, n.device, generator) - 0.5
        v = uniform_draws(n.shape, n.device, generator)
        us = 0.5 - _ag.abs(u)
        k = _ag.floor((2 * a / us + b) * u + n * p + 0.5)
        inside = _ag.logical_and(k >= 0, k <= n)
        squeeze = _ag.logical_and(us >= 0.07, v <= vr)
        kept = _ag.clamp(_ag.minimum(k, n), 0, None)
        log_ratio = _ag.log(v * alpha / (a / (us * us) + b))
        log_pmf_ratio = (_ag.lgamma(m + 1) + _ag.lgamma(n - m + 1) - _ag.lgamma(kept + 1) - _ag.lgamma(n - kept + 1)
                         + (kept - m) * _ag.log(p / q))
        return _ag.logical_and(inside, _ag.logical_or(squeeze, log_ratio <= log_pmf_ratio)), k

    return rejection_rounds((count, prob), propose)


def binomial(count, prob, generator=None):
    """Draws from the binomial distribution of ``count`` trials of success
    probability ``prob`` (tensors that broadcast): for prob > 1/2, count minus
    a draw with 1 - prob; then means below 10 by searching the cumulative
    probabilities and larger ones by the transformed rejection method BTRS."""
    if not prob.dtype.is_floating_point:
        raise DtypeError(f"binomial: expected a floating tensor of probabilities, got {prob.dtype}")
    with _ag.no_grad():
        count, prob = broadcast_tensors(count, prob)
        n = count.detach().to(dtype=float64).reshape(-1)
        p = prob.detach().to(dtype=float64).reshape(-1)
        flipped = p > 0.5
        p = _ag.where(flipped, 1 - p, p)
        drawn = _split_by_mean(n * p, (n, p), lambda n_, p_: _binomial_search(n_, p_, generator),
                               lambda n_, p_: _binomial_btrs(n_, p_, generator))
        drawn = _ag.where(flipped, n - drawn, drawn)
        return drawn.to(dtype=prob.dtype).reshape(prob.shape)


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
        raise ArgumentError("multinomial: expected a 1-d or 2-d tensor of weights, got "
                            f"{getattr(input, 'shape', type(input).__name__)}")
    if num_samples <= 0:
        raise ArgumentError(f"multinomial: num_samples must be positive, got {num_samples}")
    with _ag.no_grad():
        rows = input.detach().to(dtype=float64).reshape(-1, input.shape[-1])
        # NaN fails both comparisons, so two reductions check every weight.
        if not (_ag.amin(rows).item() >= 0 and _ag.amax(rows).item() < inf):
            raise ArgumentError("multinomial: the weights must be finite and non-negative")
        if replacement:
            cumulative = _ag.cumsum(rows, -1)
            fewest = 1 if _ag.amin(cumulative[:, -1]).item() > 0 else 0
        else:
            fewest = _ag.amin((rows > 0).sum(-1)).item()
        if fewest == 0:
            raise ArgumentError("multinomial: every weight of a row is zero")
        if not replacement and num_samples > fewest:
            raise ArgumentError(f"multinomial: {num_samples} draws without replacement, but a row has only {fewest} "
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


__all__ = ["bernoulli", "binomial", "multinomial", "normal", "poisson"]

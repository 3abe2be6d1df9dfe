"""PyTorch's remaining elementwise functions and NaN-aware reductions, composed
of the differentiable ops in autograd.py (so their gradients come from those
ops' backward passes) and, where a composition would lose accuracy, computed
in float64 and rounded once to the result's dtype. gcd and lcm, which no
composition does without a loop, are the integer C op of csrc/ops_intmath.c;
the divisions with rounding (fmod, remainder, div's rounding modes) are
binary ops of csrc/ops.h, exact as C's fmod.
"""

import collections
import math
import numbers

from . import _C
from . import _complex
from . import autograd as _ag
from ._C import ArgumentError, DtypeError
from ._dtype import bool_, finfo, float32, float64, int32, promote, result_type, uint8
from .tensor import (_BITAND, _BITOR, _BITXOR, _DIV_FLOOR, _DIV_TRUNC, _FMOD, _LSHIFT, _NEXTAFTER, _REMAINDER, _RSHIFT,
                     Tensor, _is_float_scalar, full)


def _pair(input, other, what):
    """input and other as tensors on one device (a number becomes a 0-d tensor of
    the other's dtype, or float32 beside an integer tensor as PyTorch promotes)."""
    if not isinstance(input, Tensor):
        if not isinstance(other, Tensor):
            raise TypeError(f"{what}: expected a ddpc.Tensor, got {type(input).__name__} and {type(other).__name__}")
        return _ag._operand(input, other, what), other
    return input, _ag._operand(other, input, what)


def _float_pair(input, other, what):
    a, b = _pair(input, other, what)
    dt = result_type(a, b)
    if not dt.is_floating_point:
        dt = float32
    return (a if a.dtype is dt else a.to(dtype=dt)), (b if b.dtype is dt else b.to(dtype=dt))


# ---- arithmetic in PyTorch's function forms ----------------------------------------------

def _operands(input, other, alpha, what):
    """input and alpha * other, ready for autograd's broadcasting ops (which take a tensor first);
    other is scaled in the result's dtype, so that uint8 values times alpha do not wrap."""
    a, b = (input, other) if isinstance(input, Tensor) else _pair(input, other, what)
    if alpha != 1:
        if isinstance(b, numbers.Number) or (isinstance(b, Tensor) and b.is_sparse):
            return a, b * alpha
        b = _ag._operand(b, a, what)
        dt = result_type(a, b)
        b = _ag.mul(b if b.dtype is dt else b.to(dtype=dt), alpha)
    return a, b


def add(input, other, *, alpha=1):
    """input + alpha * other (either may be a number; the other a tensor)."""
    if isinstance(input, Tensor) and input.is_sparse:
        return input.add(other, alpha=alpha)
    return _ag.add(*_operands(input, other, alpha, "add"))


def sub(input, other, *, alpha=1):
    """input - alpha * other."""
    _ag.check_bool_sub(input, other)  # before alpha scales a bool other to int64
    return _ag.sub(*_operands(input, other, alpha, "sub"))


subtract = sub


def mul(input, other):
    """input * other (either may be a number; the other a tensor)."""
    return _ag.mul(*_operands(input, other, 1, "mul"))


multiply = mul


# ---- division with rounding ------------------------------------------------------------

def _rounded_division(a, b, op, what):
    """a op b for the rounding divisions of csrc/ops.h (_FMOD, _REMAINDER,
    _DIV_TRUNC, _DIV_FLOOR), detached and broadcast, in the operands'
    promoted dtype (16-bit floats through float32). An integer zero divisor
    raises ZeroDivisionError, as in PyTorch."""
    dt = result_type(a, b)
    if dt is bool_:
        raise NotImplementedError(f"{what}: not implemented for bool tensors")
    if not dt.is_floating_point and b.numel() and bool(_ag.any_(b == 0)):
        raise ZeroDivisionError(f"{what}: integer division by zero")
    work = float32 if dt in _ag._HALVES else dt
    out = _detached_binary(a, b, op, work)
    return out if work is dt else out.to(dtype=dt)


def _detached_binary(a, b, op, dt):
    """a op b by the binary op code ``op`` of csrc/ops.h, broadcast, computed in dt outside the graph."""
    x, y = (t.detach() if t.dtype is dt else t.detach().to(dtype=dt) for t in (a, b))
    out = _ag._empty(_ag._broadcast_shape(x.shape, y.shape), x, dt)
    if x.shape == y.shape:
        _C.binary(op, out._buf, x._buf, y._buf)
    else:
        _C.binary_broadcast(op, out._buf, x._buf, y._buf)
    return out


class _RemainderBackward(_ag.Node):
    """fmod's and remainder's gradients, as PyTorch's: the dividend's passes
    through, the divisor's is -g times the quotient rounded as the remainder
    was (toward zero for fmod, down for remainder)."""

    passes_through = True  # the dividend's gradient may be the incoming one itself
    double_backward = True  # recorded ops of g; the quotient is piecewise constant

    def __init__(self, a, b, quotient):
        super().__init__((a, b), (quotient,))
        self.shapes, self.dtypes = (a.shape, b.shape), (a.dtype, b.dtype)

    def backward(self, g):
        (q,) = self.saved
        ga = _ag._reduce_to(g, self.shapes[0], self.dtypes[0])
        gb = _ag._reduce_to(_ag.neg(_ag.mul(g, q)), self.shapes[1], self.dtypes[1])
        return ga, gb


def _remainder(input, other, op, quotient_op, what):
    a, b = _pair(input, other, what)
    r = _rounded_division(a, b, op, what)
    if _ag._needs_grad(a, b) and r.dtype.is_floating_point:
        _ag._attach(r, _RemainderBackward(a, b, _rounded_division(a, b, quotient_op, what)))
    return r


def fmod(input, other):
    """The remainder of input / other with the quotient rounded toward zero:
    C's fmod, exact for every pair, with the dividend's sign (also on a zero).
    Integers divided by 0 raise ZeroDivisionError."""
    return _remainder(input, other, _FMOD, _DIV_TRUNC, "fmod")


def remainder(input, other):
    """The remainder of input / other with the quotient rounded down: it has
    the divisor's sign, as Python's % (fmod's result, moved by one divisor
    where their signs differ, as PyTorch's). Errors as fmod."""
    return _remainder(input, other, _REMAINDER, _DIV_FLOOR, "remainder")


def floor_divide(input, other):
    """input / other rounded down, in the operands' promoted dtype (as PyTorch's
    floor_divide since 1.13); no gradient flows through it (PyTorch's backward
    raises, where div's rounding modes give zeros)."""
    a, b = _pair(input, other, "floor_divide")
    return _rounded_division(a, b, _DIV_FLOOR, "floor_divide")


def div(input, other, *, rounding_mode=None):
    """input / other; rounding_mode None divides (integers give float32), 'trunc'
    rounds toward zero and 'floor' down, keeping the promoted dtype, as
    PyTorch's: 'trunc' is trunc(input / other), 'floor' Python's // (the
    exact remainder taken out first), and a zero quotient keeps the sign of
    input / other. The rounded forms' gradients are zeros, as in PyTorch."""
    if rounding_mode is None:
        return _ag.div(*_operands(input, other, 1, "div"))
    if rounding_mode not in ("trunc", "floor"):
        raise ArgumentError(f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
    a, b = _pair(input, other, "div")
    out = _rounded_division(a, b, _DIV_TRUNC if rounding_mode == "trunc" else _DIV_FLOOR, "div")
    if _ag._needs_grad(a, b):
        _ag._attach(out, _ag._ZeroBackward((a, b), "DivBackward"))
    return out


divide = true_divide = div


# ---- elementwise functions ---------------------------------------------------------------

class _Atan2Backward(_ag.Node):
    double_backward = True

    def __init__(self, y, x):
        # y and x themselves are for a create_graph pass, which needs them in the graph.
        super().__init__((y, x), (y.detach(), x.detach(), y, x))
        self.shapes, self.dtypes = (y.shape, x.shape), (y.dtype, x.dtype)

    def backward(self, g):
        y, x = self.saved[2:] if _ag._mode.enabled else self.saved[:2]
        scale = _ag.div(g, _ag.add(_ag.mul(x, x), _ag.mul(y, y)))
        gy = _ag._reduce_to(_ag.mul(scale, x), self.shapes[0], self.dtypes[0])
        gx = _ag._reduce_to(_ag.neg(_ag.mul(scale, y)), self.shapes[1], self.dtypes[1])
        return gy, gx


def _sign_bit(t):
    """Where t's sign bit is set: negative numbers, -inf and -0 (whose reciprocal is -inf)."""
    return _ag.logical_or(t < 0, _ag.reciprocal(t) < 0)


def atan2(input, other):
    """The angle of the point (other, input) in [-pi, pi], as C's atan2 (and
    PyTorch's) also for signed zeros and infinities: the angle of (|other|,
    |input|) in the first quadrant, reflected by the signs; computed in float64
    and rounded once."""
    y, x = _float_pair(input, other, "atan2")
    with _ag.no_grad():
        y64, x64 = y.detach().to(dtype=float64), x.detach().to(dtype=float64)
        ay, ax = _ag.abs(y64), _ag.abs(x64)
        first = _ag.atan(ay / ax)
        first = _ag.where(_ag.logical_and(ay == 0, ax == 0), 0.0, first)
        first = _ag.where(_ag.logical_and(_ag.isinf(ay), _ag.isinf(ax)), math.pi / 4, first)
        angle = _ag.where(_sign_bit(x64), math.pi - first, first)
        out = _ag.where(_sign_bit(y64), -angle, angle).to(dtype=y.dtype)
    if _ag._needs_grad(y, x):
        _ag._attach(out, _Atan2Backward(y, x))
    return out


arctan2 = atan2


def hypot(input, other):
    """sqrt(input ** 2 + other ** 2), as C's hypot: scaled by the larger
    magnitude, so that it neither overflows nor underflows, and infinite where
    either operand is (also beside a NaN). 16-bit floats compute in float32."""
    a, b = _float_pair(input, other, "hypot")
    if a.dtype in _ag._HALVES:
        return hypot(a.float(), b.float()).to(dtype=a.dtype)
    with _ag.no_grad():
        scale = _ag.maximum(_ag.abs(a.detach()), _ag.abs(b.detach()))
        scale = _ag.where(_ag.logical_or(scale == 0, _ag.logical_not(_ag.isfinite(scale))), 1.0, scale)
    # hypot(a, b) = s * hypot(a / s, b / s) for any s > 0, so s may stay outside the graph
    out = _ag.mul(_ag.sqrt(_ag.add(_ag.square(_ag.div(a, scale)), _ag.square(_ag.div(b, scale)))), scale)
    return _ag.where(_ag.logical_or(_ag.isinf(a.detach()), _ag.isinf(b.detach())), math.inf, out)


def _times_log(input, other, log_fn, bound, what):
    """input * log_fn(other), and 0 where input is 0 (NaN where other is NaN), as
    in PyTorch. As there, input's gradient is log_fn(other) also where input is
    0 (0 where other is at most ``bound``, outside log_fn's domain): with the
    log-density of Beta, Gamma or Dirichlet at concentration 1, the gradient
    of the concentration rests on it."""
    x, y = _float_pair(input, other, what)
    zero = (x == 0)
    safe = 1.0 if bound == 0 else 0.0  # log_fn(safe) == 0
    # Where input is 0, input times a finite stand-in for log_fn(other): the
    # value 0, and log_fn(other) as input's gradient. Each log_fn reads only
    # the elements its branch keeps, so the other's do not bring NaN gradients.
    big = finfo(x.dtype).max
    at_zero = _ag.clamp(log_fn(_ag.where(zero & (y > bound), y, safe)), -big, big)
    out = _ag.where(zero, _ag.add(_ag.mul(x, at_zero), 0.0), _ag.mul(x, log_fn(_ag.where(zero, safe, y))))
    return _ag.where(_ag.isnan(y), math.nan, out)


def xlogy(input, other):
    """input * log(other), and 0 where input is 0 (NaN where other is NaN), as
    in PyTorch, whose gradients it has (input's is log(other) also where input is 0)."""
    return _times_log(input, other, _ag.log, 0.0, "xlogy")


def xlog1py(input, other):
    """input * log1p(other), and 0 where input is 0 (NaN where other is NaN),
    as PyTorch's torch.special.xlog1py, whose gradients it has."""
    return _times_log(input, other, _ag.log1p, -1.0, "xlog1py")


def logit(input, eps=None):
    """log(p / (1 - p)), with p clamped to [eps, 1 - eps] when eps is given."""
    p = _ag._as_float(input)
    if eps is not None:
        p = _ag.clamp(p, eps, 1 - eps)
    return _ag.sub(_ag.log(p), _ag.log1p(_ag.neg(p)))


def rsub(input, other, *, alpha=1):
    """other - alpha * input (either may be a number; the other a tensor)."""
    return sub(other, input, alpha=alpha)


def fill(input, value):
    """A tensor like input filled with value (a number or a 0-d tensor, whose
    gradient is the sum of the result's; input's is 0)."""
    if not isinstance(input, Tensor):
        raise TypeError(f"fill: expected a ddpc.Tensor, got {type(input).__name__}")
    if isinstance(value, Tensor):
        if value.ndim:
            raise ArgumentError(f"fill only supports 0-dimension value tensor but got tensor with {value.ndim} "
                                "dimensions.")
        value = value.to(dtype=input.dtype)
    else:
        value = full((), value, dtype=input.dtype, device=input.device)
    return _ag.where(full(input.shape, True, device=input.device), value, input)


def nextafter(input, other):
    """The next float after input towards other, elementwise and broadcast
    (other where they are equal): C's nextafter in a binary op of
    csrc/ops.h. float32 and float64 only (PyTorch also takes the 16-bit
    floats). No gradient, as in PyTorch."""
    a, b = _pair(input, other, "nextafter")
    dt = result_type(a, b)
    if dt not in (float32, float64):
        raise DtypeError(f"nextafter: expected float32 or float64 tensors, got {a.dtype} and {b.dtype}")
    return _detached_binary(a, b, _NEXTAFTER, dt)


def _float_mask(input, fn, what):
    if not isinstance(input, Tensor):
        raise TypeError(f"{what}: expected a ddpc.Tensor, got {type(input).__name__}")
    if input.dtype.is_complex:
        raise DtypeError(f"{what} does not support complex inputs.")
    with _ag.no_grad():
        x = input.detach()
        return fn(x) if x.dtype.is_floating_point else _ag._empty(x.shape, x, bool_).fill_(0)


def isposinf(input):
    """Whether each element is +inf (bool; all false for integers)."""
    return _float_mask(input, lambda x: x == math.inf, "isposinf")


def isneginf(input):
    """Whether each element is -inf (bool; all false for integers)."""
    return _float_mask(input, lambda x: x == -math.inf, "isneginf")


def isreal(input):
    """Whether each element has no imaginary part (a bool mask; all true for a real tensor)."""
    if not isinstance(input, Tensor):
        raise TypeError(f"isreal: expected a ddpc.Tensor, got {type(input).__name__}")
    if input.dtype.is_complex:
        return input.imag == 0
    return _ag._empty(input.shape, input, bool_).fill_(1)


def sgn(input):
    """input / |input| (0 at 0) for a complex input; sign(input) for a real one."""
    return _complex.sgn(input)


def frac(input):
    """input - trunc(input): the fractional part, with input's sign."""
    if not input.dtype.is_floating_point:
        raise DtypeError(f"frac: expected a floating tensor, got {input.dtype}")
    return _ag.sub(input, _ag.trunc(input))


def hardshrink(input, lambd=0.5):
    """input where |input| > lambd, else 0 (NaN stays NaN)."""
    return _ag.where(_ag.abs(input.detach()) <= lambd, 0.0, input)


def bitwise_not(input):
    """~input for integer tensors (-input - 1; 255 - input for uint8), logical not
    for bool ones; floats have no bits to flip in PyTorch either."""
    if input.dtype.is_floating_point or input.dtype.is_complex:
        raise DtypeError(f"bitwise_not: expected an integer tensor, got {input.dtype}")
    if input.dtype is bool_:
        return _ag.logical_not(input)
    with _ag.no_grad():
        return _ag.rsub(input, 255) if input.dtype is uint8 else _ag.rsub(input, -1)


def _check_bitwise(input, other, name):
    """Refuses float operands as PyTorch does (NotImplementedError, a RuntimeError)."""
    for v in (input, other):
        if isinstance(v, Tensor) and v.dtype.is_floating_point or not isinstance(v, Tensor) and _is_float_scalar(v):
            dt = v.dtype if isinstance(v, Tensor) else type(v).__name__
            raise NotImplementedError(f"{name}: not implemented for {dt}; bitwise ops take integer tensors")


def _bitwise(input, other, op, name):
    """input op other on integer tensors, broadcast; either may be a number
    (taken in the tensor's dtype, as PyTorch), the other a tensor."""
    _check_bitwise(input, other, name)
    if not isinstance(input, Tensor):
        if not isinstance(other, Tensor):
            raise TypeError(f"{name}: expected a ddpc.Tensor, got {type(input).__name__} and {type(other).__name__}")
        return _ag._binary(other, input, _ag._SWAPPED[op])
    return _ag._binary(input, other, op)


def bitwise_and(input, other):
    """input & other on integer and bool tensors."""
    return _bitwise(input, other, _BITAND, "bitwise_and")


def bitwise_or(input, other):
    return _bitwise(input, other, _BITOR, "bitwise_or")


def bitwise_xor(input, other):
    return _bitwise(input, other, _BITXOR, "bitwise_xor")


def bitwise_left_shift(input, other):
    """input << other on integer tensors, as PyTorch: the bits shifted out of
    the dtype are lost, and a count that is negative or not smaller than the
    dtype's width gives 0. A count from a number must fit the tensor's dtype
    (taken modulo 256 for uint8), where PyTorch wraps it."""
    return _bitwise(input, other, _LSHIFT, "bitwise_left_shift")


def bitwise_right_shift(input, other):
    """input >> other on integer tensors, arithmetic (the sign fills in), as
    PyTorch: a count that is negative or not smaller than the dtype's width
    shifts every bit out, giving -1 for negative values and 0 otherwise."""
    return _bitwise(input, other, _RSHIFT, "bitwise_right_shift")


def bitwise_inplace(input, other, op, name):
    """input op= other, written into input (the result cast to its dtype, as in-place ops do)."""
    _check_bitwise(input, other, name)
    return input._inplace(other, op)


Frexp = collections.namedtuple("frexp", "mantissa exponent")
Frexp.__doc__ = "What frexp returns, as torch.return_types.frexp: (mantissa, exponent)."


def _float_input(input, what):
    """input as a float tensor: integers become float32, as PyTorch's unary float functions make them."""
    if not isinstance(input, Tensor):
        raise TypeError(f"{what}: expected a ddpc.Tensor, got {type(input).__name__}")
    return input if input.dtype.is_floating_point else input.to(dtype=float32)


def _logaddexp(input, other, log_of_1_plus, what):
    a, b = _pair(input, other, what)
    dt = promote(a.dtype, b.dtype)
    if not dt.is_floating_point:
        raise DtypeError(f"{what}: needs floating tensors, got {a.dtype} and {b.dtype}")
    if dt in _ag._HALVES:  # computed in float32 and rounded once, as PyTorch computes 16-bit floats
        return _logaddexp(a.to(dtype=float32), b.to(dtype=float32), log_of_1_plus, what).to(dtype=dt)
    a, b = a.to(dtype=dt), b.to(dtype=dt)
    big = _ag.maximum(a, b)
    out = _ag.add(big, log_of_1_plus(_ag.neg(_ag.abs(_ag.sub(a, b)))))
    # Equal infinities: their difference is NaN, the answer the infinity itself.
    return _ag.where(_ag.logical_and(_ag.isinf(a.detach()), a.detach() == b.detach()), a, out)


def logaddexp(input, other):
    """log(exp(input) + exp(other)) without overflow: max + log1p(exp(-|input - other|));
    floating tensors only, as PyTorch."""
    return _logaddexp(input, other, lambda d: _ag.log1p(_ag.exp(d)), "logaddexp")


def logaddexp2(input, other):
    """log2(2 ** input + 2 ** other) without overflow, as logaddexp in base 2."""
    return _logaddexp(input, other, lambda d: _ag.mul(_ag.log1p(_ag.exp2(d)), 1 / math.log(2)), "logaddexp2")


def signbit(input):
    """Whether each element's sign bit is set (bool): true for
    negative numbers and -0. ddpc cannot read a NaN's bits, so every NaN gives
    false where PyTorch reports the sign of a negative NaN."""
    if not isinstance(input, Tensor):
        raise TypeError(f"signbit: expected a ddpc.Tensor, got {type(input).__name__}")
    with _ag.no_grad():
        x = input.detach()
        if not x.dtype.is_floating_point:
            return x < 0
        # -0 is the zero whose reciprocal is -inf.
        return _ag.logical_or(x < 0, _ag.logical_and(x == 0, _ag.reciprocal(x) < 0))


def copysign(input, other):
    """|input| with the sign of other (-0 counts as negative; NaN as signbit
    reads it); a float result. The gradient flows to input only (0 where it is 0)."""
    a, b = _float_pair(input, other, "copysign")
    size = _ag.abs(a)
    return _ag.where(signbit(b), _ag.neg(size), size)


def heaviside(input, values):
    """The step function: 0 where input < 0 (and NaN), 1 where > 0, ``values``
    where input is 0; input and values of one dtype, as PyTorch requires. No gradient."""
    if not isinstance(input, Tensor) or not isinstance(values, Tensor):
        raise TypeError("heaviside: input and values must be ddpc tensors")
    if input.dtype is not values.dtype:
        raise DtypeError(f"heaviside: input is {input.dtype} and values {values.dtype}: heaviside takes one dtype")
    with _ag.no_grad():
        x = input.detach()
        return _ag.where(x == 0, values.detach(), (x > 0).to(dtype=x.dtype))


def deg2rad(input):
    """Degrees to radians (integers give float32)."""
    return _ag.mul(_float_input(input, "deg2rad"), math.pi / 180)


def rad2deg(input):
    """Radians to degrees (integers give float32)."""
    return _ag.mul(_float_input(input, "rad2deg"), 180 / math.pi)


def sinc(input):
    """The normalized sinc, sin(pi x) / (pi x), and 1 at 0 (integers give
    float32; 16-bit floats are computed in float32 and rounded once)."""
    x = _float_input(input, "sinc")
    if x.dtype in _ag._HALVES:
        return sinc(x.to(dtype=float32)).to(dtype=x.dtype)
    zero = x.detach() == 0
    px = _ag.mul(_ag.where(zero, 1.0, x), math.pi)
    return _ag.where(zero, 1.0, _ag.div(_ag.sin(px), px))


def _times_pow2(t, e):
    """t * 2 ** e (float64) in two factors, so that neither overflows for the
    exponents of float64's subnormals and largest numbers."""
    half = _ag.floor(_ag.div(e, 2.0))
    return _ag.mul(_ag.mul(t, _ag.exp2(half)), _ag.exp2(_ag.sub(e, half)))


def frexp(input):
    """(mantissa, exponent) with input = mantissa * 2 ** exponent, 0.5 <= |mantissa| < 1
    (mantissa 0 and exponent 0 for zero; inf and NaN keep their value with
    exponent 0); exponent int32. Float input; exact (computed in float64)."""
    if not isinstance(input, Tensor) or not input.dtype.is_floating_point:
        raise DtypeError("frexp: expected a floating ddpc tensor")
    with _ag.no_grad():
        x = input.detach().to(dtype=float64)
        regular = _ag.logical_and(_ag.isfinite(x), x != 0)
        size = _ag.where(regular, _ag.abs(x), 1.0)
        e = _ag.add(_ag.floor(_ag.log2(size)), 1.0)
        # log2 may round across a power of two: step e so that 0.5 <= |m| < 1.
        for _ in range(2):
            m = _times_pow2(size, _ag.neg(e))
            e = _ag.add(e, _ag.sub((m >= 1).to(dtype=float64), (m < 0.5).to(dtype=float64)))
        m = _times_pow2(x, _ag.neg(e))
        mantissa = _ag.where(regular, m, x).to(dtype=input.dtype)
        exponent = _ag.where(regular, e, 0.0).to(dtype=int32)
    return Frexp(mantissa, exponent)


def ldexp(input, other):
    """input * 2 ** other (a float result)."""
    a, b = _float_pair(input, other, "ldexp")
    return _ag.mul(a, _ag.exp2(b))


def _gcd_lcm(input, other, want_lcm, what):
    a, b = _pair(input, other, what)
    dt = promote(a.dtype, b.dtype)
    if dt.is_floating_point:
        raise DtypeError(f"{what}: needs integer tensors, got {a.dtype} and {b.dtype}")
    shape = _ag._broadcast_shape(a.shape, b.shape)
    with _ag.no_grad():
        a, b = (_ag.expand(t.detach().to(dtype=dt), shape).contiguous() for t in (a, b))
        out = _ag._empty(shape, a)
        _C.gcd(out._buf, a._buf, b._buf, want_lcm)
    return out


def gcd(input, other):
    """The greatest common divisor of each pair of integers (non-negative;
    gcd(0, 0) = 0), by Euclid's algorithm in a C op on the tensors' device."""
    return _gcd_lcm(input, other, False, "gcd")


def lcm(input, other):
    """The least common multiple of each pair of integers: |a / gcd(a, b) * b|,
    0 when either is 0; it wraps where it overflows the dtype."""
    return _gcd_lcm(input, other, True, "lcm")


# ---- reductions that skip NaN ---------------------------------------------------------------

def _not_nan(input):
    if input.dtype.is_complex:
        raise DtypeError("nansum does not support complex inputs.")
    return _ag.where(_ag.isnan(input), 0.0, input) if input.dtype.is_floating_point else input


def nansum(input, dim=None, keepdim=False, *, dtype=None):
    """The sum (over ``dim``) with NaN counted as zero."""
    if dtype is not None:
        input = input.to(dtype=dtype)
    return _ag.sum(_not_nan(input), dim, keepdim, dtype=dtype)


def nanmean(input, dim=None, keepdim=False, *, dtype=None):
    """The mean (over ``dim``) of the elements that are not NaN (NaN where all are)."""
    if dtype is not None:
        input = input.to(dtype=dtype)
    if not input.dtype.is_floating_point:
        raise DtypeError(f"nanmean: expected a floating tensor, got {input.dtype}")
    dims = _ag._reduction_dims(input, dim)
    count = _ag.sum(_ag.logical_not(_ag.isnan(input)).to(dtype=input.dtype), dims, keepdim)
    return _ag.div(_ag.sum(_not_nan(input), dims, keepdim), count)


def _nan_ignoring(input, other, extreme):
    """fmax and fmin: extreme(input, other), or the operand that is not NaN
    (input where both are). The gradient goes to the operand taken, half to
    each at ties, as in PyTorch."""
    if not isinstance(input, Tensor) or not isinstance(other, Tensor):
        raise TypeError("fmax and fmin take two ddpc tensors")
    return _ag.where(_ag.isnan(other), input, _ag.where(_ag.isnan(input), other, extreme(input, other)))


def fmax(input, other):
    """The elementwise maximum, ignoring a NaN on either side (NaN where both are)."""
    return _nan_ignoring(input, other, _ag.maximum)


def fmin(input, other):
    """The elementwise minimum, ignoring a NaN on either side (NaN where both are)."""
    return _nan_ignoring(input, other, _ag.minimum)


def float_power(input, exponent):
    """input ** exponent computed in float64 (either may be a number), as PyTorch's."""
    if not isinstance(input, Tensor) and not isinstance(exponent, Tensor):
        raise TypeError("float_power takes at least one ddpc tensor")
    a = input.to(dtype=float64) if isinstance(input, Tensor) else float(input)
    b = exponent.to(dtype=float64) if isinstance(exponent, Tensor) else exponent
    return a ** b


def float_power_(input, exponent):
    """float_power written into input, which must be float64 (the result's dtype), as in PyTorch."""
    if input.dtype is not float64:
        raise DtypeError(f"the base given to float_power_ has dtype {input.dtype} but the operation's result "
                         "requires dtype float64")
    return _ag.inplace_apply(input, lambda t: float_power(t, exponent), "float_power_", (exponent,))


__all__ = ["add", "arctan2", "atan2", "bitwise_and", "bitwise_left_shift", "bitwise_not", "bitwise_or",
           "bitwise_right_shift", "bitwise_xor", "copysign", "deg2rad", "div", "divide", "fill", "float_power",
           "floor_divide", "fmax", "fmin", "fmod", "frac", "frexp", "gcd", "hardshrink", "heaviside", "hypot",
           "isneginf", "isposinf", "isreal", "lcm", "ldexp", "logaddexp", "logaddexp2", "logit", "mul", "multiply",
           "nanmean", "nansum", "nextafter", "rad2deg", "remainder", "rsub", "sgn", "signbit", "sinc", "sub",
           "subtract", "true_divide", "xlogy"]

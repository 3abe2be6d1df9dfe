"""Complex tensors (complex64, complex128): the views between a complex tensor
and its (real, imaginary) pairs, and the complex arithmetic of
csrc/ops_complex.c with its backward passes.

Gradients follow PyTorch's convention: the gradient of a real loss L with
respect to z is dL/dRe(z) + i dL/dIm(z), so that for y = a * b the gradient
of a is grad_y * conj(b). Everything else on complex tensors (sums, means,
products, matrix products, indexing, gather, where, stacking, ``complex``,
``polar``) is composed of
the real ops on ``view_as_real`` pairs, whose backward passes then give
gradients in that convention too.
"""

import builtins
import math
import numbers

from . import _C
from . import autograd as _ag
from ._C import ArgumentError, DtypeError, IndexOutOfRangeError
from ._dtype import bool_, complex_of, float32, float64, real_of, result_type
from .amp import autocast_op
from .autograd import Node
from .tensor import Tensor, _CopyOf, _copy_view

# csrc/ops_complex.h's codes; the binary ones are tensor.py's first eight.
_ADD, _SUB, _MUL, _DIV, _RSUB, _RDIV, _EQ, _NE = range(8)
_NEG, _CONJ, _EXP, _LOG, _SQRT, _RECIPROCAL, _SGN, _POW, _ABS, _ANGLE = range(10)
_BINARY_NAMES = {8: "lt", 9: "le", 10: "gt", 11: "ge", 12: "maximum", 13: "minimum", 14: "pow", 15: "pow"}


def resolve_conj(input):
    """input itself: ddpc's conj computes the conjugate, so no tensor is a lazy one."""
    return input


def resolve_neg(input):
    return input


def is_conj(input):
    """False: ddpc's conj computes the conjugate instead of flagging a view (see conj)."""
    return False


def is_complex_operand(x):
    return (isinstance(x, Tensor) and x.dtype.is_complex) or isinstance(x, builtins.complex)


# ---- views ------------------------------------------------------------------------------

class _ViewAsRealBackward(Node):
    double_backward = True

    def __init__(self, x):
        super().__init__((x,))

    def backward(self, g):
        return (view_as_complex(g.contiguous()),)


class _ViewAsComplexBackward(Node):
    double_backward = True

    def __init__(self, x):
        super().__init__((x,))

    def backward(self, g):
        return (view_as_real(g),)


def view_as_real(input):
    """The complex tensor as a real one of shape (*shape, 2): the real and the
    imaginary parts along the last dim, sharing memory with input (a write
    through either shows in the other)."""
    if not isinstance(input, Tensor) or not input.dtype.is_complex:
        raise RuntimeError("view_as_real is only supported for complex tensors")
    out = Tensor(input._buf.view(0, tuple(input.shape) + (2,), real_of(input.dtype).name))
    out._not_a_view = _copy_view(input)  # what input stands for, this stands for too (a conj's writes are refused)
    return _ag._attach_view(out, input, None, _ViewAsRealBackward, writable=False)


@autocast_op("float32_cpu")
def view_as_complex(input):
    """The float32 or float64 tensor of shape (*shape, 2) as a complex one of
    shape ``shape``, sharing its memory. As PyTorch, the last dim must be 2
    and the storage offset even. ddpc's tensors are row-major, so the stride
    rules of PyTorch hold for every tensor ddpc accepts (where PyTorch's
    tensor is a strided view, ddpc's is a copy; see Tensor)."""
    if not isinstance(input, Tensor) or input.dtype not in (float32, float64):
        got = input.dtype if isinstance(input, Tensor) else type(input).__name__
        raise RuntimeError(f"view_as_complex is only supported for float and double tensors, but got a tensor of "
                           f"scalar type: {got}")
    if input.ndim == 0:
        raise RuntimeError("Input tensor must have one or more dimensions")
    if input.shape[-1] != 2:
        raise RuntimeError("Tensor must have a last dimension of size 2")
    if input.numel() and input._buf.data_ptr % (2 * input.dtype.itemsize):
        raise RuntimeError("Tensor must have a storage_offset divisible by 2")
    out = Tensor(input._buf.view(0, tuple(input.shape[:-1]), complex_of(input.dtype).name))
    return _ag._attach_view(out, input, None, _ViewAsComplexBackward, writable=False)


def real(input):
    """The real part: a tensor that writes back into input's memory (as
    PyTorch's view does, see Tensor for ddpc's views); input itself when real."""
    if not input.dtype.is_complex:
        return input
    return view_as_real(input)[..., 0]


def imag(input):
    """The imaginary part, written back into input as ``real``; complex tensors only, as PyTorch."""
    if not input.dtype.is_complex:
        raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")
    return view_as_real(input)[..., 1]


def complex(real, imag):
    """real + i imag from two float32 or float64 tensors of one dtype (broadcast)."""
    if not (isinstance(real, Tensor) and isinstance(imag, Tensor)) or real.dtype is not imag.dtype or \
            real.dtype not in (float32, float64):
        names = [t.dtype if isinstance(t, Tensor) else type(t).__name__ for t in (real, imag)]
        raise RuntimeError(f"Expected both inputs to be Float or Double tensors but got {names[0]} and {names[1]}")
    from .tensor import broadcast_tensors

    real, imag = broadcast_tensors(real, imag)
    return view_as_complex(_ag.stack([real, imag], -1))


@autocast_op("float32_cpu")
def polar(abs, angle):
    """abs * (cos(angle) + i sin(angle)), as torch.polar."""
    return complex(_ag.mul(abs, _ag.cos(angle)), _ag.mul(abs, _ag.sin(angle)))


# ---- elementwise ------------------------------------------------------------------------

def _new(shape, like, dtype=None):
    return Tensor(_C.Buffer(tuple(shape), (dtype or like.dtype).name, like._buf.device))


def _expand(x, shape):
    """x broadcast to shape (a copy; recorded through the real pairs, whose backward sums)."""
    if tuple(x.shape) == tuple(shape):
        return x
    pairs = view_as_real(x).reshape((1,) * (len(shape) - x.ndim) + tuple(x.shape) + (2,))
    return view_as_complex(pairs.expand(tuple(shape) + (2,)).contiguous())


class _ComplexBinaryBackward(Node):
    double_backward = True

    def __init__(self, x, y, op, out):
        super().__init__((x, y), (x, y, out.detach()) if op in (_MUL, _DIV) else ())
        self.op = op
        self.passes_through = op in (_ADD, _SUB)

    def backward(self, g):
        op = self.op
        if op == _ADD:
            return g, g
        if op == _SUB:
            return g, neg(g)
        x, y, out = self.saved
        if op == _MUL:
            return binary(g, conj(y), _MUL), binary(g, conj(x), _MUL)
        out = _ag._output(self, out)
        gx = binary(g, conj(y), _DIV)
        return gx, neg(binary(gx, conj(out), _MUL))


class _ComplexScalarBackward(Node):
    double_backward = True

    def __init__(self, x, op, s, out):
        super().__init__((x,), (x, out.detach()) if op == _RDIV else ())
        self.op, self.s = op, s
        self.passes_through = op in (_ADD, _SUB)

    def backward(self, g):
        op, s = self.op, self.s
        if op in (_ADD, _SUB):
            return (g,)
        if op == _RSUB:
            return (neg(g),)
        if op == _MUL:
            return (binary(g, s.conjugate(), _MUL),)
        if op == _DIV:
            return (binary(g, s.conjugate(), _DIV),)
        x, out = self.saved  # s / x: -g conj(out / x)
        return (neg(binary(g, conj(binary(_ag._output(self, out), x, _DIV)), _MUL)),)


def _as_dtype(x, dtype):
    return x if x.dtype is dtype else x.to(dtype=dtype)


def binary(a, b, op):
    """a op b where a or b is complex: add, sub, mul, div (and their swapped
    forms with a number b), and == and != (no gradient)."""
    if op not in (_ADD, _SUB, _MUL, _DIV, _RSUB, _RDIV, _EQ, _NE):
        raise DtypeError(f"{_BINARY_NAMES.get(op, 'this op')} does not support complex tensors")
    dt = result_type(a, b)
    if isinstance(b, numbers.Number):
        if op in (_EQ, _NE):
            from .tensor import full

            b = full((), b, dtype=dt, device=a.device)
        else:
            x = _as_dtype(a, dt)
            s = builtins.complex(b)
            out = _new(x.shape, x)
            _C.complex_scalar(op, out._buf, x._buf, s.real, s.imag)
            if _ag._needs_grad(x):
                _ag._attach(out, _ComplexScalarBackward(x, op, s, out))
            return out
    if not isinstance(b, Tensor):
        from .tensor import tensor

        b = tensor(b, device=a.device)
        dt = result_type(a, b)
    if op in (_RSUB, _RDIV):
        a, b, op = b, a, _SUB if op == _RSUB else _DIV
    if a._buf.device != b._buf.device:
        raise ArgumentError(f"tensors are on different devices ({a.device} and {b.device})")
    shape = _ag._broadcast_shape(a.shape, b.shape)
    x, y = _expand(_as_dtype(a, dt), shape), _expand(_as_dtype(b, dt), shape)
    if op in (_EQ, _NE):
        out = _new(shape, x, bool_)
        _C.complex_binary(op, out._buf, x._buf, y._buf)
        return out
    out = _new(shape, x)
    _C.complex_binary(op, out._buf, x._buf, y._buf)
    if _ag._needs_grad(x, y):
        _ag._attach(out, _ComplexBinaryBackward(x, y, op, out))
    return out


class _ComplexUnaryBackward(Node):
    double_backward = True
    _NAMES = ("NegBackward", "ConjBackward", "ExpBackward", "LogBackward", "SqrtBackward", "ReciprocalBackward",
              "SgnBackward", "PowBackward", "AbsBackward", "AngleBackward")

    def __init__(self, x, op, p, out):
        super().__init__((x,), (x, out.detach()))
        self.op, self.p = op, p

    def name(self):
        return self._NAMES[self.op]

    def backward(self, g):
        op, p = self.op, self.p
        x, out = self.saved
        if op in (_EXP, _SQRT, _RECIPROCAL, _SGN):
            out = _ag._output(self, out)
        if op == _NEG:
            return (neg(g),)
        if op == _CONJ:
            return (conj(g),)
        if op == _EXP:
            return (binary(g, conj(out), _MUL),)
        if op == _LOG:
            return (binary(g, conj(x), _DIV),)
        if op == _SQRT:
            return (binary(g, binary(conj(out), 2.0, _MUL), _DIV),)
        if op == _RECIPROCAL:
            return (neg(binary(g, conj(binary(out, out, _MUL)), _MUL)),)
        if op == _POW:  # g conj(p x^(p-1))
            return (binary(g, conj(binary(unary(x, _POW, p - 1), p, _MUL)), _MUL),)
        r = abs(x)
        nonzero = (r.detach() != 0).to(dtype=r.dtype)
        safe = _ag.add(r, _ag.rsub(nonzero, 1))  # |x|, 1 where x is 0 (whose gradient is 0)
        if op == _ABS:  # g sgn(x)
            return (binary(unary(x, _SGN), g, _MUL),)
        if op == _ANGLE:  # g i x / |x|^2
            return (binary(binary(binary(x, 1j, _MUL), _ag.mul(g, nonzero), _MUL), _ag.mul(safe, safe), _DIV),)
        # sgn: (g - Re(g conj(s)) s) / |x|
        along = real(binary(g, conj(out), _MUL))
        return (binary(binary(binary(g, binary(out, along, _MUL), _SUB), nonzero, _MUL), safe, _DIV),)


def unary(x, op, p=0.0):
    out = _new(x.shape, x, real_of(x.dtype) if op in (_ABS, _ANGLE) else None)
    _C.complex_unary(op, out._buf, x._buf, float(p))
    if _ag._needs_grad(x):
        _ag._attach(out, _ComplexUnaryBackward(x, op, float(p), out))
    return out


# The ops of autograd.py's _unary that have a complex form here, by name.
_FROM_REAL_UNARY = {"exp": _EXP, "log": _LOG, "sqrt": _SQRT, "reciprocal": _RECIPROCAL, "abs": _ABS}


def real_unary(x, op):
    """autograd.py's unary op code ``op`` on a complex x: its complex form, or a TypeError."""
    names = _ag._UnaryBackward._NAMES
    name = names[op][:-len("Backward")].lower() if op < len(names) else "this function"
    composed = {"sin": sin, "cos": cos, "tanh": tanh}
    if name in composed:
        return composed[name](x)
    if name not in _FROM_REAL_UNARY:
        raise DtypeError(f"{name} does not support {x.dtype}")
    return unary(x, _FROM_REAL_UNARY[name])


# sin, cos and tanh are composed of exp, so their gradients come from exp's and the arithmetic's
# backward passes. Where |z| is tiny, sin(z) and tanh(z) carry an absolute error of about eps (the
# difference of two numbers near 1) where PyTorch's are accurate relative to |z|.

def _exp_times(x, s):
    """exp(s x) for a complex number s."""
    return unary(binary(x, s, _MUL), _EXP)


def sin(x):
    """(e^{ix} - e^{-ix}) / 2i."""
    return binary(binary(_exp_times(x, 1j), _exp_times(x, -1j), _SUB), 2j, _DIV)


def cos(x):
    """(e^{ix} + e^{-ix}) / 2."""
    return binary(binary(_exp_times(x, 1j), _exp_times(x, -1j), _ADD), 2.0, _DIV)


def tanh(x):
    """s (1 - u) / (1 + u) with u = e^{-2 s x} and s the sign of Re(x) (1 at 0): |u| <= 1, so nothing
    overflows where Re(x) is large."""
    with _ag.no_grad():
        s = _ag.where(real(x) >= 0, 1.0, -1.0).to(dtype=real_of(x.dtype))
    u = unary(binary(x, _ag.mul(s, -2.0), _MUL), _EXP)
    return binary(binary(binary(u, 1.0, _RSUB), binary(u, 1.0, _ADD), _DIV), s, _MUL)


def neg(x):
    return unary(x, _NEG) if x.dtype.is_complex else _ag.neg(x)


def conj(input):
    """The complex conjugate. ddpc computes it (PyTorch returns a lazily
    conjugated view; ddpc's is a new tensor, so ``is_conj()`` is False and a
    write into it, which would not reach input, is refused). A real tensor
    is returned as it is."""
    if not input.dtype.is_complex:
        return input
    out = unary(input, _CONJ)
    out._not_a_view = _CopyOf(None, None, "conj")
    return out


def conj_physical(input):
    """The complex conjugate, computed: a tensor of its own, as PyTorch's."""
    return unary(input, _CONJ) if input.dtype.is_complex else input


def abs(x):
    return unary(x, _ABS) if x.dtype.is_complex else _ag.abs(x)


def angle(input):
    """The argument atan2(imag, real) of each element; for a real tensor, pi
    where it is negative and 0 elsewhere (NaN stays NaN), as PyTorch."""
    if input.dtype.is_complex:
        return unary(input, _ANGLE)
    xf = input if input.dtype.is_floating_point else input.to(dtype=float32)
    with _ag.no_grad():
        out = _ag.mul((xf < 0).to(dtype=xf.dtype), math.pi)
        out = _ag.add(out, _ag.mul(xf, 0))  # NaN in, NaN out
    return out


def sgn(x):
    """x / |x| (0 at 0) for complex x; sign(x) for a real one."""
    return unary(x, _SGN) if x.dtype.is_complex else _ag.sign(x)


def pow(x, exponent):
    """x ** exponent for complex x and a real number exponent."""
    if isinstance(exponent, Tensor) or not isinstance(exponent, numbers.Real):
        raise DtypeError("pow of a complex tensor takes a real number exponent in ddpc (PyTorch also takes complex "
                         "and tensor exponents)")
    return unary(x, _POW, exponent)


# ---- reductions and products ---------------------------------------------------------------

def _pair_dims(x, dim):
    """dim (None, an int or ints) of x as dims of view_as_real(x) (never its last)."""
    if dim is None or (isinstance(dim, (tuple, list)) and not dim):
        return tuple(range(x.ndim))
    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
    n = max(x.ndim, 1)
    for d in dims:
        if not -n <= d < n:
            raise IndexOutOfRangeError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got "
                                       f"{d})")
    return tuple(d % n for d in dims)


def _part_by_part(reduce, x, dim, keepdim):
    pairs, dims = view_as_real(x), _pair_dims(x, dim)
    return view_as_complex(reduce(pairs, dims, keepdim).contiguous() if dims else _ag.clone(pairs))


def sum(x, dim=None, keepdim=False):
    """The sum of a complex tensor, part by part."""
    return _part_by_part(_ag.sum, x, dim, keepdim)


def mean(x, dim=None, keepdim=False):
    """The mean of a complex tensor, part by part."""
    return _part_by_part(_ag.mean, x, dim, keepdim)


def prod(x, dim=None, keepdim=False):
    """The product of a complex tensor over ``dim`` (every element when None):
    the first half of the line times the second, repeated, so log2(n) complex
    products whose backward passes give the gradient (zeros included)."""
    if dim is None:
        out = prod(x.reshape(-1), 0)
        return out.reshape((1,) * x.ndim if keepdim else ())
    (d,) = _pair_dims(x, dim)
    if x.ndim == 0:
        return view_as_complex(_ag.clone(view_as_real(x)))
    if x.shape[d] == 0:
        from .tensor import ones

        out = ones(x.shape[:d] + (1,) + x.shape[d + 1:], dtype=x.dtype, device=x.device)
        return out if keepdim else out.squeeze(d)
    while x.shape[d] > 1:
        n, half = x.shape[d], x.shape[d] // 2
        head = binary(x.narrow(d, 0, half), x.narrow(d, half, half), _MUL)
        x = head if n % 2 == 0 else _ag.cat([head, x.narrow(d, n - 1, 1)], d)
    return x if keepdim else x.squeeze(d)


def where(mask, a, b):
    """a where mask holds, else b, for complex a and b of one dtype: both parts selected alike."""
    pairs = _ag.where(mask.reshape(tuple(mask.shape) + (1,)), view_as_real(a), view_as_real(b))
    return view_as_complex(pairs.contiguous())


def gather(x, dim, index):
    """gather of a complex x: both parts of each element gathered alike."""
    (d,) = _pair_dims(x, dim)
    pairs_index = index.reshape(tuple(index.shape) + (1,)).expand(tuple(index.shape) + (2,)).contiguous()
    return view_as_complex(_ag.gather(view_as_real(x), d, pairs_index).contiguous())


def cumsum(x, dim):
    """Running sums of a complex tensor, part by part."""
    (d,) = _pair_dims(x, dim)
    return view_as_complex(_ag.cumsum(view_as_real(x), d).contiguous())


def matmul(a, b):
    """a @ b with a or b complex, from real products: (A + iB)(C + iD) = (AC - BD) + i(AD + BC)."""
    dt = result_type(a, b)
    a, b = _as_dtype(a, dt), _as_dtype(b, dt)
    ar, ai, br, bi = real(a), imag(a), real(b), imag(b)
    re = _ag.sub(_ag.matmul(ar, br), _ag.matmul(ai, bi))
    im = _ag.add(_ag.matmul(ar, bi), _ag.matmul(ai, br))
    return complex(re, im)


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """|a - b| <= atol + rtol * |b| with complex magnitudes, or a == b; NaN parts as in isclose."""
    with _ag.no_grad():
        from .tensor import tensor

        if not isinstance(b, Tensor):
            b = tensor(b, device=a.device)
        dt = result_type(a, b)
        if not dt.is_complex:
            dt = complex_of(dt)
        a, b = _as_dtype(a.detach(), dt), _as_dtype(b.detach(), dt)
        err = abs(binary(a, b, _SUB))
        same = binary(a, b, _EQ)
        close = _ag.logical_or(same, _ag.logical_and(_ag.isfinite(err),
                                                     err <= _ag.add(_ag.mul(abs(b), rtol), atol)))
        if equal_nan:
            nan_a, nan_b = _ag.isnan(view_as_real(a)).amax(-1), _ag.isnan(view_as_real(b)).amax(-1)
            close = _ag.logical_or(close, _ag.logical_and(nan_a, nan_b))
        return close

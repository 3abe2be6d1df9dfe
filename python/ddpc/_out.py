"""PyTorch's ``out=`` keyword for the module-level functions that take it.

``ddpc.max(a, b, out=a)``: the result is computed as without ``out`` and
written into it, as PyTorch does, with PyTorch's rules:
- the result's dtype must cast to out's the way PyTorch's out= casts (a
  float result does not go into an integer tensor; int into float does);
- out is resized to the result's shape, with PyTorch's warning when it had
  elements; its device must be the result's;
- out= functions are not differentiable: with grad mode on, an input or out
  that requires grad is refused;
- functions with several results (``max(x, dim)``, ``sort``, ``topk``)
  take a tuple of tensors, one per result;
- the creation functions (``zeros``, ``arange``, ``randn``, ...) make out's
  dtype where no dtype is given, as PyTorch's do.
The functions keep their own signatures (``inspect.signature`` shows them,
through ``__wrapped__``).
"""

import functools
import warnings

from . import _storage
from . import autograd as _ag
from ._dtype import TORCH_NAMES, can_cast
from .tensor import Tensor

TOP_LEVEL = (
    "abs", "absolute", "acos", "acosh", "add", "addbmm", "addcdiv", "addcmul", "addmm", "addmv", "addr", "all",
    "amax", "amin", "aminmax", "angle", "any", "arange", "arccos", "arccosh", "arcsin", "arcsinh", "arctan",
    "arctan2", "arctanh", "argmax", "argmin", "asin", "asinh", "atan", "atan2", "atanh", "baddbmm", "bernoulli",
    "bitwise_and", "bitwise_left_shift", "bitwise_not", "bitwise_or", "bitwise_right_shift", "bitwise_xor", "bmm",
    "bucketize", "cat", "ceil", "chain_matmul", "cholesky", "cholesky_inverse", "cholesky_solve", "clamp",
    "clamp_max", "clamp_min", "clip", "column_stack", "complex", "concat", "concatenate", "conj_physical",
    "copysign", "cos", "cosh", "cross", "cummax", "cummin", "cumprod", "cumsum", "deg2rad", "diag", "diff",
    "digamma", "div", "divide", "dot", "dstack", "empty", "eq", "erf", "erfc", "erfinv", "exp", "exp2", "expm1",
    "eye", "fix", "float_power", "floor", "floor_divide", "fmax", "fmin", "fmod", "frac", "frexp", "full", "gather",
    "gcd", "ge", "ger", "greater", "greater_equal", "gt", "heaviside", "histc", "histogram", "histogramdd",
    "hstack", "hypot", "i0", "igamma", "igammac", "index_add", "index_copy", "index_reduce", "index_select",
    "inner", "inverse", "isin", "isneginf", "isposinf", "kron", "kthvalue", "lcm", "ldexp", "le", "lerp", "less",
    "less_equal", "lgamma", "linspace", "log", "log10", "log1p", "log2", "log_softmax", "logaddexp", "logaddexp2",
    "logcumsumexp", "logical_and", "logical_not", "logical_or", "logical_xor", "logit", "logspace", "logsumexp",
    "lt", "lu_solve", "lu_unpack", "masked_select", "matmul", "matrix_power", "max", "maximum", "mean", "median",
    "min", "minimum", "mm", "mode", "msort", "mul", "multinomial", "multiply", "mv", "mvlgamma", "nan_to_num",
    "nanmean", "nanmedian", "nanquantile", "nansum", "ne", "neg", "negative", "nextafter", "nonzero", "norm",
    "normal", "not_equal", "ones", "outer", "polar", "polygamma", "pow", "prod", "qr", "quantile", "rad2deg",
    "rand", "randint", "randn", "randperm", "reciprocal", "remainder", "renorm", "round", "row_stack", "rsqrt",
    "searchsorted", "sgn", "sigmoid", "sign", "signbit", "sin", "sinc", "sinh", "softmax", "sort", "sqrt", "square",
    "stack", "std", "std_mean", "sub", "subtract", "sum", "svd", "take", "take_along_dim", "tan", "tanh",
    "tensordot", "topk", "triangular_solve", "tril", "triu", "true_divide", "trunc", "var", "var_mean", "vdot",
    "vstack", "where", "xlogy", "zeros")

LINALG = (
    "cholesky", "cholesky_ex", "cond", "cross", "det", "eigh", "eigvalsh", "householder_product", "inv", "inv_ex",
    "lu", "lu_factor", "lu_factor_ex", "lu_solve", "matmul", "matrix_norm", "matrix_power", "matrix_rank",
    "multi_dot", "norm", "pinv", "qr", "slogdet", "solve", "solve_ex", "solve_triangular", "svd", "svdvals",
    "tensorinv", "tensorsolve", "vecdot", "vector_norm")

SPECIAL = (
    "airy_ai", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "chebyshev_polynomial_t",
    "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w", "digamma", "entr", "erf", "erfc",
    "erfcx", "erfinv", "exp2", "expit", "expm1", "gammainc", "gammaincc", "gammaln", "hermite_polynomial_h",
    "hermite_polynomial_he", "i0", "i0e", "i1", "i1e", "laguerre_polynomial_l", "legendre_polynomial_p", "log1p",
    "log_ndtr", "logit", "logsumexp", "modified_bessel_i0", "modified_bessel_i1", "modified_bessel_k0",
    "modified_bessel_k1", "multigammaln", "ndtr", "ndtri", "polygamma", "psi", "round", "scaled_modified_bessel_k0",
    "scaled_modified_bessel_k1", "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u",
    "shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_w", "sinc", "spherical_bessel_j0", "xlog1py",
    "xlogy", "zeta")

# Their result takes out's dtype where the call names none.
_CREATION = frozenset(("arange", "empty", "eye", "full", "linspace", "logspace", "ones", "rand", "randint", "randn",
                       "randperm", "zeros"))


_WRAPPED = {}  # id(function) -> its out= form, so that aliases stay one function (ddpc.arcsin is ddpc.asin)


def take_out_forms(namespace, names, prefix=""):
    """Gives each function ``names`` lists in ``namespace`` (a module's
    globals or a module) the ``out=`` keyword, unless it has one already."""
    get, put = ((namespace.get, namespace.__setitem__) if isinstance(namespace, dict)
                else (functools.partial(getattr, namespace), functools.partial(setattr, namespace)))
    for name in names:
        fn = get(name, None)
        if fn is None or isinstance(fn, type) or getattr(fn, "_takes_out", False):
            continue
        if id(fn) not in _WRAPPED:
            _WRAPPED[id(fn)] = _with_out(fn, prefix + name, name in _CREATION)
        put(name, _WRAPPED[id(fn)])


def _with_out(fn, name, creation):
    @functools.wraps(fn)
    def call(*args, out=None, **kwargs):
        if out is None:
            return fn(*args, **kwargs)
        outs = _out_tensors(name, out)
        given = [*outs, *args, *kwargs.values()]
        if _ag._needs_grad(*given, *(t for v in given if isinstance(v, (tuple, list)) for t in v)):
            raise RuntimeError(f"{name}(): functions with out=... arguments don't support automatic "
                               "differentiation, but one of the arguments requires grad.")
        if creation and kwargs.get("dtype") is None:
            kwargs = dict(kwargs, dtype=outs[0].dtype, device=kwargs.get("device") or outs[0].device)
        result = fn(*args, **kwargs)
        results = (result,) if isinstance(result, Tensor) else tuple(result)
        if len(results) != len(outs):
            raise TypeError(f"{name}(): argument 'out' must be a tuple of {len(results)} Tensors"
                            if len(results) > 1 else f"{name}(): argument 'out' must be Tensor, not tuple")
        for o, r in zip(outs, results):
            _write(name, o, r)
        if isinstance(out, Tensor):
            return out
        return type(result)(*outs) if hasattr(result, "_fields") else tuple(outs)

    call._takes_out = True
    return call


def _out_tensors(name, out):
    outs = (out,) if isinstance(out, Tensor) else tuple(out) if isinstance(out, (tuple, list)) else None
    if outs is None or not all(isinstance(o, Tensor) for o in outs):
        raise TypeError(f"{name}(): argument 'out' must be Tensor (or a tuple of Tensors), not {type(out).__name__}")
    return outs


def _write(name, out, result):
    if not isinstance(result, Tensor):
        raise TypeError(f"{name}(): out= needs a tensor result, got {type(result).__name__}")
    if not can_cast(result.dtype, out.dtype):
        raise RuntimeError(f"result type {TORCH_NAMES[result.dtype]} can't be cast to the desired output type "
                           f"{TORCH_NAMES[out.dtype]}")
    if out.device != result.device:
        raise RuntimeError(f"{name}(): out is on {out.device} but the result is on {result.device}")
    if tuple(out.shape) != tuple(result.shape):
        if out.numel():
            warnings.warn(f"An output with one or more elements was resized since it had shape {list(out.shape)}, "
                          f"which does not match the required output shape {list(result.shape)}. This behavior is "
                          "deprecated, and in a future PyTorch release outputs will not be resized unless they have "
                          "zero elements. You can explicitly reuse an out tensor t by resizing it, inplace, to zero "
                          "elements with t.resize_(0).", UserWarning, stacklevel=3)
        _storage.resize_(out, tuple(result.shape))
    with _ag.no_grad():
        out.copy_(result)


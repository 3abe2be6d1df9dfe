"""ddpc: data-parallel training with a C and CUDA core, shaped like PyTorch.

The public API is re-exported here; see the submodules for details.
"""

from . import _C, backends, cuda
from ._C import ArgumentError, DistError, DistTimeoutError, DtypeError, IndexOutOfRangeError, OutOfMemoryError
from ._dtype import bfloat16, device, dtype, finfo, float16, float32, float64, iinfo, int32, int64, uint8
from ._dtype import cdouble, cfloat, complex64, complex128
from ._dtype import channels_last, channels_last_3d, contiguous_format, memory_format, preserve_format
from ._dtype import layout, sparse_coo, strided
from .backends import compile, get_float32_matmul_precision, set_float32_matmul_precision
from .tensor import (Generator, Tensor, arange, default_generator, empty, empty_like, from_dlpack, from_numpy, full,
                     initial_seed, manual_seed, ones, ones_like, rand, randint, randn, randperm, tensor, zeros,
                     zeros_like)
from . import autograd
from .autograd import is_anomaly_check_nan_enabled, is_anomaly_enabled, set_anomaly_enabled
from .autograd import (argmax, argmin, cat, enable_grad, exp, is_grad_enabled, log, matmul, max, min, no_grad, relu,
                       set_grad_enabled, sigmoid, stack, tanh)
from .autograd import (addmm, all_ as all, amax, amin, any_ as any, argsort, argwhere, bmm, chunk, count_nonzero,
                       cumprod, cumsum, diff, dot, flip, gather, index_add, logsumexp, masked_select, mean, mm, msort,
                       mv, nonzero, norm, outer, permute, prod, repeat_interleave, reshape, roll, scatter, scatter_add,
                       sort, split, split_with_sizes, std, std_mean, sum, take, tensor_split, topk, transpose, tril,
                       triu, unbind, unflatten, unique, var, var_mean, clone)
from .tensor import Size, flatten, index_select, is_tensor, numel, squeeze, unsqueeze
from .autograd import (abs, absolute, addcdiv, addcmul, allclose, ceil, clamp, clamp_max, clamp_min, clip, cos, equal,
                       erf, expm1, floor, isclose, isfinite, isinf, isnan, lerp, log1p, logical_and, logical_not,
                       logical_or, logical_xor, masked_fill, maximum, minimum, nan_to_num, reciprocal, round, rsqrt,
                       sign, sin, sqrt, square, trunc, where)
from .serialization import CheckpointError, load, save
from ._complex import (angle, complex, conj, conj_physical, imag, is_conj, polar, real, resolve_conj, resolve_neg,
                       view_as_complex, view_as_real)
from . import sparse
from ._sparse_coo import sparse_coo_tensor
from . import accelerator, amp, compiler, data, distributed, distributions, func, nn, optim, random, testing, utils
from . import hub, version
from .amp import autocast, get_autocast_dtype, is_autocast_enabled
from .func import vmap
from . import checkpoint, futures, jit, profiler
from .distributed import destroy_process_group, init_process_group
from .nn.parallel import DataParallel, DistributedDataParallel
from ._threads import get_num_threads, set_num_threads
from .spawn import spawn
from . import multiprocessing
from .tensor import (as_tensor, broadcast_shapes, broadcast_tensors, diag, eye, full_like, get_default_dtype,
                     get_rng_state, linspace, logspace, meshgrid, rand_like, randint_like, randn_like, seed,
                     set_default_dtype, set_printoptions, set_rng_state)
from .tensor import get_default_device, set_default_device
from .autograd import inference_mode, is_inference_mode_enabled
from .autograd import asinh, atan, cosh, exp2, index_put, log2, log10, logcumsumexp, neg, pow, sinh, take_along_dim
from .autograd import (acos, acosh, arccos, arccosh, arcsin, arcsinh, arctan, arctanh, asin, atanh, digamma, erfc,
                       erfinv, i0, lgamma, mvlgamma, polygamma, tan)
from .tensor import (acos_, acosh_, arccos_, arccosh_, arcsin_, arcsinh_, arctan_, arctanh_, asin_, asinh_, atan_,
                     atanh_, cosh_, erfc_, exp2_, frac_, i0_, log2_, log10_, logit_, sinh_, tan_, xlogy_)
from .tensor import (detach, eq, ge, gt, is_floating_point, le, log_softmax, lt, moveaxis, movedim, narrow, ne, softmax,
                     swapaxes, swapdims, t)
from ._pointwise import (add, arctan2, atan2, bitwise_and, bitwise_left_shift, bitwise_not, bitwise_or,
                         bitwise_right_shift, bitwise_xor, div, divide, floor_divide, fmod, frac, hardshrink, hypot,
                         logit, mul, multiply, nanmean, nansum, remainder, sgn, sub, subtract, true_divide,
                         xlogy)
from ._linalg import (addbmm, addmv, addr, baddbmm, block_diag, cdist, cross, diagonal, dist, einsum, kron, renorm,
                      tensordot, trace)
from ._layout import (atleast_1d, atleast_2d, atleast_3d, broadcast_to, cartesian_prod, column_stack, dstack, hstack,
                      index_copy, index_fill, masked_scatter, row_stack, tile, trapezoid, tril_indices, triu_indices,
                      vstack)
from ._random import bernoulli, binomial, multinomial, normal, poisson
from ._pointwise import (copysign, deg2rad, frexp, gcd, heaviside, lcm, ldexp, logaddexp, logaddexp2, rad2deg, signbit,
                         sinc)
from ._layout import (combinations, cumulative_trapezoid, dsplit, hsplit, is_nonzero, rot90, scatter_reduce, trapz,
                      vander, vsplit)
from ._linalg import corrcoef, cov
from ._stats import (aminmax, bincount, bucketize, cummax, cummin, histc, kthvalue, median, mode, nanmedian,
                     nanquantile, quantile, searchsorted)
from . import linalg
from ._matrix import (cholesky, cholesky_inverse, cholesky_solve, det, inverse, logdet, lu_solve, matrix_exp,
                      matrix_power, pinverse, qr, slogdet, svd, triangular_solve)
from ._pointwise import float_power, fmax, fmin
from ._stats import isin
from ._layout import diag_embed, diagflat, unravel_index
from .autograd import unique_consecutive
from ._windows import bartlett_window, blackman_window, hamming_window, hann_window
from ._nn_forms import (adaptive_avg_pool1d, adaptive_max_pool1d, avg_pool1d, batch_norm, bilinear,
                        binary_cross_entropy_with_logits, celu, channel_shuffle, conv1d, conv2d, conv3d,
                        conv_transpose1d, conv_transpose2d, conv_transpose3d, cosine_embedding_loss,
                        cosine_similarity, ctc_loss, dropout, dropout_, embedding, group_norm, hinge_embedding_loss,
                        instance_norm, kl_div, layer_norm, margin_ranking_loss, max_pool1d, max_pool2d, max_pool3d,
                        pairwise_distance, pdist, pixel_shuffle, pixel_unshuffle, poisson_nll_loss, prelu, relu_, rrelu,
                        selu, sigmoid_, tanh_, threshold, triplet_margin_loss)
from ._aliases import (fix, fliplr, flipud, ger, greater, greater_equal, inner, is_complex, is_same_size, is_signed,
                       less, less_equal, negative, not_equal, positive, ravel, vdot)
from ._dtype import can_cast, promote_types, result_type
from .tensor import asarray, empty_strided, frombuffer, scalar_tensor
from ._pointwise import fill, isneginf, isposinf, isreal, nextafter, rsub
from ._layout import diagonal_scatter, gradient, index_reduce, put, select_scatter, slice_scatter
from ._stats import histogram, histogramdd
from ._matrix import chain_matmul, frobenius_norm, lu_unpack, nuclear_norm
from ._windows import kaiser_window
from ._nn_forms import (alpha_dropout, alpha_dropout_, embedding_bag, feature_alpha_dropout, feature_alpha_dropout_,
                        gru_cell, lstm_cell, rnn_relu_cell, rnn_tanh_cell)
from ._aliases import concat, concatenate, select
from .backends import (are_deterministic_algorithms_enabled, is_deterministic_algorithms_warn_only_enabled,
                       use_deterministic_algorithms)
from . import _aliases, _layout, _linalg, _matrix, _nn_forms, _pointwise, _random, _stats, _windows
from . import fft, special
from .special import gammainc as igamma, gammaincc as igammac

from math import e, inf, nan, pi  # torch.pi and the like

newaxis = None
half = float16
float = float32
double = float64
long = int64
int = int32

from .version import __version__  # noqa: E402


def build_info():
    """What this build was compiled with: CUDA, NCCL and their versions (None where absent). cuBLAS,
    cuFFT and NCCL are loaded on first use, not at import; asking for their versions loads them."""
    return _C.build_info()


__all__ = [
    "accelerator", "amp", "bool", "compiler", "jit", "Size", "get_autocast_dtype", "is_autocast_enabled", "multiprocessing", "random",
    "ArgumentError", "arange", "argmax", "argmin", "autocast", "autograd", "bfloat16", "build_info", "cat",
    "checkpoint", "futures",
    "CheckpointError", "cuda", "data", "DataParallel", "default_generator", "destroy_process_group", "device",
    "DistError", "distributed", "DistributedDataParallel", "DistTimeoutError", "dtype", "DtypeError", "empty",
    "empty_like",
    "enable_grad", "exp", "func", "float16", "float32", "float64", "from_dlpack", "from_numpy", "full", "Generator",
    "get_num_threads", "IndexOutOfRangeError", "init_process_group", "initial_seed", "int32", "int64",
    "is_grad_enabled", "is_anomaly_enabled",
    "is_anomaly_check_nan_enabled", "set_anomaly_enabled", "load", "log", "manual_seed", "matmul", "max", "min", "nn",
    "no_grad", "ones", "ones_like", "optim", "rand", "randint", "randn", "randperm", "relu", "save", "set_grad_enabled",
    "set_num_threads", "sigmoid", "spawn", "stack", "tanh", "Tensor", "tensor", "testing", "utils", "uint8", "zeros",
    "zeros_like", "as_tensor", "broadcast_shapes", "broadcast_tensors", "diag", "eye", "full_like", "get_default_dtype",
    "get_rng_state", "inference_mode", "is_inference_mode_enabled", "linspace", "logspace", "meshgrid", "rand_like",
    "randint_like", "randn_like",
    "seed", "set_default_dtype", "set_printoptions", "set_rng_state", "finfo", "iinfo", "addmm", "all", "amax", "amin",
    "any", "argsort", "argwhere", "bmm", "chunk", "clone", "count_nonzero", "cumprod", "cumsum", "diff", "dot",
    "flatten", "flip", "gather", "index_add", "index_select", "is_tensor", "logsumexp", "masked_select", "mean", "mm",
    "msort", "mv", "nonzero", "norm", "numel", "outer", "permute", "prod", "repeat_interleave", "reshape", "roll",
    "scatter", "scatter_add", "sort", "split", "split_with_sizes", "squeeze", "std", "std_mean", "sum", "take",
    "tensor_split", "topk", "transpose", "tril", "triu", "unbind", "unflatten", "unique", "unsqueeze", "var",
    "var_mean", "abs", "absolute", "addcdiv", "addcmul", "allclose", "ceil", "clamp", "clamp_max", "clamp_min", "clip",
    "cos", "equal", "erf", "expm1", "floor", "isclose", "isfinite", "isinf", "isnan", "lerp", "log1p", "logical_and",
    "logical_not", "logical_or", "logical_xor", "masked_fill", "maximum", "minimum", "nan_to_num", "reciprocal",
    "round", "rsqrt", "sign", "sin", "sqrt", "square", "trunc", "where", "asinh", "atan", "cosh", "exp2", "index_put",
    "log2", "log10", "logcumsumexp", "neg", "pow", "sinh", "take_along_dim", "detach", "eq", "ge", "gt",
    "is_floating_point", "le", "log_softmax", "lt", "moveaxis", "movedim", "narrow", "ne", "softmax", "swapaxes",
    "swapdims", "t", "backends", "compile", "get_float32_matmul_precision", "set_float32_matmul_precision", "linalg",
    "distributions", "acos", "acosh", "arccos", "arccosh", "arcsin", "arcsinh", "arctan", "arctanh", "asin", "atanh",
    "digamma", "erfc", "erfinv", "i0", "lgamma", "mvlgamma", "polygamma", "tan", "special", "acos_", "acosh_",
    "arccos_", "arccosh_", "arcsin_", "arcsinh_", "arctan_", "arctanh_", "asin_", "asinh_", "atan_", "atanh_", "cosh_",
    "erfc_", "exp2_", "frac_", "i0_", "log2_", "log10_", "logit_", "sinh_", "tan_", "xlogy_", "vmap", "OutOfMemoryError",
    "memory_format", "contiguous_format", "preserve_format", "channels_last", "channels_last_3d",
    "igamma", "igammac", "complex64", "complex128", "cfloat", "cdouble", "angle", "complex", "conj", "conj_physical",
    "imag", "is_conj", "polar", "real", "resolve_conj", "resolve_neg", "view_as_complex", "view_as_real",
] + _pointwise.__all__ + _matrix.__all__ + _linalg.__all__ + _layout.__all__ + _random.__all__ + _stats.__all__ + \
    _windows.__all__ + _nn_forms.__all__ + _aliases.__all__ + [
        "unique_consecutive", "can_cast", "promote_types", "result_type", "asarray", "empty_strided", "frombuffer",
        "scalar_tensor", "are_deterministic_algorithms_enabled", "is_deterministic_algorithms_warn_only_enabled",
        "use_deterministic_algorithms", "profiler", "layout", "sparse_coo", "strided", "sparse_coo_tensor", "sparse",
        "fft", "e", "inf", "nan", "pi", "newaxis", "get_default_device", "set_default_device", "hub", "version"]

# PyTorch's legacy per-type constructors (ddpc.FloatTensor(2, 3), ddpc.cuda.LongTensor([1, 2]), ...).
from .tensor import _legacy_tensor_types  # noqa: E402

_legacy_types = _legacy_tensor_types()
globals().update(_legacy_types)
vars(cuda).update(_legacy_tensor_types(cuda=True))
__all__ += list(_legacy_types)

# ``ddpc.bool`` is the bool dtype (as ``torch.bool``); dtype arguments also take Python's bool for it.
from ._dtype import bool_ as bool  # noqa: E402

# torch._foreach_* (list forms of the Tensor methods), which EMA helpers and optimizers call.
from ._foreach import _forms as _foreach_forms  # noqa: E402

globals().update(_foreach_forms())

# ddpc.abs_(x), ddpc.clamp_(x, 0, 1), ...: x's in-place methods.
from .tensor import _MORE_INPLACE  # noqa: E402

globals().update(_MORE_INPLACE)
__all__ += list(_MORE_INPLACE)

_aliases.take_numpy_names(globals())
_aliases.take_numpy_names(Tensor)

# PyTorch's out= keyword: ddpc.max(a, b, out=a), ddpc.linalg.inv(x, out=y), ...
from . import _out  # noqa: E402

_out.take_out_forms(globals(), _out.TOP_LEVEL)
_out.take_out_forms(linalg, _out.LINALG, "linalg_")
_out.take_out_forms(special, _out.SPECIAL, "special_")

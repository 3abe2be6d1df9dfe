"""ddpc.nn.functional: the stateless forms of the layers and losses.

Most functions are one fused _C op forward and one backward (see
ddpc.autograd); batch_norm and the rarer activations are built from the
autograd ops, convolution and pooling in _conv.py, resampling in
_upsample.py and _grid_sample.py, the margin and likelihood losses in _losses.py. The
``inplace=True`` forms compute aside and write the result into the input,
which then holds it as after PyTorch's in-place op.
"""

import inspect
import math
import warnings

import numpy as np

from .. import autograd as _ag
from .._indexing import _caller_level
from .. import profiler
from .._C import ArgumentError, DtypeError
from .._pointwise import hardshrink
from .._dtype import bfloat16, bool_, float16
from ..amp import autocast_op
from ..tensor import Tensor, broadcast_tensors, ones, rand, zeros
from ..tensor import tensor as _tensor
from . import _conv, _embedding_bag, _fractional, _grid_sample, _losses, _upsample
from ..autograd import embedding, gelu, layer_norm, linear, sigmoid, softplus, tanh

__all__ = ["batch_norm", "binary_cross_entropy", "binary_cross_entropy_with_logits", "cross_entropy", "dropout", "elu",
           "embedding", "flatten", "gelu", "hardshrink", "hardsigmoid", "hardswish", "hardtanh", "huber_loss", "kl_div",
           "l1_loss",
           "layer_norm", "leaky_relu", "linear", "log_softmax", "mish", "mse_loss", "nll_loss", "relu", "relu6",
           "sigmoid", "silu", "smooth_l1_loss", "softmax", "softplus", "tanh"]


def _apply(fn, input, inplace, what, *args):
    """fn(input, *args), written into input when ``inplace``."""
    if inplace:
        return _ag.inplace_apply(input, lambda t: fn(t, *args), what)
    return fn(input, *args)


def bilinear(input1, input2, weight, bias=None):
    """y[..., k] = input1 @ weight[k] @ input2 + bias[k]: inputs [..., in1] and
    [..., in2], weight (out, in1, in2). input1 meets every weight[k] in one GEMM."""
    out_features, in1, in2 = weight.shape
    if input1.shape[-1:] != (in1,) or input2.shape[-1:] != (in2,) or input1.shape[:-1] != input2.shape[:-1]:
        raise ArgumentError(f"bilinear: inputs of shapes {input1.shape} and {input2.shape} do not fit a weight of "
                            f"shape {weight.shape}")
    mixed = linear(input1, weight.transpose(1, 2).reshape(out_features * in2, in1))
    out = (mixed.reshape(input1.shape[:-1] + (out_features, in2)) * input2.unsqueeze(-2)).sum(-1)
    return out if bias is None else out + bias


def relu(input, inplace=False):
    return _apply(_ag.relu, input, inplace, "relu_")


def leaky_relu(input, negative_slope=0.01, inplace=False):
    return _apply(_ag.leaky_relu, input, inplace, "leaky_relu_", negative_slope)


def elu(input, alpha=1.0, inplace=False):
    return _apply(_ag.elu, input, inplace, "elu_", alpha)


def silu(input, inplace=False):
    return _apply(_ag.silu, input, inplace, "silu_")


def mish(input, inplace=False):
    return _apply(_ag.mish, input, inplace, "mish_")


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    return _apply(_ag.hardtanh, input, inplace, "hardtanh_", min_val, max_val)


def relu6(input, inplace=False):
    return _apply(_ag.relu6, input, inplace, "relu6_")


def hardswish(input, inplace=False):
    return _apply(_ag.hardswish, input, inplace, "hardswish_")


def hardsigmoid(input, inplace=False):
    return _apply(_ag.hardsigmoid, input, inplace, "hardsigmoid_")


# PyTorch's SELU constants (Klambauer et al., 2017).
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(input, inplace=False):
    """scale * elu(input, alpha) with the self-normalising constants."""
    return _apply(lambda t: _ag.elu(t, _SELU_ALPHA) * _SELU_SCALE, input, inplace, "selu_")


def celu(input, alpha=1.0, inplace=False):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""
    if alpha == 0:
        raise ArgumentError("celu: alpha must not be 0 (it divides the input)")
    return _apply(lambda t: _ag.elu(t / alpha, 1.0) * alpha, input, inplace, "celu_")


def logsigmoid(input):
    """log(sigmoid(x)), computed as -softplus(-x) so that it neither overflows nor loses small values."""
    return _losses._log_sigmoid(input)


def softsign(input):
    """x / (1 + |x|)."""
    return input / (input.abs() + 1)


def softshrink(input, lambd=0.5):
    """x - lambd above lambd, x + lambd below -lambd, 0 between (NaN stays NaN)."""
    if lambd < 0:
        raise ArgumentError(f"softshrink: lambda must be greater or equal to 0, but found to be {lambd}")
    return _ag.where(input > lambd, input - lambd, _ag.where(input < -lambd, input + lambd, input * 0))


def tanhshrink(input):
    """x - tanh(x)."""
    return input - tanh(input)


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):
    """Leaky ReLU whose negative slope is drawn uniformly from [lower, upper]
    for each element while training, and is their mean otherwise."""
    if not 0 <= lower <= upper:
        raise ArgumentError(f"rrelu: expected 0 <= lower <= upper, got lower={lower}, upper={upper}")
    if not training:
        return _apply(_ag.leaky_relu, input, inplace, "rrelu_", (lower + upper) / 2)
    slope = rand(input.shape, dtype=input.dtype, device=input.device) * (upper - lower) + lower
    return _apply(lambda t: _ag.where(t >= 0, t, t * slope), input, inplace, "rrelu_")


def _alpha_dropout(name, input, p, training, inplace, noise_shape):
    """Alpha dropout with one draw per element of ``noise_shape`` (broadcast over the input)."""
    if not 0 <= p <= 1:
        raise ArgumentError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0:
        return input
    if p == 1:
        return _apply(lambda t: t * 0, input, inplace, f"{name}_")
    keep = (rand(noise_shape, device=input.device) >= p).to(dtype=input.dtype)
    alpha = _SELU_ALPHA * _SELU_SCALE
    a = ((1 - p) * (1 + p * alpha * alpha)) ** -0.5
    shift = (keep - 1) * (alpha * a) + alpha * a * p
    return _apply(lambda t: t * (keep * a) + shift, input, inplace, f"{name}_")


def alpha_dropout(input, p=0.5, training=False, inplace=False):
    """Dropout for SELU networks: dropped elements take SELU's negative
    saturation value, and an affine map keeps the mean and variance of a
    standard normal input."""
    return _alpha_dropout("alpha_dropout", input, p, training, inplace, input.shape)


def feature_alpha_dropout(input, p=0.5, training=False, inplace=False):
    """Alpha dropout of whole channels: one draw per (dim 0, dim 1) pair, as
    PyTorch takes an input of at least 2 dims (an unbatched one too)."""
    if not isinstance(input, Tensor) or input.ndim < 2:
        raise ArgumentError("feature_alpha_dropout: expected an input of at least 2 dims, got "
                            f"{getattr(input, 'shape', type(input).__name__)}")
    return _alpha_dropout("feature_alpha_dropout", input, p, training, inplace,
                          tuple(input.shape[:2]) + (1,) * (input.ndim - 2))


def dropout(input, p=0.5, training=True, inplace=False):
    # With nothing dropped the input itself is the result: there is nothing to write.
    return _apply(_ag.dropout, input, inplace and training and p != 0, "dropout_", p, training)


def _softmax_dim(input, dim, name, stacklevel, dtype):
    """The input (cast to ``dtype``) and the dim a softmax runs along; with no
    dim, PyTorch's deprecated implicit choice (dim 0 for 0-, 1- and 3-d inputs, else 1)."""
    if dim is None:
        warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call to include dim=X "
                      "as an argument.", stacklevel=stacklevel)
        dim = 0 if input.ndim in (0, 1, 3) else 1
    return (input if dtype is None else input.to(dtype=dtype)), dim


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    """exp(x) / sum(exp(x)) along dim (computed in ``dtype`` when given)."""
    return _ag.softmax(*_softmax_dim(input, dim, "softmax", _stacklevel, dtype))


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    """x - log(sum(exp(x))) along dim, computed stably (in ``dtype`` when given)."""
    return _ag.log_softmax(*_softmax_dim(input, dim, "log_softmax", _stacklevel, dtype))


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    """Normalises each channel (dim 1) of ``input`` over the batch and the
    other dims: with the batch's mean and (biased) variance when
    ``training``, updating the running statistics in place (the variance
    unbiased), else with the running statistics. As PyTorch's, an empty
    batch in training gives an empty result and leaves the running
    statistics as they are, and a batch of one value per channel raises
    ValueError."""
    return _batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps, None)


class _AllReduceSum(_ag.Node):
    """The sum over the group's ranks of a tensor each computes: each rank's
    input moves every rank's output, so its gradient is the sum of theirs."""

    double_backward = True

    def __init__(self, a, group):
        super().__init__((a,), ())
        self.group = group

    def backward(self, g):
        return (_all_reduce_sum(g, self.group),)


def _all_reduce_sum(t, group):
    from .. import distributed as dist

    out = _ag.clone(t.detach())
    dist.all_reduce(out, group=group)
    if _ag._needs_grad(t):
        _ag._attach(out, _AllReduceSum(t, group))
    return out


def _batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps, group):
    """batch_norm, with the batch's statistics taken over every rank of
    ``group`` when it is not None (SyncBatchNorm): two all-reduces, one for the
    mean and one for the variance about it (summing squares about each rank's
    own mean would lose digits where the mean is large)."""
    if input.ndim < 2:
        raise ArgumentError(f"batch_norm: expected an input of at least 2 dims (N, C, ...), got {input.shape}")
    n, c = input.shape[0], input.shape[1]
    x = input.reshape(n, c, math.prod(input.shape[2:]))  # not -1, which an empty input leaves ambiguous
    if x.dtype in (float16, bfloat16):  # statistics in float32, the result in the input's dtype, as PyTorch's
        x = x.float()
    if not training and (running_mean is None or running_var is None):
        raise ArgumentError("batch_norm: running_mean and running_var are needed outside training")
    if training:
        count = n * x.shape[2]
        total = x.sum(2, keepdim=True).sum(0, keepdim=True)
        if group is not None:
            count = _count_over(count, group, input.device)
            total = _all_reduce_sum(total, group)
        if count == 1:
            raise ArgumentError(f"Expected more than 1 value per channel when training, got input size {input.shape}")
        # An empty batch (PyTorch's rule) normalises nothing and leaves the running statistics as they are.
        mean = total / max(count, 1)
        centred = x - mean
        sq = (centred * centred).sum(2, keepdim=True).sum(0, keepdim=True)
        if group is not None:
            sq = _all_reduce_sum(sq, group)
        var = sq / max(count, 1)
        if running_mean is not None and count:
            with _ag.no_grad():
                running_mean.mul_(1 - momentum).add_(mean.reshape(c) * momentum)
                running_var.mul_(1 - momentum).add_(var.reshape(c) * (momentum * count / (count - 1)))
    else:
        mean, var = running_mean.reshape(1, c, 1), running_var.reshape(1, c, 1)
        centred = x - mean
    y = centred * (var + eps) ** -0.5
    if weight is not None:
        y = y * weight.reshape(1, c, 1)
    if bias is not None:
        y = y + bias.reshape(1, c, 1)
    return y.reshape(input.shape).to(input.dtype)


def _count_over(count, group, device):
    """The sum of ``count`` over the group's ranks."""
    from .. import distributed as dist
    from ..tensor import tensor

    t = tensor([count], device=device)
    dist.all_reduce(t, group=group)
    return int(t.item())


def flatten(input, start_dim=1, end_dim=-1):
    """Merges dims start_dim..end_dim into one (a view)."""
    nd = input.ndim
    for d in (start_dim, end_dim):
        _ag._dim(input, d)  # a 0-d tensor flattens as if it had one dim
    if nd == 0:
        return input.reshape(1)
    start, end = start_dim % nd, end_dim % nd
    if start > end:
        raise ArgumentError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    merged = 1
    for s in input.shape[start:end + 1]:
        merged *= s
    return input.reshape(input.shape[:start] + (merged,) + input.shape[end + 1:])


# ---- losses ---------------------------------------------------------------------------------

def _legacy_reduction(size_average, reduce, reduction):
    """The reduction that PyTorch's deprecated ``size_average`` and ``reduce``
    arguments ask for, where either is given (with PyTorch's warning)."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    reduction = "mean" if size_average and reduce else "sum" if reduce else "none"
    # the caller's line, past the autocast wrapper of the losses that have one
    warnings.warn(f"size_average and reduce args will be deprecated, please use reduction='{reduction}' instead.",
                  stacklevel=_caller_level())
    return reduction


def _shapes_differ(input, target):
    """Whether two tensors' shapes differ (anything else is left to the loss to refuse)."""
    return isinstance(input, Tensor) and isinstance(target, Tensor) and input.shape != target.shape


def _warn_broadcast(input, target):
    """PyTorch's warning for a regression loss whose target is shaped unlike its input (both are then broadcast)."""
    if _shapes_differ(input, target):
        warnings.warn(f"Using a target size ({target.shape}) that is different to the input size ({input.shape}). "
                      "This will likely lead to incorrect results due to broadcasting. Please ensure they have the "
                      "same size.", stacklevel=3)


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
                  label_smoothing=0.0):
    """Softmax cross entropy of logits (classes along dim 1) against class
    indices or class probabilities, as ``torch.nn.functional.cross_entropy``."""
    return _ag.cross_entropy(input, target, weight, ignore_index, _legacy_reduction(size_average, reduce, reduction),
                             label_smoothing)


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    """The negative log likelihood of log-probabilities (classes along dim 1) at the target classes."""
    return _ag.cross_entropy(input, target, weight, ignore_index, _legacy_reduction(size_average, reduce, reduction),
                             log_probs=True)


@autocast_op("float32_cpu")
def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean", zero_infinity=False):
    """The connectionist temporal classification loss of log-probabilities
    ``log_probs`` (T, N, C), or (T, C) for one sample, against unaligned
    ``targets`` ((N, S) padded, or 1-d with the samples' labels one after
    another), as ``torch.nn.functional.ctc_loss``: 'mean' divides each
    sample's loss by its target length, then averages over the batch;
    ``zero_infinity`` makes impossible alignments' losses and gradients 0.
    Its gradient with respect to log_probs is PyTorch's, which assumes they
    come from a log_softmax (the usual case)."""
    code = _ag._reduction_code(reduction)
    one = log_probs.ndim == 2
    if one:
        log_probs = log_probs.unsqueeze(1)
        targets = targets.reshape(1, -1)
    nll = _ag.ctc_nll(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity)
    if code == 0:
        return nll[0] if one else nll
    if code == 2:
        return nll.sum()
    lengths = _ag._lengths(target_lengths, nll.shape[0], "target_lengths")
    per_target = _tensor([max(v, 1) for v in lengths], dtype=nll.dtype, device=nll.device)
    return (nll / per_target).mean()


def _regression_loss(kind, input, target, reduction, weight):
    """The elementwise loss ``kind``, each element's loss times ``weight``
    (shaped as the input) where one is given, as PyTorch 2.15 weighs
    mse_loss and l1_loss: 'mean' is then the weighted sum over the sum of
    the weights, and the weight takes a gradient."""
    if weight is None:
        return _ag.pointwise_loss(kind, input, target, reduction)
    if not isinstance(weight, Tensor):
        raise TypeError(f"{_ag._LOSS_NAMES[kind]}: weight must be a ddpc tensor, got {type(weight).__name__}")
    if isinstance(input, Tensor) and weight.shape != input.shape:
        raise ArgumentError(f"Weights and input must have the same size: weight {weight.shape}, input {input.shape}.")
    if reduction not in ("none", "mean", "sum"):
        raise ArgumentError(f"Invalid reduction mode: {reduction}. Expected one of 'none', 'mean', 'sum'.")
    loss = _ag.pointwise_loss(kind, input, target, "none") * weight
    return loss if reduction == "none" else loss.sum() if reduction == "sum" else loss.sum() / weight.sum()


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    _warn_broadcast(input, target)
    return _regression_loss(_ag._MSE, input, target, _legacy_reduction(size_average, reduce, reduction), weight)


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    _warn_broadcast(input, target)
    return _regression_loss(_ag._L1, input, target, _legacy_reduction(size_average, reduce, reduction), weight)


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    """0.5 (x - y)^2 / beta where |x - y| < beta, else |x - y| - 0.5 beta; l1_loss when beta is 0."""
    if beta < 0:
        raise ArgumentError(f"smooth_l1_loss does not support negative values for beta, got {beta}")
    _warn_broadcast(input, target)
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if beta == 0:
        return _ag.pointwise_loss(_ag._L1, input, target, reduction)
    return _ag.pointwise_loss(_ag._SMOOTH_L1, input, target, reduction, beta)


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    """0.5 (x - y)^2 where |x - y| < delta, else delta (|x - y| - 0.5 delta);
    with ``weight`` (the input's shape) each element's loss times its weight,
    then reduced (the mean over the elements, as PyTorch's)."""
    if not delta > 0:
        raise ArgumentError(f"huber_loss does not support non-positive values for delta, got {delta}")
    _warn_broadcast(input, target)
    if weight is None:
        return _ag.pointwise_loss(_ag._HUBER, input, target, reduction, delta)
    if tuple(weight.shape) != tuple(input.shape):
        raise ArgumentError(f"huber_loss: the weight's shape {tuple(weight.shape)} must be the input's "
                            f"{tuple(input.shape)}")
    return _losses._reduce(_ag.pointwise_loss(_ag._HUBER, input, target, "none", delta) * weight, reduction)


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """-(y log x + (1 - y) log(1 - x)) for probabilities x (logs clamped at -100),
    times ``weight`` (broadcast to the input's shape)."""
    if _shapes_differ(input, target):
        raise ArgumentError(f"Using a target size ({target.shape}) that is different to the input size ({input.shape}) "
                            "is deprecated. Please ensure they have the same size.")
    return _ag.pointwise_loss(_ag._BCE, input, target, _legacy_reduction(size_average, reduce, reduction),
                              weight=weight)


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None, reduction="mean",
                                     pos_weight=None):
    """binary_cross_entropy of sigmoid(input), computed from the logits
    without overflow; ``pos_weight`` (broadcast along the last dims, e.g. one
    per class) weighs the positive term."""
    if _shapes_differ(input, target):
        raise ArgumentError(f"Target size ({target.shape}) must be the same as input size ({input.shape})")
    return _ag.pointwise_loss(_ag._BCE_LOGITS, input, target, _legacy_reduction(size_average, reduce, reduction),
                              weight=weight, pos_weight=pos_weight)


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """The Kullback-Leibler divergence of log-probabilities ``input`` from
    ``target`` (probabilities, or log-probabilities with ``log_target``):
    target * (log(target) - input) elementwise. "batchmean" divides the sum by
    the batch size (the input's first dim), which is the divergence's
    definition; "mean" divides by every element, as PyTorch does (and warns)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    kind = _ag._KL_DIV_LOG_TARGET if log_target else _ag._KL_DIV
    if reduction == "mean":
        warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the support size."
                      "'batchmean' divides only by the batch size, and aligns with the KL div math definition."
                      "'mean' will be changed to behave the same as 'batchmean' in the next major release.",
                      stacklevel=2)
    if reduction != "batchmean":
        return _ag.pointwise_loss(kind, input, target, reduction)
    total = _ag.pointwise_loss(kind, input, target, "sum")
    return total / input.shape[0] if input.ndim else total


@autocast_op("float32")
def margin_ranking_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None, reduction="mean"):
    return _losses.margin_ranking_loss(input1, input2, target, margin,
                                       _legacy_reduction(size_average, reduce, reduction))


@autocast_op("float32")
def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None, reduction="mean"):
    return _losses.hinge_embedding_loss(input, target, margin, _legacy_reduction(size_average, reduce, reduction))


@autocast_op("float32")
def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    return _losses.soft_margin_loss(input, target, _legacy_reduction(size_average, reduce, reduction))


@autocast_op("float32")
def cosine_embedding_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None, reduction="mean"):
    return _losses.cosine_embedding_loss(input1, input2, target, margin,
                                         _legacy_reduction(size_average, reduce, reduction))


@autocast_op("float32")
def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2.0, eps=1e-6, swap=False, size_average=None,
                        reduce=None, reduction="mean"):
    """triplet_margin_with_distance_loss with the p-norm distance (pairwise_distance)."""
    return _losses.triplet_margin_with_distance_loss(
        anchor, positive, negative, lambda x1, x2: pairwise_distance(x1, x2, p, eps), margin, swap,
        _legacy_reduction(size_average, reduce, reduction))


def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None, margin=1.0, swap=False,
                                      reduction="mean"):
    return _losses.triplet_margin_with_distance_loss(anchor, positive, negative,
                                                     distance_function or pairwise_distance, margin, swap, reduction)


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    return _losses.gaussian_nll_loss(input, target, var, full, eps, reduction)


@autocast_op("float32")
def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None,
                     reduction="mean"):
    return _losses.poisson_nll_loss(input, target, log_input, full, eps,
                                    _legacy_reduction(size_average, reduce, reduction))


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    return _losses.multilabel_soft_margin_loss(input, target, weight,
                                               _legacy_reduction(size_average, reduce, reduction))


@autocast_op("float32")
def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    return _losses.multilabel_margin_loss(input, target, _legacy_reduction(size_average, reduce, reduction))


@autocast_op("float32")
def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None, reduce=None, reduction="mean"):
    return _losses.multi_margin_loss(input, target, p, margin, weight,
                                     _legacy_reduction(size_average, reduce, reduction))


# ---- embedding bags (compute in _embedding_bag.py) ---------------------------------------

__all__ += ["embedding_bag"]

embedding_bag = _embedding_bag.embedding_bag


# ---- convolution and pooling (compute in _conv.py) --------------------------------------

__all__ += ["adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool1d",
            "adaptive_max_pool2d", "adaptive_max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d", "conv1d",
            "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "fold",
            "local_response_norm", "lp_pool1d", "lp_pool2d", "lp_pool3d", "max_pool1d", "max_pool2d", "max_pool3d",
            "max_unpool1d", "max_unpool2d", "max_unpool3d", "unfold"]


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-d convolution (cross-correlation) of (N, C, L) or (C, L) ``input`` by
    ``weight`` (O, C / groups, K); ``padding`` an int, 'valid' or 'same'."""
    return _conv.convolution("conv1d", 1, input, weight, bias, stride, padding, dilation, groups)


@profiler._counts_flops(profiler._conv2d_flops)
def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-d convolution (cross-correlation) of (N, C, H, W) or (C, H, W)
    ``input`` by ``weight`` (O, C / groups, KH, KW); ``padding`` an int, a
    pair, 'valid' or 'same'."""
    return _conv.convolution("conv2d", 2, input, weight, bias, stride, padding, dilation, groups)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """3-d convolution (cross-correlation) of (N, C, D, H, W) or (C, D, H, W)
    ``input`` by ``weight`` (O, C / groups, KD, KH, KW); ``padding`` an int, a
    triple, 'valid' or 'same'."""
    return _conv.convolution("conv3d", 3, input, weight, bias, stride, padding, dilation, groups)


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """The transposed 1-d convolution (the gradient of conv1d with respect to
    its input) of (N, C, L) or (C, L) ``input`` by ``weight`` (C, O / groups, K)."""
    return _conv.conv_transpose("conv_transpose1d", 1, input, weight, bias, stride, padding, output_padding, groups,
                                dilation)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """The transposed 2-d convolution of (N, C, H, W) or (C, H, W) ``input`` by
    ``weight`` (C, O / groups, KH, KW)."""
    return _conv.conv_transpose("conv_transpose2d", 2, input, weight, bias, stride, padding, output_padding, groups,
                                dilation)


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """The transposed 3-d convolution of (N, C, D, H, W) or (C, D, H, W)
    ``input`` by ``weight`` (C, O / groups, KD, KH, KW)."""
    return _conv.conv_transpose("conv_transpose3d", 3, input, weight, bias, stride, padding, output_padding, groups,
                                dilation)


fold = _conv.fold
unfold = _conv.unfold


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """The largest element of each window of (N, C, L) or (C, L) ``input``
    (and, with ``return_indices``, its position along L); padding is -inf."""
    return _conv.max_pool("max_pool1d", 1, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """The largest element of each window of (N, C, H, W) or (C, H, W)
    ``input`` (and, with ``return_indices``, its position h * W + w in its plane)."""
    return _conv.max_pool("max_pool2d", 2, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """The largest element of each window of (N, C, D, H, W) or (C, D, H, W)
    ``input`` (and, with ``return_indices``, its position (d * H + h) * W + w
    in its volume)."""
    if return_indices:  # PyTorch's CPU autocast casts max_pool3d, not max_pool3d_with_indices
        return _conv.max_pool("max_pool3d", 3, input, kernel_size, stride, padding, dilation, ceil_mode, True)
    return _max_pool3d_values("max_pool3d", 3, input, kernel_size, stride, padding, dilation, ceil_mode, False)


_max_pool3d_values = autocast_op("float32_cpu")(_conv.max_pool)


@autocast_op("float32_cpu")  # PyTorch unpools one dim through max_unpool2d
def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """Places each value of (N, C, L) or (C, L) ``input`` at its index from
    max_pool1d(return_indices=True), zeros elsewhere."""
    return _conv.max_unpool("max_unpool1d", 1, input, indices, kernel_size, stride, padding, output_size)


@autocast_op("float32_cpu")
def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """Places each value of (N, C, H, W) or (C, H, W) ``input`` at its index
    from max_pool2d(return_indices=True), zeros elsewhere."""
    return _conv.max_unpool("max_unpool2d", 2, input, indices, kernel_size, stride, padding, output_size)


@autocast_op("float32_cpu")
def max_unpool3d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """Places each value of (N, C, D, H, W) or (C, D, H, W) ``input`` at its
    index from max_pool3d(return_indices=True), zeros elsewhere."""
    return _conv.max_unpool("max_unpool3d", 3, input, indices, kernel_size, stride, padding, output_size)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """The mean of each window of (N, C, L) or (C, L) ``input``."""
    return _conv.avg_pool("avg_pool1d", 1, input, kernel_size, stride, padding, ceil_mode, count_include_pad, None)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """The mean of each window of (N, C, H, W) or (C, H, W) ``input``, or its
    sum over ``divisor_override``."""
    return _conv.avg_pool("avg_pool2d", 2, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                          divisor_override)


@autocast_op("float32_cpu")
def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """The mean of each window of (N, C, D, H, W) or (C, D, H, W) ``input``,
    or its sum over ``divisor_override``."""
    return _conv.avg_pool("avg_pool3d", 3, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                          divisor_override)


def _lp_pool(dims, input, norm_type, kernel_size, stride, ceil_mode):
    """(sum over each window of x^p)^(1/p), as PyTorch computes it: the mean
    of x^p times the window size; p = +-inf is the largest (smallest) |x|."""
    if norm_type == 0:
        raise ArgumentError(f"norm_type must be a non-zero value, but got {norm_type}")
    if math.isinf(norm_type):
        max_pool = (max_pool1d, max_pool2d, max_pool3d)[dims - 1]
        sign = 1 if norm_type > 0 else -1
        return sign * max_pool(sign * input.abs(), kernel_size, stride, 0, 1, ceil_mode)
    avg_pool = (avg_pool1d, avg_pool2d, avg_pool3d)[dims - 1]
    out = avg_pool(input.pow(norm_type), kernel_size, stride, 0, ceil_mode)
    window = math.prod(_conv.as_tuple(kernel_size, dims, "kernel_size"))
    return (_ag.sign(out) * _ag.relu(out.abs())).mul(window).pow(1.0 / norm_type)


def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """The p-norm (p = ``norm_type``) of each window of (N, C, L) or (C, L) ``input``."""
    return _lp_pool(1, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """The p-norm (p = ``norm_type``) of each window of (N, C, H, W) or (C, H, W) ``input``."""
    return _lp_pool(2, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool3d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """The p-norm (p = ``norm_type``) of each window of (N, C, D, H, W) or (C, D, H, W) ``input``."""
    return _lp_pool(3, input, norm_type, kernel_size, stride, ceil_mode)


def _channel_window_mean(input, before, after):
    """The mean over channels c - before .. c + after (dim 1; channels past
    either end count as zeros) of (N, C, ...) ``input``: an average pool of
    its channels as the depth of one (N, 1, C, rest, 1) volume. As in
    PyTorch, which pools a 3-d input with avg_pool2d, CPU autocast runs it
    in float32 for 4-d and larger inputs only."""
    n, c = input.shape[:2]
    volume = pad(input.reshape(n, 1, c, -1, 1), (0, 0, 0, 0, before, after))
    window = (before + after + 1, 1, 1)
    if input.ndim == 3:
        return _conv.avg_pool("avg_pool3d", 3, volume, window, 1, 0, False, True, None).reshape(input.shape)
    return avg_pool3d(volume, window, stride=1).reshape(input.shape)


def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """x / (k + alpha * mean of x^2 over ``size`` neighbouring channels)^beta
    for (N, C, ...) ``input``, the window from c - size // 2 to
    c + (size - 1) // 2, as PyTorch's."""
    if input.ndim < 3:
        raise ArgumentError(f"Expected 3D or higher dimensionality input (got {input.ndim} dimensions)")
    if input.numel() == 0:
        return input
    div = _channel_window_mean(input * input, size // 2, (size - 1) // 2)
    return input / (div * alpha + k).pow(beta)


def adaptive_avg_pool1d(input, output_size):
    """The mean over PyTorch's adaptive windows of (N, C, L) or (C, L)
    ``input``: output i averages [floor(i * L / out), ceil((i + 1) * L / out))."""
    return _conv.adaptive_avg_pool("adaptive_avg_pool1d", 1, input, output_size)


def adaptive_avg_pool2d(input, output_size):
    """The mean over PyTorch's adaptive windows of (N, C, H, W) or (C, H, W)
    ``input``, rows and columns as in adaptive_avg_pool1d; None in
    ``output_size`` keeps that input size."""
    return _conv.adaptive_avg_pool("adaptive_avg_pool2d", 2, input, output_size)


@autocast_op("float32_cpu")
def adaptive_avg_pool3d(input, output_size):
    """The mean over PyTorch's adaptive windows of (N, C, D, H, W) or
    (C, D, H, W) ``input``."""
    return _conv.adaptive_avg_pool("adaptive_avg_pool3d", 3, input, output_size)


def adaptive_max_pool1d(input, output_size, return_indices=False):
    """The largest element over the adaptive windows of (N, C, L) or (C, L)
    ``input`` (and, with ``return_indices``, its position along L)."""
    return _conv.adaptive_max_pool("adaptive_max_pool1d", 1, input, output_size, return_indices)


def adaptive_max_pool2d(input, output_size, return_indices=False):
    """The largest element over the adaptive windows of (N, C, H, W) or
    (C, H, W) ``input`` (and its position h * W + w in its plane)."""
    return _conv.adaptive_max_pool("adaptive_max_pool2d", 2, input, output_size, return_indices)


@autocast_op("float32_cpu")
def adaptive_max_pool3d(input, output_size, return_indices=False):
    """The largest element over the adaptive windows of (N, C, D, H, W) or
    (C, D, H, W) ``input`` (and its position (d * H + h) * W + w in its volume)."""
    return _conv.adaptive_max_pool("adaptive_max_pool3d", 3, input, output_size, return_indices)


# ---- padding, resampling, channel dropout and distances ------------------------------------

__all__ += ["cosine_similarity", "dropout1d", "dropout2d", "dropout3d", "interpolate", "pad", "pairwise_distance",
            "prelu", "threshold"]

pad = _conv.pad
interpolate = _upsample.interpolate


# PyTorch's deprecated forms of interpolate, which older code still calls: they warn as PyTorch's do.
def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    warnings.warn("`nn.functional.upsample` is deprecated. Use `nn.functional.interpolate` instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    warnings.warn("`nn.functional.upsample_nearest` is deprecated. Use `nn.functional.interpolate` instead.",
                  stacklevel=2)
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    warnings.warn("`nn.functional.upsample_bilinear` is deprecated. Use `nn.functional.interpolate` instead.",
                  stacklevel=2)
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


__all__ += ["upsample", "upsample_bilinear", "upsample_nearest"]

__all__ += ["affine_grid", "fractional_max_pool2d", "fractional_max_pool3d", "grid_sample", "gumbel_softmax", "pdist"]

grid_sample = _grid_sample.grid_sample
affine_grid = _grid_sample.affine_grid


@autocast_op("float32_cpu")
def fractional_max_pool2d(input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                          _random_samples=None):
    """The largest element of pseudo-random kernel-sized windows of (N, C, H,
    W) or (C, H, W) ``input`` (see _fractional.py), into ``output_size`` or
    the input's size times ``output_ratio``; ``_random_samples`` (N, C, 2)
    in [0, 1), drawn when None, place the windows."""
    return _fractional.fractional_max_pool("fractional_max_pool2d", 2, input, kernel_size, output_size, output_ratio,
                                           return_indices, _random_samples)


@autocast_op("float32_cpu")
def fractional_max_pool3d(input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                          _random_samples=None):
    """fractional_max_pool2d over (N, C, D, H, W) or (C, D, H, W) ``input``,
    ``_random_samples`` (N, C, 3)."""
    return _fractional.fractional_max_pool("fractional_max_pool3d", 3, input, kernel_size, output_size, output_ratio,
                                           return_indices, _random_samples)


@autocast_op("lower")
def prelu(input, weight):
    """input where it is positive, else weight * input, ``weight`` holding
    one slope or one per channel (dim 1 of the input)."""
    if not isinstance(input, Tensor) or not isinstance(weight, Tensor):
        raise TypeError("prelu: input and weight must be ddpc tensors")
    channels = input.shape[1] if input.ndim >= 2 else 1
    if weight.ndim > 1 or weight.numel() not in (1, channels):
        raise ArgumentError(f"prelu: mismatch of parameter numbers and input channel size: found {weight.numel()} "
                            f"parameters for {channels} channels")
    shape = () if weight.numel() == 1 else (channels,) + (1,) * (input.ndim - 2)
    return _ag.where(input > 0, input, weight.reshape(shape) * input)


def threshold(input, threshold, value, inplace=False):
    """input where it is greater than ``threshold``, else ``value``."""
    return _apply(lambda t: _ag.where(t > threshold, t, value), input, inplace, "threshold_")


def _channel_dropout(name, input, p, training, inplace, dims, unbatched):
    """Zeroes whole channels (all of dims 2.., or 1.. of an input of
    ``unbatched`` dims) with probability p and scales the rest by 1/(1-p)."""
    if not 0 <= p <= 1:
        raise ArgumentError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not isinstance(input, Tensor) or input.ndim not in dims:
        raise ArgumentError(f"{name}: expected a {' or '.join(map(str, dims))}-d input, got "
                            f"{getattr(input, 'shape', type(input).__name__)}")
    if not training or p == 0:
        return input
    kept = 1 if input.ndim == unbatched else 2
    mask = _ag.dropout(ones(tuple(input.shape[:kept]) + (1,) * (input.ndim - kept), dtype=input.dtype,
                            device=input.device), p)
    return _apply(lambda t: t * mask, input, inplace, f"{name}_")


def dropout1d(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels of (N, C, L) or (C, L) ``input``."""
    return _channel_dropout("dropout1d", input, p, training, inplace, (2, 3), 2)


def _other_channel_dropout(name, input, p, training, inplace, spatial):
    """dropout2d or dropout3d of an input of another number of dims (at least
    2), as PyTorch takes it: with its deprecation warning, whole channels of
    (N, C, *) zeroed (single elements of a 2-d input)."""
    warnings.warn(f"{name}: Received a {input.ndim}-D input to {name}, which is deprecated and will result in an "
                  "error in a future release. To retain the behavior and silence this warning, please use dropout "
                  f"instead. Note that {name} exists to provide channel-wise dropout on inputs with {spatial} spatial "
                  "dimensions, a channel dimension, and an optional batch dimension (i.e. "
                  f"{spatial + 1}D or {spatial + 2}D inputs).", stacklevel=3)
    return _channel_dropout(name, input, p, training, inplace, (input.ndim,), None)


def dropout2d(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels of (N, C, H, W) ``input``; a 3-d input is (N, C,
    L), and one of 2 or of 5 or more dims (N, C, *), as PyTorch takes them
    (with a warning)."""
    if isinstance(input, Tensor) and input.ndim not in (3, 4) and input.ndim >= 2 and 0 <= p <= 1:
        return _other_channel_dropout("dropout2d", input, p, training, inplace, 2)
    if isinstance(input, Tensor) and input.ndim == 3:
        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D dropout behavior "
                      "is desired - input is interpreted as shape (N, C, L), where C is the channel dim. This behavior "
                      "will change in a future release to interpret the input as one without a batch dimension, i.e. "
                      "shape (C, H, W). To maintain the 1D channel-wise dropout behavior, please switch to using "
                      "dropout1d instead.", stacklevel=2)
    return _channel_dropout("dropout2d", input, p, training, inplace, (3, 4), None)


def dropout3d(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels of (N, C, D, H, W) or (C, D, H, W) ``input``; of
    other inputs of at least 2 dims, those of (N, C, *), as PyTorch (with a
    warning)."""
    if isinstance(input, Tensor) and input.ndim not in (4, 5) and input.ndim >= 2 and 0 <= p <= 1:
        return _other_channel_dropout("dropout3d", input, p, training, inplace, 3)
    return _channel_dropout("dropout3d", input, p, training, inplace, (4, 5), 4)


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """sum(x1 / max(|x1|, eps) * x2 / max(|x2|, eps)) over ``dim``, the two broadcast together."""
    x1, x2 = broadcast_tensors(x1, x2)
    n1 = x1.norm(dim=dim, keepdim=True).clamp_min(eps)
    n2 = x2.norm(dim=dim, keepdim=True).clamp_min(eps)
    return ((x1 / n1) * (x2 / n2)).sum(dim)


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """The p-norm of x1 - x2 + eps over the last dim."""
    return (x1 - x2 + eps).norm(p, dim=-1, keepdim=keepdim)


def pdist(input, p=2):
    """The p-norm distance between each pair of rows i < j of ``input`` (N, M),
    as the N * (N - 1) / 2 upper-triangle entries of cdist(input, input) in
    row-major order. The pairs are numpy index metadata; the differences of
    the selected rows take memory for N * (N - 1) / 2 * M elements."""
    if not isinstance(input, Tensor) or input.ndim != 2:
        raise ArgumentError(f"pdist only supports 2D tensors, got: {getattr(input, 'ndim', type(input).__name__)}D")
    if p < 0:
        raise ArgumentError(f"pdist only supports non-negative p values, got {p}")
    first, second = np.triu_indices(input.shape[0], 1)
    index = [_tensor(i.astype(np.int64), device=input.device) for i in (first, second)]
    return (input.index_select(0, index[0]) - input.index_select(0, index[1])).norm(p, dim=1)


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """input divided by its p-norm along ``dim`` (at least ``eps``)."""
    if out is not None:
        raise ArgumentError("normalize: ddpc has no out= argument; use the returned tensor")
    return input / input.norm(p, dim=dim, keepdim=True).clamp_min(eps)


def one_hot(tensor, num_classes=-1):
    """An int64 tensor of int64 ``tensor``'s shape plus a last dim of ``num_classes``
    (the largest class + 1 when -1: read from the device), 1 at each class index."""
    if not isinstance(tensor, Tensor) or tensor.dtype is not _ag.int64:  # int64 only, as PyTorch's
        raise DtypeError("one_hot is only applicable to index tensor of type LongTensor.")
    if tensor.numel():
        low, high = _ag._range_of(tensor)
        if low < 0:
            raise ArgumentError("one_hot: class values must be non-negative")
        if num_classes == -1:
            num_classes = high + 1
        elif high >= num_classes:
            raise ArgumentError(f"one_hot: class values must be smaller than num_classes ({num_classes}), got {high}")
    elif num_classes == -1:
        raise ArgumentError("one_hot: can not infer total number of classes from empty tensor")
    index = tensor.to(dtype=_ag.int64).unsqueeze(-1)
    return zeros(tuple(tensor.shape) + (num_classes,), dtype=_ag.int64, device=tensor.device).scatter(-1, index, 1)


def _check_rank(input, what, least):
    if not isinstance(input, Tensor) or input.ndim < least:
        raise ArgumentError(f"{what}: expected a tensor of at least {least} dims, got "
                            f"{getattr(input, 'shape', type(input).__name__)}")


def pixel_shuffle(input, upscale_factor):
    """(*, C r^2, H, W) to (*, C, H r, W r): each channel's r x r block of planes interleaved into one plane."""
    _check_rank(input, "pixel_shuffle", 3)
    r = upscale_factor
    *lead, c, h, w = input.shape
    if c % (r * r):
        raise ArgumentError(f"pixel_shuffle expects its input's channel dim {c} to be divisible by the square of "
                            f"upscale_factor, but input.size(-3)={c} is not divisible by {r * r}")
    n = len(lead)
    x = input.reshape(*lead, c // (r * r), r, r, h, w)
    x = x.permute(*range(n), n, n + 3, n + 1, n + 4, n + 2)
    return _ag._own(x.reshape(*lead, c // (r * r), h * r, w * r), input)


def pixel_unshuffle(input, downscale_factor):
    """(*, C, H r, W r) to (*, C r^2, H, W), pixel_shuffle's inverse."""
    _check_rank(input, "pixel_unshuffle", 3)
    r = downscale_factor
    *lead, c, h, w = input.shape
    if h % r or w % r:
        raise ArgumentError(f"pixel_unshuffle expects height {h} and width {w} to be divisible by downscale_factor {r}")
    n = len(lead)
    x = input.reshape(*lead, c, h // r, r, w // r, r)
    x = x.permute(*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return _ag._own(x.reshape(*lead, c * r * r, h // r, w // r), input)


def channel_shuffle(input, groups):
    """(N, C, *) with its channels regrouped: channel g * (C / groups) + k moves to k * groups + g."""
    _check_rank(input, "channel_shuffle", 3)
    c = input.shape[1]
    if groups <= 0 or c % groups:
        raise ArgumentError(f"channel_shuffle: number of channels {c} must be divisible by groups {groups}")
    x = input.reshape(input.shape[0], groups, c // groups, *input.shape[2:])
    return _ag._own(x.transpose(1, 2).reshape(input.shape), input)


__all__ += ["alpha_dropout", "celu", "channel_shuffle", "cosine_embedding_loss", "feature_alpha_dropout",
            "gaussian_nll_loss", "hardshrink", "hinge_embedding_loss", "logsigmoid", "margin_ranking_loss",
            "multi_margin_loss", "multilabel_margin_loss", "multilabel_soft_margin_loss", "normalize", "one_hot",
            "pixel_shuffle", "pixel_unshuffle", "poisson_nll_loss", "rrelu", "selu", "soft_margin_loss", "softshrink",
            "softsign", "tanhshrink", "triplet_margin_loss", "triplet_margin_with_distance_loss"]


# ---- normalisation over groups and gated activations ----------------------------------------

_DTYPE_EPS = {"float32": 2.0 ** -23, "float64": 2.0 ** -52}


def _channel_affine(out, weight, bias):
    """out * weight + bias with (C,) weight and bias broadcast over dim 1 of
    out, in out's dtype (a bfloat16 input with float32 parameters gives
    bfloat16, as PyTorch's group and instance norms do)."""
    shape = (out.shape[1],) + (1,) * (out.ndim - 2)
    dtype = out.dtype
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out if out.dtype is dtype else out.to(dtype=dtype)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """Normalises each group of ``C // num_groups`` channels of each sample (dims 1.. of (N, C, *))."""
    if input.ndim < 2 or input.shape[1] % num_groups:
        raise ArgumentError(f"group_norm: expected an (N, C, *) input with C divisible by num_groups={num_groups}, "
                            f"got shape {input.shape}")
    grouped = input.reshape(input.shape[0], num_groups, math.prod(input.shape[1:]) // num_groups)
    out = layer_norm(grouped, (grouped.shape[-1],), None, None, eps).reshape(input.shape)
    return _channel_affine(out, weight, bias)


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                  momentum=0.1, eps=1e-5):
    """Normalises each channel of each sample over its spatial dims, with
    the sample's statistics (``use_input_stats``) or else the running ones.
    Running statistics given with ``use_input_stats`` move towards the
    batch's average of the per-sample ones, as in PyTorch."""
    if not isinstance(input, Tensor) or input.ndim < 3:
        raise ArgumentError(f"instance_norm: expected an (N, C, *) input, got {getattr(input, 'shape', input)}")
    if use_input_stats and math.prod(input.shape[2:]) == 1:
        raise ValueError(f"Expected more than 1 spatial element when training, got input size {input.shape}")
    if not use_input_stats or running_mean is not None or running_var is not None:
        # PyTorch's formulation: batch norm of the (1, N C, *) view with the running statistics repeated per sample.
        n, c = input.shape[:2]
        rm, rv = (None if r is None else r.detach().repeat(n) for r in (running_mean, running_var))
        out = batch_norm(input.reshape(1, n * c, *input.shape[2:]), rm, rv, None, None, use_input_stats, momentum,
                         eps).reshape(input.shape)
        if use_input_stats:
            with _ag.no_grad():
                for running, repeated in ((running_mean, rm), (running_var, rv)):
                    if running is not None:
                        running.copy_(repeated.reshape(n, c).mean(0))
        return _channel_affine(out, weight, bias)
    return group_norm(input, input.shape[1], weight, bias, eps)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """input / sqrt(mean(input**2 over the last dims) + eps) * weight; eps None is
    the epsilon of the dtype it computes in (16-bit floats compute in float32, as in PyTorch)."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(input.shape[input.ndim - len(shape):]) != shape:
        raise ArgumentError(f"rms_norm: the input's last dims {input.shape} do not end in normalized_shape {shape}")
    if input.dtype.name in ("float16", "bfloat16"):
        out = rms_norm(input.float(), shape, None, eps).to(dtype=input.dtype)
        return out if weight is None else out * weight
    eps = _DTYPE_EPS[input.dtype.name] if eps is None else eps
    rows = input.reshape(input.shape[:input.ndim - len(shape)] + (math.prod(shape),))
    out = (rows * ((rows * rows).mean(-1, keepdim=True) + eps) ** -0.5).reshape(input.shape)
    return out if weight is None else out * weight


def glu(input, dim=-1):
    """a * sigmoid(b), a and b the two halves of input along dim."""
    d = dim % input.ndim if input.ndim else 0
    if input.ndim == 0 or input.shape[d] % 2:
        raise ArgumentError(f"glu: halving dim {dim} needs an even size, got shape {input.shape}")
    half = input.shape[d] // 2
    return input.narrow(d, 0, half) * sigmoid(input.narrow(d, half, half))


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    return softmax(-input, dim, _stacklevel + 1, dtype)


def gumbel_softmax(logits, tau=1, hard=False, eps=1e-10, dim=-1):
    """softmax((logits + g) / tau) along ``dim`` for Gumbel noise g; with
    ``hard``, the one-hot of its largest entry, whose gradient is the soft
    sample's (the straight-through estimator). ``eps`` is unused, as in
    PyTorch."""
    uniform = rand(logits.shape, dtype=logits.dtype, device=logits.device)  # in [0, 1)
    exponential = -(-uniform).log1p()
    gumbels = -exponential.log()
    y_soft = softmax((logits + gumbels) / tau, dim)
    if not hard:
        return y_soft
    index = y_soft.detach().argmax(dim, keepdim=True)
    y_hard = zeros(logits.shape, dtype=logits.dtype, device=logits.device).scatter(dim, index, value=1.0)
    return y_hard - y_soft.detach() + y_soft


def unflatten(input, dim, sizes):
    """Splits dim into ``sizes`` (one entry may be -1)."""
    d = dim % input.ndim
    return input.reshape(input.shape[:d] + tuple(sizes) + input.shape[d + 1:])


# ---- attention ------------------------------------------------------------------------------

__all__ += ["scaled_dot_product_attention", "bilinear"]


def _mask_scores(scores, mask, true_takes_part):
    """scores with a float ``mask`` added, or -inf where a bool/integer mask
    shuts a position out (where it is False if ``true_takes_part``, else True)."""
    if mask is None:
        return scores
    if mask.dtype.is_floating_point:
        return scores + (mask if mask.dtype is scores.dtype else mask.to(dtype=scores.dtype))
    if mask.dtype is not bool_:  # where takes bool conditions only
        mask = mask != 0
    if true_takes_part:
        return _ag.where(mask, scores, float("-inf"))
    return _ag.where(mask, float("-inf"), scores)


def _attention(query, key, value, mask, true_takes_part, dropout_p, scale, safe=False):
    """softmax(query @ key^T * scale, masked) (dropped out with dropout_p) @ value, and those weights.
    ``safe``: a query the mask shuts out of every key gets weights of 0 (an output of
    0, and no NaN in any gradient), as PyTorch's fused attention gives it, where a
    plain softmax gives NaN. Half-precision host tensors are attended in float32 and
    the results rounded once, as PyTorch's CPU kernel accumulates (rounding the
    scores and the weights each to bfloat16 loses 2-6 times the accuracy)."""
    half = query.dtype if query.dtype in (float16, bfloat16) and not query.is_cuda else None
    if half is not None and key.dtype is half and value.dtype is half:
        out, weights = _attention(query.float(), key.float(), value.float(), mask, true_takes_part, dropout_p,
                                  scale, safe)
        return out.to(dtype=half), weights.to(dtype=half)
    scores = _mask_scores(query @ key.transpose(-2, -1) * scale, mask, true_takes_part)
    if safe and mask is not None:
        shut = scores.detach().amax(-1, keepdim=True) == float("-inf")
        weights = _ag.where(shut, 0.0, softmax(_ag.where(shut, 0.0, scores), -1))
    else:
        weights = softmax(scores, -1)
    weights = _ag.dropout(weights, dropout_p, True)
    return weights @ value, weights


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """softmax(query @ key^T * scale + mask) @ value over (..., L, E) query,
    (..., S, E) key and (..., S, Ev) value, batch dims broadcast; a bool (or
    integer) attn_mask marks with True the positions that take part, a float
    one is added; ``is_causal`` lets position i see keys 0..i only; scale
    defaults to 1/sqrt(E). With ``enable_gqa`` (grouped-query attention) key
    and value may have fewer heads (dim -3) than query, a divisor of its
    count: each key/value head serves that many query heads in turn."""
    if query.ndim < 2 or key.ndim < 2 or value.ndim < 2:
        raise ArgumentError("scaled_dot_product_attention: query, key and value need at least 2 dims (..., L, E), got "
                            f"shapes {query.shape}, {key.shape} and {value.shape}")
    if enable_gqa and query.ndim >= 3 and key.ndim >= 3 and key.shape[-3] != query.shape[-3]:
        heads, kv_heads = query.shape[-3], key.shape[-3]
        if heads % kv_heads or value.shape[-3] != kv_heads:
            raise ArgumentError(f"scaled_dot_product_attention: with enable_gqa, query's {heads} heads must be a "
                                f"multiple of key's and value's ({kv_heads} and {value.shape[-3]})")
        key = key.repeat_interleave(heads // kv_heads, dim=-3)
        value = value.repeat_interleave(heads // kv_heads, dim=-3)
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise ArgumentError(f"scaled_dot_product_attention: query {query.shape} and key {key.shape} must share E and "
                            f"key and value {value.shape} must share S")
    if not 0 <= dropout_p <= 1:
        raise ArgumentError(f"scaled_dot_product_attention: dropout_p must be in [0, 1], got {dropout_p}")
    if is_causal:
        if attn_mask is not None:
            raise ArgumentError("scaled_dot_product_attention: pass either attn_mask or is_causal=True, not both")
        attn_mask = _ag.tril(ones(query.shape[-2], key.shape[-2], dtype=bool_, device=query.device))
    scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    # (a causal mask shuts no query out of every key: query i sees key 0)
    return _attention(query, key, value, attn_mask, True, dropout_p, scale, safe=not is_causal)[0]


def _inplace_form(fn):
    """``fn(input, ..., inplace=True)`` under PyTorch's trailing-underscore name."""
    def op(input, *args, **kwargs):
        return fn(input, *args, inplace=True, **kwargs)

    op.__name__ = op.__qualname__ = fn.__name__ + "_"
    op.__doc__ = f"``{fn.__name__}(input, ..., inplace=True)``."
    return op


relu_, leaky_relu_, elu_, hardtanh_, rrelu_, threshold_, celu_, selu_ = (
    _inplace_form(f) for f in (relu, leaky_relu, elu, hardtanh, rrelu, threshold, celu, selu))
__all__ += ["relu_", "leaky_relu_", "elu_", "hardtanh_", "rrelu_", "threshold_", "celu_", "selu_"]


def multi_head_attention_forward(*args, **kwargs):
    """MultiheadAttention's forward with the weights passed in: see nn.transformer.multi_head_attention_forward."""
    from .transformer import multi_head_attention_forward as forward  # (transformer imports this module)

    return forward(*args, **kwargs)


__all__ += ["multi_head_attention_forward"]


def _with_indices(pool):
    """PyTorch's ``<pool>_with_indices``: the pool's (output, indices) whatever ``return_indices`` says."""
    signature = inspect.signature(pool)

    def with_indices(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.arguments["return_indices"] = True
        return pool(*bound.args, **bound.kwargs)

    with_indices.__signature__ = signature  # the pool's arguments, by their names
    with_indices.__name__ = with_indices.__qualname__ = pool.__name__ + "_with_indices"
    with_indices.__doc__ = f"{pool.__name__} with return_indices=True: (output, indices)."
    return with_indices


max_pool1d_with_indices, max_pool2d_with_indices, max_pool3d_with_indices, adaptive_max_pool1d_with_indices, \
    adaptive_max_pool2d_with_indices, adaptive_max_pool3d_with_indices, fractional_max_pool2d_with_indices, \
    fractional_max_pool3d_with_indices = (
        _with_indices(f) for f in (max_pool1d, max_pool2d, max_pool3d, adaptive_max_pool1d, adaptive_max_pool2d,
                                   adaptive_max_pool3d, fractional_max_pool2d, fractional_max_pool3d))
__all__ += [f"{kind}max_pool{d}d_with_indices" for kind in ("", "adaptive_") for d in (1, 2, 3)]
__all__ += ["fractional_max_pool2d_with_indices", "fractional_max_pool3d_with_indices"]

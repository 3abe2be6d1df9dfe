"""The torch-level forms of nn.functional's ops (torch.conv2d, torch.layer_norm,
torch.kl_div, ...), which PyTorch scripts call besides the F forms. Most are
the F functions themselves; where PyTorch's torch-level signature differs
(the norms' argument order, embedding's weight first, dropout's required
``train``, adaptive_max_pool1d returning the indices too, the losses'
``reduction`` as ATen's integer code, the cells' weights as arguments), a
small wrapper maps it onto F or the nn layer's code."""

import numbers

from . import autograd as _ag
from ._C import ArgumentError
from ._dtype import int64
from .nn import _embedding_bag
from .nn import functional as F
from .nn.rnn import cell_step
from .tensor import ones, zeros

_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _reduction(reduction):
    """ATen's reduction code (0 none, 1 mean, 2 sum), or F's name for it."""
    if isinstance(reduction, numbers.Integral) and int(reduction) in _REDUCTIONS:
        return _REDUCTIONS[int(reduction)]
    if reduction in _REDUCTIONS.values():
        return reduction
    raise ArgumentError(f"reduction must be 0 (none), 1 (mean) or 2 (sum), got {reduction!r}")


conv1d, conv2d, conv3d = F.conv1d, F.conv2d, F.conv3d
conv_transpose1d, conv_transpose2d, conv_transpose3d = F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d
pixel_shuffle, pixel_unshuffle, channel_shuffle = F.pixel_shuffle, F.pixel_unshuffle, F.channel_shuffle
prelu, bilinear, cosine_similarity, pairwise_distance = F.prelu, F.bilinear, F.cosine_similarity, F.pairwise_distance
max_pool1d, max_pool2d, max_pool3d = F.max_pool1d, F.max_pool2d, F.max_pool3d
pdist = F.pdist
avg_pool1d, adaptive_avg_pool1d = F.avg_pool1d, F.adaptive_avg_pool1d


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-05, cudnn_enable=True):
    return F.layer_norm(input, normalized_shape, weight, bias, eps)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-05, cudnn_enabled=True):
    return F.group_norm(input, num_groups, weight, bias, eps)


def batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled=True):
    """torch.batch_norm's order: the affine weight and bias before the running statistics."""
    return F.batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


def instance_norm(input, weight, bias, running_mean, running_var, use_input_stats, momentum, eps,
                  cudnn_enabled=True):
    """torch.instance_norm's order: the affine weight and bias before the running statistics."""
    return F.instance_norm(input, running_mean, running_var, weight, bias, use_input_stats, momentum, eps)


def dropout(input, p, train):
    return F.dropout(input, p, train)


def dropout_(input, p, train):
    return F.dropout(input, p, train, inplace=True)


def alpha_dropout(input, p, train):
    return F.alpha_dropout(input, p, train)


def alpha_dropout_(input, p, train):
    return F.alpha_dropout(input, p, train, inplace=True)


def feature_alpha_dropout(input, p, train):
    return F.feature_alpha_dropout(input, p, train)


def feature_alpha_dropout_(input, p, train):
    return F.feature_alpha_dropout(input, p, train, inplace=True)


_BAG_MODES = {0: "sum", 1: "mean", 2: "max"}


def embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False, per_sample_weights=None,
                  include_last_offset=False, padding_idx=None):
    """torch.embedding_bag: the weight first, ``mode`` ATen's code (0 sum, 1
    mean, 2 max); (output, offset2bag, bag_size, max_indices) as PyTorch
    returns them: the bags, the bag of each index, the indices in each bag
    (those at padding_idx left out) and, in mode max, the row each maximum
    came from (bag_size otherwise). PyTorch's CPU kernel leaves offset2bag
    empty and bag_size 0 in mode sum, where ddpc fills them in as in the others."""
    out, argmax, flat, starts = _embedding_bag.bags(indices, weight, offsets, None, 2, scale_grad_by_freq,
                                                    _BAG_MODES.get(mode, mode), sparse, per_sample_weights,
                                                    include_last_offset, padding_idx)
    with _ag.no_grad():
        n, count = flat.numel(), starts.numel() - 1
        # Each index's bag: how many bag starts (after the first) lie at or before it.
        marks = zeros(n + 1, dtype=int64, device=flat.device).index_add(
            0, starts.narrow(0, 1, count).contiguous(), ones(count, dtype=int64, device=flat.device))
        offset2bag = _ag.cumsum(marks.narrow(0, 0, n), 0)
        counted = ones(n, dtype=int64, device=flat.device) if padding_idx is None else \
            (flat != padding_idx % weight.shape[0]).to(dtype=int64)
        bag_size = zeros(count, dtype=int64, device=flat.device).index_add(0, offset2bag, counted)
        max_indices = bag_size if argmax is None else _ag.clamp_min(argmax, 0)  # an empty bag's is 0, as PyTorch's
    return out, offset2bag, bag_size, max_indices


def _cell(mode, nstate, name):
    def cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
        if input.ndim != 2:  # (the nn cells also take one unbatched vector)
            raise ArgumentError(f"{name}: Expected 2D input (batch x feature), but got {input.ndim}D input")
        return cell_step(mode, name, input, hx, nstate, (w_ih, b_ih, w_hh, b_hh))

    cell.__name__ = cell.__qualname__ = name
    cell.__doc__ = (f"One step of nn's {mode} cell with the given weights (as torch.{name})"
                    + (": (h, c) from hx = (h, c)." if nstate == 2 else ": the new h."))
    return cell


lstm_cell = _cell("LSTM", 2, "lstm_cell")
gru_cell = _cell("GRU", 1, "gru_cell")
rnn_tanh_cell = _cell("RNN_TANH", 1, "rnn_tanh_cell")
rnn_relu_cell = _cell("RNN_RELU", 1, "rnn_relu_cell")


def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """torch.embedding: the weight first; a negative padding_idx means none."""
    return F.embedding(indices, weight, padding_idx if padding_idx >= 0 else None, None, 2.0, scale_grad_by_freq,
                       sparse)


def selu(input):
    return F.selu(input)


def celu(input, alpha=1.0):
    return F.celu(input, alpha)


def threshold(input, threshold, value):
    return F.threshold(input, threshold, value)


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, generator=None):
    """ddpc's rrelu draws from the default generator (``generator`` must be None)."""
    if generator is not None:
        raise ArgumentError("rrelu: ddpc draws from the default generator; pass generator=None")
    return F.rrelu(input, lower, upper, training)


def adaptive_max_pool1d(input, output_size):
    """The pooled values and their indices, as torch.adaptive_max_pool1d returns both."""
    return F.adaptive_max_pool1d(input, output_size, return_indices=True)


def kl_div(input, target, reduction=1, *, log_target=False):
    """The mean (reduction 1) is over all elements, as torch.kl_div's, without
    F.kl_div's warning about it."""
    reduction = _reduction(reduction)
    if reduction == "mean":
        return F.kl_div(input, target, reduction="none", log_target=log_target).mean()
    return F.kl_div(input, target, reduction=reduction, log_target=log_target)


def margin_ranking_loss(input1, input2, target, margin=0.0, reduction=1):
    return F.margin_ranking_loss(input1, input2, target, margin, reduction=_reduction(reduction))


def hinge_embedding_loss(input, target, margin=1.0, reduction=1):
    return F.hinge_embedding_loss(input, target, margin, reduction=_reduction(reduction))


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2.0, eps=1e-06, swap=False, reduction=1):
    return F.triplet_margin_loss(anchor, positive, negative, margin, p, eps, swap, reduction=_reduction(reduction))


def poisson_nll_loss(input, target, log_input, full, eps, reduction):
    return F.poisson_nll_loss(input, target, log_input, full, eps=eps, reduction=_reduction(reduction))


def cosine_embedding_loss(input1, input2, target, margin=0.0, reduction=1):
    return F.cosine_embedding_loss(input1, input2, target, margin, reduction=_reduction(reduction))


def binary_cross_entropy_with_logits(input, target, weight=None, pos_weight=None, reduction=1):
    return F.binary_cross_entropy_with_logits(input, target, weight, reduction=_reduction(reduction),
                                              pos_weight=pos_weight)


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction=1, zero_infinity=False):
    return F.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, _reduction(reduction), zero_infinity)


def relu_(input):
    return input.relu_()


def sigmoid_(input):
    return input.sigmoid_()


def tanh_(input):
    return input.tanh_()


__all__ = ["adaptive_avg_pool1d", "adaptive_max_pool1d", "alpha_dropout", "alpha_dropout_", "avg_pool1d", "batch_norm",
           "bilinear", "binary_cross_entropy_with_logits", "celu", "channel_shuffle", "conv1d", "conv2d", "conv3d",
           "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "cosine_embedding_loss", "cosine_similarity",
           "ctc_loss", "dropout", "dropout_", "embedding", "embedding_bag", "feature_alpha_dropout",
           "feature_alpha_dropout_", "group_norm", "gru_cell", "hinge_embedding_loss", "instance_norm", "kl_div",
           "layer_norm", "lstm_cell", "margin_ranking_loss", "max_pool1d", "max_pool2d", "max_pool3d",
           "pairwise_distance", "pdist", "pixel_shuffle", "pixel_unshuffle", "poisson_nll_loss", "prelu", "relu_",
           "rnn_relu_cell", "rnn_tanh_cell", "rrelu", "selu", "sigmoid_", "tanh_", "threshold", "triplet_margin_loss"]

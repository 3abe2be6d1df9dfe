"""The torch-level forms of nn.functional's ops (torch.conv2d, torch.layer_norm,
torch.kl_div, ...), which PyTorch scripts call besides the F forms. Most are
the F functions themselves; where PyTorch's torch-level signature differs
(the norms' argument order, embedding's weight first, dropout's required
``train``, adaptive_max_pool1d returning the indices too, the losses'
``reduction`` as ATen's integer code), a small wrapper maps it onto F."""

import numbers

from .nn import functional as F

_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _reduction(reduction):
    """ATen's reduction code (0 none, 1 mean, 2 sum), or F's name for it."""
    if isinstance(reduction, numbers.Integral) and int(reduction) in _REDUCTIONS:
        return _REDUCTIONS[int(reduction)]
    if reduction in _REDUCTIONS.values():
        return reduction
    raise ValueError(f"reduction must be 0 (none), 1 (mean) or 2 (sum), got {reduction!r}")


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


def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """torch.embedding: the weight first; a negative padding_idx means none.
    ddpc has no scale_grad_by_freq or sparse gradients here (refused)."""
    if scale_grad_by_freq or sparse:
        raise ValueError("embedding: ddpc has no scale_grad_by_freq or sparse gradients in torch.embedding's form; "
                         "use nn.Embedding")
    return F.embedding(indices, weight, padding_idx if padding_idx >= 0 else None)


def selu(input):
    return F.selu(input)


def celu(input, alpha=1.0):
    return F.celu(input, alpha)


def threshold(input, threshold, value):
    return F.threshold(input, threshold, value)


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, generator=None):
    """ddpc's rrelu draws from the default generator (``generator`` must be None)."""
    if generator is not None:
        raise ValueError("rrelu: ddpc draws from the default generator; pass generator=None")
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


__all__ = ["adaptive_avg_pool1d", "adaptive_max_pool1d", "avg_pool1d", "batch_norm", "bilinear",
           "binary_cross_entropy_with_logits", "celu", "channel_shuffle", "conv1d", "conv2d", "conv3d",
           "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "cosine_embedding_loss", "cosine_similarity",
           "ctc_loss", "dropout", "dropout_", "embedding", "group_norm", "hinge_embedding_loss", "instance_norm",
           "kl_div", "layer_norm", "margin_ranking_loss", "max_pool1d", "max_pool2d", "max_pool3d", "pairwise_distance",
           "pdist", "pixel_shuffle", "pixel_unshuffle", "poisson_nll_loss", "prelu", "relu_", "rrelu", "selu",
           "sigmoid_", "tanh_", "threshold", "triplet_margin_loss"]

"""The losses built from autograd ops: margin and embedding losses and the
Gaussian and Poisson negative log likelihoods. (The losses one fused _C op
computes are in functional.py.) Each follows PyTorch's formula step for step,
so values and gradients agree with it also at ties and clamps."""

import math

from .. import autograd as _ag
from .._C import ArgumentError, DtypeError
from .._dtype import int64
from ..tensor import Tensor, full_like, zeros_like


def _reduce(loss, reduction):
    """The elementwise ``loss`` summed, averaged or left as it is."""
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ArgumentError(f"{reduction} is not a valid value for reduction (use 'none', 'mean' or 'sum')")


def _tensors(what, *values):
    for v in values:
        if not isinstance(v, Tensor):
            raise TypeError(f"{what} takes ddpc tensors, got {type(v).__name__}")


def _long_target(what, target):
    """Refuses class indices that are not int64, as PyTorch's margin losses do."""
    if target.dtype is not int64:
        raise DtypeError(f"{what}: expected scalar type Long but found {target.dtype}")


def margin_ranking_loss(input1, input2, target, margin, reduction):
    """max(0, -target * (input1 - input2) + margin): target 1 asks input1 to rank higher, -1 lower."""
    _tensors("margin_ranking_loss", input1, input2, target)
    if not input1.ndim == input2.ndim == target.ndim:
        raise ArgumentError("margin_ranking_loss: all input tensors should have the same number of dims, got "
                            f"{input1.shape}, {input2.shape} and {target.shape}")
    return _reduce((-target * (input1 - input2) + margin).clamp_min(0), reduction)


def hinge_embedding_loss(input, target, margin, reduction):
    """input where target is 1, max(0, margin - input) where it is -1 (other
    target values get both terms, as in PyTorch)."""
    _tensors("hinge_embedding_loss", input, target)
    beyond = _ag.where(target != 1, (margin - input).clamp_min(0), 0.0)
    return _reduce(beyond + _ag.where(target != -1, input, 0.0), reduction)


def soft_margin_loss(input, target, reduction):
    """log(1 + exp(-target * input)), the logistic loss for targets of 1 and -1."""
    _tensors("soft_margin_loss", input, target)
    return _reduce(_ag.softplus(-target * input, 1.0, math.inf), reduction)


# PyTorch's guard against a zero magnitude in cosine_embedding_loss.
_COSINE_EPS = 1e-12


def cosine_embedding_loss(input1, input2, target, margin, reduction):
    """1 - cos(input1, input2) where target is 1, max(0, cos - margin) where it
    is -1; the cosine is along the last dim of (N, D) or (D,) inputs."""
    _tensors("cosine_embedding_loss", input1, input2, target)
    if input1.ndim not in (1, 2) or input1.shape != input2.shape or target.ndim != input1.ndim - 1:
        raise ArgumentError("cosine_embedding_loss: expected (N, D) or (D,) inputs of one shape and an (N,) or () "
                            f"target, got {input1.shape}, {input2.shape} and {target.shape}")
    dot = (input1 * input2).sum(-1)
    mag = ((input1 * input1).sum(-1) + _COSINE_EPS) * ((input2 * input2).sum(-1) + _COSINE_EPS)
    cos = dot / mag.sqrt()
    loss = _ag.where(target == 1, 1 - cos, 0.0) + _ag.where(target == -1, (cos - margin).clamp_min(0), 0.0)
    return _reduce(loss, reduction)


def triplet_margin_with_distance_loss(anchor, positive, negative, distance_function, margin, swap, reduction):
    """max(0, margin + d(anchor, positive) - d(anchor, negative)); with ``swap``
    the negative's distance is the smaller of d(anchor, negative) and d(positive, negative)."""
    _tensors("triplet_margin_loss", anchor, positive, negative)
    if not anchor.ndim == positive.ndim == negative.ndim:
        raise ArgumentError("triplet_margin_loss: the anchor, positive and negative should have the same number of "
                            f"dims, got {anchor.shape}, {positive.shape} and {negative.shape}")
    if margin <= 0:
        raise ArgumentError(f"triplet_margin_loss: margin must be greater than 0, got {margin}")
    d_pos = distance_function(anchor, positive)
    d_neg = distance_function(anchor, negative)
    if swap:
        d_neg = _ag.minimum(d_neg, distance_function(positive, negative))
    return _reduce((margin + d_pos - d_neg).clamp_min(0), reduction)


def gaussian_nll_loss(input, target, var, full, eps, reduction):
    """0.5 * (log(var) + (input - target)^2 / var), var clamped at ``eps`` (the
    clamp is not differentiated, as in PyTorch). var has the input's shape, or
    one size-1 dim where it differs, or lacks the input's last dim, or is a number."""
    _tensors("gaussian_nll_loss", input, target)
    if isinstance(var, (int, float)):
        if var < 0:
            raise ArgumentError("var has negative entry/entries")
        var = full_like(input, float(var))
    elif bool((var < 0).any()):
        raise ArgumentError("var has negative entry/entries")
    if var.shape != input.shape:
        if input.shape[:-1] == var.shape:
            var = var.unsqueeze(-1)
        elif not (var.ndim == input.ndim and sum(v for i, v in zip(input.shape, var.shape) if i != v) == 1):
            raise ArgumentError("var is of incorrect size")
    if reduction not in ("none", "mean", "sum"):
        raise ArgumentError(reduction + " is not valid")
    var = var + (var.detach().clamp_min(eps) - var.detach())
    loss = 0.5 * (var.log() + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


def poisson_nll_loss(input, target, log_input, full, eps, reduction):
    """exp(input) - target * input for log-rates (``log_input``), else
    input - target * log(input + eps); ``full`` adds Stirling's approximation
    of log(target!) where target > 1."""
    _tensors("poisson_nll_loss", input, target)
    loss = input.exp() - target * input if log_input else input - target * (input + eps).log()
    if full:
        # Where target <= 1 the term is masked out; 1 stands in for it there so that the log stays finite.
        t = _ag.where(target > 1, target, 1.0)
        stirling = t * t.log() - t + 0.5 * (2 * math.pi * t).log()
        loss = loss + _ag.where(target > 1, stirling, 0.0)
    return _reduce(loss, reduction)


def multilabel_soft_margin_loss(input, target, weight, reduction):
    """The binary logistic loss of each class, (weighted,) averaged over the
    classes (the last dim), then reduced over the samples."""
    _tensors("multilabel_soft_margin_loss", input, target)
    loss = -(target * _log_sigmoid(input) + (1 - target) * _log_sigmoid(-input))
    if weight is not None:
        loss = loss * weight
    loss = loss.sum(-1) / input.shape[-1] if input.ndim else loss
    return _reduce(loss, reduction)


def multi_margin_loss(input, target, p, margin, weight, reduction):
    """sum over i != y of max(0, margin - x[y] + x[i])^p / C for each sample of
    (N, C) or (C,) ``input`` with class y = target (times weight[y])."""
    _tensors("multi_margin_loss", input, target)
    _long_target("multi_margin_loss", target)
    if p not in (1, 2):
        raise ArgumentError(f"multi_margin_loss: only p == 1 and p == 2 are supported, got {p}")
    if input.ndim not in (1, 2) or target.ndim != input.ndim - 1 or (input.ndim == 2 and
                                                                      target.shape[0] != input.shape[0]):
        raise ArgumentError("multi_margin_loss: expected an (N, C) or (C,) input and an (N,) or () target, got "
                            f"{input.shape} and {target.shape}")
    rows = input.reshape(-1, input.shape[-1])
    classes = target.reshape(-1, 1)
    z = (margin - rows.gather(1, classes) + rows).clamp_min(0)
    if p == 2:
        z = z * z
    if weight is not None:
        z = z * weight[classes.reshape(-1)].reshape(-1, 1)
    own = zeros_like(z).scatter(1, classes, 1.0)
    loss = (z * (1 - own)).sum(1) / input.shape[-1]
    return _reduce(loss.reshape(target.shape), reduction)


def _log_sigmoid(x):
    """log(sigmoid(x)) as -softplus(-x), which neither overflows nor loses small values."""
    return -_ag.softplus(-x, 1.0, math.inf)


def multilabel_margin_loss(input, target, reduction):
    """For each sample of (N, C) or (C,) ``input``: the sum over its target
    classes j (the leading entries of ``target`` before the first -1) and
    the classes i that are not targets of max(0, 1 - (x[j] - x[i])), over C."""
    _tensors("multilabel_margin_loss", input, target)
    if input.ndim not in (1, 2) or target.shape != input.shape or input.shape[-1] == 0:
        raise ArgumentError("multilabel_margin_loss: expected a non-empty (N, C) or (C,) input and a target of its "
                            f"shape, got {input.shape} and {target.shape}")
    _long_target("multilabel_margin_loss", target)
    c = input.shape[-1]
    rows, labels = input.reshape(-1, c), target.reshape(-1, c)
    listed = (labels == -1).long().cumsum(1) == 0  # the entries before the first -1
    if bool((listed & ((labels < 0) | (labels >= c))).any()):
        raise ArgumentError(f"multilabel_margin_loss: target class out of range [0, {c})")
    classes = labels.masked_fill(~listed, 0)  # entries past the list may hold anything: they point at class 0
    listed = listed.to(rows.dtype)
    others = 1 - (zeros_like(rows).scatter_add(1, classes, listed) > 0).to(rows.dtype)
    margins = (1 - rows.gather(1, classes).unsqueeze(2) + rows.unsqueeze(1)).clamp_min(0)  # (N, target, class)
    loss = (margins * listed.unsqueeze(2) * others.unsqueeze(1)).sum((1, 2)) / c
    return _reduce(loss.reshape(target.shape[:-1]), reduction)

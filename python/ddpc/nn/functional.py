"""ddpc.nn.functional: the stateless forms of the layers and losses.

Most functions are one fused _C op forward and one backward (see
ddpc.autograd); batch_norm is built from the autograd ops. The
``inplace=True`` forms compute aside and write the result into the input,
which then holds it as after PyTorch's in-place op.
"""

import warnings

from .. import autograd as _ag
from ..autograd import cross_entropy, embedding, gelu, layer_norm, linear, mse_loss, sigmoid, softplus, tanh

__all__ = ["batch_norm", "cross_entropy", "dropout", "elu", "embedding", "flatten", "gelu", "hardsigmoid", "hardswish",
           "hardtanh", "layer_norm", "leaky_relu", "linear", "log_softmax", "mish", "mse_loss", "relu", "relu6",
           "sigmoid", "silu", "softmax", "softplus", "tanh"]


def _apply(fn, input, inplace, what, *args):
    """fn(input, *args), written into input when ``inplace``."""
    if inplace:
        return _ag.inplace_apply(input, lambda t: fn(t, *args), what)
    return fn(input, *args)


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
    unbiased), else with the running statistics."""
    return _batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps, None)


class _AllReduceSum(_ag.Node):
    """The sum over the group's ranks of a tensor each computes: each rank's
    input moves every rank's output, so its gradient is the sum of theirs."""

    def __init__(self, a, group):
        super().__init__((a,), ())
        self.group = group

    def backward(self, g):
        return (_all_reduce_sum(g.detach(), self.group),)


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
        raise ValueError(f"batch_norm: expected an input of at least 2 dims (N, C, ...), got {input.shape}")
    n, c = input.shape[0], input.shape[1]
    x = input.reshape(n, c, -1)
    if not training and (running_mean is None or running_var is None):
        raise ValueError("batch_norm: running_mean and running_var are needed outside training")
    if training:
        count = n * x.shape[2]
        total = x.sum(2, keepdim=True).sum(0, keepdim=True)
        if group is not None:
            count = _count_over(count, group, input.device)
            total = _all_reduce_sum(total, group)
        if count <= 1:
            raise ValueError(f"batch_norm: expected more than 1 value per channel when training, got input of "
                             f"shape {input.shape}")
        mean = total / count
        centred = x - mean
        sq = (centred * centred).sum(2, keepdim=True).sum(0, keepdim=True)
        if group is not None:
            sq = _all_reduce_sum(sq, group)
        var = sq / count
        if running_mean is not None:
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
    return y.reshape(input.shape)


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
        if not -max(nd, 1) <= d < max(nd, 1):  # a 0-d tensor flattens as if it had one dim
            raise IndexError(f"flatten: dim {d} is out of range for a tensor of {nd} dims")
    if nd == 0:
        return input.reshape(1)
    start, end = start_dim % nd, end_dim % nd
    if start > end:
        raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    merged = 1
    for s in input.shape[start:end + 1]:
        merged *= s
    return input.reshape(input.shape[:start] + (merged,) + input.shape[end + 1:])


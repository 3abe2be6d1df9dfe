"""Folding an evaluation-mode batch norm into the convolution or linear
layer before it, as torch.nn.utils.fusion: the layer's weight scaled per
output channel by gamma / sqrt(running_var + eps), and its bias moved by the
running mean and beta, so one layer computes what the pair did."""

import copy

from ...tensor import ones_like, zeros_like


def _bn_scale(bn_rv, bn_eps, bn_w):
    return (ones_like(bn_rv) if bn_w is None else bn_w) * (bn_rv + bn_eps).rsqrt()


def _fused_bias(bias, bn_rm, scale, bn_b):
    bias = zeros_like(bn_rm) if bias is None else bias
    return bias, (bias - bn_rm) * scale + (zeros_like(bn_rm) if bn_b is None else bn_b)


def fuse_conv_bn_weights(conv_w, conv_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b, transpose=False):
    """The (weight, bias) Parameters of a convolution computing conv then bn
    (bn's running statistics, eps and affine weight and bias, either None);
    ``transpose`` for a transposed convolution, whose output channels are
    the weight's dim 1."""
    from ..modules import Parameter

    scale = _bn_scale(bn_rv, bn_eps, bn_w)
    shape = ([1, -1] if transpose else [-1, 1]) + [1] * (conv_w.ndim - 2)
    fused_w = (conv_w * scale.reshape(shape)).to(dtype=conv_w.dtype)
    conv_b, fused_b = _fused_bias(conv_b, bn_rm, scale, bn_b)
    return Parameter(fused_w, conv_w.requires_grad), Parameter(fused_b.to(dtype=conv_b.dtype), conv_b.requires_grad)


def fuse_linear_bn_weights(linear_w, linear_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b):
    """The (weight, bias) Parameters of a linear layer computing linear then bn."""
    from ..modules import Parameter

    scale = _bn_scale(bn_rv, bn_eps, bn_w)
    linear_b, fused_b = _fused_bias(linear_b, bn_rm, scale, bn_b)
    return Parameter(linear_w * scale.unsqueeze(-1), linear_w.requires_grad), Parameter(fused_b, linear_b.requires_grad)


def _check_eval(layer, bn):
    if layer.training or bn.training:
        raise ValueError("Fusion only for eval!")
    if bn.running_mean is None or bn.running_var is None:
        raise ValueError("fusion needs a batch norm that tracks running statistics")


def fuse_conv_bn_eval(conv, bn, transpose=False):
    """A copy of ``conv`` (in eval mode) that computes bn(conv(x)) for the
    eval-mode batch norm ``bn``."""
    _check_eval(conv, bn)
    fused = copy.deepcopy(conv)
    fused.weight, fused.bias = fuse_conv_bn_weights(fused.weight, fused.bias, bn.running_mean, bn.running_var,
                                                    bn.eps, bn.weight, bn.bias, transpose)
    return fused


def fuse_linear_bn_eval(linear, bn):
    """A copy of ``linear`` (in eval mode) that computes bn(linear(x)) for
    the eval-mode batch norm ``bn`` (over its out_features, or one feature)."""
    _check_eval(linear, bn)
    if linear.out_features != bn.num_features and bn.num_features != 1:
        raise ValueError("To fuse, linear.out_features must equal bn.num_features or bn.num_features must equal 1")
    fused = copy.deepcopy(linear)
    fused.weight, fused.bias = fuse_linear_bn_weights(fused.weight, fused.bias, bn.running_mean, bn.running_var,
                                                      bn.eps, bn.weight, bn.bias)
    return fused


__all__ = ["fuse_conv_bn_eval", "fuse_conv_bn_weights", "fuse_linear_bn_eval", "fuse_linear_bn_weights"]

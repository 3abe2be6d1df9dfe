"""ddpc.nn.functional: the stateless forms of the layers and losses.

Each function is one fused _C op forward and one backward (see ddpc.autograd).
"""

from ..autograd import (cross_entropy, dropout, embedding, gelu, layer_norm, linear, log_softmax, mse_loss, relu,
                        sigmoid, softmax, tanh)

__all__ = ["cross_entropy", "dropout", "embedding", "flatten", "gelu", "layer_norm", "linear", "log_softmax",
           "mse_loss", "relu", "sigmoid", "softmax", "tanh"]


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

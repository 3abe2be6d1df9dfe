"""ddpc.nn.utils: gradient clipping, as torch.nn.utils, and (ddpc.nn.utils.rnn) packed sequences."""

import math

from ... import autograd
from ...tensor import Tensor, float32, tensor
from . import rnn  # noqa: F401  (ddpc.nn.utils.rnn, as torch.nn.utils.rnn)


def _grads(parameters):
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    return [p.grad for p in params if p.grad is not None]


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Scales the gradients of ``parameters`` in place so that their joint
    ``norm_type``-norm (over all of them, as one vector) is at most
    ``max_norm``; returns that norm before scaling (a 0-d float32 tensor)."""
    del foreach
    grads = _grads(parameters)
    norm_type = float(norm_type)
    if norm_type <= 0:
        raise ValueError(f"norm_type must be > 0 or inf, got {norm_type}")
    with autograd.no_grad():
        if not grads:
            total = 0.0
        elif norm_type == math.inf:
            total = max(max(g.max().item(), -g.min().item()) for g in grads if g.numel())
        else:
            # |g|^p as (g*g)^(p/2), summed in float32 or wider on each gradient's device
            parts = [((g * g) ** (norm_type / 2)).sum().item() if norm_type != 2 else (g * g).sum().item()
                     for g in grads if g.numel()]
            total = math.fsum(parts) ** (1.0 / norm_type)
        if error_if_nonfinite and not math.isfinite(total):
            raise RuntimeError(f"the total norm of order {norm_type} of the gradients is {total}: not finite "
                               "(error_if_nonfinite=True)")
        coef = float(max_norm) / (total + 1e-6)
        if coef < 1.0:
            for g in grads:
                g.mul_(coef)
    return tensor(total, dtype=float32)


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamps every gradient element of ``parameters`` into [-clip_value, clip_value] in place."""
    del foreach
    c = float(clip_value)
    with autograd.no_grad():
        for g in _grads(parameters):
            over, under = (g > c).to(dtype=g.dtype), (g < -c).to(dtype=g.dtype)
            g.copy_(g * (1 - over - under) + over * c - under * c)

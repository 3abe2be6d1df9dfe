"""Adam and AdamW (torch.optim.Adam / AdamW update rules, bias correction and defaults).

Float16 and bfloat16 parameters are updated in float32 and rounded once, with
exp_avg and exp_avg_sq in their own dtype. ``foreach`` and ``fused`` are
accepted for PyTorch's signature: every step is one fused multi-tensor call.
``capturable`` and ``differentiable`` are not supported (True raises).
"""

from .. import _C
from .._dtype import real_pairs
from ..tensor import zeros_like
from .optimizer import Optimizer, check_common


class Adam(Optimizer):
    """Adam; ``decoupled_weight_decay=True`` makes it AdamW."""

    _sparse_refusal = "Adam does not support sparse gradients, please consider SparseAdam instead"
    _complex_params = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, *,
                 foreach=None, maximize=False, capturable=False, differentiable=False, fused=None,
                 decoupled_weight_decay=False):
        del foreach, fused
        if capturable or differentiable:
            raise ValueError(f"{type(self).__name__}: capturable and differentiable are not supported")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad, maximize=maximize,
                                      decoupled_weight_decay=decoupled_weight_decay))

    def _check_group(self, g):
        check_common(g, betas=True)

    def _step_group(self, group):
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            return
        amsgrad = bool(group["amsgrad"])
        by_step = {}
        for p in params:
            s = self.state[p]
            if not s:
                s["step"] = 0
                s["exp_avg"] = zeros_like(p)
                s["exp_avg_sq"] = zeros_like(p)
            if amsgrad and "max_exp_avg_sq" not in s:
                s["max_exp_avg_sq"] = zeros_like(p)
            by_step.setdefault(s["step"] + 1, []).append(p)
        b1, b2 = group["betas"]
        # One call per group (params added to a group later get a call of their own until caught up).
        for step, batch in by_step.items():
            st = [self.state[p] for p in batch]
            # Complex parameters (and their state) go as their view_as_real pairs, as in PyTorch.
            params, grads, avgs, sqs, maxes = ([real_pairs(t._buf) for t in ts] for ts in (
                batch, [p.grad for p in batch], [s["exp_avg"] for s in st], [s["exp_avg_sq"] for s in st],
                [s["max_exp_avg_sq"] for s in st] if amsgrad else []))
            _C.adam_step(params, grads, avgs, sqs, maxes if amsgrad else None, step, float(group["lr"]),
                         float(b1), float(b2), float(group["eps"]), float(group["weight_decay"]),
                         bool(group["decoupled_weight_decay"]), bool(group["maximize"]))
            # Counted only once taken: after a step that raised, the next one is still this step.
            for s in st:
                s["step"] = step


class AdamW(Adam):
    """Adam with decoupled weight decay (default 1e-2)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *,
                 maximize=False, foreach=None, capturable=False, differentiable=False, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach, maximize=maximize,
                         capturable=capturable, differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)

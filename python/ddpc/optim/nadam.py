"""NAdam and RAdam (torch.optim.NAdam's and RAdam's update rules, defaults and state)."""

from ._fused import _FusedOptimizer
from .optimizer import check_common


class _AdamVariant(_FusedOptimizer):
    def _check_group(self, g):
        check_common(g, betas=True)

    def _state_names(self, group):
        return ["exp_avg", "exp_avg_sq"]

    def _step_args(self, group):
        b1, b2 = group["betas"]
        return dict(beta1=float(b1), beta=float(b2), decoupled=bool(group["decoupled_weight_decay"]))


class NAdam(_AdamVariant):
    """Adam with Nesterov momentum and momentum decay (``mu_product`` in the
    state is a float); ``decoupled_weight_decay=True`` decays weights as
    AdamW. ``capturable`` and ``differentiable`` are not supported."""

    _kind = "nadam"

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, momentum_decay=4e-3,
                 decoupled_weight_decay=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False):
        del foreach
        if capturable or differentiable:
            raise ValueError("NAdam: capturable and differentiable are not supported")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      momentum_decay=momentum_decay,
                                      decoupled_weight_decay=decoupled_weight_decay, maximize=maximize))

    def _check_group(self, g):
        super()._check_group(g)
        if g["momentum_decay"] < 0:
            raise ValueError(f"Invalid momentum_decay value: {g['momentum_decay']}")

    def _init_state(self, p, group):
        s = self.state[p]
        if not s:
            s["step"] = 0
            s["mu_product"] = 1.0
        super()._init_state(p, group)

    def _step_args(self, group):
        return dict(super()._step_args(group), momentum_decay=float(group["momentum_decay"]))


class RAdam(_AdamVariant):
    """Rectified Adam; ``decoupled_weight_decay=True`` decays weights as AdamW.
    ``capturable`` and ``differentiable`` are not supported."""

    _kind = "radam"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, decoupled_weight_decay=False,
                 *, foreach=None, maximize=False, capturable=False, differentiable=False):
        del foreach
        if capturable or differentiable:
            raise ValueError("RAdam: capturable and differentiable are not supported")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      decoupled_weight_decay=decoupled_weight_decay, maximize=maximize))

"""Adamax (torch.optim.Adamax's update rule, defaults and state)."""

from ._fused import _FusedOptimizer
from .optimizer import check_common


class Adamax(_FusedOptimizer):
    """Adamax, Adam over the infinity norm; ``capturable`` and ``differentiable``
    are not supported."""

    _kind = "adamax"

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, foreach=None, *,
                 maximize=False, differentiable=False, capturable=False):
        del foreach
        if capturable or differentiable:
            raise ValueError("Adamax: capturable and differentiable are not supported")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      maximize=maximize))

    def _check_group(self, g):
        check_common(g, betas=True)

    def _state_names(self, group):
        return ["exp_avg", "exp_inf"]

    def _step_args(self, group):
        b1, b2 = group["betas"]
        return dict(beta1=float(b1), beta=float(b2))

"""Adadelta (torch.optim.Adadelta's update rule, defaults and state)."""

from ._fused import _FusedOptimizer
from .optimizer import check_common


class Adadelta(_FusedOptimizer):
    """Adadelta; ``capturable`` and ``differentiable`` are not supported."""

    _kind = "adadelta"

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, foreach=None, *, capturable=False,
                 maximize=False, differentiable=False):
        del foreach
        if capturable or differentiable:
            raise ValueError("Adadelta: capturable and differentiable are not supported")
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize))

    def _check_group(self, g):
        check_common(g)
        if not 0.0 <= g["rho"] <= 1.0:
            raise ValueError(f"Invalid rho value: {g['rho']}")

    def _state_names(self, group):
        return ["square_avg", "acc_delta"]

    def _step_args(self, group):
        return dict(beta=float(group["rho"]))

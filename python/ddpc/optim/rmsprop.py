"""RMSprop (torch.optim.RMSprop's update rule, defaults and state)."""

from ._fused import _FusedOptimizer
from .optimizer import check_common


class RMSprop(_FusedOptimizer):
    """RMSprop with optional momentum and centering; ``capturable`` and
    ``differentiable`` are not supported."""

    _kind = "rmsprop"

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False,
                 capturable=False, foreach=None, maximize=False, differentiable=False):
        del foreach
        if capturable or differentiable:
            raise ValueError("RMSprop: capturable and differentiable are not supported")
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                                      centered=centered, maximize=maximize))

    def _check_group(self, g):
        check_common(g)
        if g["momentum"] < 0:
            raise ValueError(f"Invalid momentum value: {g['momentum']}")
        if g["alpha"] < 0:
            raise ValueError(f"Invalid alpha value: {g['alpha']}")

    def _state_names(self, group):
        return ["square_avg", "momentum_buffer" if group["momentum"] > 0 else None,
                "grad_avg" if group["centered"] else None]

    def _step_args(self, group):
        return dict(beta=float(group["alpha"]), momentum=float(group["momentum"]), centered=bool(group["centered"]))

"""Adagrad (torch.optim.Adagrad's update rule, defaults and state)."""

from ._fused import _FusedOptimizer
from .optimizer import check_common


class Adagrad(_FusedOptimizer):
    """Adagrad; as PyTorch's, the state (``sum`` at ``initial_accumulator_value``)
    exists from construction. Sparse gradients, ``differentiable`` and ``fused``
    are not supported (``fused`` is accepted and ignored: every step is fused)."""

    _kind = "adagrad"

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10,
                 foreach=None, *, maximize=False, differentiable=False, fused=None):
        del foreach, fused
        if differentiable:
            raise ValueError("Adagrad: differentiable is not supported")
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value, maximize=maximize))
        for group in self.param_groups:
            for p in group["params"]:
                self._init_state(p, group)

    def _check_group(self, g):
        check_common(g)
        if g["lr_decay"] < 0:
            raise ValueError(f"Invalid lr_decay value: {g['lr_decay']}")
        if g["initial_accumulator_value"] < 0:
            raise ValueError(f"Invalid initial_accumulator_value value: {g['initial_accumulator_value']}")

    def _state_names(self, group):
        return ["sum"]

    def _initial_state(self, group):
        return float(group["initial_accumulator_value"])

    def _step_args(self, group):
        return dict(lr_decay=float(group["lr_decay"]))

"""Adagrad (torch.optim.Adagrad's update rule, defaults and state)."""

from .._sparse_coo import add_rows_, table_of
from ._fused import _FusedOptimizer
from .optimizer import check_common


class Adagrad(_FusedOptimizer):
    """Adagrad; as PyTorch's, the state (``sum`` at ``initial_accumulator_value``)
    exists from construction. Sparse gradients update only their rows, as
    PyTorch's (no weight_decay with them). ``differentiable`` and ``fused``
    are not supported (``fused`` is accepted and ignored: every step is fused)."""

    _kind = "adagrad"
    _sparse_grads = True

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

    def _step_group(self, group):
        for p in group["params"]:
            if p.grad is not None and p.grad.is_sparse:
                self._sparse_step(p, group)
        super()._step_group(group)

    def _dense_grads(self, group):
        return [p for p in group["params"] if p.grad is not None and not p.grad.is_sparse]

    def _sparse_step(self, p, group):
        """PyTorch's update for a sparse gradient: the sum and the parameter change in the gradient's rows only."""
        if group["weight_decay"] != 0:
            raise RuntimeError("weight_decay option is not compatible with sparse gradients")
        self._init_state(p, group)
        state = self.state[p]
        state["step"] += 1
        clr = group["lr"] / (1 + (state["step"] - 1) * group["lr_decay"])
        grad = (-p.grad if group["maximize"] else p.grad).coalesce()
        if grad._nnz() == 0:
            return
        keys, g = grad._keys(), grad._values().reshape(grad._nnz(), -1)
        sums = table_of(state["sum"], grad)
        add_rows_(sums, keys, g * g)
        std = sums.index_select(0, keys).sqrt() + group["eps"]
        add_rows_(table_of(p, grad), keys, g / std * -clr)

    def _step_args(self, group):
        return dict(lr_decay=float(group["lr_decay"]))

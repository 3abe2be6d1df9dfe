"""SparseAdam (torch.optim.SparseAdam's update rule): Adam for sparse
gradients that updates only the rows a gradient holds, moments included
(lazy moments: a row's moments decay only in the steps that touch it)."""

import math

from .._sparse_coo import add_rows_, table_of
from ..tensor import zeros_like
from .optimizer import Optimizer


class SparseAdam(Optimizer):
    _sparse_grads = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, maximize=False):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, maximize=maximize))

    def _check_group(self, g):
        if not 0.0 < g["lr"]:
            raise ValueError(f"Invalid learning rate: {g['lr']}")
        if not 0.0 < g["eps"]:
            raise ValueError(f"Invalid epsilon value: {g['eps']}")
        for i, b in enumerate(g["betas"]):
            if not 0.0 <= b < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {b}")
        sparse = [i for i, p in enumerate(g["params"]) if p.is_sparse]
        if sparse:
            raise ValueError(f"Sparse params at indices {sparse}: SparseAdam requires dense parameter tensors")

    def _step_group(self, group):
        beta1, beta2 = group["betas"]
        lr, eps = float(group["lr"]), float(group["eps"])
        for p in group["params"]:
            if p.grad is None:
                continue
            if not p.grad.is_sparse:
                raise RuntimeError("SparseAdam does not support dense gradients, please consider Adam instead")
            state = self.state[p]
            if not state:
                state.update(step=0, exp_avg=zeros_like(p), exp_avg_sq=zeros_like(p))
            state["step"] += 1
            grad = (-p.grad if group["maximize"] else p.grad).coalesce()
            if grad._nnz() == 0:
                continue
            keys, g = grad._keys(), grad._values().reshape(grad._nnz(), -1)
            avg, avg_sq = table_of(state["exp_avg"], grad), table_of(state["exp_avg_sq"], grad)
            old_avg, old_sq = avg.index_select(0, keys), avg_sq.index_select(0, keys)
            # old <- b * old + (1 - b) * new, as an update added to the rows present
            avg_step = (g - old_avg) * (1 - beta1)
            sq_step = (g * g - old_sq) * (1 - beta2)
            add_rows_(avg, keys, avg_step)
            add_rows_(avg_sq, keys, sq_step)
            step = state["step"]
            step_size = lr * math.sqrt(1 - beta2 ** step) / (1 - beta1 ** step)
            denom = (sq_step + old_sq).sqrt() + eps
            add_rows_(table_of(p, grad), keys, (avg_step + old_avg) / denom * -step_size)

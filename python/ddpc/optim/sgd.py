"""Stochastic gradient descent with momentum, dampening, Nesterov and weight decay (torch.optim.SGD's rules).

Float16 and bfloat16 parameters are updated in float32 and rounded once, with
their momentum buffers in their own dtype. ``foreach`` and ``fused`` are
accepted for PyTorch's signature: every step is one fused multi-tensor call.
``differentiable`` is not supported (True raises). Sparse gradients are
updated as PyTorch does, by sparse tensor ops: the rows present move, and a
momentum buffer started from a sparse gradient stays sparse.
"""

from .. import _C
from .._dtype import real_pairs
from ..tensor import empty_like
from .optimizer import Optimizer, check_common


class SGD(Optimizer):
    _sparse_grads = True
    _complex_params = True

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False, *, maximize=False,
                 foreach=None, differentiable=False, fused=None):
        del foreach, fused
        if differentiable:
            raise ValueError("SGD: differentiable is not supported")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov, maximize=maximize))

    def _check_group(self, g):
        check_common(g)
        if g["momentum"] < 0:
            raise ValueError(f"Invalid momentum value: {g['momentum']}")
        if g["nesterov"] and (g["momentum"] <= 0 or g["dampening"] != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")

    def _step_group(self, group):
        for p in group["params"]:
            if p.grad is not None and p.grad.is_sparse:
                self._sparse_step(p, group)
        params = [p for p in group["params"] if p.grad is not None and not p.grad.is_sparse]
        if not params:
            return
        momentum = float(group["momentum"])
        # Buffers start as a copy of the first step's gradient, so new ones go in their own call.
        fresh, running = [], []
        for p in params:
            (running if "momentum_buffer" in self.state[p] else fresh).append(p)
        for batch, first in ((fresh, True), (running, False)):
            if not batch:
                continue
            if momentum == 0:
                bufs = [None] * len(batch)
            elif first:
                bufs = [empty_like(p) for p in batch]
            else:
                bufs = [self.state[p]["momentum_buffer"] for p in batch]
            _C.sgd_step([real_pairs(p._buf) for p in batch], [real_pairs(p.grad._buf) for p in batch],
                        [None if b is None else real_pairs(b._buf) for b in bufs], float(group["lr"]), momentum,
                        float(group["dampening"]), float(group["weight_decay"]), bool(group["nesterov"]), first,
                        bool(group["maximize"]))
            if momentum != 0 and first:
                # Kept only once the step has set them: a step that raised leaves no unset buffer behind.
                for p, b in zip(batch, bufs):
                    self.state[p]["momentum_buffer"] = b

    def _sparse_step(self, p, group):
        """PyTorch's single-tensor update for a sparse gradient, through sparse tensor ops."""
        grad = -p.grad if group["maximize"] else p.grad
        if group["weight_decay"] != 0:
            grad = grad.add(p, alpha=group["weight_decay"])  # raises as PyTorch's: add(sparse, dense)
        momentum = group["momentum"]
        if momentum != 0:
            state = self.state[p]
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = grad.detach().clone()
            else:
                buf.mul_(momentum).add_(grad, alpha=1 - group["dampening"])
            grad = grad.add(buf, alpha=momentum) if group["nesterov"] else buf
        p.add_(grad, alpha=-group["lr"])

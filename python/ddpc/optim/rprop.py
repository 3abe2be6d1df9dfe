"""Rprop, resilient backpropagation (torch.optim.Rprop's update rule, defaults and state)."""

from ..autograd import where
from ..tensor import full_like, ones_like, zeros_like
from .optimizer import Optimizer


class Rprop(Optimizer):
    """Rprop: each element's step size grows by ``etas[1]`` while its gradient
    keeps its sign and shrinks by ``etas[0]`` when the sign flips (and that
    element then skips its update), within ``step_sizes``. The step is made of
    whole-tensor ops, one parameter at a time. ``capturable`` and
    ``differentiable`` are not supported; ``foreach`` is accepted and ignored."""

    def __init__(self, params, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *, capturable=False, foreach=None,
                 maximize=False, differentiable=False):
        del foreach
        if capturable or differentiable:
            raise ValueError("Rprop: capturable and differentiable are not supported")
        super().__init__(params, dict(lr=lr, etas=tuple(etas), step_sizes=tuple(step_sizes), maximize=maximize))

    def _check_group(self, g):
        if g["lr"] < 0:
            raise ValueError(f"Invalid learning rate: {g['lr']}")
        etaminus, etaplus = g["etas"]
        if not 0.0 < etaminus < 1.0 < etaplus:
            raise ValueError(f"Invalid eta values: {etaminus}, {etaplus}")

    def _step_group(self, group):
        etaminus, etaplus = group["etas"]
        step_size_min, step_size_max = group["step_sizes"]
        for p in group["params"]:
            if p.grad is None:
                continue
            s = self.state[p]
            if not s:
                s["step"] = 0
                s["prev"] = zeros_like(p)
                s["step_size"] = full_like(p, float(group["lr"]))
            grad = -p.grad if group["maximize"] else p.grad
            sign = (grad * s["prev"]).sign()
            factor = where(sign > 0, etaplus, where(sign < 0, etaminus, ones_like(p)))
            s["step_size"].mul_(factor)
            s["step_size"].clamp_(step_size_min, step_size_max)
            # Where the sign flipped the element takes no step, and its next step starts afresh.
            grad = where(sign < 0, 0.0, grad)
            p.addcmul_(grad.sign(), s["step_size"], value=-1)
            s["prev"].copy_(grad)
            s["step"] += 1

"""ASGD, averaged stochastic gradient descent (torch.optim.ASGD's update rule, defaults and state)."""

from ..tensor import zeros_like
from .optimizer import Optimizer, check_common


class ASGD(Optimizer):
    """Averaged SGD: plain SGD steps with a decaying step size ``eta``, and
    ``ax``, the running average of the parameters from step ``t0`` on.
    ``eta`` and ``mu`` are Python floats in the state (PyTorch keeps 0-d
    tensors); ``capturable`` and ``differentiable`` are not supported;
    ``foreach`` is accepted and ignored."""

    def __init__(self, params, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0, foreach=None,
                 maximize=False, differentiable=False, capturable=False):
        del foreach
        if capturable or differentiable:
            raise ValueError("ASGD: capturable and differentiable are not supported")
        super().__init__(params, dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay,
                                      maximize=maximize))

    def _check_group(self, g):
        check_common(g)
        if g["lambd"] < 0:
            raise ValueError(f"Invalid lambd value: {g['lambd']}")
        if g["alpha"] < 0:
            raise ValueError(f"Invalid alpha value: {g['alpha']}")

    def _step_group(self, group):
        lr, lambd, alpha, t0 = float(group["lr"]), float(group["lambd"]), float(group["alpha"]), float(group["t0"])
        weight_decay = float(group["weight_decay"])
        for p in group["params"]:
            if p.grad is None:
                continue
            s = self.state[p]
            if not s:
                s.update(step=0, eta=lr, mu=1.0, ax=zeros_like(p))
            grad = -p.grad if group["maximize"] else p.grad
            if weight_decay != 0:
                grad = grad + weight_decay * p
            eta = s["eta"]
            p.mul_(1 - lambd * eta)
            p.sub_(eta * grad)
            if s["mu"] != 1:
                s["ax"].add_((p - s["ax"]) * s["mu"])
            else:
                s["ax"].copy_(p)
            step = s["step"] + 1
            s["step"] = step
            s["eta"] = lr / ((1 + lambd * lr * step) ** alpha)
            s["mu"] = 1 / max(1, step - t0)

"""Adafactor (torch.optim.Adafactor's update rule, defaults and state, PyTorch 2.5 on)."""

from .. import _dtype
from ..tensor import Tensor, zeros, zeros_like
from .optimizer import Optimizer


class Adafactor(Optimizer):
    """Adafactor: the second moment of a matrix's gradient is kept as row and
    column means (``row_var``, ``col_var``, over the last two dims), of a
    vector's as ``variance``; the step is relative to the parameter's RMS
    (at least ``eps[1]``), at most ``lr``, and clipped to RMS ``d``.
    ``eps[0]`` None means the parameter dtype's machine epsilon. The step is
    made of whole-tensor ops, one parameter at a time; ``foreach`` is accepted
    and ignored."""

    def __init__(self, params, lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0, weight_decay=0.0, *,
                 foreach=None, maximize=False):
        del foreach
        super().__init__(params, dict(lr=lr, beta2_decay=beta2_decay, eps=tuple(eps), d=d,
                                      weight_decay=weight_decay, maximize=maximize))

    def _check_group(self, g):
        if not 0.0 <= g["lr"]:
            raise ValueError(f"Learning rate should be >= 0 but is: {g['lr']}")
        if not 0.0 >= g["beta2_decay"]:
            raise ValueError(f"beta2_decay should be <= 0 but is: {g['beta2_decay']}")
        eps1, eps2 = g["eps"]
        if eps1 is not None and not 0.0 <= eps1:
            raise ValueError(f"epsilon1 should be >= 0 but is: {eps1}")
        if not 0.0 <= eps2:
            raise ValueError(f"epsilon2 should be >= 0 but is: {eps2}")
        if not 1.0 <= g["d"]:
            raise ValueError(f"Clipping threshold d should be >= 1 but is: {g['d']}")
        if not 0.0 <= g["weight_decay"]:
            raise ValueError(f"weight_decay should be >= 0 but is: {g['weight_decay']}")

    def _step_group(self, group):
        lr, d, weight_decay = float(group["lr"]), float(group["d"]), float(group["weight_decay"])
        eps1, eps2 = group["eps"]
        for p in group["params"]:
            if p.grad is None:
                continue
            s = self.state[p]
            if not s:
                s["step"] = 0
                if p.dim() > 1:
                    s["row_var"] = zeros(*p.shape[:-1], 1, dtype=p.dtype, device=p.device)
                    s["col_var"] = zeros(*p.shape[:-2], 1, p.shape[-1], dtype=p.dtype, device=p.device)
                else:
                    s["variance"] = zeros_like(p)
            grad = -p.grad if group["maximize"] else p.grad
            p_eps1 = _dtype.finfo(p.dtype).eps if eps1 is None else float(eps1)
            step = s["step"] + 1
            one_minus_beta2 = step ** float(group["beta2_decay"])
            rho = min(lr, 1 / step ** 0.5)
            alpha = max(eps2, float(p.norm()) / p.numel() ** 0.5) * rho
            if weight_decay != 0:
                p.mul_(1 - lr * weight_decay)
            if p.dim() > 1:
                s["row_var"].lerp_((grad * grad).mean(dim=-1, keepdim=True), one_minus_beta2)
                s["col_var"].lerp_((grad * grad).mean(dim=-2, keepdim=True), one_minus_beta2)
                var_estimate = s["row_var"] @ s["col_var"]
                var_estimate = var_estimate / s["row_var"].mean(dim=-2, keepdim=True).clamp(min=p_eps1)
            else:
                s["variance"].lerp_(grad * grad, one_minus_beta2)
                var_estimate = s["variance"]
            update = var_estimate.clamp(min=p_eps1 * p_eps1).rsqrt() * grad
            denom = max(1.0, float(update.norm()) / (update.numel() ** 0.5 * d))
            p.sub_(update * (alpha / denom))
            s["step"] = step

    @staticmethod
    def _cast_state(p, key, value):
        if key in ("row_var", "col_var") and isinstance(value, Tensor):  # the factors have shapes of their own
            return value.to(device=p.device, dtype=p.dtype, copy=True)
        return Optimizer._cast_state(p, key, value)

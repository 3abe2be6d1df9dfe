"""Weight averaging, as torch.optim.swa_utils: AveragedModel keeps a running
average of a model's parameters (stochastic weight averaging, or an
exponential moving average with ``get_ema_multi_avg_fn``), SWALR anneals the
learning rate to a constant for the averaging phase, and update_bn recomputes
BatchNorm statistics for the averaged weights with one pass over the data.

Under DistributedDataParallel every rank holds the same parameters after each
step, so averaging ``ddp_model.module`` on every rank keeps the averages equal
too, with no communication.
"""

import copy
import itertools
import math

from .. import autograd as _ag
from ..nn.modules import Module, _BatchNorm
from ..tensor import int64, tensor
from .lr_scheduler import LRScheduler, _per_group

__all__ = ["AveragedModel", "SWALR", "get_ema_avg_fn", "get_ema_multi_avg_fn", "get_swa_avg_fn",
           "get_swa_multi_avg_fn", "update_bn"]


def get_ema_multi_avg_fn(decay=0.999):
    """Averages in place: ema = decay * ema + (1 - decay) * current, for lists of tensors."""
    def ema_update(ema_params, current_params, num_averaged):
        for ema, cur in zip(ema_params, current_params):
            if ema.dtype.is_floating_point:
                ema.lerp_(cur, 1 - decay)
            else:
                ema.copy_(ema * decay + cur * (1 - decay))
    return ema_update


def get_swa_multi_avg_fn():
    """Averages in place: the equal-weight mean of every model seen so far, for
    lists of tensors. An integer tensor (BatchNorm's num_batches_tracked)
    takes the float32 mean truncated toward zero, as PyTorch's AveragedModel
    gives it on the host."""
    def swa_update(averaged_params, current_params, num_averaged):
        n = float(num_averaged)
        for avg, cur in zip(averaged_params, current_params):
            if avg.dtype.is_floating_point or avg.dtype.is_complex:
                avg.add_((cur - avg) / (n + 1))
            else:
                avg.copy_(avg + (cur - avg) / (n + 1))
    return swa_update


def get_ema_avg_fn(decay=0.999):
    """ema, current, n -> the new exponential moving average (one tensor)."""
    def ema_update(ema_param, current_param, num_averaged):
        return decay * ema_param + (1 - decay) * current_param
    return ema_update


def get_swa_avg_fn():
    """averaged, current, n -> the mean of n + 1 models (one tensor)."""
    def swa_update(averaged_param, current_param, num_averaged):
        return averaged_param + (current_param - averaged_param) / (float(num_averaged) + 1)
    return swa_update


class AveragedModel(Module):
    """A copy of ``model`` whose parameters (and, with ``use_buffers``, buffers)
    ``update_parameters(model)`` averages with the model's current ones: by
    default the equal-weight mean of every update (SWA); ``multi_avg_fn`` (lists
    of tensors, in place) or ``avg_fn`` (one tensor, returning the new average)
    choose another rule. The first update copies the model. Without
    ``use_buffers`` the buffers follow the model's as they are. ``n_averaged``
    counts the updates (a buffer, so it is saved with the state dict)."""

    def __init__(self, model, device=None, avg_fn=None, multi_avg_fn=None, use_buffers=False):
        super().__init__()
        if avg_fn is not None and multi_avg_fn is not None:
            raise ValueError("AveragedModel: give avg_fn or multi_avg_fn, not both")
        self.module = copy.deepcopy(model)
        if device is not None:
            self.module = self.module.to(device)
        self.register_buffer("n_averaged", tensor(0, dtype=int64, device=device or "cpu"))
        self.avg_fn, self.multi_avg_fn, self.use_buffers = avg_fn, multi_avg_fn, use_buffers

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def _tensors(self, model):
        return itertools.chain(model.parameters(), model.buffers()) if self.use_buffers else model.parameters()

    def update_parameters(self, model):
        mine = [p.detach() for p in self._tensors(self.module)]
        theirs = [p.detach() for p in self._tensors(model)]
        if len(mine) != len(theirs):
            raise ValueError(f"AveragedModel.update_parameters: the model has {len(theirs)} tensors to average, "
                             f"the averaged copy {len(mine)}")
        theirs = [t if t.device == m.device else t.to(device=m.device) for m, t in zip(mine, theirs)]
        n = int(self.n_averaged.item())
        with _ag.no_grad():
            if n == 0:
                for m, t in zip(mine, theirs):
                    m.copy_(t)
            elif self.avg_fn is not None:
                for m, t in zip(mine, theirs):
                    m.copy_(self.avg_fn(m, t, self.n_averaged))
            else:
                (self.multi_avg_fn or get_swa_multi_avg_fn())(mine, theirs, self.n_averaged)
            if not self.use_buffers:
                for m, t in zip(self.module.buffers(), model.buffers()):
                    m.detach().copy_(t.detach())
            self.n_averaged.add_(1)


class SWALR(LRScheduler):
    """Anneals each group's lr from its current value to ``swa_lr`` over
    ``anneal_epochs`` steps ('cos' or 'linear'), then holds it there."""

    def __init__(self, optimizer, swa_lr, anneal_epochs=10, anneal_strategy="cos", last_epoch=-1):
        for group, lr in zip(optimizer.param_groups, _per_group("swa_lr", optimizer, swa_lr)):
            group["swa_lr"] = lr
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"anneal_strategy must be one of 'cos' or 'linear', instead got {anneal_strategy}")
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError(f"anneal_epochs must be equal or greater than 0, got {anneal_epochs}")
        self.anneal_strategy, self.anneal_epochs = anneal_strategy, anneal_epochs
        super().__init__(optimizer, last_epoch)

    def _anneal(self, t):
        return t if self.anneal_strategy == "linear" else (1 - math.cos(math.pi * t)) / 2

    def get_lr(self):
        # The lr before this step's annealing is recovered from the current one,
        # so an lr changed by hand (or by another scheduler) carries on.
        step = self.last_epoch if self.anneal_epochs else max(1, self.last_epoch)
        prev_alpha = self._anneal(max(0.0, min(1.0, (step - 1) / max(1, self.anneal_epochs))))
        alpha = self._anneal(max(0.0, min(1.0, step / max(1, self.anneal_epochs))))
        lrs = []
        for g in self.optimizer.param_groups:
            prev = g["swa_lr"] if prev_alpha == 1 else (g["lr"] - prev_alpha * g["swa_lr"]) / (1 - prev_alpha)
            lrs.append(g["swa_lr"] * alpha + prev * (1 - alpha))
        return lrs


def update_bn(loader, model, device=None):
    """Recomputes the BatchNorm layers' running statistics of ``model`` as the
    plain average over one pass of ``loader`` (batches, or tuples whose first
    item is the input), in training mode; the mode and momenta are restored."""
    momenta = {}
    for m in model.modules():
        if isinstance(m, _BatchNorm):
            m.reset_running_stats()
            momenta[m] = m.momentum
    if not momenta:
        return
    was_training = model.training
    model.train()
    for m in momenta:
        m.momentum = None
    try:
        with _ag.no_grad():
            for batch in loader:
                if isinstance(batch, (list, tuple)):
                    batch = batch[0]
                if device is not None:
                    batch = batch.to(device=device)
                model(batch)
    finally:
        for m, momentum in momenta.items():
            m.momentum = momentum
        model.train(was_training)

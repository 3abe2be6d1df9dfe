"""Model averagers, as torch.distributed.algorithms.model_averaging.averagers:
``ModelAverager`` counts the training steps, and ``PeriodicModelAverager``
averages the parameters over its group every ``period`` steps once
``warmup_steps`` have passed. Call ``average_parameters`` after each
``optimizer.step()`` (or wrap the optimizer in
ddpc.distributed.optim.PostLocalSGDOptimizer, which does)."""

import abc
import warnings

from .... import distributed as dist
from . import utils

__all__ = ["ModelAverager", "PeriodicModelAverager"]

_NO_NEED_WARNING = ("no need to use model averaging because the communication cost of all-reducing parameters will "
                    "be no less than the cost of all-reducing gradients by DistributedDataParallel in the backward "
                    "pass. Therefore, only DistributedDataParallel should be used for this case.")


class ModelAverager(abc.ABC):
    """The base of model averagers: ``process_group`` (default: the default
    group) is where parameters are averaged, and ``step`` counts the calls of
    ``average_parameters`` (PostLocalSGDOptimizer saves and restores it)."""

    def __init__(self, process_group=None):
        self.process_group = process_group if process_group is not None else dist.group.WORLD
        self.step = 0

    @abc.abstractmethod
    def average_parameters(self, params):
        raise NotImplementedError


class PeriodicModelAverager(ModelAverager):
    """Averages the parameters over ``process_group`` at steps ``warmup_steps``,
    ``warmup_steps + period``, ``warmup_steps + 2 * period``, ... (steps count
    from 0, one per ``average_parameters`` call); between them each rank's
    parameters move on their own."""

    def __init__(self, period, warmup_steps=0, process_group=None):
        super().__init__(process_group)
        if warmup_steps < 0:
            raise ValueError("Arg ``warmup_steps`` must be a non-negative number.")
        self.warmup_steps = warmup_steps
        if period < 1:
            raise ValueError("Arg ``period`` must be a positive value.")
        if period == 1:
            warnings.warn("When period is 1, " + _NO_NEED_WARNING, stacklevel=2)
        self.period = period

    def average_parameters(self, params):
        """Averages ``params`` (a model's parameters or named parameters, or an
        optimizer's param_groups) if this step is an averaging step; counts the step."""
        if self.step >= self.warmup_steps and (self.step - self.warmup_steps) % self.period == 0:
            utils.average_parameters_or_parameter_groups(params, self.process_group)
        self.step += 1

"""HierarchicalModelAverager, as
torch.distributed.algorithms.model_averaging.hierarchical_model_averager:
averaging at several levels, e.g. within each node every few steps and over
all ranks seldom. ``period_group_size_dict`` maps each period, in increasing
order, to the size of the groups of consecutive ranks that average at that
period; the last size is the whole group's. At a step that several periods
divide, only the largest period's groups average (the widest average
includes the narrower ones).

Where ddpc differs: the subgroups are made by ddpc.distributed.new_subgroups,
which splits the default group only, so ``process_group`` must be the
default group (or None) where any level is smaller than it.
"""

import collections
import warnings

from .... import distributed as dist
from . import utils
from .averagers import _NO_NEED_WARNING, ModelAverager

__all__ = ["HierarchicalModelAverager"]


class HierarchicalModelAverager(ModelAverager):
    """Averages over the groups of ``period_group_size_dict[period]`` ranks at
    each step (after ``warmup_steps``) that ``period`` divides, the largest
    such period winning. Every rank must construct it (it makes the subgroups)."""

    def __init__(self, period_group_size_dict=None, warmup_steps=0, process_group=None):
        super().__init__(process_group)
        if not period_group_size_dict:
            raise ValueError("Arg ``period_group_size_dict`` must not be empty.")
        self._periods = list(period_group_size_dict.keys())
        if self._periods[0] <= 0:
            raise ValueError("The minimum period in arg ``period_group_size_dict`` must be a positive value.")
        if self._periods[-1] == 1:
            warnings.warn("When the maximum period in arg ``period_group_size_dict`` is 1, " + _NO_NEED_WARNING,
                          stacklevel=2)
        overall_group_size = dist.get_world_size(group=self.process_group)
        last_size = list(period_group_size_dict.values())[-1]
        if last_size != overall_group_size:
            raise ValueError(f"The last value in arg ``period_group_size_dict`` {last_size} must be equal to the "
                             f"size of arg ``process_group`` {overall_group_size}.")
        self.period_process_group_dict = collections.OrderedDict()
        for period, group_size in period_group_size_dict.items():
            if group_size == overall_group_size:
                self.period_process_group_dict[period] = self.process_group
                continue
            if self.process_group is not dist.group.WORLD:
                raise ValueError("HierarchicalModelAverager: ddpc makes subgroups of the default group only; "
                                 "process_group must be None or the default group")
            self.period_process_group_dict[period], _ = dist.new_subgroups(group_size=group_size)
        if warmup_steps < 0:
            raise ValueError("Arg ``warmup_steps`` must be a non-negative number.")
        self.warmup_steps = warmup_steps

    def _find_process_group(self):
        """The group of the largest period that divides this step, or None."""
        for period in reversed(self._periods):
            if self.step % period == 0:
                return self.period_process_group_dict[period]
        return None

    def average_parameters(self, params):
        """Averages ``params`` (a model's parameters or named parameters, or an
        optimizer's param_groups) over this step's group, if any; counts the step."""
        if self.step >= self.warmup_steps:
            group = self._find_process_group()
            if group is not None:
                utils.average_parameters_or_parameter_groups(params, group)
        self.step += 1

"""Uneven inputs for any set of joinables, shaped like torch.distributed.algorithms.join.

``with Join([ddp, zero_optimizer]):`` lets ranks with fewer batches than the
others finish the loop. Each iteration, the first joinable's step calls
``Join.notify_join_context(self)``, an all-reduce of 1 from every rank still
iterating. A rank that leaves the block keeps all-reducing 0 with them: while
the sum says some rank still iterates, it runs each joinable's
``JoinHook.main_hook()``, which takes part in one iteration's collectives the
way that joinable's step does (DistributedDataParallel's gradient all-reduces
with zero gradients, ZeroRedundancyOptimizer's step and broadcasts). Once no
rank iterates, every joinable's ``post_hook(is_last_joiner)`` runs.

With ``throw_on_early_termination=True`` every rank raises instead, as soon
as one has left the block. An exception inside the block leaves at once,
without taking part in the others' iterations: they learn of it from this
rank's missing collectives (a peer that died, or the timeout).
"""

import abc
import collections

from . import distributed as dist

__all__ = ["Join", "JoinHook", "Joinable"]

_JoinConfig = collections.namedtuple("_JoinConfig", "enable throw_on_early_termination is_first_joinable")
_DISABLED = _JoinConfig(False, False, False)


class JoinHook:
    """What a joinable does on a rank that has left the Join block: ``main_hook``
    once per iteration of the ranks still iterating, ``post_hook`` at the end."""

    def main_hook(self):
        """Takes part in one iteration's collectives, as the joinable's step would."""

    def post_hook(self, is_last_joiner):
        """Runs once every rank has left the block; ``is_last_joiner`` on the rank(s) that left it last."""


class Joinable(abc.ABC):
    """A class whose per-iteration collectives can be shadowed by ranks that
    ran out of inputs: it gives a ``join_hook``, the ``join_device`` and
    ``join_process_group`` of Join's own all-reduces, and calls
    ``Join.notify_join_context(self)`` at the start of each iteration's step."""

    _join_config = _DISABLED

    @abc.abstractmethod
    def join_hook(self, **kwargs):
        """The JoinHook for this joinable (``kwargs`` are those given to Join)."""

    @property
    @abc.abstractmethod
    def join_device(self):
        """Where Join's all-reduces for this joinable take their tensors."""

    @property
    @abc.abstractmethod
    def join_process_group(self):
        """The process group of this joinable's collectives (None: the default one)."""


class _GroupJoinable(Joinable):
    """A joinable whose collectives run on ``self.process_group`` (None: the
    default group): Join's own all-reduces go there too, on the host where
    the group takes host tensors."""

    @property
    def join_device(self):
        return dist._metadata_device(self.process_group)

    @property
    def join_process_group(self):
        return self.process_group


class Join:
    """Context manager for uneven inputs across ranks (see the module's doc).
    ``kwargs`` go to every joinable's ``join_hook`` (for example
    DistributedDataParallel's ``divide_by_initial_world_size``)."""

    def __init__(self, joinables, enable=True, throw_on_early_termination=False, **kwargs):
        self._joinables = list(joinables)
        if not self._joinables:
            raise ValueError("Join needs at least one joinable")
        for j in self._joinables:
            if not isinstance(j, Joinable):
                raise TypeError(f"Join takes Joinable objects (DistributedDataParallel, ZeroRedundancyOptimizer, "
                                f"or a subclass of ddpc.distributed.algorithms.Joinable), got {type(j).__name__}")
        groups = {id(j.join_process_group) for j in self._joinables}
        if len(groups) > 1:
            raise ValueError("Join: every joinable must use the same process group")
        self._join_hooks = [j.join_hook(**kwargs) for j in self._joinables]
        self._enable, self._throw = bool(enable), bool(throw_on_early_termination)
        self._group = self._joinables[0].join_process_group
        self._device = self._joinables[0].join_device

    def __enter__(self):
        for i, j in enumerate(self._joinables):
            j._join_config = _JoinConfig(self._enable, self._throw, i == 0)
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            if self._enable and exc_type is None:
                self._shadow_until_all_joined()
        finally:
            for j in self._joinables:
                j._join_config = _DISABLED
        return False

    def _all_reduce_one(self, value):
        t = _one(value, self._device)
        dist.all_reduce(t, group=self._group)
        return int(t.item())

    def _shadow_until_all_joined(self):
        is_last_joiner = True
        while self._all_reduce_one(0):  # how many ranks are still iterating
            if self._throw:  # the iterating ranks learn of it at their next notify
                self._all_reduce_one(1)
                raise RuntimeError(f"Join(throw_on_early_termination=True): rank {dist.get_rank(self._group)} ran "
                                   "out of inputs before the others")
            for hook in self._join_hooks:
                hook.main_hook()
            is_last_joiner = False
        for hook in self._join_hooks:
            hook.post_hook(is_last_joiner)

    @staticmethod
    def notify_join_context(joinable):
        """Called by a joinable at the start of each iteration's step: the first
        joinable of an enabled Join counts this rank as still iterating, and
        with throw_on_early_termination raises if some rank has left the block.
        Returns the counting all-reduce's Work, or None where nothing was sent."""
        config = joinable._join_config
        if not (config.enable and config.is_first_joinable):
            return None
        group, device = joinable.join_process_group, joinable.join_device
        work = dist.all_reduce(_one(1, device), group=group, async_op=True)
        if config.throw_on_early_termination:
            left = _one(0, device)
            dist.all_reduce(left, group=group)
            if left.item():
                raise RuntimeError("Join(throw_on_early_termination=True): a rank ran out of inputs; every rank "
                                   "raises")
        return work


def _one(value, device):
    from .tensor import full
    return full((1,), value, dtype="int64", device=device)

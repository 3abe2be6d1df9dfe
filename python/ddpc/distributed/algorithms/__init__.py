"""Algorithms over process groups, at torch.distributed.algorithms' paths:
``join`` (uneven inputs) and ``ddp_comm_hooks`` (how DistributedDataParallel
communicates gradients)."""

from . import ddp_comm_hooks, join
from .join import Join, JoinHook, Joinable

__all__ = ["Join", "JoinHook", "Joinable", "ddp_comm_hooks", "join"]

"""Algorithms over process groups, at torch.distributed.algorithms' paths:
``join`` (uneven inputs), ``ddp_comm_hooks`` (how DistributedDataParallel
communicates gradients) and ``model_averaging`` (local SGD)."""

from . import ddp_comm_hooks, join, model_averaging
from .join import Join, JoinHook, Joinable

__all__ = ["Join", "JoinHook", "Joinable", "ddp_comm_hooks", "join", "model_averaging"]

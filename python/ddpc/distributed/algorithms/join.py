"""Join, JoinHook and Joinable (implemented in ddpc._join), at torch.distributed.algorithms.join's path."""

from ..._join import Join, JoinHook, Joinable

__all__ = ["Join", "JoinHook", "Joinable"]

"""DistributedDataParallel's built-in comm hooks, at
torch.distributed.algorithms.ddp_comm_hooks' paths; register one with
``ddp.register_comm_hook(state, hook)``."""

from . import debugging_hooks, default_hooks, post_localSGD_hook, powerSGD_hook, quantization_hooks

__all__ = ["debugging_hooks", "default_hooks", "post_localSGD_hook", "powerSGD_hook", "quantization_hooks"]

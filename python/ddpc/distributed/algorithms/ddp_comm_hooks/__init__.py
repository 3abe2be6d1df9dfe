"""DistributedDataParallel's built-in comm hooks, at
torch.distributed.algorithms.ddp_comm_hooks' paths; register one with
``ddp.register_comm_hook(state, hook)``, or by its ``DDPCommHookType`` with
``register_ddp_comm_hook``."""

import enum
import functools

from . import debugging_hooks, default_hooks, post_localSGD_hook, powerSGD_hook, quantization_hooks

__all__ = ["DDPCommHookType", "debugging_hooks", "default_hooks", "post_localSGD_hook", "powerSGD_hook",
           "quantization_hooks", "register_ddp_comm_hook"]

# (a partial is an enum member as it is before Python 3.11, and with enum.member since)
_member = getattr(enum, "member", lambda value: value)


def _ddp_comm_hook_wrapper(comm_hook, model, state):
    model.register_comm_hook(state, comm_hook)


def _powerSGD_comm_hook_wrapper(comm_hook, model, state, matrix_approximation_rank, start_powerSGD_iter=1_000):
    """Registers a PowerSGD hook whose PowerSGDState runs over ``state``, a process group (None: the default one)."""
    powerSGD_state = powerSGD_hook.PowerSGDState(process_group=state,
                                                 matrix_approximation_rank=matrix_approximation_rank,
                                                 start_powerSGD_iter=start_powerSGD_iter)
    model.register_comm_hook(powerSGD_state, comm_hook)


def _hook(comm_hook):
    return _member(functools.partial(_ddp_comm_hook_wrapper, comm_hook=comm_hook))


def _powerSGD(comm_hook, matrix_approximation_rank):
    return _member(functools.partial(_powerSGD_comm_hook_wrapper, comm_hook=comm_hook,
                                     matrix_approximation_rank=matrix_approximation_rank))


class DDPCommHookType(enum.Enum):
    """The hooks of this package by name, as PyTorch's: each value registers its hook,
    ``DDPCommHookType.ALLREDUCE.value(model=ddp_model, state=process_group)``. The
    PowerSGD ones make a ``PowerSGDState`` over the process group (rank 1 or 2,
    PowerSGD from step 1000)."""

    ALLREDUCE = _hook(default_hooks.allreduce_hook)
    FP16_COMPRESS = _hook(default_hooks.fp16_compress_hook)
    BF16_COMPRESS = _hook(default_hooks.bf16_compress_hook)
    QUANTIZE_PER_TENSOR = _hook(quantization_hooks.quantization_pertensor_hook)
    QUANTIZE_PER_CHANNEL = _hook(quantization_hooks.quantization_perchannel_hook)
    POWER_SGD = _powerSGD(powerSGD_hook.powerSGD_hook, 1)
    # rank 2: closer to the exact average, slower, and more memory
    POWER_SGD_RANK2 = _powerSGD(powerSGD_hook.powerSGD_hook, 2)
    # batched: each bucket compressed as one square matrix, faster and less accurate
    BATCHED_POWER_SGD = _powerSGD(powerSGD_hook.batched_powerSGD_hook, 1)
    BATCHED_POWER_SGD_RANK2 = _powerSGD(powerSGD_hook.batched_powerSGD_hook, 2)
    NOOP = _hook(debugging_hooks.noop_hook)


def register_ddp_comm_hook(comm_hook_type, model, state=None):
    """Registers the hook that ``comm_hook_type`` (a DDPCommHookType) names on ``model``, a
    DistributedDataParallel, with ``state`` (a process group, or None) as its state, as PyTorch's."""
    comm_hook_type.value(model=model, state=state)

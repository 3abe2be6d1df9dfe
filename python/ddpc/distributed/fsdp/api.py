"""The option types of FullyShardedDataParallel, named and shaped as
torch.distributed.fsdp's: sharding strategies, mixed precision, CPU offload,
backward prefetch and the state dict types with their configs; and those of
fully_shard: MixedPrecisionPolicy and the offload policies."""

import dataclasses
import enum


class ShardingStrategy(enum.Enum):
    """FULL_SHARD: parameters, gradients and optimizer state sharded; the full
    parameters are freed after forward and gathered again for backward.
    SHARD_GRAD_OP: the full parameters stay from forward to the end of
    backward. NO_SHARD: every rank holds everything (DDP's layout); gradients
    are all-reduced. HYBRID_SHARD: FULL_SHARD within a shard group (by
    default the ranks of one node), every shard group holding a replica;
    gradients are reduce-scattered within the shard group, then all-reduced
    across the replicas. _HYBRID_SHARD_ZERO2: the same with SHARD_GRAD_OP
    within the shard group."""

    FULL_SHARD = enum.auto()
    SHARD_GRAD_OP = enum.auto()
    NO_SHARD = enum.auto()
    HYBRID_SHARD = enum.auto()
    _HYBRID_SHARD_ZERO2 = enum.auto()


class BackwardPrefetch(enum.Enum):
    """When backward issues the all-gather of the unit whose gradient comes
    next (in the reverse of the first forward's order): BACKWARD_PRE before
    computing the current unit's gradient (more overlap, one more unit's
    full parameters held), BACKWARD_POST after it, before the current
    unit's reduce-scatter. ``backward_prefetch=None`` gathers each unit when
    backward reaches it."""

    BACKWARD_PRE = enum.auto()
    BACKWARD_POST = enum.auto()


class OptimStateKeyType(enum.Enum):
    """How a full optimizer state dict keys its state: by parameter name or by
    parameter ID (position across the param groups)."""

    PARAM_NAME = enum.auto()
    PARAM_ID = enum.auto()


class StateDictType(enum.Enum):
    """FULL_STATE_DICT: the unwrapped model's names and full tensors.
    SHARDED_STATE_DICT: the same names, each parameter a DTensor of this
    rank's rows (Shard(0) over the unit's group).
    LOCAL_STATE_DICT: each unit's flat shard as it is on this rank."""

    FULL_STATE_DICT = enum.auto()
    LOCAL_STATE_DICT = enum.auto()
    SHARDED_STATE_DICT = enum.auto()


@dataclasses.dataclass
class MixedPrecision:
    """``param_dtype``: the dtype the full parameters are gathered in and
    forward and backward compute in; ``reduce_dtype``: the dtype gradients are
    reduced in (``param_dtype`` where None); ``buffer_dtype``: the dtype the
    module's buffers are cast to. The shards (what the optimizer steps) keep
    the module's dtype."""

    param_dtype: object = None
    reduce_dtype: object = None
    buffer_dtype: object = None
    keep_low_precision_grads: bool = False
    cast_forward_inputs: bool = False
    cast_root_forward_inputs: bool = True


@dataclasses.dataclass
class CPUOffload:
    """``offload_params=True`` keeps the shards and their gradients in host
    memory; ddpc supports it for modules that are on the cpu already."""

    offload_params: bool = False


@dataclasses.dataclass
class StateDictConfig:
    offload_to_cpu: bool = False


@dataclasses.dataclass
class FullStateDictConfig(StateDictConfig):
    """``rank0_only``: only rank 0 gets the tensors; the other ranks get an empty dict."""

    rank0_only: bool = False


@dataclasses.dataclass
class LocalStateDictConfig(StateDictConfig):
    pass


@dataclasses.dataclass
class ShardedStateDictConfig(StateDictConfig):
    """``offload_to_cpu``: the DTensors' local tensors on the host. ddpc's
    values are DTensors whatever ``_use_dtensor`` says (it has no ShardedTensor)."""

    _use_dtensor: bool = False


@dataclasses.dataclass
class OptimStateDictConfig:
    offload_to_cpu: bool = True


@dataclasses.dataclass
class FullOptimStateDictConfig(OptimStateDictConfig):
    rank0_only: bool = False


@dataclasses.dataclass(frozen=True)
class MixedPrecisionPolicy:
    """fully_shard's mixed precision. ``param_dtype``: the dtype a unit's
    parameters are all-gathered in and forward and backward compute in (the
    module's own where None); ``reduce_dtype``: the dtype gradients are
    reduce-scattered in, and accumulated in under
    ``set_requires_gradient_sync(False)`` (the parameters' own where None, as
    PyTorch 2.15's); ``output_dtype``: the dtype the module's floating-point
    outputs are cast to (none where None); ``cast_forward_inputs``: cast the
    module's floating-point inputs to ``param_dtype``. The sharded
    parameters, which the optimizer steps, and their gradients keep the
    module's dtype."""

    param_dtype: object = None
    reduce_dtype: object = None
    output_dtype: object = None
    cast_forward_inputs: bool = True


@dataclasses.dataclass
class OffloadPolicy:
    """fully_shard's offload policy: this base class offloads nothing."""


@dataclasses.dataclass
class CPUOffloadPolicy(OffloadPolicy):
    """Keeps the sharded parameters and their gradients in host memory (so the
    optimizer steps on the host); ddpc supports it for modules that are on
    the cpu already, where it changes nothing."""

    pin_memory: bool = True

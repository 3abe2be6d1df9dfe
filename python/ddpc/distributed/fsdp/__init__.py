"""FullyShardedDataParallel (ZeRO stage 3) and fully_shard (FSDP2), shaped
like torch.distributed.fsdp.

fully_shard (FSDP2)::

    for block in model.blocks:
        fully_shard(block)                  # one unit per block, bottom-up
    fully_shard(model)                      # the root: the parameters left
    opt = ddpc.optim.AdamW(model.parameters(), lr=1e-3)
    model(x).sum().backward()
    ddpc.nn.utils.clip_grad_norm_(model.parameters(), 1.0)   # the whole model's norm
    opt.step(); opt.zero_grad()
    sd = model.state_dict()                 # DTensors: global shapes, Shard(0)

``fully_shard(module, mesh=..., reshard_after_forward=..., mp_policy=...,
ignored_params=...)`` shards each of the module's parameters that no earlier
call on a submodule took and that are not ignored along dim 0 over a 1-d
DeviceMesh (torch.chunk's rows: the last ranks may hold fewer or none), or
over the second dimension of a 2-d one, replicated across its first (HSDP:
placements ``(Replicate(), Shard(0))``, gradients reduce-scattered in the
shard group then all-reduced in the replicate group), changes the module's
class in place to FSDP<class> (also an FSDPModule) and returns it. Each
parameter becomes a ``ShardedParameter`` (``_fsdp_param.py``): a
``ddpc.nn.Parameter`` of this rank's rows, so every optimizer, LR scheduler
and ``zero_grad`` works as it is, which also answers ``to_local()``,
``full_tensor()``, ``placements`` and ``device_mesh`` as PyTorch's DTensor
parameters do. A module's forward all-gathers its parameters (one collective
per module, in ``param_dtype``) and runs on the full tensors, which are
freed after forward under ``reshard_after_forward`` and gathered again when
backward reaches the module, whose backward also issues the all-gather of
the module to run backward next (the one whose forward ended just before;
asynchronous, so it runs while this module computes); once its gradients are
computed they are reduce-scattered (one collective, in ``reduce_dtype``),
averaged over the mesh, into each ShardedParameter's ``.grad``.
``set_requires_gradient_sync(False)`` accumulates the unsharded gradients
without communication until the next synced backward;
``set_reshard_after_backward``,
``set_modules_to_forward_prefetch``/``_backward_prefetch`` (the asynchronous
all-gathers to issue ahead, in backward instead of the default one),
``unshard()``/``reshard()``; ``state_dict()`` gives DTensors
(``load_state_dict`` takes DTensors of any placements or full tensors),
which ``ddpc.distributed.checkpoint`` saves and loads on any number of
ranks, as do the ``ddpc.distributed.checkpoint.state_dict`` functions with
the optimizer's state; ``ddpc.nn.utils.clip_grad_norm_`` computes the norm
over every rank's rows. Ignored parameters stay whole plain Parameters whose
gradients each rank keeps for itself. Where ddpc differs: ``p.shape`` of a
sharded parameter is its local rows' shape (PyTorch's DTensor reports the
global one: here ``p.full_shape``) and ``p.grad`` a plain tensor of them;
while a module is unsharded its attributes name the unsharded tensors but
``parameters()`` still yields the sharded ones; ``load_state_dict`` also
takes full tensors; see ``fully_shard`` and ``FSDPModule`` for the rest.

FullyShardedDataParallel (FSDP1):

``FullyShardedDataParallel(module, ...)`` makes ``module`` one FSDP unit,
and with ``auto_wrap_policy`` (see ``ddpc.distributed.fsdp.wrap``) first
makes units of the submodules the policy picks, innermost first. A unit
flattens the parameters of its modules that no inner unit holds into one
flat parameter, padded to a multiple of the world size; each rank keeps
only its 1/world shard, ``_flat_param``, which is what ``parameters()``
yields (without ``use_orig_params``), so any ddpc optimizer steps the shards.

Forward of a unit all-gathers the full flat parameter and gives the modules
views of it as their parameters. Under FULL_SHARD the full parameter's
memory is freed after the unit's forward (really freed: the storage goes back
to the allocator while the views that the autograd graph saved keep their
places in it) and gathered again when backward reaches the unit's outputs.
When the unit's full gradient is complete it is reduce-scattered, so each
shard's ``.grad`` holds the average over the ranks, and the full parameter
is freed. SHARD_GRAD_OP keeps the full parameters from forward to the end of
backward; NO_SHARD keeps every parameter on every rank and all-reduces the
gradients. HYBRID_SHARD (and _HYBRID_SHARD_ZERO2, its SHARD_GRAD_OP form)
shards within one group and replicates across groups, as PyTorch's:
``process_group=(shard_group, replicate_group)`` (PyTorch's intra- and
inter-node groups), or ``device_mesh`` a 2-d DeviceMesh of dims (replicate,
shard), or neither: then the shard group is this node's ranks
(LOCAL_WORLD_SIZE consecutive ranks) and the replicate group the ranks of
the same local rank; a unit's gradient is reduce-scattered within the shard
group and its shard all-reduced across the replicate group, so it is the
average over every rank. The other strategies take a 1-d ``device_mesh``
for ``process_group``.

``no_sync()``, ``clip_grad_norm_()`` (the norm over all shards of all
ranks), ``summon_full_params()``, and ``state_dict()`` /
``load_state_dict()`` under ``state_dict_type`` (FULL_STATE_DICT: the
unwrapped model's names and full tensors, loadable into it;
SHARDED_STATE_DICT: the same names, each parameter a DTensor
(``ddpc.distributed.tensor``) sharded Shard(0) over the unit's group, each
rank holding its rows, which ``ddpc.distributed.checkpoint`` saves and loads
on any number of ranks; LOCAL_STATE_DICT: the flat shards) and
``FSDP.optim_state_dict`` / ``FSDP.optim_state_dict_to_load`` (the
optimizer's state per original parameter name, full, or under
SHARDED_STATE_DICT DTensors of the same rows as the parameters, and back
to each rank's shard) behave as PyTorch's, and so do
``ddpc.distributed.checkpoint.state_dict``'s functions (sharded by default,
full with ``StateDictOptions(full_state_dict=True)``; ``dcp.save`` and
``dcp.load`` save and load either on any number of ranks).
With ``use_orig_params=True``, as PyTorch's, ``parameters()`` and
``named_parameters()`` yield the original parameters instead of the flat
shards, so optimizer groups can be made per parameter (by name or module
type: their data is 1-D, so not by ndim) and parameters within a unit may
be frozen (``requires_grad=False``: no gradient, not updated). Each
original's data on a rank is the part of it that falls in that rank's shard,
flattened, viewing the shard (an optimizer step on it updates the shard in
place); after a synced backward its ``.grad`` is a view of the matching part
of the reduced gradient shard (where the user replaced or dropped them, as
``zero_grad`` does, the next backward accumulates into what they hold
then). Forward, backward and ``summon_full_params`` see the full, shaped
parameters; the state dicts, the optimizer state dicts, ``clip_grad_norm_``,
``no_sync`` and prefetching work as without it.
``MixedPrecision`` gathers and computes in ``param_dtype``, reduces in ``reduce_dtype``, casts
buffers to ``buffer_dtype`` and the root's floating-point inputs to
``param_dtype``; the shards keep the module's dtype.

Prefetching, as PyTorch's: the first forward records the order the units
run in; from then on ``forward_prefetch=True`` issues the next unit's
all-gather (asynchronously) before the current unit computes its forward,
and ``backward_prefetch`` (BACKWARD_PRE by default, BACKWARD_POST, or None)
issues the all-gather of the unit whose backward comes next before or after
the current unit's gradient is computed. A unit waits for its all-gather
before it uses its parameters. Every rank runs the same hooks in the same
order, so the prefetched all-gathers and the reduce-scatters of the
post-backward hooks reach each group's queue in the same order on every
rank. ``limit_all_gathers=True`` keeps at most two prefetched all-gathers
in flight.

Where ddpc differs: the root unit keeps its full parameters from forward
to backward (as PyTorch's root does), so the saving shows in the nested
units; ``limit_all_gathers`` counts the all-gathers in flight (PyTorch
counts the full parameters not yet freed, which its CPU thread may run
ahead of the GPU with); the flat shard is registered on the wrapper as
``_flat_param`` (an attribute only, under ``use_orig_params=True``); a
unit's parameters must share dtype and device, and without
``use_orig_params`` requires_grad. Under ``use_orig_params=True``
(whose names keep the wrappers' ``_fsdp_wrapped_module.`` outside
``summon_full_params``, as PyTorch's): an original with no element on a rank gets a
size-0 gradient there (PyTorch's is None), so every rank's optimizer holds
state for the same parameters; inside ``no_sync`` the originals' ``.grad``
stay as they were until the next synced backward (PyTorch shows the
unsharded gradient there); between forwards a module attribute
(``module.weight``) still names the full view the last forward used, while
``parameters()`` and the module's ``_parameters`` hold the original;
LOCAL_STATE_DICT holds each original's piece, under the wrappers' names.
SHARDED_STATE_DICT's values are always DTensors (PyTorch gives
ShardedTensors unless the unit was made with a device_mesh), on a 1-d mesh
of the unit's shard group also under the HYBRID strategies (PyTorch's are on
its 2-d mesh); a rank's rows are brought from the flat shards that hold them
by one all-to-all per unit, both ways (PyTorch all-gathers the full
parameters); a 0-d parameter is Replicate (PyTorch cannot Shard(0) it);
NO_SHARD units give full tensors with PyTorch's warning.
Not supported (NotImplementedError naming them): ``param_init_fn``,
``ignored_states``, ``CPUOffload(offload_params=True)``
for modules on a GPU, ``optim_state_dict_to_load(is_named_optimizer=True)``.
"""

from . import wrap
from ._fsdp_param import ShardedParameter
from ._fully_shard import FSDPModule, UnshardHandle, fully_shard
from .api import (BackwardPrefetch, CPUOffload, CPUOffloadPolicy, FullOptimStateDictConfig, FullStateDictConfig,
                  LocalStateDictConfig, MixedPrecision, MixedPrecisionPolicy, OffloadPolicy, OptimStateDictConfig,
                  OptimStateKeyType, ShardedStateDictConfig, ShardingStrategy, StateDictConfig, StateDictType)
from .fully_sharded_data_parallel import FSDP, FullyShardedDataParallel

__all__ = ["BackwardPrefetch", "CPUOffload", "CPUOffloadPolicy", "FSDP", "FSDPModule", "FullOptimStateDictConfig",
           "FullStateDictConfig", "FullyShardedDataParallel", "LocalStateDictConfig", "MixedPrecision",
           "MixedPrecisionPolicy", "OffloadPolicy", "OptimStateDictConfig", "OptimStateKeyType", "ShardedParameter",
           "ShardedStateDictConfig", "ShardingStrategy", "StateDictConfig", "StateDictType", "UnshardHandle",
           "fully_shard", "wrap"]

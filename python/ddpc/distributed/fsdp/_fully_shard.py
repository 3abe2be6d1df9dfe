"""fully_shard, PyTorch's FSDP2: the module's parameters sharded one by one
along dim 0 (replicated across a 2-d mesh's first dimension: HSDP), the
module's class changed in place to one that also derives from FSDPModule,
and hooks that gather the parameters around forward and backward (in
backward, the next module's ahead of its use) and reduce-scatter the
gradients (see the package docstring)."""

import functools

from ... import distributed as dist
from ...autograd import is_grad_enabled, queue_callback
from ...nn.modules import Module, ModuleDict, ModuleList, Parameter
from ...nn.parallel import _flatten, _refuse_uninitialized, _verify_same_model
from ...tensor import Tensor
from ..device_mesh import DeviceMesh
from ..tensor import _shard_range
from ._fsdp_param import ShardedParameter
from ._fsdp_param_group import FSDPParamGroup
from .api import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy
from .fully_sharded_data_parallel import _cast_floating, _unit_modules


def fully_shard(module, *, mesh=None, reshard_after_forward=None, mp_policy=MixedPrecisionPolicy(),
                offload_policy=OffloadPolicy(), ignored_params=None):
    """Shards ``module``'s parameters (those no earlier fully_shard call on a
    submodule took, and not in ``ignored_params``) across the ranks of
    ``mesh``, each along dim 0 as torch.chunk splits it; changes
    ``module``'s class in place to a subclass that also derives from
    FSDPModule and returns it. Call it bottom-up: on the blocks, then on
    the root.

    ``mesh`` is a 1-d DeviceMesh (by default one over the default group, on
    the parameters' device type), or a 2-d one with ``mesh_dim_names`` for
    HSDP: the parameters are sharded across its second dimension and
    replicated across its first (their placements ``(Replicate(),
    Shard(0))``), so each gradient is reduce-scattered over the shard group,
    then all-reduced over the replicate group.

    Before the module's forward its parameters are all-gathered (one
    collective) and forward runs on the full tensors; after it they are
    freed where ``reshard_after_forward`` (True, False, or None: True except
    for the root, the module whose forward runs outermost, as PyTorch 2.15's
    default) and gathered again when backward reaches the module. When
    backward reaches a module it also issues, without waiting, the
    all-gather of the module whose backward comes next (the one whose
    forward ended before this one's), which then runs while this module's
    backward computes, unless ``set_modules_to_backward_prefetch`` named the
    modules to gather instead. Once a module's gradients are computed they
    are reduce-scattered (one collective), averaged over the mesh, into
    each sharded parameter's ``.grad``. ``mp_policy`` is a
    MixedPrecisionPolicy; ``offload_policy`` an OffloadPolicy
    (CPUOffloadPolicy only for modules on the cpu). The module's parameters
    in ``ignored_params`` (a set of Parameters; others in it are passed
    over, so one set can go to every call) are left as they are: not
    sharded, not gathered, and their gradients not reduced (each rank
    keeps its own).

    Where ddpc differs: the sharded parameters are ShardedParameters (a
    ``ddpc.nn.Parameter`` holding this rank's rows: ``p.shape`` is the local
    one) rather than DTensors; they stay the registered parameters while the
    module is unsharded (PyTorch registers the unsharded ones then: here
    ``module.weight`` is the unsharded tensor but ``parameters()`` and the
    state dict keep the sharded ones); a module must hold the same parameter
    names and shapes on every rank (checked: two collectives per call and
    mesh dimension); the default mesh takes its device type from the
    parameters (PyTorch's is on the accelerator) and the module is not moved
    to the mesh's device (move it first, and do not move or cast it
    afterwards); 0-d parameters (other than
    ignored ones), parameters of several dtypes or devices in one call, a
    list of modules, an int ``reshard_after_forward``,
    ``shard_placement_fn`` and ``dp_mesh_dims`` are not supported."""
    if isinstance(module, (list, tuple)):
        raise NotImplementedError("fully_shard: ddpc shards one module per call, not a list of modules")
    if not isinstance(module, Module):
        raise TypeError(f"fully_shard expects a ddpc.nn.Module, got {type(module).__name__}")
    if isinstance(module, (ModuleList, ModuleDict)):
        raise ValueError(f"fully_shard does not support containers that do not implement forward: {module}")
    if isinstance(module, FSDPModule):
        raise RuntimeError(f"fully_shard has already been applied to this {type(module).__name__}: each module "
                           "is sharded once (call it on each block, then on the root)")
    if not dist.is_initialized():
        raise RuntimeError("fully_shard needs a process group: call ddpc.distributed.init_process_group() first")
    if reshard_after_forward is not None and not isinstance(reshard_after_forward, bool):
        raise NotImplementedError(f"fully_shard: reshard_after_forward must be True, False or None; ddpc does not "
                                  f"reshard to a smaller world size (got {reshard_after_forward!r})")
    if not isinstance(mp_policy, MixedPrecisionPolicy):
        raise TypeError(f"mp_policy must be a MixedPrecisionPolicy, got {type(mp_policy).__name__}")
    if not isinstance(offload_policy, OffloadPolicy):
        raise TypeError(f"offload_policy must be an OffloadPolicy, got {type(offload_policy).__name__}")
    _refuse_uninitialized(module, "fully_shard")
    uses = _managed_parameters(module, _checked_ignored(ignored_params))
    mesh = _checked_mesh(mesh, uses)
    if isinstance(offload_policy, CPUOffloadPolicy) and mesh.device_type != "cpu":
        raise NotImplementedError("fully_shard: CPUOffloadPolicy is supported by ddpc only for modules on the cpu")
    for group in mesh.get_all_groups():
        _verify_same_model([(n, p) for n, _, _, p in uses], group, "fully_shard")
    params, index = [], {}
    for _, _, _, p in uses:
        if id(p) not in index:
            index[id(p)] = len(params)
            params.append(p)
    sharded = [_shard(p, mesh) for p in params]
    for _, m, name, p in uses:
        m._parameters[name] = sharded[index[id(p)]]
    group = (FSDPParamGroup(sharded, [(m, name, index[id(p)]) for _, m, name, p in uses], mesh, mp_policy)
             if sharded else None)
    for m in module.modules():
        if isinstance(m, FSDPModule):
            m._fsdp_state.is_root = False
    state = _FSDPState(module, group, reshard_after_forward, mp_policy)
    module.__class__ = _fsdp_class(type(module))
    object.__setattr__(module, "_fsdp_state", state)
    module.register_forward_pre_hook(state.pre_forward, prepend=True, with_kwargs=True)
    module.register_forward_hook(state.post_forward)
    if group is not None and group.requires_grad:
        group.full.register_post_accumulate_grad_hook(state.post_backward)
    return module


def _checked_ignored(ignored_params):
    """The ids of the Parameters in ``ignored_params`` (None, or a collection
    of Parameters). As in PyTorch, those that are not ``module``'s (or that a
    call on a submodule sharded already) are left alone, so one set can be
    passed to every call."""
    if ignored_params is None:
        return set()
    if isinstance(ignored_params, Tensor) or not hasattr(ignored_params, "__iter__"):
        raise TypeError(f"fully_shard: ignored_params must be a set of Parameters, got "
                        f"{type(ignored_params).__name__}")
    ignored = set()
    for p in ignored_params:
        if not isinstance(p, Parameter):
            raise TypeError(f"fully_shard: ignored_params must hold Parameters, got a {type(p).__name__}")
        ignored.add(id(p))
    return ignored


def _managed_parameters(module, ignored):
    """(qualified name, module, attribute, Parameter) of the parameters a
    fully_shard call on ``module`` shards: those of its modules not inside
    an FSDPModule below it, but for those whose ids are in ``ignored``."""
    uses = []
    for prefix, m in _unit_modules(module, (), FSDPModule):
        for name, p in m._parameters.items():
            if p is None or id(p) in ignored:
                continue
            qualified = prefix + ("." if prefix else "") + name
            if isinstance(p, ShardedParameter):
                raise ValueError(f"fully_shard: parameter {qualified} is sharded by a fully_shard call on another "
                                 "module already; a parameter shared by several modules must be sharded by the call "
                                 "on a module holding all of them (call fully_shard bottom-up)")
            if p.ndim == 0:
                raise ValueError(f"fully_shard: Shard dim 0 is invalid for 0D tensor: {qualified} (ddpc's "
                                 "fully_shard shards every parameter along dim 0)")
            uses.append((qualified, m, name, p))
    if uses:
        first = uses[0][3]
        for qualified, _, _, p in uses:
            if p.dtype is not first.dtype or p.device != first.device:
                raise ValueError(f"fully_shard gathers a module's parameters with one collective, so they must "
                                 f"share dtype and device: found {first.dtype} on {first.device} and {p.dtype} on "
                                 f"{p.device} ({qualified}); shard those modules by calls of their own")
    return uses


def _checked_mesh(mesh, uses):
    if mesh is None:
        return DeviceMesh.from_group(dist.group.WORLD, uses[0][3].device.type if uses else "cpu")
    if not isinstance(mesh, DeviceMesh):
        raise TypeError(f"fully_shard: mesh must be a DeviceMesh, got {type(mesh).__name__}")
    if mesh.ndim not in (1, 2):
        raise ValueError(f"fully_shard expects a 1D or 2D DeviceMesh but got {mesh} (ndim={mesh.ndim})")
    if mesh.ndim == 2 and mesh.mesh_dim_names is None:  # PyTorch's check and exception
        raise AssertionError("Please init the 2D mesh for HSDP with mesh_dim_names specified (fully_shard shards "
                             "across its second dimension and replicates across its first)")
    if uses and uses[0][3].device.type != mesh.device_type:
        raise ValueError(f"fully_shard: the module's parameters are on {uses[0][3].device} and the mesh on "
                         f"{mesh.device_type}; move the module to the mesh's device first (ddpc's fully_shard does "
                         "not move it, PyTorch's does)")
    return mesh


def _shard(p, mesh):
    """The ShardedParameter of this rank's rows of ``p`` (a copy): those of
    its place along the mesh's last dimension (the shard dimension)."""
    shard_dim = mesh.ndim - 1
    start, length = _shard_range(p.shape[0], mesh.size(shard_dim), mesh.get_local_rank(shard_dim))
    return ShardedParameter(p.detach().narrow(0, start, length).clone(), mesh, p.shape, p.requires_grad)


@functools.lru_cache(maxsize=None)
def _fsdp_class(cls):
    """The class an FSDP module of class ``cls`` takes: FSDP<cls>, deriving from FSDPModule and ``cls``."""
    return type(f"FSDP{cls.__name__}", (FSDPModule, cls), {"__module__": cls.__module__})


class _FSDPState:
    """What fully_shard keeps for one module: its group of sharded parameters
    (None where it manages none), its settings and its hooks."""

    def __init__(self, module, group, reshard_after_forward, mp_policy):
        self.module, self.group, self.mp_policy = module, group, mp_policy
        self.reshard_after_forward = reshard_after_forward  # None: True but for the root
        self.reshard_after_backward = True
        self.sync_gradients = True
        self.is_root = None  # decided at the first forward: the outermost FSDP module is the root
        self.states = None  # the root's: the states of every FSDP module under it, its own included
        self.in_backward = False
        self.forward_prefetch, self.backward_prefetch = [], []  # FSDP modules to gather ahead
        # The states whose forward ended, in that order (shared by the root's
        # states), and where this one's are in it: backward runs them in reverse.
        self.post_forward_order, self.post_forward_indices = [], []

    def _reshards_after_forward(self):
        return self.reshard_after_forward if self.reshard_after_forward is not None else not self.is_root

    def _lazy_init(self):
        self.is_root = True
        self.states = [m._fsdp_state for m in self.module.modules() if isinstance(m, FSDPModule)]
        for s in self.states:
            s.post_forward_order = self.post_forward_order

    def pre_forward(self, module, args, kwargs):
        if self.is_root is None:
            self._lazy_init()
        mp = self.mp_policy
        if mp.cast_forward_inputs and mp.param_dtype is not None:
            args, kwargs = _cast_floating((args, kwargs), mp.param_dtype)
        if self.group is not None:
            self.group.unshard()  # waits for the all-gather where it was prefetched
            self.group.install_views()
        for m in self.forward_prefetch:
            m._fsdp_state.prefetch()
        return args, kwargs

    def post_forward(self, module, args, output):
        if self.mp_policy.output_dtype is not None:
            output = _cast_floating(output, self.mp_policy.output_dtype)
        if self.in_backward:  # a forward recomputed in backward (activation checkpointing): backward needs it all
            return output
        grads = [t for t in _flatten(output) if isinstance(t, Tensor) and t.requires_grad] if is_grad_enabled() \
            else []
        for t in grads:
            t.register_hook(self.pre_backward)
        if self.group is not None and grads:
            self.post_forward_indices.append(len(self.post_forward_order))
            self.post_forward_order.append(self)
        if self.group is not None and (not grads or self._reshards_after_forward()):
            self.group.reshard()
        return output

    def prefetch(self):
        """Issues this module's all-gather without waiting for it (its next use waits)."""
        if self.group is not None:
            self.group.unshard(async_op=True)

    def pre_backward(self, grad):
        if self.in_backward:
            return
        self.in_backward = True
        if self.is_root:
            queue_callback(self._finish_backward)
        if self.group is not None:
            self.group.unshard()
            self.group.install_views()  # for a forward recomputed in backward (activation checkpointing)
        if self.backward_prefetch:
            for m in self.backward_prefetch:
                m._fsdp_state.prefetch()
        else:
            self._default_backward_prefetch()

    def _default_backward_prefetch(self):
        """Issues the all-gather of the module whose forward ended just before
        this one's (the next to run backward, as PyTorch guesses it) so that it
        runs while this module's backward computes."""
        if self.group is None or not self.post_forward_indices:
            return
        index = self.post_forward_indices.pop()
        if index > 0:
            self.post_forward_order[index - 1].prefetch()

    def post_backward(self, full):
        # Every rank runs the same backward, so the hooks, and the collectives
        # they issue, come in the same order on all.
        if self.reshard_after_backward:
            self.group.reshard()
        self.group.reduce_grad(self.sync_gradients)

    def _finish_backward(self):
        """After the whole backward pass: every module's unsharded parameters
        freed (also where none of them got a gradient), unless kept by
        set_reshard_after_backward(False)."""
        for s in self.states:
            s.in_backward = False
            s.post_forward_indices.clear()
            if s.group is not None and s.reshard_after_backward:
                s.group.reshard()
        self.post_forward_order.clear()


class UnshardHandle:
    """What ``FSDPModule.unshard(async_op=True)`` returns: ``wait()`` waits for the all-gather."""

    def __init__(self, group):
        self._group = group

    def wait(self):
        if self._group is not None:
            self._group.wait()
            self._group.install_views()


class FSDPModule:
    """The class fully_shard adds to a module's bases (the module's class
    becomes FSDP<its class>): the methods below, and ``state_dict()`` giving
    each sharded parameter as a DTensor of its global shape (Shard(0) over
    its mesh, (Replicate(), Shard(0)) over a 2-d one; this rank's rows,
    sharing their memory) under its own name,
    which ``load_state_dict`` takes back (DTensors of any placements, or
    full tensors: each rank keeps its rows of them, where PyTorch's refuses
    plain tensors), as ``ddpc.distributed.checkpoint`` saves and loads them
    on any number of ranks."""

    def __deepcopy__(self, memo):
        raise AssertionError("FSDP does not support deepcopy. Please use state dict for serialization.")

    def _states(self, recurse):
        return [m._fsdp_state for m in (self.modules() if recurse else [self]) if isinstance(m, FSDPModule)]

    def unshard(self, async_op=False):
        """All-gathers this module's parameters (not its submodules') and makes
        the module use them until ``reshard()``; with ``async_op`` returns an
        UnshardHandle whose ``wait()`` finishes that (the module's next
        forward waits anyway)."""
        group = self._fsdp_state.group
        if group is not None:
            group.unshard(async_op=True)
        handle = UnshardHandle(group)
        if async_op:
            return handle
        handle.wait()
        return None

    def reshard(self):
        """Frees this module's unsharded parameters (not its submodules'); the module uses the sharded ones again."""
        if self._fsdp_state.group is not None:
            self._fsdp_state.group.reshard()

    def set_requires_gradient_sync(self, requires_gradient_sync, *, recurse=True):
        """With False, backward keeps each module's gradients unsharded and
        unreduced, accumulating them over backward passes (in the
        MixedPrecisionPolicy's reduce_dtype) without communicating; the next
        backward with True adds them to its own and reduce-scatters the sum
        into the sharded parameters' ``.grad`` (gradient accumulation, FSDP1's
        ``no_sync``)."""
        for s in self._states(recurse):
            s.sync_gradients = bool(requires_gradient_sync)

    def set_reshard_after_forward(self, reshard_after_forward, recurse=True):
        """Changes ``reshard_after_forward`` (the root's included)."""
        if not isinstance(reshard_after_forward, bool):
            raise ValueError(f"reshard_after_forward should be a bool, got {type(reshard_after_forward)}")
        for s in self._states(recurse):
            s.reshard_after_forward = reshard_after_forward

    def set_reshard_after_backward(self, reshard_after_backward, *, recurse=True):
        """With False, the unsharded parameters stay after backward (no all-gather
        before the next forward: for gradient accumulation); call ``reshard()``
        on every such module before the optimizer steps, or the next forward
        computes with the parameters from before the step."""
        for s in self._states(recurse):
            s.reshard_after_backward = bool(reshard_after_backward)

    def set_is_last_backward(self, is_last_backward):
        """Accepted for PyTorch's scripts and changes nothing: ddpc's gradient
        reductions are done when backward returns, so there is nothing left
        to wait for after the last backward."""

    def set_modules_to_forward_prefetch(self, modules):
        """FSDP modules whose all-gathers this module's forward issues, without
        waiting, once its own parameters are gathered (their forwards wait for
        them; one whose forward does not run keeps them until the end of backward)."""
        self._fsdp_state.forward_prefetch = _fsdp_modules(modules)

    def set_modules_to_backward_prefetch(self, modules):
        """FSDP modules whose all-gathers this module's backward issues, without
        waiting, once its own parameters are gathered, instead of the default
        one (the module whose forward ended just before this one's); an empty
        list keeps the default, as in PyTorch."""
        self._fsdp_state.backward_prefetch = _fsdp_modules(modules)

    def state_dict(self, destination=None, prefix="", keep_vars=False):
        out = super().state_dict(destination, prefix, keep_vars)
        for name, p in self.named_parameters(remove_duplicate=False):
            key = prefix + name
            if isinstance(p, ShardedParameter) and isinstance(out.get(key), Tensor):
                out[key] = p.as_dtensor(out[key])
        return out

    def load_state_dict(self, state_dict, strict=True, assign=False):
        return super().load_state_dict(as_dtensors(self, state_dict), strict, assign)

    def _load_tree(self, state_dict, prefix, *args):
        # Each sharded parameter loads as state_dict shows it: a DTensor of the global shape over this
        # rank's rows (copied into from a DTensor of any placements).
        sharded = [(m, name, p) for m in self.modules() for name, p in m._parameters.items()
                   if isinstance(p, ShardedParameter)]
        for m, name, p in sharded:
            m._parameters[name] = p.as_dtensor(p.detach())
        try:
            return super()._load_tree(state_dict, prefix, *args)
        finally:
            for m, name, p in sharded:
                m._parameters[name] = p


def _fsdp_modules(modules):
    modules = list(modules)
    for m in modules:
        if not isinstance(m, FSDPModule):
            raise ValueError(f"Expects FSDPModule but got {type(m)}: {m}")
    return modules


def as_dtensors(module, state_dict):
    """``state_dict`` (keyed as ``module.state_dict()``) with each plain tensor
    for a parameter fully_shard sharded, a full one, replaced by a DTensor of
    this rank's rows of it (no communication)."""
    sharded = {n: p for n, p in module.named_parameters(remove_duplicate=False) if isinstance(p, ShardedParameter)}
    out = dict(state_dict)
    for key, value in state_dict.items():
        p = sharded.get(key)
        if p is None or not isinstance(value, Tensor):
            continue
        if tuple(value.shape) != tuple(p.full_shape):
            raise RuntimeError(f"size mismatch for {key}: copying a param with shape {tuple(value.shape)} from "
                               f"checkpoint, the shape in current model is {tuple(p.full_shape)}.")
        out[key] = p.as_dtensor(p.rows_of(value))
    return out

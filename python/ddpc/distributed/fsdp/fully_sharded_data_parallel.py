"""FullyShardedDataParallel: the module wrapper that runs one FSDP unit
(see the package docstring for the whole design)."""

import contextlib
import math
import warnings

import numpy as np

from ... import distributed as dist
from ...autograd import is_grad_enabled, no_grad, queue_callback
from ...nn.modules import Module
from ...nn.parallel import _flatten, _refuse_uninitialized, _verify_same_model
from ...tensor import Tensor, from_numpy
from ..tensor import DTensor
from . import _optim_state
from ._flat_param import FlatParamHandle
from .api import (BackwardPrefetch, CPUOffload, FullStateDictConfig, LocalStateDictConfig, OptimStateKeyType,
                  ShardedStateDictConfig, ShardingStrategy, StateDictType)
from .wrap import _policy_callable, _recursive_wrap

_WRAPPED = "_fsdp_wrapped_module"


class FullyShardedDataParallel(Module):
    """Shards ``module``'s parameters across the ranks of ``process_group``
    (ZeRO stage 3); see the package docstring."""

    def __init__(self, module, process_group=None, sharding_strategy=None, cpu_offload=None, auto_wrap_policy=None,
                 backward_prefetch=BackwardPrefetch.BACKWARD_PRE, mixed_precision=None, ignored_modules=None,
                 param_init_fn=None, device_id=None, sync_module_states=False, forward_prefetch=False,
                 limit_all_gathers=True, use_orig_params=False, ignored_states=None, device_mesh=None):
        super().__init__()
        if not dist.is_initialized():
            raise RuntimeError("FullyShardedDataParallel needs a process group: call "
                               "ddpc.distributed.init_process_group() first")
        if not isinstance(module, Module):
            raise TypeError(f"FullyShardedDataParallel wraps a ddpc.nn.Module, got {type(module).__name__}")
        strategy = ShardingStrategy.FULL_SHARD if sharding_strategy is None else sharding_strategy
        if not isinstance(strategy, ShardingStrategy):
            raise TypeError(f"sharding_strategy must be a ShardingStrategy, got {sharding_strategy!r}")
        _refuse("param_init_fn", param_init_fn is not None)
        _refuse("ignored_states", ignored_states is not None)
        if backward_prefetch is not None and not isinstance(backward_prefetch, BackwardPrefetch):
            raise TypeError(f"backward_prefetch must be a BackwardPrefetch or None, got {backward_prefetch!r}")
        _refuse_uninitialized(module, "FullyShardedDataParallel")
        if device_id is not None:
            module.to(f"cuda:{device_id}" if isinstance(device_id, int) else device_id)
        if cpu_offload is not None and cpu_offload.offload_params and any(
                p.device.type != "cpu" for p in module.parameters()):
            raise NotImplementedError("FullyShardedDataParallel: CPUOffload(offload_params=True) is supported by "
                                      "ddpc only for modules on the cpu")
        ignored = set()
        for m in ignored_modules or ():
            ignored.update(id(s) for s in m.modules())
        process_group, replicate_group = _process_groups(strategy, process_group, device_mesh)
        # The units an auto-wrap policy makes share the root's groups (made once).
        kwargs = dict(process_group=process_group if replicate_group is None else (process_group, replicate_group),
                      sharding_strategy=strategy, cpu_offload=cpu_offload,
                      backward_prefetch=backward_prefetch, mixed_precision=mixed_precision,
                      ignored_modules=ignored_modules, sync_module_states=sync_module_states,
                      forward_prefetch=forward_prefetch, limit_all_gathers=limit_all_gathers,
                      use_orig_params=use_orig_params)
        if auto_wrap_policy is not None:
            policy = _policy_callable(auto_wrap_policy)
            _recursive_wrap(module, policy, lambda m: FullyShardedDataParallel(m, **kwargs), ignored, True)
        self.process_group = process_group  # the group a unit shards over
        self._inter_node_pg = replicate_group  # under the HYBRID strategies: the group it replicates over
        self.sharding_strategy = strategy
        self.mixed_precision = mixed_precision
        self.cpu_offload = cpu_offload or CPUOffload()
        self.backward_prefetch = backward_prefetch
        self.forward_prefetch, self.limit_all_gathers = forward_prefetch, limit_all_gathers
        self._use_orig_params = bool(use_orig_params)
        setattr(self, _WRAPPED, module)

        uses = []  # (qualified name, module, attribute, Parameter) of this unit's parameters
        for prefix, m in _unit_modules(module, ignored, FullyShardedDataParallel):
            for name, p in m._parameters.items():
                if p is not None:
                    uses.append((prefix + ("." if prefix else "") + name, m, name, p))
        every_rank = process_group if replicate_group is None else None  # the ranks holding this model
        _verify_same_model([(n, p) for n, _, _, p in uses], every_rank, "FullyShardedDataParallel")
        if sync_module_states:
            self._broadcast_rank0([p for _, _, _, p in uses] + list(_unit_buffers(module, ignored)), every_rank)
        self._handle = (FlatParamHandle(uses, strategy, process_group, replicate_group, mixed_precision,
                                        self._use_orig_params) if uses else None)
        if self._handle is not None:
            if self._use_orig_params:  # the originals are the parameters; the shard is not registered
                object.__setattr__(self, "_flat_param", self._handle.flat_param)
            else:
                self._flat_param = self._handle.flat_param
            if self._handle.requires_grad:
                self._handle.full.register_post_accumulate_grad_hook(self._post_backward)
        for m in module.modules():
            if isinstance(m, FullyShardedDataParallel):
                m._is_root = False
        self._is_root = None  # decided at the first forward: the outermost unit is the root
        self._units = None
        self._exec_order = _ExecOrder()  # replaced by the root's, shared by all its units, at its first forward
        self._in_backward = False
        self._needs_backward_unshard = False  # its last forward's outputs lead to a backward
        self._prefetched = False  # its all-gather was issued ahead of its use
        self._sync_gradients = True
        self._summoned = 0
        self._state_dict_type, self._state_dict_config = StateDictType.FULL_STATE_DICT, FullStateDictConfig()

    @property
    def module(self):
        """The wrapped module."""
        return getattr(self, _WRAPPED)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == _WRAPPED:
                raise
            return getattr(self.module, name)  # the wrapped module's attributes, as PyTorch forwards them

    def __getitem__(self, key):
        return self.module.__getitem__(key)

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        """The flat shards under the wrappers' names, or with
        use_orig_params=True the original parameters, their names keeping the
        wrappers' ``_fsdp_wrapped_module.`` as PyTorch's do; inside
        summon_full_params, the original parameters under the unwrapped names."""
        clean = self._summoned
        for name, p in super().named_parameters(prefix, recurse, remove_duplicate):
            yield (name.replace(_WRAPPED + ".", "") if clean else name), p

    @staticmethod
    def fsdp_modules(module, root_only=False):
        """The FSDP units in ``module`` (itself included), or only the outermost ones."""
        units = [m for m in module.modules() if isinstance(m, FullyShardedDataParallel)]
        if not root_only:
            return units
        inner = {id(m) for u in units for m in u.module.modules() if isinstance(m, FullyShardedDataParallel)}
        return [u for u in units if id(u) not in inner]

    @staticmethod
    def _broadcast_rank0(tensors, group):
        src = dist.get_global_rank(group, 0)
        with no_grad():
            for t in tensors:
                dist.broadcast(t.detach(), src=src, group=group)

    # ---- forward and backward -------------------------------------------------------------
    def _lazy_init(self):
        self._is_root = True
        self._units = [m for m in self.modules() if isinstance(m, FullyShardedDataParallel)]
        order = _ExecOrder()
        for u in self._units:
            u._exec_order = order
        mp = self.mixed_precision
        if mp is not None and mp.buffer_dtype is not None:
            for b in self.buffers():
                if b.dtype.is_floating_point:
                    b._buf = b.to(mp.buffer_dtype)._buf

    def forward(self, *args, **kwargs):
        if self._is_root is None:
            self._lazy_init()
        mp = self.mixed_precision
        if mp is not None and mp.param_dtype is not None and (
                mp.cast_forward_inputs or (self._is_root and mp.cast_root_forward_inputs)):
            args, kwargs = _cast_floating((args, kwargs), mp.param_dtype)
        h, order = self._handle, self._exec_order
        if h is not None:
            h.unshard()  # waits for the all-gather where it was prefetched
            self._prefetched = False
            order.record(order.pre_forward, self)
            if self.forward_prefetch:
                self._prefetch(order.after(self))
            h.install_views()
        out = self.module(*args, **kwargs)
        backward_follows = is_grad_enabled() and any(
            isinstance(t, Tensor) and t.requires_grad for t in _flatten(out))
        self._needs_backward_unshard = backward_follows
        if backward_follows:
            for t in _flatten(out):
                if isinstance(t, Tensor) and t.requires_grad:
                    t.register_hook(self._pre_backward)
        if h is not None:
            order.record(order.post_forward, self)
        # The root keeps its parameters for backward, which starts with it.
        if h is not None and (not backward_follows or (h.reshard_after_forward and not self._is_root)):
            h.reshard()
        if self._is_root:
            self._forward_done()
        return out

    def _forward_done(self):
        """After the root's forward: the execution order is known once the first
        forward ran, and a unit prefetched for a forward that did not use it
        is freed (its gather would be stale after the next optimizer step)."""
        self._exec_order.recording = False
        for u in self._units:
            if u._prefetched:
                u._prefetched = False
                u._handle.reshard()

    def _prefetch(self, unit):
        """Issues ``unit``'s all-gather without waiting for it; under
        ``limit_all_gathers`` first waits for the oldest of those in flight
        while two are."""
        if unit is None or unit._handle is None or unit._handle.gathered:
            return
        order = self._exec_order
        order.inflight = [h for h in order.inflight if h.pending is not None]
        while self.limit_all_gathers and len(order.inflight) >= 2:
            order.inflight.pop(0).wait()
        unit._handle.unshard(async_op=True)
        unit._prefetched = True
        if unit._handle.pending is not None:
            order.inflight.append(unit._handle)

    def _prefetch_backward(self):
        """Prefetches the unit whose backward comes next: the one whose forward ended before this one's."""
        unit = self._exec_order.before(self)
        if unit is not None and unit._needs_backward_unshard and not unit._in_backward:
            self._prefetch(unit)

    def _pre_backward(self, grad):
        if not self._in_backward:
            self._in_backward = True
            if self._is_root:
                queue_callback(self._finish_backward)
            if self._handle is not None:
                self._handle.unshard()
                self._prefetched = False
                if self.backward_prefetch is BackwardPrefetch.BACKWARD_PRE:
                    self._prefetch_backward()

    def _post_backward(self, full):
        # Every rank runs the same backward, so the hooks, and the collectives
        # they issue (in one queue per group), come in the same order on all.
        self._handle.reshard()
        if self.backward_prefetch is BackwardPrefetch.BACKWARD_POST:
            self._prefetch_backward()
        self._handle.reduce_grad(self._sync_gradients)

    def _finish_backward(self):
        """After the whole backward pass: every unit's full parameters freed,
        also those of units whose parameters got no gradient."""
        for u in self._units:
            u._in_backward = u._needs_backward_unshard = u._prefetched = False
            if u._handle is not None:
                u._handle.full.grad = None
                u._handle.reshard()

    # ---- gradients ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside keep their full gradients unreduced; the first
        synced backward after them reduces their sum (so the shards then hold
        the gradient of every pass, as DDP's no_sync gives)."""
        units = [m for m in self.modules() if isinstance(m, FullyShardedDataParallel)]
        before = [u._sync_gradients for u in units]
        for u in units:
            u._sync_gradients = False
        try:
            yield
        finally:
            for u, b in zip(units, before):
                u._sync_gradients = b

    @no_grad()
    def clip_grad_norm_(self, max_norm, norm_type=2.0):
        """Scales every shard's gradient so that the norm of the whole model's
        gradient is at most ``max_norm``; returns that norm (before clipping).
        Call it on the root on every rank."""
        if self._is_root is None:
            self._lazy_init()
        if not self._is_root:
            raise RuntimeError("clip_grad_norm_ should only be called on the root FSDP instance")
        norm_type = float(norm_type)
        world = dist.get_world_size(self.process_group)
        grads, shared = [], []  # shared: gradients every rank holds in full (NO_SHARD units, ignored modules)
        held = set()  # the parameters of the units: their flat shards and the originals
        for u in self._units:
            if u._handle is not None:
                (grads if u._handle.sharded else shared).extend(u._handle.shard_grads())
                held.update(id(p) for p in [u._flat_param] + u._handle.params)
        shared += [p.grad for p in self.parameters() if id(p) not in held and p.grad is not None]
        if math.isinf(norm_type):
            local = max([float(g.abs().max().item()) for g in grads + shared if g.numel()], default=0.0)
            total = self._metadata_tensor(local)
            dist.all_reduce(total, op=dist.ReduceOp.MAX, group=self.process_group)
            norm = float(total.item())
        else:
            mine = sum(float((g.double().abs() ** norm_type).sum().item()) for g in grads)
            # Every rank holds the same full gradients: counted once over the group.
            mine += sum(float((g.double().abs() ** norm_type).sum().item()) for g in shared) / world
            total = self._metadata_tensor(mine)
            dist.all_reduce(total, op=dist.ReduceOp.SUM, group=self.process_group)
            norm = float(total.item()) ** (1.0 / norm_type)
        coef = float(max_norm) / (norm + 1e-6)
        if coef < 1.0:
            for g in grads + shared:
                g.mul_(coef)
        dtype = next((g.dtype for g in grads + shared), None)
        out = from_numpy(np.array(norm, dtype=np.float64))
        return out.to(dtype) if dtype is not None else out

    def _metadata_tensor(self, value):
        return from_numpy(np.array([value], dtype=np.float64)).to(dist._metadata_device(self.process_group))

    # ---- full parameters -----------------------------------------------------------------------
    @staticmethod
    @contextlib.contextmanager
    def summon_full_params(module, recurse=True, writeback=True, rank0_only=False, offload_to_cpu=False,
                           with_grads=False):
        """Inside the block, every unit of ``module`` (only ``module`` itself where
        not ``recurse``) holds its original parameters, full, under their own
        names; with ``writeback`` what is written into them reaches the shards.
        ``rank0_only`` and ``offload_to_cpu`` change nothing in ddpc (every
        rank gets the full parameters where they are)."""
        _refuse("summon_full_params(with_grads=True)", with_grads)
        units = [m for m in (module.modules() if recurse else [module])
                 if isinstance(m, FullyShardedDataParallel) and m._summoned == 0]
        for u in units:
            if u._in_backward:
                raise RuntimeError("summon_full_params cannot be used during a backward pass")
        done = []
        try:
            for u in units:
                if u._handle is not None:
                    u._handle.summon_begin()
                    if not u._use_orig_params:
                        del u._parameters["_flat_param"]  # the original parameters stand for it
                u._summoned += 1
                done.append(u)
            yield
        finally:
            for u in reversed(done):
                u._summoned -= 1
                if u._handle is not None:
                    if not u._use_orig_params:
                        u._parameters["_flat_param"] = u._handle.flat_param
                    u._handle.summon_end(writeback)

    # ---- state dicts ---------------------------------------------------------------------------
    @staticmethod
    @contextlib.contextmanager
    def state_dict_type(module, state_dict_type, state_dict_config=None, optim_state_dict_config=None):
        """Inside the block, ``state_dict()`` and ``load_state_dict()`` of every
        unit of ``module`` use ``state_dict_type``."""
        units = [m for m in module.modules() if isinstance(m, FullyShardedDataParallel)]
        before = [(u._state_dict_type, u._state_dict_config) for u in units]
        FullyShardedDataParallel.set_state_dict_type(module, state_dict_type, state_dict_config,
                                                     optim_state_dict_config)
        try:
            yield
        finally:
            for u, (t, c) in zip(units, before):
                u._state_dict_type, u._state_dict_config = t, c

    @staticmethod
    def set_state_dict_type(module, state_dict_type, state_dict_config=None, optim_state_dict_config=None):
        if not isinstance(state_dict_type, StateDictType):
            raise TypeError(f"state_dict_type must be a StateDictType, got {state_dict_type!r}")
        config = state_dict_config or {StateDictType.FULL_STATE_DICT: FullStateDictConfig,
                                       StateDictType.LOCAL_STATE_DICT: LocalStateDictConfig,
                                       StateDictType.SHARDED_STATE_DICT: ShardedStateDictConfig}[state_dict_type]()
        for m in module.modules():
            if isinstance(m, FullyShardedDataParallel):
                m._state_dict_type, m._state_dict_config = state_dict_type, config

    @staticmethod
    @contextlib.contextmanager
    def _sharded_params(module, writeback):
        """Inside the block, every unit of ``module`` holds its original
        parameters under their own names as DTensors of this rank's rows
        (Shard(0) over the unit's group; copies, brought by one all-to-all per
        unit); with ``writeback`` their values go back into the shards when
        the block ends without an error. NO_SHARD units, whose parameters are
        whole on every rank, hold them as in summon_full_params."""
        units = [m for m in module.modules() if isinstance(m, FullyShardedDataParallel) and m._summoned == 0]
        sharded = [u for u in units if u._handle is not None and u._handle.sharded]
        whole = [u for u in units if u._handle is not None and not u._handle.sharded]
        if whole:
            warnings.warn("When using ``NO_SHARD`` for ``ShardingStrategy``, full_state_dict will be returned.",
                          stacklevel=4)
        with contextlib.ExitStack() as stack:
            for u in whole:
                stack.enter_context(FullyShardedDataParallel.summon_full_params(u, recurse=False,
                                                                                writeback=writeback))
            held = []
            try:
                for u in sharded:
                    held.append(u._handle.row_dtensors(u._handle.flat_param))
                    u._handle.register(held[-1])
                    u._summoned += 1
                yield
                if writeback:
                    for u, values in zip(sharded, held):
                        u._handle.load_row_dtensors(values, u._handle.flat_param)
            finally:
                for u in sharded[:len(held)]:
                    u._summoned -= 1
                    u._handle.unregister()

    def state_dict(self, destination=None, prefix="", keep_vars=False):
        """FULL_STATE_DICT (the default): the wrapped model's own state dict, full
        tensors under the unwrapped names (a copy; an empty dict on ranks other
        than 0 under ``rank0_only``). SHARDED_STATE_DICT: the same names, each
        parameter a DTensor of this rank's rows (Shard(0) over the unit's
        group, gathered from the shards by an all-to-all, never whole), the
        buffers full. LOCAL_STATE_DICT: each unit's flat shard
        (``_flat_param``) and the buffers, under the wrapper's names."""
        if self._state_dict_type is StateDictType.LOCAL_STATE_DICT:
            return super().state_dict(destination, prefix, keep_vars)
        if self._summoned:  # reached from an outer unit's state_dict, which gathered everything
            return self.module.state_dict(destination, prefix, keep_vars)
        config = self._state_dict_config
        if self._state_dict_type is StateDictType.SHARDED_STATE_DICT:
            originals = self._sharded_params(self, writeback=False)
        else:
            originals = self.summon_full_params(self, writeback=False)
        with originals:
            state = self.module.state_dict(None, prefix, keep_vars)
        out = {} if destination is None else destination
        if getattr(config, "rank0_only", False) and dist.get_rank(self.process_group) != 0:
            return out
        for k, v in state.items():
            if isinstance(v, Tensor) and not keep_vars:
                v = v.cpu().clone() if config.offload_to_cpu else v.clone()
            elif isinstance(v, DTensor) and config.offload_to_cpu:
                v = v.cpu()
            out[k] = v
        return out

    def _load_tree(self, state_dict, prefix, metadata, assign, missing, unexpected, errors):
        # Reached from an outer unit's load_state_dict, which gathered everything: as state_dict
        # gives them, the wrapped module's tensors under this unit's own prefix.
        if self._state_dict_type is StateDictType.LOCAL_STATE_DICT or not self._summoned:
            return super()._load_tree(state_dict, prefix, metadata, assign, missing, unexpected, errors)
        return self.module._load_tree(state_dict, prefix, metadata, assign, missing, unexpected, errors)

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Loads a state dict of the type ``state_dict_type`` set (a full one
        by default: the unwrapped model's, on every rank). A sharded one's
        DTensors may be laid out otherwise (Replicate, say): they are
        redistributed to the unit's rows."""
        if self._state_dict_type is StateDictType.LOCAL_STATE_DICT:
            return super().load_state_dict(state_dict, strict, assign)
        if self._state_dict_type is StateDictType.SHARDED_STATE_DICT:
            originals = self._sharded_params(self, writeback=True)
        else:
            originals = self.summon_full_params(self, writeback=True)
        with originals:
            return self.module.load_state_dict(state_dict, strict, assign)

    # ---- optimizer state dicts ---------------------------------------------------------------
    @staticmethod
    def optim_state_dict(model, optim, optim_state_dict=None, group=None):
        """``optim``'s state as an optimizer over the unwrapped model would
        hold it: keyed by the original parameter names, with full tensors
        (call on every rank; each gets the whole dict), or, where ``model``'s
        state_dict_type is SHARDED_STATE_DICT, DTensors of each rank's rows
        (as its sharded state dict holds the parameters)."""
        units = [m for m in model.modules() if isinstance(m, FullyShardedDataParallel)]
        sharded = bool(units) and units[0]._state_dict_type is StateDictType.SHARDED_STATE_DICT
        return _optim_state.optim_state_by_name(model, optim, FullyShardedDataParallel, optim_state_dict, sharded)

    @staticmethod
    def full_optim_state_dict(model, optim, optim_input=None, rank0_only=True, group=None):
        """PyTorch's older form of ``optim_state_dict``: the same full state,
        keyed by parameter IDs (the positions an optimizer over the unwrapped
        model gives its parameters), and with ``rank0_only`` only on rank 0
        (an empty dict on the others). Call on every rank."""
        _refuse("full_optim_state_dict(optim_input=...)", optim_input is not None)
        osd = _optim_state.optim_state_by_name(model, optim, FullyShardedDataParallel)
        if rank0_only and dist.get_rank(group) != 0:
            return {}
        return _optim_state.keyed_by_ids(osd, _optim_state.param_names(model, optim.param_groups,
                                                                       FullyShardedDataParallel))

    @staticmethod
    def shard_full_optim_state_dict(full_optim_state_dict, model, optim_input=None, optim=None):
        """This rank's dict for ``optim.load_state_dict`` from a full optimizer
        state dict keyed by IDs (``full_optim_state_dict``) or names
        (``optim_state_dict``). ddpc needs ``optim`` (PyTorch can build the
        groups from the model instead)."""
        _refuse("shard_full_optim_state_dict(optim_input=...)", optim_input is not None)
        if optim is None:
            raise ValueError("shard_full_optim_state_dict: pass optim=, the optimizer whose parameter groups the "
                             "state is mapped onto")
        osd = _optim_state.keyed_by_names(full_optim_state_dict,
                                          _optim_state.param_names(model, optim.param_groups, FullyShardedDataParallel))
        return _optim_state.optim_state_dict_to_load(model, optim, osd, FullyShardedDataParallel)

    @staticmethod
    def scatter_full_optim_state_dict(full_optim_state_dict, model, optim_input=None, optim=None, group=None):
        """``shard_full_optim_state_dict`` with the full dict given on the
        group's rank 0 only (None elsewhere), which sends it to the others."""
        box = [full_optim_state_dict]
        dist.broadcast_object_list(box, src=dist.get_global_rank(group, 0), group=group)
        return FullyShardedDataParallel.shard_full_optim_state_dict(box[0], model, optim_input, optim)

    @staticmethod
    def rekey_optim_state_dict(optim_state_dict, optim_state_key_type, model, optim_input=None, optim=None):
        """A full optimizer state dict keyed by parameter names
        (``OptimStateKeyType.PARAM_NAME``) or IDs (``PARAM_ID``), the key
        positions taken from ``optim``'s groups (or, without it, one group of
        ``model.parameters()``)."""
        _refuse("rekey_optim_state_dict(optim_input=...)", optim_input is not None)
        groups = optim.param_groups if optim is not None else [{"params": list(model.parameters())}]
        names = _optim_state.param_names(model, groups, FullyShardedDataParallel)
        osd = _optim_state.keyed_by_names(optim_state_dict, names)
        return osd if optim_state_key_type == OptimStateKeyType.PARAM_NAME else _optim_state.keyed_by_ids(osd, names)

    @staticmethod
    def optim_state_dict_to_load(model, optim, optim_state_dict, is_named_optimizer=False, load_directly=False,
                                 group=None):
        """The dict that ``optim.load_state_dict`` takes on this rank from one
        ``optim_state_dict`` gave, full or sharded (or an unwrapped model's
        optimizer's state, keyed by parameter names): each flat shard's slice
        of the state (from DTensors, whatever their placements, through an
        all-to-all of their rows)."""
        _refuse("optim_state_dict_to_load(is_named_optimizer=True)", is_named_optimizer)
        result = _optim_state.optim_state_dict_to_load(model, optim, optim_state_dict, FullyShardedDataParallel)
        if load_directly:
            optim.load_state_dict(result)
        return result

    def extra_repr(self):
        return f"sharding_strategy={self.sharding_strategy.name}"


FSDP = FullyShardedDataParallel


_HYBRID = (ShardingStrategy.HYBRID_SHARD, ShardingStrategy._HYBRID_SHARD_ZERO2)


def _process_groups(strategy, process_group, device_mesh):
    """(the group the units shard over, the group they replicate over: None
    but under the HYBRID strategies), from PyTorch's forms of the arguments."""
    if process_group is not None and device_mesh is not None:
        raise ValueError("Cannot pass both process_group and device_mesh at the same time. Please just pass only "
                         "one of them.")
    if strategy not in _HYBRID:
        if isinstance(process_group, tuple):
            raise ValueError(f"FullyShardedDataParallel: a tuple of process groups (intra-node, inter-node) is for "
                             f"the HYBRID strategies, not {strategy}")
        if device_mesh is None:
            return process_group, None
        if device_mesh.ndim != 1:
            raise ValueError(f"FullyShardedDataParallel with {strategy} takes a 1-d device_mesh, got one of "
                             f"ndim={device_mesh.ndim}")
        return device_mesh.get_group(), None
    if device_mesh is not None:
        if device_mesh.ndim != 2:
            raise ValueError(f"Expected device_mesh to have ndim=2 but got {device_mesh.ndim}")
        return device_mesh.get_group(1), device_mesh.get_group(0)  # dims (replicate, shard)
    if process_group is None:
        return _node_groups(strategy)
    if isinstance(process_group, tuple) and len(process_group) == 2:
        return process_group
    raise ValueError("Expected process_group to be passed in as either None or Tuple[dist.ProcessGroup, "
                     f"dist.ProcessGroup] but got {type(process_group)}")


def _node_groups(strategy):
    """The ranks of this node (LOCAL_WORLD_SIZE consecutive ranks) to shard
    over, and the ranks with this rank's local rank to replicate over."""
    try:
        shard, _ = dist.new_subgroups()
    except ValueError as e:
        raise ValueError(f"FullyShardedDataParallel with {strategy} and neither process_group nor device_mesh "
                         f"shards over the ranks of each node: {e}") from e
    per_node, world = dist.get_world_size(shard), dist.get_world_size()
    replicate, _ = dist.new_subgroups_by_enumeration([list(range(i, world, per_node)) for i in range(per_node)])
    return shard, replicate


class _ExecOrder:
    """The order the units of one root ran in during its first forward, which
    the prefetches follow (as PyTorch's, the first iteration's order stands
    for all), and the units' all-gathers in flight."""

    def __init__(self):
        self.recording = True
        self.pre_forward = []   # units in the order their forwards began
        self.post_forward = []  # units in the order their forwards ended: backward runs them in reverse
        self.inflight = []      # handles whose prefetched all-gather is not waited for yet

    def record(self, order, unit):
        if self.recording and not any(u is unit for u in order):
            order.append(unit)

    def after(self, unit):
        """The unit whose forward begins after ``unit``'s (None while recording or at the end)."""
        return self._neighbour(self.pre_forward, unit, 1)

    def before(self, unit):
        """The unit whose backward comes after ``unit``'s."""
        return self._neighbour(self.post_forward, unit, -1)

    def _neighbour(self, order, unit, step):
        if self.recording:
            return None
        at = next((i for i, u in enumerate(order) if u is unit), None)
        if at is None or not 0 <= at + step < len(order):
            return None
        return order[at + step]


def _refuse(what, asked):
    if asked:
        raise NotImplementedError(f"FullyShardedDataParallel: {what} is not supported by ddpc")


def _unit_modules(module, ignored, unit_cls):
    """(qualified name, module) of the modules whose parameters a unit over
    ``module`` holds: not those of nested units (modules of ``unit_cls``
    below it) or ignored modules."""
    stack = [("", module)]
    seen = set()
    while stack:
        prefix, m = stack.pop()
        if id(m) in seen or id(m) in ignored:
            continue
        seen.add(id(m))
        yield prefix, m
        children = [(prefix + ("." if prefix else "") + n, c) for n, c in m._modules.items()
                    if c is not None and not isinstance(c, unit_cls)]
        stack.extend(reversed(children))


def _unit_buffers(module, ignored):
    for _, m in _unit_modules(module, ignored, FullyShardedDataParallel):
        for b in m._buffers.values():
            if b is not None:
                yield b


def _cast_floating(obj, dtype):
    if isinstance(obj, Tensor):
        return obj.to(dtype) if obj.dtype.is_floating_point else obj
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cast_floating(o, dtype) for o in obj)
    if isinstance(obj, dict):
        return {k: _cast_floating(v, dtype) for k, v in obj.items()}
    return obj

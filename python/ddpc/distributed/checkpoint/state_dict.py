"""Model and optimizer state dicts keyed by parameter names, shaped like
torch.distributed.checkpoint.state_dict.

``get_state_dict(model, optimizer)`` gives the model's state dict with the
wrappers' prefixes removed (``module.`` of DistributedDataParallel and
DataParallel, ``_fsdp_wrapped_module.``, ``_checkpoint_wrapped_module.``,
``_orig_mod.``), so a checkpoint of a wrapped model loads into the bare one
and back, and the optimizer's state dict keyed by those parameter names
instead of by position: ``{"state": {"fc.weight": {...}}, "param_groups":
[{..., "params": ["fc.weight", ...]}]}``. An optimizer that has not stepped
yet gets its state made first (one step at learning rate 0 over zero
gradients, as PyTorch does), so the result is a template that
``ddpc.distributed.checkpoint.load`` can fill in place. ``set_state_dict``
loads both back.

A model with FullyShardedDataParallel units (the model itself, or modules
inside it) gives, by default, its SHARDED_STATE_DICT: the unwrapped model's
names, each sharded parameter a DTensor of this rank's rows, and the
optimizer's state keyed by those names with DTensors of the same rows (as
``FSDP.optim_state_dict`` gives it under SHARDED_STATE_DICT); with
``options=StateDictOptions(full_state_dict=True)`` the model's state dict
has full tensors (gathered from the shards) and so has the optimizer's.
``set_state_dict`` loads either back into each rank's shards, so a
checkpoint saved with ``ddpc.distributed.checkpoint.save`` on N ranks loads
on M (the sharded one part by part: each rank reads its rows). With
``full_state_dict`` and ``cpu_offload`` together only rank 0 gets the state
dicts (the other ranks get empty dicts; load them back with
``broadcast_from_rank0=True``), as PyTorch does.

A model sharded by ``fully_shard`` (FSDP2) gives the same: its state dict's
DTensors, and the optimizer's state of each sharded parameter (the tensors
laid out as its rows) as DTensors of the same rows, or full tensors with
``full_state_dict``; ``set_*`` take DTensors of any placements or full
tensors back into each rank's rows.

Where ddpc differs: without sharded parameters, ``full_state_dict`` changes
nothing but the rank-0-only form above (every tensor is whole already).
``set_*`` take a full or a sharded state dict (one holding DTensors)
whatever ``full_state_dict`` says.
"""

import contextlib
from dataclasses import dataclass

from ...nn.modules import _IncompatibleKeys
from ...tensor import Tensor, zeros_like
from .. import broadcast_object_list, get_rank, is_initialized
from ..fsdp import FullyShardedDataParallel, StateDictType
from ..fsdp._fsdp_param import ShardedParameter
from ..fsdp._fully_shard import as_dtensors
from ..tensor import DTensor
from ..fsdp._optim_state import _units as _fsdp_flat_params

__all__ = ["StateDictOptions", "get_model_state_dict", "get_optimizer_state_dict", "get_state_dict",
           "set_model_state_dict", "set_optimizer_state_dict", "set_state_dict"]

_WRAPPER_ATTRIBUTES = ("_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod")


@dataclass
class StateDictOptions:
    full_state_dict: bool = False
    cpu_offload: bool = False
    ignore_frozen_params: bool = False
    keep_submodule_prefixes: bool = True
    strict: bool = True
    broadcast_from_rank0: bool = False
    flatten_optimizer_state_dict: bool = False
    dsd_fqn_modifiers: str = "_fqn_modifiers"


def _options(options):
    if options is None:
        return StateDictOptions()
    if not isinstance(options, StateDictOptions):
        raise TypeError(f"options must be a StateDictOptions, got {type(options).__name__}")
    return options


def _is_wrapper(module):
    from ...nn.parallel import DataParallel, DistributedDataParallel

    return isinstance(module, (DataParallel, DistributedDataParallel))


def _clean_name(model, name):
    """name (a dotted path in model) without the attributes that only wrappers add."""
    kept, module = [], model
    for part in name.split("."):
        wrapper_link = part in _WRAPPER_ATTRIBUTES or (part == "module" and _is_wrapper(module))
        module = getattr(module, part, None)
        if not wrapper_link:
            kept.append(part)
    return ".".join(kept)


def _optimizers(optimizers):
    from ...optim.optimizer import Optimizer

    if isinstance(optimizers, Optimizer):
        return [optimizers]
    optimizers = list(optimizers)
    if not all(isinstance(o, Optimizer) for o in optimizers):
        raise TypeError("optimizers must be a ddpc.optim.Optimizer or an iterable of them")
    return optimizers


def _parameter_names(model):
    """id(parameter) -> its clean names: the first, for a parameter reachable by several; those of the
    parameters it flattens, for an FSDP unit's flat parameter."""
    flat = _fsdp_flat_params(model, FullyShardedDataParallel)
    names = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in flat:
            handle, prefix = flat[id(p)]
            names.setdefault(id(p), [prefix + n for n in handle.names])
        else:
            names.setdefault(id(p), [_clean_name(model, name)])
    return names


def _has_fsdp_units(model):
    return any(isinstance(m, FullyShardedDataParallel) for m in model.modules())


def _fsdp_state_dict_type(full):
    return StateDictType.FULL_STATE_DICT if full else StateDictType.SHARDED_STATE_DICT


@contextlib.contextmanager
def _original_parameters(model, full, writeback):
    """Inside, the FSDP units of model hold their original parameters under their own names: full, or
    DTensors of this rank's rows."""
    if not _has_fsdp_units(model):
        yield
        return
    with FullyShardedDataParallel.state_dict_type(model, _fsdp_state_dict_type(full)), \
            (FullyShardedDataParallel.summon_full_params(model, writeback=writeback) if full else
             FullyShardedDataParallel._sharded_params(model, writeback)):
        yield


def _rank0_only(options):
    """As PyTorch's: a full state dict offloaded to the cpu is rank 0's alone (to spare the host memory)."""
    return options.full_state_dict and options.cpu_offload and is_initialized() and get_rank() != 0


def _with_submodules(model, state, submodules, keep_prefixes):
    if submodules is None:
        return state
    prefixes = [_clean_name(model, name) + "." for name, m in model.named_modules() if m in set(submodules)]
    picked = {}
    for k, v in state.items():
        for prefix in prefixes:
            if k.startswith(prefix):
                picked[k if keep_prefixes else k[len(prefix):]] = v
                break
    return picked


def _offloaded(value, options):
    return value.cpu() if options.cpu_offload and isinstance(value, (Tensor, DTensor)) else value


def get_model_state_dict(model, *, submodules=None, options=None):
    """model.state_dict() under the names of the unwrapped model (FSDP units' parameters as DTensors of
    this rank's rows, or gathered, full, with full_state_dict)."""
    options = _options(options)
    state = {}
    with _original_parameters(model, options.full_state_dict, writeback=False):
        frozen = {_clean_name(model, n) for n, p in model.named_parameters() if not p.requires_grad}
        for key, value in model.state_dict().items():
            name = _clean_name(model, key)
            if not (options.ignore_frozen_params and name in frozen):
                if options.full_state_dict and isinstance(value, DTensor):
                    value = value.full_tensor()
                state[name] = _offloaded(value, options)
    if _rank0_only(options):
        return {}
    return _with_submodules(model, state, submodules, options.keep_submodule_prefixes)


def _init_optim_state(optimizer):
    """Makes an optimizer's state before its first step, so there are tensors to save or to load into:
    one step over zero gradients at learning rate 0, which leaves the parameters as they are. An
    optimizer without state whose parameters hold gradients has stepped already (SGD keeps no state)."""
    params = [p for g in optimizer.param_groups for p in g["params"]]
    if optimizer.state or any(p.grad is not None for p in params):
        return
    for p in params:
        if p.requires_grad:
            p.grad = zeros_like(p)
    lrs = [g.get("lr") for g in optimizer.param_groups]
    for g in optimizer.param_groups:
        if "lr" in g:
            g["lr"] = 0.0
    try:
        optimizer.step()
    finally:
        for g, lr in zip(optimizer.param_groups, lrs):
            if lr is not None:
                g["lr"] = lr
        optimizer.zero_grad(set_to_none=True)


def _flatten_optim(state):
    flat = {}
    for name, entries in state["state"].items():
        for k, v in entries.items():
            flat[f"state.{name}.{k}"] = v
    for group in state["param_groups"]:
        for name in group["params"]:
            for k, v in group.items():
                if k != "params":
                    flat[f"param_groups.{name}.{k}"] = v
    return flat


def _unflatten_optim(flat, optimizers, names):
    """A flattened optimizer state dict back in the nested form, its groups laid out as the optimizers' are."""
    state, groups = {}, []
    for key, v in flat.items():
        kind, _, rest = key.partition(".")
        if kind == "state":
            name, _, k = rest.rpartition(".")
            state.setdefault(name, {})[k] = v
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            params = [n for p in group["params"] for n in names[id(p)]]
            packed = {k: flat.get(f"param_groups.{params[0]}.{k}", v) if params else v
                      for k, v in group.items() if k != "params"}
            packed["params"] = params
            groups.append(packed)
    return {"state": state, "param_groups": groups}


def _sharded_state_value(p, value, full):
    """A value of parameter p's optimizer state: for a parameter fully_shard
    sharded, a tensor laid out as its rows becomes a DTensor of them (or,
    where ``full``, the full tensor of every rank's)."""
    if not (isinstance(p, ShardedParameter) and isinstance(value, Tensor) and value.shape == p.shape):
        return value
    value = p.as_dtensor(value)
    return value.full_tensor() if full else value


def _named_optim_state(optimizer, names, full):
    """One optimizer's state dict keyed by parameter names."""
    state, groups = {}, []
    for group in optimizer.param_groups:
        for p in group["params"]:
            if id(p) not in names:
                raise ValueError("get_optimizer_state_dict: the optimizer holds a parameter that is not the "
                                 "model's")
            if optimizer.state.get(p):
                entries = optimizer.state[p].items()
                state[names[id(p)][0]] = {k: _sharded_state_value(p, v, full) for k, v in entries}
        packed = {k: v for k, v in group.items() if k != "params"}
        packed["params"] = [names[id(p)][0] for p in group["params"]]
        groups.append(packed)
    return {"state": state, "param_groups": groups}


def get_optimizer_state_dict(model, optimizers, *, submodules=None, options=None):
    """The optimizers' state dicts merged into one, keyed by the parameters' names in the unwrapped model
    (for FSDP units: each original parameter's state as DTensors of this rank's rows, or full with
    full_state_dict)."""
    options = _options(options)
    optimizers = _optimizers(optimizers)
    fsdp = _has_fsdp_units(model)
    names = _parameter_names(model)
    state, groups = {}, []
    for optimizer in optimizers:
        _init_optim_state(optimizer)
        if fsdp:
            with FullyShardedDataParallel.state_dict_type(model, _fsdp_state_dict_type(options.full_state_dict)):
                part = FullyShardedDataParallel.optim_state_dict(model, optimizer)
        else:
            part = _named_optim_state(optimizer, names, options.full_state_dict)
        for name, entries in part["state"].items():
            state[name] = {k: _offloaded(v, options) for k, v in entries.items()}
        groups += part["param_groups"]
    if _rank0_only(options):
        return {}
    result = {"state": state, "param_groups": groups}
    if submodules is not None:
        every = {n: None for ns in names.values() for n in ns}
        kept = set(_with_submodules(model, every, submodules, True))
        result = {"state": {n: s for n, s in state.items() if n in kept},
                  "param_groups": [{**g, "params": [n for n in g["params"] if n in kept]} for g in groups]}
    return _flatten_optim(result) if options.flatten_optimizer_state_dict else result


def get_state_dict(model, optimizers, *, submodules=None, options=None):
    """(get_model_state_dict(model), get_optimizer_state_dict(model, optimizers))."""
    return (get_model_state_dict(model, submodules=submodules, options=options),
            get_optimizer_state_dict(model, optimizers, submodules=submodules, options=options))


def _from_rank0(state, options):
    """Rank 0's state dict on every rank, when options ask for it (the other ranks' state is not read)."""
    if not (options.broadcast_from_rank0 and is_initialized()):
        return state
    box = [state if get_rank() == 0 else None]
    broadcast_object_list(box, src=0)
    return box[0]


def set_model_state_dict(model, model_state_dict, *, options=None):
    """Loads a state dict keyed by the unwrapped model's names into model, full or sharded (holding
    DTensors); returns its missing and unexpected keys (as load_state_dict does). With
    broadcast_from_rank0, only rank 0's dict is read and the other ranks receive it."""
    options = _options(options)
    model_state_dict = _from_rank0(model_state_dict, options)
    full = not any(isinstance(v, DTensor) for v in model_state_dict.values())
    with _original_parameters(model, full, writeback=True):
        clean_to_key = {_clean_name(model, k): k for k in model.state_dict()}
        unexpected = [k for k in model_state_dict if k not in clean_to_key]
        renamed = as_dtensors(model, {clean_to_key[k]: v for k, v in model_state_dict.items() if k in clean_to_key})
        missing = [_clean_name(model, k) for k in model.load_state_dict(renamed, strict=False).missing_keys]
        frozen = {_clean_name(model, n) for n, p in model.named_parameters() if not p.requires_grad}
    if options.ignore_frozen_params:
        missing = [k for k in missing if k not in frozen]
    if options.strict and (missing or unexpected):
        raise RuntimeError(f"set_model_state_dict: missing keys {missing}, unexpected keys {unexpected}")
    return _IncompatibleKeys(missing, unexpected)


def set_optimizer_state_dict(model, optimizers, optim_state_dict, *, options=None):
    """Loads a state dict from get_optimizer_state_dict into the optimizers (in the model's names; for
    FSDP units, each rank takes its shards' slices of the full or sharded state)."""
    options = _options(options)
    optimizers = _optimizers(optimizers)
    fsdp = _has_fsdp_units(model)
    names = _parameter_names(model)
    optim_state_dict = _from_rank0(optim_state_dict, options)
    if optim_state_dict and "param_groups" not in optim_state_dict:
        optim_state_dict = _unflatten_optim(optim_state_dict, optimizers, names)
    saved_groups = iter(optim_state_dict["param_groups"])
    for optimizer in optimizers:
        index, groups, params = {}, [], {}
        for group in optimizer.param_groups:
            try:
                saved = next(saved_groups)
            except StopIteration:
                raise ValueError("set_optimizer_state_dict: the state dict has fewer parameter groups than the "
                                 "optimizers") from None
            own = [n for p in group["params"] for n in names[id(p)]]
            if sorted(saved["params"]) != sorted(own):
                raise ValueError(f"set_optimizer_state_dict: a parameter group holds {saved['params']} in the "
                                 f"state dict and {own} in the optimizer")
            for name in own:
                index.setdefault(name, len(index))
            params.update((n, p) for p in group["params"] for n in names[id(p)])
            groups.append(saved if fsdp else {**saved, "params": [index[n] for n in own]})
        if fsdp:
            FullyShardedDataParallel.optim_state_dict_to_load(
                model, optimizer, {"state": optim_state_dict["state"], "param_groups": groups}, load_directly=True)
            continue
        state = {index[n]: _local_state(params[n], s) for n, s in optim_state_dict["state"].items() if n in index}
        optimizer.load_state_dict({"state": state, "param_groups": groups})


def _local_state(p, entries):
    """Parameter p's optimizer state as its optimizer holds it: for a
    parameter fully_shard sharded, this rank's rows of the DTensors (any
    placements) and of the full tensors."""
    if not isinstance(p, ShardedParameter):
        return entries
    return {k: p.rows_of(v) for k, v in entries.items()}


def set_state_dict(model, optimizers, *, model_state_dict, optim_state_dict, options=None):
    """set_model_state_dict and set_optimizer_state_dict together; returns the model's missing and
    unexpected keys."""
    result = set_model_state_dict(model, model_state_dict, options=options)
    set_optimizer_state_dict(model, optimizers, optim_state_dict, options=options)
    return result

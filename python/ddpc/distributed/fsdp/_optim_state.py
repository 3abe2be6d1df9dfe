"""Optimizer state dicts of a model under FSDP: the state an optimizer keeps
per flat shard, turned into the state per original parameter (keyed by the
unwrapped parameter names: full tensors, or under SHARDED_STATE_DICT
DTensors of each rank's rows, as the model's parameters) and back.

State whose tensors have the shard's length (Adam's moments, SGD's momentum
buffer) is gathered or split along the flat layout (or its rows exchanged
all-to-all); any other value (a step count) is the same for every parameter
of a unit and is copied. Under use_orig_params the optimizer holds the
originals' pieces of the shard instead: state shaped like a piece is
gathered from (or split into) the pieces of every rank, or its rows
exchanged."""

import math

from ... import distributed as dist
from ...tensor import Tensor, cat, zeros
from ..tensor import DTensor

_WRAPPED = "_fsdp_wrapped_module"


def _clean(name):
    return name.replace(_WRAPPED + ".", "").replace(_WRAPPED, "").rstrip(".")


def _units(model, fsdp_cls):
    """id(flat parameter) -> (its handle, the unit's unwrapped name prefix)."""
    out = {}
    for prefix, m in model.named_modules():
        if isinstance(m, fsdp_cls) and m._handle is not None:
            clean = _clean(prefix)
            out[id(m._handle.flat_param)] = (m._handle, clean + "." if clean else "")
    return out


def _originals(model, fsdp_cls):
    """id(original parameter) -> (its handle, its index there), for the units with use_orig_params=True."""
    out = {}
    for m in model.modules():
        if isinstance(m, fsdp_cls) and m._handle is not None and m._handle.use_orig_params:
            out.update((id(p), (m._handle, i)) for i, p in enumerate(m._handle.params))
    return out


def _gather_piece_state(h, i, saved, sharded):
    """One original parameter's state from the state of its piece on each rank:
    full, or where ``sharded`` a DTensor of this rank's rows."""
    out = {}
    for k, v in saved.items():
        if not (isinstance(v, Tensor) and tuple(v.shape) == (h.pieces[i][1],)):
            out[k] = v.clone() if isinstance(v, Tensor) else v
        elif not h.sharded:
            out[k] = v.detach().reshape(h.shapes[i]).clone()
        elif sharded:
            start, length = h.pieces[i]
            flat = zeros(h.shard_numel, dtype=v.dtype, device=v.device)
            flat[start:start + length].copy_(v.detach())
            out[k] = h.row_dtensors(flat, only=i)[i]
        else:
            # The pieces differ in length (0 on ranks the parameter misses): each
            # rank sends its piece padded to the longest.
            lengths = [h.piece(i, r)[1] for r in range(h.world)]
            longest = max(lengths)
            mine = zeros(longest, dtype=v.dtype, device=v.device)
            mine[:lengths[h.rank]].copy_(v.detach())
            every = zeros(longest * h.world, dtype=v.dtype, device=v.device)
            dist.all_gather_into_tensor(every, mine, group=h.group)
            out[k] = cat([every[r * longest:r * longest + n] for r, n in enumerate(lengths)]).reshape(h.shapes[i])
    return out


def _piece_state(h, i, entry):
    """This rank's piece of one original parameter's state (full tensors, or DTensors of its rows)."""
    start, length = h.pieces[i]
    at = (h.rank * h.shard_numel if h.sharded else 0) + start - h.offsets[i]  # where the piece begins in it
    out = {}
    for k, v in entry.items():
        if isinstance(v, DTensor) and tuple(v.shape) == h.shapes[i]:
            flat = zeros(h.shard_numel, dtype=v.dtype, device=h.flat_param.device)
            h.load_row_dtensors([v if j == i else None for j in range(len(h.params))], flat, only=i)
            out[k] = flat[start:start + length].clone()
        elif isinstance(v, Tensor) and tuple(v.shape) == h.shapes[i]:
            out[k] = v.detach().reshape(-1)[at:at + length].to(h.flat_param.device).clone()
        else:
            out[k] = v.clone() if isinstance(v, Tensor) else v
    return out


def _is_flat_state(value, handle):
    return isinstance(value, Tensor) and value.dim() == 1 and value.numel() == handle.shard_numel


def _entry_names(p, units, names):
    """The unwrapped names one optimizer entry stands for: a flat shard's parameters, or one parameter."""
    if id(p) in units:
        h, prefix = units[id(p)]
        return [prefix + name for name in h.names]
    return [names[id(p)]]


def param_names(model, param_groups, fsdp_cls):
    """Per parameter group, the unwrapped names of its parameters in the
    unwrapped model's order (its modules depth-first, each module's own
    parameters in the order they were registered), the order in which an
    optimizer over the unwrapped model would number them."""
    units = _units(model, fsdp_cls)
    names = {id(p): _clean(n) for n, p in model.named_parameters()}
    depth_first = {}
    for prefix, _ in model.named_modules():
        depth_first.setdefault(_clean(prefix), len(depth_first))
    return [sorted((n for p in g["params"] for n in _entry_names(p, units, names)),
                   key=lambda n: depth_first[n.rpartition(".")[0]]) for g in param_groups]


def keyed_by_ids(osd, group_names):
    """A names-keyed optimizer state dict keyed by parameter IDs instead: each
    name's position in ``group_names`` (per group, from param_names)."""
    ids = {n: i for i, n in enumerate(n for g in group_names for n in g)}
    return {"state": {ids[n]: v for n, v in osd["state"].items()},
            "param_groups": [{**g, "params": [ids[n] for n in names]}
                             for g, names in zip(osd["param_groups"], group_names)]}


def keyed_by_names(osd, group_names):
    """An ID-keyed optimizer state dict keyed by the names ``group_names`` (per
    group, from param_names) gives those positions; a names-keyed one as it is."""
    keys = [k for g in osd["param_groups"] for k in g["params"]]
    if all(isinstance(k, str) for k in keys):
        return osd
    flat = [n for g in group_names for n in g]
    if len(keys) != len(flat):
        raise ValueError(f"the optimizer state dict has {len(keys)} parameters, the model's optimizer {len(flat)}")
    return {"state": {flat[i]: v for i, v in osd["state"].items()},
            "param_groups": [{**g, "params": [flat[i] for i in g["params"]]} for g in osd["param_groups"]]}


def optim_state_by_name(model, optim, fsdp_cls, osd=None, sharded=False):
    """optim's state dict keyed by the unwrapped names, each parameter's state
    full, or where ``sharded`` a DTensor of this rank's rows (full under NO_SHARD)."""
    osd = optim.state_dict() if osd is None else osd
    units, originals = _units(model, fsdp_cls), _originals(model, fsdp_cls)
    names = {id(p): _clean(n) for n, p in model.named_parameters()}
    state, groups = {}, []
    for group, packed in zip(optim.param_groups, osd["param_groups"]):
        keys = []
        for p, i in zip(group["params"], packed["params"]):
            saved = osd["state"].get(i, {})
            keys.extend(_entry_names(p, units, names))
            if id(p) not in units:
                if saved and id(p) in originals:
                    state[names[id(p)]] = _gather_piece_state(*originals[id(p)], saved, sharded)
                elif saved:
                    state[names[id(p)]] = dict(saved)
                continue
            h, prefix = units[id(p)]
            per_param = [{} for _ in h.params]
            for k, v in saved.items():
                if _is_flat_state(v, h) and sharded and h.sharded:
                    for d, rows in zip(per_param, h.row_dtensors(v)):
                        d[k] = rows
                elif _is_flat_state(v, h):
                    full = v.detach()
                    if h.sharded:
                        full = zeros(h.padded, dtype=v.dtype, device=v.device)
                        dist.all_gather_into_tensor(full, v.detach(), group=h.group)
                    for d, shape, off in zip(per_param, h.shapes, h.offsets):
                        d[k] = full[off:off + math.prod(shape)].reshape(shape).clone()
                else:
                    for d in per_param:
                        d[k] = v.clone() if isinstance(v, Tensor) else v
            for name, d in zip(h.names, per_param):
                if d:
                    state[prefix + name] = d
        groups.append({**{k: v for k, v in packed.items() if k != "params"}, "params": keys})
    return {"state": state, "param_groups": groups}


def optim_state_dict_to_load(model, optim, osd, fsdp_cls):
    units, originals = _units(model, fsdp_cls), _originals(model, fsdp_cls)
    names = {id(p): _clean(n) for n, p in model.named_parameters()}
    if len(osd["param_groups"]) != len(optim.param_groups):
        raise ValueError(f"the optimizer state dict has {len(osd['param_groups'])} parameter groups, the optimizer "
                         f"has {len(optim.param_groups)}")
    state, groups, n = {}, [], 0
    for group, saved_group in zip(optim.param_groups, osd["param_groups"]):
        ids = []
        for p in group["params"]:
            if id(p) not in units:
                entry = osd["state"].get(names[id(p)])
                if entry is not None:
                    state[n] = _piece_state(*originals[id(p)], entry) if id(p) in originals else dict(entry)
            else:
                h, prefix = units[id(p)]
                entries = [osd["state"].get(prefix + name) for name in h.names]
                missing = [prefix + name for name, e in zip(h.names, entries) if e is None]
                if missing and len(missing) < len(entries):
                    raise KeyError(f"optimizer state dict: no state for {missing}, although other parameters of "
                                   "their FSDP unit have state")
                if not missing:
                    state[n] = _shard_state(h, entries)
            ids.append(n)
            n += 1
        groups.append({**{k: v for k, v in saved_group.items() if k != "params"}, "params": ids})
    return {"state": state, "param_groups": groups}


def _shard_state(h, entries):
    """One flat shard's state from the state of each of the unit's parameters
    (full tensors, or DTensors of their rows)."""
    out = {}
    lo = h.rank * h.shard_numel if h.sharded else 0
    for k, v in entries[0].items():
        if all(isinstance(e.get(k), DTensor) and tuple(e[k].shape) == shape for e, shape in zip(entries, h.shapes)):
            out[k] = zeros(h.shard_numel, dtype=v.dtype, device=h.flat_param.device)
            h.load_row_dtensors([e[k] for e in entries], out[k])
        elif all(isinstance(e.get(k), Tensor) and tuple(e[k].shape) == shape for e, shape in zip(entries, h.shapes)):
            flat = cat([e[k].detach().reshape(-1).to(h.flat_param.device) for e in entries])
            if h.padded > h.numel:
                flat = cat([flat, zeros(h.padded - h.numel, dtype=flat.dtype, device=flat.device)])
            out[k] = flat[lo:lo + h.shard_numel].clone()
        else:
            out[k] = v.clone() if isinstance(v, Tensor) else v
    return out

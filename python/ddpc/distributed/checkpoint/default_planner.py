"""DefaultSavePlanner and DefaultLoadPlanner, at PyTorch's path
torch.distributed.checkpoint.default_planner: what save and load do without
a planner, and the classes to subclass to change one step of it.

Saving: the state dict is flattened to dotted keys (PyTorch's rule: dicts
are entered, and lists holding a tensor or a dict); each rank offers every
tensor (its own part of a DTensor: a SHARD item at the part's offsets) and
every other value; the coordinator keeps one offer of each, as PyTorch's
dedup_save_plans does: in the order the plans first name them, what several
ranks offer goes to the rank among them with the least to write so far (a
tensor's bytes, 1 for a value; the lowest rank of equals), or with
``dedup_save_to_lowest_rank`` to the lowest (a tensor wins over a value
under the same key). Loading: each rank asks, for each key of its state
dict, for the regions of the saved chunks that overlap what it holds (the
whole of a plain tensor, its own part of a DTensor), and replaces non-tensor
values.
"""

import io
import math

from ...serialization import CheckpointError
from ...serialization import load as _load_bytes
from ...serialization import save as _save_bytes
from ...tensor import Size, Tensor
from ..tensor import DTensor, _local_shape_and_offset
from .metadata import (BytesStorageMetadata, ChunkStorageMetadata, Metadata, MetadataIndex, TensorProperties,
                       TensorStorageMetadata)
from .planner import (LoadItemType, LoadPlan, LoadPlanner, ReadItem, SavePlan, SavePlanner, TensorWriteData,
                      WriteItem, WriteItemType)

__all__ = ["DefaultLoadPlanner", "DefaultSavePlanner"]


def _flatten(state_dict, whole, own_keys=False):
    """{dotted key: (path to the value, value)} for state_dict: its nested dicts, lists and tuples entered
    down to the values whole(value) keeps whole. A path holds the dicts' keys as strings, as PyTorch's
    flattening does (a value under the int key 0 is at "0"), or with own_keys the state dict's keys as they
    are (as PyTorch's planners keep them without flattening), and the lists' and tuples' indices."""
    out = {}

    def visit(path, value):
        if whole(value):
            key = ".".join(map(str, path))
            if key in out:
                raise ValueError(f"two values of the state dict flatten to the key {key!r}")
            out[key] = (path, value)
        elif isinstance(value, dict):
            for k, v in value.items():
                visit(path + (str(k),), v)
        else:
            for i, v in enumerate(value):
                visit(path + (i,), v)

    for k, v in state_dict.items():
        visit((k if own_keys else str(k),), v)
    return out


def _whole(value):
    """PyTorch's rule (flatten_state_dict): dicts are entered, and lists holding a tensor, a dict or
    such a list; any other list, every tuple and every other value is one value."""
    if isinstance(value, dict):
        return False
    return not isinstance(value, list) or all(not _is_tensor(v) and _whole(v) for v in value)


def _top_level(value):
    """flatten_state_dict=False, as PyTorch: every value of the state dict is one value, however nested."""
    return True


def _element(value):
    """How ddpc flattened before it followed PyTorch: every dict, list and tuple entered. Checkpoints
    saved so are keyed by element ("milestones.0", ...)."""
    return not isinstance(value, (dict, list, tuple))


def _replaced(obj, path, value):
    """obj with the element at path (of _flatten) replaced by value, as PyTorch's set_element puts it: a
    dict or list the path names and obj lacks is made (where a dict's key is not a string, its string
    holds none), a list extended to the index, and a tuple on the way rebuilt, as it cannot change."""
    if not path:
        return value
    key, rest = path[0], path[1:]
    if isinstance(obj, tuple):
        items = list(obj)
        items[key] = _replaced(obj[key], rest, value)
        return type(obj)(items)
    if isinstance(obj, list):
        obj.extend([None] * (key + 1 - len(obj)))
    inner = obj.get(key) if isinstance(obj, dict) else obj[key]
    if inner is None and rest:
        inner = {} if isinstance(rest[0], str) else []
    obj[key] = _replaced(inner, rest, value)
    return obj


def _is_tensor(v):
    return isinstance(v, (Tensor, DTensor))


def _part(value):
    """(the tensor this rank holds, its offsets in the whole, the whole's shape) of a tensor value: a
    DTensor's local part, or a whole tensor."""
    if isinstance(value, DTensor):
        _, offsets = _local_shape_and_offset(tuple(value.shape), value.device_mesh, value.placements)
        return value.to_local(), tuple(offsets), tuple(value.shape)
    return value, (0,) * value.ndim, tuple(value.shape)


def _writers(all_plans, lowest_rank):
    """PyTorch's dedup_save_plans: the rank that writes each item (MetadataIndex) of the ranks' plans. An
    item several ranks' plans hold goes, in the order the plans first name the items, to the lowest of
    those ranks (lowest_rank) or to the one with the least to write so far (a tensor's part counted by its
    bytes, a value as 1; the lowest rank of equals)."""
    holders = {}
    for rank, plan in enumerate(all_plans):
        for item in plan.items:
            holders.setdefault(item.index, (item, []))[1].append(rank)
    planned, writer = [0] * len(all_plans), {}
    for index, (item, ranks) in holders.items():
        rank = ranks[0] if lowest_rank else min(ranks, key=planned.__getitem__)
        writer[index] = rank
        planned[rank] += item.tensor_storage_size() or 1
    return writer


class DefaultSavePlanner(SavePlanner):
    """What ``save`` does without a planner (see the module's docstring). With
    ``flatten_state_dict=False``, as PyTorch's, only the state dict's own values are items: a tensor (or
    DTensor) there is saved as one, anything else (a nested dict too, tensors and all) as one value.
    Replicated parts are always written once (``dedup_replicated_tensors``, which PyTorch deprecates,
    is ignored)."""

    def __init__(self, flatten_state_dict=True, flatten_sharded_tensors=True, dedup_replicated_tensors=None,
                 dedup_save_to_lowest_rank=False, enable_plan_caching=False):
        self.flatten_state_dict = bool(flatten_state_dict)
        self.dedup_save_to_lowest_rank = bool(dedup_save_to_lowest_rank)

    def set_up_planner(self, state_dict, storage_meta=None, is_coordinator=False):
        self.original_state_dict = state_dict
        whole = _whole if self.flatten_state_dict else _top_level
        self.state_dict = {k: v for k, (_, v) in _flatten(state_dict, whole).items()}
        self.storage_meta, self.is_coordinator = storage_meta, is_coordinator

    def create_local_plan(self):
        items = []
        for fqn, value in self.state_dict.items():
            if not _is_tensor(value):
                items.append(WriteItem(MetadataIndex(fqn), WriteItemType.BYTE_IO))
                continue
            local, offsets, shape = _part(value)
            chunk = ChunkStorageMetadata(Size(offsets), Size(local.shape))
            items.append(WriteItem(MetadataIndex(fqn, offsets),
                                   WriteItemType.SHARD if isinstance(value, DTensor) else WriteItemType.TENSOR,
                                   tensor_data=TensorWriteData(chunk, TensorProperties.create_from_tensor(local),
                                                               Size(shape))))
        self.plan = SavePlan(items)
        return self.plan

    def create_global_plan(self, all_plans):
        writer = _writers(all_plans, self.dedup_save_to_lowest_rank)
        entries = {}
        for rank, plan in enumerate(all_plans):
            for item in plan.items:
                if item.tensor_data is None:
                    continue
                fqn, data = item.index.fqn, item.tensor_data
                entry = entries.get(fqn)
                if entry is None:
                    entries[fqn] = TensorStorageMetadata(data.properties, data.size, [])
                elif (entry.properties.dtype, tuple(entry.size)) != (data.properties.dtype, tuple(data.size)):
                    raise ValueError(f"save: {fqn!r} is a {entry.properties.dtype.name} tensor of shape "
                                     f"{tuple(entry.size)} on one rank, {data.properties.dtype.name} of shape "
                                     f"{tuple(data.size)} on rank {rank}")
        plans = []
        for rank, plan in enumerate(all_plans):
            items = []
            for item in plan.items:
                fqn = item.index.fqn
                if writer[item.index] != rank:
                    continue
                if item.tensor_data is not None:
                    chunks = entries[fqn].chunks
                    chunks.append(item.tensor_data.chunk)
                    item = WriteItem(MetadataIndex(fqn, item.index.offset, len(chunks) - 1), item.type,
                                     item.bytes_io_data, item.tensor_data)
                elif fqn in entries:  # a tensor under the same key on some rank wins over a value
                    continue
                else:
                    entries[fqn] = BytesStorageMetadata()
                items.append(item)
            plans.append(SavePlan(items, plan.storage_data, plan.planner_data, plan.usable))
        return plans, Metadata(state_dict_metadata=entries)

    def finish_plan(self, new_plan):
        self.plan = new_plan
        return new_plan

    def resolve_data(self, write_item):
        """A tensor's part (as the state dict holds it), or a value as ddpc.save's bytes."""
        value = self.state_dict[write_item.index.fqn]
        if write_item.type == WriteItemType.BYTE_IO:
            buf = io.BytesIO()
            _save_bytes(value, buf)
            buf.seek(0)
            return buf
        return _part(value)[0]


class DefaultLoadPlanner(LoadPlanner):
    """What ``load`` does without a planner (see the module's docstring). With
    ``allow_partial_load`` keys of the state dict that the checkpoint lacks are left as they are
    instead of raising KeyError. With ``flatten_state_dict=False`` only the state dict's own keys are
    asked for, as ``DefaultSavePlanner(flatten_state_dict=False)`` saved them: a tensor there is
    copied into, any other value (a nested dict too) replaced. Where ddpc differs: PyTorch's planner
    then loses the replaced values unless ``flatten_sharded_tensors=False`` is also given (it loads
    them into a copy of the state dict); ddpc's puts them in the state dict either way."""

    def __init__(self, flatten_state_dict=True, flatten_sharded_tensors=True, allow_partial_load=False):
        self.flatten_state_dict = bool(flatten_state_dict)
        self.allow_partial_load = bool(allow_partial_load)

    def set_up_planner(self, state_dict, metadata=None, is_coordinator=False):
        self.original_state_dict = state_dict
        if self.flatten_state_dict:
            flat = _flatten(state_dict, _whole)
        else:
            flat = _flatten(state_dict, _top_level, own_keys=True)
        saved = metadata.state_dict_metadata.keys() if metadata is not None else flat.keys()
        # As PyTorch reads its older checkpoints: keys the checkpoint has and this flattening lacks may be
        # of the older layout.
        if self.flatten_state_dict and saved - flat.keys():
            older = _flatten(state_dict, _element)
            if older.keys() & (saved - flat.keys()):
                flat = older
        self.paths = {fqn: path for fqn, (path, _) in flat.items()}
        self.state_dict = {fqn: value for fqn, (_, value) in flat.items()}
        self.metadata, self.is_coordinator = metadata, is_coordinator

    def _where(self):
        meta = self.metadata.storage_meta if self.metadata is not None else None
        return f" at {meta.checkpoint_id}" if meta is not None and meta.checkpoint_id is not None else ""

    def create_local_plan(self):
        items = []
        for fqn, value in self.state_dict.items():
            saved = self.metadata.state_dict_metadata.get(fqn)
            if saved is None:
                if self.allow_partial_load:
                    continue
                raise KeyError(f"load: {fqn!r} is not in the checkpoint{self._where()}")
            if isinstance(saved, BytesStorageMetadata):
                index = MetadataIndex(fqn)
                items.append(ReadItem(LoadItemType.BYTE_IO, index, Size((0,)), index, Size((0,)), Size((0,))))
            else:
                items.extend(self._tensor_reads(fqn, value, saved))
        self.plan = LoadPlan(items)
        return self.plan

    def _tensor_reads(self, fqn, value, saved):
        """The ReadItems filling what this rank holds of value from the saved chunks that overlap it."""
        if not _is_tensor(value):
            raise TypeError(f"load: {fqn!r} is a tensor in the checkpoint; the state dict holds a "
                            f"{type(value).__name__} there (give a tensor of its shape to load into)")
        if tuple(value.shape) != tuple(saved.size):
            raise ValueError(f"load: {fqn!r} has shape {tuple(saved.size)} in the checkpoint, {tuple(value.shape)} "
                             "in the state dict")
        if value.dtype != saved.properties.dtype:
            raise ValueError(f"load: {fqn!r} is {saved.properties.dtype.name} in the checkpoint, {value.dtype.name} "
                             "in the state dict")
        local, offsets, _ = _part(value)
        if not local.numel():
            return []
        reads, covered, dest = [], 0, MetadataIndex(fqn, offsets)
        for i, chunk in enumerate(saved.chunks):
            lo = [max(a, b) for a, b in zip(offsets, chunk.offsets)]
            hi = [min(a + n, b + m) for a, n, b, m in zip(offsets, local.shape, chunk.offsets, chunk.sizes)]
            if any(h <= l for l, h in zip(lo, hi)):
                continue
            covered += math.prod(h - l for l, h in zip(lo, hi))
            reads.append(ReadItem(LoadItemType.TENSOR, dest, Size(l - o for l, o in zip(lo, offsets)),
                                  MetadataIndex(fqn, chunk.offsets, i), Size(l - c for l, c in zip(lo, chunk.offsets)),
                                  Size(h - l for l, h in zip(lo, hi))))
        if covered != local.numel():
            raise ValueError(f"load: the checkpoint{self._where()} holds {covered} of the {local.numel()} elements "
                             f"of {fqn!r} this rank loads (is it complete?)")
        return reads

    def create_global_plan(self, global_plan):
        return global_plan

    def finish_plan(self, central_plan):
        self.plan = central_plan
        return central_plan

    def load_bytes(self, read_item, value):
        """Puts the one value its ddpc.save bytes hold at read_item's key: in the state dict at the key's path,
        a dict's key as its string (as PyTorch's planner puts it)."""
        fqn = read_item.dest_index.fqn
        try:
            self.state_dict[fqn] = _load_bytes(value, weights_only=True)
        except CheckpointError as e:
            raise ValueError(f"load: the bytes of {fqn!r} in the checkpoint are not ddpc.save's (did a planner of "
                             f"its own write them?): {e}") from e
        _replaced(self.original_state_dict, self.paths[fqn], self.state_dict[fqn])

    def resolve_tensor(self, read_item):
        """The region of the state dict's tensor (a DTensor's local part) that read_item fills: a view."""
        tensor = _part(self.state_dict[read_item.dest_index.fqn])[0]
        for dim, (start, length) in enumerate(zip(read_item.dest_offsets, read_item.lengths)):
            if start or length != tensor.shape[dim]:
                tensor = tensor.narrow(dim, start, length)
        return tensor.detach()

    def commit_tensor(self, read_item, tensor):
        """Nothing to do: resolve_tensor's views are the state dict's tensors."""

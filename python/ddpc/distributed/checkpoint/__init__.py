"""Distributed checkpoints, shaped like torch.distributed.checkpoint (DCP).

``save(state_dict, checkpoint_id=dir)`` writes one checkpoint from every rank
of a group into a directory; ``load(state_dict, checkpoint_id=dir)`` fills a
state dict in place from it, on any number of ranks::

    import ddpc.distributed.checkpoint as dcp
    state = {"model": model.state_dict(), "optim": optimizer.state_dict(), "epoch": epoch}
    dcp.save(state, checkpoint_id="ckpt/step100")
    ...
    state = {"model": model.state_dict(), "optim": optimizer.state_dict(), "epoch": 0}
    dcp.load(state, checkpoint_id="ckpt/step100")   # tensors copied into, other values replaced
    model.load_state_dict(state["model"]); optimizer.load_state_dict(state["optim"])

As PyTorch's: nested dicts and lists are flattened to dotted keys
("model.fc.weight", "optim.param_groups.0.lr"); a value with
``state_dict``/``load_state_dict`` (a Module, an optimizer: ``Stateful``) is
saved through its state dict and loaded back into it. A DTensor
(``ddpc.distributed.tensor``, the values of FSDP's SHARDED_STATE_DICT) is
saved shard by shard: each rank writes only its own part, and the metadata
records each part's offsets in the tensor and the tensor's global shape. A
tensor, or a part of one, that several ranks hold is taken to be replicated
and is written once, by the rank with the fewest bytes to write so far, so
the ranks share the writing; each rank writes its own file and rank 0 the
metadata last, so a directory with metadata is a complete checkpoint.
Loading reads only the keys the given state dict asks for, and for each
tensor only the rows of the saved parts that overlap what this rank holds:
the whole of a plain tensor, its own part of a DTensor, however the saved
tensor was split. So a checkpoint saved on N ranks loads on M, into
DTensors laid out for M ranks or into plain tensors (full values).
Without a process group (or with ``no_dist=True``) both run in one process.

Where ddpc differs: its files are its own (``__<rank>_0.distcp`` holds raw
tensor bytes, ``.metadata`` a ddpc checkpoint of their places and of the
non-tensor values, loaded with ``weights_only``); PyTorch's DCP directories
do not load here nor ddpc's there. Planners other than the default ones
(``default_planner.DefaultSavePlanner``, ``DefaultLoadPlanner``) are not
supported. ``save_state_dict`` and ``load_state_dict``, PyTorch's deprecated
forms, warn as PyTorch's do and call ``save`` and ``load``.
"""

import concurrent.futures
import math
import os
import threading
import warnings

import numpy as np

from ... import _C
from ...serialization import load as _load_file
from ...serialization import save as _save_file
from ...tensor import Tensor
from .. import all_gather_object, broadcast_object_list, get_rank, get_world_size, is_initialized
from ..tensor import DTensor, _local_shape_and_offset

from .default_planner import DefaultLoadPlanner, DefaultSavePlanner

__all__ = ["save", "load", "async_save", "FileSystemWriter", "FileSystemReader", "Stateful", "CheckpointException",
           "DefaultSavePlanner", "DefaultLoadPlanner", "save_state_dict", "load_state_dict"]

_METADATA = ".metadata"
_FORMAT = "ddpc-dcp"
_VERSION = 2  # 1: every tensor whole; 2: every tensor as parts (chunks) with their offsets
_ALIGN = 64


class CheckpointException(RuntimeError):
    """A save or load failed on one or more ranks; ``failures`` maps each such rank to its exception."""

    def __init__(self, msg, failures):
        super().__init__(msg)
        self.failures = failures


class Stateful:
    """What save/load call on a value that has a state dict of its own (any object with both methods is one)."""

    def state_dict(self):
        raise NotImplementedError

    def load_state_dict(self, state_dict):
        raise NotImplementedError


def _is_stateful(v):
    return callable(getattr(v, "state_dict", None)) and callable(getattr(v, "load_state_dict", None))


class FileSystemWriter:
    """Where ``save`` writes: a directory, made if missing. ``sync_files`` fsyncs each file before
    the metadata is written; ``overwrite=False`` refuses a directory that already holds a checkpoint."""

    def __init__(self, path, single_file_per_rank=True, sync_files=True, thread_count=1, per_thread_copy_ahead=10_000_000,
                 cache_staged_state_dict=False, overwrite=True):
        self.path, self.sync_files, self.overwrite = os.fspath(path), bool(sync_files), bool(overwrite)


class FileSystemReader:
    """Where ``load`` reads: a directory ``save`` wrote."""

    def __init__(self, path):
        self.path = os.fspath(path)


def _flatten(obj, prefix, out):
    if isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(obj, (list, tuple)) and prefix:
        for i, v in enumerate(obj):
            _flatten(v, f"{prefix}.{i}", out)
    else:
        out[prefix] = obj
    return out


def _flat_state(state_dict, what):
    """The dotted-key items of state_dict, Stateful values replaced by their state dicts (as dicts of their own)."""
    if not isinstance(state_dict, dict):
        raise TypeError(f"{what}: state_dict must be a dict, got {type(state_dict).__name__}")
    flat = {}
    for k, v in state_dict.items():
        _flatten(v.state_dict() if _is_stateful(v) else v, str(k), flat)
    return flat


def _path(checkpoint_id, storage, kind, what):
    if storage is not None:
        if not isinstance(storage, kind):
            raise TypeError(f"{what}: expected a {kind.__name__}, got {type(storage).__name__}")
        return storage.path, storage
    if checkpoint_id is None:
        raise ValueError(f"{what}: give checkpoint_id (a directory) or a {kind.__name__}")
    return os.fspath(checkpoint_id), kind(checkpoint_id)


class _Group:
    """The ranks taking part: a process group's, or this process alone."""

    def __init__(self, process_group, no_dist):
        self.alone = bool(no_dist) or not is_initialized()
        self.group = process_group
        self.rank = 0 if self.alone else get_rank(process_group)
        self.size = 1 if self.alone else get_world_size(process_group)

    def gather(self, obj):
        if self.alone:
            return [obj]
        out = [None] * self.size
        all_gather_object(out, obj, group=self.group)
        return out

    def from_rank0(self, obj):
        if self.alone:
            return obj
        box = [obj]
        broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    def run(self, fn, what):
        """fn() on every rank, and every rank's result; if it raises on any rank, every rank raises
        CheckpointException naming them, instead of the others waiting for it."""
        try:
            result, error = fn(), None
        except Exception as e:
            result, error = None, e
        outcomes = self.gather((result, None if error is None else f"{type(error).__name__}: {error}"))
        failures = {r: e for r, (_, e) in enumerate(outcomes) if e is not None}
        if failures:
            detail = "; ".join(f"rank {r}: {e}" for r, e in failures.items())
            raise CheckpointException(f"{what} failed on rank(s) {sorted(failures)}: {detail}", failures) from error
        return [r for r, _ in outcomes]


def _is_tensor(v):
    return isinstance(v, (Tensor, DTensor))


def _part(value):
    """(the tensor this rank holds, its offsets in the whole, the whole's shape) of a tensor value: a
    DTensor's local part, or a whole tensor."""
    if isinstance(value, DTensor):
        _, offsets = _local_shape_and_offset(tuple(value.shape), value.device_mesh, value.placements)
        return value.to_local(), offsets, tuple(value.shape)
    return value, (0,) * value.ndim, tuple(value.shape)


def _tensor_bytes(t):
    return t.numel() * t.dtype.itemsize


def _plan_writers(offers, size):
    """Which rank writes each part: offers[r] maps rank r's parts ((key, offsets)) to their bytes. A part
    several ranks offer is replicated: the rank among them with the fewest bytes so far takes it, largest
    parts first."""
    holders = {}
    for r, keys in enumerate(offers):
        for k, nbytes in keys.items():
            holders.setdefault(k, (nbytes, []))[1].append(r)
    load, writer = [0] * size, {}
    for k, (nbytes, ranks) in sorted(holders.items(), key=lambda item: (-item[1][0], item[0])):
        r = min(ranks, key=lambda r: (load[r], r))
        writer[k] = r
        load[r] += nbytes
    return writer


def _write_file(path, tensors, sync):
    """tensors (key -> Tensor) as raw bytes into path, atomically; returns key -> (offset, nbytes)."""
    places, offset, tmp = {}, 0, f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        for k, t in tensors.items():
            pad = (-offset) % _ALIGN
            f.write(b"\0" * pad)
            offset += pad
            nbytes = _tensor_bytes(t)
            if nbytes:
                f.write(memoryview(t.detach().cpu().contiguous()._buf).cast("B"))
            places[k] = (offset, nbytes)
            offset += nbytes
        if sync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    return places


def _save(flat, path, writer, group):
    parts = {k: _part(v) for k, v in flat.items() if _is_tensor(v)}
    plan = _plan_writers(group.gather({(k, offsets): _tensor_bytes(t) for k, (t, offsets, _) in parts.items()
                                       if t.numel()}), group.size)
    name = f"__{group.rank}_0.distcp"

    def write_own():
        """Writes this rank's share of the parts; returns key -> (dtype, shape, the parts it wrote:
        (offsets, sizes, file, file offset, bytes))."""
        os.makedirs(path, exist_ok=True)
        if not writer.overwrite and os.path.exists(os.path.join(path, _METADATA)):
            raise FileExistsError(f"{path} already holds a checkpoint and overwrite=False")
        mine = {k: t for k, (t, offsets, _) in parts.items() if plan.get((k, offsets)) == group.rank}
        places = _write_file(os.path.join(path, name), mine, writer.sync_files)
        return {k: (t.dtype.name, list(shape),
                    [(list(offsets), list(t.shape), name, *places[k])] if k in places else [])
                for k, (t, offsets, shape) in parts.items()}

    written = group.run(write_own, "distributed checkpoint save")
    objects = group.gather({k: v for k, v in flat.items() if not _is_tensor(v)})

    def write_metadata():
        if group.rank != 0:
            return
        items = {}
        for rank_objects in objects:
            for k, v in rank_objects.items():
                items.setdefault(k, ("object", v))
        for rank, rank_written in enumerate(written):
            for k, (dtype, shape, chunks) in rank_written.items():
                entry = items.get(k)
                if entry is None or entry[0] != "tensor":
                    entry = items[k] = ("tensor", dtype, shape, [])
                elif entry[1:3] != (dtype, shape):
                    raise ValueError(f"save: {k!r} is a {entry[1]} tensor of shape {tuple(entry[2])} on one rank, "
                                     f"{dtype} of shape {tuple(shape)} on rank {rank}")
                entry[3].extend(chunks)
        _save_file({"format": _FORMAT, "version": _VERSION, "items": items}, os.path.join(path, _METADATA))

    group.run(write_metadata, "distributed checkpoint save (metadata)")


def save(state_dict, *, checkpoint_id=None, storage_writer=None, planner=None, process_group=None, no_dist=False):
    """Saves state_dict from every rank of process_group into the directory checkpoint_id (or
    storage_writer's); every rank must call it. Returns None (PyTorch returns its metadata)."""
    if planner is not None and not isinstance(planner, DefaultSavePlanner):
        raise NotImplementedError("ddpc.distributed.checkpoint.save: planners are not supported")
    path, writer = _path(checkpoint_id, storage_writer, FileSystemWriter, "save")
    _save(_flat_state(state_dict, "save"), path, writer, _Group(process_group, no_dist))


def async_save(state_dict, *, checkpoint_id=None, storage_writer=None, planner=None, process_group=None,
               no_dist=False):
    """save() in a background thread, after the tensors are copied (so training may change them at once);
    returns a concurrent.futures.Future whose ``result()`` waits for the files and re-raises a failure. Collectives of the
    same group must not run while it is pending, as with PyTorch's default (same-group) async_save."""
    if planner is not None and not isinstance(planner, DefaultSavePlanner):
        raise NotImplementedError("ddpc.distributed.checkpoint.async_save: planners are not supported")
    path, writer = _path(checkpoint_id, storage_writer, FileSystemWriter, "async_save")
    flat = {k: v.detach().cpu().clone() if _is_tensor(v) else v
            for k, v in _flat_state(state_dict, "async_save").items()}
    group, future = _Group(process_group, no_dist), concurrent.futures.Future()

    def run():
        try:
            _save(flat, path, writer, group)
        except BaseException as e:
            future.set_exception(e)
        else:
            future.set_result(None)

    threading.Thread(target=run, name="ddpc-async-save", daemon=True).start()
    return future


def _read_metadata(path):
    meta_path = os.path.join(path, _METADATA)
    if not os.path.exists(meta_path):
        raise FileNotFoundError(f"{path} holds no distributed checkpoint (no {_METADATA} file)")
    meta = _load_file(meta_path)
    if not isinstance(meta, dict) or meta.get("format") != _FORMAT or not isinstance(meta.get("items"), dict):
        raise ValueError(f"{meta_path} is not a ddpc distributed checkpoint's metadata")
    if meta.get("version") not in (1, _VERSION):
        raise ValueError(f"{meta_path}: unsupported version {meta.get('version')!r} (this ddpc reads versions 1 "
                         f"and {_VERSION})")
    if meta["version"] == 1:  # each tensor whole: ("tensor", file, offset, bytes, dtype, shape)
        return {k: ("tensor", e[4], e[5], [([0] * len(e[5]), e[5], *e[1:4])]) if e[0] == "tensor" else e
                for k, e in meta["items"].items()}
    return meta["items"]


def _read_tensor(path, entry, key, into):
    """Fills what this rank holds of ``into`` (a tensor, or a DTensor's local part) from the saved parts
    that overlap it, reading of each only the rows (along dim 0) that overlap."""
    _, dtype, shape, chunks = entry
    if tuple(into.shape) != tuple(shape):
        raise ValueError(f"load: {key!r} has shape {tuple(shape)} in the checkpoint, {tuple(into.shape)} in the "
                         "state dict")
    if into.dtype.name != dtype:
        raise ValueError(f"load: {key!r} is {dtype} in the checkpoint, {into.dtype.name} in the state dict")
    local, offsets, _ = _part(into)
    if not local.numel():
        return
    sizes, itemsize = tuple(local.shape), local.element_size()
    # A contiguous host tensor is read into in place; any other goes through a host buffer and copy_.
    direct = local.device.type == "cpu" and local.is_contiguous()
    host = local if direct else Tensor(_C.Buffer(list(sizes), dtype))
    # The elements as bytes: a trailing axis of itemsize bytes makes the copies dtype-blind.
    target = np.frombuffer(memoryview(host._buf).cast("B"), np.uint8).reshape(*sizes, itemsize)
    covered = 0
    for chunk_offsets, chunk_sizes, file, file_offset, nbytes in chunks:
        lo = [max(a, b) for a, b in zip(offsets, chunk_offsets)]
        hi = [min(a + n, b + m) for a, n, b, m in zip(offsets, sizes, chunk_offsets, chunk_sizes)]
        if any(h <= l for l, h in zip(lo, hi)):
            continue
        covered += math.prod(h - l for l, h in zip(lo, hi))
        dest = target[tuple(slice(l - o, h - o) for l, h, o in zip(lo, hi, offsets))]
        # The overlapping rows of the part: contiguous in its file.
        first, rows = (lo[0] - chunk_offsets[0], hi[0] - lo[0]) if shape else (0, 1)
        row_bytes = math.prod(chunk_sizes[1:]) * itemsize
        read = (rows, *chunk_sizes[1:], itemsize) if shape else (itemsize,)
        whole_rows = dest.shape == read and dest.flags.c_contiguous
        buf = dest if whole_rows else np.empty(read, np.uint8)
        file_path = os.path.join(path, file)
        with open(file_path, "rb") as f:
            f.seek(file_offset + first * row_bytes)
            if f.readinto(memoryview(buf).cast("B")) != buf.nbytes:
                raise ValueError(f"load: {file_path} is shorter than its metadata says (truncated?)")
        if not whole_rows:
            dest[...] = buf[(slice(None),) + tuple(slice(l - b, h - b)
                                                   for l, h, b in zip(lo[1:], hi[1:], chunk_offsets[1:]))]
    if covered != local.numel():
        raise ValueError(f"load: the checkpoint at {path} holds {covered} of the {local.numel()} elements of "
                         f"{key!r} this rank loads (is it complete?)")
    if not direct:
        from ...autograd import no_grad

        with no_grad():
            local.copy_(host)


def _fill(obj, prefix, items, path):
    """obj with every value found under its dotted key in items: tensors copied into, the rest replaced."""
    if isinstance(obj, dict):
        for k in list(obj):
            obj[k] = _fill(obj[k], f"{prefix}.{k}" if prefix else str(k), items, path)
        return obj
    if isinstance(obj, (list, tuple)) and prefix:
        filled = [_fill(v, f"{prefix}.{i}", items, path) for i, v in enumerate(obj)]
        return filled if isinstance(obj, list) else type(obj)(filled)
    if prefix not in items:
        raise KeyError(f"load: {prefix!r} is not in the checkpoint at {path}")
    entry = items[prefix]
    if entry[0] == "object":
        return entry[1]
    if not _is_tensor(obj):
        raise TypeError(f"load: {prefix!r} is a tensor in the checkpoint; the state dict holds a "
                        f"{type(obj).__name__} there (give a tensor of its shape to load into)")
    _read_tensor(path, entry, prefix, obj)
    return obj


def load(state_dict, *, checkpoint_id=None, storage_reader=None, planner=None, process_group=None, no_dist=False):
    """Loads the checkpoint in the directory checkpoint_id (or storage_reader's) into state_dict in place:
    its tensors and DTensors are copied into (global shape and dtype must match; however the saved tensor
    was split, each rank reads what it holds), other values replaced, Stateful values
    given their state dict back with load_state_dict. Keys of the checkpoint state_dict does not ask for are
    left unread; a key it asks for that the checkpoint lacks raises KeyError."""
    if planner is not None and not isinstance(planner, DefaultLoadPlanner):
        raise NotImplementedError("ddpc.distributed.checkpoint.load: planners are not supported")
    if not isinstance(state_dict, dict):
        raise TypeError(f"load: state_dict must be a dict, got {type(state_dict).__name__}")
    path, _ = _path(checkpoint_id, storage_reader, FileSystemReader, "load")
    group = _Group(process_group, no_dist)

    def read():
        items = _read_metadata(path)
        for k, v in state_dict.items():
            if _is_stateful(v):
                v.load_state_dict(_fill(v.state_dict(), str(k), items, path))
            else:
                state_dict[k] = _fill(v, str(k), items, path)

    group.run(read, "distributed checkpoint load")



def _deprecated(name, instead):
    warnings.warn(f"ddpc.distributed.checkpoint.{name} is deprecated and will be removed in future versions. Please "
                  f"use ddpc.distributed.checkpoint.{instead} instead.", FutureWarning, stacklevel=3)


def save_state_dict(state_dict, storage_writer, process_group=None, coordinator_rank=0, no_dist=False, planner=None):
    """PyTorch's deprecated form of ``save(state_dict, storage_writer=...)``."""
    _deprecated("save_state_dict", "save")
    save(state_dict, storage_writer=storage_writer, planner=planner, process_group=process_group, no_dist=no_dist)


def load_state_dict(state_dict, storage_reader, process_group=None, coordinator_rank=0, no_dist=False, planner=None):
    """PyTorch's deprecated form of ``load(state_dict, storage_reader=...)``."""
    _deprecated("load_state_dict", "load")
    load(state_dict, storage_reader=storage_reader, planner=planner, process_group=process_group, no_dist=no_dist)

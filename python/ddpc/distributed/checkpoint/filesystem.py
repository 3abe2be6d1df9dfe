"""FileSystemWriter and FileSystemReader, at PyTorch's path
torch.distributed.checkpoint.filesystem: the StorageWriter and StorageReader
that keep a checkpoint in a directory.

Each rank writes ``__<rank>_0.distcp``: the raw bytes of the tensor parts its
plan gives it, each 64-byte aligned. The coordinator then writes
``.metadata`` (a ddpc.save file, loaded with weights_only)::

    {"format": "ddpc-dcp", "version": 2, "items": {key: entry},
     "planner_data": ...}   (only when the planner gave some)

where an entry is ``("tensor", dtype name, global shape, [(offsets, sizes,
file, file offset, bytes), ...])``, ``("object", value)`` for a value whose
bytes are ddpc.save's (what the default planner writes), or ``("bytes",
raw)`` for other bytes a planner wrote. Version 1 recorded every tensor
whole: ``("tensor", file, offset, bytes, dtype name, shape)``; it still loads.
"""

import io
import math
import os

import numpy as np

from ... import _C
from ..._dtype import get_dtype
from ...serialization import load as _load_file
from ...serialization import save as _save_file
from ...tensor import Size, Tensor
from .. import Future
from .metadata import (BytesStorageMetadata, ChunkStorageMetadata, Metadata, MetadataIndex, StorageMeta,
                       TensorProperties, TensorStorageMetadata)
from .planner import LoadItemType, WriteItemType
from .storage import StorageReader, StorageWriter, WriteResult

__all__ = ["FileSystemWriter", "FileSystemReader"]

_METADATA = ".metadata"
_FORMAT = "ddpc-dcp"
_VERSION = 2  # 1: every tensor whole; 2: every tensor as parts (chunks) with their offsets
_ALIGN = 64
_SAVE_MAGIC = b"DDPCCKPT"  # how a file (or bytes) of ddpc.save's begins


class FileSystemWriter(StorageWriter):
    """Where ``save`` writes: a directory, made if missing. ``sync_files`` fsyncs each file before
    the metadata is written; ``overwrite=False`` refuses a directory that already holds a checkpoint."""

    def __init__(self, path, single_file_per_rank=True, sync_files=True, thread_count=1, per_thread_copy_ahead=10_000_000,
                 cache_staged_state_dict=False, overwrite=True):
        self.path, self.sync_files, self.overwrite = os.fspath(path), bool(sync_files), bool(overwrite)

    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None:
            self.path = os.fspath(checkpoint_id)

    def set_up_storage_writer(self, is_coordinator, *args, rank=0, **kwargs):
        self.is_coordinator, self.rank = is_coordinator, rank

    def storage_meta(self):
        return StorageMeta(checkpoint_id=self.path)

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        """Names each rank's file in its plan's storage_data. Over an existing
        checkpoint, first removes its metadata, before any rank rewrites its
        data file: a save that dies part way leaves no checkpoint there, not
        the old metadata (and the old non-tensor values it holds) over new data."""
        if self.overwrite:
            try:
                os.unlink(os.path.join(self.path, _METADATA))
            except FileNotFoundError:
                pass
        return [type(plan)(plan.items, f"__{rank}_0.distcp", plan.planner_data, plan.usable)
                for rank, plan in enumerate(plans)]

    def write_data(self, plan, planner):
        """Writes the plan's tensor parts into this rank's file, atomically; values go to the metadata."""
        os.makedirs(self.path, exist_ok=True)
        if not self.overwrite and os.path.exists(os.path.join(self.path, _METADATA)):
            raise FileExistsError(f"{self.path} already holds a checkpoint and overwrite=False")
        name = plan.storage_data or f"__{self.rank}_0.distcp"
        path = os.path.join(self.path, name)
        results, offset, tmp = [], 0, f"{path}.tmp{os.getpid()}"
        with open(tmp, "wb") as f:
            for item in plan.items:
                data = planner.resolve_data(item)
                if item.type == WriteItemType.BYTE_IO:
                    raw = data.getvalue() if isinstance(data, io.BytesIO) else bytes(data)
                    entry = (("object", _load_file(io.BytesIO(raw), weights_only=False))
                             if raw.startswith(_SAVE_MAGIC) else ("bytes", raw))
                    results.append(WriteResult(item.index, len(raw), entry))
                    continue
                pad = (-offset) % _ALIGN
                f.write(b"\0" * pad)
                offset += pad
                nbytes = data.numel() * data.dtype.itemsize
                if nbytes:
                    f.write(memoryview(data.detach().cpu().contiguous()._buf).cast("B"))
                results.append(WriteResult(item.index, nbytes, (name, offset, nbytes)))
                offset += nbytes
            if self.sync_files:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
        return Future(value=results)

    def finish(self, metadata, results):
        """Writes .metadata: each key's entry, its parts where the ranks' results put them."""
        places = {result.index: result.storage_data for rank_results in results for result in rank_results}
        items = {}
        for fqn, saved in metadata.state_dict_metadata.items():
            if isinstance(saved, BytesStorageMetadata):
                items[fqn] = places[MetadataIndex(fqn)]
                continue
            items[fqn] = ("tensor", saved.properties.dtype.name, list(saved.size),
                          [(list(chunk.offsets), list(chunk.sizes), *places[MetadataIndex(fqn, chunk.offsets)])
                           for chunk in saved.chunks])
        meta = {"format": _FORMAT, "version": _VERSION, "items": items}
        if metadata.planner_data is not None:
            meta["planner_data"] = metadata.planner_data
        metadata.storage_data = places
        _save_file(meta, os.path.join(self.path, _METADATA))

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return isinstance(checkpoint_id, (str, os.PathLike))


class FileSystemReader(StorageReader):
    """Where ``load`` reads: a directory ``save`` wrote."""

    def __init__(self, path):
        self.path = os.fspath(path)

    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None:
            self.path = os.fspath(checkpoint_id)

    def read_metadata(self, *args, **kwargs):
        """The Metadata of .metadata; its storage_data maps each part (MetadataIndex) to (file, file offset,
        bytes, sizes, dtype) and each value to its entry."""
        meta_path = os.path.join(self.path, _METADATA)
        if not os.path.exists(meta_path):
            raise FileNotFoundError(f"{self.path} holds no distributed checkpoint (no {_METADATA} file)")
        meta = _load_file(meta_path)
        if not isinstance(meta, dict) or meta.get("format") != _FORMAT or not isinstance(meta.get("items"), dict):
            raise ValueError(f"{meta_path} is not a ddpc distributed checkpoint's metadata")
        if meta.get("version") not in (1, _VERSION):
            raise ValueError(f"{meta_path}: unsupported version {meta.get('version')!r} (this ddpc reads versions 1 "
                             f"and {_VERSION})")
        entries, places = {}, {}
        for fqn, entry in meta["items"].items():
            if entry[0] != "tensor":
                entries[fqn], places[MetadataIndex(fqn)] = BytesStorageMetadata(), entry
                continue
            if meta["version"] == 1:  # the tensor whole
                _, file, file_offset, nbytes, dtype_name, shape = entry
                entry = ("tensor", dtype_name, shape, [([0] * len(shape), shape, file, file_offset, nbytes)])
            _, dtype_name, shape, chunks = entry
            saved = TensorStorageMetadata(TensorProperties(dtype=get_dtype(dtype_name)), Size(shape), [])
            for i, (offsets, sizes, file, file_offset, nbytes) in enumerate(chunks):
                saved.chunks.append(ChunkStorageMetadata(Size(offsets), Size(sizes)))
                places[MetadataIndex(fqn, offsets, i)] = (file, file_offset, nbytes, tuple(sizes), dtype_name)
            entries[fqn] = saved
        return Metadata(state_dict_metadata=entries, planner_data=meta.get("planner_data"), storage_data=places,
                        storage_meta=StorageMeta(checkpoint_id=self.path))

    def set_up_storage_reader(self, metadata, is_coordinator, *args, **kwargs):
        self.places = metadata.storage_data

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def read_data(self, plan, planner):
        """Gives each value's bytes to planner.load_bytes and reads each tensor region into the tensor
        planner.resolve_tensor gives, reading of the saved part only the rows (along dim 0) it needs."""
        for item in plan.items:
            if item.type == LoadItemType.BYTE_IO:
                kind, value = self.places[item.storage_index]
                if kind == "object":
                    buf = io.BytesIO()
                    _save_file(value, buf)
                    buf.seek(0)
                else:
                    buf = io.BytesIO(value)
                planner.load_bytes(item, buf)
                continue
            target = planner.resolve_tensor(item)
            self._read_region(item, target)
            planner.commit_tensor(item, target)
        return Future(value=None)

    def _read_region(self, item, target):
        file, file_offset, _, chunk_sizes, dtype_name = self.places[item.storage_index]
        lengths, starts = tuple(item.lengths), tuple(item.storage_offsets)
        if tuple(target.shape) != lengths:
            raise ValueError(f"load: the tensor to read {item.dest_index.fqn!r} into has shape {tuple(target.shape)}, "
                             f"its region in the checkpoint {lengths}")
        itemsize = get_dtype(dtype_name).itemsize
        # A contiguous host tensor of the saved dtype is read into in place; any other goes through a host
        # buffer and copy_. The elements as bytes: a trailing axis of itemsize bytes makes the copies dtype-blind.
        direct = target.device.type == "cpu" and target.is_contiguous() and target.dtype.name == dtype_name
        host = target if direct else Tensor(_C.Buffer(list(lengths), dtype_name))
        if not math.prod(lengths):
            return
        dest = np.frombuffer(memoryview(host._buf).cast("B"), np.uint8).reshape(*lengths, itemsize)
        # The region's rows of the part: contiguous in its file.
        first, rows = (starts[0], lengths[0]) if chunk_sizes else (0, 1)
        row_bytes = math.prod(chunk_sizes[1:]) * itemsize
        read = (rows, *chunk_sizes[1:], itemsize) if chunk_sizes else (itemsize,)
        whole_rows = dest.shape == read
        buf = dest if whole_rows else np.empty(read, np.uint8)
        file_path = os.path.join(self.path, file)
        with open(file_path, "rb") as f:
            f.seek(file_offset + first * row_bytes)
            if f.readinto(memoryview(buf).cast("B")) != buf.nbytes:
                raise ValueError(f"load: {file_path} is shorter than its metadata says (truncated?)")
        if not whole_rows:
            dest[...] = buf[(slice(None),) + tuple(slice(s, s + n) for s, n in zip(starts[1:], lengths[1:]))]
        if not direct:
            from ...autograd import no_grad

            with no_grad():
                target.copy_(host)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return isinstance(checkpoint_id, (str, os.PathLike))

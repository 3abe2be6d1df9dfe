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

As PyTorch's: nested dicts, and lists that hold a tensor or a dict, are
flattened to dotted keys ("model.fc.weight", "optim.param_groups.0.lr"); any
other list, and every tuple, is one value ("sched.milestones",
"optim.param_groups.0.betas"). A key that is not a string is flattened to
its string ("optim.state.0.step" of the int key 0), and, as in PyTorch, a
non-tensor value under it loads back under that string: beside the entry
of the key itself (which keeps its value) in a nested dict, nowhere at the
top level (load replaces only the keys the state dict has); a tensor under
it is copied into as any other. (An optimizer's ``load_state_dict`` takes
a parameter's state from both keys.) Checkpoints ddpc saved before it
flattened so (every list and tuple element by element: "sched.milestones.0")
still load: as PyTorch does for its older layout, when the checkpoint has
keys the state dict's flattening lacks and flattening it the older way gives
some of them, it is flattened the older way. A value with
``state_dict``/``load_state_dict`` (a Module, an optimizer: ``Stateful``) is
saved through its state dict and loaded back into it. A DTensor
(``ddpc.distributed.tensor``, the values of FSDP's SHARDED_STATE_DICT) is
saved shard by shard: each rank writes only its own part, and the metadata
records each part's offsets in the tensor and the tensor's global shape. A
tensor, a part of one, or a non-tensor value that several ranks hold is
taken to be replicated and is written once, from the rank PyTorch picks:
going through them in the order the ranks' plans name them, the rank among
those holding it with the least to write so far (a tensor's bytes, 1 for a
value; the lowest rank of equals), so the ranks share the writing; a value
that differs between ranks is saved as that rank holds it. A value or tensor
only one rank holds is saved from it. A DTensor inside a value kept whole
(a tuple of DTensors) is part of that value: as in PyTorch, the value is
written as its writing rank holds it, and every rank loads that rank's local
tensors, on its own mesh (see ``ddpc.distributed.tensor``; loading it needs
the process group and the mesh's groups). Each rank writes its own file and rank
0 the metadata last, so a directory with metadata is a complete checkpoint.
Loading reads only the keys the given state dict asks for, and for each
tensor only the rows of the saved parts that overlap what this rank holds:
the whole of a plain tensor, its own part of a DTensor, however the saved
tensor was split. So a checkpoint saved on N ranks loads on M, into DTensors
laid out for M ranks or into plain tensors (full values). Without a process
group (or with ``no_dist=True``) both run in one process.

Storage and planning are PyTorch's protocol (``storage``, ``planner``,
``metadata``): ``save`` and ``load`` take any ``StorageWriter`` /
``StorageReader`` and any ``SavePlanner`` / ``LoadPlanner`` (a subclass of
``DefaultSavePlanner`` or ``DefaultLoadPlanner`` that changes one step, or
one's own) and call their methods in PyTorch's order, rank 0 of the group
the coordinator: as in PyTorch, every rank's local plan goes to the
coordinator alone, which makes the global plan and sends each rank back its
own plan, and every rank's write results go to it alone, which finishes
the checkpoint. ``FileSystemWriter`` and ``FileSystemReader`` are such
storage. A failure in any step on any rank is a ``CheckpointException`` on
every rank.

Where ddpc differs: its files are its own (``__<rank>_0.distcp`` holds raw
tensor bytes, ``.metadata`` a ddpc checkpoint of their places and of the
non-tensor values, loaded with ``weights_only``); PyTorch's DCP directories
do not load here nor ddpc's there. The bytes of a non-tensor value that a
planner's ``resolve_data`` gives and ``load_bytes`` takes are ddpc.save's,
not torch.save's. ``TensorProperties`` holds dtype,
requires_grad and pin_memory (no layout or memory_format).
``save_state_dict`` and ``load_state_dict``, PyTorch's deprecated forms,
warn as PyTorch's do and call ``save`` and ``load``.
"""

import concurrent.futures
import inspect
import threading
import warnings

from .. import (broadcast_object_list, gather_object, get_rank, get_world_size, is_initialized,
                scatter_object_list)
from .default_planner import DefaultLoadPlanner, DefaultSavePlanner, _is_tensor
from .filesystem import FileSystemReader, FileSystemWriter
from .metadata import (BytesStorageMetadata, ChunkStorageMetadata, Metadata, MetadataIndex, StorageMeta,
                       TensorProperties, TensorStorageMetadata)
from .planner import (LoadItemType, LoadPlan, LoadPlanner, ReadItem, SavePlan, SavePlanner, WriteItem,
                      WriteItemType)
from .storage import StorageReader, StorageWriter, WriteResult

__all__ = ["save", "load", "async_save", "FileSystemWriter", "FileSystemReader", "Stateful", "CheckpointException",
           "DefaultSavePlanner", "DefaultLoadPlanner", "save_state_dict", "load_state_dict", "StorageWriter",
           "StorageReader", "WriteResult", "SavePlanner", "LoadPlanner", "SavePlan", "LoadPlan", "WriteItem",
           "WriteItemType", "ReadItem", "LoadItemType", "Metadata", "MetadataIndex", "ChunkStorageMetadata",
           "TensorStorageMetadata", "BytesStorageMetadata", "TensorProperties", "StorageMeta"]


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


def _state_of(state_dict, what):
    """state_dict with each Stateful value replaced by its state dict."""
    if not isinstance(state_dict, dict):
        raise TypeError(f"{what}: state_dict must be a dict, got {type(state_dict).__name__}")
    return {k: v.state_dict() if _is_stateful(v) else v for k, v in state_dict.items()}


def _storage(checkpoint_id, storage, kind, default, what, argument):
    """The storage to use: the one given (reset to checkpoint_id when there is one), or default(checkpoint_id)."""
    if storage is None:
        if checkpoint_id is None:
            raise ValueError(f"{what}: give checkpoint_id (a directory) or a {argument}")
        return default(checkpoint_id)
    if not isinstance(storage, kind):
        raise TypeError(f"{what}: {argument} must be a {kind.__name__} (of "
                        f"ddpc.distributed.checkpoint.storage), got {type(storage).__name__}")
    if checkpoint_id is not None:
        storage.reset(checkpoint_id)
    return storage


def _planner(planner, kind, default, what):
    if planner is None:
        return default()
    if not isinstance(planner, kind):
        raise TypeError(f"{what}: planner must be a {kind.__name__} (of ddpc.distributed.checkpoint.planner), got "
                        f"{type(planner).__name__}")
    return planner


def _with_rank(method, *args, rank):
    """method(*args), with rank=rank when it takes one (as PyTorch passes it)."""
    params = inspect.signature(method).parameters
    if "rank" in params or any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return method(*args, rank=rank)
    return method(*args)


def _result(future):
    """The value of what write_data or read_data returned: a future with wait(), a concurrent one, or it."""
    if isinstance(future, concurrent.futures.Future):
        return future.result()
    if callable(getattr(future, "wait", None)):
        return future.wait()
    return future


class _Group:
    """The ranks taking part: a process group's, or this process alone. Rank 0 of it coordinates."""

    def __init__(self, process_group, no_dist):
        self.alone = bool(no_dist) or not is_initialized()
        self.group = process_group
        self.rank = 0 if self.alone else get_rank(process_group)
        self.size = 1 if self.alone else get_world_size(process_group)

    def _gather(self, obj):
        """Every rank's obj, in rank order, on the coordinator; None on the others."""
        if self.alone:
            return [obj]
        out = [None] * self.size if self.rank == 0 else None
        gather_object(obj, out, group=self.group, group_dst=0)
        return out

    def _reply(self, reply, per_rank):
        """The coordinator's reply on every rank: its reply[rank] when per_rank (a scatter), else all of it."""
        if self.alone:
            return reply[0] if per_rank else reply
        box = [reply]
        if per_rank:
            scatter_object_list(box, reply, group=self.group, group_src=0)
        else:
            broadcast_object_list(box, group=self.group, group_src=0)
        return box[0]

    @staticmethod
    def _outcome(fn):
        try:
            return fn(), None, None
        except Exception as e:
            return None, f"{type(e).__name__}: {e}", e

    @staticmethod
    def _failed(what, failures, error):
        detail = "; ".join(f"rank {r}: {e}" for r, e in failures.items())
        raise CheckpointException(f"{what} failed on rank(s) {sorted(failures)}: {detail}", failures) from error

    def step(self, local, what, coordinate, coordinate_what, per_rank):
        """PyTorch's reduce_scatter (per_rank) and all_reduce: local() on every rank, the results gathered to
        the coordinator alone, coordinate(them) there, and what that returns back to every rank: each rank its
        own entry of it when per_rank, else all of it. If local raises on any rank, or coordinate on the
        coordinator, every rank raises CheckpointException naming them (and the step: what or coordinate_what)
        instead of the others waiting for it."""
        result, message, error = self._outcome(local)
        gathered = self._gather((result, message))
        reply = None
        if self.rank == 0:
            failures = {r: m for r, (_, m) in enumerate(gathered) if m is not None}
            failed = (what, failures) if failures else None
            if not failed:
                def coordinated():
                    out = coordinate([r for r, _ in gathered])
                    if per_rank and len(out) != self.size:
                        raise ValueError(f"the global plan holds {len(out)} plans for {self.size} ranks")
                    return out

                result, message, error = self._outcome(coordinated)
                failed = (coordinate_what, {0: message}) if message is not None else None
            if failed:
                reply = [(None, failed)] * self.size if per_rank else (None, failed)
            else:
                reply = [(r, None) for r in result] if per_rank else (result, None)
        result, failed = self._reply(reply, per_rank)
        if failed:
            self._failed(*failed, error)
        return result


def _save(state_dict, writer, planner, group):
    """PyTorch's order: set up and plan locally on every rank, the global plan and metadata on rank 0 (each
    rank given back its own plan), every rank writes its plan, rank 0 finishes the checkpoint with every
    rank's results. Returns the Metadata."""
    coordinator, metadata = group.rank == 0, None

    def local_plan():
        planner.set_up_planner(state_dict, storage_meta=writer.storage_meta(), is_coordinator=coordinator)
        _with_rank(writer.set_up_storage_writer, coordinator, rank=group.rank)
        return writer.prepare_local_plan(planner.create_local_plan())

    def global_plan(plans):
        nonlocal metadata
        plans, metadata = planner.create_global_plan(plans)
        return writer.prepare_global_plan(plans)

    def finish(results):
        writer.finish(metadata=metadata, results=results)
        return metadata

    plan = group.step(local_plan, "distributed checkpoint save (planning)", global_plan,
                      "distributed checkpoint save (global plan)", per_rank=True)
    return group.step(lambda: _result(writer.write_data(planner.finish_plan(plan), planner)),
                      "distributed checkpoint save", finish, "distributed checkpoint save (metadata)", per_rank=False)


def save(state_dict, *, checkpoint_id=None, storage_writer=None, planner=None, process_group=None, no_dist=False):
    """Saves state_dict from every rank of process_group into the directory checkpoint_id, or through
    storage_writer (any StorageWriter; reset to checkpoint_id when both are given), as planner (any
    SavePlanner; DefaultSavePlanner when None) plans; every rank must call it. Returns the Metadata."""
    writer = _storage(checkpoint_id, storage_writer, StorageWriter, FileSystemWriter, "save", "storage_writer")
    planner = _planner(planner, SavePlanner, DefaultSavePlanner, "save")
    return _save(_state_of(state_dict, "save"), writer, planner, _Group(process_group, no_dist))


def _staged(obj):
    """obj with its dicts, lists and tuples copied and its tensors copied to the host."""
    if isinstance(obj, dict):
        return {k: _staged(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_staged(v) for v in obj)
    return obj.detach().cpu().clone() if _is_tensor(obj) else obj


def async_save(state_dict, *, checkpoint_id=None, storage_writer=None, planner=None, process_group=None,
               no_dist=False):
    """save() in a background thread, after the tensors are copied (so training may change them at once);
    returns a concurrent.futures.Future whose ``result()`` waits for the files and returns the Metadata or
    re-raises a failure. Collectives of the same group must not run while it is pending, as with PyTorch's
    default (same-group) async_save."""
    writer = _storage(checkpoint_id, storage_writer, StorageWriter, FileSystemWriter, "async_save",
                      "storage_writer")
    planner = _planner(planner, SavePlanner, DefaultSavePlanner, "async_save")
    staged = _staged(_state_of(state_dict, "async_save"))
    group, future = _Group(process_group, no_dist), concurrent.futures.Future()

    def run():
        try:
            metadata = _save(staged, writer, planner, group)
        except BaseException as e:
            future.set_exception(e)
        else:
            future.set_result(metadata)

    threading.Thread(target=run, name="ddpc-async-save", daemon=True).start()
    return future


def _load(state_dict, reader, planner, group):
    """PyTorch's order: metadata, set up and plan locally on every rank, the global plan on rank 0 (each rank
    given back its own plan), every rank reads its plan."""
    coordinator = group.rank == 0

    def local_plan():
        metadata = reader.read_metadata()
        planner.set_up_planner(state_dict, metadata, coordinator)
        _with_rank(reader.set_up_storage_reader, metadata, coordinator, rank=group.rank)
        return reader.prepare_local_plan(planner.create_local_plan())

    plan = group.step(local_plan, "distributed checkpoint load",
                      lambda plans: reader.prepare_global_plan(planner.create_global_plan(plans)),
                      "distributed checkpoint load (global plan)", per_rank=True)
    group.step(lambda: _result(reader.read_data(planner.finish_plan(plan), planner)), "distributed checkpoint load",
               lambda results: None, None, per_rank=False)


def load(state_dict, *, checkpoint_id=None, storage_reader=None, planner=None, process_group=None, no_dist=False):
    """Loads the checkpoint in the directory checkpoint_id, or through storage_reader (any StorageReader),
    into state_dict in place, as planner (any LoadPlanner; DefaultLoadPlanner when None) plans. By default
    its tensors and DTensors are copied into (global shape and dtype must match; however the saved tensor
    was split, each rank reads what it holds), other values replaced, Stateful values given their state
    dict back with load_state_dict. Keys of the checkpoint state_dict does not ask for are left unread; a
    key it asks for that the checkpoint lacks raises KeyError (unless DefaultLoadPlanner(allow_partial_load=True))."""
    reader = _storage(checkpoint_id, storage_reader, StorageReader, FileSystemReader, "load", "storage_reader")
    planner = _planner(planner, LoadPlanner, DefaultLoadPlanner, "load")
    state = _state_of(state_dict, "load")
    _load(state, reader, planner, _Group(process_group, no_dist))
    for k, v in state_dict.items():
        if _is_stateful(v):
            v.load_state_dict(state[k])
        else:
            state_dict[k] = state[k]


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

"""The planner protocol, at PyTorch's path torch.distributed.checkpoint.planner.

``save`` runs a ``SavePlanner`` as PyTorch does: ``set_up_planner`` on every
rank, ``create_local_plan`` (a ``SavePlan`` of ``WriteItem``s) on every
rank, ``create_global_plan`` on the coordinator (rank 0) over all ranks'
plans (returning them, changed as it likes, and the checkpoint's
``Metadata``), ``finish_plan`` with the rank's own plan back, then
``resolve_data`` for each item as the storage writer writes it: a tensor, or
an ``io.BytesIO`` of a non-tensor value.

``load`` runs a ``LoadPlanner``: ``set_up_planner`` with the checkpoint's
metadata, ``create_local_plan`` (``ReadItem``s: which region of which saved
chunk goes where in which destination), ``create_global_plan`` on the
coordinator, ``finish_plan``, then, as the storage reader reads,
``load_bytes`` for each value and ``resolve_tensor`` (the tensor to read
into) and ``commit_tensor`` (it holds the data now) for each tensor region.
"""

import abc
from dataclasses import dataclass
from enum import Enum, auto
from typing import Any, Optional

from ...tensor import Size
from .metadata import ChunkStorageMetadata, Metadata, MetadataIndex, TensorProperties

__all__ = ["WriteItemType", "LoadItemType", "BytesIOWriteData", "TensorWriteData", "WriteItem", "ReadItem",
           "SavePlan", "LoadPlan", "SavePlanner", "LoadPlanner", "Metadata"]


class WriteItemType(Enum):
    TENSOR = auto()   # a whole tensor
    SHARD = auto()    # a DTensor's part
    BYTE_IO = auto()  # a non-tensor value


class LoadItemType(Enum):
    TENSOR = auto()
    BYTE_IO = auto()


@dataclass(frozen=True)
class BytesIOWriteData:
    nbytes: int


@dataclass(frozen=True)
class TensorWriteData:
    """The chunk a WriteItem writes, the tensor's properties and its global size."""

    chunk: ChunkStorageMetadata
    properties: TensorProperties
    size: Size


@dataclass(frozen=True)
class WriteItem:
    """One thing a rank writes: a tensor's chunk (tensor_data) or a value (BYTE_IO)."""

    index: MetadataIndex
    type: WriteItemType
    bytes_io_data: Optional[BytesIOWriteData] = None
    tensor_data: Optional[TensorWriteData] = None

    def tensor_storage_size(self):
        """The chunk's bytes, or None for a value."""
        if self.tensor_data is None:
            return None
        numel = 1
        for n in self.tensor_data.chunk.sizes:
            numel *= n
        return numel * self.tensor_data.properties.dtype.itemsize


@dataclass(frozen=True)
class ReadItem:
    """lengths elements, from storage_offsets in the saved chunk storage_index, into dest_offsets of the
    destination dest_index (offsets relative to each chunk's start); or a value (BYTE_IO)."""

    type: LoadItemType
    dest_index: MetadataIndex
    dest_offsets: Size
    storage_index: MetadataIndex
    storage_offsets: Size
    lengths: Size


@dataclass(frozen=True)
class SavePlan:
    items: list
    storage_data: Any = None
    planner_data: Any = None
    usable: bool = True


@dataclass
class LoadPlan:
    items: list
    storage_data: Any = None
    planner_data: Any = None


class SavePlanner(abc.ABC):
    """How ``save`` turns a state dict into WriteItems and data (see the module's docstring for the
    order of the calls)."""

    @abc.abstractmethod
    def set_up_planner(self, state_dict, storage_meta=None, is_coordinator=False):
        """Takes the state dict to save (Stateful values already replaced by their state dicts)."""

    @abc.abstractmethod
    def create_local_plan(self):
        """This rank's SavePlan."""

    @abc.abstractmethod
    def create_global_plan(self, all_plans):
        """On the coordinator: (every rank's plan, in rank order, as it will run, Metadata)."""

    @abc.abstractmethod
    def finish_plan(self, new_plan):
        """This rank's plan as create_global_plan left it; returns the plan to write."""

    @abc.abstractmethod
    def resolve_data(self, write_item):
        """The tensor (its chunk) or io.BytesIO a WriteItem writes."""


class LoadPlanner(abc.ABC):
    """How ``load`` turns a checkpoint's metadata into ReadItems and puts what they read into the
    state dict (see the module's docstring for the order of the calls)."""

    @abc.abstractmethod
    def set_up_planner(self, state_dict, metadata=None, is_coordinator=False):
        """Takes the state dict to load into (Stateful values replaced by their state dicts)."""

    @abc.abstractmethod
    def create_local_plan(self):
        """This rank's LoadPlan."""

    @abc.abstractmethod
    def create_global_plan(self, global_plan):
        """On the coordinator: every rank's plan, in rank order, as it will run."""

    @abc.abstractmethod
    def finish_plan(self, central_plan):
        """This rank's plan as create_global_plan left it; returns the plan to read."""

    @abc.abstractmethod
    def load_bytes(self, read_item, value):
        """Takes a value's io.BytesIO (what resolve_data gave at save)."""

    def resolve_bytes(self, read_item):
        """The io.BytesIO a storage reader may read a value's bytes into (then load_bytes takes it)."""
        raise NotImplementedError(f"{type(self).__name__}.resolve_bytes")

    @abc.abstractmethod
    def resolve_tensor(self, read_item):
        """The tensor of read_item's lengths that its data is copied into."""

    @abc.abstractmethod
    def commit_tensor(self, read_item, tensor):
        """Called once the tensor resolve_tensor gave holds read_item's data."""

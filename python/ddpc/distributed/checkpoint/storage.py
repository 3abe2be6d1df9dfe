"""The storage protocol, at PyTorch's path torch.distributed.checkpoint.storage.

``save`` calls a ``StorageWriter`` as PyTorch does: ``reset(checkpoint_id)``
when the call gives a checkpoint_id, ``set_up_storage_writer`` and
``prepare_local_plan`` on every rank, ``prepare_global_plan`` on the
coordinator (rank 0), ``write_data`` on every rank (a future of its
``WriteResult``s), and ``finish`` on the coordinator with the metadata and
every rank's results. ``load`` calls a ``StorageReader``: ``reset`` (as
``save``),
``read_metadata``, ``set_up_storage_reader`` and ``prepare_local_plan`` on
every rank, ``prepare_global_plan`` on the coordinator, then ``read_data``
(a future) on every rank.

A future here is anything with ``wait()`` (``ddpc.distributed.Future``, as
``torch.futures.Future``), a ``concurrent.futures.Future``, or the value
itself.
"""

import abc
from dataclasses import dataclass
from typing import Any

from .metadata import MetadataIndex

__all__ = ["WriteResult", "StorageWriter", "StorageReader"]


@dataclass(frozen=True)
class WriteResult:
    """Where write_data put one WriteItem: its index, bytes and the storage's own record."""

    index: MetadataIndex
    size_in_bytes: int
    storage_data: Any


class StorageWriter(abc.ABC):
    """Where ``save`` writes (see the module's docstring for the order of the calls)."""

    @abc.abstractmethod
    def reset(self, checkpoint_id=None):
        """Starts a new checkpoint, at checkpoint_id when given."""

    @abc.abstractmethod
    def set_up_storage_writer(self, is_coordinator, *args, **kwargs):
        """Called on every rank before planning; kwargs give ``rank``."""

    @abc.abstractmethod
    def prepare_local_plan(self, plan):
        """This rank's SavePlan, with what the storage needs added (storage_data)."""

    @abc.abstractmethod
    def prepare_global_plan(self, plans):
        """On the coordinator: every rank's plan, with what the storage needs added."""

    @abc.abstractmethod
    def write_data(self, plan, planner):
        """Writes the plan's items (their data from planner.resolve_data); a future of the WriteResults."""

    @abc.abstractmethod
    def finish(self, metadata, results):
        """On the coordinator, once every rank has written: records metadata; results[r] are rank r's."""

    @classmethod
    @abc.abstractmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        """Whether checkpoint_id names a checkpoint this storage can write."""

    def storage_meta(self):
        """What the planner is told of the checkpoint (a StorageMeta), or None."""
        return None


class StorageReader(abc.ABC):
    """Where ``load`` reads (see the module's docstring for the order of the calls)."""

    @abc.abstractmethod
    def reset(self, checkpoint_id=None):
        """Starts reading a checkpoint, at checkpoint_id when given."""

    @abc.abstractmethod
    def read_metadata(self, *args, **kwargs):
        """The checkpoint's Metadata."""

    @abc.abstractmethod
    def set_up_storage_reader(self, metadata, is_coordinator, *args, **kwargs):
        """Called on every rank with the metadata before planning; kwargs give ``rank``."""

    @abc.abstractmethod
    def prepare_local_plan(self, plan):
        """This rank's LoadPlan, with what the storage needs added."""

    @abc.abstractmethod
    def prepare_global_plan(self, plans):
        """On the coordinator: every rank's plan, with what the storage needs added."""

    @abc.abstractmethod
    def read_data(self, plan, planner):
        """Reads the plan's items, giving values to planner.load_bytes and tensor regions to the tensors
        planner.resolve_tensor gives (then planner.commit_tensor); a future that is done once they are."""

    @classmethod
    @abc.abstractmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        """Whether checkpoint_id names a checkpoint this storage can read."""

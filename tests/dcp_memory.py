"""A user's in-memory StorageWriter and StorageReader for the distributed checkpoint tests, written once
against either library's distributed.checkpoint: ddpc's, or PyTorch's in the comparisons."""

import dataclasses
import io
from importlib import import_module

import numpy as np


def memory_storage(lib, make_future):
    """(MemoryWriter, MemoryReader) of lib's (ddpc's or torch's) storage protocol; make_future(value) is
    what their write_data and read_data return."""
    planner = import_module(f"{lib.__name__}.distributed.checkpoint.planner")
    storage = import_module(f"{lib.__name__}.distributed.checkpoint.storage")

    class MemoryWriter(storage.StorageWriter):
        """Keeps the checkpoint in `store`: "metadata", "id" (the checkpoint_id), and "data", each item's
        (the storage_data prepare_global_plan gave its rank's plan, a numpy copy of a tensor's part or a
        value's bytes) under its MetadataIndex. `log` records the calls."""

        def __init__(self, store, log=None):
            self.store, self.log, self.checkpoint_id = store, log if log is not None else [], None

        def reset(self, checkpoint_id=None):
            self.log.append("reset")
            self.checkpoint_id = checkpoint_id

        def set_up_storage_writer(self, is_coordinator, *args, **kwargs):
            self.log.append("set_up_storage_writer")
            self.is_coordinator, self.rank = is_coordinator, kwargs["rank"]

        def prepare_local_plan(self, plan):
            self.log.append("prepare_local_plan")
            return plan

        def prepare_global_plan(self, plans):
            self.log.append("prepare_global_plan")
            return [dataclasses.replace(plan, storage_data=f"rank {r}") for r, plan in enumerate(plans)]

        def write_data(self, plan, planner_):
            self.log.append("write_data")
            results = []
            for item in plan.items:
                data = planner_.resolve_data(item)
                if item.type == planner.WriteItemType.BYTE_IO:
                    stored = data.getvalue()
                    nbytes = len(stored)
                else:
                    stored = np.array(data.detach().numpy())
                    nbytes = stored.nbytes
                results.append(storage.WriteResult(item.index, nbytes, (plan.storage_data, stored)))
            return make_future(results)

        def finish(self, metadata, results):
            self.log.append("finish")
            self.store["metadata"] = metadata
            self.store["data"] = {r.index: r.storage_data for rank_results in results for r in rank_results}
            self.store["id"] = self.checkpoint_id

        @classmethod
        def validate_checkpoint_id(cls, checkpoint_id):
            return True

    class MemoryReader(storage.StorageReader):
        """Reads what a MemoryWriter kept in `store`. `log` records the calls."""

        def __init__(self, store, log=None):
            self.store, self.log = store, log if log is not None else []

        def reset(self, checkpoint_id=None):
            self.log.append("reset")

        def read_metadata(self, *args, **kwargs):
            self.log.append("read_metadata")
            return self.store["metadata"]

        def set_up_storage_reader(self, metadata, is_coordinator, *args, **kwargs):
            self.log.append("set_up_storage_reader")

        def prepare_local_plan(self, plan):
            self.log.append("prepare_local_plan")
            return plan

        def prepare_global_plan(self, plans):
            self.log.append("prepare_global_plan")
            return plans

        def read_data(self, plan, planner_):
            self.log.append("read_data")
            for item in plan.items:
                _, stored = self.store["data"][item.storage_index]
                if item.type == planner.LoadItemType.BYTE_IO:
                    planner_.load_bytes(item, io.BytesIO(stored))
                    continue
                region = stored[tuple(slice(o, o + n) for o, n in zip(item.storage_offsets, item.lengths))]
                target = planner_.resolve_tensor(item)
                target.copy_(lib.from_numpy(np.ascontiguousarray(region)))
                planner_.commit_tensor(item, target)
            return make_future(None)

        @classmethod
        def validate_checkpoint_id(cls, checkpoint_id):
            return True

    return MemoryWriter, MemoryReader

"""ddpc.distributed.checkpoint's storage and planner protocol (PyTorch's): a user's in-memory
StorageWriter/StorageReader, the order save and load call the steps in, planners that change a step,
DefaultLoadPlanner(allow_partial_load=True), the default planners with flatten_state_dict=False,
DTensors over 2 ranks through the user's storage, what goes to and from the coordinator on 3 ranks
(and on a group without rank 0), and the errors for storage and planners of the wrong type."""

import concurrent.futures
import dataclasses
import io
import os

import numpy as np
import pytest
from dcp_memory import memory_storage

import ddpc
import ddpc.distributed.checkpoint as dcp
from ddpc.distributed.checkpoint.default_planner import DefaultLoadPlanner, DefaultSavePlanner
from ddpc.distributed.checkpoint.metadata import BytesStorageMetadata, Metadata, TensorStorageMetadata
from ddpc.distributed.checkpoint.planner import LoadItemType, SavePlanner, WriteItemType
from ddpc.distributed.checkpoint.storage import StorageReader, StorageWriter


def _done(value):
    """What the user's storage returns from write_data and read_data: a concurrent.futures.Future."""
    future = concurrent.futures.Future()
    future.set_result(value)
    return future


MemoryWriter, MemoryReader = memory_storage(ddpc, _done)


def _logged(cls, log):
    """A subclass of planner class cls that appends each protocol call's name to log."""
    names = ["set_up_planner", "create_local_plan", "create_global_plan", "finish_plan", "resolve_data",
             "load_bytes", "resolve_tensor", "commit_tensor"]

    def wrap(name):
        def method(self, *args, **kwargs):
            log.append(name)
            return getattr(super(sub, self), name)(*args, **kwargs)
        return method

    sub = type(f"Logged{cls.__name__}", (cls,), {n: wrap(n) for n in names if hasattr(cls, n)})
    return sub


def _state():
    return {"model": {"w": ddpc.arange(6.0).reshape(2, 3), "b": ddpc.tensor([1.5, -2.0])},
            "optim": {"param_groups": [{"lr": 0.1, "betas": (0.9, 0.99)}], "step": 3},
            "epoch": 7, "name": "run"}


def _empty():
    return {"model": {"w": ddpc.zeros(2, 3), "b": ddpc.zeros(2)},
            "optim": {"param_groups": [{"lr": 0.0, "betas": (0.0, 0.0)}], "step": 0}, "epoch": 0, "name": ""}


def _check_loaded(state):
    assert state["model"]["w"].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert state["model"]["b"].tolist() == [1.5, -2.0]
    assert state["optim"] == {"param_groups": [{"lr": 0.1, "betas": (0.9, 0.99)}], "step": 3}
    assert state["epoch"] == 7 and state["name"] == "run"


def test_user_storage_round_trips_and_the_steps_run_in_pytorchs_order():
    store, log = {}, []
    metadata = dcp.save(_state(), checkpoint_id="mem://a", storage_writer=MemoryWriter(store, log),
                        planner=_logged(DefaultSavePlanner, log)())
    assert log == ["reset", "set_up_planner", "set_up_storage_writer", "create_local_plan", "prepare_local_plan",
                   "create_global_plan", "prepare_global_plan", "finish_plan", "write_data", *["resolve_data"] * 7,
                   "finish"]
    assert store["id"] == "mem://a" and metadata is store["metadata"] and isinstance(metadata, Metadata)
    md = metadata.state_dict_metadata
    assert isinstance(md["model.w"], TensorStorageMetadata) and tuple(md["model.w"].size) == (2, 3)
    assert md["model.w"].properties.dtype == ddpc.float32
    assert [(tuple(c.offsets), tuple(c.sizes)) for c in md["model.w"].chunks] == [((0, 0), (2, 3))]
    assert isinstance(md["optim.param_groups.0.betas"], BytesStorageMetadata)  # a tuple is one value, as in PyTorch
    assert {k for k, v in md.items() if isinstance(v, BytesStorageMetadata)} == {
        "optim.param_groups.0.lr", "optim.param_groups.0.betas", "optim.step", "epoch", "name"}
    assert {s for s, _ in store["data"].values()} == {"rank 0"}  # prepare_global_plan's storage_data reached write_data

    log.clear()
    state = _empty()
    dcp.load(state, storage_reader=MemoryReader(store, log), planner=_logged(DefaultLoadPlanner, log)())
    _check_loaded(state)
    assert log[:8] == ["read_metadata", "set_up_planner", "set_up_storage_reader", "create_local_plan",
                       "prepare_local_plan", "create_global_plan", "prepare_global_plan", "finish_plan"]
    assert log[8] == "read_data"  # no checkpoint_id given: no reset
    assert sorted(log[9:]) == sorted(["load_bytes"] * 5 + ["resolve_tensor", "commit_tensor"] * 2)
    assert log.index("resolve_tensor") < log.index("commit_tensor")

    # the default planners with the user's storage, and the user's storage's checkpoint into the file system
    store2 = {}
    dcp.save(_state(), storage_writer=MemoryWriter(store2))
    state = _empty()
    dcp.load(state, storage_reader=MemoryReader(store2))
    _check_loaded(state)


def test_file_system_storage_through_the_protocol(tmp_path):
    # FileSystemWriter/Reader are StorageWriter/Reader; subclassing one to change a step takes effect
    class CountingReader(dcp.FileSystemReader):
        def read_data(self, plan, planner):
            self.items = len(plan.items)
            return super().read_data(plan, planner)

    assert issubclass(dcp.FileSystemWriter, StorageWriter) and issubclass(dcp.FileSystemReader, StorageReader)
    metadata = dcp.save(_state(), checkpoint_id=tmp_path)
    assert sorted(os.listdir(tmp_path)) == [".metadata", "__0_0.distcp"]
    assert tuple(metadata.state_dict_metadata["model.w"].size) == (2, 3)
    reader = CountingReader(tmp_path / "elsewhere")
    state = _empty()
    dcp.load(state, checkpoint_id=tmp_path, storage_reader=reader)  # reset to checkpoint_id
    _check_loaded(state)
    assert reader.items == 7
    read = dcp.FileSystemReader(tmp_path).read_metadata()
    assert read.state_dict_metadata.keys() == metadata.state_dict_metadata.keys()
    assert read.storage_meta.checkpoint_id == os.fspath(tmp_path)


class DoublingSavePlanner(DefaultSavePlanner):
    """Saves tensors doubled, and records its own data in the metadata."""

    def resolve_data(self, write_item):
        data = super().resolve_data(write_item)
        return data * 2 if write_item.type != WriteItemType.BYTE_IO else data

    def create_global_plan(self, all_plans):
        plans, metadata = super().create_global_plan(all_plans)
        return plans, dataclasses.replace(metadata, planner_data={"scale": 2})


class HalvingLoadPlanner(DefaultLoadPlanner):
    """Reads tensors into fresh buffers and commits them halved; adds 1 to integer values."""

    def resolve_tensor(self, read_item):
        return ddpc.zeros(*read_item.lengths)

    def commit_tensor(self, read_item, tensor):
        super().resolve_tensor(read_item).copy_(tensor / self.metadata.planner_data["scale"])

    def load_bytes(self, read_item, value):
        loaded = ddpc.load(value)
        if isinstance(loaded, int) and not isinstance(loaded, bool):
            out = io.BytesIO()
            ddpc.save(loaded + 1, out)
            out.seek(0)
            value = out
        else:
            value.seek(0)
        super().load_bytes(read_item, value)


@pytest.mark.parametrize("storage", ["memory", "files"])
def test_a_planner_that_changes_a_step_takes_effect(tmp_path, storage):
    store = {}
    writer = MemoryWriter(store) if storage == "memory" else dcp.FileSystemWriter(tmp_path)
    reader = MemoryReader(store) if storage == "memory" else dcp.FileSystemReader(tmp_path)
    dcp.save(_state(), storage_writer=writer, planner=DoublingSavePlanner())
    plain = _empty()
    dcp.load(plain, storage_reader=reader)  # without the planner: the doubled tensors, the values as saved
    assert plain["model"]["w"].tolist() == [[0.0, 2.0, 4.0], [6.0, 8.0, 10.0]] and plain["epoch"] == 7
    state = _empty()
    dcp.load(state, storage_reader=reader, planner=HalvingLoadPlanner())
    assert state["model"]["w"].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert state["model"]["b"].tolist() == [1.5, -2.0]
    assert state["epoch"] == 8 and state["optim"]["step"] == 4 and state["name"] == "run"
    assert state["optim"]["param_groups"][0]["betas"] == (0.9, 0.99)


def test_a_planner_may_write_bytes_of_its_own(tmp_path):
    class RawSave(DefaultSavePlanner):
        def resolve_data(self, write_item):
            if write_item.type == WriteItemType.BYTE_IO:
                return io.BytesIO(f"raw:{self.state_dict[write_item.index.fqn]}".encode())
            return super().resolve_data(write_item)

    class RawLoad(DefaultLoadPlanner):
        def load_bytes(self, read_item, value):
            self.state_dict[read_item.dest_index.fqn] = value.getvalue()
            self.original_state_dict[read_item.dest_index.fqn] = value.getvalue()

    dcp.save({"epoch": 7, "w": ddpc.ones(2)}, checkpoint_id=tmp_path, planner=RawSave())
    state = {"epoch": 0, "w": ddpc.zeros(2)}
    dcp.load(state, checkpoint_id=tmp_path, planner=RawLoad())
    assert state["epoch"] == b"raw:7" and state["w"].tolist() == [1.0, 1.0]
    with pytest.raises(dcp.CheckpointException, match="the bytes of 'epoch' in the checkpoint are not ddpc.save's"):
        dcp.load({"epoch": 0}, checkpoint_id=tmp_path)  # the default planner takes only ddpc.save's bytes


def test_allow_partial_load(tmp_path):
    dcp.save({"w": ddpc.arange(3.0), "epoch": 4}, checkpoint_id=tmp_path)
    state = {"w": ddpc.zeros(3), "epoch": 0, "new": ddpc.full((2,), 9.0), "extra": {"n": 1}}
    with pytest.raises(dcp.CheckpointException, match="'new' is not in the checkpoint"):
        dcp.load(state, checkpoint_id=tmp_path)
    dcp.load(state, checkpoint_id=tmp_path, planner=DefaultLoadPlanner(allow_partial_load=True))
    assert state["w"].tolist() == [0.0, 1.0, 2.0] and state["epoch"] == 4
    assert state["new"].tolist() == [9.0, 9.0] and state["extra"] == {"n": 1}
    store = {}
    dcp.save({"w": ddpc.arange(3.0)}, storage_writer=MemoryWriter(store))
    state = {"w": ddpc.zeros(3), "gone": 5}
    dcp.load(state, storage_reader=MemoryReader(store), planner=DefaultLoadPlanner(allow_partial_load=True))
    assert state == {"w": state["w"], "gone": 5} and state["w"].tolist() == [0.0, 1.0, 2.0]


def test_without_flattening_the_state_dicts_own_values_are_the_items(tmp_path):
    state = {"model": {"w": ddpc.arange(2.0), "sub": {"b": ddpc.ones(1)}}, "t": ddpc.tensor([4.0, 5.0]),
             "mixed": [ddpc.ones(1), 7], "step": 8}
    metadata = dcp.save(state, checkpoint_id=tmp_path, planner=DefaultSavePlanner(flatten_state_dict=False))
    md = metadata.state_dict_metadata
    assert sorted(md) == ["mixed", "model", "step", "t"] and isinstance(md["t"], TensorStorageMetadata)
    assert all(isinstance(md[k], BytesStorageMetadata) for k in ("mixed", "model", "step"))
    target = {"model": {"w": ddpc.zeros(2)}, "t": ddpc.zeros(2), "mixed": None, "step": 0}
    t = target["t"]
    dcp.load(target, checkpoint_id=tmp_path, planner=DefaultLoadPlanner(flatten_state_dict=False))
    assert target["t"] is t and t.tolist() == [4.0, 5.0]  # a tensor is copied into, the rest replaced
    assert target["model"]["w"].tolist() == [0.0, 1.0] and target["model"]["sub"]["b"].tolist() == [1.0]
    assert target["mixed"][0].tolist() == [1.0] and target["mixed"][1] == 7 and target["step"] == 8
    with pytest.raises(dcp.CheckpointException, match="'model.w' is not in the checkpoint"):
        dcp.load({"model": {"w": ddpc.zeros(2)}}, checkpoint_id=tmp_path)  # the flattening planner's keys


def test_storage_and_planners_of_the_wrong_type_are_clear_errors(tmp_path):
    state = {"w": ddpc.ones(2)}
    with pytest.raises(TypeError, match="save: storage_writer must be a StorageWriter .*got FileSystemReader"):
        dcp.save(state, storage_writer=dcp.FileSystemReader(tmp_path))
    with pytest.raises(TypeError, match="storage_writer must be a StorageWriter .*got dict"):
        dcp.save(state, storage_writer={})
    with pytest.raises(TypeError, match="load: storage_reader must be a StorageReader .*got MemoryWriter"):
        dcp.load(state, storage_reader=MemoryWriter({}))
    with pytest.raises(TypeError, match="async_save: storage_writer must be a StorageWriter"):
        dcp.async_save(state, storage_writer=MemoryReader({}))
    with pytest.raises(TypeError, match="save: planner must be a SavePlanner .*got DefaultLoadPlanner"):
        dcp.save(state, checkpoint_id=tmp_path, planner=DefaultLoadPlanner())
    with pytest.raises(TypeError, match="load: planner must be a LoadPlanner .*got str"):
        dcp.load(state, checkpoint_id=tmp_path, planner="default")
    with pytest.raises(ValueError, match="give checkpoint_id"):
        dcp.load(state)

    class Incomplete(StorageWriter):  # no write_data, finish, ...
        def reset(self, checkpoint_id=None):
            pass

    with pytest.raises(TypeError, match="abstract"):
        Incomplete()

    class HalfPlanner(SavePlanner):
        def set_up_planner(self, state_dict, storage_meta=None, is_coordinator=False):
            pass

    with pytest.raises(TypeError, match="abstract"):
        HalfPlanner()

    # a step that raises is a CheckpointException naming it
    class Broken(MemoryWriter):
        def write_data(self, plan, planner):
            raise OSError("disk full")

    with pytest.raises(dcp.CheckpointException, match="save failed on rank.*OSError: disk full"):
        dcp.save(state, storage_writer=Broken({}))

    class BadGlobal(DefaultSavePlanner):
        def create_global_plan(self, all_plans):
            raise RuntimeError("no plan")

    with pytest.raises(dcp.CheckpointException, match=r"global plan\) failed on rank\(s\) \[0\].*no plan"):
        dcp.save(state, checkpoint_id=tmp_path, planner=BadGlobal())


def test_async_save_with_user_storage():
    store, state = {}, _state()
    future = dcp.async_save(state, storage_writer=MemoryWriter(store))
    with ddpc.no_grad():
        state["model"]["w"].add_(100.0)  # after the call returns: not in the checkpoint
    assert isinstance(future.result(timeout=60), Metadata)
    loaded = _empty()
    dcp.load(loaded, storage_reader=MemoryReader(store))
    _check_loaded(loaded)


# ---- 2 ranks: a DTensor through the user's storage ----------------------------------------------------

def _dtensor_worker(rank, fail_rank):
    import ddpc.distributed as dist
    from ddpc.distributed.tensor import Replicate, Shard, distribute_tensor, init_device_mesh

    dist.init_process_group("cpu")
    mesh = init_device_mesh("cpu", (2,))
    full = ddpc.from_numpy(np.arange(15, dtype=np.float32).reshape(5, 3))
    store, log = {}, []
    state = {"rows": distribute_tensor(full, mesh, [Shard(0)]), "rep": distribute_tensor(ddpc.arange(4.0), mesh,
                                                                                         [Replicate()]),
             "plain": ddpc.full((2,), float(rank)), "step": 11 + rank, "tags": ["a", "b"]}
    dcp.save(state, storage_writer=MemoryWriter(store, log))
    # the in-memory checkpoint is rank 0's (finish runs there); the test hands it to the other rank
    box = [store if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    store = box[0]
    written = sorted((index.fqn, tuple(index.offset or ()), where) for index, (where, _) in store["data"].items())
    lowest = {}
    dcp.save(state, storage_writer=MemoryWriter(lowest), planner=DefaultSavePlanner(dedup_save_to_lowest_rank=True))
    lowest = sorted((index.fqn, where) for index, (where, _) in lowest["data"].items()) if rank == 0 else None

    # load into DTensors split by columns: each rank reads column parts of both ranks' row parts
    target = {"rows": distribute_tensor(ddpc.zeros(5, 3), mesh, [Shard(1)]),
              "rep": distribute_tensor(ddpc.zeros(4), mesh, [Shard(0)]), "plain": ddpc.zeros(2), "step": 0,
              "tags": ["", ""]}
    dcp.load(target, storage_reader=MemoryReader(store))
    out = {"rows": target["rows"].to_local().numpy().copy(), "rep": target["rep"].to_local().numpy().copy(),
           "plain": target["plain"].numpy().copy(), "step": target["step"], "tags": target["tags"],
           "written": written, "lowest": lowest, "log": log}

    class FailsOnOneRank(MemoryReader):
        def read_data(self, plan, planner):
            if dist.get_rank() == fail_rank:
                raise OSError("storage offline")
            return super().read_data(plan, planner)

    try:
        dcp.load(target, storage_reader=FailsOnOneRank(store))
        out["failure"] = None
    except dcp.CheckpointException as e:
        out["failure"] = (sorted(e.failures), str(e))
    dist.destroy_process_group()
    return out


def test_dtensor_over_two_ranks_through_user_storage():
    results = ddpc.spawn(_dtensor_worker, args=(1,), nprocs=2)
    full = np.arange(15, dtype=np.float32).reshape(5, 3)
    for rank, out in enumerate(results):
        cols = slice(0, 2) if rank == 0 else slice(2, 3)  # 3 columns over 2 ranks: 2 and 1
        np.testing.assert_array_equal(out["rows"], full[:, cols])
        np.testing.assert_array_equal(out["rep"], np.arange(4.0)[2 * rank:2 * rank + 2])
        # as PyTorch assigns what several ranks hold, in the plans' order, to the rank with the least to write
        # so far: rank 0 has its rows (36 bytes), so rank 1 writes "rep", "plain", "step" and "tags"
        assert out["plain"].tolist() == [1.0, 1.0] and out["step"] == 12 and out["tags"] == ["a", "b"]
        assert out["failure"][0] == [1] and "OSError: storage offline" in out["failure"][1]
        # every rank set up, planned and wrote; only rank 0 made the global plan and finished
        assert out["log"].count("write_data") == 1
        assert ("finish" in out["log"]) == (rank == 0) and ("prepare_global_plan" in out["log"]) == (rank == 0)
    written = results[0]["written"]
    # each rank wrote its rows; the replicated tensors and the values once
    assert [w for w in written if w[0] == "rows"] == [("rows", (0, 0), "rank 0"), ("rows", (3, 0), "rank 1")]
    assert [w[2] for w in written if w[0] in ("rep", "plain", "step", "tags")] == ["rank 1"] * 4
    # with dedup_save_to_lowest_rank, what both ranks hold is written by rank 0
    assert results[0]["lowest"] == [("plain", "rank 0"), ("rep", "rank 0"), ("rows", "rank 0"), ("rows", "rank 1"),
                                    ("step", "rank 0"), ("tags", "rank 0")]


# ---- 3 ranks: what goes through the coordinator ------------------------------------------------------

def _coordinator_worker(rank):
    """Saves and loads on the 3 ranks, recording what each collective of the checkpoint module left on this
    rank; then saves on a group of ranks 1 and 2 (whose coordinator is rank 1), once with a storage whose
    global plan is one plan short."""
    import ddpc.distributed as dist

    dist.init_process_group("cpu")
    received = []

    def spy(name, collective):
        def call(*args, **kwargs):
            collective(*args, **kwargs)
            received.append((name, repr(args[1] if name == "gather_object" else args[0])))
        return call

    for name in ("gather_object", "scatter_object_list", "broadcast_object_list"):
        setattr(dcp, name, spy(name, getattr(dcp, name)))
    store = {}
    dcp.save({f"mine{rank}": ddpc.full((2,), float(rank)), "shared": ddpc.ones(3)}, storage_writer=MemoryWriter(store))
    box = [store if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    state = {f"mine{rank}": ddpc.zeros(2), "shared": ddpc.zeros(3)}
    dcp.load(state, storage_reader=MemoryReader(box[0]))
    out = {"received": list(received), "loaded": state[f"mine{rank}"].tolist() + state["shared"].tolist()}

    sub = dist.new_group([1, 2])
    if rank:
        store = {}
        dcp.save({"w": ddpc.full((2,), float(rank)), "step": rank}, storage_writer=MemoryWriter(store),
                 process_group=sub)
        out["sub"] = sorted(store["metadata"].state_dict_metadata) if store else None

        class OnePlanShort(MemoryWriter):
            def prepare_global_plan(self, plans):
                return super().prepare_global_plan(plans)[:1]

        try:
            dcp.save({"w": ddpc.ones(2)}, storage_writer=OnePlanShort({}), process_group=sub)
            out["short"] = None
        except dcp.CheckpointException as e:
            out["short"] = (sorted(e.failures), str(e))
    dist.destroy_process_group()
    return out


def test_plans_and_results_go_to_the_coordinator_and_each_rank_gets_back_its_own_plan():
    results = ddpc.spawn(_coordinator_worker, nprocs=3)
    for rank, out in enumerate(results):
        assert out["loaded"] == [float(rank)] * 2 + [1.0] * 3
        # save: plans gathered, each rank's plan scattered, results gathered, the metadata broadcast; load:
        # plans gathered and scattered, read outcomes gathered and the verdict broadcast
        names = [name for name, _ in out["received"]]
        assert names == ["gather_object", "scatter_object_list", "gather_object", "broadcast_object_list"] * 2, names
        (_, plans), (_, plan), (_, results_), _, (_, load_plans), (_, load_plan), _, _ = out["received"]
        others = [f"'mine{r}'" for r in range(3) if r != rank]
        if rank == 0:  # the coordinator gathers every rank's plan and its write results
            assert all(f"'mine{r}'" in plans and f"'mine{r}'" in load_plans for r in range(3))
            assert all(f"'mine{r}'" in results_ for r in range(3))
        else:  # the others receive nothing from a gather, and from a scatter their own plan alone
            assert plans == results_ == load_plans == "None"
        assert f"'mine{rank}'" in plan and not any(o in plan for o in others), plan
        assert f"'mine{rank}'" in load_plan and not any(o in load_plan for o in others), load_plan
    assert "sub" not in results[0]
    # on the group of ranks 1 and 2, rank 1 coordinates: it finished the checkpoint
    assert results[1]["sub"] == ["step", "w"] and results[2]["sub"] is None
    for out in results[1:]:
        assert out["short"][0] == [0], out["short"]
        assert "global plan) failed on rank(s) [0]: rank 0: ValueError: the global plan holds 1 plans for 2 ranks" \
            in out["short"][1]

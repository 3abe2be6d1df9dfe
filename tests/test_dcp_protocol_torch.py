"""Optional: the same user-written in-memory StorageWriter/StorageReader and planner subclasses run
through ddpc.distributed.checkpoint and torch.distributed.checkpoint (skipped when torch is not
installed): the protocol's calls come in the same order, the metadata has the same keys, kinds, sizes
and chunks, a planner that changes a step changes the result alike, and allow_partial_load skips the
same keys; state dicts of every shape flattening treats apart (nested dicts, lists of tensors, of
values, of both, tuples, empty lists, None) give the same keys and load back alike; on 2 ranks, a
value or tensor several ranks hold is saved from the same rank, and one only rank 1 holds is saved;
the default planners with flatten_state_dict=False save and load nested dicts alike; and DTensors
inside values kept whole (a tuple of them), and values under keys that are not strings, are saved
and load back alike, on 1 rank and on 2.

Each group runs in a child process that imports torch before ddpc (see test_nn_extra_torch.py) and
fails there, printing what differs; the 2-rank case runs as two such processes.
"""

import json
import sys

import pytest
from dcp_memory import memory_storage
from procs import init_torch_and_ddpc_groups, run_torch_group, run_torch_ranks, torch_group_test


def _classes(lib, make_future):
    """The user's storage and planners, written once against lib's distributed.checkpoint."""
    from importlib import import_module

    dp = import_module(f"{lib.__name__}.distributed.checkpoint.default_planner")
    planner = import_module(f"{lib.__name__}.distributed.checkpoint.planner")
    MemoryWriter, MemoryReader = memory_storage(lib, make_future)

    class LoggedSavePlanner(dp.DefaultSavePlanner):
        """Logs its steps; saves tensors doubled."""

        def __init__(self, log):
            super().__init__()
            self.log = log

        def set_up_planner(self, state_dict, storage_meta=None, is_coordinator=False):
            self.log.append("set_up_planner")
            super().set_up_planner(state_dict, storage_meta=storage_meta, is_coordinator=is_coordinator)

        def create_local_plan(self):
            self.log.append("create_local_plan")
            return super().create_local_plan()

        def create_global_plan(self, all_plans):
            self.log.append("create_global_plan")
            return super().create_global_plan(all_plans)

        def finish_plan(self, new_plan):
            self.log.append("finish_plan")
            return super().finish_plan(new_plan)

        def resolve_data(self, write_item):
            self.log.append("resolve_data")
            data = super().resolve_data(write_item)
            return data * 2 if write_item.type != planner.WriteItemType.BYTE_IO else data

    class LoggedLoadPlanner(dp.DefaultLoadPlanner):
        """Logs its steps; reads tensors into fresh buffers and commits them halved."""

        def __init__(self, log, allow_partial_load=False):
            super().__init__(allow_partial_load=allow_partial_load)
            self.log = log

        def set_up_planner(self, state_dict, metadata=None, is_coordinator=False):
            self.log.append("set_up_planner")
            super().set_up_planner(state_dict, metadata, is_coordinator)

        def create_local_plan(self):
            self.log.append("create_local_plan")
            return super().create_local_plan()

        def create_global_plan(self, global_plan):
            self.log.append("create_global_plan")
            return super().create_global_plan(global_plan)

        def finish_plan(self, central_plan):
            self.log.append("finish_plan")
            return super().finish_plan(central_plan)

        def load_bytes(self, read_item, value):
            self.log.append("load_bytes")
            super().load_bytes(read_item, value)

        def resolve_tensor(self, read_item):
            self.log.append("resolve_tensor")
            return lib.zeros(*read_item.lengths)

        def commit_tensor(self, read_item, tensor):
            self.log.append("commit_tensor")
            super().resolve_tensor(read_item).copy_(tensor / 2)

    return MemoryWriter, MemoryReader, LoggedSavePlanner, LoggedLoadPlanner


def _run(lib, make_future):
    """Saves and loads one state dict through the user's classes; what the protocol did and gave."""
    import numpy as np
    from importlib import import_module

    dcp = import_module(f"{lib.__name__}.distributed.checkpoint")
    writer, reader, save_planner, load_planner = _classes(lib, make_future)
    state = {"model": {"w": lib.arange(6.0).reshape(2, 3), "b": lib.tensor([1.5, -2.0])}, "epoch": 7,
             "optim": {"lr": 0.1, "name": "adam"}}
    store, save_log, load_log = {}, [], []
    dcp.save(state, checkpoint_id="mem", storage_writer=writer(store, save_log), planner=save_planner(save_log),
             no_dist=True)
    md = store["metadata"].state_dict_metadata
    kinds = {k: (type(v).__name__, tuple(v.size) if hasattr(v, "size") else None,
                 [(tuple(c.offsets), tuple(c.sizes)) for c in getattr(v, "chunks", [])]) for k, v in md.items()}
    target = {"model": {"w": lib.zeros(2, 3), "b": lib.zeros(2)}, "epoch": 0, "optim": {"lr": 0.0, "name": ""},
              "new": lib.ones(2)}
    dcp.load(target, storage_reader=reader(store, load_log), planner=load_planner(load_log, True), no_dist=True)
    loaded = {"w": target["model"]["w"].numpy().tolist(), "b": target["model"]["b"].numpy().tolist(),
              "epoch": target["epoch"], "optim": target["optim"], "new": target["new"].numpy().tolist()}
    strict = "loaded"
    try:
        dcp.load({"new": lib.ones(2)}, storage_reader=reader(store, []), planner=load_planner([]), no_dist=True)
    except BaseException:  # noqa: BLE001 - PyTorch's CheckpointException is a BaseException
        strict = "raised"
    # the tensors' read steps come in an order of each library's own
    tail = sorted(load_log[load_log.index("read_data") + 1:])
    return save_log, load_log[:load_log.index("read_data") + 1], tail, kinds, loaded, strict, np


def _futures(torch):
    """(make_future for torch's storage, for ddpc's): a future of each library, done with the value."""
    from ddpc.distributed import Future

    def torch_future(value):
        f = torch.futures.Future()
        f.set_result(value)
        return f

    return torch_future, lambda value: Future(value=value)


def _in_both(torch, ddpc, fn):
    """(ddpc's result, PyTorch's) of fn(lib, make_future), PyTorch's run first, warnings silenced."""
    import warnings

    torch_future, ddpc_future = _futures(torch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = fn(torch, torch_future)
        return fn(ddpc, ddpc_future), want


def _protocol(np, torch, ddpc):
    got, want = _in_both(torch, ddpc, _run)
    for what, g, w in zip(("save calls", "load calls", "read steps", "metadata", "loaded values",
                           "without allow_partial_load"), got, want):
        assert g == w, f"{what}: {g} where PyTorch has {w}"
    assert got[4]["w"] == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]] and got[4]["new"] == [1.0, 1.0]


def _shapes(lib, zero=False):
    """A state dict of every shape flattening treats apart, with its values (zero: of the same shapes, zeros)."""
    def t(*values):
        return lib.zeros(len(values)) if zero else lib.tensor(list(values))

    def n(value):
        return type(value)() if zero else value

    return {"model": {"w": t(1.0, 2.0), "sub": {"b": t(3.0)}}, "tensors": [t(1.0), t(2.0, 3.0)],
            "ints": [n(3), n(6), n(9)], "sched": {"milestones": [n(3), n(6)], "gamma": n(0.1)},
            "betas": (n(0.9), n(0.99)), "tensor_pair": (t(4.0), t(5.0)), "mixed": [t(6.0), n(7)], "empty": [],
            "none": None, "nested": [[n(1), n(2)], [n(3)]], "deep": [[t(8.0)], n(9)],
            "dicts": [{"a": n(1)}, {"b": t(10.0)}], "nones": [None, n(1)], "pair_in_list": [(t(11.0),), n(12)],
            "text": n("run")}


def _plain(obj, key=str):
    """obj with its tensors as ("tensor", values), its tuples as lists and its dicts' keys as key(k)."""
    if isinstance(obj, dict):
        return {key(k): _plain(v, key) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v, key) for v in obj]
    return ("tensor", obj.detach().numpy().tolist()) if hasattr(obj, "detach") else obj


def _flattened(lib, make_future):
    """The metadata keys (and kinds) of _shapes saved through the user's storage, and what loads back."""
    from importlib import import_module

    dcp = import_module(f"{lib.__name__}.distributed.checkpoint")
    writer, reader = memory_storage(lib, make_future)
    store = {}
    dcp.save(_shapes(lib), storage_writer=writer(store), no_dist=True)
    keys = {k: type(v).__name__ for k, v in store["metadata"].state_dict_metadata.items()}
    target = _shapes(lib, zero=True)
    dcp.load(target, storage_reader=reader(store), no_dist=True)
    return keys, _plain(target)


def _flattening(np, torch, ddpc):
    got, want = _in_both(torch, ddpc, _flattened)
    assert sorted(got[0]) == sorted(want[0]), f"keys {sorted(got[0])} where PyTorch has {sorted(want[0])}"
    assert got[0] == want[0], f"kinds {got[0]} where PyTorch has {want[0]}"
    assert got[1] == want[1], f"loaded {got[1]} where PyTorch loads {want[1]}"
    assert got[1] == _plain(_shapes(ddpc))


def _unflattened(lib, make_future):
    """A nested state dict saved and loaded by the default planners with flatten_state_dict=False: the
    metadata's keys and kinds, what loads back, whether the top-level tensor was copied into, and whether
    the flattening planner loads the checkpoint."""
    from importlib import import_module

    dcp = import_module(f"{lib.__name__}.distributed.checkpoint")
    dp = import_module(f"{lib.__name__}.distributed.checkpoint.default_planner")
    writer, reader = memory_storage(lib, make_future)
    state = {"model": {"w": lib.tensor([1.0, 2.0]), "sub": {"b": lib.tensor([3.0])}}, "t": lib.tensor([4.0, 5.0]),
             "mixed": [lib.tensor([6.0]), 7], "step": 8}
    store = {}
    dcp.save(state, storage_writer=writer(store), planner=dp.DefaultSavePlanner(flatten_state_dict=False),
             no_dist=True)
    keys = {k: type(v).__name__ for k, v in store["metadata"].state_dict_metadata.items()}
    target = {"model": {"w": lib.zeros(2), "sub": {"b": lib.zeros(1)}}, "t": lib.zeros(2), "mixed": None, "step": 0}
    t = target["t"]
    # PyTorch's planner loses the values it replaces unless flatten_sharded_tensors=False (it loads them
    # into a copy of the state dict); ddpc's loads them either way
    dcp.load(target, storage_reader=reader(store), no_dist=True,
             planner=dp.DefaultLoadPlanner(flatten_state_dict=False, flatten_sharded_tensors=False))
    try:
        dcp.load(_shapes(lib, zero=True), storage_reader=reader(store), no_dist=True)
        flattened = "loaded"
    except BaseException:  # noqa: BLE001 - PyTorch's CheckpointException is a BaseException
        flattened = "raised"
    return keys, _plain(target), target["t"] is t, flattened


def _unflattening(np, torch, ddpc):
    got, want = _in_both(torch, ddpc, _unflattened)
    for what, g, w in zip(("metadata", "loaded", "tensor copied into", "flattening load"), got, want):
        assert g == w, f"{what}: {g} where PyTorch has {w}"
    assert got[0] == {"model": "BytesStorageMetadata", "t": "TensorStorageMetadata",
                      "mixed": "BytesStorageMetadata", "step": "BytesStorageMetadata"}
    assert got[1]["model"] == {"w": ("tensor", [1.0, 2.0]), "sub": {"b": ("tensor", [3.0])}}


def _described(value):
    """value with its DTensors as ("DTensor", placements, local values, shape, full values) and its tuples and
    lists as [type name, elements] (the full values are a collective over the DTensor's mesh)."""
    if hasattr(value, "placements"):
        return ["DTensor", [repr(p) for p in value.placements], value.to_local().numpy().tolist(), list(value.shape),
                value.full_tensor().numpy().tolist()]
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [_described(v) for v in value]]
    return value


def _through_memory(lib, make_future, state, target, no_dist=False, save_planner=None, load_planner=None):
    """Saves state through the user's in-memory storage and loads target from it; returns the store. On
    several ranks every rank loads the checkpoint rank 0 finished (finish runs there), which it broadcasts."""
    from importlib import import_module

    dcp = import_module(f"{lib.__name__}.distributed.checkpoint")
    writer, reader = memory_storage(lib, make_future)
    store = {}
    dcp.save(state, storage_writer=writer(store), planner=save_planner, no_dist=no_dist)
    if not no_dist:
        box = [store if lib.distributed.get_rank() == 0 else None]
        lib.distributed.broadcast_object_list(box, src=0)
        store = box[0]
    dcp.load(target, storage_reader=reader(store), planner=load_planner, no_dist=no_dist)
    return store


def _whole_dtensors(lib, rank, make_future):
    """DTensors inside values kept whole (a tuple, a list without a tensor), whose Replicate values differ by
    rank, saved from every rank of the group through the user's storage: the metadata's kinds, which rank
    wrote each item, and what this rank loads back."""
    from importlib import import_module

    tensor = import_module(f"{lib.__name__}.distributed.tensor")
    world = lib.distributed.get_world_size()
    mesh = tensor.init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
    rows = tensor.distribute_tensor(lib.arange(4.0), mesh, [tensor.Shard(0)])
    mine = tensor.distribute_tensor(lib.full((3,), 10.0 * rank), mesh, [tensor.Replicate()], src_data_rank=None)
    state = {"pair": None, "mixed": None, "t": tensor.distribute_tensor(lib.zeros(4), mesh, [tensor.Shard(0)])}
    store = _through_memory(lib, make_future, {"pair": (rows, mine), "mixed": [(mine,), 3], "t": rows}, state)
    return {"kinds": {k: type(v).__name__ for k, v in store["metadata"].state_dict_metadata.items()},
            "written": sorted([index.fqn, where] for index, (where, _) in store["data"].items()),
            "loaded": {k: _described(v) for k, v in state.items()},
            "same mesh": [state["pair"][0].device_mesh == mesh, state["mixed"][0][0].device_mesh == mesh]}


def _whole_dtensors_in_one_process(np, torch, ddpc):
    from procs import free_port

    init_torch_and_ddpc_groups(torch, ddpc, 0, 1, free_port(), free_port())
    got, want = _in_both(torch, ddpc, lambda lib, make_future: _whole_dtensors(lib, 0, make_future))
    torch.distributed.destroy_process_group()
    ddpc.distributed.destroy_process_group()
    assert got == want, f"{got} where PyTorch has {want}"
    assert got["kinds"] == {"pair": "BytesStorageMetadata", "mixed": "BytesStorageMetadata",
                            "t": "TensorStorageMetadata"}
    assert got["loaded"]["pair"][1][0] == ["DTensor", ["Shard(dim=0)"], [0.0, 1.0, 2.0, 3.0], [4],
                                           [0.0, 1.0, 2.0, 3.0]]


def _int_keyed(lib, make_future, no_dist=True):
    """State dicts with keys that are not strings (an optimizer state's int keys, others nested, and a state
    dict of int keys) saved and loaded back into ones with the same keys, and the latter by the default
    planners without flattening: the metadata's keys, and what loads back (the dicts' keys as their reprs)."""
    from importlib import import_module

    dp = import_module(f"{lib.__name__}.distributed.checkpoint.default_planner")

    def nested(zero):
        return {"optim": {"state": {0: {"step": 0 if zero else 3, "exp_avg": lib.zeros(2) if zero else lib.ones(2)},
                                    1: {"step": 0 if zero else 4}},
                          "param_groups": [{"params": [] if zero else [0, 1], "lr": 0.0 if zero else 0.1}]},
                "table": {(1, 2): "" if zero else "pair", None: "" if zero else "none", 2.5: "" if zero else "float"},
                "rows": [{0: "" if zero else "in a list"}]}

    out = {}
    for what, state, target in (("nested", nested(False), nested(True)),
                                ("top level", {5: "five", 7: lib.tensor([7.0]), 9: {1: "x"}},
                                 {5: "", 7: lib.zeros(1), 9: {1: ""}})):
        store = _through_memory(lib, make_future, state, target, no_dist)
        out[what] = (sorted(store["metadata"].state_dict_metadata), _plain(target, repr))
    target = {5: "", 7: lib.zeros(1), 9: None}
    # PyTorch's planners keep the keys as they are only without flatten_sharded_tensors too
    _through_memory(lib, make_future, {5: "five", 7: lib.tensor([7.0]), 9: {1: "x"}}, target, no_dist,
                    dp.DefaultSavePlanner(flatten_state_dict=False, flatten_sharded_tensors=False),
                    dp.DefaultLoadPlanner(flatten_state_dict=False, flatten_sharded_tensors=False))
    out["unflattened"] = _plain(target, repr)
    return out


def _check_int_keyed(got, want):
    got, want = json.loads(json.dumps(got)), json.loads(json.dumps(want))  # as from 2 ranks: tuples as lists
    assert got == want, f"{got} where PyTorch has {want}"
    keys, loaded = got["nested"]
    assert keys == ["optim.param_groups.0.lr", "optim.param_groups.0.params", "optim.state.0.exp_avg",
                    "optim.state.0.step", "optim.state.1.step", "rows.0.0", "table.(1, 2)", "table.2.5", "table.None"]
    # the int-keyed entries keep their values (their tensors copied into); the others come under the strings
    assert loaded["'optim'"]["'state'"] == {"0": {"'step'": 0, "'exp_avg'": ["tensor", [1.0, 1.0]]},
                                            "1": {"'step'": 0}, "'0'": {"'step'": 3}, "'1'": {"'step'": 4}}
    assert loaded["'table'"]["'(1, 2)'"] == "pair" and loaded["'table'"]["(1, 2)"] == ""
    assert got["top level"] == [["5", "7", "9.1"], {"5": "", "7": ["tensor", [7.0]], "9": {"1": ""}}]
    assert got["unflattened"] == {"5": "five", "7": ["tensor", [7.0]], "9": {"1": "x"}}


def _int_keys(np, torch, ddpc):
    _check_int_keyed(*_in_both(torch, ddpc, _int_keyed))


GROUPS = {"protocol": _protocol, "flattening": _flattening, "unflattening": _unflattening,
          "whole dtensors": _whole_dtensors_in_one_process, "int keys": _int_keys}


test_matches_pytorch = torch_group_test(__file__, GROUPS)


# ---- 2 ranks: which rank's value is saved ------------------------------------------------------------

def _saved_from_ranks(lib, rank, make_future, lowest_rank):
    """Saves, from 2 ranks, values and tensors both ranks hold (with values of their own) and some only rank 1
    holds; on rank 0, which rank wrote each key and what loads back."""
    from importlib import import_module

    dcp = import_module(f"{lib.__name__}.distributed.checkpoint")
    dp = import_module(f"{lib.__name__}.distributed.checkpoint.default_planner")
    writer, reader = memory_storage(lib, make_future)
    state = {"a": 100 + rank, "t": lib.full((4,), float(rank)), "b": 200 + rank, "c": 300 + rank,
             "big": lib.full((10,), float(rank)), "d": 400 + rank, "e": 500 + rank}
    if rank == 1:
        state.update(only1="from rank 1", t1=lib.ones(3))
    store = {}
    dcp.save(state, storage_writer=writer(store), planner=dp.DefaultSavePlanner(dedup_save_to_lowest_rank=lowest_rank))
    if rank:
        return None
    written = {index.fqn: where for index, (where, _) in store["data"].items()}
    target = {k: None for k in "abcde"}
    target.update(t=lib.zeros(4), big=lib.zeros(10), only1=None, t1=lib.zeros(3))
    dcp.load(target, storage_reader=reader(store), no_dist=True)
    return {"written": written, "loaded": _plain(target)}


def _rank_main(rank, torch_port, ddpc_port, path, case):
    import warnings

    import numpy as np
    import torch

    import ddpc

    init_torch_and_ddpc_groups(torch, ddpc, rank, 2, torch_port, ddpc_port)
    torch_future, ddpc_future = _futures(torch)
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if case == "writers":
            for lowest_rank in (False, True):
                out[f"torch {lowest_rank}"] = _saved_from_ranks(torch, rank, torch_future, lowest_rank)
                out[f"ddpc {lowest_rank}"] = _saved_from_ranks(ddpc, rank, ddpc_future, lowest_rank)
        elif case == "whole":
            out["torch"] = _whole_dtensors(torch, rank, torch_future)
            out["ddpc"] = _whole_dtensors(ddpc, rank, ddpc_future)
        else:
            out["torch"] = _int_keyed(torch, torch_future, no_dist=False)
            out["ddpc"] = _int_keyed(ddpc, ddpc_future, no_dist=False)
    np.savez(path, result=np.array(json.dumps(out)))
    torch.distributed.destroy_process_group()
    ddpc.distributed.destroy_process_group()


def test_values_several_ranks_or_one_hold_are_saved_from_the_ranks_pytorch_saves_them_from(tmp_path):
    pytest.importorskip("torch")
    out = json.loads(str(run_torch_ranks(__file__, 2, tmp_path, args=("writers",))[0]["result"]))
    for lowest_rank in (False, True):
        got, want = out[f"ddpc {lowest_rank}"], out[f"torch {lowest_rank}"]
        assert got == want, f"dedup_save_to_lowest_rank={lowest_rank}: {got} where PyTorch has {want}"
    # In the order the plans name them, each key goes to the rank with the least to write so far (a tensor
    # counted by its bytes, a value as 1): "a" to rank 0, "t" (16 bytes) to rank 1, "b", "c" and "big" to
    # rank 0, the rest to rank 1; with dedup_save_to_lowest_rank, to the lowest rank that holds it.
    assert out["ddpc False"]["written"] == {"a": "rank 0", "t": "rank 1", "b": "rank 0", "c": "rank 0",
                                            "big": "rank 0", "d": "rank 1", "e": "rank 1", "only1": "rank 1",
                                            "t1": "rank 1"}
    assert out["ddpc False"]["loaded"]["d"] == 401 and out["ddpc False"]["loaded"]["only1"] == "from rank 1"
    assert set(out["ddpc True"]["written"].values()) == {"rank 0", "rank 1"}
    assert [k for k, where in out["ddpc True"]["written"].items() if where == "rank 1"] == ["only1", "t1"]
    assert out["ddpc True"]["loaded"]["d"] == 400



def test_dtensors_in_values_kept_whole_load_on_two_ranks_as_in_pytorch(tmp_path):
    pytest.importorskip("torch")
    for rank, result in enumerate(run_torch_ranks(__file__, 2, tmp_path, args=("whole",))):
        out = json.loads(str(result["result"]))
        assert out["ddpc"] == out["torch"], f"rank {rank}: {out['ddpc']} where PyTorch has {out['torch']}"
        # "pair" is written by rank 0 and "mixed" by rank 1; every rank loads the writer's local tensors
        assert [w for w in out["ddpc"]["written"] if w[0] != "t"] == [["mixed", "rank 1"], ["pair", "rank 0"]]
        pair, mixed = out["ddpc"]["loaded"]["pair"], out["ddpc"]["loaded"]["mixed"]
        assert pair[1][0] == ["DTensor", ["Shard(dim=0)"], [0.0, 1.0], [4], [0.0, 1.0, 0.0, 1.0]]
        assert pair[1][1][2] == [0.0] * 3 and mixed[1][0][1][0][2] == [10.0] * 3
        assert out["ddpc"]["same mesh"] == [True, True]



def test_keys_that_are_not_strings_load_on_two_ranks_as_in_pytorch(tmp_path):
    pytest.importorskip("torch")
    for result in run_torch_ranks(__file__, 2, tmp_path, args=("int keys",)):
        out = json.loads(str(result["result"]))
        _check_int_keyed(out["ddpc"], out["torch"])


if __name__ == "__main__":
    if len(sys.argv) == 6:  # a rank of run_torch_ranks, and its case
        _rank_main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
    else:
        run_torch_group(GROUPS)

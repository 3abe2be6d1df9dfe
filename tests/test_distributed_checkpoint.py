"""ddpc.distributed.checkpoint (save/load/async_save of a directory from every rank) and its
state_dict helpers (names of the unwrapped model, optimizer state keyed by them)."""

import io
import os

import numpy as np
import pytest

import ddpc
import ddpc.distributed.checkpoint as dcp
from ddpc import nn
from ddpc.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict, get_optimizer_state_dict,
                                                    get_state_dict, set_model_state_dict, set_optimizer_state_dict,
                                                    set_state_dict)


def make_model(seed=0, norm=True):
    """With norm, a BatchNorm (buffers); without, a model whose DDP training equals one process's on the
    global batch (BatchNorm's statistics would be per rank)."""
    ddpc.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.BatchNorm1d(8) if norm else nn.Tanh(), nn.Linear(8, 3))


def batch(step, rank=0, world=1, per_rank=4):
    """Samples of step for rank: rows [rank*per_rank, (rank+1)*per_rank) of the step's global batch."""
    rng = np.random.default_rng(100 + step)
    x = rng.standard_normal((per_rank * world, 6)).astype(np.float32)
    y = rng.integers(0, 3, per_rank * world)
    rows = slice(rank * per_rank, (rank + 1) * per_rank)
    return ddpc.from_numpy(x[rows].copy()), ddpc.from_numpy(y[rows].copy())


def train(model, optimizer, steps, start=0, rank=0, world=1, per_rank=4):
    for step in range(start, start + steps):
        x, y = batch(step, rank, world, per_rank)
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()


def flat_params(model):
    return np.concatenate([v.detach().numpy().ravel() for v in get_model_state_dict(model).values()])


def test_names_drop_wrapper_prefixes_and_optimizer_state_is_keyed_by_them():
    model = make_model()
    optimizer = ddpc.optim.AdamW(model.parameters(), lr=0.01)
    model_sd, optim_sd = get_state_dict(model, optimizer)
    assert list(model_sd) == ["0.weight", "0.bias", "2.weight", "2.bias", "2.running_mean", "2.running_var",
                              "2.num_batches_tracked", "3.weight", "3.bias"]
    # the optimizer had not stepped: its state was made (at lr 0, the parameters unchanged)
    assert set(optim_sd["state"]) == {"0.weight", "0.bias", "2.weight", "2.bias", "3.weight", "3.bias"}
    assert optim_sd["param_groups"][0]["params"] == ["0.weight", "0.bias", "2.weight", "2.bias", "3.weight", "3.bias"]
    assert optim_sd["param_groups"][0]["lr"] == 0.01
    assert np.array_equal(flat_params(model), flat_params(make_model()))
    assert all(p.grad is None for p in model.parameters())


def test_flattened_optimizer_state_submodules_frozen_and_offload():
    model = make_model()
    model[0].weight.requires_grad_(False)
    optimizer = ddpc.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1, momentum=0.9)
    train(model, optimizer, 2)
    options = StateDictOptions(flatten_optimizer_state_dict=True, ignore_frozen_params=True, cpu_offload=True)
    model_sd, optim_sd = get_state_dict(model, optimizer, options=options)
    assert "0.weight" not in model_sd and "0.bias" in model_sd
    assert "state.3.weight.momentum_buffer" in optim_sd and optim_sd["param_groups.3.weight.lr"] == 0.1
    assert set(get_model_state_dict(model, submodules=[model[3]])) == {"3.weight", "3.bias"}
    sub = get_model_state_dict(model, submodules=[model[3]], options=StateDictOptions(keep_submodule_prefixes=False))
    assert set(sub) == {"weight", "bias"}

    other = make_model(seed=1)
    other[0].weight.requires_grad_(False)
    other_optimizer = ddpc.optim.SGD([p for p in other.parameters() if p.requires_grad], lr=0.5, momentum=0.9)
    set_state_dict(other, other_optimizer, model_state_dict=model_sd, optim_state_dict=optim_sd, options=options)
    assert other_optimizer.param_groups[0]["lr"] == 0.1
    assert not np.array_equal(model[0].weight.numpy(), other[0].weight.numpy())  # frozen, not loaded
    for a, b in zip(optimizer.param_groups[0]["params"], other_optimizer.param_groups[0]["params"]):
        assert np.array_equal(a.detach().numpy(), b.detach().numpy())
        assert np.array_equal(optimizer.state[a]["momentum_buffer"].numpy(),
                              other_optimizer.state[b]["momentum_buffer"].numpy())


def test_set_model_state_dict_reports_missing_and_unexpected_keys():
    model = make_model()
    state = get_model_state_dict(make_model(seed=3))
    del state["3.bias"]
    state["extra.weight"] = ddpc.zeros(2)
    with pytest.raises(RuntimeError, match=r"missing keys \['3.bias'\], unexpected keys \['extra.weight'\]"):
        set_model_state_dict(model, state)
    result = set_model_state_dict(model, state, options=StateDictOptions(strict=False))
    assert result.missing_keys == ["3.bias"] and result.unexpected_keys == ["extra.weight"]
    assert np.array_equal(model[0].weight.numpy(), make_model(seed=3)[0].weight.numpy())


def test_round_trip_in_one_process_resumes_training_exactly(tmp_path):
    model = make_model()
    optimizer = ddpc.optim.Adam(model.parameters(), lr=0.01)
    train(model, optimizer, 3)
    model_sd, optim_sd = get_state_dict(model, optimizer)
    dcp.save({"model": model_sd, "optim": optim_sd, "extra": {"epoch": 3, "history": [0.5, 0.25]}},
             checkpoint_id=tmp_path)
    assert sorted(os.listdir(tmp_path)) == [".metadata", "__0_0.distcp"]
    train(model, optimizer, 3, start=3)

    resumed = make_model(seed=7)
    resumed_optimizer = ddpc.optim.Adam(resumed.parameters(), lr=0.5)
    model_sd, optim_sd = get_state_dict(resumed, resumed_optimizer)
    state = {"model": model_sd, "optim": optim_sd, "extra": {"epoch": 0, "history": [0.0, 0.0]}}
    dcp.load(state, checkpoint_id=tmp_path)
    assert state["extra"] == {"epoch": 3, "history": [0.5, 0.25]}
    set_state_dict(resumed, resumed_optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    train(resumed, resumed_optimizer, 3, start=3)
    assert np.array_equal(flat_params(model), flat_params(resumed))


@pytest.mark.parametrize("make_optimizer", [lambda params: ddpc.optim.SGD(params, lr=0.1, momentum=0.9),
                                            lambda params: ddpc.optim.Adam(params, lr=0.01)], ids=["SGD", "Adam"])
def test_stateful_values_are_saved_and_loaded_through_their_state_dicts(tmp_path, make_optimizer):
    # Adam's state holds an int step under each parameter's int key: it loads under the key's string, as
    # PyTorch's flattening keys it, and load_state_dict takes it from there
    model = make_model()
    optimizer = make_optimizer(model.parameters())
    train(model, optimizer, 2)
    dcp.save({"model": model, "optim": optimizer}, storage_writer=dcp.FileSystemWriter(tmp_path))
    other = make_model(seed=5)
    other_optimizer = make_optimizer(other.parameters())
    train(other, other_optimizer, 1)  # so its optimizer has state tensors to load into
    dcp.load({"model": other, "optim": other_optimizer}, storage_reader=dcp.FileSystemReader(tmp_path))
    train(model, optimizer, 2, start=2)
    train(other, other_optimizer, 2, start=2)
    assert np.array_equal(flat_params(model), flat_params(other))


def test_async_save_copies_first_and_its_future_waits(tmp_path):
    model = make_model()
    state = get_model_state_dict(model)
    before = {k: v.numpy().copy() for k, v in state.items()}
    future = dcp.async_save({"model": state}, checkpoint_id=tmp_path)
    with ddpc.no_grad():
        model[0].weight.add_(1.0)  # after the call returns: not in the checkpoint
    metadata = future.result(timeout=60)
    assert isinstance(metadata, dcp.Metadata) and tuple(metadata.state_dict_metadata["model.0.weight"].size) == (8, 6)
    target = {"model": get_model_state_dict(make_model(seed=9))}
    dcp.load(target, checkpoint_id=tmp_path)
    for k, v in target["model"].items():
        assert np.array_equal(v.numpy(), before[k]), k


def test_load_fills_views_and_keeps_them_views(tmp_path):
    dcp.save({"a": ddpc.arange(6.0).reshape(2, 3), "b": ddpc.arange(4.0)}, checkpoint_id=tmp_path)
    base, whole = ddpc.zeros(3, 2), ddpc.zeros(10)
    state = {"a": base.T, "b": whole[3:7]}  # a strided view, and a slice of a larger tensor
    dcp.load(state, checkpoint_id=tmp_path)
    assert np.array_equal(base.numpy(), [[0, 3], [1, 4], [2, 5]])
    assert np.array_equal(whole.numpy(), [0, 0, 0, 0, 1, 2, 3, 0, 0, 0])


def test_load_errors_are_clear(tmp_path):
    with pytest.raises(ValueError, match="give checkpoint_id"):
        dcp.save({"a": ddpc.ones(2)})
    with pytest.raises(TypeError, match="state_dict must be a dict"):
        dcp.save([ddpc.ones(2)], checkpoint_id=tmp_path)
    with pytest.raises(dcp.CheckpointException, match="holds no distributed checkpoint"):
        dcp.load({"a": ddpc.ones(2)}, checkpoint_id=tmp_path / "nothing")
    dcp.save({"a": ddpc.ones(2, 3), "n": 4}, checkpoint_id=tmp_path)
    with pytest.raises(dcp.CheckpointException, match=r"'a' has shape \(2, 3\) in the checkpoint, \(3, 2\)"):
        dcp.load({"a": ddpc.ones(3, 2)}, checkpoint_id=tmp_path)
    with pytest.raises(dcp.CheckpointException, match="'a' is float32 in the checkpoint, float64"):
        dcp.load({"a": ddpc.ones(2, 3, dtype=ddpc.float64)}, checkpoint_id=tmp_path)
    with pytest.raises(dcp.CheckpointException, match="'b' is not in the checkpoint"):
        dcp.load({"b": ddpc.ones(2)}, checkpoint_id=tmp_path)
    with pytest.raises(dcp.CheckpointException, match="'a' is a tensor in the checkpoint"):
        dcp.load({"a": 0}, checkpoint_id=tmp_path)
    with pytest.raises(dcp.CheckpointException, match="overwrite=False"):
        dcp.save({"a": ddpc.ones(2)}, storage_writer=dcp.FileSystemWriter(tmp_path, overwrite=False))
    with open(tmp_path / "__0_0.distcp", "r+b") as f:
        f.truncate(8)
    with pytest.raises(dcp.CheckpointException, match="shorter than its metadata says"):
        dcp.load({"a": ddpc.ones(2, 3)}, checkpoint_id=tmp_path)
    with pytest.raises(TypeError, match="planner must be a SavePlanner"):
        dcp.save({"a": ddpc.ones(2)}, checkpoint_id=tmp_path, planner=object())



def test_deprecated_save_state_dict_and_default_planners(tmp_path):
    # the FSDP T5 example's checkpoint handler: dist_cp.save_state_dict(..., planner=DefaultSavePlanner())
    from ddpc.distributed.checkpoint.default_planner import DefaultLoadPlanner, DefaultSavePlanner

    state = {"model": {"w": ddpc.arange(6.0).reshape(2, 3)}, "step": 7}
    with pytest.warns(FutureWarning, match="save_state_dict is deprecated"):
        dcp.save_state_dict(state_dict=state, storage_writer=dcp.FileSystemWriter(tmp_path),
                            planner=DefaultSavePlanner())
    back = {"model": {"w": ddpc.zeros(2, 3)}, "step": 0}
    with pytest.warns(FutureWarning, match="load_state_dict is deprecated"):
        dcp.load_state_dict(state_dict=back, storage_reader=dcp.FileSystemReader(tmp_path),
                            planner=DefaultLoadPlanner())
    assert back["model"]["w"].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]] and back["step"] == 7
    dcp.load(back, checkpoint_id=tmp_path, planner=DefaultLoadPlanner())
    with pytest.raises(TypeError, match="planner must be a LoadPlanner"):
        dcp.load(back, checkpoint_id=tmp_path, planner=DefaultSavePlanner())

# ---- several ranks -------------------------------------------------------------------------

def _ddp_save_worker(rank, path, steps):
    """Trains a DDP model on 2 ranks (a global batch of 8) and saves it with dcp; returns what each rank wrote."""
    import ddpc.distributed as dist

    dist.init_process_group("cpu")
    model = nn.parallel.DistributedDataParallel(make_model(norm=False))
    optimizer = ddpc.optim.Adam(model.parameters(), lr=0.01)
    train(model, optimizer, steps, rank=rank, world=2)
    model_sd, optim_sd = get_state_dict(model, optimizer)
    dcp.save({"model": model_sd, "optim": optim_sd, "step": steps}, checkpoint_id=path)
    written = os.path.getsize(os.path.join(path, f"__{rank}_0.distcp"))
    dist.destroy_process_group()
    return written, flat_params(model)


def _ddp_resume_worker(rank, path, steps, broadcast):
    """Loads the checkpoint on this group (of any size), then trains `steps` more with a global batch of 8."""
    import ddpc.distributed as dist

    dist.init_process_group("cpu")
    world = dist.get_world_size()
    model = nn.parallel.DistributedDataParallel(make_model(seed=rank + 11, norm=False), init_sync=False)
    optimizer = ddpc.optim.Adam(model.parameters(), lr=0.5)
    model_sd, optim_sd = get_state_dict(model, optimizer)
    if broadcast:  # only rank 0 reads the files; the others receive its state dicts
        state = {"model": model_sd, "optim": optim_sd, "step": 0}
        if rank == 0:
            dcp.load(state, checkpoint_id=path, no_dist=True)
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"],
                       options=StateDictOptions(broadcast_from_rank0=True))
        start = state["step"] if rank == 0 else None
        box = [start]
        dist.broadcast_object_list(box, src=0)
        start = box[0]
    else:
        state = {"model": model_sd, "optim": optim_sd, "step": 0}
        dcp.load(state, checkpoint_id=path)
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        start = state["step"]
    train(model, optimizer, steps, start=start, rank=rank, world=world, per_rank=8 // world)
    dist.destroy_process_group()
    return flat_params(model)


def _failing_load_worker(rank, path):
    import time

    import ddpc.distributed as dist

    dist.init_process_group("cpu")
    shape = (8, 6) if rank == 0 else (6, 8)  # rank 1 asks for the wrong shape
    start = time.monotonic()
    try:
        dcp.load({"model": {"0.weight": ddpc.zeros(*shape)}}, checkpoint_id=path)
        outcome = "returned"
    except dcp.CheckpointException as e:
        outcome = f"{sorted(e.failures)} {e}"
    dist.destroy_process_group()
    return outcome, time.monotonic() - start


def test_ddp_checkpoint_is_written_once_and_resumes_on_another_world_size(tmp_path):
    path = str(tmp_path / "ckpt")
    (w0, saved0), (w1, saved1) = ddpc.spawn(_ddp_save_worker, args=(path, 3), nprocs=2)
    assert np.array_equal(saved0, saved1)
    # The 4 parameters, their two Adam moments and step counts: replicated, they are written once (the two
    # files together hold one copy, plus at most 64 bytes of alignment per tensor) and the writing is
    # shared (neither file holds most of it).
    tensors, model_bytes = 4 * 4, saved0.size * 4
    assert 3 * model_bytes <= w0 + w1 <= 3 * model_bytes + 64 * tensors, (w0, w1, model_bytes)
    assert max(w0, w1) < 0.7 * (w0 + w1), (w0, w1)

    # the reference: one process, the whole global batch of 8, six steps
    model = make_model(norm=False)
    optimizer = ddpc.optim.Adam(model.parameters(), lr=0.01)
    train(model, optimizer, 3, per_rank=8)
    assert np.allclose(flat_params(model), saved0, atol=1e-5)
    train(model, optimizer, 3, start=3, per_rank=8)
    expected = flat_params(model)

    for nprocs, broadcast in ((1, False), (2, True), (4, False)):
        results = ddpc.spawn(_ddp_resume_worker, args=(path, 3, broadcast), nprocs=nprocs)
        for r in results:
            assert np.allclose(r, expected, atol=1e-5), (nprocs, broadcast, np.abs(r - expected).max())


def test_a_failure_on_one_rank_is_an_error_on_every_rank(tmp_path):
    path = str(tmp_path / "ckpt")
    dcp.save({"model": get_model_state_dict(make_model())}, checkpoint_id=path)
    results = ddpc.spawn(_failing_load_worker, args=(path,), nprocs=2)
    for outcome, seconds in results:
        assert outcome.startswith("[1] distributed checkpoint load failed on rank(s) [1]"), outcome
        assert "has shape (8, 6) in the checkpoint, (6, 8)" in outcome
        assert seconds < 30  # at once, not after the collectives' timeout


# ---- DTensors: each rank writes its own part, and loads what it holds however the parts were cut -------

DTENSOR_SHAPES = {"rows": (7, 3), "cols": (2, 5), "replicated": (4,), "scalar": ()}


def _dtensor_value(key):
    shape = DTENSOR_SHAPES[key]
    return (np.arange(int(np.prod(shape)), dtype=np.float32) + 100 * len(key)).reshape(shape)


def _saved_placements(key):
    from ddpc.distributed.tensor import Replicate, Shard

    return [{"rows": Shard(0), "cols": Shard(1)}.get(key, Replicate())]


def _dtensor_save_worker(rank, world, path):
    import ddpc.distributed as dist
    from ddpc.distributed.tensor import distribute_tensor, init_device_mesh

    dist.init_process_group("cpu")
    mesh = init_device_mesh("cpu", (world,))
    state = {"model": {k: distribute_tensor(ddpc.from_numpy(_dtensor_value(k)), mesh, _saved_placements(k))
                       for k in DTENSOR_SHAPES}, "plain": ddpc.arange(3.0), "step": 5}
    dcp.save(state, checkpoint_id=path)
    dist.destroy_process_group()


def _dtensor_load_worker(rank, world, path):
    """Loads into DTensors split by rows over this world (a 0-d one replicated)."""
    import ddpc.distributed as dist
    from ddpc.distributed.tensor import Shard, distribute_tensor, init_device_mesh

    dist.init_process_group("cpu")
    mesh = init_device_mesh("cpu", (world,))
    state = {"model": {k: distribute_tensor(ddpc.zeros(*shape), mesh, [Shard(0)] if shape else None)
                       for k, shape in DTENSOR_SHAPES.items()}, "plain": ddpc.zeros(3), "step": 0}
    dcp.load(state, checkpoint_id=path)
    out = {k: (v.to_local().numpy().copy(), v.full_tensor().numpy().copy()) for k, v in state["model"].items()}
    dist.destroy_process_group()
    return out, state["step"], state["plain"].numpy().copy()


@pytest.mark.parametrize("save_world, load_worlds", [(2, [1, 3]), (3, [2])])
def test_dtensors_are_saved_by_part_and_load_on_other_world_sizes(tmp_path, save_world, load_worlds):
    path = str(tmp_path / "ckpt")
    ddpc.spawn(_dtensor_save_worker, args=(save_world, path), nprocs=save_world)
    items = ddpc.load(os.path.join(path, ".metadata"))["items"]
    # the metadata holds each part's offsets and sizes and the global shape; rank r wrote its rows, which
    # torch.chunk's rule gives (ceil(7 / ranks) each, the last rank fewer)
    per = -(-7 // save_world)
    starts = range(0, 7, per)
    assert items["model.rows"][:3] == ("tensor", "float32", [7, 3])
    assert [(c[0], c[1], c[2]) for c in items["model.rows"][3]] == [
        ([s, 0], [min(per, 7 - s), 3], f"__{r}_0.distcp") for r, s in enumerate(starts)]
    assert sorted(c[0] for c in items["model.cols"][3]) == [[0, s] for s in range(0, 5, -(-5 // save_world))]
    assert len(items["model.replicated"][3]) == 1 and len(items["model.scalar"][3]) == 1  # written once
    for world in load_worlds:
        for rank, (values, step, plain) in enumerate(ddpc.spawn(_dtensor_load_worker, args=(world, path),
                                                                 nprocs=world)):
            assert step == 5 and plain.tolist() == [0.0, 1.0, 2.0]
            for k, (local, full) in values.items():
                np.testing.assert_array_equal(full, _dtensor_value(k), err_msg=k)
                rows = -(-DTENSOR_SHAPES[k][0] // world) if DTENSOR_SHAPES[k] else None
                expected = _dtensor_value(k)[rank * rows:][:rows] if rows else _dtensor_value(k)
                np.testing.assert_array_equal(local, expected, err_msg=k)
    # into plain tensors: the full values, in one process without a group
    state = {"model": {k: ddpc.zeros(*shape) for k, shape in DTENSOR_SHAPES.items()}}
    dcp.load(state, checkpoint_id=path)
    for k, v in state["model"].items():
        np.testing.assert_array_equal(v.numpy(), _dtensor_value(k), err_msg=k)

    # a checkpoint missing one of a tensor's parts is an error, not zeros
    meta = ddpc.load(os.path.join(path, ".metadata"))
    meta["items"]["model.rows"][3].pop()
    ddpc.save(meta, os.path.join(path, ".metadata"))
    with pytest.raises(dcp.CheckpointException, match=r"holds \d+ of the 21 elements of 'model.rows'"):
        dcp.load({"model": {"rows": ddpc.zeros(7, 3)}}, checkpoint_id=path)



def _whole_dtensors_worker(rank, world, path):
    """Saves DTensors inside values kept whole (a tuple, a list without a tensor), on a mesh and on a slice
    of a 2-d one, whose Replicate values differ by rank; loads them back, and unpickles where it cannot."""
    import io

    import ddpc.distributed as dist
    from ddpc.distributed.tensor import Replicate, Shard, distribute_tensor, init_device_mesh

    dist.init_process_group("cpu")
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
    grid = init_device_mesh("cpu", (1, world), mesh_dim_names=("pp", "dp"))
    rows = distribute_tensor(ddpc.arange(4.0), mesh, [Shard(0)])
    mine = distribute_tensor(ddpc.full((3,), 10.0 * rank), grid["dp"], [Replicate()], src_data_rank=None)
    metadata = dcp.save({"pair": (rows, mine), "mixed": [(mine,), 3], "t": rows}, checkpoint_id=path)
    state = {"pair": None, "mixed": None, "t": distribute_tensor(ddpc.zeros(4), mesh, [Shard(0)])}
    dcp.load(state, checkpoint_id=path)
    loaded_rows, loaded_mine = state["pair"]
    out = {"kinds": {k: type(v).__name__ for k, v in metadata.state_dict_metadata.items()},
           "rows": (loaded_rows.placements, loaded_rows.to_local().tolist(), tuple(loaded_rows.shape)),
           "mine": (loaded_mine.placements, loaded_mine.to_local().tolist(), loaded_mine.full_tensor().tolist()),
           # of the groups of the same ranks (the mesh's and the grid's "dp"), the latest made
           "meshes": (loaded_rows.device_mesh == mesh, loaded_rows.device_mesh.get_group() is grid.get_group("dp"),
                      loaded_mine.device_mesh == grid["dp"], loaded_mine.device_mesh.get_coordinate()),
           "mixed": (state["mixed"][0][0].to_local().tolist(), state["mixed"][1]),
           "t": state["t"].to_local().tolist()}

    def pickled(value):
        buf = io.BytesIO()
        ddpc.save(value, buf)
        return buf.getvalue()

    # rank 0's part of 3 rows (2 of them) is not rank 1's share (1 row)
    box = [pickled(distribute_tensor(ddpc.arange(3.0), mesh, [Shard(0)]))]
    dist.broadcast_object_list(box, src=0)
    try:
        out["uneven"] = ddpc.load(io.BytesIO(box[0])).to_local().tolist()
    except ValueError as e:
        out["uneven"] = str(e)
    out["blob"] = pickled((rows, mine))  # for the parent, which has no process group
    dist.destroy_process_group(grid.get_group("pp"))  # the mesh loses a group in this process
    try:
        ddpc.load(io.BytesIO(out["blob"]))
        out["lost group"] = None
    except RuntimeError as e:
        out["lost group"] = str(e)
    dist.destroy_process_group()
    return out


@pytest.mark.parametrize("world", [1, 2])
def test_dtensors_in_values_kept_whole_load_as_the_writing_rank_held_them(tmp_path, world):
    results = ddpc.spawn(_whole_dtensors_worker, args=(world, str(tmp_path / "ckpt")), nprocs=world)
    from ddpc.distributed.tensor import Replicate, Shard

    for rank, out in enumerate(results):
        assert out["kinds"] == {"pair": "BytesStorageMetadata", "mixed": "BytesStorageMetadata",
                                "t": "TensorStorageMetadata"}
        # one rank wrote each value (as PyTorch picks: "pair" rank 0, then "mixed" the rank with the least to
        # write); every rank loads its copy: that rank's local tensors, on this rank's mesh
        assert out["rows"] == ((Shard(0),), [0.0, 1.0, 2.0, 3.0][:4 // world], (4,))
        assert out["mine"] == ((Replicate(),), [0.0] * 3, [0.0] * 3)
        assert out["meshes"] == (True, True, True, (rank,))
        assert out["mixed"] == ([10.0 * (world - 1)] * 3, 3)
        assert out["t"] == [0.0, 1.0, 2.0, 3.0][rank * 4 // world:][:4 // world]  # a tensor by its parts
        if rank:
            assert out["uneven"].startswith("cannot unpickle a DTensor on rank 1: DTensor.from_local: a local "
                                            "tensor of shape (2,) is not rank 1's share of a tensor of shape (3,)")
        else:
            assert out["uneven"] == [0.0, 1.0, 2.0][:-(-3 // world)]
        if world == 1:  # the default group is the mesh's group of every rank
            assert out["lost group"] is None
        else:
            assert out["lost group"] == (f"cannot unpickle a DeviceMesh of ranks [[0, 1]]: this process has no "
                                         f"process group of ranks [{rank}] (the mesh's dimension 0 through rank "
                                         f"{rank}); make the mesh in this process first, as where it was pickled "
                                         "(init_device_mesh, DeviceMesh or DeviceMesh.from_group)")
    with pytest.raises(RuntimeError, match=r"cannot unpickle a DeviceMesh of ranks \[0(, 1)?\]: this process has "
                                           "no default process group"):
        ddpc.load(io.BytesIO(results[0]["blob"]))
    assert ddpc.serialization.get_safe_globals() == []  # DTensors load without the user allowing them


def _int_keys_worker(rank, world, path):
    """Saves a state dict with keys that are not strings (an optimizer state's int keys, others nested, at
    the top level) and loads it back into one with the same keys; and without flattening."""
    import ddpc.distributed as dist
    from ddpc.distributed.checkpoint.default_planner import DefaultLoadPlanner, DefaultSavePlanner

    def plain(obj):
        if isinstance(obj, dict):
            return {k: plain(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [plain(v) for v in obj]
        return obj.tolist() if isinstance(obj, ddpc.Tensor) else obj

    dist.init_process_group("cpu")
    state = {"optim": {"state": {0: {"step": 3, "exp_avg": ddpc.ones(2)}, 1: {"step": 4}},
                       "param_groups": [{"params": [0, 1], "lr": 0.1}]},
             "table": {(1, 2): "pair", None: "none", 2.5: "float"}, "rows": [{0: "in a list"}], 5: "five",
             7: ddpc.tensor([7.0])}
    metadata = dcp.save(state, checkpoint_id=f"{path}/flat")
    exp_avg, seven = ddpc.zeros(2), ddpc.zeros(1)
    target = {"optim": {"state": {0: {"step": 0, "exp_avg": exp_avg}, 1: {"step": 0}},
                        "param_groups": [{"params": [], "lr": 0.0}]},
              "table": {(1, 2): "", None: "", 2.5: ""}, "rows": [{0: ""}], 5: "", 7: seven}
    dcp.load(target, checkpoint_id=f"{path}/flat")
    out = {"keys": sorted(metadata.state_dict_metadata), "loaded": plain(target),
           "in place": target["optim"]["state"][0]["exp_avg"] is exp_avg and target[7] is seven}
    unflattened = {5: "five", 7: ddpc.tensor([7.0]), 9: {1: "x"}}
    dcp.save(unflattened, checkpoint_id=f"{path}/unflattened", planner=DefaultSavePlanner(flatten_state_dict=False))
    target = {5: "", 7: ddpc.zeros(1), 9: None}
    dcp.load(target, checkpoint_id=f"{path}/unflattened", planner=DefaultLoadPlanner(flatten_state_dict=False))
    out["unflattened"] = plain(target)
    dist.destroy_process_group()
    return out


@pytest.mark.parametrize("world", [1, 2])
def test_keys_that_are_not_strings_are_saved_and_loaded_as_their_strings_as_in_pytorch(tmp_path, world):
    for out in ddpc.spawn(_int_keys_worker, args=(world, str(tmp_path)), nprocs=world):
        assert out["keys"] == ["5", "7", "optim.param_groups.0.lr", "optim.param_groups.0.params",
                               "optim.state.0.exp_avg", "optim.state.0.step", "optim.state.1.step", "rows.0.0",
                               "table.(1, 2)", "table.2.5", "table.None"]
        # a tensor is copied into where it is; another value goes under the key's string, beside the entry
        # (which keeps its value), and at the top level, where load replaces only the keys given, nowhere
        assert out["loaded"] == {
            "optim": {"state": {0: {"step": 0, "exp_avg": [1.0, 1.0]}, 1: {"step": 0}, "0": {"step": 3},
                                "1": {"step": 4}},
                      "param_groups": [{"params": [0, 1], "lr": 0.1}]},
            "table": {(1, 2): "", None: "", 2.5: "", "(1, 2)": "pair", "None": "none", "2.5": "float"},
            "rows": [{0: "", "0": "in a list"}], 5: "", 7: [7.0]}
        assert out["in place"]
        # without flattening, the state dict's own keys, as PyTorch's planners keep them there
        assert out["unflattened"] == {5: "five", 7: [7.0], 9: {1: "x"}}

def test_checkpoints_of_the_first_format_still_load(tmp_path):
    # version 1 recorded every tensor whole: (file, offset, bytes, dtype, shape)
    dcp.save({"w": ddpc.arange(6.0).reshape(2, 3), "n": 3}, checkpoint_id=tmp_path)
    meta = ddpc.load(tmp_path / ".metadata")
    _, dtype, shape, [(_, _, file, offset, nbytes)] = meta["items"]["w"]
    meta["version"], meta["items"]["w"] = 1, ("tensor", file, offset, nbytes, dtype, shape)
    ddpc.save(meta, tmp_path / ".metadata")
    state = {"w": ddpc.zeros(2, 3), "n": 0}
    dcp.load(state, checkpoint_id=tmp_path)
    assert state["w"].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]] and state["n"] == 3


def test_checkpoints_keyed_element_by_element_still_load(tmp_path):
    # Before ddpc flattened as PyTorch does, it keyed every list and tuple element by element
    # ("sched.milestones.0"); a state dict saved already flattened so is such a checkpoint.
    dcp.save({"sched.milestones.0": 3, "sched.milestones.1": 6, "betas.0": 0.9, "betas.1": 0.99,
              "pair.0": ddpc.ones(2), "pair.1": ddpc.full((3,), 2.0), "w": ddpc.arange(3.0)}, checkpoint_id=tmp_path)
    pair = (ddpc.zeros(2), ddpc.zeros(3))
    state = {"sched": {"milestones": [0, 0]}, "betas": (0.0, 0.0), "pair": pair, "w": ddpc.zeros(3)}
    dcp.load(state, checkpoint_id=tmp_path)
    assert state["sched"] == {"milestones": [3, 6]} and state["betas"] == (0.9, 0.99)
    assert state["pair"] is pair and pair[0].tolist() == [1.0, 1.0] and pair[1].tolist() == [2.0, 2.0, 2.0]
    assert state["w"].tolist() == [0.0, 1.0, 2.0]
    # what the same state dict saves now: the list and the tuples whole, as PyTorch keys them
    metadata = dcp.save(state, checkpoint_id=tmp_path / "now")
    assert sorted(metadata.state_dict_metadata) == ["betas", "pair", "sched.milestones", "w"]
    with pytest.raises(dcp.CheckpointException, match="two values of the state dict flatten to the key 'a.b'"):
        dcp.save({"a": {"b": 1}, "a.b": 2}, checkpoint_id=tmp_path / "clash")


def test_a_save_over_a_checkpoint_that_dies_midway_leaves_none_not_a_mixed_one(tmp_path, monkeypatch):
    """The old metadata (and the non-tensor values it holds) goes before any
    data file is rewritten: a save that dies part way cannot load as new
    tensors with the old step."""
    dcp.save({"w": ddpc.ones(2), "step": 100}, checkpoint_id=tmp_path)

    def dies(self, plan, planner):
        raise RuntimeError("killed while writing")

    monkeypatch.setattr(dcp.FileSystemWriter, "write_data", dies)
    with pytest.raises(dcp.CheckpointException, match="killed while writing"):
        dcp.save({"w": ddpc.full((2,), 2.0), "step": 200}, checkpoint_id=tmp_path)
    with pytest.raises(dcp.CheckpointException, match="holds no distributed checkpoint"):
        dcp.load({"w": ddpc.zeros(2), "step": 0}, checkpoint_id=tmp_path)
    monkeypatch.undo()
    dcp.save({"w": ddpc.full((2,), 3.0), "step": 300}, checkpoint_id=tmp_path)
    state = {"w": ddpc.zeros(2), "step": 0}
    dcp.load(state, checkpoint_id=tmp_path)
    assert state["w"].tolist() == [3.0, 3.0] and state["step"] == 300

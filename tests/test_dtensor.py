"""ddpc.distributed.tensor: DTensor over a 1-d DeviceMesh (Shard and Replicate
placements, torch.chunk's uneven shards), distribute_tensor, from_local,
full_tensor, redistribute, copy_, and the errors; and over a 2-d mesh
(placements applied in mesh order, HSDP's [Replicate(), Shard(0)] among them).

Ranks are real processes started by ddpc.spawn on the cpu backend.
"""

import numpy as np
import pytest

import ddpc
from ddpc.distributed.tensor import Replicate, Shard, _shard_range


@pytest.mark.parametrize("rows, ranks, lengths", [(10, 4, [3, 3, 3, 1]), (5, 4, [2, 2, 1, 0]), (6, 4, [2, 2, 2, 0]),
                                                   (2, 4, [1, 1, 0, 0]), (0, 3, [0, 0, 0]), (7, 7, [1] * 7),
                                                   (8, 2, [4, 4])])
def test_shards_follow_torch_chunk(rows, ranks, lengths):
    ranges = [_shard_range(rows, ranks, r) for r in range(ranks)]
    assert [n for _, n in ranges] == lengths
    assert [s for s, _ in ranges] == [min(sum(lengths[:r]), rows) for r in range(ranks)]


def test_placements():
    assert Shard(1) == Shard(1) and Shard(0) != Shard(1) and Replicate() == Replicate() and Shard(0) != Replicate()
    assert len({Shard(0), Shard(0), Replicate(), Replicate()}) == 2
    assert repr(Shard(0)) == "Shard(dim=0)" and repr(Replicate()) == "Replicate()"
    assert Shard(2).is_shard() and Shard(2).is_shard(2) and not Shard(2).is_shard(0) and not Shard(2).is_replicate()
    assert Replicate().is_replicate() and not Replicate().is_shard() and not Replicate().is_partial()
    with pytest.raises(TypeError, match="dim must be an int"):
        Shard("0")


def test_without_a_mesh_the_error_says_how_to_give_one():
    from ddpc.distributed.tensor import DTensor, distribute_tensor

    with pytest.raises(RuntimeError, match="no device mesh is currently active"):
        distribute_tensor(ddpc.ones(2))
    with pytest.raises(RuntimeError, match="no device mesh is currently active"):
        DTensor.from_local(ddpc.ones(2))


def full_value(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def worker(rank, world):
    import ddpc.distributed as dist
    from ddpc.distributed.device_mesh import DeviceMesh
    from ddpc.distributed.tensor import DTensor, distribute_tensor, init_device_mesh

    dist.init_process_group("cpu")
    mesh = init_device_mesh("cpu", (world,))
    a = ddpc.from_numpy(full_value((5, 3)))  # 5 rows over 3 ranks: 2, 2, 1
    out = {}
    d = distribute_tensor(a, mesh, [Shard(0)])
    out["shard0"] = (d.to_local().numpy().copy(), tuple(d.shape), d.size(), d.size(1), d.ndim, d.dtype, d.device.type,
                     d.placements, d.device_mesh is mesh)
    out["full"] = d.full_tensor().numpy().copy()
    d1 = distribute_tensor(a, mesh, [Shard(-1)])  # a negative dim counts from the end
    out["shard1"] = (d1.placements, d1.to_local().numpy().copy(), d1.full_tensor().numpy().copy())
    r = d.redistribute(placements=[Replicate()])
    out["replicate"] = (r.placements, r.to_local().numpy().copy())
    back = r.redistribute(mesh, [Shard(0)])
    out["back"] = back.to_local().numpy().copy()
    out["shard0_to_1"] = d.redistribute(placements=[Shard(1)]).to_local().numpy().copy()
    out["same"] = d.redistribute(placements=[Shard(0)]) is d

    # the source rank's values (rank 0 by default), or each rank's own
    mine = ddpc.full((4, 2), float(rank))
    out["src0"] = distribute_tensor(mine, mesh, [Replicate()]).to_local().numpy().copy()
    out["own"] = distribute_tensor(mine, mesh, [Replicate()], src_data_rank=None).to_local().numpy().copy()
    out["src1"] = distribute_tensor(mine, mesh, [Shard(0)], src_data_rank=1).full_tensor().numpy().copy()

    # from_local: even shards by default, the global shape given for uneven ones; `with mesh:` as the default mesh
    with mesh:
        even = DTensor.from_local(ddpc.full((2, 3), float(rank)), placements=[Shard(0)])
        out["even"] = (tuple(even.shape), even.full_tensor().numpy().copy())
        rows = _shard_range(5, world, rank)
        uneven = DTensor.from_local(ddpc.from_numpy(full_value((5, 3))[rows[0]:rows[0] + rows[1]].copy()),
                                    placements=[Shard(0)], shape=(5, 3), stride=(3, 1))
        out["uneven"] = uneven.full_tensor().numpy().copy()
        out["default_replicate"] = DTensor.from_local(ddpc.ones(3), run_check=True).placements

    # copy_ redistributes its source to the target's placements
    target = distribute_tensor(ddpc.zeros(5, 3), mesh, [Shard(0)])
    target.copy_(r)
    out["copied"] = target.to_local().numpy().copy()

    # a mesh of a subgroup's ranks, made without a collective
    sub, _ = dist.new_subgroups_by_enumeration([[0, 2], [1]])
    sub_mesh = DeviceMesh.from_group(sub, "cpu")
    out["sub"] = (sub_mesh.mesh.tolist(), sub_mesh.get_local_rank(), sub_mesh.size())
    if rank != 1:
        out["sub_full"] = distribute_tensor(a, sub_mesh, [Shard(0)]).to_local().shape

    errors = {}
    wide = DeviceMesh("cpu", np.arange(world).reshape(world, 1))
    for name, make in {
        "mesh_2d_one_placement": lambda: distribute_tensor(a, wide, [Shard(0)]),
        "placements_length": lambda: distribute_tensor(a, mesh, [Shard(0), Replicate()]),
        "shard_dim": lambda: distribute_tensor(a, mesh, [Shard(2)]),
        "partial": lambda: distribute_tensor(a, mesh, [object()]),
        "not_a_mesh": lambda: distribute_tensor(a, "cpu", [Shard(0)]),
        "wrong_local": lambda: DTensor.from_local(ddpc.ones(2, 3), mesh, [Shard(0)], shape=(5, 3)),
        "stride": lambda: DTensor.from_local(ddpc.ones(2, 3), mesh, [Shard(0)], stride=(1, 2)),
        "from_local_dtensor": lambda: DTensor.from_local(d, mesh),
        "copy_tensor": lambda: target.copy_(a),
        "copy_shape": lambda: target.copy_(distribute_tensor(ddpc.zeros(6, 3), mesh, [Shard(0)])),
        "arithmetic": lambda: d.sum(),
        "other_placements": lambda: distribute_tensor(d, mesh, [Replicate()]),
        "non_leaf": lambda: distribute_tensor(ddpc.ones(2, requires_grad=True) * 2, mesh),
        "redistribute_mesh": lambda: d.redistribute(sub_mesh, [Shard(0)]),
    }.items():
        try:
            make()
            errors[name] = None
        except Exception as e:
            errors[name] = (type(e).__name__, str(e))
    out["errors"] = errors
    dist.destroy_process_group()
    return out


def test_dtensor_on_three_ranks():
    world = 3
    a = full_value((5, 3))
    starts = [0, 2, 4]
    for rank, r in enumerate(ddpc.spawn(worker, args=(world,), nprocs=world)):
        local, shape, size, size1, ndim, dtype, device, placements, same_mesh = r["shard0"]
        np.testing.assert_array_equal(local, a[starts[rank]:starts[rank] + 2])  # rank 2 gets the last row
        assert (shape, tuple(size), size1, ndim, dtype, device, placements, same_mesh) == (
            (5, 3), (5, 3), 3, 2, ddpc.float32, "cpu", (Shard(0),), True)
        np.testing.assert_array_equal(r["full"], a)
        assert r["shard1"][0] == (Shard(1),)
        np.testing.assert_array_equal(r["shard1"][1], a[:, rank:rank + 1])
        np.testing.assert_array_equal(r["shard1"][2], a)
        assert r["replicate"][0] == (Replicate(),)
        np.testing.assert_array_equal(r["replicate"][1], a)
        np.testing.assert_array_equal(r["back"], a[starts[rank]:starts[rank] + 2])
        np.testing.assert_array_equal(r["shard0_to_1"], a[:, rank:rank + 1])
        assert r["same"]
        np.testing.assert_array_equal(r["src0"], np.zeros((4, 2)))
        np.testing.assert_array_equal(r["own"], np.full((4, 2), rank))
        np.testing.assert_array_equal(r["src1"], np.ones((4, 2)))
        assert r["even"][0] == (6, 3)
        np.testing.assert_array_equal(r["even"][1], np.repeat(np.arange(3.0), 2)[:, None] * np.ones((1, 3)))
        np.testing.assert_array_equal(r["uneven"], a)
        assert r["default_replicate"] == (Replicate(),)
        np.testing.assert_array_equal(r["copied"], a[starts[rank]:starts[rank] + 2])
        assert r["sub"] == (([0, 2], 0 if rank == 0 else 1, 2) if rank != 1 else ([1], 0, 1))
        if rank != 1:
            assert tuple(r["sub_full"]) == ((3, 3) if rank == 0 else (2, 3))

        e = r["errors"]
        assert e["mesh_2d_one_placement"][0] == "ValueError" and "device_mesh.ndim: 2" in \
            e["mesh_2d_one_placement"][1]
        assert e["placements_length"][0] == "ValueError" and "same length as `device_mesh.ndim`" in \
            e["placements_length"][1]
        assert e["shard_dim"][0] == "ValueError" and "Shard(dim=2) is out of range" in e["shard_dim"][1]
        assert e["partial"][0] == "NotImplementedError" and "Shard(dim) and Replicate()" in e["partial"][1]
        assert e["not_a_mesh"][0] == "TypeError" and "DeviceMesh" in e["not_a_mesh"][1]
        if rank == 2:  # the shares of 5 rows are 2, 2 and 1: two rows fit ranks 0 and 1
            assert e["wrong_local"][0] == "ValueError" and "rank 2's share" in e["wrong_local"][1]
        else:
            assert e["wrong_local"] is None
        assert e["stride"][0] == "ValueError" and "row-major" in e["stride"][1]
        assert e["from_local_dtensor"][0] == "RuntimeError"
        assert e["copy_tensor"][0] == "TypeError" and "make the source a DTensor" in e["copy_tensor"][1]
        assert e["copy_shape"][0] == "RuntimeError" and "(6, 3)" in e["copy_shape"][1]
        assert e["arithmetic"][0] == "AttributeError" and "to_local()" in e["arithmetic"][1]
        assert e["other_placements"][0] == "ValueError" and "redistribute" in e["other_placements"][1]
        assert e["non_leaf"][0] == "RuntimeError" and "leaf" in e["non_leaf"][1]
        assert e["redistribute_mesh"][0] == "NotImplementedError" and "another device mesh" in \
            e["redistribute_mesh"][1]


def worker_2d(rank):
    """On a (2, 2) mesh over 4 ranks: each layout's local part and full tensor, redistribution between them."""
    import ddpc.distributed as dist
    from ddpc.distributed.tensor import DTensor, distribute_tensor, init_device_mesh

    dist.init_process_group("cpu")
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    a = ddpc.from_numpy(full_value((5, 3)))
    out = {"coordinate": mesh.get_coordinate()}
    layouts = {"hsdp": [Replicate(), Shard(0)], "rows_cols": [Shard(0), Shard(1)], "rows_twice": [Shard(0), Shard(0)],
               "replicate": [Replicate(), Replicate()], "first": [Shard(1), Replicate()]}
    for name, placements in layouts.items():
        d = distribute_tensor(a, mesh, placements)
        out[name] = (d.placements, tuple(d.shape), d.to_local().numpy().copy(), d.full_tensor().numpy().copy())
    hsdp = distribute_tensor(a, mesh, layouts["hsdp"])
    out["hsdp_to_rows_cols"] = hsdp.redistribute(placements=layouts["rows_cols"]).to_local().numpy().copy()
    out["default"] = distribute_tensor(a, mesh).placements
    mine = ddpc.full((4, 2), float(rank))  # the source is group rank 1 along each dimension: global rank 3
    out["src1"] = distribute_tensor(mine, mesh, layouts["hsdp"], src_data_rank=1).full_tensor().numpy().copy()
    even = DTensor.from_local(ddpc.full((2, 3), float(rank)), mesh, layouts["rows_cols"], run_check=True)
    out["even"] = (tuple(even.shape), even.full_tensor().numpy().copy())
    dist.destroy_process_group()
    return out


def test_dtensor_on_a_2x2_mesh():
    a = full_value((5, 3))
    for rank, r in enumerate(ddpc.spawn(worker_2d, nprocs=4)):
        row, col = r["coordinate"]
        assert (row, col) == divmod(rank, 2)
        rows = [a[:3], a[3:]][col]  # 5 rows split 3 + 2 along the mesh's second dimension
        expected = {"hsdp": rows, "rows_cols": [a[:3], a[3:]][row][:, [slice(0, 2), slice(2, 3)][col]],
                    "rows_twice": [[a[:2], a[2:3]], [a[3:4], a[4:5]]][row][col], "replicate": a,
                    "first": a[:, [slice(0, 2), slice(2, 3)][row]]}
        for name, local in expected.items():
            placements, shape, got, full = r[name]
            assert shape == (5, 3) and len(placements) == 2, name
            np.testing.assert_array_equal(got, local, err_msg=name)
            np.testing.assert_array_equal(full, a, err_msg=name)
        assert r["hsdp"][0] == (Replicate(), Shard(0))
        np.testing.assert_array_equal(r["hsdp_to_rows_cols"], expected["rows_cols"])
        assert r["default"] == (Replicate(), Replicate())
        np.testing.assert_array_equal(r["src1"], np.full((4, 2), 3.0))
        assert r["even"][0] == (4, 6)
        np.testing.assert_array_equal(r["even"][1], np.arange(4.0).reshape(2, 2).repeat(2, 0).repeat(3, 1))

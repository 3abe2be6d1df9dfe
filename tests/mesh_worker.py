"""Worker program for the DeviceMesh tests, started once per rank by ddpc-run
on 4 ranks (a 2x2 mesh): python mesh_worker.py SCENARIO. Each scenario checks
its results against closed forms and prints "RANK r PASS" on stdout."""

import os
import sys

import numpy as np

import ddpc
import ddpc.distributed as dist
from ddpc.distributed.device_mesh import DeviceMesh, init_device_mesh


def say(text):
    os.write(1, (text + "\n").encode())


def expect_error(kind, fragment, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except kind as e:
        assert fragment in str(e), (fragment, str(e))
        return
    raise AssertionError(f"{fn.__name__}{args} did not raise {kind.__name__}")


def reduced_over(group):
    """The all_reduce sum of rank + 1 over ``group``."""
    t = ddpc.tensor([dist.get_rank() + 1.0])
    dist.all_reduce(t, group=group)
    return t.item()


def scenario_mesh():
    """A 2x2 mesh ("dp", "tp"): rank r sits at (r // 2, r % 2); the dp group of
    column c is {c, c + 2} (sum of rank + 1: 2c + 4) and the tp group of row d
    is {2d, 2d + 1} (sum 4d + 3)."""
    rank = dist.get_rank()
    row, col = rank // 2, rank % 2
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    assert mesh.ndim == 2 and mesh.shape == (2, 2) and mesh.size() == 4 and mesh.size(1) == 2
    assert mesh.device_type == "cpu" and mesh.mesh_dim_names == ("dp", "tp")
    assert mesh.mesh.tolist() == [[0, 1], [2, 3]] and mesh.mesh.dtype == ddpc.int32
    assert mesh.get_coordinate() == (row, col) and mesh.get_rank() == rank
    assert (mesh.get_local_rank("dp"), mesh.get_local_rank(1)) == (row, col)
    assert repr(mesh) == "DeviceMesh((dp=2, tp=2), 'cpu', stride=(2, 1))", repr(mesh)
    assert reduced_over(mesh.get_group("dp")) == 2 * col + 4
    assert reduced_over(mesh.get_group(1)) == 4 * row + 3
    assert [reduced_over(g) for g in mesh.get_all_groups()] == [2 * col + 4, 4 * row + 3]
    assert dist.get_process_group_ranks(mesh.get_group(0)) == [col, col + 2]

    dp, tp = mesh["dp"], mesh["tp"]
    assert dp.mesh.tolist() == [col, col + 2] and tp.mesh.tolist() == [2 * row, 2 * row + 1]
    assert dp.get_group() is mesh.get_group("dp") and tp.get_local_rank() == col
    assert dp.get_coordinate() == (row,) and tp.shape == (2,) and dp.mesh_dim_names == ("dp",)
    assert repr(dp) == "DeviceMesh((dp=2), 'cpu', stride=(2,))" and repr(tp) == "DeviceMesh((tp=2), 'cpu', stride=(1,))"
    assert mesh["dp", "tp"] is mesh and mesh["dp"] == dp and dp != tp and dp != mesh
    assert len({hash(mesh["dp"]), hash(dp)}) == 1
    expect_error(KeyError, "Mesh dim indices should be in ascending order", mesh.__getitem__, ("tp", "dp"))
    expect_error(KeyError, "Invalid mesh_dim_names ('pp',)", mesh.__getitem__, "pp")
    expect_error(KeyError, "Mesh dimension 'pp' does not exist", mesh.get_group, "pp")
    expect_error(RuntimeError, "name one with mesh_dim", mesh.get_group)
    expect_error(RuntimeError, "name one with mesh_dim", mesh.get_local_rank)

    flat = init_device_mesh("cpu", (4,))
    assert repr(flat) == "DeviceMesh((4,), 'cpu', stride=(1,))" and flat.mesh_dim_names is None
    assert reduced_over(flat.get_group()) == 10 and flat.get_local_rank() == rank
    expect_error(RuntimeError, "Cannot slice a DeviceMesh without mesh_dim_names", flat.__getitem__, "dp")

    # An explicit layout: columns of consecutive ranks.
    transposed = DeviceMesh("cpu", [[0, 2], [1, 3]], mesh_dim_names=("a", "b"))
    assert transposed.get_coordinate() == (col, row)
    assert reduced_over(transposed.get_group("a")) == 4 * row + 3
    assert reduced_over(transposed.get_group("b")) == 2 * col + 4
    assert transposed != mesh


def scenario_mesh_ddp():
    """DDP over the "dp" dimension of a 2x2 mesh: a bias-free Linear(1, 1)
    starts from weight = rank on each rank and takes the input rank + 1. DDP
    broadcasts the weight of the group's first rank (column c: c) and averages
    the gradient x over the group {c, c + 2}: ((c + 1) + (c + 3)) / 2 = c + 2."""
    rank = dist.get_rank()
    col = rank % 2
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    model = ddpc.nn.Linear(1, 1, bias=False)
    with ddpc.no_grad():
        model.weight.fill_(float(rank))
    ddp = ddpc.nn.parallel.DistributedDataParallel(model, device_mesh=mesh["dp"])
    assert ddp.process_group is mesh.get_group("dp") and ddp.device_mesh == mesh["dp"]
    assert model.weight.item() == col
    ddp(ddpc.tensor([[rank + 1.0]])).sum().backward()
    assert model.weight.grad.item() == col + 2, model.weight.grad.item()
    expect_error(RuntimeError, "Only 1D device mesh is supported", ddpc.nn.parallel.DistributedDataParallel,
                 ddpc.nn.Linear(1, 1), device_mesh=mesh)
    expect_error(RuntimeError, "Cannot specify both process_group and device_mesh",
                 ddpc.nn.parallel.DistributedDataParallel, ddpc.nn.Linear(1, 1), device_mesh=mesh["dp"],
                 process_group=mesh.get_group("dp"))


def scenario_mesh_errors():
    expect_error(RuntimeError, "mesh_shape (2, 3) holds 6 ranks but the world size is 4", init_device_mesh, "cpu",
                 (2, 3))
    expect_error(RuntimeError, "mesh_shape (2,) holds 2 ranks", init_device_mesh, "cpu", (2,))
    expect_error(RuntimeError, "must be unique", init_device_mesh, "cpu", (2, 2), mesh_dim_names=("dp", "dp"))
    expect_error(RuntimeError, "should have same length", init_device_mesh, "cpu", (2, 2), mesh_dim_names=("dp",))
    expect_error(RuntimeError, "Device type with index is not supported", init_device_mesh, "cuda:0", (4,))
    expect_error(RuntimeError, "exactly once", DeviceMesh, "cpu", [[0, 1], [1, 3]])
    # The errors above made no group: a mesh made afterwards still works on every rank.
    assert reduced_over(init_device_mesh("cpu", (2, 2)).get_group(0)) == 2 * (dist.get_rank() % 2) + 4


def main():
    dist.init_process_group("cpu", timeout=float(os.environ.get("TEST_DIST_TIMEOUT", "60")))
    globals()["scenario_" + sys.argv[1]]()
    say(f"RANK {dist.get_rank()} PASS")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

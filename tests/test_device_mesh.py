"""DeviceMesh on the cpu backend: a world of 4 real processes (started by
ddpc-run) as a 2x2 mesh, all_reduce over each dimension's groups against
closed-form sums, sub-meshes, DDP over one dimension, and the errors."""

import os
import socket
import subprocess
import sys

import pytest

import ddpc
import ddpc.distributed as dist
from ddpc.distributed.device_mesh import DeviceMesh, init_device_mesh

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "mesh_worker.py")


def run_ranks(scenario, nproc=4):
    cmd = [sys.executable, "-m", "ddpc.run", "--nproc-per-node", str(nproc), WORKER, scenario]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    for r in range(nproc):
        assert f"RANK {r} PASS" in res.stdout, out


@pytest.mark.parametrize("scenario", ["mesh", "mesh_ddp", "mesh_errors"])
def test_a_2x2_mesh_on_4_ranks(scenario):
    run_ranks(scenario)


def test_exported_from_ddpc_distributed():
    assert dist.DeviceMesh is DeviceMesh and dist.init_device_mesh is init_device_mesh


def test_before_init_process_group_is_an_error():
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="init_process_group"):
        init_device_mesh("cpu", (1,))
    with pytest.raises(RuntimeError, match="init_process_group"):
        DeviceMesh("cpu", [0])


@pytest.fixture
def one_rank(monkeypatch):
    """A default group of this process alone."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        monkeypatch.setenv("MASTER_PORT", str(sock.getsockname()[1]))
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    dist.init_process_group("cpu", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_a_mesh_of_one_rank(one_rank):
    mesh = init_device_mesh("cpu", (1, 1), mesh_dim_names=("dp", "tp"))
    assert mesh.get_coordinate() == (0, 0) and mesh["tp"].size() == 1
    t = ddpc.tensor([3.0])
    dist.all_reduce(t, group=mesh.get_group("tp"))
    assert t.item() == 3.0


def test_from_group_and_the_current_mesh(one_rank):
    from ddpc.distributed.device_mesh import _current_mesh

    group = dist.new_group([0])
    mesh = DeviceMesh.from_group(group, "cpu", mesh=[0], mesh_dim_names="dp")
    assert mesh.get_group() is group and mesh.get_group("dp") is group and mesh.mesh.tolist() == [0]
    assert mesh.ndim == 1 and mesh.get_local_rank() == 0 and mesh == DeviceMesh.from_group([group], "cpu",
                                                                                             mesh_dim_names="dp")
    outer = DeviceMesh.from_group(dist.group.WORLD, "cpu")
    with outer:
        with mesh as inner:
            assert inner is mesh and _current_mesh("here") is mesh
        assert _current_mesh("here") is outer
    with pytest.raises(RuntimeError, match="here: no device_mesh was given"):
        _current_mesh("here")
    with pytest.raises(NotImplementedError, match="1-d meshes from one group"):
        DeviceMesh.from_group([group, group], "cpu")
    with pytest.raises(ValueError, match="does not list the group's ranks"):
        DeviceMesh.from_group(group, "cpu", mesh=[1])
    with pytest.raises(RuntimeError, match="Device type with index"):
        DeviceMesh.from_group(group, "cpu:0")

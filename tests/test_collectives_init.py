"""init_process_group: env:// (also from SLURM and Open MPI variables),
tcp://, file://, backend choice and errors, group helpers and pickling."""

import os
import pickle
import socket
import subprocess
import sys
import textwrap

import pytest

import ddpc
import ddpc.distributed as dist

BODY = """
import numpy as np, ddpc, ddpc.distributed as dist
{init}
a = np.full(3, dist.get_rank() + 1.0)
dist.all_reduce(a)
import os
os.write(1, f"RANK {{dist.get_rank()}} OF {{dist.get_world_size()}} SUM {{a[0]}} BACKEND {{dist.get_backend()}}\\n".encode())
"""


def free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def run_ranks(world, init, env_of_rank, timeout=60):
    code = textwrap.dedent(BODY.format(init=init))
    base = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=dict(base, **env_of_rank(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(world)]
    outs = [p.communicate(timeout=timeout) for p in procs]
    return [p.returncode for p in procs], outs


def check(codes, outs, world, backend="cpu"):
    text = "".join(o + e for o, e in outs)
    assert codes == [0] * world, text
    for r in range(world):
        assert f"RANK {r} OF {world} SUM {world * (world + 1) / 2} BACKEND {backend}" in text, text


@pytest.mark.parametrize("scheme", ["plain", "slurm", "ompi"])
def test_env_init(scheme):
    port = free_port()
    names = {"plain": ("RANK", "WORLD_SIZE"), "slurm": ("SLURM_PROCID", "SLURM_NTASKS"),
             "ompi": ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")}[scheme]
    codes, outs = run_ranks(3, "ddpc.init_process_group()", lambda r: {
        names[0]: str(r), names[1]: "3", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    check(codes, outs, 3)


def test_tcp_init_with_gloo_alias():
    port = free_port()
    codes, outs = run_ranks(2, f"ddpc.init_process_group('gloo', init_method='tcp://127.0.0.1:{port}', "
                               "rank=int(__import__('os').environ['R']), world_size=2)", lambda r: {"R": str(r)})
    check(codes, outs, 2)


def test_file_init(tmp_path):
    path = tmp_path / "rendezvous"
    codes, outs = run_ranks(2, f"ddpc.init_process_group(init_method='file://{path}', "
                               "rank=int(__import__('os').environ['R']), world_size=2)", lambda r: {"R": str(r)})
    check(codes, outs, 2)


def test_missing_rank_is_a_clear_error():
    res = subprocess.run([sys.executable, "-c", "import ddpc; ddpc.init_process_group()"], capture_output=True,
                         text=True, timeout=30, env={k: v for k, v in os.environ.items()
                                                     if k not in ("RANK", "WORLD_SIZE")})
    assert res.returncode != 0 and "RANK and WORLD_SIZE" in res.stderr


@pytest.fixture
def single_rank(monkeypatch):
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    yield
    dist.destroy_process_group()


def test_nccl_backend_without_a_gpu_is_a_clear_error(single_rank):
    if ddpc.cuda.is_available():
        pytest.skip("a GPU is present")
    expected = (ddpc.DistError, "no rank has one") if "nccl" in ddpc._C.backends() else (RuntimeError, "without NCCL")
    with pytest.raises(expected[0], match=expected[1]):
        ddpc.init_process_group("nccl", rank=0, world_size=1)
    assert not dist.is_initialized()


def test_single_rank_group_and_helpers(single_rank):
    assert not dist.is_initialized()
    ddpc.init_process_group(rank=0, world_size=1)
    assert dist.is_initialized() and dist.get_rank() == 0 and dist.get_world_size() == 1
    assert dist.get_backend() == "cpu"
    assert dist.get_global_rank(None, 0) == 0 and dist.collective_device() == "cpu"
    with pytest.raises(RuntimeError, match="already initialised"):
        ddpc.init_process_group(rank=0, world_size=1)
    with pytest.raises(TypeError, match="pickle"):
        pickle.dumps(dist.GroupMember.WORLD)
    t = ddpc.tensor([1.0, 2.0])
    w = dist.all_reduce(t, op=dist.ReduceOp.MAX, async_op=True)
    assert w.wait() and w.is_completed()
    with pytest.raises(TypeError, match="pickle"):
        pickle.dumps(w)
    with pytest.raises(ValueError, match="reduce op"):
        dist.all_reduce(t, op=99)
    with pytest.raises(ValueError, match="src 3"):
        dist.broadcast(t, src=3)
    with pytest.raises(TypeError):
        dist.all_reduce([1.0, 2.0])
    with pytest.raises(ValueError, match="output has"):
        dist.all_gather_into_tensor(ddpc.zeros(3), ddpc.zeros(2))
    late = dist.all_reduce(ddpc.ones(1000), async_op=True)
    dist.destroy_process_group()
    assert not dist.is_initialized()
    assert late.wait() and late.is_completed()  # a handle outlives its group
    with pytest.raises(RuntimeError, match="not initialised"):
        dist.barrier()

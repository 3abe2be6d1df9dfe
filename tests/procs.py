"""Helpers shared by the multi-process tests."""

import os


def processes_with(marker):
    """Pids of the live processes whose command line contains `marker`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def processes_left_after(marker, seconds):
    """Pids of the processes with `marker` still alive after waiting up to `seconds` for them to end."""
    import time

    deadline = time.monotonic() + seconds
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    return processes_with(marker)


def kill_processes_with(marker):
    import signal

    for pid in processes_with(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_torch_case(script, *args):
    """The stdout of `python script *args`, run in a child process so that it
    can import torch before ddpc; skips the test where torch is not
    installed and fails it where the child fails."""
    import importlib.util
    import subprocess
    import sys

    import pytest

    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    proc = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=240,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def torch_group_test(script, groups):
    """The test of a torch comparison file whose cases are ``groups`` (name ->
    fn(np, torch, ddpc)): one parametrized case per group, each run by
    run_torch_case in a child that calls run_torch_group."""
    import pytest

    @pytest.mark.parametrize("group", sorted(groups))
    def test_matches_pytorch(group):
        out = run_torch_case(script, group)
        assert out.strip().endswith("ok"), out

    return test_matches_pytorch


def run_torch_group(groups):
    """The child side of torch_group_test: imports torch before ddpc, runs the
    group named on the command line and prints ok."""
    import sys

    import numpy as np
    import torch

    import ddpc

    groups[sys.argv[1]](np, torch, ddpc)
    print("ok")


def run_two_ranks(tmp_path, source):
    """Runs `source` as a script on two cpu ranks under ddpc.run and checks each printed 'RANK <r> PASS'."""
    import subprocess
    import sys

    script = tmp_path / "worker.py"
    script.write_text(source)
    res = subprocess.run([sys.executable, "-m", "ddpc.run", "--nproc-per-node", "2", str(script)],
                         capture_output=True, text=True, timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "RANK 0 PASS" in res.stdout and "RANK 1 PASS" in res.stdout, out


def free_port():
    """A loopback port nothing listens on right now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_torch_and_ddpc_groups(torch, ddpc, rank, world, torch_port, ddpc_port):
    """In a child of run_torch_ranks: this rank joins a gloo group of torch's and a cpu group of ddpc's."""
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{torch_port}", rank=rank,
                                         world_size=world)
    ddpc.distributed.init_process_group("cpu", init_method=f"tcp://127.0.0.1:{ddpc_port}", rank=rank,
                                        world_size=world)


def run_torch_ranks(script, world, tmp_path, timeout=240, args=()):
    """Runs `script` (a *_torch.py file) as `world` processes, each given its rank, a store port for
    torch and one for ddpc, the path of the .npz it writes its results to, and `args` (which of the
    script's cases to run, say); returns each rank's arrays. Fails with a rank's output if it fails."""
    import subprocess
    import sys

    import numpy as np

    ports = [str(free_port()), str(free_port())]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, str(script), str(r), *ports, str(tmp_path / f"rank{r}.npz"), *args],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    try:
        for p in procs:
            out, _ = p.communicate(timeout=timeout)
            assert p.returncode == 0, out
    finally:
        for p in procs:
            p.kill()
    return [dict(np.load(tmp_path / f"rank{r}.npz")) for r in range(world)]

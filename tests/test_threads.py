"""Host threads per rank: ddpc.set_num_threads, and the defaults ddpc-run and ddpc.spawn give each rank."""

import os
import subprocess
import sys

import numpy as np
import pytest

import ddpc


def test_set_num_threads_round_trip_and_bad_input():
    before = ddpc.get_num_threads()
    try:
        ddpc.set_num_threads(1)
        assert ddpc.get_num_threads() == 1
        a = np.ones((64, 64), np.float32)
        np.testing.assert_array_equal(a @ a, np.full((64, 64), 64, np.float32))  # BLAS still works
    finally:
        ddpc.set_num_threads(before)
    with pytest.raises(ValueError, match="at least 1"):
        ddpc.set_num_threads(0)


def _threads(rank):
    return ddpc.get_num_threads()


def test_spawned_ranks_share_the_cores():
    env_set = any(k in os.environ for k in ("OMP_NUM_THREADS", "DDPC_NUM_THREADS", "OPENBLAS_NUM_THREADS"))
    if env_set:
        pytest.skip("the thread count was chosen through the environment")
    want = max(1, (os.cpu_count() or 1) // 2)
    assert ddpc.spawn(_threads, nprocs=2) == [want, want]


def test_launcher_sets_thread_variables_unless_chosen(tmp_path):
    script = tmp_path / "show.py"
    # One write per line: print() writes its arguments one by one, so the ranks' lines could interleave.
    script.write_text("import os, sys, ddpc\n"
                      "sys.stdout.write(f\"THREADS {os.environ.get('OMP_NUM_THREADS')} "
                      "{os.environ.get('OPENBLAS_NUM_THREADS')} {ddpc.get_num_threads()}\\n\")\n")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "DDPC_NUM_THREADS",
                                                            "OPENBLAS_NUM_THREADS")}
    res = subprocess.run([sys.executable, "-m", "ddpc.run", "--nproc-per-node", "2", str(script)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    want = str(max(1, (os.cpu_count() or 1) // 2))
    lines = [line.split() for line in res.stdout.splitlines() if line.startswith("THREADS")]
    assert lines == [["THREADS", want, want, want]] * 2
    env["OMP_NUM_THREADS"] = "7"  # the user's choice is left alone
    res = subprocess.run([sys.executable, "-m", "ddpc.run", "--nproc-per-node", "2", str(script)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    lines = [line.split()[1:3] for line in res.stdout.splitlines() if line.startswith("THREADS")]
    assert lines == [["7", "None"]] * 2

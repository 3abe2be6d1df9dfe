"""Optional: DistributedDataParallel's runtime stats (``_get_ddp_logging_data``)
against PyTorch's (skipped where torch is not installed).

Two ranks, each a child process (this file run as a script) in a gloo group
and a ddpc cpu group, run the same sequence of steps through PyTorch's DDP and
ddpc's: reducing steps, a step under ``no_sync``, a forward without grad, with
a sample rate of 3. After each step both must report the same ``iteration``
(the reducing iteration logged last) and the same timing fields; the times
themselves differ, but must hold together (the overlap inside the
communication window, which starts before backward's computation ends).
"""

import sys

import numpy as np
import pytest

from procs import init_torch_and_ddpc_groups, run_torch_ranks

WORLD = 2
STEPS = ["sync"] * 4 + ["no_sync", "no_grad"] + ["sync"] * 10  # (sampled: reducing iterations 1-10, 12, 15, ...)
SAMPLE_RATE = 3
SPANS = ["forward_compute_time", "backward_compute_time", "backward_comm_time", "backward_compute_comm_overlap_time"]
TIMES = SPANS + ["avg_" + k for k in SPANS] + [
    "forward_compute_time_start", "backward_compute_time_start", "backward_comm_time_start", "backward_compute_time_end",
    "backward_comm_time_end"]


def _run(lib, ddp, x):
    """Runs STEPS; after each, the iteration, which timing fields are nonzero, and those fields; the timing
    fields there are at the end, and those there were before the first step."""
    iterations, nonzero, times = [], [], []
    fields = sorted(k for k in ddp._get_ddp_logging_data() if k.endswith("_time"))
    for kind in STEPS:
        if kind == "no_grad":
            with lib.no_grad():
                ddp(x)
        elif kind == "no_sync":
            with ddp.no_sync():
                ddp(x).square().sum().backward()
        else:
            ddp(x).square().sum().backward()
        data = ddp._get_ddp_logging_data()
        iterations.append(data["iteration"])
        nonzero.append([int(data.get(k, 0) != 0) for k in TIMES])
        times.append([data.get(k, 0) for k in TIMES])
    return iterations, sorted(k for k in data if k.endswith("_time")), nonzero, times, fields


def _rank_main(rank, torch_port, ddpc_port, path):
    import torch  # before ddpc

    import ddpc

    init_torch_and_ddpc_groups(torch, ddpc, rank, WORLD, torch_port, ddpc_port)
    results = {}
    for name, lib in (("torch", torch), ("ddpc", ddpc)):
        lib.manual_seed(0)
        model = lib.nn.Sequential(lib.nn.Linear(64, 64), lib.nn.ReLU(), lib.nn.Linear(64, 4))
        ddp = lib.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.01)
        ddp._set_ddp_runtime_logging_sample_rate(SAMPLE_RATE)
        try:
            ddp._set_ddp_runtime_logging_sample_rate(0)
            refused = ""
        except ValueError as e:
            refused = str(e)
        x = lib.from_numpy(np.random.default_rng(rank).standard_normal((8, 64)).astype(np.float32))
        iterations, keys, nonzero, times, fields = _run(lib, ddp, x)
        results[f"{name}/iterations"] = np.array(iterations)
        results[f"{name}/keys"] = np.array(keys)
        results[f"{name}/nonzero"] = np.array(nonzero)
        results[f"{name}/times"] = np.array(times, dtype=np.int64)
        results[f"{name}/initial_fields"] = np.array(fields, dtype=str)
        results[f"{name}/refused"] = np.array(refused)
    np.savez(path, **results)
    torch.distributed.destroy_process_group()
    ddpc.distributed.destroy_process_group()


def test_runtime_stats_follow_pytorch(tmp_path):
    pytest.importorskip("torch")
    for arrays in run_torch_ranks(__file__, WORLD, tmp_path):
        np.testing.assert_array_equal(arrays["ddpc/iterations"], arrays["torch/iterations"])
        # PyTorch's logged iterations: 0 until the second reducing forward, then the one before it.
        assert list(arrays["torch/iterations"][:4]) == [0, 1, 2, 3]
        assert list(arrays["ddpc/keys"]) == list(arrays["torch/keys"]) == sorted(SPANS + ["avg_" + k for k in SPANS])
        np.testing.assert_array_equal(arrays["ddpc/nonzero"], arrays["torch/nonzero"])
        assert list(arrays["ddpc/initial_fields"]) == list(arrays["torch/initial_fields"]) == []
        assert str(arrays["ddpc/refused"]) == str(arrays["torch/refused"]) != ""
        for row in arrays["ddpc/times"]:
            t = dict(zip(TIMES, row))
            if not t.get("backward_comm_time"):
                continue
            assert 0 < t["backward_compute_comm_overlap_time"] <= t["backward_comm_time"]
            assert t["backward_compute_time_start"] - t["forward_compute_time_start"] == t["forward_compute_time"]
            assert t["backward_comm_time_end"] - t["backward_comm_time_start"] == t["backward_comm_time"]
            assert t["backward_compute_time_start"] < t["backward_comm_time_start"] < t["backward_compute_time_end"]
            assert t["backward_compute_time_end"] <= t["backward_comm_time_end"]


if __name__ == "__main__":
    _rank_main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])

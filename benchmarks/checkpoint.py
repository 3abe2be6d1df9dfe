"""Checkpoint write and read rates: ddpc.distributed.checkpoint on 1 and 2 ranks, ddpc.save,
against numpy writing the same bytes to one file (the disk's rate for this data) and, when torch
is importable, torch.save and torch.distributed.checkpoint (one process).

    python benchmarks/checkpoint.py [--mb 256] [--tensors 64] [--rounds 3] [--dir /tmp]

The state is --tensors float32 tensors of --mb MB in all (the parameters and two Adam moments of
a model, say). Every write is made durable (fsync) before its time is taken, as the checkpoint
writers do, and the page cache is not dropped before reads (they read what the write left
cached: the rate of resuming right after a save, not of a cold disk). Each case keeps its best
of --rounds rounds; rounds alternate between the cases. Rates are of the state's bytes
(GB/s = 1e9 bytes/s); "vs numpy" is the case's rate over numpy's in the same round.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np

from common import import_torch, machine

torch = import_torch() if "--no-torch" not in sys.argv else None

import ddpc  # noqa: E402
import ddpc.distributed.checkpoint as dcp  # noqa: E402


def make_state(mb, tensors):
    per = mb * 2**20 // 4 // tensors
    rng = np.random.default_rng(0)
    return {f"layer{i}.weight": rng.standard_normal(per, dtype=np.float32) for i in range(tensors)}


def fsync_dir(path):
    for root, _, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)


def numpy_case(arrays, path):
    def write():
        with open(path, "wb") as f:
            for a in arrays.values():
                a.tofile(f)
            f.flush()
            os.fsync(f.fileno())

    def read():  # all arrays held at the end, as a load returns them
        with open(path, "rb") as f:
            return [np.fromfile(f, np.float32, a.size) for a in arrays.values()]
    return write, read


def ddpc_save_case(state, path):
    def write():
        ddpc.save(state, path)
        fsync_dir(os.path.dirname(path))

    return write, lambda: ddpc.load(path)


def dcp_case(state, path):
    target = {k: ddpc.empty_like(v) for k, v in state.items()}
    return (lambda: dcp.save(state, checkpoint_id=path),
            lambda: dcp.load(target, checkpoint_id=path))


def _dcp_ranks_worker(rank, state_np, path, rounds):
    """Each of 2 ranks holds the whole (replicated) state; dcp shares the writing between them."""
    import ddpc.distributed as dist

    dist.init_process_group("cpu")
    state = {k: ddpc.from_numpy(v) for k, v in state_np.items()}
    target = {k: ddpc.empty_like(v) for k, v in state.items()}
    best_w = best_r = float("inf")
    for _ in range(rounds):
        dist.barrier()
        t0 = time.perf_counter()
        dcp.save(state, checkpoint_id=path)
        dist.barrier()
        best_w = min(best_w, time.perf_counter() - t0)
        t0 = time.perf_counter()
        dcp.load(target, checkpoint_id=path)
        dist.barrier()
        best_r = min(best_r, time.perf_counter() - t0)
    dist.destroy_process_group()
    return best_w, best_r


def torch_cases(arrays, root):
    import torch.distributed.checkpoint as tdcp

    state = {k: torch.from_numpy(v) for k, v in arrays.items()}
    target = {k: torch.empty_like(v) for k, v in state.items()}
    file_path, dir_path = os.path.join(root, "torch.pt"), os.path.join(root, "torch_dcp")

    def save_write():
        torch.save(state, file_path)
        fsync_dir(root)

    def dcp_write():
        tdcp.save(state, storage_writer=tdcp.FileSystemWriter(dir_path, sync_files=True), no_dist=True)

    return {"torch.save / torch.load": (save_write, lambda: torch.load(file_path)),
            "torch DCP, 1 process": (dcp_write, lambda: tdcp.load(target, checkpoint_id=dir_path, no_dist=True))}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=256)
    parser.add_argument("--tensors", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to write (default: the system's temporary directory)")
    parser.add_argument("--no-torch", action="store_true")
    args = parser.parse_args()

    arrays = make_state(args.mb, args.tensors)
    state = {k: ddpc.from_numpy(v) for k, v in arrays.items()}
    nbytes = sum(a.nbytes for a in arrays.values())
    root = tempfile.mkdtemp(prefix="ddpc-ckpt-bench-", dir=args.dir)
    print(f"machine: {machine()}")
    print(f"state: {args.tensors} float32 tensors, {nbytes / 1e6:.0f} MB; files in {root}")
    try:
        cases = {"numpy tofile / fromfile (baseline)": numpy_case(arrays, os.path.join(root, "numpy.bin")),
                 "ddpc.save / ddpc.load": ddpc_save_case(state, os.path.join(root, "ddpc", "state.ddpc")),
                 "ddpc DCP, 1 process": dcp_case(state, os.path.join(root, "dcp1"))}
        os.makedirs(os.path.join(root, "ddpc"))
        if torch is not None:
            cases.update(torch_cases(arrays, root))
        best = {name: [float("inf"), float("inf")] for name in cases}
        baseline = [float("inf"), float("inf")]
        for _ in range(args.rounds):
            for name, (write, read) in cases.items():
                for i, fn in enumerate((write, read)):
                    t0 = time.perf_counter()
                    fn()
                    best[name][i] = min(best[name][i], time.perf_counter() - t0)
            baseline = best["numpy tofile / fromfile (baseline)"]
        ranks = ddpc.spawn(_dcp_ranks_worker, args=(arrays, os.path.join(root, "dcp2"), args.rounds), nprocs=2)
        best["ddpc DCP, 2 ranks (writing shared)"] = [max(r[0] for r in ranks), max(r[1] for r in ranks)]

        print(f"\n| case | write GB/s | vs numpy | read GB/s | vs numpy |\n| --- | ---: | ---: | ---: | ---: |")
        for name, (w, r) in best.items():
            print(f"| {name} | {nbytes / w / 1e9:.2f} | {baseline[0] / w:.2f} | {nbytes / r / 1e9:.2f} | "
                  f"{baseline[1] / r:.2f} |")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

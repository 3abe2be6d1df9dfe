"""Loader throughput: shuffled batches of float32 features (784 by default) + an int64 label.

ddpc's DataLoader (C threads gathering rows) from memory and from a .npy file,
against the gather limit (numpy ``X[idx], y[idx]`` per batch, on one thread)
and against PyTorch's DataLoader + DistributedSampler + TensorDataset
(num_workers=0) when torch is importable. With ``--device cuda``, batches go
to the GPU, and the rate is compared with pinned cudaMemcpy bandwidth, once
staged (threads gather into pinned memory, copied to the device) and once
gathered by the GPU itself from the arrays in place (DDPC_LOADER_GPU_GATHER=1).

    python benchmarks/loader.py [--samples 524288] [--batch 256] [--features 784] [--threads N] [--device cuda]
"""

import argparse
import os
import tempfile
import time

import numpy as np


from common import best_time, import_torch, machine, print_table

torch = import_torch()

import ddpc  # noqa: E402 - after torch, see import_torch
from ddpc import data
from ddpc.data import DataLoader, DistributedSampler, TensorDataset


def epoch_rates(runs, repeat):
    """Best samples/s of each (epoch function, samples it reads) over `repeat` rounds after
    a warm-up round. The functions take turns within a round, so a noisy machine slows all alike."""
    for run, _ in runs:
        run()
    best = [float("inf")] * len(runs)
    for _ in range(repeat):
        for i, (run, _) in enumerate(runs):
            start = time.perf_counter()
            run()
            best[i] = min(best[i], time.perf_counter() - start)
    return [samples / t for (_, samples), t in zip(runs, best)]


def numpy_epoch(X, y, batch, seed):
    def run():
        perm = np.random.default_rng(seed).permutation(len(y))
        for i in range(0, len(perm), batch):
            idx = perm[i:i + batch]
            X[idx], y[idx]
    return run


def ddpc_epoch(loader, sync=None, passes=None):
    """One pass; with `passes` (a list), each pass's iterator is appended to it."""
    def run():
        it = iter(loader)
        for xb, yb in it:
            pass
        if sync:
            sync()
        if passes is not None:
            passes.append(it)
    return run


def with_gpu_gather(run):
    """`run` with the loader's direct gather asked for (DDPC_LOADER_GPU_GATHER=1)."""
    def wrapped():
        os.environ["DDPC_LOADER_GPU_GATHER"] = "1"
        try:
            return run()
        finally:
            del os.environ["DDPC_LOADER_GPU_GATHER"]
    return wrapped


def time_per_batch(it):
    """Where a pass's time went, per batch (the loader's own accounting)."""
    s = it._loader.stats()
    us = {k: v / max(s["batches"], 1) * 1e6 for k, v in s.items() if k.endswith("_s")}
    return (f"{us['elapsed_s']:.1f} us per batch: next() waited {us['wait_s']:.1f} us "
            f"({us['wait_idle_s']:.1f} us of it asleep); thread-us gathering {us['gather_s']:.1f}, "
            f"queuing copies {us['copy_issue_s']:.1f}, waiting for staging {us['staging_wait_s']:.1f}; "
            f"{s['chunks'] / max(s['batches'], 1):.1f} chunks per batch")


def torch_epoch(X, y, batch, max_batches):
    from torch.utils.data import DataLoader as TorchLoader
    from torch.utils.data import DistributedSampler as TorchSampler
    from torch.utils.data import TensorDataset as TorchDataset

    ds = TorchDataset(torch.from_numpy(X), torch.from_numpy(y))
    sampler = TorchSampler(ds, num_replicas=1, rank=0, shuffle=True, seed=0)
    loader = TorchLoader(ds, batch_size=batch, sampler=sampler, num_workers=0)

    def run():
        for i, (xb, yb) in enumerate(loader):
            if i + 1 == max_batches:
                break
    return run


def gather_ceiling(n, sample_bytes, batch, threads, repeat):
    """Samples/s of benchmarks/gather_ceiling.c (bare C threads gathering shuffled
    rows into buffers of their own), or None where no C compiler is found."""
    import shutil
    import subprocess

    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        return None
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gather_ceiling.c")
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "gather_ceiling")
        subprocess.run([cc, "-O2", "-pthread", src, "-o", exe], check=True)
        out = subprocess.run([exe, str(n), str(sample_bytes), str(batch), str(threads), str(repeat + 1)],
                             check=True, capture_output=True, text=True).stdout
    return float(out)


def pinned_h2d_bandwidth(nbytes):
    src = ddpc.empty(nbytes, dtype=ddpc.uint8, pin_memory=True)
    dst = ddpc.empty(nbytes, dtype=ddpc.uint8, device="cuda")
    return nbytes / best_time(lambda: dst.copy_(src, non_blocking=True), sync=ddpc.cuda.synchronize) / 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=524288, help="1.6 GB: more than the last-level cache")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--features", type=int, default=784,
                        help="float32 features per sample: 784 is bound by memory bandwidth, a few dozen by "
                             "per-batch overhead")
    parser.add_argument("--threads", type=int, default=None, help="loader threads (default: one fewer than the cores, 1 to 4)")
    parser.add_argument("--prefetch", type=int, default=2, help="batches in flight (DataLoader's prefetch)")
    parser.add_argument("--torch-batches", type=int, default=0,
                        help="batches timed for PyTorch per epoch (default 0: all of them, so that its sampler's "
                             "per-epoch setup is spread over a whole epoch, as ddpc's is)")
    parser.add_argument("--repeat", type=int, default=5, help="timed epochs per case (best is reported)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    n, batch, features = args.samples, args.batch, args.features
    sample_bytes = features * 4 + 8
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, features), dtype=np.float32)
    y = rng.integers(0, 10, size=n).astype(np.int64)
    print(f"data: {n} samples x ({features} float32 + int64 label) = {n * sample_bytes / 2**20:.0f} MiB, "
          f"batch {batch}, shuffled every epoch")

    rows = []

    def add(source, path, rate, ref):
        rows.append((source, path, f"{rate:,.0f}", f"{rate * sample_bytes / 1e9:.2f}", f"{rate / ref:.2f}"))

    sampler = DistributedSampler(n, num_replicas=1, rank=0, shuffle=True, seed=0)
    device = None if args.device == "cpu" else args.device
    os.environ.pop("DDPC_LOADER_GPU_GATHER", None)  # the staged passes stage; the direct one sets it
    sync = ddpc.cuda.synchronize if device else None
    suffix = f" -> {device}" if device else ""
    torch_batches = min(args.torch_batches or n // batch, n // batch)
    with tempfile.TemporaryDirectory() as tmp:
        px, py = os.path.join(tmp, "x.npy"), os.path.join(tmp, "y.npy")
        np.save(px, X)
        np.save(py, y)

        def loader(*sources):
            return DataLoader(TensorDataset(*sources), batch_size=batch, sampler=sampler, device=device,
                              num_threads=args.threads, prefetch=args.prefetch)

        mx, my = np.load(px, mmap_mode="r"), np.load(py, mmap_mode="r")
        passes, direct_passes = [], []
        runs = [(numpy_epoch(X, y, batch, 0), n), (ddpc_epoch(loader(X, y), sync, passes), n),
                (numpy_epoch(mx, my, batch, 0), n), (ddpc_epoch(loader(px, py), sync), n)]
        if device:
            # A pass's loader registers the arrays with CUDA (pinning every page) unless
            # another loader holds them registered, and the last one to go unregisters
            # them: one held open over the timed passes keeps them registered, so that
            # those time the gathers, and the registration is timed apart.
            start = time.perf_counter()
            holder = with_gpu_gather(lambda: iter(loader(X, y)))()
            register_s = time.perf_counter() - start
            runs.append((with_gpu_gather(ddpc_epoch(loader(X, y), sync, direct_passes)), n))
        if torch is not None:
            runs.append((torch_epoch(X, y, batch, torch_batches), torch_batches * batch))
        np_mem, dd_mem, np_npy, dd_npy, *rest = epoch_rates(runs, args.repeat)
        dd_direct = rest.pop(0) if device else None
        t = rest
        if device:
            direct_registered = holder._loader.stats()["direct"]
            del holder
        # A file bigger than the resident budget: rows are read with pread, nothing stays resident.
        default_budget, data.RESIDENT_BUDGET = data.RESIDENT_BUDGET, 64 << 20
        (dd_small,) = epoch_rates([(ddpc_epoch(loader(px, py), sync), n)], args.repeat)
        data.RESIDENT_BUDGET = default_budget
    add("memory", "numpy X[idx] (gather limit)", np_mem, np_mem)
    add("memory", "ddpc DataLoader" + suffix + (" (staging)" if device else ""), dd_mem, np_mem)
    if device:
        add("memory", f"ddpc DataLoader -> {device} (direct gather)", dd_direct, np_mem)
    add(".npy file", "numpy X[idx] on np.load(mmap_mode='r')", np_npy, np_npy)
    add(".npy file", "ddpc DataLoader" + suffix, dd_npy, np_npy)
    add(".npy file", "ddpc, 64 MiB resident budget (pread)" + suffix, dd_small, np_npy)
    t = t[0] if t else None
    if t is not None:
        add("memory", "torch DataLoader (num_workers=0)", t, np_mem)
    cores = os.cpu_count() or 1
    ceiling = gather_ceiling(n, sample_bytes, batch, cores, args.repeat)
    if ceiling is not None:
        add("memory", f"C gather on {cores} threads, no loader (ceiling)", ceiling, np_mem)
    print_table(["source", "path", "samples/s", "GB/s", "vs numpy"], rows)
    best = min(passes, key=lambda it: it._loader.stats()["elapsed_s"])
    print(f"ddpc from memory{suffix}, its fastest pass: {time_per_batch(best)}")
    if ceiling is not None:
        print(f"ddpc from memory vs the C gather ceiling: {dd_mem / ceiling:.0%}")
    if t is not None:
        print(f"ddpc from memory vs PyTorch DataLoader: {dd_mem / t:.1f}x"
              + (f" (the ceiling: {ceiling / t:.1f}x)" if ceiling is not None else ""))
    else:
        print("PyTorch not importable: no PyTorch comparison")
    if device:
        best_direct = min(direct_passes, key=lambda it: it._loader.stats()["elapsed_s"])
        print(f"ddpc from memory -> {device}, direct gather, its fastest pass: {time_per_batch(best_direct)}")
        if not best_direct._loader.stats()["direct"]:
            print("the direct gather was not available for these arrays: that pass staged its batches")
        elif direct_registered:
            print(f"a direct-gather loader's setup, registering the arrays with CUDA: {register_s * 1e3:.0f} ms "
                  f"(paid once by a DataLoader: it keeps its arrays registered between its passes)")
        bw = pinned_h2d_bandwidth(batch * sample_bytes * 16)
        print(f"pinned cudaMemcpy H2D: {bw:.2f} GB/s")
        for path, rate in (("staging", dd_mem), ("direct gather", dd_direct)):
            ddpc_bw = rate * sample_bytes / 1e9
            print(f"ddpc loader to {device}, {path}: {ddpc_bw:.2f} GB/s ({ddpc_bw / bw:.0%} of pinned bandwidth)")


if __name__ == "__main__":
    main()

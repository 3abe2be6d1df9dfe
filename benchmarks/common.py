"""Shared benchmark helpers: the machine description, timing, and table printing."""

import os
import platform
import time


def import_torch():
    """torch, or None when it is not installed. Call it before importing ddpc,
    so that ddpc uses torch's NCCL even where no nvidia-nccl wheel is on
    sys.path (see csrc/comm/nccl_lib.c)."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def machine():
    """One line naming the CPU, core count, memory and GPUs this run measures."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = ""
    try:
        mem = f", {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB"
    except (ValueError, OSError):
        pass
    desc = f"{cpu}, {os.cpu_count()} cores{mem}"
    try:
        import ddpc
        n = ddpc.cuda.device_count()
        if n:
            desc += ", " + ", ".join(f"cuda:{i} {ddpc.cuda.get_device_name(i)}" for i in range(n))
        else:
            desc += ", no GPU"
    except ImportError:
        pass
    return desc


def best_time(fn, repeat=5, min_time=0.2, sync=None, clock=time.perf_counter):
    """Best per-call seconds of fn over `repeat` rounds of at least `min_time`
    each, by `clock` (time.process_time: the CPU seconds of this process,
    which other jobs on a shared machine do not inflate while it runs on one
    thread)."""
    fn()
    if sync:
        sync()
    best = float("inf")
    for _ in range(repeat):
        n, start = 0, clock()
        while True:
            fn()
            n += 1
            if sync:
                sync()
            elapsed = clock() - start
            if elapsed >= min_time:
                break
        best = min(best, elapsed / n)
    return best


def add_layer_timing_args(parser):
    """The options of the layer benchmarks (conv.py, rnn.py): rounds, round length and the clock."""
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=0.3, help="seconds per timing round")
    parser.add_argument("--cpu-time", action="store_true", help="time by the process's CPU seconds")


def start_layer_timing(args, ddpc, torch, where=""):
    """Prints what a layer benchmark runs on (machine, threads, clock) and returns its clock."""
    print(f"machine: {machine()}")
    threads = f", torch threads {torch.get_num_threads()}" if torch is not None else ""
    print(f"float32{where}, ddpc threads {ddpc.get_num_threads()}{threads}, "
          f"{'CPU' if args.cpu_time else 'wall'} time")
    if torch is None:
        print("(torch is not importable: no PyTorch column)")
    else:  # cuDNN's RNNs and convolutions default to TF32 on a GPU; ddpc's float32 is full precision
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    return time.process_time if args.cpu_time else time.perf_counter


def add_host_timing_args(parser):
    """The options of the host function benchmarks (unary.py, order_stats.py): threads, rounds and the clock."""
    parser.add_argument("--threads", type=int, default=None, help="ddpc's and torch's threads (default: theirs)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cpu-time", action="store_true", help="time by the process's CPU seconds")


def start_host_timing(args, ddpc, torch, where=""):
    """Sets ddpc's and torch's threads from --threads, prints what the
    benchmark runs on, and returns its clock."""
    if args.threads:
        ddpc.set_num_threads(args.threads)
        if torch is not None:
            torch.set_num_threads(args.threads)
    return start_layer_timing(args, ddpc, torch, where)


def best_of_rounds(cases, args, clock, sync_of=lambda name: None):
    """{(name, "fwd" | "train"): best seconds per call} for cases (name, fwd,
    train, ...). Rounds alternate between the implementations and the two
    passes, so a busy moment on a shared machine slows all of them; each
    keeps its best."""
    t = {(name, p): float("inf") for name, *_ in cases for p in ("fwd", "train")}
    for _ in range(args.repeat):
        for name, fwd, train, *_ in cases:
            for p, fn in (("fwd", fwd), ("train", train)):
                t[name, p] = min(t[name, p], best_time(fn, repeat=1, min_time=args.min_time, sync=sync_of(name),
                                                       clock=clock))
    return t


def print_table(headers, rows):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    print("  ".join(str(h).rjust(w) for h, w in zip(headers, widths)))
    for r in rows:
        print("  ".join(str(c).rjust(w) for c, w in zip(r, widths)))


def memcpy_bandwidth(nbytes=256 << 20):
    """Host memcpy bandwidth in GB/s (bytes copied per second), the physical reference."""
    import numpy as np

    src = np.ones(nbytes, np.uint8)
    dst = np.empty_like(src)
    return nbytes / best_time(lambda: np.copyto(dst, src), repeat=3) / 1e9

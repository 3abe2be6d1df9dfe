"""all_reduce (or another collective's) bandwidth and latency, printed like nccl-tests.

    python benchmarks/allreduce.py --nproc 2
    python benchmarks/allreduce.py --nproc 4 --compare-torch   # needs torch importable
    python benchmarks/allreduce.py --nproc 2 --shared          # buffers from dist.shared_buffer
    python benchmarks/allreduce.py --nproc 2 --collective reduce

--collective picks reduce, broadcast, all_gather, reduce_scatter, gather or
scatter instead (root 0), the last four on lists of tensors, as users call
them. As in nccl-tests, the size of a gathering or scattering collective is
its whole (the gathered output, the scattered input), each rank's block a
size-th of it, and busbw scales algbw by the share of the data that crosses
a link: 2(n-1)/n for all_reduce, 1 for reduce and broadcast, (n-1)/n for the
others.

For each size: time per all_reduce (the slowest rank's mean over the timed
iterations of a round, best of --rounds rounds), algbw = bytes / time and
busbw = algbw * 2(n-1)/n, the traffic each rank's link carries in a ring.
With --compare-torch the same processes also run torch.distributed with gloo
on the same buffers, rounds alternating between the two so a busy moment on a
shared machine does not favour either, and the table adds gloo's time and
busbw and the ratio of ddpc's busbw to gloo's. The machine's memcpy bandwidth (one
process, 64 MiB) is printed as the physical reference.
"""

import argparse
import platform
import sys
import time

import numpy as np

from common import import_torch, machine, memcpy_bandwidth

if "--compare-torch" in sys.argv:
    import_torch()  # before ddpc: see import_torch

import ddpc  # noqa: E402
import ddpc.distributed as dist  # noqa: E402

OPS = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX,
       "prod": dist.ReduceOp.PROD}
DTYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "int32": np.int32,
          "int64": np.int64, "uint8": np.uint8}


BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "reduce": lambda n: 1.0, "broadcast": lambda n: 1.0,
              "all_gather": lambda n: (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
              "gather": lambda n: (n - 1) / n, "scatter": lambda n: (n - 1) / n}
# Their size is the whole (the list of every rank's block); each rank's block is a size-th of it.
BLOCKED = ("all_gather", "reduce_scatter", "gather", "scatter")


def calls(lib, name, whole, mine, rank, world, op):
    """One call of collective ``name`` through ``lib`` (ddpc.distributed or
    torch.distributed), root 0, op ``op``: on ``whole`` or, for the others,
    from or into ``mine`` (a rank's block) and the list of ``whole``'s blocks
    (the root's, for gather and scatter), as users call them."""
    parts = None if mine is None else [whole[r * len(mine):(r + 1) * len(mine)] for r in range(world)]
    at_root = parts if rank == 0 else None
    return {
        "all_reduce": lambda: lib.all_reduce(whole, op=op),
        "reduce": lambda: lib.reduce(whole, 0, op=op),
        "broadcast": lambda: lib.broadcast(whole, 0),
        "all_gather": lambda: lib.all_gather(parts, mine),
        "reduce_scatter": lambda: lib.reduce_scatter(mine, parts, op=op),
        "gather": lambda: lib.gather(mine, at_root, dst=0),
        "scatter": lambda: lib.scatter(mine, at_root, src=0),
    }[name]


def sizes(lo, hi):
    s = lo
    while s <= hi:
        yield s
        s *= 2


def iterations(fn, barrier, sync, device):
    """Iterations for ~0.2 s per round (5 to 1000), timed on rank 0 and
    broadcast (on the group's device) so every rank runs the same number of collectives."""
    barrier()
    t0 = time.perf_counter()
    for _ in range(3):
        fn()
    sync()
    n = [min(1000, max(5, int(0.2 / ((time.perf_counter() - t0) / 3))))]
    n = np.array(n, np.int64) if device is None else ddpc.tensor(n, dtype=ddpc.int64, device=device)
    dist.broadcast(n, src=0)
    return int(n[0])


def time_loop(fn, iters, barrier, sync):
    """Seconds per call of fn; sync waits for a GPU's queued collectives (nccl returns once they are queued)."""
    fn()
    sync()
    barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - t0) / iters


def worker(rank, args):
    dist.init_process_group(backend=args.backend)
    world = dist.get_world_size()
    dtype = DTYPES[args.dtype]
    item = np.dtype(dtype).itemsize
    on_gpu = args.backend == "nccl"  # CUDA tensors, one GPU per rank (LOCAL_RANK)
    device = f"cuda:{rank}" if on_gpu else None
    sync = ddpc.cuda.synchronize if on_gpu else (lambda: None)
    if on_gpu:
        buf = ddpc.zeros(args.max_bytes // item, dtype=args.dtype, device=device)
        slowest = ddpc.zeros(1, dtype=ddpc.float64, device=device)
    elif args.shared:  # reduced in place where the ranks share memory
        buf = np.frombuffer(dist.shared_buffer(args.max_bytes), dtype, args.max_bytes // item)
        slowest = np.zeros(1, np.float64)
    else:
        buf = np.zeros(args.max_bytes // item, dtype)
        slowest = np.zeros(1, np.float64)
    torch_dist = None
    if args.compare_torch:
        import torch
        import torch.distributed as torch_dist

        torch.set_num_threads(1)
        torch_dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.torch_port}", rank=rank,
                                      world_size=world)
        tbuf = torch.from_numpy(buf)
        # gloo has no average: --op avg times its sum.
        top = {"sum": torch_dist.ReduceOp.SUM, "avg": torch_dist.ReduceOp.SUM, "min": torch_dist.ReduceOp.MIN,
               "max": torch_dist.ReduceOp.MAX, "prod": torch_dist.ReduceOp.PRODUCT}[args.op]
    rows = []

    def slowest_rank(t):
        slowest[0] = t
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        return float(slowest[0])

    block = args.collective in BLOCKED
    part = np.zeros(args.max_bytes // item // world, dtype) if block else None
    for nbytes in sizes(args.min_bytes, args.max_bytes):
        count = max(nbytes // item // world * world, world) if block else max(nbytes // item, 1)
        best = [float("inf"), float("inf")]
        mine = part[:count // world] if block else None
        ddpc_op = calls(dist, args.collective, buf[:count], mine, rank, world, OPS[args.op])
        iters = iterations(ddpc_op, dist.barrier, sync, device)
        if torch_dist is not None:
            gloo_op = calls(torch_dist, args.collective, tbuf[:count], torch.from_numpy(mine) if block else None, rank,
                            world, top)
            gloo_iters = iterations(gloo_op, torch_dist.barrier, lambda: None, device)
        for _ in range(args.rounds):
            best[0] = min(best[0], slowest_rank(time_loop(ddpc_op, iters, dist.barrier, sync)))
            if torch_dist is not None:
                best[1] = min(best[1], slowest_rank(time_loop(gloo_op, gloo_iters, torch_dist.barrier, lambda: None)))
        rows.append([count * item, count] + best[:2 if torch_dist is not None else 1])
    if torch_dist is not None:
        torch_dist.destroy_process_group()
    dist.destroy_process_group()
    return rows


def parse_size(s):
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    s = s.strip().lower().rstrip("b").rstrip("i")
    return int(float(s[:-1]) * units[s[-1]]) if s and s[-1] in units else int(s)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc", type=int, default=2, help="ranks (processes on this host)")
    p.add_argument("--backend", default="cpu")
    p.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    p.add_argument("--op", default="sum", choices=sorted(OPS))
    p.add_argument("--collective", default="all_reduce", choices=sorted(BUS_FACTOR))
    p.add_argument("--min-bytes", type=parse_size, default=8)
    p.add_argument("--max-bytes", type=parse_size, default=256 << 20)
    p.add_argument("--rounds", type=int, default=3, help="timed rounds per size; the best is kept")
    p.add_argument("--compare-torch", action="store_true", help="also time torch.distributed (gloo)")
    p.add_argument("--shared", action="store_true",
                   help="all-reduce in a dist.shared_buffer (cpu backend, 2 or more ranks), as DDP's buckets are")
    args = p.parse_args()
    if (args.shared or args.backend != "cpu") and args.collective != "all_reduce":
        sys.exit("--shared and --backend nccl time the all_reduce only")
    if args.shared and (args.backend != "cpu" or args.nproc < 2):
        sys.exit("--shared needs the cpu backend and at least 2 ranks")
    if args.compare_torch and args.backend == "nccl":
        sys.exit("--compare-torch times gloo on host buffers; run it with the cpu backend")
    if args.compare_torch:
        if "torch" not in sys.modules:
            sys.exit("--compare-torch needs PyTorch importable (it is never a ddpc dependency)")
        from ddpc._procs import free_port

        args.torch_port = free_port()
    print(f"# ddpc {args.collective}: {args.nproc} ranks on one host, backend {args.backend}, {args.dtype} {args.op}"
          + (", in a shared buffer" if args.shared else ""))
    print(f"# host: {machine()}; Python {platform.python_version()}, ddpc {ddpc.__version__}"
          + (f", torch {sys.modules['torch'].__version__}" if args.compare_torch else ""))
    print(f"# memcpy bandwidth (one process, 256 MiB): {memcpy_bandwidth():.2f} GB/s")
    rows = ddpc.spawn(worker, args=(args,), nprocs=args.nproc)[0]
    n = args.nproc
    factor = BUS_FACTOR[args.collective](n) if n > 1 else 1.0
    head = f"{'size':>12} {'count':>11} {'type':>8} {'redop':>6} {'time_us':>10} {'algbw':>7} {'busbw':>7}"
    if args.compare_torch:
        head += f" {'gloo_us':>10} {'gloo_bus':>8} {'ratio':>6}"
    print(head)
    print(f"{'(B)':>12} {'(elements)':>11} {'':>8} {'':>6} {'':>10} {'(GB/s)':>7} {'(GB/s)':>7}"
          + (f" {'':>10} {'(GB/s)':>8} {'(bus)':>6}" if args.compare_torch else ""))
    for row in rows:
        nbytes, count, t = row[:3]
        alg = nbytes / t / 1e9
        line = (f"{nbytes:>12} {count:>11} {args.dtype:>8} {args.op:>6} {t * 1e6:>10.1f} {alg:>7.2f} "
                f"{alg * factor:>7.2f}")
        if args.compare_torch:
            tt = row[3]
            talg = nbytes / tt / 1e9
            line += f" {tt * 1e6:>10.1f} {talg * factor:>8.2f} {tt / t:>6.2f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()

"""DistributedDataParallel step time on the cpu backend (and one rank on nccl with --device cuda).

    python benchmarks/ddp.py [--ranks 1 2] [--batch 64] [--steps 20]

For a ~5M-parameter MLP it prints per-step time and samples/s of plain
training (no DDP) and of DDP with overlap on (its default buckets: 1 MiB, then 25 MiB; all-reduce
launched during backward) and off (one bucket holding every gradient, reduced
after backward), and, with the ranks on one host, of DDP all-reducing every
gradient (the linear weights' exchange, nn/_grad_exchange.py, turned off by a
comm hook that is the default all-reduce under another name), the DDP
overhead ratio (DDP step / plain step at the same per-rank batch), the time
of all-reducing the gradients alone (in a dist.shared_buffer on the cpu
backend, as DDP's buckets are), and the fraction of that time hidden behind
backward, two ways:
    hidden = 1 - (DDP step - plain step) / all-reduce time
(the time the all-reduce would have added that the step does not show), and
    overlap = backward_compute_comm_overlap_time / backward_comm_time
from DDP's runtime stats (PyTorch's ``_get_ddp_logging_data()`` fields,
taken every step here): the part of each step's communication window, from
the first bucket's launch until the averaged gradients are in place, that
backward's computation covers.
"""

import argparse
import time

import numpy as np

import ddpc

LAYERS = (1024, 2048, 1536, 10)  # 1024*2048 + 2048*1536 + 1536*10 weights + biases ~ 5.2M parameters


def build(device):
    from ddpc import nn
    ddpc.manual_seed(0)
    mods = []
    for i, (a, b) in enumerate(zip(LAYERS[:-1], LAYERS[1:])):
        mods.append(nn.Linear(a, b))
        if i < len(LAYERS) - 2:
            mods.append(nn.ReLU())
    return nn.Sequential(*mods).to(device)


BLOCK = 5  # timed steps per mode in turn


def step(model, optimizer, loss_fn, x, y, sync):
    start = time.perf_counter()
    optimizer.zero_grad()
    loss_fn(model(x), y).backward()
    optimizer.step()
    sync()
    return time.perf_counter() - start


def rank_main(rank, args):
    import ddpc.distributed as dist
    from ddpc import nn

    device = "cuda" if args.device == "cuda" else "cpu"
    sync = ddpc.cuda.synchronize if device == "cuda" else (lambda: None)
    dist.init_process_group("nccl" if device == "cuda" else "cpu")
    world = dist.get_world_size()
    rng = np.random.default_rng(rank)
    x = ddpc.from_numpy(rng.standard_normal((args.batch, LAYERS[0])).astype(np.float32)).to(device)
    y = ddpc.from_numpy(rng.integers(0, LAYERS[-1], args.batch)).to(device)
    model = build(device)
    setups = {"plain": (model, ddpc.optim.SGD(model.parameters(), lr=1e-3))}
    modes = [("overlap", args.bucket_cap_mb), ("no_overlap", 1 << 20)]
    if device == "cpu" and world > 1:
        modes.append(("allreduce_only", args.bucket_cap_mb))
    for name, cap in modes:
        model = build(device)
        ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=cap)
        if name == "allreduce_only":
            ddp.register_comm_hook(None, lambda state, bucket: nn.parallel.allreduce_hook(state, bucket))
        setups[name] = (ddp, ddpc.optim.SGD(ddp.parameters(), lr=1e-3))
    # The modes take turns, BLOCK steps each, so that they share the machine's
    # slow and fast moments; every turn starts together on all ranks, with one
    # untimed step (the plain steps let the ranks drift apart).
    loss_fn = nn.CrossEntropyLoss()
    times = {name: [] for name in setups}
    overlaps = {name: [] for name in setups if name != "plain"}
    for name in overlaps:
        setups[name][0]._set_ddp_runtime_logging_sample_rate(1)
    for _ in range(-(-args.steps // BLOCK)):
        for name, (m, opt) in setups.items():
            dist.barrier()
            step(m, opt, loss_fn, x, y, sync)
            for _ in range(BLOCK):
                times[name].append(step(m, opt, loss_fn, x, y, sync))
                if name in overlaps:  # (the stats of the step before this one, logged by its forward)
                    stats = m._get_ddp_logging_data()
                    if stats.get("backward_comm_time"):
                        overlaps[name].append(stats["backward_compute_comm_overlap_time"] / stats["backward_comm_time"])
    out = {name: float(np.median(t)) for name, t in times.items()}
    out["covered"] = {name: float(np.median(o)) for name, o in overlaps.items() if o}
    # All-reduced alone the way DDP reduces its buckets: in place in a shared buffer on the cpu backend.
    n = sum(p.numel() for p in model.parameters())
    memory = dist.shared_buffer(4 * n)
    grads = ddpc.from_numpy(np.frombuffer(memory, np.float32, n)) if memory else ddpc.zeros(n, device=device)
    comm = []
    for _ in range(args.steps + 3):
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(grads)
        sync()
        comm.append(time.perf_counter() - start)
    out["allreduce"] = float(np.median(comm[3:]))
    out["world"] = world
    dist.destroy_process_group()
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batch", type=int, default=64, help="per-rank batch")
    parser.add_argument("--steps", type=int, default=15, help="timed steps per mode")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--bucket-cap-mb", type=float, default=None,
                        help="DDP's bucket_cap_mb (default: its own, 25 MiB after a first bucket of 1 MiB)")
    args = parser.parse_args()
    from common import machine, print_table
    print(f"machine: {machine()}")
    nparams = sum(a * b + b for a, b in zip(LAYERS[:-1], LAYERS[1:]))
    print(f"model: MLP {'-'.join(map(str, LAYERS))} ({nparams / 1e6:.1f}M parameters), per-rank batch {args.batch}, "
          f"backend {'nccl' if args.device == 'cuda' else 'cpu'}")
    rows = []
    for n in (args.ranks if args.device == "cpu" else [1]):
        r = ddpc.spawn(rank_main, args=(args,), nprocs=n)[0]
        for name in ("plain", "overlap", "no_overlap", "allreduce_only"):
            if name not in r:
                continue
            t = r[name]
            ratio = t / r["plain"]
            # (clipped to [0, 1]: a DDP step faster than the plain one is the machine's noise)
            hidden = 1 - (t - r["plain"]) / r["allreduce"] if name != "plain" and n > 1 else None
            hidden = "" if hidden is None else f"{min(1.0, max(0.0, hidden)):.2f}"
            overlap = f"{r['covered'][name]:.2f}" if name in r["covered"] else ""
            rows.append((n, name, f"{t * 1e3:.1f}", f"{n * args.batch / t:.0f}", f"{ratio:.3f}",
                         f"{r['allreduce'] * 1e3:.1f}", hidden, overlap))
    print_table(["ranks", "mode", "step ms", "samples/s", "overhead", "allreduce ms", "hidden", "overlap"], rows)


if __name__ == "__main__":
    main()

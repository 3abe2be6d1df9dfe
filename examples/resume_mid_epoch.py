"""Checkpoints in the middle of an epoch and resumes there after a restart.

    ddpc-run --nproc-per-node 2 --max-restarts 1 examples/resume_mid_epoch.py --fail-at 1:7

A linear regression trained with DistributedDataParallel on a synthetic data
set, checkpointed every --checkpoint-every steps with the loader's state
(ddpc.checkpoint.loader_state). With --fail-at EPOCH:STEP the last rank kills
itself at that step of the first start; ddpc-run restarts the group, which
resumes from the last checkpoint with the batches of that epoch it had not
trained on yet, in the order it would have, so it ends with the parameters of
a run that was never interrupted. Each rank keeps the sample indices it trained
on in the checkpoint; --save writes them and the final parameters.
"""

import argparse
import json
import os
import sys

import numpy as np

import ddpc
import ddpc.distributed as dist
from ddpc import nn
from ddpc.data import DataLoader, DistributedSampler, TensorDataset


def make_data(n, features=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, features)).astype(np.float32)
    w = np.arange(1, features + 1, dtype=np.float32)
    y = (X @ w + 0.1 * rng.standard_normal(n)).astype(np.float32)[:, None]
    return X, y, np.arange(n, dtype=np.int64)


def main(argv=None):
    parser = argparse.ArgumentParser(description="mid-epoch checkpoints and resumption")
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=8, help="per rank")
    parser.add_argument("--checkpoint", default="resume_checkpoint.ddpc")
    parser.add_argument("--checkpoint-every", type=int, default=5, help="steps")
    parser.add_argument("--fail-at", help="EPOCH:STEP at which the last rank dies on the first start")
    parser.add_argument("--save", help="write the final parameters and each rank's sample indices here (.json)")
    args = parser.parse_args(argv)

    dist.init_process_group("cpu")
    rank, world = dist.get_rank(), dist.get_world_size()
    train = TensorDataset(*make_data(args.samples))
    sampler = DistributedSampler(train, shuffle=True, seed=0)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)

    ddpc.manual_seed(0)
    model = nn.Linear(4, 1)
    ddp = nn.parallel.DistributedDataParallel(model)
    optimizer = ddpc.optim.SGD(ddp.parameters(), lr=0.05)
    loss_fn = nn.MSELoss()

    seen, start_epoch = [], 0  # the sample indices this rank trained on, batch by batch
    state = ddpc.checkpoint.load(args.checkpoint)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        ddpc.checkpoint.load_loader_state(loader, state["loader"])
        # A state taken after an epoch's last batch resumes with the next epoch.
        seen = state["seen"][rank]
        start_epoch = state["epoch"] + (1 if state["loader"][rank]["finished"] else 0)
        if rank == 0:
            position = state["loader"][0]
            print(f"resumed from {args.checkpoint} at epoch {start_epoch} after batch "
                  f"{position['batches_yielded']} of {position['num_batches']}", flush=True)
    fail = None if args.fail_at is None else tuple(int(v) for v in args.fail_at.split(":"))
    first_start = os.environ.get("DDPC_RESTART_COUNT", "0") == "0"

    for epoch in range(start_epoch, args.epochs):
        sampler.set_epoch(epoch)
        total, count = 0.0, 0
        for xb, yb, ib in loader:
            step = loader.state_dict()["batches_yielded"]  # this batch's number in the epoch, from 1
            if fail == (epoch, step) and rank == world - 1 and first_start:
                os.kill(os.getpid(), 9)
            optimizer.zero_grad()
            loss = loss_fn(ddp(xb), yb)
            loss.backward()
            optimizer.step()
            seen.append(ib.numpy().tolist())
            total, count = total + loss.item(), count + 1
            if step % args.checkpoint_every == 0:
                everyone = [None] * world
                dist.all_gather_object(everyone, seen)
                ddpc.checkpoint.save({"epoch": epoch, "model": model.state_dict(),
                                      "optimizer": optimizer.state_dict(), "seen": everyone,
                                      "loader": ddpc.checkpoint.loader_state(loader)}, args.checkpoint)
        if rank == 0:
            print(f"epoch {epoch}  loss {total / max(count, 1):.5f}  ({count} steps)", flush=True)

    everyone = [None] * world
    dist.all_gather_object(everyone, seen)
    if rank == 0 and args.save:
        with open(args.save, "w") as f:
            json.dump({"params": {k: v.numpy().tolist() for k, v in model.state_dict().items()},
                       "seen": everyone}, f)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

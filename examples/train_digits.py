"""The main job: an MLP on scikit-learn's digits, trained with DistributedDataParallel.

    pip install ".[examples]" && ddpc-run --nproc-per-node 2 examples/train_digits.py

Two processes on the cpu backend by default; on a machine with GPUs, run one
process per GPU (``--nproc-per-node <gpus>``) and the nccl backend is chosen
(with more processes than GPUs they stay on the cpu backend).
Each epoch: DistributedSampler.set_epoch, a progress bar on rank 0, loss and
test accuracy, and a checkpoint (resumed from when the job restarts, e.g. under
``ddpc-run --max-restarts 1``). Exits non-zero if test accuracy is below --min-accuracy.
"""

import argparse
import os
import sys
import time

import numpy as np

import ddpc
import ddpc.distributed as dist
from ddpc import nn
from ddpc.data import DataLoader, DistributedSampler, TensorDataset


def load_digits(seed=0, test_fraction=0.2):
    from sklearn.datasets import load_digits as sk_digits

    X, y = sk_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32)
    order = np.random.default_rng(seed).permutation(len(X))
    n_test = int(len(X) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return X[train], y[train].astype(np.int64), X[test], y[test].astype(np.int64)


def progress(epoch, step, steps, loss, start):
    if not sys.stderr.isatty():  # a log file gets the per-epoch lines only
        return
    width = 30
    done = int(width * step / steps)
    sys.stderr.write(f"\repoch {epoch:2d} [{'#' * done}{'.' * (width - done)}] {step}/{steps} "
                     f"loss {loss:.4f} {time.perf_counter() - start:.1f}s")
    sys.stderr.flush()


def evaluate(model, X, y, device):
    with ddpc.no_grad():
        logits = model(ddpc.from_numpy(X).to(device)).cpu().numpy()
    return float((logits.argmax(1) == y).mean())


def main(argv=None):
    parser = argparse.ArgumentParser(description="DDP on scikit-learn's digits")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--checkpoint", default=os.environ.get("DIGITS_CHECKPOINT", "digits_checkpoint.ddpc"))
    parser.add_argument("--min-accuracy", type=float, default=0.95)
    parser.add_argument("--save-params", help="write the final parameters here (.npz)")
    args = parser.parse_args(argv)

    # nccl when every rank has a GPU of its own, else cpu (more ranks than GPUs, or none).
    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    device = dist.collective_device()
    use_gpu = device != "cpu"

    X_train, y_train, X_test, y_test = load_digits()
    train = TensorDataset(X_train, y_train)
    sampler = DistributedSampler(train, shuffle=True, seed=0)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)

    ddpc.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10)).to(device)
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[device] if use_gpu else None)
    optimizer = ddpc.optim.Adam(ddp.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()

    state = ddpc.checkpoint.load(args.checkpoint)
    start_epoch = 0
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_epoch = state["epoch"] + 1
        if rank == 0:
            print(f"resumed from {args.checkpoint} after epoch {state['epoch']}", flush=True)
    fail_at = os.environ.get("DIGITS_FAIL_AT_EPOCH")  # for restart tests: die once, mid-epoch
    if rank == 0:
        print(f"training on {world} process(es), backend {dist.get_backend()}, device {device}", flush=True)

    accuracy = evaluate(model, X_test, y_test, device)
    for epoch in range(start_epoch, args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        start, total, count = time.perf_counter(), 0.0, 0
        for step, (xb, yb) in enumerate(loader, 1):
            if (fail_at is not None and int(fail_at) == epoch and rank == world - 1 and step == 2
                    and os.environ.get("DDPC_RESTART_COUNT", "0") == "0"):
                os.kill(os.getpid(), 9)
            optimizer.zero_grad()
            loss = loss_fn(ddp(xb.to(device)), yb.to(device))
            loss.backward()
            optimizer.step()
            total, count = total + loss.item(), count + 1
            if rank == 0:
                progress(epoch, step, len(loader), total / count, start)
        model.eval()
        accuracy = evaluate(model, X_test, y_test, device)
        ddpc.checkpoint.save({"epoch": epoch, "model": model.state_dict(), "optimizer": optimizer.state_dict()},
                             args.checkpoint)
        if rank == 0:
            if sys.stderr.isatty():
                sys.stderr.write("\n")
            print(f"epoch {epoch:2d}  loss {total / max(count, 1):.4f}  test accuracy {accuracy:.4f}", flush=True)

    if rank == 0:
        print(f"final test accuracy {accuracy:.4f}", flush=True)
        if args.save_params:
            np.savez(args.save_params, **{k: v.cpu().numpy() for k, v in model.state_dict().items()})
    dist.destroy_process_group()
    return 0 if accuracy >= args.min_accuracy else 1


if __name__ == "__main__":
    sys.exit(main())

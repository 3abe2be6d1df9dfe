"""Hogwild: several processes train one model in shared memory, lock-free, as
PyTorch's examples/mnist_hogwild does.

    python examples/hogwild.py

The parent builds the model and calls ``model.share_memory()``; each process
started through ``ddpc.multiprocessing`` is handed the same parameters
(mapped, not copied), runs SGD on its own shuffle of the data and writes its
updates into them without locks. Gradients are each process's own. Once the
processes are done, the parent evaluates the model they trained.
"""

import argparse

import ddpc
import ddpc.multiprocessing as mp
from ddpc import nn
from ddpc.data import DataLoader, TensorDataset

from common import accuracy, make_blobs, make_model


def train(rank, args, model):
    ddpc.manual_seed(args.seed + rank)  # a shuffle of its own
    X, y = make_blobs()
    loader = DataLoader(TensorDataset(X, y), batch_size=args.batch_size, shuffle=True)
    optimizer = ddpc.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(args.epochs):
        for xb, yb in loader:
            optimizer.zero_grad()
            loss_fn(model(xb), yb).backward()
            optimizer.step()


def evaluate(model, X, y):
    with ddpc.no_grad():
        loss = nn.CrossEntropyLoss()(model(ddpc.from_numpy(X)), ddpc.from_numpy(y)).item()
    return loss, accuracy(model, X, y)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-processes", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--start-method", default="spawn", choices=("spawn", "fork", "forkserver"))
    args = parser.parse_args()

    X, y = make_blobs()
    model = make_model()
    model.share_memory()  # grads come later, in each process, so they are not shared
    loss, acc = evaluate(model, X, y)
    print(f"before training: loss {loss:.4f}  accuracy {acc:.3f}")

    ctx = mp.get_context(args.start_method)
    processes = [ctx.Process(target=train, args=(rank, args, model)) for rank in range(args.num_processes)]
    for p in processes:
        p.start()
    for p in processes:
        p.join()
    failed = [rank for rank, p in enumerate(processes) if p.exitcode != 0]
    if failed:
        raise SystemExit(f"process(es) {failed} failed")

    loss, acc = evaluate(model, X, y)
    print(f"after {args.num_processes} processes trained it: loss {loss:.4f}  accuracy {acc:.3f}")


if __name__ == "__main__":
    main()

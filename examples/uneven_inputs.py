"""Uneven inputs: ranks with fewer batches finish the epoch inside DistributedDataParallel.join().

    ddpc-run --nproc-per-node 2 examples/uneven_inputs.py

Each rank gets a different number of batches on purpose; without join() the
rank with more batches would wait for a partner that has stopped.
"""

import ddpc
import ddpc.distributed as dist
from ddpc import nn

from common import make_blobs, make_model


def main():
    dist.init_process_group("cpu")
    rank = dist.get_rank()
    X, y = make_blobs(n=512, seed=rank)
    batches = 5 + 3 * rank  # rank 0: 5 batches, rank 1: 8, ...
    model = nn.parallel.DistributedDataParallel(make_model())
    optimizer = ddpc.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    with model.join():
        for i in range(batches):
            xb, yb = ddpc.from_numpy(X[i * 32:(i + 1) * 32]), ddpc.from_numpy(y[i * 32:(i + 1) * 32])
            optimizer.zero_grad()
            loss_fn(model(xb), yb).backward()
            optimizer.step()
    total = ddpc.tensor([float(batches)])
    dist.all_reduce(total)
    print(f"rank {rank}: ran {batches} batches; the group ran {int(total.item())} in all", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""Gradient accumulation with DistributedDataParallel.no_sync: reduce once per k micro-batches.

    ddpc-run --nproc-per-node 2 examples/grad_accumulation.py
"""

import ddpc
import ddpc.distributed as dist
from ddpc import nn
from ddpc.data import DataLoader, DistributedSampler, TensorDataset

from common import accuracy, make_blobs, make_model


def main(epochs=3, accumulate=4):
    dist.init_process_group("cpu")
    X, y = make_blobs()
    dataset = TensorDataset(X, y)
    sampler = DistributedSampler(dataset, seed=0)
    model = nn.parallel.DistributedDataParallel(make_model())
    optimizer = ddpc.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for i, (xb, yb) in enumerate(DataLoader(dataset, batch_size=16, sampler=sampler), 1):
            if i % accumulate:
                with model.no_sync():  # local accumulation, no communication
                    (loss_fn(model(xb), yb) / accumulate).backward()
                continue
            (loss_fn(model(xb), yb) / accumulate).backward()  # this backward all-reduces the sum
            optimizer.step()
            optimizer.zero_grad()
        if dist.get_rank() == 0:
            print(f"epoch {epoch}  accuracy {accuracy(model.module, X, y):.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""DistributedDataParallel with a DistributedSampler, launched by ddpc-run.

    ddpc-run --nproc-per-node 2 examples/ddp_run.py
"""

import ddpc
import ddpc.distributed as dist
from ddpc import nn
from ddpc.data import DataLoader, DistributedSampler, TensorDataset

from common import accuracy, make_blobs, make_model


def main(epochs=5):
    dist.init_process_group("cpu")
    rank = dist.get_rank()
    X, y = make_blobs()
    dataset = TensorDataset(X, y)
    sampler = DistributedSampler(dataset, seed=0)
    loader = DataLoader(dataset, batch_size=32, sampler=sampler)
    model = nn.parallel.DistributedDataParallel(make_model())
    optimizer = ddpc.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            optimizer.zero_grad()
            loss_fn(model(xb), yb).backward()
            optimizer.step()
        if rank == 0:
            print(f"epoch {epoch}  accuracy {accuracy(model.module, X, y):.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

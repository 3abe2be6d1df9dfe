"""DistributedDataParallel started from Python with ddpc.spawn (also works in a notebook).

    python examples/ddp_spawn.py
"""

import ddpc
import ddpc.distributed as dist
from ddpc import nn
from ddpc.data import DataLoader, DistributedSampler, TensorDataset

from common import accuracy, make_blobs, make_model


def train(rank, epochs):
    dist.init_process_group("cpu")
    X, y = make_blobs()
    dataset = TensorDataset(X, y)
    sampler = DistributedSampler(dataset, seed=0)
    model = nn.parallel.DistributedDataParallel(make_model())
    optimizer = ddpc.optim.Adam(model.parameters(), lr=1e-2)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for xb, yb in DataLoader(dataset, batch_size=32, sampler=sampler):
            optimizer.zero_grad()
            loss_fn(model(xb), yb).backward()
            optimizer.step()
    result = accuracy(model.module, X, y)
    dist.destroy_process_group()
    return result


def main(nprocs=2, epochs=3):
    accuracies = ddpc.spawn(train, args=(epochs,), nprocs=nprocs)
    print("accuracy per rank (identical models):", accuracies)
    return accuracies


if __name__ == "__main__":
    main()

"""Imbalanced classes with WeightedDistributedSampler: each rank draws its share by inverse class frequency.

    ddpc-run --nproc-per-node 2 examples/imbalanced.py
"""

import numpy as np

import ddpc
import ddpc.distributed as dist
from ddpc import nn
from ddpc.data import DataLoader, TensorDataset, WeightedDistributedSampler

from common import make_blobs, make_model


def main(epochs=3):
    dist.init_process_group("cpu")
    X, y = make_blobs(weights=[0.85, 0.1, 0.04, 0.01])
    counts = np.bincount(y, minlength=4)
    weights = (1.0 / counts)[y]  # every class equally likely per draw
    sampler = WeightedDistributedSampler(weights, num_samples=len(y), seed=0)
    model = nn.parallel.DistributedDataParallel(make_model())
    optimizer = ddpc.optim.Adam(model.parameters(), lr=1e-2)
    loss_fn = nn.CrossEntropyLoss()
    seen = np.zeros(4, np.int64)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for xb, yb in DataLoader(TensorDataset(X, y), batch_size=32, sampler=sampler):
            seen += np.bincount(yb.numpy(), minlength=4)
            optimizer.zero_grad()
            loss_fn(model(xb), yb).backward()
            optimizer.step()
    with ddpc.no_grad():
        pred = model.module(ddpc.from_numpy(X)).numpy().argmax(1)
    recall = [float((pred[y == c] == c).mean()) for c in range(4)]
    if dist.get_rank() == 0:
        print("class frequencies in the data:", np.round(counts / counts.sum(), 3).tolist())
        print("class frequencies drawn on rank 0:", np.round(seen / seen.sum(), 3).tolist())
        print("per-class recall:", np.round(recall, 3).tolist(), flush=True)
    dist.destroy_process_group()
    return recall


if __name__ == "__main__":
    main()

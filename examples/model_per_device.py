"""One independent model per device, each on its own data set; the parent collects the final losses.

    python examples/model_per_device.py

No gradients are shared: ddpc.spawn only starts the processes (one per GPU
when there are GPUs, else two on the CPU) and returns each one's result.
"""

import ddpc
from ddpc import nn
from ddpc.data import DataLoader, TensorDataset

from common import make_blobs, make_model


def train_one(rank, epochs):
    device = f"cuda:{rank}" if rank < ddpc.cuda.device_count() else "cpu"  # ranks beyond the GPUs on the host
    X, y = make_blobs(seed=100 + rank)  # each process its own data set
    model = make_model(seed=rank).to(device)
    optimizer = ddpc.optim.Adam(model.parameters(), lr=1e-2)
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(epochs):
        for xb, yb in DataLoader(TensorDataset(X, y), batch_size=64, shuffle=True, device=device):
            optimizer.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            optimizer.step()
    return loss.item()


def main(epochs=3):
    nprocs = max(ddpc.cuda.device_count(), 2)
    losses = ddpc.spawn(train_one, args=(epochs,), nprocs=nprocs)
    for rank, loss in enumerate(losses):
        print(f"model {rank}: final loss {loss:.4f}")
    return losses


if __name__ == "__main__":
    main()

"""Training in less memory under DDP: autocast with a GradScaler, activation
checkpointing, and the optimizer state sharded with ZeroRedundancyOptimizer.

    ddpc-run --nproc-per-node 2 examples/less_memory.py

On a GPU machine use `with ddpc.autocast("cuda")` (float16) with the scaler;
on the host autocast runs the GEMMs' inputs and outputs in bfloat16, which
needs no loss scaling (the scaler is kept here to show the calls; with
`enabled=False` it would pass everything through).
"""

import ddpc
import ddpc.distributed as dist
from ddpc import nn
from ddpc.data import DataLoader, DistributedSampler, TensorDataset
from ddpc.utils.checkpoint import checkpoint

from common import accuracy, make_blobs


class Net(nn.Module):
    def __init__(self, features=20, hidden=128, classes=4):
        super().__init__()
        ddpc.manual_seed(0)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(features if i == 0 else hidden, hidden), nn.ReLU())
                                    for i in range(3))
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)  # activations recomputed in backward
        return self.head(x)


def main(epochs=4):
    dist.init_process_group("cpu")
    rank = dist.get_rank()
    X, y = make_blobs()
    dataset = TensorDataset(X, y)
    sampler = DistributedSampler(dataset, seed=0)
    loader = DataLoader(dataset, batch_size=32, sampler=sampler)
    model = nn.parallel.DistributedDataParallel(Net())
    optimizer = ddpc.optim.ZeroRedundancyOptimizer(model.parameters(), ddpc.optim.Adam, lr=3e-3)
    scaler = ddpc.amp.GradScaler("cpu", init_scale=2.0**8)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            optimizer.zero_grad()
            with ddpc.autocast("cpu"):
                loss = loss_fn(model(xb), yb)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        if rank == 0:
            owned = sum(p.numel() for p in optimizer.optim.param_groups[0]["params"])
            total = sum(p.numel() for p in model.parameters())
            print(f"epoch {epoch}  accuracy {accuracy(model.module, X, y):.3f}  optimizer state for {owned} of "
                  f"{total} parameters on this rank", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

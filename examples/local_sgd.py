"""Post-local SGD: DistributedDataParallel averages gradients for the first
steps, then each rank steps on its own and the models are averaged every few
steps, which saves most of the communication once training has settled.

    ddpc-run --nproc-per-node 2 examples/local_sgd.py
"""

import ddpc
import ddpc.distributed as dist
from ddpc import nn
from ddpc.data import DataLoader, DistributedSampler, TensorDataset
from ddpc.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as local_sgd
from ddpc.distributed.algorithms.model_averaging import averagers, utils
from ddpc.distributed.optim import PostLocalSGDOptimizer

from common import accuracy, make_blobs, make_model


def main(epochs=3, start=20, period=4):
    dist.init_process_group("cpu")
    X, y = make_blobs()
    dataset = TensorDataset(X, y)
    sampler = DistributedSampler(dataset, seed=0)
    model = nn.parallel.DistributedDataParallel(make_model())
    # After `start` steps no gradient is all-reduced at all; with post_local_gradient_allreduce=True
    # the ranks of each node would go on averaging theirs.
    state = local_sgd.PostLocalSGDState(None, None, start_localSGD_iter=start, post_local_gradient_allreduce=False)
    model.register_comm_hook(state, local_sgd.post_localSGD_hook)
    averager = averagers.PeriodicModelAverager(period=period, warmup_steps=start)
    optimizer = PostLocalSGDOptimizer(ddpc.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), averager)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for xb, yb in DataLoader(dataset, batch_size=32, sampler=sampler):
            optimizer.zero_grad()
            loss_fn(model(xb), yb).backward()
            optimizer.step()  # SGD's step, then the models' average every `period` steps
        if dist.get_rank() == 0:
            averaged = max(0, (averager.step - start + period - 1) // period)
            print(f"epoch {epoch}  accuracy {accuracy(model.module, X, y):.3f}  "
                  f"(step {averager.step}, models averaged {averaged} times)", flush=True)
    utils.average_parameters(model.parameters(), None)  # one last average, for the model to keep
    checksums = [None] * dist.get_world_size()
    dist.all_gather_object(checksums, [float(p.sum()) for p in model.parameters()])
    if dist.get_rank() == 0:
        print(f"ranks hold the same model: {all(c == checksums[0] for c in checksums)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""A gradient penalty under DistributedDataParallel: a WGAN-GP critic
estimates the Wasserstein-1 distance between two Gaussian clouds, whose
true value is the distance d between their means (3.0 here). The penalty
holds the critic's slope near 1 only softly: the best critic against
penalty weight w slopes 1 + d / (2 w), so its estimate tends to d + d^2 / (2 w).

The penalty needs the gradient of the critic with respect to its input as
part of the graph: ``ddpc.autograd.grad(..., create_graph=True)``, then an
ordinary ``backward()`` of the loss that contains it, which DDP averages.

    python examples/gradient_penalty.py
"""

import ddpc
import ddpc.distributed as dist
from ddpc import nn

SHIFT = 3.0  # the second cloud's mean, along the first axis
WEIGHT = 50.0  # the penalty's weight


def critic():
    ddpc.manual_seed(0)
    return nn.Sequential(nn.Linear(2, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))


def clouds(n, generator):
    real = ddpc.randn(n, 2, generator=generator)
    fake = ddpc.randn(n, 2, generator=generator) + ddpc.tensor([SHIFT, 0.0])
    return real, fake


def gradient_penalty(model, real, fake, generator):
    """(|d critic / d x| - 1)^2 on random points between the two clouds."""
    alpha = ddpc.rand(real.shape[0], 1, generator=generator)
    mixed = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    (grad,) = ddpc.autograd.grad(model(mixed).sum(), mixed, create_graph=True)
    return ((grad.norm(dim=1) - 1) ** 2).mean()


def train(rank, steps, batch):
    dist.init_process_group("cpu")
    model = nn.parallel.DistributedDataParallel(critic())
    optimizer = ddpc.optim.Adam(model.parameters(), lr=2e-3, betas=(0.5, 0.9))
    generator = ddpc.Generator().manual_seed(1 + rank)  # each rank draws its own samples
    for step in range(steps):
        real, fake = clouds(batch, generator)
        estimate = model(fake).mean() - model(real).mean()
        loss = -estimate + WEIGHT * gradient_penalty(model, real, fake, generator)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with ddpc.no_grad():
        real, fake = clouds(4096, ddpc.Generator().manual_seed(99))
        distance = (model(fake).mean() - model(real).mean()).item()
    dist.destroy_process_group()
    return distance


def main(nprocs=2, steps=300, batch=128):
    distances = ddpc.spawn(train, args=(steps, batch), nprocs=nprocs)
    print(f"estimated Wasserstein-1 distance per rank (identical critics): {distances}; true {SHIFT}, "
          f"the penalised optimum {SHIFT + SHIFT ** 2 / (2 * WEIGHT):.2f}")
    return distances


if __name__ == "__main__":
    main()

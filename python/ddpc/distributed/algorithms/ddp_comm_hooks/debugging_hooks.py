"""A comm hook that communicates nothing, as
torch.distributed.algorithms.ddp_comm_hooks' debugging_hooks: with it each
rank keeps its own gradients, which tells how much of a step's time the
all-reduce takes (headroom analysis), never for training."""

from .... import distributed as dist

__all__ = ["noop_hook"]


def noop_hook(_, bucket):
    """A future that already holds the bucket as it is: no communication."""
    return dist.Future(value=bucket.buffer())

"""The post-local SGD comm hook (Lin et al., "Don't use large mini-batches,
use local SGD", 2020), as torch.distributed.algorithms.ddp_comm_hooks'
post_localSGD_hook: for the first ``start_localSGD_iter`` steps DDP averages
gradients over the whole group as usual; after that only within
``subgroup`` (by default the ranks of this node), or not at all with
``post_local_gradient_allreduce=False``, and a model averager run after the
optimizer step (ddpc.distributed.optim.PostLocalSGDOptimizer) keeps the
ranks' models together."""

from .... import distributed as dist
from ....nn.parallel import allreduce_hook

__all__ = ["PostLocalSGDState", "post_localSGD_hook"]


class PostLocalSGDState:
    """What ``post_localSGD_hook`` keeps across steps: the global group
    (``process_group``, None: the default group), the group that averages
    gradients once local SGD has started (``subgroup``; None: the intra-node
    subgroups that ddpc.distributed.new_subgroups() makes at that moment),
    the step at which it starts, and ``iter``, the steps counted until then."""

    __slots__ = ["process_group", "subgroup", "start_localSGD_iter", "post_local_gradient_allreduce", "iter"]

    def __init__(self, process_group, subgroup, start_localSGD_iter, post_local_gradient_allreduce=True):
        self.process_group = process_group
        self.subgroup = subgroup
        self.start_localSGD_iter = start_localSGD_iter
        self.post_local_gradient_allreduce = post_local_gradient_allreduce
        self.iter = 0

    def maybe_increase_iter(self, bucket):
        """Counts a step when the step's last bucket is reduced."""
        if bucket.is_last():
            self.iter += 1


def post_localSGD_hook(state, bucket):
    """Averages the bucket over ``state.process_group`` before
    ``state.start_localSGD_iter`` steps, afterwards over ``state.subgroup``
    (nothing to send where it has one rank), or leaves it as it is when
    ``state.post_local_gradient_allreduce`` is False."""
    if state.iter < state.start_localSGD_iter:
        state.maybe_increase_iter(bucket)
        return allreduce_hook(state.process_group, bucket)
    if not state.post_local_gradient_allreduce:
        return dist.Future(value=bucket.buffer())
    if state.subgroup is None:
        state.subgroup, _ = dist.new_subgroups()
    return allreduce_hook(state.subgroup, bucket)

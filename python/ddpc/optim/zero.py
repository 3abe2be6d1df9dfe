"""ZeroRedundancyOptimizer: optimizer state sharded across the ranks of a
group (ZeRO stage 1), shaped like torch.distributed.optim's.

Every parameter is owned by one rank, chosen as PyTorch does: within each
parameter group, largest first, each to the rank that owns the fewest
elements so far. A rank builds the wrapped optimizer over its own parameters
only, so it keeps 1/world of the state. ``step()`` updates the owned
parameters, then every rank broadcasts what it updated: one flat broadcast per
owner and dtype, so the step costs world-size collectives however many
parameters there are. Gradients must already agree across the ranks (DDP's
all-reduce sees to that).

``param_groups`` holds every parameter, and its hyper-parameters are copied
to the shards before each step, so lr schedulers work on the wrapper.
``consolidate_state_dict(to)`` gathers the shards' state on rank ``to``,
whose ``state_dict()`` then has the layout a plain optimizer over all the
parameters would have; ``load_state_dict`` takes such a dict on every rank.

It is a Joinable: under ``Join([ddp, zero])``
(ddpc.distributed.algorithms.join) a rank that ran out of inputs keeps
stepping its shard with the gradients its DDP receives, and takes part in
the broadcasts, until every rank is done.

Where ddpc differs: it lives at ``ddpc.optim.ZeroRedundancyOptimizer``
(also at PyTorch's ``ddpc.distributed.optim``); ``overlap_with_ddp=True`` is not
supported; ``parameters_as_bucket_view`` is accepted and changes nothing.
"""

from .. import distributed as dist
from .._join import Join, JoinHook, _GroupJoinable
from ..autograd import no_grad
from ..tensor import cat
from .optimizer import Optimizer, _saved_state

__all__ = ["ZeroRedundancyOptimizer"]


class ZeroRedundancyOptimizer(Optimizer, _GroupJoinable):
    def __init__(self, params, optimizer_class, process_group=None, parameters_as_bucket_view=False,
                 overlap_with_ddp=False, **defaults):
        if overlap_with_ddp:
            raise NotImplementedError("ZeroRedundancyOptimizer: overlap_with_ddp=True is not supported by ddpc")
        if not isinstance(optimizer_class, type) or not issubclass(optimizer_class, Optimizer):
            raise TypeError(f"ZeroRedundancyOptimizer: optimizer_class must be a ddpc.optim.Optimizer subclass, "
                            f"got {optimizer_class!r}")
        self.process_group = process_group
        self.world_size = dist.get_world_size(process_group)
        self.rank = dist.get_rank(process_group)
        self.global_rank = dist.get_global_rank(process_group, self.rank)
        self.parameters_as_bucket_view = bool(parameters_as_bucket_view)
        self._optimizer_class, self._defaults = optimizer_class, defaults
        self._owner = {}  # id(parameter) -> the group rank that steps it
        self._loads = [0] * self.world_size
        self.optim = None
        self._consolidated = None
        super().__init__(params, defaults)
        self.optim = optimizer_class(self._local_groups(), **defaults)
        _copy_hyperparameters(self.optim.param_groups, self.param_groups)  # the defaults the wrapped class filled in

    def _check_group(self, group):
        """Assigns the new group's parameters to ranks, largest first."""
        for p in sorted(group["params"], key=lambda t: t.numel(), reverse=True):
            r = min(range(self.world_size), key=self._loads.__getitem__)
            self._owner[id(p)] = r
            self._loads[r] += p.numel()

    def _local_group(self, group):
        local = {k: v for k, v in group.items() if k != "params"}
        local["params"] = [p for p in group["params"] if self._owner[id(p)] == self.rank]
        return local

    def _local_groups(self):
        return [self._local_group(g) for g in self.param_groups]

    def add_param_group(self, param_group):
        super().add_param_group(param_group)
        if self.optim is not None:
            self.optim.add_param_group(self._local_group(self.param_groups[-1]))
            _copy_hyperparameters(self.optim.param_groups[-1:], self.param_groups[-1:])

    @no_grad()
    def step(self, closure=None):
        """Steps the owned parameters, then broadcasts every rank's update."""
        Join.notify_join_context(self)
        return self._step(closure)

    def _step(self, closure=None):
        _copy_hyperparameters(self.param_groups, self.optim.param_groups)
        loss = self.optim.step(closure)
        self._broadcast_parameters()
        return loss

    def join_hook(self, **kwargs):
        """On a rank that ran out of inputs, each of the others' steps is also
        taken here: this rank's shard steps with the gradients the joined
        DistributedDataParallel received, and every owner's update is broadcast."""
        return _ZeroJoinHook(self)

    def _broadcast_parameters(self):
        if self.world_size == 1:
            return
        buckets = {}  # (owner, dtype name, device) -> parameters, in group order on every rank
        for group in self.param_groups:
            for p in group["params"]:
                buckets.setdefault((self._owner[id(p)], str(p.dtype), str(p.device)), []).append(p)
        for (owner, _, _), params in buckets.items():
            flat = cat([p.detach().reshape(-1) for p in params])
            dist.broadcast(flat, src=dist.get_global_rank(self.process_group, owner), group=self.process_group)
            if owner != self.rank:
                at = 0
                for p in params:
                    p.copy_(flat[at:at + p.numel()].reshape(p.shape))
                    at += p.numel()

    # ---- state dicts ---------------------------------------------------------------

    def _global_indices(self):
        """id(parameter) -> its index in a state dict over all the parameters."""
        index = {}
        for g in self.param_groups:
            for p in g["params"]:
                index.setdefault(id(p), len(index))
        return index

    def consolidate_state_dict(self, to=0):
        """Gathers every shard's state on group rank ``to`` (call on every rank)."""
        index = self._global_indices()
        local = self.optim.state_dict()
        mine = {}
        for group, packed in zip(self.optim.param_groups, local["param_groups"]):
            for p, i in zip(group["params"], packed["params"]):
                if i in local["state"]:
                    mine[index[id(p)]] = local["state"][i]
        gathered = [None] * self.world_size if self.rank == to else None
        dist.gather_object(mine, gathered, dst=dist.get_global_rank(self.process_group, to), group=self.process_group)
        self._consolidated = None
        if self.rank == to:
            state = {}
            for shard in gathered:
                state.update(shard)
            self._consolidated = state

    def state_dict(self):
        """The whole optimizer's state, on the rank ``consolidate_state_dict`` gathered it on."""
        if self._consolidated is None:
            raise RuntimeError("Optimizer state has not been consolidated on this rank. Please call "
                               "`consolidate_state_dict(to)` on all ranks beforehand and call `state_dict()` on "
                               "rank `to`.")
        index = self._global_indices()
        groups = []
        for g in self.param_groups:
            packed = {k: v for k, v in g.items() if k != "params"}
            packed["params"] = [index[id(p)] for p in g["params"]]
            groups.append(packed)
        return {"state": dict(sorted(self._consolidated.items())), "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Loads a whole-optimizer state dict (as ``state_dict()`` gives) on every rank; each keeps its shard."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError(f"loaded state dict has {len(groups)} parameter groups, the optimizer has "
                             f"{len(self.param_groups)}")
        local_groups, local_state, n = [], {}, 0
        for i, (saved, own) in enumerate(zip(groups, self.param_groups)):
            if len(saved["params"]) != len(own["params"]):
                raise ValueError(f"loaded state dict's parameter group {i} holds {len(saved['params'])} parameters, "
                                 f"the optimizer's holds {len(own['params'])}")
            for k, v in saved.items():
                if k != "params":
                    own[k] = v
            local = {k: v for k, v in saved.items() if k != "params"}
            local["params"] = []
            for idx, p in zip(saved["params"], own["params"]):
                if self._owner[id(p)] != self.rank:
                    continue
                s = _saved_state(state_dict["state"], idx)
                if s is not None:
                    local_state[n] = s
                local["params"].append(n)
                n += 1
            local_groups.append(local)
        self.optim.load_state_dict({"state": local_state, "param_groups": local_groups})

    @property
    def state(self):
        """This rank's shard of the state, keyed by parameter."""
        return self.optim.state if self.optim is not None else {}

    @state.setter
    def state(self, value):
        if value:  # the base class's constructor sets an empty one
            raise AttributeError("a ZeroRedundancyOptimizer's state is its shard's; load it with load_state_dict")

    def __repr__(self):
        return f"ZeroRedundancyOptimizer(rank {self.rank} of {self.world_size}, {self.optim!r})"


def _copy_hyperparameters(src_groups, dst_groups):
    for src, dst in zip(src_groups, dst_groups):
        dst.update((k, v) for k, v in src.items() if k != "params")


class _ZeroJoinHook(JoinHook):
    def __init__(self, zero):
        self.zero = zero

    def main_hook(self):
        with no_grad():
            self.zero._step()


# torch.distributed.optim's path to the class: ddpc.distributed.optim, which imports this module.
from ..distributed import optim as _distributed_optim  # noqa: E402,F401

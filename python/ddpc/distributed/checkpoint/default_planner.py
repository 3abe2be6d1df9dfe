"""DefaultSavePlanner and DefaultLoadPlanner, at PyTorch's path
torch.distributed.checkpoint.default_planner: save and load take them as
their default behaviour (flattened state dicts, every tensor whole). Other
planners are not supported (see ddpc.distributed.checkpoint)."""

__all__ = ["DefaultLoadPlanner", "DefaultSavePlanner"]


class DefaultSavePlanner:
    """What ``save`` does without a planner; ``flatten_state_dict=False`` is not offered."""

    def __init__(self, flatten_state_dict=True, flatten_sharded_tensors=True, dedup_replicated_tensors=None,
                 dedup_save_to_lowest_rank=False, enable_plan_caching=False):
        if not flatten_state_dict:
            raise NotImplementedError("DefaultSavePlanner: ddpc always flattens the state dict")


class DefaultLoadPlanner:
    """What ``load`` does without a planner; ``flatten_state_dict=False`` and
    ``allow_partial_load=True`` are not offered."""

    def __init__(self, flatten_state_dict=True, flatten_sharded_tensors=True, allow_partial_load=False):
        if not flatten_state_dict or allow_partial_load:
            raise NotImplementedError("DefaultLoadPlanner: ddpc always flattens the state dict and loads every key "
                                      "asked for")

"""Optional: fully_shard's layout against PyTorch's (skipped when torch is not
installed): on 2 and 3 ranks, the class each module becomes, each
parameter's local rows on every rank, and the state dict's keys, global
shapes and placements, as PyTorch's fully_shard gives them on a fake process
group of that size (one process plays each rank in turn; no data moves).

PyTorch's side runs in a child process that imports torch before ddpc (see
procs.run_torch_case); ddpc's on real ranks started by ddpc.spawn.
"""

import json
import sys

from procs import run_torch_case

WORLDS = (2, 3)


def layout(model, local_shape):
    return {"classes": [type(m).__name__ for m in (model, *model.blocks, model.head)],
            "local": {n: list(local_shape(p)) for n, p in model.named_parameters()},
            "state": [[k, list(v.shape), [repr(p) for p in v.placements]] for k, v in model.state_dict().items()]}


def ddpc_worker(rank, world):
    import ddpc.distributed as dist
    from test_fully_shard import net, sharded

    dist.init_process_group("cpu")
    out = layout(sharded(net()), lambda p: p.shape)
    dist.destroy_process_group()
    return out


def test_layout_matches_pytorch():
    import ddpc

    theirs = json.loads(run_torch_case(__file__, "torch_layouts").strip().splitlines()[-1])
    for world in WORLDS:
        for rank, ours in enumerate(ddpc.spawn(ddpc_worker, args=(world,), nprocs=world)):
            assert ours == theirs[f"{world}/{rank}"], (world, rank)


def torch_layouts():
    """PyTorch's layout of the same model for each world size and rank, as one JSON line."""
    import torch
    import torch.distributed as tdist
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from test_fully_shard import CLASSES, FEATURES, HIDDEN, NARROW

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.Tanh()),
                                         nn.Sequential(nn.Linear(HIDDEN, NARROW), nn.ReLU())])
            self.head = nn.Linear(NARROW, CLASSES)

    out = {}
    for world in WORLDS:
        for rank in range(world):
            tdist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
            try:
                mesh = init_device_mesh("cpu", (world,))
                model = Net()
                for block in model.blocks:
                    fully_shard(block, mesh=mesh)
                fully_shard(model, mesh=mesh)
                with torch.no_grad():
                    out[f"{world}/{rank}"] = layout(model, lambda p: p.to_local().shape)
            finally:
                tdist.destroy_process_group()
    print(json.dumps(out))


if __name__ == "__main__":
    import torch  # noqa: F401  (before ddpc, see the module docstring)

    globals()[sys.argv[1]]()

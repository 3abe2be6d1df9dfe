"""Optional: fully_shard's layout against PyTorch's (skipped when torch is not
installed): on 2 and 3 ranks (1-d meshes), on 4 ranks as a (2, 2) mesh
(HSDP), and on 2 ranks with ignored parameters, the class each module
becomes, each parameter's local rows on every rank, and the state dict's
keys, global shapes and placements (None for a plain tensor), as PyTorch's
fully_shard gives them on a fake process group of that size (one process
plays each rank in turn; no data moves).

PyTorch's side runs in a child process that imports torch before ddpc (see
procs.run_torch_case); ddpc's on real ranks started by ddpc.spawn.
"""

import json
import sys

from procs import run_torch_case

# (name, world size, mesh shape, ignored parameters: those of the second block's Linear and the head's weight)
CASES = (("2", 2, (2,), False), ("3", 3, (3,), False), ("hsdp", 4, (2, 2), False), ("ignored", 2, (2,), True))

NAMES = {1: ("shard",), 2: ("replicate", "shard")}


def layout(model, local_shape):
    return {"classes": [type(m).__name__ for m in (model, *model.blocks, model.head)],
            "local": {n: list(local_shape(p)) for n, p in model.named_parameters()},
            "state": [[k, list(v.shape), [repr(p) for p in v.placements] if hasattr(v, "placements") else None]
                      for k, v in model.state_dict().items()]}


def shard(model, mesh, ignore, fully_shard):
    """fully_shard on each block, then on the root; with ``ignore``, the second
    block's Linear and the head's weight are left out (one set passed to every
    call, each call leaving the others' parameters in it alone)."""
    ignored = {*model.blocks[1][0].parameters(), model.head.weight} if ignore else None
    for block in model.blocks:
        fully_shard(block, mesh=mesh, ignored_params=ignored)
    fully_shard(model, mesh=mesh, ignored_params=ignored)


def ddpc_worker(rank, mesh_shape, ignore):
    import ddpc.distributed as dist
    from ddpc.distributed.device_mesh import init_device_mesh
    from ddpc.distributed.fsdp import fully_shard
    from test_fully_shard import net

    dist.init_process_group("cpu")
    model = net()
    shard(model, init_device_mesh("cpu", mesh_shape, mesh_dim_names=NAMES[len(mesh_shape)]), ignore, fully_shard)
    out = layout(model, lambda p: p.shape)
    dist.destroy_process_group()
    return out


def test_layout_matches_pytorch():
    import ddpc

    theirs = json.loads(run_torch_case(__file__, "torch_layouts").strip().splitlines()[-1])
    for name, world, mesh_shape, ignore in CASES:
        for rank, ours in enumerate(ddpc.spawn(ddpc_worker, args=(mesh_shape, ignore), nprocs=world)):
            assert ours == theirs[f"{name}/{rank}"], (name, rank)


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
    for name, world, mesh_shape, ignore in CASES:
        for rank in range(world):
            tdist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
            try:
                model = Net()
                shard(model, init_device_mesh("cpu", mesh_shape, mesh_dim_names=NAMES[len(mesh_shape)]), ignore,
                      fully_shard)
                with torch.no_grad():
                    out[f"{name}/{rank}"] = layout(model, lambda p: p.to_local().shape if hasattr(p, "to_local")
                                                   else p.shape)
            finally:
                tdist.destroy_process_group()
    print(json.dumps(out))


if __name__ == "__main__":
    import torch  # noqa: F401  (before ddpc, see the module docstring)

    globals()[sys.argv[1]]()

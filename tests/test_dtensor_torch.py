"""Optional: ddpc.distributed.tensor's shards against torch.distributed.tensor's
(skipped when torch is not installed): for several global shapes, mesh sizes
and Shard dims, and on (2, 2) and (2, 3) meshes for pairs of placements, the
local shape and global offset of every rank, as PyTorch's
distribute_tensor and compute_local_shape_and_global_offset give them on a
fake process group of that size (one process plays each rank in turn; no
data moves), and PyTorch's torch.chunk rule (Shard.local_shard_size_and_offset).

The group runs in a child process that imports torch before ddpc (see
test_nn_extra_torch.py) and fails there, printing what differs.
"""

from procs import run_torch_group, torch_group_test

SHAPES = [(10, 3), (5, 2), (2, 4), (7,), (0, 3), (3, 7), (1, 1)]


class _Rank:
    """What ddpc's layout asks of a mesh: its sizes and this rank's place along each dimension."""

    def __init__(self, shape, coordinate):
        self._shape, self._coordinate = shape, coordinate

    def size(self, mesh_dim):
        return self._shape[mesh_dim]

    def get_local_rank(self, mesh_dim):
        return self._coordinate[mesh_dim]


def _local_shapes(np, torch, ddpc):
    import torch.distributed as tdist
    from torch.distributed.tensor import Shard as TorchShard
    from torch.distributed.tensor import distribute_tensor, init_device_mesh
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from ddpc.distributed.tensor import Shard, _local_shape_and_offset, _shard_range

    for n in range(0, 12):
        for ranks in range(1, 6):
            for r in range(ranks):
                start, length = _shard_range(n, ranks, r)
                want = TorchShard.local_shard_size_and_offset(n, ranks, r)
                assert (length, start) == tuple(int(x) for x in want), (n, ranks, r, (length, start), want)
    for ranks in (2, 3, 4):
        for r in range(ranks):
            tdist.init_process_group("fake", store=FakeStore(), rank=r, world_size=ranks)
            try:
                mesh = init_device_mesh("cpu", (ranks,))
                for shape in SHAPES:
                    for dim in range(len(shape)):
                        local = distribute_tensor(torch.zeros(shape), mesh, [TorchShard(dim)]).to_local()
                        want = compute_local_shape_and_global_offset(shape, mesh, [TorchShard(dim)])
                        got = _local_shape_and_offset(shape, _Rank((ranks,), (r,)), (Shard(dim),))
                        assert tuple(local.shape) == got[0] == tuple(want[0]), (shape, dim, ranks, r, got, want)
                        assert got[1] == tuple(want[1]), (shape, dim, ranks, r, got, want)
            finally:
                tdist.destroy_process_group()


def _local_shapes_2d(np, torch, ddpc):
    import torch.distributed as tdist
    from torch.distributed.tensor import Replicate as TorchReplicate
    from torch.distributed.tensor import Shard as TorchShard
    from torch.distributed.tensor import distribute_tensor, init_device_mesh
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from ddpc.distributed.tensor import Replicate, Shard, _local_shape_and_offset

    ours = {"R": Replicate(), "S0": Shard(0), "S1": Shard(1)}
    theirs = {"R": TorchReplicate(), "S0": TorchShard(0), "S1": TorchShard(1)}
    pairs = [("R", "S0"), ("S0", "S1"), ("S0", "S0"), ("S1", "R"), ("R", "R")]
    for mesh_shape in ((2, 2), (2, 3)):
        world = mesh_shape[0] * mesh_shape[1]
        for r in range(world):
            tdist.init_process_group("fake", store=FakeStore(), rank=r, world_size=world)
            try:
                mesh = init_device_mesh("cpu", mesh_shape)
                for shape in [s for s in SHAPES if len(s) == 2]:
                    for pair in pairs:
                        placements = [theirs[p] for p in pair]
                        local = distribute_tensor(torch.zeros(shape), mesh, placements).to_local()
                        want = compute_local_shape_and_global_offset(shape, mesh, placements)
                        got = _local_shape_and_offset(shape, _Rank(mesh_shape, divmod(r, mesh_shape[1])),
                                                      tuple(ours[p] for p in pair))
                        assert tuple(local.shape) == got[0] == tuple(want[0]), (shape, pair, r, got, want)
                        assert got[1] == tuple(want[1]), (shape, pair, r, got, want)
            finally:
                tdist.destroy_process_group()


GROUPS = {"local_shapes": _local_shapes, "local_shapes_2d": _local_shapes_2d}


test_matches_pytorch = torch_group_test(__file__, GROUPS)


if __name__ == "__main__":
    run_torch_group(GROUPS)

"""DTensor: a tensor split across the ranks of a DeviceMesh, shaped like
torch.distributed.tensor.

A DTensor is each rank's local tensor plus where it sits in the global one:
its ``device_mesh`` and ``placements`` (one per mesh dimension).
``Shard(dim)`` splits the global tensor along ``dim`` as ``torch.chunk``
does: every rank but the last ones holds ``ceil(n / ranks)`` rows, the last
ones fewer or none, in mesh order. ``Replicate()`` gives every rank the whole
tensor. On an n-d mesh the placements apply in mesh order, each to what
the ones before it left: ``[Replicate(), Shard(0)]`` on a (2, 2) mesh gives
the ranks of each row of the mesh the rows of the tensor split in two, the
same in both rows of the mesh (HSDP's layout)::

    mesh = init_device_mesh("cpu", (world,))
    w = distribute_tensor(ddpc.randn(10, 4), mesh, [Shard(0)])   # rank r holds rows 3r..3r+2 (rank 3: row 9)
    w.to_local().shape, w.shape                                 # (3, 4) or (1, 4); (10, 4)
    w.full_tensor()                                             # all-gather: the (10, 4) tensor on every rank
    w.redistribute(placements=[Replicate()])                    # the same as a DTensor

What it is for in ddpc: the values of FSDP's SHARDED_STATE_DICT, which
``ddpc.distributed.checkpoint`` saves shard by shard and loads on any number
of ranks.

A DTensor pickles (``ddpc.save``; a value that a distributed checkpoint
keeps whole, such as a tuple of DTensors) as PyTorch's does: its local
tensor, placements, shape and mesh, which unpickles in a process of the
same job (see ``device_mesh``). It unpickles on any rank as
``DTensor.from_local(local, mesh, placements, shape=shape)``: where one
rank's pickle is unpickled on every rank (the one copy a checkpoint keeps
of such a value), each holds that rank's local tensor, as in PyTorch,
which is the whole tensor only where the placements are all Replicate.
Where that local tensor has not the shape of the unpickling rank's share,
unpickling raises ValueError (unlike PyTorch's, which holds it regardless).

Where ddpc differs: a DTensor is not a ``ddpc.Tensor`` (PyTorch's is a
``torch.Tensor`` subclass whose operators run distributed); it has no
arithmetic, indexing or autograd: call ``to_local()`` or ``full_tensor()``
for a tensor to compute with. The placements are ``Shard`` and
``Replicate`` (not ``Partial``); ``redistribute`` does not move a DTensor to
another mesh, and between placements with a ``Shard`` on both sides it goes
through the full tensor. ``from_local`` with ``shape`` checks that the local tensor has this
rank's ``torch.chunk`` share of it (PyTorch trusts it), and its tensors
are row-major, so ``stride`` can only be the row-major strides.
"""

import math

from .. import distributed as dist
from ..autograd import no_grad
from ..serialization import _add_ddpc_globals
from ..tensor import Tensor, cat, zeros
from .device_mesh import DeviceMesh, _current_mesh, init_device_mesh

__all__ = ["DTensor", "DeviceMesh", "Placement", "Replicate", "Shard", "distribute_tensor", "init_device_mesh"]


class Placement:
    """How a DTensor is laid out along one mesh dimension."""

    def is_shard(self, dim=None):
        return False

    def is_replicate(self):
        return False

    def is_partial(self):
        return False


class Shard(Placement):
    """Split along tensor dimension ``dim``, ``torch.chunk``'s way."""

    def __init__(self, dim):
        if not isinstance(dim, int):
            raise TypeError(f"Shard: dim must be an int, got {type(dim).__name__}")
        self.dim = dim

    def is_shard(self, dim=None):
        return dim is None or dim == self.dim

    def __eq__(self, other):
        return isinstance(other, Shard) and other.dim == self.dim

    def __reduce__(self):
        # through the constructor, which checks dim: weights_only loading allows Shard
        return Shard, (self.dim,)

    def __hash__(self):
        return hash((Shard, self.dim))

    def __repr__(self):
        return f"Shard(dim={self.dim})"


class Replicate(Placement):
    """The whole tensor on every rank."""

    def is_replicate(self):
        return True

    def __eq__(self, other):
        return isinstance(other, Replicate)

    def __reduce__(self):
        return Replicate, ()

    def __hash__(self):
        return hash(Replicate)

    def __repr__(self):
        return "Replicate()"


def _shard_range(size, ranks, index):
    """(start, length) of shard ``index`` of ``size`` rows split over ``ranks``
    as torch.chunk splits: ceil(size / ranks) rows each, the last ones fewer or none."""
    per = -(-size // ranks)
    start = min(index * per, size)
    return start, min(per, size - start)


def _mesh(device_mesh, what):
    mesh = _current_mesh(what) if device_mesh is None else device_mesh
    if not isinstance(mesh, DeviceMesh):
        raise TypeError(f"{what}: device_mesh must be a DeviceMesh, got {type(mesh).__name__}")
    return mesh


def _placements(placements, mesh, ndim, what):
    """placements as a tuple (Replicate where None), each Shard's dim made non-negative and checked."""
    if placements is None:
        return (Replicate(),) * mesh.ndim
    placements = tuple(placements)
    if len(placements) != mesh.ndim:
        raise ValueError(f"`placements` must have the same length as `device_mesh.ndim`! Found placements length: "
                         f"{len(placements)}, and device_mesh.ndim: {mesh.ndim}.")
    out = []
    for p in placements:
        if isinstance(p, Shard):
            if not -ndim <= p.dim < ndim:
                raise ValueError(f"{what}: Shard(dim={p.dim}) is out of range for a tensor of {ndim} dimensions")
            p = Shard(p.dim % ndim)
        elif not isinstance(p, Replicate):
            raise NotImplementedError(f"{what}: ddpc's DTensor supports the placements Shard(dim) and Replicate(), "
                                      f"got {p!r}")
        out.append(p)
    return tuple(out)


def _level_shapes(shape, mesh, placements):
    """The shape each mesh dimension's placement splits: ``shape`` for the
    first, then what each Shard left of it on this rank; the last entry is
    the local shape."""
    shapes = [tuple(shape)]
    for i, placement in enumerate(placements):
        sizes = list(shapes[-1])
        if isinstance(placement, Shard):
            d = placement.dim
            sizes[d] = _shard_range(sizes[d], mesh.size(i), mesh.get_local_rank(i))[1]
        shapes.append(tuple(sizes))
    return shapes


def _local_shape_and_offset(shape, mesh, placements):
    """(this rank's local shape, its offset in the global tensor along each dimension)."""
    sizes, offsets = list(shape), [0] * len(shape)
    for i, placement in enumerate(placements):
        if isinstance(placement, Shard):
            d = placement.dim
            start, sizes[d] = _shard_range(sizes[d], mesh.size(i), mesh.get_local_rank(i))
            offsets[d] = offsets[d] + start if sizes[d] else shape[d]  # an empty part sits at the end, as PyTorch's
    return tuple(sizes), tuple(offsets)


def _my_part(full, mesh, placements):
    """This rank's part of ``full`` laid out by ``placements``, as a tensor of its own."""
    for i, placement in enumerate(placements):
        if isinstance(placement, Shard):
            d = placement.dim
            full = full.narrow(d, *_shard_range(full.shape[d], mesh.size(i), mesh.get_local_rank(i)))
    return full.clone()


def _full(local, shape, mesh, placements):
    """The global tensor of ``shape`` from every rank's ``local`` laid out by
    ``placements``: the Shards undone from the last mesh dimension to the
    first, each by an all-gather over that dimension's group."""
    shapes = _level_shapes(shape, mesh, placements)
    for i in reversed(range(len(placements))):
        if isinstance(placements[i], Shard):
            local = _gather(local, shapes[i], mesh, i, placements[i].dim)
    return local


def _gather(local, shape, mesh, mesh_dim, dim):
    """The tensor of ``shape`` from the Shard(dim) ``local`` parts of the ranks
    along ``mesh_dim``: each pads its rows (moved to the front) to the
    longest shard for one all-gather."""
    ranks = mesh.size(mesh_dim)
    per = -(-shape[dim] // ranks)
    rows = local.movedim(dim, 0).contiguous()
    if rows.shape[0] < per:
        pad = zeros(per - rows.shape[0], *rows.shape[1:], dtype=local.dtype, device=local.device)
        rows = cat([rows, pad]) if rows.shape[0] else pad
    gathered = zeros(per * ranks, *rows.shape[1:], dtype=local.dtype, device=local.device)
    dist.all_gather_into_tensor(gathered, rows, group=mesh.get_group(mesh_dim))
    return gathered.narrow(0, 0, shape[dim]).movedim(0, dim).contiguous()


class DTensor:
    """A global tensor of ``shape`` laid out over ``device_mesh`` by
    ``placements``; this rank holds ``to_local()``. Make one with
    ``distribute_tensor`` or ``DTensor.from_local``."""

    def __init__(self, local_tensor, device_mesh, placements, shape):
        # Unchecked: distribute_tensor, from_local and redistribute check what they pass.
        self._local, self._mesh, self._placements = local_tensor, device_mesh, placements
        self._shape = type(local_tensor.shape)(shape)

    @staticmethod
    def from_local(local_tensor, device_mesh=None, placements=None, *, run_check=False, shape=None, stride=None,
                   grad_placements=None):
        """The DTensor whose part on this rank is ``local_tensor`` (used as it
        is, not copied). Without ``shape`` the shards are taken to be even
        (the global size along a Shard dim is the local one times the mesh
        size); with it, ``local_tensor`` must be this rank's share."""
        if isinstance(local_tensor, DTensor):
            raise RuntimeError(f"the local_tensor argument only accepts ddpc.Tensor but got {type(local_tensor)} "
                               "value.")
        if not isinstance(local_tensor, Tensor):
            raise TypeError(f"DTensor.from_local: local_tensor must be a ddpc.Tensor, got "
                            f"{type(local_tensor).__name__}")
        mesh = _mesh(device_mesh, "DTensor.from_local")
        placements = _placements(placements, mesh, local_tensor.ndim, "DTensor.from_local")
        if local_tensor.device.type != mesh.device_type:
            local_tensor = local_tensor.to(mesh.device_type)
        if run_check:
            _check_same_on_every_rank(local_tensor, placements, mesh)
        if shape is None:
            shape = list(local_tensor.shape)
            for i, placement in enumerate(placements):
                if isinstance(placement, Shard):
                    shape[placement.dim] *= mesh.size(i)
        shape = tuple(int(s) for s in shape)
        if len(shape) != local_tensor.ndim:
            raise ValueError(f"DTensor.from_local: shape {shape} and the local tensor's shape "
                             f"{tuple(local_tensor.shape)} differ in their number of dimensions")
        expected, _ = _local_shape_and_offset(shape, mesh, placements)
        if expected != tuple(local_tensor.shape):
            raise ValueError(f"DTensor.from_local: a local tensor of shape {tuple(local_tensor.shape)} is not rank "
                             f"{mesh.get_rank()}'s share of a tensor of shape {shape} placed {placements} "
                             f"over a mesh of shape {mesh.shape} (that share's shape is {expected})")
        if stride is not None and tuple(stride) != _row_major_strides(shape):
            raise ValueError(f"DTensor.from_local: stride {tuple(stride)} is not the row-major stride "
                             f"{_row_major_strides(shape)} of shape {shape}; ddpc's tensors are row-major")
        return DTensor(local_tensor, mesh, placements, shape)

    # ---- what it is ------------------------------------------------------------------
    @property
    def device_mesh(self):
        return self._mesh

    @property
    def placements(self):
        return self._placements

    @property
    def shape(self):
        return self._shape

    def size(self, dim=None):
        return self._shape if dim is None else self._shape[dim]

    @property
    def ndim(self):
        return len(self._shape)

    def dim(self):
        return len(self._shape)

    def numel(self):
        return math.prod(self._shape)

    @property
    def dtype(self):
        return self._local.dtype

    @property
    def device(self):
        return self._local.device

    @property
    def requires_grad(self):
        return self._local.requires_grad

    def __reduce__(self):
        return _unpickled_dtensor, (self._local, self._mesh, self._placements, tuple(self._shape))

    def __repr__(self):
        return (f"DTensor(local_tensor={self._local!r}, device_mesh={self._mesh!r}, "
                f"placements={self._placements!r}, shape={tuple(self._shape)})")

    def __getattr__(self, name):
        if name.startswith("__") or name in ("_local", "_mesh", "_placements", "_shape"):
            raise AttributeError(name)
        raise AttributeError(f"'DTensor' object has no attribute '{name}': ddpc's DTensor has no tensor "
                             "operations; use to_local() (this rank's part) or full_tensor() (the whole tensor)")

    # ---- its values ------------------------------------------------------------------
    def to_local(self, *, grad_placements=None):
        """This rank's part (the tensor itself, not a copy)."""
        return self._local

    def full_tensor(self, *, grad_placements=None):
        """The global tensor, on every rank (an all-gather of Shard placements)."""
        return self.redistribute(placements=[Replicate()] * self._mesh.ndim).to_local()

    def redistribute(self, device_mesh=None, placements=None, *, async_op=False, forward_dtype=None,
                     backward_dtype=None):
        """This DTensor laid out by ``placements`` (the same mesh): Shard to
        Replicate all-gathers, Replicate to Shard keeps this rank's part, and
        Shard(a) to Shard(b) gathers the tensor and keeps this rank's part
        (along each mesh dimension; with a Shard on both sides, through the
        full tensor)."""
        if device_mesh is not None and device_mesh != self._mesh:
            raise NotImplementedError("DTensor.redistribute: moving a DTensor to another device mesh is not "
                                      "supported")
        target = self._placements if placements is None else _placements(placements, self._mesh, self.ndim,
                                                                          "DTensor.redistribute")
        if target == self._placements:
            return self
        local = self._local
        with no_grad():
            if any(isinstance(p, Shard) for p in self._placements):
                local = _full(local, self._shape, self._mesh, self._placements)
            if any(isinstance(p, Shard) for p in target):
                local = _my_part(local, self._mesh, target)
        return DTensor(local, self._mesh, target, self._shape)

    def detach(self):
        return DTensor(self._local.detach(), self._mesh, self._placements, self._shape)

    def clone(self):
        return DTensor(self._local.clone(), self._mesh, self._placements, self._shape)

    def cpu(self):
        """The same layout with the local tensor on the host (the mesh is unchanged)."""
        return DTensor(self._local.cpu(), self._mesh, self._placements, self._shape)

    def copy_(self, src):
        """Copies DTensor ``src`` (of the same shape and mesh, any placements:
        redistributed to these) into this one's local tensor."""
        if not isinstance(src, DTensor):
            raise TypeError(f"DTensor.copy_: got a {type(src).__name__} and a DTensor; make the source a DTensor "
                            "(DTensor.from_local, distribute_tensor) first")
        if tuple(src.shape) != tuple(self._shape):
            raise RuntimeError(f"DTensor.copy_: the source has shape {tuple(src.shape)}, this DTensor "
                               f"{tuple(self._shape)}")
        self._local.copy_(src.redistribute(self._mesh, self._placements).to_local())
        return self


def _unpickled_dtensor(local, mesh, placements, shape):
    """The DTensor a pickle of one holds, on this rank (see the module's docstring)."""
    try:
        return DTensor.from_local(local, mesh, placements, shape=shape)
    except ValueError as e:
        raise ValueError(f"cannot unpickle a DTensor on rank {dist.get_rank()}: {e}") from e


_add_ddpc_globals(_unpickled_dtensor, Shard, Replicate)


def _row_major_strides(shape):
    return tuple(math.prod(shape[d + 1:]) for d in range(len(shape)))


def _check_same_on_every_rank(local, placements, mesh):
    """run_check: every rank's dtype, dimensions and placements agree."""
    for i in range(mesh.ndim):
        seen = [None] * mesh.size(i)
        dist.all_gather_object(seen, (local.dtype.name, local.ndim, placements), group=mesh.get_group(i))
        if any(s != seen[0] for s in seen):
            raise ValueError(f"DTensor.from_local: the ranks' local tensors or placements differ: {seen}")


def distribute_tensor(tensor, device_mesh=None, placements=None, *, src_data_rank=0):
    """A DTensor of ``tensor`` laid out by ``placements`` (Replicate where
    None) over ``device_mesh``: the values of the mesh's rank
    ``src_data_rank`` along each mesh dimension (broadcast to the others), or with ``src_data_rank=None``
    each rank's own ``tensor``. Every rank of the mesh calls it."""
    if isinstance(tensor, DTensor):
        mesh = _mesh(device_mesh, "distribute_tensor")
        if tensor.device_mesh != mesh:
            raise ValueError(f"Cannot distribute a DTensor with device mesh {tensor.device_mesh} to a different "
                             f"device mesh {mesh}.")
        if tensor.placements != _placements(placements, mesh, tensor.ndim, "distribute_tensor"):
            raise ValueError(f"Cannot distribute a DTensor with placements {tensor.placements} to a different "
                             f"placements {placements}. do you want to call `redistribute` instead?")
        return tensor
    if not isinstance(tensor, Tensor):
        raise TypeError(f"distribute_tensor: tensor must be a ddpc.Tensor, got {type(tensor).__name__}")
    if tensor.grad_fn is not None:
        raise RuntimeError("`distribute_tensor` should be used to distribute leaf tensors! but found non-leaf "
                           "tensor!")
    mesh = _mesh(device_mesh, "distribute_tensor")
    placements = _placements(placements, mesh, tensor.ndim, "distribute_tensor")
    full = tensor.detach()
    if full.device.type != mesh.device_type:
        full = full.to(mesh.device_type)
    if src_data_rank is not None:
        full = full.clone()
        for i in range(mesh.ndim):
            dist.broadcast(full, group=mesh.get_group(i), group_src=src_data_rank)
    local = _my_part(full, mesh, placements) if any(isinstance(p, Shard) for p in placements) else full
    local.requires_grad = tensor.requires_grad
    return DTensor(local, mesh, placements, tuple(tensor.shape))

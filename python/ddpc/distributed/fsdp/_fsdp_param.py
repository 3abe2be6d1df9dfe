"""ShardedParameter: a parameter that fully_shard split along dim 0 across
the ranks of a DeviceMesh's last dimension (replicated across its first on
a 2-d mesh: HSDP), holding this rank's rows (torch.chunk's rule), and
answering what PyTorch's DTensor parameters answer: to_local(),
full_tensor(), placements, device_mesh. Also the norm of such parameters'
gradients over every rank, for clip_grad_norm_."""

import math

from ... import distributed as dist
from ...autograd import no_grad
from ...nn.modules import Parameter
from ...nn.utils import get_total_norm
from ...tensor import Tensor, float64
from ..tensor import DTensor, Replicate, Shard, _full, _local_shape_and_offset


def shard_placements(mesh):
    """fully_shard's placements over ``mesh``: Shard(0) along its last
    dimension, Replicate() along the one before it where it is 2-d."""
    return (Replicate(),) * (mesh.ndim - 1) + (Shard(0),)


class ShardedParameter(Parameter):
    """This rank's rows of a parameter of global shape ``shape``, sharded
    Shard(0) over ``mesh`` (``(Replicate(), Shard(0))`` over a 2-d one). It is a ``ddpc.nn.Parameter`` (the optimizers,
    LR schedulers and ``zero_grad`` work on it as on any parameter) whose
    ``.grad``, after a synced backward, holds the gradient of its rows
    averaged over every rank of the mesh.

    Where ddpc differs: PyTorch's sharded parameters are DTensors, whose
    ``shape`` is the global one and whose ``.grad`` is a DTensor; here
    ``p.shape`` (and ``size()``, ``numel()``) is the shape of this rank's
    rows, ``.grad`` a plain tensor of them, and the global shape is
    ``p.full_shape``. ``to_local()`` is the parameter itself."""

    def __init__(self, local, mesh, shape, requires_grad=True):
        super().__init__(local, requires_grad)
        self._mesh = mesh
        self._placements = shard_placements(mesh)
        self.full_shape = type(local.shape)(shape)

    def __copy__(self):
        return ShardedParameter(self.detach(), self._mesh, self.full_shape, self.requires_grad)

    def __deepcopy__(self, memo):
        """Rows of their own over the same mesh (a mesh names process groups, which stay as they are)."""
        return ShardedParameter(self.detach().clone(), self._mesh, self.full_shape, self.requires_grad)

    @property
    def device_mesh(self):
        return self._mesh

    @property
    def placements(self):
        return self._placements

    def to_local(self, *, grad_placements=None):
        """This rank's rows: the parameter itself."""
        return self

    @no_grad()
    def full_tensor(self, *, grad_placements=None):
        """The whole parameter on every rank of the mesh (an all-gather; not a parameter)."""
        return _full(self.detach(), self.full_shape, self._mesh, self._placements)

    def as_dtensor(self, local):
        """``local`` (this parameter, or a tensor laid out as it is) as a DTensor of the global shape."""
        return DTensor(local, self._mesh, self._placements, self.full_shape)

    def rows_of(self, value):
        """This rank's rows of ``value``: a DTensor of the global shape in any
        placements (redistributed: collective over the mesh), or a full
        tensor of it. Anything else comes back as it is."""
        if isinstance(value, DTensor):
            return value.redistribute(self._mesh, self._placements).to_local()
        if isinstance(value, Tensor) and tuple(value.shape) == tuple(self.full_shape):
            start = _local_shape_and_offset(self.full_shape, self._mesh, self._placements)[1][0]
            return value.narrow(0, start, self.shape[0])
        return value

    def __repr__(self):
        return (f"ShardedParameter(rows of shape {tuple(self.full_shape)} placed {list(self._placements)} on "
                f"{self._mesh}):\n" + Tensor.__repr__(self))


def sharded_grad_norm(mesh, grads, norm_type):
    """The ``norm_type``-norm of the gradients ``grads`` (this rank's rows of
    parameters sharded over ``mesh``) together with every other rank's: a
    0-d float64 tensor, the same on every rank of the mesh (one all-reduce
    over the shard dimension: the replicas along a 2-d mesh's first hold
    the same gradients)."""
    local = get_total_norm(grads, norm_type).to(device=grads[0].device, dtype=float64).reshape(1)
    shard_group = mesh.get_group(mesh.ndim - 1)
    with no_grad():
        if math.isinf(norm_type):
            dist.all_reduce(local, op=dist.ReduceOp.MAX, group=shard_group)
            return local.reshape(())
        power = local ** norm_type
        dist.all_reduce(power, op=dist.ReduceOp.SUM, group=shard_group)
        return (power ** (1.0 / norm_type)).reshape(())

"""ShardedParameter: a parameter that fully_shard split along dim 0 across
the ranks of a 1-d DeviceMesh, holding this rank's rows (torch.chunk's
rule), and answering what PyTorch's DTensor parameters answer: to_local(),
full_tensor(), placements, device_mesh."""

from ...autograd import no_grad
from ...nn.modules import Parameter
from ...tensor import Tensor
from ..tensor import DTensor, Shard, _gather, _local_shape_and_offset

_PLACEMENTS = (Shard(0),)


class ShardedParameter(Parameter):
    """This rank's rows of a parameter of global shape ``shape``, sharded
    Shard(0) over ``mesh``. It is a ``ddpc.nn.Parameter`` (the optimizers,
    LR schedulers and ``zero_grad`` work on it as on any parameter) whose
    ``.grad``, after a synced backward, holds the gradient of its rows
    averaged over the mesh.

    Where ddpc differs: PyTorch's sharded parameters are DTensors, whose
    ``shape`` is the global one and whose ``.grad`` is a DTensor; here
    ``p.shape`` (and ``size()``, ``numel()``) is the shape of this rank's
    rows, ``.grad`` a plain tensor of them, and the global shape is
    ``p.full_shape``. ``to_local()`` is the parameter itself."""

    def __init__(self, local, mesh, shape, requires_grad=True):
        super().__init__(local, requires_grad)
        self._mesh = mesh
        self.full_shape = type(local.shape)(shape)

    @property
    def device_mesh(self):
        return self._mesh

    @property
    def placements(self):
        return _PLACEMENTS

    def to_local(self, *, grad_placements=None):
        """This rank's rows: the parameter itself."""
        return self

    @no_grad()
    def full_tensor(self, *, grad_placements=None):
        """The whole parameter on every rank of the mesh (an all-gather; not a parameter)."""
        return _gather(self.detach(), self.full_shape, self._mesh, 0)

    def as_dtensor(self, local):
        """``local`` (this parameter, or a tensor laid out as it is) as a DTensor of the global shape."""
        return DTensor(local, self._mesh, _PLACEMENTS, self.full_shape)

    def rows_of(self, value):
        """This rank's rows of ``value``: a DTensor of the global shape in any
        placements (redistributed: collective over the mesh), or a full
        tensor of it. Anything else comes back as it is."""
        if isinstance(value, DTensor):
            return value.redistribute(self._mesh, _PLACEMENTS).to_local()
        if isinstance(value, Tensor) and tuple(value.shape) == tuple(self.full_shape):
            start = _local_shape_and_offset(self.full_shape, self._mesh, _PLACEMENTS)[1][0]
            return value.narrow(0, start, self.shape[0])
        return value

    def __repr__(self):
        return (f"ShardedParameter(rows of shape {tuple(self.full_shape)} placed {list(_PLACEMENTS)} on "
                f"{self._mesh}):\n" + Tensor.__repr__(self))


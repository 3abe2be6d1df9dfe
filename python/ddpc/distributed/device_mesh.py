"""DeviceMesh: the ranks of the default group arranged as an n-d array, with a
process group along each dimension, shaped like torch.distributed.device_mesh.

A mesh of shape (2, 2) over ranks 0..3 holds [[0, 1], [2, 3]] (row-major);
its dimension 0 groups are {0, 2} and {1, 3}, its dimension 1 groups {0, 1}
and {2, 3}. Every rank makes every group, in the same order, so the
constructor is collective. Slicing by name (``mesh["tp"]``) reuses the
groups of the mesh it is cut from. ``DeviceMesh.from_group(group, device_type)``
makes a 1-d mesh of an existing group's ranks (no collective: it makes no
group). ``with mesh:`` makes ``mesh`` the one ddpc.distributed.tensor's
functions use when they are given none.

A mesh pickles without its process groups (they are this process's
connections), as PyTorch's does: as its ranks, dimensions and names. It
unpickles in a process of the same job, on any rank in the mesh, as the
mesh of those ranks through the unpickling rank, equal to the one pickled,
with this process's groups of the same members (the latest made where
several are; the default group serves a 1-d mesh of every rank). Where ddpc
differs: PyTorch's finds the pickling rank's groups by name, and unpickles
without them, failing when one is used; ddpc's raises RuntimeError at once
where the process has no default group, is not in the mesh or lacks one of
its groups (make the mesh there first).

Differences from PyTorch: the constructor's mesh must hold every rank of the
default group exactly once (PyTorch also takes a mesh of fewer ranks; a
mesh of some of the ranks comes from ``from_group``), and
``init_device_mesh`` needs ``init_process_group`` to have been called
(PyTorch calls it itself); flattening, ``from_group`` with several groups
(an n-d mesh) and ``backend_override`` are not offered.
"""

import numpy as np

from ..serialization import _add_ddpc_globals
from . import (_group_with, get_process_group_ranks, get_rank, get_world_size, is_initialized,
               new_subgroups_by_enumeration)

__all__ = ["DeviceMesh", "init_device_mesh"]

_current = []  # the meshes of the enclosing ``with mesh:`` blocks, innermost last


def _current_mesh(what):
    """The mesh of the innermost ``with mesh:`` block, for a function given no device_mesh."""
    if not _current:
        raise RuntimeError(f"{what}: no device_mesh was given and no device mesh is currently active (pass "
                           "device_mesh=, or call it inside a `with mesh:` block)")
    return _current[-1]


def _ranks_array(mesh):
    """The ranks of ``mesh`` (a ddpc tensor, numpy array or nested lists) as an int64 numpy array."""
    if hasattr(mesh, "numpy") and not isinstance(mesh, np.ndarray):
        mesh = mesh.numpy()
    ranks = np.asarray(mesh)
    if ranks.dtype.kind not in "iu" and ranks.size:
        raise TypeError(f"DeviceMesh: the mesh must hold integer ranks, got {ranks.dtype}")
    return ranks.astype(np.int64)


def _check_dim_names(mesh_dim_names, ndim):
    if mesh_dim_names is None:
        return None
    names = (mesh_dim_names,) if isinstance(mesh_dim_names, str) else tuple(mesh_dim_names)
    if len(set(names)) != len(names):
        raise RuntimeError(f"Each mesh_dim_name must be unique. Found repeated mesh_dim_name in mesh_dim_names "
                           f"{names}")
    if len(names) != ndim:
        raise RuntimeError(f"mesh_shape and mesh_dim_names should have same length! Found len(mesh_dim_names): "
                           f"{len(names)} and len(mesh_shape):{ndim}.")
    return names


def _checked_device_type(device_type):
    if not isinstance(device_type, str) or not device_type.isalpha():
        raise RuntimeError(f"Device type with index is not supported but got {device_type!r}: pass the "
                           "device's type, such as 'cpu' or 'cuda'")
    return device_type


def _dim_groups(ranks):
    """This rank's process group along each dimension of ``ranks``. Every rank
    makes the groups of every slice, dimension by dimension, in one order."""
    groups = []
    for dim in range(ranks.ndim):
        slices = np.moveaxis(ranks, dim, -1).reshape(-1, ranks.shape[dim]).tolist()
        mine, _ = new_subgroups_by_enumeration(slices)
        groups.append(mine)
    return groups


class DeviceMesh:
    """The ranks of the default group laid out as ``mesh`` (every rank once),
    with a process group along each dimension; collective to construct."""

    def __init__(self, device_type, mesh, *, mesh_dim_names=None, _parent=None, _dims=None):
        self._device_type = _checked_device_type(device_type)
        if _parent is not None:
            self._root, self._dims = _parent._root, _dims
            self._root_groups, self._coordinate_in_root = _parent._root_groups, _parent._coordinate_in_root
            self._mesh_dim_names = mesh_dim_names
            return
        if not is_initialized():
            raise RuntimeError("DeviceMesh needs the default process group: call "
                               "ddpc.distributed.init_process_group() first")
        ranks = _ranks_array(mesh)
        if ranks.ndim == 0:
            raise ValueError("DeviceMesh: the mesh must have at least one dimension")
        world = get_world_size()
        if sorted(ranks.ravel().tolist()) != list(range(world)):
            raise RuntimeError(f"DeviceMesh: the mesh of shape {tuple(ranks.shape)} ({ranks.size} ranks) must hold "
                               f"each rank of the world of {world} exactly once, got {ranks.tolist()}")
        self._mesh_dim_names = _check_dim_names(mesh_dim_names, ranks.ndim)
        self._root, self._dims = ranks, tuple(range(ranks.ndim))
        self._coordinate_in_root = tuple(int(c) for c in np.argwhere(ranks == get_rank())[0])
        self._root_groups = _dim_groups(ranks)

    @staticmethod
    def from_group(group, device_type, mesh=None, *, mesh_dim_names=None):
        """The 1-d mesh of ``group``'s ranks (in group-rank order), whose
        group along its one dimension is ``group`` itself; only its members
        call it. ``mesh``, where given, must list those ranks."""
        if isinstance(group, (list, tuple)):
            if len(group) != 1:
                raise NotImplementedError(f"DeviceMesh.from_group: ddpc makes 1-d meshes from one group, got a list "
                                          f"of {len(group)} groups")
            group = group[0]
        ranks = np.asarray(get_process_group_ranks(group), dtype=np.int64)
        if mesh is not None and _ranks_array(mesh).ravel().tolist() != ranks.tolist():
            raise ValueError(f"DeviceMesh.from_group: mesh {_ranks_array(mesh).tolist()} does not list the group's "
                             f"ranks {ranks.tolist()}")
        if get_rank() not in ranks:
            raise RuntimeError(f"DeviceMesh.from_group: rank {get_rank()} is not in the group {ranks.tolist()}")
        return _mesh_of(device_type, ranks, (0,), [group], mesh_dim_names)

    # ---- layout ----------------------------------------------------------------------
    @property
    def device_type(self):
        return self._device_type

    @property
    def mesh_dim_names(self):
        return self._mesh_dim_names

    @property
    def ndim(self):
        return len(self._dims)

    @property
    def shape(self):
        return tuple(int(self._root.shape[d]) for d in self._dims)

    def size(self, mesh_dim=None):
        """How many ranks the mesh holds, or along ``mesh_dim`` (an index)."""
        if mesh_dim is None:
            return int(np.prod(self.shape, dtype=np.int64))
        return self.shape[mesh_dim]

    def _ranks(self):
        """The numpy array of this mesh's ranks: the slice of the root through this rank."""
        index = tuple(slice(None) if d in self._dims else c for d, c in enumerate(self._coordinate_in_root))
        return self._root[index]

    @property
    def mesh(self):
        """The ranks as a ddpc int32 tensor of the mesh's shape."""
        from ..tensor import from_numpy
        return from_numpy(np.ascontiguousarray(self._ranks(), dtype=np.int32))

    def get_rank(self):
        """This process's global rank."""
        return get_rank()

    def get_coordinate(self):
        """This rank's index along each dimension of the mesh."""
        return tuple(self._coordinate_in_root[d] for d in self._dims)

    # ---- groups ----------------------------------------------------------------------
    def _dim_index(self, mesh_dim, what):
        if mesh_dim is None:
            if self.ndim > 1:
                raise RuntimeError(f"DeviceMesh.{what}: the mesh has {self.ndim} dimensions; name one with mesh_dim "
                                   "(get_all_groups() gives the groups of them all)")
            return 0
        if isinstance(mesh_dim, str):
            if not self._mesh_dim_names:
                raise KeyError(f"DeviceMesh.{what}: mesh dimension {mesh_dim!r} asked of a mesh without "
                               "mesh_dim_names")
            if mesh_dim not in self._mesh_dim_names:
                raise KeyError(f"Mesh dimension '{mesh_dim}' does not exist. Available mesh dimensions are: "
                               f"mesh_dim_names={self._mesh_dim_names}")
            return self._mesh_dim_names.index(mesh_dim)
        if not -self.ndim <= mesh_dim < self.ndim:
            raise IndexError(f"DeviceMesh.{what}: mesh_dim {mesh_dim} is out of range for a mesh of {self.ndim} "
                             "dimensions")
        return mesh_dim % self.ndim

    def get_group(self, mesh_dim=None):
        """The process group of this rank's slice along ``mesh_dim`` (an index
        or name; may be left out on a 1-d mesh)."""
        return self._root_groups[self._dims[self._dim_index(mesh_dim, "get_group")]]

    def get_all_groups(self):
        return [self.get_group(i) for i in range(self.ndim)]

    def get_local_rank(self, mesh_dim=None):
        """This process's rank within its group along ``mesh_dim``."""
        return get_rank(self._root_groups[self._dims[self._dim_index(mesh_dim, "get_local_rank")]])

    def __getitem__(self, mesh_dim_names):
        """The sub-mesh of the named dimensions (in the mesh's order) through this rank."""
        if not self._mesh_dim_names:
            raise RuntimeError("Cannot slice a DeviceMesh without mesh_dim_names!")
        names = (mesh_dim_names,) if isinstance(mesh_dim_names, str) else tuple(mesh_dim_names)
        if names == self._mesh_dim_names:
            return self
        unknown = [n for n in names if n not in self._mesh_dim_names]
        if unknown or not names:
            raise KeyError(f"Invalid mesh_dim_names {names} specified. Valid mesh_dim_names are "
                           f"{list(self._mesh_dim_names)}.")
        positions = [self._mesh_dim_names.index(n) for n in names]
        if positions != sorted(set(positions)):
            raise KeyError(f"Invalid mesh_dim_names {names} specified. Mesh dim indices should be in ascending "
                           "order.")
        return DeviceMesh(self._device_type, None, mesh_dim_names=names, _parent=self,
                          _dims=tuple(self._dims[p] for p in positions))

    # ---- the current mesh -------------------------------------------------------------
    def __enter__(self):
        _current.append(self)
        return self

    def __exit__(self, *exc):
        _current.pop()

    # ---- identity --------------------------------------------------------------------
    def __reduce__(self):
        return _unpickled_mesh, (self._device_type, self._root.tolist(), self._dims, self._mesh_dim_names)

    def _key(self):
        return (tuple(self._root.ravel().tolist()), self._root.shape, self._dims, self._device_type,
                self._mesh_dim_names)

    def __eq__(self, other):
        if self is other:
            return True
        return isinstance(other, DeviceMesh) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        shape = self.shape
        sizes = f"({', '.join(f'{n}={s}' for n, s in zip(self._mesh_dim_names, shape))})" if self._mesh_dim_names \
            else f"{shape}"
        strides = tuple(int(np.prod(self._root.shape[d + 1:], dtype=np.int64)) for d in self._dims)
        return f"DeviceMesh({sizes}, '{self._device_type}', stride={strides})"


def _mesh_of(device_type, root, dims, root_groups, mesh_dim_names):
    """The mesh of dimensions ``dims`` of the ranks ``root`` (this rank among
    them) through this rank, whose groups along the dimensions of ``root``
    are ``root_groups``; it makes no group."""
    out = DeviceMesh.__new__(DeviceMesh)
    out._device_type = _checked_device_type(device_type)
    out._root, out._dims, out._root_groups = root, dims, root_groups
    out._coordinate_in_root = tuple(int(c) for c in np.argwhere(root == get_rank())[0])
    out._mesh_dim_names = _check_dim_names(mesh_dim_names, len(dims))
    return out


def _unpickled_mesh(device_type, ranks, dims, mesh_dim_names):
    """The mesh a pickle of one holds (see the module's docstring): the mesh
    of those ranks through this rank, with this process's groups."""
    root = _ranks_array(ranks)
    flat = root.ravel().tolist()
    dims = tuple(dims)
    if root.ndim == 0 or len(set(flat)) != len(flat) or not dims or not all(isinstance(d, int) for d in dims) \
            or list(dims) != sorted(set(dims)) or not 0 <= dims[0] <= dims[-1] < root.ndim:
        raise ValueError(f"a pickled DeviceMesh of ranks {root.tolist()} and dimensions {dims} is malformed")
    what = f"cannot unpickle a DeviceMesh of ranks {root.tolist()}"
    if not is_initialized():
        raise RuntimeError(f"{what}: this process has no default process group (a mesh unpickles in a process of "
                           "the job that pickled it, after init_process_group)")
    rank = get_rank()
    if rank not in flat:
        raise RuntimeError(f"{what} on rank {rank}, which is not in it")
    coordinate = tuple(int(c) for c in np.argwhere(root == rank)[0])
    groups = []
    for dim in range(root.ndim):
        members = root[tuple(slice(None) if d == dim else c for d, c in enumerate(coordinate))].tolist()
        group = _group_with(members)
        if group is None:
            raise RuntimeError(f"{what}: this process has no process group of ranks {members} (the mesh's "
                               f"dimension {dim} through rank {rank}); make the mesh in this process first, as "
                               "where it was pickled (init_device_mesh, DeviceMesh or DeviceMesh.from_group)")
        groups.append(group)
    return _mesh_of(device_type, root, dims, groups, mesh_dim_names)


_add_ddpc_globals(_unpickled_mesh)


def init_device_mesh(device_type, mesh_shape, *, mesh_dim_names=None):
    """A DeviceMesh of shape ``mesh_shape`` over the ranks of the default
    group in row-major order, with dimensions named ``mesh_dim_names``.
    Collective: every rank calls it with the same arguments."""
    shape = (int(mesh_shape),) if isinstance(mesh_shape, int) else tuple(int(s) for s in mesh_shape)
    _check_dim_names(mesh_dim_names, len(shape))
    if not is_initialized():
        raise RuntimeError("init_device_mesh needs the default process group: call "
                           "ddpc.distributed.init_process_group() first")
    if not shape or any(s <= 0 for s in shape):
        raise ValueError(f"init_device_mesh: mesh_shape must be positive sizes, got {shape}")
    world = get_world_size()
    total = int(np.prod(shape, dtype=np.int64))
    if total != world:
        raise RuntimeError(f"init_device_mesh: mesh_shape {shape} holds {total} ranks but the world size is {world}")
    return DeviceMesh(device_type, np.arange(total, dtype=np.int64).reshape(shape), mesh_dim_names=mesh_dim_names)

"""Checkpoints for data-parallel runs: rank 0 writes, every rank reads rank 0's copy.

The pattern that makes a restarted job end where an uninterrupted one would::

    state = ddpc.checkpoint.load(path)            # None on the first start
    start = 0 if state is None else state["epoch"] + 1
    if state is not None:
        model.load_state_dict(state["model"]); optimizer.load_state_dict(state["optimizer"])
    for epoch in range(start, epochs):
        sampler.set_epoch(epoch)                  # the data order depends only on (seed, epoch)
        ...train one epoch...
        ddpc.checkpoint.save({"epoch": epoch, "model": model.state_dict(),
                              "optimizer": optimizer.state_dict()}, path)

``ddpc-run --max-restarts N`` restarts the whole group after a failure; each
restart resumes from the last completed epoch. The write is atomic (see
ddpc.save), so a crash during a save leaves the previous checkpoint intact.

To checkpoint in the middle of an epoch and resume with exactly the samples
not seen yet, save every rank's loader state too (``loader_state``, a
collective) and hand each rank its own back (``load_loader_state``)::

    state = ddpc.checkpoint.load(path)
    start = 0 if state is None else state["epoch"]
    if state is not None:
        ...load the model and optimizer...
        ddpc.checkpoint.load_loader_state(loader, state["loader"])
    for epoch in range(start, epochs):
        sampler.set_epoch(epoch)
        for step, batch in enumerate(loader):
            ...train one step...
            if step % 100 == 99:
                ddpc.checkpoint.save({"epoch": epoch, "model": model.state_dict(),
                                      "optimizer": optimizer.state_dict(),
                                      "loader": ddpc.checkpoint.loader_state(loader)}, path)

A state taken after the last batch of an epoch makes the loader start the
next one as usual, so the same code resumes from an end-of-epoch checkpoint
(with ``start = state["epoch"] + 1`` there, or by checking ``loader_state``'s
``finished``).
"""

import io
import os

from . import distributed as dist
from .serialization import load as _load
from .serialization import save as _save
from .tensor import full, zeros


def _group_info(group):
    if dist.is_initialized():
        return dist.get_rank(group), dist.get_world_size(group)
    return 0, 1


def _from_rank0(produce, what, group):
    """Runs ``produce()`` on rank 0 and returns its bytes on every rank; if it
    fails, every rank raises (the others a RuntimeError naming rank 0's error)
    instead of waiting for rank 0 until the timeout."""
    rank, size = _group_info(group)
    data, error = b"", None
    if rank == 0:
        try:
            data = produce()
        except Exception as e:
            if size == 1:
                raise
            error, data = e, f"{type(e).__name__}: {e}".encode()
    if size > 1:
        src, device = dist.get_global_rank(group, 0), dist._metadata_device(group)
        head = full((2,), 0, dtype="int64")
        head.numpy()[:] = (error is not None, len(data))
        head = head.to(device)
        dist.broadcast(head, src=src, group=group)
        failed, length = (int(v) for v in head.cpu().numpy())
        if length:
            payload = zeros(length, dtype="uint8")
            if rank == 0:
                payload.numpy()[:] = memoryview(data)
            payload = payload.to(device)
            dist.broadcast(payload, src=src, group=group)
            data = bytes(payload.cpu().numpy())
        if error is not None:
            raise error
        if failed:
            raise RuntimeError(f"rank 0 could not {what}: {data.decode(errors='replace')}")
    return data


def save(obj, path, group=None):
    """Rank 0 writes `obj` to `path` atomically; every rank returns once it is on
    disk, or raises if rank 0 could not write it."""
    def write():
        _save(obj, path)
        return b""

    _from_rank0(write, f"save the checkpoint {path!r}", group)


def loader_state(loader, group=None):
    """Every rank's ``loader.state_dict()`` (a DataLoader or ShardedLoader), as a
    list by rank, on every rank: what to put in the checkpoint rank 0 saves. A
    collective: every rank of ``group`` calls it at the same step."""
    state = loader.state_dict()
    rank, size = _group_info(group)
    if size == 1:
        return [state]
    states = [None] * size
    dist.all_gather_object(states, state, group=group)
    return states


def load_loader_state(loader, states, group=None):
    """Loads this rank's entry of ``states`` (what ``loader_state`` returned when the
    checkpoint was saved) into ``loader``; the next pass over it resumes there."""
    rank, size = _group_info(group)
    if not isinstance(states, (list, tuple)) or len(states) != size:
        got = f"{len(states)} entries" if isinstance(states, (list, tuple)) else type(states).__name__
        raise ValueError(f"load_loader_state expects the list of one loader state per rank that loader_state "
                         f"returned, for this group of {size} rank(s), got {got}")
    loader.load_state_dict(states[rank])


def load(path, map_location=None, group=None, *, weights_only=None):
    """Rank 0 reads `path` and broadcasts it; returns None on every rank when it
    does not exist. A file that exists but is empty or damaged raises
    ddpc.serialization.CheckpointError on every rank, as ddpc.load does,
    rather than passing for a first start whose saves would overwrite it.
    ``weights_only`` is ddpc.load's: a checkpoint holding more than data (a
    whole module, an optimizer object) loads with weights_only=False, or
    with its classes allowlisted."""
    def read():
        try:
            with open(path, "rb") as f:
                return b"\x01" + f.read()  # the leading byte: the file is there, even if empty
        except FileNotFoundError:
            return b""

    data = _from_rank0(read, f"read the checkpoint {path!r}", group)
    if not data:
        return None
    f = io.BytesIO(data)
    f.seek(1)
    f.name = os.fspath(path)  # what ddpc.load's errors name
    return _load(f, map_location=map_location, weights_only=weights_only)

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


def save(obj, path, group=None):
    """Rank 0 writes `obj` to `path` atomically; every rank returns once it is on disk."""
    rank, size = _group_info(group)
    if rank == 0:
        _save(obj, path)
    if size > 1:
        dist.barrier(group=group)


def load(path, map_location=None, group=None):
    """Rank 0 reads `path` and broadcasts it; returns None on every rank when it does not exist."""
    rank, size = _group_info(group)
    data = b""
    if rank == 0 and os.path.exists(path):
        with open(path, "rb") as f:
            data = f.read()
    if size > 1:
        src, device = dist.get_global_rank(group, 0), dist.collective_device(group)
        length = full((1,), len(data), dtype="int64", device=device)
        dist.broadcast(length, src=src, group=group)
        payload = zeros(int(length.item()), dtype="uint8")
        if rank == 0 and data:
            payload.numpy()[:] = memoryview(data)
        payload = payload.to(device)
        dist.broadcast(payload, src=src, group=group)
        data = bytes(payload.cpu().numpy())
    if not data:
        return None
    return _load(io.BytesIO(data), map_location=map_location)

"""ddpc.multiprocessing, shaped like torch.multiprocessing: the standard
library's multiprocessing (Process, Queue, get_context, set_start_method, ...)
with ``spawn`` and ``start_processes`` from ``ddpc.spawn``, so that
``import torch.multiprocessing as mp; mp.spawn(main, args=(world,), nprocs=world)``
ports by renaming.

Where ddpc differs: a ddpc tensor put on a Queue or passed to a Process is
pickled with its data, so the receiver gets a copy (PyTorch moves it to
shared memory and both sides see one tensor). ``spawn`` also gives each
child the environment ``init_process_group()`` reads, as ``ddpc.spawn`` does.
"""

import multiprocessing as _mp

from .spawn import ProcessException, ProcessExitedException, ProcessRaisedException, SpawnContext, spawn

ProcessContext = SpawnContext
_SHARING_STRATEGIES = ("file_descriptor", "file_system")
_sharing_strategy = "file_descriptor"
globals().update((name, getattr(_mp, name)) for name in _mp.__all__)  # as torch.multiprocessing re-exports them


def start_processes(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """``spawn`` with the start method chosen, as torch.multiprocessing's (whose default is ``'spawn'``)."""
    return spawn(fn, args, nprocs, join, daemon, start_method)


def set_sharing_strategy(new_strategy):
    """Takes torch.multiprocessing's strategy names so that scripts which set
    one run; ddpc tensors cross processes by copy, so neither changes how."""
    global _sharing_strategy
    if new_strategy not in _SHARING_STRATEGIES:
        raise ValueError(f"unknown sharing strategy {new_strategy!r} (one of {', '.join(_SHARING_STRATEGIES)})")
    _sharing_strategy = new_strategy


def get_sharing_strategy():
    return _sharing_strategy


def get_all_sharing_strategies():
    return set(_SHARING_STRATEGIES)


__all__ = list(_mp.__all__) + ["ProcessContext", "ProcessException", "ProcessExitedException", "ProcessRaisedException",
                               "SpawnContext", "get_all_sharing_strategies", "get_sharing_strategy",
                               "set_sharing_strategy", "spawn", "start_processes"]

"""Activation checkpointing, shaped like torch.utils.checkpoint.

``checkpoint(fn, *args)`` runs ``fn`` and records its graph as usual, so its
parameters are edges of the graph: DDP's hooks fire for them at the usual
point of backward and ``find_unused_parameters`` sees them. But it drops the
tensors the segment's ops saved for backward; the first of those ops that
backward reaches runs ``fn`` again (with the random state and autocast
settings of the first run, so dropout draws the same mask) and hands the
recomputed tensors back. Memory for a segment's activations is then held
only while backward is inside it. This is PyTorch's ``use_reentrant=False``
behaviour, which ddpc always has (``use_reentrant`` is accepted and changes
nothing): gradients reach the parameters even when no input requires grad.

``fn`` must compute the same ops when run again; if it does not, backward
raises. Checkpoints nested inside a checkpointed function are recomputed with
it.
"""

from .. import amp
from .. import autograd as _ag
from ..tensor import default_generator

__all__ = ["checkpoint", "checkpoint_sequential"]


def checkpoint(function, *args, use_reentrant=None, preserve_rng_state=True, **kwargs):
    """``function(*args, **kwargs)``, keeping none of its saved tensors until backward needs them."""
    del use_reentrant
    if not _ag.is_grad_enabled() or _ag._mode.recording is not None:
        return function(*args, **kwargs)  # nothing is saved, or an enclosing checkpoint recomputes this one
    rng = (default_generator.seed, default_generator.offset)
    autocast = amp._state.dtypes
    nodes = []
    with _ag.recording(nodes), _no_cast_cache():
        out = function(*args, **kwargs)
    if not nodes:
        return out

    def restore():
        fresh = []
        now = (default_generator.seed, default_generator.offset)
        outer_autocast = amp._state.dtypes
        if preserve_rng_state:
            default_generator.seed, default_generator.offset = rng
        amp._state.dtypes = autocast
        try:
            with _ag.enable_grad(), _ag.recording(fresh), _no_cast_cache():
                function(*args, **kwargs)
        finally:
            default_generator.seed, default_generator.offset = now
            amp._state.dtypes = outer_autocast
        if len(fresh) != len(nodes) or any(type(a) is not type(b) for a, b in zip(nodes, fresh)):
            raise RuntimeError(
                f"checkpoint: recomputing {getattr(function, '__name__', function)!r} for backward recorded "
                f"{len(fresh)} ops where its first run recorded {len(nodes)} (or ops of other kinds): a "
                "checkpointed function must compute the same ops each time it runs")
        for old, new in zip(nodes, fresh):
            if old.saved is stand_in:
                old.saved, old.saved_versions = new.saved, new.saved_versions

    stand_in = _ag.Recompute(restore)
    for node in nodes:
        node.saved, node.saved_versions = stand_in, ()
    return out


class _no_cast_cache:
    """Autocast's per-region cast cache off: the first run and the recompute
    must cast (and so record) the same parameters whatever ran before them."""

    def __enter__(self):
        self.prev, amp._state.cache_enabled = amp._state.cache_enabled, False

    def __exit__(self, *exc):
        amp._state.cache_enabled = self.prev
        return False


def checkpoint_sequential(functions, segments, input, use_reentrant=None, **kwargs):
    """Runs ``functions`` (a Sequential or a list of modules) in ``segments``
    checkpointed chunks, the last one not checkpointed, as PyTorch does."""
    del use_reentrant
    functions = list(functions.children()) if hasattr(functions, "children") else list(functions)
    if segments < 1:
        raise ValueError(f"checkpoint_sequential: segments must be >= 1, got {segments}")
    size = max(len(functions) // segments, 1)

    def run(chunk):
        def forward(x):
            for f in chunk:
                x = f(x)
            return x

        return forward

    end = 0
    for start in range(0, size * (segments - 1), size):
        end = start + size
        input = checkpoint(run(functions[start:end]), input, **kwargs)
    return run(functions[end:])(input)

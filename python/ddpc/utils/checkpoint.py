"""Activation checkpointing, shaped like torch.utils.checkpoint.

``checkpoint(fn, *args)`` runs ``fn`` and records its graph as usual, so its
parameters are edges of the graph: DDP's hooks fire for them at the usual
point of backward and ``find_unused_parameters`` sees them. But it drops the
tensors the segment's ops saved for backward; the first of those ops that
backward reaches runs ``fn`` again (with the random state and autocast
settings of the first run, so dropout draws the same mask) and hands the
recomputed tensors back. Memory for a segment's activations is then held
only while backward is inside it. This is PyTorch's ``use_reentrant=False``
behaviour, which ddpc always has: gradients reach the parameters even when
no input requires grad. ``use_reentrant`` only decides, as in PyTorch (whose
default is the reentrant form), whether the arguments that need the other
form are accepted.

``fn`` must compute the same ops when run again; if it does not, backward
raises CheckpointError, as it does (with ``determinism_check="default"``)
when a recomputed saved tensor differs in shape, dtype or device from the
first run's. Checkpoints nested inside a checkpointed function are
recomputed with it. ``context_fn`` gives two context managers, entered
around the first run and around the recompute (PyTorch's selective
activation checkpointing policies are not offered); ``debug`` (or
``set_checkpoint_debug_enabled``) adds both runs' op lists to that error.
"""

import contextlib

from .. import amp
from .. import autograd as _ag
from ..tensor import Tensor, default_generator

__all__ = ["CheckpointError", "checkpoint", "checkpoint_sequential", "noop_context_fn",
           "set_checkpoint_debug_enabled"]

_debug_enabled = None  # set_checkpoint_debug_enabled's setting; None defers to checkpoint's debug


class CheckpointError(RuntimeError):
    """The recompute of a checkpointed function for backward does not match its first run."""


def noop_context_fn():
    """checkpoint's default ``context_fn``: no context around the first run nor the recompute."""
    return contextlib.nullcontext(), contextlib.nullcontext()


@contextlib.contextmanager
def set_checkpoint_debug_enabled(enabled):
    """Within the block, ``enabled`` (True or False) overrides the ``debug``
    argument of every checkpoint; None defers to it."""
    global _debug_enabled
    prev, _debug_enabled = _debug_enabled, enabled
    try:
        yield
    finally:
        _debug_enabled = prev


def _saved_metadata(node):
    """The shape, dtype and device of each tensor a node saved for backward:
    what determinism_check="default" compares between the two runs."""
    return tuple(f"shape {tuple(t.shape)}, {t.dtype}, {t.device}" if isinstance(t, Tensor) else None
                 for t in node.saved)


def checkpoint(function, *args, use_reentrant=None, preserve_rng_state=True, context_fn=noop_context_fn,
               determinism_check="default", debug=False, early_stop=True, respect_saved_tensors_hooks=None,
               **kwargs):
    """``function(*args, **kwargs)``, keeping none of its saved tensors until
    backward needs them. The other keyword arguments are PyTorch's: as in
    PyTorch, ``context_fn``, ``debug`` and ``respect_saved_tensors_hooks``
    need ``use_reentrant=False``; ``early_stop`` is accepted (the recompute
    always runs the whole function)."""
    if use_reentrant is not False and (context_fn is not noop_context_fn or debug is not False
                                       or respect_saved_tensors_hooks is not None):
        raise ValueError("Passing `context_fn`, `debug`, or `respect_saved_tensors_hooks` is only supported when "
                         "use_reentrant=False.")
    debug = debug if _debug_enabled is None else _debug_enabled
    if debug and context_fn is not noop_context_fn:
        raise ValueError("debug=True is incompatible with non-default context_fn")
    if determinism_check not in ("default", "none"):
        raise ValueError(f"determinism_check should be one of ['default', 'none'], but got {determinism_check}")
    forward_context, recompute_context = context_fn()
    if not _ag.is_grad_enabled() or _ag._mode.recording is not None:
        with forward_context:  # nothing is saved, or an enclosing checkpoint recomputes this one
            return function(*args, **kwargs)
    rng = (default_generator._seed, default_generator.offset)
    autocast = amp._state.dtypes
    nodes = []
    with forward_context, _ag.recording(nodes), _no_cast_cache():
        out = function(*args, **kwargs)
    if not nodes:
        return out
    metadata = [_saved_metadata(n) for n in nodes] if determinism_check == "default" else None

    def restore():
        fresh = []
        now = (default_generator._seed, default_generator.offset)
        outer_autocast = amp._state.dtypes
        if preserve_rng_state:
            default_generator._seed, default_generator.offset = rng
        amp._state.dtypes = autocast
        try:
            with recompute_context, _ag.enable_grad(), _ag.recording(fresh), _no_cast_cache():
                function(*args, **kwargs)
        finally:
            default_generator._seed, default_generator.offset = now
            amp._state.dtypes = outer_autocast
        name = getattr(function, "__name__", function)
        if len(fresh) != len(nodes) or any(type(a) is not type(b) for a, b in zip(nodes, fresh)):
            raise CheckpointError(
                f"checkpoint: recomputing {name!r} for backward recorded {len(fresh)} ops where its first run "
                f"recorded {len(nodes)} (or ops of other kinds): a checkpointed function must compute the same "
                f"ops each time it runs{_op_lists(debug, nodes, fresh)}")
        changed = [f"tensor {k} saved by op {i} ({n.name()}): {a} in the first run, {b} recomputed"
                   for i, (before, n) in enumerate(zip(metadata or (), fresh))
                   for k, (a, b) in enumerate(zip(before, _saved_metadata(n))) if a != b]
        if changed:
            raise CheckpointError(
                f"checkpoint: recomputing {name!r} for backward saved tensors with other metadata than its first "
                f"run: {'; '.join(changed)}{_op_lists(debug, nodes, fresh)}")
        for old, new in zip(nodes, fresh):
            if old.saved is stand_in:
                old.saved, old.saved_versions = new.saved, new.saved_versions

    stand_in = _ag.Recompute(restore)
    for node in nodes:
        node.saved, node.saved_versions = stand_in, ()
    return out


def _op_lists(debug, nodes, fresh):
    if not debug:
        return " (pass debug=True to checkpoint to see the ops of both runs)"
    return (f"\nops of the first run: {', '.join(n.name() for n in nodes)}"
            f"\nops of the recompute: {', '.join(n.name() for n in fresh)}")


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

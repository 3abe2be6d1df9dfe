"""checkpoint_wrapper and apply_activation_checkpointing, as PyTorch's (the
path FSDP training scripts import them from).

``checkpoint_wrapper(module)`` gives a module whose forward runs ``module``
under ``ddpc.utils.checkpoint.checkpoint``: its activations are recomputed
in backward instead of kept. ``apply_activation_checkpointing(model,
check_fn=...)`` wraps, in place, the submodules that ``check_fn`` (or an
FSDP ``auto_wrap_policy``) picks, also inside FSDP units. As in PyTorch the
wrapper keeps the wrapped module's names where a checkpoint sees them:
``state_dict()`` and ``load_state_dict()`` take the names without
``_checkpoint_wrapped_module.``, and so does the wrapper's own
``named_parameters()``. Where ddpc differs: ``REENTRANT`` and
``NO_REENTRANT`` recompute alike (ddpc's checkpoint has one implementation,
which accepts keyword arguments either way).
"""

import enum
import functools

from ....nn.modules import Module
from ....utils.checkpoint import checkpoint
from ...fsdp.wrap import _recursive_wrap, lambda_auto_wrap_policy

__all__ = ["ActivationWrapper", "CheckpointImpl", "CheckpointWrapper", "apply_activation_checkpointing",
           "checkpoint_wrapper"]

_CHECKPOINT_WRAPPED_MODULE = "_checkpoint_wrapped_module"
_CHECKPOINT_PREFIX = _CHECKPOINT_WRAPPED_MODULE + "."


class CheckpointImpl(enum.Enum):
    REENTRANT = enum.auto()
    NO_REENTRANT = enum.auto()


class ActivationWrapper(Module):
    """A module around ``mod`` that answers for it: attributes and indexing
    reach ``mod``, and names in state dicts are ``mod``'s own."""

    def __init__(self, mod):
        super().__init__()
        self._checkpoint_wrapped_module = mod
        # As PyTorch's: a state dict names the wrapped module's tensors without the wrapper's level,
        # and a load takes those names (or the full ones) through the same walk as any module's.
        self._register_state_dict_hook(_strip_wrapped_prefix)
        self._register_load_state_dict_pre_hook(_add_wrapped_prefix, with_module=True)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._checkpoint_wrapped_module, name)

    def __getitem__(self, key):
        return self._checkpoint_wrapped_module.__getitem__(key)

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        for name, p in super().named_parameters(prefix, recurse, remove_duplicate):
            yield name.replace(_CHECKPOINT_PREFIX, ""), p



def _strip_wrapped_prefix(module, state_dict, prefix, local_metadata):
    """state_dict post-hook: ``<prefix>_checkpoint_wrapped_module.x`` becomes ``<prefix>x`` (the
    wrapper's keys were the last ones added, so moving them to the end keeps their order)."""
    wrapped = prefix + _CHECKPOINT_PREFIX
    for key in [k for k in state_dict if k.startswith(wrapped)]:
        state_dict[prefix + key[len(wrapped):]] = state_dict.pop(key)
    # (_metadata keeps the full names: a load looks each module's version up under them)


def _add_wrapped_prefix(module, state_dict, prefix, *args):
    """load pre-hook: ``<prefix>x`` is loaded as ``<prefix>_checkpoint_wrapped_module.x`` (keys that
    already name the wrapped module stay)."""
    wrapped = prefix + _CHECKPOINT_PREFIX
    for key in [k for k in state_dict if k.startswith(prefix) and not k.startswith(wrapped)]:
        state_dict[wrapped + key[len(prefix):]] = state_dict.pop(key)


class CheckpointWrapper(ActivationWrapper):
    """Runs the wrapped module under activation checkpointing; made by checkpoint_wrapper."""

    def __init__(self, mod, checkpoint_impl=CheckpointImpl.NO_REENTRANT, checkpoint_fn=None, **checkpoint_fn_kwargs):
        super().__init__(mod)
        self.checkpoint_impl = checkpoint_impl
        if checkpoint_fn is None:
            checkpoint_fn_kwargs["use_reentrant"] = checkpoint_impl == CheckpointImpl.REENTRANT
            checkpoint_fn = checkpoint
        self.checkpoint_fn = functools.partial(checkpoint_fn, **checkpoint_fn_kwargs)

    def forward(self, *args, **kwargs):
        return self.checkpoint_fn(self._checkpoint_wrapped_module, *args, **kwargs)


def checkpoint_wrapper(module, checkpoint_impl=CheckpointImpl.NO_REENTRANT, checkpoint_fn=None, **checkpoint_fn_kwargs):
    """``module`` wrapped so that its activations are recomputed in backward;
    ``checkpoint_fn`` (default ``ddpc.utils.checkpoint.checkpoint``) gets
    ``checkpoint_fn_kwargs`` with every call."""
    return CheckpointWrapper(module, checkpoint_impl, checkpoint_fn, **checkpoint_fn_kwargs)


def apply_activation_checkpointing(model, checkpoint_wrapper_fn=checkpoint_wrapper, check_fn=lambda _: True,
                                   auto_wrap_policy=None):
    """Replaces, in place, each submodule of ``model`` that ``check_fn``
    accepts (or ``auto_wrap_policy`` picks, innermost first) by
    ``checkpoint_wrapper_fn(submodule)``; ``model`` itself stays unwrapped."""
    policy = auto_wrap_policy or functools.partial(lambda_auto_wrap_policy, lambda_fn=check_fn)
    _recursive_wrap(model, policy, checkpoint_wrapper_fn, set(), True, into_units=True)

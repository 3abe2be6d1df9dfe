"""Auto-wrap policies and the wrap()/enable_wrap() pair, as
torch.distributed.fsdp.wrap's: which submodules of a model become FSDP units
of their own.

A policy is called ``policy(module=m, recurse=..., nonwrapped_numel=n)``:
with ``recurse=True`` it says whether to look inside ``m`` for units; with
``recurse=False`` whether ``m`` itself becomes a unit, ``n`` being the
number of its parameters not already in a unit below it.
"""

import contextlib

__all__ = ["ModuleWrapPolicy", "always_wrap_policy", "enable_wrap", "lambda_auto_wrap_policy",
           "size_based_auto_wrap_policy", "transformer_auto_wrap_policy", "wrap"]


def always_wrap_policy(module, recurse, nonwrapped_numel):
    """Every submodule becomes a unit."""
    return True


def lambda_auto_wrap_policy(module, recurse, nonwrapped_numel, lambda_fn):
    """Units where ``lambda_fn(module)`` says so."""
    return True if recurse else bool(lambda_fn(module))


def transformer_auto_wrap_policy(module, recurse, nonwrapped_numel, transformer_layer_cls):
    """Units for the instances of ``transformer_layer_cls`` (a set of classes),
    used with functools.partial as in PyTorch."""
    return True if recurse else isinstance(module, tuple(transformer_layer_cls))


def _default_leaf_modules():
    from ...nn import MultiheadAttention

    return {MultiheadAttention}


def _default_excluded_modules():
    from ...nn import ModuleDict, ModuleList

    return {ModuleList, ModuleDict}


def size_based_auto_wrap_policy(module, recurse, nonwrapped_numel, min_num_params=int(1e8),
                                force_leaf_modules=None, exclude_wrap_modules=None):
    """Units for the submodules holding at least ``min_num_params`` parameters
    that no unit below them holds; ``force_leaf_modules`` are not looked
    into, ``exclude_wrap_modules`` (containers) never become units."""
    if recurse:
        leaves = _default_leaf_modules() if force_leaf_modules is None else force_leaf_modules
        return not isinstance(module, tuple(leaves))
    excluded = _default_excluded_modules() if exclude_wrap_modules is None else exclude_wrap_modules
    return nonwrapped_numel >= min_num_params and not isinstance(module, tuple(excluded))


class ModuleWrapPolicy:
    """Units for the instances of the given module classes."""

    def __init__(self, module_classes):
        self._module_classes = tuple(module_classes)

    def __call__(self, module, recurse, nonwrapped_numel):
        return True if recurse else isinstance(module, self._module_classes)

    def __repr__(self):
        return f"ModuleWrapPolicy({[c.__name__ for c in self._module_classes]})"


def _recursive_wrap(module, policy, wrap_fn, ignored, only_children, into_units=False):
    """Wraps the submodules of ``module`` the policy picks, innermost first;
    returns (the module or its wrapper, the number of parameters now in units).
    FSDP units are left alone unless ``into_units`` (activation checkpointing
    wraps the modules inside them)."""
    if id(module) in ignored or (not into_units and getattr(module, "_fsdp_wrapped_module", None) is not None):
        return module, 0
    numel = sum(p.numel() for p in module.parameters())
    if not policy(module=module, recurse=True, nonwrapped_numel=numel):
        return module, 0
    wrapped = 0
    for name, child in list(module.named_children()):
        if id(child) in ignored:
            continue
        new, n = _recursive_wrap(child, policy, wrap_fn, ignored, False, into_units)
        if new is not child:
            setattr(module, name, new)
        wrapped += n
    if not only_children and policy(module=module, recurse=False, nonwrapped_numel=numel - wrapped):
        return wrap_fn(module), numel
    return module, wrapped


class _WrapContext:
    wrapper = None  # (wrapper class, its keyword arguments) inside enable_wrap


@contextlib.contextmanager
def enable_wrap(*, wrapper_cls, **wrapper_kwargs):
    """Inside the block, ``wrap(module)`` gives ``wrapper_cls(module, **wrapper_kwargs)``."""
    if _WrapContext.wrapper is not None:
        raise NotImplementedError("enable_wrap blocks do not nest")
    _WrapContext.wrapper = (wrapper_cls, wrapper_kwargs)
    try:
        yield
    finally:
        _WrapContext.wrapper = None


def wrap(module, **wrap_overrides):
    """The module wrapped as enable_wrap set up (with ``wrap_overrides`` on top
    of its arguments); outside enable_wrap, the module itself."""
    if _WrapContext.wrapper is None:
        return module
    cls, kwargs = _WrapContext.wrapper
    return cls(module, **{**kwargs, **wrap_overrides})


def _policy_callable(policy):
    """A policy given as a set of module classes, as older PyTorch allowed."""
    if isinstance(policy, (set, frozenset, list, tuple)):
        return ModuleWrapPolicy(policy)
    if not callable(policy):
        raise TypeError(f"auto_wrap_policy must be callable (e.g. functools.partial("
                        f"size_based_auto_wrap_policy, min_num_params=...)) or a ModuleWrapPolicy, got {policy!r}")
    return policy


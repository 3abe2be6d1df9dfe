"""The optimizer in backward, as torch.distributed.optim's
``_apply_optimizer_in_backward``: each parameter gets optimizers of its own
that step from its post-accumulate-grad hook, as soon as backward has
finished its gradient, which is then dropped (``.grad = None``), so no
gradient outlives its step. DistributedDataParallel (nn/parallel.py) takes
the hooks over and steps after the parameter's bucket has been averaged."""

import weakref

from ...optim.optimizer import Optimizer
from ...tensor import Tensor

__all__ = []


class _ParamMap:
    """Parameter -> value by identity, an entry living as long as its
    parameter (a WeakKeyDictionary would compare tensors with ``==``, which
    is elementwise)."""

    def __init__(self):
        self._items = {}

    def __contains__(self, param):
        return id(param) in self._items

    def __getitem__(self, param):
        return self._items[id(param)][1]

    def get(self, param, default=None):
        item = self._items.get(id(param))
        return default if item is None else item[1]

    def __setitem__(self, param, value):
        key = id(param)
        if key not in self._items:
            weakref.finalize(param, self._items.pop, key, None)
        self._items[key] = (weakref.ref(param), value)

    def pop(self, param, default=None):
        item = self._items.pop(id(param), None)
        return default if item is None else item[1]


# The handles of the hooks _apply_optimizer_in_backward registered, per
# parameter (PyTorch's name): DistributedDataParallel removes them.
param_to_optim_hook_handle_map = _ParamMap()


def _step_in_backward(param):
    """The hook: every optimizer of ``param`` steps on its finished gradient, which is then dropped."""
    for optimizer in param._in_backward_optimizers:
        optimizer.step()
    param.grad = None


def _apply_optimizer_in_backward(optimizer_class, params, optimizer_kwargs, register_hook=True):
    """Gives every parameter of ``params`` its own ``optimizer_class(
    [param], **optimizer_kwargs)`` (any ddpc.optim.Optimizer subclass), which
    steps during ``backward()`` as soon as the parameter's gradient has been
    accumulated; the gradient is then set to None, so an optimizer over the
    same parameter outside backward does nothing. Calling it again for a
    parameter adds another optimizer, stepped after the earlier ones.

    The optimizers are kept on the parameter as ``_in_backward_optimizers``,
    with ``_optimizer_classes`` and ``_optimizer_kwargs`` beside them, as in
    PyTorch (``_get_in_backward_optimizers(module)`` lists them, for
    checkpointing: do not step them yourself). ``register_hook=False``
    creates them without the hook, for a wrapper that steps them itself.
    DistributedDataParallel, made over a module whose parameters have them,
    steps them on the averaged gradient instead, once the parameter's bucket
    has been all-reduced (see its docstring).

    Example::

        _apply_optimizer_in_backward(ddpc.optim.SGD, model.parameters(), {"lr": 0.01, "momentum": 0.9})
        model(x).sum().backward()  # the parameters are updated, their .grad is None
    """
    if not (isinstance(optimizer_class, type) and issubclass(optimizer_class, Optimizer)):
        raise TypeError("optimizer_class must be a ddpc.optim.Optimizer subclass, got "
                        f"{getattr(optimizer_class, '__name__', optimizer_class)!r}")
    if not isinstance(optimizer_kwargs, dict):
        raise TypeError(f"optimizer_kwargs must be a dict, got {type(optimizer_kwargs).__name__}")
    if isinstance(params, Tensor):
        raise TypeError("params must be an iterable of parameters, got a single tensor")
    params = list(params)
    for p in params:
        if not isinstance(p, Tensor):
            raise TypeError(f"params must be ddpc tensors, got {type(p).__name__}")
        if not p.requires_grad or p.grad_fn is not None:
            raise ValueError("the optimizer in backward needs leaf tensors that require grad (its hook runs once "
                             "their gradient is accumulated)")
    for p in params:
        optimizer = optimizer_class([p], **optimizer_kwargs)
        if "_in_backward_optimizers" not in p.__dict__:
            p._in_backward_optimizers, p._optimizer_classes, p._optimizer_kwargs = [], [], []
        p._in_backward_optimizers.append(optimizer)
        p._optimizer_classes.append(optimizer_class)
        p._optimizer_kwargs.append(optimizer_kwargs)
        if register_hook and p not in param_to_optim_hook_handle_map:
            # One hook per parameter steps all its optimizers (a later one added to the list as well).
            param_to_optim_hook_handle_map[p] = [p.register_post_accumulate_grad_hook(_step_in_backward)]


def _get_in_backward_optimizers(module):
    """The optimizers ``_apply_optimizer_in_backward`` gave ``module``'s
    parameters, in parameter order (for checkpointing; backward steps them)."""
    optimizers = []
    for p in module.parameters():
        optimizers.extend(p.__dict__.get("_in_backward_optimizers", ()))
    return optimizers

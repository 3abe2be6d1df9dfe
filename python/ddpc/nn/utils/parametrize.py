"""Parametrizations, as torch.nn.utils.parametrize: a module's tensor (say
``weight``) computed on every access from stored "original" tensors by a
chain of small modules, so that an optimizer updates the originals and the
layer always sees a tensor with the wanted structure (a normalised or
spectrally bounded weight, see ``parametrizations``).

``register_parametrization(module, "weight", p)`` moves ``module.weight`` to
``module.parametrizations.weight.original`` (``original0``, ``original1``, ...
where ``p.right_inverse`` splits it into several tensors) and gives the
module a class of its own, ``Parametrized<Class>``, with a ``weight``
property: reading it returns ``p(original)``, assigning to it stores
``p.right_inverse(value)``. The state dict holds the originals, under the
same keys as PyTorch's. ``cached()`` computes each parametrized tensor once
inside its block.
"""

import contextlib

from ... import autograd
from ...tensor import Tensor
from ..modules import Module, ModuleDict, ModuleList, Parameter

__all__ = ["ParametrizationList", "cached", "is_parametrized", "register_parametrization",
           "remove_parametrizations", "type_before_parametrizations"]

_cache = None  # {(id(module), name): tensor} inside cached(), else None


@contextlib.contextmanager
def cached():
    """Inside the block each parametrized tensor is computed once, on first access."""
    global _cache
    outer = _cache
    _cache = {} if outer is None else outer
    try:
        yield
    finally:
        _cache = outer


class ParametrizationList(ModuleList):
    """The parametrizations of one tensor, applied in order, and the originals they start from."""

    def __init__(self, modules, original, unsafe=False):
        super().__init__(modules)
        self.unsafe = unsafe
        with autograd.no_grad():
            new = original
            for m in reversed(list(self)):
                if hasattr(m, "right_inverse"):
                    new = m.right_inverse(new)
        self.is_tensor = isinstance(new, Tensor)
        self.ntensors = 1 if self.is_tensor else len(new)
        if self.is_tensor:
            self._keep("original", new, original)
        else:
            for i, t in enumerate(new):
                self._keep(f"original{i}", t, original)

    def _keep(self, name, value, like):
        """Registers ``value`` as a parameter when the tensor it stands for was one, else as a buffer."""
        if not isinstance(value, Tensor):
            raise ValueError(f"right_inverse must return tensors, got {type(value).__name__} for {name}")
        if isinstance(like, Parameter):
            self.register_parameter(name, value if value is like else Parameter(value.detach(), like.requires_grad))
        else:
            self.register_buffer(name, value.detach())

    def originals(self):
        return (self.original,) if self.is_tensor else tuple(getattr(self, f"original{i}")
                                                              for i in range(self.ntensors))

    def forward(self):
        x = self[0](*self.originals())
        for m in list(self)[1:]:
            x = m(x)
        return x

    def right_inverse(self, value):
        """Stores what the chain maps to ``value`` in the originals (their objects stay, as optimizers hold them).
        As in PyTorch, every parametrization needs a right_inverse here, where registering takes one without it
        as the identity."""
        with autograd.no_grad():
            for m in reversed(list(self)):
                if not hasattr(m, "right_inverse"):
                    raise RuntimeError(f"parametrization {type(m).__name__} does not implement right_inverse.")
                value = m.right_inverse(value)
            new = (value,) if self.is_tensor else tuple(value)
            if len(new) != self.ntensors:
                raise ValueError(f"right_inverse returned {len(new)} tensors, expected {self.ntensors}")
            for original, t in zip(self.originals(), new):
                if not self.unsafe and (tuple(t.shape) != tuple(original.shape) or t.dtype is not original.dtype):
                    raise ValueError(f"right_inverse returned a tensor of shape {tuple(t.shape)} and {t.dtype}; "
                                     f"the original is {tuple(original.shape)}, {original.dtype}")
                original.data = t.detach().clone()


def _parametrized_class(cls):
    """A subclass of cls whose parametrized names are properties."""
    def __setattr__(self, name, value):
        if name in self.__dict__.get("_modules", {}).get("parametrizations", ()) and not isinstance(value, Module):
            object.__setattr__(self, name, value)  # the property's setter
        else:
            cls.__setattr__(self, name, value)

    return type(f"Parametrized{cls.__name__}", (cls,), {"__setattr__": __setattr__, "_original_class": cls})


def _property(name):
    def get(self):
        plist = self.parametrizations[name]
        if _cache is None:
            return plist()
        key = (id(self), name)
        if key not in _cache:
            _cache[key] = plist()
        return _cache[key]

    def set_(self, value):
        self.parametrizations[name].right_inverse(value)

    return property(get, set_)


def register_parametrization(module, tensor_name, parametrization, *, unsafe=False):
    """Makes ``module.<tensor_name>`` the output of ``parametrization`` (a
    Module) applied to stored originals; a second registration on the same
    name applies after the first. Without ``unsafe``, the parametrization's
    output must keep the tensor's shape and dtype."""
    if not isinstance(parametrization, Module):
        raise TypeError(f"register_parametrization: the parametrization must be a Module, got "
                        f"{type(parametrization).__name__}")
    if is_parametrized(module, tensor_name):
        plist = module.parametrizations[tensor_name]
        if not unsafe:
            _check_output(parametrization(plist()), plist(), tensor_name)
        plist.append(parametrization)
        return module
    original = module._parameters.get(tensor_name, module._buffers.get(tensor_name))
    if not isinstance(original, Tensor):
        raise ValueError(f"register_parametrization: module {type(module).__name__} has no parameter or buffer "
                         f"named {tensor_name!r}")
    plist = ParametrizationList([parametrization], original, unsafe)
    if not unsafe:
        with autograd.no_grad():
            _check_output(plist(), original, tensor_name)
    module._parameters.pop(tensor_name, None)
    module._buffers.pop(tensor_name, None)
    if not is_parametrized(module):
        module.__class__ = _parametrized_class(module.__class__)
        module.parametrizations = ModuleDict()
    module.parametrizations[tensor_name] = plist
    setattr(module.__class__, tensor_name, _property(tensor_name))
    return module


def _check_output(out, original, name):
    if not isinstance(out, Tensor):
        raise ValueError(f"a parametrization must return a tensor, got {type(out).__name__} for {name!r}")
    if tuple(out.shape) != tuple(original.shape) or out.dtype is not original.dtype:
        raise ValueError(f"the parametrization of {name!r} changes its shape or dtype ({tuple(original.shape)}, "
                         f"{original.dtype} -> {tuple(out.shape)}, {out.dtype}); pass unsafe=True to allow it")


def is_parametrized(module, tensor_name=None):
    """Whether ``module`` has any parametrization (on ``tensor_name``, when given)."""
    plists = module.__dict__.get("_modules", {}).get("parametrizations")
    if not isinstance(plists, ModuleDict):
        return False
    return len(plists) > 0 if tensor_name is None else tensor_name in plists


def type_before_parametrizations(module):
    """The class ``module`` had before its first parametrization."""
    return getattr(type(module), "_original_class", type(module)) if is_parametrized(module) else type(module)


def remove_parametrizations(module, tensor_name, leave_parametrized=True):
    """Undoes ``register_parametrization`` on ``tensor_name``: the tensor becomes
    a plain parameter (or buffer) again, holding its current parametrized value
    (or, with ``leave_parametrized=False``, the single original as stored)."""
    if not is_parametrized(module, tensor_name):
        raise ValueError(f"module {type(module).__name__} has no parametrization on {tensor_name!r}")
    plist = module.parametrizations[tensor_name]
    originals = plist.originals()
    if leave_parametrized:
        with autograd.no_grad():
            value = plist()
        if plist.is_tensor and tuple(value.shape) == tuple(originals[0].shape) \
                and value.dtype is originals[0].dtype:
            kept = originals[0]
            kept.data = value.detach().clone()  # the same object: optimizers holding it carry on
        else:
            kept = Parameter(value.detach(), originals[0].requires_grad) \
                if isinstance(originals[0], Parameter) else value.detach()
    else:
        if not plist.is_tensor:
            raise ValueError("leave_parametrized=False needs a parametrization stored as a single original tensor")
        kept = originals[0]
    del module.parametrizations[tensor_name]
    delattr(module.__class__, tensor_name)
    if isinstance(kept, Parameter):
        module._parameters[tensor_name] = kept
    else:
        module._buffers[tensor_name] = kept
    if not is_parametrized(module):
        del module._modules["parametrizations"]
        module.__class__ = module.__class__._original_class
    return module

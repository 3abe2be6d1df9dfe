"""ddpc.nn.utils.prune: pruning a module's parameters by masks, as
torch.nn.utils.prune.

Pruning ``name`` of a module moves the parameter to ``name + "_orig"``, keeps
a mask in the buffer ``name + "_mask"``, and sets ``name`` to ``orig *
mask`` (a plain tensor, recomputed by a forward pre-hook before every
forward, so gradients reach ``_orig`` through the mask). Pruning the same
parameter again combines the methods in a ``PruningContainer``: an
unstructured method then prunes among the entries still unpruned, a
structured one among the channels not fully pruned. ``remove`` makes the
pruning permanent.

Differences from PyTorch: random methods draw from ddpc's generator
(``ddpc.manual_seed``), so their masks differ from PyTorch's for a seed.
"""

import numbers
from abc import ABC, abstractmethod

from ...tensor import ones_like, rand, rand_like, zeros, zeros_like

__all__ = ["BasePruningMethod", "PruningContainer", "Identity", "RandomUnstructured", "L1Unstructured",
           "RandomStructured", "LnStructured", "CustomFromMask", "identity", "random_unstructured",
           "l1_unstructured", "random_structured", "ln_structured", "global_unstructured", "custom_from_mask",
           "remove", "is_pruned"]


def _pruning_hooks(module, name=None):
    """(key, method) of the module's pruning pre-hooks (of parameter ``name`` only, when given)."""
    return [(key, hook) for key, hook in module._forward_pre_hooks.items()
            if isinstance(hook, BasePruningMethod) and (name is None or hook._tensor_name == name)]


class BasePruningMethod(ABC):
    """A way to compute a pruning mask; subclasses define ``compute_mask`` and ``PRUNING_TYPE``
    ('unstructured', 'structured' with a ``dim``, or 'global')."""

    _tensor_name = None

    def __call__(self, module, inputs):
        setattr(module, self._tensor_name, self.apply_mask(module))

    @abstractmethod
    def compute_mask(self, t, default_mask):
        """The mask for tensor ``t``, given the mask of the pruning before it."""

    def apply_mask(self, module):
        """The pruned tensor: the module's ``_orig`` parameter times its mask."""
        orig = getattr(module, self._tensor_name + "_orig")
        return getattr(module, self._tensor_name + "_mask").to(dtype=orig.dtype) * orig

    @classmethod
    def apply(cls, module, name, *args, importance_scores=None, **kwargs):
        """Prunes parameter ``name`` of ``module`` by a new ``cls(*args, **kwargs)``, combined with
        any pruning already there; ranks entries by ``importance_scores`` (default: the parameter)."""
        method = cls(*args, **kwargs)
        method._tensor_name = name
        previous = _pruning_hooks(module, name)
        for key, _ in previous:
            del module._forward_pre_hooks[key]
        if previous:
            old = previous[0][1]
            if not isinstance(old, PruningContainer):
                old = PruningContainer(old)
            old.add_pruning_method(method)
            method = old
        orig = getattr(module, name)
        if importance_scores is None:
            importance_scores = orig
        elif importance_scores.shape != orig.shape:
            raise ValueError(f"importance_scores should have the same shape as parameter {name} of {module}")
        fresh = not isinstance(method, PruningContainer)
        if fresh:
            module.register_parameter(name + "_orig", orig)
            del module._parameters[name]
            default_mask = ones_like(orig)
        else:
            default_mask = getattr(module, name + "_mask").detach().clone()
        try:
            mask = method.compute_mask(importance_scores.detach(), default_mask=default_mask)
            module.register_buffer(name + "_mask", mask)
            setattr(module, name, method.apply_mask(module))
            module.register_forward_pre_hook(method)
        except Exception:
            if fresh:  # leave the module as it was
                module.register_parameter(name, module._parameters.pop(name + "_orig"))
            raise
        return method

    def prune(self, t, default_mask=None, importance_scores=None):
        """``t`` times the mask computed from ``importance_scores`` (default: ``t``)."""
        scores = t if importance_scores is None else importance_scores
        if scores.shape != t.shape:
            raise ValueError("importance_scores should have the same shape as the tensor to prune")
        return t * self.compute_mask(scores, default_mask=ones_like(t) if default_mask is None else default_mask)

    def remove(self, module):
        """Makes the pruning permanent: ``name`` becomes a parameter holding the pruned values."""
        name = self._tensor_name
        weight = self.apply_mask(module)
        if name in module.__dict__:
            delattr(module, name)
        orig = module._parameters.pop(name + "_orig")
        orig.data = weight.detach()
        del module._buffers[name + "_mask"]
        setattr(module, name, orig)


class PruningContainer(BasePruningMethod):
    """The sequence of pruning methods applied to one parameter; its mask is the last method's,
    computed on what the earlier ones left."""

    def __init__(self, *methods):
        self._pruning_methods = ()
        if len(methods) == 1:
            self._tensor_name = methods[0]._tensor_name
        for method in methods:
            self.add_pruning_method(method)

    def add_pruning_method(self, method):
        if not isinstance(method, BasePruningMethod):
            raise TypeError(f"{type(method)} is not a BasePruningMethod subclass")
        if self._tensor_name != method._tensor_name:
            raise ValueError(f"Can only add pruning methods acting on the parameter named '{self._tensor_name}' "
                             f"to PruningContainer. Found '{method._tensor_name}'")
        self._pruning_methods += (method,)

    def __len__(self):
        return len(self._pruning_methods)

    def __iter__(self):
        return iter(self._pruning_methods)

    def __getitem__(self, i):
        return self._pruning_methods[i]

    def compute_mask(self, t, default_mask):
        method = self._pruning_methods[-1]
        mask = default_mask.to(dtype=t.dtype)
        kind = method.PRUNING_TYPE
        if kind == "unstructured":  # among the entries still unpruned
            kept = mask == 1
            partial = method.compute_mask(t.masked_select(kept), default_mask=mask.masked_select(kept))
            return mask.masked_scatter(kept, partial.to(dtype=mask.dtype))
        if kind == "structured":  # among the channels not fully pruned
            if not hasattr(method, "dim"):
                raise AttributeError("Pruning methods of PRUNING_TYPE 'structured' need to have the attribute `dim`")
            dim = method.dim + t.ndim if method.dim < 0 else method.dim
            if not 0 <= dim < t.ndim:
                raise IndexError(f"Invalid dim {method.dim} for a tensor of {t.ndim} dims")
            others = [d for d in range(t.ndim) if d != dim]
            channels = (mask.sum(dim=others) != 0).nonzero().reshape(-1)
            partial = method.compute_mask(t.index_select(dim, channels), default_mask=mask.index_select(dim, channels))
            return mask.index_copy(dim, channels, partial.to(dtype=mask.dtype))
        if kind == "global":
            return method.compute_mask(t, default_mask=mask)
        raise ValueError(f"Unrecognized PRUNING_TYPE {kind}")


class Identity(BasePruningMethod):
    """Prunes nothing: the mask is all ones."""

    PRUNING_TYPE = "unstructured"

    def compute_mask(self, t, default_mask):
        return default_mask

    @classmethod
    def apply(cls, module, name):
        return super().apply(module, name)


def _check_amount(amount):
    if not isinstance(amount, numbers.Real) or isinstance(amount, bool):
        raise TypeError(f"Invalid type for amount: {amount}. Must be int or float.")
    if (amount < 0) if isinstance(amount, numbers.Integral) else not 0.0 <= float(amount) <= 1.0:
        raise ValueError(f"amount={amount} should either be a float in the range [0, 1] or a non-negative integer")


def _count_to_prune(amount, size):
    """How many of ``size`` entries (or channels) ``amount`` prunes: a count, or a fraction rounded."""
    count = amount if isinstance(amount, numbers.Integral) else round(amount * size)
    if count > size:
        raise ValueError(f"amount={amount} should be smaller than the number of parameters to prune={size}")
    return count


def _check_structured(t, dim):
    if t.ndim <= 1:
        raise ValueError(f"Structured pruning can only be applied to multidimensional tensors. Found tensor of "
                         f"shape {t.shape} with {t.ndim} dims")
    if not -t.ndim <= dim < t.ndim:
        raise IndexError(f"Invalid index {dim} for tensor of size {t.shape}")


def _prune_entries(t, default_mask, scores, count, largest):
    """default_mask with the ``count`` entries of the largest (or smallest) scores set to 0."""
    if count == 0:
        return default_mask.clone()
    drop = scores.reshape(-1).topk(count, largest=largest).indices
    return default_mask.reshape(-1).index_fill(0, drop, 0).reshape(t.shape)


def _channel_mask(t, dim, keep):
    """A mask of t's shape that is 1 on the channels along ``dim`` where ``keep`` (one per channel) is 1."""
    shape = [1] * t.ndim
    shape[dim] = t.shape[dim]
    return zeros_like(t) + keep.to(dtype=t.dtype).reshape(shape)


class RandomUnstructured(BasePruningMethod):
    """Prunes ``amount`` (a count, or a fraction) of the unpruned entries, drawn at random."""

    PRUNING_TYPE = "unstructured"

    def __init__(self, amount):
        _check_amount(amount)
        self.amount = amount

    def compute_mask(self, t, default_mask):
        count = _count_to_prune(self.amount, t.numel())
        return _prune_entries(t, default_mask, rand_like(t), count, True)

    @classmethod
    def apply(cls, module, name, amount):
        return super().apply(module, name, amount=amount)


class L1Unstructured(BasePruningMethod):
    """Prunes ``amount`` of the unpruned entries with the smallest absolute values."""

    PRUNING_TYPE = "unstructured"

    def __init__(self, amount):
        _check_amount(amount)
        self.amount = amount

    def compute_mask(self, t, default_mask):
        return _prune_entries(t, default_mask, t.abs(), _count_to_prune(self.amount, t.numel()), False)

    @classmethod
    def apply(cls, module, name, amount, importance_scores=None):
        return super().apply(module, name, amount=amount, importance_scores=importance_scores)


class RandomStructured(BasePruningMethod):
    """Prunes ``amount`` of the channels along ``dim``, drawn at random."""

    PRUNING_TYPE = "structured"

    def __init__(self, amount, dim=-1):
        _check_amount(amount)
        self.amount, self.dim = amount, dim

    def compute_mask(self, t, default_mask):
        _check_structured(t, self.dim)
        channels = t.shape[self.dim]
        count = _count_to_prune(self.amount, channels)
        if count == 0:
            return default_mask
        draws = rand(channels, device=t.device)
        keep = draws > draws.kthvalue(count).values
        return _channel_mask(t, self.dim, keep) * default_mask.to(dtype=t.dtype)

    @classmethod
    def apply(cls, module, name, amount, dim=-1):
        return super().apply(module, name, amount=amount, dim=dim)


class LnStructured(BasePruningMethod):
    """Prunes ``amount`` of the channels along ``dim`` with the smallest L``n`` norms (n: an int,
    float, inf, -inf, 'fro' or 'nuc' as ``ddpc.norm`` takes them)."""

    PRUNING_TYPE = "structured"

    def __init__(self, amount, n, dim=-1):
        _check_amount(amount)
        self.amount, self.n, self.dim = amount, n, dim

    def compute_mask(self, t, default_mask):
        _check_structured(t, self.dim)
        channels = t.shape[self.dim]
        count = _count_to_prune(self.amount, channels)
        if count == 0:
            return default_mask
        dim = self.dim % t.ndim
        norms = t.norm(p=self.n, dim=[d for d in range(t.ndim) if d != dim])
        kept = norms.topk(channels - count, largest=True).indices
        keep = zeros(channels, device=t.device).index_fill(0, kept, 1)
        return _channel_mask(t, dim, keep) * default_mask.to(dtype=t.dtype)

    @classmethod
    def apply(cls, module, name, amount, n, dim, importance_scores=None):
        return super().apply(module, name, amount=amount, n=n, dim=dim, importance_scores=importance_scores)


class CustomFromMask(BasePruningMethod):
    """Prunes by a given mask (1 keeps an entry, 0 prunes it)."""

    PRUNING_TYPE = "global"

    def __init__(self, mask):
        self.mask = mask

    def compute_mask(self, t, default_mask):
        if default_mask.shape != self.mask.shape:
            raise ValueError(f"the mask's shape {self.mask.shape} is not the parameter's {default_mask.shape}")
        return default_mask * self.mask.to(dtype=default_mask.dtype, device=default_mask.device)

    @classmethod
    def apply(cls, module, name, mask):
        return super().apply(module, name, mask=mask)


def identity(module, name):
    """Prunes nothing of ``module.name`` but sets up the ``_orig``/``_mask`` form; returns the module."""
    Identity.apply(module, name)
    return module


def random_unstructured(module, name, amount):
    RandomUnstructured.apply(module, name, amount)
    return module


def l1_unstructured(module, name, amount, importance_scores=None):
    L1Unstructured.apply(module, name, amount=amount, importance_scores=importance_scores)
    return module


def random_structured(module, name, amount, dim):
    RandomStructured.apply(module, name, amount, dim)
    return module


def ln_structured(module, name, amount, n, dim, importance_scores=None):
    LnStructured.apply(module, name, amount, n, dim, importance_scores=importance_scores)
    return module


def custom_from_mask(module, name, mask):
    CustomFromMask.apply(module, name, mask)
    return module


def global_unstructured(parameters, pruning_method, importance_scores=None, **kwargs):
    """Prunes the (module, name) ``parameters`` together, as if they were one vector, by an
    unstructured ``pruning_method(**kwargs)``: e.g. the 20% smallest of all of them."""
    if isinstance(parameters, (str, bytes)) or not hasattr(parameters, "__iter__"):
        raise TypeError("global_unstructured(): parameters is not an Iterable")
    parameters = list(parameters)
    importance_scores = importance_scores or {}
    method = pruning_method(**kwargs)
    if method.PRUNING_TYPE != "unstructured":
        raise TypeError(f'Only "unstructured" PRUNING_TYPE supported for the `pruning_method`. Found method '
                        f"{pruning_method} of type {method.PRUNING_TYPE}")
    tensors = [getattr(m, n) for m, n in parameters]
    if not tensors:
        return
    from . import parameters_to_vector  # the package imports this module first

    scores = parameters_to_vector([importance_scores.get((m, n), t).detach() for (m, n), t in zip(parameters, tensors)])
    masks = parameters_to_vector([m._buffers.get(n + "_mask", ones_like(t)) for (m, n), t in zip(parameters, tensors)])
    method._tensor_name = "temp"
    container = PruningContainer(method)
    mask = container.compute_mask(scores, masks)
    start = 0
    for (module, name), t in zip(parameters, tensors):
        custom_from_mask(module, name, mask[start:start + t.numel()].reshape(t.shape))
        start += t.numel()


def remove(module, name):
    """Makes the pruning of ``module.name`` permanent (see ``BasePruningMethod.remove``)."""
    for key, method in _pruning_hooks(module, name):
        method.remove(module)
        del module._forward_pre_hooks[key]
        return module
    raise ValueError(f"Parameter '{name}' of module {module} has to be pruned before pruning can be removed")


def is_pruned(module):
    """Whether any parameter of ``module`` or of its submodules is pruned."""
    return any(_pruning_hooks(m) for m in module.modules())

"""ddpc.nn modules: Module and Parameter, the layers, containers and losses.

Module follows torch.nn.Module: assigning a Parameter, a Module or a
registered buffer to an attribute registers it; state_dict keys are dotted
paths; ``to``/``cuda``/``cpu`` convert parameters in place (the Parameter
objects stay the same, so an optimizer built before the move keeps working).
"""

import functools
import itertools
import math
import operator
import warnings
from collections import OrderedDict, namedtuple
from collections.abc import Mapping

from .._C import ArgumentError
from ..autograd import RemovableHandle, is_grad_enabled, no_grad
from ..tensor import Tensor, arange, empty, empty_like, full, parse_to_args, zero_grads
from .._dtype import checked_memory_format, device_of, get_dtype, ordinal, preserve_format
from . import _conv, _embedding_bag
from . import functional as F
from . import init
from .hooks import BackwardHook

__all__ = ["Module", "Parameter", "Linear", "ReLU", "GELU", "Tanh", "Sigmoid", "LeakyReLU", "ELU", "SiLU", "Softplus",
           "Mish", "Hardtanh", "ReLU6", "Hardswish", "Hardsigmoid", "Softmax", "LogSoftmax", "Dropout", "Flatten",
           "Identity", "Sequential", "ModuleList", "CrossEntropyLoss", "MSELoss", "NLLLoss", "CTCLoss", "BCELoss",
           "BCEWithLogitsLoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "KLDivLoss", "BatchNorm1d", "BatchNorm2d",
           "BatchNorm3d", "SyncBatchNorm",
           "ParameterList", "ParameterDict", "Unflatten", "GroupNorm", "InstanceNorm1d", "InstanceNorm2d",
           "InstanceNorm3d", "RMSNorm", "GLU", "Softmin", "EmbeddingBag", "UninitializedParameter",
           "UninitializedBuffer", "register_module_forward_hook", "register_module_forward_pre_hook",
           "register_module_full_backward_pre_hook", "register_module_full_backward_hook",
           "register_module_backward_hook", "register_module_buffer_registration_hook",
           "register_module_module_registration_hook", "register_module_parameter_registration_hook"]


class Parameter(Tensor):
    """A tensor that is a module's parameter: it requires grad by default and
    is registered when assigned to a Module attribute."""

    def __init__(self, data=None, requires_grad=True):
        if data is None:
            data = empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter wraps a ddpc.Tensor, got {type(data).__name__}")
        super().__init__(data._buf, requires_grad=requires_grad)

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()

    def __reduce__(self):
        """Pickles by value as a Parameter."""
        return (Parameter, (self.detach(), self.requires_grad))

    def __deepcopy__(self, memo):
        """A parameter of this class over a copy of the data, requiring grad as this one. As PyTorch's, and
        unlike a plain tensor's deepcopy: no ``.grad`` and no Python attributes come along, and the copy's
        memory is its own even where other tensors of the same deepcopy shared this one's."""
        return type(self)(self.detach().clone(), self.requires_grad)


class _UninitializedTensor:
    """What UninitializedParameter and UninitializedBuffer share: no elements
    until ``materialize(shape)`` gives the tensor its shape, in place."""

    cls_to_become = None

    def materialize(self, shape, device=None, dtype=None):
        """Gives this tensor ``shape`` (uninitialised values) on ``device`` and of ``dtype`` (default: its own);
        the object stays the same, so a module or list holding it sees the new shape."""
        self._buf = empty(*shape, dtype=dtype or self.dtype, device=device or self.device)._buf
        self.__class__ = self.cls_to_become

    def __repr__(self):
        return f"<{type(self).__name__}>"

    def __reduce__(self):
        return (type(self), (self.requires_grad, str(self.device), self.dtype))

    def __deepcopy__(self, memo):
        return type(self)(self.requires_grad, self.device, self.dtype)


class UninitializedParameter(_UninitializedTensor, Parameter):
    """A parameter of a lazy module whose shape is not known yet (as
    torch.nn.UninitializedParameter); ``materialize`` makes it a Parameter.
    Optimizers, DataParallel and DistributedDataParallel refuse it."""

    cls_to_become = Parameter

    def __init__(self, requires_grad=True, device=None, dtype=None):
        super().__init__(empty(0, dtype=dtype, device=device), requires_grad)


class UninitializedBuffer(_UninitializedTensor, Tensor):
    """A buffer of a lazy module whose shape is not known yet (as
    torch.nn.UninitializedBuffer); ``materialize`` makes it a plain tensor."""

    cls_to_become = Tensor

    def __init__(self, requires_grad=False, device=None, dtype=None):
        super().__init__(empty(0, dtype=dtype, device=device)._buf, requires_grad=requires_grad)


def is_lazy(tensor):
    """Whether ``tensor`` is an UninitializedParameter or UninitializedBuffer (its shape not known yet)."""
    return isinstance(tensor, _UninitializedTensor)


# Hooks of every module (torch.nn.modules.module's register_module_*_hook), in the
# form of a module's own tables; they run before the module's own.
_global_forward_pre_hooks = OrderedDict()
_global_forward_hooks = OrderedDict()
# The ids of the global forward hooks registered with_kwargs / always_call (PyTorch's tables).
_global_forward_hooks_with_kwargs = {}
_global_forward_hooks_always_called = {}
_global_backward_pre_hooks = OrderedDict()
_global_backward_hooks = OrderedDict()
# Whether _global_backward_hooks holds full backward hooks (True), non-full ones
# (False) or none yet (None); as in PyTorch, the kind stays once chosen.
_global_is_full_backward_hook = None
_global_buffer_registration_hooks = OrderedDict()
_global_module_registration_hooks = OrderedDict()
_global_parameter_registration_hooks = OrderedDict()


def register_module_forward_pre_hook(hook):
    """``hook(module, args)`` runs before every module's forward (before the
    module's own pre-hooks), as torch.nn.modules.module's; returning a value
    replaces the input. Returns a handle whose ``remove()`` unregisters it."""
    return Module._add_hook(_global_forward_pre_hooks, hook, False)


def register_module_forward_hook(hook, *, with_kwargs=False, always_call=False):
    """``hook(module, args, output)`` (or ``hook(module, args, kwargs, output)``
    with_kwargs) runs after every module's forward (before the module's own
    forward hooks), as torch.nn.modules.module's; returning a value replaces
    the output. ``always_call`` hooks also run (with output None) when forward raises."""
    return Module._add_hook(_global_forward_hooks, hook, False,
                            _flags(with_kwargs, _global_forward_hooks_with_kwargs,
                                   always_call, _global_forward_hooks_always_called))


def _flags(*pairs):
    """The flag tables (of pairs: flag, table) a hook is marked in: those whose flag is set."""
    return [table for flag, table in zip(pairs[::2], pairs[1::2]) if flag]


def register_module_full_backward_pre_hook(hook):
    """Module.register_full_backward_pre_hook for every module, run before the module's own."""
    return Module._add_hook(_global_backward_pre_hooks, hook, False)


def _global_backward_hook_kind(full):
    global _global_is_full_backward_hook
    if _global_is_full_backward_hook is (not full):
        raise RuntimeError("Cannot use both regular backward hooks and full backward hooks as a global Module hook. "
                           "Please use only one of them.")
    _global_is_full_backward_hook = full


def register_module_full_backward_hook(hook):
    """Module.register_full_backward_hook for every module, run before the module's own."""
    _global_backward_hook_kind(True)
    return Module._add_hook(_global_backward_hooks, hook, False)


def register_module_backward_hook(hook):
    """Module.register_backward_hook (PyTorch's deprecated non-full form) for
    every module, run before the module's own. The global hooks take one kind;
    a module's own may be of the other. On a module that also has full backward
    hooks it still sees forward's last op's gradients, where PyTorch's sees the
    outputs' gradients as both grad_input and grad_output."""
    _global_backward_hook_kind(False)
    return Module._add_hook(_global_backward_hooks, hook, False)


def register_module_buffer_registration_hook(hook):
    """``hook(module, name, buffer)`` runs whenever a buffer is registered on any
    module (register_buffer or assignment); returning a value registers that instead."""
    return Module._add_hook(_global_buffer_registration_hooks, hook, False)


def register_module_module_registration_hook(hook):
    """``hook(module, name, submodule)`` runs whenever a submodule (or None) is
    registered (add_module or assignment); returning a value registers that instead."""
    return Module._add_hook(_global_module_registration_hooks, hook, False)


def register_module_parameter_registration_hook(hook):
    """``hook(module, name, param)`` runs whenever a parameter (not None) is
    registered (register_parameter or assignment); returning a value registers that instead."""
    return Module._add_hook(_global_parameter_registration_hooks, hook, False)


def _registered_value(hooks, module, name, value):
    """``value`` after the registration hooks ``hooks``, each of which may replace it."""
    for hook in hooks.values():
        res = hook(module, name, value)
        if res is not None:
            value = res
    return value


_EXTRA_STATE = "_extra_state"


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """load_state_dict's result; it prints as PyTorch's where every key matched."""

    __slots__ = ()

    def __repr__(self):
        return "<All keys matched successfully>" if not self.missing_keys and not self.unexpected_keys else \
            super().__repr__()


def _call_non_full_hook(hook, module, grad_inputs, grad_outputs):
    return hook(module, grad_inputs, grad_outputs)


class Module:
    """Base class of every layer and model."""

    def __init__(self):
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", OrderedDict())
        for table in self._HOOK_TABLES:
            object.__setattr__(self, table, OrderedDict())

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args, **kwargs):
        if not (self._forward_pre_hooks or self._forward_hooks or self._backward_hooks
                or self._backward_pre_hooks or _global_forward_pre_hooks or _global_forward_hooks
                or _global_backward_pre_hooks or _global_backward_hooks):
            return self.forward(*args, **kwargs)
        return self._call_with_hooks(args, kwargs)

    # ---- hooks ------------------------------------------------------------------------
    # Each table maps a handle id to its hook, as PyTorch's (the forward hooks'
    # flags are the ids in the tables named after them). The state dict hooks:
    # pre-hooks, post-hooks (with whether a public registration forbids a
    # returned dict), load pre-hooks (with whether the module is passed) and load post-hooks.
    _HOOK_TABLES = ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks",
                    "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_backward_pre_hooks",
                    "_backward_hooks", "_state_dict_pre_hooks", "_state_dict_hooks", "_load_state_dict_pre_hooks",
                    "_load_state_dict_post_hooks")

    @staticmethod
    def _add_hook(table, entry, prepend, flag_tables=()):
        handle = RemovableHandle(table, list(flag_tables))
        table[handle.id] = entry
        for flags in flag_tables:
            flags[handle.id] = True
        if prepend:
            table.move_to_end(handle.id, last=False)
        return handle

    def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
        """``hook(module, args)`` (or ``hook(module, args, kwargs)`` with_kwargs) runs before
        forward; returning a value (a tuple, or ``(args, kwargs)`` with_kwargs) replaces the input."""
        return self._add_hook(self._forward_pre_hooks, hook, prepend,
                              _flags(with_kwargs, self._forward_pre_hooks_with_kwargs))

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False, always_call=False):
        """``hook(module, args, output)`` (or ``hook(module, args, kwargs, output)``) runs after
        forward; returning a value replaces the output. ``always_call`` hooks also run (with
        output None) when forward raises."""
        return self._add_hook(self._forward_hooks, hook, prepend,
                              _flags(with_kwargs, self._forward_hooks_with_kwargs,
                                     always_call, self._forward_hooks_always_called))

    def register_full_backward_pre_hook(self, hook, prepend=False):
        """``hook(module, grad_output)`` runs when the gradients w.r.t. the module's outputs are
        computed; returning a tuple replaces grad_output."""
        return self._add_hook(self._backward_pre_hooks, hook, prepend)

    # Whether _backward_hooks holds full backward hooks (True), PyTorch's deprecated
    # non-full ones (False) or none yet (None): one module takes one kind.
    _is_full_backward_hook = None

    def _backward_hook_kind(self, full):
        if self._is_full_backward_hook is (not full):
            raise RuntimeError("Cannot use both regular backward hooks and full backward hooks on a single Module. "
                               "Please use only one of them.")
        object.__setattr__(self, "_is_full_backward_hook", full)

    def register_full_backward_hook(self, hook, prepend=False):
        """``hook(module, grad_input, grad_output)`` runs when the gradients w.r.t. the module's
        tensor inputs are computed; returning a tuple replaces grad_input."""
        self._backward_hook_kind(True)
        return self._add_hook(self._backward_hooks, hook, prepend)

    def register_backward_hook(self, hook):
        """PyTorch's deprecated non-full backward hook: ``hook(module, grad_input, grad_output)``
        runs with the gradients of the inputs of the op that made forward's output (its first
        tensor, looked for in the first element of a sequence or the first tensor of a dict) and of
        that output; returning a tuple replaces grad_input. As in PyTorch, grad_input is that op's
        (which op, and its inputs' order, are ddpc's), not the module's; use
        register_full_backward_hook for the module's. A module takes one kind of backward hook."""
        self._backward_hook_kind(False)
        return self._add_hook(self._backward_hooks, hook, False)

    def _backward_hook_lists(self):
        """The full and the non-full backward hooks of a call: the global ones of
        their kind, then the module's own of theirs."""
        full, non_full = [], []
        for is_full, hooks in ((_global_is_full_backward_hook, _global_backward_hooks),
                               (self._is_full_backward_hook, self._backward_hooks)):
            if is_full is not None:
                (full if is_full else non_full).extend(hooks.values())
        return full, non_full

    def _attach_non_full_backward_hooks(self, result, hooks):
        var = result
        while not isinstance(var, Tensor):
            if isinstance(var, dict):
                var = next((v for v in var.values() if isinstance(v, Tensor)), None)
            elif isinstance(var, (list, tuple)) and var:
                var = var[0]
            else:
                return
        node = var.grad_fn
        if node is None:
            return
        for hook in hooks:
            node.register_hook(functools.partial(_call_non_full_hook, hook, self))

    def _call_with_hooks(self, args, kwargs):
        for key, hook in [*_global_forward_pre_hooks.items(), *self._forward_pre_hooks.items()]:
            if key in self._forward_pre_hooks_with_kwargs:
                res = hook(self, args, kwargs)
                if res is not None:
                    if not (isinstance(res, tuple) and len(res) == 2):
                        raise RuntimeError("a forward pre-hook registered with_kwargs must return None or a tuple "
                                           f"(new_args, new_kwargs), got {type(res).__name__}")
                    args, kwargs = res
            else:
                res = hook(self, args)
                if res is not None:
                    args = res if isinstance(res, tuple) else (res,)
        bw_hook = None
        full, non_full = self._backward_hook_lists()
        pre = [*_global_backward_pre_hooks.values(), *self._backward_pre_hooks.values()]
        if full or pre:
            bw_hook = BackwardHook(self, full, pre)
            args = bw_hook.setup_input_hook(args)
        called = set()
        try:
            result = self.forward(*args, **kwargs)
            for key, hook in [*_global_forward_hooks.items(), *self._forward_hooks.items()]:
                called.add(key)
                res = hook(self, args, kwargs, result) if self._with_kwargs(key) else hook(self, args, result)
                if res is not None:
                    result = res
        except BaseException:
            self._run_always_call_hooks(args, kwargs, called)
            raise
        # Non-full hooks go on the node of forward's last op, not on the full hooks'
        # gather node, whose gradients are ddpc's bookkeeping (PyTorch's would show
        # the outputs' gradients as both grad_input and grad_output there).
        if non_full and is_grad_enabled():
            self._attach_non_full_backward_hooks(result, non_full)
        if bw_hook is not None:
            result = bw_hook.setup_output_hook(result)
        return result

    def _with_kwargs(self, key):
        """Whether the forward hook ``key`` (this module's or a global one) takes the kwargs."""
        return key in self._forward_hooks_with_kwargs or key in _global_forward_hooks_with_kwargs

    def _run_always_call_hooks(self, args, kwargs, called):
        """After forward raised: the always_call forward hooks that have not run, with output None."""
        for key, hook in [*_global_forward_hooks.items(), *self._forward_hooks.items()]:
            always_call = key in self._forward_hooks_always_called or key in _global_forward_hooks_always_called
            if always_call and key not in called:
                try:
                    hook(self, args, kwargs, None) if self._with_kwargs(key) else hook(self, args, None)
                except Exception as e:
                    warnings.warn(f"forward hook {hook!r} raised while forward was failing: {e!r}")

    # ---- registration ---------------------------------------------------------------
    def _dicts(self):
        params = self.__dict__.get("_parameters")
        if params is None:
            raise AttributeError(f"cannot assign to {type(self).__name__} before Module.__init__() is called")
        return params, self.__dict__["_buffers"], self.__dict__["_modules"]

    def __setattr__(self, name, value):
        # In PyTorch's order: a Parameter takes any name; a parameter's name then takes only None, a
        # Module any other name, a child's name only None, and a buffer's name a tensor or None.
        params = self.__dict__.get("_parameters")
        if isinstance(value, Parameter):
            params, buffers, modules = self._dicts()
            buffers.pop(name, None)
            modules.pop(name, None)
            self.__dict__.pop(name, None)
            params[name] = _registered_value(_global_parameter_registration_hooks, self, name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                                "(ddpc.nn.Parameter or None expected)")
            params[name] = None
        elif isinstance(value, Module):
            params, buffers, modules = self._dicts()
            buffers.pop(name, None)
            self.__dict__.pop(name, None)
            modules[name] = _registered_value(_global_module_registration_hooks, self, name, value)
        elif params is not None and name in self._modules:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module '{name}' "
                                "(ddpc.nn.Module or None expected)")
            self._modules[name] = _registered_value(_global_module_registration_hooks, self, name, None)
        elif isinstance(value, Buffer):
            self._dicts()  # refuses a module whose Module.__init__ has not run
            self.__dict__.pop(name, None)
            self.register_buffer(name, value, value.persistent)
        elif params is not None and name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                                "(ddpc.nn.Buffer, ddpc.Tensor or None expected)")
            self._buffers[name] = _registered_value(_global_buffer_registration_hooks, self, name, value)
        else:
            object.__setattr__(self, name, value)

    def __setstate__(self, state):
        """Unpickling: a module pickled by an older ddpc lacks the hook tables added since (as PyTorch's)."""
        self.__dict__.update(state)
        for table in self._HOOK_TABLES:
            if table not in self.__dict__:
                object.__setattr__(self, table, OrderedDict())

    def __getattr__(self, name):
        d = self.__dict__
        for key in ("_parameters", "_buffers", "_modules"):
            table = d.get(key)
            if table is not None and name in table:
                return table[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for table in (self._parameters, self._buffers, self._modules):
            if name in table:
                del table[name]
                self._non_persistent.discard(name)
                return
        object.__delattr__(self, name)

    def register_parameter(self, name, param):
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"register_parameter: {name!r} must be a Parameter or None")
        self._check_name(name, self._parameters)
        if param is not None:
            param = _registered_value(_global_parameter_registration_hooks, self, name, param)
        self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"register_buffer: {name!r} must be a ddpc.Tensor or None")
        self._check_name(name, self._buffers)
        self._buffers[name] = _registered_value(_global_buffer_registration_hooks, self, name, tensor)
        if persistent:
            self._non_persistent.discard(name)
        else:
            self._non_persistent.add(name)

    def add_module(self, name, module):
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module: {name!r} must be a Module or None")
        self._check_name(name, self._modules)
        self._modules[name] = _registered_value(_global_module_registration_hooks, self, name, module)

    register_module = add_module

    def _check_name(self, name, table):
        """A name to register in ``table``, by PyTorch's rule: one that is
        already an attribute, other than an entry of ``table`` itself (a
        parameter, a buffer or a submodule of another kind, also one set to
        None, or a plain attribute), is refused."""
        if not isinstance(name, str) or not name or "." in name:
            raise KeyError(f"invalid name {name!r}: a non-empty string without '.' is needed")
        if name not in table and hasattr(self, name):
            raise KeyError(f"attribute {name!r} already exists")

    # ---- traversal -------------------------------------------------------------------
    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        memo = set() if memo is None else memo
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(memo, prefix + ("." if prefix else "") + name, remove_duplicate)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        seen = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self):
        for _, m in self.named_children():
            yield m

    def _named_members(self, table, prefix, recurse, remove_duplicate=True):
        seen = set()
        mods = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        for mod_prefix, m in mods:
            for name, v in getattr(m, table).items():
                if v is None or (remove_duplicate and id(v) in seen):
                    continue
                seen.add(id(v))
                yield mod_prefix + ("." if mod_prefix else "") + name, v

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        return self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse=True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        return self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse=True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def get_submodule(self, target):
        """The submodule at dotted path ``target`` (``""`` is this module)."""
        mod = self
        if target == "":
            return mod
        for item in target.split("."):
            if not hasattr(mod, item):
                raise AttributeError(f"{type(mod).__name__} has no attribute `{item}`")
            mod = getattr(mod, item)
            if not isinstance(mod, Module):
                raise AttributeError(f"`{item}` is not an nn.Module")
        return mod

    def set_submodule(self, target, module, strict=False):
        """Puts ``module`` at dotted path ``target`` (not ``""``), as PyTorch's: the modules along the path
        must exist; the last name may be new unless ``strict``, and must not be an attribute that is
        not a module."""
        if not isinstance(target, str) or target == "":
            raise ValueError("cannot set the submodule without a target name")
        if not isinstance(module, Module):
            raise ValueError(f"`module` is not an nn.Module, found {type(module)}")
        parent_path, _, name = target.rpartition(".")
        parent = self.get_submodule(parent_path)
        if strict and not hasattr(parent, name):
            raise AttributeError(f"{type(parent).__name__} has no attribute `{name}`")
        if hasattr(parent, name) and not isinstance(getattr(parent, name), Module):
            raise AttributeError(f"`{name}` is not an nn.Module")
        setattr(parent, name, module)

    def _get_member(self, target, table, kind, cls=object):
        module_path, _, name = target.rpartition(".")
        mod = self.get_submodule(module_path)
        if not hasattr(mod, name):
            raise AttributeError(f"{type(mod).__name__} has no attribute `{name}`")
        member = getattr(mod, name)
        if name not in getattr(mod, table) or not isinstance(member, cls):
            raise AttributeError(f"`{name}` is not {kind}")
        return member

    def get_parameter(self, target):
        """The parameter at dotted path ``target`` (one registered as None is refused, as in PyTorch)."""
        return self._get_member(target, "_parameters", "an nn.Parameter", Parameter)

    def get_buffer(self, target):
        """The buffer at dotted path ``target``."""
        return self._get_member(target, "_buffers", "a buffer")

    def apply(self, fn):
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # ---- state ------------------------------------------------------------------------
    # state_dict and load_state_dict walk the modules as PyTorch's do: each module saves and loads
    # its own tensors in _save_to_state_dict / _load_from_state_dict (which subclasses override, say
    # to rename the keys of checkpoints saved by an older _version) and runs its hooks around them.
    _version = 1

    def register_state_dict_pre_hook(self, hook):
        """``hook(module, prefix, keep_vars)`` runs before this module's state_dict saves anything."""
        return self._add_hook(self._state_dict_pre_hooks, hook, False)

    def register_state_dict_post_hook(self, hook):
        """``hook(module, state_dict, prefix, local_metadata)`` runs once this module and its children
        are in ``state_dict``; it may change the dict in place and must return None."""
        return self._add_hook(self._state_dict_hooks, (hook, True), False)

    def _register_state_dict_hook(self, hook):
        """As register_state_dict_post_hook, but a hook that returns a dict replaces the state dict
        (PyTorch's older, private form)."""
        return self._add_hook(self._state_dict_hooks, (hook, False), False)

    def register_load_state_dict_pre_hook(self, hook):
        """``hook(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
        error_msgs)`` runs before this module loads its tensors (from _load_from_state_dict); it may
        rename or convert keys of ``state_dict`` in place, or append to the lists."""
        return self._register_load_state_dict_pre_hook(hook, with_module=True)

    def _register_load_state_dict_pre_hook(self, hook, with_module=False):
        """As register_load_state_dict_pre_hook; without ``with_module`` the hook is called without the
        module as its first argument (PyTorch's private form)."""
        return self._add_hook(self._load_state_dict_pre_hooks, (hook, with_module), False)

    def register_load_state_dict_post_hook(self, hook):
        """``hook(module, incompatible_keys)`` runs once this module and its children are loaded;
        it may remove entries of ``incompatible_keys.missing_keys`` and ``.unexpected_keys`` in place
        (which is what load_state_dict's strict check then sees) and must return None."""
        return self._add_hook(self._load_state_dict_post_hooks, hook, False)

    def state_dict(self, destination=None, prefix="", keep_vars=False):
        """Parameters, persistent buffers and extra state by dotted name (the tensors sharing storage
        with the module's, detached unless keep_vars), in an OrderedDict whose ``_metadata`` maps each
        module's prefix (without the trailing dot) to ``{"version": its class's _version}``.

        Runs this module's state_dict pre-hooks, its ``_save_to_state_dict``, each child's
        ``state_dict`` and then the post-hooks, as PyTorch's."""
        if destination is None:
            destination = OrderedDict()
            destination._metadata = OrderedDict()
        local_metadata = {"version": self._version}
        if hasattr(destination, "_metadata"):
            destination._metadata[prefix[:-1]] = local_metadata
        for hook in self._state_dict_pre_hooks.values():
            hook(self, prefix, keep_vars)
        self._save_to_state_dict(destination, prefix, keep_vars)
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(destination=destination, prefix=prefix + name + ".", keep_vars=keep_vars)
        for hook, from_public_api in self._state_dict_hooks.values():
            result = hook(self, destination, prefix, local_metadata)
            if from_public_api and result is not None:
                raise RuntimeError("a state_dict post-hook must return None (change the state dict in place)")
            if result is not None:
                destination = result
        return destination

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        """Puts this module's own parameters, persistent buffers and extra state (not its children's)
        into ``destination`` under ``prefix``."""
        # An uninitialized tensor stays itself, so that loading the state dict leaves a lazy module lazy.
        for name, p in self._parameters.items():
            if p is not None:
                destination[prefix + name] = p if keep_vars or is_lazy(p) else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent:
                destination[prefix + name] = b if keep_vars or is_lazy(b) else b.detach()
        if type(self).get_extra_state is not Module.get_extra_state:
            destination[prefix + _EXTRA_STATE] = self.get_extra_state()

    def get_extra_state(self):
        """Override (with set_extra_state) to keep picklable non-tensor state in the state_dict,
        under the key ``<prefix>_extra_state``."""
        raise RuntimeError(f"{type(self).__name__}.get_extra_state() is not implemented: override it together "
                           "with set_extra_state() to put extra state in the state_dict")

    def set_extra_state(self, state):
        """Restores what get_extra_state returned, from load_state_dict."""
        raise RuntimeError(f"{type(self).__name__}.set_extra_state() is not implemented: the state_dict holds "
                           "extra state for it; override set_extra_state() to load it")

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Copies tensors from state_dict into this module's parameters and buffers (with ``assign``,
        makes the state dict's tensors the module's: a parameter stays a Parameter, with the module's
        requires_grad).

        As PyTorch's, each module, parents before children, gets its ``local_metadata`` (its entry of
        ``state_dict._metadata``, or ``{}``) and runs its load pre-hooks and ``_load_from_state_dict``,
        which copies its values (so an override's code after ``super()._load_from_state_dict`` sees
        them); its load post-hooks run once its children are loaded. Missing and unexpected keys then
        raise (strict=True) or are returned; a shape or type mismatch always raises. All problems are
        reported together, and, as in PyTorch, what checked out before stays loaded.
        """
        if not hasattr(state_dict, "items"):
            raise TypeError(f"expected a dict-like state_dict, got {type(state_dict).__name__}")
        metadata = getattr(state_dict, "_metadata", None)
        state_dict = OrderedDict(state_dict)
        if metadata is not None:
            state_dict._metadata = metadata
        missing, unexpected, errors = [], [], []
        self._load_tree(state_dict, "", metadata, assign, missing, unexpected, errors)
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected) + ". ")
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ". ")
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t" + "\n\t".join(errors))
        return _IncompatibleKeys(missing, unexpected)

    def _load_tree(self, state_dict, prefix, metadata, assign, missing, unexpected, errors):
        """Loads this module and its children (pre-order) from ``state_dict``, then runs its load
        post-hooks; a wrapper whose state_dict shows another module's keys overrides it to match."""
        local_metadata = {} if metadata is None else dict(metadata.get(prefix[:-1], {}))
        if assign:
            local_metadata["assign_to_params_buffers"] = True
        self._load_from_state_dict(state_dict, prefix, local_metadata, True, missing, unexpected, errors)
        for name, child in self._modules.items():
            if child is not None:
                child_prefix = prefix + name + "."
                child_state = {k: v for k, v in state_dict.items() if k.startswith(child_prefix)}
                child._load_tree(child_state, child_prefix, metadata, assign, missing, unexpected, errors)
        incompatible = _IncompatibleKeys(missing, unexpected)
        for hook in self._load_state_dict_post_hooks.values():
            if hook(self, incompatible) is not None:
                raise RuntimeError("a load_state_dict post-hook must return None (change incompatible_keys' "
                                   "lists in place)")

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        """Loads this module's own parameters, buffers and extra state (not its children's) from the keys
        of ``state_dict`` under ``prefix``, after running its load pre-hooks, each tensor as it checks
        out: problems are appended to ``error_msgs``, and with ``strict`` absent keys to
        ``missing_keys`` and, by PyTorch's rule, keys under ``prefix`` that are neither ``prefix +``
        the name of a tensor here nor ``prefix + child + "." + ...`` to ``unexpected_keys``.

        Override it to convert an old checkpoint's keys (``local_metadata.get("version")`` is the
        ``_version`` it was saved with) before calling this one."""
        for hook, with_module in self._load_state_dict_pre_hooks.values():
            args = (state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)
            hook(self, *args) if with_module else hook(*args)
        assign = local_metadata.get("assign_to_params_buffers", False)
        own = {name: p for name, p in self._parameters.items() if p is not None}
        own.update((name, b) for name, b in self._buffers.items() if b is not None and name not in self._non_persistent)
        for name, target in own.items():
            key = prefix + name
            if key not in state_dict:
                if strict:
                    missing_keys.append(key)
                continue
            value = state_dict[key]
            if is_lazy(target) and isinstance(value, Tensor) and not is_lazy(value):
                target.materialize(value.shape)
            # A value is of its target's kind: a tensor, or a DTensor where the module holds one
            # (FullyShardedDataParallel's sharded state dict), which copy_ redistributes.
            kind = Tensor if isinstance(target, Tensor) else type(target)
            if not isinstance(value, kind):
                error_msgs.append(f'While copying the parameter named "{key}", expected a '
                                  f'{"ddpc.Tensor" if kind is Tensor else kind.__name__} but got '
                                  f"{type(value).__name__}.")
            elif is_lazy(value) != is_lazy(target):
                error_msgs.append(f"{key} is uninitialized in the {'checkpoint' if is_lazy(value) else 'current model'}"
                                  " and not in the other: run a forward pass through the lazy module first.")
            elif not is_lazy(target) and target.ndim == 0 and tuple(value.shape) == (1,):
                # PyTorch's shim for checkpoints from before 0-d tensors (a num_batches_tracked of shape [1])
                self._load_value(error_msgs, assign, key, name, target, value.reshape(()))
            elif value.shape != target.shape:
                error_msgs.append(f"size mismatch for {key}: copying a param with shape {value.shape} from "
                                  f"checkpoint, the shape in current model is {target.shape}.")
            else:
                self._load_value(error_msgs, assign, key, name, target, value)
        extra_key = prefix + _EXTRA_STATE
        if type(self).set_extra_state is not Module.set_extra_state:
            if extra_key in state_dict:
                self.set_extra_state(state_dict[extra_key])
            elif strict:
                missing_keys.append(extra_key)
        elif strict and extra_key in state_dict:
            unexpected_keys.append(extra_key)
        if strict:
            for key in state_dict:
                if key.startswith(prefix) and key != extra_key:
                    parts = key[len(prefix):].split(".", 1)
                    if parts[0] not in (self._modules if len(parts) > 1 else own):
                        unexpected_keys.append(key)

    def _load_value(self, error_msgs, assign, key, name, target, value):
        """Copies (with ``assign``: assigns) ``value`` into ``target``; a failure goes to error_msgs, as PyTorch's."""
        try:
            with no_grad():
                if assign:
                    self._assign_state(name, target, value)
                elif not is_lazy(target):
                    target.copy_(value)
        except Exception as e:
            error_msgs.append(f'While copying the parameter named "{key}", whose dimensions in the model are '
                              f"{target.shape} and whose dimensions in the checkpoint are {value.shape}, an "
                              f"exception occurred : {e.args}.")

    def _assign_state(self, name, target, value):
        if isinstance(target, Parameter):
            if isinstance(value, Parameter):
                value.requires_grad_(target.requires_grad)
            else:
                value = Parameter(value, requires_grad=target.requires_grad)
        setattr(self, name, value)

    # ---- conversion ---------------------------------------------------------------------
    def _apply(self, fn, recurse=True):
        """Replaces every parameter's and buffer's storage (and each grad) by fn(tensor), this module's
        and (with recurse) its submodules'."""
        for m in self.modules() if recurse else (self,):
            for p in m._parameters.values():
                if p is None:
                    continue
                p._buf = fn(p.detach())._buf
                if p.grad is not None:
                    p.grad = fn(p.grad)
            for name, b in m._buffers.items():
                if is_lazy(b):  # converted in place, staying uninitialized
                    b._buf = fn(b.detach())._buf
                elif b is not None:
                    m._buffers[name] = fn(b)
        return self

    def to(self, *args, dtype=None, device=None, non_blocking=False, memory_format=preserve_format):
        """``to(device)``, ``to(dtype)`` (floating tensors only) or ``to(device, dtype)``, in place;
        ``memory_format`` lays nothing out differently (see ddpc.memory_format)."""
        checked_memory_format(memory_format, "Module.to")
        device, dtype = parse_to_args(args, device, dtype)
        dt = get_dtype(dtype) if dtype is not None else None
        if dt is not None and not dt.is_floating_point:
            raise TypeError(f"Module.to only accepts floating point dtypes, got {dt}")
        dev = ordinal(device) if device is not None else None

        def convert(t):
            out = t
            if dev is not None and out._buf.device != dev:
                out = out.to(device=device_of(dev), non_blocking=non_blocking)
            if dt is not None and out.dtype.is_floating_point and out.dtype is not dt:
                out = out.to(dtype=dt)
            return out

        return self._apply(convert)

    def to_empty(self, *, device=None, recurse=True):
        """Gives every parameter and buffer new, uninitialised storage of its shape and dtype on
        ``device`` (default: where it is), in place. ddpc has no "meta" device, so where PyTorch uses
        this to allocate a module built there, here it only drops the values (an uninitialized
        parameter or buffer of a lazy module stays uninitialized)."""
        return self._apply(lambda t: empty_like(t, device=device), recurse)

    def cuda(self, device=None):
        return self.to(device="cuda" if device is None else (f"cuda:{device}" if isinstance(device, int) else device))

    def cpu(self):
        return self.to(device="cpu")

    def share_memory(self):
        """Moves every parameter, buffer and existing grad into shared memory,
        in place (see Tensor.share_memory_). Grads made later, as backward
        makes them after ``zero_grad()``, are each process's own."""
        return self._apply(lambda t: t.share_memory_())

    def float(self):
        return self.to(dtype="float32")

    def double(self):
        return self.to(dtype="float64")

    def half(self):
        return self.to(dtype="float16")

    def bfloat16(self):
        return self.to(dtype="bfloat16")

    def type(self, dst_type):
        """Casts every parameter and buffer, integer ones included, to ``dst_type``."""
        dt = get_dtype(dst_type)
        return self._apply(lambda t: t if t.dtype is dt else t.to(dtype=dt))

    def compile(self, *args, **kwargs):
        """As PyTorch's Module.compile, which compiles the module's calls in place: ddpc runs
        eagerly, so the arguments are checked as ``ddpc.compile`` checks them and calls stay as they are."""
        from ..backends import compile as compile_

        compile_(self, *args, **kwargs)

    def train(self, mode=True):
        """Sets this module's ``training`` and calls each child's ``train(mode)``, as PyTorch's (so a
        child that overrides train, say to keep a frozen norm in eval mode, has its say)."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for m in self.children():
            m.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        zero_grads(self.parameters(), set_to_none)

    # ---- printing ------------------------------------------------------------------------
    def _get_name(self):
        """The name the repr starts with: the class's, unless a subclass overrides this."""
        return type(self).__name__

    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = []
        extra = self.extra_repr()
        if extra:
            lines = extra.split("\n")
        for name, m in self._modules.items():
            lines.append(f"({name}): {_addindent(repr(m), 2)}")
        if not lines:
            return f"{self._get_name()}()"
        if len(lines) == 1 and not self._modules:
            return f"{self._get_name()}({lines[0]})"
        return f"{self._get_name()}(\n  " + "\n  ".join(lines) + "\n)"

    def __dir__(self):
        """As PyTorch's: the class's and the instance's attributes with the parameters, submodules and
        buffers, less the names that start with a digit (a Sequential's "0")."""
        keys = [*dir(type(self)), *self.__dict__, *self._parameters, *self._modules, *self._buffers]
        return sorted(key for key in keys if not key[0].isdigit())


def _addindent(s_, numSpaces):
    """``s_`` with its non-blank lines after the first indented by ``numSpaces``:
    torch's helper for nested reprs, which custom ``__repr__`` methods import."""
    first, *rest = s_.split("\n")
    return "\n".join([first] + [" " * numSpaces + line if line.strip() else "" for line in rest])


# ---- layers ------------------------------------------------------------------------------

class Identity(Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Linear(Module):
    """y = x @ weight.T + bias, with PyTorch's default initialisation
    (weight and bias uniform on +-1/sqrt(in_features), drawn from ddpc's generator)."""

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.weight = Parameter(empty(self.out_features, self.in_features, dtype=dtype, device=device))
        if bias:
            self.bias = Parameter(empty(self.out_features, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class NonDynamicallyQuantizableLinear(Linear):
    """MultiheadAttention's out_proj: a Linear under PyTorch's class name, so
    that models print as PyTorch's (where the name keeps dynamic quantisation
    off the layer)."""


class Bilinear(Module):
    """y = x1 @ weight[k] @ x2 + bias[k] for each of ``out_features`` k, with
    PyTorch's initialisation (weight and bias uniform on +-1/sqrt(in1_features))."""

    def __init__(self, in1_features, in2_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.in1_features, self.in2_features = int(in1_features), int(in2_features)
        self.out_features = int(out_features)
        self.weight = Parameter(empty(self.out_features, self.in1_features, self.in2_features, dtype=dtype,
                                      device=device))
        if bias:
            self.bias = Parameter(empty(self.out_features, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        bound = 1 / math.sqrt(self.in1_features) if self.in1_features > 0 else 0
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1, input2):
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self):
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


__all__ += ["Bilinear"]


# ---- convolution and pooling (compute in _conv.py) -----------------------------------------

__all__ += ["Conv1d", "Conv2d", "Conv3d", "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d",
            "AvgPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d",
            "AdaptiveMaxPool2d", "AdaptiveMaxPool3d", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d"]


class _ConvNd(Module):
    """Convolution over the last ``_dims`` dims, as torch.nn.Conv1d/2d/3d:
    weight (out_channels, in_channels / groups, *kernel_size) and bias
    (out_channels) initialised as PyTorch does (kaiming_uniform_ with
    a=sqrt(5), bias uniform on +-1/sqrt(fan_in)). ``padding_mode`` 'reflect',
    'replicate' or 'circular' pads the input by that rule before a
    convolution without padding."""

    _dims = 0

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True,
                 padding_mode="zeros", device=None, dtype=None):
        super().__init__()
        n = self._dims
        if not isinstance(groups, int) or groups <= 0:
            raise ValueError(f"groups must be a positive integer, got {groups!r}")
        if in_channels % groups:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups:
            raise ValueError("out_channels must be divisible by groups")
        if padding_mode not in _conv.PADDING_MODES:
            raise ValueError(f"padding_mode must be one of {_conv.PADDING_MODES}, but got "
                             f"padding_mode={padding_mode!r}")
        self.in_channels, self.out_channels, self.groups = int(in_channels), int(out_channels), groups
        self.kernel_size = _conv.as_tuple(kernel_size, n, "kernel_size")
        self.stride = _conv.as_tuple(stride, n, "stride")
        self.dilation = _conv.as_tuple(dilation, n, "dilation")
        self.padding = padding if isinstance(padding, str) else _conv.as_tuple(padding, n, "padding")
        self._pads = _conv.padding_pairs(self.padding, self.kernel_size, self.stride, self.dilation)
        self.padding_mode = padding_mode
        self.transposed, self.output_padding = False, (0,) * n
        # PyTorch's F.pad argument for the padding modes, which tools read: a list for 'same'/'valid', else a tuple.
        reversed_pads = [p for pair in reversed(self._pads) for p in pair]
        self._reversed_padding_repeated_twice = reversed_pads if isinstance(padding, str) else tuple(reversed_pads)
        self.weight = Parameter(empty(self.out_channels, self.in_channels // groups, *self.kernel_size, dtype=dtype,
                                      device=device))
        if bias:
            self.bias = Parameter(empty(self.out_channels, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        self._reset_bias()

    def _reset_bias(self):
        if self.bias is not None:
            fan_in = self.weight.shape[1] * math.prod(self.kernel_size)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        conv = (F.conv1d, F.conv2d, F.conv3d)[self._dims - 1]
        if self.padding_mode == "zeros":
            return conv(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)
        padded = _conv.pad_by_mode(input, self._pads, self.padding_mode)
        return conv(padded, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)

    def extra_repr(self):
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * self._dims:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self._dims:
            s += f", dilation={self.dilation}"
        if getattr(self, "output_padding", (0,) * self._dims) != (0,) * self._dims:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class Conv1d(_ConvNd):
    """Over (N, C, L) or (C, L) inputs."""

    _dims = 1


class Conv2d(_ConvNd):
    """Over (N, C, H, W) or (C, H, W) inputs."""

    _dims = 2


class Conv3d(_ConvNd):
    """Over (N, C, D, H, W) or (C, D, H, W) inputs."""

    _dims = 3


class _ConvTransposeNd(_ConvNd):
    """Transposed convolution, as torch.nn.ConvTranspose1d/2d/3d: weight
    (in_channels, out_channels / groups, *kernel_size), initialised as the
    convolutions' (fan_in from weight dim 1, as PyTorch computes it);
    ``output_size`` in forward picks the output_padding that reaches it."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True, dilation=1, padding_mode="zeros", device=None, dtype=None):
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}')
        if isinstance(padding, str):
            raise ValueError(f"{type(self).__name__}: padding must be an int or a tuple, got {padding!r}")
        # _ConvNd shapes the weight (out_channels, in_channels / groups, ...): swapped here, so it is
        # (in_channels, out_channels / groups, ...), the bias still one per output channel.
        super().__init__(out_channels, in_channels, kernel_size, stride, padding, dilation, groups, False,
                         padding_mode, device, dtype)
        self.in_channels, self.out_channels, self.transposed = int(in_channels), int(out_channels), True
        self.output_padding = _conv.as_tuple(output_padding, self._dims, "output_padding")
        if bias:  # the weight is drawn already: only the bias now, as after PyTorch's one reset
            self.bias = Parameter(empty(self.out_channels, dtype=dtype, device=device))
            self._reset_bias()

    def _output_padding(self, input, output_size):
        if output_size is None:
            return self.output_padding
        n = self._dims
        size = tuple(output_size)[-n:]
        if len(size) != n:
            raise ValueError(f"{type(self).__name__}: output_size must have {n} or {n + 2} elements, got "
                             f"{len(tuple(output_size))}")
        pads = []
        for d in range(n):
            smallest = ((input.shape[-n + d] - 1) * self.stride[d] - 2 * self.padding[d]
                        + self.dilation[d] * (self.kernel_size[d] - 1) + 1)
            if not smallest <= size[d] < smallest + self.stride[d]:
                raise ValueError(f"requested an output size of {size}, but valid sizes range from {smallest} to "
                                 f"{smallest + self.stride[d] - 1} (for an input of {tuple(input.shape[-n:])})")
            pads.append(size[d] - smallest)
        return tuple(pads)

    def forward(self, input, output_size=None):
        conv = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[self._dims - 1]
        return conv(input, self.weight, self.bias, self.stride, self.padding, self._output_padding(input, output_size),
                    self.groups, self.dilation)


class ConvTranspose1d(_ConvTransposeNd):
    """Over (N, C, L) or (C, L) inputs."""

    _dims = 1


class ConvTranspose2d(_ConvTransposeNd):
    """Over (N, C, H, W) or (C, H, W) inputs."""

    _dims = 2


class ConvTranspose3d(_ConvTransposeNd):
    """Over (N, C, D, H, W) or (C, D, H, W) inputs."""

    _dims = 3


class Unfold(Module):
    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size, self.dilation, self.padding, self.stride = kernel_size, dilation, padding, stride

    def forward(self, input):
        return F.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, dilation={self.dilation}, padding={self.padding}, "
                f"stride={self.stride}")


class Fold(Unfold):
    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__(kernel_size, dilation, padding, stride)
        self.output_size = output_size

    def forward(self, input):
        return F.fold(input, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self):
        return f"output_size={self.output_size}, " + super().extra_repr()


class _MaxPoolNd(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool1d(_MaxPoolNd):
    def forward(self, input):
        return F.max_pool1d(input, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                            self.return_indices)


class MaxPool2d(_MaxPoolNd):
    def forward(self, input):
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                            self.return_indices)


class MaxPool3d(_MaxPoolNd):
    def forward(self, input):
        return F.max_pool3d(input, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                            self.return_indices)


class _FractionalMaxPoolNd(Module):
    """Fractional max pooling over the last ``_dims`` dims (see F.fractional_max_pool2d)."""

    _dims = 0

    def __init__(self, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                 _random_samples=None):
        super().__init__()
        self.kernel_size, self.output_size, self.output_ratio = kernel_size, output_size, output_ratio
        self.return_indices = return_indices
        self.register_buffer("_random_samples", _random_samples)
        if output_size is None and output_ratio is None:
            raise ValueError("FractionalMaxPool requires specifying either an output size, or a pooling ratio")
        if output_size is not None and output_ratio is not None:
            raise ValueError("only one of output_size and output_ratio may be specified")
        if output_ratio is not None:
            ratios = (output_ratio,) * self._dims if not isinstance(output_ratio, (tuple, list)) else output_ratio
            if not all(0 < r < 1 for r in ratios):
                raise ValueError(f"output_ratio must be between 0 and 1 (got {output_ratio})")

    def forward(self, input):
        pool = F.fractional_max_pool2d if self._dims == 2 else F.fractional_max_pool3d
        return pool(input, self.kernel_size, self.output_size, self.output_ratio, self.return_indices,
                    _random_samples=self._random_samples)


class FractionalMaxPool2d(_FractionalMaxPoolNd):
    _dims = 2


class FractionalMaxPool3d(_FractionalMaxPoolNd):
    _dims = 3


class _MaxUnpoolNd(Module):
    """The inverse of a max pool over the last ``_dims`` dims: forward(input,
    indices, output_size=None) places each value at its index, zeros elsewhere."""

    _dims = 0

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        n = self._dims
        self.kernel_size = _conv.as_tuple(kernel_size, n, "kernel_size")
        self.stride = _conv.as_tuple(stride if stride is not None else kernel_size, n, "stride")
        self.padding = _conv.as_tuple(padding, n, "padding")

    def forward(self, input, indices, output_size=None):
        unpool = (F.max_unpool1d, F.max_unpool2d, F.max_unpool3d)[self._dims - 1]
        return unpool(input, indices, self.kernel_size, self.stride, self.padding, output_size)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpoolNd):
    _dims = 1


class MaxUnpool2d(_MaxUnpoolNd):
    _dims = 2


class MaxUnpool3d(_MaxUnpoolNd):
    _dims = 3


class _AvgPoolNd(Module):
    """What the average pools share (torch's base class of AvgPool1d/2d/3d, for isinstance checks)."""

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool1d(_AvgPoolNd):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
        super().__init__()
        self.kernel_size = _conv.as_tuple(kernel_size, 1, "kernel_size")
        self.stride = _conv.as_tuple(stride if stride is not None else kernel_size, 1, "stride")
        self.padding = _conv.as_tuple(padding, 1, "padding")
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, input):
        return F.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad)


class AvgPool2d(_AvgPoolNd):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding, self.ceil_mode, self.count_include_pad = padding, ceil_mode, count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input):
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)


class AvgPool3d(AvgPool2d):
    def forward(self, input):
        return F.avg_pool3d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)


class _LPPoolNd(Module):
    """The p-norm (p = ``norm_type``) of each window (F.lp_pool1d/2d/3d)."""

    _dims = 0

    def __init__(self, norm_type, kernel_size, stride=None, ceil_mode=False):
        super().__init__()
        self.norm_type, self.kernel_size, self.stride, self.ceil_mode = norm_type, kernel_size, stride, ceil_mode

    def forward(self, input):
        lp_pool = (F.lp_pool1d, F.lp_pool2d, F.lp_pool3d)[self._dims - 1]
        return lp_pool(input, float(self.norm_type), self.kernel_size, self.stride, self.ceil_mode)

    def extra_repr(self):
        return (f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"ceil_mode={self.ceil_mode}")


class LPPool1d(_LPPoolNd):
    _dims = 1


class LPPool2d(_LPPoolNd):
    _dims = 2


class LPPool3d(_LPPoolNd):
    _dims = 3


class _AdaptivePoolNd(Module):
    """Pools each volume of the last ``_dims`` dims into ``output_size`` (an
    int, or ``_dims`` ints where None keeps that input size) over PyTorch's
    adaptive windows."""

    _dims = 0

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def extra_repr(self):
        return f"output_size={self.output_size}"


class _AdaptiveAvgPoolNd(_AdaptivePoolNd):
    """torch's base class of the adaptive average pools, for isinstance checks."""


class AdaptiveAvgPool1d(_AdaptiveAvgPoolNd):
    def forward(self, input):
        return F.adaptive_avg_pool1d(input, self.output_size)


class AdaptiveAvgPool2d(_AdaptiveAvgPoolNd):
    def forward(self, input):
        return F.adaptive_avg_pool2d(input, self.output_size)


class AdaptiveAvgPool3d(_AdaptiveAvgPoolNd):
    def forward(self, input):
        return F.adaptive_avg_pool3d(input, self.output_size)


class _AdaptiveMaxPoolNd(_AdaptivePoolNd):
    """With ``return_indices``, the positions of the maxima too, flattened in their volumes as PyTorch numbers them."""

    def __init__(self, output_size, return_indices=False):
        super().__init__(output_size)
        self.return_indices = return_indices


class AdaptiveMaxPool1d(_AdaptiveMaxPoolNd):
    def forward(self, input):
        return F.adaptive_max_pool1d(input, self.output_size, self.return_indices)


class AdaptiveMaxPool2d(_AdaptiveMaxPoolNd):
    def forward(self, input):
        return F.adaptive_max_pool2d(input, self.output_size, self.return_indices)


class AdaptiveMaxPool3d(_AdaptiveMaxPoolNd):
    def forward(self, input):
        return F.adaptive_max_pool3d(input, self.output_size, self.return_indices)


def _given_weight(module, weight, freeze):
    """The weight given to an embedding's constructor (``_weight``), checked against its shape."""
    if tuple(weight.shape) != (module.num_embeddings, module.embedding_dim):
        raise ValueError(f"Shape of weight {tuple(weight.shape)} does not match num_embeddings and embedding_dim "
                         f"({module.num_embeddings}, {module.embedding_dim})")
    return Parameter(weight, requires_grad=not freeze)


def _from_pretrained(cls, embeddings, freeze, **kwargs):
    """cls built around ``embeddings`` (a 2-d tensor) as its weight."""
    if embeddings.ndim != 2:
        raise ValueError(f"from_pretrained: embeddings must be 2-d, got shape {tuple(embeddings.shape)}")
    return cls(embeddings.shape[0], embeddings.shape[1], _weight=embeddings, _freeze=freeze, **kwargs)


class Embedding(Module):
    """A table of ``num_embeddings`` rows of ``embedding_dim``, looked up by
    int64 indices; rows start normal(0, 1), the ``padding_idx`` row zero (and
    it gets no gradient); with ``max_norm`` the rows looked up are renormalised
    in place to at most that ``norm_type``-norm; with ``scale_grad_by_freq``
    each row's gradient is divided by how often the batch looks it up; with
    ``sparse`` the weight's gradient is a sparse COO tensor (see F.embedding)."""

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None, norm_type=2.0,
                 scale_grad_by_freq=False, sparse=False, _weight=None, _freeze=False, device=None, dtype=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = int(num_embeddings), int(embedding_dim)
        self.max_norm, self.norm_type, self.scale_grad_by_freq = max_norm, norm_type, bool(scale_grad_by_freq)
        self.sparse = bool(sparse)
        if padding_idx is not None:
            if not -self.num_embeddings <= padding_idx < self.num_embeddings:
                raise ValueError(f"padding_idx {padding_idx} is out of range for {self.num_embeddings} rows")
            padding_idx %= self.num_embeddings
        self.padding_idx = padding_idx
        if _weight is not None:
            self.weight = _given_weight(self, _weight, _freeze)
            return
        self.weight = Parameter(empty(self.num_embeddings, self.embedding_dim, dtype=dtype, device=device),
                                requires_grad=not _freeze)
        self.reset_parameters()

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, padding_idx=None, max_norm=None, norm_type=2.0,
                        scale_grad_by_freq=False, sparse=False):
        """An Embedding whose weight is ``embeddings`` (rows x dim), frozen unless ``freeze=False``."""
        return _from_pretrained(cls, embeddings, freeze, padding_idx=padding_idx, max_norm=max_norm,
                                norm_type=norm_type, scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)

    def reset_parameters(self):
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with no_grad():
                self.weight[self.padding_idx] = 0.0

    def forward(self, input):
        return F.embedding(input, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                           self.scale_grad_by_freq, self.sparse)

    def extra_repr(self):
        pad = f", padding_idx={self.padding_idx}" if self.padding_idx is not None else ""
        norm = f", max_norm={self.max_norm}" if self.max_norm is not None else ""
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}{norm}"


class EmbeddingBag(Module):
    """A table of ``num_embeddings`` rows of ``embedding_dim`` whose forward
    pass sums, averages or maxes bags of rows (see F.embedding_bag); rows
    start normal(0, 1), the ``padding_idx`` row zero; with ``sparse`` the
    weight's gradient is a sparse COO tensor (see F.embedding_bag)."""

    def __init__(self, num_embeddings, embedding_dim, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
                 mode="mean", sparse=False, _weight=None, include_last_offset=False, padding_idx=None, device=None,
                 dtype=None, _freeze=False):
        super().__init__()
        if mode not in _embedding_bag.MODES:
            raise ValueError("mode has to be one of sum, mean or max")
        if sparse and mode == "max":
            raise ValueError("max mode does not support sparse weights")
        self.num_embeddings, self.embedding_dim = int(num_embeddings), int(embedding_dim)
        if padding_idx is not None:
            if not -self.num_embeddings <= padding_idx < self.num_embeddings:
                raise ValueError("padding_idx must be within num_embeddings")
            padding_idx %= self.num_embeddings
        self.max_norm, self.norm_type, self.scale_grad_by_freq = max_norm, norm_type, scale_grad_by_freq
        self.sparse = bool(sparse)
        self.mode, self.include_last_offset, self.padding_idx = mode, include_last_offset, padding_idx
        if _weight is None:
            self.weight = Parameter(empty(self.num_embeddings, self.embedding_dim, dtype=dtype, device=device),
                                    requires_grad=not _freeze)
            self.reset_parameters()
        else:
            self.weight = _given_weight(self, _weight, _freeze)

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
                        mode="mean", sparse=False, include_last_offset=False, padding_idx=None):
        """An EmbeddingBag whose weight is ``embeddings`` (rows x dim), frozen unless ``freeze=False``."""
        return _from_pretrained(cls, embeddings, freeze, max_norm=max_norm, norm_type=norm_type,
                                scale_grad_by_freq=scale_grad_by_freq, mode=mode, sparse=sparse,
                                include_last_offset=include_last_offset, padding_idx=padding_idx)

    def reset_parameters(self):
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with no_grad():
                self.weight[self.padding_idx] = 0.0

    def forward(self, input, offsets=None, per_sample_weights=None):
        return F.embedding_bag(input, self.weight, offsets, self.max_norm, self.norm_type, self.scale_grad_by_freq,
                               self.mode, self.sparse, per_sample_weights=per_sample_weights,
                               include_last_offset=self.include_last_offset, padding_idx=self.padding_idx)

    def extra_repr(self):
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        s += f", max_norm={self.max_norm}" if self.max_norm is not None else ""
        s += f", norm_type={self.norm_type}" if self.norm_type != 2 else ""
        s += f", scale_grad_by_freq={self.scale_grad_by_freq}" if self.scale_grad_by_freq else ""
        s += f", mode={self.mode!r}"
        return s + (f", padding_idx={self.padding_idx}" if self.padding_idx is not None else "")


class LayerNorm(Module):
    """Normalises over the last dims, ``normalized_shape``, then scales and
    shifts by a learned weight (ones) and bias (zeros) when ``elementwise_affine``."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None, dtype=None):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape, self.eps, self.elementwise_affine = shape, float(eps), bool(elementwise_affine)
        if self.elementwise_affine:
            self.weight = Parameter(full(shape, 1.0, dtype=dtype, device=device))
            if bias:
                self.bias = Parameter(full(shape, 0.0, dtype=dtype, device=device))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")


def _channel_parameters(module, channels, affine, bias, dtype, device):
    """A norm layer's per-channel weight (ones) and, with ``bias``, bias (zeros) when ``affine``; else None."""
    module.register_parameter("weight", Parameter(full((channels,), 1.0, dtype=dtype, device=device))
                              if affine else None)
    module.register_parameter("bias", Parameter(full((channels,), 0.0, dtype=dtype, device=device))
                              if affine and bias else None)


def _running_statistics(module, channels, track, dtype, device):
    """The running mean (zeros), variance (ones) and batch count buffers, or None for each."""
    for name, value, kind in (("running_mean", 0.0, dtype), ("running_var", 1.0, dtype),
                              ("num_batches_tracked", 0, "int64")):
        module.register_buffer(name, full((channels,) if name != "num_batches_tracked" else (), value, dtype=kind,
                                          device=device) if track else None)


class _NormBase(Module):
    """What the batch and instance norms share with PyTorch's _NormBase: their
    state-dict version (2 since num_batches_tracked) and its rule for
    checkpoints of an older version or none: a num_batches_tracked they
    lack keeps the module's own, where a version-2 one must have it."""

    _version = 2

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        version = local_metadata.get("version", None)
        key = prefix + "num_batches_tracked"
        if (version is None or version < 2) and self.track_running_stats and key not in state_dict:
            state_dict[key] = (self.num_batches_tracked if self.num_batches_tracked is not None
                               else full((), 0, dtype="int64"))
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)


class _BatchNorm(_NormBase):
    """Batch normalisation over dim 1 (the channels) of ``_dims``-d inputs, as
    torch.nn.BatchNorm*d: running statistics (``running_mean``,
    ``running_var``, ``num_batches_tracked``) are buffers, so DDP broadcasts
    them from rank 0 with forward_sync_buffers; ``momentum=None`` keeps a
    cumulative average."""

    _dims = ()

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, device=None,
                 dtype=None, *, bias=True):
        super().__init__()
        self.num_features, self.eps, self.momentum = int(num_features), float(eps), momentum
        self.affine, self.track_running_stats = bool(affine), bool(track_running_stats)
        _channel_parameters(self, num_features, affine, bias, dtype, device)
        _running_statistics(self, num_features, track_running_stats, dtype, device)

    def reset_running_stats(self):
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.fill_(1.0)
            self.num_batches_tracked.zero_()

    def _check_input(self, input):
        if input.ndim not in self._dims:
            raise ValueError(f"{type(self).__name__}: expected a {' or '.join(map(str, self._dims))}-d input, got "
                             f"{input.ndim}-d of shape {input.shape}")
        if input.shape[1] != self.num_features:
            raise ArgumentError(f"{type(self).__name__}: expected {self.num_features} channels in dim 1, got "
                                f"{input.shape[1]} (shape {input.shape})")

    def _statistics(self):
        """(use batch statistics, momentum, running_mean, running_var) for this
        call, counting the batch, by PyTorch's rule: batch statistics in
        training and in eval when both running buffers are None (test-time
        adaptation); the buffers are passed outside training (to normalise
        with) and in training only while ``track_running_stats`` (to update),
        so flipping that flag after construction behaves as in PyTorch."""
        use_batch = self.training or (self.running_mean is None and self.running_var is None)
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            with no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:
                momentum = 1.0 / int(self.num_batches_tracked.item())
        track = not self.training or self.track_running_stats
        return use_batch, momentum, self.running_mean if track else None, self.running_var if track else None

    def forward(self, input):
        self._check_input(input)
        use_batch, momentum, rm, rv = self._statistics()
        return F.batch_norm(input, rm, rv, self.weight, self.bias, use_batch, momentum, self.eps)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Over (N, C) or (N, C, L) inputs."""

    _dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Over (N, C, H, W) inputs."""

    _dims = (4,)


class BatchNorm3d(_BatchNorm):
    """Over (N, C, D, H, W) inputs."""

    _dims = (5,)


class SyncBatchNorm(_BatchNorm):
    """Batch normalisation whose batch statistics are taken over every rank of
    ``process_group`` (the default group) in training, as
    torch.nn.SyncBatchNorm: two all-reduces per forward and two in backward,
    made in the same order on every rank. Without an initialised group of more
    than one rank, or outside training, it is a BatchNorm. Any input of at
    least 2 dims. ``convert_sync_batchnorm`` swaps the BatchNorm layers of a
    model for it, keeping their parameters and statistics."""

    _dims = tuple(range(2, 9))

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 process_group=None, device=None, dtype=None, *, bias=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias)
        self.process_group = process_group

    def forward(self, input):
        from .. import distributed as dist

        self._check_input(input)
        if self.training and self.track_running_stats and self.num_batches_tracked is None:
            raise AssertionError("num_batches_tracked must not be None")  # PyTorch's SyncBatchNorm's check
        use_batch, momentum, rm, rv = self._statistics()
        group = None
        if use_batch and self.training and dist.is_initialized() and dist.get_world_size(self.process_group) > 1:
            group = self.process_group if self.process_group is not None else dist.group.WORLD
        return F._batch_norm(input, rm, rv, self.weight, self.bias, use_batch, momentum, self.eps, group)

    @classmethod
    def convert_sync_batchnorm(cls, module, process_group=None):
        """``module`` with each BatchNorm*d in it (itself included) replaced by a
        SyncBatchNorm holding the same parameters and buffers."""
        out = module
        if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
            out = cls(module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats,
                      process_group, bias=getattr(module, "bias", None) is not None)
            for name in ("weight", "bias"):
                if module.affine:
                    setattr(out, name, getattr(module, name))
            if module.track_running_stats:
                for name in ("running_mean", "running_var", "num_batches_tracked"):
                    out.register_buffer(name, getattr(module, name))
            out.train(module.training)
        for name, child in list(module._modules.items()):
            if child is not None:
                out._modules[name] = cls.convert_sync_batchnorm(child, process_group)
        return out


def _inplace_repr(inplace, first=False):
    """What extra_repr adds for an ``inplace`` flag, as PyTorch's modules show it."""
    return ("inplace=True" if first else ", inplace=True") if inplace else ""


class ReLU(Module):
    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return F.relu(input, inplace=self.inplace)

    def extra_repr(self):
        return _inplace_repr(self.inplace, first=True)


class GELU(Module):
    def __init__(self, approximate="none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self):
        return f"approximate='{self.approximate}'"


class Tanh(Module):
    def forward(self, input):
        return F.tanh(input)


class Sigmoid(Module):
    def forward(self, input):
        return F.sigmoid(input)


class LeakyReLU(Module):
    def __init__(self, negative_slope=0.01, inplace=False):
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, input):
        return F.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self):
        return f"negative_slope={self.negative_slope}{_inplace_repr(self.inplace)}"


class ELU(Module):
    def __init__(self, alpha=1.0, inplace=False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, input):
        return F.elu(input, self.alpha, self.inplace)

    def extra_repr(self):
        return f"alpha={self.alpha}{_inplace_repr(self.inplace)}"


class SiLU(Module):
    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return F.silu(input, inplace=self.inplace)

    def extra_repr(self):
        return _inplace_repr(self.inplace, first=True)


class Softplus(Module):
    def __init__(self, beta=1.0, threshold=20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, input):
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self):
        return f"beta={self.beta}, threshold={self.threshold}"


class Mish(Module):
    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return F.mish(input, inplace=self.inplace)

    def extra_repr(self):
        return _inplace_repr(self.inplace, first=True)


class Hardtanh(Module):
    def __init__(self, min_val=-1.0, max_val=1.0, inplace=False):
        super().__init__()
        if min_val > max_val:
            raise ValueError(f"Hardtanh: min_val ({min_val}) cannot be greater than max_val ({max_val})")
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace

    def forward(self, input):
        return F.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self):
        return f"min_val={self.min_val}, max_val={self.max_val}{_inplace_repr(self.inplace)}"


class ReLU6(Hardtanh):
    def __init__(self, inplace=False):
        super().__init__(0.0, 6.0, inplace)

    def extra_repr(self):
        return _inplace_repr(self.inplace, first=True)


class Hardswish(Module):
    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return F.hardswish(input, self.inplace)


class Hardsigmoid(Module):
    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return F.hardsigmoid(input, self.inplace)


class SELU(Module):
    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return F.selu(input, self.inplace)


class CELU(Module):
    def __init__(self, alpha=1.0, inplace=False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, input):
        return F.celu(input, self.alpha, self.inplace)

    def extra_repr(self):
        return f"alpha={self.alpha}"


class RReLU(Module):
    """Leaky ReLU with a random negative slope in [lower, upper] while training, their mean in eval mode."""

    def __init__(self, lower=1.0 / 8, upper=1.0 / 3, inplace=False):
        super().__init__()
        self.lower, self.upper, self.inplace = lower, upper, inplace

    def forward(self, input):
        return F.rrelu(input, self.lower, self.upper, self.training, self.inplace)

    def extra_repr(self):
        return f"lower={self.lower}, upper={self.upper}"


class LogSigmoid(Module):
    def forward(self, input):
        return F.logsigmoid(input)


class Softsign(Module):
    def forward(self, input):
        return F.softsign(input)


class Tanhshrink(Module):
    def forward(self, input):
        return F.tanhshrink(input)


class Softshrink(Module):
    def __init__(self, lambd=0.5):
        super().__init__()
        self.lambd = lambd

    def forward(self, input):
        return F.softshrink(input, self.lambd)

    def extra_repr(self):
        return str(self.lambd)


class Hardshrink(Softshrink):
    def forward(self, input):
        return F.hardshrink(input, self.lambd)


class Softmax2d(Module):
    """Softmax over the channels (dim -3) of (N, C, H, W) or (C, H, W) input."""

    def forward(self, input):
        if input.ndim not in (3, 4):
            raise ValueError(f"Softmax2d: expected a 3-d or 4-d input, got shape {input.shape}")
        return F.softmax(input, -3)


class PixelShuffle(Module):
    def __init__(self, upscale_factor):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input):
        return F.pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self):
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    def __init__(self, downscale_factor):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input):
        return F.pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self):
        return f"downscale_factor={self.downscale_factor}"


class ChannelShuffle(Module):
    def __init__(self, groups):
        super().__init__()
        self.groups = groups

    def forward(self, input):
        return F.channel_shuffle(input, self.groups)

    def extra_repr(self):
        return f"groups={self.groups}"


class Softmax(Module):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.softmax(input, self.dim, _stacklevel=5)

    def extra_repr(self):
        return f"dim={self.dim}"


class LogSoftmax(Module):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.log_softmax(input, self.dim, _stacklevel=5)

    def extra_repr(self):
        return f"dim={self.dim}"


class _DropoutNd(Module):
    """What the dropouts share: the probability ``p`` and ``inplace`` (torch's
    base class, which custom dropouts subclass)."""

    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if not 0 <= p <= 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


class Dropout(_DropoutNd):
    """Zeroes each element with probability p in training mode (mask from ddpc's generator)."""

    def forward(self, input):
        return F.dropout(input, self.p, self.training, self.inplace)


class AlphaDropout(Dropout):
    """Dropout that keeps a SELU network's self-normalisation (F.alpha_dropout)."""

    def forward(self, input):
        return F.alpha_dropout(input, self.p, self.training, self.inplace)


class FeatureAlphaDropout(Dropout):
    """Alpha dropout of whole channels (F.feature_alpha_dropout): dims 0 and 1
    of the input are taken as (N, C)."""

    def forward(self, input):
        return F.feature_alpha_dropout(input, self.p, self.training, self.inplace)


class Flatten(Module):
    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input):
        return F.flatten(input, self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


# ---- containers ---------------------------------------------------------------------------

class _Numbered:
    """What Sequential and ModuleList share: modules under "0", "1", ...,
    numbered again after a deletion, as PyTorch's."""

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def __delitem__(self, idx):
        keys = list(self._modules)
        for key in (keys[idx] if isinstance(idx, slice) else [self._key(idx)]):
            delattr(self, key)
        modules = list(self._modules.values())
        self._modules.clear()
        self._modules.update((str(i), m) for i, m in enumerate(modules))

    def pop(self, key):
        module = self[key]
        del self[key]
        return module


class Sequential(_Numbered, Module):
    """Modules applied in order; built from modules or one OrderedDict of them."""

    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for name, m in args[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(args):
                self.add_module(str(i), m)

    def forward(self, input):
        for m in self._modules.values():
            input = m(input)
        return input

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return self.__class__(OrderedDict(list(self._modules.items())[idx]))
        n = len(self)
        if not -n <= idx < n:
            raise IndexError(f"index {idx} is out of range for a Sequential of {n} modules")
        return next(itertools.islice(self._modules.values(), idx % n, None))

    def __setitem__(self, idx, module):
        setattr(self, self._key(idx), module)

    def _key(self, idx):
        n = len(self)
        idx = operator.index(idx)
        if not -n <= idx < n:
            raise IndexError(f"index {idx} is out of range for a Sequential of {n} modules")
        return next(itertools.islice(self._modules, idx % n, None))

    def insert(self, index, module):
        """Puts ``module`` at ``index``, the modules from there on moving up one, as PyTorch's."""
        if not isinstance(module, Module):
            raise AssertionError(f"module should be of type: {Module}")
        n = len(self)
        if not -n <= index <= n:
            raise IndexError(f"Index out of range: {index}")
        if index < 0:
            index += n
        for i in range(n, index, -1):
            self._modules[str(i)] = self._modules[str(i - 1)]
        self._modules[str(index)] = module
        return self

    def extend(self, sequential):
        for m in sequential:
            self.append(m)
        return self

    def __add__(self, other):
        if not isinstance(other, Sequential):
            raise ValueError(f"add operator supports only objects of Sequential class, but {type(other)} is given.")
        return Sequential().extend(self).extend(other)

    def __iadd__(self, other):
        if not isinstance(other, Sequential):
            raise ValueError(f"add operator supports only objects of Sequential class, but {type(other)} is given.")
        return self.extend(other)

    def __mul__(self, other):
        """The modules repeated ``other`` times (the same modules, as in PyTorch)."""
        if not isinstance(other, int) or other <= 0:
            raise ValueError(f"Non-positive multiplication factor {other} for {type(self)}")
        return Sequential().extend(list(self) * other)

    __rmul__ = __mul__

    def __imul__(self, other):
        if not isinstance(other, int) or other <= 0:
            raise ValueError(f"Non-positive multiplication factor {other} for {type(self)}")
        return self.extend(list(self) * (other - 1))


class ModuleList(_Numbered, Module):
    """A list of modules, registered so their parameters are found."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __repr__(self):
        """Runs of modules that print alike print once, as ``(0-11): 12 x
        Block(...)``, as PyTorch's ModuleList does."""
        runs = []
        for i, m in enumerate(self):
            text = repr(m)
            if runs and runs[-1][2] == text:
                runs[-1][1] = i
            else:
                runs.append([i, i, text])
        if not runs:
            return f"{self._get_name()}()"
        lines = [f"({first}): {text}" if first == last else f"({first}-{last}): {last - first + 1} x {text}"
                 for first, last, text in runs]
        return f"{self._get_name()}(\n  " + "\n  ".join(line.replace("\n", "\n  ") for line in lines) + "\n)"

    def _key(self, idx):
        # operator.index takes what indexes a list, a one-element integer
        # tensor included (Mixtral's router indexes its experts with one).
        idx = operator.index(idx)
        n = len(self)
        if not -n <= idx < n:
            raise IndexError(f"index {idx} is out of range for a ModuleList of {n} modules")
        return str(idx % n)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return self.__class__(list(self._modules.values())[idx])
        return self._modules[self._key(idx)]

    def __setitem__(self, idx, module):
        self.add_module(self._key(idx), module)

    def extend(self, modules):
        for m in modules:
            self.append(m)
        return self

    def __iadd__(self, modules):
        return self.extend(modules)

    def __add__(self, other):
        return ModuleList(list(self) + list(other))

    def insert(self, index, module):
        mods = list(self._modules.values())
        mods.insert(index, module)
        self._modules.clear()
        for i, m in enumerate(mods):
            self.add_module(str(i), m)


class ModuleDict(Module):
    """A dict of modules, registered so their parameters are found (in insertion order)."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key):
        return key in self._modules

    def __getitem__(self, key):
        return self._modules[key]

    def __setitem__(self, key, module):
        self.add_module(key, module)

    def __delitem__(self, key):
        del self._modules[key]

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()

    def pop(self, key):
        return self._modules.pop(key)

    def clear(self):
        self._modules.clear()

    def update(self, modules):
        for key, module in (modules.items() if hasattr(modules, "items") else modules):
            self.add_module(key, module)


# ---- losses --------------------------------------------------------------------------------

class _Loss(Module):
    """A loss module: the reduction, which PyTorch's deprecated
    ``size_average`` and ``reduce`` arguments still set where given."""

    def __init__(self, size_average=None, reduce=None, reduction="mean"):
        super().__init__()
        self.reduction = F._legacy_reduction(size_average, reduce, reduction)


class _WeightedLoss(_Loss):
    """A loss with an optional per-class or per-element weight, kept as a buffer (it follows .to())."""

    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)


class CrossEntropyLoss(_WeightedLoss):
    """Softmax cross entropy (fused in one op) over class indices or class probabilities."""

    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
                 label_smoothing=0.0):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input, target):
        return F.cross_entropy(input, target, weight=self.weight, ignore_index=self.ignore_index,
                               reduction=self.reduction, label_smoothing=self.label_smoothing)


class MSELoss(_Loss):
    def forward(self, input, target):
        return F.mse_loss(input, target, reduction=self.reduction)


class NLLLoss(_WeightedLoss):
    """The negative log likelihood of log-probabilities (e.g. LogSoftmax's output)."""

    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return F.nll_loss(input, target, weight=self.weight, ignore_index=self.ignore_index, reduction=self.reduction)


class CTCLoss(_Loss):
    """The connectionist temporal classification loss (see F.ctc_loss)."""

    def __init__(self, blank=0, reduction="mean", zero_infinity=False):
        super().__init__(reduction=reduction)
        self.blank, self.zero_infinity = blank, zero_infinity

    def forward(self, log_probs, targets, input_lengths, target_lengths):
        return F.ctc_loss(log_probs, targets, input_lengths, target_lengths, self.blank, self.reduction,
                          self.zero_infinity)


class BCELoss(_WeightedLoss):
    def forward(self, input, target):
        return F.binary_cross_entropy(input, target, weight=self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(_WeightedLoss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean", pos_weight=None):
        super().__init__(weight, size_average, reduce, reduction)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input, target):
        return F.binary_cross_entropy_with_logits(input, target, self.weight, reduction=self.reduction,
                                                  pos_weight=self.pos_weight)


class L1Loss(_Loss):
    def forward(self, input, target):
        return F.l1_loss(input, target, reduction=self.reduction)


class SmoothL1Loss(_Loss):
    def __init__(self, size_average=None, reduce=None, reduction="mean", beta=1.0):
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input, target):
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    def __init__(self, reduction="mean", delta=1.0):
        super().__init__(reduction=reduction)
        self.delta = delta

    def forward(self, input, target):
        return F.huber_loss(input, target, reduction=self.reduction, delta=self.delta)


class KLDivLoss(_Loss):
    def __init__(self, size_average=None, reduce=None, reduction="mean", log_target=False):
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target

    def forward(self, input, target):
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class MarginRankingLoss(_Loss):
    def __init__(self, margin=0.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input1, input2, target):
        return F.margin_ranking_loss(input1, input2, target, self.margin, reduction=self.reduction)


class HingeEmbeddingLoss(_Loss):
    def __init__(self, margin=1.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input, target):
        return F.hinge_embedding_loss(input, target, self.margin, reduction=self.reduction)


class SoftMarginLoss(_Loss):
    def forward(self, input, target):
        return F.soft_margin_loss(input, target, reduction=self.reduction)


class CosineEmbeddingLoss(_Loss):
    def __init__(self, margin=0.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input1, input2, target):
        return F.cosine_embedding_loss(input1, input2, target, self.margin, reduction=self.reduction)


class TripletMarginLoss(_Loss):
    def __init__(self, margin=1.0, p=2.0, eps=1e-6, swap=False, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        if margin <= 0:
            raise ValueError(f"TripletMarginLoss: expected margin to be greater than 0, got {margin} instead")
        self.margin, self.p, self.eps, self.swap = margin, p, eps, swap

    def forward(self, anchor, positive, negative):
        return F.triplet_margin_loss(anchor, positive, negative, self.margin, self.p, self.eps, self.swap,
                                     reduction=self.reduction)


class TripletMarginWithDistanceLoss(_Loss):
    def __init__(self, *, distance_function=None, margin=1.0, swap=False, reduction="mean"):
        super().__init__(reduction=reduction)
        if margin <= 0:
            raise ValueError(f"TripletMarginWithDistanceLoss: expected margin to be greater than 0, got {margin} "
                             "instead")
        self.distance_function, self.margin, self.swap = distance_function, margin, swap

    def forward(self, anchor, positive, negative):
        return F.triplet_margin_with_distance_loss(anchor, positive, negative,
                                                   distance_function=self.distance_function, margin=self.margin,
                                                   swap=self.swap, reduction=self.reduction)


class GaussianNLLLoss(_Loss):
    def __init__(self, *, full=False, eps=1e-6, reduction="mean"):
        super().__init__(reduction=reduction)
        self.full, self.eps = full, eps

    def forward(self, input, target, var):
        return F.gaussian_nll_loss(input, target, var, full=self.full, eps=self.eps, reduction=self.reduction)


class PoissonNLLLoss(_Loss):
    def __init__(self, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.log_input, self.full, self.eps = log_input, full, eps

    def forward(self, log_input, target):
        return F.poisson_nll_loss(log_input, target, log_input=self.log_input, full=self.full, eps=self.eps,
                                  reduction=self.reduction)


class MultiLabelSoftMarginLoss(_WeightedLoss):
    def forward(self, input, target):
        return F.multilabel_soft_margin_loss(input, target, weight=self.weight, reduction=self.reduction)


class MultiLabelMarginLoss(_Loss):
    def forward(self, input, target):
        return F.multilabel_margin_loss(input, target, reduction=self.reduction)


class MultiMarginLoss(_WeightedLoss):
    def __init__(self, p=1, margin=1.0, weight=None, size_average=None, reduce=None, reduction="mean"):
        super().__init__(weight, size_average, reduce, reduction)
        if p not in (1, 2):
            raise ValueError("only p == 1 and p == 2 supported")
        if weight is not None and weight.ndim != 1:
            raise ValueError(f"MultiMarginLoss: expected weight to be None or 1D tensor, got {weight.ndim}D instead")
        self.p, self.margin = p, margin

    def forward(self, input, target):
        return F.multi_margin_loss(input, target, p=self.p, margin=self.margin, weight=self.weight,
                                   reduction=self.reduction)


# ---- parameter containers, normalisation over groups, gated activations ---------------------

class _BufferMeta(type):
    def __instancecheck__(cls, instance):
        return isinstance(instance, Tensor) and getattr(instance, "_is_buffer", False)


class Buffer(metaclass=_BufferMeta):
    """``nn.Buffer(data, persistent=True)``: a tensor marked to become a buffer
    when assigned to a Module attribute, as PyTorch's (``persistent=False``
    keeps it out of the state dict). What it makes is a ddpc.Tensor (sharing
    ``data``'s memory) that ``isinstance(t, nn.Buffer)`` recognises."""

    def __new__(cls, data=None, *, persistent=True):
        t = (data if data is not None else empty(0)).detach()
        t._is_buffer, t.persistent = True, bool(persistent)
        return t


class ParameterList(Module):
    """Parameters held in a list (registered as "0", "1", ...); tensors are wrapped as Parameters."""

    def __init__(self, values=None):
        super().__init__()
        self.extend(values or ())

    def __len__(self):
        return len(self._parameters)

    def __iter__(self):
        return iter(self._parameters.values())

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return ParameterList(list(self)[idx])
        return list(self._parameters.values())[idx]

    def __setitem__(self, idx, param):
        key = list(self._parameters)[idx]
        self.register_parameter(key, _as_parameter(param))

    def append(self, param):
        self.register_parameter(str(len(self)), _as_parameter(param))
        return self

    def extend(self, params):
        for p in params:
            self.append(p)
        return self

    def extra_repr(self):
        return "\n".join(f"({i}): Parameter containing: [{p.dtype} of size {p.shape}]" for i, p in enumerate(self))


class ParameterDict(Module):
    """Parameters by name, in insertion order; tensors are wrapped as Parameters. As in PyTorch, the
    keys of a plain dict (given to the constructor or to ``update``) go in sorted; an OrderedDict's,
    a ParameterDict's or a sequence of pairs' keep their order."""

    def __init__(self, parameters=None):
        super().__init__()
        self.update(parameters or {})

    def __len__(self):
        return len(self._parameters)

    def __iter__(self):
        return iter(self._parameters)

    def __contains__(self, key):
        return key in self._parameters

    def __getitem__(self, key):
        return self._parameters[key]

    def __setitem__(self, key, param):
        self.register_parameter(key, _as_parameter(param))

    def __delitem__(self, key):
        del self._parameters[key]

    def keys(self):
        return self._parameters.keys()

    def values(self):
        return self._parameters.values()

    def items(self):
        return self._parameters.items()

    def pop(self, key):
        return self._parameters.pop(key)

    def popitem(self):
        """Removes and returns the last inserted ``(key, parameter)``."""
        return self._parameters.popitem()

    def get(self, key, default=None):
        return self[key] if key in self else default

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def copy(self):
        """A new ParameterDict holding the same parameters, in the same order."""
        return ParameterDict(OrderedDict(self.items()))

    def fromkeys(self, keys, default=None):
        """A new ParameterDict with ``keys``, each holding ``default`` (as PyTorch's, called on an instance)."""
        return ParameterDict((k, default) for k in keys)

    def update(self, parameters):
        if isinstance(parameters, (OrderedDict, ParameterDict)):
            items = parameters.items()
        elif isinstance(parameters, Mapping):
            items = sorted(parameters.items())
        else:
            items = parameters
        for k, p in items:
            self[k] = p

    def extra_repr(self):
        return "\n".join(f"({k}): Parameter containing: [{p.dtype} of size {p.shape}]" for k, p in self.items())


def _as_parameter(value):
    return value if isinstance(value, Parameter) or value is None else Parameter(value)


class Unflatten(Module):
    def __init__(self, dim, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, input):
        return F.unflatten(input, self.dim, self.unflattened_size)

    def extra_repr(self):
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


class GroupNorm(Module):
    """Normalises groups of channels of each sample, then a per-channel weight (ones) and bias (zeros)."""

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, device=None, dtype=None, *, bias=True):
        super().__init__()
        if num_channels % num_groups:
            raise ValueError(f"num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, float(eps), affine
        _channel_parameters(self, num_channels, affine, bias, dtype, device)

    def forward(self, input):
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")


class _InstanceNorm(_NormBase):
    """Per-sample, per-channel normalisation with torch's defaults (affine=False,
    no running statistics). With ``track_running_stats`` the running mean and
    variance are buffers, updated in training mode and used in eval mode;
    ``momentum=None`` is 0 (PyTorch keeps no cumulative average here either).
    Not a GroupNorm, as in PyTorch (init code tells them apart)."""

    _dims = ()

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False, track_running_stats=False,
                 device=None, dtype=None, *, bias=True):
        super().__init__()
        self.num_features, self.eps, self.affine = num_features, float(eps), affine
        self.momentum, self.track_running_stats = momentum, track_running_stats
        _channel_parameters(self, num_features, affine, bias, dtype, device)
        _running_statistics(self, num_features, track_running_stats, dtype, device)

    def forward(self, input):
        if input.ndim not in self._dims:
            raise ValueError(f"{type(self).__name__}: expected a {' or '.join(map(str, self._dims))}-d input, "
                             f"got shape {input.shape}")
        if input.ndim == self._dims[0]:  # unbatched: (C, *)
            return self.forward(input.unsqueeze(0)).squeeze(0)
        return F.instance_norm(input, self.running_mean, self.running_var, self.weight, self.bias,
                               self.training or not self.track_running_stats,
                               0.0 if self.momentum is None else self.momentum, self.eps)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        """As PyTorch's: running statistics in a checkpoint of no version (from before PyTorch 0.4, when
        instance norms kept them by default) for a module that keeps none are an error, even with
        strict=False; a versioned state dict's are unexpected keys."""
        names = [prefix + name for name in ("running_mean", "running_var") if prefix + name in state_dict]
        if local_metadata.get("version", None) is None and not self.track_running_stats and names:
            klass, quoted = type(self).__name__, " and ".join(f'"{k}"' for k in names)
            error_msgs.append(
                f"Unexpected running stats buffer(s) {quoted} for {klass} with track_running_stats=False. If "
                f"state_dict is a checkpoint saved before 0.4.0, this may be expected because {klass} does not track "
                f"running stats by default since 0.4.0. Please remove these keys from state_dict. If the running "
                f"stats are actually needed, instead set track_running_stats=True in {klass} to enable them. See the "
                f"documentation of {klass} for details.")
            for key in names:
                state_dict.pop(key)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)


class InstanceNorm1d(_InstanceNorm):
    _dims = (2, 3)


class InstanceNorm2d(_InstanceNorm):
    _dims = (3, 4)


class InstanceNorm3d(_InstanceNorm):
    _dims = (4, 5)


class LocalResponseNorm(Module):
    """Normalises each channel by its neighbours' mean square (F.local_response_norm)."""

    def __init__(self, size, alpha=1e-4, beta=0.75, k=1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input):
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self):
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


class CrossMapLRN2d(LocalResponseNorm):
    """PyTorch's legacy cross-channel LRN of (N, C, H, W) inputs:
    x * (k + alpha / size * S)^-beta, S the sum of squares over channels
    c - h .. c + h (h = (size - 1) // 2), computed as PyTorch computes it: its
    running sum over the channels never takes channel 0's square out again,
    so from channel h + 1 on S also holds it. The gradient is the derivative
    of that output (PyTorch's own backward formula is not, and fails
    gradcheck), so gradients differ from PyTorch's."""

    def __init__(self, size, alpha=1e-4, beta=0.75, k=1):
        super().__init__(size, alpha, beta, k)

    def forward(self, input):
        if input.ndim != 4:
            raise ValueError(f"CrossMapLRN2d: Expected input to be 4D, got {input.ndim}D instead.")
        h = (self.size - 1) // 2
        squares = input * input
        window = F._channel_window_mean(squares, h, h) * (2 * h + 1)
        past_the_first = (arange(input.shape[1], device=input.device) > h).to(input.dtype).reshape(1, -1, 1, 1)
        scale = (window + squares.narrow(1, 0, 1) * past_the_first) * (self.alpha / self.size) + self.k
        return input * scale.pow(-self.beta)


class RMSNorm(Module):
    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape, self.eps, self.elementwise_affine = shape, eps, elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(full(shape, 1.0, dtype=dtype, device=device))
        else:
            self.register_parameter("weight", None)

    def forward(self, input):
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class GLU(Module):
    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.glu(input, self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class Softmin(Module):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.softmin(input, self.dim, 5)

    def extra_repr(self):
        return f"dim={self.dim}"


# ---- padding, resampling, channel dropout and distances ------------------------------------

__all__ += ["ZeroPad1d", "ZeroPad2d", "ZeroPad3d", "ConstantPad1d", "ConstantPad2d", "ConstantPad3d",
            "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d",
            "ReplicationPad3d", "CircularPad1d", "CircularPad2d", "CircularPad3d", "PReLU", "Threshold",
            "Dropout1d", "Dropout2d", "Dropout3d", "FeatureAlphaDropout", "CosineSimilarity", "PairwiseDistance",
            "Upsample", "UpsamplingBilinear2d", "UpsamplingNearest2d"]


class _PadNd(Module):
    """F.pad of the last ``_dims`` dims by ``padding`` (an int for every
    side, or torch's (left, right[, top, bottom]) tuple) in mode ``_mode``."""

    _dims, _mode = 0, "constant"

    def __init__(self, padding, value=0.0):
        super().__init__()
        self.padding = _conv.as_tuple(padding, 2 * self._dims, "padding")
        self.value = value

    def forward(self, input):
        return F.pad(input, self.padding, self._mode, self.value if self._mode == "constant" else None)

    def extra_repr(self):
        return f"{self.padding}"


class _ConstantPadNd(_PadNd):
    """torch's base class of the constant (and zero) pads, for isinstance checks."""


class _ReflectionPadNd(_PadNd):
    _mode = "reflect"


class _ReplicationPadNd(_PadNd):
    _mode = "replicate"


class _CircularPadNd(_PadNd):
    _mode = "circular"


class ConstantPad1d(_ConstantPadNd):
    _dims = 1

    def __init__(self, padding, value):
        super().__init__(padding, value)

    def extra_repr(self):
        return f"padding={self.padding}, value={self.value}"


class ConstantPad2d(ConstantPad1d):
    _dims = 2


class ZeroPad1d(_ConstantPadNd):
    _dims = 1


class ZeroPad2d(_ConstantPadNd):
    _dims = 2


class ReflectionPad1d(_ReflectionPadNd):
    _dims = 1


class ReflectionPad2d(_ReflectionPadNd):
    _dims = 2


class ReplicationPad1d(_ReplicationPadNd):
    _dims = 1


class ReplicationPad2d(_ReplicationPadNd):
    _dims = 2


class CircularPad1d(_CircularPadNd):
    _dims = 1


class CircularPad2d(_CircularPadNd):
    _dims = 2


class ConstantPad3d(ConstantPad1d):
    _dims = 3


class ZeroPad3d(_ConstantPadNd):
    _dims = 3


class ReflectionPad3d(_ReflectionPadNd):
    _dims = 3


class ReplicationPad3d(_ReplicationPadNd):
    _dims = 3


class CircularPad3d(_CircularPadNd):
    _dims = 3


class PReLU(Module):
    """max(0, x) + weight * min(0, x), one learnt slope or one per channel (initialised to ``init``)."""

    def __init__(self, num_parameters=1, init=0.25, device=None, dtype=None):
        super().__init__()
        self.num_parameters, self.init = num_parameters, init
        self.weight = Parameter(full((num_parameters,), init, dtype=dtype, device=device))

    def forward(self, input):
        return F.prelu(input, self.weight)

    def extra_repr(self):
        return f"num_parameters={self.num_parameters}"


class Threshold(Module):
    def __init__(self, threshold, value, inplace=False):
        super().__init__()
        self.threshold, self.value, self.inplace = threshold, value, inplace

    def forward(self, input):
        return F.threshold(input, self.threshold, self.value, self.inplace)

    def extra_repr(self):
        return f"threshold={self.threshold}, value={self.value}{_inplace_repr(self.inplace)}"


class Dropout1d(Dropout):
    """Zeroes whole channels of (N, C, L) or (C, L) inputs in training mode."""

    def forward(self, input):
        return F.dropout1d(input, self.p, self.training, self.inplace)


class Dropout2d(Dropout):
    """Zeroes whole channels of (N, C, H, W) inputs in training mode."""

    def forward(self, input):
        return F.dropout2d(input, self.p, self.training, self.inplace)


class Dropout3d(Dropout):
    """Zeroes whole channels of (N, C, D, H, W) or (C, D, H, W) inputs in training mode."""

    def forward(self, input):
        return F.dropout3d(input, self.p, self.training, self.inplace)


class CosineSimilarity(Module):
    def __init__(self, dim=1, eps=1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1, x2):
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    def __init__(self, p=2.0, eps=1e-6, keepdim=False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1, x2):
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


class Upsample(Module):
    """F.interpolate to ``size`` or by ``scale_factor`` (modes 'nearest',
    'nearest-exact', 'linear', 'bilinear', 'bicubic', 'trilinear' and
    'area')."""

    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None, recompute_scale_factor=None):
        super().__init__()
        self.size, self.mode = size, mode
        self.scale_factor = float(scale_factor) if isinstance(scale_factor, (int, float)) else \
            None if scale_factor is None else tuple(float(s) for s in scale_factor)
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, input):
        return F.interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners,
                             self.recompute_scale_factor)

    def extra_repr(self):
        info = f"scale_factor={self.scale_factor!r}" if self.scale_factor is not None else f"size={self.size!r}"
        return f"{info}, mode={self.mode!r}"


class UpsamplingNearest2d(Upsample):
    """Upsample of (N, C, H, W) input in mode 'nearest'."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """Upsample of (N, C, H, W) input in mode 'bilinear' with align_corners=True."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)

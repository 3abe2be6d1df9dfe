"""Optimizer base class: parameter groups, per-parameter state, zero_grad and
state_dict/load_state_dict in PyTorch's layout, and PyTorch's optimizer hooks
(step, state_dict and load_state_dict pre and post hooks; the global step
hooks of register_optimizer_step_pre_hook / _post_hook).

Subclasses implement ``_step_group(group)``, which hands a whole group to one
fused multi-tensor _C call.
"""

import contextlib
import functools
import itertools
import warnings
from collections import OrderedDict, defaultdict
from collections.abc import Iterable
from typing import Any

from .. import profiler
from ..autograd import RemovableHandle, no_grad
from ..nn.modules import is_lazy
from ..tensor import Tensor, zero_grads


# What an optimizer's ``params`` may be, as torch.optim.optimizer.ParamsT (for annotations).
ParamsT = Iterable[Tensor] | Iterable[dict[str, Any]] | Iterable[tuple[str, Tensor]]


class _RequiredParameter:
    """The default of a hyper-parameter that every param group must give
    (``def __init__(self, params, lr=required)``), as torch's ``required``."""

    def __repr__(self):
        return "<required parameter>"

    def __reduce__(self):
        return "required"  # copies and pickles are the one object, so ``is required`` holds


required = _RequiredParameter()


# The per-parameter scalars ddpc keeps as Python numbers, which PyTorch keeps
# in 0-d tensors: every optimizer's step, NAdam's mu_product, ASGD's eta and mu.
_SCALAR_STATE = {"step": int, "mu_product": float, "eta": float, "mu": float}


def _saved_state(saved_state, index):
    """The state a state dict's ``state`` holds for parameter ``index``, or
    None: its entries under the index and under the index's string, merged.
    A distributed checkpoint of a state dict keyed by ints (as PyTorch's
    does) loads the tensors in place and the other values (the int
    ``step`` ddpc keeps, a tensor in PyTorch) under the key's string."""
    return {**saved_state.get(index, {}), **saved_state.get(str(index), {})} or None


# An optimizer's hook tables (OrderedDicts: id -> hook), PyTorch's attribute names.
_HOOK_TABLES = ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks", "_optimizer_state_dict_pre_hooks",
                "_optimizer_state_dict_post_hooks", "_optimizer_load_state_dict_pre_hooks",
                "_optimizer_load_state_dict_post_hooks")
_global_optimizer_pre_hooks = OrderedDict()
_global_optimizer_post_hooks = OrderedDict()


def register_optimizer_step_pre_hook(hook):
    """Registers ``hook(optimizer, args, kwargs)`` to run before every
    optimizer's step, before the optimizer's own pre hooks; it may return
    ``(new_args, new_kwargs)`` for the step (args hold the optimizer first)."""
    return _register(_global_optimizer_pre_hooks, hook)


def register_optimizer_step_post_hook(hook):
    """Registers ``hook(optimizer, args, kwargs)`` to run after every optimizer's step, after its own post hooks."""
    return _register(_global_optimizer_post_hooks, hook)


def _register(hooks, hook, prepend=False):
    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    if prepend:
        hooks.move_to_end(handle.id, last=False)
    return handle


def _or(result, value):
    """A hook's result where it returned one, else value."""
    return value if result is None else result


def _hooked_step(self, step, args, kwargs):
    """step(*args, **kwargs), args holding the optimizer first, between the
    step hooks, as PyTorch's profile_hook_step runs it."""
    for hook in itertools.chain(_global_optimizer_pre_hooks.values(), self._optimizer_step_pre_hooks.values()):
        result = hook(self, args, kwargs)
        if result is not None:
            if not (isinstance(result, tuple) and len(result) == 2):
                raise RuntimeError(f"{step} must return None or a tuple of (new_args, new_kwargs), but got {result}.")
            args, kwargs = result
    out = step(*args, **kwargs)
    self._opt_called = True  # an LR scheduler stepped before any of these warns (see LRScheduler)
    for hook in itertools.chain(self._optimizer_step_post_hooks.values(), _global_optimizer_post_hooks.values()):
        hook(self, args, kwargs)
    return out


def _profiled(method):
    """``method`` (step or zero_grad) recorded by ddpc.profiler as PyTorch names
    it, e.g. ``Optimizer.step#Adam.step``, and step run between its hooks:
    once per call, also where a subclass's method calls its base's."""
    name = method.__name__

    @functools.wraps(method)
    def profiled(self, *args, **kwargs):
        if getattr(type(self), name) is not profiled:  # a base's method called by a subclass's: done there
            return method(self, *args, **kwargs)
        record = (profiler.record_function(f"Optimizer.{name}#{type(self).__name__}.{name}")
                  if profiler._is_profiler_enabled else contextlib.nullcontext())
        with record:
            if name == "step":
                return _hooked_step(self, method, (self,) + args, kwargs)
            return method(self, *args, **kwargs)

    return profiled


class Optimizer:
    # Whether the step takes complex parameters, as their view_as_real pairs (PyTorch's rule for them).
    _complex_params = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in ("step", "zero_grad"):
            if name in cls.__dict__:
                setattr(cls, name, _profiled(cls.__dict__[name]))

    def __getattr__(self, name):
        # The hook tables are made on first use: a subclass may skip
        # Optimizer.__init__ (PostLocalSGDOptimizer shares a wrapped one's state).
        if name in _HOOK_TABLES:
            table = self.__dict__[name] = OrderedDict()
            return table
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __getstate__(self):
        # Copies and pickles leave the hooks behind, as PyTorch's (they are often lambdas or bound methods).
        return {k: v for k, v in self.__dict__.items() if k not in _HOOK_TABLES}

    def __setstate__(self, state):
        self.__dict__.update(state)
        for name in _HOOK_TABLES:
            self.__dict__.setdefault(name, OrderedDict())

    def __init__(self, params, defaults):
        self.defaults = dict(defaults)
        self.state = defaultdict(dict)  # as PyTorch's: a parameter not stepped yet reads as {}
        self.param_groups = []
        if isinstance(params, Tensor):
            raise TypeError("params must be an iterable of tensors or of dicts, got a single tensor")
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    def add_param_group(self, param_group):
        if not isinstance(param_group, dict):
            raise TypeError(f"a param group must be a dict, got {type(param_group).__name__}")
        group = dict(param_group)
        params = group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        # (name, parameter) pairs, as named_parameters() yields them: the names are kept in "param_names".
        names = [p[0] for p in params if isinstance(p, tuple)]
        group["params"] = [p[1] if isinstance(p, tuple) else p for p in params]
        if names:
            if len(names) != len(params):
                raise ValueError("all optimizer params should be with/without names. Some param names are missing")
            group["param_names"] = names
        for p in group["params"]:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizers can only optimize ddpc tensors, got {type(p).__name__}")
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf tensor")
            if is_lazy(p):
                raise ValueError("can't optimize an uninitialized parameter (of a lazy module, whose shape comes "
                                 "from its first input): run a forward pass through the model before building the "
                                 "optimizer")
            if p.dtype.is_complex and not self._complex_params:
                raise TypeError(f"{type(self).__name__} does not support complex parameters in ddpc (SGD, Adam, "
                                "AdamW, Adagrad, Adadelta, Adamax, NAdam, RAdam and RMSprop do)")
            if not (p.dtype.is_floating_point or p.dtype.is_complex):
                raise TypeError(f"can't optimize a tensor of dtype {p.dtype}")
        for k, v in self.defaults.items():
            if v is required and k not in group:
                raise ValueError(f"parameter group didn't specify a value of required optimization parameter {k}")
            group.setdefault(k, v)
        for g in self.param_groups:
            if ("param_names" in group) != ("param_names" in g):
                raise ValueError("all optimizer param groups should be with/without names. cannot add param group "
                                 f"{'with' if 'param_names' in group else 'without'} names to the optimizer")
        existing = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in existing for p in group["params"]):
            raise ValueError("some parameters appear in more than one parameter group")
        if len({id(p) for p in group["params"]}) != len(group["params"]):
            # PyTorch warns and keeps both (stepping the parameter twice); ddpc warns alike and keeps the first.
            warnings.warn("optimizer contains a parameter group with duplicate parameters; in future, this will "
                          "cause an error", stacklevel=3)
            first = {}
            for i, p in enumerate(group["params"]):
                first.setdefault(id(p), i)
            keep = sorted(first.values())
            group["params"] = [group["params"][i] for i in keep]
            if "param_names" in group:
                group["param_names"] = [group["param_names"][i] for i in keep]
        self._check_group(group)
        self.param_groups.append(group)

    def _check_group(self, group):
        """Validates a group's hyper-parameters (subclasses)."""

    @_profiled
    def zero_grad(self, set_to_none=True):
        zero_grads((p for g in self.param_groups for p in g["params"]), set_to_none)

    @_profiled
    @no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            from ..autograd import enable_grad

            with enable_grad():
                loss = closure()
        for group in self.param_groups:
            if not self._sparse_grads and any(p.grad is not None and p.grad.is_sparse for p in group["params"]):
                raise RuntimeError(self._sparse_refusal or f"{type(self).__name__} does not support sparse gradients")
            self._step_group(group)
            for p in group["params"]:
                if p.grad is not None:  # updated in place: autograd counts it (see Tensor.copy_)
                    p._buf.bump_version()
        return loss

    def _step_group(self, group):
        raise NotImplementedError

    _sparse_grads = False  # whether _step_group takes sparse COO gradients
    _sparse_refusal = None  # the error for sparse gradients where it is not PyTorch's generic one

    # ---- hooks ---------------------------------------------------------------------
    def register_step_pre_hook(self, hook):
        """Registers ``hook(optimizer, args, kwargs)`` to run before each step;
        it may return ``(new_args, new_kwargs)`` for the step (args hold the optimizer first)."""
        return _register(self._optimizer_step_pre_hooks, hook)

    def register_step_post_hook(self, hook):
        """Registers ``hook(optimizer, args, kwargs)`` to run after each step."""
        return _register(self._optimizer_step_post_hooks, hook)

    def register_state_dict_pre_hook(self, hook, prepend=False):
        """Registers ``hook(optimizer)`` to run at the start of state_dict()."""
        return _register(self._optimizer_state_dict_pre_hooks, hook, prepend)

    def register_state_dict_post_hook(self, hook, prepend=False):
        """Registers ``hook(optimizer, state_dict)`` to run at the end of
        state_dict(); it may change the state dict in place or return another."""
        return _register(self._optimizer_state_dict_post_hooks, hook, prepend)

    def register_load_state_dict_pre_hook(self, hook, prepend=False):
        """Registers ``hook(optimizer, state_dict)`` to run at the start of
        load_state_dict() on a shallow copy of the state dict given; it may
        change it in place or return the one to load."""
        return _register(self._optimizer_load_state_dict_pre_hooks, hook, prepend)

    def register_load_state_dict_post_hook(self, hook, prepend=False):
        """Registers ``hook(optimizer)`` to run at the end of load_state_dict()."""
        return _register(self._optimizer_load_state_dict_post_hooks, hook, prepend)

    # ---- state dicts ---------------------------------------------------------------
    def state_dict(self):
        """{'state': {index: {...}}, 'param_groups': [{..., 'params': [indices]}]}: the optimizer's own
        per-parameter dicts, not copies (``param_names`` too where the group has them)."""
        for hook in self._optimizer_state_dict_pre_hooks.values():
            hook(self)
        index, groups, n = {}, [], 0
        for g in self.param_groups:
            packed = {k: v for k, v in g.items() if k != "params"}
            ids = []
            for p in g["params"]:
                if id(p) not in index:
                    index[id(p)] = n
                    n += 1
                ids.append(index[id(p)])
            packed["params"] = ids
            groups.append(packed)
        # Each parameter's own state dict, as PyTorch's: a state dict taken before
        # later steps stays consistent (step and the tensors both move on).
        state = {}
        for g in self.param_groups:
            for p in g["params"]:
                if p in self.state and self.state[p]:
                    state[index[id(p)]] = self.state[p]
        state_dict = {"state": state, "param_groups": groups}
        for hook in self._optimizer_state_dict_post_hooks.values():
            state_dict = _or(hook(self, state_dict), state_dict)
        return state_dict

    def load_state_dict(self, state_dict):
        state_dict = dict(state_dict)  # the pre hooks change a shallow copy, as PyTorch's
        for hook in self._optimizer_load_state_dict_pre_hooks.values():
            state_dict = _or(hook(self, state_dict), state_dict)
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError(f"loaded state dict has {len(groups)} parameter groups, the optimizer has "
                             f"{len(self.param_groups)}")
        for i, (saved, own) in enumerate(zip(groups, self.param_groups)):
            if len(saved["params"]) != len(own["params"]):
                raise ValueError(f"loaded state dict's parameter group {i} holds {len(saved['params'])} parameters, "
                                 f"the optimizer's holds {len(own['params'])}")
        new_state = defaultdict(dict)
        saved_state = state_dict["state"]
        for saved, own in zip(groups, self.param_groups):
            for idx, p in zip(saved["params"], own["params"]):
                s = _saved_state(saved_state, idx)
                if s is None:
                    continue
                new_state[p] = {k: self._cast_state(p, k, v) for k, v in s.items()}
        self.state = new_state
        for saved, own in zip(groups, self.param_groups):
            for k, v in saved.items():
                if k != "params":
                    own[k] = v
        for hook in self._optimizer_load_state_dict_post_hooks.values():
            hook(self)

    @classmethod
    def _cast_state(cls, p, key, value):
        if not isinstance(value, Tensor):
            return value
        # Told by key, not shape: a 0-d parameter's other state is 0-d too.
        if key in _SCALAR_STATE and value.ndim == 0:
            return _SCALAR_STATE[key](value.item())
        # ddpc's own steps (a _step_group) read each state tensor alongside its parameter, so one that does not
        # fit is refused here; an optimizer with a step of its own keeps state of any shape, as PyTorch loads it.
        if cls._step_group is not Optimizer._step_group and value.shape != p.shape:
            raise ValueError(f"state {key!r} has shape {value.shape}, its parameter has shape {p.shape}")
        return value.to(device=p.device, dtype=p.dtype, copy=True)

    def __repr__(self):
        lines = [f"{type(self).__name__} ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(g):
                if k != "params":
                    lines.append(f"    {k}: {g[k]}")
        lines.append(")")
        return "\n".join(lines)


def check_common(g, betas=False):
    """PyTorch's checks of lr, eps (where the optimizer has one), weight_decay and (optionally) betas."""
    if g["lr"] < 0:
        raise ValueError(f"Invalid learning rate: {g['lr']}")
    if "eps" in g and g["eps"] < 0:
        raise ValueError(f"Invalid epsilon value: {g['eps']}")
    if g["weight_decay"] < 0:
        raise ValueError(f"Invalid weight_decay value: {g['weight_decay']}")
    if betas:
        for i, b in enumerate(g["betas"]):
            if not 0.0 <= b < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {b}")

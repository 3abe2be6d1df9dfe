"""ddpc.amp: mixed precision, shaped like torch.amp.

``autocast(device_type, dtype=None)`` runs the ops of a region in a lower
precision where that is safe and in float32 where it is not, as PyTorch's
autocast does: inside it, the GEMM-type ops (``linear``, ``matmul``, ``mm``,
``bmm``, ``addmm``, ``baddbmm``, ``addbmm``, the convolutions), ``prelu``
and ``nn.LSTM`` cast their floating inputs (float64 excepted) to the
autocast dtype, all of them (an added bias too), and the losses cast theirs
to float32. ``mv`` runs in the autocast dtype on ``"cuda"`` only, as
PyTorch's CPU list leaves it out. On ``"cuda"`` softmax,
log_softmax, layer_norm, exp, log, log1p, expm1, pow, rsqrt, reciprocal and
sum also run in float32, following PyTorch's CUDA list; on ``"cpu"`` they
keep their input's dtype, following its CPU list. ``prod`` and ``cdist``
run in float32 on both. On ``"cpu"`` so do the ops that only PyTorch's CPU
list holds: the linear algebra (``inverse``, ``pinverse``, ``trace``, the
solves, factorizations and inverses of ``ddpc.linalg``), the transforms of
``ddpc.fft`` (not hfft2, hfftn, ihfft2, ihfftn), ``quantile``, ``polar``,
``view_as_complex``, ``grid_sample``, the 3-d pools (``max_pool3d`` without
indices), the unpools and fractional pools, 'reflect' padding of one or two
dims, 'replicate' padding and ``ctc_loss``. A call with ``out=`` is run as
it is (PyTorch's autocast does not cast the out= forms). The casts are
recorded by autograd, so gradients reach the float32 parameters in float32.
Within a region a parameter is cast once and the cast reused
(``cache_enabled``).

Where ddpc differs: it computes 16-bit GEMMs in float32 on the host and
rounds the result, so on the host autocast gives PyTorch's numerics and
memory but not a speed-up.

``GradScaler`` scales the loss so that float16 gradients do not underflow,
unscales the gradients before the optimizer step (one fused C or CUDA pass
per device that also looks for infs and NaNs), skips the step when it found
any, and adapts the scale: ``init_scale`` halved (``backoff_factor``) after
an overflow, doubled (``growth_factor``) after ``growth_interval`` steps
without one. Under DistributedDataParallel the gradients are already averaged
over the ranks when the scaler looks at them, so every rank skips the same
steps. As PyTorch's, a scaler for ``"cuda"`` (and ``autocast("cuda")``) on a
machine without a usable GPU warns and disables itself, so a script written
for GPUs runs unscaled, in full precision, on the host.
"""

import collections.abc
import functools
import sys
import threading
import types
import warnings

from . import _C
from ._dtype import bfloat16, finfo, float16, float32, float64
from .tensor import Tensor, zeros

__all__ = ["autocast", "GradScaler", "is_autocast_enabled", "get_autocast_dtype", "is_autocast_available",
           "custom_fwd", "custom_bwd"]

_DEFAULT_DTYPE = {"cpu": bfloat16, "cuda": float16}


class _AutocastState(threading.local):
    dtypes = {}  # device type -> the autocast dtype, for the device types autocast is on for (this thread)
    cache_enabled = True
    depth = 0  # autocast regions entered and not yet left
    cache = None  # id(parameter) -> (parameter, its version, its cast), while depth > 0


_state = _AutocastState()


def is_autocast_enabled(device_type=None):
    """Whether autocast is on in this thread (for ``device_type``, else for any)."""
    return bool(_state.dtypes) if device_type is None else device_type in _state.dtypes


def get_autocast_dtype(device_type):
    """The dtype autocast casts to on ``device_type`` (its default when off)."""
    _check_device_type(device_type)
    return _state.dtypes.get(device_type, _DEFAULT_DTYPE[device_type])


def is_autocast_available(device_type):
    """Whether autocast works on ``device_type``: "cpu" and "cuda"."""
    return device_type in _DEFAULT_DTYPE


def _check_device_type(device_type):
    if device_type not in _DEFAULT_DTYPE:
        raise ValueError(f"autocast: device_type must be 'cpu' or 'cuda', got {device_type!r}")


class autocast:
    """Context manager (or decorator) that turns autocast on or off for
    ``device_type`` ("cpu" or "cuda") in this thread; ``dtype`` is float16 or
    bfloat16 (default: bfloat16 on cpu, float16 on cuda). As PyTorch's, on
    cpu another dtype warns and turns autocast off in the region; cuda takes
    any floating dtype (float32 upcasts the 16-bit inputs of the GEMM-type
    ops), and on a machine without a usable GPU it warns and turns itself off."""

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        _check_device_type(device_type)
        dtype = _DEFAULT_DTYPE[device_type] if dtype is None else dtype
        if device_type == "cuda":
            if not getattr(dtype, "is_floating_point", False):
                raise ValueError(f"autocast: dtype must be a floating ddpc dtype, got {dtype}")
            if enabled and _C.cuda_device_count() == 0:
                warnings.warn("CUDA is not available. Disabling autocast.", stacklevel=2)
                enabled = False
        elif dtype not in (float16, bfloat16):
            if enabled:
                warnings.warn("In CPU autocast, but the target dtype is not supported. Disabling autocast.\n"
                              f"CPU Autocast only supports dtypes of {bfloat16}, {float16} currently.", stacklevel=2)
            enabled = False
        self.device_type, self.fast_dtype, self.enabled = device_type, dtype, bool(enabled)
        self.cache_enabled = True if cache_enabled is None else bool(cache_enabled)

    def __enter__(self):
        self._prev = (_state.dtypes, _state.cache_enabled)
        dtypes = dict(_state.dtypes)
        if self.enabled:
            dtypes[self.device_type] = self.fast_dtype
        else:
            dtypes.pop(self.device_type, None)
        _state.dtypes, _state.cache_enabled = dtypes, self.cache_enabled
        if _state.depth == 0:
            _state.cache = {}
        _state.depth += 1
        return self

    def __exit__(self, *exc):
        _state.dtypes, _state.cache_enabled = self._prev
        _state.depth -= 1
        if _state.depth == 0:
            _state.cache = None  # casts do not outlive the outermost region, as in PyTorch
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with autocast(self.device_type, self.fast_dtype, self.enabled, self.cache_enabled):
                return fn(*args, **kwargs)

        return wrapper


def _cast(t, dtype, cache):
    """t as dtype, through autograd; a parameter's cast is made once per region."""
    if not cache:
        return t.to(dtype=dtype)
    from .autograd import is_grad_enabled

    # Casts made without grad would carry no graph into later uses, so only
    # those made with grad on are kept.
    if not (t.requires_grad and t.is_leaf and is_grad_enabled()):
        return t.to(dtype=dtype)
    hit = _state.cache.get(id(t))
    if hit is not None and hit[0] is t and hit[1] == t._buf.version and hit[2].dtype is dtype:
        return hit[2]
    out = t.to(dtype=dtype)
    _state.cache[id(t)] = (t, t._buf.version, out)
    return out


_POLICIES = ("lower", "lower_cuda", "float32", "float32_cuda", "float32_cpu")


def _cast_inputs(lower, only_on, dtypes, values):
    out = []
    for v in values:
        if isinstance(v, Tensor) and v.dtype.is_floating_point and v.dtype is not float64:
            kind = "cuda" if v._buf.device >= 0 else "cpu"
            if kind in dtypes and only_on in ("", kind):
                target = dtypes[kind] if lower else float32
                if v.dtype is not target:
                    v = _cast(v, target, lower and _state.cache_enabled)
        out.append(v)
    return out


def autocast_op(policy):
    """Decorates an op whose floating inputs autocast casts: ``"lower"`` to the
    autocast dtype (GEMM-type ops), ``"float32"`` to float32 (losses, ops on
    both of PyTorch's lists); ``"lower_cuda"`` and ``"float32_cuda"`` do so on
    CUDA only (ops that PyTorch's CUDA list holds and its CPU list does not),
    ``"float32_cpu"`` on the host only (ops on PyTorch's CPU float32 list
    that its CUDA list leaves out). The op's own inner ops are not autocast
    again (PyTorch's autocast also dispatches them as they are), and neither
    is a call with ``out=`` (PyTorch's autocast leaves the out= forms alone)."""
    if policy not in _POLICIES:
        raise ValueError(f"autocast_op: policy must be one of {_POLICIES}, got {policy!r}")
    precision, _, only_on = policy.partition("_")
    lower = precision == "lower"

    def wrap(fn):
        @functools.wraps(fn)
        def op(*args, **kwargs):
            dtypes = _state.dtypes
            if not dtypes or kwargs.get("out") is not None:
                return fn(*args, **kwargs)
            args = _cast_inputs(lower, only_on, dtypes, args)
            keys = list(kwargs)
            kwargs = dict(zip(keys, _cast_inputs(lower, only_on, dtypes, kwargs.values())))
            _state.dtypes = {}
            try:
                return fn(*args, **kwargs)
            finally:
                _state.dtypes = dtypes

        return op

    return wrap


# ---- custom autograd Functions -------------------------------------------------------------

def _to_dtype_on(value, device_type, dtype):
    """``value`` (a tensor, or a tuple, list or dict holding tensors) with
    its floating tensors on ``device_type`` (float64 excepted) cast to dtype."""
    if isinstance(value, Tensor):
        on = ("cuda" if value._buf.device >= 0 else "cpu") == device_type
        if on and value.dtype.is_floating_point and value.dtype is not float64:
            return value.to(dtype=dtype)
        return value
    if isinstance(value, (tuple, list)):
        return type(value)(_to_dtype_on(v, device_type, dtype) for v in value)
    if isinstance(value, dict):
        return {k: _to_dtype_on(v, device_type, dtype) for k, v in value.items()}
    return value


def custom_fwd(fwd=None, *, device_type, cast_inputs=None):
    """Decorates the ``forward`` of an ``autograd.Function`` for autocast, as
    torch.amp.custom_fwd: it records whether autocast was on for
    ``device_type`` so that ``custom_bwd`` runs backward the same way; with
    ``cast_inputs`` (a dtype) inside an autocast region, the floating
    tensors among the arguments are cast to it and forward runs with
    autocast off."""
    _check_device_type(device_type)
    if fwd is None:
        return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)

    @functools.wraps(fwd)
    def forward(ctx, *args, **kwargs):
        ctx._autocast_dtype = get_autocast_dtype(device_type)
        on = is_autocast_enabled(device_type)
        ctx._fwd_used_autocast = on and cast_inputs is None
        if cast_inputs is None or not on:
            return fwd(ctx, *args, **kwargs)
        with autocast(device_type, enabled=False):
            return fwd(ctx, *_to_dtype_on(args, device_type, cast_inputs),
                       **_to_dtype_on(kwargs, device_type, cast_inputs))

    return forward


def custom_bwd(bwd=None, *, device_type):
    """Decorates the ``backward`` of an ``autograd.Function`` whose forward
    has ``custom_fwd``: backward runs under the autocast state forward ran in."""
    _check_device_type(device_type)
    if bwd is None:
        return functools.partial(custom_bwd, device_type=device_type)

    @functools.wraps(bwd)
    def backward(ctx, *args, **kwargs):
        with autocast(device_type, dtype=ctx._autocast_dtype, enabled=ctx._fwd_used_autocast):
            return bwd(ctx, *args, **kwargs)

    return backward


# ---- GradScaler ------------------------------------------------------------------------

_READY, _UNSCALED, _STEPPED = range(3)


class GradScaler:
    """Loss scaling for float16 training, as ``torch.amp.GradScaler``::

        scaler = ddpc.amp.GradScaler()
        with ddpc.autocast("cuda"):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)              # optional, e.g. before clip_grad_norm_
        scaler.step(opt)                  # skipped if a gradient overflowed
        scaler.update()

    The scale is kept on the host (PyTorch keeps it on the device); the step
    reads each device's overflow flag once, as PyTorch's does."""

    def __init__(self, device="cuda", init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        if growth_factor <= 1.0:
            raise ValueError(f"GradScaler: growth_factor must be > 1, got {growth_factor}")
        if not 0.0 < backoff_factor < 1.0:
            raise ValueError(f"GradScaler: backoff_factor must be in (0, 1), got {backoff_factor}")
        if not isinstance(growth_interval, int) or growth_interval < 1:
            raise ValueError(f"GradScaler: growth_interval must be a positive int, got {growth_interval!r}")
        if init_scale <= 0:
            raise ValueError(f"GradScaler: init_scale must be positive, got {init_scale}")
        self._device = str(device)
        self._enabled = bool(enabled)
        if self._enabled and self._device.split(":")[0] == "cuda" and _C.cuda_device_count() == 0:
            warnings.warn(f"{type(self).__module__}.GradScaler is enabled, but CUDA is not available.  Disabling.")
            self._enabled = False
        self._scale = float(init_scale)
        self._growth_factor, self._backoff_factor = float(growth_factor), float(backoff_factor)
        self._growth_interval = growth_interval
        self._growth_tracker = 0
        self._per_optimizer = {}  # id(optimizer) -> {"stage": ..., "found_inf": [flag tensors]}

    def is_enabled(self):
        return self._enabled

    def get_scale(self):
        return self._scale if self._enabled else 1.0

    def get_growth_factor(self):
        return self._growth_factor

    def set_growth_factor(self, new_factor):
        self._growth_factor = float(new_factor)

    def get_backoff_factor(self):
        return self._backoff_factor

    def set_backoff_factor(self, new_factor):
        self._backoff_factor = float(new_factor)

    def get_growth_interval(self):
        return self._growth_interval

    def set_growth_interval(self, new_interval):
        self._growth_interval = int(new_interval)

    def scale(self, outputs):
        """outputs times the scale: a tensor, or an iterable of them (nested)
        in the same shape, as PyTorch's: a list or tuple as a list or tuple,
        any other iterable (a generator, a dict's values) as a lazy ``map``."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, Tensor):
            return outputs * self._scale
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        if isinstance(outputs, collections.abc.Iterable):
            return map(self.scale, outputs)
        raise ValueError(f"GradScaler.scale: outputs must be a Tensor or an iterable of Tensors, got "
                         f"{type(outputs).__name__}")

    def _state_of(self, optimizer):
        return self._per_optimizer.setdefault(id(optimizer), {"stage": _READY, "found_inf": []})

    def unscale_(self, optimizer):
        """Divides the optimizer's gradients by the scale, in place, and notes
        whether any of them is inf or NaN. At most once per step."""
        if not self._enabled:
            return
        state = self._state_of(optimizer)
        if state["stage"] == _UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if state["stage"] == _STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        by_device = {}
        for group in optimizer.param_groups:
            for p in group["params"]:
                g = p.grad
                if g is None:
                    continue
                if g.dtype is float16:
                    raise ValueError("Attempting to unscale FP16 gradients.")
                if g.is_sparse:  # as PyTorch: its values, repeated indices unsummed, are unscaled and checked
                    g = g._values()
                by_device.setdefault(g._buf.device, []).append(g)
        flags = []
        inv_scale = 1.0 / self._scale
        for dev, grads in by_device.items():
            found = zeros(1, dtype=float32, device=grads[0].device)
            _C.unscale([g._buf for g in grads], inv_scale, found._buf)
            for g in grads:
                g._buf.bump_version()
            flags.append(found)
        state["found_inf"] = flags
        state["stage"] = _UNSCALED

    def _found_inf(self, optimizer):
        return any(f.item() != 0 for f in self._state_of(optimizer)["found_inf"])

    def step(self, optimizer, *args, **kwargs):
        """Unscales (unless ``unscale_`` already did) and runs
        ``optimizer.step(*args, **kwargs)`` unless a gradient overflowed;
        returns what the step returned, or None when skipped."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        state = self._state_of(optimizer)
        if state["stage"] == _STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] == _READY:
            self.unscale_(optimizer)
        result = None if self._found_inf(optimizer) else optimizer.step(*args, **kwargs)
        state["stage"] = _STEPPED
        return result

    def update(self, new_scale=None):
        """Adapts the scale to the overflows the steps since the last update
        found, or sets it to ``new_scale``."""
        if not self._enabled:
            return
        if new_scale is not None:  # the growth tracker carries on, as in PyTorch
            self._scale = float(new_scale.item() if isinstance(new_scale, Tensor) else new_scale)
        else:
            flags = [f for s in self._per_optimizer.values() for f in s["found_inf"]]
            if not flags:
                raise RuntimeError("No inf checks were recorded prior to update.")
            if any(f.item() != 0 for f in flags):
                self._scale *= self._backoff_factor
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
                if self._growth_tracker == self._growth_interval:
                    # PyTorch keeps the scale in float32 and grows it only while it stays finite there.
                    grown = self._scale * self._growth_factor
                    if grown <= finfo(float32).max:
                        self._scale = grown
                    self._growth_tracker = 0
        self._per_optimizer = {}

    def state_dict(self):
        if not self._enabled:
            return {}
        return {"scale": self._scale, "growth_factor": self._growth_factor, "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval, "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state_dict):
        if not self._enabled:
            return
        if not state_dict:
            raise RuntimeError("The source state dict is empty, possibly because it was saved from a disabled "
                               "instance of GradScaler.")
        self._scale = float(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict["_growth_tracker"])


def _device_amp(device_type):
    """``torch.cuda.amp``'s shape, the older path many scripts import: autocast
    and GradScaler with the device type implied (autocast's arguments
    ``enabled, dtype, cache_enabled``), custom_fwd and custom_bwd likewise."""
    def __init__(self, enabled=True, dtype=None, cache_enabled=True):
        autocast.__init__(self, device_type, dtype, enabled, cache_enabled)

    def scaler_init(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                    enabled=True):
        GradScaler.__init__(self, device_type, init_scale, growth_factor, backoff_factor, growth_interval, enabled)

    module = types.ModuleType(f"ddpc.{device_type}.amp", f"Mixed precision on {device_type} (torch.{device_type}.amp).")
    module.autocast = type("autocast", (autocast,), {"__init__": __init__, "__module__": module.__name__})
    module.GradScaler = type("GradScaler", (GradScaler,), {"__init__": scaler_init, "__module__": module.__name__})
    module.custom_fwd = functools.partial(custom_fwd, device_type=device_type)
    module.custom_bwd = functools.partial(custom_bwd, device_type=device_type)
    module.__all__ = ["autocast", "GradScaler", "custom_fwd", "custom_bwd"]
    return module


def _register_device_amp():
    """ddpc.cuda.amp, and ddpc.cpu.amp in a ddpc.cpu that holds only it (torch.cpu.amp's path)."""
    from . import cuda
    cuda.amp = sys.modules[cuda.__name__ + ".amp"] = _device_amp("cuda")
    cpu = types.ModuleType(__name__.rpartition(".")[0] + ".cpu", "The host's mixed precision path, as torch.cpu's.")
    cpu.amp = sys.modules[cpu.__name__ + ".amp"] = _device_amp("cpu")
    sys.modules[cpu.__name__] = sys.modules[__name__.rpartition(".")[0]].cpu = cpu


_register_device_amp()

"""ddpc.nn.utils: gradient clipping, flattening parameters, weight and
spectral normalisation (the older hook-based forms), skip_init and batch-norm
fusion, as torch.nn.utils; packed sequences (ddpc.nn.utils.rnn),
parametrizations (ddpc.nn.utils.parametrize, .parametrizations) and pruning
(ddpc.nn.utils.prune)."""

import math
import warnings

from ... import autograd
from ...tensor import Tensor, float32, float64, tensor
from . import fusion, parametrizations, parametrize, prune, rnn, stateless  # noqa: F401  (torch.nn.utils's submodules)
from .fusion import fuse_conv_bn_eval, fuse_conv_bn_weights, fuse_linear_bn_eval, fuse_linear_bn_weights  # noqa: F401


def _tensors(tensors):
    return [tensors] if isinstance(tensors, Tensor) else list(tensors)


def _grads(parameters):
    return [p.grad for p in _tensors(parameters) if p.grad is not None]


def _norm_dtype(tensors):
    """The dtype of a total norm: float64 where a tensor is float64 (or
    complex128), as PyTorch's type promotion gives; float32 otherwise."""
    return float64 if any(t.dtype is float64 or t.dtype.name == "complex128" for t in tensors) else float32


def get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """The ``norm_type``-norm of all of ``tensors`` taken as one vector (any
    order: inf, -inf, 0 counting the nonzero per-tensor norms as PyTorch
    does, or a number): a 0-d tensor on the first tensor's device, computed
    there without waiting for the device, unless ``error_if_nonfinite`` asks
    to look at the result. It is float64 where a tensor is float64, as in
    PyTorch, and float32 otherwise: where ddpc differs, 16-bit tensors are
    widened and their norm is float32 (PyTorch's is 16-bit)."""
    del foreach
    # a sparse gradient's norm is its coalesced values' (repeated indices add up first)
    tensors = [t.coalesce()._values() if t.is_sparse else t for t in _tensors(tensors)]
    tensors = [t for t in tensors if t.numel()]
    norm_type = float(norm_type)
    if not tensors:
        return tensor(0.0, dtype=float32)
    device = tensors[0].device
    with autograd.no_grad():
        norms = [autograd.norm(t if t.dtype in (float32, float64) or t.dtype.is_complex else t.to(dtype=float32),
                               norm_type).to(device=device, dtype=float64).reshape(1) for t in tensors]
        total = autograd.norm(autograd.cat(norms), norm_type).to(dtype=_norm_dtype(tensors))
    if error_if_nonfinite and not math.isfinite(total.item()):
        raise RuntimeError(f"the total norm of order {norm_type} of the gradients is {total.item()}: not finite "
                           "(error_if_nonfinite=True)")
    return total


def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None):
    """Scales the gradients of ``parameters`` in place by max_norm / (total_norm
    + 1e-6) where that is below 1 (total_norm as get_total_norm gives it); a
    NaN total_norm makes them NaN, as PyTorch's clamped factor does. With
    total_norm on a GPU the factor stays there, clamped to 1, and every
    gradient is multiplied, as PyTorch does, so that nothing waits for the device."""
    del foreach
    grads = _grads(parameters)
    if not grads:
        return
    with autograd.no_grad():
        if isinstance(total_norm, Tensor) and total_norm._buf.device >= 0:
            norm = total_norm if total_norm.dtype is float64 else total_norm.to(dtype=float32)
            coef = autograd.clamp(float(max_norm) / (norm + 1e-6), max=1.0)
            for g in grads:
                g.mul_(coef.to(device=g.device, dtype=g.dtype))
            return
        coef = float(max_norm) / (float(total_norm) + 1e-6)
        if not coef >= 1.0:  # below 1, or NaN
            for g in grads:
                g.mul_(coef)


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Scales the gradients of ``parameters`` in place so that their joint
    ``norm_type``-norm (over all of them, as one vector) is at most
    ``max_norm``; returns that norm before scaling, a 0-d tensor whose dtype
    get_total_norm tells.

    Parameters that ``fully_shard`` sharded (each rank holding some of their
    rows) count with every rank's rows, as PyTorch's DTensor gradients do:
    the norm is the whole model's, the same on every rank of their mesh (one
    all-reduce per mesh, so every rank of it must call this); for them
    norm_type must be positive or inf."""
    parameters = _tensors(parameters)
    total = _total_grad_norm(parameters, norm_type, error_if_nonfinite, foreach)
    clip_grads_with_norm_(parameters, max_norm, total, foreach)
    return total


def clip_grad_norm(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Deprecated (as in PyTorch): clip_grad_norm_."""
    warnings.warn("`nn.utils.clip_grad_norm` is now deprecated in favor of `nn.utils.clip_grad_norm_`.", FutureWarning,
                  stacklevel=2)
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


def _total_grad_norm(parameters, norm_type, error_if_nonfinite, foreach):
    """get_total_norm of the parameters' gradients, the sharded ones' taken over their meshes."""
    from ...distributed.fsdp._fsdp_param import ShardedParameter, sharded_grad_norm  # the package imports nn

    by_mesh, whole = {}, []
    for p in parameters:
        if p.grad is not None:
            if isinstance(p, ShardedParameter):
                by_mesh.setdefault(p.device_mesh, []).append(p.grad)
            else:
                whole.append(p.grad)
    if by_mesh and not float(norm_type) > 0:
        # the shards' norms are combined as sums of powers (or a max), which orders <= 0 do not follow
        raise ValueError(f"norm_type must be > 0 or inf for parameters sharded by fully_shard, got {norm_type}")
    # the meshes' norms are float64: the total is rounded once, to the gradients' own norm dtype
    norms = [sharded_grad_norm(mesh, grads, norm_type) for mesh, grads in by_mesh.items()]
    total = get_total_norm(norms + whole, norm_type, error_if_nonfinite, foreach)
    return total.to(dtype=_norm_dtype([g for grads in by_mesh.values() for g in grads] + whole))


def parameters_to_vector(parameters):
    """The parameters flattened and joined into one 1-d tensor (differentiable)."""
    params = _tensors(parameters)
    if not params:
        raise ValueError("parameters_to_vector: no parameters given")
    device = params[0].device
    for p in params:
        if p.device != device:
            raise ValueError(f"parameters_to_vector: parameters are on different devices ({device} and {p.device})")
    return autograd.cat([p.reshape(-1) for p in params])


def vector_to_parameters(vec, parameters):
    """Makes each parameter's data the next slice of the 1-d tensor ``vec`` (views
    of vec, as in PyTorch, so later writes into vec show in the parameters)."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected vec to be a ddpc.Tensor, got {type(vec).__name__}")
    params = _tensors(parameters)
    need = sum(p.numel() for p in params)
    if vec.ndim != 1 or vec.numel() != need:
        raise ValueError(f"vector_to_parameters: vec has shape {vec.shape}, the parameters need {need} elements")
    at = 0
    for p in params:
        p.data = vec.detach()[at:at + p.numel()].reshape(p.shape)
        at += p.numel()


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamps every gradient element of ``parameters`` into [-clip_value, clip_value] in place."""
    del foreach
    c = float(clip_value)
    with autograd.no_grad():
        for g in _grads(parameters):
            g.clamp_(-c, c)


class WeightNorm:
    """The forward pre-hook of the older ``weight_norm``: sets ``<name>`` from
    ``<name>_g`` and ``<name>_v``. An object of a module-level class, as
    PyTorch's, so that a module holding it pickles and deep-copies."""

    def __init__(self, name, dim):
        self.name, self.dim = name, dim

    def compute_weight(self, module):
        from .parametrizations import _weight_norm

        return _weight_norm(getattr(module, self.name + "_v"), getattr(module, self.name + "_g"), self.dim)

    def __call__(self, module, inputs):
        setattr(module, self.name, self.compute_weight(module))


class SpectralNorm:
    """The forward pre-hook of the older ``spectral_norm``: sets ``<name>`` to
    ``<name>_orig`` / sigma after ``n_power_iterations`` power steps in
    training mode (none in eval mode). A module-level class, as PyTorch's."""

    def __init__(self, name, n_power_iterations, dim, eps):
        self.name, self.n_power_iterations, self.dim, self.eps = name, n_power_iterations, dim, eps

    def compute_weight(self, module, iterations):
        """``<name>_orig`` / sigma after ``iterations`` power steps on the module's vectors."""
        from .parametrizations import _as_matrix, _power_iteration, _sigma

        weight, u, v = (getattr(module, self.name + suffix) for suffix in ("_orig", "_u", "_v"))
        mat = _as_matrix(weight, self.dim)
        # v = normalize(W^T u), then u = normalize(W v): the power step on W^T with the vectors' roles swapped
        _power_iteration(mat.detach().t(), v, u, iterations, self.eps)
        return weight / _sigma(mat, u, v)

    def __call__(self, module, inputs):
        setattr(module, self.name, self.compute_weight(module, self.n_power_iterations if module.training else 0))


def _norm_hook(module, kind, name):
    """The id under which ``module`` holds its ``kind`` forward pre-hook for ``name``, or None."""
    return next((key for key, hook in module._forward_pre_hooks.items()
                 if isinstance(hook, kind) and hook.name == name), None)


def weight_norm(module, name="weight", dim=0):
    """The older form of ``parametrizations.weight_norm``: parameters
    ``<name>_g`` and ``<name>_v``, and ``<name>`` recomputed from them by a
    ``WeightNorm`` forward pre-hook before every forward. ``remove_weight_norm``
    undoes it."""
    from ..modules import Parameter
    from .parametrizations import _WeightNorm

    if _norm_hook(module, WeightNorm, name) is not None:
        raise RuntimeError(f"cannot register two weight_norm hooks on the same parameter {name}")
    weight = module._parameters.get(name)
    if weight is None:
        raise ValueError(f"module {type(module).__name__} has no parameter named {name!r}")
    hook = WeightNorm(name, -1 if dim is None else dim)
    g, v = _WeightNorm(hook.dim).right_inverse(weight.detach())
    del module._parameters[name]
    module.register_parameter(name + "_g", Parameter(g))
    module.register_parameter(name + "_v", Parameter(weight.detach()))
    hook(module, ())
    module.register_forward_pre_hook(hook)
    return module


def remove_weight_norm(module, name="weight"):
    """Makes ``<name>`` a plain parameter again, holding its current value."""
    from ..modules import Parameter

    key = _norm_hook(module, WeightNorm, name)
    if key is None:
        raise ValueError(f"weight_norm of {name!r} not found in {type(module).__name__}")
    hook = module._forward_pre_hooks.pop(key)
    with autograd.no_grad():
        weight = hook.compute_weight(module)
    del module._parameters[name + "_g"], module._parameters[name + "_v"]
    module.__dict__.pop(name, None)
    module.register_parameter(name, Parameter(weight.detach()))
    return module


def spectral_norm(module, name="weight", n_power_iterations=1, eps=1e-12, dim=None):
    """The older form of ``parametrizations.spectral_norm``: parameter
    ``<name>_orig``, buffers ``<name>_u`` and ``<name>_v``, and ``<name>`` =
    W / sigma(W) recomputed by a ``SpectralNorm`` forward pre-hook before every
    forward, with ``n_power_iterations`` power steps in training mode (v first,
    as in PyTorch's older form). ``dim`` (1 for transposed convolutions, else
    0) gives the rows of W as a matrix. ``remove_spectral_norm`` undoes it."""
    from ...tensor import randn
    from .. import functional as F
    from ..modules import ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
    from .parametrizations import _as_matrix

    if _norm_hook(module, SpectralNorm, name) is not None:
        raise RuntimeError(f"Cannot register two spectral_norm hooks on the same parameter {name}")
    weight = module._parameters.get(name)
    if weight is None:
        raise ValueError(f"module {type(module).__name__} has no parameter named {name!r}")
    if n_power_iterations <= 0:
        raise ValueError(f"Expected n_power_iterations to be positive, but got n_power_iterations="
                         f"{n_power_iterations}")
    if dim is None:
        dim = 1 if isinstance(module, (ConvTranspose1d, ConvTranspose2d, ConvTranspose3d)) else 0
    h, w = _as_matrix(weight.detach(), dim).shape
    del module._parameters[name]
    module.register_parameter(name + "_orig", weight)
    for suffix, n in (("_u", h), ("_v", w)):
        module.register_buffer(name + suffix, F.normalize(randn(n, dtype=weight.dtype, device=weight.device), dim=0,
                                                          eps=eps))
    setattr(module, name, weight.detach())
    module.register_forward_pre_hook(SpectralNorm(name, n_power_iterations, dim, eps))
    return module


def remove_spectral_norm(module, name="weight"):
    """Makes ``<name>`` a plain parameter again, holding its current value."""
    from ..modules import Parameter

    key = _norm_hook(module, SpectralNorm, name)
    if key is None:
        raise ValueError(f"spectral_norm of {name!r} not found in {type(module).__name__}")
    hook = module._forward_pre_hooks.pop(key)
    with autograd.no_grad():
        weight = hook.compute_weight(module, 0)
    del module._parameters[name + "_orig"], module._buffers[name + "_u"], module._buffers[name + "_v"]
    module.__dict__.pop(name, None)
    module.register_parameter(name, Parameter(weight.detach()))
    return module


def skip_init(module_cls, *args, **kwargs):
    """``module_cls(*args, **kwargs)``. PyTorch builds the module without
    running its parameter initialisation (on the meta device, then empty
    storage); ddpc has no meta device, so the parameters are initialised as
    usual. Like PyTorch's, it refuses a class whose constructor takes no
    ``device`` argument."""
    import inspect

    if "device" not in inspect.signature(module_cls).parameters:
        raise RuntimeError("Module must support a 'device' arg to skip initialization")
    return module_cls(*args, **kwargs)

"""Weight normalisation and spectral normalisation as parametrizations, as
torch.nn.utils.parametrizations: ``weight_norm(module)`` stores a weight as
a magnitude ``original0`` (g) and a direction ``original1`` (v), and
``spectral_norm(module)`` divides it by its largest singular value, estimated
by power iteration (one step per training-mode forward, on vectors kept as
buffers ``_u`` and ``_v``)."""

from ... import autograd
from ...tensor import Tensor, randn
from .. import functional as F
from ..modules import ConvTranspose1d, ConvTranspose2d, ConvTranspose3d, Module
from .parametrize import register_parametrization

__all__ = ["spectral_norm", "weight_norm"]


def _norm_except_dim(v, dim):
    """The 2-norm of v over every dim but ``dim``, kept as size-1 dims; over all of v when dim is -1."""
    if dim == -1:
        return v.norm()
    d = dim % v.ndim
    others = [i for i in range(v.ndim) if i != d]
    return v.norm(2, dim=others, keepdim=True) if others else v.abs()


def _weight_norm(v, g, dim):
    """v scaled to the norm g along ``dim`` (PyTorch's torch._weight_norm)."""
    return v * (g / _norm_except_dim(v, dim))


class _WeightNorm(Module):
    def __init__(self, dim=0):
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g, weight_v):
        return _weight_norm(weight_v, weight_g, self.dim)

    def right_inverse(self, weight):
        return _norm_except_dim(weight, self.dim), weight


def weight_norm(module, name="weight", dim=0):
    """Reparametrizes ``module.<name>`` as g * v / ||v||, the norm taken over
    every dim but ``dim`` (over the whole tensor for None or -1). As PyTorch's,
    the module then also loads a checkpoint of the older nn.utils.weight_norm
    (``<name>_g`` and ``<name>_v`` become ``original0`` and ``original1``)."""
    register_parametrization(module, name, _WeightNorm(dim), unsafe=True)

    def _weight_norm_compat_hook(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                 error_msgs):
        g_key, v_key = f"{prefix}{name}_g", f"{prefix}{name}_v"
        if g_key in state_dict and v_key in state_dict:
            state_dict[f"{prefix}parametrizations.{name}.original0"] = state_dict.pop(g_key)
            state_dict[f"{prefix}parametrizations.{name}.original1"] = state_dict.pop(v_key)

    module._register_load_state_dict_pre_hook(_weight_norm_compat_hook)
    return module


def _as_matrix(weight, dim):
    """``weight`` as a matrix whose rows run along ``dim``."""
    if dim != 0:
        weight = weight.permute(dim, *(d for d in range(weight.ndim) if d != dim))
    return weight.reshape(weight.shape[0], -1)


def _power_iteration(mat, u, v, iterations, eps):
    """``iterations`` steps of the power method on ``mat``, written into the
    vectors: u = normalize(mat v), then v = normalize(mat^T u)."""
    with autograd.no_grad():
        for _ in range(iterations):
            u.copy_(F.normalize(mat.mv(v), dim=0, eps=eps))
            v.copy_(F.normalize(mat.t().mv(u), dim=0, eps=eps))


def _sigma(mat, u, v):
    """The estimate u^T mat v of mat's largest singular value; copies of the
    vectors, which later power steps overwrite, go into the graph."""
    return (u.clone() * mat.mv(v.clone())).sum()


class _SpectralNorm(Module):
    def __init__(self, weight, n_power_iterations=1, dim=0, eps=1e-12):
        super().__init__()
        ndim = weight.ndim
        if not -ndim <= dim < max(ndim, 1):
            raise IndexError(f"dim {dim} is out of range for a weight of {ndim} dims")
        if n_power_iterations <= 0:
            raise ValueError(f"expected n_power_iterations to be positive, but got "
                             f"n_power_iterations={n_power_iterations}")
        self.dim = dim % max(ndim, 1)
        self.eps = eps
        if ndim > 1:
            self.n_power_iterations = n_power_iterations
            mat = _as_matrix(weight.detach(), self.dim)
            h, w = mat.shape
            self.register_buffer("_u", F.normalize(randn(h, dtype=mat.dtype, device=mat.device), dim=0,
                                                   eps=eps))
            self.register_buffer("_v", F.normalize(randn(w, dtype=mat.dtype, device=mat.device), dim=0,
                                                   eps=eps))
            _power_iteration(mat, self._u, self._v, 15, eps)

    def forward(self, weight):
        if weight.ndim == 1:
            return F.normalize(weight, dim=0, eps=self.eps)
        mat = _as_matrix(weight, self.dim)
        if self.training:
            _power_iteration(mat.detach(), self._u, self._v, self.n_power_iterations, self.eps)
        return weight / _sigma(mat, self._u, self._v)

    def right_inverse(self, value):
        return value


def spectral_norm(module, name="weight", n_power_iterations=1, eps=1e-12, dim=None):
    """Reparametrizes ``module.<name>`` as W / sigma(W), sigma the largest
    singular value of W seen as a matrix with ``dim`` (1 for transposed
    convolutions, else 0) as its rows."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"module {type(module).__name__} has no parameter or buffer named {name!r}")
    if dim is None:
        dim = 1 if isinstance(module, (ConvTranspose1d, ConvTranspose2d, ConvTranspose3d)) else 0
    return register_parametrization(module, name, _SpectralNorm(weight, n_power_iterations, dim, eps))

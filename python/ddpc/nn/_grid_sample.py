"""Spatial transformers' sampling, as torch.nn.functional.grid_sample and
affine_grid.

grid_sample reads a 4-d input (N, C, H, W) at the points of a grid
(N, Ho, Wo, 2), or a 5-d input (N, C, D, H, W) at those of a grid
(N, Do, Ho, Wo, 3), with PyTorch's rules: coordinates x, y (, z) in [-1, 1]
run along W, H (, D); 'bilinear' (trilinear on 5-d input), 'nearest'
(rounding half to even) or 'bicubic' (4-d only, Keys' A = -0.75)
interpolation; 'zeros', 'border' or 'reflection' padding. The work and both
gradients are the _C ops grid_sample and grid_sample_backward (C loops and
CUDA kernels over one per-point rule, kernels/grid_sample.h). As in PyTorch,
the gradients of grid_sample cannot be differentiated again. The
coordinates are computed in double for every dtype (PyTorch's in the
element type), so a float32 point lying within rounding of a pixel boundary
may fall on the other side of it than in PyTorch: the grid gradient, the
interpolant's slope, jumps there, and 'nearest' may pick the neighbour. A
point with a NaN or infinite coordinate reads NaN in 'bicubic' mode and in
4-d 'bilinear' mode with 'zeros' padding, as in PyTorch, 0 otherwise (its
gradients are 0).

affine_grid is a product of the identity grid by the affine matrices, so
its gradient with respect to theta comes from the matmul.
"""

import numpy as np

from .. import _C
from .. import autograd as _ag
from .._C import ArgumentError, DtypeError
from ..amp import autocast_op
from ..backends import alert_not_deterministic
from ..tensor import Tensor, tensor

_MODES = {"bilinear": 0, "nearest": 1, "bicubic": 2}
_PADDING_MODES = {"zeros": 0, "border": 1, "reflection": 2}


class _GridSamplerBackward(_ag.Node):
    def __init__(self, input, grid, x, points, args):
        super().__init__((input, grid), (x, points))
        self.args = args

    def name(self):
        return f"GridSampler{self.saved[0].ndim - 2}DBackward"

    def backward(self, g):
        x, points = self.saved
        need_x, need_grid = (e is not None for e in self.edges)
        gx = _ag._empty(x.shape, g) if need_x else None
        ggrid = _ag._empty(points.shape, g) if need_grid else None
        alert_not_deterministic("grid_sample's backward", g)
        _C.grid_sample_backward(None if gx is None else gx._buf, None if ggrid is None else ggrid._buf,
                                g.contiguous()._buf, x._buf, points._buf, *self.args)
        return gx, ggrid


def _check_operands(input, grid, mode, padding_mode):
    for t, what in ((input, "input"), (grid, "grid")):
        if not isinstance(t, Tensor):
            raise TypeError(f"grid_sample(): the {what} must be a ddpc tensor, got {type(t).__name__}")
    if mode not in _MODES:
        raise ArgumentError("nn.functional.grid_sample(): expected mode to be 'bilinear', 'nearest' or 'bicubic', but "
                            f"got: {mode!r}")
    if padding_mode not in _PADDING_MODES:
        raise ArgumentError("nn.functional.grid_sample(): expected padding_mode to be 'zeros', 'border', or "
                            f"'reflection', but got: {padding_mode!r}")
    if input.ndim not in (4, 5):
        raise ArgumentError(f"grid_sampler(): expected 4D or 5D input, but got input with sizes {list(input.shape)}")
    dims = input.ndim - 2
    if grid.ndim != input.ndim or grid.shape[-1] != dims:
        raise ArgumentError(f"grid_sampler(): expected a grid of shape (N, {', '.join('*' * dims)}, {dims}) for "
                            f"{input.ndim}D input, but got grid with sizes {list(grid.shape)}")
    if grid.shape[0] != input.shape[0]:
        raise ArgumentError("grid_sampler(): expected grid and input to have same batch size, but got input with "
                            f"sizes {list(input.shape)} and grid with sizes {list(grid.shape)}")
    if 0 in input.shape[2:]:
        raise ArgumentError("grid_sampler(): expected input to have non-empty spatial dimensions, but input has sizes "
                            f"{list(input.shape)}")
    if mode == "bicubic" and dims != 2:
        raise ArgumentError("grid_sampler(): bicubic interpolation only supports 4D input")
    if not input.dtype.is_floating_point or input.dtype is not grid.dtype:
        raise DtypeError("grid_sampler(): expected input and grid to have the same floating-point dtype, but got "
                         f"{input.dtype} and {grid.dtype}")
    if input._buf.device != grid._buf.device:
        raise ArgumentError(f"grid_sampler(): expected input and grid on one device, got {input.device} and "
                            f"{grid.device}")


@autocast_op("float32_cpu")
def grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    """``input`` (N, C, H, W) or (N, C, D, H, W) sampled at the points of
    ``grid`` (N, Ho, Wo, 2) or (N, Do, Ho, Wo, 3), coordinates in [-1, 1],
    into (N, C, Ho, Wo) or (N, C, Do, Ho, Wo). ``align_corners`` None means
    False, as in PyTorch (which warns about it)."""
    _check_operands(input, grid, mode, padding_mode)
    if input.dtype in _ag._HALVES:
        return grid_sample(input.float(), grid.float(), mode, padding_mode, align_corners).to(dtype=input.dtype)
    x, points = input.detach().contiguous(), grid.detach().contiguous()
    args = (_MODES[mode], _PADDING_MODES[padding_mode], bool(align_corners))
    out = _ag._empty(tuple(input.shape[:2]) + tuple(grid.shape[1:-1]), x)
    _C.grid_sample(out._buf, x._buf, points._buf, *args)
    if mode == "bicubic" or (mode == "bilinear" and padding_mode == "zeros" and input.ndim == 4):
        # PyTorch's weights make NaN of a point with a NaN or infinite coordinate in these modes (its others read
        # some element there, or crash): a diverging grid shows in the output
        out.masked_fill_(~points.isfinite().all(-1).unsqueeze(1), float("nan"))
    if _ag._needs_grad(input, grid):
        _ag._attach(out, _GridSamplerBackward(input, grid, x, points, args))
    return out


def _steps(n, align_corners):
    """PyTorch's n coordinates of an affine grid along one dim: from -1 to 1,
    times (n - 1) / n without align_corners; 0 for n = 1."""
    if n <= 1:
        return np.zeros(n)
    steps = np.linspace(-1.0, 1.0, n)
    return steps if align_corners else steps * (n - 1) / n


def affine_grid(theta, size, align_corners=None):
    """The grid (N, H, W, 2) or (N, D, H, W, 3) for grid_sample that the
    affine matrices ``theta`` (N, 2, 3) or (N, 3, 4) make of the identity
    grid of ``size`` (N, C, H, W) or (N, C, D, H, W). ``align_corners`` None
    means False, as in PyTorch (which warns about it)."""
    if not isinstance(theta, Tensor):
        raise TypeError(f"affine_grid(): theta must be a ddpc tensor, got {type(theta).__name__}")
    if not theta.dtype.is_floating_point:
        raise ArgumentError(f"Expected theta to have floating point type, but got {theta.dtype}")
    size = [int(s) for s in size]
    if len(size) not in (4, 5):
        raise NotImplementedError(f"affine_grid only supports 4D and 5D sizes, for 2D and 3D affine transforms, "
                                  f"respectively. Got size {size}.")
    dims = len(size) - 2
    if theta.ndim != 3 or tuple(theta.shape[1:]) != (dims, dims + 1):
        raise ArgumentError(f"Expected a batch of {dims}D affine matrices of shape Nx{dims}x{dims + 1} for size "
                            f"{size}. Got {tuple(theta.shape)}.")
    if theta.shape[0] != size[0]:
        raise ArgumentError(f"affine_grid(): theta holds {theta.shape[0]} matrices for a batch of {size[0]}")
    if min(size) <= 0 and not (align_corners and min(size[2:]) == 1):
        raise ArgumentError(f"Expected non-zero, positive output size. Got {size}")
    spatial = size[2:]
    # The identity grid's homogeneous points (x, y(, z), 1), x varying fastest.
    coords = np.meshgrid(*[_steps(n, align_corners) for n in spatial], indexing="ij")
    homogeneous = np.stack(list(coords[::-1]) + [np.ones(tuple(spatial))], axis=-1).reshape(-1, dims + 1)
    points = tensor(homogeneous, dtype=theta.dtype, device=theta.device)
    grid = points @ theta.transpose(1, 2)
    return grid.reshape([size[0]] + spatial + [dims])

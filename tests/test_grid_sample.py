"""F.grid_sample and F.affine_grid against closed forms and a per-point
numpy reference: identity grids, integer shifts, the padding modes outside
the input, gradients of the input, the grid and theta against central
differences, and the argument checks; a gpu-marked test compares the CUDA
kernels with the host loops."""

import itertools

import numpy as np
import pytest
from numeric import numeric_grad

import ddpc
import ddpc.nn.functional as F

MODES_2D = ("bilinear", "nearest", "bicubic")
PADDINGS = ("zeros", "border", "reflection")


def _identity(n, spatial, align_corners, dtype=np.float64):
    dims = len(spatial)
    theta = np.zeros((n, dims, dims + 1), dtype)
    theta[:, range(dims), range(dims)] = 1
    return F.affine_grid(ddpc.tensor(theta), (n, 1) + tuple(spatial), align_corners=align_corners)


# ---- a per-point reference (2-d, bilinear and nearest) ------------------------------------

def _pad_position(p, size, padding, align_corners):
    if padding == "zeros":
        return p
    if padding == "reflection":
        if align_corners:
            if size == 1:
                return 0.0
            period = 2 * (size - 1)
            p = abs(p) % period
            p = period - p if p > size - 1 else p
        else:
            q = abs(p + 0.5) % (2 * size)
            p = (2 * size - q if q > size else q) - 0.5
    return min(max(p, 0.0), size - 1.0)


def _reference_2d(x, grid, mode, padding, align_corners):
    n, c, h, w = x.shape
    out = np.zeros((n, c) + grid.shape[1:3])
    for b, i, j in itertools.product(range(n), range(grid.shape[1]), range(grid.shape[2])):
        gx, gy = grid[b, i, j]
        px = (gx + 1) / 2 * (w - 1) if align_corners else ((gx + 1) * w - 1) / 2
        py = (gy + 1) / 2 * (h - 1) if align_corners else ((gy + 1) * h - 1) / 2
        px, py = _pad_position(px, w, padding, align_corners), _pad_position(py, h, padding, align_corners)
        if mode == "nearest":
            corners = [(int(np.rint(px)), int(np.rint(py)), 1.0)]
        else:
            x0, y0 = int(np.floor(px)), int(np.floor(py))
            fx, fy = px - x0, py - y0
            corners = [(x0, y0, (1 - fx) * (1 - fy)), (x0 + 1, y0, fx * (1 - fy)), (x0, y0 + 1, (1 - fx) * fy),
                       (x0 + 1, y0 + 1, fx * fy)]
        for cx, cy, weight in corners:
            if 0 <= cx < w and 0 <= cy < h:
                out[b, :, i, j] += weight * x[b, :, cy, cx]
    return out


# ---- closed forms ------------------------------------------------------------------------

@pytest.mark.parametrize("align_corners", [True, False])
@pytest.mark.parametrize("mode", MODES_2D)
def test_identity_grid_reproduces_the_input_2d(mode, align_corners):
    x = np.random.default_rng(0).standard_normal((2, 3, 5, 7))
    grid = _identity(2, (5, 7), align_corners)
    for padding in PADDINGS:
        y = F.grid_sample(ddpc.tensor(x), grid, mode, padding, align_corners)
        np.testing.assert_allclose(np.asarray(y), x, atol=1e-12)


@pytest.mark.parametrize("align_corners", [True, False])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_identity_grid_reproduces_the_input_3d(mode, align_corners):
    x = np.random.default_rng(1).standard_normal((2, 2, 3, 4, 5))
    y = F.grid_sample(ddpc.tensor(x), _identity(2, (3, 4, 5), align_corners), mode, "zeros", align_corners)
    np.testing.assert_allclose(np.asarray(y), x, atol=1e-12)


def test_affine_grid_points():
    """Without align_corners the points are the pixel centres, (2i + 1) / n - 1."""
    g = np.asarray(_identity(1, (2, 4), False))
    np.testing.assert_allclose(g[0, 1, :, 0], [-0.75, -0.25, 0.25, 0.75])
    np.testing.assert_allclose(g[0, :, 2, 1], [-0.5, 0.5])
    g = np.asarray(_identity(1, (3, 2, 5), True))
    np.testing.assert_allclose(g[0, :, 1, 4], [[1, 1, -1], [1, 1, 0], [1, 1, 1]])
    theta = ddpc.tensor([[[0.0, -1.0, 0.5], [2.0, 0.0, 0.0]]])  # y' = 2x, x' = -y + 0.5
    g = np.asarray(F.affine_grid(theta, (1, 1, 3, 3), align_corners=True))
    np.testing.assert_allclose(g[0, 0, 2], [1.5, 2.0])


@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("shift", [1, 2, -3])
def test_integer_shift(shift, padding):
    """A translation by `shift` pixels along x reads column j + shift; outside
    the input: zeros, the edge column, or the mirrored column."""
    w = 6
    x = np.random.default_rng(2).standard_normal((1, 2, 3, w))
    theta = np.array([[[1.0, 0.0, 2.0 * shift / w], [0.0, 1.0, 0.0]]])
    grid = F.affine_grid(ddpc.tensor(theta), (1, 2, 3, w), align_corners=False)
    for mode in ("bilinear", "nearest"):
        y = np.asarray(F.grid_sample(ddpc.tensor(x), grid, mode, padding, False))
        for j in range(w):
            src = j + shift
            if 0 <= src < w:
                want = x[..., src]
            elif padding == "zeros":
                want = np.zeros_like(x[..., 0])
            elif padding == "border":
                want = x[..., min(max(src, 0), w - 1)]
            else:
                want = x[..., -src - 1 if src < 0 else 2 * w - 1 - src]
            np.testing.assert_allclose(y[..., j], want, atol=1e-12, err_msg=f"{mode} column {j}")


@pytest.mark.parametrize("align_corners", [True, False])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_matches_the_reference_outside_the_input(mode, padding, align_corners):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 4, 5))
    grid = rng.uniform(-3.5, 3.5, (2, 6, 7, 2))
    y = F.grid_sample(ddpc.tensor(x), ddpc.tensor(grid), mode, padding, align_corners)
    np.testing.assert_allclose(np.asarray(y), _reference_2d(x, grid, mode, padding, align_corners), atol=1e-12)


def test_nearest_rounds_half_to_even():
    x = ddpc.tensor(np.arange(5.0).reshape(1, 1, 1, 5))
    # align_corners: position (g + 1) * 2, so 0.5, 1.5, 2.5 and 3.5 -> 0, 2, 2, 4
    grid = ddpc.tensor([[[[-0.75, 0.0], [-0.25, 0.0], [0.25, 0.0], [0.75, 0.0]]]], dtype=ddpc.float64)
    y = F.grid_sample(x, grid, "nearest", "zeros", True)
    np.testing.assert_array_equal(np.asarray(y).ravel(), [0, 2, 2, 4])


def test_bicubic_at_pixel_centres_and_between():
    """At a pixel the cubic weights are (0, 1, 0, 0); half way between two pixels
    of a linear ramp the cubic convolution gives the midpoint."""
    x = np.tile(np.arange(8.0), (1, 1, 8, 1))
    pos = np.array([2.0, 3.5, 4.5])  # positions along x, align_corners=True
    gx = pos / 7 * 2 - 1
    grid = np.stack([gx, np.zeros(3)], -1).reshape(1, 1, 3, 2)
    y = F.grid_sample(ddpc.tensor(x), ddpc.tensor(grid), "bicubic", "border", True)
    np.testing.assert_allclose(np.asarray(y).ravel(), pos, atol=1e-12)


def test_float32_and_float16():
    rng = np.random.default_rng(4)
    x, grid = rng.standard_normal((1, 2, 5, 6)), rng.uniform(-1.2, 1.2, (1, 3, 4, 2))
    want = F.grid_sample(ddpc.tensor(x), ddpc.tensor(grid), align_corners=False)
    for dtype, tol in ((np.float32, 1e-5), (np.float16, 2e-2)):
        y = F.grid_sample(ddpc.tensor(x.astype(dtype)), ddpc.tensor(grid.astype(dtype)), align_corners=False)
        assert y.dtype.name == np.dtype(dtype).name
        np.testing.assert_allclose(np.asarray(y).astype(np.float64), np.asarray(want), atol=tol)


# ---- gradients --------------------------------------------------------------------------

CASES = ([("bilinear", p, a, 4) for p in PADDINGS for a in (True, False)]
         + [("bicubic", p, a, 4) for p in PADDINGS for a in (True, False)]
         + [("nearest", p, a, 4) for p in PADDINGS for a in (True, False)]
         + [(m, p, a, 5) for m in ("bilinear", "nearest") for p in PADDINGS for a in (True, False)])


@pytest.mark.parametrize("mode,padding,align_corners,ndim", CASES)
def test_gradients_match_central_differences(mode, padding, align_corners, ndim):
    rng = np.random.default_rng(5)
    spatial, out = ((4, 5), (3, 2)) if ndim == 4 else ((3, 4, 3), (2, 2, 2))
    x0 = rng.standard_normal((2, 2) + spatial)
    grid0 = rng.uniform(-1.6, 1.6, (2,) + out + (ndim - 2,))
    weight = rng.standard_normal((2, 2) + out)

    def loss(x, grid):
        return (F.grid_sample(x, grid, mode, padding, align_corners) * ddpc.tensor(weight)).sum()

    x, grid = ddpc.tensor(x0, requires_grad=True), ddpc.tensor(grid0, requires_grad=True)
    loss(x, grid).backward()
    np.testing.assert_allclose(np.asarray(x.grad), numeric_grad(lambda a: float(loss(ddpc.tensor(a),
                                                                                     ddpc.tensor(grid0))), x0),
                               atol=1e-6)
    want = numeric_grad(lambda a: float(loss(ddpc.tensor(x0), ddpc.tensor(a))), grid0)
    np.testing.assert_allclose(np.asarray(grid.grad), want, atol=1e-5)
    if mode == "nearest":
        assert not np.asarray(grid.grad).any()


def test_gradient_of_theta():
    rng = np.random.default_rng(6)
    x0, theta0 = rng.standard_normal((2, 3, 5, 4)), rng.uniform(-0.8, 0.8, (2, 2, 3))

    def loss(theta):
        grid = F.affine_grid(theta, (2, 3, 4, 6), align_corners=False)
        return (F.grid_sample(ddpc.tensor(x0), grid, "bilinear", "border", False) ** 2).sum()

    theta = ddpc.tensor(theta0, requires_grad=True)
    loss(theta).backward()
    want = numeric_grad(lambda a: float(loss(ddpc.tensor(a))), theta0)
    np.testing.assert_allclose(np.asarray(theta.grad), want, atol=1e-5)


def test_only_the_wanted_gradient():
    x = ddpc.tensor(np.ones((1, 1, 3, 3)), requires_grad=True)
    grid = ddpc.tensor(np.zeros((1, 2, 2, 2)))
    F.grid_sample(x, grid, align_corners=True).sum().backward()
    np.testing.assert_allclose(np.asarray(x.grad)[0, 0], [[0, 0, 0], [0, 4, 0], [0, 0, 0]])
    assert grid.grad is None


def test_second_derivatives_are_refused():
    x = ddpc.tensor(np.ones((1, 1, 3, 3)), requires_grad=True)
    grid = ddpc.tensor(np.full((1, 2, 2, 2), 0.3), requires_grad=True)
    y = (F.grid_sample(x, grid, align_corners=False) ** 2).sum()
    (plain,) = ddpc.autograd.grad(y, grid, retain_graph=True)
    (g,) = ddpc.autograd.grad(y, grid, create_graph=True)  # the first-order gradient is computed ...
    np.testing.assert_array_equal(g.detach().numpy(), plain.numpy())
    with pytest.raises(NotImplementedError, match="GridSampler2DBackward"):  # ... but not differentiated again
        ddpc.autograd.grad(g.sum(), grid)


# ---- argument checks ------------------------------------------------------------------------

def test_bad_arguments():
    x, grid = ddpc.zeros(1, 2, 3, 3), ddpc.zeros(1, 2, 2, 2)
    with pytest.raises(ValueError, match="mode"):
        F.grid_sample(x, grid, mode="linear")
    with pytest.raises(ValueError, match="padding_mode"):
        F.grid_sample(x, grid, padding_mode="circular")
    with pytest.raises(ValueError, match="bicubic"):
        F.grid_sample(ddpc.zeros(1, 2, 3, 3, 3), ddpc.zeros(1, 2, 2, 2, 3), mode="bicubic")
    with pytest.raises(ValueError, match="grid"):
        F.grid_sample(x, ddpc.zeros(1, 2, 2, 3))
    with pytest.raises(ValueError, match="batch size"):
        F.grid_sample(x, ddpc.zeros(2, 2, 2, 2))
    with pytest.raises(ValueError, match="4D or 5D"):
        F.grid_sample(ddpc.zeros(2, 3, 3), ddpc.zeros(2, 2, 2))
    with pytest.raises(ValueError, match="non-empty"):
        F.grid_sample(ddpc.zeros(1, 2, 0, 3), grid)
    with pytest.raises(TypeError, match="dtype"):
        F.grid_sample(x, ddpc.zeros(1, 2, 2, 2, dtype=ddpc.float64))
    with pytest.raises(ValueError, match="Nx2x3"):
        F.affine_grid(ddpc.zeros(1, 3, 4), (1, 1, 3, 3))
    with pytest.raises(NotImplementedError, match="4D and 5D"):
        F.affine_grid(ddpc.zeros(1, 2, 3), (1, 1, 3))
    with pytest.raises(ValueError, match="positive"):
        F.affine_grid(ddpc.zeros(1, 2, 3), (1, 1, 0, 3))


def test_the_op_refuses_mismatched_buffers():
    x, grid = ddpc.zeros(1, 2, 3, 3), ddpc.zeros(1, 2, 2, 2)
    with pytest.raises(ValueError, match="shape"):
        ddpc._C.grid_sample(ddpc.zeros(1, 2, 2, 3)._buf, x._buf, grid._buf, 0, 0, False)
    with pytest.raises(ValueError, match="mode"):
        ddpc._C.grid_sample(ddpc.zeros(1, 2, 2, 2)._buf, x._buf, grid._buf, 7, 0, False)


# ---- host against CUDA ------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("mode,padding,align_corners,ndim", CASES)
def test_cuda_matches_host(mode, padding, align_corners, ndim):
    rng = np.random.default_rng(7)
    spatial, out = ((9, 11), (7, 8)) if ndim == 4 else ((5, 6, 7), (4, 5, 3))
    x0 = rng.standard_normal((3, 4) + spatial)
    grid0 = rng.uniform(-1.4, 1.4, (3,) + out + (ndim - 2,))
    weight = rng.standard_normal((3, 4) + out)
    results = []
    for device in ("cpu", "cuda"):
        x = ddpc.tensor(x0, device=device, requires_grad=True)
        grid = ddpc.tensor(grid0, device=device, requires_grad=True)
        y = F.grid_sample(x, grid, mode, padding, align_corners)
        (y * ddpc.tensor(weight, device=device)).sum().backward()
        results.append([np.asarray(t.cpu()) for t in (y.detach(), x.grad, grid.grad)])
    for host, cuda in zip(*results):
        np.testing.assert_allclose(cuda, host, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("mode, padding_mode, nd, reads_nan", [
    ("bilinear", "zeros", 2, True), ("bicubic", "zeros", 2, True), ("bicubic", "border", 2, True),
    ("bicubic", "reflection", 2, True), ("nearest", "zeros", 2, False), ("bilinear", "zeros", 3, False)])
def test_a_nan_or_infinite_grid_point_reads_nan_where_pytorch_does(mode, padding_mode, nd, reads_nan):
    # PyTorch's outputs: NaN in bicubic mode and 4-d bilinear mode with zeros padding, 0 in these others
    x = ddpc.ones((1, 2) + (3,) * nd, dtype=ddpc.float64)
    points = [[float("nan")] + [0.0] * (nd - 1), [0.0] * (nd - 1) + [float("inf")], [0.0] * nd]
    grid = ddpc.tensor(points, dtype=ddpc.float64).reshape((1,) * nd + (3, nd))
    got = F.grid_sample(x, grid, mode=mode, padding_mode=padding_mode, align_corners=False).reshape(2, 3).numpy()
    bad = np.full((2, 2), np.nan if reads_nan else 0.0)
    np.testing.assert_array_equal(got, np.concatenate([bad, np.ones((2, 1))], axis=1))

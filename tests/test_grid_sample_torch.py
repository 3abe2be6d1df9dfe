"""Optional: F.grid_sample and F.affine_grid against PyTorch's (skipped when
torch is not installed): values and the gradients of the input and the grid
over random grids reaching outside [-1, 1], for every mode, padding mode and
align_corners, 4-d and 5-d, in float64 and float32; and affine_grid's grid
and theta gradient.

Each comparison runs in a child process that imports torch before ddpc (see
test_nn_torch.py) and fails there, printing what it measured.
"""

import sys

import pytest
from procs import run_torch_case


@pytest.mark.parametrize("case", ["grid_sample", "affine_grid"])
def test_matches_pytorch(case):
    out = run_torch_case(__file__, case)
    assert out.strip().endswith("ok"), out


def _case_grid_sample():
    import numpy as np
    import torch

    import ddpc
    import ddpc.nn.functional as F

    rng = np.random.default_rng(0)
    worst, checked = {}, 0
    for ndim in (4, 5):
        modes = ("bilinear", "nearest", "bicubic") if ndim == 4 else ("bilinear", "nearest")
        spatial, out = ((6, 7), (5, 9)) if ndim == 4 else ((4, 5, 6), (3, 4, 5))
        for mode in modes:
            for padding in ("zeros", "border", "reflection"):
                for align_corners in (True, False):
                    for dtype, tol in ((np.float64, 1e-10), (np.float32, 2e-4)):
                        x0 = rng.standard_normal((2, 3) + spatial).astype(dtype)
                        grid0 = rng.uniform(-2.5, 2.5, (2,) + out + (ndim - 2,)).astype(dtype)
                        w0 = rng.standard_normal((2, 3) + out).astype(dtype)
                        got, want = [], []
                        for lib, frame, make in ((ddpc, F, ddpc.tensor), (torch, torch.nn.functional,
                                                                          torch.tensor)):
                            x, grid = make(x0, requires_grad=True), make(grid0, requires_grad=True)
                            y = frame.grid_sample(x, grid, mode=mode, padding_mode=padding,
                                                  align_corners=align_corners)
                            (y * make(w0)).sum().backward()
                            res = got if lib is ddpc else want
                            res += [np.asarray(y.detach()), np.asarray(x.grad), np.asarray(grid.grad)]
                        for what, a, b in zip(("output", "input grad", "grid grad"), got, want):
                            scale = max(1.0, float(np.abs(b).max()))
                            err = float(np.abs(a.astype(np.float64) - b).max()) / scale
                            key = (ndim, mode, padding, align_corners, np.dtype(dtype).name, what)
                            worst[key] = err
                            assert err < tol, (key, err)
                            checked += 1
    print("worst relative error", max(worst.values()))
    print("checked", checked, "ok")


def _case_affine_grid():
    import numpy as np
    import torch

    import ddpc
    import ddpc.nn.functional as F

    rng = np.random.default_rng(1)
    checked = 0
    for size in ((2, 3, 4, 5), (2, 1, 1, 6), (3, 2, 3, 4, 5), (1, 1, 1, 2, 1)):
        dims = len(size) - 2
        for align_corners in (True, False):
            theta0 = rng.standard_normal((size[0], dims, dims + 1))
            g0 = rng.standard_normal(tuple(size[:1]) + tuple(size[2:]) + (dims,))
            theta, ttheta = ddpc.tensor(theta0, requires_grad=True), torch.tensor(theta0, requires_grad=True)
            grid = F.affine_grid(theta, size, align_corners=align_corners)
            tgrid = torch.nn.functional.affine_grid(ttheta, size, align_corners=align_corners)
            np.testing.assert_allclose(np.asarray(grid.detach()), tgrid.detach().numpy(), atol=1e-12)
            (grid * ddpc.tensor(g0)).sum().backward()
            (tgrid * torch.tensor(g0)).sum().backward()
            np.testing.assert_allclose(np.asarray(theta.grad), ttheta.grad.numpy(), atol=1e-10)
            checked += 1
    print("checked", checked, "ok")


if __name__ == "__main__":
    import torch  # noqa: F401  (before ddpc, see the module docstring)

    {"grid_sample": _case_grid_sample, "affine_grid": _case_affine_grid}[sys.argv[1]]()

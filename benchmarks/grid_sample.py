"""Host grid_sample speed: forward and forward+backward (the gradients of the
input and the grid) of a few typical spatial-transformer samplings in
float32, as ms per call, for ddpc, a numpy baseline written here (bilinear
with zero padding only: gathers of the four corners, and np.add.at for the
input gradient), and PyTorch when it is importable, all with the same inputs
and grids (outputs and gradients are checked to agree before anything is
timed).

    PYTHONPATH=python python benchmarks/grid_sample.py [--repeat 5] [--min-time 0.3] [--cpu-time]

Run it with an interpreter that has torch to get the PyTorch columns.
"""

import argparse

import numpy as np

from common import add_layer_timing_args, best_of_rounds, import_torch, print_table, start_layer_timing

torch = import_torch()

import ddpc  # noqa: E402 - after torch, see import_torch

# (name, input shape, grid's output size, mode, padding mode)
CASES = (
    ("bilinear zeros, 32 ch 64x64 -> 64x64", (8, 32, 64, 64), (64, 64), "bilinear", "zeros"),
    ("bilinear zeros, 3 ch 224x224 -> 224x224", (8, 3, 224, 224), (224, 224), "bilinear", "zeros"),
    ("nearest reflection, 32 ch 64x64 -> 32x32", (8, 32, 64, 64), (32, 32), "nearest", "reflection"),
    ("bicubic zeros, 16 ch 64x64 -> 64x64", (4, 16, 64, 64), (64, 64), "bicubic", "zeros"),
    ("trilinear zeros, 8 ch 32^3 -> 32^3", (2, 8, 32, 32, 32), (32, 32, 32), "bilinear", "zeros"),
)


def case_data(shape, out, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    grid = rng.uniform(-1.1, 1.1, (shape[0],) + out + (len(out),)).astype(np.float32)
    return x, grid


def framework_case(lib, x, grid, mode, padding):
    """forward and forward+backward closures for ddpc or torch (the shared API)."""
    xt, gt = lib.from_numpy(x).requires_grad_(True), lib.from_numpy(grid).requires_grad_(True)

    def sample():
        return lib.nn.functional.grid_sample(xt, gt, mode=mode, padding_mode=padding, align_corners=False)

    def forward():
        with lib.no_grad():
            return sample()

    def train(probe=None):
        xt.grad = gt.grad = None
        y = sample()
        y.backward(lib.ones_like(y) if probe is None else lib.from_numpy(probe))
        return y

    def results(probe):
        y = train(probe)
        return [t.detach().numpy() for t in (y, xt.grad, gt.grad)]

    return forward, train, results


def numpy_case(x, grid):
    """Bilinear sampling with zero padding, align_corners=False, in numpy."""
    n, c, h, w = x.shape
    batch = np.arange(n).reshape(n, 1, 1)

    def corners():
        px = ((grid[..., 0] + 1) * w - 1) / 2
        py = ((grid[..., 1] + 1) * h - 1) / 2
        x0, y0 = np.floor(px).astype(np.int64), np.floor(py).astype(np.int64)
        fx, fy = px - x0, py - y0
        for dx, dy in ((0, 0), (1, 0), (0, 1), (1, 1)):
            cx, cy = x0 + dx, y0 + dy
            inside = (cx >= 0) & (cx < w) & (cy >= 0) & (cy < h)
            wx, wy = (fx if dx else 1 - fx), (fy if dy else 1 - fy)
            yield np.clip(cx, 0, w - 1), np.clip(cy, 0, h - 1), inside, wx, wy, (1 if dx else -1), (1 if dy else -1)

    def forward():
        y = 0
        for cx, cy, inside, wx, wy, _, _ in corners():
            y = y + x[batch, :, cy, cx] * (wx * wy * inside)[..., None]  # [n, ho, wo, c]
        return y.transpose(0, 3, 1, 2)

    def train(probe=None):
        y = forward()
        g = (np.ones_like(y) if probe is None else probe).transpose(0, 2, 3, 1)
        gx, ggrid = np.zeros_like(x), np.zeros_like(grid)
        for cx, cy, inside, wx, wy, sx, sy in corners():
            v = x[batch, :, cy, cx] * inside[..., None]
            np.add.at(gx, (batch, slice(None), cy, cx), g * (wx * wy * inside)[..., None])
            gv = (v * g).sum(-1)
            ggrid[..., 0] += gv * sx * wy * w / 2
            ggrid[..., 1] += gv * sy * wx * h / 2
        return y, gx, ggrid

    def results(probe):
        return [np.ascontiguousarray(a) for a in train(probe)]

    return forward, train, results


def check_agree(name, got, want, what):
    """Agreement to 1e-4 of the largest magnitude; the grid gradient, the
    interpolant's slope, jumps at pixel boundaries, so a point that float32
    coordinates (numpy's, PyTorch's) put across one from ddpc's double
    coordinates may differ: one in 10^4 grid gradients is let through."""
    for part, a, e in zip(("output", "input grad", "grid grad"), got, want):
        scale = max(float(np.abs(e).max()), 1.0)
        errors = np.abs(a - e) / scale if a.shape == e.shape else np.ones(1)
        err = float(np.quantile(errors, 0.9999) if part == "grid grad" else errors.max())
        if err > 1e-4:
            raise SystemExit(f"{name}: {what} {part} disagrees with ddpc (relative error {err:.2e})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_layer_timing_args(parser)
    args = parser.parse_args()
    clock = start_layer_timing(args, ddpc, torch)
    rows = []
    for name, shape, out, mode, padding in CASES:
        x, grid = case_data(shape, out)
        cases = [("ddpc", *framework_case(ddpc, x, grid, mode, padding))]
        if mode == "bilinear" and padding == "zeros" and len(out) == 2:
            cases.append(("numpy", *numpy_case(x, grid)))
        if torch is not None:
            cases.append(("torch", *framework_case(torch, x, grid, mode, padding)))
        probe = np.random.default_rng(1).standard_normal(tuple(cases[0][1]().shape)).astype(np.float32)
        want = cases[0][3](probe)
        for other, _, _, results in cases[1:]:
            check_agree(name, results(probe), want, other)
        t = best_of_rounds(cases, args, clock)
        row = [name]
        for p in ("fwd", "train"):
            row.append(f"{t['ddpc', p] * 1e3:.2f}")
            for other in ("numpy", "torch") if torch is not None else ("numpy",):
                have = (other, p) in t
                row += [f"{t[other, p] * 1e3:.2f}" if have else "-",
                        f"{t[other, p] / t['ddpc', p]:.2f}" if have else "-"]
        rows.append(row)
    headers = ["sampling"]
    for p in ("fwd", "fwd+bwd"):
        headers.append(f"{p} ddpc ms")
        for other in ("numpy", "torch") if torch is not None else ("numpy",):
            headers += [f"{p} {other} ms", f"{other}/ddpc"]
    print_table(headers, rows)


if __name__ == "__main__":
    main()

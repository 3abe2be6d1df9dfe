"""Host convolution speed: forward and forward+backward of a few typical
Conv1d/Conv2d/Conv3d layers in float32, as ms per call, for ddpc, a numpy im2col +
matmul baseline written here, and PyTorch when it is importable, all with the
same weights and inputs (outputs and gradients are checked to agree before
anything is timed).

    PYTHONPATH=python python benchmarks/conv.py [--repeat 5] [--min-time 0.3] [--cpu-time]

With --cpu-time the figures are CPU seconds of the process instead of wall
time: per-call work that a busy shared machine does not inflate, meaningful
when everything runs on one thread (DDPC_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
OMP_NUM_THREADS=1; idle BLAS threads spin and would be counted).

Run it with an interpreter that has torch to get the PyTorch columns, e.g.
PYTHONPATH=python /path/to/venv-with-torch/bin/python benchmarks/conv.py
"""

import argparse
import math

import numpy as np

from common import add_layer_timing_args, best_of_rounds, import_torch, print_table, start_layer_timing

torch = import_torch()

import ddpc  # noqa: E402 - after torch, see import_torch

# (name, batch, in channels, out channels, spatial size, kernel, stride, padding): as many dims as the size
LAYERS = (
    ("Conv2d 3->32 k3, 32x32", 64, 3, 32, (32, 32), 3, 1, 0),
    ("Conv2d 32->64 k3 p1, 32x32", 64, 32, 64, (32, 32), 3, 1, 1),
    ("Conv2d 64->128 k3 s2 p1, 32x32", 64, 64, 128, (32, 32), 3, 2, 1),
    ("Conv2d 128->256 k1, 16x16", 64, 128, 256, (16, 16), 1, 1, 0),
    ("Conv1d 64->64 k5 p2, 256", 32, 64, 64, (256,), 5, 1, 2),
    ("Conv2d 64->64 k3 p1, 128x128", 4, 64, 64, (128, 128), 3, 1, 1),  # one sample's columns: 36 MiB
    ("Conv3d 16->32 k3 p1, 16x16x16", 8, 16, 32, (16, 16, 16), 3, 1, 1),
)


def layer_data(batch, cin, cout, size, k, seed=0):
    rng = np.random.default_rng(seed)
    bound = 1 / np.sqrt(cin * k ** len(size))
    w = rng.uniform(-bound, bound, (cout, cin) + (k,) * len(size)).astype(np.float32)
    b = rng.uniform(-bound, bound, cout).astype(np.float32)
    x = rng.standard_normal((batch, cin) + size).astype(np.float32)
    return w, b, x


def framework_case(lib, w, b, x, stride, pad):
    """forward and forward+backward closures for ddpc or torch (the shared API); each returns
    the output and the gradients of sum(y * probe) for the agreement check."""
    conv = (lib.nn.Conv1d, lib.nn.Conv2d, lib.nn.Conv3d)[x.ndim - 3](w.shape[1], w.shape[0], w.shape[2],
                                                                     stride=stride, padding=pad)
    with lib.no_grad():
        conv.weight.copy_(lib.from_numpy(w))
        conv.bias.copy_(lib.from_numpy(b))
    xt = lib.from_numpy(x).requires_grad_(True)

    def forward():
        with lib.no_grad():
            return conv(xt)

    def train(probe=None):
        conv.weight.grad = conv.bias.grad = xt.grad = None
        y = conv(xt)
        y.backward(lib.ones_like(y) if probe is None else lib.from_numpy(probe))
        return y

    def results(probe):
        y = train(probe)
        return [t.detach().numpy() for t in (y, xt.grad, conv.weight.grad, conv.bias.grad)]

    return forward, train, results


def numpy_case(w, b, x, stride, pad):
    """The same layer as numpy im2col (strided views, one copy) and one matmul over the batch."""
    nd = x.ndim - 2
    (n, c), o, kernel = x.shape[:2], w.shape[0], w.shape[2:]
    out = tuple((size + 2 * pad - k) // stride + 1 for size, k in zip(x.shape[2:], kernel))
    pads = ((0, 0), (0, 0)) + ((pad, pad),) * nd
    wm = w.reshape(o, -1)
    to_channels_first = (0, nd + 1) + tuple(range(1, nd + 1))  # (n, *out, o) -> (n, o, *out)

    def columns(xp):
        s = xp.strides
        win = np.lib.stride_tricks.as_strided(xp, (n,) + out + (c,) + kernel,
                                              (s[0],) + tuple(t * stride for t in s[2:]) + (s[1],) + s[2:])
        return win.reshape(n * math.prod(out), c * math.prod(kernel))  # one copy

    def forward():
        y = columns(np.pad(x, pads)) @ wm.T
        y += b
        return y.reshape((n,) + out + (o,)).transpose(to_channels_first)

    def train(probe=None):
        xp = np.pad(x, pads)
        col = columns(xp)
        y = (col @ wm.T + b).reshape((n,) + out + (o,)).transpose(to_channels_first)
        g = np.ones_like(y) if probe is None else probe
        gm = g.transpose((0,) + tuple(range(2, nd + 2)) + (1,)).reshape(n * math.prod(out), o)
        gw = (gm.T @ col).reshape(w.shape)
        gb = gm.sum(0)
        gcol = (gm @ wm).reshape((n,) + out + (c,) + kernel)
        gxp = np.zeros_like(xp)
        for tap in np.ndindex(*kernel):  # col2im: one strided add per tap
            window = tuple(slice(t, t + stride * m, stride) for t, m in zip(tap, out))
            gxp[(slice(None), slice(None)) + window] += gcol[(Ellipsis,) + tap].transpose(to_channels_first)
        gx = gxp[(slice(None), slice(None)) + tuple(slice(pad, pad + size) for size in x.shape[2:])]
        return y, gx, gw, gb

    def results(probe):
        return [np.ascontiguousarray(a) for a in train(probe)]

    return forward, train, results


def check_agree(layer, got, want, what):
    for name, a, e in zip(("output", "input grad", "weight grad", "bias grad"), got, want):
        scale = max(float(np.abs(e).max()), 1.0)
        err = float(np.abs(a - e).max()) / scale
        if a.shape != e.shape or err > 1e-4:
            raise SystemExit(f"{layer}: {what} {name} disagrees with ddpc (relative error {err:.2e})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_layer_timing_args(parser)
    args = parser.parse_args()
    clock = start_layer_timing(args, ddpc, torch)
    rows = []
    for layer, batch, cin, cout, size, k, stride, pad in LAYERS:
        w, b, x = layer_data(batch, cin, cout, size, k)
        cases = [("ddpc", *framework_case(ddpc, w, b, x, stride, pad)), ("numpy", *numpy_case(w, b, x, stride, pad))]
        if torch is not None:
            cases.append(("torch", *framework_case(torch, w, b, x, stride, pad)))
        out_shape = cases[0][1]().shape
        probe = np.random.default_rng(1).standard_normal(tuple(out_shape)).astype(np.float32)
        want = cases[0][3](probe)
        for name, _, _, results in cases[1:]:
            check_agree(layer, results(probe), want, name)
        t = best_of_rounds(cases, args, clock)
        row = [f"{layer}, batch {batch}"]
        for p in ("fwd", "train"):
            row += [f"{t['ddpc', p] * 1e3:.2f}", f"{t['numpy', p] * 1e3:.2f}",
                    f"{t['numpy', p] / t['ddpc', p]:.2f}"]
            if torch is not None:
                row += [f"{t['torch', p] * 1e3:.2f}", f"{t['torch', p] / t['ddpc', p]:.2f}"]
        rows.append(row)
    headers = ["layer"]
    for p in ("fwd", "fwd+bwd"):
        headers += [f"{p} ddpc ms", f"{p} numpy ms", "numpy/ddpc"]
        if torch is not None:
            headers += [f"{p} torch ms", "torch/ddpc"]
    print_table(headers, rows)


if __name__ == "__main__":
    main()

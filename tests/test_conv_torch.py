"""Optional: ddpc's convolution and pooling layers (1-d to 3-d) against
PyTorch's with the same weights (skipped when torch is not installed):
outputs and gradients of the input and parameters, the max pools' indices,
and the output sizes (or the refusal) of the pools over a sweep of
geometries.

Each comparison runs in a child process that imports torch before ddpc (see
test_nn_torch.py) and fails there, printing what it measured.
"""

import sys

import pytest
from procs import run_torch_case


@pytest.mark.parametrize("case", ["modules", "pool_sizes"])
def test_matches_pytorch(case):
    out = run_torch_case(__file__, case)
    assert out.strip().endswith("ok"), out


def _modules(torch, ddpc):
    """Pairs (name, ddpc module, torch module, input shape)."""
    tn, dn = torch.nn, ddpc.nn
    specs = [
        ("Conv2d", dict(in_channels=4, out_channels=6, kernel_size=3), (2, 4, 9, 8)),
        ("Conv2d", dict(in_channels=4, out_channels=6, kernel_size=(2, 3), stride=(2, 1), padding=(1, 2),
                        dilation=(1, 2), groups=2, bias=False), (3, 4, 7, 10)),
        ("Conv2d", dict(in_channels=6, out_channels=12, kernel_size=4, padding="same", dilation=2, groups=6),
         (2, 6, 9, 9)),
        ("Conv2d", dict(in_channels=3, out_channels=5, kernel_size=3, padding=2, padding_mode="reflect"),
         (2, 3, 6, 7)),
        ("Conv2d", dict(in_channels=3, out_channels=5, kernel_size=(3, 2), padding="same",
                        padding_mode="replicate"), (2, 3, 5, 6)),
        ("Conv2d", dict(in_channels=3, out_channels=5, kernel_size=3, stride=2, padding=(1, 3),
                        padding_mode="circular"), (2, 3, 6, 7)),
        ("Conv2d", dict(in_channels=3, out_channels=2, kernel_size=3, padding="valid"), (3, 6, 6)),
        ("Conv1d", dict(in_channels=4, out_channels=8, kernel_size=5, stride=2, padding=3, dilation=2, groups=4),
         (2, 4, 19)),
        ("Conv1d", dict(in_channels=3, out_channels=4, kernel_size=4, padding="same"), (2, 3, 11)),
        ("Conv1d", dict(in_channels=3, out_channels=4, kernel_size=3, padding=2, padding_mode="reflect"), (3, 9)),
        ("MaxPool2d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True), (2, 3, 9, 8)),
        ("MaxPool2d", dict(kernel_size=(2, 3), stride=(1, 2), dilation=(2, 1)), (2, 3, 7, 9)),
        ("MaxPool2d", dict(kernel_size=2), (3, 6, 7)),
        ("MaxPool1d", dict(kernel_size=4, stride=3, padding=2, ceil_mode=True), (2, 3, 14)),
        ("AvgPool2d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True), (2, 3, 9, 8)),
        ("AvgPool2d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
         (2, 3, 8, 9)),
        ("AvgPool2d", dict(kernel_size=(2, 4), stride=(1, 3), padding=(1, 2), divisor_override=3), (2, 3, 6, 9)),
        ("AvgPool1d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
         (2, 3, 10)),
        ("AdaptiveAvgPool2d", dict(output_size=(4, 3)), (2, 3, 9, 7)),
        ("AdaptiveAvgPool2d", dict(output_size=(None, 5)), (3, 6, 4)),
        ("AdaptiveAvgPool2d", dict(output_size=1), (2, 3, 5, 5)),
        ("AdaptiveAvgPool1d", dict(output_size=4), (2, 3, 11)),
        ("AdaptiveAvgPool1d", dict(output_size=3), (3, 7)),
        ("ConvTranspose2d", dict(in_channels=4, out_channels=6, kernel_size=3), (2, 4, 5, 6)),
        ("ConvTranspose2d", dict(in_channels=4, out_channels=6, kernel_size=(3, 2), stride=(2, 3), padding=(1, 0),
                                 output_padding=(1, 2), groups=2), (2, 4, 5, 4)),
        ("ConvTranspose2d", dict(in_channels=3, out_channels=2, kernel_size=3, stride=1, padding=2, dilation=2,
                                 output_padding=1, bias=False), (3, 6, 7)),
        ("ConvTranspose2d", dict(in_channels=6, out_channels=6, kernel_size=1, groups=3), (2, 6, 4, 4)),
        ("ConvTranspose1d", dict(in_channels=4, out_channels=8, kernel_size=4, stride=2, padding=1, groups=4),
         (2, 4, 9)),
        ("ConvTranspose1d", dict(in_channels=3, out_channels=2, kernel_size=5, dilation=2), (3, 7)),
        ("Conv3d", dict(in_channels=4, out_channels=6, kernel_size=(2, 3, 2), stride=(1, 2, 1), padding=(1, 0, 2),
                        dilation=(2, 1, 1), groups=2), (2, 4, 5, 7, 6)),
        ("Conv3d", dict(in_channels=3, out_channels=4, kernel_size=3, padding="same", padding_mode="reflect"),
         (2, 3, 4, 5, 6)),
        ("Conv3d", dict(in_channels=3, out_channels=4, kernel_size=(3, 2, 3), stride=2, padding=(1, 2, 1),
                        padding_mode="circular", bias=False), (3, 4, 5, 6)),
        ("Conv3d", dict(in_channels=4, out_channels=8, kernel_size=1, groups=2, padding_mode="replicate"),
         (2, 4, 3, 4, 5)),
        ("ConvTranspose3d", dict(in_channels=4, out_channels=6, kernel_size=(3, 2, 3), stride=(2, 1, 2), padding=1,
                                 output_padding=(1, 0, 1), groups=2), (2, 4, 3, 4, 3)),
        ("ConvTranspose3d", dict(in_channels=3, out_channels=2, kernel_size=2, dilation=2, bias=False), (3, 3, 4, 2)),
        ("MaxPool3d", dict(kernel_size=3, stride=2, padding=1, dilation=(1, 2, 1), ceil_mode=True), (2, 3, 7, 9, 8)),
        ("MaxPool3d", dict(kernel_size=2), (3, 4, 5, 6)),
        ("AvgPool3d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
         (2, 3, 7, 8, 6)),
        ("AvgPool3d", dict(kernel_size=(2, 3, 2), stride=1, padding=1, divisor_override=5), (2, 3, 4, 6, 5)),
        ("AdaptiveAvgPool3d", dict(output_size=(3, None, 2)), (2, 3, 7, 5, 5)),
        ("AdaptiveAvgPool3d", dict(output_size=2), (3, 5, 4, 3)),
        ("AdaptiveMaxPool1d", dict(output_size=4), (2, 3, 11)),
        ("AdaptiveMaxPool2d", dict(output_size=(3, None)), (2, 3, 7, 9)),
        ("AdaptiveMaxPool3d", dict(output_size=(2, 3, 4)), (2, 3, 5, 7, 6)),
        ("Unfold", dict(kernel_size=(2, 3), dilation=(1, 2), padding=1, stride=(2, 1)), (2, 3, 7, 8)),
        ("Unfold", dict(kernel_size=3), (3, 5, 5)),
        ("Fold", dict(output_size=(7, 8), kernel_size=(2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
         (2, 18, 24)),
        ("Fold", dict(output_size=5, kernel_size=2, stride=2, padding=1), (8, 9)),
    ]
    for name, kw, shape in specs:
        yield name, getattr(dn, name)(**kw), getattr(tn, name)(**kw), shape


def _case_modules():
    import torch
    import numpy as np

    import ddpc

    rng = np.random.default_rng(0)
    worst = 0.0
    for name, mine, theirs, shape in _modules(torch, ddpc):
        for dtype, tol in (("float64", 1e-12), ("float32", 2e-5)):
            mine.to(dtype=getattr(ddpc, dtype))
            theirs.to(dtype=getattr(torch, dtype))
            with torch.no_grad():
                for p, q in zip(mine.parameters(), theirs.parameters()):
                    q.copy_(torch.from_numpy(np.asarray(p).copy()))
            x = rng.standard_normal(shape).astype(dtype)
            xm, xt = ddpc.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
            ym, yt = mine(xm), theirs(xt)
            g = rng.standard_normal(tuple(yt.shape)).astype(dtype)
            (ym * ddpc.tensor(g)).sum().backward()
            (yt * torch.from_numpy(g)).sum().backward()
            pairs = [("out", ym.detach(), yt.detach()), ("grad input", xm.grad, xt.grad)]
            pairs += [(f"grad {n}", p.grad, q.grad) for (n, p), q in zip(mine.named_parameters(), theirs.parameters())]
            for what, a, b in pairs:
                a, b = np.asarray(a), b.numpy()
                assert a.shape == b.shape, (name, what, a.shape, b.shape)
                err = float(np.abs(a - b).max() / max(1.0, np.abs(b).max())) if a.size else 0.0
                print(f"{name:18s} {dtype} {what:12s} {err:.2e}")
                assert err < tol, (name, dtype, what, err)
                worst = max(worst, err)
            for p in list(mine.parameters()) + [xm]:
                p.grad = None
            theirs.zero_grad()
    for size in ((9, 11), (10, 12), [2, 6, 10, 11]):  # output_size picks output_padding
        mine, theirs = ddpc.nn.ConvTranspose2d(6, 3, 3, stride=2, padding=1), torch.nn.ConvTranspose2d(6, 3, 3, 2, 1)
        x = rng.standard_normal((2, 6, 5, 6)).astype(np.float32)
        want = tuple(theirs(torch.from_numpy(x), output_size=size).shape)
        assert mine(ddpc.tensor(x), output_size=size).shape == want
        assert repr(mine) == repr(theirs), (repr(mine), repr(theirs))
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    _, im = ddpc.nn.MaxPool2d(3, 2, 1, return_indices=True)(ddpc.tensor(x))
    _, it = torch.nn.MaxPool2d(3, 2, 1, return_indices=True)(torch.from_numpy(x))
    assert (np.asarray(im) == it.numpy()).all()
    x = rng.standard_normal((2, 3, 5, 9, 8)).astype(np.float32)
    for name, kw, spatial in (("MaxPool3d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True), 3),
                              ("AdaptiveMaxPool1d", dict(output_size=4), 1),
                              ("AdaptiveMaxPool2d", dict(output_size=(3, 5)), 2),
                              ("AdaptiveMaxPool3d", dict(output_size=(2, 4, 3)), 3)):
        xs = np.ascontiguousarray(x[(slice(None),) * 2 + (0,) * (3 - spatial)])
        _, im = getattr(ddpc.nn, name)(**kw, return_indices=True)(ddpc.tensor(xs))
        _, it = getattr(torch.nn, name)(**kw, return_indices=True)(torch.from_numpy(xs))
        assert (np.asarray(im) == it.numpy()).all(), name
    for nd, size in ((1, (2, 3, 9)), (2, (2, 3, 6, 7)), (3, (3, 4, 5, 6))):  # max_unpool, values and gradient
        x = rng.standard_normal(size)
        outs = []
        for lib in (ddpc, torch):
            f = getattr(lib.nn.functional, f"max_pool{nd}d"), getattr(lib.nn.functional, f"max_unpool{nd}d")
            y, i = f[0](lib.tensor(x), 3, 2, 1, return_indices=True)
            y = y.detach().requires_grad_(True)
            u = f[1](y, i, 3, 2, 1, output_size=tuple(size[-nd:]))
            (u * lib.tensor(np.arange(u.numel()).reshape(tuple(u.shape)).astype(np.float64))).sum().backward()
            outs.append((np.asarray(u.detach()), np.asarray(y.grad)))
        for a, b in zip(*outs):
            assert a.shape == b.shape and (a == b).all(), nd
    print("worst", worst, "ok")


def _case_pool_sizes():
    """Every small geometry gives PyTorch's output length, or is refused where PyTorch refuses it."""
    import torch
    import numpy as np

    import ddpc
    import ddpc.nn.functional as F

    tf = torch.nn.functional
    checked = 0
    for n in range(1, 10):
        x, xt = ddpc.zeros(1, 1, n), torch.zeros(1, 1, n)
        for k in range(1, 5):
            for s in range(1, 4):
                for p in range(0, 3):
                    for d in (1, 2):
                        for ceil in (False, True):
                            for mine, theirs in ((lambda: F.max_pool1d(x, k, s, p, d, ceil),
                                                  lambda: tf.max_pool1d(xt, k, s, p, d, ceil)),
                                                 (lambda: F.avg_pool1d(x, k, s, p, ceil),
                                                  lambda: tf.avg_pool1d(xt, k, s, p, ceil))):
                                try:
                                    want = tuple(theirs().shape)
                                except RuntimeError:
                                    want = None
                                try:
                                    got = tuple(mine().shape)
                                except ValueError:
                                    got = None
                                assert got == want, (n, k, s, p, d, ceil, got, want)
                                checked += 1
    for h in range(1, 8):
        for o in range(1, 8):
            x = np.arange(h * 3, dtype=np.float64).reshape(1, h, 3)
            a = np.asarray(F.adaptive_avg_pool2d(ddpc.tensor(x), (o, 2)))
            b = tf.adaptive_avg_pool2d(torch.from_numpy(x), (o, 2)).numpy()
            assert np.abs(a - b).max() < 1e-12, (h, o)
            checked += 1
    for n in range(1, 9):
        for o in range(1, 9):
            x = np.random.default_rng(n * 10 + o).standard_normal((2, n))
            a, ia = F.adaptive_max_pool1d(ddpc.tensor(x), o, return_indices=True)
            b, ib = tf.adaptive_max_pool1d(torch.from_numpy(x), o, return_indices=True)
            assert (np.asarray(a) == b.numpy()).all() and (np.asarray(ia) == ib.numpy()).all(), (n, o)
            checked += 1
    print("checked", checked, "ok")


if __name__ == "__main__":
    {"modules": _case_modules, "pool_sizes": _case_pool_sizes}[sys.argv[1]]()

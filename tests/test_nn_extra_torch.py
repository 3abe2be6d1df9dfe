"""Optional: the activations and losses of ddpc.nn against PyTorch's on the
same inputs (skipped when torch is not installed): outputs and gradients
within 1e-6 relative in float32, plus an absolute 1e-6 where a value is near
0 and neither library keeps relative precision (a gradient crossing 0
cancels in both). In float64 within 1e-7 relative (and 1e-12 absolute):
PyTorch takes a few constants in float32 there (hardsigmoid's 1/6, binary
cross entropy's 1e-12 clamp), which ddpc keeps in double.

Each comparison runs in a child process that imports torch before ddpc (see
test_nn_torch.py) and fails there, printing what differs.
"""

import sys

import pytest
from procs import run_torch_case


@pytest.mark.parametrize("case", ["activations", "inplace", "losses", "cross_entropy", "more_activations",
                                  "margin_losses", "nll_losses", "layout"])
def test_matches_pytorch(case):
    out = run_torch_case(__file__, case)
    assert out.strip().endswith("ok"), out


def _run(lib, fn, arrays, grads, kwargs, g_seed):
    """fn(*arrays, **kwargs) of lib's functional module, then backward with a
    seeded output gradient: the output and the gradients of the arrays marked in grads."""
    import numpy as np

    mod = __import__("ddpc.nn.functional" if lib.__name__ == "ddpc" else "torch.nn.functional", fromlist=["x"])
    ts = [lib.tensor(a, requires_grad=bool(r)) for a, r in zip(arrays, grads)]
    kw = {k: lib.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    out = getattr(mod, fn)(*ts, **kw)
    g = np.random.default_rng(g_seed).standard_normal(out.shape).astype(arrays[0].dtype)
    out.backward(lib.tensor(g))
    return [np.asarray(out.detach())] + [np.asarray(t.grad) for t, r in zip(ts, grads) if r]


def _compare(fn, arrays, grads, **kwargs):
    import numpy as np
    import torch

    import ddpc

    want = _run(torch, fn, arrays, grads, kwargs, 1)
    got = _run(ddpc, fn, arrays, grads, kwargs, 1)
    f32 = arrays[0].dtype == np.float32
    label = f"{fn} {arrays[0].dtype} {({k: v for k, v in kwargs.items() if not isinstance(v, np.ndarray)})}"
    for what, a, b in zip(["output"] + [f"grad {i}" for i in range(len(got) - 1)], got, want):
        assert a.shape == b.shape, f"{label} {what}: shape {a.shape}, PyTorch's {b.shape}"
        np.testing.assert_allclose(a, b, rtol=1e-6 if f32 else 1e-7, atol=1e-6 if f32 else 1e-12, equal_nan=True,
                                   err_msg=f"{label} {what}")


def _case_activations():
    import numpy as np

    rng = np.random.default_rng(0)
    edges = [-3, -2, -1, -0.0, 0, 0.5, 1, 3, 6, 19.9, 20.1, 30, -30, 100, -100, 1e-4, -1e-4, np.nan]
    base = np.concatenate([rng.standard_normal(3000) * 4, edges])
    cases = [("relu", {}), ("leaky_relu", {}), ("leaky_relu", dict(negative_slope=0.2)), ("elu", {}),
             ("elu", dict(alpha=0.5)), ("silu", {}), ("softplus", {}), ("softplus", dict(beta=2.0, threshold=5.0)),
             ("mish", {}), ("hardtanh", {}), ("hardtanh", dict(min_val=-2.0, max_val=0.5)), ("relu6", {}),
             ("hardswish", {}), ("hardsigmoid", {})]
    for dtype in (np.float32, np.float64):
        for name, kw in cases:
            _compare(name, [base.astype(dtype)], [True], **kw)
        x = rng.standard_normal((3, 4, 5)).astype(dtype)
        for dim in (0, 1, 2, -1):
            _compare("softmax", [x], [True], dim=dim)
            _compare("log_softmax", [x], [True], dim=dim)


def _case_inplace():
    import numpy as np
    import torch

    import ddpc

    x = np.random.default_rng(1).standard_normal(50) * 4
    for name, kw in [("relu", {}), ("leaky_relu", dict(negative_slope=0.1)), ("elu", dict(alpha=2.0)), ("silu", {}),
                     ("mish", {}), ("hardtanh", {}), ("relu6", {}), ("hardswish", {}), ("hardsigmoid", {})]:
        res = []
        for lib, mod in ((torch, torch.nn.functional), (ddpc, ddpc.nn.functional)):
            a = lib.tensor(x, requires_grad=True)
            h = a * 3
            out = getattr(mod, name)(h, inplace=True, **kw)
            assert out is h, name
            (h * h).sum().backward()
            res.append((np.asarray(h.detach()), np.asarray(a.grad)))
        for u, v in zip(*res):
            np.testing.assert_allclose(v, u, rtol=1e-7, atol=1e-14, err_msg=name)


def _case_losses():
    import warnings

    import numpy as np

    warnings.simplefilter("ignore")  # both libraries warn alike about broadcasting and "mean" KL
    rng = np.random.default_rng(2)
    for dtype in (np.float32, np.float64):
        x, y = (rng.standard_normal((5, 4)) * 2).astype(dtype), (rng.standard_normal((5, 4)) * 2).astype(dtype)
        x[0, :2] = y[0, :2] + [0.0, 1.0]  # at L1's kink and at smooth L1's and Huber's
        p, q = rng.uniform(0, 1, (5, 4)).astype(dtype), rng.uniform(0, 1, (5, 4)).astype(dtype)
        p[0, :3], q[0, :3] = [0, 1, 1e-30], [1, 0, 1]
        w = rng.uniform(0.5, 2, 4).astype(dtype)
        big = np.concatenate([x * 50, [[100, -100, 0, 1e4]]]).astype(dtype)
        qq = np.concatenate([q, [[1, 0, 0.5, 0]]]).astype(dtype)
        lp = np.log(rng.dirichlet(np.ones(4), 5)).astype(dtype)
        tp = rng.dirichlet(np.ones(4), 5).astype(dtype)
        tp[0, 1] = 0
        for red in ("none", "mean", "sum"):
            _compare("mse_loss", [x, y], [1, 1], reduction=red)
            _compare("l1_loss", [x, y], [1, 1], reduction=red)
            for beta in (1.0, 0.5, 0.0):
                _compare("smooth_l1_loss", [x, y], [1, 1], reduction=red, beta=beta)
            for delta in (1.0, 2.5):
                _compare("huber_loss", [x, y], [1, 1], reduction=red, delta=delta)
            _compare("binary_cross_entropy", [p, q], [1, 1], reduction=red)
            _compare("binary_cross_entropy", [p, q], [1, 1], reduction=red, weight=w)
            _compare("binary_cross_entropy_with_logits", [big, qq], [1, 1], reduction=red)
            _compare("binary_cross_entropy_with_logits", [x, q], [1, 1], reduction=red, weight=w,
                     pos_weight=w[::-1].copy())
            _compare("binary_cross_entropy_with_logits", [x, q], [1, 1], reduction=red,
                     pos_weight=np.array([3.0], dtype))
            _compare("kl_div", [lp, tp], [1, 0], reduction=red)
            _compare("kl_div", [lp, np.log(tp + 0.1).astype(dtype)], [1, 1], reduction=red, log_target=True)
        _compare("kl_div", [lp, tp], [1, 0], reduction="batchmean")
        _compare("mse_loss", [x, y[:1]], [1, 1])
        _compare("l1_loss", [x[:, :1], y], [1, 1], reduction="sum")
        _compare_weighted(x, y, rng.uniform(0, 2, x.shape).astype(dtype))


def _compare_weighted(x, y, w):
    """mse_loss and l1_loss with PyTorch 2.15's weight=, the weight taking a
    gradient too; also a target broadcast against the weighted input."""
    import inspect

    import numpy as np
    import torch

    import ddpc

    if "weight" not in inspect.signature(torch.nn.functional.mse_loss).parameters:
        return  # a PyTorch before the weighted regression losses
    f32 = x.dtype == np.float32
    for name in ("mse_loss", "l1_loss"):
        for red in ("none", "mean", "sum"):
            for target in (y, y[:1]):
                res = []
                for lib in (torch, ddpc):
                    ts = [lib.tensor(a, requires_grad=True) for a in (x, target, w)]
                    out = getattr(lib.nn.functional, name)(ts[0], ts[1], reduction=red, weight=ts[2])
                    out.backward(lib.tensor(np.cos(np.arange(out.numel())).reshape(tuple(out.shape)).astype(x.dtype)))
                    res.append([np.asarray(out.detach())] + [np.asarray(t.grad) for t in ts])
                for a, b in zip(*res):
                    np.testing.assert_allclose(a, b, rtol=1e-6 if f32 else 1e-12, atol=1e-6 if f32 else 1e-12,
                                               err_msg=f"weighted {name} {red} {target.shape}")


def _case_cross_entropy():
    import numpy as np

    rng = np.random.default_rng(3)
    for dtype in (np.float32, np.float64):
        x = (rng.standard_normal((6, 4)) * 2).astype(dtype)
        t = np.array([0, 3, 1, -100, 2, 3])
        w = rng.uniform(0.5, 2, 4).astype(dtype)
        probs = rng.dirichlet(np.ones(4), 6).astype(dtype)
        lp = np.log(rng.dirichlet(np.ones(4), 6)).astype(dtype)
        x4 = rng.standard_normal((2, 4, 3, 2)).astype(dtype)
        t4 = rng.integers(0, 4, (2, 3, 2))
        t4[0, 0, 0] = -100
        p4 = rng.dirichlet(np.ones(4), (2, 3, 2)).transpose(0, 3, 1, 2).astype(dtype).copy()
        for red in ("none", "mean", "sum"):
            for eps in (0.0, 0.2):
                _compare("cross_entropy", [x, t], [1, 0], reduction=red, label_smoothing=eps)
                _compare("cross_entropy", [x, t], [1, 0], reduction=red, label_smoothing=eps, weight=w)
                _compare("cross_entropy", [x, np.array([0, 3, 1, 3, 2, 1])], [1, 0], reduction=red,
                         label_smoothing=eps, weight=w, ignore_index=3)
                _compare("cross_entropy", [x, probs], [1, 1], reduction=red, label_smoothing=eps)
                _compare("cross_entropy", [x, probs], [1, 1], reduction=red, label_smoothing=eps, weight=w)
            _compare("nll_loss", [lp, t], [1, 0], reduction=red)
            _compare("nll_loss", [lp, t], [1, 0], reduction=red, weight=w)
            _compare("cross_entropy", [x4, t4], [1, 0], reduction=red, weight=w, label_smoothing=0.1)
            _compare("nll_loss", [x4, t4], [1, 0], reduction=red, weight=w)
            _compare("cross_entropy", [x4, p4], [1, 1], reduction=red, weight=w, label_smoothing=0.1)
            _compare("cross_entropy", [x[0], np.array(2)], [1, 0], reduction=red)
            _compare("cross_entropy", [x[0], probs[0]], [1, 1], reduction=red)


def _case_more_activations():
    import numpy as np

    rng = np.random.default_rng(2)
    # No NaN here: PyTorch's gradients at NaN differ between these ops (selu's is NaN, elu's is not).
    edges = [-3, -1, -0.3, -0.0, 0, 0.3, 0.5, 1, 20.1, 30, -30, 100, -100, 1e-4, -1e-4]
    base = np.concatenate([rng.standard_normal(2000) * 4, edges])
    cases = [("selu", {}), ("celu", {}), ("celu", dict(alpha=0.5)), ("logsigmoid", {}), ("softsign", {}),
             ("softshrink", {}), ("softshrink", dict(lambd=0.3)), ("hardshrink", dict(lambd=0.3)),
             ("hardshrink", {}), ("tanhshrink", {}), ("rrelu", {}), ("rrelu", dict(lower=0.2, upper=0.4))]
    for dtype in (np.float32, np.float64):
        for name, kw in cases:
            _compare(name, [base.astype(dtype)], [True], **kw)
        x = rng.standard_normal((4, 6, 3)).astype(dtype)
        for p, dim in ((2.0, 1), (1.0, -1), (3.0, 0)):
            _compare("normalize", [x], [True], p=p, dim=dim)


def _case_margin_losses():
    import numpy as np

    rng = np.random.default_rng(3)
    sign = np.where(rng.random(7) < 0.5, 1.0, -1.0)
    for dtype in (np.float32, np.float64):
        x1, x2, x3 = (rng.standard_normal((7, 5)).astype(dtype) for _ in range(3))
        y, ys = sign.astype(dtype), np.where(rng.random((7, 5)) < 0.5, 1.0, -1.0).astype(dtype)
        labels = (rng.random((7, 5)) < 0.4).astype(dtype)
        cls = rng.integers(0, 5, 7)
        w = rng.random(5).astype(dtype) + 0.5
        for red in ("none", "mean", "sum"):
            _compare("margin_ranking_loss", [x1[:, 0], x2[:, 0], y], [1, 1, 0], margin=0.3, reduction=red)
            _compare("hinge_embedding_loss", [x1, ys], [1, 0], margin=0.5, reduction=red)
            _compare("soft_margin_loss", [x1 * 10, ys], [1, 0], reduction=red)
            _compare("cosine_embedding_loss", [x1, x2, y], [1, 1, 0], margin=0.2, reduction=red)
            _compare("cosine_embedding_loss", [x1[0], x2[0], np.array(-1.0, dtype)], [1, 1, 0], reduction=red)
            for p, swap in ((2.0, False), (1.0, True)):
                _compare("triplet_margin_loss", [x1, x2, x3], [1, 1, 1], p=p, swap=swap, margin=0.7, reduction=red)
            _compare("triplet_margin_with_distance_loss", [x1, x2, x3], [1, 1, 1], swap=True, reduction=red)
            _compare("multilabel_soft_margin_loss", [x1, labels], [1, 0], reduction=red)
            _compare("multilabel_soft_margin_loss", [x1, labels], [1, 0], weight=w, reduction=red)
            for p in (1, 2):
                _compare("multi_margin_loss", [x1, cls], [1, 0], p=p, margin=0.8, reduction=red)
                _compare("multi_margin_loss", [x1, cls], [1, 0], p=p, weight=w, reduction=red)
            _compare("multi_margin_loss", [x1[0], np.array(3)], [1, 0], reduction=red)


def _case_nll_losses():
    import numpy as np

    rng = np.random.default_rng(4)
    for dtype in (np.float32, np.float64):
        mu, target = rng.standard_normal((2, 6, 4)).astype(dtype)
        var = (rng.random((6, 4)) + 0.1).astype(dtype)
        var[0, :2] = 1e-9  # below eps: clamped, the clamp not differentiated
        counts = rng.integers(0, 6, (6, 4)).astype(dtype)
        for red in ("none", "mean", "sum"):
            for full in (False, True):
                _compare("gaussian_nll_loss", [mu, target, var], [1, 1, 1], full=full, reduction=red)
                _compare("poisson_nll_loss", [mu, counts], [1, 0], full=full, reduction=red)
                _compare("poisson_nll_loss", [np.abs(mu) + 0.1, counts], [1, 0], log_input=False, full=full,
                         reduction=red)
            _compare("gaussian_nll_loss", [mu, target, var[:, 0]], [1, 1, 1], reduction=red)
            _compare("gaussian_nll_loss", [mu, target, var[:, :1]], [1, 1, 1], reduction=red)


def _case_layout():
    import numpy as np
    import torch

    import ddpc
    import ddpc.nn.functional as F

    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 18, 4, 6))
    _compare("pixel_shuffle", [x], [True], upscale_factor=3)
    _compare("pixel_unshuffle", [x], [True], downscale_factor=2)
    _compare("channel_shuffle", [x[0]], [True], groups=3)
    idx = rng.integers(0, 7, (3, 4))
    for n in (-1, 9):
        got = F.one_hot(ddpc.tensor(idx), n).numpy()
        want = torch.nn.functional.one_hot(torch.tensor(idx), n).numpy()
        assert got.dtype == want.dtype and np.array_equal(got, want), (got, want)


if __name__ == "__main__":
    import torch  # noqa: F401  (first, see the module docstring)

    torch.set_num_threads(1)
    globals()["_case_" + sys.argv[1]]()
    print("ok")

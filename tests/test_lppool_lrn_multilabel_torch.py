"""Optional: LPPool1d/2d/3d, LocalResponseNorm, CrossMapLRN2d and
MultiLabelMarginLoss against PyTorch's (skipped when torch is not
installed): repr, outputs and input gradients in float64 within 1e-12
(CrossMapLRN2d's outputs only: PyTorch's backward for it is not the
derivative of its forward, so its gradient is checked numerically in
test_lppool_lrn_multilabel.py).

Each comparison runs in a child process that imports torch before ddpc (see
test_nn_torch.py) and fails there, printing what differs.
"""

import sys

import pytest
from procs import run_torch_case


@pytest.mark.parametrize("case", ["lp_pool", "local_response_norm", "multilabel_margin_loss"])
def test_matches_pytorch(case):
    out = run_torch_case(__file__, case)
    assert out.strip().endswith("ok"), out


def _run(lib, module, x, *extra, grad=True):
    import numpy as np

    xt = lib.tensor(x, requires_grad=grad)
    out = module(xt, *(lib.tensor(e) for e in extra))
    if not grad:
        return [np.asarray(out.detach().numpy())]
    w = np.random.default_rng(1).standard_normal(tuple(out.shape))
    (out * lib.tensor(w)).sum().backward()
    return [np.asarray(out.detach().numpy()), np.asarray(xt.grad.numpy())]


def _compare(name, args, kwargs, x, *extra, grad=True):
    import numpy as np
    import torch

    import ddpc

    t, d = getattr(torch.nn, name)(*args, **kwargs), getattr(ddpc.nn, name)(*args, **kwargs)
    assert repr(d) == repr(t), (repr(d), repr(t))
    got, want = _run(ddpc, d, x, *extra, grad=grad), _run(torch, t, x, *extra, grad=grad)
    for what, a, b in zip(("output", "input gradient"), got, want):
        assert a.shape == b.shape, (name, args, kwargs, what, a.shape, b.shape)
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, err_msg=f"{name} {args} {kwargs} {what}")
    print(repr(d), x.shape, "matches")


def _case_lp_pool():
    import numpy as np

    rng = np.random.default_rng(0)
    cases = [("LPPool1d", (2, 3), {}, (2, 3, 10)), ("LPPool1d", (1, 2), dict(stride=1), (3, 7)),
             ("LPPool1d", (3.5, 3), dict(stride=2, ceil_mode=True), (2, 2, 8)),
             ("LPPool2d", (2, 2), {}, (2, 3, 6, 6)), ("LPPool2d", (1.5, (2, 3), 2, True), {}, (2, 7, 8)),
             ("LPPool2d", (float("inf"), 3), dict(stride=(1, 2)), (1, 2, 6, 7)),
             ("LPPool3d", (2, 2), {}, (2, 2, 4, 4, 4)), ("LPPool3d", (3, (1, 2, 3), (1, 2, 1)), {}, (2, 3, 4, 5)),
             ("LPPool3d", (-float("inf"), 2), dict(ceil_mode=True), (1, 2, 5, 5, 3))]
    for name, args, kwargs, shape in cases:
        # Away from 0, where x^(1/p) has no derivative; signed only where p is 1 or 2 (else x^p may be NaN).
        x = rng.uniform(0.2, 2.0, shape) * (rng.choice([-1, 1], shape) if args[0] in (1, 2) else 1)
        _compare(name, args, kwargs, x)


def _case_local_response_norm():
    import numpy as np

    rng = np.random.default_rng(0)
    for args, shape in (((3,), (2, 5, 7)), ((2, 1e-2, 0.5, 2.0), (2, 6, 4, 5)), ((5, 0.3), (1, 4, 3, 3, 2)),
                        ((4, 1.0, 1.0, 0.5), (3, 7, 5)), ((1,), (2, 3, 4, 4))):
        _compare("LocalResponseNorm", args, {}, rng.standard_normal(shape))
    for args, shape in (((3, 0.5, 0.75, 1.0), (2, 6, 3, 4)), ((5,), (2, 9, 2, 3)), ((4, 1e-2, 0.5, 2), (1, 7, 4, 4)),
                        ((2, 0.5), (2, 1, 3, 3))):
        _compare("CrossMapLRN2d", args, {}, rng.standard_normal(shape), grad=False)


def _case_multilabel_margin_loss():
    import numpy as np

    rng = np.random.default_rng(0)
    # Targets listed up to the first -1 (what follows is ignored), repeated classes, no target at all.
    target = np.array([[3, 0, -1, 1, 2, 5], [1, 1, -1, 0, 0, 0], [-1, 2, 3, 4, 5, 0], [0, 1, 2, 3, 4, 5],
                       [5, 4, 2, -1, -1, -1]])
    for reduction in ("mean", "sum", "none"):
        _compare("MultiLabelMarginLoss", (), dict(reduction=reduction), rng.standard_normal((5, 6)), target)
        _compare("MultiLabelMarginLoss", (), dict(reduction=reduction), rng.standard_normal(4),
                 np.array([2, 0, -1, 3]))


if __name__ == "__main__":
    import torch  # noqa: F401  (first, see the module docstring)

    torch.set_default_dtype(torch.float64)
    globals()["_case_" + sys.argv[1]]()
    print("ok")

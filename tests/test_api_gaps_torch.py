"""Optional: the smaller PyTorch functions of test_api_gaps.py against
PyTorch's own (skipped when torch is not installed): values and gradients
of pdist, fmax, fmin, float_power and diag_embed; isin, diagflat,
unravel_index, unique_consecutive and the windows; gumbel_softmax's class
frequencies and straight-through gradient structure.

Each comparison runs in a child process that imports torch before ddpc (see
test_nn_torch.py) and fails there, printing what it measured.
"""

import sys

import numpy as np
import pytest
from procs import run_torch_case


@pytest.mark.parametrize("case", ["functions"])
def test_matches_pytorch(case):
    out = run_torch_case(__file__, case)
    assert out.strip().endswith("ok"), out


def _value_and_grads(lib, fn, arrays, weight):
    ts = [lib.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    y = fn(*ts)
    if y.requires_grad:
        (y * lib.tensor(weight)).sum().backward()
    return [np.asarray(y.detach())] + [np.asarray(t.grad) for t in ts if t.grad is not None]


def _case_functions():
    import torch

    import ddpc

    rng = np.random.default_rng(0)
    checked = 0

    def same(name, fn_d, fn_t, arrays, tol=1e-12):
        nonlocal checked
        y = np.asarray(fn_t(*[torch.tensor(a) for a in arrays]))
        weight = rng.standard_normal(y.shape)
        got = _value_and_grads(ddpc, fn_d, arrays, weight)
        want = _value_and_grads(torch, fn_t, arrays, weight)
        assert len(got) == len(want), name
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, atol=tol, err_msg=name)
        checked += 1

    x = rng.standard_normal((6, 4))
    for p in (0.5, 1, 2, 3, np.inf):
        same(f"pdist p={p}", lambda t: ddpc.nn.functional.pdist(t, p), lambda t: torch.nn.functional.pdist(t, p), [x])
    a, b = rng.standard_normal(8), rng.standard_normal(8)
    a[[1, 3]], b[[3, 5]], b[6] = np.nan, np.nan, a[6]
    for name in ("fmax", "fmin"):
        same(name, getattr(ddpc, name), getattr(torch, name), [a, b])
    same("float_power", ddpc.float_power, torch.float_power, [np.abs(a) + 0.5, b * 0 + 1.5])
    same("float_power int", lambda t: ddpc.float_power(t, 3), lambda t: torch.float_power(t, 3),
         [rng.integers(-4, 4, 5)])
    for offset, d1, d2 in ((0, -2, -1), (1, 0, 2), (-2, 3, 1)):
        same(f"diag_embed {offset}", lambda t: ddpc.diag_embed(t, offset, d1, d2),
             lambda t: torch.diag_embed(t, offset, d1, d2), [rng.standard_normal((2, 3, 4))])
    for offset in (0, 2, -1):
        same(f"diagflat {offset}", lambda t: ddpc.diagflat(t, offset), lambda t: torch.diagflat(t, offset),
             [rng.standard_normal((2, 2))])

    e, t = rng.integers(0, 30, (5, 6)), rng.integers(0, 30, 9)
    for invert in (False, True):
        got = np.asarray(ddpc.isin(ddpc.tensor(e), ddpc.tensor(t), invert=invert))
        assert (got == torch.isin(torch.tensor(e), torch.tensor(t), invert=invert).numpy()).all()
        checked += 1
    fe, ft = np.array([1.0, np.nan, 2.5, -np.inf]), np.array([np.nan, 2.5, -np.inf])
    assert (np.asarray(ddpc.isin(ddpc.tensor(fe), ddpc.tensor(ft)))
            == torch.isin(torch.tensor(fe), torch.tensor(ft)).numpy()).all()

    flat = rng.integers(-60, 60, (3, 4))
    for g, w in zip(ddpc.unravel_index(ddpc.tensor(flat), (3, 4, 5)),
                    torch.unravel_index(torch.tensor(flat), (3, 4, 5))):
        assert (np.asarray(g) == w.numpy()).all()
    checked += 1

    runs = rng.integers(0, 3, (4, 6))
    for dim in (None, 0, 1):
        got = ddpc.unique_consecutive(ddpc.tensor(runs), return_inverse=True, return_counts=True, dim=dim)
        want = torch.unique_consecutive(torch.tensor(runs), return_inverse=True, return_counts=True, dim=dim)
        for g, w in zip(got, want):
            assert (np.asarray(g) == w.numpy()).all(), (dim, g, w)
        checked += 1

    for name in ("hann_window", "hamming_window", "blackman_window", "bartlett_window"):
        for n in (0, 1, 2, 5, 12):
            for periodic in (True, False):
                for dtype in ("float32", "float64"):
                    got = np.asarray(getattr(ddpc, name)(n, periodic, dtype=getattr(ddpc, dtype)))
                    want = getattr(torch, name)(n, periodic, dtype=getattr(torch, dtype)).numpy()
                    np.testing.assert_allclose(got, want, atol=1e-6 if dtype == "float32" else 1e-15)
                    checked += 1

    # gumbel_softmax: the same class frequencies (softmax of the logits) and the
    # same structure of the straight-through gradient (the soft sample's)
    logits = np.log(np.array([0.05, 0.15, 0.3, 0.5]))
    big = np.tile(logits, (40000, 1))
    ddpc.manual_seed(1)
    torch.manual_seed(1)
    freq_d = np.asarray(ddpc.nn.functional.gumbel_softmax(ddpc.tensor(big), tau=0.5, hard=True)).mean(0)
    freq_t = torch.nn.functional.gumbel_softmax(torch.tensor(big), tau=0.5, hard=True).numpy().mean(0)
    assert np.abs(freq_d - freq_t).max() < 0.015, (freq_d, freq_t)
    for lib, frame in ((ddpc, ddpc.nn.functional), (torch, torch.nn.functional)):
        lg = lib.tensor(np.tile(logits, (3, 1)), requires_grad=True)
        y = frame.gumbel_softmax(lg, tau=1.0, hard=True)
        y.sum().backward()  # d sum(soft) / d logits = 0: the soft sample sums to 1
        assert np.abs(np.asarray(lg.grad)).max() < 1e-12
    checked += 1
    print("checked", checked, "ok")


if __name__ == "__main__":
    import torch  # noqa: F401  (before ddpc, see the module docstring)

    {"functions": _case_functions}[sys.argv[1]]()

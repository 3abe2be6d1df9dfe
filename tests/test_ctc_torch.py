"""Optional: F.ctc_loss against PyTorch's (skipped when torch is not
installed) over random batches: every reduction, padded and concatenated
targets, other blanks, zero_infinity, float32 and float64, losses and
gradients. Runs in a child process that imports torch before ddpc (see
test_nn_torch.py)."""

import sys

import numpy as np
from procs import run_torch_case


def test_matches_pytorch():
    out = run_torch_case(__file__, "compare")
    assert out.strip().endswith("ok"), out


def _loss_and_grad(lib, x, dtype, targets, ilen, tlen, **kw):
    logits = lib.tensor(x, dtype=dtype, requires_grad=True)
    loss = lib.nn.functional.ctc_loss(lib.nn.functional.log_softmax(logits, 2), lib.tensor(targets), ilen, tlen, **kw)
    (loss.sum() if loss.ndim else loss).backward()
    return loss.detach().double().numpy(), logits.grad.double().numpy()


def compare():
    import torch
    import ddpc

    rng = np.random.default_rng(0)
    for case in range(40):
        T, N, C = int(rng.integers(1, 12)), int(rng.integers(1, 5)), int(rng.integers(2, 8))
        blank = int(rng.integers(0, C))
        labels = [c for c in range(C) if c != blank]
        tlen = [int(rng.integers(0, T + 2)) for _ in range(N)]
        ilen = [int(rng.integers(0, T + 1)) for _ in range(N)]
        ilen[0] = T
        S = max(max(tlen), 1)
        padded = rng.choice(labels, size=(N, S))
        concatenated = np.concatenate([padded[n, :tlen[n]] for n in range(N)])
        x = rng.standard_normal((T, N, C))
        for targets in (padded, concatenated):
            for reduction in ("none", "mean", "sum"):
                for zero_infinity in (False, True):
                    for tdt, ddt, tol in ((torch.float64, ddpc.float64, 1e-9), (torch.float32, ddpc.float32, 2e-4)):
                        kw = dict(blank=blank, reduction=reduction, zero_infinity=zero_infinity)
                        want = _loss_and_grad(torch, x, tdt, targets, ilen, tlen, **kw)
                        got = _loss_and_grad(ddpc, x, ddt, targets, ilen, tlen, **kw)
                        what = f"case {case} T={T} N={N} C={C} blank={blank} {kw} {tdt}"
                        # inf losses give NaN gradients in both without zero_infinity
                        np.testing.assert_allclose(got[0], want[0], rtol=tol, atol=tol, err_msg=what)
                        np.testing.assert_allclose(got[1], want[1], rtol=tol, atol=tol, err_msg=what)


if __name__ == "__main__":
    import torch  # noqa: F401  (before ddpc, see the module docstring)

    globals()[sys.argv[1]]()
    print("ok")

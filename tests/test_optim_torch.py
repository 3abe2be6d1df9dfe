"""Optional: ddpc.optim against torch.optim (skipped when torch is not
installed): maximize, and float16 and bfloat16 parameters.

Each comparison runs in a child process that imports torch before ddpc (see
test_nn_torch.py) and fails there, printing what it measured.
"""

import importlib.util
import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("case", ["maximize", "sixteen_bit"])
def test_matches_pytorch(case):
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    proc = subprocess.run([sys.executable, __file__, case], capture_output=True, text=True, timeout=240,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("ok"), proc.stdout


def _steps(lib, cls, kw, dtype, init, grads):
    """The parameters after one step per gradient list, as float64 numpy arrays."""
    import numpy as np

    params = [lib.tensor(a).to(dtype=dtype).requires_grad_() for a in init]
    opt = cls(params, **kw)
    for gs in grads:
        for p, g in zip(params, gs):
            p.grad = lib.tensor(g).to(dtype=dtype)
        opt.step()
    return [np.asarray(p.detach().double().numpy()) for p in params]


def _case_maximize():
    import torch
    import numpy as np

    import ddpc

    rng = np.random.default_rng(0)
    init = [rng.standard_normal(s) for s in ((20, 7), (7,))]
    grads = [[rng.standard_normal(a.shape) for a in init] for _ in range(6)]
    for name, kw in [("SGD", dict(lr=0.1, weight_decay=0.01)),
                     ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.2, weight_decay=0.01)),
                     ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True)),
                     ("Adam", dict(lr=1e-2, weight_decay=0.1, amsgrad=True)), ("AdamW", dict(lr=1e-2))]:
        kw = dict(kw, maximize=True)
        want = _steps(torch, getattr(torch.optim, name), kw, torch.float64, init, grads)
        got = _steps(ddpc, getattr(ddpc.optim, name), kw, ddpc.float64, init, grads)
        worst = max(float(np.abs(a - b).max()) for a, b in zip(got, want))
        print(name, kw, "max |ddpc - torch|", worst)
        assert worst < 1e-12


def _case_sixteen_bit():
    import torch
    import numpy as np

    import ddpc

    rng = np.random.default_rng(0)
    init = [rng.standard_normal(s).astype(np.float32) for s in ((64, 33), (33,), (5000,))]
    # Gradients away from 0: PyTorch's default float16 Adam adds eps = 1e-8 in float16, where it is 0,
    # and divides by zero wherever exp_avg_sq underflows.
    grads = [[(np.sign(g) * (0.5 + np.abs(g))).astype(np.float32) for g in (rng.standard_normal(a.shape)
                                                                             for a in init)] for _ in range(8)]
    for name, kw in [("SGD", dict(lr=0.05, momentum=0.9, weight_decay=0.01)),
                     ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, maximize=True)),
                     ("Adam", dict(lr=1e-2, weight_decay=0.01)), ("AdamW", dict(lr=1e-2, amsgrad=True)),
                     ("AdamW", dict(lr=1e-3, maximize=True))]:
        for tdt, ddt, eps in ((torch.bfloat16, ddpc.bfloat16, 2.0 ** -8), (torch.float16, ddpc.float16, 2.0 ** -11)):
            got = _steps(ddpc, getattr(ddpc.optim, name), kw, ddt, init, grads)
            # PyTorch's fused step computes in float32 and rounds once on store, as ddpc does.
            fused = _steps(torch, getattr(torch.optim, name), dict(kw, fused=True), tdt, init, grads)
            # Its default step rounds after each operation: a few roundings apart.
            default = _steps(torch, getattr(torch.optim, name), kw, tdt, init, grads)
            off_fused = max(float(np.mean(a != b)) for a, b in zip(got, fused))
            rel_fused = max(float(np.max(np.abs(a - b) / (np.abs(b) * eps * 2 + 1e-30))) for a, b in zip(got, fused))
            rel_default = max(float(np.max(np.abs(a - b)) / float(np.max(np.abs(b)))) for a, b in zip(got, default))
            print(f"{name} {kw} {ddt}: elements differing from fused {off_fused:.2e} (at most "
                  f"{rel_fused:.2f} rounding steps), max diff from default / max |p| {rel_default:.2e}")
            assert off_fused <= 1e-3 and rel_fused <= 1.0
            assert rel_default <= 8 * eps


if __name__ == "__main__":
    import torch  # noqa: F401  (first, see the module docstring)

    globals()["_case_" + sys.argv[1]]()
    print("ok")

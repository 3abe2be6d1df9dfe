"""Optional: ddpc.amp against torch.amp (skipped when torch is not
installed): an MLP's loss and gradients under CPU autocast, and GradScaler's
scale sequence and parameters over steps with injected overflows.

Each comparison runs in a child process that imports torch before ddpc (see
test_nn_torch.py) and fails there, printing what it measured.
"""

import sys

import pytest
from procs import run_torch_case


@pytest.mark.parametrize("case", ["autocast", "scaler", "scaler_without_gpu"])
def test_matches_pytorch(case):
    out = run_torch_case(__file__, case)
    assert out.strip().endswith("ok"), out


def _models(seed=0):
    """The same MLP in ddpc and in torch."""
    import numpy as np
    import torch

    import ddpc

    rng = np.random.default_rng(seed)
    shapes = [(32, 16), (32,), (4, 32), (4,)]
    arrays = [(rng.standard_normal(s) * 0.3).astype(np.float32) for s in shapes]
    ours = ddpc.nn.Sequential(ddpc.nn.Linear(16, 32), ddpc.nn.ReLU(), ddpc.nn.Linear(32, 4))
    theirs = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    with ddpc.no_grad(), torch.no_grad():
        for p, q, a in zip(ours.parameters(), theirs.parameters(), arrays):
            p.copy_(ddpc.tensor(a))
            q.copy_(torch.tensor(a))
    return ours, theirs


def _data(step=0):
    import numpy as np

    rng = np.random.default_rng(100 + step)
    return rng.standard_normal((24, 16)).astype(np.float32), rng.integers(0, 4, 24)


def _case_autocast():
    import numpy as np
    import torch

    import ddpc

    ours, theirs = _models()
    x, y = _data()
    with ddpc.autocast("cpu"):
        h = ours(ddpc.tensor(x))
        loss = ddpc.nn.functional.cross_entropy(h, ddpc.tensor(y))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        th = theirs(torch.tensor(x))
        tloss = torch.nn.functional.cross_entropy(th, torch.tensor(y))
    assert str(h.dtype) == "ddpc.bfloat16" and th.dtype == torch.bfloat16
    assert str(loss.dtype) == "ddpc.float32" and tloss.dtype == torch.float32
    # bfloat16 keeps 8 bits: the logits may differ by a rounding step where the
    # float32 accumulations before the rounding differ in their last bits.
    np.testing.assert_allclose(h.float().numpy(), th.float().detach().numpy(), rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(loss.item(), tloss.item(), rtol=2e-3)
    loss.backward()
    tloss.backward()
    for p, q in zip(ours.parameters(), theirs.parameters()):
        assert str(p.grad.dtype) == "ddpc.float32" and q.grad.dtype == torch.float32
        g, tg = p.grad.numpy(), q.grad.numpy()
        np.testing.assert_allclose(g, tg, rtol=0, atol=2e-2 * np.abs(tg).max())


def _case_scaler():
    import numpy as np
    import torch

    import ddpc

    ours, theirs = _models(1)
    opt = ddpc.optim.SGD(ours.parameters(), lr=0.05, momentum=0.9)
    topt = torch.optim.SGD(theirs.parameters(), lr=0.05, momentum=0.9)
    scaler = ddpc.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=2)
    tscaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=2)
    scales, tscales = [], []
    for step in range(8):
        x, y = _data(step)
        if step in (2, 5):
            x[3, 7] = np.inf
        opt.zero_grad()
        topt.zero_grad()
        scaler.scale(ddpc.nn.functional.cross_entropy(ours(ddpc.tensor(x)), ddpc.tensor(y))).backward()
        tscaler.scale(torch.nn.functional.cross_entropy(theirs(torch.tensor(x)), torch.tensor(y))).backward()
        if step == 6:
            scaler.unscale_(opt)
            tscaler.unscale_(topt)
            ddpc.nn.utils.clip_grad_norm_(ours.parameters(), 0.5)
            torch.nn.utils.clip_grad_norm_(theirs.parameters(), 0.5)
        scaler.step(opt)
        tscaler.step(topt)
        scaler.update()
        tscaler.update()
        scales.append(scaler.get_scale())
        tscales.append(tscaler.get_scale())
    print("scales", scales, tscales)
    assert scales == tscales
    for p, q in zip(ours.parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6)


def _case_scaler_without_gpu():
    import torch

    import ddpc

    if torch.cuda.is_available() or ddpc.cuda.is_available():
        return
    made = [(ddpc.cuda.amp.GradScaler(), torch.cuda.amp.GradScaler()),
            (ddpc.amp.GradScaler("cuda", init_scale=8.0), torch.amp.GradScaler("cuda", init_scale=8.0)),
            (ddpc.amp.GradScaler("cpu", init_scale=8.0), torch.amp.GradScaler("cpu", init_scale=8.0))]
    ours = [(s.is_enabled(), s.get_scale(), s.state_dict()) for s, _ in made]
    theirs = [(s.is_enabled(), s.get_scale(), s.state_dict()) for _, s in made]
    print("scalers", ours, theirs)
    assert ours == theirs


if __name__ == "__main__":
    import warnings

    import torch  # noqa: F401  (first, see the module docstring)

    warnings.simplefilter("ignore")
    globals()["_case_" + sys.argv[1]]()
    print("ok")

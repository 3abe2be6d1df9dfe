"""Optional: ddpc.amp against torch.amp (skipped when torch is not
installed): an MLP's loss and gradients under CPU autocast, the dtypes of
the products with an added term, prelu, LSTM and mv under it (and in a
float32 region, which turns it off), and GradScaler's scale sequence and
parameters over steps with injected overflows, after update(new_scale),
near float32's largest scale, over iterables and sparse gradients.

Each comparison runs in a child process that imports torch before ddpc (see
test_nn_torch.py) and fails there, printing what it measured.
"""

import sys

import pytest
from procs import run_torch_case


@pytest.mark.parametrize("case", ["autocast", "autocast_dtypes", "scaler", "scaler_without_gpu", "scaler_more"])
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


def _case_autocast_dtypes():
    import torch

    import ddpc

    def dtypes(lib):
        a, b, v = lib.ones(4, 8), lib.ones(8, 5), lib.ones(8)
        with lib.autocast("cpu", dtype=lib.bfloat16):
            out = {"addmm": lib.addmm(lib.zeros(5), a, b), "baddbmm": lib.baddbmm(lib.zeros(1, 4, 5), a[None], b[None]),
                   "addbmm": lib.addbmm(lib.zeros(4, 5), a[None], b[None]),
                   "prelu": lib.nn.functional.prelu(a, lib.ones(1)), "LSTM": lib.nn.LSTM(8, 4)(a[None])[0],
                   "mv": lib.mv(a, v), "mm": lib.mm(a, b)}
            with lib.autocast("cpu", dtype=lib.float32):  # not a CPU autocast dtype: autocast off within
                out["mm in a float32 region"] = lib.mm(a, b)
        return {k: str(t.dtype).split(".")[-1] for k, t in out.items()}

    ours, theirs = dtypes(ddpc), dtypes(torch)
    print("dtypes", ours, theirs)
    assert ours == theirs


def _case_scaler_more():
    import numpy as np
    import torch

    import ddpc

    def trajectory(lib):
        p = lib.ones(2, requires_grad=True)
        opt = lib.optim.SGD([p], lr=0.1)
        sc = lib.amp.GradScaler("cpu", init_scale=8.0, growth_interval=3)
        out = []
        for i in range(6):
            opt.zero_grad()
            sc.scale((p * p).sum()).backward()
            sc.step(opt)
            sc.update(1024.0) if i == 1 else sc.update()
            out.append((sc.get_scale(), sc.state_dict()["_growth_tracker"]))
        scaled = sc.scale({"a": lib.ones(1), "b": [lib.ones(1)]}.values())
        kinds = [type(scaled).__name__] + [type(x).__name__ for x in scaled]
        return out, kinds

    def sparse(lib, bad):
        lib.manual_seed(0)
        emb = lib.nn.Embedding(5, 3, sparse=True)
        with lib.no_grad():
            emb.weight.copy_(lib.tensor(np.arange(15, dtype=np.float32).reshape(5, 3)))
        opt = lib.optim.SGD(emb.parameters(), lr=0.1)
        sc = lib.amp.GradScaler("cpu", init_scale=4.0)
        sc.scale(emb(lib.tensor(np.array([1, 1, 2]))).sum() * bad).backward()
        sc.step(opt)
        sc.update()
        return emb.weight.detach().numpy(), sc.get_scale()

    def near_float32_max(lib):
        p = lib.ones(2, requires_grad=True)
        opt = lib.optim.SGD([p], lr=0.1)
        sc = lib.amp.GradScaler("cpu", init_scale=2.0 ** 127, growth_interval=1)
        for _ in range(3):
            opt.zero_grad()
            sc.scale(p.sum()).backward()
            sc.step(opt)
            sc.update()
        return sc.get_scale(), sc.state_dict()["_growth_tracker"], p.detach().numpy().tolist()

    ours, theirs = trajectory(ddpc), trajectory(torch)
    print("scaler", ours, theirs)
    assert ours == theirs
    ours, theirs = near_float32_max(ddpc), near_float32_max(torch)
    print("near float32's max", ours, theirs)
    assert ours == theirs
    for bad in (1.0, float("inf")):
        (w, scale), (tw, tscale) = sparse(ddpc, bad), sparse(torch, bad)
        print("sparse", bad, scale, tscale)
        assert scale == tscale
        np.testing.assert_allclose(w, tw, rtol=1e-6)


if __name__ == "__main__":
    import warnings

    import torch  # noqa: F401  (first, see the module docstring)

    warnings.simplefilter("ignore")
    globals()["_case_" + sys.argv[1]]()
    print("ok")

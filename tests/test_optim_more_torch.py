"""Optional: Rprop, ASGD, Adafactor and LBFGS against torch.optim (skipped
when torch is not installed): parameter trajectories and every state entry
over their options in float64 and float32, driven by a StepLR over two
parameter groups; LBFGS with and without the strong-Wolfe line search on
the Rosenbrock function and on a small least-squares model, step for step,
its function-evaluation counts included, and after a state_dict round trip.

Each comparison runs in a child process that imports torch before ddpc (see
test_nn_torch.py) and fails there, printing what it measured.
"""

import sys

import pytest
from procs import run_torch_case


@pytest.mark.parametrize("case", ["elementwise", "lbfgs", "lbfgs_state_dict"])
def test_matches_pytorch(case):
    out = run_torch_case(__file__, case)
    assert out.strip().endswith("ok"), out


ELEMENTWISE = [
    ("Rprop", {}), ("Rprop", dict(lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-3, 0.2))),
    ("Rprop", dict(lr=0.01, maximize=True)),
    ("ASGD", {}), ("ASGD", dict(lr=0.05, lambd=1e-2, alpha=0.5, t0=4)),
    ("ASGD", dict(lr=0.05, t0=2, weight_decay=0.1, maximize=True)),
    ("Adafactor", {}), ("Adafactor", dict(lr=0.05, beta2_decay=-0.5, d=2.0, eps=(1e-20, 1e-2))),
    ("Adafactor", dict(weight_decay=0.1, maximize=True)),
]


def _to_numpy(lib, value):
    import numpy as np

    if isinstance(value, lib.Tensor):
        return np.asarray(value.detach().double().numpy())
    if isinstance(value, list):
        return [_to_numpy(lib, v) for v in value]
    return value


def _case_elementwise():
    """Twelve steps from the same start and gradients; a StepLR halves the lrs every four steps; the
    parameters are a matrix, a vector, a 3-d tensor (Adafactor's factored second moment over its last
    two dims) and a scalar."""
    import numpy as np
    import torch

    import ddpc

    rng = np.random.default_rng(0)
    init = [rng.standard_normal(s) for s in ((20, 7), (7,), (3, 4, 5), ())]
    grads = [[rng.standard_normal(a.shape) for a in init] for _ in range(12)]
    # Every third step some gradients change sign, so Rprop's step sizes shrink as well as grow.
    for i in range(2, 12, 3):
        grads[i] = [-g * 0.5 for g in grads[i - 1]]

    def run(lib, name, kw, dtype):
        params = [lib.tensor(a).to(dtype=dtype).requires_grad_() for a in init]
        opt = getattr(lib.optim, name)([{"params": params[:2]}, {"params": params[2:], "lr": 0.02}], **kw)
        sched = lib.optim.lr_scheduler.StepLR(opt, 4, 0.5)
        for gs in grads:
            for p, g in zip(params, gs):
                p.grad = lib.tensor(g).to(dtype=dtype)
            opt.step()
            sched.step()
        state = [{k: _to_numpy(lib, v) for k, v in opt.state[p].items()} for p in params]
        return [np.asarray(p.detach().double().numpy()) for p in params], state

    for name, kw in ELEMENTWISE:
        for tdt, ddt, tol in ((torch.float64, ddpc.float64, 1e-10), (torch.float32, ddpc.float32, 1e-5)):
            torch.set_default_dtype(tdt)  # PyTorch keeps ASGD's eta and mu in the default dtype
            want, want_state = run(torch, name, kw, tdt)
            got, got_state = run(ddpc, name, kw, ddt)
            worst = max(float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)) for a, b in zip(got, want))
            state_worst = 0.0
            for g, w in zip(got_state, want_state):
                assert list(g) == list(w), (list(g), list(w))
                for k in w:
                    scale = max(float(np.abs(w[k]).max()), 1e-30)
                    state_worst = max(state_worst, float(np.abs(np.asarray(g[k]) - w[k]).max()) / scale)
            print(name, kw, tdt, "max |ddpc - torch| / max |torch|: params", worst, "state", state_worst)
            assert worst < tol and state_worst < tol
    torch.set_default_dtype(torch.float32)


def _rosenbrock(lib, params):
    x, y = params
    return ((1 - x) ** 2 + 100 * (y - x ** 2) ** 2).sum()


def _least_squares(lib, params):
    import numpy as np

    w, b = params
    rng = np.random.default_rng(1)
    a = lib.tensor(rng.standard_normal((30, 6))).to(dtype=w.dtype)
    target = lib.tensor(rng.standard_normal((30, 2))).to(dtype=w.dtype)
    return (((a @ w + b - target) ** 2).mean() + 0.01 * (w ** 4).sum())


# (loss, parameter shapes or values, options, steps, also in float32): Rosenbrock's valley amplifies rounding
# differences about tenfold every few iterations, so its runs are kept short enough for float64 to stay within
# 1e-9; float32 runs that reach their minimum stop on rounding noise, so float32 is compared on short runs.
LBFGS_CASES = [
    (_rosenbrock, [(-1.5, -0.5, 0.3), (2.0, 1.0, 0.1)], {}, 1, False),
    (_rosenbrock, [(-1.5, -0.5, 0.3), (2.0, 1.0, 0.1)], dict(line_search_fn="strong_wolfe"), 1, False),
    (_rosenbrock, [(-1.5, -0.5, 0.3), (2.0, 1.0, 0.1)], dict(lr=0.5, history_size=3, max_iter=4), 3, True),
    (_rosenbrock, [(-1.5, -0.5, 0.3), (2.0, 1.0, 0.1)], dict(history_size=2, line_search_fn="strong_wolfe",
                                                             max_iter=4, max_eval=5), 3, False),
    (_least_squares, [(6, 2), (2,)], {}, 3, False),
    (_least_squares, [(6, 2), (2,)], dict(line_search_fn="strong_wolfe", tolerance_change=1e-12), 3, False),
    (_least_squares, [(6, 2), (2,)], dict(lr=0.3, max_iter=4, tolerance_grad=1e-3), 4, True),
    (_least_squares, [(6, 2), (2,)], dict(maximize=True, max_iter=5, lr=0.01), 4, True),
]


def _lbfgs_run(lib, loss_fn, shapes, kw, dtype, steps, reload_after=None):
    """The losses, parameters, state counters and state keys after each of `steps` LBFGS steps; with reload_after, the
    optimizer is rebuilt from its state_dict after that many steps."""
    import numpy as np

    rng = np.random.default_rng(2)
    init = [np.asarray(s, dtype=np.float64) if isinstance(s[0], float) else rng.standard_normal(s) * 0.5
            for s in shapes]
    params = [lib.tensor(a).to(dtype=dtype).requires_grad_() for a in init]
    opt = lib.optim.LBFGS(params, **kw)

    def closure():
        opt.zero_grad()
        loss = loss_fn(lib, params)
        loss.backward()
        return loss

    trace = []
    for i in range(steps):
        if i == reload_after:
            saved = opt.state_dict()
            opt = lib.optim.LBFGS(params, **kw)
            opt.load_state_dict(saved)
        loss = float(opt.step(closure).detach())
        state = opt.state[params[0]]
        trace.append((loss, [np.asarray(p.detach().double().numpy()) for p in params], state["func_evals"],
                      state["n_iter"], sorted(state)))
    return trace


def _compare_lbfgs(reload_after=None):
    import numpy as np
    import torch

    import ddpc

    for loss_fn, shapes, kw, steps, float32_too in LBFGS_CASES:
        for tdt, ddt, tol in ((torch.float64, ddpc.float64, 1e-9), (torch.float32, ddpc.float32, 1e-5)):
            if tdt is torch.float32 and not float32_too:
                continue
            want = _lbfgs_run(torch, loss_fn, shapes, kw, tdt, steps, reload_after)
            got = _lbfgs_run(ddpc, loss_fn, shapes, kw, ddt, steps, reload_after)
            worst = 0.0
            for (gl, gp, ge, gn, gk), (wl, wp, we, wn, wk) in zip(got, want):
                assert gk == wk, (gk, wk)
                if tdt is torch.float64:
                    assert (ge, gn) == (we, wn), ((ge, gn), (we, wn))
                worst = max([worst, abs(gl - wl) / max(abs(wl), 1e-30)] +
                            [float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)) for a, b in zip(gp, wp)])
            print(loss_fn.__name__, kw, tdt, "evaluations", [t[2] for t in got], "iterations", [t[3] for t in got],
                  "max relative |ddpc - torch|", worst)
            assert worst < tol


def _case_lbfgs():
    _compare_lbfgs()


def _case_lbfgs_state_dict():
    """Rebuilt from its state_dict after one step, LBFGS goes on as the uninterrupted PyTorch one."""
    _compare_lbfgs(reload_after=1)


if __name__ == "__main__":
    import torch  # noqa: F401  (first, see the module docstring)

    globals()["_case_" + sys.argv[1]]()
    print("ok")

"""Rprop, ASGD, Adafactor and LBFGS against numpy implementations of
PyTorch's documented rules (LBFGS against the minimum of a quadratic);
their state dicts, LR schedulers and argument checks."""

import numpy as np
import pytest

import ddpc
from ddpc import optim
from test_optim import assert_state_dict_round_trip_continues, assert_step_lr_drives, grads_for, make_params, run


def numpy_rprop(start, steps, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50)):
    ps = [p.copy() for p in start]
    prev = [np.zeros_like(p) for p in ps]
    size = [np.full_like(p, lr) for p in ps]
    for t in range(steps):
        for i, g in enumerate(grads_for(t, ps)):
            sign = np.sign(g * prev[i])
            size[i] = np.clip(size[i] * np.where(sign > 0, etas[1], np.where(sign < 0, etas[0], 1.0)), *step_sizes)
            g = np.where(sign < 0, 0.0, g)
            ps[i] = ps[i] - np.sign(g) * size[i]
            prev[i] = g
    return ps


def numpy_asgd(start, steps, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0.0):
    ps = [p.copy() for p in start]
    ax = [np.zeros_like(p) for p in ps]
    eta, mu = lr, 1.0
    for t in range(1, steps + 1):
        for i, g in enumerate(grads_for(t - 1, ps)):
            g = g + weight_decay * ps[i]
            ps[i] = ps[i] * (1 - lambd * eta) - eta * g
            ax[i] = ax[i] + (ps[i] - ax[i]) * mu
        eta = lr / (1 + lambd * lr * t) ** alpha
        mu = 1 / max(1, t - t0)
    return ps, ax


def numpy_adafactor(start, steps, lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0, weight_decay=0.0):
    ps = [p.copy() for p in start]
    eps1 = np.finfo(np.float64).eps if eps[0] is None else eps[0]
    var = [None] * len(ps)
    for t in range(1, steps + 1):
        for i, g in enumerate(grads_for(t - 1, ps)):
            p = ps[i]
            beta = 1 - t ** beta2_decay
            alpha = max(eps[1], np.sqrt(np.mean(p * p))) * min(lr, 1 / np.sqrt(t))
            p = p * (1 - lr * weight_decay)
            if p.ndim > 1:
                row, col = (g * g).mean(-1, keepdims=True), (g * g).mean(-2, keepdims=True)
                if var[i] is None:
                    var[i] = [np.zeros_like(row), np.zeros_like(col)]
                var[i] = [beta * var[i][0] + (1 - beta) * row, beta * var[i][1] + (1 - beta) * col]
                v = var[i][0] * var[i][1] / np.maximum(var[i][0].mean(-2, keepdims=True), eps1)
            else:
                var[i] = beta * (0 if var[i] is None else var[i]) + (1 - beta) * g * g
                v = var[i]
            u = g / np.sqrt(np.maximum(v, eps1 * eps1))
            ps[i] = p - alpha * u / max(1.0, np.sqrt(np.mean(u * u)) / d)
    return ps


def arrays(params):
    return [p.detach().numpy().copy() for p in params]


@pytest.mark.parametrize("kw", [{}, dict(lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-3, 0.08))])
def test_rprop_follows_the_documented_rule(kw):
    params = make_params()
    start = arrays(params)
    run(optim.Rprop(params, **kw), params, 6)
    for got, want in zip(arrays(params), numpy_rprop(start, 6, **kw)):
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("kw", [dict(lr=0.1), dict(lr=0.05, lambd=0.01, alpha=0.5, t0=2, weight_decay=0.1)])
def test_asgd_follows_the_documented_rule_and_averages_from_t0(kw):
    params = make_params()
    start = arrays(params)
    opt = optim.ASGD(params, **kw)
    run(opt, params, 6)
    want, want_ax = numpy_asgd(start, 6, **kw)
    for p, w, a in zip(params, want, want_ax):
        np.testing.assert_allclose(p.detach().numpy(), w, rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(opt.state[p]["ax"].numpy(), a, rtol=1e-14, atol=1e-15)
    assert sorted(opt.state[params[0]]) == ["ax", "eta", "mu", "step"] and opt.state[params[0]]["step"] == 6


@pytest.mark.parametrize("kw", [{}, dict(lr=0.05, beta2_decay=-0.5, eps=(1e-6, 1e-2), d=1.5, weight_decay=0.1)])
def test_adafactor_follows_the_documented_rule(kw):
    params = make_params()
    start = arrays(params)
    opt = optim.Adafactor(params, **kw)
    run(opt, params, 5)
    for got, want in zip(arrays(params), numpy_adafactor(start, 5, **kw)):
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)
    # A matrix keeps row and column means of the squared gradient over its last two dims, a vector all of it.
    assert opt.state[params[2]]["row_var"].shape == (2, 2, 1) and opt.state[params[2]]["col_var"].shape == (2, 1, 2)
    assert sorted(opt.state[params[1]]) == ["step", "variance"]


def quadratic(n=5):
    rng = np.random.default_rng(3)
    m = rng.standard_normal((n, n))
    return m @ m.T + n * np.eye(n), rng.standard_normal(n)


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_lbfgs_finds_the_minimum_of_a_quadratic(line_search_fn):
    a, b = quadratic()
    x = ddpc.zeros(5, dtype=ddpc.float64, requires_grad=True)
    opt = optim.LBFGS([x], lr=1 if line_search_fn else 0.1, max_iter=200, tolerance_grad=1e-11,
                      tolerance_change=0, line_search_fn=line_search_fn)
    A, B = ddpc.tensor(a), ddpc.tensor(b)
    calls = []

    def closure():
        calls.append(1)
        opt.zero_grad()
        loss = 0.5 * (x @ (A @ x)) - B @ x
        loss.backward()
        return loss

    first = opt.step(closure)
    assert float(first) == 0.0  # the loss at the start
    np.testing.assert_allclose(x.detach().numpy(), np.linalg.solve(a, b), rtol=1e-9, atol=1e-10)
    assert opt.state[x]["func_evals"] == len(calls)


def test_lbfgs_first_iteration_is_a_scaled_gradient_step():
    x = ddpc.tensor([3.0, -4.0], dtype=ddpc.float64, requires_grad=True)
    opt = optim.LBFGS([x], lr=0.5, max_iter=1)

    def closure():
        opt.zero_grad()
        loss = (x * x).sum()
        loss.backward()
        return loss

    opt.step(closure)
    g = np.array([6.0, -8.0])
    np.testing.assert_allclose(x.detach().numpy(), np.array([3.0, -4.0]) - min(1, 1 / 14) * 0.5 * g, rtol=1e-15)
    state = opt.state[x]
    assert state["n_iter"] == 1 and state["func_evals"] == 1 and state["t"] == 0.5 / 14


@pytest.mark.parametrize("name,kw", [("Rprop", dict(lr=0.05)), ("ASGD", dict(t0=2)), ("Adafactor", {}),
                                     ("Adafactor", dict(weight_decay=0.1))])
def test_state_dict_round_trip_continues_identically(name, kw):
    assert_state_dict_round_trip_continues(lambda params: getattr(optim, name)(params, **kw))


def test_lbfgs_state_dict_round_trip_continues_identically():
    a, b = quadratic()
    A, B = ddpc.tensor(a), ddpc.tensor(b)
    xs = [ddpc.zeros(5, dtype=ddpc.float64, requires_grad=True) for _ in range(2)]
    opts = [optim.LBFGS([x], lr=0.1, max_iter=3, history_size=2) for x in xs]

    def closure_for(opt, x):
        def closure():
            opt.zero_grad()
            loss = 0.5 * (x @ (A @ x)) - B @ x
            loss.backward()
            return loss
        return closure

    for opt, x in zip(opts, xs):
        opt.step(closure_for(opt, x))
    saved = opts[1].state_dict()
    assert sorted(saved["state"][0]) == ["H_diag", "al", "d", "func_evals", "n_iter", "old_dirs", "old_stps",
                                         "prev_flat_grad", "prev_loss", "ro", "t"]
    opts[1] = optim.LBFGS([xs[1]], lr=0.1, max_iter=3, history_size=2)
    opts[1].load_state_dict(saved)
    for _ in range(3):
        for opt, x in zip(opts, xs):
            opt.step(closure_for(opt, x))
    np.testing.assert_array_equal(xs[0].detach().numpy(), xs[1].detach().numpy())


@pytest.mark.parametrize("name", ["ASGD", "Adafactor"])
def test_lr_schedulers_drive_them(name):
    assert_step_lr_drives(lambda params: getattr(optim, name)(params, lr=0.05))


def test_argument_checks():
    p = make_params()
    with pytest.raises(ValueError, match="learning rate"):
        optim.Rprop(p, lr=-1)
    with pytest.raises(ValueError, match="Invalid eta values: 0.5, 0.9"):
        optim.Rprop(p, etas=(0.5, 0.9))
    with pytest.raises(ValueError, match="not supported"):
        optim.Rprop(p, capturable=True)
    for make in (lambda: optim.Adam(p, capturable=True), lambda: optim.AdamW(p, differentiable=True),
                 lambda: optim.SGD(p, differentiable=True)):
        with pytest.raises(ValueError, match="not supported"):
            make()
    optim.AdamW(p, capturable=False, differentiable=False)  # PyTorch's defaults, spelled out
    with pytest.raises(ValueError, match="lambd"):
        optim.ASGD(p, lambd=-1)
    with pytest.raises(ValueError, match="alpha"):
        optim.ASGD(p, alpha=-1)
    with pytest.raises(ValueError, match="weight_decay"):
        optim.ASGD(p, weight_decay=-1)
    with pytest.raises(ValueError, match="beta2_decay should be <= 0"):
        optim.Adafactor(p, beta2_decay=0.5)
    with pytest.raises(ValueError, match="epsilon1"):
        optim.Adafactor(p, eps=(-1, 1e-3))
    with pytest.raises(ValueError, match="epsilon2"):
        optim.Adafactor(p, eps=(None, -1))
    with pytest.raises(ValueError, match="Clipping threshold d"):
        optim.Adafactor(p, d=0.5)
    with pytest.raises(ValueError, match="Learning rate"):
        optim.Adafactor(p, lr=-1)
    with pytest.raises(ValueError, match="parameter groups"):
        optim.LBFGS([{"params": p[:1]}, {"params": p[1:]}])
    opt = optim.LBFGS(p[:1])
    with pytest.raises(ValueError, match="parameter groups"):
        opt.add_param_group({"params": p[1:]})
    with pytest.raises(ValueError, match="strong_wolfe"):
        optim.LBFGS(p, line_search_fn="backtracking")
    with pytest.raises(ValueError, match="one device and of one dtype"):
        optim.LBFGS([p[0], ddpc.zeros(2, dtype=ddpc.float32, requires_grad=True)])
    with pytest.raises(TypeError):
        opt.step()

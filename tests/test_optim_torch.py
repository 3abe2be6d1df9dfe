"""Optional: ddpc.optim against torch.optim (skipped when torch is not
installed): maximize, float16 and bfloat16 parameters, RMSprop, Adagrad,
Adamax, NAdam, RAdam and Adadelta over their options (trajectories and
state), schedulers driving them and their betas, the cyclic
schedulers' lr and momentum sequences, the chainable schedulers alone,
composed on one optimizer, chained and in sequence, every scheduler over a
param group added after it, state dicts saved by PyTorch (MultiStepLR,
LambdaLR, Adam with a 0-d parameter) continued in ddpc, optimizers over
named parameters, the optimizer hooks' calls, and AveragedModel over
integer buffers.

Each comparison runs in a child process that imports torch before ddpc (see
test_nn_torch.py) and fails there, printing what it measured.
"""

import sys

import pytest
from procs import run_torch_case


@pytest.mark.parametrize("case", ["maximize", "sixteen_bit", "more_optimizers", "schedulers",
                                  "chainable_schedulers", "schedulers_after_add_param_group", "pytorch_state_dicts",
                                  "named_parameters", "hooks", "swa_integer_buffers"])
def test_matches_pytorch(case):
    out = run_torch_case(__file__, case)
    assert out.strip().endswith("ok"), out


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


MORE_OPTIMIZERS = [
    ("RMSprop", {}), ("RMSprop", dict(lr=0.05, weight_decay=0.1)), ("RMSprop", dict(momentum=0.9)),
    ("RMSprop", dict(centered=True, alpha=0.3)),
    ("RMSprop", dict(lr=0.03, alpha=0.9, eps=1e-4, momentum=0.5, centered=True, weight_decay=0.1, maximize=True)),
    ("Adagrad", {}), ("Adagrad", dict(lr=0.1, lr_decay=0.1)), ("Adagrad", dict(weight_decay=0.1, eps=1e-4)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.05, weight_decay=0.1, initial_accumulator_value=0.5, maximize=True)),
    ("Adamax", {}), ("Adamax", dict(lr=0.01, betas=(0.8, 0.9), eps=1e-3)),
    ("Adamax", dict(weight_decay=0.1, maximize=True)),
    ("NAdam", {}), ("NAdam", dict(lr=0.01, momentum_decay=0.05, betas=(0.8, 0.95))),
    ("NAdam", dict(weight_decay=0.1)), ("NAdam", dict(weight_decay=0.1, decoupled_weight_decay=True)),
    ("NAdam", dict(weight_decay=0.1, decoupled_weight_decay=True, eps=1e-3, maximize=True)),
    ("RAdam", {}), ("RAdam", dict(betas=(0.8, 0.9), lr=0.01)), ("RAdam", dict(weight_decay=0.1)),
    ("RAdam", dict(weight_decay=0.1, decoupled_weight_decay=True, betas=(0.9, 0.5))),
    ("RAdam", dict(weight_decay=0.1, eps=1e-3, maximize=True)),
    ("Adadelta", {}), ("Adadelta", dict(lr=0.5, rho=0.5)), ("Adadelta", dict(weight_decay=0.1, eps=1e-4)),
    ("Adadelta", dict(rho=0.95, weight_decay=0.1, maximize=True)),
]


def _case_more_optimizers():
    """Ten steps from the same start and gradients, in float64 and float32 (torch's default dtype set to
    match, since it keeps NAdam's mu_product in that dtype); then each state entry. Two param groups, the
    second with its own lr, and a StepLR halving the lrs every three steps."""
    import torch
    import numpy as np

    import ddpc

    rng = np.random.default_rng(0)
    init = [rng.standard_normal(s) for s in ((20, 7), (7,), (3, 2, 2))]
    grads = [[rng.standard_normal(a.shape) for a in init] for _ in range(10)]

    def run(lib, name, kw, dtype):
        params = [lib.tensor(a).to(dtype=dtype).requires_grad_() for a in init]
        opt = getattr(lib.optim, name)([{"params": params[:2]}, {"params": params[2:], "lr": 0.02}], **kw)
        sched = lib.optim.lr_scheduler.StepLR(opt, 3, 0.5)
        for gs in grads:
            for p, g in zip(params, gs):
                p.grad = lib.tensor(g).to(dtype=dtype)
            opt.step()
            sched.step()
        state = [{k: np.asarray(v.double().numpy()) if isinstance(v, lib.Tensor) else v
                  for k, v in opt.state[p].items()} for p in params]
        return [np.asarray(p.detach().double().numpy()) for p in params], state

    for name, kw in MORE_OPTIMIZERS:
        for tdt, ddt, tol in ((torch.float64, ddpc.float64, 1e-10), (torch.float32, ddpc.float32, 1e-6)):
            torch.set_default_dtype(tdt)
            want, want_state = run(torch, name, kw, tdt)
            got, got_state = run(ddpc, name, kw, ddt)
            worst = max(float(np.abs(a - b).max() / np.abs(b).max()) for a, b in zip(got, want))
            state_worst = 0.0
            for g, w in zip(got_state, want_state):
                assert list(g) == list(w), (list(g), list(w))
                for k in w:
                    scale = max(float(np.abs(w[k]).max()), 1e-30)
                    state_worst = max(state_worst, float(np.abs(np.asarray(g[k]) - w[k]).max()) / scale)
            print(name, kw, tdt, "max |ddpc - torch| / max |torch|: params", worst, "state", state_worst)
            assert worst < tol and state_worst < 10 * tol
    torch.set_default_dtype(torch.float32)


def _case_schedulers():
    import torch
    import numpy as np

    import ddpc

    def trace(lib, opt_name, opt_kw, sched_name, sched_kw, n, epochs=None):
        optim = torch.optim if lib is torch else ddpc.optim
        p, q = lib.zeros(1, requires_grad=True), lib.zeros(1, requires_grad=True)
        opt = getattr(optim, opt_name)([{"params": [p]}, {"params": [q], "lr": 0.3}], **opt_kw)
        sched = getattr(optim.lr_scheduler, sched_name)(opt, **sched_kw)
        key = "betas" if "betas" in opt.defaults else "momentum"
        out = []
        for i in range(n):
            opt.step()
            sched.step() if epochs is None else sched.step(epochs[i])
            for g in opt.param_groups:
                out += [g["lr"], g[key][0] if key == "betas" else g[key]]
        return np.array(out)

    fractional = [0, 0.5, 1.2, 2.9, 3.0, 5.5, 7.99, 8.0, 13, 26, 27.5]
    cases = [
        ("SGD", dict(lr=0.1, momentum=0.9), "OneCycleLR", dict(max_lr=1.0, total_steps=20), 20, None),
        ("NAdam", dict(lr=0.1), "OneCycleLR", dict(max_lr=1.0, total_steps=20), 20, None),
        ("RMSprop", dict(lr=0.1, momentum=0.9), "CyclicLR", dict(base_lr=0.01, max_lr=0.1, step_size_up=4), 30, None),
        ("Adam", dict(lr=0.1), "OneCycleLR", dict(max_lr=[1.0, 2.0], total_steps=20, three_phase=True,
                                                  anneal_strategy="linear"), 20, None),
        ("AdamW", dict(lr=0.1), "OneCycleLR", dict(max_lr=0.01, epochs=3, steps_per_epoch=7, pct_start=0.25,
                                                   div_factor=10, final_div_factor=100), 21, None),
        ("SGD", dict(lr=0.1), "OneCycleLR", dict(max_lr=0.5, total_steps=10, cycle_momentum=False), 10, None),
        ("SGD", dict(lr=0.1), "CosineAnnealingWarmRestarts", dict(T_0=3), 20, None),
        ("SGD", dict(lr=0.1), "CosineAnnealingWarmRestarts", dict(T_0=2, T_mult=3, eta_min=0.01), 30, None),
        ("SGD", dict(lr=0.1), "CosineAnnealingWarmRestarts", dict(T_0=2, T_mult=2), len(fractional), fractional),
        ("SGD", dict(lr=0.1, momentum=0.9), "CyclicLR", dict(base_lr=0.01, max_lr=0.1, step_size_up=4), 30, None),
        ("Adam", dict(lr=0.1), "CyclicLR", dict(base_lr=[0.01, 0.02], max_lr=0.1, step_size_up=3, step_size_down=5,
                                                mode="triangular2"), 30, None),
        ("SGD", dict(lr=0.1, momentum=0.5), "CyclicLR", dict(base_lr=0.01, max_lr=0.1, step_size_up=3,
                                                             mode="exp_range", gamma=0.9), 30, None),
        ("SGD", dict(lr=0.1), "CyclicLR", dict(base_lr=0.01, max_lr=0.1, step_size_up=3, scale_fn=lambda x: 0.5 ** x,
                                               scale_mode="iterations", cycle_momentum=False), 30, None),
    ]
    for opt_name, opt_kw, name, kw, n, epochs in cases:
        want = trace(torch, opt_name, opt_kw, name, kw, n, epochs)
        got = trace(ddpc, opt_name, opt_kw, name, kw, n, epochs)
        worst = float(np.abs(got - want).max())
        print(name, opt_name, kw, "max |ddpc - torch|", worst)
        assert worst <= 1e-15


def _case_chainable_schedulers():
    import torch

    import ddpc

    def trace(lib, make, epochs):
        """Both groups' lrs and the last scheduler's get_last_lr() after each step (step(e) where e is given)."""
        optim = torch.optim if lib is torch else ddpc.optim
        p, q = lib.zeros(1, requires_grad=True), lib.zeros(1, requires_grad=True)
        opt = optim.SGD([{"params": [p]}, {"params": [q], "lr": 0.3}], lr=0.1)
        scheds = make(optim.lr_scheduler, opt)
        out = [g["lr"] for g in opt.param_groups]
        for e in epochs:
            opt.step()
            for s in scheds:
                s.step() if e is None else s.step(e)
            out += [g["lr"] for g in opt.param_groups] + list(scheds[-1].get_last_lr())
        return out

    alone = {
        "StepLR": lambda S, o: S.StepLR(o, 3, 0.5),
        "MultiStepLR": lambda S, o: S.MultiStepLR(o, [2, 5, 5, 9], 0.3),
        "ExponentialLR": lambda S, o: S.ExponentialLR(o, 0.9),
        "ConstantLR": lambda S, o: S.ConstantLR(o, 0.25, 4),
        "LinearLR": lambda S, o: S.LinearLR(o, 0.1, 0.9, 6),
        "PolynomialLR": lambda S, o: S.PolynomialLR(o, 8, 2.0),
        "CosineAnnealingLR": lambda S, o: S.CosineAnnealingLR(o, 7, 0.01),
        "MultiplicativeLR": lambda S, o: S.MultiplicativeLR(o, [lambda e: 0.95 if e % 2 else 1.01,
                                                                lambda e: 1 / (e + 1)]),
    }
    cases = {name: lambda S, o, make=make: [make(S, o)] for name, make in alone.items()}
    cases.update({
        "ConstantLR and ExponentialLR on one optimizer": lambda S, o: [S.ConstantLR(o, 0.5, 4),
                                                                       S.ExponentialLR(o, 0.9)],
        "CosineAnnealingLR and StepLR on one optimizer": lambda S, o: [S.CosineAnnealingLR(o, 10),
                                                                       S.StepLR(o, 4, 0.5)],
        "ChainedScheduler": lambda S, o: [S.ChainedScheduler([S.LinearLR(o, 0.2, 1.0, 5), S.ExponentialLR(o, 0.95),
                                                              S.MultiStepLR(o, [3, 8])])],
        "ChainedScheduler with MultiplicativeLR": lambda S, o: [S.ChainedScheduler(
            [S.CosineAnnealingLR(o, 6, 0.001), S.MultiplicativeLR(o, lambda e: 0.97)], optimizer=o)],
        "SequentialLR": lambda S, o: [S.SequentialLR(o, [S.ConstantLR(o, 0.1, 3), S.ExponentialLR(o, 0.9),
                                                         S.PolynomialLR(o, 6, 1.5)], [4, 12])],
    })
    for name, make in cases.items():
        got, want = trace(ddpc, make, [None] * 30), trace(torch, make, [None] * 30)
        print(name, "equal" if got == want else f"{got} != {want}")
        assert got == want
    for name, make in alone.items():  # an explicit epoch takes the closed form, when the schedule has one
        epochs = [3, 1, 7, 7, 12] + [None] * 5
        got, want = trace(ddpc, cases[name], epochs), trace(torch, cases[name], epochs)
        print(name, "at epochs", epochs, "equal" if got == want else f"{got} != {want}")
        assert got == want


def _case_schedulers_after_add_param_group():
    import torch

    import ddpc

    def trace(lib, make, epochs):
        """The lrs after each step of a scheduler built before a second group was added, or the error it raised."""
        p, q = lib.zeros(1, requires_grad=True), lib.zeros(1, requires_grad=True)
        opt = lib.optim.SGD([p], lr=0.1, momentum=0.9)
        sched = make(lib.optim.lr_scheduler, opt)
        opt.add_param_group({"params": [q], "lr": 0.2})
        out = []
        try:
            for e in epochs:
                sched.step(1.0) if isinstance(sched, lib.optim.lr_scheduler.ReduceLROnPlateau) else (
                    sched.step() if e is None else sched.step(e))
                out.append([g["lr"] for g in opt.param_groups])
        except (ValueError, KeyError, RuntimeError) as e:
            out.append(f"{type(e).__name__}: {e}")
        return out

    chainable = {
        "StepLR": lambda S, o: S.StepLR(o, 2),
        "MultiStepLR": lambda S, o: S.MultiStepLR(o, [1, 3]),
        "ExponentialLR": lambda S, o: S.ExponentialLR(o, 0.5),
        "ConstantLR": lambda S, o: S.ConstantLR(o, 0.5, total_iters=2),
        "LinearLR": lambda S, o: S.LinearLR(o, 0.5, total_iters=3),
        "PolynomialLR": lambda S, o: S.PolynomialLR(o, 4),
        "CosineAnnealingLR": lambda S, o: S.CosineAnnealingLR(o, 3),
    }
    others = {
        "MultiplicativeLR": lambda S, o: S.MultiplicativeLR(o, lambda e: 0.9),
        "LambdaLR": lambda S, o: S.LambdaLR(o, lambda e: 0.5 ** e),
        "CosineAnnealingWarmRestarts": lambda S, o: S.CosineAnnealingWarmRestarts(o, 2),
        "CyclicLR": lambda S, o: S.CyclicLR(o, 0.01, 0.1, step_size_up=2),
        "OneCycleLR": lambda S, o: S.OneCycleLR(o, 0.1, total_steps=10),
        "SequentialLR": lambda S, o: S.SequentialLR(o, [S.ConstantLR(o, 0.5, total_iters=2),
                                                        S.ExponentialLR(o, 0.5)], [2]),
        "ChainedScheduler": lambda S, o: S.ChainedScheduler([S.ConstantLR(o, 0.5, total_iters=2),
                                                             S.ExponentialLR(o, 0.5)]),
        "ReduceLROnPlateau": lambda S, o: S.ReduceLROnPlateau(o, patience=0),
        "ReduceLROnPlateau with min_lr per group": lambda S, o: S.ReduceLROnPlateau(o, patience=0, min_lr=[0.0]),
    }
    for name, make in {**chainable, **others}.items():
        for epochs in ([None] * 4, [1, 2, 3]) if name in chainable else ([None] * 4,):
            got, want = trace(ddpc, make, epochs), trace(torch, make, epochs)
            print(name, epochs, got, want)
            assert got == want


def _through_a_file(torch, ddpc, obj):
    """obj saved by torch.save and loaded by ddpc.load."""
    import io

    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return ddpc.load(buf)


def _case_pytorch_state_dicts():
    import numpy as np
    import torch

    import ddpc

    def schedule(lib, make, sd=None, steps=9):
        p = lib.zeros(1, requires_grad=True)
        o = lib.optim.SGD([p], lr=1.0)
        s = make(lib, o)
        if sd is not None:
            o.load_state_dict(sd["o"])
            s.load_state_dict(sd["s"])
        lrs = []
        for _ in range(steps):
            o.step()
            s.step()
            lrs.append(s.get_last_lr()[0])
        return o, s, lrs

    for make in (lambda lib, o: lib.optim.lr_scheduler.MultiStepLR(o, milestones=[3, 6, 6, 9], gamma=0.1),
                 lambda lib, o: lib.optim.lr_scheduler.LambdaLR(o, lambda e: 0.5 ** e),
                 lambda lib, o: lib.optim.lr_scheduler.MultiplicativeLR(o, lambda e: 0.9)):
        o, s, _ = schedule(torch, make, steps=2)
        saved = _through_a_file(torch, ddpc, {"o": o.state_dict(), "s": s.state_dict()})
        theirs = schedule(torch, make, {"o": o.state_dict(), "s": s.state_dict()})[2]
        ours = schedule(ddpc, make, saved)[2]
        print(type(s).__name__, ours, theirs)
        np.testing.assert_allclose(ours, theirs, rtol=1e-12)

    w, t = torch.zeros(3, requires_grad=True), torch.tensor(1.0, requires_grad=True)
    opt = torch.optim.Adam([w, t], lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        (w.sum() * t).backward()
        opt.step()
    saved = _through_a_file(torch, ddpc, opt.state_dict())
    dw, dt = ddpc.tensor(w.detach().numpy()).requires_grad_(), ddpc.tensor(t.item()).requires_grad_()
    dopt = ddpc.optim.Adam([dw, dt], lr=0.1)
    dopt.load_state_dict(saved)
    for lib_opt, ps in ((opt, (w, t)), (dopt, (dw, dt))):
        lib_opt.zero_grad()
        (ps[0].sum() * ps[1]).backward()
        lib_opt.step()
    print("0-d parameter", dt.item(), t.item())
    np.testing.assert_allclose([dt.item(), *dw.detach().numpy()], [t.item(), *w.detach().numpy()], rtol=1e-6)


def _case_named_parameters():
    import numpy as np
    import torch

    import ddpc

    def run(lib):
        lib.manual_seed(0)
        m = lib.nn.Linear(3, 2)
        with lib.no_grad():
            m.weight.copy_(lib.tensor(np.arange(6.0).reshape(2, 3)))
            m.bias.fill_(1.0)
        opts = [lib.optim.AdamW(m.named_parameters(), lr=0.1),
                lib.optim.SGD([{"params": [("weight", m.weight)]}, {"params": [("bias", m.bias)], "lr": 0.2}],
                              lr=0.1, momentum=0.9)]
        for opt in opts:
            opt.zero_grad()
            m(lib.ones(1, 3)).sum().backward()
            opt.step()
        out = [[{k: v for k, v in g.items() if k in ("params", "param_names", "lr")} for g in
                opt.state_dict()["param_groups"]] for opt in opts]
        out.append(m.weight.detach().numpy().round(6).tolist())
        for bad in (lambda: lib.optim.SGD([("weight", m.weight), m.bias], lr=0.1),
                    lambda: opts[0].add_param_group({"params": [lib.zeros(1, requires_grad=True)]}),
                    lambda: lib.optim.SGD([m.weight], lr=0.1).add_param_group({"params": [("bias", m.bias)]})):
            try:
                bad()
            except ValueError as e:
                out.append(str(e))
        return out

    ours, theirs = run(ddpc), run(torch)
    print("named parameters", ours, theirs)
    assert ours == theirs


def _case_hooks():
    import torch

    import ddpc

    def calls(lib):
        p = lib.ones(2, requires_grad=True)
        opt = lib.optim.SGD([p], lr=0.5)
        seen = []
        opt.register_step_pre_hook(lambda o, a, k: seen.append(("pre", len(a), sorted(k))))
        opt.register_step_post_hook(lambda o, a, k: seen.append(("post", len(a), sorted(k))))
        opt.register_state_dict_pre_hook(lambda o: seen.append("sd pre"))
        opt.register_state_dict_post_hook(lambda o, sd: seen.append(("sd post", sorted(sd))))
        opt.register_load_state_dict_pre_hook(lambda o, sd: {**sd, "param_groups": [
            {**sd["param_groups"][0], "lr": 0.25}]})
        opt.register_load_state_dict_post_hook(lambda o: seen.append(("load post", o.param_groups[0]["lr"])))
        p.grad = lib.ones(2)
        opt.step()
        opt.step(closure=None)
        opt.load_state_dict(opt.state_dict())
        return seen

    ours, theirs = calls(ddpc), calls(torch)
    print("hooks", ours, theirs)
    assert ours == theirs


def _case_swa_integer_buffers():
    import torch

    import ddpc

    def run(lib):
        lib.manual_seed(0)
        m = lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.BatchNorm1d(4))
        swa = lib.optim.swa_utils.AveragedModel(m, use_buffers=True)
        counts = []
        for n in (1, 3, 9):
            m[1].num_batches_tracked.fill_(n)
            swa.update_parameters(m)
            counts.append(int(swa.module[1].num_batches_tracked))
        return counts

    ours, theirs = run(ddpc), run(torch)
    print("num_batches_tracked", ours, theirs)
    assert ours == theirs


if __name__ == "__main__":
    import warnings

    import torch  # noqa: F401  (first, see the module docstring)

    warnings.simplefilter("ignore")  # torch's warnings about scheduler steps without optimizer updates
    globals()["_case_" + sys.argv[1]]()
    print("ok")

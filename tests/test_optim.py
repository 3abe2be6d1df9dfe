"""Optimizers against numpy implementations of PyTorch's documented update
rules over several steps; param groups, state dicts and LR schedulers."""

import math

import numpy as np
import pytest

import ddpc
from ddpc import _C, optim

rng = np.random.default_rng(2)


def make_params(dtype=ddpc.float64, shapes=((4, 3), (3,), (2, 2, 2))):
    return [ddpc.tensor(rng.standard_normal(s), dtype=dtype, requires_grad=True) for s in shapes]


def grads_for(step, params):
    r = np.random.default_rng(100 + step)
    return [r.standard_normal(p.shape) for p in params]


def exact(a):
    return a


def ref_sgd(ps, steps, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False,
            rnd=exact):
    """rnd rounds every stored array (parameters, gradients, buffers) to the tensors' dtype."""
    ps = [rnd(p.copy()) for p in ps]
    bufs = [None] * len(ps)
    for step in range(steps):
        for i, g in enumerate(grads_for(step, ps)):
            g = rnd(g)
            d = (-g if maximize else g) + weight_decay * ps[i]
            if momentum:
                m = d.copy() if bufs[i] is None else momentum * bufs[i] + (1 - dampening) * d
                bufs[i] = rnd(m)
                d = d + momentum * m if nesterov else m
            ps[i] = rnd(ps[i] - lr * d)
    return ps


def ref_adam(ps, steps, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False, decoupled=False,
             maximize=False, rnd=exact):
    ps = [rnd(p.copy()) for p in ps]
    m = [np.zeros_like(p) for p in ps]
    v = [np.zeros_like(p) for p in ps]
    vmax = [np.zeros_like(p) for p in ps]
    b1, b2 = betas
    for step in range(1, steps + 1):
        for i, g in enumerate(grads_for(step - 1, ps)):
            g = rnd(g)
            g = -g if maximize else g
            if decoupled:
                ps[i] = ps[i] * (1 - lr * weight_decay)
            else:
                g = g + weight_decay * ps[i]
            mi = m[i] + (1 - b1) * (g - m[i])  # PyTorch's lerp form, rounding as it does
            vhat = b2 * v[i] + (1 - b2) * g * g
            m[i], v[i] = rnd(mi), rnd(vhat)
            if amsgrad:
                vhat = np.maximum(vmax[i], vhat)
                vmax[i] = rnd(vhat)
            denom = np.sqrt(vhat) / math.sqrt(1 - b2 ** step) + eps
            ps[i] = rnd(ps[i] - lr / (1 - b1 ** step) * mi / denom)
    return ps


def reference(cls, start, steps, **kw):
    """The reference run of optimizer class cls (AdamW's default weight decay included)."""
    if cls is optim.SGD:
        return ref_sgd(start, steps, **kw)
    if cls is optim.AdamW:
        kw.setdefault("weight_decay", 1e-2)
    return ref_adam(start, steps, decoupled=cls is optim.AdamW, **kw)


def run(opt, params, steps):
    for step in range(steps):
        opt.zero_grad()
        for p, g in zip(params, grads_for(step, params)):
            p.grad = ddpc.tensor(g, dtype=p.dtype)
        opt.step()


def assert_step_lr_drives(make_optimizer):
    """StepLR's lr is the one the next steps take: the same as setting it by hand, unlike keeping it
    (make_optimizer(params) builds an optimizer with lr 0.05)."""
    arrays = [p.detach().numpy() for p in make_params()]
    out = []
    for mode in ("scheduled", "by hand", "kept"):
        params = [ddpc.tensor(a, requires_grad=True) for a in arrays]
        opt = make_optimizer(params)
        sched = optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5) if mode == "scheduled" else None
        for step in range(5):
            for p, g in zip(params, grads_for(step, params)):
                p.grad = ddpc.tensor(g)
            opt.step()
            if sched:
                sched.step()
            elif mode == "by hand":
                opt.param_groups[0]["lr"] = 0.05 * 0.5 ** ((step + 1) // 2)
        out.append(np.concatenate([p.detach().numpy().ravel() for p in params]))
    np.testing.assert_array_equal(out[0], out[1])
    assert np.abs(out[0] - out[2]).max() > 1e-6


def assert_state_dict_round_trip_continues(make_optimizer):
    """An optimizer rebuilt from another's state_dict after 3 steps takes the
    same next 3 steps (make_optimizer(params) builds one)."""
    a = make_params()
    b = [ddpc.tensor(p.detach().numpy().copy(), requires_grad=True) for p in a]
    opt_a = make_optimizer(a)
    run(opt_a, a, 3)
    opt_b = make_optimizer(b)
    for p, q in zip(a, b):
        q.data.copy_(p.detach())
    opt_b.load_state_dict(opt_a.state_dict())
    for opt, params in ((opt_a, a), (opt_b, b)):
        for step in range(3, 6):
            for p, g in zip(params, grads_for(step, params)):
                p.grad = ddpc.tensor(g)
            opt.step()
    for p, q in zip(a, b):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())


@pytest.mark.parametrize("kw", [
    dict(lr=0.1),
    dict(lr=0.1, weight_decay=0.01),
    dict(lr=0.05, momentum=0.9),
    dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=0.02),
    dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.01),
])
def test_sgd_matches_reference(kw):
    params = make_params()
    start = [np.asarray(p).copy() for p in params]
    run(optim.SGD(params, **kw), params, 5)
    for p, want in zip(params, ref_sgd(start, 5, **kw)):
        np.testing.assert_allclose(np.asarray(p), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cls,kw", [
    (optim.Adam, dict(lr=1e-2)),
    (optim.Adam, dict(lr=1e-2, weight_decay=0.1, betas=(0.8, 0.99))),
    (optim.Adam, dict(lr=1e-2, amsgrad=True, eps=1e-6)),
    (optim.AdamW, dict(lr=1e-2)),
    (optim.AdamW, dict(lr=1e-2, weight_decay=0.2, amsgrad=True)),
])
def test_adam_and_adamw_match_reference(cls, kw):
    params = make_params()
    start = [np.asarray(p).copy() for p in params]
    run(cls(params, **kw), params, 6)
    for p, want in zip(params, reference(cls, start, 6, **kw)):
        np.testing.assert_allclose(np.asarray(p), want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("cls,kw", [
    (optim.SGD, dict(lr=0.1, weight_decay=0.01)),
    (optim.SGD, dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.01)),
    (optim.Adam, dict(lr=1e-2, weight_decay=0.1)),
    (optim.AdamW, dict(lr=1e-2, amsgrad=True)),
])
def test_maximize_steps_up_the_gradient(cls, kw):
    params = make_params()
    start = [np.asarray(p).copy() for p in params]
    opt = cls(params, maximize=True, **kw)
    run(opt, params, 5)
    assert opt.param_groups[0]["maximize"] is True and opt.state_dict()["param_groups"][0]["maximize"] is True
    for p, want in zip(params, reference(cls, start, 5, maximize=True, **kw)):
        np.testing.assert_allclose(np.asarray(p), want, rtol=1e-10, atol=1e-12)


def to_bf16(a):
    """Rounds to the nearest bfloat16 (ties to even), kept in float32."""
    x = np.asarray(a, np.float32).view(np.uint32)
    return ((x + 0x7FFF + ((x >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)


ROUND16 = {ddpc.float16: lambda a: np.asarray(a, np.float32).astype(np.float16).astype(np.float32),
           ddpc.bfloat16: to_bf16}


def ulps16(a, b, dt):
    """How many dtype-dt steps apart the dt values a and b (held in float32) lie."""
    def ordered(x):
        bits = (x.view(np.uint32) >> 16) if dt is ddpc.bfloat16 else x.astype(np.float16).view(np.uint16)
        bits = bits.astype(np.int64)
        return np.where(bits & 0x8000, -(bits & 0x7FFF), bits)
    return np.abs(ordered(np.asarray(a, np.float32)) - ordered(np.asarray(b, np.float32)))


SIXTEEN_BIT_CASES = [
    (optim.SGD, dict(lr=0.05, momentum=0.9, weight_decay=0.01)),
    (optim.SGD, dict(lr=0.05, momentum=0.8, nesterov=True, maximize=True)),
    (optim.Adam, dict(lr=1e-2, weight_decay=0.1)),
    (optim.AdamW, dict(lr=1e-2, amsgrad=True, maximize=True)),
]


@pytest.mark.parametrize("dt", [ddpc.float16, ddpc.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("cls,kw", SIXTEEN_BIT_CASES)
def test_16_bit_params_update_in_float32_and_round_once(dt, cls, kw):
    params = make_params(dt, shapes=((40, 30), (30,)))
    start = [p.float().numpy() for p in params]
    opt = cls(params, **kw)
    run(opt, params, 6)
    assert all(t.dtype is dt for s in opt.state.values() for t in s.values() if isinstance(t, ddpc.Tensor))
    # The reference computes in float32 and rounds every stored array; a step that rounded
    # each intermediate to 16 bits would be several steps off on many elements.
    for p, want in zip(params, reference(cls, start, 6, rnd=ROUND16[dt], **kw)):
        assert p.dtype is dt
        apart = ulps16(p.float().numpy(), want, dt)
        assert apart.max() <= 1 and (apart > 0).mean() < 0.01


def test_float32_adam_is_close_to_the_float64_reference():
    params = make_params(ddpc.float32)
    start = [np.asarray(p).astype(np.float64) for p in params]
    run(optim.AdamW(params, lr=1e-3), params, 4)
    for p, want in zip(params, ref_adam(start, 4, lr=1e-3, weight_decay=1e-2, decoupled=True)):
        np.testing.assert_allclose(np.asarray(p), want, rtol=1e-5, atol=1e-6)


def test_one_fused_call_per_group(monkeypatch):
    calls = []
    real = _C.adam_step
    monkeypatch.setattr(_C, "adam_step", lambda *a, **k: (calls.append(len(a[0])), real(*a, **k))[1])
    a, b = make_params(), make_params()
    opt = optim.Adam([{"params": a}, {"params": b, "lr": 0.5}], lr=1e-3)
    run(opt, a + b, 2)
    assert calls == [3, 3, 3, 3]
    assert opt.param_groups[1]["lr"] == 0.5 and opt.param_groups[0]["lr"] == 1e-3


def test_param_groups_use_their_own_hyperparameters():
    a, b = make_params(shapes=((3,),)), make_params(shapes=((2,),))
    start = [np.asarray(a[0]).copy(), np.asarray(b[0]).copy()]
    opt = optim.SGD([{"params": a}, {"params": b, "lr": 1.0, "momentum": 0.5}], lr=0.1)
    run(opt, a + b, 3)
    # run() hands out the gradients of [a, b] in order, as ref_sgd does for its list.
    slow = ref_sgd(start, 3, 0.1)
    fast = ref_sgd(start, 3, 1.0, momentum=0.5)
    np.testing.assert_allclose(np.asarray(a[0]), slow[0], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(b[0]), fast[1], rtol=1e-12)


def test_zero_grad_and_params_without_grads():
    params = make_params()
    opt = optim.Adam(params)
    before = [np.asarray(p).copy() for p in params]
    opt.step()  # no grads yet: nothing moves
    for p, q in zip(params, before):
        np.testing.assert_array_equal(np.asarray(p), q)
    for p in params:
        p.grad = ddpc.ones(p.shape, dtype=p.dtype)
    opt.zero_grad(set_to_none=False)
    assert all(np.all(np.asarray(p.grad) == 0) for p in params)
    opt.zero_grad()
    assert all(p.grad is None for p in params)


def test_state_dict_round_trip_continues_identically():
    params = make_params()
    opt = optim.Adam(params, lr=1e-2, amsgrad=True)
    run(opt, params, 3)
    sd = opt.state_dict()
    assert sd["param_groups"][0]["params"] == [0, 1, 2] and sd["state"][0]["step"] == 3
    clone = [ddpc.tensor(np.asarray(p), requires_grad=True, dtype=p.dtype) for p in params]
    opt2 = optim.Adam(clone, lr=0.5)
    opt2.load_state_dict(sd)
    assert opt2.param_groups[0]["lr"] == 1e-2
    assert_steps_alike((opt, params), (opt2, clone))
    with pytest.raises(ValueError, match="parameter groups"):
        optim.Adam([{"params": clone[:1]}, {"params": clone[1:]}]).load_state_dict(sd)


def assert_steps_alike(*runs):
    """One step of each (optimizer, parameters) on gradients of ones: the parameters come out equal."""
    for o, ps in runs:
        for p in ps:
            p.grad = ddpc.ones(p.shape, dtype=p.dtype)
        o.step()
    for ps in zip(*(ps for _, ps in runs)):
        for q in ps[1:]:
            np.testing.assert_array_equal(np.asarray(ps[0]), np.asarray(q))


def test_state_dict_holds_the_live_state_of_each_parameter(tmp_path):
    params = make_params()
    opt = optim.Adam(params, lr=1e-2)
    run(opt, params, 1)
    sd = opt.state_dict()
    run(opt, params, 2)
    # as PyTorch's: the per-parameter dicts themselves, so step and the moments taken later agree
    assert sd["state"][0] is opt.state[params[0]] and sd["state"][0]["step"] == 3
    ddpc.save(sd, tmp_path / "opt.pt")
    clone = [ddpc.tensor(np.asarray(p), requires_grad=True, dtype=p.dtype) for p in params]
    opt2 = optim.Adam(clone, lr=0.5)
    opt2.load_state_dict(ddpc.load(tmp_path / "opt.pt"))
    assert_steps_alike((opt, params), (opt2, clone))
    opt.load_state_dict(opt.state_dict())  # loading copies: the state it loaded is not its own
    loaded = opt.state[params[0]]
    assert loaded is not sd["state"][0] and loaded["exp_avg"] is not sd["state"][0]["exp_avg"]


def test_zero_grad_in_place_detaches_a_gradient_that_has_a_graph():
    p = ddpc.tensor([1.0, 2.0], requires_grad=True)
    opt = optim.SGD([p], lr=0.1)
    (p ** 3).sum().backward(create_graph=True)
    grad = p.grad
    assert grad.grad_fn is not None
    opt.zero_grad(set_to_none=False)
    # as PyTorch: the same tensor, zeroed, out of the graph, so that the next backward does not grow it
    assert p.grad is grad and grad.grad_fn is None and not grad.requires_grad and grad.tolist() == [0.0, 0.0]
    (p ** 3).sum().backward(create_graph=True)
    assert p.grad.tolist() == [3.0, 12.0]
    p.grad = ddpc.ones(2, requires_grad=True)  # a leaf gradient that requires grad stops requiring it
    opt.zero_grad(set_to_none=False)
    assert not p.grad.requires_grad and p.grad.tolist() == [0.0, 0.0]


def test_named_parameters_are_optimized_and_their_names_kept():
    m = ddpc.nn.Linear(3, 2)
    opt = optim.AdamW(m.named_parameters(), lr=1e-2)
    group = opt.param_groups[0]
    assert group["param_names"] == ["weight", "bias"] and group["params"][0] is m.weight
    m(ddpc.ones(1, 3)).sum().backward()
    opt.step()
    assert opt.state[m.bias]["step"] == 1
    opt = optim.SGD([{"params": [("weight", m.weight)], "lr": 0.5}, {"params": [("bias", m.bias)]}], lr=0.1)
    sd = opt.state_dict()
    assert [(g["params"], g["param_names"], g["lr"]) for g in sd["param_groups"]] == [([0], ["weight"], 0.5),
                                                                                        ([1], ["bias"], 0.1)]
    sd["param_groups"][1]["param_names"] = ["renamed"]
    opt.load_state_dict(sd)  # names from the state dict replace the optimizer's, as PyTorch's
    assert opt.param_groups[1]["param_names"] == ["renamed"]
    del sd["param_groups"][0]["param_names"]
    opt.load_state_dict(sd)  # a state dict without names leaves them as they were
    assert opt.param_groups[0]["param_names"] == ["weight"]
    with pytest.raises(ValueError, match="Some param names are missing"):
        optim.SGD([("weight", m.weight), m.bias], lr=0.1)
    with pytest.raises(ValueError, match="cannot add param group without names"):
        optim.SGD([("weight", m.weight)], lr=0.1).add_param_group({"params": [m.bias]})
    with pytest.raises(ValueError, match="cannot add param group with names"):
        optim.SGD([m.weight], lr=0.1).add_param_group({"params": [("bias", m.bias)]})


class _OwnStep(optim.Optimizer):
    """An optimizer with a step of its own, whose state is not shaped as its parameters."""

    def __init__(self, params):
        super().__init__(params, {"lr": 0.1})

    def step(self, closure=None):
        for p in self.param_groups[0]["params"]:
            s = self.state[p]
            s["scalar"] = ddpc.tensor(2.0, dtype=ddpc.float64)
            s["history"] = ddpc.ones(4, dtype=ddpc.float64)


def test_a_custom_optimizers_state_of_other_shapes_loads_cast_to_its_parameter():
    opt = _OwnStep([ddpc.ones(3, requires_grad=True)])
    opt.step()
    q = ddpc.ones(3, requires_grad=True)
    resumed = _OwnStep([q])
    resumed.load_state_dict(opt.state_dict())
    s = resumed.state[q]
    # as PyTorch: any shape, cast to the parameter's dtype
    assert s["scalar"].shape == () and s["scalar"].dtype is ddpc.float32 and s["scalar"].item() == 2.0
    assert s["history"].shape == (4,) and s["history"].dtype is ddpc.float32
    # ddpc's own optimizers step their state alongside the parameter: one that does not fit is refused
    p = ddpc.ones(3, requires_grad=True)
    adam = optim.Adam([p])
    p.grad = ddpc.ones(3)
    adam.step()
    with pytest.raises(ValueError, match="its parameter has shape"):
        optim.Adam([ddpc.ones(2, requires_grad=True)]).load_state_dict(adam.state_dict())


@pytest.mark.parametrize("cls, kw", [(optim.Adam, {}), (optim.AdamW, {"amsgrad": True}), (optim.NAdam, {}),
                                     (optim.RAdam, {}), (optim.Adamax, {}), (optim.Adagrad, {}),
                                     (optim.Rprop, {}), (optim.ASGD, {"t0": 0}), (optim.Adafactor, {})])
def test_pytorch_shaped_state_of_a_0d_parameter_continues_identically(cls, kw):
    """PyTorch keeps step (and NAdam's mu_product, ASGD's eta and mu) in 0-d
    tensors, and a 0-d parameter's other state is 0-d as well: the numbers
    ddpc keeps are told apart by key."""
    def fresh():
        return [ddpc.tensor([0.5, -1.0, 2.0], requires_grad=True), ddpc.tensor(1.5, requires_grad=True)]

    def step(opt, params, k):
        for p in params:
            p.grad = ddpc.full(p.shape, 0.25 * k)
        opt.step()

    ref, first = fresh(), fresh()
    opt = cls(ref, lr=0.1, **kw)
    step(opt, ref, 1)
    step(opt, ref, 2)
    opt_first = cls(first, lr=0.1, **kw)
    step(opt_first, first, 1)
    sd = opt_first.state_dict()
    for s in sd["state"].values():  # as PyTorch saves them (float64 here, so that the numbers come back exactly)
        for key in ("step", "mu_product", "eta", "mu"):
            if key in s:
                s[key] = ddpc.tensor(float(s[key]), dtype=ddpc.float64)
    assert any(v.ndim == 0 for k, v in sd["state"][1].items() if k != "step")  # 0-d state besides the scalars
    resumed = [ddpc.tensor(p.numpy(), requires_grad=True) for p in first]
    opt2 = cls(resumed, lr=0.1, **kw)
    opt2.load_state_dict(sd)
    assert all(type(opt2.state[p]["step"]) is int for p in resumed)
    step(opt2, resumed, 2)
    for p, q in zip(ref, resumed):
        np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_argument_checks():
    p = make_params()
    with pytest.raises(ValueError):
        optim.SGD(p, lr=0.1, nesterov=True)
    with pytest.raises(ValueError):
        optim.Adam(p, betas=(1.0, 0.9))
    with pytest.raises(ValueError):
        optim.Adam([])
    with pytest.raises(ValueError, match="more than one"):
        optim.SGD([{"params": p}, {"params": p[:1]}], lr=0.1)


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before:UserWarning")  # stepped alone
def test_lr_schedulers():
    p = make_params(shapes=((1,),))
    opt = optim.SGD(p, lr=1.0)
    sched = optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    lrs = []
    for _ in range(6):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == [1.0, 1.0, 0.5, 0.5, 0.25, 0.25]
    assert sched.get_last_lr() == [0.125]

    opt = optim.SGD(p, lr=0.1)
    sched = optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10, eta_min=0.01)
    got = []
    for _ in range(11):
        got.append(opt.param_groups[0]["lr"])
        sched.step()
    want = [0.01 + 0.09 * (1 + math.cos(math.pi * e / 10)) / 2 for e in range(11)]
    np.testing.assert_allclose(got, want, rtol=1e-12)

    opt = optim.SGD(p, lr=0.2)
    sched = optim.lr_scheduler.LambdaLR(opt, lambda e: 1 / (e + 1))
    for _ in range(3):
        sched.step()
    assert math.isclose(opt.param_groups[0]["lr"], 0.2 / 4)
    state = sched.state_dict()
    opt2 = optim.SGD(p, lr=0.2)
    s2 = optim.lr_scheduler.LambdaLR(opt2, lambda e: 1 / (e + 1))
    s2.load_state_dict(state)
    s2.step()
    assert math.isclose(opt2.param_groups[0]["lr"], 0.2 / 5)


@pytest.mark.parametrize("cls,kw", [(optim.SGD, dict(lr=1.0, momentum=0.9)), (optim.Adam, dict(lr=0.1)),
                                    (optim.AdamW, dict(lr=0.1, amsgrad=True))])
def test_a_step_that_raises_leaves_the_state_as_it_was(cls, kw):
    p, q = (ddpc.nn.Parameter(ddpc.ones(4, dtype=ddpc.float64)) for _ in range(2))
    failing, clean = cls([p], **kw), cls([q], **kw)
    p.grad = ddpc.ones(4, dtype=ddpc.float64)
    p.grad.data = ddpc.ones(4, dtype=ddpc.float32)  # a gradient of the wrong dtype after all: the step raises
    with pytest.raises(ValueError, match="does not match"):
        failing.step()
    assert "momentum_buffer" not in failing.state[p] and failing.state[p].get("step", 0) == 0
    for _ in range(2):
        p.grad, q.grad = ddpc.full((4,), 0.5, dtype=ddpc.float64), ddpc.full((4,), 0.5, dtype=ddpc.float64)
        failing.step()
        clean.step()
    np.testing.assert_array_equal(np.asarray(p.detach()), np.asarray(q.detach()))


def _lrs(make, n=12, metrics=None):
    p = ddpc.zeros(1, requires_grad=True)
    opt = optim.SGD([p], lr=0.5)
    s = make(opt)
    out = []
    for i in range(n):
        opt.step()
        s.step(metrics[i]) if metrics else s.step()
        out.append(opt.param_groups[0]["lr"])
    return out, s


def test_more_lr_schedulers_follow_pytorchs_formulas():
    S = optim.lr_scheduler
    lrs, _ = _lrs(lambda o: S.MultiStepLR(o, [3, 7], 0.5))
    assert lrs == pytest.approx([0.5, 0.5, 0.25, 0.25, 0.25, 0.25, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125])
    lrs, _ = _lrs(lambda o: S.ExponentialLR(o, 0.9))
    assert lrs == pytest.approx([0.5 * 0.9 ** e for e in range(1, 13)])
    lrs, _ = _lrs(lambda o: S.ConstantLR(o, 0.25, 4))
    assert lrs == pytest.approx([0.125] * 3 + [0.5] * 9)
    lrs, _ = _lrs(lambda o: S.LinearLR(o, 0.1, 1.0, 6))
    assert lrs == pytest.approx([0.5 * (0.1 + 0.9 * min(e, 6) / 6) for e in range(1, 13)])
    lrs, _ = _lrs(lambda o: S.PolynomialLR(o, 8, 2.0))
    assert lrs == pytest.approx([0.5 * (1 - min(e, 8) / 8) ** 2 for e in range(1, 13)])
    # Warm-up then cosine: the cosine starts from its own epoch 0 at the milestone.
    lrs, seq = _lrs(lambda o: S.SequentialLR(o, [S.LinearLR(o, 0.1, 1.0, 5), S.CosineAnnealingLR(o, 10)], [5]))
    warm = [0.5 * (0.1 + 0.9 * e / 5) for e in range(1, 5)]
    cos = [0.5 * (1 + math.cos(math.pi * e / 10)) / 2 for e in range(0, 8)]
    assert lrs == pytest.approx(warm + cos)
    assert seq.get_last_lr() == pytest.approx([lrs[-1]])
    state = seq.state_dict()
    assert state["last_epoch"] == 12 and len(state["_schedulers"]) == 2
    with pytest.raises(ValueError, match="milestones"):
        S.SequentialLR(seq.optimizer, [S.ExponentialLR(seq.optimizer, 0.5)], [3])


def test_multiplicative_lr_scales_the_current_lr():
    S = optim.lr_scheduler
    lrs, s = _lrs(lambda o: S.MultiplicativeLR(o, lambda e: 0.9 if e % 3 else 0.5))
    assert lrs == pytest.approx([0.5 * math.prod(0.9 if e % 3 else 0.5 for e in range(1, n + 1)) for n in range(1, 13)])
    assert s.state_dict()["lr_lambdas"] == [None] and s.state_dict()["last_epoch"] == 12  # a function: not saved
    s.optimizer.param_groups[0]["lr"] = 2.0  # set by hand: the schedule carries on from it
    s.step()
    assert s.get_last_lr() == [2.0 * 0.9]
    with pytest.raises(TypeError, match="function"):
        S.MultiplicativeLR(s.optimizer, 0.9)
    with pytest.raises(ValueError, match="1 lr_lambdas"):
        S.MultiplicativeLR(s.optimizer, [lambda e: 1.0] * 2)


def _warmup_times_decay(e):
    """The lr at epoch e of lr=0.5 under ConstantLR(factor=0.25, total_iters=4) and ExponentialLR(0.9) together."""
    return 0.5 * 0.9 ** e * (0.25 if e < 4 else 1.0)


def test_chainable_schedulers_on_one_optimizer_compose():
    S = optim.lr_scheduler
    p = ddpc.zeros(1, requires_grad=True)
    opt = optim.SGD([p], lr=0.5)
    both = [S.ConstantLR(opt, 0.25, 4), S.ExponentialLR(opt, 0.9)]
    lrs = [opt.param_groups[0]["lr"]]
    for _ in range(10):
        opt.step()
        for s in both:
            s.step()
        lrs.append(opt.param_groups[0]["lr"])
    assert lrs == pytest.approx([_warmup_times_decay(e) for e in range(11)], rel=1e-12)
    assert both[1].get_last_lr() == [lrs[-1]] and both[0].last_epoch == both[1].last_epoch == 10
    # An explicit epoch jumps to that scheduler's own closed form, dropping the other's factor.
    both[1].step(2)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.5 * 0.81)

    for make in (lambda o: S.StepLR(o, 3, 0.5), lambda o: S.MultiStepLR(o, [2, 5, 5], 0.5),
                 lambda o: S.LinearLR(o, 0.2, 0.8, 5), lambda o: S.PolynomialLR(o, 6, 2.0),
                 lambda o: S.CosineAnnealingLR(o, 20)):
        # Chained with a factor of 0.5 per epoch, each schedule is its closed form times 0.5 ** epoch.
        alone, _ = _lrs(make)
        chained, _ = _lrs(lambda o, make=make: S.ChainedScheduler([make(o), S.MultiplicativeLR(o, lambda e: 0.5)]))
        assert chained == pytest.approx([lr * 0.5 ** e for e, lr in enumerate(alone, 1)], rel=1e-12)


def test_chained_scheduler_steps_all_and_resumes_from_its_state_dict():
    S = optim.lr_scheduler

    def make(opt):
        return S.ChainedScheduler([S.ConstantLR(opt, 0.25, 4), S.ExponentialLR(opt, 0.9)])

    lrs, chain = _lrs(make, n=6)
    assert lrs == pytest.approx([_warmup_times_decay(e) for e in range(1, 7)], rel=1e-12)
    assert chain.get_last_lr() == [lrs[-1]] and chain.optimizer is chain._schedulers[0].optimizer
    state = chain.state_dict()
    assert [s["last_epoch"] for s in state["_schedulers"]] == [6, 6] and "optimizer" not in state
    opt = optim.SGD([ddpc.zeros(1, requires_grad=True)], lr=0.5)
    resumed = make(opt)
    resumed.load_state_dict(state)
    opt.param_groups[0]["lr"] = lrs[-1]  # the optimizer's own state_dict carries the lr
    for _ in range(3):
        resumed.step()
    assert resumed.get_last_lr() == pytest.approx([_warmup_times_decay(9)], rel=1e-12)
    with pytest.raises(ValueError, match="at least one"):
        S.ChainedScheduler([])
    with pytest.raises(ValueError, match="same optimizer"):
        S.ChainedScheduler([S.ExponentialLR(opt, 0.9)], optimizer=chain.optimizer)
    with pytest.raises(ValueError, match="ReduceLROnPlateau"):
        S.ChainedScheduler([S.ExponentialLR(opt, 0.9), S.ReduceLROnPlateau(opt)])


def test_reduce_lr_on_plateau():
    metrics = [5, 4, 4, 4, 4, 4, 3, 3, 3, 3, 3, 3]
    lrs, s = _lrs(lambda o: optim.lr_scheduler.ReduceLROnPlateau(o, patience=2, cooldown=1, factor=0.5, min_lr=0.1),
                  metrics=metrics)
    # 3 epochs without improvement after epoch 2 halve the lr; the cooldown then waits an epoch; never below 0.1.
    assert lrs == [0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25, 0.25, 0.125, 0.125, 0.125]
    assert s.get_last_lr() == [0.125] and s.best == 3
    lrs, _ = _lrs(lambda o: optim.lr_scheduler.ReduceLROnPlateau(o, mode="max", patience=0, factor=0.1, min_lr=0.01),
                  metrics=[1, 0, 0, 0] + [0] * 8)
    assert lrs[:4] == pytest.approx([0.5, 0.05, 0.01, 0.01])


def _trace(opt, sched, n):
    """Group 0's (lr, momentum or beta1) after construction and after each of n steps."""
    def now():
        g = opt.param_groups[0]
        return g["lr"], g["betas"][0] if "betas" in g else g["momentum"]
    out = [now()]
    for _ in range(n):
        opt.step()
        sched.step()
        out.append(now())
    return out


def _cos(start, end, pct):
    return end + (start - end) * (1 + math.cos(math.pi * pct)) / 2


def test_one_cycle_lr_two_phases_cycle_sgd_momentum():
    opt = optim.SGD([ddpc.zeros(1, requires_grad=True)], lr=0.5, momentum=0.9)
    sched = optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=10, div_factor=10)
    got = _trace(opt, sched, 9)
    # Up from 0.1 to 1.0 over steps 0..2 (30% of 10, less one), then down to 0.1 / 1e4 by step 9.
    want = [(_cos(0.1, 1.0, s / 2), _cos(0.95, 0.85, s / 2)) if s <= 2 else
            (_cos(1.0, 1e-5, (s - 2) / 7), _cos(0.85, 0.95, (s - 2) / 7)) for s in range(10)]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert got[0] == pytest.approx((0.1, 0.95)) and got[1] == pytest.approx((0.55, 0.9))
    assert got[2] == pytest.approx((1.0, 0.85)) and got[9] == pytest.approx((1e-5, 0.95))
    g = opt.param_groups[0]
    assert (g["initial_lr"], g["max_lr"], g["base_momentum"], g["max_momentum"]) == pytest.approx((0.1, 1, 0.85, 0.95))
    sched.step()  # step 10 = total_steps is still allowed, as in PyTorch
    with pytest.raises(ValueError, match="total steps"):
        sched.step()


def test_one_cycle_lr_three_phases_linear_cycle_adam_beta1():
    opt = optim.Adam([ddpc.zeros(1, requires_grad=True)], lr=0.5, betas=(0.9, 0.99))
    sched = optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, epochs=2, steps_per_epoch=5, div_factor=10,
                                          final_div_factor=10, three_phase=True, anneal_strategy="linear")
    assert sched.total_steps == 10
    got = _trace(opt, sched, 9)
    lrs = [0.1, 0.55, 1.0, 0.55, 0.1] + [0.1 - 0.09 * k / 5 for k in range(1, 6)]
    beta1 = [0.95, 0.9, 0.85, 0.9, 0.95] + [0.95] * 5
    np.testing.assert_allclose(got, list(zip(lrs, beta1)), rtol=1e-12)
    assert opt.param_groups[0]["betas"][1] == 0.99
    S = optim.lr_scheduler
    for bad in (dict(), dict(total_steps=0), dict(total_steps=5, pct_start=1.5),
                dict(total_steps=5, anneal_strategy="exp")):
        with pytest.raises(ValueError):
            S.OneCycleLR(opt, 1.0, **bad)


def test_cosine_annealing_warm_restarts():
    opt = optim.SGD([ddpc.zeros(1, requires_grad=True)], lr=1.0)
    sched = optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=2, T_mult=2, eta_min=0.1)
    lrs = [lr for lr, _ in _trace(opt, sched, 8)]
    # Periods of 2, 4, 8 epochs: restarts at epochs 2 and 6.
    phase = [(0, 2), (1, 2), (0, 4), (1, 4), (2, 4), (3, 4), (0, 8), (1, 8), (2, 8)]
    assert lrs == pytest.approx([_cos(1.0, 0.1, t / T) for t, T in phase], rel=1e-12)
    assert lrs[1] == pytest.approx(0.55) and lrs[6] == 1.0
    sched.step(2.5)  # fractional epochs anneal within the period that holds them
    assert opt.param_groups[0]["lr"] == pytest.approx(_cos(1.0, 0.1, 0.5 / 4)) and sched.last_epoch == 2
    sched.step(13)  # period 8 starting at epoch 6
    assert opt.param_groups[0]["lr"] == pytest.approx(_cos(1.0, 0.1, 7 / 8))
    sched.step()  # epoch 14: the next restart
    assert opt.param_groups[0]["lr"] == 1.0 and sched.T_i == 16
    opt = optim.SGD([ddpc.zeros(1, requires_grad=True)], lr=1.0)
    lrs = [lr for lr, _ in _trace(opt, optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=3), 6)]
    assert lrs == pytest.approx([1.0, 0.75, 0.25] * 2 + [1.0])
    for bad in (dict(T_0=0), dict(T_0=2.5), dict(T_0=2, T_mult=0)):
        with pytest.raises(ValueError):
            optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, **bad)


def test_cyclic_lr_modes_and_momentum():
    S = optim.lr_scheduler
    opt = optim.SGD([ddpc.zeros(1, requires_grad=True)], lr=0.5, momentum=0.9)
    got = _trace(opt, S.CyclicLR(opt, base_lr=0.1, max_lr=1.0, step_size_up=2), 8)
    np.testing.assert_allclose(got, [(0.1, 0.9), (0.55, 0.85), (1.0, 0.8), (0.55, 0.85)] * 2 + [(0.1, 0.9)])
    # triangular2: one step up, three down, the swing halved every cycle
    opt = optim.Adam([ddpc.zeros(1, requires_grad=True)], betas=(0.5, 0.99))
    got = _trace(opt, S.CyclicLR(opt, 0.1, 1.0, step_size_up=1, step_size_down=3, mode="triangular2"), 8)
    assert [lr for lr, _ in got] == pytest.approx([0.1, 1.0, 0.7, 0.4, 0.1, 0.55, 0.4, 0.25, 0.1])
    assert [b1 for _, b1 in got] == pytest.approx([0.9, 0.8, 0.8 + 0.1 / 3, 0.9 - 0.1 / 3, 0.9, 0.85, 0.8 + 0.1 / 3 * 2,
                                                   0.9 - 0.1 / 6, 0.9])
    assert opt.param_groups[0]["betas"][1] == 0.99
    # exp_range: the swing shrinks by gamma every batch
    opt = optim.SGD([ddpc.zeros(1, requires_grad=True)], lr=0.5)
    sched = S.CyclicLR(opt, 0.1, 1.0, step_size_up=2, mode="exp_range", gamma=0.5, cycle_momentum=False)
    rise = [0, 0.5, 1, 0.5, 0, 0.5]
    assert [lr for lr, _ in _trace(opt, sched, 5)] == pytest.approx([0.1 + 0.9 * r * 0.5 ** i for i, r in
                                                                   enumerate(rise)])
    assert opt.param_groups[0]["momentum"] == 0 and "scale_fn_custom" not in sched.state_dict()
    with pytest.raises(ValueError, match="mode"):
        S.CyclicLR(opt, 0.1, 1.0, mode="square")


@pytest.mark.parametrize("cls,kw", [(optim.SGD, dict(lr=0.1, momentum=0.9)), (optim.AdamW, dict(lr=0.1))])
def test_optimizer_and_one_cycle_state_dicts_resume_a_run(cls, kw):
    def setup(arrays):
        params = [ddpc.tensor(a, requires_grad=True) for a in arrays]
        opt = cls(params, **kw)
        return params, opt, optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=8)

    def steps(params, opt, sched, lo, hi):
        for step in range(lo, hi):
            for p, g in zip(params, grads_for(step, params)):
                p.grad = ddpc.tensor(g)
            opt.step()
            sched.step()

    start = [np.asarray(p) for p in make_params()]
    whole = setup(start)
    steps(*whole, 0, 8)
    first = setup(start)
    steps(*first, 0, 4)
    resumed = setup([np.asarray(p) for p in first[0]])
    resumed[1].load_state_dict(first[1].state_dict())
    resumed[2].load_state_dict(first[2].state_dict())
    steps(*resumed, 4, 8)
    for p, q in zip(whole[0], resumed[0]):
        np.testing.assert_array_equal(np.asarray(p), np.asarray(q))
    hypers = [{k: v for k, v in g.items() if k != "params"} for g in (whole[1].param_groups[0],
                                                                      resumed[1].param_groups[0])]
    assert hypers[0] == hypers[1] and resumed[2].get_last_lr() == whole[2].get_last_lr()


def test_pytorch_only_arguments_and_state_reads():
    a = make_params()
    start = [np.asarray(p).copy() for p in a]
    b = [ddpc.tensor(x, requires_grad=True) for x in start]
    opt = optim.Adam(a, lr=1e-2, weight_decay=0.1, decoupled_weight_decay=True, foreach=False, fused=True)
    assert opt.state[a[0]] == {}  # as PyTorch's defaultdict: not stepped yet
    run(opt, a, 3)
    run(optim.AdamW(b, lr=1e-2, weight_decay=0.1, fused=True), b, 3)
    for p, q, want in zip(a, b, reference(optim.AdamW, start, 3, lr=1e-2, weight_decay=0.1)):
        np.testing.assert_array_equal(np.asarray(p), np.asarray(q))
        np.testing.assert_allclose(np.asarray(p), want, rtol=1e-10, atol=1e-12)
    optim.SGD(make_params(), lr=0.1, foreach=True, fused=False)


@pytest.mark.gpu
@pytest.mark.parametrize("dt", [ddpc.float32, ddpc.float16, ddpc.bfloat16], ids=["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("cls,kw", SIXTEEN_BIT_CASES)
def test_cuda_steps_match_the_host(dt, cls, kw):
    arrays = [p.detach().numpy() for p in make_params(shapes=((300, 70), (70,)))]
    out = {}
    for device in ("cpu", "cuda"):
        params = [ddpc.tensor(a, dtype=dt, device=device, requires_grad=True) for a in arrays]
        opt = cls(params, **kw)
        for step in range(5):
            for p, g in zip(params, grads_for(step, params)):
                p.grad = ddpc.tensor(g, dtype=dt, device=device)
            opt.step()
        assert all(p.is_cuda == (device == "cuda") for p in params)
        out[device] = [p.float().cpu().numpy() for p in params]
    for host, cuda in zip(out["cpu"], out["cuda"]):
        if dt is ddpc.float32:
            np.testing.assert_allclose(cuda, host, rtol=1e-5, atol=1e-6)
        else:  # the GPU contracts a * b + c into one rounding: a float32 step apart, rarely a 16-bit one
            apart = ulps16(cuda, host, dt)
            assert apart.max() <= 1 and (apart > 0).mean() < 0.01


def test_a_parameter_twice_in_a_group_warns_as_pytorch_and_is_stepped_once():
    p = ddpc.nn.Parameter(ddpc.ones(2))
    q = ddpc.nn.Parameter(ddpc.ones(2))
    with pytest.warns(UserWarning, match="duplicate parameters"):
        opt = ddpc.optim.SGD([p, q, p], lr=0.5)
    assert [id(t) for t in opt.param_groups[0]["params"]] == [id(p), id(q)]
    p.grad, q.grad = ddpc.ones(2), ddpc.ones(2)
    opt.step()
    assert p.tolist() == [0.5, 0.5] and q.tolist() == [0.5, 0.5]
    with pytest.warns(UserWarning, match="duplicate parameters"):
        named = ddpc.optim.Adam([("a", p), ("b", q), ("a2", p)])
    assert named.param_groups[0]["param_names"] == ["a", "b"]
    with pytest.raises(ValueError, match="more than one parameter group"):
        ddpc.optim.SGD([{"params": [p]}, {"params": [p]}], lr=0.1)

"""The optimizer in backward: ddpc.distributed.optim._apply_optimizer_in_backward
in one process against a normal loop, and under DistributedDataParallel
(with DDP._register_fused_optim) against plain DDP and optimizer.step(),
where the step must use the averaged gradient.

Ranks are real processes started by ddpc.spawn on the cpu backend.
"""

import numpy as np
import pytest

import ddpc
from ddpc.distributed.optim import _apply_optimizer_in_backward, _get_in_backward_optimizers

FEATURES, HIDDEN, OUT, STEPS = 6, 9, 4, 4

OPTIMIZERS = [("SGD", dict(lr=0.1, momentum=0.9)), ("Adam", dict(lr=0.01)), ("AdamW", dict(lr=0.01))]


def model(seed=0):
    from ddpc import nn

    ddpc.manual_seed(seed)
    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                         nn.Linear(HIDDEN, OUT))


def batches(seed, n=STEPS, rows=5):
    rng = np.random.default_rng(seed)
    return [ddpc.from_numpy(rng.standard_normal((rows, FEATURES)).astype(np.float32)) for _ in range(n)]


def loss(out):
    return (out * out).mean()


def values(m):
    return [p.detach().numpy().copy() for p in m.parameters()]


@pytest.mark.parametrize("name,kwargs", OPTIMIZERS)
def test_matches_a_normal_loop(name, kwargs):
    cls = getattr(ddpc.optim, name)
    ref, m = model(), model()
    opt = cls(ref.parameters(), **kwargs)
    _apply_optimizer_in_backward(cls, m.parameters(), kwargs)
    before = values(m)
    for x in batches(1):
        loss(ref(x)).backward()
        opt.step()
        opt.zero_grad()
        loss(m(x)).backward()
        assert all(p.grad is None for p in m.parameters())
    for a, b, start in zip(values(ref), values(m), before):
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-7)
        assert not np.array_equal(b, start)
    optimizers = _get_in_backward_optimizers(m)
    assert [o.param_groups[0]["params"][0] for o in optimizers] == list(m.parameters())
    assert all(type(o) is cls and o.param_groups[0]["lr"] == kwargs["lr"] for o in optimizers)
    p = next(iter(m.parameters()))
    assert p._optimizer_classes == [cls] and p._optimizer_kwargs == [kwargs]
    assert p._in_backward_optimizers == [optimizers[0]]


def test_second_optimizer_and_no_hook():
    m = model()
    params = list(m.parameters())
    _apply_optimizer_in_backward(ddpc.optim.SGD, params[:2], {"lr": 0.1})
    _apply_optimizer_in_backward(ddpc.optim.SGD, params[:1], {"lr": 0.2})
    _apply_optimizer_in_backward(ddpc.optim.SGD, params[2:], {"lr": 0.1}, register_hook=False)
    assert [len(p._in_backward_optimizers) for p in params] == [2, 1, 1, 1, 1, 1]
    assert params[0]._optimizer_kwargs == [{"lr": 0.1}, {"lr": 0.2}]
    before = values(m)
    loss(m(batches(2, n=1)[0])).backward()
    # the first parameter moved by both steps, its gradient dropped; without the hook nothing steps
    assert params[0].grad is None and params[1].grad is None
    assert all(p.grad is not None for p in params[2:])
    after = values(m)
    assert not np.array_equal(after[0], before[0]) and not np.array_equal(after[1], before[1])
    for a, b in zip(after[2:], before[2:]):
        np.testing.assert_array_equal(a, b)


def test_bad_arguments():
    m = model()
    with pytest.raises(TypeError, match="Optimizer subclass"):
        _apply_optimizer_in_backward(object, m.parameters(), {})
    with pytest.raises(TypeError, match="optimizer_kwargs"):
        _apply_optimizer_in_backward(ddpc.optim.SGD, m.parameters(), [0.1])
    with pytest.raises(ValueError, match="leaf"):
        _apply_optimizer_in_backward(ddpc.optim.SGD, [next(iter(m.parameters())) * 2], {"lr": 0.1})
    with pytest.raises(TypeError, match="learning_rate"):  # the optimizer's own check, at once
        _apply_optimizer_in_backward(ddpc.optim.SGD, m.parameters(), {"learning_rate": 0.1})
    assert _get_in_backward_optimizers(m) == []


def ddp_worker(rank, mode, name, kwargs, options):
    import ddpc.distributed as dist
    from ddpc import nn

    dist.init_process_group("cpu")
    cls = getattr(ddpc.optim, name)
    m = model()
    subset = options.get("subset")
    if mode == "in_backward":
        _apply_optimizer_in_backward(cls, list(m.parameters())[:subset], kwargs)
    ddp = nn.parallel.DistributedDataParallel(m, bucket_cap_mb=options.get("bucket_cap_mb"))
    opt = None
    if mode == "plain":
        opt = cls(list(ddp.parameters())[:subset], **kwargs)
    elif mode == "fused":
        ddp._register_fused_optim(cls, optim_params=list(ddp.parameters())[:subset], **kwargs)
    exchange_left = ddp._exchange is not None
    grads_none = []
    for x in batches(10 + rank):  # different data on every rank
        ddp.zero_grad()
        if options.get("accumulate"):
            with ddp.no_sync():
                loss(ddp(x * 2)).backward()
        loss(ddp(x)).backward()
        grads_none.append([p.grad is None for p in ddp.parameters()])
        if opt is not None:
            opt.step()
    out = values(ddp.module)
    dist.destroy_process_group()
    return out, grads_none, exchange_left


@pytest.mark.parametrize("name,kwargs", OPTIMIZERS[:2])
def test_ddp_steps_on_the_averaged_gradient(name, kwargs):
    plain = ddpc.spawn(ddp_worker, args=("plain", name, kwargs, {}), nprocs=2)
    for mode in ("in_backward", "fused"):
        results = ddpc.spawn(ddp_worker, args=(mode, name, kwargs, {}), nprocs=2)
        for (got, grads_none, exchange_left), (want, _, _) in zip(results, plain):
            for a, b in zip(got, want):
                np.testing.assert_allclose(a, b, rtol=0, atol=1e-6, err_msg=mode)
            # in backward: the gradients dropped; fused: the averaged ones kept, as PyTorch's
            assert all(all(g) if mode == "in_backward" else not any(g) for g in grads_none), mode
            assert not exchange_left  # the linear weights go through the buckets, where the step is
        # the ranks saw different data and still agree: every step used the average
        for a, b in zip(results[0][0], results[1][0]):
            np.testing.assert_array_equal(a, b)
    start = values(model())
    assert not any(np.array_equal(a, b) for a, b in zip(plain[0][0], start))


@pytest.mark.parametrize("mode", ["in_backward", "fused"])
def test_ddp_small_buckets_and_a_subset(mode):
    # one parameter a bucket: the steps run bucket by bucket during backward; the last
    # two parameters have no optimizer in backward and keep their averaged gradients
    options = {"bucket_cap_mb": 1e-6, "subset": 4}
    want = ddpc.spawn(ddp_worker, args=("plain", "SGD", dict(lr=0.1, momentum=0.9), options), nprocs=2)
    got = ddpc.spawn(ddp_worker, args=(mode, "SGD", dict(lr=0.1, momentum=0.9), options), nprocs=2)
    start = values(model())
    for (g, grads_none, _), (w, _, _) in zip(got, want):
        for a, b in zip(g, w):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
        assert all(g[4:] == [False, False] for g in grads_none)
        assert all(g[:4] == [mode == "in_backward"] * 4 for g in grads_none)
    for a, b in zip(got[0][0][4:], start[4:]):  # not stepped: no optimizer over them
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("mode", ["in_backward", "fused"])
def test_ddp_no_sync_steps_on_the_accumulated_gradient(mode):
    kwargs = dict(lr=0.01)
    want = ddpc.spawn(ddp_worker, args=("plain", "Adam", kwargs, {"accumulate": True}), nprocs=2)
    got = ddpc.spawn(ddp_worker, args=(mode, "Adam", kwargs, {"accumulate": True}), nprocs=2)
    for (g, _, _), (w, _, _) in zip(got, want):
        for a, b in zip(g, w):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    for a, b in zip(got[0][0], got[1][0]):
        np.testing.assert_array_equal(a, b)


def test_ddp_group_of_one_still_steps():
    want = ddpc.spawn(ddp_worker, args=("plain", "Adam", dict(lr=0.01), {}), nprocs=1)
    got = ddpc.spawn(ddp_worker, args=("in_backward", "Adam", dict(lr=0.01), {}), nprocs=1)
    for a, b in zip(got[0][0], want[0][0]):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    assert all(all(g) for g in got[0][1])


def fused_errors_worker(rank):
    import ddpc.distributed as dist
    from ddpc import nn

    dist.init_process_group("cpu")
    errors = []
    ddp = nn.parallel.DistributedDataParallel(model())
    for call in (lambda: ddp._register_fused_optim(object, lr=0.1),
                 lambda: ddp._register_fused_optim(ddpc.optim.SGD, optim_params=[ddpc.zeros(3)], lr=0.1)):
        try:
            call()
        except (TypeError, ValueError) as e:
            errors.append(type(e).__name__)
    ddp._register_fused_optim(ddpc.optim.SGD, lr=0.1)
    try:
        ddp._register_fused_optim(ddpc.optim.SGD, lr=0.1)
    except RuntimeError as e:
        errors.append(str(e))
    m = model()
    _apply_optimizer_in_backward(ddpc.optim.SGD, m.parameters(), {"lr": 0.1})
    other = nn.parallel.DistributedDataParallel(m)
    try:
        other._register_fused_optim(ddpc.optim.SGD, lr=0.1)
    except RuntimeError as e:
        errors.append(str(e))
    dist.destroy_process_group()
    return errors


def test_fused_optim_errors():
    for errors in ddpc.spawn(fused_errors_worker, nprocs=2):
        assert errors[:2] == ["TypeError", "ValueError"]
        assert "only be called once" in errors[2]
        assert "do not compose" in errors[3]


def unused_worker(rank):
    import ddpc.distributed as dist
    from ddpc import nn

    dist.init_process_group("cpu")
    m = nn.ModuleDict({"body": model(), "unused": nn.Linear(3, 3)})
    _apply_optimizer_in_backward(ddpc.optim.SGD, m.parameters(), {"lr": 0.1, "momentum": 0.9})

    class Body(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m["body"](x)

    ddp = nn.parallel.DistributedDataParallel(Body(), find_unused_parameters=True)
    for x in batches(20 + rank, n=2):
        loss(ddp(x)).backward()
    stepped = [bool(o.state) for o in _get_in_backward_optimizers(m)]
    dist.destroy_process_group()
    return stepped, values(m)


def test_ddp_unused_parameters_are_not_stepped():
    a, b = ddpc.spawn(unused_worker, nprocs=2)
    assert a[0] == b[0] == [True] * 6 + [False, False]  # (momentum buffers only where a step ran)
    for x, y in zip(a[1], b[1]):
        np.testing.assert_array_equal(x, y)

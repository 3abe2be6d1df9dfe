"""ddpc.nn.parallel's functional building blocks (scatter, scatter_kwargs,
gather, replicate, parallel_apply, data_parallel) and DataParallel along a
dimension other than 0, on cpu devices, against one module on the whole batch.
"""

import collections
import threading

import numpy as np
import pytest

import ddpc
from ddpc import nn
from ddpc.nn import parallel

CPUS = ["cpu", "cpu", "cpu"]


class SeqFirst(nn.Module):
    """A sequence-first LSTM and a head: the batch is dim 1 of its input and output."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(3, 5)
        self.head = nn.Linear(5, 2)

    def forward(self, x, h0=None):
        out, (h, _) = self.lstm(x, h0)
        return self.head(out), {"last": h}


def _grads(m):
    return {n: p.grad.numpy().copy() for n, p in m.named_parameters()}


def _assert_close(got, want, atol=1e-5):
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_allclose(got[k], want[k], atol=atol, rtol=0, err_msg=k)


def _array(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ---- DataParallel(dim=...) --------------------------------------------------------------

@pytest.mark.parametrize("dim,batch", [(1, 7), (-2, 6)])
def test_data_parallel_along_dim_1_equals_one_module(dim, batch):
    """A sequence-first LSTM split along the batch (dim 1, also spelt -2 for a 3-d
    input) on two cpu replicas: outputs, the initial state's split (dim 1 of
    h0 too) and gradients over two training steps as one module's."""
    ddpc.manual_seed(0)
    ref, dp = SeqFirst(), nn.DataParallel(SeqFirst(), device_ids=["cpu", "cpu"], dim=dim)
    dp.module.load_state_dict(ref.state_dict())
    opts = [ddpc.optim.SGD(m.parameters(), lr=0.1) for m in (ref, dp)]
    for step in range(2):
        x = ddpc.from_numpy(_array((4, batch, 3), step))
        h0 = ddpc.from_numpy(_array((1, batch, 5), 10 + step))
        c0 = ddpc.zeros(1, batch, 5)
        outs = []
        for m, opt in zip((ref, dp), opts):
            opt.zero_grad()
            y, extra = m(x, (h0, c0))
            (y.square().sum() + extra["last"].sum()).backward()
            outs.append((y.detach().numpy().copy(), extra["last"].detach().numpy().copy()))
        assert outs[1][0].shape == (4, batch, 2) and outs[1][1].shape == (1, batch, 5)
        np.testing.assert_allclose(outs[1][0], outs[0][0], atol=1e-5, rtol=0)
        np.testing.assert_allclose(outs[1][1], outs[0][1], atol=1e-5, rtol=0)
        _assert_close(_grads(dp.module), _grads(ref))
        for opt in opts:
            opt.step()
    _assert_close({k: v.numpy() for k, v in dp.module.state_dict().items()},
                  {k: v.numpy() for k, v in ref.state_dict().items()})


class _Recording(nn.DataParallel):
    """DataParallel whose four steps are overridden, as PyTorch code does: it
    records each call and, with `fresh`, runs nn.parallel.replicate's copies
    (in threads, through parallel_apply) instead of the kept replicas."""

    def __init__(self, module, fresh):
        super().__init__(module, device_ids=CPUS)
        self.fresh, self.calls = fresh, []

    def scatter(self, inputs, kwargs, device_ids):
        self.calls.append(("scatter", len(device_ids)))
        return super().scatter(inputs, kwargs, device_ids)

    def replicate(self, module, device_ids):
        self.calls.append(("replicate", len(device_ids)))
        return parallel.replicate(module, device_ids) if self.fresh else super().replicate(module, device_ids)

    def parallel_apply(self, replicas, inputs, kwargs):
        self.calls.append(("parallel_apply", len(replicas)))
        return parallel.parallel_apply(replicas, inputs, kwargs, self.device_ids[:len(replicas)])

    def gather(self, outputs, output_device):
        self.calls.append(("gather", len(outputs)))
        return super().gather(outputs, output_device) * 2


@pytest.mark.parametrize("fresh", [False, True])
def test_data_parallel_goes_through_its_overridable_steps(fresh):
    """forward calls scatter, replicate, parallel_apply and gather, in PyTorch's
    order, so overriding them changes what it does (here: the output doubled);
    gradients and two SGD steps match one module, with the kept replicas and
    with copies that pass their gradients back through autograd."""
    ddpc.manual_seed(0)
    ref, dp = nn.Linear(3, 2), _Recording(nn.Linear(3, 2), fresh)
    dp.module.load_state_dict(ref.state_dict())
    opts = [ddpc.optim.SGD(m.parameters(), lr=0.1) for m in (ref, dp)]
    for step in range(2):
        x = ddpc.from_numpy(_array((5, 3), step))
        dp.calls.clear()
        outs = []
        for m, opt in zip((ref, dp), opts):
            opt.zero_grad()
            y = m(x) * (2 if m is ref else 1)
            y.square().sum().backward()
            outs.append(y.detach().numpy().copy())
        assert dp.calls == [("scatter", 3), ("replicate", 3), ("parallel_apply", 3), ("gather", 3)]
        np.testing.assert_allclose(outs[1], outs[0], atol=1e-5, rtol=0)
        _assert_close(_grads(dp.module), _grads(ref))
        for opt in opts:
            opt.step()
    # Fewer rows than devices: only the replicas that get a chunk run.
    dp.calls.clear()
    assert dp(ddpc.ones(2, 3)).shape == (2, 2)
    assert dp.calls == [("scatter", 3), ("replicate", 2), ("parallel_apply", 2), ("gather", 2)]


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 6)
        self.head = nn.Linear(6, 2)
        self.scale = 1.0

    def forward(self, x):
        return self.head(self.body(x).tanh()) * self.scale


def _same_as_module(dp, m, x):
    """dp(x) and its gradients equal the module's own on the whole batch."""
    m.zero_grad()
    out = dp(x)
    out.sum().backward()
    got = _grads(m)
    m.zero_grad()
    want = m(x)
    want.sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy(), atol=1e-5)
    _assert_close(got, _grads(m))


def test_data_parallel_follows_the_module_changed_after_wrapping():
    """As PyTorch's, which replicates the module on each call: a layer
    replaced, parameters assigned or cast, hooks registered and settings
    changed after wrapping reach every replica."""
    ddpc.manual_seed(0)
    m = Scaled()
    dp = nn.DataParallel(m, device_ids=CPUS)
    x = ddpc.from_numpy(_array((6, 4)))
    _same_as_module(dp, m, x)
    m.head = nn.Linear(6, 2)
    m.scale = 3.0
    _same_as_module(dp, m, x)
    m.load_state_dict({k: v * 0.5 for k, v in m.state_dict().items()}, assign=True)
    _same_as_module(dp, m, x)
    seen = []
    handle = m.body.register_forward_hook(lambda mod, args, out: seen.append(args[0].shape[0]) or out * 2)
    _same_as_module(dp, m, x)
    assert seen == [2, 2, 2, 6]  # each replica's chunk, then the module alone
    handle.remove()
    dp.double()
    _same_as_module(dp, m, x.double())
    assert dp(x.double()).dtype == ddpc.float64


def test_data_parallel_shares_attributes_as_pytorchs_replicas_do():
    """Plain tensors, attributes deleted and a forward patched in after
    wrapping reach every replica (an LSTM's flat weights stay each replica's)."""
    ddpc.manual_seed(0)
    m = Scaled()
    dp = nn.DataParallel(m, device_ids=CPUS)
    x = ddpc.from_numpy(_array((6, 4)))
    m.scale = ddpc.full((2,), 2.0)
    _same_as_module(dp, m, x)
    m.scale.fill_(3.0)
    _same_as_module(dp, m, x)
    m.boost = 3.0
    m.scale = 1.0
    original = type(m).forward
    m.forward = lambda inp: original(m, inp) * getattr(m, "boost", 1.0)
    _same_as_module(dp, m, x)
    del m.boost
    _same_as_module(dp, m, x)
    seq = SeqFirst()
    ddpc.manual_seed(1)
    xs = ddpc.from_numpy(_array((5, 6, 3)))
    out = nn.DataParallel(seq, device_ids=CPUS, dim=1)(xs)[0]
    np.testing.assert_allclose(out.detach().numpy(), seq(xs)[0].detach().numpy(), atol=1e-5)


@pytest.mark.parametrize("hook", ["tensor", "post_accumulate"])
def test_gradient_hooks_on_the_module_see_the_replicas_gradients_summed(hook):
    ddpc.manual_seed(0)
    m = Scaled()
    seen = []
    if hook == "tensor":
        m.head.weight.register_hook(lambda g: g * 10)
    else:
        m.head.weight.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.numpy().copy()))
    dp = nn.DataParallel(m, device_ids=CPUS)
    x = ddpc.from_numpy(_array((6, 4)))
    _same_as_module(dp, m, x)
    if hook == "post_accumulate":
        np.testing.assert_allclose(seen[0], seen[1], rtol=1e-5)  # DataParallel's backward, then the module's


def test_data_parallel_dim_errors_and_dim_0_unchanged():
    dp = nn.DataParallel(nn.Linear(3, 2), device_ids=["cpu", "cpu"], dim=2)
    with pytest.raises(IndexError, match="along dim 2"):
        dp(ddpc.ones(4, 3))
    dp = nn.DataParallel(nn.Linear(3, 2), device_ids=["cpu", "cpu"], output_device=-1)
    assert dp.dim == 0 and dp.output_device == "cpu"
    out = dp(ddpc.ones(5, 3))
    assert out.shape == (5, 2)


# ---- scatter, scatter_kwargs, gather ----------------------------------------------------

Pair = collections.namedtuple("Pair", "a b")


def _nested(rows, dim):
    """Tensors of `rows` along dim inside a tuple, a list, a dict and a namedtuple, with other objects."""
    def t(seed):
        shape = [2, 3, 2]
        shape[dim] = rows
        return ddpc.from_numpy(_array(tuple(shape), seed))

    return (t(0), [t(1), "label", 3], {"x": t(2), "none": None}, Pair(t(3), 0.5))


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("rows,devices,sizes", [(6, 3, [2, 2, 2]), (7, 3, [3, 3, 1]), (4, 3, [2, 2]), (2, 3, [1, 1])])
def test_scatter_gather_round_trip_of_nested_structures(dim, rows, devices, sizes):
    inputs = _nested(rows, dim)
    chunks = parallel.scatter(inputs, ["cpu"] * devices, dim)
    assert isinstance(chunks, list) and len(chunks) == len(sizes)
    for chunk, size in zip(chunks, sizes):
        x, (y, label, three), d, pair = chunk
        assert isinstance(chunk, tuple) and isinstance(chunk[1], list) and isinstance(pair, Pair)
        assert label == "label" and three == 3 and d["none"] is None and pair.b == 0.5
        for t in (x, y, d["x"], pair.a):
            assert t.shape[dim] == size
    back = parallel.gather(chunks, "cpu", dim)
    x, (y, label, three), d, pair = back
    for got, want in ((x, inputs[0]), (y, inputs[1][0]), (d["x"], inputs[2]["x"]), (pair.a, inputs[3].a)):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert isinstance(pair, Pair) and d["none"] is None


def test_scatter_forms_kwargs_and_errors():
    x = ddpc.arange(10.0).reshape(5, 2)
    pieces = parallel.scatter(x, [-1, "cpu"])
    assert isinstance(pieces, tuple) and [p.shape[0] for p in pieces] == [3, 2]
    # The fewest chunks of any tensor decide how many devices get a share; objects go to each.
    assert len(parallel.scatter((x, ddpc.ones(2, 2)), CPUS)) == 2
    assert parallel.scatter(("a", 1), CPUS) == [("a", 1)] * 3
    scalar = ddpc.tensor(2.0)
    assert [s.item() for s, _ in parallel.scatter((scalar, x), CPUS)] == [2.0] * 3
    args, kwargs = parallel.scatter_kwargs((x,), {"mask": ddpc.ones(5, 1)}, CPUS)
    assert len(args) == len(kwargs) == 3 and [k["mask"].shape[0] for k in kwargs] == [2, 2, 1]
    args, kwargs = parallel.scatter_kwargs((x,), None, CPUS)
    assert kwargs == ({}, {}, {})
    args, kwargs = parallel.scatter_kwargs((), {"x": x}, CPUS)
    assert args == ((), (), ())
    with pytest.raises(IndexError, match="along dim 2"):
        parallel.scatter((x,), CPUS, dim=2)
    with pytest.raises(ValueError, match="invalid device"):
        parallel.scatter((x,), ["gpu"])


def test_gather_is_differentiable_and_checks_its_inputs():
    parts = [ddpc.ones(2, 3, requires_grad=True), ddpc.ones(2, 1, requires_grad=True)]
    out = parallel.gather(parts, -1, dim=1)
    assert out.shape == (2, 4)
    (out * ddpc.arange(4.0)).sum().backward()
    np.testing.assert_array_equal(parts[0].grad.numpy(), [[0, 1, 2]] * 2)
    np.testing.assert_array_equal(parts[1].grad.numpy(), [[3]] * 2)
    with pytest.warns(UserWarning, match="scalar outputs"):
        losses = parallel.gather([ddpc.tensor(1.0), ddpc.tensor(2.0)], "cpu")
    assert losses.tolist() == [1.0, 2.0]
    assert parallel.gather([None, None], "cpu") is None
    with pytest.raises(ValueError, match="same number of keys"):
        parallel.gather([{"a": ddpc.ones(1)}, {"a": ddpc.ones(1), "b": ddpc.ones(1)}], "cpu")


# ---- replicate ----------------------------------------------------------------------------

class Tied(nn.Module):
    """A linear layer used twice (as two attributes) and a buffer."""

    def __init__(self):
        super().__init__()
        self.first = nn.Linear(3, 3)
        self.second = self.first
        self.out = nn.Linear(3, 1)
        self.register_buffer("scale", ddpc.tensor([2.0]))

    def forward(self, x):
        return self.out(self.second(self.first(x))) * self.scale


def test_replicate_gradients_flow_back_to_the_original():
    ddpc.manual_seed(0)
    m, ref = Tied(), Tied()
    ref.load_state_dict(m.state_dict())
    x = ddpc.from_numpy(_array((6, 3)))
    replicas = parallel.replicate(m, CPUS)
    assert len(replicas) == 3 and all(type(r) is Tied for r in replicas)
    for r in replicas:
        assert r is not m and r.first is r.second and r.first is not m.first
        assert all(p.grad_fn is not None and not p.is_leaf for p in r.parameters())
    # The first replica shares the module's buffers, the others have copies.
    assert replicas[0].scale is m.scale and replicas[1].scale is not m.scale
    sum(r(x[2 * i:2 * i + 2]).sum() for i, r in enumerate(replicas)).backward()
    ref(x).sum().backward()
    _assert_close(_grads(m), _grads(ref), atol=1e-6)
    assert all(p.grad is None for r in replicas for p in r.parameters())


def test_replicate_detach_gives_independent_leaves():
    ddpc.manual_seed(0)
    m = Tied()
    m.out.bias.requires_grad_(False)
    replicas = parallel.replicate(m, ["cpu", "cpu"], detach=True)
    for r in replicas:
        assert all(isinstance(p, nn.Parameter) and p.is_leaf for p in r.parameters())
        assert r.out.bias.requires_grad is False and r.out.weight.requires_grad is True
        np.testing.assert_array_equal(r.first.weight.detach().numpy(), m.first.weight.detach().numpy())
    replicas[0](ddpc.ones(2, 3)).sum().backward()
    assert replicas[0].first.weight.grad is not None and replicas[1].first.weight.grad is None
    assert m.first.weight.grad is None
    with ddpc.no_grad():
        replicas[0].first.weight.add_(1.0)
    assert not np.array_equal(replicas[0].first.weight.detach().numpy(), m.first.weight.detach().numpy())
    assert parallel.replicate(m, []) == []


# ---- parallel_apply -----------------------------------------------------------------------

class Meet(nn.Module):
    """Every call waits until `parties` calls are inside forward at once (bounded)."""

    def __init__(self, barrier):
        super().__init__()
        self.barrier = barrier
        self.lin = nn.Linear(2, 2)

    def forward(self, x, scale=1.0):
        self.barrier.wait()
        return self.lin(x) * scale, threading.get_ident()


def test_parallel_apply_runs_the_replicas_at_once_in_the_callers_modes():
    barrier = threading.Barrier(3, timeout=30)  # sequential calls would break it instead of waiting forever
    m = Meet(barrier)
    replicas = parallel.replicate(m, CPUS)
    xs = [ddpc.full((1, 2), float(i)) for i in range(3)]
    outputs = parallel.parallel_apply(replicas, xs, ({}, {"scale": 2.0}, {}), CPUS)
    assert len({ident for _, ident in outputs}) == 3
    for i, (y, _) in enumerate(outputs):
        want = m.lin(xs[i]) * (2.0 if i == 1 else 1.0)
        np.testing.assert_allclose(y.detach().numpy(), want.detach().numpy(), rtol=1e-6)
        assert y.requires_grad
    with ddpc.no_grad():
        outputs = parallel.parallel_apply(replicas, [(x,) for x in xs])
    assert not any(y.requires_grad for y, _ in outputs)


class Fails(nn.Module):
    def __init__(self, exc):
        super().__init__()
        self.exc = exc

    def forward(self, x):
        if self.exc is not None:
            raise self.exc
        return x


def test_parallel_apply_raises_a_replicas_exception_with_its_index():
    x = ddpc.ones(2)
    with pytest.raises(ValueError, match=r"(?s)Caught ValueError in replica 1 on device cpu\..*bad chunk"):
        parallel.parallel_apply([Fails(None), Fails(ValueError("bad chunk")), Fails(None)], [x, x, x])
    with pytest.raises(KeyError, match="in replica 0"):
        parallel.parallel_apply([Fails(KeyError("k")), Fails(None)], [x, x])

    class Picky(Exception):
        def __init__(self, a, b):
            super().__init__(a, b)

    with pytest.raises(RuntimeError, match="Caught Picky in replica 0"):  # a type that a message cannot make
        parallel.parallel_apply([Fails(Picky(1, 2))], [x])
    with pytest.raises(ValueError, match="2 modules but 1 inputs"):
        parallel.parallel_apply([Fails(None), Fails(None)], [x])


# ---- data_parallel ------------------------------------------------------------------------

def test_data_parallel_function_equals_the_module():
    ddpc.manual_seed(0)
    m, ref = SeqFirst(), SeqFirst()
    ref.load_state_dict(m.state_dict())
    x = ddpc.from_numpy(_array((3, 5, 3)))
    y, extra = parallel.data_parallel(m, x, CPUS, dim=1)
    want, want_extra = ref(x)
    np.testing.assert_allclose(y.detach().numpy(), want.detach().numpy(), atol=1e-6, rtol=0)
    np.testing.assert_allclose(extra["last"].detach().numpy(), want_extra["last"].detach().numpy(), atol=1e-6)
    y.square().sum().backward()
    want.square().sum().backward()
    _assert_close(_grads(m), _grads(ref))

    lin = nn.Linear(2, 3)
    x = ddpc.from_numpy(_array((5, 2)))
    out = parallel.data_parallel(lin, (x,), ["cpu", "cpu"], output_device=-1, module_kwargs=None)
    np.testing.assert_allclose(out.detach().numpy(), lin(x).detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(parallel.data_parallel(lin, x, ["cpu"]).detach().numpy(), lin(x).detach().numpy())
    with pytest.raises(RuntimeError, match=r"on device cuda:0 \(device_ids\[0\]\) but found one of them on device: "
                                           "cpu"):
        parallel.data_parallel(lin, x, [0, 1])


@pytest.mark.gpu
def test_replicas_on_a_cuda_device_and_the_cpu():
    """A replica on the GPU and one on the cpu (copies across devices): their
    gradients reach the module on the GPU; data_parallel on one GPU."""
    ddpc.manual_seed(0)
    m, ref = nn.Linear(3, 2).cuda(), nn.Linear(3, 2)
    ref.load_state_dict({k: v.cpu() for k, v in m.state_dict().items()})
    x = ddpc.from_numpy(_array((4, 3)))
    replicas = parallel.replicate(m, [0, "cpu"])
    assert replicas[0].weight.device.type == "cuda" and replicas[1].weight.device.type == "cpu"
    outputs = parallel.parallel_apply(replicas, [x[:2].cuda(), x[2:]], devices=[0, "cpu"])
    parallel.gather(outputs, "cpu").sum().backward()
    ref(x).sum().backward()
    np.testing.assert_allclose(m.weight.grad.cpu().numpy(), ref.weight.grad.numpy(), rtol=1e-5, atol=1e-6)
    y = parallel.data_parallel(m, x, [0], output_device=-1)
    np.testing.assert_allclose(y.detach().cpu().numpy(), ref(x).detach().numpy(), rtol=1e-5, atol=1e-6)

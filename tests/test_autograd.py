"""Autograd: every differentiable op against central finite differences in
float64, gradient accumulation, hooks and their timing, grad mode."""

import numpy as np
import pytest

import ddpc
import ddpc.nn.functional as F

rng = np.random.default_rng(1)


def leaf(*shape, positive=False):
    a = rng.standard_normal(shape)
    if positive:
        a = np.abs(a) + 0.5
    return ddpc.tensor(a, dtype=ddpc.float64, requires_grad=True)


def gradcheck(fn, *inputs, eps=1e-6, atol=1e-6, rtol=1e-5):
    """Analytic gradients of sum(g * fn(inputs)) against central differences."""
    out = fn(*inputs)
    g = ddpc.tensor(rng.standard_normal(out.shape), dtype=ddpc.float64)
    for t in inputs:
        t.grad = None
    out.backward(g)
    gn = np.asarray(g)
    for t in inputs:
        if not t.requires_grad:
            continue
        arr = t.numpy()  # shares memory: perturb in place
        num = np.zeros_like(arr)
        flat, nflat = arr.reshape(-1), num.reshape(-1)
        for i in range(flat.size):
            old = flat[i]
            flat[i] = old + eps
            with ddpc.no_grad():
                fp = (np.asarray(fn(*inputs)) * gn).sum()
            flat[i] = old - eps
            with ddpc.no_grad():
                fm = (np.asarray(fn(*inputs)) * gn).sum()
            flat[i] = old
            nflat[i] = (fp - fm) / (2 * eps)
        assert t.grad is not None, "no gradient reached an input"
        assert t.grad.shape == t.shape
        np.testing.assert_allclose(np.asarray(t.grad), num, atol=atol, rtol=rtol)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_binary_same_shape(op):
    a, b = leaf(3, 4), leaf(3, 4, positive=True)
    gradcheck(lambda x, y: getattr(x, op)(y), a, b)


@pytest.mark.parametrize("op", ["__add__", "__sub__", "__mul__", "__truediv__", "__radd__", "__rsub__", "__rmul__",
                                "__rtruediv__"])
def test_binary_with_rows_and_scalars(op):
    a, row = leaf(5, 3, positive=True), leaf(3, positive=True)
    gradcheck(lambda x, r: getattr(x, op)(r), a, row)
    gradcheck(lambda r, x: getattr(r, op)(x), row, a)
    gradcheck(lambda x: getattr(x, op)(2.5), a)
    scalar = leaf(positive=True)
    gradcheck(lambda x, s: getattr(x, op)(s), a, scalar)


def test_unary_ops():
    x, p = leaf(4, 5), leaf(4, 5, positive=True)
    gradcheck(lambda t: -t, x)
    gradcheck(lambda t: t.exp(), x)
    gradcheck(lambda t: t.log(), p)
    gradcheck(lambda t: t ** 3, x)
    gradcheck(lambda t: t ** 0.5, p)
    gradcheck(lambda t: F.relu(t), x)
    gradcheck(lambda t: F.gelu(t), x)
    gradcheck(lambda t: F.tanh(t), x)
    gradcheck(lambda t: F.sigmoid(t), x)


def test_reductions():
    x = leaf(3, 4)
    gradcheck(lambda t: t.sum(), x)
    gradcheck(lambda t: t.mean(), x)
    for dim in (0, 1, -1):
        gradcheck(lambda t: t.sum(dim), x)
        gradcheck(lambda t: t.mean(dim, keepdim=True), x)
    y = leaf(2, 3, 4)
    for dim in (0, 1, 2):
        gradcheck(lambda t: t.sum(dim), y)


def test_shape_ops():
    x = leaf(4, 6)
    gradcheck(lambda t: t.reshape(3, 8) * 2, x)
    gradcheck(lambda t: t.view(-1), x)
    gradcheck(lambda t: t.T, x)
    gradcheck(lambda t: t.t() @ t, x)
    gradcheck(lambda t: t[1], x)
    gradcheck(lambda t: t[1:3], x)
    gradcheck(lambda t: t[::2], x)
    gradcheck(lambda t: t[-1] * t[0], x)
    gradcheck(lambda t: t.clone(), x)


def test_cat_and_stack():
    a, b = leaf(2, 3), leaf(4, 3)
    gradcheck(lambda x, y: ddpc.cat([x, y * 2]), a, b)
    c = leaf(2, 3)
    gradcheck(lambda x, y: ddpc.stack([x, y, x]), a, c)
    d, e = leaf(2, 3, 4), leaf(2, 1, 4)
    gradcheck(lambda x, y: ddpc.cat([x, y * 2, x], dim=1), d, e)
    gradcheck(lambda x, y: ddpc.cat([x, y], dim=-1), a, c)
    gradcheck(lambda x, y: ddpc.stack([x, y * 3], dim=-1), a, c)
    gradcheck(lambda x, y: ddpc.stack([x, y], dim=1), a, c)


def test_matmul_and_linear():
    a, b = leaf(3, 4), leaf(4, 5)
    gradcheck(lambda x, y: x @ y, a, b)
    x, w, bias = leaf(6, 4), leaf(3, 4), leaf(3)
    gradcheck(lambda x, w, b: F.linear(x, w, b), x, w, bias)
    gradcheck(lambda x, w: F.linear(x, w), x, w)
    x3 = leaf(2, 3, 4)
    gradcheck(lambda x, w, b: F.linear(x, w, b), x3, w, bias)


def test_dropout_gradient_uses_the_forward_mask():
    x = leaf(8, 5)

    def fn(t):
        ddpc.manual_seed(3)
        return F.dropout(t, 0.4, training=True)

    gradcheck(fn, x)
    out = fn(x)
    assert (np.asarray(out) == 0).any()
    assert F.dropout(x, 0.4, training=False) is x


def test_softmax_and_log_softmax():
    x = leaf(4, 5)
    gradcheck(lambda t: F.softmax(t, dim=-1), x)
    gradcheck(lambda t: F.log_softmax(t, dim=1), x)
    gradcheck(lambda t: F.log_softmax(t, -1), leaf(2, 3, 4))
    gradcheck(lambda t: F.softmax(t, 1), leaf(2, 3, 4))
    xn = np.asarray(x)
    e = np.exp(xn - xn.max(1, keepdims=True))
    np.testing.assert_allclose(np.asarray(F.softmax(x, 1)), e / e.sum(1, keepdims=True), rtol=1e-12)
    e = np.exp(xn - xn.max(0, keepdims=True))
    np.testing.assert_allclose(np.asarray(F.softmax(x, dim=0)), e / e.sum(0, keepdims=True), rtol=1e-12)
    t = ddpc.tensor([0, 2, 1, 4])
    # cross entropy is the mean negative log-softmax at the targets
    want = -np.asarray(F.log_softmax(x, 1))[np.arange(4), np.asarray(t)].mean()
    np.testing.assert_allclose(F.cross_entropy(x, t).item(), want, rtol=1e-12)
    with pytest.raises(IndexError, match="out of range"):
        F.softmax(x, dim=2)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy(reduction, smoothing):
    x = leaf(6, 4)
    t = ddpc.tensor([0, 3, 1, -100, 2, 3])
    gradcheck(lambda z: F.cross_entropy(z, t, reduction=reduction, label_smoothing=smoothing), x)


def test_cross_entropy_matches_log_softmax_formula():
    x = leaf(5, 3)
    t = ddpc.tensor([0, 2, 1, 1, 0])
    xn = np.asarray(x)
    logp = xn - np.log(np.exp(xn).sum(1, keepdims=True))
    want = -logp[np.arange(5), np.asarray(t)].mean()
    np.testing.assert_allclose(F.cross_entropy(x, t).item(), want, rtol=1e-12)
    ignored = F.cross_entropy(x, ddpc.tensor([0, -1, -1, -1, -1]), ignore_index=-1).item()
    np.testing.assert_allclose(ignored, -logp[0, 0], rtol=1e-12)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss(reduction):
    a, b = leaf(3, 4), leaf(3, 4)
    gradcheck(lambda x, y: F.mse_loss(x, y, reduction=reduction), a, b)


def test_layers_and_losses_as_modules():
    lin = ddpc.nn.Linear(4, 3).double()
    x = leaf(5, 4)
    seq = ddpc.nn.Sequential(lin, ddpc.nn.GELU(), ddpc.nn.Tanh(), ddpc.nn.Sigmoid(), ddpc.nn.ReLU(),
                             ddpc.nn.Identity(), ddpc.nn.Flatten())
    gradcheck(lambda t, w, b: seq(t), x, lin.weight, lin.bias)
    t = ddpc.tensor([0, 1, 2, 1, 0])
    gradcheck(lambda z: ddpc.nn.CrossEntropyLoss(label_smoothing=0.1)(z @ lin.weight.T, t), x)
    y = leaf(5, 3)
    gradcheck(lambda z, w: ddpc.nn.MSELoss()(lin(z), y), x, lin.weight)


# ---- engine behaviour ---------------------------------------------------------------------

def test_gradients_accumulate_until_zeroed():
    x = leaf(3)
    (x * 2).sum().backward()
    (x * 3).sum().backward()
    np.testing.assert_allclose(np.asarray(x.grad), 5.0)
    x.grad = None
    (x * x).sum().backward()
    np.testing.assert_allclose(np.asarray(x.grad), 2 * np.asarray(x))


def test_shared_gradients_are_not_aliased():
    a, b = leaf(3), leaf(3)
    (a + b).sum().backward()
    a.grad.mul_(10)
    np.testing.assert_allclose(np.asarray(b.grad), 1.0)
    x = leaf(2)
    (x + x).sum().backward()
    np.testing.assert_allclose(np.asarray(x.grad), 2.0)


def test_backward_needs_a_scalar_or_a_gradient():
    x = leaf(3)
    with pytest.raises(RuntimeError, match="scalar"):
        (x * 2).backward()
    with pytest.raises(RuntimeError, match="does not require grad"):
        ddpc.ones(2).sum().backward()


def test_second_backward_needs_retain_graph():
    x = leaf(3)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(np.asarray(x.grad), 4 * np.asarray(x))
    with pytest.raises(RuntimeError, match="second time"):
        y.backward()


def test_no_grad_enable_grad_and_detach():
    x = leaf(3)
    with ddpc.no_grad():
        y = x * 2
        assert not y.requires_grad and y.grad_fn is None
        with ddpc.enable_grad():
            z = x * 2
        assert z.requires_grad and z.grad_fn is not None
    assert ddpc.is_grad_enabled()

    @ddpc.no_grad()
    def f(t):
        return t * 3

    assert f(x).grad_fn is None
    d = (x * 2).detach()
    assert d.grad_fn is None and not d.requires_grad
    assert x.is_leaf and not (x * 2).is_leaf


def test_inplace_on_a_tensor_requiring_grad_is_refused():
    x = leaf(3)
    with pytest.raises(RuntimeError, match="in place"):
        x.add_(1)
    with ddpc.no_grad():
        x.add_(1)


def test_changing_a_saved_tensor_in_place_before_backward_is_refused():
    x = ddpc.randn(3, 4)
    w = ddpc.randn(4, 2, requires_grad=True)
    loss = (x @ w).sum()
    x.add_(1.0)  # x is saved for w's gradient
    with pytest.raises(RuntimeError, match="modified by an in-place operation.*MatmulBackward.*version 1; expected "
                                           "version 0"):
        loss.backward()


@pytest.mark.parametrize("change", ["setitem on a view", "fill_", "copy_", "optimizer step", "init", "all_reduce"])
def test_every_kind_of_in_place_write_to_saved_memory_is_caught(change, monkeypatch):
    import socket

    import ddpc.distributed as dist

    lin = ddpc.nn.Linear(4, 3)
    x = ddpc.randn(5, 4, requires_grad=True)
    loss = lin(x).sum()  # saves x (for the weight's gradient) and the weight (for x's)
    with ddpc.no_grad():
        if change == "setitem on a view":
            x[1:3][0] = 7.0  # a view of x's memory
        elif change == "fill_":
            x.fill_(0.0)
        elif change == "copy_":
            x.copy_(ddpc.zeros(5, 4))
        elif change == "optimizer step":
            lin.weight.grad = ddpc.ones(3, 4)
            ddpc.optim.SGD(lin.parameters(), lr=0.1).step()
        elif change == "init":
            ddpc.nn.init.uniform_(lin.weight)
        else:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
            monkeypatch.setenv("MASTER_PORT", str(port))
            dist.init_process_group("cpu", rank=0, world_size=1)
            try:
                dist.all_reduce(x)
            finally:
                dist.destroy_process_group()
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        loss.backward()


def test_in_place_writes_after_backward_or_to_unsaved_tensors_are_fine():
    lin = ddpc.nn.Linear(4, 3)
    x = ddpc.randn(5, 4)
    other = ddpc.zeros(2)
    for _ in range(2):  # the optimizer's in-place update comes after each backward
        loss = lin(x).sum()
        other.add_(1.0)
        loss.backward()
        with ddpc.no_grad():
            ddpc.optim.SGD(lin.parameters(), lr=0.1).step()
    x.add_(1.0)
    np.testing.assert_allclose(lin.weight.grad.numpy(), np.tile(x.numpy().sum(0) - 5, (3, 1)) * 2, rtol=1e-5)


def test_a_write_through_a_view_of_a_tensor_made_from_numpy_is_caught():
    x = ddpc.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4))
    w = ddpc.randn(4, 2, requires_grad=True)
    loss = (x @ w).sum()
    x[0:2].fill_(1.0)  # a view of the memory numpy owns
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        loss.backward()


def test_writes_autograd_does_not_count():
    # A rejected in-place op writes nothing; .data writes are not counted (as
    # in PyTorch); a tensor whose storage was replaced is checked on the
    # storage it had when it was saved.
    x = ddpc.randn(3, 4)
    w = ddpc.randn(4, 2, requires_grad=True)
    loss = (x @ w).sum()
    with pytest.raises(ValueError):
        x.copy_(ddpc.zeros(5))
    with pytest.raises(ValueError):
        x.add_(ddpc.ones(1, 3, 4))
    x.data.mul_(1.0)
    x.data = ddpc.randn(3, 4)
    x.add_(1.0)
    loss.backward()
    assert w.grad is not None


def test_register_hook_can_replace_the_gradient():
    x = leaf(3)
    seen = []
    h = x.register_hook(lambda g: (seen.append(np.asarray(g).copy()), g * 10)[1])
    (x * 2).sum().backward()
    np.testing.assert_allclose(seen[0], 2.0)
    np.testing.assert_allclose(np.asarray(x.grad), 20.0)
    h.remove()
    x.grad = None
    (x * 2).sum().backward()
    np.testing.assert_allclose(np.asarray(x.grad), 2.0)
    y = x * 3
    y.register_hook(lambda g: g * 0)
    x.grad = None
    y.sum().backward()
    np.testing.assert_allclose(np.asarray(x.grad), 0.0)


def test_post_accumulate_hooks_fire_once_as_soon_as_each_grad_is_final():
    ddpc.manual_seed(0)
    model = ddpc.nn.Sequential(ddpc.nn.Linear(4, 5), ddpc.nn.ReLU(), ddpc.nn.Linear(5, 5), ddpc.nn.ReLU(),
                               ddpc.nn.Linear(5, 2))
    params = list(model.named_parameters())
    events = []

    def hook(name):
        def fn(p):
            # Record which parameters already have a gradient at this moment.
            events.append((name, sorted(n for n, q in params if q.grad is not None)))
        return fn

    for name, p in params:
        p.register_post_accumulate_grad_hook(hook(name))
    x = ddpc.randn(3, 4)
    # The first layer's input is reused, so its weight also gets a second path.
    loss = model(x).sum() + model[0](x).sum()
    loss.backward()
    names = [e[0] for e in events]
    assert sorted(names) == sorted(n for n, _ in params)
    # The last layer's gradients are final (and reported) before the first layer's exist.
    last = [e for e in events if e[0].startswith("4.")]
    assert all("0.weight" not in have for _, have in last)
    assert names.index("4.weight") < names.index("2.weight") < names.index("0.weight")
    events.clear()
    loss2 = model(x).sum()
    loss2.backward()
    assert len(events) == len(params)


def test_grad_fn_and_repr():
    x = leaf(2)
    y = (x * 2).sum()
    assert "grad_fn" in repr(y)
    assert y.grad_fn.next_functions[0][0] is not None


def test_set_grad_enabled_as_call_context_and_decorator():
    x = leaf(2)
    with ddpc.set_grad_enabled(False):
        assert (x * 2).grad_fn is None
    assert ddpc.is_grad_enabled()
    ddpc.set_grad_enabled(False)
    try:
        assert not ddpc.is_grad_enabled()
    finally:
        ddpc.set_grad_enabled(True)

    @ddpc.set_grad_enabled(False)
    def f():
        return (x * 2).grad_fn

    assert ddpc.is_grad_enabled() and f() is None
    with ddpc.no_grad():
        with ddpc.set_grad_enabled(True):
            assert (x * 2).grad_fn is not None
        assert not ddpc.is_grad_enabled()


def test_gradients_land_in_the_memory_a_leaf_names():
    """``leaf._grad_into`` (DDP's bucket slots): a linear layer's weight and bias
    gradients are written there when that gradient alone reaches the leaf and it
    has none yet; otherwise (shared weights, accumulation, hooks) as usual."""
    x = ddpc.tensor(rng.standard_normal((6, 4)), dtype=ddpc.float64)

    def reference(uses):
        w, b = leaf(3, 4), leaf(3)
        w0, b0 = w.detach().numpy().copy(), b.detach().numpy().copy()
        ref_w, ref_b = ddpc.tensor(w0, requires_grad=True), ddpc.tensor(b0, requires_grad=True)
        sum(F.linear(x, ref_w, ref_b).sum() for _ in range(uses)).backward()
        return w, b, ref_w.grad.numpy(), ref_b.grad.numpy()

    w, b, want_w, want_b = reference(1)
    w._grad_into, b._grad_into = ddpc.zeros((3, 4), dtype=ddpc.float64), ddpc.zeros(3, dtype=ddpc.float64)
    F.linear(x, w, b).sum().backward()
    assert w.grad.data_ptr() == w._grad_into.data_ptr() and b.grad.data_ptr() == b._grad_into.data_ptr()
    np.testing.assert_allclose(w.grad.numpy(), want_w, rtol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), want_b, rtol=1e-12)
    # A second backward accumulates into the gradient, which is still that memory.
    F.linear(x, w, b).sum().backward()
    np.testing.assert_allclose(w._grad_into.numpy(), 2 * want_w, rtol=1e-12)

    # A weight used twice gets the sum of both gradients, in memory of its own.
    w, b, want_w, want_b = reference(2)
    w._grad_into = ddpc.zeros((3, 4), dtype=ddpc.float64)
    (F.linear(x, w, b).sum() + F.linear(x, w, b).sum()).backward()
    assert w.grad.data_ptr() != w._grad_into.data_ptr() and not w._grad_into.numpy().any()
    np.testing.assert_allclose(w.grad.numpy(), want_w, rtol=1e-12)

    # A leaf with a gradient hook gets what the hook returns, not the memory it named.
    w, b, want_w, _ = reference(1)
    w._grad_into = ddpc.zeros((3, 4), dtype=ddpc.float64)
    w.register_hook(lambda g: g * 2)
    F.linear(x, w, b).sum().backward()
    assert not w._grad_into.numpy().any()
    np.testing.assert_allclose(w.grad.numpy(), 2 * want_w, rtol=1e-12)


def test_queue_callback_runs_once_when_backward_ends():
    from ddpc.autograd import queue_callback

    w = ddpc.ones(3, requires_grad=True)
    seen = []

    def hook(p):
        queue_callback(lambda: seen.append(p.grad.numpy().tolist()))

    w.register_post_accumulate_grad_hook(hook)
    ((w * 2).sum() + (w * 3).sum()).backward()
    assert seen == [[5.0, 5.0, 5.0]]
    with pytest.raises(RuntimeError, match="during a backward pass"):
        queue_callback(lambda: None)


def test_broadcast_results_take_the_broadcast_shape_and_gradients_their_operands_shapes():
    a, b, c = leaf(3), leaf(1, 3, positive=True), leaf(2, 1, 1, 3)
    for x, y in ((a, b), (b, a), (a, c), (c, b)):
        want = np.broadcast_shapes(x.shape, y.shape)
        for op in ("__add__", "__sub__", "__mul__", "__truediv__"):
            assert getattr(x, op)(y).shape == want, (x.shape, op, y.shape)
    gradcheck(lambda x, y: x * y, a, b)
    gradcheck(lambda x, y: x / y, c, b)
    gradcheck(lambda x, y: y - x, a, c)


def test_to_with_copy_gives_each_leaf_its_own_gradient():
    a, b = leaf(2), leaf(2)
    y = a.to(ddpc.float64, copy=True) + b.to(ddpc.float64, copy=True)
    gout = ddpc.tensor([1.0, 1.0], dtype=ddpc.float64)
    y.backward(gout)
    assert a.grad is not b.grad and a.grad is not gout and b.grad is not gout
    (b * 10).sum().backward()
    assert a.grad.tolist() == [1.0, 1.0] and b.grad.tolist() == [11.0, 11.0] and gout.tolist() == [1.0, 1.0]


def test_saved_outputs_leave_no_reference_cycle():
    import gc
    import weakref

    x = leaf(4, 4, positive=True)
    ops = [lambda t: t.exp(), lambda t: t.tanh(), lambda t: t.sigmoid(), lambda t: t * t, lambda t: t / t,
           lambda t: 2.0 / t, lambda t: t / leaf(4)]
    gc.disable()
    try:
        for i, fn in enumerate(ops):
            y = fn(x)
            freed = weakref.ref(y._buf)
            del y
            assert freed() is None, f"op {i}: the output outlived its last reference"
    finally:
        gc.enable()
    gradcheck(lambda t: (2.0 / t) * t.exp() / t.sigmoid(), x)


def test_integer_tensors_refuse_requires_grad_and_integer_casts_end_the_graph():
    with pytest.raises(RuntimeError, match="floating point"):
        ddpc.zeros(2, dtype=ddpc.int64, requires_grad=True)
    with pytest.raises(RuntimeError, match="floating point"):
        ddpc.tensor([1, 2], requires_grad=True)
    with pytest.raises(RuntimeError, match="floating point"):
        ddpc.nn.Parameter(ddpc.tensor([1, 2]))
    t = ddpc.arange(3)
    with pytest.raises(RuntimeError, match="floating point"):
        t.requires_grad = True
    assert not t.requires_grad
    x = leaf(2)
    y = x.long()
    assert not y.requires_grad and y.grad_fn is None
    z = x.float()
    assert z.requires_grad and z.grad_fn is not None


def test_mse_loss_backward_with_a_target_of_another_dtype():
    for target in (ddpc.tensor([1, 2]), ddpc.tensor([1.0, 2.0], dtype=ddpc.float32, requires_grad=True)):
        a = leaf(2)
        F.mse_loss(a, target).backward()
        want = (np.asarray(a) - np.asarray(target.detach(), np.float64)).tolist()
        np.testing.assert_allclose(np.asarray(a.grad), want)
        if target.requires_grad:
            assert target.grad.dtype is ddpc.float32
            np.testing.assert_allclose(np.asarray(target.grad), [-v for v in want], rtol=1e-6)


def test_linear_bias_of_shape_1_by_n_gets_a_gradient_of_that_shape():
    x, w, b = leaf(3, 4), leaf(5, 4), leaf(1, 5)
    gradcheck(lambda x, w, b: F.linear(x, w, b), x, w, b)
    assert b.grad.shape == (1, 5)


def test_in_place_writes_of_values_that_require_grad_are_recorded():
    w = ddpc.ones(3, requires_grad=True)
    v = ddpc.full((3,), 5.0, requires_grad=True)
    acc = ddpc.zeros(3)
    acc += w * 2  # a plain tensor takes the sum's history
    assert acc.requires_grad and acc.grad_fn is not None
    (acc * v).sum().backward()
    assert w.grad.tolist() == [10.0] * 3 and v.grad.tolist() == [2.0] * 3

    w.grad = v.grad = None
    acc = ddpc.zeros(3)
    acc.copy_(w * 2)
    (acc * v).sum().backward()
    assert w.grad.tolist() == [10.0] * 3

    w.grad = v.grad = None
    out = ddpc.zeros(2, 3)
    out[0] = w * 3
    out[1] = v
    (out * ddpc.tensor([[1.0, 2, 3], [4, 5, 6]])).sum().backward()
    assert w.grad.tolist() == [3.0, 6.0, 9.0] and v.grad.tolist() == [4.0, 5.0, 6.0]


def test_in_place_ops_on_non_leaf_tensors_keep_their_history():
    w = ddpc.tensor([1.0, 2.0, 3.0], requires_grad=True)
    r = ddpc.tensor([0.5, 0.5, 0.5], requires_grad=True)
    h = w * w
    h += r   # a residual
    h *= 3   # by a number
    h /= r   # by a tensor
    h[1] = 0.0  # the row's gradient stops here
    h.sum().backward()
    # h = 3 (w^2 + r) / r with h[1] cut: dh/dw = 6w/r, dh/dr = -3 w^2 / r^2
    assert np.allclose(w.grad.numpy(), [12.0, 0.0, 36.0])
    assert np.allclose(r.grad.numpy(), [-12.0, 0.0, -108.0])


def test_in_place_changes_of_what_no_gradient_reads_are_allowed_as_in_pytorch():
    """A product keeps an operand only for the other's gradient, a quotient its operands (not its output), a
    matmul each operand only for the other's: changing the rest in place, as a contrastive loss masking
    (x @ x.T) / temperature does, is no error, and the gradients are those of the values used."""
    rng = np.random.default_rng(0)
    xv, wv = rng.standard_normal((4, 4)), rng.standard_normal((4, 4))
    x, w = ddpc.tensor(xv, requires_grad=True), ddpc.tensor(wv, requires_grad=True)
    y = (x @ w.T) / ddpc.tensor(0.5)  # the quotient's output is changed below
    y.masked_fill_(ddpc.eye(4, dtype=ddpc.bool), -1e9)
    y.sum().backward()
    off = 1 - np.eye(4)
    assert np.allclose(x.grad.numpy(), 2 * off @ wv) and np.allclose(w.grad.numpy(), 2 * off.T @ xv)
    x.grad = None
    r = 2.0 / (x.abs() + 1)  # a number over a tensor keeps the tensor, not its output
    r.clamp_(max=0.9)
    r.sum().backward()
    want = np.where(2 / (abs(xv) + 1) > 0.9, 0.0, -2 / (abs(xv) + 1) ** 2 * np.sign(xv))
    assert np.allclose(x.grad.numpy(), want)
    x.grad = None
    h = x * 1
    y = h * ddpc.ones(4)  # a constant factor: h is not kept
    m = h @ ddpc.ones(4, 2, dtype=ddpc.float64)  # nor by the matmul with a constant
    h.add_(1)
    (y.sum() + m.sum()).backward()
    assert np.allclose(x.grad.numpy(), 3.0)
    x.grad = w.grad = None
    q = x / w  # the divisor's gradient reads x and w, which stay unchanged
    q.mul_(2)
    q.sum().backward()
    assert np.allclose(x.grad.numpy(), 2 / wv) and np.allclose(w.grad.numpy(), -2 * xv / wv ** 2)
    # what a gradient does read is still checked
    c = x * 1
    y = c * w
    c.add_(1)
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        y.sum().backward()


def test_in_place_ops_on_layer_outputs_match_the_out_of_place_forms():
    """What a layer returns is its own memory even where the layer gave a
    fresh result its final shape (Linear, matmul, the norms, pooling):
    ReLU(inplace=True) after them, a residual ``out += identity``, and
    ``logits /= T`` take part in the graph as in PyTorch."""
    from ddpc import nn
    from ddpc.nn import functional as F

    def block(inplace):
        ddpc.manual_seed(0)
        lin, bn, ln = nn.Linear(6, 6), nn.BatchNorm1d(6), nn.LayerNorm(6)
        x = ddpc.randn(4, 6, requires_grad=True)
        out = F.relu(bn(lin(x)), inplace=inplace)
        out = ln(out)
        if inplace:
            out += x
            out /= 2.0
        else:
            out = (out + x) / 2.0
        pooled = F.max_pool2d(out.reshape(1, 1, 4, 6), 2)
        pooled = F.relu_(pooled) if inplace else F.relu(pooled)
        (out.sum() + (pooled * pooled).sum()).backward()
        return [out.detach().numpy(), x.grad.numpy()] + [p.grad.numpy() for p in (lin.weight, bn.weight, ln.bias)]

    for a, b in zip(block(True), block(False)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    lin = nn.Linear(3, 4)
    y = lin(ddpc.randn(2, 3))
    flat = y.view(-1)  # a view of a tensor that is still there: the write reaches y, and y's history
    flat.relu_()
    assert y.min().item() >= 0.0
    y.sum().backward()
    np.testing.assert_allclose(lin.bias.grad.numpy(), (y.detach().numpy() > 0).sum(0))


def test_in_place_writes_autograd_cannot_follow_are_errors():
    w = ddpc.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
        w += 1
    with pytest.raises(RuntimeError, match="view of a leaf tensor that requires grad"):
        w[:2].mul_(2)
    x = ddpc.zeros(2, 3)
    with ddpc.no_grad():
        row = x[0]
    with pytest.raises(RuntimeError, match="shares memory with another one"):
        row.add_(w)  # a view made with grad mode off, as PyTorch refuses
    with pytest.raises(RuntimeError, match="copy made by expand"):
        x.expand(4, 2, 3).add_(w)  # whose elements repeat
    h = w * 2
    y = h * h  # saves h
    h += 1
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        y.sum().backward()
    with ddpc.no_grad():
        w += 1  # an update outside the graph, as optimizers make
    assert w.tolist() == [2.0] * 3


def test_copy_needs_equal_shapes_or_one_element():
    x = ddpc.zeros(2, 3)
    with pytest.raises(ValueError, match="shapes"):
        x.copy_(ddpc.ones(3, 2))
    with pytest.raises(ValueError):
        x[0:2] = ddpc.arange(6.0)
    assert x.copy_(ddpc.tensor(4.0)).tolist() == [[4.0] * 3] * 2


def test_a_hook_returning_another_shape_is_an_error():
    x = ddpc.randn(4, 4, requires_grad=True)
    y = x * 2.0
    y.register_hook(lambda g: ddpc.ones(1))
    with pytest.raises(RuntimeError, match="gradient hook must return None or a tensor like"):
        y.sum().backward()
    x.register_hook(lambda g: g.double())
    with pytest.raises(RuntimeError, match="float64"):
        (x * 3.0).sum().backward()


def test_sums_and_means_of_16_bit_and_empty_tensors_keep_the_graph():
    for dt in (ddpc.float16, ddpc.bfloat16):
        x = ddpc.ones(4, 3, dtype=dt, requires_grad=True)
        x.sum().backward()
        assert x.grad.dtype is dt and x.grad.float().tolist() == [[1.0] * 3] * 4
    e = ddpc.zeros(0, 3, requires_grad=True)
    m = e.mean()
    assert m.requires_grad and np.isnan(m.item())
    m.backward()
    assert e.grad.shape == (0, 3)


@pytest.mark.parametrize("sa,sb", [((4, 5), (4, 1)), ((3, 1), (1, 4)), ((2, 1, 3), (4, 1)), ((5,), (2, 3, 1)),
                                   ((2, 3, 4), (3, 1))])
def test_numpy_broadcasting_forward_and_backward(sa, sb):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(sa), rng.standard_normal(sb) + 3.0
    for op in (lambda x, y: x + y, lambda x, y: x - y, lambda x, y: x * y, lambda x, y: x / y):
        ta, tb = ddpc.tensor(a, requires_grad=True), ddpc.tensor(b, requires_grad=True)
        out = op(ta, tb)
        np.testing.assert_allclose(out.detach().numpy(), op(a, b), rtol=1e-12)
        g = rng.standard_normal(out.shape)
        out.backward(ddpc.tensor(g))
        # numerical reference: the gradient of sum(g * op(a, b)) by central differences
        for t, arr, which in ((ta, a, 0), (tb, b, 1)):
            num = np.zeros_like(arr)
            for idx in np.ndindex(arr.shape):
                hi, lo = arr.copy(), arr.copy()
                hi[idx] += 1e-6
                lo[idx] -= 1e-6
                f = (lambda v: (g * (op(v, b) if which == 0 else op(a, v))).sum())
                num[idx] = (f(hi) - f(lo)) / 2e-6
            assert t.grad.shape == arr.shape
            np.testing.assert_allclose(t.grad.numpy(), num, rtol=1e-5, atol=1e-6)


def test_broadcasting_of_integers_and_in_place():
    assert (ddpc.tensor([[1], [2]]) + ddpc.tensor([10, 20, 30])).tolist() == [[11, 21, 31], [12, 22, 32]]
    x = ddpc.zeros(2, 3)
    x += ddpc.tensor([1.0, 2.0, 3.0])
    x *= ddpc.tensor([[2.0], [3.0]])
    assert x.tolist() == [[2.0, 4.0, 6.0], [3.0, 6.0, 9.0]]
    with pytest.raises(ValueError, match="result's shape"):
        x += ddpc.ones(4, 2, 3)
    with pytest.raises(ValueError, match="do not broadcast"):
        ddpc.ones(2, 3) + ddpc.ones(2, 4)
    centred = ddpc.tensor([[1.0, 3.0], [10.0, 20.0]])
    centred = centred - centred.mean(1, keepdim=True)
    assert centred.tolist() == [[-1.0, 1.0], [-5.0, 5.0]]


@pytest.mark.parametrize("dt,tol", [(ddpc.float16, 1e-2), (ddpc.bfloat16, 5e-2)])
def test_nn_ops_take_16_bit_floats_computing_in_float32(dt, tol):
    rng = np.random.default_rng(0)
    x, w, b = rng.standard_normal((6, 5)), rng.standard_normal((3, 5)) * 0.5, rng.standard_normal(3) * 0.5
    y = ddpc.tensor([0, 2, 1, 1, 0, 2])

    def run(dtype):
        tx, tw, tb = (ddpc.tensor(a, dtype=dtype, requires_grad=True) for a in (x, w, b))
        h = F.linear(tx, tw, tb)
        loss = F.cross_entropy(h, y) + F.mse_loss(h, h.detach() * 0) + (tx @ tw.t()).sum() * 0.01 \
            + F.dropout(tx, 0.0).sum() * 0.0
        loss.backward()
        return loss, [t.grad for t in (tx, tw, tb)]

    loss16, grads16 = run(dt)
    loss32, grads32 = run(ddpc.float32)
    assert loss16.dtype is dt and all(g.dtype is dt for g in grads16)
    assert loss16.float().item() == pytest.approx(loss32.item(), rel=tol)
    for g16, g32 in zip(grads16, grads32):
        np.testing.assert_allclose(g16.float().numpy(), g32.numpy(), rtol=tol, atol=tol)
    assert F.dropout(ddpc.ones(1000, dtype=dt), 0.5).dtype is dt


def test_gradients_of_many_slices_of_one_tensor_add_up():
    """Slices, strided slices, permutes and index selections of one tensor, mixed
    with dense uses of it, in every order: the engine adds slice gradients into
    one buffer instead of materialising each (an RNN's steps), which must not
    lose or double any of them."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((6, 4, 3))
    w = rng.standard_normal((4, 3))
    uses = [
        (lambda v: v[1] * 2.0, lambda g: g.__setitem__(1, g[1] + 2.0)),
        (lambda v: v[:, 1:3].sum(1), lambda g: g.__setitem__((slice(None), slice(1, 3)), g[:, 1:3] + 1.0)),
        (lambda v: v[::2, :, 0:1] * w[:, :1], lambda g: g.__setitem__((slice(None, None, 2), slice(None), slice(0, 1)),
                                                                    g[::2, :, 0:1] + w[:, :1])),
        (lambda v: v.permute(2, 0, 1)[0], lambda g: g.__setitem__((slice(None), slice(None), 0), g[:, :, 0] + 1.0)),
        (lambda v: v.index_select(0, ddpc.tensor([0, 0, 5])), lambda g: np.add.at(g, [0, 0, 5], 1.0)),
        (lambda v: v * 3.0, lambda g: g.__iadd__(3.0)),
        (lambda v: v[-1], lambda g: g.__setitem__(-1, g[-1] + 1.0)),
    ]
    for order in (range(len(uses)), reversed(range(len(uses))), [5, 0, 4, 1, 6, 2, 3]):
        order = list(order)
        a = ddpc.tensor(x, requires_grad=True)
        seen = []
        a.register_hook(lambda g: seen.append(g.shape))
        total = sum(uses[i][0](a).sum() for i in order)
        total.backward()
        want = np.zeros_like(x)
        for i in order:
            uses[i][1](want)
        np.testing.assert_allclose(a.grad.numpy(), want, rtol=1e-12, err_msg=str(order))
        assert seen == [x.shape]  # the leaf's hook sees one whole gradient
    # a slice's gradient alone reaches the leaf as a tensor of the leaf's shape
    b = ddpc.tensor(x, requires_grad=True)
    b[2:4].sum().backward()
    assert b.grad.shape == x.shape and b.grad.numpy()[2:4].all() and not b.grad.numpy()[:2].any()


def test_requires_grad_of_a_computed_tensor_cannot_be_switched_off():
    x = ddpc.ones(3, requires_grad=True)
    y = x * 2
    with pytest.raises(RuntimeError, match="only change requires_grad flags of leaf variables"):
        y.requires_grad = False
    (y * x).sum().backward()
    assert x.grad.tolist() == [4.0, 4.0, 4.0]


def test_grad_modes_decorate_generators_and_bare_functions():
    x = ddpc.ones(2, requires_grad=True)

    @ddpc.no_grad()
    def steps():
        for _ in range(2):
            got = yield ddpc.is_grad_enabled(), (x * 2).requires_grad
            assert got is None or got == "sent"

    gen = steps()
    assert next(gen) == (False, False) and gen.send("sent") == (False, False)
    assert ddpc.is_grad_enabled()

    @ddpc.no_grad
    def bare():
        return (x * 2).requires_grad

    @ddpc.inference_mode
    def inferred():
        return (x * 2).requires_grad

    assert bare() is False and inferred() is False and ddpc.is_grad_enabled()


def test_a_gradient_a_hook_keeps_is_not_changed_by_the_next_accumulation():
    x = ddpc.ones(3, requires_grad=True)
    seen = []
    x.register_hook(seen.append)
    (x * 2).sum().backward()
    (x * 3).sum().backward()
    assert [g.tolist() for g in seen] == [[2.0] * 3, [3.0] * 3] and x.grad.tolist() == [5.0] * 3


def test_fill_and_zero_on_a_computed_tensor_are_recorded():
    x = ddpc.ones(3, requires_grad=True)
    y = x * 2
    y.zero_()
    (y + x).sum().backward()
    assert y.tolist() == [0.0] * 3 and x.grad.tolist() == [1.0] * 3  # none through the zeroed y
    z = x * 3
    z.fill_(7.0)
    assert z.tolist() == [7.0] * 3 and z.grad_fn is not None


def test_writes_through_diagonal_land_in_the_matrix_or_are_refused():
    k = ddpc.ones(3, 3)
    k.diagonal().add_(1.0)  # GP jitter
    assert k.tolist() == [[2.0, 1.0, 1.0], [1.0, 2.0, 1.0], [1.0, 1.0, 2.0]]
    k.diagonal(1).fill_(5.0)
    assert k[0, 1].item() == 5.0 and k[1, 2].item() == 5.0
    x = ddpc.ones(3, 3, requires_grad=True)
    y = x @ x
    y.diagonal().mul_(2.0)  # in the graph too: y's history takes the write, as through PyTorch's view
    assert y.tolist() == [[6.0, 3.0, 3.0], [3.0, 6.0, 3.0], [3.0, 3.0, 6.0]]
    y.sum().backward()
    assert x.grad.tolist() == [[8.0] * 3] * 3  # (1 + I) @ x.T + x.T @ (1 + I)
    for view, what in ((ddpc.arange(6.0).reshape(2, 3).unfold(1, 2, 1), "unfold"),
                       (ddpc.complex(ddpc.ones(2), ddpc.ones(2)).conj(), "conj")):
        with pytest.raises(RuntimeError, match=f"copy made by {what}"):
            view.mul_(2)


def test_a_retained_gradient_follows_an_in_place_op_to_the_new_value():
    x = ddpc.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    y.retain_grad()
    y.mul_(3)
    (y * y).sum().backward()
    assert y.grad.tolist() == [12.0, 24.0, 36.0]  # 2y of the new y, not of the old
    assert x.grad.tolist() == [72.0, 144.0, 216.0]


def test_a_node_that_saved_nothing_can_be_differentiated_again():
    x = ddpc.ones(3, requires_grad=True)
    s = (x + 1).sum()  # neither node saves a tensor
    s.backward()
    s.backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]
    y = x * x  # this one does, and is freed as before
    y.sum().backward()
    with pytest.raises(RuntimeError, match="a second time"):
        y.sum().backward()


def test_grad_assignment_is_checked_as_in_pytorch():
    w = ddpc.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="size"):
        w.grad = ddpc.ones(1)  # would be broadcast into every element by the optimizer's update
    with pytest.raises(TypeError, match="different type"):
        w.grad = ddpc.ones(3, dtype=ddpc.float64)
    with pytest.raises(TypeError, match="Tensor or None"):
        w.grad = [1.0, 2.0, 3.0]
    assert w.grad is None
    w.grad = ddpc.ones(3)
    assert w.grad.tolist() == [1.0] * 3
    del w.grad
    assert w.grad is None


def test_version_counts_in_place_writes_shared_with_views():
    x = ddpc.zeros(4)
    v = x[:2]
    start = x._version
    assert v._version == start
    x.add_(1)
    v.mul_(2)
    assert x._version == v._version == start + 2
    y = x + 1
    before = y._version
    y[0] = 5.0
    assert y._version == before + 1 and x._version == start + 2


def test_next_functions_are_pytorchs_pairs_with_accumulate_grad_nodes():
    p = ddpc.nn.Parameter(ddpc.ones(3))
    y = (p * 2 + ddpc.ones(3)).sum()
    names, todo = [], [y.grad_fn]
    while todo:
        node = todo.pop()
        names.append(type(node).__name__)
        for nxt, index in node.next_functions:
            assert isinstance(index, int)
            if nxt is not None:
                todo.append(nxt)
    assert names[-1] == "AccumulateGrad" and len(names) == 4
    acc = p.expand_as(p).grad_fn.next_functions[0][0]
    assert acc.variable is p and acc is p.view(3).grad_fn.next_functions[0][0] and acc.next_functions == ()


def test_hooks_on_a_leafs_accumulate_grad_node_run_after_accumulation():
    """Horovod's and Apex's idiom: p.expand_as(p).grad_fn.next_functions[0][0].register_hook(...)."""
    p = ddpc.nn.Parameter(ddpc.ones(3))
    seen = []
    acc = p.expand_as(p).grad_fn.next_functions[0][0]
    acc.register_hook(lambda grad_inputs, grad_outputs: seen.append((p.grad.tolist(), grad_inputs)))
    handle = acc.register_prehook(lambda grad_outputs: (grad_outputs[0] * 10,))
    (p * 2).sum().backward()
    assert seen == [([20.0] * 3, ())]
    handle.remove()
    (p * 1).sum().backward()
    assert seen[-1][0] == [21.0] * 3


def test_retain_grad_runs_after_the_tensors_hooks_and_counts_once_with_inputs():
    x = ddpc.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.retain_grad()
    y.register_hook(lambda g: g * 3)  # registered later, still runs first: .grad holds what it returns
    y.sum().backward()
    assert y.grad.tolist() == [3.0, 3.0] and x.grad.tolist() == [6.0, 6.0]
    z = x * 3
    z.retain_grad()
    (z * z).sum().backward(inputs=[z])  # z's gradient lands in .grad once
    assert z.grad.tolist() == [6.0, 12.0]


_X23 = [[0.5, 2.0, -1.0], [1.5, -0.5, 0.7]]


@pytest.mark.parametrize("op", ["sort", "topk", "max", "kthvalue", "median", "mode", "cummax", "gather", "scatter",
                                "scatter_add", "scatter_reduce"])
def test_an_index_changed_in_place_before_backward_raises(op):
    # As PyTorch: the index is saved, so its change is caught rather than giving a wrong gradient.
    x = ddpc.tensor(_X23, requires_grad=True)
    idx = ddpc.tensor([[2, 1], [0, 2]])
    if op in ("gather", "scatter", "scatter_add", "scatter_reduce"):
        out = {"gather": lambda: x.gather(1, idx), "scatter": lambda: x.scatter(1, idx, ddpc.ones(2, 2)),
               "scatter_add": lambda: x.scatter_add(1, idx, ddpc.ones(2, 2)),
               "scatter_reduce": lambda: x.scatter_reduce(1, idx, ddpc.ones(2, 2), "amax")}[op]()
    else:
        args = {"topk": (2, 1), "kthvalue": (2, 1), "sort": (1,), "max": (1,), "median": (1,), "mode": (1,),
                "cummax": (1,)}[op]
        out, idx = getattr(x, op)(*args)
    idx.zero_()
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        (out * ddpc.arange(out.numel(), dtype=ddpc.float32).reshape(out.shape)).sum().backward()


def test_an_index_kept_unchanged_gives_the_gradient_and_double_backward():
    x = ddpc.tensor(_X23, dtype=ddpc.float64, requires_grad=True)
    v, _ = x.topk(2, 1)
    gx, = ddpc.autograd.grad((v * v).sum(), x, create_graph=True)
    assert gx.tolist() == [[1.0, 4.0, 0.0], [3.0, 0.0, 1.4]]
    (gx * ddpc.arange(6.0, dtype=ddpc.float64).reshape(2, 3)).sum().backward()
    assert x.grad.tolist() == [[0.0, 2.0, 0.0], [6.0, 0.0, 10.0]]


def test_a_write_into_non_overlapping_unfold_windows_lands_in_the_tensor():
    w = ddpc.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
    x = w * 1
    x.unfold(1, 2, 2).mul_(3)  # the windows [1, 2] and [4, 5], as through PyTorch's view
    assert x.tolist() == [[3.0, 6.0, 3.0], [12.0, 15.0, 6.0]]
    x.sum().backward()
    assert w.grad.tolist() == [[3.0, 3.0, 1.0], [3.0, 3.0, 1.0]]
    y = ddpc.arange(6.0)
    y.unfold(0, 2, 3)[1].fill_(0)  # a gap between the windows
    assert y.tolist() == [0.0, 1.0, 2.0, 0.0, 0.0, 5.0]


def test_contiguous_of_a_non_contiguous_view_of_a_leaf_is_a_tensor_of_its_own():
    w = ddpc.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
    for x, want in ((w.t().contiguous(), [[2.0] * 3] * 2), (w[:, ::2].contiguous(), [[2.0, 0.0, 2.0]] * 2)):
        x.mul_(2)  # as PyTorch: a new tensor, so no in-place write into a view of a leaf
        w.grad = None
        x.sum().backward()
        assert w.grad.tolist() == want and w.tolist() == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    assert w.t().contiguous().tolist() == [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]
    own = ddpc.ones(2, 3)
    assert own.contiguous() is own


def test_linear_saves_only_what_its_gradients_need():
    lin = ddpc.nn.Linear(2, 2)
    y = lin(ddpc.ones(1, 2)).sum()
    with ddpc.no_grad():  # the weight is needed for the input's gradient only, which this input takes none of
        lin.weight.clamp_(-0.01, 0.01)
    y.backward()
    assert lin.weight.grad.tolist() == [[1.0, 1.0], [1.0, 1.0]] and lin.bias.grad.tolist() == [1.0, 1.0]
    x, w = ddpc.ones(1, 2, requires_grad=True), ddpc.ones(2, 2)
    y = F.linear(x, w).sum()
    w.mul_(2)  # needed for x's gradient
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        y.backward()


def test_l1_loss_keeps_its_gradient_when_the_target_changes_after():
    x = ddpc.tensor([1.0, 2.0, 3.0], requires_grad=True)
    t = ddpc.tensor([0.0, 5.0, 1.0])
    loss = F.l1_loss(x, t)
    t.zero_()  # as PyTorch, which saves x - t only
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), [1 / 3, -1 / 3, 1 / 3], rtol=1e-6)
    x2, t2 = ddpc.tensor([1.0, 7.0], requires_grad=True), ddpc.tensor([0.0, 5.0], requires_grad=True)
    gx, gt = ddpc.autograd.grad(F.l1_loss(x2, t2, reduction="sum") ** 2, (x2, t2), create_graph=True)
    assert gx.tolist() == [6.0, 6.0] and gt.tolist() == [-6.0, -6.0]  # 2 * |d|.sum() * ±sign(d)
    (gx.sum() + 2 * gt.sum()).backward()
    assert x2.grad.tolist() == [-4.0, -4.0] and t2.grad.tolist() == [4.0, 4.0]


def test_inference_mode_and_its_flag_as_pytorch():
    assert not ddpc.is_inference_mode_enabled()
    with ddpc.inference_mode():
        assert ddpc.is_inference_mode_enabled() and not ddpc.is_grad_enabled()
        with ddpc.enable_grad():
            assert ddpc.is_inference_mode_enabled() and ddpc.is_grad_enabled()
    with ddpc.no_grad():
        with ddpc.inference_mode(False):  # re-enables grad mode
            assert ddpc.is_grad_enabled() and not ddpc.is_inference_mode_enabled()
        assert not ddpc.is_grad_enabled()

    @ddpc.inference_mode(False)
    def recording():
        return ddpc.is_grad_enabled()

    with ddpc.no_grad():
        assert recording()
    assert ddpc.is_grad_enabled() and not ddpc.is_inference_mode_enabled()


def test_detach_in_place_refuses_a_view_and_grad_of_a_non_leaf_warns():
    w = ddpc.ones(2, 3, requires_grad=True)
    for view in (w[:1], w.t(), (w * 1).view(6)):
        with pytest.raises(RuntimeError, match="Can't detach views in-place"):
            view.detach_()
    own = w[:1].detach()
    assert own.detach_() is own and not own.requires_grad
    y = w * 2
    with pytest.warns(UserWarning, match="not a leaf Tensor"):
        assert y.grad is None
    y.retain_grad()
    y.sum().backward()
    assert y.grad.tolist() == [[1.0] * 3] * 2  # no warning once retained


def test_arithmetic_nodes_have_pytorchs_names():
    x, y = ddpc.ones(2, requires_grad=True), ddpc.ones(2, requires_grad=True)
    names = {"x+y": "AddBackward0", "x-y": "SubBackward0", "x*y": "MulBackward0", "x/y": "DivBackward0",
             "x**y": "PowBackward1", "ddpc.maximum(x,y)": "MaximumBackward0", "ddpc.minimum(x,y)": "MinimumBackward0",
             "x+1": "AddBackward0", "1-x": "RsubBackward1", "x*2": "MulBackward0", "x/2": "DivBackward0",
             "2/x": "MulBackward0", "2**x": "PowBackward2"}
    for expr, name in names.items():
        node = eval(expr, {"ddpc": ddpc, "x": x, "y": y}).grad_fn
        assert node.name() == name and repr(node) == f"<{name}>", expr


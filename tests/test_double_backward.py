"""Gradients of gradients (``create_graph=True``): every op that supports it
is checked by a Hessian-vector product against central differences of its
first gradient, and the engine's behaviour around it against PyTorch's rules."""

import numpy as np
import pytest

import ddpc
import ddpc.nn.functional as F
from ddpc import autograd as ag


def _leaves(arrays):
    return [ddpc.tensor(a, requires_grad=True) for a in arrays]


def _first(fn, arrays):
    """The gradient of fn at arrays, as numpy arrays (zeros where fn does not depend on one)."""
    xs = _leaves(arrays)
    grads = ag.grad(fn(*xs), xs, allow_unused=True, materialize_grads=True)
    return [g.numpy() for g in grads]


def check_hvp(fn, *arrays, seed=0, eps=1e-6, rtol=1e-5, atol=1e-7):
    """d/dx <grad fn(x), u> (a Hessian-vector product, through create_graph)
    against central differences of the first gradient along u."""
    rng = np.random.default_rng(seed)
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    us = [rng.standard_normal(a.shape) for a in arrays]
    xs = _leaves(arrays)
    grads = ag.grad(fn(*xs), xs, create_graph=True, allow_unused=True, materialize_grads=True)
    first = [g.detach().numpy() for g in grads]
    for i, (f, want) in enumerate(zip(first, _first(fn, arrays))):  # the recorded gradient is the ordinary one
        np.testing.assert_allclose(f, want, rtol=1e-12, atol=1e-12)
        assert np.any(f), f"fn does not depend on input {i}: nothing would be checked"
    dot = sum((g * ddpc.tensor(u)).sum() for g, u in zip(grads, us) if g.requires_grad)
    if not isinstance(dot, ddpc.Tensor):  # no gradient depends on x: a zero Hessian
        hvp = [np.zeros_like(a) for a in arrays]
    else:
        hvp = [h.numpy() for h in ag.grad(dot, xs, allow_unused=True, materialize_grads=True)]
    plus = _first(fn, [a + eps * u for a, u in zip(arrays, us)])
    minus = _first(fn, [a - eps * u for a, u in zip(arrays, us)])
    for h, p, m in zip(hvp, plus, minus):
        np.testing.assert_allclose(h, (p - m) / (2 * eps), rtol=rtol, atol=atol)


RNG = np.random.default_rng(7)
A, B = RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4))
POS = RNG.uniform(0.5, 2.0, (3, 4))
UNIT = RNG.uniform(0.1, 0.9, (3, 4))
ROW = RNG.standard_normal(4)


# Smooth unary ops, their input kept where each is defined; cubed so that the second derivative is not only f''.
@pytest.mark.parametrize("name, x", [
    ("tanh", A), ("sigmoid", A), ("exp", A), ("log", POS), ("sqrt", POS), ("rsqrt", POS), ("square", A),
    ("sin", A), ("cos", A), ("log1p", POS), ("expm1", A), ("erf", A), ("reciprocal", POS), ("log2", POS),
    ("log10", POS), ("exp2", A), ("sinh", A), ("cosh", A), ("asinh", A), ("atan", A), ("abs", A), ("relu", A),
    ("sign", A), ("floor", A),
])
def test_unary_second_derivatives(name, x):
    op = getattr(ddpc, name)
    check_hvp(lambda t: (op(t) * t * t).sum(), x)


@pytest.mark.parametrize("fn", [
    lambda t: F.gelu(t), lambda t: F.gelu(t, approximate="tanh"), lambda t: F.silu(t), lambda t: F.mish(t),
    lambda t: F.softplus(t, beta=2.0), lambda t: F.elu(t, alpha=0.7), lambda t: F.leaky_relu(t, 0.2),
    lambda t: F.hardtanh(t * 2), lambda t: F.hardswish(t * 4), lambda t: F.hardsigmoid(t * 4),
    lambda t: t.clamp(-0.5, 0.5), lambda t: t ** 3, lambda t: (t * t + 1) ** 1.5,
], ids=["gelu", "gelu_tanh", "silu", "mish", "softplus", "elu", "leaky_relu", "hardtanh", "hardswish",
        "hardsigmoid", "clamp", "cube", "pow_real"])
def test_activation_second_derivatives(fn):
    check_hvp(lambda t: (fn(t) * t).sum() + (fn(t) ** 2).sum(), A)


@pytest.mark.parametrize("fn", [
    lambda a, b: (a * b * a).sum(),
    lambda a, b: (a / (b * b + 1)).sum(),
    lambda a, b: ((a - b) ** 2 + a).sum(),
    lambda a, b: (ddpc.maximum(a, b) * a).sum() + (ddpc.minimum(a, b) ** 2).sum(),
    lambda a, b: (a.abs() + 1).pow(b).sum(),  # tensor ** tensor
    lambda a, b: (2.0 ** a * b).sum() + (3.0 / (b * b + 1) * a).sum() + (1 - a * b).sum() * (a - 2).sum(),
    lambda a, b: (a * b[0]).sum() * (b + a[:, :1]).sum(),  # broadcasting both ways
    lambda a, b: (ddpc.where(a > 0, a * b, b * b) * a).sum(),
    lambda a, b: ((a @ b.T) ** 2).sum(),
    lambda a, b: (F.linear(a, b, b[0, :3]) ** 2).sum(),
    lambda a, b: ((a.reshape(2, 6).T @ b.reshape(2, 6)).exp()).sum(),
    lambda a, b: (ddpc.matmul(a.reshape(1, 3, 4), b.reshape(3, 4, 1)) ** 2).sum(),  # batched, broadcast
])
def test_binary_and_matrix_second_derivatives(fn):
    check_hvp(fn, A, B)


@pytest.mark.parametrize("fn", [
    lambda t: (t.sum(0) ** 2).sum() + (t.sum(1, keepdim=True) ** 3).sum() + t.sum() ** 2,
    lambda t: (t.mean(1) ** 2).sum() + t.mean() ** 3,
    lambda t: (t.amax(1) * t.sum()).sum(),
    lambda t: (t.max(1).values ** 2).sum() + (t.amin(0) ** 3).sum(),
    lambda t: t.var(1).sum() * t.std() + t.std(0).sum() ** 2,
    lambda t: t.norm() ** 3 + (t.norm(dim=1) ** 2).sum(),
    lambda t: (t.permute(1, 0)[1:3] ** 3).sum() + (t[:, [0, 0, 2]] ** 2 * t[1, :3]).sum(),
    lambda t: (t.T.reshape(-1)[::3] ** 3).sum() + (t.unsqueeze(0).expand(2, 3, 4) ** 3).sum(),
    lambda t: (ddpc.cat([t, t * t], 1) ** 2).sum() + (ddpc.stack([t, t.exp()]) ** 2).sum(),
    lambda t: (t.clone() ** 3).sum() + (t.clone().exp() ** 2).sum(),
    lambda t: (F.softmax(t, 1) * t).sum() + (F.log_softmax(t, 0) ** 2).sum(),
    lambda t: (F.layer_norm(t, (4,), t[0] + 1, t[1]) ** 3).sum(),
    lambda t: (F.layer_norm(t.reshape(3, 2, 2), (2, 2)) * t.reshape(3, 2, 2)).sum(),
])
def test_reduction_shape_and_normalisation_second_derivatives(fn):
    check_hvp(fn, A)


def test_dtype_casts_are_differentiated_twice():
    # float32 in the middle: the differences of its first gradients are float32's rounding over eps
    check_hvp(lambda t: (t.float().double() ** 3).sum() + (t.float() ** 2).sum(), A, eps=1e-3, rtol=1e-3, atol=1e-5)


IMAGES = RNG.standard_normal((2, 4, 5, 5))


@pytest.mark.parametrize("fn", [
    lambda x, w: F.conv2d(x, w, w[0, 0, 0], stride=2, padding=1) ** 2,
    lambda x, w: F.conv2d(x, w.reshape(6, 2, 3, 3), groups=2, dilation=(1, 2), padding=(1, 2)) ** 2,
    lambda x, w: F.conv1d(x.reshape(2, 4, 25), w[:, :, 0], stride=3) ** 2,
    lambda x, w: F.conv3d(x.reshape(2, 4, 5, 5, 1), w.reshape(3, 4, 3, 3, 1), padding=1) ** 2,
    lambda x, w: F.conv_transpose2d(x[:, :3], w.reshape(3, 4, 3, 3), stride=2, padding=1, output_padding=1) ** 2,
    lambda x, w: F.conv2d(F.conv_transpose2d(x, w.reshape(4, 3, 3, 3)), w.reshape(4, 3, 3, 3), stride=2).tanh(),
])
def test_convolution_second_derivatives(fn):
    check_hvp(lambda x, w: fn(x, w).sum(), IMAGES, RNG.standard_normal((3, 4, 3, 3)) * 0.5)


@pytest.mark.parametrize("fn", [
    lambda x: F.max_pool2d(x * x, 2, stride=1),
    lambda x: F.max_pool2d(x, 3, stride=2, padding=1, dilation=1) * x[:, :, :3, :3],
    lambda x: F.avg_pool2d(x * x, 2, ceil_mode=True) ** 2,
    lambda x: F.avg_pool2d(x * x, 3, stride=2, padding=1, count_include_pad=False) ** 2,
    lambda x: F.adaptive_avg_pool2d(x * x, 2) ** 2,
    lambda x: F.adaptive_max_pool2d(x, 3) * F.adaptive_avg_pool2d(x, 3),
    lambda x: F.fold(F.unfold(x * x, 2, padding=1) ** 2, (5, 5), 2, padding=1),
    lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2, output_size=(5, 5)) ** 3,
])
def test_pooling_second_derivatives(fn):
    check_hvp(lambda x: (fn(x) * fn(x)).sum(), IMAGES)


def test_dropout_keeps_its_mask_in_the_second_pass():
    def fn(t):
        ddpc.manual_seed(3)
        return (F.dropout(t * t, 0.4) ** 2).sum()

    check_hvp(fn, A)


LABELS = np.array([1, 3, 0])


@pytest.mark.parametrize("kwargs", [
    {}, {"reduction": "sum"}, {"reduction": "none"}, {"label_smoothing": 0.2},
    {"weight": np.array([0.5, 2.0, 1.0, 1.5])}, {"ignore_index": 3},
])
def test_cross_entropy_second_derivatives(kwargs):
    kwargs = {k: ddpc.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}

    def fn(x, w):
        loss = F.cross_entropy(x @ w, ddpc.tensor(LABELS), **kwargs)
        return (loss * loss).sum()

    check_hvp(fn, A, RNG.standard_normal((4, 4)))


def test_nll_loss_and_probability_targets_second_derivatives():
    probs = ddpc.tensor(RNG.dirichlet(np.ones(4), 3))
    check_hvp(lambda x: F.nll_loss(F.log_softmax(x * x, 1), ddpc.tensor(LABELS)) ** 2, A)
    check_hvp(lambda x: F.cross_entropy(x * x, probs, label_smoothing=0.1) ** 2, A)


@pytest.mark.parametrize("loss", [
    lambda x, y: F.mse_loss(x, y), lambda x, y: F.l1_loss(x, y, reduction="sum"),
    lambda x, y: F.smooth_l1_loss(x, y, beta=0.8), lambda x, y: F.huber_loss(x, y, delta=0.8),
    lambda x, y: F.binary_cross_entropy(ddpc.sigmoid(x), ddpc.sigmoid(y)),
    lambda x, y: F.binary_cross_entropy_with_logits(x, ddpc.sigmoid(y), pos_weight=ddpc.tensor(ROW.__abs__())),
    lambda x, y: F.binary_cross_entropy_with_logits(x, ddpc.sigmoid(y), reduction="sum"),
    lambda x, y: F.kl_div(F.log_softmax(x, 1), F.softmax(y, 1), reduction="batchmean"),
    lambda x, y: F.kl_div(F.log_softmax(x, 1), F.log_softmax(y, 1), reduction="sum", log_target=True),
    lambda x, y: F.mse_loss(x, y[0], reduction="none").sum(),  # the target broadcast
], ids=["mse", "l1", "smooth_l1", "huber", "bce", "bce_logits_pos_weight", "bce_logits", "kl_div", "kl_div_log_target",
        "mse_broadcast"])
@pytest.mark.filterwarnings("ignore:Using a target size")
def test_pointwise_loss_second_derivatives(loss):
    check_hvp(lambda x, y: loss(x * x, y * y) * (x * y).sum(), A, B)


def test_backward_create_graph_leaves_differentiable_grads_and_accumulates():
    x = ddpc.tensor([1.0, 2.0], requires_grad=True)
    (x ** 3).sum().backward(create_graph=True)
    assert x.grad.requires_grad  # 3 x**2, in the graph
    np.testing.assert_allclose(x.grad.detach().numpy(), [3.0, 12.0])
    g = x.grad
    x.grad = None
    g.sum().backward()  # d/dx sum(3 x**2) = 6 x
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 12.0])
    x.grad = None
    loss = (x ** 3).sum()
    loss.backward(create_graph=True)
    loss.backward(create_graph=True)  # retained: create_graph keeps the graph by default
    np.testing.assert_allclose(x.grad.detach().numpy(), [6.0, 24.0])
    assert x.grad.requires_grad


def test_grad_outputs_in_the_graph_give_jacobian_vector_products():
    """The double-vjp trick: J u = d/dv <J^T v, u> for a v that requires grad."""
    w = ddpc.tensor(B, requires_grad=True)
    x = ddpc.tensor(A[0])
    y = ddpc.tanh(w @ x)
    v = ddpc.zeros(3, dtype=ddpc.float64, requires_grad=True)
    (jt_v,) = ag.grad(y, w, v, create_graph=True)
    u = ddpc.tensor(A)
    (jvp,) = ag.grad((jt_v * u).sum(), v)
    np.testing.assert_allclose(jvp.numpy(), (1 - np.tanh(B @ A[0]) ** 2) * (A @ A[0]), rtol=1e-12)


def test_custom_function_backward_is_differentiated_and_once_differentiable_refuses():
    class Cube(ag.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * x * x

    check_hvp(lambda t: (Cube.apply(t) * t).sum(), A)

    class Once(Cube):
        @staticmethod
        @ag.once_differentiable
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * x * x

    x = ddpc.tensor(A, requires_grad=True)
    np.testing.assert_allclose(ag.grad(Once.apply(x).sum(), x)[0].numpy(), 3 * A * A)
    # As PyTorch: create_graph computes the first-order gradient; differentiating it again raises.
    (g,) = ag.grad(Once.apply(x).sum(), x, create_graph=True)
    np.testing.assert_allclose(g.numpy(), 3 * A * A)
    assert g.requires_grad
    with pytest.raises(NotImplementedError, match="OnceBackward"):
        ag.grad(g.sum(), x)


def test_an_op_without_double_backward_raises_naming_it_when_differentiated_again():
    x = ddpc.tensor(A, requires_grad=True)
    loss = F.ctc_loss(x.reshape(3, 1, 4).log_softmax(2), ddpc.tensor(np.array([[1, 2]])), [3], [2])
    (plain,) = ag.grad(loss, x, retain_graph=True)
    assert not plain.requires_grad
    # create_graph computes the same first-order gradient, usable as a value and in first-order ops ...
    (g,) = ag.grad(loss, x, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), plain.numpy(), rtol=1e-6)
    penalty = (g * g).sum()
    np.testing.assert_allclose(penalty.item(), float((plain.numpy() ** 2).sum()), rtol=1e-5)
    # ... and a later backward that reaches the missing part raises naming the op.
    with pytest.raises(NotImplementedError, match="ddpc has no double backward for CTCBackward"):
        penalty.backward(retain_graph=True)
    with pytest.raises(NotImplementedError, match="CTCBackward"):
        ag.grad(g.sum(), x)


def test_create_graph_backward_accumulates_a_gradient_that_raises_only_when_differentiated():
    x = ddpc.tensor(A, requires_grad=True)
    loss = F.ctc_loss(x.reshape(3, 1, 4).log_softmax(2), ddpc.tensor(np.array([[1, 2]])), [3], [2])
    loss.backward(create_graph=True)
    (plain,) = ag.grad(F.ctc_loss(x.reshape(3, 1, 4).log_softmax(2), ddpc.tensor(np.array([[1, 2]])), [3], [2]), x)
    np.testing.assert_allclose(x.grad.detach().numpy(), plain.numpy(), rtol=1e-6)
    with pytest.raises(NotImplementedError, match="CTCBackward"):
        x.grad.sum().backward()


def test_module_gradient_penalty_matches_the_closed_form():
    """A critic D(x) = v . tanh(W x): the gradient penalty (|dD/dx| - 1)**2 and its gradient in W."""
    rng = np.random.default_rng(1)
    net = ddpc.nn.Sequential(ddpc.nn.Linear(4, 5, bias=False), ddpc.nn.Tanh(), ddpc.nn.Linear(5, 1, bias=False))
    net.double()
    x = ddpc.tensor(rng.standard_normal((6, 4)), requires_grad=True)
    (gx,) = ag.grad(net(x).sum(), x, create_graph=True)
    penalty = ((gx.norm(dim=1) - 1) ** 2).mean()
    penalty.backward()
    W, v = net[0].weight.detach().numpy(), net[2].weight.detach().numpy()[0]

    def closed_form(W):
        s = 1 - np.tanh(x.detach().numpy() @ W.T) ** 2
        grads = (s * v) @ W
        return np.mean((np.linalg.norm(grads, axis=1) - 1) ** 2)

    from numeric import numeric_grad

    np.testing.assert_allclose(net[0].weight.grad.numpy(), numeric_grad(closed_form, W), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(penalty.item(), closed_form(W), rtol=1e-12)


INDEX = np.array([[0, 2, 1, 0], [2, 2, 0, 1], [1, 0, 0, 2]])


@pytest.mark.parametrize("fn", [
    lambda t: (t.gather(0, ddpc.tensor(INDEX)) ** 3).sum(),
    lambda t: (ddpc.zeros(3, 4, dtype=ddpc.float64).scatter_add(0, ddpc.tensor(INDEX), t * t) ** 2).sum(),
    lambda t: ((t * t).scatter(1, ddpc.tensor(np.array([[0, 2], [3, 1], [1, 0]])), t[:, 1:3] ** 3) ** 2).sum(),
    lambda t: (t.cumsum(1) ** 3).sum(),
    lambda t: (t.cumprod(1) ** 2).sum() + (t.cumprod(0) * t).sum(),
    lambda t: (t.prod(1) ** 2).sum() + t.prod() * t[0, 0] + (ddpc.prod(t * 0 + t[0], 0, keepdim=True) ** 3).sum(),
    lambda t: (t.logcumsumexp(1) ** 2).sum() + (t.logcumsumexp(0) * t).sum(),
    lambda t: (ddpc.nan_to_num(t * t) ** 2).sum(),
    lambda t: (ddpc.atan2(t, t[::-1] + 2) ** 2).sum(),
    lambda t: (t.index_select(1, ddpc.tensor(np.array([3, 0, 3]))) ** 3).sum(),
    lambda t: (F.embedding(ddpc.tensor(INDEX), t * t, padding_idx=1) ** 2).sum(),
])
def test_index_and_scan_second_derivatives(fn):
    check_hvp(fn, A)


def test_products_with_a_zero_are_differentiated_twice():
    with_zero = A.copy()
    with_zero[1, 2] = 0.0
    check_hvp(lambda t: (t.prod(1) ** 2).sum() + (t.cumprod(1) * t).sum(), with_zero)


def test_in_place_writes_are_differentiated_twice():
    def fn(t):
        y = t * t
        y[1:, 2] = t[0, :2] ** 3
        y[0] = y[0] * 2
        return (y ** 2).sum()

    check_hvp(fn, A)


def test_functional_derivatives_match_closed_forms():
    import ddpc.autograd.functional as AF

    M, S = RNG.standard_normal((3, 4)), RNG.standard_normal((4, 4))
    x, v, u = ddpc.tensor(ROW), ddpc.tensor(RNG.standard_normal(4)), ddpc.tensor(RNG.standard_normal(3))

    def linear(t):
        return ddpc.tensor(M) @ t

    def quadratic(t):
        return t @ ddpc.tensor(S) @ t

    np.testing.assert_allclose(AF.jacobian(linear, x).numpy(), M)
    np.testing.assert_allclose(AF.jacobian(linear, x, strategy="forward-mode").numpy(), M)
    np.testing.assert_allclose(AF.hessian(quadratic, x).numpy(), S + S.T, rtol=1e-12)
    out, jv = AF.jvp(linear, x, v)
    np.testing.assert_allclose(jv.numpy(), M @ v.numpy(), rtol=1e-12)
    np.testing.assert_allclose(out.numpy(), M @ ROW, rtol=1e-12)
    np.testing.assert_allclose(AF.vjp(linear, x, u)[1].numpy(), u.numpy() @ M, rtol=1e-12)
    for fn in (AF.hvp, AF.vhp):
        value, hv = fn(quadratic, x, v)
        np.testing.assert_allclose(hv.numpy(), (S + S.T) @ v.numpy(), rtol=1e-12)
        np.testing.assert_allclose(value.item(), ROW @ S @ ROW, rtol=1e-12)
    # Tuples of inputs and outputs nest as PyTorch's: [output][input], each output.shape + input.shape.
    jac = AF.jacobian(lambda a, b: (a * 2, (a * b).sum()), (x, v))
    assert [[tuple(b.shape) for b in row] for row in jac] == [[(4, 4), (4, 4)], [(4,), (4,)]]
    np.testing.assert_allclose(jac[1][0].numpy(), v.numpy())
    assert not jac[0][0].requires_grad
    # create_graph keeps the result in the graph of an input that requires grad: H v = 6 x v for sum(x**3).
    leaf = ddpc.tensor(ROW, requires_grad=True)
    _, hv = AF.hvp(lambda t: (t ** 3).sum(), leaf, v, create_graph=True)
    np.testing.assert_allclose(ag.grad(hv.sum(), leaf)[0].numpy(), 6 * v.numpy(), rtol=1e-12)


def test_functional_derivatives_errors():
    import ddpc.autograd.functional as AF

    x = ddpc.tensor(ROW)
    with pytest.raises(RuntimeError, match="independent of input 1"):
        AF.jacobian(lambda a, b: a * 2, (x, x), strict=True)
    np.testing.assert_array_equal(AF.jacobian(lambda a, b: a * 2, (x, x))[1].numpy(), np.zeros((4, 4)))
    with pytest.raises(RuntimeError, match="must match the shapes"):
        AF.jvp(lambda a: a * 2, x, ddpc.ones(3, dtype=ddpc.float64))
    with pytest.raises(RuntimeError, match="single element"):
        AF.hessian(lambda a: a * 2, x)
    with pytest.raises(RuntimeError, match="v can be left out"):
        AF.vjp(lambda a: a * 2, x)
    with pytest.raises(TypeError, match="must be a ddpc tensor"):
        AF.jacobian(lambda a: a.numpy(), x)


@pytest.mark.parametrize("mode, kwargs", [
    ("LSTM", {}), ("LSTM", {"proj_size": 2, "bias": False}), ("GRU", {"bidirectional": True}),
    ("RNN", {"nonlinearity": "tanh", "num_layers": 2}), ("RNN", {"nonlinearity": "relu"}),
])
def test_recurrent_layer_second_derivatives(mode, kwargs):
    ddpc.manual_seed(0)
    layer = getattr(ddpc.nn, mode)(3, 4, **kwargs).double()
    weights = [p.detach().numpy().copy() for p in layer.parameters()]
    names = [n for n, _ in layer.named_parameters()]

    def fn(x, *ws):
        out = ddpc.func.functional_call(layer, dict(zip(names, ws)), x)[0]
        return (out * out * x[..., :1]).sum()

    check_hvp(fn, RNG.standard_normal((5, 2, 3)), *weights)


def test_packed_lstm_and_cells_second_derivatives():
    ddpc.manual_seed(1)
    lstm, cell = ddpc.nn.LSTM(3, 4).double(), ddpc.nn.GRUCell(3, 3).double()
    lengths = ddpc.tensor(np.array([4, 2, 1]))

    def fn(x, h):
        packed = ddpc.nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)
        out, (h_n, c_n) = lstm(packed, (h, h * h))
        padded, _ = ddpc.nn.utils.rnn.pad_packed_sequence(out)
        return (padded ** 2).sum() + (c_n * h_n).sum() + (cell(x[0], h[0, :, :3]) ** 3).sum()

    check_hvp(fn, RNG.standard_normal((4, 3, 3)), RNG.standard_normal((1, 3, 4)))


def _penalty_grads(device):
    rng = np.random.default_rng(5)
    ddpc.manual_seed(0)
    net = ddpc.nn.Sequential(ddpc.nn.Conv2d(2, 3, 3, padding=1), ddpc.nn.Tanh(), ddpc.nn.MaxPool2d(2),
                             ddpc.nn.Flatten(), ddpc.nn.Linear(12, 5), ddpc.nn.GELU(), ddpc.nn.LayerNorm(5),
                             ddpc.nn.Linear(5, 3)).double().to(device)
    x = ddpc.tensor(rng.standard_normal((4, 2, 4, 4)), device=device, requires_grad=True)
    out = net(x)
    (gx,) = ag.grad(F.cross_entropy(out, ddpc.tensor([0, 2, 1, 1], device=device)), x, create_graph=True)
    ((gx.reshape(4, -1).norm(dim=1) - 1) ** 2).mean().backward()
    return [p.grad.cpu().numpy() for p in net.parameters()]


@pytest.mark.gpu
def test_gradient_penalty_on_cuda_matches_the_host():
    for got, want in zip(_penalty_grads("cuda"), _penalty_grads("cpu")):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_rounded_division_gradients_are_their_own_and_differentiated_twice():
    a, c = ddpc.tensor(A * 3, requires_grad=True), ddpc.tensor(B * 3, requires_grad=True)
    (ddpc.fmod(a, 2.0) + ddpc.remainder(c, 2.0)).sum().backward()
    a.grad.add_(1.0)  # each leaf owns its gradient: c's does not change with a's
    np.testing.assert_array_equal(c.grad.numpy(), np.ones_like(B))
    check_hvp(lambda x, y: (ddpc.fmod(x * x, y * y + 0.5) ** 2).sum() + (ddpc.remainder(x, y * y + 0.5) * x).sum(),
              A, B)


def test_logcumsumexp_from_minus_infinity_is_differentiated_twice():
    x = ddpc.tensor([[-np.inf, -np.inf, 0.5, -1.0], [0.2, -np.inf, 0.3, 0.1]], dtype=ddpc.float64,
                    requires_grad=True)
    (g,) = ag.grad((x.logcumsumexp(1) ** 2).sum(), x, create_graph=True)
    want = ag.grad((x.logcumsumexp(1) ** 2).sum(), x)[0].numpy()
    finite = np.isfinite(x.detach().numpy())  # at -inf itself PyTorch's gradient is NaN
    np.testing.assert_allclose(g.detach().numpy()[finite], want[finite], rtol=1e-12)
    (h,) = ag.grad(g[:, 2:].sum(), x)  # PyTorch's, at the finite elements
    np.testing.assert_allclose(h.numpy()[finite], [3.63514895, 0.36485105, -0.10624069, 1.83021979, 0.66152929],
                               rtol=1e-7)

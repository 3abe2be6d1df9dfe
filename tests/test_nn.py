"""ddpc.nn: module registration and state, layers, and end-to-end training."""

import math

import numpy as np
import pytest

import ddpc
import ddpc.nn.functional as F
from ddpc import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.1))
        self.head = nn.Linear(8, 3, bias=False)
        self.register_buffer("steps", ddpc.zeros(1))
        self.register_buffer("scratch", ddpc.zeros(2), persistent=False)
        self.blocks = nn.ModuleList([nn.Identity(), nn.Tanh()])

    def forward(self, x):
        h = self.body(x)
        for b in self.blocks:
            h = b(h)
        return self.head(h)


def test_registration_and_traversal():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["body.0.weight", "body.0.bias", "head.weight"]
    assert [n for n, _ in net.named_buffers()] == ["steps", "scratch"]
    assert len(list(net.parameters())) == 3
    assert [type(m).__name__ for m in net.children()] == ["Sequential", "Linear", "ModuleList"]
    assert len(list(net.modules())) == 9
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in net.parameters())
    assert net.head.bias is None
    with pytest.raises(TypeError):
        net.head.weight = ddpc.zeros(3, 8)
    with pytest.raises(AttributeError):
        net.missing


def test_state_dict_and_strict_loading():
    ddpc.manual_seed(0)
    a, b = Net(), Net()
    sd = a.state_dict()
    assert list(sd) == ["steps", "body.0.weight", "body.0.bias", "head.weight"] or set(sd) == {
        "steps", "body.0.weight", "body.0.bias", "head.weight"}
    assert "scratch" not in sd
    res = b.load_state_dict(sd)
    assert res.missing_keys == [] and res.unexpected_keys == []
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        np.testing.assert_array_equal(np.asarray(p), np.asarray(q))
    bad = dict(sd)
    del bad["head.weight"]
    bad["extra"] = ddpc.zeros(1)
    with pytest.raises(RuntimeError, match=r'Missing key\(s\) in state_dict: "head.weight"') as e:
        b.load_state_dict(bad)
    assert 'Unexpected key(s) in state_dict: "extra"' in str(e.value)
    res = b.load_state_dict(bad, strict=False)
    assert res.missing_keys == ["head.weight"] and res.unexpected_keys == ["extra"]
    wrong = dict(sd)
    wrong["head.weight"] = ddpc.zeros(3, 9)
    with pytest.raises(RuntimeError, match="size mismatch for head.weight"):
        b.load_state_dict(wrong, strict=False)


def test_to_dtype_keeps_parameter_identity_and_train_eval():
    net = Net()
    params = list(net.parameters())
    net.double()
    assert all(p.dtype is ddpc.float64 for p in net.parameters())
    assert [id(p) for p in net.parameters()] == [id(p) for p in params]
    assert net.steps.dtype is ddpc.float64
    net.to(ddpc.float32).cpu()
    assert net.body[0].weight.dtype is ddpc.float32
    net.eval()
    assert not any(m.training for m in net.modules())
    x = ddpc.randn(5, 4)
    np.testing.assert_array_equal(np.asarray(net(x)), np.asarray(net(x)))
    net.train()
    assert all(m.training for m in net.modules())


def test_zero_grad_apply_and_repr():
    net = Net()
    net(ddpc.randn(2, 4)).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad(set_to_none=False)
    assert all(np.all(np.asarray(p.grad) == 0) for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    seen = []
    net.apply(lambda m: seen.append(type(m).__name__))
    assert seen[-1] == "Net" and "Linear" in seen
    text = repr(net)
    assert "(body): Sequential(" in text and "(0): Linear(in_features=4, out_features=8, bias=True)" in text
    assert "(head): Linear(in_features=8, out_features=3, bias=False)" in text
    assert "Dropout(p=0.1" in text


def test_linear_default_init_is_uniform_within_pytorch_bounds():
    ddpc.manual_seed(1)
    lin = nn.Linear(400, 300)
    bound = 1 / math.sqrt(400)
    w, b = np.asarray(lin.weight), np.asarray(lin.bias)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.01 * bound
    assert np.abs(b).max() <= bound
    ddpc.manual_seed(1)
    np.testing.assert_array_equal(np.asarray(nn.Linear(400, 300).weight), w)


def test_containers():
    seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    assert len(seq) == 3 and isinstance(seq[-1], nn.Linear) and len(seq[:2]) == 2
    ml = nn.ModuleList([nn.ReLU()])
    ml.append(nn.Tanh())
    ml.insert(0, nn.Sigmoid())
    assert [type(m).__name__ for m in ml] == ["Sigmoid", "ReLU", "Tanh"]
    assert isinstance(ml[-1], nn.Tanh)
    flat = nn.Flatten()(ddpc.zeros(2, 3, 4))
    assert flat.shape == (2, 12)


def _synthetic(seed=0, n=512, d=10, classes=4):
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((classes, d)) * 2
    y = rng.integers(0, classes, n)
    x = centers[y] + rng.standard_normal((n, d)) * 0.5
    return ddpc.tensor(x, dtype=ddpc.float32), ddpc.tensor(y)


def _train(seed, steps=60):
    ddpc.manual_seed(seed)
    x, y = _synthetic()
    model = nn.Sequential(nn.Linear(10, 32), nn.GELU(), nn.Dropout(0.1), nn.Linear(32, 4))
    opt = ddpc.optim.Adam(model.parameters(), lr=1e-2)
    loss_fn = nn.CrossEntropyLoss()
    for i in range(steps):
        batch = slice((i * 64) % 512, (i * 64) % 512 + 64)
        opt.zero_grad()
        loss = loss_fn(model(x[batch]), y[batch])
        loss.backward()
        opt.step()
    model.eval()
    with ddpc.no_grad():
        final = loss_fn(model(x), y).item()
    return final, [np.asarray(p).copy() for p in model.parameters()]


def test_mlp_learns_a_synthetic_problem_deterministically():
    loss, params = _train(7)
    # Chance level is log(4) = 1.386; the classes are well separated.
    assert loss < 0.05
    loss2, params2 = _train(7)
    assert loss2 == loss
    for p, q in zip(params, params2):
        np.testing.assert_array_equal(p, q)


def test_parameters_deep_copy_as_parameters():
    import copy

    lin = nn.Linear(3, 2)
    twin = copy.deepcopy(lin)
    assert isinstance(twin.weight, nn.Parameter) and twin.weight.requires_grad
    assert twin.weight.data_ptr() != lin.weight.data_ptr()
    np.testing.assert_array_equal(np.asarray(twin.weight), np.asarray(lin.weight))


def test_linear_with_no_input_features_gives_the_bias():
    lin = nn.Linear(0, 3)
    x = ddpc.zeros(2, 0, requires_grad=True)
    y = lin(x)
    assert y.shape == (2, 3)
    np.testing.assert_array_equal(np.asarray(y.detach()), np.tile(np.asarray(lin.bias.detach()), (2, 1)))
    y.sum().backward()
    assert lin.bias.grad.tolist() == [2.0, 2.0, 2.0] and lin.weight.grad.shape == (3, 0) and x.grad.shape == (2, 0)


def test_flatten_refuses_dims_out_of_range():
    with pytest.raises(IndexError, match=r"but got 4\)"):
        F.flatten(ddpc.zeros(2, 3, 4), start_dim=4)
    with pytest.raises(IndexError, match=r"but got 1\)"):
        nn.Flatten()(ddpc.zeros(5))
    assert F.flatten(ddpc.zeros(2, 3, 4), 0, -2).shape == (6, 4)
    assert F.flatten(ddpc.tensor(1.0), 0).shape == (1,)


def test_linear_bias_gradient_over_a_large_batch_accumulates_in_double():
    lin = nn.Linear(1, 2)
    (lin(ddpc.zeros(1 << 20, 1)) * 0.1).sum().backward()
    np.testing.assert_allclose(np.asarray(lin.bias.grad), np.float64(np.float32(0.1)) * (1 << 20), rtol=1e-7)


def test_module_dict_registers_its_modules():
    m = nn.ModuleDict({"a": nn.Linear(2, 3)})
    m["b"] = nn.Linear(3, 1)
    assert list(m.keys()) == ["a", "b"] and "a" in m and len(m) == 2
    assert [k for k, _ in m.named_parameters()] == ["a.weight", "a.bias", "b.weight", "b.bias"]
    assert set(m.state_dict()) == {"a.weight", "a.bias", "b.weight", "b.bias"}
    del m["a"]
    assert list(m) == ["b"]


def test_gradient_clipping():
    w = ddpc.tensor([3.0, 4.0], requires_grad=True)
    v = ddpc.tensor([0.0], requires_grad=True)
    ((w * w).sum() + v.sum() * 0.0).backward()  # grads (6, 8) and (0): norm 10
    total = nn.utils.clip_grad_norm_([w, v], max_norm=5.0)
    assert total.item() == pytest.approx(10.0)
    assert w.grad.tolist() == pytest.approx([3.0, 4.0], rel=1e-5)
    w.grad = ddpc.tensor([3.0, -4.0])
    assert nn.utils.clip_grad_norm_(w, 100, norm_type=float("inf")).item() == 4.0
    assert nn.utils.clip_grad_norm_(w, 100, norm_type=1).item() == pytest.approx(7.0)
    assert w.grad.tolist() == [3.0, -4.0]  # under the bound: unchanged
    w.grad = ddpc.tensor([float("nan"), 1.0])
    with pytest.raises(RuntimeError, match="not finite"):
        nn.utils.clip_grad_norm_(w, 1.0, error_if_nonfinite=True)
    w.grad = ddpc.tensor([3.0, -4.0])
    nn.utils.clip_grad_value_([w], 3.5)
    assert w.grad.tolist() == [3.0, -3.5]


def _layer_norm_ref(x, w, b, eps=1e-5):
    """float64 reference of layer_norm over the last two dims, and its gradients for an upstream gradient g."""
    axes = (-2, -1)
    m = x.mean(axis=axes, keepdims=True)
    v = ((x - m) ** 2).mean(axis=axes, keepdims=True)
    xhat = (x - m) / np.sqrt(v + eps)
    return xhat * w + b, xhat, 1 / np.sqrt(v + eps)


def test_layer_norm_matches_its_formula_and_gradient():
    rng = np.random.default_rng(0)
    x, w, b, g = (rng.standard_normal(s) for s in ((4, 5, 6), (5, 6), (5, 6), (4, 5, 6)))
    y_ref, xhat, rstd = _layer_norm_ref(x, w, b)
    d = 30
    gw_ref, gb_ref = (g * xhat).sum(0), g.sum(0)
    gxhat = g * w
    gx_ref = rstd * (gxhat - gxhat.mean(axis=(-2, -1), keepdims=True)
                     - xhat * (gxhat * xhat).sum(axis=(-2, -1), keepdims=True) / d)
    for dt, tol in ((ddpc.float64, 1e-10), (ddpc.float32, 2e-5)):
        tx, tw, tb = (ddpc.tensor(a, dtype=dt, requires_grad=True) for a in (x, w, b))
        y = F.layer_norm(tx, (5, 6), tw, tb)
        y.backward(ddpc.tensor(g, dtype=dt))
        for got, want in ((y, y_ref), (tx.grad, gx_ref), (tw.grad, gw_ref), (tb.grad, gb_ref)):
            np.testing.assert_allclose(got.detach().numpy(), want, rtol=tol, atol=tol)
    ln = nn.LayerNorm(6)
    assert [k for k, _ in ln.named_parameters()] == ["weight", "bias"]
    out = ln(ddpc.tensor(x, dtype=ddpc.float32)).numpy()
    np.testing.assert_allclose(out.mean(-1), 0, atol=1e-5)
    np.testing.assert_allclose(out.var(-1), 1, atol=1e-3)
    assert list(nn.LayerNorm(6, elementwise_affine=False).parameters()) == []
    h = F.layer_norm(ddpc.tensor(x, dtype=ddpc.bfloat16), 6)
    assert h.dtype is ddpc.bfloat16
    with pytest.raises(ValueError, match="last dims"):
        F.layer_norm(ddpc.ones(3, 4), (3,))


def test_embedding_looks_up_rows_and_adds_their_gradients():
    table = np.arange(12, dtype=np.float32).reshape(6, 2)
    w = ddpc.tensor(table, requires_grad=True)
    idx = ddpc.tensor([[1, 4, 1], [0, 4, 4]])
    out = F.embedding(idx, w, padding_idx=0)
    assert out.shape == (2, 3, 2) and out.detach().numpy().tolist() == table[[[1, 4, 1], [0, 4, 4]]].tolist()
    out.sum().backward()
    assert w.grad.numpy()[:, 0].tolist() == [0.0, 2.0, 0.0, 0.0, 3.0, 0.0]  # repeats add up; padding row none
    half = ddpc.tensor(table, dtype=ddpc.float16, requires_grad=True)
    F.embedding(idx, half).sum().backward()
    assert half.grad.dtype is ddpc.float16 and half.grad.float().numpy()[:, 0].tolist() == [1, 2, 0, 0, 3, 0]
    emb = nn.Embedding(10, 3, padding_idx=2)
    assert emb.weight[2].tolist() == [0.0] * 3 and emb(ddpc.tensor([2, 5])).shape == (2, 3)
    with pytest.raises(ValueError, match="out of range"):
        F.embedding(ddpc.tensor([6]), w)
    assert F.embedding(ddpc.tensor([1], dtype=ddpc.int32), w).tolist() == F.embedding(ddpc.tensor([1]), w).tolist()
    with pytest.raises(TypeError, match="int64 or int32"):
        F.embedding(ddpc.tensor([1], dtype=ddpc.uint8), w)


def test_embedding_scale_grad_by_freq_divides_each_rows_gradient_by_its_count():
    table = np.arange(12, dtype=np.float64).reshape(6, 2)
    idx = ddpc.tensor([[1, 4, 1], [0, 4, 4]])
    g = np.random.default_rng(0).standard_normal((2, 3, 2))
    w = ddpc.tensor(table, requires_grad=True)
    F.embedding(idx, w, padding_idx=0, scale_grad_by_freq=True).backward(ddpc.tensor(g))
    want = np.zeros((6, 2))
    for i, row in enumerate(idx.numpy().reshape(-1)):
        want[row] += g.reshape(-1, 2)[i] / (idx.numpy() == row).sum()
    want[0] = 0.0  # padding_idx
    np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-12)
    # the gradient's own gradient (create_graph) is scaled the same way
    w2 = ddpc.tensor(table, requires_grad=True)
    gt = ddpc.tensor(g, requires_grad=True)
    (gw,) = ddpc.autograd.grad(F.embedding(idx, w2, scale_grad_by_freq=True), w2, gt, create_graph=True)
    (gg,) = ddpc.autograd.grad((gw * ddpc.tensor(table)).sum(), gt)
    counts = np.bincount(idx.numpy().reshape(-1), minlength=6)
    np.testing.assert_allclose(gg.numpy(), (table / counts[:, None].clip(1))[idx.numpy()], rtol=1e-12)
    w3 = ddpc.tensor(table, requires_grad=True)
    with pytest.raises(RuntimeError, match="scale_grad_by_freq not supported with sparse gradients"):
        F.embedding(idx, w3, scale_grad_by_freq=True, sparse=True).sum().backward()


def test_embeddings_from_pretrained_weights_frozen_or_not():
    table = ddpc.tensor(np.arange(12, dtype=np.float32).reshape(6, 2))
    emb = nn.Embedding.from_pretrained(table)
    assert emb.weight.tolist() == table.tolist() and not emb.weight.requires_grad
    assert (emb.num_embeddings, emb.embedding_dim) == (6, 2)
    assert emb(ddpc.tensor([5])).tolist() == [[10.0, 11.0]]
    tuned = nn.Embedding.from_pretrained(table, freeze=False, padding_idx=0, scale_grad_by_freq=True)
    assert tuned.weight.requires_grad and tuned.padding_idx == 0 and tuned.scale_grad_by_freq
    bag = nn.EmbeddingBag.from_pretrained(table, mode="sum")
    assert bag(ddpc.tensor([[1, 2]])).tolist() == [[6.0, 8.0]] and not bag.weight.requires_grad
    with pytest.raises(ValueError, match="2-d"):
        nn.Embedding.from_pretrained(ddpc.zeros(3))
    with pytest.raises(ValueError, match="does not match"):
        nn.Embedding(5, 2, _weight=table)


def test_embedding_max_norm_renormalises_the_rows_looked_up_in_place():
    table = np.array([[3.0, 4.0], [0.3, 0.4], [6.0, 8.0], [1.0, 1.0]])
    w = ddpc.tensor(table, requires_grad=True)
    out = F.embedding(ddpc.tensor([[0, 1], [0, 3]]), w, max_norm=2.0)
    want = table.copy()
    want[0] *= 2.0 / (5.0 + 1e-7)  # rows 1 and 3 are within the norm; row 2, not looked up, keeps its own
    np.testing.assert_allclose(w.detach().numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(out.detach().numpy(), want[[[0, 1], [0, 3]]], rtol=1e-12)
    out.sum().backward()
    assert w.grad.numpy()[:, 0].tolist() == [2.0, 1.0, 0.0, 1.0]
    emb = nn.Embedding(4, 2, max_norm=1.0, norm_type=1.0)
    emb(ddpc.tensor([0, 1, 2, 3]))
    assert float(emb.weight.detach().abs().sum(1).max()) <= 1.0 + 1e-6


def test_module_zero_grad_in_place_detaches_gradients_that_have_a_graph():
    lin = nn.Linear(2, 1)
    (lin(ddpc.ones(1, 2)) ** 2).sum().backward(create_graph=True)
    grads = [p.grad for p in lin.parameters()]
    assert all(g.grad_fn is not None for g in grads)
    lin.zero_grad(set_to_none=False)
    # as PyTorch: each gradient zeroed in place and out of the graph
    assert all(p.grad is g and g.grad_fn is None and not g.requires_grad for p, g in zip(lin.parameters(), grads))
    assert all(np.all(np.asarray(g) == 0) for g in grads)

"""Sparse COO tensors and sparse gradients in one process: the tensor API
against numpy references, Embedding and EmbeddingBag sparse gradients
against the dense path's, SparseAdam against its update rule written out in
numpy, SGD and Adagrad with sparse gradients against their dense
trajectories, and the errors for what sparse tensors do not support."""

import io
import pickle

import numpy as np
import pytest

import ddpc
import ddpc.nn.functional as F
from ddpc import nn


def dense_of(indices, values, size):
    """numpy's reference: values added at their indices (repeats add up)."""
    out = np.zeros(size, dtype=np.asarray(values).dtype)
    np.add.at(out, tuple(np.asarray(indices)), np.asarray(values))
    return out


def sample(rng, size=(5, 4, 3), sparse_dim=2, nnz=12):
    idx = np.stack([rng.integers(0, size[d], nnz) for d in range(sparse_dim)]).astype(np.int64)
    vals = rng.standard_normal((nnz,) + size[sparse_dim:]).astype(np.float32)
    return idx, vals


# ---- the tensor ---------------------------------------------------------------------------

def test_construction_metadata_and_layout():
    s = ddpc.sparse_coo_tensor([[0, 1, 1], [2, 0, 2]], [3.0, 4.0, 5.0], (2, 3))
    assert isinstance(s, ddpc.Tensor) and s.is_sparse and s.layout is ddpc.sparse_coo
    assert ddpc.ones(2).layout is ddpc.strided and not ddpc.ones(2).is_sparse
    assert s.shape == (2, 3) and s.size() == (2, 3) and s.size(1) == 3 and s.ndim == 2 and s.numel() == 6
    assert s.sparse_dim() == 2 and s.dense_dim() == 0 and s._nnz() == 3 and s.dtype is ddpc.float32
    assert not s.is_coalesced()
    np.testing.assert_array_equal(s._indices().numpy(), [[0, 1, 1], [2, 0, 2]])
    # the size is inferred from the largest index; dense dims from the values
    h = ddpc.sparse_coo_tensor([[1, 0, 1]], [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    assert h.shape == (2, 2) and h.sparse_dim() == 1 and h.dense_dim() == 1
    d = ddpc.sparse_coo_tensor(ddpc.tensor([[0]]), ddpc.tensor([1.0]), (4,), dtype=ddpc.float64, requires_grad=True)
    assert d.dtype is ddpc.float64 and d.requires_grad and d.is_coalesced()


def test_printing_as_pytorch():
    s = ddpc.sparse_coo_tensor([[0, 1, 1], [2, 0, 2]], [3.0, 4.0, 5.0], (2, 3))
    assert repr(s) == ("tensor(indices=tensor([[0, 1, 1],\n"
                       "                       [2, 0, 2]]),\n"
                       "       values=tensor([3., 4., 5.]),\n"
                       "       size=(2, 3), nnz=3, layout=ddpc.sparse_coo)")
    d = ddpc.sparse_coo_tensor([[0, 1, 1], [2, 0, 2]], [3.0, 4.0, 5.0], (2, 3), dtype=ddpc.float64,
                               requires_grad=True)
    assert repr(d).endswith("values=tensor([3., 4., 5.]),\n"
                            "       size=(2, 3), nnz=3, dtype=ddpc.float64, layout=ddpc.sparse_coo,\n"
                            "       requires_grad=True)")


@pytest.mark.parametrize("size,sparse_dim", [((5, 4, 3), 2), ((6, 3), 1), ((7,), 1), ((3, 4), 2)])
def test_coalesce_and_to_dense_match_numpy(size, sparse_dim):
    rng = np.random.default_rng(sparse_dim + len(size))
    idx, vals = sample(rng, size, sparse_dim, nnz=15)
    s = ddpc.sparse_coo_tensor(idx, vals, size)
    want = dense_of(idx, vals, size)
    np.testing.assert_allclose(s.to_dense().numpy(), want, rtol=1e-6, atol=1e-6)
    c = s.coalesce()
    assert c.is_coalesced() and c.coalesce() is c
    keys = np.ravel_multi_index(tuple(c.indices().numpy()), size[:sparse_dim])
    assert (np.diff(keys) > 0).all()  # sorted and distinct
    assert c._nnz() == len(np.unique(np.ravel_multi_index(tuple(idx), size[:sparse_dim])))
    np.testing.assert_allclose(c.to_dense().numpy(), want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(c.values().numpy(), want[tuple(c.indices().numpy())], rtol=1e-6, atol=1e-6)


def test_indices_and_values_need_a_coalesced_tensor():
    s = ddpc.sparse_coo_tensor([[1, 0, 1]], [1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError, match="Cannot get indices on an uncoalesced tensor"):
        s.indices()
    with pytest.raises(RuntimeError, match="Cannot get values on an uncoalesced tensor"):
        s.values()
    np.testing.assert_array_equal(s.coalesce().values().numpy(), [2.0, 4.0])


def test_empty_tensor():
    s = ddpc.sparse_coo_tensor(ddpc.zeros((1, 0), dtype=ddpc.int64), ddpc.zeros((0, 2)), (4, 2))
    assert s._nnz() == 0 and s.coalesce()._nnz() == 0
    np.testing.assert_array_equal(s.to_dense().numpy(), np.zeros((4, 2)))


@pytest.mark.parametrize("sparse_dim", [None, 1, 2])
def test_to_sparse_round_trip(sparse_dim):
    a = np.array([[0, 1.5, 0], [0, 0, 0], [2, 0, -1]], dtype=np.float32)
    s = ddpc.tensor(a).to_sparse() if sparse_dim is None else ddpc.tensor(a).to_sparse(sparse_dim)
    assert s.is_coalesced() and s.sparse_dim() == (2 if sparse_dim is None else sparse_dim)
    assert s._nnz() == (3 if s.sparse_dim() == 2 else 2)  # elements, or the nonzero rows
    np.testing.assert_array_equal(s.to_dense().numpy(), a)


def test_addition_with_sparse_and_dense():
    rng = np.random.default_rng(1)
    (i1, v1), (i2, v2) = sample(rng, (4, 3), 1, 5), sample(rng, (4, 3), 1, 4)
    a, b = ddpc.sparse_coo_tensor(i1, v1, (4, 3)), ddpc.sparse_coo_tensor(i2, v2, (4, 3))
    both = dense_of(i1, v1, (4, 3)) + dense_of(i2, v2, (4, 3))
    s = a + b
    assert s.is_sparse and s._nnz() == 9 and not s.is_coalesced()  # concatenated, as PyTorch
    np.testing.assert_allclose(s.to_dense().numpy(), both, rtol=1e-6)
    assert (a.coalesce() + b.coalesce()).is_coalesced()
    np.testing.assert_allclose((a - b).to_dense().numpy(), dense_of(i1, v1, (4, 3)) - dense_of(i2, v2, (4, 3)),
                               rtol=1e-6)
    base = rng.standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_allclose((ddpc.tensor(base) + a).numpy(), base + dense_of(i1, v1, (4, 3)), rtol=1e-6)
    np.testing.assert_allclose(ddpc.add(ddpc.tensor(base), a, alpha=2).numpy(), base + 2 * dense_of(i1, v1, (4, 3)),
                               rtol=1e-6)
    t = ddpc.tensor(base)
    ptr = t.data_ptr()
    t.add_(a)
    assert t.data_ptr() == ptr
    np.testing.assert_allclose(t.numpy(), base + dense_of(i1, v1, (4, 3)), rtol=1e-6)
    with pytest.raises(RuntimeError, match=r"add\(sparse, dense\) is not supported"):
        a + ddpc.tensor(base)
    with pytest.raises(RuntimeError, match="sizes of the tensors must match"):
        a + ddpc.sparse_coo_tensor([[0]], [[1.0, 2.0]], (4, 2))


def test_scaling_in_place_and_not():
    s = ddpc.sparse_coo_tensor([[1, 0, 1]], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal((s * 2).to_dense().numpy(), [4.0, 8.0])
    np.testing.assert_array_equal((-s).to_dense().numpy(), [-2.0, -4.0])
    assert s.mul_(3) is s
    np.testing.assert_array_equal(s.to_dense().numpy(), [6.0, 12.0])
    s.div_(ddpc.tensor(2.0))
    np.testing.assert_array_equal(s.to_dense().numpy(), [3.0, 6.0])
    with pytest.raises(NotImplementedError, match="scalar only"):
        s.mul_(ddpc.ones(2))


def test_sparse_sum_mm_and_addmm():
    rng = np.random.default_rng(2)
    idx, vals = sample(rng, (5, 4, 3), 2, 10)
    s = ddpc.sparse_coo_tensor(idx, vals, (5, 4, 3))
    d = dense_of(idx, vals, (5, 4, 3))
    np.testing.assert_allclose(ddpc.sparse.sum(s).item(), d.sum(), rtol=1e-5)
    for dim in (0, 1, 2, (0, 2), (0, 1)):
        got = ddpc.sparse.sum(s, dim)
        got = got.to_dense() if got.is_sparse else got
        np.testing.assert_allclose(got.numpy(), d.sum(axis=dim), rtol=1e-5, atol=1e-6)
    assert ddpc.sparse.sum(s, 2).is_sparse and not ddpc.sparse.sum(s, (0, 1)).is_sparse
    i2, v2 = sample(rng, (4, 6), 2, 9)
    m = ddpc.sparse_coo_tensor(i2, v2, (4, 6))
    b = rng.standard_normal((6, 3)).astype(np.float32)
    c = rng.standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_allclose(ddpc.sparse.mm(m, ddpc.tensor(b)).numpy(), dense_of(i2, v2, (4, 6)) @ b, rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(ddpc.sparse.addmm(ddpc.tensor(c), m, ddpc.tensor(b), beta=0.5, alpha=2.0).numpy(),
                               0.5 * c + 2.0 * dense_of(i2, v2, (4, 6)) @ b, rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        ddpc.sparse.mm(m, ddpc.ones(4, 2))


def test_clone_to_pickle_and_save():
    s = ddpc.sparse_coo_tensor([[1, 0, 1]], [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    c = s.clone()
    c.mul_(0)
    assert s.to_dense().numpy().sum() == 21
    d = s.to(ddpc.float64)
    assert d.is_sparse and d.dtype is ddpc.float64 and d._indices().dtype is ddpc.int64
    for back in (pickle.loads(pickle.dumps(s)), _saved_and_loaded({"g": s})["g"], _saved_and_loaded(s.coalesce())):
        assert back.is_sparse and back.shape == s.shape
        np.testing.assert_array_equal(back.to_dense().numpy(), s.to_dense().numpy())
    assert _saved_and_loaded(s.coalesce()).is_coalesced() and not _saved_and_loaded(s).is_coalesced()


def _saved_and_loaded(obj):
    f = io.BytesIO()
    ddpc.save(obj, f)
    f.seek(0)
    return ddpc.load(f)


@pytest.mark.parametrize("args,message", [
    (([[0, 1, 3]], [1.0, 2.0, 3.0], (3,)), "size is inconsistent with indices: for dim 0, size is 3 but found index 3"),
    (([[0, -1, 2]], [1.0, 2.0, 3.0], (3,)), "found negative index -1 for dim 0"),
    (([[0, 1, 2]], [1.0, 2.0], (3,)), "indices and values must have same nnz, but got nnz from indices: 3"),
    (([0, 1, 2], [1.0, 2.0, 3.0], (3,)), "indices must be sparse_dim x nnz"),
    (([[0, 1, 2]], [1.0, 2.0, 3.0], (3, 4)), "len\\(size\\) == sparse_dim \\+ dense_dim"),
    (([[0, 1, 2]], [[1.0, 2.0]] * 3, (3, 3)), "values has incorrect size, expected \\[3, 3\\], got \\[3, 2\\]"),
])
def test_bad_construction_raises_as_pytorch(args, message):
    with pytest.raises(RuntimeError, match=message):
        ddpc.sparse_coo_tensor(*args)


def test_dense_only_ops_name_themselves_and_suggest_to_dense():
    s = ddpc.sparse_coo_tensor([[1, 0, 1]], [1.0, 2.0, 3.0])
    with pytest.raises(NotImplementedError, match=r"exp: not supported on a sparse COO tensor.*\.to_dense\(\)"):
        s.exp()
    with pytest.raises(NotImplementedError, match=r"matmul: not supported on a sparse COO tensor.*\.to_dense\(\)"):
        ddpc.matmul(ddpc.ones(2, 2), s)
    with pytest.raises(NotImplementedError, match="numpy: not supported"):
        s.numpy()


# ---- embedding gradients -------------------------------------------------------------------

TABLE = np.random.default_rng(3).standard_normal((9, 4)).astype(np.float32)


@pytest.mark.parametrize("padding_idx", [None, 2])
def test_embedding_sparse_gradient_equals_the_dense_one(padding_idx):
    idx = ddpc.tensor([[1, 2, 1], [0, 8, 2]])
    g = ddpc.tensor(np.random.default_rng(4).standard_normal((2, 3, 4)).astype(np.float32))
    ws, wd = ddpc.tensor(TABLE, requires_grad=True), ddpc.tensor(TABLE, requires_grad=True)
    (F.embedding(idx, ws, padding_idx=padding_idx, sparse=True) * g).sum().backward()
    (F.embedding(idx, wd, padding_idx=padding_idx) * g).sum().backward()
    assert ws.grad.is_sparse and ws.grad.shape == (9, 4)
    looked_up = idx.numpy().reshape(-1)
    kept = looked_up if padding_idx is None else looked_up[looked_up != padding_idx]
    np.testing.assert_array_equal(ws.grad._indices().numpy(), kept[None])  # one row per lookup, uncoalesced
    np.testing.assert_allclose(ws.grad.to_dense().numpy(), wd.grad.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("mode,padding_idx,weighted", [("sum", None, False), ("sum", 2, True), ("mean", None, False),
                                                       ("mean", 2, False), ("sum", None, True)])
def test_embedding_bag_sparse_gradient_equals_the_dense_one(mode, padding_idx, weighted):
    rng = np.random.default_rng(5)
    inp, off = ddpc.tensor([1, 2, 1, 0, 8, 2, 2]), ddpc.tensor([0, 3, 3, 5])
    psw = ddpc.tensor(rng.standard_normal(7).astype(np.float32)) if weighted else None
    g = ddpc.tensor(rng.standard_normal((4, 4)).astype(np.float32))
    ws, wd = ddpc.tensor(TABLE, requires_grad=True), ddpc.tensor(TABLE, requires_grad=True)
    (F.embedding_bag(inp, ws, off, mode=mode, sparse=True, per_sample_weights=psw, padding_idx=padding_idx)
     * g).sum().backward()
    (F.embedding_bag(inp, wd, off, mode=mode, per_sample_weights=psw, padding_idx=padding_idx) * g).sum().backward()
    assert ws.grad.is_sparse
    np.testing.assert_allclose(ws.grad.to_dense().numpy(), wd.grad.numpy(), rtol=1e-6, atol=1e-6)
    bag = nn.EmbeddingBag(9, 4, mode=mode, sparse=True, padding_idx=padding_idx)
    bag(ddpc.tensor([[1, 2], [3, 3]])).sum().backward()
    assert bag.weight.grad.is_sparse


def test_gradients_accumulate_by_concatenation_and_a_dense_one_makes_them_dense():
    e = nn.Embedding(5, 2, sparse=True)
    assert e.sparse
    e(ddpc.tensor([1, 2])).sum().backward()
    e(ddpc.tensor([3])).sum().backward()
    assert e.weight.grad.is_sparse and e.weight.grad._nnz() == 3
    np.testing.assert_array_equal(e.weight.grad._indices().numpy(), [[1, 2, 3]])
    (e.weight * 2.0).sum().backward()
    assert not e.weight.grad.is_sparse
    np.testing.assert_array_equal(e.weight.grad.numpy()[:, 0], [2.0, 3.0, 3.0, 3.0, 2.0])
    dense_first = nn.Embedding(5, 2, sparse=True)
    (dense_first.weight * 1.0).sum().backward()
    dense_first(ddpc.tensor([4, 4])).sum().backward()
    np.testing.assert_array_equal(dense_first.weight.grad.numpy()[:, 0], [1.0, 1.0, 1.0, 1.0, 3.0])


def test_sparse_gradient_errors_as_pytorch():
    with pytest.raises(RuntimeError, match="scale_grad_by_freq not supported with sparse gradients"):
        nn.Embedding(5, 2, sparse=True, scale_grad_by_freq=True)(ddpc.tensor([1])).sum().backward()
    with pytest.raises(ValueError, match="max mode does not support sparse weights"):
        F.embedding_bag(ddpc.tensor([[0, 1]]), ddpc.ones(3, 2, requires_grad=True), mode="max", sparse=True)


# ---- optimizers -----------------------------------------------------------------------------

BATCHES = [np.random.default_rng(10 + k).integers(0, 9, (4, 3)) for k in range(5)]
TARGETS = [np.random.default_rng(20 + k).standard_normal((4, 3, 4)).astype(np.float32) for k in range(5)]


def trajectory(make_opt, sparse, padding_idx=None):
    e = nn.Embedding(9, 4, sparse=sparse, padding_idx=padding_idx)
    with ddpc.no_grad():
        e.weight.copy_(ddpc.tensor(TABLE))
    opt = make_opt(e.parameters())
    for b, t in zip(BATCHES, TARGETS):
        opt.zero_grad()
        ((e(ddpc.tensor(b)) - ddpc.tensor(t)) ** 2).sum().backward()
        opt.step()
    return e.weight.detach().numpy().copy()


def sparse_adam_reference(lr, beta1, beta2, eps, padding_idx):
    """SparseAdam's documented rule: only the rows a step's gradient holds
    change, their moments included; the step count is the parameter's."""
    w = TABLE.astype(np.float64).copy()
    m, v = np.zeros_like(w), np.zeros_like(w)
    for step, (b, t) in enumerate(zip(BATCHES, TARGETS), start=1):
        g = np.zeros_like(w)
        np.add.at(g, b.reshape(-1), (2 * (w[b] - t)).reshape(-1, 4))
        rows = np.unique(b)
        if padding_idx is not None:
            g[padding_idx] = 0
            rows = rows[rows != padding_idx]
        m[rows] = beta1 * m[rows] + (1 - beta1) * g[rows]
        v[rows] = beta2 * v[rows] + (1 - beta2) * g[rows] ** 2
        size = lr * np.sqrt(1 - beta2 ** step) / (1 - beta1 ** step)
        w[rows] -= size * m[rows] / (np.sqrt(v[rows]) + eps)
    return w


@pytest.mark.parametrize("padding_idx", [None, 3])
def test_sparse_adam_follows_its_update_rule(padding_idx):
    got = trajectory(lambda p: ddpc.optim.SparseAdam(p, lr=0.1, betas=(0.8, 0.9), eps=1e-6), True, padding_idx)
    np.testing.assert_allclose(got, sparse_adam_reference(0.1, 0.8, 0.9, 1e-6, padding_idx), rtol=1e-5, atol=1e-5)
    # lazy moments: unlike Adam's, rows without a gradient stay put
    dense_adam = trajectory(lambda p: ddpc.optim.Adam(p, lr=0.1, betas=(0.8, 0.9), eps=1e-6), False, padding_idx)
    assert np.abs(got - dense_adam).max() > 1e-3


@pytest.mark.parametrize("make", [
    lambda p: ddpc.optim.SGD(p, lr=0.05),
    lambda p: ddpc.optim.SGD(p, lr=0.05, maximize=True),
    lambda p: ddpc.optim.SGD(p, lr=0.02, momentum=0.9, dampening=0.2),
    lambda p: ddpc.optim.SGD(p, lr=0.02, momentum=0.9, nesterov=True),
    lambda p: ddpc.optim.Adagrad(p, lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1),
    lambda p: ddpc.optim.Adagrad(p, lr=0.1, maximize=True),
], ids=["sgd", "sgd-maximize", "sgd-momentum", "sgd-nesterov", "adagrad", "adagrad-maximize"])
def test_sgd_and_adagrad_with_sparse_gradients_equal_their_dense_trajectories(make):
    np.testing.assert_allclose(trajectory(make, True), trajectory(make, False), rtol=1e-5, atol=1e-5)


def _sparse_grad_param():
    p = nn.Parameter(ddpc.ones(3, 2))
    p.grad = ddpc.sparse_coo_tensor([[0, 2]], [[1.0, 1.0], [2.0, 2.0]], (3, 2))
    return p


@pytest.mark.parametrize("make,message", [
    (lambda p: ddpc.optim.Adam(p), "Adam does not support sparse gradients, please consider SparseAdam instead"),
    (lambda p: ddpc.optim.AdamW(p), "Adam does not support sparse gradients"),
    (lambda p: ddpc.optim.RMSprop(p), "RMSprop does not support sparse gradients"),
    (lambda p: ddpc.optim.Adamax(p), "Adamax does not support sparse gradients"),
    (lambda p: ddpc.optim.Adagrad(p, weight_decay=0.1), "weight_decay option is not compatible with sparse gradients"),
    (lambda p: ddpc.optim.SGD(p, lr=0.1, weight_decay=0.1), r"add\(sparse, dense\) is not supported"),
])
def test_optimizers_refuse_sparse_gradients_as_pytorch(make, message):
    p = _sparse_grad_param()
    with pytest.raises(RuntimeError, match=message):
        make([p]).step()
    np.testing.assert_array_equal(p.detach().numpy(), np.ones((3, 2)))


def test_sparse_adam_refuses_dense_gradients_and_sparse_parameters():
    p = nn.Parameter(ddpc.ones(3, 2))
    p.grad = ddpc.ones(3, 2)
    with pytest.raises(RuntimeError, match="SparseAdam does not support dense gradients, please consider Adam"):
        ddpc.optim.SparseAdam([p]).step()
    with pytest.raises(ValueError, match="Invalid learning rate"):
        ddpc.optim.SparseAdam([p], lr=0.0)


def test_zero_grad_on_sparse_gradients():
    p = _sparse_grad_param()
    opt = ddpc.optim.SGD([p], lr=0.1)
    opt.zero_grad(set_to_none=False)
    assert p.grad.is_sparse and p.grad._nnz() == 0
    opt.zero_grad()
    assert p.grad is None


def test_clip_grad_norm_over_sparse_gradients():
    p = nn.Parameter(ddpc.ones(3, 2))
    p.grad = ddpc.sparse_coo_tensor([[0, 2, 0]], [[1.0, 1.0], [2.0, 2.0], [2.0, 2.0]], (3, 2))
    q = nn.Parameter(ddpc.ones(2))
    q.grad = ddpc.tensor([3.0, 0.0])
    want = np.sqrt(9 + 9 + 4 + 4 + 9)  # the coalesced values: row 0 is 3, 3
    total = nn.utils.clip_grad_norm_([p, q], max_norm=1.0)
    np.testing.assert_allclose(total.item(), want, rtol=1e-6)
    np.testing.assert_allclose(p.grad.to_dense().numpy(), [[3, 3], [0, 0], [2, 2]] / (want + 1e-6), rtol=1e-5)
    np.testing.assert_allclose(q.grad.numpy(), [3 / (want + 1e-6), 0], rtol=1e-5)

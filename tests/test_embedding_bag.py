"""EmbeddingBag and F.embedding_bag: sums, means and maxima of bags against a
numpy reference written bag by bag from PyTorch's documented rules
(offsets, include_last_offset, 2-d input, per_sample_weights, padding_idx,
empty bags), gradients of the table and the per-sample weights by central
differences, the module, the errors and (marked gpu) CUDA against the host."""

import numpy as np
import pytest

import ddpc
import ddpc.nn.functional as F
from ddpc import _C, nn
from numeric import numeric_grad


def ref_embedding_bag(weight, indices, bounds, mode, weights=None, padding_idx=None):
    """(B, D): bag b takes indices[bounds[b]:bounds[b + 1]] without padding_idx."""
    out = np.zeros((len(bounds) - 1, weight.shape[1]))
    for b in range(len(bounds) - 1):
        keep = [i for i in range(bounds[b], bounds[b + 1]) if indices[i] != padding_idx]
        if not keep:
            continue
        rows = weight[indices[keep]]
        if mode == "sum":
            out[b] = (rows * (weights[keep, None] if weights is not None else 1)).sum(0)
        else:
            out[b] = rows.mean(0) if mode == "mean" else rows.max(0)
    return out


INDICES = np.array([1, 2, 4, 5, 4, 3, 2, 9, 0, 7, 7])

# offsets, include_last_offset, padding_idx
CASES = [
    ([0, 4, 4, 8], False, None),  # an empty bag
    ([0, 3, 7, 11], True, None),
    ([0, 2, 9], True, 2),  # the last bag runs to the end of the input whatever the last offset says, as in PyTorch
    ([0, 5], False, 4),
    ([0, 0, 0], False, -1),  # everything in the last bag; padding_idx counted from the end
]


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("offsets,last,padding_idx", CASES)
def test_bags_match_the_reference_forward_and_backward(mode, offsets, last, padding_idx):
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((10, 4))
    bounds = (offsets[:-1] if last else offsets) + [len(INDICES)]
    pad = None if padding_idx is None else padding_idx % 10
    w = ddpc.tensor(weight, requires_grad=True)
    out = F.embedding_bag(ddpc.tensor(INDICES), w, ddpc.tensor(np.array(offsets)), mode=mode,
                          include_last_offset=last, padding_idx=padding_idx)
    want = ref_embedding_bag(weight, INDICES, bounds, mode, padding_idx=pad)
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-12, atol=1e-12)
    g = rng.standard_normal(want.shape)
    out.backward(ddpc.tensor(g))
    num = numeric_grad(lambda v: float((ref_embedding_bag(v, INDICES, bounds, mode, padding_idx=pad) * g).sum()),
                       weight)
    np.testing.assert_allclose(w.grad.numpy(), num, rtol=1e-6, atol=1e-7)
    if pad is not None:
        assert not w.grad.numpy()[pad].any()


@pytest.mark.parametrize("padding_idx", [None, 4])
def test_per_sample_weights_scale_the_sum_and_get_their_gradient(padding_idx):
    rng = np.random.default_rng(1)
    weight, scale = rng.standard_normal((10, 3)), rng.standard_normal(len(INDICES))
    offsets = [0, 3, 3, 6]
    bounds = offsets + [len(INDICES)]
    w, s = ddpc.tensor(weight, requires_grad=True), ddpc.tensor(scale, requires_grad=True)
    out = F.embedding_bag(ddpc.tensor(INDICES), w, ddpc.tensor(np.array(offsets)), mode="sum",
                          per_sample_weights=s, padding_idx=padding_idx)
    want = ref_embedding_bag(weight, INDICES, bounds, "sum", scale, padding_idx)
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-12, atol=1e-12)
    g = rng.standard_normal(want.shape)
    out.backward(ddpc.tensor(g))
    def loss(weight_v, scale_v):
        return float((ref_embedding_bag(weight_v, INDICES, bounds, "sum", scale_v, padding_idx) * g).sum())
    np.testing.assert_allclose(w.grad.numpy(), numeric_grad(lambda v: loss(v, scale), weight), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(s.grad.numpy(), numeric_grad(lambda v: loss(weight, v), scale), rtol=1e-6, atol=1e-7)


def test_a_2d_input_is_bags_of_its_rows_and_the_module_follows_pytorch():
    ddpc.manual_seed(3)
    bag = nn.EmbeddingBag(12, 5, mode="max", padding_idx=3)
    assert repr(bag) == "EmbeddingBag(12, 5, mode='max', padding_idx=3)"
    assert repr(nn.EmbeddingBag(12, 5)) == "EmbeddingBag(12, 5, mode='mean')"
    w = bag.weight.detach().numpy()
    assert not w[3].any() and abs(w[np.arange(12) != 3].std() - 1) < 0.3
    idx = np.array([[1, 3, 5], [3, 3, 3], [11, 0, 0]])
    out = bag(ddpc.tensor(idx))
    np.testing.assert_array_equal(out.detach().numpy(), ref_embedding_bag(w, idx.reshape(-1), [0, 3, 6, 9], "max",
                                                                          padding_idx=3))
    assert F.embedding_bag(ddpc.tensor(idx.astype(np.int32)), bag.weight, mode="sum").shape == (3, 5)
    # A row is a bag whatever include_last_offset says (PyTorch ignores it for a 2-d input).
    for mode in ("sum", "mean", "max"):
        last = nn.EmbeddingBag(12, 5, mode=mode, include_last_offset=True, _weight=bag.weight.detach().clone())
        np.testing.assert_array_equal(last(ddpc.tensor(idx)).detach().numpy(),
                                      ref_embedding_bag(w, idx.reshape(-1), [0, 3, 6, 9], mode))
    empty = F.embedding_bag(ddpc.tensor(idx.reshape(-1)), bag.weight, ddpc.tensor(np.array([0])),
                            include_last_offset=True)
    assert empty.shape == (0, 5)  # the last offset alone: no bags, as in PyTorch
    fixed = nn.EmbeddingBag(4, 2, _weight=ddpc.ones(4, 2), mode="sum")
    np.testing.assert_array_equal(fixed(ddpc.tensor(np.array([0, 1, 2])), ddpc.tensor(np.array([0, 1]))).numpy(),
                                  [[1, 1], [2, 2]])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_lower_precisions_compute_in_float32(dtype):
    weight = np.random.default_rng(4).standard_normal((10, 3)).astype(np.float32)
    w = ddpc.tensor(weight).to(dtype=dtype).requires_grad_()
    out = F.embedding_bag(ddpc.tensor(INDICES), w, ddpc.tensor(np.array([0, 4])))
    assert out.dtype.name == dtype
    out.float().sum().backward()
    assert w.grad.dtype.name == dtype
    want = ref_embedding_bag(np.asarray(w.detach().float()).astype(np.float64), INDICES, [0, 4, len(INDICES)], "mean")
    np.testing.assert_allclose(np.asarray(out.detach().float()), want, rtol=2e-2, atol=2e-2)


W = ddpc.zeros(10, 3)
IDX = ddpc.tensor(INDICES)


@pytest.mark.parametrize("two_d", [False, True])
def test_max_norm_renormalises_the_rows_looked_up_and_scale_grad_by_freq_divides_by_counts(two_d):
    rng = np.random.default_rng(9)
    weight = rng.standard_normal((10, 4)) * 2
    indices = np.array([1, 2, 1, 1, 7, 2, 0, 7, 3, 1])
    bounds = [0, 3, 5, 5, 10] if not two_d else [0, 5, 10]
    idx = ddpc.tensor(indices.reshape(2, 5) if two_d else indices)
    off = None if two_d else ddpc.tensor(np.array(bounds[:-1]))
    # max_norm: each row looked up scaled to max_norm / (norm + 1e-7) where its norm is larger, in place.
    norms = np.linalg.norm(weight, axis=1, keepdims=True)
    looked_up = np.isin(np.arange(10), indices)[:, None]
    renormed = np.where(looked_up & (norms > 1.5), weight * (1.5 / (norms + 1e-7)), weight)
    w = ddpc.tensor(weight, requires_grad=True)
    out = F.embedding_bag(idx, w, off, max_norm=1.5, mode="sum")
    np.testing.assert_allclose(w.detach().numpy(), renormed, rtol=1e-12)
    np.testing.assert_allclose(out.detach().numpy(), ref_embedding_bag(renormed, indices, bounds, "sum"), rtol=1e-12)
    # scale_grad_by_freq: the usual gradient of each row over how often the input holds it.
    counts = np.bincount(indices, minlength=10)[:, None]
    for mode in ("sum", "mean"):
        grads = []
        for scaled in (False, True):
            w = ddpc.tensor(weight, requires_grad=True)
            out = F.embedding_bag(idx, w, off, mode=mode, scale_grad_by_freq=scaled, padding_idx=7)
            (out * ddpc.tensor(np.arange(out.numel(), dtype=np.float64).reshape(out.shape))).sum().backward()
            grads.append(w.grad.numpy())
        np.testing.assert_allclose(grads[1], grads[0] / np.maximum(counts, 1), rtol=1e-12)
        assert not grads[1][7].any()  # padding_idx's row takes no gradient
    bag = nn.EmbeddingBag(10, 4, max_norm=1.0, norm_type=1.0, scale_grad_by_freq=True, mode="sum")
    assert repr(bag) == "EmbeddingBag(10, 4, max_norm=1.0, norm_type=1.0, scale_grad_by_freq=True, mode='sum')"
    bag(idx, off).sum().backward()
    assert np.abs(bag.weight.detach().numpy()[indices]).sum(1).max() <= 1.0 + 1e-6
    np.testing.assert_allclose(bag.weight.grad.numpy()[indices], 1.0, rtol=1e-6)  # count times 1 / count


@pytest.mark.parametrize("fn,exc,match", [
    (lambda: F.embedding_bag(IDX, W, ddpc.tensor(np.array([1, 4]))), ValueError, "offsets.0. has to be 0"),
    (lambda: F.embedding_bag(IDX, W, ddpc.tensor(np.array([0, 5, 4]))), ValueError, "non-decreasing"),
    (lambda: F.embedding_bag(IDX, W, ddpc.tensor(np.array([0, 12])), include_last_offset=True), ValueError,
     "can not be greater than input's length 11"),
    (lambda: F.embedding_bag(IDX + 5, W, ddpc.tensor(np.array([0, 4]))), ValueError, "out of range for 10 rows"),
    (lambda: F.embedding_bag(IDX.reshape(1, 11), W, ddpc.tensor(np.array([0]))), ValueError,
     "offsets has to be None"),
    (lambda: F.embedding_bag(IDX, W), ValueError, "offsets has to be a 1D Tensor but got None"),
    (lambda: F.embedding_bag(IDX, W, ddpc.tensor(np.array([[0, 4]]))), ValueError, "offsets has to be a 1D Tensor"),
    (lambda: F.embedding_bag(IDX.reshape(1, 1, 11), W), ValueError, "1D or 2D Tensor, but got Tensor of dimension 3"),
    (lambda: F.embedding_bag(IDX, W, ddpc.tensor(np.array([0])), mode="median"), ValueError, "one of sum, mean"),
    (lambda: F.embedding_bag(IDX, W, ddpc.tensor(np.array([0])), per_sample_weights=ddpc.ones(11)),
     NotImplementedError, "only supported for mode='sum'"),
    (lambda: F.embedding_bag(IDX, W, ddpc.tensor(np.array([0])), mode="sum", per_sample_weights=ddpc.ones(10)),
     ValueError, "same shape as the input"),
    (lambda: F.embedding_bag(IDX, W, ddpc.tensor(np.array([0])), padding_idx=10), ValueError,
     "-10 through 9, but got 10"),
    (lambda: F.embedding_bag(IDX.float(), W, ddpc.tensor(np.array([0]))), TypeError, "int64 or int32"),
    (lambda: F.embedding_bag(IDX, W, ddpc.tensor(np.array([0])), mode="max", scale_grad_by_freq=True), ValueError,
     "max mode does not support scaling the gradient by the frequency"),
    (lambda: F.embedding_bag(IDX + 5, W.detach(), ddpc.tensor(np.array([0])), max_norm=1.0), ValueError,
     "out of range for 10 rows"),
    (lambda: nn.EmbeddingBag(10, 3, mode="median"), ValueError, "one of sum, mean"),
    (lambda: nn.EmbeddingBag(10, 3, mode="max", sparse=True), ValueError, "max mode does not support sparse weights"),
])
def test_bad_arguments_raise_clear_errors(fn, exc, match):
    with pytest.raises(exc, match=match):
        fn()


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("offsets,last,padding_idx", CASES)
def test_cuda_matches_the_host(mode, offsets, last, padding_idx):
    rng = np.random.default_rng(5)
    weight, scale = rng.standard_normal((10, 70)), rng.standard_normal(len(INDICES))
    for dtype, tol in ((np.float32, 1e-5), (np.float64, 1e-12)):
        results = []
        for device in ("cpu", "cuda"):
            w = ddpc.tensor(weight.astype(dtype), device=device, requires_grad=True)
            s = ddpc.tensor(scale.astype(dtype), device=device, requires_grad=True) if mode == "sum" else None
            out = F.embedding_bag(ddpc.tensor(INDICES, device=device), w, ddpc.tensor(np.array(offsets), device=device),
                                  mode=mode, per_sample_weights=s, include_last_offset=last, padding_idx=padding_idx)
            out.backward(ddpc.tensor(np.ones(out.shape, dtype=dtype) * np.arange(out.shape[1], dtype=dtype),
                                     device=device))
            grads = [w.grad.cpu().numpy()] + ([s.grad.cpu().numpy()] if s is not None else [])
            results.append([out.detach().cpu().numpy()] + grads)
        for a, b in zip(*results):
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


@pytest.mark.gpu
def test_cuda_max_norm_and_scale_grad_by_freq_match_the_host():
    weight = np.random.default_rng(6).standard_normal((10, 70)) * 3
    results = []
    for device in ("cpu", "cuda"):
        w = ddpc.tensor(weight, device=device, requires_grad=True)
        out = F.embedding_bag(ddpc.tensor(INDICES, device=device), w, ddpc.tensor(np.array([0, 3]), device=device),
                              max_norm=2.0, scale_grad_by_freq=True, mode="mean")
        out.backward(ddpc.ones(out.shape, dtype=ddpc.float64, device=device))
        results.append([out.detach().cpu().numpy(), w.detach().cpu().numpy(), w.grad.cpu().numpy()])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.gpu
def test_cuda_weights_gradient_skips_entries_after_the_last_bag():
    # The C op takes a last offset short of the input (its entries belong to no bag, gradient 0).
    rng = np.random.default_rng(6)
    weight, g = rng.standard_normal((10, 5)), rng.standard_normal((2, 5))
    offsets = np.array([0, 3, 7])
    results = []
    for device in ("cpu", "cuda"):
        gs = ddpc.empty(len(INDICES), dtype=ddpc.float64, device=device)
        _C.embedding_bag_weights_backward(gs._buf, ddpc.tensor(g, device=device)._buf,
                                          ddpc.tensor(weight, device=device)._buf,
                                          ddpc.tensor(INDICES, device=device)._buf,
                                          ddpc.tensor(offsets, device=device)._buf, -1)
        results.append(gs.cpu().numpy())
    np.testing.assert_allclose(results[1], results[0], rtol=1e-12)
    assert not results[0][7:].any()

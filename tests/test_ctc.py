"""F.ctc_loss / nn.CTCLoss against a brute-force sum over every alignment
(small T and C), numeric gradients, the reductions and target layouts, and
its errors; on a GPU, the CUDA kernels against the host loops."""

import itertools

import numpy as np
import pytest
from numeric import numeric_grad

import ddpc
from ddpc import nn

F = nn.functional


def log_softmax(x):
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def brute_nll(lp, target, blank=0):
    """-log of the summed probability of every path over lp's (T, C) steps that collapses to target."""
    T, C = lp.shape
    total = 0.0
    for path in itertools.product(range(C), repeat=T):
        collapsed = [c for i, c in enumerate(path) if c != blank and (i == 0 or c != path[i - 1])]
        if collapsed == list(target):
            total += np.exp(sum(lp[t, c] for t, c in enumerate(path)))
    return -np.log(total) if total > 0 else np.inf


CASES = [  # (T, C, padded targets, target lengths, input lengths, blank)
    (5, 4, [[1, 2], [3, 3]], [2, 2], [5, 4], 0),
    (4, 3, [[1, 1], [2, 1]], [2, 1], [4, 3], 0),   # a repeated label needs a blank between
    (5, 4, [[0, 2, 1], [1, 0, 0]], [3, 1], [5, 5], 3),
    (3, 3, [[1, 2], [2, 2]], [2, 2], [3, 3], 0),   # [2, 2] in 3 steps: only 2, blank, 2
]


@pytest.mark.parametrize("T,C,targets,tlen,ilen,blank", CASES)
def test_loss_and_gradient_match_the_sum_over_alignments(T, C, targets, tlen, ilen, blank):
    rng = np.random.default_rng(T * 10 + C)
    N = len(targets)
    x = rng.standard_normal((T, N, C))
    logits = ddpc.tensor(x, requires_grad=True)
    nll = F.ctc_loss(F.log_softmax(logits, 2), ddpc.tensor(targets), ilen, tlen, blank=blank, reduction="none")
    want = [brute_nll(log_softmax(x[:ilen[n], n]), targets[n][:tlen[n]], blank) for n in range(N)]
    np.testing.assert_allclose(nll.detach().numpy(), want, rtol=1e-10)
    weights = rng.standard_normal(N)
    (nll * ddpc.tensor(weights)).sum().backward()

    def f(v):
        return sum(w * brute_nll(log_softmax(v[:ilen[n], n]), targets[n][:tlen[n]], blank)
                   for n, w in enumerate(weights))

    np.testing.assert_allclose(logits.grad.numpy(), numeric_grad(f, x), rtol=1e-5, atol=1e-7)


def test_reductions_layouts_and_one_sample():
    rng = np.random.default_rng(1)
    lp = F.log_softmax(ddpc.tensor(rng.standard_normal((6, 3, 5))), 2)
    padded = ddpc.tensor([[1, 2, 3], [4, 4, 0], [2, 0, 0]])
    tlen = [3, 2, 1]
    each = F.ctc_loss(lp, padded, [6, 6, 4], tlen, reduction="none")
    concatenated = ddpc.tensor([1, 2, 3, 4, 4, 2])
    np.testing.assert_allclose(F.ctc_loss(lp, concatenated, [6, 6, 4], ddpc.tensor(tlen), reduction="none").numpy(),
                               each.numpy(), rtol=1e-12)
    np.testing.assert_allclose(F.ctc_loss(lp, padded, [6, 6, 4], tlen).item(),
                               np.mean(each.numpy() / np.array(tlen)), rtol=1e-12)
    np.testing.assert_allclose(nn.CTCLoss(reduction="sum")(lp, padded, (6, 6, 4), tlen).item(), each.numpy().sum(),
                               rtol=1e-12)
    one = F.ctc_loss(lp[:, 1], ddpc.tensor([4, 4]), 6, 2, reduction="none")
    assert one.shape == () and one.item() == pytest.approx(each.numpy()[1], rel=1e-12)


def test_impossible_alignments_and_zero_infinity():
    lp = F.log_softmax(ddpc.randn(3, 2, 4, dtype=ddpc.float64, requires_grad=True), 2)
    targets = ddpc.tensor([[1, 2, 3, 1], [1, 0, 0, 0]])
    nll = F.ctc_loss(lp, targets, [3, 0], [4, 1], reduction="none")
    assert np.isinf(nll.detach().numpy()).all()  # 4 labels in 3 steps; 1 label in none
    logits = ddpc.randn(3, 2, 4, dtype=ddpc.float64, requires_grad=True)
    loss = F.ctc_loss(F.log_softmax(logits, 2), ddpc.tensor([[1, 2, 3, 1], [2, 0, 0, 0]]), [3, 3], [4, 1],
                      reduction="sum", zero_infinity=True)
    loss.backward()
    assert np.isfinite(loss.item())
    assert np.all(logits.grad.numpy()[:, 0] == 0) and np.any(logits.grad.numpy()[:, 1] != 0)
    empty = F.ctc_loss(F.log_softmax(ddpc.randn(4, 1, 3, dtype=ddpc.float64), 2), ddpc.zeros(1, 0, dtype=ddpc.int64),
                       [0], [0], reduction="none")
    assert empty.item() == 0  # nothing to emit in no steps


def test_float32_and_16_bit_log_probs():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((7, 2, 5))
    targets, ilen, tlen = ddpc.tensor([[1, 3, 2], [4, 1, 0]]), [7, 6], [3, 2]
    want = F.ctc_loss(F.log_softmax(ddpc.tensor(x), 2), targets, ilen, tlen, reduction="none").numpy()
    for dt, tol in ((ddpc.float32, 1e-5), (ddpc.bfloat16, 2e-2)):
        got = F.ctc_loss(F.log_softmax(ddpc.tensor(x, dtype=dt), 2), targets, ilen, tlen, reduction="none")
        assert got.dtype is dt
        np.testing.assert_allclose(got.float().numpy(), want, rtol=tol)


def test_bad_arguments_raise_clearly():
    lp = F.log_softmax(ddpc.randn(4, 2, 3), 2)
    targets = ddpc.tensor([[1, 2], [2, 1]])
    with pytest.raises(ValueError, match="not a class"):
        F.ctc_loss(lp, ddpc.tensor([[1, 5], [2, 1]]), [4, 4], [2, 2])
    with pytest.raises(ValueError, match="other than the blank"):
        F.ctc_loss(lp, ddpc.tensor([[1, 0], [2, 1]]), [4, 4], [2, 2])
    with pytest.raises(ValueError, match="input length 5"):
        F.ctc_loss(lp, targets, [5, 4], [2, 2])
    with pytest.raises(ValueError, match="one per sample"):
        F.ctc_loss(lp, targets, [4], [2, 2])
    with pytest.raises(ValueError, match="does not fit"):
        F.ctc_loss(lp, targets, [4, 4], [3, 2])
    with pytest.raises(TypeError, match="integers"):
        F.ctc_loss(lp, targets.float(), [4, 4], [2, 2])
    with pytest.raises(ValueError, match="reduction"):
        F.ctc_loss(lp, targets, [4, 4], [2, 2], reduction="avg")


@pytest.mark.gpu
def test_cuda_matches_the_host():
    if not ddpc.cuda.is_available():
        pytest.skip("no CUDA device")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((30, 4, 12))
    ilen, tlen = [30, 25, 30, 12], [10, 7, 1, 6]
    labels = rng.integers(1, 12, (4, 10))
    labels[np.arange(10) >= np.array(tlen)[:, None]] = -1  # padding outside the classes, which neither device reads
    targets = ddpc.tensor(labels)
    results = []
    for device in ("cpu", "cuda"):
        for dt in (ddpc.float64, ddpc.float32):
            logits = ddpc.tensor(x, dtype=dt, device=device, requires_grad=True)
            loss = F.ctc_loss(F.log_softmax(logits, 2), targets.to(device=device), ilen, tlen)
            loss.backward()
            results.append((loss.item(), logits.grad.cpu().double().numpy()))
    for (lh, gh), (ld, gd) in zip(results[:2], results[2:]):
        assert ld == pytest.approx(lh, rel=1e-5)
        np.testing.assert_allclose(gd, gh, rtol=1e-4, atol=1e-6)


@pytest.mark.gpu
def test_cuda_refuses_the_labels_the_host_refuses():
    lp = F.log_softmax(ddpc.randn(4, 2, 3), 2).cuda()
    with pytest.raises(ValueError, match="target label 5 is not a class"):
        F.ctc_loss(lp, ddpc.tensor([[1, 5], [2, 1]]).cuda(), [4, 4], [2, 2])
    with pytest.raises(ValueError, match="target label 0 is not a class .* other than the blank 0"):
        F.ctc_loss(lp, ddpc.tensor([[1, 0], [2, 1]]).cuda(), [4, 4], [2, 2])
    # the blank as padding, past the target lengths, is not a label
    F.ctc_loss(lp, ddpc.tensor([[1, 0], [2, 1]]).cuda(), [4, 4], [1, 2])

"""AdaptiveLogSoftmaxWithLoss: its log probabilities are a distribution over
all classes, forward gives the target's entry of them and their negated mean,
predict their argmax; only rows with targets in a cluster go through its
tail; the input gradient against a numeric one; argument checks."""

import numpy as np
import pytest

import ddpc
from ddpc import nn
from numeric import numeric_grad


def make(**kw):
    ddpc.manual_seed(0)
    return nn.AdaptiveLogSoftmaxWithLoss(8, 12, [3, 7], dtype=ddpc.float64, **kw)


def test_forward_log_prob_and_predict_agree():
    m = make(head_bias=True)
    x = np.random.default_rng(0).standard_normal((10, 8)) * 4
    target = np.array([0, 2, 3, 6, 7, 11, 5, 1, 9, 4])
    log_prob = m.log_prob(ddpc.tensor(x)).detach().numpy()
    assert log_prob.shape == (10, 12)
    np.testing.assert_allclose(np.exp(log_prob).sum(1), np.ones(10), rtol=1e-13)
    out = m(ddpc.tensor(x), ddpc.tensor(target))
    np.testing.assert_allclose(out.output.detach().numpy(), log_prob[np.arange(10), target], rtol=1e-13)
    np.testing.assert_allclose(float(out.loss), -log_prob[np.arange(10), target].mean(), rtol=1e-13)
    predicted = m.predict(ddpc.tensor(x)).numpy()
    np.testing.assert_array_equal(predicted, log_prob.argmax(1))
    assert (predicted >= 3).any() and (predicted < 3).any()
    single = m(ddpc.tensor(x[4]), ddpc.tensor(7))
    assert single.output.shape == () and np.isclose(float(single.output), log_prob[4, 7])


def test_only_rows_with_targets_in_a_cluster_run_through_its_tail():
    m = make()
    rows_seen = []
    for tail in m.tail:
        tail.register_forward_hook(lambda mod, args, out: rows_seen.append(args[0].shape[0]))
    m(ddpc.randn(6, 8, dtype=ddpc.float64), ddpc.tensor([0, 4, 5, 1, 2, 8]))
    assert rows_seen == [2, 1]


def test_input_gradient_matches_numeric():
    m = make()
    x = np.random.default_rng(1).standard_normal((5, 8))
    target = ddpc.tensor([1, 4, 10, 0, 7])
    xt = ddpc.tensor(x, requires_grad=True)
    m(xt, target).loss.backward()
    num = numeric_grad(lambda a: float(m(ddpc.tensor(a), target).loss), x)
    np.testing.assert_allclose(xt.grad.numpy(), num, rtol=1e-6, atol=1e-9)
    assert all(p.grad is not None for p in m.parameters())


def test_argument_checks():
    with pytest.raises(ValueError, match="length larger than 0"):
        nn.AdaptiveLogSoftmaxWithLoss(8, 12, [])
    for cutoffs in ([7, 3], [0, 3], [3, 12], [3, 3], [2.5]):
        with pytest.raises(ValueError, match="unique, positive integers sorted"):
            nn.AdaptiveLogSoftmaxWithLoss(8, 12, cutoffs)
    m = make()
    with pytest.raises(ValueError, match="same size in the batch dimension"):
        m(ddpc.randn(3, 8, dtype=ddpc.float64), ddpc.tensor([0, 1]))
    with pytest.raises(ValueError, match="0D target tensor expects 1D input"):
        m(ddpc.randn(3, 8, dtype=ddpc.float64), ddpc.tensor(1))
    with pytest.raises(ValueError, match="multi-target not supported"):
        m(ddpc.randn(3, 8, dtype=ddpc.float64), ddpc.tensor([[1]]))
    with pytest.raises(ValueError, match="Target values should be in \\[0, 11\\], but values in range \\[0, 12\\]"):
        m(ddpc.randn(2, 8, dtype=ddpc.float64), ddpc.tensor([0, 12]))

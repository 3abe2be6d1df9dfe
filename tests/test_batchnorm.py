"""BatchNorm1d/2d/3d against closed-form statistics, and SyncBatchNorm under
DDP against one process normalising the combined batch (ranks are real
processes started by ddpc.spawn on the cpu backend)."""

import numpy as np
import pytest

import ddpc
from ddpc import nn


def reference(x, w, b, eps=1e-5):
    axes = (0,) + tuple(range(2, x.ndim))
    mean = x.mean(axis=axes, keepdims=True, dtype=np.float64)
    var = x.var(axis=axes, keepdims=True, dtype=np.float64)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return (x - mean) / np.sqrt(var + eps) * w.reshape(shape) + b.reshape(shape), mean.reshape(-1), var.reshape(-1)


@pytest.mark.parametrize("cls,shape", [(nn.BatchNorm1d, (16, 4)), (nn.BatchNorm1d, (6, 4, 5)),
                                       (nn.BatchNorm2d, (3, 4, 5, 2)), (nn.BatchNorm3d, (2, 4, 3, 2, 2))])
def test_batch_norm_normalises_each_channel_and_tracks_statistics(cls, shape):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 4 + 100).astype(np.float32)  # a large mean: variance about it
    m = cls(4, momentum=0.25)
    with ddpc.no_grad():
        m.weight.copy_(ddpc.tensor([1.0, 2.0, 0.5, -1.0]))
        m.bias.copy_(ddpc.tensor([0.0, 1.0, -1.0, 3.0]))
    y = m(ddpc.tensor(x))
    want, mean, var = reference(x, m.weight.detach().numpy(), m.bias.detach().numpy())
    np.testing.assert_allclose(y.detach().numpy(), want, atol=2e-4)
    count = x.size // 4
    np.testing.assert_allclose(m.running_mean.numpy(), 0.25 * mean, rtol=1e-5)
    np.testing.assert_allclose(m.running_var.numpy(), 0.75 + 0.25 * var * count / (count - 1), rtol=1e-5)
    assert int(m.num_batches_tracked.item()) == 1
    m.eval()
    shape1 = (1, -1) + (1,) * (x.ndim - 2)
    rm, rv = m.running_mean.numpy().reshape(shape1), m.running_var.numpy().reshape(shape1)
    np.testing.assert_allclose(m(ddpc.tensor(x)).detach().numpy(),
                               (x - rm) / np.sqrt(rv + 1e-5) * m.weight.detach().numpy().reshape(shape1)
                               + m.bias.detach().numpy().reshape(shape1), rtol=1e-4, atol=1e-3)


def test_batch_norm_gradient_matches_finite_differences():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 3, 2)).astype(np.float64)
    g = rng.standard_normal((5, 3, 2))
    m = nn.BatchNorm1d(3, dtype=ddpc.float64)
    xt = ddpc.tensor(x, requires_grad=True)
    (m(xt) * ddpc.tensor(g)).sum().backward()

    def f(a):
        return float((reference(a, np.ones(3), np.zeros(3))[0] * g).sum())

    num = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = 1e-6
        num[i] = (f(x + d) - f(x - d)) / 2e-6
    np.testing.assert_allclose(xt.grad.numpy(), num, atol=1e-6)
    np.testing.assert_allclose(m.bias.grad.numpy(), g.sum(axis=(0, 2)), atol=1e-9)


def test_batch_norm_errors_and_cumulative_average():
    m = nn.BatchNorm1d(3)
    with pytest.raises(ValueError, match="expected 3 channels"):
        m(ddpc.zeros(4, 2))
    with pytest.raises(ValueError, match="2 or 3-d input"):
        m(ddpc.zeros(4, 3, 2, 2))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        m(ddpc.zeros(1, 3))
    c = nn.BatchNorm1d(2, momentum=None)
    batches = [np.array([[0.0, 1.0], [2.0, 5.0]], np.float32), np.array([[4.0, 1.0], [6.0, 3.0]], np.float32)]
    for b in batches:
        c(ddpc.tensor(b))
    np.testing.assert_allclose(c.running_mean.numpy(), np.mean([b.mean(0) for b in batches], axis=0))
    assert set(c.state_dict()) == {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"}


@pytest.mark.parametrize("cls,shape", [(nn.BatchNorm1d, (0, 3)), (nn.BatchNorm1d, (4, 3, 0)),
                                       (nn.BatchNorm2d, (0, 3, 2, 2)), (nn.BatchNorm3d, (0, 3, 1, 2, 2))])
def test_batch_norm_on_an_empty_batch_leaves_the_statistics(cls, shape):
    m = cls(3)
    with ddpc.no_grad():
        m.running_mean.fill_(0.5)
        m.running_var.fill_(2.0)
    x = ddpc.zeros(*shape, requires_grad=True)
    out = m(x)
    out.sum().backward()
    assert out.shape == shape and x.grad.shape == shape
    assert m.weight.grad.tolist() == [0.0] * 3 and m.bias.grad.tolist() == [0.0] * 3
    assert m.running_mean.tolist() == [0.5] * 3 and m.running_var.tolist() == [2.0] * 3
    assert int(m.num_batches_tracked.item()) == 1  # counted all the same, as PyTorch
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        cls(3)(ddpc.zeros(*((1, 3) + (1,) * (len(shape) - 2))))


def _bn_model(seed=0):
    ddpc.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))


def _bn_data(n):
    rng = np.random.default_rng(2)
    return (rng.standard_normal((n, 6)) * 3 + 1).astype(np.float32), rng.integers(0, 3, n).astype(np.int64)


def _train(m, batches, opt):
    for xb, yb in batches:
        opt.zero_grad()
        nn.CrossEntropyLoss()(m(ddpc.tensor(xb)), ddpc.tensor(yb)).backward()
        opt.step()


def sync_bn_worker(rank, world, batch, steps):
    import ddpc.distributed as dist

    dist.init_process_group("cpu")
    X, y = _bn_data(world * batch * steps)
    model = nn.SyncBatchNorm.convert_sync_batchnorm(_bn_model())
    assert isinstance(model[1], nn.SyncBatchNorm)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = ddpc.optim.SGD(ddp.parameters(), lr=0.1)
    big = world * batch
    _train(ddp, [(X[s * big + rank * batch:s * big + (rank + 1) * batch],
                  y[s * big + rank * batch:s * big + (rank + 1) * batch]) for s in range(steps)], opt)
    out = {k: v.numpy().copy() for k, v in ddp.module.state_dict().items()}
    dist.destroy_process_group()
    return out


def test_sync_batch_norm_under_ddp_equals_one_process_on_the_combined_batch():
    world, batch, steps = 2, 6, 3
    X, y = _bn_data(world * batch * steps)
    ref_model = _bn_model()
    opt = ddpc.optim.SGD(ref_model.parameters(), lr=0.1)
    big = world * batch
    _train(ref_model, [(X[s * big:(s + 1) * big], y[s * big:(s + 1) * big]) for s in range(steps)], opt)
    ref = {k: v.numpy() for k, v in ref_model.state_dict().items()}
    for result in ddpc.spawn(sync_bn_worker, args=(world, batch, steps), nprocs=world):
        assert result.keys() == ref.keys()
        for k in ref:
            np.testing.assert_allclose(result[k], ref[k], atol=2e-5, rtol=0, err_msg=k)

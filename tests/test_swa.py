"""ddpc.optim.swa_utils: AveragedModel (SWA and EMA), SWALR and update_bn
against closed-form averages and learning rates."""

import math

import numpy as np
import pytest

import ddpc
from ddpc import nn, optim
from ddpc.optim.swa_utils import (SWALR, AveragedModel, get_ema_avg_fn, get_ema_multi_avg_fn, get_swa_avg_fn,
                                  update_bn)


def model_at(seed):
    ddpc.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)).double()


def flat(model):
    return np.concatenate([p.detach().numpy().ravel() for p in model.parameters()])


def test_swa_is_the_mean_of_every_update():
    models = [model_at(s) for s in range(4)]
    avg = AveragedModel(models[0])
    for m in models:
        avg.update_parameters(m)
    assert int(avg.n_averaged) == 4
    np.testing.assert_allclose(flat(avg), np.mean([flat(m) for m in models], axis=0), rtol=1e-12)
    # Buffers are not averaged without use_buffers: they follow the last model.
    np.testing.assert_array_equal(avg.module[1].running_mean.numpy(), models[-1][1].running_mean.numpy())
    assert flat(avg.module).tolist() != flat(models[0]).tolist()  # a copy, not the model itself


@pytest.mark.parametrize("multi", [True, False], ids=["multi_avg_fn", "avg_fn"])
def test_ema_weights_each_update_by_decay(multi):
    models = [model_at(s) for s in range(3)]
    kw = dict(multi_avg_fn=get_ema_multi_avg_fn(0.9)) if multi else dict(avg_fn=get_ema_avg_fn(0.9))
    avg = AveragedModel(models[0], **kw)
    for m in models:
        avg.update_parameters(m)
    f = [flat(m) for m in models]
    want = 0.9 * (0.9 * f[0] + 0.1 * f[1]) + 0.1 * f[2]
    np.testing.assert_allclose(flat(avg), want, rtol=1e-12)


def test_use_buffers_averages_the_buffers_too():
    models = [model_at(s) for s in range(2)]
    for i, m in enumerate(models):
        m[1].running_mean.fill_(float(i + 1))
    avg = AveragedModel(models[0], avg_fn=get_swa_avg_fn(), use_buffers=True)
    for m in models:
        avg.update_parameters(m)
    np.testing.assert_allclose(avg.module[1].running_mean.numpy(), np.full(4, 1.5))


def test_default_swa_with_buffers_truncates_the_mean_of_integer_buffers():
    models = [model_at(s) for s in range(3)]
    for m, count, mean in zip(models, (1, 2, 7), (1.0, 2.0, 6.0)):
        m[1].num_batches_tracked.fill_(count)
        m[1].running_mean.fill_(mean)
    avg = AveragedModel(models[0], use_buffers=True)
    counts = []
    for m in models:
        avg.update_parameters(m)
        counts.append(avg.module[1].num_batches_tracked.item())
    # 1; trunc(1 + (2 - 1) / 2) = 1; trunc(1 + (7 - 1) / 3) = 3. The float buffers take the plain mean: 3.
    assert counts == [1, 1, 3] and avg.module[1].num_batches_tracked.dtype is ddpc.int64
    np.testing.assert_array_equal(avg.module[1].running_mean.numpy(), np.full(4, 3.0))


def test_averaged_model_forward_and_state_dict():
    m = model_at(0).eval()
    avg = AveragedModel(m)
    avg.update_parameters(m)
    x = ddpc.randn(5, 3, dtype=ddpc.float64)
    np.testing.assert_allclose(avg(x).detach().numpy(), m(x).detach().numpy(), rtol=1e-12)
    state = avg.state_dict()
    assert "n_averaged" in state and "module.0.weight" in state
    with pytest.raises(ValueError, match="not both"):
        AveragedModel(m, avg_fn=get_swa_avg_fn(), multi_avg_fn=get_ema_multi_avg_fn())


def swalr_closed_form(lr0, swa_lr, anneal_epochs, strategy, steps):
    """With no other lr changes: lr_t = swa_lr + (lr0 - swa_lr) * (1 - anneal(min(1, t / anneal_epochs)))."""
    f = (lambda t: t) if strategy == "linear" else (lambda t: (1 - math.cos(math.pi * t)) / 2)
    return [swa_lr + (lr0 - swa_lr) * (1 - f(min(1.0, t / anneal_epochs) if anneal_epochs else 1.0))
            for t in range(steps + 1)]


@pytest.mark.parametrize("strategy,epochs", [("cos", 5), ("linear", 3), ("cos", 0)])
def test_swalr_anneals_to_swa_lr(strategy, epochs):
    opt = optim.SGD(model_at(0).parameters(), lr=0.5)
    sched = SWALR(opt, swa_lr=0.05, anneal_epochs=epochs, anneal_strategy=strategy)
    got = [opt.param_groups[0]["lr"]]
    for _ in range(8):
        opt.step()
        sched.step()
        got.append(opt.param_groups[0]["lr"])
    np.testing.assert_allclose(got, swalr_closed_form(0.5, 0.05, epochs, strategy, 8), rtol=1e-12)
    assert got[-1] == pytest.approx(0.05)


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before:UserWarning")  # stepped alone
def test_swalr_carries_on_from_an_lr_changed_by_hand():
    opt = optim.SGD(model_at(0).parameters(), lr=1.0)
    sched = SWALR(opt, swa_lr=0.0, anneal_epochs=2, anneal_strategy="linear")
    opt.param_groups[0]["lr"] = 2.0  # at alpha 0: the schedule now anneals from 2
    sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(1.0)
    sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.0)


def test_swalr_checks_its_arguments():
    opt = optim.SGD(model_at(0).parameters(), lr=0.5)
    with pytest.raises(ValueError, match="'cos' or 'linear'"):
        SWALR(opt, 0.1, anneal_strategy="step")
    with pytest.raises(ValueError, match="anneal_epochs"):
        SWALR(opt, 0.1, anneal_epochs=-1)


def test_update_bn_sets_the_plain_average_of_the_batches():
    m = model_at(0)
    bn = m[1]
    bn.momentum = 0.3
    rng = np.random.default_rng(0)
    batches = [ddpc.tensor(rng.standard_normal((6, 3))) for _ in range(4)]
    m.eval()
    update_bn([(b, 0) for b in batches], m)
    assert not m.training and bn.momentum == 0.3
    with ddpc.no_grad():
        feats = [m[0](b).numpy() for b in batches]
    np.testing.assert_allclose(bn.running_mean.numpy(), np.mean([f.mean(0) for f in feats], axis=0), rtol=1e-10)
    np.testing.assert_allclose(bn.running_var.numpy(), np.mean([f.var(0, ddof=1) for f in feats], axis=0),
                               rtol=1e-10)

"""Lazy modules: the first forward infers the input size, initialises the
parameters as the layer's own class would (the same values from the same
seed) and turns the module into that class; uninitialized parameters in
state dicts, conversions and copies; and the clear errors of optimizers,
DataParallel and DistributedDataParallel built over them."""

import copy

import numpy as np
import pytest

import ddpc
from ddpc import nn, optim
from ddpc.nn import UninitializedBuffer, UninitializedParameter


@pytest.mark.parametrize("lazy,eager,shape", [
    (lambda: nn.LazyLinear(3), lambda: nn.Linear(5, 3), (2, 5)),
    (lambda: nn.LazyConv1d(4, 3, groups=2), lambda: nn.Conv1d(6, 4, 3, groups=2), (2, 6, 8)),
    (lambda: nn.LazyConv2d(2, (2, 3), bias=False), lambda: nn.Conv2d(3, 2, (2, 3), bias=False), (3, 5, 6)),
    (lambda: nn.LazyConv3d(2, 2), lambda: nn.Conv3d(3, 2, 2), (1, 3, 3, 3, 3)),
    (lambda: nn.LazyConvTranspose1d(4, 3, stride=2), lambda: nn.ConvTranspose1d(2, 4, 3, stride=2), (2, 2, 5)),
    (lambda: nn.LazyConvTranspose2d(4, 2, groups=2), lambda: nn.ConvTranspose2d(6, 4, 2, groups=2), (6, 3, 3)),
    (lambda: nn.LazyConvTranspose3d(2, 2), lambda: nn.ConvTranspose3d(3, 2, 2), (1, 3, 2, 2, 2)),
    (lambda: nn.LazyBatchNorm1d(), lambda: nn.BatchNorm1d(4), (5, 4)),
    (lambda: nn.LazyBatchNorm2d(momentum=None), lambda: nn.BatchNorm2d(3, momentum=None), (2, 3, 2, 2)),
    (lambda: nn.LazyBatchNorm3d(affine=False), lambda: nn.BatchNorm3d(2, affine=False), (2, 2, 2, 2, 2)),
    (lambda: nn.LazyInstanceNorm1d(), lambda: nn.InstanceNorm1d(3, affine=True, track_running_stats=True), (3, 4)),
    (lambda: nn.LazyInstanceNorm2d(track_running_stats=False),
     lambda: nn.InstanceNorm2d(3, affine=True), (2, 3, 4, 4)),
    (lambda: nn.LazyInstanceNorm3d(bias=False),
     lambda: nn.InstanceNorm3d(2, affine=True, track_running_stats=True, bias=False), (2, 2, 2, 3, 2)),
])
def test_first_forward_makes_the_layer_its_own_class_would(lazy, eager, shape):
    """The same parameters from the same seed as the layer's own reset_parameters (the norm layers' are
    constants), the same output, and the same running statistics after it."""
    x = ddpc.randn(*shape)
    m = lazy()
    assert m.has_uninitialized_params()
    params = list(m.parameters())
    ddpc.manual_seed(7)
    got = m(x)
    ref = eager()
    if hasattr(ref, "reset_parameters"):
        ddpc.manual_seed(7)
        ref.reset_parameters()
    want = ref(x)
    assert type(m) is type(ref) and repr(m) == repr(ref)
    assert [p is q for p, q in zip(params, m.parameters())] == [True] * len(params)  # the same objects
    assert all(type(p) is nn.Parameter for p in m.parameters())
    assert all(type(b) is ddpc.Tensor for b in m.buffers())
    np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())
    assert list(m.state_dict()) == list(ref.state_dict())
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), ref.state_dict()[k].numpy(), err_msg=k)
    assert not hasattr(m, "has_uninitialized_params")


def test_a_lazy_model_trains_once_its_first_forward_has_run():
    ddpc.manual_seed(0)
    model = nn.Sequential(nn.LazyConv2d(4, 3), nn.LazyBatchNorm2d(), nn.ReLU(), nn.Flatten(), nn.LazyLinear(2))
    x, y = ddpc.randn(8, 3, 6, 6), ddpc.tensor(np.arange(8) % 2)
    with pytest.raises(ValueError, match="uninitialized parameter"):
        optim.SGD(model.parameters(), lr=0.1)
    model(x)
    assert [type(m).__name__ for m in model] == ["Conv2d", "BatchNorm2d", "ReLU", "Flatten", "Linear"]
    assert model[4].in_features == 4 * 4 * 4
    opt = optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(5):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert losses[-1] < losses[0]


def test_parallel_wrappers_refuse_uninitialized_parameters():
    model = nn.Sequential(nn.Linear(3, 4), nn.LazyBatchNorm1d())
    with pytest.raises(RuntimeError, match=r"uninitialized parameters can't be used with `DataParallel` "
                                           r"\(1.weight, 1.bias, 1.running_mean, 1.running_var"):
        nn.DataParallel(model, device_ids=["cpu"])
    with pytest.raises(RuntimeError, match="uninitialized parameters can't be used with `DistributedDataParallel`"):
        nn.parallel.DistributedDataParallel(model)


def test_uninitialized_tensors_convert_copy_and_print():
    m = nn.LazyBatchNorm1d()
    assert repr(m.weight) == "<UninitializedParameter>" and repr(m.running_mean) == "<UninitializedBuffer>"
    m.double()
    assert isinstance(m.running_mean, UninitializedBuffer) and isinstance(m.weight, UninitializedParameter)
    c = copy.deepcopy(m)
    assert c.has_uninitialized_params() and c.weight.dtype == ddpc.float64
    m(ddpc.randn(4, 3, dtype=ddpc.float64))
    assert m.weight.dtype == ddpc.float64 and m.running_var.dtype == ddpc.float64 and m.weight.shape == (3,)
    assert c.has_uninitialized_params()  # the copy stays lazy
    p = UninitializedParameter(dtype=ddpc.float64)
    p.materialize((2, 3))
    assert type(p) is nn.Parameter and p.shape == (2, 3) and p.dtype == ddpc.float64 and p.requires_grad


def test_state_dicts_of_lazy_modules(tmp_path):
    lazy = nn.Sequential(nn.LazyLinear(3), nn.ReLU(), nn.LazyLinear(2))
    state = lazy.state_dict()
    assert all(isinstance(v, UninitializedParameter) for v in state.values())
    other = nn.Sequential(nn.LazyLinear(3), nn.ReLU(), nn.LazyLinear(2))
    other.load_state_dict(state)  # uninitialized into uninitialized: still lazy
    assert other[0].has_uninitialized_params()
    trained = nn.Sequential(nn.Linear(5, 3), nn.ReLU(), nn.Linear(3, 2))
    other.load_state_dict(trained.state_dict())  # the parameters take the checkpoint's shapes and values
    assert other[0].weight.shape == (3, 5) and not other[2].has_uninitialized_params()
    x = ddpc.randn(4, 5)
    np.testing.assert_array_equal(other(x).detach().numpy(), trained(x).detach().numpy())
    assert repr(other[0]) == "Linear(in_features=5, out_features=3, bias=True)"
    with pytest.raises(RuntimeError, match="0.weight is uninitialized in the checkpoint"):
        trained.load_state_dict(lazy.state_dict())
    # ddpc's checkpoint format keeps no uninitialized tensors (they would come back as empty ones).
    with pytest.raises(TypeError, match="can't store an uninitialized tensor"):
        ddpc.save(lazy.state_dict(), tmp_path / "lazy.ckpt")
    ddpc.save(other.state_dict(), tmp_path / "other.ckpt")
    again = nn.Sequential(nn.LazyLinear(3), nn.ReLU(), nn.LazyLinear(2))
    again.load_state_dict(ddpc.load(tmp_path / "other.ckpt"))
    np.testing.assert_array_equal(again(x).detach().numpy(), trained(x).detach().numpy())


def test_input_checks():
    with pytest.raises(ValueError, match="expected a 2-d \\(unbatched\\) or 3-d \\(batched\\) input"):
        nn.LazyConv1d(2, 3)(ddpc.randn(2, 3, 4, 5))
    with pytest.raises(ValueError, match="in_channels \\(3\\) must be divisible by groups \\(2\\)"):
        nn.LazyConv2d(4, 3, groups=2)(ddpc.randn(1, 3, 5, 5))
    m = nn.LazyLinear(3)
    m(ddpc.randn(2, 4))
    with pytest.raises((ValueError, RuntimeError)):
        m(ddpc.randn(2, 5))  # a Linear of 4 input features now

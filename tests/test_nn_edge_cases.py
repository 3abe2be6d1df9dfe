"""Edge cases of ddpc.nn against hand-computed values: batch norm after its
running-statistics settings changed, a pointwise transposed convolution
with output_padding, the positions full backward hooks see, int64 average
pooling, registration and input errors, attributes tools read, loading
old num_batches_tracked entries, and channel dropout of 5-d inputs."""

import collections
import math

import numpy as np
import pytest

import ddpc
from ddpc import nn
import ddpc.nn.functional as F

X2 = [[1., 2.], [3., 5.]]
EPS = 1e-5


def _batch_normalised(x):
    x = np.asarray(x)
    return (x - x.mean(0)) / np.sqrt(x.var(0) + EPS)


# ---- batch norm's running statistics ----------------------------------------------------------------------


def test_batch_norm_untracked_after_construction_uses_running_stats_in_eval():
    bn = nn.BatchNorm1d(2)
    bn.track_running_stats = False
    bn.eval()
    y = bn(ddpc.tensor(X2))
    np.testing.assert_allclose(y.numpy(), np.asarray(X2) / math.sqrt(1 + EPS), rtol=1e-6)
    assert bn.running_mean.tolist() == [0.0, 0.0] and int(bn.num_batches_tracked.item()) == 0
    bn.train()
    np.testing.assert_allclose(bn(ddpc.tensor(X2)).numpy(), _batch_normalised(X2), rtol=1e-5)
    assert bn.running_mean.tolist() == [0.0, 0.0] and int(bn.num_batches_tracked.item()) == 0


def test_batch_norm_without_running_buffers_uses_batch_stats_in_eval():
    for cls in (nn.BatchNorm1d, nn.SyncBatchNorm):
        bn = cls(2)
        bn.running_mean = bn.running_var = None
        bn.eval()
        np.testing.assert_allclose(bn(ddpc.tensor(X2)).numpy(), _batch_normalised(X2), rtol=1e-5)


def test_batch_norm_tracking_switched_on_without_buffers_normalises_the_batch():
    bn = nn.BatchNorm1d(2, track_running_stats=False)
    bn.track_running_stats = True
    np.testing.assert_allclose(bn(ddpc.tensor(X2)).numpy(), _batch_normalised(X2), rtol=1e-5)
    sync = nn.SyncBatchNorm(2, track_running_stats=False)
    sync.track_running_stats = True
    with pytest.raises(AssertionError, match="num_batches_tracked must not be None"):
        sync(ddpc.tensor(X2))


# ---- transposed convolution with output_padding at stride 1 --------------------------------------------------


@pytest.mark.parametrize("batch", [1, 2])
def test_pointwise_conv_transpose_with_output_padding(batch):
    x = np.arange(1, 1 + batch * 8, dtype=np.float32).reshape(batch, 2, 4)
    m = nn.ConvTranspose1d(2, 2, 1, dilation=2, output_padding=1, groups=2)
    with ddpc.no_grad():
        m.weight.fill_(2.0)
        m.bias.fill_(0.5)
    xt = ddpc.tensor(x, requires_grad=True)
    y = m(xt)
    want = np.concatenate([2 * x + 0.5, np.full((batch, 2, 1), 0.5, np.float32)], axis=2)
    np.testing.assert_array_equal(y.numpy(), want)
    g = np.arange(batch * 10, dtype=np.float32).reshape(batch, 2, 5)
    y.backward(ddpc.tensor(g))
    np.testing.assert_array_equal(xt.grad.numpy(), 2 * g[:, :, :4])
    np.testing.assert_array_equal(m.weight.grad.numpy().reshape(2), (g[:, :, :4] * x).sum((0, 2)))
    np.testing.assert_array_equal(m.bias.grad.numpy(), g.sum((0, 2)))


# ---- the positions full backward hooks see ------------------------------------------------------------------


class _Scaled(nn.Module):
    def forward(self, a, k, b):
        return a * b * k


def _values(grads):
    return [None if g is None else g.tolist() for g in grads]


def test_full_backward_hook_has_a_position_per_argument():
    seen = []
    m = _Scaled()
    m.register_full_backward_pre_hook(lambda mod, go: seen.append(_values(go)))
    m.register_full_backward_hook(lambda mod, gi, go: seen.append(_values(gi)))
    a = ddpc.tensor([1., 2.], requires_grad=True)
    b = ddpc.tensor([3., 4.])
    m(a, 3.0, b).sum().backward()
    # b needs no gradient: zeros, as PyTorch materialises it; the float: None.
    assert seen == [[[1.0, 1.0]], [[9.0, 12.0], None, [0.0, 0.0]]]


def test_full_backward_hook_replacement_in_torch_shape():
    m = _Scaled()
    m.register_full_backward_hook(lambda mod, gi, go: (gi[0] * 0 + 7, "not read", None))
    a = ddpc.tensor([1., 2.], requires_grad=True)
    b = ddpc.tensor([3., 4.], requires_grad=True)
    m(a, 3.0, b).sum().backward()
    assert a.grad.tolist() == [7.0, 7.0] and b.grad is None
    m = _Scaled()
    m.register_full_backward_hook(lambda mod, gi, go: (gi[0], None))
    with pytest.raises(RuntimeError, match="Backward hook returned an invalid number of grad_input, got 2, but "
                                           "expected 3"):
        m(a, 3.0, b).sum().backward()


def test_full_backward_hooks_see_non_tensor_outputs_as_none():
    class Mixed(nn.Module):
        def forward(self, a):
            return a * 2, {"k": 1}, a * 3, 5

    seen = []
    m = Mixed()
    m.register_full_backward_pre_hook(lambda mod, go: seen.append(_values(go)) or (go[0] * 10, None, go[2], None))
    a = ddpc.tensor([1., 2.], requires_grad=True)
    out = m(a)
    (out[0].sum() + out[2].sum()).backward()
    assert seen == [[[1.0, 1.0], None, [1.0, 1.0], None]]
    assert a.grad.tolist() == [23.0, 23.0]


# ---- int64 average pooling -----------------------------------------------------------------------------------


def test_int64_avg_pool_divides_toward_zero():
    x = ddpc.tensor([[[-11, 0, 5, 2, 7, -3, 2]]])
    assert F.avg_pool1d(x, 2).tolist() == [[[-5, 3, 2]]]
    # windows [pad, -11, 0], [0, 5, 2], [2, 7, -3], [-3, 2, pad]: sums -11, 7, 6, -1
    assert F.avg_pool1d(x, 3, 2, padding=1).tolist() == [[[-3, 2, 2, 0]]]
    assert F.avg_pool1d(x, 3, 2, padding=1, count_include_pad=False).tolist() == [[[-5, 2, 2, 0]]]
    assert F.avg_pool2d(x, (1, 3), 2, padding=(0, 1), divisor_override=2).tolist() == [[[-5, 3, 3, 0]]]


def test_int64_avg_pool_keeps_large_values_exact():
    big = 2 ** 62
    x = ddpc.tensor([[[big, big - 1, -big, -big + 3]]])
    assert F.avg_pool1d(x, 2).tolist() == [[[big - 1, -big + 2]]]  # (2^63 - 1) / 2 and (-2^63 + 3) / 2
    with pytest.raises(TypeError, match="floating-point or int64"):
        F.avg_pool1d(x.to(ddpc.int32), 2)


# ---- registration and input errors ------------------------------------------------------------------------


@pytest.mark.parametrize("register", [
    lambda: nn.Linear(1, 1).add_module("weight", nn.ReLU()),
    lambda: nn.BatchNorm1d(1).add_module("running_mean", nn.ReLU()),
    lambda: nn.Linear(1, 1).register_buffer("weight", ddpc.zeros(1)),
    lambda: nn.Linear(1, 1, bias=False).register_buffer("bias", ddpc.zeros(1)),
    lambda: nn.BatchNorm1d(1).register_parameter("running_var", nn.Parameter(ddpc.ones(1))),
    lambda: nn.Sequential(nn.ReLU()).register_buffer("0", ddpc.zeros(1)),
    lambda: nn.Linear(1, 1).register_buffer("forward", ddpc.zeros(1)),
])
def test_registering_over_another_attribute_raises(register):
    with pytest.raises(KeyError, match="already exists"):
        register()


def test_registering_again_in_the_same_table_replaces():
    m = nn.Sequential(nn.ReLU())
    m.add_module("0", nn.Tanh())
    assert isinstance(m[0], nn.Tanh)
    bn = nn.BatchNorm1d(1)
    bn.register_buffer("running_mean", None)
    assert bn.running_mean is None


def test_instance_norm_refuses_running_stats_of_an_unversioned_state_dict():
    m = nn.InstanceNorm2d(3, affine=True)
    sd = {"weight": ddpc.full((3,), 2.0), "bias": ddpc.zeros(3), "running_mean": ddpc.zeros(3),
          "running_var": ddpc.ones(3)}
    with pytest.raises(RuntimeError, match='Unexpected running stats buffer\\(s\\) "running_mean" and "running_var" '
                                           "for InstanceNorm2d with track_running_stats=False"):
        m.load_state_dict(dict(sd), strict=False)
    versioned = collections.OrderedDict(sd)
    versioned._metadata = {"": {"version": 2}}  # a state_dict() of these days: the stats are unexpected keys
    assert m.load_state_dict(versioned, strict=False).unexpected_keys == ["running_mean", "running_var"]
    assert m.weight.tolist() == [2.0, 2.0, 2.0]
    tracked = nn.InstanceNorm1d(2, track_running_stats=True)
    tracked.load_state_dict({"running_mean": ddpc.ones(2), "running_var": ddpc.ones(2)})
    assert tracked.running_mean.tolist() == [1.0, 1.0]


def test_instance_norm_of_one_spatial_element_raises_when_using_input_stats():
    for fn in (lambda: nn.InstanceNorm1d(3)(ddpc.ones(2, 3, 1)), lambda: nn.InstanceNorm1d(3).eval()(ddpc.ones(3, 1)),
               lambda: F.instance_norm(ddpc.ones(2, 3, 1, 1))):
        with pytest.raises(ValueError, match="Expected more than 1 spatial element when training"):
            fn()
    assert nn.InstanceNorm1d(3, track_running_stats=True).eval()(ddpc.ones(2, 3, 1)).shape == (2, 3, 1)


@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_multihead_attention_refuses_integer_masks(dtype):
    m, q = nn.MultiheadAttention(4, 2), ddpc.ones(3, 1, 4)
    with pytest.raises(AssertionError, match="only bool and floating types of attn_mask"):
        m(q, q, q, attn_mask=ddpc.zeros(3, 3, dtype=getattr(ddpc, dtype)))
    with pytest.raises(AssertionError, match="only bool and floating types of key_padding_mask"):
        m(q, q, q, key_padding_mask=ddpc.zeros(1, 3, dtype=getattr(ddpc, dtype)))


# ---- attributes tools read -----------------------------------------------------------------------------------


def test_conv_attributes():
    c = nn.Conv2d(2, 2, (3, 2), padding="same", dilation=(1, 3))
    assert (c.transposed, c.output_padding, c._reversed_padding_repeated_twice) == (False, (0, 0), [1, 2, 1, 1])
    c = nn.Conv1d(2, 2, 3, padding=2)
    assert (c.transposed, c.output_padding, c._reversed_padding_repeated_twice) == (False, (0,), (2, 2))
    c = nn.ConvTranspose2d(2, 2, 3, padding=(1, 2), output_padding=(1, 0), stride=2)
    assert (c.transposed, c.output_padding, c._reversed_padding_repeated_twice) == (True, (1, 0), (2, 2, 1, 1))


def test_rnn_flat_weights():
    m = nn.GRU(2, 3, num_layers=2, bidirectional=True)
    names = [f"{kind}_l{layer}{suffix}" for layer in range(2) for suffix in ("", "_reverse")
             for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
    assert m._flat_weights_names == names
    assert all(w is getattr(m, n) for w, n in zip(m._flat_weights, names))


def test_activation_relu_or_gelu():
    assert nn.TransformerEncoderLayer(4, 2, 8).activation_relu_or_gelu == 1
    assert nn.TransformerEncoderLayer(4, 2, 8, activation=nn.GELU()).activation_relu_or_gelu == 2
    assert nn.TransformerEncoderLayer(4, 2, 8, activation=nn.Tanh()).activation_relu_or_gelu == 0


# ---- loading num_batches_tracked ---------------------------------------------------------------------------


def _bn_state(version, drop=False, count=None):
    sd = collections.OrderedDict(nn.BatchNorm1d(2).state_dict())
    if drop:
        del sd["num_batches_tracked"]
    if count is not None:
        sd["num_batches_tracked"] = count
    if version is not None:
        sd._metadata = {"": {"version": version}}
    return sd


def test_num_batches_tracked_of_shape_one_loads():
    bn = nn.BatchNorm1d(2)
    bn.load_state_dict(_bn_state(2, count=ddpc.tensor([5])))
    assert bn.num_batches_tracked.shape == () and int(bn.num_batches_tracked.item()) == 5


@pytest.mark.parametrize("version", [None, 1])
def test_old_checkpoint_without_num_batches_tracked_keeps_the_count(version):
    bn = nn.BatchNorm1d(2)
    bn.num_batches_tracked.fill_(7)
    assert bn.load_state_dict(_bn_state(version, drop=True)).missing_keys == []
    assert int(bn.num_batches_tracked.item()) == 7


def test_version_two_checkpoint_without_num_batches_tracked_is_missing_a_key():
    with pytest.raises(RuntimeError, match='Missing key.*"num_batches_tracked"'):
        nn.BatchNorm1d(2).load_state_dict(_bn_state(2, drop=True))
    assert nn.BatchNorm1d(2).load_state_dict(_bn_state(2, drop=True), strict=False).missing_keys == [
        "num_batches_tracked"]


# ---- channel dropout of 5-d inputs -------------------------------------------------------------------------


def test_dropout2d_of_a_5d_input_warns_and_drops_whole_channels():
    x = ddpc.ones(4, 6, 2, 3, 2)
    with pytest.warns(UserWarning, match="Received a 5-D input to dropout2d"):
        y = F.dropout2d(x, 0.5).numpy().reshape(4, 6, -1)
    assert (y.min(-1) == y.max(-1)).all() and set(np.unique(y)) <= {0.0, 2.0}
    with pytest.warns(UserWarning, match="Received a 5-D input to dropout2d"):
        assert F.dropout2d(x, 0.5, training=False) is x

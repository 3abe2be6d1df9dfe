"""Edge cases of ddpc.nn side by side with PyTorch: norm layers whose
running-statistics settings changed after construction, transposed
convolutions whose output_padding makes a pointwise kernel non-pointwise,
the positions full backward hooks see, integer pooling and interpolation,
cropping pads, attributes that tools read, and warnings."""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ddpc  # noqa: E402

LIBS = (torch, ddpc)
X2 = [[1., 2.], [3., 5.]]


def _np(t):
    return None if t is None else np.asarray(t.detach().numpy())


# ---- 1. batch norm's running statistics ------------------------------------------------------------------


def _bn_run(lib, prepare, train, cls="BatchNorm1d", x=X2):
    bn = getattr(lib.nn, cls)(2)
    prepare(bn)
    bn.train(train)
    y = bn(lib.tensor(x))
    return (_np(y), _np(bn.running_mean), _np(bn.running_var),
            None if bn.num_batches_tracked is None else int(bn.num_batches_tracked.item()))


def _set_untracked(bn):
    bn.track_running_stats = False


def _drop_buffers(bn):
    bn.running_mean = bn.running_var = None


def _set_tracked_without_buffers(bn):
    bn.running_mean = bn.running_var = bn.num_batches_tracked = None
    bn.track_running_stats = True


@pytest.mark.parametrize("cls", ["BatchNorm1d", "SyncBatchNorm"])
@pytest.mark.parametrize("prepare", [_set_untracked, _drop_buffers, _set_tracked_without_buffers])
@pytest.mark.parametrize("train", [False, True])
def test_batch_norm_statistics_rule_matches_torch(cls, prepare, train):
    if cls == "SyncBatchNorm" and prepare is _set_tracked_without_buffers and train:
        for lib in LIBS:
            with pytest.raises(AssertionError, match="num_batches_tracked must not be None"):
                _bn_run(lib, prepare, train, cls)
        return
    ours, theirs = (_bn_run(lib, prepare, train, cls) for lib in (ddpc, torch))
    for a, b in zip(ours, theirs):
        if isinstance(a, np.ndarray):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
        else:
            assert a == b


@pytest.mark.parametrize("track", [False, True])
def test_instance_norm_with_flipped_tracking_matches_torch(track):
    x = [[[1., 2., 4.], [3., 5., 9.]]]
    got = []
    for lib in LIBS:
        m = lib.nn.InstanceNorm1d(2, track_running_stats=True)
        m.track_running_stats = track
        m.eval()
        got.append((_np(m(lib.tensor(x))), _np(m.running_mean), _np(m.running_var)))
    for a, b in zip(*got):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


# ---- 2. transposed convolution with output_padding at stride 1 ---------------------------------------------


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("groups", [1, 2])
def test_pointwise_conv_transpose_with_output_padding_matches_torch(nd, batch, groups):
    rng = np.random.default_rng(nd * 10 + batch + groups)
    name = f"ConvTranspose{nd}d"
    x = rng.standard_normal((batch, 2) + (3,) * nd)
    tm = getattr(torch.nn, name)(2, 4, 1, dilation=2, output_padding=1, groups=groups).double()
    dm = getattr(ddpc.nn, name)(2, 4, 1, dilation=2, output_padding=1, groups=groups, dtype=ddpc.float64)
    with ddpc.no_grad():
        dm.weight.copy_(ddpc.tensor(_np(tm.weight)))
        dm.bias.copy_(ddpc.tensor(_np(tm.bias)))
    tx, dx = torch.tensor(x, requires_grad=True), ddpc.tensor(x, requires_grad=True)
    ty, dy = tm(tx), dm(dx)
    g = rng.standard_normal(tuple(ty.shape))
    ty.backward(torch.tensor(g))
    dy.backward(ddpc.tensor(g))
    for a, b in ((dy, ty), (dx.grad, tx.grad), (dm.weight.grad, tm.weight.grad), (dm.bias.grad, tm.bias.grad)):
        np.testing.assert_allclose(_np(a), _np(b), rtol=1e-10, atol=1e-12)


# ---- 3. the positions full backward hooks see ----------------------------------------------------------------


def _shown(grads):
    return [None if g is None else g.tolist() for g in grads]


def _hooked_grads(lib, module_src, call, hook_result=None):
    """What a full backward pre-hook and hook see for ``call(module, a, b)``, and a's and b's gradients."""
    ns = {"lib": lib}
    exec(module_src, ns)
    m, seen = ns["M"](), []
    m.register_full_backward_pre_hook(lambda mod, go: seen.append(("pre", _shown(go))))
    m.register_full_backward_hook(lambda mod, gi, go: seen.append(("hook", _shown(gi), _shown(go))) or
                                  (hook_result(gi) if hook_result else None))
    a = lib.tensor([1., 2.], requires_grad=True)
    b = lib.tensor([3., 4.], requires_grad=True)
    c = lib.tensor([5., 6.])
    call(m, a, b, c).sum().backward()
    return seen, _shown((a.grad, b.grad))


NON_TENSOR_ARG = """
class M(lib.nn.Module):
    def forward(self, a, k, b):
        return a * b * k
"""
UNUSED_AND_CONSTANT_ARGS = """
class M(lib.nn.Module):
    def forward(self, a, b, c):
        return a * c
"""
MIXED_OUTPUTS = """
class M(lib.nn.Module):
    def forward(self, a, b, c):
        return a * 2, {"k": 1}, a * b, 5, a.detach()
"""


@pytest.mark.parametrize("src,call,hook_result", [
    (NON_TENSOR_ARG, lambda m, a, b, c: m(a, 3.0, b), None),
    (NON_TENSOR_ARG, lambda m, a, b, c: m(a, 3.0, b), lambda gi: (gi[0] * 0 + 7, "ignored", None)),
    (UNUSED_AND_CONSTANT_ARGS, lambda m, a, b, c: m(a, b, c), None),
    (UNUSED_AND_CONSTANT_ARGS, lambda m, a, b, c: m(a, b, c), lambda gi: (None, gi[1] + 1, gi[2] + 1)),
    (MIXED_OUTPUTS, lambda m, a, b, c: m(a, b, c)[0], None),
    (MIXED_OUTPUTS, lambda m, a, b, c: m(a, b, c)[2] * 3, None),
])
def test_full_backward_hook_positions_match_torch(src, call, hook_result):
    assert _hooked_grads(ddpc, src, call, hook_result) == _hooked_grads(torch, src, call, hook_result)


def test_backward_pre_hook_replacement_in_torch_shape():
    got = []
    for lib in LIBS:
        ns = {"lib": lib}
        exec(MIXED_OUTPUTS, ns)
        m = ns["M"]()
        m.register_full_backward_pre_hook(lambda mod, go: (go[0] * 10, None, go[2], "ignored", None))
        a, b = lib.tensor([1., 2.], requires_grad=True), lib.tensor([3., 4.])
        out = m(a, b, b)
        (out[0].sum() + out[2].sum()).backward()
        got.append(a.grad.tolist())
    assert got[0] == got[1]


def test_full_backward_hook_wrong_length_message_matches_torch():
    messages = []
    for lib in LIBS:
        ns = {"lib": lib}
        exec(NON_TENSOR_ARG, ns)
        m = ns["M"]()
        m.register_full_backward_hook(lambda mod, gi, go: (gi[0], None))
        with pytest.raises(RuntimeError) as err:
            m(lib.tensor([1., 2.], requires_grad=True), 3.0, lib.tensor([3., 4.])).sum().backward()
        messages.append(str(err.value))
    assert messages[1].startswith(messages[0])


WITH_PARAMETER = """
class M(lib.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = lib.nn.Parameter(lib.tensor([1., 1.]))

    def forward(self, a, k):
        return a * self.w * k
"""


def test_full_backward_hook_without_input_grads_warns_and_sees_nones():
    seen = []
    for lib in LIBS:
        ns = {"lib": lib}
        exec(WITH_PARAMETER, ns)
        m = ns["M"]()
        m.register_full_backward_hook(lambda mod, gi, go: seen.append((_shown(gi), _shown(go))))
        with pytest.warns(UserWarning, match="no inputs require gradients"):
            m(lib.tensor([1., 2.]), 2.0).sum().backward()
    assert seen[0] == seen[1]


# ---- 4. integer average pooling --------------------------------------------------------------------------


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize("big", [False, True])
def test_int64_avg_pool_matches_torch(nd, ceil_mode, count_include_pad, big):
    rng = np.random.default_rng(nd + 2 * ceil_mode + 4 * count_include_pad)
    bound = 2 ** 60 if big else 1000
    x = rng.integers(-bound, bound, (2, 3) + (5, 4, 3)[:nd])
    args = ((3, 2, 2)[:nd], (2, 1, 2)[:nd], (1, 1, 0)[:nd], ceil_mode, count_include_pad)
    name = f"avg_pool{nd}d"
    want = getattr(torch.nn.functional, name)(torch.tensor(x), *args)
    got = getattr(ddpc.nn.functional, name)(ddpc.tensor(x), *args)
    assert got.dtype is ddpc.int64
    np.testing.assert_array_equal(_np(got), _np(want))
    if nd > 1:
        want = getattr(torch.nn.functional, name)(torch.tensor(x), *args, divisor_override=3)
        got = getattr(ddpc.nn.functional, name)(ddpc.tensor(x), *args, divisor_override=3)
        np.testing.assert_array_equal(_np(got), _np(want))


def test_int64_lp_pool_matches_torch():
    x = [[[1, 5, 3, 7, 2, 9]]]
    want = torch.nn.functional.lp_pool1d(torch.tensor(x), 2, 2)
    got = ddpc.nn.functional.lp_pool1d(ddpc.tensor(x), 2, 2)
    np.testing.assert_allclose(_np(got), _np(want), rtol=1e-6)


# ---- 6. errors PyTorch raises ---------------------------------------------------------------------------


def _error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the type and text are what is compared
        return type(e).__name__, str(e).split(" got input size")[0]
    return None


@pytest.mark.parametrize("case", [
    lambda L: L.nn.Linear(1, 1).add_module("weight", L.nn.ReLU()),
    lambda L: L.nn.BatchNorm1d(1).register_module("running_mean", L.nn.ReLU()),
    lambda L: L.nn.Linear(1, 1).register_buffer("weight", L.zeros(1)),
    lambda L: L.nn.Linear(1, 1, bias=False).register_buffer("bias", L.zeros(1)),
    lambda L: L.nn.BatchNorm1d(1, affine=False).register_parameter("running_mean", L.nn.Parameter(L.zeros(1))),
    lambda L: L.nn.Sequential(L.nn.ReLU()).register_buffer("0", L.zeros(1)),
    lambda L: L.nn.Sequential(L.nn.ReLU()).add_module("0", L.nn.Tanh()),
    lambda L: L.nn.BatchNorm1d(1).register_buffer("running_mean", None),
    lambda L: L.nn.InstanceNorm1d(3)(L.ones(2, 3, 1)),
    lambda L: L.nn.InstanceNorm2d(3).eval()(L.ones(3, 1, 1)),
    lambda L: L.nn.functional.instance_norm(L.ones(2, 3, 1, 1, 1)),
    lambda L: L.nn.InstanceNorm1d(3, track_running_stats=True).eval()(L.ones(2, 3, 1)),
    lambda L: L.nn.MultiheadAttention(4, 2)(L.ones(3, 1, 4), L.ones(3, 1, 4), L.ones(3, 1, 4),
                                            attn_mask=L.zeros(3, 3, dtype=L.int64)),
    lambda L: L.nn.MultiheadAttention(4, 2)(L.ones(3, 1, 4), L.ones(3, 1, 4), L.ones(3, 1, 4),
                                            key_padding_mask=L.zeros(1, 3, dtype=L.int32)),
])
def test_errors_match_torch(case):
    assert _error(lambda: case(ddpc)) == _error(lambda: case(torch))


# ---- 7. attributes tools read -----------------------------------------------------------------------------


@pytest.mark.parametrize("make", [
    lambda L: L.nn.Conv1d(2, 2, 3, padding=2),
    lambda L: L.nn.Conv2d(2, 2, (3, 2), padding="same", dilation=(1, 3)),
    lambda L: L.nn.Conv3d(2, 2, 3, padding="valid"),
    lambda L: L.nn.Conv2d(2, 2, 3, padding=(1, 2), padding_mode="reflect"),
    lambda L: L.nn.ConvTranspose2d(2, 2, 3, padding=(1, 2), output_padding=(1, 0), stride=2),
    lambda L: L.nn.ConvTranspose1d(2, 2, 3),
])
def test_conv_attributes_match_torch(make):
    ours, theirs = make(ddpc), make(torch)
    for name in ("transposed", "output_padding", "_reversed_padding_repeated_twice"):
        assert getattr(ours, name) == getattr(theirs, name), name
        assert type(getattr(ours, name)) is type(getattr(theirs, name)), name


@pytest.mark.parametrize("make", [
    lambda L: L.nn.LSTM(2, 3, num_layers=2, bidirectional=True, proj_size=2),
    lambda L: L.nn.GRU(2, 3, bias=False),
    lambda L: L.nn.RNN(2, 3, num_layers=3, nonlinearity="relu"),
])
def test_rnn_flat_weights_match_torch(make):
    ours, theirs = make(ddpc), make(torch)
    assert ours._flat_weights_names == theirs._flat_weights_names
    assert [w is getattr(ours, n) for w, n in zip(ours._flat_weights, ours._flat_weights_names)] == \
        [True] * len(theirs._flat_weights)


@pytest.mark.parametrize("activation", ["relu", "gelu", "relu_fn", "gelu_module", "tanh_module"])
def test_activation_relu_or_gelu_matches_torch(activation):
    def make(L):
        act = {"relu_fn": L.nn.functional.relu, "gelu_module": L.nn.GELU(), "tanh_module": L.nn.Tanh()}
        return L.nn.TransformerEncoderLayer(4, 2, 8, activation=act.get(activation, activation))
    assert make(ddpc).activation_relu_or_gelu == make(torch).activation_relu_or_gelu


# ---- 8. loading num_batches_tracked ------------------------------------------------------------------------


def _load_bn(lib, edit, version, strict=True):
    """A BatchNorm1d (num_batches_tracked 7) loading another's state dict changed by ``edit``, whose
    _metadata version is ``version`` (None: no _metadata)."""
    sd = lib.nn.BatchNorm1d(2).state_dict()
    metadata = sd._metadata
    sd = edit(lib, dict(sd))
    if version is not None:
        import collections
        sd = collections.OrderedDict(sd)
        sd._metadata = {"": {"version": version}}
    assert metadata[""]["version"] == 2
    bn = lib.nn.BatchNorm1d(2)
    bn.num_batches_tracked.fill_(7)
    try:
        result = bn.load_state_dict(sd, strict=strict)
    except RuntimeError as e:
        return "error", str(e).split("\n")[1].strip()
    return sorted(result.missing_keys), int(bn.num_batches_tracked.item()), tuple(bn.num_batches_tracked.shape)


def _without_count(lib, sd):
    del sd["num_batches_tracked"]
    return sd


def _count_of_shape_one(lib, sd):
    sd["num_batches_tracked"] = lib.tensor([5])
    return sd


@pytest.mark.parametrize("edit", [_without_count, _count_of_shape_one])
@pytest.mark.parametrize("version", [None, 1, 2])
@pytest.mark.parametrize("strict", [True, False])
def test_num_batches_tracked_loading_matches_torch(edit, version, strict):
    assert _load_bn(ddpc, edit, version, strict) == _load_bn(torch, edit, version, strict)


# ---- 10. channel dropout of 5-d inputs ---------------------------------------------------------------------


def test_dropout2d_of_a_5d_input_warns_and_drops_channels_as_torch():
    x = np.ones((4, 6, 2, 3, 2))
    for lib in LIBS:
        with pytest.warns(UserWarning, match="Received a 5-D input to dropout2d"):
            y = _np(lib.nn.Dropout2d(0.5)(lib.tensor(x)))
        per_channel = y.reshape(4, 6, -1)
        assert (per_channel.min(-1) == per_channel.max(-1)).all()
        assert set(np.unique(y)) <= {0.0, 2.0}
        with pytest.warns(UserWarning, match="Received a 5-D input to dropout2d"):
            assert _np(lib.nn.Dropout2d(0.5).eval()(lib.tensor(x))).sum() == x.sum()


# ---- 4. integer max pooling ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["uint8", "int32", "int64"])
@pytest.mark.parametrize("nd", [2, 3])
@pytest.mark.parametrize("ceil_mode", [False, True])
def test_integer_max_pool_matches_torch(dtype, nd, ceil_mode):
    rng = np.random.default_rng(nd)
    hi = 4 if dtype == "uint8" else 2 ** 62 if dtype == "int64" else 2 ** 30
    x = rng.integers(0 if dtype == "uint8" else -hi, hi, size=(2, 3) + (7,) * nd).astype(dtype)
    x[..., 0] = x[..., 1]  # ties: the first maximum's index
    got = []
    for lib in LIBS:
        pool = getattr(lib.nn.functional, f"max_pool{nd}d")
        values, indices = pool(lib.tensor(x), 3, stride=2, padding=1, ceil_mode=ceil_mode, return_indices=True)
        got.append((str(values.dtype).split(".")[-1], _np(values).tolist(), _np(indices).tolist()))
    assert got[0] == got[1]


# ---- 5. negative (cropping) padding in every mode -------------------------------------------------------------


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("pad", [(-1, 0), (0, -2), (-1, 2), (2, -1), (-1, -1, 1, -2)])
def test_negative_padding_crops_as_torch(mode, pad):
    shape = (2, 3, 6) if len(pad) == 2 else (2, 3, 5, 6)
    x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    w = np.random.default_rng(0).standard_normal(1000)
    got = []
    for lib in LIBS:
        t = lib.tensor(x, requires_grad=True)
        y = lib.nn.functional.pad(t, pad, mode=mode)
        (y * lib.tensor(w[:y.numel()].reshape(tuple(y.shape)))).sum().backward()
        got.append((_np(y).tolist(), _np(t.grad).tolist()))
    assert got[0] == got[1]


# ---- double backward through piecewise-linear activations -----------------------------------------------------

@pytest.mark.parametrize("act", ["relu", "leaky_relu", "hardtanh", "relu6"])
def test_parameters_reached_only_through_a_piecewise_linear_slope_get_zero_gradients(act):
    """A gradient penalty through Linear -> ReLU -> Linear: the first bias enters the input gradient only
    through ReLU's slope, so its gradient is zeros, not None (AdamW then decays it, as in PyTorch)."""
    rng = np.random.default_rng(0)
    values = [rng.standard_normal(s) for s in ((4, 3), (4,), (1, 4), (1,))]
    x0 = rng.standard_normal((5, 3))
    got = []
    for L in LIBS:
        lin1, lin2 = L.nn.Linear(3, 4).double(), L.nn.Linear(4, 1).double()
        with L.no_grad():
            for p, v in zip(list(lin1.parameters()) + list(lin2.parameters()), values):
                p.copy_(L.tensor(v))
        x = L.tensor(x0, requires_grad=True)
        g, = L.autograd.grad(lin2(getattr(L.nn.functional, act)(lin1(x))).sum(), x, create_graph=True)
        (g ** 2).sum().backward()
        got.append([None if p.grad is None else p.grad.tolist() for p in (lin1.weight, lin1.bias, lin2.bias)])
    assert [g is None for g in got[0]] == [g is None for g in got[1]] and got[0][1] == [0.0] * 4
    np.testing.assert_allclose(got[0][0], got[1][0], rtol=1e-12)


# ---- group and instance norms keep a low-precision input's dtype ---------------------------------------------


def test_group_and_instance_norm_of_bfloat16_with_float32_parameters_stay_bfloat16():
    got = []
    for lib in LIBS:
        x = lib.ones(1, 4, 2, 2, dtype=lib.bfloat16)
        with lib.autocast("cpu", dtype=lib.bfloat16):
            conv_out = lib.nn.Conv2d(4, 4, 1)(lib.ones(1, 4, 2, 2))
            in_autocast = lib.nn.GroupNorm(2, 4)(conv_out).dtype
        got.append([str(d).split(".")[-1] for d in (
            lib.nn.GroupNorm(2, 4)(x).dtype, in_autocast,
            lib.nn.functional.instance_norm(x, weight=lib.ones(4), bias=lib.zeros(4)).dtype)])
    assert got[0] == got[1] == ["bfloat16"] * 3


# ---- F.multi_head_attention_forward --------------------------------------------------------------------------


@pytest.mark.parametrize("separate", [False, True])
@pytest.mark.parametrize("bias_kv", [False, True])
@pytest.mark.parametrize("zero_attn", [False, True])
def test_multi_head_attention_forward_matches_torch(separate, bias_kv, zero_attn):
    rng = np.random.default_rng(0)
    e, heads, target, source, n = 8, 2, 3, 5, 2
    arrays = dict(q=rng.standard_normal((target, n, e)), k=rng.standard_normal((source, n, e)),
                  v=rng.standard_normal((source, n, e)), w=rng.standard_normal((3 * e, e)) * 0.3,
                  b=rng.standard_normal(3 * e) * 0.1, ow=rng.standard_normal((e, e)) * 0.3,
                  ob=rng.standard_normal(e) * 0.1, bk=rng.standard_normal((1, 1, e)), bv=rng.standard_normal((1, 1, e)),
                  qw=rng.standard_normal((e, e)), kw=rng.standard_normal((e, e)), vw=rng.standard_normal((e, e)))
    padding = rng.random((n, source)) < 0.3
    padding[:, 0] = False
    got = []
    for lib in LIBS:
        t = {k: lib.tensor(v, requires_grad=True) for k, v in arrays.items()}
        out, weights = lib.nn.functional.multi_head_attention_forward(
            t["q"], t["k"], t["v"], e, heads, None if separate else t["w"], t["b"], t["bk"] if bias_kv else None,
            t["bv"] if bias_kv else None, zero_attn, 0.0, t["ow"], t["ob"], training=False,
            key_padding_mask=lib.tensor(padding), use_separate_proj_weight=separate,
            q_proj_weight=t["qw"] if separate else None, k_proj_weight=t["kw"] if separate else None,
            v_proj_weight=t["vw"] if separate else None)
        (out.sum() + (weights * weights).sum()).backward()
        got.append([_np(out), _np(weights), _np(t["q"].grad), _np(t["ob"].grad)])
    for a, b in zip(*got):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


# ---- TransformerEncoder where PyTorch takes its nested-tensor path ----------------------------------------------


def _encoder(lib, batch_first, heads):
    lib.manual_seed(0)
    layer = lib.nn.TransformerEncoderLayer(8, heads, 16, dropout=0.0, batch_first=batch_first)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        encoder = lib.nn.TransformerEncoder(layer, 2, norm=lib.nn.LayerNorm(8))
    return encoder, [str(w.message) for w in caught]


@pytest.mark.parametrize("left_aligned", [True, False])
@pytest.mark.parametrize("batch_first,heads,grad", [(True, 2, False), (False, 2, False), (True, 1, False),
                                                    (True, 2, True)])
def test_transformer_encoder_padded_positions_and_warnings_match_torch(left_aligned, batch_first, heads, grad):
    """In inference with a key padding mask whose padding ends each sequence, PyTorch's nested-tensor path
    leaves the padded positions 0 (then the final norm); elsewhere they hold what the layers computed."""
    padding = np.array([[False, False, True, True], [False, False, False, True]] if left_aligned else
                       [[False, True, False, False], [False, False, False, False]])
    x = np.random.default_rng(0).standard_normal((2, 4, 8)).astype(np.float32)
    reference, torch_warnings = _encoder(torch, batch_first, heads)
    encoder, ddpc_warnings = _encoder(ddpc, batch_first, heads)
    encoder.load_state_dict({k: ddpc.tensor(v.detach().numpy()) for k, v in reference.state_dict().items()})
    assert ddpc_warnings == torch_warnings
    got = []
    for lib, module in ((torch, reference), (ddpc, encoder)):
        module.eval()
        src = lib.tensor(x if batch_first else x.transpose(1, 0, 2).copy())
        with (lib.enable_grad() if grad else lib.no_grad()), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (PyTorch's note that nested tensors are a prototype)
            got.append(_np(module(src, src_key_padding_mask=lib.tensor(padding)).detach()))
    np.testing.assert_allclose(got[1], got[0], rtol=1e-5, atol=2e-6)

"""ddpc.amp: autocast's casting policy and gradients, GradScaler's skipping
and scale schedule, the fused unscale op, and a scaler under DDP on 2 ranks
(real processes started by ddpc.spawn on the cpu backend)."""

import threading
import warnings

import numpy as np
import pytest

import ddpc
from ddpc import nn
from ddpc.amp import GradScaler, autocast
from ddpc.nn import functional as F


def _bf16_round(a):
    """numpy float32 values rounded to bfloat16 (nearest even), as float32."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def _mlp(seed=0):
    ddpc.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


# ---- autocast ----------------------------------------------------------------------------


def test_linear_and_matmul_run_in_the_autocast_dtype_and_losses_in_float32():
    x, w = ddpc.randn(5, 8), ddpc.randn(3, 8)
    y = ddpc.randint(0, 3, (5,))
    with autocast("cpu"):
        out = F.linear(x, w)
        assert out.dtype is ddpc.bfloat16
        assert (x @ w.t()).dtype is ddpc.bfloat16
        assert (x.double() @ w.double().t()).dtype is ddpc.float64  # float64 is never cast
        assert F.cross_entropy(out, y).dtype is ddpc.float32
        assert F.mse_loss(out, out.detach()).dtype is ddpc.float32
        assert F.softmax(out, -1).dtype is ddpc.bfloat16  # float32 on cuda only, as in PyTorch's lists
        assert (out + x[:, :3]).dtype is ddpc.float32  # mixed dtypes promote
    assert F.linear(x, w).dtype is ddpc.float32
    with autocast("cpu"):
        assert F.conv2d(ddpc.randn(1, 2, 5, 5), ddpc.randn(3, 2, 3, 3)).dtype is ddpc.bfloat16
        assert F.max_pool2d(ddpc.randn(1, 2, 4, 4), 2).dtype is ddpc.float32  # pooling keeps its input's dtype
    with autocast("cpu", dtype=ddpc.float16):
        assert F.linear(x, w).dtype is ddpc.float16
    with autocast("cuda"):  # autocast for another device type leaves host tensors alone
        assert F.linear(x, w).dtype is ddpc.float32


def test_autocast_linear_matches_the_rounded_float32_computation():
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((6, 10), (7, 10), (7,)))
    with autocast("cpu"):
        out = F.linear(ddpc.tensor(x), ddpc.tensor(w), ddpc.tensor(b))
    expect = _bf16_round(_bf16_round(x) @ _bf16_round(w).T + _bf16_round(b))
    got = out.float().numpy()
    assert not np.array_equal(got, x @ w.T + b)
    np.testing.assert_allclose(got, expect, rtol=8e-3, atol=1e-6)


def test_cpu_autocast_casts_every_input_of_the_products_with_an_added_term():
    # 1 + 2^-10 is not a bfloat16 (8 significant bits): cast, it rounds to 1, so every sum is exactly 3
    near_one = 1.0 + 2.0 ** -10
    a, b = ddpc.ones(2, 2), ddpc.ones(2, 2)
    with autocast("cpu"):
        results = [ddpc.addmm(ddpc.full((2,), near_one), a, b),
                   ddpc.baddbmm(ddpc.full((1, 2, 2), near_one), a[None], b[None]),
                   ddpc.addbmm(ddpc.full((2, 2), near_one), ddpc.full((2, 2, 2), 0.5), b[None].expand(2, 2, 2)),
                   ddpc.full((2,), near_one).addmm(a, b)]  # the method too
    for r in results:
        assert r.dtype is ddpc.bfloat16 and r.float().numpy().ravel().tolist() == [3.0] * r.numel()


def test_cpu_autocast_runs_prelu_in_bfloat16_and_mv_in_float32():
    near_one = 1.0 + 2.0 ** -10
    with autocast("cpu"):
        out = F.prelu(ddpc.tensor([near_one, -4.0]), ddpc.tensor([0.25]))
        product = ddpc.mv(ddpc.full((2, 2), near_one), ddpc.ones(2))
    assert out.dtype is ddpc.bfloat16 and out.float().tolist() == [1.0, -1.0]
    # PyTorch's CPU list leaves mv out: 2 + 2^-9 exactly, in float32
    assert product.dtype is ddpc.float32 and product.tolist() == [2.0 + 2.0 ** -9] * 2


def test_cpu_autocast_runs_an_lstm_in_bfloat16_on_rounded_inputs():
    ddpc.manual_seed(0)
    lstm = nn.LSTM(8, 4, num_layers=2)
    x = ddpc.randn(5, 3, 8)
    with autocast("cpu"):
        out, (h, c) = lstm(x)
    assert out.dtype is h.dtype is c.dtype is ddpc.bfloat16
    # the same LSTM on the bfloat16-rounded weights and input, computed in float32, each layer's output rounded
    ref = nn.LSTM(8, 4, num_layers=2)
    for name, p in lstm.named_parameters():
        getattr(ref, name).data = ddpc.tensor(_bf16_round(p.numpy()))
    expect = ddpc.tensor(_bf16_round(x.numpy()))
    for layer in range(2):
        single = nn.LSTM(expect.shape[-1], 4)
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(single, name + "_l0").data = getattr(ref, f"{name}_l{layer}").detach()
        expect = ddpc.tensor(_bf16_round(single(expect)[0].detach().numpy()))
    np.testing.assert_array_equal(out.float().detach().numpy(), expect.numpy())
    out.float().sum().backward()
    assert lstm.weight_ih_l0.grad.dtype is ddpc.float32


@pytest.mark.parametrize("dtype", [ddpc.bfloat16, ddpc.float16])
def test_cpu_autocast_runs_the_ops_of_pytorchs_cpu_float32_list_in_float32(dtype):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 4)).astype(np.float32) + 4 * np.eye(4, dtype=np.float32)
    leaf = ddpc.tensor(a, requires_grad=True)
    x = ddpc.randn(1, 2, 4, 4, 4)
    with autocast("cpu", dtype=dtype):
        m = leaf @ ddpc.eye(4)  # a 16-bit matrix, as a layer's output would be
        v = x @ ddpc.eye(4)
        assert m.dtype is v.dtype is dtype
        inverse = ddpc.linalg.inv(m)
        results = [inverse, m.inverse(), ddpc.linalg.solve(m, m[:, :2]), ddpc.pinverse(m), m.prod(), m.trace(),
                   ddpc.cdist(m, m), ddpc.quantile(m, 0.5), F.avg_pool3d(v, 2), F.max_pool3d(v, 2),
                   F.pad(v[0], (1, 1, 1, 1), mode="reflect"), F.pad(v, (1, 1, 1, 1, 1, 1), mode="replicate"),
                   F.grid_sample(v[:, :, 0], ddpc.zeros(1, 2, 2, 2), align_corners=False),
                   F.triplet_margin_loss(m, m.flip(0), m.flip(1)), F.hinge_embedding_loss(m, ddpc.ones(4, 4)),
                   F.multi_margin_loss(m, ddpc.tensor([0, 1, 2, 3]))]
        spectrum = ddpc.fft.rfft(m)
        with pytest.warns(UserWarning, match="size_average") as caught:
            results.append(F.margin_ranking_loss(m[0], m[1], ddpc.ones(4), size_average=False))
        assert caught[0].filename == __file__  # the caller's line, past the autocast wrapper
        # not on the list: they keep the autocast dtype
        kept = [F.max_pool3d(v, 2, return_indices=True)[0], F.pad(v, (1, 1, 1, 1, 1, 1), mode="reflect"),
                F.pad(v[0], (1, 1, 1, 1), mode="circular"), F.avg_pool2d(v[0], 2),
                F.triplet_margin_with_distance_loss(m, m.flip(0), m.flip(1))]
        with pytest.raises(NotImplementedError):  # out= forms run as they are, as in PyTorch
            ddpc.fft.rfft(m, out=ddpc.empty(4, 3, dtype=ddpc.complex64))
    assert [r.dtype for r in results] == [ddpc.float32] * len(results)
    assert spectrum.dtype is ddpc.complex64 and [k.dtype for k in kept] == [dtype] * len(kept)
    # the inverse of the rounded matrix, computed in float32; its gradient reaches the leaf in float32
    np.testing.assert_allclose(inverse.detach().numpy(), np.linalg.inv(m.float().detach().numpy()), rtol=1e-5,
                               atol=1e-6)
    inverse.sum().backward()
    assert leaf.grad.dtype is ddpc.float32 and np.isfinite(leaf.grad.numpy()).all()
    with autocast("cuda"), pytest.raises(ddpc.DtypeError):  # float32 on the host only under its own autocast
        ddpc.linalg.inv(m)
    assert ddpc.prod(m).dtype is dtype  # outside autocast, as before


def test_gradients_reach_float32_parameters_in_float32():
    ddpc.manual_seed(5)
    x = ddpc.randn(12, 8)
    y = ddpc.randint(0, 4, (12,))
    ref = _mlp()
    F.cross_entropy(ref(x), y).backward()
    m = _mlp()
    with autocast("cpu"):
        loss = F.cross_entropy(m(x), y)
    assert loss.dtype is ddpc.float32
    loss.backward()
    for p, q in zip(m.parameters(), ref.parameters()):
        assert p.dtype is ddpc.float32 and p.grad.dtype is ddpc.float32
        # bfloat16 keeps 8 bits, and a rounding can move a pre-activation across ReLU's kink: compare as a whole.
        diff = np.linalg.norm(p.grad.numpy() - q.grad.numpy())
        assert 0 < diff <= 0.05 * np.linalg.norm(q.grad.numpy())


def test_a_parameter_is_cast_once_per_region_and_again_after_an_in_place_change():
    w = ddpc.randn(3, 4, requires_grad=True)
    x = ddpc.randn(2, 4)
    with autocast("cpu"):
        a = F.linear(x, w)
        cast = ddpc.amp._state.cache[id(w)][2]
        b = F.linear(x, w)
        assert ddpc.amp._state.cache[id(w)][2] is cast
        with ddpc.no_grad():
            w.add_(1.0)
        c = F.linear(x, w)
        assert ddpc.amp._state.cache[id(w)][2] is not cast
        np.testing.assert_allclose(c.float().numpy(), b.float().numpy() + x.numpy().sum(1, keepdims=True),
                                   rtol=2e-2, atol=2e-2)
    assert ddpc.amp._state.cache is None  # dropped when the outermost region ends
    (a.float().sum() + b.float().sum()).backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * np.tile(_bf16_round(x.numpy()).sum(0), (3, 1)), rtol=8e-3)


def test_a_cast_made_without_grad_is_not_reused_with_grad():
    w = ddpc.randn(3, 4, requires_grad=True)
    x = ddpc.randn(2, 4)
    with autocast("cpu"):
        with ddpc.no_grad():
            F.linear(x, w)
        out = F.linear(x, w)
    assert out.requires_grad
    out.float().sum().backward()
    assert w.grad is not None


def test_nesting_disabling_decorating_and_threads():
    x, w = ddpc.randn(2, 4), ddpc.randn(3, 4)
    seen = []

    @autocast("cpu")
    def forward():
        return F.linear(x, w).dtype

    with autocast("cpu"):
        assert ddpc.amp.is_autocast_enabled("cpu") and not ddpc.amp.is_autocast_enabled("cuda")
        with autocast("cpu", enabled=False):
            assert F.linear(x, w).dtype is ddpc.float32
            assert forward() is ddpc.bfloat16
        assert F.linear(x, w).dtype is ddpc.bfloat16
        t = threading.Thread(target=lambda: seen.append(F.linear(x, w).dtype))  # autocast is per thread
        t.start()
        t.join()
    assert seen == [ddpc.float32]
    assert not ddpc.amp.is_autocast_enabled()
    assert ddpc.amp.get_autocast_dtype("cpu") is ddpc.bfloat16
    assert ddpc.amp.get_autocast_dtype("cuda") is ddpc.float16


class _Scaled(ddpc.autograd.Function):
    """y = x @ w, recording the dtypes forward and backward saw."""
    seen = []

    @staticmethod
    @ddpc.amp.custom_fwd(device_type="cpu", cast_inputs=ddpc.float32)
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        _Scaled.seen.append(("fwd", x.dtype, ddpc.amp.is_autocast_enabled("cpu")))
        return x @ w

    @staticmethod
    @ddpc.amp.custom_bwd(device_type="cpu")
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        _Scaled.seen.append(("bwd", g.dtype, ddpc.amp.is_autocast_enabled("cpu")))
        return g @ w.T, x.T @ g


class _Kept(_Scaled):
    seen = []

    @staticmethod
    @ddpc.amp.custom_fwd(device_type="cpu")
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        _Kept.seen.append(("fwd", x.dtype, ddpc.amp.is_autocast_enabled("cpu")))
        return F.linear(x, w.T)

    @staticmethod
    @ddpc.amp.custom_bwd(device_type="cpu")
    def backward(ctx, g):
        _Kept.seen.append(("bwd", g.dtype, ddpc.amp.is_autocast_enabled("cpu")))
        x, w = ctx.saved_tensors
        return g.float() @ w.T, x.T @ g.float()


def test_custom_fwd_casts_inputs_and_custom_bwd_restores_the_forward_autocast_state():
    x = ddpc.randn(2, 3, dtype=ddpc.bfloat16, requires_grad=True)
    w = ddpc.randn(3, 4, requires_grad=True)
    with autocast("cpu"):
        y = _Scaled.apply(x, w)
    assert y.dtype is ddpc.float32
    y.sum().backward()
    assert _Scaled.seen == [("fwd", ddpc.float32, False), ("bwd", ddpc.float32, False)]
    assert x.grad.dtype is ddpc.bfloat16 and w.grad.shape == (3, 4)
    with autocast("cpu"):
        y = _Kept.apply(ddpc.randn(2, 3, requires_grad=True), w)
    assert y.dtype is ddpc.bfloat16  # forward ran under autocast, its linear in bfloat16
    y.float().sum().backward()  # outside any region: backward runs under forward's autocast state
    assert _Kept.seen == [("fwd", ddpc.float32, True), ("bwd", ddpc.bfloat16, True)]
    assert ddpc.amp.is_autocast_available("cpu") and not ddpc.amp.is_autocast_available("mps")


def test_autocast_rejects_bad_arguments():
    with pytest.raises(ValueError, match="device_type"):
        autocast("tpu")


@pytest.mark.skipif(ddpc.cuda.is_available(), reason="needs a machine without a usable GPU")
def test_cuda_autocast_without_a_gpu_warns_and_turns_itself_off():
    x, w = ddpc.randn(2, 3).bfloat16(), ddpc.randn(4, 3).bfloat16()
    for dtype in (None, ddpc.float32):  # cuda takes float32 too, as PyTorch's
        with pytest.warns(UserWarning, match="CUDA is not available. Disabling autocast."):
            region = autocast("cuda", dtype=dtype)
        with region:
            assert not ddpc.is_autocast_enabled("cuda")
            assert F.linear(x, w).dtype is ddpc.bfloat16
    with pytest.raises(ValueError, match="floating"):
        autocast("cuda", dtype=ddpc.int64)


@pytest.mark.gpu
def test_cuda_autocast_to_float32_upcasts_half_inputs():
    x, w = ddpc.randn(2, 3, device="cuda").half(), ddpc.randn(4, 3, device="cuda").half()
    with autocast("cuda", dtype=ddpc.float32):
        assert ddpc.is_autocast_enabled("cuda")
        assert F.linear(x, w).dtype is ddpc.float32


def test_cpu_autocast_to_another_dtype_warns_and_turns_autocast_off():
    x, w = ddpc.randn(2, 3), ddpc.randn(4, 3)
    with pytest.warns(UserWarning, match="In CPU autocast, but the target dtype is not supported. Disabling autocast."):
        region = autocast("cpu", dtype=ddpc.float32)
    with autocast("cpu"), region:  # as PyTorch: the region runs with autocast off, also inside an enabled one
        assert not ddpc.is_autocast_enabled("cpu")
        assert F.linear(x, w).dtype is ddpc.float32
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with autocast("cpu", dtype=ddpc.float64, enabled=False):  # off already: nothing to warn about
            assert F.linear(x, w).dtype is ddpc.float32


# ---- the unscale op --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [ddpc.float32, ddpc.float64, ddpc.bfloat16])
@pytest.mark.parametrize("bad", [None, np.inf, -np.inf, np.nan])
def test_unscale_divides_and_flags_non_finite_values(dtype, bad):
    rng = np.random.default_rng(1)
    big = rng.standard_normal(200_003).astype(np.float32)  # large enough to be split across threads
    if bad is not None:
        big[-1] = bad
    grads = [ddpc.tensor(big).to(dtype=dtype), ddpc.tensor(np.float32([1e-30, 3.0])).to(dtype=dtype)]
    before = [g.float().numpy().copy() for g in grads]
    found = ddpc.zeros(1)
    ddpc._C.unscale([g._buf for g in grads], 0.25, found._buf)
    assert found.item() == (0.0 if bad is None else 1.0)
    for g, b in zip(grads, before):
        np.testing.assert_array_equal(g.float().numpy(), (b * np.float32(0.25)).astype(np.float32)
                                      if dtype is not ddpc.bfloat16 else _bf16_round(b * np.float32(0.25)))


def test_unscale_rejects_bad_buffers():
    g = ddpc.ones(3)
    with pytest.raises(ValueError, match="found_inf"):
        ddpc._C.unscale([g._buf], 1.0, ddpc.zeros(2)._buf)
    with pytest.raises(TypeError, match="float dtype"):
        ddpc._C.unscale([ddpc.ones(3, dtype=ddpc.int64)._buf], 1.0, ddpc.zeros(1)._buf)
    with pytest.raises(TypeError, match="Buffer"):
        ddpc._C.unscale([np.ones(3)], 1.0, ddpc.zeros(1)._buf)


# ---- GradScaler --------------------------------------------------------------------------


def _scaled_step(model, opt, scaler, x, y, poison=False):
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    if poison:
        with ddpc.no_grad():
            model[0].weight.grad[0, 0] = float("inf")
    scaler.step(opt)
    scaler.update()
    return loss


@pytest.mark.skipif(ddpc.cuda.is_available(), reason="needs a machine without a usable GPU")
@pytest.mark.parametrize("make", [lambda: GradScaler(), lambda: GradScaler("cuda", init_scale=8.0),
                                  lambda: ddpc.cuda.amp.GradScaler(enabled=True)])
def test_cuda_scaler_without_a_gpu_disables_itself(make):
    # nanoGPT on a CPU host: scaler = torch.cuda.amp.GradScaler(enabled=(dtype == 'float16'))
    with pytest.warns(UserWarning, match="GradScaler is enabled, but CUDA is not available.  Disabling."):
        scaler = make()
    assert not scaler.is_enabled() and scaler.get_scale() == 1.0
    loss = ddpc.tensor(3.0, requires_grad=True)
    assert scaler.scale(loss) is loss
    assert GradScaler("cpu").is_enabled() and GradScaler("cuda", enabled=False).get_scale() == 1.0


def test_scaled_steps_equal_unscaled_steps():
    x, y = ddpc.randn(16, 8), ddpc.randint(0, 4, (16,))
    ref, m = _mlp(), _mlp()
    ref_opt, opt = ddpc.optim.SGD(ref.parameters(), lr=0.1), ddpc.optim.SGD(m.parameters(), lr=0.1)
    scaler = GradScaler("cpu", init_scale=1024.0)
    for _ in range(3):
        ref_opt.zero_grad()
        F.cross_entropy(ref(x), y).backward()
        ref_opt.step()
        _scaled_step(m, opt, scaler, x, y)
    for p, q in zip(m.parameters(), ref.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-6)
    assert scaler.get_scale() == 1024.0


def test_an_overflow_skips_the_step_and_backs_off_then_the_scale_grows_again():
    x, y = ddpc.randn(16, 8), ddpc.randint(0, 4, (16,))
    m = _mlp()
    opt = ddpc.optim.SGD(m.parameters(), lr=0.1)
    scaler = GradScaler("cpu", init_scale=256.0, growth_interval=2)
    start = [p.numpy().copy() for p in m.parameters()]
    _scaled_step(m, opt, scaler, x, y, poison=True)
    for p, s in zip(m.parameters(), start):
        np.testing.assert_array_equal(p.numpy(), s)
    scales = [scaler.get_scale()]
    for _ in range(4):
        _scaled_step(m, opt, scaler, x, y)
        scales.append(scaler.get_scale())
    assert scales == [128.0, 128.0, 256.0, 256.0, 512.0]
    assert not all(np.array_equal(p.numpy(), s) for p, s in zip(m.parameters(), start))


def test_unscale_before_clipping_divides_once():
    x, y = ddpc.randn(16, 8), ddpc.randint(0, 4, (16,))
    ref, m = _mlp(), _mlp()
    F.cross_entropy(ref(x), y).backward()
    opt = ddpc.optim.SGD(m.parameters(), lr=0.1)
    scaler = GradScaler("cpu", init_scale=4096.0)
    scaler.scale(F.cross_entropy(m(x), y)).backward()
    scaler.unscale_(opt)
    for p, q in zip(m.parameters(), ref.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-7)
    scaler.step(opt)  # does not unscale again
    scaler.update()


def test_scaler_misuse_is_refused():
    x, y = ddpc.randn(4, 8), ddpc.randint(0, 4, (4,))
    m = _mlp()
    opt = ddpc.optim.SGD(m.parameters(), lr=0.1)
    scaler = GradScaler("cpu")
    with pytest.raises(RuntimeError, match="No inf checks"):
        scaler.update()
    scaler.scale(F.cross_entropy(m(x), y)).backward()
    scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="already been called"):
        scaler.unscale_(opt)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match="already been called"):
        scaler.step(opt)
    with pytest.raises(RuntimeError, match="after step"):
        scaler.unscale_(opt)
    scaler.update()
    with pytest.raises(RuntimeError, match="Closure"):
        scaler.step(opt, closure=lambda: 0.0)
    half = nn.Linear(2, 2).to(dtype=ddpc.float16)
    half.weight.grad = ddpc.ones(2, 2, dtype=ddpc.float16)
    with pytest.raises(ValueError, match="FP16 gradients"):
        scaler.unscale_(ddpc.optim.SGD(half.parameters(), lr=0.1))
    for bad in (dict(growth_factor=1.0), dict(backoff_factor=1.0), dict(growth_interval=0), dict(init_scale=0)):
        with pytest.raises(ValueError):
            GradScaler("cpu", **bad)
    with pytest.raises(ValueError, match="Tensor"):  # PyTorch's error
        scaler.scale(3.0)


def test_disabled_scaler_passes_through_and_state_round_trips():
    loss = ddpc.ones(())
    off = GradScaler("cpu", enabled=False)
    assert off.scale(loss) is loss and off.get_scale() == 1.0 and off.state_dict() == {}
    a = GradScaler("cpu", init_scale=8.0, growth_interval=3)
    a._growth_tracker = 2
    b = GradScaler("cpu")
    b.load_state_dict(a.state_dict())
    assert b.state_dict() == a.state_dict() and b.get_scale() == 8.0 and b.get_growth_interval() == 3
    with pytest.raises(RuntimeError, match="empty"):
        b.load_state_dict({})
    scaled = a.scale([loss, (loss, loss)])
    assert isinstance(scaled, list) and isinstance(scaled[1], tuple) and scaled[1][0].item() == 8.0


def test_scale_maps_over_any_iterable_as_pytorch():
    a, b = ddpc.ones(()), ddpc.full((), 2.0)
    scaler = GradScaler("cpu", init_scale=8.0)
    # lists and tuples keep their type; other iterables (a dict's values, a generator) give a lazy map
    values = scaler.scale({"a": a, "b": [b]}.values())
    assert isinstance(values, map)
    first, second = values
    assert first.item() == 8.0 and isinstance(second, list) and second[0].item() == 16.0
    assert [t.item() for t in scaler.scale(t for t in (a, b))] == [8.0, 16.0]


def test_update_with_a_new_scale_keeps_the_growth_tracker():
    p = ddpc.ones(2, requires_grad=True)
    opt = ddpc.optim.SGD([p], lr=0.1)
    scaler = GradScaler("cpu", init_scale=8.0, growth_interval=3)
    seen = []
    for i in range(4):
        opt.zero_grad()
        scaler.scale((p * p).sum()).backward()
        scaler.step(opt)
        scaler.update(1024.0) if i == 1 else scaler.update()
        seen.append((scaler.get_scale(), scaler.state_dict()["_growth_tracker"]))
    # the tracker counts 1, (kept at 1 by update(1024)), 2, then 3 = growth_interval: the scale doubles
    assert seen == [(8.0, 1), (1024.0, 1), (1024.0, 2), (2048.0, 0)]


def test_the_scale_grows_only_while_it_stays_finite_in_float32():
    p = ddpc.ones(2, requires_grad=True)
    opt = ddpc.optim.SGD([p], lr=0.1)
    scaler = GradScaler("cpu", init_scale=2.0 ** 127, growth_interval=1)
    for _ in range(3):
        opt.zero_grad()
        scaler.scale(p.sum()).backward()
        scaler.step(opt)
        scaler.update()
    # as PyTorch: 2 ** 128 is no float32, so the scale stays (and the tracker restarts); no step is skipped
    assert scaler.get_scale() == 2.0 ** 127 and scaler.state_dict()["_growth_tracker"] == 0
    assert p.tolist() == pytest.approx([0.7, 0.7])


@pytest.mark.parametrize("bad", [None, float("inf"), float("nan")])
def test_sparse_gradients_are_unscaled_and_checked(bad):
    emb = nn.Embedding(5, 3, sparse=True)
    start = emb.weight.numpy().copy()
    opt = ddpc.optim.SGD(emb.parameters(), lr=0.1)
    scaler = GradScaler("cpu", init_scale=4.0)
    loss = emb(ddpc.tensor(np.array([1, 1, 2]))).sum()
    if bad is not None:
        loss = loss * bad
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    if bad is None:
        # one row of ones per lookup, uncoalesced: 4 / 4
        np.testing.assert_array_equal(emb.weight.grad._values().numpy(), np.ones((3, 3), np.float32))
    scaler.step(opt)
    scaler.update()
    expected = start.copy()
    if bad is None:
        expected[1] -= 0.2  # looked up twice
        expected[2] -= 0.1
    np.testing.assert_allclose(emb.weight.numpy(), expected, rtol=1e-6)
    assert scaler.get_scale() == (4.0 if bad is None else 2.0)


def scaler_worker(rank, steps):
    import ddpc.distributed as dist

    dist.init_process_group("cpu")
    rng = np.random.default_rng(rank)
    model = nn.parallel.DistributedDataParallel(_mlp())
    opt = ddpc.optim.SGD(model.parameters(), lr=0.1)
    scaler = GradScaler("cpu", init_scale=64.0, growth_interval=1)
    scales = []
    for step in range(steps):
        x = rng.standard_normal((8, 8)).astype(np.float32)
        if rank == 1 and step == 1:
            x[0, 0] = np.inf  # only this rank's local gradient overflows
        opt.zero_grad()
        with autocast("cpu"):
            loss = F.cross_entropy(model(ddpc.tensor(x)), ddpc.randint(0, 4, (8,)))
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    params = [p.numpy().copy() for p in model.parameters()]
    dist.destroy_process_group()
    return scales, params


def test_under_ddp_one_ranks_overflow_skips_the_step_on_every_rank():
    (s0, p0), (s1, p1) = ddpc.spawn(scaler_worker, args=(3,), nprocs=2)
    assert s0 == s1 == [128.0, 64.0, 128.0]
    for a, b in zip(p0, p1):
        np.testing.assert_array_equal(a, b)
        assert np.isfinite(a).all()


@pytest.mark.gpu
def test_cuda_autocast_policy_and_unscale():
    x, w = ddpc.randn(5, 8, device="cuda"), ddpc.randn(3, 8, device="cuda")
    with autocast("cuda"):
        out = F.linear(x, w)
        assert out.dtype is ddpc.float16
        assert F.softmax(out, -1).dtype is ddpc.float32
        assert F.layer_norm(out, (3,)).dtype is ddpc.float32
        assert out.sum().dtype is ddpc.float32
    with autocast("cpu"):
        assert F.linear(x, w).dtype is ddpc.float32
    host = ddpc.tensor(np.float32([1.0, np.nan, 4.0]))
    dev = host.to("cuda")
    found = ddpc.zeros(1, device="cuda")
    ddpc._C.unscale([dev._buf], 0.5, found._buf)
    assert found.item() == 1.0
    np.testing.assert_array_equal(dev.cpu().numpy(), np.float32([0.5, np.nan, 2.0]))
    with pytest.raises(ValueError, match="another device"):
        ddpc._C.unscale([dev._buf], 0.5, ddpc.zeros(1)._buf)

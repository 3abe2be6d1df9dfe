"""Batched matmul, scaled_dot_product_attention, MultiheadAttention, the
Transformer's encoder and decoder and Transformer against numpy references: outputs, finite-difference
gradients on small shapes, masks, errors, and a short training run."""

import numpy as np
import pytest
from numeric import numeric_grad

import ddpc
from ddpc import nn
from ddpc.nn import functional as F

rng = np.random.default_rng(0)


@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (5, 4, 6)),
                                   ((3, 4), (2, 4, 5)), ((4,), (2, 4, 3)), ((2, 3, 4), (4,)), ((4,), (4,))])
def test_matmul_broadcasts_batch_dims_with_gradients(sa, sb):
    A, B = rng.standard_normal(sa), rng.standard_normal(sb)
    G = rng.standard_normal(np.matmul(A, B).shape)
    a, b = ddpc.tensor(A, requires_grad=True), ddpc.tensor(B, requires_grad=True)
    out = a @ b
    assert out.shape == np.matmul(A, B).shape
    np.testing.assert_allclose(out.numpy(), np.matmul(A, B), atol=1e-12)
    (out * ddpc.tensor(G)).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), numeric_grad(lambda x: (np.matmul(x, B) * G).sum(), A), atol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), numeric_grad(lambda y: (np.matmul(A, y) * G).sum(), B), atol=1e-6)


def test_matmul_refuses_mismatched_shapes():
    with pytest.raises(ValueError, match="cannot be multiplied"):
        ddpc.randn(2, 3, 4) @ ddpc.randn(2, 5, 3)
    with pytest.raises(ValueError, match="broadcast"):
        ddpc.randn(2, 3, 4) @ ddpc.randn(3, 4, 3)
    with pytest.raises(ValueError, match="at least 1 dim"):
        ddpc.matmul(ddpc.tensor(1.0), ddpc.randn(2))


def ref_attention(q, k, v, keep=None, add=None, scale=None):
    """numpy attention: keep (bool, True takes part) and add (float) masks."""
    s = q @ np.swapaxes(k, -1, -2) * (1 / np.sqrt(q.shape[-1]) if scale is None else scale)
    if add is not None:
        s = s + add
    if keep is not None:
        s = np.where(keep, s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    return w @ v, w


def test_sdpa_matches_numpy_with_masks_and_gradients():
    q, k, v = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((2, 3, 6, 5)), rng.standard_normal((2, 3, 6, 2))
    keep = rng.random((4, 6)) > 0.3
    keep[:, 0] = True
    add = rng.standard_normal((2, 1, 4, 6))
    causal = np.tril(np.ones((4, 6), bool))
    for kwargs, ref in [({}, {}), ({"attn_mask": ddpc.tensor(keep.astype(np.uint8))}, {"keep": keep}),
                        ({"attn_mask": ddpc.tensor(add)}, {"add": add}), ({"is_causal": True}, {"keep": causal}),
                        ({"scale": 0.3}, {"scale": 0.3})]:
        qt, kt, vt = (ddpc.tensor(x, requires_grad=True) for x in (q, k, v))
        out = F.scaled_dot_product_attention(qt, kt, vt, **kwargs)
        np.testing.assert_allclose(out.numpy(), ref_attention(q, k, v, **ref)[0], atol=1e-12)
        out.sum().backward()
        for t, x, i in ((qt, q, 0), (kt, k, 1), (vt, v, 2)):
            args = [q, k, v]

            def f(y, i=i, args=args):
                args = list(args)
                args[i] = y
                return ref_attention(*args, **ref)[0].sum()

            np.testing.assert_allclose(t.grad.numpy(), numeric_grad(f, x), atol=1e-6)


def test_sdpa_dropout_drops_weights_and_bad_input_is_refused():
    q = ddpc.randn(1, 4, 3)
    assert not F.scaled_dot_product_attention(q, q, q, dropout_p=1.0).numpy().any()
    kept = F.scaled_dot_product_attention(q, q, ddpc.ones(1, 4, 2), dropout_p=0.5).numpy()
    assert (kept <= 2 + 1e-6).all() and not np.allclose(kept, 1)
    with pytest.raises(ValueError, match="share E"):
        F.scaled_dot_product_attention(q, ddpc.randn(1, 4, 2), q)
    with pytest.raises(ValueError, match="not both"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=ddpc.ones(4, 4), is_causal=True)
    with pytest.raises(ValueError, match="at least 2 dims"):
        F.scaled_dot_product_attention(ddpc.randn(3), q, q)


def mha_reference(m, query, key, value, keep):
    """numpy MultiheadAttention for batch_first (N, L, E) inputs; keep (N, L, S) or None."""
    e, h = m.embed_dim, m.num_heads
    w, b = m.in_proj_weight.detach().numpy(), m.in_proj_bias.detach().numpy()

    def heads(x, i):
        y = x @ w[i * e:(i + 1) * e].T + b[i * e:(i + 1) * e]
        return y.reshape(x.shape[0], x.shape[1], h, e // h).transpose(0, 2, 1, 3)

    out, weights = ref_attention(heads(query, 0), heads(key, 1), heads(value, 2),
                                 None if keep is None else keep[:, None])
    out = out.transpose(0, 2, 1, 3).reshape(query.shape)
    return out @ m.out_proj.weight.detach().numpy().T + m.out_proj.bias.detach().numpy(), weights


@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention_matches_numpy_with_causal_and_padding_masks(batch_first):
    m = nn.MultiheadAttention(8, 2, batch_first=batch_first).double()
    assert [n for n, _ in m.named_parameters()] == ["in_proj_weight", "in_proj_bias", "out_proj.weight",
                                                   "out_proj.bias"]
    q, kv = rng.standard_normal((3, 4, 8)), rng.standard_normal((3, 5, 8))
    causal = np.triu(np.ones((4, 5), bool), 1)
    pad = np.zeros((3, 5), bool)
    pad[1, 3:] = True
    keep = ~causal[None] & ~pad[:, None, :]
    arrange = (lambda x: x) if batch_first else (lambda x: np.ascontiguousarray(x.transpose(1, 0, 2)))
    out, weights = m(ddpc.tensor(arrange(q)), ddpc.tensor(arrange(kv)), ddpc.tensor(arrange(kv)),
                     key_padding_mask=ddpc.tensor(pad.astype(np.uint8)),
                     attn_mask=ddpc.tensor(causal.astype(np.uint8)), is_causal=True)
    ref_out, ref_w = mha_reference(m, q, kv, kv, keep)
    np.testing.assert_allclose(out.numpy(), arrange(ref_out), atol=1e-12)
    np.testing.assert_allclose(weights.numpy(), ref_w.mean(1), atol=1e-12)
    _, per_head = m(ddpc.tensor(arrange(q)), ddpc.tensor(arrange(kv)), ddpc.tensor(arrange(kv)),
                    average_attn_weights=False)
    np.testing.assert_allclose(per_head.numpy(), mha_reference(m, q, kv, kv, None)[1], atol=1e-12)


def test_multihead_attention_gradients_match_finite_differences():
    m = nn.MultiheadAttention(4, 2, batch_first=True).double()
    x = rng.standard_normal((2, 3, 4))
    t = ddpc.tensor(x, requires_grad=True)
    out, _ = m(t, t, t, need_weights=False)
    out.sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), numeric_grad(lambda y: mha_reference(m, y, y, y, None)[0].sum(), x),
                               atol=1e-6)
    w = m.in_proj_weight.detach().numpy().copy()
    grad = m.in_proj_weight.grad.numpy()

    def f(v):
        with ddpc.no_grad():
            m.in_proj_weight.copy_(ddpc.tensor(v))
        return mha_reference(m, x, x, x, None)[0].sum()

    np.testing.assert_allclose(grad, numeric_grad(f, w), atol=1e-6)


def test_multihead_attention_kdim_vdim_unbatched_and_errors():
    m = nn.MultiheadAttention(6, 3, kdim=4, vdim=2, bias=False)
    assert m.in_proj_weight is None and m.k_proj_weight.shape == (6, 4) and m.v_proj_weight.shape == (6, 2)
    out, w = m(ddpc.randn(5, 6), ddpc.randn(7, 4), ddpc.randn(7, 2))
    assert out.shape == (5, 6) and w.shape == (5, 7)
    with pytest.raises(ValueError, match="divisible"):
        nn.MultiheadAttention(6, 4)
    with pytest.raises(ValueError, match="last dims"):
        m(ddpc.randn(5, 6), ddpc.randn(7, 6), ddpc.randn(7, 2))
    with pytest.raises(ValueError, match="attn_mask"):
        m(ddpc.randn(5, 6), ddpc.randn(7, 4), ddpc.randn(7, 2), attn_mask=ddpc.ones(5, 5))
    with pytest.raises(ValueError, match="hint"):
        m(ddpc.randn(5, 6), ddpc.randn(7, 4), ddpc.randn(7, 2), is_causal=True)


def test_multihead_attention_prints_as_pytorchs_and_keeps_its_state_dict_keys():
    m = nn.MultiheadAttention(8, 2, batch_first=True)
    assert str(m) == ("MultiheadAttention(\n"
                      "  (out_proj): NonDynamicallyQuantizableLinear(in_features=8, out_features=8, bias=True)\n"
                      ")")
    assert isinstance(m.out_proj, nn.Linear)
    assert list(m.state_dict()) == ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]
    layer = nn.TransformerEncoderLayer(8, 2, 16)
    assert "    (out_proj): NonDynamicallyQuantizableLinear(in_features=8, out_features=8, bias=True)\n" in str(layer)


def test_bias_kv_and_zero_attn_are_appended_source_positions():
    m = nn.MultiheadAttention(6, 3, add_bias_kv=True, add_zero_attn=True, batch_first=True).double()
    assert [n for n, _ in m.named_parameters()] == ["in_proj_weight", "in_proj_bias", "bias_k", "bias_v",
                                                   "out_proj.weight", "out_proj.bias"]
    assert m.bias_k.shape == (1, 1, 6) and m.bias_v.shape == (1, 1, 6)
    q, kv = rng.standard_normal((2, 4, 6)), rng.standard_normal((2, 5, 6))
    pad = np.zeros((2, 5), bool)
    pad[1, 1:] = True
    out, weights = m(ddpc.tensor(q), ddpc.tensor(kv), ddpc.tensor(kv), key_padding_mask=ddpc.tensor(pad),
                     average_attn_weights=False)
    assert out.shape == (2, 4, 6) and weights.shape == (2, 3, 4, 7)
    w, b = m.in_proj_weight.detach().numpy(), m.in_proj_bias.detach().numpy()

    def heads(x, i, extra):
        y = np.concatenate([x @ w[i * 6:(i + 1) * 6].T + b[i * 6:(i + 1) * 6], np.broadcast_to(extra, (2, 1, 6)),
                            np.zeros((2, 1, 6))], 1)
        return y.reshape(2, -1, 3, 2).transpose(0, 2, 1, 3)

    query = (q @ w[:6].T + b[:6]).reshape(2, 4, 3, 2).transpose(0, 2, 1, 3)
    keep = ~np.concatenate([pad, np.zeros((2, 2), bool)], 1)[:, None, None, :]
    ref, ref_w = ref_attention(query, heads(kv, 1, m.bias_k.detach().numpy()), heads(kv, 2, m.bias_v.detach().numpy()),
                               keep)
    ref = ref.transpose(0, 2, 1, 3).reshape(2, 4, 6) @ m.out_proj.weight.detach().numpy().T + \
        m.out_proj.bias.detach().numpy()
    np.testing.assert_allclose(out.numpy(), ref, atol=1e-12)
    np.testing.assert_allclose(weights.numpy(), ref_w, atol=1e-12)
    out, weights = m(ddpc.randn(4, 6, dtype=ddpc.float64), ddpc.randn(5, 6, dtype=ddpc.float64),
                     ddpc.randn(5, 6, dtype=ddpc.float64), attn_mask=ddpc.zeros(4, 5, dtype=ddpc.float64))
    assert out.shape == (4, 6) and weights.shape == (4, 7)
    assert nn.MultiheadAttention(6, 3).bias_k is None


def test_encoder_layer_is_post_or_pre_norm_residual():
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, norm_first=True).double()
    x = ddpc.tensor(rng.standard_normal((2, 3, 8)))
    h = x + layer.self_attn(layer.norm1(x), layer.norm1(x), layer.norm1(x))[0]
    want = h + layer.linear2(F.relu(layer.linear1(layer.norm2(h))))
    np.testing.assert_allclose(layer(x).numpy(), want.numpy(), atol=1e-12)
    with pytest.raises(ValueError, match="relu/gelu"):
        nn.TransformerEncoderLayer(8, 2, activation="tanh")


def test_a_two_layer_encoder_learns():
    ddpc.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 32, dropout=0.1, activation="gelu", batch_first=True)
    enc = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(8))
    assert enc.layers[0] is not layer and enc.layers[0].linear1.weight is not enc.layers[1].linear1.weight
    x, y = ddpc.randn(4, 5, 8), ddpc.randn(4, 5, 8)
    mask = ddpc.tensor(np.triu(np.ones((5, 5), np.uint8), 1))
    opt = ddpc.optim.Adam(enc.parameters(), lr=1e-2)
    losses = []
    for _ in range(20):
        loss = F.mse_loss(enc(x, mask=mask, is_causal=True), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0], losses


def test_decoder_layer_is_post_or_pre_norm_residual_with_cross_attention():
    for norm_first in (False, True):
        layer = nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, activation=F.gelu, norm_first=norm_first).double()
        assert [n for n, _ in layer.named_children()] == ["self_attn", "multihead_attn", "linear1", "dropout",
                                                          "linear2", "norm1", "norm2", "norm3", "dropout1",
                                                          "dropout2", "dropout3"]
        tgt, memory = ddpc.tensor(rng.standard_normal((3, 2, 8))), ddpc.tensor(rng.standard_normal((5, 2, 8)))
        mask = nn.Transformer.generate_square_subsequent_mask(3, dtype=ddpc.float64)

        def sa(x):
            return layer.self_attn(x, x, x, attn_mask=mask)[0]

        def mha(x):
            return layer.multihead_attn(x, memory, memory)[0]

        def ff(x):
            return layer.linear2(F.gelu(layer.linear1(x)))

        if norm_first:
            x = tgt + sa(layer.norm1(tgt))
            x = x + mha(layer.norm2(x))
            want = x + ff(layer.norm3(x))
        else:
            x = layer.norm1(tgt + sa(tgt))
            x = layer.norm2(x + mha(x))
            want = layer.norm3(x + ff(x))
        np.testing.assert_allclose(layer(tgt, memory, tgt_mask=mask, tgt_is_causal=True).numpy(), want.numpy(),
                                   atol=1e-12)
    with pytest.raises(ValueError, match="relu/gelu"):
        nn.TransformerDecoderLayer(8, 2, activation="tanh")
    unbiased = nn.TransformerDecoderLayer(8, 2, 16, bias=False)
    assert not [n for n, _ in unbiased.named_parameters() if "bias" in n] and unbiased.norm3.bias is None


def test_decoder_and_transformer_shapes_masks_and_errors():
    layer = nn.TransformerDecoderLayer(8, 2, 16, batch_first=True)
    dec = nn.TransformerDecoder(layer, 3, norm=nn.LayerNorm(8))
    assert len(dec.layers) == 3 and dec.layers[0] is not layer and dec.num_layers == 3
    pad = ddpc.tensor(np.array([[0, 0, 1], [0, 0, 0]], np.uint8))
    out = dec(ddpc.randn(2, 3, 8), ddpc.randn(2, 5, 8), tgt_mask=nn.Transformer.generate_square_subsequent_mask(3),
              tgt_key_padding_mask=pad, memory_mask=ddpc.zeros(3, 5))
    assert out.shape == (2, 3, 8)
    assert dec(ddpc.randn(3, 8), ddpc.randn(5, 8)).shape == (3, 8)
    with pytest.raises(ValueError, match="memory_mask|attn_mask"):
        dec(ddpc.randn(2, 3, 8), ddpc.randn(2, 5, 8), memory_mask=ddpc.zeros(3, 4))

    model = nn.Transformer(8, 2, 2, 1, 16, dropout=0.0)
    assert [n for n, _ in model.named_children()] == ["encoder", "decoder"]
    assert isinstance(model.encoder.norm, nn.LayerNorm) and isinstance(model.decoder.norm, nn.LayerNorm)
    assert len(model.encoder.layers) == 2 and len(model.decoder.layers) == 1
    assert model.d_model == 8 and model.nhead == 2 and not model.batch_first
    for name, p in model.named_parameters():
        if p.ndim > 1:  # xavier-uniform: within sqrt(6 / (fan_in + fan_out))
            assert np.abs(p.detach().numpy()).max() <= np.sqrt(6 / sum(p.shape)), name
    src, tgt = ddpc.randn(6, 2, 8), ddpc.randn(4, 2, 8)
    assert model(src, tgt, tgt_mask=model.generate_square_subsequent_mask(4)).shape == (4, 2, 8)
    assert model(ddpc.randn(6, 8), ddpc.randn(4, 8)).shape == (4, 8)
    with pytest.raises(ValueError, match="batch number"):
        model(src, ddpc.randn(4, 3, 8))
    with pytest.raises(ValueError, match="d_model"):
        model(ddpc.randn(6, 2, 4), ddpc.randn(4, 2, 4))
    custom = nn.Linear(8, 8)
    assert nn.Transformer(8, 2, custom_encoder=custom, num_decoder_layers=1, dim_feedforward=8).encoder is custom

    mask = nn.Transformer.generate_square_subsequent_mask(3, dtype=ddpc.float64)
    assert mask.dtype == ddpc.float64
    np.testing.assert_array_equal(mask.numpy(), np.where(np.triu(np.ones((3, 3), bool), 1), -np.inf, 0.0))


def test_a_small_transformer_learns_to_copy():
    ddpc.manual_seed(0)
    model = nn.Transformer(8, 2, 1, 1, 32, dropout=0.0, batch_first=True)
    src = ddpc.randn(4, 5, 8)
    tgt_mask = nn.Transformer.generate_square_subsequent_mask(5)
    opt = ddpc.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(20):
        loss = F.mse_loss(model(src, src, tgt_mask=tgt_mask), src)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0], losses


def test_a_query_masked_from_every_key_attends_to_nothing():
    """As PyTorch's fused attention: its output row is 0 and no gradient is NaN
    (a plain softmax over all -inf gives NaN); MultiheadAttention likewise
    without weights (with them, NaN as in PyTorch)."""
    rng = np.random.default_rng(0)
    q, k, v = (ddpc.from_numpy(rng.standard_normal((2, 3, 4))).requires_grad_() for _ in range(3))
    keep = np.ones((2, 3, 3), bool)
    keep[0, 1] = False  # query 1 of batch 0 sees no key
    for mask in (ddpc.from_numpy(keep), ddpc.from_numpy(np.where(keep, 0.0, -np.inf))):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        assert out[0, 1].tolist() == [0.0] * 4 and np.isfinite(out.numpy()).all()
        out.sum().backward()
        for t in (q, k, v):
            assert np.isfinite(t.grad.numpy()).all()
            t.grad = None
        # the other rows are plain attention
        s = (q.detach().numpy() @ k.detach().numpy().transpose(0, 2, 1)) / 2
        w = np.exp(s[1] - s[1].max(-1, keepdims=True))
        np.testing.assert_allclose(out[1].detach().numpy(), (w / w.sum(-1, keepdims=True)) @ v.detach().numpy()[1],
                                   rtol=1e-6)
    mha = nn.MultiheadAttention(4, 2, batch_first=True, dtype=ddpc.float64)
    padded = ddpc.from_numpy(np.array([[True, True, True], [False, False, True]]))
    out, _ = mha(q, k, v, key_padding_mask=padded, need_weights=False)
    assert out[0].tolist() == mha.out_proj.bias.expand(3, 4).tolist()  # attention of 0, then the projection
    assert np.isnan(mha(q, k, v, key_padding_mask=padded)[0][0].numpy()).all()


@pytest.mark.parametrize("causal", [False, True])
def test_half_precision_attention_on_the_host_rounds_once(causal):
    # As PyTorch's CPU kernel: bfloat16 scores and weights are kept in float32 and only the output is rounded,
    # so each output is within half a bfloat16 ulp of the exact attention of the same (rounded) inputs.
    rng = np.random.default_rng(0)
    q, k, v = [ddpc.from_numpy(rng.standard_normal((2, 4, 64, 32)).astype(np.float32)).to(dtype=ddpc.bfloat16)
               for _ in range(3)]
    exact = F.scaled_dot_product_attention(*[t.double() for t in (q, k, v)], is_causal=causal).numpy()
    got = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    assert got.dtype is ddpc.bfloat16
    err = np.abs(got.float().numpy() - exact)
    assert np.all(err <= np.abs(exact) * 2.0 ** -8 + 1e-6), err.max()

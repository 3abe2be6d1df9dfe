"""Optional: scaled_dot_product_attention, MultiheadAttention (also with
add_bias_kv and add_zero_attn), the Transformer's encoder and decoder and
Transformer itself against PyTorch given the same weights (skipped when torch
is not installed; run in a child process that imports torch before ddpc)."""

import sys

import numpy as np
import pytest
from procs import run_torch_case


@pytest.mark.parametrize("case", ["sdpa", "modules", "extra_kv", "decoders", "init", "printed"])
def test_matches_pytorch(case):
    out = run_torch_case(__file__, case)
    assert out.strip().endswith("ok"), out


def _run(lib, fn, inputs, g):
    """fn(*tensors) and backward with g: output and input gradients."""
    ts = [lib.tensor(x, requires_grad=True) for x in inputs]
    out = fn(*ts)
    out.backward(lib.tensor(g))
    return [out.detach().numpy()] + [t.grad.numpy() for t in ts]


def sdpa():
    import torch
    import ddpc

    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((2, 3, 6, 5)), rng.standard_normal((2, 3, 6, 2))
    keep = rng.random((4, 6)) > 0.3
    keep[:, 0] = True
    add = rng.standard_normal((3, 4, 6))
    g = rng.standard_normal((2, 3, 4, 2))
    for kw in ({}, {"is_causal": True}, {"scale": 0.5}, {"mask": keep}, {"mask": add}):
        def fn(lib, kw=kw):
            mask = kw.get("mask")
            extra = {k: v for k, v in kw.items() if k != "mask"}
            return lambda a, b, c: lib.nn.functional.scaled_dot_product_attention(
                a, b, c, attn_mask=None if mask is None else lib.tensor(mask), **extra)
        for want, ours in zip(_run(torch, fn(torch), (q, k, v), g), _run(ddpc, fn(ddpc), (q, k, v), g)):
            np.testing.assert_allclose(ours, want, atol=1e-10, err_msg=str(kw))
    a, b = rng.standard_normal((2, 1, 3, 4)), rng.standard_normal((5, 4, 2))
    g = rng.standard_normal((2, 5, 3, 2))
    for want, ours in zip(_run(torch, torch.matmul, (a, b), g), _run(ddpc, ddpc.matmul, (a, b), g)):
        np.testing.assert_allclose(ours, want, atol=1e-10)


def _copy_weights(src, dst):
    """dst's parameters set from src's (torch to ddpc), by name."""
    import ddpc

    theirs = dict(src.named_parameters())
    with ddpc.no_grad():
        for name, p in dst.named_parameters():
            p.copy_(ddpc.tensor(theirs[name].detach().numpy()))


def modules():
    import torch
    import ddpc

    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 3, 8))
    causal = np.triu(np.ones((5, 5), bool), 1)
    pad = np.zeros((3, 5), bool)
    pad[2, 3:] = True
    makers = [lambda nn: nn.MultiheadAttention(8, 2),
              lambda nn: nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0), 2, norm=nn.LayerNorm(8)),
              lambda nn: nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 4, 16, dropout=0.0, activation="gelu",
                                                                          norm_first=True), 2)]
    for i, make in enumerate(makers):
        theirs, ours = make(torch.nn).double(), make(ddpc.nn).double()
        assert [n for n, _ in theirs.named_parameters()] == [n for n, _ in ours.named_parameters()]
        _copy_weights(theirs, ours)
        results = []
        for lib, m in ((torch, theirs), (ddpc, ours)):
            t = lib.tensor(x, requires_grad=True)
            mask, kpm = lib.tensor(causal), lib.tensor(pad)
            out = m(t, t, t, key_padding_mask=kpm, attn_mask=mask)[0] if i == 0 else \
                m(t, mask=mask, src_key_padding_mask=kpm)
            out.backward(lib.tensor(np.cos(np.arange(out.numel())).reshape(tuple(out.shape))))
            results.append([out.detach().numpy(), t.grad.numpy()] + [p.grad.numpy() for p in m.parameters()])
        for want, got in zip(*results):
            np.testing.assert_allclose(got, want, atol=1e-9, err_msg=f"model {i}")


def _compare(make, call, inputs, label):
    """make(lib.nn) built in float64 for torch and ddpc with torch's weights,
    call(module, lib, *tensors) run and backpropagated: outputs, input and
    parameter gradients must agree."""
    import torch
    import ddpc

    theirs, ours = make(torch.nn).double(), make(ddpc.nn).double()
    assert [n for n, _ in theirs.named_parameters()] == [n for n, _ in ours.named_parameters()], label
    _copy_weights(theirs, ours)
    results = []
    for lib, m in ((torch, theirs), (ddpc, ours)):
        ts = [lib.tensor(x, requires_grad=True) for x in inputs]
        out = call(m, lib, *ts)
        out.backward(lib.tensor(np.cos(np.arange(out.numel())).reshape(tuple(out.shape))))
        results.append([out.detach().numpy()] + [t.grad.numpy() for t in ts] + [p.grad.numpy() for p in m.parameters()])
    for want, got in zip(*results):
        assert got.shape == want.shape, label
        np.testing.assert_allclose(got, want, atol=1e-9, err_msg=label)


def extra_kv():
    """add_bias_kv and add_zero_attn, with and without masks, batched and not; the weights too."""
    rng = np.random.default_rng(2)
    q, kv = rng.standard_normal((4, 3, 8)), rng.standard_normal((5, 3, 8))
    causal = np.triu(np.ones((4, 5), bool), 1)
    pad = np.zeros((3, 5), bool)
    pad[1, 2:] = True
    additive = rng.standard_normal((3 * 2, 4, 5))
    for bias_kv, zero_attn in ((True, False), (False, True), (True, True)):
        def make(nn, b=bias_kv, z=zero_attn):
            return nn.MultiheadAttention(8, 2, add_bias_kv=b, add_zero_attn=z)

        for masks in ({}, {"attn_mask": causal}, {"key_padding_mask": pad},
                      {"attn_mask": causal, "key_padding_mask": pad}, {"attn_mask": additive, "key_padding_mask": pad}):
            for average in (True, False):
                def call(m, lib, a, b, masks=masks, average=average):
                    out, w = m(a, b, b, average_attn_weights=average, **{k: lib.tensor(v) for k, v in masks.items()})
                    return lib.cat([out.reshape(-1), w.reshape(-1)])
                _compare(make, call, (q, kv), f"bias_kv={bias_kv} zero_attn={zero_attn} {list(masks)} {average}")
        _compare(make, lambda m, lib, a, b: lib.cat([t.reshape(-1) for t in m(a, b, b)]), (q[:, 0], kv[:, 0]),
                 f"unbatched bias_kv={bias_kv} zero_attn={zero_attn}")
    _compare(lambda nn: nn.MultiheadAttention(6, 3, add_bias_kv=True, add_zero_attn=True, kdim=4, vdim=2,
                                              batch_first=True),
             lambda m, lib, a, b, c: m(a, b, c)[0], (rng.standard_normal((2, 3, 6)), rng.standard_normal((2, 5, 4)),
                                                    rng.standard_normal((2, 5, 2))), "kdim/vdim")


def decoders():
    """TransformerDecoderLayer, TransformerDecoder and Transformer with every mask."""
    import torch
    import ddpc

    rng = np.random.default_rng(3)
    tgt, memory = rng.standard_normal((4, 3, 8)), rng.standard_normal((6, 3, 8))
    causal = np.triu(np.ones((4, 4), bool), 1)
    memory_mask = rng.standard_normal((4, 6))
    tgt_pad, mem_pad = np.zeros((3, 4), bool), np.zeros((3, 6), bool)
    tgt_pad[2, 3:] = True
    mem_pad[0, 4:] = True

    def masks(lib):
        return {"tgt_mask": lib.tensor(causal), "memory_mask": lib.tensor(memory_mask),
                "tgt_key_padding_mask": lib.tensor(tgt_pad), "memory_key_padding_mask": lib.tensor(mem_pad)}

    layers = [lambda nn: nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0),
              lambda nn: nn.TransformerDecoderLayer(8, 4, 16, dropout=0.0, activation="gelu", norm_first=True),
              lambda nn: nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, activation=nn.functional.silu, bias=False)]
    for i, make in enumerate(layers):
        _compare(make, lambda m, lib, a, b: m(a, b, **masks(lib), tgt_is_causal=True), (tgt, memory), f"layer {i}")
        _compare(make, lambda m, lib, a, b: m(a, b), (tgt, memory), f"layer {i} unmasked")
        _compare(lambda nn, make=make: nn.TransformerDecoder(make(nn), 2, norm=nn.LayerNorm(8)),
                 lambda m, lib, a, b: m(a, b, **masks(lib)), (tgt, memory), f"decoder {i}")
    _compare(lambda nn: nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, batch_first=True),
             lambda m, lib, a, b: m(a, b, tgt_mask=lib.tensor(causal)),
             (tgt.transpose(1, 0, 2).copy(), memory.transpose(1, 0, 2).copy()), "batch_first layer")
    _compare(lambda nn: nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0), 2),
             lambda m, lib, a, b: m(a, b, tgt_mask=lib.tensor(causal), tgt_key_padding_mask=lib.tensor(tgt_pad[0]),
                                    memory_key_padding_mask=lib.tensor(mem_pad[0])),
             (tgt[:, 0], memory[:, 0]), "unbatched decoder")
    src = rng.standard_normal((6, 3, 8))
    for kwargs in ({}, {"norm_first": True, "activation": "gelu"}, {"batch_first": True}):
        def make(nn, kw=kwargs):
            return nn.Transformer(8, 2, 2, 1, 16, dropout=0.0, **kw)

        def arrange(x, swap=kwargs.get("batch_first")):
            return x.transpose(1, 0, 2).copy() if swap else x

        def call(m, lib, a, b):
            mask = m.generate_square_subsequent_mask(4, dtype=lib.float64)
            return m(a, b, src_key_padding_mask=lib.tensor(mem_pad), tgt_mask=mask, memory_mask=lib.tensor(memory_mask),
                     tgt_key_padding_mask=lib.tensor(tgt_pad), memory_key_padding_mask=lib.tensor(mem_pad))
        _compare(make, call, (arrange(src), arrange(tgt)), f"transformer {kwargs}")
    for sz in (1, 4):
        want = torch.nn.Transformer.generate_square_subsequent_mask(sz).numpy()
        got = ddpc.nn.Transformer.generate_square_subsequent_mask(sz)
        assert got.dtype == ddpc.float32
        np.testing.assert_array_equal(got.numpy(), want)


def init():
    """The initial parameters' distributions: xavier for >1-d, zeros for the biases, bias_k/v xavier-normal."""
    import torch
    import ddpc

    for lib in (torch, ddpc):
        lib.manual_seed(0)
        m = lib.nn.Transformer(32, 4, 1, 1, 64)
        for name, p in m.named_parameters():
            x = p.detach().numpy()
            if x.ndim > 1:
                bound = np.sqrt(6 / (x.shape[0] + x.shape[1]))
                assert np.abs(x).max() <= bound and np.abs(x).max() > 0.9 * bound, (lib.__name__, name)
            elif "norm" in name and name.endswith("weight"):
                assert (x == 1).all(), name
        a = lib.nn.MultiheadAttention(400, 4, add_bias_kv=True)
        assert tuple(a.bias_k.shape) == (1, 1, 400)
        for p in (a.bias_k, a.bias_v):
            assert abs(p.detach().numpy().std() - np.sqrt(2 / 800)) < 0.15 * np.sqrt(2 / 800), lib.__name__
        assert np.all(a.in_proj_bias.detach().numpy() == 0)


def printed():
    """print(model) of a Transformer and of MultiheadAttention in other forms,
    and the state_dict keys, as PyTorch's."""
    import torch
    import ddpc

    makes = [
        lambda nn: nn.Transformer(d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=1, dim_feedforward=16),
        lambda nn: nn.MultiheadAttention(8, 2, kdim=4, vdim=6, add_bias_kv=True, batch_first=True, bias=False),
        lambda nn: nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, norm_first=True, batch_first=True), 1,
                                         enable_nested_tensor=False),
    ]
    for make in makes:
        theirs, ours = make(torch.nn), make(ddpc.nn)
        assert str(ours) == str(theirs), f"ddpc:\n{ours}\ntorch:\n{theirs}"
        assert list(ours.state_dict()) == list(theirs.state_dict()), (list(ours.state_dict()),
                                                                      list(theirs.state_dict()))


if __name__ == "__main__":
    import torch  # noqa: F401  (before ddpc, see the module docstring)

    globals()[sys.argv[1]]()
    print("ok")

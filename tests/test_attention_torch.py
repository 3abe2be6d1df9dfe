"""Optional: scaled_dot_product_attention, MultiheadAttention and
TransformerEncoder against PyTorch given the same weights (skipped when torch
is not installed; run in a child process that imports torch before ddpc)."""

import sys

import numpy as np
import pytest
from procs import run_torch_case


@pytest.mark.parametrize("case", ["sdpa", "modules"])
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


if __name__ == "__main__":
    import torch  # noqa: F401  (before ddpc, see the module docstring)

    globals()[sys.argv[1]]()
    print("ok")

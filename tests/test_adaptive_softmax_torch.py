"""Optional: AdaptiveLogSoftmaxWithLoss against PyTorch's (skipped when torch
is not installed): repr and state_dict keys and shapes; with PyTorch's
parameters loaded, output, loss, the gradients of the input and of every
parameter, log_prob and predict in float64 within 1e-12, batched and
unbatched, with targets in every cluster or in some only.

Each comparison runs in a child process that imports torch before ddpc (see
test_nn_torch.py) and fails there, printing what differs.
"""

import sys

import pytest
from procs import run_torch_case


def test_matches_pytorch():
    out = run_torch_case(__file__)
    assert out.strip().endswith("ok"), out


def _run(lib, module, x, target):
    import numpy as np

    xt = lib.tensor(x, requires_grad=True)
    out = module(xt, lib.tensor(target))
    w = np.random.default_rng(1).standard_normal(tuple(out.output.shape))
    (out.loss + (out.output * lib.tensor(w)).sum()).backward()
    grads = {n: np.asarray(p.grad.numpy()) for n, p in module.named_parameters() if p.grad is not None}
    batch = x if x.ndim == 2 else x[None]
    return dict(output=np.asarray(out.output.detach().numpy()), loss=np.asarray(out.loss.detach().numpy()),
                input_grad=np.asarray(xt.grad.numpy()), grads=grads,
                log_prob=np.asarray(module.log_prob(lib.tensor(batch)).detach().numpy()),
                predict=np.asarray(module.predict(lib.tensor(batch)).numpy()))


def main():
    import numpy as np
    import torch

    import ddpc

    torch.set_default_dtype(torch.float64)
    rng = np.random.default_rng(0)
    cases = [(16, 20, [4, 10], 4.0, False), (12, 30, [2, 5, 17], 2.0, True), (8, 6, [5], 4.0, False)]
    for in_features, n_classes, cutoffs, div_value, head_bias in cases:
        kw = dict(div_value=div_value, head_bias=head_bias)
        t = torch.nn.AdaptiveLogSoftmaxWithLoss(in_features, n_classes, cutoffs, **kw)
        d = ddpc.nn.AdaptiveLogSoftmaxWithLoss(in_features, n_classes, cutoffs, **kw, dtype=ddpc.float64)
        assert repr(d) == repr(t), (repr(d), repr(t))
        assert {k: tuple(v.shape) for k, v in d.state_dict().items()} == \
            {k: tuple(v.shape) for k, v in t.state_dict().items()}
        d.load_state_dict({k: ddpc.tensor(v.numpy()) for k, v in t.state_dict().items()})
        # Scaled up, so that predict picks classes outside the shortlist too.
        for x, target in ((rng.standard_normal((9, in_features)) * 3, rng.integers(0, n_classes, 9)),
                          (rng.standard_normal((5, in_features)) * 3, rng.integers(0, cutoffs[0], 5)),
                          (rng.standard_normal(in_features) * 3, np.int64(n_classes - 1))):
            for m in (d, t):
                m.zero_grad()
            got, want = _run(ddpc, d, x, target), _run(torch, t, x, target)
            for key in ("output", "loss", "input_grad", "log_prob"):
                assert got[key].shape == want[key].shape, (key, got[key].shape, want[key].shape)
                np.testing.assert_allclose(got[key], want[key], rtol=1e-12, atol=1e-12, err_msg=key)
            np.testing.assert_array_equal(got["predict"], want["predict"])
            assert sorted(got["grads"]) == sorted(want["grads"])
            for k in want["grads"]:
                np.testing.assert_allclose(got["grads"][k], want["grads"][k], rtol=1e-12, atol=1e-12, err_msg=k)
            print(f"cutoffs {cutoffs}, input {x.shape}: output, loss, gradients, log_prob and predict "
                  f"(classes {sorted(set(want['predict'].tolist()))}) match")


if __name__ == "__main__":
    import torch  # noqa: F401  (first, see the module docstring)

    main()
    print("ok")

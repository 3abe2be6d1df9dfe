"""Optional: the 3-d padding layers, Dropout3d and FeatureAlphaDropout
against PyTorch's (skipped when torch is not installed): repr, outputs and
input gradients of every padding mode over batched and unbatched inputs in
float64 (outputs equal, as padding only moves elements; gradients within
1e-13, as they add repeated elements up in another order);
for the dropouts, eval mode and p of 0 and 1 exactly, and in training, the
channels both libraries keep (or both drop) get the same values and
gradients.

Each comparison runs in a child process that imports torch before ddpc (see
test_nn_torch.py) and fails there, printing what differs.
"""

import sys

import pytest
from procs import run_torch_case


@pytest.mark.parametrize("case", ["padding", "dropout"])
def test_matches_pytorch(case):
    out = run_torch_case(__file__, case)
    assert out.strip().endswith("ok"), out


def _output_and_grad(lib, module, x, seed=1):
    import numpy as np

    xt = lib.tensor(x, requires_grad=True)
    out = module(xt)
    w = np.random.default_rng(seed).standard_normal(tuple(out.shape))
    (out * lib.tensor(w)).sum().backward()
    return np.asarray(out.detach().numpy()), np.asarray(xt.grad.numpy())


PADS = [
    ("ZeroPad3d", (1,)), ("ZeroPad3d", ((1, 0, 2, 1, 0, 3),)), ("ZeroPad3d", ((-1, 2, 0, -1, 1, 1),)),
    ("ConstantPad3d", (2, 3.5)), ("ConstantPad3d", ((0, 1, 2, 0, 1, 2), -1.0)),
    ("ReflectionPad3d", (1,)), ("ReflectionPad3d", ((2, 0, 1, 2, 0, 1),)),
    ("ReplicationPad3d", (3,)), ("ReplicationPad3d", ((0, 2, 3, 1, 1, 0),)),
    ("CircularPad3d", (2,)), ("CircularPad3d", ((1, 3, 0, 2, 2, 1),)),
]


def _case_padding():
    import numpy as np
    import torch

    import ddpc

    rng = np.random.default_rng(0)
    for name, args in PADS:
        t, d = getattr(torch.nn, name)(*args), getattr(ddpc.nn, name)(*args)
        assert repr(d) == repr(t), (repr(d), repr(t))
        for shape in ((2, 3, 3, 4, 5), (3, 4, 3, 4)):
            x = rng.standard_normal(shape)
            got, want = _output_and_grad(ddpc, d, x), _output_and_grad(torch, t, x)
            for what, a, b, tol in zip(("output", "input gradient"), got, want, (0, 1e-13)):
                assert a.shape == b.shape, (name, args, shape, what, a.shape, b.shape)
                np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=f"{name}{args} {shape} {what}")
            print(repr(d), shape, "matches")


def _case_dropout():
    import numpy as np
    import torch

    import ddpc

    rng = np.random.default_rng(0)
    for name, shapes in (("Dropout3d", ((8, 16, 2, 3, 2), (16, 2, 3, 2))),
                         ("FeatureAlphaDropout", ((8, 16, 2, 3), (16, 5), (6, 7, 2, 2, 2)))):
        for p in (0.0, 0.3, 0.5, 1.0):
            t, d = getattr(torch.nn, name)(p), getattr(ddpc.nn, name)(p)
            assert repr(d) == repr(t)
            for shape in shapes:
                x = rng.standard_normal(shape)
                t.eval(), d.eval()
                for a, b in zip(_output_and_grad(ddpc, d, x), _output_and_grad(torch, t, x)):
                    np.testing.assert_array_equal(a, b)
                t.train(), d.train()
                got, want = _output_and_grad(ddpc, d, x), _output_and_grad(torch, t, x)
                # A channel (of the last dims after the first one or two) is kept where its input gradient is
                # not 0; FeatureAlphaDropout takes dims 0 and 1 as (N, C), whatever the input's size.
                lead = 1 if name == "Dropout3d" and len(shape) == 4 else 2
                channels = (-1,) + tuple(shape[lead:])
                kept_d = np.abs(got[1].reshape(channels)).max(axis=tuple(range(1, 1 + len(shape) - lead))) > 0
                kept_t = np.abs(want[1].reshape(channels)).max(axis=tuple(range(1, 1 + len(shape) - lead))) > 0
                if p in (0.0, 1.0):
                    assert (kept_d == kept_t).all() and kept_d.all() == (p == 0.0)
                for kept in (True, False):
                    both = (kept_d == kept) & (kept_t == kept)
                    for a, b in zip(got, want):
                        np.testing.assert_allclose(a.reshape(channels)[both], b.reshape(channels)[both], rtol=1e-14,
                                                   atol=1e-15, err_msg=f"{name} p={p} {shape} kept={kept}")
                print(name, p, shape, f"kept {kept_d.mean():.2f} of the channels (PyTorch {kept_t.mean():.2f}); "
                      "kept and dropped channels match")


if __name__ == "__main__":
    import torch  # noqa: F401  (first, see the module docstring)

    torch.set_default_dtype(torch.float64)
    globals()["_case_" + sys.argv[1]]()
    print("ok")

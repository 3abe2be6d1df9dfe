"""Optional: the lazy modules of ddpc.nn against PyTorch's (skipped when
torch is not installed): repr and state_dict keys before and after the first
forward, the class each becomes and its parameter and buffer shapes; then,
with PyTorch's initialised parameters loaded, outputs, running statistics
and gradients (input and parameters) in float64 within 1e-10; and a lazy
module given an initialised state dict before its first forward.

Each comparison runs in a child process that imports torch before ddpc (see
test_nn_torch.py) and fails there, printing what differs.
"""

import sys

import pytest
from procs import run_torch_case


@pytest.mark.parametrize("case", ["first_forward", "load_before_forward"])
def test_matches_pytorch(case):
    out = run_torch_case(__file__, case)
    assert out.strip().endswith("ok"), out


# (class name, constructor arguments, input shape)
CASES = [
    ("LazyLinear", dict(out_features=4), (3, 5)), ("LazyLinear", dict(out_features=2, bias=False), (2, 3, 6)),
    ("LazyConv1d", dict(out_channels=4, kernel_size=3, padding=1), (2, 3, 7)),
    ("LazyConv1d", dict(out_channels=4, kernel_size=2, groups=2, bias=False), (4, 6)),
    ("LazyConv2d", dict(out_channels=3, kernel_size=(2, 3), stride=2, dilation=(1, 2)), (2, 4, 7, 8)),
    ("LazyConv2d", dict(out_channels=2, kernel_size=3, padding="same", padding_mode="reflect"), (1, 3, 5, 5)),
    ("LazyConv3d", dict(out_channels=2, kernel_size=2, padding=1), (2, 3, 4, 3, 4)),
    ("LazyConvTranspose1d", dict(out_channels=4, kernel_size=3, stride=2, output_padding=1), (2, 3, 5)),
    ("LazyConvTranspose2d", dict(out_channels=4, kernel_size=2, groups=2, dilation=2), (2, 4, 3, 4)),
    ("LazyConvTranspose3d", dict(out_channels=2, kernel_size=2, stride=2, bias=False), (1, 3, 2, 3, 2)),
    ("LazyBatchNorm1d", {}, (6, 3)), ("LazyBatchNorm1d", dict(momentum=None, bias=False), (4, 3, 5)),
    ("LazyBatchNorm2d", dict(affine=False), (3, 2, 4, 4)),
    ("LazyBatchNorm3d", dict(track_running_stats=False, eps=1e-3), (2, 3, 2, 3, 2)),
    ("LazyInstanceNorm1d", {}, (2, 3, 6)), ("LazyInstanceNorm1d", dict(affine=False), (4, 3, 5)),
    ("LazyInstanceNorm2d", dict(track_running_stats=False), (2, 3, 4, 5)),
    ("LazyInstanceNorm3d", dict(momentum=0.3), (2, 2, 3, 4, 3)),
]


def _arrays(module):
    import numpy as np

    return {k: np.asarray(v.detach().double().numpy()) for k, v in module.state_dict().items()}


def _forward_backward(lib, module, x):
    """Output, input gradient and parameter gradients of a seeded weighted sum of the output."""
    import numpy as np

    xt = lib.tensor(x, requires_grad=True)
    out = module(xt)
    w = np.random.default_rng(1).standard_normal(tuple(out.shape))
    (out * lib.tensor(w)).sum().backward()
    grads = {n: np.asarray(p.grad.numpy()) for n, p in module.named_parameters()}
    return np.asarray(out.detach().numpy()), np.asarray(xt.grad.numpy()), grads


def _check_same(label, got, want, tol=1e-10):
    import numpy as np

    assert got.shape == want.shape, f"{label}: shape {got.shape}, PyTorch's {want.shape}"
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=label)


def _case_first_forward():
    import numpy as np
    import torch

    import ddpc

    torch.set_default_dtype(torch.float64)
    rng = np.random.default_rng(0)
    for name, kw, shape in CASES:
        x = rng.standard_normal(shape)
        t = getattr(torch.nn, name)(**kw)
        d = getattr(ddpc.nn, name)(**kw, dtype=ddpc.float64)
        label = f"{name} {kw}"
        assert repr(d) == repr(t), (label, repr(d), repr(t))
        assert list(d.state_dict()) == list(t.state_dict()), label
        assert d.has_uninitialized_params() and t.has_uninitialized_params(), label
        with torch.no_grad():
            t(torch.tensor(x))
        d(ddpc.tensor(x))
        assert type(d).__name__ == type(t).__name__ and repr(d) == repr(t), (label, repr(d), repr(t))
        assert {k: v.shape for k, v in _arrays(d).items()} == {k: v.shape for k, v in _arrays(t).items()}, label
        # Initialised as the layer's own class: the same constants where the values are not random.
        for k, v in _arrays(t).items():
            if "Norm" in name:
                _check_same(f"{label} initial {k}", _arrays(d)[k], v)
        # With PyTorch's parameters, the same forward and backward (in training mode, so batch statistics
        # and running averages are compared too).
        d.load_state_dict({k: ddpc.tensor(v) for k, v in _arrays(t).items()})
        got = _forward_backward(ddpc, d, x)
        want = _forward_backward(torch, t, x)
        _check_same(f"{label} output", got[0], want[0])
        _check_same(f"{label} input gradient", got[1], want[1])
        assert sorted(got[2]) == sorted(want[2]), label
        for k in want[2]:
            _check_same(f"{label} gradient of {k}", got[2][k], want[2][k])
        for k, v in _arrays(t).items():
            _check_same(f"{label} {k} after a step", _arrays(d)[k], v)
        print(label, "->", repr(d), "matches")


def _case_load_before_forward():
    """A lazy module loads an initialised state dict (its tensors take their shapes), then its forward
    matches PyTorch's over the same state; an uninitialised state dict loads into a lazy module and
    leaves it lazy."""
    import numpy as np
    import torch

    import ddpc

    torch.set_default_dtype(torch.float64)
    rng = np.random.default_rng(1)
    # PyTorch's instance norms loaded before their first forward keep num_features 0 and refuse every input.
    for name, kw, shape in (c for c in CASES if "Instance" not in c[0]):
        x = rng.standard_normal(shape)
        t = getattr(torch.nn, name)(**kw)
        with torch.no_grad():
            t(torch.tensor(x))
        state = _arrays(t)
        d = getattr(ddpc.nn, name)(**kw, dtype=ddpc.float64)
        d.load_state_dict(getattr(ddpc.nn, name)(**kw).state_dict())
        assert d.has_uninitialized_params(), name
        d.load_state_dict({k: ddpc.tensor(v) for k, v in state.items()})
        t2 = getattr(torch.nn, name)(**kw)
        t2.load_state_dict(t.state_dict())
        _check_same(f"{name} {kw} output", _forward_backward(ddpc, d, x)[0], _forward_backward(torch, t2, x)[0])
        assert type(d).__name__ == type(t2).__name__, name
        print(name, kw, "loaded before its first forward: matches")


if __name__ == "__main__":
    import torch  # noqa: F401  (first, see the module docstring)

    globals()["_case_" + sys.argv[1]]()
    print("ok")

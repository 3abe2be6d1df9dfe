"""Optional: weight_norm and spectral_norm parametrizations against PyTorch's
(skipped when torch is not installed): state-dict keys, the originals, the
parametrized weight after power-iteration steps from the same vectors, and
gradients. Runs in a child process that imports torch before ddpc (see
test_nn_torch.py)."""

import sys

import numpy as np
from procs import run_torch_case


def test_matches_pytorch():
    out = run_torch_case(__file__, "compare")
    assert out.strip().endswith("ok"), out


def _pair(lib, make, w, b, **kw):
    m = make(lib).double()
    with lib.no_grad():
        m.weight.copy_(lib.tensor(w))
        m.bias.copy_(lib.tensor(b))
    return m


def compare():
    import torch
    import ddpc

    rng = np.random.default_rng(0)
    makes = [lambda lib: lib.nn.Linear(4, 3), lambda lib: lib.nn.Conv2d(2, 3, 2),
             lambda lib: lib.nn.ConvTranspose2d(3, 2, 2)]
    for make in makes:
        w = rng.standard_normal(tuple(make(torch).weight.shape))
        b = rng.standard_normal(tuple(make(torch).bias.shape))
        x = rng.standard_normal((2, 4) if w.ndim == 2 else (1, w.shape[1] if "Transpose" not in repr(make(torch))
                                                              else w.shape[0], 4, 4))
        for dim in (0, 1, None):
            ms = [_pair(lib, make, w, b) for lib in (torch, ddpc)]
            for lib, m in zip((torch, ddpc), ms):
                lib.nn.utils.parametrizations.weight_norm(m, dim=dim)
            check(ms, x, f"weight_norm {make(torch)} dim={dim}")
        ms = [_pair(lib, make, w, b) for lib in (torch, ddpc)]
        for lib, m in zip((torch, ddpc), ms):
            lib.nn.utils.parametrizations.spectral_norm(m, n_power_iterations=2)
        with torch.no_grad():  # the same starting vectors
            for name in ("_u", "_v"):
                getattr(ms[1].parametrizations.weight[0], name).copy_(
                    ddpc.tensor(getattr(ms[0].parametrizations.weight[0], name).numpy()))
        check(ms, x, f"spectral_norm {make(torch)}")
        for name in ("_u", "_v"):
            np.testing.assert_allclose(getattr(ms[1].parametrizations.weight[0], name).numpy(),
                                       getattr(ms[0].parametrizations.weight[0], name).numpy(), rtol=1e-9)
        ms = [_pair(lib, make, w, b) for lib in (torch, ddpc)]
        for lib, m in zip((torch, ddpc), ms):
            lib.nn.utils.weight_norm(m)
        check(ms, x, f"nn.utils.weight_norm {make(torch)}")


def check(ms, x, what):
    import torch
    import ddpc

    theirs, ours = ms
    assert list(theirs.state_dict()) == list(ours.state_dict()), (what, list(theirs.state_dict()),
                                                                   list(ours.state_dict()))
    for lib, m in ((torch, theirs), (ddpc, ours)):
        out = m(lib.tensor(x))
        (out * out).sum().backward()
    for (name, t), (_, o) in zip(theirs.named_parameters(), ours.named_parameters()):
        np.testing.assert_allclose(o.detach().numpy(), t.detach().numpy(), rtol=1e-9, atol=1e-12, err_msg=what + name)
        np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), rtol=1e-7, atol=1e-10, err_msg=what + name)
    np.testing.assert_allclose(ours.weight.detach().numpy(), theirs.weight.detach().numpy(), rtol=1e-9,
                               err_msg=what)


if __name__ == "__main__":
    import torch  # noqa: F401  (before ddpc, see the module docstring)

    globals()[sys.argv[1]]()
    print("ok")

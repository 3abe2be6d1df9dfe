"""Optional: module hooks, the new layers and creation functions against PyTorch
(skipped when torch is not installed). Each comparison runs in a child process
that imports torch before ddpc (see test_nn_torch.py) and fails there, printing
what differs."""

import sys

import numpy as np
import pytest
from procs import run_torch_case


@pytest.mark.parametrize("case", ["layers", "creation", "hooks", "instance_norm_running_stats"])
def test_matches_pytorch(case):
    out = run_torch_case(__file__, case)
    assert out.strip().endswith("ok"), out


def _layer_run(lib, make, x, g):
    """make(lib.nn)(x) in float64 and backward with g: output, input gradient, parameter gradients."""
    m = make(lib.nn).double()
    t = lib.tensor(x, requires_grad=True)
    out = m(t)
    out.backward(lib.tensor(g))
    return [out.detach().numpy(), t.grad.numpy()] + [p.grad.numpy() for p in m.parameters()]


def layers():
    import torch
    import ddpc

    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 3, 2))
    for make in (lambda nn: nn.GroupNorm(2, 4), lambda nn: nn.GroupNorm(4, 4, affine=False),
                 lambda nn: nn.InstanceNorm2d(4), lambda nn: nn.InstanceNorm2d(4, affine=True),
                 lambda nn: nn.RMSNorm((3, 2)), lambda nn: nn.RMSNorm(2, eps=1e-3),
                 lambda nn: nn.GLU(1), lambda nn: nn.Softmin(dim=2)):
        out = make(torch.nn).double()(torch.tensor(x))
        g = rng.standard_normal(tuple(out.shape))
        want, ours = _layer_run(torch, make, x, g), _layer_run(ddpc, make, x, g)
        assert len(want) == len(ours), make(torch.nn)
        for w, o in zip(want, ours):
            np.testing.assert_allclose(o, w, rtol=1e-9, atol=1e-12, err_msg=repr(make(torch.nn)))


def creation():
    import torch
    import ddpc

    def same(ours, want):
        np.testing.assert_allclose(ours.numpy(), want.numpy(), rtol=1e-6, atol=1e-7)
        assert ours.shape == tuple(want.shape)

    same(ddpc.linspace(-1, 2, 7), torch.linspace(-1, 2, 7))
    same(ddpc.logspace(0, 2, 5, base=3.0), torch.logspace(0, 2, 5, base=3.0))
    same(ddpc.eye(3, 4), torch.eye(3, 4))
    for ind in ("ij", "xy"):
        for o, w in zip(ddpc.meshgrid(ddpc.arange(2), ddpc.arange(3), indexing=ind),
                        torch.meshgrid(torch.arange(2), torch.arange(3), indexing=ind)):
            same(o, w)
    m = np.arange(12.0).reshape(3, 4)
    for k in (-1, 0, 2):
        same(ddpc.diag(ddpc.tensor(m), k), torch.diag(torch.tensor(m), k))
        same(ddpc.diag(ddpc.tensor(m[0]), k), torch.diag(torch.tensor(m[0]), k))
    assert ddpc.broadcast_shapes((2, 1), (3,), (4, 1, 1)) == tuple(torch.broadcast_shapes((2, 1), (3,), (4, 1, 1)))
    assert ddpc.get_default_dtype().name == str(torch.get_default_dtype()).split(".")[1]


def hooks():
    import torch
    import ddpc

    rng = np.random.default_rng(1)
    x, g = rng.standard_normal((4, 3)), rng.standard_normal((4, 2))
    w = rng.standard_normal((2, 3))
    seen = {}
    for lib in (torch, ddpc):
        m = lib.nn.Linear(3, 2).double()
        with lib.no_grad():
            m.weight.copy_(lib.tensor(w))
        log = seen.setdefault(lib.__name__, [])
        m.register_full_backward_pre_hook(lambda mod, go: (log.append(go[0].numpy().copy()), (go[0] * 2,))[1])
        m.register_full_backward_hook(lambda mod, gi, go: log.extend([gi[0].numpy().copy(), go[0].numpy().copy()]))
        m.register_forward_hook(lambda mod, args, out: out + 1)
        t = lib.tensor(x, requires_grad=True)
        m(t).backward(lib.tensor(g))
        log.append(t.grad.numpy())
    assert len(seen["ddpc"]) == len(seen["torch"]) == 4
    for o, w in zip(seen["ddpc"], seen["torch"]):
        np.testing.assert_allclose(o, w, rtol=1e-12)


def instance_norm_running_stats():
    """Two training steps then eval with track_running_stats, for 1-, 2- and 3-d
    instance norms, momentum None among them: outputs, gradients, buffers, repr."""
    import torch
    import ddpc

    rng = np.random.default_rng(2)
    for make, shape in ((lambda nn: nn.InstanceNorm1d(3, track_running_stats=True), (4, 3, 5)),
                        (lambda nn: nn.InstanceNorm2d(3, affine=True, track_running_stats=True, momentum=0.3),
                         (2, 3, 4, 5)),
                        (lambda nn: nn.InstanceNorm3d(3, track_running_stats=True, momentum=None), (2, 3, 2, 3, 2)),
                        (lambda nn: nn.InstanceNorm1d(3, track_running_stats=True), (3, 5))):
        xs = [rng.standard_normal(shape) * 2 + 1 for _ in range(3)]
        gs = [rng.standard_normal(shape) for _ in range(3)]
        runs = {}
        for lib in (torch, ddpc):
            m = make(lib.nn).double()
            log = runs[lib.__name__] = []
            for i, (x, g) in enumerate(zip(xs, gs)):
                m.train(i < 2)
                t = lib.tensor(x, requires_grad=True)
                out = m(t)
                out.backward(lib.tensor(g))
                log += [out.detach().numpy(), t.grad.numpy()] + [b.numpy().copy() for b in m.buffers()]
            log.append(sorted(m.state_dict()))
            log.append(repr(m))
        assert runs["ddpc"][-2:] == runs["torch"][-2:], (runs["ddpc"][-2:], runs["torch"][-2:])
        for o, w in zip(runs["ddpc"][:-2], runs["torch"][:-2]):
            np.testing.assert_allclose(o, w, rtol=1e-10, atol=1e-12, err_msg=runs["torch"][-1])


if __name__ == "__main__":
    import torch  # noqa: F401  (before ddpc, see the module docstring)

    globals()[sys.argv[1]]()
    print("ok")

"""Optional: ddpc.distributed.optim._apply_optimizer_in_backward against
PyTorch's (skipped when torch is not installed): the same model and
batches, SGD with momentum, Adam and AdamW stepped in backward, the
parameters after each backward and the gradients dropped.

Each group runs in a child process that imports torch before ddpc (see
test_nn_extra_torch.py) and fails there, printing what differs.
"""

from procs import run_torch_group, torch_group_test


def _in_backward(np, torch, ddpc):
    from torch.distributed.optim import _apply_optimizer_in_backward as torch_apply

    from ddpc.distributed.optim import _apply_optimizer_in_backward as ddpc_apply

    rng = np.random.default_rng(0)
    shapes = [(7, 5), (7,), (3, 7), (3,)]
    init = [rng.standard_normal(s) for s in shapes]
    xs = [rng.standard_normal((4, 5)) for _ in range(5)]

    def run(lib, apply, optim, kwargs):
        w1, b1, w2, b2 = params = [lib.tensor(a).requires_grad_() for a in init]
        apply(getattr(lib.optim, optim), params, kwargs)
        trace = []
        for x in xs:
            h = lib.tanh(lib.tensor(x) @ w1.T + b1)
            ((h @ w2.T + b2) ** 2).mean().backward()
            assert all(p.grad is None for p in params)
            trace.append([np.asarray(p.detach().numpy()).copy() for p in params])
        return trace

    for optim, kwargs in [("SGD", dict(lr=0.1, momentum=0.9)), ("Adam", dict(lr=0.01)),
                          ("AdamW", dict(lr=0.01, weight_decay=0.1))]:
        want = run(torch, torch_apply, optim, kwargs)
        got = run(ddpc, ddpc_apply, optim, kwargs)
        worst = max(float(np.abs(g - w).max()) for gs, ws in zip(got, want) for g, w in zip(gs, ws))
        print(optim, "max |ddpc - torch|", worst)
        assert worst < 1e-12


GROUPS = {"in_backward": _in_backward}


test_matches_pytorch = torch_group_test(__file__, GROUPS)


if __name__ == "__main__":
    run_torch_group(GROUPS)

"""Optional: local SGD against PyTorch (skipped where torch is not installed).
Two ranks train the same MLP from the same weights on the same batches, once
with PyTorch (gloo) and once with ddpc (cpu backend): with DistributedDataParallel,
post_localSGD_hook (single-rank subgroups: no gradient averaging once local
SGD starts) and PostLocalSGDOptimizer over a PeriodicModelAverager, and with
a PeriodicModelAverager alone. The final parameters agree within 1e-5.

Each rank is a child process (this file run as a script) that imports torch
before ddpc and writes both libraries' parameters to an .npz file.
"""

import sys

import numpy as np
import pytest

from procs import init_torch_and_ddpc_groups, run_torch_ranks

WORLD, STEPS, BATCH = 2, 8, 6


def _batch(rank, step):
    rng = np.random.default_rng(100 * step + rank)
    return rng.standard_normal((BATCH, 6)).astype(np.float32), rng.integers(0, 3, BATCH)


def _models(torch, ddpc):
    ddpc.manual_seed(0)
    ours = ddpc.nn.Sequential(ddpc.nn.Linear(6, 16), ddpc.nn.Tanh(), ddpc.nn.Linear(16, 3))
    theirs = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    with torch.no_grad():
        for t, d in zip(theirs.parameters(), ours.parameters()):
            t.copy_(torch.from_numpy(d.detach().numpy().copy()))
    return {torch: theirs, ddpc: ours}


def _train(lib, rank, model, with_ddp):
    """Trains ``model`` with ``lib``'s local SGD; returns its parameters and the state dict's "step"."""
    from importlib import import_module

    averagers = import_module(f"{lib.__name__}.distributed.algorithms.model_averaging.averagers")
    local_sgd = import_module(f"{lib.__name__}.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook")
    optim = import_module(f"{lib.__name__}.distributed.optim")
    if with_ddp:
        subgroup, _ = lib.distributed.new_subgroups(group_size=1)
        net = lib.nn.parallel.DistributedDataParallel(model)
        net.register_comm_hook(local_sgd.PostLocalSGDState(None, subgroup, 2), local_sgd.post_localSGD_hook)
        opt = optim.PostLocalSGDOptimizer(lib.optim.SGD(net.parameters(), lr=0.1, momentum=0.9),
                                          averagers.PeriodicModelAverager(period=3, warmup_steps=2))
    else:
        net, opt = model, lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        averager = averagers.PeriodicModelAverager(period=2, warmup_steps=1)
    for step in range(STEPS):
        x, y = _batch(rank, step)
        opt.zero_grad()
        lib.nn.functional.cross_entropy(net(lib.from_numpy(x)), lib.from_numpy(y)).backward()
        opt.step()
        if not with_ddp:
            averager.average_parameters(model.parameters())
    out = {f"p{i}": p.detach().numpy().copy() for i, p in enumerate(model.parameters())}
    out["step"] = np.array(opt.state_dict()["step"] if with_ddp else averager.step)
    return out


def _rank_main(rank, torch_port, ddpc_port, path):
    import torch  # before ddpc

    import ddpc

    init_torch_and_ddpc_groups(torch, ddpc, rank, WORLD, torch_port, ddpc_port)
    arrays = {}
    for with_ddp in (True, False):
        for lib, model in _models(torch, ddpc).items():
            for k, v in _train(lib, rank, model, with_ddp).items():
                arrays[f"{lib.__name__}/{'ddp' if with_ddp else 'averager'}/{k}"] = v
    np.savez(path, **arrays)
    torch.distributed.destroy_process_group()
    ddpc.distributed.destroy_process_group()


def test_local_sgd_matches_pytorch(tmp_path):
    pytest.importorskip("torch")
    results = run_torch_ranks(__file__, WORLD, tmp_path)
    for r, arrays in enumerate(results):
        for key, want in arrays.items():
            if key.startswith("torch/"):
                got = arrays["ddpc/" + key[len("torch/"):]]
                np.testing.assert_allclose(got, want, rtol=0, atol=1e-5, err_msg=f"rank {r} {key}")
        assert arrays["ddpc/ddp/step"] == STEPS and arrays["ddpc/averager/step"] == STEPS
    # Not a trivial agreement: after the last averaging (step 5) steps 6 and 7 were local, so the ranks differ,
    # while the averager alone averaged last at step 7.
    assert not np.allclose(results[0]["ddpc/ddp/p0"], results[1]["ddpc/ddp/p0"])
    assert np.allclose(results[0]["ddpc/averager/p0"], results[1]["ddpc/averager/p0"], rtol=0, atol=1e-7)


if __name__ == "__main__":
    _rank_main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])

"""Optional: ddpc.distributed.checkpoint.state_dict against torch.distributed.checkpoint.state_dict
(skipped when torch is not installed): for the same model wrapped in DistributedDataParallel (a group
of one), the keys and values of the model state dict and the optimizer state dict, nested and
flattened, also for an optimizer before its first step.

Each group runs in a child process that imports torch before ddpc (see test_nn_extra_torch.py) and
fails there, printing what differs.
"""

from procs import run_torch_group, torch_group_test


def _models(np, torch, ddpc):
    """The same MLP (with a BatchNorm, for buffers) in both libraries, each wrapped in DDP on a group of one."""
    import os

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29571", RANK="0", WORLD_SIZE="1")
    torch.distributed.init_process_group("gloo")
    ddpc.distributed.init_process_group("cpu", init_method="tcp://127.0.0.1:29572")
    mods = {}
    for lib in (torch, ddpc):
        lib.manual_seed(0)
        mods[lib] = lib.nn.Sequential(lib.nn.Linear(5, 7), lib.nn.ReLU(), lib.nn.BatchNorm1d(7), lib.nn.Linear(7, 2))
    with torch.no_grad():
        for (name, t), (_, d) in zip(mods[torch].state_dict().items(), mods[ddpc].state_dict().items()):
            t.copy_(torch.from_numpy(np.array(d.numpy())))
    return (torch.nn.parallel.DistributedDataParallel(mods[torch]),
            ddpc.nn.parallel.DistributedDataParallel(mods[ddpc]))


def _same(got, want, where):
    import numpy as np

    if isinstance(want, np.ndarray):
        assert got.shape == want.shape and np.allclose(got, want, atol=1e-6), f"{where}: {got} where PyTorch has {want}"
    elif isinstance(want, dict):
        assert sorted(map(str, got)) == sorted(map(str, want)), f"{where}: keys {sorted(got)} vs {sorted(want)}"
        for k in want:
            _same(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), f"{where}: {got} vs {want}"
        for i, (g, w) in enumerate(zip(got, want)):
            _same(g, w, f"{where}[{i}]")
    else:
        assert float(got) == float(want) if isinstance(want, (int, float)) and not isinstance(want, bool) \
            else got == want, f"{where}: {got!r} where PyTorch has {want!r}"


# PyTorch's optimizers' implementation switches, which ddpc's param groups do not have.
TORCH_ONLY = {"capturable", "differentiable", "foreach", "fused"}


def _snapshot(obj):
    """obj with its tensors as numpy copies (a state dict shares them with the optimizer, which changes them),
    PyTorch's float step counts as Python floats, without TORCH_ONLY's entries."""
    import numpy as np

    if isinstance(obj, dict):
        return {k: float(v) if str(k).rpartition(".")[2] == "step" else _snapshot(v) for k, v in obj.items()
                if str(k).rpartition(".")[2] not in TORCH_ONLY}
    if isinstance(obj, (list, tuple)):
        return [_snapshot(v) for v in obj]
    return np.array(obj.detach().numpy()) if hasattr(obj, "detach") else obj


def _optimizer_state(lib, model, flatten):
    from importlib import import_module

    sd = import_module(f"{lib.__name__}.distributed.checkpoint.state_dict")
    optimizer = lib.optim.Adam(model.parameters(), lr=0.01, weight_decay=0.1)
    options = sd.StateDictOptions(flatten_optimizer_state_dict=flatten)
    before = _snapshot(sd.get_optimizer_state_dict(model, optimizer, options=options))  # made by a step at lr 0
    x, y = lib.ones(4, 5), lib.tensor([0, 1, 1, 0])
    for _ in range(2):
        optimizer.zero_grad()
        lib.nn.functional.cross_entropy(model(x * 0.5), y).backward()
        optimizer.step()
    return (before, _snapshot(sd.get_optimizer_state_dict(model, optimizer, options=options)),
            _snapshot(sd.get_model_state_dict(model)))


def _state_dicts(np, torch, ddpc):
    import warnings

    theirs, ours = _models(np, torch, ddpc)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for flatten in (False, True):
            want = _optimizer_state(torch, theirs, flatten)
            got = _optimizer_state(ddpc, ours, flatten)
            for what, g, w in zip(("optimizer before a step", "optimizer after 2 steps", "model"), got, want):
                _same(g, w, f"{what} (flatten={flatten})")


GROUPS = {"state_dicts": _state_dicts}


test_matches_pytorch = torch_group_test(__file__, GROUPS)


if __name__ == "__main__":
    run_torch_group(GROUPS)

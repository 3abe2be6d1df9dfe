"""Optional: ddpc.nn.utils.prune against torch.nn.utils.prune (skipped
without torch): the masks, pruned weights, outputs and gradients of the
deterministic methods, alone, combined in sequence, global, and removed.

The comparison runs in a child process that imports torch before ddpc (see
test_nn_torch.py) and fails there, printing what differs.
"""

from procs import run_torch_case


def test_matches_pytorch():
    out = run_torch_case(__file__)
    assert out.strip().endswith("ok"), out


# Each plan prunes a Linear(6, 5) "lin" and a Conv2d(3, 4, 3) "conv" in steps of (function name, module, args).
PLANS = {
    "l1_fraction": [("l1_unstructured", "lin", "weight", {"amount": 0.3})],
    "l1_then_l1_then_ln": [("l1_unstructured", "lin", "weight", {"amount": 5}),
                           ("l1_unstructured", "lin", "weight", {"amount": 0.2}),
                           ("ln_structured", "lin", "weight", {"amount": 2, "n": 2, "dim": 0})],
    "ln_inf_conv": [("ln_structured", "conv", "weight", {"amount": 0.5, "n": float("inf"), "dim": 1}),
                    ("l1_unstructured", "conv", "weight", {"amount": 20})],
    "ln_then_ln": [("ln_structured", "conv", "weight", {"amount": 1, "n": 1, "dim": 0}),
                   ("ln_structured", "conv", "weight", {"amount": 1, "n": 2, "dim": -1})],
    "bias_and_identity": [("l1_unstructured", "lin", "bias", {"amount": 2}), ("identity", "conv", "weight", {})],
    "custom": [("custom_from_mask", "lin", "weight", {"mask": "checker"}),
               ("l1_unstructured", "lin", "weight", {"amount": 4})],
    "global": [("global", None, None, {"amount": 0.4})],
    "global_after_l1": [("l1_unstructured", "conv", "weight", {"amount": 30}), ("global", None, None, {"amount": 50})],
}


def _run(lib, plan, arrays, remove):
    import numpy as np

    prune = lib.nn.utils.prune
    lin, conv = lib.nn.Linear(6, 5), lib.nn.Conv2d(3, 4, 3)
    with lib.no_grad():
        for (name, p), value in zip(list(lin.named_parameters()) + list(conv.named_parameters()), arrays["params"]):
            p.copy_(lib.tensor(value))
    mods = {"lin": lin, "conv": conv}
    for fn, mod, name, kwargs in plan:
        kwargs = dict(kwargs)
        if kwargs.get("mask") == "checker":
            kwargs["mask"] = lib.tensor((np.indices((5, 6)).sum(0) % 2).astype(np.float64))
        if fn == "global":
            prune.global_unstructured([(lin, "weight"), (conv, "weight"), (lin, "bias")],
                                      pruning_method=prune.L1Unstructured, **kwargs)
        else:
            getattr(prune, fn)(mods[mod], name, **kwargs)
    out = lin(lib.tensor(arrays["x"])).sum() + conv(lib.tensor(arrays["img"])).square().sum()
    out.backward()
    results = {"out": out.item()}
    for key, m in mods.items():
        for n, t in list(m.named_parameters()) + list(m.named_buffers()):
            results[f"{key}.{n}"] = t.detach().numpy().copy()
            if t.grad is not None:
                results[f"{key}.{n}.grad"] = t.grad.numpy().copy()
        if remove:
            for n in [n[:-5] for n, _ in m.named_buffers() if n.endswith("_mask")]:
                prune.remove(m, n)
            results[f"{key}.after_remove"] = sorted(m.state_dict())
            results[f"{key}.pruned"] = prune.is_pruned(m)
    return results


def main():
    import numpy as np
    import torch
    import torch.nn.utils.prune  # noqa: F401  (not imported by torch.nn.utils)

    import ddpc

    torch.set_default_dtype(torch.float64)
    ddpc.set_default_dtype(ddpc.float64)
    rng = np.random.default_rng(0)
    for name, plan in PLANS.items():
        for remove in (False, True):
            shapes = [(5, 6), (5,), (4, 3, 3, 3), (4,)]
            arrays = {"params": [rng.standard_normal(s) for s in shapes], "x": rng.standard_normal((2, 6)),
                      "img": rng.standard_normal((2, 3, 5, 5))}
            want, got = _run(torch, plan, arrays, remove), _run(ddpc, plan, arrays, remove)
            assert sorted(want) == sorted(got), f"{name}: {sorted(want)} vs {sorted(got)}"
            for key in want:
                if isinstance(want[key], (list, bool)):
                    assert got[key] == want[key], f"{name} {key}: {got[key]} vs {want[key]}"
                    continue
                np.testing.assert_allclose(got[key], want[key], rtol=1e-10, atol=1e-12, err_msg=f"{name} {key}")
    print("ok")


if __name__ == "__main__":
    main()

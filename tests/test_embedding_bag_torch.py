"""Optional: ddpc's F.embedding_bag and nn.EmbeddingBag against PyTorch's
(skipped when torch is not installed): outputs and the gradients of the table
and the per-sample weights over modes, offsets, include_last_offset, 2-d
inputs, padding_idx, max_norm and scale_grad_by_freq, in float32 and float64.

The comparison runs in a child process that imports torch before ddpc (see
test_nn_torch.py) and fails there, printing what it measured.
"""

import sys

from procs import run_torch_case


def test_matches_pytorch():
    out = run_torch_case(__file__, "bags")
    assert out.strip().endswith("ok"), out


def test_max_norm_and_scale_grad_by_freq_match_pytorch():
    out = run_torch_case(__file__, "norms")
    assert out.strip().endswith("ok"), out


def _case_bags():
    import numpy as np
    import torch

    import ddpc

    rng = np.random.default_rng(0)
    indices = rng.integers(0, 20, 40)
    # offsets (None: a 2-d input of 8 bags of 5), include_last_offset, padding_idx
    layouts = [([0, 7, 7, 19, 30], False, None), ([0, 3, 3, 25, 36], True, 5), (None, False, 4),
               ([0, 40], True, -3), ([0, 1, 2, 3], False, int(indices[1])), (None, True, None)]
    worst, checked = 0.0, 0
    for dtype, tol in (("float64", 1e-12), ("float32", 1e-5)):
        for mode in ("sum", "mean", "max"):
            for offsets, last, padding_idx in layouts:
                for weighted in ((False, True) if mode == "sum" else (False,)):
                    weight = rng.standard_normal((20, 6)).astype(dtype)
                    scale = rng.standard_normal(40).astype(dtype)
                    grads = []
                    for lib in (ddpc, torch):
                        idx = lib.tensor(indices if offsets is not None else indices.reshape(8, 5))
                        off = None if offsets is None else lib.tensor(np.array(offsets))
                        w = lib.tensor(weight, requires_grad=True)
                        s = lib.tensor(scale.reshape(tuple(idx.shape)), requires_grad=True) if weighted else None
                        out = lib.nn.functional.embedding_bag(idx, w, off, mode=mode, per_sample_weights=s,
                                                              include_last_offset=last, padding_idx=padding_idx)
                        probe = np.arange(out.numel()).reshape(tuple(out.shape)).astype(dtype) / 10
                        (out * lib.tensor(probe)).sum().backward()
                        grads.append([np.asarray(out.detach()), np.asarray(w.grad)]
                                     + ([np.asarray(s.grad)] if weighted else []))
                    for a, b in zip(*grads):
                        assert a.shape == b.shape, (mode, offsets, a.shape, b.shape)
                        err = float(np.abs(a - b).max() / max(1.0, np.abs(b).max())) if a.size else 0.0
                        assert err < tol, (dtype, mode, offsets, last, padding_idx, weighted, err)
                        worst = max(worst, err)
                        checked += 1
    mine, theirs = ddpc.nn.EmbeddingBag(20, 6, mode="sum", padding_idx=2), torch.nn.EmbeddingBag(20, 6, mode="sum",
                                                                                               padding_idx=2)
    assert repr(mine) == repr(theirs), (repr(mine), repr(theirs))
    print("checked", checked, "worst", worst, "ok")


def _case_norms():
    """max_norm (the table renormalised in place, norm_type 1, 2 and 3) and
    scale_grad_by_freq (sum and mean, padding_idx, per-sample weights, 2-d
    input), through the function and the module."""
    import numpy as np
    import torch

    import ddpc

    rng = np.random.default_rng(1)
    indices = rng.integers(0, 12, 30)
    for dtype, tol in (("float64", 1e-12), ("float32", 1e-5)):
        for max_norm, norm_type, freq, mode, padding_idx, two_d, weighted in [
                (1.0, 2.0, False, "mean", None, False, False), (0.5, 1.0, True, "sum", 3, False, True),
                (2.0, 3.0, True, "mean", None, True, False), (None, 2.0, True, "sum", int(indices[0]), False, False),
                (1.5, 2.0, False, "max", 4, True, False)]:
            weight = (rng.standard_normal((12, 5)) * 2).astype(dtype)
            scale = rng.standard_normal(30).astype(dtype)
            results = []
            for lib in (ddpc, torch):
                idx = lib.tensor(indices.reshape(6, 5) if two_d else indices)
                off = None if two_d else lib.tensor(np.array([0, 4, 4, 17]))
                w = lib.tensor(weight, requires_grad=True)
                s = lib.tensor(scale.reshape(tuple(idx.shape)), requires_grad=True) if weighted else None
                out = lib.nn.functional.embedding_bag(idx, w, off, max_norm, norm_type, freq, mode,
                                                      per_sample_weights=s, padding_idx=padding_idx)
                (out * lib.tensor(np.arange(out.numel()).reshape(tuple(out.shape)).astype(dtype))).sum().backward()
                results.append([np.asarray(out.detach()), np.asarray(w.detach()), np.asarray(w.grad)]
                               + ([np.asarray(s.grad)] if weighted else []))
                bag = lib.nn.EmbeddingBag(12, 5, max_norm, norm_type, freq, mode, padding_idx=padding_idx,
                                          _weight=lib.tensor(weight))
                bag(idx, off).sum().backward()
                results[-1] += [np.asarray(bag.weight.detach()), np.asarray(bag.weight.grad)]
            names = ["output", "table", "table grad"] + ["weights grad"] * weighted + ["module table", "module grad"]
            assert len(names) == len(results[0]) == len(results[1])
            for what, a, b in zip(names, *results):
                np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=f"{dtype} {max_norm} {freq} {mode} {what}")
    print("ok")


if __name__ == "__main__":
    {"bags": _case_bags, "norms": _case_norms}[sys.argv[1]]()

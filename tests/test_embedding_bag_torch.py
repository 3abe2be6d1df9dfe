"""Optional: ddpc's F.embedding_bag and nn.EmbeddingBag against PyTorch's
(skipped when torch is not installed): outputs and the gradients of the table
and the per-sample weights over modes, offsets, include_last_offset, 2-d
inputs and padding_idx, in float32 and float64.

The comparison runs in a child process that imports torch before ddpc (see
test_nn_torch.py) and fails there, printing what it measured.
"""

import sys

from procs import run_torch_case


def test_matches_pytorch():
    out = run_torch_case(__file__, "bags")
    assert out.strip().endswith("ok"), out


def _case_bags():
    import numpy as np
    import torch

    import ddpc

    rng = np.random.default_rng(0)
    indices = rng.integers(0, 20, 40)
    # offsets (None: a 2-d input of 8 bags of 5), include_last_offset, padding_idx
    layouts = [([0, 7, 7, 19, 30], False, None), ([0, 3, 3, 25, 36], True, 5), (None, False, 4),
               ([0, 40], True, -3), ([0, 1, 2, 3], False, int(indices[1]))]
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


if __name__ == "__main__":
    {"bags": _case_bags}[sys.argv[1]]()

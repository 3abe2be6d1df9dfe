"""Optional: the reductions, scans, gather/scatter, sorting and matrix
products of ddpc against PyTorch's on the same float64 inputs (skipped when
torch is not installed): outputs and gradients within 1e-9. Each comparison
runs in a child process that imports torch before ddpc (see
test_nn_extra_torch.py) and fails there, printing what differs."""

import sys

import pytest
from procs import run_torch_case

def _ties(lib, x):
    """x with columns repeated, so rows hold equal values."""
    return x.index_select(1, lib.tensor([0, 0, 2, 3, 3]))


# name: fn(lib, x) on a (4, 5) float64 tensor that requires grad; a tuple result is compared element by element.
CASES = {
    "prod": lambda L, x: x.prod(1) + x.prod(0).sum(),
    "cumsum": lambda L, x: L.cumsum(x, 0) * 2,
    "cumprod": lambda L, x: x.cumprod(1),
    "cumprod_zeros": lambda L, x: (x * (x > 0)).cumprod(1),
    "var": lambda L, x: x.var(1, correction=0) + x.var(0, keepdim=True).sum() + x.var(),
    "std_mean": lambda L, x: L.std_mean(x, (0, 1)),
    "norm": lambda L, x: x.norm() + x.norm(1, 1).sum() + x.norm(float("inf"), 0).sum() + x.norm(3, 1).sum(),
    "amax": lambda L, x: _ties(L, x).amax(1) + L.amin(_ties(L, x), 0).sum(),
    "logsumexp": lambda L, x: L.logsumexp(x * 30, 1),
    "gather": lambda L, x: x.gather(1, L.tensor([[0, 4, 4], [1, 1, 0], [3, 2, 2], [0, 0, 0]])),
    "scatter_add": lambda L, x: x.scatter_add(0, L.tensor([[0, 3, 3, 1, 0]] * 3), x[:3] * 2),
    # (values only: PyTorch's scatter with reduce has no backward)
    "scatter_reduce_arg": lambda L, x: (x.detach().scatter(0, L.tensor([[0, 3, 3, 1, 0]] * 3), x.detach()[:3] * 2,
                                                           reduce="multiply"),
                                        x.detach().scatter(1, L.tensor([[0, 0], [4, 4]]), 1.5, reduce="multiply"),
                                        x.detach().scatter(1, L.tensor([[0, 0], [4, 4]]), -2.0, reduce="add"), x.sum()),
    "index_add": lambda L, x: x.index_add(1, L.tensor([4, 0, 4]), x[:, :3], alpha=3),
    "sort": lambda L, x: _ties(L, x).sort(dim=1, descending=True, stable=True),
    "topk": lambda L, x: x.topk(3, 0),
    "flip_roll": lambda L, x: x.flip(0) + x.roll(2, 1) + x.tril(1) + x.triu(-1),
    "split": lambda L, x: L.cat([p.sum(0, keepdim=True) for p in x.tensor_split(3)]),
    "bmm": lambda L, x: L.bmm(x.reshape(2, 2, 5), x.reshape(2, 5, 2)),
    # dim=() and dim=[]: every dim for these (logsumexp with keepdim, which PyTorch needs there) ...
    "empty_dims": lambda L, x: (x.sum(()), x.mean([], keepdim=True), x.amax([]), L.amin(x, ()),
                                L.logsumexp(x, (), keepdim=True), L.logsumexp(x, [], keepdim=True), L.nansum(x, ()),
                                L.nanmean(x, []), L.norm(x, dim=()), x.norm(1, dim=[]), L.count_nonzero(x > 0, ())),
    # (values only: PyTorch's var and std backward give inf or NaN over dim=())
    "empty_dims_var": lambda L, x: (x.detach().var(()), x.detach().std([], keepdim=True), *L.var_mean(x.detach(), ()),
                                    *L.std_mean(x.detach(), [], correction=0), x.sum()),
    # ... and none for all and any
    "empty_dims_all_any": lambda L, x: (L.all(x > 0, ()).to(x.dtype) * x, L.any(x > 0, [], keepdim=True).to(x.dtype),
                                        (x > 1).all(()).to(x.dtype)),
    "empty_dims_0d": lambda L, x: (x[0, 0].sum(()), L.amax(x[1, 1], []), x[0, 1].var((), correction=0),
                                   L.logsumexp(x[2, 2], (), keepdim=True), L.all(x[0, 0] > 0, ()).to(x.dtype)),
    "logcumsumexp": lambda L, x: L.logcumsumexp(x * 300, 1) + x.logcumsumexp(0),
}


def _run(lib, fn, x):
    import numpy as np

    t = lib.tensor(x, requires_grad=True)
    out = fn(lib, t)
    outs = list(out) if isinstance(out, tuple) else [out]
    floats = [o for o in outs if o.dtype == lib.float64]
    loss = sum((o * lib.tensor(np.arange(o.numel(), dtype=np.float64).reshape(tuple(o.shape)))).sum() for o in floats)
    loss.backward()
    return [np.asarray(o.detach()) for o in outs] + [np.asarray(t.grad)]


def _child(name):
    import numpy as np
    import torch

    import ddpc

    x = np.random.default_rng(3).standard_normal((4, 5)) * 2
    want, got = _run(torch, CASES[name], x), _run(ddpc, CASES[name], x)
    assert len(want) == len(got), f"{name}: {len(got)} results, PyTorch {len(want)}"
    for i, (a, b) in enumerate(zip(got, want)):
        assert a.shape == b.shape, f"{name} result {i}: shape {a.shape}, PyTorch's {b.shape}"
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9, err_msg=f"{name} result {i}")
    print("ok")


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_pytorch(case):
    out = run_torch_case(__file__, case)
    assert out.strip().endswith("ok"), out


def test_float32_products_leave_the_range_as_pytorch():
    out = run_torch_case(__file__, "float32_products")
    assert out.strip().endswith("ok"), out


def _float32_products():
    """prod and cumprod of float32 lines whose running products leave the
    range, along a dim and in all: lines shorter than PyTorch's vectorised
    chunk (it multiplies those in order too), and along an outer dim of any
    length."""
    import numpy as np
    import torch

    import ddpc

    rng = np.random.default_rng(4)
    lines = [[1e30, 1e30, 1e-30, 1e-30], [1e-30, 1e-30, 1e30, 1e30], [3e38, 10.0, 0.1], [1e20] * 4 + [1e-20] * 4,
             [-1e30, 1e30, 1e-30], list(rng.uniform(0.5, 1.5, 25))]
    for line in lines:
        x = np.array(line, dtype=np.float32)
        got, want = ([L.prod(L.tensor(x)).item(), L.tensor(x).cumprod(0).tolist(),
                      L.tensor(np.stack([x, x], 1)).prod(0).tolist()] for L in (ddpc, torch))
        assert got == want, (line, got, want)
    v = rng.uniform(0.9, 1.1, (1000, 3)).astype(np.float32)
    assert ddpc.tensor(v).prod(0).tolist() == torch.tensor(v).prod(0).tolist()
    print("ok")


if __name__ == "__main__":
    _float32_products() if sys.argv[1] == "float32_products" else _child(sys.argv[1])

"""Optional: the functions and methods of test_api_parity.py against PyTorch's
on the same inputs (skipped when torch is not installed): outputs and
gradients within 1e-5 relative (1e-5 absolute) in float32, 1e-10 in float64.

The comparison runs in a child process that imports torch before ddpc (see
test_nn_torch.py) and fails there, printing what differs.
"""

import sys

import pytest
from procs import run_torch_case


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matches_pytorch(dtype):
    out = run_torch_case(__file__, dtype)
    assert out.strip().endswith("ok"), out


def _idx(L):
    return L.tensor([0, 2])


# name: (function of the library module and the input tensors, the inputs' shapes)
CASES = {
    "log2": (lambda L, x: L.log2(x.abs() + 0.1), [(4, 5)]), "log10": (lambda L, x: x.abs().add(0.1).log10(), [(4, 5)]),
    "exp2": (lambda L, x: L.exp2(x), [(4, 5)]), "sinh": (lambda L, x: L.sinh(x), [(4, 5)]),
    "cosh": (lambda L, x: x.cosh(), [(4, 5)]), "asinh": (lambda L, x: L.asinh(x * 3), [(4, 5)]),
    "atan2": (lambda L, y, x: L.atan2(y, x), [(4, 5), (4, 5)]),
    "atan2_broadcast": (lambda L, y, x: y.atan2(x), [(4, 5), (5,)]),
    "hypot": (lambda L, a, b: L.hypot(a, b), [(4, 5), (4, 5)]),
    "xlogy": (lambda L, a, b: L.xlogy(a, b.abs() + 0.1), [(4, 5), (4, 5)]),
    "logit": (lambda L, x: L.logit(L.sigmoid(x), eps=0.2), [(4, 5)]),
    "frac": (lambda L, x: L.frac(x * 3), [(4, 5)]), "sgn": (lambda L, x: L.sgn(x) * x, [(4, 5)]),
    "remainder": (lambda L, a, b: L.remainder(a * 5, b), [(4, 5), (4, 5)]),
    "remainder_number": (lambda L, a: a.remainder(-0.7), [(4, 5)]),
    "fmod": (lambda L, a, b: L.fmod(a * 5, b), [(4, 5), (5,)]),
    "floor_divide": (lambda L, a, b: L.floor_divide(a.detach() * 5, b.detach()), [(4, 5), (4, 5)]),
    "div_trunc": (lambda L, a, b: L.div(a.detach() * 5, b.detach(), rounding_mode="trunc"), [(4, 5), (4, 5)]),
    "add_alpha": (lambda L, a, b: L.add(a, b, alpha=2.5), [(4, 5), (4, 5)]),
    "sub_alpha": (lambda L, a, b: a.sub(b, alpha=-1.5), [(4, 5), (5,)]),
    "hardshrink": (lambda L, x: x.hardshrink(0.4), [(4, 5)]),
    "softmax_dtype": (lambda L, x: x.softmax(0, dtype=L.float64), [(4, 5)]),
    "log_softmax": (lambda L, x: L.log_softmax(x, 1), [(4, 5)]),
    "nansum": (lambda L, x: L.nansum(L.where(x > 1, float("nan"), x), 1), [(4, 5)]),
    "nanmean": (lambda L, x: x.masked_fill(x > 1, float("nan")).nanmean(0), [(4, 5)]),
    "logcumsumexp": (lambda L, x: L.logcumsumexp(x * 10, 1), [(4, 5)]),
    "einsum_matmul": (lambda L, a, b: L.einsum("ij,kj->ik", a, b), [(4, 5), (3, 5)]),
    "einsum_batch": (lambda L, a, b: L.einsum("bij,bjk->bki", a, b), [(2, 3, 4), (2, 4, 5)]),
    "einsum_diag": (lambda L, a: L.einsum("ii->i", a), [(4, 4)]),
    "einsum_trace": (lambda L, a: L.einsum("ii", a), [(4, 4)]),
    "einsum_implicit": (lambda L, a, b: L.einsum("ij,jk", a, b), [(4, 5), (5, 3)]),
    "einsum_ellipsis": (lambda L, a, b: L.einsum("...ij,...j->...i", a, b), [(2, 3, 4), (4,)]),
    "einsum_three": (lambda L, a, b, c: L.einsum("ij,jk,kl->il", a, b, c), [(2, 3), (3, 4), (4, 5)]),
    "einsum_outer_sum": (lambda L, a, b: L.einsum("i,j->", a, b), [(3,), (4,)]),
    "tensordot": (lambda L, a, b: L.tensordot(a, b, dims=([0, 2], [1, 0])), [(2, 3, 4), (4, 2, 5)]),
    "kron": (lambda L, a, b: L.kron(a, b), [(2, 3), (3, 2)]),
    "cdist2": (lambda L, a, b: L.cdist(a, b), [(5, 3), (4, 3)]),
    "cdist2_mm": (lambda L, a, b: L.cdist(a, b), [(30, 3), (27, 3)]),
    "cdist1": (lambda L, a, b: L.cdist(a, b, p=1), [(2, 5, 3), (2, 4, 3)]),
    "cdist3": (lambda L, a, b: L.cdist(a, b, p=3), [(5, 3), (4, 3)]),
    "dist": (lambda L, a, b: L.dist(a, b, 3), [(4, 5), (4, 5)]),
    "renorm": (lambda L, x: x.renorm(2, 0, 1.5), [(4, 5)]),
    "cross": (lambda L, a, b: L.cross(a, b, dim=1), [(4, 3), (4, 3)]),
    "baddbmm": (lambda L, i, a, b: L.baddbmm(i, a, b, beta=0.5, alpha=2.0), [(3, 5), (2, 3, 4), (2, 4, 5)]),
    "addbmm": (lambda L, i, a, b: i.addbmm(a, b, alpha=0.5), [(3, 5), (2, 3, 4), (2, 4, 5)]),
    "addmv": (lambda L, i, m, v: L.addmv(i, m, v, beta=2.0), [(4,), (4, 5), (5,)]),
    "addr": (lambda L, i, u, v: L.addr(i, u, v, alpha=3.0), [(4, 5), (4,), (5,)]),
    "diagonal": (lambda L, x: x.diagonal(1, 2, 0), [(4, 3, 5)]),
    "trace": (lambda L, x: L.trace(x), [(4, 5)]),
    "tile": (lambda L, x: L.tile(x, (2, 1, 3)), [(4, 5)]),
    "unfold": (lambda L, x: x.unfold(1, 2, 1), [(4, 5)]),
    "stacks": (lambda L, a, b: L.cat([L.hstack([a, b]).reshape(-1), L.vstack([a, b]).reshape(-1),
                                      L.dstack([a, b]).reshape(-1), L.column_stack([a[0], b[0]]).reshape(-1)]),
               [(4, 5), (4, 5)]),
    "block_diag": (lambda L, a, b: L.block_diag(a, b), [(2, 3), (3,)]),
    "trapezoid": (lambda L, y, x: L.trapezoid(y, x.cumsum(0)), [(4, 5), (5,)]),
    "index_fill": (lambda L, x: x.index_fill(1, _idx(L), -2.0), [(4, 5)]),
    "index_copy": (lambda L, x, s: L.index_copy(x, 1, _idx(L), s), [(4, 5), (4, 2)]),
    "masked_scatter": (lambda L, x, s: x.masked_scatter(x > 0, s), [(4, 5), (20,)]),
    "movedim": (lambda L, x: L.movedim(x, (0, 1), (2, 0)), [(2, 3, 4)]),
}


def _run(lib, fn, arrays):
    import numpy as np

    ts = [lib.tensor(a, requires_grad=True) for a in arrays]
    out = fn(lib, *ts)
    if out.requires_grad:
        g = np.random.default_rng(1).standard_normal(tuple(out.shape)).astype(str(out.dtype).split(".")[-1])
        out.backward(lib.tensor(g))
    return [np.asarray(out.detach())] + [None if t.grad is None else np.asarray(t.grad) for t in ts]


def main(dtype):
    import numpy as np
    import torch

    import ddpc

    rng = np.random.default_rng(0)
    f32 = dtype == "float32"
    for name, (fn, shapes) in CASES.items():
        arrays = [rng.standard_normal(s).astype(dtype) for s in shapes]
        want, got = _run(torch, fn, arrays), _run(ddpc, fn, arrays)
        for what, a, b in zip(["output"] + [f"grad {i}" for i in range(len(shapes))], got, want):
            assert (a is None) == (b is None), f"{name} {dtype} {what}: {a} where PyTorch has {b}"
            if a is None:
                continue
            np.testing.assert_allclose(a, b, rtol=1e-5 if f32 else 1e-10, atol=1e-5 if f32 else 1e-10,
                                       equal_nan=True, err_msg=f"{name} {dtype} {what}")
    print("ok")


if __name__ == "__main__":
    main(sys.argv[1])

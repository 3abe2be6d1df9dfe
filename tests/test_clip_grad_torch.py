"""Optional: clip_grad_norm_ against torch.nn.utils.clip_grad_norm_ (skipped
when torch is not installed): the norm's value and dtype and the clipped
gradients for float64 and mixed float32/float64 gradients, a NaN or inf
gradient, and the orders 0, -inf, 1, 2 and inf.

Each group runs in a child process that imports torch before ddpc (see
test_nn_extra_torch.py) and fails there, printing what differs.
"""

from procs import run_torch_group, torch_group_test


def _clip(lib, grads, dtypes, norm_type, max_norm):
    params = []
    for g, dt in zip(grads, dtypes):
        p = lib.zeros(len(g), dtype=getattr(lib, dt), requires_grad=True)
        p.grad = lib.tensor(g).to(dtype=getattr(lib, dt))
        params.append(p)
    total = lib.nn.utils.clip_grad_norm_(params, max_norm, norm_type=norm_type)
    return float(total), str(total.dtype).split(".")[-1], [p.grad.double().numpy() for p in params]


def _compare(np, torch, ddpc, grads, dtypes, norm_type, max_norm, rtol):
    ours, theirs = (_clip(lib, [np.array(g, np.float64) for g in grads], dtypes, norm_type, max_norm)
                    for lib in (ddpc, torch))
    print(dtypes, norm_type, ours[:2], theirs[:2])
    assert ours[1] == theirs[1]
    np.testing.assert_allclose(ours[0], theirs[0], rtol=rtol)
    for a, b in zip(ours[2], theirs[2]):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=0)


def _dtypes_and_non_finite(np, torch, ddpc):
    g = np.random.default_rng(4).standard_normal(1000) * 3
    _compare(np, torch, ddpc, [g], ["float64"], 2.0, 1.0, 1e-14)
    _compare(np, torch, ddpc, [g[:10], g[10:]], ["float32", "float64"], 2.0, 1.0, 1e-6)
    _compare(np, torch, ddpc, [[1.0, float("nan"), 3.0], [4.0, 5.0]], ["float32", "float32"], 2.0, 1.0, 1e-6)
    _compare(np, torch, ddpc, [[float("inf"), 1.0], [4.0]], ["float32", "float32"], 2.0, 1.0, 1e-6)


def _orders(np, torch, ddpc):
    grads = [[3.0, 0.0, 4.0], [0.0, 0.0, 2.0, 1.0], [-0.5, 7.0], [0.0]]
    for norm_type in (0, float("-inf"), 1, 2, float("inf")):
        _compare(np, torch, ddpc, grads, ["float32"] * 4, norm_type, 1.0, 1e-6)


GROUPS = {"dtypes_and_non_finite": _dtypes_and_non_finite, "orders": _orders}

test_matches_pytorch = torch_group_test(__file__, GROUPS)


if __name__ == "__main__":
    run_torch_group(GROUPS)

"""Optional: ddpc's sparse COO tensors and sparse gradients against PyTorch's
(skipped when torch is not installed): printing, coalesce, to_dense,
to_sparse, sparse.sum and sparse.mm; the sparse gradients of embedding and
embedding_bag (raw indices, and values after coalesce); and the trajectories
of SparseAdam, SGD (with momentum) and Adagrad on sparse gradients.

Each group runs in a child process that imports torch before ddpc (see
test_api_more_torch.py) and fails there, printing what differs.
"""

from procs import run_torch_group, torch_group_test


def _close(np, got, want, what, tol=1e-5):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, PyTorch {want.shape}"
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=what)


def _tensor_api(np, torch, ddpc):
    rng = np.random.default_rng(0)
    for size, sd in (((5, 4, 3), 2), ((6, 3), 1), ((7,), 1), ((3, 4), 2)):
        idx = np.stack([rng.integers(0, size[d], 14) for d in range(sd)]).astype(np.int64)
        vals = rng.standard_normal((14,) + size[sd:]).astype(np.float32)
        # printed with whole values and few of them (the dense printers differ in
        # how many digits they show and where they wrap long lines)
        whole = np.round(vals * 3)[:5]
        whole[whole == 0] = 1  # (no -0, which a sum may print either way)
        few = idx[:, :5]
        for a, b in ((ddpc.sparse_coo_tensor(few, whole, size), torch.sparse_coo_tensor(few, whole, size)),
                     (ddpc.sparse_coo_tensor(few, whole, size).coalesce(),
                      torch.sparse_coo_tensor(few, whole, size).coalesce())):
            assert repr(a) == repr(b).replace("torch.", "ddpc."), f"{size}:\n{a!r}\n{b!r}"
        ours, theirs = ddpc.sparse_coo_tensor(idx, vals, size), torch.sparse_coo_tensor(idx, vals, size)
        c, t = ours.coalesce(), theirs.coalesce()
        _close(np, c.indices().numpy(), t.indices().numpy(), f"{size} coalesced indices", 0)
        _close(np, c.values().numpy(), t.values().numpy(), f"{size} coalesced values")
        _close(np, ours.to_dense().numpy(), theirs.to_dense().numpy(), f"{size} to_dense")
        _close(np, ddpc.sparse.sum(ours).item(), torch.sparse.sum(theirs).item(), f"{size} sparse.sum", 1e-4)
        for dim in range(len(size)):
            a, b = ddpc.sparse.sum(ours, dim), torch.sparse.sum(theirs, dim)
            assert a.is_sparse == b.is_sparse, f"{size} sparse.sum over {dim}: sparse {a.is_sparse}, {b.is_sparse}"
            _close(np, (a.to_dense() if a.is_sparse else a).numpy(), (b.to_dense() if b.is_sparse else b).numpy(),
                   f"{size} sparse.sum over {dim}")
        dense = rng.standard_normal(size).astype(np.float32) * (rng.random(size) < 0.4)
        for k in range(1, len(size) + 1):
            a, b = ddpc.tensor(dense).to_sparse(k), torch.tensor(dense).to_sparse(k)
            _close(np, a.indices().numpy(), b.indices().numpy(), f"{size} to_sparse({k}) indices", 0)
            _close(np, a.values().numpy(), b.values().numpy(), f"{size} to_sparse({k}) values")
    m = rng.standard_normal((6, 3)).astype(np.float32)
    idx = np.stack([rng.integers(0, 4, 9), rng.integers(0, 6, 9)])
    vals = rng.standard_normal(9).astype(np.float32)
    _close(np, ddpc.sparse.mm(ddpc.sparse_coo_tensor(idx, vals, (4, 6)), ddpc.tensor(m)).numpy(),
           torch.sparse.mm(torch.sparse_coo_tensor(idx, vals, (4, 6)), torch.tensor(m)).numpy(), "sparse.mm")


def _embedding_grads(np, torch, ddpc):
    rng = np.random.default_rng(1)
    table = rng.standard_normal((12, 5)).astype(np.float32)
    idx = rng.integers(0, 12, (4, 6))
    g = rng.standard_normal((4, 6, 5)).astype(np.float32)
    for pad in (None, int(idx[0, 0])):
        grads = []
        for lib in (ddpc, torch):
            w = lib.tensor(table, requires_grad=True)
            (lib.nn.functional.embedding(lib.tensor(idx), w, padding_idx=pad, sparse=True) * lib.tensor(g)).sum() \
                .backward()
            grads.append(w.grad)
        ours, theirs = grads
        assert ours.is_sparse and theirs.is_sparse
        _close(np, ours._indices().numpy(), theirs._indices().numpy(), f"embedding pad={pad} raw indices", 0)
        _close(np, ours.coalesce().values().numpy(), theirs.coalesce().values().numpy(),
               f"embedding pad={pad} coalesced values")
    inp, off = rng.integers(0, 12, 20), np.array([0, 4, 4, 11, 15])
    for mode in ("sum", "mean"):
        for pad in (None, int(inp[2])):
            for weighted in ((False, True) if mode == "sum" else (False,)):
                psw = rng.standard_normal(20).astype(np.float32)
                gb = rng.standard_normal((5, 5)).astype(np.float32)
                grads = []
                for lib in (ddpc, torch):
                    w = lib.tensor(table, requires_grad=True)
                    out = lib.nn.functional.embedding_bag(lib.tensor(inp), w, lib.tensor(off), mode=mode, sparse=True,
                                                          padding_idx=pad,
                                                          per_sample_weights=lib.tensor(psw) if weighted else None)
                    (out * lib.tensor(gb)).sum().backward()
                    grads.append(w.grad)
                what = f"embedding_bag {mode} pad={pad} weighted={weighted}"
                _close(np, grads[0].coalesce().indices().numpy(), grads[1].coalesce().indices().numpy(), what, 0)
                _close(np, grads[0].coalesce().values().numpy(), grads[1].coalesce().values().numpy(), what)


def _optimizers(np, torch, ddpc):
    rng = np.random.default_rng(2)
    table = rng.standard_normal((10, 4)).astype(np.float32)
    batches = [rng.integers(0, 10, (3, 5)) for _ in range(6)]
    targets = [rng.standard_normal((3, 5, 4)).astype(np.float32) for _ in range(6)]

    def run(lib, make, pad):
        e = lib.nn.Embedding(10, 4, sparse=True, padding_idx=pad)
        with lib.no_grad():
            e.weight.copy_(lib.tensor(table))
        opt = make(lib, e.parameters())
        for b, t in zip(batches, targets):
            opt.zero_grad()
            ((e(lib.tensor(b)) - lib.tensor(t)) ** 2).sum().backward()
            opt.step()
        return e.weight.detach().numpy().copy()

    makers = {
        "SparseAdam": lambda lib, p: lib.optim.SparseAdam(p, lr=0.1, betas=(0.8, 0.95)),
        "SparseAdam maximize": lambda lib, p: lib.optim.SparseAdam(p, lr=0.05, maximize=True),
        "SGD": lambda lib, p: lib.optim.SGD(p, lr=0.05),
        "SGD momentum": lambda lib, p: lib.optim.SGD(p, lr=0.02, momentum=0.9, dampening=0.1),
        "SGD nesterov": lambda lib, p: lib.optim.SGD(p, lr=0.02, momentum=0.9, nesterov=True),
        "Adagrad": lambda lib, p: lib.optim.Adagrad(p, lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1),
    }
    for name, make in makers.items():
        for pad in (None, 3):
            _close(np, run(ddpc, make, pad), run(torch, make, pad), f"{name} pad={pad}", 1e-5)


GROUPS = {"tensor_api": _tensor_api, "embedding_grads": _embedding_grads, "optimizers": _optimizers}

test_matches_pytorch = torch_group_test(__file__, GROUPS)


if __name__ == "__main__":
    run_torch_group(GROUPS)

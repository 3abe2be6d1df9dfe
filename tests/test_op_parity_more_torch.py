"""Optional: the cases of test_op_parity_more.py against PyTorch's own
(skipped when torch is not installed): values, shapes, dtypes, which inputs
raise, and for float64 inputs the gradients of a random weighted sum of the
outputs. Each group runs in a child process that imports torch before ddpc
and fails there, printing what differs."""

from procs import run_torch_group, torch_group_test


def _build(np, lib, arg):
    """A (values, dtype name, requires_grad) triple as a tensor of lib; anything else as it is."""
    if not isinstance(arg, tuple):
        return arg
    values, dtype, grad = arg
    t = lib.tensor(np.asarray(values, dtype=np.float64)).to(getattr(lib, dtype))
    return t.requires_grad_() if grad else t


def _same(np, got, want, what):
    if isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want), f"{what}: {got!r} vs {want!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            _same(np, g, w, f"{what}[{i}]")
        return
    if not hasattr(want, "detach"):
        assert got == want, f"{what}: {got!r} where PyTorch has {want!r}"
        return
    assert tuple(got.shape) == tuple(want.shape), f"{what}: shape {tuple(got.shape)} vs {tuple(want.shape)}"
    dtype = str(want.dtype).split(".")[-1]
    assert str(got.dtype).split(".")[-1] == {"bool": "uint8"}.get(dtype, dtype), f"{what}: {got.dtype} vs {dtype}"
    g, w = got.detach().double().numpy(), want.detach().double().numpy()
    np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-9, equal_nan=True, err_msg=what)


def _check(np, torch, ddpc, what, fn, *args):
    """fn(lib, *args) with args built for each library: both raise, or they agree (gradients too)."""
    results = []
    for lib in (torch, ddpc):
        built = [_build(np, lib, a) for a in args]
        try:
            out = fn(lib, *built)
        except (RuntimeError, ValueError, IndexError, TypeError) as e:
            out = e
        results.append((built, out))
    (tin, want), (din, got) = results
    if isinstance(want, Exception) or isinstance(got, Exception):
        assert isinstance(want, Exception) and isinstance(got, Exception), f"{what}: ddpc {got!r}, PyTorch {want!r}"
        return
    _same(np, got, want, what)
    leaves = [k for k, a in enumerate(args) if isinstance(a, tuple) and a[2]]
    if not leaves:
        return
    outs = [(w, g) for w, g in zip(_flat(want), _flat(got)) if w.requires_grad]
    weights = [np.random.default_rng(1).standard_normal(tuple(w.shape)) for w, _ in outs]
    tsum = sum((w * torch.tensor(c)).sum() for (w, _), c in zip(outs, weights))
    dsum = sum((g * ddpc.tensor(c)).sum() for (_, g), c in zip(outs, weights))
    tgrads = torch.autograd.grad(tsum, [tin[k] for k in leaves], allow_unused=True)
    dgrads = ddpc.autograd.grad(dsum, [din[k] for k in leaves], allow_unused=True)
    for k, g, w in zip(leaves, dgrads, tgrads):
        _same(np, g if g is not None else ddpc.zeros_like(din[k]), w if w is not None else torch.zeros_like(tin[k]),
              f"{what}: grad of argument {k}")


def _flat(x):
    return [t for v in x for t in _flat(v)] if isinstance(x, (tuple, list)) else [x] if hasattr(x, "detach") else []


def _index_0d(np, torch, ddpc):
    for dtype in ("float64", "float32", "int64"):
        grad = dtype == "float64"
        x0, x1 = (5.0, dtype, grad), ([1.0, 2.0, 3.0], dtype, grad)
        src0 = (3.0, dtype, grad)
        _check(np, torch, ddpc, f"index_fill 0-d {dtype} index [-1]", lambda lib, x, i: x.index_fill(0, i, 7), x0,
               ([-1], "int64", False))
        for idx in ([0], [0, 0], [], 0, [1]):  # PyTorch's index_select, index_copy and index_add refuse -1
            i = (idx, "int64", False)
            what = f"{dtype} index {idx}"
            _check(np, torch, ddpc, f"index_select 0-d {what}", lambda lib, x, i: lib.index_select(x, 0, i), x0, i)
            _check(np, torch, ddpc, f"index_select 1-d {what}", lambda lib, x, i: x.index_select(-1, i), x1, i)
            _check(np, torch, ddpc, f"index_fill 0-d {what}", lambda lib, x, i: x.index_fill(0, i, 7), x0, i)
            _check(np, torch, ddpc, f"index_fill 1-d {what}", lambda lib, x, i: x.index_fill(0, i, 7), x1, i)
            _check(np, torch, ddpc, f"index_copy 0-d {what}", lambda lib, x, i, s: x.index_copy(0, i, s), x0, i, src0)
            _check(np, torch, ddpc, f"index_copy 1-d {what}", lambda lib, x, i, s: x.index_copy(0, i, s), x1, i, src0)
            _check(np, torch, ddpc, f"index_add 0-d {what}", lambda lib, x, i, s: x.index_add(0, i, s, alpha=2),
                   x0, i, src0)
            _check(np, torch, ddpc, f"index_add 1-d {what}", lambda lib, x, i, s: lib.index_add(x, 0, i, s),
                   x1, i, ([4.0], dtype, grad))
        for idx in (0, [0]):
            i = (idx, "int64", False)
            _check(np, torch, ddpc, f"scatter 0-d {dtype} {idx}", lambda lib, x, i, s: lib.scatter(x, 0, i, s),
                   x0, i, src0)
            _check(np, torch, ddpc, f"scatter_add 0-d {dtype} {idx}", lambda lib, x, i, s: lib.scatter_add(x, 0, i, s),
                   x0, i, src0)
            _check(np, torch, ddpc, f"scatter value 0-d {dtype} {idx}", lambda lib, x, i: x.scatter(-1, i, 2.0),
                   x0, i)


def _reductions(np, torch, ddpc):
    for dtype in ("uint8", "int32", "int64", "float32"):
        for dims in ((), [], 0, -1, (0,), 1):
            for keepdim in (False, True):
                _check(np, torch, ddpc, f"sum 0-d {dtype} {dims} {keepdim}", lambda lib, x: x.sum(dims, keepdim),
                       (3.0, dtype, False))
    for dims in (None, 0, -1, (0,), (), 1, (0, 0)):
        for keepdim in (False, True):
            _check(np, torch, ddpc, f"vector_norm 0-d {dims} {keepdim}",
                   lambda lib, x: lib.linalg.vector_norm(x, 2, dims, keepdim), (-2.5, "float64", True))
    for shape in ((1, 0), (2, 0), (0, 2), (0,)):
        for dim in (None, 0, 1):
            _check(np, torch, ddpc, f"aminmax {shape} {dim}", lambda lib, x: lib.aminmax(x, dim=dim, keepdim=True),
                   (np.zeros(shape), "float32", False))
    nan = float("nan")
    for values in ([1.0, 3.0, 3.0, 2.0], [2.0, 1.0, 1.0, 1.0], [[1.0, 2.0], [2.0, 3.0]], [nan, 2.0, 2.0, 5.0],
                   [1.0, nan, nan], [4.0], 7.0):
        x = (values, "float64", True)
        for name in ("max", "min", "median", "nanmedian"):
            _check(np, torch, ddpc, f"{name} of {values}", lambda lib, x: getattr(lib, name)(x), x)
    for values in (np.zeros((2, 2)), [[0.0, 0.0], [3.0, 4.0]], 0.0):
        for p in (2, "fro", 3, 1, float("inf"), float("-inf")):
            for dim in (None, 0, -1):
                _check(np, torch, ddpc, f"norm {p} of {values} along {dim}", lambda lib, x: lib.norm(x, p, dim),
                       (values, "float64", True))


def _shapes(np, torch, ddpc):
    for dtype in ("int64", "int32", "uint8", "float32"):
        for counts in ([3, 0, 1], [], [2], [1, -1], [[1, 2]], 2):
            for size in (None, 4, 3) if counts != [] else (None,):  # PyTorch checks no size for no counts
                _check(np, torch, ddpc, f"repeat_interleave({counts}) {dtype} {size}",
                       lambda lib, c: lib.repeat_interleave(c, output_size=size), (counts, dtype, False))
    x = ([[1.0, 2.0], [3.0, 4.0]], "float64", True)
    for repeats in (2, ([1, 2], "int64", False), ([2], "int64", False), (2, "int64", False)):
        for dim in (None, 0, -1):
            for size in (None, 2, 3, 4, 8):
                _check(np, torch, ddpc, f"repeat_interleave {repeats} {dim} {size}",
                       lambda lib, x, r: x.repeat_interleave(r, dim, output_size=size), x, repeats)
    for sections in (3, 0, [1, 5], [], [[1, 5]], [-2, 9]):
        _check(np, torch, ddpc, f"tensor_split {sections}", lambda lib, x, s: lib.tensor_split(x, s),
               (np.arange(7.0), "float64", True), (sections, "int64", False))
    for dims in ((1, -2), (1, -1), (0, 0), (), (2,)):
        _check(np, torch, ddpc, f"squeeze {dims}", lambda lib, x: x.squeeze(dims),
               (np.zeros((3, 1, 1)), "float64", True))
    for size in (0, 1, 2):
        for step in (1, 2):
            _check(np, torch, ddpc, f"unfold 0-d {size} {step}", lambda lib, x: x.unfold(0, size, step),
                   (4.0, "float64", True))


def _sequence_indices(np, torch, ddpc):
    import warnings

    warnings.simplefilter("ignore", UserWarning)  # both warn that a list as a tuple is deprecated
    x = (np.arange(24.0).reshape(2, 3, 4), "float64", True)
    for index in ([[0, 1], [1, 0]], [(0, 1), (1, 0)], [0, slice(None), 1], [None, 0], [0, 1], [[0, 1]], [Ellipsis, 2],
                  [([1, 0], "int64", False), ([2, 1], "int64", False)], [range(2), range(2)], range(1, 2), [[0, 1], 4],
                  [[True, False]], [True, [0, 1]]):
        def read(lib, x):
            return x[[_build(np, lib, i) for i in index] if isinstance(index, list) else index]

        def assign(lib, x):
            y = x.clone()
            y[[_build(np, lib, i) for i in index] if isinstance(index, list) else index] = 5.0
            return y

        _check(np, torch, ddpc, f"x[{index}]", read, x)
        _check(np, torch, ddpc, f"x[{index}] = 5", assign, x)


def _einsum_sublists(np, torch, ddpc):
    a, b = (np.arange(6.0).reshape(2, 3), "float64", True), (np.arange(12.0).reshape(3, 4), "float64", True)
    c = (np.arange(24.0).reshape(2, 3, 4), "float64", True)
    for dims in ([[0, 1], [1, 0]], [[0, 1]], [[27, 0]], [[1, 1]], [[0, 1], [0]], [[52, 0]], [[0]], [[0, 1], [2]]):
        _check(np, torch, ddpc, f"einsum a {dims}", lambda lib, a: lib.einsum(a, *dims), a)
    for dims in ([[30, 1], [1, 2]], [[0, 1], [1, 2], [2, 0]], [[0, 1], [1, 2], []], [[0, 1], [5, 2]]):
        _check(np, torch, ddpc, f"einsum a, b {dims}",
               lambda lib, a, b: lib.einsum(a, dims[0], b, *dims[1:]), a, b)
    _check(np, torch, ddpc, "einsum with Ellipsis",
           lambda lib, c, b: lib.einsum(c, [Ellipsis, 1], b.t(), [1, 51], [Ellipsis, 51]), c, b)


def _norms(np, torch, ddpc):
    inf = float("inf")
    for values in ([inf, inf], [0.0, 4.0], [2.0, 2.0], [inf, 1.0], [[1.0, -2.0], [0.0, 3.0]], np.zeros((2, 0)), 5.0):
        for ord in (-1, -2, -0.5, -inf):
            for dim in (None, 0, -1):
                _check(np, torch, ddpc, f"vector_norm {values} {ord} {dim}",
                       lambda lib, x: lib.linalg.vector_norm(x, ord, dim), (values, "float64", True))
            _check(np, torch, ddpc, f"norm {values} {ord}", lambda lib, x: lib.norm(x, ord), (values, "float64", True))
    for shape in ((0, 3), (3, 0), (0, 0), (2, 0, 3)):
        for ord in (1, -1, 2, -2, inf, -inf, "fro", "nuc"):
            for keepdim in (False, True):
                _check(np, torch, ddpc, f"matrix_norm {shape} {ord} {keepdim}",
                       lambda lib, x: lib.linalg.matrix_norm(x, ord, keepdim=keepdim),
                       (np.zeros(shape), "float64", False))


def _bool_indices(np, torch, ddpc):
    x = (np.arange(24.0).reshape(2, 3, 4), "float64", True)
    flag = (1, "bool", False)  # PyTorch's 0-d bool tensor, ddpc's 0-d uint8 mask
    for index in [([0, 1], True), ([0, 1], slice(None), True), (True, slice(None), [0, 1]), (0, True, [1, 2]),
                  ([[0], [1]], False, [0, 1, 2]), (True, True), (True, slice(None), False), (False, [0, 1]),
                  (True, 0, slice(None), True), (None, [0, 1], True), ([1, 0], flag), (flag, slice(None), [2, 1]),
                  (flag, True, 1), (True,), (False, None), (Ellipsis, True, [0, 3])]:
        _check(np, torch, ddpc, f"x[{index}]", lambda lib, x, *i: x[tuple(_build(np, lib, a) for a in i)], x, *index)

        def assign(lib, x, *i):
            y = x.clone()
            y[tuple(_build(np, lib, a) for a in i)] = 5.0
            return y

        _check(np, torch, ddpc, f"x[{index}] = 5", assign, x, *index)


GROUPS = {"index_0d": _index_0d, "reductions": _reductions, "shapes": _shapes, "bool_indices": _bool_indices,
          "norms": _norms, "sequence_indices": _sequence_indices, "einsum_sublists": _einsum_sublists}


test_matches_pytorch = torch_group_test(__file__, GROUPS)


if __name__ == "__main__":
    run_torch_group(GROUPS)

"""In-place writes into views of computed tensors (and into the tensors
they view) against PyTorch: the values, the gradients, and which writes are
refused. Each case runs the same code with L = ddpc and with L = torch."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ddpc  # noqa: E402


def _loss(L, y):
    """A weighted sum, so that each element's gradient differs."""
    return (y * L.tensor(np.arange(1.0, y.numel() + 1).reshape(tuple(y.shape)))).sum()


def _grid(L):
    return L.tensor(np.arange(6.0).reshape(2, 3) - 2.5, requires_grad=True)


def _row(L):
    return L.tensor(np.arange(4.0) - 1.5, requires_grad=True)


CASES = {
    # into a view: the write reaches the tensor viewed, whose history takes it
    "augmented_slice": (_grid, lambda L, x: _set(x * 1, lambda y: y[:, :2].__imul__(2))),
    "augmented_row": (_grid, lambda L, x: _set(x * 1, lambda y: y[0].__iadd__(x[1]))),
    "row_mul_": (_grid, lambda L, x: _set(x * 1, lambda y: y[1].mul_(x[0]))),
    "column_zero_": (_grid, lambda L, x: _set(x * 1, lambda y: y[:, 0].zero_())),
    "flat_range": (_grid, lambda L, x: _set(x * 1, lambda y: y.view(-1)[2:4].mul_(x.view(-1)[:2]))),
    "relu_inplace_row": (_grid, lambda L, x: _set(x * 1, lambda y: L.nn.functional.relu(y[0], inplace=True))),
    "view_of_view": (_row, lambda L, x: _set(x * 1, lambda y: y.view(2, 2)[1].add_(x[:2] ** 2))),
    "transpose_row": (_grid, lambda L, x: _set(x * 1, lambda y: y.t()[2].mul_(3))),
    "diagonal": (_grid, lambda L, x: _set(x[:, :2] @ x[:, 1:].t(), lambda y: y.diagonal().mul_(x[0, 1]))),
    "setitem_on_row": (_grid, lambda L, x: _set(x * 1, lambda y: y[1].__setitem__(slice(1, None), x[0, :2]))),
    "copy_into_buffer_row": (_row, lambda L, x: _set(L.zeros(2, 4), lambda y: y[1].copy_(x.exp()))),
    # into the tensor viewed: an earlier view reads the new values
    "base_then_view": (_row, lambda L, x: _base_then_view(x * 1, lambda y: y.mul_(x), lambda y: y[1:3])),
    "base_slice_then_reshape": (_grid, lambda L, x: _base_then_view(
        x * 1, lambda y: y[1].mul_(x[0]), lambda y: y.reshape(3, 2)[1:])),
    "base_then_view_of_view": (_row, lambda L, x: _base_then_view(
        x * 2, lambda y: y.add_(x.exp()), lambda y: y.view(2, 2)[0][1:])),
}


def _set(y, write):
    write(y)
    return y


def _base_then_view(y, write, view):
    v = view(y)
    write(y)
    return v * v


def _run(L, case):
    make, fn = CASES[case]
    x = make(L)
    out = fn(L, x)
    _loss(L, out).backward()
    return out.detach().numpy(), x.grad.numpy()


@pytest.mark.parametrize("case", sorted(CASES))
def test_in_place_writes_through_views_match_pytorch(case):
    got, want = _run(ddpc, case), _run(torch, case)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


REFUSED = {
    "view_of_leaf": lambda L: L.ones(3, requires_grad=True)[:2].mul_(2),
    "saved_then_view_write": lambda L: _saved_then_view_write(L),
}


def _saved_then_view_write(L):
    x = L.ones(4, requires_grad=True)
    z = (x * 1).sigmoid()
    z[:2].mul_(2)  # sigmoid saved its output, which the write changed
    z.sum().backward()


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_writes_autograd_cannot_follow_are_refused_as_in_pytorch(case):
    with pytest.raises(RuntimeError):
        REFUSED[case](torch)
    with pytest.raises(RuntimeError):
        REFUSED[case](ddpc)


# ---- random chains of views and writes ---------------------------------------------------

def _derive(L, u, rng):
    """A view of u (in ddpc maybe a copy standing for one) picked by rng; None where none fits."""
    kind = rng.integers(8)
    if kind == 0 and u.ndim == 2:
        return u.t()
    if kind == 1 and u.ndim >= 2:
        return u.permute(*rng.permutation(u.ndim).tolist())
    if kind == 2 and u.ndim >= 1:
        index = []
        for size in u.shape:
            lo = int(rng.integers(size))
            index.append(slice(lo, size, int(rng.integers(1, 3))) if rng.random() < 0.8 else lo)
        return u[tuple(index)]
    if kind == 3 and u.numel() > 1:
        sizes, left = [], u.numel()
        for d in range(2, left + 1):
            while left % d == 0 and rng.random() < 0.7:
                sizes.append(d)
                left //= d
        sizes += [left] if left > 1 else []
        rng.shuffle(sizes)
        return u.reshape(*sizes) if sizes else None
    if kind == 4:
        return u.flatten()
    if kind == 5:
        return u.unsqueeze(int(rng.integers(u.ndim + 1)))
    if kind == 6 and u.ndim >= 2:
        return u.diagonal(0, 0, 1)
    if kind == 7 and u.ndim >= 2:
        return u.transpose(0, u.ndim - 1)
    return None


def _write(L, v, rng, q):
    kind = rng.integers(6)
    if kind == 4:  # in-place view ops, then a write through the rearranged tensor
        v.t_() if v.ndim == 2 else v.unsqueeze_(int(rng.integers(v.ndim + 1)))
        v.mul_(-1.0)
    elif kind == 5:
        v.squeeze_()
        v.add_(q)
    elif kind == 0:
        v.mul_(float(rng.integers(2, 4)))
    elif kind == 1:
        v.add_(q * float(rng.integers(1, 5)))
    elif kind == 2 and v.ndim:
        v[int(rng.integers(v.shape[0]))] = q * 7.0
    else:
        v.zero_()


def _chain(L, seed, graph):
    rng = np.random.default_rng(seed)
    shape = tuple(int(n) for n in rng.integers(1, 5, size=int(rng.integers(1, 4))))
    x = L.tensor(np.arange(1.0, np.prod(shape) + 1).reshape(shape), requires_grad=graph)
    base = x * 1.0
    q = (x.sum() * 0.01) if graph else L.tensor(0.5, dtype=L.float64)
    tensors, seen = [base], []
    for _ in range(6):
        v = _derive(L, tensors[int(rng.integers(len(tensors)))], rng)
        if v is None or not v.numel():
            continue
        tensors.append(v)
        if rng.random() < 0.6:
            _write(L, v, rng, q)
            seen.append(base.detach().numpy().copy())
    seen.extend(t.detach().numpy().copy() for t in tensors)  # each view read after the writes made since
    if graph:
        (base * L.tensor(np.arange(base.numel(), dtype=np.float64).reshape(shape))).sum().backward()
        seen.append(x.grad.numpy())
    return seen


@pytest.mark.parametrize("graph", [False, True])
def test_random_chains_of_views_and_writes_match_pytorch(graph):
    """After each in-place write into a view (a copy in ddpc where PyTorch's
    view is strided, which may have missed writes made since it was taken),
    the tensor at the root of the chain holds PyTorch's values, and at the
    end every view reads PyTorch's; in the graph, the gradient through it is
    PyTorch's too."""
    for seed in range(300):
        got, want = _chain(ddpc, seed, graph), _chain(torch, seed, graph)
        assert len(got) == len(want), seed
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12, err_msg=f"seed {seed}")


class _Tripled:
    """A custom Function that writes into its input and marks it dirty, for either library."""

    @staticmethod
    def make(L):
        class Tripled(L.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.mark_dirty(x)
                x.mul_(3.0)
                return x

            @staticmethod
            def backward(ctx, g):
                return g * 3.0

        return Tripled


@pytest.mark.parametrize("target", ["linear_output", "row", "column"])
def test_a_function_marking_a_view_dirty_matches_pytorch(target):
    """mark_dirty on a linear layer's output or on a view of a computed tensor: the tensor viewed takes the write
    (it was refused as a view)."""
    got = []
    for L in (ddpc, torch):
        x = L.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
        y = L.nn.functional.linear(x, L.tensor(np.arange(9.0).reshape(3, 3))) if target == "linear_output" else x * 1
        view = {"linear_output": lambda: y, "row": lambda: y[0], "column": lambda: y[:, 1]}[target]()
        _Tripled.make(L).apply(view)
        _loss(L, y).backward()
        got.append((y.detach().numpy(), x.grad.numpy()))
    for g, w in zip(*got):
        np.testing.assert_allclose(g, w, rtol=1e-12)

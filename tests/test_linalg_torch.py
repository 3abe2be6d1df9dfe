"""Optional: ddpc.linalg and the top-level matrix functions against PyTorch's
on the same inputs (skipped when torch is not installed): values, result
fields, dtypes of info, pivots and ranks, gradients (the raw ones, so that
each backward formula is PyTorch's, not just a valid one), Hessian-vector
products through create_graph, and which inputs
each raises for. Each group runs in a child process that imports torch
before ddpc (see test_nn_extra_torch.py) and fails there, printing what
differs."""

import math

from procs import run_torch_group, torch_group_test


def _inputs(np):
    rng = np.random.default_rng(11)
    a = rng.standard_normal((2, 4, 4))
    return {
        "A": a, "B": rng.standard_normal((2, 4, 3)), "tall": rng.standard_normal((2, 5, 3)),
        "wide": rng.standard_normal((2, 3, 5)), "spd": a @ np.swapaxes(a, -1, -2) + 4 * np.eye(4),
        "sym": a + np.swapaxes(a, -1, -2), "w": rng.standard_normal((2, 5, 2)),
    }


def _close(np, got, want, what, rtol=1e-9):
    want = want.detach()
    assert tuple(got.shape) == tuple(want.shape), f"{what}: shape {tuple(got.shape)} vs {tuple(want.shape)}"
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1], f"{what}: {got.dtype} vs {want.dtype}"
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=rtol, atol=rtol, err_msg=what)


def _sign_free(torch, ddpc, np, fn, arrays, what, rtol=1e-8):
    """fn's result and the gradients of a weighted sum of it, ddpc's against torch's."""
    d_in = [ddpc.tensor(a, requires_grad=True) for a in arrays]
    t_in = [torch.tensor(a, requires_grad=True) for a in arrays]
    d_out, t_out = fn(ddpc, d_in), fn(torch, t_in)
    _close(np, d_out, t_out, what, rtol)
    w = np.random.default_rng(5).standard_normal(tuple(t_out.shape))
    (d_out * ddpc.tensor(w)).sum().backward()
    (t_out * torch.tensor(w)).sum().backward()
    for i, (d, t) in enumerate(zip(d_in, t_in)):
        _close(np, d.grad, t.grad, f"{what}: gradient of input {i}", rtol)


def _values(np, torch, ddpc):
    x = _inputs(np)
    T = {k: torch.tensor(v) for k, v in x.items()}
    D = {k: ddpc.tensor(v) for k, v in x.items()}
    tl, dl = torch.linalg, ddpc.linalg
    for name, args in (("inv", ("A",)), ("det", ("A",)), ("solve", ("A", "B")), ("cholesky", ("spd",)),
                       ("svdvals", ("tall",)), ("eigvalsh", ("sym",)), ("pinv", ("wide",)), ("matrix_exp", ("A",)),
                       ("matrix_rank", ("tall",)), ("cond", ("A",))):
        _close(np, getattr(dl, name)(*(D[a] for a in args)), getattr(tl, name)(*(T[a] for a in args)), name)
    _close(np, dl.solve(D["A"], D["B"][..., 0]), tl.solve(T["A"], T["B"][..., 0]), "solve vectors")
    _close(np, dl.solve(D["A"], D["B"].mT, left=False), tl.solve(T["A"], T["B"].mT, left=False), "solve left=False")
    for field in ("sign", "logabsdet"):
        _close(np, getattr(dl.slogdet(D["A"]), field), getattr(tl.slogdet(T["A"]), field), f"slogdet {field}")
    for mode in ("reduced", "complete", "r"):
        for field in ("Q", "R"):
            _close(np, getattr(dl.qr(D["tall"], mode), field), getattr(tl.qr(T["tall"], mode), field), f"qr {mode}")
    for full in (True, False):
        d, t = dl.svd(D["tall"], full_matrices=full), tl.svd(T["tall"], full_matrices=full)
        _close(np, d.S, t.S, "svd S")
        assert d.U.shape == t.U.shape and d.Vh.shape == t.Vh.shape
    d, t = dl.eigh(D["sym"], UPLO="U"), tl.eigh(T["sym"], UPLO="U")
    _close(np, d.eigenvalues, t.eigenvalues, "eigh")
    _close(np, dl.eigvalsh(D["A"]), tl.eigvalsh(T["A"]), "eigvalsh reads the lower triangle")
    _close(np, dl.eigvalsh(D["A"], UPLO="U"), tl.eigvalsh(T["A"], UPLO="U"), "eigvalsh reads the upper triangle")
    for driver in (None, "gels", "gelsy", "gelsd", "gelss"):
        d, t = dl.lstsq(D["tall"], D["w"], driver=driver), tl.lstsq(T["tall"], T["w"], driver=driver)
        for field in ("solution", "residuals", "rank", "singular_values"):
            _close(np, getattr(d, field), getattr(t, field), f"lstsq {driver} {field}")
    LU, piv = dl.lu_factor(D["A"])
    tLU, tpiv = tl.lu_factor(T["A"])
    _close(np, LU, tLU, "lu_factor LU")
    _close(np, piv, tpiv, "lu_factor pivots")
    for field in ("P", "L", "U"):
        _close(np, getattr(dl.lu(D["tall"]), field), getattr(tl.lu(T["tall"]), field), f"lu {field}")
    big = np.random.default_rng(2).standard_normal((3, 45, 40))  # past one elimination panel
    for field in ("LU", "pivots"):
        _close(np, getattr(dl.lu_factor(ddpc.tensor(big)), field), getattr(tl.lu_factor(torch.tensor(big)), field),
               f"lu_factor of a larger matrix: {field}")
    for left in (True, False):
        for adjoint in (True, False):
            rhs_d, rhs_t = (D["B"], T["B"]) if left else (D["B"].mT, T["B"].mT)
            _close(np, dl.lu_solve(LU, piv, rhs_d, left=left, adjoint=adjoint),
                   tl.lu_solve(tLU, tpiv, rhs_t, left=left, adjoint=adjoint), f"lu_solve {left} {adjoint}")
    for upper in (True, False):
        for unit in (True, False):
            _close(np, dl.solve_triangular(D["A"], D["B"], upper=upper, unitriangular=unit),
                   tl.solve_triangular(T["A"], T["B"], upper=upper, unitriangular=unit), f"solve_triangular {upper}")
    for n in (-2, 0, 3):
        _close(np, dl.matrix_power(D["A"], n), tl.matrix_power(T["A"], n), f"matrix_power {n}")
    for ord in ("fro", "nuc", 2, -2, 1, -1, math.inf, -math.inf):
        _close(np, dl.matrix_norm(D["A"], ord), tl.matrix_norm(T["A"], ord), f"matrix_norm {ord}")
        _close(np, dl.norm(D["A"], ord, (0, 2), True), tl.norm(T["A"], ord, (0, 2), True), f"norm {ord}")
        _close(np, dl.cond(D["A"], ord), tl.cond(T["A"], ord), f"cond {ord}")
    for ord in (2, 1, 0, 3.5, math.inf, -math.inf, -1.5):
        _close(np, dl.vector_norm(D["A"], ord, (1, 2)), tl.vector_norm(T["A"], ord, (1, 2)), f"vector_norm {ord}")
    _close(np, dl.norm(D["A"]), tl.norm(T["A"]), "norm of all")
    _close(np, dl.multi_dot([D["tall"][0], D["wide"][0], D["w"][0, :, 0]]),
           tl.multi_dot([T["tall"][0], T["wide"][0], T["w"][0, :, 0]]), "multi_dot")
    _close(np, dl.vander(D["B"][0, 0]), tl.vander(T["B"][0, 0]), "vander")
    _close(np, dl.vander(D["B"][0], N=5), tl.vander(T["B"][0], N=5), "vander N")
    _close(np, dl.vecdot(D["A"], D["B"][..., :1], dim=-2), tl.vecdot(T["A"], T["B"][..., :1], dim=-2), "vecdot")
    _close(np, dl.cross(D["B"], D["B"].flip(0)), tl.cross(T["B"], T["B"].flip(0)), "cross")
    _close(np, dl.diagonal(D["A"], offset=-1), tl.diagonal(T["A"], offset=-1), "diagonal")
    _close(np, dl.tensorinv(D["A"][0].reshape(2, 2, 2, 2)), tl.tensorinv(T["A"][0].reshape(2, 2, 2, 2)), "tensorinv")
    _close(np, dl.tensorsolve(D["spd"][0], D["B"][0, :, 0]), tl.tensorsolve(T["spd"][0], T["B"][0, :, 0]),
           "tensorsolve")
    h, tau = torch.geqrf(T["tall"])
    _close(np, dl.householder_product(ddpc.tensor(h.numpy()), ddpc.tensor(tau.numpy())),
           tl.householder_product(h, tau), "householder_product")
    sing = np.stack([np.eye(3), np.diag([1.0, 0.0, 1.0])])
    for name in ("inv_ex", "cholesky_ex"):
        _close(np, getattr(dl, name)(ddpc.tensor(sing)).info, getattr(tl, name)(torch.tensor(sing)).info, name)
    _close(np, dl.solve_ex(ddpc.tensor(sing), ddpc.tensor(np.ones((2, 3)))).info,
           tl.solve_ex(torch.tensor(sing), torch.tensor(np.ones((2, 3)))).info, "solve_ex info")
    _close(np, dl.lu_factor_ex(ddpc.tensor(sing)).info, tl.lu_factor_ex(torch.tensor(sing)).info, "lu_factor_ex")
    # The top-level forms and Tensor methods.
    for name in ("det", "logdet", "inverse", "matrix_exp", "pinverse"):
        _close(np, getattr(ddpc, name)(D["spd"]), getattr(torch, name)(T["spd"]), name)
        _close(np, getattr(D["spd"], name)(), getattr(T["spd"], name)(), f"Tensor.{name}")
    _close(np, ddpc.logdet(-D["spd"][:, :3, :3]), torch.logdet(-T["spd"][:, :3, :3]), "logdet of det < 0")
    d, t = ddpc.svd(D["tall"]), torch.svd(T["tall"])
    _close(np, (d.U * d.S.unsqueeze(-2)) @ d.V.mT, (t.U * t.S.unsqueeze(-2)) @ t.V.mT, "svd reconstruction")
    assert d.V.shape == t.V.shape and D["tall"].svd(some=False).U.shape == T["tall"].svd(some=False).U.shape
    d, t = ddpc.svd(D["tall"], compute_uv=False), torch.svd(T["tall"], compute_uv=False)
    for field in ("U", "S", "V"):
        _close(np, getattr(d, field), getattr(t, field), f"svd compute_uv=False {field}")
    for some in (True, False):  # torch.qr and torch.cholesky are removed in PyTorch 2: against torch.linalg's
        _close(np, D["tall"].qr(some).R, tl.qr(T["tall"], "reduced" if some else "complete").R, "Tensor.qr")
    L, tL = D["spd"].cholesky(), tl.cholesky(T["spd"])
    _close(np, L, tL, "Tensor.cholesky")
    _close(np, ddpc.cholesky(D["spd"], upper=True), tl.cholesky(T["spd"], upper=True), "cholesky upper")
    _close(np, D["B"].cholesky_solve(L), T["B"].cholesky_solve(tL), "cholesky_solve")
    _close(np, L.cholesky_inverse(), tL.cholesky_inverse(), "cholesky_inverse")
    _close(np, ddpc.cholesky_inverse(L.mT, upper=True), torch.cholesky_inverse(tL.mT, upper=True),
           "cholesky_inverse upper")
    _close(np, ddpc.lu_solve(D["B"], LU, piv), torch.linalg.lu_solve(tLU, tpiv, T["B"]), "lu_solve")
    for upper in (True, False):
        for transpose in (True, False):
            d = ddpc.triangular_solve(D["B"], D["A"], upper, transpose)
            t = torch.triangular_solve(T["B"], T["A"], upper, transpose)
            _close(np, d.solution, t.solution, f"triangular_solve {upper} {transpose}")
            _close(np, d.cloned_coefficient, t.cloned_coefficient, "triangular_solve coefficient")
    _close(np, D["A"].matrix_power(3), T["A"].matrix_power(3), "Tensor.matrix_power")
    for field in (0, 1):
        _close(np, D["A"].slogdet()[field], T["A"].slogdet()[field], "Tensor.slogdet")


def _eigh_loss(lib, a, UPLO):
    """A function of eigh's results that does not depend on the eigenvectors' signs."""
    values, vectors = lib.linalg.eigh(a, UPLO=UPLO)
    return (vectors ** 4).sum() + values


def _gradients(np, torch, ddpc):
    x = _inputs(np)

    def svd_loss(lib, a):
        U, S, Vh = lib.linalg.svd(a, full_matrices=False)
        return (U * S.unsqueeze(-2)) @ Vh + (U @ U.mT).sum() * 0.3 + (Vh.mT @ Vh).sum() * 0.2 + S.sum()

    cases = {
        "inv": (lambda lib, a: lib.linalg.inv(a[0]), ["A"]),
        "solve": (lambda lib, a: lib.linalg.solve(a[0], a[1]), ["A", "B"]),
        "solve_ex": (lambda lib, a: lib.linalg.solve_ex(a[0], a[1][0, :, 0]).result, ["A", "B"]),
        "det": (lambda lib, a: lib.linalg.det(a[0]), ["A"]),
        "det_singular": (lambda lib, a: lib.linalg.det(a[0] * lib.tensor([1.0, 1.0, 1.0, 0.0], dtype=a[0].dtype)),
                         ["A"]),
        "slogdet": (lambda lib, a: lib.linalg.slogdet(a[0]).logabsdet, ["A"]),
        "logdet": (lambda lib, a: lib.logdet(a[0]), ["spd"]),
        "cholesky": (lambda lib, a: lib.linalg.cholesky(a[0]), ["spd"]),  # not symmetrised: the raw gradient
        "cholesky_upper": (lambda lib, a: lib.linalg.cholesky(a[0], upper=True), ["spd"]),
        "qr": (lambda lib, a: lib.linalg.qr(a[0]).Q * 2 + lib.linalg.qr(a[0]).R.sum(), ["tall"]),
        "svd": (lambda lib, a: svd_loss(lib, a[0]), ["tall"]),
        "svd_wide": (lambda lib, a: svd_loss(lib, a[0]), ["wide"]),
        "svdvals": (lambda lib, a: lib.linalg.svdvals(a[0]), ["tall"]),
        "eigh": (lambda lib, a: _eigh_loss(lib, a[0], "L"), ["sym"]),
        "eigh_upper": (lambda lib, a: _eigh_loss(lib, a[0], "U"), ["sym"]),
        "eigvalsh": (lambda lib, a: lib.linalg.eigvalsh(a[0]), ["A"]),
        "pinv": (lambda lib, a: lib.linalg.pinv(a[0]), ["tall"]),
        "pinv_wide": (lambda lib, a: lib.linalg.pinv(a[0]), ["wide"]),
        "pinv_hermitian": (lambda lib, a: lib.linalg.pinv(a[0], hermitian=True), ["sym"]),
        "lstsq": (lambda lib, a: lib.linalg.lstsq(a[0], a[1]).solution, ["tall", "w"]),
        "matrix_exp": (lambda lib, a: lib.linalg.matrix_exp(a[0]), ["A"]),
        "matrix_power": (lambda lib, a: lib.linalg.matrix_power(a[0], -3), ["A"]),
        "solve_triangular": (lambda lib, a: lib.linalg.solve_triangular(a[0], a[1], upper=True), ["spd", "B"]),
        "solve_triangular_right_unit": (lambda lib, a: lib.linalg.solve_triangular(
            a[0], a[1].mT, upper=False, left=False, unitriangular=True), ["A", "B"]),
        "lu_factor": (lambda lib, a: lib.linalg.lu_factor(a[0]).LU, ["A"]),
        "lu": (lambda lib, a: lib.linalg.lu(a[0]).L * 2 + lib.linalg.lu(a[0]).U, ["A"]),
        "cholesky_solve": (lambda lib, a: lib.cholesky_solve(a[1], lib.linalg.cholesky(a[0])), ["spd", "B"]),
        "cholesky_inverse": (lambda lib, a: lib.cholesky_inverse(lib.linalg.cholesky(a[0])), ["spd"]),
        "multi_dot": (lambda lib, a: lib.linalg.multi_dot([a[0][0], a[1][0], a[0][1]]), ["tall", "wide"]),
        "vander": (lambda lib, a: lib.linalg.vander(a[0][0]), ["B"]),
        "cond": (lambda lib, a: lib.linalg.cond(a[0]), ["A"]),
    }
    for ord in ("fro", "nuc", 2, -2, 1, -1, math.inf, -math.inf):
        cases[f"matrix_norm {ord}"] = (lambda lib, a, ord=ord: lib.linalg.matrix_norm(a[0], ord), ["A"])
    for ord in (2, 1, 3.5, math.inf, -math.inf):
        cases[f"vector_norm {ord}"] = (lambda lib, a, ord=ord: lib.linalg.vector_norm(a[0], ord, dim=-1), ["A"])
    cases["vector_norm at 0"] = (lambda lib, a: lib.linalg.vector_norm(a[0] * 0, dim=-1), ["A"])
    for name, (fn, keys) in cases.items():
        _sign_free(torch, ddpc, np, lambda lib, ts, fn=fn: fn(lib, ts), [x[k] for k in keys], name)


def _errors(np, torch, ddpc):
    bad = {
        "integer": lambda lib: lib.linalg.inv(lib.tensor([[1, 2], [3, 4]])),
        "half": lambda lib: lib.linalg.det(lib.eye(2, dtype=lib.float16)),
        "non-square": lambda lib: lib.linalg.inv(lib.ones(2, 3, dtype=lib.float64)),
        "singular inv": lambda lib: lib.linalg.inv(lib.zeros(2, 2, dtype=lib.float64)),
        "singular solve": lambda lib: lib.linalg.solve(lib.zeros(2, 2, dtype=lib.float64),
                                                       lib.ones(2, dtype=lib.float64)),
        "not positive-definite": lambda lib: lib.linalg.cholesky(-lib.eye(3, dtype=lib.float64)),
        "1-d": lambda lib: lib.linalg.det(lib.ones(3, dtype=lib.float64)),
        "mixed dtypes": lambda lib: lib.linalg.solve(lib.eye(2, dtype=lib.float64), lib.ones(2, dtype=lib.float32)),
        "bad qr mode": lambda lib: lib.linalg.qr(lib.eye(2, dtype=lib.float64), mode="full"),
        "bad norm ord": lambda lib: lib.linalg.matrix_norm(lib.eye(2, dtype=lib.float64), 3),
        "bad UPLO": lambda lib: lib.linalg.eigh(lib.eye(2, dtype=lib.float64), UPLO="X"),
    }
    for what, fn in bad.items():
        for lib in (torch, ddpc):
            try:
                fn(lib)
            except (RuntimeError, TypeError, ValueError, NotImplementedError) as e:
                if what.startswith(("singular", "not positive")):
                    assert "singular" in str(e) or "positive-definite" in str(e), f"{what}: {lib.__name__}: {e}"
                    assert isinstance(e, RuntimeError), f"{what}: {lib.__name__} raised {type(e).__name__}"
            else:
                raise AssertionError(f"{what}: {lib.__name__} raised nothing")
    for lib in (torch, ddpc):  # with check_errors=False no error, only info
        assert lib.linalg.inv_ex(lib.zeros(2, 2, dtype=lib.float64)).info.item() == 1


def _second_derivatives(np, torch, ddpc):
    """Hessian-vector products through create_graph, ddpc's against torch's."""
    x = _inputs(np)
    rng = np.random.default_rng(9)
    cases = {
        "inv": (lambda lib, a: (lib.linalg.inv(a[0]) ** 2).sum(), ["A"]),
        "solve": (lambda lib, a: (lib.linalg.solve(a[0], a[1]) ** 2).sum(), ["A", "B"]),
        "det": (lambda lib, a: (lib.linalg.det(a[0]) ** 2).sum(), ["A"]),
        "slogdet": (lambda lib, a: (lib.linalg.slogdet(a[0]).logabsdet ** 2).sum(), ["A"]),
        "cholesky": (lambda lib, a: (lib.linalg.cholesky(a[0]) ** 3).sum(), ["spd"]),
        "qr": (lambda lib, a: (lib.linalg.qr(a[0]).Q ** 3).sum() + (lib.linalg.qr(a[0]).R ** 3).sum(), ["tall"]),
        "svdvals": (lambda lib, a: (lib.linalg.svdvals(a[0]) ** 3).sum(), ["tall"]),
        "eigh": (lambda lib, a: (_eigh_loss(lib, a[0], "L") ** 2).sum(), ["sym"]),
        "pinv": (lambda lib, a: (lib.linalg.pinv(a[0]) ** 3).sum(), ["wide"]),
        "matrix_exp": (lambda lib, a: (lib.linalg.matrix_exp(a[0] * 0.5) ** 2).sum(), ["A"]),
        "solve_triangular": (lambda lib, a: (lib.linalg.solve_triangular(a[0], a[1], upper=False) ** 2).sum(),
                             ["spd", "B"]),
        "lu_factor": (lambda lib, a: (lib.linalg.lu_factor(a[0]).LU ** 3).sum(), ["A"]),
        "matrix_norm nuc": (lambda lib, a: lib.linalg.matrix_norm(a[0], "nuc").sum() ** 2, ["A"]),
    }
    for name, (fn, keys) in cases.items():
        arrays = [x[k] for k in keys]
        us = [rng.standard_normal(a.shape) for a in arrays]
        got = []
        for lib, grad in ((torch, torch.autograd.grad), (ddpc, ddpc.autograd.grad)):
            xs = [lib.tensor(a, requires_grad=True) for a in arrays]
            first = grad(fn(lib, xs), xs, create_graph=True)
            dot = sum((g * lib.tensor(u)).sum() for g, u in zip(first, us))
            got.append([h.detach().numpy() for h in grad(dot, xs)])
        for i, (want, have) in enumerate(zip(*got)):
            np.testing.assert_allclose(have, want, rtol=1e-8, atol=1e-8, err_msg=f"{name}: input {i}")


GROUPS = {"values": _values, "gradients": _gradients, "errors": _errors, "second_derivatives": _second_derivatives}


test_matches_pytorch = torch_group_test(__file__, GROUPS)


if __name__ == "__main__":
    run_torch_group(GROUPS)

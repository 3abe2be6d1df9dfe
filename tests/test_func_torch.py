"""Optional: ddpc.func's transforms against torch.func's (skipped when torch
is not installed): values of grad, grad_and_value, vjp, jvp, linearize,
jacrev, jacfwd, hessian and vmap on the same functions, per-sample gradients
of a module, a model ensemble, and the exception types of bad calls. Each
group runs in a child process that imports torch before ddpc."""

from procs import run_torch_group, torch_group_test


def _close(a, b, tol=1e-10):
    import numpy as np

    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=tol, atol=tol)


def _both(np, torch, ddpc, *arrays):
    return [torch.tensor(a) for a in arrays], [ddpc.tensor(a) for a in arrays]


def _functions(lib):
    return {
        "sum_sin": lambda x, y: (x.sin() * y).sum() + (x * x * y).sum(),
        "tanh_mm": lambda x, y: (x.reshape(2, 3) @ y.reshape(3, 2)).tanh().sum(),
        "logsumexp": lambda x, y: (x * y).exp().sum().log(),
    }


def _grads(np, torch, ddpc):
    rng = np.random.default_rng(0)
    (tx, ty), (dx, dy) = _both(np, torch, ddpc, rng.standard_normal(6), rng.standard_normal(6))
    for name in _functions(torch):
        ft, fd = _functions(torch)[name], _functions(ddpc)[name]
        for argnums in (0, 1, (0, 1), (1, 0)):
            want = torch.func.grad(ft, argnums)(tx, ty)
            got = ddpc.func.grad(fd, argnums)(dx, dy)
            for w, g in zip(want if isinstance(argnums, tuple) else (want,),
                            got if isinstance(argnums, tuple) else (got,)):
                _close(g, w)
        (gw, (vw, aw)) = torch.func.grad_and_value(lambda x, y: (ft(x, y), x.sum()), has_aux=True)(tx, ty)
        (gg, (vg, ag)) = ddpc.func.grad_and_value(lambda x, y: (fd(x, y), x.sum()), has_aux=True)(dx, dy)
        for w, g in ((gw, gg), (vw, vg), (aw, ag)):
            _close(g, w)
        # second derivatives through nested grads
        _close(ddpc.func.grad(lambda x: ddpc.func.grad(fd)(x, dy).sum())(dx),
               torch.func.grad(lambda x: torch.func.grad(ft)(x, ty).sum())(tx))


def _products(np, torch, ddpc):
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(5) for _ in range(4)]
    (tx, ty, tu, tv), (dx, dy, du, dv) = _both(np, torch, ddpc, *arrays)

    def f(lib):
        return lambda x, y: {"a": x.sin() * y.exp(), "b": ((x * y).tanh(), x.cumsum(0))}

    ow, fn_w = torch.func.vjp(f(torch), tx, ty)
    og, fn_g = ddpc.func.vjp(f(ddpc), dx, dy)
    for w, g in zip(fn_w({"a": tu, "b": (tv, tu)}), fn_g({"a": du, "b": (dv, du)})):
        _close(g, w)
    ow, jw = torch.func.jvp(f(torch), (tx, ty), (tu, tv))
    og, jg = ddpc.func.jvp(f(ddpc), (dx, dy), (du, dv))
    for key in ("a", "b"):
        for w, g in zip(ow[key] if key == "b" else (ow[key],), og[key] if key == "b" else (og[key],)):
            _close(g, w)
        for w, g in zip(jw[key] if key == "b" else (jw[key],), jg[key] if key == "b" else (jg[key],)):
            _close(g, w)
    _, lin = ddpc.func.linearize(lambda x: x.sin() * x.exp(), dx)
    _close(lin(du), torch.func.jvp(lambda x: x.sin() * x.exp(), (tx,), (tu,))[1])


def _jacobians(np, torch, ddpc):
    rng = np.random.default_rng(2)
    M = rng.standard_normal((4, 3))
    (tx, ty, tm), (dx, dy, dm) = _both(np, torch, ddpc, rng.standard_normal(3), rng.standard_normal(4), M)
    f = {lib: (lambda x, y, m=m: ((m @ x.sin()) * y, (x * x).sum())) for lib, m in ((torch, tm), (ddpc, dm))}
    for tname, dname in (("jacrev", "jacrev"), ("jacfwd", "jacfwd")):
        for argnums in (0, 1, (0, 1)):
            want = getattr(torch.func, tname)(f[torch], argnums)(tx, ty)
            got = getattr(ddpc.func, dname)(f[ddpc], argnums)(dx, dy)
            for w_out, g_out in zip(want, got):
                pairs = zip(w_out, g_out) if isinstance(argnums, tuple) else ((w_out, g_out),)
                for w, g in pairs:
                    _close(g, w)
    h = {lib: (lambda x, y: (x.sin() * y[:3]).sum() * y.exp().sum()) for lib in (torch, ddpc)}
    for argnums in (0, (0, 1)):
        want = torch.func.hessian(h[torch], argnums)(tx, ty)
        got = ddpc.func.hessian(h[ddpc], argnums)(dx, dy)
        if isinstance(argnums, tuple):
            for w_row, g_row in zip(want, got):
                for w, g in zip(w_row, g_row):
                    _close(g, w)
        else:
            _close(got, want)


def _vmaps(np, torch, ddpc):
    rng = np.random.default_rng(3)
    W, x, b = rng.standard_normal((5, 4, 3)), rng.standard_normal((3, 5)), rng.standard_normal(4)
    (tW, tx, tb), (dW, dx, db) = _both(np, torch, ddpc, W, x, b)
    cases = [
        (lambda w, v, c: w @ v + c, dict(in_dims=(0, 1, None))),
        (lambda w, v, c: (w @ v + c).softmax(0), dict(in_dims=(0, 1, None), out_dims=1)),
        (lambda w, v, c: (w.sum(0) * v, c.sum()), dict(in_dims=(0, 1, None), out_dims=(0, None))),
        (lambda w, v, c: w * v[:, None] + c, dict(in_dims=(2, 0, None), out_dims=-1)),
    ]
    for fn, kw in cases:
        want, got = torch.func.vmap(fn, **kw)(tW, tx, tb), ddpc.func.vmap(fn, **kw)(dW, dx, db)
        for w, g in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
            _close(g, w)


def _per_sample_and_ensemble(np, torch, ddpc):
    rng = np.random.default_rng(4)
    weights = [rng.standard_normal((6, 3)), rng.standard_normal(6), rng.standard_normal((2, 6)), rng.standard_normal(2)]
    xs, ys = rng.standard_normal((8, 3)), rng.integers(0, 2, 8)
    results = {}
    for lib in (torch, ddpc):
        nn = lib.nn
        models = [nn.Sequential(nn.Linear(3, 6), nn.Tanh(), nn.Linear(6, 2)).double() for _ in range(3)]
        with lib.no_grad():
            for k, m in enumerate(models):
                for p, w in zip(m.parameters(), weights):
                    p.copy_(lib.tensor(w * (k + 1)))
        params = {n: p.detach() for n, p in models[0].named_parameters()}

        def loss(p, x, y, model=models[0]):
            out = lib.func.functional_call(model, p, (x[None],))
            return nn.functional.cross_entropy(out, y[None])

        per_sample = lib.func.vmap(lib.func.grad(loss), in_dims=(None, 0, 0))(params, lib.tensor(xs), lib.tensor(ys))
        stacked, buffers = lib.func.stack_module_state(models)
        ensemble = lib.func.vmap(lambda p, bf: lib.func.functional_call(models[0], (p, bf), (lib.tensor(xs),)))(
            stacked, buffers)
        results[lib] = (per_sample, ensemble)
    for name in results[torch][0]:
        _close(results[ddpc][0][name], results[torch][0][name])
    _close(results[ddpc][1], results[torch][1])


def _errors(np, torch, ddpc):
    def kind(call):
        try:
            call()
        except Exception as e:  # noqa: BLE001  (the type is what is compared)
            return type(e)
        return None

    for lib in (torch, ddpc):
        lib.manual_seed(0)
    x = np.zeros((3, 2))
    cases = [
        lambda lib: lib.func.grad(lambda v: v * 2)(lib.tensor(x)),
        lambda lib: lib.func.vmap(lambda a, b: a + b)(lib.tensor(x), lib.tensor(x[:2])),
        lambda lib: lib.func.vmap(lambda a: a, in_dims=None)(lib.tensor(x)),
        lambda lib: lib.func.vmap(lambda a: a + lib.randn(2, dtype=lib.float64))(lib.tensor(x)),
        lambda lib: lib.func.vmap(lambda a: a, in_dims=3)(lib.tensor(x)),
    ]
    for case in cases:
        assert kind(lambda: case(ddpc)) is kind(lambda: case(torch)) is not None, case


GROUPS = {"grads": _grads, "products": _products, "jacobians": _jacobians, "vmaps": _vmaps,
          "per_sample_and_ensemble": _per_sample_and_ensemble, "errors": _errors}
test_matches_pytorch = torch_group_test(__file__, GROUPS)

if __name__ == "__main__":
    run_torch_group(GROUPS)

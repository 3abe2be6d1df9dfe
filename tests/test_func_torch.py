"""Optional: ddpc.func's transforms against torch.func's (skipped when torch
is not installed): values of grad, grad_and_value, vjp, jvp, linearize,
jacrev, jacfwd, hessian and vmap on the same functions, per-sample gradients
of a module, a model ensemble, transforms of functions that capture a
module's parameters, functional_call's handling of names, and the
exception types of bad calls. Each group runs in a child process that
imports torch before ddpc."""

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


def _captured(np, torch, ddpc):
    """Transforms of functions that capture a module: results keep the graph
    to its parameters (a physics-informed loss), with torch's values, flags
    and parameter gradients."""
    rng = np.random.default_rng(5)
    weights = [rng.standard_normal((8, 2)), rng.standard_normal(8), rng.standard_normal((1, 8)), rng.standard_normal(1)]
    X, v = rng.standard_normal((5, 2)), rng.standard_normal(2)

    def run(lib, case):
        nn, F = lib.nn, lib.func
        m = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 1)).double()
        with lib.no_grad():
            for p, w in zip(m.parameters(), weights):
                p.copy_(lib.tensor(w))
        x, t = lib.tensor(X), lib.tensor(v)
        u = lambda a: m(a).squeeze()  # noqa: E731
        outs = {
            "pinn": lambda: (F.vmap(F.grad(u))(x) ** 2).mean() + (m(x) ** 2).mean(),
            "second": lambda: F.vmap(F.grad(lambda a: F.grad(u)(a).sum()))(x).sum(),
            "jacrev": lambda: F.jacrev(m)(x[0]),
            "jacfwd": lambda: F.jacfwd(m)(x[0]),
            "hessian": lambda: F.hessian(u)(x[0]),
            "vjp": lambda: F.vjp(m, x[0])[1](lib.ones(1, dtype=lib.float64))[0],
            "jvp": lambda: F.jvp(m, (x[0],), (t,))[1],
            "linearize": lambda: F.linearize(m, x[0])[1](t),
            "grad_and_value": lambda: F.grad_and_value(lambda a: (a * a).sum() + m(a).sum())(x[0]),
        }
        out = outs[case]()
        flat = list(out) if isinstance(out, tuple) else [out]
        sum(o.sum() for o in flat).backward()
        return [o.detach().numpy() for o in flat], [o.requires_grad for o in flat], [p.grad for p in m.parameters()]

    for case in ("pinn", "second", "jacrev", "jacfwd", "hessian", "vjp", "jvp", "linearize", "grad_and_value"):
        (tv, tf, tg), (dv, df, dg) = run(torch, case), run(ddpc, case)
        assert tf == df, (case, tf, df)
        for a, b in zip(dv, tv):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10, err_msg=case)
        if case == "linearize":  # torch traces func with the parameters folded in: they get no gradient
            continue
        for a, b in zip(dg, tg):
            assert (a is None) == (b is None), case
            if a is not None:
                np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-10, err_msg=case)

    x = np.array([0.5, -1.0])
    for lib in (torch, ddpc):  # nothing outside requires grad: the results are detached
        m = lib.nn.Linear(2, 1).double()
        a = lib.tensor(x)
        assert not lib.func.grad(lambda y: (y * y).sum() + m.bias.sum())(a).requires_grad
        assert not lib.func.jacrev(lambda y: y.sin())(a).requires_grad
        with lib.no_grad():
            assert not lib.func.grad(lambda y: m(y).sum())(a).requires_grad
        cotangent = lib.ones(2, dtype=lib.float64, requires_grad=True)  # cotangents that require grad keep it
        assert lib.func.vjp(lambda y: y.sin(), a)[1](cotangent)[0].requires_grad


def _functional_call(np, torch, ddpc):
    """functional_call's names: unexpected ones as attributes for the call
    (strict=False), strict's errors, and conflicting values for tied ones."""
    rng = np.random.default_rng(6)
    W, V, X = rng.standard_normal((3, 3)), rng.standard_normal((3, 3)), rng.standard_normal((2, 3))

    def outcome(lib, values, **kw):
        class Tied(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b = lib.nn.Linear(3, 3, bias=False), lib.nn.Linear(3, 3)
                self.b.weight = self.a.weight

            def forward(self, x):
                return self.b(self.a(x)) * getattr(self, "scale", 1.0)

        m = Tied().double()
        w, v, x = lib.tensor(W), lib.tensor(V), lib.tensor(X)
        with lib.no_grad():
            m.a.weight.copy_(v.T)
            m.b.bias.zero_()
        named = {"w": w, "v": v, "w2": w, "one": lib.ones(3, dtype=lib.float64)}
        try:
            out = lib.func.functional_call(m, {k: named[n] for k, n in values.items()}, (x,), **kw)
        except Exception as e:  # noqa: BLE001  (the type is what is compared)
            return type(e).__name__
        assert not hasattr(m, "scale")
        return out.detach().numpy().round(10).tolist()

    cases = [
        ({"a.weight": "w", "scale": "one"}, {}),
        ({"a.weight": "w", "extra": "one"}, {}),
        ({"a.weight": "w", "b.weight": "v"}, {}),
        ({"a.weight": "w", "b.weight": "w2"}, {}),
        ({"a.weight": "w", "b.weight": "v"}, dict(tie_weights=False)),
        ({"a.weight": "w", "b.bias": "one"}, dict(strict=True)),
        ({"a.weight": "w"}, dict(strict=True)),
        ({"a.weight": "w", "b.bias": "one"}, dict(strict=True, tie_weights=False)),
        ({"a.weight": "w", "b.bias": "one", "scale": "one"}, dict(strict=True)),
        ({"c.weight": "w"}, {}),
    ]
    for values, kw in cases:
        assert outcome(ddpc, values, **kw) == outcome(torch, values, **kw), (values, kw)


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


def _custom_function(np, torch, ddpc):
    def exp_function(lib, with_jvp):
        class Exp(lib.autograd.Function):
            @staticmethod
            def forward(x, k):
                return (x * k).exp()

            @staticmethod
            def setup_context(ctx, inputs, output):
                ctx.save_for_backward(output)
                ctx.save_for_forward(output)
                ctx.k = inputs[1]

            @staticmethod
            def backward(ctx, g):
                return g.detach() * ctx.saved_tensors[0].detach() * ctx.k, None

        if with_jvp:
            Exp.jvp = staticmethod(lambda ctx, t, tk: t * ctx.saved_tensors[0] * ctx.k * 0.5)
        return Exp

    x, t = np.array([0.5, -1.0, 2.0]), np.array([1.0, 3.0, -2.0])
    fa, fb = exp_function(torch, True), exp_function(ddpc, True)
    _close(ddpc.func.jvp(lambda v: fb.apply(v, 3.0), (ddpc.tensor(x),), (ddpc.tensor(t),))[1],
           torch.func.jvp(lambda v: fa.apply(v, 3.0), (torch.tensor(x),), (torch.tensor(t),))[1])
    tangents = []
    for lib, fn in ((torch, fa), (ddpc, fb)):
        with lib.autograd.forward_ad.dual_level():
            dual = lib.autograd.forward_ad.make_dual(lib.tensor(x), lib.tensor(t))
            tangents.append(lib.autograd.forward_ad.unpack_dual(fn.apply(dual, 3.0).sin()).tangent)
    _close(tangents[1], tangents[0])
    for lib in (torch, ddpc):
        bare = exp_function(lib, False)
        try:
            lib.func.jvp(lambda v: bare.apply(v, 3.0), (lib.tensor(x),), (lib.tensor(t),))
            raise AssertionError("no jvp: expected NotImplementedError")
        except NotImplementedError as e:
            assert "must implement the jvp function" in str(e)
        name = type(bare.apply(lib.tensor(x, requires_grad=True), 3.0).grad_fn).__name__
        assert name == "ExpBackward", name


GROUPS = {"grads": _grads, "products": _products, "jacobians": _jacobians, "vmaps": _vmaps,
          "per_sample_and_ensemble": _per_sample_and_ensemble, "captured": _captured,
          "functional_call": _functional_call, "errors": _errors,
          "custom_function": _custom_function}
test_matches_pytorch = torch_group_test(__file__, GROUPS)

if __name__ == "__main__":
    run_torch_group(GROUPS)

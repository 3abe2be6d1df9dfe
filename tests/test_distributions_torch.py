"""Optional: ddpc.distributions against torch.distributions on the same
float64 parameters and values (skipped when torch is not installed):
log_prob, cdf, icdf, entropy, mean, mode, variance and stddev, and
kl_divergence, with their gradients with respect to the parameters (and
to the value for continuous families). Each group runs in a child process
that imports torch before ddpc and fails there, printing what differs."""

from procs import run_torch_group, torch_group_test


def _params(np):
    rng = np.random.default_rng(0)
    probs = rng.uniform(0.1, 1.0, (2, 4))
    return {
        "loc": rng.normal(size=(2, 3)), "scale": rng.uniform(0.5, 2.0, (2, 3)),
        "low": rng.uniform(-2.0, -1.0, (2, 3)), "high": rng.uniform(1.0, 2.0, (2, 3)),
        "p": rng.uniform(0.1, 0.9, (2, 3)), "logit": rng.normal(size=(2, 3)), "rate": rng.uniform(0.5, 2.0, (2, 3)),
        "simplex": probs / probs.sum(-1, keepdims=True), "logits4": rng.normal(size=(2, 4)),
        "mix_logits": rng.normal(size=(2, 3)), "temperature": np.array(0.7),
        "half": np.array([[0.4995, 0.5, 0.5009], [0.47, 0.5001, 0.52]]),
    }


def _values(np):
    rng = np.random.default_rng(1)
    onehot = np.eye(4)[rng.integers(0, 4, (5, 2))]
    simplex = rng.uniform(0.1, 1.0, (5, 2, 4))
    return {
        "real": rng.normal(size=(5, 2, 3)), "positive": rng.uniform(0.1, 3.0, (5, 2, 3)),
        "inside": rng.uniform(-0.9, 0.9, (5, 2, 3)), "unit": rng.uniform(0.05, 0.95, (5, 2, 3)),
        "binary": rng.integers(0, 2, (5, 2, 3)).astype(np.float64), "index4": rng.integers(0, 4, (5, 2)),
        "count": rng.integers(0, 6, (5, 2, 3)).astype(np.float64), "onehot4": onehot,
        "simplex4": simplex / simplex.sum(-1, keepdims=True), "real2": rng.normal(size=(5, 2)),
        "above2": rng.uniform(2.0, 5.0, (5, 2, 3)),
        "counts4": rng.multinomial(5, [0.1, 0.2, 0.3, 0.4], (5, 2)).astype(np.float64),
    }


# name: (constructor over a module M and parameters P, the value to score, whether it is differentiable)
CASES = {
    "Normal": (lambda M, P: M.Normal(P["loc"], P["scale"]), "real", True),
    "Uniform": (lambda M, P: M.Uniform(P["low"], P["high"]), "inside", True),
    "Bernoulli probs": (lambda M, P: M.Bernoulli(probs=P["p"]), "binary", False),
    "Bernoulli logits": (lambda M, P: M.Bernoulli(logits=P["logit"]), "binary", False),
    "Categorical probs": (lambda M, P: M.Categorical(probs=P["simplex"]), "index4", False),
    "Categorical logits": (lambda M, P: M.Categorical(logits=P["logits4"]), "index4", False),
    "OneHotCategorical": (lambda M, P: M.OneHotCategorical(logits=P["logits4"]), "onehot4", False),
    "Exponential": (lambda M, P: M.Exponential(P["rate"]), "positive", True),
    "ContinuousBernoulli probs": (lambda M, P: M.ContinuousBernoulli(probs=P["p"]), "unit", True),
    "ContinuousBernoulli logits": (lambda M, P: M.ContinuousBernoulli(logits=P["logit"]), "unit", True),
    "ContinuousBernoulli near one half": (lambda M, P: M.ContinuousBernoulli(probs=P["half"]), "unit", True),
    "Laplace": (lambda M, P: M.Laplace(P["loc"], P["scale"]), "real", True),
    "LogNormal": (lambda M, P: M.LogNormal(P["loc"], P["scale"]), "positive", True),
    "Cauchy": (lambda M, P: M.Cauchy(P["loc"], P["scale"]), "real", True),
    "Gumbel": (lambda M, P: M.Gumbel(P["loc"], P["scale"]), "real", True),
    "Geometric probs": (lambda M, P: M.Geometric(probs=P["p"]), "count", False),
    "Geometric logits": (lambda M, P: M.Geometric(logits=P["logit"]), "count", False),
    "HalfNormal": (lambda M, P: M.HalfNormal(P["scale"]), "positive", True),
    "HalfCauchy": (lambda M, P: M.HalfCauchy(P["scale"]), "positive", True),
    "Pareto": (lambda M, P: M.Pareto(P["scale"], P["rate"]), "above2", True),
    "Gamma": (lambda M, P: M.Gamma(P["rate"], P["scale"]), "positive", True),
    "Chi2": (lambda M, P: M.Chi2(P["rate"] * 2), "positive", True),
    "InverseGamma": (lambda M, P: M.InverseGamma(P["rate"] * 2, P["scale"]), "positive", True),
    "Beta": (lambda M, P: M.Beta(P["rate"], P["scale"]), "unit", True),
    "Dirichlet": (lambda M, P: M.Dirichlet(P["logits4"].exp()), "simplex4", True),
    "StudentT": (lambda M, P: M.StudentT(P["rate"] * 2, P["loc"], P["scale"]), "real", True),
    "FisherSnedecor": (lambda M, P: M.FisherSnedecor(P["rate"] * 3, P["scale"] * 4), "positive", True),
    "Kumaraswamy": (lambda M, P: M.Kumaraswamy(P["rate"], P["scale"]), "unit", True),
    "Weibull": (lambda M, P: M.Weibull(P["scale"], P["rate"]), "positive", True),
    "Poisson": (lambda M, P: M.Poisson(P["rate"]), "count", False),
    "Binomial probs": (lambda M, P: M.Binomial(5, probs=P["p"]), "count", False),
    "Binomial logits": (lambda M, P: M.Binomial(P["rate"] * 0 + 6, logits=P["logit"]), "count", False),
    "NegativeBinomial probs": (lambda M, P: M.NegativeBinomial(P["rate"] * 3, probs=P["p"]), "count", False),
    "NegativeBinomial logits": (lambda M, P: M.NegativeBinomial(P["rate"], logits=P["logit"]), "count", False),
    "Multinomial": (lambda M, P: M.Multinomial(5, probs=P["simplex"]), "counts4", False),
    "RelaxedBernoulli": (lambda M, P: M.RelaxedBernoulli(P["temperature"], probs=P["p"]), "unit", True),
    "LogitRelaxedBernoulli": (
        lambda M, P: M.relaxed_bernoulli.LogitRelaxedBernoulli(P["temperature"], logits=P["logit"]), "real", True),
    "RelaxedOneHotCategorical": (lambda M, P: M.RelaxedOneHotCategorical(P["temperature"], logits=P["logits4"]),
                                 "simplex4", True),
    "LogisticNormal": (lambda M, P: M.LogisticNormal(P["loc"], P["scale"]), "simplex4", True),
    "Independent": (lambda M, P: M.Independent(M.Normal(P["loc"], P["scale"]), 1), "real", True),
    "MixtureSameFamily": (lambda M, P: M.MixtureSameFamily(M.Categorical(logits=P["mix_logits"]),
                                                           M.Normal(P["loc"], P["scale"])), "real2", True),
    "MixtureSameFamily Independent": (
        lambda M, P: M.MixtureSameFamily(M.Categorical(logits=P["mix_logits"][0, :2]),
                                         M.Independent(M.Normal(P["loc"], P["scale"]), 1)), "real", True),
    "tanh-squashed Normal": (
        lambda M, P: M.TransformedDistribution(M.Normal(P["loc"], P["scale"]),
                                               [M.TanhTransform(), M.AffineTransform(0.5, 2.0)]), "inside", True),
    "sigmoid then power": (
        lambda M, P: M.TransformedDistribution(M.Normal(P["loc"], P["scale"]),
                                               [M.SigmoidTransform(), M.PowerTransform(2.0)]), "unit", True),
    "exp then affine Normal": (
        lambda M, P: M.TransformedDistribution(M.Normal(P["loc"], P["scale"]),
                                               [M.ExpTransform(), M.AffineTransform(P["loc"], P["scale"])]),
        "positive", True),
}

PROPERTIES = ("mean", "mode", "variance", "stddev")

# The cdf of these is the regularized incomplete gamma function of the concentration (made of P["rate"] in CASES),
# which neither library differentiates with respect to the concentration: their cdf gradients are compared for the
# other leaves, and asking for that one must raise NotImplementedError in both.
GAMMA_CDF = ("Gamma", "Chi2", "InverseGamma")


def _both(torch, ddpc, arrays):
    t = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in arrays.items()}
    d = {k: ddpc.tensor(v, dtype=ddpc.float64, requires_grad=True) for k, v in arrays.items()}
    return t, d


def _outcome(fn):
    """fn()'s tensor, or the exception type it raised."""
    try:
        return fn()
    except (NotImplementedError, ValueError) as e:
        return type(e)


def _compare(np, torch, got, want, what, grads):
    """got (ddpc) equals want (torch) in shape and values (NaN and infinities
    where torch has them); then the gradients of a weighted sum of each with
    respect to the pairs of leaves in grads."""
    if isinstance(want, type):
        assert isinstance(got, type) and issubclass(got, want), f"{what}: torch raised {want.__name__}, ddpc {got}"
        return
    assert not isinstance(got, type), f"{what}: ddpc raised {got.__name__}"
    assert tuple(got.shape) == tuple(want.shape), f"{what}: shape {tuple(got.shape)} vs {tuple(want.shape)}"
    w = want.detach().double().numpy()
    np.testing.assert_allclose(got.detach().double().numpy(), w, rtol=1e-9, atol=1e-12, err_msg=what)
    if not want.requires_grad or not got.requires_grad:
        assert want.requires_grad == got.requires_grad or not np.isfinite(w).all(), \
            f"{what}: requires_grad {got.requires_grad} vs {want.requires_grad}"
        return
    weights = np.random.default_rng(2).uniform(0.5, 1.5, w.shape)
    finite = np.isfinite(w)
    tw = torch.tensor(np.where(finite, weights, 0.0))
    t_leaves = [t for t, _ in grads]
    d_leaves = [d for _, d in grads]
    t_grads = torch.autograd.grad((torch.where(torch.tensor(finite), want, 0) * tw).sum(), t_leaves,
                                  allow_unused=True, retain_graph=True)
    import ddpc

    dw = ddpc.tensor(np.where(finite, weights, 0.0))
    d_grads = ddpc.autograd.grad((ddpc.where(ddpc.tensor(finite.astype(np.uint8)), got, 0.0) * dw).sum(), d_leaves,
                                 allow_unused=True, retain_graph=True)
    for (name, tg, dg) in zip([n for n, _ in enumerate(grads)], t_grads, d_grads):
        if tg is None or not tg.abs().sum().item():
            # none, or zero up to rounding (KL(p || p) may leave terms like 1e-18 that cancel in exact arithmetic)
            assert dg is None or np.abs(dg.numpy()).max() <= 1e-12, f"{what}: gradient {name} where torch has none"
            continue
        assert dg is not None, f"{what}: no gradient {name}"
        np.testing.assert_allclose(dg.numpy(), tg.numpy(), rtol=1e-7, atol=1e-10, err_msg=f"{what} gradient {name}")


def _families(np, torch, ddpc):
    import torch.distributions as TD

    import ddpc.distributions as DD

    params, values = _params(np), _values(np)
    for name, (make, value_name, continuous) in CASES.items():
        tp, dp = _both(torch, ddpc, params)
        value = values[value_name]
        tv = torch.tensor(value, requires_grad=continuous)
        dv = ddpc.tensor(value, requires_grad=continuous)
        if value.dtype.kind == "i":
            tv, dv = torch.tensor(value), ddpc.tensor(value)
        td, dd = make(TD, tp), make(DD, dp)
        assert tuple(dd.batch_shape) == tuple(td.batch_shape), f"{name}: batch_shape"
        assert tuple(dd.event_shape) == tuple(td.event_shape), f"{name}: event_shape"
        assert dd.has_rsample == td.has_rsample, f"{name}: has_rsample"
        leaves = [(tp[k], dp[k]) for k in params] + ([(tv, dv)] if continuous else [])
        _compare(np, torch, _outcome(lambda: dd.log_prob(dv)), _outcome(lambda: td.log_prob(tv)),
                 f"{name} log_prob", leaves)
        param_leaves = leaves[:len(params)]
        _compare(np, torch, _outcome(dd.entropy), _outcome(td.entropy), f"{name} entropy", param_leaves)
        for prop in PROPERTIES:
            _compare(np, torch, _outcome(lambda: getattr(dd, prop)), _outcome(lambda: getattr(td, prop)),
                     f"{name} {prop}", param_leaves)
        if not continuous or name in ("LogisticNormal", "RelaxedOneHotCategorical", "Independent", "Dirichlet"):
            continue
        if name in GAMMA_CDF:
            cdf_leaves = [(tp[k], dp[k]) for k in params if k != "rate"] + [(tv, dv)]
            _compare(np, torch, dd.cdf(dv), td.cdf(tv), f"{name} cdf", cdf_leaves)
            for lib, dist, leaf in ((ddpc, dd, dp["rate"]), (torch, td, tp["rate"])):
                try:
                    lib.autograd.grad(dist.cdf(dv if lib is ddpc else tv).sum(), [leaf])
                except NotImplementedError:
                    continue
                raise AssertionError(f"{name} cdf: {lib.__name__} differentiated it in the concentration")
        else:
            _compare(np, torch, _outcome(lambda: dd.cdf(dv)), _outcome(lambda: td.cdf(tv)), f"{name} cdf", leaves)
        prob = np.random.default_rng(3).uniform(0.05, 0.95, value.shape)
        tq, dq = torch.tensor(prob, requires_grad=True), ddpc.tensor(prob, requires_grad=True)
        _compare(np, torch, _outcome(lambda: dd.icdf(dq)), _outcome(lambda: td.icdf(tq)), f"{name} icdf",
                 param_leaves + [(tq, dq)])


def _kl(np, torch, ddpc):
    import torch.distributions as TD

    import ddpc.distributions as DD

    rng = np.random.default_rng(4)
    a = {"loc": rng.normal(size=3), "scale": rng.uniform(0.5, 2, 3), "rate": rng.uniform(0.5, 2, 3),
         "low": rng.uniform(-1, 0, 3), "high": rng.uniform(1, 2, 3), "p": rng.uniform(0.1, 0.9, 3),
         "logits": rng.normal(size=(3, 4))}
    b = {k: v + (rng.uniform(0.1, 0.3, v.shape) if k not in ("low",) else -rng.uniform(0.1, 0.3, v.shape))
         for k, v in a.items()}
    b["p"] = rng.uniform(0.1, 0.9, 3)
    families = {
        "Normal": lambda M, P: M.Normal(P["loc"], P["scale"]),
        "Laplace": lambda M, P: M.Laplace(P["loc"], P["scale"]),
        "Gumbel": lambda M, P: M.Gumbel(P["loc"], P["scale"]),
        "Cauchy": lambda M, P: M.Cauchy(P["loc"], P["scale"]),
        "Exponential": lambda M, P: M.Exponential(P["rate"]),
        "Uniform": lambda M, P: M.Uniform(P["low"], P["high"]),
        "Bernoulli": lambda M, P: M.Bernoulli(probs=P["p"]),
        "Geometric": lambda M, P: M.Geometric(probs=P["p"]),
        "Categorical": lambda M, P: M.Categorical(logits=P["logits"]),
        "OneHotCategorical": lambda M, P: M.OneHotCategorical(logits=P["logits"]),
        "HalfNormal": lambda M, P: M.HalfNormal(P["scale"]),
        "ContinuousBernoulli": lambda M, P: M.ContinuousBernoulli(probs=P["p"]),
        "LogNormal": lambda M, P: M.LogNormal(P["loc"], P["scale"]),
        "Independent Normal": lambda M, P: M.Independent(M.Normal(P["loc"], P["scale"]), 1),
        "Pareto": lambda M, P: M.Pareto(P["scale"], P["rate"]),
        "Pareto below": lambda M, P: M.Pareto(P["scale"] * 0.2, P["rate"] + 2),
        "Gamma": lambda M, P: M.Gamma(P["rate"], P["scale"]),
        "Beta": lambda M, P: M.Beta(P["rate"], P["scale"]),
        "Dirichlet": lambda M, P: M.Dirichlet(P["logits"].exp()),
        "Poisson": lambda M, P: M.Poisson(P["rate"]),
        "Binomial": lambda M, P: M.Binomial(5, probs=P["p"]),
        "Binomial of fewer": lambda M, P: M.Binomial(3, probs=P["p"]),
        "Uniform inside": lambda M, P: M.Uniform(P["p"] * 0.5, P["p"] * 0.5 + 0.4),
    }
    pairs = [(f, f) for f in families] + [
        ("Uniform", "Normal"), ("Uniform", "Gumbel"), ("Uniform", "Exponential"), ("Normal", "Laplace"),
        ("Normal", "Gumbel"), ("Normal", "Uniform"), ("Normal", "Exponential"), ("Laplace", "Normal"),
        ("Gumbel", "Normal"), ("Exponential", "Normal"), ("Exponential", "Gumbel"), ("Exponential", "Uniform"),
        ("Laplace", "Uniform"), ("Gumbel", "Uniform"), ("Exponential", "Laplace"),
        ("ContinuousBernoulli", "Exponential"), ("ContinuousBernoulli", "Normal"), ("ContinuousBernoulli", "Uniform"),
        ("Uniform", "ContinuousBernoulli"), ("Normal", "ContinuousBernoulli"), ("Exponential", "ContinuousBernoulli"),
        ("Pareto", "Pareto below"), ("Pareto", "Exponential"), ("Pareto below", "Exponential"), ("Pareto", "Normal"),
        ("Pareto below", "Normal"), ("Pareto", "Uniform"), ("Pareto", "ContinuousBernoulli"), ("Uniform", "Pareto"),
        ("Exponential", "Pareto"), ("Normal", "Pareto"), ("Laplace", "Pareto"), ("Gumbel", "Pareto"),
        ("ContinuousBernoulli", "Pareto"), ("Binomial", "Binomial of fewer"), ("Poisson", "Bernoulli"),
        ("Poisson", "Binomial"), ("Bernoulli", "Poisson"), ("Pareto", "Gamma"), ("Pareto below", "Gamma"),
        ("Uniform", "Beta"), ("Uniform inside", "Beta"), ("Uniform", "Gamma"), ("Uniform inside", "Gamma")] + [
        ("Beta", q) for q in ("ContinuousBernoulli", "Pareto", "Exponential", "Gamma", "Normal", "Uniform",
                              "Uniform inside")] + [
        ("Gamma", q) for q in ("Beta", "ContinuousBernoulli", "Pareto", "Uniform", "Exponential", "Gumbel",
                               "Normal")] + [
        (p, q) for p in ("Exponential", "Gumbel", "Laplace", "Normal", "Pareto") for q in ("Beta", "Gamma")]
    for fp, fq in pairs:
        (tp, dp), (tq, dq) = _both(torch, ddpc, a), _both(torch, ddpc, b)
        tpd, dpd = families[fp](TD, tp), families[fp](DD, dp)
        tqd, dqd = families[fq](TD, tq), families[fq](DD, dq)
        leaves = [(tp[k], dp[k]) for k in a] + [(tq[k], dq[k]) for k in b]
        _compare(np, torch, _outcome(lambda: DD.kl_divergence(dpd, dqd)), _outcome(lambda: TD.kl_divergence(tpd, tqd)),
                 f"KL({fp} || {fq})", leaves)
    # Bregman divergences of the exponential families against the closed forms.
    for fam in ("Normal", "Exponential", "Bernoulli", "ContinuousBernoulli", "Gamma"):
        (tp, dp), (tq, dq) = _both(torch, ddpc, a), _both(torch, ddpc, b)
        leaves = [(tp[k], dp[k]) for k in a]
        _compare(np, torch, DD.ExponentialFamily.entropy(families[fam](DD, dp)),
                 TD.ExponentialFamily.entropy(families[fam](TD, tp)), f"{fam} Bregman entropy", leaves)


def _transforms(np, torch, ddpc):
    import torch.distributions as TD
    import torch.distributions.transforms as TT

    import ddpc.distributions as DD
    import ddpc.distributions.transforms as DT

    families = {TT: TD, DT: DD}
    rng = np.random.default_rng(5)
    x = rng.normal(size=(4, 3))
    cases = {
        "Exp": lambda T: T.ExpTransform(), "Sigmoid": lambda T: T.SigmoidTransform(),
        "Tanh": lambda T: T.TanhTransform(), "Affine": lambda T: T.AffineTransform(1.5, -2.0),
        "Affine event_dim": lambda T: T.AffineTransform(0.5, 3.0, event_dim=1),
        "Power of exp": lambda T: T.ComposeTransform([T.ExpTransform(), T.PowerTransform(2.0)]),
        "StickBreaking": lambda T: T.StickBreakingTransform(),
        "Softmax": lambda T: T.SoftmaxTransform(), "Abs": lambda T: T.AbsTransform(),
        "Inverse sigmoid": lambda T: T.SigmoidTransform().inv.inv,
        "Softplus": lambda T: T.SoftplusTransform(), "CorrCholesky": lambda T: T.CorrCholeskyTransform(),
        "Reshape": lambda T: T.ReshapeTransform((3,), (3, 1)),
        "Cat": lambda T: T.CatTransform([T.ExpTransform(), T.SoftplusTransform()], -1, [1, 2]),
        "Cat of events": lambda T: T.CatTransform([T.IndependentTransform(T.ExpTransform(), 1),
                                                   T.IndependentTransform(T.TanhTransform(), 1)], 0, [1, 3]),
        "Stack": lambda T: T.StackTransform([T.ExpTransform(), T.SigmoidTransform(), T.AffineTransform(1.0, 2.0)], -1),
        "Normal cdf": lambda T: T.CumulativeDistributionTransform(families[T].Normal(0.3, 1.2)),
    }
    for name, make in cases.items():
        tt, dt = make(TT), make(DT)
        tx, dx = torch.tensor(x, requires_grad=True), ddpc.tensor(x, requires_grad=True)
        ty, dy = tt(tx), dt(dx)
        _compare(np, torch, dy, ty, f"{name} forward", [(tx, dx)])
        _compare(np, torch, _outcome(lambda: dt.log_abs_det_jacobian(dx, dy)),
                 _outcome(lambda: tt.log_abs_det_jacobian(tx, ty)), f"{name} log_abs_det_jacobian", [(tx, dx)])
        ydata = ty.detach().numpy()
        tyl, dyl = torch.tensor(ydata, requires_grad=True), ddpc.tensor(ydata, requires_grad=True)
        _compare(np, torch, dt.inv(dyl), tt.inv(tyl), f"{name} inverse", [(tyl, dyl)])
        assert dt.bijective == tt.bijective, f"{name} bijective"
        assert dt.domain.event_dim == tt.domain.event_dim and dt.codomain.event_dim == tt.codomain.event_dim, name
        assert tuple(dt.forward_shape((4, 3))) == tuple(tt.forward_shape((4, 3))), f"{name} forward_shape"
        assert repr(dt.codomain) == repr(tt.codomain), f"{name}: {dt.codomain!r} vs {tt.codomain!r}"
    matrices = rng.normal(size=(2, 3, 3))
    for name in ("LowerCholeskyTransform", "PositiveDefiniteTransform"):
        tt, dt = getattr(TT, name)(), getattr(DT, name)()
        tx, dx = torch.tensor(matrices, requires_grad=True), ddpc.tensor(matrices, requires_grad=True)
        ty, dy = tt(tx), dt(dx)
        _compare(np, torch, dy, ty, f"{name} forward", [(tx, dx)])
        ydata = ty.detach().numpy()
        tyl, dyl = torch.tensor(ydata, requires_grad=True), ddpc.tensor(ydata, requires_grad=True)
        _compare(np, torch, dt.inv(dyl), tt.inv(tyl), f"{name} inverse", [(tyl, dyl)])


def _constraint_registry(np, torch, ddpc):
    """biject_to and transform_to of every registered constraint class: the
    same transform classes, forward values, inverses and log-determinants."""
    import torch.distributions as TD
    import torch.distributions.constraints as TC

    import ddpc.distributions as DD
    import ddpc.distributions.constraints as DC

    rng = np.random.default_rng(9)
    cases = [
        (lambda C: C.real, (4,)), (lambda C: C.positive, (4,)), (lambda C: C.nonnegative, (4,)),
        (lambda C: C.greater_than(-1.5), (4,)), (lambda C: C.greater_than_eq(2.0), (4,)),
        (lambda C: C.less_than(0.5), (4,)), (lambda C: C.unit_interval, (4,)), (lambda C: C.interval(-2.0, 3.0), (4,)),
        (lambda C: C.half_open_interval(1.0, 2.0), (4,)), (lambda C: C.real_vector, (2, 3)),
        (lambda C: C.independent(C.positive, 2), (2, 3)), (lambda C: C.simplex, (2, 3)),
        (lambda C: C.corr_cholesky, (2, 6)), (lambda C: C.lower_cholesky, (2, 3, 3)),
        (lambda C: C.positive_definite, (2, 3, 3)), (lambda C: C.positive_semidefinite, (2, 3, 3)),
        (lambda C: C.cat([C.positive, C.interval(0.0, 1.0)], dim=0, lengths=[2, 2]), (4,)),
        (lambda C: C.stack([C.real, C.positive, C.less_than(1.0)], dim=-1), (2, 3)),
    ]
    for make, shape in cases:
        x = rng.normal(size=shape)
        for registry in ("biject_to", "transform_to"):
            what = f"{registry}({make(DC)!r})"
            try:
                tt = getattr(TD, registry)(make(TC))
            except NotImplementedError:
                try:
                    getattr(DD, registry)(make(DC))
                except NotImplementedError:
                    continue
                raise AssertionError(f"{what}: torch raised NotImplementedError, ddpc did not")
            dt = getattr(DD, registry)(make(DC))
            assert repr(dt) == repr(tt), f"{what}: {dt!r} vs {tt!r}"
            assert dt.bijective == tt.bijective, what
            tx, dx = torch.tensor(x, requires_grad=True), ddpc.tensor(x, requires_grad=True)
            ty, dy = tt(tx), dt(dx)
            _compare(np, torch, dy, ty, f"{what} forward", [(tx, dx)])
            ydata = ty.detach().numpy()
            tyl, dyl = torch.tensor(ydata, requires_grad=True), ddpc.tensor(ydata, requires_grad=True)
            _compare(np, torch, dt.inv(dyl), tt.inv(tyl), f"{what} inverse", [(tyl, dyl)])
            if tt.bijective:
                _compare(np, torch, dt.log_abs_det_jacobian(dx, dy), tt.log_abs_det_jacobian(tx, ty),
                         f"{what} log_abs_det_jacobian", [(tx, dx)])


def _multivariate(np, torch, ddpc):
    """The multivariate normals in their three forms and the low-rank one:
    densities, entropies, moments and matrices, expand, and the KL divergences
    between every pair, with gradients (the scale_tril leaf's only on its
    lower triangle, the part the distribution reads)."""
    import torch.distributions as TD

    import ddpc.distributions as DD

    rng = np.random.default_rng(6)
    A, B = rng.normal(size=(2, 3, 3)), rng.normal(size=(3, 3))
    arrays = {"loc": rng.normal(size=(2, 3)), "cov": A @ A.transpose(0, 2, 1) + 3 * np.eye(3),
              "loc1": rng.normal(size=3), "tril": np.linalg.cholesky(B @ B.T + np.eye(3)),
              "factor": rng.normal(size=(2, 3, 2)), "diag": rng.uniform(0.5, 2.0, (2, 3))}
    x = rng.normal(size=(5, 2, 3))
    forms = {
        "covariance_matrix": lambda M, P: M.MultivariateNormal(P["loc"], covariance_matrix=P["cov"]),
        "precision_matrix": lambda M, P: M.MultivariateNormal(P["loc"], precision_matrix=P["cov"]),
        "scale_tril": lambda M, P: M.MultivariateNormal(P["loc1"], scale_tril=P["tril"]),
        "low rank": lambda M, P: M.LowRankMultivariateNormal(P["loc"], P["factor"], P["diag"]),
        "low rank unbatched": lambda M, P: M.LowRankMultivariateNormal(P["loc1"], P["factor"][0], P["diag"][0]),
    }
    tp, dp = _both(torch, ddpc, arrays)
    leaves = [(tp[k], dp[k]) for k in arrays]

    def compare(got, want, what):
        _compare(np, torch, got, want, what, leaves)

    for name, make in forms.items():
        td, dd = make(TD, tp), make(DD, dp)
        assert tuple(dd.batch_shape) == tuple(td.batch_shape) and dd.has_rsample == td.has_rsample, name
        compare(dd.log_prob(ddpc.tensor(x)), td.log_prob(torch.tensor(x)), f"{name} log_prob")
        compare(dd.entropy(), td.entropy(), f"{name} entropy")
        for prop in PROPERTIES + ("covariance_matrix", "scale_tril"):
            compare(getattr(dd, prop), getattr(td, prop), f"{name} {prop}")
        np.testing.assert_allclose(dd.precision_matrix.detach().numpy(), td.precision_matrix.detach().numpy(),
                                   rtol=1e-9, atol=1e-12, err_msg=f"{name} precision_matrix")
        leaf = {"scale_tril": "tril", "low rank": "diag", "low rank unbatched": "diag"}.get(name, "cov")
        (dg,) = ddpc.autograd.grad(dd.precision_matrix.sum(), [dp[leaf]], retain_graph=True)
        (tg,) = torch.autograd.grad(td.precision_matrix.sum(), [tp[leaf]], retain_graph=True)
        lower = np.tril if leaf == "tril" else np.asarray
        np.testing.assert_allclose(lower(dg.numpy()), lower(tg.numpy()), rtol=1e-7, atol=1e-10,
                                   err_msg=f"{name} precision_matrix gradient")
        compare(dd.expand((4, 2)).log_prob(ddpc.tensor(x[:4])), td.expand((4, 2)).log_prob(torch.tensor(x[:4])),
                f"{name} expand")
    for p_name, make_p in forms.items():
        for q_name, make_q in forms.items():
            compare(DD.kl_divergence(make_p(DD, dp), make_q(DD, dp)),
                    TD.kl_divergence(make_p(TD, tp), make_q(TD, tp)), f"KL({p_name} || {q_name})")


def _matrix_families(np, torch, ddpc):
    """Wishart in its three forms with a batch of df, and LKJCholesky:
    log_prob (at torch's draws), entropy, moments, matrices and expand, with
    gradients (the scale_tril leaf's only on its lower triangle, the part the
    distribution reads); KL between two Wisharts (the exponential-family
    Bregman divergence)."""
    import warnings

    import torch.distributions as TD

    import ddpc.distributions as DD

    rng = np.random.default_rng(10)
    A = rng.normal(size=(2, 3, 3))
    cov = A @ A.transpose(0, 2, 1) + 2 * np.eye(3)
    arrays = {"df": np.array([4.5, 7.0]), "cov": cov, "tril": np.linalg.cholesky(cov[1]), "df1": np.array(5.5),
              "conc": np.array([0.4, 1.0, 2.5])}
    forms = {
        "covariance_matrix": lambda M, P: M.Wishart(P["df"], covariance_matrix=P["cov"]),
        "precision_matrix": lambda M, P: M.Wishart(P["df"], precision_matrix=P["cov"]),
        "scale_tril": lambda M, P: M.Wishart(P["df"], scale_tril=P["tril"]),
    }
    tp, dp = _both(torch, ddpc, arrays)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = TD.Wishart(torch.tensor(arrays["df"]), covariance_matrix=torch.tensor(cov)).sample((4,))
    tx, dx = x.clone().requires_grad_(), ddpc.tensor(x.numpy(), requires_grad=True)
    for name, make in forms.items():
        td, dd = make(TD, tp), make(DD, dp)
        leaves = [(tp["df"], dp["df"])] + ([] if name == "scale_tril" else [(tp["cov"], dp["cov"])])
        assert tuple(dd.batch_shape) == tuple(td.batch_shape) and dd.has_rsample == td.has_rsample, name
        _compare(np, torch, dd.log_prob(dx), td.log_prob(tx), f"Wishart {name} log_prob", leaves + [(tx, dx)])
        _compare(np, torch, dd.entropy(), td.entropy(), f"Wishart {name} entropy", leaves)
        for prop in ("mean", "mode", "variance", "covariance_matrix", "precision_matrix", "scale_tril"):
            _compare(np, torch, getattr(dd, prop), getattr(td, prop), f"Wishart {name} {prop}", leaves)
        _compare(np, torch, dd.expand((4, 2)).log_prob(dx), td.expand((4, 2)).log_prob(tx), f"Wishart {name} expand",
                 leaves)
        if name == "scale_tril":
            (dg,) = ddpc.autograd.grad(dd.log_prob(dx).sum(), [dp["tril"]])
            (tg,) = torch.autograd.grad(td.log_prob(tx).sum(), [tp["tril"]])
            np.testing.assert_allclose(np.tril(dg.numpy()), np.tril(tg.numpy()), rtol=1e-7, atol=1e-10,
                                       err_msg="Wishart scale_tril gradient")
    p_t, p_d = (M.Wishart(P["df1"], covariance_matrix=P["cov"][0]) for M, P in ((TD, tp), (DD, dp)))
    q_t, q_d = (M.Wishart(P["df"][1], scale_tril=P["tril"]) for M, P in ((TD, tp), (DD, dp)))
    _compare(np, torch, DD.kl_divergence(p_d, q_d), TD.kl_divergence(p_t, q_t), "KL(Wishart || Wishart)",
             [(tp["df1"], dp["df1"]), (tp["cov"], dp["cov"])])
    for dim in (2, 4):
        td, dd = TD.LKJCholesky(dim, tp["conc"]), DD.LKJCholesky(dim, dp["conc"])
        L = td.sample((5,)).numpy()
        tL, dL = torch.tensor(L, requires_grad=True), ddpc.tensor(L, requires_grad=True)
        assert tuple(dd.sample((5,)).shape) == L.shape and dd.has_rsample == td.has_rsample
        _compare(np, torch, dd.log_prob(dL), td.log_prob(tL), f"LKJCholesky {dim} log_prob",
                 [(tp["conc"], dp["conc"]), (tL, dL)])
        _compare(np, torch, dd.expand((5, 3)).log_prob(dL), td.expand((5, 3)).log_prob(tL),
                 f"LKJCholesky {dim} expand", [(tp["conc"], dp["conc"])])


def _generalized_pareto(np, torch, ddpc):
    """GeneralizedPareto: moments, entropy and icdf in float64 with gradients;
    log_prob, cdf, log_cdf and log_survival_function in float32, because
    torch's compare the concentration with a float32 zero and fail on float64."""
    import torch.distributions as TD

    import ddpc.distributions as DD

    rng = np.random.default_rng(11)
    arrays = {"loc": rng.normal(size=(2, 3)), "scale": rng.uniform(0.5, 2.0, (2, 3)),
              "conc": np.array([[-0.4, 0.0, 0.2], [0.7, -1.0, 1e-9]])}
    tp, dp = _both(torch, ddpc, arrays)
    td = TD.GeneralizedPareto(tp["loc"], tp["scale"], tp["conc"])
    dd = DD.GeneralizedPareto(dp["loc"], dp["scale"], dp["conc"])
    leaves = [(tp[k], dp[k]) for k in arrays]
    u = rng.uniform(0.01, 0.99, (5, 2, 3))
    tu, du = torch.tensor(u, requires_grad=True), ddpc.tensor(u, requires_grad=True)
    _compare(np, torch, dd.icdf(du), td.icdf(tu), "GeneralizedPareto icdf", leaves + [(tu, du)])
    _compare(np, torch, dd.entropy(), td.entropy(), "GeneralizedPareto entropy", leaves)
    for prop in ("mean", "mode", "variance", "stddev"):
        _compare(np, torch, getattr(dd, prop), getattr(td, prop), f"GeneralizedPareto {prop}", leaves)
    x = td.icdf(torch.tensor(u)).detach().numpy().astype(np.float32)
    t32 = TD.GeneralizedPareto(*(torch.tensor(arrays[k], dtype=torch.float32) for k in arrays))
    d32 = DD.GeneralizedPareto(*(ddpc.tensor(arrays[k], dtype=ddpc.float32) for k in arrays))
    for fn in ("log_prob", "cdf", "log_cdf", "log_survival_function"):
        want = getattr(t32, fn)(torch.tensor(x)).numpy()
        got = getattr(d32, fn)(ddpc.tensor(x)).numpy()
        assert got.dtype == want.dtype, fn
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6, err_msg=f"GeneralizedPareto float32 {fn}")


def _von_mises(np, torch, ddpc):
    """VonMises against torch's, whose log Bessel functions are polynomial
    approximations good to about 3e-7: values to 1e-6, gradients to 1e-5."""
    import torch.distributions as TD

    import ddpc.distributions as DD

    rng = np.random.default_rng(8)
    loc, kappa, x = rng.normal(size=(2, 3)), rng.uniform(0.05, 30.0, (2, 3)), rng.normal(size=(5, 2, 3)) * 2
    tl, tk, tx = (torch.tensor(a, requires_grad=True) for a in (loc, kappa, x))
    dl, dk, dx = (ddpc.tensor(a, requires_grad=True) for a in (loc, kappa, x))
    td, dd = TD.VonMises(tl, tk), DD.VonMises(dl, dk)
    for what in ("log_prob", "variance", "mean", "mode"):
        want = td.log_prob(tx) if what == "log_prob" else getattr(td, what)
        got = dd.log_prob(dx) if what == "log_prob" else getattr(dd, what)
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6, atol=1e-6, err_msg=what)
        t_grads = torch.autograd.grad(want.sum(), [tl, tk, tx], allow_unused=True, retain_graph=True)
        d_grads = ddpc.autograd.grad(got.sum(), [dl, dk, dx], allow_unused=True, retain_graph=True)
        for tg, dg in zip(t_grads, d_grads):
            assert (tg is None) == (dg is None), what
            if tg is not None:
                np.testing.assert_allclose(dg.numpy(), tg.numpy(), rtol=1e-5, atol=1e-6, err_msg=f"{what} gradient")


def _gamma_gradient(np, torch, ddpc):
    """The implicit gradient of gamma draws against PyTorch's rational and
    asymptotic approximation of it, which is good to a few 1e-4 relative."""
    from ddpc.distributions.gamma import standard_gamma_grad

    rng = np.random.default_rng(7)
    alpha = np.repeat([0.01, 0.3, 1.0, 2.5, 7.9, 8.1, 50.0, 800.0], 50)
    x = rng.gamma(alpha)
    alpha, x = alpha[x > 1e-300], x[x > 1e-300]
    want = torch._standard_gamma_grad(torch.tensor(alpha), torch.tensor(x)).numpy()
    got = standard_gamma_grad(ddpc.tensor(alpha), ddpc.tensor(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=2e-3)


GROUPS = {"constraint_registry": _constraint_registry, "families": _families, "gamma_gradient": _gamma_gradient,
          "generalized_pareto": _generalized_pareto, "kl": _kl, "matrix_families": _matrix_families,
          "multivariate": _multivariate, "transforms": _transforms, "von_mises": _von_mises}


test_matches_pytorch = torch_group_test(__file__, GROUPS)


if __name__ == "__main__":
    run_torch_group(GROUPS)

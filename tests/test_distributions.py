"""ddpc.distributions against closed forms and numpy: densities, sample
moments and distribution functions over many draws with a fixed seed
(within 5 standard errors, or a Kolmogorov-Smirnov bound), pathwise
gradients of rsample against the analytic gradient of a known expectation,
entropies and KL divergences against numerical integration and Monte Carlo,
validation errors, shapes, expand, transforms, and small VAE and REINFORCE
gradient checks."""

import math
import warnings

import numpy as np
import pytest
from numeric import numeric_grad

import ddpc
import ddpc.distributions as D
from ddpc.distributions import constraints, transforms as T

N = 40000  # draws per statistical check


@pytest.fixture(autouse=True)
def _seeded():
    ddpc.manual_seed(1234)


def t64(x, requires_grad=False):
    return ddpc.tensor(np.asarray(x, dtype=np.float64), requires_grad=requires_grad)


def arr(t):
    return np.asarray(t.detach().cpu())


def assert_mean_within(samples, expected, what, k=5.0):
    """The mean of samples (draws along axis 0) is within k standard errors of expected."""
    samples = np.asarray(samples, dtype=np.float64)
    se = samples.std(0) / math.sqrt(samples.shape[0])
    err = np.abs(samples.mean(0) - expected)
    assert np.all(err <= k * se + 1e-9 * (1 + np.abs(expected))), \
        f"{what}: mean {samples.mean(0)} vs {expected} (se {se})"


# Densities against numpy formulas.

X = np.array([-1.7, -0.3, 0.0, 0.4, 2.2])
POS = np.array([0.05, 0.3, 1.0, 2.5, 7.0])

LOG_PROBS = [
    (lambda: D.Normal(0.5, 1.5), X, lambda x: -0.5 * ((x - 0.5) / 1.5) ** 2 - math.log(1.5 * math.sqrt(2 * math.pi))),
    (lambda: D.Laplace(0.5, 1.5), X, lambda x: -np.abs(x - 0.5) / 1.5 - math.log(3.0)),
    (lambda: D.Cauchy(0.5, 1.5), X, lambda x: -np.log(math.pi * 1.5 * (1 + ((x - 0.5) / 1.5) ** 2))),
    (lambda: D.Gumbel(0.5, 1.5), X, lambda x: -(x - 0.5) / 1.5 - np.exp(-(x - 0.5) / 1.5) - math.log(1.5)),
    (lambda: D.Uniform(-2.0, 3.0), X, lambda x: np.full_like(x, -math.log(5.0))),
    (lambda: D.Exponential(1.3), POS, lambda x: math.log(1.3) - 1.3 * x),
    (lambda: D.LogNormal(0.2, 0.7), POS,
     lambda x: -np.log(x * 0.7 * math.sqrt(2 * math.pi)) - (np.log(x) - 0.2) ** 2 / (2 * 0.49)),
    (lambda: D.HalfNormal(1.5), POS,
     lambda x: math.log(2) - 0.5 * (x / 1.5) ** 2 - math.log(1.5 * math.sqrt(2 * math.pi))),
    (lambda: D.HalfCauchy(1.5), POS, lambda x: math.log(2) - np.log(math.pi * 1.5 * (1 + (x / 1.5) ** 2))),
    (lambda: D.Geometric(0.3), np.array([0.0, 1, 2, 5, 9]), lambda k: k * math.log(0.7) + math.log(0.3)),
    (lambda: D.ContinuousBernoulli(0.2), np.array([0.0, 0.1, 0.5, 0.8, 1.0]),
     lambda x: x * math.log(0.2) + (1 - x) * math.log(0.8) + math.log(2 * math.atanh(0.6) / 0.6)),
    (lambda: D.ContinuousBernoulli(0.5), np.array([0.0, 0.1, 0.5, 0.8, 1.0]), lambda x: np.zeros_like(x)),
    (lambda: D.Bernoulli(0.3), np.array([0.0, 1, 1, 0, 1]), lambda k: np.where(k == 1, math.log(0.3), math.log(0.7))),
    (lambda: D.Categorical(t64([0.2, 0.5, 0.3])), np.array([0, 1, 2, 1, 0]),
     lambda k: np.log(np.array([0.2, 0.5, 0.3])[k])),
    (lambda: D.Pareto(0.04, 2.5), POS, lambda x: math.log(2.5) + 2.5 * math.log(0.04) - 3.5 * np.log(x)),
    (lambda: D.Gamma(2.5, 1.5), POS, lambda x: 2.5 * math.log(1.5) + 1.5 * np.log(x) - 1.5 * x - math.lgamma(2.5)),
    (lambda: D.Chi2(3.0), POS, lambda x: 0.5 * np.log(x) - x / 2 - 1.5 * math.log(2) - math.lgamma(1.5)),
    (lambda: D.InverseGamma(2.5, 1.5), POS,
     lambda x: 2.5 * math.log(1.5) - 3.5 * np.log(x) - 1.5 / x - math.lgamma(2.5)),
    (lambda: D.Beta(2.5, 0.7), np.array([0.05, 0.3, 0.5, 0.8, 0.97]),
     lambda x: 1.5 * np.log(x) - 0.3 * np.log1p(-x) - (math.lgamma(2.5) + math.lgamma(0.7) - math.lgamma(3.2))),
    (lambda: D.StudentT(3.5, 0.5, 1.5), X,
     lambda x: (math.lgamma(2.25) - math.lgamma(1.75) - 0.5 * math.log(3.5 * math.pi) - math.log(1.5)
                - 2.25 * np.log1p(((x - 0.5) / 1.5) ** 2 / 3.5))),
    (lambda: D.FisherSnedecor(3.0, 5.0), POS,
     lambda x: (math.lgamma(4.0) - math.lgamma(1.5) - math.lgamma(2.5) + 1.5 * math.log(0.6) + 0.5 * np.log(x)
                - 4.0 * np.log1p(0.6 * x))),
    (lambda: D.Kumaraswamy(2.5, 0.7), np.array([0.05, 0.3, 0.5, 0.8, 0.97]),
     lambda x: math.log(2.5 * 0.7) + 1.5 * np.log(x) - 0.3 * np.log1p(-x ** 2.5)),
    (lambda: D.Weibull(1.5, 2.5), POS, lambda x: math.log(2.5 / 1.5) + 1.5 * np.log(x / 1.5) - (x / 1.5) ** 2.5),
    (lambda: D.Poisson(2.5), np.array([0, 1, 2, 5, 9]),
     lambda k: k * math.log(2.5) - 2.5 - np.array([math.lgamma(v + 1) for v in k])),
    (lambda: D.Binomial(9, 0.3), np.array([0, 1, 2, 5, 9]),
     lambda k: np.array([math.log(math.comb(9, v)) for v in k]) + k * math.log(0.3) + (9 - k) * math.log(0.7)),
    (lambda: D.NegativeBinomial(2.5, 0.3), np.array([0, 1, 2, 5, 9]),
     lambda k: (np.array([math.lgamma(v + 2.5) - math.lgamma(v + 1) for v in k]) - math.lgamma(2.5)
                + k * math.log(0.3) + 2.5 * math.log(0.7))),
]


@pytest.mark.parametrize("make, x, want", LOG_PROBS)
def test_log_prob_against_formula(make, x, want):
    d = make()
    value = ddpc.tensor(x) if x.dtype.kind == "i" else ddpc.tensor(x, dtype=ddpc.float32)
    np.testing.assert_allclose(arr(d.log_prob(value)), want(x), rtol=1e-5, atol=1e-6)


def test_parameters_broadcast_and_numbers_take_the_tensor_dtype():
    d = D.Normal(t64([[0.0], [1.0]]), 2.0)
    assert d.batch_shape == (2, 1) and d.scale.dtype == ddpc.float64 and d.scale.shape == (2, 1)
    d = D.Normal(t64([0.0, 1.0, 2.0]), t64([[1.0], [2.0]]))
    assert d.batch_shape == (2, 3)
    assert D.Normal(0.0, 1.0).batch_shape == () and D.Normal(0.0, 1.0).loc.dtype == ddpc.float32


# Sampling: moments, distribution functions, reproducibility.

MOMENTS = [
    lambda: D.Normal(t64([0.5, -2.0]), t64([1.5, 0.3])),
    lambda: D.Uniform(t64([-2.0, 1.0]), t64([3.0, 1.5])),
    lambda: D.Exponential(t64([0.7, 3.0])),
    lambda: D.Laplace(t64([1.0, -1.0]), t64([0.5, 2.0])),
    lambda: D.Gumbel(t64([1.0, -1.0]), t64([0.5, 2.0])),
    lambda: D.LogNormal(t64([0.0, 1.0]), t64([0.25, 0.5])),
    lambda: D.HalfNormal(t64([0.5, 2.0])),
    lambda: D.Bernoulli(t64([0.1, 0.75])),
    lambda: D.Geometric(t64([0.2, 0.9])),
    lambda: D.ContinuousBernoulli(t64([0.1, 0.5, 0.8])),
    lambda: D.Categorical(t64([[0.1, 0.2, 0.7], [0.5, 0.0, 0.5]])),
    lambda: D.OneHotCategorical(t64([[0.1, 0.2, 0.7], [0.5, 0.0, 0.5]])),
    lambda: D.Independent(D.Normal(t64([0.5, -2.0]), t64([1.5, 0.3])), 1),
    lambda: D.MixtureSameFamily(D.Categorical(t64([0.3, 0.7])), D.Normal(t64([-2.0, 1.0]), t64([0.5, 1.0]))),
    lambda: D.Pareto(t64([0.5, 2.0]), t64([6.0, 9.0])),
    lambda: D.Gamma(t64([0.05, 0.4, 1.0, 3.0, 250.0]), t64([1.0, 2.0, 0.5, 1.0, 3.0])),
    lambda: D.Chi2(t64([1.0, 7.5])),
    lambda: D.InverseGamma(t64([5.0, 9.0]), t64([1.0, 3.0])),
    lambda: D.Beta(t64([0.3, 2.0, 40.0]), t64([0.6, 5.0, 3.0])),
    lambda: D.Dirichlet(t64([[0.3, 1.0, 4.0], [20.0, 2.0, 0.5]])),
    lambda: D.StudentT(t64([5.0, 30.0]), t64([1.0, -1.0]), t64([0.5, 2.0])),
    lambda: D.FisherSnedecor(t64([3.0, 10.0]), t64([12.0, 20.0])),
    lambda: D.Kumaraswamy(t64([0.5, 3.0]), t64([2.0, 0.7])),
    lambda: D.Weibull(t64([1.0, 2.0]), t64([0.8, 3.0])),
    lambda: D.Poisson(t64([0.0, 0.3, 4.0, 9.99, 10.0, 60.0, 5000.0])),
    lambda: D.Binomial(t64([0.0, 5.0, 30.0, 200.0, 1000.0, 40.0]), t64([0.3, 0.9, 0.2, 0.05, 0.6, 1.0])),
    lambda: D.NegativeBinomial(t64([0.5, 3.0, 40.0]), t64([0.3, 0.8, 0.5])),
    lambda: D.Multinomial(7, t64([[0.1, 0.2, 0.7], [0.5, 0.0, 0.5]])),
]


@pytest.mark.parametrize("make", MOMENTS)
def test_sample_mean_and_variance(make):
    d = make()
    x = arr(d.sample((N,)))
    assert x.shape == (N,) + d.batch_shape + d.event_shape
    name = type(d).__name__
    if name != "Categorical":
        assert_mean_within(x, arr(d.mean), f"{name} mean")
        assert_mean_within((x - arr(d.mean)) ** 2, arr(d.variance), f"{name} variance")
    else:
        freq = np.stack([(x == k) for k in range(3)], -1).astype(np.float64)
        assert_mean_within(freq, arr(d.probs), "Categorical frequencies")
        assert not (x[:, 1] == 1).any(), "a category of probability 0 was drawn"


KS = [
    lambda: D.Cauchy(t64([0.5]), t64([2.0])),
    lambda: D.HalfCauchy(t64([1.5])),
    lambda: D.Gumbel(t64([0.5]), t64([2.0])),
    lambda: D.Laplace(t64([0.5]), t64([2.0])),
    lambda: D.Normal(t64([0.5]), t64([2.0])),
    lambda: D.Exponential(t64([0.5])),
    lambda: D.HalfNormal(t64([0.5])),
    lambda: D.ContinuousBernoulli(t64([0.15])),
    lambda: D.ContinuousBernoulli(t64([0.9995])),
    lambda: D.Pareto(t64([0.5]), t64([1.5])),
    lambda: D.Weibull(t64([1.5]), t64([0.7])),
    lambda: D.Kumaraswamy(t64([0.5]), t64([2.0])),
    lambda: D.LogNormal(t64([0.5]), t64([2.0])),
    lambda: D.Gamma(t64([0.7]), t64([2.0])),
    lambda: D.Gamma(t64([40.0]), t64([0.5])),
    lambda: D.Chi2(t64([3.0])),
    lambda: D.InverseGamma(t64([2.5]), t64([1.5])),
]


@pytest.mark.parametrize("make", KS)
def test_samples_follow_the_cdf(make):
    """Kolmogorov-Smirnov: sup |F_n - F| below its 0.1% quantile, 1.95 / sqrt(n)."""
    d = make()
    x = d.sample((N,))
    f = np.sort(arr(d.cdf(x)).reshape(-1))
    n = f.size
    stat = max(np.max(np.arange(1, n + 1) / n - f), np.max(f - np.arange(n) / n))
    assert stat < 1.95 / math.sqrt(n), f"{type(d).__name__}: KS statistic {stat}"


@pytest.mark.parametrize("make", KS[:7])
def test_icdf_inverts_cdf(make):
    d = make()
    p = t64(np.linspace(0.02, 0.98, 25)[:, None])
    np.testing.assert_allclose(arr(d.cdf(d.icdf(p))), arr(p), rtol=1e-9, atol=1e-12)


def test_manual_seed_makes_sampling_reproducible():
    dists = [D.Normal(0.0, 1.0), D.Categorical(t64([0.2, 0.3, 0.5])), D.Bernoulli(0.4), D.Gumbel(0.0, 1.0),
             D.RelaxedOneHotCategorical(0.5, probs=t64([0.2, 0.8]))]
    ddpc.manual_seed(7)
    first = [arr(d.sample((50,))) for d in dists]
    ddpc.manual_seed(7)
    again = [arr(d.sample((50,))) for d in dists]
    ddpc.manual_seed(8)
    other = [arr(d.sample((50,))) for d in dists]
    for a, b, c in zip(first, again, other):
        np.testing.assert_array_equal(a, b)
        assert not np.array_equal(a, c)


def test_relaxed_samples_approach_the_discrete_ones_at_low_temperature():
    probs = t64([0.2, 0.5, 0.3])
    x = arr(D.RelaxedOneHotCategorical(0.05, probs=probs).sample((N,)))
    np.testing.assert_allclose(x.sum(-1), 1.0, rtol=1e-9)
    assert_mean_within(x, arr(probs), "RelaxedOneHotCategorical at low temperature", k=6)
    b = arr(D.RelaxedBernoulli(0.05, probs=t64(0.3)).sample((N,)))
    assert ((b > 0) & (b < 1)).all()
    assert_mean_within(b, 0.3, "RelaxedBernoulli at low temperature", k=6)


# Pathwise gradients of rsample.

def test_normal_rsample_gradient_of_second_moment():
    """E[x**2] = loc**2 + scale**2: d/dloc = 2 loc, d/dscale = 2 scale."""
    loc, scale = t64(0.7, True), t64(1.3, True)
    x = D.Normal(loc, scale).rsample((N,))
    (x ** 2).mean().backward()
    xs = arr(x)
    eps = (xs - 0.7) / 1.3
    assert float(loc.grad) == pytest.approx((2 * xs).mean(), rel=1e-9)
    assert float(scale.grad) == pytest.approx((2 * xs * eps).mean(), rel=1e-9)
    assert_mean_within(2 * xs, 2 * 0.7, "d/dloc")
    assert_mean_within(2 * xs * eps, 2 * 1.3, "d/dscale")


@pytest.mark.parametrize("make, grads", [
    (lambda p: D.Exponential(p[0]), lambda p: [-1 / p[0] ** 2]),
    (lambda p: D.Uniform(p[0], p[1]), lambda p: [0.5, 0.5]),
    (lambda p: D.Laplace(p[0], p[1]), lambda p: [1.0, 0.0]),
    (lambda p: D.LogNormal(p[0], p[1]), lambda p: [math.exp(p[0] + p[1] ** 2 / 2),
                                                   p[1] * math.exp(p[0] + p[1] ** 2 / 2)]),
    (lambda p: D.Gumbel(p[0], p[1]), lambda p: [1.0, 0.5772156649015329]),
    (lambda p: D.HalfNormal(p[0]), lambda p: [math.sqrt(2 / math.pi)]),
])
def test_rsample_gradient_of_the_mean(make, grads):
    """The gradient of the sample mean of rsample equals the mean of the
    per-draw derivatives (central differences over the same noise), which is
    within 5 standard errors of the analytic gradient of the mean."""
    values = [0.4, 1.1]
    params = [t64(v, True) for v in values]
    ddpc.manual_seed(99)
    x = make(params).rsample((N,))
    x.mean().backward()
    for i, want in enumerate(grads(values)):
        ddpc.manual_seed(99)
        lo = arr(make([t64(v - 1e-6 * (j == i)) for j, v in enumerate(values)]).rsample((N,)))
        ddpc.manual_seed(99)
        hi = arr(make([t64(v + 1e-6 * (j == i)) for j, v in enumerate(values)]).rsample((N,)))
        per_draw = (hi - lo) / 2e-6
        assert float(params[i].grad) == pytest.approx(per_draw.mean(), rel=1e-5, abs=1e-7)
        assert_mean_within(per_draw[:, None], want, f"d mean / d parameter {i}")


@pytest.mark.parametrize("make, grads", [
    (lambda p: D.Gamma(p[0], p[1]), lambda a, b: [1 / b, -a / b ** 2]),
    (lambda p: D.Gamma(p[0] * 0.1, p[1]), lambda a, b: [0.1 / b, -0.1 * a / b ** 2]),
    (lambda p: D.Gamma(p[0] * 100, p[1]), lambda a, b: [100 / b, -100 * a / b ** 2]),
    (lambda p: D.Beta(p[0], p[1]), lambda a, b: [b / (a + b) ** 2, -a / (a + b) ** 2]),
    (lambda p: D.Dirichlet(ddpc.stack([p[0], p[1], p[1]])), lambda a, b: [2 * b / (a + 2 * b) ** 2,
                                                                           -2 * a / (a + 2 * b) ** 2]),
])
def test_implicit_rsample_gradient_of_the_mean(make, grads):
    """The gradient of the mean of the first coordinate of rsample through
    gamma draws matches the analytic gradient of its expectation."""
    values = [1.7, 1.3]
    params = [t64(v, True) for v in values]
    d = make(params)
    x = d.rsample((N,))
    (x.select(-1, 0) if d.event_shape else x).mean().backward()
    for p, want in zip(params, grads(*values)):
        assert float(p.grad) == pytest.approx(want, rel=0.03, abs=2e-3)


def test_gamma_rsample_gradient_against_the_cdf_by_quadrature():
    """d x / d alpha of a Gamma(alpha, 1) draw at a fixed cdf value is
    -(dP / dalpha) / p(x): P by Gauss-Legendre quadrature (t = x s^6, which
    leaves a smooth integrand, also after differentiating in alpha) and
    dP / dalpha by central differences."""
    from ddpc.distributions.gamma import standard_gamma_grad

    nodes, weights = np.polynomial.legendre.leggauss(200)
    s, w = (nodes + 1) / 2, weights / 2

    def cdf(alpha, x):
        integrand = 6 * np.exp((6 * alpha - 1) * np.log(s) + alpha * math.log(x) - x * s ** 6 - math.lgamma(alpha))
        return float((w * integrand).sum())

    alphas, xs, want = [], [], []
    for alpha in (0.5, 1.5, 4.0, 30.0):
        for x in (0.1 * alpha, 0.6 * alpha, alpha, 1.8 * alpha + 1):
            h = 1e-5 * alpha
            dP = (cdf(alpha + h, x) - cdf(alpha - h, x)) / (2 * h)
            density = math.exp((alpha - 1) * math.log(x) - x - math.lgamma(alpha))
            alphas.append(alpha), xs.append(x), want.append(-dP / density)
    got = arr(standard_gamma_grad(t64(alphas), t64(xs)))
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_gamma_family_draws_and_gradients_are_finite_at_extreme_concentrations():
    alpha = t64([1e-3, 0.02, 1e4], True)
    x = D.Gamma(alpha, 1.0).rsample((2000,))
    assert np.all(arr(x) > 0) and np.all(np.isfinite(arr(x)))
    x.sum().backward()
    assert np.all(np.isfinite(arr(alpha.grad)))
    np.testing.assert_allclose(arr(alpha.grad)[2] / 2000, 1.0, atol=0.02)
    assert D.Chi2(t64(4.0)).df.item() == 4.0 and D.Chi2(t64([3.0])).expand((2, 1)).batch_shape == (2, 1)


def test_von_mises_density_and_circular_moments():
    d = D.VonMises(t64([0.5, -2.0, 3.0, 1.0]), t64([0.5, 4.0, 1e-6, 300.0]))
    x = np.linspace(-4.0, 4.0, 9)[:, None]
    kappa = np.array([0.5, 4.0, 1e-6, 300.0])
    want = kappa * np.cos(x - np.array([0.5, -2.0, 3.0, 1.0])) - np.log(2 * np.pi * np.i0(kappa))
    np.testing.assert_allclose(arr(d.log_prob(t64(x))), want, rtol=1e-10)
    draws = arr(d.sample((N,)))
    assert draws.min() >= -math.pi and draws.max() < math.pi
    resultant = np.exp(1j * draws)
    assert_mean_within(resultant.real, (1 - arr(d.variance)) * np.cos(arr(d.loc)), "VonMises mean cosine")
    assert_mean_within(resultant.imag, (1 - arr(d.variance)) * np.sin(arr(d.loc)), "VonMises mean sine")
    assert not d.has_rsample and d.expand((2, 4)).sample().shape == (2, 4)


def test_discrete_counts_and_supports():
    b = D.Binomial(t64([4.0, 4.0]), t64([0.2, 0.7]))
    support = b.enumerate_support()
    assert support.shape == (5, 2) and arr(b.log_prob(support)).shape == (5, 2)
    np.testing.assert_allclose(np.exp(arr(b.log_prob(support))).sum(0), 1.0, rtol=1e-12)
    with pytest.raises(NotImplementedError, match="Inhomogeneous"):
        D.Binomial(t64([3.0, 4.0]), t64([0.2, 0.7])).entropy()
    m = D.Multinomial(6, t64([0.2, 0.3, 0.5]))
    draws = arr(m.sample((500,)))
    assert draws.shape == (500, 3) and np.all(draws.sum(-1) == 6)
    with pytest.raises(ValueError):
        m.log_prob(t64([7.0, 0.0, 0.0]))
    with pytest.raises(NotImplementedError, match="inhomogeneous"):
        D.Multinomial(t64(3.0), t64([0.5, 0.5]))
    with pytest.raises(ValueError, match="total_count"):
        D.Binomial(t64(2.5), t64(0.5))
    assert D.Poisson(t64([0.0, 2.0])).sample((100,)).numpy()[:, 0].max() == 0


def test_sample_is_outside_the_graph_and_rsample_inside():
    loc = t64(0.0, True)
    assert not D.Normal(loc, 1.0).sample((3,)).requires_grad
    assert D.Normal(loc, 1.0).rsample((3,)).requires_grad
    assert D.Normal(0.0, 1.0).has_rsample and not D.Bernoulli(0.5).has_rsample
    with pytest.raises(NotImplementedError):
        D.Categorical(t64([0.5, 0.5])).rsample()


# Entropy and KL against integration and Monte Carlo.

COV = np.array([[2.0, 0.6, -0.3], [0.6, 1.0, 0.2], [-0.3, 0.2, 0.5]])
COV2 = np.array([[1.0, -0.4, 0.1], [-0.4, 1.5, 0.3], [0.1, 0.3, 0.8]])
COV_FACTOR = np.array([[1.0, 0.2], [-0.5, 0.7], [0.3, -1.1]])
COV_DIAG = np.array([0.4, 0.9, 0.2])


@pytest.mark.parametrize("make, lo, hi", [
    (lambda: D.Normal(0.3, 1.7), -20, 20), (lambda: D.Laplace(0.3, 1.7), -60, 60),
    (lambda: D.Gumbel(0.3, 1.7), -15, 80), (lambda: D.Exponential(0.6), 0, 80),
    (lambda: D.HalfNormal(1.7), 0, 20), (lambda: D.LogNormal(0.1, 0.5), 1e-9, 40),
    (lambda: D.Uniform(-1.0, 2.5), -0.999999, 2.499999),
    (lambda: D.ContinuousBernoulli(0.15), 0, 1), (lambda: D.ContinuousBernoulli(0.5004), 0, 1),
    (lambda: D.GeneralizedPareto(0.3, 1.7, -0.3), 0.3, 0.3 + 1.7 / 0.3 - 1e-6),
    (lambda: D.GeneralizedPareto(0.3, 1.7, 0.0), 0.3, 80), (lambda: D.GeneralizedPareto(0.3, 1.7, 0.2), 0.3, 2000),
])
def test_entropy_by_numerical_integration(make, lo, hi):
    d = make()
    grid = np.linspace(lo, hi, 400001)
    logp = arr(d.log_prob(t64(grid).to(dtype=d.mean.dtype))).astype(np.float64)
    p = np.exp(logp)
    integrand = np.where(p > 0, -p * logp, 0.0)
    want = float(np.sum((integrand[1:] + integrand[:-1]) / 2 * np.diff(grid)))
    assert abs(float(d.entropy()) - want) < 2e-4, (float(d.entropy()), want)


@pytest.mark.parametrize("make", [
    lambda: D.Cauchy(t64(0.3), t64(1.7)), lambda: D.HalfCauchy(t64(1.7)), lambda: D.Geometric(t64(0.3)),
    lambda: D.Bernoulli(t64(0.3)), lambda: D.Categorical(t64([0.1, 0.6, 0.3])),
    lambda: D.OneHotCategorical(t64([0.1, 0.6, 0.3])),
    lambda: D.Independent(D.Laplace(t64([0.0, 1.0]), t64([1.0, 2.0])), 1),
    lambda: D.MultivariateNormal(t64([0.3, -1.0, 2.0]), t64(COV)),
    lambda: D.LowRankMultivariateNormal(t64([0.3, -1.0, 2.0]), t64(COV_FACTOR), t64(COV_DIAG)),
    lambda: D.Pareto(t64(0.5), t64(3.0)),
    lambda: D.Gamma(t64(0.7), t64(2.0)),
    lambda: D.InverseGamma(t64(3.0), t64(2.0)),
    lambda: D.Beta(t64(0.7), t64(2.0)),
    lambda: D.Dirichlet(t64([0.7, 2.0, 5.0])),
    lambda: D.StudentT(t64(4.0), t64(0.5), t64(2.0)),
    lambda: D.Kumaraswamy(t64(0.7), t64(2.0)),
    lambda: D.Weibull(t64(0.7), t64(2.0)),
    lambda: D.Binomial(12, t64(0.3)),
    lambda: D.Multinomial(4, t64([0.2, 0.3, 0.5])),
    lambda: D.Wishart(t64(4.5), covariance_matrix=t64(COV)),
])
def test_entropy_by_monte_carlo(make):
    d = make()
    neg_logp = -arr(d.log_prob(d.sample((N,))))
    assert_mean_within(neg_logp, arr(d.entropy()), f"{type(d).__name__} entropy")


@pytest.mark.parametrize("p, q", [
    (lambda: D.Normal(t64(0.3), t64(1.2)), lambda: D.Normal(t64(-0.5), t64(0.8))),
    (lambda: D.Laplace(t64(0.3), t64(1.2)), lambda: D.Laplace(t64(-0.5), t64(0.8))),
    (lambda: D.Laplace(t64(0.3), t64(1.2)), lambda: D.Normal(t64(-0.5), t64(0.8))),
    (lambda: D.Normal(t64(0.3), t64(1.2)), lambda: D.Laplace(t64(-0.5), t64(0.8))),
    (lambda: D.Normal(t64(0.3), t64(1.2)), lambda: D.Gumbel(t64(-0.5), t64(0.8))),
    (lambda: D.Gumbel(t64(0.3), t64(1.2)), lambda: D.Normal(t64(-0.5), t64(0.8))),
    (lambda: D.Uniform(t64(-1.0), t64(2.0)), lambda: D.Normal(t64(-0.5), t64(0.8))),
    (lambda: D.Uniform(t64(0.5), t64(2.0)), lambda: D.Exponential(t64(0.8))),
    (lambda: D.Uniform(t64(-1.0), t64(2.0)), lambda: D.Gumbel(t64(-0.5), t64(0.8))),
    (lambda: D.Exponential(t64(1.3)), lambda: D.Exponential(t64(0.6))),
    (lambda: D.Exponential(t64(1.3)), lambda: D.Normal(t64(-0.5), t64(0.8))),
    (lambda: D.Exponential(t64(1.3)), lambda: D.Gumbel(t64(-0.5), t64(0.8))),
    (lambda: D.Cauchy(t64(0.3), t64(1.2)), lambda: D.Cauchy(t64(-0.5), t64(0.8))),
    (lambda: D.HalfNormal(t64(1.2)), lambda: D.HalfNormal(t64(0.8))),
    (lambda: D.LogNormal(t64(0.3), t64(0.5)), lambda: D.LogNormal(t64(-0.5), t64(0.8))),
    (lambda: D.Geometric(t64(0.3)), lambda: D.Geometric(t64(0.6))),
    (lambda: D.ContinuousBernoulli(t64(0.3)), lambda: D.ContinuousBernoulli(t64(0.8))),
    (lambda: D.ContinuousBernoulli(t64(0.3)), lambda: D.Normal(t64(0.2), t64(0.8))),
    (lambda: D.Uniform(t64(0.2), t64(0.7)), lambda: D.ContinuousBernoulli(t64(0.8))),
    (lambda: D.Bernoulli(t64(0.3)), lambda: D.Bernoulli(t64(0.6))),
    (lambda: D.Categorical(t64([0.1, 0.6, 0.3])), lambda: D.Categorical(t64([0.4, 0.4, 0.2]))),
    (lambda: D.Independent(D.Normal(t64([0.3, 1.0]), t64([1.2, 0.5])), 1),
     lambda: D.Independent(D.Normal(t64([0.0, 0.0]), t64([1.0, 1.0])), 1)),
    (lambda: D.Pareto(t64(0.5), t64(3.0)), lambda: D.Pareto(t64(0.3), t64(2.0))),
    (lambda: D.Gamma(t64(0.7), t64(2.0)), lambda: D.Gamma(t64(2.0), t64(1.0))),
    (lambda: D.Beta(t64(0.7), t64(2.0)), lambda: D.Beta(t64(3.0), t64(1.5))),
    (lambda: D.Dirichlet(t64([0.7, 2.0, 5.0])), lambda: D.Dirichlet(t64([1.0, 1.0, 1.0]))),
    (lambda: D.Poisson(t64(3.5)), lambda: D.Poisson(t64(1.5))),
    (lambda: D.Binomial(12, t64(0.3)), lambda: D.Binomial(12, t64(0.6))),
    (lambda: D.Gumbel(t64(0.3), t64(1.2)), lambda: D.Gumbel(t64(-0.5), t64(0.8))),
    (lambda: D.Gamma(t64(2.5), t64(2.0)), lambda: D.Normal(t64(0.2), t64(0.8))),
    (lambda: D.Gamma(t64(2.5), t64(2.0)), lambda: D.Gumbel(t64(0.2), t64(0.8))),
    (lambda: D.Beta(t64(0.7), t64(2.0)), lambda: D.Gamma(t64(2.0), t64(1.0))),
    (lambda: D.Uniform(t64(0.2), t64(0.7)), lambda: D.Beta(t64(3.0), t64(1.5))),
    (lambda: D.Pareto(t64(0.5), t64(3.0)), lambda: D.Exponential(t64(0.8))),
    (lambda: D.Pareto(t64(0.5), t64(3.5)), lambda: D.Normal(t64(0.2), t64(0.8))),
    (lambda: D.Uniform(t64(0.5), t64(2.0)), lambda: D.Pareto(t64(0.3), t64(2.0))),
    (lambda: D.MultivariateNormal(t64([0.3, -1.0, 2.0]), t64(COV)),
     lambda: D.MultivariateNormal(t64([0.0, 0.5, 1.0]), scale_tril=t64(np.linalg.cholesky(COV2)))),
    (lambda: D.LowRankMultivariateNormal(t64([0.3, -1.0, 2.0]), t64(COV_FACTOR), t64(COV_DIAG)),
     lambda: D.LowRankMultivariateNormal(t64([0.0, 0.5, 1.0]), t64(COV_FACTOR[:, :1]), t64(COV_DIAG[::-1]))),
    (lambda: D.MultivariateNormal(t64([0.3, -1.0, 2.0]), t64(COV)),
     lambda: D.LowRankMultivariateNormal(t64([0.0, 0.5, 1.0]), t64(COV_FACTOR), t64(COV_DIAG))),
    (lambda: D.LowRankMultivariateNormal(t64([0.3, -1.0, 2.0]), t64(COV_FACTOR), t64(COV_DIAG)),
     lambda: D.MultivariateNormal(t64([0.0, 0.5, 1.0]), precision_matrix=t64(COV2))),
])
def test_kl_by_monte_carlo(p, q):
    p, q = p(), q()
    x = p.sample((N,))
    ratio = arr(p.log_prob(x)) - arr(q.log_prob(x))
    assert_mean_within(ratio, arr(D.kl_divergence(p, q)), f"KL({type(p).__name__} || {type(q).__name__})")


def test_kl_infinite_where_the_support_is_not_covered_and_unregistered_pairs_raise():
    assert math.isinf(float(D.kl_divergence(D.Normal(0.0, 1.0), D.Uniform(-1.0, 1.0))))
    assert math.isinf(float(D.kl_divergence(D.Uniform(-1.0, 1.0), D.Uniform(0.0, 1.0))))
    assert math.isinf(float(D.kl_divergence(D.Uniform(-1.0, 1.0), D.Exponential(1.0))))
    assert float(D.kl_divergence(D.Bernoulli(0.0), D.Bernoulli(0.5))) == pytest.approx(math.log(2))
    assert math.isinf(float(D.kl_divergence(D.Categorical(t64([0.5, 0.5])), D.Categorical(t64([1.0, 0.0])))))
    with pytest.raises(NotImplementedError, match="No KL\\(p \\|\\| q\\) is implemented for p type Cauchy and q "
                                                  "type Normal"):
        D.kl_divergence(D.Cauchy(0.0, 1.0), D.Normal(0.0, 1.0))
    with pytest.raises(NotImplementedError):
        D.kl_divergence(D.Normal(0.0, 1.0), D.Bernoulli(0.5))
    with pytest.raises(NotImplementedError, match="q.total_count > p.total_count"):
        D.kl_divergence(D.Binomial(3, t64(0.5)), D.Binomial(4, t64(0.5)))
    assert math.isinf(float(D.kl_divergence(D.Binomial(4, t64(0.5)), D.Binomial(3, t64(0.5)))))


@pytest.mark.parametrize("p, q", [
    (lambda: D.Normal(t64([0.3, 1.0]), t64([1.2, 0.5])), lambda: D.Normal(t64([-0.5, 0.0]), t64([0.8, 2.0]))),
    (lambda: D.Exponential(t64([1.3, 0.2])), lambda: D.Exponential(t64([0.6, 0.9]))),
    (lambda: D.Bernoulli(t64([0.3, 0.9])), lambda: D.Bernoulli(t64([0.6, 0.5]))),
])
def test_exponential_family_bregman_kl_and_entropy_match_the_closed_forms(p, q):
    p, q = p(), q()
    bregman = D.kl._kl_expfamily_expfamily(p, q)
    np.testing.assert_allclose(arr(bregman), arr(D.kl_divergence(p, q)), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(arr(D.ExponentialFamily.entropy(p)), arr(p.entropy()), rtol=1e-10, atol=1e-12)


def test_register_kl_takes_the_most_specific_pair():
    class MyNormal(D.Normal):
        pass

    @D.register_kl(MyNormal, D.Normal)
    def _kl_mine(p, q):
        return ddpc.zeros(p.batch_shape) - 1

    assert float(D.kl_divergence(MyNormal(0.0, 1.0), D.Normal(3.0, 1.0))) == -1
    assert float(D.kl_divergence(D.Normal(3.0, 1.0), MyNormal(0.0, 1.0))) == pytest.approx(4.5)
    with pytest.raises(TypeError):
        D.register_kl(int, D.Normal)


# Validation.

def test_bad_parameters_raise_valueerror_naming_the_parameter_and_constraint():
    with pytest.raises(ValueError, match=r"Expected parameter scale \(Tensor of shape \(2,\)\) of distribution "
                                         r"Normal\(loc: ddpc.Size\(\[2\]\), scale: ddpc.Size\(\[2\]\)\) to satisfy the constraint "
                                         r"GreaterThan\(lower_bound=0.0\), but found invalid values"):
        D.Normal(t64([0.0, 1.0]), t64([1.0, -1.0]))
    with pytest.raises(ValueError, match="Expected parameter probs"):
        D.Bernoulli(t64([0.5, 1.5]))
    with pytest.raises(ValueError, match="Expected parameter probs .* Simplex"):
        D.Categorical(t64([0.5, -0.1, 0.6]))
    with pytest.raises(ValueError, match="Either `probs` or `logits` must be specified, but not both."):
        D.Bernoulli(0.5, 0.0)
    with pytest.raises(ValueError, match="Uniform is not defined when low>= high"):
        D.Uniform(1.0, 1.0)
    with pytest.raises(ValueError, match="Expected parameter rate"):
        D.Exponential(t64([0.0]))
    with pytest.raises(ValueError, match="The parameter probs has invalid values"):
        D.ContinuousBernoulli(t64([1.5]))
    with pytest.raises(ValueError, match="to be positive"):
        D.Geometric(t64([0.0]))
    assert D.Normal(0.0, -1.0, validate_args=False).scale.item() == -1.0


def test_values_outside_the_support_raise_and_validation_can_be_turned_off():
    with pytest.raises(ValueError, match=r"Expected value argument \(Tensor of shape \(2,\)\) to be within the "
                                         r"support \(GreaterThanEq\(lower_bound=0.0\)\) of the distribution "
                                         r"Exponential\(rate: 1.0\)"):
        D.Exponential(1.0).log_prob(ddpc.tensor([1.0, -1.0]))
    with pytest.raises(ValueError, match="IntegerInterval"):
        D.Categorical(t64([0.5, 0.5])).log_prob(ddpc.tensor([2]))
    with pytest.raises(ValueError, match="Boolean"):
        D.Bernoulli(0.5).log_prob(ddpc.tensor([0.5]))
    with pytest.raises(ValueError, match="The right-most size of value must match event_shape"):
        D.OneHotCategorical(t64([0.5, 0.5])).log_prob(ddpc.tensor([1.0, 0.0, 0.0]))
    with pytest.raises(ValueError, match="Value is not broadcastable with batch_shape\\+event_shape"):
        D.Normal(t64([0.0, 1.0]), 1.0).log_prob(ddpc.tensor([1.0, 0.0, 0.0]))
    with pytest.raises(ValueError, match="must be a Tensor"):
        D.Normal(0.0, 1.0).log_prob(0.5)
    assert float(D.Uniform(0.0, 1.0, validate_args=False).log_prob(ddpc.tensor(2.0))) == -math.inf
    try:
        D.Distribution.set_default_validate_args(False)
        assert D.Normal(0.0, -1.0).scale.item() == -1.0
        assert float(D.Exponential(1.0).log_prob(ddpc.tensor(-1.0))) == 1.0
    finally:
        D.Distribution.set_default_validate_args(True)
    with pytest.raises(ValueError):
        D.Distribution.set_default_validate_args("yes")
    with pytest.raises(ValueError):
        D.Normal(0.0, -1.0)


def test_constraints_check_and_repr():
    v = t64([-1.0, 0.0, 0.5, 1.0, 2.0])
    assert arr(constraints.positive.check(v)).tolist() == [0, 0, 1, 1, 1]
    assert arr(constraints.unit_interval.check(v)).tolist() == [0, 1, 1, 1, 0]
    assert arr(constraints.boolean.check(v)).tolist() == [0, 1, 0, 1, 0]
    assert arr(constraints.integer_interval(0, 1).check(v)).tolist() == [0, 1, 0, 1, 0]
    assert arr(constraints.nonnegative_integer.check(v)).tolist() == [0, 1, 0, 1, 1]
    assert arr(constraints.greater_than(0.5).check(v)).tolist() == [0, 0, 0, 1, 1]
    assert arr(constraints.interval(-1.0, 0.5).check(v)).tolist() == [1, 1, 1, 0, 0]
    assert arr(constraints.half_open_interval(-1.0, 0.5).check(v)).tolist() == [1, 1, 0, 0, 0]
    assert arr(constraints.real.check(t64([0.0, math.nan, math.inf]))).tolist() == [1, 0, 1]
    assert arr(constraints.simplex.check(t64([[0.2, 0.8], [0.5, 0.6], [-0.1, 1.1]]))).tolist() == [1, 0, 0]
    assert arr(constraints.one_hot.check(t64([[0.0, 1.0], [1.0, 1.0]]))).tolist() == [1, 0]
    assert arr(constraints.independent(constraints.positive, 1).check(t64([[1.0, 2.0], [1.0, -2.0]]))).tolist() \
        == [1, 0]
    assert repr(constraints.independent(constraints.real, 1)) == "IndependentConstraint(Real(), 1)"
    assert repr(constraints.interval(0, 1)) == "Interval(lower_bound=0, upper_bound=1)"
    assert constraints.is_dependent(D.Uniform.support) and not constraints.is_dependent(constraints.real)
    assert constraints.simplex.event_dim == 1 and constraints.integer_interval(0, 3).is_discrete
    with pytest.raises(ValueError):
        constraints.dependent.check(v)


# Shapes, expand, enumerate_support.

SHAPES = [
    (lambda: D.GeneralizedPareto(ddpc.zeros(2, 3), 1.0, 0.2), (2, 3), ()),
    (lambda: D.LKJCholesky(3, ddpc.ones(2)), (2,), (3, 3)),
    (lambda: D.Wishart(ddpc.full((2,), 5.0), covariance_matrix=ddpc.eye(3)), (2,), (3, 3)),
    (lambda: D.Normal(ddpc.zeros(2, 3), 1.0), (2, 3), ()),
    (lambda: D.Bernoulli(logits=ddpc.zeros(2, 3)), (2, 3), ()),
    (lambda: D.Categorical(logits=ddpc.zeros(2, 3, 4)), (2, 3), ()),
    (lambda: D.OneHotCategorical(logits=ddpc.zeros(2, 3, 4)), (2, 3), (4,)),
    (lambda: D.RelaxedOneHotCategorical(0.5, logits=ddpc.zeros(2, 3, 4)), (2, 3), (4,)),
    (lambda: D.RelaxedBernoulli(0.5, logits=ddpc.zeros(2, 3)), (2, 3), ()),
    (lambda: D.Independent(D.Normal(ddpc.zeros(2, 3), 1.0), 1), (2,), (3,)),
    (lambda: D.Independent(D.Normal(ddpc.zeros(2, 3), 1.0), 2), (), (2, 3)),
    (lambda: D.LogisticNormal(ddpc.zeros(2, 3), ddpc.ones(2, 3)), (2,), (4,)),
    (lambda: D.MixtureSameFamily(D.Categorical(logits=ddpc.zeros(2, 5)), D.Normal(ddpc.zeros(2, 5), 1.0)), (2,), ()),
    (lambda: D.MixtureSameFamily(D.Categorical(logits=ddpc.zeros(5)),
                                 D.Independent(D.Normal(ddpc.zeros(2, 5, 3), 1.0), 1)), (2,), (3,)),
    (lambda: D.TransformedDistribution(D.Normal(ddpc.zeros(3), 1.0), [T.TanhTransform()]), (3,), ()),
    (lambda: D.TransformedDistribution(D.Normal(ddpc.zeros(2, 3), 1.0), [T.StickBreakingTransform()]), (2,), (4,)),
    (lambda: D.Gumbel(ddpc.zeros(2, 3), 1.0), (2, 3), ()),
    (lambda: D.Geometric(logits=ddpc.zeros(2, 3)), (2, 3), ()),
    (lambda: D.ContinuousBernoulli(logits=ddpc.zeros(2, 3)), (2, 3), ()),
]


@pytest.mark.parametrize("make, batch, event", SHAPES)
def test_sample_log_prob_and_expand_shapes(make, batch, event):
    d = make()
    assert d.batch_shape == batch and d.event_shape == event
    for sample_shape in [(), (5,), (4, 1)]:
        x = d.sample(sample_shape)
        assert x.shape == tuple(sample_shape) + batch + event
        assert d.log_prob(x).shape == tuple(sample_shape) + batch
    big = d.expand((6,) + batch)
    assert big.batch_shape == (6,) + batch and big.event_shape == event
    assert big.sample((2,)).shape == (2, 6) + batch + event
    x = d.sample()
    np.testing.assert_allclose(arr(big.log_prob(x)), np.broadcast_to(arr(d.log_prob(x)), (6,) + batch), rtol=1e-6)


def test_enumerate_support():
    b = D.Bernoulli(ddpc.full((2, 3), 0.3))
    assert b.enumerate_support().shape == (2, 2, 3) and b.enumerate_support(expand=False).shape == (2, 1, 1)
    c = D.Categorical(logits=ddpc.zeros(2, 4))
    s = c.enumerate_support()
    assert s.shape == (4, 2) and arr(s)[:, 0].tolist() == [0, 1, 2, 3]
    np.testing.assert_allclose(arr(c.log_prob(s).exp().sum(0)), 1.0, rtol=1e-6)
    o = D.OneHotCategorical(logits=ddpc.zeros(2, 4))
    assert o.enumerate_support().shape == (4, 2, 4)
    np.testing.assert_array_equal(arr(o.enumerate_support())[:, 0], np.eye(4))


def test_probs_and_logits_are_both_accepted_and_agree():
    p = t64([[0.1, 0.6, 0.3]])
    a, b = D.Categorical(probs=p), D.Categorical(logits=ddpc.log(p) + 5.0)
    np.testing.assert_allclose(arr(a.logits), arr(b.logits), rtol=1e-12)
    np.testing.assert_allclose(arr(b.probs), arr(p), rtol=1e-12)
    a, b = D.Bernoulli(probs=t64(0.25)), D.Bernoulli(logits=t64(math.log(1 / 3)))
    assert float(a.logits) == pytest.approx(math.log(1 / 3)) and float(b.probs) == pytest.approx(0.25)
    assert float(D.Geometric(logits=t64(0.0)).probs) == 0.5
    assert arr(D.Categorical(t64([0.1, 0.6, 0.3])).mode).tolist() == 1
    assert math.isnan(float(D.Bernoulli(0.5).mode))


# Transforms and TransformedDistribution.

def test_tanh_squashed_normal_log_prob_by_change_of_variables():
    loc, scale, a, b = 0.3, 0.8, 0.5, 2.0
    d = D.TransformedDistribution(D.Normal(t64(loc), t64(scale)),
                                  [T.TanhTransform(), T.AffineTransform(a, b)])
    y = np.array([-1.2, -0.3, 0.4, 2.1])
    x = np.arctanh((y - a) / b)
    normal = -0.5 * ((x - loc) / scale) ** 2 - math.log(scale * math.sqrt(2 * math.pi))
    want = normal - math.log(b) - np.log(1 - np.tanh(x) ** 2)
    np.testing.assert_allclose(arr(d.log_prob(t64(y))), want, rtol=1e-10)


def test_transformed_distribution_cdf_with_a_decreasing_transform():
    d = D.TransformedDistribution(D.Exponential(t64(1.5)), [T.AffineTransform(1.0, -2.0)])
    y = t64([-3.0, 0.0, 0.9])
    np.testing.assert_allclose(arr(d.cdf(y)), np.exp(-1.5 * (1.0 - arr(y)) / 2.0), rtol=1e-12)
    np.testing.assert_allclose(arr(d.icdf(d.cdf(y))), arr(y), rtol=1e-12)


@pytest.mark.parametrize("make", [
    lambda: T.ExpTransform(), lambda: T.SigmoidTransform(), lambda: T.TanhTransform(),
    lambda: T.AffineTransform(0.3, -1.7), lambda: T.PowerTransform(2.5), lambda: T.SigmoidTransform().inv,
    lambda: T.ComposeTransform([T.TanhTransform(), T.AffineTransform(1.0, 3.0), T.ExpTransform()]),
])
def test_log_abs_det_jacobian_against_numeric_derivative(make):
    t = make()
    x = np.array([0.2, 0.7, 1.3]) if isinstance(t, T.PowerTransform) else np.array([-0.8, 0.1, 0.6])
    if isinstance(t, T._InverseTransform):
        x = np.array([0.1, 0.4, 0.8])
    y = t(t64(x))
    np.testing.assert_allclose(arr(t.inv(y)), x, rtol=1e-9)
    deriv = np.array([numeric_grad(lambda v: float(arr(t(t64(v))).sum()), np.array([xi]))[0] for xi in x])
    np.testing.assert_allclose(arr(t.log_abs_det_jacobian(t64(x), y)), np.log(np.abs(deriv)), rtol=1e-6, atol=1e-8)


def test_stick_breaking_log_abs_det_jacobian_against_the_numeric_jacobian():
    t = T.StickBreakingTransform()
    x = np.array([0.3, -0.5, 1.1])
    y = t(t64(x))
    np.testing.assert_allclose(arr(y).sum(), 1.0, rtol=1e-12)
    np.testing.assert_allclose(arr(t.inv(y)), x, rtol=1e-9)
    jac = np.stack([numeric_grad(lambda v, i=i: float(arr(t(t64(v)))[i]), x) for i in range(3)])
    assert float(t.log_abs_det_jacobian(t64(x), y)) == pytest.approx(math.log(abs(np.linalg.det(jac))), rel=1e-6)


def test_transform_inverse_cache_and_equality():
    t = T.ExpTransform()
    assert t.inv.inv is t and t.inv == T.ExpTransform().inv and t.sign == 1
    cached = T.TanhTransform(cache_size=1)
    x = t64([0.5, 30.0])
    y = cached(x)
    assert cached.inv(y) is x  # tanh(30) rounds to 1, whose atanh is infinite: the cache returns x itself
    assert math.isinf(arr(T.TanhTransform().inv(y))[1])
    assert T.AffineTransform(1.0, -2.0).sign == -1 and T.ComposeTransform([t, T.AffineTransform(0, -1)]).sign == -1
    with pytest.raises(ValueError):
        T.ExpTransform(cache_size=2)
    assert T.identity_transform(x) is x
    assert T.StickBreakingTransform().forward_shape((2, 3)) == (2, 4)
    assert T.StickBreakingTransform().inverse_shape((2, 4)) == (2, 3)


def test_softmax_and_abs_transforms():
    x = t64([[0.5, -1.0, 2.0]])
    y = T.SoftmaxTransform()(x)
    np.testing.assert_allclose(arr(y), np.exp(arr(x)) / np.exp(arr(x)).sum(), rtol=1e-12)
    np.testing.assert_allclose(arr(T.SoftmaxTransform()(T.SoftmaxTransform().inv(y))), arr(y), rtol=1e-12)
    np.testing.assert_array_equal(arr(T.AbsTransform()(x)), np.abs(arr(x)))
    assert not T.AbsTransform().bijective and T.ExpTransform().bijective


def _numeric_log_abs_det(f, x):
    """log |det J| of f (a float64 vector to a vector of the same size) at x, by central differences."""
    jac = np.stack([numeric_grad(lambda v, i=i: float(f(v)[i]), x) for i in range(x.size)])
    return math.log(abs(np.linalg.det(jac)))


# transform, an input event (flattened for the Jacobian), and the map from its output to the free coordinates.
JACOBIAN_CASES = {
    "softplus": (lambda: T.SoftplusTransform(), np.array([-3.0, -0.2, 0.5, 4.0]), None),
    "reshape": (lambda: T.ReshapeTransform((6,), (2, 3)), np.arange(6.0) - 2.5, None),
    "cdf": (lambda: T.CumulativeDistributionTransform(D.Normal(t64(0.3), t64(1.2))), np.array([-1.0, 0.2, 2.0]),
            None),
    "cat": (lambda: T.CatTransform([T.ExpTransform(), T.SoftplusTransform(), T.AffineTransform(0.5, -3.0)],
                                   dim=0, lengths=[2, 2, 1]), np.array([-0.4, 0.3, 1.1, -2.0, 0.7]), None),
    "cat of events": (lambda: T.CatTransform([T.IndependentTransform(T.ExpTransform(), 1),
                                              T.IndependentTransform(T.TanhTransform(), 1)], dim=-1, lengths=[2, 3]),
                      np.array([-0.4, 0.3, 1.1, -2.0, 0.7]), None),
    "stack": (lambda: T.StackTransform([T.ExpTransform(), T.SigmoidTransform(), T.SoftplusTransform()], dim=0),
              np.array([0.4, -1.3, 2.2]), None),
    "corr cholesky": (lambda: T.CorrCholeskyTransform(), np.array([0.3, -1.2, 0.8, 0.1, -0.5, 1.7]),
                      lambda y: D.utils.tril_matrix_to_vec(y, diag=-1)),
}


@pytest.mark.parametrize("name", sorted(JACOBIAN_CASES))
def test_more_transforms_log_abs_det_jacobian_against_the_numeric_jacobian(name):
    make, x, free = JACOBIAN_CASES[name]
    t = make()
    free = free or (lambda y: y.reshape(-1))
    y = t(t64(x))
    np.testing.assert_allclose(arr(t.inv(y)), x, rtol=1e-9, atol=1e-12)
    want = _numeric_log_abs_det(lambda v: arr(free(t(t64(v)))), x)
    ladj = t.log_abs_det_jacobian(t64(x), y)
    got = arr(ladj).sum() if t.domain.event_dim == 0 else float(ladj)
    assert got == pytest.approx(want, rel=1e-6, abs=1e-8), name
    assert t.bijective


def test_corr_cholesky_transform_gives_cholesky_factors_of_correlation_matrices():
    t = T.CorrCholeskyTransform()
    x = t64(np.random.default_rng(3).normal(size=(5, 10)) * 2)
    y = t(x)
    assert y.shape == (5, 5, 5) and t.forward_shape((5, 10)) == (5, 5, 5) and t.inverse_shape((5, 5, 5)) == (5, 10)
    corr = arr(y) @ arr(y).transpose(0, 2, 1)
    np.testing.assert_allclose(np.diagonal(corr, axis1=1, axis2=2), 1.0, rtol=1e-12)
    np.testing.assert_array_equal(arr(constraints.corr_cholesky.check(y)), 1)
    np.testing.assert_array_equal(arr(constraints.corr_cholesky.check(t64([np.eye(3), np.eye(3) * 2]))), [1, 0])
    np.testing.assert_allclose(arr(t.inv(y)), arr(x), rtol=1e-8, atol=1e-10)
    with pytest.raises(ValueError):
        t.forward_shape((4,))


def test_matrix_transforms_onto_cholesky_factors_and_positive_definite_matrices():
    x = t64(np.random.default_rng(4).normal(size=(3, 4, 4)))
    lower = T.LowerCholeskyTransform()(x)
    np.testing.assert_array_equal(arr(constraints.lower_cholesky.check(lower)), 1)
    np.testing.assert_allclose(np.tril(arr(lower), -1), np.tril(arr(x), -1), rtol=0)
    np.testing.assert_allclose(np.diagonal(arr(lower), axis1=1, axis2=2),
                               np.exp(np.diagonal(arr(x), axis1=1, axis2=2)), rtol=1e-12)
    np.testing.assert_allclose(arr(T.LowerCholeskyTransform().inv(lower)), np.tril(arr(x)), rtol=1e-12)
    pd = T.PositiveDefiniteTransform()(x)
    np.testing.assert_allclose(arr(pd), arr(lower) @ arr(lower).transpose(0, 2, 1), rtol=1e-12)
    np.testing.assert_array_equal(arr(constraints.positive_definite.check(pd)), 1)
    np.testing.assert_allclose(arr(T.PositiveDefiniteTransform()(T.PositiveDefiniteTransform().inv(pd))), arr(pd),
                               rtol=1e-10)
    assert not T.LowerCholeskyTransform().bijective and T.LowerCholeskyTransform() == T.LowerCholeskyTransform()


def test_cat_and_stack_transforms_check_their_pieces():
    cat = T.CatTransform([T.ExpTransform(), T.identity_transform], dim=0, lengths=[2, 1])
    with pytest.raises(ValueError):
        cat(t64([1.0, 2.0]))
    stack = T.StackTransform([T.ExpTransform(), T.identity_transform], dim=1)
    with pytest.raises(ValueError):
        stack(t64(np.zeros((2, 3))))
    y = stack(t64([[0.0, -1.0], [1.0, 3.0]]))
    np.testing.assert_allclose(arr(y), [[1.0, -1.0], [math.e, 3.0]], rtol=1e-12)
    np.testing.assert_allclose(arr(stack.log_abs_det_jacobian(t64([[0.0, -1.0], [1.0, 3.0]]), y)),
                               [[0.0, 0.0], [1.0, 0.0]], atol=1e-15)
    assert repr(cat.domain) == "Cat()" and stack.codomain.event_dim == 0
    with pytest.raises(ValueError):
        T.ReshapeTransform((2, 3), (4,))


REGISTRY_CONSTRAINTS = [
    (constraints.real, (4,)), (constraints.positive, (4,)), (constraints.nonnegative, (4,)),
    (constraints.greater_than(-1.5), (4,)), (constraints.greater_than_eq(2.0), (4,)),
    (constraints.less_than(0.5), (4,)), (constraints.unit_interval, (4,)), (constraints.interval(-2.0, 3.0), (4,)),
    (constraints.half_open_interval(1.0, 2.0), (4,)), (constraints.real_vector, (2, 3)),
    (constraints.independent(constraints.positive, 2), (2, 3)), (constraints.simplex, (2, 3)),
    (constraints.corr_cholesky, (2, 3)), (constraints.lower_cholesky, (2, 3, 3)),
    (constraints.positive_definite, (2, 3, 3)), (constraints.positive_semidefinite, (2, 3, 3)),
    (constraints.cat([constraints.positive, constraints.interval(0.0, 1.0)], dim=0, lengths=[2, 2]), (4,)),
    (constraints.stack([constraints.real, constraints.positive, constraints.less_than(1.0)], dim=-1), (2, 3)),
]


@pytest.mark.parametrize("registry", ["biject_to", "transform_to"])
@pytest.mark.parametrize("constraint, shape", REGISTRY_CONSTRAINTS, ids=lambda c: repr(c)[:40])
def test_constraint_registry_maps_unconstrained_values_into_the_constraint(registry, constraint, shape):
    bijective = registry == "biject_to"
    if bijective and isinstance(constraint, (type(constraints.lower_cholesky), type(constraints.positive_definite),
                                             type(constraints.positive_semidefinite))):
        with pytest.raises(NotImplementedError):
            D.biject_to(constraint)
        return
    t = getattr(D, registry)(constraint)
    x = t64(np.random.default_rng(7).normal(size=shape))
    y = t(x)
    np.testing.assert_array_equal(arr(constraint.check(y)), 1)
    np.testing.assert_allclose(arr(t(t.inv(y))), arr(y), rtol=1e-9, atol=1e-12)
    if bijective:
        assert t.bijective
        np.testing.assert_allclose(arr(t.inv(y)), arr(x), rtol=1e-8, atol=1e-10)


def test_constraint_registry_registers_factories_for_new_constraint_classes():
    registry = D.constraint_registry.ConstraintRegistry()

    class Odd(constraints.Constraint):
        def check(self, value):
            return value.remainder(2) == 1

    with pytest.raises(NotImplementedError, match="Odd"):
        registry(Odd())

    @registry.register(Odd())
    def _odd(constraint):
        return T.AffineTransform(1.0, 2.0)

    assert isinstance(registry(Odd()), T.AffineTransform)
    with pytest.raises(TypeError):
        registry.register(int, _odd)
    assert D.biject_to(constraints.simplex) == T.StickBreakingTransform()
    assert D.transform_to(constraints.simplex) == T.SoftmaxTransform()


# Small models: a VAE step and REINFORCE.

def test_vae_style_gradient_matches_the_analytic_one():
    """loss = E_q[(x - z)^2 / 2] + KL(N(loc, s) || N(0, 1)) with z = rsample;
    d/dloc = loc - (x - loc) and d/ds = s + s - 1/s."""
    x, loc0, s0 = 1.5, 0.4, 0.7
    loc, scale = t64([loc0], True), t64([s0], True)
    q = D.Normal(loc, scale)
    z = q.rsample((N,))
    loss = ((x - z) ** 2 / 2).mean(0) + D.kl_divergence(q, D.Normal(0.0, 1.0))
    loss.sum().backward()
    zs = arr(z)[:, 0]
    eps = (zs - loc0) / s0
    assert_mean_within((-(x - zs) + loc0)[:, None], loc0 - (x - loc0), "d/dloc")
    assert_mean_within((-(x - zs) * eps + s0 - 1 / s0)[:, None], 2 * s0 - 1 / s0, "d/ds")
    assert float(loc.grad) == pytest.approx(np.mean(-(x - zs)) + loc0, rel=1e-9)
    assert float(scale.grad) == pytest.approx(np.mean(-(x - zs) * eps) + s0 - 1 / s0, rel=1e-9)


def test_reinforce_gradient_matches_the_analytic_one():
    """J = E_{a ~ softmax(theta)}[r(a)]: grad J = p * (r - J), estimated by
    mean(r(a) * grad log p(a)) with a score-function surrogate."""
    theta0 = np.array([0.2, -0.4, 0.9, 0.0])
    reward = np.array([1.0, -2.0, 0.5, 3.0])
    theta = t64(theta0, True)
    policy = D.Categorical(logits=theta)
    actions = policy.sample((N,))
    surrogate = (t64(reward)[actions] * policy.log_prob(actions)).mean()
    surrogate.backward()
    p = np.exp(theta0) / np.exp(theta0).sum()
    a = arr(actions)
    per_draw = reward[a][:, None] * (np.eye(4)[a] - p)
    np.testing.assert_allclose(arr(theta.grad), per_draw.mean(0), rtol=1e-9, atol=1e-12)
    assert_mean_within(per_draw, p * (reward - p @ reward), "REINFORCE gradient")


def test_gaussian_policy_with_tanh_squashing_trains():
    """A tanh-squashed Gaussian policy's log_prob of its own rsample (through the
    transform cache) is finite and differentiable, and a few steps of gradient
    ascent on E[-(a - 0.5)^2] move its mean action toward 0.5."""
    loc, log_scale = t64([0.0], True), t64([0.0], True)
    opt = ddpc.optim.SGD([loc, log_scale], lr=0.5)
    for _ in range(40):
        d = D.TransformedDistribution(D.Normal(loc, log_scale.exp()), [T.TanhTransform(cache_size=1)])
        a = d.rsample((256,))
        logp = d.log_prob(a)
        assert np.isfinite(arr(logp)).all()
        loss = ((a - 0.5) ** 2).mean() + 0.01 * logp.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert abs(math.tanh(float(loc)) - 0.5) < 0.1


# On a GPU: the same draws, densities and gradients as on the host.

GPU_CASES = [
    lambda P: D.Normal(P[0], P[1]),
    lambda P: D.Laplace(P[0], P[1]),
    lambda P: D.Gumbel(P[0], P[1]),
    lambda P: D.Cauchy(P[0], P[1]),
    lambda P: D.Exponential(P[1]),
    lambda P: D.LogNormal(P[0], P[1]),
    lambda P: D.Bernoulli(logits=P[0]),
    lambda P: D.Geometric(logits=P[0]),
    lambda P: D.Categorical(logits=P[0]),
    lambda P: D.OneHotCategorical(logits=P[0]),
    lambda P: D.RelaxedOneHotCategorical(P[1][0, 0], logits=P[0]),
    lambda P: D.RelaxedBernoulli(0.7, logits=P[0]),
    lambda P: D.MixtureSameFamily(D.Categorical(logits=P[0]), D.Normal(P[0], P[1])),
    lambda P: D.TransformedDistribution(D.Normal(P[0], P[1]), [T.TanhTransform(), T.AffineTransform(0.5, 2.0)]),
    lambda P: D.MultivariateNormal(P[0], P[0].unsqueeze(-1) * P[0].unsqueeze(-2)
                                   + ddpc.eye(4, dtype=P[0].dtype, device=P[0].device)),
    lambda P: D.LowRankMultivariateNormal(P[0], P[1].unsqueeze(-1), P[1]),
    lambda P: D.Gamma(P[1], P[1] * 2),
    lambda P: D.Beta(P[1], P[1] * 0.5),
    lambda P: D.Dirichlet(P[1]),
    lambda P: D.StudentT(P[1] * 3, P[0], P[1]),
    lambda P: D.Poisson(P[1] * 20),
    lambda P: D.Binomial(40, logits=P[0]),
    lambda P: D.NegativeBinomial(P[1] * 5, logits=P[0]),
    lambda P: D.VonMises(P[0], P[1]),
    lambda P: D.GeneralizedPareto(P[0], P[1], P[0] * 0.2),
    lambda P: D.LKJCholesky(3, P[1]),
    lambda P: D.Wishart(P[1][:, 0] + 4, covariance_matrix=P[1].unsqueeze(-1) * P[1].unsqueeze(-2)
                        + ddpc.eye(4, dtype=P[1].dtype, device=P[1].device)),
]


def _on(device, make, arrays, seed):
    params = [ddpc.tensor(a, device=device, requires_grad=True) for a in arrays]
    d = make(params)
    ddpc.manual_seed(seed)
    x = d.sample((7,))
    assert x.device == params[0].device
    logp = d.log_prob(x)
    total = logp.sum() + (d.rsample((3,)).sum() if d.has_rsample else 0)
    if type(d) not in (D.MixtureSameFamily, D.RelaxedOneHotCategorical, D.RelaxedBernoulli, D.TransformedDistribution,
                       D.Poisson, D.NegativeBinomial, D.VonMises, D.LKJCholesky):
        total = total + d.entropy().sum()
    total.backward()
    return arr(x), arr(logp), [arr(p.grad) for p in params if p.grad is not None]


@pytest.mark.gpu
@pytest.mark.parametrize("make", GPU_CASES)
def test_sampling_and_log_prob_on_a_gpu_match_the_host(make):
    rng = np.random.default_rng(6)
    arrays = [rng.normal(size=(2, 4)), rng.uniform(0.5, 2.0, (2, 4))]
    host = _on("cpu", make, arrays, 11)
    gpu = _on("cuda", make, arrays, 11)
    for h, g in zip([host[0], host[1]] + host[2], [gpu[0], gpu[1]] + gpu[2]):
        np.testing.assert_allclose(g, h, rtol=1e-9, atol=1e-12)


# Multivariate normals.

def _mvn_log_density(x, loc, cov):
    diff = x - loc
    maha = np.einsum("...i,ij,...j->...", diff, np.linalg.inv(cov), diff)
    return -0.5 * (maha + np.linalg.slogdet(cov)[1] + loc.shape[-1] * math.log(2 * math.pi))


MVN_FORMS = [
    lambda loc: D.MultivariateNormal(t64(loc), covariance_matrix=t64(COV)),
    lambda loc: D.MultivariateNormal(t64(loc), precision_matrix=t64(np.linalg.inv(COV))),
    lambda loc: D.MultivariateNormal(t64(loc), scale_tril=t64(np.linalg.cholesky(COV))),
]


@pytest.mark.parametrize("make", MVN_FORMS)
def test_multivariate_normal_forms_agree_with_the_density_and_the_matrices(make):
    loc = np.array([0.3, -1.0, 2.0])
    d = make(loc)
    x = np.random.default_rng(7).normal(size=(4, 3))
    np.testing.assert_allclose(arr(d.log_prob(t64(x))), _mvn_log_density(x, loc, COV), rtol=1e-10)
    np.testing.assert_allclose(arr(d.covariance_matrix), COV, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(arr(d.precision_matrix), np.linalg.inv(COV), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(arr(d.scale_tril), np.linalg.cholesky(COV), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(arr(d.variance), np.diag(COV), rtol=1e-10)
    want_entropy = 0.5 * (3 * (1 + math.log(2 * math.pi)) + np.linalg.slogdet(COV)[1])
    assert float(d.entropy()) == pytest.approx(want_entropy, rel=1e-12)
    draws = arr(d.sample((N,)))
    assert_mean_within(draws, loc, "MultivariateNormal mean")
    np.testing.assert_allclose(np.cov(draws.T), COV, atol=0.05)


def test_lowrank_multivariate_normal_against_the_full_covariance():
    loc = np.array([0.3, -1.0, 2.0])
    cov = COV_FACTOR @ COV_FACTOR.T + np.diag(COV_DIAG)
    d = D.LowRankMultivariateNormal(t64(loc), t64(COV_FACTOR), t64(COV_DIAG))
    x = np.random.default_rng(8).normal(size=(4, 3))
    np.testing.assert_allclose(arr(d.log_prob(t64(x))), _mvn_log_density(x, loc, cov), rtol=1e-10)
    np.testing.assert_allclose(arr(d.covariance_matrix), cov, rtol=1e-12)
    np.testing.assert_allclose(arr(d.precision_matrix), np.linalg.inv(cov), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(arr(d.scale_tril), np.linalg.cholesky(cov), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(arr(d.variance), np.diag(cov), rtol=1e-12)
    full = D.MultivariateNormal(t64(loc), t64(cov))
    assert float(d.entropy()) == pytest.approx(float(full.entropy()), rel=1e-12)
    assert float(D.kl_divergence(d, full)) == pytest.approx(0.0, abs=1e-12)
    draws = arr(d.sample((N,)))
    assert_mean_within(draws, loc, "LowRankMultivariateNormal mean")
    np.testing.assert_allclose(np.cov(draws.T), cov, atol=0.05)


def test_multivariate_normal_rsample_gradient_of_the_second_moment():
    # E[sum(x**2)] = |loc|^2 + trace(L L^T): its gradients are 2 loc and 2 L.
    loc, tril = t64([0.3, -1.0], True), t64(np.linalg.cholesky(COV[:2, :2]), True)
    (D.MultivariateNormal(loc, scale_tril=tril).rsample((N,)).pow(2).sum() / N).backward()
    np.testing.assert_allclose(arr(loc.grad), 2 * arr(loc), atol=0.05)
    np.testing.assert_allclose(np.tril(arr(tril.grad)), 2 * arr(tril), atol=0.06)


def test_multivariate_normals_broadcast_batches_and_expand():
    locs = t64(np.random.default_rng(9).normal(size=(4, 1, 3)))
    covs = t64(np.stack([COV, COV2]))
    d = D.MultivariateNormal(locs, covs)
    assert d.batch_shape == (4, 2) and d.event_shape == (3,) and d.covariance_matrix.shape == (4, 2, 3, 3)
    x = np.random.default_rng(10).normal(size=(5, 4, 2, 3))
    want = np.stack([_mvn_log_density(x[:, :, j], arr(locs)[:, 0], c) for j, c in enumerate((COV, COV2))], -1)
    np.testing.assert_allclose(arr(d.log_prob(t64(x))), want, rtol=1e-10)
    assert d.sample((6,)).shape == (6, 4, 2, 3) and d.entropy().shape == (4, 2)
    e = D.MultivariateNormal(t64([0.0, 1.0, 2.0]), scale_tril=t64(np.linalg.cholesky(COV))).expand((5,))
    assert e.batch_shape == (5,) and e.scale_tril.shape == (5, 3, 3) and e.log_prob(t64(x[0, :, :1])).shape == (4, 5)
    lr = D.LowRankMultivariateNormal(locs, t64(COV_FACTOR), t64(np.stack([COV_DIAG, COV_DIAG[::-1]])))
    assert lr.batch_shape == (4, 2) and lr.cov_factor.shape == (4, 2, 3, 2) and lr.rsample((6,)).shape == (6, 4, 2, 3)
    assert lr.expand((3, 4, 2)).log_prob(t64(x[0])).shape == (3, 4, 2)


def test_multivariate_normal_arguments_are_checked():
    loc = t64([0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="Exactly one"):
        D.MultivariateNormal(loc, covariance_matrix=t64(COV), scale_tril=t64(COV))
    with pytest.raises(ValueError, match="Exactly one"):
        D.MultivariateNormal(loc)
    with pytest.raises(ValueError, match="at least one-dimensional"):
        D.MultivariateNormal(t64(0.0), t64(COV))
    with pytest.raises(ValueError, match="covariance_matrix.*PositiveDefinite"):
        D.MultivariateNormal(loc, t64(-COV))
    with pytest.raises(ValueError, match="scale_tril.*LowerCholesky"):
        D.MultivariateNormal(loc, scale_tril=t64(COV))
    with pytest.raises(ValueError, match="cov_diag"):
        D.LowRankMultivariateNormal(loc, t64(COV_FACTOR), t64(-COV_DIAG))
    with pytest.raises(ValueError, match="cov_factor must be a batch of matrices"):
        D.LowRankMultivariateNormal(loc, t64(COV_FACTOR.T), t64(COV_DIAG))
    with pytest.raises(ValueError, match="event shapes"):
        D.kl_divergence(D.MultivariateNormal(loc, t64(COV)), D.MultivariateNormal(loc[:2], t64(COV[:2, :2])))
    assert repr(constraints.positive_definite) == "PositiveDefinite()"
    assert arr(constraints.lower_cholesky.check(t64(np.stack([np.linalg.cholesky(COV), COV])))).tolist() == [1, 0]
    assert arr(constraints.positive_semidefinite.check(t64(np.stack([COV, -COV, np.zeros((3, 3))])))).tolist() == \
        [1, 0, 1]


def test_straight_through_rsample_is_one_hot_with_the_gradient_of_the_probabilities():
    logits = t64([0.3, -0.2, 1.0], True)
    d = D.OneHotCategoricalStraightThrough(logits=logits)
    x = d.rsample((5,))
    assert set(arr(x).sum(-1).tolist()) == {1.0} and set(np.unique(arr(x)).tolist()) <= {0.0, 1.0}
    weights = t64([1.0, 2.0, 3.0])
    (x * weights).sum().backward()
    p = np.exp(arr(logits)) / np.exp(arr(logits)).sum()
    w = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(arr(logits.grad), 5 * p * (w - p @ w), rtol=1e-10)
    assert d.has_rsample and not D.OneHotCategorical(logits=logits).has_rsample


def test_perplexity_and_stddev():
    d = D.Categorical(t64([0.25, 0.25, 0.25, 0.25]))
    assert float(d.perplexity()) == pytest.approx(4.0)
    assert float(D.Exponential(t64(2.0)).stddev) == pytest.approx(0.5)
    assert float(D.Laplace(t64(0.0), t64(2.0)).stddev) == pytest.approx(2 * math.sqrt(2))


# GeneralizedPareto, LKJCholesky and Wishart.

@pytest.mark.parametrize("concentration", [-0.4, 0.0, 0.15])
def test_generalized_pareto_density_distribution_function_and_moments(concentration):
    loc, scale, c = 0.5, 1.5, concentration
    d = D.GeneralizedPareto(t64(loc), t64(scale), t64(c))
    upper = loc - scale / c if c < 0 else math.inf
    x = loc + np.array([0.01, 0.2, 0.5, 0.9]) * (min(upper, 8.0) - loc)
    z = (x - loc) / scale
    log_survival = -z if c == 0 else -np.log1p(c * z) / c
    np.testing.assert_allclose(arr(d.cdf(t64(x))), -np.expm1(log_survival), rtol=1e-12)
    log_density = -math.log(scale) - (z if c == 0 else (1 / c + 1) * np.log1p(c * z))
    np.testing.assert_allclose(arr(d.log_prob(t64(x))), log_density, rtol=1e-12)
    np.testing.assert_allclose(arr(d.icdf(d.cdf(t64(x)))), x, rtol=1e-10)
    if c < 0:
        grid = np.linspace(loc, upper, 200001)
        p = np.exp(arr(d.log_prob(t64(grid))))
        assert float(np.sum((p[1:] + p[:-1]) / 2 * np.diff(grid))) == pytest.approx(1.0, abs=1e-6)
    draws = arr(d.sample((N,)))
    assert draws.min() >= loc and draws.max() <= upper
    mean, var = loc + scale / (1 - c), scale ** 2 / ((1 - c) ** 2 * (1 - 2 * c))
    assert float(d.mean) == pytest.approx(mean, rel=1e-12) and float(d.variance) == pytest.approx(var, rel=1e-12)
    assert_mean_within(draws[:, None], mean, "GeneralizedPareto mean")
    assert_mean_within(((draws - mean) ** 2)[:, None], var, "GeneralizedPareto variance")


def test_generalized_pareto_undefined_moments_support_and_rsample_gradient():
    d = D.GeneralizedPareto(t64([0.0, 0.0, 1.0]), t64([1.0, 1.0, 2.0]), t64([1.2, 0.6, -0.5]))
    np.testing.assert_array_equal(np.isnan(arr(d.mean)), [True, False, False])
    np.testing.assert_array_equal(np.isnan(arr(d.variance)), [True, True, False])
    np.testing.assert_allclose(arr(d.support.upper_bound), [math.inf, math.inf, 5.0])
    with pytest.raises(ValueError):
        d.log_prob(t64([1.0, 1.0, 5.5]))
    scale = t64(np.full(N, 1.5), True)
    x = D.GeneralizedPareto(0.0, scale, 0.2).rsample()
    x.sum().backward()
    assert_mean_within(arr(scale.grad)[:, None], 1 / (1 - 0.2), "d E[X] / d scale")


def _correlations(L):
    """The entries below the diagonal of each L L^T."""
    corr = L @ np.swapaxes(L, -1, -2)
    rows, cols = np.tril_indices(L.shape[-1], -1)
    return corr[..., rows, cols]


@pytest.mark.parametrize("dim, concentration", [(2, 0.6), (4, 1.0), (5, 3.0)])
def test_lkj_cholesky_draws_have_the_lkj_marginals(dim, concentration):
    """Every correlation of an LKJ(concentration) matrix is 2 B - 1 with
    B ~ Beta(a, a), a = concentration - 1 + dim / 2: mean 0, variance 1 / (2a + 1)."""
    d = D.LKJCholesky(dim, t64(concentration))
    L = d.sample((N,))
    np.testing.assert_array_equal(arr(constraints.corr_cholesky.check(L)), 1)
    r = _correlations(arr(L))
    a = concentration - 1 + dim / 2
    assert_mean_within(r, np.zeros(r.shape[1]), "LKJ correlation mean")
    assert_mean_within(r ** 2, np.full(r.shape[1], 1 / (2 * a + 1)), "LKJ correlation variance")


@pytest.mark.parametrize("concentration", [0.7, 1.0, 2.5])
def test_lkj_cholesky_density_integrates_to_one(concentration):
    """Over the free coordinates of L (each row's entries below the
    diagonal, inside the unit ball): a grid for dim 2, uniform draws from the
    enclosing cube for dim 3."""
    step = 2 / 200000
    r = -1 + (np.arange(200000) + 0.5) * step
    L2 = np.zeros(r.shape + (2, 2))
    L2[:, 0, 0], L2[:, 1, 0], L2[:, 1, 1] = 1, r, np.sqrt(1 - r * r)
    p = np.exp(arr(D.LKJCholesky(2, t64(concentration)).log_prob(t64(L2))))
    # The midpoint rule converges slowly at the integrable singularities of concentration < 1.
    assert float(p.sum() * step) == pytest.approx(1.0, abs=2e-3 if concentration < 1 else 1e-6)
    u = np.random.default_rng(8).uniform(-1, 1, (N * 5, 3))
    inside = u[:, 1] ** 2 + u[:, 2] ** 2 < 1
    v = u[inside]
    L3 = np.zeros((len(v), 3, 3))
    L3[:, 0, 0], L3[:, 1, 0], L3[:, 1, 1] = 1, v[:, 0], np.sqrt(1 - v[:, 0] ** 2)
    L3[:, 2, 0], L3[:, 2, 1], L3[:, 2, 2] = v[:, 1], v[:, 2], np.sqrt(1 - v[:, 1] ** 2 - v[:, 2] ** 2)
    cube_volume = 8.0
    weights = np.zeros(len(u))
    weights[inside] = np.exp(arr(D.LKJCholesky(3, t64(concentration)).log_prob(t64(L3)))) * cube_volume
    assert_mean_within(weights[:, None], 1.0, "LKJ dim 3 normalization")


def test_lkj_cholesky_arguments_and_values_are_checked():
    with pytest.raises(ValueError):
        D.LKJCholesky(1)
    with pytest.raises(ValueError):
        D.LKJCholesky(3, t64(-1.0))
    d = D.LKJCholesky(3, t64([0.5, 2.0]))
    with pytest.raises(ValueError):
        d.log_prob(t64(np.eye(3) * 2))
    assert not d.has_rsample and d.expand((4, 2)).sample().shape == (4, 2, 3, 3)


WISHART_FORMS = [
    lambda df, cov: D.Wishart(df, covariance_matrix=t64(cov)),
    lambda df, cov: D.Wishart(df, precision_matrix=t64(np.linalg.inv(cov))),
    lambda df, cov: D.Wishart(df, scale_tril=t64(np.linalg.cholesky(cov))),
]


def _wishart_log_density(X, df, cov):
    p = cov.shape[-1]
    mvlgamma = p * (p - 1) / 4 * math.log(math.pi) + sum(math.lgamma(df / 2 - i / 2) for i in range(p))
    trace = np.trace(np.linalg.solve(cov, X), axis1=-2, axis2=-1)
    return ((df - p - 1) / 2 * np.linalg.slogdet(X)[1] - trace / 2 - df * p / 2 * math.log(2)
            - df / 2 * np.linalg.slogdet(cov)[1] - mvlgamma)


@pytest.mark.parametrize("make", WISHART_FORMS)
def test_wishart_forms_agree_with_the_density_and_the_matrices(make):
    d = make(t64(4.5), COV)
    X = np.stack([COV * 3, np.eye(3) + 0.5, COV2 * 5])
    np.testing.assert_allclose(arr(d.log_prob(t64(X))), _wishart_log_density(X, 4.5, COV), rtol=1e-10)
    np.testing.assert_allclose(arr(d.covariance_matrix), COV, rtol=1e-10)
    np.testing.assert_allclose(arr(d.precision_matrix), np.linalg.inv(COV), rtol=1e-10)
    np.testing.assert_allclose(arr(d.scale_tril), np.linalg.cholesky(COV), rtol=1e-10)
    np.testing.assert_allclose(arr(d.mean), 4.5 * COV, rtol=1e-10)
    np.testing.assert_allclose(arr(d.mode), (4.5 - 4) * COV, rtol=1e-10)


def test_wishart_of_one_dimension_is_a_gamma():
    """W_1(df, s^2) is Gamma(df / 2, rate 1 / (2 s^2))."""
    x = np.array([0.2, 1.0, 3.5, 9.0])
    d = D.Wishart(t64([2.5, 7.0]).unsqueeze(-1), covariance_matrix=t64([[[1.7]]]))
    g = D.Gamma(t64([2.5, 7.0]).unsqueeze(-1) / 2, 1 / (2 * 1.7))
    np.testing.assert_allclose(arr(d.log_prob(t64(x[:, None, None, None, None]))).reshape(4, 2),
                               arr(g.log_prob(t64(x[:, None, None]))).reshape(4, 2), rtol=1e-12)
    np.testing.assert_allclose(arr(d.entropy()).ravel(), arr(g.entropy()).ravel(), rtol=1e-12)


@pytest.mark.parametrize("df", [2.3, 6.0])
def test_wishart_draws_have_the_wishart_mean_and_variance(df):
    with warnings.catch_warnings():
        # Below df = 3 the distribution warns of singular draws, and rsample redraws them.
        warnings.simplefilter("ignore", UserWarning)
        d = D.Wishart(t64(df), covariance_matrix=t64(COV))
        X = arr(d.sample((N,)))
    np.testing.assert_array_equal(arr(constraints.positive_definite.check(t64(X))), 1)
    mean = df * COV
    var = df * (COV ** 2 + np.outer(np.diag(COV), np.diag(COV)))
    np.testing.assert_allclose(arr(d.variance), var, rtol=1e-12)
    assert_mean_within(X.reshape(N, 9), mean.ravel(), "Wishart mean")
    assert_mean_within(((X - mean) ** 2).reshape(N, 9), var.ravel(), "Wishart variance")


def test_wishart_redraws_numerically_singular_draws():
    with pytest.warns(UserWarning, match="Low df"):
        d = D.Wishart(t64(2.3), covariance_matrix=t64(COV))
    with pytest.warns(UserWarning, match="Singular sample"):
        kept = d.rsample((10000,), max_try_correction=0)
    with pytest.warns(UserWarning, match="Singular sample"):
        redrawn = d.rsample((10000,))
    assert not arr(constraints.positive_definite.check(kept)).all()
    np.testing.assert_array_equal(arr(constraints.positive_definite.check(redrawn)), 1)


def test_wishart_rsample_gradients_of_the_mean():
    """E[X] = df * Sigma: the pathwise gradients of each draw's entries with
    respect to df (through the chi-squared draws) average to Sigma, and with
    respect to a factor s of scale_tril to 2 s df Sigma0."""
    df = t64(np.full(N, 5.0), True)
    X = D.Wishart(df, covariance_matrix=t64(COV)).rsample()
    (X[:, 0, 0] + X[:, 1, 2]).sum().backward()
    assert_mean_within(arr(df.grad)[:, None], COV[0, 0] + COV[1, 2], "d E[X] / d df")
    s = t64(np.full(N, 0.8), True)
    L0 = np.linalg.cholesky(COV)
    X = D.Wishart(t64(5.0), scale_tril=s[:, None, None] * t64(L0)).rsample()
    X[:, 0, 1].sum().backward()
    assert_mean_within(arr(s.grad)[:, None], 2 * 0.8 * 5.0 * COV[0, 1], "d E[X] / d s")


def test_wishart_arguments_are_checked():
    with pytest.raises(ValueError):
        D.Wishart(t64(1.5), covariance_matrix=t64(COV))
    with pytest.raises(ValueError):
        D.Wishart(t64(4.0), covariance_matrix=t64(COV), scale_tril=t64(np.linalg.cholesky(COV)))
    with pytest.raises(ValueError):
        D.Wishart(t64(4.0), covariance_matrix=t64([1.0, 2.0]))
    with pytest.raises(ValueError):
        D.Wishart(t64(4.0), covariance_matrix=t64(-COV))
    with pytest.warns(UserWarning, match="Low df"):
        D.Wishart(t64(2.5), covariance_matrix=t64(COV))
    d = D.Wishart(t64([4.0, 6.0]), covariance_matrix=t64(COV))
    with pytest.raises(ValueError):
        d.log_prob(t64(-np.eye(3)))
    assert d.batch_shape == (2,) and d.expand((3, 2)).sample().shape == (3, 2, 3, 3)
    assert bool(np.isnan(arr(D.Wishart(t64(3.5), covariance_matrix=t64(COV)).mode)).all())


def test_wishart_bregman_entropy_and_kl():
    p = D.Wishart(t64(4.5), covariance_matrix=t64(COV))
    q = D.Wishart(t64(6.0), covariance_matrix=t64(COV2))
    assert float(D.ExponentialFamily.entropy(p)) == pytest.approx(float(p.entropy()), rel=1e-10)
    x = p.sample((N,))
    ratio = arr(p.log_prob(x) - q.log_prob(x))
    assert_mean_within(ratio[:, None], float(D.kl_divergence(p, q)), "KL(Wishart || Wishart)")


def test_batch_and_event_shapes_are_sizes():
    d = D.Independent(D.Normal(ddpc.zeros(3, 2), 1.0), 1)
    assert isinstance(d.batch_shape, ddpc.Size) and isinstance(d.event_shape, ddpc.Size)
    assert d.batch_shape == (3,) and d.event_shape == (2,) and d.batch_shape.numel() == 3
    assert isinstance(D.Normal(0.0, 1.0).batch_shape, ddpc.Size) and D.Normal(0.0, 1.0).batch_shape.numel() == 1


def test_multivariate_normal_log_prob_has_the_distributions_dtype():
    # As PyTorch's (whose solve_triangular reads the value in the factor's dtype): float32 for a float32
    # distribution, also of a float64 value; float64 for a float64 one.
    value = ddpc.tensor([[0.3, -1.0], [2.0, 1.0]], dtype=ddpc.float64)
    m = D.MultivariateNormal(ddpc.zeros(2), ddpc.eye(2) * 2)
    expected = [-math.log(2 * math.pi) - math.log(2) - 0.25 * (v[0] ** 2 + v[1] ** 2) for v in value.tolist()]
    out = m.log_prob(value)
    assert out.dtype is ddpc.float32
    np.testing.assert_allclose(out.tolist(), expected, rtol=1e-6)
    assert D.MultivariateNormal(t64([0.0, 0.0]), t64(np.eye(2))).log_prob(ddpc.ones(2)).dtype is ddpc.float64

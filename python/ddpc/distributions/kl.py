"""kl_divergence(p, q) and register_kl: the KL divergences between the
families of this package, dispatched on the pair of types to the most
specific registered implementation, as torch.distributions.kl."""

import math
import warnings
from functools import total_ordering

from .. import autograd as _ag
from .. import linalg
from ..nn.functional import softplus
from ..tensor import broadcast_shapes, full_like
from .bernoulli import Bernoulli
from .beta import Beta
from .binomial import Binomial
from .categorical import Categorical
from .distribution import Distribution
from .cauchy import Cauchy
from .continuous_bernoulli import ContinuousBernoulli
from .dirichlet import Dirichlet
from .exp_family import ExponentialFamily
from .exponential import Exponential
from .gamma import Gamma
from .lowrank_multivariate_normal import (LowRankMultivariateNormal, batch_lowrank_logdet, batch_lowrank_mahalanobis,
                                          diag_embed, woodbury_factor)
from .geometric import Geometric
from .gumbel import Gumbel
from .half_normal import HalfNormal
from .independent import Independent
from .laplace import Laplace
from .multivariate_normal import MultivariateNormal, batch_mahalanobis, half_log_det
from .normal import Normal
from .one_hot_categorical import OneHotCategorical
from .pareto import Pareto
from .poisson import Poisson
from .transformed_distribution import TransformedDistribution
from .uniform import Uniform
from .utils import euler_gamma, sum_rightmost

__all__ = ["kl_divergence", "register_kl"]

_KL_REGISTRY = {}  # (type_p, type_q) -> the function computing KL(p || q)
_KL_MEMOIZE = {}  # the dispatch results, cleared whenever a pair is registered


def register_kl(type_p, type_q):
    """A decorator that registers a pairwise function as KL(p || q) for
    distributions of types type_p and type_q (and their subclasses, where no
    more specific pair is registered)::

        @register_kl(Normal, Normal)
        def kl_normal_normal(p, q):
            ...
    """
    for name, t in (("type_p", type_p), ("type_q", type_q)):
        if not (isinstance(t, type) and issubclass(t, Distribution)):
            raise TypeError(f"Expected {name} to be a Distribution subclass but got {t}")

    def decorator(fun):
        _KL_REGISTRY[type_p, type_q] = fun
        _KL_MEMOIZE.clear()
        return fun

    return decorator


@total_ordering
class _Match:
    """A registered pair of types, ordered so that the more specific pair sorts first."""

    __slots__ = ["types"]

    def __init__(self, *types):
        self.types = types

    def __eq__(self, other):
        return self.types == other.types

    def __le__(self, other):
        for x, y in zip(self.types, other.types):
            if not issubclass(x, y):
                return False
            if x is not y:
                break
        return True


def _dispatch_kl(type_p, type_q):
    """The most specific registered function for (type_p, type_q), or NotImplemented."""
    matches = [(super_p, super_q) for super_p, super_q in _KL_REGISTRY
               if issubclass(type_p, super_p) and issubclass(type_q, super_q)]
    if not matches:
        return NotImplemented
    left_p, left_q = min(_Match(*m) for m in matches).types
    right_q, right_p = min(_Match(*reversed(m)) for m in matches).types
    left_fun = _KL_REGISTRY[left_p, left_q]
    right_fun = _KL_REGISTRY[right_p, right_q]
    if left_fun is not right_fun:
        warnings.warn(f"Ambiguous kl_divergence({type_p.__name__}, {type_q.__name__}). Please "
                      f"register_kl({left_p.__name__}, {right_q.__name__})", RuntimeWarning, stacklevel=2)
    return left_fun


def kl_divergence(p, q):
    """KL(p || q) = the integral of p(x) log(p(x) / q(x)), of shape batch_shape.
    Raises NotImplementedError for a pair of types with no registered function."""
    try:
        fun = _KL_MEMOIZE[type(p), type(q)]
    except KeyError:
        fun = _dispatch_kl(type(p), type(q))
        _KL_MEMOIZE[type(p), type(q)] = fun
    if fun is NotImplemented:
        raise NotImplementedError(f"No KL(p || q) is implemented for p type {p.__class__.__name__} and q type "
                                  f"{q.__class__.__name__}")
    return fun(p, q)


def _infinite_like(tensor):
    return full_like(tensor, math.inf)


def _x_log_x(tensor):
    return tensor * _ag.log(tensor)


def _with_value_where(result, mask, value):
    """result with ``value`` where mask holds (as torch's masked assignments)."""
    return _ag.where(mask, full_like(result, value), result)


# Pairs of one family.

@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli_bernoulli(p, q):
    t1 = p.probs * (softplus(-q.logits) - softplus(-p.logits))
    t1 = _with_value_where(_with_value_where(t1, q.probs == 0, math.inf), p.probs == 0, 0.0)
    t2 = (1 - p.probs) * (softplus(q.logits) - softplus(p.logits))
    t2 = _with_value_where(_with_value_where(t2, q.probs == 1, math.inf), p.probs == 1, 0.0)
    return t1 + t2


@register_kl(Beta, Beta)
def _kl_beta_beta(p, q):
    sum_params_p = p.concentration1 + p.concentration0
    sum_params_q = q.concentration1 + q.concentration0
    t1 = _ag.lgamma(q.concentration1) + _ag.lgamma(q.concentration0) + _ag.lgamma(sum_params_p)
    t2 = _ag.lgamma(p.concentration1) + _ag.lgamma(p.concentration0) + _ag.lgamma(sum_params_q)
    t3 = (p.concentration1 - q.concentration1) * _ag.digamma(p.concentration1)
    t4 = (p.concentration0 - q.concentration0) * _ag.digamma(p.concentration0)
    t5 = (sum_params_q - sum_params_p) * _ag.digamma(sum_params_p)
    return t1 - t2 + t3 + t4 + t5


@register_kl(Binomial, Binomial)
def _kl_binomial_binomial(p, q):
    if bool(_ag.any_(p.total_count < q.total_count)):
        raise NotImplementedError("KL between Binomials where q.total_count > p.total_count is not implemented")
    kl = p.total_count * (p.probs * (p.logits - q.logits) + _ag.log1p(-p.probs) - _ag.log1p(-q.probs))
    return _with_value_where(kl, p.total_count > q.total_count, math.inf)


@register_kl(Categorical, Categorical)
def _kl_categorical_categorical(p, q):
    t = p.probs * (p.logits - q.logits)
    t = _with_value_where(t, (q.probs == 0).expand(t.shape), math.inf)
    t = _with_value_where(t, (p.probs == 0).expand(t.shape), 0.0)
    return t.sum(-1)


@register_kl(ContinuousBernoulli, ContinuousBernoulli)
def _kl_continuous_bernoulli_continuous_bernoulli(p, q):
    t1 = p.mean * (p.logits - q.logits)
    t2 = p._cont_bern_log_norm() + _ag.log1p(-p.probs)
    t3 = -q._cont_bern_log_norm() - _ag.log1p(-q.probs)
    return t1 + t2 + t3


@register_kl(Dirichlet, Dirichlet)
def _kl_dirichlet_dirichlet(p, q):
    sum_p_concentration = p.concentration.sum(-1)
    sum_q_concentration = q.concentration.sum(-1)
    t1 = _ag.lgamma(sum_p_concentration) - _ag.lgamma(sum_q_concentration)
    t2 = (_ag.lgamma(p.concentration) - _ag.lgamma(q.concentration)).sum(-1)
    t3 = p.concentration - q.concentration
    t4 = _ag.digamma(p.concentration) - _ag.digamma(sum_p_concentration).unsqueeze(-1)
    return t1 - t2 + (t3 * t4).sum(-1)


@register_kl(Exponential, Exponential)
def _kl_exponential_exponential(p, q):
    rate_ratio = q.rate / p.rate
    return -_ag.log(rate_ratio) + rate_ratio - 1


@register_kl(ExponentialFamily, ExponentialFamily)
def _kl_expfamily_expfamily(p, q):
    if type(p) is not type(q):
        raise NotImplementedError("The cross KL-divergence between different exponential families cannot be "
                                  "computed using Bregman divergences")
    p_nparams, lg_normal, gradients = p._log_normalizer_with_gradients()
    q_nparams = q._natural_params
    result = q._log_normalizer(*q_nparams) - lg_normal
    for pnp, qnp, g in zip(p_nparams, q_nparams, gradients):
        result = result - sum_rightmost((qnp - pnp) * g, len(q.event_shape))
    return result


@register_kl(Gamma, Gamma)
def _kl_gamma_gamma(p, q):
    t1 = q.concentration * _ag.log(p.rate / q.rate)
    t2 = _ag.lgamma(q.concentration) - _ag.lgamma(p.concentration)
    t3 = (p.concentration - q.concentration) * _ag.digamma(p.concentration)
    t4 = (q.rate - p.rate) * (p.concentration / p.rate)
    return t1 + t2 + t3 + t4


@register_kl(Gumbel, Gumbel)
def _kl_gumbel_gumbel(p, q):
    ct1 = p.scale / q.scale
    ct2 = q.loc / q.scale
    ct3 = p.loc / q.scale
    t1 = -_ag.log(ct1) - ct2 + ct3
    t3 = _ag.exp(ct2 + _ag.lgamma(1 + ct1) - ct3)
    return t1 + ct1 * euler_gamma + t3 - (1 + euler_gamma)


@register_kl(Geometric, Geometric)
def _kl_geometric_geometric(p, q):
    return -p.entropy() - _ag.log1p(-q.probs) / p.probs - q.logits


@register_kl(HalfNormal, HalfNormal)
def _kl_halfnormal_halfnormal(p, q):
    return _kl_normal_normal(p.base_dist, q.base_dist)


@register_kl(Laplace, Laplace)
def _kl_laplace_laplace(p, q):
    scale_ratio = p.scale / q.scale
    loc_abs_diff = _ag.abs(p.loc - q.loc)
    return -_ag.log(scale_ratio) + loc_abs_diff / q.scale + scale_ratio * _ag.exp(-loc_abs_diff / p.scale) - 1


@register_kl(Normal, Normal)
def _kl_normal_normal(p, q):
    var_ratio = (p.scale / q.scale).pow(2)
    t1 = ((p.loc - q.loc) / q.scale).pow(2)
    return 0.5 * (var_ratio + t1 - 1 - _ag.log(var_ratio))


@register_kl(OneHotCategorical, OneHotCategorical)
def _kl_onehotcategorical_onehotcategorical(p, q):
    return _kl_categorical_categorical(p._categorical, q._categorical)


@register_kl(TransformedDistribution, TransformedDistribution)
def _kl_transformed_transformed(p, q):
    if p.transforms != q.transforms or p.event_shape != q.event_shape:
        raise NotImplementedError
    return kl_divergence(p.base_dist, q.base_dist)


@register_kl(Uniform, Uniform)
def _kl_uniform_uniform(p, q):
    result = _ag.log((q.high - q.low) / (p.high - p.low))
    return _with_value_where(result, _ag.logical_or(q.low > p.low, q.high < p.high), math.inf)


@register_kl(Pareto, Pareto)
def _kl_pareto_pareto(p, q):
    scale_ratio = p.scale / q.scale
    alpha_ratio = q.alpha / p.alpha
    result = q.alpha * _ag.log(scale_ratio) - _ag.log(alpha_ratio) + alpha_ratio - 1
    return _with_value_where(result, p.support.lower_bound < q.support.lower_bound, math.inf)


@register_kl(Poisson, Poisson)
def _kl_poisson_poisson(p, q):
    return p.rate * (_ag.log(p.rate) - _ag.log(q.rate)) - (p.rate - q.rate)


@register_kl(Independent, Independent)
def _kl_independent_independent(p, q):
    if p.reinterpreted_batch_ndims != q.reinterpreted_batch_ndims:
        raise NotImplementedError
    return sum_rightmost(kl_divergence(p.base_dist, q.base_dist), p.reinterpreted_batch_ndims)


@register_kl(Cauchy, Cauchy)
def _kl_cauchy_cauchy(p, q):
    t1 = _ag.log((p.scale + q.scale).pow(2) + (p.loc - q.loc).pow(2))
    return t1 - _ag.log(4 * p.scale * q.scale)


# Pairs of different families: infinite where p's support is not inside q's.

# The families whose support leaves out part of the real line.
_PART_OF_THE_LINE = (Beta, ContinuousBernoulli, Exponential, Gamma, Pareto, Uniform)
_SUPPORT_NOT_COVERED = {
    Beta: (Pareto,),
    ContinuousBernoulli: (Pareto,),
    Exponential: (Beta, ContinuousBernoulli, Pareto, Uniform),
    Gamma: (Beta, ContinuousBernoulli, Pareto, Uniform),
    Gumbel: _PART_OF_THE_LINE,
    Laplace: _PART_OF_THE_LINE,
    Normal: _PART_OF_THE_LINE,
    Pareto: (Beta, ContinuousBernoulli, Uniform),
    Poisson: (Bernoulli, Binomial),
}


def _kl_infinity(p, q):
    """Infinite over p's batch (the mean only gives its shape, dtype and device)."""
    return _infinite_like(p.mean)


for _type_p, _types_q in _SUPPORT_NOT_COVERED.items():
    for _type_q in _types_q:
        register_kl(_type_p, _type_q)(_kl_infinity)


@register_kl(Bernoulli, Poisson)
def _kl_bernoulli_poisson(p, q):
    return -p.entropy() - (p.probs * _ag.log(q.rate) - q.rate)


@register_kl(Beta, ContinuousBernoulli)
def _kl_beta_continuous_bernoulli(p, q):
    return -p.entropy() - p.mean * q.logits - _ag.log1p(-q.probs) - q._cont_bern_log_norm()


@register_kl(Beta, Exponential)
def _kl_beta_exponential(p, q):
    return -p.entropy() - _ag.log(q.rate) + q.rate * (p.concentration1 / (p.concentration1 + p.concentration0))


@register_kl(Beta, Gamma)
def _kl_beta_gamma(p, q):
    t2 = _ag.lgamma(q.concentration) - q.concentration * _ag.log(q.rate)
    t3 = (q.concentration - 1) * (_ag.digamma(p.concentration1) - _ag.digamma(p.concentration1 + p.concentration0))
    t4 = q.rate * p.concentration1 / (p.concentration1 + p.concentration0)
    return -p.entropy() + t2 - t3 + t4


@register_kl(Beta, Normal)
def _kl_beta_normal(p, q):
    E_beta = p.concentration1 / (p.concentration1 + p.concentration0)
    var_normal = q.scale.pow(2)
    t2 = 0.5 * _ag.log(var_normal * 2 * math.pi)
    t3 = (E_beta * (1 - E_beta) / (p.concentration1 + p.concentration0 + 1) + E_beta.pow(2)) * 0.5
    t4 = q.loc * E_beta
    t5 = q.loc.pow(2) * 0.5
    return -p.entropy() + t2 + (t3 - t4 + t5) / var_normal


@register_kl(Beta, Uniform)
def _kl_beta_uniform(p, q):
    result = -p.entropy() + _ag.log(q.high - q.low)
    return _with_value_where(result, _ag.logical_or(q.low > 0, q.high < 1), math.inf)


@register_kl(Exponential, Gamma)
def _kl_exponential_gamma(p, q):
    ratio = q.rate / p.rate
    t1 = -q.concentration * _ag.log(ratio)
    return t1 + ratio + _ag.lgamma(q.concentration) + q.concentration * euler_gamma - (1 + euler_gamma)


@register_kl(Gamma, Exponential)
def _kl_gamma_exponential(p, q):
    return -p.entropy() - _ag.log(q.rate) + q.rate * p.concentration / p.rate


@register_kl(Gamma, Gumbel)
def _kl_gamma_gumbel(p, q):
    beta_scale_prod = p.rate * q.scale
    loc_scale_ratio = q.loc / q.scale
    t1 = (p.concentration - 1) * _ag.digamma(p.concentration) - _ag.lgamma(p.concentration) - p.concentration
    t2 = _ag.log(beta_scale_prod) + p.concentration / beta_scale_prod
    t3 = _ag.exp(loc_scale_ratio) * (1 + _ag.reciprocal(beta_scale_prod)).pow(-p.concentration) - loc_scale_ratio
    return t1 + t2 + t3


@register_kl(Gamma, Normal)
def _kl_gamma_normal(p, q):
    var_normal = q.scale.pow(2)
    beta_sqr = p.rate.pow(2)
    t1 = 0.5 * _ag.log(beta_sqr * var_normal * 2 * math.pi) - p.concentration - _ag.lgamma(p.concentration)
    t2 = 0.5 * (p.concentration.pow(2) + p.concentration) / beta_sqr
    t3 = q.loc * p.concentration / p.rate
    t4 = 0.5 * q.loc.pow(2)
    return t1 + (p.concentration - 1) * _ag.digamma(p.concentration) + (t2 - t3 + t4) / var_normal


@register_kl(Pareto, Gamma)
def _kl_pareto_gamma(p, q):
    common_term = _ag.log(p.scale) + _ag.reciprocal(p.alpha)
    t1 = _ag.log(p.alpha) - common_term
    t2 = _ag.lgamma(q.concentration) - q.concentration * _ag.log(q.rate)
    t3 = (1 - q.concentration) * common_term
    t4 = q.rate * p.alpha * p.scale / (p.alpha - 1)
    return _with_value_where(t1 + t2 + t3 + t4 - 1, p.alpha <= 1, math.inf)


@register_kl(Uniform, Beta)
def _kl_uniform_beta(p, q):
    common_term = p.high - p.low
    t1 = _ag.log(common_term)
    t2 = (q.concentration1 - 1) * (_x_log_x(p.high) - _x_log_x(p.low) - common_term) / common_term
    t3 = (q.concentration0 - 1) * (_x_log_x(1 - p.high) - _x_log_x(1 - p.low) + common_term) / common_term
    t4 = _ag.lgamma(q.concentration1) + _ag.lgamma(q.concentration0) - _ag.lgamma(q.concentration1 + q.concentration0)
    result = t3 + t4 - t1 - t2
    return _with_value_where(result, _ag.logical_or(p.high > 1, p.low < 0), math.inf)


@register_kl(Uniform, Gamma)
def _kl_uniform_gamma(p, q):
    common_term = p.high - p.low
    t2 = _ag.lgamma(q.concentration) - q.concentration * _ag.log(q.rate)
    t3 = (1 - q.concentration) * (_x_log_x(p.high) - _x_log_x(p.low) - common_term) / common_term
    t4 = q.rate * (p.high + p.low) / 2
    return _with_value_where(-_ag.log(common_term) + t2 + t3 + t4, p.low < 0, math.inf)


@register_kl(Pareto, Exponential)
def _kl_pareto_exponential(p, q):
    scale_rate_prod = p.scale * q.rate
    t1 = _ag.log(p.alpha / scale_rate_prod)
    t3 = p.alpha * scale_rate_prod / (p.alpha - 1)
    return _with_value_where(t1 - _ag.reciprocal(p.alpha) + t3 - 1, p.alpha <= 1, math.inf)


@register_kl(Pareto, Normal)
def _kl_pareto_normal(p, q):
    var_normal = 2 * q.scale.pow(2)
    common_term = p.scale / (p.alpha - 1)
    t1 = _ag.log(math.sqrt(2 * math.pi) * q.scale * p.alpha / p.scale)
    t3 = p.alpha * common_term.pow(2) / (p.alpha - 2)
    t4 = (p.alpha * common_term - q.loc).pow(2)
    return _with_value_where(t1 - _ag.reciprocal(p.alpha) + (t3 + t4) / var_normal - 1, p.alpha <= 2, math.inf)


@register_kl(Uniform, Pareto)
def _kl_uniform_pareto(p, q):
    support_uniform = p.high - p.low
    t1 = _ag.log(q.alpha * q.scale.pow(q.alpha) * support_uniform)
    t2 = (_x_log_x(p.high) - _x_log_x(p.low) - support_uniform) / support_uniform
    return _with_value_where(t2 * (q.alpha + 1) - t1, p.low < q.support.lower_bound, math.inf)


@register_kl(ContinuousBernoulli, Exponential)
def _kl_continuous_bernoulli_exponential(p, q):
    return -p.entropy() - _ag.log(q.rate) + q.rate * p.mean


@register_kl(ContinuousBernoulli, Normal)
def _kl_continuous_bernoulli_normal(p, q):
    t1 = -p.entropy()
    t2 = 0.5 * (math.log(2.0 * math.pi) + (q.loc / q.scale).square()) + _ag.log(q.scale)
    t3 = (p.variance + p.mean.square() - 2.0 * q.loc * p.mean) / (2.0 * q.scale.square())
    return t1 + t2 + t3


@register_kl(ContinuousBernoulli, Uniform)
def _kl_continuous_bernoulli_uniform(p, q):
    result = -p.entropy() + _ag.log(q.high - q.low)
    return _with_value_where(result, _ag.logical_or(q.low >= 0, q.high <= 1), math.inf)


@register_kl(Exponential, Gumbel)
def _kl_exponential_gumbel(p, q):
    scale_rate_prod = p.rate * q.scale
    loc_scale_ratio = q.loc / q.scale
    t1 = _ag.log(scale_rate_prod) - 1
    t2 = _ag.exp(loc_scale_ratio) * scale_rate_prod / (scale_rate_prod + 1)
    return t1 - loc_scale_ratio + t2 + _ag.reciprocal(scale_rate_prod)


@register_kl(Exponential, Normal)
def _kl_exponential_normal(p, q):
    var_normal = q.scale.pow(2)
    rate_sqr = p.rate.pow(2)
    t1 = 0.5 * _ag.log(rate_sqr * var_normal * 2 * math.pi)
    t2 = _ag.reciprocal(rate_sqr)
    t3 = q.loc / p.rate
    t4 = q.loc.pow(2) * 0.5
    return t1 - 1 + (t2 - t3 + t4) / var_normal


@register_kl(Gumbel, Normal)
def _kl_gumbel_normal(p, q):
    param_ratio = p.scale / q.scale
    t1 = _ag.log(param_ratio / math.sqrt(2 * math.pi))
    t2 = (math.pi * param_ratio * 0.5).pow(2) / 3
    t3 = ((p.loc + p.scale * euler_gamma - q.loc) / q.scale).pow(2) * 0.5
    return -t1 + t2 + t3 - (euler_gamma + 1)


@register_kl(Laplace, Normal)
def _kl_laplace_normal(p, q):
    var_normal = q.scale.pow(2)
    scale_sqr_var_ratio = p.scale.pow(2) / var_normal
    t1 = 0.5 * _ag.log(2 * scale_sqr_var_ratio / math.pi)
    t2 = 0.5 * p.loc.pow(2)
    t3 = p.loc * q.loc
    t4 = 0.5 * q.loc.pow(2)
    return -t1 + scale_sqr_var_ratio + (t2 - t3 + t4) / var_normal - 1


@register_kl(Normal, Gumbel)
def _kl_normal_gumbel(p, q):
    mean_scale_ratio = p.loc / q.scale
    var_scale_sqr_ratio = (p.scale / q.scale).pow(2)
    loc_scale_ratio = q.loc / q.scale
    t1 = _ag.log(var_scale_sqr_ratio) * 0.5
    t2 = mean_scale_ratio - loc_scale_ratio
    t3 = _ag.exp(-mean_scale_ratio + 0.5 * var_scale_sqr_ratio + loc_scale_ratio)
    return -t1 + t2 + t3 - (0.5 * (1 + math.log(2 * math.pi)))


@register_kl(Normal, Laplace)
def _kl_normal_laplace(p, q):
    loc_diff = p.loc - q.loc
    scale_ratio = p.scale / q.scale
    loc_diff_scale_ratio = loc_diff / p.scale
    t1 = _ag.log(scale_ratio)
    t2 = math.sqrt(2 / math.pi) * p.scale * _ag.exp(-0.5 * loc_diff_scale_ratio.pow(2))
    t3 = loc_diff * _ag.erf(math.sqrt(0.5) * loc_diff_scale_ratio)
    return -t1 + (t2 + t3) / q.scale - (0.5 * (1 + math.log(0.5 * math.pi)))


@register_kl(Uniform, Exponential)
def _kl_uniform_exponential(p, q):
    result = q.rate * (p.high + p.low) / 2 - _ag.log((p.high - p.low) * q.rate)
    return _with_value_where(result, p.low < 0, math.inf)


@register_kl(Uniform, ContinuousBernoulli)
def _kl_uniform_continuous_bernoulli(p, q):
    result = -p.entropy() - p.mean * q.logits - _ag.log1p(-q.probs) - q._cont_bern_log_norm()
    return _with_value_where(result, _ag.logical_or(p.high >= 1, p.low <= 0), math.inf)


@register_kl(Uniform, Gumbel)
def _kl_uniform_gumbel(p, q):
    common_term = q.scale / (p.high - p.low)
    high_loc_diff = (p.high - q.loc) / q.scale
    low_loc_diff = (p.low - q.loc) / q.scale
    t1 = _ag.log(common_term) + 0.5 * (high_loc_diff + low_loc_diff)
    t2 = common_term * (_ag.exp(-high_loc_diff) - _ag.exp(-low_loc_diff))
    return t1 - t2


@register_kl(Uniform, Normal)
def _kl_uniform_normal(p, q):
    common_term = p.high - p.low
    t1 = _ag.log(math.sqrt(math.pi * 2) * q.scale / common_term)
    t2 = common_term.pow(2) / 12
    t3 = ((p.high + p.low - 2 * q.loc) / 2).pow(2)
    return t1 + 0.5 * (t2 + t3) / q.scale.pow(2)


# The multivariate normals: trace(inv(q's covariance) p's covariance) is
# expanded so that only triangular solves with q's factors are needed.

def _batch_trace_XXT(bmat):
    """trace(X X^T) of each matrix X of a batch: the sum of its squared entries."""
    return bmat.pow(2).sum(-1).sum(-1)


def _check_event_shapes(p, q, what):
    if p.event_shape != q.event_shape:
        raise ValueError(f"KL-divergence between two {what} with different event shapes cannot be computed")


def _lowrank_logdet(d):
    return batch_lowrank_logdet(d._unbroadcasted_cov_factor, d._unbroadcasted_cov_diag, d._capacitance_tril)


def _lowrank_mahalanobis_of_loc_difference(p, q):
    return batch_lowrank_mahalanobis(q._unbroadcasted_cov_factor, q._unbroadcasted_cov_diag, q.loc - p.loc,
                                     q._capacitance_tril)


def _woodbury_factor(q):
    return woodbury_factor(q._unbroadcasted_cov_factor, q._unbroadcasted_cov_diag, q._capacitance_tril)


@register_kl(LowRankMultivariateNormal, LowRankMultivariateNormal)
def _kl_lowrankmultivariatenormal_lowrankmultivariatenormal(p, q):
    _check_event_shapes(p, q, "Low Rank Multivariate Normals")
    term1 = _lowrank_logdet(q) - _lowrank_logdet(p)
    term3 = _lowrank_mahalanobis_of_loc_difference(p, q)
    # inv(qcov) @ pcov = [inv(qD) - A^T A] @ (pD + pW pW^T)
    A = _woodbury_factor(q)
    term21 = (p._unbroadcasted_cov_diag / q._unbroadcasted_cov_diag).sum(-1)
    term22 = _batch_trace_XXT(p._unbroadcasted_cov_factor * _ag.rsqrt(q._unbroadcasted_cov_diag).unsqueeze(-1))
    term23 = _batch_trace_XXT(A * _ag.sqrt(p._unbroadcasted_cov_diag).unsqueeze(-2))
    term24 = _batch_trace_XXT(_ag.matmul(A, p._unbroadcasted_cov_factor))
    return 0.5 * (term1 + term21 + term22 - term23 - term24 + term3 - p.event_shape[0])


@register_kl(MultivariateNormal, LowRankMultivariateNormal)
def _kl_multivariatenormal_lowrankmultivariatenormal(p, q):
    _check_event_shapes(p, q, "(Low Rank) Multivariate Normals")
    term1 = _lowrank_logdet(q) - 2 * half_log_det(p._unbroadcasted_scale_tril)
    term3 = _lowrank_mahalanobis_of_loc_difference(p, q)
    # inv(qcov) @ pcov = [inv(qD) - A^T A] @ p_tril @ p_tril^T
    A = _woodbury_factor(q)
    term21 = _batch_trace_XXT(p._unbroadcasted_scale_tril * _ag.rsqrt(q._unbroadcasted_cov_diag).unsqueeze(-1))
    term22 = _batch_trace_XXT(_ag.matmul(A, p._unbroadcasted_scale_tril))
    return 0.5 * (term1 + term21 - term22 + term3 - p.event_shape[0])


@register_kl(LowRankMultivariateNormal, MultivariateNormal)
def _kl_lowrankmultivariatenormal_multivariatenormal(p, q):
    _check_event_shapes(p, q, "(Low Rank) Multivariate Normals")
    term1 = 2 * half_log_det(q._unbroadcasted_scale_tril) - _lowrank_logdet(p)
    term3 = batch_mahalanobis(q._unbroadcasted_scale_tril, q.loc - p.loc)
    # inv(qcov) @ pcov = inv(q_tril q_tril^T) @ (pW pW^T + pD)
    batch = broadcast_shapes(tuple(q._unbroadcasted_scale_tril.shape[:-2]),
                             tuple(p._unbroadcasted_cov_factor.shape[:-2]))
    n = p.event_shape[0]
    q_scale_tril = q._unbroadcasted_scale_tril.expand(batch + (n, n))
    p_cov_factor = p._unbroadcasted_cov_factor.expand(batch + (n, p.cov_factor.shape[-1]))
    p_cov_diag = diag_embed(_ag.sqrt(p._unbroadcasted_cov_diag)).expand(batch + (n, n))
    term21 = _batch_trace_XXT(linalg.solve_triangular(q_scale_tril, p_cov_factor, upper=False))
    term22 = _batch_trace_XXT(linalg.solve_triangular(q_scale_tril, p_cov_diag, upper=False))
    return 0.5 * (term1 + term21 + term22 + term3 - n)


@register_kl(MultivariateNormal, MultivariateNormal)
def _kl_multivariatenormal_multivariatenormal(p, q):
    _check_event_shapes(p, q, "Multivariate Normals")
    half_term1 = half_log_det(q._unbroadcasted_scale_tril) - half_log_det(p._unbroadcasted_scale_tril)
    batch = broadcast_shapes(tuple(q._unbroadcasted_scale_tril.shape[:-2]),
                             tuple(p._unbroadcasted_scale_tril.shape[:-2]))
    n = p.event_shape[0]
    q_scale_tril = q._unbroadcasted_scale_tril.expand(batch + (n, n))
    p_scale_tril = p._unbroadcasted_scale_tril.expand(batch + (n, n))
    term2 = _batch_trace_XXT(linalg.solve_triangular(q_scale_tril, p_scale_tril, upper=False))
    term3 = batch_mahalanobis(q._unbroadcasted_scale_tril, q.loc - p.loc)
    return half_term1 + 0.5 * (term2 + term3 - n)

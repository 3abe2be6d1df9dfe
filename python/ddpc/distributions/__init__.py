"""ddpc.distributions: probability distributions over ddpc tensors, shaped as
torch.distributions (same class names, arguments, properties and
semantics): batch and event shapes, ``sample`` and the reparameterized
``rsample``, ``log_prob``, ``entropy``, ``cdf``/``icdf``, ``expand``,
argument and support validation, transforms, and ``kl_divergence``.

Everything is composed from ddpc's differentiable tensor ops, so gradients
flow through ``rsample``, ``log_prob``, ``entropy`` and ``kl_divergence`` to
the parameters. Samples come from ddpc's generator on the parameters' device:
``ddpc.manual_seed`` makes them reproducible, but they are not the numbers
PyTorch draws for the same seed.

Families provided: Bernoulli, Categorical, Cauchy, ContinuousBernoulli,
Exponential, Geometric, Gumbel, HalfCauchy, HalfNormal, Independent, Laplace,
LogisticNormal, LogNormal, LowRankMultivariateNormal, MixtureSameFamily,
MultivariateNormal, Normal, OneHotCategorical,
OneHotCategoricalStraightThrough, Pareto, RelaxedBernoulli (over
relaxed_bernoulli.LogitRelaxedBernoulli), RelaxedOneHotCategorical (over
relaxed_categorical.ExpRelaxedCategorical), TransformedDistribution, Uniform.

Not provided yet, for want of functions ddpc does not have yet:
- erfinv: Normal.icdf, and through it LogNormal.icdf and HalfNormal.icdf;
- lgamma and digamma: Beta, Binomial, Chi2, Dirichlet, FisherSnedecor, Gamma,
  InverseGamma, Kumaraswamy, Multinomial, NegativeBinomial, Poisson, StudentT,
  Weibull, and the KL divergence between two Gumbels;
- Bessel functions: VonMises.
LKJCholesky, Wishart and CorrCholeskyTransform are not provided either.
"""

from . import constraints, transforms
from .bernoulli import Bernoulli
from .categorical import Categorical
from .cauchy import Cauchy
from .continuous_bernoulli import ContinuousBernoulli
from .distribution import Distribution
from .exp_family import ExponentialFamily
from .exponential import Exponential
from .geometric import Geometric
from .gumbel import Gumbel
from .half_cauchy import HalfCauchy
from .half_normal import HalfNormal
from .independent import Independent
from .kl import kl_divergence, register_kl
from .laplace import Laplace
from .log_normal import LogNormal
from .logistic_normal import LogisticNormal
from .lowrank_multivariate_normal import LowRankMultivariateNormal
from .mixture_same_family import MixtureSameFamily
from .multivariate_normal import MultivariateNormal
from .normal import Normal
from .one_hot_categorical import OneHotCategorical, OneHotCategoricalStraightThrough
from .pareto import Pareto
from .relaxed_bernoulli import RelaxedBernoulli
from .relaxed_categorical import RelaxedOneHotCategorical
from .transformed_distribution import TransformedDistribution
from .transforms import (AbsTransform, AffineTransform, ComposeTransform, ExpTransform, IndependentTransform,
                         PowerTransform, SigmoidTransform, SoftmaxTransform, StickBreakingTransform, TanhTransform,
                         Transform, identity_transform)
from .uniform import Uniform

__all__ = ["AbsTransform", "AffineTransform", "Bernoulli", "Categorical", "Cauchy", "ComposeTransform",
           "ContinuousBernoulli", "Distribution", "Exponential", "ExponentialFamily", "ExpTransform", "Geometric",
           "Gumbel", "HalfCauchy", "HalfNormal", "Independent", "IndependentTransform", "Laplace", "LogisticNormal",
           "LogNormal", "LowRankMultivariateNormal", "MixtureSameFamily", "MultivariateNormal", "Normal",
           "OneHotCategorical", "OneHotCategoricalStraightThrough", "Pareto", "PowerTransform", "RelaxedBernoulli",
           "RelaxedOneHotCategorical", "SigmoidTransform", "SoftmaxTransform", "StickBreakingTransform",
           "TanhTransform", "Transform", "TransformedDistribution", "Uniform", "constraints", "identity_transform",
           "kl_divergence", "register_kl", "transforms"]

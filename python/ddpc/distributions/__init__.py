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

Families provided: Bernoulli, Beta, Binomial, Categorical, Cauchy, Chi2,
ContinuousBernoulli, Dirichlet, Exponential, FisherSnedecor, Gamma,
GeneralizedPareto, Geometric, Gumbel, HalfCauchy, HalfNormal, Independent,
InverseGamma, Kumaraswamy, Laplace, LKJCholesky, LogisticNormal, LogNormal,
LowRankMultivariateNormal, MixtureSameFamily, Multinomial, MultivariateNormal,
NegativeBinomial, Normal, OneHotCategorical, OneHotCategoricalStraightThrough,
Pareto, Poisson, RelaxedBernoulli (over relaxed_bernoulli.LogitRelaxedBernoulli),
RelaxedOneHotCategorical (over relaxed_categorical.ExpRelaxedCategorical),
StudentT, TransformedDistribution, Uniform, VonMises, Weibull, Wishart.
``biject_to`` and ``transform_to`` (constraint_registry) give the transform
from unconstrained reals onto a constraint's region.

Gamma, Beta and Dirichlet draws are reparameterized: a gamma draw's gradient
with respect to its concentration is the implicit one (the draw moves with
the concentration at a fixed value of its cdf), from a convergent series.
"""

from . import constraint_registry, constraints, transforms
from .bernoulli import Bernoulli
from .beta import Beta
from .binomial import Binomial
from .categorical import Categorical
from .cauchy import Cauchy
from .chi2 import Chi2
from .constraint_registry import biject_to, transform_to
from .continuous_bernoulli import ContinuousBernoulli
from .dirichlet import Dirichlet
from .distribution import Distribution
from .exp_family import ExponentialFamily
from .exponential import Exponential
from .fishersnedecor import FisherSnedecor
from .gamma import Gamma
from .generalized_pareto import GeneralizedPareto
from .geometric import Geometric
from .gumbel import Gumbel
from .half_cauchy import HalfCauchy
from .half_normal import HalfNormal
from .independent import Independent
from .inverse_gamma import InverseGamma
from .kl import kl_divergence, register_kl
from .kumaraswamy import Kumaraswamy
from .laplace import Laplace
from .lkj_cholesky import LKJCholesky
from .log_normal import LogNormal
from .logistic_normal import LogisticNormal
from .lowrank_multivariate_normal import LowRankMultivariateNormal
from .mixture_same_family import MixtureSameFamily
from .multinomial import Multinomial
from .multivariate_normal import MultivariateNormal
from .negative_binomial import NegativeBinomial
from .normal import Normal
from .one_hot_categorical import OneHotCategorical, OneHotCategoricalStraightThrough
from .pareto import Pareto
from .poisson import Poisson
from .relaxed_bernoulli import RelaxedBernoulli
from .relaxed_categorical import RelaxedOneHotCategorical
from .student_t import StudentT
from .transformed_distribution import TransformedDistribution
from .transforms import (AbsTransform, AffineTransform, CatTransform, ComposeTransform, CorrCholeskyTransform,
                         CumulativeDistributionTransform, ExpTransform, IndependentTransform, LowerCholeskyTransform,
                         PositiveDefiniteTransform, PowerTransform, ReshapeTransform, SigmoidTransform,
                         SoftmaxTransform, SoftplusTransform, StackTransform, StickBreakingTransform, TanhTransform,
                         Transform, identity_transform)
from .uniform import Uniform
from .von_mises import VonMises
from .weibull import Weibull
from .wishart import Wishart

__all__ = ["AbsTransform", "AffineTransform", "Bernoulli", "Beta", "Binomial", "Categorical", "CatTransform", "Cauchy",
           "Chi2", "ComposeTransform", "ContinuousBernoulli", "CorrCholeskyTransform",
           "CumulativeDistributionTransform", "Dirichlet", "Distribution", "Exponential", "ExponentialFamily",
           "ExpTransform", "FisherSnedecor", "Gamma", "GeneralizedPareto", "Geometric", "Gumbel", "HalfCauchy",
           "HalfNormal", "Independent", "IndependentTransform", "InverseGamma", "Kumaraswamy", "Laplace", "LKJCholesky",
           "LogisticNormal", "LogNormal", "LowerCholeskyTransform", "LowRankMultivariateNormal", "MixtureSameFamily",
           "Multinomial", "MultivariateNormal", "NegativeBinomial", "Normal", "OneHotCategorical",
           "OneHotCategoricalStraightThrough", "Pareto", "Poisson", "PositiveDefiniteTransform", "PowerTransform",
           "RelaxedBernoulli", "RelaxedOneHotCategorical", "ReshapeTransform", "SigmoidTransform", "SoftmaxTransform",
           "SoftplusTransform", "StackTransform", "StickBreakingTransform", "StudentT", "TanhTransform", "Transform",
           "TransformedDistribution", "Uniform", "VonMises", "Weibull", "Wishart", "biject_to", "constraint_registry",
           "constraints", "identity_transform", "kl_divergence", "register_kl", "transform_to", "transforms"]

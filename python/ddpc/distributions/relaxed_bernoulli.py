"""RelaxedBernoulli (binary Concrete) and LogitRelaxedBernoulli: continuous,
reparameterizable relaxations of Bernoulli at a temperature (Maddison et al.,
2017; Jang et al., 2017)."""

from .. import autograd as _ag
from . import constraints
from .distribution import Distribution
from .transformed_distribution import TransformedDistribution
from .transforms import SigmoidTransform
from .utils import BinaryProbsOrLogits, as_parameter, broadcast_all, clamp_probs, standard_uniform

__all__ = ["LogitRelaxedBernoulli", "RelaxedBernoulli"]


class LogitRelaxedBernoulli(BinaryProbsOrLogits, Distribution):
    """The logit of a RelaxedBernoulli sample: (logit(U) + logits) / temperature
    with U uniform; give probs or logits, not both."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.real

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        param = self._set_probs_or_logits(probs, logits)
        self.temperature = as_parameter(temperature, param)
        super().__init__(param.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._expand_parameters(LogitRelaxedBernoulli, batch_shape, _instance, ("probs", "logits"))
        new.temperature = self.temperature
        return new

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        probs = clamp_probs(self.probs.expand(shape))
        uniforms = clamp_probs(standard_uniform(shape, probs))
        return (_ag.log(uniforms) - _ag.log1p(-uniforms) + _ag.log(probs) - _ag.log1p(-probs)) / self.temperature

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        diff = logits - value * self.temperature
        return _ag.log(self.temperature) + diff - 2 * _ag.log1p(_ag.exp(diff))


class RelaxedBernoulli(TransformedDistribution):
    """Values in (0, 1) that approach Bernoulli(probs) draws as the temperature
    goes to 0: the sigmoid of a LogitRelaxedBernoulli. Reparameterizable."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        base_dist = LogitRelaxedBernoulli(temperature, probs, logits)
        super().__init__(base_dist, SigmoidTransform(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(RelaxedBernoulli, _instance)
        return super().expand(batch_shape, _instance=new)

    @property
    def temperature(self):
        return self.base_dist.temperature

    @property
    def logits(self):
        return self.base_dist.logits

    @property
    def probs(self):
        return self.base_dist.probs

"""PostLocalSGDOptimizer, as torch.distributed.optim's: wraps an optimizer
so that each ``step()`` is the optimizer's step followed by the model
averager's ``average_parameters`` over the optimizer's parameter groups
(the second half of post-local SGD, with
ddp_comm_hooks.post_localSGD_hook as the first)."""

import warnings

from ...optim.optimizer import Optimizer

__all__ = ["PostLocalSGDOptimizer"]


class PostLocalSGDOptimizer(Optimizer):
    """``optim`` steps every rank's parameters, then ``averager`` (a
    model_averaging.averagers.ModelAverager) averages them when its step
    says so. ``param_groups`` and ``state`` are ``optim``'s, so lr schedulers
    work on the wrapper; ``state_dict()`` is ``optim``'s plus the averager's
    step under the key ``"step"``, which ``load_state_dict`` restores."""

    def __init__(self, optim, averager):
        # Not Optimizer.__init__: the groups and the state are the wrapped optimizer's, shared rather than copied.
        self.optim = optim
        self.param_groups = self.optim.param_groups
        self.averager = averager

    @property
    def state(self):
        return self.optim.state

    @property
    def defaults(self):
        return self.optim.defaults

    def __repr__(self):
        return repr(self.optim)

    def state_dict(self):
        """The wrapped optimizer's state dict, with the averager's step as ``"step"``."""
        state_dict = self.optim.state_dict()
        state_dict["step"] = self.averager.step
        return state_dict

    def load_state_dict(self, state_dict):
        """Loads the wrapped optimizer's state and sets the averager's step from
        ``"step"`` (to 0, with a warning, where the dict has none)."""
        self.optim.load_state_dict(state_dict)
        if "step" in state_dict:
            self.averager.step = state_dict["step"]
        else:
            warnings.warn("Loaded state dict does not contain a step counter for an averager. "
                          "Setting step counter to 0.", stacklevel=2)
            self.averager.step = 0

    def step(self):
        """The wrapped optimizer's step, then the averager's averaging of the parameter groups."""
        self.optim.step()
        self.averager.average_parameters(params=self.param_groups)

    def zero_grad(self, set_to_none=True):
        self.optim.zero_grad(set_to_none=set_to_none)

    def add_param_group(self, param_group):
        self.optim.add_param_group(param_group)

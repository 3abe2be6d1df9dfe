"""Averaging parameters over a process group, as
torch.distributed.algorithms.model_averaging.utils: all the parameters are
flattened into one buffer, divided by the group's size and summed with one
all-reduce (one collective however many parameters there are), then copied
back.

Where ddpc differs: parameters are updated in place (PyTorch rebinds each
``p.data`` to a view of the flat buffer), so optimizer state, views and DDP's
buckets keep pointing at them; besides parameters and parameter groups,
``get_params_to_average`` takes any ddpc.Tensor and the ``(name, parameter)``
pairs that ``named_parameters()`` yields.
"""

from .... import distributed as dist
from ....autograd import no_grad
from ....tensor import Tensor, cat

__all__ = ["average_parameters", "average_parameters_or_parameter_groups", "get_params_to_average"]


def average_parameters(params, process_group):
    """Replaces each tensor of ``params`` by its mean over ``process_group``
    (None: the default group). A rank outside the group does nothing."""
    if process_group is dist.GroupMember.NON_GROUP_MEMBER:
        return
    params = list(params)
    if not params:
        return
    with no_grad():
        flat = cat([p.detach().reshape(-1) for p in params])
        flat /= dist.get_world_size(process_group)  # before the sum, as PyTorch does: the same rounding
        dist.all_reduce(flat, group=process_group)
        at = 0
        for p in params:
            p.copy_(flat[at:at + p.numel()].reshape(p.shape))
            at += p.numel()


def get_params_to_average(params):
    """The tensors to average among ``params`` (a model's parameters, its
    ``named_parameters()``, or an optimizer's ``param_groups``): those with a
    gradient, as in PyTorch, so frozen and unused parameters are left alone."""
    found = []
    for param in params:
        if isinstance(param, Tensor):
            candidates = (param,)
        elif isinstance(param, dict):
            candidates = param["params"]
        elif isinstance(param, tuple) and len(param) == 2 and isinstance(param[1], Tensor):
            candidates = (param[1],)
        else:
            raise NotImplementedError(f"Parameter input of type {type(param)} is not supported")
        found.extend(p for p in candidates if p.grad is not None)
    return found


def average_parameters_or_parameter_groups(params, process_group):
    """Averages a model's parameters or an optimizer's parameter groups over ``process_group``."""
    average_parameters(get_params_to_average(params), process_group)

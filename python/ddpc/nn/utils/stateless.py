"""torch.nn.utils.stateless's ``functional_call`` (the older name of ddpc.func.functional_call)."""

from ...func import functional_call

__all__ = ["functional_call"]

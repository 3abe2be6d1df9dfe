"""ddpc.distributed.nn: the differentiable collectives of ``functional``, also importable from here
(``ddpc.distributed.nn.all_gather``), as torch.distributed.nn."""

from .functional import *  # noqa: F401,F403
from .functional import __all__  # noqa: F401

"""ddpc.utils: helpers shaped like torch.utils: ``checkpoint``, and ``data``,
which is ``ddpc.data`` under torch's path (also as ``data.distributed``, where
torch keeps ``DistributedSampler``), so ``from torch.utils.data import
DataLoader`` ports by changing ``torch`` to ``ddpc``."""

import sys

from .. import data
from . import checkpoint

sys.modules[__name__ + ".data"] = data
sys.modules[__name__ + ".data.distributed"] = data

__all__ = ["checkpoint", "data"]

"""ddpc.utils: helpers shaped like torch.utils: ``checkpoint``, ``dlpack``, ``hooks``,
``model_zoo`` (``load_url``), ``tensorboard``
(``SummaryWriter``, which needs neither tensorboard nor protobuf), and ``data``,
which is ``ddpc.data`` under torch's path (also as ``data.distributed``, where
torch keeps ``DistributedSampler``), so ``from torch.utils.data import
DataLoader`` ports by changing ``torch`` to ``ddpc`` (``data.sampler``,
``data.dataloader`` and ``data.dataset`` are ``ddpc.data`` too, and
``data._utils.collate``, torch's extension point for collation, is
``ddpc._collate``)."""

import sys
import types

from .. import _collate, _pytree, data
from . import checkpoint, dlpack, hooks, model_zoo, tensorboard

sys.modules[__name__ + ".data"] = data
sys.modules[__name__ + "._pytree"] = _pytree  # torch.utils._pytree's functions, by their names
for _name in ("distributed", "sampler", "dataloader", "dataset"):  # torch.utils.data's submodules
    sys.modules[f"{__name__}.data.{_name}"] = data
    setattr(data, _name, data)  # ddpc.utils.data.distributed.DistributedSampler, as an attribute path too
# torch.utils.data._utils, a package of which ddpc has the collate module only
data._utils = sys.modules[f"{__name__}.data._utils"] = types.ModuleType(f"{__name__}.data._utils")
data._utils.collate = sys.modules[f"{__name__}.data._utils.collate"] = _collate

__all__ = ["checkpoint", "data", "dlpack", "hooks", "model_zoo", "tensorboard"]

"""ddpc.utils: helpers shaped like torch.utils: ``checkpoint``, ``dlpack``, ``hooks``,
``model_zoo`` (``load_url``), ``tensorboard``
(``SummaryWriter``, which needs neither tensorboard nor protobuf), and ``data``,
which is ``ddpc.data`` under torch's path (also as ``data.distributed``, where
torch keeps ``DistributedSampler``), so ``from torch.utils.data import
DataLoader`` ports by changing ``torch`` to ``ddpc`` (``data.sampler``,
``data.dataloader`` and ``data.dataset`` are ``ddpc.data`` too)."""

import sys

from .. import _pytree, data
from . import checkpoint, dlpack, hooks, model_zoo, tensorboard

sys.modules[__name__ + ".data"] = data
sys.modules[__name__ + "._pytree"] = _pytree  # torch.utils._pytree's functions, by their names
for _name in ("distributed", "sampler", "dataloader", "dataset"):  # torch.utils.data's submodules
    sys.modules[f"{__name__}.data.{_name}"] = data
    setattr(data, _name, data)  # ddpc.utils.data.distributed.DistributedSampler, as an attribute path too

__all__ = ["checkpoint", "data", "dlpack", "hooks", "model_zoo", "tensorboard"]

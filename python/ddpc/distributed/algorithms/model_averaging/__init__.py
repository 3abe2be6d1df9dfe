"""Model averaging for local SGD, as torch.distributed.algorithms.model_averaging:
each rank steps its own copy of the model and the copies are averaged every
few steps (``averagers.PeriodicModelAverager``), or at several levels, small
groups often and all ranks seldom (``hierarchical_model_averager``)."""

from . import averagers, hierarchical_model_averager, utils

__all__ = ["averagers", "hierarchical_model_averager", "utils"]

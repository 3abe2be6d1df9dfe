"""ddpc.nn: layers, containers and losses shaped like torch.nn."""

import sys as _sys

from . import functional, init, utils
from .modules import (ELU, GELU, BatchNorm1d, BatchNorm2d, BatchNorm3d, BCELoss, BCEWithLogitsLoss, Bilinear,
                      CrossEntropyLoss, CTCLoss, Dropout, Embedding, EmbeddingBag, Flatten, Hardsigmoid, Hardswish,
                      Hardtanh, HuberLoss, Identity, KLDivLoss, L1Loss, LayerNorm, LeakyReLU, Linear, LogSoftmax, Mish,
                      Module, ModuleDict, ModuleList, MSELoss, NLLLoss, Parameter, ReLU, ReLU6, Sequential, Sigmoid,
                      SiLU, SmoothL1Loss, Softmax, Softplus, SyncBatchNorm, Tanh)
from .modules import (AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveAvgPool3d, AdaptiveMaxPool1d, AdaptiveMaxPool2d,
                      AdaptiveMaxPool3d, AvgPool1d, AvgPool2d, AvgPool3d, Conv1d, Conv2d, Conv3d, ConvTranspose1d,
                      ConvTranspose2d, ConvTranspose3d, Fold, FractionalMaxPool2d, FractionalMaxPool3d, MaxPool1d,
                      MaxPool2d, MaxPool3d, MaxUnpool1d, MaxUnpool2d, MaxUnpool3d, Unfold)
from .modules import (GLU, GroupNorm, InstanceNorm1d, InstanceNorm2d, InstanceNorm3d, ParameterDict, ParameterList,
                      RMSNorm, Softmin, Unflatten)
from .modules import (CircularPad1d, CircularPad2d, ConstantPad1d, ConstantPad2d, CosineSimilarity, Dropout1d,
                      Dropout2d, PairwiseDistance, PReLU, ReflectionPad1d, ReflectionPad2d, ReplicationPad1d,
                      ReplicationPad2d, Threshold, Upsample, UpsamplingBilinear2d, UpsamplingNearest2d,
                      ZeroPad1d, ZeroPad2d)
from .modules import (CELU, SELU, AlphaDropout, ChannelShuffle, CosineEmbeddingLoss, GaussianNLLLoss, Hardshrink,
                      HingeEmbeddingLoss, LogSigmoid, MarginRankingLoss, MultiLabelSoftMarginLoss, MultiMarginLoss,
                      PixelShuffle, PixelUnshuffle, PoissonNLLLoss, RReLU, Softmax2d, SoftMarginLoss, Softshrink,
                      Softsign, Tanhshrink, TripletMarginLoss, TripletMarginWithDistanceLoss)
from . import parallel
from .parallel import DataParallel, DistributedDataParallel

__all__ = ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "Bilinear", "SyncBatchNorm", "CrossEntropyLoss", "Dropout",
           "Embedding", "EmbeddingBag",
           "Flatten", "GELU", "Identity", "LayerNorm", "Linear", "MSELoss",
           "Module", "ModuleDict", "ModuleList", "Parameter", "ReLU", "Sequential", "Sigmoid", "Tanh", "functional",
           "init", "parallel", "utils", "DataParallel", "DistributedDataParallel",
           "LeakyReLU", "ELU", "SiLU", "Softplus", "Mish", "Hardtanh", "ReLU6", "Hardswish", "Hardsigmoid", "Softmax",
           "LogSoftmax", "NLLLoss", "CTCLoss", "BCELoss", "BCEWithLogitsLoss", "L1Loss", "SmoothL1Loss", "HuberLoss",
           "KLDivLoss",
           "GLU", "GroupNorm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "ParameterDict", "ParameterList",
           "RMSNorm", "Softmin", "Unflatten"]
__all__ += ["AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d",
            "AdaptiveMaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d",
            "ConvTranspose2d", "ConvTranspose3d", "Fold", "FractionalMaxPool2d", "FractionalMaxPool3d", "MaxPool1d",
            "MaxPool2d", "MaxPool3d", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d", "Unfold"]
from .transformer import (MultiheadAttention, Transformer, TransformerDecoder, TransformerDecoderLayer,
                          TransformerEncoder, TransformerEncoderLayer)

__all__ += ["MultiheadAttention", "Transformer", "TransformerDecoder", "TransformerDecoderLayer", "TransformerEncoder",
            "TransformerEncoderLayer"]
__all__ += ["CircularPad1d", "CircularPad2d", "ConstantPad1d", "ConstantPad2d", "CosineSimilarity", "Dropout1d",
            "Dropout2d", "PairwiseDistance", "PReLU", "ReflectionPad1d", "ReflectionPad2d", "ReplicationPad1d",
            "ReplicationPad2d", "Threshold", "Upsample", "UpsamplingBilinear2d", "UpsamplingNearest2d", "ZeroPad1d",
            "ZeroPad2d"]
__all__ += ["AlphaDropout", "CELU", "ChannelShuffle", "CosineEmbeddingLoss", "GaussianNLLLoss", "Hardshrink",
            "HingeEmbeddingLoss", "LogSigmoid", "MarginRankingLoss", "MultiLabelSoftMarginLoss", "MultiMarginLoss",
            "PixelShuffle", "PixelUnshuffle", "PoissonNLLLoss", "RReLU", "SELU", "Softmax2d", "SoftMarginLoss",
            "Softshrink", "Softsign", "Tanhshrink", "TripletMarginLoss", "TripletMarginWithDistanceLoss"]
from .modules import Buffer
__all__ += ["Buffer"]
from .modules import (CircularPad3d, ConstantPad3d, CrossMapLRN2d, Dropout3d, FeatureAlphaDropout, LocalResponseNorm,
                      LPPool1d, LPPool2d, LPPool3d, MultiLabelMarginLoss, ReflectionPad3d, ReplicationPad3d,
                      UninitializedBuffer, UninitializedParameter, ZeroPad3d)
from .lazy import (LazyBatchNorm1d, LazyBatchNorm2d, LazyBatchNorm3d, LazyConv1d, LazyConv2d, LazyConv3d,
                   LazyConvTranspose1d, LazyConvTranspose2d, LazyConvTranspose3d, LazyInstanceNorm1d,
                   LazyInstanceNorm2d, LazyInstanceNorm3d, LazyLinear)

__all__ += ["LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d", "LazyConv1d", "LazyConv2d", "LazyConv3d",
            "LazyConvTranspose1d", "LazyConvTranspose2d", "LazyConvTranspose3d", "LazyInstanceNorm1d",
            "LazyInstanceNorm2d", "LazyInstanceNorm3d", "LazyLinear", "UninitializedBuffer", "UninitializedParameter"]
__all__ += ["CircularPad3d", "ConstantPad3d", "Dropout3d", "FeatureAlphaDropout", "ReflectionPad3d", "ReplicationPad3d",
            "ZeroPad3d"]
__all__ += ["CrossMapLRN2d", "LocalResponseNorm", "LPPool1d", "LPPool2d", "LPPool3d", "MultiLabelMarginLoss"]
from .adaptive import AdaptiveLogSoftmaxWithLoss

__all__ += ["AdaptiveLogSoftmaxWithLoss"]
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase

__all__ += ["GRU", "LSTM", "RNN", "GRUCell", "LSTMCell", "RNNBase", "RNNCell", "RNNCellBase"]

# torch.nn.modules' submodule paths (modules is one file here, so the names are registered):
# ``from torch.nn.modules.loss import _Loss`` and the like port by changing torch to ddpc.
from . import _module_utils, adaptive, attention, lazy, modules, rnn, transformer  # noqa: E402
modules.utils = _sys.modules[modules.__name__ + ".utils"] = _module_utils
for _name, _module in dict(activation=modules, batchnorm=modules, channelshuffle=modules, container=modules,
                           conv=modules, distance=modules, dropout=modules, flatten=modules, fold=modules,
                           instancenorm=modules, linear=modules, loss=modules, module=modules,
                           normalization=modules, padding=modules, pixelshuffle=modules, pooling=modules,
                           sparse=modules, upsampling=modules, adaptive=adaptive, lazy=lazy, rnn=rnn,
                           transformer=transformer).items():
    setattr(modules, _name, _module)
    _sys.modules.setdefault(f"{modules.__name__}.{_name}", _module)
# torch.nn.modules holds every layer, also those in files of their own here, so
# ``nn.modules.activation.MultiheadAttention`` and ``nn.modules.linear.LazyLinear`` resolve.
for _module in (adaptive, lazy, rnn, transformer):
    for _name in _module.__all__:
        setattr(modules, _name, getattr(_module, _name))

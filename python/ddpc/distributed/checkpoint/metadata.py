"""What a distributed checkpoint records, at PyTorch's path
torch.distributed.checkpoint.metadata: ``Metadata`` maps each flattened key
to a ``TensorStorageMetadata`` (dtype, global size, and the chunks saved of
it, each with its offsets and sizes) or a ``BytesStorageMetadata`` (a
non-tensor value); ``MetadataIndex`` names one chunk (or one value) of it.
Storage writers and readers fill ``storage_data`` with where each chunk lies.
"""

from dataclasses import dataclass, field
from typing import Any, Optional

from ..._dtype import dtype as _dtype_type
from ..._dtype import float32
from ...tensor import Size

__all__ = ["ChunkStorageMetadata", "TensorProperties", "TensorStorageMetadata", "BytesStorageMetadata",
           "StorageMeta", "Metadata", "MetadataIndex", "STORAGE_TYPES"]


@dataclass
class ChunkStorageMetadata:
    """One saved part of a tensor: where it starts in the whole (offsets) and its shape (sizes)."""

    offsets: Size
    sizes: Size


@dataclass
class TensorProperties:
    """A saved tensor's dtype and flags. PyTorch's layout and memory_format are not kept: ddpc's
    tensors are strided and saved contiguous."""

    dtype: _dtype_type = float32
    requires_grad: bool = False
    pin_memory: bool = False

    @staticmethod
    def create_from_tensor(tensor):
        return TensorProperties(dtype=tensor.dtype, requires_grad=bool(tensor.requires_grad),
                                pin_memory=bool(tensor.is_pinned()))


@dataclass
class TensorStorageMetadata:
    """A tensor of the checkpoint: its properties, global size, and the chunks saved of it."""

    properties: TensorProperties
    size: Size
    chunks: list


@dataclass
class BytesStorageMetadata:
    """A non-tensor value of the checkpoint, saved as bytes (ddpc.save's)."""


STORAGE_TYPES = TensorStorageMetadata | BytesStorageMetadata


@dataclass
class StorageMeta:
    """What a storage writer tells the planner about the checkpoint it writes."""

    checkpoint_id: Any = None
    save_id: Optional[str] = None
    load_id: Optional[str] = None
    modules: list = field(default_factory=list)


@dataclass
class Metadata:
    """A checkpoint's table of contents: key -> TensorStorageMetadata or BytesStorageMetadata;
    planner_data and storage_data are the planner's and the storage's own."""

    state_dict_metadata: dict
    planner_data: Any = None
    storage_data: Any = None
    storage_meta: Optional[StorageMeta] = None
    version: Optional[str] = None


@dataclass(frozen=True)
class MetadataIndex:
    """One chunk of a tensor (fqn and the chunk's offsets) or one value (fqn alone). ``index``, the
    chunk's place in its TensorStorageMetadata's chunks, is a hint: it takes no part in equality."""

    fqn: str
    offset: Optional[Size] = None
    index: Optional[int] = field(default=None, hash=False, compare=False)

    def __post_init__(self):
        if self.offset is not None:
            object.__setattr__(self, "offset", Size(self.offset))

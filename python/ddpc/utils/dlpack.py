"""ddpc.utils.dlpack, as torch.utils.dlpack: ``from_dlpack`` takes any DLPack producer (a numpy
array, a PyTorch, CuPy or JAX tensor) or a capsule and shares its memory; ``to_dlpack`` gives a
capsule over a ddpc tensor's memory, for libraries that take capsules (a capsule is consumed once)."""

from ..tensor import from_dlpack

__all__ = ["from_dlpack", "to_dlpack"]


def to_dlpack(tensor):
    """A DLPack capsule sharing ``tensor``'s memory (of a device tensor: ordered after the work queued so far)."""
    return tensor.__dlpack__()

"""Comm hooks that send gradients as 8-bit integers, as
torch.distributed.algorithms.ddp_comm_hooks' quantization_hooks: each rank
quantizes its bucket with its own affine scale and zero point (uint8, the
range spanning the values and 0, as a min-max observer picks them), the
ranks all-gather the scales and zero points and then the quantized
buckets, and each rank dequantizes every rank's bucket and averages them.
The average is within half a step (scale / 2) per rank of the exact one.
``quantization_perchannel_hook`` gives every ``bucket_size`` values their
own scale, for buckets whose parts differ in magnitude."""

from .... import distributed as dist
from ...._dtype import finfo, float32, uint8
from ....autograd import cat
from ....tensor import stack, zeros

__all__ = ["quantization_perchannel_hook", "quantization_pertensor_hook"]

_QUANT_MAX = 255.0  # uint8: quantized values lie in [0, 255]


def _affine_params(lo, hi):
    """Scales and zero points of uint8 quantization covering [min(lo, 0), max(hi, 0)]
    (elementwise: one pair per channel), with the rounding of PyTorch's
    MinMaxObserver so that the same gradients give the same integers."""
    lo, hi = lo.clamp(max=0), hi.clamp(min=0)
    scale = ((hi - lo) / _QUANT_MAX).clamp(min=finfo(float32).eps)
    zero_point = (0 - (lo / scale).round()).clamp(0, _QUANT_MAX)
    return scale, zero_point


def _quantize(x, scale, zero_point):
    return ((x / scale).round() + zero_point).clamp(0, _QUANT_MAX).to(uint8)


def _dequantize(q, scale, zero_point):
    return scale * (q.to(float32) - zero_point)


def _all_gather(tensor, group):
    """A future whose value is every rank's ``tensor``, in rank order."""
    out = [zeros(tuple(tensor.shape), dtype=tensor.dtype, device=tensor.device)
           for _ in range(dist.get_world_size(group))]
    return dist.all_gather(out, tensor, group=group, async_op=True).get_future()


def _quantized_average(group, channels):
    """The average over the group of ``channels`` (rows, each quantized with its
    own scale) as a future: two all-gathers, the second launched once the
    first (of the scales and zero points) is done."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    scale, zero_point = _affine_params(channels.amin(dim=1), channels.amax(dim=1))
    params = {}

    def quantize_and_all_gather(fut):
        params["all"] = fut.value()
        mine = params["all"][rank]
        return _all_gather(_quantize(channels, mine[0][:, None], mine[1][:, None]), group).wait()

    def dequantize_and_average(fut):
        total = zeros(tuple(channels.shape), dtype=float32, device=channels.device)
        for q, (s, z) in zip(fut.value(), params["all"]):
            total += _dequantize(q, s[:, None], z[:, None])
        return total / world

    return _all_gather(stack([scale, zero_point]), group).then(quantize_and_all_gather).then(dequantize_and_average)


def quantization_pertensor_hook(process_group, bucket):
    """Averages the bucket over ``process_group`` (None: the default group)
    sent as uint8 with one scale and zero point per rank; the result is
    float32."""
    flat = bucket.buffer().to(float32)
    return _quantized_average(process_group, flat.reshape(1, -1)).then(lambda fut: fut.value().reshape(-1))


def quantization_perchannel_hook(process_group, bucket, bucket_size=512):
    """Averages the bucket over ``process_group`` sent as uint8, with a scale and
    zero point per rank for every ``bucket_size`` values (the bucket padded
    with zeros to a multiple of it, a whole channel of them where it already
    is one, as PyTorch pads); the result is float32."""
    if bucket_size < 1:
        raise ValueError(f"quantization_perchannel_hook: bucket_size must be positive, got {bucket_size}")
    flat = bucket.buffer().to(float32)
    n = flat.numel()
    padded = cat([flat, zeros(bucket_size - n % bucket_size, dtype=float32, device=flat.device)])
    return _quantized_average(process_group, padded.reshape(-1, bucket_size)).then(
        lambda fut: fut.value().reshape(-1)[:n])

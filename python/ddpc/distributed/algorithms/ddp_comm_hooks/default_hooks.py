"""DDP's all-reduce hook and its float16 and bfloat16 compressing forms (implemented in ddpc.nn.parallel)."""

from ....nn.parallel import allreduce_hook, bf16_compress_hook, fp16_compress_hook

__all__ = ["allreduce_hook", "bf16_compress_hook", "fp16_compress_hook"]

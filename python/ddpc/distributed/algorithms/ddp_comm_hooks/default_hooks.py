"""DDP's all-reduce hook, its float16 and bfloat16 compressing forms, and the
wrappers that compress around any hook (implemented in ddpc.nn.parallel)."""

from ....nn.parallel import (allreduce_hook, bf16_compress_hook, bf16_compress_wrapper, fp16_compress_hook,
                             fp16_compress_wrapper)

__all__ = ["allreduce_hook", "bf16_compress_hook", "bf16_compress_wrapper", "fp16_compress_hook",
           "fp16_compress_wrapper"]

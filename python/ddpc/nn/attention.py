"""ddpc.nn.attention, shaped like torch.nn.attention: ``SDPBackend`` and the
``sdpa_kernel`` context that scripts use to choose the kernel behind
``F.scaled_dot_product_attention``.

Where ddpc differs: its attention has one implementation (a GEMM, a fused
masked softmax and a GEMM, on the host and on GPUs), so the choice is kept
(``ddpc.backends.cuda.flash_sdp_enabled()`` and the others report it) but
changes nothing.
"""

import enum

from .. import backends

__all__ = ["SDPBackend", "sdpa_kernel"]


class SDPBackend(enum.IntEnum):
    ERROR = -1
    MATH = 0
    FLASH_ATTENTION = 1
    EFFICIENT_ATTENTION = 2
    CUDNN_ATTENTION = 3
    OVERRIDEABLE = 4


_SWITCHES = {SDPBackend.MATH: "math", SDPBackend.FLASH_ATTENTION: "flash",
             SDPBackend.EFFICIENT_ATTENTION: "mem_efficient", SDPBackend.CUDNN_ATTENTION: "cudnn"}


def sdpa_kernel(backends_, set_priority=False):
    """Within the context only the given backends (one or a list) are enabled."""
    chosen = {backends_} if isinstance(backends_, SDPBackend) else set(backends_)
    for b in chosen:
        if not isinstance(b, SDPBackend):
            raise TypeError(f"sdpa_kernel takes SDPBackend members, got {b!r}")
    return backends.cuda._sdp_choice({name: b in chosen for b, name in _SWITCHES.items()})

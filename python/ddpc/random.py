"""ddpc.random, shaped like torch.random: the global generator's seeding and
state, and ``fork_rng``, which lets a block draw random numbers without
changing what the code after it draws. ddpc has one generator, which the
host and every device share, so ``devices`` changes nothing."""

import contextlib

from .tensor import default_generator, get_rng_state, initial_seed, manual_seed, seed, set_rng_state

__all__ = ["default_generator", "fork_rng", "get_rng_state", "initial_seed", "manual_seed", "seed", "set_rng_state"]


@contextlib.contextmanager
def fork_rng(devices=None, enabled=True, device_type="cuda"):
    """Restores the generator's state when the block ends (``enabled=False``: does nothing)."""
    del devices, device_type
    if not enabled:
        yield
        return
    state = get_rng_state()
    try:
        yield
    finally:
        set_rng_state(state)

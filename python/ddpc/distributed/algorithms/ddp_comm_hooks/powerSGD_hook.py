"""PowerSGD gradient compression (implemented in ddpc.nn._powersgd)."""

from ....nn._powersgd import PowerSGDState, batched_powerSGD_hook, powerSGD_hook

__all__ = ["PowerSGDState", "batched_powerSGD_hook", "powerSGD_hook"]

"""Shared pytest setup: `gpu` tests skip cleanly where no CUDA GPU is usable."""

import pytest

import ddpc


def pytest_collection_modifyitems(config, items):
    if ddpc.cuda.is_available():
        return
    reason = "needs a CUDA GPU: " + (ddpc._C.cuda_unavailable_reason() or "none found")
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)

"""Central-difference gradients shared by the tests that check autograd against numpy references."""

import numpy as np


def numeric_grad(f, x, eps=1e-6):
    """d f(x) / dx by central differences, for f mapping a float64 array to a number."""
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[idx] = eps
        g[idx] = (f(x + d) - f(x - d)) / (2 * eps)
    return g

"""A small synthetic classification problem shared by the examples."""

import numpy as np

import ddpc
from ddpc import nn


def make_blobs(n=2048, features=20, classes=4, seed=0, weights=None):
    """Gaussian blobs: class c centred at a random point; `weights` skews the class frequencies."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 0.8, (classes, features))
    y = rng.choice(classes, n, p=weights).astype(np.int64)
    X = (centres[y] + rng.normal(0, 1, (n, features))).astype(np.float32)
    return X, y


def make_model(features=20, classes=4, hidden=64, seed=0):
    ddpc.manual_seed(seed)
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))


def accuracy(model, X, y):
    with ddpc.no_grad():
        return float((model(ddpc.from_numpy(X)).numpy().argmax(1) == y).mean())

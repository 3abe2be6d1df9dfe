"""Optional: bitwise ops, shifts (every count, in range or not) and integer
powers of ddpc against PyTorch's on the same integer inputs (skipped when
torch is not installed): results equal, dtypes the same. Each comparison runs
in a child process that imports torch before ddpc (see test_nn_torch.py) and
fails there, printing what differs."""

import sys

import pytest
from procs import run_torch_case

# Counts across and beyond each width, negative ones too (taken modulo 256 for uint8).
COUNTS = [-65, -1, 0, 1, 3, 7, 8, 9, 15, 31, 32, 33, 63, 64, 65, 100]

# name: fn(lib, a, b, c) on (3, 16) tensors a and b and a (16,) tensor c of counts, all of one integer dtype.
CASES = {
    "and_or_xor": lambda L, a, b, c: (a & b, a | b, a ^ b, L.bitwise_and(a, 7), L.bitwise_or(-3, b), 5 ^ a),
    "broadcast": lambda L, a, b, c: (a[:1] & b, a[:, :1] | b, L.bitwise_xor(a, b[0])),
    "shift_counts": lambda L, a, b, c: (a << c, a >> c, L.bitwise_left_shift(a[:, :1], c),
                                        L.bitwise_right_shift(a[:, :1], c)),
    "shift_scalars": lambda L, a, b, c: tuple(f(a, k) for k in (0, 1, 7, 8, 31, 33, 63, 64, 100)
                                              for f in (lambda x, k: x << k, lambda x, k: x >> k)),
    "reflected_shifts": lambda L, a, b, c: (1 << (b & 7), 100 >> (b & 7), L.bitwise_left_shift(3, b & 7)),
    "inplace": lambda L, a, b, c: _inplace(a, b),
    "power": lambda L, a, b, c: (a ** (b & 15), (a & 15) ** 3, 2 ** (b & 31)),
}


def _inplace(a, b):
    x = a.clone()
    x &= b
    x |= 6
    x ^= b
    x <<= 3
    x >>= b & 7
    return (x,)


def _inputs(np, dtype):
    rng = np.random.default_rng(11)
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, (3, 16), dtype=np.int64, endpoint=True).astype(dtype)
    b = rng.integers(-300, 300, (3, 16)).astype(dtype)
    return a, b, (np.array(COUNTS) % 256 if dtype == "uint8" else np.array(COUNTS)).astype(dtype)


def _child(name, dtype):
    import numpy as np
    import torch

    import ddpc

    arrays = _inputs(np, dtype)
    want = CASES[name](torch, *[torch.tensor(v) for v in arrays])
    got = CASES[name](ddpc, *[ddpc.tensor(v) for v in arrays])
    assert len(want) == len(got), f"{name}: {len(got)} results, PyTorch {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        assert str(g.dtype).rsplit(".", 1)[-1] == str(w.dtype).rsplit(".", 1)[-1], f"{name} result {i}: {g.dtype}"
        np.testing.assert_array_equal(np.asarray(g), w.numpy(), err_msg=f"{name} result {i} ({dtype})")
    print("ok")


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_pytorch(case, dtype):
    out = run_torch_case(__file__, case, dtype)
    assert out.strip().endswith("ok"), out


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2])

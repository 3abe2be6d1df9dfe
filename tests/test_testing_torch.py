"""Optional: ddpc.testing.assert_close against torch.testing.assert_close on
pairs near the tolerance boundaries of each dtype (skipped without torch):
the same verdict and the same message.

The comparison runs in a child process that imports torch before ddpc (see
test_nn_torch.py) and fails there, printing what differs.
"""

from procs import run_torch_case


def test_matches_pytorch():
    out = run_torch_case(__file__)
    assert out.strip().endswith("ok"), out


def _verdict(assert_close, actual, expected, **kwargs):
    try:
        assert_close(actual, expected, **kwargs)
    except AssertionError as err:
        return str(err)
    return None


def main():
    import numpy as np
    import torch

    import ddpc
    from ddpc.testing import assert_close

    rng = np.random.default_rng(0)
    checked = 0
    for dtype in ["float16", "float32", "float64", "int64", "int32"]:
        for trial in range(200):
            shape = [(), (5,), (3, 4)][trial % 3]
            expected = (rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4)).astype(dtype)
            if dtype.startswith("int"):
                noise = rng.integers(-1, 2, shape) * (rng.random(shape) < 0.2)
            else:
                scale = {"float16": 1e-3, "float32": 1.3e-6, "float64": 1e-7}[dtype]
                noise = np.abs(expected) * scale * rng.uniform(0, 2.5, shape) * rng.choice([-1, 1], shape)
            actual = (expected + noise).astype(dtype)
            if trial % 10 == 0 and not dtype.startswith("int"):
                actual = np.where(rng.random(shape) < 0.3, np.nan, actual).astype(dtype)
            kwargs = {"equal_nan": True} if trial % 20 == 0 else {}
            if trial % 7 == 0:
                kwargs.update(rtol=1e-2, atol=1e-3)
            want = _verdict(torch.testing.assert_close, torch.tensor(actual), torch.tensor(expected), **kwargs)
            got = _verdict(assert_close, ddpc.tensor(actual), ddpc.tensor(expected), **kwargs)
            assert (want is None) == (got is None), f"{dtype} {actual!r} {expected!r} {kwargs}: {want} vs {got}"
            if want is not None:
                assert want.replace("torch.Size([", "(").replace("])", ")") == got, (want, got)
            checked += 1
    print(checked, "ok")


if __name__ == "__main__":
    main()

"""ddpc._tensor_str against PyTorch: for varied values, shapes, scales and
dtypes, format_elements must give the body of PyTorch's repr exactly, under
the default print options and under others set through PyTorch."""

import re

import pytest

torch = pytest.importorskip("torch")

from ddpc._tensor_str import DEFAULTS, PROFILES, format_elements  # noqa: E402

nan, inf = float("nan"), float("inf")


def _random(seed, shape, scale=1.0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def _with_specials(seed, n):
    values = _random(seed, n)
    values[::7], values[1::11], values[2::13], values[3::5] = nan, inf, -inf, 0.0
    return values


def _cases():
    g = torch.Generator().manual_seed(1)
    return {
        "scalar": torch.tensor(1.8515),
        "scalar_f64": torch.tensor(-2.0, dtype=torch.float64),
        "scalar_int": torch.tensor(-42),
        "scalar_bool": torch.tensor(False),
        "scalar_nan": torch.tensor(nan),
        "scalar_complex": torch.tensor(-1.5 - 0.25j),
        "randn5": _random(0, 5),
        "randn1e5": _random(1, 200, 1e5),
        "randn1e-6_3d": _random(2, (3, 4, 5), 1e-6),
        "randn_7x9": _random(3, (7, 9)),
        "randn_50x50": _random(4, (50, 50)),
        "randn_5d": _random(5, (2, 3, 4, 5, 6)),
        "randn_20^3": _random(6, (20, 20, 20)),
        "randn_f64": _random(7, (4, 6), 10.0, torch.float64),
        "randn_f16": _random(8, 10, 3.0, torch.float16),
        "randn_bf16": _random(9, 12, 100.0, torch.bfloat16),
        "mixed_scales": torch.tensor([1e-3, 5.0, 999.0, -0.5]),
        "big": _random(10, 9, 1e9),
        "tiny": _random(11, 9, 1e-9),
        "whole": torch.tensor([[1.0, -2.0, 300.0], [4.0, 0.0, -6.0]]),
        "whole_spread": torch.tensor([1.0, 5000.0, -3.0]),
        "specials": _with_specials(12, 40),
        "only_specials": torch.tensor([nan, inf, -inf, 0.0, -0.0]),
        "rand1500": torch.rand(1500, generator=g),
        "rand_1x1500": torch.rand(1, 1500, generator=g),
        "long_column": torch.arange(10000.0).reshape(10000, 1),
        "wide_rows": torch.arange(3000).reshape(3, 1000),
        "wrap": _random(13, 45, 50.0),
        "int64": torch.randint(-1000, 1000, (40, 30), generator=g),
        "int32": torch.randint(-5, 5, (3, 7), generator=g, dtype=torch.int32),
        "uint8": torch.randint(0, 255, (6, 6), generator=g, dtype=torch.uint8),
        "int_summary": torch.arange(-5000, 5000).reshape(10, 10, 100),
        "bool": torch.rand(4, 5, generator=g) > 0.5,
        "bool_summary": torch.rand(2000, generator=g) > 0.5,
        "complex": torch.tensor([1 + 2j, 3 - 1j]),
        "complex64": torch.complex(_random(14, 30), _random(15, 30, 1e-5)),
        "complex128": torch.complex(_random(16, (40, 40), dtype=torch.float64),
                                    _random(17, (40, 40), dtype=torch.float64)),
        "complex_specials": torch.tensor([complex(nan, 1.0), complex(1e-5, inf), complex(0.0, -0.0)]),
        "empty": torch.zeros(0),
        "empty_2x0": torch.zeros(2, 0, dtype=torch.int64),
    }


def _torch_body(t):
    """PyTorch's repr less "tensor(" and its suffixes (", dtype=...", ", size=...", maybe on their own line)."""
    text = repr(t)
    assert text.startswith("tensor(") and text.endswith(")")
    text = text[len("tensor("):-1]
    while True:
        shorter = re.sub(r",\s*(dtype|size)=[^\n]*$", "", text)
        if shorter == text:
            return text
        text = shorter


def _ddpc_body(t, options):
    arr = t.float().numpy() if t.dtype in (torch.float16, torch.bfloat16) else t.numpy()
    return format_elements(arr, lead="tensor(", options=options)


_CASES = _cases()


@pytest.mark.parametrize("name", list(_CASES))
def test_matches_pytorch(name):
    t = _CASES[name]
    assert _ddpc_body(t, DEFAULTS) == _torch_body(t)


@pytest.mark.parametrize("options", [
    {"precision": 2}, {"precision": 7}, {"sci_mode": True}, {"sci_mode": False}, {"linewidth": 40},
    {"linewidth": 200}, {"threshold": 10, "edgeitems": 1}, {"threshold": 5, "edgeitems": 0},
    {"profile": "short"}, {"profile": "full"},
], ids=str)
@pytest.mark.parametrize("name", ["randn1e5", "randn_7x9", "specials", "int64", "complex64", "rand1500", "scalar"])
def test_options_match_pytorch(options, name):
    t = _CASES[name]
    with torch._tensor_str.printoptions(**options):
        ours = _ddpc_body(t, torch._tensor_str.get_printoptions())
        assert ours == _torch_body(t)


@pytest.mark.parametrize("profile", list(PROFILES))
def test_profiles_are_pytorch(profile):
    with torch._tensor_str.printoptions(profile=profile):
        assert torch._tensor_str.get_printoptions() == dict(PROFILES[profile], sci_mode=None)
    assert torch._tensor_str.get_printoptions() == DEFAULTS

"""ddpc._tensor_str: repr bodies laid out as PyTorch lays them out. Every
expected string here was printed by PyTorch for the same values."""

import math

import numpy as np
import pytest

from ddpc._tensor_str import DEFAULTS, PROFILES, format_elements

nan, inf = float("nan"), float("inf")


def fmt(values, dtype=np.float32, lead="tensor(", **options):
    return format_elements(np.array(values, dtype=dtype), lead=lead, options=dict(DEFAULTS, **options))


@pytest.mark.parametrize("values, dtype, expected", [
    (1.8515, np.float32, "1.8515"),
    (3.0, np.float32, "3."),
    (1e-5, np.float32, "1.0000e-05"),
    (nan, np.float32, "nan"),
    (-inf, np.float32, "-inf"),
    (-0.0, np.float32, "-0."),
    (7, np.int64, "7"),
    (True, np.bool_, "True"),
    (1.5 + 2j, np.complex64, "1.5000+2.j"),
])
def test_zero_dim(values, dtype, expected):
    assert fmt(values, dtype) == expected


@pytest.mark.parametrize("values, expected", [
    ([1.0, 2.0], "[1., 2.]"),
    ([1.5, 2.0], "[1.5000, 2.0000]"),
    ([1.0, 1000.0], "[   1., 1000.]"),
    ([-1.5, 20.25, 3.0], "[-1.5000, 20.2500,  3.0000]"),
    ([0.0, 0.0], "[0., 0.]"),
])
def test_fixed_point_right_aligned(values, expected):
    assert fmt(values) == expected


@pytest.mark.parametrize("values, expected", [
    ([1e-5, 1e3], "[1.0000e-05, 1.0000e+03]"),  # smallest below 1e-4
    ([1.0, 2000.0], "[1.0000e+00, 2.0000e+03]"),  # whole numbers spread over 1000x
    ([1e9, 2e9], "[1.0000e+09, 2.0000e+09]"),  # beyond 1e8
])
def test_scientific_when_spread(values, expected):
    assert fmt(values) == expected


def test_nonfinite_and_zero_set_no_width():
    assert fmt([0.0, nan, inf]) == "[0., nan, inf]"
    assert fmt([1.5, -inf, nan]) == "[1.5000,   -inf,    nan]"
    assert fmt([-0.0, 1.0]) == "[-0., 1.]"


def test_float64_like_float32():
    assert fmt([1.5, 2.0], np.float64) == "[1.5000, 2.0000]"


def test_ints_and_bools():
    assert fmt([-3, 10, 200], np.int64) == "[ -3,  10, 200]"
    assert fmt([True, False], np.bool_) == "[ True, False]"
    assert fmt([[1, 2], [3, 40]], np.uint8) == "[[ 1,  2],\n        [ 3, 40]]"


def test_complex():
    assert fmt([1 + 2j, 3 - 1j], np.complex64) == "[1.+2.j, 3.-1.j]"
    assert fmt([0.5 - 1.25j, -2 + 0j], np.complex128) == "[ 0.5000-1.2500j, -2.0000+0.0000j]"
    assert fmt([complex(1e-5, 1), complex(nan, inf)], np.complex64) == "[1.0000e-05+1.j,        nan+infj]"


def test_empty():
    assert fmt([]) == "[]"
    assert format_elements(np.zeros((2, 0), np.float32), lead="tensor(", options=DEFAULTS) == "[]"


def test_two_and_three_dims():
    assert fmt([[1.0, -2.5], [3.0, 4.0]]) == "[[ 1.0000, -2.5000],\n        [ 3.0000,  4.0000]]"
    assert fmt(np.arange(12).reshape(2, 2, 3)) == (
        "[[[ 0.,  1.,  2.],\n"
        "         [ 3.,  4.,  5.]],\n"
        "\n"
        "        [[ 6.,  7.,  8.],\n"
        "         [ 9., 10., 11.]]]")


def test_four_dims_two_blank_lines():
    assert fmt(np.arange(16).reshape(2, 2, 2, 2), np.int64) == (
        "[[[[ 0,  1],\n"
        "          [ 2,  3]],\n"
        "\n"
        "         [[ 4,  5],\n"
        "          [ 6,  7]]],\n"
        "\n"
        "\n"
        "        [[[ 8,  9],\n"
        "          [10, 11]],\n"
        "\n"
        "         [[12, 13],\n"
        "          [14, 15]]]]")


def test_long_rows_wrap():
    assert fmt(np.arange(30) / 4) == (
        "[0.0000, 0.2500, 0.5000, 0.7500, 1.0000, 1.2500, 1.5000, 1.7500, 2.0000,\n"
        "        2.2500, 2.5000, 2.7500, 3.0000, 3.2500, 3.5000, 3.7500, 4.0000, 4.2500,\n"
        "        4.5000, 4.7500, 5.0000, 5.2500, 5.5000, 5.7500, 6.0000, 6.2500, 6.5000,\n"
        "        6.7500, 7.0000, 7.2500]")
    assert fmt(np.arange(100, 130), np.int64) == (
        "[100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113,\n"
        "        114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127,\n"
        "        128, 129]")


def test_lead_sets_indent():
    assert fmt([[1, 2], [3, 4]], np.int64, lead="values=tensor(") == "[[1, 2],\n               [3, 4]]"


def test_summarized_1d():
    assert fmt(np.arange(2000)) == (
        "[0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.9970e+03, 1.9980e+03,\n"
        "        1.9990e+03]")


def test_summarized_2d():
    assert fmt(np.arange(3000).reshape(30, 100), np.int64) == (
        "[[   0,    1,    2,  ...,   97,   98,   99],\n"
        "        [ 100,  101,  102,  ...,  197,  198,  199],\n"
        "        [ 200,  201,  202,  ...,  297,  298,  299],\n"
        "        ...,\n"
        "        [2700, 2701, 2702,  ..., 2797, 2798, 2799],\n"
        "        [2800, 2801, 2802,  ..., 2897, 2898, 2899],\n"
        "        [2900, 2901, 2902,  ..., 2997, 2998, 2999]]")


def test_summarized_3d_blocks():
    text = fmt(np.arange(2000).reshape(10, 10, 20), np.int64)
    assert text.startswith("[[[   0,    1,    2,  ...,   17,   18,   19],\n         [  20,")
    assert "         [ 580,  581,  582,  ...,  597,  598,  599]],\n\n        ...,\n\n        [[1400," in text
    assert text.endswith("[1980, 1981, 1982,  ..., 1997, 1998, 1999]]]")


def test_summary_formats_only_shown_elements():
    # 10^9 elements as a broadcast view: formatting them all would never finish.
    huge = np.broadcast_to(np.arange(1000, dtype=np.float32), (10**6, 1000))
    assert format_elements(huge, lead="tensor(", options=DEFAULTS) == (
        "[[  0.,   1.,   2.,  ..., 997., 998., 999.],\n"
        "        [  0.,   1.,   2.,  ..., 997., 998., 999.],\n"
        "        [  0.,   1.,   2.,  ..., 997., 998., 999.],\n"
        "        ...,\n"
        "        [  0.,   1.,   2.,  ..., 997., 998., 999.],\n"
        "        [  0.,   1.,   2.,  ..., 997., 998., 999.],\n"
        "        [  0.,   1.,   2.,  ..., 997., 998., 999.]]")


def test_precision():
    assert fmt([1.12345, 1e-5], precision=2) == "[1.12e+00, 1.00e-05]"
    assert fmt([1.12345, 1e-5], precision=6) == "[1.123450e+00, 1.000000e-05]"
    assert fmt([1.12345, 2.5], precision=2) == "[1.12, 2.50]"


def test_sci_mode_option():
    assert fmt([1.12345, 1e-5], sci_mode=True) == "[1.1235e+00, 1.0000e-05]"
    assert fmt([1.12345, 1e-5], sci_mode=False) == "[1.1235, 0.0000]"
    assert fmt([0.0, 0.0], sci_mode=True) == "[0., 0.]"  # no nonzero finite value: no mode to switch
    assert fmt(np.arange(12), sci_mode=True) == (
        "[0.0000e+00, 1.0000e+00, 2.0000e+00, 3.0000e+00, 4.0000e+00, 5.0000e+00,\n"
        "        6.0000e+00, 7.0000e+00, 8.0000e+00, 9.0000e+00, 1.0000e+01, 1.1000e+01]")


def test_linewidth_threshold_edgeitems():
    assert fmt(np.arange(12), linewidth=40) == "[ 0.,  1.,  2.,  3.,  4.,  5.,\n         6.,  7.,  8.,  9., 10., 11.]"
    assert fmt(np.arange(12), threshold=10, edgeitems=1) == "[ 0.,  ..., 11.]"
    assert fmt(np.arange(12), threshold=5, edgeitems=0) == "[...]"
    assert fmt(np.arange(12).reshape(3, 4), threshold=5, edgeitems=0) == "[...]"
    assert fmt(np.arange(2000), threshold=math.inf).count("\n") == 2000 // 6


def test_profiles():
    assert PROFILES["default"] == {k: v for k, v in DEFAULTS.items() if k != "sci_mode"}
    assert PROFILES["short"] == {"precision": 2, "threshold": 1000, "edgeitems": 2, "linewidth": 80}
    assert PROFILES["full"] == {"precision": 4, "threshold": math.inf, "edgeitems": 3, "linewidth": 80}

"""The element text of a tensor's repr, laid out as PyTorch prints it.

One formatter per tensor (two for complex: real and imaginary parts) picks a
mode from the values and right-aligns every element to one width; the nested
brackets, line breaks, wrapping of long rows and "..." summaries follow.
Everything here is numpy and Python strings: it is called on host copies.
"""

import math

import numpy as np

DEFAULTS = {"precision": 4, "threshold": 1000, "edgeitems": 3, "linewidth": 80, "sci_mode": None}

# What set_printoptions(profile=...) sets; it leaves sci_mode to its own argument.
PROFILES = {
    "default": {"precision": 4, "threshold": 1000, "edgeitems": 3, "linewidth": 80},
    "short": {"precision": 2, "threshold": 1000, "edgeitems": 2, "linewidth": 80},
    "full": {"precision": 4, "threshold": math.inf, "edgeitems": 3, "linewidth": 80},
}


def format_elements(arr, *, lead, options):
    """The body of a tensor's repr: what follows ``lead`` (e.g. "tensor(") up
    to its first suffix, such as "[1.5000, 2.0000]", "1.8515" or "[]".

    ``arr`` holds the values (bfloat16 and float16 already widened to
    float32). Continuation lines are indented past ``lead``.
    ``options`` has DEFAULTS' keys. Beyond ``threshold`` elements only the
    ``edgeitems`` at each end of each dim are taken, before any formatting."""
    arr = np.asarray(arr)
    if arr.size == 0:
        return "[]"
    edge = options["edgeitems"]
    summarize = arr.size > options["threshold"]
    if summarize and arr.ndim and not edge:
        return "[...]"
    cuts = tuple(summarize and n > 2 * edge for n in arr.shape)
    shown = arr
    for axis, cut in enumerate(cuts):
        if cut:
            n = shown.shape[axis]
            shown = shown.take(np.r_[0:edge, n - edge:n], axis=axis)

    if arr.dtype.kind == "c":
        reals, real_width = _aligned_texts(shown.real, options)
        imags, imag_width = _aligned_texts(shown.imag, options)
        # The imaginary part keeps no padding: only the real parts line up.
        texts = [re + _signed(im.lstrip() + "j") for re, im in zip(reals, imags)]
        element_width = real_width + 2 + imag_width + 1
    else:
        texts, width = _aligned_texts(shown, options)
        element_width = width + 2
    cells = np.array(texts, dtype=object).reshape(shown.shape)
    if not shown.ndim:
        return cells.item()
    return _nested(cells, cuts, len(lead), element_width, options)


def _signed(imag_text):
    return imag_text if imag_text[0] in "+-" else "+" + imag_text


def _aligned_texts(values, options):
    """Every value's text in C order, right-aligned to the widest, and that
    width. For floats the mode comes from the nonzero finite values alone:
    whole numbers print as "2.", spreads over 1000x or magnitudes beyond
    [1e-4, 1e8] in scientific notation (unless options' sci_mode says), the
    rest with ``precision`` decimals. Zeros, nans and infs set no width."""
    flat = values.ravel()
    if flat.dtype.kind != "f":
        texts = [str(v) for v in flat.tolist()]
        width = max(map(len, texts))
        return [t.rjust(width) for t in texts], width
    flat = flat.astype(np.float64)
    measured = np.isfinite(flat) & (flat != 0)
    whole, sci = True, False
    if measured.any():
        nonzero = flat[measured]
        whole = bool(np.all(nonzero == np.ceil(nonzero)))
        low, high = np.abs(nonzero).min(), np.abs(nonzero).max()
        if options["sci_mode"] is None:
            sci = high / low > 1000.0 or high > 1.0e8 or low < 1.0e-4
        else:
            sci = bool(options["sci_mode"])
    precision = options["precision"]
    if sci:
        texts = [f"{v:.{precision}e}" for v in flat.tolist()]
    elif whole:  # the point marks a float dtype; nan and inf have none
        texts = [f"{v:.0f}" + ("." if math.isfinite(v) else "") for v in flat.tolist()]
    else:
        texts = [f"{v:.{precision}f}" for v in flat.tolist()]
    width = max((len(texts[i]) for i in np.flatnonzero(measured)), default=1)
    return [t.rjust(width) for t in texts], width


def _nested(cells, cuts, indent, element_width, options):
    """cells (a numpy object array of texts, at least 1-d) in brackets, a dim
    per level; each level is one column further in, and "..." stands where
    ``cuts`` says the dim was summarized."""
    edge = options["edgeitems"]
    if cells.ndim == 1:
        items = cells.tolist()
        if cuts[0]:
            items.insert(edge, " ...")
        per_line = max(1, math.floor((options["linewidth"] - indent) / element_width))
        lines = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
        return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"
    rows = [_nested(sub, cuts[1:], indent + 1, element_width, options) for sub in cells]
    if cuts[0]:
        rows.insert(edge, "...")
    # A blank line between blocks for each dim above the rows.
    return "[" + ("," + "\n" * (cells.ndim - 1) + " " * (indent + 1)).join(rows) + "]"

"""Optional: the public functions of ddpc and ddpc.nn.functional take the
argument names PyTorch's take, first ``input`` (and ``other`` second where
PyTorch has it), so calls by keyword port as they are (skipped when torch is
not installed; runs in a child process that imports torch before ddpc)."""

import inspect
import re
import sys

from procs import run_torch_case


def test_matches_pytorch():
    out = run_torch_case(__file__, "compare")
    assert out.strip().endswith("ok"), out


def _torch_names(name, fn):
    """PyTorch's leading argument names: from the signature, or the first line of a builtin's docstring."""
    try:
        return [p.name for p in inspect.signature(fn).parameters.values()]
    except (TypeError, ValueError):
        first = (fn.__doc__ or "").strip().splitlines()[:1]
        m = re.match(r"\s*%s\((.*?)\)" % re.escape(name), first[0] if first else "")
        if not m:
            return None
        return [p.split("=")[0].split(":")[0].lstrip("*").strip() for p in m.group(1).split(",")
                if p.strip() not in ("", "*", "/")]


def compare():
    import torch
    import ddpc

    checked, wrong = 0, []
    for ours, theirs, names in ((ddpc, torch, ddpc.__all__),
                                (ddpc.nn.functional, torch.nn.functional, dir(ddpc.nn.functional))):
        for name in names:
            fn, ref = getattr(ours, name, None), getattr(theirs, name, None)
            if name.startswith("_") or not callable(fn) or inspect.isclass(fn) or ref is None:
                continue
            want = _torch_names(name, ref)
            try:
                got = [p.name for p in inspect.signature(fn).parameters.values()]
            except (TypeError, ValueError):
                continue
            if not want or want[0] != "input":
                continue
            checked += 1
            if got[:1] != ["input"] or (want[1:2] == ["other"] and got[1:2] != ["other"]):
                wrong.append((name, want[:2], got[:2]))
    assert checked > 150, checked
    assert not wrong, wrong


if __name__ == "__main__":
    import torch  # noqa: F401  (before ddpc, see the module docstring)

    globals()[sys.argv[1]]()
    print("ok")

"""Optional: the expectations of error_cases.py against PyTorch (skipped
when torch is not installed): each misuse raises an instance of the
builtin class the case names in PyTorch, and in ddpc. One child process,
which imports torch before ddpc (see test_nn_torch.py), runs them all and
prints the cases that differ."""

import sys

from procs import run_torch_case


def _child():
    import torch
    from error_cases import CASES

    import ddpc

    differ = []
    for name, (fn, expected) in sorted(CASES.items()):
        for lib in (torch, ddpc):
            try:
                fn(lib)
            except expected:
                continue
            except Exception as e:
                differ.append(f"{name}: {lib.__name__} raised {type(e).__name__}({e}), not {expected.__name__}")
            else:
                differ.append(f"{name}: {lib.__name__} raised nothing")
    print("\n".join(differ) or "ok")


def test_cases_match_pytorch():
    out = run_torch_case(__file__)
    assert out.strip() == "ok", out


if __name__ == "__main__":
    _child()

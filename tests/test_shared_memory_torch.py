"""Optional: Tensor.share_memory_, is_shared and Module.share_memory against
PyTorch (skipped when torch is not installed). Each comparison runs in a child
process that imports torch before ddpc and fails there, printing what differs."""

import copy
import pickle
import sys
from multiprocessing.reduction import ForkingPickler

import pytest
from procs import run_torch_case


@pytest.mark.parametrize("case", ["tensors", "modules"])
def test_matches_pytorch(case):
    out = run_torch_case(__file__, case)
    assert out.strip().endswith("ok"), out


def _tensor_story(lib):
    """What a script sees of one tensor and its views moved into shared memory."""
    t = lib.arange(12, dtype=lib.float32).reshape(3, 4)
    row = t[1]
    seen = [t.is_shared(), row.is_shared(), t.share_memory_() is t, t.is_shared(), row.is_shared()]
    row.fill_(-1)
    seen += [t.tolist(), row.storage_offset()]
    whole = lib.zeros(6, dtype=lib.int64)
    tail = whole[2:]
    tail.share_memory_()
    seen += [whole.is_shared(), tail.storage_offset()]
    received = ForkingPickler.loads(ForkingPickler.dumps(t[2]))  # as a Queue or a spawned child gets it
    received.fill_(7)
    seen += [received.is_shared(), t.tolist()]
    seen += [pickle.loads(pickle.dumps(t)).is_shared(), copy.deepcopy(t).is_shared()]
    return seen


def _module_story(lib):
    m = lib.nn.Sequential(lib.nn.Linear(3, 2), lib.nn.BatchNorm1d(2))
    m[0].weight.grad = lib.ones(2, 3)
    return [m.share_memory() is m, [p.is_shared() for p in m.parameters()], [b.is_shared() for b in m.buffers()],
            m[0].weight.grad.is_shared(), m[0].bias.grad is None]


def tensors():
    import torch

    import ddpc

    want, ours = _tensor_story(torch), _tensor_story(ddpc)
    assert ours == want, f"ddpc {ours}\ntorch {want}"


def modules():
    import torch

    import ddpc

    want, ours = _module_story(torch), _module_story(ddpc)
    assert ours == want, f"ddpc {ours}\ntorch {want}"


if __name__ == "__main__":
    import torch  # noqa: F401  (before ddpc, see the module docstring)

    globals()[sys.argv[1]]()
    print("ok")

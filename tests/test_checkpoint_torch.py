"""Optional: PyTorch's torch.save read by ddpc.load (skipped when torch is
not installed). A child process that imports torch before ddpc writes the
files test_checkpoint.py reads, with the installed torch, and loads each with
torch.load and ddpc.load: the same containers, dtypes, values, requires_grad
and Parameters, and for a file with an argparse.Namespace, the same refusal
under weights_only and the same object once it is allowlisted.
`python tests/test_checkpoint_torch.py write DIR` (re)writes tests/data's
files."""

import os
import sys

from procs import run_torch_case


def _same(got, want, where):
    import numpy as np
    import torch

    import ddpc

    if isinstance(want, torch.Tensor):
        assert isinstance(got, ddpc.nn.Parameter) == isinstance(want, torch.nn.Parameter), where
        assert got.requires_grad == want.requires_grad and tuple(got.shape) == tuple(want.shape), where
        names = {torch.bfloat16: "bfloat16"}
        assert got.dtype.name == names.get(want.dtype, str(want.dtype).rsplit(".", 1)[-1]), (where, got.dtype)
        np.testing.assert_array_equal(np.asarray(got.detach().float()),
                                      want.detach().float().resolve_neg().numpy(), where)
    elif isinstance(want, dict):
        assert type(got) is type(want) and list(got) == list(want), where
        for key in want:
            _same(got[key], want[key], f"{where}/{key}")
    elif isinstance(want, (list, tuple)):
        assert isinstance(got, tuple if isinstance(want, tuple) else list) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            _same(g, w, f"{where}/{i}")
    elif isinstance(want, (torch.dtype, torch.device)):
        assert str(got).rsplit(".", 1)[-1] == str(want).rsplit(".", 1)[-1], where
    else:
        assert type(got) is type(want) and got == want, (where, got, want)


def _child(command, directory):
    import argparse
    import pickle

    import torch

    import ddpc
    from test_checkpoint import write_torch_files

    write_torch_files(torch, directory)
    if command == "compare":
        for name in ("torch_model", "torch_mixed", "torch_cuda"):
            path = os.path.join(directory, name + ".pt")
            _same(ddpc.load(path, map_location="cpu"), torch.load(path, map_location="cpu", weights_only=True), name)
        # A global beyond data: both refuse it by default, naming it, and load it once it is allowlisted.
        path = os.path.join(directory, "torch_namespace.pt")
        for load, allow in ((torch.load, "torch.serialization"), (ddpc.load, "ddpc.serialization")):
            try:
                load(path, map_location="cpu")
                raise AssertionError(f"{load.__module__} loaded a Namespace without the allowlist")
            except pickle.UnpicklingError as e:
                assert "GLOBAL argparse.Namespace was not an allowed global by default" in str(e), str(e)
                assert f"`{allow}.add_safe_globals([argparse.Namespace])`" in str(e), str(e)
        with torch.serialization.safe_globals([argparse.Namespace]), \
                ddpc.serialization.safe_globals([argparse.Namespace]):
            _same(ddpc.load(path, map_location="cpu"), torch.load(path, map_location="cpu"), "torch_namespace")
        _same(ddpc.load(path, map_location="cpu", weights_only=False),
              torch.load(path, map_location="cpu", weights_only=False), "torch_namespace")
        print("ok")


def test_torch_save_loads_as_torch_load_does(tmp_path):
    out = run_torch_case(__file__, "compare", str(tmp_path))
    assert out.strip().endswith("ok"), out


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2])

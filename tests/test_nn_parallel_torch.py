"""Optional: ddpc.nn.parallel's scatter and gather, and the quantization comm
hooks, against PyTorch (skipped where torch is not installed).

PyTorch's scatter and gather move chunks between GPUs through its Scatter
and Gather functions; here those are stood in for by what they compute on
one device (``Tensor.chunk`` into as many pieces as devices, ``torch.cat``),
so that PyTorch's own code decides how nested structures are split, how many
devices get a share and how outputs are put together, on the cpu.

The quantization hooks run on two ranks, each a child process (this file run
as a script) in a gloo group and a ddpc cpu group, on the same gradients.
PyTorch's hooks move their observers with ``.cuda(tensor.device)``, which a
cpu device refuses; the children let ``.cuda`` of a cpu device be ``.to``,
so that the hooks' own code runs on the host.
"""

import collections
import sys

import numpy as np
import pytest

from procs import init_torch_and_ddpc_groups, run_torch_ranks

WORLD = 2
# (hook, bucket length, channel length, magnitude): tiny values span less than 255 float32 epsilons (the
# smallest scale).
QUANTIZATION_CASES = [("pertensor", 1100, None, 1.0), ("perchannel", 1100, 512, 1.0), ("perchannel", 1024, 512, 1.0),
                      ("perchannel", 30, 8, 1.0), ("pertensor", 40, None, 1e-6), ("perchannel", 40, 16, 1e-6)]

Pair = collections.namedtuple("Pair", "a b")


def _torch_on_cpu(monkeypatch):
    torch = pytest.importorskip("torch")
    from torch.nn.parallel import scatter_gather

    class Scatter:
        @staticmethod
        def apply(target_gpus, chunk_sizes, dim, tensor):
            return tuple(tensor.chunk(len(target_gpus), dim))

    class Gather:
        @staticmethod
        def apply(target_device, dim, *tensors):
            return torch.cat(tensors, dim)

    monkeypatch.setattr(scatter_gather, "Scatter", Scatter)
    monkeypatch.setattr(scatter_gather, "Gather", Gather)
    return torch, scatter_gather


def _structure(lib, arrays):
    t = [lib.from_numpy(a.copy()) for a in arrays]
    return (t[0], [t[1], "label", 3], {"x": t[2], "none": None}, Pair(t[3], 0.5), ())


def _plain(obj):
    """obj with its tensors as numpy arrays, containers' types kept."""
    if hasattr(obj, "detach"):
        return obj.detach().numpy()
    if isinstance(obj, Pair):
        return Pair(*map(_plain, obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(map(_plain, obj))
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    return obj


def _assert_same(got, want, where="result"):
    assert type(got) is type(want), f"{where}: {type(got).__name__} is not {type(want).__name__}"
    if isinstance(want, np.ndarray):
        assert got.shape == want.shape, f"{where}: shape {got.shape} is not {want.shape}"
        np.testing.assert_array_equal(got, want, err_msg=where)
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), f"{where}: {len(got)} entries, not {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            _assert_same(g, w, f"{where}[{i}]")
    elif isinstance(want, dict):
        assert got.keys() == want.keys(), where
        for k in want:
            _assert_same(got[k], want[k], f"{where}[{k!r}]")
    else:
        assert got == want, where


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("rows,devices", [(6, 3), (7, 3), (4, 3), (2, 3), (5, 2), (9, 4), (1, 2)])
def test_scatter_and_gather_match_pytorch(monkeypatch, dim, rows, devices):
    torch, scatter_gather = _torch_on_cpu(monkeypatch)
    import ddpc
    from ddpc.nn import parallel

    rng = np.random.default_rng(rows * 10 + devices)
    shapes = [[rows, 3, 2], [rows, 3, 1], [rows, 2, 2], [rows, 1, 3]]
    for s in shapes:
        s[0], s[dim] = s[dim], s[0]
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    want = scatter_gather.scatter(_structure(torch, arrays), list(range(devices)), dim)
    got = parallel.scatter(_structure(ddpc, arrays), ["cpu"] * devices, dim)
    _assert_same(_plain(got), _plain(want), "scatter")

    tensor = torch.from_numpy(arrays[0])
    _assert_same(_plain(parallel.scatter(ddpc.from_numpy(arrays[0]), ["cpu"] * devices, dim)),
                 _plain(scatter_gather.scatter(tensor, list(range(devices)), dim)), "scatter of a tensor")
    args_t, kwargs_t = scatter_gather.scatter_kwargs((tensor,), {"m": tensor, "k": 1}, list(range(devices)), dim)
    args_d, kwargs_d = parallel.scatter_kwargs((ddpc.from_numpy(arrays[0]),), {"m": ddpc.from_numpy(arrays[0]),
                                                                              "k": 1}, ["cpu"] * devices, dim)
    _assert_same(_plain((args_d, kwargs_d)), _plain((args_t, kwargs_t)), "scatter_kwargs")

    def outputs(chunks):  # one output per device (PyTorch's gather takes tensors, None and containers of them)
        return [(c[0], [c[1][0]], {"x": c[2]["x"], "none": None}, Pair(c[3].a, c[0])) for c in chunks]

    _assert_same(_plain(parallel.gather(outputs(got), "cpu", dim)),
                 _plain(scatter_gather.gather(outputs(want), "cpu", dim)), "gather")


def test_argument_names_match_pytorch():
    torch = pytest.importorskip("torch")
    import inspect

    import ddpc
    from ddpc.distributed.algorithms import ddp_comm_hooks as ours
    from torch.distributed.algorithms import ddp_comm_hooks as theirs
    from torch.distributed.algorithms.ddp_comm_hooks import debugging_hooks, quantization_hooks  # noqa: F401

    def names(fn):
        return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()]

    pairs = [(getattr(ddpc.nn.parallel, n), getattr(torch.nn.parallel, n))
             for n in ("scatter", "gather", "replicate", "parallel_apply", "data_parallel")]
    pairs.append((ddpc.nn.parallel.scatter_kwargs, torch.nn.parallel.scatter_gather.scatter_kwargs))
    pairs += [(getattr(getattr(ours, m), n), getattr(getattr(theirs, m), n)) for m, n in (
        ("default_hooks", "fp16_compress_wrapper"), ("default_hooks", "bf16_compress_wrapper"),
        ("quantization_hooks", "quantization_pertensor_hook"), ("quantization_hooks", "quantization_perchannel_hook"),
        ("debugging_hooks", "noop_hook"))]
    pairs.append((ddpc.nn.parallel.DistributedDataParallel._register_builtin_comm_hook,
                  torch.nn.parallel.DistributedDataParallel._register_builtin_comm_hook))
    pairs.append((ddpc.nn.parallel.DistributedDataParallel.__init__,
                  torch.nn.parallel.DistributedDataParallel.__init__))
    pairs.append((ddpc.nn.parallel._MixedPrecision, torch.nn.parallel.distributed._MixedPrecision))
    for got, want in pairs:
        assert names(got) == names(want), got.__name__
    assert [t.name for t in ddpc.distributed.BuiltinCommHookType] == ["ALLREDUCE", "FP16_COMPRESS"]
    assert {"ALLREDUCE", "FP16_COMPRESS"} <= set(torch.distributed.BuiltinCommHookType.__members__)


# ---- quantization hooks ------------------------------------------------------------------

def _gradients(rank, n, magnitude):
    rng = np.random.default_rng(rank + 7)
    g = (rng.standard_normal(n) * np.linspace(0.01, 2, n) * magnitude).astype(np.float32)
    return np.abs(g) if rank == 0 else g + np.float32(0.05 * magnitude)


def _let_cuda_of_cpu_be_to(torch):
    tensor_cuda, module_cuda = torch.Tensor.cuda, torch.nn.Module.cuda

    def on_tensor(self, device=None, *args, **kwargs):
        if device is not None and torch.device(device).type == "cpu":
            return self.to(device)
        return tensor_cuda(self, device, *args, **kwargs)

    def on_module(self, device=None):
        if device is not None and torch.device(device).type == "cpu":
            return self.to(device)
        return module_cuda(self, device)

    torch.Tensor.cuda, torch.nn.Module.cuda = on_tensor, on_module


class _TorchBucket:
    def __init__(self, flat):
        self.flat = flat

    def buffer(self):
        return self.flat


def _rank_main(rank, torch_port, ddpc_port, path):
    import torch  # before ddpc
    from torch.distributed.algorithms.ddp_comm_hooks import quantization_hooks as theirs

    import ddpc
    from ddpc.distributed.algorithms.ddp_comm_hooks import quantization_hooks as ours

    _let_cuda_of_cpu_be_to(torch)
    init_torch_and_ddpc_groups(torch, ddpc, rank, WORLD, torch_port, ddpc_port)
    arrays = {}
    for i, (kind, n, channel, magnitude) in enumerate(QUANTIZATION_CASES):
        g = _gradients(rank, n, magnitude)
        extra = {} if channel is None else {"bucket_size": channel}
        hook = f"quantization_{kind}_hook"
        want = getattr(theirs, hook)(None, _TorchBucket(torch.from_numpy(g.copy())), **extra).wait()
        bucket = ddpc.nn.parallel.GradBucket(0, ddpc.from_numpy(g.copy()), [], True)
        got = getattr(ours, hook)(None, bucket, **extra).wait()
        arrays[f"torch/{i}"], arrays[f"ddpc/{i}"] = want.numpy(), got.numpy().copy()
    np.savez(path, **arrays)
    torch.distributed.destroy_process_group()
    ddpc.distributed.destroy_process_group()


def test_quantization_hooks_match_pytorch(tmp_path):
    pytest.importorskip("torch")
    for r, arrays in enumerate(run_torch_ranks(__file__, WORLD, tmp_path)):
        for i, (kind, n, channel, magnitude) in enumerate(QUANTIZATION_CASES):
            got, want = arrays[f"ddpc/{i}"], arrays[f"torch/{i}"]
            assert got.shape == want.shape == (n,) and got.dtype == want.dtype == np.float32
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7 * magnitude,
                                       err_msg=f"rank {r} {kind} {n}/{channel}")
            # Not the exact average: the values did travel quantized.
            exact = np.mean([_gradients(k, n, magnitude) for k in range(WORLD)], 0)
            assert np.abs(want - exact).max() > 1e-5 * magnitude


if __name__ == "__main__":
    _rank_main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])

"""CUDA paths of the foundation: device query, copies, casts, the caching allocator, interop.

Tests marked `gpu` need a CUDA GPU and are skipped without one; the rest check
that a machine without a GPU gets clear answers.
"""

import numpy as np
import pytest

import ddpc


def test_build_info_reports_what_was_compiled():
    info = ddpc.build_info()
    for key in ("cuda", "nccl", "cuda_runtime_version", "cuda_driver_version", "cublas_version", "cufft_version",
                "nccl_version"):
        assert key in info
    if not info["cuda"]:
        assert info["cuda_runtime_version"] is None and info["cublas_version"] is None
        assert info["cufft_version"] is None
    if not info["nccl"]:
        assert info["nccl_version"] is None


def test_no_gpu_means_clear_errors():
    if ddpc.cuda.is_available():
        pytest.skip("a GPU is present")
    assert ddpc.cuda.device_count() == 0
    for call in (lambda: ddpc.zeros(3, device="cuda"), lambda: ddpc.ones(2).cuda(), lambda: ddpc.cuda.synchronize(0),
                 lambda: ddpc.cuda.get_device_properties(0)):
        with pytest.raises(RuntimeError, match="cuda:0 was requested but"):
            call()


def test_memory_statistics_are_zero_before_cuda_is_used():
    """As PyTorch's: training loops log them unguarded, also on machines without a GPU."""
    if ddpc.cuda.is_initialized():
        pytest.skip("this process has used CUDA")
    for stat in (ddpc.cuda.memory_allocated, ddpc.cuda.max_memory_allocated, ddpc.cuda.memory_reserved,
                 ddpc.cuda.max_memory_reserved):
        assert stat() == 0 and stat(0) == 0 and stat("cuda:1") == 0
    assert ddpc.cuda.memory_stats()["peak_allocated"] == 0
    ddpc.cuda.reset_peak_memory_stats()
    ddpc.cuda.reset_max_memory_allocated(0)
    with pytest.raises(ValueError, match="expected a cuda device"):
        ddpc.cuda.memory_allocated("cpu")


def test_doctor_runs_and_reports(capsys):
    from ddpc.__main__ import main
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "CUDA compiled in" in out and "Communication backends" in out and "GPUs:" in out


def test_doctor_describes_each_gpu(monkeypatch, capsys):
    """A GPU's line, and what its host-memory mapping offers the loader (the C properties faked here)."""
    from ddpc.__main__ import main
    props = {"name": "Fake GPU", "total_memory": 80 * 2**30, "capability": (9, 0), "multi_processor_count": 132,
             "pci_bus_id": "0000:01:00.0", "can_map_host_memory": True, "host_register_read_only": False}
    monkeypatch.setattr(ddpc.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(ddpc._C, "cuda_properties", lambda i: props)
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "cuda:0  Fake GPU  80.0 GiB  compute capability 9.0  132 SMs  PCI 0000:01:00.0" in out
    assert "host memory mapped: yes, registered read-only: no" in out


@pytest.mark.gpu
def test_host_device_round_trip_every_dtype():
    for dt in (ddpc.float32, ddpc.float64, ddpc.float16, ddpc.bfloat16, ddpc.int32, ddpc.int64, ddpc.uint8):
        t = ddpc.arange(1000, dtype=dt)
        g = t.cuda()
        assert g.is_cuda and g.device == "cuda:0" and g.dtype is dt
        back = g.cpu()
        assert back.to(ddpc.float64).tolist() == t.to(ddpc.float64).tolist()


@pytest.mark.gpu
def test_pinned_non_blocking_copies():
    src = ddpc.arange(1 << 20, dtype=ddpc.float32).pin_memory()
    assert src.is_pinned()
    g = src.to("cuda", non_blocking=True)
    ddpc.cuda.synchronize()
    np.testing.assert_array_equal(g.cpu().numpy(), src.numpy())


@pytest.mark.gpu
def test_a_copy_within_the_device_does_not_wait_for_it():
    """As in PyTorch: clone, copy_ and to(copy=True) on one GPU are queued on its stream, and the host
    goes on at once (it used to wait for the stream after each). Queued behind tens of milliseconds of
    GEMMs, the copies return with the stream still busy, and hold the right values once it is done."""
    a = ddpc.randn(4096, 4096, device="cuda")
    x = ddpc.arange(1 << 20, dtype=ddpc.float32, device="cuda")
    ddpc.cuda.synchronize()
    stream = ddpc.cuda.current_stream()
    for _ in range(20):  # far longer than the host takes to queue the copies below
        a = a @ a / 64
    copies = [x.clone(), ddpc.empty_like(x).copy_(x), x.to("cuda", copy=True)]
    assert not stream.query()
    ddpc.cuda.synchronize()
    for c in copies:
        np.testing.assert_array_equal(c.cpu().numpy(), np.arange(1 << 20, dtype=np.float32))


@pytest.mark.gpu
def test_device_ops_match_host():
    x = ddpc.randn(4097, dtype=ddpc.float32)
    gx = x.cuda()
    np.testing.assert_allclose((gx * 3 - 1).cpu().numpy(), (x * 3 - 1).numpy(), rtol=1e-6)
    np.testing.assert_allclose((gx / (gx + 10)).cpu().numpy(), (x / (x + 10)).numpy(), rtol=1e-6)
    for dt in (ddpc.float16, ddpc.bfloat16, ddpc.float64, ddpc.int32):
        np.testing.assert_array_equal(gx.to(dt).cpu().to(ddpc.float64).numpy(), x.to(dt).to(ddpc.float64).numpy())
    assert gx.sum().item() == pytest.approx(x.sum().item(), rel=1e-5, abs=1e-3)
    assert gx[10:20].cpu().tolist() == x[10:20].tolist()


@pytest.mark.gpu
def test_random_numbers_identical_on_host_and_device():
    for fn in (ddpc.rand, ddpc.randn):
        ddpc.manual_seed(7)
        h = fn(10000)
        ddpc.manual_seed(7)
        d = fn(10000, device="cuda")
        np.testing.assert_allclose(d.cpu().numpy(), h.numpy(), rtol=1e-6, atol=1e-6)
    ddpc.manual_seed(3)
    hi = ddpc.randint(0, 100, (5000,))
    ddpc.manual_seed(3)
    assert ddpc.randint(0, 100, (5000,), device="cuda").cpu().tolist() == hi.tolist()


@pytest.mark.gpu
def test_caching_allocator_reuses_blocks():
    ddpc.cuda.synchronize()
    ddpc.cuda.empty_cache()
    base = ddpc.cuda.memory_stats()["num_device_mallocs"]
    for _ in range(50):
        t = ddpc.empty(1 << 20, device="cuda")
        del t
    stats = ddpc.cuda.memory_stats()
    assert stats["num_device_mallocs"] - base <= 1
    assert ddpc.cuda.memory_reserved() >= 4 << 20
    t = ddpc.empty(1 << 20, device="cuda")
    assert ddpc.cuda.memory_allocated() >= 4 << 20
    del t
    ddpc.cuda.empty_cache()
    assert ddpc.cuda.memory_reserved() == ddpc.cuda.memory_allocated()


@pytest.mark.gpu
def test_device_properties_and_cai():
    p = ddpc.cuda.get_device_properties(0)
    assert p.total_memory > 0 and p.major >= 7 and p.multi_processor_count > 0
    assert ddpc.cuda.get_device_name(0) == p.name
    g = ddpc.arange(10, dtype=ddpc.float32, device="cuda")
    cai = g.__cuda_array_interface__
    assert cai["shape"] == (10,) and cai["typestr"] == "<f4" and cai["data"][0] == g.data_ptr()


@pytest.mark.gpu
def test_cupy_and_torch_interop_on_device():
    done = 0
    try:
        import cupy
    except ImportError:
        cupy = None
    if cupy is not None:
        g = ddpc.arange(8, dtype=ddpc.float32, device="cuda")
        c = cupy.asarray(g)
        assert c.data.ptr == g.data_ptr() and float(c.sum()) == 28.0
        back = ddpc.from_dlpack(cupy.arange(5, dtype=cupy.float32))
        assert back.is_cuda and back.cpu().tolist() == [0, 1, 2, 3, 4]
        done += 1
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        x = torch.arange(6, dtype=torch.float32, device="cuda")
        t = ddpc.from_dlpack(x)
        assert t.is_cuda and t.cpu().tolist() == [0, 1, 2, 3, 4, 5]
        y = torch.from_dlpack(t)
        assert y.data_ptr() == x.data_ptr()
        done += 1
    if not done:
        pytest.skip("neither CuPy nor a CUDA PyTorch is installed")


@pytest.mark.gpu
def test_cuda_tensor_pickles_onto_same_device():
    import pickle
    g = ddpc.arange(4, dtype=ddpc.float32, device="cuda:0")
    u = pickle.loads(pickle.dumps(g))
    assert u.device == "cuda:0" and u.cpu().tolist() == [0, 1, 2, 3]


@pytest.mark.gpu
def test_comparisons_and_extremes_match_host():
    x = ddpc.randn(64, 33)
    gx = x.cuda()
    assert (gx > 0).cpu().tolist() == (x > 0).tolist()
    assert (gx == gx[0]).cpu().tolist() == (x == x[0]).tolist()
    for dim in (0, 1):
        assert gx.argmax(dim).cpu().tolist() == x.argmax(dim).tolist()
        np.testing.assert_array_equal(gx.min(dim).values.cpu().numpy(), x.min(dim).values.numpy())
    w = ddpc.randn(8, 5, device="cuda", requires_grad=True)
    w.max(1).values.sum().backward()
    assert w.grad.sum().item() == 8.0 and (w.grad.cpu().argmax(1) == w.detach().cpu().argmax(1)).sum().item() == 8
    assert ddpc.rand(100000, dtype=ddpc.bfloat16, device="cuda").float().max().item() < 1.0


def _report_cuda(queue):
    try:
        ddpc.zeros(1, device="cuda")
        err = ""
    except RuntimeError as e:
        err = str(e)
    queue.put((ddpc.cuda.is_available(), err))


@pytest.mark.gpu
def test_a_child_forked_after_cuda_use_sees_no_gpu_and_says_why():
    import multiprocessing

    assert ddpc.cuda.is_available()
    ctx = multiprocessing.get_context("fork")
    queue = ctx.SimpleQueue()
    child = ctx.Process(target=_report_cuda, args=(queue,))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    available, err = queue.get()
    assert not available
    assert "forked from one that had already used CUDA" in err and "start_method='spawn'" in err


def _cuda_sum(rank):
    return float(ddpc.full((3,), 2.0, device="cuda").sum().item())


@pytest.mark.gpu
def test_spawn_after_cuda_use_gives_the_children_the_gpu():
    ddpc.zeros(1, device="cuda")
    assert ddpc.spawn(_cuda_sum, nprocs=1) == [6.0]


DEVICE_BLOCK_SCRIPT = r"""
import ctypes
import ddpc

cu = ctypes.CDLL("libcuda.so.1")
assert cu.cuInit(0) == 0


def has_context(i):
    dev, flags, active = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()
    assert cu.cuDeviceGet(ctypes.byref(dev), i) == 0
    assert cu.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active)) == 0
    return active.value


with ddpc.cuda.device(1):
    inside = ddpc.cuda.current_device()
    total = ddpc.ones(4, device="cuda").sum().item()
after = ddpc.cuda.current_device()
print("BLOCK", inside, total, after, has_context(0), has_context(1), flush=True)
"""


@pytest.mark.gpu
def test_device_block_exit_creates_no_context_on_the_device_before():
    """A fresh process's current device is cuda:0 without a context: leaving a
    block on cuda:1 makes cuda:0 current again for ddpc without creating one."""
    import subprocess
    import sys

    if ddpc.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    out = subprocess.run([sys.executable, "-c", DEVICE_BLOCK_SCRIPT], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "BLOCK 1 4.0 0 0 1" in out.stdout, out.stdout

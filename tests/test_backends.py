"""ddpc.backends (TF32 switches, cuDNN flags, compile) and the torch.cuda-style
extras of ddpc.cuda (events, the compute stream, peak-memory reset, seeding,
random states, device contexts, OutOfMemoryError, memory_summary).
Where there is no GPU, the cuda calls must fail with ddpc's clear error; the
gpu-marked tests check what they do on one."""

import numpy as np
import pytest

import ddpc
from ddpc import _C

needs_gpu = pytest.mark.skipif(not ddpc.cuda.is_available(), reason="no CUDA device")


@pytest.fixture
def restore_precision():
    before = ddpc.get_float32_matmul_precision()
    yield
    ddpc.set_float32_matmul_precision(before)


def test_matmul_precision_switches_tf32(restore_precision):
    assert ddpc.get_float32_matmul_precision() == "highest" and not ddpc.backends.cuda.matmul.allow_tf32
    ddpc.set_float32_matmul_precision("high")
    assert _C.allow_tf32() and ddpc.backends.cuda.matmul.allow_tf32
    ddpc.backends.cuda.matmul.allow_tf32 = False
    assert not _C.allow_tf32() and ddpc.get_float32_matmul_precision() == "highest"
    ddpc.backends.cuda.matmul.allow_tf32 = True
    assert ddpc.get_float32_matmul_precision() == "high"
    with pytest.raises(ValueError, match="highest"):
        ddpc.set_float32_matmul_precision("low")


def test_host_gemms_ignore_tf32(restore_precision):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((17, 33)).astype(np.float32), rng.standard_normal((33, 9)).astype(np.float32)
    ddpc.set_float32_matmul_precision("medium")
    np.testing.assert_allclose((ddpc.tensor(a) @ ddpc.tensor(b)).numpy(), a @ b, rtol=1e-5, atol=1e-5)


def test_cudnn_flags_are_kept_and_compile_returns_its_argument():
    ddpc.backends.cudnn.benchmark = True
    assert ddpc.backends.cudnn.benchmark and not ddpc.backends.cudnn.is_available()
    ddpc.backends.cudnn.benchmark = False
    model = ddpc.nn.Linear(2, 2)
    assert ddpc.compile(model) is model and ddpc.compile(model, mode="max-autotune") is model

    @ddpc.compile(fullgraph=True)
    def f(x):
        return x * 2

    @ddpc.compile
    def g(x):
        return x + 1

    assert f(3) == 6 and g(3) == 4


def test_cuda_manual_seed_seeds_the_one_generator():
    ddpc.cuda.manual_seed_all(123)
    a = ddpc.rand(4).numpy()
    ddpc.manual_seed(123)
    np.testing.assert_array_equal(ddpc.rand(4).numpy(), a)


def test_cuda_random_states_are_the_one_generators():
    ddpc.manual_seed(7)
    state = ddpc.cuda.get_rng_state()
    a = ddpc.rand(3).numpy()
    ddpc.cuda.set_rng_state(state)
    np.testing.assert_array_equal(ddpc.rand(3).numpy(), a)
    assert ddpc.cuda.initial_seed() == 7
    assert len(ddpc.cuda.get_rng_state_all()) == ddpc.cuda.device_count()
    ddpc.cuda.seed_all()
    assert ddpc.initial_seed() == ddpc.cuda.initial_seed()


def test_out_of_memory_error_is_torchs_runtime_error_and_a_memory_error():
    assert ddpc.cuda.OutOfMemoryError is ddpc.OutOfMemoryError
    assert issubclass(ddpc.OutOfMemoryError, RuntimeError) and issubclass(ddpc.OutOfMemoryError, MemoryError)


def test_device_context_of_a_host_tensor_changes_nothing():
    with ddpc.cuda.device(None) as d, ddpc.cuda.device_of(ddpc.zeros(2)):
        assert d.idx == -1
    native = ddpc.cuda.is_available() and ddpc.cuda.get_device_capability()[0] >= 8
    assert ddpc.cuda.is_bf16_supported() == native


@pytest.mark.skipif(ddpc.cuda.is_available(), reason="checks the error where there is no GPU")
def test_cuda_calls_without_a_gpu_raise_clearly():
    for call in (lambda: ddpc.cuda.Event().record(), ddpc.cuda.mem_get_info,
                 lambda: ddpc.cuda.current_stream().cuda_stream, ddpc.cuda.memory_summary,
                 lambda: ddpc.cuda.device(0).__enter__(),
                 lambda: ddpc._C.cuda_restore_device(0)):
        with pytest.raises(RuntimeError, match="cuda"):
            call()
    ev = ddpc.cuda.Event(enable_timing=True)
    assert ev.query()  # never recorded: nothing to wait for
    with pytest.raises(RuntimeError, match="recorded first"):
        ev.elapsed_time(ddpc.cuda.Event(enable_timing=True))
    with pytest.raises(RuntimeError, match="enable_timing"):
        ddpc.cuda.Event().elapsed_time(ev)


@pytest.mark.gpu
@needs_gpu
def test_events_time_work_on_the_compute_stream():
    start, end = ddpc.cuda.Event(enable_timing=True), ddpc.cuda.Event(enable_timing=True)
    x = ddpc.randn(2048, 2048, device="cuda")
    start.record()
    for _ in range(5):
        x = x @ x * 1e-3
    end.record()
    end.synchronize()
    assert end.query() and start.elapsed_time(end) > 0
    stream = ddpc.cuda.current_stream()
    assert stream == ddpc.cuda.default_stream() and stream.cuda_stream == _C.cuda_compute_stream(0)
    ev = stream.record_event()
    stream.wait_event(ev)
    stream.synchronize()
    assert ev.query()


@pytest.mark.gpu
@needs_gpu
def test_peak_memory_reset_and_mem_get_info():
    x = ddpc.empty(1 << 20, device="cuda")
    del x
    assert ddpc.cuda.max_memory_allocated() >= 4 << 20
    assert ddpc.cuda.max_memory_reserved() >= ddpc.cuda.memory_reserved() >= 4 << 20
    ddpc.cuda.reset_peak_memory_stats()
    assert ddpc.cuda.max_memory_allocated() == ddpc.cuda.memory_allocated()
    assert ddpc.cuda.max_memory_reserved() == ddpc.cuda.memory_reserved()
    assert "peak reserved" in ddpc.cuda.memory_summary()
    free, total = ddpc.cuda.mem_get_info()
    assert 0 < free <= total


@pytest.mark.gpu
@needs_gpu
def test_a_device_allocation_beyond_the_gpu_raises_out_of_memory_error():
    _, total = ddpc.cuda.mem_get_info()
    with pytest.raises(ddpc.cuda.OutOfMemoryError, match="cudaMalloc"):
        ddpc.empty(2 * total // 4, device="cuda")
    x = ddpc.ones(4, device="cuda")  # the device still works afterwards
    assert x.sum().item() == 4
    with ddpc.cuda.device_of(x):
        assert ddpc.cuda.current_device() == x.device.index


@pytest.mark.gpu
@needs_gpu
def test_tf32_gemm_is_close_to_float32(restore_precision):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((256, 512)).astype(np.float32), rng.standard_normal((512, 128)).astype(np.float32)
    want = a.astype(np.float64) @ b
    ddpc.set_float32_matmul_precision("highest")
    exact = (ddpc.tensor(a, device="cuda") @ ddpc.tensor(b, device="cuda")).cpu().numpy()
    ddpc.set_float32_matmul_precision("high")
    fast = (ddpc.tensor(a, device="cuda") @ ddpc.tensor(b, device="cuda")).cpu().numpy()
    np.testing.assert_allclose(exact, want, rtol=1e-4, atol=1e-4)
    # TF32 keeps 10 mantissa bits of each input: errors near 1e-3 relative to the row norms
    np.testing.assert_allclose(fast, want, rtol=0, atol=5e-2 * np.abs(want).max())

"""DLPack, the numpy array protocol and __cuda_array_interface__."""

import numpy as np
import pytest

import ddpc


def test_dlpack_round_trip_with_numpy_is_zero_copy():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = ddpc.from_dlpack(a)
    assert t.shape == (3, 4) and t.dtype is ddpc.float32
    a[0, 0] = 42
    assert t[0].tolist()[0] == 42
    back = np.from_dlpack(t)
    assert np.shares_memory(back, a)
    back[2, 3] = -1
    assert a[2, 3] == -1
    assert t.__dlpack_device__() == (1, 0)


@pytest.mark.parametrize("dt", ["float32", "float64", "float16", "int32", "int64", "uint8"])
def test_dlpack_every_dtype(dt):
    a = np.arange(7).astype(dt)
    t = ddpc.from_dlpack(a)
    assert t.dtype.name == dt
    np.testing.assert_array_equal(np.from_dlpack(t), a)


def test_utils_dlpack_capsules_share_memory_both_ways():
    from ddpc.utils.dlpack import from_dlpack, to_dlpack

    t = ddpc.arange(6.0).reshape(2, 3)
    back = from_dlpack(to_dlpack(t))
    back[1, 2] = -5.0
    assert t[1, 2].item() == -5.0 and back.shape == (2, 3)
    capsule = to_dlpack(t)
    from_dlpack(capsule)
    with pytest.raises(TypeError, match="unconsumed DLPack capsule"):
        from_dlpack(capsule)


def test_dlpack_keeps_producer_alive():
    t = ddpc.from_dlpack(np.arange(1000, dtype=np.int64))
    import gc
    gc.collect()
    assert t.sum().item() == 999 * 1000 // 2


def test_dlpack_capsule_is_consumed_once():
    cap = np.arange(3.0).__dlpack__()
    ddpc.from_dlpack(cap)
    with pytest.raises(TypeError, match="unconsumed DLPack capsule"):
        ddpc.from_dlpack(cap)


def test_non_contiguous_dlpack_is_refused():
    a = np.arange(16.0).reshape(4, 4)[:, ::2]
    with pytest.raises(BufferError, match="not contiguous"):
        ddpc.from_dlpack(a)


def test_bfloat16_dlpack_and_numpy_view_with_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = np.array([1.0, 2.5, -3.0], dtype=ml_dtypes.bfloat16)
    t = ddpc.from_numpy(a)
    assert t.dtype is ddpc.bfloat16
    assert t.float().tolist() == [1.0, 2.5, -3.0]
    assert t.numpy().dtype == a.dtype and np.shares_memory(t.numpy(), a)
    u = ddpc.from_dlpack(t)
    assert u.dtype is ddpc.bfloat16 and u.data_ptr() == t.data_ptr()


def test_array_protocol_and_no_cai_on_cpu():
    t = ddpc.arange(4, dtype=ddpc.float64)
    np.testing.assert_array_equal(np.asarray(t), [0, 1, 2, 3])
    assert np.asarray(t, dtype=np.float32).dtype == np.float32
    assert not hasattr(t, "__cuda_array_interface__")


def test_torch_dlpack_round_trip_when_installed():
    torch = pytest.importorskip("torch")
    x = torch.arange(6, dtype=torch.float32)
    t = ddpc.from_dlpack(x)
    x[0] = 9
    assert t.tolist()[0] == 9
    y = torch.from_dlpack(t)
    assert y.data_ptr() == x.data_ptr()

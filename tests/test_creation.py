"""Creation functions, the default dtype, the generator's state, broadcasting and grids,
against numpy references and closed forms."""

import numpy as np
import pytest

import ddpc


@pytest.fixture
def float64_default():
    ddpc.set_default_dtype(ddpc.float64)
    yield
    ddpc.set_default_dtype(ddpc.float32)


def test_linspace_logspace_eye_match_numpy():
    np.testing.assert_allclose(ddpc.linspace(-1, 2, 7).numpy(), np.linspace(-1, 2, 7), rtol=1e-6)
    assert ddpc.linspace(0, 1, 5).dtype is ddpc.float32
    assert ddpc.linspace(0, 1, 0).shape == (0,)
    np.testing.assert_allclose(ddpc.logspace(0, 3, 4, base=2.0).numpy(), [1, 2, 4, 8])
    np.testing.assert_array_equal(ddpc.eye(2, 3, dtype=ddpc.int64).numpy(), np.eye(2, 3))
    np.testing.assert_array_equal(ddpc.eye(3).numpy(), np.eye(3))
    with pytest.raises(RuntimeError, match="non-negative"):
        ddpc.linspace(0, 1, -1)


def test_like_functions_take_shape_dtype_and_device():
    t = ddpc.zeros(2, 3, dtype=ddpc.float64)
    f = ddpc.full_like(t, 2.5)
    assert f.dtype is ddpc.float64 and f.shape == (2, 3) and np.all(f.numpy() == 2.5)
    assert ddpc.full_like(t, 7, dtype=ddpc.int32).dtype is ddpc.int32
    r = ddpc.rand_like(t)
    assert r.dtype is ddpc.float64 and r.shape == (2, 3) and np.all((r.numpy() >= 0) & (r.numpy() < 1))
    assert ddpc.randn_like(t, requires_grad=True).requires_grad
    i = ddpc.randint_like(ddpc.zeros(100, dtype=ddpc.int64), 3, 6)
    assert i.dtype is ddpc.int64 and set(i.numpy().tolist()) <= {3, 4, 5}
    assert set(ddpc.randint_like(ddpc.zeros(100), 2).numpy().tolist()) <= {0.0, 1.0}


def test_as_tensor_shares_memory_when_it_can():
    arr = np.arange(4, dtype=np.float32)
    t = ddpc.as_tensor(arr)
    arr[0] = 9
    assert t.numpy()[0] == 9
    copied = ddpc.as_tensor(arr, dtype=ddpc.float64)
    arr[1] = 7
    assert copied.dtype is ddpc.float64 and copied.numpy()[1] == 1
    assert ddpc.as_tensor(t) is t
    assert ddpc.as_tensor([1, 2]).dtype is ddpc.int64


def test_default_dtype_is_honoured_by_creation_functions(float64_default):
    assert ddpc.get_default_dtype() is ddpc.float64
    for t in (ddpc.zeros(2), ddpc.ones(2), ddpc.empty(2), ddpc.rand(2), ddpc.randn(2), ddpc.full((2,), 1.5),
              ddpc.arange(0.0, 1.0, 0.5), ddpc.tensor([1.0]), ddpc.linspace(0, 1, 3), ddpc.eye(2),
              ddpc.nn.Linear(2, 2).weight):
        assert t.dtype is ddpc.float64
    assert ddpc.full((2,), 3).dtype is ddpc.int64
    assert ddpc.full((2,), True).dtype is ddpc.bool and ddpc.full((1,), False).tolist() == [False]  # as PyTorch's
    assert ddpc.tensor(np.zeros(2, dtype=np.float32)).dtype is ddpc.float32
    with pytest.raises(TypeError, match="floating-point"):
        ddpc.set_default_dtype(ddpc.int64)


def test_rng_state_round_trip_and_seed():
    ddpc.manual_seed(3)
    ddpc.rand(5)
    state = ddpc.get_rng_state()
    assert state.dtype is ddpc.uint8 and state.shape == (16,)
    a = ddpc.rand(4).numpy()
    ddpc.rand(10)
    ddpc.set_rng_state(state)
    np.testing.assert_array_equal(ddpc.rand(4).numpy(), a)
    with pytest.raises(TypeError, match="16 bytes"):
        ddpc.set_rng_state(ddpc.zeros(3))
    s = ddpc.seed()
    assert ddpc.initial_seed() == s
    b = ddpc.rand(3).numpy()
    ddpc.manual_seed(s)
    np.testing.assert_array_equal(ddpc.rand(3).numpy(), b)


def test_inference_mode_disables_grad():
    x = ddpc.ones(2, requires_grad=True)
    with ddpc.inference_mode():
        assert not ddpc.is_grad_enabled()
        assert not (x * 2).requires_grad
    assert ddpc.is_grad_enabled()
    with ddpc.inference_mode(False):
        assert ddpc.is_grad_enabled()

    @ddpc.inference_mode()
    def f(t):
        return t * 2

    assert not f(x).requires_grad and ddpc.is_grad_enabled()


def test_broadcast_shapes_and_tensors():
    assert ddpc.broadcast_shapes((2, 1), (3,), 1) == (2, 3)
    with pytest.raises(ValueError, match="broadcast"):
        ddpc.broadcast_shapes((2,), (3,))
    a = ddpc.tensor([[1.0], [2.0]], requires_grad=True)
    b = ddpc.tensor([10.0, 20.0, 30.0])
    x, y = ddpc.broadcast_tensors(a, b)
    np.testing.assert_array_equal(x.numpy(), np.broadcast_to([[1.0], [2.0]], (2, 3)))
    np.testing.assert_array_equal(y.numpy(), np.broadcast_to([10.0, 20.0, 30.0], (2, 3)))
    (x * y).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [[60.0], [60.0]])


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid_matches_numpy(indexing):
    a, b, c = ddpc.arange(2.0), ddpc.arange(3.0), ddpc.arange(4.0)
    got = ddpc.meshgrid(a, b, c, indexing=indexing)
    want = np.meshgrid(np.arange(2.0), np.arange(3.0), np.arange(4.0), indexing=indexing)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w)


def test_diag_both_ways_with_gradients():
    v = ddpc.tensor([1.0, 2.0, 3.0], requires_grad=True)
    for k in (0, 1, -2):
        np.testing.assert_array_equal(ddpc.diag(v, k).numpy(), np.diag([1.0, 2.0, 3.0], k))
    w = np.arange(16.0).reshape(4, 4)
    (ddpc.diag(v, 1) * ddpc.tensor(w)).sum().backward()
    np.testing.assert_array_equal(v.grad.numpy(), np.diag(w, 1))
    m = ddpc.tensor(np.arange(12.0).reshape(3, 4), requires_grad=True)
    for k in (0, 2, -1):
        np.testing.assert_array_equal(ddpc.diag(m, k).numpy(), np.diag(np.arange(12.0).reshape(3, 4), k))
    ddpc.diag(m, 1).sum().backward()
    np.testing.assert_array_equal(m.grad.numpy(), np.eye(3, 4, 1))


def test_arange_refuses_a_step_away_from_end():
    assert ddpc.arange(3, 3).shape == (0,) and ddpc.arange(5, 0, -2).tolist() == [5, 3, 1]
    with pytest.raises(ValueError, match="step"):
        ddpc.arange(0, 5, -1)  # as PyTorch; numpy would give an empty array
    with pytest.raises(ValueError, match="step"):
        ddpc.arange(1.0, 0.0, 0.5)

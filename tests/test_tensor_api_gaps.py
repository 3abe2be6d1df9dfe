"""Tensor methods that lay a tensor out over its storage (as_strided and its
in-place and scatter forms, resize_, set_, is_set_to), the storages, the
per-element callbacks (apply_, map_, map2_), the legacy new(), the in-place
add*_ products with their gradients, and the smaller methods (cfloat,
cdouble, chalf, const_data_ptr, output_nr, dim_order, nonzero_static, prelu,
record_stream), against numpy and closed forms."""

import warnings

import numpy as np
import pytest

import ddpc


def _np_strided(a, size, stride, offset):
    flat = np.asarray(a).reshape(-1)
    item = flat.itemsize
    return np.lib.stride_tricks.as_strided(flat[offset:], size, [s * item for s in stride])


@pytest.mark.parametrize("size,stride,offset", [((2, 3), (3, 1), 0), ((2, 2), (1, 2), 1), ((3, 2), (2, 1), 2),
                                                ((4,), (3,), 0), ((3, 3), (1, 1), 0), ((2, 2), (0, 1), 4)])
def test_as_strided_values(size, stride, offset):
    x = ddpc.arange(12.0)
    np.testing.assert_array_equal(np.asarray(x.as_strided(size, stride, offset)),
                                  _np_strided(np.arange(12.0), size, stride, offset))


def test_as_strided_contiguous_layout_is_a_view():
    x = ddpc.arange(6.0)
    v = x.as_strided((2, 2), (2, 1), 1)
    assert v.untyped_storage().data_ptr() == x.untyped_storage().data_ptr() and v.storage_offset() == 1
    v += 10
    np.testing.assert_array_equal(np.asarray(x), [0, 11, 12, 13, 14, 5])
    x.zero_()
    assert float(v.sum()) == 0.0


def test_as_strided_other_layouts_write_back_or_refuse():
    x = ddpc.arange(6.0)
    t = x.as_strided((2, 2), (1, 2))
    assert not t.is_contiguous()
    t[1, 0] = -1.0  # element 1 of the storage
    np.testing.assert_array_equal(np.asarray(x), [0, -1, 2, 3, 4, 5])
    windows = x.as_strided((3, 2), (1, 1))  # neighbours share elements: writes can't go back
    with pytest.raises(RuntimeError, match="can't be written back"):
        windows.add_(1)
    # the storage offset counts from the storage, not from the view
    np.testing.assert_array_equal(np.asarray(x[3:].as_strided((2,), (1,), 0)), [0, -1])


def test_as_strided_errors():
    x = ddpc.arange(6.0)
    with pytest.raises(RuntimeError, match="out of bounds"):
        x.as_strided((2, 2), (1, 2), 5)
    with pytest.raises(RuntimeError, match="negative strides"):
        x.as_strided((2, 2), (1, -2))
    with pytest.raises(RuntimeError, match="mismatch in length"):
        x.as_strided((2, 2), (1,))
    with pytest.raises(RuntimeError, match="invalid storage offset"):
        x.as_strided((2,), (1,), -1)
    with pytest.raises(TypeError):
        x.as_strided((2.5,), (1,))


def test_as_strided_gradient():
    x = ddpc.tensor(np.arange(6.0), requires_grad=True)
    assert ddpc.autograd.gradcheck(lambda t: t.as_strided((2, 2), (1, 2), 1) * 2, (x,))
    with pytest.raises(RuntimeError, match="no gradient"):
        x.as_strided((3, 2), (1, 1))


def test_as_strided_in_place():
    x = ddpc.arange(6.0)
    assert x.as_strided_((3,), (1,), 2) is x
    np.testing.assert_array_equal(np.asarray(x), [2, 3, 4])
    assert x.storage_offset() == 2 and len(x.untyped_storage()) == 24
    with pytest.raises(RuntimeError, match="not contiguous"):
        x.as_strided_((2, 2), (1, 2), 0)
    with pytest.raises(RuntimeError, match="requires grad"):
        ddpc.zeros(4, requires_grad=True).as_strided_((2,), (1,))


def test_as_strided_scatter():
    x = ddpc.arange(6.0)
    got = x.as_strided_scatter(ddpc.tensor([[10.0, 11.0], [12.0, 13.0]]), (2, 2), (1, 2))
    want = np.arange(6.0)
    want[[0, 2, 1, 3]] = [10, 11, 12, 13]  # row-major over the layout's elements 0, 2 / 1, 3
    np.testing.assert_array_equal(np.asarray(got), want)
    np.testing.assert_array_equal(np.asarray(x), np.arange(6.0))
    np.testing.assert_array_equal(np.asarray(x[2:].as_strided_scatter(ddpc.ones(2), (2,), (1,))), [1, 1, 4, 5])
    with pytest.raises(RuntimeError, match="size equal to the slice"):
        x.as_strided_scatter(ddpc.ones(3), (2, 2), (1, 2))
    a = ddpc.tensor(np.arange(6.0), requires_grad=True)
    b = ddpc.tensor(np.ones(3), requires_grad=True)
    assert ddpc.autograd.gradcheck(lambda s, v: s.as_strided_scatter(v, (3,), (2,), 1), (a, b))


def test_resize_keeps_flat_order():
    x = ddpc.arange(6.0)
    ptr = x.untyped_storage().data_ptr()
    assert x.resize_(2, 2) is x and x.shape == (2, 2)
    np.testing.assert_array_equal(np.asarray(x), [[0, 1], [2, 3]])
    x.resize_(2, 3)  # within the storage: the old elements come back
    assert x.untyped_storage().data_ptr() == ptr
    np.testing.assert_array_equal(np.asarray(x), np.arange(6.0).reshape(2, 3))
    x.resize_(3, 3)  # larger: new memory, the first elements kept
    assert x.shape == (3, 3) and len(x.untyped_storage()) == 36
    np.testing.assert_array_equal(np.asarray(x).reshape(-1)[:6], np.arange(6.0))
    y = ddpc.zeros(2, 2)
    y.resize_as_(ddpc.zeros(4))
    assert y.shape == (4,)


def test_resize_refusals():
    with pytest.raises(RuntimeError, match="require grad"):
        ddpc.zeros(3, requires_grad=True).resize_(4)
    with pytest.raises(RuntimeError, match="negative size"):
        ddpc.zeros(3).resize_(-1)
    base = ddpc.arange(6.0)
    view = base[2:]
    with pytest.raises(RuntimeError, match="not resizable"):
        view.resize_(8)
    with pytest.raises(RuntimeError, match="not resizable"):
        base.resize_(8)  # view still looks at its memory
    with pytest.raises(RuntimeError, match="not resizable"):
        ddpc.from_numpy(np.zeros(3)).resize_(5)
    np.testing.assert_array_equal(np.asarray(view.resize_(2)), [2, 3])


def test_resize_deprecated_forms():
    x = ddpc.arange(6.0)
    with pytest.warns(UserWarning, match="deprecated"):
        np.testing.assert_array_equal(np.asarray(x.resize(2, 3)), np.arange(6.0).reshape(2, 3))
    with pytest.warns(UserWarning, match="deprecated"), pytest.raises(RuntimeError, match="requested resize"):
        x.resize(3, 3)
    with pytest.warns(UserWarning, match="deprecated"):
        assert x.resize_as(ddpc.zeros(3, 2)).shape == (3, 2)


def test_set_and_is_set_to():
    a, b = ddpc.zeros(3), ddpc.arange(4.0).reshape(2, 2)
    assert a.set_(b) is a and a.is_set_to(b) and b.is_set_to(a)
    b[0, 0] = 7.0
    assert float(a[0, 0]) == 7.0
    assert not a.reshape(4).is_set_to(b) and not ddpc.zeros(2, 2).is_set_to(b)
    s = ddpc.arange(5.0).untyped_storage()
    np.testing.assert_array_equal(np.asarray(ddpc.zeros(1).set_(s, 1, (2,))), [1, 2])
    np.testing.assert_array_equal(np.asarray(ddpc.zeros(1).set_(s, 1, (2, 2), (2, 1))), [[1, 2], [3, 4]])
    np.testing.assert_array_equal(np.asarray(ddpc.zeros(1).set_(s)), np.arange(5.0))
    assert ddpc.zeros(3).set_().shape == (0,)
    with pytest.raises(RuntimeError, match="type"):
        ddpc.zeros(3).set_(ddpc.zeros(2, dtype=ddpc.int64))
    with pytest.raises(RuntimeError, match="not contiguous"):
        ddpc.zeros(1).set_(s, 0, (2, 2), (1, 2))
    with pytest.raises(RuntimeError, match="requires grad"):
        ddpc.zeros(3, requires_grad=True).set_(ddpc.zeros(2))


def test_storages():
    x = ddpc.arange(6.0)
    u = x.untyped_storage()
    assert (u.data_ptr(), u.nbytes(), u.size(), len(u), u.element_size()) == (x.data_ptr(), 24, 24, 24, 1)
    assert str(u.device) == "cpu"
    assert x[2:].untyped_storage().data_ptr() == u.data_ptr()
    assert x.reshape(2, 3)[1].untyped_storage().data_ptr() == u.data_ptr()
    assert x.clone().untyped_storage().data_ptr() != u.data_ptr()
    with pytest.warns(UserWarning, match="TypedStorage is deprecated"):
        s = x[1:].storage()
    assert (s.size(), len(s), s.element_size(), s.nbytes(), s.dtype) == (6, 6, 4, 24, ddpc.float32)
    assert s.data_ptr() == u.data_ptr() and s.untyped().nbytes() == 24


def test_apply_map_map2():
    x = ddpc.arange(6.0).reshape(2, 3)
    assert x.apply_(lambda v: v * v + 1) is x
    np.testing.assert_array_equal(np.asarray(x), np.arange(6.0).reshape(2, 3) ** 2 + 1)
    y = ddpc.arange(6.0).reshape(2, 3).map_(ddpc.tensor([1.0, 2.0, 3.0]), lambda a, b: a * b)
    np.testing.assert_array_equal(np.asarray(y), np.arange(6.0).reshape(2, 3) * [1, 2, 3])
    z = ddpc.arange(3.0).map2_(ddpc.tensor([1.0, 2.0, 3.0]), ddpc.tensor([2.0]), lambda a, b, c: a + b * c)
    np.testing.assert_array_equal(np.asarray(z), [2, 5, 8])
    np.testing.assert_array_equal(np.asarray(ddpc.arange(3).apply_(lambda v: v * 1.7)), [0, 1, 3])
    np.testing.assert_array_equal(np.asarray(ddpc.tensor([True, False]).apply_(lambda v: not v)), [False, True])
    base = ddpc.arange(6.0).reshape(2, 3)
    base.t().apply_(lambda v: -v)  # a copy standing for a view writes back
    np.testing.assert_array_equal(np.asarray(base), -np.arange(6.0).reshape(2, 3))
    with pytest.raises(TypeError, match="not callable"):
        ddpc.arange(3.0).apply_(5)
    with pytest.raises(RuntimeError, match="requires grad"):
        ddpc.zeros(3, requires_grad=True).apply_(lambda v: v)
    with pytest.raises(TypeError, match="expected a tensor of"):
        ddpc.arange(3.0).map_(ddpc.arange(3), lambda a, b: a)
    with pytest.raises(TypeError):
        ddpc.arange(3.0).apply_(lambda v: "x")


def test_new():
    x = ddpc.arange(3.0)
    assert x.new(2, 3).shape == (2, 3) and x.new(2, 3).dtype is ddpc.float32
    assert x.new(ddpc.Size([2, 3])).shape == (2, 3)
    np.testing.assert_array_equal(np.asarray(x.new((2, 3))), [2, 3])
    assert x.new().shape == (0,)
    got = ddpc.arange(3).new([1.5, 2])
    assert got.dtype is ddpc.int64 and got.tolist() == [1, 2]
    np.testing.assert_array_equal(np.asarray(x.new(ddpc.tensor([4.0]))), [4])
    with pytest.raises(TypeError):
        x.new(ddpc.tensor([1, 2]))


def _mats(rng):
    return dict(m=rng.standard_normal((3, 4)), a=rng.standard_normal((3, 5)), b=rng.standard_normal((5, 4)),
                v=rng.standard_normal(5), u=rng.standard_normal(3), w=rng.standard_normal(4),
                b1=rng.standard_normal((2, 3, 5)), b2=rng.standard_normal((2, 5, 4)), bm=rng.standard_normal((2, 3, 4)))


_INPLACE_CASES = [("addmm_", "m", ("a", "b"), lambda x, y: x @ y),
                  ("addmv_", "u", ("a", "v"), lambda x, y: x @ y),
                  ("addr_", "m", ("u", "w"), np.outer),
                  ("addbmm_", "m", ("b1", "b2"), lambda x, y: (x @ y).sum(0)),
                  ("baddbmm_", "bm", ("b1", "b2"), lambda x, y: x @ y)]


@pytest.mark.parametrize("name", ["addmm_", "addmv_", "addr_", "addbmm_", "baddbmm_"])
def test_inplace_products(name):
    d = _mats(np.random.default_rng(0))
    _, target, (p, q), prod = next(c for c in _INPLACE_CASES if c[0] == name)
    t = ddpc.tensor(d[target])
    out = getattr(t, name)(ddpc.tensor(d[p]), ddpc.tensor(d[q]), beta=0.5, alpha=2.0)
    assert out is t
    np.testing.assert_allclose(np.asarray(t), 0.5 * d[target] + 2.0 * prod(d[p], d[q]), rtol=1e-12)

    def fn(base, x, y):
        return getattr(base * 1.0, name)(x, y, beta=0.5, alpha=2.0)

    inputs = tuple(ddpc.tensor(d[k], requires_grad=True) for k in (target, p, q))
    assert ddpc.autograd.gradcheck(fn, inputs)
    leaf = ddpc.tensor(d[target], requires_grad=True)
    with pytest.raises(RuntimeError, match="requires grad"):
        getattr(leaf, name)(ddpc.tensor(d[p]), ddpc.tensor(d[q]))
    with pytest.raises(ValueError):
        getattr(ddpc.zeros(1), name)(ddpc.tensor(d[p]), ddpc.tensor(d[q]))


def test_small_methods():
    x = ddpc.tensor([-1.0, 2.0])
    assert x.cfloat().dtype is ddpc.complex64 and x.cdouble().dtype is ddpc.complex128
    np.testing.assert_array_equal(np.asarray(x.cdouble()), [-1 + 0j, 2 + 0j])
    with pytest.raises(TypeError, match="complex32"):
        x.chalf()
    assert x.const_data_ptr() == x.data_ptr()
    np.testing.assert_array_equal(np.asarray(x.prelu(ddpc.tensor([0.25]))), [-0.25, 2.0])
    assert ddpc.zeros(2, 1, 3).dim_order() == (0, 1, 2) and ddpc.zeros(2, 3).dim_order(ambiguity_check=True) == (0, 1)
    with pytest.raises(RuntimeError, match="unique dim order"):
        ddpc.zeros(2, 1, 3).dim_order(ambiguity_check=True)


def test_output_nr():
    class Two(ddpc.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t * 2, t * 3

        @staticmethod
        def backward(ctx, g1, g2):
            return g1 * 2 + g2 * 3

    leaf = ddpc.zeros(4, requires_grad=True)
    a, b = Two.apply(leaf)
    assert (leaf.output_nr, (leaf * 2).output_nr, a.output_nr, b.output_nr) == (0, 0, 0, 1)


def test_nonzero_static():
    x = ddpc.tensor([[0, 1], [3, 0]])
    np.testing.assert_array_equal(np.asarray(x.nonzero_static(size=3, fill_value=9)), [[0, 1], [1, 0], [9, 9]])
    np.testing.assert_array_equal(np.asarray(x.nonzero_static(size=1)), [[0, 1]])
    assert x.nonzero_static(size=0).shape == (0, 2)
    np.testing.assert_array_equal(np.asarray(ddpc.tensor([0, 1, 0, 2]).nonzero_static(size=4)), [[1], [3], [-1], [-1]])
    with pytest.raises(RuntimeError, match="non-negative"):
        x.nonzero_static(size=-1)
    with pytest.raises(TypeError):
        x.nonzero_static(4)


def test_record_stream():
    with pytest.raises(TypeError, match="stream"):
        ddpc.zeros(2).record_stream(None)
    with pytest.raises(TypeError, match="stream"):
        ddpc.zeros(2).record_stream(1)


@pytest.mark.gpu
def test_record_stream_cuda():
    if not ddpc.cuda.is_available():
        pytest.skip("no GPU")
    t = ddpc.ones(4, device="cuda")
    assert t.record_stream(ddpc.cuda.current_stream()) is None
    with pytest.raises(NotImplementedError):
        ddpc.zeros(2).record_stream(ddpc.cuda.current_stream())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert t.untyped_storage().device == t.device

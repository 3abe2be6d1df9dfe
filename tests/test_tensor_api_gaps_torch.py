"""Optional: the Tensor methods of test_tensor_api_gaps.py against PyTorch's
own (skipped when torch is not installed): the same calls give the same
values, storages and error types.

Each group runs in a child process that imports torch before ddpc (see
test_nn_torch.py).
"""

import warnings

from procs import run_torch_group, torch_group_test


def _same(np, got, want, name):
    assert tuple(got.shape) == tuple(want.shape), (name, got.shape, want.shape)
    np.testing.assert_allclose(np.asarray(got.detach()), want.detach().numpy(), rtol=1e-12, err_msg=name)


def _both_raise(torch, ddpc, name, fn):
    kinds = []
    for lib in (torch, ddpc):
        try:
            fn(lib)
        except Exception as e:  # noqa: BLE001  (the kinds are compared below)
            kinds.append(type(e))
        else:
            kinds.append(None)
    # ddpc's may be a subclass: DtypeError is the TypeError PyTorch raises, and a RuntimeError too
    assert kinds[0] is not None and kinds[1] is not None and issubclass(kinds[1], kinds[0]), (name, kinds)


def _layouts(np, torch, ddpc):
    for size, stride, offset in (((2, 3), (3, 1), 0), ((2, 2), (1, 2), 1), ((3, 2), (1, 1), 0), ((2, 2), (0, 1), 4)):
        for lib_x in ((ddpc.arange(12.0), torch.arange(12.0)), (ddpc.arange(12.0)[3:], torch.arange(12.0)[3:])):
            _same(np, lib_x[0].as_strided(size, stride, offset), lib_x[1].as_strided(size, stride, offset), "as_strided")
            _same(np, lib_x[0].as_strided(size, stride), lib_x[1].as_strided(size, stride), "as_strided default offset")
    for size, stride, offset in (((2, 2), (1, 2), 5), ((2, 2), (1, -2), 0), ((2, 2), (1,), 0), ((2,), (1,), -1)):
        _both_raise(torch, ddpc, "as_strided", lambda L: L.arange(6.0).as_strided(size, stride, offset))
    d, t = ddpc.arange(6.0), torch.arange(6.0)
    d.as_strided_((3,), (1,), 2), t.as_strided_((3,), (1,), 2)
    _same(np, d, t, "as_strided_")
    assert d.storage_offset() == t.storage_offset() and d.stride() == t.stride()
    src = np.arange(4.0).reshape(2, 2) + 10
    for lo in (0, 2):
        _same(np, ddpc.arange(6.0)[lo:].as_strided_scatter(ddpc.tensor(src), (2, 2), (1, 2)),
              torch.arange(6.0)[lo:].as_strided_scatter(torch.tensor(src), (2, 2), (1, 2)), "as_strided_scatter")
    _both_raise(torch, ddpc, "as_strided_scatter", lambda L: L.zeros(6).as_strided_scatter(L.ones(3), (2, 2), (1, 2)))
    a = np.arange(6.0)
    for lib in (ddpc, torch):
        x = lib.tensor(a, requires_grad=True)
        (x.as_strided((2, 2), (1, 2), 1) * lib.tensor([[1.0, 2.0], [3.0, 4.0]])).sum().backward()
        if lib is ddpc:
            got = np.asarray(x.grad)
        else:
            np.testing.assert_array_equal(got, x.grad.numpy())


def _resize_set(np, torch, ddpc):
    d, t = ddpc.arange(6.0), torch.arange(6.0)
    for sizes in ((2, 2), (2, 3), (3,), (6,)):
        d.resize_(*sizes), t.resize_(*sizes)
        assert d.tolist() == t.tolist(), sizes  # (a numpy view would make torch's storage fixed in size)
        assert d.untyped_storage().nbytes() == t.untyped_storage().nbytes()
    d.resize_(3, 3), t.resize_(3, 3)
    _same(np, d.reshape(-1)[:6], t.reshape(-1)[:6], "resize_ grown")
    d.resize_as_(ddpc.zeros(2, 2)), t.resize_as_(torch.zeros(2, 2))
    _same(np, d, t, "resize_as_")
    _both_raise(torch, ddpc, "resize_ grad", lambda L: L.zeros(3, requires_grad=True).resize_(4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _same(np, ddpc.arange(6.0).resize(2, 3), torch.arange(6.0).resize(2, 3), "resize")
        _same(np, ddpc.arange(6.0).resize_as(ddpc.zeros(3, 2)), torch.arange(6.0).resize_as(torch.zeros(3, 2)),
              "resize_as")
        _both_raise(torch, ddpc, "resize", lambda L: L.arange(6.0).resize(3, 3))
    for lib in (ddpc, torch):
        a, b = lib.zeros(3), lib.arange(4.0).reshape(2, 2)
        a.set_(b)
        assert a.is_set_to(b) and b.is_set_to(a) and not a.reshape(4).is_set_to(b), lib
        assert not lib.zeros(2, 2).is_set_to(b) and tuple(lib.zeros(3).set_().shape) == (0,)
        s = lib.arange(5.0).untyped_storage()
        assert lib.zeros(1).set_(s, 1, (2,)).tolist() == [1.0, 2.0]
        assert lib.zeros(1).set_(s).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    _both_raise(torch, ddpc, "set_ dtype", lambda L: L.zeros(3).set_(L.zeros(2, dtype=L.int64)))
    _both_raise(torch, ddpc, "set_ grad", lambda L: L.zeros(3, requires_grad=True).set_(L.zeros(2)))


def _storages(np, torch, ddpc):
    for lib in (ddpc, torch):
        x = lib.arange(6.0)
        u = x.untyped_storage()
        assert (u.nbytes(), u.size(), len(u), u.element_size()) == (24, 24, 24, 1), lib
        assert u.data_ptr() == x.data_ptr() == x[2:].untyped_storage().data_ptr(), lib
        assert x.reshape(2, 3)[1].untyped_storage().data_ptr() == u.data_ptr(), lib
        assert x.clone().untyped_storage().data_ptr() != u.data_ptr(), lib
        assert str(u.device) == "cpu"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            s = x[1:].storage()
        assert any("TypedStorage is deprecated" in str(w.message) for w in caught), lib
        assert (s.size(), len(s), s.element_size(), s.nbytes()) == (6, 6, 4, 24), lib
        assert s.data_ptr() == u.data_ptr()


def _callbacks(np, torch, ddpc):
    cases = [("apply_", (), lambda v: v * v + 1), ("map_", ([1.0, 2.0, 3.0],), lambda a, b: a * b),
             ("map2_", ([1.0, 2.0, 3.0], [2.0]), lambda a, b, c: a + b * c)]
    for name, others, fn in cases:
        got = getattr(ddpc.arange(6.0).reshape(2, 3), name)(*[ddpc.tensor(o) for o in others], fn)
        want = getattr(torch.arange(6.0).reshape(2, 3), name)(*[torch.tensor(o) for o in others], fn)
        _same(np, got, want, name)
    assert ddpc.arange(3).apply_(lambda v: v * 1.7).tolist() == torch.arange(3).apply_(lambda v: v * 1.7).tolist()
    _both_raise(torch, ddpc, "apply_ callable", lambda L: L.arange(3.0).apply_(5))
    _both_raise(torch, ddpc, "apply_ grad", lambda L: L.zeros(3, requires_grad=True).apply_(lambda v: v))
    _both_raise(torch, ddpc, "map_ dtype", lambda L: L.arange(3.0).map_(L.arange(3), lambda a, b: a))
    _both_raise(torch, ddpc, "apply_ str", lambda L: L.arange(3.0).apply_(lambda v: "x"))
    for args in ((2, 3), ([1.5, 2],), ((2, 3),), ()):
        for dt in ("float32", "int64"):
            got, want = getattr(ddpc, dt), getattr(torch, dt)
            g, w = ddpc.zeros(1, dtype=got).new(*args), torch.zeros(1, dtype=want).new(*args)
            assert tuple(g.shape) == tuple(w.shape) and g.dtype.name == str(w.dtype)[6:], (args, dt)
            if args and not isinstance(args[0], int):
                assert g.tolist() == w.tolist()
    assert tuple(ddpc.zeros(1).new(ddpc.Size([2, 3])).shape) == tuple(torch.zeros(1).new(torch.Size([2, 3])).shape)
    _both_raise(torch, ddpc, "new dtype", lambda L: L.zeros(1).new(L.tensor([1, 2])))


def _products(np, torch, ddpc):
    rng = np.random.default_rng(0)
    d = dict(m=rng.standard_normal((3, 4)), a=rng.standard_normal((3, 5)), b=rng.standard_normal((5, 4)),
             v=rng.standard_normal(5), u=rng.standard_normal(3), w=rng.standard_normal(4),
             b1=rng.standard_normal((2, 3, 5)), b2=rng.standard_normal((2, 5, 4)), bm=rng.standard_normal((2, 3, 4)))
    for name, target, (p, q) in (("addmm_", "m", ("a", "b")), ("addmv_", "u", ("a", "v")), ("addr_", "m", ("u", "w")),
                                 ("addbmm_", "m", ("b1", "b2")), ("baddbmm_", "bm", ("b1", "b2"))):
        res = []
        for lib in (ddpc, torch):
            ts = [lib.tensor(d[k], requires_grad=True) for k in (target, p, q)]
            out = getattr(ts[0] * 1.0, name)(ts[1], ts[2], beta=0.5, alpha=2.0)
            (out * lib.tensor(np.arange(out.numel()).reshape(tuple(out.shape)) * 1.0)).sum().backward()
            res.append([np.asarray(out.detach()) if lib is ddpc else out.detach().numpy()]
                       + [np.asarray(t.grad) if lib is ddpc else t.grad.numpy() for t in ts])
        for g, w in zip(*res):
            np.testing.assert_allclose(g, w, rtol=1e-10, err_msg=name)
        _both_raise(torch, ddpc, f"{name} leaf",
                    lambda L: getattr(L.tensor(d[target], requires_grad=True), name)(L.tensor(d[p]), L.tensor(d[q])))


def _small(np, torch, ddpc):
    x = [-1.0, 2.0]
    for name in ("cfloat", "cdouble"):
        got, want = getattr(ddpc.tensor(x), name)(), getattr(torch.tensor(x), name)()
        assert got.dtype.name == str(want.dtype)[6:] and got.tolist() == want.tolist(), name
    _same(np, ddpc.tensor(x).prelu(ddpc.tensor([0.25])), torch.tensor(x).prelu(torch.tensor([0.25])), "prelu")
    for lib in (ddpc, torch):
        t = lib.tensor(x)
        assert t.const_data_ptr() == t.data_ptr()
        leaf = lib.zeros(4, requires_grad=True)
        assert leaf.output_nr == 0 and (leaf * 2).output_nr == 0
    for shape in ((2, 3), (2, 1, 3), (4,)):
        assert ddpc.zeros(*shape).dim_order() == torch.zeros(*shape).dim_order()
        _both_raise(torch, ddpc, "dim_order", lambda L: L.zeros(2, 1, 3).dim_order(ambiguity_check=True))
    for data, size, fill in (([0, 1, 0, 2], 4, -1), ([[0, 1], [3, 0]], 3, 9), ([[0, 1], [3, 0]], 1, -1),
                             ([0.0, 0.0], 2, 5)):
        _same(np, ddpc.tensor(data).nonzero_static(size=size, fill_value=fill),
              torch.tensor(data).nonzero_static(size=size, fill_value=fill), "nonzero_static")
    _both_raise(torch, ddpc, "nonzero_static size", lambda L: L.tensor([1, 0]).nonzero_static(size=-1))
    _both_raise(torch, ddpc, "nonzero_static positional", lambda L: L.tensor([1, 0]).nonzero_static(4))


GROUPS = {"layouts": _layouts, "resize_set": _resize_set, "storages": _storages, "callbacks": _callbacks,
          "products": _products, "small": _small}


test_matches_pytorch = torch_group_test(__file__, GROUPS)


if __name__ == "__main__":
    run_torch_group(GROUPS)

"""Ops that PyTorch always copies (flip, rot90, repeat, tile, pad,
interpolate, pixel and channel shuffles, repeat_interleave) give tensors of
their own in ddpc too, also where they move nothing: a write into the result
leaves the input as it was, and an in-place op on the result gives the
gradient that the same op on a fresh product gives. So do bool indices and
``contiguous`` into another memory format. ``view`` is refused where
PyTorch's is, where its reshape would copy; a write into overlapping windows
is refused, not lost, with grad mode on or off."""

import numpy as np
import pytest

import ddpc
import ddpc.nn.functional as F

OPS = {
    "flip": lambda x: x.flip(-1),
    "flip_size_1_dim": lambda x: x.flip(0),
    "flip_no_dims": lambda x: x.flip([]),
    "fliplr": lambda x: ddpc.fliplr(x),
    "flipud": lambda x: ddpc.flipud(x),
    "rot90": lambda x: ddpc.rot90(x, 1, (2, 3)),
    "rot90_k2": lambda x: ddpc.rot90(x, 2, (2, 3)),
    "rot90_k0": lambda x: ddpc.rot90(x, 0, (2, 3)),
    "repeat_ones": lambda x: x.repeat(1, 1, 1, 1),
    "repeat": lambda x: x.repeat(1, 2, 1, 1),
    "tile_ones": lambda x: x.tile((1, 1)),
    "repeat_interleave_1": lambda x: x.repeat_interleave(1, dim=0),
    "repeat_interleave_2": lambda x: x.repeat_interleave(2, dim=1),
    "repeat_interleave_flat": lambda x: x.repeat_interleave(1),
    "pixel_shuffle_1": lambda x: F.pixel_shuffle(x, 1),
    "pixel_shuffle_2": lambda x: F.pixel_shuffle(x, 2),
    "pixel_unshuffle_1": lambda x: F.pixel_unshuffle(x, 1),
    "channel_shuffle_1": lambda x: F.channel_shuffle(x, 1),
    "channel_shuffle_4": lambda x: F.channel_shuffle(x, 4),
    "pad_crop": lambda x: F.pad(x, (-1, 0)),
    "pad_1": lambda x: F.pad(x, (1, 1)),
}
OPS.update({f"pad_0_{m}": (lambda x, m=m: F.pad(x, (0, 0, 0, 0), mode=m))
            for m in ("constant", "reflect", "replicate", "circular")})
for _mode in ("nearest", "nearest-exact", "bilinear", "bicubic", "area"):
    _kw = {"align_corners": False} if _mode in ("bilinear", "bicubic") else {}
    OPS[f"interpolate_same_size_{_mode}"] = lambda x, m=_mode, kw=_kw: F.interpolate(x, size=(4, 4), mode=m, **kw)
    OPS[f"interpolate_scale_1_{_mode}"] = lambda x, m=_mode, kw=_kw: F.interpolate(x, scale_factor=1, mode=m, **kw)


def _input():
    return np.arange(64, dtype=np.float32).reshape(1, 4, 4, 4) - 30


@pytest.mark.parametrize("name", sorted(OPS))
def test_writes_into_the_result_stay_in_it(name):
    a = _input()
    x = ddpc.tensor(a)
    out = OPS[name](x)
    assert out is not x
    out.fill_(-1)
    np.testing.assert_array_equal(x.numpy(), a)


@pytest.mark.parametrize("name", sorted(OPS))
def test_an_in_place_op_on_the_result_leaves_the_gradient_right(name):
    def grad(fresh):
        x = ddpc.tensor(_input(), requires_grad=True)
        h = x * 2
        y = OPS[name](h)
        y = y * 1 if fresh else y  # a product is new memory whatever the op returns
        y.relu_()
        ((h * h).sum() + y.sum()).backward()
        return x.grad.numpy()

    np.testing.assert_array_equal(grad(fresh=False), grad(fresh=True))


@pytest.mark.parametrize("view, shape", [(lambda a: a.transpose(0, 1), (6, 4)), (lambda a: a.transpose(1, 2), (2, 12)),
                                         (lambda a: a.transpose(0, 1), (3, 8)), (lambda a: a[0].t(), (-1,))])
def test_view_is_refused_where_pytorchs_is(view, shape):
    a = ddpc.arange(24.0).reshape(2, 3, 4)
    with pytest.raises(RuntimeError, match="view size is not compatible.*Use .reshape"):
        view(a).view(*shape)
    np.testing.assert_array_equal(view(a).reshape(*shape).numpy(), view(a).contiguous().view(*shape).numpy())


@pytest.mark.parametrize("view, shape", [(lambda a: a.transpose(1, 2), (2, 4, 3)),
                                         (lambda a: a.permute(0, 2, 1), (2, 2, 2, 3)),
                                         (lambda a: a.transpose(0, 1), (3, 2, 4)), (lambda a: a[:, 1:], (2, 8)),
                                         (lambda a: a[:, :, ::2], (2, 6)), (lambda a: a[:, :, :1], (6,))])
def test_view_of_a_layout_strides_can_express_writes_back(view, shape):
    a = ddpc.arange(24.0).reshape(2, 3, 4)
    v = view(a).view(*shape)
    v.fill_(-1)
    assert (view(a) == -1).all()
    assert int((a == -1).sum()) == v.numel()


@pytest.mark.parametrize("index", [True, False, (None, True), (True, 0), (0, True), (Ellipsis, True)])
def test_a_bool_index_is_advanced_and_copies(index):
    a = np.arange(6.0).reshape(2, 3)
    x = ddpc.tensor(a)
    out = x[index]
    assert tuple(out.shape) == a[index].shape and out.tolist() == a[index].tolist()
    out.fill_(-1)
    np.testing.assert_array_equal(x.numpy(), a)


def test_a_write_into_overlapping_windows_is_refused_in_grad_mode_too():
    x = ddpc.ones(2, 3, requires_grad=True) * 1
    windows = x.unfold(1, 2, 1)  # windows share elements: no single place for a write to go
    for write in (lambda: windows.fill_(5), lambda: windows[0].fill_(5), lambda: windows.transpose(1, 2).fill_(5)):
        with pytest.raises(RuntimeError, match="copy made by unfold"):
            write()
    assert x.tolist() == [[1.0] * 3] * 2


def test_contiguous_in_another_layout_is_a_copy():
    x = ddpc.arange(18.0).reshape(1, 2, 3, 3)
    for y in (x.contiguous(memory_format=ddpc.channels_last), x.to(memory_format=ddpc.channels_last)):
        assert y is not x
        y.fill_(-1)
        assert x.min().item() == 0
    assert x.contiguous() is x and x.to(memory_format=ddpc.contiguous_format) is x


def test_the_parts_of_a_conjugate_refuse_writes_and_conj_physical_is_its_own():
    c = ddpc.tensor([1 + 2j, 3 - 1j])
    for part in (lambda: c.conj().real, lambda: c.conj().imag, lambda: ddpc.view_as_real(c.conj())):
        with pytest.raises(RuntimeError, match="copy made by conj"):
            part().fill_(0)  # PyTorch's would write into c; ddpc's conj is computed, so the write could only be lost
    for own in (c.conj_physical(), ddpc.conj_physical(c)):
        own.fill_(0)
    c.real.fill_(5)  # the parts of c itself write into c
    assert c.tolist() == [5 + 2j, 5 - 1j]


def test_reading_a_copy_standing_for_a_view_sees_later_writes_into_its_source():
    a = ddpc.arange(12.0).reshape(3, 4)
    column, transposed, part, strided = a[:, 1], a.t(), a.t()[1:], a[::2, ::2]
    of_copy = strided.t()  # a copy of a copy
    a.mul_(2)
    a[0] += 100
    want = a.numpy().copy()
    np.testing.assert_array_equal(column.numpy(), want[:, 1])
    np.testing.assert_array_equal(transposed.numpy(), want.T)
    np.testing.assert_array_equal(part.numpy(), want.T[1:])
    np.testing.assert_array_equal(of_copy.numpy(), want[::2, ::2].T)
    of_copy.add_(1)  # written back through the chain, and seen by the others
    want[::2, ::2] += 1
    np.testing.assert_array_equal(a.numpy(), want)
    np.testing.assert_array_equal(transposed.numpy(), want.T)
    assert float(column.sum()) == want[:, 1].sum()


def test_a_transposed_parameter_follows_the_optimizers_step():
    p = ddpc.nn.Parameter(ddpc.ones(2, 3))
    pt = p.t()
    opt = ddpc.optim.SGD([p], lr=0.5)
    p.grad = ddpc.ones(2, 3)
    opt.step()
    assert pt.tolist() == [[0.5, 0.5]] * 3


@pytest.mark.parametrize("make", [lambda x: x.expand(2, 2, 3).reshape(-1), lambda x: x[:1].expand(2, 3).flatten(),
                                  lambda x: x.unsqueeze(1).expand(2, 2, 3).flatten(0, 1)])
def test_a_reshape_of_an_expand_that_pytorch_copies_is_a_tensor_of_its_own(make):
    x = ddpc.arange(6.0).reshape(2, 3)
    out = make(x)
    out.fill_(7)  # PyTorch's reshape copies here, so the write stays in it
    assert x.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]] and out.min().item() == 7
    with pytest.raises(RuntimeError, match="copy made by expand"):
        x.expand(2, 2, 3).reshape(2, 2, 3).fill_(7)  # a view of the repeated elements in PyTorch too


def test_backward_refuses_a_saved_copy_whose_source_changed_in_place_as_pytorch():
    w = ddpc.ones(2, 3, requires_grad=True)
    x = w * 1
    y = x.t()  # a copy standing for PyTorch's view, saved by the product
    z = (y * y).sum()
    x.add_(1)  # the view's elements change in PyTorch too: its backward refuses
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        z.backward()

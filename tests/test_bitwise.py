"""Bitwise and, or, xor and shifts on integer tensors, and integer powers,
against numpy (whose shifts define every count as PyTorch's do: a count
outside [0, bits) shifts every bit out); the GPU paths against the host's."""

import numpy as np
import pytest

import ddpc

INT_DTYPES = ("int32", "int64", "uint8")
RNG = np.random.default_rng(5)


def _ints(dtype, shape, low=None, high=None):
    info = np.iinfo(dtype)
    low = info.min if low is None else low
    high = info.max if high is None else high
    return RNG.integers(low, high, shape, dtype=np.int64, endpoint=True).astype(dtype)


# Shift counts across and beyond the widths, negative ones too (uint8 wraps them to large counts).
COUNTS = np.array([-65, -1, 0, 1, 3, 7, 8, 9, 15, 31, 32, 33, 63, 64, 65, 100])


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_tensor_tensor_ops_match_numpy(dtype):
    a, b = _ints(dtype, (4, 16)), _ints(dtype, (4, 16))
    ta, tb = ddpc.tensor(a), ddpc.tensor(b)
    for got, want in ((ta & tb, a & b), (ta | tb, a | b), (ta ^ tb, a ^ b), (ddpc.bitwise_and(ta, tb), a & b),
                      (ta.bitwise_or(tb), a | b), (ddpc.bitwise_xor(ta, tb), a ^ b)):
        assert got.dtype.name == dtype
        np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_shifts_define_every_count(dtype):
    x = _ints(dtype, (3, 1))
    x[0, 0] = np.iinfo(dtype).min if dtype != "uint8" else 255
    counts = COUNTS.astype(dtype)  # int32/int64 keep the negatives; uint8 wraps them to 191 and 255
    tx, tc = ddpc.tensor(x), ddpc.tensor(counts)
    xb, cb = np.broadcast_arrays(x, counts)
    np.testing.assert_array_equal((tx << tc).numpy(), np.left_shift(xb, cb))
    np.testing.assert_array_equal((tx >> tc).numpy(), np.right_shift(xb, cb))
    np.testing.assert_array_equal(ddpc.bitwise_left_shift(tc, tx & 7).numpy(), np.left_shift(cb, xb & 7))
    for c in COUNTS:
        c = int(c) % 256 if dtype == "uint8" else int(c)
        np.testing.assert_array_equal((tx << c).numpy(), np.left_shift(x, np.array(c, dtype)), err_msg=f"<< {c}")
        np.testing.assert_array_equal((tx >> c).numpy(), np.right_shift(x, np.array(c, dtype)), err_msg=f">> {c}")


def test_signed_right_shift_is_arithmetic_and_left_shift_drops_bits():
    t = ddpc.tensor([-8, -1, 7, 2 ** 30], dtype=ddpc.int32)
    assert (t >> 1).tolist() == [-4, -1, 3, 2 ** 29]
    assert (t >> 40).tolist() == [-1, -1, 0, 0] and (t >> -1).tolist() == [-1, -1, 0, 0]
    assert (t << 2).tolist() == [-32, -4, 28, 0] and (t << 32).tolist() == [0, 0, 0, 0]
    assert (ddpc.tensor([1], dtype=ddpc.int64) << 63).tolist() == [-2 ** 63]


def test_scalars_reflected_forms_and_broadcasting():
    a = np.arange(-6, 6, dtype=np.int64).reshape(3, 4)
    t = ddpc.tensor(a)
    for got, want in ((t & 5, a & 5), (5 & t, a & 5), (t | -2, a | -2), (3 ^ t, a ^ 3), (t << 2, a << 2),
                      (1 << (t & 7), 1 << (a & 7)), (100 >> (t & 3), 100 >> (a & 3)), (t >> 1, a >> 1),
                      (ddpc.bitwise_left_shift(3, t & 7), 3 << (a & 7)),
                      (ddpc.bitwise_right_shift(t, ddpc.tensor([0, 1, 2, 3])), a >> np.array([0, 1, 2, 3])),
                      (t[:, :1] << ddpc.tensor([0, 1, 2, 3]), a[:, :1] << np.array([0, 1, 2, 3])),
                      (ddpc.tensor([0, 1, 2, 3]) >> (t[:, 1:2] & 3), np.array([0, 1, 2, 3]) >> (a[:, 1:2] & 3)),
                      (ddpc.tensor([16, 16, 16, 16]) >> t[:, :4] % 5, 16 >> (a % 5))):
        assert got.dtype is ddpc.int64
        np.testing.assert_array_equal(got.numpy(), want)
    u = ddpc.tensor(np.array([1, 6, 255], dtype=np.uint8))
    assert (u & -1).tolist() == [1, 6, 255] and (u & 300).tolist() == [0, 4, 44]  # the number modulo 256
    assert (u & ddpc.tensor([3, 3, 3], dtype=ddpc.int32)).dtype is ddpc.int32  # promoted as in PyTorch
    with pytest.raises(OverflowError):
        ddpc.tensor([1], dtype=ddpc.int32) & 2 ** 40


def test_inplace_forms_write_into_the_tensor():
    t = ddpc.tensor([12, 10, 7])
    v = t._buf.version
    t &= 6
    assert t.tolist() == [4, 2, 6] and t._buf.version > v
    t |= ddpc.tensor([1, 0, 0])
    t ^= 2
    t <<= 1
    assert t.tolist() == [14, 0, 8]
    t >>= ddpc.tensor([1, 0, 2])
    assert t.tolist() == [7, 0, 2]
    assert t.bitwise_xor_(1).tolist() == [6, 1, 3] and t.bitwise_left_shift_(2).tolist() == [24, 4, 12]
    u = ddpc.tensor([3], dtype=ddpc.int32)
    u &= ddpc.tensor([1])  # the int64 result is cast back into the int32 tensor, as in PyTorch
    assert u.dtype is ddpc.int32 and u.tolist() == [1]


def test_floats_are_refused():
    f, i = ddpc.tensor([1.0, 2.0]), ddpc.tensor([1, 2])
    for bad in (lambda: f & i, lambda: i | f, lambda: i ^ 1.5, lambda: f << 1, lambda: 2 >> f, lambda: i.__iand__(0.5),
                lambda: ddpc.bitwise_left_shift(1.0, i), lambda: (i > 0) & f):
        with pytest.raises(NotImplementedError, match="integer"):
            bad()


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_integer_powers_wrap(dtype):
    base = _ints(dtype, (64,), 0 if dtype == "uint8" else -40, 40)
    exp = _ints(dtype, (64,), 0, 20)
    tb, te = ddpc.tensor(base), ddpc.tensor(exp)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal((tb ** te).numpy(), np.power(base, exp))
        np.testing.assert_array_equal((tb ** 3).numpy(), np.power(base, np.array(3, dtype)))
        np.testing.assert_array_equal((3 ** te).numpy(), np.power(np.array(3, dtype), exp))
    assert (ddpc.tensor([16], dtype=ddpc.uint8) ** 2).tolist() == [0]
    big = ddpc.tensor([3], dtype=ddpc.int64) ** 50  # beyond double's 53 bits: exact, wrapped modulo 2**64
    assert big.tolist() == [(3 ** 50 + 2 ** 63) % 2 ** 64 - 2 ** 63]


def _cases():
    a = _ints("int64", (5, 33), -300, 300)
    b = _ints("int64", (5, 33), -70, 70)
    for dt in INT_DTYPES:
        yield dt, a.astype(dt), b.astype(dt)


@pytest.mark.gpu
def test_bitwise_and_power_on_cuda_match_host():
    for dt, a, b in _cases():
        ta, tb = ddpc.tensor(a), ddpc.tensor(b)
        ga, gb = ta.cuda(), tb.cuda()
        pairs = [(ta & tb, ga & gb), (ta | 12, ga | 12), (ta ^ tb[:1], ga ^ gb[:1]), (ta << tb, ga << gb),
                 (ta >> tb, ga >> gb), (3 << (tb & 7), 3 << (gb & 7)), (tb[:, :1] >> ta, gb[:, :1] >> ga),
                 (ta ** (tb & 15), ga ** (gb & 15)), (ta ** 3, ga ** 3), (2 ** (tb & 31), 2 ** (gb & 31))]
        for want, got in pairs:
            assert got.is_cuda and got.dtype is want.dtype
            np.testing.assert_array_equal(got.cpu().numpy(), want.numpy(), err_msg=dt)
    assert (ddpc.tensor([16], dtype=ddpc.uint8, device="cuda") ** 2).cpu().tolist() == [0]  # wraps, not 255

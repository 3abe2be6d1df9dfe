"""Random numbers over the whole ranges PyTorch draws: truncated normal
initialisation, Beta and Dirichlet at tiny concentrations, 64-bit integer
ranges and random bools, the Generator API, and the arguments PyTorch
refuses. Statistical checks use fixed seeds and bounds many standard
errors wide."""

import math
import warnings

import numpy as np
import pytest

import ddpc
import ddpc.distributions as D
from ddpc.nn import init


def _pdf(z):
    return math.exp(-z * z / 2) / math.sqrt(2 * math.pi)


def _cdf(z):
    return 0.5 * math.erfc(-z / math.sqrt(2))


def _truncated_moments(a, b):
    """Mean and standard deviation of N(0, 1) restricted to [a, b]."""
    mass = _cdf(b) - _cdf(a)
    mean = (_pdf(a) - _pdf(b)) / mass
    var = 1 + (a * _pdf(a) - b * _pdf(b)) / mass - mean ** 2
    return mean, math.sqrt(var)


# ---- nn.init.trunc_normal_ ------------------------------------------------------------------------

@pytest.mark.parametrize("a, b", [(-0.01, 0.01), (3.0, 4.0), (-2.0, 2.0), (-6.0, -5.5)])
def test_trunc_normal_has_no_point_masses_and_the_truncated_moments(a, b):
    x = init.trunc_normal_(ddpc.empty(100_000), 0.0, 1.0, a, b, generator=ddpc.Generator(0)).numpy().astype(float)
    assert x.min() >= np.float32(a) and x.max() <= np.float32(b)
    assert np.mean((x == np.float32(a)) | (x == np.float32(b))) < 1e-3
    mean, std = _truncated_moments(a, b)
    assert abs(x.mean() - mean) < 6 * std / math.sqrt(x.size)
    assert abs(x.std() / std - 1) < 0.02


def test_trunc_normal_scales_and_draws_from_the_generator():
    w = init.trunc_normal_(ddpc.empty(50_000, dtype=ddpc.float64), mean=1.0, std=0.02, a=1.03, b=1.05,
                           generator=ddpc.Generator(1)).numpy()
    mean, std = _truncated_moments(1.5, 2.5)
    assert w.min() >= 1.03 and w.max() <= 1.05
    assert abs(w.mean() - (1.0 + 0.02 * mean)) < 6 * 0.02 * std / math.sqrt(w.size)
    again = init.trunc_normal_(ddpc.empty(50_000, dtype=ddpc.float64), mean=1.0, std=0.02, a=1.03, b=1.05,
                               generator=ddpc.Generator(1)).numpy()
    np.testing.assert_array_equal(w, again)


# ---- Beta and Dirichlet at small concentrations ---------------------------------------------------

def test_beta_of_tiny_concentrations_in_float32_has_the_exact_middle_mass():
    ddpc.manual_seed(0)
    x = D.Beta(ddpc.tensor(0.02), ddpc.tensor(0.02)).sample((100_000,))
    assert x.dtype is ddpc.float32
    x = x.numpy().astype(float)
    middle = 0.02690256911562472  # P(0.2 < x < 0.8), scipy.stats.beta(0.02, 0.02)
    assert abs(np.mean((x > 0.2) & (x < 0.8)) - middle) < 0.004
    assert np.mean(x == 0.5) < 1e-3  # two gammas clamped alike no longer tie
    assert x.min() > 0 and x.max() < 1  # as PyTorch's: inside (0, 1), so log_prob stays finite


def test_dirichlet_of_tiny_concentrations_in_float32():
    ddpc.manual_seed(1)
    x = D.Dirichlet(ddpc.tensor([0.01, 0.01, 0.01])).sample((100_000,)).numpy().astype(float)
    middle = 0.01806800384909657  # P(0.2 < x0 < 0.8), scipy.stats.beta(0.01, 0.02)
    assert abs(np.mean((x[:, 0] > 0.2) & (x[:, 0] < 0.8)) - middle) < 0.004
    assert np.mean(np.abs(x[:, 0] - 1 / 3) < 1e-6) < 1e-3
    assert np.abs(x.sum(-1) - 1).max() < 1e-5


def test_beta_rsample_gradient_at_tiny_concentrations():
    ddpc.manual_seed(2)
    a = ddpc.tensor(0.05, requires_grad=True)
    b = ddpc.tensor(0.05, requires_grad=True)
    D.Beta(a, b).rsample((40_000,)).mean().backward()
    # E[x] = a / (a + b): d/da = b / (a + b) ** 2 = 5, d/db = -5
    assert a.grad.dtype is ddpc.float32
    assert abs(a.grad.item() - 5) < 0.3 and abs(b.grad.item() + 5) < 0.3


# ---- 64-bit integer ranges -------------------------------------------------------------------------

def test_int64_random_without_arguments_covers_zero_to_max():
    ddpc.manual_seed(3)
    x = ddpc.empty(200_000, dtype=ddpc.int64).random_().numpy()
    assert x.min() >= 0
    counts = np.bincount(x >> 59, minlength=16)  # the top 4 of the 63 bits
    assert counts.size == 16 and np.abs(counts / x.size - 1 / 16).max() < 0.005
    assert np.abs(np.bincount(x & 15, minlength=16) / x.size - 1 / 16).max() < 0.005
    seed_idiom = ddpc.empty((), dtype=ddpc.int64).random_().item()  # torch's RandomSampler seeds itself so
    assert 0 <= seed_idiom < 2 ** 63


@pytest.mark.parametrize("low, high", [(0, 2 ** 62), (-2 ** 63, 2 ** 63 - 1), (0, 3 * 2 ** 61),
                                       (-2 ** 62, 2 ** 53 + 7)])
def test_randint_over_wide_ranges_is_uniform(low, high):
    x = ddpc.randint(low, high, (120_000,), generator=ddpc.Generator(4)).numpy()
    assert x.dtype == np.int64 and x.min() >= low and x.max() < high
    thirds = [low + (high - low) * k // 3 for k in range(4)]
    counts = [np.sum((x >= thirds[k]) & (x < thirds[k + 1])) for k in range(3)]
    assert np.abs(np.array(counts) / x.size - 1 / 3).max() < 0.01
    assert np.abs(np.bincount((x - low) % 8, minlength=8) / x.size - 1 / 8).max() < 0.01
    np.testing.assert_array_equal(x, ddpc.randint(low, high, (120_000,), generator=ddpc.Generator(4)).numpy())


def test_narrow_ranges_far_from_zero_are_exact():
    x = ddpc.empty(4000, dtype=ddpc.int64).random_(2 ** 62, 2 ** 62 + 5).numpy()
    assert sorted(set((x - 2 ** 62).tolist())) == [0, 1, 2, 3, 4]
    y = ddpc.randint(-2 ** 63, -2 ** 63 + 3, (4000,)).numpy()
    assert sorted(set((y + 2 ** 62 + 2 ** 62).tolist())) == [0, 1, 2]


def test_float_random_without_arguments_reaches_the_mantissa():
    ddpc.manual_seed(5)
    x = ddpc.empty(100_000, dtype=ddpc.float64).random_().numpy()
    assert x.min() >= 0 and x.max() <= 2.0 ** 53 and np.all(x == np.floor(x))
    assert abs(x.mean() / 2.0 ** 52 - 1) < 0.01
    assert ddpc.empty(100_000, dtype=ddpc.float16).random_().float().numpy().max() == 2048


def test_random_bools():
    ddpc.manual_seed(6)
    b = ddpc.randint(0, 2, (100_000,), dtype=ddpc.bool)
    assert b.dtype is ddpc.bool and abs(b.float().mean().item() - 0.5) < 0.01
    r = ddpc.empty(1000, dtype=ddpc.bool).random_()
    assert set(r.tolist()) == {False, True}
    assert not ddpc.empty(100, dtype=ddpc.bool).random_(1).any().item()
    assert ddpc.randint(1, 2, (10,), dtype=ddpc.bool).all().item()


def test_randint_keyword_forms():
    assert set(ddpc.randint(high=3, size=(1000,)).tolist()) == {0, 1, 2}
    assert set(ddpc.randint(3, size=(1000,)).tolist()) == {0, 1, 2}
    assert set(ddpc.randint(low=1, high=3, size=(1000,)).tolist()) == {1, 2}


# ---- Generator -------------------------------------------------------------------------------------

def test_generator_takes_a_device_and_reseeds_itself():
    for g in (ddpc.Generator(), ddpc.Generator("cpu"), ddpc.Generator(device="cpu")):
        assert g.device == ddpc.device("cpu") and g.initial_seed() == 67280421310721
    assert ddpc.Generator(device="cuda").device.type == "cuda"  # one stream for every device
    g = ddpc.Generator()
    assert g.manual_seed(7) is g
    s = g.seed()
    assert isinstance(s, int) and s == g.initial_seed() and 0 <= s < 2 ** 64
    first = ddpc.rand(4, generator=g)
    assert ddpc.equal(first, ddpc.rand(4, generator=ddpc.Generator().manual_seed(s)))
    assert ddpc.seed() == ddpc.initial_seed()


def test_generator_clone_state_draws_on_by_itself():
    g = ddpc.Generator().manual_seed(8)
    ddpc.rand(5, generator=g)
    clone = g.clone_state()
    assert clone is not g and clone.device == g.device
    assert ddpc.equal(ddpc.rand(6, generator=g), ddpc.rand(6, generator=clone))
    ddpc.rand(3, generator=clone)
    assert not ddpc.equal(ddpc.rand(6, generator=g), ddpc.rand(6, generator=clone))


def test_manual_seed_takes_what_pytorch_takes():
    assert ddpc.Generator().manual_seed(-1).initial_seed() == 2 ** 64 - 1
    assert ddpc.Generator().manual_seed(2 ** 64 - 1).initial_seed() == 2 ** 64 - 1
    for bad in (2 ** 64, -2 ** 63 - 1):
        with pytest.raises(ValueError):
            ddpc.Generator().manual_seed(bad)
    state = ddpc.get_rng_state()
    try:
        with pytest.raises(ValueError):
            ddpc.manual_seed(2 ** 64)
        assert ddpc.manual_seed(9) is ddpc.default_generator and ddpc.initial_seed() == 9
    finally:
        ddpc.set_rng_state(state)


# ---- arguments PyTorch refuses ---------------------------------------------------------------------

_NAN = float("nan")

_REFUSED = {
    "uint8 to - 1 over 255": lambda: ddpc.empty(3, dtype=ddpc.uint8).random_(0, 300),
    "uint8 from below 0": lambda: ddpc.empty(3, dtype=ddpc.uint8).random_(-5, 5),
    "int32 to - 1 over 2**31 - 1": lambda: ddpc.empty(3, dtype=ddpc.int32).random_(0, 2 ** 40),
    "float16 to - 1 over its max": lambda: ddpc.empty(3, dtype=ddpc.float16).random_(0, 100_000),
    "bool to - 1 over 1": lambda: ddpc.randint(0, 3, (3,), dtype=ddpc.bool),
    "int64 to - 1 over 2**63 - 1": lambda: ddpc.randint(0, 2 ** 63 + 1, (3,)),
    "empty range": lambda: ddpc.randint(5, 5, (3,)),
    "randperm uint8": lambda: ddpc.randperm(300, dtype=ddpc.uint8),
    "randperm float16": lambda: ddpc.randperm(3000, dtype=ddpc.float16),
    "randperm float32": lambda: ddpc.randperm(2 ** 24 + 2, dtype=ddpc.float32),
    "uniform from > to": lambda: ddpc.empty(3).uniform_(2, 1),
    "uniform to nan": lambda: ddpc.empty(3).uniform_(0, _NAN),
    "uniform to inf": lambda: ddpc.empty(3).uniform_(0, math.inf),
    "uniform to over float32's max": lambda: ddpc.empty(3).uniform_(0, 1e39),
    "uniform width over float64's max": lambda: ddpc.empty(3, dtype=ddpc.float64).uniform_(-1e308, 1e308),
    "normal_ std nan": lambda: ddpc.empty(3).normal_(0, _NAN),
    "normal std tensor with nan": lambda: ddpc.normal(ddpc.zeros(2), ddpc.tensor([1.0, _NAN])),
    "normal std number nan": lambda: ddpc.normal(ddpc.zeros(2), _NAN),
    "exponential_ nan": lambda: ddpc.empty(3).exponential_(_NAN),
    "cauchy_ nan": lambda: ddpc.empty(3).cauchy_(0, _NAN),
    "log_normal_ nan": lambda: ddpc.empty(3).log_normal_(0, _NAN),
}


@pytest.mark.parametrize("case", sorted(_REFUSED))
def test_out_of_range_arguments_raise_as_pytorch(case):
    with pytest.raises(RuntimeError):
        _REFUSED[case]()


def test_edges_pytorch_accepts():
    assert ddpc.empty(3, dtype=ddpc.uint8).random_(0, 256).numpy().max() <= 255
    assert ddpc.randperm(256, dtype=ddpc.uint8).numpy().max() == 255
    assert ddpc.randperm(2049, dtype=ddpc.float16).float().numpy().max() == 2048
    assert ddpc.empty(3).uniform_(1, 1).tolist() == [1.0, 1.0, 1.0]
    assert math.isnan(ddpc.empty(1).normal_(_NAN, 1.0).item())
    with pytest.warns(UserWarning, match="rounded"):  # PyTorch warns too
        ddpc.empty(3).random_(0, 2 ** 30)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ddpc.empty(3).random_(0, 2 ** 24 + 1)
    with pytest.raises(NotImplementedError):
        ddpc.randperm(3, dtype=ddpc.bool)
    with pytest.raises(TypeError):
        ddpc.randint(0, 2.5, (3,))


# ---- result shapes and dtypes ----------------------------------------------------------------------

def test_normal_takes_the_dtype_of_mean_and_binomial_broadcasts():
    assert ddpc.normal(ddpc.zeros(2), ddpc.ones(2, dtype=ddpc.float64)).dtype is ddpc.float32
    assert ddpc.normal(0.0, ddpc.ones(2, dtype=ddpc.float64)).dtype is ddpc.float64
    assert ddpc.normal(ddpc.zeros(2), ddpc.ones(3, 1, dtype=ddpc.float64)).shape == (3, 2)
    drawn = ddpc.binomial(ddpc.tensor([10.0, 20.0]), ddpc.tensor([[0.0], [1.0]]))
    assert drawn.shape == (2, 2) and drawn.tolist() == [[0.0, 0.0], [10.0, 20.0]]


@pytest.mark.parametrize("dtype,low,high", [("bfloat16", 1, 2), ("bfloat16", 100, 101), ("float16", 1, 2),
                                            ("float32", 1000, 1001), ("float64", -1, 1)])
def test_uniform_never_gives_its_upper_bound(dtype, low, high):
    """A draw that rounds up to ``to`` in the tensor's dtype is the dtype's largest value below it instead."""
    x = ddpc.empty(200_000, dtype=getattr(ddpc, dtype)).uniform_(low, high)
    assert (x >= high).sum().item() == 0 and (x < low).sum().item() == 0
    assert abs(x.double().mean().item() - (low + high) / 2) < 0.2


def test_random_overloads_as_pytorch():
    ddpc.manual_seed(7)
    x = ddpc.empty(2000, dtype=ddpc.uint8).random_(250, None).numpy()  # from 250 to the dtype's largest
    assert sorted(set(x.tolist())) == [250, 251, 252, 253, 254, 255]
    y = ddpc.empty(2000, dtype=ddpc.int64).random_(2 ** 62, None).numpy()
    assert y.min() >= 2 ** 62 and y.max() > 2 ** 62 + 2 ** 61  # up to 2 ** 63 - 1
    h = ddpc.empty(2000, dtype=ddpc.float16).random_(2040, None).float().numpy()
    assert sorted(set(h.tolist())) == list(range(2040, 2049))  # the mantissa's last exact integer, 2048, included
    assert set(ddpc.empty(500).random_(**{"from": 3, "to": 5}).tolist()) == {3.0, 4.0}
    assert set(ddpc.empty(500).random_(to=3).tolist()) == {0.0, 1.0, 2.0}
    with pytest.raises(Exception, match="from"):
        ddpc.empty(5).random_(0)  # [0, 0): empty
    with pytest.raises(TypeError):
        ddpc.empty(5).random_(1, 2, bad=3)

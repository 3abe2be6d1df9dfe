"""Random numbers against PyTorch: the arguments both refuse (and with which
exception), the default ranges of random_, the Generator API, truncated
normal moments, and the dtypes and shapes of random results."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ddpc  # noqa: E402

_NAN = float("nan")

_REFUSED = {
    "uint8 random_(0, 300)": lambda m: m.empty(3, dtype=m.uint8).random_(0, 300),
    "uint8 random_(-5, 5)": lambda m: m.empty(3, dtype=m.uint8).random_(-5, 5),
    "int32 random_(0, 2**40)": lambda m: m.empty(3, dtype=m.int32).random_(0, 2 ** 40),
    "float16 random_(0, 100000)": lambda m: m.empty(3, dtype=m.float16).random_(0, 100_000),
    "bool random_(0, 3)": lambda m: m.empty(3, dtype=m.bool).random_(0, 3),
    "bool random_(-1, 1)": lambda m: m.empty(3, dtype=m.bool).random_(-1, 1),
    "randint(5, 3)": lambda m: m.randint(5, 3, (3,)),
    "randint bool (0, 3)": lambda m: m.randint(0, 3, (3,), dtype=m.bool),
    "randperm(300, uint8)": lambda m: m.randperm(300, dtype=m.uint8),
    "randperm(3000, float16)": lambda m: m.randperm(3000, dtype=m.float16),
    "uniform_(2, 1)": lambda m: m.empty(3).uniform_(2, 1),
    "uniform_(0, nan)": lambda m: m.empty(3).uniform_(0, _NAN),
    "uniform_(nan, 1)": lambda m: m.empty(3).uniform_(_NAN, 1),
    "uniform_(-inf, 0)": lambda m: m.empty(3).uniform_(-math.inf, 0),
    "uniform_(0, 1e39) float32": lambda m: m.empty(3).uniform_(0, 1e39),
    "normal_(0, nan)": lambda m: m.empty(3).normal_(0, _NAN),
    "normal(mean, std=[1, nan])": lambda m: m.normal(m.zeros(2), m.tensor([1.0, _NAN])),
    "normal(mean, -1.0)": lambda m: m.normal(m.zeros(2), -1.0),
    "normal(0, nan, size)": lambda m: m.normal(0.0, _NAN, (3,)),
    "exponential_(nan)": lambda m: m.empty(3).exponential_(_NAN),
    "cauchy_(0, nan)": lambda m: m.empty(3).cauchy_(0, _NAN),
    "log_normal_(0, nan)": lambda m: m.empty(3).log_normal_(0, _NAN),
}


@pytest.mark.parametrize("case", sorted(_REFUSED))
def test_both_refuse_with_a_runtime_error(case):
    for m in (torch, ddpc):
        with pytest.raises(RuntimeError):
            _REFUSED[case](m)


def test_both_refuse_randperm_of_bools_and_seeds_out_of_range():
    for m in (torch, ddpc):
        with pytest.raises(NotImplementedError):
            m.randperm(3, dtype=m.bool)
        for bad in (2 ** 64, -2 ** 63 - 1):
            with pytest.raises(ValueError):
                m.Generator().manual_seed(bad)


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32", "float64", "int32", "int64", "uint8", "bool"])
def test_random_without_arguments_has_pytorchs_range(name):
    t = torch.empty(50_000, dtype=getattr(torch, name)).random_().double().numpy()
    d = ddpc.empty(50_000, dtype=getattr(ddpc, name)).random_().double().numpy()
    top = {"float16": 2 ** 11, "bfloat16": 2 ** 8, "float32": 2 ** 24, "float64": 2 ** 53, "int32": 2 ** 31 - 1,
           "int64": 2 ** 63 - 1, "uint8": 255, "bool": 1}[name]
    for x in (t, d):
        assert x.min() >= 0 and x.max() <= top and x.max() > 0.99 * top and x.min() < 0.01 * top + 1


def test_random_bools_as_pytorch():
    for m in (torch, ddpc):
        assert m.randint(0, 2, (5,), dtype=m.bool).dtype == m.bool
        assert not m.empty(100, dtype=m.bool).random_(1).any().item()
        assert m.randint(1, 2, (10,), dtype=m.bool).all().item()
        assert abs(m.randint(0, 2, (50_000,), dtype=m.bool).float().mean().item() - 0.5) < 0.02


def test_wide_int64_ranges_as_pytorch():
    for m in (torch, ddpc):
        x = m.randint(-2 ** 63, 2 ** 63 - 1, (20_000,)).numpy()
        assert x.dtype == np.int64 and abs(np.mean(x < 0) - 0.5) < 0.02
        y = m.empty(20_000, dtype=m.int64).random_(0, 2 ** 62).numpy()
        assert y.min() >= 0 and y.max() < 2 ** 62 and abs(np.mean(y < 2 ** 61) - 0.5) < 0.02


def test_generator_api_as_pytorch():
    for m in (torch, ddpc):
        g = m.Generator(device="cpu")
        assert str(m.Generator("cpu").device) == "cpu" and str(g.device) == "cpu"
        assert g.initial_seed() == 67280421310721
        assert g.manual_seed(5) is g
        s = g.seed()
        assert s == g.initial_seed() and 0 <= s < 2 ** 64
        assert m.Generator().manual_seed(-1).initial_seed() == 2 ** 64 - 1
        clone = g.clone_state()
        assert isinstance(clone, m.Generator) and clone is not g
        assert m.equal(m.rand(4, generator=g), m.rand(4, generator=clone))


@pytest.mark.filterwarnings("ignore:mean is more than 2 std")  # PyTorch's, for (3, 4)
@pytest.mark.parametrize("a, b", [(-0.01, 0.01), (3.0, 4.0), (-2.0, 2.0)])
def test_trunc_normal_moments_as_pytorch(a, b):
    torch.manual_seed(0)
    t = torch.nn.init.trunc_normal_(torch.empty(20_000), 0.0, 1.0, a, b).double().numpy()
    d = ddpc.nn.init.trunc_normal_(ddpc.empty(20_000), 0.0, 1.0, a, b, generator=ddpc.Generator(0)).numpy()
    spread = t.std()
    assert abs(t.mean() - d.mean()) < 8 * spread / math.sqrt(t.size)
    assert abs(d.std() / spread - 1) < 0.05
    at_bounds = [np.mean((x == np.float32(a)) | (x == np.float32(b))) for x in (t, d)]
    assert at_bounds[1] <= at_bounds[0] + 1e-3


def test_beta_at_tiny_concentrations_as_pytorch():
    torch.manual_seed(0)
    ddpc.manual_seed(0)
    t = torch.distributions.Beta(torch.tensor(0.02), torch.tensor(0.02)).sample((100_000,)).double().numpy()
    d = ddpc.distributions.Beta(ddpc.tensor(0.02), ddpc.tensor(0.02)).sample((100_000,)).double().numpy()
    assert abs(np.mean((t > 0.2) & (t < 0.8)) - np.mean((d > 0.2) & (d < 0.8))) < 0.005
    for x in (t, d):
        assert x.min() > 0 and x.max() < 1


@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")  # PyTorch's binomial
def test_random_result_dtypes_and_shapes_as_pytorch():
    cases = [
        lambda m: m.normal(m.zeros(2), m.ones(2, dtype=m.float64)),
        lambda m: m.normal(m.zeros(2, dtype=m.float64), m.ones(2)),
        lambda m: m.normal(0.0, m.ones(3, 1, dtype=m.float64)),
        lambda m: m.normal(m.zeros(2), m.ones(3, 1, dtype=m.float64)),
        lambda m: m.binomial(m.tensor([[10.0], [20.0]]), m.tensor([0.5, 0.1])),
        lambda m: m.randint(high=3, size=(4,)),
        lambda m: m.randint(3, size=(4,)),
        lambda m: m.randint(low=1, high=3, size=(2, 2), dtype=m.int32),
        lambda m: m.randperm(5, dtype=m.float16),
    ]
    for case in cases:
        t, d = case(torch), case(ddpc)
        assert tuple(t.shape) == tuple(d.shape) and str(t.dtype).split(".")[-1] == str(d.dtype).split(".")[-1]

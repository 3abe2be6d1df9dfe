"""PyTorch's helpers beyond tensors that ported scripts call: the remaining
nn.init initialisers (PyTorch's fans and gains), nn.utils' parameter vectors
and split gradient clipping, data's StackDataset, ChainDataset,
get_worker_info and default_convert, and distributed's new_subgroups,
get_node_local_rank and is_torchelastic_launched (multi-rank new_subgroups
runs in comm_worker.py)."""

import math
import sys
import socket

import numpy as np
import pytest

import ddpc
from ddpc import data
from ddpc import distributed as dist
from ddpc import nn
from ddpc.nn import init


# ---- nn.init ------------------------------------------------------------------------------

def test_normal_initialisers_use_pytorchs_fans_and_gains():
    ddpc.manual_seed(0)
    w = ddpc.empty(400, 300, 3)  # fan_in 900, fan_out 1200
    init.xavier_normal_(w, gain=2.0)
    np.testing.assert_allclose(w.numpy().std(), 2.0 * math.sqrt(2.0 / 2100), rtol=0.01)
    init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")
    np.testing.assert_allclose(w.numpy().std(), math.sqrt(2.0) / math.sqrt(1200), rtol=0.01)
    init.kaiming_normal_(w, a=0.2)
    np.testing.assert_allclose(w.numpy().std(), math.sqrt(2.0 / 1.04) / 30, rtol=0.01)
    assert init.calculate_gain("selu") == 0.75 and init.calculate_gain("conv2d") == 1.0
    with pytest.raises(ValueError, match="mode"):
        init.kaiming_normal_(w, mode="fan_avg")
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init.xavier_normal_(ddpc.empty(3))


def test_trunc_normal_stays_in_bounds():
    ddpc.manual_seed(1)
    w = init.trunc_normal_(ddpc.empty(100_000), mean=1.0, std=2.0, a=0.0, b=3.0).numpy()
    assert w.min() >= 0.0 and w.max() <= 3.0
    pdf = lambda z: math.exp(-z * z / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    cdf = lambda z: (1 + math.erf(z / math.sqrt(2))) / 2  # noqa: E731
    lo, hi = (0.0 - 1.0) / 2.0, (3.0 - 1.0) / 2.0
    assert abs(w.mean() - (1.0 + 2.0 * (pdf(lo) - pdf(hi)) / (cdf(hi) - cdf(lo)))) < 0.02
    with pytest.raises(ValueError, match="a < b"):
        init.trunc_normal_(ddpc.empty(3), a=1, b=1)


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 2, 3)])
def test_orthogonal_gives_orthonormal_rows_or_columns(shape):
    w = init.orthogonal_(ddpc.empty(*shape), gain=2.0)
    m = w.numpy().reshape(shape[0], -1) / 2.0
    small = min(m.shape)
    gram = m.T @ m if m.shape[0] >= m.shape[1] else m @ m.T
    np.testing.assert_allclose(gram, np.eye(small), atol=1e-5)
    with pytest.raises(ValueError, match="2 or more"):
        init.orthogonal_(ddpc.empty(3))


def test_eye_dirac_and_sparse():
    np.testing.assert_array_equal(init.eye_(ddpc.empty(2, 3)).numpy(), np.eye(2, 3))
    w = init.dirac_(ddpc.empty(4, 2, 3, 3), groups=2)
    want = np.zeros((4, 2, 3, 3))
    for g in range(2):
        for d in range(2):
            want[g * 2 + d, d, 1, 1] = 1
    np.testing.assert_array_equal(w.numpy(), want)
    x = ddpc.tensor(np.random.default_rng(0).standard_normal((1, 3, 5)), dtype=ddpc.float32)
    np.testing.assert_allclose(nn.functional.conv1d(x, init.dirac_(ddpc.empty(3, 3, 3)), padding=1).numpy(),
                               x.numpy(), atol=1e-6)
    ddpc.manual_seed(2)
    s = init.sparse_(ddpc.empty(10, 6), sparsity=0.3, std=1.0).numpy()
    assert ((s == 0).sum(0) == 3).all()
    for fn, bad in ((init.eye_, ddpc.empty(2, 2, 2)), (init.dirac_, ddpc.empty(2, 2)), (init.sparse_, ddpc.empty(2))):
        with pytest.raises(ValueError):
            fn(bad, 0.1) if fn is init.sparse_ else fn(bad)


def test_initialisers_take_a_generator():
    a = init.xavier_normal_(ddpc.empty(3, 4), generator=ddpc.Generator(9)).numpy()
    b = init.xavier_normal_(ddpc.empty(3, 4), generator=ddpc.Generator(9)).numpy()
    np.testing.assert_array_equal(a, b)


# ---- nn.utils -----------------------------------------------------------------------------

def test_parameters_to_vector_and_back():
    m = nn.Linear(3, 2)
    vec = nn.utils.parameters_to_vector(m.parameters())
    np.testing.assert_array_equal(vec.numpy(), np.concatenate([m.weight.numpy().ravel(), m.bias.numpy()]))
    vec.sum().backward()
    np.testing.assert_array_equal(m.weight.grad.numpy(), np.ones((2, 3)))
    nn.utils.vector_to_parameters(ddpc.arange(8.0), m.parameters())
    np.testing.assert_array_equal(m.weight.numpy(), np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(m.bias.numpy(), [6.0, 7.0])
    assert m.weight.requires_grad
    with pytest.raises(ValueError, match="elements"):
        nn.utils.vector_to_parameters(ddpc.zeros(5), m.parameters())
    with pytest.raises(TypeError, match="Tensor"):
        nn.utils.vector_to_parameters(np.zeros(8), m.parameters())


def test_get_total_norm_and_clip_grads_with_norm():
    grads = [ddpc.tensor([3.0, 0.0]), ddpc.tensor([[4.0]])]
    assert nn.utils.get_total_norm(grads).item() == pytest.approx(5.0)
    assert nn.utils.get_total_norm(grads, 1).item() == pytest.approx(7.0)
    assert nn.utils.get_total_norm(grads, math.inf).item() == pytest.approx(4.0)
    with pytest.raises(RuntimeError, match="not finite"):
        nn.utils.get_total_norm([ddpc.tensor([math.inf])], error_if_nonfinite=True)
    p = ddpc.tensor([1.0, 1.0], requires_grad=True)
    p.grad = ddpc.tensor([3.0, 4.0])
    total = nn.utils.get_total_norm([p.grad])
    nn.utils.clip_grads_with_norm_([p], 1.0, total)
    np.testing.assert_allclose(p.grad.numpy(), [0.6, 0.8], rtol=1e-5)
    nn.utils.clip_grads_with_norm_(p, 10.0, total)  # never scaled up
    np.testing.assert_allclose(p.grad.numpy(), [0.6, 0.8], rtol=1e-5)


def test_total_norm_of_16_bit_gradients_is_taken_in_float32():
    # 3000**2 overflows float16: squares taken in the gradients' own dtype would give inf.
    grads = [ddpc.full((4,), 3000.0, dtype=ddpc.float16), ddpc.full((2, 2), -4000.0, dtype=ddpc.bfloat16)]
    total = nn.utils.get_total_norm(grads)
    assert total.dtype is ddpc.float32
    assert total.item() == pytest.approx(math.sqrt(4 * 3000.0 ** 2 + 4 * 4000.0 ** 2), rel=1e-3)


@pytest.mark.gpu
def test_clipping_on_a_gpu_keeps_the_norm_and_factor_on_the_device():
    if not ddpc.cuda.is_available():
        pytest.skip("no CUDA device")
    host = [ddpc.tensor(np.arange(6.0).reshape(2, 3)), ddpc.tensor([-7.0, 2.0])]
    dev = [g.cuda() for g in host]
    total = nn.utils.get_total_norm(dev)
    assert total.device == dev[0].device
    assert total.item() == pytest.approx(nn.utils.get_total_norm(host).item(), rel=1e-6)
    ps = [ddpc.zeros(g.shape, device="cuda", requires_grad=True) for g in dev]
    for p, g in zip(ps, dev):
        p.grad = g
    nn.utils.clip_grads_with_norm_(ps, 2.0, total)
    scale = 2.0 / (total.item() + 1e-6)
    for p, g in zip(ps, host):
        np.testing.assert_allclose(p.grad.cpu().numpy(), g.numpy() * scale, rtol=1e-6)


# ---- data -----------------------------------------------------------------------------------

class _Stream(data.IterableDataset):
    def __init__(self, items):
        self.items = items

    def __iter__(self):
        return iter(self.items)

    def __len__(self):
        return len(self.items)


def test_stack_and_chain_datasets():
    xs, ys = data.TensorDataset(ddpc.arange(4.0)), [10, 11, 12, 13]
    s = data.StackDataset(xs, ys)
    assert len(s) == 4 and s[1][0][0].item() == 1.0 and s[1][1] == 11
    d = data.StackDataset(x=xs, y=ys)
    assert set(d[2]) == {"x", "y"} and d[2]["y"] == 12
    batch = next(iter(data.DataLoader(d, batch_size=2)))
    assert batch["y"].tolist() == [10, 11]
    with pytest.raises(ValueError, match="length"):
        data.StackDataset(xs, [1])
    with pytest.raises(ValueError, match="not both"):
        data.StackDataset(xs, y=ys)
    c = data.ChainDataset([_Stream([1, 2]), _Stream([3])])
    assert list(c) == [1, 2, 3] and len(c) == 3
    assert [b.tolist() for b in data.DataLoader(c, batch_size=2)] == [[1, 2], [3]]
    with pytest.raises(TypeError, match="IterableDataset"):
        data.ChainDataset([xs])


def test_get_worker_info_and_default_convert():
    assert data.get_worker_info() is None
    out = data.default_convert({"a": np.arange(3), "b": [np.float32(2.0), "s"], "c": (1, np.ones((2, 2)))})
    assert isinstance(out["a"], ddpc.Tensor) and out["a"].tolist() == [0, 1, 2]
    assert isinstance(out["b"][0], ddpc.Tensor) and out["b"][1] == "s"
    assert out["c"][0] == 1 and isinstance(out["c"][1], ddpc.Tensor) and isinstance(out["c"], list)  # as PyTorch
    arrays = list(data.DataLoader([np.arange(2), np.arange(2) + 5], batch_size=None))
    assert [a.tolist() for a in arrays] == [[0, 1], [5, 6]]


# ---- distributed -----------------------------------------------------------------------------

def test_is_torchelastic_launched_reads_the_run_id(monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    assert not dist.is_torchelastic_launched()
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    assert dist.is_torchelastic_launched()


def test_get_node_local_rank_reads_local_rank_or_the_fallback(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert dist.get_node_local_rank(fallback_rank=1) == 3
    monkeypatch.delenv("LOCAL_RANK")
    assert dist.get_node_local_rank(fallback_rank=1) == 1
    with pytest.raises(RuntimeError, match="LOCAL_RANK"):
        dist.get_node_local_rank()


def test_new_subgroups_on_a_single_rank(monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    ddpc.init_process_group("cpu", rank=0, world_size=1)
    try:
        cur, subs = dist.new_subgroups()
        assert subs == [cur] and dist.get_world_size(cur) == 1
        t = ddpc.tensor([2.0])
        dist.all_reduce(t, group=cur)
        assert t.item() == 2.0
        with pytest.raises(ValueError, match="divide"):
            dist.new_subgroups(2)
        with pytest.raises(ValueError, match="default group"):
            dist.new_subgroups(1, group=cur)
    finally:
        dist.destroy_process_group()


# ---- PyTorch's module paths that DDP scripts import --------------------------------------

def _mp_worker(rank, world, port):
    import os
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)  # as the tutorials set them
    dist.init_process_group("gloo", rank=rank, world_size=world)
    t = ddpc.tensor([rank + 1.0])
    dist.all_reduce(t)
    dist.destroy_process_group()
    return t.item()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_multiprocessing_spawns_like_torch_multiprocessing():
    import multiprocessing

    import ddpc.multiprocessing as mp
    assert mp.spawn(_mp_worker, args=(2, _free_port()), nprocs=2, join=True) == [3.0, 3.0]
    assert mp.start_processes(_mp_worker, args=(1, _free_port()), nprocs=1, start_method="spawn") == [1.0]
    assert mp.Queue is multiprocessing.Queue and mp.get_context is multiprocessing.get_context
    assert mp.ProcessRaisedException is ddpc.spawn.__globals__["ProcessRaisedException"]


def test_cuda_amp_takes_the_older_arguments():
    from ddpc.cuda.amp import GradScaler, autocast, custom_bwd, custom_fwd
    region = autocast(enabled=False)
    assert (region.device_type, region.fast_dtype, region.enabled) == ("cuda", ddpc.float16, False)
    assert autocast(dtype=ddpc.bfloat16).fast_dtype is ddpc.bfloat16
    scaler = GradScaler(init_scale=8.0, growth_interval=3, enabled=False)
    assert isinstance(scaler, ddpc.amp.GradScaler) and not scaler.is_enabled()

    class Double(ddpc.autograd.Function):
        @staticmethod
        @custom_fwd
        def forward(ctx, x):
            return x * 2

        @staticmethod
        @custom_bwd
        def backward(ctx, g):
            return g * 2

    x = ddpc.ones(3, requires_grad=True)
    Double.apply(x).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]


def test_consume_prefix_strips_ddps_module_prefix():
    from ddpc.nn.modules.utils import _pair, _quadruple, _single, consume_prefix_in_state_dict_if_present
    model = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
    state = {f"module.{k}": v for k, v in model.state_dict().items()}
    state["extra"] = ddpc.zeros(1)
    consume_prefix_in_state_dict_if_present(state, "module.")
    assert list(state) == ["extra"] + list(model.state_dict())  # stripped keys move behind the others
    del state["extra"]
    fresh = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
    fresh.load_state_dict(state)
    assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(fresh.parameters(), model.parameters()))
    assert _single(3) == (3,) and _pair(3) == (3, 3) and _pair([1, 2]) == (1, 2) and _quadruple(0) == (0,) * 4


def test_consume_prefix_also_renames_the_metadata():
    from ddpc.nn.modules.utils import consume_prefix_in_state_dict_if_present
    wrapper = nn.Module()
    wrapper.module = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    state = wrapper.state_dict()
    consume_prefix_in_state_dict_if_present(state, "module.")
    assert list(state) == list(wrapper.module.state_dict())
    assert list(state._metadata) == ["", "0", "1"]  # "module" took the wrapper's "" over, as in PyTorch
    assert state._metadata["1"] == {"version": 2}


def test_default_backend_for_a_device_and_backend_availability():
    assert dist.get_default_backend_for_device("cpu") == "cpu"
    assert dist.get_default_backend_for_device("cuda:1") == "nccl"
    assert dist.get_default_backend_for_device(ddpc.device("cuda")) == "nccl"
    with pytest.raises(ValueError, match="invalid device"):
        dist.get_default_backend_for_device("tpu")
    assert dist.is_backend_available("gloo") and dist.is_backend_available("cpu")
    assert dist.is_backend_available("nccl") == dist.is_nccl_available()
    assert not dist.is_backend_available("mpi")


def test_record_writes_torchelastics_error_file_and_raises_on(monkeypatch, tmp_path):
    import json

    from ddpc.distributed.elastic.multiprocessing.errors import record
    path = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))

    @record
    def fails():
        raise KeyError("missing shard")

    with pytest.raises(KeyError, match="missing shard"):
        fails()
    info = json.loads(path.read_text())["message"]
    assert info["message"] == "KeyError: 'missing shard'"
    assert "in fails" in info["extraInfo"]["py_callstack"] and int(info["extraInfo"]["timestamp"]) > 0

    path.unlink()
    with pytest.raises(SystemExit):
        record(lambda: sys.exit(3))()
    assert not path.exists()  # sys.exit is not an error to record

    seen = []

    class Handler:
        def record_exception(self, e):
            seen.append(e)

    with pytest.raises(ValueError):
        record(error_handler=Handler())(lambda: int("x"))()
    assert isinstance(seen[0], ValueError) and not path.exists()
    assert record()(lambda: 5)() == 5


def test_sharing_strategies_are_taken_by_name():
    import ddpc.multiprocessing as mp
    assert mp.get_all_sharing_strategies() == {"file_descriptor", "file_system"}
    before = mp.get_sharing_strategy()
    mp.set_sharing_strategy("file_system")
    assert mp.get_sharing_strategy() == "file_system"
    mp.set_sharing_strategy(before)
    with pytest.raises(ValueError, match="unknown sharing strategy"):
        mp.set_sharing_strategy("shm")


def test_more_pytorch_paths():
    import ddpc.backends.cudnn as cudnn
    from ddpc.distributed.optim import ZeroRedundancyOptimizer
    assert ZeroRedundancyOptimizer is ddpc.optim.ZeroRedundancyOptimizer
    assert cudnn is ddpc.backends.cudnn and cudnn.version() is None and not ddpc.backends.mps.is_available()
    assert ddpc.utils.data.distributed.DistributedSampler is data.DistributedSampler  # as an attribute path
    assert ddpc.utils.data.sampler.BatchSampler is data.BatchSampler


def test_zero_dim_tensors_format_as_their_number():
    assert f"{ddpc.tensor(0.5):.4f}" == "0.5000" and f"{ddpc.tensor(7):>3d}" == "  7"
    assert "{:6.2f}".format(ddpc.tensor(3.14159)) == "  3.14"
    assert f"{ddpc.tensor([1.0, 2.0])}" == str(ddpc.tensor([1.0, 2.0]))
    with pytest.raises(TypeError):
        f"{ddpc.tensor([1.0]):.2f}"  # as in PyTorch: a format spec needs a single number


def test_adding_data_sets_concatenates_or_chains_them():
    a, b = data.TensorDataset(ddpc.arange(3.0)), data.TensorDataset(ddpc.arange(3.0, 5.0))
    both = a + b
    assert isinstance(both, data.ConcatDataset) and [both[i][0].item() for i in range(len(both))] == [0, 1, 2, 3, 4]

    class Stream(data.IterableDataset):
        def __init__(self, items):
            self.items = items

        def __iter__(self):
            return iter(self.items)

    assert list(Stream([1, 2]) + Stream([3])) == [1, 2, 3]


def test_accelerator_and_the_cpu_amp_path():
    from ddpc.cpu.amp import autocast
    gpu = ddpc.cuda.is_available()
    assert ddpc.accelerator.is_available() == gpu and ddpc.accelerator.device_count() == ddpc.cuda.device_count()
    assert ddpc.accelerator.current_accelerator() == (ddpc.device("cuda") if gpu else None)
    # The DDP tutorial's choice of device and backend:
    acc = ddpc.accelerator.current_accelerator()
    device = acc if acc is not None else ddpc.device("cpu")
    assert dist.get_default_backend_for_device(device) == ("nccl" if gpu else "cpu")
    region = autocast(dtype=ddpc.bfloat16)
    assert (region.device_type, region.fast_dtype) == ("cpu", ddpc.bfloat16)
    with region:
        assert ddpc.amp.is_autocast_enabled("cpu")


def test_fork_rng_leaves_the_draws_after_it_unchanged():
    ddpc.manual_seed(5)
    with ddpc.random.fork_rng():
        inside = ddpc.rand(4).tolist()
        ddpc.randn(100)
    after = ddpc.rand(4).tolist()
    assert inside == after  # the block's draws came from the state the code after it starts from
    with ddpc.random.fork_rng(enabled=False):
        ddpc.rand(1)
    assert ddpc.rand(4).tolist() != after
    assert ddpc.random.initial_seed() == 5 and ddpc.random.manual_seed is ddpc.manual_seed


# ---- what ported model code calls (found porting common models) ----------------------------

def test_in_place_add_and_sub_take_alpha_and_div_a_rounding_mode():
    p = ddpc.zeros(3)
    p.add_(ddpc.ones(3), alpha=-0.1).sub_(ddpc.full((3,), 2.0), alpha=0.5)
    np.testing.assert_allclose(p.numpy(), [-1.1] * 3, rtol=1e-6)
    q = ddpc.tensor([7.0, -7.0])
    assert q.div_(2, rounding_mode="floor").tolist() == [3.0, -4.0]
    assert ddpc.tensor([7.0, -7.0]).div_(2, rounding_mode="trunc").tolist() == [3.0, -3.0]
    w = ddpc.ones(3, requires_grad=True)
    y = w * 1.0
    y.add_(w, alpha=3)  # in the graph: d/dw (w + 3w) = 4
    y.sum().backward()
    assert w.grad.tolist() == [4.0, 4.0, 4.0]


def test_bool_legacy_constructors_and_variable():
    from ddpc.autograd import Variable
    mask = ddpc.ones(3, 3, dtype=ddpc.bool).tril()
    assert mask.dtype is ddpc.bool and mask[0].tolist() == [True, False, False]
    assert ddpc.tensor([0.0, 2.5]).to(ddpc.bool).tolist() == [0, 1]
    weight = nn.Parameter(ddpc.Tensor(3, 4))  # a custom layer's parameter before reset_parameters
    assert weight.shape == (3, 4) and weight.dtype is ddpc.float32 and weight.requires_grad
    assert ddpc.Tensor([1, 2]).tolist() == [1.0, 2.0] and ddpc.Tensor().shape == (0,)
    x = ddpc.FloatTensor(2, 3)
    assert x.shape == (2, 3) and isinstance(x, ddpc.FloatTensor) and not isinstance(x, ddpc.LongTensor)
    assert ddpc.LongTensor([1, 2]).dtype is ddpc.int64 and ddpc.BoolTensor([2, 0]).tolist() == [1, 0]
    assert not isinstance(x, ddpc.cuda.FloatTensor)
    with pytest.raises(TypeError, match="takes ints"):
        ddpc.Tensor(2, "a")
    v = Variable(ddpc.ones(2), requires_grad=True)
    assert v.requires_grad and v.grad_fn is None


def test_grad_takes_only_inputs_and_clone_a_memory_format():
    x = ddpc.ones(3, requires_grad=True)
    (g,) = ddpc.autograd.grad((x * x).sum(), x, create_graph=True, only_inputs=True)
    assert g.tolist() == [2.0] * 3
    (rows,) = ddpc.autograd.grad(x * x, x, ddpc.eye(3), is_grads_batched=True)  # one vector-Jacobian product a row
    assert rows.tolist() == [[2.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 2.0]]
    y = ddpc.clone(ddpc.ones(1, 2, 3, 3), memory_format=ddpc.channels_last)
    assert y.shape == (1, 2, 3, 3)
    with pytest.raises(TypeError, match="memory_format"):
        ddpc.clone(x, memory_format="channels_last")
    assert not ddpc.is_autocast_enabled()
    with ddpc.autocast("cpu"):
        assert ddpc.is_autocast_enabled("cpu") and ddpc.get_autocast_dtype("cpu") is ddpc.bfloat16


def test_grouped_query_attention_repeats_key_and_value_heads():
    F = nn.functional
    ddpc.manual_seed(0)
    q, k, v = ddpc.randn(2, 6, 4, 8), ddpc.randn(2, 2, 4, 8), ddpc.randn(2, 2, 4, 8)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    for h in range(6):  # query head h uses key/value head h // 3
        want = F.scaled_dot_product_attention(q[:, h], k[:, h // 3], v[:, h // 3], is_causal=True)
        np.testing.assert_allclose(out[:, h].numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="multiple"):
        F.scaled_dot_product_attention(ddpc.randn(1, 5, 4, 8), k[:1], v[:1], enable_gqa=True)


def test_batch_norm_of_16_bit_input_keeps_its_dtype():
    ddpc.manual_seed(0)
    x = ddpc.randn(4, 3, 5, 5)
    bn16, bn32 = nn.BatchNorm2d(3), nn.BatchNorm2d(3)
    y16, y32 = bn16(x.to(ddpc.bfloat16)), bn32(x.to(ddpc.bfloat16).float())
    assert y16.dtype is ddpc.bfloat16 and bn16.running_mean.dtype is ddpc.float32
    np.testing.assert_allclose(y16.float().numpy(), y32.numpy(), rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(bn16.running_var.numpy(), bn32.running_var.numpy(), rtol=1e-6)
    with ddpc.autocast("cpu", dtype=ddpc.bfloat16):  # as PyTorch: the conv's bfloat16 stays bfloat16
        assert nn.BatchNorm2d(4)(nn.Conv2d(3, 4, 3)(x)).dtype is ddpc.bfloat16


def test_foreach_list_forms_and_size():
    ema, live = [ddpc.zeros(2), ddpc.zeros(3)], [ddpc.ones(2), ddpc.full((3,), 3.0)]
    ddpc._foreach_lerp_(ema, live, 0.5)  # timm's EMA update
    assert [t.tolist() for t in ema] == [[0.5, 0.5], [1.5] * 3]
    ddpc._foreach_mul_(ema, 2.0)
    ddpc._foreach_add_(ema, live, alpha=-1)
    assert [t.tolist() for t in ema] == [[0.0, 0.0], [0.0] * 3]
    assert [t.tolist() for t in ddpc._foreach_mul(live, [2.0, 3.0])] == [[2.0, 2.0], [9.0] * 3]
    np.testing.assert_allclose([n.item() for n in ddpc._foreach_norm(live)], [2 ** 0.5, 27 ** 0.5], rtol=1e-6)
    assert ddpc._foreach_sqrt_(live) is None
    np.testing.assert_allclose(live[1].numpy(), [3 ** 0.5] * 3, rtol=1e-6)
    with pytest.raises(ValueError, match="as long as the tensor list"):
        ddpc._foreach_add_(ema, [1.0])
    size = ddpc.zeros(2, 3).size()
    assert size == (2, 3) and size.numel() == 6 and repr(size) == "ddpc.Size([2, 3])"
    assert ddpc.Size([4, 5]).numel() == 20 and ddpc.zeros(size).shape == (2, 3)


# ---- dtypes, shapes and values where ported code met a difference --------------------------

def test_16_bit_norms_sum_in_float32():
    x = ddpc.tensor([300.0, 400.0], dtype=ddpc.float16)  # squares overflow float16
    F = nn.functional
    assert x.norm().item() == 500.0 and ddpc.linalg.vector_norm(x).item() == 500.0 and x.norm().dtype is ddpc.float16
    np.testing.assert_allclose(F.normalize(x, dim=0).float().numpy(), [0.6, 0.8], rtol=1e-3)
    assert F.cosine_similarity(x[None], x[None]).item() == 1.0
    assert ddpc.tensor([300.0, 400.0], dtype=ddpc.bfloat16).norm(1).item() == 700.0
    y = ddpc.tensor([300.0, 400.0], dtype=ddpc.float16, requires_grad=True)
    y.norm().backward()
    np.testing.assert_allclose(y.grad.float().numpy(), [0.6, 0.8], rtol=1e-3)


def test_floor_division_and_remainder_assignments_are_in_place():
    a = ddpc.tensor([7, -7])
    alias = a
    a //= 2
    assert a is alias and alias.tolist() == [3, -4]
    b = ddpc.tensor([7, 9], dtype=ddpc.int32)
    b //= ddpc.tensor([2, 2])
    assert b.dtype is ddpc.int32 and b.tolist() == [3, 4]
    c = ddpc.tensor([7.5, -7.5])
    c %= 2
    assert c.tolist() == [1.5, 0.5]
    with pytest.raises(TypeError, match="can't be cast"):
        u = ddpc.tensor([7], dtype=ddpc.uint8)
        u //= 2.5


def test_losses_promote_input_and_target_as_pytorch():
    F = nn.functional
    half = F.mse_loss(ddpc.tensor([300.0, 1.0], dtype=ddpc.float16), ddpc.tensor([0.0, 0.0]))
    assert half.dtype is ddpc.float32 and half.item() == 45000.5  # 16-bit would round to 44992
    assert F.mse_loss(ddpc.tensor([1.0]), ddpc.tensor([0.0], dtype=ddpc.float64)).dtype is ddpc.float64
    assert F.l1_loss(ddpc.tensor([1.0], dtype=ddpc.float16), ddpc.tensor([0.0], dtype=ddpc.float16)).dtype \
        is ddpc.float16
    x = ddpc.tensor([1.0], dtype=ddpc.float16, requires_grad=True)
    F.smooth_l1_loss(x, ddpc.tensor([0.0], dtype=ddpc.float64)).backward()
    assert x.grad.dtype is ddpc.float16 and x.grad.item() == 1.0


def test_int32_indices_argmax_keepdim_and_zero_dim_numbers():
    F = nn.functional
    ids = ddpc.tensor([[0, 2]], dtype=ddpc.int32)  # token ids as numpy often gives them
    assert ddpc.gather(ddpc.tensor([[5.0, 6.0, 7.0]]), 1, ids).tolist() == [[5.0, 7.0]]
    assert F.embedding(ids, ddpc.arange(6.0).reshape(3, 2)).tolist() == [[[0.0, 1.0], [4.0, 5.0]]]
    assert ddpc.ones(3, 4).argmax(keepdim=True).shape == (1, 1) and ddpc.ones(3, 4).argmin().shape == ()
    assert ddpc.full((2,), ddpc.tensor(2.5)).tolist() == [2.5, 2.5]
    assert ddpc.full((1,), ddpc.tensor(3)).dtype is ddpc.int64
    assert ddpc.arange(ddpc.tensor(3.5)).tolist() == [0.0, 1.0, 2.0, 3.0] and ddpc.arange(end=3).tolist() == [0, 1, 2]


def test_16_bit_comparisons_round_the_number_first_and_zero_dim_masks():
    assert (ddpc.tensor([0.1, 0.3], dtype=ddpc.float16) == 0.1).tolist() == [1, 0]
    assert (ddpc.tensor([0.1], dtype=ddpc.bfloat16) <= ddpc.tensor(0.1)).tolist() == [1]
    assert (ddpc.tensor([0.1]) == 0.1).tolist() == [1]
    x = ddpc.tensor(2.0)
    assert x[x > 0].tolist() == [2.0] and x[x < 0].shape == (0,)
    loss = ddpc.tensor(float("nan"))
    loss[loss.isnan()] = 0.0
    assert loss.item() == 0.0
    t = ddpc.ones(2)
    assert +t is t


def test_pow_of_a_number_to_a_tensors_powers():
    t = ddpc.tensor([1.0, 3.0], requires_grad=True)
    y = ddpc.pow(2, t)  # as 2 ** t, e.g. positional encodings' 10000 ** (2i / d)
    assert y.tolist() == [2.0, 8.0] and ddpc.pow(2, ddpc.tensor([1, 3])).tolist() == [2, 8]
    y.sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), [2 * np.log(2), 8 * np.log(2)], rtol=1e-6)


def test_shape_is_a_size_and_slices_concatenations_and_repeats_stay_sizes():
    import pickle

    x = ddpc.zeros(2, 3, 4)
    shape = x.shape
    assert type(shape) is ddpc.Size and shape == (2, 3, 4) and hash(shape) == hash((2, 3, 4))
    assert shape.numel() == 24 and ddpc.zeros(()).shape.numel() == 1 and repr(ddpc.zeros(()).shape) == "ddpc.Size([])"
    assert type(shape[0]) is int and shape[-1] == 4
    for got, want in ((shape[1:], (3, 4)), (shape + (5,), (2, 3, 4, 5)), ((1,) + shape, (1, 2, 3, 4)),
                      (shape[:1] * 2, (2, 2)), (3 * shape[:1], (2, 2, 2))):
        assert type(got) is ddpc.Size and got == want
    assert pickle.loads(pickle.dumps(shape)) == shape and type(pickle.loads(pickle.dumps(shape))) is ddpc.Size
    assert ddpc.Size([ddpc.tensor(3), 4]) == (3, 4) and ddpc.Size() == ()
    for bad in ([1.5], [True], 3):
        with pytest.raises(TypeError, match="iterable of 'int'"):
            ddpc.Size(bad)
    assert x.view(shape[::-1]).shape == (4, 3, 2) and x.size() is not shape and x.size(1) == 3


def test_hardtanh_and_relu6_keep_integer_tensors_integer():
    F = ddpc.nn.functional
    got = F.hardtanh(ddpc.tensor([-3, 0, 3]), -1.5, 2.5)  # bounds truncated to -1 and 2
    assert got.dtype is ddpc.int64 and got.tolist() == [-1, 0, 2]
    assert F.relu6(ddpc.tensor([7, 2], dtype=ddpc.uint8)).tolist() == [6, 2]
    assert ddpc.nn.ReLU6()(ddpc.tensor([-4, 9])).tolist() == [0, 6]
    x = ddpc.tensor([-1.0, 3.0, 7.0], requires_grad=True)
    F.relu6(x).sum().backward()
    assert x.grad.tolist() == [0.0, 1.0, 0.0]


def test_scriptable_model_code_runs_eagerly_under_jit_and_compiler():
    @ddpc.jit.script
    def gelu_approx(x):
        return x * ddpc.sigmoid(1.702 * x)

    class Block(ddpc.nn.Module):
        scale: ddpc.jit.Final[float] = 2.0

        def __init__(self):
            super().__init__()
            self.fc = ddpc.nn.Linear(3, 3)

        @ddpc.jit.ignore
        def note(self):
            return "eager"

        @ddpc.compiler.disable
        def forward(self, x):
            if ddpc.jit.is_scripting() or ddpc.compiler.is_compiling():
                raise AssertionError("ddpc never scripts or compiles")
            return gelu_approx(self.fc(x)) * self.scale

    block = Block()
    x = ddpc.randn(2, 3)
    traced = ddpc.jit.trace(block, (x,))
    scripted = ddpc.jit.script(block)
    assert traced is block and scripted is block and block.note() == "eager"
    np.testing.assert_allclose(traced(x).numpy(), (gelu_approx(block.fc(x)) * 2).numpy())
    assert ddpc.jit.fork(lambda a: a + 1, 1).wait() == 2 and ddpc.jit.wait(ddpc.jit.fork(len, "ab")) == 2
    assert ddpc.jit.ignore(drop=True)(len) is len and ddpc.compiler.disable(recursive=False)(len) is len
    with pytest.raises(RuntimeError, match="state_dict"):
        ddpc.jit.save(block, "unused.pt")


def test_attention_kernel_choices_are_kept_and_module_paths_resolve():
    from ddpc.nn.attention import SDPBackend, sdpa_kernel
    from ddpc.nn.modules.batchnorm import _BatchNorm
    from ddpc.nn.modules.conv import _ConvNd
    from ddpc.nn.modules.loss import _Loss
    from ddpc.nn.modules.transformer import TransformerEncoderLayer
    from ddpc.utils.hooks import RemovableHandle

    cuda = ddpc.backends.cuda
    q = ddpc.randn(1, 2, 4, 8)
    want = ddpc.nn.functional.scaled_dot_product_attention(q, q, q)
    with sdpa_kernel([SDPBackend.MATH, SDPBackend.EFFICIENT_ATTENTION]):
        assert cuda.math_sdp_enabled() and cuda.mem_efficient_sdp_enabled() and not cuda.flash_sdp_enabled()
        np.testing.assert_array_equal(ddpc.nn.functional.scaled_dot_product_attention(q, q, q).numpy(), want.numpy())
    assert cuda.flash_sdp_enabled() and cuda.cudnn_sdp_enabled()
    with cuda.sdp_kernel(enable_flash=False, enable_mem_efficient=False):
        assert cuda.math_sdp_enabled() and not cuda.flash_sdp_enabled()
    cuda.enable_flash_sdp(False)
    assert not cuda.flash_sdp_enabled()
    cuda.enable_flash_sdp(True)
    with pytest.raises(TypeError, match="SDPBackend"):
        sdpa_kernel(["math"])
    assert isinstance(ddpc.nn.BatchNorm2d(3), _BatchNorm) and isinstance(ddpc.nn.Conv2d(1, 1, 1), _ConvNd)
    assert isinstance(ddpc.nn.MSELoss(), _Loss) and TransformerEncoderLayer is ddpc.nn.TransformerEncoderLayer
    assert isinstance(ddpc.nn.Linear(1, 1).register_forward_hook(lambda *a: None), RemovableHandle)

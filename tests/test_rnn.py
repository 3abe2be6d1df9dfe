"""Recurrent layers, their cells and the sequence utilities against numpy
implementations of PyTorch's documented equations: parameter names, shapes
and initialisation, outputs and final states, gradients against central
differences, packed sequences, argument checks and (on a GPU) the device
against the host."""

import math

import numpy as np
import pytest
from numeric import numeric_grad

import ddpc
from ddpc import nn
from ddpc.nn.utils.rnn import (invert_permutation, pack_padded_sequence, pack_sequence, pad_packed_sequence,
                               pad_sequence, unpack_sequence, unpad_sequence)
from ddpc.utils.checkpoint import checkpoint


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def np_layer(mode, x, h, c, w_ih, w_hh, b_ih, b_hh, w_hr=None):
    """One direction of one layer over x (T, B, I) in numpy: outputs and the final (h, c)."""
    outs = []
    for xt in x:
        gi, gh = xt @ w_ih.T + b_ih, h @ w_hh.T + b_hh
        if mode == "LSTM":
            i, f, g, o = np.split(gi + gh, 4, axis=1)
            c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
            h = sigmoid(o) * np.tanh(c)
            h = h if w_hr is None else h @ w_hr.T
        elif mode == "GRU":
            (ir, iz, in_), (hr, hz, hn) = np.split(gi, 3, axis=1), np.split(gh, 3, axis=1)
            r, z = sigmoid(ir + hr), sigmoid(iz + hz)
            n = np.tanh(in_ + r * hn)
            h = (1 - z) * n + z * h
        else:
            h = np.tanh(gi + gh) if mode == "tanh" else np.maximum(gi + gh, 0)
        outs.append(h)
    return np.stack(outs), h, c


def np_stack(module, mode, x, h0, c0):
    """The whole layer stack in numpy with the module's weights: output (T, B, D * H_out), h_n, c_n."""
    D = 2 if module.bidirectional else 1
    hs, cs = [], []
    for layer in range(module.num_layers):
        outs = []
        for d in range(D):
            sfx = f"_l{layer}" + ("_reverse" if d else "")
            w = {k: getattr(module, k + sfx, None) for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh",
                                                               "weight_hr")}
            w = {k: (v.detach().numpy() if v is not None else None) for k, v in w.items()}
            b_ih = w["bias_ih"] if w["bias_ih"] is not None else 0.0
            b_hh = w["bias_hh"] if w["bias_hh"] is not None else 0.0
            k = layer * D + d
            xs = x[::-1] if d else x
            out, h, c = np_layer(mode, xs, h0[k], c0[k], w["weight_ih"], w["weight_hh"], b_ih, b_hh, w["weight_hr"])
            outs.append(out[::-1] if d else out)
            hs.append(h)
            cs.append(c)
        x = np.concatenate(outs, axis=2)
    return x, np.stack(hs), np.stack(cs)


CONFIGS = [
    ("tanh", dict()),
    ("relu", dict(num_layers=2)),
    ("LSTM", dict(num_layers=2, bidirectional=True)),
    ("LSTM", dict(proj_size=3, bidirectional=True, batch_first=True)),
    ("GRU", dict(num_layers=3, bias=False)),
    ("GRU", dict(num_layers=2, bidirectional=True, batch_first=True)),
]


def make(mode, I, H, **kw):
    if mode in ("tanh", "relu"):
        return nn.RNN(I, H, nonlinearity=mode, **kw)
    return getattr(nn, mode)(I, H, **kw)


@pytest.mark.parametrize("mode,kw", CONFIGS)
def test_layers_match_the_documented_equations(mode, kw):
    ddpc.manual_seed(0)
    T, B, I, H = 5, 3, 4, 6
    m = make(mode, I, H, **kw).double()
    D, L, P = 2 if m.bidirectional else 1, m.num_layers, m.proj_size or H
    rng = np.random.default_rng(0)
    x, h0, c0 = rng.standard_normal((T, B, I)), rng.standard_normal((L * D, B, P)), rng.standard_normal((L * D, B, H))
    want, want_h, want_c = np_stack(m, mode, x, h0, c0)
    xin = x.transpose(1, 0, 2) if m.batch_first else x
    hx = (ddpc.tensor(h0), ddpc.tensor(c0)) if mode == "LSTM" else ddpc.tensor(h0)
    out, state = m(ddpc.tensor(xin), hx)
    got = out.detach().numpy()
    np.testing.assert_allclose(got.transpose(1, 0, 2) if m.batch_first else got, want, rtol=1e-12, atol=1e-12)
    h_n = state[0] if mode == "LSTM" else state
    np.testing.assert_allclose(h_n.detach().numpy(), want_h, rtol=1e-12, atol=1e-12)
    if mode == "LSTM":
        np.testing.assert_allclose(state[1].detach().numpy(), want_c, rtol=1e-12, atol=1e-12)
    # Without initial states they start at zero; an unbatched input is one sequence.
    out0, _ = m(ddpc.tensor(xin))
    zeros = np.zeros_like(h0), np.zeros_like(c0)
    np.testing.assert_allclose(out0.detach().numpy().transpose(1, 0, 2) if m.batch_first else out0.detach().numpy(),
                               np_stack(m, mode, x, *zeros)[0], rtol=1e-12, atol=1e-12)
    one, _ = m(ddpc.tensor(x[:, 1]))
    np.testing.assert_allclose(one.detach().numpy(), np_stack(m, mode, x[:, 1:2], *zeros)[0][:, 0], rtol=1e-12,
                               atol=1e-12)


def test_parameter_names_shapes_and_init():
    m = nn.LSTM(4, 6, num_layers=2, bidirectional=True, proj_size=3)
    shapes = {n: tuple(p.shape) for n, p in m.named_parameters()}
    assert list(shapes)[:5] == ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_hr_l0"]
    assert shapes["weight_ih_l0"] == (24, 4) and shapes["weight_hh_l0"] == (24, 3)
    assert shapes["weight_ih_l1_reverse"] == (24, 6) and shapes["weight_hr_l1_reverse"] == (3, 6)
    assert len(shapes) == 20 and len(m.all_weights) == 4 and len(m.all_weights[0]) == 5
    g = nn.GRU(5, 8, bias=False)
    assert [n for n, _ in g.named_parameters()] == ["weight_ih_l0", "weight_hh_l0"]
    assert tuple(g.weight_ih_l0.shape) == (24, 5)
    bound = 1 / math.sqrt(8)
    big = nn.RNN(300, 8)
    for p in big.parameters():
        a = p.detach().numpy()
        assert np.abs(a).max() <= bound and np.abs(a).max() > 0.9 * bound
    cell = nn.LSTMCell(3, 4)
    assert {n: tuple(p.shape) for n, p in cell.named_parameters()} == {
        "weight_ih": (16, 3), "weight_hh": (16, 4), "bias_ih": (16,), "bias_hh": (16,)}
    assert repr(m) == "LSTM(4, 6, proj_size=3, num_layers=2, bidirectional=True)"


@pytest.mark.parametrize("cls,mode", [(nn.RNNCell, "tanh"), (nn.LSTMCell, "LSTM"), (nn.GRUCell, "GRU")])
def test_cells_take_one_step(cls, mode):
    B, I, H = 3, 4, 5
    cell = cls(I, H).double()
    rng = np.random.default_rng(1)
    x, h, c = rng.standard_normal((B, I)), rng.standard_normal((B, H)), rng.standard_normal((B, H))
    w = [getattr(cell, k).detach().numpy() for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
    _, want_h, want_c = np_layer(mode, x[None], h, c, *w)
    got = cell(ddpc.tensor(x), (ddpc.tensor(h), ddpc.tensor(c)) if mode == "LSTM" else ddpc.tensor(h))
    got_h = got[0] if mode == "LSTM" else got
    np.testing.assert_allclose(got_h.detach().numpy(), want_h, rtol=1e-12, atol=1e-12)
    if mode == "LSTM":
        np.testing.assert_allclose(got[1].detach().numpy(), want_c, rtol=1e-12, atol=1e-12)
    unbatched = cell(ddpc.tensor(x[0]))
    assert tuple((unbatched[0] if mode == "LSTM" else unbatched).shape) == (H,)


@pytest.mark.parametrize("mode", ["tanh", "LSTM", "GRU"])
def test_gradients_match_central_differences(mode):
    ddpc.manual_seed(1)
    m = make(mode, 3, 4, num_layers=2, bidirectional=True).double()
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 2, 3))
    w_out = rng.standard_normal((4, 2, 8))

    def loss_of(xa, weight=None, wa=None):
        if weight is not None:
            with ddpc.no_grad():
                weight.copy_(ddpc.tensor(wa))
        out, state = m(ddpc.tensor(xa))
        h = state[0] if mode == "LSTM" else state
        return float(((out * ddpc.tensor(w_out)).sum() + (h * h).sum()).item())

    xt = ddpc.tensor(x, requires_grad=True)
    out, state = m(xt)
    h = state[0] if mode == "LSTM" else state
    ((out * ddpc.tensor(w_out)).sum() + (h * h).sum()).backward()
    np.testing.assert_allclose(xt.grad.numpy(), numeric_grad(loss_of, x), rtol=1e-6, atol=1e-8)
    for name in ("bias_hh_l0_reverse", "bias_ih_l1"):
        p = getattr(m, name)
        start = p.detach().numpy().copy()
        want = numeric_grad(lambda wa, p=p: loss_of(x, p, wa), start)
        with ddpc.no_grad():
            p.copy_(ddpc.tensor(start))
        np.testing.assert_allclose(p.grad.numpy(), want, rtol=1e-6, atol=1e-8)


def test_packed_sequences_run_each_sequence_to_its_own_length():
    ddpc.manual_seed(2)
    m = nn.LSTM(3, 4, num_layers=2, bidirectional=True).double()
    rng = np.random.default_rng(3)
    lengths = [2, 5, 3]
    seqs = [rng.standard_normal((n, 3)) for n in lengths]
    packed = pack_sequence([ddpc.tensor(s) for s in seqs], enforce_sorted=False)
    assert packed.batch_sizes.tolist() == [3, 3, 2, 1, 1] and packed.sorted_indices.tolist() == [1, 2, 0]
    out, (h_n, c_n) = m(packed)
    padded, got_lengths = pad_packed_sequence(out, batch_first=True)
    assert got_lengths.tolist() == lengths and tuple(padded.shape) == (3, 5, 8)
    for b, s in enumerate(seqs):  # each sequence alone gives the same outputs and final states
        alone, (h1, c1) = m(ddpc.tensor(s))
        np.testing.assert_allclose(padded[b, :lengths[b]].numpy(), alone.detach().numpy(), rtol=1e-12, atol=1e-12)
        assert np.all(padded[b, lengths[b]:].numpy() == 0)
        np.testing.assert_allclose(h_n[:, b].detach().numpy(), h1.detach().numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(c_n[:, b].detach().numpy(), c1.detach().numpy(), rtol=1e-12, atol=1e-12)


def test_unpad_and_unpack_give_back_the_sequences():
    rng = np.random.default_rng(6)
    seqs = [rng.standard_normal((n, 2)) for n in (3, 1, 4)]
    for batch_first in (False, True):
        padded = pad_sequence([ddpc.tensor(s) for s in seqs], batch_first=batch_first)
        for got, want in zip(unpad_sequence(padded, [3, 1, 4], batch_first=batch_first), seqs):
            np.testing.assert_array_equal(got.numpy(), want)
    packed = pack_sequence([ddpc.tensor(s) for s in seqs], enforce_sorted=False)
    got = unpack_sequence(packed)
    assert [g.shape[0] for g in got] == [3, 1, 4]
    for g, want in zip(got, seqs):
        np.testing.assert_array_equal(g.numpy(), want)
    with pytest.raises(ValueError, match="3 lengths"):
        unpad_sequence(pad_sequence([ddpc.tensor(s) for s in seqs[:2]]), [3, 1, 4])
    with pytest.raises(ValueError, match="do not fit"):
        unpad_sequence(pad_sequence([ddpc.tensor(s) for s in seqs]), [3, 1, 5])
    perm = ddpc.tensor([2, 0, 3, 1])
    assert invert_permutation(perm).tolist() == [1, 3, 0, 2] and invert_permutation(None) is None


def test_sequence_utilities():
    rng = np.random.default_rng(4)
    seqs = [rng.standard_normal((n, 2)) for n in (3, 1, 4)]
    padded = pad_sequence([ddpc.tensor(s) for s in seqs], batch_first=True, padding_value=-1.0)
    want = np.full((3, 4, 2), -1.0)
    for b, s in enumerate(seqs):
        want[b, :len(s)] = s
    np.testing.assert_array_equal(padded.numpy(), want)
    left = pad_sequence([ddpc.tensor(s) for s in seqs], padding_side="left")
    assert tuple(left.shape) == (4, 3, 2) and np.all(left[:3, 1].numpy() == 0)
    np.testing.assert_array_equal(left[3, 1].numpy(), seqs[1][0])
    x = ddpc.tensor(want, requires_grad=True)
    packed = pack_padded_sequence(x, [3, 1, 4], batch_first=True, enforce_sorted=False)
    assert packed.data.shape == (8, 2)
    back, lengths = pad_packed_sequence(packed, batch_first=True, padding_value=-1.0)
    np.testing.assert_array_equal(back.numpy(), want)
    assert lengths.tolist() == [3, 1, 4]
    (back * back).sum().backward()  # the gradient reaches the rows that were packed, not the padding
    mask = np.zeros((3, 4, 1))
    for b, n in enumerate((3, 1, 4)):
        mask[b, :n] = 1
    np.testing.assert_array_equal(x.grad.numpy(), 2 * want * mask)
    with pytest.raises(RuntimeError, match="sorted in decreasing order"):
        pack_padded_sequence(x, [3, 1, 4], batch_first=True)
    with pytest.raises(ValueError, match="lengths"):
        pack_padded_sequence(x, [3, 1], batch_first=True)
    with pytest.raises(ValueError, match="total_length"):
        pad_packed_sequence(packed, total_length=2)


def test_dropout_between_layers_only_in_training():
    m = nn.GRU(3, 16, num_layers=2, dropout=0.5).double()
    x = ddpc.tensor(np.random.default_rng(5).standard_normal((4, 2, 3)))
    a, b = m(x)[0].detach().numpy(), m(x)[0].detach().numpy()
    assert not np.array_equal(a, b)
    m.eval()
    np.testing.assert_array_equal(m(x)[0].detach().numpy(), m(x)[0].detach().numpy())
    with pytest.warns(UserWarning, match="num_layers greater than 1"):
        nn.RNN(3, 4, dropout=0.2)


@pytest.mark.parametrize("mode", ["relu", "LSTM", "GRU"])
def test_a_layer_keeps_autograd_rules(mode):
    """Each layer's direction is one node that saves what its backward reads: checkpointing recomputes it,
    a weight changed in place before backward is refused, and 16-bit tensors are computed in float32."""
    ddpc.manual_seed(5)
    m = make(mode, 3, 4, num_layers=2, bidirectional=True)
    x = ddpc.tensor(np.random.default_rng(6).standard_normal((5, 2, 3)).astype(np.float32), requires_grad=True)

    def loss(inp):
        out, state = m(inp)
        return out.sum() + (state[-1] if mode == "LSTM" else state).sum()

    loss(x).backward()
    want = x.grad.numpy().copy()
    x.grad = None
    checkpoint(loss, x, use_reentrant=False).backward()
    np.testing.assert_array_equal(x.grad.numpy(), want)
    out = loss(x)
    with ddpc.no_grad():
        m.weight_hh_l1.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        out.backward()
    half = make(mode, 3, 4).half()
    full = make(mode, 3, 4)
    full.load_state_dict({k: v.float() for k, v in half.state_dict().items()})
    got = half(x.detach().half())[0]
    assert got.dtype is ddpc.float16
    np.testing.assert_allclose(got.float().numpy(), full(x.detach())[0].detach().numpy(), atol=2e-3)


@pytest.mark.parametrize("mode", ["tanh", "LSTM", "GRU"])
def test_an_empty_batch_gives_empty_outputs_and_gradients(mode):
    m = make(mode, 3, 4, num_layers=2, bidirectional=True)
    x = ddpc.zeros(5, 0, 3, requires_grad=True)
    out, state = m(x)
    states = state if mode == "LSTM" else (state,)
    assert tuple(out.shape) == (5, 0, 8) and all(tuple(s.shape) == (4, 0, 4) for s in states)
    (out.sum() + states[-1].sum()).backward()
    assert tuple(x.grad.shape) == (5, 0, 3) and np.all(m.weight_hh_l0.grad.numpy() == 0)


def test_argument_checks():
    with pytest.raises(ValueError, match="dropout should be a number"):
        nn.LSTM(3, 4, num_layers=2, dropout=1.5)
    with pytest.raises(ValueError, match="proj_size has to be smaller"):
        nn.LSTM(3, 4, proj_size=4)
    with pytest.raises(ValueError, match="hidden_size must be greater than zero"):
        nn.GRU(3, 0)
    with pytest.raises(ValueError, match="Unknown nonlinearity"):
        nn.RNN(3, 4, nonlinearity="sigmoid")
    m = nn.LSTM(3, 4, num_layers=2)
    with pytest.raises(ValueError, match="Expected input to be 2D or 3D"):
        m(ddpc.zeros(1, 2, 3, 3))
    with pytest.raises(RuntimeError, match="input.size\\(-1\\) must be equal to input_size"):
        m(ddpc.zeros(5, 2, 4))
    with pytest.raises(RuntimeError, match="Expected hidden size \\(2, 2, 4\\)"):
        m(ddpc.zeros(5, 2, 3), (ddpc.zeros(2, 3, 4), ddpc.zeros(2, 2, 4)))
    with pytest.raises(RuntimeError, match="hx should also be 2-D"):
        m(ddpc.zeros(5, 3), (ddpc.zeros(2, 1, 4), ddpc.zeros(2, 1, 4)))
    with pytest.raises(TypeError, match="tuple"):
        m(ddpc.zeros(5, 2, 3), ddpc.zeros(2, 2, 4))
    with pytest.raises(RuntimeError, match="inconsistent input_size"):
        nn.GRUCell(3, 4)(ddpc.zeros(2, 5))


def test_trains_with_an_optimizer():
    """A small LSTM learns to output the running sum of its input's sign."""
    ddpc.manual_seed(3)
    rng = np.random.default_rng(6)
    lstm, head = nn.LSTM(1, 8, batch_first=True), nn.Linear(8, 1)
    opt = ddpc.optim.Adam(list(lstm.parameters()) + list(head.parameters()), lr=0.02)
    x = rng.standard_normal((16, 6, 1)).astype(np.float32)
    y = np.cumsum(np.sign(x), axis=1).astype(np.float32) / 6
    losses = []
    for _ in range(60):
        opt.zero_grad()
        out, _ = lstm(ddpc.tensor(x))
        loss = nn.functional.mse_loss(head(out), ddpc.tensor(y))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.2 * losses[0]


class SequenceModel(nn.Module):
    """A bidirectional GRU over (B, T, 3) inputs and a linear head on its last output."""

    def __init__(self):
        super().__init__()
        ddpc.manual_seed(5)
        self.gru = nn.GRU(3, 8, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(16, 2)

    def forward(self, x):
        out, _ = self.gru(x)
        return self.head(out[:, -1])


def sequence_batches(n=4, batch=8):
    rng = np.random.default_rng(8)
    return [(rng.standard_normal((batch, 5, 3)).astype(np.float32), rng.standard_normal((batch, 2)).astype(np.float32))
            for _ in range(n)]


def train_sequences(model, batches, rank=0, world=1):
    opt = ddpc.optim.RMSprop(model.parameters(), lr=0.01, momentum=0.5)
    for x, y in batches:
        per = len(x) // world
        opt.zero_grad()
        out = model(ddpc.tensor(x[rank * per:(rank + 1) * per]))
        nn.functional.mse_loss(out, ddpc.tensor(y[rank * per:(rank + 1) * per])).backward()
        opt.step()
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def ddp_sequence_worker(rank):
    import ddpc.distributed as dist

    dist.init_process_group("cpu")
    ddp = nn.parallel.DistributedDataParallel(SequenceModel())
    out = train_sequences(ddp, sequence_batches(), rank, 2)
    dist.destroy_process_group()
    return {k.removeprefix("module."): v for k, v in out.items()}


def test_ddp_over_a_recurrent_model_equals_one_process():
    want = train_sequences(SequenceModel(), sequence_batches())
    for got in ddpc.spawn(ddp_sequence_worker, nprocs=2):
        assert got.keys() == want.keys()
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=0, atol=1e-5, err_msg=k)


@pytest.mark.gpu
@pytest.mark.parametrize("mode,kw", CONFIGS)
def test_cuda_matches_the_host(mode, kw):
    ddpc.manual_seed(4)
    host = make(mode, 4, 6, **kw).double()
    dev = make(mode, 4, 6, **kw).double().cuda()
    dev.load_state_dict(host.state_dict())
    x = np.random.default_rng(7).standard_normal((5, 3, 4))
    results = []
    for m, device in ((host, "cpu"), (dev, "cuda")):
        xt = ddpc.tensor(x, device=device, requires_grad=True)
        out, state = m(xt)
        h = state[0] if mode == "LSTM" else state
        (out.sum() + (h * h).sum()).backward()
        results.append([out.detach().cpu().numpy(), xt.grad.cpu().numpy()] +
                       [p.grad.cpu().numpy() for p in m.parameters()])
    for a, b in zip(*results):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12)

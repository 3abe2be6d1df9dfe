"""Optional: the recurrent layers, their cells and the sequence packing
utilities against PyTorch given the same weights (skipped when torch is not
installed): outputs, final states and the gradients of every parameter and
of the input and initial states, in float64 (to 1e-10) and float32 (to
1e-5). Each comparison runs in a child process that imports torch before
ddpc (see test_nn_torch.py) and fails there, printing what differs."""

import sys

import numpy as np
import pytest
from procs import run_torch_case


@pytest.mark.parametrize("case", ["layers", "packed", "cells", "utilities"])
def test_matches_pytorch(case):
    out = run_torch_case(__file__, case)
    assert out.strip().endswith("ok"), out


def _flat(x):
    """The tensors of an output that may be a tensor, a tuple of them or a PackedSequence, as numpy arrays."""
    if isinstance(x, (tuple, list)) and hasattr(x, "batch_sizes"):
        return [x.data.detach().double().numpy(), x.batch_sizes.numpy()]
    if isinstance(x, (tuple, list)):
        return [a for t in x for a in _flat(t)]
    return [x.detach().double().numpy()]


def _run(lib, make, x, state, dtype, pack=None):
    """The module make(lib) with the weights of `weights` (shared by both libraries), applied to x (and
    the initial state), then backward from a fixed random weighting of every output: the outputs, then
    the gradients of the input, the initial state and each parameter, as float64 numpy arrays."""
    dt = getattr(lib, dtype)
    module = make(lib).to(dtype=dt)
    for i, (_, p) in enumerate(module.named_parameters()):
        rng = np.random.default_rng(10 + i)
        with lib.no_grad():
            p.copy_(lib.tensor(rng.uniform(-0.5, 0.5, tuple(p.shape))).to(dtype=dt))
    xt = lib.tensor(x).to(dtype=dt).requires_grad_()
    st = [lib.tensor(s).to(dtype=dt).requires_grad_() for s in state]
    inp = xt if pack is None else pack(lib, xt)
    args = [] if not st else [tuple(st) if len(st) == 2 else st[0]]
    out = module(inp, *args)
    outs = _flat(out)
    tensors = [out[0].data if hasattr(out[0], "batch_sizes") else out[0]] if isinstance(out, tuple) else [out]
    if isinstance(out, tuple):
        tensors += list(out[1]) if isinstance(out[1], tuple) else [out[1]]
    loss = 0
    for k, t in enumerate(tensors):
        w = np.random.default_rng(100 + k).standard_normal(tuple(t.shape))
        loss = loss + (t * lib.tensor(w).to(dtype=dt)).sum()
    loss.backward()
    grads = [xt.grad] + [s.grad for s in st] + [p.grad for _, p in module.named_parameters()]
    names = [n for n, _ in module.named_parameters()]
    return names, [np.asarray(a, np.float64) for a in outs], [g.double().numpy() for g in grads]


def _check(label, make, x_shape, state_shapes=(), pack=None):
    import torch

    import ddpc

    rng = np.random.default_rng(0)
    x = rng.standard_normal(x_shape)
    state = [rng.standard_normal(s) for s in state_shapes]
    for dtype, tol in (("float64", 1e-10), ("float32", 1e-5)):
        tn, tout, tgrad = _run(torch, make, x, state, dtype, pack)
        dn, dout, dgrad = _run(ddpc, make, x, state, dtype, pack)
        assert tn == dn, (tn, dn)
        assert [a.shape for a in tout] == [a.shape for a in dout], ([a.shape for a in tout], [a.shape for a in dout])
        worst = max(float(np.abs(a - b).max() / max(1.0, np.abs(a).max())) for a, b in zip(tout + tgrad, dout + dgrad))
        print(f"{label} {dtype}: max |ddpc - torch| / max(1, |torch|) over outputs and gradients {worst:.2e}")
        assert worst < tol


def _case_layers():
    T, B, I, H = 5, 3, 4, 6
    for cls in ("RNN", "LSTM", "GRU"):
        for kw in (dict(), dict(num_layers=2, bidirectional=True), dict(num_layers=3, bias=False, batch_first=True),
                   dict(num_layers=2, bidirectional=True, batch_first=True, nonlinearity="relu"),
                   dict(num_layers=2, dropout=0.0), dict(proj_size=2, num_layers=2, bidirectional=True)):
            if "nonlinearity" in kw and cls != "RNN" or "proj_size" in kw and cls != "LSTM":
                continue
            make = (lambda lib, cls=cls, kw=kw: getattr(lib.nn, cls)(I, H, **kw))
            D, L = 2 if kw.get("bidirectional") else 1, kw.get("num_layers", 1)
            P = kw.get("proj_size") or H
            x_shape = (B, T, I) if kw.get("batch_first") else (T, B, I)
            _check(f"{cls} {kw}", make, x_shape)
            states = [(L * D, B, P)] + ([(L * D, B, H)] if cls == "LSTM" else [])
            _check(f"{cls} {kw} with initial states", make, x_shape, states)
            _check(f"{cls} {kw} unbatched with initial states", make, (T, I), [s[:1] + s[2:] for s in states])


def _case_packed():
    T, B, I, H = 6, 4, 3, 5
    lengths = [4, 6, 1, 3]

    def pack(lib, x, batch_first=False):
        return lib.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=batch_first, enforce_sorted=False)

    for cls in ("RNN", "LSTM", "GRU"):
        for kw in (dict(), dict(num_layers=2, bidirectional=True), dict(proj_size=2, bidirectional=True)):
            if "proj_size" in kw and cls != "LSTM":
                continue
            make = (lambda lib, cls=cls, kw=kw: getattr(lib.nn, cls)(I, H, **kw))
            D, L = 2 if kw.get("bidirectional") else 1, kw.get("num_layers", 1)
            states = [(L * D, B, kw.get("proj_size") or H)] + ([(L * D, B, H)] if cls == "LSTM" else [])
            _check(f"packed {cls} {kw}", make, (T, B, I), pack=pack)
            _check(f"packed {cls} {kw} with initial states", make, (T, B, I), states, pack=pack)
    sorted_pack = (lambda lib, x: lib.nn.utils.rnn.pack_padded_sequence(x, [5, 3, 3], batch_first=True))
    _check("packed sorted batch_first GRU", lambda lib: lib.nn.GRU(I, H, batch_first=True), (3, 5, I),
           pack=sorted_pack)


def _case_cells():
    B, I, H = 3, 4, 5
    for cls, nstate in (("RNNCell", 1), ("LSTMCell", 2), ("GRUCell", 1)):
        for kw in (dict(), dict(bias=False)) + ((dict(nonlinearity="relu"),) if cls == "RNNCell" else ()):
            make = (lambda lib, cls=cls, kw=kw: getattr(lib.nn, cls)(I, H, **kw))
            _check(f"{cls} {kw}", make, (B, I))
            _check(f"{cls} {kw} with states", make, (B, I), [(B, H)] * nstate)
            _check(f"{cls} {kw} unbatched with states", make, (I,), [(H,)] * nstate)


def _case_utilities():
    import torch

    import ddpc

    rng = np.random.default_rng(1)
    seqs = [rng.standard_normal((n, 2, 3)) for n in (3, 5, 1, 5)]

    def both(fn):
        got = fn(ddpc, [ddpc.tensor(s, requires_grad=True) for s in seqs])
        want = fn(torch, [torch.tensor(s, requires_grad=True) for s in seqs])
        return _flat(got), _flat(want)

    cases = {
        "pad_sequence": lambda lib, s: lib.nn.utils.rnn.pad_sequence(s),
        "pad_sequence batch_first, padded with -1 on the left": lambda lib, s: lib.nn.utils.rnn.pad_sequence(
            s, batch_first=True, padding_value=-1.0, padding_side="left"),
        "pack_sequence unsorted": lambda lib, s: lib.nn.utils.rnn.pack_sequence(s, enforce_sorted=False),
        "pack then pad, batch_first, total_length": lambda lib, s: lib.nn.utils.rnn.pad_packed_sequence(
            lib.nn.utils.rnn.pack_sequence(s, enforce_sorted=False), batch_first=True, padding_value=2.5,
            total_length=7),
        "pack_padded_sequence batch_first": lambda lib, s: lib.nn.utils.rnn.pack_padded_sequence(
            lib.nn.utils.rnn.pad_sequence(s, batch_first=True), [3, 5, 1, 5], batch_first=True,
            enforce_sorted=False),
    }
    for name, fn in cases.items():
        got, want = both(fn)
        assert len(got) == len(want) and all(a.shape == b.shape for a, b in zip(got, want)), name
        worst = max(float(np.abs(a - b).max()) for a, b in zip(got, want))
        print(name, "max |ddpc - torch|", worst)
        assert worst == 0
    for lib in (torch, ddpc):
        packed = lib.nn.utils.rnn.pack_sequence([lib.tensor(s) for s in seqs], enforce_sorted=False)
        print(lib.__name__, "sorted", packed.sorted_indices.tolist(), "unsorted", packed.unsorted_indices.tolist())


if __name__ == "__main__":
    import torch  # noqa: F401  (before ddpc, see the module docstring)

    globals()["_case_" + sys.argv[1]]()
    print("ok")

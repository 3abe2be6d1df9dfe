"""Recurrent layer speed: forward and forward+backward of LSTM and GRU layers
in float32, as ms per call, for ddpc and PyTorch when it is importable, with
the same weights and inputs (outputs and gradients are checked to agree
before anything is timed).

    PYTHONPATH=python python benchmarks/rnn.py [--device cuda] [--repeat 5] [--min-time 0.3] [--cpu-time]

With --cpu-time the figures are CPU seconds of the process instead of wall
time (see benchmarks/conv.py for when that is meaningful).

Run it with an interpreter that has torch to get the PyTorch columns, e.g.
PYTHONPATH=python /path/to/venv-with-torch/bin/python benchmarks/rnn.py
"""

import argparse

import numpy as np

from common import add_layer_timing_args, best_of_rounds, import_torch, print_table, start_layer_timing

torch = import_torch()

import ddpc  # noqa: E402 - after torch, see import_torch

# (mode, input size, hidden size, batch, steps, layers, bidirectional)
CASES = (
    ("LSTM", 64, 256, 32, 50, 1, False),
    ("LSTM", 64, 256, 32, 200, 1, False),
    ("LSTM", 64, 256, 32, 50, 2, False),
    ("LSTM", 64, 256, 32, 50, 1, True),
    ("GRU", 64, 256, 32, 50, 1, False),
    ("GRU", 64, 256, 32, 200, 1, False),
    ("GRU", 64, 256, 32, 50, 2, False),
)


def case_data(mode, inp, hidden, batch, steps, layers, bidirectional, seed=0):
    """Weights in the order of the module's parameters (PyTorch's), an input (T, B, I) and an output probe."""
    rng = np.random.default_rng(seed)
    gates, directions, bound = {"LSTM": 4, "GRU": 3}[mode], 2 if bidirectional else 1, 1 / np.sqrt(hidden)
    weights = []
    for layer in range(layers):
        layer_input = inp if layer == 0 else hidden * directions
        for _ in range(directions):
            for shape in ((gates * hidden, layer_input), (gates * hidden, hidden), (gates * hidden,),
                          (gates * hidden,)):
                weights.append(rng.uniform(-bound, bound, shape).astype(np.float32))
    x = rng.standard_normal((steps, batch, inp)).astype(np.float32)
    probe = rng.standard_normal((steps, batch, hidden * directions)).astype(np.float32)
    return weights, x, probe


def framework_case(lib, device, mode, weights, x, layers, bidirectional):
    """forward and forward+backward closures for ddpc or torch (the shared API), and a function giving the
    output and the gradients of sum(output * probe) for the agreement check."""
    module = getattr(lib.nn, mode)(x.shape[2], weights[1].shape[1], num_layers=layers, bidirectional=bidirectional)
    with lib.no_grad():
        for p, w in zip(module.parameters(), weights):
            p.copy_(lib.from_numpy(w))
    module = module.to(device)
    xt = lib.from_numpy(x).to(device).requires_grad_(True)

    def forward():
        with lib.no_grad():
            return module(xt)[0]

    def train(probe=None):
        module.zero_grad()
        xt.grad = None
        out = module(xt)[0]
        out.backward(lib.ones_like(out) if probe is None else lib.from_numpy(probe).to(device))
        return out

    def results(probe):
        out = train(probe)
        return [t.detach().cpu().numpy() for t in [out, xt.grad] + [p.grad for p in module.parameters()]]

    return forward, train, results


def check_agree(label, got, want):
    for k, (a, e) in enumerate(zip(got, want)):
        err = float(np.abs(a - e).max()) / max(float(np.abs(e).max()), 1.0)
        if a.shape != e.shape or err > 1e-4:
            raise SystemExit(f"{label}: torch's {'output' if k == 0 else f'gradient {k}'} disagrees with ddpc "
                             f"(relative error {err:.2e})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    add_layer_timing_args(parser)
    args = parser.parse_args()
    clock = start_layer_timing(args, ddpc, torch, f" on {args.device}")
    rows = []
    for mode, inp, hidden, batch, steps, layers, bidirectional in CASES:
        label = f"{mode} {inp}->{hidden}{' bidir' if bidirectional else ''}, {layers} layer{'s' * (layers > 1)}, " \
                f"T={steps}, batch {batch}"
        weights, x, probe = case_data(mode, inp, hidden, batch, steps, layers, bidirectional)
        libs = [("ddpc", ddpc)] + ([("torch", torch)] if torch is not None else [])
        cases = [(name, *framework_case(lib, args.device, mode, weights, x, layers, bidirectional))
                 for name, lib in libs]
        syncs = {"ddpc": ddpc.cuda.synchronize, "torch": torch.cuda.synchronize if torch is not None else None}
        if len(cases) > 1:
            check_agree(label, cases[1][3](probe), cases[0][3](probe))
        t = best_of_rounds(cases, args, clock, lambda name: syncs[name] if args.device != "cpu" else None)
        row = [label]
        for p in ("fwd", "train"):
            row.append(f"{t['ddpc', p] * 1e3:.2f}")
            if torch is not None:
                row += [f"{t['torch', p] * 1e3:.2f}", f"{t['torch', p] / t['ddpc', p]:.2f}"]
        rows.append(row)
    headers = ["layer"]
    for p in ("fwd", "fwd+bwd"):
        headers.append(f"{p} ddpc ms")
        if torch is not None:
            headers += [f"{p} torch ms", "torch/ddpc"]
    print_table(headers, rows)


if __name__ == "__main__":
    main()

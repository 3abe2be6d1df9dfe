"""Gradient-penalty training steps (create_graph=True): a WGAN-GP critic's
step, its plain step (the same loss without the penalty) and their ratio,
for ddpc and PyTorch when it is importable, with the same weights and inputs
(the parameters' gradients are checked to agree before anything is timed).

    PYTHONPATH=python python benchmarks/double_backward.py [--repeat 5] [--min-time 0.3] [--cpu-time]

Run it with an interpreter that has torch to get the PyTorch columns, e.g.
PYTHONPATH=python /path/to/venv-with-torch/bin/python benchmarks/double_backward.py
"""

import argparse

import numpy as np

from common import add_layer_timing_args, best_of_rounds, import_torch, print_table, start_layer_timing

torch = import_torch()

import ddpc  # noqa: E402 - after torch, see import_torch


def mlp(lib):
    nn = lib.nn
    return nn.Sequential(nn.Linear(784, 512), nn.LeakyReLU(0.2), nn.Linear(512, 512), nn.LeakyReLU(0.2),
                         nn.Linear(512, 1))


def convnet(lib):
    nn = lib.nn
    return nn.Sequential(nn.Conv2d(3, 64, 4, stride=2, padding=1), nn.LeakyReLU(0.2),
                         nn.Conv2d(64, 128, 4, stride=2, padding=1), nn.LeakyReLU(0.2), nn.Flatten(),
                         nn.Linear(128 * 8 * 8, 1))


# (name, network, input shape per sample, batch)
CASES = (("MLP 784-512-512-1", mlp, (784,), 256), ("conv 3x32x32 -> 64 -> 128", convnet, (3, 32, 32), 32))


def framework_case(lib, make, weights, real, fake, alpha):
    """The plain and the penalised step as closures, and one penalised step's parameter gradients."""
    net = make(lib)
    with lib.no_grad():
        for p, w in zip(net.parameters(), weights):
            p.copy_(lib.from_numpy(w))
    real, fake, alpha = lib.from_numpy(real), lib.from_numpy(fake), lib.from_numpy(alpha)

    def plain():
        net.zero_grad()
        (net(fake).mean() - net(real).mean()).backward()

    def penalised():
        net.zero_grad()
        mixed = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
        (g,) = lib.autograd.grad(net(mixed).sum(), mixed, create_graph=True)
        penalty = ((g.reshape(g.shape[0], -1).norm(2, dim=1) - 1) ** 2).mean()
        (net(fake).mean() - net(real).mean() + 10 * penalty).backward()

    def grads():
        penalised()
        return [p.grad.numpy().copy() for p in net.parameters()]

    return plain, penalised, grads


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_layer_timing_args(parser)
    args = parser.parse_args()
    clock = start_layer_timing(args, ddpc, torch)
    rows = []
    for name, make, shape, batch in CASES:
        rng = np.random.default_rng(0)
        weights = [(rng.standard_normal(tuple(p.shape)) * 0.05).astype(np.float32) for p in make(ddpc).parameters()]
        real, fake = (rng.standard_normal((batch,) + shape).astype(np.float32) for _ in range(2))
        alpha = rng.uniform(size=(batch,) + (1,) * len(shape)).astype(np.float32)
        libs = [("ddpc", ddpc)] + ([("torch", torch)] if torch is not None else [])
        cases = [(lib_name,) + framework_case(lib, make, weights, real, fake, alpha) for lib_name, lib in libs]
        if len(cases) == 2:
            for a, b in zip(cases[0][3](), cases[1][3]()):
                np.testing.assert_allclose(a, b, rtol=2e-3, atol=1e-4, err_msg=f"{name}: gradients differ")
        t = best_of_rounds([(lib_name, plain, penalised) for lib_name, plain, penalised, _ in cases], args, clock)
        row = [name, batch]
        for lib_name, *_ in cases:
            row += [f"{t[lib_name, 'fwd'] * 1e3:.2f}", f"{t[lib_name, 'train'] * 1e3:.2f}",
                    f"{t[lib_name, 'train'] / t[lib_name, 'fwd']:.2f}"]
        if len(cases) == 2:
            row.append(f"{t['torch', 'train'] / t['ddpc', 'train']:.2f}")
        rows.append(row)
    headers = ["critic", "batch", "ddpc plain ms", "ddpc GP ms", "ddpc GP/plain"]
    if torch is not None:
        headers += ["torch plain ms", "torch GP ms", "torch GP/plain", "GP step vs torch"]
    print_table(headers, rows)


if __name__ == "__main__":
    main()

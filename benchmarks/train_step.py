"""Training-step throughput: forward, cross entropy, backward and an Adam step
of an MLP 784-1024-1024-10 (float32), as samples per second, for ddpc, a
hand-written numpy implementation (host only) and PyTorch eager when it is
installed, all from the same initial weights and batch.

    python benchmarks/train_step.py [--device cuda] [--batch 256] [--repeat 5]

Run it with an interpreter that has torch to get the PyTorch column, e.g.
PYTHONPATH=python /path/to/venv-with-torch/bin/python benchmarks/train_step.py
"""

import argparse

import numpy as np

from common import best_time, import_torch, machine, print_table

torch = import_torch()

import ddpc  # noqa: E402 - after torch, see import_torch

SIZES = (784, 1024, 1024, 10)
LR, BETAS, EPS = 1e-3, (0.9, 0.999), 1e-8


def initial_weights(seed=0):
    rng = np.random.default_rng(seed)
    layers = []
    for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:]):
        bound = 1 / np.sqrt(fan_in)
        layers.append((rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32),
                       rng.uniform(-bound, bound, fan_out).astype(np.float32)))
    return layers


def framework_step(lib, layers, x, y, device):
    """The step written once against the API ddpc shares with PyTorch (`lib` is either module)."""
    mods = []
    for w, b in layers:
        lin = lib.nn.Linear(w.shape[1], w.shape[0])
        with lib.no_grad():
            lin.weight.copy_(lib.from_numpy(w))
            lin.bias.copy_(lib.from_numpy(b))
        mods += [lin, lib.nn.ReLU()]
    model = lib.nn.Sequential(*mods[:-1]).to(device)
    opt = lib.optim.Adam(model.parameters(), lr=LR, betas=BETAS, eps=EPS)
    loss_fn = lib.nn.CrossEntropyLoss()
    xt, yt = lib.from_numpy(x).to(device), lib.from_numpy(y).to(device)

    def step():
        opt.zero_grad()
        loss = loss_fn(model(xt), yt)
        loss.backward()
        opt.step()
        return loss

    sync = lib.cuda.synchronize if device != "cpu" else None
    return step, sync


def numpy_step(layers, x, y):
    """The same step written directly in numpy (in-place updates where numpy allows)."""
    params = [p.copy() for wb in layers for p in wb]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    grads = [np.empty_like(p) for p in params]
    t = [0]
    n = x.shape[0]
    rows = np.arange(n)

    def step():
        acts, pre = [x], []
        h = x
        for i in range(3):
            w, b = params[2 * i], params[2 * i + 1]
            z = h @ w.T
            z += b
            pre.append(z)
            h = np.maximum(z, 0) if i < 2 else z
            acts.append(h)
        logits = acts[-1]
        mx = logits.max(1, keepdims=True)
        e = np.exp(logits - mx)
        s = e.sum(1, keepdims=True)
        loss = float(np.mean(np.log(s[:, 0]) + mx[:, 0] - logits[rows, y]))
        g = e / s
        g[rows, y] -= 1
        g /= n
        for i in (2, 1, 0):
            np.matmul(g.T, acts[i], out=grads[2 * i])
            g.sum(0, out=grads[2 * i + 1])
            if i:
                g = g @ params[2 * i]
                g *= pre[i - 1] > 0
        t[0] += 1
        bc1, bc2 = 1 - BETAS[0] ** t[0], 1 - BETAS[1] ** t[0]
        for p, gr, mm, vv in zip(params, grads, m, v):
            mm *= BETAS[0]
            mm += (1 - BETAS[0]) * gr
            vv *= BETAS[1]
            vv += (1 - BETAS[1]) * gr * gr
            denom = np.sqrt(vv)
            denom /= np.sqrt(bc2)
            denom += EPS
            p -= (LR / bc1) * mm / denom
        return loss

    return step, None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=1.0, help="seconds per timing round")
    args = parser.parse_args()
    device = args.device
    print(f"machine: {machine()}")
    threads = f", torch threads {torch.get_num_threads()}" if torch is not None else ""
    print(f"MLP {'-'.join(map(str, SIZES))}, batch {args.batch}, float32, Adam, device {device}{threads}")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((args.batch, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], args.batch)
    layers = initial_weights()

    cases = [("ddpc", *framework_step(ddpc, layers, x, y, device))]
    if device == "cpu":
        cases.append(("numpy (hand-written)", *numpy_step(layers, x, y)))
    if torch is not None:
        cases.append((f"PyTorch {torch.__version__} eager", *framework_step(torch, layers, x, y, device)))
    else:
        print("(torch is not importable: no PyTorch column)")

    first_losses = {}
    for name, step, _ in cases:
        loss = step()
        first_losses[name] = float(loss.detach() if hasattr(loss, "detach") else loss)
    # Rounds alternate between the implementations, so a busy moment on a
    # shared machine slows all of them rather than one; each keeps its best round.
    timings = {name: float("inf") for name, _, _ in cases}
    for _ in range(args.repeat):
        for name, step, sync in cases:
            timings[name] = min(timings[name], best_time(step, repeat=1, min_time=args.min_time, sync=sync))
    base = timings["ddpc"]
    rows = []
    for name, _, _ in cases:
        sec = timings[name]
        rows.append((name, f"{sec * 1e3:.2f}", f"{args.batch / sec:.0f}", f"{sec / base:.2f}",
                     f"{first_losses[name]:.6f}"))
    print_table(["implementation", "ms/step", "samples/s", "ddpc speed-up", "first loss"], rows)
    if torch is not None:
        name = cases[-1][0]
        print(f"ddpc / PyTorch samples/s: {timings[name] / base:.2f}")


if __name__ == "__main__":
    main()

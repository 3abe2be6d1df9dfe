"""Optional: ddpc and PyTorch give the same losses over 20 Adam steps from the
same initial weights and batches (skipped when torch is not installed).

The comparison runs in a child process that imports torch before ddpc, so
that ddpc uses torch's NCCL even where no nvidia-nccl wheel is on sys.path
(the one import order that csrc/comm/nccl_lib.c cannot fix by itself).
"""

from procs import run_torch_case


def test_matches_pytorch_over_20_adam_steps():
    out = run_torch_case(__file__)
    worst = float(out.split()[-1])
    assert worst < 1e-5, out


def _compare():
    import torch  # noqa: F401  (first, see the module docstring)
    import numpy as np

    import ddpc
    import ddpc.nn.functional as F
    from ddpc import nn

    torch.set_num_threads(1)
    ddpc.manual_seed(3)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 5))
    ref = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                              torch.nn.Linear(64, 5))
    with torch.no_grad():
        for p, q in zip(model.parameters(), ref.parameters()):
            q.copy_(torch.from_numpy(np.asarray(p).copy()))
    opt = ddpc.optim.Adam(model.parameters(), lr=3e-3, weight_decay=1e-4)
    topt = torch.optim.Adam(ref.parameters(), lr=3e-3, weight_decay=1e-4)
    rng = np.random.default_rng(0)
    worst = 0.0
    for step in range(20):
        xb = rng.standard_normal((32, 20)).astype(np.float32)
        yb = rng.integers(0, 5, 32)
        opt.zero_grad()
        loss = F.cross_entropy(model(ddpc.tensor(xb)), ddpc.tensor(yb), label_smoothing=0.05)
        loss.backward()
        opt.step()
        topt.zero_grad()
        tloss = torch.nn.functional.cross_entropy(ref(torch.from_numpy(xb)), torch.from_numpy(yb),
                                                  label_smoothing=0.05)
        tloss.backward()
        topt.step()
        print(step, loss.item(), tloss.item())
        worst = max(worst, abs(loss.item() - tloss.item()))
    print("worst", worst)


if __name__ == "__main__":
    _compare()

"""The models layer on a GPU against the host: autograd through every op,
a short training run, and checkpoints of CUDA tensors (all marked gpu)."""

import numpy as np
import pytest

import ddpc
import ddpc.nn.functional as F
from ddpc import nn

pytestmark = pytest.mark.gpu


def grads_on(device, fn, arrays):
    ts = [ddpc.tensor(a, device=device, requires_grad=True) for a in arrays]
    out = fn(*ts)
    out.backward()
    return np.asarray(out.detach().cpu()), [np.asarray(t.grad.cpu()) for t in ts]


CASES = [
    ("arith", lambda a, b: ((a * b + a / (b * b + 1) - 2 * a) ** 2).sum(), [(6, 5), (6, 5)]),
    ("rows", lambda a, r: (a * r + r - a / (r * r + 1)).mean(), [(6, 5), (5,)]),
    ("unary", lambda a: (F.gelu(a) + F.tanh(a) + F.sigmoid(a) + F.relu(a) + a.exp() + (a * a + 1).log()).sum(),
     [(7, 3)]),
    ("reduce", lambda a: (a.sum(0) * a.sum(1, keepdim=True).sum()).sum() + a.mean(1).sum() + a.mean(), [(4, 6)]),
    ("shape", lambda a: (ddpc.cat([a[1:], a.T.t()]).reshape(-1) * 2).sum() + ddpc.stack([a[0], a[2]]).sum(),
     [(4, 3)]),
    ("matmul", lambda a, b: (a @ b).tanh().sum(), [(5, 4), (4, 3)]),
    ("linear_ce", lambda x, w, b: F.cross_entropy(F.linear(x, w, b), ddpc.tensor([0, 2, 1, -100, 2],
                                                                                   device=x.device),
                                                  label_smoothing=0.1), [(5, 4), (3, 4), (3,)]),
    ("mse", lambda a, b: F.mse_loss(a, b) + F.mse_loss(a, b, reduction="sum"), [(4, 4), (4, 4)]),
    ("softmax", lambda a: (F.softmax(a) * F.log_softmax(a * 2)).sum(), [(6, 37)]),
    ("layer_norm", lambda x, w, b: (F.layer_norm(x, (3, 70), w, b) ** 2 * x).sum(), [(5, 3, 70), (3, 70), (3, 70)]),
    ("embedding", lambda w: (F.embedding(ddpc.tensor([[1, 4, 1], [0, 4, 4]], device=w.device), w, padding_idx=0)
                             ** 2).sum(), [(6, 5)]),
    ("extremes", lambda a: a.max(1).values.sum() + (a.min(0).values * 2).sum() + a.max(), [(7, 9)]),
    ("broadcast", lambda a, b, c: ((a - b) * (a / (b * b + 1)) * c).sum(), [(4, 5), (4, 1), (3, 1, 5)]),
    ("indexing", lambda a: ((a[:, 1:, ::2] * 2).sum() + a.permute(2, 0, 1)[1].sum() + a[[0, 2, 0], :, [1, 3, 1]].sum()
                            + (a[a.detach() > 0] ** 2).sum() + a[:1].expand(3, 4, 5).repeat(1, 2, 1).sum()),
     [(3, 4, 5)]),
]


@pytest.mark.parametrize("name,fn,shapes", CASES, ids=[c[0] for c in CASES])
def test_autograd_on_cuda_matches_cpu(name, fn, shapes):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    out_c, g_c = grads_on("cpu", fn, arrays)
    out_g, g_g = grads_on("cuda", fn, arrays)
    np.testing.assert_allclose(out_g, out_c, rtol=1e-4, atol=1e-5)
    for a, b in zip(g_g, g_c):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_dropout_mask_is_the_same_on_cuda():
    x = ddpc.ones(1000)
    ddpc.manual_seed(5)
    a = F.dropout(x, 0.3)
    ddpc.manual_seed(5)
    b = F.dropout(x.cuda(), 0.3)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b.cpu()))


def _train(device, steps=5):
    ddpc.manual_seed(1)
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 4)).to(device)
    opt = ddpc.optim.AdamW(model.parameters(), lr=1e-2)
    sgd_model = nn.Linear(10, 4).to(device)
    sgd = ddpc.optim.SGD(sgd_model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3)
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(steps):
        x = ddpc.tensor(rng.standard_normal((16, 10)).astype(np.float32), device=device)
        y = ddpc.tensor(rng.integers(0, 4, 16), device=device)
        for m, o in ((model, opt), (sgd_model, sgd)):
            o.zero_grad()
            loss = F.cross_entropy(m(x), y)
            loss.backward()
            o.step()
            losses.append(loss.item())
    return losses, [np.asarray(p.cpu()) for p in list(model.parameters()) + list(sgd_model.parameters())]


def test_training_on_cuda_matches_cpu():
    lc, pc = _train("cpu")
    lg, pg = _train("cuda")
    np.testing.assert_allclose(lg, lc, rtol=1e-4, atol=1e-5)
    for a, b in zip(pg, pc):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)


def test_module_moves_and_checkpoints_cuda_tensors(tmp_path):
    model = nn.Linear(3, 2).cuda()
    assert all(p.is_cuda for p in model.parameters())
    ddpc.save(model.state_dict(), tmp_path / "m.ddpc")
    back = ddpc.load(tmp_path / "m.ddpc")
    assert back["weight"].is_cuda
    host = ddpc.load(tmp_path / "m.ddpc", map_location="cpu")
    assert not host["weight"].is_cuda
    np.testing.assert_array_equal(np.asarray(host["weight"]), np.asarray(model.weight.cpu()))
    model.cpu()
    assert not model.weight.is_cuda


def test_assignment_through_indices_on_cuda_matches_cpu():
    base = np.random.default_rng(3).standard_normal((4, 5, 6)).astype(np.float32)
    results = []
    for device in ("cpu", "cuda"):
        x = ddpc.tensor(base, device=device)
        x[:, 0] = 1.5
        x[::2, 1:4, ::-2] += 2
        x[[3, 0], :, [5, 1]] = ddpc.tensor(np.arange(5, dtype=np.float32), device=device)
        x[x > 1.9] = 0
        x.transpose(0, 2)[1].mul_(3)  # written back through the copy
        results.append(x.cpu().numpy())
    np.testing.assert_array_equal(results[0], results[1])


def test_pointwise_loss_reductions_over_millions_of_elements_match_the_host():
    rng = np.random.default_rng(11)
    x, y = rng.uniform(0.05, 0.95, (2, 3_000_001))
    for dt, rtol in ((ddpc.float64, 1e-12), (ddpc.float32, 1e-5)):
        for loss in (F.mse_loss, F.l1_loss, F.binary_cross_entropy, F.binary_cross_entropy_with_logits):
            for reduction in ("mean", "sum"):
                got, want = (loss(ddpc.tensor(x, dtype=dt, device=d), ddpc.tensor(y, dtype=dt, device=d),
                                  reduction=reduction).item() for d in ("cuda", "cpu"))
                assert got == pytest.approx(want, rel=rtol), (loss.__name__, reduction, dt)

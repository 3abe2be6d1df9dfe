"""Optional: ddpc.amp against torch.amp (skipped when torch is not
installed): an MLP's loss and gradients under CPU autocast, the dtypes of
the products with an added term, prelu, LSTM and mv under it (and in a
float32 region, which turns it off), the dtypes of the outputs and states
of each recurrent layer and cell, plain and packed, and GradScaler's scale sequence and
parameters over steps with injected overflows, after update(new_scale),
near float32's largest scale, over iterables and sparse gradients; and the
ops of PyTorch's CPU autocast float32 list (with a few of their neighbours
that stay in 16 bits, or that both refuse) under bfloat16 and float16 CPU
autocast: dtypes, values and gradients, group by group.

Each comparison runs in a child process that imports torch before ddpc (see
test_nn_torch.py) and fails there, printing what it measured.
"""

import sys

import pytest
from procs import run_torch_case


@pytest.mark.parametrize("case", ["autocast", "autocast_dtypes", "rnn_autocast_dtypes", "scaler", "scaler_without_gpu", "scaler_more"])
def test_matches_pytorch(case):
    out = run_torch_case(__file__, case)
    assert out.strip().endswith("ok"), out


@pytest.mark.parametrize("group", ["linalg", "fft", "reductions", "pooling", "losses"])
def test_cpu_autocast_float32_ops_match_pytorch(group):
    out = run_torch_case(__file__, "float32_ops", group)
    assert out.strip().endswith("ok"), out


def _models(seed=0):
    """The same MLP in ddpc and in torch."""
    import numpy as np
    import torch

    import ddpc

    rng = np.random.default_rng(seed)
    shapes = [(32, 16), (32,), (4, 32), (4,)]
    arrays = [(rng.standard_normal(s) * 0.3).astype(np.float32) for s in shapes]
    ours = ddpc.nn.Sequential(ddpc.nn.Linear(16, 32), ddpc.nn.ReLU(), ddpc.nn.Linear(32, 4))
    theirs = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    with ddpc.no_grad(), torch.no_grad():
        for p, q, a in zip(ours.parameters(), theirs.parameters(), arrays):
            p.copy_(ddpc.tensor(a))
            q.copy_(torch.tensor(a))
    return ours, theirs


def _data(step=0):
    import numpy as np

    rng = np.random.default_rng(100 + step)
    return rng.standard_normal((24, 16)).astype(np.float32), rng.integers(0, 4, 24)


def _case_autocast():
    import numpy as np
    import torch

    import ddpc

    ours, theirs = _models()
    x, y = _data()
    with ddpc.autocast("cpu"):
        h = ours(ddpc.tensor(x))
        loss = ddpc.nn.functional.cross_entropy(h, ddpc.tensor(y))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        th = theirs(torch.tensor(x))
        tloss = torch.nn.functional.cross_entropy(th, torch.tensor(y))
    assert str(h.dtype) == "ddpc.bfloat16" and th.dtype == torch.bfloat16
    assert str(loss.dtype) == "ddpc.float32" and tloss.dtype == torch.float32
    # bfloat16 keeps 8 bits: the logits may differ by a rounding step where the
    # float32 accumulations before the rounding differ in their last bits.
    np.testing.assert_allclose(h.float().numpy(), th.float().detach().numpy(), rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(loss.item(), tloss.item(), rtol=2e-3)
    loss.backward()
    tloss.backward()
    for p, q in zip(ours.parameters(), theirs.parameters()):
        assert str(p.grad.dtype) == "ddpc.float32" and q.grad.dtype == torch.float32
        g, tg = p.grad.numpy(), q.grad.numpy()
        np.testing.assert_allclose(g, tg, rtol=0, atol=2e-2 * np.abs(tg).max())


def _case_scaler():
    import numpy as np
    import torch

    import ddpc

    ours, theirs = _models(1)
    opt = ddpc.optim.SGD(ours.parameters(), lr=0.05, momentum=0.9)
    topt = torch.optim.SGD(theirs.parameters(), lr=0.05, momentum=0.9)
    scaler = ddpc.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=2)
    tscaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=2)
    scales, tscales = [], []
    for step in range(8):
        x, y = _data(step)
        if step in (2, 5):
            x[3, 7] = np.inf
        opt.zero_grad()
        topt.zero_grad()
        scaler.scale(ddpc.nn.functional.cross_entropy(ours(ddpc.tensor(x)), ddpc.tensor(y))).backward()
        tscaler.scale(torch.nn.functional.cross_entropy(theirs(torch.tensor(x)), torch.tensor(y))).backward()
        if step == 6:
            scaler.unscale_(opt)
            tscaler.unscale_(topt)
            ddpc.nn.utils.clip_grad_norm_(ours.parameters(), 0.5)
            torch.nn.utils.clip_grad_norm_(theirs.parameters(), 0.5)
        scaler.step(opt)
        tscaler.step(topt)
        scaler.update()
        tscaler.update()
        scales.append(scaler.get_scale())
        tscales.append(tscaler.get_scale())
    print("scales", scales, tscales)
    assert scales == tscales
    for p, q in zip(ours.parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6)


def _case_scaler_without_gpu():
    import torch

    import ddpc

    if torch.cuda.is_available() or ddpc.cuda.is_available():
        return
    made = [(ddpc.cuda.amp.GradScaler(), torch.cuda.amp.GradScaler()),
            (ddpc.amp.GradScaler("cuda", init_scale=8.0), torch.amp.GradScaler("cuda", init_scale=8.0)),
            (ddpc.amp.GradScaler("cpu", init_scale=8.0), torch.amp.GradScaler("cpu", init_scale=8.0))]
    ours = [(s.is_enabled(), s.get_scale(), s.state_dict()) for s, _ in made]
    theirs = [(s.is_enabled(), s.get_scale(), s.state_dict()) for _, s in made]
    print("scalers", ours, theirs)
    assert ours == theirs


def _case_autocast_dtypes():
    import torch

    import ddpc

    def dtypes(lib):
        a, b, v = lib.ones(4, 8), lib.ones(8, 5), lib.ones(8)
        with lib.autocast("cpu", dtype=lib.bfloat16):
            out = {"addmm": lib.addmm(lib.zeros(5), a, b), "baddbmm": lib.baddbmm(lib.zeros(1, 4, 5), a[None], b[None]),
                   "addbmm": lib.addbmm(lib.zeros(4, 5), a[None], b[None]),
                   "prelu": lib.nn.functional.prelu(a, lib.ones(1)), "LSTM": lib.nn.LSTM(8, 4)(a[None])[0],
                   "mv": lib.mv(a, v), "mm": lib.mm(a, b)}
            with lib.autocast("cpu", dtype=lib.float32):  # not a CPU autocast dtype: autocast off within
                out["mm in a float32 region"] = lib.mm(a, b)
        return {k: str(t.dtype).split(".")[-1] for k, t in out.items()}

    ours, theirs = dtypes(ddpc), dtypes(torch)
    print("dtypes", ours, theirs)
    assert ours == theirs


def _case_rnn_autocast_dtypes():
    import numpy as np
    import torch

    import ddpc

    x = np.random.default_rng(0).standard_normal((5, 2, 3)).astype(np.float32)

    def dtype_names(out):
        if hasattr(out, "batch_sizes"):
            return "packed " + dtype_names(out.data)
        if isinstance(out, tuple):
            return tuple(dtype_names(o) for o in out)
        return str(out.dtype).split(".")[-1]

    def dtypes(lib):
        lib.manual_seed(0)
        out = {}
        with lib.autocast("cpu", dtype=lib.bfloat16):
            for cls in ("RNN", "GRU", "LSTM"):
                for layers, bidirectional in ((1, False), (2, True)):
                    layer = getattr(lib.nn, cls)(3, 4, num_layers=layers, bidirectional=bidirectional)
                    for packed in (False, True):
                        inp = lib.tensor(x)
                        if packed:
                            inp = lib.nn.utils.rnn.pack_padded_sequence(inp, [5, 3])
                        out[cls, layers, bidirectional, packed] = dtype_names(layer(inp))
            layer = lib.nn.RNN(3, 4, nonlinearity="relu")
            out["RNN relu"] = dtype_names(layer(lib.tensor(x)))
            for cls in ("RNNCell", "GRUCell", "LSTMCell"):
                cell = getattr(lib.nn, cls)(3, 4)
                out[cls] = dtype_names(cell(lib.tensor(x[0])))
                out[cls, "unbatched"] = dtype_names(cell(lib.tensor(x[0, 0])))
        return out

    ours, theirs = dtypes(ddpc), dtypes(torch)
    print("rnn dtypes", ours, theirs)
    assert ours == theirs


def _case_scaler_more():
    import numpy as np
    import torch

    import ddpc

    def trajectory(lib):
        p = lib.ones(2, requires_grad=True)
        opt = lib.optim.SGD([p], lr=0.1)
        sc = lib.amp.GradScaler("cpu", init_scale=8.0, growth_interval=3)
        out = []
        for i in range(6):
            opt.zero_grad()
            sc.scale((p * p).sum()).backward()
            sc.step(opt)
            sc.update(1024.0) if i == 1 else sc.update()
            out.append((sc.get_scale(), sc.state_dict()["_growth_tracker"]))
        scaled = sc.scale({"a": lib.ones(1), "b": [lib.ones(1)]}.values())
        kinds = [type(scaled).__name__] + [type(x).__name__ for x in scaled]
        return out, kinds

    def sparse(lib, bad):
        lib.manual_seed(0)
        emb = lib.nn.Embedding(5, 3, sparse=True)
        with lib.no_grad():
            emb.weight.copy_(lib.tensor(np.arange(15, dtype=np.float32).reshape(5, 3)))
        opt = lib.optim.SGD(emb.parameters(), lr=0.1)
        sc = lib.amp.GradScaler("cpu", init_scale=4.0)
        sc.scale(emb(lib.tensor(np.array([1, 1, 2]))).sum() * bad).backward()
        sc.step(opt)
        sc.update()
        return emb.weight.detach().numpy(), sc.get_scale()

    def near_float32_max(lib):
        p = lib.ones(2, requires_grad=True)
        opt = lib.optim.SGD([p], lr=0.1)
        sc = lib.amp.GradScaler("cpu", init_scale=2.0 ** 127, growth_interval=1)
        for _ in range(3):
            opt.zero_grad()
            sc.scale(p.sum()).backward()
            sc.step(opt)
            sc.update()
        return sc.get_scale(), sc.state_dict()["_growth_tracker"], p.detach().numpy().tolist()

    ours, theirs = trajectory(ddpc), trajectory(torch)
    print("scaler", ours, theirs)
    assert ours == theirs
    ours, theirs = near_float32_max(ddpc), near_float32_max(torch)
    print("near float32's max", ours, theirs)
    assert ours == theirs
    for bad in (1.0, float("inf")):
        (w, scale), (tw, tscale) = sparse(ddpc, bad), sparse(torch, bad)
        print("sparse", bad, scale, tscale)
        assert scale == tscale
        np.testing.assert_allclose(w, tw, rtol=1e-6)


# ---- PyTorch's CPU autocast float32 list ----------------------------------------------------
# Each group maps a name to (arrays, fn): fn(lib, F, *inputs) runs under CPU
# autocast on the arrays as they come out of a matmul there (in 16 bits).


def _linalg_ops(np):
    rng = np.random.default_rng(0)
    eye = np.eye(4, dtype=np.float32)
    a, m, b = (rng.standard_normal(s).astype(np.float32) for s in ((4, 4), (4, 4), (4, 2)))
    a += 4 * eye
    spd = m @ m.T + 4 * eye
    low = np.tril(m, -1) + 3 * eye
    tall, rhs, tau = (rng.standard_normal(s).astype(np.float32) for s in ((5, 3), (5, 2), (3,)))
    la = lambda lib: lib.linalg  # noqa: E731
    return {
        "inverse": ([a], lambda lib, F, x: lib.inverse(x)),
        "Tensor.inverse": ([a], lambda lib, F, x: x.inverse()),
        "pinverse": ([a], lambda lib, F, x: lib.pinverse(x)),
        # the factor detached: PyTorch's gradient reaches its unread upper triangle too, ddpc's does not
        "cholesky_solve": ([b, low], lambda lib, F, x, f: lib.cholesky_solve(x, f.detach())),
        "cholesky_inverse": ([low], lambda lib, F, f: lib.cholesky_inverse(f.detach())),
        "lu_solve": ([b, a], lambda lib, F, x, y: lib.lu_solve(x, *la(lib).lu_factor(y.detach().float()))),
        "triangular_solve": ([b, low.T.copy()], lambda lib, F, x, u: lib.triangular_solve(x, u)[0]),
        "svd": ([a], lambda lib, F, x: lib.svd(x)[1]),
        "linalg.inv": ([a], lambda lib, F, x: la(lib).inv(x)),
        "linalg.inv_ex": ([a], lambda lib, F, x: la(lib).inv_ex(x)[0]),
        "linalg.solve": ([a, b], lambda lib, F, x, y: la(lib).solve(x, y)),
        "linalg.cholesky": ([spd], lambda lib, F, x: la(lib).cholesky(x)),
        "linalg.cholesky_ex": ([spd], lambda lib, F, x: la(lib).cholesky_ex(x)[0]),
        "linalg.cond": ([a], lambda lib, F, x: la(lib).cond(x)),
        "linalg.matrix_rank": ([a], lambda lib, F, x: la(lib).matrix_rank(x)),
        "linalg.svdvals": ([a], lambda lib, F, x: la(lib).svdvals(x)),
        "linalg.svd": ([a], lambda lib, F, x: la(lib).svd(x)[1]),
        "linalg.eigvalsh": ([spd], lambda lib, F, x: la(lib).eigvalsh(x)),
        "linalg.eigh": ([spd], lambda lib, F, x: la(lib).eigh(x)[0]),
        "linalg.qr": ([a], lambda lib, F, x: la(lib).qr(x)[1]),
        "linalg.householder_product": ([tall[:4], tau], lambda lib, F, x, t: la(lib).householder_product(x, t)),
        "linalg.tensorinv": ([a], lambda lib, F, x: la(lib).tensorinv(x.reshape(4, 2, 2), ind=1)),
        "linalg.tensorsolve": ([a, b.reshape(2, 4)[:, :2].copy()],
                               lambda lib, F, x, y: la(lib).tensorsolve(x.reshape(2, 2, 4), y)),
        "linalg.lstsq": ([tall, rhs], lambda lib, F, x, y: la(lib).lstsq(x, y)[0]),
        # not on the list: both refuse 16-bit matrices
        "linalg.pinv": ([a], lambda lib, F, x: la(lib).pinv(x)),
        "linalg.solve_ex": ([a, b], lambda lib, F, x, y: la(lib).solve_ex(x, y)[0]),
        "linalg.lu_factor": ([a], lambda lib, F, x: la(lib).lu_factor(x)[0]),
        "linalg.det": ([a], lambda lib, F, x: la(lib).det(x)),
    }


def _fft_ops(np):
    rng = np.random.default_rng(1)
    x, x2 = rng.standard_normal(8).astype(np.float32), rng.standard_normal((4, 6)).astype(np.float32)
    names = ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "fft2", "ifft2", "fftn", "ifftn", "rfft2", "rfftn",
             "irfft2", "irfftn", "hfft2", "ihfftn")  # the last two are not on the list: both refuse 16 bits
    ops = {f"fft.{name}": ([x if name[-1] == "t" else x2], lambda lib, F, t, name=name: getattr(lib.fft, name)(t))
           for name in names}
    ops["fft.rfft with out="] = ([x], lambda lib, F, t: lib.fft.rfft(t, out=lib.empty(5, dtype=lib.complex64)))
    return ops


def _reduction_ops(np):
    rng = np.random.default_rng(2)
    r = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    q = lambda lib, t: lib.tensor([0.25, 0.5]).to(dtype=t.dtype)  # noqa: E731
    return {
        "prod": ([r(5)], lambda lib, F, t: lib.prod(t)),
        "prod over a dim": ([r(3, 4)], lambda lib, F, t: lib.prod(t, 1)),
        "prod to bfloat16": ([r(3, 4)], lambda lib, F, t: lib.prod(t, 1, dtype=lib.bfloat16)),
        "Tensor.prod": ([r(5)], lambda lib, F, t: t.prod()),
        "trace": ([r(3, 3)], lambda lib, F, t: lib.trace(t)),
        "Tensor.trace": ([r(3, 3)], lambda lib, F, t: t.trace()),
        "quantile": ([r(7)], lambda lib, F, t: lib.quantile(t, 0.3)),
        "quantile of a 16-bit q": ([r(2, 7)], lambda lib, F, t: lib.quantile(t, q(lib, t), dim=1)),
        "Tensor.quantile": ([r(7)], lambda lib, F, t: t.quantile(0.7)),
        "nanquantile": ([r(7)], lambda lib, F, t: lib.nanquantile(
            lib.where(lib.tensor([False, True] + [False] * 5), float("nan"), t), 0.4)),
        "cdist": ([r(3, 2), r(4, 2)], lambda lib, F, x, y: lib.cdist(x, y)),
        "cdist by a matmul": ([r(30, 3), r(28, 3)], lambda lib, F, x, y: lib.cdist(x, y)),
        "polar": ([np.abs(r(4)) + 0.1, r(4)], lambda lib, F, x, y: lib.polar(x, y)),
        "view_as_complex": ([r(3, 2)], lambda lib, F, t: lib.view_as_complex(t)),
        "sum": ([r(5)], lambda lib, F, t: lib.sum(t)),  # float32 on cuda only
    }


def _pooling_ops(np):
    rng = np.random.default_rng(3)
    r = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    line, plane, volume = r(1, 2, 6), r(1, 2, 4, 4), r(1, 2, 4, 4, 4)
    samples2, samples3 = (rng.uniform(0, 1, s).astype(np.float32) for s in ((1, 2, 2), (1, 2, 3)))
    grid2, grid3 = (rng.uniform(-1, 1, s).astype(np.float32) for s in ((1, 3, 3, 2), (1, 2, 2, 2, 3)))

    def unpool(nd):
        def fn(lib, F, t):
            pool, unpool = getattr(F, f"max_pool{nd}d"), getattr(F, f"max_unpool{nd}d")
            return unpool(*pool(t, 2, return_indices=True), 2)
        return fn

    ops = {
        "avg_pool3d": ([volume], lambda lib, F, t: F.avg_pool3d(t, 2)),
        "nn.AvgPool3d": ([volume], lambda lib, F, t: lib.nn.AvgPool3d(2)(t)),
        "max_pool3d": ([volume], lambda lib, F, t: F.max_pool3d(t, 2)),
        "max_pool3d with indices": ([volume], lambda lib, F, t: F.max_pool3d(t, 2, return_indices=True)[0]),
        "adaptive_avg_pool3d": ([volume], lambda lib, F, t: F.adaptive_avg_pool3d(t, 3)),
        "adaptive_max_pool3d": ([volume], lambda lib, F, t: F.adaptive_max_pool3d(t, 3)),
        "fractional_max_pool2d": ([r(1, 2, 6, 6)], lambda lib, F, t: F.fractional_max_pool2d(
            t, 2, output_size=3, _random_samples=lib.tensor(samples2))),
        "fractional_max_pool3d": ([r(1, 2, 6, 6, 6)], lambda lib, F, t: F.fractional_max_pool3d(
            t, 2, output_size=3, _random_samples=lib.tensor(samples3))),
        "lp_pool3d": ([volume], lambda lib, F, t: F.lp_pool3d(t, 2, 2)),
        "local_response_norm 4-d": ([plane], lambda lib, F, t: F.local_response_norm(t, 3)),
        "grid_sample": ([plane, grid2], lambda lib, F, t, g: F.grid_sample(t, g, align_corners=False)),
        "grid_sample 3-d": ([volume, grid3], lambda lib, F, t, g: F.grid_sample(t, g, align_corners=True)),
        "pad reflect 1-d": ([line], lambda lib, F, t: F.pad(t, (2, 1), mode="reflect")),
        "pad reflect 2-d": ([plane], lambda lib, F, t: F.pad(t, (1, 2, 2, 1), mode="reflect")),
        "nn.ReflectionPad2d": ([plane], lambda lib, F, t: lib.nn.ReflectionPad2d(1)(t)),
        "pad replicate 1-d": ([line], lambda lib, F, t: F.pad(t, (2, 1), mode="replicate")),
        "pad replicate 2-d": ([plane], lambda lib, F, t: F.pad(t, (1, 2, 2, 1), mode="replicate")),
        "pad replicate 3-d": ([volume], lambda lib, F, t: F.pad(t, (1, 1, 2, 0, 0, 2), mode="replicate")),
        # not on the list: they keep 16 bits
        "avg_pool2d": ([plane], lambda lib, F, t: F.avg_pool2d(t, 2)),
        "local_response_norm 3-d": ([line], lambda lib, F, t: F.local_response_norm(t, 3)),
        "pad reflect 3-d": ([volume], lambda lib, F, t: F.pad(t, (1, 1, 1, 1, 1, 1), mode="reflect")),
        "pad circular": ([plane], lambda lib, F, t: F.pad(t, (1, 1, 1, 1), mode="circular")),
        "pad constant": ([plane], lambda lib, F, t: F.pad(t, (1, 1, 1, 1))),
        "conv1d with reflect padding": ([line], lambda lib, F, t: F.conv1d(F.pad(t, (1, 1), mode="reflect"),
                                                                            lib.ones(3, 2, 3))),
    }
    ops.update({f"max_unpool{nd}d": ([(line, plane, volume)[nd - 1]], unpool(nd)) for nd in (1, 2, 3)})
    return ops


def _loss_ops(np):
    rng = np.random.default_rng(4)
    r = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    x, y, z = r(3, 4), r(3, 4), r(3, 4)
    probs, labels = rng.uniform(0.05, 0.95, (2, 3, 4)).astype(np.float32)
    signs = np.float32([[1, -1, 1, -1]] * 3)
    logits = r(6, 2, 4)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    t = lambda lib, values: lib.tensor(np.asarray(values))  # noqa: E731
    return {
        "mse_loss": ([x, y], lambda lib, F, a, b: F.mse_loss(a, b)),
        "l1_loss": ([x, y], lambda lib, F, a, b: F.l1_loss(a, b)),
        "smooth_l1_loss": ([x, y], lambda lib, F, a, b: F.smooth_l1_loss(a, b)),
        "huber_loss": ([x, y], lambda lib, F, a, b: F.huber_loss(a, b, delta=0.5)),
        "binary_cross_entropy": ([probs, labels], lambda lib, F, a, b: F.binary_cross_entropy(a, b)),
        "binary_cross_entropy_with_logits": ([x, labels],
                                             lambda lib, F, a, b: F.binary_cross_entropy_with_logits(a, b)),
        "kl_div": ([x, y], lambda lib, F, a, b: F.kl_div(a, b, reduction="batchmean", log_target=True)),
        "nll_loss": ([x], lambda lib, F, a: F.nll_loss(a, t(lib, [0, 3, 2]))),
        "cross_entropy": ([x], lambda lib, F, a: F.cross_entropy(a, t(lib, [0, 3, 2]))),
        "ctc_loss": ([log_probs], lambda lib, F, a: F.ctc_loss(a, t(lib, [[1, 2], [3, 3]]), t(lib, [6, 5]),
                                                               t(lib, [2, 2]))),
        "cosine_embedding_loss": ([x, y], lambda lib, F, a, b: F.cosine_embedding_loss(a, b, t(lib, [1, -1, 1]))),
        "hinge_embedding_loss": ([x], lambda lib, F, a: F.hinge_embedding_loss(a, t(lib, signs))),
        "poisson_nll_loss": ([x, np.abs(y)], lambda lib, F, a, b: F.poisson_nll_loss(a, b)),
        "margin_ranking_loss": ([x, y], lambda lib, F, a, b: F.margin_ranking_loss(a, b, t(lib, signs))),
        "soft_margin_loss": ([x], lambda lib, F, a: F.soft_margin_loss(a, t(lib, signs))),
        "triplet_margin_loss": ([x, y, z], lambda lib, F, a, b, c: F.triplet_margin_loss(a, b, c)),
        "nn.TripletMarginLoss": ([x, y, z], lambda lib, F, a, b, c: lib.nn.TripletMarginLoss(p=1)(a, b, c)),
        "multi_margin_loss": ([x], lambda lib, F, a: F.multi_margin_loss(a, t(lib, [0, 3, 2]))),
        "multilabel_margin_loss": ([x], lambda lib, F, a: F.multilabel_margin_loss(
            a, t(lib, [[0, 1, -1, 0], [2, -1, 0, 0], [3, 1, 0, -1]]))),
        # not on the list: they keep 16 bits
        "gaussian_nll_loss": ([x, y, np.abs(z) + 0.5], lambda lib, F, a, b, c: F.gaussian_nll_loss(a, b, c)),
        "multilabel_soft_margin_loss": ([x, labels], lambda lib, F, a, b: F.multilabel_soft_margin_loss(a, b)),
        "triplet_margin_with_distance_loss": ([x, y, z], lambda lib, F, a, b, c:
                                              F.triplet_margin_with_distance_loss(a, b, c)),
    }


_FLOAT32_OPS = {"linalg": _linalg_ops, "fft": _fft_ops, "reductions": _reduction_ops, "pooling": _pooling_ops,
                "losses": _loss_ops}


def _autocast_run(np, lib, dtype, arrays, fn):
    """(error, result, gradients): fn on the arrays rounded to ``dtype`` by a
    matmul under CPU autocast to it, and the float32 arrays' gradients of a
    weighted sum of the result (its real and imaginary parts if complex)."""
    leaves = [lib.tensor(a, requires_grad=True) for a in arrays]
    try:
        with lib.autocast("cpu", dtype=getattr(lib, dtype)):
            out = fn(lib, lib.nn.functional, *[x @ lib.eye(x.shape[-1]) for x in leaves])
    except Exception as e:  # noqa: BLE001  (each library raises its own kind)
        return e, None, None
    grads = None
    if out.requires_grad:
        parts = lib.view_as_real(lib.resolve_conj(out)) if out.dtype.is_complex else out.float()
        weights = np.random.default_rng(5).standard_normal(tuple(parts.shape)).astype(np.float32)
        (parts * lib.tensor(weights)).sum().backward()
        grads = [x.grad for x in leaves]
    return None, out, grads


def _numpy(np, t):
    if t.dtype.is_complex:
        return t.detach().resolve_conj().numpy().astype(np.complex128)
    return (t.detach().float() if str(t.dtype).endswith("16") else t.detach()).numpy().astype(np.float64)


def _case_float32_ops(group):
    import numpy as np
    import torch

    import ddpc

    failures = []
    for dtype in ("bfloat16", "float16"):
        for name, (arrays, fn) in _FLOAT32_OPS[group](np).items():
            what = f"{name} under {dtype} autocast"
            terr, want, want_grads = _autocast_run(np, torch, dtype, arrays, fn)
            err, got, got_grads = _autocast_run(np, ddpc, dtype, arrays, fn)
            try:
                if terr is not None:
                    assert err is not None, f"PyTorch raises {terr!r}, ddpc gives {got.dtype}"
                    continue
                assert err is None, f"ddpc raises {err!r}, PyTorch gives {want.dtype}"
                dt, tdt = str(got.dtype).split(".")[-1], str(want.dtype).split(".")[-1]
                assert dt == tdt, f"dtype {dt}, PyTorch's {tdt}"
                assert tuple(got.shape) == tuple(want.shape), f"shape {tuple(got.shape)}, PyTorch's {tuple(want.shape)}"
                tol = 1e-2 if dt.endswith("16") else 1e-4
                np.testing.assert_allclose(_numpy(np, got), _numpy(np, want), rtol=tol, atol=tol, equal_nan=True)
                assert (got_grads is None) == (want_grads is None), "differentiable in one library only"
                for i, (g, tg) in enumerate(zip(got_grads or (), want_grads or ())):
                    assert (g is None) == (tg is None), f"input {i} gets a gradient in one library only"
                    if tg is not None:
                        scale = max(1.0, float(np.abs(_numpy(np, tg)).max()))
                        np.testing.assert_allclose(_numpy(np, g), _numpy(np, tg), rtol=1e-2, atol=1e-2 * scale,
                                                   err_msg=f"gradient of input {i}")
            except AssertionError as e:
                failures.append(f"{what}: {e}")
    print("\n".join(failures))
    assert not failures, f"{len(failures)} ops differ from PyTorch's"


if __name__ == "__main__":
    import warnings

    import torch  # noqa: F401  (first, see the module docstring)

    warnings.simplefilter("ignore")
    globals()["_case_" + sys.argv[1]](*sys.argv[2:])
    print("ok")

"""Optional: the smaller PyTorch functions of test_api_gaps.py against
PyTorch's own (skipped when torch is not installed): values and gradients
of pdist, fmax, fmin, float_power and diag_embed; isin, diagflat,
unravel_index, unique_consecutive and the windows; gumbel_softmax's class
frequencies and straight-through gradient structure; nn.utils's batch-norm
fusion and older spectral_norm with the same weights and vectors; the
torch-level forms of nn.functional's ops called with torch's signatures;
the Tensor aliases, their in-place forms and the in-place view ops;
fractional max pooling with the same random samples.

Each comparison runs in a child process that imports torch before ddpc (see
test_nn_torch.py) and fails there, printing what it measured.
"""

import sys

import numpy as np
import pytest
from procs import run_torch_case


@pytest.mark.parametrize("case", ["functions", "nn_utils", "torch_level", "tensor_methods",
                                  "fractional"])
def test_matches_pytorch(case):
    out = run_torch_case(__file__, case)
    assert out.strip().endswith("ok"), out


def _value_and_grads(lib, fn, arrays, weight):
    ts = [lib.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    y = fn(*ts)
    if y.requires_grad:
        (y * lib.tensor(weight)).sum().backward()
    return [np.asarray(y.detach())] + [np.asarray(t.grad) for t in ts if t.grad is not None]


def _case_functions():
    import torch

    import ddpc

    rng = np.random.default_rng(0)
    checked = 0

    def same(name, fn_d, fn_t, arrays, tol=1e-12):
        nonlocal checked
        y = np.asarray(fn_t(*[torch.tensor(a) for a in arrays]))
        weight = rng.standard_normal(y.shape)
        got = _value_and_grads(ddpc, fn_d, arrays, weight)
        want = _value_and_grads(torch, fn_t, arrays, weight)
        assert len(got) == len(want), name
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, atol=tol, err_msg=name)
        checked += 1

    x = rng.standard_normal((6, 4))
    for p in (0.5, 1, 2, 3, np.inf):
        same(f"pdist p={p}", lambda t: ddpc.nn.functional.pdist(t, p), lambda t: torch.nn.functional.pdist(t, p), [x])
    a, b = rng.standard_normal(8), rng.standard_normal(8)
    a[[1, 3]], b[[3, 5]], b[6] = np.nan, np.nan, a[6]
    for name in ("fmax", "fmin"):
        same(name, getattr(ddpc, name), getattr(torch, name), [a, b])
    same("float_power", ddpc.float_power, torch.float_power, [np.abs(a) + 0.5, b * 0 + 1.5])
    same("float_power int", lambda t: ddpc.float_power(t, 3), lambda t: torch.float_power(t, 3),
         [rng.integers(-4, 4, 5)])
    for offset, d1, d2 in ((0, -2, -1), (1, 0, 2), (-2, 3, 1)):
        same(f"diag_embed {offset}", lambda t: ddpc.diag_embed(t, offset, d1, d2),
             lambda t: torch.diag_embed(t, offset, d1, d2), [rng.standard_normal((2, 3, 4))])
    for offset in (0, 2, -1):
        same(f"diagflat {offset}", lambda t: ddpc.diagflat(t, offset), lambda t: torch.diagflat(t, offset),
             [rng.standard_normal((2, 2))])

    e, t = rng.integers(0, 30, (5, 6)), rng.integers(0, 30, 9)
    for invert in (False, True):
        got = np.asarray(ddpc.isin(ddpc.tensor(e), ddpc.tensor(t), invert=invert))
        assert (got == torch.isin(torch.tensor(e), torch.tensor(t), invert=invert).numpy()).all()
        checked += 1
    fe, ft = np.array([1.0, np.nan, 2.5, -np.inf]), np.array([np.nan, 2.5, -np.inf])
    assert (np.asarray(ddpc.isin(ddpc.tensor(fe), ddpc.tensor(ft)))
            == torch.isin(torch.tensor(fe), torch.tensor(ft)).numpy()).all()

    flat = rng.integers(-60, 60, (3, 4))
    for g, w in zip(ddpc.unravel_index(ddpc.tensor(flat), (3, 4, 5)),
                    torch.unravel_index(torch.tensor(flat), (3, 4, 5))):
        assert (np.asarray(g) == w.numpy()).all()
    checked += 1

    runs = rng.integers(0, 3, (4, 6))
    for dim in (None, 0, 1):
        got = ddpc.unique_consecutive(ddpc.tensor(runs), return_inverse=True, return_counts=True, dim=dim)
        want = torch.unique_consecutive(torch.tensor(runs), return_inverse=True, return_counts=True, dim=dim)
        for g, w in zip(got, want):
            assert (np.asarray(g) == w.numpy()).all(), (dim, g, w)
        checked += 1

    for name in ("hann_window", "hamming_window", "blackman_window", "bartlett_window"):
        for n in (0, 1, 2, 5, 12):
            for periodic in (True, False):
                for dtype in ("float32", "float64"):
                    got = np.asarray(getattr(ddpc, name)(n, periodic, dtype=getattr(ddpc, dtype)))
                    want = getattr(torch, name)(n, periodic, dtype=getattr(torch, dtype)).numpy()
                    np.testing.assert_allclose(got, want, atol=1e-6 if dtype == "float32" else 1e-15)
                    checked += 1

    # gumbel_softmax: the same class frequencies (softmax of the logits) and the
    # same structure of the straight-through gradient (the soft sample's)
    logits = np.log(np.array([0.05, 0.15, 0.3, 0.5]))
    big = np.tile(logits, (40000, 1))
    ddpc.manual_seed(1)
    torch.manual_seed(1)
    freq_d = np.asarray(ddpc.nn.functional.gumbel_softmax(ddpc.tensor(big), tau=0.5, hard=True)).mean(0)
    freq_t = torch.nn.functional.gumbel_softmax(torch.tensor(big), tau=0.5, hard=True).numpy().mean(0)
    assert np.abs(freq_d - freq_t).max() < 0.015, (freq_d, freq_t)
    for lib, frame in ((ddpc, ddpc.nn.functional), (torch, torch.nn.functional)):
        lg = lib.tensor(np.tile(logits, (3, 1)), requires_grad=True)
        y = frame.gumbel_softmax(lg, tau=1.0, hard=True)
        y.sum().backward()  # d sum(soft) / d logits = 0: the soft sample sums to 1
        assert np.abs(np.asarray(lg.grad)).max() < 1e-12
    checked += 1
    print("checked", checked, "ok")


def _case_nn_utils():
    import torch

    import ddpc

    rng = np.random.default_rng(2)
    checked = 0

    def copy_state(dst, src):
        mine = dst.state_dict()
        for name, p in src.state_dict().items():
            with torch.no_grad():
                mine[name].copy_(torch.tensor(np.asarray(p)))

    def bn_pair(n):
        pair = ddpc.nn.BatchNorm2d(n), torch.nn.BatchNorm2d(n, dtype=torch.float64)
        with ddpc.no_grad():
            pair[0].running_mean.copy_(ddpc.tensor(rng.standard_normal(n)))
            pair[0].running_var.copy_(ddpc.tensor(rng.uniform(0.5, 2, n)))
            pair[0].weight.copy_(ddpc.tensor(rng.standard_normal(n)))
        copy_state(pair[1], pair[0])
        return pair[0].eval(), pair[1].eval()

    for transpose in (False, True):
        make = "ConvTranspose2d" if transpose else "Conv2d"
        conv = getattr(ddpc.nn, make)(3, 4, 3).eval()
        tconv = getattr(torch.nn, make)(3, 4, 3, dtype=torch.float64).eval()
        copy_state(tconv, conv)
        bn, tbn = bn_pair(4)
        fused = ddpc.nn.utils.fuse_conv_bn_eval(conv, bn, transpose)
        tfused = torch.nn.utils.fuse_conv_bn_eval(tconv, tbn, transpose)
        for a, b in ((fused.weight, tfused.weight), (fused.bias, tfused.bias)):
            np.testing.assert_allclose(np.asarray(a.detach()), b.detach().numpy(), rtol=1e-5, atol=1e-6)
        checked += 1
    linear, tlinear = ddpc.nn.Linear(5, 4).eval(), torch.nn.Linear(5, 4, dtype=torch.float64).eval()
    copy_state(tlinear, linear)
    bn, tbn = ddpc.nn.BatchNorm1d(4).eval(), torch.nn.BatchNorm1d(4, dtype=torch.float64).eval()
    with ddpc.no_grad():
        bn.running_var.copy_(ddpc.tensor(rng.uniform(0.5, 2, 4)))
    copy_state(tbn, bn)
    fused, tfused = ddpc.nn.utils.fuse_linear_bn_eval(linear, bn), torch.nn.utils.fuse_linear_bn_eval(tlinear, tbn)
    np.testing.assert_allclose(np.asarray(fused.weight.detach()), tfused.weight.detach().numpy(), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(fused.bias.detach()), tfused.bias.detach().numpy(), rtol=1e-5, atol=1e-6)
    checked += 1

    for make, args in (("Linear", (6, 4)), ("Conv2d", (2, 3, 2)), ("ConvTranspose2d", (3, 2, 2))):
        m = ddpc.nn.utils.spectral_norm(getattr(ddpc.nn, make)(*args, dtype=ddpc.float64), n_power_iterations=2)
        tm = torch.nn.utils.spectral_norm(getattr(torch.nn, make)(*args, dtype=torch.float64), n_power_iterations=2)
        copy_state(tm, m)
        shape = (2, 6) if make == "Linear" else (2, args[0], 4, 4)
        x = rng.standard_normal(shape)
        for step in range(3):
            y, ty = m(ddpc.tensor(x)), tm(torch.tensor(x))
            np.testing.assert_allclose(np.asarray(y.detach()), ty.detach().numpy(), rtol=1e-10, atol=1e-12)
        (y ** 2).sum().backward()
        (ty ** 2).sum().backward()
        np.testing.assert_allclose(np.asarray(m.weight_orig.grad), tm.weight_orig.grad.numpy(), rtol=1e-8,
                                   atol=1e-10)
        np.testing.assert_allclose(np.asarray(m.weight_u), tm.weight_u.numpy(), rtol=1e-10, atol=1e-12)
        checked += 1
    print("checked", checked, "ok")


def _case_torch_level():
    import torch

    import ddpc

    rng = np.random.default_rng(3)
    x4, w4 = rng.standard_normal((2, 4, 6, 6)), rng.standard_normal((4, 2, 3, 3))
    x3, w3 = rng.standard_normal((2, 4, 9)), rng.standard_normal((4, 4, 3))
    x5, w5 = rng.standard_normal((1, 2, 4, 4, 4)), rng.standard_normal((3, 2, 2, 2, 2))
    c4, stats = rng.standard_normal(4), rng.uniform(0.5, 2.0, 4)
    a, b = rng.standard_normal((5, 4)), rng.standard_normal((5, 4))
    sign, probs = np.sign(rng.standard_normal(5)), rng.uniform(0.1, 0.9, (5, 4))
    log_probs = np.log(rng.dirichlet(np.ones(5), (7, 2)))
    targets, in_len, tgt_len = np.array([[1, 2, 2], [3, 4, 1]]), np.array([7, 6]), np.array([3, 2])
    table, ids = rng.standard_normal((6, 3)), np.array([[0, 5, 2], [2, 2, 1]])
    cases = [
        ("conv1d", lambda L, t: L.conv1d(t(x3), t(w3), t(c4), 2, 1)),
        ("conv2d", lambda L, t: L.conv2d(t(x4), t(w4), None, 1, 1, 1, 2)),
        ("conv3d", lambda L, t: L.conv3d(t(x5), t(w5), padding=1)),
        ("conv_transpose1d", lambda L, t: L.conv_transpose1d(t(x3), t(w3), None, 2, 1, 1)),
        ("conv_transpose2d", lambda L, t: L.conv_transpose2d(t(x4), t(w4), None, 2)),
        ("conv_transpose3d", lambda L, t: L.conv_transpose3d(t(x5), t(w5.transpose(1, 0, 2, 3, 4)))),
        ("layer_norm", lambda L, t: L.layer_norm(t(x4), (6, 6), None, None, 1e-5)),
        ("group_norm", lambda L, t: L.group_norm(t(x4), 2, t(c4), t(c4 * 0 + 0.5))),
        ("batch_norm", lambda L, t: L.batch_norm(t(x4), t(c4), t(c4 + 1), t(c4 * 0.1), t(stats), False, 0.1, 1e-5,
                                                 False)),
        ("instance_norm", lambda L, t: L.instance_norm(t(x4), t(c4), t(c4 + 1), None, None, True, 0.1, 1e-5,
                                                       False)),
        ("dropout (eval)", lambda L, t: L.dropout(t(a), 0.3, False)),
        ("embedding", lambda L, t: L.embedding(t(table), L.tensor(ids), 2)),
        ("embedding", lambda L, t: L.embedding(t(table), L.tensor(ids))),
        ("pixel_shuffle", lambda L, t: L.pixel_shuffle(t(x4), 2)),
        ("pixel_unshuffle", lambda L, t: L.pixel_unshuffle(t(x4), 3)),
        ("channel_shuffle", lambda L, t: L.channel_shuffle(t(x4), 2)),
        ("prelu", lambda L, t: L.prelu(t(x4), t(c4 * 0.1))),
        ("selu", lambda L, t: L.selu(t(a))),
        ("celu", lambda L, t: L.celu(t(a), 0.7)),
        ("threshold", lambda L, t: L.threshold(t(a), 0.1, -2.0)),
        ("rrelu (eval)", lambda L, t: L.rrelu(t(a), 0.1, 0.3)),
        ("bilinear", lambda L, t: L.bilinear(t(a), t(b), t(rng_w), t(c4[:2]))),
        ("cosine_similarity", lambda L, t: L.cosine_similarity(t(a), t(b), 1)),
        ("pairwise_distance", lambda L, t: L.pairwise_distance(t(a), t(b), 3.0)),
        ("kl_div", lambda L, t: L.kl_div(t(np.log(probs)), t(probs[::-1].copy()), 2)),
        ("kl_div log_target", lambda L, t: L.kl_div(t(a), t(b), 0, log_target=True)),
        ("margin_ranking_loss", lambda L, t: L.margin_ranking_loss(t(a[:, 0]), t(b[:, 0]), t(sign), 0.2, 1)),
        ("hinge_embedding_loss", lambda L, t: L.hinge_embedding_loss(t(a), t(np.sign(b)), 0.5, 2)),
        ("triplet_margin_loss", lambda L, t: L.triplet_margin_loss(t(a), t(b), t(a[::-1].copy()), 1.0, 2.0, 1e-6,
                                                                   True, 1)),
        ("poisson_nll_loss", lambda L, t: L.poisson_nll_loss(t(a), t(np.abs(b)), True, True, 1e-8, 1)),
        ("cosine_embedding_loss", lambda L, t: L.cosine_embedding_loss(t(a), t(b), t(sign), 0.1, 0)),
        ("binary_cross_entropy_with_logits",
         lambda L, t: L.binary_cross_entropy_with_logits(t(a), t(probs), None, t(stats), 1)),
        ("ctc_loss", lambda L, t: L.ctc_loss(t(log_probs), L.tensor(targets), L.tensor(in_len), L.tensor(tgt_len), 0,
                                             2)),
        ("max_pool1d", lambda L, t: L.max_pool1d(t(x3), 3, 2, 1)),
        ("max_pool2d", lambda L, t: L.max_pool2d(t(x4), 2)),
        ("max_pool3d", lambda L, t: L.max_pool3d(t(x5), 2, 1, 0, 1, True)),
        ("avg_pool1d", lambda L, t: L.avg_pool1d(t(x3), 2, 2, 1, True, False)),
        ("adaptive_avg_pool1d", lambda L, t: L.adaptive_avg_pool1d(t(x3), 4)),
        ("adaptive_max_pool1d", lambda L, t: L.adaptive_max_pool1d(t(x3), 4)),
        ("relu_", lambda L, t: L.relu_(t(a))),
        ("sigmoid_", lambda L, t: L.sigmoid_(t(a))),
        ("tanh_", lambda L, t: L.tanh_(t(a))),
    ]
    rng_w = rng.standard_normal((2, 4, 4))
    for name, fn in cases:
        got = fn(ddpc, lambda v: ddpc.tensor(v))
        want = fn(torch, lambda v: torch.tensor(v))
        got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g.detach()), w.detach().numpy(), rtol=1e-7, atol=1e-9,
                                       err_msg=name)
    print("checked", len(cases), "ok")


def _case_tensor_methods():
    import torch

    import ddpc

    rng = np.random.default_rng(4)
    x0 = rng.standard_normal((3, 4)) * 3
    other = rng.standard_normal((3, 4)) * 3
    checked = 0
    calls = [("multiply", (other,)), ("divide", (other,)), ("subtract", (other,)), ("greater", (other,)),
             ("greater_equal", (other,)), ("less", (other,)), ("less_equal", (other,)), ("not_equal", (other,)),
             ("negative", ()), ("positive", ()), ("fix", ()), ("ravel", ()), ("fliplr", ()), ("flipud", ()),
             ("inner", (other,)), ("sum_to_size", ((1, 4),)), ("sum_to_size", (3, 1)),
             ("is_signed", ()), ("is_same_size", (other,)), ("is_complex", ())]
    inplace = [("multiply_", (other,)), ("divide_", (other,)), ("subtract_", (2.0,)), ("true_divide_", (other,)),
               ("greater_", (other,)), ("greater_equal_", (0.5,)), ("less_", (other,)), ("less_equal_", (0.5,)),
               ("not_equal_", (other,)), ("eq_", (x0,)), ("ne_", (x0,)), ("gt_", (0.0,)), ("ge_", (other,)),
               ("lt_", (other,)), ("le_", (0.0,)), ("negative_", ()), ("fix_", ()), ("tril_", (-1,)), ("triu_", ()),
               ("cumsum_", (1,)), ("cumprod_", (0,)), ("renorm_", (1, 0, 2.0)), ("remainder_", (other,)),
               ("fmod_", (1.5,)), ("floor_divide_", (other,)), ("logical_and_", (other,)),
               ("logical_or_", (other * 0,)), ("logical_xor_", (other,)), ("logical_not_", ()),
               ("clamp_", (-1.0, 1.0)), ("t_", ()), ("transpose_", (0, 1)), ("swapaxes_", (1, 0)),
               ("swapdims_", (0, 1)), ("squeeze_", ()), ("unsqueeze_", (1,))]
    for name, args in calls + inplace:
        results = []
        for lib in (ddpc, torch):
            x = lib.tensor(x0)
            res = getattr(x, name)(*[lib.tensor(a) if isinstance(a, np.ndarray) else a for a in args])
            if name.endswith("_"):
                assert res is x, name
            results.append(np.asarray(res) if isinstance(res, (ddpc.Tensor, torch.Tensor)) else res)
        got, want = results
        if isinstance(want, bool):
            assert got is want, name
        else:
            assert got.shape == want.shape, (name, got.shape, want.shape)
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-12, err_msg=name)
        checked += 1
    for name in ("greater", "less_equal", "not_equal", "inner", "vdot", "ger", "negative", "positive", "fix",
                 "ravel", "fliplr", "flipud", "is_signed", "is_same_size", "is_complex"):
        args = (x0[0], other[0]) if name in ("inner", "vdot", "ger", "greater", "less_equal", "not_equal",
                                              "is_same_size") else (x0,)
        got = getattr(ddpc, name)(*[ddpc.tensor(a) for a in args])
        want = getattr(torch, name)(*[torch.tensor(a) for a in args])
        if isinstance(want, bool):
            assert got is want, name
        else:
            np.testing.assert_allclose(np.asarray(got).astype(np.float64), want.numpy().astype(np.float64),
                                       rtol=1e-12, err_msg=name)
        checked += 1
    x = ddpc.tensor([5, -3, 0])
    x.bitwise_not_()
    assert np.asarray(x).tolist() == torch.tensor([5, -3, 0]).bitwise_not_().tolist()
    print("checked", checked + 1, "ok")


def _case_fractional():
    import torch

    import ddpc

    rng = np.random.default_rng(5)
    checked = 0
    for nd, shape, kernel, out, ratio in ((2, (2, 3, 9, 11), (2, 3), (4, 5), None), (2, (2, 3, 9, 11), 3, (7, 1), None),
                                          (2, (3, 10, 13), 2, None, (0.5, 0.75)),
                                          (3, (1, 2, 7, 8, 9), (2, 2, 3), (3, 4, 5), None),
                                          (3, (2, 6, 7, 8), 2, None, 0.6)):
        for dtype in (np.float64, np.float32):
            x0 = rng.standard_normal(shape).astype(dtype)
            x0.reshape(-1)[::7] = x0.reshape(-1)[1]  # ties
            samples = rng.random((shape[0] if len(shape) == nd + 2 else 1, shape[-nd - 1], nd)).astype(dtype)
            results = []
            for lib in (ddpc, torch):
                x = lib.tensor(x0, requires_grad=True)
                pool = getattr(lib.nn.functional, f"fractional_max_pool{nd}d")
                y, i = pool(x, kernel, out, ratio, return_indices=True, _random_samples=lib.tensor(samples))
                (y * lib.tensor(np.arange(y.numel(), dtype=dtype).reshape(tuple(y.shape)))).sum().backward()
                results.append([np.asarray(t.detach()) for t in (y, i, x.grad)])
            for a, b in zip(*results):
                np.testing.assert_array_equal(a, b, err_msg=f"{nd}-d {shape} {np.dtype(dtype).name}")
            checked += 1
    print("checked", checked, "ok")


if __name__ == "__main__":
    import torch  # noqa: F401  (before ddpc, see the module docstring)

    {"functions": _case_functions, "nn_utils": _case_nn_utils, "torch_level": _case_torch_level,
     "tensor_methods": _case_tensor_methods, "fractional": _case_fractional}[sys.argv[1]]()

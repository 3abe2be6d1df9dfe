"""Misuses of tensor ops, each with the builtin exception class PyTorch
raises for it: test_errors.py checks that ddpc's exception is an instance
of that class (so an ``except RuntimeError`` written for PyTorch catches
it), test_errors_torch.py that PyTorch's is.

Each case is fn(lib) on ddpc or torch (their APIs agree on every call
here)."""


def _sampler(lib):
    return lib.utils.data.DistributedSampler


def _double_backward(lib):
    y = lib.ones(2, requires_grad=True).exp().sum()
    y.backward()
    y.backward()


# name: (fn(lib), the builtin class PyTorch raises)
CASES = {
    # shapes that do not fit
    "add_no_broadcast": (lambda L: L.ones(2, 3) + L.ones(4, 5), RuntimeError),
    "inplace_add_broadcast_grows": (lambda L: L.ones(1, 3).add_(L.ones(2, 3)), RuntimeError),
    "copy_no_broadcast": (lambda L: L.ones(2, 3).copy_(L.ones(4, 5)), RuntimeError),
    "where_no_broadcast": (lambda L: L.where(L.ones(2, 3) > 0, L.ones(4, 5), L.ones(2, 3)), RuntimeError),
    "masked_fill_mask_shape": (lambda L: L.ones(2, 3).masked_fill(L.ones(4, 5) > 0, 0.0), RuntimeError),
    "matmul_inner_dims": (lambda L: L.ones(2, 3) @ L.ones(4, 5), RuntimeError),
    "mm_inner_dims": (lambda L: L.mm(L.ones(2, 3), L.ones(4, 5)), RuntimeError),
    "bmm_inner_dims": (lambda L: L.bmm(L.ones(2, 2, 3), L.ones(2, 4, 5)), RuntimeError),
    "linear_in_features": (lambda L: L.nn.Linear(3, 4)(L.ones(4, 5)), RuntimeError),
    "view_size": (lambda L: L.ones(2, 3).view(7), RuntimeError),
    "reshape_size": (lambda L: L.ones(2, 3).reshape(5), RuntimeError),
    "unflatten_sizes": (lambda L: L.ones(2, 6).unflatten(1, (4, 4)), RuntimeError),
    "cat_other_dims": (lambda L: L.cat([L.ones(2, 3), L.ones(4, 5)]), RuntimeError),
    "stack_shapes": (lambda L: L.stack([L.ones(2, 3), L.ones(4, 5)]), RuntimeError),
    "stack_empty": (lambda L: L.stack([]), RuntimeError),
    "expand_size": (lambda L: L.ones(2, 3).expand(4, 4), RuntimeError),
    "repeat_fewer_dims": (lambda L: L.ones(2, 3).repeat(2), RuntimeError),
    "permute_dims": (lambda L: L.ones(2, 3).permute(0), RuntimeError),
    "gather_index_dims": (lambda L: L.ones(2, 3).gather(1, L.zeros(2, 3, 4, dtype=L.int64)), RuntimeError),
    "conv2d_channels": (lambda L: L.nn.Conv2d(3, 4, 3)(L.ones(1, 2, 8, 8)), RuntimeError),
    "conv2d_kernel_larger": (lambda L: L.nn.Conv2d(3, 4, 3)(L.ones(1, 3, 2, 2)), RuntimeError),
    "max_pool_kernel_larger": (lambda L: L.nn.functional.max_pool2d(L.ones(1, 1, 2, 2), 3), RuntimeError),
    "batch_norm_channels": (lambda L: L.nn.BatchNorm1d(3)(L.ones(4, 5)), RuntimeError),
    "layer_norm_shape": (lambda L: L.nn.LayerNorm(3)(L.ones(4, 5)), RuntimeError),
    "mse_shapes": (lambda L: L.nn.functional.mse_loss(L.ones(2, 3), L.ones(4, 5)), RuntimeError),
    "reflect_pad_too_wide": (lambda L: L.nn.functional.pad(L.ones(1, 1, 2), (3, 3), mode="reflect"), RuntimeError),
    "cross_length": (lambda L: L.linalg.cross(L.ones(2, 2), L.ones(2, 2)), RuntimeError),
    "inv_not_square": (lambda L: L.linalg.inv(L.ones(2, 3)), RuntimeError),
    "cholesky_not_positive_definite": (lambda L: L.linalg.cholesky(-L.eye(2)), RuntimeError),
    # sizes and values an op cannot take
    "negative_dim_zeros": (lambda L: L.zeros(-1, 2), RuntimeError),
    "negative_dim_randn": (lambda L: L.randn(-1), RuntimeError),
    "negative_dim_full": (lambda L: L.full((-1,), 1.0), RuntimeError),
    "arange_step_zero": (lambda L: L.arange(0, 10, 0), RuntimeError),
    "split_size_zero": (lambda L: L.ones(2, 3).split(0), RuntimeError),
    "chunk_zero": (lambda L: L.ones(2, 3).chunk(0), RuntimeError),
    "topk_k_too_large": (lambda L: L.ones(3).topk(5), RuntimeError),
    "narrow_past_end": (lambda L: L.ones(2, 3).narrow(0, 1, 5), RuntimeError),
    "clamp_without_bounds": (lambda L: L.ones(2).clamp(), RuntimeError),
    "max_of_empty": (lambda L: L.ones(0).max(), RuntimeError),
    "one_hot_negative": (lambda L: L.nn.functional.one_hot(L.tensor([-1])), RuntimeError),
    "multinomial_negative_weight": (lambda L: L.multinomial(L.tensor([-1.0, 1.0]), 1), RuntimeError),
    "item_of_many": (lambda L: L.ones(2, 3).item(), RuntimeError),
    "bool_of_many": (lambda L: bool(L.ones(2, 3)), RuntimeError),
    "unknown_device": (lambda L: L.ones(2).to("tpu"), RuntimeError),
    # dtypes
    "mm_dtypes_differ": (lambda L: L.mm(L.ones(2, 2), L.ones(2, 2, dtype=L.float64)), RuntimeError),
    "matmul_int_float": (lambda L: L.ones(2, 2, dtype=L.int64) @ L.ones(2, 2), RuntimeError),
    "gather_float_index": (lambda L: L.ones(2, 3).gather(1, L.zeros(2, 3)), RuntimeError),
    "nll_float_target": (lambda L: L.nn.functional.nll_loss(L.ones(2, 3), L.zeros(2)), RuntimeError),
    # indices and dims out of range
    "getitem_out_of_range": (lambda L: L.ones(2, 3)[5], IndexError),
    "index_select_out_of_range": (lambda L: L.ones(2, 3).index_select(0, L.tensor([5])), IndexError),
    "embedding_out_of_range": (lambda L: L.nn.Embedding(3, 4)(L.tensor([5])), IndexError),
    "cross_entropy_target_out_of_range": (lambda L: L.nn.functional.cross_entropy(L.ones(2, 3), L.tensor([0, 7])),
                                          IndexError),
    "scatter_index_out_of_range": (lambda L: L.zeros(2, 3).scatter_(1, L.tensor([[9]]), 1.0), RuntimeError),
    "sum_dim_out_of_range": (lambda L: L.ones(2, 3).sum(dim=4), IndexError),
    "transpose_dim_out_of_range": (lambda L: L.ones(2, 3).transpose(0, 3), IndexError),
    "squeeze_dim_out_of_range": (lambda L: L.ones(2, 3).squeeze(5), IndexError),
    "softmax_dim_out_of_range": (lambda L: L.ones(3).softmax(dim=3), IndexError),
    "flatten_dim_out_of_range": (lambda L: L.ones(2, 3).flatten(3), IndexError),
    # more layers and ops
    "conv1d_channels": (lambda L: L.nn.Conv1d(3, 4, 3)(L.ones(1, 2, 8)), RuntimeError),
    "gru_input_size": (lambda L: L.nn.GRU(3, 4)(L.ones(2, 2, 5)), RuntimeError),
    "gru_h0_shape": (lambda L: L.nn.GRU(3, 4)(L.ones(2, 2, 3), L.ones(1, 3, 4)), RuntimeError),
    "embedding_float_indices": (lambda L: L.nn.Embedding(3, 4)(L.ones(2)), RuntimeError),
    "group_norm_channels": (lambda L: L.nn.GroupNorm(2, 4)(L.ones(2, 3, 5)), RuntimeError),
    "kl_div_shapes": (lambda L: L.nn.functional.kl_div(L.ones(2, 3), L.ones(4, 5), reduction="batchmean"),
                      RuntimeError),
    "avg_pool_kernel_larger": (lambda L: L.nn.functional.avg_pool2d(L.ones(1, 1, 2, 2), 3), RuntimeError),
    "pad_odd_length": (lambda L: L.nn.functional.pad(L.ones(2), (1,)), RuntimeError),
    "index_add_source_shape": (lambda L: L.zeros(3, 2).index_add(0, L.tensor([0]), L.ones(2, 2)), RuntimeError),
    "setitem_value_shape": (lambda L: L.zeros(3, 2).__setitem__(0, L.ones(3)), RuntimeError),
    "scatter_src_shape": (lambda L: L.zeros(2, 3).scatter(1, L.zeros(2, 3, dtype=L.int64), L.ones(1, 1)),
                          RuntimeError),
    "dot_lengths": (lambda L: L.dot(L.ones(3), L.ones(4)), RuntimeError),
    "einsum_sizes": (lambda L: L.einsum("ij,jk->ik", L.ones(2, 3), L.ones(4, 5)), RuntimeError),
    "tensordot_sizes": (lambda L: L.tensordot(L.ones(2, 3), L.ones(4, 5), dims=1), RuntimeError),
    "solve_shapes": (lambda L: L.linalg.solve(L.eye(3), L.ones(4)), RuntimeError),
    "split_sizes_sum": (lambda L: L.ones(5).split([2, 2]), RuntimeError),
    "randint_empty_range": (lambda L: L.randint(5, 3, (2,)), RuntimeError),
    "eye_negative": (lambda L: L.eye(-1), RuntimeError),
    "item_of_empty": (lambda L: L.ones(0).item(), RuntimeError),
    "float_of_many": (lambda L: float(L.ones(2)), ValueError),
    "bce_shapes": (lambda L: L.nn.functional.binary_cross_entropy(L.ones(2, 3) * 0.5, L.ones(4, 5)), ValueError),
    "nll_target_out_of_range": (lambda L: L.nn.functional.nll_loss(L.ones(2, 3), L.tensor([0, 5])), IndexError),
    "index_put_out_of_range": (lambda L: L.zeros(3).index_put_((L.tensor([5]),), L.tensor(1.0)), IndexError),
    "setitem_out_of_range": (lambda L: L.zeros(3).__setitem__(5, 1.0), IndexError),
    "cumsum_dim_out_of_range": (lambda L: L.zeros(3).cumsum(2), IndexError),
    "argmax_dim_out_of_range": (lambda L: L.zeros(3).argmax(2), IndexError),
    "unsqueeze_dim_out_of_range": (lambda L: L.ones(2, 3).unsqueeze(4), IndexError),
    "flip_dim_out_of_range": (lambda L: L.ones(2, 3).flip(3), IndexError),
    "cat_dim_out_of_range": (lambda L: L.cat([L.ones(2), L.ones(2)], dim=2), IndexError),
    "sequential_index_out_of_range": (lambda L: L.nn.Sequential(L.nn.ReLU())[3], IndexError),
    # Python-level argument checks, where PyTorch raises ValueError
    "cross_entropy_batch_sizes": (lambda L: L.nn.functional.cross_entropy(L.ones(2, 3), L.zeros(5, dtype=L.int64)),
                                  ValueError),
    "dropout_p": (lambda L: L.nn.Dropout(1.5), ValueError),
    "sgd_negative_lr": (lambda L: L.optim.SGD(L.nn.Linear(2, 2).parameters(), lr=-1), ValueError),
    "adam_betas": (lambda L: L.optim.Adam(L.nn.Linear(2, 2).parameters(), betas=(1.5, 0.9)), ValueError),
    "sgd_no_parameters": (lambda L: L.optim.SGD([], lr=0.1), ValueError),
    "interpolate_no_size": (lambda L: L.nn.functional.interpolate(L.ones(1, 1, 2, 2)), ValueError),
    "sampler_rank": (lambda L: _sampler(L)(range(10), num_replicas=2, rank=3), ValueError),
    "data_loader_batch_size_zero": (lambda L: L.utils.data.DataLoader(range(10), batch_size=0), ValueError),
    "tensor_ragged": (lambda L: L.tensor([[1, 2], [3]]), ValueError),
    "lstm_input_size": (lambda L: L.nn.LSTM(3, 4)(L.ones(2, 2, 5)), RuntimeError),
    # autograd
    "backward_of_non_scalar": (lambda L: (L.ones(2, requires_grad=True) * 2).backward(), RuntimeError),
    "backward_without_grad": (lambda L: L.ones(2).sum().backward(), RuntimeError),
    "backward_twice": (_double_backward, RuntimeError),
    "leaf_in_place": (lambda L: L.ones(2, requires_grad=True).add_(1), RuntimeError),
    "load_state_dict_missing_keys": (lambda L: L.nn.Linear(2, 2).load_state_dict({}), RuntimeError),
    "load_state_dict_shapes": (lambda L: L.nn.Linear(2, 2).load_state_dict({"weight": L.ones(3, 3),
                                                                             "bias": L.ones(2)}), RuntimeError),
}

"""ddpc.nn attention layers: MultiheadAttention, the Transformer's encoder and
decoder (layers and stacks) and Transformer itself, with torch.nn's parameter
names, initialisation and mask conventions (in these layers a bool mask marks with True the positions
that may NOT be attended; scaled_dot_product_attention's the opposite)."""

import copy
import math
import warnings

from .._dtype import bool_
from ..amp import is_autocast_enabled
from ..autograd import cat, is_grad_enabled, where
from ..tensor import empty, full, zeros
from . import functional as F
from . import init
from .modules import (GELU, Dropout, LayerNorm, Linear, Module, ModuleList, NonDynamicallyQuantizableLinear, Parameter,
                      ReLU)

__all__ = ["MultiheadAttention", "Transformer", "TransformerDecoder", "TransformerDecoderLayer", "TransformerEncoder",
           "TransformerEncoderLayer"]


class MultiheadAttention(Module):
    """Attention of ``num_heads`` heads of embed_dim // num_heads each; q, k
    and v projections packed in ``in_proj_weight`` when key and value are
    embed_dim wide, else ``q_proj_weight``/``k_proj_weight``/``v_proj_weight``.
    ``add_bias_kv`` appends the learnt ``bias_k``/``bias_v`` to the projected
    keys and values as one more source position, ``add_zero_attn`` then a
    position of zeros; the masks let every query attend both."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False, device=None, dtype=None):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0 or embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim ({embed_dim}) must be positive and divisible by "
                             f"num_heads ({num_heads})")
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = embed_dim, num_heads, dropout, batch_first
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self.head_dim = embed_dim // num_heads
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(empty(3 * embed_dim, embed_dim, dtype=dtype, device=device))
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(name, None)
        else:
            self.register_parameter("in_proj_weight", None)
            for name, width in (("q_proj_weight", embed_dim), ("k_proj_weight", self.kdim),
                                ("v_proj_weight", self.vdim)):
                setattr(self, name, Parameter(empty(embed_dim, width, dtype=dtype, device=device)))
        if bias:
            self.in_proj_bias = Parameter(empty(3 * embed_dim, dtype=dtype, device=device))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias, device=device, dtype=dtype)
        if add_bias_kv:
            self.bias_k = Parameter(empty(1, 1, embed_dim, dtype=dtype, device=device))
            self.bias_v = Parameter(empty(1, 1, embed_dim, dtype=dtype, device=device))
        else:
            self.register_parameter("bias_k", None)
            self.register_parameter("bias_v", None)
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self):
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            init.zeros_(self.in_proj_bias)
            init.zeros_(self.out_proj.bias)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
            init.xavier_normal_(self.bias_v)

    def _project(self, x, i):
        """x through the i-th (q, k, v) input projection, split into heads: (N, H, len, head_dim)."""
        e = self.embed_dim
        w = self.in_proj_weight.narrow(0, i * e, e) if self._qkv_same_embed_dim else \
            (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)[i]
        b = None if self.in_proj_bias is None else self.in_proj_bias.narrow(0, i * e, e)
        n, length = x.shape[0], x.shape[1]
        return F.linear(x, w, b).reshape(n, length, self.num_heads, self.head_dim).permute(0, 2, 1, 3)

    def _extra_source(self, k, v):
        """(N, H, S, head_dim) keys and values with bias_k/bias_v and then a
        zero position appended along S, as add_bias_kv and add_zero_attn ask."""
        n = k.shape[0]
        if self.bias_k is not None:
            heads = (1, self.num_heads, 1, self.head_dim)
            k = cat([k, self.bias_k.reshape(heads).expand(n, *heads[1:])], 2)
            v = cat([v, self.bias_v.reshape(heads).expand(n, *heads[1:])], 2)
        if self.add_zero_attn:
            zero = zeros(n, self.num_heads, 1, self.head_dim, dtype=k.dtype, device=k.device)
            k, v = cat([k, zero], 2), cat([v, zero], 2)
        return k, v

    def _check(self, query, key, value):
        if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
            raise ValueError(f"MultiheadAttention: expected query, key and value all 2-d (unbatched) or 3-d, got "
                             f"shapes {query.shape}, {key.shape} and {value.shape}")
        if query.shape[-1] != self.embed_dim or key.shape[-1] != self.kdim or value.shape[-1] != self.vdim:
            raise ValueError(f"MultiheadAttention: the last dims of query {query.shape}, key {key.shape} and value "
                             f"{value.shape} must be embed_dim={self.embed_dim}, kdim={self.kdim}, vdim={self.vdim}")
        if key.shape[:-1] != value.shape[:-1]:
            raise ValueError(f"MultiheadAttention: key {key.shape} and value {value.shape} must match but for the "
                             "last dim")

    def _mask(self, attn_mask, key_padding_mask, n, target, source):
        """attn_mask ((L, S) or (N * num_heads, L, S)) and key_padding_mask
        ((N, S)) shaped to broadcast against (N, H, L, S) scores, combined:
        as additive masks (bool True as -inf) when both are given."""
        for name, mask in (("attn_mask", attn_mask), ("key_padding_mask", key_padding_mask)):
            # PyTorch's check; ddpc also takes uint8 masks as bool ones, as its selections do.
            if mask is not None and not (mask.dtype.is_floating_point or mask.dtype.name in ("bool", "uint8")):
                raise AssertionError(f"only bool and floating types of {name} are supported")
        masks = []
        if attn_mask is not None:
            if attn_mask.shape not in ((target, source), (n * self.num_heads, target, source)):
                raise ValueError(f"MultiheadAttention: attn_mask must be ({target}, {source}) or "
                                 f"({n * self.num_heads}, {target}, {source}), got {attn_mask.shape}")
            masks.append(attn_mask.reshape(-1 if attn_mask.ndim == 3 else 1, self.num_heads if attn_mask.ndim == 3
                                           else 1, target, source))
        if key_padding_mask is not None:
            if key_padding_mask.shape != (n, source):
                raise ValueError(f"MultiheadAttention: key_padding_mask must be ({n}, {source}), got "
                                 f"{key_padding_mask.shape}")
            masks.append(key_padding_mask.reshape(n, 1, 1, source))
        if len(masks) < 2:
            return masks[0] if masks else None
        return sum(m if m.dtype.is_floating_point else where(m if m.dtype is bool_ else m != 0, float("-inf"), 0.0)
                   for m in masks)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        """(output, weights): output shaped as query; weights (N, L, S)
        averaged over heads, (N, H, L, S) without averaging, or None unless
        ``need_weights``. ``is_causal`` only hints that attn_mask is causal."""
        self._check(query, key, value)
        if is_causal and attn_mask is None:
            raise ValueError("MultiheadAttention: is_causal=True is a hint about attn_mask; pass the causal mask too")
        batched = query.ndim == 3
        if not batched:
            query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
            key_padding_mask = None if key_padding_mask is None else key_padding_mask.unsqueeze(0)
        elif not self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        if key.shape[0] != query.shape[0]:
            raise ValueError(f"MultiheadAttention: query and key have different batch sizes ({query.shape[0]} and "
                             f"{key.shape[0]})")
        n, target, source = query.shape[0], query.shape[1], key.shape[1]
        mask = self._mask(attn_mask, key_padding_mask, n, target, source)
        k, v = self._extra_source(self._project(key, 1), self._project(value, 2))
        if mask is not None and k.shape[2] > source:
            # The appended positions are attended by every query: False in a bool mask, 0 in an additive one.
            mask = F.pad(mask, (0, k.shape[2] - source))
        # Without the weights, PyTorch's fused path gives a query every key is masked from an output of 0 (with
        # them, NaN, as its softmax does).
        out, weights = F._attention(self._project(query, 0), k, v, mask, False, self.dropout if self.training else 0.0,
                                    1 / math.sqrt(self.head_dim), safe=not need_weights)
        out = self.out_proj(out.permute(0, 2, 1, 3).reshape(n, target, self.embed_dim))
        if batched and not self.batch_first:
            out = out.transpose(0, 1)
        if not need_weights:
            weights = None
        elif average_attn_weights:
            weights = weights.mean(1)
        if not batched:
            out = out.squeeze(0)
            weights = None if weights is None else weights.squeeze(0)
        return out, weights


def multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias,
                                 bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias,
                                 training=True, key_padding_mask=None, need_weights=True, attn_mask=None,
                                 use_separate_proj_weight=False, q_proj_weight=None, k_proj_weight=None,
                                 v_proj_weight=None, static_k=None, static_v=None, average_attn_weights=True,
                                 is_causal=False):
    """torch.nn.functional.multi_head_attention_forward: MultiheadAttention's
    forward (sequence-first, or unbatched inputs) with the weights passed in,
    as CLIP's attention pooling calls it. ``static_k``/``static_v``
    (precomputed keys and values) are not offered."""
    if static_k is not None or static_v is not None:
        raise NotImplementedError("multi_head_attention_forward: static_k and static_v are not offered")
    if query.shape[-1] != embed_dim_to_check:
        raise AssertionError(f"was expecting embedding dimension of {embed_dim_to_check}, but got {query.shape[-1]}")
    if embed_dim_to_check % num_heads:
        raise AssertionError(f"embed_dim {embed_dim_to_check} not divisible by num_heads {num_heads}")
    # The module's forward on a stand-in holding these weights (not a registered module: no hooks, no state).
    m = object.__new__(MultiheadAttention)
    m.__dict__.update(
        embed_dim=embed_dim_to_check, num_heads=num_heads, dropout=dropout_p, batch_first=False,
        kdim=key.shape[-1], vdim=value.shape[-1], head_dim=embed_dim_to_check // num_heads,
        _qkv_same_embed_dim=not use_separate_proj_weight, in_proj_weight=in_proj_weight,
        q_proj_weight=q_proj_weight, k_proj_weight=k_proj_weight, v_proj_weight=v_proj_weight,
        in_proj_bias=in_proj_bias, bias_k=bias_k, bias_v=bias_v, add_zero_attn=add_zero_attn, training=training,
        out_proj=lambda x: F.linear(x, out_proj_weight, out_proj_bias))
    return MultiheadAttention.forward(m, query, key, value, key_padding_mask, need_weights, attn_mask,
                                      average_attn_weights, is_causal)


_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


def _why_no_nested_tensor(layer):
    """Why PyTorch's TransformerEncoder rules out its nested-tensor path for
    copies of ``layer`` ("" where it does not), in PyTorch's words."""
    if not isinstance(layer, TransformerEncoderLayer):
        return "encoder_layer was not TransformerEncoderLayer"
    attn = layer.self_attn
    for failed, why in ((layer.norm_first, "norm_first was True"),
                        (not attn.batch_first, "self_attn.batch_first was not True(use batch_first for better "
                                               "inference performance)"),
                        (not attn._qkv_same_embed_dim, "self_attn._qkv_same_embed_dim was not True"),
                        (attn.in_proj_bias is None, "self_attn was passed bias=False"),
                        (not layer.activation_relu_or_gelu, "activation_relu_or_gelu was not True"),
                        (layer.norm1.eps != layer.norm2.eps, "norm1.eps was not equal to encoder_layer.norm2.eps"),
                        (attn.num_heads % 2 == 1, "self_attn.num_heads is odd")):
        if failed:
            return "encoder_layer." + why
    return ""


def _activation(activation, layer):
    """The feed-forward activation: "relu", "gelu" or a callable."""
    if not isinstance(activation, str):
        return activation
    if activation not in _ACTIVATIONS:
        raise ValueError(f"{layer}: activation should be relu/gelu, not {activation}")
    return _ACTIVATIONS[activation]


def _get_activation_fn(activation):
    """F.relu or F.gelu by name: torch.nn.modules.transformer's helper, which custom layers import."""
    if activation not in _ACTIVATIONS:
        raise RuntimeError(f"activation should be relu/gelu, not {activation}")
    return _ACTIVATIONS[activation]


def _get_clones(module, N):
    """A ModuleList of ``N`` deep copies of ``module``: the stacked layers of an encoder or decoder."""
    return ModuleList([copy.deepcopy(module) for _ in range(N)])


class TransformerEncoderLayer(Module):
    """Self-attention then a feed-forward block (linear1, activation, linear2),
    each with dropout, a residual connection and a LayerNorm: after the
    residual (post-norm) or, with ``norm_first``, on the block's input."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu", layer_norm_eps=1e-5,
                 batch_first=False, norm_first=False, bias=True, device=None, dtype=None):
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                            device=device, dtype=dtype)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, device=device, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, device=device, dtype=dtype)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, device=device, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, device=device, dtype=dtype)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.activation = _activation(activation, "TransformerEncoderLayer")
        # PyTorch's flag for its fused path, which tools read: 1 for relu, 2 for gelu, else 0.
        self.activation_relu_or_gelu = (1 if self.activation is F.relu or isinstance(self.activation, ReLU) else
                                        2 if self.activation is F.gelu or isinstance(self.activation, GELU) else 0)

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False,
                           is_causal=is_causal)[0]
        return self.dropout1(x)

    def _ff_block(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff_block(x))


class TransformerEncoder(Module):
    """``num_layers`` deep copies of ``encoder_layer`` applied in turn, then ``norm`` when given."""

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True, mask_check=True):
        """``enable_nested_tensor`` and ``mask_check`` are PyTorch's switches
        for its nested-tensor fast path. ddpc has no nested tensors, but
        gives what that path gives where PyTorch would take it (see
        forward), and PyTorch's warning where the layer rules it out."""
        super().__init__()
        self.layers = _get_clones(encoder_layer, num_layers)
        self.num_layers, self.norm = num_layers, norm
        self.enable_nested_tensor, self.mask_check = enable_nested_tensor, mask_check
        why_not = _why_no_nested_tensor(encoder_layer)
        if enable_nested_tensor and why_not:
            warnings.warn(f"enable_nested_tensor is True, but self.use_nested_tensor is False because {why_not}",
                          stacklevel=2)
        self.use_nested_tensor = enable_nested_tensor and not why_not

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=False):
        """The layers in turn, then ``norm``. Where PyTorch would run its
        nested-tensor fast path (inference with a key padding mask whose
        padding is at the end of each sequence, no other mask), the padded
        positions come out 0 before ``norm``, as that path leaves them;
        elsewhere they hold what the layers computed there."""
        out = src
        for layer in self.layers:
            out = layer(out, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=is_causal)
        if self._nested_path(src, mask, src_key_padding_mask):
            padded = src_key_padding_mask if src_key_padding_mask.dtype is bool_ else src_key_padding_mask != 0
            out = out.masked_fill(padded.unsqueeze(-1), 0.0)
        return out if self.norm is None else self.norm(out)

    def _nested_path(self, src, mask, key_padding_mask):
        """Whether PyTorch's TransformerEncoder takes its nested-tensor path here."""
        first = self.layers[0]
        if not (getattr(self, "use_nested_tensor", False) and not first.training and src.ndim == 3 and
                key_padding_mask is not None and mask is None and not is_autocast_enabled("cuda")):
            return False
        attn = first.self_attn
        weights = (src, attn.in_proj_weight, attn.in_proj_bias, attn.out_proj.weight, attn.out_proj.bias,
                   first.norm1.weight, first.norm1.bias, first.norm2.weight, first.norm2.bias, first.linear1.weight,
                   first.linear1.bias, first.linear2.weight, first.linear2.bias)
        if is_grad_enabled() and any(w is not None and w.requires_grad for w in weights):
            return False
        if getattr(self, "mask_check", True):  # each sequence's padding must come after its tokens
            kept = (key_padding_mask if key_padding_mask.dtype is bool_ else key_padding_mask != 0).logical_not()
            if bool((kept[:, 1:] & ~kept[:, :-1]).any()):
                return False
        return True


class TransformerDecoderLayer(Module):
    """Self-attention over the target, attention from the target to the
    encoder's output (``memory``), then a feed-forward block; each with
    dropout, a residual connection and a LayerNorm, after the residual or,
    with ``norm_first``, on the block's input."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu", layer_norm_eps=1e-5,
                 batch_first=False, norm_first=False, bias=True, device=None, dtype=None):
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                            device=device, dtype=dtype)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                                 device=device, dtype=dtype)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, device=device, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, device=device, dtype=dtype)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, device=device, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, device=device, dtype=dtype)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, device=device, dtype=dtype)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        self.activation = _activation(activation, "TransformerDecoderLayer")

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False,
                           is_causal=is_causal)[0]
        return self.dropout1(x)

    def _mha_block(self, x, memory, attn_mask, key_padding_mask, is_causal):
        x = self.multihead_attn(x, memory, memory, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                                need_weights=False, is_causal=is_causal)[0]
        return self.dropout2(x)

    def _ff_block(self, x):
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False):
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal)
            return x + self._ff_block(self.norm3(x))
        x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
        x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal))
        return self.norm3(x + self._ff_block(x))


class TransformerDecoder(Module):
    """``num_layers`` deep copies of ``decoder_layer`` applied in turn to the
    target, each attending to the same ``memory``, then ``norm`` when given.
    ``tgt_is_causal`` None is PyTorch's "detect it from tgt_mask"; here the
    is_causal flags are hints only (the mask is always applied), so None and
    False behave alike."""

    def __init__(self, decoder_layer, num_layers, norm=None):
        super().__init__()
        self.layers = _get_clones(decoder_layer, num_layers)
        self.num_layers, self.norm = num_layers, norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False):
        out = tgt
        for layer in self.layers:
            out = layer(out, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                        tgt_key_padding_mask=tgt_key_padding_mask, memory_key_padding_mask=memory_key_padding_mask,
                        tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)
        return out if self.norm is None else self.norm(out)


class Transformer(Module):
    """An encoder (TransformerEncoder of ``num_encoder_layers`` layers and a
    final LayerNorm) over ``src`` and a decoder (likewise) over ``tgt``
    attending to the encoder's output; every parameter of more than one dim
    drawn xavier-uniform, as PyTorch does, also those of a custom encoder or
    decoder."""

    def __init__(self, d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6, dim_feedforward=2048,
                 dropout=0.1, activation="relu", custom_encoder=None, custom_decoder=None, layer_norm_eps=1e-5,
                 batch_first=False, norm_first=False, bias=True, device=None, dtype=None):
        super().__init__()
        layer_args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first, norm_first,
                      bias, device, dtype)
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            self.encoder = TransformerEncoder(TransformerEncoderLayer(*layer_args), num_encoder_layers,
                                              LayerNorm(d_model, eps=layer_norm_eps, bias=bias, device=device,
                                                        dtype=dtype))
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            self.decoder = TransformerDecoder(TransformerDecoderLayer(*layer_args), num_decoder_layers,
                                              LayerNorm(d_model, eps=layer_norm_eps, bias=bias, device=device,
                                                        dtype=dtype))
        self._reset_parameters()
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None, src_key_padding_mask=None,
                tgt_key_padding_mask=None, memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
                memory_is_causal=False):
        """(T, N, E) output of (S, N, E) ``src`` and (T, N, E) ``tgt`` ((N, S,
        E) and (N, T, E) with batch_first; (S, E) and (T, E) unbatched)."""
        batch = 0 if self.batch_first else 1
        if src.ndim == 3 and (tgt.ndim != 3 or src.shape[batch] != tgt.shape[batch]):
            raise ValueError(f"Transformer: the batch number of src {src.shape} and tgt {tgt.shape} must be equal")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise ValueError(f"Transformer: the feature number of src {src.shape} and tgt {tgt.shape} must be equal "
                             f"to d_model={self.d_model}")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
                            memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz, device=None, dtype=None):
        """A (sz, sz) additive causal mask: -inf above the diagonal (a later position), 0 elsewhere."""
        return full((sz, sz), float("-inf"), dtype=dtype, device=device).triu(1)

    def _reset_parameters(self):
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)

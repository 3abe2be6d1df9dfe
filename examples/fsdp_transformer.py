"""A small Transformer trained with FullyShardedDataParallel: each encoder
layer is an FSDP unit of its own (transformer_auto_wrap_policy), each rank
keeps a shard of every unit's parameters, and the full state dict saved at
the end loads into the unwrapped model.

    ddpc-run --nproc-per-node 2 examples/fsdp_transformer.py

The task: continue sequences that count up by a step that varies per
sequence, modulo the vocabulary (the step must be read from the context).
"""

import functools

import numpy as np

import ddpc
import ddpc.distributed as dist
from ddpc import nn
from ddpc.distributed.fsdp import FullStateDictConfig, ShardingStrategy, StateDictType
from ddpc.distributed.fsdp import FullyShardedDataParallel as FSDP
from ddpc.distributed.fsdp.wrap import transformer_auto_wrap_policy

VOCAB, LENGTH, D_MODEL = 16, 12, 32


class TinyLM(nn.Module):
    def __init__(self, layers=2):
        super().__init__()
        ddpc.manual_seed(0)
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        self.position = nn.Embedding(LENGTH, D_MODEL)
        self.layers = nn.ModuleList(nn.TransformerEncoderLayer(D_MODEL, nhead=4, dim_feedforward=64, dropout=0.0,
                                                               batch_first=True) for _ in range(layers))
        self.head = nn.Linear(D_MODEL, VOCAB)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(LENGTH))

    def forward(self, tokens):
        x = self.embed(tokens) + self.position(ddpc.arange(tokens.shape[1]))
        for layer in self.layers:
            x = layer(x, src_mask=self.mask, is_causal=True)
        return self.head(x)


def sequences(n, seed):
    rng = np.random.default_rng(seed)
    start, step = rng.integers(0, VOCAB, (n, 1)), rng.integers(1, 4, (n, 1))
    seq = (start + step * np.arange(LENGTH + 1)) % VOCAB
    return seq[:, :-1].astype(np.int64), seq[:, 1:].astype(np.int64)


def accuracy(model, X, y):
    with ddpc.no_grad():
        pred = model(ddpc.from_numpy(X)).argmax(-1).numpy()
    return float((pred[:, 2:] == y[:, 2:]).mean())  # from the third token on, the step is known


def main(steps=150, batch=32):
    dist.init_process_group("cpu")
    rank, world = dist.get_rank(), dist.get_world_size()
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={nn.TransformerEncoderLayer})
    model = FSDP(TinyLM(), auto_wrap_policy=policy, sharding_strategy=ShardingStrategy.FULL_SHARD,
                 forward_prefetch=True)  # each layer's all-gather issued while the one before computes
    units = sum(isinstance(m, FSDP) for m in model.modules())
    shard = sum(p.numel() for p in model.parameters())
    if rank == 0:
        print(f"{units} FSDP units; this rank holds {shard} of {sum(p.numel() for p in TinyLM().parameters())} "
              "parameters", flush=True)
    optimizer = ddpc.optim.Adam(model.parameters(), lr=3e-3)
    loss_fn = nn.CrossEntropyLoss()
    for step in range(steps):
        X, y = sequences(batch, seed=step * world + rank)  # each rank its own batch
        optimizer.zero_grad()
        loss = loss_fn(model(ddpc.from_numpy(X)).reshape(-1, VOCAB), ddpc.from_numpy(y).reshape(-1))
        loss.backward()
        model.clip_grad_norm_(1.0)
        optimizer.step()
        if rank == 0 and (step + 1) % 50 == 0:
            print(f"step {step + 1:4d}  loss {loss.item():.3f}", flush=True)
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, FullStateDictConfig(rank0_only=True)):
        state = model.state_dict()
    if rank == 0:
        plain = TinyLM()
        plain.load_state_dict(state)
        X, y = sequences(256, seed=10**6)
        print(f"the unwrapped model with the full state dict: accuracy {accuracy(plain, X, y):.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

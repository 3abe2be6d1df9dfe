"""AdaptiveLogSoftmaxWithLoss (as torch.nn.AdaptiveLogSoftmaxWithLoss): the
efficient softmax of Grave et al. for many classes. The head scores the
``cutoffs[0]`` frequent classes and one entry per cluster of rarer ones; each
cluster's tail is a low-rank projection (in_features / div_value^(i+1)) that
scores the classes inside it, and only the rows whose target falls in a
cluster run through its tail."""

from collections import namedtuple

from ..autograd import argmax, cat, log_softmax, nonzero
from ..tensor import zeros
from .modules import Linear, Module, ModuleList, Sequential

__all__ = ["AdaptiveLogSoftmaxWithLoss"]

_ASMoutput = namedtuple("_ASMoutput", ["output", "loss"])


class AdaptiveLogSoftmaxWithLoss(Module):
    """``forward(input, target)`` gives (output, loss): each row's log
    probability of its target class and their negated mean. ``log_prob``
    gives every class's log probability, ``predict`` the most likely class.
    Input (N, in_features) with target (N,), or (in_features,) with a 0-d
    target."""

    def __init__(self, in_features, n_classes, cutoffs, div_value=4.0, head_bias=False, device=None, dtype=None):
        super().__init__()
        cutoffs = list(cutoffs)
        if len(cutoffs) == 0:
            raise ValueError("cutoffs should be a sequence of length larger than 0")
        if (cutoffs != sorted(cutoffs) or min(cutoffs) <= 0 or max(cutoffs) > n_classes - 1
                or len(set(cutoffs)) != len(cutoffs) or any(int(c) != c for c in cutoffs)):
            raise ValueError("cutoffs should be a sequence of unique, positive integers sorted in an increasing "
                             "order, where each value is between 1 and n_classes-1")
        self.in_features, self.n_classes = in_features, n_classes
        self.cutoffs = cutoffs + [n_classes]
        self.div_value, self.head_bias = div_value, head_bias
        self.shortlist_size = self.cutoffs[0]
        self.n_clusters = len(self.cutoffs) - 1
        self.head_size = self.shortlist_size + self.n_clusters
        self.head = Linear(in_features, self.head_size, bias=head_bias, device=device, dtype=dtype)
        self.tail = ModuleList()
        for i in range(self.n_clusters):
            hidden = int(in_features // (div_value ** (i + 1)))
            self.tail.append(Sequential(
                Linear(in_features, hidden, bias=False, device=device, dtype=dtype),
                Linear(hidden, self.cutoffs[i + 1] - self.cutoffs[i], bias=False, device=device, dtype=dtype)))

    def reset_parameters(self):
        self.head.reset_parameters()
        for i2h, h2o in self.tail:
            i2h.reset_parameters()
            h2o.reset_parameters()

    def forward(self, input, target):
        if target.ndim == 1:
            if input.shape[0] != target.shape[0]:
                raise ValueError("Input and target should have the same size in the batch dimension.")
            if input.ndim != 2:
                raise ValueError(f"1D target tensor expects 2D input tensors, but found inputs with size "
                                 f"{input.shape}")
        elif target.ndim == 0:
            if input.ndim != 1:
                raise ValueError(f"0D target tensor expects 1D input tensors, but found inputs with size "
                                 f"{input.shape}")
        else:
            raise ValueError("0D or 1D target tensor expected, multi-target not supported")
        batched = target.ndim > 0
        if not batched:
            input, target = input.unsqueeze(0), target.unsqueeze(0)
        if target.numel() and (int(target.min()) < 0 or int(target.max()) >= self.n_classes):
            raise ValueError(f"Target values should be in [0, {self.n_classes - 1}], but values in range "
                             f"[{int(target.min())}, {int(target.max())}] were found.")
        output = zeros(target.shape[0], dtype=input.dtype, device=input.device)
        # The head entry each row's log probability starts from: its class in the shortlist, else its cluster.
        head_entry = target
        for i in range(self.n_clusters):
            low, high = self.cutoffs[i], self.cutoffs[i + 1]
            rows = nonzero((target >= low) & (target < high)).reshape(-1)
            if rows.numel() == 0:
                continue
            cluster_logprob = log_softmax(self.tail[i](input.index_select(0, rows)), 1)
            local = cluster_logprob.gather(1, (target.index_select(0, rows) - low).unsqueeze(1)).squeeze(1)
            output = output.index_copy(0, rows, local)
            head_entry = head_entry.index_fill(0, rows, self.shortlist_size + i)
        head_logprob = log_softmax(self.head(input), 1)
        output = output + head_logprob.gather(1, head_entry.unsqueeze(1)).squeeze(1)
        loss = (-output).mean()
        return _ASMoutput(output if batched else output.squeeze(0), loss)

    def _full_log_prob(self, input, head_output):
        head_logprob = log_softmax(head_output, 1)
        pieces = [head_logprob[:, :self.shortlist_size]]
        for i in range(self.n_clusters):
            pieces.append(log_softmax(self.tail[i](input), 1)
                          + head_logprob[:, self.shortlist_size + i].unsqueeze(1))
        return cat(pieces, 1)

    def log_prob(self, input):
        """The log probability of every class, (N, n_classes)."""
        return self._full_log_prob(input, self.head(input))

    def predict(self, input):
        """The most likely class of each row: the head's choice where it is in the shortlist, else the
        largest full log probability (computed for those rows only)."""
        head_output = self.head(input)
        output = argmax(head_output, 1)
        outside = output >= self.shortlist_size
        if not bool(outside.any()):
            return output
        if bool(outside.all()):
            return argmax(self._full_log_prob(input, head_output), 1)
        rows = nonzero(outside).reshape(-1)
        best = argmax(self._full_log_prob(input.index_select(0, rows), head_output.index_select(0, rows)), 1)
        return output.index_copy(0, rows, best)

"""ddpc.nn recurrent layers: RNN (tanh or relu), LSTM (with proj_size) and
GRU over one or more layers, either direction, padded or packed sequences,
and their single-step cells RNNCell, LSTMCell and GRUCell, with torch.nn's
arguments, parameter names, shapes, initialisation and gate order.

Each layer's direction is one autograd node (nn/_recurrence.py): one GEMM
projects the whole sequence's input, then each time step is one GEMM and one
fused cell op, forward and backward. DDP reduces their gradients like any
other layer's. Half-precision inputs and weights are computed in float32.
Under autocast the layers and cells run in the dtypes PyTorch's do (see
_recurrence_policy)."""

import math
import numbers
import warnings

from .._C import ArgumentError
from ..amp import autocast_op
from ..autograd import cat, stack
from ..tensor import Tensor, empty, zeros
from . import functional as F
from . import init
from ._recurrence import GATES, final_ranges, recurrence
from .modules import Module, Parameter
from .utils.rnn import PackedSequence

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]


def _suffix(layer, direction):
    """The parameter name suffix of a layer's direction: _l0, _l0_reverse, ..."""
    return f"_l{layer}" + ("_reverse" if direction else "")


def _rows(t, lo, hi):
    return t if lo == 0 and hi == t.shape[0] else t[lo:hi]


def _final_state(seqs, batch_sizes, reverse):
    """Each sequence's last state, in sequence order, from the per-step states ``seqs`` of one direction."""
    ranges = final_ranges(batch_sizes, reverse)
    return tuple(_rows(s, *ranges[0]) if len(ranges) == 1 else cat([_rows(s, lo, hi) for lo, hi in ranges])
                 for s in seqs)


def _recurrence_with_tensor_args(mode, x, batch_sizes, reverse, nstate, *tensors):
    """recurrence with the states and weights as separate arguments, so that autocast casts them all."""
    return recurrence(mode, x, batch_sizes, reverse, tensors[:nstate], tensors[nstate:])


_lower_recurrence = autocast_op("lower")(_recurrence_with_tensor_args)
_lower_cuda_recurrence = autocast_op("lower_cuda")(_recurrence_with_tensor_args)


def _recurrence_policy(mode, packed, cell):
    """The autocast form of recurrence for a layer or cell of ``mode`` (packed:
    a layer's input is a PackedSequence). PyTorch's CPU autocast runs the tanh
    and relu RNNs (layers and cells are linear ops there) and the LSTM layer on
    padded input (mkldnn_rnn_layer) in the autocast dtype, and leaves GRU, the
    LSTM layer on packed input and the LSTM and GRU cells in float32; on CUDA
    its cuDNN layers and all three cells are cast."""
    if mode in ("RNN_TANH", "RNN_RELU") or (mode == "LSTM" and not packed and not cell):
        return _lower_recurrence
    return _lower_cuda_recurrence


class RNNBase(Module):
    """The shared layer stack of RNN, LSTM and GRU (``mode`` 'RNN_TANH',
    'RNN_RELU', 'LSTM' or 'GRU')."""

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__()
        if mode not in GATES:
            raise ArgumentError(f"Unrecognized RNN mode: {mode}")
        if (not isinstance(dropout, numbers.Number) or isinstance(dropout, bool) or not 0 <= dropout <= 1):
            raise ArgumentError("dropout should be a number in range [0, 1] representing the probability of an element "
                                "being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero dropout "
                          f"expects num_layers greater than 1, but got dropout={dropout} and num_layers={num_layers}")
        for name, value in (("hidden_size", hidden_size), ("num_layers", num_layers)):
            if not isinstance(value, numbers.Integral) or isinstance(value, bool):
                raise TypeError(f"{name} should be of type int, got: {type(value).__name__}")
            if value <= 0:
                raise ArgumentError(f"{name} must be greater than zero")
        if proj_size < 0:
            raise ArgumentError("proj_size should be a positive integer or zero to disable projections")
        if proj_size >= hidden_size:
            raise ArgumentError("proj_size has to be smaller than hidden_size")
        if proj_size and mode != "LSTM":
            raise ArgumentError("proj_size argument is only supported for LSTM, not RNN or GRU")
        self.mode, self.input_size, self.hidden_size = mode, int(input_size), int(hidden_size)
        self.num_layers, self.bias, self.batch_first = int(num_layers), bool(bias), bool(batch_first)
        self.dropout, self.bidirectional, self.proj_size = float(dropout), bool(bidirectional), int(proj_size)
        directions = 2 if self.bidirectional else 1
        out_size = self.proj_size or self.hidden_size
        gate_size = GATES[mode] * self.hidden_size
        self._all_weights = []
        for layer in range(self.num_layers):
            layer_input = self.input_size if layer == 0 else out_size * directions
            for direction in range(directions):
                suffix = _suffix(layer, direction)
                shapes = [("weight_ih", (gate_size, layer_input)), ("weight_hh", (gate_size, out_size))]
                if self.bias:
                    shapes += [("bias_ih", (gate_size,)), ("bias_hh", (gate_size,))]
                if self.proj_size:
                    shapes.append(("weight_hr", (self.proj_size, self.hidden_size)))
                for name, shape in shapes:
                    setattr(self, name + suffix, Parameter(empty(*shape, dtype=dtype, device=device)))
                self._all_weights.append([name + suffix for name, _ in shapes])
        self._flat_weights_names = [name for names in self._all_weights for name in names]
        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.hidden_size)
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def flatten_parameters(self):
        """PyTorch packs the weights for cuDNN here; ddpc's stay as they are, so there is nothing to do."""

    @property
    def _flat_weights(self):
        """The parameters named in ``_flat_weights_names``, in that order (None
        where one was deleted), as PyTorch's list that tools read."""
        return [getattr(self, name, None) for name in self._flat_weights_names]

    @property
    def all_weights(self):
        return [[getattr(self, name) for name in names] for names in self._all_weights]

    def _weights(self, layer, direction):
        """weight_ih, bias_ih, weight_hh, bias_hh and weight_hr of a layer's direction (None where absent)."""
        suffix = _suffix(layer, direction)
        return [getattr(self, name + suffix, None) for name in ("weight_ih", "bias_ih", "weight_hh", "bias_hh",
                                                                 "weight_hr")]

    def _state_shapes(self, batch):
        directions = 2 if self.bidirectional else 1
        h = (self.num_layers * directions, batch, self.proj_size or self.hidden_size)
        return [h, (self.num_layers * directions, batch, self.hidden_size)] if self.mode == "LSTM" else [h]

    def forward(self, input, hx=None):
        name = type(self).__name__
        packed = isinstance(input, PackedSequence)
        if packed:
            data, batch_sizes = input.data, input.batch_sizes.tolist()
            batch, unbatched = batch_sizes[0], False
        else:
            if input.ndim not in (2, 3):
                raise ArgumentError(f"{name}: Expected input to be 2D or 3D, got {input.ndim}D tensor instead")
            unbatched = input.ndim == 2
            x = input.unsqueeze(1) if unbatched else (input.transpose(0, 1) if self.batch_first else input)
            steps, batch = x.shape[0], x.shape[1]
            data, batch_sizes = x.reshape(steps * batch, x.shape[2]), [batch] * steps
        if data.shape[-1] != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected {self.input_size}, got "
                               f"{data.shape[-1]}")
        state = self._initial_state(hx, data, batch, unbatched, input.sorted_indices if packed else None)
        directions = 2 if self.bidirectional else 1
        run = _recurrence_policy(self.mode, packed, False)
        finals = []
        for layer in range(self.num_layers):
            if layer and self.dropout and self.training:
                data = F.dropout(data, self.dropout, True)
            outs = []
            for direction in range(directions):
                k = layer * directions + direction
                layer_state, weights = tuple(s[k] for s in state), self._weights(layer, direction)
                seqs = run(self.mode, data, batch_sizes, direction == 1, len(layer_state), *layer_state, *weights)
                outs.append(seqs[0])
                finals.append(_final_state(seqs, batch_sizes, direction == 1))
            data = outs[0] if directions == 1 else cat(outs, 1)
        h_n = [stack([f[i] for f in finals]) for i in range(len(state))]
        if packed:
            if input.unsorted_indices is not None:
                h_n = [h.index_select(1, input.unsorted_indices) for h in h_n]
            output = PackedSequence(data, input.batch_sizes, input.sorted_indices, input.unsorted_indices)
        else:
            output = data.reshape(steps, batch, data.shape[-1])
            if unbatched:
                output, h_n = output.squeeze(1), [h.squeeze(1) for h in h_n]
            elif self.batch_first:
                output = output.transpose(0, 1)
        return (output, tuple(h_n)) if self.mode == "LSTM" else (output, h_n[0])

    def _initial_state(self, hx, data, batch, unbatched, sorted_indices):
        """The initial state tensors, each (layers * directions, batch, size), zeros where hx is None; a packed
        input's are put in the packed order."""
        shapes = self._state_shapes(batch)
        if hx is None:
            return [zeros(*shape, dtype=data.dtype, device=data.device) for shape in shapes]
        given = list(hx) if self.mode == "LSTM" else [hx]
        if self.mode == "LSTM" and (isinstance(hx, Tensor) or len(given) != 2):
            raise TypeError("LSTM: hx must be a tuple (h_0, c_0)")
        state = []
        for t, shape in zip(given, shapes):
            want = 2 if unbatched else 3
            if t.ndim != want:
                raise RuntimeError(f"For {'unbatched 2-D' if unbatched else 'batched 3-D'} input, hx should also be "
                                   f"{want}-D but got {t.ndim}-D tensor")
            t = t.unsqueeze(1) if unbatched else t
            if tuple(t.shape) != tuple(shape):
                raise RuntimeError(f"Expected hidden size {tuple(shape)}, got {list(t.shape)}")
            state.append(t.index_select(1, sorted_indices) if sorted_indices is not None else t)
        return state

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s


class RNN(RNNBase):
    """Elman RNN: h_t = nonlinearity(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh), nonlinearity 'tanh' or 'relu'."""

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, device=None, dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ArgumentError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")
        self.nonlinearity = nonlinearity
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size, hidden_size, num_layers,
                         bias, batch_first, dropout, bidirectional, device=device, dtype=dtype)

    def extra_repr(self):
        return super().extra_repr() + (", nonlinearity='relu'" if self.nonlinearity == "relu" else "")


class LSTM(RNNBase):
    """LSTM with gates (input, forget, cell, output) in that order; ``proj_size``
    projects each h_t through weight_hr to proj_size features."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, device, dtype)


class GRU(RNNBase):
    """GRU with gates (reset, update, new) in that order; the reset gate scales
    the hidden projection including its bias, as PyTorch's does."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, device=None, dtype=None):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         device=device, dtype=dtype)


# ---- cells: one step of one layer ----------------------------------------------------------------------

def cell_step(mode, name, input, hx, nstate, weights):
    """One step of one layer of a cell (``mode`` as recurrence's) from input
    (N, input_size) or (input_size,) and hx (h, or (h, c) when nstate is 2;
    zeros when None) with weights (w_ih, b_ih, w_hh, b_hh): the new h, or (h, c)."""
    w_ih, _, w_hh, _ = weights
    input_size, hidden_size = w_ih.shape[1], w_hh.shape[1]
    if input.ndim not in (1, 2):
        raise ArgumentError(f"{name}: Expected input to be 1D or 2D, got {input.ndim}D instead")
    if input.shape[-1] != input_size:
        raise RuntimeError(f"input has inconsistent input_size: got {input.shape[-1]} expected {input_size}")
    unbatched = input.ndim == 1
    x = input.unsqueeze(0) if unbatched else input
    if hx is None:
        state = tuple(zeros(x.shape[0], hidden_size, dtype=x.dtype, device=x.device) for _ in range(nstate))
    else:
        state = tuple(hx) if nstate == 2 else (hx,)
        if len(state) != nstate:
            raise TypeError(f"{name}: hx must be a tuple (h_0, c_0)")
        for s in state:
            if s.ndim != input.ndim:
                raise RuntimeError(f"{name}: Expected hidden to be {input.ndim}D, got {s.ndim}D instead")
        state = tuple(s.unsqueeze(0) if unbatched else s for s in state)
        for s in state:
            if tuple(s.shape) != (x.shape[0], hidden_size):
                raise RuntimeError(f"{name}: hidden has shape {list(s.shape)}, expected {[x.shape[0], hidden_size]}")
    out = _recurrence_policy(mode, False, True)(mode, x, [x.shape[0]], False, nstate, *state, *weights, None)
    out = tuple(o.squeeze(0) for o in out) if unbatched else out
    return out if nstate == 2 else out[0]


class RNNCellBase(Module):
    def __init__(self, input_size, hidden_size, bias, num_chunks, device=None, dtype=None):
        super().__init__()
        self.input_size, self.hidden_size, self.bias = int(input_size), int(hidden_size), bool(bias)
        self.weight_ih = Parameter(empty(num_chunks * self.hidden_size, self.input_size, dtype=dtype, device=device))
        self.weight_hh = Parameter(empty(num_chunks * self.hidden_size, self.hidden_size, dtype=dtype, device=device))
        if bias:
            self.bias_ih = Parameter(empty(num_chunks * self.hidden_size, dtype=dtype, device=device))
            self.bias_hh = Parameter(empty(num_chunks * self.hidden_size, dtype=dtype, device=device))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    reset_parameters = RNNBase.reset_parameters

    def _step(self, mode, input, hx, nstate):
        return cell_step(mode, type(self).__name__, input, hx, nstate,
                         (self.weight_ih, self.bias_ih, self.weight_hh, self.bias_hh))

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if not self.bias:
            s += ", bias=False"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s


class RNNCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None, dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ArgumentError(f"Unknown nonlinearity: {nonlinearity}")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)

    def forward(self, input, hx=None):
        return self._step("RNN_TANH" if self.nonlinearity == "tanh" else "RNN_RELU", input, hx, 1)


class LSTMCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input, hx=None):
        """(h_1, c_1) from input and hx = (h_0, c_0)."""
        return self._step("LSTM", input, hx, 2)


class GRUCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input, hx=None):
        return self._step("GRU", input, hx, 1)

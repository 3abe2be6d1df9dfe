"""One direction of one recurrent layer (tanh or relu RNN, LSTM with or
without projection, GRU) over packed rows, as one autograd node.

Per layer and direction, one GEMM projects the whole sequence's input (both
biases folded in where the formula allows). The loop over time steps then
runs on buffers, outside the graph: per step one GEMM with the recurrent
weight and one fused cell op (csrc/ops_rnn.h; the plain RNN's activation is
ddpc's unary op). Its backward pass walks the steps back the same way (the
cell op's backward and one GEMM per step) and computes every weight gradient
with one GEMM over all steps.

Rows are packed (PackedSequence's layout): step t holds batch_sizes[t] rows,
never more than the step before, so the sequences still running at a step
are the first rows of the step before. Each step's previous state is copied
into a buffer of all steps' previous states, the operand of the weight
gradients' GEMMs."""

from .. import _C
from .. import autograd as _ag
from ..tensor import _ADD

GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}
_ACTIVATION = {"RNN_TANH": _ag._TANH, "RNN_RELU": _ag._RELU}


def _block(buf, lo, n):
    """Rows [lo, lo + n) of a 2-d buffer."""
    width = buf.shape[1]
    return buf.view(lo * width, (n, width))


def _starts(batch_sizes):
    starts = [0]
    for n in batch_sizes:
        starts.append(starts[-1] + n)
    return starts


def final_ranges(batch_sizes, reverse):
    """The row ranges [lo, hi) holding each sequence's last state, in sequence
    order: step 0's rows in reverse (or when the batch is empty); else, for
    each step, its rows whose sequences end there (those the next step no
    longer has)."""
    if reverse or not batch_sizes[0]:
        return [(0, batch_sizes[0])]
    starts, ranges = _starts(batch_sizes), []
    for t in reversed(range(len(batch_sizes))):
        after = batch_sizes[t + 1] if t + 1 < len(batch_sizes) else 0
        if batch_sizes[t] > after:
            ranges.append((starts[t] + after, starts[t] + batch_sizes[t]))
    return ranges


class _Plan:
    """The shapes and step order shared by a layer's forward and backward passes."""

    def __init__(self, mode, batch_sizes, reverse, hidden, out_size):
        self.mode, self.batch_sizes, self.reverse, self.hidden, self.out_size = (mode, batch_sizes, reverse, hidden,
                                                                                 out_size)
        self.starts = _starts(batch_sizes)
        self.rows = self.starts[-1]
        steps = range(len(batch_sizes))
        self.order = list(reversed(steps) if reverse else steps)

    def fill_previous(self, prev, seq, initial, k):
        """prev's block of the k-th step in order = the state before it: the
        first rows of the step before (seq's rows), then the initial state's
        rows for the sequences that start at this step."""
        t = self.order[k]
        n = self.batch_sizes[t]
        dst = _block(prev, self.starts[t], n)
        have = 0
        if k:
            before = self.order[k - 1]
            have = min(n, self.batch_sizes[before])
            _C.copy(_block(dst, 0, have), _block(seq, self.starts[before], have))
        if have < n:
            _C.copy(_block(dst, have, n - have), _block(initial, have, n - have))


def _recorded(p, x, w_ih, b_ih, w_hh, b_hh, w_hr, h0, c0=None):
    """The recurrence's output (as ``recurrence`` returns it in one tensor) in
    recorded ops, step by step, with PyTorch's cell formulas: what a
    create_graph pass differentiates."""
    ag = _ag
    proj = ag.linear(x, w_ih, b_ih)
    outs, cells = {}, {}
    for k, t in enumerate(p.order):
        lo, n = p.starts[t], p.batch_sizes[t]
        have = min(n, p.batch_sizes[p.order[k - 1]]) if k else 0
        pieces = [outs[p.order[k - 1]][:have]] if have else []
        h_prev = ag.cat(pieces + ([h0[have:n]] if have < n else []))
        gi = proj[lo:lo + n]
        gh = ag.linear(h_prev, w_hh, b_hh)
        if p.mode == "LSTM":
            c_prev = ag.cat(([cells[p.order[k - 1]][:have]] if have else []) + ([c0[have:n]] if have < n else []))
            i, f, g, o = (gi + gh).chunk(4, 1)
            cells[t] = ag.sigmoid(f) * c_prev + ag.sigmoid(i) * ag.tanh(g)
            h = ag.sigmoid(o) * ag.tanh(cells[t])
            outs[t] = h if w_hr is None else ag.linear(h, w_hr)
        elif p.mode == "GRU":
            (ir, iz, i_n), (hr, hz, h_n) = gi.chunk(3, 1), gh.chunk(3, 1)
            z = ag.sigmoid(iz + hz)
            outs[t] = (1 - z) * ag.tanh(i_n + ag.sigmoid(ir + hr) * h_n) + z * h_prev
        else:
            outs[t] = (ag.tanh if p.mode == "RNN_TANH" else ag.relu)(gi + gh)
    steps = range(len(p.batch_sizes))
    out = ag.cat([outs[t] for t in steps]) if p.rows else ag._empty((0, w_hh.shape[1]), x)
    if p.mode != "LSTM":
        return out
    return ag.cat([out.reshape(-1)] + ([ag.cat([cells[t] for t in steps]).reshape(-1)] if p.rows else []))


class _RecurrenceBackward(_ag.Node):
    double_backward = True

    def __init__(self, inputs, saved, plan):
        # The inputs themselves are for a create_graph pass, which needs them in the graph.
        super().__init__(inputs, saved + tuple(inputs))
        self.plan = plan

    def name(self):
        return {"LSTM": "LSTM", "GRU": "GRU"}.get(self.plan.mode, "RNN") + "Backward"

    def backward(self, g):
        p = self.plan
        if _ag._mode.enabled:
            return _ag.recomputed_grads(self, g, lambda *inputs: _recorded(p, *inputs), self.saved[11:])
        x, w_ih, w_hh, w_hr, out, gates, prev_h, prev_c, cells, raw, hidden_gates = self.saved[:11]
        need = [e is not None for e in self.edges]
        rows, out_size, width = p.rows, p.out_size, gates.shape[1]
        batch = p.batch_sizes[0] if p.batch_sizes else 0
        # grad_out: the gradient of every step's output, to which each step adds
        # what flows back from the step after it.
        grad_out = _ag._empty((rows, out_size), g)
        _C.copy(grad_out._buf, g._buf.view(0, (rows, out_size)))
        grad_h = _ag._empty((batch, out_size), g)
        _C.fill(grad_h._buf, 0.0)
        grad_c = None
        if p.mode == "LSTM":
            # c's gradient reaches only each sequence's last c (the final state).
            grad_cells = g._buf.view(rows * out_size, (rows, p.hidden))
            grad_c = _ag._empty((batch, p.hidden), g)
            _C.fill(grad_c._buf, 0.0)
            done = 0
            for lo, hi in final_ranges(p.batch_sizes, p.reverse):
                _C.copy(_block(grad_c._buf, done, hi - lo), _block(grad_cells, lo, hi - lo))
                done += hi - lo
        grad_gates = _ag._empty((rows, width), g)
        grad_hidden = _ag._empty((rows, width), g) if p.mode == "GRU" else grad_gates
        step_raw = _ag._empty((batch, p.hidden), g)._buf if w_hr is not None else None
        for t in reversed(p.order):
            lo, n = p.starts[t], p.batch_sizes[t]
            g_t, gh_t = _block(grad_out._buf, lo, n), grad_h._buf.view(0, (n, out_size))
            gates_t, gg_t = _block(gates, lo, n), _block(grad_gates._buf, lo, n)
            _C.binary(_ADD, g_t, g_t, gh_t)
            if p.mode == "LSTM":
                if w_hr is not None:
                    _C.gemm(_block(step_raw, 0, n), g_t, w_hr._buf)
                    g_t = _block(step_raw, 0, n)
                _C.lstm_cell_backward(gg_t, grad_c._buf.view(0, (n, p.hidden)), g_t, gates_t, _block(prev_c, lo, n),
                                      _block(cells, lo, n))
                _C.gemm(gh_t, gg_t, w_hh._buf)
            elif p.mode == "GRU":
                ghid_t = _block(grad_hidden._buf, lo, n)
                _C.gru_cell_backward(gg_t, ghid_t, gh_t, g_t, gates_t, _block(hidden_gates, lo, n),
                                     _block(prev_h, lo, n))
                _C.gemm(gh_t, ghid_t, w_hh._buf, False, False, None, True)
            else:  # relu's derivative reads the same from its output as from its input
                _C.unary_backward(_ACTIVATION[p.mode], gg_t, g_t, _block(out._buf, lo, n))
                _C.gemm(gh_t, gg_t, w_hh._buf)
        gx = gw_ih = gb_ih = gw_hh = gb_hh = gw_hr = None
        if need[0]:
            gx = _ag._empty(x.shape, g)
            _C.gemm(gx._buf, grad_gates._buf, w_ih._buf)
        if need[1]:
            gw_ih = _ag._grad_out(self.edges[1], w_ih.shape, g)
            _C.gemm(gw_ih._buf, grad_gates._buf, x._buf, True, False)
        if need[2]:
            gb_ih = _ag._grad_out(self.edges[2], (width,), g)
            _C.sum_dim(gb_ih._buf, grad_gates._buf, 0)
        if need[3]:
            gw_hh = _ag._grad_out(self.edges[3], w_hh.shape, g)
            _C.gemm(gw_hh._buf, grad_hidden._buf, prev_h, True, False)
        if need[4]:
            gb_hh = _ag._grad_out(self.edges[4], (width,), g)
            _C.sum_dim(gb_hh._buf, grad_hidden._buf, 0)
        if need[5]:
            gw_hr = _ag._grad_out(self.edges[5], w_hr.shape, g)
            _C.gemm(gw_hr._buf, grad_out._buf, raw, True, False)
        return gx, gw_ih, gb_ih, gw_hh, gb_hh, gw_hr, grad_h, grad_c


def _step_weight(w, steps):
    """The buffer of a weight that multiplies every step's state, and whether
    the GEMM is to transpose it: over more than one step, the weight is
    transposed once instead, because numpy's BLAS multiplies a step's few
    rows by a transposed operand about 1.5x slower (OpenBLAS, [32, 256] by
    [256, 1024] in float32)."""
    if steps == 1:
        return w.detach()._buf, True
    wt = _C.Buffer((w.shape[1], w.shape[0]), w.dtype.name, w._buf.device)
    _C.transpose(wt, w.detach()._buf)
    return wt, False


def recurrence(mode, x, batch_sizes, reverse, state, weights):
    """One direction of one layer over the packed rows x [rows, input]:
    ``state`` is (h_0,) or, for an LSTM, (h_0, c_0), each [batch, size] for
    every sequence; ``weights`` are weight_ih, bias_ih, weight_hh, bias_hh and
    weight_hr (None where absent). Returns every step's output [rows, out]
    and, for an LSTM, every step's c [rows, hidden]: a sequence's final state
    is its rows of these at its last step (see final_ranges)."""
    w_ih, b_ih, w_hh, b_hh, w_hr = weights
    operands = (x,) + tuple(weights) + tuple(state)
    if any(t is not None and t.dtype in _ag._HALVES for t in operands):  # computed in float32
        res = recurrence(mode, x.float(), batch_sizes, reverse, tuple(s.float() for s in state),
                         tuple(None if w is None else w.float() for w in weights))
        return tuple(None if r is None else r.to(dtype=x.dtype) for r in res)
    for t in operands[1:]:
        if t is not None and t.dtype is not x.dtype:
            raise TypeError(f"{mode}: the input is {x.dtype}, but a weight or state is {t.dtype}")
        if t is not None and t._buf.device != x._buf.device:
            raise ValueError(f"{mode}: the input is on {x.device}, but a weight or state is on {t.device}")
    hidden = w_hh.shape[0] // GATES[mode]
    out_size = w_hh.shape[1]
    p = _Plan(mode, list(batch_sizes), reverse, hidden, out_size)
    xd = x.detach()
    h0 = state[0].detach()._buf
    width = w_ih.shape[0]

    def buffer(cols):
        return _C.Buffer((p.rows, cols), x.dtype.name, x._buf.device)

    # The input projection of every step, with the recurrent bias too where it adds to the same sum.
    gates = buffer(width)
    bias = None if b_ih is None else b_ih.detach()._buf
    if b_hh is not None and mode != "GRU":
        bias = _C.Buffer((width,), x.dtype.name, x._buf.device)
        _C.binary(_ADD, bias, b_ih.detach()._buf, b_hh.detach()._buf)
    _C.gemm(gates, xd._buf, w_ih.detach()._buf, False, True, bias)
    lstm = mode == "LSTM"
    # An LSTM's outputs and cells are one tensor, the node's one output.
    flat = _ag._empty((p.rows * (out_size + hidden),) if lstm else (p.rows, out_size), x)
    out = flat._buf.view(0, (p.rows, out_size))
    cells = flat._buf.view(p.rows * out_size, (p.rows, hidden)) if lstm else None
    prev_h = buffer(out_size)
    prev_c = buffer(hidden) if lstm else None
    raw = buffer(hidden) if w_hr is not None else None
    hidden_gates = buffer(width) if mode == "GRU" else None
    # h_prev W_hh^T: one step's for an LSTM, every step's for a GRU (whose backward reads them).
    step_gates = _C.Buffer((p.batch_sizes[0] if p.rows else 0, width), x.dtype.name, x._buf.device) if lstm else None
    c0 = state[1].detach()._buf if lstm else None
    whh, trans = _step_weight(w_hh, len(batch_sizes))
    whr = _step_weight(w_hr, len(batch_sizes))[0] if w_hr is not None else None
    bhh = None if b_hh is None else b_hh.detach()._buf
    for k, t in enumerate(p.order):
        lo, n = p.starts[t], p.batch_sizes[t]
        p.fill_previous(prev_h, out, h0, k)
        h_prev, gates_t, out_t = _block(prev_h, lo, n), _block(gates, lo, n), _block(out, lo, n)
        if lstm:
            p.fill_previous(prev_c, cells, c0, k)
            gh_t = _block(step_gates, 0, n)
            _C.gemm(gh_t, h_prev, whh, False, trans)
            h_t = out_t if raw is None else _block(raw, lo, n)
            _C.lstm_cell(h_t, _block(cells, lo, n), gates_t, gh_t, _block(prev_c, lo, n))
            if raw is not None:
                _C.gemm(out_t, h_t, whr, False, trans)
        elif mode == "GRU":
            gh_t = _block(hidden_gates, lo, n)
            _C.gemm(gh_t, h_prev, whh, False, trans, bhh)
            _C.gru_cell(out_t, gates_t, gh_t, h_prev)
        else:
            _C.gemm(gates_t, h_prev, whh, False, trans, None, True)
            _C.unary(_ACTIVATION[mode], out_t, gates_t)
    if _ag._needs_grad(*operands):
        saved = (xd, w_ih.detach(), w_hh.detach(), None if w_hr is None else w_hr.detach(),
                 flat.detach() if mode in _ACTIVATION else None, gates, prev_h, prev_c, cells, raw, hidden_gates)
        _ag._attach(flat, _RecurrenceBackward(operands, saved, p))
    if not lstm:
        return (flat,)
    n_out = p.rows * out_size
    return flat[:n_out].reshape(p.rows, out_size), flat[n_out:].reshape(p.rows, hidden)

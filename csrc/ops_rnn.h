/* Fused recurrent cell ops: the pointwise part of one LSTM or GRU time step
 * over n rows of H units, forward and backward, float32 and float64, one
 * checked entry point each, dispatching to host loops or kernels/rnn.cu.
 * The GEMMs around them (the input and hidden projections, their gradients)
 * and the loop over time steps belong to the caller
 * (python/ddpc/nn/rnn.py); gates follow PyTorch's order and formulas. */
#ifndef DDPC_OPS_RNN_H
#define DDPC_OPS_RNN_H

#include "ops.h"

/* The sum of gates [n, 4H] (x W_ih^T + b_ih + b_hh) and hidden [n, 4H]
 * (h_prev W_hh^T) is the pre-activation of the input, forget, cell and
 * output gates; gates is overwritten by their activations sigmoid(i),
 * sigmoid(f), tanh(g), sigmoid(o), which the backward pass reads. c [n, H] =
 * f * c_prev + i * g and h [n, H] = o * tanh(c). Outputs overlap no input
 * (gates is read before it is written). */
ddpc_status ddpc_op_lstm_cell(ddpc_buffer *h, ddpc_buffer *c, ddpc_buffer *gates, const ddpc_buffer *hidden,
                              const ddpc_buffer *c_prev);
/* ggates [n, 4H] = the gradient of the pre-activations, from gh [n, H] (of
 * h), the activations `gates`, c_prev and c. gc [n, H] holds the gradient of
 * c coming from later steps and is overwritten by that of c_prev. No two
 * operands overlap, here and in the GRU's ops. */
ddpc_status ddpc_op_lstm_cell_backward(ddpc_buffer *ggates, ddpc_buffer *gc, const ddpc_buffer *gh,
                                       const ddpc_buffer *gates, const ddpc_buffer *c_prev, const ddpc_buffer *c);
/* gi [n, 3H] = x W_ih^T + b_ih and gh [n, 3H] = h_prev W_hh^T + b_hh (reset,
 * update and new blocks). r = sigmoid(gi_r + gh_r), z = sigmoid(gi_z +
 * gh_z), n = tanh(gi_n + r * gh_n) and h [n, H] = (1 - z) * n + z * h_prev;
 * gi is overwritten by r, z, n, which the backward pass reads with gh. */
ddpc_status ddpc_op_gru_cell(ddpc_buffer *h, ddpc_buffer *gi, const ddpc_buffer *gh, const ddpc_buffer *h_prev);
/* The gradients ggi and ggh [n, 3H] of gi and gh, and gh_prev [n, H] = the
 * part of h_prev's that does not go through gh (z * grad): the caller adds
 * ggh W_hh. `grad` [n, H] is h's gradient, gates the forward's r, z, n. */
ddpc_status ddpc_op_gru_cell_backward(ddpc_buffer *ggi, ddpc_buffer *ggh, ddpc_buffer *gh_prev, const ddpc_buffer *grad,
                                      const ddpc_buffer *gates, const ddpc_buffer *gh, const ddpc_buffer *h_prev);

int ddpc_rnn_register(PyObject *module);

#endif

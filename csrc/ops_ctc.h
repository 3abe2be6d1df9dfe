/* The CTC loss (connectionist temporal classification), forward and
 * backward, as PyTorch's F.ctc_loss computes it per sample: one checked entry
 * point each, dispatching to host loops (one sample per thread) or
 * kernels/ctc.cu. The recursions are kernels/ctc_rules.h's. */
#ifndef DDPC_OPS_CTC_H
#define DDPC_OPS_CTC_H

#include "ops.h"

/* The per-sample inputs, all on log_probs' device:
 *   log_probs  (T, N, C) float32 or float64, log-probabilities over C classes;
 *   targets    int64, sample n's labels at offsets[n] .. offsets[n] + target_lengths[n];
 *   offsets, target_lengths, input_lengths  int64 (N,). */
typedef struct {
    const ddpc_buffer *log_probs, *targets, *offsets, *target_lengths, *input_lengths;
    int64_t blank;
} ddpc_ctc_inputs;

/* nll (N,) in log_probs' dtype = each sample's negative log-likelihood (inf
 * where no alignment exists); log_alpha (N, T, S) float64 keeps the forward
 * variables for the backward, S at least 2 * max(target_lengths) + 1. */
ddpc_status ddpc_op_ctc_loss(ddpc_buffer *nll, ddpc_buffer *log_alpha, const ddpc_ctc_inputs *in);

/* grad (T, N, C) = the gradient of sum_n g[n] * nll[n] with respect to
 * log_probs, PyTorch's (see ddpc_ctc_grad); zero after a sample's input
 * length, and for samples whose nll is inf when zero_infinity. log_beta is
 * scratch of log_alpha's shape. */
ddpc_status ddpc_op_ctc_loss_backward(ddpc_buffer *grad, ddpc_buffer *log_beta, const ddpc_buffer *g,
                                      const ddpc_buffer *nll, const ddpc_buffer *log_alpha,
                                      const ddpc_ctc_inputs *in, int zero_infinity);

int ddpc_ctc_register(PyObject *module);

#endif

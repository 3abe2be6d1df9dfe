/* The CTC loss recursions (Graves et al., 2006) in log space, written once
 * for the host loops (csrc/ops_ctc.c) and the CUDA kernels (kernels/ctc.cu).
 *
 * A target l of length L is extended with blanks to l' of S = 2L + 1 labels
 * (blank, l0, blank, l1, ..., blank). alpha_t(s) is the log-probability of
 * the alignments of the first t + 1 steps that end in l'_s, beta_t(s) that of
 * the alignments from step t on that start in l'_s; both include step t's
 * emission, as PyTorch's do, so that the loss is -log sum of the last two
 * alphas and the gradient divides alpha * beta by the emission once. Kept in
 * double whatever the input dtype. Plain C, so it compiles with cc and nvcc. */
#ifndef DDPC_CTC_RULES_H
#define DDPC_CTC_RULES_H

#include <math.h>
#include <stdint.h>

#include "kernels.h"

static inline DDPC_HD double ddpc_ctc_lse(double a, double b) {
    double m = a > b ? a : b;
    if (m == -INFINITY) return -INFINITY;
    return m + log(exp(a - m) + exp(b - m));
}

/* l'_s: the blank at even s, the target's (s - 1) / 2-th label at odd s. */
static inline DDPC_HD int64_t ddpc_ctc_label(const int64_t *target, int64_t s, int64_t blank) {
    return (s & 1) ? target[s >> 1] : blank;
}

/* alpha_t(s) from alpha_{t-1} (prev) and step t's emission of l'_s: l'_s is
 * reached from s, s - 1, and s - 2 where l'_s is a label different from the
 * label before it. */
static inline DDPC_HD double ddpc_ctc_alpha(const double *prev, const int64_t *target, int64_t s, double emit) {
    double a = prev[s];
    if (s > 0) a = ddpc_ctc_lse(a, prev[s - 1]);
    if (s > 1 && (s & 1) && target[s >> 1] != target[(s >> 1) - 1]) a = ddpc_ctc_lse(a, prev[s - 2]);
    return a + emit;
}

/* beta_t(s) from beta_{t+1} (next), mirroring ddpc_ctc_alpha. */
static inline DDPC_HD double ddpc_ctc_beta(const double *next, const int64_t *target, int64_t s, int64_t S,
                                           double emit) {
    double b = next[s];
    if (s + 1 < S) b = ddpc_ctc_lse(b, next[s + 1]);
    if (s + 2 < S && (s & 1) && target[s >> 1] != target[(s >> 1) + 1]) b = ddpc_ctc_lse(b, next[s + 2]);
    return b + emit;
}

/* The negative log-likelihood of a target of length L from the alphas of
 * the last step (S = 2L + 1 of them): the alignments end in the last label
 * or the blank after it. */
static inline DDPC_HD double ddpc_ctc_nll(const double *last, int64_t S) {
    return -(S > 1 ? ddpc_ctc_lse(last[S - 1], last[S - 2]) : last[0]);
}

/* PyTorch's gradient of the loss with respect to log_probs[t, c], scaled by
 * g: exp(lp) - exp(lcab + nll - lp), where lcab is the log of sum over the s
 * with l'_s = c of alpha_t(s) beta_t(s) (-inf where c is not in l'). The
 * exp(lp) term makes it the gradient with respect to the logits behind a
 * log_softmax; through log_softmax's backward it leaves the same result. */
static inline DDPC_HD double ddpc_ctc_grad(double lp, double lcab, double nll, double g) {
    return (exp(lp) - exp(lcab + nll - lp)) * g;
}

#endif

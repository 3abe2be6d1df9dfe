/* The CTC loss (see ops_ctc.h). The entry points check shapes, dtypes and
 * (for host buffers) every length and label, then run the recursions of
 * kernels/ctc_rules.h on the host, one sample per thread, or queue
 * kernels/ctc.cu's kernels on the compute stream. */
#include "ops_ctc.h"

#include "ctc_rules.h"
#include "kernels.h"
#include "module.h"
#include "parallel.h"

static double load_(const void *p, int dtype, int64_t i) {
    return dtype == DDPC_FLOAT32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

static void store_(void *p, int dtype, int64_t i, double v) {
    if (dtype == DDPC_FLOAT32)
        ((float *)p)[i] = (float)v;
    else
        ((double *)p)[i] = v;
}

static int is_index_vector_(const ddpc_buffer *b, int64_t n) {
    return b->dtype == DDPC_INT64 && b->ndim == 1 && b->shape[0] == n;
}

/* Shapes and dtypes everywhere; lengths, offsets and labels where the host can read them. */
static ddpc_status check_(const ddpc_ctc_inputs *in, const ddpc_buffer *scratch, ddpc_index_op code) {
    const char *op = ddpc_index_op_name(code);
    const ddpc_buffer *lp = in->log_probs;
    if (lp->ndim != 3 || (lp->dtype != DDPC_FLOAT32 && lp->dtype != DDPC_FLOAT64))
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: log_probs must be (T, N, C) float32 or float64, got %d dims of %s", op,
                          lp->ndim, ddpc_dtype_name(lp->dtype));
    int64_t T = lp->shape[0], N = lp->shape[1], C = lp->shape[2];
    const ddpc_buffer *idx[4] = {in->targets, in->offsets, in->target_lengths, in->input_lengths};
    for (int i = 0; i < 4; i++)
        if (idx[i]->device != lp->device || idx[i]->dtype != DDPC_INT64)
            return DDPC_ERROR(DDPC_ERR_ARG, "%s: targets and lengths must be int64 on log_probs' device", op);
    if (!is_index_vector_(in->offsets, N) || !is_index_vector_(in->target_lengths, N) ||
        !is_index_vector_(in->input_lengths, N))
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: offsets and lengths must have one entry per sample (%lld)", op,
                          (long long)N);
    if (in->blank < 0 || in->blank >= C)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: blank %lld is not a class of %lld", op, (long long)in->blank,
                          (long long)C);
    if (scratch->dtype != DDPC_FLOAT64 || scratch->ndim != 3 || scratch->shape[0] != N || scratch->shape[1] != T ||
        scratch->device != lp->device)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: the alpha/beta scratch must be float64 (N, T, S) on log_probs' device",
                          op);
    if (lp->device != DDPC_CPU) return DDPC_OK;
    const int64_t *off = in->offsets->data, *tl = in->target_lengths->data, *il = in->input_lengths->data;
    const int64_t *tg = in->targets->data, S = scratch->shape[2];
    for (int64_t n = 0; n < N; n++) {
        if (il[n] < 0 || il[n] > T)
            return DDPC_ERROR(DDPC_ERR_ARG, "%s: input length %lld of sample %lld is outside [0, %lld]", op,
                              (long long)il[n], (long long)n, (long long)T);
        if (tl[n] < 0 || 2 * tl[n] + 1 > S || off[n] < 0 || off[n] + tl[n] > in->targets->numel)
            return DDPC_ERROR(DDPC_ERR_ARG, "%s: target length %lld of sample %lld does not fit its targets", op,
                              (long long)tl[n], (long long)n);
        for (int64_t j = off[n]; j < off[n] + tl[n]; j++)
            if (tg[j] < 0 || tg[j] >= C || tg[j] == in->blank)
                return DDPC_INDEX_ERROR(.op = code, .index = tg[j], .bound = C, .at = n, .other = in->blank);
    }
    return DDPC_OK;
}

/* What one host thread needs for its samples. */
typedef struct {
    const ddpc_ctc_inputs *in;
    int64_t S_max;     /* row length of the alpha and beta scratch */
    double *alpha;     /* (N, T, S_max) */
    double *beta;      /* backward only */
    void *nll;         /* forward: out; backward: in */
    void *grad;        /* backward: (T, N, C) out */
    const void *g;     /* backward: (N,) scale of each sample's loss */
    int zero_infinity;
} job_;

/* Sample n's geometry: its target, S = 2L + 1 extended labels, Tn steps. */
typedef struct {
    const int64_t *target;
    int64_t S, Tn;
} sample_;

static sample_ sample_of_(const ddpc_ctc_inputs *in, int64_t n) {
    int64_t L = ((const int64_t *)in->target_lengths->data)[n];
    return (sample_){(const int64_t *)in->targets->data + ((const int64_t *)in->offsets->data)[n], 2 * L + 1,
                     ((const int64_t *)in->input_lengths->data)[n]};
}

/* log_probs[t, n, l'_s]. */
static double emit_(const ddpc_ctc_inputs *in, const sample_ *x, int64_t t, int64_t n, int64_t s) {
    const ddpc_buffer *lp = in->log_probs;
    return load_(lp->data, lp->dtype, (t * lp->shape[1] + n) * lp->shape[2] + ddpc_ctc_label(x->target, s, in->blank));
}

static void forward_range_(void *ctx, int64_t lo, int64_t hi) {
    const job_ *j = ctx;
    const ddpc_ctc_inputs *in = j->in;
    const int64_t T = in->log_probs->shape[0];
    for (int64_t n = lo; n < hi; n++) {
        sample_ x = sample_of_(in, n);
        double *alpha = j->alpha + n * T * j->S_max, nll = x.S == 1 ? 0.0 : INFINITY;
        if (x.Tn > 0) {
            for (int64_t s = 0; s < x.S; s++) alpha[s] = s < 2 ? emit_(in, &x, 0, n, s) : -INFINITY;
            for (int64_t t = 1; t < x.Tn; t++)
                for (int64_t s = 0; s < x.S; s++)
                    alpha[t * j->S_max + s] =
                        ddpc_ctc_alpha(alpha + (t - 1) * j->S_max, x.target, s, emit_(in, &x, t, n, s));
            nll = ddpc_ctc_nll(alpha + (x.Tn - 1) * j->S_max, x.S);
        }
        store_(j->nll, in->log_probs->dtype, n, nll);
    }
}

/* Betas, then for each step the per-class lcab accumulated in the gradient
 * row itself before it becomes the gradient. */
static void backward_range_(void *ctx, int64_t lo, int64_t hi) {
    const job_ *j = ctx;
    const ddpc_ctc_inputs *in = j->in;
    const ddpc_buffer *lp = in->log_probs;
    const int64_t T = lp->shape[0], N = lp->shape[1], C = lp->shape[2], S_max = j->S_max;
    const int dt = lp->dtype;
    for (int64_t n = lo; n < hi; n++) {
        sample_ x = sample_of_(in, n);
        double nll = load_(j->nll, dt, n), g = load_(j->g, dt, n);
        int dead = isinf(nll) && j->zero_infinity;
        for (int64_t t = 0; t < T; t++)
            for (int64_t c = 0; c < C; c++) store_(j->grad, dt, (t * N + n) * C + c, 0.0);
        if (dead || x.Tn == 0 || g == 0) continue;
        const double *alpha = j->alpha + n * T * S_max;
        double *beta = j->beta + n * T * S_max;
        const int64_t last = (x.Tn - 1) * S_max;
        for (int64_t s = 0; s < x.S; s++) beta[last + s] = s >= x.S - 2 ? emit_(in, &x, x.Tn - 1, n, s) : -INFINITY;
        for (int64_t t = x.Tn - 2; t >= 0; t--)
            for (int64_t s = 0; s < x.S; s++)
                beta[t * S_max + s] = ddpc_ctc_beta(beta + (t + 1) * S_max, x.target, s, x.S, emit_(in, &x, t, n, s));
        for (int64_t t = 0; t < x.Tn; t++) {
            const int64_t row = (t * N + n) * C;
            for (int64_t c = 0; c < C; c++) store_(j->grad, dt, row + c, -INFINITY);
            for (int64_t s = 0; s < x.S; s++) {
                int64_t c = ddpc_ctc_label(x.target, s, in->blank);
                double ab = alpha[t * S_max + s] + beta[t * S_max + s];
                store_(j->grad, dt, row + c, ddpc_ctc_lse(load_(j->grad, dt, row + c), ab));
            }
            for (int64_t c = 0; c < C; c++)
                store_(j->grad, dt, row + c,
                       ddpc_ctc_grad(load_(lp->data, dt, row + c), load_(j->grad, dt, row + c), nll, g));
        }
    }
}

ddpc_status ddpc_op_ctc_loss(ddpc_buffer *nll, ddpc_buffer *log_alpha, const ddpc_ctc_inputs *in) {
    const char *op = ddpc_index_op_name(DDPC_IX_CTC_LOSS);
    CHECK(check_(in, log_alpha, DDPC_IX_CTC_LOSS));
    const ddpc_buffer *lp = in->log_probs;
    const int64_t N = lp->shape[1];
    if (nll->readonly || nll->dtype != lp->dtype || nll->numel != N || nll->device != lp->device)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: the loss output must be a writable (N,) %s on log_probs' device", op,
                          ddpc_dtype_name(lp->dtype));
    if (N == 0) return DDPC_OK;
    if (lp->device != DDPC_CPU)
        DDPC_LAUNCH_INDEXED(lp->device, DDPC_IX_CTC_LOSS,
                            ddpc_k_ctc_forward(nll->data, log_alpha->data, lp->data, lp->dtype, in->targets->data,
                                               in->offsets->data, in->target_lengths->data, in->input_lengths->data,
                                               lp->shape[0], N, lp->shape[2], log_alpha->shape[2], in->blank,
                                               index_check, stream));
    job_ j = {.in = in, .S_max = log_alpha->shape[2], .alpha = log_alpha->data, .nll = nll->data};
    ddpc_parallel_for(N, 1, forward_range_, &j);
    return DDPC_OK;
}

ddpc_status ddpc_op_ctc_loss_backward(ddpc_buffer *grad, ddpc_buffer *log_beta, const ddpc_buffer *g,
                                      const ddpc_buffer *nll, const ddpc_buffer *log_alpha,
                                      const ddpc_ctc_inputs *in, int zero_infinity) {
    const char *op = ddpc_index_op_name(DDPC_IX_CTC_LOSS_BACKWARD);
    CHECK(check_(in, log_beta, DDPC_IX_CTC_LOSS_BACKWARD));
    CHECK(check_(in, log_alpha, DDPC_IX_CTC_LOSS_BACKWARD));
    const ddpc_buffer *lp = in->log_probs;
    const int64_t N = lp->shape[1];
    if (log_beta->shape[2] != log_alpha->shape[2])
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: alpha and beta scratch differ in shape", op);
    if (grad->readonly || grad->dtype != lp->dtype || grad->numel != lp->numel || grad->device != lp->device)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: the gradient must be a writable buffer like log_probs", op);
    const ddpc_buffer *per_sample[2] = {g, nll};
    for (int i = 0; i < 2; i++)
        if (per_sample[i]->dtype != lp->dtype || per_sample[i]->numel != N || per_sample[i]->device != lp->device)
            return DDPC_ERROR(DDPC_ERR_ARG, "%s: the loss and its gradient must be (N,) %s on log_probs' device", op,
                              ddpc_dtype_name(lp->dtype));
    if (lp->numel == 0) return DDPC_OK;
    if (lp->device != DDPC_CPU)
        DDPC_LAUNCH_INDEXED(lp->device, DDPC_IX_CTC_LOSS_BACKWARD,
                            ddpc_k_ctc_backward(grad->data, log_beta->data, g->data, nll->data, log_alpha->data,
                                                lp->data, lp->dtype, in->targets->data, in->offsets->data,
                                                in->target_lengths->data, in->input_lengths->data, lp->shape[0], N,
                                                lp->shape[2], log_alpha->shape[2], in->blank, zero_infinity,
                                                index_check, stream));
    job_ j = {.in = in, .S_max = log_alpha->shape[2], .alpha = log_alpha->data, .beta = log_beta->data,
              .nll = nll->data, .grad = grad->data, .g = g->data, .zero_infinity = zero_infinity};
    ddpc_parallel_for(N, 1, backward_range_, &j);
    return DDPC_OK;
}

/* ---- bindings ------------------------------------------------------------------------ */

static PyObject *py_ctc_loss(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *nll, *alpha, *lp, *targets, *offsets, *tl, *il;
    long long blank;
    if (!ddpc_parse_args(args, "O&O&O&O&O&O&O&L:ctc_loss", ddpc_arg_buffer, &nll, ddpc_arg_buffer, &alpha,
                         ddpc_arg_buffer, &lp, ddpc_arg_buffer, &targets, ddpc_arg_buffer, &offsets,
                         ddpc_arg_buffer, &tl, ddpc_arg_buffer, &il, &blank))
        return NULL;
    ddpc_ctc_inputs in = {lp, targets, offsets, tl, il, blank};
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(alpha), ddpc_op_ctc_loss(nll, alpha, &in));
}

static PyObject *py_ctc_loss_backward(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *grad, *beta, *g, *nll, *alpha, *lp, *targets, *offsets, *tl, *il;
    long long blank;
    int zero_infinity;
    if (!ddpc_parse_args(args, "O&O&O&O&O&O&O&O&O&O&Lp:ctc_loss_backward", ddpc_arg_buffer, &grad,
                         ddpc_arg_buffer, &beta, ddpc_arg_buffer, &g, ddpc_arg_buffer, &nll, ddpc_arg_buffer, &alpha,
                         ddpc_arg_buffer, &lp, ddpc_arg_buffer, &targets, ddpc_arg_buffer, &offsets, ddpc_arg_buffer,
                         &tl, ddpc_arg_buffer, &il, &blank, &zero_infinity))
        return NULL;
    ddpc_ctc_inputs in = {lp, targets, offsets, tl, il, blank};
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(alpha),
                      ddpc_op_ctc_loss_backward(grad, beta, g, nll, alpha, &in, zero_infinity));
}

static PyMethodDef ctc_methods[] = {
    {"ctc_loss", py_ctc_loss, METH_VARARGS,
     "ctc_loss(nll, log_alpha, log_probs, targets, offsets, target_lengths, input_lengths, blank): per-sample "
     "negative log-likelihoods, keeping the forward variables in log_alpha (float64, (N, T, S))"},
    {"ctc_loss_backward", py_ctc_loss_backward, METH_VARARGS,
     "ctc_loss_backward(grad, log_beta, g, nll, log_alpha, log_probs, targets, offsets, target_lengths, "
     "input_lengths, blank, zero_infinity): the gradient of sum(g * nll) with respect to log_probs"},
    {NULL, NULL, 0, NULL},
};

int ddpc_ctc_register(PyObject *module) { return PyModule_AddFunctions(module, ctc_methods); }

/* Fused recurrent cell op entry points (see ops_rnn.h): argument checks, then
 * host loops or the launchers of kernels/rnn.cu.
 *
 * One time step of a layer is one GEMM and one of these ops, instead of a
 * dozen pointwise ops each reading and writing the whole step. The host
 * loops run over rows, split across cores by ddpc_parallel_for when a step
 * is large enough to pay for the threads. */
#include "ops_rnn.h"

#include <tgmath.h>

#include "fastmath.h"
#include "kernels.h"
#include "module.h"
#include "ops_nn.h"
#include "parallel.h"

/* Elements of a step per thread chunk: below this, starting a thread costs
 * more than the activations it would compute. */
#define RNN_CHUNK (1 << 16)

/* ---- argument checks ------------------------------------------------------------ */

/* `b` must be a 2-d [rows, cols] buffer of ref's dtype and device. */
static ddpc_status check_matrix_(const ddpc_buffer *ref, const ddpc_buffer *b, int64_t rows, int64_t cols,
                                 const char *op, const char *what) {
    if (b->dtype != ref->dtype)
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: %s is %s, expected %s", op, what, ddpc_dtype_name(b->dtype),
                          ddpc_dtype_name(ref->dtype));
    if (b->device != ref->device) return DDPC_ERROR(DDPC_ERR_ARG, "%s: %s is on another device", op, what);
    if (b->ndim != 2 || b->shape[0] != rows || b->shape[1] != cols)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: %s must be [%lld, %lld]", op, what, (long long)rows, (long long)cols);
    return DDPC_OK;
}

/* Checks the cell's operands against the [n, H] state `ref`: outputs
 * (writable) and inputs named in turn, each [n, H * its gate count]. */
typedef struct {
    const ddpc_buffer *buf;
    int gates, writable;
    const char *what;
} operand_;

static ddpc_status check_cell_(const ddpc_buffer *ref, const operand_ *ops, int count, const char *op, int64_t *n,
                               int64_t *H) {
    if (ref->dtype != DDPC_FLOAT32 && ref->dtype != DDPC_FLOAT64)
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: needs float32 or float64, got %s", op, ddpc_dtype_name(ref->dtype));
    if (ref->ndim != 2) return DDPC_ERROR(DDPC_ERR_ARG, "%s: the state must be 2-d, got %d dims", op, ref->ndim);
    *n = ref->shape[0], *H = ref->shape[1];
    for (int k = 0; k < count; k++) {
        CHECK(check_matrix_(ref, ops[k].buf, *n, *H * ops[k].gates, op, ops[k].what));
        if (ops[k].writable && ops[k].buf->readonly)
            return DDPC_ERROR(DDPC_ERR_ARG, "%s: %s is read-only", op, ops[k].what);
    }
    return DDPC_OK;
}

/* ---- host loops ------------------------------------------------------------------ */

/* One row of each op, written once over the element type T and defined for
 * float and double (suffix S). The compiler vectorises these loops because
 * the pointers are restrict-qualified parameters; it does not for restrict
 * pointers declared inside a loop over rows. Each is also compiled for
 * AVX-512 and AVX2 (DDPC_ROW_TARGETS: an LSTM step of 32 x 256 units took
 * 34 us with AVX-512, 55 with AVX2, 99 without). */
#define DEFINE_ROWS_(T, S)                                                                                            \
    DDPC_ROW_TARGETS static void lstm_row_##S(T *restrict h, T *restrict c, T *restrict g, const T *restrict gh,                      \
                             const T *restrict c_prev, int64_t H) {                                                  \
        for (int64_t k = 0; k < H; k++) {                                                                             \
            T i = SIGMOID_T(T, g[k] + gh[k]), f = SIGMOID_T(T, g[H + k] + gh[H + k]);                                 \
            T cell = TANH_T(T, g[2 * H + k] + gh[2 * H + k]), o = SIGMOID_T(T, g[3 * H + k] + gh[3 * H + k]);         \
            T cv = f * c_prev[k] + i * cell;                                                                          \
            c[k] = cv;                                                                                                \
            h[k] = o * TANH_T(T, cv);                                                                                 \
            g[k] = i, g[H + k] = f, g[2 * H + k] = cell, g[3 * H + k] = o;                                            \
        }                                                                                                             \
    }                                                                                                                 \
    DDPC_ROW_TARGETS static void lstm_backward_row_##S(T *restrict gg, T *restrict gc, const T *restrict gh, const T *restrict g,     \
                                      const T *restrict c_prev, const T *restrict c, int64_t H) {                    \
        for (int64_t k = 0; k < H; k++) {                                                                             \
            T i = g[k], f = g[H + k], cell = g[2 * H + k], o = g[3 * H + k];                                          \
            T tc = TANH_T(T, c[k]), dh = gh[k];                                                                       \
            T dc = gc[k] + dh * o * (1 - tc * tc);                                                                    \
            gg[k] = dc * cell * i * (1 - i);                                                                          \
            gg[H + k] = dc * c_prev[k] * f * (1 - f);                                                                 \
            gg[2 * H + k] = dc * i * (1 - cell * cell);                                                               \
            gg[3 * H + k] = dh * tc * o * (1 - o);                                                                    \
            gc[k] = dc * f;                                                                                           \
        }                                                                                                             \
    }                                                                                                                 \
    DDPC_ROW_TARGETS static void gru_row_##S(T *restrict h, T *restrict a, const T *restrict b, const T *restrict h_prev, int64_t H) { \
        for (int64_t k = 0; k < H; k++) {                                                                             \
            T reset = SIGMOID_T(T, a[k] + b[k]), update = SIGMOID_T(T, a[H + k] + b[H + k]);                          \
            T cand = TANH_T(T, a[2 * H + k] + reset * b[2 * H + k]);                                                  \
            h[k] = (h_prev[k] - cand) * update + cand;                                                                \
            a[k] = reset, a[H + k] = update, a[2 * H + k] = cand;                                                     \
        }                                                                                                             \
    }                                                                                                                 \
    DDPC_ROW_TARGETS static void gru_backward_row_##S(T *restrict da, T *restrict db, T *restrict gh_prev, const T *restrict grad,    \
                                     const T *restrict a, const T *restrict b, const T *restrict h_prev, int64_t H) { \
        for (int64_t k = 0; k < H; k++) {                                                                             \
            T reset = a[k], update = a[H + k], cand = a[2 * H + k], dy = grad[k];                                     \
            T dcand = dy * (1 - update) * (1 - cand * cand);                                                          \
            T dupdate = dy * (h_prev[k] - cand) * update * (1 - update);                                              \
            T dreset = dcand * b[2 * H + k] * reset * (1 - reset);                                                    \
            da[k] = dreset, db[k] = dreset;                                                                           \
            da[H + k] = dupdate, db[H + k] = dupdate;                                                                 \
            da[2 * H + k] = dcand;                                                                                    \
            db[2 * H + k] = dcand * reset;                                                                            \
            gh_prev[k] = dy * update;                                                                                 \
        }                                                                                                             \
    }

DEFINE_ROWS_(float, f32)
DEFINE_ROWS_(double, f64)

/* The row function `name` for the element type T. */
#define ROW_FN_(T, name) _Generic((T)0, float: name##_f32, default: name##_f64)

/* The operands of one op in the order its row function takes them. */
typedef struct {
    ddpc_dtype dtype;
    int64_t H;
    void *p[7];
} cell_job_;

/* Operand k of row r, whose rows hold `gates` blocks of H elements. */
#define ROW_(T, j, k, r, gates) ((T *)(j)->p[k] + (r) * (gates) * (j)->H)

static void lstm_range_(void *ctx, int64_t lo, int64_t hi) {
    const cell_job_ *j = ctx;
    DDPC_FLOAT_TYPES(j->dtype, {
        for (int64_t r = lo; r < hi; r++)
            ROW_FN_(T, lstm_row)(ROW_(T, j, 0, r, 1), ROW_(T, j, 1, r, 1), ROW_(T, j, 2, r, 4), ROW_(T, j, 3, r, 4),
                                 ROW_(T, j, 4, r, 1), j->H);
    });
}

static void lstm_backward_range_(void *ctx, int64_t lo, int64_t hi) {
    const cell_job_ *j = ctx;
    DDPC_FLOAT_TYPES(j->dtype, {
        for (int64_t r = lo; r < hi; r++)
            ROW_FN_(T, lstm_backward_row)(ROW_(T, j, 0, r, 4), ROW_(T, j, 1, r, 1), ROW_(T, j, 2, r, 1),
                                          ROW_(T, j, 3, r, 4), ROW_(T, j, 4, r, 1), ROW_(T, j, 5, r, 1), j->H);
    });
}

static void gru_range_(void *ctx, int64_t lo, int64_t hi) {
    const cell_job_ *j = ctx;
    DDPC_FLOAT_TYPES(j->dtype, {
        for (int64_t r = lo; r < hi; r++)
            ROW_FN_(T, gru_row)(ROW_(T, j, 0, r, 1), ROW_(T, j, 1, r, 3), ROW_(T, j, 2, r, 3), ROW_(T, j, 3, r, 1),
                                j->H);
    });
}

static void gru_backward_range_(void *ctx, int64_t lo, int64_t hi) {
    const cell_job_ *j = ctx;
    DDPC_FLOAT_TYPES(j->dtype, {
        for (int64_t r = lo; r < hi; r++)
            ROW_FN_(T, gru_backward_row)(ROW_(T, j, 0, r, 3), ROW_(T, j, 1, r, 3), ROW_(T, j, 2, r, 1),
                                         ROW_(T, j, 3, r, 1), ROW_(T, j, 4, r, 3), ROW_(T, j, 5, r, 3),
                                         ROW_(T, j, 6, r, 1), j->H);
    });
}

/* Runs `fn` over the job's n rows, split across cores when large. */
static void run_rows_(ddpc_range_fn fn, cell_job_ *j, int64_t n, int gates) {
    int64_t row = j->H * gates;
    ddpc_parallel_for(n, row > 0 && row < RNN_CHUNK ? RNN_CHUNK / row : 1, fn, j);
}

/* ---- entry points ------------------------------------------------------------------ */

ddpc_status ddpc_op_lstm_cell(ddpc_buffer *h, ddpc_buffer *c, ddpc_buffer *gates, const ddpc_buffer *hidden,
                              const ddpc_buffer *c_prev) {
    const operand_ ops[] = {{h, 1, 1, "h"}, {c, 1, 1, "c"}, {gates, 4, 1, "the gates"},
                            {hidden, 4, 0, "the hidden gates"}, {c_prev, 1, 0, "c_prev"}};
    int64_t n = 0, H = 0;
    CHECK(check_cell_(h, ops, 5, "lstm cell", &n, &H));
    if (n == 0 || H == 0) return DDPC_OK;
    if (h->device != DDPC_CPU)
        DDPC_LAUNCH(h->device, ddpc_k_lstm_cell(h->data, c->data, gates->data, hidden->data, c_prev->data, h->dtype, n,
                                                H, stream));
    cell_job_ j = {.dtype = h->dtype, .H = H, .p = {h->data, c->data, gates->data, hidden->data, c_prev->data}};
    run_rows_(lstm_range_, &j, n, 4);
    return DDPC_OK;
}

ddpc_status ddpc_op_lstm_cell_backward(ddpc_buffer *ggates, ddpc_buffer *gc, const ddpc_buffer *gh,
                                       const ddpc_buffer *gates, const ddpc_buffer *c_prev, const ddpc_buffer *c) {
    const operand_ ops[] = {{ggates, 4, 1, "the gates' gradient"}, {gc, 1, 1, "c's gradient"},
                            {gates, 4, 0, "the gates"}, {c_prev, 1, 0, "c_prev"}, {c, 1, 0, "c"}};
    int64_t n = 0, H = 0;
    CHECK(check_cell_(gh, ops, 5, "lstm cell backward", &n, &H));
    if (n == 0 || H == 0) return DDPC_OK;
    if (gh->device != DDPC_CPU)
        DDPC_LAUNCH(gh->device, ddpc_k_lstm_cell_backward(ggates->data, gc->data, gh->data, gates->data, c_prev->data,
                                                          c->data, gh->dtype, n, H, stream));
    cell_job_ j = {.dtype = gh->dtype, .H = H,
                   .p = {ggates->data, gc->data, gh->data, gates->data, c_prev->data, c->data}};
    run_rows_(lstm_backward_range_, &j, n, 4);
    return DDPC_OK;
}

ddpc_status ddpc_op_gru_cell(ddpc_buffer *h, ddpc_buffer *gi, const ddpc_buffer *gh, const ddpc_buffer *h_prev) {
    const operand_ ops[] = {{h, 1, 1, "h"}, {gi, 3, 1, "the input gates"}, {gh, 3, 0, "the hidden gates"},
                            {h_prev, 1, 0, "h_prev"}};
    int64_t n = 0, H = 0;
    CHECK(check_cell_(h, ops, 4, "gru cell", &n, &H));
    if (n == 0 || H == 0) return DDPC_OK;
    if (h->device != DDPC_CPU)
        DDPC_LAUNCH(h->device, ddpc_k_gru_cell(h->data, gi->data, gh->data, h_prev->data, h->dtype, n, H, stream));
    cell_job_ j = {.dtype = h->dtype, .H = H, .p = {h->data, gi->data, gh->data, h_prev->data}};
    run_rows_(gru_range_, &j, n, 3);
    return DDPC_OK;
}

ddpc_status ddpc_op_gru_cell_backward(ddpc_buffer *ggi, ddpc_buffer *ggh, ddpc_buffer *gh_prev, const ddpc_buffer *grad,
                                      const ddpc_buffer *gates, const ddpc_buffer *gh, const ddpc_buffer *h_prev) {
    const operand_ ops[] = {{ggi, 3, 1, "the input gates' gradient"}, {ggh, 3, 1, "the hidden gates' gradient"},
                            {gh_prev, 1, 1, "h_prev's gradient"}, {gates, 3, 0, "the gates"},
                            {gh, 3, 0, "the hidden gates"}, {h_prev, 1, 0, "h_prev"}};
    int64_t n = 0, H = 0;
    CHECK(check_cell_(grad, ops, 6, "gru cell backward", &n, &H));
    if (n == 0 || H == 0) return DDPC_OK;
    if (grad->device != DDPC_CPU)
        DDPC_LAUNCH(grad->device, ddpc_k_gru_cell_backward(ggi->data, ggh->data, gh_prev->data, grad->data,
                                                           gates->data, gh->data, h_prev->data, grad->dtype, n, H,
                                                           stream));
    cell_job_ j = {.dtype = grad->dtype, .H = H,
                   .p = {ggi->data, ggh->data, gh_prev->data, grad->data, gates->data, gh->data, h_prev->data}};
    run_rows_(gru_backward_range_, &j, n, 3);
    return DDPC_OK;
}

/* ---- Python bindings ---------------------------------------------------------------- */

static PyObject *py_lstm_cell(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *h, *c, *gates, *hidden, *c_prev;
    if (!ddpc_parse_args(args, "O&O&O&O&O&:lstm_cell", ddpc_arg_buffer, &h, ddpc_arg_buffer, &c, ddpc_arg_buffer,
                         &gates, ddpc_arg_buffer, &hidden, ddpc_arg_buffer, &c_prev))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(gates), ddpc_op_lstm_cell(h, c, gates, hidden, c_prev));
}

static PyObject *py_lstm_cell_backward(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *ggates, *gc, *gh, *gates, *c_prev, *c;
    if (!ddpc_parse_args(args, "O&O&O&O&O&O&:lstm_cell_backward", ddpc_arg_buffer, &ggates, ddpc_arg_buffer, &gc,
                         ddpc_arg_buffer, &gh, ddpc_arg_buffer, &gates, ddpc_arg_buffer, &c_prev, ddpc_arg_buffer, &c))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(gates), ddpc_op_lstm_cell_backward(ggates, gc, gh, gates, c_prev, c));
}

static PyObject *py_gru_cell(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *h, *gi, *gh, *h_prev;
    if (!ddpc_parse_args(args, "O&O&O&O&:gru_cell", ddpc_arg_buffer, &h, ddpc_arg_buffer, &gi, ddpc_arg_buffer, &gh,
                         ddpc_arg_buffer, &h_prev))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(gi), ddpc_op_gru_cell(h, gi, gh, h_prev));
}

static PyObject *py_gru_cell_backward(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *ggi, *ggh, *gh_prev, *grad, *gates, *gh, *h_prev;
    if (!ddpc_parse_args(args, "O&O&O&O&O&O&O&:gru_cell_backward", ddpc_arg_buffer, &ggi, ddpc_arg_buffer, &ggh,
                         ddpc_arg_buffer, &gh_prev, ddpc_arg_buffer, &grad, ddpc_arg_buffer, &gates, ddpc_arg_buffer,
                         &gh, ddpc_arg_buffer, &h_prev))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(gates), ddpc_op_gru_cell_backward(ggi, ggh, gh_prev, grad, gates, gh, h_prev));
}

static PyMethodDef rnn_methods[] = {
    {"lstm_cell", py_lstm_cell, METH_VARARGS,
     "lstm_cell(h, c, gates, hidden, c_prev): one LSTM step from the input and hidden parts of the gates' "
     "pre-activations [n, 4H] (gates overwritten by the activations)"},
    {"lstm_cell_backward", py_lstm_cell_backward, METH_VARARGS,
     "lstm_cell_backward(ggates, gc, gh, gates, c_prev, c): gc holds c's gradient and gets c_prev's"},
    {"gru_cell", py_gru_cell, METH_VARARGS,
     "gru_cell(h, gi, gh, h_prev): one GRU step from the input and hidden projections [n, 3H] (gi overwritten by "
     "r, z, n)"},
    {"gru_cell_backward", py_gru_cell_backward, METH_VARARGS,
     "gru_cell_backward(ggi, ggh, gh_prev, grad, gates, gh, h_prev): gh_prev gets the part of h_prev's gradient "
     "outside ggh @ W_hh"},
    {NULL, NULL, 0, NULL},
};

int ddpc_rnn_register(PyObject *module) { return PyModule_AddFunctions(module, rnn_methods); }

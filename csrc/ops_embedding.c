/* Embedding bag op entry points (see ops_embedding.h): argument checks, then
 * host loops or the launchers of kernels/embedding.cu.
 *
 * The forward pass and the per-sample weights' gradient split the bags
 * across cores; the table's gradient splits its columns instead, since bags
 * share rows and no two units may add into the same element. */
#include "ops_embedding.h"

#include <string.h>

#include "kernels.h"
#include "module.h"
#include "ops_nn.h"
#include "parallel.h"

/* Columns of the table's gradient per unit of work. */
#define BAG_COLUMNS 64

/* ---- argument checks ------------------------------------------------------------ */

static ddpc_status check_shape_(const ddpc_buffer *b, int64_t rows, int64_t cols, const char *op, const char *what) {
    if (b->ndim != 2 || b->shape[0] != rows || b->shape[1] != cols)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: %s must have shape (%lld, %lld)", op, what, (long long)rows,
                          (long long)cols);
    return DDPC_OK;
}

static ddpc_status check_int64_(const ddpc_buffer *b, const ddpc_buffer *ref, const char *op, const char *what) {
    if (b->dtype != DDPC_INT64 || b->device != ref->device || b->ndim != 1)
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: %s must be a 1-d int64 buffer on the table's device", op, what);
    return DDPC_OK;
}

/* The bags of op `code` checked against a table of `rows` rows on `ref`'s
 * device, as the kernels take them. On the host the indices and offsets are
 * checked too (a GPU's would need a synchronisation: its kernels skip or
 * clamp them, and report them through the device's index error record). */
static ddpc_status bags_(const ddpc_bags *in, const ddpc_buffer *ref, int64_t rows, int64_t d, ddpc_index_op code,
                         ddpc_k_bags *out) {
    const char *op = ddpc_index_op_name(code);
    CHECK(check_int64_(in->indices, ref, op, "the indices"));
    CHECK(check_int64_(in->offsets, ref, op, "the offsets"));
    if (in->offsets->numel < 1) return DDPC_ERROR(DDPC_ERR_ARG, "%s: the offsets need at least one element", op);
    if (in->mode != DDPC_BAG_SUM && in->mode != DDPC_BAG_MEAN && in->mode != DDPC_BAG_MAX)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: unknown mode %d", op, (int)in->mode);
    if (in->weights) {
        if (in->mode != DDPC_BAG_SUM)
            return DDPC_ERROR(DDPC_ERR_ARG, "%s: per-sample weights are only supported for mode sum", op);
        CHECK(ddpc_check_float_like(in->weights, ref, op, "the per-sample weights"));
        if (in->weights->numel != in->indices->numel)
            return DDPC_ERROR(DDPC_ERR_ARG, "%s: %lld per-sample weights for %lld indices", op,
                              (long long)in->weights->numel, (long long)in->indices->numel);
    }
    if (in->padding_idx < -1 || in->padding_idx >= rows)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: padding_idx %lld is out of range for %lld rows", op,
                          (long long)in->padding_idx, (long long)rows);
    *out = (ddpc_k_bags){.indices = in->indices->data, .offsets = in->offsets->data,
                         .weights = in->weights ? in->weights->data : NULL, .n = in->indices->numel,
                         .bags = in->offsets->numel - 1, .rows = rows, .d = d, .mode = (int)in->mode,
                         .padding_idx = in->padding_idx};
    if (ref->device != DDPC_CPU) return DDPC_OK;
    const int64_t *ix = out->indices, *off = out->offsets;
    for (int64_t i = 0; i < out->n; i++)
        if (ix[i] < 0 || ix[i] >= rows) return DDPC_INDEX_ERROR(.op = code, .index = ix[i], .bound = rows);
    if (off[0] != 0) return DDPC_INDEX_ERROR(.op = code, .kind = DDPC_INDEX_BAD_FIRST_OFFSET, .index = off[0]);
    for (int64_t b = 0; b < out->bags; b++)
        if (off[b + 1] < off[b])
            return DDPC_INDEX_ERROR(.op = code, .kind = DDPC_INDEX_BAD_OFFSET_ORDER, .index = off[b + 1], .at = b + 1,
                                    .other = off[b]);
    if (off[out->bags] > out->n)
        return DDPC_INDEX_ERROR(.op = code, .kind = DDPC_INDEX_BAD_LAST_OFFSET, .index = off[out->bags],
                                .bound = out->n, .at = out->bags);
    return DDPC_OK;
}

/* ---- host loops ------------------------------------------------------------------- */

typedef struct {
    ddpc_k_bags b;
    ddpc_dtype dtype;
    void *dst;
    int64_t *argmax;
    const int64_t *argmax_in;
    const void *src, *table;
} bag_job_;

static int64_t grain_(int64_t unit) { return unit > 0 && unit < (1 << 16) ? (1 << 16) / unit : 1; }

/* The rows of bag b that count (padding left out). */
static int64_t bag_count_(const ddpc_k_bags *b, int64_t bag) {
    int64_t count = 0;
    for (int64_t i = b->offsets[bag]; i < b->offsets[bag + 1]; i++) count += b->indices[i] != b->padding_idx;
    return count;
}

/* Unit: one bag, its output row. */
static void bag_forward_range_(void *ctx, int64_t lo, int64_t hi) {
    const bag_job_ *j = ctx;
    const ddpc_k_bags *b = &j->b;
    const int64_t d = b->d;
    DDPC_FLOAT_TYPES(j->dtype, {
        const T *w = j->table, *scale = b->weights;
        for (int64_t bag = lo; bag < hi; bag++) {
            T *o = (T *)j->dst + bag * d;
            int64_t *at = b->mode == DDPC_BAG_MAX ? j->argmax + bag * d : NULL, count = 0;
            memset(o, 0, (size_t)d * sizeof(T));
            for (int64_t k = 0; at && k < d; k++) at[k] = -1;
            for (int64_t i = b->offsets[bag]; i < b->offsets[bag + 1]; i++) {
                int64_t r = b->indices[i];
                if (r == b->padding_idx) continue;
                const T *row = w + r * d;
                if (at) {
                    for (int64_t k = 0; k < d; k++)
                        if (!count || row[k] > o[k]) o[k] = row[k], at[k] = r;
                } else {
                    T s = scale ? scale[i] : (T)1;
                    for (int64_t k = 0; k < d; k++) o[k] += s * row[k];
                }
                count++;
            }
            if (b->mode == DDPC_BAG_MEAN && count > 1)
                for (int64_t k = 0; k < d; k++) o[k] /= (T)count;
        }
    });
}

/* Unit: a block of BAG_COLUMNS columns of the table's gradient, over every bag. */
static void bag_backward_range_(void *ctx, int64_t lo, int64_t hi) {
    const bag_job_ *j = ctx;
    const ddpc_k_bags *b = &j->b;
    const int64_t d = b->d, c0 = lo * BAG_COLUMNS, c1 = hi * BAG_COLUMNS < d ? hi * BAG_COLUMNS : d;
    DDPC_FLOAT_TYPES(j->dtype, {
        T *gw = j->dst;
        const T *g = j->src, *scale = b->weights;
        for (int64_t r = 0; r < b->rows; r++) memset(gw + r * d + c0, 0, (size_t)(c1 - c0) * sizeof(T));
        for (int64_t bag = 0; bag < b->bags; bag++) {
            const T *gb = g + bag * d;
            if (b->mode == DDPC_BAG_MAX) {
                const int64_t *at = j->argmax_in + bag * d;
                for (int64_t k = c0; k < c1; k++)
                    if (at[k] >= 0) gw[at[k] * d + k] += gb[k];
                continue;
            }
            int64_t count = b->mode == DDPC_BAG_MEAN ? bag_count_(b, bag) : 1;
            for (int64_t i = b->offsets[bag]; i < b->offsets[bag + 1]; i++) {
                int64_t r = b->indices[i];
                if (r == b->padding_idx) continue;
                T s = scale ? scale[i] : (T)1 / (T)count;
                T *row = gw + r * d;
                for (int64_t k = c0; k < c1; k++) row[k] += s * gb[k];
            }
        }
    });
}

/* Unit: one bag, its entries' weight gradients. */
static void bag_weights_backward_range_(void *ctx, int64_t lo, int64_t hi) {
    const bag_job_ *j = ctx;
    const ddpc_k_bags *b = &j->b;
    const int64_t d = b->d;
    DDPC_FLOAT_TYPES(j->dtype, {
        T *gs = j->dst;
        const T *g = j->src, *w = j->table;
        for (int64_t bag = lo; bag < hi; bag++)
            for (int64_t i = b->offsets[bag]; i < b->offsets[bag + 1]; i++) {
                int64_t r = b->indices[i];
                double dot = 0;
                for (int64_t k = 0; r != b->padding_idx && k < d; k++) dot += (double)w[r * d + k] * g[bag * d + k];
                gs[i] = (T)dot;
            }
    });
}

/* ---- entry points ------------------------------------------------------------------ */

ddpc_status ddpc_op_embedding_bag(ddpc_buffer *out, ddpc_buffer *argmax, const ddpc_buffer *weight,
                                  const ddpc_bags *bags) {
    const char *op = ddpc_index_op_name(DDPC_IX_EMBEDDING_BAG);
    bag_job_ j = {.dtype = weight->dtype, .dst = out->data, .table = weight->data};
    if (out->readonly) return DDPC_ERROR(DDPC_ERR_ARG, "%s: the output is read-only", op);
    if (weight->ndim != 2) return DDPC_ERROR(DDPC_ERR_ARG, "%s: the table must be 2-d, got %d dims", op, weight->ndim);
    CHECK(ddpc_check_float_like(weight, weight, op, "the table"));
    CHECK(ddpc_check_float_like(out, weight, op, "the output"));
    CHECK(bags_(bags, weight, weight->shape[0], weight->shape[1], DDPC_IX_EMBEDDING_BAG, &j.b));
    CHECK(check_shape_(out, j.b.bags, j.b.d, op, "the output"));
    if ((bags->mode == DDPC_BAG_MAX) != (argmax != NULL))
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: argmax is taken with mode max and only then", op);
    if (argmax) {
        if (argmax->dtype != DDPC_INT64 || argmax->device != weight->device || argmax->readonly)
            return DDPC_ERROR(DDPC_ERR_ARG, "%s: argmax must be a writable int64 buffer on the table's device", op);
        CHECK(check_shape_(argmax, j.b.bags, j.b.d, op, "argmax"));
        j.argmax = argmax->data;
    }
    if (out->numel == 0) return DDPC_OK;
    if (out->device != DDPC_CPU)
        DDPC_LAUNCH_INDEXED(out->device, DDPC_IX_EMBEDDING_BAG,
                            ddpc_k_embedding_bag(out->data, j.argmax, weight->data, weight->dtype, j.b, index_check,
                                                 stream));
    ddpc_parallel_for(j.b.bags, grain_(j.b.d * (j.b.n / j.b.bags + 1)), bag_forward_range_, &j);
    return DDPC_OK;
}

ddpc_status ddpc_op_embedding_bag_backward(ddpc_buffer *gweight, const ddpc_buffer *g, const ddpc_buffer *argmax,
                                           const ddpc_bags *bags) {
    const char *op = ddpc_index_op_name(DDPC_IX_EMBEDDING_BAG_BACKWARD);
    bag_job_ j = {.dtype = gweight->dtype, .dst = gweight->data, .src = g->data};
    if (gweight->readonly) return DDPC_ERROR(DDPC_ERR_ARG, "%s: the output is read-only", op);
    if (gweight->ndim != 2)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: the table's gradient must be 2-d, got %d dims", op, gweight->ndim);
    CHECK(ddpc_check_float_like(gweight, gweight, op, "the table's gradient"));
    CHECK(ddpc_check_float_like(g, gweight, op, "the output gradient"));
    CHECK(bags_(bags, gweight, gweight->shape[0], gweight->shape[1], DDPC_IX_EMBEDDING_BAG_BACKWARD, &j.b));
    CHECK(check_shape_(g, j.b.bags, j.b.d, op, "the output gradient"));
    if ((bags->mode == DDPC_BAG_MAX) != (argmax != NULL))
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: argmax is taken with mode max and only then", op);
    if (argmax) {
        if (argmax->dtype != DDPC_INT64 || argmax->device != gweight->device)
            return DDPC_ERROR(DDPC_ERR_ARG, "%s: argmax must be int64 on the table's device", op);
        CHECK(check_shape_(argmax, j.b.bags, j.b.d, op, "argmax"));
        j.argmax_in = argmax->data;
        if (argmax->device == DDPC_CPU)
            for (int64_t k = 0; k < argmax->numel; k++)
                if (j.argmax_in[k] < -1 || j.argmax_in[k] >= j.b.rows)
                    return DDPC_INDEX_ERROR(.op = DDPC_IX_EMBEDDING_BAG_BACKWARD, .kind = DDPC_INDEX_BAD_ARGMAX,
                                            .index = j.argmax_in[k], .bound = j.b.rows);
    }
    if (gweight->numel == 0) return DDPC_OK;
    if (gweight->device != DDPC_CPU)
        DDPC_LAUNCH_INDEXED(gweight->device, DDPC_IX_EMBEDDING_BAG_BACKWARD,
                            ddpc_k_embedding_bag_backward(gweight->data, g->data, j.argmax_in, gweight->dtype, j.b,
                                                          index_check, stream));
    int64_t blocks = (j.b.d + BAG_COLUMNS - 1) / BAG_COLUMNS;
    ddpc_parallel_for(blocks, grain_(BAG_COLUMNS * (j.b.n + j.b.rows)), bag_backward_range_, &j);
    return DDPC_OK;
}

ddpc_status ddpc_op_embedding_bag_weights_backward(ddpc_buffer *gweights, const ddpc_buffer *g,
                                                   const ddpc_buffer *weight, const ddpc_bags *bags) {
    const char *op = ddpc_index_op_name(DDPC_IX_EMBEDDING_BAG_WEIGHTS_BACKWARD);
    bag_job_ j = {.dtype = weight->dtype, .dst = gweights->data, .src = g->data, .table = weight->data};
    if (gweights->readonly) return DDPC_ERROR(DDPC_ERR_ARG, "%s: the output is read-only", op);
    if (weight->ndim != 2) return DDPC_ERROR(DDPC_ERR_ARG, "%s: the table must be 2-d, got %d dims", op, weight->ndim);
    CHECK(ddpc_check_float_like(weight, weight, op, "the table"));
    CHECK(ddpc_check_float_like(g, weight, op, "the output gradient"));
    CHECK(ddpc_check_float_like(gweights, weight, op, "the weights' gradient"));
    CHECK(bags_(bags, weight, weight->shape[0], weight->shape[1], DDPC_IX_EMBEDDING_BAG_WEIGHTS_BACKWARD, &j.b));
    CHECK(check_shape_(g, j.b.bags, j.b.d, op, "the output gradient"));
    if (gweights->numel != j.b.n)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: %lld weight gradients for %lld indices", op, (long long)gweights->numel,
                          (long long)j.b.n);
    if (j.b.n == 0) return DDPC_OK;
    if (gweights->device != DDPC_CPU)
        DDPC_LAUNCH_INDEXED(gweights->device, DDPC_IX_EMBEDDING_BAG_WEIGHTS_BACKWARD,
                            ddpc_k_embedding_bag_weights_backward(gweights->data, g->data, weight->data, weight->dtype,
                                                                  j.b, index_check, stream));
    memset(gweights->data, 0, (size_t)j.b.n * ddpc_dtype_size(gweights->dtype));
    ddpc_parallel_for(j.b.bags, grain_(j.b.d * (j.b.n / (j.b.bags + 1) + 1)), bag_weights_backward_range_, &j);
    return DDPC_OK;
}

/* ---- Python bindings -------------------------------------------------------------- */

/* The bags' arguments the bindings share: indices, offsets, per-sample
 * weights (None for none), mode and padding_idx (-1 for none). */
static int parse_bags_(PyObject *indices, PyObject *offsets, PyObject *weights, int mode, long long padding_idx,
                       ddpc_bags *b) {
    ddpc_buffer *ix, *off, *w = NULL;
    if (!ddpc_arg_buffer(indices, &ix) || !ddpc_arg_buffer(offsets, &off) ||
        (weights != Py_None && !ddpc_arg_buffer(weights, &w)))
        return 0;
    *b = (ddpc_bags){.indices = ix, .offsets = off, .weights = w, .mode = (ddpc_bag_mode)mode,
                     .padding_idx = padding_idx};
    return 1;
}

/* argmax: None unless mode is max. */
static int parse_argmax_(PyObject *o, ddpc_buffer **argmax) {
    *argmax = NULL;
    return o == Py_None || ddpc_arg_buffer(o, argmax);
}

static PyObject *py_embedding_bag(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *out, *argmax, *weight;
    PyObject *argmax_o, *indices, *offsets, *weights;
    int mode;
    long long padding_idx;
    ddpc_bags b;
    if (!ddpc_parse_args(args, "O&OO&OOOiL:embedding_bag", ddpc_arg_buffer, &out, &argmax_o, ddpc_arg_buffer,
                         &weight, &indices, &offsets, &weights, &mode, &padding_idx) ||
        !parse_argmax_(argmax_o, &argmax) || !parse_bags_(indices, offsets, weights, mode, padding_idx, &b))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(out), ddpc_op_embedding_bag(out, argmax, weight, &b));
}

static PyObject *py_embedding_bag_backward(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *gweight, *g, *argmax;
    PyObject *argmax_o, *indices, *offsets, *weights;
    int mode;
    long long padding_idx;
    ddpc_bags b;
    if (!ddpc_parse_args(args, "O&O&OOOOiL:embedding_bag_backward", ddpc_arg_buffer, &gweight, ddpc_arg_buffer, &g,
                         &argmax_o, &indices, &offsets, &weights, &mode, &padding_idx) ||
        !parse_argmax_(argmax_o, &argmax) || !parse_bags_(indices, offsets, weights, mode, padding_idx, &b))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(gweight), ddpc_op_embedding_bag_backward(gweight, g, argmax, &b));
}

static PyObject *py_embedding_bag_weights_backward(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *gweights, *g, *weight;
    PyObject *indices, *offsets;
    long long padding_idx;
    ddpc_bags b;
    if (!ddpc_parse_args(args, "O&O&O&OOL:embedding_bag_weights_backward", ddpc_arg_buffer, &gweights,
                         ddpc_arg_buffer, &g, ddpc_arg_buffer, &weight, &indices, &offsets, &padding_idx) ||
        !parse_bags_(indices, offsets, Py_None, DDPC_BAG_SUM, padding_idx, &b))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(g), ddpc_op_embedding_bag_weights_backward(gweights, g, weight, &b));
}

static PyMethodDef embedding_methods[] = {
    {"embedding_bag", py_embedding_bag, METH_VARARGS,
     "embedding_bag(out, argmax, weight, indices, offsets, per_sample_weights, mode, padding_idx): out [B, D] = the "
     "bags indices[offsets[b]:offsets[b + 1]] of weight's rows, mode 0 sum, 1 mean, 2 max (argmax [B, D] int64, "
     "else None); per_sample_weights and padding_idx None and -1 for none"},
    {"embedding_bag_backward", py_embedding_bag_backward, METH_VARARGS,
     "embedding_bag_backward(gweight, g, argmax, indices, offsets, per_sample_weights, mode, padding_idx)"},
    {"embedding_bag_weights_backward", py_embedding_bag_weights_backward, METH_VARARGS,
     "embedding_bag_weights_backward(gweights, g, weight, indices, offsets, padding_idx): the gradient of the "
     "per-sample weights"},
    {NULL, NULL, 0, NULL},
};

int ddpc_embedding_register(PyObject *module) { return PyModule_AddFunctions(module, embedding_methods); }

/* Ops along one dim (see ops_dim.h): argument checks, then host loops or the
 * launchers of kernels/dim.cu. */
#include "ops_dim.h"

#include <string.h>

#include "kernels.h"
#include "module.h"
#include "ops_nn.h"

static ddpc_status check_same_place_(const ddpc_buffer *ref, const ddpc_buffer *b, const char *op, const char *what) {
    if (b->dtype != ref->dtype)
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: %s is %s, expected %s", op, what, ddpc_dtype_name(b->dtype),
                          ddpc_dtype_name(ref->dtype));
    if (b->device != ref->device) return DDPC_ERROR(DDPC_ERR_ARG, "%s: %s is on another device", op, what);
    return DDPC_OK;
}

/* ---- sums and products along a dim ----------------------------------------------- */

/* Lines of `len` values `inner` apart, taken CHUNK lines at a time so that the
 * inner loop runs over contiguous elements; A is the accumulator type. */
#define FOLD_CHUNK 64
#define FOLD_LOOP(T, A)                                                            \
    do {                                                                           \
        const T *x_ = (const T *)a->data;                                          \
        T *o_ = (T *)out->data;                                                    \
        A acc[FOLD_CHUNK];                                                         \
        for (int64_t r = 0; r < outer; r++)                                        \
            for (int64_t i0 = 0; i0 < inner; i0 += FOLD_CHUNK) {                   \
                int64_t m = inner - i0 < FOLD_CHUNK ? inner - i0 : FOLD_CHUNK;     \
                for (int64_t i = 0; i < m; i++) acc[i] = (A)(op == DDPC_FOLD_PROD ? 1 : 0); \
                if (op == DDPC_FOLD_LOGSUMEXP)                                     \
                    for (int64_t i = 0; i < m; i++) acc[i] = (A)-INFINITY;          \
                for (int64_t s = 0; s < len; s++) {                                \
                    int64_t l = reverse ? len - 1 - s : s, at = (r * len + l) * inner + i0; \
                    if (cumulative && exclusive)                                   \
                        for (int64_t i = 0; i < m; i++) o_[at + i] = (T)acc[i];    \
                    if (op == DDPC_FOLD_PROD) for (int64_t i = 0; i < m; i++) acc[i] *= (A)x_[at + i]; \
                    else if (op == DDPC_FOLD_SUM) for (int64_t i = 0; i < m; i++) acc[i] += (A)x_[at + i]; \
                    else for (int64_t i = 0; i < m; i++)                           \
                        acc[i] = (A)ddpc_log_add_exp((double)acc[i], (double)x_[at + i]); \
                    if (cumulative && !exclusive)                                  \
                        for (int64_t i = 0; i < m; i++) o_[at + i] = (T)acc[i];    \
                }                                                                  \
                if (!cumulative)                                                   \
                    for (int64_t i = 0; i < m; i++) o_[r * inner + i0 + i] = (T)acc[i]; \
            }                                                                      \
    } while (0)

ddpc_status ddpc_op_fold_dim(ddpc_buffer *out, const ddpc_buffer *a, int dim, ddpc_fold_op op, int flags) {
    static const char *const names[] = {"sum along a dim", "product along a dim", "logsumexp along a dim"};
    int64_t outer = 0, len = 0, inner = 0;
    if ((unsigned)op > DDPC_FOLD_LOGSUMEXP || (flags & ~7))
        return DDPC_ERROR(DDPC_ERR_ARG, "fold along a dim: unknown op %d or flags %d", (int)op, flags);
    const char *name = names[op];
    int cumulative = flags & DDPC_FOLD_CUMULATIVE, reverse = (flags & DDPC_FOLD_REVERSE) != 0;
    int exclusive = (flags & DDPC_FOLD_EXCLUSIVE) != 0;
    if (exclusive && !cumulative)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: an exclusive fold keeps its running values (cumulative)", name);
    if (out->readonly) return DDPC_ERROR(DDPC_ERR_ARG, "%s: the output is read-only", name);
    int lse = op == DDPC_FOLD_LOGSUMEXP;
    if (out->dtype != DDPC_FLOAT32 && out->dtype != DDPC_FLOAT64 && (out->dtype != DDPC_INT64 || lse))
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: needs float32, float64%s, got %s", name,
                          lse ? "" : " or int64", ddpc_dtype_name(out->dtype));
    CHECK(check_same_place_(out, a, name, "the input"));
    CHECK(ddpc_dim_split(a, dim, name, &outer, &len, &inner));
    int64_t want = cumulative ? a->numel : outer * inner;
    if (out->numel != want)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: the output has %lld elements, expected %lld", name,
                          (long long)out->numel, (long long)want);
    if (out->numel == 0) return DDPC_OK;
    if (out->device != DDPC_CPU)
        DDPC_LAUNCH(out->device, ddpc_k_fold_dim(out->data, a->data, out->dtype, outer, len, inner, (int)op, flags,
                                                 stream));
    /* A float32 product (not a running one) multiplies in float32, as PyTorch's
     * CPU prod: a running product that leaves float32's range gives inf or 0
     * even where the whole product would fit. Running products (PyTorch's
     * cumprod also keeps double) and the other folds accumulate in double. */
    if (out->dtype == DDPC_INT64) FOLD_LOOP(int64_t, uint64_t); /* unsigned: wraps without undefined behaviour */
    else if (out->dtype == DDPC_FLOAT32 && op == DDPC_FOLD_PROD && !cumulative) FOLD_LOOP(float, float);
    else if (out->dtype == DDPC_FLOAT32) FOLD_LOOP(float, double);
    else FOLD_LOOP(double, double);
    return DDPC_OK;
}

/* ---- gather and scatter along a dim ------------------------------------------------ */

/* The geometry both take: over index's shape, `sa` are the contiguous strides
 * of the tensor indexed along dim (a for gather, out for scatter) and `sb`
 * those of the other one (out for gather, src for scatter). */
static ddpc_status index_geo_(const ddpc_buffer *big, const ddpc_buffer *small, const ddpc_buffer *index, int dim,
                              ddpc_index_op code, ddpc_k_bcast *geo) {
    const char *op = ddpc_index_op_name(code);
    if (index->dtype != DDPC_INT64 || index->device != big->device)
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: the index must be int64 on the tensor's device", op);
    if (index->ndim != big->ndim || index->ndim != small->ndim)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: the index has %d dims, the tensors %d and %d", op, index->ndim,
                          big->ndim, small->ndim);
    if (dim < 0 || dim >= big->ndim)
        return DDPC_ERROR(DDPC_ERR_INDEX, "%s: dim %d is out of range for %d dims", op, dim, big->ndim);
    geo->ndim = big->ndim;
    int64_t sa = 1, sb = 1;
    for (int d = big->ndim - 1; d >= 0; d--) {
        if ((d != dim && index->shape[d] > big->shape[d]) || index->shape[d] > small->shape[d])
            return DDPC_ERROR(DDPC_ERR_ARG, "%s: the index's size %lld in dim %d is larger than the tensors' (%lld, %lld)",
                              op, (long long)index->shape[d], d, (long long)big->shape[d],
                              (long long)small->shape[d]);
        geo->shape[d] = index->shape[d], geo->sa[d] = sa, geo->sb[d] = sb;
        sa *= big->shape[d], sb *= small->shape[d];
    }
    const int64_t *ix = index->data;
    if (index->device == DDPC_CPU)
        for (int64_t k = 0; k < index->numel; k++)
            if (ix[k] < 0 || ix[k] >= big->shape[dim])
                return DDPC_INDEX_ERROR(.op = code, .index = ix[k], .bound = big->shape[dim], .at = dim);
    return DDPC_OK;
}

/* Runs the statement for each index element k with ob its offset in `big`
 * (index[k] along dim) and os its offset in `small`. The coordinates step
 * on as an odometer, so no element pays a division per dim. */
#define INDEX_LOOP(geo, dim, ix, n, ...)                                           \
    do {                                                                           \
        int64_t c_[DDPC_MAX_NDIM] = {0}, base_ = 0, os = 0;                        \
        for (int64_t k = 0; k < (n); k++) {                                        \
            int64_t ob = base_ + (ix)[k] * (geo).sa[dim];                          \
            __VA_ARGS__;                                                           \
            for (int d = (geo).ndim - 1; d >= 0; d--) {                            \
                int64_t along_ = d == (dim) ? 0 : (geo).sa[d];                     \
                base_ += along_, os += (geo).sb[d];                                \
                if (++c_[d] < (geo).shape[d]) break;                               \
                base_ -= along_ * (geo).shape[d], os -= (geo).sb[d] * (geo).shape[d], c_[d] = 0; \
            }                                                                      \
        }                                                                          \
    } while (0)

#define MOVE_WORDS(W, dst, dst_off, src, src_off) ((W *)(dst))[dst_off] = ((const W *)(src))[src_off]

ddpc_status ddpc_op_gather_dim(ddpc_buffer *out, const ddpc_buffer *a, const ddpc_buffer *index, int dim) {
    const char *op = ddpc_index_op_name(DDPC_IX_GATHER);
    ddpc_k_bcast geo = {0};
    if (out->readonly) return DDPC_ERROR(DDPC_ERR_ARG, "%s: the output is read-only", op);
    CHECK(check_same_place_(a, out, op, "the output"));
    if (out->numel != index->numel)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: the output has %lld elements, the index %lld", op,
                          (long long)out->numel, (long long)index->numel);
    CHECK(index_geo_(a, index, index, dim, DDPC_IX_GATHER, &geo));
    int64_t n = index->numel;
    if (n == 0) return DDPC_OK;
    size_t w = ddpc_dtype_size(a->dtype);
    if (a->device != DDPC_CPU)
        DDPC_LAUNCH_INDEXED(a->device, DDPC_IX_GATHER,
                            ddpc_k_index_dim((void *)a->data, out->data, index->data, a->dtype, n, geo, dim,
                                             a->shape[dim], DDPC_K_GATHER, index_check, stream));
    const int64_t *ix = index->data;
    switch (w) {
    case 1: INDEX_LOOP(geo, dim, ix, n, MOVE_WORDS(uint8_t, out->data, os, a->data, ob)); break;
    case 2: INDEX_LOOP(geo, dim, ix, n, MOVE_WORDS(uint16_t, out->data, os, a->data, ob)); break;
    case 4: INDEX_LOOP(geo, dim, ix, n, MOVE_WORDS(uint32_t, out->data, os, a->data, ob)); break;
    default: INDEX_LOOP(geo, dim, ix, n, MOVE_WORDS(uint64_t, out->data, os, a->data, ob)); break;
    }
    return DDPC_OK;
}

ddpc_status ddpc_op_scatter_dim(ddpc_buffer *out, const ddpc_buffer *src, const ddpc_buffer *index, int dim,
                                int accumulate) {
    ddpc_index_op code = accumulate ? DDPC_IX_SCATTER_ADD : DDPC_IX_SCATTER;
    const char *op = ddpc_index_op_name(code);
    ddpc_k_bcast geo = {0};
    if (out->readonly) return DDPC_ERROR(DDPC_ERR_ARG, "%s: the output is read-only", op);
    CHECK(check_same_place_(out, src, op, "the source"));
    if (accumulate && out->dtype != DDPC_FLOAT32 && out->dtype != DDPC_FLOAT64 && out->dtype != DDPC_INT64)
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: adds float32, float64 or int64, got %s", op, ddpc_dtype_name(out->dtype));
    CHECK(index_geo_(out, src, index, dim, code, &geo));
    int64_t n = index->numel;
    if (n == 0) return DDPC_OK;
    size_t w = ddpc_dtype_size(out->dtype);
    if (out->device != DDPC_CPU)
        DDPC_LAUNCH_INDEXED(out->device, code,
                            ddpc_k_index_dim(out->data, (void *)src->data, index->data, out->dtype, n, geo, dim,
                                             out->shape[dim], accumulate ? DDPC_K_SCATTER_ADD : DDPC_K_SCATTER,
                                             index_check, stream));
    const int64_t *ix = index->data;
    if (accumulate) {
        if (out->dtype == DDPC_INT64) /* unsigned: wraps without undefined behaviour */
            INDEX_LOOP(geo, dim, ix, n, ((uint64_t *)out->data)[ob] += ((const uint64_t *)src->data)[os]);
        else if (out->dtype == DDPC_FLOAT32)
            INDEX_LOOP(geo, dim, ix, n, ((float *)out->data)[ob] += ((const float *)src->data)[os]);
        else
            INDEX_LOOP(geo, dim, ix, n, ((double *)out->data)[ob] += ((const double *)src->data)[os]);
        return DDPC_OK;
    }
    switch (w) {
    case 1: INDEX_LOOP(geo, dim, ix, n, MOVE_WORDS(uint8_t, out->data, ob, src->data, os)); break;
    case 2: INDEX_LOOP(geo, dim, ix, n, MOVE_WORDS(uint16_t, out->data, ob, src->data, os)); break;
    case 4: INDEX_LOOP(geo, dim, ix, n, MOVE_WORDS(uint32_t, out->data, ob, src->data, os)); break;
    default: INDEX_LOOP(geo, dim, ix, n, MOVE_WORDS(uint64_t, out->data, ob, src->data, os)); break;
    }
    return DDPC_OK;
}

/* a op b for ddpc_op_scatter_reduce_dim; `x != x` holds for a NaN only. */
#define SCATTER_COMBINE(op, a, b)                                                  \
    ((op) == DDPC_SCATTER_PROD ? (a) * (b)                                         \
     : (a) != (a)              ? (a)                                               \
     : (b) != (b)              ? (b)                                               \
     : (op) == DDPC_SCATTER_AMAX ? ((b) > (a) ? (b) : (a))                         \
                                 : ((b) < (a) ? (b) : (a)))

#define SCATTER_REDUCE_LOOP(T)                                                     \
    INDEX_LOOP(geo, dim, ix, n, {                                                  \
        T *o_ = (T *)out->data + ob;                                               \
        T v_ = ((const T *)src->data)[os];                                         \
        *o_ = (T)SCATTER_COMBINE(op, *o_, v_);                                     \
    })

ddpc_status ddpc_op_scatter_reduce_dim(ddpc_buffer *out, const ddpc_buffer *src, const ddpc_buffer *index, int dim,
                                       ddpc_scatter_reduce_op op) {
    const char *name = ddpc_index_op_name(DDPC_IX_SCATTER_REDUCE);
    ddpc_k_bcast geo = {0};
    if ((unsigned)op > DDPC_SCATTER_AMIN) return DDPC_ERROR(DDPC_ERR_ARG, "%s: unknown reduction %d", name, (int)op);
    if (out->readonly) return DDPC_ERROR(DDPC_ERR_ARG, "%s: the output is read-only", name);
    CHECK(check_same_place_(out, src, name, "the source"));
    if (out->dtype != DDPC_FLOAT32 && out->dtype != DDPC_FLOAT64 && out->dtype != DDPC_INT32 &&
        out->dtype != DDPC_INT64)
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: reduces float32, float64, int32 or int64, got %s", name,
                          ddpc_dtype_name(out->dtype));
    CHECK(index_geo_(out, src, index, dim, DDPC_IX_SCATTER_REDUCE, &geo));
    int64_t n = index->numel;
    if (n == 0) return DDPC_OK;
    if (out->device != DDPC_CPU)
        DDPC_LAUNCH_INDEXED(out->device, DDPC_IX_SCATTER_REDUCE,
                            ddpc_k_scatter_reduce_dim(out->data, src->data, index->data, out->dtype, n, geo, dim,
                                                      out->shape[dim], (int)op, index_check, stream));
    const int64_t *ix = index->data;
    switch (out->dtype) {
    case DDPC_FLOAT32: SCATTER_REDUCE_LOOP(float); break;
    case DDPC_FLOAT64: SCATTER_REDUCE_LOOP(double); break;
    /* Products of integers wrap: multiply as unsigned, which has no undefined overflow. */
    case DDPC_INT32:
        if (op == DDPC_SCATTER_PROD)
            INDEX_LOOP(geo, dim, ix, n, ((uint32_t *)out->data)[ob] *= ((const uint32_t *)src->data)[os]);
        else SCATTER_REDUCE_LOOP(int32_t);
        break;
    default:
        if (op == DDPC_SCATTER_PROD)
            INDEX_LOOP(geo, dim, ix, n, ((uint64_t *)out->data)[ob] *= ((const uint64_t *)src->data)[os]);
        else SCATTER_REDUCE_LOOP(int64_t);
        break;
    }
    return DDPC_OK;
}

/* ---- bindings ------------------------------------------------------------------------ */

static PyObject *py_fold_dim(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *out, *a;
    int dim, op, flags;
    if (!ddpc_parse_args(args, "O&O&iii:fold_dim", ddpc_arg_buffer, &out, ddpc_arg_buffer, &a, &dim, &op, &flags))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(a), ddpc_op_fold_dim(out, a, dim, (ddpc_fold_op)op, flags));
}

static PyObject *py_gather_dim(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *out, *a, *index;
    int dim;
    if (!ddpc_parse_args(args, "O&O&O&i:gather_dim", ddpc_arg_bool_buffer, &out, ddpc_arg_bool_buffer, &a,
                         ddpc_arg_buffer, &index, &dim))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(index), ddpc_op_gather_dim(out, a, index, dim));
}

static PyObject *py_scatter_dim(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *out, *src, *index;
    int dim, accumulate;
    if (!ddpc_parse_args(args, "O&O&O&ip:scatter_dim", ddpc_arg_bool_buffer, &out, ddpc_arg_bool_buffer, &src,
                         ddpc_arg_buffer, &index, &dim, &accumulate))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(index), ddpc_op_scatter_dim(out, src, index, dim, accumulate));
}

static PyObject *py_scatter_reduce_dim(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *out, *src, *index;
    int dim, op;
    if (!ddpc_parse_args(args, "O&O&O&ii:scatter_reduce_dim", ddpc_arg_buffer, &out, ddpc_arg_buffer, &src,
                         ddpc_arg_buffer, &index, &dim, &op))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(index), ddpc_op_scatter_reduce_dim(out, src, index, dim,
                                                                            (ddpc_scatter_reduce_op)op));
}

static PyMethodDef dim_methods[] = {
    {"fold_dim", py_fold_dim, METH_VARARGS,
     "fold_dim(out, a, dim, op, flags): op 0 sum 1 product 2 logsumexp; flags 1 cumulative 2 reverse 4 exclusive"},
    {"gather_dim", py_gather_dim, METH_VARARGS, "gather_dim(out, a, index, dim): out = a taken at index along dim"},
    {"scatter_dim", py_scatter_dim, METH_VARARGS,
     "scatter_dim(out, src, index, dim, accumulate): out at index along dim = (or +=) src"},
    {"scatter_reduce_dim", py_scatter_reduce_dim, METH_VARARGS,
     "scatter_reduce_dim(out, src, index, dim, op): out at index along dim = op(itself, src); op 0 prod 1 amax "
     "2 amin"},
    {NULL, NULL, 0, NULL},
};

int ddpc_dim_register(PyObject *module) { return PyModule_AddFunctions(module, dim_methods); }

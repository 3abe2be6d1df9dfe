/* Binary search and running extremes (see ops_search.h): argument checks, then
 * host loops (the search split across threads) or the launchers of
 * kernels/search.cu. The per-element rules are kernels.h's, shared by both. */
#include "ops_search.h"

#include "kernels.h"
#include "module.h"
#include "ops_nn.h"
#include "parallel.h"

/* ---- searchsorted ------------------------------------------------------------------ */

typedef struct {
    void *out;
    int out_int32, dtype, width, shared, right;
    const void *sorted, *values;
    const int64_t *sorter;
    int64_t per_line, len;
} search_job_;

static void search_range_(void *ctx, int64_t lo, int64_t hi) {
    const search_job_ *j = ctx;
    for (int64_t k = lo; k < hi; k++) {
        int64_t line = j->shared ? 0 : k / j->per_line;
        int64_t at = ddpc_search_sorted((const char *)j->sorted + line * j->len * j->width,
                                        j->sorter ? j->sorter + line * j->len : NULL, j->dtype, j->width, j->len,
                                        ddpc_load_word(j->values, j->width, k), j->right);
        if (j->out_int32) ((int32_t *)j->out)[k] = (int32_t)at;
        else ((int64_t *)j->out)[k] = at;
    }
}

/* Values per search below which a thread start does not pay. */
#define SEARCH_GRAIN 4096

ddpc_status ddpc_op_searchsorted(ddpc_buffer *out, const ddpc_buffer *sorted, const ddpc_buffer *values,
                                 const ddpc_buffer *sorter, int right) {
    const char *op = ddpc_index_op_name(DDPC_IX_SEARCHSORTED);
    if (out->readonly) return DDPC_ERROR(DDPC_ERR_ARG, "%s: the output is read-only", op);
    if ((out->dtype != DDPC_INT64 && out->dtype != DDPC_INT32) || out->numel != values->numel)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: the output must be int64 or int32 with the values' size", op);
    if (sorted->dtype != values->dtype)
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: the sorted sequence is %s but the values are %s", op,
                          ddpc_dtype_name(sorted->dtype), ddpc_dtype_name(values->dtype));
    if (sorted->device != values->device || out->device != values->device ||
        (sorter && sorter->device != values->device))
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: the tensors are on different devices", op);
    if (sorted->ndim < 1) return DDPC_ERROR(DDPC_ERR_ARG, "%s: the sorted sequence must have at least one dim", op);
    int shared = sorted->ndim == 1;
    int64_t len = sorted->shape[sorted->ndim - 1], per_line = values->numel;
    if (!shared) {
        int same = values->ndim == sorted->ndim;
        for (int d = 0; same && d < sorted->ndim - 1; d++) same = values->shape[d] == sorted->shape[d];
        if (!same)
            return DDPC_ERROR(DDPC_ERR_ARG,
                              "%s: the sorted sequence (%d dims) and the values (%d dims) must have the same "
                              "leading dims, or the sequence must be 1-d", op, sorted->ndim, values->ndim);
        per_line = values->shape[values->ndim - 1];
    }
    if (sorter) {
        int same = sorter->dtype == DDPC_INT64 && sorter->ndim == sorted->ndim;
        for (int d = 0; same && d < sorted->ndim; d++) same = sorter->shape[d] == sorted->shape[d];
        if (!same) return DDPC_ERROR(DDPC_ERR_ARG, "%s: the sorter must be int64 with the sequence's shape", op);
        if (sorter->device == DDPC_CPU)
            for (int64_t k = 0; k < sorter->numel; k++) {
                int64_t at = ((const int64_t *)sorter->data)[k];
                if (at < 0 || at >= len) return DDPC_INDEX_ERROR(.op = DDPC_IX_SEARCHSORTED, .index = at, .bound = len);
            }
    }
    if (values->numel == 0) return DDPC_OK;
    search_job_ job = {.out = out->data, .out_int32 = out->dtype == DDPC_INT32, .dtype = sorted->dtype,
                       .width = (int)ddpc_dtype_size(sorted->dtype), .shared = shared, .right = right,
                       .sorted = sorted->data, .values = values->data, .sorter = sorter ? sorter->data : NULL,
                       .per_line = per_line, .len = len};
    if (out->device != DDPC_CPU)
        DDPC_LAUNCH_INDEXED(out->device, DDPC_IX_SEARCHSORTED,
                            ddpc_k_searchsorted(job.out, job.out_int32, job.sorted, job.sorter, job.values, job.dtype,
                                                values->numel, per_line, len, shared, right, index_check, stream));
    ddpc_parallel_for(values->numel, SEARCH_GRAIN, search_range_, &job);
    return DDPC_OK;
}

/* ---- running extremes ---------------------------------------------------------------- */

typedef struct {
    void *values;
    int64_t *indices;
    const void *a;
    int dtype, width, want_max;
    int64_t len, inner, chunks_per_outer;
} extreme_job_;

/* Lines run EXTREME_CHUNK at a time (neighbours along the inner dims), so that
 * each step along the dim reads and writes contiguous elements. */
#define EXTREME_CHUNK 64

/* Chunks [lo, hi): chunk c holds the lines of outer index c / chunks_per_outer
 * from inner index (c % chunks_per_outer) * EXTREME_CHUNK on. */
static void cum_extreme_chunks_(void *ctx, int64_t lo, int64_t hi) {
    const extreme_job_ *j = ctx;
    uint64_t best[EXTREME_CHUNK], best_word[EXTREME_CHUNK];
    int64_t best_at[EXTREME_CHUNK];
    for (int64_t c = lo; c < hi; c++) {
        int64_t i0 = (c % j->chunks_per_outer) * EXTREME_CHUNK;
        int64_t base = (c / j->chunks_per_outer) * j->len * j->inner + i0;
        int64_t m = j->inner - i0 < EXTREME_CHUNK ? j->inner - i0 : EXTREME_CHUNK;
        for (int64_t i = 0; i < m; i++) {
            best_word[i] = ddpc_load_word(j->a, j->width, base + i);
            best[i] = ddpc_sort_key(j->dtype, best_word[i]), best_at[i] = 0;
        }
        for (int64_t s = 0; s < j->len; s++)
            for (int64_t i = 0; i < m; i++) {
                int64_t at = base + s * j->inner + i;
                uint64_t word = ddpc_load_word(j->a, j->width, at), key = ddpc_sort_key(j->dtype, word);
                if (ddpc_cum_extreme_takes(j->dtype, key, best[i], j->want_max))
                    best[i] = key, best_word[i] = word, best_at[i] = s;
                ddpc_store_word(j->values, j->width, at, best_word[i]);
                j->indices[at] = best_at[i];
            }
    }
}

ddpc_status ddpc_op_cum_extreme(ddpc_buffer *values, ddpc_buffer *indices, const ddpc_buffer *a, int dim,
                                int want_max) {
    const char *op = want_max ? "cummax" : "cummin";
    int64_t outer = 0, len = 0, inner = 0;
    if (values->readonly || indices->readonly) return DDPC_ERROR(DDPC_ERR_ARG, "%s: an output is read-only", op);
    if (values->dtype != a->dtype || values->device != a->device || values->numel != a->numel)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: the values must have the input's dtype, size and device", op);
    if (indices->dtype != DDPC_INT64 || indices->device != a->device || indices->numel != a->numel)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: the indices must be int64 with the input's size and device", op);
    CHECK(ddpc_dim_split(a, dim, op, &outer, &len, &inner));
    if (a->numel == 0) return DDPC_OK;
    if (a->device != DDPC_CPU)
        DDPC_LAUNCH(a->device, ddpc_k_cum_extreme(values->data, indices->data, a->data, a->dtype, outer, len, inner,
                                                  want_max, stream));
    int64_t per = (inner + EXTREME_CHUNK - 1) / EXTREME_CHUNK;
    extreme_job_ job = {.values = values->data, .indices = indices->data, .a = a->data, .dtype = a->dtype,
                        .width = (int)ddpc_dtype_size(a->dtype), .want_max = want_max, .len = len, .inner = inner,
                        .chunks_per_outer = per};
    ddpc_parallel_for(outer * per, SEARCH_GRAIN / (len * (inner < EXTREME_CHUNK ? inner : EXTREME_CHUNK)) + 1,
                      cum_extreme_chunks_, &job);
    return DDPC_OK;
}

/* ---- bindings ------------------------------------------------------------------------ */

static PyObject *py_searchsorted(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *out, *sorted, *values, *sorter = NULL;
    PyObject *sorter_obj;
    int right;
    if (!ddpc_parse_args(args, "O&O&O&Op:searchsorted", ddpc_arg_buffer, &out, ddpc_arg_buffer, &sorted,
                         ddpc_arg_buffer, &values, &sorter_obj, &right))
        return NULL;
    if (sorter_obj != Py_None && !ddpc_arg_buffer(sorter_obj, &sorter)) return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(values), ddpc_op_searchsorted(out, sorted, values, sorter, right));
}

static PyObject *py_cum_extreme(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *values, *indices, *a;
    int dim, want_max;
    if (!ddpc_parse_args(args, "O&O&O&ip:cum_extreme", ddpc_arg_buffer, &values, ddpc_arg_buffer, &indices,
                         ddpc_arg_buffer, &a, &dim, &want_max))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(a), ddpc_op_cum_extreme(values, indices, a, dim, want_max));
}

static PyMethodDef search_methods[] = {
    {"searchsorted", py_searchsorted, METH_VARARGS,
     "searchsorted(out, sorted, values, sorter, right): insertion positions of values in sorted's lines; "
     "sorter may be None"},
    {"cum_extreme", py_cum_extreme, METH_VARARGS,
     "cum_extreme(values, indices, a, dim, want_max): running max (min) along dim and where it was taken"},
    {NULL, NULL, 0, NULL},
};

int ddpc_search_register(PyObject *module) { return PyModule_AddFunctions(module, search_methods); }

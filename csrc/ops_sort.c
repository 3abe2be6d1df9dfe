/* Stable sort and selection along a dim (see ops_sort.h). Each line of `len`
 * elements `inner` apart becomes order-preserving keys (kernels.h's
 * ddpc_sort_key) with their positions; on the host the lines are split across
 * threads and sorted by sort.c's merge sort (or one position selected by its
 * quickselect), on a GPU sorted by kernels/sort.cu. */
#include "ops_sort.h"

#include <stdlib.h>

#include "kernels.h"
#include "module.h"
#include "ops_nn.h"
#include "parallel.h"
#include "sort.h"

typedef struct {
    int64_t *indices;
    void *values;
    const void *a;
    int dtype;
    int width;
    uint64_t flip; /* every key bit for a descending sort, else 0 */
    int64_t lines, len, inner, lines_per_part;
    const int64_t *select; /* a sorted position per line to select, or NULL to sort */
    uint64_t *scratch;     /* per part: keys, their scratch, positions, their scratch (len each) */
} sort_job_;

/* The keys of one line; inlined with a constant dtype and width by line_keys_. */
static inline void keys_(uint64_t *key, const void *a, int dtype, int width, int64_t base, int64_t len,
                         int64_t inner, uint64_t flip) {
    for (int64_t s = 0; s < len; s++) key[s] = ddpc_sort_key(dtype, ddpc_load_word(a, width, base + s * inner)) ^ flip;
}

/* One loop per dtype, so that none tests the dtype per element. */
static void line_keys_(uint64_t *key, const sort_job_ *j, int64_t base) {
    switch (j->dtype) {
    case DDPC_FLOAT32: keys_(key, j->a, DDPC_FLOAT32, 4, base, j->len, j->inner, j->flip); break;
    case DDPC_FLOAT64: keys_(key, j->a, DDPC_FLOAT64, 8, base, j->len, j->inner, j->flip); break;
    case DDPC_FLOAT16: keys_(key, j->a, DDPC_FLOAT16, 2, base, j->len, j->inner, j->flip); break;
    case DDPC_BFLOAT16: keys_(key, j->a, DDPC_BFLOAT16, 2, base, j->len, j->inner, j->flip); break;
    case DDPC_INT32: keys_(key, j->a, DDPC_INT32, 4, base, j->len, j->inner, j->flip); break;
    case DDPC_INT64: keys_(key, j->a, DDPC_INT64, 8, base, j->len, j->inner, j->flip); break;
    default: keys_(key, j->a, j->dtype, j->width, base, j->len, j->inner, j->flip); break;
    }
}

/* Sorts (or selects in) the lines of parts [lo, hi); each part owns its slice of the scratch. */
static void sort_parts_(void *ctx, int64_t lo, int64_t hi) {
    const sort_job_ *j = ctx;
    int64_t len = j->len, inner = j->inner;
    for (int64_t part = lo; part < hi; part++) {
        uint64_t *key = j->scratch + part * 4 * len, *tmp_key = key + len;
        int64_t *pos = (int64_t *)(tmp_key + len), *tmp_pos = pos + len;
        int64_t first = part * j->lines_per_part, end = first + j->lines_per_part;
        for (int64_t line = first; line < (end < j->lines ? end : j->lines); line++) {
            int64_t base = (line / inner) * len * inner + line % inner;
            line_keys_(key, j, base);
            if (j->select) { /* the scratch of the keys and of the positions: 2 len keys */
                j->indices[line] = ddpc_select_position(key, len, j->select[line], tmp_key);
                continue;
            }
            for (int64_t s = 0; s < len; s++) pos[s] = s;
            ddpc_sort_pairs(key, pos, tmp_key, tmp_pos, len);
            for (int64_t s = 0; s < len; s++) {
                j->indices[base + s * inner] = pos[s];
                if (j->values)
                    ddpc_store_word(j->values, j->width, base + s * inner,
                                ddpc_load_word(j->a, j->width, base + pos[s] * inner));
            }
        }
    }
}

/* The CUDA path: keys, positions, segment offsets and CUB's temporary storage
 * in one scratch block, freed stream-ordered after the kernels. */
static ddpc_status sort_cuda_(ddpc_buffer *indices, ddpc_buffer *values, const ddpc_buffer *a, int64_t outer,
                              int64_t len, int64_t inner, int descending) {
#ifdef DDPC_WITH_CUDA
    int device = a->device, prev;
    size_t bytes = 0;
    ddpc_block *scratch = NULL;
    void *stream;
    ddpc_status st = DDPC_OK;
    CHECK(ddpc_cuda_compute_stream(device, &stream));
    /* The device is current from here: CUB sizes its storage for the device it runs on. */
    CHECK(ddpc_cuda_enter(device, &prev));
    CUDACHECKGOTO((cudaError_t)ddpc_k_sort_scratch(outer * inner, len, a->dtype, &bytes), st, exit);
    CHECKGOTO(ddpc_alloc(device, bytes, 0, &scratch), st, exit);
    CUDACHECKGOTO((cudaError_t)ddpc_k_sort_dim(indices->data, values ? values->data : NULL, a->data, a->dtype, outer,
                                               len, inner, descending, scratch->ptr, bytes, stream),
                  st, exit);
exit:
    ddpc_cuda_leave(prev);
    ddpc_free(scratch);
    return st;
#else
    (void)indices, (void)values, (void)outer, (void)len, (void)inner, (void)descending;
    return ddpc_cuda_require(a->device);
#endif
}

/* Elements per thread below which splitting the work does not pay for a thread start. */
#define SORT_GRAIN_ELEMENTS (1 << 14)

/* The host work of both ops: lines split across threads, each with its scratch. */
static ddpc_status run_host_(const char *op, int64_t *indices, void *values, const ddpc_buffer *a, int64_t lines,
                             int64_t len, int64_t inner, int descending, const int64_t *select) {
    int width = (int)ddpc_dtype_size(a->dtype);
    int64_t parts = a->numel / SORT_GRAIN_ELEMENTS + 1;
    if (parts > ddpc_get_num_threads()) parts = ddpc_get_num_threads();
    if (parts > lines) parts = lines;
    sort_job_ job = {.indices = indices, .values = values, .a = a->data, .dtype = a->dtype, .width = width,
                     .lines = lines, .len = len, .inner = inner, .lines_per_part = (lines + parts - 1) / parts,
                     .select = select, .flip = !descending ? 0 : width == 8 ? ~0ull : (1ull << (8 * width)) - 1};
    job.scratch = malloc((size_t)parts * 4 * (size_t)len * sizeof(uint64_t));
    if (!job.scratch)
        return DDPC_ERROR(DDPC_ERR_OOM, "%s: no memory for %lld lines of %lld keys", op, (long long)parts,
                          (long long)len);
    ddpc_parallel_for(parts, 1, sort_parts_, &job);
    free(job.scratch);
    return DDPC_OK;
}

ddpc_status ddpc_op_sort_dim(ddpc_buffer *indices, ddpc_buffer *values, const ddpc_buffer *a, int dim,
                             int descending) {
    const char *op = "sort";
    int64_t outer = 0, len = 0, inner = 0;
    if (indices->readonly || (values && values->readonly))
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: an output is read-only", op);
    if (indices->dtype != DDPC_INT64 || indices->device != a->device || indices->numel != a->numel)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: the indices must be int64 with the input's size and device", op);
    if (values && (values->dtype != a->dtype || values->device != a->device || values->numel != a->numel))
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: the values must have the input's dtype, size and device", op);
    CHECK(ddpc_dim_split(a, dim, op, &outer, &len, &inner));
    if (a->numel == 0) return DDPC_OK;
    if (a->device != DDPC_CPU) return sort_cuda_(indices, values, a, outer, len, inner, descending);
    return run_host_(op, indices->data, values ? values->data : NULL, a, outer * inner, len, inner, descending, NULL);
}

ddpc_status ddpc_op_select_dim(ddpc_buffer *indices, const ddpc_buffer *a, int dim, const ddpc_buffer *positions) {
    const char *op = "select_dim";
    int64_t outer = 0, len = 0, inner = 0;
    CHECK(ddpc_dim_split(a, dim, op, &outer, &len, &inner));
    if (a->device != DDPC_CPU || indices->device != DDPC_CPU || positions->device != DDPC_CPU)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: runs on host tensors only (a GPU's lines go through sort_dim)", op);
    if (indices->readonly) return DDPC_ERROR(DDPC_ERR_ARG, "%s: the indices are read-only", op);
    if (indices->dtype != DDPC_INT64 || positions->dtype != DDPC_INT64 || indices->numel != outer * inner ||
        positions->numel != outer * inner)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: the indices and positions must be int64, one per line (%lld)", op,
                          (long long)(outer * inner));
    if (outer * inner == 0) return DDPC_OK;
    if (len == 0) return DDPC_ERROR(DDPC_ERR_ARG, "%s: cannot select in lines of length 0", op);
    const int64_t *k = positions->data;
    for (int64_t line = 0; line < outer * inner; line++)
        if (k[line] < 0 || k[line] >= len)
            return DDPC_ERROR(DDPC_ERR_ARG, "%s: position %lld is outside lines of length %lld", op,
                              (long long)k[line], (long long)len);
    return run_host_(op, indices->data, NULL, a, outer * inner, len, inner, 0, k);
}

/* ---- bindings ------------------------------------------------------------------------ */

static PyObject *py_sort_dim(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *indices, *a;
    PyObject *values;
    int dim, descending;
    if (!ddpc_parse_args(args, "O&OO&ip:sort_dim", ddpc_arg_buffer, &indices, &values, ddpc_arg_buffer, &a, &dim,
                         &descending))
        return NULL;
    ddpc_buffer *v = NULL;
    if (values != Py_None && !ddpc_arg_buffer(values, &v)) return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(a), ddpc_op_sort_dim(indices, v, a, dim, descending));
}

static PyObject *py_select_dim(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *indices, *a, *positions;
    int dim;
    if (!ddpc_parse_args(args, "O&O&iO&:select_dim", ddpc_arg_buffer, &indices, ddpc_arg_buffer, &a, &dim,
                         ddpc_arg_buffer, &positions))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(a), ddpc_op_select_dim(indices, a, dim, positions));
}

static PyMethodDef sort_methods[] = {
    {"sort_dim", py_sort_dim, METH_VARARGS,
     "sort_dim(indices, values, a, dim, descending): stable sort along dim; values may be None"},
    {"select_dim", py_select_dim, METH_VARARGS,
     "select_dim(indices, a, dim, positions): per line along dim, where the element at the given stable sorted "
     "position came from (host only)"},
    {NULL, NULL, 0, NULL},
};

int ddpc_sort_register(PyObject *module) { return PyModule_AddFunctions(module, sort_methods); }

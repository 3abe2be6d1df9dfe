/* The positions and the count of a mask's non-zero elements (see
 * ops_select.h): host loops, or the kernels of kernels/select.cu in
 * stream-ordered scratch. */
#include "ops_select.h"

#include "kernels.h"
#include "module.h"

/* mode: a DDPC_K_NONZERO_* of kernels.h. */
static ddpc_status nonzero_cuda_(ddpc_buffer *out, const ddpc_buffer *mask, int mode, ddpc_k_bcast geo) {
#ifdef DDPC_WITH_CUDA
    int device = mask->device, prev;
    size_t bytes = 0;
    ddpc_block *scratch = NULL;
    void *stream;
    ddpc_status st = DDPC_OK;
    CHECK(ddpc_cuda_compute_stream(device, &stream));
    /* The device is current from here: CUB sizes its storage for the device it runs on. */
    CHECK(ddpc_cuda_enter(device, &prev));
    CUDACHECKGOTO((cudaError_t)ddpc_k_nonzero_scratch(mask->numel, mode, &bytes), st, exit);
    CHECKGOTO(ddpc_alloc(device, bytes, 0, &scratch), st, exit);
    int64_t rows = mode == DDPC_K_NONZERO_COUNT ? 0 : out->shape[0];
    CUDACHECKGOTO((cudaError_t)ddpc_k_nonzero(out->data, mask->data, mask->numel, rows, mode, geo, scratch->ptr, bytes,
                                              stream),
                  st, exit);
exit:
    ddpc_cuda_leave(prev);
    ddpc_free(scratch);
    return st;
#else
    (void)out, (void)mode, (void)geo;
    return ddpc_cuda_require(mask->device);
#endif
}

static int64_t count_host_(const ddpc_buffer *mask) {
    const uint8_t *m = mask->data;
    int64_t count = 0;
    for (int64_t k = 0; k < mask->numel; k++) count += m[k] != 0;
    return count;
}

ddpc_status ddpc_op_count_nonzero(ddpc_buffer *out, const ddpc_buffer *mask) {
    const char *op = "count_nonzero";
    if (out->readonly) return DDPC_ERROR(DDPC_ERR_ARG, "%s: the output is read-only", op);
    if (mask->dtype != DDPC_BOOL && mask->dtype != DDPC_UINT8)
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: the mask must be bool or uint8", op);
    if (out->dtype != DDPC_INT64 || out->device != mask->device || out->numel != 1)
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: the output must be one int64 on the mask's device", op);
    ddpc_k_bcast geo = {.ndim = 0};
    if (mask->device != DDPC_CPU) return nonzero_cuda_(out, mask, DDPC_K_NONZERO_COUNT, geo);
    *(int64_t *)out->data = count_host_(mask);
    return DDPC_OK;
}

ddpc_status ddpc_op_nonzero(ddpc_buffer *out, const ddpc_buffer *mask) {
    const char *op = "nonzero";
    if (out->readonly) return DDPC_ERROR(DDPC_ERR_ARG, "%s: the output is read-only", op);
    if (mask->dtype != DDPC_BOOL && mask->dtype != DDPC_UINT8)
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: the mask must be bool or uint8", op);
    if (out->dtype != DDPC_INT64 || out->device != mask->device)
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: the output must be int64 on the mask's device", op);
    int coords = out->ndim == 2;
    if (!(out->ndim == 1 || (coords && out->shape[1] == mask->ndim)))
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: the output must be [count] or [count, %d], got %d dims", op, mask->ndim,
                          out->ndim);
    ddpc_k_bcast geo = {.ndim = mask->ndim};
    for (int d = 0; d < mask->ndim; d++) geo.shape[d] = mask->shape[d];
    int64_t rows = out->shape[0], n = mask->numel;
    if (n == 0 && rows) return DDPC_ERROR(DDPC_ERR_ARG, "%s: %lld rows for an empty mask", op, (long long)rows);
    if (mask->device != DDPC_CPU)
        return rows ? nonzero_cuda_(out, mask, coords ? DDPC_K_NONZERO_COORDS : DDPC_K_NONZERO_FLAT, geo) : DDPC_OK;
    const uint8_t *m = mask->data;
    int64_t count = count_host_(mask);
    if (count != rows)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: the mask has %lld non-zero elements, the output %lld rows", op,
                          (long long)count, (long long)rows);
    /* The flat positions first, without a branch per element (a mask of
     * random bits mispredicts half of them): each position is written, and
     * the next one overwrites it unless the mask is set there. */
    int64_t *o = out->data, j = 0;
    if (coords && geo.ndim == 0) return DDPC_OK; /* [count, 0]: nothing to write */
    for (int64_t k = 0; k < n && j < count; k++) {
        o[j] = k;
        j += m[k] != 0;
    }
    if (!coords) return DDPC_OK;
    /* Row i's coordinates go to o[i * ndim ...], at or after its flat position
     * o[i]: from the last row back, no position is overwritten before it is read. */
    for (int64_t i = count - 1; i >= 0; i--) {
        int64_t rest = o[i];
        for (int d = geo.ndim - 1; d >= 0; d--) o[i * geo.ndim + d] = rest % geo.shape[d], rest /= geo.shape[d];
    }
    return DDPC_OK;
}

/* ---- bindings ------------------------------------------------------------------------ */

static PyObject *py_nonzero(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *out, *mask;
    if (!ddpc_parse_args(args, "O&O&:nonzero", ddpc_arg_buffer, &out, ddpc_arg_bool_buffer, &mask)) return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(mask), ddpc_op_nonzero(out, mask));
}

static PyObject *py_count_nonzero(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *out, *mask;
    if (!ddpc_parse_args(args, "O&O&:count_nonzero", ddpc_arg_buffer, &out, ddpc_arg_bool_buffer, &mask)) return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(mask), ddpc_op_count_nonzero(out, mask));
}

static PyMethodDef select_methods[] = {
    {"count_nonzero", py_count_nonzero, METH_VARARGS,
     "count_nonzero(out, mask): out (one int64 on the mask's device) = the number of non-zero mask elements"},
    {"nonzero", py_nonzero, METH_VARARGS,
     "nonzero(out, mask): positions of the mask's non-zero elements; out [count] flat or [count, ndim] coordinates"},
    {NULL, NULL, 0, NULL},
};

int ddpc_select_register(PyObject *module) { return PyModule_AddFunctions(module, select_methods); }

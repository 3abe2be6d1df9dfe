/* Gradient unscaling for mixed-precision training (ddpc.amp.GradScaler).
 *
 *   g = g * inv_scale for every gradient of the list, in place;
 *   found_inf[0] = 1 if any gradient held an inf or a NaN (else untouched).
 *
 * The flag is a one-element float32 buffer on the gradients' device, as in
 * PyTorch, so a device's unscale is kernels only: the host reads the flag once
 * per step, when the scaler decides whether to skip it. The non-finite test
 * looks at the exponent bits of the value before scaling, so a finite
 * gradient that inv_scale underflows is never taken for an overflow. */
#include <stdatomic.h>
#include <string.h>

#include "amp.h"
#include "kernels.h"
#include "module.h"
#include "parallel.h"

typedef struct {
    void *data;
    ddpc_dtype dtype;
    double inv_scale;
    atomic_int bad;
} unscale_job_;

/* Each branch is a plain loop with an integer OR reduction, which the
 * compiler vectorises. */
static void unscale_range_(void *ctx, int64_t lo, int64_t hi) {
    unscale_job_ *j = ctx;
    int bad = 0;
    if (j->dtype == DDPC_FLOAT32) {
        float *g = (float *)j->data, s = (float)j->inv_scale;
        for (int64_t i = lo; i < hi; i++) {
            uint32_t u;
            memcpy(&u, &g[i], sizeof u);
            bad |= (u & 0x7f800000u) == 0x7f800000u;
            g[i] *= s;
        }
    } else if (j->dtype == DDPC_FLOAT64) {
        double *g = (double *)j->data, s = j->inv_scale;
        for (int64_t i = lo; i < hi; i++) {
            uint64_t u;
            memcpy(&u, &g[i], sizeof u);
            bad |= (u & 0x7ff0000000000000u) == 0x7ff0000000000000u;
            g[i] *= s;
        }
    } else {
        int half = j->dtype == DDPC_FLOAT16;
        uint16_t *g = (uint16_t *)j->data, exp = half ? 0x7c00u : 0x7f80u;
        float s = (float)j->inv_scale;
        for (int64_t i = lo; i < hi; i++) {
            bad |= (g[i] & exp) == exp;
            g[i] = half ? ddpc_float_to_half(ddpc_half_to_float(g[i]) * s)
                        : ddpc_float_to_bf16(ddpc_bf16_to_float(g[i]) * s);
        }
    }
    if (bad) atomic_store(&j->bad, 1);
}

static ddpc_status unscale_one_(ddpc_buffer *g, double inv_scale, ddpc_buffer *found_inf) {
    if (g->numel == 0) return DDPC_OK;
    if (g->device != DDPC_CPU) {
#ifdef DDPC_WITH_CUDA
        void *stream;
        int prev;
        CHECK(ddpc_cuda_compute_stream(g->device, &stream));
        CHECK(ddpc_cuda_enter(g->device, &prev));
        cudaError_t e = (cudaError_t)ddpc_k_unscale(g->data, g->numel, g->dtype, inv_scale, found_inf->data, stream);
        ddpc_cuda_leave(prev);
        CUDACHECK(e);
        return DDPC_OK;
#else
        (void)found_inf;
        return ddpc_cuda_require(g->device);
#endif
    }
    unscale_job_ j = {.data = g->data, .dtype = g->dtype, .inv_scale = inv_scale};
    atomic_init(&j.bad, 0);
    ddpc_parallel_for(g->numel, 1 << 16, unscale_range_, &j);
    if (atomic_load(&j.bad)) *(float *)found_inf->data = 1.0f;
    return DDPC_OK;
}

ddpc_status ddpc_op_unscale(int n, ddpc_buffer **grads, double inv_scale, ddpc_buffer *found_inf) {
    if (found_inf->dtype != DDPC_FLOAT32 || found_inf->numel != 1 || found_inf->readonly)
        return DDPC_ERROR(DDPC_ERR_ARG, "unscale: found_inf must be a writable one-element float32 buffer");
    for (int i = 0; i < n; i++) {
        const ddpc_buffer *g = grads[i];
        if (g->readonly) return DDPC_ERROR(DDPC_ERR_ARG, "unscale: gradient %d is read-only", i);
        if (!ddpc_dtype_is_float(g->dtype))
            return DDPC_ERROR(DDPC_ERR_TYPE, "unscale: gradient %d is %s, not a float dtype", i,
                              ddpc_dtype_name(g->dtype));
        if (g->device != found_inf->device)
            return DDPC_ERROR(DDPC_ERR_ARG, "unscale: gradient %d is on another device than found_inf", i);
    }
    for (int i = 0; i < n; i++) CHECK(unscale_one_(grads[i], inv_scale, found_inf));
    return DDPC_OK;
}

/* ---- Python binding --------------------------------------------------------------- */

typedef struct {
    int n;
    ddpc_buffer **grads, *found_inf;
    double inv_scale;
} unscale_ctx_;

static PyObject *py_unscale(PyObject *m, PyObject *args) {
    (void)m;
    PyObject *list;
    unscale_ctx_ c = {0};
    if (!PyArg_ParseTuple(args, "OdO!:unscale", &list, &c.inv_scale, ddpc_BufferType, &c.found_inf)) return NULL;
    PyObject *fast = PySequence_Fast(list, "unscale: expected a list of buffers");
    if (!fast) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject *res = NULL;
    if (n > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "unscale: too many gradients");
        goto exit;
    }
    c.n = (int)n;
    c.grads = calloc((size_t)n + 1, sizeof *c.grads);
    if (!c.grads) {
        PyErr_NoMemory();
        goto exit;
    }
    size_t bytes = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(fast, i);
        if (!ddpc_buffer_check(o)) {
            PyErr_Format(PyExc_TypeError, "unscale: gradient %zd is a %.100s, not a ddpc._C.Buffer", i,
                         Py_TYPE(o)->tp_name);
            goto exit;
        }
        c.grads[i] = (ddpc_buffer *)o;
        bytes += ddpc_buffer_nbytes(c.grads[i]);
    }
    /* The list (held by `fast`) keeps every buffer alive while the GIL is released. */
    ddpc_status st;
    if (bytes >= (1 << 16)) {
        Py_BEGIN_ALLOW_THREADS st = ddpc_op_unscale(c.n, c.grads, c.inv_scale, c.found_inf);
        Py_END_ALLOW_THREADS
    } else {
        st = ddpc_op_unscale(c.n, c.grads, c.inv_scale, c.found_inf);
    }
    if (st != DDPC_OK) {
        ddpc_raise(st);
        goto exit;
    }
    res = Py_NewRef(Py_None);
exit:
    free(c.grads);
    Py_DECREF(fast);
    return res;
}

static PyMethodDef amp_methods[] = {
    {"unscale", py_unscale, METH_VARARGS,
     "unscale(grads, inv_scale, found_inf): multiply every gradient by inv_scale in place and set found_inf[0] = 1 "
     "if any held an inf or a NaN"},
    {NULL, NULL, 0, NULL},
};

int ddpc_amp_register(PyObject *module) { return PyModule_AddFunctions(module, amp_methods); }

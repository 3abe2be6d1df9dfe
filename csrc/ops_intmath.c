/* gcd and lcm (see ops_intmath.h): argument checks, then a host loop split
 * across threads or the launcher of kernels/intmath.cu. Both run kernels.h's
 * ddpc_gcd_lcm on each pair. */
#include "ops_intmath.h"

#include "kernels.h"
#include "module.h"
#include "parallel.h"

typedef struct {
    void *out;
    const void *a, *b;
    int dtype, want_lcm;
} gcd_job_;

static void gcd_range_(void *ctx, int64_t lo, int64_t hi) {
    const gcd_job_ *j = ctx;
    switch (j->dtype) {
    case DDPC_UINT8:
        for (int64_t k = lo; k < hi; k++)
            ((uint8_t *)j->out)[k] = (uint8_t)ddpc_gcd_lcm(((const uint8_t *)j->a)[k], ((const uint8_t *)j->b)[k],
                                                           j->want_lcm);
        break;
    case DDPC_INT32:
        for (int64_t k = lo; k < hi; k++)
            ((int32_t *)j->out)[k] = (int32_t)ddpc_gcd_lcm(((const int32_t *)j->a)[k], ((const int32_t *)j->b)[k],
                                                           j->want_lcm);
        break;
    default:
        for (int64_t k = lo; k < hi; k++)
            ((int64_t *)j->out)[k] = (int64_t)ddpc_gcd_lcm(((const int64_t *)j->a)[k], ((const int64_t *)j->b)[k],
                                                           j->want_lcm);
        break;
    }
}

/* Pairs per thread below which a thread start does not pay (each pair loops). */
#define GCD_GRAIN 2048

ddpc_status ddpc_op_gcd(ddpc_buffer *out, const ddpc_buffer *a, const ddpc_buffer *b, int want_lcm) {
    const char *op = want_lcm ? "lcm" : "gcd";
    if (out->readonly) return DDPC_ERROR(DDPC_ERR_ARG, "%s: the output is read-only", op);
    if (out->dtype != DDPC_UINT8 && out->dtype != DDPC_INT32 && out->dtype != DDPC_INT64)
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: needs an integer dtype (uint8, int32, int64), got %s", op,
                          ddpc_dtype_name(out->dtype));
    if (a->dtype != out->dtype || b->dtype != out->dtype)
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: the operands are %s and %s, the output %s", op,
                          ddpc_dtype_name(a->dtype), ddpc_dtype_name(b->dtype), ddpc_dtype_name(out->dtype));
    if (a->device != out->device || b->device != out->device)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: the tensors are on different devices", op);
    if (a->numel != out->numel || b->numel != out->numel)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: the operands have %lld and %lld elements, the output %lld", op,
                          (long long)a->numel, (long long)b->numel, (long long)out->numel);
    if (out->numel == 0) return DDPC_OK;
    if (out->device != DDPC_CPU)
        DDPC_LAUNCH(out->device, ddpc_k_gcd(out->data, a->data, b->data, out->dtype, out->numel, want_lcm, stream));
    gcd_job_ job = {.out = out->data, .a = a->data, .b = b->data, .dtype = out->dtype, .want_lcm = want_lcm};
    ddpc_parallel_for(out->numel, GCD_GRAIN, gcd_range_, &job);
    return DDPC_OK;
}

static PyObject *py_gcd(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *out, *a, *b;
    int want_lcm;
    if (!ddpc_parse_args(args, "O&O&O&p:gcd", ddpc_arg_buffer, &out, ddpc_arg_buffer, &a, ddpc_arg_buffer, &b,
                         &want_lcm))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(out), ddpc_op_gcd(out, a, b, want_lcm));
}

static PyMethodDef intmath_methods[] = {
    {"gcd", py_gcd, METH_VARARGS, "gcd(out, a, b, want_lcm): elementwise greatest common divisor (or lcm)"},
    {NULL, NULL, 0, NULL},
};

int ddpc_intmath_register(PyObject *module) { return PyModule_AddFunctions(module, intmath_methods); }

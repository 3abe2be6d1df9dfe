/* Complex elementwise ops (see ops_complex.h): argument checks, then a host
 * loop split across threads or a launcher of kernels/complex.cu. */
#include "ops_complex.h"

#include "complex_math.h"
#include "kernels.h"
#include "module.h"
#include "parallel.h"

/* What an op writes: a complex, a real part alone (abs, angle: float for
 * complex64, double for complex128) or a bool comparison. */
typedef enum { OUT_COMPLEX_, OUT_REAL_, OUT_MASK_ } out_kind_;

typedef struct {
    int unary, op;
    out_kind_ kind;
    void *out;
    const void *a, *b; /* b NULL: the scalar s */
    ddpc_dtype dtype;  /* of a */
    ddpc_cx s;
    double p;
} cx_job_;

/* Element k of (re, im) pairs p of float or double, and a store of one. */
#define CX_AT_(p, k) ((ddpc_cx){(double)(p)[2 * (k)], (double)(p)[2 * (k) + 1]})
#define CX_PUT_(R, p, k, z)                                                        \
    do {                                                                           \
        ddpc_cx z_ = (z);                                                          \
        (p)[2 * (k)] = (R)z_.re, (p)[2 * (k) + 1] = (R)z_.im;                      \
    } while (0)

/* One loop per op, the op a constant in it, so that the compiler folds the
 * switch of complex_math.h away and vectorises the arithmetic. */
#define BINARY_CASE_(R, OP)                                                        \
    case OP:                                                                       \
        if (b)                                                                     \
            for (int64_t k = lo; k < hi; k++) CX_PUT_(R, o, k, ddpc_cx_binary(OP, CX_AT_(a, k), CX_AT_(b, k))); \
        else                                                                       \
            for (int64_t k = lo; k < hi; k++) CX_PUT_(R, o, k, ddpc_cx_binary(OP, CX_AT_(a, k), j->s)); \
        break;
#define UNARY_CASE_(R, OP)                                                         \
    case OP:                                                                       \
        for (int64_t k = lo; k < hi; k++) CX_PUT_(R, o, k, ddpc_cx_unary(OP, CX_AT_(a, k), j->p)); \
        break;

/* The loops over elements [lo, hi) of pairs of R. ABS(re, im) is |z|: for
 * complex64 the parts' squares, taken in double, can neither overflow nor
 * lose the result's precision, so the slower hypot is needed for complex128 only. */
#define CX_RANGE_(R, ABS)                                                          \
    static void range_##R##_(const cx_job_ *j, int64_t lo, int64_t hi) {           \
        const R *a = j->a, *b = j->b;                                              \
        R *o = j->out;                                                             \
        if (j->kind == OUT_MASK_) {                                                \
            uint8_t *m = j->out;                                                   \
            for (int64_t k = lo; k < hi; k++) {                                    \
                ddpc_cx x = CX_AT_(a, k), y = b ? CX_AT_(b, k) : j->s;             \
                m[k] = (uint8_t)((x.re == y.re && x.im == y.im) == (j->op == DDPC_CX_EQ)); \
            }                                                                      \
        } else if (j->kind == OUT_REAL_ && j->op == DDPC_CX_ABS) {                 \
            for (int64_t k = lo; k < hi; k++) o[k] = (R)ABS((double)a[2 * k], (double)a[2 * k + 1]); \
        } else if (j->kind == OUT_REAL_) {                                         \
            for (int64_t k = lo; k < hi; k++) o[k] = (R)atan2((double)a[2 * k + 1], (double)a[2 * k]); \
        } else if (j->unary) {                                                     \
            switch (j->op) {                                                       \
                UNARY_CASE_(R, 0) UNARY_CASE_(R, 1) UNARY_CASE_(R, 2) UNARY_CASE_(R, 3) \
                UNARY_CASE_(R, 4) UNARY_CASE_(R, 5) UNARY_CASE_(R, 6) UNARY_CASE_(R, 7) \
            default: break;                                                        \
            }                                                                      \
        } else {                                                                   \
            switch (j->op) {                                                       \
                BINARY_CASE_(R, 0) BINARY_CASE_(R, 1) BINARY_CASE_(R, 2)           \
                BINARY_CASE_(R, 3) BINARY_CASE_(R, 4) BINARY_CASE_(R, 5)           \
            default: break;                                                        \
            }                                                                      \
        }                                                                          \
    }

#define ABS_SMALL_(re, im) sqrt((re) * (re) + (im) * (im))
CX_RANGE_(float, ABS_SMALL_)
CX_RANGE_(double, hypot)

static void cx_range_(void *ctx, int64_t lo, int64_t hi) {
    const cx_job_ *j = ctx;
    if (j->dtype == DDPC_COMPLEX64) range_float_(j, lo, hi);
    else range_double_(j, lo, hi);
}

/* Elements per thread below which a thread start does not pay. */
#define CX_GRAIN 16384

static ddpc_status run_(const cx_job_ *job, int device, int64_t n) {
    if (n == 0) return DDPC_OK;
    if (device != DDPC_CPU)
        DDPC_LAUNCH(device, ddpc_k_complex(job->unary, job->op, (int)job->kind, job->out, job->a, job->b, job->dtype,
                                           job->s.re, job->s.im, job->p, n, stream));
    ddpc_parallel_for(n, CX_GRAIN, cx_range_, (void *)job);
    return DDPC_OK;
}

static ddpc_dtype real_of_(ddpc_dtype dt) { return dt == DDPC_COMPLEX64 ? DDPC_FLOAT32 : DDPC_FLOAT64; }

static ddpc_status check_(const char *op, const ddpc_buffer *out, ddpc_dtype out_dtype, const ddpc_buffer *a,
                          const ddpc_buffer *b) {
    if (!ddpc_dtype_is_complex(a->dtype))
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: the operand must be complex64 or complex128, got %s", op,
                          ddpc_dtype_name(a->dtype));
    if (b && b->dtype != a->dtype)
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: the operands are %s and %s", op, ddpc_dtype_name(a->dtype),
                          ddpc_dtype_name(b->dtype));
    if (out->dtype != out_dtype)
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: the output is %s, expected %s", op, ddpc_dtype_name(out->dtype),
                          ddpc_dtype_name(out_dtype));
    if (out->readonly) return DDPC_ERROR(DDPC_ERR_ARG, "%s: the output is read-only", op);
    if (a->device != out->device || (b && b->device != out->device))
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: the tensors are on different devices", op);
    if (a->numel != out->numel || (b && b->numel != out->numel))
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: the operands have %lld and %lld elements, the output %lld", op,
                          (long long)a->numel, (long long)(b ? b->numel : a->numel), (long long)out->numel);
    return DDPC_OK;
}

static ddpc_status binary_(ddpc_complex_binary_op op, ddpc_buffer *out, const ddpc_buffer *a, const ddpc_buffer *b,
                           ddpc_cx s) {
    const char *name = b ? "complex binary op" : "complex scalar op";
    if ((unsigned)op >= DDPC_CX_NBINARY || (!b && op >= DDPC_CX_EQ))
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: unknown op %d", name, (int)op);
    out_kind_ kind = op >= DDPC_CX_EQ ? OUT_MASK_ : OUT_COMPLEX_;
    CHECK(check_(name, out, kind == OUT_MASK_ ? DDPC_BOOL : a->dtype, a, b));
    cx_job_ job = {.unary = 0, .op = op, .kind = kind, .out = out->data, .a = a->data, .b = b ? b->data : NULL,
                   .dtype = a->dtype, .s = s};
    return run_(&job, out->device, out->numel);
}

ddpc_status ddpc_op_complex_binary(ddpc_complex_binary_op op, ddpc_buffer *out, const ddpc_buffer *a,
                                   const ddpc_buffer *b) {
    ddpc_cx zero = {0, 0};
    return binary_(op, out, a, b, zero);
}

ddpc_status ddpc_op_complex_scalar(ddpc_complex_binary_op op, ddpc_buffer *out, const ddpc_buffer *a, double re,
                                   double im) {
    ddpc_cx s = {re, im};
    return binary_(op, out, a, NULL, s);
}

ddpc_status ddpc_op_complex_unary(ddpc_complex_unary_op op, ddpc_buffer *out, const ddpc_buffer *a, double p) {
    if ((unsigned)op >= DDPC_CX_NUNARY) return DDPC_ERROR(DDPC_ERR_ARG, "complex unary op: unknown op %d", (int)op);
    out_kind_ kind = op >= DDPC_CX_ABS ? OUT_REAL_ : OUT_COMPLEX_;
    CHECK(check_("complex unary op", out, kind == OUT_REAL_ ? real_of_(a->dtype) : a->dtype, a, NULL));
    cx_job_ job = {.unary = 1, .op = op, .kind = kind, .out = out->data, .a = a->data, .dtype = a->dtype, .p = p};
    return run_(&job, out->device, out->numel);
}

/* ---- Python bindings ------------------------------------------------------------ */

static PyObject *py_complex_binary(PyObject *m, PyObject *args) {
    (void)m;
    int op;
    ddpc_buffer *out, *a, *b;
    if (!ddpc_parse_args(args, "iO&O&O&:complex_binary", &op, ddpc_arg_any_buffer, &out, ddpc_arg_any_buffer, &a,
                         ddpc_arg_any_buffer, &b))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(out), ddpc_op_complex_binary((ddpc_complex_binary_op)op, out, a, b));
}

static PyObject *py_complex_scalar(PyObject *m, PyObject *args) {
    (void)m;
    int op;
    ddpc_buffer *out, *a;
    double re, im;
    if (!ddpc_parse_args(args, "iO&O&dd:complex_scalar", &op, ddpc_arg_any_buffer, &out, ddpc_arg_any_buffer, &a,
                         &re, &im))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(out), ddpc_op_complex_scalar((ddpc_complex_binary_op)op, out, a, re, im));
}

static PyObject *py_complex_unary(PyObject *m, PyObject *args) {
    (void)m;
    int op;
    ddpc_buffer *out, *a;
    double p = 0;
    if (!ddpc_parse_args(args, "iO&O&|d:complex_unary", &op, ddpc_arg_any_buffer, &out, ddpc_arg_any_buffer, &a, &p))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(a), ddpc_op_complex_unary((ddpc_complex_unary_op)op, out, a, p));
}

static PyMethodDef complex_methods[] = {
    {"complex_binary", py_complex_binary, METH_VARARGS,
     "complex_binary(op, out, a, b): a ddpc_complex_binary_op code (csrc/ops_complex.h)"},
    {"complex_scalar", py_complex_scalar, METH_VARARGS, "complex_scalar(op, out, a, re, im): a op (re + im j)"},
    {"complex_unary", py_complex_unary, METH_VARARGS,
     "complex_unary(op, out, a, p=0): a ddpc_complex_unary_op code; p is pow's exponent"},
    {NULL, NULL, 0, NULL},
};

int ddpc_complex_register(PyObject *module) { return PyModule_AddFunctions(module, complex_methods); }

/* GEMM entry point: numpy's dot (OpenBLAS/MKL underneath) on the host, cuBLAS
 * on GPUs.
 *
 * On the host the operands are wrapped as numpy arrays without copying; a
 * transposed operand is a view with swapped strides, which numpy hands to
 * BLAS as a transpose flag, so no operand is ever materialised. This file
 * owns numpy's C-API table (import_array runs in ddpc_gemm_register).
 *
 * On a GPU each device has one cuBLAS handle bound to its compute stream, so
 * GEMMs are ordered with every other op without host synchronisation. */
#define PY_ARRAY_UNIQUE_SYMBOL ddpc_numpy_api
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include "gemm.h"

#include <limits.h>
#include <numpy/arrayobject.h>
#include <pthread.h>

#include "kernels.h"
#include "module.h"

/* Whether float32 GEMMs on GPUs may use TF32 tensor cores (10-bit mantissa
 * products, float32 sums), as PyTorch's allow_tf32; off by default. */
static int allow_tf32_;

#ifdef DDPC_WITH_CUDA
#include "cuda_libs.h"

static pthread_mutex_t handles_mu_ = PTHREAD_MUTEX_INITIALIZER;
static cublasHandle_t handles_[DDPC_MAX_DEVICES];

#define CUBLASCHECK(call)                                                                          \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                           \
            return DDPC_ERROR(DDPC_ERR_CUDA, "%s failed: %s", #call, ddpc_cublas.GetStatusString(s_)); \
    } while (0)

static ddpc_status handle_for_(int device, cublasHandle_t *out) {
    void *stream;
    CHECK(ddpc_cublas_load());
    CHECK(ddpc_cuda_compute_stream(device, &stream));
    pthread_mutex_lock(&handles_mu_);
    cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
    if (!handles_[device]) {
        s = ddpc_cublas.Create(&handles_[device]);
        if (s == CUBLAS_STATUS_SUCCESS) s = ddpc_cublas.SetStream(handles_[device], (cudaStream_t)stream);
        if (s != CUBLAS_STATUS_SUCCESS && handles_[device]) {
            ddpc_cublas.Destroy(handles_[device]);
            handles_[device] = NULL;
        }
    }
    *out = handles_[device];
    pthread_mutex_unlock(&handles_mu_);
    if (s != CUBLAS_STATUS_SUCCESS)
        return DDPC_ERROR(DDPC_ERR_CUDA, "creating the cuBLAS handle of cuda:%d failed: %s", device,
                          ddpc_cublas.GetStatusString(s));
    return DDPC_OK;
}

/* cuBLAS is column-major: row-major C = op(A) op(B) is column-major
 * C^T = op(B)^T op(A)^T, so the operands are passed swapped. */
static ddpc_status gemm_cuda_on_(ddpc_buffer *out, const ddpc_buffer *a, const ddpc_buffer *b, int ta, int tb,
                                 const ddpc_buffer *bias, int accumulate, int64_t M, int64_t N, int64_t K) {
    cublasHandle_t h;
    CHECK(handle_for_(out->device, &h));
    void *stream;
    CHECK(ddpc_cuda_compute_stream(out->device, &stream));
    if (bias) CUDACHECK((cudaError_t)ddpc_k_rows_fill(out->data, bias->data, out->dtype, M, N, stream));
    int lda = (int)(ta ? M : K), ldb = (int)(tb ? K : N);
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (M == 0 || N == 0) return DDPC_OK;
    if (K == 0) {
        if (!bias && !accumulate) CUDACHECK((cudaError_t)ddpc_k_fill(out->data, out->dtype, M * N, 0.0, stream));
        return DDPC_OK;
    }
    if (out->dtype == DDPC_FLOAT32) {
        const float one = 1.0f, beta = (bias || accumulate) ? 1.0f : 0.0f;
        const int tf32 = __atomic_load_n(&allow_tf32_, __ATOMIC_RELAXED);
        CUBLASCHECK(ddpc_cublas.SetMathMode(h, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
        CUBLASCHECK(ddpc_cublas.Sgemm(h, opb, opa, (int)N, (int)M, (int)K, &one, b->data, ldb, a->data, lda, &beta,
                                      out->data, (int)N));
    } else {
        const double one = 1.0, beta = (bias || accumulate) ? 1.0 : 0.0;
        CUBLASCHECK(ddpc_cublas.Dgemm(h, opb, opa, (int)N, (int)M, (int)K, &one, b->data, ldb, a->data, lda, &beta,
                                      out->data, (int)N));
    }
    return DDPC_OK;
}

/* With out's device current (cublasCreate binds a handle to the current
 * device), and the caller's current device back afterwards. */
static ddpc_status gemm_cuda_(ddpc_buffer *out, const ddpc_buffer *a, const ddpc_buffer *b, int ta, int tb,
                              const ddpc_buffer *bias, int accumulate, int64_t M, int64_t N, int64_t K) {
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX)
        return DDPC_ERROR(DDPC_ERR_ARG, "gemm on a GPU: dimensions above %d are not supported (M=%lld, N=%lld, K=%lld)",
                          INT_MAX, (long long)M, (long long)N, (long long)K);
    int prev;
    CHECK(ddpc_cuda_enter(out->device, &prev));
    ddpc_status st = gemm_cuda_on_(out, a, b, ta, tb, bias, accumulate, M, N, K);
    ddpc_cuda_leave(prev);
    return st;
}
#endif

/* A numpy array viewing a [rows, cols] row-major buffer, or its transpose. */
static PyObject *as_array_(const ddpc_buffer *buf, int transpose, int writable) {
    int typenum = buf->dtype == DDPC_FLOAT32 ? NPY_FLOAT32 : NPY_FLOAT64;
    npy_intp item = (npy_intp)ddpc_dtype_size(buf->dtype);
    npy_intp r = (npy_intp)buf->shape[0], c = (npy_intp)buf->shape[1];
    npy_intp dims[2] = {r, c}, strides[2] = {c * item, item};
    if (transpose) {
        dims[0] = c, dims[1] = r;
        strides[0] = item, strides[1] = c * item;
    }
    return PyArray_New(&PyArray_Type, 2, dims, typenum, strides, buf->data, (int)item,
                       writable ? NPY_ARRAY_WRITEABLE : 0, NULL);
}

static ddpc_status numpy_failure_(const char *what) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *s = value ? PyObject_Str(value) : NULL;
    const char *msg = s ? PyUnicode_AsUTF8(s) : NULL;
    ddpc_status st = DDPC_ERROR(DDPC_ERR_INTERNAL, "gemm: %s failed: %s", what, msg ? msg : "unknown numpy error");
    PyErr_Clear();
    Py_XDECREF(s);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return st;
}

static ddpc_status gemm_host_(ddpc_buffer *out, const ddpc_buffer *a, const ddpc_buffer *b, int ta, int tb,
                              const ddpc_buffer *bias, int accumulate, int64_t M, int64_t N) {
    ddpc_status st = DDPC_OK;
    PyObject *pa = NULL, *pb = NULL, *po = NULL, *res = NULL;
    pa = as_array_(a, ta, 0);
    pb = as_array_(b, tb, 0);
    /* Accumulation needs the product in a temporary; otherwise BLAS writes out directly. */
    po = accumulate ? NULL : as_array_(out, 0, 1);
    if (!pa || !pb || (!accumulate && !po)) {
        st = numpy_failure_("wrapping the operands");
        goto exit;
    }
    res = PyArray_MatrixProduct2(pa, pb, (PyArrayObject *)po);
    if (!res) {
        st = numpy_failure_("numpy.dot");
        goto exit;
    }
    int64_t n = M * N;
    if (out->dtype == DDPC_FLOAT32) {
        float *o = out->data;
        if (accumulate) {
            const float *p = PyArray_DATA((PyArrayObject *)res);
            for (int64_t i = 0; i < n; i++) o[i] += p[i];
        } else if (bias) {
            const float *bv = bias->data;
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) o[i * N + j] += bv[j];
        }
    } else {
        double *o = out->data;
        if (accumulate) {
            const double *p = PyArray_DATA((PyArrayObject *)res);
            for (int64_t i = 0; i < n; i++) o[i] += p[i];
        } else if (bias) {
            const double *bv = bias->data;
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) o[i * N + j] += bv[j];
        }
    }
exit:
    Py_XDECREF(res);
    Py_XDECREF(po);
    Py_XDECREF(pb);
    Py_XDECREF(pa);
    return st;
}

ddpc_status ddpc_op_gemm(ddpc_buffer *out, const ddpc_buffer *a, const ddpc_buffer *b, int trans_a, int trans_b,
                         const ddpc_buffer *bias, int accumulate) {
    if (out->readonly) return DDPC_ERROR(DDPC_ERR_ARG, "gemm: the output is read-only");
    if (a->ndim != 2 || b->ndim != 2 || out->ndim != 2)
        return DDPC_ERROR(DDPC_ERR_ARG, "gemm: operands must be 2-d (got %d, %d and out %d dims)", a->ndim, b->ndim,
                          out->ndim);
    if (out->dtype != DDPC_FLOAT32 && out->dtype != DDPC_FLOAT64)
        return DDPC_ERROR(DDPC_ERR_TYPE, "gemm: needs float32 or float64, got %s", ddpc_dtype_name(out->dtype));
    if (a->dtype != out->dtype || b->dtype != out->dtype || (bias && bias->dtype != out->dtype))
        return DDPC_ERROR(DDPC_ERR_TYPE, "gemm: operands must share the output's dtype %s", ddpc_dtype_name(out->dtype));
    if (a->device != out->device || b->device != out->device || (bias && bias->device != out->device))
        return DDPC_ERROR(DDPC_ERR_ARG, "gemm: operands are on different devices");
    int64_t M = trans_a ? a->shape[1] : a->shape[0], K = trans_a ? a->shape[0] : a->shape[1];
    int64_t Kb = trans_b ? b->shape[1] : b->shape[0], N = trans_b ? b->shape[0] : b->shape[1];
    if (K != Kb)
        return DDPC_ERROR(DDPC_ERR_ARG, "gemm: inner dimensions differ ([%lld,%lld] @ [%lld,%lld])", (long long)M,
                          (long long)K, (long long)Kb, (long long)N);
    if (out->shape[0] != M || out->shape[1] != N)
        return DDPC_ERROR(DDPC_ERR_ARG, "gemm: the output is [%lld,%lld], the product is [%lld,%lld]",
                          (long long)out->shape[0], (long long)out->shape[1], (long long)M, (long long)N);
    if (bias && bias->numel != N)
        return DDPC_ERROR(DDPC_ERR_ARG, "gemm: the bias has %lld elements, the output has %lld columns",
                          (long long)bias->numel, (long long)N);
    if (bias && accumulate) return DDPC_ERROR(DDPC_ERR_ARG, "gemm: bias and accumulate are exclusive");
    if (out->device != DDPC_CPU) {
#ifdef DDPC_WITH_CUDA
        return gemm_cuda_(out, a, b, trans_a, trans_b, bias, accumulate, M, N, K);
#else
        return ddpc_cuda_require(out->device);
#endif
    }
    return gemm_host_(out, a, b, trans_a, trans_b, bias, accumulate, M, N);
}

/* ---- Python binding -------------------------------------------------------------- */

static PyObject *py_gemm(PyObject *m, PyObject *args, PyObject *kwargs) {
    (void)m;
    static char *kwlist[] = {"out", "a", "b", "trans_a", "trans_b", "bias", "accumulate", NULL};
    PyObject *out, *a, *b, *bias = Py_None;
    int ta = 0, tb = 0, acc = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO|ppOp:gemm", kwlist, &out, &a, &b, &ta, &tb, &bias, &acc))
        return NULL;
    if (!ddpc_buffer_check(out) || !ddpc_buffer_check(a) || !ddpc_buffer_check(b) ||
        (bias != Py_None && !ddpc_buffer_check(bias)))
        return PyErr_Format(PyExc_TypeError, "gemm takes ddpc._C.Buffer operands");
    ddpc_status st = ddpc_op_gemm((ddpc_buffer *)out, (ddpc_buffer *)a, (ddpc_buffer *)b, ta, tb,
                                  bias == Py_None ? NULL : (ddpc_buffer *)bias, acc);
    if (st != DDPC_OK) return ddpc_raise(st);
    Py_RETURN_NONE;
}

static PyObject *py_set_allow_tf32(PyObject *m, PyObject *arg) {
    (void)m;
    int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
    __atomic_store_n(&allow_tf32_, on, __ATOMIC_RELAXED);
    Py_RETURN_NONE;
}

static PyObject *py_allow_tf32(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    return PyBool_FromLong(__atomic_load_n(&allow_tf32_, __ATOMIC_RELAXED));
}

static PyMethodDef gemm_methods[] = {
    {"set_allow_tf32", py_set_allow_tf32, METH_O, "let float32 GEMMs on GPUs use TF32 tensor cores (or not)"},
    {"allow_tf32", py_allow_tf32, METH_NOARGS, "whether float32 GEMMs on GPUs may use TF32 tensor cores"},
    {"gemm", (PyCFunction)(void (*)(void))py_gemm, METH_VARARGS | METH_KEYWORDS,
     "gemm(out, a, b, trans_a=False, trans_b=False, bias=None, accumulate=False): out (+)= op(a) @ op(b) (+ bias)"},
    {NULL, NULL, 0, NULL},
};

int ddpc_gemm_register(PyObject *module) {
    if (_import_array() < 0) return -1;
    return PyModule_AddFunctions(module, gemm_methods);
}

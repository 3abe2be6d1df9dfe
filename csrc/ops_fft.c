/* cuFFT transforms of device buffers (see ops_fft.h): the argument checks,
 * a cache of plans, and each transform queued on the device's compute stream
 * with its work area and scaling. */
#include "ops_fft.h"

#include <string.h>

#include "kernels.h"
#include "module.h"

static const char *const kind_names_[DDPC_FFT_NKINDS] = {"c2c", "r2c", "c2r"};

static ddpc_dtype real_of_(ddpc_dtype dt) { return dt == DDPC_COMPLEX64 ? DDPC_FLOAT32 : DDPC_FLOAT64; }
static ddpc_dtype complex_of_(ddpc_dtype dt) { return dt == DDPC_FLOAT32 ? DDPC_COMPLEX64 : DDPC_COMPLEX128; }

static ddpc_status check_dtypes_(ddpc_fft_kind kind, const ddpc_buffer *out, const ddpc_buffer *in) {
    const char *name = kind_names_[kind];
    int ok;
    switch (kind) {
    case DDPC_FFT_R2C:
        ok = (in->dtype == DDPC_FLOAT32 || in->dtype == DDPC_FLOAT64) && out->dtype == complex_of_(in->dtype);
        break;
    case DDPC_FFT_C2R: ok = ddpc_dtype_is_complex(in->dtype) && out->dtype == real_of_(in->dtype); break;
    default: ok = ddpc_dtype_is_complex(in->dtype) && out->dtype == in->dtype; break;
    }
    if (!ok)
        return DDPC_ERROR(DDPC_ERR_TYPE,
                          "fft %s: got a %s input and a %s output (c2c takes complex64 or complex128 to the same, "
                          "r2c float32 or float64 to the complex dtype of that precision, c2r the reverse)",
                          name, ddpc_dtype_name(in->dtype), ddpc_dtype_name(out->dtype));
    return DDPC_OK;
}

/* The shapes agree: the same leading dims, and in the last dim the one-sided
 * length n / 2 + 1 where the kind has it. */
static ddpc_status check_shapes_(ddpc_fft_kind kind, const ddpc_buffer *out, const ddpc_buffer *in, int rank) {
    const char *name = kind_names_[kind];
    char a[96], b[96];
    int ndim = in->ndim, last = ndim - 1, ok = out->ndim == ndim;
    for (int d = 0; ok && d < last; d++) ok = out->shape[d] == in->shape[d];
    if (ok && kind == DDPC_FFT_C2C) ok = out->shape[last] == in->shape[last];
    if (ok && kind == DDPC_FFT_R2C) ok = out->shape[last] == in->shape[last] / 2 + 1;
    if (ok && kind == DDPC_FFT_C2R) ok = in->shape[last] == out->shape[last] / 2 + 1;
    if (!ok)
        return DDPC_ERROR(DDPC_ERR_ARG, "fft %s: an input of shape %s does not give an output of shape %s", name,
                          ddpc_shape_str(in->shape, in->ndim, a, sizeof a),
                          ddpc_shape_str(out->shape, out->ndim, b, sizeof b));
    const ddpc_buffer *signal = kind == DDPC_FFT_C2R ? out : in;
    for (int d = ndim - rank; d < ndim; d++)
        if (signal->shape[d] < 1)
            return DDPC_ERROR(DDPC_ERR_ARG, "fft %s: a transform of %lld points (shape %s)", name,
                              (long long)signal->shape[d], ddpc_shape_str(signal->shape, ndim, a, sizeof a));
    return DDPC_OK;
}

static ddpc_status check_(ddpc_fft_kind kind, const ddpc_buffer *out, const ddpc_buffer *in, int rank, int inverse) {
    if ((unsigned)kind >= DDPC_FFT_NKINDS) return DDPC_ERROR(DDPC_ERR_ARG, "fft: unknown transform kind %d", (int)kind);
    const char *name = kind_names_[kind];
    if (rank < 1 || rank > 3 || rank > in->ndim)
        return DDPC_ERROR(DDPC_ERR_ARG, "fft %s: transforms 1 to 3 dims, and no more than the input's %d; got %d",
                          name, in->ndim, rank);
    if (kind == DDPC_FFT_C2R && rank != 1)
        return DDPC_ERROR(DDPC_ERR_ARG, "fft c2r: transforms the last dim only, got %d dims (see ops_fft.h)", rank);
    if (kind != DDPC_FFT_C2C && inverse != (kind == DDPC_FFT_C2R))
        return DDPC_ERROR(DDPC_ERR_ARG, "fft %s: r2c has the forward sign only and c2r the inverse sign only", name);
    CHECK(check_dtypes_(kind, out, in));
    CHECK(check_shapes_(kind, out, in, rank));
    if (in->device != out->device)
        return DDPC_ERROR(DDPC_ERR_ARG, "fft %s: the input and the output are on different devices", name);
    if (in->device == DDPC_CPU)
        return DDPC_ERROR(DDPC_ERR_ARG, "fft %s: takes cuda buffers (ddpc.fft transforms host tensors with numpy.fft)",
                          name);
    if (out->readonly) return DDPC_ERROR(DDPC_ERR_ARG, "fft %s: the output is read-only", name);
    const char *i0 = in->data, *o0 = out->data;
    int same = kind == DDPC_FFT_C2C && i0 == o0;
    if (!same && i0 < o0 + ddpc_buffer_nbytes(out) && o0 < i0 + ddpc_buffer_nbytes(in))
        return DDPC_ERROR(DDPC_ERR_ARG, "fft %s: the output overlaps the input", name);
    return DDPC_OK;
}

#ifdef DDPC_WITH_CUDA
#include "cuda_libs.h"
#include <pthread.h>

static const char *cufft_reason_(cufftResult r) {
    switch (r) {
    case CUFFT_INVALID_PLAN: return "invalid plan (CUFFT_INVALID_PLAN)";
    case CUFFT_ALLOC_FAILED: return "cuFFT could not allocate GPU memory (CUFFT_ALLOC_FAILED)";
    case CUFFT_INVALID_TYPE: return "invalid transform type (CUFFT_INVALID_TYPE)";
    case CUFFT_INVALID_VALUE: return "invalid pointer or parameter (CUFFT_INVALID_VALUE)";
    case CUFFT_INTERNAL_ERROR: return "cuFFT internal error (CUFFT_INTERNAL_ERROR)";
    case CUFFT_EXEC_FAILED: return "the transform failed to run on the GPU (CUFFT_EXEC_FAILED)";
    case CUFFT_SETUP_FAILED: return "cuFFT could not initialise (CUFFT_SETUP_FAILED)";
    case CUFFT_INVALID_SIZE: return "unsupported transform size (CUFFT_INVALID_SIZE)";
    case CUFFT_UNALIGNED_DATA: return "unaligned data (CUFFT_UNALIGNED_DATA)";
    case CUFFT_INVALID_DEVICE: return "invalid device (CUFFT_INVALID_DEVICE)";
    case CUFFT_NO_WORKSPACE: return "no work area was set (CUFFT_NO_WORKSPACE)";
    case CUFFT_NOT_IMPLEMENTED: return "not implemented (CUFFT_NOT_IMPLEMENTED)";
    case CUFFT_NOT_SUPPORTED: return "not supported (CUFFT_NOT_SUPPORTED)";
    default: return "unknown cuFFT status";
    }
}

#define CUFFTCHECKGOTO(call, res, label)                                           \
    do {                                                                           \
        cufftResult r_ = (call);                                                   \
        if (r_ != CUFFT_SUCCESS) {                                                 \
            (res) = DDPC_ERROR(DDPC_ERR_CUDA, "%s failed: %s (status %d)", #call,  \
                               cufft_reason_(r_), (int)r_);                        \
            goto label;                                                            \
        }                                                                          \
    } while (0)

/* Making a plan costs far more than running a small transform (cuFFT builds
 * and uploads its kernels' twiddle tables), so plans are kept, the least
 * recently used one giving way. They own no work area: each transform takes
 * one from ddpc's device allocator for the length of its run, so memory of
 * idle plans is not held and shows in ddpc.cuda's statistics. */
#define PLAN_CACHE_SIZE 32

typedef struct {
    int used;
    int device;
    cufftType type;
    int rank;
    long long n[3], batch;
    cufftHandle handle;
    size_t work_size;
    uint64_t last_use;
} plan_;

static pthread_mutex_t plans_mu_ = PTHREAD_MUTEX_INITIALIZER;
static plan_ plans_[PLAN_CACHE_SIZE];
static uint64_t plan_clock_;

/* Destroys an evicted plan. A transform queued with it may still be running
 * on its device's compute stream, reading tables the plan owns: the stream
 * is drained first. */
static ddpc_status plan_destroy_(plan_ *p) {
    ddpc_status st = DDPC_OK;
    void *stream;
    int prev;
    CHECK(ddpc_cuda_compute_stream(p->device, &stream));
    CHECK(ddpc_cuda_enter(p->device, &prev));
    CUDACHECKGOTO(cudaStreamSynchronize((cudaStream_t)stream), st, exit);
    CUFFTCHECKGOTO(ddpc_cufft.Destroy(p->handle), st, exit);
exit:
    ddpc_cuda_leave(prev);
    p->used = 0;
    return st;
}

/* The cached plan for `key` (its used, device, type, rank, n and batch set),
 * made on the current device where there is none. Called with plans_mu_ held. */
static ddpc_status plan_for_(const plan_ *key, plan_ **out) {
    plan_ *slot = NULL; /* the first free entry, else the least recently used */
    for (int i = 0; i < PLAN_CACHE_SIZE; i++) {
        plan_ *p = &plans_[i];
        if (p->used && p->device == key->device && p->type == key->type && p->rank == key->rank &&
            p->batch == key->batch && !memcmp(p->n, key->n, sizeof p->n)) {
            p->last_use = ++plan_clock_;
            *out = p;
            return DDPC_OK;
        }
        if (!slot || (slot->used && (!p->used || p->last_use < slot->last_use))) slot = p;
    }
    if (slot->used) CHECK(plan_destroy_(slot));
    ddpc_status st = DDPC_OK;
    cufftHandle h;
    long long n[3];
    memcpy(n, key->n, sizeof n);
    size_t work = 0;
    CUFFTCHECKGOTO(ddpc_cufft.Create(&h), st, fail);
    CUFFTCHECKGOTO(ddpc_cufft.SetAutoAllocation(h, 0), st, destroy);
    /* NULL embeddings: each batch element is a row-major block of its sizes
     * (n[rank - 1] / 2 + 1 complex numbers in the last dim on the complex side). */
    CUFFTCHECKGOTO(
        ddpc_cufft.MakePlanMany64(h, key->rank, n, NULL, 1, 0, NULL, 1, 0, key->type, key->batch, &work), st, destroy);
    *slot = *key;
    slot->handle = h;
    slot->work_size = work;
    slot->last_use = ++plan_clock_;
    *out = slot;
    return DDPC_OK;
destroy:
    ddpc_cufft.Destroy(h);
fail:
    return st;
}

static cufftType cufft_type_(ddpc_fft_kind kind, ddpc_dtype in) {
    int dbl = in == DDPC_FLOAT64 || in == DDPC_COMPLEX128;
    switch (kind) {
    case DDPC_FFT_R2C: return dbl ? CUFFT_D2Z : CUFFT_R2C;
    case DDPC_FFT_C2R: return dbl ? CUFFT_Z2D : CUFFT_C2R;
    default: return dbl ? CUFFT_Z2Z : CUFFT_C2C;
    }
}

static ddpc_status exec_(cufftHandle h, ddpc_fft_kind kind, ddpc_dtype in_dtype, void *in, void *out, int inverse) {
    ddpc_status st = DDPC_OK;
    int dir = inverse ? CUFFT_INVERSE : CUFFT_FORWARD;
    int dbl = in_dtype == DDPC_FLOAT64 || in_dtype == DDPC_COMPLEX128;
    switch (kind) {
    case DDPC_FFT_R2C:
        if (dbl) CUFFTCHECKGOTO(ddpc_cufft.ExecD2Z(h, in, out), st, exit);
        else CUFFTCHECKGOTO(ddpc_cufft.ExecR2C(h, in, out), st, exit);
        break;
    case DDPC_FFT_C2R:
        if (dbl) CUFFTCHECKGOTO(ddpc_cufft.ExecZ2D(h, in, out), st, exit);
        else CUFFTCHECKGOTO(ddpc_cufft.ExecC2R(h, in, out), st, exit);
        break;
    default:
        if (dbl) CUFFTCHECKGOTO(ddpc_cufft.ExecZ2Z(h, in, out, dir), st, exit);
        else CUFFTCHECKGOTO(ddpc_cufft.ExecC2C(h, in, out, dir), st, exit);
        break;
    }
exit:
    return st;
}

/* With the device current: the plan, its work area, the transform and the scaling, all on the compute stream. */
static ddpc_status fft_on_(ddpc_fft_kind kind, ddpc_buffer *out, const ddpc_buffer *in, int rank, int inverse,
                           double scale, void *stream) {
    CHECK(ddpc_cufft_load());
    const ddpc_buffer *signal = kind == DDPC_FFT_C2R ? out : in;
    plan_ key = {.used = 1, .device = in->device, .type = cufft_type_(kind, in->dtype), .rank = rank, .batch = 1};
    for (int d = 0; d < signal->ndim - rank; d++) key.batch *= signal->shape[d];
    for (int i = 0; i < rank; i++) key.n[i] = signal->shape[signal->ndim - rank + i];
    ddpc_status st = DDPC_OK;
    ddpc_block *work = NULL, *copy = NULL;
    void *src = in->data;
    /* cuFFT's out-of-place c2r overwrites its input, which belongs to the
     * caller: it reads a copy, in which the imaginary parts of frequency 0 and
     * (even n) n / 2 of each row are zeroed (see ops_fft.h). */
    if (kind == DDPC_FFT_C2R) {
        size_t part = ddpc_dtype_size(out->dtype), row = (size_t)in->shape[in->ndim - 1] * 2 * part;
        size_t rows = (size_t)key.batch;
        CHECK(ddpc_alloc(in->device, ddpc_buffer_nbytes(in), 0, &copy));
        CUDACHECKGOTO(cudaMemcpyAsync(copy->ptr, in->data, ddpc_buffer_nbytes(in), cudaMemcpyDeviceToDevice,
                                      (cudaStream_t)stream),
                      st, exit);
        CUDACHECKGOTO(cudaMemset2DAsync((char *)copy->ptr + part, row, 0, part, rows, (cudaStream_t)stream), st, exit);
        if (key.n[0] % 2 == 0)
            CUDACHECKGOTO(cudaMemset2DAsync((char *)copy->ptr + row - part, row, 0, part, rows, (cudaStream_t)stream),
                          st, exit);
        src = copy->ptr;
    }
    /* One plan serves every thread: from the stream binding to the queued
     * transform, a plan and its work area are used by one thread at a time. */
    pthread_mutex_lock(&plans_mu_);
    plan_ *p = NULL;
    CHECKGOTO(plan_for_(&key, &p), st, unlock);
    CUFFTCHECKGOTO(ddpc_cufft.SetStream(p->handle, (cudaStream_t)stream), st, unlock);
    if (p->work_size) {
        CHECKGOTO(ddpc_alloc(in->device, p->work_size, 0, &work), st, unlock);
        CUFFTCHECKGOTO(ddpc_cufft.SetWorkArea(p->handle, work->ptr), st, unlock);
    }
    CHECKGOTO(exec_(p->handle, kind, in->dtype, src, out->data, inverse), st, unlock);
unlock:
    pthread_mutex_unlock(&plans_mu_);
    if (st == DDPC_OK && scale != 1.0) {
        ddpc_dtype real = ddpc_dtype_is_complex(out->dtype) ? real_of_(out->dtype) : out->dtype;
        int64_t n = ddpc_dtype_is_complex(out->dtype) ? 2 * out->numel : out->numel;
        CUDACHECKGOTO((cudaError_t)ddpc_k_scalar(DDPC_MUL, out->data, out->data, scale, real, n, stream), st, exit);
    }
exit:
    /* Freed while the transform may still run: as every op's scratch, a block
     * goes only to work queued after it on this compute stream (see alloc.h). */
    ddpc_free(work);
    ddpc_free(copy);
    return st;
}

static ddpc_status fft_cuda_(ddpc_fft_kind kind, ddpc_buffer *out, const ddpc_buffer *in, int rank, int inverse,
                             double scale) {
    void *stream;
    int prev;
    CHECK(ddpc_cuda_compute_stream(in->device, &stream));
    /* Plans belong to the device current when they are made. */
    CHECK(ddpc_cuda_enter(in->device, &prev));
    ddpc_status st = fft_on_(kind, out, in, rank, inverse, scale, stream);
    ddpc_cuda_leave(prev);
    return st;
}
#endif

ddpc_status ddpc_op_fft(ddpc_fft_kind kind, ddpc_buffer *out, const ddpc_buffer *in, int rank, int inverse,
                        double scale) {
    CHECK(check_(kind, out, in, rank, inverse));
    if (out->numel == 0) return ddpc_cuda_require(out->device);
#ifdef DDPC_WITH_CUDA
    return fft_cuda_(kind, out, in, rank, inverse, scale);
#else
    (void)scale;
    return ddpc_cuda_require(out->device);
#endif
}

/* ---- Python bindings ------------------------------------------------------------ */

static PyObject *py_fft(PyObject *m, PyObject *args) {
    (void)m;
    int kind, rank, inverse;
    ddpc_buffer *out, *in;
    double scale;
    if (!ddpc_parse_args(args, "iO&O&ipd:fft", &kind, ddpc_arg_any_buffer, &out, ddpc_arg_any_buffer, &in, &rank,
                         &inverse, &scale))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(out), ddpc_op_fft((ddpc_fft_kind)kind, out, in, rank, inverse, scale));
}

static PyMethodDef fft_methods[] = {
    {"fft", py_fft, METH_VARARGS,
     "fft(kind, out, in, rank, inverse, scale): out = scale * DFT(in) over the last rank dims of cuda buffers; "
     "kind 0 c2c, 1 r2c, 2 c2r (csrc/ops_fft.h)"},
    {NULL, NULL, 0, NULL},
};

int ddpc_fft_register(PyObject *module) { return PyModule_AddFunctions(module, fft_methods); }

// Complex elementwise ops on the GPU: fills, casts where either side is
// complex, and the ops of csrc/ops_complex.h. One thread per element runs
// kernels/complex_math.h, the functions the host loops run. Elements are
// plain (re, im) pairs of float or double.
#include "complex_math.h"
#include "dispatch.cuh"
#include "kernels.h"

namespace {

template <typename R> __device__ __forceinline__ ddpc_cx load_cx(const R *p, int64_t k) {
    ddpc_cx z;
    z.re = (double)p[2 * k];
    z.im = (double)p[2 * k + 1];
    return z;
}

template <typename R> __device__ __forceinline__ void store_cx(R *p, int64_t k, ddpc_cx z) {
    p[2 * k] = (R)z.re;
    p[2 * k + 1] = (R)z.im;
}

template <typename R> __global__ void fill_kernel(R *dst, int64_t n, R re, R im) {
    GRID_STRIDE(k, n) {
        dst[2 * k] = re;
        dst[2 * k + 1] = im;
    }
}

// complex (parts of type R) from a real element type T: imaginary part 0.
template <typename R, typename T> __global__ void real_to_complex_kernel(R *dst, const T *src, int64_t n) {
    GRID_STRIDE(k, n) {
        dst[2 * k] = (R)to_double(src, k);
        dst[2 * k + 1] = (R)0;
    }
}

// the real part of complex elements (parts of type R) into the real type T.
template <typename T, typename R> __global__ void complex_to_real_kernel(T *dst, const R *src, int64_t n) {
    GRID_STRIDE(k, n) dst[k] = from_double<T>((double)src[2 * k]);
}

template <typename D, typename S> __global__ void complex_to_complex_kernel(D *dst, const S *src, int64_t n) {
    GRID_STRIDE(k, n) {
        dst[2 * k] = (D)src[2 * k];
        dst[2 * k + 1] = (D)src[2 * k + 1];
    }
}

template <typename R>
__global__ void complex_kernel(int unary, int op, int kind, void *out, const R *a, const R *b, ddpc_cx s, double p,
                               int64_t n) {
    GRID_STRIDE(k, n) {
        ddpc_cx x = load_cx(a, k), r;
        if (unary) {
            r = ddpc_cx_unary(op, x, p);
        } else {
            ddpc_cx y = b ? load_cx(b, k) : s;
            if (op >= 6) {  // EQ, NE
                int eq = x.re == y.re && x.im == y.im;
                r.re = op == 6 ? eq : !eq;
                r.im = 0;
            } else {
                r = ddpc_cx_binary(op, x, y);
            }
        }
        if (kind == 2) ((uint8_t *)out)[k] = (uint8_t)(r.re != 0);
        else if (kind == 1) ((R *)out)[k] = (R)r.re;
        else store_cx((R *)out, k, r);
    }
}

template <typename R> int real_to_complex(R *dst, const void *src, int src_dtype, int64_t n, cudaStream_t s) {
    DDPC_DISPATCH(src_dtype, real_to_complex_kernel<R, T><<<grid_for(n, 256), 256, 0, s>>>(dst, (const T *)src, n))
    return (int)cudaGetLastError();
}

template <typename R> int complex_to_real(void *dst, int dst_dtype, const R *src, int64_t n, cudaStream_t s) {
    DDPC_DISPATCH(dst_dtype, complex_to_real_kernel<T, R><<<grid_for(n, 256), 256, 0, s>>>((T *)dst, src, n))
    return (int)cudaGetLastError();
}

}  // namespace

extern "C" int ddpc_k_complex_fill(void *dst, int dtype, int64_t n, double re, double im, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (dtype == K_C64) fill_kernel<float><<<grid_for(n, 256), 256, 0, s>>>((float *)dst, n, (float)re, (float)im);
    else if (dtype == K_C128) fill_kernel<double><<<grid_for(n, 256), 256, 0, s>>>((double *)dst, n, re, im);
    else return (int)cudaErrorInvalidValue;
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_complex_cast(void *dst, int dst_dtype, const void *src, int src_dtype, int64_t n, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (src_dtype == K_BOOL) src_dtype = K_U8;  // its bytes are its values, 0 and 1
    int dst_c = dst_dtype == K_C64 || dst_dtype == K_C128, src_c = src_dtype == K_C64 || src_dtype == K_C128;
    if (dst_c && src_c) {
        unsigned g = grid_for(n, 256);
        if (dst_dtype == K_C64 && src_dtype == K_C128)
            complex_to_complex_kernel<float, double><<<g, 256, 0, s>>>((float *)dst, (const double *)src, n);
        else if (dst_dtype == K_C128 && src_dtype == K_C64)
            complex_to_complex_kernel<double, float><<<g, 256, 0, s>>>((double *)dst, (const float *)src, n);
        else
            return (int)cudaErrorInvalidValue;  // the same dtype is a copy
        return (int)cudaGetLastError();
    }
    if (dst_c)
        return dst_dtype == K_C64 ? real_to_complex<float>((float *)dst, src, src_dtype, n, s)
                                  : real_to_complex<double>((double *)dst, src, src_dtype, n, s);
    if (src_c)
        return src_dtype == K_C64 ? complex_to_real<float>(dst, dst_dtype, (const float *)src, n, s)
                                  : complex_to_real<double>(dst, dst_dtype, (const double *)src, n, s);
    return (int)cudaErrorInvalidValue;
}

extern "C" int ddpc_k_complex(int unary, int op, int kind, void *out, const void *a, const void *b, int dtype,
                              double re, double im, double p, int64_t n, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    ddpc_cx sv;
    sv.re = re;
    sv.im = im;
    unsigned g = grid_for(n, 256);
    if (dtype == K_C64)
        complex_kernel<float><<<g, 256, 0, s>>>(unary, op, kind, out, (const float *)a, (const float *)b, sv, p, n);
    else if (dtype == K_C128)
        complex_kernel<double><<<g, 256, 0, s>>>(unary, op, kind, out, (const double *)a, (const double *)b, sv, p, n);
    else
        return (int)cudaErrorInvalidValue;
    return (int)cudaGetLastError();
}

// Elementwise kernels: fill, cast, binary and scalar arithmetic, nan_to_num.
#include <cstring>
#include <type_traits>

#include "dispatch.cuh"
#include "kernels.h"

namespace {

template <typename T> __global__ void fill_kernel(T *dst, int64_t n, T v) {
    GRID_STRIDE(i, n) dst[i] = v;
}

// Integer to integer directly, keeping the low bits (a double holds only 53
// of an int64's 64 bits); everything else through double, as ops.c does.
template <typename D, typename S> __global__ void cast_kernel(D *dst, const S *src, int64_t n) {
    if constexpr (std::is_integral<D>::value && std::is_integral<S>::value) {
        GRID_STRIDE(i, n) dst[i] = (D)src[i];
    } else {
        GRID_STRIDE(i, n) dst[i] = from_double<D>(to_double(src, i));
    }
}

template <typename S> __global__ void to_bool_kernel(uint8_t *dst, const S *src, int64_t n) {
    GRID_STRIDE(i, n) dst[i] = to_double(src, i) != 0;
}

template <typename T> __global__ void binary_kernel(int op, T *out, const T *a, const T *b, int64_t n) {
    GRID_STRIDE(i, n) out[i] = (T)binary_apply<typename Acc<T>::type>(op, load(a, i), load(b, i));
}

template <typename T> __global__ void scalar_kernel(int op, T *out, const T *a, typename Acc<T>::type s, int64_t n) {
    GRID_STRIDE(i, n) out[i] = (T)binary_apply<typename Acc<T>::type>(op, load(a, i), s);
}

template <typename T> __global__ void nan_to_num_kernel(T *out, const T *x, int64_t n, T nan, T posinf, T neginf) {
    GRID_STRIDE(i, n) {
        T v = x[i];
        out[i] = v != v ? nan : (v == (T)INFINITY ? posinf : (v == (T)-INFINITY ? neginf : v));
    }
}

// 16-bit floats by their bits, as ops.c: r holds the NaN, +inf and -inf replacements.
__global__ void nan_to_num_16_kernel(uint16_t *out, const uint16_t *x, int64_t n, uint16_t inf, uint16_t r0,
                                     uint16_t r1, uint16_t r2) {
    GRID_STRIDE(i, n) {
        uint16_t b = x[i], mag = b & 0x7fffu;
        out[i] = mag > inf ? r0 : (mag == inf ? (b >> 15 ? r2 : r1) : b);
    }
}

// The bits of v rounded to T (through float, as ops.c's ddpc_float_to_16bit).
template <typename T> uint16_t bits16(double v) {
    T h = from_double<T>(v);
    uint16_t b;
    memcpy(&b, &h, 2);
    return b;
}

template <typename D> int cast_from(void *dst, const void *src, int src_dtype, int64_t n, cudaStream_t stream) {
    DDPC_DISPATCH(src_dtype, cast_kernel<D, T><<<grid_for(n, 256), 256, 0, stream>>>((D *)dst, (const T *)src, n))
    return (int)cudaGetLastError();
}

}  // namespace

extern "C" int ddpc_k_fill(void *dst, int dtype, int64_t n, double value, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    DDPC_DISPATCH(dtype, fill_kernel<T><<<grid_for(n, 256), 256, 0, s>>>((T *)dst, n, from_double<T>(value)))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_cast(void *dst, int dst_dtype, const void *src, int src_dtype, int64_t n, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (src_dtype == K_BOOL) src_dtype = K_U8;  // its bytes are its values, 0 and 1
    if (dst_dtype == K_BOOL) {                  // x != 0
        DDPC_DISPATCH(src_dtype, to_bool_kernel<T><<<grid_for(n, 256), 256, 0, s>>>((uint8_t *)dst, (const T *)src, n))
        return (int)cudaGetLastError();
    }
    DDPC_DISPATCH(dst_dtype, return cast_from<T>(dst, src, src_dtype, n, s))
    return 0;
}

extern "C" int ddpc_k_binary(int op, void *out, const void *a, const void *b, int dtype, int64_t n, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    DDPC_DISPATCH(dtype, binary_kernel<T><<<grid_for(n, 256), 256, 0, s>>>(op, (T *)out, (const T *)a, (const T *)b, n))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_scalar(int op, void *out, const void *a, double sv, int dtype, int64_t n, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    DDPC_DISPATCH(dtype, scalar_kernel<T><<<grid_for(n, 256), 256, 0, s>>>(op, (T *)out, (const T *)a,
                                                                            (typename Acc<T>::type)sv, n))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_nan_to_num(void *out, const void *x, int dtype, int64_t n, double nan, double posinf,
                                 double neginf, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    unsigned grid = grid_for(n, 256);
    switch (dtype) {
    case K_F32: nan_to_num_kernel<float><<<grid, 256, 0, s>>>((float *)out, (const float *)x, n, (float)nan,
                                                               (float)posinf, (float)neginf); break;
    case K_F64: nan_to_num_kernel<double><<<grid, 256, 0, s>>>((double *)out, (const double *)x, n, nan, posinf,
                                                                neginf); break;
    case K_F16: nan_to_num_16_kernel<<<grid, 256, 0, s>>>((uint16_t *)out, (const uint16_t *)x, n, 0x7c00u,
                                                          bits16<__half>(nan), bits16<__half>(posinf),
                                                          bits16<__half>(neginf)); break;
    case K_BF16: nan_to_num_16_kernel<<<grid, 256, 0, s>>>((uint16_t *)out, (const uint16_t *)x, n, 0x7f80u,
                                                           bits16<__nv_bfloat16>(nan), bits16<__nv_bfloat16>(posinf),
                                                           bits16<__nv_bfloat16>(neginf)); break;
    default: return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

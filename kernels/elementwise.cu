// Elementwise kernels: fill, cast, binary and scalar arithmetic.
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

template <typename T> __global__ void binary_kernel(int op, T *out, const T *a, const T *b, int64_t n) {
    GRID_STRIDE(i, n) out[i] = (T)binary_apply<typename Acc<T>::type>(op, load(a, i), load(b, i));
}

template <typename T> __global__ void scalar_kernel(int op, T *out, const T *a, typename Acc<T>::type s, int64_t n) {
    GRID_STRIDE(i, n) out[i] = (T)binary_apply<typename Acc<T>::type>(op, load(a, i), s);
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

// Reductions: the sum of all elements, accumulated in double (for integers in
// unsigned 64 bits: exact, and wrapping on overflow like the host loop).
#include <type_traits>

#include "dispatch.cuh"
#include "kernels.h"

namespace {

typedef unsigned long long IntAcc;

// Straight from the element's own arithmetic type: integers never pass through double.
template <typename T, typename A> __device__ __forceinline__ A as_acc(const T *p, int64_t i) { return (A)load(p, i); }

// One block: each thread sums a strided slice, then a shared-memory tree.
template <typename T, typename A, typename O> __global__ void sum_kernel(O *out, const T *a, int64_t n) {
    __shared__ A part[512];
    A acc = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += as_acc<T, A>(a, i);
    part[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        if constexpr (std::is_integral<O>::value) *out = (O)part[0];
        else *out = from_double<O>((double)part[0]);
    }
}

}  // namespace

extern "C" int ddpc_k_sum(void *out, const void *a, int dtype, int64_t n, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    switch (dtype) {
    case K_I32: sum_kernel<int32_t, IntAcc, int64_t><<<1, 512, 0, s>>>((int64_t *)out, (const int32_t *)a, n); break;
    case K_I64: sum_kernel<int64_t, IntAcc, int64_t><<<1, 512, 0, s>>>((int64_t *)out, (const int64_t *)a, n); break;
    case K_U8: sum_kernel<uint8_t, IntAcc, int64_t><<<1, 512, 0, s>>>((int64_t *)out, (const uint8_t *)a, n); break;
    default: DDPC_DISPATCH(dtype, sum_kernel<T, double, T><<<1, 512, 0, s>>>((T *)out, (const T *)a, n))
    }
    return (int)cudaGetLastError();
}

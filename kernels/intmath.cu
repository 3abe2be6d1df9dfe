// gcd and lcm elementwise on the GPU: one thread per pair running kernels.h's
// ddpc_gcd_lcm, the function the host loop of csrc/ops_intmath.c runs.
#include "dispatch.cuh"
#include "kernels.h"

namespace {

template <typename T>
__global__ void gcd_kernel(T *out, const T *a, const T *b, int64_t n, int want_lcm) {
    GRID_STRIDE(k, n) out[k] = (T)ddpc_gcd_lcm((int64_t)a[k], (int64_t)b[k], want_lcm);
}

}  // namespace

extern "C" int ddpc_k_gcd(void *out, const void *a, const void *b, int dtype, int64_t n, int want_lcm,
                          void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    unsigned grid = grid_for(n, 256);
    switch (dtype) {
    case K_U8: gcd_kernel<uint8_t><<<grid, 256, 0, s>>>((uint8_t *)out, (const uint8_t *)a, (const uint8_t *)b, n,
                                                        want_lcm); break;
    case K_I32: gcd_kernel<int32_t><<<grid, 256, 0, s>>>((int32_t *)out, (const int32_t *)a, (const int32_t *)b, n,
                                                         want_lcm); break;
    case K_I64: gcd_kernel<int64_t><<<grid, 256, 0, s>>>((int64_t *)out, (const int64_t *)a, (const int64_t *)b, n,
                                                         want_lcm); break;
    default: return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

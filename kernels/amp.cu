// Gradient unscaling kernel; the contract is in csrc/amp.c.
#include "kernels.h"
#include "nn_common.cuh"

namespace {

// Several threads may write found_inf at once: they all write the same 1.
template <typename T, typename A = typename Acc<T>::type>
__global__ void unscale_kernel(T *g, int64_t n, A inv_scale, float *found_inf) {
    GRID_STRIDE(i, n) {
        A v = load(g, i);
        if (!isfinite(v)) *found_inf = 1.0f;
        g[i] = (T)(v * inv_scale);
    }
}

}  // namespace

extern "C" int ddpc_k_unscale(void *g, int64_t n, int dtype, double inv_scale, void *found_inf, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    ANY_FLOAT_DISPATCH(dtype, {
        typedef typename Acc<T>::type A;
        unscale_kernel<T><<<grid_for(n, 256), 256, 0, s>>>((T *)g, n, (A)inv_scale, (float *)found_inf);
    })
    return (int)cudaGetLastError();
}

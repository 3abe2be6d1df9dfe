// Counter-based random numbers. Element i of a draw is a pure function of
// (seed, offset + i) through ddpc_random_bits (kernels.h), mapped exactly as
// csrc/ops.c maps it on the host:
//   uniform: a + (b - a) * u, u with 24 bits (53 for float64, 11 for float16, 8 for bfloat16),
//            and cap (the dtype's largest value below b) where that rounds up to b or more
//   normal:  Box-Muller on the high (u1 in (0,1]) and low (u2) 32 bits, in double
//   integer: a + floor(u53 * (b - a))
#include <math.h>

#include "dispatch.cuh"
#include "kernels.h"

namespace {

template <typename T>
__global__ void random_kernel(T *dst, int kind, int dtype, uint64_t seed, uint64_t offset, double a, double b,
                              double cap, int64_t n) {
    GRID_STRIDE(i, n) {
        uint64_t bits = ddpc_random_bits(seed, offset + (uint64_t)i);
        double v;
        if (kind == 0 && (dtype == K_F16 || dtype == K_BF16)) {
            v = a + (b - a) * ddpc_uniform_bits(bits, dtype == K_F16 ? 11 : 8);
        } else if (kind == 0) {
            v = dtype == K_F64 ? a + (b - a) * ddpc_uniform_f64(bits) : (double)(float)(a + (b - a) * ddpc_uniform_f32(bits));
        }
        if (kind == 0) {
            if (v > cap && cap >= a) v = cap;
        } else if (kind == 1) {
            double u1 = ((double)(bits >> 32) + 1.0) * (1.0 / 4294967296.0);
            double u2 = (double)(bits & 0xffffffffu) * (1.0 / 4294967296.0);
            v = a + b * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        } else {
            v = a + floor(ddpc_uniform_f64(bits) * (b - a));
        }
        dst[i] = from_double<T>(v);
    }
}

}  // namespace

extern "C" int ddpc_k_random(void *dst, int dtype, int kind, uint64_t seed, uint64_t offset, double a, double b,
                             double cap, int64_t n, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    DDPC_DISPATCH(dtype, random_kernel<T><<<grid_for(n, 256), 256, 0, s>>>((T *)dst, kind, dtype, seed, offset,
                                                                           a, b, cap, n))
    return (int)cudaGetLastError();
}

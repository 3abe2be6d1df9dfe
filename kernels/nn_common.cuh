// Helpers shared by the nn, loss and optimizer kernels.
#pragma once

#include "dispatch.cuh"

// Runs the statements with T bound to float or double; other dtypes are refused.
#define FLOAT_DISPATCH(dtype, ...)                                                 \
    switch (dtype) {                                                               \
    case K_F32: { typedef float T; __VA_ARGS__; } break;                           \
    case K_F64: { typedef double T; __VA_ARGS__; } break;                          \
    default: return (int)cudaErrorInvalidValue;                                    \
    }

// The same over every float type, the 16-bit ones included.
#define ANY_FLOAT_DISPATCH(dtype, ...)                                             \
    switch (dtype) {                                                               \
    case K_F16: { typedef __half T; __VA_ARGS__; } break;                          \
    case K_BF16: { typedef __nv_bfloat16 T; __VA_ARGS__; } break;                  \
    default: FLOAT_DISPATCH(dtype, __VA_ARGS__)                                    \
    }

// Runs the statements with T bound to int32_t, int64_t, uint8_t, float or double.
#define REAL_DISPATCH(dtype, ...)                                                  \
    switch (dtype) {                                                               \
    case K_I32: { typedef int32_t T; __VA_ARGS__; } break;                        \
    case K_I64: { typedef int64_t T; __VA_ARGS__; } break;                        \
    case K_U8: { typedef uint8_t T; __VA_ARGS__; } break;                         \
    default: FLOAT_DISPATCH(dtype, __VA_ARGS__)                                    \
    }

__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ double warp_max(double v) {
    for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over a block of up to 1024 threads; the result is valid in every thread.
__device__ __forceinline__ double block_sum(double v) {
    __shared__ double part[32];
    __shared__ double total;
    v = warp_sum(v);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        double w = lane < (int)((blockDim.x + 31) >> 5) ? part[lane] : 0.0;
        w = warp_sum(w);
        if (lane == 0) total = w;
    }
    __syncthreads();
    return total;
}

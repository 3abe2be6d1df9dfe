// Element-type dispatch and float conversions shared by the CUDA kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>

#include "dtype.h"
#include "scalar_ops.h"

// Must match ddpc_dtype in csrc/dtype.h.
enum { K_F32 = 0, K_F64, K_F16, K_BF16, K_I32, K_I64, K_U8, K_C64, K_C128, K_BOOL };
static_assert(K_F32 == (int)DDPC_FLOAT32 && K_F64 == (int)DDPC_FLOAT64 && K_F16 == (int)DDPC_FLOAT16 &&
                  K_BF16 == (int)DDPC_BFLOAT16 && K_I32 == (int)DDPC_INT32 && K_I64 == (int)DDPC_INT64 &&
                  K_U8 == (int)DDPC_UINT8 && K_C64 == (int)DDPC_COMPLEX64 &&
                  K_C128 == (int)DDPC_COMPLEX128 && K_BOOL == (int)DDPC_BOOL && DDPC_NDTYPES == 10,
              "the kernels' dtype codes are csrc/dtype.h's");

// Loads and stores through float (16-bit floats) or the type's own arithmetic.
template <typename T> struct Acc { typedef T type; };
template <> struct Acc<__half> { typedef float type; };
template <> struct Acc<__nv_bfloat16> { typedef float type; };

template <typename T> __device__ __forceinline__ typename Acc<T>::type load(const T *p, int64_t i) { return p[i]; }
template <> __device__ __forceinline__ float load<__half>(const __half *p, int64_t i) { return __half2float(p[i]); }
template <> __device__ __forceinline__ float load<__nv_bfloat16>(const __nv_bfloat16 *p, int64_t i) {
    return __bfloat162float(p[i]);
}

// a op b for the binary op codes of csrc/ops.h (comparisons give 1 or 0;
// maximum and minimum pass a NaN on through the sum, as the host loops do).
// Integer types take division, POWER and the bitwise ops through
// kernels/scalar_ops.h, as the host loops: INT_MIN / -1 wraps, and the power
// wraps instead of saturating through double. The rounding divisions (23 to
// 26) are scalar_ops.h's on every type.
template <typename A> __device__ __forceinline__ A binary_apply(int op, A a, A b) {
    if constexpr (std::is_integral<A>::value) {
        const int bits = 8 * (int)sizeof(A);
        switch (op) {
        case 3: return (A)ddpc_int_div((int64_t)a, (int64_t)b);
        case 5: return (A)ddpc_int_div((int64_t)b, (int64_t)a);
        case 14: return (A)ddpc_int_pow((int64_t)a, (int64_t)b);
        case 15: return (A)ddpc_int_pow((int64_t)b, (int64_t)a);
        case 16: return (A)(a & b);
        case 17: return (A)(a | b);
        case 18: return (A)(a ^ b);
        case 19: return (A)ddpc_shift_left((int64_t)a, (int64_t)b, bits);
        case 20: return (A)ddpc_shift_right((int64_t)a, (int64_t)b, bits);
        case 21: return (A)ddpc_shift_left((int64_t)b, (int64_t)a, bits);
        case 22: return (A)ddpc_shift_right((int64_t)b, (int64_t)a, bits);
        case 23: return (A)ddpc_fmod_int((int64_t)a, (int64_t)b);
        case 24: return (A)ddpc_remainder_int((int64_t)a, (int64_t)b);
        case 25: return (A)ddpc_div_trunc_int((int64_t)a, (int64_t)b);
        case 26: return (A)ddpc_div_floor_int((int64_t)a, (int64_t)b);
        default: break;
        }
    } else if constexpr (std::is_same<A, double>::value) {
        switch (op) {
        case 23: return ddpc_fmod_f64(a, b);
        case 24: return ddpc_remainder_f64(a, b);
        case 25: return ddpc_div_trunc_f64(a, b);
        case 26: return ddpc_div_floor_f64(a, b);
        case 27: return ddpc_nextafter_f64(a, b);
        default: break;
        }
    } else {  // float, also for the 16-bit types (their Acc)
        switch (op) {
        case 23: return ddpc_fmod_f32(a, b);
        case 24: return ddpc_remainder_f32(a, b);
        case 25: return ddpc_div_trunc_f32(a, b);
        case 26: return ddpc_div_floor_f32(a, b);
        case 27: return ddpc_nextafter_f32(a, b);
        default: break;
        }
    }
    switch (op) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    case 3: return a / b;
    case 4: return b - a;
    case 5: return b / a;
    case 6: return (A)(a == b);
    case 7: return (A)(a != b);
    case 8: return (A)(a < b);
    case 9: return (A)(a <= b);
    case 10: return (A)(a > b);
    case 11: return (A)(a >= b);
    case 12: return a < b ? b : (a >= b ? a : (A)(a + b));
    case 13: return a > b ? b : (a <= b ? a : (A)(a + b));
    case 14: return (A)pow((double)a, (double)b);  // floats, as the host loops: through double
    default: return (A)pow((double)b, (double)a);  // 15; the bitwise ops never reach here (floats are refused)
    }
}

template <typename T> __host__ __device__ __forceinline__ T from_double(double v) { return (T)v; }
template <> __host__ __device__ __forceinline__ __half from_double<__half>(double v) { return __float2half_rn((float)v); }
template <> __host__ __device__ __forceinline__ __nv_bfloat16 from_double<__nv_bfloat16>(double v) {
    return __float2bfloat16_rn((float)v);
}
template <> __host__ __device__ __forceinline__ int32_t from_double<int32_t>(double v) { return (int32_t)(int64_t)v; }
template <> __host__ __device__ __forceinline__ uint8_t from_double<uint8_t>(double v) { return (uint8_t)(int64_t)v; }

template <typename T> __device__ __forceinline__ double to_double(const T *p, int64_t i) { return (double)load(p, i); }

// Calls f.template operator()<T>() for the element type `dtype`. Complex
// dtypes have kernels of their own (kernels/complex.cu): here they are refused,
// as bool is: its launchers pass its bytes as K_U8 or cast to it on their own.
#define DDPC_DISPATCH(dtype, ...)                                                  \
    switch (dtype) {                                                               \
    case K_F32: { typedef float T; __VA_ARGS__; } break;                           \
    case K_F64: { typedef double T; __VA_ARGS__; } break;                          \
    case K_F16: { typedef __half T; __VA_ARGS__; } break;                          \
    case K_BF16: { typedef __nv_bfloat16 T; __VA_ARGS__; } break;                  \
    case K_I32: { typedef int32_t T; __VA_ARGS__; } break;                         \
    case K_I64: { typedef int64_t T; __VA_ARGS__; } break;                         \
    case K_U8: { typedef uint8_t T; __VA_ARGS__; } break;                          \
    default: return (int)cudaErrorInvalidValue;                                    \
    }

static inline unsigned grid_for(int64_t n, unsigned block) {
    int64_t g = (n + block - 1) / block;
    return (unsigned)(g > 65535 * 8 ? 65535 * 8 : (g < 1 ? 1 : g));
}

#define GRID_STRIDE(i, n) for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

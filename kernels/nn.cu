// nn kernels: activations and their gradients, row-broadcast arithmetic,
// sums along a dim, 2-d transpose, strided copies and dropout (float32 and
// float64; row broadcasts also integers, sums along a dim also int64,
// transposes, strided copies and row moves any dtype).
// The formulas match the host loops in csrc/ops_nn.c.
#include <math.h>

#include "index_check.cuh"
#include "kernels.h"
#include "nn_common.cuh"
#include "bessel.h"
#include "special_binary.h"
#include "special_functions.h"

namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kInvSqrtPi = 0.56418958354775628695;
constexpr double kLn2 = 0.69314718055994530942;
constexpr double kLn10 = 2.30258509299404568402;

template <typename T> __global__ void rows_fill_kernel(T *out, const T *row, int64_t total, int64_t n) {
    GRID_STRIDE(i, total) out[i] = row[i % n];
}

template <typename T> __global__ void binary_rows_kernel(int op, T *out, const T *a, const T *row, int64_t total, int64_t n) {
    GRID_STRIDE(i, total) out[i] = binary_apply<T>(op, a[i], row[i % n]);
}

// Element i of geo's shape taken apart over its dims: its offsets at the sa
// and sb strides, and at the sc strides when oc is given.
__device__ __forceinline__ void strided_offsets(int64_t i, const ddpc_k_bcast &geo, int64_t *oa, int64_t *ob,
                                                int64_t *oc = nullptr) {
    int64_t rest = i;
    *oa = 0, *ob = 0;
    if (oc) *oc = 0;
    for (int d = geo.ndim - 1; d >= 0; d--) {
        int64_t k = rest % geo.shape[d];
        rest /= geo.shape[d];
        *oa += k * geo.sa[d], *ob += k * geo.sb[d];
        if (oc) *oc += k * geo.sc[d];
    }
}

// One thread per output element.
template <typename T>
__global__ void binary_broadcast_kernel(int op, T *out, const T *a, const T *b, int64_t n, ddpc_k_bcast geo) {
    GRID_STRIDE(i, n) {
        int64_t oa, ob;
        strided_offsets(i, geo, &oa, &ob);
        out[i] = binary_apply<T>(op, a[oa], b[ob]);
    }
}

template <typename T>
__global__ void special_binary_kernel(int op, T *out, const T *a, const T *b, int64_t n, ddpc_k_bcast geo) {
    GRID_STRIDE(i, n) {
        int64_t oa, ob;
        strided_offsets(i, geo, &oa, &ob);
        out[i] = T(ddpc_special_binary(op, double(a[oa]), double(b[ob]), sizeof(T) == 4));
    }
}

template <typename W>
__global__ void where_kernel(W *out, const uint8_t *cond, const W *a, const W *b, int64_t n, ddpc_k_bcast geo) {
    GRID_STRIDE(i, n) {
        int64_t oa, ob, oc;
        strided_offsets(i, geo, &oa, &ob, &oc);
        out[i] = cond[oc] ? a[oa] : b[ob];
    }
}

// Sums accumulate in A: double for floats, unsigned 64 bits for int64 (exact,
// wrapping on overflow like the host loop).
#define SUM_DISPATCH(dtype, ...)                                                   \
    switch (dtype) {                                                               \
    case K_F32: { typedef float T; typedef double A; __VA_ARGS__; } break;         \
    case K_F64: { typedef double T; typedef double A; __VA_ARGS__; } break;        \
    case K_I64: { typedef int64_t T; typedef unsigned long long A; __VA_ARGS__; } break; \
    default: return (int)cudaErrorInvalidValue;                                    \
    }

// One thread per output element: sums `len` values `inner` apart (coalesced across threads).
template <typename T, typename A>
__global__ void sum_dim_kernel(T *out, const T *a, int64_t outer, int64_t len, int64_t inner) {
    GRID_STRIDE(k, outer * inner) {
        int64_t o = k / inner, i = k % inner;
        const T *src = a + o * len * inner + i;
        A acc = 0;
        for (int64_t l = 0; l < len; l++) acc += (A)src[l * inner];
        out[k] = (T)acc;
    }
}

// One thread per output: the first largest (or smallest) of `len` values
// `inner` apart, a NaN winning (v != v holds for a NaN only), as csrc/ops_nn.c.
template <typename T>
__global__ void extreme_dim_kernel(T *values, int64_t *indices, const T *a, int64_t outer, int64_t len, int64_t inner,
                                   int want_max) {
    GRID_STRIDE(k, outer * inner) {
        const T *src = a + (k / inner) * len * inner + k % inner;
        T best = src[0];
        int64_t at = 0;
        for (int64_t l = 1; l < len && best == best; l++) {
            T v = src[l * inner];
            if (v != v || (want_max ? v > best : v < best)) best = v, at = l;
        }
        values[k] = best;
        indices[k] = at;
    }
}

template <typename T>
__global__ void put_dim_kernel(T *out, const T *g, const int64_t *indices, int64_t outer, int64_t len, int64_t inner,
                               ddpc_k_index_check check) {
    GRID_STRIDE(k, outer * inner) {
        int64_t at = indices[k];
        if (index_in_range(check, at, len)) out[(k / inner) * len * inner + at * inner + k % inner] = g[k];
    }
}

// Rows gathered from (or, with `put`, written into) the table of n rows,
// copied as bytes (any dtype): one thread per byte. A row whose index is
// out of range is left as it was.
__global__ void move_rows_kernel(char *rows, char *table, const int64_t *idx, int64_t k, int64_t n, size_t row,
                                 int put, ddpc_k_index_check check) {
    GRID_STRIDE(i, k * (int64_t)row) {
        int64_t r = i / (int64_t)row, c = i % (int64_t)row, at = idx[r];
        if (!index_in_range(check, at, n)) continue;
        char *t = table + at * (int64_t)row + c;
        if (put) *t = rows[i];
        else rows[i] = *t;
    }
}

template <typename T>
__global__ void index_add_rows_kernel(T *gtable, const T *g, const int64_t *idx, int64_t k, int64_t n, int64_t d,
                                      ddpc_k_index_check check) {
    GRID_STRIDE(i, k * d) {
        int64_t at = idx[i / d];
        if (index_in_range(check, at, n)) atomicAdd(&gtable[at * d + i % d], g[i]);
    }
}

// Layer norm: one block per row, sums in double through block_sum (as the host loop).
template <typename T>
__global__ void layer_norm_kernel(T *y, T *mean, T *rstd, const T *x, const T *w, const T *b, int64_t d, double eps) {
    const T *xr = x + (int64_t)blockIdx.x * d;
    T *yr = y + (int64_t)blockIdx.x * d;
    double s = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) s += (double)xr[j];
    double m = block_sum(s) / (double)d, v = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) v += ((double)xr[j] - m) * ((double)xr[j] - m);
    double rs = 1.0 / sqrt(block_sum(v) / (double)d + eps);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) yr[j] = (T)(((double)xr[j] - m) * rs) * w[j] + b[j];
    if (threadIdx.x == 0) mean[blockIdx.x] = (T)m, rstd[blockIdx.x] = (T)rs;
}

template <typename T>
__global__ void layer_norm_backward_kernel(T *gx, const T *gy, const T *x, const T *mean, const T *rstd, const T *w,
                                           int64_t d) {
    int64_t r = blockIdx.x;
    const T *xr = x + r * d, *gr = gy + r * d;
    double m = mean[r], rs = rstd[r], s1 = 0, s2 = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
        double gw_j = (double)gr[j] * w[j];
        s1 += gw_j, s2 += gw_j * ((double)xr[j] - m) * rs;
    }
    s1 = block_sum(s1), s2 = block_sum(s2);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
        double xhat = ((double)xr[j] - m) * rs;
        gx[r * d + j] = (T)(rs * ((double)gr[j] * w[j] - s1 / (double)d - xhat * s2 / (double)d));
    }
}

// The weight's and bias's gradients: one thread per column, summing down the rows (coalesced across threads).
template <typename T>
__global__ void layer_norm_params_kernel(T *gw, T *gb, const T *gy, const T *x, const T *mean, const T *rstd,
                                         int64_t rows, int64_t d) {
    GRID_STRIDE(j, d) {
        double sw = 0, sb = 0;
        for (int64_t r = 0; r < rows; r++) {
            double g = gy[r * d + j];
            sw += g * ((double)x[r * d + j] - (double)mean[r]) * (double)rstd[r];
            sb += g;
        }
        gw[j] = (T)sw, gb[j] = (T)sb;
    }
}

// Rows summed when inner == 1: one block per output, shared-memory tree.
template <typename T, typename A> __global__ void sum_rows_kernel(T *out, const T *a, int64_t len) {
    __shared__ A part[256];
    const T *src = a + (int64_t)blockIdx.x * len;
    A acc = 0;
    for (int64_t l = threadIdx.x; l < len; l += blockDim.x) acc += (A)src[l];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = (T)part[0];
}

/* 32x32 tiles through shared memory; a block walks down its column of tiles
 * in steps of gridDim.y tiles, so any number of rows fits the grid. */
template <typename T> __global__ void transpose_kernel(T *out, const T *a, int64_t R, int64_t C) {
    __shared__ T tile[32][33];
    int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x, orow = (int64_t)blockIdx.x * 32 + threadIdx.y;
    for (int64_t r0 = (int64_t)blockIdx.y * 32; r0 < R; r0 += (int64_t)gridDim.y * 32) {
        int64_t r = r0 + threadIdx.y, oc = r0 + threadIdx.x;
        for (int k = 0; k < 32; k += 8)
            if (r + k < R && c < C) tile[threadIdx.y + k][threadIdx.x] = a[(r + k) * C + c];
        __syncthreads();
        for (int k = 0; k < 32; k += 8)
            if (orow + k < C && oc < R) out[(orow + k) * R + oc] = tile[threadIdx.x][threadIdx.y + k];
        __syncthreads(); /* the tile is refilled next round */
    }
}

// One thread per element.
template <typename W> __global__ void strided_copy_kernel(W *dst, const W *src, int64_t n, ddpc_k_bcast geo) {
    GRID_STRIDE(i, n) {
        int64_t od, os;
        strided_offsets(i, geo, &od, &os);
        dst[od] = src[os];
    }
}

// log(1 + exp(z)) without overflow, as on the host.
template <typename T> __device__ __forceinline__ T softplus_f(T z) {
    return (z > T(0) ? z : T(0)) + log1p(exp(-fabs(z)));
}

template <typename T> __device__ __forceinline__ T relu6_f(T v) { return v < T(0) ? T(0) : (v > T(6) ? T(6) : v); }

template <typename T> __device__ __forceinline__ T sigmoid_f(T x) { return T(1) / (T(1) + exp(-x)); }

// The op codes of csrc/ops_nn.h; NaN passes through as on the host.
template <typename T> __device__ __forceinline__ T unary_f(int op, T x, T p, T q) {
    switch (op) {
    case 0: return x <= T(0) ? T(0) : x;
    case 1: return T(0.5) * x * (T(1) + erf(x * T(kInvSqrt2)));
    case 2: return tanh(x);
    case 3: return sigmoid_f(x);
    case 4: return exp(x);
    case 5: return log(x);
    case 6: return DDPC_POW_NUMBER(T, x, p);
    case 7: return x > T(0) ? x : x * p;
    case 8: return x <= T(0) ? expm1(x) * p : x;
    case 9: return x * sigmoid_f(x);
    case 10: return x * p > q ? x : softplus_f(x * p) / p;
    case 11: return x * tanh(softplus_f(x));
    case 12: return x < p ? p : (x > q ? q : x);
    case 13: return x * relu6_f(x + T(3)) / T(6);
    case 14: return relu6_f(x + T(3)) / T(6);
    case 15: return fabs(x);
    case 16: return sqrt(x);
    case 17: return T(1) / sqrt(x);
    case 18: return x * x;
    case 19: return sin(x);
    case 20: return cos(x);
    case 21: return log1p(x);
    case 22: return expm1(x);
    case 23: return erf(x);
    case 24: return T(1) / x;
    case 25: return T((x > T(0)) - (x < T(0)));
    case 26: return floor(x);
    case 27: return ceil(x);
    case 28: return trunc(x);
    case 29: {  // half to even; p decimals as on the host
        T scale = pow(T(10), fabs(p));
        return p >= T(0) ? rint(x * scale) / scale : rint(x / scale) * scale;
    }
    case 30: {
        T v = x < p ? p : x;
        return v > q ? q : v;
    }
    case 31: return T(isnan(x) ? 1 : 0);
    case 32: return T(isinf(x) ? 1 : 0);
    case 33: return T(isfinite(x) ? 1 : 0);
    case 34: return log2(x);
    case 35: return log10(x);
    case 36: return exp2(x);
    case 37: return sinh(x);
    case 38: return cosh(x);
    case 39: return asinh(x);
    case 40: return atan(x);
    case 41: return tan(x);
    case 42: return asin(x);
    case 43: return acos(x);
    case 44: return acosh(x);
    case 45: return atanh(x);
    case 46: return erfc(x);
    case 47: return lgamma(x);
    // special_functions.h's, in double, rounded once for float32
    case 48: return T(ddpc_erfinv(double(x)));
    case 49: return T(ddpc_ndtri(double(x)));
    case 50: return T(ddpc_erfcx(double(x)));
    case 51: return T(ddpc_digamma(double(x)));
    case 52: return T(ddpc_polygamma(int(p), double(x)));
    case 53: return T(ddpc_i0(double(x)));
    case 54: return T(ddpc_i0e(double(x)));
    case 55: return T(ddpc_i1(double(x)));
    case 56: return T(ddpc_i1e(double(x)));
    // bessel.h's
    case 57: return T(ddpc_bessel_j0(double(x)));
    case 58: return T(ddpc_bessel_j1(double(x)));
    case 59: return T(ddpc_bessel_y0(double(x)));
    case 60: return T(ddpc_bessel_y1(double(x)));
    case 61: return T(ddpc_bessel_k0(double(x)));
    case 62: return T(ddpc_bessel_k1(double(x)));
    case 63: return T(ddpc_bessel_k0e(double(x)));
    case 64: return T(ddpc_bessel_k1e(double(x)));
    case 65: return T(ddpc_spherical_bessel_j0(double(x)));
    default: return T(ddpc_airy_ai(double(x)));
    }
}

// The derivative at a kink is PyTorch's, as on the host.
template <typename T> __device__ __forceinline__ T unary_grad(int op, T g, T s, T p, T q) {
    switch (op) {
    case 0: return s <= T(0) ? T(0) : g;
    case 1: {
        T cdf = T(0.5) * (T(1) + erf(s * T(kInvSqrt2)));
        T pdf = T(kInvSqrt2Pi) * exp(T(-0.5) * s * s);
        return g * (cdf + s * pdf);
    }
    case 2: return g * (T(1) - s * s);
    case 3: return g * s * (T(1) - s);
    case 4: return g * s;
    case 5: return g / s;
    case 6: return p == T(0) ? T(0) : g * p * DDPC_POW_NUMBER(T, s, p - T(1));
    case 7: return s > T(0) ? g : g * p;
    case 8: return s <= T(0) ? g * p * exp(s) : g;
    case 9: {
        T sg = sigmoid_f(s);
        return g * sg * (T(1) + s * (T(1) - sg));
    }
    case 10: return s * p > q ? g : g * sigmoid_f(s * p);
    case 11: {
        T t = tanh(softplus_f(s)), sg = sigmoid_f(s);
        return g * (t + s * sg * (T(1) - t * t));
    }
    case 12: return s <= p || s >= q ? T(0) : g;
    case 13: return s <= T(-3) ? T(0) : (s < T(3) ? g * (s / T(3) + T(0.5)) : g);
    case 14: return s > T(-3) && s < T(3) ? g / T(6) : T(0);
    case 15: return s > T(0) ? g : (s < T(0) ? -g : T(0));
    case 16: return g / (T(2) * s);
    case 17: return T(-0.5) * g * s * s * s;
    case 18: return T(2) * g * s;
    case 19: return g * cos(s);
    case 20: return -g * sin(s);
    case 21: return g / (T(1) + s);
    case 22: return g * (s + T(1));
    case 23: return g * T(2 * kInvSqrtPi) * exp(-s * s);
    case 24: return -g * s * s;
    case 30: return s > p && s < q ? g : T(0);
    case 34: return g / (s * T(kLn2));
    case 35: return g / (s * T(kLn10));
    case 36: return g * s * T(kLn2);
    case 37: return g * cosh(s);
    case 38: return g * sinh(s);
    case 39: return g / sqrt(s * s + T(1));
    case 40: return g / (s * s + T(1));
    case 41: return g * (s * s + T(1));
    case 42: return g / sqrt(T(1) - s * s);
    case 43: return -g / sqrt(T(1) - s * s);
    case 44: return g / sqrt(s * s - T(1));
    case 45: return g / (T(1) - s * s);
    case 46: return -g * T(2 * kInvSqrtPi) * exp(-s * s);
    case 47: return g * T(ddpc_digamma(double(s)));
    case 48: return g * T(0.5 / kInvSqrtPi) * exp(s * s);
    case 49: return g * T(1 / kInvSqrt2Pi) * exp(s * s / T(2));
    case 50: return g * T(ddpc_erfcx_derivative(double(s)));
    case 51: return g * T(ddpc_polygamma(1, double(s)));
    case 52: return g * T(ddpc_polygamma(int(p) + 1, double(s)));
    case 53: return g * T(ddpc_i1(double(s)));
    case 54: return g * T(ddpc_i0e_derivative(double(s)));
    case 55: return g * T(ddpc_i1_derivative(double(s)));
    case 56: return g * T(ddpc_i1e_derivative(double(s)));
    case 57: return -g * T(ddpc_bessel_j1(double(s)));
    case 58: return g * T(ddpc_bessel_j1_derivative(double(s)));
    case 59: return -g * T(ddpc_bessel_y1(double(s)));
    case 60: return g * T(ddpc_bessel_y1_derivative(double(s)));
    case 61: return -g * T(ddpc_bessel_k1(double(s)));
    case 62: return g * T(ddpc_bessel_k1_derivative(double(s)));
    default: return T(0);  // piecewise constant: sign, floor, ceil, trunc, round, the predicates
    }
}

template <typename T> __global__ void unary_kernel(int op, T *out, const T *x, T p, T q, int64_t n) {
    GRID_STRIDE(i, n) out[i] = unary_f<T>(op, x[i], p, q);
}

template <typename T>
__global__ void unary_backward_kernel(int op, T *gx, const T *gy, const T *s, T p, T q, int64_t n) {
    GRID_STRIDE(i, n) gx[i] = unary_grad<T>(op, gy[i], s[i], p, q);
}

template <typename T>
__global__ void dropout_kernel(T *out, const T *x, float p, T scale, uint64_t seed, uint64_t offset, int64_t n) {
    GRID_STRIDE(i, n) out[i] = ddpc_uniform_f32(ddpc_random_bits(seed, offset + (uint64_t)i)) >= p ? x[i] * scale : T(0);
}

}  // namespace

extern "C" int ddpc_k_rows_fill(void *out, const void *row, int dtype, int64_t rows, int64_t n, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    FLOAT_DISPATCH(dtype, rows_fill_kernel<T><<<grid_for(rows * n, 256), 256, 0, s>>>((T *)out, (const T *)row, rows * n, n))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_binary_rows(int op, void *out, const void *a, const void *row, int dtype, int64_t numel, int64_t n,
                                  void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    // Floats and integers, as on the host (which refuses integer division before launching).
    REAL_DISPATCH(dtype, binary_rows_kernel<T><<<grid_for(numel, 256), 256, 0, s>>>(op, (T *)out, (const T *)a,
                                                                               (const T *)row, numel, n))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_binary_broadcast(int op, void *out, const void *a, const void *b, int dtype, int64_t n,
                                       ddpc_k_bcast geo, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    REAL_DISPATCH(dtype, binary_broadcast_kernel<T><<<grid_for(n, 256), 256, 0, s>>>(op, (T *)out, (const T *)a,
                                                                                   (const T *)b, n, geo))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_special_binary(int op, void *out, const void *a, const void *b, int dtype, int64_t n,
                                     ddpc_k_bcast geo, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    FLOAT_DISPATCH(dtype, special_binary_kernel<T><<<grid_for(n, 256), 256, 0, s>>>(op, (T *)out, (const T *)a,
                                                                                  (const T *)b, n, geo))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_where(void *out, const void *cond, const void *a, const void *b, int size, int64_t n,
                            ddpc_k_bcast geo, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
#define WHERE_AS(W) where_kernel<W><<<grid_for(n, 256), 256, 0, s>>>((W *)out, (const uint8_t *)cond, (const W *)a, \
                                                                     (const W *)b, n, geo)
    switch (size) {
    case 1: WHERE_AS(uint8_t); break;
    case 2: WHERE_AS(uint16_t); break;
    case 4: WHERE_AS(uint32_t); break;
    case 8: WHERE_AS(uint64_t); break;
    default: return (int)cudaErrorInvalidValue;
    }
#undef WHERE_AS
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_sum_dim(void *out, const void *a, int dtype, int64_t outer, int64_t len, int64_t inner,
                              void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (inner == 1 && outer <= 65535 * 8) {
        SUM_DISPATCH(dtype, sum_rows_kernel<T, A><<<(unsigned)outer, 256, 0, s>>>((T *)out, (const T *)a, len))
    } else {
        SUM_DISPATCH(dtype, sum_dim_kernel<T, A><<<grid_for(outer * inner, 256), 256, 0, s>>>((T *)out, (const T *)a,
                                                                                                outer, len, inner))
    }
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_extreme_dim(void *values, void *indices, const void *a, int dtype, int64_t outer, int64_t len,
                                  int64_t inner, int want_max, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    REAL_DISPATCH(dtype, extreme_dim_kernel<T><<<grid_for(outer * inner, 256), 256, 0, s>>>(
                             (T *)values, (int64_t *)indices, (const T *)a, outer, len, inner, want_max))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_put_dim(void *out, const void *g, const void *indices, int dtype, int64_t outer, int64_t len,
                              int64_t inner, ddpc_k_index_check check, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    int rc = ddpc_k_fill(out, dtype, outer * len * inner, 0.0, stream);
    if (rc) return rc;
    FLOAT_DISPATCH(dtype, put_dim_kernel<T><<<grid_for(outer * inner, 256), 256, 0, s>>>((T *)out, (const T *)g,
                                                                                       (const int64_t *)indices,
                                                                                       outer, len, inner, check))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_move_rows(void *rows, void *table, const void *idx, int64_t k, int64_t n, size_t row_bytes,
                                int put, ddpc_k_index_check check, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    move_rows_kernel<<<grid_for(k * (int64_t)row_bytes, 256), 256, 0, s>>>(
        (char *)rows, (char *)table, (const int64_t *)idx, k, n, row_bytes, put, check);
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_index_add_rows(void *gtable, const void *g, const void *idx, int dtype, int64_t k, int64_t n,
                                     int64_t d, ddpc_k_index_check check, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    FLOAT_DISPATCH(dtype, index_add_rows_kernel<T><<<grid_for(k * d, 256), 256, 0, s>>>(
                              (T *)gtable, (const T *)g, (const int64_t *)idx, k, n, d, check))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_layer_norm(void *y, void *mean, void *rstd, const void *x, const void *w, const void *b,
                                 int dtype, int64_t rows, int64_t d, double eps, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (rows > 2147483647) return (int)cudaErrorInvalidConfiguration;
    FLOAT_DISPATCH(dtype, layer_norm_kernel<T><<<(unsigned)rows, 256, 0, s>>>((T *)y, (T *)mean, (T *)rstd,
                                                                              (const T *)x, (const T *)w,
                                                                              (const T *)b, d, eps))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_layer_norm_backward(void *gx, void *gw, void *gb, const void *gy, const void *x,
                                          const void *mean, const void *rstd, const void *w, int dtype, int64_t rows,
                                          int64_t d, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (rows > 2147483647) return (int)cudaErrorInvalidConfiguration;
    if (rows > 0) {
        FLOAT_DISPATCH(dtype, layer_norm_backward_kernel<T><<<(unsigned)rows, 256, 0, s>>>(
                                  (T *)gx, (const T *)gy, (const T *)x, (const T *)mean, (const T *)rstd,
                                  (const T *)w, d))
    }
    FLOAT_DISPATCH(dtype, layer_norm_params_kernel<T><<<grid_for(d, 256), 256, 0, s>>>(
                              (T *)gw, (T *)gb, (const T *)gy, (const T *)x, (const T *)mean, (const T *)rstd, rows, d))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_transpose(void *out, const void *a, int dtype, int64_t rows, int64_t cols, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if ((cols + 31) / 32 > 2147483647) return (int)cudaErrorInvalidConfiguration;
    int64_t row_tiles = (rows + 31) / 32;
    dim3 grid((unsigned)((cols + 31) / 32), (unsigned)(row_tiles < 65535 ? row_tiles : 65535)), block(32, 8);
    // Any dtype: elements move as unsigned words of their size.
#define TRANSPOSE_AS(W) transpose_kernel<W><<<grid, block, 0, s>>>((W *)out, (const W *)a, rows, cols)
    switch (dtype) {
    case K_U8:
    case K_BOOL: TRANSPOSE_AS(uint8_t); break;
    case K_F16:
    case K_BF16: TRANSPOSE_AS(uint16_t); break;
    case K_F32:
    case K_I32: TRANSPOSE_AS(uint32_t); break;
    case K_F64:
    case K_I64:
    case K_C64: TRANSPOSE_AS(uint64_t); break;
    case K_C128: TRANSPOSE_AS(ddpc_word16); break;
    default: return (int)cudaErrorInvalidValue;
    }
#undef TRANSPOSE_AS
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_strided_copy(void *dst, const void *src, int size, int64_t n, ddpc_k_bcast geo, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
#define STRIDED_AS(W) strided_copy_kernel<W><<<grid_for(n, 256), 256, 0, s>>>((W *)dst, (const W *)src, n, geo)
    switch (size) {
    case 1: STRIDED_AS(uint8_t); break;
    case 2: STRIDED_AS(uint16_t); break;
    case 4: STRIDED_AS(uint32_t); break;
    case 8: STRIDED_AS(uint64_t); break;
    case 16: STRIDED_AS(ddpc_word16); break;
    default: return (int)cudaErrorInvalidValue;
    }
#undef STRIDED_AS
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_unary(int op, void *out, const void *x, double p, double q, int dtype, int64_t n, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    FLOAT_DISPATCH(dtype, unary_kernel<T><<<grid_for(n, 256), 256, 0, s>>>(op, (T *)out, (const T *)x, (T)p, (T)q, n))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_unary_backward(int op, void *gx, const void *gy, const void *saved, double p, double q,
                                     int dtype, int64_t n, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    FLOAT_DISPATCH(dtype, unary_backward_kernel<T><<<grid_for(n, 256), 256, 0, s>>>(
                              op, (T *)gx, (const T *)gy, (const T *)saved, (T)p, (T)q, n))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_dropout(void *out, const void *x, double p, uint64_t seed, uint64_t offset, int dtype, int64_t n,
                              void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    FLOAT_DISPATCH(dtype, dropout_kernel<T><<<grid_for(n, 256), 256, 0, s>>>(
                              (T *)out, (const T *)x, (float)p, p < 1 ? (T)(1.0 / (1.0 - p)) : T(0), seed, offset, n))
    return (int)cudaGetLastError();
}

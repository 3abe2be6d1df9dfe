// Kernels along one dim: running or total sums, products and logsumexps (one
// thread per line), and gather / scatter / scatter-reduce through an index
// (one thread per index element).
// The formulas match the host loops in csrc/ops_dim.c.
#include <type_traits>

#include "index_check.cuh"
#include "kernels.h"
#include "nn_common.cuh"
#include "scalar_ops.h"

namespace {

// One thread per line of `len` values `inner` apart (coalesced across threads);
// A accumulates: double for floats, unsigned 64 bits for int64 (wrapping as the
// host loop). op is a ddpc_fold_op: 0 sum, 1 product, 2 logsumexp (floats only).
template <typename T, typename A>
__global__ void fold_dim_kernel(T *out, const T *a, int64_t outer, int64_t len, int64_t inner, int op, int flags) {
    const bool cumulative = flags & 1, reverse = flags & 2, exclusive = flags & 4;
    GRID_STRIDE(k, outer * inner) {
        int64_t base = (k / inner) * len * inner + k % inner;
        A acc = (A)(op == 1 ? 1 : 0);
        if constexpr (std::is_floating_point<A>::value)
            if (op == 2) acc = -INFINITY;
        for (int64_t s = 0; s < len; s++) {
            int64_t at = base + (reverse ? len - 1 - s : s) * inner;
            if (cumulative && exclusive) out[at] = (T)acc;
            if (op == 1) acc = acc * (A)a[at];
            else if (op == 0) acc = acc + (A)a[at];
            else if constexpr (std::is_floating_point<A>::value) acc = ddpc_log_add_exp(acc, (A)a[at]);
            if (cumulative && !exclusive) out[at] = (T)acc;
        }
        if (!cumulative) out[k] = (T)acc;
    }
}

__device__ __forceinline__ void atomic_add(float *p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(double *p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(int64_t *p, int64_t v) {
    atomicAdd((unsigned long long *)p, (unsigned long long)v);
}

// Where element k of the index (and of `small`) lands: its offset in `big`,
// with index value `at` in place of its coordinate along dim, and in `small`.
__device__ __forceinline__ void index_offsets(int64_t k, const ddpc_k_bcast &geo, int dim, int64_t at, int64_t *ob,
                                              int64_t *os) {
    int64_t rest = k;
    *ob = 0, *os = 0;
    for (int d = geo.ndim - 1; d >= 0; d--) {
        int64_t c = rest % geo.shape[d];
        rest /= geo.shape[d];
        *ob += (d == dim ? at : c) * geo.sa[d], *os += c * geo.sb[d];
    }
}

template <typename T>
__global__ void index_dim_kernel(T *big, T *small, const int64_t *index, int64_t n, ddpc_k_bcast geo, int dim,
                                 int64_t len, int mode, ddpc_k_index_check check) {
    GRID_STRIDE(k, n) {
        int64_t at = index[k];
        if (!index_in_range(check, at, len, dim)) continue;
        int64_t ob, os;
        index_offsets(k, geo, dim, at, &ob, &os);
        if (mode == DDPC_K_GATHER) small[os] = big[ob];
        else big[ob] = small[os];
    }
}

template <typename T>
__global__ void index_add_dim_kernel(T *big, const T *small, const int64_t *index, int64_t n, ddpc_k_bcast geo,
                                     int dim, int64_t len, ddpc_k_index_check check) {
    GRID_STRIDE(k, n) {
        int64_t at = index[k];
        if (!index_in_range(check, at, len, dim)) continue;
        int64_t ob, os;
        index_offsets(k, geo, dim, at, &ob, &os);
        atomic_add(&big[ob], small[os]);
    }
}

// Read-modify-write of one element through compare-and-swap on its bits, so
// that a product or a NaN-aware extreme can be combined atomically.
template <int W> struct CasWord;
template <> struct CasWord<4> { typedef unsigned int type; };
template <> struct CasWord<8> { typedef unsigned long long type; };

// a op b as ops_dim.c's SCATTER_COMBINE: op 0 product, 1 max, 2 min, a NaN winning.
template <typename T> __device__ __forceinline__ T scatter_combine(int op, T a, T b) {
    if (op == 0) return a * b;
    if (a != a) return a;
    if (b != b) return b;
    return op == 1 ? (b > a ? b : a) : (b < a ? b : a);
}

template <typename T> __device__ __forceinline__ void atomic_combine(T *p, T v, int op) {
    typedef typename CasWord<sizeof(T)>::type B;
    B *addr = (B *)p, old = *addr, assumed;
    do {
        assumed = old;
        T cur, next;
        memcpy(&cur, &assumed, sizeof(T));
        next = scatter_combine(op, cur, v);
        B bits;
        memcpy(&bits, &next, sizeof(T));
        if (bits == assumed) return;
        old = atomicCAS(addr, assumed, bits);
    } while (old != assumed);
}

// Products of integers wrap: they multiply as unsigned words.
template <typename T> struct Wrapping { typedef T type; };
template <> struct Wrapping<int32_t> { typedef uint32_t type; };
template <> struct Wrapping<int64_t> { typedef unsigned long long type; };

template <typename T>
__global__ void scatter_reduce_dim_kernel(T *big, const T *small, const int64_t *index, int64_t n, ddpc_k_bcast geo,
                                          int dim, int64_t len, int op, ddpc_k_index_check check) {
    typedef typename Wrapping<T>::type U;
    GRID_STRIDE(k, n) {
        int64_t at = index[k];
        if (!index_in_range(check, at, len, dim)) continue;
        int64_t ob, os;
        index_offsets(k, geo, dim, at, &ob, &os);
        if (op == 0) atomic_combine((U *)&big[ob], (U)small[os], 0);
        else atomic_combine(&big[ob], small[os], op);
    }
}

}  // namespace

extern "C" int ddpc_k_fold_dim(void *out, const void *a, int dtype, int64_t outer, int64_t len, int64_t inner,
                               int op, int flags, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    unsigned grid = grid_for(outer * inner, 256);
    switch (dtype) {
    case K_F32:  // a product that is not a running one multiplies in float32, as on the host (csrc/ops_dim.h)
        if (op == 1 && !(flags & 1))
            fold_dim_kernel<float, float><<<grid, 256, 0, s>>>((float *)out, (const float *)a, outer, len, inner, op,
                                                                flags);
        else
            fold_dim_kernel<float, double><<<grid, 256, 0, s>>>((float *)out, (const float *)a, outer, len, inner, op,
                                                                 flags);
        break;
    case K_F64: fold_dim_kernel<double, double><<<grid, 256, 0, s>>>((double *)out, (const double *)a, outer, len,
                                                                       inner, op, flags); break;
    case K_I64: fold_dim_kernel<int64_t, unsigned long long><<<grid, 256, 0, s>>>((int64_t *)out, (const int64_t *)a,
                                                                                   outer, len, inner, op, flags);
        break;
    default: return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_index_dim(void *big, void *small, const int64_t *index, int dtype, int64_t n, ddpc_k_bcast geo,
                                int dim, int64_t len, int mode, ddpc_k_index_check check, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    unsigned grid = grid_for(n, 256);
    if (mode == DDPC_K_SCATTER_ADD) {
        switch (dtype) {
        case K_F32: index_add_dim_kernel<float><<<grid, 256, 0, s>>>((float *)big, (const float *)small, index, n, geo,
                                                                      dim, len, check); break;
        case K_F64: index_add_dim_kernel<double><<<grid, 256, 0, s>>>((double *)big, (const double *)small, index, n,
                                                                       geo, dim, len, check); break;
        case K_I64: index_add_dim_kernel<int64_t><<<grid, 256, 0, s>>>((int64_t *)big, (const int64_t *)small, index,
                                                                        n, geo, dim, len, check); break;
        default: return (int)cudaErrorInvalidValue;
        }
        return (int)cudaGetLastError();
    }
    // Gathers and plain scatters move elements as unsigned words of their size.
    switch (dtype) {
    case K_U8: case K_BOOL:
        index_dim_kernel<uint8_t><<<grid, 256, 0, s>>>((uint8_t *)big, (uint8_t *)small, index, n, geo, dim, len,
                                                       mode, check); break;
    case K_F16: case K_BF16:
        index_dim_kernel<uint16_t><<<grid, 256, 0, s>>>((uint16_t *)big, (uint16_t *)small, index, n, geo, dim, len,
                                                        mode, check); break;
    case K_F32: case K_I32:
        index_dim_kernel<uint32_t><<<grid, 256, 0, s>>>((uint32_t *)big, (uint32_t *)small, index, n, geo, dim, len,
                                                        mode, check); break;
    default:
        index_dim_kernel<uint64_t><<<grid, 256, 0, s>>>((uint64_t *)big, (uint64_t *)small, index, n, geo, dim, len,
                                                        mode, check); break;
    }
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_scatter_reduce_dim(void *big, const void *small, const int64_t *index, int dtype, int64_t n,
                                         ddpc_k_bcast geo, int dim, int64_t len, int op, ddpc_k_index_check check,
                                         void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    unsigned grid = grid_for(n, 256);
    switch (dtype) {
    case K_F32: scatter_reduce_dim_kernel<float><<<grid, 256, 0, s>>>((float *)big, (const float *)small, index, n,
                                                                       geo, dim, len, op, check); break;
    case K_F64: scatter_reduce_dim_kernel<double><<<grid, 256, 0, s>>>((double *)big, (const double *)small, index,
                                                                        n, geo, dim, len, op, check); break;
    case K_I32: scatter_reduce_dim_kernel<int32_t><<<grid, 256, 0, s>>>((int32_t *)big, (const int32_t *)small,
                                                                         index, n, geo, dim, len, op, check); break;
    case K_I64: scatter_reduce_dim_kernel<int64_t><<<grid, 256, 0, s>>>((int64_t *)big, (const int64_t *)small,
                                                                         index, n, geo, dim, len, op, check); break;
    default: return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

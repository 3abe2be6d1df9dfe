// Embedding bag kernels (float32 and float64): the bags' sums, means and
// maxima, the table's gradient and the per-sample weights' gradient, with the
// rules of the host loops in csrc/ops_embedding.c.
#include "index_check.cuh"
#include "kernels.h"
#include "nn_common.cuh"

namespace {

// Offsets clamped into [0, n] and made non-decreasing from bag to bag, so
// that malformed offsets read nothing outside the indices.
__device__ inline void bag_range(const ddpc_k_bags &b, int64_t bag, int64_t *lo, int64_t *hi) {
    int64_t a = b.offsets[bag], z = b.offsets[bag + 1];
    *lo = a < 0 ? 0 : (a > b.n ? b.n : a);
    *hi = z < *lo ? *lo : (z > b.n ? b.n : z);
}

// Whether row r counts in its bag: not the padding, and within the table
// (check_bags reports the indices outside it).
__device__ inline bool counts(const ddpc_k_bags &b, int64_t r) {
    return r != b.padding_idx && r >= 0 && r < b.rows;
}

// Reports what the host op refuses: an index outside the table, offsets
// that do not start at 0, decrease, or end past the indices. The threads of
// the grid share the work, each index and each bag's offsets looked at once
// (the launches have a thread per index where they can: blocks_for).
__device__ void check_bags(const ddpc_k_bags &b, ddpc_k_index_check check) {
    GRID_STRIDE(i, b.n) index_in_range(check, b.indices[i], b.rows);
    GRID_STRIDE(bag, b.bags) {
        int64_t a = b.offsets[bag], z = b.offsets[bag + 1];
        if (bag == 0 && a != 0) record_index_error(check, DDPC_INDEX_BAD_FIRST_OFFSET, a, 0, 0, 0);
        if (z < a) record_index_error(check, DDPC_INDEX_BAD_OFFSET_ORDER, z, 0, bag + 1, a);
        if (bag == b.bags - 1 && z > b.n) record_index_error(check, DDPC_INDEX_BAD_LAST_OFFSET, z, b.n, bag + 1, 0);
    }
}

// One thread per output element (bag, k).
template <typename T>
__global__ void bag_kernel(T *out, int64_t *argmax, const T *w, ddpc_k_bags b, ddpc_k_index_check check) {
    const T *scale = (const T *)b.weights;
    check_bags(b, check);
    GRID_STRIDE(t, b.bags * b.d) {
        int64_t bag = t / b.d, k = t % b.d, lo, hi, count = 0, at = -1;
        bag_range(b, bag, &lo, &hi);
        T acc = T(0);
        for (int64_t i = lo; i < hi; i++) {
            int64_t r = b.indices[i];
            if (!counts(b, r)) continue;
            T v = w[r * b.d + k];
            if (b.mode == DDPC_BAG_MAX) {
                if (!count || v > acc) acc = v, at = r;
            } else {
                acc += (scale ? scale[i] : T(1)) * v;
            }
            count++;
        }
        if (b.mode == DDPC_BAG_MEAN && count > 1) acc /= T(count);
        out[t] = acc;
        if (argmax) argmax[t] = at;
    }
}

// One thread per output gradient element (bag, k), added to the rows of its bag (bags share rows: atomics).
template <typename T>
__global__ void bag_backward_kernel(T *gw, const T *g, const int64_t *argmax, ddpc_k_bags b,
                                    ddpc_k_index_check check) {
    const T *scale = (const T *)b.weights;
    check_bags(b, check);
    GRID_STRIDE(t, b.bags * b.d) {
        int64_t bag = t / b.d, k = t % b.d, lo, hi;
        if (b.mode == DDPC_BAG_MAX) {  // argmax -1: an empty bag, whose maximum came from no row
            int64_t r = argmax[t];
            if ((uint64_t)r < (uint64_t)b.rows) atomicAdd(&gw[r * b.d + k], g[t]);
            else if (r != -1) record_index_error(check, DDPC_INDEX_BAD_ARGMAX, r, b.rows, 0, 0);
            continue;
        }
        bag_range(b, bag, &lo, &hi);
        int64_t count = 0;
        for (int64_t i = lo; b.mode == DDPC_BAG_MEAN && i < hi; i++) count += counts(b, b.indices[i]);
        const T share = g[t] / T(count > 1 ? count : 1);
        for (int64_t i = lo; i < hi; i++) {
            int64_t r = b.indices[i];
            if (counts(b, r)) atomicAdd(&gw[r * b.d + k], scale ? scale[i] * g[t] : share);
        }
    }
}

// One thread per entry: its bag found by binary search over the offsets, then a dot product.
template <typename T>
__global__ void bag_weights_backward_kernel(T *gs, const T *g, const T *w, ddpc_k_bags b, ddpc_k_index_check check) {
    check_bags(b, check);
    GRID_STRIDE(i, b.n) {
        int64_t lo = 0, hi = b.bags;  // the last bag whose start is <= i
        while (lo < hi) {
            int64_t mid = (lo + hi + 1) / 2;
            if (b.offsets[mid] <= i) lo = mid;
            else hi = mid - 1;
        }
        int64_t start = 0, end = 0, r = b.indices[i];
        if (lo < b.bags) bag_range(b, lo, &start, &end);  // entries past the last bag belong to none
        double dot = 0;
        if (i >= start && i < end && counts(b, r))
            for (int64_t k = 0; k < b.d; k++) dot += (double)w[r * b.d + k] * (double)g[lo * b.d + k];
        gs[i] = (T)dot;
    }
}

// The blocks of a launch over `total` units: a thread per unit, and at
// least one per index, for check_bags.
unsigned blocks_for(const ddpc_k_bags &b, int64_t total) { return grid_for(total > b.n ? total : b.n, 256); }

}  // namespace

extern "C" int ddpc_k_embedding_bag(void *out, int64_t *argmax, const void *weight, int dtype, ddpc_k_bags b,
                                    ddpc_k_index_check check, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    int64_t total = b.bags * b.d;
    FLOAT_DISPATCH(dtype, bag_kernel<T><<<blocks_for(b, total), 256, 0, s>>>((T *)out, argmax, (const T *)weight, b,
                                                                              check))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_embedding_bag_backward(void *gweight, const void *g, const int64_t *argmax, int dtype,
                                             ddpc_k_bags b, ddpc_k_index_check check, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    int rc = ddpc_k_fill(gweight, dtype, b.rows * b.d, 0.0, stream);
    if (rc) return rc;
    int64_t total = b.bags * b.d;
    if (total == 0) return 0;
    FLOAT_DISPATCH(dtype, bag_backward_kernel<T><<<blocks_for(b, total), 256, 0, s>>>((T *)gweight, (const T *)g,
                                                                                       argmax, b, check))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_embedding_bag_weights_backward(void *gweights, const void *g, const void *weight, int dtype,
                                                     ddpc_k_bags b, ddpc_k_index_check check, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    FLOAT_DISPATCH(dtype, bag_weights_backward_kernel<T><<<grid_for(b.n, 256), 256, 0, s>>>(
                              (T *)gweights, (const T *)g, (const T *)weight, b, check))
    return (int)cudaGetLastError();
}

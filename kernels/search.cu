// Binary search and running extremes on the GPU: one thread per value for
// searchsorted, one per line for cummax / cummin (threads of neighbouring
// lines read neighbouring elements when the dim is not the last). The
// per-element rules are kernels.h's, shared with the host loops of
// csrc/ops_search.c, so both give the same positions and indices.
#include "dispatch.cuh"
#include "index_check.cuh"
#include "kernels.h"

namespace {

// The searches read a few sorter entries each (clamped into the line); the
// threads also look at every entry once, so that the kernel reports any the
// host op refuses.
__global__ void searchsorted_kernel(void *out, int out_int32, const void *sorted, const int64_t *sorter,
                                    const void *values, int dtype, int width, int64_t n, int64_t per_line,
                                    int64_t len, int shared, int right, int64_t sorter_n, ddpc_k_index_check check) {
    GRID_STRIDE(i, sorter_n) index_in_range(check, sorter[i], len);
    GRID_STRIDE(k, n) {
        int64_t line = shared ? 0 : k / per_line;
        int64_t at = ddpc_search_sorted((const char *)sorted + line * len * width, sorter ? sorter + line * len : NULL,
                                        dtype, width, len, ddpc_load_word(values, width, k), right);
        if (out_int32) ((int32_t *)out)[k] = (int32_t)at;
        else ((int64_t *)out)[k] = at;
    }
}

__global__ void cum_extreme_kernel(void *values, int64_t *indices, const void *a, int dtype, int width,
                                   int64_t outer, int64_t len, int64_t inner, int want_max) {
    GRID_STRIDE(line, outer * inner) {
        int64_t base = (line / inner) * len * inner + line % inner, best_at = 0;
        uint64_t best_word = ddpc_load_word(a, width, base), best = ddpc_sort_key(dtype, best_word);
        for (int64_t s = 0; s < len; s++) {
            int64_t at = base + s * inner;
            uint64_t word = ddpc_load_word(a, width, at), key = ddpc_sort_key(dtype, word);
            if (ddpc_cum_extreme_takes(dtype, key, best, want_max)) best = key, best_word = word, best_at = s;
            ddpc_store_word(values, width, at, best_word);
            indices[at] = best_at;
        }
    }
}

__host__ int dtype_width(int dtype) {
    switch (dtype) {
    case K_U8: return 1;
    case K_F16: case K_BF16: return 2;
    case K_F32: case K_I32: return 4;
    case K_F64: case K_I64: return 8;
    default: return 0;
    }
}

}  // namespace

extern "C" int ddpc_k_searchsorted(void *out, int out_int32, const void *sorted, const int64_t *sorter,
                                   const void *values, int dtype, int64_t n, int64_t per_line, int64_t len, int shared,
                                   int right, ddpc_k_index_check check, void *stream) {
    int width = dtype_width(dtype);
    if (!width) return (int)cudaErrorInvalidValue;
    int64_t sorter_n = sorter ? (shared ? 1 : n / per_line) * len : 0;
    searchsorted_kernel<<<grid_for(n > sorter_n ? n : sorter_n, 256), 256, 0, (cudaStream_t)stream>>>(
        out, out_int32, sorted, sorter, values, dtype, width, n, per_line, len, shared, right, sorter_n, check);
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_cum_extreme(void *values, int64_t *indices, const void *a, int dtype, int64_t outer,
                                  int64_t len, int64_t inner, int want_max, void *stream) {
    int width = dtype_width(dtype);
    if (!width) return (int)cudaErrorInvalidValue;
    cum_extreme_kernel<<<grid_for(outer * inner, 128), 128, 0, (cudaStream_t)stream>>>(
        values, indices, a, dtype, width, outer, len, inner, want_max);
    return (int)cudaGetLastError();
}

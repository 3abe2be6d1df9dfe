// The positions of a mask's non-zero elements on the GPU (stream compaction):
// a 0/1 flag per element, CUB's exclusive scan of the flags giving each
// non-zero element its output row, then one thread per element writing its
// flat index or coordinates there.
#include <cub/device/device_scan.cuh>

#include "dispatch.cuh"
#include "kernels.h"

namespace {

__host__ __forceinline__ size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

// The scratch block: the flags and their exclusive sums (int64, so that the
// scan cannot overflow), then CUB's temporary storage, each 256-byte aligned.
cudaError_t nonzero_layout(int64_t n, size_t *rows_at, size_t *temp_at, size_t *total, cudaStream_t stream) {
    size_t temp = 0;
    cudaError_t e = cub::DeviceScan::ExclusiveSum(nullptr, temp, (const int64_t *)nullptr, (int64_t *)nullptr, n,
                                                  stream);
    if (e != cudaSuccess) return e;
    *rows_at = align256(n * sizeof(int64_t));
    *temp_at = *rows_at + align256(n * sizeof(int64_t));
    *total = *temp_at + align256(temp);
    return cudaSuccess;
}

__global__ void flags_kernel(int64_t *flags, const uint8_t *mask, int64_t n) {
    GRID_STRIDE(k, n) flags[k] = mask[k] != 0;
}

__global__ void write_kernel(int64_t *out, const uint8_t *mask, const int64_t *row, int64_t n, int64_t rows,
                             int coords, ddpc_k_bcast geo) {
    GRID_STRIDE(k, n) {
        if (!mask[k] || row[k] >= rows) continue;
        if (!coords) {
            out[row[k]] = k;
            continue;
        }
        int64_t rest = k;
        for (int d = geo.ndim - 1; d >= 0; d--) {
            out[row[k] * geo.ndim + d] = rest % geo.shape[d];
            rest /= geo.shape[d];
        }
    }
}

}  // namespace

extern "C" int ddpc_k_nonzero_scratch(int64_t n, size_t *bytes) {
    size_t rows_at, temp_at;
    return (int)nonzero_layout(n, &rows_at, &temp_at, bytes, 0);
}

extern "C" int ddpc_k_nonzero(int64_t *out, const uint8_t *mask, int64_t n, int64_t rows, int coords,
                              ddpc_k_bcast geo, void *scratch, size_t bytes, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    size_t rows_at, temp_at, total;
    cudaError_t e = nonzero_layout(n, &rows_at, &temp_at, &total, s);
    if (e != cudaSuccess) return (int)e;
    if (bytes < total) return (int)cudaErrorInvalidValue;
    int64_t *flags = (int64_t *)scratch, *row = (int64_t *)((char *)scratch + rows_at);
    flags_kernel<<<grid_for(n, 256), 256, 0, s>>>(flags, mask, n);
    if ((e = cudaGetLastError()) != cudaSuccess) return (int)e;
    size_t temp = total - temp_at;
    e = cub::DeviceScan::ExclusiveSum((char *)scratch + temp_at, temp, flags, row, n, s);
    if (e != cudaSuccess) return (int)e;
    write_kernel<<<grid_for(n, 256), 256, 0, s>>>(out, mask, row, n, rows, coords, geo);
    return (int)cudaGetLastError();
}

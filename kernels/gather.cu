// The loader's direct gather: the GPU copies rows, picked by an index list,
// out of host arrays it reads through their mapped device pointers (zero-copy
// over the bus) into a batch in device memory, with no staging on the host.
//
// One launch serves every source of a batch (blockIdx.y picks the source).
// A row is copied by a group of `tpr` threads of a block (a power of two,
// enough for one word per thread where the row allows), so short rows share
// a block and long ones fill it. Words are as wide as the source's start, the
// batch's start and the row length all allow (16 bytes down to 1): each read
// of host memory is one transfer over the bus, so wide words and many of
// them in flight at once are what keeps it busy.
#include "kernels.h"

namespace {

constexpr unsigned kBlock = 256;

// How one source's rows are copied: words of `width` bytes, `tpr` threads per row.
struct RowPlan {
    const char *src;
    char *dst;
    size_t row_bytes;
    int width;
    unsigned tpr;
};

struct GatherPlan {
    RowPlan part[DDPC_K_GATHER_MAX_SOURCES];
};

template <typename W>
__device__ inline void copy_row(char *dst, const char *src, size_t words, unsigned lane, unsigned tpr) {
    const W *s = (const W *)src;
    W *d = (W *)dst;
    for (size_t k = lane; k < words; k += tpr) d[k] = s[k];
}

__global__ void gather_kernel(GatherPlan plan, const int64_t *indices, int64_t rows) {
    const RowPlan p = plan.part[blockIdx.y];
    unsigned lane = threadIdx.x % p.tpr;
    int64_t per_block = kBlock / p.tpr;
    int64_t step = (int64_t)gridDim.x * per_block;
    size_t words = p.row_bytes / (size_t)p.width;
    for (int64_t r = blockIdx.x * per_block + threadIdx.x / p.tpr; r < rows; r += step) {
        const char *src = p.src + (size_t)indices[r] * p.row_bytes;
        char *dst = p.dst + (size_t)r * p.row_bytes;
        switch (p.width) {
        case 16: copy_row<uint4>(dst, src, words, lane, p.tpr); break;
        case 8: copy_row<uint2>(dst, src, words, lane, p.tpr); break;
        case 4: copy_row<uint32_t>(dst, src, words, lane, p.tpr); break;
        default: copy_row<uint8_t>(dst, src, words, lane, p.tpr); break;
        }
    }
}

// The widest word that divides the source's and the batch's addresses and the row length.
int word_width(const ddpc_k_rows &r) {
    uintptr_t bits = (uintptr_t)r.src | (uintptr_t)r.dst | (uintptr_t)r.row_bytes;
    for (int w = 16; w > 1; w /= 2)
        if (bits % (uintptr_t)w == 0) return w;
    return 1;
}

} // namespace

extern "C" int ddpc_k_gather_rows(const ddpc_k_gather *g, const int64_t *indices, int64_t rows, void *stream) {
    if (g->n < 1 || g->n > DDPC_K_GATHER_MAX_SOURCES || rows < 0) return (int)cudaErrorInvalidValue;
    if (rows == 0) return (int)cudaSuccess;
    GatherPlan plan;
    int64_t blocks = 1;
    for (int k = 0; k < g->n; k++) {
        const ddpc_k_rows &r = g->part[k];
        RowPlan &p = plan.part[k];
        p.src = (const char *)r.src;
        p.dst = (char *)r.dst;
        p.row_bytes = r.row_bytes;
        p.width = word_width(r);
        size_t words = r.row_bytes / (size_t)p.width;
        p.tpr = 1;
        while (p.tpr < kBlock && p.tpr < words) p.tpr *= 2;
        int64_t per_block = kBlock / p.tpr, need = (rows + per_block - 1) / per_block;
        if (need > blocks) blocks = need;
    }
    // Rows beyond what the largest grid covers are taken by the grid-stride loop.
    unsigned grid = (unsigned)(blocks > 65535 ? 65535 : blocks);
    gather_kernel<<<dim3(grid, (unsigned)g->n), kBlock, 0, (cudaStream_t)stream>>>(plan, indices, rows);
    return (int)cudaGetLastError();
}

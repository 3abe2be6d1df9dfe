/* The threaded batch loader: producer threads, the slot ring, GPU staging,
 * and the GPU's direct gather from the sources in place. */
#include "loader.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "alloc.h"
#include "device.h"
#include "npy.h"
#ifdef DDPC_WITH_CUDA
#include "kernels.h"

_Static_assert(DDPC_K_GATHER_MAX_SOURCES == DDPC_LOADER_MAX_SOURCES, "one gather launch serves every source");
#endif

/* Rows a thread claims at once: about 128 KiB, large enough that the lock is
 * cold, small enough that two threads share one batch. */
#define CHUNK_BYTES (128u << 10)
/* Rows read from mapped files between two looks at the resident set. */
#define RESIDENT_CHECK_ROWS 16

typedef struct {
    int64_t batch;       /* -1 while the slot is free */
    int64_t rows, next_row, done_rows;
    int done;
    int need_sync;       /* the previous copy out of this slot's staging may still run */
    int syncing;         /* a thread is waiting for that copy */
    int inflight;        /* chunks being gathered (or copied to the device) right now */
    char *dst[DDPC_LOADER_MAX_SOURCES];        /* where rows are gathered to */
    void *device_dst[DDPC_LOADER_MAX_SOURCES]; /* GPU: final destination of the copy */
    ddpc_status st;
    char msg[512];
#ifdef DDPC_WITH_CUDA
    ddpc_block *staging[DDPC_LOADER_MAX_SOURCES];
    cudaEvent_t alloc_ready, copied;
#endif
} slot_;

/* Copies whole 64-byte lines (see COPY_LOOP_). */
typedef void (*copy_lines_fn)(char *dst, const char *src, const char *next, size_t lines);

struct ddpc_loader {
    ddpc_loader_source src[DDPC_LOADER_MAX_SOURCES];
    int nsources;
    int mapped;               /* mapped sources bigger than the budget: keep their pages in check */
    size_t resident_base;     /* resident file pages when the loader started */
    int statm_fd;             /* /proc/self/statm, or -1 */
    int64_t *indices, *offsets, nbatches;
    int prefetch, nthreads, nstarted, device;
    size_t budget, chunk_rows;
    slot_ *slots;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    int stop;
    void *compute_stream, *copy_stream;
    /* Direct gather: no threads and no staging; the device reads row 0 of
     * each source at src_dev[k] (pages registered through ranges[k]) and the
     * index list from dev_indices. */
    int direct;
    const void *src_dev[DDPC_LOADER_MAX_SOURCES];
    struct host_range_ *ranges[DDPC_LOADER_MAX_SOURCES];
    ddpc_block *dev_indices;
    copy_lines_fn copy_lines;
    uint64_t started_ns;
    ddpc_loader_stats stats; /* under mu; elapsed_s is filled in when read */
};

int64_t ddpc_loader_batch_rows(const ddpc_loader *l, int64_t batch) {
    return l->offsets[batch + 1] - l->offsets[batch];
}

/* ---- the producer threads ------------------------------------------------------- */

/* Rows ahead whose cache lines are requested while a row is copied. */
#define PREFETCH_ROWS 2
/* Rows at least this long are copied line by line (copy_row_ahead_). */
#define LINE_MIN_ROW 256

/* Copies `lines` whole 64-byte lines to a 64-byte-aligned dst, asking at each
 * line for the matching line of a row further on (`next`, or NULL): one core
 * alone keeps only a few misses in flight, and random rows defeat the
 * hardware prefetcher at every row start, so the next rows' lines are
 * requested while this one is copied (hint T1: into L2, not L1). The widest
 * loads and stores the CPU has are used.
 *
 * Batches bound for a GPU are written with streaming (non-temporal) stores:
 * the copy engine reads the staging from memory, so bringing its lines into
 * this core's cache first would only add traffic (two threads gathering 3 KB
 * rows into shared buffers: 17 GB/s against 11). Host batches use ordinary
 * stores, so that the batch is still in cache when the training step reads
 * it: streaming them made a consumer that reads each batch once slower. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define COPY_LOOP_(load, store)                                \
    for (size_t k = 0; k < lines * 64; k += 64) {              \
        if (next) __builtin_prefetch(next + k, 0, 2);          \
        for (size_t j = 0; j < 64; j += sizeof(load(src)))     \
            store(dst + k + j, load(src + k + j));             \
    }
#define COPY_LINES_FN_(name, attr, load, store)                                        \
    attr static void name(char *dst, const char *src, const char *next, size_t lines) { \
        COPY_LOOP_(load, store)                                                        \
    }

#define LOAD512_(p) _mm512_loadu_si512((const void *)(p))
#define LOAD256_(p) _mm256_loadu_si256((const __m256i *)(p))
#define LOAD128_(p) _mm_loadu_si128((const __m128i *)(p))
#define STREAM512_(p, v) _mm512_stream_si512((__m512i *)(p), v)
#define STREAM256_(p, v) _mm256_stream_si256((__m256i *)(p), v)
#define STREAM128_(p, v) _mm_stream_si128((__m128i *)(p), v)
#define STORE512_(p, v) _mm512_storeu_si512((void *)(p), v)
#define STORE256_(p, v) _mm256_storeu_si256((__m256i *)(p), v)
#define STORE128_(p, v) _mm_storeu_si128((__m128i *)(p), v)
#define AVX512_ __attribute__((target("avx512f")))
#define AVX_ __attribute__((target("avx")))
COPY_LINES_FN_(stream_lines_avx512_, AVX512_, LOAD512_, STREAM512_)
COPY_LINES_FN_(stream_lines_avx_, AVX_, LOAD256_, STREAM256_)
COPY_LINES_FN_(stream_lines_sse2_, , LOAD128_, STREAM128_)
COPY_LINES_FN_(store_lines_avx512_, AVX512_, LOAD512_, STORE512_)
COPY_LINES_FN_(store_lines_avx_, AVX_, LOAD256_, STORE256_)
COPY_LINES_FN_(store_lines_sse2_, , LOAD128_, STORE128_)

static copy_lines_fn pick_copy_lines_(int streaming) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return streaming ? stream_lines_avx512_ : store_lines_avx512_;
    if (__builtin_cpu_supports("avx")) return streaming ? stream_lines_avx_ : store_lines_avx_;
    return streaming ? stream_lines_sse2_ : store_lines_sse2_;
}
static void store_fence_(void) { _mm_sfence(); } /* streaming stores are weakly ordered */
#else
static void store_lines_(char *dst, const char *src, const char *next, size_t lines) {
    for (size_t k = 0; k < lines * 64; k += 64) {
        if (next) __builtin_prefetch(next + k, 0, 2);
        memcpy(dst + k, src + k, 64);
    }
}
static copy_lines_fn pick_copy_lines_(int streaming) {
    (void)streaming;
    return store_lines_;
}
static void store_fence_(void) {}
#endif

/* One row of rb >= LINE_MIN_ROW bytes: the bytes before dst's first line
 * boundary and after its last are copied with memcpy, the lines between by `copy`. */
static void copy_row_ahead_(copy_lines_fn copy, char *dst, const char *src, const char *next, size_t rb) {
    size_t head = (size_t)(-(uintptr_t)dst & 63), lines = (rb - head) / 64, k = head + lines * 64;
    memcpy(dst, src, head);
    copy(dst + head, src + head, next ? next + head : NULL, lines);
    memcpy(dst + k, src + k, rb - k);
    if (next) {
        __builtin_prefetch(next, 0, 2);
        __builtin_prefetch(next + rb - 1, 0, 2);
    }
}

/* Small rows ahead whose line is requested while a row is copied. */
#define PREFETCH_SMALL_ROWS 16

/* Copies rows idx[0..n) of rb bytes each from base to dst. The rows after
 * them (up to idx[ahead - 1], the rest of the batch) are only prefetched. */
static void copy_rows_(copy_lines_fn copy, char *dst, const char *base, const int64_t *idx, int64_t n,
                       int64_t ahead, size_t rb) {
    if (rb < LINE_MIN_ROW) {
        for (int64_t i = 0; i < n; i++) {
            if (i + PREFETCH_SMALL_ROWS < ahead) __builtin_prefetch(base + (size_t)idx[i + PREFETCH_SMALL_ROWS] * rb);
            /* Fixed sizes let the compiler turn the memcpy into one load and store. */
            if (rb == 4) memcpy(dst + i * 4, base + idx[i] * 4, 4);
            else if (rb == 8) memcpy(dst + i * 8, base + idx[i] * 8, 8);
            else memcpy(dst + (size_t)i * rb, base + (size_t)idx[i] * rb, rb);
        }
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        const char *next = i + PREFETCH_ROWS < ahead ? base + (size_t)idx[i + PREFETCH_ROWS] * rb : NULL;
        copy_row_ahead_(copy, dst + (size_t)i * rb, base + (size_t)idx[i] * rb, next, rb);
    }
    store_fence_(); /* before the rows are published */
}

static void release_files_(ddpc_loader *l) {
    for (int k = 0; k < l->nsources; k++) {
        const ddpc_loader_source *src = &l->src[k];
        if (src->kind == DDPC_SOURCE_MAPPED) ddpc_release_file_pages(src->base, (size_t)src->rows * src->row_bytes);
    }
}

/* A mapped file's pages stay resident after they are read, and one read can
 * map far more than it reads (fault-around, large page-cache folios: up to
 * 2 MiB for a 4 KiB row). So after every few rows the threads compare the
 * process's resident file pages with the level at init and drop the mapped
 * sources' pages once it exceeds the budget: resident memory stays within
 * about budget + (threads + 1) * RESIDENT_CHECK_ROWS * folio size (the waiting
 * thread gathers too), whatever the file size. */
static void limit_resident_(ddpc_loader *l) {
    if (ddpc_resident_file_bytes(l->statm_fd) > l->resident_base + l->budget) release_files_(l);
}

static ddpc_status read_rows_(const ddpc_loader_source *src, char *dst, const int64_t *idx, int64_t n) {
    size_t rb = src->row_bytes;
    for (int64_t i = 0; i < n; i++) {
        size_t done = 0;
        while (done < rb) {
            ssize_t got = pread(src->fd, dst + (size_t)i * rb + done, rb - done,
                                (off_t)(src->file_offset + (uint64_t)idx[i] * rb + done));
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0)
                return DDPC_ERROR(DDPC_ERR_SYS, "reading sample %lld from a .npy file failed: %s", (long long)idx[i],
                                  got < 0 ? strerror(errno) : "the file ended early (was it truncated?)");
            done += (size_t)got;
        }
    }
    return DDPC_OK;
}

static ddpc_status gather_(ddpc_loader *l, slot_ *s, int64_t r0, int64_t r1) {
    const int64_t *idx = l->indices + l->offsets[s->batch];
    int64_t step = l->mapped ? RESIDENT_CHECK_ROWS : r1 - r0;
    for (int64_t a = r0; a < r1; a += step) {
        int64_t b = a + step < r1 ? a + step : r1;
        for (int k = 0; k < l->nsources; k++) {
            const ddpc_loader_source *src = &l->src[k];
            char *dst = s->dst[k] + (size_t)a * src->row_bytes;
            if (src->kind == DDPC_SOURCE_FILE) CHECK(read_rows_(src, dst, idx + a, b - a));
            else copy_rows_(l->copy_lines, dst, src->base, idx + a, b - a, s->rows - a, src->row_bytes);
        }
        if (l->mapped) limit_resident_(l);
    }
    return DDPC_OK;
}

#ifdef DDPC_WITH_CUDA
static ddpc_status wait_copied_(ddpc_loader *l, slot_ *s) {
    CUDACHECK(cudaSetDevice(l->device));
    CUDACHECK(cudaEventSynchronize(s->copied));
    return DDPC_OK;
}

/* The copy waits for the compute stream's work queued before the destination
 * was allocated (the caching allocator may hand out a block that queued
 * kernels still read); the consumer's compute stream later waits for `copied`. */
static ddpc_status issue_copy_(ddpc_loader *l, slot_ *s) {
    cudaStream_t copy = (cudaStream_t)l->copy_stream;
    CUDACHECK(cudaSetDevice(l->device));
    CUDACHECK(cudaStreamWaitEvent(copy, s->alloc_ready, 0));
    ddpc_status st = DDPC_OK;
    for (int k = 0; k < l->nsources; k++)
        CUDACHECKGOTO(cudaMemcpyAsync(s->device_dst[k], s->dst[k], (size_t)s->rows * l->src[k].row_bytes,
                                      cudaMemcpyHostToDevice, copy),
                      st, recorded_);
recorded_:;
    /* Recorded after a failure too: the copies already queued are waited
     * for before the staging is reused or freed. */
    cudaError_t e = cudaEventRecord(s->copied, copy);
    if (e != cudaSuccess) cudaStreamSynchronize(copy);
    if (st == DDPC_OK) CUDACHECK(e);
    return st;
}
#else
static ddpc_status wait_copied_(ddpc_loader *l, slot_ *s) {
    (void)s;
    return ddpc_cuda_require(l->device);
}
static ddpc_status issue_copy_(ddpc_loader *l, slot_ *s) {
    (void)s;
    return ddpc_cuda_require(l->device);
}
#endif

/* Records a failure in the slot (the first one is reported) and stops
 * further chunks from being claimed; the lock is held. The slot completes
 * once no thread still works on it: until then its batch, rows and buffers
 * must stay as they are, so it cannot be handed back and queued again. */
static void fail_slot_(slot_ *s, ddpc_status st) {
    if (s->st == DDPC_OK) {
        s->st = st;
        snprintf(s->msg, sizeof s->msg, "%s", ddpc_last_error());
    }
    ddpc_clear_error();
    s->next_row = s->rows;
}

/* Completes the slot once every row is in (and its copy queued) or it
 * failed, and no chunk of it is in flight; the lock is held. */
static void settle_(ddpc_loader *l, slot_ *s) {
    if (s->done || s->inflight > 0 || (s->st == DDPC_OK && s->done_rows < s->rows)) return;
    s->done = 1;
    pthread_cond_broadcast(&l->done_cv);
}

static int has_work_(const slot_ *s) {
    return s->batch >= 0 && !s->done && !s->syncing && (s->need_sync || s->next_row < s->rows);
}

/* The oldest batch with work left for a thread (with rows_only, rows to
 * gather rather than a staging wait); the lock is held. */
static slot_ *pick_(ddpc_loader *l, int rows_only) {
    slot_ *best = NULL;
    for (int i = 0; i < l->prefetch; i++) {
        slot_ *s = &l->slots[i];
        if (has_work_(s) && !(rows_only && s->need_sync) && (!best || s->batch < best->batch)) best = s;
    }
    return best;
}

/* One piece of work on slot s: the wait before its staging is reused, or
 * one chunk of rows (and the copy to the device after the last chunk). The
 * lock is held on entry and on return, released while working. */
static void work_on_(ddpc_loader *l, slot_ *s) {
    if (s->need_sync) { /* staging is reused: its last copy to the device must be over */
        s->need_sync = 0;
        s->syncing = 1;
        pthread_mutex_unlock(&l->mu);
        uint64_t t0 = ddpc_now_ns();
        ddpc_status st = wait_copied_(l, s);
        uint64_t t1 = ddpc_now_ns();
        pthread_mutex_lock(&l->mu);
        l->stats.staging_wait_s += (double)(t1 - t0) * 1e-9;
        s->syncing = 0;
        if (st != DDPC_OK) fail_slot_(s, st);
        settle_(l, s);
        /* Its rows can be gathered now, also by a thread waiting for a batch. */
        pthread_cond_broadcast(&l->work_cv);
        pthread_cond_broadcast(&l->done_cv);
        return;
    }
    int64_t r0 = s->next_row, r1 = r0 + (int64_t)l->chunk_rows < s->rows ? r0 + (int64_t)l->chunk_rows : s->rows;
    s->next_row = r1;
    s->inflight++;
    pthread_mutex_unlock(&l->mu);
    uint64_t t0 = ddpc_now_ns();
    ddpc_status st = gather_(l, s, r0, r1);
    uint64_t t1 = ddpc_now_ns();
    pthread_mutex_lock(&l->mu);
    l->stats.gather_s += (double)(t1 - t0) * 1e-9;
    l->stats.chunks++;
    if (st == DDPC_OK && s->st == DDPC_OK) {
        s->done_rows += r1 - r0;
        if (s->done_rows == s->rows && l->device != DDPC_CPU) {
            pthread_mutex_unlock(&l->mu);
            st = issue_copy_(l, s);
            uint64_t t2 = ddpc_now_ns();
            pthread_mutex_lock(&l->mu);
            l->stats.copy_issue_s += (double)(t2 - t1) * 1e-9;
            s->need_sync = 1; /* also after a failure: copies already queued still read the staging */
        }
    }
    if (st != DDPC_OK) fail_slot_(s, st);
    s->inflight--;
    settle_(l, s);
}

static void *producer_main_(void *arg) {
    ddpc_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        slot_ *s = pick_(l, 0);
        if (s) work_on_(l, s);
        else pthread_cond_wait(&l->work_cv, &l->mu);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* ---- setup, the ring, teardown --------------------------------------------------- */

static ddpc_status check_config_(const ddpc_loader_config *c) {
    if (c->nsources < 1 || c->nsources > DDPC_LOADER_MAX_SOURCES)
        return DDPC_ERROR(DDPC_ERR_ARG, "a loader reads 1 to %d sources, got %d", DDPC_LOADER_MAX_SOURCES, c->nsources);
    if (c->prefetch < 1) return DDPC_ERROR(DDPC_ERR_ARG, "prefetch must be >= 1, got %d", c->prefetch);
    if (c->nthreads < 1) return DDPC_ERROR(DDPC_ERR_ARG, "num_threads must be >= 1, got %d", c->nthreads);
    int64_t rows = c->sources[0].rows;
    for (int k = 1; k < c->nsources; k++)
        if (c->sources[k].rows != rows)
            return DDPC_ERROR(DDPC_ERR_ARG,
                              "sources have different lengths: source 0 has %lld rows, source %d has %lld",
                              (long long)rows, k, (long long)c->sources[k].rows);
    if (c->nbatches < 0 || c->offsets[0] < 0 || c->offsets[c->nbatches] > c->nindices)
        return DDPC_ERROR(DDPC_ERR_ARG, "batch offsets out of range of the %lld indices", (long long)c->nindices);
    for (int64_t b = 0; b < c->nbatches; b++)
        if (c->offsets[b + 1] < c->offsets[b])
            return DDPC_ERROR(DDPC_ERR_ARG, "batch offsets must be non-decreasing (batch %lld)", (long long)b);
    for (int64_t i = 0; i < c->nindices; i++)
        if (c->indices[i] < 0 || c->indices[i] >= rows)
            return DDPC_ERROR(DDPC_ERR_ARG,
                              "index %lld (at position %lld) is out of range for a data set of %lld samples",
                              (long long)c->indices[i], (long long)i, (long long)rows);
    return DDPC_OK;
}

#ifdef DDPC_WITH_CUDA
/* ---- direct gather: the device reads the sources in place ------------------------ */

/* CUDA registers host memory by whole pages, and a page only once: loaders
 * over the same array share one registration of its pages, counted, and the
 * last loader to go unregisters them. */
typedef struct host_range_ {
    char *start; /* page-aligned */
    size_t len;  /* whole pages */
    int refs;
    struct host_range_ *next;
} host_range_;

static pthread_mutex_t ranges_mu_ = PTHREAD_MUTEX_INITIALIZER;
static host_range_ *ranges_; /* pairwise disjoint */

/* The registration of the pages holding [base, base + nbytes): the one made
 * before for exactly these pages, or a new one. *out stays NULL (with DDPC_OK)
 * where they overlap other registered pages or CUDA refuses them (memory
 * registered by someone else, a mapping it cannot pin): the loader stages. */
static ddpc_status range_acquire_(const char *base, size_t nbytes, unsigned flags, host_range_ **out) {
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    char *start = (char *)((uintptr_t)base & ~(page - 1));
    size_t len = (size_t)(((uintptr_t)base + nbytes - (uintptr_t)start + page - 1) & ~(page - 1));
    ddpc_status st = DDPC_OK;
    *out = NULL;
    pthread_mutex_lock(&ranges_mu_);
    host_range_ *r = ranges_;
    for (; r && !(r->start == start && r->len == len); r = r->next)
        if (r->start < start + len && start < r->start + r->len) goto exit_;
    if (r) {
        r->refs++;
        *out = r;
        goto exit_;
    }
    r = calloc(1, sizeof *r);
    if (!r) {
        st = DDPC_ERROR(DDPC_ERR_OOM, "out of memory for a loader's host registration");
        goto exit_;
    }
    if (cudaHostRegister(start, len, flags) != cudaSuccess) {
        (void)cudaGetLastError(); /* not a sticky error: clear it, or the next launch's check would report it */
        free(r);
        goto exit_;
    }
    r->start = start;
    r->len = len;
    r->refs = 1;
    r->next = ranges_;
    ranges_ = r;
    *out = r;
exit_:
    pthread_mutex_unlock(&ranges_mu_);
    return st;
}

static void range_release_(host_range_ *r) {
    pthread_mutex_lock(&ranges_mu_);
    if (--r->refs == 0) {
        host_range_ **link = &ranges_;
        while (*link != r) link = &(*link)->next;
        *link = r->next;
        /* Teardown cannot fail; a failed unregister leaves the pages pinned. */
        if (cudaHostUnregister(r->start) != cudaSuccess) (void)cudaGetLastError();
        free(r);
    }
    pthread_mutex_unlock(&ranges_mu_);
}

static void release_ranges_(ddpc_loader *l) {
    for (int k = 0; k < l->nsources; k++)
        if (l->ranges[k]) range_release_(l->ranges[k]);
    memset(l->ranges, 0, sizeof l->ranges);
    memset(l->src_dev, 0, sizeof l->src_dev);
}

/* Sets up the direct gather where every source allows it; l->direct stays 0
 * (the staging path) where a source is read with pread, the mapped files
 * outgrow the resident budget (registered pages stay resident), the device
 * cannot map host memory (read-only, for a file mapping), or a source's
 * pages cannot be registered. The index list goes to the device once, on the
 * compute stream: each gather waits for that stream's work (alloc_ready). */
static ddpc_status init_direct_(ddpc_loader *l, int64_t nindices) {
    int can_map, read_only;
    CUDACHECK(cudaDeviceGetAttribute(&can_map, cudaDevAttrCanMapHostMemory, l->device));
    CUDACHECK(cudaDeviceGetAttribute(&read_only, cudaDevAttrHostRegisterReadOnlySupported, l->device));
    if (!can_map || l->mapped) return DDPC_OK;
    for (int k = 0; k < l->nsources; k++)
        if (l->src[k].kind == DDPC_SOURCE_FILE || (l->src[k].kind == DDPC_SOURCE_MAPPED && !read_only))
            return DDPC_OK;
    /* Portable: one registration serves loaders on every device. */
    unsigned flags = cudaHostRegisterMapped | cudaHostRegisterPortable | (read_only ? cudaHostRegisterReadOnly : 0);
    for (int k = 0; k < l->nsources; k++) {
        const ddpc_loader_source *src = &l->src[k];
        size_t nbytes = (size_t)src->rows * src->row_bytes;
        if (nbytes == 0) continue; /* nothing to read */
        CHECK(range_acquire_(src->base, nbytes, flags, &l->ranges[k]));
        void *dev;
        if (!l->ranges[k] || cudaHostGetDevicePointer(&dev, l->ranges[k]->start, 0) != cudaSuccess) {
            (void)cudaGetLastError();
            release_ranges_(l);
            return DDPC_OK;
        }
        l->src_dev[k] = (char *)dev + (src->base - l->ranges[k]->start);
    }
    size_t bytes = (size_t)nindices * sizeof *l->indices;
    CHECK(ddpc_alloc(l->device, bytes, 0, &l->dev_indices));
    if (bytes > 0)
        CUDACHECK(cudaMemcpyAsync(l->dev_indices->ptr, l->indices, bytes, cudaMemcpyHostToDevice,
                                  (cudaStream_t)l->compute_stream));
    l->direct = 1;
    l->stats.direct = 1;
    return DDPC_OK;
}

/* Queues batch `batch`'s gather into dst on the copy stream, ordered as
 * issue_copy_ orders a copy: after the compute stream's work up to dst's
 * allocation, and before `copied`. The slot is done at once: all that
 * ddpc_loader_wait has left to do is order the compute stream after `copied`. */
static ddpc_status submit_direct_(ddpc_loader *l, slot_ *s, int64_t batch, void *const *dst) {
    int64_t rows = ddpc_loader_batch_rows(l, batch);
    uint64_t t0 = ddpc_now_ns();
    if (rows > 0) {
        cudaStream_t copy = (cudaStream_t)l->copy_stream;
        ddpc_k_gather g = {.n = l->nsources};
        for (int k = 0; k < l->nsources; k++)
            g.part[k] = (ddpc_k_rows){.src = l->src_dev[k], .dst = dst[k], .row_bytes = l->src[k].row_bytes};
        const int64_t *idx = (const int64_t *)l->dev_indices->ptr + l->offsets[batch];
        CUDACHECK(cudaSetDevice(l->device));
        CUDACHECK(cudaEventRecord(s->alloc_ready, (cudaStream_t)l->compute_stream));
        CUDACHECK(cudaStreamWaitEvent(copy, s->alloc_ready, 0));
        CUDACHECK((cudaError_t)ddpc_k_gather_rows(&g, idx, rows, copy));
        CUDACHECK(cudaEventRecord(s->copied, copy));
    }
    uint64_t t1 = ddpc_now_ns();
    pthread_mutex_lock(&l->mu);
    l->stats.copy_issue_s += (double)(t1 - t0) * 1e-9;
    s->rows = s->next_row = s->done_rows = rows;
    s->done = 1;
    s->st = DDPC_OK;
    s->batch = batch;
    pthread_mutex_unlock(&l->mu);
    return DDPC_OK;
}

/* ---- GPU setup and teardown ----------------------------------------------------------- */

static ddpc_status init_device_on_(ddpc_loader *l, const ddpc_loader_config *cfg) {
    CHECK(ddpc_cuda_compute_stream(l->device, &l->compute_stream));
    CHECK(ddpc_cuda_copy_stream(l->device, &l->copy_stream));
    for (int i = 0; i < l->prefetch; i++) {
        CUDACHECK(cudaEventCreateWithFlags(&l->slots[i].alloc_ready, cudaEventDisableTiming));
        CUDACHECK(cudaEventCreateWithFlags(&l->slots[i].copied, cudaEventDisableTiming));
    }
    if (cfg->gpu_gather) CHECK(init_direct_(l, cfg->nindices));
    if (l->direct) return DDPC_OK;
    int64_t max_rows = 0;
    for (int64_t b = 0; b < l->nbatches; b++)
        if (ddpc_loader_batch_rows(l, b) > max_rows) max_rows = ddpc_loader_batch_rows(l, b);
    for (int i = 0; i < l->prefetch; i++) {
        slot_ *s = &l->slots[i];
        for (int k = 0; k < l->nsources; k++) {
            CHECK(ddpc_alloc(DDPC_CPU, (size_t)max_rows * l->src[k].row_bytes, 1, &s->staging[k]));
            s->dst[k] = s->staging[k]->ptr;
        }
    }
    return DDPC_OK;
}

static ddpc_status init_device_(ddpc_loader *l, const ddpc_loader_config *cfg) {
    int prev;
    CHECK(ddpc_cuda_enter(l->device, &prev));
    ddpc_status st = init_device_on_(l, cfg);
    ddpc_cuda_leave(prev);
    return st;
}

static void free_device_(ddpc_loader *l) {
    for (int i = 0; i < l->prefetch; i++) {
        slot_ *s = &l->slots[i];
        /* A copy out of staging (or a gather) may still be queued: let it finish before the memory goes. */
        if (s->copied) cudaEventSynchronize(s->copied);
        if (s->alloc_ready) cudaEventDestroy(s->alloc_ready);
        if (s->copied) cudaEventDestroy(s->copied);
        for (int k = 0; k < l->nsources; k++) ddpc_free(s->staging[k]);
    }
    /* Every gather is over (each was followed by its slot's `copied`): the
     * registered pages and the index list are no longer read. */
    release_ranges_(l);
    ddpc_free(l->dev_indices);
}
#else
static ddpc_status init_device_(ddpc_loader *l, const ddpc_loader_config *cfg) {
    (void)cfg;
    return ddpc_cuda_require(l->device);
}
static void free_device_(ddpc_loader *l) { (void)l; }
#endif

ddpc_status ddpc_loader_init(const ddpc_loader_config *cfg, ddpc_loader **out) {
    *out = NULL;
    CHECK(check_config_(cfg));
    ddpc_status st = DDPC_OK;
    ddpc_loader *l = calloc(1, sizeof *l);
    if (!l) return DDPC_ERROR(DDPC_ERR_OOM, "out of memory for a loader");
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->work_cv, NULL);
    pthread_cond_init(&l->done_cv, NULL);
    l->nsources = cfg->nsources;
    memcpy(l->src, cfg->sources, (size_t)cfg->nsources * sizeof *cfg->sources);
    l->nbatches = cfg->nbatches;
    l->prefetch = cfg->prefetch;
    l->nthreads = cfg->nthreads;
    l->device = cfg->device;
    l->copy_lines = pick_copy_lines_(cfg->device != DDPC_CPU);
    l->started_ns = ddpc_now_ns();
    l->budget = cfg->resident_budget ? cfg->resident_budget : 1;
    size_t row_total = 0, mapped_bytes = 0;
    for (int k = 0; k < l->nsources; k++) {
        row_total += l->src[k].row_bytes;
        if (l->src[k].kind == DDPC_SOURCE_MAPPED) mapped_bytes += (size_t)l->src[k].rows * l->src[k].row_bytes;
    }
    /* Mapped files that fit the budget together can stay resident: no checks
     * and no dropping of pages the next pass would fault in again. Bigger
     * ones start from none of their pages resident (an earlier pass may have
     * left them mapped), so the budget bounds what this pass adds. */
    l->mapped = mapped_bytes > l->budget;
    if (l->mapped) release_files_(l);
    l->statm_fd = l->mapped ? open("/proc/self/statm", O_RDONLY | O_CLOEXEC) : -1;
    l->resident_base = ddpc_resident_file_bytes(l->statm_fd);
    l->chunk_rows = row_total >= CHUNK_BYTES ? 1 : CHUNK_BYTES / (row_total ? row_total : 1);
    l->indices = malloc((size_t)(cfg->nindices ? cfg->nindices : 1) * sizeof *l->indices);
    l->offsets = malloc((size_t)(cfg->nbatches + 1) * sizeof *l->offsets);
    l->slots = calloc((size_t)l->prefetch, sizeof *l->slots);
    l->threads = calloc((size_t)l->nthreads, sizeof *l->threads);
    if (!l->indices || !l->offsets || !l->slots || !l->threads) {
        st = DDPC_ERROR(DDPC_ERR_OOM, "out of memory for a loader's index list (%lld entries)",
                        (long long)cfg->nindices);
        goto fail_;
    }
    memcpy(l->indices, cfg->indices, (size_t)cfg->nindices * sizeof *l->indices);
    memcpy(l->offsets, cfg->offsets, (size_t)(cfg->nbatches + 1) * sizeof *l->offsets);
    for (int i = 0; i < l->prefetch; i++) l->slots[i].batch = -1;
    if (l->device != DDPC_CPU) CHECKGOTO(init_device_(l, cfg), st, fail_);
    for (; !l->direct && l->nstarted < l->nthreads; l->nstarted++) {
        int rc = pthread_create(&l->threads[l->nstarted], NULL, producer_main_, l);
        if (rc != 0) {
            st = DDPC_ERROR(DDPC_ERR_SYS, "could not start a loader thread: %s", strerror(rc));
            goto fail_;
        }
    }
    *out = l;
    return DDPC_OK;
fail_:
    ddpc_loader_free(l);
    return st;
}

static ddpc_status submit_(ddpc_loader *l, int64_t batch, void *const *dst) {
    if (batch < 0 || batch >= l->nbatches)
        return DDPC_ERROR(DDPC_ERR_ARG, "batch %lld is out of range (%lld batches)", (long long)batch,
                          (long long)l->nbatches);
    slot_ *s = &l->slots[batch % l->prefetch];
    if (s->batch >= 0)
        return DDPC_ERROR(DDPC_ERR_INTERNAL, "loader slot for batch %lld still holds batch %lld", (long long)batch,
                          (long long)s->batch);
#ifdef DDPC_WITH_CUDA
    if (l->direct) return submit_direct_(l, s, batch, dst);
    if (l->device != DDPC_CPU) {
        CUDACHECK(cudaSetDevice(l->device));
        CUDACHECK(cudaEventRecord(s->alloc_ready, (cudaStream_t)l->compute_stream));
    }
#endif
    pthread_mutex_lock(&l->mu);
    for (int k = 0; k < l->nsources; k++) {
        if (l->device == DDPC_CPU) s->dst[k] = dst[k];
        else s->device_dst[k] = dst[k];
    }
    s->rows = ddpc_loader_batch_rows(l, batch);
    s->next_row = s->done_rows = 0;
    s->done = s->rows == 0;
    s->st = DDPC_OK;
    s->batch = batch;
    pthread_cond_broadcast(&l->work_cv);
    pthread_mutex_unlock(&l->mu);
    return DDPC_OK;
}

static ddpc_status wait_(ddpc_loader *l, int64_t batch) {
    slot_ *s = &l->slots[batch % l->prefetch];
    uint64_t entered = ddpc_now_ns();
    pthread_mutex_lock(&l->mu);
    if (s->batch != batch) {
        pthread_mutex_unlock(&l->mu);
        return DDPC_ERROR(DDPC_ERR_INTERNAL, "batch %lld was never queued", (long long)batch);
    }
    /* The waiting thread gathers rows rather than sleep: of its own batch,
     * or once all of them are taken, of the next ones on the host (a chunk is
     * short, so its batch is handed back at most one chunk late). For a GPU it
     * helps with its own batch only: it has the device work of every batch
     * (the wait on the copy, the next batch's allocation and event) to do on
     * its own, so a chunk of a later batch would hold up each handover. */
    while (!s->done) {
        slot_ *w = has_work_(s) ? s : l->device == DDPC_CPU ? pick_(l, 1) : NULL;
        if (w) {
            work_on_(l, w);
            continue;
        }
        uint64_t t0 = ddpc_now_ns();
        pthread_cond_wait(&l->done_cv, &l->mu);
        l->stats.wait_idle_s += (double)(ddpc_now_ns() - t0) * 1e-9;
    }
    l->stats.batches++;
    l->stats.wait_s += (double)(ddpc_now_ns() - entered) * 1e-9;
    ddpc_status st = s->st;
    int64_t rows = s->rows;
    char msg[sizeof s->msg];
    memcpy(msg, s->msg, sizeof msg);
    s->batch = -1;
    pthread_mutex_unlock(&l->mu);
    if (st != DDPC_OK) return DDPC_ERROR(st, "%s", msg);
#ifdef DDPC_WITH_CUDA
    if (l->device != DDPC_CPU && rows > 0) {
        CUDACHECK(cudaSetDevice(l->device));
        CUDACHECK(cudaStreamWaitEvent((cudaStream_t)l->compute_stream, s->copied, 0));
    }
#else
    (void)rows;
#endif
    return DDPC_OK;
}

/* The caller's thread works with the loader's device current (it may gather
 * and copy a batch itself), then gets its own current device back. */
#ifdef DDPC_WITH_CUDA
#define ON_LOADER_DEVICE_(l, call)                                                 \
    do {                                                                           \
        int prev_ = -1;                                                            \
        if ((l)->device != DDPC_CPU) CHECK(ddpc_cuda_enter((l)->device, &prev_));  \
        ddpc_status st_ = (call);                                                  \
        if (prev_ >= 0) ddpc_cuda_leave(prev_);                                    \
        return st_;                                                                \
    } while (0)
#else
#define ON_LOADER_DEVICE_(l, call) return (call)
#endif

ddpc_status ddpc_loader_submit(ddpc_loader *l, int64_t batch, void *const *dst) {
    ON_LOADER_DEVICE_(l, submit_(l, batch, dst));
}

ddpc_status ddpc_loader_wait(ddpc_loader *l, int64_t batch) { ON_LOADER_DEVICE_(l, wait_(l, batch)); }

void ddpc_loader_get_stats(ddpc_loader *l, ddpc_loader_stats *out) {
    pthread_mutex_lock(&l->mu);
    *out = l->stats;
    pthread_mutex_unlock(&l->mu);
    out->elapsed_s = (double)(ddpc_now_ns() - l->started_ns) * 1e-9;
}

void ddpc_loader_free(ddpc_loader *l) {
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->work_cv);
    pthread_mutex_unlock(&l->mu);
    for (int i = 0; i < l->nstarted; i++) pthread_join(l->threads[i], NULL);
    if (l->slots && l->device != DDPC_CPU) free_device_(l);
    pthread_cond_destroy(&l->work_cv);
    pthread_cond_destroy(&l->done_cv);
    pthread_mutex_destroy(&l->mu);
    if (l->statm_fd >= 0) close(l->statm_fd);
    free(l->indices);
    free(l->offsets);
    free(l->slots);
    free(l->threads);
    free(l);
}

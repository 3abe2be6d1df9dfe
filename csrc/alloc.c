/* Host, pinned and caching device allocators. */
#include "alloc.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"

#define HOST_ALIGN 64
#define PAGE_ALIGN 4096
#define SMALL_LIMIT (1u << 20)
#define SMALL_ROUND 512u
#define LARGE_ROUND (2u << 20)

size_t ddpc_device_size_class(size_t nbytes) {
    if (nbytes == 0) nbytes = 1;
    size_t r = nbytes < SMALL_LIMIT ? SMALL_ROUND : LARGE_ROUND;
    return (nbytes + r - 1) / r * r;
}

static ddpc_status host_alloc_(size_t nbytes, size_t align, void **out) {
    *out = NULL;
    int rc = posix_memalign(out, align, nbytes ? nbytes : align);
    if (rc != 0) return DDPC_ERROR(DDPC_ERR_OOM, "could not allocate %zu bytes of host memory: %s", nbytes, strerror(rc));
    return DDPC_OK;
}

#ifdef DDPC_WITH_CUDA
#include <cuda_runtime_api.h>

typedef struct {
    pthread_mutex_t mu;
    ddpc_block *free_list;
    ddpc_mem_stats stats;
} device_cache_;

static device_cache_ caches_[DDPC_MAX_DEVICES];
static pthread_once_t caches_once_ = PTHREAD_ONCE_INIT;

static void caches_init_(void) {
    for (int i = 0; i < DDPC_MAX_DEVICES; i++) pthread_mutex_init(&caches_[i].mu, NULL);
}

/* Frees every cached block of one device; the cache mutex is held. */
static ddpc_status release_cached_(int device, device_cache_ *c) {
    ddpc_status st = DDPC_OK;
    int prev = 0;
    CUDACHECK(cudaGetDevice(&prev));
    CUDACHECK(cudaSetDevice(device));
    while (c->free_list) {
        ddpc_block *b = c->free_list;
        c->free_list = b->next;
        cudaError_t e = cudaFree(b->ptr);
        if (e != cudaSuccess && st == DDPC_OK)
            st = DDPC_ERROR(DDPC_ERR_CUDA, "cudaFree failed: %s", cudaGetErrorString(e));
        c->stats.reserved -= b->size;
        free(b);
    }
    cudaSetDevice(prev);
    return st;
}

static ddpc_status device_alloc_(int device, size_t nbytes, ddpc_block **out) {
    CHECK(ddpc_cuda_require(device));
    pthread_once(&caches_once_, caches_init_);
    size_t size = ddpc_device_size_class(nbytes);
    device_cache_ *c = &caches_[device];
    ddpc_status st = DDPC_OK;
    pthread_mutex_lock(&c->mu);
    ddpc_block **link = &c->free_list;
    while (*link && (*link)->size != size) link = &(*link)->next;
    ddpc_block *b = *link;
    if (b) {
        *link = b->next;
    } else {
        b = calloc(1, sizeof *b);
        if (!b) {
            st = DDPC_ERROR(DDPC_ERR_OOM, "out of host memory for a block header");
            goto out_;
        }
        int prev = 0;
        ddpc_cuda_mark_initialized();
        CUDACHECKGOTO(cudaGetDevice(&prev), st, fail_);
        CUDACHECKGOTO(cudaSetDevice(device), st, fail_);
        cudaError_t e = cudaMalloc(&b->ptr, size);
        if (e == cudaErrorMemoryAllocation && c->free_list) { /* give the cache back and retry once */
            cudaGetLastError();
            release_cached_(device, c);
            cudaSetDevice(device);
            e = cudaMalloc(&b->ptr, size);
        }
        cudaSetDevice(prev);
        if (e != cudaSuccess) {
            cudaGetLastError();
            st = DDPC_ERROR(e == cudaErrorMemoryAllocation ? DDPC_ERR_DEVICE_OOM : DDPC_ERR_CUDA,
                            "cudaMalloc of %zu bytes on cuda:%d failed: %s (%zu bytes allocated, %zu reserved by ddpc)",
                            size, device, cudaGetErrorString(e), c->stats.allocated, c->stats.reserved);
            goto fail_;
        }
        b->size = size;
        b->device = device;
        b->kind = DDPC_MEM_DEVICE;
        c->stats.reserved += size;
        if (c->stats.reserved > c->stats.peak_reserved) c->stats.peak_reserved = c->stats.reserved;
        c->stats.num_device_mallocs++;
    }
    b->next = NULL;
    c->stats.allocated += size;
    if (c->stats.allocated > c->stats.peak_allocated) c->stats.peak_allocated = c->stats.allocated;
    *out = b;
    goto out_;
fail_:
    free(b);
out_:
    pthread_mutex_unlock(&c->mu);
    return st;
}

static void device_free_(ddpc_block *b) {
    device_cache_ *c = &caches_[b->device];
    pthread_mutex_lock(&c->mu);
    c->stats.allocated -= b->size;
    b->next = c->free_list;
    c->free_list = b;
    pthread_mutex_unlock(&c->mu);
}

ddpc_status ddpc_device_mem_stats(int device, ddpc_mem_stats *out) {
    CHECK(ddpc_cuda_require(device));
    pthread_once(&caches_once_, caches_init_);
    pthread_mutex_lock(&caches_[device].mu);
    *out = caches_[device].stats;
    pthread_mutex_unlock(&caches_[device].mu);
    return DDPC_OK;
}

ddpc_status ddpc_device_reset_peak(int device) {
    CHECK(ddpc_cuda_require(device));
    pthread_once(&caches_once_, caches_init_);
    pthread_mutex_lock(&caches_[device].mu);
    caches_[device].stats.peak_allocated = caches_[device].stats.allocated;
    caches_[device].stats.peak_reserved = caches_[device].stats.reserved;
    pthread_mutex_unlock(&caches_[device].mu);
    return DDPC_OK;
}

ddpc_status ddpc_device_empty_cache(int device) {
    CHECK(ddpc_cuda_require(device));
    pthread_once(&caches_once_, caches_init_);
    /* Blocks in the cache may still be read by queued work on the compute stream. */
    CHECK(ddpc_cuda_synchronize(device));
    pthread_mutex_lock(&caches_[device].mu);
    ddpc_status st = release_cached_(device, &caches_[device]);
    pthread_mutex_unlock(&caches_[device].mu);
    return st;
}

static ddpc_status pinned_alloc_(size_t nbytes, void **ptr) {
    ddpc_cuda_mark_initialized();
    CUDACHECK(cudaHostAlloc(ptr, nbytes ? nbytes : 1, cudaHostAllocPortable));
    return DDPC_OK;
}

static void pinned_free_(void *ptr) { cudaFreeHost(ptr); }

static void forget_use_(ddpc_block *b) {
    if (!b->use_event) return;
    cudaEventSynchronize((cudaEvent_t)b->use_event); /* the memory goes away: the copy must be over */
    cudaEventDestroy((cudaEvent_t)b->use_event);
    b->use_event = NULL;
}

ddpc_status ddpc_block_record_use(ddpc_block *b, int device, void *stream) {
    if (b->kind != DDPC_MEM_PINNED) return DDPC_OK;
    if (b->use_event && b->use_device != device) forget_use_(b); /* an event records on its own device only */
    int prev;
    CHECK(ddpc_cuda_enter(device, &prev));
    cudaError_t e = cudaSuccess;
    if (!b->use_event) {
        cudaEvent_t ev;
        e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
        if (e == cudaSuccess) b->use_event = ev, b->use_device = device;
    }
    if (e == cudaSuccess) e = cudaEventRecord((cudaEvent_t)b->use_event, (cudaStream_t)stream);
    ddpc_cuda_leave(prev);
    CUDACHECK(e);
    return DDPC_OK;
}

int ddpc_block_busy(ddpc_block *b) {
    if (!b || !b->use_event) return 0;
    cudaError_t e = cudaEventQuery((cudaEvent_t)b->use_event);
    /* Neither a copy still running nor one that failed (it reads nothing
     * more) may stay the thread's last error, which the next kernel launch's
     * check would report as its own. */
    if (e != cudaSuccess) cudaGetLastError();
    return e == cudaErrorNotReady;
}

#else

static ddpc_status device_alloc_(int device, size_t nbytes, ddpc_block **out) {
    (void)nbytes;
    (void)out;
    return ddpc_cuda_require(device);
}
static void device_free_(ddpc_block *b) { (void)b; }
ddpc_status ddpc_device_mem_stats(int device, ddpc_mem_stats *out) {
    memset(out, 0, sizeof *out);
    return ddpc_cuda_require(device);
}
ddpc_status ddpc_device_reset_peak(int device) { return ddpc_cuda_require(device); }
ddpc_status ddpc_device_empty_cache(int device) { return ddpc_cuda_require(device); }
static ddpc_status pinned_alloc_(size_t nbytes, void **ptr) {
    (void)nbytes;
    (void)ptr;
    return ddpc_cuda_require(0);
}
static void pinned_free_(void *ptr) { (void)ptr; }
static void forget_use_(ddpc_block *b) { (void)b; }

ddpc_status ddpc_block_record_use(ddpc_block *b, int device, void *stream) {
    (void)b, (void)stream;
    return ddpc_cuda_require(device);
}

int ddpc_block_busy(ddpc_block *b) {
    (void)b;
    return 0;
}

#endif

ddpc_status ddpc_alloc(int device, size_t nbytes, int pinned, ddpc_block **out) {
    *out = NULL;
    if (device != DDPC_CPU) return device_alloc_(device, nbytes, out);
    ddpc_block *b = calloc(1, sizeof *b);
    if (!b) return DDPC_ERROR(DDPC_ERR_OOM, "out of host memory for a block header");
    b->device = DDPC_CPU;
    b->size = nbytes;
    ddpc_status st;
    if (pinned && ddpc_cuda_device_count() > 0) {
        b->kind = DDPC_MEM_PINNED;
        st = pinned_alloc_(nbytes, &b->ptr);
    } else {
        /* Without a GPU there is nothing to pin for; page alignment keeps the
         * buffer usable for O_DIRECT-style reads and shared mappings. */
        b->kind = DDPC_MEM_HOST;
        st = host_alloc_(nbytes, pinned ? PAGE_ALIGN : HOST_ALIGN, &b->ptr);
    }
    if (st != DDPC_OK) {
        free(b);
        return st;
    }
    *out = b;
    return DDPC_OK;
}

void ddpc_free(ddpc_block *b) {
    if (!b) return;
    switch (b->kind) {
    case DDPC_MEM_DEVICE:
        device_free_(b);
        return;
    case DDPC_MEM_PINNED:
        forget_use_(b);
        pinned_free_(b->ptr);
        break;
    case DDPC_MEM_HOST:
        free(b->ptr);
        break;
    }
    free(b);
}

/* Host, pinned and caching device allocators. */
#include "alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "device.h"
#include "pool.h"

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
    int prev;
    CHECK(ddpc_cuda_enter(device, &prev));
    while (c->free_list) {
        ddpc_block *b = c->free_list;
        c->free_list = b->next;
        cudaError_t e = cudaFree(b->ptr);
        if (e != cudaSuccess && st == DDPC_OK)
            st = DDPC_ERROR(DDPC_ERR_CUDA, "cudaFree failed: %s", cudaGetErrorString(e));
        c->stats.reserved -= b->size;
        free(b);
    }
    ddpc_cuda_leave(prev);
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
        int prev;
        ddpc_cuda_mark_initialized();
        CHECKGOTO(ddpc_cuda_enter(device, &prev), st, fail_);
        cudaError_t e = cudaMalloc(&b->ptr, size);
        if (e == cudaErrorMemoryAllocation && c->free_list) { /* give the cache back and retry once */
            cudaGetLastError();
            /* Cached blocks may still be in use by work queued on any of the
             * device's streams, and cudaFree only "may" wait for that work:
             * wait here, as ddpc_device_empty_cache does. */
            e = cudaDeviceSynchronize();
            if (e == cudaSuccess) {
                release_cached_(device, c); /* enters `device` itself, and leaves it current */
                e = cudaMalloc(&b->ptr, size);
            }
        }
        ddpc_cuda_leave(prev);
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

/* Freed pinned blocks are kept for reuse, up to 1 GiB (see pool.h); the
 * cache is freed by ddpc_pinned_empty_cache, which Python calls when a
 * process group is destroyed and at exit. A forked child forgets its
 * parent's cached blocks: its CUDA calls would fail, and the memory is not
 * its own to free. */
static pthread_mutex_t pinned_mu_ = PTHREAD_MUTEX_INITIALIZER;
static ddpc_pool pinned_pool_ = {pinned_alloc_, pinned_free_, (size_t)1 << 30, NULL, 0};
static pthread_once_t pinned_once_ = PTHREAD_ONCE_INIT;

static void pinned_lock_(void) { pthread_mutex_lock(&pinned_mu_); }
static void pinned_unlock_(void) { pthread_mutex_unlock(&pinned_mu_); }
static void pinned_child_(void) {
    ddpc_pool_forget(&pinned_pool_);
    pthread_mutex_unlock(&pinned_mu_);
}
/* Unchecked: without the handlers a forked child would only free its parent's
 * blocks through CUDA calls that fail, which it ignores. */
static void pinned_fork_handlers_(void) { (void)pthread_atfork(pinned_lock_, pinned_unlock_, pinned_child_); }

static ddpc_status pinned_get_(size_t nbytes, ddpc_block **out) {
    pthread_once(&pinned_once_, pinned_fork_handlers_);
    pinned_lock_();
    ddpc_status st = ddpc_pool_get(&pinned_pool_, nbytes, out);
    pinned_unlock_();
    if (st == DDPC_OK) (*out)->kind = DDPC_MEM_PINNED;
    return st;
}

static void pinned_put_(ddpc_block *b) {
    pinned_lock_();
    ddpc_pool_put(&pinned_pool_, b);
    pinned_unlock_();
}

size_t ddpc_pinned_empty_cache(void) {
    pinned_lock_();
    size_t freed = ddpc_pool_release(&pinned_pool_);
    pinned_unlock_();
    return freed;
}

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
static ddpc_status pinned_get_(size_t nbytes, ddpc_block **out) {
    (void)nbytes;
    *out = NULL;
    return ddpc_cuda_require(0);
}
static void pinned_put_(ddpc_block *b) { free(b); }
size_t ddpc_pinned_empty_cache(void) { return 0; }
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

/* ---- shared memory ---------------------------------------------------------------- */

#define SHARED_MAGIC 0x316d687363706464ull /* "ddpcshm1" */
#define SHARED_HEADER 64                   /* keeps the data HOST_ALIGN-aligned */

typedef struct {
    uint64_t magic;
    uint64_t nbytes;       /* data bytes after the header */
    _Atomic int64_t refs;  /* see alloc.h */
} shared_header_;

typedef struct shared_segment_ {
    char name[48];
    shared_header_ *header; /* start of the mapping */
    size_t map_len;
    pid_t holder;           /* the process whose reference this mapping holds; 0 for none */
    struct shared_segment_ *prev, *next;
} shared_segment_;

/* Every segment this process maps, so that an ending process can drop its references. */
static shared_segment_ *segments_;
static pthread_mutex_t segments_mu_ = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint64_t next_segment_;
static pthread_once_t atfork_once_ = PTHREAD_ONCE_INIT;
static int atfork_rc_;

static void segments_lock_(void) { pthread_mutex_lock(&segments_mu_); }
static void segments_unlock_(void) { pthread_mutex_unlock(&segments_mu_); }

/* A thread may be freeing a segment (with the GIL released) while another
 * forks: holding the lock across fork keeps the child's list whole and its lock free. */
static void atfork_init_(void) { atfork_rc_ = pthread_atfork(segments_lock_, segments_unlock_, segments_unlock_); }

static ddpc_status segments_ready_(void) {
    pthread_once(&atfork_once_, atfork_init_);
    if (atfork_rc_ != 0)
        return DDPC_ERROR(DDPC_ERR_SYS, "pthread_atfork for the shared-memory segment list failed: %s",
                          strerror(atfork_rc_));
    return DDPC_OK;
}

/* Drops the reference `s` holds for this process, if it holds one; the last
 * reference unlinks the name. Called with segments_mu_ held. */
static ddpc_status drop_reference_(shared_segment_ *s) {
    if (s->holder != getpid()) return DDPC_OK;
    s->holder = 0;
    if (atomic_fetch_sub(&s->header->refs, 1) != 1) return DDPC_OK;
    /* ENOENT: the name is gone already, which is all that was wanted. */
    if (shm_unlink(s->name) == -1 && errno != ENOENT)
        return DDPC_ERROR(DDPC_ERR_SYS, "shm_unlink(%s) failed: %s", s->name, strerror(errno));
    return DDPC_OK;
}

/* Maps `fd` whole into `s`, and makes `b` the block of its data. */
static ddpc_status map_segment_(shared_segment_ *s, int fd, size_t len, ddpc_block *b) {
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return DDPC_ERROR(DDPC_ERR_SYS, "mmap of %zu bytes of shared-memory segment %s failed: %s", len, s->name,
                          strerror(errno));
    s->header = p;
    s->map_len = len;
    b->ptr = (char *)p + SHARED_HEADER;
    b->size = len - SHARED_HEADER;
    b->device = DDPC_CPU;
    b->kind = DDPC_MEM_SHARED;
    b->segment = s;
    return DDPC_OK;
}

static void register_segment_(shared_segment_ *s) {
    s->holder = getpid();
    segments_lock_();
    s->prev = NULL;
    s->next = segments_;
    if (segments_) segments_->prev = s;
    segments_ = s;
    segments_unlock_();
}

/* The block and segment records of a new mapping, zeroed. */
static ddpc_status new_segment_(ddpc_block **b, shared_segment_ **s) {
    *b = calloc(1, sizeof **b);
    *s = calloc(1, sizeof **s);
    if (*b && *s) return DDPC_OK;
    free(*b);
    free(*s);
    *b = NULL;
    *s = NULL;
    return DDPC_ERROR(DDPC_ERR_OOM, "out of host memory for a shared block header");
}

ddpc_status ddpc_alloc_shared(size_t nbytes, ddpc_block **out) {
    *out = NULL;
    if (nbytes > (size_t)INT64_MAX - SHARED_HEADER)
        return DDPC_ERROR(DDPC_ERR_ARG, "%zu bytes of shared memory is more than a segment can hold", nbytes);
    CHECK(segments_ready_());
    const size_t len = SHARED_HEADER + nbytes;
    ddpc_status st = DDPC_OK;
    ddpc_block *b = NULL;
    shared_segment_ *s = NULL;
    int fd = -1;
    CHECKGOTO(new_segment_(&b, &s), st, fail_);
    /* O_EXCL: a name left behind by a killed process that had this pid is
     * skipped, never taken over. */
    for (int tries = 0; tries < 1000; tries++) {
        snprintf(s->name, sizeof s->name, "/ddpc_%d_%llu", (int)getpid(),
                 (unsigned long long)atomic_fetch_add(&next_segment_, 1));
        fd = shm_open(s->name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
        if (fd != -1 || errno != EEXIST) break;
    }
    if (fd == -1) {
        st = DDPC_ERROR(DDPC_ERR_SYS, "shm_open(%s) for %zu bytes of shared memory failed: %s", s->name, nbytes,
                        strerror(errno));
        goto fail_;
    }
    if (ftruncate(fd, (off_t)len) == -1) {
        st = DDPC_ERROR(DDPC_ERR_SYS, "ftruncate of shared-memory segment %s to %zu bytes failed: %s", s->name, len,
                        strerror(errno));
        goto unlink_;
    }
    /* Reserving the pages now makes a full /dev/shm an error here; otherwise
     * the first write to a page that can't be had kills the process (SIGBUS). */
    int rc;
    while ((rc = posix_fallocate(fd, 0, (off_t)len)) == EINTR) {}
    if (rc != 0) {
        st = DDPC_ERROR(DDPC_ERR_SYS, "posix_fallocate of %zu bytes for shared-memory segment %s failed: %s%s", len,
                        s->name, strerror(rc), rc == ENOSPC ? " (/dev/shm is full)" : "");
        goto unlink_;
    }
    CHECKGOTO(map_segment_(s, fd, len, b), st, unlink_);
    rc = close(fd);
    fd = -1;
    if (rc == -1) {
        st = DDPC_ERROR(DDPC_ERR_SYS, "close of shared-memory segment %s failed: %s", s->name, strerror(errno));
        munmap(s->header, len);
        goto unlink_;
    }
    s->header->magic = SHARED_MAGIC;
    s->header->nbytes = nbytes;
    atomic_init(&s->header->refs, 1);
    register_segment_(s);
    *out = b;
    return DDPC_OK;
unlink_:
    shm_unlink(s->name);
fail_:
    if (fd != -1) close(fd);
    free(s);
    free(b);
    return st;
}

ddpc_status ddpc_open_shared(const char *name, ddpc_block **out) {
    *out = NULL;
    if (strncmp(name, "/ddpc_", 6) != 0 || strlen(name) >= sizeof ((shared_segment_ *)0)->name ||
        strchr(name + 1, '/'))
        return DDPC_ERROR(DDPC_ERR_ARG, "'%s' is not the name of a ddpc shared-memory segment", name);
    CHECK(segments_ready_());
    ddpc_status st = DDPC_OK;
    ddpc_block *b = NULL;
    shared_segment_ *s = NULL;
    int fd = -1;
    CHECKGOTO(new_segment_(&b, &s), st, fail_);
    strcpy(s->name, name);
    fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
    if (fd == -1) {
        st = DDPC_ERROR(DDPC_ERR_SYS, "shm_open(%s) failed: %s%s", name, strerror(errno),
                        errno == ENOENT ? " (every process that held it had released it; a name sent once opens once)"
                                        : "");
        goto fail_;
    }
    struct stat sb;
    if (fstat(fd, &sb) == -1) {
        st = DDPC_ERROR(DDPC_ERR_SYS, "fstat of shared-memory segment %s failed: %s", name, strerror(errno));
        goto fail_;
    }
    if (sb.st_size < SHARED_HEADER) {
        st = DDPC_ERROR(DDPC_ERR_ARG, "%s is %lld bytes long, too short for a ddpc shared-memory segment", name,
                        (long long)sb.st_size);
        goto fail_;
    }
    CHECKGOTO(map_segment_(s, fd, (size_t)sb.st_size, b), st, fail_);
    if (s->header->magic != SHARED_MAGIC || s->header->nbytes != b->size) {
        st = DDPC_ERROR(DDPC_ERR_ARG, "%s is not a ddpc shared-memory segment (its header does not match)", name);
        goto unmap_;
    }
    int rc = close(fd);
    fd = -1;
    if (rc == -1) {
        st = DDPC_ERROR(DDPC_ERR_SYS, "close of shared-memory segment %s failed: %s", name, strerror(errno));
        goto unmap_;
    }
    register_segment_(s);
    *out = b;
    return DDPC_OK;
unmap_:
    munmap(s->header, s->map_len);
fail_:
    if (fd != -1) close(fd);
    free(s);
    free(b);
    return st;
}

ddpc_status ddpc_shared_send(ddpc_block *b) {
    shared_segment_ *s = b->segment;
    int64_t refs = atomic_load(&s->header->refs);
    do {
        /* None left means the name is unlinked: a receiver could not open it. */
        if (refs <= 0)
            return DDPC_ERROR(DDPC_ERR_ARG, "shared-memory segment %s was released by every process that held it, "
                              "so it can't be sent any more", s->name);
    } while (!atomic_compare_exchange_weak(&s->header->refs, &refs, refs + 1));
    return DDPC_OK;
}

ddpc_status ddpc_shared_unsend(ddpc_block *b) {
    shared_segment_ *s = b->segment;
    /* This process's own reference stays: a receiver that dropped its
     * reference before the signal came is not taken for one that did not. */
    const int64_t floor = s->holder == getpid() ? 1 : 0;
    int64_t refs = atomic_load(&s->header->refs);
    do {
        if (refs <= floor) return DDPC_OK;
    } while (!atomic_compare_exchange_weak(&s->header->refs, &refs, refs - 1));
    if (refs == 1 && shm_unlink(s->name) == -1 && errno != ENOENT)
        return DDPC_ERROR(DDPC_ERR_SYS, "shm_unlink(%s) failed: %s", s->name, strerror(errno));
    return DDPC_OK;
}

const char *ddpc_shared_name(const ddpc_block *b) { return ((const shared_segment_ *)b->segment)->name; }

static ddpc_status free_shared_(ddpc_block *b) {
    shared_segment_ *s = b->segment;
    segments_lock_();
    if (s->prev) s->prev->next = s->next;
    else segments_ = s->next;
    if (s->next) s->next->prev = s->prev;
    ddpc_status st = drop_reference_(s);
    segments_unlock_();
    if (munmap(s->header, s->map_len) == -1 && st == DDPC_OK)
        st = DDPC_ERROR(DDPC_ERR_SYS, "munmap of shared-memory segment %s failed: %s", s->name, strerror(errno));
    free(s);
    free(b);
    return st;
}

ddpc_status ddpc_shared_release_all(void) {
    ddpc_status st = DDPC_OK;
    segments_lock_();
    for (shared_segment_ *s = segments_; s; s = s->next) {
        ddpc_status r = drop_reference_(s);
        if (st == DDPC_OK) st = r;
    }
    segments_unlock_();
    return st;
}

/* ---- cached host memory --------------------------------------------------------- */

/* Freed host blocks of 1 MiB and more are kept for reuse, up to
 * DDPC_HOST_CACHE_MB (256 MiB unless set; 0 turns the cache off). A fresh
 * block of that size comes from mmap, and its first write faults in each
 * page, a microsecond or more apiece: glibc keeps one freed large block in
 * its heap, but trims the heap when two or more are freed together, so
 * `x.abs().sqrt()` of 6 MB paid 3000 page faults, 10 times the work itself.
 * Under AddressSanitizer nothing is cached, so a use after free is still
 * caught. A forked child keeps the cached blocks: they are its own copies. */
#define HOST_CACHE_MIN ((size_t)1 << 20)
#define HOST_CACHE_DEFAULT_MB 256

#if defined(__SANITIZE_ADDRESS__)
#define HOST_CACHE_OFF 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HOST_CACHE_OFF 1
#endif
#endif

static ddpc_status host_page_alloc_(size_t nbytes, void **ptr) { return host_alloc_(nbytes, PAGE_ALIGN, ptr); }

static pthread_mutex_t host_mu_ = PTHREAD_MUTEX_INITIALIZER;
static ddpc_pool host_pool_ = {host_page_alloc_, free, 0, NULL, 0};
static pthread_once_t host_once_ = PTHREAD_ONCE_INIT;

static void host_lock_(void) { pthread_mutex_lock(&host_mu_); }
static void host_unlock_(void) { pthread_mutex_unlock(&host_mu_); }

/* The limit from the environment, read once; fork handlers keep the lock usable in a child. */
static void host_cache_init_(void) {
#ifndef HOST_CACHE_OFF
    size_t mb = HOST_CACHE_DEFAULT_MB;
    const char *env = getenv("DDPC_HOST_CACHE_MB");
    if (env && *env) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(env, &end, 10);
        if (errno == 0 && *end == '\0' && v <= SIZE_MAX >> 20) mb = (size_t)v;
    }
    host_pool_.limit = mb << 20;
#endif
    (void)pthread_atfork(host_lock_, host_unlock_, host_unlock_);
}

/* The limit is fixed once read: a block taken from the cache always goes back to it. */
static int host_cache_on_(void) {
    pthread_once(&host_once_, host_cache_init_);
    return host_pool_.limit > 0;
}

static ddpc_status host_cached_get_(size_t nbytes, ddpc_block **out) {
    host_lock_();
    ddpc_status st = ddpc_pool_get(&host_pool_, nbytes, out);
    host_unlock_();
    if (st == DDPC_OK) (*out)->kind = DDPC_MEM_HOST_CACHED;
    return st;
}

static void host_cached_put_(ddpc_block *b) {
    host_lock_();
    ddpc_pool_put(&host_pool_, b);
    host_unlock_();
}

size_t ddpc_host_empty_cache(void) {
    pthread_once(&host_once_, host_cache_init_);
    host_lock_();
    size_t freed = ddpc_pool_release(&host_pool_);
    host_unlock_();
    return freed;
}

void ddpc_host_cache_info(size_t *cached, size_t *limit) {
    pthread_once(&host_once_, host_cache_init_);
    host_lock_();
    *cached = host_pool_.cached_bytes, *limit = host_pool_.limit;
    host_unlock_();
}

ddpc_status ddpc_alloc(int device, size_t nbytes, int pinned, ddpc_block **out) {
    *out = NULL;
    if (device != DDPC_CPU) return device_alloc_(device, nbytes, out);
    if (pinned && ddpc_cuda_device_count() > 0) return pinned_get_(nbytes, out);
    if (nbytes >= HOST_CACHE_MIN && host_cache_on_()) return host_cached_get_(nbytes, out);
    ddpc_block *b = calloc(1, sizeof *b);
    if (!b) return DDPC_ERROR(DDPC_ERR_OOM, "out of host memory for a block header");
    b->device = DDPC_CPU;
    b->size = nbytes;
    /* Without a GPU there is nothing to pin for; page alignment keeps the
     * buffer usable for O_DIRECT-style reads and shared mappings. */
    b->kind = DDPC_MEM_HOST;
    ddpc_status st = host_alloc_(nbytes, pinned ? PAGE_ALIGN : HOST_ALIGN, &b->ptr);
    if (st != DDPC_OK) {
        free(b);
        return st;
    }
    *out = b;
    return DDPC_OK;
}

ddpc_status ddpc_free(ddpc_block *b) {
    if (!b) return DDPC_OK;
    switch (b->kind) {
    case DDPC_MEM_DEVICE:
        device_free_(b);
        return DDPC_OK;
    case DDPC_MEM_SHARED:
        return free_shared_(b);
    case DDPC_MEM_PINNED:
        forget_use_(b); /* waits for the last copy out of it: the block may be handed out again */
        pinned_put_(b);
        return DDPC_OK;
    case DDPC_MEM_HOST_CACHED:
        host_cached_put_(b);
        return DDPC_OK;
    case DDPC_MEM_HOST:
        free(b->ptr);
        break;
    }
    free(b);
    return DDPC_OK;
}

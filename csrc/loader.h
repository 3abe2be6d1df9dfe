/* The batch loader: producer threads gather rows by index into a ring of
 * `prefetch` batches, and on a GPU stage them through pinned memory onto the
 * device's copy stream.
 *
 * One loader serves one pass over an index list split into batches (batch b
 * is indices[offsets[b] .. offsets[b+1])). The caller owns the ring order:
 * batch b goes into slot b % prefetch with ddpc_loader_submit and is taken
 * back with ddpc_loader_wait. Producer threads touch only the plain memory
 * described here, never a Python object, so they run without the GIL.
 *
 * On request (gpu_gather) a GPU loader gathers rows on the device instead:
 * the sources are registered with CUDA in place and the device reads their
 * rows over the bus, with no producer threads and no staging (loader.c). */
#ifndef DDPC_LOADER_H
#define DDPC_LOADER_H

#include "common.h"

#define DDPC_LOADER_MAX_SOURCES 16

typedef enum {
    DDPC_SOURCE_MEMORY = 0, /* rows are read from `base` */
    DDPC_SOURCE_MAPPED,     /* from `base`, a read-only file mapping whose resident pages may be dropped */
    DDPC_SOURCE_FILE,       /* with pread from `fd` at file_offset + i * row_bytes: the file is never mapped */
} ddpc_source_kind;

typedef struct {
    ddpc_source_kind kind;
    const char *base;  /* row 0 (MEMORY, MAPPED) */
    size_t row_bytes;
    int64_t rows;
    int fd;            /* FILE */
    uint64_t file_offset;
} ddpc_loader_source;

typedef struct {
    const ddpc_loader_source *sources;
    int nsources;
    const int64_t *indices;  /* copied by init; each must be in [0, rows) */
    int64_t nindices;
    const int64_t *offsets;  /* copied by init; nbatches + 1 entries, non-decreasing from 0 */
    int64_t nbatches;
    int prefetch;            /* slots in the ring */
    int nthreads;            /* producer threads */
    int device;              /* DDPC_CPU, or the CUDA ordinal the batches go to */
    size_t resident_budget;  /* resident file pages (bytes) the loader may add before dropping them */
    int gpu_gather;          /* GPU: gather on the device from the sources in place where they allow it */
} ddpc_loader_config;

typedef struct ddpc_loader ddpc_loader;

/* Checks the configuration (every index in range), starts the threads and,
 * for a GPU, allocates pinned staging for each slot; with gpu_gather, where
 * every source can be read by the device in place, registers them and copies
 * the index list to the device instead. */
ddpc_status ddpc_loader_init(const ddpc_loader_config *cfg, ddpc_loader **out);
/* Rows in batch b. */
int64_t ddpc_loader_batch_rows(const ddpc_loader *l, int64_t batch);
/* Queues batch `batch` into slot batch % prefetch, gathered into dst[s] for
 * each source s: host memory on the CPU, device memory on a GPU (allocated on
 * the compute stream; the copy waits for the work queued there so far). The
 * slot must be free: new, or taken back by ddpc_loader_wait. */
ddpc_status ddpc_loader_submit(ddpc_loader *l, int64_t batch, void *const *dst);
/* Blocks until batch `batch` is gathered, gathering rows of it meanwhile (on
 * a GPU: until its copy is queued, and the compute stream then waits for it,
 * with no host synchronisation), and frees its slot. Call with the GIL released. */
ddpc_status ddpc_loader_wait(ddpc_loader *l, int64_t batch);
/* Where a loader's time went since init, in seconds. The producers' work is
 * counted in thread-seconds over every thread that did it, the caller's
 * share inside ddpc_loader_wait included. */
typedef struct {
    int64_t batches;       /* taken back by ddpc_loader_wait */
    int64_t chunks;        /* pieces of rows gathered */
    double gather_s;       /* gathering rows */
    double copy_issue_s;   /* queuing the copies of finished batches to the device (direct: the gathers) */
    double staging_wait_s; /* waiting for a copy out of a slot's staging before gathering into it again */
    double wait_s;         /* in ddpc_loader_wait, in all */
    double wait_idle_s;    /* ... of it asleep, with no rows left to gather */
    double elapsed_s;      /* since init */
    int direct;            /* 1: the device gathers the rows itself (gpu_gather, and nothing made it stage) */
} ddpc_loader_stats;
void ddpc_loader_get_stats(ddpc_loader *l, ddpc_loader_stats *out);
/* Stops and joins the threads (finishing no queued batch) and frees everything. */
void ddpc_loader_free(ddpc_loader *l);

/* Registers _C.Loader, _C.NpyFile and the sampler functions (loader_py.c;
 * PyObject is struct _object, so this header needs no Python.h). */
struct _object;
int ddpc_loader_register(struct _object *module);

#endif

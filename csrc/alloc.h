/* Allocators: aligned host memory, pinned host memory for staging, host
 * memory in a named shared-memory segment, and a caching device allocator.
 *
 * cudaMalloc/cudaFree synchronise the device and cost far more than a training
 * step's kernels, so freed device blocks go back to a per-device cache and are
 * handed out again for requests of the same size class. Every device op runs
 * on the device's compute stream, so a block reused by a later op is ordered
 * after the last op that used it without any host synchronisation. */
#ifndef DDPC_ALLOC_H
#define DDPC_ALLOC_H

#include "common.h"

/* DDPC_MEM_HOST_CACHED: host memory of 1 MiB or more, which goes back to a cache when freed (alloc.c). */
typedef enum { DDPC_MEM_HOST = 0, DDPC_MEM_PINNED, DDPC_MEM_DEVICE, DDPC_MEM_SHARED, DDPC_MEM_HOST_CACHED } ddpc_mem_kind;

typedef struct ddpc_block {
    void *ptr;
    size_t size;      /* bytes usable (the size class for device blocks) */
    int device;       /* DDPC_CPU for host kinds */
    ddpc_mem_kind kind;
    struct ddpc_block *next; /* free-list link while cached */
    void *use_event;  /* pinned: event after the last asynchronous copy out of it (cudaEvent_t) */
    int use_device;   /* the device that event belongs to */
    void *segment;    /* shared: the segment's mapping and name (alloc.c) */
} ddpc_block;

/* `device` DDPC_CPU gives host memory (pinned when `pinned` and a GPU is
 * usable; plain page-aligned memory otherwise). Zero bytes is allowed. */
ddpc_status ddpc_alloc(int device, size_t nbytes, int pinned, ddpc_block **out);
/* Fails only for a shared block (its munmap or shm_unlink); the block is gone either way. */
ddpc_status ddpc_free(ddpc_block *block);

/* Shared blocks live in a POSIX shared-memory segment ("/ddpc_<pid>_<n>")
 * that other processes on the host map by name, so writes in one are seen by
 * all. The segment opens with a header holding a count of references: one
 * for each process that holds it (the one that made it, one per open), and
 * one for each name sent but not opened yet, so the segment outlives its
 * creator until the receiver has it. Freeing a block drops its process's
 * reference; the last reference dropped unlinks the name, and the memory goes
 * with the last mapping. A process killed with SIGKILL never drops its
 * references, so its segments stay in /dev/shm; a name sent and never opened
 * keeps its segment there too.
 *
 * A forked child inherits the mapping but no reference: it may use and send
 * the memory, and its exit (or free) leaves the count alone. */
ddpc_status ddpc_alloc_shared(size_t nbytes, ddpc_block **out);
/* Maps the segment `name`, taking over the reference ddpc_shared_send took
 * for it. */
ddpc_status ddpc_open_shared(const char *name, ddpc_block **out);
/* Takes a reference for a process the name is about to be sent to. */
ddpc_status ddpc_shared_send(ddpc_block *block);
/* Drops a reference ddpc_shared_send took for a process that will never
 * drop it (killed by a signal), unlinking the name where it was the last;
 * never this process's own, while it holds the segment. */
ddpc_status ddpc_shared_unsend(ddpc_block *block);
const char *ddpc_shared_name(const ddpc_block *block);
/* Drops every reference this process holds, for a process about to end;
 * the mappings stay usable until freed. */
ddpc_status ddpc_shared_release_all(void);

/* Pinned blocks are read or written by copies the host does not wait for:
 * each such copy records its completion in the block (on `stream` of
 * `device`), and a block is busy until the last one is done, so those who
 * recycle pinned memory (ddpc_free, the loader's batch pool) wait for it.
 * Only the last copy is tracked. */
ddpc_status ddpc_block_record_use(ddpc_block *block, int device, void *stream);
int ddpc_block_busy(ddpc_block *block);
/* Freed pinned blocks are cached for reuse (alloc.c); this frees the cached
 * ones and returns how many bytes that was. */
size_t ddpc_pinned_empty_cache(void);
/* The same for freed host blocks of 1 MiB and more. */
size_t ddpc_host_empty_cache(void);
/* The bytes the host cache holds now, and the most it may hold. */
void ddpc_host_cache_info(size_t *cached, size_t *limit);

typedef struct {
    size_t allocated;  /* bytes in blocks handed out */
    size_t reserved;   /* bytes obtained from cudaMalloc (handed out + cached) */
    size_t peak_allocated;
    size_t peak_reserved;
    uint64_t num_device_mallocs; /* cudaMalloc calls made so far */
} ddpc_mem_stats;

ddpc_status ddpc_device_mem_stats(int device, ddpc_mem_stats *out);
/* Starts peak_allocated and peak_reserved again from what is allocated and reserved now. */
ddpc_status ddpc_device_reset_peak(int device);
/* Returns every cached free block to cudaFree. */
ddpc_status ddpc_device_empty_cache(int device);
/* Size class a device request of `nbytes` is rounded to. */
size_t ddpc_device_size_class(size_t nbytes);

#endif

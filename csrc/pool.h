/* A cache of host blocks by size class, over an allocator given as two
 * functions: alloc.c keeps freed pinned blocks in one, since cudaHostAlloc
 * and cudaFreeHost each synchronise the device, far too slow for the staging
 * buffer of every collective on the cpu backend. Only bookkeeping lives here
 * (no locking, no CUDA), so the unit tests drive it with malloc and free: the
 * caller serialises the calls. */
#ifndef DDPC_POOL_H
#define DDPC_POOL_H

#include "alloc.h"

typedef struct {
    ddpc_status (*alloc)(size_t nbytes, void **ptr);
    void (*free)(void *ptr);
    size_t limit;          /* bytes kept cached at most: a block that would pass it is freed */
    ddpc_block *cached;    /* free blocks, the last one given back first */
    size_t cached_bytes;
} ddpc_pool;

/* The size blocks are allocated at: whole pages below 1 MiB, whole MiB from there. */
size_t ddpc_pool_size_class(size_t nbytes);
/* A block of at least `nbytes` (its `size` is the size class): a cached one
 * of that class, else a new one. Where allocating fails while blocks are
 * cached, the cache is freed and the allocation tried once more. The block's
 * device is DDPC_CPU; its kind is the caller's to set. */
ddpc_status ddpc_pool_get(ddpc_pool *p, size_t nbytes, ddpc_block **out);
/* Takes back a block from ddpc_pool_get: cached, or freed past the limit. */
void ddpc_pool_put(ddpc_pool *p, ddpc_block *b);
/* Frees every cached block; returns the bytes freed. */
size_t ddpc_pool_release(ddpc_pool *p);
/* Forgets every cached block without freeing its memory, for a forked child,
 * where that memory is its parent's to free. */
void ddpc_pool_forget(ddpc_pool *p);

#endif

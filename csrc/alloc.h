/* Allocators: aligned host memory, pinned host memory for staging, and a
 * caching device allocator.
 *
 * cudaMalloc/cudaFree synchronise the device and cost far more than a training
 * step's kernels, so freed device blocks go back to a per-device cache and are
 * handed out again for requests of the same size class. Every device op runs
 * on the device's compute stream, so a block reused by a later op is ordered
 * after the last op that used it without any host synchronisation. */
#ifndef DDPC_ALLOC_H
#define DDPC_ALLOC_H

#include "common.h"

typedef enum { DDPC_MEM_HOST = 0, DDPC_MEM_PINNED, DDPC_MEM_DEVICE } ddpc_mem_kind;

typedef struct ddpc_block {
    void *ptr;
    size_t size;      /* bytes usable (the size class for device blocks) */
    int device;       /* DDPC_CPU for host kinds */
    ddpc_mem_kind kind;
    struct ddpc_block *next; /* free-list link while cached */
    void *use_event;  /* pinned: event after the last asynchronous copy out of it (cudaEvent_t) */
    int use_device;   /* the device that event belongs to */
} ddpc_block;

/* `device` DDPC_CPU gives host memory (pinned when `pinned` and a GPU is
 * usable; plain page-aligned memory otherwise). Zero bytes is allowed. */
ddpc_status ddpc_alloc(int device, size_t nbytes, int pinned, ddpc_block **out);
void ddpc_free(ddpc_block *block);

/* Pinned blocks are read by copies the host does not wait for: each such
 * copy records its completion in the block (on `stream` of `device`), and a
 * block is busy until the last one is done, so those who recycle pinned
 * memory (the loader's batch pool) wait for it. Only the last copy is tracked. */
ddpc_status ddpc_block_record_use(ddpc_block *block, int device, void *stream);
int ddpc_block_busy(ddpc_block *block);

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

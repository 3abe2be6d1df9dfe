/* The size-class cache of host blocks (see pool.h). */
#include "pool.h"

#include <stdlib.h>

#include "device.h"

#define POOL_PAGE 4096u
#define POOL_LARGE (1u << 20)

size_t ddpc_pool_size_class(size_t nbytes) {
    size_t r = nbytes < POOL_LARGE ? POOL_PAGE : POOL_LARGE;
    if (nbytes == 0) return r;
    return (nbytes + r - 1) / r * r;
}

static void free_block_(ddpc_pool *p, ddpc_block *b) {
    p->free(b->ptr);
    free(b);
}

ddpc_status ddpc_pool_get(ddpc_pool *p, size_t nbytes, ddpc_block **out) {
    *out = NULL;
    size_t size = ddpc_pool_size_class(nbytes);
    if (size < nbytes) return DDPC_ERROR(DDPC_ERR_OOM, "%zu bytes of host memory is more than can be allocated", nbytes);
    for (ddpc_block **link = &p->cached; *link; link = &(*link)->next) {
        ddpc_block *b = *link;
        if (b->size != size) continue;
        *link = b->next;
        b->next = NULL;
        p->cached_bytes -= size;
        *out = b;
        return DDPC_OK;
    }
    ddpc_block *b = calloc(1, sizeof *b);
    if (!b) return DDPC_ERROR(DDPC_ERR_OOM, "out of host memory for a block header");
    ddpc_status st = p->alloc(size, &b->ptr);
    if (st != DDPC_OK && p->cached) { /* give the cache back and try once more */
        ddpc_clear_error();
        ddpc_pool_release(p);
        st = p->alloc(size, &b->ptr);
    }
    if (st != DDPC_OK) {
        free(b);
        return st;
    }
    b->size = size;
    b->device = DDPC_CPU;
    *out = b;
    return DDPC_OK;
}

void ddpc_pool_put(ddpc_pool *p, ddpc_block *b) {
    if (b->size > p->limit || p->cached_bytes > p->limit - b->size) {
        free_block_(p, b);
        return;
    }
    b->next = p->cached;
    p->cached = b;
    p->cached_bytes += b->size;
}

size_t ddpc_pool_release(ddpc_pool *p) {
    size_t freed = p->cached_bytes;
    while (p->cached) {
        ddpc_block *b = p->cached;
        p->cached = b->next;
        free_block_(p, b);
    }
    p->cached_bytes = 0;
    return freed;
}

void ddpc_pool_forget(ddpc_pool *p) {
    p->cached = NULL;
    p->cached_bytes = 0;
}

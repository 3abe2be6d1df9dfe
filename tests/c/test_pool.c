/* Unit tests of the size-class cache of host blocks (pool.c) over a counting
 * malloc/free: reuse within a class, the byte limit, giving the cache back
 * when allocating fails, release and forget. Built with AddressSanitizer by
 * tests/test_c_units.py, which reports a leaked or doubly freed block. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#include "pool.h"

static int allocs_, frees_;
static size_t budget_ = SIZE_MAX; /* bytes the fake allocator may hand out at once */
static size_t live_;

static ddpc_status counting_alloc_(size_t nbytes, void **ptr) {
    if (nbytes > budget_ - live_) return DDPC_ERROR(DDPC_ERR_CUDA, "cudaHostAlloc of %zu bytes failed", nbytes);
    /* The size just before the memory, so that the free can give it back to the budget. */
    size_t *p = malloc(sizeof(size_t) + nbytes);
    if (!p) return DDPC_ERROR(DDPC_ERR_OOM, "malloc failed");
    *p = nbytes;
    live_ += nbytes;
    allocs_++;
    *ptr = p + 1;
    return DDPC_OK;
}

static void counting_free_(void *ptr) {
    size_t *p = (size_t *)ptr - 1;
    live_ -= *p;
    frees_++;
    free(p);
}

static void reset_(void) { allocs_ = frees_ = 0, budget_ = SIZE_MAX, live_ = 0; }

static void test_size_classes_(void) {
    EXPECT(ddpc_pool_size_class(0) == 4096 && ddpc_pool_size_class(1) == 4096 && ddpc_pool_size_class(4096) == 4096);
    EXPECT(ddpc_pool_size_class(4097) == 8192);
    EXPECT(ddpc_pool_size_class((1u << 20) - 1) == 1u << 20 && ddpc_pool_size_class(1u << 20) == 1u << 20);
    EXPECT(ddpc_pool_size_class((1u << 20) + 1) == 2u << 20);
    ddpc_pool p = {counting_alloc_, counting_free_, 1u << 20, NULL, 0};
    ddpc_block *b = (ddpc_block *)1;
    EXPECT(ddpc_pool_get(&p, SIZE_MAX - 5, &b) == DDPC_ERR_OOM && b == NULL, "a size past SIZE_MAX was not refused");
    ddpc_clear_error();
}

static void test_reuse_within_a_class_(void) {
    reset_();
    ddpc_pool p = {counting_alloc_, counting_free_, 1u << 20, NULL, 0};
    ddpc_block *a, *b, *c;
    EXPECT(ddpc_pool_get(&p, 1000, &a) == DDPC_OK && a->size == 4096 && a->device == -1 && a->next == NULL);
    memset(a->ptr, 0xab, a->size); /* the whole class is usable: ASan flags a write past the block */
    void *first = a->ptr;
    ddpc_pool_put(&p, a);
    EXPECT(p.cached_bytes == 4096 && allocs_ == 1 && frees_ == 0);
    EXPECT(ddpc_pool_get(&p, 3000, &b) == DDPC_OK && b->ptr == first && allocs_ == 1, "the cached block was not reused");
    EXPECT(p.cached == NULL && p.cached_bytes == 0);
    EXPECT(ddpc_pool_get(&p, 5000, &c) == DDPC_OK && c->size == 8192 && c->ptr != first && allocs_ == 2);
    ddpc_pool_put(&p, b);
    ddpc_pool_put(&p, c);
    EXPECT(p.cached_bytes == 4096 + 8192);
    /* The last block given back is the first one a request of its class finds. */
    EXPECT(ddpc_pool_get(&p, 8000, &c) == DDPC_OK && c->size == 8192 && p.cached_bytes == 4096 && allocs_ == 2);
    ddpc_pool_put(&p, c);
    EXPECT(ddpc_pool_release(&p) == 4096 + 8192);
    EXPECT(p.cached == NULL && p.cached_bytes == 0 && frees_ == 2 && live_ == 0);
    EXPECT(ddpc_pool_release(&p) == 0 && frees_ == 2);
}

static void test_limit_(void) {
    reset_();
    ddpc_pool p = {counting_alloc_, counting_free_, 16384, NULL, 0};
    ddpc_block *b[4];
    for (int i = 0; i < 3; i++) EXPECT(ddpc_pool_get(&p, 8192, &b[i]) == DDPC_OK);
    EXPECT(ddpc_pool_get(&p, 20000, &b[3]) == DDPC_OK && b[3]->size == 20480);
    ddpc_pool_put(&p, b[3]); /* larger than the limit on its own: freed */
    EXPECT(frees_ == 1 && p.cached_bytes == 0);
    ddpc_pool_put(&p, b[0]);
    ddpc_pool_put(&p, b[1]);
    EXPECT(frees_ == 1 && p.cached_bytes == 16384);
    ddpc_pool_put(&p, b[2]); /* would pass the limit: freed */
    EXPECT(frees_ == 2 && p.cached_bytes == 16384);
    ddpc_pool_release(&p);
    EXPECT(allocs_ == frees_ && live_ == 0);
}

static void test_failed_allocation_gives_the_cache_back_(void) {
    reset_();
    ddpc_pool p = {counting_alloc_, counting_free_, 1u << 20, NULL, 0};
    ddpc_block *small, *big;
    EXPECT(ddpc_pool_get(&p, 4096, &small) == DDPC_OK);
    ddpc_pool_put(&p, small);
    budget_ = 3 * 4096; /* a 3-page block fits only once the cached page is freed */
    EXPECT(ddpc_pool_get(&p, 3 * 4096, &big) == DDPC_OK && big->size == 3 * 4096);
    EXPECT(p.cached == NULL && frees_ == 1 && allocs_ == 2);
    DDPC_ERROR(DDPC_ERR_ARG, "a later error"); /* recorded only where the retried failure's was cleared */
    EXPECT(strstr(ddpc_last_error(), "a later error") != NULL, "the retried failure's error was left recorded");
    ddpc_clear_error();
    ddpc_block *none = (ddpc_block *)1;
    EXPECT(ddpc_pool_get(&p, 4096, &none) == DDPC_ERR_CUDA && none == NULL, "an allocation past the budget passed");
    EXPECT(strstr(ddpc_last_error(), "cudaHostAlloc of 4096 bytes failed") != NULL);
    ddpc_clear_error();
    ddpc_pool_put(&p, big);
    ddpc_pool_release(&p);
    EXPECT(allocs_ == frees_ && live_ == 0);
}

/* Memory that is not the pool's to free (a forked child's view of its parent's). */
static unsigned char arena_[4][4096];
static int arena_next_;

static ddpc_status arena_alloc_(size_t nbytes, void **ptr) {
    if (nbytes > sizeof arena_[0] || arena_next_ == 4) return DDPC_ERROR(DDPC_ERR_OOM, "arena full");
    *ptr = arena_[arena_next_++];
    return DDPC_OK;
}

static void arena_free_(void *ptr) {
    (void)ptr;
    frees_++;
}

static void test_forget_frees_nothing_(void) {
    reset_();
    ddpc_pool p = {arena_alloc_, arena_free_, 1u << 20, NULL, 0};
    ddpc_block *a, *b;
    EXPECT(ddpc_pool_get(&p, 10, &a) == DDPC_OK && ddpc_pool_get(&p, 10, &b) == DDPC_OK);
    ddpc_pool_put(&p, a);
    ddpc_pool_put(&p, b);
    ddpc_block *headers[2] = {p.cached, p.cached->next}; /* the forked child's copies, freed here by the test */
    ddpc_pool_forget(&p);
    EXPECT(p.cached == NULL && p.cached_bytes == 0 && frees_ == 0);
    EXPECT(ddpc_pool_release(&p) == 0 && frees_ == 0);
    free(headers[0]);
    free(headers[1]);
}

int main(void) {
    test_size_classes_();
    test_reuse_within_a_class_();
    test_limit_();
    test_failed_allocation_gives_the_cache_back_();
    test_forget_frees_nothing_();
    return check_finish("pool");
}

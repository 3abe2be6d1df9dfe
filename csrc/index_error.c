/* The messages of indices out of range, and the host's taking of the errors
 * that GPUs record (see index_error.h). */
#include "index_error.h"

#include <pthread.h>
#include <stdio.h>

static const char *const names_[DDPC_IX_NOPS] = {
    [DDPC_IX_GATHER] = "gather",
    [DDPC_IX_SCATTER] = "scatter",
    [DDPC_IX_SCATTER_ADD] = "scatter_add",
    [DDPC_IX_SCATTER_REDUCE] = "scatter_reduce",
    [DDPC_IX_INDEX_ROWS] = "index rows",
    [DDPC_IX_PUT_ROWS] = "put rows",
    [DDPC_IX_INDEX_ADD_ROWS] = "embedding gradient",
    [DDPC_IX_EMBEDDING_BAG] = "embedding_bag",
    [DDPC_IX_EMBEDDING_BAG_BACKWARD] = "embedding_bag backward",
    [DDPC_IX_EMBEDDING_BAG_WEIGHTS_BACKWARD] = "embedding_bag per-sample weights backward",
    [DDPC_IX_PUT_DIM] = "gradient of max/min along a dim",
    [DDPC_IX_MAX_POOL_BACKWARD] = "max pool backward",
    [DDPC_IX_SEARCHSORTED] = "searchsorted",
    [DDPC_IX_CROSS_ENTROPY] = "cross entropy",
    [DDPC_IX_CTC_LOSS] = "ctc_loss",
    [DDPC_IX_CTC_LOSS_BACKWARD] = "ctc_loss backward",
};

const char *ddpc_index_op_name(ddpc_index_op op) {
    return (unsigned)op < DDPC_IX_NOPS ? names_[op] : "an op taking indices";
}

/* e's message without the op's name; the status it is raised with. */
static ddpc_status message_(const ddpc_index_error *e, char *buf, size_t n) {
    long long i = (long long)e->index, bound = (long long)e->bound, at = (long long)e->at;
    switch (e->kind) {
    case DDPC_INDEX_BAD_INDEX: break;
    case DDPC_INDEX_BAD_ARGMAX:
        snprintf(buf, n, "argmax %lld is out of range for %lld rows", i, bound);
        return DDPC_ERR_INDEX;
    case DDPC_INDEX_BAD_FIRST_OFFSET:
        snprintf(buf, n, "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from "
                 "position 0. However, got %lld", i);
        return DDPC_ERR_ARG;
    case DDPC_INDEX_BAD_OFFSET_ORDER:
        snprintf(buf, n, "offsets must be non-decreasing, got offsets[%lld] = %lld after %lld", at, i,
                 (long long)e->other);
        return DDPC_ERR_ARG;
    case DDPC_INDEX_BAD_LAST_OFFSET:
        snprintf(buf, n, "offsets[-1] can not be greater than input's length %lld but got offsets[-1] of %lld", bound,
                 i);
        return DDPC_ERR_ARG;
    default:
        snprintf(buf, n, "a check of unknown kind %d failed for index %lld", (int)e->kind, i);
        return DDPC_ERR_INTERNAL;
    }
    switch (e->op) {
    case DDPC_IX_GATHER: case DDPC_IX_SCATTER: case DDPC_IX_SCATTER_ADD: case DDPC_IX_SCATTER_REDUCE:
        snprintf(buf, n, "index %lld is out of range for dim %lld of size %lld", i, at, bound);
        break;
    case DDPC_IX_INDEX_ROWS: case DDPC_IX_PUT_ROWS: case DDPC_IX_INDEX_ADD_ROWS: case DDPC_IX_EMBEDDING_BAG:
    case DDPC_IX_EMBEDDING_BAG_BACKWARD: case DDPC_IX_EMBEDDING_BAG_WEIGHTS_BACKWARD:
        snprintf(buf, n, "index %lld is out of range for %lld rows", i, bound);
        break;
    case DDPC_IX_PUT_DIM: snprintf(buf, n, "index %lld is out of range for a dim of %lld", i, bound); break;
    case DDPC_IX_MAX_POOL_BACKWARD: snprintf(buf, n, "index %lld is outside a plane of %lld elements", i, bound); break;
    case DDPC_IX_SEARCHSORTED: snprintf(buf, n, "sorter index %lld is out of range for lines of %lld", i, bound); break;
    case DDPC_IX_CROSS_ENTROPY:
        snprintf(buf, n, "target %lld of row %lld is not a class in [0, %lld)", i, at, bound);
        break;
    case DDPC_IX_CTC_LOSS: case DDPC_IX_CTC_LOSS_BACKWARD:
        snprintf(buf, n, "target label %lld of sample %lld is not a class in [0, %lld) other than the blank %lld", i,
                 at, bound, (long long)e->other);
        break;
    default:
        snprintf(buf, n, "index %lld is out of range for %lld", i, bound);
        return DDPC_ERR_INTERNAL;
    }
    return DDPC_ERR_INDEX;
}

ddpc_status ddpc_index_error_at(const char *file, int line, const ddpc_index_error *e, const char *suffix) {
    char msg[512];
    ddpc_status st = message_(e, msg, sizeof msg);
    return ddpc_error_at(st, file, line, "%s: %s%s", ddpc_index_op_name((ddpc_index_op)e->op), msg, suffix);
}

/* Serialises the host threads' takes: one reads and clears a record while
 * no other can clear it and let a kernel fill it again under the reader (a
 * device moves a record only out of CLEAR, the host only out of SET). */
static pthread_mutex_t take_mu_ = PTHREAD_MUTEX_INITIALIZER;

static int is_set_(uint32_t word) { return (word & DDPC_INDEX_STATE_MASK) == DDPC_INDEX_SET; }

int ddpc_index_error_take(ddpc_index_error *record, ddpc_index_error *out) {
    if (!is_set_(__atomic_load_n(&record->state, __ATOMIC_ACQUIRE))) return 0;
    pthread_mutex_lock(&take_mu_);
    uint32_t word = __atomic_load_n(&record->state, __ATOMIC_ACQUIRE);
    int taken = is_set_(word);
    if (taken) {
        *out = *record;
        __atomic_store_n(&record->state, DDPC_INDEX_WORD((word >> 2) + 1, DDPC_INDEX_CLEAR), __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&take_mu_);
    return taken;
}

// The kernels' side of kernels/index_check.h: an index compared with its
// bound, and an index out of range recorded for the host.
#pragma once

#include <cuda_runtime.h>

#include "index_check.h"

// Keeps the error in the device's record unless the record already holds
// one, or has moved on to a later epoch (the host has raised an error since
// this kernel was launched). Of the threads of a warp that meet errors
// together only one tries, after a look at the state: the record keeps the
// first error only, and a launch full of bad indices then sends few
// accesses over the bus to the host memory the record lives in. The fields
// reach the host before the state says SET, so a host that reads the record
// without a synchronisation never sees half of it. Out of line: the checks
// that call it stay small.
static __device__ __noinline__ void record_index_error(ddpc_k_index_check check, ddpc_index_kind kind, int64_t index,
                                                       int64_t bound, int64_t at, int64_t other) {
    unsigned lane;
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    if (lane != (unsigned)(__ffs(__activemask()) - 1)) return;
    ddpc_index_error *r = check.record;
    const uint32_t clear = DDPC_INDEX_WORD(check.epoch, DDPC_INDEX_CLEAR);
    if (*(volatile uint32_t *)&r->state != clear ||
        atomicCAS(&r->state, clear, DDPC_INDEX_WORD(check.epoch, DDPC_INDEX_WRITING)) != clear)
        return;
    r->index = index, r->bound = bound, r->at = at, r->other = other;
    r->op = check.op, r->kind = (int32_t)kind;
    __threadfence_system();
    *(volatile uint32_t *)&r->state = DDPC_INDEX_WORD(check.epoch, DDPC_INDEX_SET);
}

// Whether 0 <= i < bound, in one compare (bound >= 0); an index outside is
// recorded (`at` as the op's message uses it), and the caller skips it.
static __device__ __forceinline__ bool index_in_range(ddpc_k_index_check check, int64_t i, int64_t bound,
                                                      int64_t at = 0) {
    if ((uint64_t)i < (uint64_t)bound) return true;
    record_index_error(check, DDPC_INDEX_BAD_INDEX, i, bound, at, 0);
    return false;
}

/* Element-wise reduction of several equally long arrays, for every dtype and
 * reduction op the communicator supports. */
#ifndef DDPC_COMM_REDUCE_H
#define DDPC_COMM_REDUCE_H

#include <stddef.h>

#include "dtype.h"

typedef enum {
    DDPC_RED_SUM = 0,
    DDPC_RED_AVG,
    DDPC_RED_MIN,
    DDPC_RED_MAX,
    DDPC_RED_PROD,
    DDPC_RED_BOR,     /* bitwise or (of bytes: also gathers disjoint data through an all-reduce) */
    DDPC_RED_BAND,    /* bitwise and */
    DDPC_RED_BXOR,    /* bitwise exclusive or */
    DDPC_NREDOPS
} ddpc_redop;

const char *ddpc_redop_name(ddpc_redop op);

/* The op that carries out `op` on elements of `dt`: on bool (bytes of 0 and
 * 1) a sum is a logical or (MAX) and a product a logical and (MIN), as
 * PyTorch's (its NCCL backend runs them so too); -1 for AVG, which bool
 * elements do not have. Any other dtype: `op` itself. */
int ddpc_redop_on(ddpc_redop op, ddpc_dtype dt);

/* dst[i] = op(srcs[0][i], ..., srcs[nsrc-1][i]), then divided by `divisor`
 * when it is > 1 (integers truncate). AVG reduces as SUM: the caller passes
 * the divisor once all contributions are in. dst may alias srcs[0] only.
 * float16 and bfloat16 accumulate in float and round once; an integer
 * average sums in a wider type, so it is exact. Other integer sums, and
 * products, wrap around. The bitwise ops work byte by byte, whatever the
 * dtype (for integers that is element by element). */
void ddpc_reduce(ddpc_dtype dt, ddpc_redop op, void *dst, const void *const *srcs, int nsrc, size_t count,
                 int divisor);

#endif

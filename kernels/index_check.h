/* Indices out of range on a GPU. A kernel that takes indices checks each
 * against its bound; one outside is skipped, never read or written through
 * (an access out of bounds would poison the device's CUDA context), and the
 * first one a device meets is kept in that device's record: host memory
 * mapped into the device (csrc/device.c), which the host reads without a
 * synchronisation wherever it already waits for the device, and raises as
 * the op's host loop raises the same index (csrc/index_error.c). Plain C:
 * it compiles with cc and with nvcc. Included through kernels.h. */
#ifndef DDPC_INDEX_CHECK_H
#define DDPC_INDEX_CHECK_H

#include <stdint.h>

/* A record's states. A kernel moves it from CLEAR to WRITING (by
 * compare-and-swap, so the first error wins) and, its fields written, to
 * SET; the host takes a SET record and puts it back to CLEAR. Neither side
 * writes a record in a state the other one moves it out of.
 *
 * The state word also holds the record's epoch (DDPC_INDEX_WORD), which the
 * host advances with each error it takes. A kernel claims only a CLEAR word
 * of the epoch it was launched in, so once an error has been raised, the
 * work queued before that (the kernel that failed, still running when a
 * launch took its error, included) reports nothing more: each failure is
 * raised once, and the work queued after the raise is checked afresh. */
enum { DDPC_INDEX_CLEAR = 0, DDPC_INDEX_WRITING = 1, DDPC_INDEX_SET = 2 };
#define DDPC_INDEX_STATE_MASK 3u
#define DDPC_INDEX_WORD(epoch, state) ((uint32_t)(epoch) << 2 | (uint32_t)(state))

/* Which of an op's checks failed: its indices (each op's own rule and
 * message), or one of an embedding bag's other inputs. */
typedef enum {
    DDPC_INDEX_BAD_INDEX = 0,
    DDPC_INDEX_BAD_ARGMAX,       /* a max bag's argmax outside [-1, rows) */
    DDPC_INDEX_BAD_FIRST_OFFSET, /* offsets[0] is not 0 */
    DDPC_INDEX_BAD_OFFSET_ORDER, /* offsets[at] decreases from the one before (`other`) */
    DDPC_INDEX_BAD_LAST_OFFSET   /* the last offset is past the indices (`bound` of them) */
} ddpc_index_kind;

typedef struct {
    int64_t index; /* the value out of range */
    int64_t bound; /* what it must stay below: the size it indexes */
    int64_t at;    /* where: the dim indexed, the row or sample that holds the index, the offset's position */
    int64_t other; /* the blank a CTC label must differ from, or the offset a decreasing one follows */
    uint32_t state; /* DDPC_INDEX_WORD(epoch, state) */
    int32_t op;     /* a ddpc_index_op (csrc/index_error.h): whose check, and so whose message */
    int32_t kind; /* a ddpc_index_kind */
} ddpc_index_error;

/* What a kernel that takes indices is launched with: its device's record
 * (as a device pointer), the record's epoch at the launch, and the op to
 * name when an index is out of range. */
typedef struct {
    ddpc_index_error *record;
    uint32_t epoch;
    int32_t op;
} ddpc_k_index_check;

#endif

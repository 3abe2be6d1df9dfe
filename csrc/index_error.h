/* The errors of indices out of range: one message per op and check, which
 * the host ops raise from their own checks and the host raises for what a
 * GPU kernel recorded (kernels/index_check.h), so that an index out of range
 * reads the same on every device. */
#ifndef DDPC_INDEX_ERROR_H
#define DDPC_INDEX_ERROR_H

#include "common.h"
#include "index_check.h"

/* The ops whose indices are checked, by message:
 * "<op>: index I is out of range for dim AT of size BOUND" (GATHER to SCATTER_REDUCE),
 * "<op>: index I is out of range for BOUND rows" (INDEX_ROWS to EMBEDDING_BAG_WEIGHTS_BACKWARD),
 * and one message each for the rest. */
typedef enum {
    DDPC_IX_GATHER = 0,
    DDPC_IX_SCATTER,
    DDPC_IX_SCATTER_ADD,
    DDPC_IX_SCATTER_REDUCE,
    DDPC_IX_INDEX_ROWS,
    DDPC_IX_PUT_ROWS,
    DDPC_IX_INDEX_ADD_ROWS,
    DDPC_IX_EMBEDDING_BAG,
    DDPC_IX_EMBEDDING_BAG_BACKWARD,
    DDPC_IX_EMBEDDING_BAG_WEIGHTS_BACKWARD,
    DDPC_IX_PUT_DIM,           /* the gradient of max/min along a dim: "... for a dim of BOUND" */
    DDPC_IX_MAX_POOL_BACKWARD, /* "... is outside a plane of BOUND elements" (-1, no element, is allowed) */
    DDPC_IX_SEARCHSORTED,      /* the sorter: "sorter index I is out of range for lines of BOUND" */
    DDPC_IX_CROSS_ENTROPY,     /* "target I of row AT is not a class in [0, BOUND)" */
    DDPC_IX_CTC_LOSS,          /* "target label I of sample AT is not a class in [0, BOUND) other than the blank OTHER" */
    DDPC_IX_CTC_LOSS_BACKWARD,
    DDPC_IX_NOPS
} ddpc_index_op;

/* The op's name, as its messages give it. */
const char *ddpc_index_op_name(ddpc_index_op op);

/* Records e's message as ddpc_error_at does, with `suffix` appended, and
 * returns its status: DDPC_ERR_INDEX, or DDPC_ERR_ARG for an embedding bag's
 * malformed offsets (as the host op's other argument errors). */
ddpc_status ddpc_index_error_at(const char *file, int line, const ddpc_index_error *e, const char *suffix);

/* A host op's error for the index that its check found out of range, the
 * fields of ddpc_index_error given by name: DDPC_INDEX_ERROR(.op = DDPC_IX_GATHER,
 * .index = i, .bound = n, .at = dim). */
#define DDPC_INDEX_ERROR(...) ddpc_index_error_at(__FILE__, __LINE__, &(const ddpc_index_error){__VA_ARGS__}, "")

/* Copies the error out of a record that a device has SET into *out and
 * clears the record in the next epoch (the host's one write to it),
 * returning 1; returns 0, touching nothing, where the record holds no error
 * or one still being written. Safe from any number of threads: each error
 * is taken once. */
int ddpc_index_error_take(ddpc_index_error *record, ddpc_index_error *out);

#endif

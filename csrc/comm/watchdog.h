/* The watchdog and flight recorder of the NCCL backend.
 *
 * Every collective enqueued on a communicator is recorded in a ring buffer
 * (sequence number, op, count, dtype, state, enqueue time) and, while it runs,
 * in a pending list with its timeout and deadline. The timeout is fixed when
 * the collective is enqueued (its own, or the communicator's then); the
 * deadline is that timeout after the collective could start, that is after
 * the one before it on the stream completed (as seen by the next poll), not
 * after it was enqueued: one queued behind a long collective is not timed
 * out for the time it waited. A watchdog thread polls the backend through
 * `ddpc_watchdog_ops` (for NCCL: ncclCommGetAsyncError, cudaEventQuery and
 * ncclCommAbort); on an asynchronous error or a passed deadline it aborts
 * the communicator and records a failure that every later call reports,
 * together with the recorder's last entries, so a user can see which rank
 * fell behind. The ops are a table so tests can drive the logic with fakes. */
#ifndef DDPC_COMM_WATCHDOG_H
#define DDPC_COMM_WATCHDOG_H

#include <pthread.h>
#include <stdint.h>

#include "common.h"

#define DDPC_FLIGHT_ENTRIES 32

typedef enum { DDPC_FLIGHT_ENQUEUED = 0, DDPC_FLIGHT_COMPLETED, DDPC_FLIGHT_FAILED, DDPC_FLIGHT_TIMED_OUT } ddpc_flight_state;

typedef struct {
    uint64_t seq;
    const char *op;      /* static string: "all_reduce", ... */
    int64_t count;
    const char *dtype;   /* static string */
    ddpc_flight_state state;
    double enqueued_at;  /* seconds, ddpc_watchdog_now() clock */
} ddpc_flight_entry;

/* A collective still running: its completion event, timeout and deadline. */
typedef struct {
    uint64_t seq;
    void *event;
    double timeout_s, deadline;
} ddpc_pending;

typedef struct {
    /* 0 when healthy, else non-zero with a description in msg. */
    int (*async_error)(void *ctx, char *msg, size_t n);
    /* 1 done, 0 still running, -1 failed (description in msg). */
    int (*query)(void *ctx, void *event, char *msg, size_t n);
    void (*abort)(void *ctx);
    void (*release_event)(void *ctx, void *event);
    /* Run first on the watchdog's thread, or NULL: the NCCL watchdog makes
     * its rank's GPU current there (else its first CUDA call would make a
     * context on GPU 0). */
    void (*thread_start)(void *ctx);
} ddpc_watchdog_ops;

typedef struct {
    ddpc_watchdog_ops ops;
    void *ctx;
    int rank, size;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    ddpc_flight_entry ring[DDPC_FLIGHT_ENTRIES];
    uint64_t next_seq;         /* entries recorded so far; ring index = seq % N */
    ddpc_pending *pending;     /* running collectives, oldest first */
    size_t npending, cap_pending;
    ddpc_status failed;        /* DDPC_OK while healthy */
    char fail_msg[8192];
    int stop, have_thread;
    double interval_s;
    pthread_t thread;
} ddpc_watchdog;

double ddpc_watchdog_now(void);
ddpc_status ddpc_watchdog_init(ddpc_watchdog *wd, const ddpc_watchdog_ops *ops, void *ctx, int rank, int size);
/* Starts the polling thread (interval in seconds). */
ddpc_status ddpc_watchdog_start(ddpc_watchdog *wd, double interval_s);
/* Stops the thread and releases the events of entries still pending. */
void ddpc_watchdog_free(ddpc_watchdog *wd);

/* Records a collective about to be enqueued, which must complete within
 * `timeout_s` once it can start; returns its sequence number. Fails with the
 * recorded failure if the communicator has already failed. */
ddpc_status ddpc_watchdog_record(ddpc_watchdog *wd, const char *op, int64_t count, const char *dtype, void *event,
                                 double timeout_s, uint64_t *seq);
/* One watchdog pass at time `now`: completes finished entries, and fails the
 * communicator on an async error or a passed deadline. Returns the failure. */
ddpc_status ddpc_watchdog_check(ddpc_watchdog *wd, double now);
/* The failure as the current error (DDPC_OK when healthy). */
ddpc_status ddpc_watchdog_error(ddpc_watchdog *wd);
/* The recorder's entries, oldest first, one line each, into buf. */
void ddpc_watchdog_format(ddpc_watchdog *wd, double now, char *buf, size_t n);
/* State of one recorded sequence number (COMPLETED once it left the ring). */
ddpc_flight_state ddpc_watchdog_state(ddpc_watchdog *wd, uint64_t seq);

#endif

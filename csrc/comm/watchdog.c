/* Watchdog thread, deadlines and the flight recorder of a communicator. */
#include "comm/watchdog.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *state_names_[] = {"enqueued", "completed", "failed", "timed out"};

double ddpc_watchdog_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

ddpc_status ddpc_watchdog_init(ddpc_watchdog *wd, const ddpc_watchdog_ops *ops, void *ctx, int rank, int size) {
    memset(wd, 0, sizeof *wd);
    wd->ops = *ops;
    wd->ctx = ctx;
    wd->rank = rank;
    wd->size = size;
    int rc = pthread_mutex_init(&wd->mu, NULL);
    if (rc) return DDPC_ERROR(DDPC_ERR_SYS, "pthread_mutex_init failed: %s", strerror(rc));
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    rc = pthread_cond_init(&wd->cond, &attr);
    pthread_condattr_destroy(&attr);
    if (rc) {
        pthread_mutex_destroy(&wd->mu);
        return DDPC_ERROR(DDPC_ERR_SYS, "pthread_cond_init failed: %s", strerror(rc));
    }
    return DDPC_OK;
}

static void *watchdog_main_(void *arg) {
    ddpc_watchdog *wd = arg;
    if (wd->ops.thread_start) wd->ops.thread_start(wd->ctx);
    pthread_mutex_lock(&wd->mu);
    while (!wd->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        double wake = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + wd->interval_s;
        ts.tv_sec = (time_t)wake;
        ts.tv_nsec = (long)((wake - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&wd->cond, &wd->mu, &ts);
        if (wd->stop) break;
        pthread_mutex_unlock(&wd->mu);
        ddpc_watchdog_check(wd, ddpc_watchdog_now());
        pthread_mutex_lock(&wd->mu);
    }
    pthread_mutex_unlock(&wd->mu);
    return NULL;
}

ddpc_status ddpc_watchdog_start(ddpc_watchdog *wd, double interval_s) {
    wd->interval_s = interval_s;
    int rc = pthread_create(&wd->thread, NULL, watchdog_main_, wd);
    if (rc) return DDPC_ERROR(DDPC_ERR_SYS, "could not start the watchdog thread: %s", strerror(rc));
    wd->have_thread = 1;
    return DDPC_OK;
}

void ddpc_watchdog_free(ddpc_watchdog *wd) {
    if (wd->have_thread) {
        pthread_mutex_lock(&wd->mu);
        wd->stop = 1;
        pthread_cond_signal(&wd->cond);
        pthread_mutex_unlock(&wd->mu);
        pthread_join(wd->thread, NULL);
        wd->have_thread = 0;
    }
    for (size_t i = 0; i < wd->npending; i++) wd->ops.release_event(wd->ctx, wd->pending[i].event);
    free(wd->pending);
    wd->pending = NULL;
    wd->npending = wd->cap_pending = 0;
    pthread_cond_destroy(&wd->cond);
    pthread_mutex_destroy(&wd->mu);
}

/* Formats the ring into buf; the mutex is held. */
static void format_locked_(ddpc_watchdog *wd, double now, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = '\0';
    uint64_t first = wd->next_seq > DDPC_FLIGHT_ENTRIES ? wd->next_seq - DDPC_FLIGHT_ENTRIES : 0;
    for (uint64_t s = first; s < wd->next_seq && used + 1 < n; s++) {
        const ddpc_flight_entry *e = &wd->ring[s % DDPC_FLIGHT_ENTRIES];
        int w = snprintf(buf + used, n - used, "  rank %d #%llu %s of %lld %s: %s (enqueued %.1f s ago)\n", wd->rank,
                         (unsigned long long)e->seq, e->op, (long long)e->count, e->dtype, state_names_[e->state],
                         now - e->enqueued_at);
        if (w < 0) break;
        used += (size_t)w < n - used ? (size_t)w : n - used - 1;
    }
}

void ddpc_watchdog_format(ddpc_watchdog *wd, double now, char *buf, size_t n) {
    pthread_mutex_lock(&wd->mu);
    format_locked_(wd, now, buf, n);
    pthread_mutex_unlock(&wd->mu);
}

/* Records the first failure and aborts the backend; the mutex is held. */
static void fail_locked_(ddpc_watchdog *wd, ddpc_status st, const char *what, double now) {
    if (wd->failed != DDPC_OK) return;
    wd->failed = st;
    char recent[3000];
    format_locked_(wd, now, recent, sizeof recent);
    snprintf(wd->fail_msg, sizeof wd->fail_msg,
             "%s; the communicator (rank %d of %d) was aborted, and every later collective on it fails.\n"
             "Last collectives of this rank (compare with the other ranks' to see which fell behind):\n%s",
             what, wd->rank, wd->size, recent);
    wd->ops.abort(wd->ctx);
}

/* The ring entry of `seq`, or NULL once it has been overwritten. */
static ddpc_flight_entry *entry_(ddpc_watchdog *wd, uint64_t seq) {
    if (seq >= wd->next_seq || seq + DDPC_FLIGHT_ENTRIES < wd->next_seq) return NULL;
    return &wd->ring[seq % DDPC_FLIGHT_ENTRIES];
}

static void set_state_(ddpc_watchdog *wd, uint64_t seq, ddpc_flight_state st) {
    ddpc_flight_entry *e = entry_(wd, seq);
    if (e) e->state = st;
}

static void describe_(ddpc_watchdog *wd, uint64_t seq, char *buf, size_t n) {
    ddpc_flight_entry *e = entry_(wd, seq);
    if (e) snprintf(buf, n, "%s of %lld %s (collective #%llu)", e->op, (long long)e->count, e->dtype,
                    (unsigned long long)seq);
    else snprintf(buf, n, "collective #%llu", (unsigned long long)seq);
}

ddpc_status ddpc_watchdog_check(ddpc_watchdog *wd, double now) {
    char msg[512] = "", what[1200], which[256];
    pthread_mutex_lock(&wd->mu);
    if (wd->failed == DDPC_OK && wd->ops.async_error(wd->ctx, msg, sizeof msg)) {
        snprintf(what, sizeof what, "NCCL reported an asynchronous error on rank %d: %s", wd->rank, msg);
        fail_locked_(wd, DDPC_ERR_DIST, what, now);
    }
    size_t kept = 0;
    for (size_t i = 0; i < wd->npending; i++) {
        ddpc_pending p = wd->pending[i];
        /* The collectives run one after another on the communicator's
         * stream: one queued behind another that was still pending when this
         * pass began has not started, so its time has not begun to run. */
        if (i > 0 && p.deadline < now + p.timeout_s) p.deadline = now + p.timeout_s;
        int q = wd->failed != DDPC_OK ? -2 : wd->ops.query(wd->ctx, p.event, msg, sizeof msg);
        if (q == 1) {
            set_state_(wd, p.seq, DDPC_FLIGHT_COMPLETED);
        } else if (q == -2) {
            set_state_(wd, p.seq, DDPC_FLIGHT_FAILED);
        } else if (q < 0) {
            set_state_(wd, p.seq, DDPC_FLIGHT_FAILED);
            describe_(wd, p.seq, which, sizeof which);
            snprintf(what, sizeof what, "%s failed on rank %d: %s", which, wd->rank, msg);
            fail_locked_(wd, DDPC_ERR_DIST, what, now);
        } else if (now > p.deadline) {
            ddpc_flight_entry *e = entry_(wd, p.seq);
            set_state_(wd, p.seq, DDPC_FLIGHT_TIMED_OUT);
            describe_(wd, p.seq, which, sizeof which);
            snprintf(what, sizeof what,
                     "%s did not complete within the %.1f s timeout on rank %d (waited %.1f s); "
                     "a peer is missing, stuck, or in a different collective",
                     which, p.timeout_s, wd->rank, e ? now - e->enqueued_at : p.timeout_s);
            fail_locked_(wd, DDPC_ERR_TIMEOUT, what, now);
            /* the abort ends every other pending collective too */
        } else {
            wd->pending[kept++] = p;
            continue;
        }
        wd->ops.release_event(wd->ctx, p.event);
    }
    wd->npending = kept;
    ddpc_status st = wd->failed;
    pthread_mutex_unlock(&wd->mu);
    return st;
}

ddpc_status ddpc_watchdog_error(ddpc_watchdog *wd) {
    pthread_mutex_lock(&wd->mu);
    ddpc_status st = wd->failed;
    if (st != DDPC_OK) DDPC_ERROR(st, "%s", wd->fail_msg);
    pthread_mutex_unlock(&wd->mu);
    return st;
}

ddpc_status ddpc_watchdog_record(ddpc_watchdog *wd, const char *op, int64_t count, const char *dtype, void *event,
                                 double timeout_s, uint64_t *seq) {
    CHECK(ddpc_watchdog_error(wd));
    ddpc_status st = DDPC_OK;
    pthread_mutex_lock(&wd->mu);
    if (wd->npending == wd->cap_pending) {
        size_t cap = wd->cap_pending ? 2 * wd->cap_pending : 16;
        ddpc_pending *p = realloc(wd->pending, cap * sizeof *p);
        if (!p) {
            st = DDPC_ERROR(DDPC_ERR_OOM, "out of memory tracking pending collectives");
            goto out_;
        }
        wd->pending = p;
        wd->cap_pending = cap;
    }
    double now = ddpc_watchdog_now();
    wd->ring[wd->next_seq % DDPC_FLIGHT_ENTRIES] = (ddpc_flight_entry){
        .seq = wd->next_seq, .op = op, .count = count, .dtype = dtype, .state = DDPC_FLIGHT_ENQUEUED,
        .enqueued_at = now};
    wd->pending[wd->npending++] =
        (ddpc_pending){.seq = wd->next_seq, .event = event, .timeout_s = timeout_s, .deadline = now + timeout_s};
    *seq = wd->next_seq++;
out_:
    pthread_mutex_unlock(&wd->mu);
    return st;
}

ddpc_flight_state ddpc_watchdog_state(ddpc_watchdog *wd, uint64_t seq) {
    pthread_mutex_lock(&wd->mu);
    ddpc_flight_entry *e = entry_(wd, seq);
    ddpc_flight_state st = e ? e->state : DDPC_FLIGHT_COMPLETED;
    pthread_mutex_unlock(&wd->mu);
    return st;
}

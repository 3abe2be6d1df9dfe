/* The NCCL watchdog's deadline logic and flight recorder, driven by fake
 * backend ops (no GPU needed). Built under AddressSanitizer by tests/test_c_core.py. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "check.h"

#include "comm/watchdog.h"


typedef struct {
    int async_error;
    int done[64];
    int failed_event;
    int aborts, released;
} fake_;

static int fake_async_(void *ctx, char *msg, size_t n) {
    fake_ *f = ctx;
    if (f->async_error) snprintf(msg, n, "remote process exited or there was a network error");
    return f->async_error;
}

static int fake_query_(void *ctx, void *event, char *msg, size_t n) {
    fake_ *f = ctx;
    int i = (int)(intptr_t)event - 1;
    if (i == f->failed_event) {
        snprintf(msg, n, "unspecified launch failure");
        return -1;
    }
    return f->done[i] ? 1 : 0;
}

static void fake_abort_(void *ctx) { ((fake_ *)ctx)->aborts++; }
static void fake_release_(void *ctx, void *event) {
    (void)event;
    ((fake_ *)ctx)->released++;
}

static const ddpc_watchdog_ops ops_ = {fake_async_, fake_query_, fake_abort_, fake_release_, NULL};
#define EV(i) ((void *)(intptr_t)((i) + 1))

static void test_timeout_aborts_and_reports_(void) {
    fake_ f = {.failed_event = -1};
    ddpc_watchdog wd;
    EXPECT(ddpc_watchdog_init(&wd, &ops_, &f, 1, 2) == DDPC_OK);
    uint64_t s0, s1, s2;
    EXPECT(ddpc_watchdog_record(&wd, "all_reduce", 1024, "float32", EV(0), 10.0, &s0) == DDPC_OK);
    EXPECT(ddpc_watchdog_record(&wd, "broadcast", 7, "int64", EV(1), 10.0, &s1) == DDPC_OK);
    EXPECT(ddpc_watchdog_record(&wd, "all_gather", 3, "bfloat16", EV(2), 10.0, &s2) == DDPC_OK);
    EXPECT(s0 == 0 && s1 == 1 && s2 == 2);
    double now = ddpc_watchdog_now();
    EXPECT(ddpc_watchdog_check(&wd, now + 1) == DDPC_OK);
    EXPECT(ddpc_watchdog_state(&wd, s0) == DDPC_FLIGHT_ENQUEUED);
    f.done[0] = 1;
    EXPECT(ddpc_watchdog_check(&wd, now + 2) == DDPC_OK);
    EXPECT(ddpc_watchdog_state(&wd, s0) == DDPC_FLIGHT_COMPLETED && f.released == 1);
    EXPECT(f.aborts == 0);
    /* #1 could start once #0 completed, at the pass at now + 2: its time runs from there. */
    EXPECT(ddpc_watchdog_check(&wd, now + 11) == DDPC_OK && f.aborts == 0);
    EXPECT(ddpc_watchdog_check(&wd, now + 13) == DDPC_ERR_TIMEOUT);
    EXPECT(f.aborts == 1);
    EXPECT(ddpc_watchdog_state(&wd, s1) == DDPC_FLIGHT_TIMED_OUT);
    EXPECT(ddpc_watchdog_state(&wd, s2) == DDPC_FLIGHT_FAILED);
    EXPECT(ddpc_watchdog_check(&wd, now + 14) == DDPC_ERR_TIMEOUT && f.aborts == 1);
    uint64_t s3;
    EXPECT(ddpc_watchdog_record(&wd, "barrier", 1, "float32", EV(3), 10.0, &s3) == DDPC_ERR_TIMEOUT);
    const char *msg = ddpc_last_error();
    EXPECT(strstr(msg, "broadcast of 7 int64 (collective #1) did not complete within the 10.0 s timeout on rank 1"));
    EXPECT(strstr(msg, "rank 1 #0 all_reduce of 1024 float32: completed"));
    EXPECT(strstr(msg, "rank 1 #1 broadcast of 7 int64: timed out"));
    EXPECT(strstr(msg, "rank 1 #2 all_gather of 3 bfloat16: enqueued"));
    ddpc_clear_error();
    ddpc_watchdog_free(&wd);
    EXPECT(f.released == 3);
}

/* A collective queued behind a long one gets the whole timeout once the
 * long one completes, and one stuck after it still times out. */
static void test_deadline_runs_from_the_start_(void) {
    fake_ f = {.failed_event = -1};
    ddpc_watchdog wd;
    EXPECT(ddpc_watchdog_init(&wd, &ops_, &f, 0, 2) == DDPC_OK);
    uint64_t s0, s1, s2;
    double now = ddpc_watchdog_now();
    EXPECT(ddpc_watchdog_record(&wd, "all_reduce", 1, "float32", EV(0), 10.0, &s0) == DDPC_OK);
    EXPECT(ddpc_watchdog_record(&wd, "all_reduce", 2, "float32", EV(1), 10.0, &s1) == DDPC_OK);
    EXPECT(ddpc_watchdog_record(&wd, "all_reduce", 3, "float32", EV(2), 10.0, &s2) == DDPC_OK);
    for (int t = 1; t <= 9; t++) EXPECT(ddpc_watchdog_check(&wd, now + t) == DDPC_OK);
    f.done[0] = 1; /* #0 took 9.5 s, within its timeout */
    EXPECT(ddpc_watchdog_check(&wd, now + 9.6) == DDPC_OK);
    EXPECT(ddpc_watchdog_state(&wd, s0) == DDPC_FLIGHT_COMPLETED);
    /* #1 started at 9.5: 15 s after enqueue is 5.5 s of its own, not a timeout. */
    EXPECT(ddpc_watchdog_check(&wd, now + 15) == DDPC_OK && f.aborts == 0);
    EXPECT(ddpc_watchdog_state(&wd, s1) == DDPC_FLIGHT_ENQUEUED);
    f.done[1] = 1;
    EXPECT(ddpc_watchdog_check(&wd, now + 19) == DDPC_OK && f.aborts == 0);
    /* #2, behind #1 until the pass at 19, never completes: it times out 10 s later. */
    EXPECT(ddpc_watchdog_check(&wd, now + 28.9) == DDPC_OK && f.aborts == 0);
    EXPECT(ddpc_watchdog_check(&wd, now + 29.1) == DDPC_ERR_TIMEOUT && f.aborts == 1);
    EXPECT(ddpc_watchdog_state(&wd, s2) == DDPC_FLIGHT_TIMED_OUT);
    EXPECT(ddpc_watchdog_error(&wd) == DDPC_ERR_TIMEOUT);
    EXPECT(strstr(ddpc_last_error(), "all_reduce of 3 float32 (collective #2) did not complete within the 10.0 s"));
    ddpc_clear_error();
    ddpc_watchdog_free(&wd);
    EXPECT(f.released == 3);
}

/* Each collective keeps the timeout it was enqueued with: a short one
 * queued behind a long one gets its own once it can start, and the long one
 * is not cut short by it. */
static void test_each_collective_keeps_its_timeout_(void) {
    fake_ f = {.failed_event = -1};
    ddpc_watchdog wd;
    EXPECT(ddpc_watchdog_init(&wd, &ops_, &f, 0, 2) == DDPC_OK);
    uint64_t s0, s1;
    double now = ddpc_watchdog_now();
    EXPECT(ddpc_watchdog_record(&wd, "all_reduce", 1, "float32", EV(0), 30.0, &s0) == DDPC_OK);
    EXPECT(ddpc_watchdog_record(&wd, "broadcast", 2, "float32", EV(1), 2.0, &s1) == DDPC_OK);
    /* #0 runs 29 s, within its 30; #1 waits behind it all that time. */
    for (int t = 1; t <= 29; t++) EXPECT(ddpc_watchdog_check(&wd, now + t) == DDPC_OK);
    EXPECT(f.aborts == 0 && ddpc_watchdog_state(&wd, s1) == DDPC_FLIGHT_ENQUEUED);
    f.done[0] = 1;
    EXPECT(ddpc_watchdog_check(&wd, now + 29.5) == DDPC_OK);
    EXPECT(ddpc_watchdog_state(&wd, s0) == DDPC_FLIGHT_COMPLETED);
    /* #1 could start at 29.5: its 2 s end at 31.5. */
    EXPECT(ddpc_watchdog_check(&wd, now + 31.4) == DDPC_OK && f.aborts == 0);
    EXPECT(ddpc_watchdog_check(&wd, now + 31.6) == DDPC_ERR_TIMEOUT && f.aborts == 1);
    EXPECT(ddpc_watchdog_state(&wd, s1) == DDPC_FLIGHT_TIMED_OUT);
    EXPECT(ddpc_watchdog_error(&wd) == DDPC_ERR_TIMEOUT);
    EXPECT(strstr(ddpc_last_error(), "broadcast of 2 float32 (collective #1) did not complete within the 2.0 s timeout"));
    ddpc_clear_error();
    ddpc_watchdog_free(&wd);
    EXPECT(f.released == 2);
}

static void test_async_error_and_failed_event_(void) {
    fake_ f = {.failed_event = -1};
    ddpc_watchdog wd;
    uint64_t s;
    EXPECT(ddpc_watchdog_init(&wd, &ops_, &f, 0, 4) == DDPC_OK);
    EXPECT(ddpc_watchdog_record(&wd, "all_reduce", 5, "float16", EV(0), 60.0, &s) == DDPC_OK);
    f.async_error = 1;
    EXPECT(ddpc_watchdog_check(&wd, ddpc_watchdog_now()) == DDPC_ERR_DIST && f.aborts == 1);
    EXPECT(ddpc_watchdog_error(&wd) == DDPC_ERR_DIST);
    EXPECT(strstr(ddpc_last_error(), "asynchronous error on rank 0: remote process exited"));
    ddpc_clear_error();
    ddpc_watchdog_free(&wd);

    fake_ g = {.failed_event = 0};
    EXPECT(ddpc_watchdog_init(&wd, &ops_, &g, 2, 4) == DDPC_OK);
    EXPECT(ddpc_watchdog_record(&wd, "reduce_scatter", 8, "float32", EV(0), 60.0, &s) == DDPC_OK);
    EXPECT(ddpc_watchdog_check(&wd, ddpc_watchdog_now()) == DDPC_ERR_DIST && g.aborts == 1);
    EXPECT(ddpc_watchdog_error(&wd) == DDPC_ERR_DIST);
    EXPECT(strstr(ddpc_last_error(), "reduce_scatter of 8 float32 (collective #0) failed on rank 2: unspecified"));
    ddpc_clear_error();
    ddpc_watchdog_free(&wd);
}

static void test_ring_keeps_the_last_entries_(void) {
    fake_ f = {.failed_event = -1};
    ddpc_watchdog wd;
    EXPECT(ddpc_watchdog_init(&wd, &ops_, &f, 0, 2) == DDPC_OK);
    for (int i = 0; i < 40; i++) {
        uint64_t s;
        f.done[i] = 1;
        EXPECT(ddpc_watchdog_record(&wd, "all_reduce", i, "float32", EV(i), 60.0, &s) == DDPC_OK);
    }
    char buf[8192];
    ddpc_watchdog_format(&wd, ddpc_watchdog_now(), buf, sizeof buf);
    EXPECT(strstr(buf, "#7 ") == NULL && strstr(buf, "#8 all_reduce of 8 float32: enqueued") != NULL);
    EXPECT(strstr(buf, "#39 all_reduce of 39 float32") != NULL);
    char tiny[40];
    ddpc_watchdog_format(&wd, ddpc_watchdog_now(), tiny, sizeof tiny);
    EXPECT(strlen(tiny) < sizeof tiny);
    ddpc_watchdog_free(&wd);
    EXPECT(f.released == 40);
}

static void test_thread_completes_entries_(void) {
    fake_ f = {.failed_event = -1};
    ddpc_watchdog wd;
    uint64_t s;
    EXPECT(ddpc_watchdog_init(&wd, &ops_, &f, 0, 2) == DDPC_OK);
    EXPECT(ddpc_watchdog_start(&wd, 0.005) == DDPC_OK);
    f.done[0] = 1;
    EXPECT(ddpc_watchdog_record(&wd, "all_reduce", 1, "float32", EV(0), 60.0, &s) == DDPC_OK);
    for (int i = 0; i < 400 && ddpc_watchdog_state(&wd, s) != DDPC_FLIGHT_COMPLETED; i++)
        nanosleep(&(struct timespec){0, 5000000}, NULL);
    EXPECT(ddpc_watchdog_state(&wd, s) == DDPC_FLIGHT_COMPLETED);
    ddpc_watchdog_free(&wd);
}

int main(void) {
    test_timeout_aborts_and_reports_();
    test_deadline_runs_from_the_start_();
    test_each_collective_keeps_its_timeout_();
    test_async_error_and_failed_event_();
    test_ring_keeps_the_last_entries_();
    test_thread_completes_entries_();
    return check_finish("watchdog");
}

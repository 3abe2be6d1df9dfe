/* Unit tests of the store's extended commands (store.c) against a server in
 * this process: append, multi_set/multi_get, list_keys, the queues (FIFO
 * order, an empty queue, a pop that times out without taking a later item,
 * a parked pop woken by a push from another thread), a barrier of two
 * threads, and a server freed with items queued and a pop parked.
 * Built with AddressSanitizer (leaks included) by tests/test_c_units.py. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "comm/store.h"

static ddpc_store *client_(ddpc_store *master) {
    ddpc_store *c = NULL;
    EXPECT(ddpc_store_clone(master, &c) == DDPC_OK, "clone: %s", ddpc_last_error());
    return c;
}

/* Whether `key` pops `want` (a NUL-terminated text) from `s`. */
static int pops_(ddpc_store *s, const char *key, int block, double timeout_s, const char *want) {
    void *val = NULL;
    size_t len = 0;
    ddpc_status st = ddpc_store_queue_pop(s, key, block, timeout_s, &val, &len);
    int ok = st == DDPC_OK && len == strlen(want) && memcmp(val, want, len) == 0;
    if (st != DDPC_OK) ddpc_clear_error();
    free(val);
    return ok;
}

static void test_keys_(ddpc_store *s) {
    EXPECT(ddpc_store_append(s, "word", "po", 2) == DDPC_OK && ddpc_store_append(s, "word", "tato", 4) == DDPC_OK);
    const char *keys[] = {"a", "b"};
    const void *vals[] = {"1", "22"};
    size_t lens[] = {1, 2};
    EXPECT(ddpc_store_multi_set(s, keys, vals, lens, 2) == DDPC_OK);
    const char *wanted[] = {"b", "word", "a"};
    ddpc_store_list l;
    EXPECT(ddpc_store_multi_get(s, wanted, 3, 5, &l) == DDPC_OK && l.n == 3);
    EXPECT(l.lens[0] == 2 && memcmp(l.items[0], "22", 2) == 0);
    EXPECT(l.lens[1] == 6 && memcmp(l.items[1], "potato", 6) == 0);
    EXPECT(l.lens[2] == 1 && memcmp(l.items[2], "1", 1) == 0);
    ddpc_store_list_free(&l);
    EXPECT(ddpc_store_list_keys(s, &l) == DDPC_OK && l.n == 3, "list_keys gave %zu keys", l.n);
    ddpc_store_list_free(&l);
    const char *missing = "missing";
    EXPECT(ddpc_store_multi_get(s, &missing, 1, 0.1, &l) == DDPC_ERR_STORE_TIMEOUT);
    ddpc_clear_error();
}

static void test_queue_(ddpc_store *s) {
    int64_t n = -1;
    EXPECT(ddpc_store_queue_len(s, "q", &n) == DDPC_OK && n == 0);
    EXPECT(ddpc_store_queue_push(s, "q", "x", 1) == DDPC_OK && ddpc_store_queue_push(s, "q", "yy", 2) == DDPC_OK);
    int present = 0;
    const char *q = "q";
    EXPECT(ddpc_store_check(s, &q, 1, &present) == DDPC_OK && present);
    EXPECT(ddpc_store_queue_len(s, "q", &n) == DDPC_OK && n == 2);
    EXPECT(pops_(s, "q", 1, 5, "x") && pops_(s, "q", 0, 5, "yy"));
    EXPECT(ddpc_store_check(s, &q, 1, &present) == DDPC_OK && !present);
    void *val = NULL;
    size_t len;
    EXPECT(ddpc_store_queue_pop(s, "q", 0, 5, &val, &len) == DDPC_ERR_QUEUE_EMPTY);
    ddpc_clear_error();
    EXPECT(ddpc_store_queue_pop(s, "q", 1, 0.1, &val, &len) == DDPC_ERR_STORE_TIMEOUT);
    ddpc_clear_error();
    /* The server answered the timed-out pop itself: the next item stays queued. */
    EXPECT(ddpc_store_queue_push(s, "q", "kept", 4) == DDPC_OK);
    EXPECT(ddpc_store_queue_len(s, "q", &n) == DDPC_OK && n == 1);
    EXPECT(pops_(s, "q", 0, 5, "kept"));
}

typedef struct {
    ddpc_store *s;
    ddpc_status st;
} job_;

static void *pop_woken_(void *arg) {
    job_ *j = arg;
    j->st = pops_(j->s, "wake", 1, 30, "pushed") ? DDPC_OK : DDPC_ERR_INTERNAL;
    return NULL;
}

static void *barrier_(void *arg) {
    job_ *j = arg;
    j->st = ddpc_store_barrier(j->s, "bar", 2, 30);
    return NULL;
}

static void *pop_forever_(void *arg) {
    job_ *j = arg;
    void *val = NULL;
    size_t len;
    j->st = ddpc_store_queue_pop(j->s, "never", 1, 60, &val, &len);
    free(val);
    return NULL;
}

static void sleep_ms_(long ms) {
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* Runs `fn` on a clone of `master` in a thread while the caller goes on. */
static void start_(ddpc_store *master, void *(*fn)(void *), job_ *j, pthread_t *t) {
    j->s = client_(master);
    j->st = DDPC_ERR_INTERNAL;
    EXPECT(pthread_create(t, NULL, fn, j) == 0);
}

static void test_waits_(ddpc_store *s) {
    pthread_t t;
    job_ j;
    start_(s, pop_woken_, &j, &t);
    sleep_ms_(100); /* most likely parked by now; the test holds either way */
    EXPECT(ddpc_store_queue_push(s, "wake", "pushed", 6) == DDPC_OK);
    pthread_join(t, NULL);
    EXPECT(j.st == DDPC_OK);
    ddpc_store_free(j.s);

    start_(s, barrier_, &j, &t);
    EXPECT(ddpc_store_barrier(s, "bar", 2, 30) == DDPC_OK, "barrier: %s", ddpc_last_error());
    pthread_join(t, NULL);
    EXPECT(j.st == DDPC_OK);
    ddpc_store_free(j.s);
    EXPECT(ddpc_store_barrier(s, "lonely", 2, 0.1) == DDPC_ERR_STORE_TIMEOUT);
    ddpc_clear_error();
}

int main(void) {
    ddpc_store *master = NULL;
    if (ddpc_store_init(&master, "127.0.0.1", 0, 1, "token", 30) != DDPC_OK) {
        fprintf(stderr, "cannot start a store: %s\n", ddpc_last_error());
        return 1;
    }
    ddpc_store *c = client_(master);
    test_keys_(c);
    test_queue_(c);
    test_waits_(master);
    /* Freed with items queued and a pop parked: the pop ends with the connection. */
    EXPECT(ddpc_store_queue_push(c, "left", "over", 4) == DDPC_OK);
    pthread_t t;
    job_ j;
    start_(master, pop_forever_, &j, &t);
    sleep_ms_(100);
    ddpc_store_free(c);
    ddpc_store_free(master);
    pthread_join(t, NULL);
    EXPECT(j.st == DDPC_ERR_NET, "a pop parked on a server that went gave %d", (int)j.st);
    ddpc_clear_error();
    ddpc_store_free(j.s);
    return check_finish("store");
}

/* TCP rendezvous key-value store. The master process (rank 0) hosts the
 * server on a thread of its own that never touches Python; every process,
 * the master included, talks to it as a client.
 *
 * Wire format: each message is a 4-byte little-endian length and a body whose
 * first byte is the command. Bodies over DDPC_STORE_MAX_FRAME, malformed
 * bodies and clients whose first message is not a HELLO carrying the job's
 * token are disconnected; the server and other clients carry on.
 *
 * Liveness: each rank of a job also opens a "watch" connection announcing its
 * rank. The server reports to every watcher each rank whose watch connection
 * closes without a prior leave message, so a killed process is noticed by
 * the others as soon as the kernel closes its sockets, and each abort a rank
 * publishes (ranks that disagree about a collective), so ranks on other hosts
 * stop waiting for it too.
 *
 * Queues: queue_push appends to a FIFO kept apart from the keys (list_keys
 * and num_keys leave it out; check and wait see a non-empty one as present).
 * A blocking queue_pop on an empty queue is parked on the server like a wait,
 * and each pushed item wakes one parked pop; the server answers a parked pop,
 * and a parked barrier, with "timed out" at the deadline the request carries,
 * so an item is never handed to a client that gave up.
 *
 * Failures: a store that cannot be reached or whose connection breaks is
 * DDPC_ERR_NET (DDPC_ERR_NET_TIMEOUT when no connection came before the
 * deadline); a refusal, a malformed reply or a vanished key DDPC_ERR_STORE;
 * a wait, get, pop, barrier or request that passed its deadline
 * DDPC_ERR_STORE_TIMEOUT; a pop that does not block on an empty queue
 * DDPC_ERR_QUEUE_EMPTY. */
#ifndef DDPC_COMM_STORE_H
#define DDPC_COMM_STORE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"

#define DDPC_STORE_MAX_FRAME (16u << 20)

/* The watch event for a rank that left (CMD_LEAVE) reads this, then the key
 * prefix of the job it left (several jobs may use one store in turn); a rank
 * that died has an empty text. */
#define DDPC_STORE_LEFT_EVENT "left "
#define DDPC_STORE_MAX_TOKEN 256

typedef struct ddpc_store ddpc_store;

/* Connects to host:port (starting the server there first when `is_master`;
 * port 0 lets the server pick one, see ddpc_store_port). Clients retry until
 * `timeout_s`, which also bounds every later call. */
ddpc_status ddpc_store_init(ddpc_store **out, const char *host, int port, int is_master, const char *token,
                            double timeout_s);
void ddpc_store_free(ddpc_store *s);
int ddpc_store_port(const ddpc_store *s);
/* An address of this host that other hosts of the job can reach: the local
 * end of the connection to the store, or the master address on the master. */
void ddpc_store_local_addr(const ddpc_store *s, char *buf, size_t cap);
double ddpc_store_timeout(const ddpc_store *s);

ddpc_status ddpc_store_set(ddpc_store *s, const char *key, const void *val, size_t len);
/* Waits until `key` exists, then returns a malloc'ed copy of its value. */
ddpc_status ddpc_store_get(ddpc_store *s, const char *key, void **val, size_t *len, double timeout_s);
/* get, giving up (DDPC_ERR_DIST without a message) once *abort is set. */
ddpc_status ddpc_store_get_unless(ddpc_store *s, const char *key, void **val, size_t *len, double timeout_s,
                                  const atomic_int *abort);
ddpc_status ddpc_store_add(ddpc_store *s, const char *key, int64_t delta, int64_t *result);
ddpc_status ddpc_store_wait(ddpc_store *s, const char *const *keys, int nkeys, double timeout_s);
ddpc_status ddpc_store_check(ddpc_store *s, const char *const *keys, int nkeys, int *all_present);
/* Sets `key` to `desired` where it holds `expected` (a missing key holds the
 * empty value); returns, malloc'ed, the value it holds afterwards (`expected`
 * where it is still missing). */
ddpc_status ddpc_store_compare_set(ddpc_store *s, const char *key, const void *expected, size_t elen,
                                  const void *desired, size_t dlen, void **val, size_t *len);
ddpc_status ddpc_store_delete(ddpc_store *s, const char *key, int *deleted);
ddpc_status ddpc_store_num_keys(ddpc_store *s, int64_t *n);
/* A new client of the same server with a connection of its own (for another thread). */
ddpc_status ddpc_store_clone(const ddpc_store *s, ddpc_store **out);

/* Byte strings from one reply: items[i], lens[i] bytes long, point into buf. */
typedef struct {
    char *buf;
    size_t n;
    const char **items;
    size_t *lens;
} ddpc_store_list;
void ddpc_store_list_free(ddpc_store_list *l);

/* Appends to `key`'s value (a missing key starts empty). */
ddpc_status ddpc_store_append(ddpc_store *s, const char *key, const void *val, size_t len);
/* Sets every key at once. */
ddpc_status ddpc_store_multi_set(ddpc_store *s, const char *const *keys, const void *const *vals, const size_t *lens,
                                 int n);
/* Waits until every key exists, then returns their values, read at once. */
ddpc_status ddpc_store_multi_get(ddpc_store *s, const char *const *keys, int n, double timeout_s,
                                 ddpc_store_list *out);
/* The keys (not the queues). */
ddpc_status ddpc_store_list_keys(ddpc_store *s, ddpc_store_list *out);
ddpc_status ddpc_store_queue_push(ddpc_store *s, const char *key, const void *val, size_t len);
/* Takes the oldest item of the queue `key`, waiting up to `timeout_s` for
 * one where `block`; returns a malloc'ed copy. */
ddpc_status ddpc_store_queue_pop(ddpc_store *s, const char *key, int block, double timeout_s, void **val,
                                 size_t *len);
/* The items in the queue `key` (0 for a missing queue). */
ddpc_status ddpc_store_queue_len(ddpc_store *s, const char *key, int64_t *n);
/* Adds one to the counter `key` and waits until it reaches `world_size`. */
ddpc_status ddpc_store_barrier(ddpc_store *s, const char *key, int64_t world_size, double timeout_s);

/* Opens this rank's watch connection and asks for the first failure event;
 * the socket becomes readable when there is one (ddpc_store_read_event) or
 * the server went away. ddpc_store_watch_next asks for the event after the
 * first `seen` ones. */
ddpc_status ddpc_store_watch(ddpc_store *s, int rank, int *fd);
ddpc_status ddpc_store_watch_next(int fd, int64_t seen, double timeout_s);
/* Reads one event from a readable watch socket: a dead rank (>= 0), an abort
 * (-2, its text in `text`), or -1 when the server itself is gone. */
int ddpc_store_read_event(int fd, char *text, size_t cap);
/* Publishes an abort ("group prefix\ncollective seq\nreason") to every watcher of the job. */
ddpc_status ddpc_store_abort(ddpc_store *s, const char *text);
/* Tells the server this rank leaves cleanly (no death is reported for it). */
ddpc_status ddpc_store_leave(int watch_fd, const char *prefix, double timeout_s);
/* Waits until `nranks` watched ranks have left or died (the master keeps the
 * server up until then). */
ddpc_status ddpc_store_wait_departed(ddpc_store *s, int nranks, double timeout_s);

#endif

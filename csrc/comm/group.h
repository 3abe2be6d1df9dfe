/* Process groups: rank, size, store, a backend behind a vtable, and work
 * handles executed in order by one worker thread per group.
 *
 * Every blocking wait inside a collective has the collective's deadline, and
 * every wait also gives up as soon as the group is marked failed (a peer
 * died, or ranks disagreed about which collective they are in); from then on
 * every call on the group raises that same error. */
#ifndef DDPC_COMM_GROUP_H
#define DDPC_COMM_GROUP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "comm/reduce.h"
#include "comm/store.h"
#include "common.h"
#include "dtype.h"

typedef enum {
    DDPC_COLL_ALLREDUCE = 0,
    DDPC_COLL_BROADCAST,
    DDPC_COLL_ALLGATHER,
    DDPC_COLL_REDUCE_SCATTER,
    DDPC_COLL_BARRIER,
    DDPC_COLL_SEND,
    DDPC_COLL_RECV,
    DDPC_COLL_GATHER,
    DDPC_COLL_SCATTER,
    DDPC_COLL_REDUCE,
    DDPC_NCOLLS
} ddpc_coll;

const char *ddpc_coll_name(ddpc_coll c);

/* Collectives with a root (`peer` of ddpc_coll_args): ranks must agree on it. */
static inline int ddpc_coll_rooted(ddpc_coll c) {
    return c == DDPC_COLL_BROADCAST || c == DDPC_COLL_GATHER || c == DDPC_COLL_SCATTER || c == DDPC_COLL_REDUCE;
}

/* Collectives whose output is one block per rank (all_gather, gather); their
 * input is this rank's block. reduce_scatter and scatter are the reverse. */
static inline int ddpc_coll_gathers(ddpc_coll c) { return c == DDPC_COLL_ALLGATHER || c == DDPC_COLL_GATHER; }

/* One collective call. `count` is the element count of this rank's
 * contribution: the whole tensor for all_reduce, broadcast, reduce, send and
 * recv; the input for all_gather and gather (output is size*count); the
 * output for reduce_scatter and scatter (input is size*count). In-place ops
 * have in == out. Only the root's output of gather and reduce, and only the
 * root's input of scatter, is used: the other ranks' is NULL.
 * `timeout_s` bounds the call once it starts running; it is fixed when the
 * call is queued (ddpc_group_submit), so set_timeout on another thread
 * changes neither a queued call nor the calls of another thread that give
 * their own. */
typedef struct {
    ddpc_coll coll;
    ddpc_redop op;
    ddpc_dtype dtype;
    const void *in;
    void *out;
    size_t count;
    int peer;           /* root of a rooted collective, peer of send/recv (group ranks); DDPC_ANY_SOURCE for a recv */
    int tag;
    uint64_t seq;       /* position in this group's sequence of collectives */
    int *source;        /* recv: where the sender's rank is written, or NULL */
    /* The whole (all_gather's and gather's output, reduce_scatter's and
     * scatter's input) as one block of `count` elements per rank, where it
     * is a list of buffers rather than one: ddpc_coll_block. NULL: one
     * buffer, at out or in. */
    void *const *blocks;
    double timeout_s;   /* of this call; 0 when submitted: the group's at that moment */
} ddpc_coll_args;

/* Rank r's block of the whole of `a` (see `blocks`), which is at `whole` when it is one buffer. */
static inline char *ddpc_coll_block(const ddpc_coll_args *a, const void *whole, int r) {
    return a->blocks ? (char *)a->blocks[r] : (char *)whole + (size_t)r * a->count * ddpc_dtype_size(a->dtype);
}

/* The peer of a recv that takes the first matching send from any rank (cpu backend). */
#define DDPC_ANY_SOURCE (-1)

typedef struct ddpc_group ddpc_group;

/* Calls waiting for one thread, in call order. On the cpu backend sends and
 * receives have queues of their own, so a pending isend never holds back an
 * irecv (each end of an exchange can post both), nor a collective. */
typedef struct {
    ddpc_group *g;
    struct ddpc_work *head, *tail;
    int busy, have_worker;
    pthread_t worker;
} ddpc_queue;

enum { DDPC_QUEUE_COLL, DDPC_QUEUE_SEND, DDPC_QUEUE_RECV, DDPC_NQUEUES };

/* TCP links between two ranks: one for the ring's collectives, one for
 * send/recv, so the two never read each other's messages. */
enum { DDPC_LINK_RING, DDPC_LINK_P2P, DDPC_NLINKS };

/* A backend executes collectives for a group. `init` runs collectively on
 * every member during group creation; `run` executes one collective before
 * the deadline (a->timeout_s after it started); `abort` wakes every wait of the backend (called from any
 * thread once the group has failed). */
typedef struct {
    const char *name;
    ddpc_status (*init)(ddpc_group *g, void **state);
    ddpc_status (*run)(ddpc_group *g, void *state, const ddpc_coll_args *a, uint64_t deadline);
    void (*abort)(void *state);
    void (*free)(void *state);
} ddpc_backend;

extern const ddpc_backend ddpc_cpu_backend;

/* The backend registered under `name` ("cpu"; "nccl" once built in), or NULL. */
const ddpc_backend *ddpc_backend_find(const char *name);

/* Topology found through the store: which group ranks share this host. */
typedef struct {
    int nnodes, node;          /* hosts in the group and this rank's host index */
    int local_rank, local_size;
    int *local_ranks;          /* group ranks on this host, ascending */
    int *leaders;              /* lowest group rank of each host, by host index */
    int *node_of;              /* host index of each group rank */
} ddpc_topology;

typedef struct ddpc_work ddpc_work;
typedef struct ddpc_stash ddpc_stash;

struct ddpc_group {
    int rank, size;
    pid_t owner;               /* the process whose threads run the group: a forked child has only a copy */
    int *global_ranks;         /* group rank -> rank in the default group */
    atomic_uchar *departed;    /* by group rank: left the job (destroy_process_group or exit) */
    ddpc_store *store;         /* shared, not owned */
    char prefix[96];           /* store key prefix of this group */
    _Atomic double timeout_s;  /* of the collectives queued from now on without one of their own */
    ddpc_topology topo;
    const ddpc_backend *backend;
    void *bstate;
    atomic_int failed;         /* ddpc_status of the failure, 0 while healthy */
    char fail_msg[1024];
    /* A failure another rank reported at collective #fail_seq: collectives
     * before it still run to completion here (this rank may be behind), the
     * first one at or after it fails. Under lock. */
    int deferred;              /* its ddpc_status, 0 when none */
    uint64_t fail_seq;
    const ddpc_coll_args *current; /* the call executing now, NULL when idle; under lock */
    uint64_t next_seq;         /* sequence number of the next collective */
    /* Workers: each queue runs its calls in order on one thread at a time. */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    ddpc_queue queues[DDPC_NQUEUES];
    int stop;
    /* TCP links, set up lazily (p2p.c): peer_fd[link * size + peer]. */
    pthread_mutex_t link_lock;
    int listen_fd;
    int *peer_fd;
    /* Messages with other tags that receives read ahead (stash.h). Only a
     * receive touches it, and a group runs its receives one at a time (on
     * the cpu backend they have a queue of their own), so it needs no lock. */
    ddpc_stash *stash;
};

/* A store value the group's members publish, waited for until the group's
 * timeout or its failure (a member that died). The store's failures become
 * the group's: a key that never came DDPC_ERR_TIMEOUT, a store that failed
 * DDPC_ERR_DIST. */
ddpc_status ddpc_group_store_get(ddpc_group *g, const char *key, void **val, size_t *len);

/* Messages name ranks as the default group numbers them, whatever the group. */
static inline int ddpc_global_rank(const ddpc_group *g, int group_rank) { return g->global_ranks[group_rank]; }

/* What error messages say of a call after its count and dtype: its
 * reduction, its root (a group rank), or its tag (send and recv), as in
 * ", sum to rank 1"; "" for the others. */
void ddpc_coll_detail(const ddpc_group *g, int coll, int op, int peer, int tag, char *buf, size_t cap);

ddpc_status ddpc_group_init(ddpc_group **out, ddpc_store *store, const char *prefix, int rank, int size,
                            const int *global_ranks, const ddpc_backend *backend, double timeout_s);
void ddpc_group_free(ddpc_group *g);
/* Waits up to `seconds` for no call to be queued or running on the group;
 * whether none is. */
int ddpc_group_idle(ddpc_group *g, double seconds);

/* Marks the group failed with `msg` (first cause wins) and wakes its waits. */
void ddpc_group_fail(ddpc_group *g, ddpc_status st, const char *msg);
/* Marks the group failed from collective #seq on: a call already running
 * with an earlier sequence number finishes first (used for failures other
 * ranks report; send and recv, which have no sequence number, fail at once). */
void ddpc_group_fail_from(ddpc_group *g, ddpc_status st, const char *msg, uint64_t seq);
/* Ranks disagree about collective `a`: fails the group here and, through
 * the store, on every other rank of the group from that collective on, then
 * returns the DistError. */
ddpc_status ddpc_group_disagree(ddpc_group *g, const ddpc_coll_args *a, const char *msg);
/* A link to a peer broke (`st` is DistError): gives the monitor a moment to
 * deliver the cause (a death, a disagreement elsewhere) and returns that
 * instead when it arrives. */
ddpc_status ddpc_group_explain(ddpc_group *g, ddpc_status st);
/* Records the group's failure as the current error and returns its status. */
ddpc_status ddpc_group_error(ddpc_group *g);

/* Work: one queued collective. A call without a timeout of its own
 * (a->timeout_s 0) gets the group's at this moment. */
ddpc_status ddpc_group_submit(ddpc_group *g, const ddpc_coll_args *a, ddpc_work **work);
/* The sequence number the group's next collective gets (send and recv take none). */
uint64_t ddpc_group_next_seq(ddpc_group *g);
/* Waits for the work (timeout_s < 0: the group timeout) and returns its status. */
ddpc_status ddpc_work_wait(ddpc_work *w, double timeout_s);
int ddpc_work_done(ddpc_work *w);
void ddpc_work_release(ddpc_work *w);

/* Death watch: one thread per process watches the store and fails every
 * registered group when a rank dies. */
/* `prefix`: the key prefix of this job's groups in the store, which the
 * store's "left" events name. */
ddpc_status ddpc_monitor_start(ddpc_store *store, int global_rank, const char *prefix);
void ddpc_monitor_stop(double timeout_s);
void ddpc_monitor_register(ddpc_group *g);
void ddpc_monitor_unregister(ddpc_group *g);

/* Engines used by the cpu backend. */
typedef struct ddpc_shm ddpc_shm;
ddpc_status ddpc_shm_init(ddpc_group *g, ddpc_shm **out);
ddpc_status ddpc_shm_run(ddpc_shm *s, const ddpc_coll_args *a, uint64_t deadline);
void ddpc_shm_abort(ddpc_shm *s);
void ddpc_shm_free(ddpc_shm *s);

/* Shared buffers: `nbytes` (zeroed) in a segment that every local rank of the
 * group maps. An all_reduce of data lying in one, at the same offset on every
 * local rank, reduces them where they are instead of through the staging
 * areas. Collective over the local ranks, with the same size on each; the
 * buffer stays mapped until released, even after the group is freed. */
typedef struct ddpc_shm_reg ddpc_shm_reg;
ddpc_status ddpc_shm_share(ddpc_shm *s, size_t nbytes, ddpc_shm_reg **out);
void *ddpc_shm_reg_data(const ddpc_shm_reg *r);
size_t ddpc_shm_reg_size(const ddpc_shm_reg *r);
void ddpc_shm_reg_release(ddpc_shm_reg *r);
/* Views of the other local ranks' buffers of a shared buffer: a reference
 * that keeps every mapping alive (dropped with ddpc_shm_reg_unref, which,
 * unlike release, leaves the buffer usable by the all-reduces), the number of
 * local ranks, and local rank j's buffer as mapped here. */
ddpc_shm_reg *ddpc_shm_reg_ref(ddpc_shm_reg *r);
void ddpc_shm_reg_unref(ddpc_shm_reg *r);
int ddpc_shm_reg_ranks(const ddpc_shm_reg *r);
void *ddpc_shm_reg_peer(const ddpc_shm_reg *r, int j);
/* Signals in shared buffers, for protocols of the caller's own (a 64-bit,
 * 8-byte-aligned counter): signal stores `value` with release ordering, so
 * whatever the caller wrote before is visible to a rank that sees it; await
 * waits (acquire) until the counter is at least `value`, giving up when the
 * group fails, a local rank leaves it, or the group timeout passes; `what`
 * names the wait in errors. */
void ddpc_shm_signal(void *word, uint64_t value);
ddpc_status ddpc_shm_await(ddpc_group *g, const void *word, uint64_t value, const char *what);
/* Shares a buffer on the group's cpu backend once the collectives queued
 * before it are done; an ARG error where no other group rank is on this host. */
ddpc_status ddpc_group_share(ddpc_group *g, size_t nbytes, ddpc_shm_reg **out);

/* TCP ring among the host leaders (ring.c): all_reduce and broadcast, where
 * `root` is a host index. */
ddpc_status ddpc_ring_allreduce(ddpc_group *g, const ddpc_coll_args *a, uint64_t deadline);
ddpc_status ddpc_ring_broadcast(ddpc_group *g, const ddpc_coll_args *a, int root_node, uint64_t deadline);

/* Point-to-point links (p2p.c). */
ddpc_status ddpc_p2p_init(ddpc_group *g);
void ddpc_p2p_free(ddpc_group *g);
/* Closes this process's descriptors of the links and the listening socket
 * (a forked child's copies: the parent's stay open), and frees nothing. */
void ddpc_p2p_close(ddpc_group *g);
/* Shuts the links down so peers blocked on them see the failure at once. */
void ddpc_p2p_shutdown(ddpc_group *g);
/* The link to `peer`, made before `deadline`, which is `timeout_s` after the
 * call that needs it started (for the message when the peer never comes). */
ddpc_status ddpc_p2p_link(ddpc_group *g, int peer, int link, double timeout_s, uint64_t deadline, int *fd);
ddpc_status ddpc_p2p_send(ddpc_group *g, const ddpc_coll_args *a, uint64_t deadline);
ddpc_status ddpc_p2p_recv(ddpc_group *g, const ddpc_coll_args *a, uint64_t deadline);

/* Header that precedes every message on a TCP link, so both ends can check
 * they are in the same call. */
typedef struct {
    uint32_t magic;
    uint32_t coll, op, dtype;
    uint64_t seq, count;
    int32_t peer, tag;
} ddpc_msg_header;

void ddpc_msg_header_fill(ddpc_msg_header *h, const ddpc_coll_args *a);
/* DDPC_OK when `theirs` (from rank `them`) describes the same call as `a`,
 * else the group fails with a DistError naming both calls. */
ddpc_status ddpc_msg_header_check(ddpc_group *g, const ddpc_coll_args *a, const ddpc_msg_header *theirs, int them);

#endif

/* Process groups: creation through the store, topology, the in-order work
 * queue, failure state, the death monitor, and the cpu backend's dispatch
 * between shared memory, the TCP ring and the hierarchical combination. */
#include "comm/group.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/net.h"

const char *ddpc_coll_name(ddpc_coll c) {
    static const char *names[DDPC_NCOLLS] = {"all_reduce", "broadcast", "all_gather", "reduce_scatter",
                                             "barrier", "send", "recv", "gather", "scatter", "reduce"};
    return c >= 0 && c < DDPC_NCOLLS ? names[c] : "?";
}

void ddpc_coll_detail(const ddpc_group *g, int coll, int op, int peer, int tag, char *buf, size_t cap) {
    int root = peer >= 0 && peer < g->size ? ddpc_global_rank(g, peer) : -1;
    const char *red = op >= 0 && op < DDPC_NREDOPS ? ddpc_redop_name((ddpc_redop)op) : "?";
    switch (coll) {
    case DDPC_COLL_ALLREDUCE:
    case DDPC_COLL_REDUCE_SCATTER: snprintf(buf, cap, ", %s", red); break;
    case DDPC_COLL_REDUCE: snprintf(buf, cap, ", %s to rank %d", red, root); break;
    case DDPC_COLL_GATHER: snprintf(buf, cap, ", to rank %d", root); break;
    case DDPC_COLL_BROADCAST:
    case DDPC_COLL_SCATTER: snprintf(buf, cap, ", from rank %d", root); break;
    case DDPC_COLL_SEND:
    case DDPC_COLL_RECV: snprintf(buf, cap, ", tag %d", tag); break;
    default: snprintf(buf, cap, "%s", "");
    }
}

/* A work handle has its own lock so that it outlives its group: a handle
 * kept after destroy_process_group() still answers wait() and is_completed(). */
struct ddpc_work {
    ddpc_coll_args args;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int done, refs;       /* under lock */
    ddpc_status status;
    char msg[1024];
    ddpc_work *next;
    pid_t owner;          /* the process whose worker runs it (a forked child's copy never completes) */
};

/* ---- failure state -------------------------------------------------------------- */

static int is_p2p_(const ddpc_coll_args *a) { return a->coll == DDPC_COLL_SEND || a->coll == DDPC_COLL_RECV; }

/* Under g->lock: whether a failure reported by another rank applies to `a`. */
static int deferred_hits_(const ddpc_group *g, const ddpc_coll_args *a) {
    return g->deferred && (is_p2p_(a) || a->seq >= g->fail_seq);
}

/* A pending failure reported by another rank is the cause of whatever goes
 * wrong after it arrived, so it replaces `msg` (which may then be NULL). */
void ddpc_group_fail(ddpc_group *g, ddpc_status st, const char *msg) {
    int first = 0;
    pthread_mutex_lock(&g->lock);
    if (atomic_load(&g->failed) == 0) {
        if (g->deferred) st = (ddpc_status)g->deferred;
        else snprintf(g->fail_msg, sizeof g->fail_msg, "%s", msg);
        atomic_store(&g->failed, (int)st);
        first = 1;
    }
    pthread_mutex_unlock(&g->lock);
    if (!first) return;
    if (g->backend && g->backend->abort && g->bstate) g->backend->abort(g->bstate);
    ddpc_p2p_shutdown(g);
}

void ddpc_group_fail_from(ddpc_group *g, ddpc_status st, const char *msg, uint64_t seq) {
    int now = 0;
    pthread_mutex_lock(&g->lock);
    if (atomic_load(&g->failed) == 0 && !g->deferred) {
        snprintf(g->fail_msg, sizeof g->fail_msg, "%s", msg);
        g->deferred = (int)st;
        g->fail_seq = seq;
        now = g->current && deferred_hits_(g, g->current);
    }
    pthread_mutex_unlock(&g->lock);
    if (now) ddpc_group_fail(g, st, NULL);
}

ddpc_status ddpc_group_disagree(ddpc_group *g, const ddpc_coll_args *a, const char *msg) {
    char text[1200];
    /* send and recv have no place in the sequence: the peers fail at once. */
    snprintf(text, sizeof text, "%s\n%llu\n%s", g->prefix, is_p2p_(a) ? 0ULL : (unsigned long long)a->seq, msg);
    /* Publish before failing here: failing shuts this rank's links, and the
     * peers should learn the reason before they see the links close. */
    if (ddpc_store_abort(g->store, text) != DDPC_OK) ddpc_clear_error();
    ddpc_group_fail(g, DDPC_ERR_DIST, msg);
    return ddpc_group_error(g);
}

ddpc_status ddpc_group_explain(ddpc_group *g, ddpc_status st) {
    if (st != DDPC_ERR_DIST) return st;
    uint64_t deadline = ddpc_deadline_after(0.5);
    for (;;) {
        pthread_mutex_lock(&g->lock);
        int known = atomic_load(&g->failed) || g->deferred;
        pthread_mutex_unlock(&g->lock);
        if (known || ddpc_ms_left(deadline, 1) == 0) break;
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&g->lock);
    int deferred = g->deferred;
    pthread_mutex_unlock(&g->lock);
    /* The link broke because of the failure another rank reported. */
    if (deferred) ddpc_group_fail(g, (ddpc_status)deferred, NULL);
    if (!atomic_load(&g->failed)) return st;
    ddpc_clear_error();
    return ddpc_group_error(g);
}

/* Re-records a message captured on another thread, without a second location. */
static ddpc_status rethrow_(ddpc_status st, const char *msg) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", msg);
    size_t n = strlen(buf);
    char *loc = strrchr(buf, '[');
    if (n && buf[n - 1] == ']' && loc && loc > buf && loc[-1] == ' ') loc[-1] = '\0';
    return DDPC_ERROR(st, "%s", buf);
}

ddpc_status ddpc_group_error(ddpc_group *g) {
    int st = atomic_load(&g->failed);
    if (!st) return DDPC_ERROR(DDPC_ERR_INTERNAL, "ddpc_group_error called on a healthy group");
    char msg[1024];
    pthread_mutex_lock(&g->lock);
    snprintf(msg, sizeof msg, "%s", g->fail_msg);
    pthread_mutex_unlock(&g->lock);
    /* The group's cause replaces whatever symptom this thread recorded
     * (a link closing because the peer gave up). */
    ddpc_clear_error();
    return rethrow_((ddpc_status)st, msg);
}

/* ---- topology ------------------------------------------------------------------- */

ddpc_status ddpc_group_store_get(ddpc_group *g, const char *key, void **val, size_t *len) {
    ddpc_status st = ddpc_store_get_unless(g->store, key, val, len, g->timeout_s, &g->failed);
    if (st != DDPC_OK && atomic_load(&g->failed)) {
        ddpc_clear_error();
        return ddpc_group_error(g);
    }
    /* A key a peer never published is the group's timeout; a store that
     * failed fails the group as a lost peer would. */
    if (st == DDPC_ERR_STORE_TIMEOUT || st == DDPC_ERR_NET_TIMEOUT) return DDPC_ERR_TIMEOUT;
    if (st == DDPC_ERR_NET || st == DDPC_ERR_STORE) return DDPC_ERR_DIST;
    return st;
}

static ddpc_status topology_(ddpc_group *g) {
    ddpc_topology *t = &g->topo;
    char key[192], me[512];
    ddpc_host_id(me, sizeof me);
    snprintf(key, sizeof key, "%shost/%d", g->prefix, g->rank);
    CHECK(ddpc_store_set(g->store, key, me, strlen(me) + 1));
    char **ids = calloc((size_t)g->size, sizeof *ids);
    t->local_ranks = malloc((size_t)g->size * sizeof(int));
    t->leaders = malloc((size_t)g->size * sizeof(int));
    t->node_of = malloc((size_t)g->size * sizeof(int));
    ddpc_status res = DDPC_OK;
    if (!ids || !t->local_ranks || !t->leaders || !t->node_of) {
        res = DDPC_ERROR(DDPC_ERR_OOM, "out of memory");
        goto out;
    }
    t->nnodes = 0;
    t->local_size = 0;
    for (int r = 0; r < g->size; r++) {
        size_t len;
        snprintf(key, sizeof key, "%shost/%d", g->prefix, r);
        CHECKGOTO(ddpc_group_store_get(g, key, (void **)&ids[r], &len), res, out);
        int node = -1;
        for (int q = 0; q < r && node < 0; q++)
            if (strcmp(ids[q], ids[r]) == 0) node = t->node_of[q];
        if (node < 0) {
            node = t->nnodes++;
            t->leaders[node] = r;
        }
        t->node_of[r] = node;
        if (strcmp(ids[r], me) == 0) {
            if (r == g->rank) t->local_rank = t->local_size;
            t->local_ranks[t->local_size++] = r;
        }
    }
    t->node = t->node_of[g->rank];
    if (t->local_size > 256) res = DDPC_ERROR(DDPC_ERR_ARG, "more than 256 ranks on one host are not supported");
out:
    if (ids)
        for (int r = 0; r < g->size; r++) free(ids[r]);
    free(ids);
    return res;
}

/* ---- creation ------------------------------------------------------------------- */

static void *worker_main_(void *arg);

ddpc_status ddpc_group_init(ddpc_group **out, ddpc_store *store, const char *prefix, int rank, int size,
                            const int *global_ranks, const ddpc_backend *backend, double timeout_s) {
    ddpc_status res = DDPC_OK;
    if (size < 1 || rank < 0 || rank >= size)
        return DDPC_ERROR(DDPC_ERR_ARG, "rank %d is not valid in a group of size %d", rank, size);
    ddpc_group *g = calloc(1, sizeof *g);
    if (!g) return DDPC_ERROR(DDPC_ERR_OOM, "out of memory");
    g->rank = rank, g->size = size, g->store = store, g->timeout_s = timeout_s;
    g->owner = getpid();
    g->listen_fd = -1;
    snprintf(g->prefix, sizeof g->prefix, "%s", prefix);
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->cond, NULL);
    pthread_mutex_init(&g->link_lock, NULL);
    for (int i = 0; i < DDPC_NQUEUES; i++) g->queues[i].g = g;
    g->global_ranks = malloc((size_t)size * sizeof(int));
    g->departed = calloc((size_t)size, sizeof *g->departed);
    if (!g->global_ranks || !g->departed) { res = DDPC_ERROR(DDPC_ERR_OOM, "out of memory"); goto fail; }
    memcpy(g->global_ranks, global_ranks, (size_t)size * sizeof(int));
    ddpc_monitor_register(g);
    CHECKGOTO(ddpc_p2p_init(g), res, fail);
    CHECKGOTO(topology_(g), res, fail);
    g->backend = backend;
    CHECKGOTO(backend->init(g, &g->bstate), res, fail);
    *out = g;
    return DDPC_OK;
fail:
    ddpc_group_free(g);
    return res;
}

/* Waits on `cond` (with `lock` held) for at most `ms` milliseconds. */
static void cond_wait_ms_(pthread_cond_t *cond, pthread_mutex_t *lock, int ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(cond, lock, &ts);
}

static int busy_(const ddpc_group *g) {
    int busy = 0;
    for (int i = 0; i < DDPC_NQUEUES; i++) busy |= g->queues[i].busy || g->queues[i].head != NULL;
    return busy;
}

int ddpc_group_idle(ddpc_group *g, double seconds) {
    uint64_t deadline = ddpc_deadline_after(seconds);
    pthread_mutex_lock(&g->lock);
    while (busy_(g) && ddpc_ms_left(deadline, 1) > 0) cond_wait_ms_(&g->cond, &g->lock, ddpc_ms_left(deadline, 50));
    int idle = !busy_(g);
    pthread_mutex_unlock(&g->lock);
    return idle;
}

void ddpc_group_free(ddpc_group *g) {
    if (!g) return;
    if (g->owner != getpid()) {
        /* A forked child dropping its copy of a parent's group: the workers
         * run in the parent only, its locks may have been held at the fork,
         * and the backend state (shared memory, NCCL) is the parent's. The
         * child closes its copies of the sockets and leaves the rest alone. */
        ddpc_p2p_close(g);
        return;
    }
    ddpc_monitor_unregister(g);
    pthread_mutex_lock(&g->lock);
    g->stop = 1;
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
    for (int i = 0; i < DDPC_NQUEUES; i++)
        if (g->queues[i].have_worker) pthread_join(g->queues[i].worker, NULL);
    if (g->backend && g->bstate) g->backend->free(g->bstate);
    ddpc_p2p_free(g);
    free(g->topo.local_ranks);
    free(g->topo.leaders);
    free(g->topo.node_of);
    free(g->global_ranks);
    free(g->departed);
    pthread_cond_destroy(&g->cond);
    pthread_mutex_destroy(&g->lock);
    pthread_mutex_destroy(&g->link_lock);
    free(g);
}

/* ---- work ----------------------------------------------------------------------- */

/* Runs one collective; any failure mid-collective leaves peers at unknown
 * points of the protocol, so it fails the whole group. */
static void execute_(ddpc_queue *q, ddpc_work *w) {
    ddpc_group *g = q->g;
    ddpc_status st;
    int collective = q == &g->queues[DDPC_QUEUE_COLL];
    pthread_mutex_lock(&g->lock);
    if (collective) g->current = &w->args;
    int hit = deferred_hits_(g, &w->args);
    pthread_mutex_unlock(&g->lock);
    if (hit) ddpc_group_fail(g, DDPC_ERR_DIST, NULL);
    if (atomic_load(&g->failed)) {
        st = ddpc_group_error(g);
    } else {
        st = g->backend->run(g, g->bstate, &w->args, ddpc_deadline_after(w->args.timeout_s));
        if (st == DDPC_ERR_DIST && !atomic_load(&g->failed)) st = ddpc_group_explain(g, st);
        if (st != DDPC_OK && st != DDPC_ERR_ARG && st != DDPC_ERR_TYPE) ddpc_group_fail(g, st, ddpc_last_error());
    }
    if (st != DDPC_OK) {
        snprintf(w->msg, sizeof w->msg, "%s", ddpc_last_error());
        ddpc_clear_error();
    }
    pthread_mutex_lock(&w->lock);
    w->status = st;
    w->done = 1;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    pthread_mutex_lock(&g->lock);
    q->busy = 0;
    if (collective) g->current = NULL;
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
}

static void *worker_main_(void *arg) {
    ddpc_queue *q = arg;
    ddpc_group *g = q->g;
    pthread_mutex_lock(&g->lock);
    for (;;) {
        while (!(q->head && !q->busy) && !(g->stop && !q->head)) pthread_cond_wait(&g->cond, &g->lock);
        if (!q->head) break;
        ddpc_work *w = q->head;
        q->head = w->next;
        if (!q->head) q->tail = NULL;
        q->busy = 1;
        pthread_mutex_unlock(&g->lock);
        execute_(q, w);
        ddpc_work_release(w);
        pthread_mutex_lock(&g->lock);
    }
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

uint64_t ddpc_group_next_seq(ddpc_group *g) {
    pthread_mutex_lock(&g->lock);
    uint64_t seq = g->next_seq;
    pthread_mutex_unlock(&g->lock);
    return seq;
}

ddpc_status ddpc_group_submit(ddpc_group *g, const ddpc_coll_args *a, ddpc_work **out) {
    ddpc_work *w = calloc(1, sizeof *w);
    if (!w) return DDPC_ERROR(DDPC_ERR_OOM, "out of memory");
    w->args = *a;
    if (!(w->args.timeout_s > 0)) w->args.timeout_s = atomic_load(&g->timeout_s);
    w->refs = 2;
    w->owner = getpid();
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    int p2p = a->coll == DDPC_COLL_SEND || a->coll == DDPC_COLL_RECV;
    ddpc_queue *q = &g->queues[!p2p || g->backend != &ddpc_cpu_backend ? DDPC_QUEUE_COLL
                               : a->coll == DDPC_COLL_SEND ? DDPC_QUEUE_SEND : DDPC_QUEUE_RECV];
    pthread_mutex_lock(&g->lock);
    if (!p2p) w->args.seq = g->next_seq++;
    /* A call on an idle queue runs on the calling thread: no hand-off latency. */
    int inline_run = !out && !q->head && !q->busy;
    if (inline_run) {
        q->busy = 1;
    } else {
        if (!q->have_worker) {
            int rc = pthread_create(&q->worker, NULL, worker_main_, q);
            if (rc) {
                pthread_mutex_unlock(&g->lock);
                w->refs = 1;
                ddpc_work_release(w);
                return DDPC_ERROR(DDPC_ERR_SYS, "cannot start the group's worker thread: %s", strerror(rc));
            }
            q->have_worker = 1;
        }
        if (q->tail) q->tail->next = w;
        else q->head = w;
        q->tail = w;
        pthread_cond_broadcast(&g->cond);
    }
    pthread_mutex_unlock(&g->lock);
    if (inline_run) {
        execute_(q, w);
        ddpc_work_release(w);
    }
    if (out) {
        *out = w;
        return DDPC_OK;
    }
    ddpc_status st = ddpc_work_wait(w, -1);
    ddpc_work_release(w);
    return st;
}

ddpc_status ddpc_group_share(ddpc_group *g, size_t nbytes, ddpc_shm_reg **out) {
    if (g->backend != &ddpc_cpu_backend || !g->bstate)
        return DDPC_ERROR(DDPC_ERR_ARG, "a shared buffer needs the cpu backend and another rank of the group on "
                                        "this host");
    /* Hold the group while sharing: the store is then used by one thread at a time. */
    ddpc_queue *q = &g->queues[DDPC_QUEUE_COLL];
    pthread_mutex_lock(&g->lock);
    while (q->head || q->busy) pthread_cond_wait(&g->cond, &g->lock);
    q->busy = 1;
    pthread_mutex_unlock(&g->lock);
    ddpc_status st = atomic_load(&g->failed) ? ddpc_group_error(g) : ddpc_shm_share(g->bstate, nbytes, out);
    pthread_mutex_lock(&g->lock);
    q->busy = 0;
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
    return st;
}

int ddpc_work_done(ddpc_work *w) {
    pthread_mutex_lock(&w->lock);
    int d = w->done;
    pthread_mutex_unlock(&w->lock);
    return d;
}

ddpc_status ddpc_work_wait(ddpc_work *w, double timeout_s) {
    if (w->owner != getpid())
        return DDPC_ERROR(DDPC_ERR_DIST, "%s (collective #%llu) was started by the process this one was forked "
                          "from: it runs there, and this copy of its handle never completes",
                          ddpc_coll_name(w->args.coll), (unsigned long long)w->args.seq);
    /* The collective bounds itself by its timeout; a queued one may wait
     * behind others, so the default bound leaves room for those. */
    uint64_t deadline = timeout_s < 0 ? DDPC_NO_DEADLINE : ddpc_deadline_after(timeout_s);
    pthread_mutex_lock(&w->lock);
    while (!w->done) {
        if (deadline == DDPC_NO_DEADLINE) {
            pthread_cond_wait(&w->cond, &w->lock);
            continue;
        }
        int ms = ddpc_ms_left(deadline, 1000000);
        if (ms == 0) break;
        cond_wait_ms_(&w->cond, &w->lock, ms);
    }
    int done = w->done;
    pthread_mutex_unlock(&w->lock);
    if (!done)
        return DDPC_ERROR(DDPC_ERR_TIMEOUT, "%s (collective #%llu) did not complete within %.1f s",
                          ddpc_coll_name(w->args.coll), (unsigned long long)w->args.seq, timeout_s);
    return w->status == DDPC_OK ? DDPC_OK : rethrow_(w->status, w->msg);
}

void ddpc_work_release(ddpc_work *w) {
    if (w->owner != getpid()) return; /* a forked child's copy: its lock may have been held at the fork */
    pthread_mutex_lock(&w->lock);
    int left = --w->refs;
    pthread_mutex_unlock(&w->lock);
    if (left == 0) {
        pthread_cond_destroy(&w->cond);
        pthread_mutex_destroy(&w->lock);
        free(w);
    }
}

/* ---- death monitor -------------------------------------------------------------- */

static struct {
    pthread_mutex_t lock;
    ddpc_group **groups;
    int ngroups, cap;
    int watch_fd, wake[2], running, dead;
    pthread_t thread;
    char death[1024]; /* the first rank death seen: groups made afterwards fail at once */
    char prefix[96];  /* of the job's keys in the store */
} mon_ = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, -1, {-1, -1}, 0, 0, 0, {0}, {0}};

/* A forked child is no member of its parent's job, yet it shares the
 * parent's wake pipe and watch connection: stopping the monitor there would
 * stop the parent's thread (through the pipe), tell the store that the
 * parent left (so its death would go unreported), and join a thread that
 * does not exist in the child. So the child forgets the monitor: it closes
 * its copies of the descriptors, which leaves the parent's open, and drops
 * the parent's groups from the registry. The lock is held across fork so
 * the child finds it in a consistent state. */
static void monitor_prepare_fork_(void) { pthread_mutex_lock(&mon_.lock); }
static void monitor_parent_after_fork_(void) { pthread_mutex_unlock(&mon_.lock); }

static void monitor_child_after_fork_(void) {
    if (mon_.running) close(mon_.watch_fd), close(mon_.wake[0]), close(mon_.wake[1]);
    mon_.watch_fd = mon_.wake[0] = mon_.wake[1] = -1;
    mon_.running = mon_.dead = 0;
    mon_.ngroups = 0;
    mon_.death[0] = '\0';
    pthread_mutex_unlock(&mon_.lock);
}

static void monitor_register_fork_handlers_(void) {
    pthread_atfork(monitor_prepare_fork_, monitor_parent_after_fork_, monitor_child_after_fork_);
}

static void monitor_forget_on_fork_(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, monitor_register_fork_handlers_);
}

void ddpc_monitor_register(ddpc_group *g) {
    monitor_forget_on_fork_();
    pthread_mutex_lock(&mon_.lock);
    if (mon_.ngroups == mon_.cap) {
        int cap = mon_.cap ? 2 * mon_.cap : 8;
        ddpc_group **ng = realloc(mon_.groups, (size_t)cap * sizeof *ng);
        if (ng) mon_.groups = ng, mon_.cap = cap;
    }
    if (mon_.ngroups < mon_.cap) mon_.groups[mon_.ngroups++] = g;
    /* A group made after a rank died would wait for it until the timeout. */
    if (mon_.death[0]) ddpc_group_fail(g, DDPC_ERR_DIST, mon_.death);
    pthread_mutex_unlock(&mon_.lock);
}

void ddpc_monitor_unregister(ddpc_group *g) {
    pthread_mutex_lock(&mon_.lock);
    for (int i = 0; i < mon_.ngroups; i++)
        if (mon_.groups[i] == g) mon_.groups[i] = mon_.groups[--mon_.ngroups];
    pthread_mutex_unlock(&mon_.lock);
}

/* Fails the registered groups an event concerns: all of them at once for a
 * death, the group named by its prefix for an abort ("prefix\nseq\nreason"),
 * from the collective where it arose. */
/* A rank that left on purpose the job whose keys start with `prefix`: its
 * groups there fail no collective that ran without it, only the waits for it
 * (shm.c), which notice within a wait slice. A job before this one on the
 * same store has another prefix. */
static void monitor_departed_(int rank, const char *prefix) {
    pthread_mutex_lock(&mon_.lock);
    for (int i = 0; i < mon_.ngroups; i++) {
        ddpc_group *g = mon_.groups[i];
        if (strncmp(g->prefix, prefix, strlen(prefix)) != 0) continue;
        for (int k = 0; k < g->size; k++)
            if (g->global_ranks[k] == rank) atomic_store(&g->departed[k], 1);
    }
    pthread_mutex_unlock(&mon_.lock);
}

static void monitor_event_(int rank, const char *text) {
    char msg[1024];
    const char *reason = strchr(text, '\n');
    unsigned long long seq = 0;
    size_t left = strlen(DDPC_STORE_LEFT_EVENT);
    if (rank >= 0 && strncmp(text, DDPC_STORE_LEFT_EVENT, left) == 0) {
        if (text[left]) monitor_departed_(rank, text + left);
        return;
    }
    if (rank >= 0) {
        snprintf(msg, sizeof msg, "rank %d died or exited while the process group was in use", rank);
    } else if (rank == -2 && reason) {
        char *end;
        seq = strtoull(reason + 1, &end, 10);
        snprintf(msg, sizeof msg, "%s", *end == '\n' ? end + 1 : reason + 1);
    } else {
        snprintf(msg, sizeof msg, "rank 0 died or exited while the process group was in use (lost the connection "
                                  "to the store it hosted)");
    }
    size_t plen = reason ? (size_t)(reason - text) : 0;
    pthread_mutex_lock(&mon_.lock);
    if (rank != -2 && !mon_.death[0]) snprintf(mon_.death, sizeof mon_.death, "%s", msg);
    for (int i = 0; i < mon_.ngroups; i++) {
        ddpc_group *g = mon_.groups[i];
        if (rank != -2)
            ddpc_group_fail(g, DDPC_ERR_DIST, msg);
        else if (strlen(g->prefix) == plen && strncmp(g->prefix, text, plen) == 0)
            ddpc_group_fail_from(g, DDPC_ERR_DIST, msg, seq);
    }
    pthread_mutex_unlock(&mon_.lock);
}

static void *monitor_main_(void *arg) {
    (void)arg;
    for (int64_t seen = 1;; seen++) {
        struct pollfd p[2] = {{mon_.watch_fd, POLLIN, 0}, {mon_.wake[0], POLLIN, 0}};
        while (poll(p, 2, -1) < 0 && errno == EINTR) {
        }
        if (p[1].revents || !p[0].revents) return NULL;
        char text[4200];
        int rank = ddpc_store_read_event(mon_.watch_fd, text, sizeof text);
        monitor_event_(rank, text);
        if (rank == -1 || ddpc_store_watch_next(mon_.watch_fd, seen, 10) != DDPC_OK) {
            ddpc_clear_error();
            mon_.dead = 1;
            return NULL;
        }
    }
}

ddpc_status ddpc_monitor_start(ddpc_store *store, int global_rank, const char *prefix) {
    monitor_forget_on_fork_();
    if (mon_.running) return DDPC_ERROR(DDPC_ERR_ARG, "the default process group is already initialised");
    snprintf(mon_.prefix, sizeof mon_.prefix, "%s", prefix);
    mon_.death[0] = '\0'; /* a new job: the deaths of an earlier one do not fail its groups */
    CHECK(ddpc_store_watch(store, global_rank, &mon_.watch_fd));
    if (pipe2(mon_.wake, O_CLOEXEC) < 0) {
        close(mon_.watch_fd);
        return DDPC_ERROR(DDPC_ERR_SYS, "pipe failed: %s", strerror(errno));
    }
    mon_.dead = 0;
    int rc = pthread_create(&mon_.thread, NULL, monitor_main_, NULL);
    if (rc) {
        close(mon_.watch_fd), close(mon_.wake[0]), close(mon_.wake[1]);
        return DDPC_ERROR(DDPC_ERR_SYS, "cannot start the monitor thread: %s", strerror(rc));
    }
    mon_.running = 1;
    return DDPC_OK;
}

void ddpc_monitor_stop(double timeout_s) {
    if (!mon_.running) return;
    char b = 1;
    if (write(mon_.wake[1], &b, 1) == 1) pthread_join(mon_.thread, NULL);
    if (!mon_.dead && ddpc_store_leave(mon_.watch_fd, mon_.prefix, timeout_s) != DDPC_OK) ddpc_clear_error();
    close(mon_.watch_fd), close(mon_.wake[0]), close(mon_.wake[1]);
    mon_.watch_fd = mon_.wake[0] = mon_.wake[1] = -1;
    mon_.running = 0;
}

/* ---- the cpu backend ------------------------------------------------------------ */

static ddpc_status cpu_init_(ddpc_group *g, void **state) {
    ddpc_shm *s = NULL;
    if (g->topo.local_size > 1) CHECK(ddpc_shm_init(g, &s));
    *state = s;
    return DDPC_OK;
}

static int is_leader_(const ddpc_group *g) { return g->topo.local_rank == 0; }

/* all_reduce across hosts: within each host through shared memory, across
 * host leaders around the ring, then back out within each host. */
static ddpc_status hier_allreduce_(ddpc_group *g, ddpc_shm *s, const ddpc_coll_args *a, uint64_t deadline);

/* float16 / bfloat16 average across hosts: reduced in float32, as on one host,
 * since the partial sums between hosts (stored in the half type) could leave
 * its range where the average does not. */
static ddpc_status half_average_(ddpc_group *g, ddpc_shm *s, const ddpc_coll_args *a, uint64_t deadline) {
    float *wide = malloc((a->count ? a->count : 1) * sizeof *wide);
    if (!wide) return DDPC_ERROR(DDPC_ERR_OOM, "out of memory for a float32 copy of %zu elements", a->count);
    ddpc_16bit_to_float(a->dtype, a->in, wide, a->count);
    ddpc_coll_args w = *a;
    w.dtype = DDPC_FLOAT32, w.in = w.out = wide;
    ddpc_status st = hier_allreduce_(g, s, &w, deadline);
    if (st == DDPC_OK) ddpc_float_to_16bit(a->dtype, wide, a->out, a->count);
    free(wide);
    return st;
}

/* Integer average across hosts, exact: the partial sums between hosts could
 * leave the type's range where the average does not. Each rank sends its
 * values as int64 quotients and remainders by the group size, x = n*q + r,
 * whose sums Q and R cannot overflow (|Q| <= the type's limit, |R| < n*n);
 * the average is Q + R/n, truncated toward zero as one division would. */
static ddpc_status int_average_(ddpc_group *g, ddpc_shm *s, const ddpc_coll_args *a, uint64_t deadline) {
    const int64_t n = g->size;
    const size_t count = a->count;
    int64_t *qr = malloc((count ? 2 * count : 1) * sizeof *qr);
    if (!qr) return DDPC_ERROR(DDPC_ERR_OOM, "out of memory for an int64 copy of %zu elements", 2 * count);
    for (size_t i = 0; i < count; i++) {
        int64_t x = a->dtype == DDPC_INT64   ? ((const int64_t *)a->in)[i]
                    : a->dtype == DDPC_INT32 ? ((const int32_t *)a->in)[i]
                                             : ((const uint8_t *)a->in)[i];
        qr[i] = x / n;
        qr[count + i] = x % n;
    }
    ddpc_coll_args w = *a;
    w.op = DDPC_RED_SUM, w.dtype = DDPC_INT64, w.in = w.out = qr, w.count = 2 * count;
    ddpc_status st = hier_allreduce_(g, s, &w, deadline);
    for (size_t i = 0; st == DDPC_OK && i < count; i++) {
        int64_t r = qr[count + i], t = qr[i] + r / n, rem = r % n;
        if (rem < 0 && t > 0) t--; /* the quotient's remainder must have the sum's sign */
        else if (rem > 0 && t < 0) t++;
        if (a->dtype == DDPC_INT64) ((int64_t *)a->out)[i] = t;
        else if (a->dtype == DDPC_INT32) ((int32_t *)a->out)[i] = (int32_t)t;
        else ((uint8_t *)a->out)[i] = (uint8_t)t;
    }
    free(qr);
    return st;
}

static ddpc_status hier_allreduce_(ddpc_group *g, ddpc_shm *s, const ddpc_coll_args *a, uint64_t deadline) {
    if (a->op == DDPC_RED_AVG && (a->dtype == DDPC_FLOAT16 || a->dtype == DDPC_BFLOAT16))
        return half_average_(g, s, a, deadline);
    if (a->op == DDPC_RED_AVG && (a->dtype == DDPC_INT64 || a->dtype == DDPC_INT32 || a->dtype == DDPC_UINT8))
        return int_average_(g, s, a, deadline);
    ddpc_coll_args b = *a;
    b.op = a->op == DDPC_RED_AVG ? DDPC_RED_SUM : a->op;
    b.in = b.out;
    if (s) CHECK(ddpc_shm_run(s, &(ddpc_coll_args){.coll = DDPC_COLL_ALLREDUCE, .op = b.op, .dtype = b.dtype,
                                                    .in = a->in, .out = a->out, .count = a->count, .seq = a->seq,
                                                    .timeout_s = a->timeout_s},
                              deadline));
    if (is_leader_(g)) CHECK(ddpc_ring_allreduce(g, &b, deadline));
    if (s) CHECK(ddpc_shm_run(s, &(ddpc_coll_args){.coll = DDPC_COLL_BROADCAST, .dtype = b.dtype, .in = b.out,
                                                    .out = b.out, .count = b.count, .peer = 0, .seq = a->seq,
                                                    .timeout_s = a->timeout_s},
                              deadline));
    if (a->op == DDPC_RED_AVG) {
        const void *src = b.out;
        ddpc_reduce(b.dtype, DDPC_RED_SUM, b.out, &src, 1, b.count, g->size);
    }
    return DDPC_OK;
}

static ddpc_status hier_broadcast_(ddpc_group *g, ddpc_shm *s, const ddpc_coll_args *a, uint64_t deadline) {
    const ddpc_topology *t = &g->topo;
    int root_node = t->node_of[a->peer];
    ddpc_coll_args local = *a;
    local.coll = DDPC_COLL_BROADCAST; /* a scatter's too: the ring's header keeps the call's name */
    if (s && t->node == root_node) {
        for (int j = 0; j < t->local_size; j++)
            if (t->local_ranks[j] == a->peer) local.peer = j;
        CHECK(ddpc_shm_run(s, &local, deadline));
    }
    if (is_leader_(g)) CHECK(ddpc_ring_broadcast(g, a, root_node, deadline));
    if (s && t->node != root_node) {
        local.peer = 0;
        CHECK(ddpc_shm_run(s, &local, deadline));
    }
    return DDPC_OK;
}

/* gather, scatter and reduce across hosts: as all_gather, broadcast and
 * all_reduce of the whole, every rank working in scratch memory but the
 * root, which keeps the part it wants. */
static ddpc_status hier_rooted_(ddpc_group *g, ddpc_shm *s, const ddpc_coll_args *a, uint64_t deadline) {
    size_t es = ddpc_dtype_size(a->dtype), n = a->count, whole = (a->coll == DDPC_COLL_REDUCE ? 1 : (size_t)g->size) * n;
    int root = g->rank == a->peer;
    char *tmp = NULL;
    ddpc_coll_args b = *a;
    /* The root gathers and reduces into its output and scatters from its
     * input (a broadcast only reads at its root); the others use scratch. */
    if (root) {
        b.out = a->coll == DDPC_COLL_SCATTER ? (void *)a->in : a->out;
    } else {
        if (!(tmp = malloc(whole * es + 1)))
            return DDPC_ERROR(DDPC_ERR_OOM, "out of memory for the %zu bytes of a %s", whole * es,
                              ddpc_coll_name(a->coll));
        if (a->coll == DDPC_COLL_REDUCE) memcpy(tmp, a->in, n * es);
        b.out = tmp;
    }
    ddpc_status st;
    if (a->coll == DDPC_COLL_GATHER) {
        /* As cpu_run_'s all_gather: zeros but this rank's block, then a bitwise-or all-reduce. */
        char *out = b.out;
        memset(out, 0, whole * es);
        memcpy(out + (size_t)g->rank * n * es, a->in, n * es);
        b.op = DDPC_RED_BOR, b.dtype = DDPC_UINT8, b.count = whole * es, b.in = out;
        st = hier_allreduce_(g, s, &b, deadline);
    } else if (a->coll == DDPC_COLL_SCATTER) {
        b.in = b.out, b.count = whole;
        st = hier_broadcast_(g, s, &b, deadline);
        if (st == DDPC_OK) memcpy(a->out, (char *)b.out + (size_t)g->rank * n * es, n * es);
    } else {
        b.in = b.out;
        st = hier_allreduce_(g, s, &b, deadline);
    }
    free(tmp);
    return st;
}

static int scattering_(ddpc_coll c) { return c == DDPC_COLL_REDUCE_SCATTER || c == DDPC_COLL_SCATTER; }

static ddpc_status cpu_run_(ddpc_group *g, void *state, const ddpc_coll_args *a, uint64_t deadline);

/* A collective whose whole is a list of blocks, across hosts: through one
 * buffer, since the paths across hosts move the whole at once. */
static ddpc_status hier_blocks_(ddpc_group *g, ddpc_shm *s, const ddpc_coll_args *a, uint64_t deadline) {
    size_t bytes = a->count * ddpc_dtype_size(a->dtype);
    char *whole = malloc((size_t)g->size * bytes + 1);
    if (!whole)
        return DDPC_ERROR(DDPC_ERR_OOM, "out of memory for the %zu bytes of a %s", (size_t)g->size * bytes,
                          ddpc_coll_name(a->coll));
    ddpc_coll_args b = *a;
    b.blocks = NULL;
    if (ddpc_coll_gathers(a->coll)) {
        b.out = whole;
    } else {
        for (int r = 0; r < g->size; r++) memcpy(whole + (size_t)r * bytes, a->blocks[r], bytes);
        b.in = whole;
    }
    ddpc_status st = cpu_run_(g, s, &b, deadline);
    if (st == DDPC_OK && ddpc_coll_gathers(a->coll))
        for (int r = 0; r < g->size; r++) memcpy(a->blocks[r], whole + (size_t)r * bytes, bytes);
    free(whole);
    return st;
}

static ddpc_status cpu_run_(ddpc_group *g, void *state, const ddpc_coll_args *a, uint64_t deadline) {
    ddpc_shm *s = state;
    size_t es = ddpc_dtype_size(a->dtype), n = a->count;
    if (a->coll == DDPC_COLL_SEND) return ddpc_p2p_send(g, a, deadline);
    if (a->coll == DDPC_COLL_RECV) return ddpc_p2p_recv(g, a, deadline);
    if (g->topo.nnodes == 1) {
        if (s) return ddpc_shm_run(s, a, deadline);
        /* A group of one: the only work is moving data into place. */
        if (ddpc_coll_gathers(a->coll)) memmove(ddpc_coll_block(a, a->out, 0), a->in, n * es);
        if (scattering_(a->coll)) memmove(a->out, ddpc_coll_block(a, a->in, 0), n * es);
        return DDPC_OK;
    }
    if (a->blocks) return hier_blocks_(g, s, a, deadline);
    switch (a->coll) {
    case DDPC_COLL_ALLREDUCE:
        return hier_allreduce_(g, s, a, deadline);
    case DDPC_COLL_BROADCAST:
        return hier_broadcast_(g, s, a, deadline);
    case DDPC_COLL_BARRIER: {
        /* Through an all-reduce whose ring header still names the collective
         * called, so a barrier never matches another rank's all_reduce. */
        uint8_t token = 0;
        return hier_allreduce_(g, s, &(ddpc_coll_args){.coll = a->coll, .op = DDPC_RED_MAX,
                                                        .dtype = DDPC_UINT8, .in = &token, .out = &token,
                                                        .count = 1, .seq = a->seq,
                                                        .timeout_s = a->timeout_s}, deadline);
    }
    case DDPC_COLL_ALLGATHER: {
        /* Zeros everywhere but this rank's block, then a bitwise-or all-reduce:
         * exact for every dtype, and it rides the hierarchical path. */
        char *out = a->out;
        memset(out, 0, (size_t)g->size * n * es);
        memcpy(out + (size_t)g->rank * n * es, a->in, n * es);
        return hier_allreduce_(g, s, &(ddpc_coll_args){.coll = a->coll, .op = DDPC_RED_BOR,
                                                        .dtype = DDPC_UINT8, .in = out, .out = out,
                                                        .count = (size_t)g->size * n * es, .seq = a->seq,
                                                        .timeout_s = a->timeout_s}, deadline);
    }
    case DDPC_COLL_REDUCE_SCATTER: {
        char *tmp = malloc((size_t)g->size * n * es + 1);
        if (!tmp) return DDPC_ERROR(DDPC_ERR_OOM, "out of memory for reduce_scatter");
        memcpy(tmp, a->in, (size_t)g->size * n * es);
        ddpc_status st = hier_allreduce_(g, s, &(ddpc_coll_args){.coll = a->coll, .op = a->op,
                                                                  .dtype = a->dtype, .in = tmp, .out = tmp,
                                                                  .count = (size_t)g->size * n, .seq = a->seq,
                                                                  .timeout_s = a->timeout_s}, deadline);
        if (st == DDPC_OK) memcpy(a->out, tmp + (size_t)g->rank * n * es, n * es);
        free(tmp);
        return st;
    }
    case DDPC_COLL_GATHER:
    case DDPC_COLL_SCATTER:
    case DDPC_COLL_REDUCE:
        return hier_rooted_(g, s, a, deadline);
    default:
        return DDPC_ERROR(DDPC_ERR_INTERNAL, "unknown collective %d", (int)a->coll);
    }
}

static void cpu_abort_(void *state) { ddpc_shm_abort(state); }
static void cpu_free_(void *state) { ddpc_shm_free(state); }

const ddpc_backend ddpc_cpu_backend = {"cpu", cpu_init_, cpu_run_, cpu_abort_, cpu_free_};

const ddpc_backend *ddpc_backend_find(const char *name) {
    static const ddpc_backend *const backends[] = {&ddpc_cpu_backend};
    for (size_t i = 0; i < sizeof backends / sizeof *backends; i++)
        if (strcmp(backends[i]->name, name) == 0) return backends[i];
    return NULL;
}

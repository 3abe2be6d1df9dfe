/* TCP rendezvous key-value store: the poll()-driven server thread and the
 * client calls (protocol in store.h). */
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <stdio.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net.h"

enum {
    CMD_HELLO = 1, CMD_SET, CMD_GET, CMD_ADD, CMD_CHECK, CMD_WAIT, CMD_DELETE, CMD_NUMKEYS,
    CMD_WATCH, CMD_LEAVE, CMD_DEPARTED, CMD_ABORT, CMD_COMPARE_SET, CMD_APPEND, CMD_MULTI_GET, CMD_MULTI_SET,
    CMD_LIST_KEYS, CMD_QUEUE_PUSH, CMD_QUEUE_POP, CMD_QUEUE_LEN, CMD_BARRIER,
};

/* The first byte of the replies to requests that may be refused or that wait with a deadline. */
enum { REPLY_NO = 0, REPLY_YES = 1, REPLY_TIMED_OUT = 2 };

/* The largest value a key may grow to by append: one the client's get still receives. */
#define MAX_VALUE_ (DDPC_STORE_MAX_FRAME - 64)
/* How long past a pop's or barrier's own deadline its client waits for the
 * server's answer: the server answers at the deadline, so only a server gone
 * silent lets it pass. */
#define REPLY_GRACE_S 5.0

#define MAX_CONNS 4096
/* Keepalive on every store connection: a rank whose host goes silent counts
 * as dead after 2 + 1 * 4 = 6 seconds, within the 10 s a death must be
 * reported in. */
#define LIVENESS_IDLE_S 2
#define LIVENESS_INTERVAL_S 1
#define LIVENESS_COUNT 4
#define MAX_EVENTS (1 << 20) /* a bound on a malfunctioning client, far beyond what jobs produce */

/* ---- growable byte buffer ------------------------------------------------------ */

typedef struct {
    char *data;
    size_t len, cap;
} bytes_;

static int bytes_append_(bytes_ *b, const void *p, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) return -1;
        b->data = d, b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

static int bytes_u32_(bytes_ *b, uint32_t v) { return bytes_append_(b, &v, 4); }

/* Cursor over a received body; any read past the end marks it bad. */
typedef struct {
    const char *p;
    size_t left;
    int bad;
} reader_;

static const char *read_raw_(reader_ *r, size_t n) {
    if (r->bad || n > r->left) { r->bad = 1; return NULL; }
    const char *p = r->p;
    r->p += n, r->left -= n;
    return p;
}

static uint32_t read_u32_(reader_ *r) {
    const char *p = read_raw_(r, 4);
    uint32_t v = 0;
    if (p) memcpy(&v, p, 4);
    return v;
}

static const char *read_str_(reader_ *r, uint32_t *len) {
    *len = read_u32_(r);
    return read_raw_(r, *len);
}

/* ---- server -------------------------------------------------------------------- */

typedef struct {
    char *key;
    uint32_t klen;
    char *val;
    uint32_t vlen;
} entry_;

/* A queue's items in push order, items[head..n) still queued. Queues are
 * apart from the keys (list_keys and num_keys leave them out, as torch's
 * stores do) but check and wait see a non-empty one as present. A queue that
 * empties is dropped, so every queue in the table holds an item. */
typedef struct {
    char *key;
    uint32_t klen;
    struct { char *data; uint32_t len; } *items;
    size_t head, n, cap;
} queue_;

enum { PARK_NONE = 0, PARK_WAIT, PARK_WATCH, PARK_DEPARTED, PARK_POP, PARK_BARRIER };
enum { RANK_UNKNOWN = 0, RANK_ALIVE, RANK_LEFT, RANK_DEAD };

typedef struct {
    int fd;
    int authed;
    int rank;              /* announced by a watch connection, else -1 */
    char hdr[4];
    size_t hdr_got;
    char *body;
    uint32_t body_len, body_got;
    bytes_ out;
    int park;
    char *park_body;       /* the parked request, kept for re-evaluation (POP, BARRIER: the key) */
    uint32_t park_len;
    int64_t park_n;        /* DEPARTED: ranks to wait for; WATCH: events already seen; BARRIER: its world size */
    uint64_t park_deadline; /* POP, BARRIER: when the server answers REPLY_TIMED_OUT */
} conn_;

typedef struct {
    int listen_fd, wake_pipe[2];
    char token[DDPC_STORE_MAX_TOKEN + 1];
    pthread_t thread;
    pid_t owner;  /* the process whose thread serves: a forked child has a copy but no thread */
    conn_ *conns;
    int nconns;
    entry_ *entries;
    size_t nentries, cap_entries;
    queue_ *queues;
    size_t nqueues, cap_queues;
    int *rank_state;
    int nranks;
    /* Failures watchers are told about, in order: a dead rank, or an abort
     * text ("group prefix\nseq\nreason") with rank -2. */
    struct { int32_t rank; char *text; } *events; /* grows: every job on a reused store adds its own */
    int nevents, cap_events;
} server_;

struct ddpc_store {
    server_ *server;
    int fd, port;
    char host[256], given_host[256], token[DDPC_STORE_MAX_TOKEN + 1];
    double timeout_s;
    int broken;            /* a timed-out reply may still arrive: reconnect before the next request */
    pthread_mutex_t lock;
};

static entry_ *find_(server_ *sv, const char *key, uint32_t klen) {
    for (size_t i = 0; i < sv->nentries; i++)
        if (sv->entries[i].klen == klen && memcmp(sv->entries[i].key, key, klen) == 0) return &sv->entries[i];
    return NULL;
}

static int put_(server_ *sv, const char *key, uint32_t klen, const char *val, uint32_t vlen) {
    char *v = malloc(vlen ? vlen : 1);
    if (!v) return -1;
    memcpy(v, val, vlen);
    entry_ *e = find_(sv, key, klen);
    if (e) {
        free(e->val);
        e->val = v, e->vlen = vlen;
        return 0;
    }
    if (sv->nentries == sv->cap_entries) {
        size_t cap = sv->cap_entries ? 2 * sv->cap_entries : 64;
        entry_ *ne = realloc(sv->entries, cap * sizeof *ne);
        if (!ne) { free(v); return -1; }
        sv->entries = ne, sv->cap_entries = cap;
    }
    char *k = malloc(klen ? klen : 1);
    if (!k) { free(v); return -1; }
    memcpy(k, key, klen);
    sv->entries[sv->nentries++] = (entry_){k, klen, v, vlen};
    return 0;
}

static int reply_(conn_ *c, const void *body, uint32_t len) {
    return bytes_u32_(&c->out, len) || bytes_append_(&c->out, body, len) ? -1 : 0;
}

static int reply_byte_(conn_ *c, uint8_t v) { return reply_(c, &v, 1); }

/* A reply of a status byte and `len` bytes. */
static int reply_status_(conn_ *c, uint8_t status, const void *body, uint32_t len) {
    return bytes_u32_(&c->out, 1 + len) || bytes_append_(&c->out, &status, 1) || bytes_append_(&c->out, body, len)
               ? -1
               : 0;
}

/* A counter's value: its decimal text, as torch's stores keep counters (get()
 * reads b"5", and add() continues from a value set() as b"10"); 0 for a
 * missing key or a value that is no number. */
static int64_t counter_(const entry_ *e) {
    char text[24];
    if (!e || e->vlen == 0 || e->vlen >= sizeof text) return 0;
    memcpy(text, e->val, e->vlen);
    text[e->vlen] = '\0';
    return strtoll(text, NULL, 10);
}

static int add_counter_(server_ *sv, const char *key, uint32_t klen, int64_t delta, int64_t *result) {
    int64_t cur = (int64_t)((uint64_t)counter_(find_(sv, key, klen)) + (uint64_t)delta);
    char text[24];
    int tn = snprintf(text, sizeof text, "%lld", (long long)cur);
    *result = cur;
    return put_(sv, key, klen, text, (uint32_t)tn);
}

static queue_ *find_queue_(server_ *sv, const char *key, uint32_t klen) {
    for (size_t i = 0; i < sv->nqueues; i++)
        if (sv->queues[i].klen == klen && memcmp(sv->queues[i].key, key, klen) == 0) return &sv->queues[i];
    return NULL;
}

static void queue_drop_(server_ *sv, queue_ *q) {
    for (size_t i = q->head; i < q->n; i++) free(q->items[i].data);
    free(q->items);
    free(q->key);
    *q = sv->queues[--sv->nqueues];
}

static int queue_push_(server_ *sv, const char *key, uint32_t klen, const char *val, uint32_t vlen) {
    char *v = malloc(vlen ? vlen : 1);
    if (!v) return -1;
    memcpy(v, val, vlen);
    queue_ *q = find_queue_(sv, key, klen);
    if (!q) {
        if (sv->nqueues == sv->cap_queues) {
            size_t cap = sv->cap_queues ? 2 * sv->cap_queues : 16;
            queue_ *nq = realloc(sv->queues, cap * sizeof *nq);
            if (!nq) goto fail;
            sv->queues = nq, sv->cap_queues = cap;
        }
        queue_ nq = {.klen = klen, .cap = 16};
        nq.key = malloc(klen ? klen : 1);
        nq.items = malloc(nq.cap * sizeof *nq.items);
        if (!nq.key || !nq.items) {
            free(nq.key), free(nq.items);
            goto fail;
        }
        memcpy(nq.key, key, klen);
        q = &sv->queues[sv->nqueues++];
        *q = nq;
    } else if (q->n == q->cap) {
        /* Reuse the popped slots before growing. */
        if (q->head > q->cap / 2) {
            memmove(q->items, q->items + q->head, (q->n - q->head) * sizeof *q->items);
            q->n -= q->head, q->head = 0;
        } else {
            void *items = realloc(q->items, 2 * q->cap * sizeof *q->items);
            if (!items) goto fail;
            q->items = items, q->cap *= 2;
        }
    }
    q->items[q->n].data = v;
    q->items[q->n++].len = vlen;
    return 0;
fail:
    free(v);
    return -1;
}

/* Answers `c` with the oldest item of `q`, which is dropped once empty. */
static int queue_pop_(server_ *sv, queue_ *q, conn_ *c) {
    int rc = reply_status_(c, REPLY_YES, q->items[q->head].data, q->items[q->head].len);
    free(q->items[q->head].data);
    if (++q->head == q->n) queue_drop_(sv, q);
    return rc;
}

/* A barrier's answer: the status and how many workers have arrived. */
static int barrier_reply_(server_ *sv, conn_ *c, uint8_t status) {
    int64_t arrived = counter_(find_(sv, c->park_body, c->park_len));
    return reply_status_(c, status, &arrived, 8);
}

/* Parks `c` until unpark_ finds its condition true; `timeout_ms` < 0 waits
 * without a deadline (the client's own deadline still bounds it). */
static int park_(conn_ *c, int kind, const char *body, uint32_t len, int64_t n, int64_t timeout_ms) {
    c->park_body = malloc(len ? len : 1);
    if (!c->park_body) return -1;
    memcpy(c->park_body, body, len);
    c->park_len = len;
    c->park_n = n;
    c->park_deadline = timeout_ms < 0 ? DDPC_NO_DEADLINE : ddpc_deadline_after((double)timeout_ms / 1e3);
    c->park = kind;
    return 0;
}

static void unpark_conn_(conn_ *c) {
    c->park = PARK_NONE;
    free(c->park_body);
    c->park_body = NULL;
}

/* Whether every key named in a CHECK/WAIT body is present; -1 if malformed. */
static int keys_present_(server_ *sv, reader_ *r) {
    uint32_t n = read_u32_(r);
    int all = 1;
    for (uint32_t i = 0; i < n && !r->bad; i++) {
        uint32_t kl;
        const char *k = read_str_(r, &kl);
        if (k && !find_(sv, k, kl) && !find_queue_(sv, k, kl)) all = 0;
    }
    return r->bad || r->left ? -1 : all;
}

static int departed_count_(server_ *sv) {
    int n = 0;
    for (int i = 0; i < sv->nranks; i++) n += sv->rank_state[i] == RANK_LEFT || sv->rank_state[i] == RANK_DEAD;
    return n;
}

#define STORE_MAX_RANK_ (1 << 24)

/* `left_prefix`: for RANK_LEFT, the key prefix of the job the rank left. */
/* Appends an event for the watchers, taking `text` (NULL for none); -1 when out of memory. */
static int add_event_(server_ *sv, int32_t rank, char *text) {
    if (sv->nevents == MAX_EVENTS) {
        free(text);
        return 0;
    }
    if (sv->nevents == sv->cap_events) {
        int cap = sv->cap_events ? 2 * sv->cap_events : 64;
        void *ev = realloc(sv->events, (size_t)cap * sizeof *sv->events);
        if (!ev) {
            free(text);
            return -1;
        }
        sv->events = ev, sv->cap_events = cap;
    }
    sv->events[sv->nevents].rank = rank;
    sv->events[sv->nevents++].text = text;
    return 0;
}

static int set_rank_state_(server_ *sv, int rank, int state, const char *left_prefix, uint32_t prefix_len) {
    if (rank >= sv->nranks) {
        int n = rank + 1 > 2 * sv->nranks ? rank + 1 : 2 * sv->nranks;
        int *rs = realloc(sv->rank_state, (size_t)n * sizeof *rs);
        if (!rs) return -1;
        memset(rs + sv->nranks, 0, (size_t)(n - sv->nranks) * sizeof *rs);
        sv->rank_state = rs, sv->nranks = n;
    }
    sv->rank_state[rank] = state;
    if (state != RANK_DEAD && state != RANK_LEFT) return 0;
    char *text = NULL;
    if (state == RANK_LEFT) {
        size_t n = strlen(DDPC_STORE_LEFT_EVENT);
        if (!(text = malloc(n + prefix_len + 1))) return -1;
        memcpy(text, DDPC_STORE_LEFT_EVENT, n);
        memcpy(text + n, left_prefix, prefix_len);
        text[n + prefix_len] = '\0';
    }
    return add_event_(sv, rank, text);
}

/* Answers parked requests whose condition now holds. */
static void unpark_(server_ *sv) {
    for (int i = 0; i < sv->nconns; i++) {
        conn_ *c = &sv->conns[i];
        int ready = 0;
        if (c->park == PARK_WAIT) {
            reader_ r = {c->park_body, c->park_len, 0};
            ready = keys_present_(sv, &r) == 1;
            if (ready) reply_byte_(c, 1);
        } else if (c->park == PARK_WATCH && sv->nevents > c->park_n) {
            const char *text = sv->events[c->park_n].text ? sv->events[c->park_n].text : "";
            uint32_t tl = (uint32_t)strlen(text);
            bytes_u32_(&c->out, 4 + tl);
            bytes_append_(&c->out, &sv->events[c->park_n].rank, 4);
            bytes_append_(&c->out, text, tl);
            ready = 1;
        } else if (c->park == PARK_DEPARTED && departed_count_(sv) >= c->park_n) {
            reply_byte_(c, 1);
            ready = 1;
        } else if (c->park == PARK_POP) {
            /* Each item wakes one waiting pop. */
            queue_ *q = find_queue_(sv, c->park_body, c->park_len);
            if ((ready = q != NULL)) queue_pop_(sv, q, c);
        } else if (c->park == PARK_BARRIER && counter_(find_(sv, c->park_body, c->park_len)) >= c->park_n) {
            barrier_reply_(sv, c, REPLY_YES);
            ready = 1;
        }
        if (ready) unpark_conn_(c);
    }
}

/* Answers the parked pops and barriers whose deadline passed; returns the
 * milliseconds until the next deadline, -1 where none is parked. */
static int expire_parked_(server_ *sv) {
    int next = -1;
    for (int i = 0; i < sv->nconns; i++) {
        conn_ *c = &sv->conns[i];
        if ((c->park != PARK_POP && c->park != PARK_BARRIER) || c->park_deadline == DDPC_NO_DEADLINE) continue;
        int ms = ddpc_ms_left(c->park_deadline, INT_MAX);
        if (ms > 0) {
            next = next < 0 || ms < next ? ms : next;
            continue;
        }
        if (c->park == PARK_POP)
            reply_byte_(c, REPLY_TIMED_OUT);
        else
            barrier_reply_(sv, c, REPLY_TIMED_OUT);
        unpark_conn_(c);
    }
    return next;
}

/* Executes one request; returns -1 to drop the connection. */
static int handle_(server_ *sv, conn_ *c, const char *body, uint32_t len) {
    reader_ r = {body + 1, len - 1, 0};
    uint8_t cmd = (uint8_t)body[0];
    if (!c->authed) {
        if (cmd != CMD_HELLO) return -1;
        uint32_t tl;
        const char *tok = read_str_(&r, &tl);
        int32_t rank = (int32_t)read_u32_(&r);
        if (r.bad || r.left || tl != strlen(sv->token) || memcmp(tok, sv->token, tl) != 0) return -1;
        if (rank > STORE_MAX_RANK_) return -1; /* the rank table grows to the largest rank seen */
        c->authed = 1;
        c->rank = rank;
        if (rank >= 0 && set_rank_state_(sv, rank, RANK_ALIVE, NULL, 0)) return -1;
        return reply_byte_(c, 1);
    }
    /* A client waits for its reply before the next request; the one exception
     * is a watcher leaving, whose watch stays parked until then. */
    if (c->park != PARK_NONE && !(c->park == PARK_WATCH && cmd == CMD_LEAVE)) return -1;
    uint32_t kl, vl;
    const char *k, *v;
    switch (cmd) {
    case CMD_SET:
        k = read_str_(&r, &kl), v = read_str_(&r, &vl);
        if (r.bad || r.left || put_(sv, k, kl, v, vl)) return -1;
        unpark_(sv);
        return reply_byte_(c, 1);
    case CMD_GET: {
        k = read_str_(&r, &kl);
        if (r.bad || r.left) return -1;
        entry_ *e = find_(sv, k, kl);
        uint8_t found = e != NULL;
        if (bytes_u32_(&c->out, 1 + (e ? e->vlen : 0)) || bytes_append_(&c->out, &found, 1)) return -1;
        return e ? bytes_append_(&c->out, e->val, e->vlen) : 0;
    }
    case CMD_ADD: {
        k = read_str_(&r, &kl);
        const char *d = read_raw_(&r, 8);
        if (r.bad || r.left) return -1;
        int64_t delta, cur;
        memcpy(&delta, d, 8);
        if (add_counter_(sv, k, kl, delta, &cur)) return -1;
        unpark_(sv);
        return reply_(c, &cur, 8);
    }
    case CMD_COMPARE_SET: {
        uint32_t dl;
        k = read_str_(&r, &kl), v = read_str_(&r, &vl);
        const char *d = read_str_(&r, &dl);
        if (r.bad || r.left) return -1;
        entry_ *e = find_(sv, k, kl);
        /* A missing key counts as holding the empty value, as in torch's stores. */
        int match = e ? e->vlen == vl && memcmp(e->val, v, vl) == 0 : vl == 0;
        if (match) {
            if (put_(sv, k, kl, d, dl)) return -1;
            unpark_(sv);
            return reply_(c, d, dl);
        }
        return e ? reply_(c, e->val, e->vlen) : reply_(c, v, vl);
    }
    case CMD_CHECK: {
        int all = keys_present_(sv, &r);
        return all < 0 ? -1 : reply_byte_(c, (uint8_t)all);
    }
    case CMD_WAIT: {
        reader_ r2 = r;
        int all = keys_present_(sv, &r2);
        if (all < 0) return -1;
        if (all) return reply_byte_(c, 1);
        return park_(c, PARK_WAIT, r.p, (uint32_t)r.left, 0, -1);
    }
    case CMD_DELETE: {
        k = read_str_(&r, &kl);
        if (r.bad || r.left) return -1;
        entry_ *e = find_(sv, k, kl);
        if (e) {
            free(e->key), free(e->val);
            *e = sv->entries[--sv->nentries];
        }
        return reply_byte_(c, e != NULL);
    }
    case CMD_NUMKEYS: {
        int64_t n = (int64_t)sv->nentries;
        return r.left ? -1 : reply_(c, &n, 8);
    }
    case CMD_WATCH: {
        const char *n = read_raw_(&r, 8);
        if (r.bad || r.left || c->rank < 0) return -1;
        memcpy(&c->park_n, n, 8);
        if (c->park_n < 0) return -1;
        c->park = PARK_WATCH;
        unpark_(sv);
        return 0;
    }
    case CMD_ABORT: {
        const char *text = read_str_(&r, &vl);
        if (r.bad || r.left || vl > 4096) return -1;
        char *t = malloc(vl + 1);
        if (!t) return -1;
        memcpy(t, text, vl);
        t[vl] = '\0';
        if (add_event_(sv, -2, t)) return -1;
        unpark_(sv);
        return reply_byte_(c, 1);
    }
    case CMD_LEAVE: {
        const char *prefix = read_str_(&r, &vl);
        if (r.bad || r.left || vl > 256 || c->rank < 0) return -1;
        if (sv->rank_state[c->rank] == RANK_ALIVE) set_rank_state_(sv, c->rank, RANK_LEFT, prefix, vl);
        c->rank = -1;
        c->park = PARK_NONE;
        unpark_(sv);
        return reply_byte_(c, 1);
    }
    case CMD_DEPARTED: {
        const char *n = read_raw_(&r, 8);
        if (r.bad || r.left) return -1;
        memcpy(&c->park_n, n, 8);
        c->park = PARK_DEPARTED;
        unpark_(sv);
        return 0;
    }
    case CMD_APPEND: {
        k = read_str_(&r, &kl), v = read_str_(&r, &vl);
        if (r.bad || r.left) return -1;
        entry_ *e = find_(sv, k, kl);
        if (!e) {
            if (put_(sv, k, kl, v, vl)) return -1;
        } else {
            if ((uint64_t)e->vlen + vl > MAX_VALUE_) return reply_byte_(c, REPLY_NO);
            char *nv = realloc(e->val, e->vlen + vl ? e->vlen + vl : 1);
            if (!nv) return -1;
            memcpy(nv + e->vlen, v, vl);
            e->val = nv, e->vlen += vl;
        }
        unpark_(sv);
        return reply_byte_(c, REPLY_YES);
    }
    case CMD_MULTI_SET: {
        /* The whole body is checked before any key is set. */
        uint32_t n = read_u32_(&r);
        reader_ all = r;
        for (uint32_t i = 0; i < n && !all.bad; i++) read_str_(&all, &kl), read_str_(&all, &vl);
        if (r.bad || all.bad || all.left) return -1;
        for (uint32_t i = 0; i < n; i++) {
            k = read_str_(&r, &kl), v = read_str_(&r, &vl);
            if (put_(sv, k, kl, v, vl)) return -1;
        }
        unpark_(sv);
        return reply_byte_(c, REPLY_YES);
    }
    case CMD_MULTI_GET: {
        /* Each key as a found byte, its length and its value, after REPLY_YES;
         * REPLY_NO alone where they would not fit in a frame. */
        uint32_t n = read_u32_(&r);
        reader_ keys = r;
        uint64_t total = 1;
        for (uint32_t i = 0; i < n && !r.bad; i++) {
            k = read_str_(&r, &kl);
            entry_ *e = k ? find_(sv, k, kl) : NULL;
            total += 5 + (e ? e->vlen : 0);
        }
        if (r.bad || r.left) return -1;
        if (total > DDPC_STORE_MAX_FRAME) return reply_byte_(c, REPLY_NO);
        uint8_t status = REPLY_YES;
        if (bytes_u32_(&c->out, (uint32_t)total) || bytes_append_(&c->out, &status, 1)) return -1;
        for (uint32_t i = 0; i < n; i++) {
            k = read_str_(&keys, &kl);
            entry_ *e = find_(sv, k, kl);
            uint8_t found = e != NULL;
            if (bytes_append_(&c->out, &found, 1) || bytes_u32_(&c->out, e ? e->vlen : 0) ||
                (e && bytes_append_(&c->out, e->val, e->vlen)))
                return -1;
        }
        return 0;
    }
    case CMD_LIST_KEYS: {
        /* REPLY_YES, the count and each key with its length; REPLY_NO alone where they would not fit. */
        if (r.left) return -1;
        uint64_t total = 1 + 4;
        for (size_t i = 0; i < sv->nentries; i++) total += 4 + sv->entries[i].klen;
        if (total > DDPC_STORE_MAX_FRAME) return reply_byte_(c, REPLY_NO);
        uint8_t status = REPLY_YES;
        if (bytes_u32_(&c->out, (uint32_t)total) || bytes_append_(&c->out, &status, 1) ||
            bytes_u32_(&c->out, (uint32_t)sv->nentries))
            return -1;
        for (size_t i = 0; i < sv->nentries; i++)
            if (bytes_u32_(&c->out, sv->entries[i].klen) ||
                bytes_append_(&c->out, sv->entries[i].key, sv->entries[i].klen))
                return -1;
        return 0;
    }
    case CMD_QUEUE_PUSH:
        k = read_str_(&r, &kl), v = read_str_(&r, &vl);
        if (r.bad || r.left || queue_push_(sv, k, kl, v, vl)) return -1;
        unpark_(sv);
        return reply_byte_(c, REPLY_YES);
    case CMD_QUEUE_POP: {
        /* A block byte and the server's deadline in ms; REPLY_YES and the
         * item, REPLY_NO for an empty queue when not blocking, REPLY_TIMED_OUT. */
        k = read_str_(&r, &kl);
        const char *p = read_raw_(&r, 9);
        if (r.bad || r.left) return -1;
        int64_t timeout_ms;
        memcpy(&timeout_ms, p + 1, 8);
        queue_ *q = find_queue_(sv, k, kl);
        if (q) return queue_pop_(sv, q, c);
        return p[0] ? park_(c, PARK_POP, k, kl, 0, timeout_ms) : reply_byte_(c, REPLY_NO);
    }
    case CMD_QUEUE_LEN: {
        k = read_str_(&r, &kl);
        if (r.bad || r.left) return -1;
        queue_ *q = find_queue_(sv, k, kl);
        int64_t n = q ? (int64_t)(q->n - q->head) : 0;
        return reply_(c, &n, 8);
    }
    case CMD_BARRIER: {
        /* Adds one to the key's counter, then answers REPLY_YES (or
         * REPLY_TIMED_OUT at the deadline, in ms) and the count once it
         * reaches the world size. */
        k = read_str_(&r, &kl);
        const char *p = read_raw_(&r, 16);
        if (r.bad || r.left) return -1;
        int64_t world_size, timeout_ms, arrived;
        memcpy(&world_size, p, 8);
        memcpy(&timeout_ms, p + 8, 8);
        if (add_counter_(sv, k, kl, 1, &arrived)) return -1;
        unpark_(sv);
        if (arrived >= world_size) return reply_status_(c, REPLY_YES, &arrived, 8);
        return park_(c, PARK_BARRIER, k, kl, world_size, timeout_ms);
    }
    default:
        return -1;
    }
}

static void conn_close_(server_ *sv, int i) {
    conn_ *c = &sv->conns[i];
    close(c->fd);
    free(c->body);
    free(c->out.data);
    free(c->park_body);
    int rank = c->rank;
    sv->conns[i] = sv->conns[--sv->nconns];
    if (rank >= 0 && rank < sv->nranks && sv->rank_state[rank] == RANK_ALIVE) {
        set_rank_state_(sv, rank, RANK_DEAD, NULL, 0);
        unpark_(sv);
    }
}

/* Reads what is available; returns -1 to drop the connection. */
static int conn_read_(server_ *sv, conn_ *c) {
    for (;;) {
        if (c->hdr_got < 4) {
            ssize_t k = recv(c->fd, c->hdr + c->hdr_got, 4 - c->hdr_got, MSG_DONTWAIT);
            if (k == 0) return -1;
            if (k < 0) return errno == EAGAIN || errno == EINTR ? 0 : -1;
            c->hdr_got += (size_t)k;
            if (c->hdr_got < 4) return 0;
            memcpy(&c->body_len, c->hdr, 4);
            if (c->body_len == 0 || c->body_len > DDPC_STORE_MAX_FRAME) return -1;
            if (!c->authed && c->body_len > DDPC_STORE_MAX_TOKEN + 16) return -1;
            c->body = malloc(c->body_len);
            if (!c->body) return -1;
            c->body_got = 0;
        }
        ssize_t k = recv(c->fd, c->body + c->body_got, c->body_len - c->body_got, MSG_DONTWAIT);
        if (k == 0) return -1;
        if (k < 0) return errno == EAGAIN || errno == EINTR ? 0 : -1;
        c->body_got += (uint32_t)k;
        if (c->body_got < c->body_len) return 0;
        int rc = handle_(sv, c, c->body, c->body_len);
        free(c->body);
        c->body = NULL;
        c->hdr_got = 0;
        if (rc) return -1;
    }
}

static int conn_write_(conn_ *c) {
    while (c->out.len) {
        ssize_t k = send(c->fd, c->out.data, c->out.len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (k < 0) return errno == EAGAIN || errno == EINTR ? 0 : -1;
        memmove(c->out.data, c->out.data + k, c->out.len - (size_t)k);
        c->out.len -= (size_t)k;
    }
    return 0;
}

static void *server_main_(void *arg) {
    server_ *sv = arg;
    struct pollfd *pfds = malloc((MAX_CONNS + 2) * sizeof *pfds);
    if (!pfds) return NULL;
    for (;;) {
        /* Parked pops and barriers are answered at their deadline: poll wakes for the next one. */
        int timeout_ms = expire_parked_(sv);
        pfds[0] = (struct pollfd){sv->wake_pipe[0], POLLIN, 0};
        pfds[1] = (struct pollfd){sv->listen_fd, sv->nconns < MAX_CONNS ? POLLIN : 0, 0};
        int n = sv->nconns;
        for (int i = 0; i < n; i++)
            pfds[2 + i] = (struct pollfd){sv->conns[i].fd, (short)(POLLIN | (sv->conns[i].out.len ? POLLOUT : 0)), 0};
        if (poll(pfds, (nfds_t)(2 + n), timeout_ms) < 0 && errno != EINTR) break;
        if (pfds[0].revents) break;
        /* Walk backwards: closing swaps the last connection into slot i. */
        for (int i = n - 1; i >= 0; i--) {
            short ev = pfds[2 + i].revents;
            if (!ev) continue;
            conn_ *c = &sv->conns[i];
            if (((ev & (POLLIN | POLLHUP | POLLERR)) && conn_read_(sv, c)) || conn_write_(c)) conn_close_(sv, i);
        }
        /* Replies queued for other connections (unparked waiters) are flushed here. */
        for (int i = sv->nconns - 1; i >= 0; i--)
            if (sv->conns[i].out.len && conn_write_(&sv->conns[i])) conn_close_(sv, i);
        if (pfds[1].revents & POLLIN) {
            int fd = accept4(sv->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd >= 0) {
                ddpc_net_keepalive(fd, LIVENESS_IDLE_S, LIVENESS_INTERVAL_S, LIVENESS_COUNT);
                sv->conns[sv->nconns++] = (conn_){.fd = fd, .rank = -1};
            }
        }
    }
    free(pfds);
    return NULL;
}

/* In a forked child that drops its copy of the parent's store: the server
 * thread runs in the parent only, so nothing is woken (a byte in the shared
 * pipe would stop the parent's server) and nothing joined; the child closes
 * its copies of the descriptors, which leaves the parent's open, and leaves
 * the memory alone (the thread may have been changing it at the fork). */
static void server_forget_(server_ *sv) {
    if (sv->listen_fd >= 0) close(sv->listen_fd);
    for (int i = 0; i < sv->nconns; i++) close(sv->conns[i].fd);
    if (sv->wake_pipe[0] >= 0) close(sv->wake_pipe[0]), close(sv->wake_pipe[1]);
}

static void server_free_(server_ *sv) {
    if (!sv) return;
    if (sv->owner != getpid()) {
        server_forget_(sv);
        return;
    }
    if (sv->wake_pipe[1] >= 0) {
        char b = 1;
        if (write(sv->wake_pipe[1], &b, 1) == 1) pthread_join(sv->thread, NULL);
    }
    /* Listening ends before the clients are dropped: a client told of the end
     * by the drop may connect again at once (a new job's store on this port),
     * and must be refused, not queued here and then reset. */
    if (sv->listen_fd >= 0) close(sv->listen_fd);
    sv->listen_fd = -1;
    for (int i = sv->nconns - 1; i >= 0; i--) {
        sv->conns[i].rank = -1;
        conn_close_(sv, i);
    }
    for (size_t i = 0; i < sv->nentries; i++) free(sv->entries[i].key), free(sv->entries[i].val);
    while (sv->nqueues) queue_drop_(sv, &sv->queues[sv->nqueues - 1]);
    free(sv->queues);
    for (int i = 0; i < sv->nevents; i++) free(sv->events[i].text);
    free(sv->events);
    free(sv->entries);
    free(sv->conns);
    free(sv->rank_state);
    if (sv->wake_pipe[0] >= 0) close(sv->wake_pipe[0]), close(sv->wake_pipe[1]);
    free(sv);
}

/* A failure on a connection to the store (or its listening socket) as the
 * store's callers see it: a connection closed, refused or lost, an address
 * that does not resolve, a port in use (DDPC_ERR_DIST from net.c) is
 * DDPC_ERR_NET, and a deadline that passed while the store owed an answer is
 * DDPC_ERR_STORE_TIMEOUT. A raised abort flag keeps its DDPC_ERR_DIST, with
 * no message, for the caller that raised it. */
static ddpc_status link_status_(ddpc_status st, const atomic_int *abort) {
    if (st == DDPC_ERR_DIST && !(abort && atomic_load(abort))) return DDPC_ERR_NET;
    if (st == DDPC_ERR_TIMEOUT) return DDPC_ERR_STORE_TIMEOUT;
    return st;
}

static ddpc_status server_init_(const char *host, int port, const char *token, server_ **out, int *bound_port) {
    ddpc_status res = DDPC_OK;
    server_ *sv = calloc(1, sizeof *sv);
    if (!sv) return DDPC_ERROR(DDPC_ERR_OOM, "out of memory for the store server");
    sv->listen_fd = sv->wake_pipe[0] = sv->wake_pipe[1] = -1;
    sv->owner = getpid();
    snprintf(sv->token, sizeof sv->token, "%s", token);
    sv->conns = calloc(MAX_CONNS, sizeof *sv->conns);
    if (!sv->conns) { res = DDPC_ERROR(DDPC_ERR_OOM, "out of memory for the store server"); goto fail; }
    /* Listen on all interfaces: the master address names this host for the
     * clients, and may be a name that does not resolve to a local interface. */
    (void)host;
    CHECKGOTO(link_status_(ddpc_net_listen(NULL, port, &sv->listen_fd, bound_port), NULL), res, fail);
    if (pipe2(sv->wake_pipe, O_CLOEXEC) < 0) {
        res = DDPC_ERROR(DDPC_ERR_SYS, "pipe failed: %s", strerror(errno));
        goto fail;
    }
    int rc = pthread_create(&sv->thread, NULL, server_main_, sv);
    if (rc) {
        close(sv->wake_pipe[1]);
        sv->wake_pipe[1] = -1;
        res = DDPC_ERROR(DDPC_ERR_SYS, "cannot start the store thread: %s", strerror(rc));
        goto fail;
    }
    *out = sv;
    return DDPC_OK;
fail:
    server_free_(sv);
    return res;
}

/* ---- client -------------------------------------------------------------------- */

static ddpc_status hello_(int fd, const char *token, int32_t rank, uint64_t deadline) {
    bytes_ b = {0};
    uint8_t cmd = CMD_HELLO;
    uint32_t tl = (uint32_t)strlen(token);
    if (bytes_u32_(&b, 1 + 4 + tl + 4) || bytes_append_(&b, &cmd, 1) || bytes_u32_(&b, tl) ||
        bytes_append_(&b, token, tl) || bytes_u32_(&b, (uint32_t)rank)) {
        free(b.data);
        return DDPC_ERROR(DDPC_ERR_OOM, "out of memory");
    }
    ddpc_status st = ddpc_net_send(fd, b.data, b.len, deadline, NULL, "the store");
    free(b.data);
    CHECK(link_status_(st, NULL));
    char rep[5];
    st = ddpc_net_recv(fd, rep, 5, deadline, NULL, "the store");
    if (st == DDPC_ERR_DIST) {
        ddpc_clear_error();
        return DDPC_ERROR(DDPC_ERR_STORE, "the store refused this client (wrong DDPC_STORE_TOKEN?)");
    }
    return link_status_(st, NULL);
}

/* Connects and says hello. No connection before the deadline is
 * DDPC_ERR_NET_TIMEOUT (the store is not there), other failures as link_status_. */
static ddpc_status connect_(ddpc_store *s, int32_t rank, uint64_t deadline, int *fd) {
    ddpc_status st = ddpc_net_connect(s->host, s->port, deadline, fd);
    if (st == DDPC_ERR_TIMEOUT) return DDPC_ERR_NET_TIMEOUT;
    CHECK(link_status_(st, NULL));
    st = hello_(*fd, s->token, rank, deadline);
    if (st != DDPC_OK) { close(*fd); *fd = -1; }
    return st;
}

ddpc_status ddpc_store_init(ddpc_store **out, const char *host, int port, int is_master, const char *token,
                            double timeout_s) {
    ddpc_status res = DDPC_OK;
    if (strlen(token) > DDPC_STORE_MAX_TOKEN) return DDPC_ERROR(DDPC_ERR_ARG, "store token longer than %d bytes", DDPC_STORE_MAX_TOKEN);
    if (strlen(host) >= 256) return DDPC_ERROR(DDPC_ERR_ARG, "store host name too long");
    if (port < 0 || port > 65535) return DDPC_ERROR(DDPC_ERR_ARG, "store port %d out of range", port);
    ddpc_store *s = calloc(1, sizeof *s);
    if (!s) return DDPC_ERROR(DDPC_ERR_OOM, "out of memory for the store");
    s->fd = -1;
    s->timeout_s = timeout_s;
    s->port = port;
    snprintf(s->host, sizeof s->host, "%s", host);
    snprintf(s->given_host, sizeof s->given_host, "%s", host);
    snprintf(s->token, sizeof s->token, "%s", token);
    pthread_mutex_init(&s->lock, NULL);
    if (is_master) {
        CHECKGOTO(server_init_(host, port, token, &s->server, &s->port), res, fail);
        snprintf(s->host, sizeof s->host, "127.0.0.1");
    }
    CHECKGOTO(connect_(s, -1, ddpc_deadline_after(timeout_s), &s->fd), res, fail);
    *out = s;
    return DDPC_OK;
fail:
    ddpc_store_free(s);
    return res;
}

void ddpc_store_free(ddpc_store *s) {
    if (!s) return;
    if (s->fd >= 0) close(s->fd);
    server_free_(s->server);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

int ddpc_store_port(const ddpc_store *s) { return s->port; }

void ddpc_store_local_addr(const ddpc_store *s, char *buf, size_t cap) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (s->server || getsockname(s->fd, (struct sockaddr *)&ss, &sl) < 0 ||
        getnameinfo((struct sockaddr *)&ss, sl, buf, (socklen_t)cap, NULL, 0, NI_NUMERICHOST) != 0)
        snprintf(buf, cap, "%s", s->given_host);
}
double ddpc_store_timeout(const ddpc_store *s) { return s->timeout_s; }

/* One request/reply exchange on the main connection. `body` is the request
 * without its length; the reply body is returned malloc'ed. */
/* One request and its reply. A set `*abort` gives up the wait (returning
 * DDPC_ERR_DIST with no message of its own); the connection is then remade
 * for the next request, as after any failure mid-request. */
static ddpc_status request_(ddpc_store *s, const bytes_ *body, uint64_t deadline, const atomic_int *abort, char **rep,
                            uint32_t *rep_len) {
    ddpc_status res = DDPC_OK;
    char *r = NULL;
    *rep = NULL;
    *rep_len = 0;
    pthread_mutex_lock(&s->lock);
    if (s->broken) {
        close(s->fd);
        s->fd = -1;
        s->broken = 0;
        CHECKGOTO(connect_(s, -1, deadline, &s->fd), res, out);
    }
    uint32_t len = (uint32_t)body->len;
    CHECKGOTO(link_status_(ddpc_net_send(s->fd, &len, 4, deadline, NULL, "the store"), NULL), res, fail);
    CHECKGOTO(link_status_(ddpc_net_send(s->fd, body->data, body->len, deadline, NULL, "the store"), NULL), res, fail);
    CHECKGOTO(link_status_(ddpc_net_recv(s->fd, &len, 4, deadline, abort, "the store"), abort), res, fail);
    if (len > DDPC_STORE_MAX_FRAME + 8) {
        res = DDPC_ERROR(DDPC_ERR_STORE, "the store sent a malformed reply");
        goto fail;
    }
    r = malloc(len ? len : 1);
    if (!r) { res = DDPC_ERROR(DDPC_ERR_OOM, "out of memory for a store reply"); goto fail; }
    CHECKGOTO(link_status_(ddpc_net_recv(s->fd, r, len, deadline, NULL, "the store"), NULL), res, fail);
    *rep = r;
    *rep_len = len;
    goto out;
fail:
    free(r);
    s->broken = 1;
out:
    pthread_mutex_unlock(&s->lock);
    return res;
}

static ddpc_status build_(bytes_ *b, uint8_t cmd, const char *key, const void *val, size_t vlen, int with_val) {
    size_t klen = key ? strlen(key) : 0;
    if (klen > DDPC_STORE_MAX_FRAME - 64 || vlen > DDPC_STORE_MAX_FRAME - 64 - klen)
        return DDPC_ERROR(DDPC_ERR_ARG, "store key and value of %zu bytes exceed the %u-byte limit", klen + vlen,
                          DDPC_STORE_MAX_FRAME);
    int bad = bytes_append_(b, &cmd, 1);
    if (key) bad |= bytes_u32_(b, (uint32_t)strlen(key)) || bytes_append_(b, key, strlen(key));
    if (with_val) bad |= bytes_u32_(b, (uint32_t)vlen) || bytes_append_(b, val, vlen);
    return bad ? DDPC_ERROR(DDPC_ERR_OOM, "out of memory") : DDPC_OK;
}

/* A request whose reply has `want` bytes (0: any length); `abort` as for request_. */
static ddpc_status exchange_(ddpc_store *s, bytes_ *b, double timeout_s, const atomic_int *abort, char **rep,
                             uint32_t *len, uint32_t want) {
    ddpc_status st = request_(s, b, ddpc_deadline_after(timeout_s), abort, rep, len);
    free(b->data);
    CHECK(st);
    if (want && *len != want) {
        free(*rep);
        return DDPC_ERROR(DDPC_ERR_STORE, "the store sent a malformed reply");
    }
    return DDPC_OK;
}

static ddpc_status simple_(ddpc_store *s, bytes_ *b, double timeout_s, char **rep, uint32_t *len, uint32_t want) {
    return exchange_(s, b, timeout_s, NULL, rep, len, want);
}

/* Sends `cmd` for `key` (with `val` where has_val) and waits up to the store's
 * timeout for the reply, of at least `want` bytes. */
static ddpc_status ask_(ddpc_store *s, uint8_t cmd, const char *key, const void *val, size_t len, int has_val,
                        uint32_t want, char **rep, uint32_t *rl) {
    bytes_ b = {0};
    ddpc_status st = build_(&b, cmd, key, val, len, has_val);
    if (st != DDPC_OK) {
        free(b.data);
        return st;
    }
    return simple_(s, &b, s->timeout_s, rep, rl, want);
}

ddpc_status ddpc_store_set(ddpc_store *s, const char *key, const void *val, size_t len) {
    char *rep;
    uint32_t rl;
    CHECK(ask_(s, CMD_SET, key, val, len, 1, 1, &rep, &rl));
    free(rep);
    return DDPC_OK;
}

static ddpc_status keys_body_(bytes_ *b, uint8_t cmd, const char *const *keys, int nkeys) {
    int bad = bytes_append_(b, &cmd, 1) || bytes_u32_(b, (uint32_t)nkeys);
    for (int i = 0; i < nkeys && !bad; i++)
        bad = bytes_u32_(b, (uint32_t)strlen(keys[i])) || bytes_append_(b, keys[i], strlen(keys[i]));
    if (b->len > DDPC_STORE_MAX_FRAME) bad = 1;
    if (bad) { free(b->data); b->data = NULL; return DDPC_ERROR(DDPC_ERR_ARG, "store key list too large"); }
    return DDPC_OK;
}

static ddpc_status wait_(ddpc_store *s, const char *const *keys, int nkeys, double timeout_s, const atomic_int *abort) {
    bytes_ b = {0};
    char *rep;
    uint32_t rl;
    CHECK(keys_body_(&b, CMD_WAIT, keys, nkeys));
    ddpc_status st = exchange_(s, &b, timeout_s, abort, &rep, &rl, 1);
    if (st == DDPC_ERR_STORE_TIMEOUT) {
        ddpc_clear_error();
        return DDPC_ERROR(DDPC_ERR_STORE_TIMEOUT, "store wait for '%s'%s timed out after %.1f s", nkeys ? keys[0] : "",
                          nkeys > 1 ? " and other keys" : "", timeout_s);
    }
    CHECK(st);
    free(rep);
    return DDPC_OK;
}

ddpc_status ddpc_store_wait(ddpc_store *s, const char *const *keys, int nkeys, double timeout_s) {
    return wait_(s, keys, nkeys, timeout_s, NULL);
}

ddpc_status ddpc_store_check(ddpc_store *s, const char *const *keys, int nkeys, int *all_present) {
    bytes_ b = {0};
    char *rep;
    uint32_t rl;
    CHECK(keys_body_(&b, CMD_CHECK, keys, nkeys));
    CHECK(simple_(s, &b, s->timeout_s, &rep, &rl, 1));
    *all_present = rep[0];
    free(rep);
    return DDPC_OK;
}

ddpc_status ddpc_store_get(ddpc_store *s, const char *key, void **val, size_t *len, double timeout_s) {
    return ddpc_store_get_unless(s, key, val, len, timeout_s, NULL);
}

ddpc_status ddpc_store_get_unless(ddpc_store *s, const char *key, void **val, size_t *len, double timeout_s,
                                  const atomic_int *abort) {
    CHECK(wait_(s, &key, 1, timeout_s, abort));
    char *rep;
    uint32_t rl;
    CHECK(ask_(s, CMD_GET, key, NULL, 0, 0, 0, &rep, &rl));
    if (rl < 1 || !rep[0]) {
        free(rep);
        return DDPC_ERROR(DDPC_ERR_STORE, "store key '%s' vanished (deleted by another client)", key);
    }
    memmove(rep, rep + 1, rl - 1);
    *val = rep;
    *len = rl - 1;
    return DDPC_OK;
}

ddpc_status ddpc_store_add(ddpc_store *s, const char *key, int64_t delta, int64_t *result) {
    bytes_ b = {0};
    char *rep;
    uint32_t rl;
    ddpc_status st = build_(&b, CMD_ADD, key, NULL, 0, 0);
    if (st == DDPC_OK && bytes_append_(&b, &delta, 8)) st = DDPC_ERROR(DDPC_ERR_OOM, "out of memory");
    if (st != DDPC_OK) { free(b.data); return st; }
    CHECK(simple_(s, &b, s->timeout_s, &rep, &rl, 8));
    memcpy(result, rep, 8);
    free(rep);
    return DDPC_OK;
}

ddpc_status ddpc_store_compare_set(ddpc_store *s, const char *key, const void *expected, size_t elen,
                                  const void *desired, size_t dlen, void **val, size_t *len) {
    bytes_ b = {0};
    char *rep;
    uint32_t rl;
    ddpc_status st = build_(&b, CMD_COMPARE_SET, key, expected, elen, 1);
    if (st == DDPC_OK && b.len + dlen > DDPC_STORE_MAX_FRAME - 64)
        st = DDPC_ERROR(DDPC_ERR_ARG, "store key and values of %zu bytes exceed the %u-byte limit", b.len + dlen,
                        DDPC_STORE_MAX_FRAME);
    if (st == DDPC_OK && (bytes_u32_(&b, (uint32_t)dlen) || bytes_append_(&b, desired, dlen)))
        st = DDPC_ERROR(DDPC_ERR_OOM, "out of memory");
    if (st != DDPC_OK) { free(b.data); return st; }
    CHECK(simple_(s, &b, s->timeout_s, &rep, &rl, 0));
    *val = rep;
    *len = rl;
    return DDPC_OK;
}

ddpc_status ddpc_store_delete(ddpc_store *s, const char *key, int *deleted) {
    char *rep;
    uint32_t rl;
    CHECK(ask_(s, CMD_DELETE, key, NULL, 0, 0, 1, &rep, &rl));
    *deleted = rep[0];
    free(rep);
    return DDPC_OK;
}

ddpc_status ddpc_store_num_keys(ddpc_store *s, int64_t *n) {
    char *rep;
    uint32_t rl;
    CHECK(ask_(s, CMD_NUMKEYS, NULL, NULL, 0, 0, 8, &rep, &rl));
    memcpy(n, rep, 8);
    free(rep);
    return DDPC_OK;
}

ddpc_status ddpc_store_clone(const ddpc_store *s, ddpc_store **out) {
    CHECK(ddpc_store_init(out, s->host, s->port, 0, s->token, s->timeout_s));
    snprintf((*out)->given_host, sizeof (*out)->given_host, "%s", s->given_host);
    return DDPC_OK;
}

/* A deadline for the server in ms, -1 for none (as ddpc_deadline_after reads a timeout). */
static int64_t server_timeout_ms_(double timeout_s) {
    return timeout_s < 0 || timeout_s > 1e9 ? -1 : (int64_t)(timeout_s * 1e3);
}

/* How long the client waits for the answer to a request the server answers by `timeout_s`. */
static double client_timeout_(double timeout_s) { return timeout_s < 0 ? timeout_s : timeout_s + REPLY_GRACE_S; }

static ddpc_status malformed_(char *rep) {
    free(rep);
    return DDPC_ERROR(DDPC_ERR_STORE, "the store sent a malformed reply");
}

void ddpc_store_list_free(ddpc_store_list *l) {
    free(l->buf);
    free(l->items);
    free(l->lens);
    *l = (ddpc_store_list){0};
}

/* Makes `l` own the reply `rep` and room for `n` items. */
static ddpc_status list_init_(ddpc_store_list *l, char *rep, size_t n) {
    *l = (ddpc_store_list){.buf = rep, .n = n};
    l->items = malloc((n ? n : 1) * sizeof *l->items);
    l->lens = malloc((n ? n : 1) * sizeof *l->lens);
    if (!l->items || !l->lens) {
        ddpc_store_list_free(l);
        return DDPC_ERROR(DDPC_ERR_OOM, "out of memory for a store reply");
    }
    return DDPC_OK;
}

ddpc_status ddpc_store_append(ddpc_store *s, const char *key, const void *val, size_t len) {
    char *rep;
    uint32_t rl;
    CHECK(ask_(s, CMD_APPEND, key, val, len, 1, 1, &rep, &rl));
    uint8_t status = (uint8_t)rep[0];
    free(rep);
    if (status != REPLY_YES)
        return DDPC_ERROR(DDPC_ERR_ARG,
                          "appending %zu bytes to store key '%s' would grow its value past the %u-byte limit", len,
                          key, MAX_VALUE_);
    return DDPC_OK;
}

ddpc_status ddpc_store_multi_set(ddpc_store *s, const char *const *keys, const void *const *vals, const size_t *lens,
                                 int n) {
    size_t total = 1 + 4;
    for (int i = 0; i < n; i++) total += 8 + strlen(keys[i]) + lens[i];
    if (total > DDPC_STORE_MAX_FRAME - 64)
        return DDPC_ERROR(DDPC_ERR_ARG, "store multi_set of %d keys and values of %zu bytes exceeds the %u-byte limit",
                          n, total, DDPC_STORE_MAX_FRAME);
    bytes_ b = {0};
    char *rep;
    uint32_t rl;
    uint8_t cmd = CMD_MULTI_SET;
    int bad = bytes_append_(&b, &cmd, 1) || bytes_u32_(&b, (uint32_t)n);
    for (int i = 0; i < n && !bad; i++)
        bad = bytes_u32_(&b, (uint32_t)strlen(keys[i])) || bytes_append_(&b, keys[i], strlen(keys[i])) ||
              bytes_u32_(&b, (uint32_t)lens[i]) || bytes_append_(&b, vals[i], lens[i]);
    if (bad) {
        free(b.data);
        return DDPC_ERROR(DDPC_ERR_OOM, "out of memory");
    }
    CHECK(simple_(s, &b, s->timeout_s, &rep, &rl, 1));
    free(rep);
    return DDPC_OK;
}

ddpc_status ddpc_store_multi_get(ddpc_store *s, const char *const *keys, int n, double timeout_s,
                                 ddpc_store_list *out) {
    CHECK(wait_(s, keys, n, timeout_s, NULL));
    bytes_ b = {0};
    char *rep;
    uint32_t rl;
    CHECK(keys_body_(&b, CMD_MULTI_GET, keys, n));
    CHECK(simple_(s, &b, s->timeout_s, &rep, &rl, 0));
    if (rl == 1 && rep[0] == REPLY_NO) {
        free(rep);
        return DDPC_ERROR(DDPC_ERR_STORE,
                          "the values of the %d keys of a store multi_get exceed the %u-byte reply limit", n,
                          DDPC_STORE_MAX_FRAME);
    }
    if (rl < 1 || rep[0] != REPLY_YES) return malformed_(rep);
    CHECK(list_init_(out, rep, (size_t)n));
    reader_ r = {rep + 1, rl - 1, 0};
    for (int i = 0; i < n; i++) {
        const char *found = read_raw_(&r, 1);
        uint32_t len;
        out->items[i] = read_str_(&r, &len);
        out->lens[i] = len;
        if (r.bad) break;
        if (!found[0]) {
            ddpc_store_list_free(out);
            return DDPC_ERROR(DDPC_ERR_STORE, "store key '%s' vanished (deleted by another client)", keys[i]);
        }
    }
    if (r.bad || r.left) {
        ddpc_store_list_free(out);
        return DDPC_ERROR(DDPC_ERR_STORE, "the store sent a malformed reply");
    }
    return DDPC_OK;
}

ddpc_status ddpc_store_list_keys(ddpc_store *s, ddpc_store_list *out) {
    char *rep;
    uint32_t rl;
    CHECK(ask_(s, CMD_LIST_KEYS, NULL, NULL, 0, 0, 0, &rep, &rl));
    if (rl == 1 && rep[0] == REPLY_NO) {
        free(rep);
        return DDPC_ERROR(DDPC_ERR_STORE, "the store's keys exceed the %u-byte reply limit", DDPC_STORE_MAX_FRAME);
    }
    if (rl < 1 || rep[0] != REPLY_YES) return malformed_(rep);
    reader_ r = {rep + 1, rl - 1, 0};
    uint32_t n = read_u32_(&r);
    if (r.bad || n > r.left / 4) return malformed_(rep);
    CHECK(list_init_(out, rep, n));
    for (uint32_t i = 0; i < n; i++) {
        uint32_t len;
        out->items[i] = read_str_(&r, &len);
        out->lens[i] = len;
    }
    if (r.bad || r.left) {
        ddpc_store_list_free(out);
        return DDPC_ERROR(DDPC_ERR_STORE, "the store sent a malformed reply");
    }
    return DDPC_OK;
}

ddpc_status ddpc_store_queue_push(ddpc_store *s, const char *key, const void *val, size_t len) {
    char *rep;
    uint32_t rl;
    CHECK(ask_(s, CMD_QUEUE_PUSH, key, val, len, 1, 1, &rep, &rl));
    free(rep);
    return DDPC_OK;
}

ddpc_status ddpc_store_queue_pop(ddpc_store *s, const char *key, int block, double timeout_s, void **val,
                                 size_t *len) {
    bytes_ b = {0};
    char *rep;
    uint32_t rl;
    uint8_t blocking = block != 0;
    int64_t ms = server_timeout_ms_(timeout_s);
    ddpc_status st = build_(&b, CMD_QUEUE_POP, key, NULL, 0, 0);
    if (st == DDPC_OK && (bytes_append_(&b, &blocking, 1) || bytes_append_(&b, &ms, 8)))
        st = DDPC_ERROR(DDPC_ERR_OOM, "out of memory");
    if (st != DDPC_OK) { free(b.data); return st; }
    CHECK(simple_(s, &b, blocking ? client_timeout_(timeout_s) : s->timeout_s, &rep, &rl, 0));
    if (rl >= 1 && rep[0] == REPLY_YES) {
        memmove(rep, rep + 1, rl - 1);
        *val = rep;
        *len = rl - 1;
        return DDPC_OK;
    }
    if (rl != 1) return malformed_(rep);
    uint8_t status = (uint8_t)rep[0];
    free(rep);
    if (status == REPLY_NO) return DDPC_ERROR(DDPC_ERR_QUEUE_EMPTY, "store queue '%s' is empty", key);
    if (status == REPLY_TIMED_OUT)
        return DDPC_ERROR(DDPC_ERR_STORE_TIMEOUT, "store queue_pop from '%s' timed out after %.1f s", key, timeout_s);
    return DDPC_ERROR(DDPC_ERR_STORE, "the store sent a malformed reply");
}

ddpc_status ddpc_store_queue_len(ddpc_store *s, const char *key, int64_t *n) {
    char *rep;
    uint32_t rl;
    CHECK(ask_(s, CMD_QUEUE_LEN, key, NULL, 0, 0, 8, &rep, &rl));
    memcpy(n, rep, 8);
    free(rep);
    return DDPC_OK;
}

ddpc_status ddpc_store_barrier(ddpc_store *s, const char *key, int64_t world_size, double timeout_s) {
    bytes_ b = {0};
    char *rep;
    uint32_t rl;
    int64_t ms = server_timeout_ms_(timeout_s);
    ddpc_status st = build_(&b, CMD_BARRIER, key, NULL, 0, 0);
    if (st == DDPC_OK && (bytes_append_(&b, &world_size, 8) || bytes_append_(&b, &ms, 8)))
        st = DDPC_ERROR(DDPC_ERR_OOM, "out of memory");
    if (st != DDPC_OK) { free(b.data); return st; }
    CHECK(simple_(s, &b, client_timeout_(timeout_s), &rep, &rl, 9));
    uint8_t status = (uint8_t)rep[0];
    int64_t arrived;
    memcpy(&arrived, rep + 1, 8);
    free(rep);
    if (status == REPLY_YES) return DDPC_OK;
    if (status == REPLY_TIMED_OUT)
        return DDPC_ERROR(DDPC_ERR_STORE_TIMEOUT,
                          "store barrier '%s' timed out after %.1f s with %lld of %lld workers arrived", key, timeout_s,
                          (long long)arrived, (long long)world_size);
    return DDPC_ERROR(DDPC_ERR_STORE, "the store sent a malformed reply");
}

ddpc_status ddpc_store_watch(ddpc_store *s, int rank, int *fd) {
    CHECK(connect_(s, rank, ddpc_deadline_after(s->timeout_s), fd));
    ddpc_net_keepalive(*fd, LIVENESS_IDLE_S, LIVENESS_INTERVAL_S, LIVENESS_COUNT);
    ddpc_status st = ddpc_store_watch_next(*fd, 0, s->timeout_s);
    if (st != DDPC_OK) { close(*fd); *fd = -1; }
    return st;
}

ddpc_status ddpc_store_watch_next(int fd, int64_t seen, double timeout_s) {
    char msg[13] = {9, 0, 0, 0, CMD_WATCH};
    memcpy(msg + 5, &seen, 8);
    return link_status_(ddpc_net_send(fd, msg, sizeof msg, ddpc_deadline_after(timeout_s), NULL, "the store"), NULL);
}

int ddpc_store_read_event(int fd, char *text, size_t cap) {
    uint32_t len;
    int32_t rank;
    text[0] = '\0';
    uint64_t deadline = ddpc_deadline_after(10);
    if (ddpc_net_recv(fd, &len, 4, deadline, NULL, "the store") != DDPC_OK || len < 4 || len > 4 + 4096 ||
        ddpc_net_recv(fd, &rank, 4, deadline, NULL, "the store") != DDPC_OK) {
        ddpc_clear_error();
        return -1;
    }
    char buf[4097];
    if (ddpc_net_recv(fd, buf, len - 4, deadline, NULL, "the store") != DDPC_OK) {
        ddpc_clear_error();
        return -1;
    }
    buf[len - 4] = '\0';
    snprintf(text, cap, "%s", buf);
    return rank;
}

ddpc_status ddpc_store_abort(ddpc_store *s, const char *text) {
    bytes_ b = {0};
    char *rep;
    uint32_t rl;
    uint8_t cmd = CMD_ABORT;
    uint32_t tl = (uint32_t)strnlen(text, 4096);
    if (bytes_append_(&b, &cmd, 1) || bytes_u32_(&b, tl) || bytes_append_(&b, text, tl)) {
        free(b.data);
        return DDPC_ERROR(DDPC_ERR_OOM, "out of memory");
    }
    CHECK(simple_(s, &b, s->timeout_s, &rep, &rl, 1));
    free(rep);
    return DDPC_OK;
}

ddpc_status ddpc_store_leave(int watch_fd, const char *prefix, double timeout_s) {
    /* The watch request is still parked; LEAVE is answered before it. */
    bytes_ b = {0};
    uint8_t cmd = CMD_LEAVE;
    uint32_t pl = (uint32_t)strnlen(prefix, 256);
    if (bytes_u32_(&b, 1 + 4 + pl) || bytes_append_(&b, &cmd, 1) || bytes_u32_(&b, pl) || bytes_append_(&b, prefix, pl)) {
        free(b.data);
        return DDPC_ERROR(DDPC_ERR_OOM, "out of memory");
    }
    uint64_t deadline = ddpc_deadline_after(timeout_s);
    ddpc_status st = ddpc_net_send(watch_fd, b.data, b.len, deadline, NULL, "the store");
    free(b.data);
    CHECK(link_status_(st, NULL));
    char rep[5];
    return link_status_(ddpc_net_recv(watch_fd, rep, 5, deadline, NULL, "the store"), NULL);
}

ddpc_status ddpc_store_wait_departed(ddpc_store *s, int nranks, double timeout_s) {
    bytes_ b = {0};
    char *rep;
    uint32_t rl;
    int64_t n = nranks;
    uint8_t cmd = CMD_DEPARTED;
    if (bytes_append_(&b, &cmd, 1) || bytes_append_(&b, &n, 8)) { free(b.data); return DDPC_ERROR(DDPC_ERR_OOM, "out of memory"); }
    CHECK(simple_(s, &b, timeout_s, &rep, &rl, 1));
    free(rep);
    return DDPC_OK;
}

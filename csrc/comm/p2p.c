/* Point-to-point TCP links between the ranks of a group, made on first use:
 * the lower rank connects to the higher rank's listening socket (its address
 * is in the store) and introduces itself; the higher rank accepts, keeping
 * links from other peers that arrive first. Used by send/recv and the ring.
 *
 * send/recv match by tag, as gloo does: a recv takes the oldest message from
 * its peer with its tag, whatever that peer sent before it. Messages with
 * other tags that stand in the way on the link are read into the group's
 * stash (stash.h), where the recvs for their tags find them. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm/group.h"
#include "comm/net.h"
#include "comm/stash.h"

#define HELLO_MAGIC 0x64647063u /* "ddpc" */
#define MSG_MAGIC 0x6d736721u

ddpc_status ddpc_p2p_init(ddpc_group *g) {
    char addr[300], host[256], key[160];
    int port;
    size_t nfd = (size_t)DDPC_NLINKS * (size_t)g->size;
    g->peer_fd = malloc(nfd * sizeof *g->peer_fd);
    if (!g->peer_fd) return DDPC_ERROR(DDPC_ERR_OOM, "out of memory");
    for (size_t i = 0; i < nfd; i++) g->peer_fd[i] = -1;
    CHECK(ddpc_stash_init(g->size, &g->stash));
    if (g->size == 1) return DDPC_OK;
    CHECK(ddpc_net_listen(NULL, 0, &g->listen_fd, &port));
    /* Several threads may accept (one per queue): the one that loses a race
     * for a connection must find nothing rather than block. */
    if (fcntl(g->listen_fd, F_SETFL, fcntl(g->listen_fd, F_GETFL) | O_NONBLOCK) < 0)
        return DDPC_ERROR(DDPC_ERR_SYS, "fcntl(O_NONBLOCK) on the listening socket failed: %s", strerror(errno));
    const char *env = getenv("DDPC_IFADDR");
    if (env && env[0]) snprintf(host, sizeof host, "%s", env);
    else ddpc_store_local_addr(g->store, host, sizeof host);
    snprintf(addr, sizeof addr, "%s %d", host, port);
    snprintf(key, sizeof key, "%saddr/%d", g->prefix, g->rank);
    return ddpc_store_set(g->store, key, addr, strlen(addr) + 1);
}

void ddpc_p2p_close(ddpc_group *g) {
    if (g->peer_fd)
        for (int i = 0; i < DDPC_NLINKS * g->size; i++)
            if (g->peer_fd[i] >= 0) close(g->peer_fd[i]), g->peer_fd[i] = -1;
    if (g->listen_fd >= 0) close(g->listen_fd);
    g->listen_fd = -1;
}

void ddpc_p2p_free(ddpc_group *g) {
    ddpc_p2p_close(g);
    free(g->peer_fd);
    g->peer_fd = NULL;
    ddpc_stash_free(g->stash);
    g->stash = NULL;
}

void ddpc_p2p_shutdown(ddpc_group *g) {
    if (!g->peer_fd) return;
    for (int i = 0; i < DDPC_NLINKS * g->size; i++)
        if (g->peer_fd[i] >= 0) shutdown(g->peer_fd[i], SHUT_RDWR);
}

static int *slot_(ddpc_group *g, int peer, int link) { return &g->peer_fd[link * g->size + peer]; }

/* Under link_lock: the connecting side makes each link once. */
static ddpc_status connect_peer_(ddpc_group *g, int peer, int link, uint64_t deadline) {
    char key[160], host[256], what[64];
    void *val;
    size_t len;
    int port, fd;
    snprintf(key, sizeof key, "%saddr/%d", g->prefix, peer);
    CHECK(ddpc_group_store_get(g, key, &val, &len));
    int ok = sscanf(val, "%255s %d", host, &port) == 2;
    free(val);
    if (!ok) return DDPC_ERROR(DDPC_ERR_DIST, "malformed address of rank %d in the store", ddpc_global_rank(g, peer));
    CHECK(ddpc_net_connect(host, port, deadline, &fd));
    uint32_t hello[3] = {HELLO_MAGIC, (uint32_t)g->rank, (uint32_t)link};
    snprintf(what, sizeof what, "rank %d", ddpc_global_rank(g, peer));
    ddpc_status st = ddpc_net_send(fd, hello, sizeof hello, deadline, &g->failed, what);
    if (st != DDPC_OK) { close(fd); return st == DDPC_ERR_DIST && atomic_load(&g->failed) ? ddpc_group_error(g) : st; }
    *slot_(g, peer, link) = fd;
    return DDPC_OK;
}

/* Accepts one connection before `slice` and files it under the link its
 * hello names; one that is not a new link of this group is dropped.
 * DDPC_ERR_TIMEOUT (with its message recorded) when none came. */
static ddpc_status accept_one_(ddpc_group *g, uint64_t slice, uint64_t deadline) {
    int fd;
    ddpc_status st = ddpc_net_accept(g->listen_fd, slice, &g->failed, &fd);
    if (st == DDPC_ERR_DIST && atomic_load(&g->failed)) return ddpc_group_error(g);
    CHECK(st);
    uint32_t hello[3];
    st = ddpc_net_recv(fd, hello, sizeof hello, deadline, &g->failed, "a connecting peer");
    pthread_mutex_lock(&g->link_lock);
    if (st != DDPC_OK || hello[0] != HELLO_MAGIC || hello[1] >= (uint32_t)g->size || (int)hello[1] == g->rank ||
        hello[2] >= DDPC_NLINKS || *slot_(g, (int)hello[1], (int)hello[2]) >= 0) {
        ddpc_clear_error();
        close(fd);
    } else {
        *slot_(g, (int)hello[1], (int)hello[2]) = fd;
    }
    pthread_mutex_unlock(&g->link_lock);
    return DDPC_OK;
}

/* Accepts connections until link (peer, link) is there; a connection for
 * another link is kept for whoever needs it. Other threads may accept at the
 * same time, so the lock is held only to look and to store, and each accept
 * waits a short slice before looking again. */
static ddpc_status accept_peer_(ddpc_group *g, int peer, int link, double timeout_s, uint64_t deadline) {
    for (;;) {
        pthread_mutex_lock(&g->link_lock);
        int have = *slot_(g, peer, link) >= 0;
        pthread_mutex_unlock(&g->link_lock);
        if (have) return DDPC_OK;
        if (ddpc_ms_left(deadline, 1) == 0)
            return DDPC_ERROR(DDPC_ERR_TIMEOUT, "timed out after %.1f s waiting for rank %d to connect", timeout_s,
                              ddpc_global_rank(g, peer));
        ddpc_status st = accept_one_(g, ddpc_deadline_after(0.05), deadline);
        if (st == DDPC_ERR_TIMEOUT) ddpc_clear_error();
        else CHECK(st);
    }
}

ddpc_status ddpc_p2p_link(ddpc_group *g, int peer, int link, double timeout_s, uint64_t deadline, int *fd) {
    if (peer < 0 || peer >= g->size || peer == g->rank)
        return DDPC_ERROR(DDPC_ERR_ARG, "invalid peer rank %d for rank %d of a group of %d", peer, g->rank, g->size);
    ddpc_status st = DDPC_OK;
    if (g->rank < peer) {
        pthread_mutex_lock(&g->link_lock);
        if (*slot_(g, peer, link) < 0) st = connect_peer_(g, peer, link, deadline);
        pthread_mutex_unlock(&g->link_lock);
    } else {
        st = accept_peer_(g, peer, link, timeout_s, deadline);
    }
    CHECK(st);
    pthread_mutex_lock(&g->link_lock);
    *fd = *slot_(g, peer, link);
    pthread_mutex_unlock(&g->link_lock);
    return DDPC_OK;
}

void ddpc_msg_header_fill(ddpc_msg_header *h, const ddpc_coll_args *a) {
    memset(h, 0, sizeof *h);
    h->magic = MSG_MAGIC;
    h->coll = a->coll, h->op = a->op, h->dtype = a->dtype;
    h->seq = a->seq, h->count = a->count;
    h->peer = ddpc_coll_rooted(a->coll) ? a->peer : 0;
    h->tag = a->tag;
}

static void describe_(const ddpc_group *g, const ddpc_msg_header *h, char *buf, size_t cap) {
    if (h->magic != MSG_MAGIC || h->coll >= DDPC_NCOLLS || h->dtype >= DDPC_NDTYPES) {
        snprintf(buf, cap, "something unrecognised");
        return;
    }
    char how[48];
    ddpc_coll_detail(g, (int)h->coll, (int)h->op, h->peer, h->tag, how, sizeof how);
    snprintf(buf, cap, "%s(%llu x %s%s) as collective #%llu", ddpc_coll_name((ddpc_coll)h->coll),
             (unsigned long long)h->count, ddpc_dtype_name((ddpc_dtype)h->dtype), how, (unsigned long long)h->seq);
}

ddpc_status ddpc_msg_header_check(ddpc_group *g, const ddpc_coll_args *a, const ddpc_msg_header *theirs, int them) {
    ddpc_msg_header mine;
    ddpc_msg_header_fill(&mine, a);
    char x[160], y[160], msg[512];
    describe_(g, &mine, x, sizeof x); /* before a recv is compared as the send it expects */
    /* A recv matches a send with the same shape; collectives match themselves. */
    if (a->coll == DDPC_COLL_RECV) mine.coll = DDPC_COLL_SEND;
    if (memcmp(&mine, theirs, sizeof mine) == 0) return DDPC_OK;
    describe_(g, theirs, y, sizeof y);
    snprintf(msg, sizeof msg, "collective mismatch: rank %d called %s, rank %d called %s", ddpc_global_rank(g, g->rank),
             x, ddpc_global_rank(g, them), y);
    return ddpc_group_disagree(g, a, msg);
}

/* A link that broke because the group failed: report the group's cause. */
static ddpc_status cause_(ddpc_group *g, ddpc_status st) {
    return st == DDPC_ERR_DIST && atomic_load(&g->failed) ? ddpc_group_error(g) : st;
}

static void peer_name_(const ddpc_group *g, int peer, char *buf, size_t cap) {
    snprintf(buf, cap, "rank %d", ddpc_global_rank(g, peer));
}

static ddpc_status send_(ddpc_group *g, const ddpc_coll_args *a, uint64_t deadline) {
    int fd;
    char what[64];
    peer_name_(g, a->peer, what, sizeof what);
    CHECK(ddpc_p2p_link(g, a->peer, DDPC_LINK_P2P, a->timeout_s, deadline, &fd));
    ddpc_msg_header h;
    ddpc_msg_header_fill(&h, a);
    CHECK(ddpc_net_send(fd, &h, sizeof h, deadline, &g->failed, what));
    return ddpc_net_send(fd, a->in, a->count * ddpc_dtype_size(a->dtype), deadline, &g->failed, what);
}

/* Whether `h` is a well-formed send with a tag other than `tag`: a message
 * for a later recv. Anything else is this recv's, or something its header
 * check reports. */
static int other_tag_(const ddpc_msg_header *h, int tag) {
    return h->magic == MSG_MAGIC && h->coll == DDPC_COLL_SEND && h->dtype < DDPC_NDTYPES && h->tag != tag &&
           h->count <= SIZE_MAX / ddpc_dtype_size((ddpc_dtype)h->dtype);
}

/* Reads the payload of message `h` from `peer`, whose header was just read
 * off `fd`, into the stash. The stash grows by what the peer sent, no more. */
static ddpc_status stash_rest_(ddpc_group *g, int peer, int fd, const ddpc_msg_header *h, uint64_t deadline) {
    char what[64];
    peer_name_(g, peer, what, sizeof what);
    ddpc_stash_msg *m;
    CHECK(ddpc_stash_msg_new(peer, h, h->count * ddpc_dtype_size((ddpc_dtype)h->dtype), &m));
    ddpc_status st = ddpc_net_recv(fd, m->data, m->nbytes, deadline, &g->failed, what);
    if (st != DDPC_OK) {
        free(m);
        return st;
    }
    ddpc_stash_put(g->stash, m);
    return DDPC_OK;
}

/* Gives recv `a` the stashed message `m`, checked as one read off the link. */
static ddpc_status deliver_(ddpc_group *g, const ddpc_coll_args *a, ddpc_stash_msg *m) {
    ddpc_status st = ddpc_msg_header_check(g, a, &m->h, m->peer);
    if (st == DDPC_OK) {
        if (m->nbytes) memcpy(a->out, m->data, m->nbytes); /* an empty tensor may have no buffer */
        if (a->source) *a->source = m->peer;
    }
    free(m);
    return st;
}

static ddpc_status tag_timeout_(ddpc_group *g, const ddpc_coll_args *a) {
    int r = ddpc_global_rank(g, a->peer), other = ddpc_stash_count(g->stash, a->peer);
    char kept[96] = "";
    if (other) snprintf(kept, sizeof kept, " (it sent %d with other tags, kept for their recvs)", other);
    ddpc_clear_error();
    return DDPC_ERROR(DDPC_ERR_TIMEOUT, "timed out after %.1f s in recv from rank %d (tag %d): no message with tag %d "
                      "came from rank %d%s", a->timeout_s, r, a->tag, a->tag, r, kept);
}

/* A recv from rank a->peer: its oldest stashed message with a->tag, else the
 * next one with a->tag on the link, stashing those with other tags on the way. */
static ddpc_status recv_from_(ddpc_group *g, const ddpc_coll_args *a, uint64_t deadline) {
    ddpc_stash_msg *m = ddpc_stash_take(g->stash, a->peer, a->tag);
    if (m) return deliver_(g, a, m);
    int fd;
    char what[64];
    peer_name_(g, a->peer, what, sizeof what);
    ddpc_status st = ddpc_p2p_link(g, a->peer, DDPC_LINK_P2P, a->timeout_s, deadline, &fd);
    /* A lower rank connects on its first send: until then nothing came from it. */
    if (st == DDPC_ERR_TIMEOUT && a->peer < g->rank) return tag_timeout_(g, a);
    CHECK(st);
    ddpc_msg_header h;
    for (;;) {
        st = ddpc_net_recv(fd, &h, sizeof h, deadline, &g->failed, what);
        if (st == DDPC_ERR_TIMEOUT) return tag_timeout_(g, a);
        CHECK(st);
        if (!other_tag_(&h, a->tag)) break;
        CHECK(stash_rest_(g, a->peer, fd, &h, deadline));
    }
    CHECK(ddpc_msg_header_check(g, a, &h, a->peer));
    CHECK(ddpc_net_recv(fd, a->out, a->count * ddpc_dtype_size(a->dtype), deadline, &g->failed, what));
    if (a->source) *a->source = a->peer;
    return DDPC_OK;
}

/* The first rank whose next message on its send/recv link is a send with
 * `tag`, or -1 after a look at every ready link. A message with another tag
 * is read into the stash on the way, so the one behind it can be looked at
 * on the next turn; links that closed are marked in `skip`. */
static ddpc_status ready_sender_(ddpc_group *g, int tag, struct pollfd *pf, const int *who, int np, char *skip,
                                 uint64_t deadline, int *sender) {
    *sender = -1;
    for (int i = 0; i < np; i++) {
        if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        if (who[i] < 0) { /* a lower rank connecting */
            ddpc_status st = accept_one_(g, ddpc_deadline_after(0.01), deadline);
            if (st == DDPC_ERR_TIMEOUT) ddpc_clear_error();
            else CHECK(st);
            continue;
        }
        ddpc_msg_header h;
        ssize_t got = recv(pf[i].fd, &h, sizeof h, MSG_PEEK | MSG_DONTWAIT);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            /* Closed or reset: the peer left the group and sends nothing more
             * (one that died is reported by the group's monitor). */
            skip[who[i]] = 1;
            continue;
        }
        if (got < (ssize_t)sizeof h) continue; /* the rest of the header is on its way */
        if (other_tag_(&h, tag)) {
            char what[64];
            peer_name_(g, who[i], what, sizeof what);
            CHECK(ddpc_net_recv(pf[i].fd, &h, sizeof h, deadline, &g->failed, what));
            CHECK(stash_rest_(g, who[i], pf[i].fd, &h, deadline));
            continue;
        }
        *sender = who[i]; /* a send with this tag, or something the normal receive will report */
        return DDPC_OK;
    }
    return DDPC_OK;
}

/* Tries once, briefly, to make the send/recv links to the higher ranks that
 * have none yet (they wait for this rank to connect before they can send).
 * A rank that does not answer (it may have left the group) is tried again
 * on a later call; meanwhile the others can be heard. */
static ddpc_status connect_higher_(ddpc_group *g, uint64_t deadline) {
    for (int p = g->rank + 1; p < g->size; p++) {
        uint64_t brief = ddpc_deadline_after(ddpc_ms_left(deadline, 50) / 1000.0);
        pthread_mutex_lock(&g->link_lock);
        ddpc_status st = *slot_(g, p, DDPC_LINK_P2P) < 0 ? connect_peer_(g, p, DDPC_LINK_P2P, brief) : DDPC_OK;
        pthread_mutex_unlock(&g->link_lock);
        if (st == DDPC_ERR_TIMEOUT) ddpc_clear_error();
        else CHECK(st);
    }
    return DDPC_OK;
}

/* A recv from any source: the earliest stashed message with this recv's tag,
 * else the first link whose next message is a send with the tag. Links to
 * the higher ranks are made from here (the lower ones connect here), each
 * retried on every turn until it is there. */
static ddpc_status recv_any_(ddpc_group *g, const ddpc_coll_args *a, uint64_t deadline) {
    ddpc_stash_msg *m = ddpc_stash_take(g->stash, DDPC_ANY_SOURCE, a->tag);
    if (m) return deliver_(g, a, m);
    struct pollfd *pf = malloc((size_t)(g->size + 1) * sizeof *pf);
    int *who = malloc((size_t)(g->size + 1) * sizeof *who);
    char *skip = calloc((size_t)g->size, 1);
    ddpc_status st = DDPC_OK;
    int sender = -1;
    if (!pf || !who || !skip) {
        st = DDPC_ERROR(DDPC_ERR_OOM, "out of memory");
        goto done_;
    }
    while (sender < 0) {
        if (atomic_load(&g->failed)) {
            st = ddpc_group_error(g);
            goto done_;
        }
        if (ddpc_ms_left(deadline, 1) == 0) {
            st = DDPC_ERROR(DDPC_ERR_TIMEOUT, "timed out after %.1f s in recv from any rank (tag %d): no rank sent a "
                            "message with tag %d", a->timeout_s, a->tag, a->tag);
            goto done_;
        }
        if ((st = connect_higher_(g, deadline)) != DDPC_OK) goto done_;
        int np = 0;
        pthread_mutex_lock(&g->link_lock);
        for (int p = 0; p < g->size; p++) {
            int fd = *slot_(g, p, DDPC_LINK_P2P);
            if (p != g->rank && fd >= 0 && !skip[p]) pf[np] = (struct pollfd){fd, POLLIN, 0}, who[np++] = p;
        }
        pthread_mutex_unlock(&g->link_lock);
        if (g->rank > 0) pf[np] = (struct pollfd){g->listen_fd, POLLIN, 0}, who[np++] = -1;
        int rc = poll(pf, (nfds_t)np, ddpc_ms_left(deadline, 50));
        if (rc < 0 && errno != EINTR) {
            st = DDPC_ERROR(DDPC_ERR_SYS, "poll failed: %s", strerror(errno));
            goto done_;
        }
        if (rc > 0 && (st = ready_sender_(g, a->tag, pf, who, np, skip, deadline, &sender)) != DDPC_OK) goto done_;
    }
done_:
    free(pf);
    free(who);
    free(skip);
    if (st != DDPC_OK) return st;
    ddpc_coll_args b = *a;
    b.peer = sender;
    return recv_from_(g, &b, deadline);
}

ddpc_status ddpc_p2p_send(ddpc_group *g, const ddpc_coll_args *a, uint64_t deadline) {
    return cause_(g, send_(g, a, deadline));
}

ddpc_status ddpc_p2p_recv(ddpc_group *g, const ddpc_coll_args *a, uint64_t deadline) {
    return cause_(g, a->peer == DDPC_ANY_SOURCE ? recv_any_(g, a, deadline) : recv_from_(g, a, deadline));
}

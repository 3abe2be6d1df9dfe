/* The per-peer queues of messages read ahead of their recv (stash.h). */
#include "comm/stash.h"

#include <stdlib.h>

struct ddpc_stash {
    int npeers;
    ddpc_stash_msg **head, **tail; /* by peer */
    uint64_t arrivals;
};

ddpc_status ddpc_stash_init(int npeers, ddpc_stash **out) {
    ddpc_stash *s = calloc(1, sizeof *s);
    if (s) {
        s->npeers = npeers;
        s->head = calloc((size_t)npeers, sizeof *s->head);
        s->tail = calloc((size_t)npeers, sizeof *s->tail);
    }
    if (!s || !s->head || !s->tail) {
        ddpc_stash_free(s);
        return DDPC_ERROR(DDPC_ERR_OOM, "out of memory");
    }
    *out = s;
    return DDPC_OK;
}

void ddpc_stash_free(ddpc_stash *s) {
    if (!s) return;
    for (int p = 0; s->head && p < s->npeers; p++)
        for (ddpc_stash_msg *m = s->head[p], *next; m; m = next) {
            next = m->next;
            free(m);
        }
    free(s->head);
    free(s->tail);
    free(s);
}

ddpc_status ddpc_stash_msg_new(int peer, const ddpc_msg_header *h, size_t nbytes, ddpc_stash_msg **out) {
    ddpc_stash_msg *m = nbytes <= SIZE_MAX - sizeof *m ? malloc(sizeof *m + nbytes) : NULL;
    if (!m)
        return DDPC_ERROR(DDPC_ERR_OOM, "out of memory for the %zu bytes of a message with tag %d, kept until its recv",
                          nbytes, h->tag);
    *m = (ddpc_stash_msg){.peer = peer, .h = *h, .nbytes = nbytes};
    *out = m;
    return DDPC_OK;
}

void ddpc_stash_put(ddpc_stash *s, ddpc_stash_msg *m) {
    m->next = NULL;
    m->arrival = s->arrivals++;
    if (s->tail[m->peer]) s->tail[m->peer]->next = m;
    else s->head[m->peer] = m;
    s->tail[m->peer] = m;
}

/* The link in peer p's queue that points at its oldest message with `tag`, or NULL. */
static ddpc_stash_msg **find_(ddpc_stash *s, int p, int tag) {
    for (ddpc_stash_msg **at = &s->head[p]; *at; at = &(*at)->next)
        if ((*at)->h.tag == tag) return at;
    return NULL;
}

ddpc_stash_msg *ddpc_stash_take(ddpc_stash *s, int peer, int tag) {
    ddpc_stash_msg **at = NULL;
    if (peer != DDPC_ANY_SOURCE) {
        at = find_(s, peer, tag);
    } else {
        for (int p = 0; p < s->npeers; p++) {
            ddpc_stash_msg **cand = find_(s, p, tag);
            if (cand && (!at || (*cand)->arrival < (*at)->arrival)) at = cand;
        }
    }
    if (!at) return NULL;
    ddpc_stash_msg *m = *at;
    *at = m->next;
    /* It was the last one: the tail moves back to the one before it (or none). */
    if (s->tail[m->peer] == m) {
        ddpc_stash_msg *last = s->head[m->peer];
        while (last && last->next) last = last->next;
        s->tail[m->peer] = last;
    }
    m->next = NULL;
    return m;
}

int ddpc_stash_count(const ddpc_stash *s, int peer) {
    int n = 0;
    for (const ddpc_stash_msg *m = s->head[peer]; m; m = m->next) n++;
    return n;
}

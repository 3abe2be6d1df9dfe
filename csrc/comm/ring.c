/* Collectives across hosts: a TCP ring over the host leaders (the lowest
 * group rank on each host), built on the point-to-point links of p2p.c.
 *
 * all_reduce is a reduce-scatter followed by an all-gather around the ring:
 * with L hosts the tensor is cut into L segments; in step s every leader
 * sends one segment to its successor while receiving another from its
 * predecessor. Segments travel in pieces of PIECE_BYTES so that receiving,
 * reducing and the peer's sending overlap. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/group.h"
#include "comm/net.h"
#include "comm/schedule.h"

#define PIECE_BYTES (512u << 10)

typedef struct {
    ddpc_group *g;
    int next_fd, prev_fd;
    int next, prev;        /* group ranks of the neighbours */
    int pos, len;          /* this leader's place in the ring and the ring's size */
    char what[64];
} ring_;

static ddpc_status ring_open_(ddpc_group *g, const ddpc_coll_args *a, uint64_t deadline, ring_ *r) {
    const ddpc_topology *t = &g->topo;
    r->g = g;
    r->len = t->nnodes;
    r->pos = t->node;
    r->next = t->leaders[(r->pos + 1) % r->len];
    r->prev = t->leaders[(r->pos + r->len - 1) % r->len];
    snprintf(r->what, sizeof r->what, "ring neighbours (ranks %d and %d)", ddpc_global_rank(g, r->prev),
             ddpc_global_rank(g, r->next));
    CHECK(ddpc_p2p_link(g, r->next, DDPC_LINK_RING, a->timeout_s, deadline, &r->next_fd));
    CHECK(ddpc_p2p_link(g, r->prev, DDPC_LINK_RING, a->timeout_s, deadline, &r->prev_fd));
    ddpc_msg_header mine, theirs;
    ddpc_msg_header_fill(&mine, a);
    CHECK(ddpc_net_sendrecv(r->next_fd, &mine, sizeof mine, r->prev_fd, &theirs, sizeof theirs, deadline, &g->failed,
                            r->what));
    return ddpc_msg_header_check(g, a, &theirs, r->prev);
}

static ddpc_status fail_(ddpc_group *g, ddpc_status st) {
    return st == DDPC_ERR_DIST && atomic_load(&g->failed) ? ddpc_group_error(g) : st;
}

ddpc_status ddpc_ring_allreduce(ddpc_group *g, const ddpc_coll_args *a, uint64_t deadline) {
    ring_ r;
    ddpc_status res = DDPC_OK;
    CHECK(fail_(g, ring_open_(g, a, deadline, &r)));
    size_t es = ddpc_dtype_size(a->dtype), piece = PIECE_BYTES / es;
    char *data = a->out, *tmp = malloc(PIECE_BYTES);
    if (!tmp) return DDPC_ERROR(DDPC_ERR_OOM, "out of memory for the ring buffer");
    ddpc_redop op = a->op == DDPC_RED_AVG ? DDPC_RED_SUM : a->op;
    /* Reduce-scatter: after L-1 steps, segment pos+1 is complete here. */
    for (int s = 0; s < r.len - 1; s++) {
        size_t slo, shi, rlo, rhi;
        ddpc_ring_segment(a->count, r.len, ddpc_ring_rs_send(r.pos, s, r.len), &slo, &shi);
        ddpc_ring_segment(a->count, r.len, ddpc_ring_rs_recv(r.pos, s, r.len), &rlo, &rhi);
        for (size_t k = 0; slo + k < shi || rlo + k < rhi; k += piece) {
            size_t sn = slo + k < shi ? (shi - slo - k < piece ? shi - slo - k : piece) : 0;
            size_t rn = rlo + k < rhi ? (rhi - rlo - k < piece ? rhi - rlo - k : piece) : 0;
            CHECKGOTO(ddpc_net_sendrecv(r.next_fd, data + (slo + k) * es, sn * es, r.prev_fd, tmp, rn * es, deadline,
                                        &g->failed, r.what), res, out);
            char *dst = data + (rlo + k) * es;
            ddpc_reduce(a->dtype, op, dst, (const void *const[]){dst, tmp}, 2, rn, 0);
        }
    }
    /* All-gather: pass the completed segments around. */
    for (int s = 0; s < r.len - 1; s++) {
        size_t slo, shi, rlo, rhi;
        ddpc_ring_segment(a->count, r.len, ddpc_ring_ag_send(r.pos, s, r.len), &slo, &shi);
        ddpc_ring_segment(a->count, r.len, ddpc_ring_ag_recv(r.pos, s, r.len), &rlo, &rhi);
        CHECKGOTO(ddpc_net_sendrecv(r.next_fd, data + slo * es, (shi - slo) * es, r.prev_fd, data + rlo * es,
                                    (rhi - rlo) * es, deadline, &g->failed, r.what), res, out);
    }
out:
    free(tmp);
    return fail_(g, res);
}

ddpc_status ddpc_ring_broadcast(ddpc_group *g, const ddpc_coll_args *a, int root_node, uint64_t deadline) {
    ring_ r;
    CHECK(fail_(g, ring_open_(g, a, deadline, &r)));
    size_t nbytes = a->count * ddpc_dtype_size(a->dtype);
    char *data = a->out;
    int last = (root_node + r.len - 1) % r.len;
    /* Pieces flow root -> ... -> the root's predecessor, each forwarded as soon as it arrives. */
    for (size_t off = 0; off < nbytes; off += PIECE_BYTES) {
        size_t n = nbytes - off < PIECE_BYTES ? nbytes - off : PIECE_BYTES;
        if (r.pos != root_node)
            CHECK(fail_(g, ddpc_net_recv(r.prev_fd, data + off, n, deadline, &g->failed, r.what)));
        if (r.pos != last) CHECK(fail_(g, ddpc_net_send(r.next_fd, data + off, n, deadline, &g->failed, r.what)));
    }
    return DDPC_OK;
}

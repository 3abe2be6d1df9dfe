/* Messages a receive read off a send/recv link ahead of their turn: a recv
 * for one tag that finds a message with another tag at the head of the link
 * keeps it here, so that sends with different tags are independent (as in
 * gloo). One FIFO per peer keeps each tag's messages in the order they were
 * sent; a recv from any rank takes the earliest arrival among the peers.
 * Kept apart from the transport code so it can be unit-tested on its own. */
#ifndef DDPC_COMM_STASH_H
#define DDPC_COMM_STASH_H

#include <stddef.h>
#include <stdint.h>

#include "comm/group.h"
#include "common.h"

/* One message: its header as the sender wrote it and its payload. */
typedef struct ddpc_stash_msg {
    struct ddpc_stash_msg *next;
    uint64_t arrival;          /* order of arrival across all peers */
    int peer;                  /* group rank of the sender */
    ddpc_msg_header h;
    size_t nbytes;
    unsigned char data[];
} ddpc_stash_msg;

ddpc_status ddpc_stash_init(int npeers, ddpc_stash **out);
/* Frees the stash and every message still in it. */
void ddpc_stash_free(ddpc_stash *s);

/* A message from `peer` with room for `nbytes` of payload, for the caller to
 * fill and then put, or to free() if filling it fails. */
ddpc_status ddpc_stash_msg_new(int peer, const ddpc_msg_header *h, size_t nbytes, ddpc_stash_msg **out);
/* Appends `m` to its peer's queue; the stash owns it from then on. */
void ddpc_stash_put(ddpc_stash *s, ddpc_stash_msg *m);
/* Removes and returns the oldest message from `peer` with `tag` (peer
 * DDPC_ANY_SOURCE: the earliest arrival with `tag` from any peer), or NULL
 * when there is none. The caller frees it with free(). */
ddpc_stash_msg *ddpc_stash_take(ddpc_stash *s, int peer, int tag);
/* How many messages from `peer` are waiting. */
int ddpc_stash_count(const ddpc_stash *s, int peer);

#endif

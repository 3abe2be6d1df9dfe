/* Unit tests of the stash of messages read ahead of their recv: FIFO order
 * per peer and tag, a recv from any peer taking the earliest arrival, and
 * the stash freed with messages still in it (AddressSanitizer reports a
 * leak or a double free). */
#include <stdlib.h>
#include <string.h>

#include "check.h"

#include "comm/stash.h"


/* Puts a message from `peer` with `tag` whose payload is `nbytes` bytes of `fill`. */
static void put_(ddpc_stash *s, int peer, int tag, size_t nbytes, unsigned char fill) {
    ddpc_msg_header h = {.coll = DDPC_COLL_SEND, .dtype = DDPC_UINT8, .count = nbytes, .tag = tag};
    ddpc_stash_msg *m;
    EXPECT(ddpc_stash_msg_new(peer, &h, nbytes, &m) == DDPC_OK);
    memset(m->data, fill, nbytes);
    ddpc_stash_put(s, m);
}

static void none_(ddpc_stash *s, int peer, int tag) {
    ddpc_stash_msg *m = ddpc_stash_take(s, peer, tag);
    EXPECT(m == NULL, "peer %d tag %d: expected no message", peer, tag);
    free(m);
}

/* Takes the message from `peer` with `tag` and checks where it came from, its
 * size and its payload. */
static void take_(ddpc_stash *s, int peer, int tag, int from, size_t nbytes, unsigned char fill) {
    ddpc_stash_msg *m = ddpc_stash_take(s, peer, tag);
    EXPECT(m != NULL, "peer %d tag %d: expected a message", peer, tag);
    if (!m) return;
    EXPECT(m->peer == from && m->h.tag == tag && m->nbytes == nbytes && m->h.count == nbytes,
           "peer %d tag %d: got peer %d tag %d of %zu bytes", peer, tag, m->peer, m->h.tag, m->nbytes);
    for (size_t i = 0; i < m->nbytes; i++)
        if (m->data[i] != fill) {
            EXPECT(0, "peer %d tag %d: byte %zu is %d, not %d", peer, tag, i, m->data[i], fill);
            break;
        }
    EXPECT(m->next == NULL);
    free(m);
}

static void test_fifo_per_tag_(void) {
    ddpc_stash *s;
    EXPECT(ddpc_stash_init(3, &s) == DDPC_OK);
    put_(s, 1, 1, 10, 0xa0);
    put_(s, 1, 2, 3, 0xb0);
    put_(s, 1, 1, 4000, 0xa1);
    put_(s, 1, 2, 0, 0); /* an empty message is a message */
    put_(s, 1, 1, 1, 0xa2);
    EXPECT(ddpc_stash_count(s, 1) == 5 && ddpc_stash_count(s, 0) == 0 && ddpc_stash_count(s, 2) == 0);
    none_(s, 0, 1);
    none_(s, 1, 3);
    take_(s, 1, 1, 1, 10, 0xa0);
    take_(s, 1, 2, 1, 3, 0xb0);
    take_(s, 1, 1, 1, 4000, 0xa1);
    EXPECT(ddpc_stash_count(s, 1) == 2);
    /* The last message of the queue leaves and another comes behind it: the tail moved back. */
    take_(s, 1, 1, 1, 1, 0xa2);
    put_(s, 1, 1, 2, 0xa3);
    take_(s, 1, 2, 1, 0, 0);
    take_(s, 1, 1, 1, 2, 0xa3);
    EXPECT(ddpc_stash_count(s, 1) == 0);
    put_(s, 1, 7, 5, 0xc0); /* the queue emptied: a new head and tail */
    take_(s, 1, 7, 1, 5, 0xc0);
    none_(s, 1, 7);
    ddpc_stash_free(s);
}

static void test_any_peer_takes_the_earliest_arrival_(void) {
    ddpc_stash *s;
    EXPECT(ddpc_stash_init(4, &s) == DDPC_OK);
    put_(s, 3, 5, 2, 0x31);
    put_(s, 2, 6, 2, 0x20);
    put_(s, 1, 5, 2, 0x11);
    put_(s, 3, 5, 2, 0x32);
    put_(s, 2, 5, 2, 0x21);
    take_(s, DDPC_ANY_SOURCE, 5, 3, 2, 0x31);
    take_(s, DDPC_ANY_SOURCE, 5, 1, 2, 0x11);
    take_(s, DDPC_ANY_SOURCE, 5, 3, 2, 0x32);
    take_(s, DDPC_ANY_SOURCE, 5, 2, 2, 0x21);
    none_(s, DDPC_ANY_SOURCE, 5);
    take_(s, DDPC_ANY_SOURCE, 6, 2, 2, 0x20);
    EXPECT(ddpc_stash_count(s, 1) == 0 && ddpc_stash_count(s, 2) == 0 && ddpc_stash_count(s, 3) == 0);
    ddpc_stash_free(s);
}

static void test_free_with_messages_left_(void) {
    ddpc_stash *s;
    EXPECT(ddpc_stash_init(2, &s) == DDPC_OK);
    put_(s, 0, 1, 100, 1);
    put_(s, 0, 2, 0, 0);
    put_(s, 1, 1, 1 << 16, 2);
    take_(s, 0, 2, 0, 0, 0);
    ddpc_stash_free(s);
    ddpc_stash_free(NULL);
}

static void test_a_size_beyond_memory_is_an_error_(void) {
    ddpc_msg_header h = {.coll = DDPC_COLL_SEND, .dtype = DDPC_UINT8, .count = SIZE_MAX, .tag = 4};
    ddpc_stash_msg *m = NULL;
    EXPECT(ddpc_stash_msg_new(0, &h, SIZE_MAX, &m) == DDPC_ERR_OOM && m == NULL);
    EXPECT(strstr(ddpc_last_error(), "tag 4") != NULL, "%s", ddpc_last_error());
    ddpc_clear_error();
}

int main(void) {
    test_fifo_per_tag_();
    test_any_peer_takes_the_earliest_arrival_();
    test_free_with_messages_left_();
    test_a_size_beyond_memory_is_an_error_();
    return check_finish("stash");
}

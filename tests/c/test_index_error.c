/* The messages of indices out of range (the host ops' and the GPUs' alike),
 * and the host's side of a device's index error record: what it takes, what
 * it leaves (an empty record, one a kernel is still writing), and that
 * threads racing for one error take it once. The record here is plain host
 * memory written as a kernel writes it; on a GPU it is host memory mapped
 * into the device, read by the same code. */
#include <pthread.h>
#include <string.h>

#include "check.h"
#include "index_error.h"

/* The error recorded for e (with suffix) has status `st` and message `want`
 * (before the " [file:line]" that ddpc_error_at appends). */
static void expect_message_(const ddpc_index_error *e, const char *suffix, ddpc_status st, const char *want) {
    ddpc_clear_error();
    ddpc_status got = ddpc_index_error_at("here.c", 1, e, suffix);
    const char *msg = ddpc_last_error();
    size_t n = strlen(want);
    EXPECT(got == st, "status %d for \"%s\", expected %d", (int)got, want, (int)st);
    EXPECT(strncmp(msg, want, n) == 0 && strcmp(msg + n, " [here.c:1]") == 0, "got \"%s\"\nwant \"%s\"", msg, want);
    ddpc_clear_error();
}

static void test_messages_are_the_host_ops_(void) {
    expect_message_(&(ddpc_index_error){.op = DDPC_IX_GATHER, .index = 12, .bound = 10, .at = 1}, "", DDPC_ERR_INDEX,
                    "gather: index 12 is out of range for dim 1 of size 10");
    expect_message_(&(ddpc_index_error){.op = DDPC_IX_SCATTER_ADD, .index = -1, .bound = 3}, "", DDPC_ERR_INDEX,
                    "scatter_add: index -1 is out of range for dim 0 of size 3");
    expect_message_(&(ddpc_index_error){.op = DDPC_IX_SCATTER_REDUCE, .index = 3, .bound = 3, .at = 2}, "",
                    DDPC_ERR_INDEX, "scatter_reduce: index 3 is out of range for dim 2 of size 3");
    expect_message_(&(ddpc_index_error){.op = DDPC_IX_INDEX_ROWS, .index = 7, .bound = 5}, "", DDPC_ERR_INDEX,
                    "index rows: index 7 is out of range for 5 rows");
    expect_message_(&(ddpc_index_error){.op = DDPC_IX_INDEX_ADD_ROWS, .index = -2, .bound = 5}, "", DDPC_ERR_INDEX,
                    "embedding gradient: index -2 is out of range for 5 rows");
    expect_message_(&(ddpc_index_error){.op = DDPC_IX_EMBEDDING_BAG_WEIGHTS_BACKWARD, .index = 9, .bound = 4}, "",
                    DDPC_ERR_INDEX, "embedding_bag per-sample weights backward: index 9 is out of range for 4 rows");
    expect_message_(&(ddpc_index_error){.op = DDPC_IX_PUT_DIM, .index = 4, .bound = 4}, "", DDPC_ERR_INDEX,
                    "gradient of max/min along a dim: index 4 is out of range for a dim of 4");
    expect_message_(&(ddpc_index_error){.op = DDPC_IX_MAX_POOL_BACKWARD, .index = -3, .bound = 16}, "",
                    DDPC_ERR_INDEX, "max pool backward: index -3 is outside a plane of 16 elements");
    expect_message_(&(ddpc_index_error){.op = DDPC_IX_SEARCHSORTED, .index = 8, .bound = 6}, "", DDPC_ERR_INDEX,
                    "searchsorted: sorter index 8 is out of range for lines of 6");
    expect_message_(&(ddpc_index_error){.op = DDPC_IX_CROSS_ENTROPY, .index = 5, .bound = 5, .at = 2}, "",
                    DDPC_ERR_INDEX, "cross entropy: target 5 of row 2 is not a class in [0, 5)");
    expect_message_(&(ddpc_index_error){.op = DDPC_IX_CTC_LOSS_BACKWARD, .index = 0, .bound = 3, .at = 1},
                    "", DDPC_ERR_INDEX,
                    "ctc_loss backward: target label 0 of sample 1 is not a class in [0, 3) other than the blank 0");
}

static void test_embedding_bag_checks_(void) {
    expect_message_(&(ddpc_index_error){.op = DDPC_IX_EMBEDDING_BAG_BACKWARD, .kind = DDPC_INDEX_BAD_ARGMAX,
                                        .index = 10, .bound = 10},
                    "", DDPC_ERR_INDEX, "embedding_bag backward: argmax 10 is out of range for 10 rows");
    /* Malformed offsets are argument errors, as on the host. */
    expect_message_(&(ddpc_index_error){.op = DDPC_IX_EMBEDDING_BAG, .kind = DDPC_INDEX_BAD_FIRST_OFFSET, .index = 2},
                    "", DDPC_ERR_ARG,
                    "embedding_bag: offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start "
                    "from position 0. However, got 2");
    expect_message_(&(ddpc_index_error){.op = DDPC_IX_EMBEDDING_BAG, .kind = DDPC_INDEX_BAD_OFFSET_ORDER, .index = 1,
                                        .at = 3, .other = 4},
                    "", DDPC_ERR_ARG, "embedding_bag: offsets must be non-decreasing, got offsets[3] = 1 after 4");
    expect_message_(&(ddpc_index_error){.op = DDPC_IX_EMBEDDING_BAG_BACKWARD, .kind = DDPC_INDEX_BAD_LAST_OFFSET,
                                        .index = 9, .bound = 8, .at = 2},
                    "", DDPC_ERR_ARG,
                    "embedding_bag backward: offsets[-1] can not be greater than input's length 8 but got offsets[-1] "
                    "of 9");
}

static void test_suffix_and_unknown_records_(void) {
    expect_message_(&(ddpc_index_error){.op = DDPC_IX_GATHER, .index = 12, .bound = 10},
                    " (found on cuda:0 when the device was next synchronized; the op ran asynchronously)",
                    DDPC_ERR_INDEX,
                    "gather: index 12 is out of range for dim 0 of size 10 (found on cuda:0 when the device was next "
                    "synchronized; the op ran asynchronously)");
    /* A record no kernel could write is refused, not read past the tables. */
    expect_message_(&(ddpc_index_error){.op = DDPC_IX_NOPS, .index = 1, .bound = 1}, "", DDPC_ERR_INTERNAL,
                    "an op taking indices: index 1 is out of range for 1");
    expect_message_(&(ddpc_index_error){.op = -1, .kind = 99, .index = 1}, "", DDPC_ERR_INTERNAL,
                    "an op taking indices: a check of unknown kind 99 failed for index 1");
}

/* As record_index_error in kernels/index_check.cuh leaves a record in `epoch`. */
static void fill_(ddpc_index_error *r, uint32_t epoch, uint32_t state, int64_t index) {
    *r = (ddpc_index_error){.index = index, .bound = 10, .at = 1, .op = DDPC_IX_GATHER,
                            .state = DDPC_INDEX_WORD(epoch, state)};
}

static void test_take_leaves_records_without_an_error_(void) {
    ddpc_index_error r, out = {.index = -7};
    fill_(&r, 5, DDPC_INDEX_CLEAR, 3);
    EXPECT(!ddpc_index_error_take(&r, &out) && out.index == -7 && r.state == DDPC_INDEX_WORD(5, DDPC_INDEX_CLEAR));
    /* A kernel is still writing it: its fields may be half there, so it is left for a later check. */
    fill_(&r, 5, DDPC_INDEX_WRITING, 3);
    EXPECT(!ddpc_index_error_take(&r, &out) && out.index == -7 && r.state == DDPC_INDEX_WORD(5, DDPC_INDEX_WRITING));
    fill_(&r, 5, DDPC_INDEX_SET, 12);
    EXPECT(ddpc_index_error_take(&r, &out));
    EXPECT(out.index == 12 && out.bound == 10 && out.at == 1 && out.op == DDPC_IX_GATHER);
    /* Cleared in the next epoch: the kernels launched before the take (in epoch 5) record no more. */
    EXPECT(r.state == DDPC_INDEX_WORD(6, DDPC_INDEX_CLEAR), "state word %#x after the take", r.state);
    EXPECT(!ddpc_index_error_take(&r, &out), "an error is taken once");
    /* The epoch wraps within its 30 bits. */
    fill_(&r, 0x3fffffff, DDPC_INDEX_SET, 12);
    EXPECT(ddpc_index_error_take(&r, &out) && r.state == DDPC_INDEX_WORD(0, DDPC_INDEX_CLEAR));
}

typedef struct {
    ddpc_index_error *record;
    int *go, taken;
} racer_;

static void *race_(void *arg) {
    racer_ *r = arg;
    ddpc_index_error out;
    while (!__atomic_load_n(r->go, __ATOMIC_ACQUIRE)) {
    }
    r->taken = ddpc_index_error_take(r->record, &out);
    if (r->taken) EXPECT(out.index == 12 && (out.state & DDPC_INDEX_STATE_MASK) == DDPC_INDEX_SET);
    return NULL;
}

static void test_racing_threads_take_an_error_once_(void) {
    enum { THREADS = 4, ROUNDS = 200 };
    for (int round = 0; round < ROUNDS; round++) {
        ddpc_index_error record;
        int go = 0, takers = 0;
        fill_(&record, (uint32_t)round, DDPC_INDEX_SET, 12);
        racer_ racers[THREADS];
        pthread_t threads[THREADS];
        for (int i = 0; i < THREADS; i++) {
            racers[i] = (racer_){.record = &record, .go = &go};
            EXPECT(pthread_create(&threads[i], NULL, race_, &racers[i]) == 0);
        }
        __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
        for (int i = 0; i < THREADS; i++) {
            pthread_join(threads[i], NULL);
            takers += racers[i].taken;
        }
        EXPECT(takers == 1 && record.state == DDPC_INDEX_WORD(round + 1, DDPC_INDEX_CLEAR),
               "round %d: %d threads took the error", round, takers);
    }
}

int main(void) {
    test_messages_are_the_host_ops_();
    test_embedding_bag_checks_();
    test_suffix_and_unknown_records_();
    test_take_leaves_records_without_an_error_();
    test_racing_threads_take_an_error_once_();
    return check_finish("index error");
}

/* Intra-host collectives over one shared-memory segment per group and host.
 *
 * The segment holds a control block (a barrier counter used as a futex word,
 * one call descriptor per rank) and two data areas of one slot
 * per local rank. Collectives proceed in phases separated by barriers; phase
 * i writes only area i % 2 and reads only what phase i - 1 wrote, so no rank
 * overwrites data another rank may still read, with one barrier per phase.
 *
 * all_reduce of a chunk: every rank copies its chunk into its slot (phase a);
 * rank r reduces slice r of all slots into the other area (phase b, a
 * reduce-scatter); every rank copies the reduced chunk out (phase c, an
 * all-gather), which shares its phase with the next chunk's phase a.
 *
 * The leader creates the segment, every local rank maps it, and it is
 * unlinked as soon as all have, so no name is left in /dev/shm even if a
 * process is killed.
 *
 * Shared buffers (ddpc_shm_share) are segments of their own, one per local
 * rank, each mapped by all: an all_reduce of data lying in one, at the same
 * offset on every rank, skips the staging areas. Rank r reduces slice r of
 * all ranks' buffers in place into its own, then copies the other reduced
 * slices from their owners: 2.5 passes over the data instead of 4.5. */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "comm/group.h"
#include "comm/net.h"
#include "comm/schedule.h"

/* Bytes of one rank's slot in one area: big enough that barriers are rare,
 * small enough that a chunk of all slots stays in the cache. */
#define SLOT_BYTES (256u << 10)
#define ALIGN_ 64
/* Results at least this large go back to the caller with streaming stores. */
#define STREAM_BYTES (32u << 20)

typedef struct {
    _Alignas(64) _Atomic uint64_t seq;   /* 1 + sequence number of the call, 0 before any */
    uint32_t coll, op, dtype;
    int32_t peer;
    uint64_t count;
    uint64_t shared_id, shared_off;      /* the shared buffer the data lie in (id 0: none) */
} desc_;

struct ddpc_shm_reg {
    atomic_int refs;
    atomic_int dead;      /* its owner let go: all-reduces no longer look for it */
    uint64_t id;
    size_t size, map_size;
    int n;
    char *mine;           /* this rank's buffer */
    char *base[];         /* every local rank's buffer, as mapped here */
};

typedef struct {
    _Alignas(64) atomic_uint arrive;      /* barrier arrivals, the futex word */
    atomic_uint sleepers;                 /* ranks asleep on the futex */
    uint32_t nlocal;
    /* followed by: desc_ desc[2][nlocal]; _Atomic uint64_t reached[nlocal] (64 B apart); areas */
} ctrl_;

struct ddpc_shm {
    ddpc_group *g;
    char *base;
    size_t size;
    ctrl_ *ctrl;
    desc_ *desc[2];
    char *reached;        /* per-rank barrier progress, 64 bytes apart */
    char *area[2];
    int me, n;
    uint32_t epoch;       /* barriers passed */
    int spin;             /* busy-wait rounds before sleeping */
    int check_pending;    /* the next barrier opens a call: compare descriptors */
    ddpc_coll_args cur;   /* the call in progress, for error messages */
    /* Shared buffers: shared by the caller's thread, looked up by the
     * collectives' thread. */
    pthread_mutex_t reg_lock;
    ddpc_shm_reg **regs;
    int nregs, cap_regs;
    uint64_t reg_next;
};

static _Atomic uint64_t *reached_(ddpc_shm *s, int r) { return (_Atomic uint64_t *)(s->reached + 64 * (size_t)r); }

static size_t layout_(int n, size_t *desc_off, size_t *reached_off, size_t *area_off) {
    size_t off = (sizeof(ctrl_) + ALIGN_ - 1) / ALIGN_ * ALIGN_;
    *desc_off = off;
    off += 2 * (size_t)n * sizeof(desc_);
    *reached_off = off;
    off += 64 * (size_t)n;
    off = (off + 4095) / 4096 * 4096;
    *area_off = off;
    return off + 2 * (size_t)n * SLOT_BYTES;
}

static void futex_wake_(atomic_uint *w) { syscall(SYS_futex, w, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0); }

static void futex_wait_(atomic_uint *w, unsigned val, int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    syscall(SYS_futex, w, FUTEX_WAIT, val, &ts, NULL, 0);
}

static inline void cpu_relax_(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* ---- setup ---------------------------------------------------------------------- */

/* Sizes a new segment and allocates its pages now, so that a full /dev/shm
 * is an error here rather than a SIGBUS at first touch; 0 or an errno. */
static int allocate_segment_(int fd, size_t size) {
    return ftruncate(fd, (off_t)size) < 0 ? errno : posix_fallocate(fd, 0, (off_t)size);
}

/* A fresh name in /dev/shm for this process's segment `what`. */
static void segment_name_(char *buf, size_t cap, const char *what) {
    unsigned rnd = 0;
    int ur = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (ur >= 0) {
        if (read(ur, &rnd, sizeof rnd) != sizeof rnd) rnd = 0;
        close(ur);
    }
    snprintf(buf, cap, "/ddpc-%d-%08x-%s", (int)getpid(), rnd, what);
}

static ddpc_status map_(ddpc_shm *s, int fd, size_t size) {
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return DDPC_ERROR(DDPC_ERR_SYS, "mmap of the shared segment failed: %s", strerror(errno));
    s->base = p;
    s->size = size;
    size_t d, r, a;
    layout_(s->n, &d, &r, &a);
    s->ctrl = p;
    s->desc[0] = (desc_ *)(s->base + d);
    s->desc[1] = s->desc[0] + s->n;
    s->reached = s->base + r;
    s->area[0] = s->base + a;
    s->area[1] = s->area[0] + (size_t)s->n * SLOT_BYTES;
    return DDPC_OK;
}

ddpc_status ddpc_shm_init(ddpc_group *g, ddpc_shm **out) {
    ddpc_status res = DDPC_OK;
    const ddpc_topology *t = &g->topo;
    ddpc_shm *s = calloc(1, sizeof *s);
    if (!s) return DDPC_ERROR(DDPC_ERR_OOM, "out of memory");
    s->g = g;
    s->me = t->local_rank;
    s->n = t->local_size;
    pthread_mutex_init(&s->reg_lock, NULL);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    /* With more ranks than cores a spinning rank steals the core another rank
     * needs to arrive, so sleep almost at once. */
    s->spin = ncpu >= s->n ? 20000 : 64;
    size_t d, r, a, size = layout_(s->n, &d, &r, &a);
    char name[128], key[192];
    int fd = -1;
    void *val = NULL;
    size_t vlen;
    int leader = t->local_ranks[0];
    snprintf(key, sizeof key, "%sshm/%d", g->prefix, leader);
    if (s->me == 0) {
        char what[32];
        snprintf(what, sizeof what, "%d", leader);
        segment_name_(name, sizeof name, what);
        fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0) return free(s), DDPC_ERROR(DDPC_ERR_SYS, "shm_open(%s) failed: %s", name, strerror(errno));
        int e = allocate_segment_(fd, size);
        if (e) {
            res = DDPC_ERROR(DDPC_ERR_SYS, "cannot make the shared segment (%zu bytes) in /dev/shm: %s", size,
                             strerror(e));
            shm_unlink(name);
            goto fail;
        }
        CHECKGOTO(map_(s, fd, size), res, unlink);
        s->ctrl->nlocal = (uint32_t)s->n;
        CHECKGOTO(ddpc_store_set(g->store, key, name, strlen(name) + 1), res, unlink);
    } else {
        CHECKGOTO(ddpc_group_store_get(g, key, &val, &vlen), res, fail);
        snprintf(name, sizeof name, "%s", (char *)val);
        fd = shm_open(name, O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0) {
            res = DDPC_ERROR(DDPC_ERR_SYS, "shm_open(%s) failed: %s", name, strerror(errno));
            goto fail;
        }
        CHECKGOTO(map_(s, fd, size), res, fail);
    }
    /* Every rank counts itself in once mapped; the leader removes the name as
     * soon as all have, or when giving up (a rank died before mapping). */
    int64_t mapped;
    snprintf(key, sizeof key, "%sshm_mapped/%d", g->prefix, leader);
    CHECKGOTO(ddpc_store_add(g->store, key, 1, &mapped), res, unlink);
    if (s->me == 0) {
        uint64_t deadline = ddpc_deadline_after(g->timeout_s);
        while (mapped < s->n) {
            if (atomic_load(&g->failed)) { res = ddpc_group_error(g); goto unlink; }
            if (ddpc_ms_left(deadline, 1) == 0) {
                res = DDPC_ERROR(DDPC_ERR_TIMEOUT, "timed out waiting for the ranks on this host to map the shared segment");
                goto unlink;
            }
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
            CHECKGOTO(ddpc_store_add(g->store, key, 0, &mapped), res, unlink);
        }
        shm_unlink(name);
    }
    close(fd);
    free(val);
    *out = s;
    return DDPC_OK;
unlink:
    if (s->me == 0) shm_unlink(name);
fail:
    if (fd >= 0) close(fd);
    free(val);
    ddpc_shm_free(s);
    return res;
}

/* ---- shared buffers ------------------------------------------------------------- */

static void reg_unref_(ddpc_shm_reg *r) {
    if (atomic_fetch_sub(&r->refs, 1) != 1) return;
    for (int j = 0; j < r->n; j++)
        if (r->base[j]) munmap(r->base[j], r->map_size);
    free(r);
}

void *ddpc_shm_reg_data(const ddpc_shm_reg *r) { return r->mine; }
size_t ddpc_shm_reg_size(const ddpc_shm_reg *r) { return r->size; }

void ddpc_shm_reg_release(ddpc_shm_reg *r) {
    if (!r) return;
    atomic_store(&r->dead, 1);
    reg_unref_(r);
}

ddpc_shm_reg *ddpc_shm_reg_ref(ddpc_shm_reg *r) {
    atomic_fetch_add(&r->refs, 1);
    return r;
}

void ddpc_shm_reg_unref(ddpc_shm_reg *r) {
    if (r) reg_unref_(r);
}

int ddpc_shm_reg_ranks(const ddpc_shm_reg *r) { return r->n; }
void *ddpc_shm_reg_peer(const ddpc_shm_reg *r, int j) { return r->base[j]; }

void ddpc_shm_signal(void *word, uint64_t value) {
    atomic_store_explicit((_Atomic uint64_t *)word, value, memory_order_release);
}

ddpc_status ddpc_shm_await(ddpc_group *g, const void *word, uint64_t value, const char *what) {
    const _Atomic uint64_t *w = word;
    uint64_t deadline = ddpc_deadline_after(g->timeout_s);
    for (int i = 0;; i++) {
        if (atomic_load_explicit(w, memory_order_acquire) >= value) return DDPC_OK;
        /* The ranks usually arrive within microseconds of each other: spin a
         * little, then check on the group between short sleeps. */
        if (i < 2000) {
            cpu_relax_();
            continue;
        }
        if (atomic_load(&g->failed)) return ddpc_group_error(g);
        for (int j = 0; j < g->topo.local_size; j++) {
            int k = g->topo.local_ranks[j];
            if (k != g->rank && atomic_load(&g->departed[k]))
                return DDPC_ERROR(DDPC_ERR_DIST, "%s cannot finish: rank %d left the process group "
                                  "(destroy_process_group() or the end of its process) without taking part",
                                  what, ddpc_global_rank(g, k));
        }
        if (ddpc_ms_left(deadline, 1) == 0)
            return DDPC_ERROR(DDPC_ERR_TIMEOUT, "%s timed out after %.1f s waiting for the other ranks on this host",
                              what, g->timeout_s);
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
}

/* Forgets the buffers their owners let go of; reg_lock is held. */
static void prune_locked_(ddpc_shm *s) {
    for (int i = 0; i < s->nregs;) {
        ddpc_shm_reg *r = s->regs[i];
        if (atomic_load(&r->dead)) {
            s->regs[i] = s->regs[--s->nregs];
            reg_unref_(r);
        } else {
            i++;
        }
    }
}

/* Maps local rank j's buffer, whose name (or "!reason" when that rank could
 * not make it) was published under `key`. */
static ddpc_status map_peer_(ddpc_shm *s, ddpc_shm_reg *r, int j, const char *key) {
    void *val;
    size_t len;
    CHECK(ddpc_group_store_get(s->g, key, &val, &len));
    const char *name = val;
    int peer = ddpc_global_rank(s->g, s->g->topo.local_ranks[j]);
    if (name[0] == '!') {
        ddpc_status st = DDPC_ERROR(DDPC_ERR_DIST, "rank %d could not make its shared buffer: %s", peer, name + 1);
        free(val);
        return st;
    }
    int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0600);
    struct stat sb;
    ddpc_status st = DDPC_OK;
    if (fd < 0 && errno == ENOENT) {
        st = DDPC_ERROR(DDPC_ERR_DIST, "rank %d's shared buffer is gone: that rank gave up sharing it (it failed, "
                        "or asked for another size)", peer);
    } else if (fd < 0) {
        st = DDPC_ERROR(DDPC_ERR_SYS, "shm_open(%s) of rank %d's shared buffer failed: %s", name, peer, strerror(errno));
    } else if (fstat(fd, &sb) < 0) {
        st = DDPC_ERROR(DDPC_ERR_SYS, "fstat of rank %d's shared buffer failed: %s", peer, strerror(errno));
    } else if ((size_t)sb.st_size != r->map_size) {
        st = DDPC_ERROR(DDPC_ERR_ARG, "shared buffers differ in size: rank %d's has %lld bytes, rank %d's %zu "
                        "(every rank must share the same size)", peer, (long long)sb.st_size, s->g->rank, r->map_size);
    } else {
        void *p = mmap(NULL, r->map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) st = DDPC_ERROR(DDPC_ERR_SYS, "mmap of rank %d's shared buffer failed: %s", peer, strerror(errno));
        else r->base[j] = p;
    }
    if (fd >= 0) close(fd);
    free(val);
    return st;
}

/* Makes this rank's buffer, its pages allocated up front. */
static ddpc_status make_own_(ddpc_shm_reg *r, int me, const char *name, int *created) {
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) return DDPC_ERROR(DDPC_ERR_SYS, "shm_open(%s) failed: %s", name, strerror(errno));
    *created = 1;
    ddpc_status st = DDPC_OK;
    int e = allocate_segment_(fd, r->map_size);
    if (e) {
        st = DDPC_ERROR(DDPC_ERR_SYS, "no room for a shared buffer of %zu bytes in /dev/shm (%s); give /dev/shm "
                        "more space (e.g. docker run --shm-size)", r->map_size, strerror(e));
    } else {
        void *p = mmap(NULL, r->map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED)
            st = DDPC_ERROR(DDPC_ERR_SYS, "mmap of a shared buffer (%zu bytes) failed: %s", r->map_size, strerror(errno));
        else r->base[me] = r->mine = p;
    }
    close(fd);
    return st;
}

/* Every rank publishes its buffer's name (or why it has none), maps the
 * others', and counts itself in once it has; a rank that fails at any point
 * counts itself as failed instead, so no rank waits for one that gave up. */
#define FAILED_ONE_ ((int64_t)1 << 32)

ddpc_status ddpc_shm_share(ddpc_shm *s, size_t nbytes, ddpc_shm_reg **out) {
    ddpc_group *g = s->g;
    ddpc_status res = DDPC_OK;
    /* Room in the table first: once the ranks agree, nothing may fail on one of them alone. */
    pthread_mutex_lock(&s->reg_lock);
    prune_locked_(s);
    if (s->nregs == s->cap_regs) {
        int cap = s->cap_regs ? 2 * s->cap_regs : 4;
        ddpc_shm_reg **nr = realloc(s->regs, (size_t)cap * sizeof *nr);
        if (nr) s->regs = nr, s->cap_regs = cap;
    }
    int room = s->nregs < s->cap_regs;
    pthread_mutex_unlock(&s->reg_lock);
    ddpc_shm_reg *r = room ? calloc(1, sizeof *r + (size_t)s->n * sizeof(char *)) : NULL;
    if (!r) return DDPC_ERROR(DDPC_ERR_OOM, "out of memory");
    atomic_init(&r->refs, 1);
    r->id = ++s->reg_next;
    r->size = nbytes;
    r->map_size = nbytes ? (nbytes + 4095) / 4096 * 4096 : 4096;
    r->n = s->n;
    int leader = g->topo.local_ranks[0], created = 0;
    int64_t state = 0;
    unsigned long long id = (unsigned long long)r->id;
    char name[128], key[192], state_key[192], what[48];
    snprintf(what, sizeof what, "%d-b%llu", leader, id);
    segment_name_(name, sizeof name, what);
    snprintf(state_key, sizeof state_key, "%sbuf_state/%d/%llu", g->prefix, leader, id);
    snprintf(key, sizeof key, "%sbuf/%d/%llu/%d", g->prefix, leader, id, s->me);
    res = make_own_(r, s->me, name, &created);
    if (res != DDPC_OK) {
        char why[600];
        snprintf(why, sizeof why, "!%s", ddpc_last_error());
        char *loc = strrchr(why, '[');  /* the peers' message gets their own location */
        if (loc && loc > why + 1 && loc[-1] == ' ') loc[-1] = '\0';
        (void)ddpc_store_set(g->store, key, why, strlen(why) + 1);
        goto fail;
    }
    CHECKGOTO(ddpc_store_set(g->store, key, name, strlen(name) + 1), res, fail);
    for (int j = 0; j < s->n; j++) {
        if (j == s->me) continue;
        snprintf(key, sizeof key, "%sbuf/%d/%llu/%d", g->prefix, leader, id, j);
        CHECKGOTO(map_peer_(s, r, j, key), res, fail);
    }
    /* Once every rank has mapped every buffer the names can go. */
    CHECKGOTO(ddpc_store_add(g->store, state_key, 1, &state), res, fail);
    uint64_t deadline = ddpc_deadline_after(g->timeout_s);
    while (state % FAILED_ONE_ < s->n) {
        if (state >= FAILED_ONE_) {
            res = DDPC_ERROR(DDPC_ERR_DIST, "another rank on this host could not map the shared buffers");
            goto fail;
        }
        if (atomic_load(&g->failed)) {
            res = ddpc_group_error(g);
            goto fail;
        }
        if (ddpc_ms_left(deadline, 1) == 0) {
            res = DDPC_ERROR(DDPC_ERR_TIMEOUT, "timed out waiting for the ranks on this host to map each other's "
                                               "shared buffers (did every rank ask for one?)");
            goto fail;
        }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        CHECKGOTO(ddpc_store_add(g->store, state_key, 0, &state), res, fail);
    }
    shm_unlink(name);
    pthread_mutex_lock(&s->reg_lock);
    atomic_fetch_add(&r->refs, 1);
    s->regs[s->nregs++] = r;
    pthread_mutex_unlock(&s->reg_lock);
    *out = r;
    return DDPC_OK;
fail:
    /* The others stop waiting for this rank. Should the store fail too, the
     * error recorded first, this rank's own, is the one reported. */
    (void)ddpc_store_add(g->store, state_key, FAILED_ONE_, &state);
    if (created) shm_unlink(name);
    reg_unref_(r);
    return res;
}

/* This rank's live shared buffer holding [p, p + nbytes) with a reference
 * for the caller, and the offset of p in it; NULL when there is none. */
static ddpc_shm_reg *find_shared_(ddpc_shm *s, const void *p, size_t nbytes, size_t *off) {
    ddpc_shm_reg *found = NULL;
    uintptr_t a = (uintptr_t)p;
    pthread_mutex_lock(&s->reg_lock);
    prune_locked_(s);
    for (int i = 0; i < s->nregs && !found; i++) {
        ddpc_shm_reg *r = s->regs[i];
        uintptr_t lo = (uintptr_t)r->mine;
        if (a >= lo && a - lo <= r->size && nbytes <= r->size - (a - lo)) {
            found = r;
            *off = a - lo;
            atomic_fetch_add(&r->refs, 1);
        }
    }
    pthread_mutex_unlock(&s->reg_lock);
    return found;
}

/* The failure is recorded in the group, private to this process (a death
 * or an abort reaches every rank through its own monitor; a timeout is each
 * rank's own); the wake makes this process's sleepers look at it. */
void ddpc_shm_abort(ddpc_shm *s) {
    if (s && s->ctrl) futex_wake_(&s->ctrl->arrive);
}

void ddpc_shm_free(ddpc_shm *s) {
    if (!s) return;
    if (s->base) munmap(s->base, s->size);
    for (int i = 0; i < s->nregs; i++) reg_unref_(s->regs[i]);
    free(s->regs);
    pthread_mutex_destroy(&s->reg_lock);
    free(s);
}

/* ---- barrier -------------------------------------------------------------------- */

/* Lists the local ranks that have not reached barrier `target_epoch`. */
static void missing_(ddpc_shm *s, uint64_t target_epoch, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = '\0';
    for (int j = 0; j < s->n && len + 16 < cap; j++)
        if (atomic_load(reached_(s, j)) < target_epoch)
            len += (size_t)snprintf(buf + len, cap - len, "%s%d", len ? ", " : "",
                                    ddpc_global_rank(s->g, s->g->topo.local_ranks[j]));
}

/* A local rank that left the job before reaching barrier `target_epoch`
 * (its group rank), or -1. */
static int departed_(ddpc_shm *s, uint64_t target_epoch) {
    for (int j = 0; j < s->n; j++) {
        int k = s->g->topo.local_ranks[j];
        if (atomic_load(reached_(s, j)) < target_epoch && atomic_load(&s->g->departed[k])) return k;
    }
    return -1;
}

static ddpc_status check_descs_(ddpc_shm *s, int parity);

/* Arrives at the next barrier and waits for every local rank. */
static ddpc_status sync_(ddpc_shm *s, uint64_t deadline) {
    ctrl_ *c = s->ctrl;
    uint32_t epoch = ++s->epoch;
    uint32_t target = epoch * (uint32_t)s->n;
    atomic_store_explicit(reached_(s, s->me), epoch, memory_order_relaxed);
    uint32_t v = atomic_fetch_add(&c->arrive, 1) + 1;
    if (v == target) {
        if (atomic_load(&c->sleepers)) futex_wake_(&c->arrive);
    } else {
        for (int i = 0;; i++) {
            v = atomic_load_explicit(&c->arrive, memory_order_acquire);
            if ((int32_t)(v - target) >= 0) break;
            /* Spin (yielding now and then, in case the rank we wait for
             * shares this core with us), then sleep on the futex. */
            if (i < s->spin) {
                if ((i & 63) == 63) sched_yield();
                else cpu_relax_();
                continue;
            }
            if (atomic_load(&s->g->failed)) return ddpc_group_error(s->g);
            int gone = departed_(s, epoch);
            if (gone >= 0) {
                const ddpc_coll_args *a = &s->cur;
                return DDPC_ERROR(DDPC_ERR_DIST,
                                  "%s (collective #%llu of rank %d) cannot finish: rank %d left the process group "
                                  "(destroy_process_group() or the end of its process) without taking part",
                                  ddpc_coll_name(a->coll), (unsigned long long)a->seq,
                                  ddpc_global_rank(s->g, s->g->rank), ddpc_global_rank(s->g, gone));
            }
            int ms = ddpc_ms_left(deadline, 20);
            if (ms == 0) {
                char who[256];
                missing_(s, epoch, who, sizeof who);
                const ddpc_coll_args *a = &s->cur;
                return DDPC_ERROR(DDPC_ERR_TIMEOUT,
                                  "%s (collective #%llu of rank %d) timed out after %.1f s waiting for ranks [%s]",
                                  ddpc_coll_name(a->coll), (unsigned long long)a->seq,
                                  ddpc_global_rank(s->g, s->g->rank), a->timeout_s, who);
            }
            atomic_fetch_add(&c->sleepers, 1);
            v = atomic_load(&c->arrive);
            if ((int32_t)(v - target) < 0) futex_wait_(&c->arrive, v, ms);
            atomic_fetch_sub(&c->sleepers, 1);
        }
    }
    if (s->check_pending) {
        s->check_pending = 0;
        CHECK(check_descs_(s, (int)((epoch - 1) & 1)));
    }
    return DDPC_OK;
}

/* ---- call descriptors ----------------------------------------------------------- */

static void describe_(const ddpc_group *g, const desc_ *d, char *buf, size_t cap) {
    if (d->coll >= DDPC_NCOLLS) {
        snprintf(buf, cap, "?");
        return;
    }
    char how[48], where[64] = "";
    ddpc_coll_detail(g, (int)d->coll, (int)d->op, d->peer, 0, how, sizeof how);
    if (d->shared_id)
        snprintf(where, sizeof where, " at offset %llu of shared buffer #%llu", (unsigned long long)d->shared_off,
                 (unsigned long long)d->shared_id);
    snprintf(buf, cap, "%s(%llu x %s%s%s) as collective #%llu", ddpc_coll_name((ddpc_coll)d->coll),
             (unsigned long long)d->count, ddpc_dtype_name((ddpc_dtype)d->dtype), how, where,
             (unsigned long long)(atomic_load(&d->seq) - 1));
}

/* Opens a call: publishes its descriptor in the area the next phase writes.
 * `shared` is the shared buffer the data lie in, or NULL. */
static void begin_(ddpc_shm *s, const ddpc_coll_args *a, const ddpc_shm_reg *shared, size_t off) {
    desc_ *d = &s->desc[s->epoch & 1][s->me];
    d->coll = a->coll, d->op = a->op, d->dtype = a->dtype, d->count = a->count;
    d->peer = ddpc_coll_rooted(a->coll) ? a->peer : 0;
    d->shared_id = shared ? shared->id : 0;
    d->shared_off = shared ? off : 0;
    atomic_store(&d->seq, a->seq + 1);
    s->check_pending = 1;
    s->cur = *a;
}

static ddpc_status check_descs_(ddpc_shm *s, int parity) {
    const desc_ *mine = &s->desc[parity][s->me];
    for (int j = 0; j < s->n; j++) {
        const desc_ *o = &s->desc[parity][j];
        if (atomic_load(&o->seq) == atomic_load(&mine->seq) && o->coll == mine->coll && o->op == mine->op &&
            o->dtype == mine->dtype && o->count == mine->count && o->peer == mine->peer &&
            o->shared_id == mine->shared_id && o->shared_off == mine->shared_off)
            continue;
        char a[160], b[160], msg[512];
        describe_(s->g, mine, a, sizeof a);
        describe_(s->g, o, b, sizeof b);
        snprintf(msg, sizeof msg, "collective mismatch: rank %d called %s, rank %d called %s",
                 ddpc_global_rank(s->g, s->g->rank), a, ddpc_global_rank(s->g, s->g->topo.local_ranks[j]), b);
        return ddpc_group_disagree(s->g, &s->cur, msg);
    }
    return DDPC_OK;
}

/* ---- collectives ---------------------------------------------------------------- */

/* Copies a result chunk into the caller's buffer. For tensors larger than
 * the caches, non-temporal stores skip reading every destination line before
 * overwriting it, a third of a plain copy's memory traffic. */
static void copy_out_(void *dst, const void *src, size_t n, int streaming) {
#if defined(__SSE2__)
    if (streaming) {
        char *d = dst;
        const char *s = src;
        size_t head = (16 - ((uintptr_t)d & 15)) & 15;
        if (head > n) head = n;
        memcpy(d, s, head);
        d += head, s += head, n -= head;
        for (; n >= 64; n -= 64, d += 64, s += 64) {
            __m128i a = _mm_loadu_si128((const __m128i *)s), b = _mm_loadu_si128((const __m128i *)(s + 16));
            __m128i c = _mm_loadu_si128((const __m128i *)(s + 32)), e = _mm_loadu_si128((const __m128i *)(s + 48));
            _mm_stream_si128((__m128i *)d, a);
            _mm_stream_si128((__m128i *)(d + 16), b);
            _mm_stream_si128((__m128i *)(d + 32), c);
            _mm_stream_si128((__m128i *)(d + 48), e);
        }
        memcpy(d, s, n);
        return;
    }
#endif
    (void)streaming;
    memcpy(dst, src, n);
}

/* Starts loading the next chunk of a large input while this rank waits for
 * the others, so the copy into the segment finds it in the cache. */
static void prefetch_(const char *p, size_t left) {
    size_t n = left < SLOT_BYTES ? left : SLOT_BYTES;
    for (size_t i = 0; i < n; i += 64) __builtin_prefetch(p + i, 0, 1);
}

/* Orders streaming stores before whatever follows the collective. */
static void copy_out_done_(void) {
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

static char *slot_(ddpc_shm *s, int parity, int rank) { return s->area[parity] + (size_t)rank * SLOT_BYTES; }

/* all_reduce in place in shared buffer r, at offset `off` on every rank: each
 * rank reduces its slice of every rank's buffer and writes the result into
 * all of them, a cache-sized piece at a time while the piece is still in its
 * cache. Two barriers: every input is in place, every result is. */
static ddpc_status allreduce_shared_(ddpc_shm *s, const ddpc_coll_args *a, const ddpc_shm_reg *r, size_t off,
                                     int divisor, uint64_t deadline) {
    size_t es = ddpc_dtype_size(a->dtype), piece = SLOT_BYTES / es, lo, hi;
    const void *srcs[256];
    begin_(s, a, r, off);
    CHECK(sync_(s, deadline));
    ddpc_shm_slice(a->count, es, ALIGN_, s->n, s->me, &lo, &hi);
    for (size_t at = lo; at < hi; at += piece) {
        size_t m = hi - at < piece ? hi - at : piece, pos = off + at * es;
        /* This rank's own buffer first: the reduction writes over it. */
        srcs[0] = r->mine + pos;
        for (int j = 0, k = 1; j < s->n; j++)
            if (j != s->me) srcs[k++] = r->base[j] + pos;
        ddpc_reduce(a->dtype, a->op, r->mine + pos, srcs, s->n, m, divisor);
        for (int j = 0; j < s->n; j++)
            if (j != s->me) memcpy(r->base[j] + pos, r->mine + pos, m * es);
    }
    /* No rank returns before every slice has reached it, nor writes its
     * buffer again while another may still read from it. */
    return sync_(s, deadline);
}

/* all_reduce, or with `root` >= 0 a reduce: the same phases, but only the
 * root copies the result out. */
static ddpc_status allreduce_(ddpc_shm *s, const ddpc_coll_args *a, int root, int divisor, uint64_t deadline) {
    size_t es = ddpc_dtype_size(a->dtype), per_chunk = SLOT_BYTES / es, at;
    ddpc_shm_reg *shared =
        root < 0 && a->in == a->out && a->count ? find_shared_(s, a->out, a->count * es, &at) : NULL;
    if (shared) {
        ddpc_status st = allreduce_shared_(s, a, shared, at, divisor, deadline);
        reg_unref_(shared);
        return st;
    }
    const char *in = a->in;
    char *out = a->out;
    const void *srcs[256];
    begin_(s, a, NULL, 0);
    if (a->count == 0) return sync_(s, deadline);
    for (size_t off = 0; off < a->count; off += per_chunk) {
        size_t m = a->count - off < per_chunk ? a->count - off : per_chunk;
        int p = s->epoch & 1;
        size_t lo, hi;
        ddpc_shm_slice(m, es, ALIGN_, s->n, s->me, &lo, &hi);
        /* The others need every slice but this rank's own, which it reduces
         * straight from its input. */
        char *mine = slot_(s, p, s->me);
        memcpy(mine, in + off * es, lo * es);
        memcpy(mine + hi * es, in + (off + hi) * es, (m - hi) * es);
        CHECK(sync_(s, deadline));
        for (int j = 0; j < s->n; j++) srcs[j] = j == s->me ? in + (off + lo) * es : slot_(s, p, j) + lo * es;
        ddpc_reduce(a->dtype, a->op, slot_(s, p ^ 1, 0) + lo * es, srcs, s->n, hi - lo, divisor);
        if (a->count * es >= STREAM_BYTES) prefetch_(in + (off + m) * es, (a->count - off - m) * es);
        CHECK(sync_(s, deadline));
        if (root < 0 || s->me == root)
            copy_out_(out + off * es, slot_(s, p ^ 1, 0), m * es, a->count * es >= STREAM_BYTES);
    }
    copy_out_done_();
    return DDPC_OK;
}

/* Broadcast from local rank `root`: the root fills a whole area per phase. */
static ddpc_status broadcast_(ddpc_shm *s, const ddpc_coll_args *a, int root, uint64_t deadline) {
    size_t es = ddpc_dtype_size(a->dtype), per_chunk = (size_t)s->n * SLOT_BYTES / es;
    begin_(s, a, NULL, 0);
    if (a->count == 0) return sync_(s, deadline);
    for (size_t off = 0; off < a->count; off += per_chunk) {
        size_t m = a->count - off < per_chunk ? a->count - off : per_chunk;
        int p = s->epoch & 1;
        if (s->me == root) memcpy(s->area[p], (const char *)a->in + off * es, m * es);
        CHECK(sync_(s, deadline));
        if (s->me != root) copy_out_((char *)a->out + off * es, s->area[p], m * es, a->count * es >= STREAM_BYTES);
    }
    copy_out_done_();
    return DDPC_OK;
}

/* all_gather, or with `root` >= 0 a gather to that local rank: every rank
 * (but the root) fills its slot, and every rank (the root alone) copies
 * every slot out, its own block straight from its input. */
static ddpc_status gather_(ddpc_shm *s, const ddpc_coll_args *a, int root, uint64_t deadline) {
    size_t es = ddpc_dtype_size(a->dtype), per_chunk = SLOT_BYTES / es, total = a->count * es;
    begin_(s, a, NULL, 0);
    if (a->count == 0) return sync_(s, deadline);
    const char *in = a->in;
    for (size_t off = 0; off < a->count; off += per_chunk) {
        size_t m = a->count - off < per_chunk ? a->count - off : per_chunk;
        int p = s->epoch & 1;
        if (s->me != root) memcpy(slot_(s, p, s->me), in + off * es, m * es);
        CHECK(sync_(s, deadline));
        if (root >= 0 && s->me != root) continue;
        for (int j = 0; j < s->n; j++)
            copy_out_(ddpc_coll_block(a, a->out, j) + off * es, j == s->me ? in + off * es : slot_(s, p, j), m * es,
                      total * (size_t)s->n >= STREAM_BYTES);
    }
    copy_out_done_();
    return DDPC_OK;
}

/* scatter from local rank `root`: the root fills every rank's slot with its
 * block, each rank copies its own slot out. */
static ddpc_status scatter_(ddpc_shm *s, const ddpc_coll_args *a, int root, uint64_t deadline) {
    size_t es = ddpc_dtype_size(a->dtype), per_chunk = SLOT_BYTES / es, total = a->count * es;
    begin_(s, a, NULL, 0);
    if (a->count == 0) return sync_(s, deadline);
    const char *in = a->in;
    for (size_t off = 0; off < a->count; off += per_chunk) {
        size_t m = a->count - off < per_chunk ? a->count - off : per_chunk;
        int p = s->epoch & 1;
        if (s->me == root)
            for (int j = 0; j < s->n; j++)
                if (j != root) memcpy(slot_(s, p, j), ddpc_coll_block(a, in, j) + off * es, m * es);
        CHECK(sync_(s, deadline));
        copy_out_((char *)a->out + off * es,
                  s->me == root ? ddpc_coll_block(a, in, root) + off * es : slot_(s, p, s->me), m * es,
                  total >= STREAM_BYTES);
    }
    copy_out_done_();
    return DDPC_OK;
}

/* Each rank's slot holds one piece of every output block; rank r reduces
 * piece r of all slots straight into its output. */
static ddpc_status reduce_scatter_(ddpc_shm *s, const ddpc_coll_args *a, int divisor, uint64_t deadline) {
    size_t es = ddpc_dtype_size(a->dtype), per_chunk = SLOT_BYTES / es / (size_t)s->n;
    const void *srcs[256];
    begin_(s, a, NULL, 0);
    if (a->count == 0) return sync_(s, deadline);
    const char *in = a->in;
    for (size_t off = 0; off < a->count; off += per_chunk) {
        size_t m = a->count - off < per_chunk ? a->count - off : per_chunk;
        int p = s->epoch & 1;
        char *mine = slot_(s, p, s->me);
        for (int j = 0; j < s->n; j++) memcpy(mine + (size_t)j * m * es, ddpc_coll_block(a, in, j) + off * es, m * es);
        CHECK(sync_(s, deadline));
        for (int j = 0; j < s->n; j++) srcs[j] = slot_(s, p, j) + (size_t)s->me * m * es;
        ddpc_reduce(a->dtype, a->op, (char *)a->out + off * es, srcs, s->n, m, divisor);
    }
    return DDPC_OK;
}

ddpc_status ddpc_shm_run(ddpc_shm *s, const ddpc_coll_args *a, uint64_t deadline) {
    int divisor = a->op == DDPC_RED_AVG ? s->n : 0;
    ddpc_coll_args b = *a;
    if (b.op == DDPC_RED_AVG) b.op = DDPC_RED_SUM;
    switch (a->coll) {
    case DDPC_COLL_ALLREDUCE: return allreduce_(s, &b, -1, divisor, deadline);
    case DDPC_COLL_REDUCE: return allreduce_(s, &b, b.peer, divisor, deadline);
    case DDPC_COLL_GATHER: return gather_(s, &b, b.peer, deadline);
    case DDPC_COLL_SCATTER: return scatter_(s, &b, b.peer, deadline);
    case DDPC_COLL_BROADCAST: return broadcast_(s, &b, b.peer, deadline);
    case DDPC_COLL_ALLGATHER: return gather_(s, &b, -1, deadline);
    case DDPC_COLL_REDUCE_SCATTER: return reduce_scatter_(s, &b, divisor, deadline);
    case DDPC_COLL_BARRIER: begin_(s, &b, NULL, 0); return sync_(s, deadline);
    default: return DDPC_ERROR(DDPC_ERR_INTERNAL, "%s is not a shared-memory collective", ddpc_coll_name(a->coll));
    }
}

/* Sockets with deadlines (see net.h). */
#include "net.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Waits are cut into slices this long so an abort flag is seen promptly. */
#define SLICE_MS 50

uint64_t ddpc_deadline_after(double seconds) {
    if (seconds < 0 || seconds > 1e9) return DDPC_NO_DEADLINE;
    return ddpc_now_ns() + (uint64_t)(seconds * 1e9);
}

int ddpc_ms_left(uint64_t deadline, int cap_ms) {
    if (deadline == DDPC_NO_DEADLINE) return cap_ms;
    uint64_t now = ddpc_now_ns();
    if (now >= deadline) return 0;
    uint64_t ms = (deadline - now + 999999) / 1000000;
    return ms < (uint64_t)cap_ms ? (int)ms : cap_ms;
}

static void set_nodelay_(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void ddpc_net_keepalive(int fd, int idle_s, int interval_s, int count) {
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof interval_s);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

static ddpc_status resolve_(const char *host, int port, int passive, struct addrinfo **res) {
    struct addrinfo hints = {0};
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    int rc = getaddrinfo(host && host[0] ? host : NULL, portstr, &hints, res);
    if (rc != 0) return DDPC_ERROR(DDPC_ERR_DIST, "cannot resolve host '%s': %s", host ? host : "", gai_strerror(rc));
    return DDPC_OK;
}

ddpc_status ddpc_net_listen(const char *host, int port, int *fd_out, int *bound_port) {
    struct addrinfo *res;
    CHECK(resolve_(host, port, 1, &res));
    int fd = -1, err = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) { err = errno; continue; }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 512) == 0) break;
        err = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return DDPC_ERROR(err == EADDRINUSE ? DDPC_ERR_DIST : DDPC_ERR_SYS, "cannot listen on %s:%d: %s%s",
                          host && host[0] ? host : "*", port, strerror(err),
                          err == EADDRINUSE ? " (another process uses this port; pick another MASTER_PORT)" : "");
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *bound_port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                           : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    *fd_out = fd;
    return DDPC_OK;
}

/* Whether a loopback connect met itself: with nothing listening on the port, a
 * socket whose ephemeral port happens to be that port connects to itself (TCP
 * simultaneous open), and a client retrying against a dead store would then
 * talk to itself. */
static int connected_to_itself_(int fd) {
    struct sockaddr_storage a, b;
    socklen_t la = sizeof a, lb = sizeof b;
    if (getsockname(fd, (struct sockaddr *)&a, &la) != 0 || getpeername(fd, (struct sockaddr *)&b, &lb) != 0)
        return 0;
    if (a.ss_family != b.ss_family) return 0;
    if (a.ss_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)&a, *y = (const void *)&b;
        return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    if (a.ss_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const void *)&a, *y = (const void *)&b;
        return x->sin6_port == y->sin6_port && memcmp(&x->sin6_addr, &y->sin6_addr, sizeof x->sin6_addr) == 0;
    }
    return 0;
}

/* One non-blocking connect attempt bounded by `ms`; returns 0 or an errno. */
static int try_connect_(const struct addrinfo *ai, int ms, int *fd_out) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) return errno;
    int err = 0;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        if (errno != EINPROGRESS) {
            err = errno;
        } else {
            struct pollfd p = {fd, POLLOUT, 0};
            int r = poll(&p, 1, ms);
            socklen_t l = sizeof err;
            if (r == 0) err = ETIMEDOUT;
            else if (r < 0) err = errno;
            else getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l);
        }
    }
    if (!err && connected_to_itself_(fd)) err = ECONNREFUSED;
    if (err) { close(fd); return err; }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    set_nodelay_(fd);
    *fd_out = fd;
    return 0;
}

ddpc_status ddpc_net_connect(const char *host, int port, uint64_t deadline, int *fd) {
    int err = 0, delay_ms = 10;
    for (;;) {
        struct addrinfo *res;
        CHECK(resolve_(host, port, 0, &res));
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
            err = try_connect_(ai, ddpc_ms_left(deadline, 1000) + 1, fd);
            if (!err) break;
        }
        freeaddrinfo(res);
        if (!err) return DDPC_OK;
        if (ddpc_ms_left(deadline, 1) == 0)
            return DDPC_ERROR(DDPC_ERR_TIMEOUT, "could not connect to %s:%d before the timeout: %s", host, port,
                              strerror(err));
        struct timespec ts = {0, (long)ddpc_ms_left(deadline, delay_ms) * 1000000L};
        nanosleep(&ts, NULL);
        if (delay_ms < 500) delay_ms *= 2;
    }
}

/* Polls one fd for `events` in slices; DDPC_OK when ready. */
static ddpc_status wait_fd_(int fd, short events, uint64_t deadline, const atomic_int *abort, const char *what) {
    for (;;) {
        if (abort && atomic_load(abort)) return DDPC_ERR_DIST;
        int ms = ddpc_ms_left(deadline, SLICE_MS);
        if (ms == 0) return DDPC_ERROR(DDPC_ERR_TIMEOUT, "timed out waiting for %s", what);
        struct pollfd p = {fd, events, 0};
        int r = poll(&p, 1, ms);
        if (r > 0) return DDPC_OK;
        if (r < 0 && errno != EINTR) return DDPC_ERROR(DDPC_ERR_SYS, "poll failed: %s", strerror(errno));
    }
}

ddpc_status ddpc_net_accept(int listen_fd, uint64_t deadline, const atomic_int *abort, int *fd) {
    int c;
    do {
        CHECK(wait_fd_(listen_fd, POLLIN, deadline, abort, "a peer to connect"));
        c = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
        /* A non-blocking listener another thread also accepts on: it may have taken the connection. */
    } while (c < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
    if (c < 0) return DDPC_ERROR(DDPC_ERR_SYS, "accept failed: %s", strerror(errno));
    set_nodelay_(c);
    *fd = c;
    return DDPC_OK;
}

ddpc_status ddpc_net_send(int fd, const void *buf, size_t len, uint64_t deadline, const atomic_int *abort,
                          const char *what) {
    return ddpc_net_sendrecv(fd, buf, len, -1, NULL, 0, deadline, abort, what);
}

ddpc_status ddpc_net_recv(int fd, void *buf, size_t len, uint64_t deadline, const atomic_int *abort,
                          const char *what) {
    return ddpc_net_sendrecv(-1, NULL, 0, fd, buf, len, deadline, abort, what);
}

ddpc_status ddpc_net_sendrecv(int sfd, const void *sbuf, size_t slen, int rfd, void *rbuf, size_t rlen,
                              uint64_t deadline, const atomic_int *abort, const char *what) {
    const char *s = sbuf;
    char *r = rbuf;
    while (slen > 0 || rlen > 0) {
        if (abort && atomic_load(abort)) return DDPC_ERR_DIST;
        struct pollfd p[2];
        int np = 0, si = -1, ri = -1;
        if (slen > 0) { si = np; p[np++] = (struct pollfd){sfd, POLLOUT, 0}; }
        if (rlen > 0) { ri = np; p[np++] = (struct pollfd){rfd, POLLIN, 0}; }
        int ms = ddpc_ms_left(deadline, SLICE_MS);
        if (ms == 0) return DDPC_ERROR(DDPC_ERR_TIMEOUT, "timed out exchanging data with %s", what);
        int n = poll(p, (nfds_t)np, ms);
        if (n < 0) {
            if (errno == EINTR) continue;
            return DDPC_ERROR(DDPC_ERR_SYS, "poll failed: %s", strerror(errno));
        }
        if (si >= 0 && p[si].revents) {
            ssize_t k = send(sfd, s, slen, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (k < 0 && errno != EAGAIN && errno != EINTR)
                return DDPC_ERROR(DDPC_ERR_DIST, "connection to %s lost while sending: %s", what, strerror(errno));
            if (k > 0) { s += k; slen -= (size_t)k; }
        }
        if (ri >= 0 && p[ri].revents) {
            ssize_t k = recv(rfd, r, rlen, MSG_DONTWAIT);
            if (k == 0) return DDPC_ERROR(DDPC_ERR_DIST, "connection to %s closed (the peer exited, died or gave up on the collective)", what);
            if (k < 0 && errno != EAGAIN && errno != EINTR)
                return DDPC_ERROR(DDPC_ERR_DIST, "connection to %s lost while receiving: %s", what, strerror(errno));
            if (k > 0) { r += k; rlen -= (size_t)k; }
        }
    }
    return DDPC_OK;
}

void ddpc_host_id(char *out, size_t cap) {
    const char *env = getenv("DDPC_HOST_ID");
    if (env && env[0]) {
        snprintf(out, cap, "%s", env);
        return;
    }
    char host[256] = "", boot[64] = "";
    gethostname(host, sizeof host - 1);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(boot, sizeof boot, f)) boot[0] = '\0';
        fclose(f);
        boot[strcspn(boot, "\n")] = '\0';
    }
    snprintf(out, cap, "%s/%s", host, boot);
}

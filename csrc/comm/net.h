/* Sockets with deadlines: listen, connect with retry, and full-buffer send and
 * receive that give up at a deadline or when an abort flag is raised.
 *
 * Every wait in the communicator is bounded, so these helpers never block
 * without a deadline: they poll in short slices, checking the abort flag (set
 * when a peer is known to be dead) between slices. */
#ifndef DDPC_COMM_NET_H
#define DDPC_COMM_NET_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"

#define DDPC_NO_DEADLINE UINT64_MAX

/* A deadline `seconds` from now on ddpc_now_ns's clock (seconds < 0 means
 * no deadline). */
uint64_t ddpc_deadline_after(double seconds);
/* Milliseconds left until `deadline` (0 when passed), capped at `cap_ms`. */
int ddpc_ms_left(uint64_t deadline, int cap_ms);

/* Listening TCP socket on host:port ("" or NULL host: all interfaces; port 0:
 * any free port, returned in *bound_port). */
ddpc_status ddpc_net_listen(const char *host, int port, int *fd, int *bound_port);
/* Connects to host:port, retrying refused or unreachable attempts until the
 * deadline. The socket is blocking with TCP_NODELAY. */
ddpc_status ddpc_net_connect(const char *host, int port, uint64_t deadline, int *fd);
/* Accepts one connection before the deadline. */
ddpc_status ddpc_net_accept(int listen_fd, uint64_t deadline, const atomic_int *abort, int *fd);

/* TCP keepalive probing after `idle_s` seconds of silence, every `interval_s`,
 * `count` times: a host that vanishes without closing its sockets (power
 * loss, a cut link) is noticed within idle_s + interval_s * count seconds. */
void ddpc_net_keepalive(int fd, int idle_s, int interval_s, int count);

/* Send or receive exactly `len` bytes. `what` names the peer in errors. A
 * closed connection is DDPC_ERR_DIST; the deadline is DDPC_ERR_TIMEOUT; a
 * raised abort flag returns DDPC_ERR_DIST without recording a message (the
 * caller reports the cause it knows). */
ddpc_status ddpc_net_send(int fd, const void *buf, size_t len, uint64_t deadline, const atomic_int *abort,
                          const char *what);
ddpc_status ddpc_net_recv(int fd, void *buf, size_t len, uint64_t deadline, const atomic_int *abort,
                          const char *what);
/* Sends `slen` bytes on `sfd` while receiving `rlen` bytes from `rfd`, so two
 * neighbours in a ring never wait on each other's full socket buffers. */
ddpc_status ddpc_net_sendrecv(int sfd, const void *sbuf, size_t slen, int rfd, void *rbuf, size_t rlen,
                              uint64_t deadline, const atomic_int *abort, const char *what);

/* Text form of this host's identity: DDPC_HOST_ID when set, else hostname and
 * boot id, so two containers sharing a hostname are still told apart. */
void ddpc_host_id(char *out, size_t cap);

#endif

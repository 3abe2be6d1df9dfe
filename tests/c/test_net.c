/* Unit tests of the socket helpers (net.c, included for its static
 * functions): a loopback socket that connected to itself is told apart from a
 * real connection, and a connect with nothing listening ends at its deadline.
 * Built with AddressSanitizer by tests/test_c_units.py. */
#include <arpa/inet.h>

#include "check.h"

#include "comm/net.c"

/* A socket bound to a loopback port and connected to that same port: what a
 * retrying client can get, by chance, when nothing listens there. */
static void test_self_connect_is_detected_(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    EXPECT(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &l) == 0);
    EXPECT(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "self-connect failed: %s", strerror(errno));
    EXPECT(connected_to_itself_(fd));
    close(fd);
}

static void test_real_connection_is_not_(void) {
    int lfd = -1, port = 0, c = -1, s = -1;
    EXPECT(ddpc_net_listen("127.0.0.1", 0, &lfd, &port) == DDPC_OK && port > 0);
    EXPECT(ddpc_net_connect("127.0.0.1", port, ddpc_deadline_after(5), &c) == DDPC_OK);
    EXPECT(ddpc_net_accept(lfd, ddpc_deadline_after(5), NULL, &s) == DDPC_OK);
    EXPECT(!connected_to_itself_(c) && !connected_to_itself_(s));
    close(c);
    close(s);
    close(lfd);
}

/* A port that was just listened on and closed: nothing listens there, and the
 * connect keeps retrying (never succeeding by meeting itself) until its deadline. */
static void test_connect_without_listener_times_out_(void) {
    int lfd = -1, port = 0, c = -1;
    EXPECT(ddpc_net_listen("127.0.0.1", 0, &lfd, &port) == DDPC_OK);
    close(lfd);
    ddpc_status st = ddpc_net_connect("127.0.0.1", port, ddpc_deadline_after(0.3), &c);
    EXPECT(st == DDPC_ERR_TIMEOUT, "connect to a closed port gave %d: %s", (int)st, ddpc_last_error());
    ddpc_clear_error();
}

int main(void) {
    test_self_connect_is_detected_();
    test_real_connection_is_not_();
    test_connect_without_listener_times_out_();
    return check_finish("net");
}

/*
 * liveness.c - the ring of TCP connections that tells a rank's death from
 * its end (liveness.h).
 *
 * Two connections per rank: `right`, which it opened to rank + 1, and
 * `left`, which it accepted from rank - 1.  Each carries one hello from the
 * side that connected, then nothing but, at most, one goodbye byte from
 * either side.  A read that gives end-of-file (or an error) before a
 * goodbye is a lost neighbour.
 */
#include "parallel/liveness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#define HELLO_MAGIC "FTLV"
#define HELLO_VERSION 1
#define HELLO_LEN 20 /* magic 4, version 4, token 8, rank 4 (little-endian) */
#define BYE_BYTE 'E'
#define MAX_ADDRS 8

enum { SIDE_RIGHT = 0, SIDE_LEFT = 1 };

static struct {
    int listen_fd;
    int fd[2];             /* -1: none */
    int peer[2];           /* the rank at each side */
    atomic_int done[2];    /* 1: said goodbye, or reported lost */
    const char *how;
    pid_t owner;           /* the process that formed the ring */
    int atexit_set;
} lv = {.listen_fd = -1, .fd = {-1, -1}, .peer = {-1, -1}, .how = ""};

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* err: "liveness: <what>: <errno's text>" (e 0: no errno). */
static int fail(char *err, size_t cap, const char *what, int e)
{
    snprintf(err, cap, "liveness: %s%s%s", what, e ? ": " : "", e ? strerror(e) : "");
    return LIVENESS_EFAIL;
}

int liveness_listen(liveness_card_t *card, char *err, size_t cap)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t len = sizeof sa;
    card->text[0] = '\0';
    if (lv.listen_fd >= 0)
        return fail(err, cap, "already listening", 0);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return fail(err, cap, "socket", errno);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 8) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        int e = errno;
        close(fd);
        return fail(err, cap, "cannot listen", e);
    }
    struct utsname u;
    if (uname(&u) != 0)
        snprintf(u.nodename, sizeof u.nodename, "?");
    int n = snprintf(card->text, sizeof card->text, "%.64s %u ", u.nodename,
                     (unsigned)ntohs(sa.sin_port));
    /* The node's IPv4 addresses that are up, loopback left out. */
    struct ifaddrs *ifs = NULL, *i;
    int k = 0;
    if (getifaddrs(&ifs) == 0) {
        for (i = ifs; i && k < MAX_ADDRS; i = i->ifa_next) {
            if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) ||
                (i->ifa_flags & IFF_LOOPBACK))
                continue;
            char ip[INET_ADDRSTRLEN];
            if (!inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, ip, sizeof ip))
                continue;
            if (n + (int)strlen(ip) + 2 >= (int)sizeof card->text)
                break;
            n += snprintf(card->text + n, sizeof card->text - (size_t)n, "%s%s", k ? "," : "", ip);
            k++;
        }
        freeifaddrs(ifs);
    }
    if (k == 0)
        snprintf(card->text + n, sizeof card->text - (size_t)n, "127.0.0.1");
    lv.listen_fd = fd;
    return LIVENESS_OK;
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void hello(unsigned char *h, uint64_t token, int rank)
{
    memcpy(h, HELLO_MAGIC, 4);
    put32(h + 4, HELLO_VERSION);
    put32(h + 8, (uint32_t)token);
    put32(h + 12, (uint32_t)(token >> 32));
    put32(h + 16, (uint32_t)rank);
}

/* Wait until fd is ready for events, at most until the deadline. */
static int wait_fd(int fd, short events, double deadline)
{
    for (;;) {
        double left = deadline - mono_s();
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int rc = poll(&p, 1, (int)(left * 1000) + 1);
        if (rc > 0)
            return 1;
        if (rc < 0 && errno != EINTR)
            return 0;
    }
}

/* Connect to ip:port within the deadline.  @return the socket, or -1. */
static int connect_to(const char *ip, unsigned port, double deadline)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, ip, &sa.sin_addr) != 1)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
        return fd;
    int e = 0;
    socklen_t el = sizeof e;
    if (errno == EINPROGRESS && wait_fd(fd, POLLOUT, deadline) &&
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) == 0 && e == 0)
        return fd;
    close(fd);
    return -1;
}

/* Write all of buf (a non-blocking socket) within the deadline. */
static int send_all(int fd, const unsigned char *buf, size_t len, double deadline)
{
    while (len > 0) {
        ssize_t w = send(fd, buf, len, MSG_NOSIGNAL);
        if (w > 0) {
            buf += w;
            len -= (size_t)w;
        } else if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (!wait_fd(fd, POLLOUT, deadline))
                return -1;
        } else {
            return -1;
        }
    }
    return 0;
}

/* Read a hello from fd within the deadline: 1 when it is want's bytes. */
static int hello_is(int fd, const unsigned char *want, double deadline)
{
    unsigned char got[HELLO_LEN];
    size_t have = 0;
    while (have < sizeof got && wait_fd(fd, POLLIN, deadline)) {
        ssize_t r = recv(fd, got + have, sizeof got - have, 0);
        if (r <= 0 && !(r < 0 && (errno == EAGAIN || errno == EINTR)))
            break;
        if (r > 0)
            have += (size_t)r;
    }
    return have == sizeof got && memcmp(got, want, sizeof got) == 0;
}

/* Open the connection to the right neighbour from its card and say hello
 * (its answer is read once this rank has answered its own left neighbour:
 * every rank connects first, then accepts, then reads, so none waits on
 * another in a circle). */
static int open_right(const char *card, uint64_t token, int rank, double deadline)
{
    char node[80], ips[LIVENESS_CARD_MAX];
    unsigned port;
    struct utsname u;
    if (sscanf(card, "%79s %u %255s", node, &port, ips) != 3 || port == 0 || port > 65535)
        return -1;
    char list[LIVENESS_CARD_MAX + 16] = "";
    if (uname(&u) == 0 && strcmp(u.nodename, node) == 0)
        snprintf(list, sizeof list, "127.0.0.1,");
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s", ips);
    unsigned char h[HELLO_LEN];
    hello(h, token, rank);
    int fd = -1;
    for (char *save = NULL, *ip = strtok_r(list, ",", &save); ip && fd < 0;
         ip = strtok_r(NULL, ",", &save)) {
        double each = mono_s() + 2.0;
        fd = connect_to(ip, port, each < deadline ? each : deadline);
    }
    if (fd >= 0 && send_all(fd, h, sizeof h, deadline) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Accept the left neighbour's connection: the first with its hello,
 * answered with this rank's. */
static int accept_left(int rank, int left, uint64_t token, double deadline)
{
    unsigned char want[HELLO_LEN], mine[HELLO_LEN];
    hello(want, token, left);
    hello(mine, token, rank);
    while (wait_fd(lv.listen_fd, POLLIN, deadline)) {
        int fd = accept4(lv.listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            continue;
        if (hello_is(fd, want, deadline) && send_all(fd, mine, sizeof mine, deadline) == 0)
            return fd;
        close(fd); /* not our neighbour's hello: someone else's connection */
    }
    return -1;
}

static void keepalive(int fd)
{
    int on = 1, idle = 5, intvl = 2, cnt = (LIVENESS_KEEPALIVE_S - 5) / 2;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
}

static void at_exit_bye(void)
{
    liveness_bye();
}

int liveness_connect(int rank, int size, const liveness_card_t *cards, uint64_t token,
                     double timeout_s, char *err, size_t cap)
{
    int rc = LIVENESS_OK;
    if (size > 1 && lv.listen_fd >= 0) {
        double deadline = mono_s() + timeout_s;
        int right = (rank + 1) % size, left = (rank + size - 1) % size;
        unsigned char answer[HELLO_LEN];
        hello(answer, token, right);
        int r = open_right(cards[right].text, token, rank, deadline);
        int l = r >= 0 ? accept_left(rank, left, token, deadline) : -1;
        int heard = l >= 0 && hello_is(r, answer, deadline);
        if (!heard) {
            if (r < 0)
                snprintf(err, cap, "liveness: cannot reach rank %d at \"%.120s\" within %.0f s",
                         right, cards[right].text, timeout_s);
            else if (l < 0)
                snprintf(err, cap, "liveness: rank %d did not connect within %.0f s", left,
                         timeout_s);
            else
                snprintf(err, cap, "liveness: rank %d at \"%.120s\" did not answer as rank %d "
                         "of this job within %.0f s", right, cards[right].text, right, timeout_s);
            rc = LIVENESS_EFAIL;
            /* A neighbour whose side of the ring formed must not take this
             * rank's giving up for a death: a goodbye before each close. */
            static const char bye = BYE_BYTE;
            if (r >= 0) {
                (void)send(r, &bye, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
                close(r);
            }
            if (l >= 0) {
                (void)send(l, &bye, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
                close(l);
            }
        } else {
            keepalive(r);
            keepalive(l);
            lv.fd[SIDE_RIGHT] = r, lv.peer[SIDE_RIGHT] = right;
            lv.fd[SIDE_LEFT] = l, lv.peer[SIDE_LEFT] = left;
            atomic_store(&lv.done[SIDE_RIGHT], 0);
            atomic_store(&lv.done[SIDE_LEFT], 0);
            lv.owner = getpid();
            if (!lv.atexit_set && atexit(at_exit_bye) == 0)
                lv.atexit_set = 1;
        }
    }
    if (lv.listen_fd >= 0)
        close(lv.listen_fd);
    lv.listen_fd = -1;
    return rc;
}

int liveness_lost(void)
{
    for (int s = 0; s < 2; s++) {
        if (lv.fd[s] < 0 || atomic_load(&lv.done[s]))
            continue;
        unsigned char buf[64];
        ssize_t r = recv(lv.fd[s], buf, sizeof buf, MSG_DONTWAIT);
        if (r > 0) {
            if (memchr(buf, BYE_BYTE, (size_t)r))
                atomic_store(&lv.done[s], 1);
            continue;
        }
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            continue;
        lv.how = r == 0                ? "its connection closed without a goodbye"
                 : errno == ETIMEDOUT  ? "its node stopped answering TCP keep-alive"
                 : errno == ECONNRESET ? "its connection was reset"
                                       : "its connection failed";
        atomic_store(&lv.done[s], 1);
        return lv.peer[s];
    }
    return -1;
}

const char *liveness_how(void)
{
    return lv.how;
}

void liveness_bye(void)
{
    if (lv.owner == 0 || getpid() != lv.owner)
        return;
    static const char bye = BYE_BYTE;
    for (int s = 0; s < 2; s++)
        if (lv.fd[s] >= 0)
            (void)send(lv.fd[s], &bye, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
}

void liveness_close(void)
{
    liveness_bye();
    if (lv.listen_fd >= 0)
        close(lv.listen_fd);
    lv.listen_fd = -1;
    for (int s = 0; s < 2; s++) {
        if (lv.fd[s] >= 0)
            close(lv.fd[s]);
        lv.fd[s] = -1;
    }
    lv.owner = 0;
}

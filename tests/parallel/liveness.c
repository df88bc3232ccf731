/*
 * liveness.c - the liveness ring (src/parallel/liveness.h) tells a rank's
 * death from its end, at once, and forms only between ranks of one job.
 *
 * Each "rank" is a forked process; the parent hands the cards around
 * through pipes (as the allgather does) and reads each rank's verdict
 * back: "lost R MS HOW" (R lost after MS ms of watching) or "none".
 *   1. 3 ranks, rank 1 SIGKILLed: ranks 0 and 2 both name rank 1, within
 *      0.5 s, "closed without a goodbye".
 *   2. 3 ranks, rank 1 calls exit(0): no one is named (the goodbye).
 *   3. 2 ranks, rank 1 forks a child that exits (its atexit goodbye must
 *      not count: not the ring's process), then is SIGKILLed: named.
 *   4. Two "jobs" of another token: the ring does not form; both fail
 *      within the limit, naming the rank that did not connect.
 *   5. A card whose port nobody listens on: connect fails within the
 *      limit, naming the rank and its card.
 *   6. A card that leads to a process of no ring (it accepts and never
 *      answers): the ring does not form, said; nothing is watched.
 *   7. The same among 3 ranks: the ring forms on one rank only, and the
 *      ranks that gave up are not taken for dead by it.
 */
#include "parallel/liveness.h"
#include "tap.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXR 4

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms)
{
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

typedef enum { ACT_WATCH, ACT_KILL, ACT_EXIT, ACT_FORK_KILL } act_t;

/* What a rank sends up: its rank and card (the pipe's writes of this size
 * are atomic). */
typedef struct {
    int rank;
    liveness_card_t card;
} up_t;

/* One rank: listen, send its card up, take every card, connect (token),
 * then act.  Writes its verdict line to out. */
static void rank_main(int rank, int n, uint64_t token, act_t act, int up, int down, int out,
                      double connect_s)
{
    up_t me = {.rank = rank};
    liveness_card_t cards[MAXR];
    char err[512] = "", line[700];
    if (liveness_listen(&me.card, err, sizeof err) != LIVENESS_OK) {
        snprintf(line, sizeof line, "listen-failed %s\n", err);
        (void)!write(out, line, strlen(line));
        _exit(1);
    }
    (void)!write(up, &me, sizeof me);
    if (read(down, cards, sizeof cards[0] * (size_t)n) != (ssize_t)(sizeof cards[0] * (size_t)n))
        _exit(1);
    double t0 = mono();
    if (liveness_connect(rank, n, cards, token, connect_s, err, sizeof err) != LIVENESS_OK) {
        snprintf(line, sizeof line, "connect-failed %.0f %s\n", (mono() - t0) * 1000, err);
        (void)!write(out, line, strlen(line));
        _exit(0);
    }
    if (act == ACT_KILL || act == ACT_FORK_KILL) {
        if (act == ACT_FORK_KILL) {
            pid_t c = fork();
            if (c == 0)
                exit(0); /* atexit: liveness_bye, which must do nothing here */
            waitpid(c, NULL, 0);
        }
        sleep_ms(300);
        raise(SIGKILL);
    }
    if (act == ACT_EXIT) {
        sleep_ms(300);
        exit(0);
    }
    /* Watch for 1.5 s, as the watchdog does (every 10 ms here). */
    double start = mono();
    int lost = -1;
    while (mono() - start < 1.5 && (lost = liveness_lost()) < 0)
        sleep_ms(10);
    if (lost >= 0)
        snprintf(line, sizeof line, "lost %d %.0f %s\n", lost, (mono() - start) * 1000,
                 liveness_how());
    else
        snprintf(line, sizeof line, "none\n");
    (void)!write(out, line, strlen(line));
    liveness_close();
    _exit(0);
}

/* Run n ranks with the given acts and tokens; verdict[r] gets rank r's
 * line ("" for a rank that wrote none: it was killed or exited).  With
 * bad_port, the others are told that rank 1 listens on a port no one
 * listens on. */
static void ring(int n, const uint64_t *tokens, const act_t *acts, char verdict[][700],
                 int bad_port, double connect_s)
{
    int up[2], down[MAXR][2], out[MAXR][2];
    pid_t pid[MAXR];
    if (pipe(up))
        exit(99);
    for (int r = 0; r < n; r++) {
        if (pipe(down[r]) || pipe(out[r]))
            exit(99);
        pid[r] = fork();
        if (pid[r] == 0) {
            close(up[0]);
            close(out[r][0]);
            rank_main(r, n, tokens[r], acts[r], up[1], down[r][0], out[r][1], connect_s);
        }
        close(down[r][0]);
        close(out[r][1]);
    }
    close(up[1]);
    liveness_card_t cards[MAXR];
    for (int i = 0; i < n; i++) {
        up_t u;
        if (read(up[0], &u, sizeof u) != (ssize_t)sizeof u || u.rank < 0 || u.rank >= n)
            exit(98);
        cards[u.rank] = u.card;
    }
    close(up[0]);
    int stranger = -1;
    if (bad_port) {
        /* 1: a port no one listens on; 2: a stranger's, which accepts (the
         * kernel does, from its backlog) and never answers. */
        unsigned use = 1;
        if (bad_port == 2) {
            struct sockaddr_in sa = {.sin_family = AF_INET,
                                     .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
            socklen_t len = sizeof sa;
            stranger = socket(AF_INET, SOCK_STREAM, 0);
            if (stranger < 0 || bind(stranger, (struct sockaddr *)&sa, sizeof sa) ||
                listen(stranger, 4) || getsockname(stranger, (struct sockaddr *)&sa, &len))
                exit(97);
            use = ntohs(sa.sin_port);
        }
        char node[64], ips[160];
        unsigned port;
        if (sscanf(cards[1].text, "%63s %u %159s", node, &port, ips) == 3)
            snprintf(cards[1].text, sizeof cards[1].text, "%s %u %s", node, use, ips);
    }
    for (int r = 0; r < n; r++) {
        (void)!write(down[r][1], cards, sizeof cards[0] * (size_t)n);
        close(down[r][1]);
    }
    for (int r = 0; r < n; r++) {
        ssize_t k = read(out[r][0], verdict[r], 699);
        verdict[r][k > 0 ? k : 0] = '\0';
        verdict[r][strcspn(verdict[r], "\n")] = '\0';
        close(out[r][0]);
        waitpid(pid[r], NULL, 0);
    }
    if (stranger >= 0)
        close(stranger);
}

/* "lost 1 MS HOW" with MS under limit_ms and HOW starting with how. */
static int names(const char *v, int rank, int limit_ms, const char *how)
{
    int r, ms;
    char text[600];
    if (sscanf(v, "lost %d %d %599[^\n]", &r, &ms, text) != 3)
        return 0;
    return r == rank && ms < limit_ms && strncmp(text, how, strlen(how)) == 0;
}

int main(void)
{
    plan(12);
    char v[MAXR][700];
    const uint64_t same[MAXR] = {42, 42, 42, 42};

    /* 1. A death. */
    ring(3, same, (act_t[]){ACT_WATCH, ACT_KILL, ACT_WATCH}, v, 0, 10);
    const char *closed = "its connection closed without a goodbye";
    ok(names(v[0], 1, 800, closed), "3 ranks, rank 1 SIGKILLed: rank 0 names it within 0.8 s (%s)",
       v[0]);
    ok(names(v[2], 1, 800, closed), "  and so does rank 2 (%s)", v[2]);

    /* 2. An end: the goodbye. */
    ring(3, same, (act_t[]){ACT_WATCH, ACT_EXIT, ACT_WATCH}, v, 0, 10);
    ok(strcmp(v[0], "none") == 0 && strcmp(v[2], "none") == 0,
       "3 ranks, rank 1 exits: no one is named (%s / %s)", v[0], v[2]);

    /* 3. A forked child's exit is not the rank's goodbye. */
    ring(2, same, (act_t[]){ACT_WATCH, ACT_FORK_KILL}, v, 0, 10);
    ok(names(v[0], 1, 800, closed),
       "2 ranks, rank 1's forked child exits, then rank 1 is SIGKILLed: named (%s)", v[0]);

    /* 4. Another job's token: no ring, within the limit, said. */
    const uint64_t two_jobs[MAXR] = {42, 43};
    ring(2, two_jobs, (act_t[]){ACT_WATCH, ACT_WATCH}, v, 0, 1.0);
    int ms0 = -1, ms1 = -1;
    sscanf(v[0], "connect-failed %d", &ms0);
    sscanf(v[1], "connect-failed %d", &ms1);
    ok(ms0 >= 0 && ms1 >= 0 && strstr(v[0], "rank 1 did not connect within 1 s") &&
           strstr(v[1], "rank 0 did not connect within 1 s"),
       "2 ranks of two tokens: the ring does not form, each names the rank that did not "
       "connect (%s / %s)", v[0], v[1]);
    ok(ms0 >= 0 && ms0 < 1500 && ms1 >= 0 && ms1 < 1500,
       "  within the 1 s limit (%d ms, %d ms)", ms0, ms1);

    /* 5. A card whose port no one listens on. */
    ring(2, same, (act_t[]){ACT_WATCH, ACT_WATCH}, v, 1, 1.0);
    ok(strncmp(v[0], "connect-failed", 14) == 0 && strstr(v[0], "cannot reach rank 1 at \"") &&
           strstr(v[0], " 1 "),
       "a card with a dead port: rank 0 cannot reach rank 1, naming its card (%s)", v[0]);
    ms0 = -1;
    sscanf(v[0], "connect-failed %d", &ms0);
    ok(ms0 >= 0 && ms0 < 1500, "  within the limit (%d ms)", ms0);
    ok(strncmp(v[1], "connect-failed", 14) == 0 && strstr(v[1], "rank 0"),
       "  and rank 1 fails too, naming rank 0 (%s)", v[1]);

    /* 6. A stranger at the card's address: never watched. */
    ring(2, same, (act_t[]){ACT_WATCH, ACT_WATCH}, v, 2, 1.0);
    ok(strncmp(v[0], "connect-failed", 14) == 0 &&
           strstr(v[0], "did not answer as rank 1 of this job within 1 s"),
       "a card that leads to another process (it accepts, never answers): no ring, said (%s)",
       v[0]);
    ok(strncmp(v[1], "connect-failed", 14) == 0 && strstr(v[1], "rank 0 did not connect"),
       "  and rank 1 says rank 0 did not connect (%s)", v[1]);
    /* 7. A ring that forms on one rank only: rank 1's card leads to a
     * stranger, so ranks 0 and 1 give up; rank 2 (connected to both) must
     * not take their giving up for deaths. */
    ring(3, same, (act_t[]){ACT_WATCH, ACT_WATCH, ACT_WATCH}, v, 2, 1.0);
    ok(strncmp(v[0], "connect-failed", 14) == 0 && strncmp(v[1], "connect-failed", 14) == 0 &&
           strcmp(v[2], "none") == 0,
       "3 ranks, the ring formed on rank 2 alone: the others gave up with a goodbye, no one "
       "is named (%s / %s / %s)", v[0], v[1], v[2]);
    return 0;
}

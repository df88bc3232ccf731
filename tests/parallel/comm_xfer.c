/*
 * comm_xfer.c - the nonblocking exchanges (comm_xfer_*), which carry the
 * node-local tier's partner copies over several steps: posted without
 * blocking, moved on by tests with a time budget, ended by a close or an
 * abandon.
 *
 * Run by prove as a plain program, it starts itself again on three ranks
 * under mpirun (with the one-machine settings the shell tests use); rank 0
 * prints the TAP.  Checks: a ring exchange of a few MiB, of sizes that are
 * no multiple of anything, arrives intact; so does one with two sources on
 * one rank and none on another; a test with a small budget says not done
 * while a peer has not posted yet, and done once it has; a zero-byte
 * exchange and an empty one are done at once; bad arguments are refused
 * with COMM_EINVAL and a message, nothing posted; an exchange abandoned
 * unfinished says so (its buffers must stay) and its channel posts no more;
 * a message of several pieces lands from its start, as comm_xfer_arrived
 * says, and nothing of it before its sender posted, whether the sender
 * posts its pieces all at once or a window at a time.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "parallel/comm.h"
#include "parallel/world.h"
#include "mpi_launch.h"
#include "tap.h"

#define RANKS 3
#define LATE_S 0.5
#define BUDGET_S 0.02

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* The bytes rank r sends in round k: a few MiB, odd. */
static uint64_t bytes_of(int r, int k)
{
    return ((uint64_t)(2 + r) << 20) + 12345u * (unsigned)(r + 1) + 7u * (unsigned)k;
}

static unsigned char byte_at(int r, int k, uint64_t i)
{
    return (unsigned char)(i * 2654435761u + (unsigned)r * 97u + (unsigned)k * 13u + (i >> 20));
}

static unsigned char *filled(int r, int k)
{
    uint64_t n = bytes_of(r, k);
    unsigned char *p = malloc((size_t)n);
    for (uint64_t i = 0; p && i < n; i++)
        p[i] = byte_at(r, k, i);
    return p;
}

/* 1 when buf holds what rank r sent in round k. */
static int intact(const unsigned char *buf, int r, int k)
{
    for (uint64_t i = 0; i < bytes_of(r, k); i++)
        if (buf[i] != byte_at(r, k, i))
            return 0;
    return 1;
}

/* Test until done (at most 30 s).  @return COMM_OK, or an error. */
static int test_until_done(comm_xfer_t *x)
{
    int done = 0, rc = COMM_OK;
    double t0 = now_s();
    while (rc == COMM_OK && !done && now_s() - t0 < 30)
        rc = comm_xfer_test(x, BUDGET_S, &done);
    return rc == COMM_OK && !done ? COMM_EFAIL : rc;
}

/* Every rank's ok: 1 on every rank when it is 1 on all. */
static int all_ok(comm_t *c, int ok_here)
{
    return comm_any_failed(c, !ok_here) == 0;
}

int main(int argc, char **argv)
{
    if (!mpi_launched()) {
        /* Not under a launcher: start again on three ranks. */
        mpi_relaunch(argv, RANKS);
        char why[256];
        snprintf(why, sizeof why, "cannot run timeout/mpirun: %s", strerror(errno));
        skip_all(why);
    }

    world_t w;
    comm_t *c = mpi_test_start(&w, &argc, &argv, RANKS);
    int rank = comm_rank(c);
    int next = (rank + 1) % RANKS, prev = (rank + RANKS - 1) % RANKS;

    comm_xfer_t *x = NULL;
    int rc = comm_xfer_open(c, &x);
    ok(all_ok(c, rc == COMM_OK && x), "comm_xfer_open on %d ranks (rank 0: %s)", RANKS,
       comm_strerror(rc));

    /* 1. A ring: each rank sends to the next and receives from the one
     *    before, a few MiB of odd size. */
    unsigned char *send = filled(rank, 1);
    void *recv = malloc((size_t)bytes_of(prev, 1));
    uint64_t len = bytes_of(prev, 1);
    rc = comm_xfer_post(x, send, bytes_of(rank, 1), next, 1, &prev, &recv, &len);
    int prc = rc;
    if (rc == COMM_OK)
        rc = test_until_done(x);
    ok(all_ok(c, prc == COMM_OK && rc == COMM_OK),
       "a ring exchange of %.2f MiB (rank 0's) posts and completes",
       (double)bytes_of(0, 1) / (1 << 20));
    ok(all_ok(c, rc == COMM_OK && intact(recv, prev, 1)),
       "every rank's bytes arrived intact (%llu, %llu, %llu bytes)",
       (unsigned long long)bytes_of(0, 1), (unsigned long long)bytes_of(1, 1),
       (unsigned long long)bytes_of(2, 1));
    int done = 0;
    rc = comm_xfer_test(x, 0, &done);
    ok(rc == COMM_OK && done, "a test after completion is done at once");
    free(send);
    free(recv);

    /* 2. Two sources on rank 0, none on rank 2: 1 -> 0, 2 -> 0, 0 -> 1. */
    send = filled(rank, 2);
    int dest = rank == 0 ? 1 : 0, nsrc = rank == 0 ? 2 : rank == 1 ? 1 : 0;
    int srcs[2] = {rank == 0 ? 1 : 0, 2};
    void *bufs[2] = {NULL, NULL};
    uint64_t lens[2] = {0, 0};
    for (int i = 0; i < nsrc; i++) {
        lens[i] = bytes_of(srcs[i], 2);
        bufs[i] = malloc((size_t)lens[i]);
    }
    rc = comm_xfer_reserve(x, bytes_of(rank, 2), dest, nsrc, lens);
    if (rc == COMM_OK)
        rc = comm_xfer_post(x, send, bytes_of(rank, 2), dest, nsrc, srcs, bufs, lens);
    if (rc == COMM_OK)
        rc = test_until_done(x);
    int good = rc == COMM_OK;
    for (int i = 0; i < nsrc && good; i++)
        good = intact(bufs[i], srcs[i], 2);
    ok(all_ok(c, good), "two sources into one rank, none into another: intact");
    uint64_t got[2] = {0, 0};
    for (int i = 0; i < nsrc && good; i++)
        good = comm_xfer_arrived(x, i, &got[i]) == COMM_OK && got[i] == lens[i];
    ok(all_ok(c, good), "  comm_xfer_arrived says each source's message landed whole "
       "(rank 0: %llu and %llu bytes)", (unsigned long long)got[0],
       (unsigned long long)got[1]);
    for (int i = 0; i < nsrc; i++)
        free(bufs[i]);
    free(send);

    /* 3. A test with a small budget: rank 2 posts LATE_S late, so rank 0,
     *    which receives from it, is not done at first; it is once rank 2
     *    has posted and every rank tests. */
    send = filled(rank, 3);
    recv = malloc((size_t)bytes_of(prev, 3));
    len = bytes_of(prev, 3);
    rc = comm_barrier(c);
    double t0 = now_s(), first = 0;
    int early_done = -1, late = COMM_OK;
    if (rank == 2)
        sleep_s(LATE_S);
    if (rc == COMM_OK)
        rc = comm_xfer_post(x, send, bytes_of(rank, 3), next, 1, &prev, &recv, &len);
    if (rc == COMM_OK && rank == 0) {
        double t1 = now_s();
        rc = comm_xfer_test(x, BUDGET_S, &early_done);
        first = now_s() - t1;
    }
    if (rc == COMM_OK)
        late = test_until_done(x);
    double took = now_s() - t0;
    ok(rank != 0 || (rc == COMM_OK && early_done == 0),
       "a test with a %.2f s budget before the source has posted: not done", BUDGET_S);
    ok(rank != 0 || (first >= BUDGET_S && first < BUDGET_S + 0.3),
       "and it took about its budget (%.3f s)", first);
    ok(all_ok(c, rc == COMM_OK && late == COMM_OK && intact(recv, prev, 3)),
       "done later, once the late rank posted, intact (rank 0 after %.3f s)", took);
    ok(rank != 0 || took >= LATE_S * 0.8, "rank 0 was done only after the late rank came");
    free(send);
    free(recv);

    /* 4. Zero bytes: a ring of empty messages, and an exchange of nothing. */
    char dummy = 0;
    void *dbuf = &dummy;
    uint64_t zero = 0;
    rc = comm_xfer_post(x, &dummy, 0, next, 1, &prev, &dbuf, &zero);
    done = 0;
    if (rc == COMM_OK)
        rc = comm_xfer_test(x, 0, &done);
    ok(all_ok(c, rc == COMM_OK && done), "a zero-byte ring exchange is done at once");
    rc = comm_xfer_post(x, NULL, 0, -1, 0, NULL, NULL, NULL);
    done = 0;
    if (rc == COMM_OK)
        rc = comm_xfer_test(x, 0, &done);
    ok(all_ok(c, rc == COMM_OK && done), "an exchange of nothing (no dest, no source) too");
    ok(comm_xfer_abandon(x) == 0, "abandoning a completed exchange: nothing left in flight");

    /* 5. Bad arguments: refused, with a message, nothing posted (a test is
     *    then done at once: no piece is in flight). */
    char buf[16];
    void *bp = buf, *np = NULL;
    uint64_t n16 = sizeof buf;
    int neg = -1, big = RANKS;
    static const char *what[] = {
        "a negative source rank", "a source rank past the last",
        "a destination rank below -1", "a destination rank past the last",
        "a NULL receive buffer of 16 bytes", "a NULL send buffer of 16 bytes",
    };
    for (int i = 0; i < 6; i++) {
        switch (i) {
        case 0: rc = comm_xfer_post(x, buf, 0, -1, 1, &neg, &bp, &n16); break;
        case 1: rc = comm_xfer_post(x, buf, 0, -1, 1, &big, &bp, &n16); break;
        case 2: rc = comm_xfer_post(x, buf, sizeof buf, -2, 0, NULL, NULL, NULL); break;
        case 3: rc = comm_xfer_post(x, buf, sizeof buf, RANKS, 0, NULL, NULL, NULL); break;
        case 4: rc = comm_xfer_post(x, NULL, 0, -1, 1, &prev, &np, &n16); break;
        default: rc = comm_xfer_post(x, NULL, sizeof buf, next, 0, NULL, NULL, NULL); break;
        }
        char msg[256];
        snprintf(msg, sizeof msg, "%s", comm_last_error());
        done = 0;
        int trc = comm_xfer_test(x, 0, &done);
        ok(rc == COMM_EINVAL && msg[0] && trc == COMM_OK && done,
           "%s: COMM_EINVAL ('%s'), nothing posted", what[i], msg);
    }

    /* 6. The channel still works after the refusals, and the communicator
     *    it came from is in step. */
    send = filled(rank, 6);
    recv = malloc((size_t)bytes_of(prev, 6));
    len = bytes_of(prev, 6);
    rc = comm_xfer_post(x, send, bytes_of(rank, 6), next, 1, &prev, &recv, &len);
    if (rc == COMM_OK)
        rc = test_until_done(x);
    ok(all_ok(c, rc == COMM_OK && intact(recv, prev, 6)),
       "a ring exchange after the refusals arrives intact");
    free(send);
    free(recv);
    int64_t v[2] = {rank + 1, 0}, all[2 * RANKS] = {0};
    rc = comm_allgather(c, v, all, sizeof v);
    ok(rc == COMM_OK && all[0] == 1 && all[2] == 2 && all[4] == 3,
       "an allgather on the trainer's communicator after it all sees every rank in order");

    /* 7. Abandoned unfinished: on a second channel rank 0 posts a receive
     *    from rank 1, which posts nothing yet; abandon says 1 (the buffer
     *    must stay: kept in `stuck_buf` for good, as the channel), and the
     *    channel posts nothing more.  Then rank 1 sends after all, so that
     *    no request is left waiting when MPI ends. */
    static comm_xfer_t *stuck;
    static char stuck_buf[64];
    rc = comm_xfer_open(c, &stuck);
    int opened = all_ok(c, rc == COMM_OK);
    ok(opened, "a second channel opens");
    if (opened && rank == 0) {
        void *sp = stuck_buf;
        uint64_t sn = sizeof stuck_buf;
        int from = 1;
        rc = comm_xfer_post(stuck, NULL, 0, -1, 1, &from, &sp, &sn);
        int left = comm_xfer_abandon(stuck);
        ok(rc == COMM_OK && left == 1, "abandoning a receive whose sender has not sent: 1 "
           "(its buffer must stay)");
        ok(comm_xfer_abandon(stuck) == 1, "and it stays so");
        rc = comm_xfer_post(stuck, NULL, 0, -1, 0, NULL, NULL, NULL);
        ok(rc == COMM_EINVAL, "the channel then posts nothing more ('%s')", comm_last_error());
        done = 1;
        rc = comm_xfer_test(stuck, 0, &done);
        ok(rc == COMM_EINVAL && !done, "nor tests ('%s')", comm_last_error());
        comm_xfer_close(stuck); /* leaves it as it is */
    }
    rc = comm_barrier(c);
    if (opened && rank == 1) {
        char msg[sizeof stuck_buf] = "late";
        rc = comm_xfer_post(stuck, msg, sizeof msg, 0, 0, NULL, NULL, NULL);
        if (rc == COMM_OK)
            rc = test_until_done(stuck);
        comm_xfer_close(stuck);
    } else if (opened && rank == 2) {
        comm_xfer_close(stuck);
    }
    rc = comm_barrier(c) == COMM_OK && rc == COMM_OK;
    ok(all_ok(c, rc) && (rank != 0 || strcmp(stuck_buf, "late") == 0),
       "the late send still lands in the abandoned buffer, which was kept");

    /* 8. A message of several pieces (18 MiB and odd: the pieces are 4
     *    MiB) lands from its start: rank 2 posts LATE_S late, so rank 0,
     *    which receives from it, has nothing of it at first; then every
     *    rank's comm_xfer_arrived, asked between tests, only grows, every
     *    byte it covers is final, and once done it is the whole message.
     *    Twice: every piece posted at once, then 2 at a time
     *    (comm_xfer_window: the senders post the next only as their tests
     *    see the oldest gone). */
    for (int win = 0; win <= 2; win += 2) {
        comm_xfer_window(x, win);
        const uint64_t msg = ((uint64_t)18 << 20) + 4321;
        unsigned char *bs = malloc((size_t)msg), *br = calloc(1, (size_t)msg);
        for (uint64_t i = 0; bs && i < msg; i++)
            bs[i] = byte_at(rank, 8, i);
        void *mp = br;
        uint64_t blen = msg, seen = 0, n = 0;
        int grows = 1, final = 1, between = 0, first_zero = 1;
        if (rank == 2)
            sleep_s(LATE_S);
        rc = bs && br ? comm_xfer_post(x, bs, msg, next, 1, &prev, &mp, &blen) : COMM_EFAIL;
        if (rc == COMM_OK && rank == 0)
            first_zero = comm_xfer_arrived(x, 0, &n) == COMM_OK && n == 0;
        done = 0;
        double m0 = now_s();
        while (rc == COMM_OK && !done && now_s() - m0 < 30) {
            rc = comm_xfer_test(x, 0.001, &done);
            if (rc == COMM_OK)
                rc = comm_xfer_arrived(x, 0, &n);
            if (rc != COMM_OK)
                break;
            grows &= n >= seen && n <= msg;
            for (uint64_t i = seen; i < n && final; i++)
                final = br[i] == byte_at(prev, 8, i);
            between += n > seen && n < msg;
            seen = n > seen ? n : seen;
        }
        ok(all_ok(c, rc == COMM_OK && done && seen == msg && grows && final),
           "a message of 18 MiB in pieces, %s: comm_xfer_arrived only grows, covers final "
           "bytes only, and ends at the whole message (rank 0 saw %d sizes between)",
           win ? "2 in flight" : "all posted at once", between);
        ok(all_ok(c, first_zero), "  nothing has landed before its sender posted");
        uint64_t none = 7;
        int bad1 = comm_xfer_arrived(x, 1, &none), bad2 = comm_xfer_arrived(x, -1, &n);
        ok(bad1 == COMM_EINVAL && bad2 == COMM_EINVAL && none == 0,
           "  a source the exchange does not have: COMM_EINVAL ('%s')", comm_last_error());
        free(bs);
        free(br);
    }
    comm_xfer_window(x, 0);

    comm_xfer_close(x);
    comm_xfer_close(NULL);
    ok(comm_threads_allowed() == 1, "MPI's thread level allows a helper thread");
    ok(comm_is_main_thread() == 1, "this is the thread that started MPI");

    comm_close(c);
    world_free(&w);
    return done_testing();
}

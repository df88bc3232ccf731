/*
 * comm_wait.c - comm_wait_all(), the barrier of the checkpoint commit: a rank
 * that arrives early must wait without keeping a core busy (on a node with
 * as many ranks as cores, a spinning rank that is done takes CPU from the
 * ranks still compressing their shards), and the wait must still end as soon
 * as the last rank arrives.
 *
 * Run by prove as a plain program, it starts itself again on two ranks under
 * mpirun (with the one-machine settings the shell tests use); rank 0 prints
 * the TAP.  Rank 1 arrives LATE_S seconds after rank 0; rank 0 measures its
 * own wall and CPU time in comm_wait_all(), and, for comparison, in
 * comm_barrier() (a blocking MPI barrier, which polls).  Also: a float MAX
 * reduction keeps a NaN from whichever rank has it.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "parallel/comm.h"
#include "parallel/world.h"
#include "mpi_launch.h"
#include "tap.h"

#define LATE_S 0.6

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* CPU seconds (user + system) of this process so far. */
static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Rank 1 arrives LATE_S late; rank 0 reports its wall and CPU time in wait. */
static int timed(comm_t *c, int (*wait)(comm_t *), double *wall, double *cpu)
{
    if (comm_barrier(c) != COMM_OK)
        return COMM_EFAIL;
    if (comm_rank(c) == 1)
        sleep_s(LATE_S);
    double w0 = now_s(), c0 = cpu_s();
    int rc = wait(c);
    *wall = now_s() - w0;
    *cpu = cpu_s() - c0;
    return rc;
}

int main(int argc, char **argv)
{
    if (!mpi_launched()) {
        /* Not under a launcher: start again on two ranks. */
        mpi_relaunch(argv, 2);
        char why[256];
        snprintf(why, sizeof why, "cannot run timeout/mpirun: %s", strerror(errno));
        skip_all(why);
    }

    world_t w;
    comm_t *c = mpi_test_start(&w, &argc, &argv, 2);
    int rank = comm_rank(c);

    double wall = 0, cpu = 0, bwall = 0, bcpu = 0;
    int rc = timed(c, comm_wait_all, &wall, &cpu);
    is_int(rc, COMM_OK, "comm_wait_all returns COMM_OK on 2 ranks");
    ok(rank != 0 || wall >= LATE_S * 0.8,
       "rank 0 waited for the late rank (%.3f s, rank 1 came %.1f s late)", wall, LATE_S);
    ok(rank != 0 || wall <= LATE_S + 0.5,
       "and the wait ended soon after it arrived (%.3f s)", wall);
    ok(rank != 0 || cpu < 0.25 * wall,
       "waiting took little CPU: %.3f s of CPU in %.3f s (under a quarter)", cpu, wall);

    rc = timed(c, comm_barrier, &bwall, &bcpu);
    is_int(rc, COMM_OK, "comm_barrier returns COMM_OK");
    if (rank == 0)
        diag("for comparison, a blocking MPI barrier: %.3f s of CPU in %.3f s", bcpu, bwall);

    /* The communicator is still in step: a collective after the waits. */
    int64_t v[2] = {rank + 1, 0};
    int64_t all[4] = {0, 0, 0, 0};
    rc = comm_allgather(c, v, all, sizeof v);
    ok(rc == COMM_OK && all[0] == 1 && all[2] == 2,
       "an allgather after the waits sees both ranks in order");

    /* Many short waits in a row (both ranks arrive together) stay correct. */
    int bad = 0;
    for (int i = 0; i < 200 && !bad; i++)
        bad = comm_wait_all(c) != COMM_OK;
    ok(!bad, "200 back-to-back waits succeed");

    /* MAX of floats: a NaN on any rank reaches every rank (the trainer's
     * divergence vote depends on it; MPI_MAX keeps it only on the last). */
    for (int r = 0; r < 2; r++) {
        double d[2] = {rank == r ? NAN : 1.0, (double)rank};
        float f[2] = {rank == r ? NAN : 1.0f, (float)rank};
        int rd = comm_allreduce(c, d, 2, COMM_F64, COMM_MAX);
        int rf = comm_allreduce(c, f, 2, COMM_F32, COMM_MAX);
        ok(rd == COMM_OK && d[0] != d[0] && d[1] == 1.0,
           "f64 MAX with a NaN on rank %d: NaN (%g), the other element 1 (%g)", r, d[0],
           d[1]);
        ok(rf == COMM_OK && f[0] != f[0] && f[1] == 1.0f,
           "f32 MAX with a NaN on rank %d: NaN (%g)", r, (double)f[0]);
    }

    comm_close(c);
    world_free(&w);
    return done_testing();
}

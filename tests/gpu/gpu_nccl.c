/*
 * gpu_nccl.c - the NCCL backend's failure paths on a real GPU (comm_nccl.c).
 *
 * Run by prove as a plain program: without NCCL in the build or without a
 * GPU it skips with the reason; else it starts itself again on two ranks
 * under mpirun (one GPU is enough: both ranks use GPU 0) with the failnccl
 * shim preloaded, and rank 0 speaks TAP.
 *
 *  1. ncclCommInitRankConfig fails on rank 1 (the shim, after a delay, so
 *     rank 0 is well inside its wait): rank 0's open fails within seconds,
 *     not after the 300 s timeout it was given, and its message names rank
 *     1; both ranks fail.
 *  2. No injected failure, two ranks on one GPU: whatever NCCL says of that
 *     (it refuses two ranks of one communicator on one GPU), both ranks
 *     agree on the outcome within seconds.
 *  3. One-rank communicators (each rank over MPI_COMM_SELF, GPU 0): open,
 *     allreduce and broadcast of device buffers (the identity, no NCCL
 *     call), a barrier, an allgather, and a close; a host buffer takes the
 *     MPI path.
 *  4. comm_abort on a healthy communicator (what the watchdog's thread does
 *     when a peer hangs) returns at once.
 */
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "parallel/comm.h"
#include "parallel/comm_nccl.h"
#include "parallel/device.h"
#include "gpu/gpu.h"
#include "parallel/world.h"
#include "mpi_launch.h"
#include "tap.h"

#if !defined(FTRAIN_NCCL)
int main(void)
{
    skip_all("built without NCCL (make CUDA=0, or no nccl.h)");
}
#else

#include <mpi.h>

/* The timeout each open is given: far above what a test may take. */
#define OPEN_TIMEOUT_S 300.0
/* How soon a failure must end every rank's open. */
#define FAST_S 30.0

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One open of a 2-rank NCCL communicator on GPU 0; rank 1's result and
 * message come to rank 0 over MPI. */
typedef struct {
    int rc[2];
    double seconds[2];
    char msg[2][256];
} open_result_t;

static void open_both(world_t *w, comm_t *ctl, open_result_t *res)
{
    comm_t *nc = NULL;
    comm_barrier(ctl);
    double t0 = now_s();
    int rc = comm_open_nccl(&nc, w, 0, NULL, OPEN_TIMEOUT_S);
    double dt = now_s() - t0;
    char msg[256];
    snprintf(msg, sizeof msg, "%s", rc == COMM_OK ? "ok" : comm_last_error());
    if (nc)
        comm_close(nc);
    struct {
        int rc;
        double seconds;
        char msg[256];
    } mine = {rc, dt, ""}, all[2];
    snprintf(mine.msg, sizeof mine.msg, "%s", msg);
    memset(all, 0, sizeof all);
    comm_allgather(ctl, &mine, all, sizeof mine);
    for (int r = 0; r < 2; r++) {
        res->rc[r] = all[r].rc;
        res->seconds[r] = all[r].seconds;
        snprintf(res->msg[r], sizeof res->msg[r], "%s", all[r].msg);
    }
}

/* 3 and 4: one-rank communicators on GPU 0. */
static void one_rank(world_t *w, int rank)
{
    world_t self = *w;
    MPI_Comm self_comm = MPI_COMM_SELF;
    self.mpi_world = &self_comm;
    self.rank = 0;
    self.size = 1;
    gpu_ctx_t *ctx = NULL;
    if (gpu_init(&ctx, 0) != GPU_OK) {
        ok(0, "gpu_init(0): %s", gpu_last_error());
        return;
    }
    comm_t *nc = NULL;
    int rc = comm_open_nccl(&nc, &self, 0, gpu_stream(ctx), OPEN_TIMEOUT_S);
    if (!ok(rc == COMM_OK, "rank %d: a one-rank NCCL communicator opens (%s)", rank,
            rc == COMM_OK ? "ok" : comm_last_error())) {
        gpu_close(ctx);
        return;
    }
    float host[4] = {1.5f, -2.0f, 3.25f, 0.0f}, back[8];
    float *dev = NULL, *dev2 = NULL;
    int grc = gpu_alloc(ctx, sizeof host, (void **)&dev);
    if (grc == GPU_OK)
        grc = gpu_alloc(ctx, 2 * sizeof host, (void **)&dev2);
    if (grc == GPU_OK)
        grc = gpu_upload(ctx, dev, host, sizeof host);
    ok(grc == GPU_OK, "device buffers (%s)", grc == GPU_OK ? "ok" : gpu_last_error());
    double t0 = now_s();
    rc = comm_allreduce(nc, dev, 4, COMM_F32, COMM_SUM);
    int rc2 = comm_bcast(nc, dev, sizeof host, 0);
    double dt = now_s() - t0;
    memset(back, 0, sizeof back);
    if (gpu_download(ctx, back, dev, sizeof host, NULL) != GPU_OK)
        memset(back, 0xff, sizeof back);
    ok(rc == COMM_OK && rc2 == COMM_OK && memcmp(back, host, sizeof host) == 0,
       "one rank: a device allreduce and broadcast leave the buffer as it was (%.6f s)", dt);
    is_int(comm_barrier(nc), COMM_OK, "one rank: barrier");
    rc = comm_allgather(nc, dev, dev2, sizeof host);
    memset(back, 0, sizeof back);
    if (gpu_download(ctx, back, dev2, sizeof host, NULL) != GPU_OK)
        memset(back, 0xff, sizeof back);
    ok(rc == COMM_OK && memcmp(back, host, sizeof host) == 0, "one rank: device allgather (%s)",
       rc == COMM_OK ? "ok" : comm_last_error());
    float h[2] = {4.0f, 5.0f};
    rc = comm_allreduce(nc, h, 2, COMM_F32, COMM_MAX);
    ok(rc == COMM_OK && h[0] == 4.0f && h[1] == 5.0f, "one rank: a host buffer takes MPI");

    /* 4. The watchdog's abort (from its own thread in ftrain): it must
     * return at once on a healthy communicator.  The communicator is only
     * left behind after it (comm.h). */
    t0 = now_s();
    comm_abort(nc);
    dt = now_s() - t0;
    ok(dt < 5.0, "rank %d: comm_abort (ncclCommAbort) on a healthy communicator returns in "
       "%.3f s", rank, dt);
    gpu_dfree(ctx, dev);
    gpu_dfree(ctx, dev2);
    gpu_close(ctx);
}

int main(int argc, char **argv)
{
    if (!mpi_launched()) {
        char why[512];
        int n = device_gpu_count(why, sizeof why);
        if (n <= 0) {
            char msg[600];
            snprintf(msg, sizeof msg, "no GPU visible (%s)", why);
            skip_all(msg);
        }
        char shim[4096], self[4096];
        snprintf(self, sizeof self, "%s", argv[0]);
        snprintf(shim, sizeof shim, "%s/preload/failnccl.so", dirname(self));
        if (access(shim, R_OK) != 0) {
            printf("Bail out! the failnccl shim is not built: %s\n", shim);
            return 1;
        }
        setenv("LD_PRELOAD", shim, 1);
        mpi_relaunch(argv, 2);
        char why2[256];
        snprintf(why2, sizeof why2, "cannot run timeout/mpirun: %s", strerror(errno));
        skip_all(why2);
    }

    world_t w;
    comm_t *ctl = mpi_test_start(&w, &argc, &argv, 2);
    int rank = comm_rank(ctl);
    open_result_t res;

    /* 1. Rank 1's init fails after 2 s. */
    setenv("FAILNCCL_RANK", "1", 1);
    setenv("FAILNCCL_DELAY", "2", 1);
    open_both(&w, ctl, &res);
    unsetenv("FAILNCCL_RANK");
    ok(res.rc[0] != COMM_OK && res.rc[1] != COMM_OK,
       "an init failure on rank 1: both ranks' opens fail (rc %d %d)", res.rc[0], res.rc[1]);
    ok(res.seconds[0] < FAST_S,
       "rank 0's open ends in %.1f s, not after its %.0f s timeout", res.seconds[0],
       OPEN_TIMEOUT_S);
    ok(strstr(res.msg[0], "rank 1") != NULL, "rank 0's message names rank 1: %s", res.msg[0]);
    diag("rank 1 said: %s", res.msg[1]);

    /* 2. Both ranks on one GPU, no injection. */
    open_both(&w, ctl, &res);
    ok((res.rc[0] == COMM_OK) == (res.rc[1] == COMM_OK),
       "two ranks on one GPU: both ranks agree (rc %d %d)", res.rc[0], res.rc[1]);
    ok(res.seconds[0] < FAST_S && res.seconds[1] < FAST_S,
       "and both know within seconds (%.1f s, %.1f s)", res.seconds[0], res.seconds[1]);
    diag("NCCL on two ranks of one GPU: %s / %s", res.msg[0], res.msg[1]);

    /* 3, 4 on each rank; rank 0 reports. */
    one_rank(&w, rank);
    comm_barrier(ctl);
    comm_close(ctl);
    world_free(&w);
    return done_testing();
}
#endif

/*
 * failnccl.so - an LD_PRELOAD shim for tests: on one MPI rank,
 * ncclCommInitRankConfig fails (ncclSystemError) without joining, as a rank
 * whose network or GPU set-up breaks inside NCCL's initialisation does; the
 * other ranks' initialisations then wait for a rank that never comes.
 *
 *   FAILNCCL_RANK=R     fail only in the process whose OMPI_COMM_WORLD_RANK
 *                       (or PMIX_RANK) is R (unset or empty: no process).
 *                       Read at each call, so a test can set and clear it.
 *   FAILNCCL_DELAY=S    sleep S seconds first (default 0): the others are
 *                       well inside their wait when the failure comes
 *
 * Every other call forwards to the next definition (dlsym RTLD_NEXT).  The
 * declaration below matches nccl.h's (ncclUniqueId is a 128-byte struct
 * passed by value); the shim does not need NCCL's headers to build.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    char internal[128];
} shim_unique_id_t;

typedef int (*init_fn_t)(void **comm, int nranks, shim_unique_id_t id, int rank, void *config);

/* ncclSystemError in nccl.h's ncclResult_t. */
#define SHIM_NCCL_SYSTEM_ERROR 2

static int chosen(void)
{
    const char *want = getenv("FAILNCCL_RANK");
    const char *me = getenv("OMPI_COMM_WORLD_RANK");
    if (!me)
        me = getenv("PMIX_RANK");
    return want && want[0] && me && strcmp(want, me) == 0;
}

int ncclCommInitRankConfig(void **comm, int nranks, shim_unique_id_t id, int rank,
                           void *config)
{
    if (chosen()) {
        const char *delay = getenv("FAILNCCL_DELAY");
        double s = delay ? atof(delay) : 0.0;
        if (s > 0) {
            struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
            nanosleep(&ts, NULL);
        }
        if (comm)
            *comm = NULL;
        return SHIM_NCCL_SYSTEM_ERROR;
    }
    init_fn_t next = (init_fn_t)dlsym(RTLD_NEXT, "ncclCommInitRankConfig");
    if (!next)
        return SHIM_NCCL_SYSTEM_ERROR;
    return next(comm, nranks, id, rank, config);
}

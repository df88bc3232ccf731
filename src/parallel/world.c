/*
 * world.c - MPI start and end, ranks, local ranks and hosts.
 *
 * A run with no launcher is an MPI singleton: a world of one.  The local rank
 * comes from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED); on a one-machine SLURM
 * lab where several "nodes" share one kernel the split still groups by real
 * host, which is what the BLAS thread budget needs.
 *
 * The thread budget honours CPU affinity: a rank bound to some cores (mpirun
 * binds to a core by default for two ranks or fewer; srun --cpu-bind, a
 * SLURM cgroup cpuset with --cpus-per-task) gets the cores of its mask, not
 * the node's, divided among the local ranks whose masks overlap it.  A job
 * given 4 of a 128-core node's cores thus runs 4 threads, not 128.
 */
#include "parallel/liveness.h"
#include "parallel/world.h"

#include <limits.h>
#include <mpi.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "util/util.h"

/* The CPUs this rank may use: its affinity mask, shared with the local
 * ranks whose masks overlap it (all of them when no one is bound). */
static int rank_cores(const world_t *world, MPI_Comm local)
{
    int fallback = world->node_cores / (world->local_size > 0 ? world->local_size : 1);
    cpu_set_t mine, *all = calloc((size_t)world->local_size, sizeof *all);
    CPU_ZERO(&mine);
    if (sched_getaffinity(0, sizeof mine, &mine) != 0 || CPU_COUNT(&mine) == 0)
        for (int cpu = 0; cpu < world->node_cores && cpu < CPU_SETSIZE; cpu++)
            CPU_SET(cpu, &mine);
    /* Gather the masks only when every local rank has room for them (a
     * rank that skipped the gather alone would leave the others hanging). */
    int have = all != NULL, all_have = 0;
    int got = MPI_Allreduce(&have, &all_have, 1, MPI_INT, MPI_MIN, local) == MPI_SUCCESS &&
              all_have &&
              MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine,
                            MPI_BYTE, local) == MPI_SUCCESS;
    int sharers = 0;
    for (int r = 0; got && r < world->local_size; r++) {
        cpu_set_t both;
        CPU_AND(&both, &mine, &all[r]);
        sharers += CPU_COUNT(&both) > 0;
    }
    free(all);
    if (!got || sharers < 1)
        return fallback > 0 ? fallback : 1;
    int cores = CPU_COUNT(&mine) / sharers;
    return cores > 0 ? cores : 1;
}

/* An MPI call `what` failed with mpirc: WORLD_EMPI with MPI's reason. */
static int mpi_fail(const char *what, int mpirc, char *err, size_t cap)
{
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(mpirc, msg, &len);
    return util_fail(err, cap, WORLD_EMPI, "%s: %s", what, msg);
}

/* This rank's host for messages: SLURMD_NODENAME when set, else the host
 * name. */
static void host_name(char *host, size_t cap)
{
    const char *node = getenv("SLURMD_NODENAME");
    if (node && *node)
        snprintf(host, cap, "%s", node);
    else if (gethostname(host, cap) != 0)
        snprintf(host, cap, "unknown");
    host[cap - 1] = '\0';
}

int world_init(world_t *world, int *argc, char ***argv, char *err, size_t cap)
{
    return world_init_threads(world, argc, argv, WORLD_THREADS_FUNNELED, err, cap);
}

int world_init_threads(world_t *world, int *argc, char ***argv, world_threads_t threads,
                       char *err, size_t cap)
{
    memset(world, 0, sizeof *world);
    int provided = 0;
    int want = threads == WORLD_THREADS_MULTIPLE ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED;
    if (MPI_Init_thread(argc, argv, want, &provided) != MPI_SUCCESS)
        return util_fail(err, cap, WORLD_EMPI,
                         "MPI start failed (launch with mpirun or srun --mpi=pmix)");
    /* Errors come back as codes, so the callers can report them. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &world->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world->size);

    MPI_Comm *comm_world = malloc(sizeof *comm_world), *local = malloc(sizeof *local);
    if (!comm_world || !local) {
        free(comm_world);
        free(local);
        return util_fail(err, cap, WORLD_ENOMEM, "MPI start: out of memory");
    }
    *comm_world = MPI_COMM_WORLD;
    int mpirc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world->rank,
                                    MPI_INFO_NULL, local);
    if (mpirc != MPI_SUCCESS) {
        free(comm_world);
        free(local);
        return mpi_fail("MPI start: MPI_Comm_split_type", mpirc, err, cap);
    }
    MPI_Comm_rank(*local, &world->local_rank);
    MPI_Comm_size(*local, &world->local_size);
    world->mpi_world = comm_world;
    world->mpi_local = local;

    long online = sysconf(_SC_NPROCESSORS_ONLN);
    world->node_cores = online > 0 ? (int)online : 1;
    world->rank_cores = rank_cores(world, *local);
    host_name(world->host, sizeof world->host);
    return WORLD_OK;
}

void world_print(const world_t *world, FILE *out)
{
    struct {
        char host[WORLD_HOST_MAX];
        int local_rank;
        int pid;
        int cores;
    } me, *all = NULL;
    memset(&me, 0, sizeof me);
    snprintf(me.host, sizeof me.host, "%s", world->host);
    me.local_rank = world->local_rank;
    me.pid = (int)getpid();
    me.cores = world->rank_cores;
    if (world->rank == 0)
        all = calloc((size_t)world->size, sizeof *all);
    MPI_Gather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, 0,
               MPI_COMM_WORLD);
    if (world->rank == 0 && all) {
        fprintf(out, "world: %d rank%s\n", world->size, world->size == 1 ? "" : "s");
        for (int r = 0; r < world->size; r++)
            fprintf(out, "world: rank %d local %d host %s pid %d cores %d\n", r,
                    all[r].local_rank, all[r].host, all[r].pid, all[r].cores);
        fflush(out);
    }
    free(all);
}

int world_default_threads(const world_t *world)
{
    return world->rank_cores > 0 ? world->rank_cores : 1;
}

int world_all_ok(const world_t *world, int ok)
{
    int mine = ok != 0, all = 0;
    if (MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, *(MPI_Comm *)world->mpi_world) !=
        MPI_SUCCESS)
        return 0;
    return all;
}

int world_allgather(const world_t *world, const void *mine, size_t bytes, void *all)
{
    if (!world || !mine || !all || bytes == 0 || bytes > INT_MAX)
        return WORLD_EINVAL;
    return MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE,
                         *(MPI_Comm *)world->mpi_world) == MPI_SUCCESS
               ? WORLD_OK
               : WORLD_EMPI;
}

int world_same_text(const world_t *world, const char *text, double timeout_s)
{
    /* The maxima of hash and ~hash equal this rank's own on every rank only
     * when every rank has the same hash. */
    uint64_t hash = XXH64(text, strlen(text), 0), mine[2] = {hash, ~hash};
    static uint64_t maxima[2]; /* static: a request left pending still has it */
    MPI_Request req;
    int done = 0;
    if (MPI_Iallreduce(mine, maxima, 2, MPI_UINT64_T, MPI_MAX,
                       *(MPI_Comm *)world->mpi_world, &req) != MPI_SUCCESS)
        return -1;
    double end = MPI_Wtime() + timeout_s;
    while (!done) {
        if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return -1;
        if (!done && MPI_Wtime() > end)
            return -1;
        if (!done)
            usleep(1000);
    }
    return maxima[0] == hash && maxima[1] == ~hash;
}

void world_abort(const world_t *world, int code)
{
    (void)world;
    liveness_bye(); /* the neighbours: an end on purpose, not a death */
    MPI_Abort(MPI_COMM_WORLD, code);
}

void world_free(world_t *world)
{
    if (!world)
        return;
    if (world->mpi_local) {
        MPI_Comm_free((MPI_Comm *)world->mpi_local);
        free(world->mpi_local);
    }
    free(world->mpi_world);
    world->mpi_local = world->mpi_world = NULL;
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin)
        MPI_Finalize();
}

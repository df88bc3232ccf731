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
#include "ftrain/world.h"

#include <limits.h>
#include <mpi.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

/* The CPUs this rank may use: its affinity mask, shared with the local
 * ranks whose masks overlap it (all of them when no one is bound). */
static int rank_cores(const world_t *w, MPI_Comm local)
{
    int fallback = w->node_cores / (w->local_size > 0 ? w->local_size : 1);
    cpu_set_t mine, *all = calloc((size_t)w->local_size, sizeof *all);
    CPU_ZERO(&mine);
    if (sched_getaffinity(0, sizeof mine, &mine) != 0 || CPU_COUNT(&mine) == 0)
        for (int c = 0; c < w->node_cores && c < CPU_SETSIZE; c++)
            CPU_SET(c, &mine);
    /* Gather the masks only when every local rank has room for them (a
     * rank that skipped the gather alone would leave the others hanging). */
    int have = all != NULL, all_have = 0;
    int got = MPI_Allreduce(&have, &all_have, 1, MPI_INT, MPI_MIN, local) == MPI_SUCCESS &&
              all_have &&
              MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine,
                            MPI_BYTE, local) == MPI_SUCCESS;
    int sharers = 0;
    for (int r = 0; got && r < w->local_size; r++) {
        cpu_set_t both;
        CPU_AND(&both, &mine, &all[r]);
        sharers += CPU_COUNT(&both) > 0;
    }
    free(all);
    if (!got || sharers < 1)
        return fallback > 0 ? fallback : 1;
    int t = CPU_COUNT(&mine) / sharers;
    return t > 0 ? t : 1;
}

int world_init(world_t *w, int *argc, char ***argv)
{
    memset(w, 0, sizeof *w);
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return -1;
    /* Errors come back as codes, so the callers can report them. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &w->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &w->size);

    MPI_Comm *world = malloc(sizeof *world), *local = malloc(sizeof *local);
    if (!world || !local) {
        free(world);
        free(local);
        return -1;
    }
    *world = MPI_COMM_WORLD;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w->rank,
                            MPI_INFO_NULL, local) != MPI_SUCCESS) {
        free(world);
        free(local);
        return -1;
    }
    MPI_Comm_rank(*local, &w->local_rank);
    MPI_Comm_size(*local, &w->local_size);
    w->mpi_world = world;
    w->mpi_local = local;

    long n = sysconf(_SC_NPROCESSORS_ONLN);
    w->node_cores = n > 0 ? (int)n : 1;
    w->rank_cores = rank_cores(w, *local);
    const char *node = getenv("SLURMD_NODENAME");
    if (node && *node)
        snprintf(w->host, sizeof w->host, "%s", node);
    else if (gethostname(w->host, sizeof w->host) != 0)
        snprintf(w->host, sizeof w->host, "unknown");
    w->host[sizeof w->host - 1] = '\0';
    return 0;
}

void world_print(const world_t *w, FILE *out)
{
    struct {
        char host[64];
        int local_rank;
        int pid;
        int cores;
    } me, *all = NULL;
    memset(&me, 0, sizeof me);
    snprintf(me.host, sizeof me.host, "%s", w->host);
    me.local_rank = w->local_rank;
    me.pid = (int)getpid();
    me.cores = w->rank_cores;
    if (w->rank == 0)
        all = calloc((size_t)w->size, sizeof *all);
    MPI_Gather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, 0,
               MPI_COMM_WORLD);
    if (w->rank == 0 && all) {
        fprintf(out, "world: %d rank%s\n", w->size, w->size == 1 ? "" : "s");
        for (int r = 0; r < w->size; r++)
            fprintf(out, "world: rank %d local %d host %s pid %d cores %d\n", r,
                    all[r].local_rank, all[r].host, all[r].pid, all[r].cores);
        fflush(out);
    }
    free(all);
}

int world_default_threads(const world_t *w)
{
    return w->rank_cores > 0 ? w->rank_cores : 1;
}

int world_all_ok(const world_t *w, int ok)
{
    int v = ok != 0, all = 0;
    if (MPI_Allreduce(&v, &all, 1, MPI_INT, MPI_MIN, *(MPI_Comm *)w->mpi_world) != MPI_SUCCESS)
        return 0;
    return all;
}

int world_allgather(const world_t *w, const void *mine, size_t bytes, void *all)
{
    if (!w || !mine || !all || bytes == 0 || bytes > INT_MAX)
        return -1;
    return MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE,
                         *(MPI_Comm *)w->mpi_world) == MPI_SUCCESS
               ? 0
               : -1;
}

int world_same_text(const world_t *w, const char *text, double timeout_s)
{
    /* The maxima of h and ~h equal this rank's own on every rank only when
     * every rank has the same h. */
    uint64_t h = XXH64(text, strlen(text), 0), v[2] = {h, ~h};
    static uint64_t mx[2]; /* static: a request left pending still has it */
    MPI_Request req;
    int done = 0;
    if (MPI_Iallreduce(v, mx, 2, MPI_UINT64_T, MPI_MAX, *(MPI_Comm *)w->mpi_world, &req) !=
        MPI_SUCCESS)
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
    return mx[0] == h && mx[1] == ~h;
}

void world_abort(const world_t *w, int code)
{
    (void)w;
    MPI_Abort(MPI_COMM_WORLD, code);
}

void world_free(world_t *w)
{
    if (!w)
        return;
    if (w->mpi_local) {
        MPI_Comm_free((MPI_Comm *)w->mpi_local);
        free(w->mpi_local);
    }
    free(w->mpi_world);
    w->mpi_local = w->mpi_world = NULL;
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin)
        MPI_Finalize();
}

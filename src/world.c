/*
 * world.c - MPI start and end, ranks, local ranks and hosts.
 *
 * A run with no launcher is an MPI singleton: a world of one.  The local rank
 * comes from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED); on a one-machine SLURM
 * lab where several "nodes" share one kernel the split still groups by real
 * host, which is what the BLAS thread budget needs.
 */
#include "ftrain/world.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    } me, *all = NULL;
    memset(&me, 0, sizeof me);
    snprintf(me.host, sizeof me.host, "%s", w->host);
    me.local_rank = w->local_rank;
    me.pid = (int)getpid();
    if (w->rank == 0)
        all = calloc((size_t)w->size, sizeof *all);
    MPI_Gather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, 0,
               MPI_COMM_WORLD);
    if (w->rank == 0 && all) {
        fprintf(out, "world: %d rank%s\n", w->size, w->size == 1 ? "" : "s");
        for (int r = 0; r < w->size; r++)
            fprintf(out, "world: rank %d local %d host %s pid %d\n", r,
                    all[r].local_rank, all[r].host, all[r].pid);
        fflush(out);
    }
    free(all);
}

int world_default_threads(const world_t *w)
{
    int t = w->node_cores / (w->local_size > 0 ? w->local_size : 1);
    return t > 0 ? t : 1;
}

int world_all_ok(const world_t *w, int ok)
{
    int v = ok != 0, all = 0;
    if (MPI_Allreduce(&v, &all, 1, MPI_INT, MPI_MIN, *(MPI_Comm *)w->mpi_world) != MPI_SUCCESS)
        return 0;
    return all;
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

/*
 * world.h - who we are: ranks, local ranks, hosts; MPI start and end.
 *
 * HowTo: world_init(&w, &argc, &argv) once at start (a plain run with no
 * launcher is a world of one), world_print() on every rank to have rank 0
 * print each rank's host and pid, world_free() at the end.  The world also
 * picks the BLAS threads per rank: the cores of the rank's CPU affinity mask
 * divided by the local ranks that share them, unless the caller overrides
 * it.
 */
#ifndef FTRAIN_WORLD_H
#define FTRAIN_WORLD_H

#include <stdio.h>

typedef struct {
    int rank, size;             /* in MPI_COMM_WORLD */
    int local_rank, local_size; /* on this node (shared-memory split) */
    int node_cores;             /* online CPUs of this node */
    int rank_cores;             /* CPUs for this rank: its affinity mask's,
                                   divided by the local ranks sharing them */
    char host[64];              /* SLURMD_NODENAME when set, else hostname */
    void *mpi_world;            /* MPI_Comm of the world (opaque here) */
    void *mpi_local;            /* MPI_Comm of the node */
} world_t;

/** Start MPI (thread level FUNNELED) and fill w.  @return 0 or -1. */
int world_init(world_t *w, int *argc, char ***argv);

/** Collective: rank 0 prints one line per rank (rank, local rank, host, pid)
 *  to out. */
void world_print(const world_t *w, FILE *out);

/** @return default BLAS (and checkpoint compression) threads per rank:
 *  rank_cores. */
int world_default_threads(const world_t *w);

/** Collective over the world: @return 1 on every rank when every rank
 *  passed ok != 0, else 0 (also when the collective itself failed). */
int world_all_ok(const world_t *w, int ok);

/** Collective over the world: every rank's `bytes` bytes at mine, in rank
 *  order, into all (size * bytes).  @return 0, or -1 when the collective
 *  failed. */
int world_allgather(const world_t *w, const void *mine, size_t bytes, void *all);

/** Collective over the world, bounded: whether every rank holds the same
 *  text (compared by a 64-bit hash).  Waits at most timeout_s seconds for
 *  the other ranks.  @return 1 all the same, 0 some differ, -1 unknown (the
 *  collective failed or timed out; it is then left pending). */
int world_same_text(const world_t *w, const char *text, double timeout_s);

/** Abort every rank (used only by main on fatal errors). */
void world_abort(const world_t *w, int code);

/** End MPI.  Accepts a world that failed to start. */
void world_free(world_t *w);

#endif

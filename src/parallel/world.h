/*
 * world.h - who we are: ranks, local ranks, hosts; MPI start and end.
 *
 * HowTo: world_init(&w, &argc, &argv, err, cap) once at start (a plain run
 * with no launcher is a world of one), world_print() on every rank to have
 * rank 0 print each rank's host and pid, world_free() at the end.  The world also
 * picks the BLAS threads per rank: the cores of the rank's CPU affinity mask
 * divided by the local ranks that share them, unless the caller overrides
 * it.
 */
#ifndef FTRAIN_WORLD_H
#define FTRAIN_WORLD_H

#include <stddef.h>
#include <stdio.h>

/* Room for a host name, its terminating NUL included. */
#define WORLD_HOST_MAX 64

typedef enum {
    WORLD_OK = 0,
    WORLD_EMPI = -1,    /* an MPI call failed (MPI could not start) */
    WORLD_ENOMEM = -2,
    WORLD_EINVAL = -3   /* bad arguments */
} world_err_t;

typedef struct {
    int rank, size;             /* in MPI_COMM_WORLD */
    int local_rank, local_size; /* on this node (shared-memory split) */
    int node_cores;             /* online CPUs of this node */
    int rank_cores;             /* CPUs for this rank: its affinity mask's,
                                   divided by the local ranks sharing them */
    char host[WORLD_HOST_MAX];  /* SLURMD_NODENAME when set, else hostname */
    void *mpi_world;            /* MPI_Comm of the world (opaque here) */
    void *mpi_local;            /* MPI_Comm of the node */
} world_t;

/* The MPI thread level a program asks for. */
typedef enum {
    WORLD_THREADS_FUNNELED = 0, /* only the thread that starts MPI calls it */
    WORLD_THREADS_MULTIPLE = 1  /* helper threads make MPI calls of their own */
} world_threads_t;

/** Start MPI (thread level FUNNELED) and fill world.  @return WORLD_OK, or
 *  WORLD_EMPI / WORLD_ENOMEM with err saying which step failed. */
int world_init(world_t *world, int *argc, char ***argv, char *err, size_t cap);

/** world_init, asking MPI for the thread level `threads`.  MULTIPLE is for
 *  a program whose helper threads call MPI (the local tier's partner
 *  exchange: --ckpt-local-exchange thread or auto); it costs every MPI call a
 *  little (locks), so it is asked for only then.  MPI may give less
 *  (comm_threads_multiple says what it gave), and that is no error. */
int world_init_threads(world_t *world, int *argc, char ***argv, world_threads_t threads,
                       char *err, size_t cap);

/** Collective: rank 0 prints one line per rank (rank, local rank, host, pid)
 *  to out. */
void world_print(const world_t *world, FILE *out);

/** @return default BLAS (and checkpoint compression) threads per rank:
 *  rank_cores. */
int world_default_threads(const world_t *world);

/** Collective over the world: @return 1 on every rank when every rank
 *  passed ok != 0, else 0 (also when the collective itself failed). */
int world_all_ok(const world_t *world, int ok);

/** Collective over the world: every rank's `bytes` bytes at mine, in rank
 *  order, into all (size * bytes).  @return WORLD_OK, WORLD_EINVAL for bad
 *  arguments, or WORLD_EMPI when the collective failed. */
int world_allgather(const world_t *world, const void *mine, size_t bytes, void *all);

/** Collective over the world, bounded: whether every rank holds the same
 *  text (compared by a 64-bit hash).  Waits at most timeout_s seconds for
 *  the other ranks.  @return 1 all the same, 0 some differ, -1 unknown (the
 *  collective failed or timed out; it is then left pending). */
int world_same_text(const world_t *world, const char *text, double timeout_s);

/** Abort every rank (used only by main on fatal errors). */
void world_abort(const world_t *world, int code);

/** End MPI.  Accepts a world that failed to start. */
void world_free(world_t *world);

#endif

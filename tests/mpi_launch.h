/*
 * mpi_launch.h - for a C test that needs several ranks: run by prove as a
 * plain program, it starts itself again under mpirun with the one-machine
 * settings the shell tests use (as root too, oversubscribed, no binding,
 * shared memory without single-copy), and rank 0 speaks TAP.
 *
 * HowTo: first thing in main,
 *   if (!mpi_launched()) { mpi_relaunch(argv, 2); ...exec failed: skip... }
 *   comm_t *comm = mpi_test_start(&world, &argc, &argv, 2);
 */
#ifndef FTRAIN_MPI_LAUNCH_H
#define FTRAIN_MPI_LAUNCH_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "parallel/comm.h"
#include "parallel/world.h"

/* How long the relaunched ranks may take, in seconds, as timeout(1) reads it. */
#define MPI_LAUNCH_TIMEOUT "120"
/* Room for why MPI could not start. */
#define MPI_LAUNCH_ERR_MAX 256

/** @return 1 when this process runs under a launcher, else 0. */
static inline int mpi_launched(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") != NULL;
}

/** Replace this process with `ranks` copies of argv[0] under mpirun.
 *  Returns only when that cannot start (errno says why). */
static inline void mpi_relaunch(char **argv, int ranks)
{
    char count[sizeof "-2147483648"];
    snprintf(count, sizeof count, "%d", ranks);
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    setenv("OMPI_MCA_btl", "self,vader", 0);
    setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
    setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
    setenv("OMPI_MCA_hwloc_base_binding_policy", "none", 0);
    /* PMIx's uid check, not munge's: the SLURM tests start and stop munged
     * beside these launches (tests/lib.sh says why). */
    setenv("PMIX_MCA_psec", "native", 0);
    fflush(stdout);
    execlp("timeout", "timeout", MPI_LAUNCH_TIMEOUT, "mpirun", "-n", count, argv[0],
           (char *)NULL);
}

/** In the relaunched ranks: start the world and a communicator over it;
 *  only rank 0 keeps its stdout (it speaks TAP).  Bails out (exit 1) when
 *  MPI cannot start or there are not `ranks` ranks. */
static inline comm_t *mpi_test_start(world_t *world, int *argc, char ***argv, int ranks)
{
    comm_t *comm = NULL;
    char err[MPI_LAUNCH_ERR_MAX] = "";
    if (world_init(world, argc, argv, err, sizeof err) != WORLD_OK ||
        comm_open_mpi(&comm, world) != COMM_OK) {
        printf("Bail out! cannot start MPI: %s%s\n", err, comm_last_error());
        exit(1);
    }
    if (comm_rank(comm) != 0 && !freopen("/dev/null", "w", stdout))
        exit(1);
    if (comm_size(comm) != ranks) {
        printf("Bail out! expected %d ranks, got %d\n", ranks, comm_size(comm));
        exit(1);
    }
    return comm;
}

#endif

/*
 * comm_internal.h - what a comm backend implements (not a public header).
 *
 * A comm_t is a table of backend functions plus the ranks.  comm.c holds the
 * MPI backend, whose host-buffer collectives (comm_host_*) every backend
 * uses for host buffers, and the nonblocking exchanges (comm_xfer_*) over
 * host memory; comm_nccl.c the NCCL backend (device buffers).  A backend
 * sets comm_err_buf on failure.
 */
#ifndef FTRAIN_COMM_INTERNAL_H
#define FTRAIN_COMM_INTERNAL_H

#include <mpi.h>

#include "parallel/comm.h"

#define COMM_ERR_MAX 1024

typedef struct {
    int (*allreduce)(comm_t *, void *, size_t, comm_dtype_t, comm_op_t);
    int (*bcast)(comm_t *, void *, size_t, int);
    int (*allgather)(comm_t *, const void *, void *, size_t);
    int (*barrier)(comm_t *);
    void (*close)(comm_t *);
    void (*abort)(comm_t *); /* from any thread, for a process about to end */
} comm_ops_t;

struct comm {
    const comm_ops_t *ops;
    int rank, size;
    MPI_Comm mpi;      /* the MPI communicator (the NCCL backend's bootstrap) */
    void *backend;     /* backend-private state */
};

extern _Thread_local char comm_err_buf[COMM_ERR_MAX];

/* Record a failure: the message into comm_err_buf.  @return code. */
int comm_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Record a failed MPI call `what` with MPI's reason ("what: reason"; what
 * NULL: the reason alone).  @return COMM_EFAIL. */
int comm_mpi_fail(const char *what, int mpirc);

/* The collectives on host buffers over comm->mpi, for every backend: the
 * allreduce applies comm_reduce_local's rule (MAX on floating point through
 * it, SUM and integer MAX through MPI's own, which are the same rule), and
 * buffers of more than INT_MAX elements are split. */
int comm_host_allreduce(comm_t *comm, void *buf, size_t n, comm_dtype_t type, comm_op_t op);
int comm_host_bcast(comm_t *comm, void *buf, size_t bytes, int root);
int comm_host_allgather(comm_t *comm, const void *send, void *recv, size_t bytes);

#endif

/*
 * comm_internal.h - what a comm backend implements (not a public header).
 *
 * A comm_t is a table of backend functions plus the ranks.  comm.c holds the
 * MPI backend (host buffers); comm_nccl.c the NCCL backend (device
 * buffers).  A backend sets comm_err_buf on failure.
 */
#ifndef FTRAIN_COMM_INTERNAL_H
#define FTRAIN_COMM_INTERNAL_H

#include <mpi.h>

#include "ftrain/comm.h"

#define COMM_ERR_MAX 1024

typedef struct {
    int (*allreduce)(comm_t *, void *, size_t, comm_dtype_t, comm_op_t);
    int (*bcast)(comm_t *, void *, size_t, int);
    int (*allgather)(comm_t *, const void *, void *, size_t);
    int (*barrier)(comm_t *);
    void (*close)(comm_t *);
} comm_ops_t;

struct comm {
    const comm_ops_t *ops;
    int rank, size;
    MPI_Comm mpi;      /* the MPI communicator (the NCCL backend's bootstrap) */
    void *backend;     /* backend-private state */
};

extern _Thread_local char comm_err_buf[COMM_ERR_MAX];

#endif

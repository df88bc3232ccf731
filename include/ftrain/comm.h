/*
 * comm.h - the collectives ftrain uses, behind one small interface.
 *
 * HowTo: comm_open_mpi(&comm, world) gives a communicator over the world's MPI
 * ranks; every collective is called by all ranks in the same order.  The
 * interface is a table of backend functions so a device backend (NCCL on
 * GPUs) can sit behind the same calls.  Buffers larger than INT_MAX elements
 * are split transparently.
 *
 * Errors: every call returns COMM_OK or COMM_EFAIL / COMM_EINVAL;
 * comm_strerror() names the code and comm_last_error() gives the backend's
 * message.
 */
#ifndef FTRAIN_COMM_H
#define FTRAIN_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "ftrain/world.h"

typedef enum { COMM_F32 = 0, COMM_F64 = 1, COMM_I64 = 2, COMM_U8 = 3 } comm_dtype_t;
typedef enum { COMM_SUM = 0, COMM_MAX = 1 } comm_op_t;
typedef enum { COMM_OK = 0, COMM_EFAIL = -1, COMM_EINVAL = -2 } comm_err_t;

typedef struct comm comm_t;

/** A communicator over all ranks of the world.  @return COMM_OK/COMM_EFAIL. */
int comm_open_mpi(comm_t **out, const world_t *world);
/** Release; accepts NULL. */
void comm_close(comm_t *comm);
/** For a process that is about to end (a hang's watchdog, before
 *  MPI_Abort): cut short what the backend can, from any thread (NCCL:
 *  ncclCommAbort, which frees the GPU from kernels waiting on a dead
 *  peer).  The communicator may not be used after it, only left behind.
 *  Accepts NULL. */
void comm_abort(comm_t *comm);

int comm_rank(const comm_t *comm);
int comm_size(const comm_t *comm);

/** In-place allreduce of n elements.  @return COMM_OK or an error. */
int comm_allreduce(comm_t *comm, void *buf, size_t n, comm_dtype_t type, comm_op_t op);
/** Broadcast bytes from root.  @return COMM_OK or an error. */
int comm_bcast(comm_t *comm, void *buf, size_t bytes, int root);
/** Every rank sends `bytes` and receives size*bytes, rank-ordered. */
int comm_allgather(comm_t *comm, const void *send, void *recv, size_t bytes);
/** Gather variable-sized pieces: rank r contributes counts[r] bytes at
 *  recv+displs[r] (already in place in recv); afterwards every rank has all. */
int comm_allgatherv_inplace(comm_t *comm, void *recv, const uint64_t *counts,
                            const uint64_t *displs);
/** Point to point over host memory (MPI, whichever backend): this rank
 *  sends sbytes of send to rank dest (-1: sends nothing) while it receives
 *  rbytes[i] bytes from each of the nsrc ranks srcs[i] into recv[i].  Every
 *  rank of a pattern calls it once; a sender's sbytes must equal what its
 *  receiver expects.  Any size (chunked).  @return COMM_OK or an error. */
int comm_exchange(comm_t *comm, const void *send, uint64_t sbytes, int dest, int nsrc,
                  const int *srcs, void *const *recv, const uint64_t *rbytes);
/** Agreement on success: every rank passes its local rc (0 = fine).
 *  @return 0 on every rank when all passed 0, else 1 on every rank (or the
 *  collective's own error). */
int comm_any_failed(comm_t *comm, int local_rc);
/** Barrier.  @return COMM_OK or an error. */
int comm_barrier(comm_t *comm);
/** Barrier for long waits (peers still writing a checkpoint): waits without
 * keeping a core busy, so that a rank that is done does not take CPU from the
 * ranks on its node that are not.  Costs up to about a millisecond of latency.
 * @return COMM_OK or an error. */
int comm_wait_all(comm_t *comm);

/**
 * The element rule of every reduction over host buffers, whichever backend
 * runs it: inout[i] = op(inout[i], in[i]) for n elements of type.  SUM
 * adds.  MAX on floating point is a total rule, the same in any order of
 * the ranks: a NaN on either side wins (which NaN, when both are, is
 * unspecified), +0 is above -0, and otherwise the larger value wins (so
 * +inf above all, -inf below all).  MPI_MAX and fmax make none of these
 * promises; the trainer's divergence vote needs the NaN one.
 * @return COMM_OK, or COMM_EINVAL for an unknown type or op.
 */
int comm_reduce_local(void *inout, const void *in, size_t n, comm_dtype_t type,
                      comm_op_t op);

/** @return a static name for an error code. */
const char *comm_strerror(int err);
/** @return the backend's message for the last failure on this thread. */
const char *comm_last_error(void);

#endif

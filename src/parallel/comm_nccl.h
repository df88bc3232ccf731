/*
 * comm_nccl.h - the NCCL backend of comm.h: collectives on GPU buffers.
 *
 * HowTo: after gpu_init(&ctx, ordinal) on every rank,
 *   comm_open_nccl(&c, w, ordinal, gpu_stream(ctx), 300.0)
 * is collective over the world: rank 0 makes the NCCL unique id, MPI
 * broadcasts it, every rank joins a non-blocking NCCL communicator and
 * waits for it at most timeout_s seconds (a missing rank is an error, not a
 * hang).  Then the usual comm_allreduce / comm_bcast / comm_allgather /
 * comm_barrier / comm_close calls of comm.h work on it:
 *   - device buffers (cudaMalloc / gpu_alloc) go through NCCL on `stream`,
 *     ordered after the work already queued there; each call waits for its
 *     result, polling NCCL's asynchronous error state, and gives up after
 *     timeout_s seconds;
 *   - host buffers (malloc, the stack, pinned memory) go through MPI on the
 *     communicator's own duplicate of the world, so comm_any_failed, the
 *     control reduction and the checkpoint collectives need no change.
 * Both buffers of one comm_allgather must be on the same side.
 *
 * Failures: any NCCL error or timeout aborts the NCCL communicator
 * (ncclCommAbort, never ncclCommDestroy while a peer may be dead); later
 * device collectives on it fail at once with the first error's message.
 * comm_close finalizes and destroys a healthy communicator.  After a resume
 * on another world size, open a new communicator of the new size.
 *
 * Without NCCL in the build (make CUDA=0, NCCL=0, or no nccl.h) the function
 * exists and fails with "built without NCCL".
 */
#ifndef FTRAIN_COMM_NCCL_H
#define FTRAIN_COMM_NCCL_H

#include "parallel/comm.h"
#include "parallel/world.h"

/**
 * Collective: an NCCL communicator over all ranks of w on GPU `ordinal`.
 * stream is the cudaStream_t to run on (gpu_stream(ctx); NULL: the backend
 * creates its own non-blocking stream).  timeout_s > 0 bounds the wait for
 * the communicator and for each device collective.
 * @return COMM_OK; COMM_EINVAL for bad arguments; COMM_EFAIL when CUDA,
 *         MPI or NCCL fails, the peers do not all arrive in time, or NCCL is
 *         not built in (comm_last_error() says which).
 */
int comm_open_nccl(comm_t **out, const world_t *w, int ordinal, void *stream,
                   double timeout_s);

#endif

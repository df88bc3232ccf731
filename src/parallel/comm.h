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

#include "parallel/world.h"

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

/*
 * Nonblocking exchanges, moved on a little at a time (the node-local tier's
 * partner copies, which travel over several steps): comm_xfer_open makes
 * a channel of its own, comm_xfer_post posts an exchange and returns at
 * once, comm_xfer_test moves it on for a time budget, and
 * comm_xfer_abandon / comm_xfer_close end it.  Every call is made on the
 * thread that started MPI.  With shared memory and no progress thread,
 * bytes move only while both ends are inside MPI (a test, or any other
 * call of this interface).
 */
typedef struct comm_xfer comm_xfer_t;

/** Collective: a channel for nonblocking exchanges, over a duplicate of
 *  comm's MPI communicator (so no message of it can match any other
 *  point-to-point traffic), with errors returned.  The ranks should agree
 *  on the outcome (comm_any_failed) before they use it: a rank that failed
 *  holds nothing, the others close theirs.  @return COMM_OK; COMM_EINVAL
 *  when comm has no MPI communicator (nothing collective done); or
 *  COMM_EFAIL (comm_last_error() says why; *out NULL). */
int comm_xfer_open(comm_t *comm, comm_xfer_t **out);
/** Make room ahead for the requests of a comm_xfer_post of these sizes,
 *  so that the post allocates nothing.  @return COMM_OK, COMM_EFAIL
 *  (out of memory; nothing posted, nothing lost) or COMM_EINVAL (a
 *  message beyond 32 TiB). */
int comm_xfer_reserve(comm_xfer_t *x, uint64_t sbytes, int dest, int nsrc,
                      const uint64_t *lens);
/** Post an exchange and return at once (nothing blocks): this rank
 *  receives lens[i] bytes from each of the nsrc ranks srcs[i] into bufs[i]
 *  and sends sbytes of send to rank dest (-1: sends nothing), up to 32 TiB,
 *  in pieces of a few MiB (more for messages beyond 128 GiB) tagged by their
 *  index, so that each can be used as it lands (comm_xfer_arrived).  A sender's sbytes
 *  must equal what its receiver expects.  The buffers are the exchange's
 *  until comm_xfer_test says done or comm_xfer_abandon returns 0; one
 *  exchange at a time.  @return COMM_OK; COMM_EINVAL, nothing posted, for
 *  a bad argument (a rank out of range, a NULL buffer of nonzero length)
 *  or an exchange still in flight; COMM_EFAIL when MPI refused a piece
 *  (comm_last_error() names the calls and MPI's reason): the pieces
 *  posted before it stay in flight, for comm_xfer_abandon. */
int comm_xfer_post(comm_xfer_t *x, const void *send, uint64_t sbytes, int dest, int nsrc,
                   const int *srcs, void *const *bufs, const uint64_t *lens);
/** Move the exchange on: test it again and again (MPI_Testall, no sleep)
 *  until it is complete or budget_s seconds have passed (one test at
 *  least).  *done: 1 when every piece has arrived and gone (the buffers
 *  are the caller's again; also when nothing is posted), else 0.
 *  @return COMM_OK, or COMM_EFAIL with comm_last_error() MPI's reason
 *  alone (the caller names the exchange): the pieces stay in flight, for
 *  comm_xfer_abandon.  COMM_EINVAL after an abandon that returned 1. */
int comm_xfer_test(comm_xfer_t *x, double budget_s, int *done);
/** Post the send of each later exchange on x at most `pieces` at a time
 *  (0, the default: all at once), the next one whenever the oldest has
 *  gone, so that its receiver's pieces land in order, each soon after the
 *  one before (comm_xfer_arrived), where all at once they would land
 *  together at the end.  Only tests move such a send on (comm_xfer_test,
 *  comm_xfer_arrived): a caller that tests only now and then should keep
 *  0.  Accepts NULL. */
void comm_xfer_window(comm_xfer_t *x, int pieces);
/** How much of source i's message (srcs[i] of the last comm_xfer_post)
 *  has landed, from its start without a gap: *bytes of bufs[i] are final
 *  and may be read while the rest is still in flight (the pieces are a few
 *  MiB, so a caller that looks between tests finds them still in the
 *  cache).  Moves the exchange on a little (MPI_Test of the next pieces).
 *  After comm_xfer_test said done: lens[i].  @return COMM_OK; COMM_EINVAL
 *  (*bytes 0) for an i out of range or after an abandon that returned 1;
 *  COMM_EFAIL with MPI's reason, as comm_xfer_test. */
int comm_xfer_arrived(comm_xfer_t *x, int i, uint64_t *bytes);
/** Give up the exchange in flight, after one last test.  @return 0 when
 *  every piece has completed (or nothing was posted): the buffers are the
 *  caller's again and x may post again; 1 when some piece never did (or
 *  the test failed): MPI may still read or write its buffer, so the caller
 *  must keep every buffer of that exchange allocated for the life of the
 *  process; x then posts nothing more, and comm_xfer_close leaves it (and
 *  its communicator) behind too.  Accepts NULL (0). */
int comm_xfer_abandon(comm_xfer_t *x);
/** Release x and its communicator (not freed once MPI is finalized).  An
 *  exchange still in flight is abandoned first (comm_xfer_abandon, which
 *  the caller calls itself to learn whether its buffers may go); when it
 *  never completed, x is left as it is.  Accepts NULL. */
void comm_xfer_close(comm_xfer_t *x);
/** @return 1 when MPI's thread level lets the process run threads of its
 *  own (MPI_THREAD_FUNNELED or more; under FUNNELED they make no MPI call,
 *  nor any call of this interface), 0 under MPI_THREAD_SINGLE. */
int comm_threads_allowed(void);
/** @return 1 when MPI runs at MPI_THREAD_MULTIPLE: any thread may call this
 *  interface, on a communicator no other thread uses at the same time. */
int comm_threads_multiple(void);
/** @return 1 when the calling thread is the one that started MPI (under
 *  MPI_THREAD_FUNNELED the only one that may call this interface), else 0. */
int comm_is_main_thread(void);

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

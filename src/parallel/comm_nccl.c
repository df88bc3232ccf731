/*
 * comm_nccl.c - the NCCL backend of comm.h (device buffers), with MPI for
 * host buffers and for the bootstrap.
 *
 * Invariants:
 *   - The NCCL communicator is non-blocking (config.blocking = 0): no NCCL
 *     call can block forever.  Every wait is a poll of
 *     ncclCommGetAsyncError (and cudaStreamQuery for collectives) against a
 *     deadline of timeout_s seconds.
 *   - Any NCCL error, CUDA error or timeout calls ncclCommAbort once and
 *     marks the communicator broken; a broken communicator is never
 *     finalized or destroyed, and its later device calls fail at once.
 *   - An initialisation that fails on one rank ends every rank's at once:
 *     the failing rank sends a notice (tag NOTICE_TAG on the backend's own
 *     MPI communicator) to every other, whose init wait also polls for it
 *     and aborts; then all ranks agree over MPI, so a rank whose init did
 *     complete aborts too (ncclCommFinalize would wait for the failed one).
 *   - A one-rank allreduce or broadcast in place is the identity: no NCCL
 *     call and no wait.
 *   - Host buffers never reach NCCL: cudaPointerGetAttributes sorts each
 *     buffer, and host ones take comm.c's host path (comm_host_*) on
 *     comm->mpi, the very code of the MPI backend, so a host reduction
 *     follows one rule (comm_reduce_local) on either backend.
 *
 * States and the functions that move between them:
 *
 *   (none) --comm_open_nccl--> INIT --wait_comm ok--> READY
 *   INIT --error / timeout--> BROKEN (ncclCommAbort) -> open fails
 *   READY --collective: enqueue, wait_stream ok--> READY
 *   READY --error / timeout--> BROKEN (ncclCommAbort)
 *   READY --nccl_close: ncclCommFinalize, wait_comm, ncclCommDestroy--> (none)
 *   BROKEN --nccl_close--> (none), nothing more called on the NCCL comm
 */
#include "parallel/comm_nccl.h"
#include "util/util.h"
#include "parallel/comm_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef FTRAIN_NCCL

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>
#include <time.h>

/* How long a wait spins before it sleeps between polls, and the sleeps
 * (nanoseconds): short at first, longer once the wait is a long one. */
#define POLL_SPINS 1000
#define POLL_LONG_SPINS 100000
#define POLL_SHORT_NS 20000L
#define POLL_LONG_NS 200000L
/* The message kept from the error that aborted the communicator. */
#define BROKEN_MSG_MAX 256
/* The tag of an initialisation failure's notice, and how long its sends may
 * take (they are small: eager, done at once). */
#define NOTICE_TAG 4242
#define NOTICE_SEND_S 5.0

typedef struct {
    ncclComm_t nccl;
    cudaStream_t stream;
    int own_stream;
    int ordinal;
    double timeout_s;
    int broken;          /* aborted: no more NCCL calls on nccl */
    char broken_msg[BROKEN_MSG_MAX];
    int64_t *dscratch;   /* one device element for the barrier */
} nccl_state_t;

/* Sleep a little between polls once a wait is not immediate. */
static void poll_pause(long spins)
{
    if (spins < POLL_SPINS)
        return;
    struct timespec pause = {0, spins < POLL_LONG_SPINS ? POLL_SHORT_NS : POLL_LONG_NS};
    nanosleep(&pause, NULL);
}

/* Abort the NCCL communicator (once) and record why for later calls. */
static void st_abort(nccl_state_t *st)
{
    if (st->broken)
        return;
    st->broken = 1;
    snprintf(st->broken_msg, sizeof st->broken_msg, "%.*s", (int)sizeof st->broken_msg - 1,
             comm_err_buf);
    if (st->nccl)
        ncclCommAbort(st->nccl);
    st->nccl = NULL;
}

/* Record an NCCL failure of `what`, abort, return COMM_EFAIL. */
static int nccl_fail(nccl_state_t *st, const char *what, ncclResult_t res)
{
    const char *detail = st->nccl ? ncclGetLastError(st->nccl) : NULL;
    comm_fail(COMM_EFAIL, "nccl: %s: %s%s%s", what, ncclGetErrorString(res),
              detail && detail[0] ? ": " : "", detail ? detail : "");
    st_abort(st);
    return COMM_EFAIL;
}

/* Record a CUDA failure of `what`, abort (when st), return COMM_EFAIL. */
static int cuda_fail(nccl_state_t *st, const char *what, cudaError_t cerr)
{
    comm_fail(COMM_EFAIL, "nccl: %s: %s", what, cudaGetErrorString(cerr));
    if (st)
        st_abort(st);
    return COMM_EFAIL;
}

static int timeout_fail(nccl_state_t *st, const char *what, const char *waiting)
{
    comm_fail(COMM_EFAIL,
              "nccl: %s: timed out after %.0f s waiting for %s (a rank is dead, "
              "missing or stuck)", what, st->timeout_s, waiting);
    st_abort(st);
    return COMM_EFAIL;
}

/* A notice from another rank, if one has come: @return its rank, or -1;
 * with the rank, comm_err_buf holds its message. */
static int take_notice(comm_t *comm, const char *what)
{
    int flag = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, NOTICE_TAG, comm->mpi, &flag, &status) != MPI_SUCCESS ||
        !flag)
        return -1;
    char text[BROKEN_MSG_MAX] = "";
    MPI_Recv(text, (int)sizeof text, MPI_CHAR, status.MPI_SOURCE, NOTICE_TAG, comm->mpi,
             MPI_STATUS_IGNORE);
    text[sizeof text - 1] = '\0';
    comm_fail(COMM_EFAIL, "nccl: %s failed on rank %d: %s", what, status.MPI_SOURCE, text);
    return status.MPI_SOURCE;
}

/* Wait until the communicator leaves ncclInProgress (init, an enqueue or
 * finalize), within the timeout.  With notices (an initialisation, comm
 * given), a notice that another rank's failed also ends the wait: the
 * communicator is aborted, *noticed set. */
static int wait_until_ready(nccl_state_t *st, const char *what, comm_t *notices, int *noticed)
{
    double deadline = util_mono_s() + st->timeout_s;
    for (long spins = 0;; spins++) {
        ncclResult_t async_err = ncclInProgress;
        ncclResult_t res = ncclCommGetAsyncError(st->nccl, &async_err);
        if (res != ncclSuccess)
            return nccl_fail(st, what, res);
        if (async_err == ncclSuccess)
            return COMM_OK;
        if (async_err != ncclInProgress)
            return nccl_fail(st, what, async_err);
        if (notices && take_notice(notices, what) >= 0) {
            *noticed = 1;
            st_abort(st);
            return COMM_EFAIL;
        }
        if (util_mono_s() > deadline)
            return timeout_fail(st, what, "every rank to join");
        poll_pause(spins);
    }
}

static int wait_comm(nccl_state_t *st, const char *what)
{
    return wait_until_ready(st, what, NULL, NULL);
}

/* After an enqueue returned res: wait for the collective to finish on the
 * stream, watching NCCL's asynchronous errors and the deadline. */
static int finish(nccl_state_t *st, const char *what, ncclResult_t res)
{
    int rc = COMM_OK;
    if (res == ncclInProgress)
        rc = wait_comm(st, what);
    else if (res != ncclSuccess)
        rc = nccl_fail(st, what, res);
    if (rc != COMM_OK)
        return rc;
    double deadline = util_mono_s() + st->timeout_s;
    for (long spins = 0;; spins++) {
        cudaError_t cerr = cudaStreamQuery(st->stream);
        if (cerr == cudaSuccess)
            return COMM_OK;
        if (cerr != cudaErrorNotReady)
            return cuda_fail(st, what, cerr);
        ncclResult_t async_err = ncclSuccess;
        ncclResult_t query = ncclCommGetAsyncError(st->nccl, &async_err);
        if (query != ncclSuccess)
            return nccl_fail(st, what, query);
        if (async_err != ncclSuccess && async_err != ncclInProgress)
            return nccl_fail(st, what, async_err);
        if (util_mono_s() > deadline)
            return timeout_fail(st, what, "the other ranks");
        poll_pause(spins);
    }
}

/* 1 when ptr is device (or managed) memory NCCL can use, 0 for host memory. */
static int on_device(const void *ptr)
{
    struct cudaPointerAttributes attr;
    memset(&attr, 0, sizeof attr);
    if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
        cudaGetLastError(); /* not a CUDA pointer: host memory */
        return 0;
    }
    return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

/* Which way a buffer goes: host buffers through MPI (comm_host_*, shared
 * with the MPI backend), device buffers through NCCL. */
enum { PATH_HOST = 1, PATH_DEVICE = 2 };

/* Fail fast on a communicator an earlier error aborted. */
static int check_usable(nccl_state_t *st, const char *what)
{
    if (!st->broken)
        return COMM_OK;
    return comm_fail(COMM_EFAIL, "nccl: %s: communicator aborted after an earlier error: %s",
                     what, st->broken_msg);
}

/* @return PATH_HOST, PATH_DEVICE, or COMM_EFAIL for a device buffer when
 * an earlier error aborted the communicator. */
static int pick_path(nccl_state_t *st, const void *buf, const char *what)
{
    if (!on_device(buf))
        return PATH_HOST;
    return check_usable(st, what) == COMM_OK ? PATH_DEVICE : COMM_EFAIL;
}

static int nccl_type(comm_dtype_t type, ncclDataType_t *datatype)
{
    switch (type) {
    case COMM_F32: *datatype = ncclFloat32; return 0;
    case COMM_F64: *datatype = ncclFloat64; return 0;
    case COMM_I64: *datatype = ncclInt64; return 0;
    case COMM_U8: *datatype = ncclUint8; return 0;
    }
    return -1;
}

/* ---- the backend ------------------------------------------------------- */

static int nccl_allreduce(comm_t *comm, void *buf, size_t n, comm_dtype_t type,
                          comm_op_t op)
{
    nccl_state_t *st = comm->backend;
    ncclDataType_t datatype;
    if (nccl_type(type, &datatype) != 0 || (op != COMM_SUM && op != COMM_MAX))
        return comm_fail(COMM_EINVAL, "nccl: allreduce: unknown type %d or op %d",
                         (int)type, (int)op);
    if (n == 0)
        return COMM_OK;
    if (!buf)
        return comm_fail(COMM_EINVAL, "nccl: allreduce: no buffer");
    int path = pick_path(st, buf, "ncclAllReduce");
    if (path == PATH_HOST)
        return comm_host_allreduce(comm, buf, n, type, op);
    if (path != PATH_DEVICE)
        return path;
    if (comm->size == 1)
        return COMM_OK; /* a sum or max over one rank, in place */
    ncclResult_t res = ncclAllReduce(buf, buf, n, datatype,
                                     op == COMM_MAX ? ncclMax : ncclSum, st->nccl,
                                     st->stream);
    return finish(st, "ncclAllReduce", res);
}

static int nccl_bcast(comm_t *comm, void *buf, size_t bytes, int root)
{
    nccl_state_t *st = comm->backend;
    if (root < 0 || root >= comm->size)
        return comm_fail(COMM_EINVAL, "nccl: broadcast: no rank %d", root);
    if (bytes == 0)
        return COMM_OK;
    if (!buf)
        return comm_fail(COMM_EINVAL, "nccl: broadcast: no buffer");
    int path = pick_path(st, buf, "ncclBroadcast");
    if (path == PATH_HOST)
        return comm_host_bcast(comm, buf, bytes, root);
    if (path != PATH_DEVICE)
        return path;
    if (comm->size == 1)
        return COMM_OK; /* the root is the only rank */
    ncclResult_t res = ncclBroadcast(buf, buf, bytes, ncclUint8, root, st->nccl,
                                     st->stream);
    return finish(st, "ncclBroadcast", res);
}

static int nccl_allgather(comm_t *comm, const void *send, void *recv, size_t bytes)
{
    nccl_state_t *st = comm->backend;
    if (bytes == 0)
        return COMM_OK;
    if (!send || !recv)
        return comm_fail(COMM_EINVAL, "nccl: allgather: no buffer");
    if (on_device(send) != on_device(recv))
        return comm_fail(COMM_EINVAL,
                         "nccl: allgather: send and receive buffers must both be on the "
                         "device or both on the host");
    int path = pick_path(st, send, "ncclAllGather");
    if (path == PATH_HOST)
        return comm_host_allgather(comm, send, recv, bytes);
    if (path != PATH_DEVICE)
        return path;
    ncclResult_t res = ncclAllGather(send, recv, bytes, ncclUint8, st->nccl, st->stream);
    return finish(st, "ncclAllGather", res);
}

/* A barrier is a one-element device allreduce: it also proves NCCL works. */
static int nccl_barrier(comm_t *comm)
{
    nccl_state_t *st = comm->backend;
    if (check_usable(st, "barrier") != COMM_OK)
        return COMM_EFAIL;
    ncclResult_t res = ncclAllReduce(st->dscratch, st->dscratch, 1, ncclInt64, ncclSum,
                                     st->nccl, st->stream);
    return finish(st, "barrier (ncclAllReduce)", res);
}

/* Release everything; finalize + destroy only a healthy communicator. */
static void nccl_close(comm_t *comm)
{
    nccl_state_t *st = comm->backend;
    if (st) {
        if (st->nccl && !st->broken) {
            ncclResult_t res = ncclCommFinalize(st->nccl);
            int rc = res == ncclSuccess || res == ncclInProgress
                         ? wait_comm(st, "ncclCommFinalize")
                         : nccl_fail(st, "ncclCommFinalize", res);
            if (rc == COMM_OK)
                ncclCommDestroy(st->nccl);
            st->nccl = NULL;
        }
        if (st->dscratch)
            cudaFree(st->dscratch);
        if (st->own_stream && st->stream)
            cudaStreamDestroy(st->stream);
        free(st);
        comm->backend = NULL;
    }
    if (comm->mpi != MPI_COMM_NULL)
        MPI_Comm_free(&comm->mpi);
}

/* From another thread, the process about to end: abort the NCCL
 * communicator the training thread may be waiting in (NCCL allows that
 * from a second thread); its state is left as it is, never freed. */
static void nccl_abort(comm_t *comm)
{
    nccl_state_t *st = comm->backend;
    if (st && st->nccl && !st->broken)
        ncclCommAbort(st->nccl);
}

static const comm_ops_t comm_nccl_ops = {
    nccl_allreduce, nccl_bcast, nccl_allgather, nccl_barrier, nccl_close, nccl_abort,
};

/* ---- opening: local set-up, agreement, then NCCL ------------------------ */

/* This rank's GPU set-up: device, stream, the barrier's scratch element;
 * rank 0 also makes the unique id.  @return 0, or 1 with comm_err_buf set. */
static int local_setup(comm_t *comm, nccl_state_t *st, void *stream, ncclUniqueId *id)
{
    cudaError_t cerr = cudaSetDevice(st->ordinal);
    if (cerr == cudaSuccess && stream) {
        st->stream = (cudaStream_t)stream;
    } else if (cerr == cudaSuccess) {
        cerr = cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking);
        st->own_stream = cerr == cudaSuccess;
    }
    if (cerr == cudaSuccess)
        cerr = cudaMalloc((void **)&st->dscratch, sizeof *st->dscratch);
    if (cerr == cudaSuccess)
        cerr = cudaMemsetAsync(st->dscratch, 0, sizeof *st->dscratch, st->stream);
    if (cerr != cudaSuccess) {
        cuda_fail(NULL, "GPU setup", cerr);
        return 1;
    }
    if (comm->rank != 0)
        return 0;
    ncclResult_t res = ncclGetUniqueId(id);
    if (res != ncclSuccess) {
        comm_fail(COMM_EFAIL, "nccl: ncclGetUniqueId: %s", ncclGetErrorString(res));
        return 1;
    }
    return 0;
}

/* Every rank's set-up is agreed on over MPI before NCCL starts, so a local
 * error never leaves the others waiting; then rank 0's id is broadcast.
 * @return COMM_OK, or COMM_EFAIL on every rank. */
static int agree_and_share_id(comm_t *comm, int local_bad, ncclUniqueId *id)
{
    int64_t any_bad = local_bad;
    int mpirc = MPI_Allreduce(MPI_IN_PLACE, &any_bad, 1, MPI_INT64_T, MPI_MAX, comm->mpi);
    if (mpirc != MPI_SUCCESS)
        return comm_mpi_fail("MPI_Allreduce (nccl setup agreement)", mpirc);
    if (any_bad)
        return local_bad ? COMM_EFAIL
                         : comm_fail(COMM_EFAIL,
                                     "nccl: GPU or NCCL setup failed on another rank");
    mpirc = MPI_Bcast(id, (int)sizeof *id, MPI_BYTE, 0, comm->mpi);
    if (mpirc != MPI_SUCCESS)
        return comm_mpi_fail("MPI_Bcast (nccl unique id)", mpirc);
    return COMM_OK;
}

/* Tell every other rank that this rank's NCCL initialisation failed, with
 * the message; bounded (small messages go eagerly). */
static void send_notice(comm_t *comm, const char *msg)
{
    char text[BROKEN_MSG_MAX];
    snprintf(text, sizeof text, "%.*s", (int)sizeof text - 1, msg);
    MPI_Request *req = calloc((size_t)comm->size, sizeof *req);
    if (!req)
        return;
    int n = 0;
    for (int r = 0; r < comm->size; r++)
        if (r != comm->rank &&
            MPI_Isend(text, (int)sizeof text, MPI_CHAR, r, NOTICE_TAG, comm->mpi, &req[n]) ==
                MPI_SUCCESS)
            n++;
    double deadline = util_mono_s() + NOTICE_SEND_S;
    int done = 0;
    for (long spins = 0; !done && util_mono_s() < deadline; spins++) {
        if (MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
            break;
        poll_pause(spins);
    }
    for (int i = 0; !done && i < n; i++) /* a rank gone: leave it */
        if (req[i] != MPI_REQUEST_NULL)
            MPI_Request_free(&req[i]);
    free(req);
}


/* Join the non-blocking NCCL communicator and wait for every rank; a
 * failure on any rank fails every rank's open within moments (see the
 * invariants above). */
static int join_nccl(comm_t *comm, nccl_state_t *st, ncclUniqueId id)
{
    static const char what[] = "ncclCommInitRankConfig";
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    int noticed = 0;
    ncclResult_t res = ncclCommInitRankConfig(&st->nccl, comm->size, id, comm->rank, &config);
    int rc = res != ncclSuccess && res != ncclInProgress ? nccl_fail(st, what, res)
                                                         : wait_until_ready(st, what, comm, &noticed);
    if (rc != COMM_OK && !noticed && comm->size > 1)
        send_notice(comm, comm_err_buf);
    char first[BROKEN_MSG_MAX] = ""; /* the first reason: this rank's, or a notice's */
    if (rc != COMM_OK)
        snprintf(first, sizeof first, "%.*s", (int)sizeof first - 1, comm_err_buf);
    int64_t any_bad = rc != COMM_OK;
    int mpirc = MPI_Allreduce(MPI_IN_PLACE, &any_bad, 1, MPI_INT64_T, MPI_MAX, comm->mpi);
    while (take_notice(comm, what) >= 0) /* late ones: nothing left unreceived */
        if (!first[0])
            snprintf(first, sizeof first, "%.*s", (int)sizeof first - 1, comm_err_buf);
    if (mpirc != MPI_SUCCESS) {
        st_abort(st);
        return comm_mpi_fail("MPI_Allreduce (nccl init agreement)", mpirc);
    }
    if (any_bad || rc != COMM_OK) {
        rc = first[0] ? comm_fail(COMM_EFAIL, "%s", first)
                      : comm_fail(COMM_EFAIL, "nccl: %s failed on another rank", what);
    }
    if (rc != COMM_OK)
        st_abort(st);
    return rc;
}

int comm_open_nccl(comm_t **out, const world_t *world, int ordinal, void *stream,
                   double timeout_s)
{
    ncclUniqueId id;

    if (!out)
        return comm_fail(COMM_EINVAL, "nccl: no place for the result");
    *out = NULL;
    if (!world || !world->mpi_world || ordinal < 0 || !(timeout_s > 0))
        return comm_fail(COMM_EINVAL, "nccl: bad arguments (GPU %d, timeout %g s)", ordinal,
                         timeout_s);
    memset(&id, 0, sizeof id);
    comm_t *comm = calloc(1, sizeof *comm);
    nccl_state_t *st = calloc(1, sizeof *st);
    if (!comm || !st) {
        free(comm);
        free(st);
        return comm_fail(COMM_EFAIL, "nccl: out of memory");
    }
    comm->ops = &comm_nccl_ops;
    comm->backend = st;
    comm->mpi = MPI_COMM_NULL;
    st->ordinal = ordinal;
    st->timeout_s = timeout_s;
    int rc = COMM_OK;
    int mpirc = MPI_Comm_dup(*(MPI_Comm *)world->mpi_world, &comm->mpi);
    if (mpirc != MPI_SUCCESS) {
        comm->mpi = MPI_COMM_NULL;
        rc = comm_mpi_fail("MPI_Comm_dup", mpirc);
    } else {
        MPI_Comm_set_errhandler(comm->mpi, MPI_ERRORS_RETURN);
        MPI_Comm_rank(comm->mpi, &comm->rank);
        MPI_Comm_size(comm->mpi, &comm->size);
        rc = agree_and_share_id(comm, local_setup(comm, st, stream, &id), &id);
    }
    if (rc == COMM_OK)
        rc = join_nccl(comm, st, id);
    if (rc != COMM_OK) {
        if (st->nccl && !st->broken)
            st_abort(st);
        nccl_close(comm);
        free(comm);
        return rc;
    }
    *out = comm;
    return COMM_OK;
}

#else /* !FTRAIN_NCCL */

int comm_open_nccl(comm_t **out, const world_t *world, int ordinal, void *stream,
                   double timeout_s)
{
    (void)world;
    (void)ordinal;
    (void)stream;
    (void)timeout_s;
    if (out)
        *out = NULL;
    return comm_fail(COMM_EFAIL,
                     "nccl: built without NCCL (rebuild with CUDA and NCCL available)");
}

#endif

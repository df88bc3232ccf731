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
 *   - Host buffers never reach NCCL: cudaPointerGetAttributes sorts each
 *     buffer, and host ones take the MPI path on c->mpi.
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
#include "ftrain/comm_nccl.h"
#include "comm_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef FTRAIN_NCCL

#include <cuda_runtime_api.h>
#include <limits.h>
#include <mpi.h>
#include <nccl.h>
#include <time.h>

#define NCCL_MPI_CHUNK ((size_t)1 << 28)

typedef struct {
    ncclComm_t nccl;
    cudaStream_t stream;
    int own_stream;
    int ordinal;
    double timeout_s;
    int broken;          /* aborted: no more NCCL calls on nccl */
    char broken_msg[256];
    int64_t *dscratch;   /* one device element for the barrier */
} nccl_state_t;

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Sleep a little between polls once a wait is not immediate. */
static void poll_pause(long spins)
{
    if (spins < 1000)
        return;
    struct timespec d = {0, spins < 100000 ? 20000L : 200000L};
    nanosleep(&d, NULL);
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
static int nccl_fail(nccl_state_t *st, const char *what, ncclResult_t r)
{
    const char *detail = st->nccl ? ncclGetLastError(st->nccl) : NULL;
    snprintf(comm_err_buf, sizeof comm_err_buf, "nccl: %s: %s%s%s", what,
             ncclGetErrorString(r), detail && detail[0] ? ": " : "",
             detail ? detail : "");
    st_abort(st);
    return COMM_EFAIL;
}

/* Record a CUDA failure of `what`, abort, return COMM_EFAIL. */
static int cuda_fail(nccl_state_t *st, const char *what, cudaError_t e)
{
    snprintf(comm_err_buf, sizeof comm_err_buf, "nccl: %s: %s", what,
             cudaGetErrorString(e));
    if (st)
        st_abort(st);
    return COMM_EFAIL;
}

static int timeout_fail(nccl_state_t *st, const char *what, const char *waiting)
{
    snprintf(comm_err_buf, sizeof comm_err_buf,
             "nccl: %s: timed out after %.0f s waiting for %s (a rank is dead, "
             "missing or stuck)", what, st->timeout_s, waiting);
    st_abort(st);
    return COMM_EFAIL;
}

static int mpi_fail(const char *what, int mpirc)
{
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(mpirc, msg, &len);
    snprintf(comm_err_buf, sizeof comm_err_buf, "%s: %s", what, msg);
    return COMM_EFAIL;
}

/* Wait until the communicator leaves ncclInProgress (init, an enqueue or
 * finalize), within the timeout. */
static int wait_comm(nccl_state_t *st, const char *what)
{
    double deadline = mono_s() + st->timeout_s;
    for (long spins = 0;; spins++) {
        ncclResult_t a = ncclInProgress;
        ncclResult_t r = ncclCommGetAsyncError(st->nccl, &a);
        if (r != ncclSuccess)
            return nccl_fail(st, what, r);
        if (a == ncclSuccess)
            return COMM_OK;
        if (a != ncclInProgress)
            return nccl_fail(st, what, a);
        if (mono_s() > deadline)
            return timeout_fail(st, what, "every rank to join");
        poll_pause(spins);
    }
}

/* After an enqueue returned r: wait for the collective to finish on the
 * stream, watching NCCL's asynchronous errors and the deadline. */
static int finish(nccl_state_t *st, const char *what, ncclResult_t r)
{
    int rc = COMM_OK;
    if (r == ncclInProgress)
        rc = wait_comm(st, what);
    else if (r != ncclSuccess)
        rc = nccl_fail(st, what, r);
    if (rc != COMM_OK)
        return rc;
    double deadline = mono_s() + st->timeout_s;
    for (long spins = 0;; spins++) {
        cudaError_t e = cudaStreamQuery(st->stream);
        if (e == cudaSuccess)
            return COMM_OK;
        if (e != cudaErrorNotReady)
            return cuda_fail(st, what, e);
        ncclResult_t a = ncclSuccess;
        ncclResult_t q = ncclCommGetAsyncError(st->nccl, &a);
        if (q != ncclSuccess)
            return nccl_fail(st, what, q);
        if (a != ncclSuccess && a != ncclInProgress)
            return nccl_fail(st, what, a);
        if (mono_s() > deadline)
            return timeout_fail(st, what, "the other ranks");
        poll_pause(spins);
    }
}

/* Fail fast on a communicator an earlier error aborted. */
static int check_usable(nccl_state_t *st, const char *what)
{
    if (!st->broken)
        return COMM_OK;
    snprintf(comm_err_buf, sizeof comm_err_buf,
             "nccl: %s: communicator aborted after an earlier error: %s", what,
             st->broken_msg);
    return COMM_EFAIL;
}

/* 1 when p is device (or managed) memory NCCL can use, 0 for host memory. */
static int on_device(const void *p)
{
    struct cudaPointerAttributes a;
    memset(&a, 0, sizeof a);
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError(); /* not a CUDA pointer: host memory */
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

static int nccl_type(comm_dtype_t t, ncclDataType_t *dt, MPI_Datatype *mt,
                     size_t *size)
{
    switch (t) {
    case COMM_F32: *dt = ncclFloat32; *mt = MPI_FLOAT; *size = 4; return 0;
    case COMM_F64: *dt = ncclFloat64; *mt = MPI_DOUBLE; *size = 8; return 0;
    case COMM_I64: *dt = ncclInt64; *mt = MPI_INT64_T; *size = 8; return 0;
    case COMM_U8: *dt = ncclUint8; *mt = MPI_UINT8_T; *size = 1; return 0;
    }
    return -1;
}

/* ---- host buffers: MPI, as comm.c ----------------------------------------- */

static int host_allreduce(comm_t *c, void *buf, size_t n, MPI_Datatype mt,
                          size_t es, comm_op_t op)
{
    MPI_Op mop = op == COMM_MAX ? MPI_MAX : MPI_SUM;
    for (size_t done = 0; done < n;) {
        size_t k = n - done < NCCL_MPI_CHUNK ? n - done : NCCL_MPI_CHUNK;
        int rc = MPI_Allreduce(MPI_IN_PLACE, (char *)buf + done * es, (int)k, mt,
                               mop, c->mpi);
        if (rc != MPI_SUCCESS)
            return mpi_fail("MPI_Allreduce", rc);
        done += k;
    }
    return COMM_OK;
}

static int host_bcast(comm_t *c, void *buf, size_t bytes, int root)
{
    for (size_t done = 0; done < bytes;) {
        size_t k = bytes - done < NCCL_MPI_CHUNK ? bytes - done : NCCL_MPI_CHUNK;
        int rc = MPI_Bcast((char *)buf + done, (int)k, MPI_BYTE, root, c->mpi);
        if (rc != MPI_SUCCESS)
            return mpi_fail("MPI_Bcast", rc);
        done += k;
    }
    return COMM_OK;
}

/* ---- the backend ------------------------------------------------------- */

static int nccl_allreduce(comm_t *c, void *buf, size_t n, comm_dtype_t t,
                          comm_op_t op)
{
    nccl_state_t *st = c->backend;
    ncclDataType_t dt;
    MPI_Datatype mt;
    size_t es = 0;
    if (nccl_type(t, &dt, &mt, &es) != 0 || (op != COMM_SUM && op != COMM_MAX))
        return COMM_EINVAL;
    if (n == 0)
        return COMM_OK;
    if (!buf)
        return COMM_EINVAL;
    if (!on_device(buf))
        return host_allreduce(c, buf, n, mt, es, op);
    if (check_usable(st, "ncclAllReduce") != COMM_OK)
        return COMM_EFAIL;
    ncclResult_t r = ncclAllReduce(buf, buf, n, dt, op == COMM_MAX ? ncclMax : ncclSum,
                                   st->nccl, st->stream);
    return finish(st, "ncclAllReduce", r);
}

static int nccl_bcast(comm_t *c, void *buf, size_t bytes, int root)
{
    nccl_state_t *st = c->backend;
    if (root < 0 || root >= c->size)
        return COMM_EINVAL;
    if (bytes == 0)
        return COMM_OK;
    if (!buf)
        return COMM_EINVAL;
    if (!on_device(buf))
        return host_bcast(c, buf, bytes, root);
    if (check_usable(st, "ncclBroadcast") != COMM_OK)
        return COMM_EFAIL;
    ncclResult_t r = ncclBroadcast(buf, buf, bytes, ncclUint8, root, st->nccl,
                                   st->stream);
    return finish(st, "ncclBroadcast", r);
}

static int nccl_allgather(comm_t *c, const void *send, void *recv, size_t bytes)
{
    nccl_state_t *st = c->backend;
    if (bytes == 0)
        return COMM_OK;
    if (!send || !recv)
        return COMM_EINVAL;
    int ds = on_device(send), dr = on_device(recv);
    if (ds != dr) {
        snprintf(comm_err_buf, sizeof comm_err_buf,
                 "nccl: allgather: send and receive buffers must both be on the "
                 "device or both on the host");
        return COMM_EINVAL;
    }
    if (!ds) {
        if (bytes > INT_MAX)
            return COMM_EINVAL;
        int rc = MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes,
                               MPI_BYTE, c->mpi);
        return rc == MPI_SUCCESS ? COMM_OK : mpi_fail("MPI_Allgather", rc);
    }
    if (check_usable(st, "ncclAllGather") != COMM_OK)
        return COMM_EFAIL;
    ncclResult_t r = ncclAllGather(send, recv, bytes, ncclUint8, st->nccl,
                                   st->stream);
    return finish(st, "ncclAllGather", r);
}

/* A barrier is a one-element device allreduce: it also proves NCCL works. */
static int nccl_barrier(comm_t *c)
{
    nccl_state_t *st = c->backend;
    if (check_usable(st, "barrier") != COMM_OK)
        return COMM_EFAIL;
    ncclResult_t r = ncclAllReduce(st->dscratch, st->dscratch, 1, ncclInt64,
                                   ncclSum, st->nccl, st->stream);
    return finish(st, "barrier (ncclAllReduce)", r);
}

/* Release everything; finalize + destroy only a healthy communicator. */
static void nccl_close(comm_t *c)
{
    nccl_state_t *st = c->backend;
    if (st) {
        if (st->nccl && !st->broken) {
            ncclResult_t r = ncclCommFinalize(st->nccl);
            int rc = r == ncclSuccess || r == ncclInProgress
                         ? wait_comm(st, "ncclCommFinalize")
                         : nccl_fail(st, "ncclCommFinalize", r);
            if (rc == COMM_OK)
                ncclCommDestroy(st->nccl);
            st->nccl = NULL;
        }
        if (st->dscratch)
            cudaFree(st->dscratch);
        if (st->own_stream && st->stream)
            cudaStreamDestroy(st->stream);
        free(st);
        c->backend = NULL;
    }
    if (c->mpi != MPI_COMM_NULL)
        MPI_Comm_free(&c->mpi);
}

static const comm_ops_t comm_nccl_ops = {
    nccl_allreduce, nccl_bcast, nccl_allgather, nccl_barrier, nccl_close,
};

int comm_open_nccl(comm_t **out, const world_t *w, int ordinal, void *stream,
                   double timeout_s)
{
    int rc = COMM_OK;
    comm_t *c = NULL;
    nccl_state_t *st = NULL;
    ncclUniqueId id;
    int64_t local_bad = 0, any_bad = 0;
    cudaError_t e = cudaSuccess;
    ncclResult_t r = ncclSuccess;

    if (!out)
        return COMM_EINVAL;
    *out = NULL;
    if (!w || !w->mpi_world || ordinal < 0 || !(timeout_s > 0)) {
        snprintf(comm_err_buf, sizeof comm_err_buf,
                 "nccl: bad arguments (GPU %d, timeout %g s)", ordinal, timeout_s);
        return COMM_EINVAL;
    }
    memset(&id, 0, sizeof id);
    c = calloc(1, sizeof *c);
    st = calloc(1, sizeof *st);
    if (!c || !st) {
        free(c);
        free(st);
        snprintf(comm_err_buf, sizeof comm_err_buf, "nccl: out of memory");
        return COMM_EFAIL;
    }
    c->ops = &comm_nccl_ops;
    c->backend = st;
    c->mpi = MPI_COMM_NULL;
    st->ordinal = ordinal;
    st->timeout_s = timeout_s;
    int mrc = MPI_Comm_dup(*(MPI_Comm *)w->mpi_world, &c->mpi);
    if (mrc != MPI_SUCCESS) {
        c->mpi = MPI_COMM_NULL;
        rc = mpi_fail("MPI_Comm_dup", mrc);
        goto fail;
    }
    MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->mpi, &c->rank);
    MPI_Comm_size(c->mpi, &c->size);

    /* Local setup first; any rank's failure is agreed on over MPI before
     * NCCL starts, so a local error never leaves the others waiting. */
    e = cudaSetDevice(ordinal);
    if (e == cudaSuccess) {
        if (stream) {
            st->stream = (cudaStream_t)stream;
        } else {
            e = cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking);
            st->own_stream = e == cudaSuccess;
        }
    }
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&st->dscratch, sizeof *st->dscratch);
    if (e == cudaSuccess)
        e = cudaMemsetAsync(st->dscratch, 0, sizeof *st->dscratch, st->stream);
    if (e != cudaSuccess) {
        cuda_fail(NULL, "GPU setup", e);
        local_bad = 1;
    }
    if (c->rank == 0 && !local_bad) {
        r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) {
            snprintf(comm_err_buf, sizeof comm_err_buf, "nccl: ncclGetUniqueId: %s",
                     ncclGetErrorString(r));
            local_bad = 1;
        }
    }
    any_bad = local_bad;
    mrc = MPI_Allreduce(MPI_IN_PLACE, &any_bad, 1, MPI_INT64_T, MPI_MAX, c->mpi);
    if (mrc != MPI_SUCCESS) {
        rc = mpi_fail("MPI_Allreduce (nccl setup agreement)", mrc);
        goto fail;
    }
    if (any_bad) {
        if (!local_bad)
            snprintf(comm_err_buf, sizeof comm_err_buf,
                     "nccl: GPU or NCCL setup failed on another rank");
        rc = COMM_EFAIL;
        goto fail;
    }
    mrc = MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, c->mpi);
    if (mrc != MPI_SUCCESS) {
        rc = mpi_fail("MPI_Bcast (nccl unique id)", mrc);
        goto fail;
    }

    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    r = ncclCommInitRankConfig(&st->nccl, c->size, id, c->rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        rc = nccl_fail(st, "ncclCommInitRankConfig", r);
        goto fail;
    }
    if ((rc = wait_comm(st, "ncclCommInitRankConfig")) != COMM_OK)
        goto fail;
    *out = c;
    return COMM_OK;

fail:
    if (st->nccl && !st->broken)
        st_abort(st);
    nccl_close(c);
    free(c);
    return rc;
}

#else /* !FTRAIN_NCCL */

int comm_open_nccl(comm_t **out, const world_t *w, int ordinal, void *stream,
                   double timeout_s)
{
    (void)w;
    (void)ordinal;
    (void)stream;
    (void)timeout_s;
    if (out)
        *out = NULL;
    snprintf(comm_err_buf, sizeof comm_err_buf,
             "nccl: built without NCCL (rebuild with CUDA and NCCL available)");
    return COMM_EFAIL;
}

#endif

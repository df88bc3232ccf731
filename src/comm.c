/*
 * comm.c - collectives over MPI behind the comm.h interface.
 *
 * The comm_t holds a table of backend functions; this file provides the MPI
 * backend (host buffers).  Large buffers are cut into pieces of at most
 * COMM_CHUNK elements because MPI counts are int.
 */
#include "ftrain/comm.h"
#include "comm_internal.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define COMM_CHUNK ((size_t)1 << 28)

_Thread_local char comm_err_buf[COMM_ERR_MAX];

static int comm_mpi_fail(const char *what, int mpirc)
{
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(mpirc, msg, &len);
    snprintf(comm_err_buf, sizeof comm_err_buf, "%s: %s", what, msg);
    return COMM_EFAIL;
}

static MPI_Datatype comm_mpi_type(comm_dtype_t t, size_t *size)
{
    switch (t) {
    case COMM_F32: *size = 4; return MPI_FLOAT;
    case COMM_F64: *size = 8; return MPI_DOUBLE;
    case COMM_I64: *size = 8; return MPI_INT64_T;
    case COMM_U8: *size = 1; return MPI_UINT8_T;
    }
    *size = 0;
    return MPI_DATATYPE_NULL;
}

/* MAX of floating point values where a NaN on any rank wins.  MPI_MAX makes
 * no such promise (Open MPI computes a > b ? a : b, so a NaN survives only
 * on the last rank), and the trainer's divergence vote needs it. */
static void nan_max(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    if (*dt == MPI_DOUBLE) {
        const double *a = in;
        double *b = inout;
        for (int i = 0; i < *len; i++)
            if (a[i] != a[i] || a[i] > b[i])
                b[i] = a[i];
    } else {
        const float *a = in;
        float *b = inout;
        for (int i = 0; i < *len; i++)
            if (a[i] != a[i] || a[i] > b[i])
                b[i] = a[i];
    }
}

static MPI_Op nan_max_op = MPI_OP_NULL; /* made on first use (main thread) */

static int mpi_allreduce(comm_t *c, void *buf, size_t n, comm_dtype_t t, comm_op_t op)
{
    size_t es = 0;
    MPI_Datatype dt = comm_mpi_type(t, &es);
    if (dt == MPI_DATATYPE_NULL)
        return COMM_EINVAL;
    MPI_Op mop = op == COMM_MAX ? MPI_MAX : MPI_SUM;
    if (op == COMM_MAX && (t == COMM_F32 || t == COMM_F64)) {
        if (nan_max_op == MPI_OP_NULL) {
            int rc = MPI_Op_create(nan_max, 1, &nan_max_op);
            if (rc != MPI_SUCCESS)
                return comm_mpi_fail("MPI_Op_create", rc);
        }
        mop = nan_max_op;
    }
    for (size_t done = 0; done < n;) {
        size_t k = n - done < COMM_CHUNK ? n - done : COMM_CHUNK;
        int rc = MPI_Allreduce(MPI_IN_PLACE, (char *)buf + done * es, (int)k, dt,
                               mop, c->mpi);
        if (rc != MPI_SUCCESS)
            return comm_mpi_fail("MPI_Allreduce", rc);
        done += k;
    }
    return COMM_OK;
}

static int mpi_bcast(comm_t *c, void *buf, size_t bytes, int root)
{
    for (size_t done = 0; done < bytes;) {
        size_t k = bytes - done < COMM_CHUNK ? bytes - done : COMM_CHUNK;
        int rc = MPI_Bcast((char *)buf + done, (int)k, MPI_BYTE, root, c->mpi);
        if (rc != MPI_SUCCESS)
            return comm_mpi_fail("MPI_Bcast", rc);
        done += k;
    }
    return COMM_OK;
}

static int mpi_allgather(comm_t *c, const void *send, void *recv, size_t bytes)
{
    if (bytes > INT_MAX)
        return COMM_EINVAL;
    int rc = MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE,
                           c->mpi);
    return rc == MPI_SUCCESS ? COMM_OK : comm_mpi_fail("MPI_Allgather", rc);
}

static int mpi_barrier(comm_t *c)
{
    int rc = MPI_Barrier(c->mpi);
    return rc == MPI_SUCCESS ? COMM_OK : comm_mpi_fail("MPI_Barrier", rc);
}

static void mpi_close(comm_t *c)
{
    if (c->mpi != MPI_COMM_NULL)
        MPI_Comm_free(&c->mpi);
}

static const comm_ops_t comm_mpi_ops = {
    mpi_allreduce, mpi_bcast, mpi_allgather, mpi_barrier, mpi_close,
};

int comm_open_mpi(comm_t **out, const world_t *w)
{
    *out = NULL;
    comm_t *c = calloc(1, sizeof *c);
    if (!c)
        return COMM_EFAIL;
    int rc = MPI_Comm_dup(*(MPI_Comm *)w->mpi_world, &c->mpi);
    if (rc != MPI_SUCCESS) {
        free(c);
        return comm_mpi_fail("MPI_Comm_dup", rc);
    }
    MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN);
    c->ops = &comm_mpi_ops;
    MPI_Comm_rank(c->mpi, &c->rank);
    MPI_Comm_size(c->mpi, &c->size);
    *out = c;
    return COMM_OK;
}

void comm_close(comm_t *c)
{
    if (!c)
        return;
    c->ops->close(c);
    free(c);
}

int comm_rank(const comm_t *c) { return c->rank; }
int comm_size(const comm_t *c) { return c->size; }

int comm_allreduce(comm_t *c, void *buf, size_t n, comm_dtype_t t, comm_op_t op)
{
    return c->ops->allreduce(c, buf, n, t, op);
}

int comm_bcast(comm_t *c, void *buf, size_t bytes, int root)
{
    return c->ops->bcast(c, buf, bytes, root);
}

int comm_allgather(comm_t *c, const void *send, void *recv, size_t bytes)
{
    return c->ops->allgather(c, send, recv, bytes);
}

int comm_allgatherv_inplace(comm_t *c, void *recv, const uint64_t *counts,
                            const uint64_t *displs)
{
    /* Host buffers with int-sized pieces: one MPI_Allgatherv, whose
     * algorithms move each byte far fewer times than a broadcast per rank. */
    int fits = c->mpi != MPI_COMM_NULL;
    for (int r = 0; r < c->size && fits; r++)
        fits = counts[r] <= INT_MAX && displs[r] <= INT_MAX;
    int *cnt = fits ? malloc((size_t)c->size * sizeof *cnt) : NULL;
    int *dsp = fits ? malloc((size_t)c->size * sizeof *dsp) : NULL;
    /* No room for the counts on some rank: every rank takes the broadcasts
     * below, which need none (a rank that returned, or took the other path
     * alone, would leave the others waiting in a collective). */
    if (fits && comm_any_failed(c, !cnt || !dsp)) {
        free(cnt);
        free(dsp);
        cnt = dsp = NULL;
        fits = 0;
    }
    if (fits) {
        int rc = MPI_SUCCESS;
        for (int r = 0; rc == MPI_SUCCESS && r < c->size; r++) {
            cnt[r] = (int)counts[r];
            dsp[r] = (int)displs[r];
        }
        if (rc == MPI_SUCCESS)
            rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, cnt, dsp,
                                MPI_BYTE, c->mpi);
        free(cnt);
        free(dsp);
        return rc == MPI_SUCCESS ? COMM_OK : comm_mpi_fail("MPI_Allgatherv", rc);
    }
    /* Larger pieces: one broadcast per rank's piece, chunked for any size. */
    for (int r = 0; r < c->size; r++) {
        int rc = comm_bcast(c, (char *)recv + displs[r], counts[r], r);
        if (rc != COMM_OK)
            return rc;
    }
    return COMM_OK;
}

int comm_barrier(comm_t *c) { return c->ops->barrier(c); }

/* A blocking MPI collective busy-polls (Open MPI yields at best): a rank that
 * finished its shard early would take a core from the ranks still
 * compressing on the same node.  So: a non-blocking barrier, tested with
 * sleeps that grow from 20 us to 1 ms. */
int comm_wait_all(comm_t *c)
{
    if (c->size <= 1)
        return COMM_OK;
    if (c->mpi == MPI_COMM_NULL)
        return comm_barrier(c);
    MPI_Request req;
    int rc = MPI_Ibarrier(c->mpi, &req), done = 0;
    if (rc != MPI_SUCCESS)
        return comm_mpi_fail("MPI_Ibarrier", rc);
    long ns = 20000;
    while ((rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE)) == MPI_SUCCESS && !done) {
        struct timespec ts = {0, ns};
        nanosleep(&ts, NULL);
        ns = ns < 1000000 ? ns * 2 : 1000000;
    }
    return rc == MPI_SUCCESS ? COMM_OK : comm_mpi_fail("MPI_Test(MPI_Ibarrier)", rc);
}

int comm_any_failed(comm_t *c, int local_rc)
{
    int64_t v = local_rc != 0;
    int rc = comm_allreduce(c, &v, 1, COMM_I64, COMM_MAX);
    if (rc != COMM_OK)
        return rc;
    return v != 0;
}

const char *comm_strerror(int err)
{
    switch (err) {
    case COMM_OK: return "success";
    case COMM_EFAIL: return "collective failed";
    case COMM_EINVAL: return "invalid argument";
    }
    return "unknown error";
}

const char *comm_last_error(void) { return comm_err_buf; }

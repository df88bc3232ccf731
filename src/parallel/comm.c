/*
 * comm.c - collectives over MPI behind the comm.h interface.
 *
 * The comm_t holds a table of backend functions; this file provides the MPI
 * backend, whose collectives work on host buffers (comm_host_*), and the
 * NCCL backend uses the same ones for its host buffers, so a reduction
 * follows one rule (comm_reduce_local) whichever backend runs it.  Large
 * buffers are cut into pieces of at most COMM_CHUNK elements because MPI
 * counts are int.  It also holds the nonblocking exchanges (comm_xfer_*,
 * the node-local tier's partner copies) and the questions about MPI's
 * threads, so that no other part of the trainer calls MPI for them.
 */
#include "parallel/comm.h"
#include "parallel/comm_internal.h"

#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/util.h"

#define COMM_CHUNK ((size_t)1 << 28)

/* comm_wait_all's sleeps between tests of its barrier, in nanoseconds:
 * from the first, doubling up to the last. */
#define COMM_WAIT_FIRST_NS 20000L
#define COMM_WAIT_MAX_NS 1000000L

_Thread_local char comm_err_buf[COMM_ERR_MAX];

int comm_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(comm_err_buf, sizeof comm_err_buf, fmt, ap);
    va_end(ap);
    return code;
}

int comm_mpi_fail(const char *what, int mpirc)
{
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(mpirc, msg, &len);
    if (!what)
        return comm_fail(COMM_EFAIL, "%s", msg);
    return comm_fail(COMM_EFAIL, "%s: %s", what, msg);
}

/* ---- the element rule of host reductions -------------------------------- */

/* MAX of two doubles as comm.h describes it: a NaN wins, +0 beats -0. */
static double max_f64(double acc, double other)
{
    if (isnan(acc))
        return acc;
    if (isnan(other) || other > acc || (other == acc && signbit(acc) && !signbit(other)))
        return other;
    return acc;
}

/* The same for floats (no detour through double: a NaN's bits are kept). */
static float max_f32(float acc, float other)
{
    if (isnan(acc))
        return acc;
    if (isnan(other) || other > acc || (other == acc && signbit(acc) && !signbit(other)))
        return other;
    return acc;
}

int comm_reduce_local(void *inout, const void *in, size_t n, comm_dtype_t type,
                      comm_op_t op)
{
    int max = op == COMM_MAX;
    if (op != COMM_SUM && op != COMM_MAX)
        return comm_fail(COMM_EINVAL, "reduce: unknown op %d", (int)op);
    switch (type) {
    case COMM_F32: {
        float *acc = inout;
        const float *other = in;
        for (size_t i = 0; i < n; i++)
            acc[i] = max ? max_f32(acc[i], other[i]) : acc[i] + other[i];
        return COMM_OK;
    }
    case COMM_F64: {
        double *acc = inout;
        const double *other = in;
        for (size_t i = 0; i < n; i++)
            acc[i] = max ? max_f64(acc[i], other[i]) : acc[i] + other[i];
        return COMM_OK;
    }
    case COMM_I64: {
        int64_t *acc = inout;
        const int64_t *other = in;
        for (size_t i = 0; i < n; i++)
            acc[i] = max ? (other[i] > acc[i] ? other[i] : acc[i])
                         : (int64_t)((uint64_t)acc[i] + (uint64_t)other[i]);
        return COMM_OK;
    }
    case COMM_U8: {
        uint8_t *acc = inout;
        const uint8_t *other = in;
        for (size_t i = 0; i < n; i++)
            acc[i] = max ? (other[i] > acc[i] ? other[i] : acc[i])
                         : (uint8_t)(acc[i] + other[i]);
        return COMM_OK;
    }
    }
    return comm_fail(COMM_EINVAL, "reduce: unknown type %d", (int)type);
}

/* ---- host buffers over MPI ---------------------------------------------- */

static MPI_Datatype comm_mpi_type(comm_dtype_t type, size_t *size)
{
    switch (type) {
    case COMM_F32: *size = 4; return MPI_FLOAT;
    case COMM_F64: *size = 8; return MPI_DOUBLE;
    case COMM_I64: *size = 8; return MPI_INT64_T;
    case COMM_U8: *size = 1; return MPI_UINT8_T;
    }
    *size = 0;
    return MPI_DATATYPE_NULL;
}

/* MPI's MAX makes no promise about a NaN (Open MPI computes a > b ? a : b,
 * so a NaN survives only on some ranks' orders): floating-point MAX goes
 * through comm_reduce_local instead. */
static void float_max_op(void *in, void *inout, int *len, MPI_Datatype *datatype)
{
    comm_reduce_local(inout, in, (size_t)*len, *datatype == MPI_DOUBLE ? COMM_F64 : COMM_F32,
                      COMM_MAX);
}

static MPI_Op float_max = MPI_OP_NULL; /* made on first use (main thread) */

int comm_host_allreduce(comm_t *comm, void *buf, size_t n, comm_dtype_t type, comm_op_t op)
{
    size_t elem = 0;
    MPI_Datatype datatype = comm_mpi_type(type, &elem);
    if (datatype == MPI_DATATYPE_NULL || (op != COMM_SUM && op != COMM_MAX))
        return comm_fail(COMM_EINVAL, "allreduce: unknown type %d or op %d", (int)type,
                         (int)op);
    MPI_Op mpi_op = op == COMM_MAX ? MPI_MAX : MPI_SUM;
    if (op == COMM_MAX && (type == COMM_F32 || type == COMM_F64)) {
        if (float_max == MPI_OP_NULL) {
            int rc = MPI_Op_create(float_max_op, 1, &float_max);
            if (rc != MPI_SUCCESS)
                return comm_mpi_fail("MPI_Op_create", rc);
        }
        mpi_op = float_max;
    }
    for (size_t done = 0; done < n;) {
        size_t count = n - done < COMM_CHUNK ? n - done : COMM_CHUNK;
        int rc = MPI_Allreduce(MPI_IN_PLACE, (char *)buf + done * elem, (int)count, datatype,
                               mpi_op, comm->mpi);
        if (rc != MPI_SUCCESS)
            return comm_mpi_fail("MPI_Allreduce", rc);
        done += count;
    }
    return COMM_OK;
}

int comm_host_bcast(comm_t *comm, void *buf, size_t bytes, int root)
{
    for (size_t done = 0; done < bytes;) {
        size_t count = bytes - done < COMM_CHUNK ? bytes - done : COMM_CHUNK;
        int rc = MPI_Bcast((char *)buf + done, (int)count, MPI_BYTE, root, comm->mpi);
        if (rc != MPI_SUCCESS)
            return comm_mpi_fail("MPI_Bcast", rc);
        done += count;
    }
    return COMM_OK;
}

int comm_host_allgather(comm_t *comm, const void *send, void *recv, size_t bytes)
{
    if (bytes > INT_MAX)
        return comm_fail(COMM_EINVAL, "allgather: %zu bytes a rank, more than MPI takes",
                         bytes);
    int rc = MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE,
                           comm->mpi);
    return rc == MPI_SUCCESS ? COMM_OK : comm_mpi_fail("MPI_Allgather", rc);
}

/* ---- the MPI backend ------------------------------------------------------ */

static int mpi_barrier(comm_t *comm)
{
    int rc = MPI_Barrier(comm->mpi);
    return rc == MPI_SUCCESS ? COMM_OK : comm_mpi_fail("MPI_Barrier", rc);
}

static void mpi_close(comm_t *comm)
{
    if (comm->mpi != MPI_COMM_NULL)
        MPI_Comm_free(&comm->mpi);
}

/* Nothing of MPI's own can be cut short from outside: MPI_Abort (the
 * caller's) ends the MPI collectives with the processes. */
static void mpi_abort(comm_t *comm) { (void)comm; }

static const comm_ops_t comm_mpi_ops = {
    comm_host_allreduce, comm_host_bcast, comm_host_allgather, mpi_barrier, mpi_close,
    mpi_abort,
};

int comm_open_mpi(comm_t **out, const world_t *world)
{
    *out = NULL;
    comm_t *comm = calloc(1, sizeof *comm);
    if (!comm)
        return comm_fail(COMM_EFAIL, "out of memory for a communicator");
    int rc = MPI_Comm_dup(*(MPI_Comm *)world->mpi_world, &comm->mpi);
    if (rc != MPI_SUCCESS) {
        free(comm);
        return comm_mpi_fail("MPI_Comm_dup", rc);
    }
    MPI_Comm_set_errhandler(comm->mpi, MPI_ERRORS_RETURN);
    comm->ops = &comm_mpi_ops;
    MPI_Comm_rank(comm->mpi, &comm->rank);
    MPI_Comm_size(comm->mpi, &comm->size);
    *out = comm;
    return COMM_OK;
}

void comm_close(comm_t *comm)
{
    if (!comm)
        return;
    comm->ops->close(comm);
    free(comm);
}

void comm_abort(comm_t *comm)
{
    if (comm)
        comm->ops->abort(comm);
}

int comm_rank(const comm_t *comm) { return comm->rank; }
int comm_size(const comm_t *comm) { return comm->size; }

int comm_allreduce(comm_t *comm, void *buf, size_t n, comm_dtype_t type, comm_op_t op)
{
    return comm->ops->allreduce(comm, buf, n, type, op);
}

int comm_bcast(comm_t *comm, void *buf, size_t bytes, int root)
{
    return comm->ops->bcast(comm, buf, bytes, root);
}

int comm_allgather(comm_t *comm, const void *send, void *recv, size_t bytes)
{
    return comm->ops->allgather(comm, send, recv, bytes);
}

/* Host pieces of int size: one MPI_Allgatherv, whose algorithms move each
 * byte far fewer times than a broadcast per rank.  counts and displs are
 * MPI's, in place of the callers' 64-bit ones. */
static int allgatherv_mpi(comm_t *comm, void *recv, const uint64_t *counts,
                          const uint64_t *displs, int *mpi_counts, int *mpi_displs)
{
    for (int r = 0; r < comm->size; r++) {
        mpi_counts[r] = (int)counts[r];
        mpi_displs[r] = (int)displs[r];
    }
    int rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, mpi_counts, mpi_displs,
                            MPI_BYTE, comm->mpi);
    return rc == MPI_SUCCESS ? COMM_OK : comm_mpi_fail("MPI_Allgatherv", rc);
}

int comm_allgatherv_inplace(comm_t *comm, void *recv, const uint64_t *counts,
                            const uint64_t *displs)
{
    int fits = comm->mpi != MPI_COMM_NULL;
    for (int r = 0; r < comm->size && fits; r++)
        fits = counts[r] <= INT_MAX && displs[r] <= INT_MAX;
    int *mpi_counts = fits ? malloc((size_t)comm->size * sizeof *mpi_counts) : NULL;
    int *mpi_displs = fits ? malloc((size_t)comm->size * sizeof *mpi_displs) : NULL;
    /* No room for the counts on some rank: every rank takes the broadcasts
     * below, which need none (a rank that returned, or took the other path
     * alone, would leave the others waiting in a collective). */
    if (fits && comm_any_failed(comm, !mpi_counts || !mpi_displs))
        fits = 0;
    int rc = COMM_OK;
    if (fits)
        rc = allgatherv_mpi(comm, recv, counts, displs, mpi_counts, mpi_displs);
    free(mpi_counts);
    free(mpi_displs);
    if (fits)
        return rc;
    /* Larger pieces: one broadcast per rank's piece, chunked for any size. */
    for (int r = 0; r < comm->size && rc == COMM_OK; r++)
        rc = comm_bcast(comm, (char *)recv + displs[r], counts[r], r);
    return rc;
}

int comm_barrier(comm_t *comm) { return comm->ops->barrier(comm); }

/* Chunks of one message, each with its index as its tag. */
static int chunks_of(uint64_t bytes)
{
    return (int)((bytes + COMM_CHUNK - 1) / COMM_CHUNK);
}

int comm_exchange(comm_t *comm, const void *send, uint64_t sbytes, int dest, int nsrc,
                  const int *srcs, void *const *recv, const uint64_t *rbytes)
{
    if (comm->mpi == MPI_COMM_NULL)
        return comm_fail(COMM_EINVAL, "exchange: no MPI communicator");
    int nreq = dest >= 0 ? chunks_of(sbytes) : 0;
    for (int i = 0; i < nsrc; i++)
        nreq += chunks_of(rbytes[i]);
    MPI_Request *req = calloc((size_t)nreq + 1, sizeof *req);
    if (!req)
        return comm_fail(COMM_EFAIL, "exchange: out of memory for %d requests", nreq);
    int n = 0, rc = MPI_SUCCESS;
    for (int i = 0; i < nsrc && rc == MPI_SUCCESS; i++)
        for (uint64_t off = 0; off < rbytes[i] && rc == MPI_SUCCESS; off += COMM_CHUNK) {
            uint64_t len = rbytes[i] - off < COMM_CHUNK ? rbytes[i] - off : COMM_CHUNK;
            rc = MPI_Irecv((char *)recv[i] + off, (int)len, MPI_BYTE, srcs[i],
                           (int)(off / COMM_CHUNK), comm->mpi, &req[n++]);
        }
    for (uint64_t off = 0; dest >= 0 && off < sbytes && rc == MPI_SUCCESS; off += COMM_CHUNK) {
        uint64_t len = sbytes - off < COMM_CHUNK ? sbytes - off : COMM_CHUNK;
        rc = MPI_Isend((const char *)send + off, (int)len, MPI_BYTE, dest,
                       (int)(off / COMM_CHUNK), comm->mpi, &req[n++]);
    }
    if (rc == MPI_SUCCESS)
        rc = MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
    free(req);
    return rc == MPI_SUCCESS ? COMM_OK : comm_mpi_fail("exchange (MPI_Isend/Irecv)", rc);
}

/* ---- nonblocking exchanges ------------------------------------------------- */

/* An exchange moves in pieces of XFER_PIECE bytes, far smaller than
 * COMM_CHUNK, so that a receiver can use each part of a message soon after
 * it lands, while it is still in the cache (comm_xfer_arrived: the tier
 * hashes a partner copy as it arrives instead of reading it all again at
 * the end).  Larger messages take larger pieces, so that a message never
 * has more than XFER_MAX_PIECES (its tags stay within the MPI_TAG_UB that
 * MPI guarantees, 32767).  Both ends compute the pieces from the message's
 * length, which they agree on. */
#define XFER_PIECE ((uint64_t)4 << 20)
#define XFER_MAX_PIECES 32767

/* One source of the exchange in flight: its pieces' requests are
 * req[first, first + pieces), of `piece` bytes each (the last shorter). */
typedef struct {
    int first, pieces;
    int landed;             /* its leading pieces known complete */
    uint64_t len, piece;
} xfer_src_t;

struct comm_xfer {
    MPI_Comm mpi;           /* a duplicate of the comm's */
    int size;
    MPI_Request *req;       /* the pieces of the exchange posted */
    int cap, nreq;          /* room, and the pieces in flight (0: none) */
    xfer_src_t *src;        /* the sources of the exchange posted last */
    int src_cap, nsrc;
    /* Its send: req[sfirst, sfirst + spieces) of spiece bytes each, posted
     * up to `window` at a time (0: all at once), the next one whenever the
     * oldest has completed (xfer_send_more); those not posted yet are
     * MPI_REQUEST_NULL. */
    const char *send;
    uint64_t sbytes, spiece;
    int dest, window, sfirst, spieces, sposted, sdone;
    int stuck;              /* abandoned with pieces unfinished: kept for good */
};

/* The piece size of a message of `bytes` (0 when it would need pieces of
 * more than 1 GiB: a message beyond 32 TiB). */
static uint64_t xfer_piece(uint64_t bytes)
{
    uint64_t p = XFER_PIECE;
    while (bytes / p >= XFER_MAX_PIECES)
        if ((p *= 2) > ((uint64_t)1 << 30))
            return 0;
    return p;
}

static int xfer_pieces(uint64_t bytes, uint64_t piece)
{
    return (int)((bytes + piece - 1) / piece);
}

int comm_xfer_open(comm_t *comm, comm_xfer_t **out)
{
    *out = NULL;
    if (comm->mpi == MPI_COMM_NULL)
        return comm_fail(COMM_EINVAL, "xfer: no MPI communicator");
    /* The dup first, on every rank (a collective), then the memory. */
    MPI_Comm dup = MPI_COMM_NULL;
    int rc = MPI_Comm_dup(comm->mpi, &dup);
    if (rc != MPI_SUCCESS)
        return comm_mpi_fail("MPI_Comm_dup", rc);
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    comm_xfer_t *x = calloc(1, sizeof *x);
    if (!x) {
        MPI_Comm_free(&dup);
        return comm_fail(COMM_EFAIL, "xfer: out of memory");
    }
    x->mpi = dup;
    x->size = comm->size;
    *out = x;
    return COMM_OK;
}

/* Room for n requests.  @return COMM_OK or COMM_EFAIL. */
static int xfer_room(comm_xfer_t *x, int n)
{
    if (n <= x->cap)
        return COMM_OK;
    MPI_Request *req = realloc(x->req, (size_t)n * sizeof *req);
    if (!req)
        return comm_fail(COMM_EFAIL, "xfer: out of memory for %d requests", n);
    x->req = req;
    x->cap = n;
    return COMM_OK;
}

int comm_xfer_reserve(comm_xfer_t *x, uint64_t sbytes, int dest, int nsrc,
                      const uint64_t *lens)
{
    uint64_t sp = xfer_piece(sbytes);
    if (dest >= 0 && !sp)
        return comm_fail(COMM_EINVAL, "xfer: %llu bytes to send are too many for one "
                         "exchange", (unsigned long long)sbytes);
    int n = dest >= 0 ? xfer_pieces(sbytes, sp) : 0;
    for (int i = 0; i < nsrc; i++) {
        uint64_t p = xfer_piece(lens[i]);
        if (!p)
            return comm_fail(COMM_EINVAL, "xfer: %llu bytes to receive are too many for "
                             "one exchange", (unsigned long long)lens[i]);
        if (n > INT_MAX - XFER_MAX_PIECES)
            return comm_fail(COMM_EINVAL, "xfer: too many pieces in one exchange");
        n += xfer_pieces(lens[i], p);
    }
    if (nsrc > x->src_cap) {
        xfer_src_t *src = realloc(x->src, (size_t)nsrc * sizeof *src);
        if (!src)
            return comm_fail(COMM_EFAIL, "xfer: out of memory for %d sources", nsrc);
        x->src = src;
        x->src_cap = nsrc;
    }
    return xfer_room(x, n);
}

/* Post the send's next pieces: as many as the window leaves room for once
 * the oldest posted ones that have completed are counted (MPI_Test; a
 * completed request is then MPI_REQUEST_NULL, which MPI_Testall takes as
 * complete).  @return COMM_OK or COMM_EFAIL (MPI's reason). */
static int xfer_send_more(comm_xfer_t *x)
{
    while (x->sdone < x->sposted) {
        int flag = 0;
        int rc = MPI_Test(&x->req[x->sfirst + x->sdone], &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return comm_mpi_fail("MPI_Test", rc);
        if (!flag)
            break;
        x->sdone++;
    }
    while (x->sposted < x->spieces && (!x->window || x->sposted - x->sdone < x->window)) {
        uint64_t off = (uint64_t)x->sposted * x->spiece;
        uint64_t len = x->sbytes - off < x->spiece ? x->sbytes - off : x->spiece;
        int rc = MPI_Isend(x->send + off, (int)len, MPI_BYTE, x->dest, x->sposted, x->mpi,
                           &x->req[x->sfirst + x->sposted]);
        if (rc != MPI_SUCCESS)
            return comm_mpi_fail("MPI_Isend", rc);
        x->sposted++;
    }
    return COMM_OK;
}

void comm_xfer_window(comm_xfer_t *x, int pieces)
{
    if (x)
        x->window = pieces > 0 ? pieces : 0;
}

int comm_xfer_post(comm_xfer_t *x, const void *send, uint64_t sbytes, int dest, int nsrc,
                   const int *srcs, void *const *bufs, const uint64_t *lens)
{
    if (!x)
        return comm_fail(COMM_EINVAL, "xfer: no channel");
    if (x->stuck)
        return comm_fail(COMM_EINVAL, "xfer: an earlier exchange never completed");
    if (x->nreq > 0)
        return comm_fail(COMM_EINVAL, "xfer: an exchange is in flight already");
    if (dest < -1 || dest >= x->size)
        return comm_fail(COMM_EINVAL, "xfer: no rank %d to send to (%d ranks)", dest,
                         x->size);
    if (dest >= 0 && sbytes && !send)
        return comm_fail(COMM_EINVAL, "xfer: no buffer for the %llu bytes to send",
                         (unsigned long long)sbytes);
    if (nsrc < 0 || (nsrc > 0 && (!srcs || !bufs || !lens)))
        return comm_fail(COMM_EINVAL, "xfer: %d sources without their ranks or buffers",
                         nsrc);
    for (int i = 0; i < nsrc; i++) {
        if (srcs[i] < 0 || srcs[i] >= x->size)
            return comm_fail(COMM_EINVAL, "xfer: no rank %d to receive from (%d ranks)",
                             srcs[i], x->size);
        if (lens[i] && !bufs[i])
            return comm_fail(COMM_EINVAL, "xfer: no buffer for the %llu bytes from rank %d",
                             (unsigned long long)lens[i], srcs[i]);
    }
    int rc = comm_xfer_reserve(x, sbytes, dest, nsrc, lens);
    if (rc != COMM_OK)
        return rc;
    /* The receives first, then the send, each in pieces tagged by index. */
    rc = MPI_SUCCESS;
    x->nsrc = 0;
    for (int i = 0; i < nsrc && rc == MPI_SUCCESS; i++) {
        uint64_t p = xfer_piece(lens[i]);
        x->src[i] = (xfer_src_t){.first = x->nreq, .pieces = xfer_pieces(lens[i], p),
                                 .len = lens[i], .piece = p};
        x->nsrc = i + 1;
        for (uint64_t off = 0; off < lens[i] && rc == MPI_SUCCESS; off += p) {
            uint64_t len = lens[i] - off < p ? lens[i] - off : p;
            rc = MPI_Irecv((char *)bufs[i] + off, (int)len, MPI_BYTE, srcs[i],
                           (int)(off / p), x->mpi, &x->req[x->nreq++]);
        }
    }
    if (rc != MPI_SUCCESS) {
        x->nreq--; /* the request that failed holds nothing */
        return comm_mpi_fail("MPI_Irecv", rc);
    }
    x->send = send;
    x->sbytes = dest >= 0 ? sbytes : 0;
    x->spiece = xfer_piece(sbytes);
    x->dest = dest;
    x->sfirst = x->nreq;
    x->spieces = xfer_pieces(x->sbytes, x->spiece);
    x->sposted = x->sdone = 0;
    for (int k = 0; k < x->spieces; k++)
        x->req[x->nreq++] = MPI_REQUEST_NULL;
    return xfer_send_more(x);
}

int comm_xfer_test(comm_xfer_t *x, double budget_s, int *done)
{
    *done = 0;
    if (x->stuck)
        return comm_fail(COMM_EINVAL, "xfer: abandoned unfinished");
    if (x->nreq == 0) {
        *done = 1;
        return COMM_OK;
    }
    double t0 = util_mono_s();
    for (;;) {
        if (xfer_send_more(x) != COMM_OK)
            return COMM_EFAIL;
        int rc = MPI_Testall(x->nreq, x->req, done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) {
            *done = 0;
            return comm_mpi_fail(NULL, rc);
        }
        /* Pieces of the send not posted yet are MPI_REQUEST_NULL too. */
        *done = *done && x->sposted == x->spieces;
        if (*done) {
            x->nreq = 0;
            for (int i = 0; i < x->nsrc; i++)
                x->src[i].landed = x->src[i].pieces;
            return COMM_OK;
        }
        if (util_mono_s() - t0 >= budget_s)
            return COMM_OK;
    }
}

int comm_xfer_arrived(comm_xfer_t *x, int i, uint64_t *bytes)
{
    *bytes = 0;
    if (x->stuck)
        return comm_fail(COMM_EINVAL, "xfer: abandoned unfinished");
    if (i < 0 || i >= x->nsrc)
        return comm_fail(COMM_EINVAL, "xfer: no source %d in the exchange (%d)", i, x->nsrc);
    if (x->nreq > 0 && xfer_send_more(x) != COMM_OK)
        return COMM_EFAIL;
    xfer_src_t *s = &x->src[i];
    /* A completed request is freed and set to MPI_REQUEST_NULL, which a
     * later MPI_Testall (comm_xfer_test, comm_xfer_abandon) takes as
     * complete. */
    while (x->nreq > 0 && s->landed < s->pieces) {
        int flag = 0;
        int rc = MPI_Test(&x->req[s->first + s->landed], &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return comm_mpi_fail(NULL, rc);
        if (!flag)
            break;
        s->landed++;
    }
    uint64_t n = (uint64_t)s->landed * s->piece;
    *bytes = n < s->len ? n : s->len;
    return COMM_OK;
}

int comm_xfer_abandon(comm_xfer_t *x)
{
    if (!x)
        return 0;
    if (!x->stuck && x->nreq > 0) {
        int done = 0;
        if (MPI_Testall(x->nreq, x->req, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS || !done)
            x->stuck = 1;
        x->nreq = 0;
    }
    return x->stuck;
}

void comm_xfer_close(comm_xfer_t *x)
{
    /* Pieces that never completed: MPI may still use x's requests and
     * communicator, so they stay until the process ends. */
    if (comm_xfer_abandon(x) || !x)
        return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (x->mpi != MPI_COMM_NULL && !fin)
        MPI_Comm_free(&x->mpi);
    free(x->req);
    free(x->src);
    free(x);
}

int comm_threads_allowed(void)
{
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    return level >= MPI_THREAD_FUNNELED;
}

int comm_threads_multiple(void)
{
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    return level >= MPI_THREAD_MULTIPLE;
}

int comm_is_main_thread(void)
{
    int main_thread = 0;
    MPI_Is_thread_main(&main_thread);
    return main_thread != 0;
}

/* A blocking MPI collective busy-polls (Open MPI yields at best): a rank that
 * finished its shard early would take a core from the ranks still
 * compressing on the same node.  So: a non-blocking barrier, tested with
 * sleeps that grow from COMM_WAIT_FIRST_NS to COMM_WAIT_MAX_NS. */
int comm_wait_all(comm_t *comm)
{
    if (comm->size <= 1)
        return COMM_OK;
    if (comm->mpi == MPI_COMM_NULL)
        return comm_barrier(comm);
    MPI_Request req;
    int rc = MPI_Ibarrier(comm->mpi, &req), done = 0;
    if (rc != MPI_SUCCESS)
        return comm_mpi_fail("MPI_Ibarrier", rc);
    long pause_ns = COMM_WAIT_FIRST_NS;
    while ((rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE)) == MPI_SUCCESS && !done) {
        struct timespec ts = {0, pause_ns};
        nanosleep(&ts, NULL);
        pause_ns = pause_ns < COMM_WAIT_MAX_NS ? pause_ns * 2 : COMM_WAIT_MAX_NS;
    }
    return rc == MPI_SUCCESS ? COMM_OK : comm_mpi_fail("MPI_Test(MPI_Ibarrier)", rc);
}

int comm_any_failed(comm_t *comm, int local_rc)
{
    int64_t failed = local_rc != 0;
    int rc = comm_allreduce(comm, &failed, 1, COMM_I64, COMM_MAX);
    if (rc != COMM_OK)
        return rc;
    return failed != 0;
}

static const util_name_t comm_errors[] = {
    {"success", COMM_OK},
    {"collective failed", COMM_EFAIL},
    {"invalid argument", COMM_EINVAL},
};

const char *comm_strerror(int err)
{
    return util_name_of(comm_errors, UTIL_COUNT(comm_errors), err, "unknown error");
}

const char *comm_last_error(void) { return comm_err_buf; }

/*
 * p2p_bw.c - what moving B bytes costs on this machine, for the node-local
 * tier's figures (bench/local_tier.sh): MPI point-to-point between two
 * ranks, and a plain memory copy of the same bytes.
 *
 *   mpirun -n 2 p2p_bw BYTES [REPEAT]     (or without a launcher: the
 *                                          copies only)
 *
 * Timed, each REPEAT times (default 3), the best kept:
 *
 *   send      rank 0 sends BYTES to rank 1 (MPI_Send / MPI_Recv), from a
 *             barrier until rank 1 has them all;
 *   exchange  both ranks send BYTES to each other at once (MPI_Irecv,
 *             MPI_Isend, MPI_Waitall), as the partner copy of a local
 *             checkpoint does with two nodes, from a barrier until both are
 *             done;
 *   memcpy    BYTES copied into memory that was allocated and touched
 *             before the timer;
 *   fresh     BYTES copied into memory allocated inside the timer (its page
 *             faults included, as a file written into tmpfs gets new pages).
 *
 * Messages are cut into pieces, each its own MPI call: of 256 MiB, as
 * comm_exchange cuts them, and of 4 MiB, as the tier's partner exchange
 * (comm_xfer_post) cuts them; send and exchange are timed with both, and
 * the faster counts (MPI at its best).  All buffers are touched before any
 * timer.  Rank 0 prints one line of "key value" pairs (MB/s: 10^6 bytes a
 * second; for the exchange, the bytes one rank sends, which it also
 * receives, in that time; *_piece: the piece size in bytes that gave the
 * figure; exchange_256m_s and exchange_4m_s: the exchange with each):
 *
 *   p2p_bw: bytes B ranks N send_s S send_mb_per_s X send_piece P
 *           exchange_s E exchange_mb_per_s Y exchange_piece Q
 *           exchange_256m_s E1 exchange_4m_s E2 memcpy_s M memcpy_mb_per_s Z
 *           fresh_s F fresh_mb_per_s W
 *
 * With one rank the MPI figures are "n/a".  Exit status: 0, 1 on a failure
 * (message on stderr), 2 usage.
 */
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_clock.h"

/* The largest piece of one MPI call (MPI counts are int), and the tier's
 * (src/parallel/comm.c, XFER_PIECE). */
#define P2P_PIECE ((size_t)1 << 28)
#define P2P_PIECE_SMALL ((size_t)4 << 20)
/* BYTES at most: 64 GiB. */
#define P2P_BYTES_MAX ((size_t)256 * P2P_PIECE)

/* Print where and what failed, then leave with status 1 (a tool, not a
 * library: exiting here is fine). */
#define P2P_CHECK(cond, ...)                                                \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "p2p_bw: %s:%d: ", __FILE__, __LINE__);         \
            fprintf(stderr, __VA_ARGS__);                                   \
            fputc('\n', stderr);                                            \
            MPI_Abort(MPI_COMM_WORLD, 1);                                   \
            exit(1);                                                        \
        }                                                                   \
    } while (0)

/* An MPI call that must succeed: the call, its message, a hint. */
#define MPI_CHECK(call)                                                     \
    do {                                                                    \
        int mpi_rc_ = (call);                                               \
        if (mpi_rc_ != MPI_SUCCESS) {                                       \
            char mpi_msg_[MPI_MAX_ERROR_STRING] = "";                       \
            int mpi_len_ = 0;                                               \
            MPI_Error_string(mpi_rc_, mpi_msg_, &mpi_len_);                 \
            P2P_CHECK(0, "%s: %s (run it under mpirun -n 2)", #call,        \
                      mpi_msg_);                                            \
        }                                                                   \
    } while (0)

/* The pieces of a message of bytes, each its own tag. */
static int pieces_of(size_t bytes, size_t piece)
{
    return (int)((bytes + piece - 1) / piece);
}

static int piece_len(size_t bytes, size_t piece, int i)
{
    size_t off = (size_t)i * piece;
    return (int)(bytes - off < piece ? bytes - off : piece);
}

/* Rank 0 sends bytes to rank 1.  @return the seconds, the same on both. */
static double time_send(unsigned char *send, unsigned char *recv, size_t bytes, size_t piece,
                        int rank)
{
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    double t0 = now_s();
    for (int i = 0; i < pieces_of(bytes, piece); i++) {
        if (rank == 0)
            MPI_CHECK(MPI_Send(send + (size_t)i * piece, piece_len(bytes, piece, i), MPI_BYTE,
                               1, i, MPI_COMM_WORLD));
        else if (rank == 1)
            MPI_CHECK(MPI_Recv(recv + (size_t)i * piece, piece_len(bytes, piece, i), MPI_BYTE,
                               0, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    }
    double dt = rank == 1 ? now_s() - t0 : 0;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    return dt;
}

/* Ranks 0 and 1 swap bytes at once, with req room for all the pieces.
 * @return the seconds until both are done, the same on both. */
static double time_exchange(unsigned char *send, unsigned char *recv, size_t bytes,
                            size_t piece, MPI_Request *req, int rank)
{
    int n = 0, peer = 1 - rank;
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    double t0 = now_s();
    if (rank <= 1) {
        for (int i = 0; i < pieces_of(bytes, piece); i++)
            MPI_CHECK(MPI_Irecv(recv + (size_t)i * piece, piece_len(bytes, piece, i), MPI_BYTE,
                                peer, i, MPI_COMM_WORLD, &req[n++]));
        for (int i = 0; i < pieces_of(bytes, piece); i++)
            MPI_CHECK(MPI_Isend(send + (size_t)i * piece, piece_len(bytes, piece, i), MPI_BYTE,
                                peer, i, MPI_COMM_WORLD, &req[n++]));
        MPI_CHECK(MPI_Waitall(n, req, MPI_STATUSES_IGNORE));
    }
    double dt = rank <= 1 ? now_s() - t0 : 0;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    return dt;
}

/* One copy of bytes into dst, or into new memory when dst is NULL.
 * @return the seconds. */
static double time_copy(const unsigned char *src, unsigned char *dst, size_t bytes)
{
    double t0 = now_s();
    unsigned char *to = dst ? dst : malloc(bytes);
    P2P_CHECK(to != NULL, "out of memory for %zu bytes", bytes);
    memcpy(to, src, bytes);
    double dt = now_s() - t0;
    /* The copy must not be optimised away: read a byte of it. */
    volatile unsigned char sink = to[bytes / 2];
    (void)sink;
    if (!dst)
        free(to);
    return dt;
}

static double mbps(size_t bytes, double s)
{
    return s > 0 ? (double)bytes / s / 1e6 : 0;
}

int main(int argc, char **argv)
{
    MPI_CHECK(MPI_Init(&argc, &argv));
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char *end = NULL;
    unsigned long long bytes = argc >= 2 ? strtoull(argv[1], &end, 10) : 0;
    long repeat = argc >= 3 ? strtol(argv[2], NULL, 10) : 3;
    if (argc < 2 || argc > 3 || !end || *end || bytes == 0 ||
        bytes > (unsigned long long)P2P_BYTES_MAX || repeat < 1) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -n 2 p2p_bw BYTES [REPEAT]  (BYTES 1 to 64 GiB)\n");
        MPI_Finalize();
        return 2;
    }
    unsigned char *send = malloc(bytes), *recv = malloc(bytes);
    MPI_Request *req = malloc(2 * (size_t)pieces_of(bytes, P2P_PIECE_SMALL) * sizeof *req);
    P2P_CHECK(send && recv && req, "out of memory for 2 x %llu bytes", bytes);
    memset(send, 0x5a ^ rank, bytes);
    memset(recv, 0, bytes);

    const size_t piece[2] = {P2P_PIECE, P2P_PIECE_SMALL};
    double send_s[2] = {0, 0}, exchange_s[2] = {0, 0}, memcpy_s = 0, fresh_s = 0;
    for (long r = 0; r < repeat; r++) {
        for (int k = 0; k < 2 && size >= 2; k++) {
            double s = time_send(send, recv, bytes, piece[k], rank);
            memset(recv, 0, bytes);
            double e = time_exchange(send, recv, bytes, piece[k], req, rank);
            P2P_CHECK(rank > 1 || (recv[0] == (0x5a ^ (1 - rank)) &&
                                   recv[bytes / 2] == (0x5a ^ (1 - rank)) &&
                                   recv[bytes - 1] == (0x5a ^ (1 - rank))),
                      "rank %d did not receive its peer's bytes", rank);
            send_s[k] = r == 0 || s < send_s[k] ? s : send_s[k];
            exchange_s[k] = r == 0 || e < exchange_s[k] ? e : exchange_s[k];
        }
        double m = time_copy(send, recv, bytes);
        double f = time_copy(send, NULL, bytes);
        memcpy_s = r == 0 || m < memcpy_s ? m : memcpy_s;
        fresh_s = r == 0 || f < fresh_s ? f : fresh_s;
    }
    if (rank == 0) {
        int bs = send_s[1] < send_s[0], be = exchange_s[1] < exchange_s[0];
        char ss[32] = "n/a", sm[32] = "n/a", sp[32] = "n/a", es[32] = "n/a", em[32] = "n/a",
             ep[32] = "n/a", e0[32] = "n/a", e1[32] = "n/a";
        if (size >= 2) {
            snprintf(ss, sizeof ss, "%.4f", send_s[bs]);
            snprintf(sm, sizeof sm, "%.1f", mbps(bytes, send_s[bs]));
            snprintf(sp, sizeof sp, "%zu", piece[bs]);
            snprintf(es, sizeof es, "%.4f", exchange_s[be]);
            snprintf(em, sizeof em, "%.1f", mbps(bytes, exchange_s[be]));
            snprintf(ep, sizeof ep, "%zu", piece[be]);
            snprintf(e0, sizeof e0, "%.4f", exchange_s[0]);
            snprintf(e1, sizeof e1, "%.4f", exchange_s[1]);
        }
        printf("p2p_bw: bytes %llu ranks %d send_s %s send_mb_per_s %s send_piece %s "
               "exchange_s %s exchange_mb_per_s %s exchange_piece %s exchange_256m_s %s "
               "exchange_4m_s %s memcpy_s %.4f memcpy_mb_per_s %.1f fresh_s %.4f "
               "fresh_mb_per_s %.1f\n",
               bytes, size, ss, sm, sp, es, em, ep, e0, e1, memcpy_s, mbps(bytes, memcpy_s),
               fresh_s, mbps(bytes, fresh_s));
    }
    free(req);
    free(send);
    free(recv);
    MPI_Finalize();
    return 0;
}

/*
 * liveness.h - a ring of TCP connections between the ranks, so that a rank
 * whose process ends without a word (SIGKILL, a crash, the OOM killer, its
 * node lost) is noticed by its two neighbours within a watchdog tick.
 *
 * Why: a rank that dies leaves the others waiting in a collective.  Under
 * mpirun the runtime ends the job; under srun --kill-on-bad-exit SLURM
 * sends the survivors TERM and KILL only after KillWait (30 s by default);
 * between ranks on one host that talk through shared memory nothing ever
 * tells them.  The kernel closes a dead process's sockets at once, so its
 * neighbours read end-of-file: a fact, not a guess from a timeout.  A rank
 * that ends on purpose (any exit(), an abort of the job) first writes one
 * goodbye byte, so that its neighbours tell an end from a death.  Against
 * a node whose kernel is gone (no end-of-file comes) TCP keep-alive ends
 * the connection after LIVENESS_KEEPALIVE_S.
 *
 * HowTo, collectively, after MPI is up:
 *     liveness_card_t me, *cards = ...;     // one per rank
 *     liveness_listen(&me, err, cap);       // a listening socket, its card
 *     ... allgather the cards (the caller's MPI) ...
 *     liveness_connect(rank, size, cards, token, LIVENESS_CONNECT_S, err, cap);
 *     ... every tick (the watchdog's thread): r = liveness_lost(); r >= 0:
 *         rank r is gone ...
 *     liveness_bye() before ending on purpose (registered with atexit by
 *     liveness_connect; async-signal-safe), liveness_close() at the end.
 * A rank whose listen or connect fails trains on without the ring (the
 * caller warns): dead peers are then noticed by the heartbeats only.
 *
 * The card says where a rank listens: "<node name> <port> <IPv4>[,...]".
 * A neighbour on the same node (the same uname node name) is tried at
 * 127.0.0.1 first, then at the card's addresses.  The first bytes on a
 * connection are a hello: "FTLV", version 1, the job's token and the
 * sender's rank, and the answer, the acceptor's own hello; a connection
 * with another hello is closed, and a neighbour that does not answer gives
 * no ring.  Wire format: docs/heartbeat-format.md, "The liveness ring".
 *
 * Nothing here exits or prints; errors come back in err.
 */
#ifndef FTRAIN_LIVENESS_H
#define FTRAIN_LIVENESS_H

#include <stddef.h>
#include <stdint.h>

#define LIVENESS_CARD_MAX 256
/* How long the ring may take to form (each connect and the accept). */
#define LIVENESS_CONNECT_S 20.0
/* A neighbour that stops answering TCP keep-alive (its node is gone) is
 * lost after about this many seconds. */
#define LIVENESS_KEEPALIVE_S 11

typedef struct {
    char text[LIVENESS_CARD_MAX];
} liveness_card_t;

typedef enum { LIVENESS_OK = 0, LIVENESS_EFAIL = -1 } liveness_err_t;

/** Open this rank's listening socket (any address, a port the kernel
 *  picks) and write its card.  @return LIVENESS_OK or LIVENESS_EFAIL. */
int liveness_listen(liveness_card_t *card, char *err, size_t cap);

/** Form the ring: connect to rank + 1 and accept rank - 1 (mod size), each
 *  within timeout_s; both sides check the hello's token.  With one rank
 *  there is no ring (LIVENESS_OK, nothing watched).  Closes the listening
 *  socket.  @return LIVENESS_OK, or LIVENESS_EFAIL (nothing is watched
 *  then) with err naming the rank and address that failed. */
int liveness_connect(int rank, int size, const liveness_card_t *cards, uint64_t token,
                     double timeout_s, char *err, size_t cap);

/** Non-blocking: -1 while both neighbours live (or said goodbye, or no
 *  ring); else the rank of a neighbour whose connection ended without a
 *  goodbye (end-of-file, reset, keep-alive timeout).  Reports each lost
 *  neighbour once. */
int liveness_lost(void);

/** How the neighbour's connection ended, for a report: "closed without a
 *  goodbye", "reset", "no keep-alive answer" ("" when none was lost). */
const char *liveness_how(void);

/** Tell both neighbours this rank ends on purpose.  Idempotent,
 *  async-signal-safe, a no-op in a forked child and without a ring. */
void liveness_bye(void);

/** Say goodbye and close the connections (and a listening socket that
 *  liveness_connect did not close). */
void liveness_close(void);

#endif

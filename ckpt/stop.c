/*
 * stop.c - the stop path of the library (include/ftrain/ckpt_stop.h):
 * handlers that only record the first stop signal and its time, and the
 * agreement of all ranks on one stop step through the caller's collective.
 * ftrain's own src/fault/stop.c keeps its start-up blocking and its names on top
 * of this core.
 *
 * INVARIANTS
 *   K1  The handler touches only lock-free atomics (claimed, stop_sig,
 *       stop_sec, stop_nsec), reads stop_base (written before any handler
 *       is installed) and calls clock_gettime, which is async-signal-safe.
 *       No I/O, no locks, no allocation, errno kept.  Lock-free atomics are
 *       also what makes a flag set by a handler on one thread visible to
 *       the training loop on another (a volatile sig_atomic_t is only
 *       guaranteed within one thread).
 *   K2  The first signal wins: the handler that turns `claimed` from 0 to 1
 *       writes the time, then publishes the signal number (release); a
 *       reader that sees the number (acquire) sees its time.  Later
 *       signals, nested or on other threads, change nothing.
 *   K3  ckpt_stop_agree makes exactly one allgather on every rank whose
 *       collective is usable, also when the rank's own other arguments are
 *       bad (it then contributes a failure mark): every rank enters the
 *       same collectives, and all of them return an error together.  The
 *       result is a pure function of the gathered records, so every rank
 *       gets the same stop step and signal.
 *
 * STATES (per process)
 *
 *   IDLE --ckpt_stop_install--> ARMED --a signal: the handler--> REQUESTED
 *   REQUESTED --ckpt_stop_agree, every rank--> AGREED (*stop_step >= 0)
 *   ARMED --ckpt_stop_agree, another rank REQUESTED--> AGREED
 *   ARMED --ckpt_stop_agree, no rank REQUESTED--> ARMED (*stop_step = -1)
 */
#include "ftrain/ckpt_stop.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

_Static_assert(ATOMIC_INT_LOCK_FREE == 2,
               "the stop handler needs lock-free atomic ints (async-signal-safe)");

static atomic_int claimed;   /* 1 once a handler took the first signal */
static atomic_int stop_sig;  /* that signal, published after its time */
static atomic_int stop_sec;  /* its time: seconds after stop_base (an int holds them) */
static atomic_int stop_nsec; /* and nanoseconds */
static time_t stop_base;     /* set before any handler is installed */

static void stop_handler(int sig)
{
    int saved_errno = errno;
    if (atomic_exchange_explicit(&claimed, 1, memory_order_acq_rel) == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        atomic_store_explicit(&stop_sec, (int)(ts.tv_sec - stop_base), memory_order_relaxed);
        atomic_store_explicit(&stop_nsec, (int)ts.tv_nsec, memory_order_relaxed);
        atomic_store_explicit(&stop_sig, sig, memory_order_release);
    }
    errno = saved_errno;
}

/* The name of a signal this file handles, without "SIG", for messages. */
static const char *signal_name(int sig)
{
    switch (sig) {
    case SIGUSR1:
        return "USR1";
    case SIGUSR2:
        return "USR2";
    case SIGTERM:
        return "TERM";
    case SIGINT:
        return "INT";
    default:
        return "?";
    }
}

static int sigaction_fail(int sig)
{
    return ckpt_seterr(CKPT_EIO, "sigaction(SIG%s): %s", signal_name(sig), strerror(errno));
}

int ckpt_stop_install(int stop_signal)
{
    if (stop_signal != SIGUSR1 && stop_signal != SIGUSR2)
        return ckpt_seterr(CKPT_EINVAL,
                           "ckpt_stop_install: the stop signal must be SIGUSR1 or SIGUSR2, "
                           "not signal %d (SIGTERM and SIGINT always stop)",
                           stop_signal);
    if (!stop_base) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        stop_base = ts.tv_sec;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = stop_handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: a sleep or a wait returns early */
    const int sigs[] = {stop_signal, SIGTERM, SIGINT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        if (sigaction(sigs[i], &sa, NULL) != 0)
            return sigaction_fail(sigs[i]);
    /* Installed again with the other stop signal: the one before goes back
     * to its default action, if it is still ours. */
    int other = stop_signal == SIGUSR1 ? SIGUSR2 : SIGUSR1;
    struct sigaction cur, dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    if (sigaction(other, NULL, &cur) == 0 && cur.sa_handler == stop_handler &&
        sigaction(other, &dfl, NULL) != 0)
        return sigaction_fail(other);
    return CKPT_OK;
}

int ckpt_stop_requested(void)
{
    return atomic_load_explicit(&stop_sig, memory_order_acquire);
}

double ckpt_stop_time(void)
{
    if (!atomic_load_explicit(&stop_sig, memory_order_acquire))
        return 0;
    int sec = atomic_load_explicit(&stop_sec, memory_order_relaxed);
    int nsec = atomic_load_explicit(&stop_nsec, memory_order_relaxed);
    return (double)stop_base + (double)sec + (double)nsec * 1e-9;
}

/* ---- the agreement ------------------------------------------------------ */

/* What each rank contributes: fixed-width fields, the same layout on every
 * rank (they run the same library).  step -1 marks a rank whose own
 * arguments were bad. */
typedef struct {
    int64_t step;
    int64_t signo; /* 0: no signal here */
    double when;   /* the signal's wall-clock time */
} stop_vote_t;

#define STOP_BAD_STEP (-1)
/* Worlds up to this size gather into a buffer on the stack. */
#define STOP_STACK_VOTES 64

static int solo_allgather(void *ctx, const void *send, void *recv, size_t bytes)
{
    (void)ctx;
    memcpy(recv, send, bytes);
    return 0;
}

int ckpt_stop_agree(const ckpt_coll_t *coll, int64_t step, int64_t *stop_step, int *signo)
{
    if (stop_step)
        *stop_step = -1;
    if (signo)
        *signo = 0;
    ckpt_coll_t solo = {NULL, 0, 1, solo_allgather, NULL};
    if (!coll)
        coll = &solo;
    if (!coll->allgather || coll->size < 1 || coll->rank < 0 || coll->rank >= coll->size ||
        (size_t)coll->size > SIZE_MAX / sizeof(stop_vote_t))
        return ckpt_seterr(CKPT_EINVAL,
                           "ckpt_stop_agree: bad collective (allgather %s, rank %d of %d)",
                           coll->allgather ? "set" : "NULL", coll->rank, coll->size);

    /* Bad arguments of this rank's own still take part (K3). */
    int local_rc = CKPT_OK;
    if (!stop_step || !signo)
        local_rc = ckpt_seterr(CKPT_EINVAL, "ckpt_stop_agree: stop_step and signo must not "
                                            "be NULL");
    else if (step < 0)
        local_rc = ckpt_seterr(CKPT_EINVAL,
                               "ckpt_stop_agree: the step must be 0 or more, not %lld",
                               (long long)step);

    stop_vote_t mine = {local_rc == CKPT_OK ? step : STOP_BAD_STEP, 0, 0};
    int sig = ckpt_stop_requested();
    if (sig) {
        mine.signo = sig;
        mine.when = ckpt_stop_time();
    }
    stop_vote_t stack_votes[STOP_STACK_VOTES];
    stop_vote_t *votes = stack_votes;
    size_t n = (size_t)coll->size;
    if (n > STOP_STACK_VOTES) {
        votes = malloc(n * sizeof *votes);
        if (!votes)
            return ckpt_seterr(CKPT_ENOMEM,
                               "ckpt_stop_agree: no memory for the votes of %d ranks "
                               "(this rank did not take part in the collective)",
                               coll->size);
    }
    int rc = local_rc;
    if (coll->allgather(coll->ctx, &mine, votes, sizeof mine) != 0) {
        if (rc == CKPT_OK)
            rc = ckpt_seterr(CKPT_EPEER, "ckpt_stop_agree: the allgather failed");
        goto done;
    }
    if (rc != CKPT_OK)
        goto done;

    int64_t max_step = -1;
    int first = -1;
    for (size_t r = 0; r < n; r++) {
        if (votes[r].step < 0) {
            rc = ckpt_seterr(CKPT_EPEER, "ckpt_stop_agree: rank %zu passed bad arguments", r);
            goto done;
        }
        if (votes[r].step > max_step)
            max_step = votes[r].step;
        /* The earliest signal; the lowest rank on a tie (strict <). */
        if (votes[r].signo && (first < 0 || votes[r].when < votes[first].when))
            first = (int)r;
    }
    if (first >= 0) {
        *stop_step = max_step;
        *signo = (int)votes[first].signo;
    }
done:
    if (votes != stack_votes)
        free(votes);
    return rc;
}

/*
 * stop.c - ftrain's signal handling and the stop agreement around the
 * checkpoint library's stop core (ckpt/stop.c, include/ftrain/ckpt_stop.h):
 * the handlers, which only record the first signal and its time, are the
 * library's; this file adds the start-up blocking (.preinit_array), the
 * names of the signals, and ftrain's error convention.
 *
 * INVARIANTS
 *   S1  A handler writes only lock-free atomic flags (and reads the clock
 *       with clock_gettime, which is async-signal-safe): ckpt/stop.c, K1
 *       and K2.  No I/O, no locks, no MPI inside a handler.
 *   S2  Every rank makes the same sequence of collectives.  The stop flag is
 *       never acted on locally: it is a vote that rides in a collective all
 *       ranks make anyway (the per-step control reduction in train.c, or
 *       the evaluation's own reduction), and every rank acts on the reduced
 *       result, so all ranks stop after the same step.  A signal during
 *       start-up waits in its flag for the first of these; one that comes
 *       while the libraries load, before main, waits blocked
 *       (stop_block_early from the executable's .preinit_array) until the
 *       handlers are in place.
 *   S3  After the agreement the ranks save (state_save: each rank writes
 *       its shard, then the collective commit, in which rank 0 alone
 *       commits) and exit 75.  Further signals change nothing: a save in
 *       progress is never interrupted by us; SIGKILL is covered by the
 *       checkpoint commit protocol instead.
 *
 * STATES (per process)
 *
 *   RUNNING --signal--> FLAGGED --control reduction sees a vote--> AGREED
 *   RUNNING --control reduction sees another rank's vote--------> AGREED
 *   AGREED --train_run: state_save() commits--> SAVED --main--> exit 75
 *   AGREED --save fails--> FAILED --main--> exit 1 (previous checkpoint good)
 */
#include "fault/stop.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ftrain/ckpt_stop.h"
#include "util/util.h"

/* The USR signal that is not the stop signal: counted, never acted on.
 * Its default action would end the rank at once, with nothing saved, in
 * the middle of a run whose checkpoints are all that a stop relies on. */
static atomic_int other_count;
static int other_signal;

static void other_handler(int sig)
{
    (void)sig;
    atomic_fetch_add_explicit(&other_count, 1, memory_order_relaxed); /* S1 */
}

int stop_install(int stop_signal, char *err, size_t cap)
{
    /* The library's handlers; installed again with another stop signal
     * (--stop-signal), the library puts SIGUSR1, trapped from the start so
     * that none is lost before the options are read, back to its default
     * action.  ftrain catches it instead, to warn and go on. */
    if (ckpt_stop_install(stop_signal) != CKPT_OK)
        return util_fail(err, cap, STOP_ESYS, "%s", ckpt_last_error());
    int other = stop_signal == SIGUSR1 ? SIGUSR2 : SIGUSR1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = other_handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* nothing waits for it */
    if (sigaction(other, &sa, NULL) != 0)
        return util_fail(err, cap, STOP_ESYS, "sigaction(SIG%s): %s", stop_signal_name(other),
                         strerror(errno));
    other_signal = other;
    return STOP_OK;
}

int stop_other_signals(int *sig)
{
    if (sig)
        *sig = other_signal;
    return atomic_load_explicit(&other_count, memory_order_relaxed);
}

/* The kernel's signal mask: 64 bits, signal n is bit n - 1. */
#define KMASK(sig) ((uint64_t)1 << ((sig) - 1))
static uint64_t early_old_mask;
static int early_blocked;

/* Not instrumented: it may run before a sanitizer's runtime is set up. */
__attribute__((no_sanitize("address", "undefined")))
void stop_block_early(void)
{
    uint64_t set = KMASK(SIGUSR1) | KMASK(SIGUSR2) | KMASK(SIGTERM) | KMASK(SIGINT);
    /* The raw call: the C library (and a sanitizer's interceptors) may not
     * be initialised yet. */
    if (syscall(SYS_rt_sigprocmask, SIG_BLOCK, &set, &early_old_mask, sizeof set) == 0)
        early_blocked = 1;
}

int stop_unblock(char *err, size_t cap)
{
    if (!early_blocked)
        return STOP_OK;
    early_blocked = 0;
    if (syscall(SYS_rt_sigprocmask, SIG_SETMASK, &early_old_mask, NULL,
                sizeof early_old_mask) != 0)
        return util_fail(err, cap, STOP_ESYS, "sigprocmask: %s", strerror(errno));
    return STOP_OK;
}

int stop_local_signal(void) { return ckpt_stop_requested(); }

double stop_local_time(void) { return ckpt_stop_time(); }

const char *stop_signal_name(int sig)
{
    return util_name_of(util_signals, UTIL_COUNT(util_signals), sig, "?");
}

int stop_signal_parse(const char *name)
{
    return util_name_parse(util_signals, UTIL_COUNT(util_signals), name);
}

int stop_signal_choice_parse(const char *name)
{
    return util_name_parse(util_signals, UTIL_STOP_SIGNAL_CHOICES, name);
}

const char *stop_signal_choice_names(char *buf, size_t cap)
{
    return util_names_join(util_signals, UTIL_STOP_SIGNAL_CHOICES, buf, cap);
}

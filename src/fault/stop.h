/*
 * stop.h - signal flags and the cross-rank stop agreement.
 *
 * HowTo: the executable calls stop_block_early() from its .preinit_array
 * (before any shared library's constructor: CUDA's take most of a second),
 * then stop_install(SIGUSR1) first thing in main and stop_unblock() once the
 * stop signal is known.  A signal that arrives in between waits, blocked,
 * instead of killing the process with its default action.  Handlers only set
 * flags.  The train loop folds stop_local_signal() into the control
 * reduction it makes every step (the evaluation into its own reduction; a
 * signal during start-up waits in its flag for the first of these), so every
 * rank learns at the same step that some rank was signalled, and no rank
 * skips a collective another enters.
 */
#ifndef FTRAIN_STOP_H
#define FTRAIN_STOP_H

#include <stddef.h>

typedef enum {
    STOP_OK = 0,
    STOP_ESYS = -1  /* sigaction or sigprocmask failed; err has the reason */
} stop_err_t;

/** Install handlers (sigaction, SA_RESTART off) for stop_signal, SIGTERM and
 *  SIGINT, and one for the other USR signal that only counts it (its
 *  default action would end the rank with nothing saved).  @return STOP_OK,
 *  or STOP_ESYS with err naming the call, the signal and the system's
 *  reason. */
int stop_install(int stop_signal, char *err, size_t cap);

/** @return how many times the USR signal that is not the stop signal came
 *  (ignored); *sig (when not NULL) gets that signal's number. */
int stop_other_signals(int *sig);

/** Block SIGUSR1, SIGUSR2, SIGTERM and SIGINT and remember the mask the
 *  process started with.  Safe before the C library's constructors run
 *  (a raw system call).  For the executable's .preinit_array only. */
void stop_block_early(void);

/** Restore the mask stop_block_early() saved: a signal that came while it was
 *  blocked is delivered now, to the handlers stop_install() set (or, for a
 *  signal without one, its default action).  No-op without
 *  stop_block_early().  @return STOP_OK, or STOP_ESYS with err set. */
int stop_unblock(char *err, size_t cap);

/** @return the first signal this process received, 0 when none. */
int stop_local_signal(void);

/** @return the wall-clock time (seconds since the epoch) of the first
 *  signal, 0 when none. */
double stop_local_time(void);

/** The one name table of the signals that stop a run, without "SIG":
 *  "USR1", "USR2", "TERM", "INT".  _name: "?" for another signal; _parse:
 *  the signal number, or -1 for an unknown name.  The _choice_ pair knows
 *  only the ones a stop signal may be chosen from (--stop-signal): USR1
 *  and USR2; _choice_names writes "USR1 or USR2" into buf (returns buf). */
const char *stop_signal_name(int sig);
int stop_signal_parse(const char *name);
int stop_signal_choice_parse(const char *name);
const char *stop_signal_choice_names(char *buf, size_t cap);

#endif

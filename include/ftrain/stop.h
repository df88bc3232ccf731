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

/** Install handlers (sigaction, SA_RESTART off) for stop_signal, SIGTERM and
 *  SIGINT.  @return 0 or -1 (errno set). */
int stop_install(int stop_signal);

/** Block SIGUSR1, SIGUSR2, SIGTERM and SIGINT and remember the mask the
 *  process started with.  Safe before the C library's constructors run
 *  (a raw system call).  For the executable's .preinit_array only. */
void stop_block_early(void);

/** Restore the mask stop_block_early() saved: a signal that came while it was
 *  blocked is delivered now, to the handlers stop_install() set (or, for a
 *  signal without one, its default action).  No-op without
 *  stop_block_early().  @return 0 or -1 (errno set). */
int stop_unblock(void);

/** @return the first signal this process received, 0 when none. */
int stop_local_signal(void);

/** @return the wall-clock time (seconds since the epoch) of the first
 *  signal, 0 when none. */
double stop_local_time(void);

#endif

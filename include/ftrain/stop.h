/*
 * stop.h - signal flags and the cross-rank stop agreement.
 *
 * HowTo: stop_install(SIGUSR1) once, first thing in main.  Handlers only set
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

/** @return the first signal this process received, 0 when none. */
int stop_local_signal(void);

/** @return the wall-clock time (seconds since the epoch) of the first
 *  signal, 0 when none. */
double stop_local_time(void);

#endif

/*
 * signals.h - the signals ftrain-supervise takes: the stop warning (USR1
 * and USR2, from sbatch --signal=B:USR1@LEAD) and TERM (time limit,
 * preemption, scancel).  The handlers only set flags; the main loop reads
 * them (sv_signals_take) and acts: forwards the stop signal to the
 * launcher, notes TERM.  SIGCHLD's handler only ends a wait early (the
 * launch's poll), so that a launcher's end is seen at once.
 *
 * Invariants:
 *   - a handler does nothing but store to a volatile sig_atomic_t;
 *   - a signal that comes at any time, before the first launch included,
 *     is noted, never lost and never fatal (the handlers are set first);
 *   - TERM is never forwarded to the launcher: srun answers TERM by
 *     killing the ranks at once (slurmstepd sends them TERM itself).
 */
#ifndef FTRAIN_SUPERVISE_SIGNALS_H
#define FTRAIN_SUPERVISE_SIGNALS_H

/** Set the handlers of USR1, USR2, TERM and CHLD.  @return 0 or -1 (errno). */
int sv_signals_install(void);

/** The stop signal that came since the last call (SIGUSR1, SIGUSR2, or 0),
 *  and whether TERM came (*term: 1 once it came, it stays). */
int sv_signals_take_stop(void);
int sv_signals_term(void);

/** Before a requeue: ignore the stop signals from now on, and give TERM
 *  its default action back (the requeue's TERM ends this process). */
void sv_signals_for_requeue(void);

#endif

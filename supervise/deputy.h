/*
 * deputy.h - ftrain-supervise --deputy: the watcher of the batch host.
 *
 * The supervisor runs on the batch host and dies with it.  Under --no-kill
 * SLURM then keeps the job RUNNING on the nodes left, with nothing running
 * on them and no requeue, until its time limit.  So the supervisor starts
 * this deputy as a one-task step on another node of the allocation (steps.h)
 * and keeps a heartbeat file fresh in RUN_DIR (beat.h).  The deputy reads
 * that file every DEPUTY_POLL_S; once it has not changed for the stale bound
 * (FTRAIN_DEPUTY_STALE, --stale), it asks SLURM (bounded calls, every
 * DEPUTY_ASK_S while the silence lasts) for the job's state, restart count
 * and batch host and the batch host's state, and the pure policy
 * (supervise_deputy_decide, policy.h) decides: watch, leave, requeue the
 * job (the next allocation leaves the DOWN node out; the node-local tier
 * is kept on the nodes left, for the next launch to resume from), or, at
 * the restart cap, cancel it.
 *
 * Its end: it leaves when the heartbeat says "ended" (the supervisor's own
 * end), when a later run's heartbeat is there or SLURM says the run is
 * over, and on TERM or INT (the job's end, the supervisor's stop); a
 * requeue or cancel of its own ends it too.  Its life is bounded by the
 * job's: SLURM ends every step when the job ends.
 *
 * Its log lines, "<log name>[<job>]: deputy on <node>: ...", go to its
 * standard output, which srun on the batch host carries into the job's
 * output; once it acts (the batch host lost, that srun with it) they are
 * appended straight to the job's output file (--job-output, SLURM's StdOut).
 *
 * HowTo: main() calls deputy_main(argc, argv) when argv[1] is "--deputy";
 * its options are in deputy_usage.
 */
#ifndef FTRAIN_SUPERVISE_DEPUTY_H
#define FTRAIN_SUPERVISE_DEPUTY_H

/* How often the deputy reads the heartbeat, and asks SLURM once it is
 * silent (seconds). */
#define DEPUTY_POLL_S 0.5
#define DEPUTY_ASK_S 5.0
/* Requeue rounds that failed (each up to 3 tries) before it gives up. */
#define DEPUTY_REQUEUE_ROUNDS 3

extern const char deputy_usage[];

/** Run the deputy.  @return the exit status (0: it left or acted; 1: its
 *  requeue or cancel failed; 2: bad arguments). */
int deputy_main(int argc, char **argv);

#endif

/*
 * train_stop.c - the trainer's end by an agreed stop (fault/stop.h: a
 * signal handler only sets a flag; the ranks agree on it in the next
 * control reduction).  Once a stop is agreed: find which rank saw a signal
 * first and which one, finish the saves in flight, save this step, report
 * the stop's timing.  A stop whose own save fails ends the run with an
 * error, so that the job is not requeued.
 */
#include "train/train_internal.h"
#include "util/util.h"

#include <stdio.h>

#include "ftrain/ckpt.h"
#include "fault/stop.h"

/* Rank-local: a warning for each arrival of the USR signal that is not the
 * stop signal (stop.h: it is counted and ignored), so that whoever sent it
 * learns why the run goes on. */
void train_stop_warn_others(trainer_t *t)
{
    int sig = 0;
    int n = stop_other_signals(&sig);
    if (n == t->log.other_signals_seen)
        return;
    char times[32] = "";
    if (n - t->log.other_signals_seen > 1)
        snprintf(times, sizeof times, " %d times", n - t->log.other_signals_seen);
    fprintf(stderr,
            "ftrain: warning: rank %d got SIG%s%s, which is not the stop signal "
            "(--stop-signal %s): ignored; SIG%s, TERM or INT stop the run with a checkpoint\n",
            t->rank, stop_signal_name(sig), times, stop_signal_name(t->cfg->stop_signal),
            stop_signal_name(t->cfg->stop_signal));
    t->log.other_signals_seen = n;
}

/* Collective, once a stop is agreed: which rank saw a signal first (the
 * lowest such rank on a tie) and which signal it was.  neg_first is the
 * agreed -(earliest signal time); the rank whose own time gives it exactly
 * is the first.  (A MAX of rank numbers would name the highest rank that
 * had a signal, and of signal numbers the largest.) */
int train_stop_first_signal(trainer_t *t, double neg_first, double agreed, stop_info_t *stop,
                            char *err, size_t cap)
{
    int sig = stop_local_signal();
    int mine = sig && -stop_local_time() == neg_first;
    double first[2] = {mine ? -(double)t->rank : NO_SIGNAL_TIME, mine ? (double)sig : 0};
    if (comm_allreduce(t->comm, first, 2, COMM_F64, COMM_MAX) != COMM_OK) {
        snprintf(err, cap, "control reduction failed: %s", comm_last_error());
        return TRAIN_EFAIL;
    }
    stop->first_rank = first[0] > NO_SIGNAL_TIME ? (int)-first[0] : 0;
    stop->signo = (int)first[1];
    stop->signalled = -neg_first;
    stop->agreed = agreed;
    return TRAIN_OK;
}

/* Rank 0: the stop line, a warning past --grace, the stop event. */
static void report_stop(trainer_t *t, const stop_info_t *stop, double save_began,
                        const train_result_t *res)
{
    const config_t *cfg = t->cfg;
    double end = util_wall_s(), total = end - stop->signalled;
    const char *name = config_signal_name(stop->signo);
    printf("stop: signal %s (first seen by rank %d) at step %lld: agreed %.3f s after "
           "the signal, checkpoint %.3f s, total %.3f s; longest step %.3f s%s\n",
           name, stop->first_rank, (long long)t->run.step, stop->agreed - stop->signalled,
           end - save_began, total, t->stats.longest_gap,
           res->saved ? "" : " (no run directory: nothing saved)");
    if (total > cfg->grace)
        fprintf(stderr, "ftrain: warning: the stop took %.1f s, more than --grace %.1f s: "
                "raise the signal lead time (see docs/slurm.md)\n", total, cfg->grace);
    char extra[REPORT_MAX];
    snprintf(extra, sizeof extra,
             "\"signal\":\"%s\",\"seconds\":%.4f,\"longest_step_seconds\":%.4f", name, total,
             t->stats.longest_gap);
    metrics_event(&t->metrics, "stop", t->run.step, t->size, extra);
    fflush(stdout);
}

/* The stop's own save failed: err (the save's reason) is made to say that
 * a stop was under way and that the job ends with exit 1, so it is not
 * requeued, and which checkpoint is still the newest good one.
 * @return TRAIN_EFAIL. */
static int stop_save_failed(const trainer_t *t, const stop_info_t *stop, char *err, size_t cap)
{
    char why[TRAIN_ERR_MAX], kept[REPORT_MAX] = "no checkpoint was committed before it";
    snprintf(why, sizeof why, "%s", err);
    if (t->ckpt.last_saved >= 0)
        snprintf(kept, sizeof kept, "the newest committed checkpoint, of step %lld, is kept",
                 (long long)t->ckpt.last_saved);
    snprintf(err, cap, "stop (signal %s) at step %lld: its checkpoint failed, so this job "
             "exits 1 and is not requeued (%s): %s", config_signal_name(stop->signo),
             (long long)t->run.step, kept, why);
    return TRAIN_EFAIL;
}

/* Collective, after an agreed stop: finish an in-flight save, save this
 * step (none if it is already committed), report the stop's timing; the
 * run's outcome is then TRAIN_STOPPED.  @return TRAIN_OK, or a failure
 * when the save failed. */
int train_stop_and_save(trainer_t *t, stop_info_t *stop, train_result_t *res, char *err,
                        size_t cap)
{
    if (stop->signalled < 0 || stop->signalled > stop->agreed) /* unknown, or a clock step */
        stop->signalled = stop->agreed;
    res->stop_signal = stop->signo;
    res->stop_time = stop->signalled;
    step_settle(t);
    if (!(t->clock.loop_end > 0)) /* set already when the final evaluation was cut short */
        t->clock.loop_end = util_mono_s(); /* the stop's save is not training time */
    double save_began = util_wall_s();
    save_progress_local(t, "the stop"); /* a local save in flight is sealed first */
    save_commit_async(t, res, 1); /* wait for an in-flight save, commit it */
    if (t->cfg->run_dir[0] && t->ckpt.last_saved != t->run.step) {
        if (save_checkpoint(t, t->run.step, res, err, cap) != TRAIN_OK)
            return stop_save_failed(t, stop, err, cap);
    } else if (t->ckpt.last_saved == t->run.step) {
        char name[TRAIN_STEP_NAME_MAX];
        ckpt_step_dirname((uint64_t)t->run.step, name, sizeof name);
        snprintf(res->ckpt, sizeof res->ckpt, "%s/%s", t->ckpt.root, name);
    }
    res->saved = t->ckpt.last_saved == t->run.step;
    if (t->rank == 0)
        report_stop(t, stop, save_began, res);
    res->outcome = TRAIN_STOPPED;
    return TRAIN_OK;
}

/* Collective, after an evaluation outside the loop's steps was cut short by
 * a stop signal: agree on the first signal (there is no control reduction
 * to carry it) and stop at this step.  @return as train_stop_and_save. */
int train_stop_after_eval(trainer_t *t, train_result_t *res, char *err, size_t cap)
{
    int sig = stop_local_signal();
    double when = sig ? -stop_local_time() : NO_SIGNAL_TIME;
    if (comm_allreduce(t->comm, &when, 1, COMM_F64, COMM_MAX) != COMM_OK) {
        snprintf(err, cap, "control reduction failed: %s", comm_last_error());
        return TRAIN_EFAIL;
    }
    stop_info_t stop;
    if (train_stop_first_signal(t, when, util_wall_s(), &stop, err, cap) != TRAIN_OK)
        return TRAIN_EFAIL;
    return train_stop_and_save(t, &stop, res, err, cap);
}

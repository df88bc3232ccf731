/*
 * train.c - the training loop.  train_run, at the end of this file, tells
 * the story; the functions above it and the files beside it are its
 * chapters:
 *
 *   set up   run directory, data -> sampler -> model -> optimizer (and on a
 *            GPU the device mirror, train_gpu.c): train_setup.c
 *   resume   from a checkpoint written on any world size: train_setup.c
 *   step     this rank's micro-batches (train_step.c) -> control reduction
 *            (stop votes, save-now vote, gradient max) -> gradient reduction
 *            -> optimizer update -> log (train_report.c) -> maybe evaluate
 *            -> maybe stop (train_stop.c) -> maybe save (train_save.c; in
 *            the background with --ckpt-async, save_async.c)
 *   finish   save the last step, a last evaluation, the result
 *
 * Every rank makes the same collectives in the same order; the decision to
 * stop or save comes out of a reduction, never from a local flag (stop.c).
 * Every function returns TRAIN_OK or an error; how the run ended (done or
 * stopped) is res->outcome, and the loop runs while it is TRAIN_RUNNING.
 */
#include "train/train_internal.h"
#include "util/util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "gpu/gpu.h"
#include "fault/stop.h"
#include "fault/watchdog.h"
#include "tier/local_save.h"

/* The control vector reduced with MAX each step.  CTL_BAD: BAD_LOSS when
 * this rank's loss was not finite or too large for the deterministic
 * fixed-point sum, BAD_DEVICE when its device failed.  Nothing NaN enters
 * the reduction: MPI's MAX drops a NaN unless it sits on the last rank. */
enum { CTL_GMAX, CTL_STOP, CTL_SAVE, CTL_SIG_TIME, CTL_ASYNC_BUSY, CTL_BAD, CTL_N };
enum { BAD_LOSS = 1, BAD_DEVICE = 2 };

/* The agreed outcome of one step's control reduction. */
typedef struct {
    double ctl[CTL_N];
    double agreed;             /* wall-clock time the reduction ended */
} control_t;

uint64_t train_param_hash(const float *params, size_t n)
{
    return (uint64_t)XXH64(params, n * sizeof *params, 0);
}

/* Collective: the evaluation at the end of the epoch the current step
 * completes, reported (rank 0) and remembered.  It reads the weights only:
 * no parameter or random stream changes.  *cut_short: a stop signal cut it
 * short (nothing is reported then but that). */
static int evaluate_epoch(trainer_t *t, train_result_t *res, int *cut_short, char *err,
                          size_t cap)
{
    eval_result_t ev;
    int64_t epoch = t->run.step / t->run.steps_per_epoch;
    step_settle(t);
    double eval_start = util_mono_s();
    int rc = evaluate_test_set(t, &ev, err, cap);
    t->stats.eval_seconds += util_mono_s() - eval_start; /* kept out of the training throughput */
    if (rc != TRAIN_OK)
        return TRAIN_EFAIL;
    *cut_short = ev.cut_short;
    if (ev.cut_short) {
        if (t->rank == 0 && !t->cfg->quiet)
            printf("eval: epoch %lld cut short by a stop signal\n", (long long)epoch);
        return TRAIN_OK;
    }
    t->run.evaluated_step = t->run.step;
    t->run.evaluated_at_end = t->run.step == t->run.total_steps;
    char what[64];
    snprintf(what, sizeof what, "epoch %lld", (long long)epoch);
    report_eval(t, res, &ev, what, 0);
    return TRAIN_OK;
}

/* The clocks of this process's training: throughput, ETA, the longest gap
 * between stop checks, periodic saves, the run's seconds. */
static void start_clocks(trainer_t *t)
{
    const config_t *cfg = t->cfg;
    t->log.every = cfg->log_every; /* 0: every --log-interval seconds */
    t->clock.run_base = t->state.run_seconds; /* 0, or what state_load read */
    t->clock.run_start = util_mono_s();
    t->log.window.since = t->clock.run_start;
    t->log.rate.since = t->clock.run_start;
    t->clock.control_last = t->clock.run_start;
    t->ckpt.last_time = t->clock.run_start;
    t->local.last_time = t->clock.run_start;
}

/* Collective: resumed at an epoch end whose evaluation the stop skipped,
 * run it now, on the restored weights, so the epoch is evaluated once.  A
 * stop signal that cuts it short stops the run again (the evaluation stays
 * pending in the checkpoint of this step, and res->outcome is
 * TRAIN_STOPPED).  @return TRAIN_OK or a failure. */
static int evaluate_pending_epoch(trainer_t *t, train_result_t *res, char *err, size_t cap)
{
    int64_t step = t->run.step;
    if (!(t->state.eval_pending && step > 0 && step % t->run.steps_per_epoch == 0)) {
        t->run.evaluated_step = t->run.step; /* done before that checkpoint was saved */
        return TRAIN_OK;
    }
    int cut_short = 0;
    int rc = evaluate_epoch(t, res, &cut_short, err, cap);
    if (rc == TRAIN_OK && cut_short)
        rc = train_stop_after_eval(t, res, err, cap);
    return rc;
}

/* Which micro-batches of the current step this rank computes. */
static void plan_step(trainer_t *t, step_plan_t *plan)
{
    plan->epoch = t->run.step / t->run.steps_per_epoch;
    plan->index = t->run.step % t->run.steps_per_epoch;
    sampler_set_epoch(&t->data.sampler, plan->epoch);
    sampler_rank_micros(&t->data.sampler, plan->index, t->rank, t->size, &plan->first_micro,
                        &plan->nmicro);
    plan->samples = sampler_step_size(&t->data.sampler, plan->index);
}

/* The message of a device failure voted by some rank: this rank's own
 * reason, or that it was another's.  @return TRAIN_EDEVICE. */
static int device_failure(const trainer_t *t, char *err, size_t cap)
{
    const char *why = t->dev.failed ? gpu_last_error() : NULL;
    snprintf(err, cap, "a device failed at step %lld%s%s", (long long)t->run.step,
             why ? ": " : " (on another rank)", why ? why : "");
    return TRAIN_EDEVICE;
}

/* A diverged run or a failed device, voted by any rank, fails every rank. */
static int check_control(const trainer_t *t, const double *ctl, char *err, size_t cap)
{
    long long step = (long long)t->run.step;
    if (ctl[CTL_BAD] >= BAD_DEVICE)
        return device_failure(t, err, cap);
    if (ctl[CTL_BAD] > 0) {
        snprintf(err, cap, "non-finite or runaway loss at step %lld: training diverged "
                 "(lower --lr?)", step);
        return TRAIN_EDIVERGED;
    }
    if (!isfinite(ctl[CTL_GMAX])) {
        snprintf(err, cap, "non-finite gradient at step %lld: training diverged (lower --lr?)",
                 step);
        return TRAIN_EDIVERGED;
    }
    return TRAIN_OK;
}

/* Collective: the control reduction of every step (stop votes, save-now
 * vote, global max |g|, the asynchronous save's progress, divergence and
 * device failures); it is also the stop check whose gaps we time. */
static int agree_control(trainer_t *t, const step_sums_t *sums, control_t *out, char *err,
                         size_t cap)
{
    const config_t *cfg = t->cfg;
    double *ctl = out->ctl;
    double c0 = util_mono_s();
    int sig = stop_local_signal();
    ctl[CTL_GMAX] = sums->max_abs_grad;
    ctl[CTL_STOP] = sig != 0;
    /* Rank 0 alone votes, so the MAX carries its bits: SAVE_VOTE_SHARED a
     * shared save is due by --ckpt-interval, SAVE_VOTE_LOCAL a local one
     * by --ckpt-local-interval. */
    ctl[CTL_SAVE] = t->rank != 0 ? 0
                    : SAVE_VOTE_SHARED * (cfg->ckpt_interval > 0 &&
                                          util_mono_s() - t->ckpt.last_time >= cfg->ckpt_interval) +
                          SAVE_VOTE_LOCAL * (cfg->ckpt_local_interval > 0 &&
                                             util_mono_s() - t->local.last_time >=
                                                 cfg->ckpt_local_interval);
    ctl[CTL_SIG_TIME] = sig ? -stop_local_time() : NO_SIGNAL_TIME;
    ctl[CTL_ASYNC_BUSY] = async_save_writing(&t->async.save);
    ctl[CTL_BAD] = t->dev.failed ? BAD_DEVICE : sums->loss_bad ? BAD_LOSS : 0;
    if (comm_allreduce(t->comm, ctl, CTL_N, COMM_F64, COMM_MAX) != COMM_OK) {
        snprintf(err, cap, "control reduction failed: %s", comm_last_error());
        return TRAIN_EFAIL;
    }
    out->agreed = util_wall_s();
    double c1 = util_mono_s();
    t->stats.control_seconds += c1 - c0;
    if (c1 - t->clock.control_last > t->stats.longest_gap)
        t->stats.longest_gap = c1 - t->clock.control_last;
    t->clock.control_last = c1;
    return check_control(t, ctl, err, cap);
}

/* Test aid (--step-delay-ms): a signal cuts the sleep short, as it should. */
static void delay_step(const trainer_t *t)
{
    int ms = t->cfg->step_delay_ms;
    if (!ms)
        return;
    struct timespec d = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&d, NULL);
}

/* The first step of this process ended (a stop or failure in it as well):
 * its time without evaluations, and its samples. */
static void note_first_step(trainer_t *t)
{
    step_settle(t);
    double s = util_mono_s() - t->clock.run_start - t->stats.eval_seconds;
    t->stats.first_step_seconds = s > 0 ? s : 1e-9;
    t->stats.first_step_samples = t->stats.run_samples;
}

/* Collective: one step and what follows it; after an agreed stop
 * res->outcome is TRAIN_STOPPED.  @return TRAIN_OK or a failure. */
static int train_step(trainer_t *t, train_result_t *res, char *err, size_t cap)
{
    step_plan_t plan;
    step_sums_t sums;
    control_t control;
    /* Progress marks for the watchdog, numbered as the progress lines. */
    watchdog_phase(WATCHDOG_COMPUTE, t->run.step + 1);
    plan_step(t, &plan);
    step_compute(t, &plan, &sums);
    watchdog_phase(WATCHDOG_CONTROL, t->run.step + 1);
    int rc = agree_control(t, &sums, &control, err, cap);
    watchdog_phase(WATCHDOG_REDUCE, t->run.step + 1);
    if (rc == TRAIN_OK)
        rc = step_reduce(t, &plan, control.ctl[CTL_GMAX], &sums, err, cap);
    watchdog_phase(WATCHDOG_UPDATE, t->run.step + 1);
    if (rc == TRAIN_OK && !isfinite(sums.loss)) {
        snprintf(err, cap, "non-finite loss at step %lld: training diverged (lower --lr?)",
                 (long long)t->run.step);
        rc = TRAIN_EDIVERGED;
    }
    if (rc != TRAIN_OK)
        return rc;
    step_update(t);
    t->run.step++;
    if (t->async.save.in_flight && control.ctl[CTL_ASYNC_BUSY] == 0)
        save_commit_async(t, res, 0); /* every rank's writer is done: commit */
    report_progress(t, &plan, &sums);
    train_stop_warn_others(t);
    train_report_recovery(t);
    train_inject_fault(t);
    if (control.ctl[CTL_STOP] > 0) {
        /* A stop skips the epoch's evaluation (it would delay the save);
         * the checkpoint records it as pending and the resume runs it. */
        stop_info_t stop;
        rc = train_stop_first_signal(t, control.ctl[CTL_SIG_TIME], control.agreed, &stop, err,
                                     cap);
        return rc == TRAIN_OK ? train_stop_and_save(t, &stop, res, err, cap) : rc;
    }
    if (t->run.step % t->run.steps_per_epoch == 0) {
        /* A stop signal that cuts the evaluation short is left to the
         * next step's control reduction. */
        int cut_short = 0;
        rc = evaluate_epoch(t, res, &cut_short, err, cap);
    }
    if (rc == TRAIN_OK)
        rc = save_if_due(t, (int)control.ctl[CTL_SAVE], res, err, cap);
    watchdog_phase(WATCHDOG_UPDATE, t->run.step);
    if (rc == TRAIN_OK)
        delay_step(t);
    return rc;
}

/* Collective: save first, so the final weights are safe, then a last
 * evaluation when the run did not end on an evaluated epoch.  A stop
 * signal that cuts it short makes the run exit 75 like any stop: the
 * requeued job resumes at the last step and only evaluates.  res->outcome
 * is TRAIN_DONE or TRAIN_STOPPED then.  @return TRAIN_OK or a failure. */
static int finish_training(trainer_t *t, train_result_t *res, char *err, size_t cap)
{
    step_settle(t);
    t->clock.loop_end = util_mono_s();
    /* The last step's update had no control reduction after it. */
    int bad = comm_any_failed(t->comm, t->dev.failed);
    if (bad < 0) {
        snprintf(err, cap, "control reduction failed: %s", comm_last_error());
        return TRAIN_EFAIL;
    }
    if (bad)
        return device_failure(t, err, cap);
    save_progress_local(t, "the end");
    save_commit_async(t, res, 1);
    if (t->cfg->run_dir[0] && t->ckpt.last_saved != t->run.step &&
        save_checkpoint(t, t->run.step, res, err, cap) != TRAIN_OK)
        return TRAIN_EFAIL;
    res->saved = t->ckpt.last_saved == t->run.step;
    if (t->run.evaluated_at_end) {
        res->outcome = TRAIN_DONE;
        return TRAIN_OK;
    }
    eval_result_t ev;
    double eval_start = util_mono_s();
    int rc = evaluate_test_set(t, &ev, err, cap);
    /* After loop_end: counted in the timing line's evaluation time, never
     * taken out of the loop's training time again. */
    t->stats.final_eval_seconds = util_mono_s() - eval_start;
    if (rc != TRAIN_OK)
        return TRAIN_EFAIL;
    if (ev.cut_short) {
        if (t->rank == 0 && !t->cfg->quiet)
            printf("eval: final evaluation cut short by a stop signal\n");
        return train_stop_after_eval(t, res, err, cap);
    }
    char what[96], epochs[32];
    report_epochs(t->run.step, t->run.steps_per_epoch, epochs, sizeof epochs);
    snprintf(what, sizeof what, "final, step %lld (epoch %s, mid-epoch)", (long long)t->run.step,
             epochs);
    report_eval(t, res, &ev, what, 1);
    res->outcome = TRAIN_DONE;
    return TRAIN_OK;
}

/* The result of a run that ended (done or stopped: res->outcome), the
 * same on every rank; rank 0 logs the done or exit event.  The final
 * weights come from the GPU first: @return TRAIN_OK, or TRAIN_EFAIL when
 * that copy failed. */
static int fill_result(trainer_t *t, train_result_t *res, char *err, size_t cap)
{
    int rc = TRAIN_OK;
    train_stop_warn_others(t);
    res->step = t->run.step;
    res->epoch = t->run.step / t->run.steps_per_epoch;
    res->loss = t->run.last_loss;
    res->regression = !t->data.test.classification;
    if (t->dev.mirror && t->local.on)
        tier_save_settle(&t->local.tier); /* as in download_state */
    if (t->dev.mirror && gpu_mirror_download(t->dev.mirror, err, cap) != TRAIN_OK)
        rc = TRAIN_EFAIL;
    res->param_hash = train_param_hash(model_params(t->nn.model), t->nn.n_params);
    double steps = (double)t->stats.reduced_steps;
    res->reduce_ms_per_step = steps > 0 ? 1e3 * t->stats.reduce_seconds / steps : 0;
    res->control_ms_per_step = steps > 0 ? 1e3 * t->stats.control_seconds / steps : 0;
    res->async_saves = t->async.saves;
    res->async_failures = t->async.failures;
    res->async_skipped = t->async.skipped;
    res->async_stall_ms = t->async.saves ? 1e3 * t->async.stall_seconds / t->async.saves : 0;
    res->local_sealed = t->local.sealed;
    res->local_failed = t->local.failed;
    res->local_skipped = t->local.skipped;
    res->local_stall_ms = t->local.sealed ? 1e3 * t->local.stall_seconds / t->local.sealed : 0;
    res->local_cpu_ms = t->local.sealed ? 1e3 * t->local.cpu_seconds / t->local.sealed : 0;
    /* Training throughput: the loop's steps only, without the evaluations
     * (a peer that does not evaluate is compared with the same work). */
    double loop_end = t->clock.loop_end > 0 ? t->clock.loop_end : util_mono_s();
    double loop_s = loop_end - t->clock.run_start - t->stats.eval_seconds;
    double samples = (double)t->stats.run_samples;
    /* Nor its first step, when there were others (the peer times neither
     * its warm-up steps). */
    res->first_step_seconds = 0;
    if (t->stats.first_step_seconds > 0 && t->stats.run_samples > t->stats.first_step_samples &&
        loop_s > t->stats.first_step_seconds) {
        loop_s -= t->stats.first_step_seconds;
        samples -= (double)t->stats.first_step_samples;
        res->first_step_seconds = t->stats.first_step_seconds;
    }
    res->eval_seconds = t->stats.eval_seconds + t->stats.final_eval_seconds;
    res->samples_per_s = loop_s > 0 ? samples / loop_s : 0;
    if (t->rank == 0) {
        int done = rc == TRAIN_OK && res->outcome == TRAIN_DONE;
        char extra[REPORT_MAX];
        snprintf(extra, sizeof extra, "\"param_hash\":\"%016llx\",\"seconds\":%.3f",
                 (unsigned long long)res->param_hash, util_mono_s() - t->clock.started);
        metrics_event(&t->metrics, done ? "done" : "exit", t->run.step, t->size, extra);
    }
    return rc;
}

/* Release the trainer.  With --ckpt-local-remove-at-end, and once every
 * rank has closed it, the node-local tier goes too: nothing in it is newer
 * than the shared tier's newest when the run ended well on every rank
 * (ended_well: this rank's view; the GPU's final download can fail on one,
 * so it is agreed). */
static void close_trainer(trainer_t *t, int ended_well)
{
    const config_t *cfg = t->cfg;
    comm_t *comm = t->comm;
    int rank = t->rank;
    int remove_local = t->local.on && cfg->ckpt_local_remove_at_end;
    char local_root[sizeof t->local.tier.root];
    int local_leader = t->local.tier.leader;
    memcpy(local_root, t->local.tier.root, sizeof local_root);
    trainer_close(t);
    if (!remove_local || comm_any_failed(comm, !ended_well) != 0)
        return;
    char why[TRAIN_ERR_MAX];
    if (tier_remove_at_end(local_root, local_leader, cfg->ckpt_local, comm, why, sizeof why) != 0)
        fprintf(stderr, "ftrain: warning: rank %d: the node-local tier was not removed at the "
                "end: %s\n", rank, why);
    else if (rank == 0 && !cfg->quiet)
        printf("local checkpoints: removed the node-local tier on every node "
               "(--ckpt-local-remove-at-end)\n");
}

int train_run(const config_t *cfg, const world_t *world, comm_t *comm, gpu_ctx_t *gpu,
              const watchdog_leftover_t *before, train_result_t *res, char *err, size_t cap)
{
    trainer_t trainer;
    trainer_t *t = &trainer;
    memset(res, 0, sizeof *res); /* res->outcome: TRAIN_RUNNING */
    int rc = trainer_open(t, cfg, world, comm, gpu, err, cap);
    t->log.before = before;
    watchdog_phase(WATCHDOG_LOAD, 0);
    if (rc == TRAIN_OK)
        rc = trainer_resume(t, err, cap);
    if (rc == TRAIN_OK) {
        report_start(t);
        start_clocks(t);
        rc = evaluate_pending_epoch(t, res, err, cap);
    }
    while (rc == TRAIN_OK && res->outcome == TRAIN_RUNNING && t->run.step < t->run.total_steps) {
        rc = train_step(t, res, err, cap);
        if (t->stats.first_step_seconds == 0 && t->stats.run_samples > 0)
            note_first_step(t);
    }
    if (rc == TRAIN_OK && res->outcome == TRAIN_RUNNING)
        rc = finish_training(t, res, err, cap);
    if (rc == TRAIN_OK)
        rc = fill_result(t, res, err, cap);
    if (rc != TRAIN_OK)
        res->outcome = TRAIN_RUNNING; /* no outcome: the error is the news */
    close_trainer(t, rc == TRAIN_OK && res->saved);
    return rc;
}

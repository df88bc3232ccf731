/*
 * train.c - the training loop.  train_run, at the end of this file, tells
 * the story; the functions above it are its chapters:
 *
 *   set up   run directory, data -> sampler -> model -> optimizer (and on a
 *            GPU the device mirror, train_gpu.c): train_setup.c
 *   resume   from a checkpoint written on any world size: train_setup.c
 *   step     this rank's micro-batches (train_step.c) -> control reduction
 *            (stop votes, save-now vote, gradient max) -> gradient reduction
 *            -> optimizer update -> log -> maybe evaluate -> maybe stop ->
 *            maybe save (in the background with --ckpt-async, save_async.c)
 *   finish   save the last step, a last evaluation, the result
 *
 * Every rank makes the same collectives in the same order; the decision to
 * stop or save comes out of a reduction, never from a local flag (stop.c).
 */
#include "train/train_internal.h"
#include "util/util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "ftrain/ckpt.h"
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

/* "No signal" in a MAX reduction of negated signal times. */
#define NO_SIGNAL_TIME (-1e300)

/* The agreed outcome of one step's control reduction. */
typedef struct {
    double ctl[CTL_N];
    double agreed;             /* wall-clock time the reduction ended */
} control_t;

uint64_t train_param_hash(const float *params, size_t n)
{
    return (uint64_t)XXH64(params, n * sizeof *params, 0);
}

/* ---- saving -------------------------------------------------------------- */

/* The node-local tier's save in flight, moved on or finished (below). */
static void progress_local(trainer_t *t, const char *when);

/* The GPU's state straight into the asynchronous save's snapshot (one
 * device -> host copy, into page-locked memory, instead of a download to
 * the host arrays and a second copy from there); the start then copies only
 * the small host tensors. */
static int download_into_snapshot(trainer_t *t, async_save_t *save, char *err, size_t cap)
{
    const float *host[ASYNC_PLACED_MAX] = {model_params(t->model), optim_state_m(t->opt),
                                           optim_state_v(t->opt)};
    float *dst[ASYNC_PLACED_MAX] = {NULL, NULL, NULL};
    for (int i = 0; i < ASYNC_PLACED_MAX; i++) {
        size_t offset = 0;
        if (host[i] && state_copy_offset(&t->state, host[i], &offset) == STATE_OK)
            dst[i] = save->copy + offset;
        else
            host[i] = NULL;
    }
    if (!save->copy || !dst[0])
        return gpu_mirror_download(t->gpu, err, cap); /* no snapshot yet: the usual way */
    int rc = gpu_mirror_download_to(t->gpu, dst[0], dst[1], dst[2], err, cap);
    if (rc == TRAIN_OK)
        async_save_placed(save, host, ASYNC_PLACED_MAX, t->n_params);
    return rc;
}

/* Collective: bring the state of `step` to the host (from the GPU when there
 * is one; into the asynchronous save's snapshot when `into` is given) and
 * set the position the checkpoint records. */
static int download_state(trainer_t *t, int64_t step, async_save_t *into, char *err, size_t cap)
{
    err[0] = '\0';
    int rc = TRAIN_OK;
    if (t->device_failed) {
        snprintf(err, cap, "gpu: a device call failed: %s", gpu_last_error());
        rc = TRAIN_EFAIL;
    } else if (t->gpu) {
        /* The download writes the host state, which a local save's helper
         * may still be copying (a CPU run's host state is written only by
         * the update: step_update waits there). */
        if (t->tier_on)
            tier_save_settle(&t->tier);
        rc = into ? download_into_snapshot(t, into, err, cap) : gpu_mirror_download(t->gpu, err, cap);
    }
    if (comm_any_failed(t->comm, rc)) {
        if (!err[0])
            snprintf(err, cap, "another rank could not copy its state from the GPU");
        return TRAIN_EFAIL;
    }
    state_t *st = &t->state;
    st->step = step;
    st->epoch = step / t->steps_per_epoch;
    st->cursor = (step % t->steps_per_epoch) * t->cfg->global_batch;
    /* A stop at an epoch end saves before that epoch's evaluation; the
     * record says so, and the resumed run evaluates first. */
    st->eval_pending = step > 0 && step % t->steps_per_epoch == 0 && t->evaluated_step != step;
    st->run_seconds = t->run_base + (t->run_start > 0 ? now_s() - t->run_start : 0);
    return TRAIN_OK;
}

/* After a commit: it is the newest checkpoint, and the next periodic save
 * counts from now. */
static void remember_commit(trainer_t *t, int64_t step, const char *dir, train_result_t *res)
{
    if (step > t->last_saved)
        t->last_saved = step;
    t->last_save_time = now_s();
    snprintf(res->ckpt, sizeof res->ckpt, "%s", dir);
}

/* Rank 0, after a commit: prune older checkpoints, print the checkpoint
 * line and log the event.  The checkpoint resumed from is spared while
 * no later step is committed; once one is, it counts among --ckpt-keep
 * like any other (sparing it for the whole run left K+1 on disk). */
static void prune_and_report(trainer_t *t, int64_t step, const char *dir, const char *how,
                             const char *extra_json)
{
    if (t->rank != 0)
        return;
    int removed = 0;
    int spare = t->state.resumed_from[0] && step <= t->resumed_step;
    ckpt_prune(t->ckpt_root, t->cfg->ckpt_keep, spare ? t->state.resumed_from : NULL,
               &removed);
    if (!t->cfg->quiet)
        printf("checkpoint: %s committed %s%s\n", dir, how, removed ? " (older ones pruned)" : "");
    metrics_event(&t->metrics, "checkpoint", step, t->size, extra_json);
    fflush(stdout);
}

/* Collective: save `step` now and wait for the commit. */
static int save_checkpoint(trainer_t *t, int64_t step, train_result_t *res, char *err,
                           size_t cap)
{
    watchdog_phase(WATCHDOG_SAVE, step);
    step_settle(t); /* the last step's GPU work is not the save's */
    double t0 = now_s();
    char dir[TRAIN_CKPT_DIR_MAX], how[REPORT_MAX], extra[REPORT_MAX];
    if (download_state(t, step, NULL, err, cap) != TRAIN_OK ||
        state_save(&t->state, t->comm, t->ckpt_root, t->cfg->ckpt_level, dir, sizeof dir, err,
                   cap) != STATE_OK)
        return TRAIN_EFAIL;
    double dt = now_s() - t0;
    if (t->gpu) {
        double copy_ms = 1e3 * gpu_mirror_copy_seconds(t->gpu);
        snprintf(how, sizeof how, "in %.3f s (GPU copy %.1f ms)", dt, copy_ms);
        snprintf(extra, sizeof extra, "\"seconds\":%.4f,\"gpu_copy_ms\":%.3f", dt, copy_ms);
    } else {
        snprintf(how, sizeof how, "in %.3f s", dt);
        snprintf(extra, sizeof extra, "\"seconds\":%.4f", dt);
    }
    remember_commit(t, step, dir, res);
    prune_and_report(t, step, dir, how, extra);
    train_tell_young_daly(t, step, dt);
    return TRAIN_OK;
}

/* Collective: snapshot `step` and start writing it in the background.  A
 * save that does not start is reported and counted (it changes the exit
 * code), and training goes on. */
static void start_async_save(trainer_t *t, int64_t step)
{
    char err[TRAIN_ERR_MAX];
    watchdog_phase(WATCHDOG_SAVE, step);
    step_settle(t);
    double t0 = now_s();
    int rc = download_state(t, step, &t->async, err, sizeof err);
    if (rc == TRAIN_OK)
        rc = async_save_start(&t->async, &t->state, t->comm, t->ckpt_root, t->cfg->ckpt_level,
                              t0, t->gpu ? gpu_mirror_copy_seconds(t->gpu) : -1, err,
                              sizeof err);
    if (rc != TRAIN_OK) {
        t->async_failures++;
        if (t->rank == 0)
            fprintf(stderr, "ftrain: asynchronous checkpoint of step %lld not started: %s\n",
                    (long long)step, err);
    }
    t->last_save_time = now_s();
}

/* Collective, when a save is in flight: wait for the writer and commit.  A
 * failed commit is reported and counted (it changes the exit code) but
 * training goes on: the previous checkpoint is still good.  after_training:
 * at a stop or the run's end, where the wait for the writers is reported
 * apart from the training stall; at a step boundary it is stall. */
static void commit_async_save(trainer_t *t, train_result_t *res, int after_training)
{
    if (!t->async.in_flight)
        return;
    watchdog_phase(WATCHDOG_SAVE, t->async.step);
    async_commit_t done;
    char err[TRAIN_ERR_MAX] = "";
    int rc = async_save_commit(&t->async, t->comm, &done, err, sizeof err);
    if (!after_training) {
        done.stall_seconds += done.writer_wait_seconds;
        done.writer_wait_seconds = 0;
    }
    t->async_saves++;
    t->async_stall_seconds += done.stall_seconds;
    if (rc != TRAIN_OK) {
        t->async_failures++;
        if (t->rank == 0)
            fprintf(stderr, "ftrain: asynchronous checkpoint of step %lld failed: %s\n",
                    (long long)done.step, err);
        return;
    }
    char how[REPORT_MAX], copy[REPORT_MAX] = "", extra[REPORT_MAX], copy_json[REPORT_MAX] = "";
    char wait[REPORT_MAX] = "";
    if (done.gpu_copy_seconds >= 0) {
        snprintf(copy, sizeof copy, " (GPU copy %.1f)", 1e3 * done.gpu_copy_seconds);
        snprintf(copy_json, sizeof copy_json, ",\"gpu_copy_ms\":%.3f", 1e3 * done.gpu_copy_seconds);
    }
    if (done.writer_wait_seconds >= 0.0005)
        snprintf(wait, sizeof wait, "; after training, %.1f ms waiting for the writer",
                 1e3 * done.writer_wait_seconds);
    snprintf(how, sizeof how, "(async: %.3f s in the background, training stall %.1f ms: "
             "snapshot %.1f%s, commit %.1f%s)", done.background_seconds,
             1e3 * done.stall_seconds, 1e3 * done.snapshot_seconds, copy,
             1e3 * (done.stall_seconds - done.snapshot_seconds), wait);
    snprintf(extra, sizeof extra,
             "\"seconds\":%.4f,\"async\":true,\"stall_ms\":%.3f,\"writer_wait_ms\":%.3f%s",
             done.background_seconds, 1e3 * done.stall_seconds,
             1e3 * done.writer_wait_seconds, copy_json);
    remember_commit(t, done.step, done.dir, res);
    prune_and_report(t, done.step, done.dir, how, extra);
    train_tell_young_daly(t, done.step, done.stall_seconds);
}

/* ---- stopping ------------------------------------------------------------ */

/* An agreed stop: which signal, first seen by which rank, and when. */
typedef struct {
    int signo, first_rank;
    double signalled, agreed;  /* wall-clock: the first signal, the agreement */
} stop_info_t;

/* Rank-local: a warning for each arrival of the USR signal that is not the
 * stop signal (stop.h: it is counted and ignored), so that whoever sent it
 * learns why the run goes on. */
static void warn_other_signal(trainer_t *t)
{
    int sig = 0;
    int n = stop_other_signals(&sig);
    if (n == t->other_signals_seen)
        return;
    char times[32] = "";
    if (n - t->other_signals_seen > 1)
        snprintf(times, sizeof times, " %d times", n - t->other_signals_seen);
    fprintf(stderr,
            "ftrain: warning: rank %d got SIG%s%s, which is not the stop signal "
            "(--stop-signal %s): ignored; SIG%s, TERM or INT stop the run with a checkpoint\n",
            t->rank, stop_signal_name(sig), times, stop_signal_name(t->cfg->stop_signal),
            stop_signal_name(t->cfg->stop_signal));
    t->other_signals_seen = n;
}

/* Collective, once a stop is agreed: which rank saw a signal first (the
 * lowest such rank on a tie) and which signal it was.  neg_first is the
 * agreed -(earliest signal time); the rank whose own time gives it exactly
 * is the first.  (A MAX of rank numbers would name the highest rank that
 * had a signal, and of signal numbers the largest.) */
static int find_first_signal(trainer_t *t, double neg_first, double agreed, stop_info_t *stop,
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
           name, stop->first_rank, (long long)t->step, stop->agreed - stop->signalled,
           end - save_began, total, t->longest_gap,
           res->saved ? "" : " (no run directory: nothing saved)");
    if (total > cfg->grace)
        fprintf(stderr, "ftrain: warning: the stop took %.1f s, more than --grace %.1f s: "
                "raise the signal lead time (see docs/slurm.md)\n", total, cfg->grace);
    char extra[REPORT_MAX];
    snprintf(extra, sizeof extra,
             "\"signal\":\"%s\",\"seconds\":%.4f,\"longest_step_seconds\":%.4f", name, total,
             t->longest_gap);
    metrics_event(&t->metrics, "stop", t->step, t->size, extra);
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
    if (t->last_saved >= 0)
        snprintf(kept, sizeof kept, "the newest committed checkpoint, of step %lld, is kept",
                 (long long)t->last_saved);
    snprintf(err, cap, "stop (signal %s) at step %lld: its checkpoint failed, so this job "
             "exits 1 and is not requeued (%s): %s", config_signal_name(stop->signo),
             (long long)t->step, kept, why);
    return TRAIN_EFAIL;
}

/* Collective, after an agreed stop: finish an in-flight save, save this
 * step (none if it is already committed), report the stop's timing.
 * @return TRAIN_STOPPED, or a failure when the save failed. */
static int stop_and_save(trainer_t *t, stop_info_t *stop, train_result_t *res, char *err,
                         size_t cap)
{
    if (stop->signalled < 0 || stop->signalled > stop->agreed) /* unknown, or a clock step */
        stop->signalled = stop->agreed;
    res->stop_signal = stop->signo;
    res->stop_time = stop->signalled;
    step_settle(t);
    if (!(t->loop_end > 0)) /* set already when the final evaluation was cut short */
        t->loop_end = now_s(); /* the stop's save is not training time */
    double save_began = util_wall_s();
    progress_local(t, "the stop"); /* a local save in flight is sealed first */
    commit_async_save(t, res, 1); /* wait for an in-flight save, commit it */
    if (t->cfg->run_dir[0] && t->last_saved != t->step) {
        if (save_checkpoint(t, t->step, res, err, cap) != TRAIN_OK)
            return stop_save_failed(t, stop, err, cap);
    } else if (t->last_saved == t->step) {
        char name[TRAIN_STEP_NAME_MAX];
        ckpt_step_dirname((uint64_t)t->step, name, sizeof name);
        snprintf(res->ckpt, sizeof res->ckpt, "%s/%s", t->ckpt_root, name);
    }
    res->saved = t->last_saved == t->step;
    if (t->rank == 0)
        report_stop(t, stop, save_began, res);
    return TRAIN_STOPPED;
}

/* Collective, after an evaluation outside the loop's steps was cut short by
 * a stop signal: agree on the first signal (there is no control reduction
 * to carry it) and stop at this step.  @return as stop_and_save. */
static int stop_after_eval(trainer_t *t, train_result_t *res, char *err, size_t cap)
{
    int sig = stop_local_signal();
    double when = sig ? -stop_local_time() : NO_SIGNAL_TIME;
    if (comm_allreduce(t->comm, &when, 1, COMM_F64, COMM_MAX) != COMM_OK) {
        snprintf(err, cap, "control reduction failed: %s", comm_last_error());
        return TRAIN_EFAIL;
    }
    stop_info_t stop;
    if (find_first_signal(t, when, util_wall_s(), &stop, err, cap) != TRAIN_OK)
        return TRAIN_EFAIL;
    return stop_and_save(t, &stop, res, err, cap);
}

/* ---- evaluation ---------------------------------------------------------- */

/* An evaluation as the eval line's tail and the eval event's members.
 * Classification: the accuracy.  Regression: R^2 (an accuracy within a
 * tolerance says little of a fit), and the loss with %g, as a good fit's
 * MSE is far below what four decimals show. */
static void format_eval(const trainer_t *t, const eval_result_t *ev, char *line, size_t lcap,
                        char *json, size_t jcap)
{
    if (t->test.classification) {
        snprintf(line, lcap, "test_loss %.4f test_acc %.4f", ev->loss, ev->acc);
        snprintf(json, jcap, "\"test_loss\":%.6g,\"test_acc\":%.6g", ev->loss, ev->acc);
        return;
    }
    snprintf(line, lcap, "test_loss %.4g test_r2 %.6f", ev->loss, ev->r2);
    /* JSON has no inf or nan: a diverged fit's R^2 is null. */
    if (isfinite(ev->r2))
        snprintf(json, jcap, "\"test_loss\":%.6g,\"test_r2\":%.6g", ev->loss, ev->r2);
    else
        snprintf(json, jcap, "\"test_loss\":%.6g,\"test_r2\":null", ev->loss);
}

/* The result's copy of the latest evaluation, of step `step`. */
static void keep_eval(train_result_t *res, const eval_result_t *ev, int64_t step)
{
    res->test_loss = ev->loss;
    res->test_acc = ev->acc;
    res->test_r2 = ev->r2;
    res->evaluated = 1;
    res->eval_step = step;
}

/* Rank 0 prints the evaluation ("eval: WHAT ...") and logs its eval event
 * (with "final":true for the one at the end of a run that did not end on
 * an epoch); every rank remembers it for the summary. */
static void report_eval(trainer_t *t, train_result_t *res, const eval_result_t *ev,
                        const char *what, int final)
{
    keep_eval(res, ev, t->step);
    if (t->rank != 0)
        return;
    char line[REPORT_MAX], extra[REPORT_MAX];
    format_eval(t, ev, line, sizeof line, extra, sizeof extra);
    if (!t->cfg->quiet)
        printf("eval: %s %s\n", what, line);
    if (final) {
        size_t n = strlen(extra);
        snprintf(extra + n, sizeof extra - n, ",\"final\":true");
    }
    metrics_event(&t->metrics, "eval", t->step, t->size, extra);
    fflush(stdout);
}

/* Collective: the evaluation at the end of the epoch the current step
 * completes, reported (rank 0) and remembered.  It reads the weights only:
 * no parameter or random stream changes.  *cut_short: a stop signal cut it
 * short (nothing is reported then but that). */
static int evaluate_epoch(trainer_t *t, train_result_t *res, int *cut_short, char *err,
                          size_t cap)
{
    eval_result_t ev;
    int64_t epoch = t->step / t->steps_per_epoch;
    step_settle(t);
    double eval_start = now_s();
    int rc = evaluate_test_set(t, &ev, err, cap);
    t->eval_seconds += now_s() - eval_start; /* kept out of the training throughput */
    if (rc != TRAIN_OK)
        return TRAIN_EFAIL;
    *cut_short = ev.cut_short;
    if (ev.cut_short) {
        if (t->rank == 0 && !t->cfg->quiet)
            printf("eval: epoch %lld cut short by a stop signal\n", (long long)epoch);
        return TRAIN_OK;
    }
    t->evaluated_step = t->step;
    t->evaluated_at_end = t->step == t->total_steps;
    char what[64];
    snprintf(what, sizeof what, "epoch %lld", (long long)epoch);
    report_eval(t, res, &ev, what, 0);
    return TRAIN_OK;
}

/* ---- starting ------------------------------------------------------------ */

/* Rank 0, after a resume at or past the run's last step: a plain note
 * that nothing is trained (the summary then reports no training loss and
 * no samples/s).  A "resume:" line, so that --quiet keeps it too. */
static void note_nothing_to_train(const trainer_t *t)
{
    const config_t *cfg = t->cfg;
    if (t->step == 0 || t->step < t->total_steps)
        return;
    char asked[REPORT_MAX];
    if (cfg->steps)
        snprintf(asked, sizeof asked, "--steps %lld", (long long)cfg->steps);
    else
        snprintf(asked, sizeof asked, "--epochs %lld: %lld steps", (long long)cfg->epochs,
                 (long long)t->total_steps);
    if (t->step > t->total_steps)
        printf("resume: note: the checkpoint's step %lld is past the %lld steps this run asks "
               "for (%s): nothing is trained, the weights stay those of step %lld; to train "
               "on, ask for more steps\n", (long long)t->step, (long long)t->total_steps,
               asked, (long long)t->step);
    else
        printf("resume: note: the checkpoint's step %lld is the last of the %lld steps this "
               "run asks for (%s): nothing is left to train\n", (long long)t->step,
               (long long)t->total_steps, asked);
}

/* Rank 0: the line describing the run, and the start event. */
static void announce_run(trainer_t *t)
{
    const config_t *cfg = t->cfg;
    if (t->rank != 0)
        return;
    char arch[MODEL_ARCH_STRING_MAX];
    model_arch_string(model_arch(t->model), arch, sizeof arch);
    /* After a resume the init is the checkpoint's: where the weights came from. */
    const char *init = model_init_name(t->state.init);
    if (!cfg->quiet)
        printf("train: %s, init %s, %zu parameters, data %s (%d train / %d test), global batch "
               "%lld (%lld x %lld), %lld steps (%lld per epoch), %s, %d BLAS thread%s per "
               "rank\n",
               arch, init, t->n_params, cfg->data, t->train.samples, t->test.samples,
               (long long)cfg->global_batch,
               (long long)(cfg->global_batch / cfg->micro_batch), (long long)cfg->micro_batch,
               (long long)t->total_steps, (long long)t->steps_per_epoch,
               cfg->deterministic ? "deterministic" : "fast reduction", t->blas_threads,
               t->blas_threads == 1 ? "" : "s");
    char note[REPORT_MAX];
    if (config_schedule_warning(cfg, t->total_steps, note, sizeof note))
        fprintf(stderr, "ftrain: warning: %s\n", note);
    note_nothing_to_train(t);
    char extra[REPORT_MAX];
    snprintf(extra, sizeof extra, "\"init\":\"%s\"", init);
    metrics_event(&t->metrics, "start", t->step, t->size, extra);
    fflush(stdout);
}

/* The clocks of this process's training: throughput, ETA, the longest gap
 * between stop checks, periodic saves, the run's seconds. */
static void start_clocks(trainer_t *t)
{
    const config_t *cfg = t->cfg;
    int64_t spe = t->steps_per_epoch;
    t->log_every = cfg->log_every ? cfg->log_every : (spe >= 10 ? spe / 10 : 1);
    t->run_base = t->state.run_seconds; /* 0, or what state_load read */
    t->run_start = now_s();
    t->window.since = t->run_start;
    t->control_last = t->run_start;
    t->last_save_time = t->run_start;
    t->last_local_time = t->run_start;
}

/* Collective: resumed at an epoch end whose evaluation the stop skipped,
 * run it now, on the restored weights, so the epoch is evaluated once.  A
 * stop signal that cuts it short stops the run again (the evaluation stays
 * pending in the checkpoint of this step).  @return TRAIN_OK to train on,
 * TRAIN_STOPPED or a failure. */
static int evaluate_pending_epoch(trainer_t *t, train_result_t *res, char *err, size_t cap)
{
    if (!(t->state.eval_pending && t->step > 0 && t->step % t->steps_per_epoch == 0)) {
        t->evaluated_step = t->step; /* done before that checkpoint was saved */
        return TRAIN_OK;
    }
    int cut_short = 0;
    int rc = evaluate_epoch(t, res, &cut_short, err, cap);
    if (rc == TRAIN_OK && cut_short)
        rc = stop_after_eval(t, res, err, cap);
    return rc;
}

/* ---- one step ------------------------------------------------------------ */

/* Which micro-batches of the current step this rank computes. */
static void plan_step(trainer_t *t, step_plan_t *plan)
{
    plan->epoch = t->step / t->steps_per_epoch;
    plan->index = t->step % t->steps_per_epoch;
    sampler_set_epoch(&t->sampler, plan->epoch);
    sampler_rank_micros(&t->sampler, plan->index, t->rank, t->size, &plan->first_micro,
                        &plan->nmicro);
    plan->samples = sampler_step_size(&t->sampler, plan->index);
}

/* The message of a device failure voted by some rank: this rank's own
 * reason, or that it was another's.  @return TRAIN_EFAIL. */
static int device_failure(const trainer_t *t, char *err, size_t cap)
{
    const char *why = t->device_failed ? gpu_last_error() : NULL;
    snprintf(err, cap, "a device failed at step %lld%s%s", (long long)t->step,
             why ? ": " : " (on another rank)", why ? why : "");
    return TRAIN_EFAIL;
}

/* A diverged run or a failed device, voted by any rank, fails every rank. */
static int check_control(const trainer_t *t, const double *ctl, char *err, size_t cap)
{
    long long step = (long long)t->step;
    if (ctl[CTL_BAD] >= BAD_DEVICE)
        return device_failure(t, err, cap);
    if (ctl[CTL_BAD] > 0) {
        snprintf(err, cap, "non-finite or runaway loss at step %lld: training diverged "
                 "(lower --lr?)", step);
        return TRAIN_EFAIL;
    }
    if (!isfinite(ctl[CTL_GMAX])) {
        snprintf(err, cap, "non-finite gradient at step %lld: training diverged (lower --lr?)",
                 step);
        return TRAIN_EFAIL;
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
    double c0 = now_s();
    int sig = stop_local_signal();
    ctl[CTL_GMAX] = sums->max_abs_grad;
    ctl[CTL_STOP] = sig != 0;
    /* Rank 0 alone votes, so the MAX carries its bits: 1 a shared save is
     * due by --ckpt-interval, 2 a local one by --ckpt-local-interval. */
    ctl[CTL_SAVE] = t->rank != 0 ? 0
                    : (cfg->ckpt_interval > 0 &&
                       now_s() - t->last_save_time >= cfg->ckpt_interval) +
                          2 * (cfg->ckpt_local_interval > 0 &&
                               now_s() - t->last_local_time >= cfg->ckpt_local_interval);
    ctl[CTL_SIG_TIME] = sig ? -stop_local_time() : NO_SIGNAL_TIME;
    ctl[CTL_ASYNC_BUSY] = async_save_writing(&t->async);
    ctl[CTL_BAD] = t->device_failed ? BAD_DEVICE : sums->loss_bad ? BAD_LOSS : 0;
    if (comm_allreduce(t->comm, ctl, CTL_N, COMM_F64, COMM_MAX) != COMM_OK) {
        snprintf(err, cap, "control reduction failed: %s", comm_last_error());
        return TRAIN_EFAIL;
    }
    out->agreed = util_wall_s();
    double c1 = now_s();
    t->control_seconds += c1 - c0;
    if (c1 - t->control_last > t->longest_gap)
        t->longest_gap = c1 - t->control_last;
    t->control_last = c1;
    return check_control(t, ctl, err, cap);
}

static void fmt_eta(double s, char *buf, size_t cap)
{
    if (s < 0 || !isfinite(s))
        s = 0;
    long v = (long)s;
    if (v >= 3600)
        snprintf(buf, cap, "%ldh%02ldm", v / 3600, v / 60 % 60);
    else
        snprintf(buf, cap, "%ldm%02lds", v / 60, v % 60);
}

/* Rank 0: the progress line and metrics row of the window since the last. */
static void print_progress(trainer_t *t)
{
    const config_t *cfg = t->cfg;
    log_window_t *win = &t->window;
    int64_t step = t->step, epochs = (t->total_steps + t->steps_per_epoch - 1) / t->steps_per_epoch;
    double dt = now_s() - win->since;
    double sps = dt > 0 ? (double)win->samples / dt : 0;
    double steps_done = t->run_samples ? (double)t->run_samples / (double)cfg->global_batch : 1;
    double eta = (double)(t->total_steps - step) * (now_s() - t->run_start) / steps_done;
    char eta_text[REPORT_MAX];
    fmt_eta(eta, eta_text, sizeof eta_text);
    double lr = optim_lr(optim_config(t->opt), step - 1);
    double loss = win->loss / (double)win->samples, acc = (double)win->hits / (double)win->samples;
    /* Regression: no accuracy (R^2 is the evaluation's), the loss with %g. */
    int classes = t->train.classification;
    char numbers[REPORT_MAX];
    if (classes)
        snprintf(numbers, sizeof numbers, "loss %.4f acc %.4f", loss, acc);
    else
        snprintf(numbers, sizeof numbers, "loss %.4g", loss);
    if (!cfg->quiet)
        printf("epoch %lld/%lld step %lld/%lld %s lr %.2e %.0f samples/s eta %s\n",
               (long long)((step - 1) / t->steps_per_epoch + 1), (long long)epochs,
               (long long)step, (long long)t->total_steps, numbers, lr, sps, eta_text);
    metrics_row_t row = {step, (step - 1) / t->steps_per_epoch, loss, classes ? acc : NAN, lr,
                         sps, t->size};
    metrics_step(&t->metrics, &row);
    fflush(stdout);
    memset(win, 0, sizeof *win);
    win->since = now_s();
}

/* Count the step just done; print progress every --log-every steps. */
static void log_progress(trainer_t *t, const step_plan_t *plan, const step_sums_t *sums)
{
    t->run_samples += plan->samples;
    t->window.loss += sums->loss;
    t->window.hits += sums->hits;
    t->window.samples += plan->samples;
    t->last_loss = sums->loss / (double)plan->samples;
    if (t->rank == 0 && (t->step % t->log_every == 0 || t->step == t->total_steps))
        print_progress(t);
}

/* "12.3 MiB", "4.0 KiB", "512 B" into buf (16 bytes). */
static const char *size_text(uint64_t bytes, char buf[16])
{
    if (bytes >= (1u << 30))
        snprintf(buf, 16, "%.2f GiB", (double)bytes / (1u << 30));
    else if (bytes >= (1u << 20))
        snprintf(buf, 16, "%.1f MiB", (double)bytes / (1u << 20));
    else if (bytes >= 1024)
        snprintf(buf, 16, "%.1f KiB", (double)bytes / 1024);
    else
        snprintf(buf, 16, "%u B", (unsigned)bytes);
    return buf;
}

/* Count a local save that was sealed on every node, or one that failed,
 * for the summary line; on rank 0, its line and event, or the failure's
 * message (training goes on either way: the shared tier is the source of
 * truth).  when: "" at a step boundary,
 * else where it was waited for ("the stop", "the end"). */
static void report_local(trainer_t *t, int rc, const tier_report_t *rep, const char *why,
                         const char *when)
{
    if (rc == TIER_OK) {
        t->local_sealed++;
        t->local_stall_seconds += rep->stall_s;
        t->local_cpu_seconds += rep->helper_cpu_s;
    } else {
        t->local_failed++;
    }
    if (t->rank != 0)
        return;
    if (rc != TIER_OK) {
        fprintf(stderr, "ftrain: local checkpoint of step %lld failed: %s; training goes on "
                "(the shared tier is untouched)\n", (long long)rep->step, why);
        return;
    }
    char own[16], copies[16], node[16], fullest[16], at[REPORT_MAX] = "";
    if (when[0])
        snprintf(at, sizeof at, ", finished at %s", when);
    if (!t->cfg->quiet)
        printf("local checkpoint: step %lld in %.3f s (own shard %s written in %.3f s, "
               "partner copies %s in %.3f s, sealed in %.3f s); this node's tier holds %s, "
               "the fullest %s; training stall %.1f ms (snapshot %.1f, exchange %.1f, "
               "waits %.1f); helper CPU %.1f ms%s\n", (long long)rep->step, rep->total_s,
               size_text(rep->own_bytes, own), rep->write_s, size_text(rep->copy_bytes, copies),
               rep->copy_s, rep->seal_s, size_text(rep->node_bytes, node),
               size_text(rep->max_node_bytes, fullest), 1e3 * rep->stall_s,
               1e3 * rep->snapshot_s, 1e3 * rep->exchange_s, 1e3 * rep->waited_s,
               1e3 * rep->helper_cpu_s, at);
    char extra[2 * REPORT_MAX];
    snprintf(extra, sizeof extra, "\"seconds\":%.4f,\"write_s\":%.4f,\"copy_s\":%.4f,"
             "\"seal_s\":%.4f,\"node_bytes\":%llu,\"max_node_bytes\":%llu,\"async\":true,"
             "\"stall_ms\":%.3f,\"snapshot_ms\":%.3f,\"exchange_ms\":%.3f,"
             "\"waited_ms\":%.3f,\"helper_cpu_ms\":%.3f", rep->total_s, rep->write_s,
             rep->copy_s, rep->seal_s, (unsigned long long)rep->node_bytes,
             (unsigned long long)rep->max_node_bytes, 1e3 * rep->stall_s, 1e3 * rep->snapshot_s,
             1e3 * rep->exchange_s, 1e3 * rep->waited_s, 1e3 * rep->helper_cpu_s);
    metrics_event(&t->metrics, "local_checkpoint", rep->step, t->size, extra);
    fflush(stdout);
}

/* Collective, at every step boundary (and, with when set, before a stop or
 * the end: then it waits for the save in flight and seals it): move the
 * local save in flight on, and report it once it is sealed or failed. */
static void progress_local(trainer_t *t, const char *when)
{
    if (!t->tier_on || !tier_save_in_flight(&t->tier))
        return;
    tier_report_t rep;
    tier_status_t status;
    char why[TRAIN_ERR_MAX] = "";
    int rc;
    if (when) {
        watchdog_phase(WATCHDOG_SAVE_SYNC, tier_save_step(&t->tier));
        rc = tier_save_finish(&t->tier, t->comm, &status, &rep, why, sizeof why);
    } else {
        rc = tier_save_progress(&t->tier, t->comm, &status, &rep, why, sizeof why);
    }
    if (status == TIER_SEALED || status == TIER_FAILED)
        report_local(t, rc, &rep, why, when ? when : "");
}

/* Collective: start a node-local checkpoint of this step (--ckpt-local),
 * written, copied to the partners and sealed in the background
 * (progress_local); every --ckpt-flush-every-th that starts also goes to
 * the shared tier, at this step.  At most one local save is in flight: one
 * due meanwhile is skipped.  A local save that fails is reported and
 * training goes on: the shared tier is the source of truth.
 * @return TRAIN_OK, or a failure of the shared flush. */
static int save_local(trainer_t *t, train_result_t *res, char *err, size_t cap)
{
    const config_t *cfg = t->cfg;
    if (tier_save_in_flight(&t->tier)) {
        t->local_skipped++;
        if (tier_save_skip(&t->tier) == 1 && t->rank == 0 && !cfg->quiet)
            printf("local checkpoint: step %lld skipped: the local save of step %lld is still "
                   "in flight\n", (long long)t->step, (long long)tier_save_step(&t->tier));
        return TRAIN_OK;
    }
    watchdog_phase(WATCHDOG_SAVE, t->step);
    step_settle(t);
    double t0 = now_s();
    char why[TRAIN_ERR_MAX] = "";
    int rc = download_state(t, t->step, NULL, why, sizeof why);
    if (rc == TRAIN_OK &&
        tier_save_start(&t->tier, t->comm, &t->state, t0, why, sizeof why) != TIER_OK)
        rc = TRAIN_EFAIL;
    t->last_local_time = now_s();
    if (rc != TRAIN_OK) {
        t->local_failed++;
        if (t->rank == 0)
            fprintf(stderr, "ftrain: local checkpoint of step %lld not started: %s; training "
                    "goes on (the shared tier is untouched)\n", (long long)t->step, why);
        return TRAIN_OK;
    }
    t->local_saves++;
    if (!cfg->ckpt_flush_every || t->local_saves % cfg->ckpt_flush_every != 0 ||
        t->last_saved == t->step)
        return TRAIN_OK;
    if (!cfg->ckpt_async)
        return save_checkpoint(t, t->step, res, err, cap);
    if (!t->async.in_flight)
        start_async_save(t, t->step);
    return TRAIN_OK;
}

/* Collective: a periodic save when one is due (--ckpt-every, or the
 * --ckpt-interval vote), never at the last step (the end saves it); a
 * local one first when that is due. */
static int save_if_due(trainer_t *t, const control_t *control, train_result_t *res, char *err,
                       size_t cap)
{
    const config_t *cfg = t->cfg;
    int votes = (int)control->ctl[CTL_SAVE];
    if (t->tier_on) {
        tier_save_prepare(&t->tier, &t->state);
        progress_local(t, NULL);
    }
    if (t->tier_on && t->step < t->total_steps &&
        ((cfg->ckpt_local_every && t->step % cfg->ckpt_local_every == 0) || (votes & 2))) {
        int rc = save_local(t, res, err, cap);
        if (rc != TRAIN_OK)
            return rc;
    }
    if (!cfg->run_dir[0] || t->step >= t->total_steps || t->last_saved == t->step ||
        !((cfg->ckpt_every && t->step % cfg->ckpt_every == 0) || (votes & 1)))
        return TRAIN_OK;
    if (!cfg->ckpt_async)
        return save_checkpoint(t, t->step, res, err, cap);
    if (t->async.in_flight) {
        /* At most one in flight, and never a stall waiting for it: this
         * save is skipped; the one being written still lands. */
        t->async_skipped++;
        if (t->rank == 0 && !cfg->quiet)
            printf("checkpoint: step %lld skipped: the save of step %lld is still being "
                   "written\n", (long long)t->step, (long long)t->async.step);
        return TRAIN_OK;
    }
    start_async_save(t, t->step);
    return TRAIN_OK;
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
    double s = now_s() - t->run_start - t->eval_seconds;
    t->first_step_seconds = s > 0 ? s : 1e-9;
    t->first_step_samples = t->run_samples;
}

/* Collective: one step and what follows it.  @return TRAIN_OK to go on,
 * TRAIN_STOPPED after an agreed stop, or a failure. */
static int train_step(trainer_t *t, train_result_t *res, char *err, size_t cap)
{
    step_plan_t plan;
    step_sums_t sums;
    control_t control;
    /* Progress marks for the watchdog, numbered as the progress lines. */
    watchdog_phase(WATCHDOG_COMPUTE, t->step + 1);
    plan_step(t, &plan);
    step_compute(t, &plan, &sums);
    watchdog_phase(WATCHDOG_CONTROL, t->step + 1);
    int rc = agree_control(t, &sums, &control, err, cap);
    watchdog_phase(WATCHDOG_REDUCE, t->step + 1);
    if (rc == TRAIN_OK)
        rc = step_reduce(t, &plan, control.ctl[CTL_GMAX], &sums, err, cap);
    watchdog_phase(WATCHDOG_UPDATE, t->step + 1);
    if (rc == TRAIN_OK && !isfinite(sums.loss)) {
        snprintf(err, cap, "non-finite loss at step %lld: training diverged (lower --lr?)",
                 (long long)t->step);
        rc = TRAIN_EFAIL;
    }
    if (rc != TRAIN_OK)
        return rc;
    step_update(t);
    t->step++;
    if (t->async.in_flight && control.ctl[CTL_ASYNC_BUSY] == 0)
        commit_async_save(t, res, 0); /* every rank's writer is done: commit */
    log_progress(t, &plan, &sums);
    warn_other_signal(t);
    train_report_recovery(t);
    train_inject_fault(t);
    if (control.ctl[CTL_STOP] > 0) {
        /* A stop skips the epoch's evaluation (it would delay the save);
         * the checkpoint records it as pending and the resume runs it. */
        stop_info_t stop;
        rc = find_first_signal(t, control.ctl[CTL_SIG_TIME], control.agreed, &stop, err, cap);
        return rc == TRAIN_OK ? stop_and_save(t, &stop, res, err, cap) : rc;
    }
    if (t->step % t->steps_per_epoch == 0) {
        /* A stop signal that cuts the evaluation short is left to the
         * next step's control reduction. */
        int cut_short = 0;
        rc = evaluate_epoch(t, res, &cut_short, err, cap);
    }
    if (rc == TRAIN_OK)
        rc = save_if_due(t, &control, res, err, cap);
    watchdog_phase(WATCHDOG_UPDATE, t->step);
    if (rc == TRAIN_OK)
        delay_step(t);
    return rc;
}

/* ---- the end ------------------------------------------------------------- */

/* Collective: save first, so the final weights are safe, then a last
 * evaluation when the run did not end on an evaluated epoch.  A stop
 * signal that cuts it short makes the run exit 75 like any stop: the
 * requeued job resumes at the last step and only evaluates.  @return TRAIN_DONE,
 * TRAIN_STOPPED or a failure. */
static int finish_training(trainer_t *t, train_result_t *res, char *err, size_t cap)
{
    step_settle(t);
    t->loop_end = now_s();
    /* The last step's update had no control reduction after it. */
    int bad = comm_any_failed(t->comm, t->device_failed);
    if (bad < 0) {
        snprintf(err, cap, "control reduction failed: %s", comm_last_error());
        return TRAIN_EFAIL;
    }
    if (bad)
        return device_failure(t, err, cap);
    progress_local(t, "the end");
    commit_async_save(t, res, 1);
    if (t->cfg->run_dir[0] && t->last_saved != t->step &&
        save_checkpoint(t, t->step, res, err, cap) != TRAIN_OK)
        return TRAIN_EFAIL;
    res->saved = t->last_saved == t->step;
    if (t->evaluated_at_end)
        return TRAIN_DONE;
    eval_result_t ev;
    double eval_start = now_s();
    int rc = evaluate_test_set(t, &ev, err, cap);
    /* After loop_end: counted in the timing line's evaluation time, never
     * taken out of the loop's training time again. */
    t->final_eval_seconds = now_s() - eval_start;
    if (rc != TRAIN_OK)
        return TRAIN_EFAIL;
    if (ev.cut_short) {
        if (t->rank == 0 && !t->cfg->quiet)
            printf("eval: final evaluation cut short by a stop signal\n");
        return stop_after_eval(t, res, err, cap);
    }
    char what[96];
    snprintf(what, sizeof what, "final, step %lld (epoch %lld not finished)",
             (long long)t->step, (long long)(t->step / t->steps_per_epoch));
    report_eval(t, res, &ev, what, 1);
    return TRAIN_DONE;
}

/* The result of a run that ended (done or stopped), the same on every
 * rank; rank 0 logs the done or exit event.  The final weights come from
 * the GPU first: @return outcome, or TRAIN_EFAIL when that copy failed. */
static int fill_result(trainer_t *t, int outcome, train_result_t *res, char *err, size_t cap)
{
    warn_other_signal(t);
    res->step = t->step;
    res->epoch = t->step / t->steps_per_epoch;
    res->loss = t->last_loss;
    res->regression = !t->test.classification;
    if (t->gpu && t->tier_on)
        tier_save_settle(&t->tier); /* as in download_state */
    if (t->gpu && gpu_mirror_download(t->gpu, err, cap) != TRAIN_OK)
        outcome = TRAIN_EFAIL;
    res->param_hash = train_param_hash(model_params(t->model), t->n_params);
    double steps = (double)t->reduced_steps;
    res->reduce_ms_per_step = steps > 0 ? 1e3 * t->reduce_seconds / steps : 0;
    res->control_ms_per_step = steps > 0 ? 1e3 * t->control_seconds / steps : 0;
    res->async_saves = t->async_saves;
    res->async_failures = t->async_failures;
    res->async_skipped = t->async_skipped;
    res->async_stall_ms = t->async_saves ? 1e3 * t->async_stall_seconds / t->async_saves : 0;
    res->local_sealed = t->local_sealed;
    res->local_failed = t->local_failed;
    res->local_skipped = t->local_skipped;
    res->local_stall_ms = t->local_sealed ? 1e3 * t->local_stall_seconds / t->local_sealed : 0;
    res->local_cpu_ms = t->local_sealed ? 1e3 * t->local_cpu_seconds / t->local_sealed : 0;
    /* Training throughput: the loop's steps only, without the evaluations
     * (a peer that does not evaluate is compared with the same work). */
    double loop_end = t->loop_end > 0 ? t->loop_end : now_s();
    double loop_s = loop_end - t->run_start - t->eval_seconds;
    double samples = (double)t->run_samples;
    /* Nor its first step, when there were others (the peer times neither
     * its warm-up steps). */
    res->first_step_seconds = 0;
    if (t->first_step_seconds > 0 && t->run_samples > t->first_step_samples &&
        loop_s > t->first_step_seconds) {
        loop_s -= t->first_step_seconds;
        samples -= (double)t->first_step_samples;
        res->first_step_seconds = t->first_step_seconds;
    }
    res->eval_seconds = t->eval_seconds + t->final_eval_seconds;
    res->samples_per_s = loop_s > 0 ? samples / loop_s : 0;
    if (t->rank == 0) {
        char extra[REPORT_MAX];
        snprintf(extra, sizeof extra, "\"param_hash\":\"%016llx\",\"seconds\":%.3f",
                 (unsigned long long)res->param_hash, now_s() - t->started);
        metrics_event(&t->metrics, outcome == TRAIN_DONE ? "done" : "exit", t->step, t->size,
                      extra);
    }
    return outcome;
}

int train_run(const config_t *cfg, const world_t *world, comm_t *comm, gpu_ctx_t *gpu,
              const watchdog_leftover_t *before, train_result_t *res, char *err, size_t cap)
{
    trainer_t trainer;
    trainer_t *t = &trainer;
    memset(res, 0, sizeof *res);
    int rc = trainer_open(t, cfg, world, comm, gpu, err, cap);
    t->before = before;
    watchdog_phase(WATCHDOG_LOAD, 0);
    if (rc == TRAIN_OK)
        rc = trainer_resume(t, err, cap);
    if (rc == TRAIN_OK) {
        announce_run(t);
        start_clocks(t);
        rc = evaluate_pending_epoch(t, res, err, cap);
    }
    while (rc == TRAIN_OK && t->step < t->total_steps) {
        rc = train_step(t, res, err, cap);
        if (t->first_step_seconds == 0 && t->run_samples > 0)
            note_first_step(t);
    }
    if (rc == TRAIN_OK)
        rc = finish_training(t, res, err, cap);
    if (rc == TRAIN_DONE || rc == TRAIN_STOPPED)
        rc = fill_result(t, rc, res, err, cap);
    /* The node-local tier, once every rank has closed it: nothing in it is
     * newer than the shared tier's newest when the run ended well on every
     * rank (the GPU's final download can fail on one: agreed). */
    int remove_local = t->tier_on && cfg->ckpt_local_remove_at_end;
    int ended_well = (rc == TRAIN_DONE || rc == TRAIN_STOPPED) && res->saved;
    char local_root[sizeof t->tier.root];
    int local_leader = t->tier.leader;
    memcpy(local_root, t->tier.root, sizeof local_root);
    trainer_close(t);
    if (remove_local && comm_any_failed(comm, !ended_well) == 0) {
        char why[TRAIN_ERR_MAX];
        if (tier_remove_at_end(local_root, local_leader, cfg->ckpt_local, comm, why,
                               sizeof why) != 0)
            fprintf(stderr, "ftrain: warning: rank %d: the node-local tier was not removed "
                    "at the end: %s\n", world->rank, why);
        else if (world->rank == 0 && !cfg->quiet)
            printf("local checkpoints: removed the node-local tier on every node "
                   "(--ckpt-local-remove-at-end)\n");
    }
    return rc;
}

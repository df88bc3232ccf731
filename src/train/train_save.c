/*
 * train_save.c - the trainer's save paths, all collective: a checkpoint of
 * this step to the shared tier now (save_checkpoint), or in the background
 * (--ckpt-async: started here, written by save_async.c, committed at a
 * later step boundary, save_commit_async); a node-local one (--ckpt-local:
 * started, moved on and sealed through the tier, save_progress_local); and
 * the schedule that decides which is due after a step (save_if_due).
 *
 * Each save first brings the state to the host (from the GPU when there is
 * one) and sets the position its record holds (download_state); a commit
 * makes it the newest checkpoint, prunes older ones and reports it.  A
 * failed background or local save is reported and counted and training
 * goes on: the previous shared checkpoint is still good.
 */
#include "train/train_internal.h"
#include "util/util.h"

#include <stdio.h>

#include "ftrain/ckpt.h"
#include "gpu/gpu.h"
#include "fault/watchdog.h"
#include "tier/local_save.h"

/* The GPU's state straight into the asynchronous save's snapshot (one
 * device -> host copy, into page-locked memory, instead of a download to
 * the host arrays and a second copy from there); the start then copies only
 * the small host tensors. */
static int download_into_snapshot(trainer_t *t, async_save_t *save, char *err, size_t cap)
{
    float *arrays[STATE_ARRAYS];
    const float *host[STATE_ARRAYS];
    float *dst[STATE_ARRAYS] = {NULL};
    state_host_arrays(t->nn.model, t->nn.opt, arrays);
    for (int i = 0; i < STATE_ARRAYS; i++) {
        size_t offset = 0;
        host[i] = arrays[i];
        if (host[i] && state_copy_offset(&t->state, host[i], &offset) == STATE_OK)
            dst[i] = save->copy + offset;
        else
            host[i] = NULL;
    }
    if (!save->copy || !dst[STATE_PARAMS])
        return gpu_mirror_download(t->dev.mirror, err, cap); /* no snapshot yet: the usual way */
    int rc = gpu_mirror_download_to(t->dev.mirror, dst, err, cap);
    if (rc == TRAIN_OK)
        async_save_placed(save, host, STATE_ARRAYS, t->nn.n_params);
    return rc;
}

/* Collective: bring the state of `step` to the host (from the GPU when there
 * is one; into the asynchronous save's snapshot when `into` is given) and
 * set the position the checkpoint records. */
static int download_state(trainer_t *t, int64_t step, async_save_t *into, char *err, size_t cap)
{
    err[0] = '\0';
    int rc = TRAIN_OK;
    if (t->dev.failed) {
        snprintf(err, cap, "gpu: a device call failed: %s", gpu_last_error());
        rc = TRAIN_EFAIL;
    } else if (t->dev.mirror) {
        /* The download writes the host state, which a local save's helper
         * may still be copying (a CPU run's host state is written only by
         * the update: step_update waits there). */
        if (t->local.on)
            tier_save_settle(&t->local.tier);
        rc = into ? download_into_snapshot(t, into, err, cap)
                  : gpu_mirror_download(t->dev.mirror, err, cap);
    }
    if (comm_any_failed(t->comm, rc)) {
        if (!err[0])
            snprintf(err, cap, "another rank could not copy its state from the GPU");
        return TRAIN_EFAIL;
    }
    state_t *st = &t->state;
    st->step = step;
    st->epoch = step / t->run.steps_per_epoch;
    st->cursor = (step % t->run.steps_per_epoch) * t->cfg->global_batch;
    /* A stop at an epoch end saves before that epoch's evaluation; the
     * record says so, and the resumed run evaluates first. */
    st->eval_pending =
        step > 0 && step % t->run.steps_per_epoch == 0 && t->run.evaluated_step != step;
    st->run_seconds =
        t->clock.run_base + (t->clock.run_start > 0 ? util_mono_s() - t->clock.run_start : 0);
    return TRAIN_OK;
}

/* After a commit: it is the newest checkpoint, and the next periodic save
 * counts from now. */
static void remember_commit(trainer_t *t, int64_t step, const char *dir, train_result_t *res)
{
    if (step > t->ckpt.last_saved)
        t->ckpt.last_saved = step;
    t->ckpt.last_time = util_mono_s();
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
    int spare = t->state.resumed_from[0] && step <= t->run.resumed_step;
    ckpt_prune(t->ckpt.root, t->cfg->ckpt_keep, spare ? t->state.resumed_from : NULL,
               &removed);
    if (!t->cfg->quiet)
        printf("checkpoint: %s committed %s%s\n", dir, how, removed ? " (older ones pruned)" : "");
    metrics_event(&t->metrics, "checkpoint", step, t->size, extra_json);
    fflush(stdout);
}

/* Collective: save `step` now and wait for the commit. */
int save_checkpoint(trainer_t *t, int64_t step, train_result_t *res, char *err, size_t cap)
{
    watchdog_phase(WATCHDOG_SAVE, step);
    step_settle(t); /* the last step's GPU work is not the save's */
    double t0 = util_mono_s();
    char dir[TRAIN_CKPT_DIR_MAX], how[REPORT_MAX], extra[REPORT_MAX];
    if (download_state(t, step, NULL, err, cap) != TRAIN_OK ||
        state_save(&t->state, t->comm, t->ckpt.root, t->cfg->ckpt_level, dir, sizeof dir, err,
                   cap) != STATE_OK)
        return TRAIN_EFAIL;
    double dt = util_mono_s() - t0;
    if (t->dev.mirror) {
        double copy_ms = 1e3 * gpu_mirror_copy_seconds(t->dev.mirror);
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
    double t0 = util_mono_s();
    int rc = download_state(t, step, &t->async.save, err, sizeof err);
    if (rc == TRAIN_OK)
        rc = async_save_start(&t->async.save, &t->state, t->comm, t->ckpt.root, t->cfg->ckpt_level,
                              t0, t->dev.mirror ? gpu_mirror_copy_seconds(t->dev.mirror) : -1, err,
                              sizeof err);
    if (rc != TRAIN_OK) {
        t->async.failures++;
        if (t->rank == 0)
            fprintf(stderr, "ftrain: asynchronous checkpoint of step %lld not started: %s\n",
                    (long long)step, err);
    }
    t->ckpt.last_time = util_mono_s();
}

/* Collective, when a save is in flight: wait for the writer and commit.  A
 * failed commit is reported and counted (it changes the exit code) but
 * training goes on: the previous checkpoint is still good.  after_training:
 * at a stop or the run's end, where the wait for the writers is reported
 * apart from the training stall; at a step boundary it is stall. */
void save_commit_async(trainer_t *t, train_result_t *res, int after_training)
{
    if (!t->async.save.in_flight)
        return;
    watchdog_phase(WATCHDOG_SAVE, t->async.save.step);
    async_commit_t done;
    char err[TRAIN_ERR_MAX] = "";
    int rc = async_save_commit(&t->async.save, t->comm, &done, err, sizeof err);
    if (!after_training) {
        done.stall_seconds += done.writer_wait_seconds;
        done.writer_wait_seconds = 0;
    }
    t->async.saves++;
    t->async.stall_seconds += done.stall_seconds;
    if (rc != TRAIN_OK) {
        t->async.failures++;
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
        t->local.sealed++;
        t->local.stall_seconds += rep->stall_s;
        t->local.cpu_seconds += rep->helper_cpu_s;
    } else {
        t->local.failed++;
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
void save_progress_local(trainer_t *t, const char *when)
{
    if (!t->local.on || !tier_save_in_flight(&t->local.tier))
        return;
    tier_report_t rep;
    tier_status_t status;
    char why[TRAIN_ERR_MAX] = "";
    int rc;
    if (when) {
        watchdog_phase(WATCHDOG_SAVE_SYNC, tier_save_step(&t->local.tier));
        rc = tier_save_finish(&t->local.tier, t->comm, &status, &rep, why, sizeof why);
    } else {
        rc = tier_save_progress(&t->local.tier, t->comm, &status, &rep, why, sizeof why);
    }
    if (status == TIER_SEALED || status == TIER_FAILED)
        report_local(t, rc, &rep, why, when ? when : "");
}

/* Collective: start a node-local checkpoint of this step (--ckpt-local),
 * written, copied to the partners and sealed in the background
 * (save_progress_local); every --ckpt-flush-every-th that starts also goes to
 * the shared tier, at this step.  At most one local save is in flight: one
 * due meanwhile is skipped.  A local save that fails is reported and
 * training goes on: the shared tier is the source of truth.
 * @return TRAIN_OK, or a failure of the shared flush. */
static int save_local(trainer_t *t, train_result_t *res, char *err, size_t cap)
{
    const config_t *cfg = t->cfg;
    if (tier_save_in_flight(&t->local.tier)) {
        t->local.skipped++;
        if (tier_save_skip(&t->local.tier) == 1 && t->rank == 0 && !cfg->quiet)
            printf("local checkpoint: step %lld skipped: the local save of step %lld is still "
                   "in flight\n", (long long)t->run.step,
                   (long long)tier_save_step(&t->local.tier));
        return TRAIN_OK;
    }
    watchdog_phase(WATCHDOG_SAVE, t->run.step);
    step_settle(t);
    double t0 = util_mono_s();
    char why[TRAIN_ERR_MAX] = "";
    int rc = download_state(t, t->run.step, NULL, why, sizeof why);
    if (rc == TRAIN_OK &&
        tier_save_start(&t->local.tier, t->comm, &t->state, t0, why, sizeof why) != TIER_OK)
        rc = TRAIN_EFAIL;
    t->local.last_time = util_mono_s();
    if (rc != TRAIN_OK) {
        t->local.failed++;
        if (t->rank == 0)
            fprintf(stderr, "ftrain: local checkpoint of step %lld not started: %s; training "
                    "goes on (the shared tier is untouched)\n", (long long)t->run.step, why);
        return TRAIN_OK;
    }
    t->local.saves++;
    if (!cfg->ckpt_flush_every || t->local.saves % cfg->ckpt_flush_every != 0 ||
        t->ckpt.last_saved == t->run.step)
        return TRAIN_OK;
    if (!cfg->ckpt_async)
        return save_checkpoint(t, t->run.step, res, err, cap);
    if (!t->async.save.in_flight)
        start_async_save(t, t->run.step);
    return TRAIN_OK;
}

/* Collective: a periodic save when one is due (--ckpt-every, or the
 * --ckpt-interval vote), never at the last step (the end saves it); a
 * local one first when that is due. */
int save_if_due(trainer_t *t, int votes, train_result_t *res, char *err, size_t cap)
{
    const config_t *cfg = t->cfg;
    if (t->local.on) {
        tier_save_prepare(&t->local.tier, &t->state);
        save_progress_local(t, NULL);
    }
    if (t->local.on && t->run.step < t->run.total_steps &&
        ((cfg->ckpt_local_every && t->run.step % cfg->ckpt_local_every == 0) ||
         (votes & SAVE_VOTE_LOCAL))) {
        int rc = save_local(t, res, err, cap);
        if (rc != TRAIN_OK)
            return rc;
    }
    if (!cfg->run_dir[0] || t->run.step >= t->run.total_steps ||
        t->ckpt.last_saved == t->run.step ||
        !((cfg->ckpt_every && t->run.step % cfg->ckpt_every == 0) || (votes & SAVE_VOTE_SHARED)))
        return TRAIN_OK;
    if (!cfg->ckpt_async)
        return save_checkpoint(t, t->run.step, res, err, cap);
    if (t->async.save.in_flight) {
        /* At most one in flight, and never a stall waiting for it: this
         * save is skipped; the one being written still lands. */
        t->async.skipped++;
        if (t->rank == 0 && !cfg->quiet)
            printf("checkpoint: step %lld skipped: the save of step %lld is still being "
                   "written\n", (long long)t->run.step, (long long)t->async.save.step);
        return TRAIN_OK;
    }
    start_async_save(t, t->run.step);
    return TRAIN_OK;
}

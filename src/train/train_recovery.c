/*
 * train_recovery.c - what failures cost, and failures on purpose: the
 * recovery line after an unplanned end, the Young/Daly checkpoint interval,
 * and --fault's injected faults (README, "Lost work and the checkpoint
 * interval").
 */
#include "fault/watchdog.h"
#include "train/train_internal.h"
#include "util/util.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <time.h>

/* Rank 0, once: the Young/Daly checkpoint interval sqrt(2 C M) for the
 * measured cost C of a save (its training stall) and --mtbf M, beside the
 * interval this run uses; printed only when the whole run (at the speed
 * seen) is longer than that interval, always written as a metrics event. */
void train_tell_young_daly(trainer_t *t, int64_t step, double cost_s)
{
    if (t->rank != 0 || t->ckpt.young_daly_told || !(cost_s > 0))
        return;
    t->ckpt.young_daly_told = 1;
    const config_t *cfg = t->cfg;
    double mtbf_s = 3600 * cfg->mtbf_hours, best = sqrt(2 * cost_s * mtbf_s);
    int64_t steps = step - t->run.resumed_step;
    double spent = util_mono_s() - t->clock.run_start - t->stats.eval_seconds - cost_s;
    double step_s = steps > 0 && t->clock.run_start > 0 ? spent / (double)steps : 0;
    char now[REPORT_MAX] = "";
    if (cfg->ckpt_every && step_s > 0)
        snprintf(now, sizeof now, "; this run saves every %lld steps = %.3g s",
                 (long long)cfg->ckpt_every, step_s * (double)cfg->ckpt_every);
    else if (cfg->ckpt_interval)
        snprintf(now, sizeof now, "; this run saves every %.1f s", cfg->ckpt_interval);
    /* Advice only where it applies: a run shorter than the interval that
     * loses least needs no periodic saves at all (the event says it all the
     * same). */
    double run_s = step_s * (double)t->run.total_steps;
    int applies = step_s > 0 && run_s > best;
    if (applies && !cfg->quiet) {
        printf("checkpoint: Young/Daly: a save costs %.3g s of training; for a mean time "
               "between failures of %g h (--mtbf) the interval that loses least is %.*f s",
               cost_s, cfg->mtbf_hours, best < 10 ? 3 : 0, best);
        printf(" (about %.0f steps of %.3g s)%s\n", best / step_s, step_s, now);
    }
    char extra[REPORT_MAX];
    snprintf(extra, sizeof extra, "\"save_cost_s\":%.4f,\"mtbf_h\":%g,\"interval_s\":%.4g,"
             "\"step_s\":%.5f,\"run_s\":%.1f,\"told\":%s", cost_s, cfg->mtbf_hours, best,
             step_s, run_s, applies ? "true" : "false");
    metrics_event(&t->metrics, "young_daly", step, t->size, extra);
}

/* Rank 0, after the first step of a launch that followed an unplanned
 * end: how much the failure cost.  The launch before is known from its
 * heartbeats: the first rank to go silent (about when it failed), the
 * last (about when the job ended) and the furthest step finished. */
void train_report_recovery(trainer_t *t)
{
    const watchdog_leftover_t *b = t->log.before;
    if (t->rank != 0 || !b || b->ranks == 0)
        return;
    t->log.before = NULL;
    double wall = util_wall_s(), mono = util_mono_s();
    double started = wall - (mono - t->clock.started); /* this launch's start, wall clock */
    double detect = b->last_silent - b->first_silent;
    double relaunch = started - b->last_silent;
    double train = mono - t->clock.started - t->stats.load_seconds;
    double total = wall - b->first_silent;
    int64_t redone = b->step_done > t->run.resumed_step ? b->step_done - t->run.resumed_step : 0;
    printf("recovery: the launch before ended unplanned after step %lld: rank %d (host %s, pid "
           "%d) went silent first; resumed from step %lld: %lld step%s redone; %.1f s "
           "from the failure to training again (until the job ended %.1f s, relaunch %.1f s, "
           "load %.3f s, start-up and first step %.1f s)\n",
           (long long)b->step_done, b->first_rank, b->first_host, b->first_pid,
           (long long)t->run.resumed_step, (long long)redone, redone == 1 ? "" : "s", total, detect,
           relaunch, t->stats.load_seconds, train);
    char extra[REPORT_MAX * 2];
    snprintf(extra, sizeof extra, "\"failed_after_step\":%lld,\"first_silent_rank\":%d,"
             "\"first_silent_host\":\"%s\",\"resumed_step\":%lld,\"steps_redone\":%lld,"
             "\"seconds\":%.3f,\"until_end_s\":%.3f,\"relaunch_s\":%.3f,\"load_s\":%.4f,"
             "\"first_step_s\":%.3f", (long long)b->step_done, b->first_rank, b->first_host,
             (long long)t->run.resumed_step, (long long)redone, total, detect, relaunch,
             t->stats.load_seconds, train);
    metrics_event(&t->metrics, "recovery", t->run.step, t->size, extra);
    fflush(stdout);
}

/* Test aid (--fault KIND@STEP[:RANK]): fail as a real fault would. */
void train_inject_fault(const trainer_t *t)
{
    const config_t *cfg = t->cfg;
    if (!cfg->fault_signal || t->run.step != cfg->fault_step ||
        (cfg->fault_rank >= 0 && cfg->fault_rank != t->rank))
        return;
    fprintf(stderr, "ftrain: rank %d: --fault: raising signal %d after step %lld\n", t->rank,
            cfg->fault_signal, (long long)t->run.step);
    fflush(NULL);
    /* The heartbeat of this moment: the next launch's recovery line then
     * times the failure from the fault itself, not from a beat up to a
     * period before it (a real SIGKILL gives no such beat). */
    watchdog_beat_now();
    signal(cfg->fault_signal, SIG_DFL);
    raise(cfg->fault_signal);
}


/*
 * train_report.c - what rank 0 prints and logs as training goes: the line
 * describing the run and its start event, the progress line (loss, rate,
 * ETA) and metrics row, and the evaluation line and event.  Every rank
 * keeps the counts and the latest evaluation for the result.
 */
#include "train/train_internal.h"
#include "util/util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Rank 0, after a resume at or past the run's last step: a plain note
 * that nothing is trained (the summary then reports no training loss and
 * no samples/s).  A "resume:" line, so that --quiet keeps it too. */
static void note_nothing_to_train(const trainer_t *t)
{
    const config_t *cfg = t->cfg;
    if (t->run.step == 0 || t->run.step < t->run.total_steps)
        return;
    char asked[REPORT_MAX];
    if (cfg->steps)
        snprintf(asked, sizeof asked, "--steps %lld", (long long)cfg->steps);
    else
        snprintf(asked, sizeof asked, "--epochs %lld: %lld steps", (long long)cfg->epochs,
                 (long long)t->run.total_steps);
    if (t->run.step > t->run.total_steps)
        printf("resume: note: the checkpoint's step %lld is past the %lld steps this run asks "
               "for (%s): nothing is trained, the weights stay those of step %lld; to train "
               "on, ask for more steps\n", (long long)t->run.step, (long long)t->run.total_steps,
               asked, (long long)t->run.step);
    else
        printf("resume: note: the checkpoint's step %lld is the last of the %lld steps this "
               "run asks for (%s): nothing is left to train\n", (long long)t->run.step,
               (long long)t->run.total_steps, asked);
}

/* Rank 0: the line describing the run, and the start event. */
void report_start(trainer_t *t)
{
    const config_t *cfg = t->cfg;
    if (t->rank != 0)
        return;
    char arch[MODEL_ARCH_STRING_MAX];
    model_arch_string(model_arch(t->nn.model), arch, sizeof arch);
    /* After a resume the init is the checkpoint's: where the weights came from. */
    const char *init = model_init_name(t->state.init);
    if (!cfg->quiet)
        printf("train: %s, init %s, %zu parameters, data %s (%d train / %d test), global batch "
               "%lld (%lld x %lld), %lld steps (%lld per epoch), %s, %d BLAS thread%s per "
               "rank\n",
               arch, init, t->nn.n_params, cfg->data, t->data.train.samples, t->data.test.samples,
               (long long)cfg->global_batch,
               (long long)(cfg->global_batch / cfg->micro_batch), (long long)cfg->micro_batch,
               (long long)t->run.total_steps, (long long)t->run.steps_per_epoch,
               cfg->deterministic ? "deterministic" : "fast reduction", t->blas_threads,
               t->blas_threads == 1 ? "" : "s");
    char note[REPORT_MAX];
    if (config_schedule_warning(cfg, t->run.total_steps, note, sizeof note))
        fprintf(stderr, "ftrain: warning: %s\n", note);
    note_nothing_to_train(t);
    char extra[REPORT_MAX];
    snprintf(extra, sizeof extra, "\"init\":\"%s\"", init);
    metrics_event(&t->metrics, "start", t->run.step, t->size, extra);
    fflush(stdout);
}

/* The time left, s seconds, as "1h02m" or "3m07s" into buf. */
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

void report_epochs(int64_t steps, int64_t steps_per_epoch, char *buf, size_t cap)
{
    /* Tenths, rounded down: 0.9 is shown until the epoch is done. */
    int64_t tenths = steps * 10 / steps_per_epoch;
    if (steps % steps_per_epoch == 0)
        snprintf(buf, cap, "%lld", (long long)(steps / steps_per_epoch));
    else
        snprintf(buf, cap, "%lld.%lld", (long long)(tenths / 10), (long long)(tenths % 10));
}

/* The shortest span a printed rate is measured over: one step of a small
 * model takes microseconds, and its clock's noise made one line say 31k
 * samples/s and the next 15.8M. */
#define REPORT_RATE_WINDOW_S 1.0

/* Rank 0: samples/s for a progress line at time now: over the span since
 * the rate's window began when that is REPORT_RATE_WINDOW_S or longer (and
 * a new window begins), else the last such span's, else (the first second
 * of a launch) the launch's average so far. */
static double progress_rate(trainer_t *t, double now)
{
    double dt = now - t->log.rate.since;
    if (dt >= REPORT_RATE_WINDOW_S) {
        t->log.rate.last = (double)t->log.rate.samples / dt;
        t->log.rate.since = now;
        t->log.rate.samples = 0;
    }
    if (t->log.rate.last > 0)
        return t->log.rate.last;
    double run = now - t->clock.run_start;
    return run > 0 ? (double)t->stats.run_samples / run : 0;
}

/* Rank 0: the progress line and metrics row of the window since the last. */
static void print_progress(trainer_t *t)
{
    const config_t *cfg = t->cfg;
    log_window_t *win = &t->log.window;
    int64_t step = t->run.step, spe = t->run.steps_per_epoch;
    /* Epochs count what is done, everywhere (the record, ckptctl list, the
     * eval and done lines): 12.5 after 100 steps of 8 per epoch. */
    char done_epochs[32], all_epochs[32];
    report_epochs(step, spe, done_epochs, sizeof done_epochs);
    report_epochs(t->run.total_steps, spe, all_epochs, sizeof all_epochs);
    double now = util_mono_s();
    double sps = progress_rate(t, now);
    double samples = (double)t->stats.run_samples;
    double steps_done = t->stats.run_samples ? samples / (double)cfg->global_batch : 1;
    double eta = (double)(t->run.total_steps - step) * (now - t->clock.run_start) / steps_done;
    char eta_text[REPORT_MAX];
    fmt_eta(eta, eta_text, sizeof eta_text);
    double lr = optim_lr(optim_config(t->nn.opt), step - 1);
    double loss = win->loss / (double)win->samples, acc = (double)win->hits / (double)win->samples;
    /* Regression: no accuracy (R^2 is the evaluation's), the loss with %g. */
    int classes = t->data.train.classification;
    char numbers[REPORT_MAX];
    if (classes)
        snprintf(numbers, sizeof numbers, "loss %.4f acc %.4f", loss, acc);
    else
        snprintf(numbers, sizeof numbers, "loss %.4g", loss);
    if (!cfg->quiet)
        printf("epoch %s/%s step %lld/%lld %s lr %.2e %.0f samples/s eta %s\n", done_epochs,
               all_epochs, (long long)step, (long long)t->run.total_steps, numbers, lr, sps,
               eta_text);
    metrics_row_t row = {step, step / spe, loss, classes ? acc : NAN, lr, sps, t->size};
    metrics_step(&t->metrics, &row);
    fflush(stdout);
    memset(win, 0, sizeof *win);
    win->since = now;
}

/* Count the step just done; print progress every --log-every steps, or
 * (the default) when --log-interval seconds passed since the last line, and
 * always at the run's last step. */
void report_progress(trainer_t *t, const step_plan_t *plan, const step_sums_t *sums)
{
    t->stats.run_samples += plan->samples;
    t->log.window.loss += sums->loss;
    t->log.window.hits += sums->hits;
    t->log.window.samples += plan->samples;
    t->run.last_loss = sums->loss / (double)plan->samples;
    t->log.rate.samples += plan->samples;
    if (t->rank != 0)
        return;
    int due = t->log.every
                  ? t->run.step % t->log.every == 0
                  : util_mono_s() - t->log.window.since >= t->cfg->log_interval;
    if (due || t->run.step == t->run.total_steps)
        print_progress(t);
}

/* An evaluation as the eval line's tail and the eval event's members.
 * Classification: the accuracy.  Regression: R^2 (an accuracy within a
 * tolerance says little of a fit), and the loss with %g, as a good fit's
 * MSE is far below what four decimals show. */
static void format_eval(const trainer_t *t, const eval_result_t *ev, char *line, size_t lcap,
                        char *json, size_t jcap)
{
    if (t->data.test.classification) {
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
void report_eval(trainer_t *t, train_result_t *res, const eval_result_t *ev, const char *what,
                 int final)
{
    keep_eval(res, ev, t->run.step);
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
    metrics_event(&t->metrics, "eval", t->run.step, t->size, extra);
    fflush(stdout);
}

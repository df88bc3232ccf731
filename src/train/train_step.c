/*
 * train_step.c - the computation of one training step and of the
 * evaluation, in both reduction modes (docs/determinism.md):
 *
 *   fast           each rank runs its micro-batches as one batch, and the
 *                  float gradients are summed with one allreduce.
 *   deterministic  each micro-batch's gradient is computed alone (same
 *                  shapes, one BLAS thread), scaled by a power of two chosen
 *                  from the global max |g| (from the control reduction) and
 *                  rounded to int64; int64 sums are exact and associative, so
 *                  the reduced gradient has the same bits for any world size.
 *
 * On the GPU the same steps run through the GPU mirror (train_gpu.c).
 */
#include "train/train_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fault/stop.h"
#include "fault/watchdog.h"
#include "util/util.h"
#include "tier/local_save.h"

/* The fixed-point sums stay below 2^FIXED_SUM_BITS: a loss (in
 * 2^LOSS_FIXED_BITS fixed point) summed over 2^k addends must stay below
 * 2^(FIXED_SUM_BITS - LOSS_FIXED_BITS - k). */
#define FIXED_SUM_BITS 62
/* The largest gradient scale exponent (a gradient of all zeros has none). */
#define MAX_SCALE_EXP 1000

/* Copy the samples idx[0..n) into the batch buffers. */
static void gather(trainer_t *t, const dataset_t *set, const int64_t *idx, int64_t n)
{
    size_t in = (size_t)set->in_dim, out = (size_t)set->out_dim;
    for (int64_t i = 0; i < n; i++) {
        int64_t sample = idx ? idx[i] : i;
        memcpy(t->buf.batch_x + (size_t)i * in, set->features + (size_t)sample * in,
               in * sizeof(float));
        if (set->classification)
            t->buf.batch_labels[i] = set->labels[sample];
        else
            memcpy(t->buf.batch_y + (size_t)i * out, set->targets + (size_t)sample * out,
                   out * sizeof(float));
    }
}

/* Test aid: log the samples this rank trains on at (epoch, step index). */
static void trace(trainer_t *t, int64_t epoch, int64_t index, const int64_t *idx, int64_t n)
{
    if (t->trace_fd < 0 || n <= 0)
        return;
    size_t cap = 64 + (size_t)n * 21, len = 0;
    char *buf = malloc(cap);
    if (!buf)
        return;
    len += (size_t)snprintf(buf, cap, "%lld %lld", (long long)epoch, (long long)index);
    for (int64_t i = 0; i < n; i++)
        len += (size_t)snprintf(buf + len, cap - len, " %lld", (long long)idx[i]);
    buf[len++] = '\n';
    ssize_t wr = write(t->trace_fd, buf, len);
    (void)wr;
    free(buf);
}

/* The samples of this rank's micro-batches [first, first + nmicro) of step
 * `index`: consecutive in the permutation.  *len gets their number. */
static const int64_t *rank_samples(trainer_t *t, int64_t index, int64_t first, int64_t nmicro,
                                   int64_t *len)
{
    int64_t first_len = 0;
    const int64_t *idx = sampler_micro(&t->data.sampler, index, first, &first_len);
    *len = 0;
    for (int64_t i = 0; i < nmicro; i++) {
        int64_t micro_len = 0;
        sampler_micro(&t->data.sampler, index, first + i, &micro_len);
        *len += micro_len;
    }
    return idx;
}

/* max |g| over n floats; NaN propagates. */
static float max_abs(const float *g, size_t n)
{
    float m = 0;
    for (size_t k = 0; k < n; k++) {
        float a = fabsf(g[k]);
        m = a > m || a != a ? a : m;
    }
    return m;
}

/* Deterministic mode: each micro-batch's gradient alone, in its own slot. */
static void compute_micro_gradients(trainer_t *t, const step_plan_t *plan, step_sums_t *sums)
{
    for (int64_t i = 0; i < plan->nmicro; i++) {
        int64_t len = 0;
        const int64_t *idx =
            sampler_micro(&t->data.sampler, plan->index, plan->first_micro + i, &len);
        if (!t->dev.mirror || !gpu_mirror_has_data(t->dev.mirror))
            gather(t, &t->data.train, idx, len);
        trace(t, t->data.sampler.epoch, plan->index, idx, len);
        double loss = 0;
        int64_t hits = 0;
        float grad_max = 0;
        if (t->dev.mirror) {
            /* A device failure is voted (CTL_BAD): every rank stops with an error. */
            if (gpu_mirror_micro_gradient(t->dev.mirror, i, idx, (int)len, &loss, &hits,
                                          &grad_max) != GPU_OK) {
                t->dev.failed = 1;
                grad_max = 0;
            }
        } else {
            float *grad = t->buf.micro_grads + (size_t)i * t->nn.n_params;
            memset(grad, 0, t->nn.n_params * sizeof *grad);
            model_forward_backward(t->nn.model, t->buf.batch_x, t->buf.batch_labels,
                                   t->buf.batch_y, (int)len, grad, &loss, &hits);
            grad_max = max_abs(grad, t->nn.n_params);
        }
        t->buf.micro_loss[i] = loss;
        sums->loss += loss;
        sums->hits += hits;
        if (grad_max > sums->max_abs_grad || grad_max != grad_max)
            sums->max_abs_grad = grad_max;
    }
}

/* Fast mode: this rank's micro-batches as one batch. */
static void compute_batch_gradient(trainer_t *t, const step_plan_t *plan, step_sums_t *sums)
{
    /* On the GPU the host gradient is never read, and the device one is
     * stored whole by the call below (zeros for no samples).  On the CPU
     * the update that ended the last step cleared it as it read it
     * (grad_zeroed); otherwise it is cleared here.  grad[n_params] and
     * [n_params + 1] are set before they are read. */
    if (!t->dev.mirror && !t->buf.grad_zeroed)
        memset(t->buf.grad, 0, (t->nn.n_params + 2) * sizeof *t->buf.grad);
    t->buf.grad_zeroed = 0;
    if (plan->nmicro == 0) {
        if (t->dev.mirror && gpu_mirror_batch_gradient(t->dev.mirror, NULL, 0, &sums->loss,
                                                       &sums->hits) != GPU_OK)
            t->dev.failed = 1; /* voted: CTL_BAD */
        return;
    }
    int64_t len = 0;
    const int64_t *idx = rank_samples(t, plan->index, plan->first_micro, plan->nmicro, &len);
    if (!t->dev.mirror || !gpu_mirror_has_data(t->dev.mirror))
        gather(t, &t->data.train, idx, len);
    trace(t, t->data.sampler.epoch, plan->index, idx, len);
    if (t->dev.mirror) {
        if (gpu_mirror_batch_gradient(t->dev.mirror, idx, (int)len, &sums->loss, &sums->hits) !=
            GPU_OK)
            t->dev.failed = 1; /* voted: CTL_BAD */
        return;
    }
    model_forward_backward(t->nn.model, t->buf.batch_x, t->buf.batch_labels, t->buf.batch_y,
                           (int)len, t->buf.grad, &sums->loss, &sums->hits);
}

/* Micro-batches per step, rounded up to a power of two: 2^m. */
static int micro_bits(const trainer_t *t)
{
    int64_t micros = (t->cfg->global_batch + t->cfg->micro_batch - 1) / t->cfg->micro_batch;
    int m = 0;
    while ((INT64_C(1) << m) < micros)
        m++;
    return m;
}

/* 1 when this rank's loss cannot be reduced: not finite, or (deterministic
 * mode) a micro-batch loss so large that its fixed-point form could
 * overflow the int64 sum over all micro-batches; such a loss only comes
 * from a run that has diverged. */
static int loss_out_of_range(const trainer_t *t, int64_t nmicro, double loss)
{
    if (!isfinite(loss))
        return 1;
    if (!t->cfg->deterministic)
        return 0;
    double lim = ldexp(1.0, FIXED_SUM_BITS - LOSS_FIXED_BITS - micro_bits(t));
    for (int64_t i = 0; i < nmicro; i++)
        if (!(fabs(t->buf.micro_loss[i]) < lim))
            return 1;
    return 0;
}

void step_compute(trainer_t *t, const step_plan_t *plan, step_sums_t *sums)
{
    memset(sums, 0, sizeof *sums);
    if (t->cfg->deterministic)
        compute_micro_gradients(t, plan, sums);
    else
        compute_batch_gradient(t, plan, sums);
    sums->loss_bad = loss_out_of_range(t, plan->nmicro, sums->loss);
    if (sums->max_abs_grad != sums->max_abs_grad)
        sums->max_abs_grad = INFINITY;
}

/* The scale 2^e that keeps the sum of all micro-batches in 62 bits:
 * |g| < 2^k, micro-batches < 2^m  =>  |sum * 2^e| < 2^(k+m+e) <= 2^62. */
static int fixed_scale_exp(const trainer_t *t, double grad_max)
{
    int k = 0;
    if (grad_max > 0)
        frexp(grad_max, &k);
    int e = grad_max > 0 ? FIXED_SUM_BITS - k - micro_bits(t) : 0;
    return e > MAX_SCALE_EXP ? MAX_SCALE_EXP : e;
}

/* Deterministic mode on the CPU: fixed point, one int64 allreduce of the
 * gradient, the loss and the hits. */
static int reduce_fixed_cpu(trainer_t *t, int64_t nmicro, int scale_exp, int64_t samples,
                            step_sums_t *sums, char *err, size_t cap)
{
    size_t n = t->nn.n_params;
    double scale = ldexp(1.0, scale_exp);
    memset(t->buf.fixed_sum, 0, (n + 2) * sizeof *t->buf.fixed_sum);
    int64_t loss_sum = 0;
    for (int64_t i = 0; i < nmicro; i++) {
        const float *g = t->buf.micro_grads + (size_t)i * n;
        for (size_t q = 0; q < n; q++)
            t->buf.fixed_sum[q] += llrint((double)g[q] * scale);
        loss_sum += llrint(ldexp(t->buf.micro_loss[i], LOSS_FIXED_BITS));
    }
    t->buf.fixed_sum[n] = loss_sum;
    t->buf.fixed_sum[n + 1] = sums->hits;
    if (comm_allreduce(t->comm, t->buf.fixed_sum, n + 2, COMM_I64, COMM_SUM) != COMM_OK) {
        snprintf(err, cap, "gradient reduction failed: %s", comm_last_error());
        return TRAIN_EFAIL;
    }
    double inv = ldexp(1.0, -scale_exp) / (double)samples;
    for (size_t q = 0; q < n; q++)
        t->buf.grad[q] = (float)((double)t->buf.fixed_sum[q] * inv);
    t->buf.grad_scale = 1.0f; /* already the mean: times 1 is exact */
    sums->loss = ldexp((double)t->buf.fixed_sum[n], -LOSS_FIXED_BITS);
    sums->hits = t->buf.fixed_sum[n + 1];
    return TRAIN_OK;
}

/* Fast mode on the CPU: one float allreduce of the gradient, loss and hits. */
static int reduce_float_cpu(trainer_t *t, int64_t samples, step_sums_t *sums, char *err,
                            size_t cap)
{
    size_t n = t->nn.n_params;
    t->buf.grad[n] = (float)sums->loss;
    t->buf.grad[n + 1] = (float)sums->hits;
    if (comm_allreduce(t->comm, t->buf.grad, n + 2, COMM_F32, COMM_SUM) != COMM_OK) {
        snprintf(err, cap, "gradient reduction failed: %s", comm_last_error());
        return TRAIN_EFAIL;
    }
    sums->loss = t->buf.grad[n];
    sums->hits = (int64_t)llrintf(t->buf.grad[n + 1]);
    /* The update turns the sum into the mean: a pass over the gradient
     * of its own would cost as much as the update's reading of it. */
    t->buf.grad_scale = 1.0f / (float)samples;
    return TRAIN_OK;
}

int step_reduce(trainer_t *t, const step_plan_t *plan, double grad_max, step_sums_t *sums,
                char *err, size_t cap)
{
    double t0 = util_mono_s();
    int rc;
    if (t->cfg->deterministic) {
        int scale_exp = fixed_scale_exp(t, grad_max);
        if (t->dev.mirror) /* not timed: reduce_ms_per_step leaves this path out */
            return gpu_mirror_reduce_fixed(t->dev.mirror, t->comm, plan->nmicro, t->buf.micro_loss,
                                           scale_exp, plan->samples, &sums->loss, &sums->hits,
                                           &t->dev.failed, err, cap);
        rc = reduce_fixed_cpu(t, plan->nmicro, scale_exp, plan->samples, sums, err, cap);
    } else if (t->dev.mirror) {
        rc = gpu_mirror_reduce_float(t->dev.mirror, t->comm, plan->samples, &sums->loss,
                                     &sums->hits, &t->dev.failed, err, cap);
    } else {
        rc = reduce_float_cpu(t, plan->samples, sums, err, cap);
    }
    if (rc != TRAIN_OK)
        return rc;
    t->stats.reduce_seconds += util_mono_s() - t0;
    t->stats.reduced_steps++;
    return TRAIN_OK;
}

void step_update(trainer_t *t)
{
    if (t->dev.mirror) {
        /* A failed launch is this rank's device failure, voted at the next
         * control reduction or at the end (finish_training); a failure
         * of the running kernels surfaces at the next sync. */
        if (gpu_mirror_update(t->dev.mirror, t->run.step) != GPU_OK)
            t->dev.failed = 1;
        return;
    }
    /* A local save started at the last boundary copies the host state on
     * its helper thread while this step computed (the device's update
     * above leaves the host state alone). */
    if (t->local.on)
        tier_save_settle(&t->local.tier);
    optim_step_consume(t->nn.opt, model_params(t->nn.model), t->buf.grad, t->buf.grad_scale,
                       t->run.step);
    t->buf.grad_zeroed = 1;
}

void step_settle(trainer_t *t)
{
    if (t->dev.mirror)
        (void)gpu_sync(t->dev.ctx); /* an error surfaces at the next call */
}

/* The members of the evaluation's one reduction, summed over the ranks:
 * the last three count ranks (two ranks stopping are 2 stops, never a
 * device failure). */
enum { EV_LOSS, EV_HITS, EV_SAMPLES, EV_CUT_SHORT, EV_DEV_FAILED, EV_LOSS_BAD, EV_N };

/* This rank's chunks [first, last) of chunk samples each into sums. */
static void evaluate_chunks(trainer_t *t, int64_t first, int64_t last, int64_t chunk,
                            int64_t chunks, int64_t sums[EV_N])
{
    const dataset_t *set = &t->data.test;
    /* A chunk loss below 2^(38-bits), with chunks <= 2^bits, keeps the sum of
     * all chunks in fixed point below 2^62.  Only a diverged model goes past
     * it; its loss is reported as infinite, not as garbage. */
    int bits = 0;
    while ((INT64_C(1) << bits) < chunks)
        bits++;
    double lim = ldexp(1.0, FIXED_SUM_BITS - LOSS_FIXED_BITS - bits);
    for (int64_t k = first; k < last; k++) {
        if (stop_local_signal()) {
            sums[EV_CUT_SHORT] = 1;
            break;
        }
        int64_t start = k * chunk, n = set->samples - start < chunk ? set->samples - start : chunk;
        /* The test set is used in order: point the batch at the slice. */
        const float *x = set->features + (size_t)start * (size_t)set->in_dim;
        const int32_t *labels = set->classification ? set->labels + start : NULL;
        const float *y =
            set->classification ? NULL : set->targets + (size_t)start * (size_t)set->out_dim;
        double loss = 0;
        int64_t hits = 0;
        if (t->dev.mirror) {
            if (gpu_mirror_evaluate(t->dev.mirror, x, labels, y, (int)n, &loss, &hits) != GPU_OK) {
                sums[EV_DEV_FAILED] = 1; /* reported by the caller on every rank */
                break;
            }
        } else {
            model_evaluate(t->nn.model, x, labels, y, (int)n, &loss, &hits);
        }
        if (!(fabs(loss) < lim))
            sums[EV_LOSS_BAD] = 1;
        else
            sums[EV_LOSS] += llrint(ldexp(loss, LOSS_FIXED_BITS));
        sums[EV_HITS] += hits;
        sums[EV_SAMPLES] += n;
    }
}

int evaluate_test_set(trainer_t *t, eval_result_t *out, char *err, size_t cap)
{
    watchdog_phase(WATCHDOG_EVAL, t->run.step);
    int64_t chunk = t->cfg->deterministic ? t->cfg->micro_batch
                                          : t->run.max_rank_micros * t->cfg->micro_batch;
    int64_t chunks = (t->data.test.samples + chunk - 1) / chunk;
    int64_t sums[EV_N] = {0};
    evaluate_chunks(t, chunks * t->rank / t->size, chunks * (t->rank + 1) / t->size, chunk,
                    chunks, sums);
    memset(out, 0, sizeof *out);
    if (comm_allreduce(t->comm, sums, EV_N, COMM_I64, COMM_SUM) != COMM_OK) {
        snprintf(err, cap, "evaluation reduction failed: %s", comm_last_error());
        return TRAIN_EFAIL;
    }
    if (sums[EV_DEV_FAILED]) {
        const char *why = gpu_last_error();
        snprintf(err, cap, "gpu evaluation failed on %lld rank(s)%s%s",
                 (long long)sums[EV_DEV_FAILED], why && why[0] ? ": " : "", why ? why : "");
        return TRAIN_EFAIL;
    }
    if (sums[EV_CUT_SHORT]) {
        out->cut_short = 1;
        return TRAIN_OK;
    }
    int64_t n = sums[EV_SAMPLES];
    out->loss = sums[EV_LOSS_BAD] ? INFINITY
                : n ? ldexp((double)sums[EV_LOSS], -LOSS_FIXED_BITS) / (double)n : 0;
    out->acc = n ? (double)sums[EV_HITS] / (double)n : 0;
    /* R^2 = 1 - SSE / SST over the whole test set (nothing is reported of
     * a cut-short one); the loss of a sample is its mean over the outputs. */
    out->r2 = t->data.test_sst > 0
                  ? 1.0 - out->loss * (double)n * (double)t->data.test.out_dim / t->data.test_sst
                  : NAN;
    return TRAIN_OK;
}

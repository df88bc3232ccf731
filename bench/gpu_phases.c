/*
 * gpu_phases.c - the per-phase cost of one training step of an MLP on one
 * GPU, in ftrain's fast mode and in its deterministic mode, for `make bench`
 * section 7 (bench/run.sh): where the gap between the two modes goes.
 *
 *   gpu_phases [--dims 784,4096,4096,10] [--batch 4096] [--steps 100]
 *              [--repeat 3]
 *
 * The model is ftrain's default classification MLP (ReLU hidden layers,
 * softmax cross-entropy, INIT_TORCH parameters from model_init on the host),
 * with Adam at ftrain's defaults (optim_cfg_default: lr 1e-3, betas
 * 0.9/0.999, eps 1e-8).  4 x batch random samples (inputs in [0, 1), labels
 * in [0, 10) or [0, outputs) when fewer) stay on the device
 * (gpu_model_set_data) and each step takes the next batch of them by index
 * (gpu_model_forward_backward_idx, the gradient stored, not added).  One
 * rank, one micro-batch per step, as the trainer runs on one GPU.  The
 * loops, with P parameters and the gradient dgrad on the device:
 *
 *   fb         forward/backward alone (the call returns after the backward)
 *   fast       the fast-mode step: forward/backward returning early, then
 *              gpu_optim_step_consume(dgrad scaled by 1/batch)
 *   fb+maxabs  forward/backward returning early, then gpu_maxabs of dgrad
 *              (which waits for the backward)
 *   det-2pass  the deterministic step in two passes: as fb+maxabs, then the
 *              scale exponent e as train_step.c's fixed_scale_exp,
 *              gpu_fixed_round (dgrad in place) and gpu_optim_step_consume
 *              (scale 1)
 *   det-fused  as det-2pass with the rounding fused into the update:
 *              gpu_optim_step_fixed
 *
 * Each loop makes one untimed warm-up step, then `repeat` runs of `steps`
 * steps, each run timed by wall clock (CLOCK_MONOTONIC) up to one gpu_sync
 * after its last step; a loop's figure is its best run.  The optimizer state
 * goes on from loop to loop (its values do not change the timings).
 * Prints, times in ms per step:
 *
 *   gpu_phases: dims D batch B steps N params P
 *   gpu_phases: LOOP ms/step X samples/s S runs R1 R2 ...     (one per loop)
 *   gpu_phases: split ms/step: forward+backward A, Adam (fast) F-A,
 *     max|g| with its wait B-A, rounding pass C-D, deterministic over fast:
 *     2 passes C-F, fused D-F                                  (one line)
 *
 * where A, F, B, C, D are the best ms/step of fb, fast, fb+maxabs,
 * det-2pass and det-fused.  fb waits on the host for each backward (the
 * GPU idles for that round trip each step) and fast does not, so F-A is
 * the update less that round trip; fb+maxabs and the det loops wait once
 * a step too (in gpu_maxabs), so B-A and C-D compare like with like.
 *
 * Exit status: 0; 1 when a gpu_* or host call fails (the call and
 * gpu_last_error() on stderr); 2 on a bad argument; 3 when there is no GPU
 * to measure (gpu_init failed: built without CUDA, no device, no driver):
 * "gpu_phases: skipped: <why>" on stderr.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu/gpu.h"
#include "nn/model.h"
#include "nn/optim.h"

#include "bench_clock.h"

/* As src/train/train_step.c: the fixed-point sums stay below 2^FIXED_SUM_BITS,
 * and the scale exponent is at most MAX_SCALE_EXP. */
#define FIXED_SUM_BITS 62
#define MAX_SCALE_EXP 1000
/* Samples kept on the device, in batches. */
#define GP_SET_BATCHES 4
#define GP_MAX_RUNS 1000

enum { LOOP_FB, LOOP_FAST, LOOP_MAXABS, LOOP_DET2, LOOP_FUSED, LOOP_N };
static const char *const loop_names[LOOP_N] = {"fb", "fast", "fb+maxabs", "det-2pass",
                                               "det-fused"};

typedef struct {
    model_arch_t arch;
    int batch, steps, repeat;
} gp_args_t;

/* What the loops run on. */
typedef struct {
    gpu_ctx_t *ctx;
    gpu_model_t *gm;
    gpu_optim_t *go;
    float *dgrad;     /* device, P floats */
    size_t nparams;
    int64_t *idx;     /* host, GP_SET_BATCHES x batch sample indices */
    int batch;
    int64_t step;     /* the next update's number, over all loops */
    int64_t next;     /* the next step's batch of the set */
} gp_state_t;

/* A gpu_* call: on failure, the call, the error class and message, exit 1. */
#define GP_CHECK(call)                                                                   \
    do {                                                                                 \
        int gp_rc_ = (call);                                                             \
        if (gp_rc_ != GPU_OK) {                                                          \
            fprintf(stderr, "gpu_phases: %s: %s: %s\n", #call, gpu_strerror(gp_rc_),     \
                    gpu_last_error());                                                   \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

/* What was wrong (why, about arg), then the usage line; exit 2. */
static void usage(const char *why, const char *arg)
{
    fprintf(stderr, "gpu_phases: %s '%s'\n", why, arg);
    fprintf(stderr, "usage: gpu_phases [--dims 784,4096,4096,10] [--batch 4096] [--steps 100] "
                    "[--repeat 3]\n");
    exit(2);
}

/* A whole number in [1, max] from text (up to a comma where in_list), or
 * the usage message naming `what`. */
static int parse_int(const char *what, const char *text, int max, int in_list)
{
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (!text[0] || (*end && !(in_list && *end == ',')) || v < 1 || v > max) {
        char why[96];
        snprintf(why, sizeof why, "%s must be a whole number from 1 to %d, got", what, max);
        usage(why, text);
    }
    return (int)v;
}

static void parse_dims(const char *text, model_arch_t *arch)
{
    arch->nlayers = -1;
    for (const char *p = text; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
        if (arch->nlayers >= MODEL_MAX_LAYERS)
            usage("--dims has too many layers:", text);
        arch->dims[++arch->nlayers] = parse_int("each of --dims", p, 1 << 24, 1);
    }
    if (arch->nlayers < 1)
        usage("--dims needs an input and an output size at least:", text);
}

static void parse_args(int argc, char **argv, gp_args_t *a)
{
    memset(a, 0, sizeof *a);
    parse_dims("784,4096,4096,10", &a->arch);
    a->arch.act = ACT_RELU;
    a->arch.loss = LOSS_XENT;
    a->batch = 4096;
    a->steps = 100;
    a->repeat = 3;
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc)
            usage("no value after", argv[i]);
        if (!strcmp(argv[i], "--dims"))
            parse_dims(argv[i + 1], &a->arch);
        else if (!strcmp(argv[i], "--batch"))
            a->batch = parse_int("--batch", argv[i + 1], 1 << 20, 0);
        else if (!strcmp(argv[i], "--steps"))
            a->steps = parse_int("--steps", argv[i + 1], 1 << 30, 0);
        else if (!strcmp(argv[i], "--repeat"))
            a->repeat = parse_int("--repeat", argv[i + 1], GP_MAX_RUNS, 0);
        else
            usage("unknown option", argv[i]);
    }
}

static void *host_alloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "gpu_phases: out of host memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

/* The scale exponent of train_step.c's fixed_scale_exp for one micro-batch
 * per step (micro_bits 0). */
static int scale_exp(float max_abs)
{
    if (!isfinite(max_abs)) {
        fprintf(stderr, "gpu_phases: the gradient is not finite (max |g| %g)\n", max_abs);
        exit(1);
    }
    int k = 0;
    if (max_abs > 0)
        frexp((double)max_abs, &k);
    int e = max_abs > 0 ? FIXED_SUM_BITS - k - 0 : 0;
    return e > MAX_SCALE_EXP ? MAX_SCALE_EXP : e;
}

/* One step of loop `loop`. */
static void run_step(gp_state_t *s, int loop)
{
    const int64_t *idx = s->idx + (size_t)s->next * (size_t)s->batch;
    float *params = gpu_model_params(s->gm);
    double loss = 0;
    int64_t hits = 0;
    float max_abs = 0;
    s->next = (s->next + 1) % GP_SET_BATCHES;

    /* As the trainer on one rank: every step but fb's returns once its
     * losses are on the host (gpu_maxabs then waits for the backward). */
    GP_CHECK(gpu_model_early_return(s->gm, loop != LOOP_FB));
    GP_CHECK(gpu_model_forward_backward_idx(s->gm, idx, s->batch, s->dgrad, &loss, &hits));
    if (loop == LOOP_FB)
        return;
    if (loop == LOOP_FAST) {
        GP_CHECK(gpu_optim_step_consume(s->go, params, s->dgrad, 1.0f / (float)s->batch, 0,
                                        s->step));
        s->step++;
        return;
    }
    GP_CHECK(gpu_maxabs(s->ctx, s->dgrad, s->nparams, &max_abs));
    if (loop == LOOP_MAXABS)
        return;
    int e = scale_exp(max_abs);
    if (loop == LOOP_DET2) {
        GP_CHECK(gpu_fixed_round(s->ctx, s->dgrad, s->dgrad, s->nparams, e, s->batch));
        GP_CHECK(gpu_optim_step_consume(s->go, params, s->dgrad, 1.0f, 0, s->step));
    } else {
        GP_CHECK(gpu_optim_step_fixed(s->go, params, s->dgrad, e, s->batch, s->step));
    }
    s->step++;
}

/* The loop's warm-up step and its timed runs: runs[] in ms per step,
 * @return the best. */
static double time_loop(gp_state_t *s, const gp_args_t *a, int loop, double *runs)
{
    run_step(s, loop);
    GP_CHECK(gpu_sync(s->ctx));
    double best = 0;
    for (int r = 0; r < a->repeat; r++) {
        double t0 = now_s();
        for (int i = 0; i < a->steps; i++)
            run_step(s, loop);
        GP_CHECK(gpu_sync(s->ctx));
        runs[r] = (now_s() - t0) * 1e3 / a->steps;
        if (r == 0 || runs[r] < best)
            best = runs[r];
    }
    return best;
}

/* The model, optimizer, data set and gradient buffer on the device. */
static void setup(gp_state_t *s, const gp_args_t *a)
{
    char err[256];
    model_t *host = NULL;
    /* Only the initial parameters are used: the host workspace of 1 sample
     * is enough. */
    if (model_init(&host, &a->arch, 1, 1, err, sizeof err) != MODEL_OK) {
        fprintf(stderr, "gpu_phases: model_init: %s\n", err);
        exit(1);
    }
    s->nparams = model_num_params(host);
    GP_CHECK(gpu_model_create(&s->gm, s->ctx, &a->arch, a->batch, model_params(host)));
    model_free(host);
    GP_CHECK(gpu_model_store_gradient(s->gm, 1));

    optim_cfg_t ocfg;
    optim_cfg_default(&ocfg);
    GP_CHECK(gpu_optim_create(&s->go, s->ctx, &ocfg, s->nparams));
    GP_CHECK(gpu_alloc(s->ctx, s->nparams * sizeof(float), (void **)&s->dgrad));

    const int64_t n = (int64_t)GP_SET_BATCHES * a->batch;
    const size_t in = (size_t)a->arch.dims[0];
    const int classes = a->arch.dims[a->arch.nlayers] < 10 ? a->arch.dims[a->arch.nlayers] : 10;
    float *x = host_alloc((size_t)n * in * sizeof *x);
    int32_t *labels = host_alloc((size_t)n * sizeof *labels);
    unsigned seed = 1;
    for (size_t i = 0; i < (size_t)n * in; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) * (1.0f / 16777216.0f);
    }
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        labels[i] = (int32_t)((seed >> 8) % (unsigned)classes);
    }
    GP_CHECK(gpu_model_set_data(s->gm, x, labels, NULL, n));
    free(x);
    free(labels);

    s->idx = host_alloc((size_t)n * sizeof *s->idx);
    for (int64_t i = 0; i < n; i++)
        s->idx[i] = i;
    s->batch = a->batch;
    s->step = 0;
    s->next = 0;
}

int main(int argc, char **argv)
{
    gp_args_t a;
    gp_state_t s;
    parse_args(argc, argv, &a);
    memset(&s, 0, sizeof s);

    if (gpu_init(&s.ctx, 0) != GPU_OK) {
        fprintf(stderr, "gpu_phases: skipped: %s\n", gpu_last_error());
        return 3;
    }
    setup(&s, &a);

    printf("gpu_phases: dims");
    for (int l = 0; l <= a.arch.nlayers; l++)
        printf("%c%d", l ? '-' : ' ', a.arch.dims[l]);
    printf(" batch %d steps %d params %zu\n", a.batch, a.steps, s.nparams);
    fflush(stdout);

    double best[LOOP_N], runs[GP_MAX_RUNS];
    for (int loop = 0; loop < LOOP_N; loop++) {
        best[loop] = time_loop(&s, &a, loop, runs);
        printf("gpu_phases: %s ms/step %.3f samples/s %.0f runs", loop_names[loop], best[loop],
               a.batch / (best[loop] / 1e3));
        for (int r = 0; r < a.repeat; r++)
            printf(" %.3f", runs[r]);
        printf("\n");
        fflush(stdout);
    }
    const double fb = best[LOOP_FB], fast = best[LOOP_FAST], maxabs = best[LOOP_MAXABS];
    const double det2 = best[LOOP_DET2], fused = best[LOOP_FUSED];
    printf("gpu_phases: split ms/step: forward+backward %.3f, Adam (fast) %.3f, "
           "max|g| with its wait %.3f, rounding pass %.3f, deterministic over fast: "
           "2 passes %.3f, fused %.3f\n",
           fb, fast - fb, maxabs - fb, det2 - fused, det2 - fast, fused - fast);

    free(s.idx);
    gpu_dfree(s.ctx, s.dgrad);
    gpu_optim_free(s.go);
    gpu_model_free(s.gm);
    gpu_close(s.ctx);
    return 0;
}

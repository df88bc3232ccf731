/*
 * gpu_kernels.c - checks the GPU path (gpu.h) against the CPU code it
 * mirrors: forward/backward and evaluation of small MLPs against model.c
 * (float tolerance: cuBLAS sums in another order), gradient accumulation,
 * the optimizers against optim_step (bit for bit on x86-64), the fixed-point
 * conversion both ways against train_step.c's formulas (bit for bit), max |g|
 * (exact, NaN propagating), determinism (two runs, same bits) and the
 * device choice with a GPU visible.
 *
 * Needs a GPU: without one, or when built without CUDA, the whole test is
 * skipped with the reason.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "parallel/device.h"
#include "gpu/gpu.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "nn/rng.h"
#include "tap.h"

#ifndef FTRAIN_CUDA
int main(void)
{
    skip_all("built without CUDA (make CUDA=0 or no nvcc)");
}
#else

static gpu_ctx_t *ctx;

/* Abort the test with a message when a GPU call fails: everything after it
 * would only fail confusingly. */
#define GPU_OK_OR_BAIL(call)                                                  \
    do {                                                                      \
        int r_ = (call);                                                      \
        if (r_ != GPU_OK) {                                                   \
            ok(0, "%s: %s (%s)", #call, gpu_strerror(r_), gpu_last_error());  \
            return;                                                           \
        }                                                                     \
    } while (0)

static float urand(rng_t *r, double lo, double hi)
{
    return (float)(lo + (hi - lo) * rng_uniform(r));
}

/* Max |a - b| / max(1e-3, max |b|) over n floats. */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double d = 0, m = 1e-3;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        d = e > d ? e : d;
        m = fabs(b[i]) > m ? fabs(b[i]) : m;
    }
    return d / m;
}

/* The MLP of nl layers with widths dims[0..nl]. */
static model_arch_t make_arch(int nl, const int *dims, model_act_t act, model_loss_t loss)
{
    model_arch_t a;
    memset(&a, 0, sizeof a);
    a.nlayers = nl;
    for (int i = 0; i <= nl; i++)
        a.dims[i] = dims[i];
    a.act = act;
    a.loss = loss;
    return a;
}

/* One architecture: forward/backward, evaluation, accumulation and
 * determinism against model.c.  8 tests. */
static void check_model(const char *name, int nl, const int *dims, model_act_t act,
                        model_loss_t loss, uint64_t seed)
{
    model_arch_t a = make_arch(nl, dims, act, loss);
    const int B = 32, N = 23, NE = 70;
    const int in = dims[0], k = dims[nl];
    model_t *m = NULL;
    gpu_model_t *gm = NULL;
    float *dgrad = NULL;
    if (model_init(&m, &a, seed, B, NULL, 0) != MODEL_OK) {
        ok(0, "%s: model_init", name);
        return;
    }
    size_t P = model_num_params(m);
    float *x = malloc(sizeof(float) * (size_t)NE * in);
    float *y = malloc(sizeof(float) * (size_t)NE * k);
    int32_t *lab = malloc(sizeof(int32_t) * NE);
    float *gc = malloc(sizeof(float) * P), *gg = malloc(sizeof(float) * P);
    float *g1 = malloc(sizeof(float) * P), *g2 = malloc(sizeof(float) * P);
    rng_t r = rng_make(seed, 99);
    for (int i = 0; i < NE * in; i++)
        x[i] = urand(&r, -1, 1);
    for (int i = 0; i < NE * k; i++)
        y[i] = urand(&r, -1, 1);
    for (int i = 0; i < NE; i++)
        lab[i] = (int32_t)(rng_next(&r) % (uint64_t)k);
    for (size_t i = 0; i < P; i++)
        gc[i] = urand(&r, -0.5, 0.5); /* a non-zero start: accumulation */

    int rc = gpu_model_create(&gm, ctx, &a, B, model_params(m));
    if (rc != GPU_OK || gpu_alloc(ctx, P * sizeof(float), (void **)&dgrad) != GPU_OK) {
        ok(0, "%s: gpu_model_create: %s (%s)", name, gpu_strerror(rc), gpu_last_error());
        goto out;
    }
    is_int(gpu_model_num_params(gm), P, "%s: %zu parameters on both", name, P);

    double lc = 0, lg = 0;
    int64_t hc = 0, hg = 0;
    rc = gpu_upload(ctx, dgrad, gc, P * sizeof(float));
    if (rc == GPU_OK)
        rc = gpu_model_forward_backward(gm, x, lab, y, N, dgrad, &lg, &hg);
    if (rc == GPU_OK)
        rc = gpu_download(ctx, gg, dgrad, P * sizeof(float), NULL);
    model_forward_backward(m, x, lab, y, N, gc, &lc, &hc);
    if (rc != GPU_OK) {
        ok(0, "%s: forward_backward: %s (%s)", name, gpu_strerror(rc), gpu_last_error());
        goto out;
    }
    double d = rel_diff(gg, gc, P);
    ok(d < 2e-5, "%s: gradient (added to a non-zero buffer) matches the CPU, rel diff %.2g",
       name, d);
    ok(fabs(lg - lc) <= 1e-5 * (fabs(lc) + 1) && hg == hc,
       "%s: loss %.9g vs %.9g, hits %lld vs %lld", name, lg, lc, (long long)hg,
       (long long)hc);

    /* Two runs from zero give the same bits. */
    int same = 1;
    for (int t = 0; t < 2; t++) {
        float *dst = t ? g2 : g1;
        if (gpu_memset0(ctx, dgrad, P * sizeof(float)) != GPU_OK ||
            gpu_model_forward_backward(gm, x, lab, y, N, dgrad, NULL, NULL) != GPU_OK ||
            gpu_download(ctx, dst, dgrad, P * sizeof(float), NULL) != GPU_OK)
            same = 0;
    }
    ok(same && memcmp(g1, g2, P * sizeof(float)) == 0, "%s: two runs, identical bits", name);

    /* The pinned staging buffers give the same result as host arrays. */
    float *sx = NULL, *sy = NULL;
    int32_t *sl = NULL;
    gpu_model_batch_buffers(gm, &sx, &sl, &sy);
    memcpy(sx, x, sizeof(float) * (size_t)N * in);
    memcpy(sy, y, sizeof(float) * (size_t)N * k);
    memcpy(sl, lab, sizeof(int32_t) * N);
    rc = gpu_memset0(ctx, dgrad, P * sizeof(float));
    if (rc == GPU_OK)
        rc = gpu_model_forward_backward(gm, sx, sl, sy, N, dgrad, NULL, NULL);
    if (rc == GPU_OK)
        rc = gpu_download(ctx, g2, dgrad, P * sizeof(float), NULL);
    ok(rc == GPU_OK && memcmp(g1, g2, P * sizeof(float)) == 0,
       "%s: staged in the pinned buffers: same bits", name);

    /* The data set on the device, samples picked by index: the same bits
     * and loss as the host staging the same samples in that order. */
    int64_t idx[32];
    float *px = malloc(sizeof(float) * (size_t)N * in), *py = malloc(sizeof(float) * (size_t)N * k);
    int32_t pl[32];
    for (int i = 0; i < N; i++) {
        idx[i] = (int64_t)((i * 37 + 11) % NE); /* a permutation's worth of jumps */
        memcpy(px + (size_t)i * in, x + (size_t)idx[i] * in, sizeof(float) * in);
        memcpy(py + (size_t)i * k, y + (size_t)idx[i] * k, sizeof(float) * k);
        pl[i] = lab[idx[i]];
    }
    rc = gpu_model_forward_backward_idx(gm, idx, N, dgrad, NULL, NULL);
    is_int(rc, GPU_EINVAL, "%s: by index before a data set is given: refused", name);
    double l1 = 0, l2 = 0;
    int64_t h1 = 0, h2 = 0;
    rc = gpu_model_set_data(gm, x, loss == LOSS_XENT ? lab : NULL, loss == LOSS_XENT ? NULL : y, NE);
    ok(rc == GPU_OK, "%s: gpu_model_set_data(%d samples): %s", name, NE,
       rc == GPU_OK ? "ok" : gpu_last_error());
    if (rc == GPU_OK)
        rc = gpu_memset0(ctx, dgrad, P * sizeof(float));
    if (rc == GPU_OK)
        rc = gpu_model_forward_backward(gm, px, pl, py, N, dgrad, &l1, &h1);
    if (rc == GPU_OK)
        rc = gpu_download(ctx, g1, dgrad, P * sizeof(float), NULL);
    if (rc == GPU_OK)
        rc = gpu_memset0(ctx, dgrad, P * sizeof(float));
    if (rc == GPU_OK)
        rc = gpu_model_forward_backward_idx(gm, idx, N, dgrad, &l2, &h2);
    if (rc == GPU_OK)
        rc = gpu_download(ctx, g2, dgrad, P * sizeof(float), NULL);
    ok(rc == GPU_OK && memcmp(g1, g2, P * sizeof(float)) == 0 && l1 == l2 && h1 == h2,
       "%s: gathered on the device by index: same bits, loss %.9g vs %.9g (%s)", name, l2, l1,
       rc == GPU_OK ? "ok" : gpu_last_error());
    idx[5] = NE;
    rc = gpu_model_forward_backward_idx(gm, idx, N, dgrad, NULL, NULL);
    is_int(rc, GPU_EINVAL, "%s: an index past the set is refused", name);
    idx[5] = -1;
    rc = gpu_model_forward_backward_idx(gm, idx, N, dgrad, NULL, NULL);
    is_int(rc, GPU_EINVAL, "%s: a negative index is refused", name);
    if (loss == LOSS_XENT) {
        int32_t keep = lab[7];
        lab[7] = -2;
        rc = gpu_model_set_data(gm, x, lab, NULL, NE);
        lab[7] = keep;
        is_int(rc, GPU_EINVAL, "%s: a data set with a label out of range is refused", name);
    }
    free(px);
    free(py);

    /* Evaluation over more samples than max_batch (chunks). */
    rc = gpu_model_evaluate(gm, x, lab, y, NE, &lg, &hg);
    model_evaluate(m, x, lab, y, NE, &lc, &hc);
    ok(rc == GPU_OK && fabs(lg - lc) <= 1e-5 * (fabs(lc) + 1) && hg == hc,
       "%s: evaluate %d samples: loss %.9g vs %.9g, hits %lld vs %lld", name, NE, lg, lc,
       (long long)hg, (long long)hc);

    rc = gpu_model_forward_backward(gm, x, lab, y, 0, dgrad, &lg, &hg);
    ok(rc == GPU_OK && lg == 0 && hg == 0, "%s: zero samples: nothing", name);
    if (loss == LOSS_XENT) {
        int32_t bad = lab[3];
        lab[3] = k;
        rc = gpu_model_forward_backward(gm, x, lab, y, N, dgrad, NULL, NULL);
        lab[3] = bad;
        is_int(rc, GPU_EINVAL, "%s: a label out of range is refused", name);
    } else {
        rc = gpu_model_forward_backward(gm, x, lab, y, B + 1, dgrad, NULL, NULL);
        is_int(rc, GPU_EINVAL, "%s: more than max_batch samples is refused", name);
    }
out:
    gpu_dfree(ctx, dgrad);
    gpu_model_free(gm);
    model_free(m);
    free(x);
    free(y);
    free(lab);
    free(gc);
    free(gg);
    free(g1);
    free(g2);
}

/* gpu_model_store_gradient: the gradient stored over whatever dgrad held
 * (a full and a partial batch), each against model.c from zeros; twice,
 * same bits; returning early, same bits; against adding into zeros; no
 * samples store zeros.  7 tests. */
static void check_store(const char *name, int nl, const int *dims, model_act_t act, int B,
                        uint64_t seed)
{
    model_arch_t a = make_arch(nl, dims, act, LOSS_XENT);
    const int N = 37;
    const int in = dims[0], k = dims[nl];
    model_t *m = NULL;
    gpu_model_t *gm = NULL;
    float *dgrad = NULL;
    if (model_init(&m, &a, seed, B, NULL, 0) != MODEL_OK) {
        for (int i = 0; i < 7; i++)
            ok(0, "%s: model_init", name);
        return;
    }
    size_t P = model_num_params(m);
    float *x = malloc(sizeof(float) * (size_t)B * in);
    int32_t *lab = malloc(sizeof(int32_t) * B);
    float *gc = calloc(P, sizeof(float)), *gg = malloc(sizeof(float) * P);
    float *g2 = malloc(sizeof(float) * P), *junk = malloc(sizeof(float) * P);
    rng_t r = rng_make(seed, 7);
    for (int i = 0; i < B * in; i++)
        x[i] = urand(&r, -1, 1);
    for (int i = 0; i < B; i++)
        lab[i] = (int32_t)(rng_next(&r) % (uint64_t)k);
    for (size_t i = 0; i < P; i++)
        junk[i] = 1e30f; /* what a stored gradient must never see */
    int rc = gpu_model_create(&gm, ctx, &a, B, model_params(m));
    if (rc != GPU_OK || gpu_alloc(ctx, P * sizeof(float), (void **)&dgrad) != GPU_OK ||
        gpu_model_store_gradient(gm, 1) != GPU_OK) {
        for (int i = 0; i < 7; i++) /* the plan counts this case's 7 */
            ok(0, "%s: set-up: %s (%s)", name, gpu_strerror(rc), gpu_last_error());
        goto out;
    }
    for (int pass = 0; pass < 2; pass++) {
        const int n = pass == 0 ? B : N;
        double lc = 0, lg = 0;
        int64_t hc = 0, hg = 0;
        memset(gc, 0, P * sizeof(float));
        model_forward_backward(m, x, lab, NULL, n, gc, &lc, &hc);
        rc = gpu_upload(ctx, dgrad, junk, P * sizeof(float));
        if (rc == GPU_OK)
            rc = gpu_model_forward_backward(gm, x, lab, NULL, n, dgrad, &lg, &hg);
        if (rc == GPU_OK)
            rc = gpu_download(ctx, gg, dgrad, P * sizeof(float), NULL);
        double d = rc == GPU_OK ? rel_diff(gg, gc, P) : 1;
        ok(rc == GPU_OK && d < 2e-5 && fabs(lg - lc) <= 1e-5 * (fabs(lc) + 1) && hg == hc,
           "%s: %d samples stored over junk: rel diff %.2g, loss %.9g vs %.9g (%s)", name, n,
           d, lg, lc, rc == GPU_OK ? "ok" : gpu_last_error());
        if (pass == 0) {
            rc = gpu_upload(ctx, dgrad, junk, P * sizeof(float));
            if (rc == GPU_OK)
                rc = gpu_model_forward_backward(gm, x, lab, NULL, n, dgrad, NULL, NULL);
            if (rc == GPU_OK)
                rc = gpu_download(ctx, g2, dgrad, P * sizeof(float), NULL);
            ok(rc == GPU_OK && memcmp(gg, g2, P * sizeof(float)) == 0,
               "%s: %d samples twice: identical bits", name, n);
            /* Returning at the losses, the backward still running: the
             * download queued after it sees the same gradient. */
            double le = 0;
            int64_t he = 0;
            rc = gpu_upload(ctx, dgrad, junk, P * sizeof(float));
            if (rc == GPU_OK)
                rc = gpu_model_early_return(gm, 1);
            if (rc == GPU_OK)
                rc = gpu_model_forward_backward(gm, x, lab, NULL, n, dgrad, &le, &he);
            if (rc == GPU_OK)
                rc = gpu_download(ctx, g2, dgrad, P * sizeof(float), NULL);
            int off = gpu_model_early_return(gm, 0);
            ok(rc == GPU_OK && off == GPU_OK && memcmp(gg, g2, P * sizeof(float)) == 0 &&
                   le == lg && he == hg,
               "%s: %d samples, early return: identical bits and loss (%s)", name, n,
               rc == GPU_OK ? "ok" : gpu_last_error());
        }
    }
    /* Adding runs the weight products with beta 1 (cuBLAS may pick another
     * kernel): equal to float tolerance. */
    memset(gc, 0, P * sizeof(float));
    rc = gpu_model_store_gradient(gm, 0);
    if (rc == GPU_OK)
        rc = gpu_upload(ctx, dgrad, gc, P * sizeof(float));
    if (rc == GPU_OK)
        rc = gpu_model_forward_backward(gm, x, lab, NULL, B, dgrad, NULL, NULL);
    if (rc == GPU_OK)
        rc = gpu_download(ctx, gg, dgrad, P * sizeof(float), NULL);
    ok(rc == GPU_OK && rel_diff(gg, g2, P) < 2e-5,
       "%s: %d samples added into zeros vs stored: rel diff %.2g", name, B,
       rc == GPU_OK ? rel_diff(gg, g2, P) : 1.0);
    rc = gpu_model_store_gradient(gm, 1);
    if (rc == GPU_OK)
        rc = gpu_upload(ctx, dgrad, junk, P * sizeof(float));
    if (rc == GPU_OK)
        rc = gpu_model_forward_backward(gm, x, lab, NULL, 0, dgrad, NULL, NULL);
    if (rc == GPU_OK)
        rc = gpu_download(ctx, gg, dgrad, P * sizeof(float), NULL);
    int zeros = rc == GPU_OK;
    for (size_t i = 0; i < P && zeros; i++)
        zeros = gg[i] == 0.0f;
    ok(zeros, "%s: no samples store a zero gradient", name);
    is_int(gpu_model_store_gradient(NULL, 1) + gpu_model_early_return(NULL, 1), 2 * GPU_EINVAL,
           "%s: NULL model refused", name);
out:
    gpu_dfree(ctx, dgrad);
    gpu_model_free(gm);
    model_free(m);
    free(x);
    free(lab);
    free(gc);
    free(gg);
    free(g2);
    free(junk);
}

/* One optimizer config: 4 steps on CPU and GPU from the same start, the
 * same with the gradient read as grad * gs and cleared by the update, and
 * with it read through the fixed-point round trip (gpu_optim_step_fixed),
 * against the host formulas and against the unfused kernels.  7 tests. */
static void check_optim(const char *name, const optim_cfg_t *cfg)
{
    const size_t P = 1003; /* not a multiple of 4: the CPU's SSE tail too */
    optim_t *o = NULL;
    gpu_optim_t *go = NULL;
    float *p = malloc(P * sizeof(float)), *pg = malloc(P * sizeof(float));
    float *g = malloc(P * sizeof(float)), *mg = malloc(P * sizeof(float));
    float *dp = NULL, *dg = NULL, *dp2 = NULL;
    optim_t *o2 = NULL;
    gpu_optim_t *go2 = NULL;
    float *p2 = malloc(P * sizeof(float)), *gs_g = malloc(P * sizeof(float));
    optim_t *o3 = NULL;
    gpu_optim_t *go3 = NULL, *go4 = NULL;
    float *dp3 = NULL, *dp4 = NULL, *dtmp = NULL;
    float *p3 = malloc(P * sizeof(float)), *fx_g = malloc(P * sizeof(float));
    float *s3 = malloc(P * sizeof(float)), *s4 = malloc(P * sizeof(float));
    int cleared = 1;
    const float gs = 1.0f / 3.0f;
    /* The fixed point of one rank's one micro-batch of nstep samples, at a
     * coarse scale: every element's rounding changes it (|g| < 0.1 is
     * below 2^17 units), so an update that skipped it would differ. */
    const int fx_e = 20;
    const int64_t fx_nstep = 3;
    const double fx_scale = ldexp(1.0, fx_e), fx_inv = ldexp(1.0, -fx_e) / (double)fx_nstep;
    int rc = optim_init(&o, cfg, P, NULL, 0) == OPTIM_OK ? 0 : -1;
    if (rc == 0)
        rc = optim_init(&o2, cfg, P, NULL, 0) == OPTIM_OK ? 0 : -1;
    if (rc == 0)
        rc = optim_init(&o3, cfg, P, NULL, 0) == OPTIM_OK ? 0 : -1;
    rng_t r = rng_make(7, 3);
    for (size_t i = 0; i < P; i++)
        p[i] = urand(&r, -1, 1);
    if (rc == 0)
        rc = gpu_optim_create(&go, ctx, cfg, P);
    if (rc == 0)
        rc = gpu_alloc(ctx, P * sizeof(float), (void **)&dp);
    if (rc == 0)
        rc = gpu_alloc(ctx, P * sizeof(float), (void **)&dg);
    if (rc == 0)
        rc = gpu_optim_create(&go2, ctx, cfg, P);
    if (rc == 0)
        rc = gpu_alloc(ctx, P * sizeof(float), (void **)&dp2);
    if (rc == 0)
        rc = gpu_upload(ctx, dp, p, P * sizeof(float));
    if (rc == 0)
        rc = gpu_upload(ctx, dp2, p, P * sizeof(float));
    if (rc == 0)
        rc = gpu_optim_create(&go3, ctx, cfg, P);
    if (rc == 0)
        rc = gpu_alloc(ctx, P * sizeof(float), (void **)&dp3);
    if (rc == 0)
        rc = gpu_upload(ctx, dp3, p, P * sizeof(float));
    if (rc == 0)
        rc = gpu_optim_create(&go4, ctx, cfg, P);
    if (rc == 0)
        rc = gpu_alloc(ctx, P * sizeof(float), (void **)&dp4);
    if (rc == 0)
        rc = gpu_alloc(ctx, P * sizeof(float), (void **)&dtmp);
    if (rc == 0)
        rc = gpu_upload(ctx, dp4, p, P * sizeof(float));
    memcpy(p2, p, P * sizeof(float));
    memcpy(p3, p, P * sizeof(float));
    for (int64_t s = 0; rc == 0 && s < 4; s++) {
        for (size_t i = 0; i < P; i++)
            g[i] = urand(&r, -0.1, 0.1) * (i % 17 == 0 ? 1e-4f : 1.0f);
        rc = gpu_upload(ctx, dg, g, P * sizeof(float));
        if (rc == 0)
            rc = gpu_optim_step(go, dp, dg, s);
        optim_step(o, p, g, s);
        /* The fused fixed-point update reads dg and leaves it as it was. */
        for (size_t i = 0; i < P; i++)
            fx_g[i] = (float)((double)llrint((double)g[i] * fx_scale) * fx_inv);
        optim_step(o3, p3, fx_g, s);
        if (rc == 0)
            rc = gpu_optim_step_fixed(go3, dp3, dg, fx_e, fx_nstep, s);
        /* The same unfused: the rounding pass, then the plain update. */
        if (rc == 0)
            rc = gpu_fixed_round(ctx, dtmp, dg, P, fx_e, fx_nstep);
        if (rc == 0)
            rc = gpu_optim_step(go4, dp4, dtmp, s);
        /* The consuming update: grad * gs, then the gradient cleared. */
        for (size_t i = 0; i < P; i++)
            gs_g[i] = g[i] * gs;
        optim_step(o2, p2, gs_g, s);
        if (rc == 0)
            rc = gpu_optim_step_consume(go2, dp2, dg, gs, 1, s);
        if (rc == 0)
            rc = gpu_download(ctx, gs_g, dg, P * sizeof(float), NULL);
        for (size_t i = 0; rc == 0 && i < P; i++)
            cleared &= gs_g[i] == 0.0f;
    }
    if (rc == 0)
        rc = gpu_download(ctx, pg, dp, P * sizeof(float), NULL);
    if (rc == 0)
        rc = gpu_download(ctx, mg, gpu_optim_state_m(go), P * sizeof(float), NULL);
    if (rc != 0) {
        ok(0, "%s: %s (%s)", name, gpu_strerror(rc), gpu_last_error());
        ok(0, "%s: state", name);
        ok(0, "%s: update counts", name);
        ok(0, "%s: the consuming update", name);
        ok(0, "%s: the cleared gradient", name);
        ok(0, "%s: the fixed-point update", name);
        ok(0, "%s: the fixed-point update against the unfused kernels", name);
        goto out;
    }
    double d = rel_diff(pg, p, P);
#if defined(__x86_64__)
    /* Same operations, each rounded once, on both sides. */
    ok(memcmp(pg, p, P * sizeof(float)) == 0, "%s: 4 steps, same bits as optim_step "
       "(rel diff %.2g)", name, d);
#else
    /* Hosts whose compiler fuses a*b+c round differently. */
    ok(d < 1e-6, "%s: 4 steps match optim_step, rel diff %.2g", name, d);
#endif
    ok(memcmp(mg, optim_state_m(o), P * sizeof(float)) == 0 ||
           rel_diff(mg, optim_state_m(o), P) < 1e-6,
       "%s: first moment / momentum matches", name);
    is_int(gpu_optim_updates(go), optim_updates(o), "%s: update counts agree", name);
    if (gpu_download(ctx, pg, dp2, P * sizeof(float), NULL) != GPU_OK)
        memset(pg, 0xff, P * sizeof(float));
#if defined(__x86_64__)
    ok(memcmp(pg, p2, P * sizeof(float)) == 0, "%s: the consuming update (grad * 1/3) has "
       "the bits of optim_step on the scaled gradient", name);
#else
    ok(rel_diff(pg, p2, P) < 1e-6, "%s: the consuming update matches", name);
#endif
    ok(cleared, "%s: and it leaves the gradient all zeros", name);
    /* Parameters and first moments (Adam's second moments too) of the
     * fused update: against the host, then against the unfused kernels. */
    int same_host = 1, same_gpu = 1;
    float *host_state[3] = {p3, optim_state_m(o3), optim_state_v(o3)};
    float *dev3[3] = {dp3, gpu_optim_state_m(go3), gpu_optim_state_v(go3)};
    float *dev4[3] = {dp4, gpu_optim_state_m(go4), gpu_optim_state_v(go4)};
    for (int k = 0; k < 3 && dev3[k]; k++) {
        if (gpu_download(ctx, s3, dev3[k], P * sizeof(float), NULL) != GPU_OK ||
            gpu_download(ctx, s4, dev4[k], P * sizeof(float), NULL) != GPU_OK) {
            same_host = same_gpu = 0;
            break;
        }
#if defined(__x86_64__)
        same_host &= memcmp(s3, host_state[k], P * sizeof(float)) == 0;
#else
        same_host &= rel_diff(s3, host_state[k], P) < 1e-6;
#endif
        same_gpu &= memcmp(s3, s4, P * sizeof(float)) == 0;
    }
    int refused = gpu_optim_step_fixed(go3, dp3, dg, fx_e, 0, 4) == GPU_EINVAL &&
                  gpu_optim_step_fixed(go3, dp3, NULL, fx_e, fx_nstep, 4) == GPU_EINVAL &&
                  gpu_optim_updates(go3) == 4;
    ok(same_host && refused, "%s: the fixed-point update (round trip at 2^%d, / %lld, in "
       "registers) has the bits of optim_step on the rounded gradient, state included; "
       "nstep 0 and NULL refused", name, fx_e, (long long)fx_nstep);
    ok(same_gpu, "%s: and those of gpu_fixed_round then gpu_optim_step", name);
out:
    gpu_dfree(ctx, dp3);
    gpu_dfree(ctx, dp4);
    gpu_dfree(ctx, dtmp);
    gpu_optim_free(go3);
    gpu_optim_free(go4);
    free(s3);
    free(s4);
    optim_free(o3);
    free(p3);
    free(fx_g);
    gpu_dfree(ctx, dp);
    gpu_dfree(ctx, dp2);
    gpu_dfree(ctx, dg);
    gpu_optim_free(go);
    gpu_optim_free(go2);
    optim_free(o);
    optim_free(o2);
    free(p2);
    free(gs_g);
    free(p);
    free(pg);
    free(g);
    free(mg);
}

/* Fixed point both ways and max |g| against the CPU formulas.  12 tests. */
static void check_reduction(void)
{
    const size_t P = 100003;
    float *g = malloc(P * sizeof(float)), *back = malloc(P * sizeof(float));
    float *backg = malloc(P * sizeof(float));
    int64_t *acc = malloc(P * sizeof(int64_t)), *accg = malloc(P * sizeof(int64_t));
    float *dg = NULL;
    int64_t *dacc = NULL;
    rng_t r = rng_make(11, 5);
    float mx = 0;
    for (size_t i = 0; i < P; i++) {
        /* Magnitudes over many octaves, both signs, some exact halves. */
        float v = urand(&r, -1, 1) * ldexpf(1.0f, -(int)(rng_next(&r) % 30));
        if (i % 1000 == 7)
            v = 0.5f;
        g[i] = v;
        mx = fabsf(v) > mx ? fabsf(v) : mx;
        acc[i] = (int64_t)(rng_next(&r) >> 4) - ((int64_t)1 << 58);
    }
    g[P / 2] = -1.75f; /* the max, negative */
    mx = 1.75f;
    int kexp = 0, micros = 8, mbits = 3;
    frexp(mx, &kexp);
    int e = 62 - kexp - mbits;
    (void)micros;

    GPU_OK_OR_BAIL(gpu_alloc(ctx, P * sizeof(float), (void **)&dg));
    GPU_OK_OR_BAIL(gpu_alloc(ctx, P * sizeof(int64_t), (void **)&dacc));
    GPU_OK_OR_BAIL(gpu_upload(ctx, dg, g, P * sizeof(float)));
    GPU_OK_OR_BAIL(gpu_upload(ctx, dacc, acc, P * sizeof(int64_t)));

    float got = -1;
    GPU_OK_OR_BAIL(gpu_maxabs(ctx, dg, P, &got));
    ok(got == mx, "maxabs: exact (%.9g)", (double)got);
    GPU_OK_OR_BAIL(gpu_maxabs(ctx, dg, 0, &got));
    ok(got == 0.0f, "maxabs of nothing is 0");

    /* acc += llrint(g * 2^e), twice, as train_step.c does per micro-batch. */
    double scale = ldexp(1.0, e);
    for (int t = 0; t < 2; t++) {
        GPU_OK_OR_BAIL(gpu_fixed_accumulate(ctx, dacc, dg, P, e));
        for (size_t i = 0; i < P; i++)
            acc[i] += llrint((double)g[i] * scale);
    }
    GPU_OK_OR_BAIL(gpu_download(ctx, accg, dacc, P * sizeof(int64_t), NULL));
    ok(memcmp(acc, accg, P * sizeof(int64_t)) == 0,
       "fixed-point accumulate: bit-identical to llrint (e = %d)", e);

    int64_t nstep = 37;
    double inv = ldexp(1.0, -e) / (double)nstep;
    for (size_t i = 0; i < P; i++)
        back[i] = (float)((double)acc[i] * inv);
    GPU_OK_OR_BAIL(gpu_fixed_to_float(ctx, dg, dacc, P, e, nstep));
    GPU_OK_OR_BAIL(gpu_download(ctx, backg, dg, P * sizeof(float), NULL));
    ok(memcmp(back, backg, P * sizeof(float)) == 0, "fixed point -> float: bit-identical");
    is_int(gpu_fixed_to_float(ctx, dg, dacc, P, e, 0), GPU_EINVAL, "nstep 0 refused");

    /* The first micro-batch's store is the accumulate into zeros, and one
     * rank's one micro-batch in one pass (gpu_fixed_round) is the store,
     * then the conversion, bit for bit; in place too. */
    GPU_OK_OR_BAIL(gpu_upload(ctx, dg, g, P * sizeof(float)));
    GPU_OK_OR_BAIL(gpu_fixed_store(ctx, dacc, dg, P, e));
    GPU_OK_OR_BAIL(gpu_download(ctx, accg, dacc, P * sizeof(int64_t), NULL));
    for (size_t i = 0; i < P; i++)
        acc[i] = 0 + llrint((double)g[i] * scale);
    ok(memcmp(acc, accg, P * sizeof(int64_t)) == 0, "fixed-point store: bit-identical to "
       "an accumulate into zeros");
    for (size_t i = 0; i < P; i++)
        back[i] = (float)((double)acc[i] * inv);
    float *dout = NULL;
    GPU_OK_OR_BAIL(gpu_alloc(ctx, P * sizeof(float), (void **)&dout));
    GPU_OK_OR_BAIL(gpu_fixed_round(ctx, dout, dg, P, e, nstep));
    GPU_OK_OR_BAIL(gpu_download(ctx, backg, dout, P * sizeof(float), NULL));
    ok(memcmp(back, backg, P * sizeof(float)) == 0, "fixed-point round trip in one pass: "
       "bit-identical to store + sum of one + conversion");
    GPU_OK_OR_BAIL(gpu_fixed_round(ctx, dg, dg, P, e, nstep));
    GPU_OK_OR_BAIL(gpu_download(ctx, backg, dg, P * sizeof(float), NULL));
    ok(memcmp(back, backg, P * sizeof(float)) == 0 &&
           gpu_fixed_round(ctx, dg, dg, P, e, 0) == GPU_EINVAL,
       "and in place; nstep 0 refused");
    gpu_dfree(ctx, dout);

    /* Scale and NaN propagation in maxabs. */
    GPU_OK_OR_BAIL(gpu_upload(ctx, dg, g, P * sizeof(float)));
    GPU_OK_OR_BAIL(gpu_scale(ctx, dg, P, 0.25f));
    GPU_OK_OR_BAIL(gpu_download(ctx, backg, dg, P * sizeof(float), NULL));
    int scaled = 1;
    for (size_t i = 0; i < P; i++)
        scaled &= backg[i] == g[i] * 0.25f;
    ok(scaled, "gpu_scale multiplies exactly");
    g[12345] = NAN;
    GPU_OK_OR_BAIL(gpu_upload(ctx, dg, g, P * sizeof(float)));
    GPU_OK_OR_BAIL(gpu_maxabs(ctx, dg, P, &got));
    ok(isnan(got), "maxabs: a NaN propagates");
    g[12345] = -INFINITY;
    GPU_OK_OR_BAIL(gpu_upload(ctx, dg, g, P * sizeof(float)));
    GPU_OK_OR_BAIL(gpu_maxabs(ctx, dg, P, &got));
    ok(isinf(got) && got > 0, "maxabs: -inf gives +inf");

    /* The download reports its own wall time: more than nothing (a copy
     * and a stream synchronisation take some microseconds, and the clock
     * has nanoseconds), no more than the call took as measured here, and
     * under a second: 400 kB over PCIe take well under a millisecond, so a
     * second is only headroom for a loaded host that schedules us late. */
    double secs = -1;
    struct timespec d0, d1;
    clock_gettime(CLOCK_MONOTONIC, &d0);
    GPU_OK_OR_BAIL(gpu_download(ctx, back, dg, P * sizeof(float), &secs));
    clock_gettime(CLOCK_MONOTONIC, &d1);
    double outer = (double)(d1.tv_sec - d0.tv_sec) + (double)(d1.tv_nsec - d0.tv_nsec) * 1e-9;
    ok(secs > 0 && secs <= outer && secs < 1.0,
       "download reports its time (%.6f s, the call took %.6f s)", secs, outer);

    gpu_dfree(ctx, dg);
    gpu_dfree(ctx, dacc);
    free(g);
    free(back);
    free(backg);
    free(acc);
    free(accg);
}

int main(void)
{
    char why[512];
    int n = device_gpu_count(why, sizeof why);
    if (n <= 0) {
        char msg[600];
        snprintf(msg, sizeof msg, "no GPU visible (%s)", why);
        skip_all(msg);
    }
    /* 3 classification models, 1 regression, 4 stored */
    plan(4 + 1 + 3 * 14 + 13 + 4 * 7 + 3 * 7 + 12);

    device_kind_t kind;
    int ord = -1;
    int rc = device_choose("auto", n - 1, n, &kind, &ord, why, sizeof why);
    ok(rc == DEVICE_OK && kind == DEVICE_CUDA && ord == n - 1,
       "--device auto with %d GPU(s): local rank %d of %d -> GPU %d ('%s')", n, n - 1, n, ord,
       why);
    ok(strncmp(why, "cuda: ", 6) == 0 && strstr(why, "GPU"), "the reason names the GPU");
    /* More ranks on the node than GPUs this rank sees is no refusal by
     * itself (--gpus-per-task=1 shows each rank one GPU); two ranks on one
     * physical GPU are found by UUID. */
    rc = device_choose("auto", n, n + 1, &kind, &ord, why, sizeof why);
    ok(rc == DEVICE_OK && kind == DEVICE_CUDA && ord == 0,
       "auto, local rank %d of %d with %d GPU(s): GPU %d ('%s')", n, n + 1, n, ord, why);
    device_gpu_ref_t refs[2];
    int sa = -1, sb = -1;
    char msg[512] = "";
    int r0 = device_gpu_ref(0, "here", &refs[0]), r1 = device_gpu_ref(0, "here", &refs[1]);
    int found = device_find_shared(refs, 2, &sa, &sb, msg, sizeof msg);
    ok(r0 == DEVICE_OK && r1 == DEVICE_OK && refs[0].on_gpu && found == 1 && sa == 0 && sb == 1,
       "two ranks on GPU 0: found by its UUID ('%s')", msg);

    rc = gpu_init(&ctx, 0);
    if (!ok(rc == GPU_OK, "gpu_init(0): %s", rc ? gpu_last_error() : "ok")) {
        diag("cannot go on without a context");
        return done_testing();
    }

    static const int d1[] = {12, 16, 8, 5};
    static const int d2[] = {7, 10, 3};
    static const int d3[] = {9, 4};
    /* Wider than one 32-column block of the bias-gradient kernel, with a
     * partial last block (70 = 2 x 32 + 6). */
    static const int d4[] = {20, 70, 40, 10};
    check_model("relu xent 12-16-8-5", 3, d1, ACT_RELU, LOSS_XENT, 1);
    check_model("relu xent 20-70-40-10", 3, d4, ACT_RELU, LOSS_XENT, 4);
    check_model("tanh mse 7-10-3", 2, d2, ACT_TANH, LOSS_MSE, 2);
    check_model("linear xent 9-4", 1, d3, ACT_TANH, LOSS_XENT, 3);
    static const int d5[] = {32, 64, 64, 16};
    /* Wider than one 256-thread block of bias + activation, and a batch
     * long enough for the column sums' eight-load loop (n >= 113). */
    static const int d6[] = {16, 300, 40, 10};
    check_store("store relu 32-64-64-16", 3, d5, ACT_RELU, 64, 5);
    check_store("store relu 20-70-40-10", 3, d4, ACT_RELU, 64, 6);
    check_store("store tanh 12-16-8-5", 3, d1, ACT_TANH, 64, 7);
    check_store("store relu 16-300-40-10, batch 160", 3, d6, ACT_RELU, 160, 8);

    optim_cfg_t c;
    optim_cfg_default(&c);
    c.kind = OPT_SGD;
    c.lr = 0.05;
    c.momentum = 0.9;
    c.weight_decay = 1e-3;
    check_optim("sgd momentum wd", &c);
    optim_cfg_default(&c);
    c.weight_decay = 1e-2;
    c.schedule = SCHED_COSINE;
    c.warmup_steps = 2;
    c.total_steps = 10;
    c.min_lr = 1e-5;
    check_optim("adam l2 cosine", &c);
    optim_cfg_default(&c);
    c.kind = OPT_ADAMW;
    c.lr = 3e-3;
    c.weight_decay = 0.1;
    check_optim("adamw", &c);

    check_reduction();
    gpu_close(ctx);
    return done_testing();
}
#endif

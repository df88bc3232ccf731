/*
 * optim.c - SGD with momentum, Adam and AdamW, and learning-rate schedules.
 *
 * Exact formulas (step is the 0-based index of the update, t = step + 1,
 * lr_s = optim_lr(cfg, step); per-element math in float, in this order):
 *
 *   SGD:   g = grad + wd * p
 *          buf = g                                 (first update: updates == 0)
 *          buf = mu * buf + g                      (later updates)
 *          p = p - lr_s * buf
 *   Adam:  g = grad + wd * p                       (L2 decay in g)
 *          m = b1 * m + (1 - b1) * g
 *          v = b2 * v + (1 - b2) * (g * g)
 *          p = p - (lr_s / bc1) * (m / (sqrt(v) * (1 / sqrt(bc2)) + eps))
 *          with bc1 = 1 - b1^t, bc2 = 1 - b2^t computed in double once per step,
 *          which is p -= lr_s * mhat / (sqrt(vhat) + eps) rounded differently.
 *   AdamW: p = p * (1 - lr_s * wd)                 (first)
 *          then the Adam update with g = grad.
 *   With wd = 0 the decay terms are exact no-ops (multiply by 1, add 0).
 *
 * Schedules:
 *   constant: lr_s = lr (warmup_steps and total_steps are ignored).
 *   cosine:   step < warmup: lr_s = lr * (step + 1) / warmup;
 *             otherwise progress = (step - warmup) / max(1, total - warmup)
 *             clamped to [0, 1] and
 *             lr_s = min_lr + 0.5 * (lr - min_lr) * (1 + cos(pi * progress)).
 *   A negative step is treated as 0.
 *
 * Scalars (lr_s, betas, eps, wd and the bias-correction factors) are rounded
 * to float once per step, so every element sees the same constants and the
 * update is a pure function of (params, grad, state, step).
 */
#include "ftrain/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

struct optim {
    optim_cfg_t cfg;
    size_t n;
    float *m;   /* SGD momentum buffer, or Adam's first moment */
    float *v;   /* Adam's second moment; NULL for SGD */
    int64_t updates;
};

void optim_cfg_default(optim_cfg_t *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof(*cfg));
    cfg->kind = OPT_ADAM;
    cfg->lr = 1e-3;
    cfg->momentum = 0.9;
    cfg->beta1 = 0.9;
    cfg->beta2 = 0.999;
    cfg->eps = 1e-8;
    cfg->weight_decay = 0.0;
    cfg->schedule = SCHED_CONSTANT;
    cfg->warmup_steps = 0;
    cfg->total_steps = 0;
    cfg->min_lr = 0.0;
}

/* Return 1 when x is finite and lo <= x < hi. */
static int in_range(double x, double lo, double hi)
{
    return isfinite(x) && x >= lo && x < hi;
}

/* Return 1 when cfg describes an optimizer this module can run. */
static int cfg_valid(const optim_cfg_t *c)
{
    if (!c)
        return 0;
    if (c->kind != OPT_SGD && c->kind != OPT_ADAM && c->kind != OPT_ADAMW)
        return 0;
    if (!isfinite(c->lr) || c->lr <= 0.0)
        return 0;
    if (!isfinite(c->weight_decay) || c->weight_decay < 0.0)
        return 0;
    if (c->kind == OPT_SGD) {
        if (!in_range(c->momentum, 0.0, 1.0))
            return 0;
    } else {
        if (!in_range(c->beta1, 0.0, 1.0) || !in_range(c->beta2, 0.0, 1.0))
            return 0;
        if (!isfinite(c->eps) || c->eps <= 0.0)
            return 0;
    }
    if (c->schedule == SCHED_COSINE) {
        if (c->warmup_steps < 0 || c->total_steps < 0)
            return 0;
        if (!isfinite(c->min_lr) || c->min_lr < 0.0 || c->min_lr > c->lr)
            return 0;
    } else if (c->schedule != SCHED_CONSTANT) {
        return 0;
    }
    return 1;
}

int optim_init(optim_t **out, const optim_cfg_t *cfg, size_t nparams)
{
    int rc = 0;
    optim_t *o = NULL;

    if (!out)
        return -1;
    *out = NULL;
    if (!cfg_valid(cfg) || nparams == 0 || nparams > SIZE_MAX / sizeof(float))
        return -1;
    o = calloc(1, sizeof(*o));
    if (!o) {
        rc = -2;
        goto fail;
    }
    o->cfg = *cfg;
    o->n = nparams;
    o->m = calloc(nparams, sizeof(float));
    if (!o->m) {
        rc = -2;
        goto fail;
    }
    if (cfg->kind != OPT_SGD) {
        o->v = calloc(nparams, sizeof(float));
        if (!o->v) {
            rc = -2;
            goto fail;
        }
    }
    *out = o;
    return 0;

fail:
    optim_free(o);
    return rc;
}

void optim_free(optim_t *o)
{
    if (!o)
        return;
    free(o->m);
    free(o->v);
    free(o);
}

const optim_cfg_t *optim_config(const optim_t *o)
{
    return &o->cfg;
}

double optim_lr(const optim_cfg_t *cfg, int64_t step)
{
    if (!cfg)
        return 0.0;
    if (step < 0)
        step = 0;
    if (cfg->schedule != SCHED_COSINE)
        return cfg->lr;
    if (step < cfg->warmup_steps)
        return cfg->lr * (double)(step + 1) / (double)cfg->warmup_steps;
    int64_t span = cfg->total_steps - cfg->warmup_steps;
    if (span < 1)
        span = 1;
    double progress = (double)(step - cfg->warmup_steps) / (double)span;
    if (progress < 0.0)
        progress = 0.0;
    if (progress > 1.0)
        progress = 1.0;
    return cfg->min_lr +
           0.5 * (cfg->lr - cfg->min_lr) * (1.0 + cos(M_PI * progress));
}

/* One SGD update over all parameters. */
static void step_sgd(optim_t *o, float *p, const float *grad, double lr)
{
    const size_t n = o->n;
    const float flr = (float)lr;
    const float mu = (float)o->cfg.momentum;
    const float wd = (float)o->cfg.weight_decay; /* wd * p is 0 when wd = 0 */
    float *buf = o->m;
    if (o->updates == 0) {
        for (size_t i = 0; i < n; i++) {
            float g = grad[i] + wd * p[i];
            buf[i] = g;
            p[i] = p[i] - flr * g;
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            float b = mu * buf[i] + (grad[i] + wd * p[i]);
            buf[i] = b;
            p[i] = p[i] - flr * b;
        }
    }
}

/* One Adam or AdamW update over all parameters. */
static void step_adam(optim_t *o, float *p, const float *grad, double lr,
                      int64_t step)
{
    const size_t n = o->n;
    const double t = (double)step + 1.0;
    const double bc1 = 1.0 - pow(o->cfg.beta1, t);
    const double bc2 = 1.0 - pow(o->cfg.beta2, t);
    const float b1 = (float)o->cfg.beta1, c1 = (float)(1.0 - o->cfg.beta1);
    const float b2 = (float)o->cfg.beta2, c2 = (float)(1.0 - o->cfg.beta2);
    const float eps = (float)o->cfg.eps;
    const float ss = (float)(lr / bc1);
    const float rs = (float)(1.0 / sqrt(bc2));
    /* Branch-free decay: AdamW scales p by shrink (exactly 1 otherwise),
     * Adam adds l2 * p to g (l2 is exactly 0 otherwise). */
    const int adamw = o->cfg.kind == OPT_ADAMW;
    const float shrink = adamw ? (float)(1.0 - lr * o->cfg.weight_decay) : 1.0f;
    const float l2 = adamw ? 0.0f : (float)o->cfg.weight_decay;
    float *m = o->m, *v = o->v;

    size_t i = 0;
#if defined(__SSE2__)
    /* Four lanes at a time with the same operations in the same order as
     * the scalar loop below; IEEE add, mul, div and sqrt are correctly
     * rounded, so each element gets bit-identical results either way. */
    const __m128 v_shrink = _mm_set1_ps(shrink), v_l2 = _mm_set1_ps(l2);
    const __m128 v_b1 = _mm_set1_ps(b1), v_c1 = _mm_set1_ps(c1);
    const __m128 v_b2 = _mm_set1_ps(b2), v_c2 = _mm_set1_ps(c2);
    const __m128 v_rs = _mm_set1_ps(rs), v_eps = _mm_set1_ps(eps);
    const __m128 v_ss = _mm_set1_ps(ss);
    for (; i + 4 <= n; i += 4) {
        __m128 w = _mm_mul_ps(_mm_loadu_ps(p + i), v_shrink);
        __m128 g = _mm_add_ps(_mm_loadu_ps(grad + i), _mm_mul_ps(v_l2, w));
        __m128 mi = _mm_add_ps(_mm_mul_ps(v_b1, _mm_loadu_ps(m + i)),
                               _mm_mul_ps(v_c1, g));
        __m128 vi = _mm_add_ps(_mm_mul_ps(v_b2, _mm_loadu_ps(v + i)),
                               _mm_mul_ps(v_c2, _mm_mul_ps(g, g)));
        _mm_storeu_ps(m + i, mi);
        _mm_storeu_ps(v + i, vi);
        __m128 den = _mm_add_ps(_mm_mul_ps(_mm_sqrt_ps(vi), v_rs), v_eps);
        _mm_storeu_ps(p + i,
                      _mm_sub_ps(w, _mm_mul_ps(v_ss, _mm_div_ps(mi, den))));
    }
#endif
    for (; i < n; i++) {
        float w = p[i] * shrink;
        float g = grad[i] + l2 * w;
        float mi = b1 * m[i] + c1 * g;
        float vi = b2 * v[i] + c2 * (g * g);
        m[i] = mi;
        v[i] = vi;
        p[i] = w - ss * (mi / (sqrtf(vi) * rs + eps));
    }
}

int optim_step(optim_t *o, float *params, const float *grad, int64_t step)
{
    if (!o || !params || !grad || step < 0)
        return -1;
    double lr = optim_lr(&o->cfg, step);
    if (o->cfg.kind == OPT_SGD)
        step_sgd(o, params, grad, lr);
    else
        step_adam(o, params, grad, lr, step);
    o->updates++;
    return 0;
}

float *optim_state_m(optim_t *o)
{
    return o ? o->m : NULL;
}

float *optim_state_v(optim_t *o)
{
    return o ? o->v : NULL;
}

int64_t optim_updates(const optim_t *o)
{
    return o ? o->updates : 0;
}

void optim_set_updates(optim_t *o, int64_t n)
{
    if (o && n >= 0)
        o->updates = n;
}

const char *optim_kind_name(optim_kind_t k)
{
    switch (k) {
    case OPT_SGD:
        return "sgd";
    case OPT_ADAM:
        return "adam";
    case OPT_ADAMW:
        return "adamw";
    }
    return "unknown";
}

int optim_kind_parse(const char *s)
{
    if (!s)
        return -1;
    if (strcmp(s, "sgd") == 0)
        return OPT_SGD;
    if (strcmp(s, "adam") == 0)
        return OPT_ADAM;
    if (strcmp(s, "adamw") == 0)
        return OPT_ADAMW;
    return -1;
}

const char *optim_sched_name(sched_kind_t s)
{
    switch (s) {
    case SCHED_CONSTANT:
        return "constant";
    case SCHED_COSINE:
        return "cosine";
    }
    return "unknown";
}

int optim_sched_parse(const char *s)
{
    if (!s)
        return -1;
    if (strcmp(s, "constant") == 0)
        return SCHED_CONSTANT;
    if (strcmp(s, "cosine") == 0)
        return SCHED_COSINE;
    return -1;
}

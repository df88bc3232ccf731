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

#include "ftrain/util.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

struct optim {
    optim_cfg_t cfg;
    size_t nparams;
    float *moment1;  /* SGD's momentum buffer, or Adam's first moment */
    float *moment2;  /* Adam's second moment; NULL for SGD */
    int64_t updates;
};

static const util_name_t optim_kinds[] = {
    {"sgd", OPT_SGD}, {"adam", OPT_ADAM}, {"adamw", OPT_ADAMW},
};

static const util_name_t optim_scheds[] = {
    {"constant", SCHED_CONSTANT}, {"cosine", SCHED_COSINE},
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

/* Return 1 when value is finite and low <= value < high. */
static int in_range(double value, double low, double high)
{
    return isfinite(value) && value >= low && value < high;
}

/* The fields every optimizer reads.  @return OPTIM_OK or OPTIM_EINVAL with
 * err naming the field. */
static int check_common(const optim_cfg_t *cfg, char *err, size_t cap)
{
    if (!util_name_of(optim_kinds, UTIL_COUNT(optim_kinds), (int)cfg->kind, NULL))
        return util_fail(err, cap, OPTIM_EINVAL, "optimizer: unknown kind %d",
                         (int)cfg->kind);
    if (!isfinite(cfg->lr) || cfg->lr <= 0.0)
        return util_fail(err, cap, OPTIM_EINVAL,
                         "optimizer: learning rate %g: must be finite and above 0", cfg->lr);
    if (!isfinite(cfg->weight_decay) || cfg->weight_decay < 0.0)
        return util_fail(err, cap, OPTIM_EINVAL,
                         "optimizer: weight decay %g: must be finite and at least 0",
                         cfg->weight_decay);
    return OPTIM_OK;
}

/* The fields of cfg's own optimizer and schedule.  @return OPTIM_OK or
 * OPTIM_EINVAL with err naming the field. */
static int check_kind_and_schedule(const optim_cfg_t *cfg, char *err, size_t cap)
{
    if (cfg->kind == OPT_SGD && !in_range(cfg->momentum, 0.0, 1.0))
        return util_fail(err, cap, OPTIM_EINVAL,
                         "optimizer: sgd momentum %g: must be in [0, 1)", cfg->momentum);
    if (cfg->kind != OPT_SGD &&
        (!in_range(cfg->beta1, 0.0, 1.0) || !in_range(cfg->beta2, 0.0, 1.0)))
        return util_fail(err, cap, OPTIM_EINVAL,
                         "optimizer: %s betas %g, %g: each must be in [0, 1)",
                         optim_kind_name(cfg->kind), cfg->beta1, cfg->beta2);
    if (cfg->kind != OPT_SGD && (!isfinite(cfg->eps) || cfg->eps <= 0.0))
        return util_fail(err, cap, OPTIM_EINVAL,
                         "optimizer: %s eps %g: must be finite and above 0",
                         optim_kind_name(cfg->kind), cfg->eps);
    if (cfg->schedule == SCHED_CONSTANT)
        return OPTIM_OK;
    if (cfg->schedule != SCHED_COSINE)
        return util_fail(err, cap, OPTIM_EINVAL, "optimizer: unknown schedule %d",
                         (int)cfg->schedule);
    if (cfg->warmup_steps < 0 || cfg->total_steps < 0)
        return util_fail(err, cap, OPTIM_EINVAL,
                         "optimizer: cosine warm-up %lld and total %lld steps: "
                         "neither may be negative",
                         (long long)cfg->warmup_steps, (long long)cfg->total_steps);
    if (!isfinite(cfg->min_lr) || cfg->min_lr < 0.0 || cfg->min_lr > cfg->lr)
        return util_fail(err, cap, OPTIM_EINVAL,
                         "optimizer: cosine final learning rate %g: must be in [0, %g], "
                         "the learning rate", cfg->min_lr, cfg->lr);
    return OPTIM_OK;
}

int optim_init(optim_t **out, const optim_cfg_t *cfg, size_t nparams, char *err,
               size_t cap)
{
    if (out)
        *out = NULL;
    if (!out || !cfg)
        return util_fail(err, cap, OPTIM_EINVAL, "optimizer: no %s given",
                         out ? "configuration" : "place for the result");
    int rc = check_common(cfg, err, cap);
    if (rc == OPTIM_OK)
        rc = check_kind_and_schedule(cfg, err, cap);
    if (rc != OPTIM_OK)
        return rc;
    if (nparams == 0 || nparams > SIZE_MAX / sizeof(float))
        return util_fail(err, cap, OPTIM_EINVAL, "optimizer: %zu parameters: out of range",
                         nparams);

    optim_t *opt = calloc(1, sizeof(*opt));
    if (!opt)
        return util_fail(err, cap, OPTIM_ENOMEM, "optimizer: out of memory");
    opt->cfg = *cfg;
    opt->nparams = nparams;
    opt->moment1 = util_calloc_pages(nparams, sizeof(float));
    if (opt->moment1 && cfg->kind != OPT_SGD)
        opt->moment2 = util_calloc_pages(nparams, sizeof(float));
    if (!opt->moment1 || (cfg->kind != OPT_SGD && !opt->moment2)) {
        optim_free(opt);
        return util_fail(err, cap, OPTIM_ENOMEM,
                         "optimizer: out of memory for the %s state of %zu parameters",
                         optim_kind_name(cfg->kind), nparams);
    }
    *out = opt;
    return OPTIM_OK;
}

void optim_free(optim_t *opt)
{
    if (!opt)
        return;
    free(opt->moment1);
    free(opt->moment2);
    free(opt);
}

const optim_cfg_t *optim_config(const optim_t *opt)
{
    return &opt->cfg;
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
static void step_sgd(optim_t *opt, float *params, const float *grad, double lr)
{
    const size_t nparams = opt->nparams;
    const float flr = (float)lr;
    const float mu = (float)opt->cfg.momentum;
    const float wd = (float)opt->cfg.weight_decay; /* wd * p is 0 when wd = 0 */
    float *buf = opt->moment1;
    if (opt->updates == 0) {
        for (size_t i = 0; i < nparams; i++) {
            float g = grad[i] + wd * params[i];
            buf[i] = g;
            params[i] = params[i] - flr * g;
        }
    } else {
        for (size_t i = 0; i < nparams; i++) {
            float b = mu * buf[i] + (grad[i] + wd * params[i]);
            buf[i] = b;
            params[i] = params[i] - flr * b;
        }
    }
}

/* One Adam or AdamW update over all parameters. */
static void step_adam(optim_t *opt, float *params, const float *grad, double lr,
                      int64_t step)
{
    const size_t nparams = opt->nparams;
    const double updates = (double)step + 1.0; /* t of the formulas above */
    const double bc1 = 1.0 - pow(opt->cfg.beta1, updates);
    const double bc2 = 1.0 - pow(opt->cfg.beta2, updates);
    const float b1 = (float)opt->cfg.beta1, c1 = (float)(1.0 - opt->cfg.beta1);
    const float b2 = (float)opt->cfg.beta2, c2 = (float)(1.0 - opt->cfg.beta2);
    const float eps = (float)opt->cfg.eps;
    const float ss = (float)(lr / bc1);
    const float rs = (float)(1.0 / sqrt(bc2));
    /* Branch-free decay: AdamW scales p by shrink (exactly 1 otherwise),
     * Adam adds l2 * p to g (l2 is exactly 0 otherwise). */
    const int adamw = opt->cfg.kind == OPT_ADAMW;
    const float shrink = adamw ? (float)(1.0 - lr * opt->cfg.weight_decay) : 1.0f;
    const float l2 = adamw ? 0.0f : (float)opt->cfg.weight_decay;
    float *moment1 = opt->moment1, *moment2 = opt->moment2;

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
    for (; i + 4 <= nparams; i += 4) {
        __m128 w = _mm_mul_ps(_mm_loadu_ps(params + i), v_shrink);
        __m128 g = _mm_add_ps(_mm_loadu_ps(grad + i), _mm_mul_ps(v_l2, w));
        __m128 mi = _mm_add_ps(_mm_mul_ps(v_b1, _mm_loadu_ps(moment1 + i)),
                               _mm_mul_ps(v_c1, g));
        __m128 vi = _mm_add_ps(_mm_mul_ps(v_b2, _mm_loadu_ps(moment2 + i)),
                               _mm_mul_ps(v_c2, _mm_mul_ps(g, g)));
        _mm_storeu_ps(moment1 + i, mi);
        _mm_storeu_ps(moment2 + i, vi);
        __m128 den = _mm_add_ps(_mm_mul_ps(_mm_sqrt_ps(vi), v_rs), v_eps);
        _mm_storeu_ps(params + i,
                      _mm_sub_ps(w, _mm_mul_ps(v_ss, _mm_div_ps(mi, den))));
    }
#endif
    for (; i < nparams; i++) {
        float w = params[i] * shrink;
        float g = grad[i] + l2 * w;
        float mi = b1 * moment1[i] + c1 * g;
        float vi = b2 * moment2[i] + c2 * (g * g);
        moment1[i] = mi;
        moment2[i] = vi;
        params[i] = w - ss * (mi / (sqrtf(vi) * rs + eps));
    }
}

int optim_step(optim_t *opt, float *params, const float *grad, int64_t step)
{
    if (!opt || !params || !grad || step < 0)
        return OPTIM_EINVAL;
    double lr = optim_lr(&opt->cfg, step);
    if (opt->cfg.kind == OPT_SGD)
        step_sgd(opt, params, grad, lr);
    else
        step_adam(opt, params, grad, lr, step);
    opt->updates++;
    return OPTIM_OK;
}

float *optim_state_m(optim_t *opt)
{
    return opt ? opt->moment1 : NULL;
}

float *optim_state_v(optim_t *opt)
{
    return opt ? opt->moment2 : NULL;
}

int64_t optim_updates(const optim_t *opt)
{
    return opt ? opt->updates : 0;
}

void optim_set_updates(optim_t *opt, int64_t updates)
{
    if (opt && updates >= 0)
        opt->updates = updates;
}

/* optim_kind_name(), optim_kind_parse(), optim_kind_names() and the same
 * three of optim_sched. */
UTIL_NAME_FUNCTIONS(optim_kind, optim_kind_t, optim_kinds)
UTIL_NAME_FUNCTIONS(optim_sched, sched_kind_t, optim_scheds)

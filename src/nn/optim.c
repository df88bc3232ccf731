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
 * grad is the caller's gradient times grad_scale (optim_step_consume; 1 for
 * optim_step), one float multiply per element before the formulas.
 *
 * Scalars (lr_s, betas, eps, wd and the bias-correction factors) are rounded
 * to float once per step, so every element sees the same constants and the
 * update is a pure function of (params, grad, state, step).  The SSE and AVX
 * loops do each element's operations in the scalar order, with no fused
 * multiply-add, so the bits do not depend on the path the CPU takes.
 */
#include "nn/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
/* The AVX path is compiled by function attribute and chosen at run time,
 * so the build needs no -mavx and runs on any x86-64. */
#if defined(__GNUC__) && defined(__x86_64__)
#define OPTIM_AVX 1
#include <immintrin.h>
#else
#define OPTIM_AVX 0
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

/* The arrays of one update.  zero is NULL, or grad itself, which the update
 * then leaves all zeros (optim_step_consume): a store to a line that the
 * update has just read costs less than a clearing pass of its own. */
typedef struct {
    float *params, *moment1, *moment2;
    const float *grad;
    float *zero;
} optim_arrays_t;

/* One SGD update over all parameters, with the gradient grad * gs. */
static void step_sgd(optim_t *opt, const optim_arrays_t *a, float gs, double lr)
{
    const size_t nparams = opt->nparams;
    const float flr = (float)lr;
    const float mu = (float)opt->cfg.momentum;
    const float wd = (float)opt->cfg.weight_decay; /* wd * p is 0 when wd = 0 */
    const int first = opt->updates == 0;
    float *params = a->params, *buf = a->moment1;
    for (size_t i = 0; i < nparams; i++) {
        float g = a->grad[i] * gs + wd * params[i];
        float b = first ? g : mu * buf[i] + g;
        buf[i] = b;
        params[i] = params[i] - flr * b;
        if (a->zero)
            a->zero[i] = 0.0f;
    }
}

/* The per-element constants of one Adam or AdamW update, as floats: every
 * element and every code path below uses these. */
typedef struct {
    float gs;          /* gradient scale: g = grad * gs (1: as given) */
    float shrink, l2;  /* AdamW's p * shrink (exactly 1 for Adam), Adam's
                          l2 * p (exactly 0 for AdamW): a branch-free decay */
    float b1, c1, b2, c2, eps, ss, rs;
} adam_k_t;

/* Elements [from, to) one at a time: the reference that the vector paths
 * match bit for bit. */
static void adam_scalar(const adam_k_t *k, const optim_arrays_t *a, size_t from, size_t to)
{
    float *params = a->params, *moment1 = a->moment1, *moment2 = a->moment2;
    for (size_t i = from; i < to; i++) {
        float w = params[i] * k->shrink;
        float g = a->grad[i] * k->gs + k->l2 * w;
        float mi = k->b1 * moment1[i] + k->c1 * g;
        float vi = k->b2 * moment2[i] + k->c2 * (g * g);
        moment1[i] = mi;
        moment2[i] = vi;
        params[i] = w - k->ss * (mi / (sqrtf(vi) * k->rs + k->eps));
        if (a->zero)
            a->zero[i] = 0.0f;
    }
}

#if defined(__SSE2__)
/* Four lanes at a time from `from` while four are left; @return where it
 * stopped.  The operations of adam_scalar in its order: IEEE add, mul, div
 * and sqrt are correctly rounded, so every lane gets the scalar bits. */
static size_t adam_sse(const adam_k_t *k, const optim_arrays_t *a, size_t from, size_t to)
{
    const __m128 gs = _mm_set1_ps(k->gs), shrink = _mm_set1_ps(k->shrink);
    const __m128 l2 = _mm_set1_ps(k->l2), b1 = _mm_set1_ps(k->b1), c1 = _mm_set1_ps(k->c1);
    const __m128 b2 = _mm_set1_ps(k->b2), c2 = _mm_set1_ps(k->c2);
    const __m128 rs = _mm_set1_ps(k->rs), eps = _mm_set1_ps(k->eps), ss = _mm_set1_ps(k->ss);
    float *params = a->params, *moment1 = a->moment1, *moment2 = a->moment2;
    size_t i = from;
    for (; i + 4 <= to; i += 4) {
        __m128 w = _mm_mul_ps(_mm_loadu_ps(params + i), shrink);
        __m128 g = _mm_add_ps(_mm_mul_ps(_mm_loadu_ps(a->grad + i), gs), _mm_mul_ps(l2, w));
        __m128 mi = _mm_add_ps(_mm_mul_ps(b1, _mm_loadu_ps(moment1 + i)), _mm_mul_ps(c1, g));
        __m128 vi = _mm_add_ps(_mm_mul_ps(b2, _mm_loadu_ps(moment2 + i)),
                               _mm_mul_ps(c2, _mm_mul_ps(g, g)));
        _mm_storeu_ps(moment1 + i, mi);
        _mm_storeu_ps(moment2 + i, vi);
        __m128 den = _mm_add_ps(_mm_mul_ps(_mm_sqrt_ps(vi), rs), eps);
        _mm_storeu_ps(params + i, _mm_sub_ps(w, _mm_mul_ps(ss, _mm_div_ps(mi, den))));
        if (a->zero)
            _mm_storeu_ps(a->zero + i, _mm_setzero_ps());
    }
    return i;
}
#endif

#if OPTIM_AVX
/* adam_sse on eight lanes, for CPUs with AVX (asked at run time): the
 * vector square roots and divisions, which bound this loop, do twice the
 * work per instruction.  Built for AVX alone, without FMA, whose fused
 * multiply-add would round once where the scalar code rounds twice. */
__attribute__((target("avx"))) static size_t adam_avx(const adam_k_t *k, const optim_arrays_t *a,
                                                      size_t from, size_t to)
{
    const __m256 gs = _mm256_set1_ps(k->gs), shrink = _mm256_set1_ps(k->shrink);
    const __m256 l2 = _mm256_set1_ps(k->l2), b1 = _mm256_set1_ps(k->b1);
    const __m256 c1 = _mm256_set1_ps(k->c1), b2 = _mm256_set1_ps(k->b2);
    const __m256 c2 = _mm256_set1_ps(k->c2), rs = _mm256_set1_ps(k->rs);
    const __m256 eps = _mm256_set1_ps(k->eps), ss = _mm256_set1_ps(k->ss);
    float *params = a->params, *moment1 = a->moment1, *moment2 = a->moment2;
    size_t i = from;
    for (; i + 8 <= to; i += 8) {
        __m256 w = _mm256_mul_ps(_mm256_loadu_ps(params + i), shrink);
        __m256 g = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(a->grad + i), gs),
                                 _mm256_mul_ps(l2, w));
        __m256 mi = _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(moment1 + i)),
                                  _mm256_mul_ps(c1, g));
        __m256 vi = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(moment2 + i)),
                                  _mm256_mul_ps(c2, _mm256_mul_ps(g, g)));
        _mm256_storeu_ps(moment1 + i, mi);
        _mm256_storeu_ps(moment2 + i, vi);
        __m256 den = _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(vi), rs), eps);
        _mm256_storeu_ps(params + i,
                         _mm256_sub_ps(w, _mm256_mul_ps(ss, _mm256_div_ps(mi, den))));
        if (a->zero)
            _mm256_storeu_ps(a->zero + i, _mm256_setzero_ps());
    }
    return i;
}
#endif

/* One Adam or AdamW update over all parameters, with the gradient grad * gs:
 * eight lanes where the CPU has AVX, then four, then one at a time. */
static void step_adam(optim_t *opt, const optim_arrays_t *a, float gs, double lr, int64_t step)
{
    const optim_cfg_t *cfg = &opt->cfg;
    const double updates = (double)step + 1.0; /* t of the formulas above */
    const double bc1 = 1.0 - pow(cfg->beta1, updates);
    const double bc2 = 1.0 - pow(cfg->beta2, updates);
    const int adamw = cfg->kind == OPT_ADAMW;
    const adam_k_t k = {
        .gs = gs,
        .shrink = adamw ? (float)(1.0 - lr * cfg->weight_decay) : 1.0f,
        .l2 = adamw ? 0.0f : (float)cfg->weight_decay,
        .b1 = (float)cfg->beta1, .c1 = (float)(1.0 - cfg->beta1),
        .b2 = (float)cfg->beta2, .c2 = (float)(1.0 - cfg->beta2),
        .eps = (float)cfg->eps, .ss = (float)(lr / bc1), .rs = (float)(1.0 / sqrt(bc2)),
    };
    const size_t n = opt->nparams;
    size_t i = 0;
#if OPTIM_AVX
    if (__builtin_cpu_supports("avx"))
        i = adam_avx(&k, a, i, n);
#endif
#if defined(__SSE2__)
    i = adam_sse(&k, a, i, n);
#endif
    adam_scalar(&k, a, i, n);
}

/* Update number `step` from the gradient grad * gs; zero as optim_arrays_t. */
static int step_any(optim_t *opt, float *params, const float *grad, float *zero, float gs,
                    int64_t step)
{
    if (!opt || !params || !grad || step < 0)
        return OPTIM_EINVAL;
    const optim_arrays_t arrays = {params, opt->moment1, opt->moment2, grad, zero};
    double lr = optim_lr(&opt->cfg, step);
    if (opt->cfg.kind == OPT_SGD)
        step_sgd(opt, &arrays, gs, lr);
    else
        step_adam(opt, &arrays, gs, lr, step);
    opt->updates++;
    return OPTIM_OK;
}

int optim_step(optim_t *opt, float *params, const float *grad, int64_t step)
{
    return step_any(opt, params, grad, NULL, 1.0f, step);
}

int optim_step_consume(optim_t *opt, float *params, float *grad, float grad_scale,
                       int64_t step)
{
    return step_any(opt, params, grad, grad, grad_scale, step);
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

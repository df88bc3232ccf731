/*
 * optim_step.c - checks the optimizers of optim.h against the update rules
 * written out here in double (PyTorch's torch.optim conventions), the
 * learning-rate schedules at chosen steps, the name tables, the state
 * accessors and the rejection of bad configurations.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nn/optim.h"
#include "tap.h"

#define NP 7 /* not a multiple of 4: vector and scalar paths both run */
#define STEPS 3

static const float p0[NP] = {0.5f, -1.25f, 2.0f, 0.0f, -0.375f, 3.5f, 1e-3f};
static const float grads[STEPS][NP] = {
    {0.1f, -0.2f, 0.3f, 1.5f, -0.05f, 0.0f, 2.0f},
    {-0.4f, 0.25f, 0.3f, -1.0f, 0.5f, 0.125f, -2.0f},
    {0.2f, 0.2f, -0.6f, 0.75f, 0.0f, -0.25f, 1.0f},
};

/* Largest relative difference of float results against doubles, each
 * relative to scale[i]: the sum of the magnitudes of the terms that made the
 * value, since a near-cancellation (m after g changes sign) keeps only the
 * absolute accuracy of its terms, which float cannot improve on. */
static double rel_err(const float *got, const double *want,
                      const double *scale, int n)
{
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]) /
                   fmax(1e-12, fmax(scale[i], fabs(want[i])));
        worst = fmax(worst, d);
    }
    return worst;
}

/* Run STEPS updates with cfg and compare params and state with the double
 * reference after each one. */
static void check_optimizer(const optim_cfg_t *cfg, const char *what)
{
    optim_t *o = NULL;
    float p[NP];
    double pd[NP], md[NP] = {0}, vd[NP] = {0};
    double ps[NP], ms[NP], vs[NP];
    int rc = optim_init(&o, cfg, NP, NULL, 0);
    is_int(rc, OPTIM_OK, "%s: init", what);
    if (rc)
        return;
    memcpy(p, p0, sizeof(p));
    for (int i = 0; i < NP; i++)
        pd[i] = p0[i];
    double worst_p = 0, worst_m = 0, worst_v = 0;
    for (int s = 0; s < STEPS; s++) {
        double lr = optim_lr(cfg, s), t = s + 1;
        for (int i = 0; i < NP; i++) {
            double g = grads[s][i];
            if (cfg->kind == OPT_SGD) {
                g += cfg->weight_decay * pd[i];
                ms[i] = s == 0 ? fabs(g)
                               : cfg->momentum * fabs(md[i]) + fabs(g);
                md[i] = s == 0 ? g : cfg->momentum * md[i] + g;
                ps[i] = fabs(pd[i]) + fabs(lr * md[i]);
                pd[i] -= lr * md[i];
            } else {
                if (cfg->kind == OPT_ADAMW)
                    pd[i] *= 1 - lr * cfg->weight_decay;
                else
                    g += cfg->weight_decay * pd[i];
                ms[i] = cfg->beta1 * fabs(md[i]) + (1 - cfg->beta1) * fabs(g);
                md[i] = cfg->beta1 * md[i] + (1 - cfg->beta1) * g;
                vd[i] = cfg->beta2 * vd[i] + (1 - cfg->beta2) * g * g;
                vs[i] = vd[i];
                double mhat = md[i] / (1 - pow(cfg->beta1, t));
                double vhat = vd[i] / (1 - pow(cfg->beta2, t));
                double upd = lr * mhat / (sqrt(vhat) + cfg->eps);
                ps[i] = fabs(pd[i]) + fabs(upd);
                pd[i] -= upd;
            }
        }
        optim_step(o, p, grads[s], s);
        worst_p = fmax(worst_p, rel_err(p, pd, ps, NP));
        worst_m = fmax(worst_m, rel_err(optim_state_m(o), md, ms, NP));
        if (cfg->kind != OPT_SGD)
            worst_v = fmax(worst_v, rel_err(optim_state_v(o), vd, vs, NP));
    }
    ok(worst_p < 1e-6, "%s: parameters after %d steps match (rel err %.2g)",
       what, STEPS, worst_p);
    ok(worst_m < 1e-6 && worst_v < 1e-6,
       "%s: optimizer state matches (rel err m %.2g, v %.2g)", what, worst_m,
       worst_v);
    is_int(optim_updates(o), STEPS, "%s: updates counted", what);
    if (cfg->kind == OPT_SGD)
        ok(optim_state_v(o) == NULL, "%s: no second moment", what);
    else
        ok(optim_state_v(o) != NULL, "%s: second moment present", what);
    optim_free(o);
}

static void test_optimizers(void)
{
    optim_cfg_t c;
    optim_cfg_default(&c);
    c.kind = OPT_SGD;
    c.lr = 0.1;
    c.momentum = 0.9;
    check_optimizer(&c, "sgd momentum");
    c.weight_decay = 0.05;
    check_optimizer(&c, "sgd momentum + weight decay");

    optim_cfg_default(&c);
    c.lr = 0.01;
    check_optimizer(&c, "adam");
    c.weight_decay = 0.1;
    check_optimizer(&c, "adam + L2 decay");
    c.kind = OPT_ADAMW;
    c.weight_decay = 0.1;
    c.beta1 = 0.8;
    c.beta2 = 0.99;
    c.eps = 1e-6;
    check_optimizer(&c, "adamw");
    c.schedule = SCHED_COSINE;
    c.warmup_steps = 2;
    c.total_steps = 5;
    c.min_lr = 1e-3;
    check_optimizer(&c, "adamw with warm-up and cosine");

    /* Same inputs in every slot give bit-identical outputs everywhere, so
     * no element depends on its position (vector lanes versus tail). */
    optim_t *o = NULL;
    optim_cfg_default(&c);
    c.weight_decay = 0.01;
    float p[NP], g[NP];
    for (int i = 0; i < NP; i++) {
        p[i] = 0.7f;
        g[i] = -0.3f;
    }
    optim_init(&o, &c, NP, NULL, 0);
    int same = o != NULL;
    for (int s = 0; o && s < 3; s++) {
        optim_step(o, p, g, s);
        for (int i = 1; i < NP; i++)
            same &= memcmp(&p[i], &p[0], sizeof(float)) == 0 &&
                    optim_state_v(o)[i] == optim_state_v(o)[0];
    }
    ok(same, "adam: every element position gets identical results");
    optim_free(o);

    /* SGD's first update sets the buffer to g; a restored count keeps the
     * momentum path after resume. */
    optim_cfg_default(&c);
    c.kind = OPT_SGD;
    c.lr = 0.5;
    c.momentum = 0.9;
    optim_init(&o, &c, NP, NULL, 0);
    if (o) {
        float q[NP] = {0};
        for (int i = 0; i < NP; i++)
            optim_state_m(o)[i] = 10.0f;
        optim_set_updates(o, 4);
        optim_step(o, q, grads[0], 4);
        is_double(optim_state_m(o)[0], 0.9f * 10.0f + grads[0][0], 1e-6,
                  "sgd: restored update count keeps the momentum buffer");
        is_int(optim_updates(o), 5, "sgd: count continues after restore");
    } else {
        ok(0, "sgd restore: init");
        ok(0, "sgd restore: init");
    }
    optim_free(o);
}

/* WIDE elements take every path of the update: 8 lanes (where the CPU has
 * AVX) for the first 32, 4 lanes for the next 4, one at a time for the
 * last.  Each element must get the bits that a one-element optimizer (only
 * the one-at-a-time path) gives it, and optim_step_consume(grad, s) the bits
 * of optim_step on grad already multiplied by s, leaving grad all zeros. */
#define WIDE 37

/* Three updates of n elements from the same start: p0 and grad vary by
 * element; with scale, optim_step_consume, else optim_step on grad * 0.125f
 * computed here.  The results go to p, m and v (v may be NULL for SGD).
 * @return 0 when init failed or a consumed gradient was not all zeros. */
static int run_wide(const optim_cfg_t *cfg, int first, int n, int scale, float *p, float *m,
                    float *v)
{
    optim_t *o = NULL;
    if (optim_init(&o, cfg, (size_t)n, NULL, 0) != OPTIM_OK)
        return 0;
    float g[WIDE], gs[WIDE];
    int zeroed = 1;
    for (int i = 0; i < n; i++)
        p[i] = 0.03f * (float)(first + i) - 0.5f;
    for (int s = 0; s < 3; s++) {
        for (int i = 0; i < n; i++) {
            g[i] = (float)((first + i) * 7 % 11 + s) * 0.37f - 1.9f;
            gs[i] = g[i] * 0.125f;
        }
        if (scale)
            optim_step_consume(o, p, g, 0.125f, s);
        else
            optim_step(o, p, gs, s);
        for (int i = 0; scale && i < n; i++)
            zeroed &= memcmp(&g[i], &(float){0.0f}, sizeof(float)) == 0;
    }
    memcpy(m, optim_state_m(o), (size_t)n * sizeof *m);
    if (v)
        memcpy(v, optim_state_v(o), (size_t)n * sizeof *v);
    optim_free(o);
    return zeroed;
}

static void check_wide(const optim_cfg_t *cfg, const char *what)
{
    float p[WIDE], m[WIDE], v[WIDE], p1[WIDE], m1[WIDE], v1[WIDE], ps[WIDE], ms[WIDE], vs[WIDE];
    float *vp = cfg->kind == OPT_SGD ? NULL : v, *vp1 = vp ? v1 : NULL, *vps = vp ? vs : NULL;
    int ran = run_wide(cfg, 0, WIDE, 0, p, m, vp) && run_wide(cfg, 0, WIDE, 1, ps, ms, vps);
    for (int i = 0; ran && i < WIDE; i++)
        ran = run_wide(cfg, i, 1, 0, p1 + i, m1 + i, vp1 ? vp1 + i : NULL);
    size_t bytes = WIDE * sizeof(float);
    ok(ran && !memcmp(p, p1, bytes) && !memcmp(m, m1, bytes) && (!vp || !memcmp(v, v1, bytes)),
       "%s: %d elements get the bits of one-element updates (every vector path)", what, WIDE);
    ok(ran && !memcmp(p, ps, bytes) && !memcmp(m, ms, bytes) && (!vp || !memcmp(v, vs, bytes)),
       "%s: optim_step_consume gives the bits of a gradient scaled first, and zeros", what);
}

static void test_paths_and_scale(void)
{
    optim_cfg_t c;
    optim_cfg_default(&c);
    c.weight_decay = 0.01;
    check_wide(&c, "adam + L2 decay");
    c.kind = OPT_ADAMW;
    check_wide(&c, "adamw");
    optim_cfg_default(&c);
    c.kind = OPT_SGD;
    c.momentum = 0.9;
    c.weight_decay = 0.05;
    check_wide(&c, "sgd momentum + weight decay");
}

static void test_schedules(void)
{
    optim_cfg_t c;
    optim_cfg_default(&c);
    c.lr = 0.1;
    is_double(optim_lr(&c, 0), 0.1, 0, "constant: step 0");
    is_double(optim_lr(&c, 123456), 0.1, 0, "constant: step 123456");
    c.warmup_steps = 10;
    is_double(optim_lr(&c, 0), 0.1, 0, "constant ignores warm-up");

    c.schedule = SCHED_COSINE;
    c.warmup_steps = 10;
    c.total_steps = 110;
    c.min_lr = 0.01;
    const double pi = acos(-1.0);
    is_double(optim_lr(&c, 0), 0.1 * 1 / 10, 1e-15, "warm-up: step 0 is lr/warmup");
    is_double(optim_lr(&c, 4), 0.1 * 5 / 10, 1e-15, "warm-up: step 4");
    is_double(optim_lr(&c, 9), 0.1, 1e-15, "warm-up: last step reaches lr");
    is_double(optim_lr(&c, 10), 0.1, 1e-15, "cosine: first decay step is lr");
    is_double(optim_lr(&c, 35),
              0.01 + 0.5 * 0.09 * (1 + cos(pi * 25 / 100.0)), 1e-15,
              "cosine: quarter way");
    is_double(optim_lr(&c, 60), 0.01 + 0.5 * 0.09, 1e-15, "cosine: half way");
    is_double(optim_lr(&c, 110), 0.01, 1e-15, "cosine: min_lr at total_steps");
    is_double(optim_lr(&c, 5000), 0.01, 1e-15, "cosine: min_lr after the end");
    is_double(optim_lr(&c, -3), optim_lr(&c, 0), 0, "negative step is step 0");
    c.warmup_steps = 0;
    c.total_steps = 100;
    is_double(optim_lr(&c, 0), 0.1, 1e-15, "cosine without warm-up starts at lr");
    is_double(optim_lr(&c, 50), 0.01 + 0.5 * 0.09, 1e-15,
              "cosine without warm-up: half way");
    c.warmup_steps = 20;
    c.total_steps = 10;
    is_double(optim_lr(&c, 25), 0.01, 1e-15,
              "warm-up longer than the horizon then min_lr");
}

static void test_names(void)
{
    for (int k = OPT_SGD; k <= OPT_ADAMW; k++)
        is_int(optim_kind_parse(optim_kind_name((optim_kind_t)k)), k,
               "optimizer %s round trip", optim_kind_name((optim_kind_t)k));
    for (int s = SCHED_CONSTANT; s <= SCHED_COSINE; s++)
        is_int(optim_sched_parse(optim_sched_name((sched_kind_t)s)), s,
               "schedule %s round trip", optim_sched_name((sched_kind_t)s));
    is_str(optim_kind_name(OPT_ADAMW), "adamw", "adamw name");
    is_str(optim_sched_name(SCHED_COSINE), "cosine", "cosine name");
    is_int(optim_kind_parse("rmsprop"), -1, "unknown optimizer is -1");
    is_int(optim_kind_parse(NULL), -1, "NULL optimizer is -1");
    is_int(optim_sched_parse("linear"), -1, "unknown schedule is -1");
    is_int(optim_sched_parse(""), -1, "empty schedule is -1");
    char names[64];
    is_str(optim_kind_names(names, sizeof names), "sgd, adam or adamw", "optimizer names");
    is_str(optim_sched_names(names, sizeof names), "constant or cosine", "schedule names");
}

static void test_bad_config(void)
{
    optim_cfg_t c;
    optim_t *o = (optim_t *)&c;
    optim_cfg_default(&c);
    is_int(optim_init(&o, &c, 10, NULL, 0), OPTIM_OK, "defaults are valid");
    optim_free(o);
    is_int(c.kind, OPT_ADAM, "default is adam");
    is_double(c.lr, 1e-3, 0, "default lr");
    is_double(c.beta2, 0.999, 0, "default beta2");

#define BAD(field, value, what)                                               \
    do {                                                                      \
        optim_cfg_default(&c);                                                \
        c.field = value;                                                      \
        o = (optim_t *)&c;                                                    \
        char err_[256] = "";                                                  \
        is_int(optim_init(&o, &c, 10, err_, sizeof err_), OPTIM_EINVAL,       \
               what " rejected");                                             \
        ok(o == NULL, what ": *out is NULL");                                 \
        ok(strncmp(err_, "optimizer: ", 11) == 0, what ": says why: %s", err_); \
    } while (0)
    BAD(lr, 0.0, "lr 0");
    BAD(lr, -1e-3, "negative lr");
    BAD(lr, NAN, "nan lr");
    BAD(lr, INFINITY, "infinite lr");
    BAD(beta1, 1.0, "beta1 1");
    BAD(beta1, -0.1, "negative beta1");
    BAD(beta2, 1.5, "beta2 1.5");
    BAD(beta2, NAN, "nan beta2");
    BAD(eps, 0.0, "eps 0");
    BAD(weight_decay, -0.01, "negative weight decay");
    BAD(weight_decay, NAN, "nan weight decay");
    BAD(kind, (optim_kind_t)9, "unknown optimizer");
    BAD(schedule, (sched_kind_t)5, "unknown schedule");
#undef BAD
    optim_cfg_default(&c);
    c.kind = OPT_SGD;
    c.momentum = 1.0;
    is_int(optim_init(&o, &c, 10, NULL, 0), OPTIM_EINVAL, "sgd momentum 1 rejected");
    c.momentum = -0.5;
    is_int(optim_init(&o, &c, 10, NULL, 0), OPTIM_EINVAL, "negative momentum rejected");
    optim_cfg_default(&c);
    c.schedule = SCHED_COSINE;
    c.warmup_steps = -1;
    is_int(optim_init(&o, &c, 10, NULL, 0), OPTIM_EINVAL, "negative warm-up rejected");
    c.warmup_steps = 0;
    c.min_lr = 1.0;
    is_int(optim_init(&o, &c, 10, NULL, 0), OPTIM_EINVAL, "min_lr above lr rejected");
    optim_cfg_default(&c);
    is_int(optim_init(&o, &c, 0, NULL, 0), OPTIM_EINVAL, "zero parameters rejected");
    is_int(optim_init(&o, NULL, 10, NULL, 0), OPTIM_EINVAL, "NULL config rejected");
    {
        char err[256] = "";
        optim_cfg_default(&c);
        c.lr = -2.0;
        optim_init(&o, &c, 10, err, sizeof err);
        ok(strstr(err, "learning rate -2") != NULL, "the message names the field: %s", err);
    }
    optim_free(NULL);
}

int main(void)
{
    test_optimizers();
    test_paths_and_scale();
    test_schedules();
    test_names();
    test_bad_config();
    return done_testing();
}

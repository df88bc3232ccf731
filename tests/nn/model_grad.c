/*
 * model_grad.c - checks the MLP of model.h: gradients against central finite
 * differences, accumulation into the caller's buffer, hand-computed losses,
 * evaluate against forward_backward, deterministic init, fingerprints, and
 * rejection of bad architectures and calls.
 *
 * The finite differences use a reference forward pass in double written here
 * from the formulas in model.h (its loss is first checked against the float
 * model's), with a small step so the differences are accurate to far better
 * than float.  Points where a ReLU pre-activation changes sign between the
 * two evaluations sit on a kink and are skipped.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/model.h"
#include "nn/rng.h"
#include "tap.h"

#define MAXW 64

/* Double reference: loss summed over n samples for params p; *kinks gets a
 * bit mask of the signs of all hidden pre-activations folded into a hash so
 * two calls can tell whether any ReLU switched side. */
static double ref_loss(const model_arch_t *a, const double *p, const float *x,
                       const int32_t *lab, const float *y, int n,
                       uint64_t *signs)
{
    double total = 0.0;
    uint64_t h = 1469598103934665603ULL;
    for (int s = 0; s < n; s++) {
        double cur[MAXW], nxt[MAXW];
        for (int j = 0; j < a->dims[0]; j++)
            cur[j] = x[s * a->dims[0] + j];
        size_t off = 0;
        for (int l = 0; l < a->nlayers; l++) {
            int din = a->dims[l], dout = a->dims[l + 1];
            const double *w = p + off, *b = p + off + (size_t)din * dout;
            for (int o = 0; o < dout; o++) {
                double z = b[o];
                for (int i = 0; i < din; i++)
                    z += w[o * din + i] * cur[i];
                if (l < a->nlayers - 1) {
                    h = (h ^ (uint64_t)(z > 0)) * 1099511628211ULL;
                    z = a->act == ACT_RELU ? (z > 0 ? z : 0) : tanh(z);
                }
                nxt[o] = z;
            }
            off += (size_t)din * dout + dout;
            memcpy(cur, nxt, sizeof(double) * dout);
        }
        int k = a->dims[a->nlayers];
        if (a->loss == LOSS_XENT) {
            double mx = cur[0], se = 0;
            for (int j = 1; j < k; j++)
                mx = cur[j] > mx ? cur[j] : mx;
            for (int j = 0; j < k; j++)
                se += exp(cur[j] - mx);
            total += mx + log(se) - cur[lab[s]];
        } else {
            double l = 0;
            for (int j = 0; j < k; j++) {
                double d = cur[j] - y[s * k + j];
                l += d * d;
            }
            total += l / k;
        }
    }
    if (signs)
        *signs = h;
    return total;
}

/* Random inputs and targets for n samples of arch a. */
static void make_data(const model_arch_t *a, uint64_t seed, int n, float *x,
                      int32_t *lab, float *y)
{
    rng_t r = rng_make(seed, 99);
    int k = a->dims[a->nlayers];
    for (int i = 0; i < n * a->dims[0]; i++)
        x[i] = (float)(2.0 * rng_uniform(&r) - 1.0);
    for (int i = 0; i < n; i++)
        lab[i] = (int32_t)rng_below(&r, (uint64_t)k);
    for (int i = 0; i < n * k; i++)
        y[i] = (float)(2.0 * rng_uniform(&r) - 1.0);
}

/* Gradient check of every parameter of one architecture. */
static void grad_check(const model_arch_t *a, const char *what)
{
    enum { N = 6 };
    model_t *m = NULL;
    float x[N * MAXW], y[N * MAXW];
    int32_t lab[N];
    if (model_init(&m, a, 7, N, NULL, 0) != MODEL_OK) {
        ok(0, "%s: init", what);
        return;
    }
    size_t np = model_num_params(m);
    float *pf = model_params(m);
    /* Non-zero biases so the check covers them meaningfully. */
    rng_t r = rng_make(3, 3);
    for (int l = 0; l < a->nlayers; l++) {
        size_t wo, bo;
        model_layer_offsets(a, l, &wo, &bo);
        for (int j = 0; j < a->dims[l + 1]; j++)
            pf[bo + j] = (float)(0.2 * rng_uniform(&r) - 0.1);
    }
    make_data(a, 11, N, x, lab, y);

    float *g = calloc(np, sizeof(float));
    double *pd = calloc(np, sizeof(double));
    double loss = 0;
    int rc = model_forward_backward(m, x, lab, y, N, g, &loss, NULL);
    for (size_t i = 0; i < np; i++)
        pd[i] = pf[i];
    double ref = ref_loss(a, pd, x, lab, y, N, NULL);
    ok(rc == MODEL_OK && fabs(loss - ref) <= 1e-5 * (1 + fabs(ref)),
       "%s: float loss %.7f matches double reference %.7f", what, loss, ref);

    const double eps = 1e-6;
    int bad = 0, skipped = 0;
    double worst = 0;
    for (size_t i = 0; i < np; i++) {
        double keep = pd[i];
        uint64_t s1, s2, s0;
        ref_loss(a, pd, x, lab, y, N, &s0);
        pd[i] = keep + eps;
        double lp = ref_loss(a, pd, x, lab, y, N, &s1);
        pd[i] = keep - eps;
        double lm = ref_loss(a, pd, x, lab, y, N, &s2);
        pd[i] = keep;
        if (s1 != s0 || s2 != s0) {
            skipped++;
            continue;
        }
        double fd = (lp - lm) / (2 * eps);
        double scale = fmax(1e-2, fmax(fabs(fd), fabs((double)g[i])));
        double err = fabs(fd - (double)g[i]) / scale;
        if (err > worst)
            worst = err;
        if (err >= 1e-2) {
            if (bad < 5)
                diag("%s: param %zu analytic %.8g numeric %.8g", what, i,
                     (double)g[i], fd);
            bad++;
        }
    }
    ok(bad == 0 && skipped * 4 < (int)np,
       "%s: %zu gradients match finite differences (worst rel err %.2g, "
       "%d on kinks skipped)",
       what, np - (size_t)skipped, worst, skipped);
    free(g);
    free(pd);
    model_free(m);
}

/* Largest |a - b| relative to 1 + max |b| over n floats. */
static double max_rel_diff(const float *a, const float *b, size_t n)
{
    double mx = 0, d = 0;
    for (size_t i = 0; i < n; i++)
        mx = fmax(mx, fabs((double)b[i]));
    for (size_t i = 0; i < n; i++)
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
    return d / (1e-6 + mx);
}

static void test_accumulate(void)
{
    enum { N = 10 };
    model_arch_t a = {.nlayers = 3, .dims = {5, 7, 4, 3},
                      .act = ACT_RELU, .loss = LOSS_XENT};
    float x[N * 5], y[N * 3];
    int32_t lab[N];
    model_t *m = NULL;
    make_data(&a, 21, N, x, lab, y);
    if (model_init(&m, &a, 5, N, NULL, 0) != MODEL_OK) {
        ok(0, "accumulate: init");
        return;
    }
    size_t np = model_num_params(m);
    float *g1 = calloc(np, 4), *g2 = calloc(np, 4), *gh = calloc(np, 4);
    float *gc = malloc(np * 4);
    double l1, l2, la, lb;
    int64_t c1, c2, ca, cb;

    model_forward_backward(m, x, lab, NULL, N, g1, &l1, &c1);
    model_forward_backward(m, x, lab, NULL, N, g2, &l2, &c2);
    model_forward_backward(m, x, lab, NULL, N, g2, &l2, &c2);
    float *twice = malloc(np * 4);
    for (size_t i = 0; i < np; i++)
        twice[i] = 2 * g1[i];
    ok(max_rel_diff(g2, twice, np) < 1e-6, "two calls add twice the gradient");
    ok(l1 == l2 && c1 == c2, "repeated call gives the same loss and hits");

    model_forward_backward(m, x, lab, NULL, N / 2, gh, &la, &ca);
    model_forward_backward(m, x + (N / 2) * 5, lab + N / 2, NULL, N - N / 2,
                           gh, &lb, &cb);
    ok(max_rel_diff(gh, g1, np) < 1e-5,
       "two half-batches sum to the full batch's gradient");
    is_double(la + lb, l1, 1e-5 * l1, "half-batch losses sum to the full loss");
    is_int(ca + cb, c1, "half-batch hits sum to the full hits");

    for (size_t i = 0; i < np; i++)
        gc[i] = 0.25f;
    model_forward_backward(m, x, lab, NULL, N, gc, &l2, NULL);
    for (size_t i = 0; i < np; i++)
        gc[i] -= 0.25f;
    ok(max_rel_diff(gc, g1, np) < 1e-5,
       "a non-zero gradient buffer is added to, not overwritten");

    /* The gradient is a sum, not a mean: one sample duplicated N times. */
    float xr[N * 5];
    int32_t lr[N];
    for (int i = 0; i < N; i++) {
        memcpy(xr + i * 5, x, 5 * sizeof(float));
        lr[i] = lab[0];
    }
    float *gs = calloc(np, 4), *gn = calloc(np, 4);
    model_forward_backward(m, xr, lr, NULL, 1, gs, &la, NULL);
    model_forward_backward(m, xr, lr, NULL, N, gn, &lb, NULL);
    for (size_t i = 0; i < np; i++)
        gs[i] *= N;
    ok(max_rel_diff(gn, gs, np) < 1e-5 && fabs(lb - N * la) < 1e-5 * lb,
       "gradient and loss are summed over samples");
    free(g1);
    free(g2);
    free(gh);
    free(gc);
    free(twice);
    free(gs);
    free(gn);
    model_free(m);
}

static void test_hand_loss(void)
{
    /* One linear layer 2 -> 3, W = [[1,0],[0,1],[1,1]], b = [0,0,-1]. */
    model_arch_t a = {.nlayers = 1, .dims = {2, 3}, .act = ACT_RELU,
                      .loss = LOSS_XENT};
    model_t *m = NULL;
    const float w[9] = {1, 0, 0, 1, 1, 1, 0, 0, -1};
    const float x[4] = {1, 2, -1, 0.5f};
    const int32_t lab[2] = {0, 1};
    if (model_init(&m, &a, 1, 4, NULL, 0) != MODEL_OK) {
        ok(0, "hand: init");
        return;
    }
    ok(model_num_params(m) == 9, "1-layer 2-3 model has 9 parameters");
    memcpy(model_params(m), w, sizeof(w));
    /* Sample 0 logits (1, 2, 2), label 0; sample 1 logits (-1, .5, -1.5),
     * label 1. */
    double e0 = log(exp(1.0) + 2 * exp(2.0)) - 1.0;
    double e1 = log(exp(-1.0) + exp(0.5) + exp(-1.5)) - 0.5;
    float g[9] = {0};
    double loss;
    int64_t hits;
    int rc = model_forward_backward(m, x, lab, NULL, 2, g, &loss, &hits);
    is_int(rc, MODEL_OK, "hand xent: call succeeds");
    is_double(loss, e0 + e1, 1e-6, "hand xent: loss is log-sum-exp minus z_y");
    is_int(hits, 1, "hand xent: ties go to the first max (sample 0 misses)");
    /* dL/db = sum of softmax - onehot; dL/dW = sum of delta x^T. */
    double s0 = exp(1.0) + 2 * exp(2.0);
    double s1 = exp(-1.0) + exp(0.5) + exp(-1.5);
    double d0[3] = {exp(1.0) / s0 - 1, exp(2.0) / s0, exp(2.0) / s0};
    double d1[3] = {exp(-1.0) / s1, exp(0.5) / s1 - 1, exp(-1.5) / s1};
    double maxerr = 0;
    for (int o = 0; o < 3; o++) {
        for (int i = 0; i < 2; i++) {
            double want = d0[o] * x[i] + d1[o] * x[2 + i];
            maxerr = fmax(maxerr, fabs(want - g[o * 2 + i]));
        }
        maxerr = fmax(maxerr, fabs(d0[o] + d1[o] - g[6 + o]));
    }
    ok(maxerr < 1e-6, "hand xent: gradient is softmax minus onehot times x");

    /* Large logits stay finite (stable log-sum-exp). */
    float big[9] = {1000, 0, 0, 1000, 1000, 1000, 0, 0, 0};
    memcpy(model_params(m), big, sizeof(big));
    float gb[9] = {0};
    model_forward_backward(m, x, lab, NULL, 1, gb, &loss, NULL);
    /* logits (1000, 2000, 3000), label 0: loss = 2000 + log(1+e^-1000+..) */
    ok(isfinite(loss) && fabs(loss - 2000.0) < 1e-3 && isfinite(gb[0]),
       "hand xent: logits of 1000s give a finite loss (%.3f)", loss);
    model_free(m);

    a.loss = LOSS_MSE;
    if (model_init(&m, &a, 1, 4, NULL, 0) != MODEL_OK) {
        ok(0, "hand mse: init");
        return;
    }
    memcpy(model_params(m), w, sizeof(w));
    /* Sample 0 predicts (1, 2, 2), sample 1 (-1, .5, -1.5). */
    const float t[6] = {0, 1, 3, -1.02f, 0.53f, -1.46f};
    float g2[9] = {0};
    rc = model_forward_backward(m, x, NULL, t, 2, g2, &loss, &hits);
    double el0 = (1.0 + 1.0 + 1.0) / 3;
    double el1 = 0;
    double e[2][3];
    for (int j = 0; j < 3; j++) {
        double p0[3] = {1, 2, 2}, p1[3] = {-1, 0.5, -1.5};
        e[0][j] = p0[j] - t[j];
        e[1][j] = p1[j] - (double)t[3 + j];
        el1 += e[1][j] * e[1][j] / 3;
    }
    is_int(rc, MODEL_OK, "hand mse: call succeeds");
    is_double(loss, el0 + el1, 1e-6, "hand mse: loss is the mean squared error");
    is_int(hits, 1, "hand mse: only the sample within 0.05 everywhere hits");
    maxerr = 0;
    for (int o = 0; o < 3; o++) {
        double db = 2 * e[0][o] / 3 + 2 * e[1][o] / 3;
        for (int i = 0; i < 2; i++) {
            double want = 2 * e[0][o] / 3 * x[i] + 2 * e[1][o] / 3 * x[2 + i];
            maxerr = fmax(maxerr, fabs(want - g2[o * 2 + i]));
        }
        maxerr = fmax(maxerr, fabs(db - g2[6 + o]));
    }
    ok(maxerr < 1e-5, "hand mse: gradient is 2 (pred - y) / k times x");
    model_free(m);
}

static void test_evaluate(void)
{
    enum { N = 23, MB = 8 };
    model_arch_t a = {.nlayers = 2, .dims = {6, 9, 4}, .act = ACT_TANH,
                      .loss = LOSS_XENT};
    float x[N * 6], y[N * 4];
    int32_t lab[N];
    model_t *m = NULL;
    make_data(&a, 31, N, x, lab, y);
    for (int pass = 0; pass < 2; pass++) {
        a.loss = pass ? LOSS_MSE : LOSS_XENT;
        if (model_init(&m, &a, 9, MB, NULL, 0) != MODEL_OK) {
            ok(0, "evaluate: init");
            return;
        }
        float *g = calloc(model_num_params(m), 4);
        double lf = 0, le = -1;
        int64_t cf = 0, ce = -1;
        for (int s = 0; s < N; s += MB) {
            int c = N - s < MB ? N - s : MB;
            double l;
            int64_t h;
            model_forward_backward(m, x + s * 6, lab + s, y + s * 4, c, g, &l,
                                   &h);
            lf += l;
            cf += h;
        }
        int rc = model_evaluate(m, x, lab, y, N, &le, &ce);
        is_int(rc, MODEL_OK, "evaluate %s: n = %d > max_batch = %d works",
               pass ? "mse" : "xent", N, MB);
        is_double(le, lf, 1e-6 * fabs(lf),
                  "evaluate %s: loss matches forward_backward",
                  pass ? "mse" : "xent");
        is_int(ce, cf, "evaluate %s: hits match forward_backward",
               pass ? "mse" : "xent");
        free(g);
        model_free(m);
    }
}

/* Layer l's parameters of m against the rule: every weight (and bias,
 * when biases_drawn) within +-bound, the largest above half of it;
 * otherwise every bias zero. */
static int layer_in_rule(model_t *m, int l, double bound, int biases_drawn)
{
    const model_arch_t *a = model_arch(m);
    size_t wo, bo;
    model_layer_offsets(a, l, &wo, &bo);
    const float *p = model_params(m);
    double wmax = 0, bmax = 0;
    int good = 1;
    for (size_t i = wo; i < bo; i++)
        wmax = fmax(wmax, fabs(p[i]));
    for (int j = 0; j < a->dims[l + 1]; j++)
        bmax = fmax(bmax, fabs(p[bo + j]));
    good &= wmax <= bound && wmax > 0.5 * bound;
    good &= biases_drawn ? bmax <= bound && bmax > 0.5 * bound : bmax == 0.0;
    return good;
}

static void test_init(void)
{
    model_arch_t a = {.nlayers = 3, .dims = {20, 30, 10, 4}, .act = ACT_RELU,
                      .loss = LOSS_XENT};
    model_t *m1 = NULL, *m2 = NULL, *m3 = NULL;
    model_init(&m1, &a, 42, 4, NULL, 0);
    model_init(&m2, &a, 42, 4, NULL, 0);
    model_init(&m3, &a, 43, 4, NULL, 0);
    if (!m1 || !m2 || !m3) {
        ok(0, "init: three models");
        return;
    }
    size_t np = model_num_params(m1);
    is_int(np, 20 * 30 + 30 + 30 * 10 + 10 + 10 * 4 + 4, "parameter count");
    ok(memcmp(model_params(m1), model_params(m2), np * 4) == 0,
       "same seed gives identical parameters");
    ok(memcmp(model_params(m1), model_params(m3), np * 4) != 0,
       "another seed gives other parameters");
    size_t wo, bo;
    model_layer_offsets(&a, 1, &wo, &bo);
    is_int(wo, 20 * 30 + 30, "layer 1 weights follow layer 0's W and b");
    is_int(bo, wo + 30 * 10, "layer 1 bias follows its weights");
    model_free(m2);
    model_free(m3);

    /* The rules, each on a relu and on a tanh net: the activation does not
     * choose the rule. */
    for (int act = ACT_RELU; act <= ACT_TANH; act++) {
        const char *an = act == ACT_RELU ? "relu" : "tanh";
        a.act = (model_act_t)act;
        model_t *torch = NULL, *kaiming = NULL, *xavier = NULL;
        model_init_with(&torch, &a, INIT_TORCH, 42, 4, NULL, 0);
        model_init_with(&kaiming, &a, INIT_KAIMING, 42, 4, NULL, 0);
        model_init_with(&xavier, &a, INIT_XAVIER, 42, 4, NULL, 0);
        if (!torch || !kaiming || !xavier) {
            ok(0, "init %s: three models", an);
            continue;
        }
        int t_ok = 1, k_ok = 1, x_ok = 1;
        for (int l = 0; l < 3; l++) {
            double fi = a.dims[l], fo = a.dims[l + 1];
            t_ok &= layer_in_rule(torch, l, 1.0 / sqrt(fi), 1);
            k_ok &= layer_in_rule(kaiming, l, sqrt(6.0 / fi), 0);
            x_ok &= layer_in_rule(xavier, l, sqrt(6.0 / (fi + fo)), 0);
        }
        ok(t_ok, "%s, torch: weights and biases fill [-1/sqrt(fan_in), +] (nn.Linear)", an);
        ok(k_ok, "%s, kaiming: weights fill [-sqrt(6/fan_in), +], biases zero", an);
        ok(x_ok, "%s, xavier: weights fill [-sqrt(6/(fan_in+fan_out)), +], biases zero", an);
        if (act == ACT_RELU)
            ok(memcmp(model_params(m1), model_params(torch), np * 4) == 0,
               "model_init is model_init_with INIT_TORCH");
        /* The biases have streams of their own: layer 0's biases are not
         * the first draws of its weights' stream, scaled alike. */
        model_layer_offsets(&a, 0, &wo, &bo);
        ok(memcmp(model_params(torch) + wo, model_params(torch) + bo, 30 * 4) != 0,
           "%s, torch: biases are not the weights' draws", an);
        model_free(torch);
        model_free(kaiming);
        model_free(xavier);
    }
    model_free(m1);

    char err[128] = "";
    model_t *m = NULL;
    is_int(model_init_with(&m, &a, (model_init_t)7, 1, 4, err, sizeof err), MODEL_EINVAL,
           "an unknown init is rejected");
    ok(m == NULL && strstr(err, "initialisation") != NULL, "  naming it: %s", err);
    is_str(model_init_name(INIT_TORCH), "torch", "init names: torch");
    is_int(model_init_parse("xavier"), INIT_XAVIER, "init names: xavier parses");
    is_int(model_init_parse("kaiming"), INIT_KAIMING, "init names: kaiming parses");
    is_int(model_init_parse("bogus"), -1, "init names: bogus does not");
}

static void test_names(void)
{
    model_arch_t a = {.nlayers = 3, .dims = {784, 256, 128, 10},
                      .act = ACT_RELU, .loss = LOSS_XENT};
    char buf[128];
    model_arch_string(&a, buf, sizeof(buf));
    is_str(buf, "784-256-128-10 relu xent", "arch string");
    model_arch_string(&a, buf, 6);
    ok(strlen(buf) <= 5, "arch string truncates to the buffer");
    model_arch_t b = {.nlayers = 1, .dims = {3, 1}, .act = ACT_TANH,
                      .loss = LOSS_MSE};
    model_arch_string(&b, buf, sizeof(buf));
    is_str(buf, "3-1 tanh mse", "arch string of a regression model");
    is_str(model_act_name(ACT_RELU), "relu", "relu name");
    is_str(model_act_name(ACT_TANH), "tanh", "tanh name");
    is_int(model_act_parse(model_act_name(ACT_TANH)), ACT_TANH, "tanh round trip");
    is_int(model_act_parse(model_act_name(ACT_RELU)), ACT_RELU, "relu round trip");
    is_int(model_act_parse("sigmoid"), -1, "unknown activation is -1");
    is_int(model_act_parse(NULL), -1, "NULL activation is -1");
    is_int(model_loss_parse(model_loss_name(LOSS_MSE)), LOSS_MSE, "mse round trip");
    is_str(model_loss_name(LOSS_XENT), "xent", "xent name");
    is_str(model_act_names(buf, sizeof buf), "relu or tanh", "activation names");
    is_str(model_loss_names(buf, sizeof buf), "xent or mse", "loss names");

    uint64_t f = model_arch_fingerprint(&a);
    model_arch_t c = a;
    c.dims[5] = 77; /* past nlayers: not part of the architecture */
    ok(model_arch_fingerprint(&c) == f, "fingerprint ignores unused dims");
    c = a;
    c.dims[1] = 255;
    ok(model_arch_fingerprint(&c) != f, "fingerprint changes with a dim");
    c = a;
    c.act = ACT_TANH;
    ok(model_arch_fingerprint(&c) != f, "fingerprint changes with act");
    c = a;
    c.loss = LOSS_MSE;
    ok(model_arch_fingerprint(&c) != f, "fingerprint changes with loss");
    c = a;
    c.nlayers = 2;
    ok(model_arch_fingerprint(&c) != f, "fingerprint changes with depth");
    /* The fingerprint is stored in checkpoints: it must never change. */
    ok(f == 0x4eb300c9711372c7ULL,
       "fingerprint of 784-256-128-10 relu xent is stable (%016llx)",
       (unsigned long long)f);
}

static void test_invalid(void)
{
    model_arch_t good = {.nlayers = 2, .dims = {4, 5, 3}, .act = ACT_RELU,
                         .loss = LOSS_XENT};
    model_t *m = (model_t *)&good;
    model_arch_t a = good;
    a.nlayers = 0;
    is_int(model_init(&m, &a, 1, 4, NULL, 0), MODEL_EINVAL, "0 layers rejected");
    ok(m == NULL, "failed init leaves *out NULL");
    a = good;
    a.nlayers = MODEL_MAX_LAYERS + 1;
    is_int(model_init(&m, &a, 1, 4, NULL, 0), MODEL_EINVAL, "too many layers rejected");
    a = good;
    a.dims[1] = 0;
    is_int(model_init(&m, &a, 1, 4, NULL, 0), MODEL_EINVAL, "zero dim rejected");
    a = good;
    a.dims[2] = -3;
    char err[256] = "";
    is_int(model_init(&m, &a, 1, 4, err, sizeof err), MODEL_EINVAL, "negative dim rejected");
    ok(strstr(err, "width -3") != NULL, "the message names the width: %s", err);
    a = good;
    a.act = (model_act_t)7;
    is_int(model_init(&m, &a, 1, 4, NULL, 0), MODEL_EINVAL, "unknown act rejected");
    a = good;
    a.loss = (model_loss_t)-1;
    is_int(model_init(&m, &a, 1, 4, NULL, 0), MODEL_EINVAL, "unknown loss rejected");
    is_int(model_init(&m, &good, 1, 0, NULL, 0), MODEL_EINVAL, "max_batch 0 rejected");
    is_int(model_init(&m, NULL, 1, 4, NULL, 0), MODEL_EINVAL, "NULL arch rejected");
    a = good;
    a.nlayers = MODEL_MAX_LAYERS;
    for (int i = 0; i <= MODEL_MAX_LAYERS; i++)
        a.dims[i] = 2;
    is_int(model_init(&m, &a, 1, 4, NULL, 0), MODEL_OK, "MODEL_MAX_LAYERS layers work");
    model_free(m);
    model_free(NULL);

    if (model_init(&m, &good, 1, 4, NULL, 0) != MODEL_OK) {
        ok(0, "invalid: init");
        return;
    }
    float x[5 * 4] = {0};
    int32_t lab[5] = {0, 1, 2, 0, 1};
    size_t np = model_num_params(m);
    float *g = calloc(np, 4);
    double loss;
    is_int(model_forward_backward(m, x, lab, NULL, 5, g, &loss, NULL),
           MODEL_EINVAL, "n > max_batch rejected");
    is_int(model_forward_backward(m, x, lab, NULL, -1, g, &loss, NULL),
           MODEL_EINVAL, "n < 0 rejected");
    is_int(model_forward_backward(m, NULL, lab, NULL, 2, g, &loss, NULL),
           MODEL_EINVAL, "NULL x rejected");
    is_int(model_forward_backward(m, x, NULL, NULL, 2, g, &loss, NULL),
           MODEL_EINVAL, "NULL labels rejected for xent");
    is_int(model_forward_backward(m, x, lab, NULL, 2, NULL, &loss, NULL),
           MODEL_EINVAL, "NULL grad rejected");
    lab[1] = 3;
    is_int(model_forward_backward(m, x, lab, NULL, 2, g, &loss, NULL),
           MODEL_EINVAL, "label >= outputs rejected");
    lab[1] = -1;
    is_int(model_evaluate(m, x, lab, NULL, 2, &loss, NULL), MODEL_EINVAL,
           "negative label rejected by evaluate");
    int untouched = 1;
    for (size_t i = 0; i < np; i++)
        untouched &= g[i] == 0.0f;
    ok(untouched, "rejected calls leave the gradient untouched");
    free(g);
    model_free(m);
}

int main(void)
{
    model_arch_t a = {.nlayers = 3, .dims = {5, 7, 4, 3}};
    const model_act_t acts[2] = {ACT_RELU, ACT_TANH};
    const model_loss_t losses[2] = {LOSS_XENT, LOSS_MSE};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            char what[64];
            a.act = acts[i];
            a.loss = losses[j];
            model_arch_string(&a, what, sizeof(what));
            grad_check(&a, what);
        }
    model_arch_t one = {.nlayers = 1, .dims = {5, 4}, .act = ACT_RELU,
                        .loss = LOSS_XENT};
    grad_check(&one, "5-4 linear xent");
    model_arch_t deep = {.nlayers = 4, .dims = {3, 6, 6, 5, 2},
                         .act = ACT_TANH, .loss = LOSS_MSE};
    grad_check(&deep, "3-6-6-5-2 tanh mse");

    test_accumulate();
    test_hand_loss();
    test_evaluate();
    test_init();
    test_names();
    test_invalid();
    return done_testing();
}

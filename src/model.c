/*
 * model.c - the multi-layer perceptron of model.h on the CPU (OpenBLAS).
 *
 * Notation: A_0 = x (n x dims[0]); layer l computes
 * Z_{l+1} = A_l W_l^T + b_l and A_{l+1} = act(Z_{l+1}) for hidden layers,
 * A_L = Z_L (logits or predictions) for the last one.  Only the
 * post-activation values are kept: relu'(z) is (a > 0) and tanh'(z) is
 * 1 - a^2, so the backward pass needs nothing else.
 *
 * Losses per sample: cross-entropy log(sum_j exp(z_j)) - z_y, computed as
 * max + log(sum exp(z - max)); its gradient with respect to the logits is
 * softmax(z) - onehot(y).  MSE is mean_j (z_j - y_j)^2 with gradient
 * 2 (z_j - y_j) / k.  A regression sample counts as correct when every
 * output is within 0.05 of its target.
 *
 * Backward: delta_L is written over the logits in place; for l = L-1 .. 0,
 * dW_l += delta^T A_l and db_l += column sums of delta go straight into the
 * caller's gradient (sgemm with beta = 1, a plain loop over rows for the
 * bias), then delta = (delta W_l) * act'(A_l) in one of two ping-pong
 * buffers, skipped for l = 0 since the input needs no gradient.
 *
 * Determinism: every loop is sequential in a fixed order, all workspace is
 * written before it is read, and the only parallelism is inside OpenBLAS, so
 * a call's result depends only on its inputs, the parameters and the BLAS
 * thread count.  All memory is allocated in model_init; calls never allocate.
 * The workspace lives in the model, so one model serves one thread at a time.
 * A call that returns MODEL_EINVAL has touched neither grad nor the model.
 *
 * Initialisation: every layer's weights are uniform in [-bound, bound) with
 * bound = sqrt(6 / fan_in) for ReLU nets (Kaiming-uniform, gain sqrt 2) and
 * sqrt(6 / (fan_in + fan_out)) for tanh nets (Xavier-uniform, gain 1), drawn
 * row-major from rng_make(seed, MODEL_RNG_STREAM + l); biases are zero.
 */
#include "ftrain/model.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ftrain/rng.h"

/* The RNG stream of layer 0's weights; layer l uses this plus l. */
#define MODEL_RNG_STREAM 0x1417u
/* Upper bounds that keep every size and BLAS int argument far from overflow. */
#define MODEL_DIM_MAX (1 << 24)
#define MODEL_BATCH_MAX (1 << 20)

struct model {
    model_arch_t arch;
    int max_batch;
    size_t nparams;
    size_t w_off[MODEL_MAX_LAYERS];
    size_t b_off[MODEL_MAX_LAYERS];
    float *params;
    float *arena;                        /* one block for all workspace */
    float *act[MODEL_MAX_LAYERS + 1];    /* act[1..L], max_batch x dims[l] */
    float *work[2];                      /* backward deltas of hidden layers */
};

/* Return 1 when a is a well-formed architecture, else 0. */
static int arch_valid(const model_arch_t *a)
{
    if (!a || a->nlayers < 1 || a->nlayers > MODEL_MAX_LAYERS)
        return 0;
    if (a->act != ACT_RELU && a->act != ACT_TANH)
        return 0;
    if (a->loss != LOSS_XENT && a->loss != LOSS_MSE)
        return 0;
    for (int i = 0; i <= a->nlayers; i++)
        if (a->dims[i] < 1 || a->dims[i] > MODEL_DIM_MAX)
            return 0;
    /* Parameter count must fit size_t with room for a byte size. */
    size_t total = 0;
    for (int l = 0; l < a->nlayers; l++) {
        size_t din = (size_t)a->dims[l], dout = (size_t)a->dims[l + 1];
        size_t layer = dout * din + dout; /* dims <= 2^24: no overflow */
        if (total > SIZE_MAX / sizeof(float) - layer)
            return 0;
        total += layer;
    }
    return 1;
}

void model_layer_offsets(const model_arch_t *a, int l, size_t *w_off,
                         size_t *b_off)
{
    size_t off = 0;
    if (!arch_valid(a) || l < 0 || l >= a->nlayers) {
        if (w_off)
            *w_off = 0;
        if (b_off)
            *b_off = 0;
        return;
    }
    for (int i = 0; i < l; i++)
        off += (size_t)a->dims[i + 1] * (size_t)a->dims[i] +
               (size_t)a->dims[i + 1];
    if (w_off)
        *w_off = off;
    if (b_off)
        *b_off = off + (size_t)a->dims[l + 1] * (size_t)a->dims[l];
}

/* Fill the weights of every layer from seed and zero the biases. */
static void init_params(model_t *m, uint64_t seed)
{
    const model_arch_t *a = &m->arch;
    for (int l = 0; l < a->nlayers; l++) {
        double fan_in = a->dims[l], fan_out = a->dims[l + 1];
        double bound = a->act == ACT_RELU ? sqrt(6.0 / fan_in)
                                          : sqrt(6.0 / (fan_in + fan_out));
        rng_t r = rng_make(seed, MODEL_RNG_STREAM + (uint64_t)l);
        float *w = m->params + m->w_off[l];
        size_t nw = (size_t)a->dims[l + 1] * (size_t)a->dims[l];
        for (size_t i = 0; i < nw; i++)
            w[i] = (float)((2.0 * rng_uniform(&r) - 1.0) * bound);
        memset(m->params + m->b_off[l], 0,
               (size_t)a->dims[l + 1] * sizeof(float));
    }
}

int model_init(model_t **out, const model_arch_t *arch, uint64_t seed,
               int max_batch)
{
    int rc = MODEL_OK;
    model_t *m = NULL;

    if (!out)
        return MODEL_EINVAL;
    *out = NULL;
    if (!arch_valid(arch) || max_batch < 1 || max_batch > MODEL_BATCH_MAX)
        return MODEL_EINVAL;

    m = calloc(1, sizeof(*m));
    if (!m) {
        rc = MODEL_ENOMEM;
        goto fail;
    }
    m->arch = *arch;
    /* Entries past nlayers play no part; keep them zero so copies compare. */
    for (int i = arch->nlayers + 1; i <= MODEL_MAX_LAYERS; i++)
        m->arch.dims[i] = 0;
    m->max_batch = max_batch;

    const int L = arch->nlayers;
    size_t np = 0;
    for (int l = 0; l < L; l++) {
        model_layer_offsets(arch, l, &m->w_off[l], &m->b_off[l]);
        np = m->b_off[l] + (size_t)arch->dims[l + 1];
    }
    m->nparams = np;

    /* Workspace: outputs of every layer plus two delta buffers as wide as
     * the widest hidden layer (none when there is no hidden layer). */
    size_t nb = (size_t)max_batch, ws = 0, hid = 0;
    for (int l = 1; l <= L; l++) {
        size_t w = nb * (size_t)arch->dims[l];
        if (ws > SIZE_MAX / sizeof(float) - w) {
            rc = MODEL_ENOMEM;
            goto fail;
        }
        ws += w;
        if (l < L && (size_t)arch->dims[l] > hid)
            hid = (size_t)arch->dims[l];
    }
    if (ws > SIZE_MAX / sizeof(float) - 2 * nb * hid) {
        rc = MODEL_ENOMEM;
        goto fail;
    }
    ws += 2 * nb * hid;

    m->params = calloc(np, sizeof(float));
    m->arena = calloc(ws, sizeof(float));
    if (!m->params || !m->arena) {
        rc = MODEL_ENOMEM;
        goto fail;
    }
    float *p = m->arena;
    for (int l = 1; l <= L; l++) {
        m->act[l] = p;
        p += nb * (size_t)arch->dims[l];
    }
    if (hid) {
        m->work[0] = p;
        m->work[1] = p + nb * hid;
    }

    init_params(m, seed);
    *out = m;
    return MODEL_OK;

fail:
    model_free(m);
    return rc;
}

void model_free(model_t *m)
{
    if (!m)
        return;
    free(m->params);
    free(m->arena);
    free(m);
}

size_t model_num_params(const model_t *m)
{
    return m ? m->nparams : 0;
}

float *model_params(model_t *m)
{
    return m ? m->params : NULL;
}

const model_arch_t *model_arch(const model_t *m)
{
    return m ? &m->arch : NULL;
}

/* Check the arguments shared by forward_backward and evaluate; labels are
 * checked against the output width so no bad index is ever used. */
static int check_call(const model_t *m, const float *x, const int32_t *labels,
                      const float *y, int n)
{
    if (!m || n < 0 || (n > 0 && !x))
        return MODEL_EINVAL;
    if (m->arch.loss == LOSS_XENT) {
        if (n > 0 && !labels)
            return MODEL_EINVAL;
        const int32_t k = m->arch.dims[m->arch.nlayers];
        for (int i = 0; i < n; i++)
            if (labels[i] < 0 || labels[i] >= k)
                return MODEL_EINVAL;
    } else if (n > 0 && !y) {
        return MODEL_EINVAL;
    }
    return MODEL_OK;
}

/* Forward n <= max_batch samples; leaves layer outputs in act[1..L]. */
static void forward(model_t *m, const float *x, int n)
{
    const model_arch_t *a = &m->arch;
    const int L = a->nlayers;
    for (int l = 0; l < L; l++) {
        const int din = a->dims[l], dout = a->dims[l + 1];
        const float *in = l == 0 ? x : m->act[l];
        const float *w = m->params + m->w_off[l];
        const float *b = m->params + m->b_off[l];
        float *z = m->act[l + 1];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, dout, din,
                    1.0f, in, din, w, din, 0.0f, z, dout);
        if (l == L - 1) {
            for (int i = 0; i < n; i++) {
                float *zr = z + (size_t)i * dout;
                for (int j = 0; j < dout; j++)
                    zr[j] += b[j];
            }
        } else if (a->act == ACT_RELU) {
            for (int i = 0; i < n; i++) {
                float *zr = z + (size_t)i * dout;
                for (int j = 0; j < dout; j++) {
                    float v = zr[j] + b[j];
                    zr[j] = v > 0.0f ? v : 0.0f;
                }
            }
        } else {
            for (int i = 0; i < n; i++) {
                float *zr = z + (size_t)i * dout;
                for (int j = 0; j < dout; j++)
                    zr[j] = tanhf(zr[j] + b[j]);
            }
        }
    }
}

/* Loss, hits and (when want_grad) dLoss/dOutput written over the outputs of
 * the last layer, for n samples already forwarded. */
static void loss_out(model_t *m, const int32_t *labels, const float *y, int n,
                     int want_grad, double *loss_sum, int64_t *correct)
{
    const int k = m->arch.dims[m->arch.nlayers];
    float *out = m->act[m->arch.nlayers];
    double loss = 0.0;
    int64_t hits = 0;

    if (m->arch.loss == LOSS_XENT) {
        for (int i = 0; i < n; i++) {
            float *z = out + (size_t)i * k;
            const int lab = labels[i];
            float mx = z[0];
            int arg = 0;
            for (int j = 1; j < k; j++)
                if (z[j] > mx) {
                    mx = z[j];
                    arg = j;
                }
            hits += arg == lab;
            const float zy = z[lab];
            float s = 0.0f;
            if (want_grad) {
                for (int j = 0; j < k; j++) {
                    float e = expf(z[j] - mx);
                    z[j] = e;
                    s += e;
                }
                const float inv = 1.0f / s;
                for (int j = 0; j < k; j++)
                    z[j] *= inv;
                z[lab] -= 1.0f;
            } else {
                for (int j = 0; j < k; j++)
                    s += expf(z[j] - mx);
            }
            loss += log((double)s) + ((double)mx - (double)zy);
        }
    } else {
        const float g2 = 2.0f / (float)k;
        for (int i = 0; i < n; i++) {
            float *z = out + (size_t)i * k;
            const float *t = y + (size_t)i * k;
            double l = 0.0;
            int all = 1;
            for (int j = 0; j < k; j++) {
                float d = z[j] - t[j];
                l += (double)d * (double)d;
                all &= fabsf(d) < 0.05f;
                if (want_grad)
                    z[j] = g2 * d;
            }
            loss += l / k;
            hits += all;
        }
    }
    if (loss_sum)
        *loss_sum = loss;
    if (correct)
        *correct = hits;
}

/* Backward from the deltas left over the last layer's outputs. */
static void backward(model_t *m, const float *x, int n, float *grad)
{
    const model_arch_t *a = &m->arch;
    const int L = a->nlayers;
    const float *delta = m->act[L];
    int pp = 0;
    for (int l = L - 1; l >= 0; l--) {
        const int din = a->dims[l], dout = a->dims[l + 1];
        const float *in = l == 0 ? x : m->act[l];
        const float *w = m->params + m->w_off[l];
        float *gw = grad + m->w_off[l];
        float *gb = grad + m->b_off[l];
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, dout, din, n,
                    1.0f, delta, dout, in, din, 1.0f, gw, din);
        for (int i = 0; i < n; i++) {
            const float *dr = delta + (size_t)i * dout;
            for (int j = 0; j < dout; j++)
                gb[j] += dr[j];
        }
        if (l == 0)
            break;
        float *da = m->work[pp];
        pp ^= 1;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, din, dout,
                    1.0f, delta, dout, w, din, 0.0f, da, din);
        const size_t cnt = (size_t)n * (size_t)din;
        const float *act = m->act[l];
        if (a->act == ACT_RELU) {
            for (size_t i = 0; i < cnt; i++)
                da[i] = act[i] > 0.0f ? da[i] : 0.0f;
        } else {
            for (size_t i = 0; i < cnt; i++)
                da[i] *= 1.0f - act[i] * act[i];
        }
        delta = da;
    }
}

int model_forward_backward(model_t *m, const float *x, const int32_t *labels,
                           const float *y, int n, float *grad,
                           double *loss_sum, int64_t *correct)
{
    int rc = check_call(m, x, labels, y, n);
    if (rc != MODEL_OK || n > m->max_batch || !grad)
        return MODEL_EINVAL;
    if (n == 0) {
        if (loss_sum)
            *loss_sum = 0.0;
        if (correct)
            *correct = 0;
        return MODEL_OK;
    }
    forward(m, x, n);
    loss_out(m, labels, y, n, 1, loss_sum, correct);
    backward(m, x, n, grad);
    return MODEL_OK;
}

int model_evaluate(model_t *m, const float *x, const int32_t *labels,
                   const float *y, int n, double *loss_sum, int64_t *correct)
{
    int rc = check_call(m, x, labels, y, n);
    if (rc != MODEL_OK)
        return rc;
    const size_t din = (size_t)m->arch.dims[0];
    const size_t k = (size_t)m->arch.dims[m->arch.nlayers];
    double loss = 0.0;
    int64_t hits = 0;
    for (int start = 0; start < n; start += m->max_batch) {
        int c = n - start < m->max_batch ? n - start : m->max_batch;
        double l = 0.0;
        int64_t h = 0;
        forward(m, x + (size_t)start * din, c);
        loss_out(m, labels ? labels + start : NULL,
                 y ? y + (size_t)start * k : NULL, c, 0, &l, &h);
        loss += l;
        hits += h;
    }
    if (loss_sum)
        *loss_sum = loss;
    if (correct)
        *correct = hits;
    return MODEL_OK;
}

/* FNV-1a over the bytes of v in little-endian order. */
static uint64_t fnv_u32(uint64_t h, uint32_t v)
{
    for (int i = 0; i < 4; i++) {
        h ^= (v >> (8 * i)) & 0xffu;
        h *= 0x100000001b3ULL;
    }
    return h;
}

uint64_t model_arch_fingerprint(const model_arch_t *a)
{
    static const char tag[] = "ftrain.mlp.v1";
    uint64_t h = 0xcbf29ce484222325ULL;
    if (!a)
        return 0;
    for (const char *p = tag; *p; p++) {
        h ^= (unsigned char)*p;
        h *= 0x100000001b3ULL;
    }
    int nl = a->nlayers;
    h = fnv_u32(h, (uint32_t)nl);
    if (nl > MODEL_MAX_LAYERS)
        nl = MODEL_MAX_LAYERS;
    for (int i = 0; i <= nl && nl >= 0; i++)
        h = fnv_u32(h, (uint32_t)a->dims[i]);
    h = fnv_u32(h, (uint32_t)a->act);
    h = fnv_u32(h, (uint32_t)a->loss);
    return rng_mix64(h);
}

void model_arch_string(const model_arch_t *a, char *buf, size_t cap)
{
    size_t len = 0;
    if (!buf || cap == 0)
        return;
    buf[0] = '\0';
    if (!a || a->nlayers < 1 || a->nlayers > MODEL_MAX_LAYERS) {
        snprintf(buf, cap, "(invalid)");
        return;
    }
    for (int i = 0; i <= a->nlayers && len < cap; i++) {
        int w = snprintf(buf + len, cap - len, i ? "-%d" : "%d", a->dims[i]);
        if (w < 0)
            return;
        len += (size_t)w;
    }
    if (len < cap) {
        snprintf(buf + len, cap - len, " %s %s", model_act_name(a->act),
                 a->loss == LOSS_XENT ? "xent"
                 : a->loss == LOSS_MSE ? "mse" : "unknown");
    }
}

const char *model_act_name(model_act_t a)
{
    switch (a) {
    case ACT_RELU:
        return "relu";
    case ACT_TANH:
        return "tanh";
    }
    return "unknown";
}

int model_act_parse(const char *s)
{
    if (!s)
        return -1;
    if (strcmp(s, "relu") == 0)
        return ACT_RELU;
    if (strcmp(s, "tanh") == 0)
        return ACT_TANH;
    return -1;
}

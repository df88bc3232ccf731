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
 * caller's gradient (sgemm with beta = 1; the bias sums add the rows in
 * order), then delta = (delta W_l) * act'(A_l) in one of two ping-pong
 * buffers, skipped for l = 0 since the input needs no gradient.
 *
 * Determinism: every loop is sequential in a fixed order, all workspace is
 * written before it is read, and the only parallelism is inside OpenBLAS, so
 * a call's result depends only on its inputs, the parameters and the BLAS
 * thread count.  The SSE loops do for each element the operations of the
 * scalar loops, in the same order: their bits are the scalar loops' bits.
 * All memory is allocated in model_init; calls never allocate.
 * The workspace lives in the model, so one model serves one thread at a time.
 * A call that returns MODEL_EINVAL has touched neither grad nor the model.
 *
 * Initialisation (model_init_t): every layer's weights are uniform in
 * [-bound, bound), drawn row-major from rng_make(seed, MODEL_RNG_STREAM + l),
 * with bound = 1 / sqrt(fan_in) (torch, PyTorch's nn.Linear default),
 * sqrt(6 / fan_in) (kaiming: Kaiming-uniform, gain sqrt 2) or
 * sqrt(6 / (fan_in + fan_out)) (xavier: Xavier-uniform, gain 1).  torch
 * draws the biases in the same bound from rng_make(seed,
 * MODEL_BIAS_RNG_STREAM + l); kaiming and xavier set them to zero.  The
 * weights' draws are the same for every rule, only scaled: kaiming gives the
 * bits that ReLU nets had before the rule could be chosen, xavier those of
 * tanh nets.
 */
#include "nn/model.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/rng.h"
#include "util/util.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* The RNG stream of layer 0's weights; layer l uses this plus l. */
#define MODEL_RNG_STREAM 0x1417u
/* The same for the biases (torch rule): far above any epoch number, whose
 * permutation has the stream of that number. */
#define MODEL_BIAS_RNG_STREAM 0xb1a5000000000000u
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

static const util_name_t model_acts[] = {
    {"relu", ACT_RELU}, {"tanh", ACT_TANH},
};

static const util_name_t model_losses[] = {
    {"xent", LOSS_XENT}, {"mse", LOSS_MSE},
};

static const util_name_t model_inits[] = {
    {"torch", INIT_TORCH}, {"kaiming", INIT_KAIMING}, {"xavier", INIT_XAVIER},
};

/* @return MODEL_OK when arch is a well-formed architecture, else
 * MODEL_EINVAL with err naming what is wrong. */
static int arch_check(const model_arch_t *arch, char *err, size_t cap)
{
    if (!arch)
        return util_fail(err, cap, MODEL_EINVAL, "model: no architecture given");
    if (arch->nlayers < 1 || arch->nlayers > MODEL_MAX_LAYERS)
        return util_fail(err, cap, MODEL_EINVAL, "model: %d layers: must be 1 to %d",
                         arch->nlayers, MODEL_MAX_LAYERS);
    if (!util_name_of(model_acts, UTIL_COUNT(model_acts), (int)arch->act, NULL))
        return util_fail(err, cap, MODEL_EINVAL, "model: unknown activation %d",
                         (int)arch->act);
    if (!util_name_of(model_losses, UTIL_COUNT(model_losses), (int)arch->loss, NULL))
        return util_fail(err, cap, MODEL_EINVAL, "model: unknown loss %d", (int)arch->loss);
    for (int i = 0; i <= arch->nlayers; i++)
        if (arch->dims[i] < 1 || arch->dims[i] > MODEL_DIM_MAX)
            return util_fail(err, cap, MODEL_EINVAL,
                             "model: width %d of layer boundary %d: must be 1 to %d",
                             arch->dims[i], i, MODEL_DIM_MAX);
    /* Parameter count must fit size_t with room for a byte size. */
    size_t total = 0;
    for (int layer = 0; layer < arch->nlayers; layer++) {
        size_t din = (size_t)arch->dims[layer], dout = (size_t)arch->dims[layer + 1];
        size_t count = dout * din + dout; /* dims <= 2^24: no overflow */
        if (total > SIZE_MAX / sizeof(float) - count)
            return util_fail(err, cap, MODEL_EINVAL,
                             "model: the parameters do not fit in memory");
        total += count;
    }
    return MODEL_OK;
}

void model_layer_offsets(const model_arch_t *arch, int layer, size_t *w_off,
                         size_t *b_off)
{
    size_t off = 0;
    if (arch_check(arch, NULL, 0) != MODEL_OK || layer < 0 || layer >= arch->nlayers) {
        if (w_off)
            *w_off = 0;
        if (b_off)
            *b_off = 0;
        return;
    }
    for (int i = 0; i < layer; i++)
        off += (size_t)arch->dims[i + 1] * (size_t)arch->dims[i] +
               (size_t)arch->dims[i + 1];
    if (w_off)
        *w_off = off;
    if (b_off)
        *b_off = off + (size_t)arch->dims[layer + 1] * (size_t)arch->dims[layer];
}

/* count values uniform in [-bound, bound) from rng_make(seed, stream), in
 * order. */
static void fill_uniform(float *out, size_t count, uint64_t seed, uint64_t stream,
                         double bound)
{
    rng_t rng = rng_make(seed, stream);
    for (size_t i = 0; i < count; i++)
        out[i] = (float)((2.0 * rng_uniform(&rng) - 1.0) * bound);
}

/* Fill every layer's weights, and its biases, from seed by rule init. */
static void init_params(model_t *model, model_init_t init, uint64_t seed)
{
    const model_arch_t *arch = &model->arch;
    for (int layer = 0; layer < arch->nlayers; layer++) {
        double fan_in = arch->dims[layer], fan_out = arch->dims[layer + 1];
        double bound = init == INIT_TORCH     ? 1.0 / sqrt(fan_in)
                       : init == INIT_KAIMING ? sqrt(6.0 / fan_in)
                                              : sqrt(6.0 / (fan_in + fan_out));
        size_t nweights = (size_t)arch->dims[layer + 1] * (size_t)arch->dims[layer];
        size_t nbiases = (size_t)arch->dims[layer + 1];
        float *biases = model->params + model->b_off[layer];
        fill_uniform(model->params + model->w_off[layer], nweights, seed,
                     MODEL_RNG_STREAM + (uint64_t)layer, bound);
        if (init == INIT_TORCH)
            fill_uniform(biases, nbiases, seed, MODEL_BIAS_RNG_STREAM + (uint64_t)layer, bound);
        else
            memset(biases, 0, nbiases * sizeof(float));
    }
}

/* The workspace in floats for max_batch samples: the outputs of every layer
 * plus two delta buffers as wide as the widest hidden layer (none when
 * there is no hidden layer).  *hidden_max gets that width.  @return
 * MODEL_OK, or MODEL_ENOMEM when the size overflows. */
static int workspace_floats(const model_arch_t *arch, size_t batch, size_t *floats,
                            size_t *hidden_max)
{
    size_t total = 0, widest = 0;
    for (int layer = 1; layer <= arch->nlayers; layer++) {
        size_t outputs = batch * (size_t)arch->dims[layer];
        if (total > SIZE_MAX / sizeof(float) - outputs)
            return MODEL_ENOMEM;
        total += outputs;
        if (layer < arch->nlayers && (size_t)arch->dims[layer] > widest)
            widest = (size_t)arch->dims[layer];
    }
    if (total > SIZE_MAX / sizeof(float) - 2 * batch * widest)
        return MODEL_ENOMEM;
    *floats = total + 2 * batch * widest;
    *hidden_max = widest;
    return MODEL_OK;
}

int model_init_with(model_t **out, const model_arch_t *arch, model_init_t init,
                    uint64_t seed, int max_batch, char *err, size_t cap)
{
    if (!out)
        return util_fail(err, cap, MODEL_EINVAL, "model: no place for the result");
    *out = NULL;
    int rc = arch_check(arch, err, cap);
    if (rc != MODEL_OK)
        return rc;
    if (!util_name_of(model_inits, UTIL_COUNT(model_inits), (int)init, NULL))
        return util_fail(err, cap, MODEL_EINVAL, "model: unknown initialisation %d",
                         (int)init);
    if (max_batch < 1 || max_batch > MODEL_BATCH_MAX)
        return util_fail(err, cap, MODEL_EINVAL, "model: batch of %d samples: must be 1 to %d",
                         max_batch, MODEL_BATCH_MAX);

    const size_t batch = (size_t)max_batch;
    size_t ws_floats = 0, hidden_max = 0;
    if (workspace_floats(arch, batch, &ws_floats, &hidden_max) != MODEL_OK)
        return util_fail(err, cap, MODEL_ENOMEM,
                         "model: the workspace for %d samples does not fit in memory",
                         max_batch);
    model_t *model = calloc(1, sizeof(*model));
    if (!model)
        return util_fail(err, cap, MODEL_ENOMEM, "model: out of memory");
    model->arch = *arch;
    /* Entries past nlayers play no part; keep them zero so copies compare. */
    for (int i = arch->nlayers + 1; i <= MODEL_MAX_LAYERS; i++)
        model->arch.dims[i] = 0;
    model->max_batch = max_batch;
    for (int layer = 0; layer < arch->nlayers; layer++) {
        model_layer_offsets(arch, layer, &model->w_off[layer], &model->b_off[layer]);
        model->nparams = model->b_off[layer] + (size_t)arch->dims[layer + 1];
    }

    model->params = util_calloc_pages(model->nparams, sizeof(float));
    model->arena = calloc(ws_floats, sizeof(float));
    if (!model->params || !model->arena) {
        size_t nparams = model->nparams;
        model_free(model);
        return util_fail(err, cap, MODEL_ENOMEM,
                         "model: out of memory for %zu parameters and %zu workspace floats",
                         nparams, ws_floats);
    }
    float *next = model->arena;
    for (int layer = 1; layer <= arch->nlayers; layer++) {
        model->act[layer] = next;
        next += batch * (size_t)arch->dims[layer];
    }
    if (hidden_max) {
        model->work[0] = next;
        model->work[1] = next + batch * hidden_max;
    }

    init_params(model, init, seed);
    *out = model;
    return MODEL_OK;
}

int model_init(model_t **out, const model_arch_t *arch, uint64_t seed,
               int max_batch, char *err, size_t cap)
{
    return model_init_with(out, arch, INIT_TORCH, seed, max_batch, err, cap);
}

void model_free(model_t *model)
{
    if (!model)
        return;
    free(model->params);
    free(model->arena);
    free(model);
}

size_t model_num_params(const model_t *model)
{
    return model ? model->nparams : 0;
}

float *model_params(model_t *model)
{
    return model ? model->params : NULL;
}

const model_arch_t *model_arch(const model_t *model)
{
    return model ? &model->arch : NULL;
}

/* Check the arguments shared by forward_backward and evaluate; labels are
 * checked against the output width so no bad index is ever used. */
static int check_call(const model_t *model, const float *inputs, const int32_t *labels,
                      const float *targets, int samples)
{
    if (!model || samples < 0 || (samples > 0 && !inputs))
        return MODEL_EINVAL;
    if (model->arch.loss == LOSS_XENT) {
        if (samples > 0 && !labels)
            return MODEL_EINVAL;
        const int32_t classes = model->arch.dims[model->arch.nlayers];
        for (int i = 0; i < samples; i++)
            if (labels[i] < 0 || labels[i] >= classes)
                return MODEL_EINVAL;
    } else if (samples > 0 && !targets) {
        return MODEL_EINVAL;
    }
    return MODEL_OK;
}

/* row[j] += bias[j] over rows x cols, then ReLU (v > 0 ? v : 0) when relu.
 * Branch-free: the sign of v is a coin toss that a branch mispredicts.
 * maxps(v, 0) gives what v > 0 ? v : 0 gives for every v, NaN (0) and -0
 * (+0) included, so the bits are those of the plain loop. */
static void add_bias_relu(float *out, const float *bias, int rows, int cols, int relu)
{
    for (int i = 0; i < rows; i++) {
        float *row = out + (size_t)i * cols;
        int j = 0;
#if defined(__SSE2__)
        const __m128 zero = _mm_setzero_ps();
        for (; j + 4 <= cols; j += 4) {
            __m128 v = _mm_add_ps(_mm_loadu_ps(row + j), _mm_loadu_ps(bias + j));
            _mm_storeu_ps(row + j, relu ? _mm_max_ps(v, zero) : v);
        }
#endif
        for (; j < cols; j++) {
            float v = row[j] + bias[j];
            row[j] = relu && !(v > 0.0f) ? 0.0f : v;
        }
    }
}

/* Forward `samples` <= max_batch samples; leaves layer outputs in act[1..L]. */
static void forward(model_t *model, const float *inputs, int samples)
{
    const model_arch_t *arch = &model->arch;
    const int nlayers = arch->nlayers;
    for (int layer = 0; layer < nlayers; layer++) {
        const int din = arch->dims[layer], dout = arch->dims[layer + 1];
        const float *in = layer == 0 ? inputs : model->act[layer];
        const float *weights = model->params + model->w_off[layer];
        const float *bias = model->params + model->b_off[layer];
        float *out = model->act[layer + 1];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, samples, dout, din,
                    1.0f, in, din, weights, din, 0.0f, out, dout);
        if (layer == nlayers - 1 || arch->act == ACT_RELU) {
            add_bias_relu(out, bias, samples, dout, layer < nlayers - 1);
        } else {
            for (int i = 0; i < samples; i++) {
                float *row = out + (size_t)i * dout;
                for (int j = 0; j < dout; j++)
                    row[j] = tanhf(row[j] + bias[j]);
            }
        }
    }
}

/* Cross-entropy over the logits of `samples` samples: loss, hits and (when
 * want_grad) softmax(z) - onehot(y) written over the logits. */
static void loss_xent(float *logits, int classes, const int32_t *labels, int samples,
                      int want_grad, double *loss_sum, int64_t *hits_out)
{
    double loss = 0.0;
    int64_t hits = 0;
    for (int i = 0; i < samples; i++) {
        float *row = logits + (size_t)i * classes;
        const int label = labels[i];
        float zmax = row[0];
        int argmax = 0;
        for (int j = 1; j < classes; j++)
            if (row[j] > zmax) {
                zmax = row[j];
                argmax = j;
            }
        hits += argmax == label;
        const float zlabel = row[label];
        float sum = 0.0f;
        if (want_grad) {
            for (int j = 0; j < classes; j++) {
                float e = expf(row[j] - zmax);
                row[j] = e;
                sum += e;
            }
            const float inv = 1.0f / sum;
            for (int j = 0; j < classes; j++)
                row[j] *= inv;
            row[label] -= 1.0f;
        } else {
            for (int j = 0; j < classes; j++)
                sum += expf(row[j] - zmax);
        }
        loss += log((double)sum) + ((double)zmax - (double)zlabel);
    }
    *loss_sum = loss;
    *hits_out = hits;
}

/* Mean squared error over the predictions of `samples` samples: loss, hits
 * and (when want_grad) 2 (pred - y) / outputs written over the predictions. */
static void loss_mse(float *preds, int outputs, const float *targets, int samples,
                     int want_grad, double *loss_sum, int64_t *hits_out)
{
    const float g2 = 2.0f / (float)outputs;
    double loss = 0.0;
    int64_t hits = 0;
    for (int i = 0; i < samples; i++) {
        float *row = preds + (size_t)i * outputs;
        const float *target = targets + (size_t)i * outputs;
        double squares = 0.0;
        int all = 1;
        for (int j = 0; j < outputs; j++) {
            float d = row[j] - target[j];
            squares += (double)d * (double)d;
            all &= fabsf(d) < 0.05f;
            if (want_grad)
                row[j] = g2 * d;
        }
        loss += squares / outputs;
        hits += all;
    }
    *loss_sum = loss;
    *hits_out = hits;
}

/* Loss, hits and (when want_grad) dLoss/dOutput written over the outputs of
 * the last layer, for `samples` samples already forwarded. */
static void loss_out(model_t *model, const int32_t *labels, const float *targets,
                     int samples, int want_grad, double *loss_sum, int64_t *correct)
{
    const int outputs = model->arch.dims[model->arch.nlayers];
    float *out = model->act[model->arch.nlayers];
    double loss = 0.0;
    int64_t hits = 0;

    if (model->arch.loss == LOSS_XENT)
        loss_xent(out, outputs, labels, samples, want_grad, &loss, &hits);
    else
        loss_mse(out, outputs, targets, samples, want_grad, &loss, &hits);
    if (loss_sum)
        *loss_sum = loss;
    if (correct)
        *correct = hits;
}

/* grad_b[j] += the sum over the rows of delta[i][j]: for each j the
 * additions of a plain loop over the rows, in the same order (the same
 * bits), with blocks of columns summed in registers, not loaded and stored
 * once per row.  16 columns are four independent chains of additions. */
static void add_column_sums(float *grad_b, const float *delta, int rows, int cols)
{
    int j = 0;
#if defined(__SSE2__)
    for (; j + 16 <= cols; j += 16) {
        __m128 s0 = _mm_loadu_ps(grad_b + j), s1 = _mm_loadu_ps(grad_b + j + 4);
        __m128 s2 = _mm_loadu_ps(grad_b + j + 8), s3 = _mm_loadu_ps(grad_b + j + 12);
        for (int i = 0; i < rows; i++) {
            const float *row = delta + (size_t)i * cols + j;
            s0 = _mm_add_ps(s0, _mm_loadu_ps(row));
            s1 = _mm_add_ps(s1, _mm_loadu_ps(row + 4));
            s2 = _mm_add_ps(s2, _mm_loadu_ps(row + 8));
            s3 = _mm_add_ps(s3, _mm_loadu_ps(row + 12));
        }
        _mm_storeu_ps(grad_b + j, s0);
        _mm_storeu_ps(grad_b + j + 4, s1);
        _mm_storeu_ps(grad_b + j + 8, s2);
        _mm_storeu_ps(grad_b + j + 12, s3);
    }
    for (; j + 4 <= cols; j += 4) {
        __m128 s = _mm_loadu_ps(grad_b + j);
        for (int i = 0; i < rows; i++)
            s = _mm_add_ps(s, _mm_loadu_ps(delta + (size_t)i * cols + j));
        _mm_storeu_ps(grad_b + j, s);
    }
#endif
    for (; j < cols; j++) {
        float sum = grad_b[j];
        for (int i = 0; i < rows; i++)
            sum += delta[(size_t)i * cols + j];
        grad_b[j] = sum;
    }
}

/* dact *= act'(z), from the post-activation values act: ReLU keeps dact
 * where act > 0 (an and-mask, branch-free, with the bits of act > 0 ? dact
 * : 0, NaN included); tanh multiplies by 1 - act^2 with the operations of
 * the plain loop. */
static void mul_act_grad(float *dact, const float *act, size_t count, int relu)
{
    size_t i = 0;
#if defined(__SSE2__)
    const __m128 zero = _mm_setzero_ps(), one = _mm_set1_ps(1.0f);
    for (; i + 4 <= count; i += 4) {
        __m128 a = _mm_loadu_ps(act + i), d = _mm_loadu_ps(dact + i);
        d = relu ? _mm_and_ps(_mm_cmpgt_ps(a, zero), d)
                 : _mm_mul_ps(d, _mm_sub_ps(one, _mm_mul_ps(a, a)));
        _mm_storeu_ps(dact + i, d);
    }
#endif
    for (; i < count; i++)
        dact[i] = relu ? (act[i] > 0.0f ? dact[i] : 0.0f) : dact[i] * (1.0f - act[i] * act[i]);
}

/* Backward from the deltas left over the last layer's outputs. */
static void backward(model_t *model, const float *inputs, int samples, float *grad)
{
    const model_arch_t *arch = &model->arch;
    const float *delta = model->act[arch->nlayers];
    int ping = 0;
    for (int layer = arch->nlayers - 1; layer >= 0; layer--) {
        const int din = arch->dims[layer], dout = arch->dims[layer + 1];
        const float *in = layer == 0 ? inputs : model->act[layer];
        const float *weights = model->params + model->w_off[layer];
        float *grad_w = grad + model->w_off[layer];
        float *grad_b = grad + model->b_off[layer];
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, dout, din, samples,
                    1.0f, delta, dout, in, din, 1.0f, grad_w, din);
        add_column_sums(grad_b, delta, samples, dout);
        if (layer == 0)
            break;
        float *dact = model->work[ping];
        ping ^= 1;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, samples, din, dout,
                    1.0f, delta, dout, weights, din, 0.0f, dact, din);
        mul_act_grad(dact, model->act[layer], (size_t)samples * (size_t)din,
                     arch->act == ACT_RELU);
        delta = dact;
    }
}

int model_forward_backward(model_t *model, const float *inputs, const int32_t *labels,
                           const float *targets, int samples, float *grad,
                           double *loss_sum, int64_t *correct)
{
    int rc = check_call(model, inputs, labels, targets, samples);
    if (rc != MODEL_OK || samples > model->max_batch || !grad)
        return MODEL_EINVAL;
    if (samples == 0) {
        if (loss_sum)
            *loss_sum = 0.0;
        if (correct)
            *correct = 0;
        return MODEL_OK;
    }
    forward(model, inputs, samples);
    loss_out(model, labels, targets, samples, 1, loss_sum, correct);
    backward(model, inputs, samples, grad);
    return MODEL_OK;
}

int model_evaluate(model_t *model, const float *inputs, const int32_t *labels,
                   const float *targets, int samples, double *loss_sum,
                   int64_t *correct)
{
    int rc = check_call(model, inputs, labels, targets, samples);
    if (rc != MODEL_OK)
        return rc;
    const size_t din = (size_t)model->arch.dims[0];
    const size_t outputs = (size_t)model->arch.dims[model->arch.nlayers];
    double loss = 0.0;
    int64_t hits = 0;
    for (int start = 0; start < samples; start += model->max_batch) {
        int count = samples - start < model->max_batch ? samples - start : model->max_batch;
        double part_loss = 0.0;
        int64_t part_hits = 0;
        forward(model, inputs + (size_t)start * din, count);
        loss_out(model, labels ? labels + start : NULL,
                 targets ? targets + (size_t)start * outputs : NULL, count, 0, &part_loss,
                 &part_hits);
        loss += part_loss;
        hits += part_hits;
    }
    if (loss_sum)
        *loss_sum = loss;
    if (correct)
        *correct = hits;
    return MODEL_OK;
}

/* FNV-1a over the bytes of value in little-endian order. */
static uint64_t fnv_u32(uint64_t hash, uint32_t value)
{
    for (int i = 0; i < 4; i++) {
        hash ^= (value >> (8 * i)) & 0xffu;
        hash *= 0x100000001b3ULL;
    }
    return hash;
}

uint64_t model_arch_fingerprint(const model_arch_t *arch)
{
    static const char tag[] = "ftrain.mlp.v1";
    uint64_t hash = 0xcbf29ce484222325ULL;
    if (!arch)
        return 0;
    for (const char *p = tag; *p; p++) {
        hash ^= (unsigned char)*p;
        hash *= 0x100000001b3ULL;
    }
    int nlayers = arch->nlayers;
    hash = fnv_u32(hash, (uint32_t)nlayers);
    if (nlayers > MODEL_MAX_LAYERS)
        nlayers = MODEL_MAX_LAYERS;
    for (int i = 0; i <= nlayers && nlayers >= 0; i++)
        hash = fnv_u32(hash, (uint32_t)arch->dims[i]);
    hash = fnv_u32(hash, (uint32_t)arch->act);
    hash = fnv_u32(hash, (uint32_t)arch->loss);
    return rng_mix64(hash);
}

void model_arch_string(const model_arch_t *arch, char *buf, size_t cap)
{
    size_t len = 0;
    if (!buf || cap == 0)
        return;
    buf[0] = '\0';
    if (!arch || arch->nlayers < 1 || arch->nlayers > MODEL_MAX_LAYERS) {
        snprintf(buf, cap, "(invalid)");
        return;
    }
    for (int i = 0; i <= arch->nlayers && len < cap; i++) {
        int wrote = snprintf(buf + len, cap - len, i ? "-%d" : "%d", arch->dims[i]);
        if (wrote < 0)
            return;
        len += (size_t)wrote;
    }
    if (len < cap)
        snprintf(buf + len, cap - len, " %s %s", model_act_name(arch->act),
                 model_loss_name(arch->loss));
}

/* model_act_name(), model_act_parse(), model_act_names() and the same
 * three of model_loss and of model_init. */
UTIL_NAME_FUNCTIONS(model_act, model_act_t, model_acts)
UTIL_NAME_FUNCTIONS(model_loss, model_loss_t, model_losses)
UTIL_NAME_FUNCTIONS(model_init, model_init_t, model_inits)

/*
 * model.h - a multi-layer perceptron on the CPU (OpenBLAS).
 *
 * HowTo: fill a model_arch_t (dims[0] inputs, dims[1..nlayers-1] hidden,
 * dims[nlayers] outputs), model_init() it with the run seed, then per
 * micro-batch call model_forward_backward(), which ADDS the sum over its
 * samples of each sample's loss gradient into a caller-owned flat gradient
 * buffer laid out like the parameters.  The trainer divides by the number of
 * samples of the step after the reduction, so the gradient of a step does not
 * depend on how its micro-batches were spread over ranks.
 *
 * Parameter layout (flat float array, also the checkpoint layout): for each
 * layer l in order, W_l (dims[l+1] x dims[l], row-major) then b_l (dims[l+1]).
 * Hidden layers apply the activation; the last layer is linear and feeds
 * softmax cross-entropy (classification) or mean squared error (regression,
 * per-sample loss = mean over outputs of (pred - y)^2).
 *
 * The results of a call depend only on its inputs, the parameters and the
 * BLAS thread count (see docs/determinism.md).
 */
#ifndef FTRAIN_MODEL_H
#define FTRAIN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#define MODEL_MAX_LAYERS 16

typedef enum { ACT_RELU = 0, ACT_TANH = 1 } model_act_t;
typedef enum { LOSS_XENT = 0, LOSS_MSE = 1 } model_loss_t;

typedef struct {
    int nlayers;                       /* linear layers, >= 1 */
    int dims[MODEL_MAX_LAYERS + 1];
    model_act_t act;
    model_loss_t loss;
} model_arch_t;

typedef struct model model_t;

typedef enum {
    MODEL_OK = 0,
    MODEL_EINVAL = -1,
    MODEL_ENOMEM = -2
} model_err_t;

/**
 * Create a model, initialise its parameters from seed (Kaiming-uniform for
 * ReLU, Xavier-uniform for tanh; biases zero), with workspace for up to
 * max_batch samples per call.
 * @return MODEL_OK, MODEL_EINVAL (bad arch or max_batch) or MODEL_ENOMEM.
 */
int model_init(model_t **out, const model_arch_t *arch, uint64_t seed,
               int max_batch);
/** Release; accepts NULL. */
void model_free(model_t *m);

/** @return the number of float parameters. */
size_t model_num_params(const model_t *m);
/** @return the flat parameter array (owned by m). */
float *model_params(model_t *m);
/** @return the architecture. */
const model_arch_t *model_arch(const model_t *m);
/** Offsets (in floats) of layer l's weight and bias in the flat array. */
void model_layer_offsets(const model_arch_t *a, int l, size_t *w_off,
                         size_t *b_off);

/**
 * Forward and backward over n samples (n <= max_batch).  x is n x dims[0];
 * labels (classification) or y (n x out, regression) are the targets.  Adds
 * the summed per-sample gradient into grad (model_num_params floats).
 * *loss_sum gets the sum of per-sample losses, *correct (may be NULL) the
 * number of argmax hits (classification) or |err| < 0.05 hits (regression).
 * @return MODEL_OK or MODEL_EINVAL.
 */
int model_forward_backward(model_t *m, const float *x, const int32_t *labels,
                           const float *y, int n, float *grad,
                           double *loss_sum, int64_t *correct);

/** Forward only, same outputs as above.  @return MODEL_OK or MODEL_EINVAL. */
int model_evaluate(model_t *m, const float *x, const int32_t *labels,
                   const float *y, int n, double *loss_sum, int64_t *correct);

/** @return a 64-bit fingerprint of the architecture (dims, act, loss). */
uint64_t model_arch_fingerprint(const model_arch_t *a);

/** Write a readable architecture string ("784-256-128-10 relu xent"). */
void model_arch_string(const model_arch_t *a, char *buf, size_t cap);

/** @return "relu"/"tanh", and parse back; -1 when unknown. */
const char *model_act_name(model_act_t a);
int model_act_parse(const char *s);

#endif

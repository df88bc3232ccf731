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
/* How the parameters start (bound b, fan_in = dims[l], fan_out = dims[l+1]):
 *   INIT_TORCH    weights and biases U(-b, b), b = 1/sqrt(fan_in): PyTorch's
 *                 nn.Linear default
 *   INIT_KAIMING  weights b = sqrt(6/fan_in) (Kaiming-uniform, gain sqrt 2),
 *                 biases zero
 *   INIT_XAVIER   weights b = sqrt(6/(fan_in+fan_out)) (Xavier-uniform),
 *                 biases zero */
typedef enum { INIT_TORCH = 0, INIT_KAIMING = 1, INIT_XAVIER = 2 } model_init_t;

typedef struct {
    int nlayers;                       /* linear layers, >= 1 */
    int dims[MODEL_MAX_LAYERS + 1];
    model_act_t act;
    model_loss_t loss;
} model_arch_t;

typedef struct model model_t;

typedef enum {
    MODEL_OK = 0,
    MODEL_EINVAL = -1,  /* a bad architecture, batch size or call argument */
    MODEL_ENOMEM = -2   /* no memory for the parameters or the workspace */
} model_err_t;

/** Room for model_arch_string() of any architecture: MODEL_MAX_LAYERS + 1
 *  widths of up to 8 digits and a dash each, then the two names. */
#define MODEL_ARCH_STRING_MAX (9 * (MODEL_MAX_LAYERS + 1) + 32)

/**
 * Create a model, initialise its parameters from seed with rule `init`,
 * with workspace for up to max_batch samples per call.
 * @return MODEL_OK, or MODEL_EINVAL (bad arch, init or max_batch) /
 *         MODEL_ENOMEM with err naming the field at fault or the memory
 *         asked for.
 */
int model_init_with(model_t **out, const model_arch_t *arch, model_init_t init,
                    uint64_t seed, int max_batch, char *err, size_t cap);
/** model_init_with() with the default rule, INIT_TORCH. */
int model_init(model_t **out, const model_arch_t *arch, uint64_t seed,
               int max_batch, char *err, size_t cap);
/** Release; accepts NULL. */
void model_free(model_t *model);

/** @return the number of float parameters. */
size_t model_num_params(const model_t *model);
/** @return the flat parameter array (owned by model). */
float *model_params(model_t *model);
/** @return the architecture. */
const model_arch_t *model_arch(const model_t *model);
/** Offsets (in floats) of layer `layer`'s weight and bias in the flat
 *  array (both 0 for an invalid architecture or layer). */
void model_layer_offsets(const model_arch_t *arch, int layer, size_t *w_off,
                         size_t *b_off);

/**
 * Forward and backward over `samples` samples (at most max_batch).  inputs
 * is samples x dims[0]; labels (classification) or targets (samples x
 * outputs, regression) are what is learnt.  Adds the summed per-sample
 * gradient into grad (model_num_params floats).
 * *loss_sum gets the sum of per-sample losses, *correct (may be NULL) the
 * number of argmax hits (classification) or |err| < 0.05 hits (regression).
 * @return MODEL_OK, or MODEL_EINVAL for bad arguments (NULL buffers,
 *         samples out of range, a label outside [0, outputs)); nothing is
 *         touched then.
 */
int model_forward_backward(model_t *model, const float *inputs, const int32_t *labels,
                           const float *targets, int samples, float *grad,
                           double *loss_sum, int64_t *correct);

/** Forward only, same outputs as above.  @return MODEL_OK or MODEL_EINVAL. */
int model_evaluate(model_t *model, const float *inputs, const int32_t *labels,
                   const float *targets, int samples, double *loss_sum,
                   int64_t *correct);

/** @return a 64-bit fingerprint of the architecture (dims, act, loss). */
uint64_t model_arch_fingerprint(const model_arch_t *arch);

/** Write a readable architecture string ("784-256-128-10 relu xent") into
 *  buf (MODEL_ARCH_STRING_MAX bytes hold any). */
void model_arch_string(const model_arch_t *arch, char *buf, size_t cap);

/** The one name table of each enumeration: "relu", "tanh"; "xent", "mse";
 *  "torch", "kaiming", "xavier".
 *  _name: "unknown" for a value outside the table; _parse: the value, or
 *  -1 for an unknown name; _names: all names as "relu or tanh" into buf,
 *  for messages (returns buf). */
const char *model_act_name(model_act_t act);
int model_act_parse(const char *name);
const char *model_act_names(char *buf, size_t cap);
const char *model_loss_name(model_loss_t loss);
int model_loss_parse(const char *name);
const char *model_loss_names(char *buf, size_t cap);
const char *model_init_name(model_init_t init);
int model_init_parse(const char *name);
const char *model_init_names(char *buf, size_t cap);

#endif

/*
 * optim.h - SGD with momentum, Adam and AdamW, and learning-rate schedules.
 *
 * HowTo: optim_cfg_default(&cfg), set fields, optim_init(&opt, &cfg,
 * nparams, err, cap); each step call optim_step(opt, params, grad, step)
 * with the step's averaged gradient and the 0-based index of the update.  The update uses
 * optim_lr(&cfg, step).  The state (momentum / first and second moments and
 * the count of updates done) is reachable for checkpoints.
 *
 * Conventions follow PyTorch's torch.optim: SGD  buf = mu*buf + g,
 * p -= lr*buf (weight decay added to g); Adam: L2 weight decay added to g,
 * bias-corrected moments, p -= lr * mhat / (sqrt(vhat) + eps); AdamW:
 * p *= 1 - lr*wd first, then the Adam update without decay in g.
 * Schedules: constant, or linear warm-up over warmup steps to lr followed by
 * a cosine decay to min_lr at total_steps.
 */
#ifndef FTRAIN_OPTIM_H
#define FTRAIN_OPTIM_H

#include <stddef.h>
#include <stdint.h>

typedef enum { OPT_SGD = 0, OPT_ADAM = 1, OPT_ADAMW = 2 } optim_kind_t;
typedef enum { SCHED_CONSTANT = 0, SCHED_COSINE = 1 } sched_kind_t;

typedef struct {
    optim_kind_t kind;
    double lr;
    double momentum;       /* SGD */
    double beta1, beta2;   /* Adam(W) */
    double eps;
    double weight_decay;
    sched_kind_t schedule;
    int64_t warmup_steps;  /* cosine */
    int64_t total_steps;   /* cosine horizon */
    double min_lr;         /* cosine floor */
} optim_cfg_t;

typedef struct optim optim_t;

typedef enum {
    OPTIM_OK = 0,
    OPTIM_EINVAL = -1,  /* a configuration field out of range, or bad arguments */
    OPTIM_ENOMEM = -2   /* no memory for the optimizer's state */
} optim_err_t;

/** Defaults: Adam, lr 1e-3, momentum 0.9, betas 0.9/0.999, eps 1e-8, no
 *  decay, constant schedule. */
void optim_cfg_default(optim_cfg_t *cfg);

/** @return OPTIM_OK, or OPTIM_EINVAL (err names the field and its value) /
 *  OPTIM_ENOMEM (err says how much memory). */
int optim_init(optim_t **out, const optim_cfg_t *cfg, size_t nparams, char *err,
               size_t cap);
/** Release; accepts NULL. */
void optim_free(optim_t *opt);

/** @return the learning rate of the 0-based update `step`. */
double optim_lr(const optim_cfg_t *cfg, int64_t step);

/** The configuration opt runs with, total_steps included (optim_lr of it is
 * the rate opt applies; the caller's copy may lack total_steps). */
const optim_cfg_t *optim_config(const optim_t *opt);

/** Apply update number `step` (0-based).  @return OPTIM_OK, or OPTIM_EINVAL
 *  for a NULL buffer or a negative step (nothing is changed then). */
int optim_step(optim_t *opt, float *params, const float *grad, int64_t step);
/** optim_step with the gradient grad[i] * grad_scale (one float multiply
 *  per element, as if the caller had scaled grad first: the same bits),
 *  which then leaves grad all zeros: a gradient sum becomes a mean, and
 *  the next one can be summed into grad, without a pass of their own. */
int optim_step_consume(optim_t *opt, float *params, float *grad, float grad_scale,
                       int64_t step);

/** State buffers (nparams floats each); the second moment is NULL for SGD. */
float *optim_state_m(optim_t *opt);
float *optim_state_v(optim_t *opt);
/** Number of updates applied so far (restored from checkpoints). */
int64_t optim_updates(const optim_t *opt);
void optim_set_updates(optim_t *opt, int64_t updates);

/** The one name table of each enumeration: "sgd", "adam", "adamw";
 *  "constant", "cosine".  _name: "unknown" for a value outside the table;
 *  _parse: the value, or -1 for an unknown name; _names: all names as
 *  "sgd, adam or adamw" into buf, for messages (returns buf). */
const char *optim_kind_name(optim_kind_t kind);
int optim_kind_parse(const char *name);
const char *optim_kind_names(char *buf, size_t cap);
const char *optim_sched_name(sched_kind_t sched);
int optim_sched_parse(const char *name);
const char *optim_sched_names(char *buf, size_t cap);

#endif

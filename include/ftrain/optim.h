/*
 * optim.h - SGD with momentum, Adam and AdamW, and learning-rate schedules.
 *
 * HowTo: optim_cfg_default(&cfg), set fields, optim_init(&o, &cfg, nparams);
 * each step call optim_step(o, params, grad, step) with the step's averaged
 * gradient and the 0-based index of the update.  The update uses
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

/** Defaults: Adam, lr 1e-3, momentum 0.9, betas 0.9/0.999, eps 1e-8, no
 *  decay, constant schedule. */
void optim_cfg_default(optim_cfg_t *cfg);

/** @return 0, or -1 for a bad config / nparams, -2 for no memory. */
int optim_init(optim_t **out, const optim_cfg_t *cfg, size_t nparams);
/** Release; accepts NULL. */
void optim_free(optim_t *o);

/** @return the learning rate of the 0-based update `step`. */
double optim_lr(const optim_cfg_t *cfg, int64_t step);

/** The configuration o runs with, total_steps included (optim_lr of it is
 * the rate o applies; the caller's copy may lack total_steps). */
const optim_cfg_t *optim_config(const optim_t *o);

/** Apply update number `step` (0-based).  @return 0. */
int optim_step(optim_t *o, float *params, const float *grad, int64_t step);

/** State buffers (nparams floats each); v is NULL for SGD. */
float *optim_state_m(optim_t *o);
float *optim_state_v(optim_t *o);
/** Number of updates applied so far (restored from checkpoints). */
int64_t optim_updates(const optim_t *o);
void optim_set_updates(optim_t *o, int64_t n);

/** Names: "sgd", "adam", "adamw"; "constant", "cosine".  Parse: -1 unknown. */
const char *optim_kind_name(optim_kind_t k);
int optim_kind_parse(const char *s);
const char *optim_sched_name(sched_kind_t s);
int optim_sched_parse(const char *s);

#endif

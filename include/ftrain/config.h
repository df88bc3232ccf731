/*
 * config.h - the run's options: defaults, parsing, validation, help text.
 *
 * HowTo: config_defaults(&c); rc = config_parse(&c, argc, argv, err, cap);
 * rc is CONFIG_RUN (go on), CONFIG_HELP or CONFIG_VERSION (printed; exit 0)
 * or CONFIG_EUSAGE (err says what is wrong; exit 2).  config_to_json()
 * writes the trajectory-defining options for checkpoints and metrics.
 */
#ifndef FTRAIN_CONFIG_H
#define FTRAIN_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "ftrain/model.h"
#include "ftrain/optim.h"

#define FTRAIN_VERSION "0.1.0"
#define CONFIG_PATH_MAX 1024

typedef enum {
    CONFIG_RUN = 0,
    CONFIG_HELP = 1,
    CONFIG_VERSION = 2,
    CONFIG_EUSAGE = -1
} config_rc_t;

typedef struct {
    /* data and model */
    char data[32];
    char data_dir[CONFIG_PATH_MAX];
    int nhidden;
    int hidden[MODEL_MAX_LAYERS];
    model_act_t act;
    /* optimisation */
    optim_cfg_t opt;
    int64_t epochs;        /* 0 when --steps is given */
    int64_t steps;         /* 0 when --epochs is given */
    int64_t global_batch;
    int64_t micro_batch;
    uint64_t seed;
    int deterministic;
    int threads;           /* 0: cores per node / ranks per node */
    char device[8];        /* auto, cpu or cuda */
    /* run directory, checkpoints and resume */
    char run_dir[CONFIG_PATH_MAX];
    char resume[CONFIG_PATH_MAX]; /* "auto", "none" or a step directory */
    int64_t ckpt_every;    /* steps, 0 off */
    double ckpt_interval;  /* seconds, 0 off */
    int ckpt_keep;
    int ckpt_async;
    int ckpt_level;
    int ckpt_threads;      /* compression threads per rank, 0: cores/ranks */
    int ckpt_buffered;     /* 1: shards through the page cache, not O_DIRECT */
    int ckpt_no_adapt;     /* 1: never store frames to keep up with the disk */
    /* signals and logging */
    int stop_signal;       /* SIGUSR1 by default */
    double grace;          /* seconds a stop may take before we warn */
    int64_t log_every;     /* steps between progress lines, 0 auto */
    int step_delay_ms;     /* test aid: sleep per step */
    char trace_samples[CONFIG_PATH_MAX]; /* test aid: per-rank sample log */
    int quiet;
} config_t;

void config_defaults(config_t *c);

/** Parse argv into c (after defaults).  @return a config_rc_t; on
 *  CONFIG_EUSAGE err holds a one-line message. */
int config_parse(config_t *c, int argc, char **argv, char *err, size_t cap);

/** Print the help text. */
void config_usage(FILE *out);

/** Write the options that define the training trajectory as a JSON object
 *  into buf.  @return the length, or -1 when buf is too small. */
int config_to_json(const config_t *c, char *buf, size_t cap);

/** @return the name of a signal number ("USR1"), or "?" */
const char *config_signal_name(int sig);

#endif

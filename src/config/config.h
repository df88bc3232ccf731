/*
 * config.h - the run's options: defaults, parsing, validation, help text.
 *
 * HowTo: config_defaults(&cfg); rc = config_parse(&cfg, argc, argv, err, cap);
 * rc is CONFIG_RUN (go on), CONFIG_HELP or CONFIG_VERSION (printed; exit 0)
 * or CONFIG_EUSAGE (err says what is wrong; exit 2).  config_to_json()
 * writes the trajectory-defining options for checkpoints and metrics.
 *
 * Every option is one row of one table (config_options(), config_table.c):
 * the row drives its parsing and range check (config.c), its default and
 * its --help line (config_help.c).  config_parse() is
 * config_parse_options() (each option alone), then config_check() (options
 * against each other), then the values one option implies for another
 * (--steps sets epochs to 0; no --run-dir means --resume none).
 */
#ifndef FTRAIN_CONFIG_H
#define FTRAIN_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ftrain/version.h"
#include "nn/model.h"
#include "nn/optim.h"

#define CONFIG_PATH_MAX 1024
/* --global-batch not given: CONFIG_BATCH_DEFAULT, or, for a training set
 * smaller than that, the largest multiple of --micro-batch it holds; the
 * trainer resolves it once the data is loaded (config_resolve_batch). */
#define CONFIG_BATCH_AUTO 0
#define CONFIG_BATCH_DEFAULT 128

/* --hang-timeout not given: the limit is derived from the run (watchdog.h). */
#define CONFIG_HANG_AUTO (-1.0)

typedef enum {
    CONFIG_RUN = 0,
    CONFIG_HELP = 1,
    CONFIG_VERSION = 2,
    CONFIG_EUSAGE = -1,  /* a bad or conflicting option; err says which */
    CONFIG_ENOSPACE = -2 /* config_to_json: buffer too small, or no memory */
} config_rc_t;

/* --ckpt-local-exchange: which thread moves the partner copies' bytes. */
enum {
    CONFIG_EXCHANGE_AUTO = 0,   /* the helper where every rank has a core to
                                   spare for it, else the training thread */
    CONFIG_EXCHANGE_THREAD = 1, /* the tier's helper thread (MPI_THREAD_MULTIPLE) */
    CONFIG_EXCHANGE_STEPS = 2   /* the training thread, at step boundaries */
};

/** What --device asks for.  config_t keeps the name as text (device_choose()
 *  of the parallel layer parses it); this is the one table of the names:
 *  "auto", "cpu", "cuda". */
typedef enum {
    CONFIG_DEVICE_AUTO = 0, /* a GPU when one can serve every rank, else the CPU */
    CONFIG_DEVICE_CPU = 1,
    CONFIG_DEVICE_CUDA = 2  /* a GPU per local rank, or an error */
} config_device_t;

/** _name: "unknown" for a value outside the table; _parse: the value, or -1
 *  for an unknown name; _names: "auto, cpu or cuda" into buf, for messages
 *  (returns buf). */
const char *config_device_name(config_device_t device);
int config_device_parse(const char *name);
const char *config_device_names(char *buf, size_t cap);

typedef struct {
    /* data and model */
    char data[32];
    char data_dir[CONFIG_PATH_MAX];
    int nhidden;
    int hidden[MODEL_MAX_LAYERS];
    model_act_t act;
    model_init_t init;     /* how the parameters start (a fresh run) */
    /* optimisation */
    optim_cfg_t opt;
    int64_t epochs;        /* 0 when --steps is given */
    int64_t steps;         /* 0 when --epochs is given */
    int64_t global_batch;  /* CONFIG_BATCH_AUTO until the trainer resolves it */
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
    char ckpt_local[CONFIG_PATH_MAX]; /* node-local tier root ("%n": node), "" off */
    int64_t ckpt_local_every;  /* local checkpoint every N steps, 0 off */
    double ckpt_local_interval;/* ...or when SEC passed since the last, 0 off */
    int ckpt_local_keep;   /* local checkpoints a node keeps (1 or 2) */
    int ckpt_local_level;  /* zstd level of local shards (0: stored) */
    int ckpt_local_exchange; /* CONFIG_EXCHANGE_*: who moves the partner copies */
    int64_t ckpt_flush_every; /* every K-th local checkpoint also to the shared tier */
    int ckpt_local_remove_at_end; /* each node removes its tier when the run ends
                                     with its newest state on the shared tier */
    /* signals and logging */
    int stop_signal;       /* SIGUSR1 by default */
    double grace;          /* seconds a stop may take before we warn */
    double hang_timeout;   /* seconds without progress: a hang; 0 off;
                              CONFIG_HANG_AUTO derived from the run */
    int no_liveness;       /* 1: no ring of connections between the ranks
                              (parallel/liveness.h): a rank that dies is
                              noticed by the heartbeats only */
    int64_t log_every;     /* steps between progress lines, 0: by time */
    double log_interval;   /* seconds between progress lines when log_every
                              is 0 (the last step is always shown) */
    int step_delay_ms;     /* test aid: sleep per step */
    int ckpt_local_copy_delay_ms; /* test aid: the local save's helper waits this
                                     long before it copies the snapshot */
    double mtbf_hours;     /* the job's mean time between failures, for the
                              Young/Daly checkpoint interval it prints */
    char fault[64];        /* test aid: --fault KIND@STEP[:RANK], "" none */
    int fault_signal;      /* ...parsed: the signal raised (0 none) */
    int64_t fault_step;    /* ...once this many steps are done */
    int fault_rank;        /* ...on this rank (-1: every rank) */
    char trace_samples[CONFIG_PATH_MAX]; /* test aid: per-rank sample log */
    int quiet;
} config_t;

/* ---- the option table ---------------------------------------------------- */

/** How an option's value is read, and the type of the field it sets. */
typedef enum {
    CONFIG_ARG_FLAG,   /* no value; sets an int field to 1 */
    CONFIG_ARG_INT,    /* whole number in ints: an int or int64_t field */
    CONFIG_ARG_REAL,   /* finite number in reals: a double field */
    CONFIG_ARG_TEXT,   /* any text that fits (text rule): a char array */
    CONFIG_ARG_ENUM,   /* a name of `names`; its value into an int/enum field */
    CONFIG_ARG_CHOICE, /* a name of `names`, kept as text: a char array */
    CONFIG_ARG_LAYERS, /* "256,128" or "none": nhidden and hidden[] */
    CONFIG_ARG_ACTION  /* no value; config_parse returns the row's action */
} config_arg_t;

/** The names an enumerated option accepts: its enumeration's one name
 *  table, reached through the owning module's functions. */
typedef struct {
    int (*parse)(const char *name);              /* the value, or -1 */
    const char *(*names)(char *buf, size_t cap); /* "a, b or c", for messages */
    const char *prefix; /* a prefix a user may add ("SIG"), or NULL */
    const char *noun;   /* "data set": says "unknown data set 'x' (a or b)"
                         * instead of "expected a or b, got 'x'" */
} config_enum_t;

typedef struct {
    int64_t min, max;
} config_int_range_t;

enum { CONFIG_OPEN_MIN = 1u << 0, CONFIG_OPEN_MAX = 1u << 1 };

typedef struct {
    double min, max;
    unsigned open; /* CONFIG_OPEN_*: that bound itself is refused */
} config_real_range_t;

typedef struct {
    size_t reserve;      /* bytes of the field kept for what is appended */
    int nonempty;        /* 1: "" is refused */
    const char *refusal; /* the message after "--NAME: " */
} config_text_rule_t;

typedef struct {
    const char *name;         /* long name, without "--" */
    char short_name;          /* 0: none */
    config_arg_t kind;
    size_t offset, size;      /* the config_t field it sets */
    const char *metavar;      /* the value's name in --help; NULL for none */
    const char *default_text; /* as a user would type it; NULL: 0 / off /
                               * empty, which the help text explains */
    config_int_range_t ints;
    config_real_range_t reals;
    int max_is_cap;           /* numbers: the maximum only guards against
                               * absurd values; messages name it only to a
                               * value above it, else say ">= min" */
    const char *unit;         /* numbers: "seconds"; NULL: "a (whole) number" */
    const config_enum_t *names;
    config_text_rule_t text;
    config_rc_t action;       /* CONFIG_ARG_ACTION */
    const char *section;      /* --help heading that starts at this row */
    const char *join;         /* shares the previous row's --help line,
                               * after this separator (" | ") */
    const char *help;         /* lines after the first are indented */
} config_option_t;

/** The options in --help order; *count gets their number. */
const config_option_t *config_options(size_t *count);

/** @return the row of the option named long_name (no "--"), or NULL. */
const config_option_t *config_option_find(const char *long_name);

/** The options a command line gave: some conflicts depend on whether an
 *  option was given, not on its value.  One bit per table row. */
typedef struct {
    uint64_t rows;
} config_given_t;

/** Mark long_name as given.  @return CONFIG_RUN, or CONFIG_EUSAGE when no
 *  option has that name. */
int config_given_add(config_given_t *given, const char *long_name);

/** @return 1 when long_name was given, else 0. */
int config_given_has(const config_given_t *given, const char *long_name);

/* ---- defaults, parsing, checks ------------------------------------------- */

/** Every field to its default (the table's, and optim_cfg_default()). */
void config_defaults(config_t *cfg);

/** Parse argv into cfg (after defaults).  @return a config_rc_t; on
 *  CONFIG_EUSAGE err holds a one-line message. */
int config_parse(config_t *cfg, int argc, char **argv, char *err, size_t cap);

/** Parse each option of argv into cfg and mark it in given, without
 *  checking options against each other.  @return a config_rc_t. */
int config_parse_options(config_t *cfg, config_given_t *given, int argc, char **argv,
                         char *err, size_t cap);

/** Check the options against each other (e.g. --epochs with --steps).
 *  @return CONFIG_RUN, or CONFIG_EUSAGE with a message in err. */
int config_check(const config_t *cfg, const config_given_t *given, char *err, size_t cap);

/** Resolve --global-batch when it was not given (CONFIG_BATCH_AUTO) for a
 *  training set of `samples`: CONFIG_BATCH_DEFAULT when it fits, else the
 *  largest multiple of --micro-batch that does (left at the default when
 *  none does: the sampler then names the micro-batch).  A given value is
 *  kept.  @return 1 when the default was lowered to fit, else 0. */
int config_resolve_batch(config_t *cfg, int64_t samples);

/** Where the options only show their trouble once the run's length in
 *  steps is known: a cosine warm-up of total_steps or more (the rate never
 *  decays).  @return 1 with a one-line warning in msg, else 0. */
int config_schedule_warning(const config_t *cfg, int64_t total_steps, char *msg, size_t cap);

/** @return 1 when path text `inner` is `outer` or lies inside it, both
 *  without "." or ".." components, repeated or trailing slashes ("" is the
 *  working directory); 0 otherwise, and always when one is absolute and
 *  the other relative. */
int config_path_within(const char *inner, const char *outer);

/** Print the help text. */
void config_usage(FILE *out);

/** Write the options that define the training trajectory as a JSON object
 *  into buf.  @return the length, or CONFIG_ENOSPACE. */
int config_to_json(const config_t *cfg, char *buf, size_t cap);

/** @return the name of a signal number ("USR1"), or "?" */
const char *config_signal_name(int sig);

#endif

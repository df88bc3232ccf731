/*
 * settings.h - ftrain-supervise's settings: the environment that
 * slurm/train.sbatch documents (FTRAIN_*, RUN_DIR, SLURM_*) and the
 * command line (the arguments for ftrain), read and checked once, before
 * anything is launched.  A bad value is refused with a message that names
 * the variable and what it holds; the program then exits 2.
 *
 * HowTo: sv_config_t c; if (settings_load(&c, argc, argv, environ-reader,
 * err, cap) != 0) { print err; exit 2; } ... settings_free(&c).  The
 * target (what the launcher runs on each node: ftrain and its options, or
 * FTRAIN_PROGRAM's command line) is an argv vector: a path with blanks or
 * quotes reaches the program as it was given.  settings_load creates
 * RUN_DIR (mkdir -p).
 *
 * Nothing here exits or prints.
 */
#ifndef FTRAIN_SUPERVISE_SETTINGS_H
#define FTRAIN_SUPERVISE_SETTINGS_H

#include <stddef.h>
#include <stdint.h>

#include "supervise/policy.h"

typedef enum { SV_SRUN = 0, SV_MPIRUN } sv_launcher_t;

/* A vector of strings that owns them (NULL-terminated, for execvp). */
typedef struct {
    char **v;
    int n, cap;
} sv_argv_t;

/** Append a copy of s.  @return 0, or -1 when out of memory. */
int argv_push(sv_argv_t *a, const char *s);
/** Append each blank-separated word of text (no globbing, no quoting: as
 *  the shell splits an unquoted variable under set -f).  @return 0 or -1. */
int argv_push_words(sv_argv_t *a, const char *text);
/** Free every string and the vector; a zeroed one is fine. */
void argv_free(sv_argv_t *a);

typedef struct {
    char log_name[64];       /* the name in each log line (--log-name) */
    sv_settings_t policy;    /* the caps and the stop signal */
    sv_launcher_t launcher;  /* FTRAIN_LAUNCH */
    const char *launcher_name;
    const char *stop_name;   /* "USR1" or "USR2" */
    int slurm_timeout;       /* FTRAIN_SLURM_TIMEOUT, seconds */
    int kill_timeout;        /* FTRAIN_KILL_TIMEOUT, seconds (mpirun) */
    int tasks_per_node;      /* FTRAIN_TASKS_PER_NODE, 0 when unset */
    int per_node;            /* the first launch's ranks per node (first_per) */
    int deputy;              /* FTRAIN_DEPUTY: 1 a deputy step watches this batch host */
    int deputy_stale;        /* FTRAIN_DEPUTY_STALE, seconds */
    /* The job. */
    char job_id[SV_NAME_MAX], array_job_id[SV_NAME_MAX], array_task_id[SV_NAME_MAX];
    int array_task;          /* 1: the array variables are this job's */
    char job_ref[2 * SV_NAME_MAX]; /* for the log and names: <array>_<task> */
    char self[2 * SV_NAME_MAX];    /* what scontrol and squeue are given */
    int64_t restarts;        /* SLURM_RESTART_COUNT */
    int job_nodes;           /* SLURM_JOB_NUM_NODES, 0 when unknown */
    /* What runs. */
    char run_dir[4096];
    char trainer[256];       /* "ftrain", or the program's base name (log) */
    sv_argv_t target;        /* the program and its arguments */
    sv_argv_t launcher_args; /* FTRAIN_SRUN_ARGS or FTRAIN_MPIRUN_ARGS */
    char local_dir[4096];    /* the node-local tier's job directory, "" */
} sv_config_t;

/* Where an option comes from: getenv in the program, a table in tests. */
typedef const char *(*sv_getenv_fn)(const char *name);

/** Read and check the settings from argv (argv[1..]: --log-name NAME,
 *  --installed-ftrain PATH (the ftrain `make install` put beside the batch
 *  script: tried after the submit directory's build), --help, --version,
 *  "--", then ftrain's arguments) and the environment.
 *  @return 0; 1 when --help or --version was asked (err holds the text to
 *  print on stdout); -1 with err saying what is wrong (exit 2). */
int settings_load(sv_config_t *c, int argc, char **argv, sv_getenv_fn env, char *err,
                  size_t cap);

/** Expand sbatch's filename patterns in pattern into out: %j, %A, %a, %x,
 *  %u and %%.  @return 0, or -1 with err naming the pattern refused. */
int settings_expand_run_dir(const sv_config_t *c, const char *pattern, const char *job_name,
                            const char *user, char *out, size_t outcap, char *err,
                            size_t cap);

/** Free what settings_load allocated. */
void settings_free(sv_config_t *c);

/** The usage text (--help). */
extern const char settings_usage[];

#endif

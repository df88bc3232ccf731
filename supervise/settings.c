/*
 * settings.c - ftrain-supervise's settings (settings.h): the environment
 * slurm/train.sbatch documents and the arguments for ftrain, checked
 * before anything is launched, with the same messages as the script.
 */
#include "supervise/settings.h"

#include <errno.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ftrain/version.h"
#include "util/util.h"

const char settings_usage[] =
    "usage: ftrain-supervise [--log-name NAME] [--installed-ftrain PATH] [--] [ftrain options...]\n"
    "       ftrain-supervise --help | --version\n"
    "       ftrain-supervise --deputy --heartbeat FILE --watch NODE --job REF --restart N\n"
    "           [--max-restarts N] [--stale SECONDS] [--slurm-timeout SECONDS]\n"
    "           [--requeue-exclude 0|1] [--log-name NAME] [--log-job REF]\n"
    "           [--job-output FILE]\n"
    "\n"
    "Run ftrain (or FTRAIN_PROGRAM) under SLURM from inside a batch job: launch\n"
    "it with srun or mpirun, forward the stop signal, relaunch inside the\n"
    "allocation after a failure that is not the user's, requeue after a\n"
    "checkpoint.  With more than one node it first checks that RUN_DIR is\n"
    "shared (exit 2 when a node does not see it) and starts a deputy step on\n"
    "another node that requeues the job if the batch host is lost (--deputy:\n"
    "that step; not for use by hand).  Settings come from the environment\n"
    "(FTRAIN, FTRAIN_PROGRAM, RUN_DIR, FTRAIN_ARGS, FTRAIN_LAUNCH,\n"
    "FTRAIN_MAX_RESTARTS, FTRAIN_DEPUTY, ...): see ftrain-supervise(1) and\n"
    "docs/slurm.md.\n"
    "\n"
    "Exit status: 0 training finished; 75 checkpointed but not requeued; 143\n"
    "TERM before the first launch; 2 a configuration error; else the last\n"
    "launch's failing status.\n";

int argv_push(sv_argv_t *a, const char *s)
{
    if (a->n + 2 > a->cap) {
        int cap = a->cap ? 2 * a->cap : 16;
        char **v = realloc(a->v, (size_t)cap * sizeof *v);
        if (!v)
            return -1;
        a->v = v;
        a->cap = cap;
    }
    if (!(a->v[a->n] = strdup(s)))
        return -1;
    a->v[++a->n] = NULL;
    return 0;
}

int argv_push_words(sv_argv_t *a, const char *text)
{
    const char *p = text ? text : "";
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == '\n')
            p++;
        size_t len = strcspn(p, " \t\n");
        if (len == 0)
            break;
        char *w = strndup(p, len);
        int rc = w ? argv_push(a, w) : -1;
        free(w);
        if (rc != 0)
            return -1;
        p += len;
    }
    return 0;
}

void argv_free(sv_argv_t *a)
{
    for (int i = 0; i < a->n; i++)
        free(a->v[i]);
    free(a->v);
    memset(a, 0, sizeof *a);
}

void settings_free(sv_config_t *c)
{
    argv_free(&c->target);
    argv_free(&c->launcher_args);
}

/* Parse text as a whole number from lo to hi (at most digits digits).
 * @return 0, or -1 when it is empty, not all digits or out of range. */
static int parse_count(const char *text, int64_t lo, int64_t hi, int64_t *out)
{
    size_t len = strlen(text);
    if (len == 0 || len > 10 || strspn(text, "0123456789") != len)
        return -1;
    int64_t v = strtoll(text, NULL, 10);
    if (v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* One numeric setting: name, its default, its range and the words of its
 * message ("a number from 0 to 99999"). */
typedef struct {
    const char *name, *dflt;
    int64_t lo, hi;
    const char *must;
} num_opt_t;

static const num_opt_t num_opts[] = {
    {"FTRAIN_MAX_RESTARTS", "20", 0, 999999999, "a number below 10^9"},
    {"FTRAIN_TASKS_PER_NODE", "", 1, 99999, "a number of ranks from 1 to 99999"},
    {"FTRAIN_MAX_RELAUNCHES", "3", 0, SV_HISTORY_MAX, "a number from 0 to 64"},
    {"FTRAIN_MIN_NODES", "1", 1, 99999, "a number of nodes from 1 to 99999"},
    {"FTRAIN_RELAUNCH_NEED", "60", 0, 999999999, "whole seconds below 10^9"},
    {"FTRAIN_SLURM_TIMEOUT", "20", 1, 99999, "whole seconds from 1 to 99999"},
    {"FTRAIN_REQUEUE_EXCLUDE", "0", 0, 1, "0 or 1"},
    {"FTRAIN_KILL_TIMEOUT", "15", 0, 99999, "whole seconds below 10^5"},
    {"FTRAIN_DEPUTY", "1", 0, 1, "0 or 1"},
    {"FTRAIN_DEPUTY_STALE", "60", 5, 99999, "whole seconds from 5 to 99999"},
};
enum { N_NUM = sizeof num_opts / sizeof num_opts[0] };

static int load_numbers(sv_config_t *c, sv_getenv_fn env, char *err, size_t cap)
{
    int64_t v[N_NUM];
    for (int i = 0; i < N_NUM; i++) {
        const char *s = env(num_opts[i].name);
        int unset = !s || (!*s && num_opts[i].dflt[0] == '\0');
        if (unset && num_opts[i].dflt[0] == '\0') {
            v[i] = 0;
            continue;
        }
        if (!s || !*s)
            s = num_opts[i].dflt;
        if (parse_count(s, num_opts[i].lo, num_opts[i].hi, &v[i]) != 0)
            return util_fail(err, cap, -1, "%s must be %s, got '%s'", num_opts[i].name,
                             num_opts[i].must, s);
    }
    c->policy.max_restarts = v[0];
    c->tasks_per_node = (int)v[1];
    c->policy.max_relaunches = (int)v[2];
    c->policy.min_nodes = (int)v[3];
    c->policy.relaunch_need_s = (double)v[4];
    c->slurm_timeout = (int)v[5];
    c->policy.requeue_exclude = (int)v[6];
    c->kill_timeout = (int)v[7];
    c->deputy = (int)v[8];
    c->deputy_stale = (int)v[9];
    return 0;
}

/* @return 1 when path is a regular file this process may execute. */
static int executable(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* Find name as execvp would (a name with '/' as it is).  @return 1 when
 * found, with the path in out. */
static int find_on_path(const char *name, char *out, size_t cap)
{
    if (strchr(name, '/')) {
        snprintf(out, cap, "%s", name);
        return executable(name);
    }
    const char *path = getenv("PATH");
    for (const char *p = path ? path : "/usr/bin:/bin"; p; p = strchr(p, ':') ? strchr(p, ':') + 1 : NULL) {
        size_t len = strcspn(p, ":");
        if (snprintf(out, cap, "%.*s/%s", (int)len, len ? p : ".", name) < (int)cap &&
            executable(out))
            return 1;
    }
    return 0;
}

int settings_expand_run_dir(const sv_config_t *c, const char *pattern, const char *job_name,
                            const char *user, char *out, size_t outcap, char *err,
                            size_t cap)
{
    size_t o = 0;
    for (const char *p = pattern; *p; p++) {
        const char *add;
        char one[2] = {*p, 0};
        if (*p != '%') {
            add = one;
        } else {
            switch (*++p) {
            case 'j': add = c->job_id; break;
            case 'A': add = c->array_task ? c->array_job_id : c->job_id; break;
            case 'a': add = c->array_task ? c->array_task_id : "0"; break;
            case 'x': add = job_name; break;
            case 'u': add = user; break;
            case '%': add = "%"; break;
            default:
                return util_fail(err, cap, -1,
                                 "RUN_DIR '%s' holds '%%%.1s': the script expands only %%j, "
                                 "%%A, %%a, %%x, %%u and %%%% in it",
                                 pattern, p);
            }
        }
        size_t len = strlen(add);
        if (o + len >= outcap)
            return util_fail(err, cap, -1, "RUN_DIR '%s' is too long once expanded", pattern);
        memcpy(out + o, add, len);
        o += len;
        if (!*p)
            break;
    }
    out[o] = '\0';
    return 0;
}

/* The job: ids, job_ref, self, restarts, node count. */
static int load_job(sv_config_t *c, sv_getenv_fn env, char *err, size_t cap)
{
    const char *id = env("SLURM_JOB_ID"), *aj = env("SLURM_ARRAY_JOB_ID"),
               *at = env("SLURM_ARRAY_TASK_ID");
    if (!id || !*id)
        return util_fail(err, cap, -1,
                         "SLURM_JOB_ID is not set: submit this script with sbatch");
    if (strlen(id) >= SV_NAME_MAX || (aj && strlen(aj) >= SV_NAME_MAX) ||
        (at && strlen(at) >= SV_NAME_MAX))
        return util_fail(err, cap, -1, "SLURM_JOB_ID or the array ids are too long");
    snprintf(c->job_id, sizeof c->job_id, "%s", id);
    snprintf(c->array_job_id, sizeof c->array_job_id, "%s", aj ? aj : "");
    snprintf(c->array_task_id, sizeof c->array_task_id, "%s", at ? at : "");
    c->array_task = c->array_job_id[0] && c->array_task_id[0];
    if (c->array_task)
        snprintf(c->job_ref, sizeof c->job_ref, "%s_%s", c->array_job_id, c->array_task_id);
    else
        snprintf(c->job_ref, sizeof c->job_ref, "%s", c->job_id);
    supervise_job_ref(c->job_id, c->array_job_id, c->array_task_id, c->self, sizeof c->self);
    int64_t v = 0;
    const char *rs = env("SLURM_RESTART_COUNT");
    c->restarts = rs && parse_count(rs, 0, 999999999, &v) == 0 ? v : 0;
    const char *nn = env("SLURM_JOB_NUM_NODES");
    c->job_nodes = nn && parse_count(nn, 1, 99999, &v) == 0 ? (int)v : 0;
    return 0;
}

/* first_per: the first launch's ranks per node, for the relaunches
 * (train.sbatch's rule: FTRAIN_TASKS_PER_NODE, SLURM_NTASKS_PER_NODE, the
 * most of SLURM_TASKS_PER_NODE when -n was given, else 1). */
static int first_per(const sv_config_t *c, sv_getenv_fn env)
{
    if (c->tasks_per_node > 0)
        return c->tasks_per_node;
    int64_t v;
    const char *s = env("SLURM_NTASKS_PER_NODE");
    if (s) {
        char head[16];
        snprintf(head, sizeof head, "%.*s", (int)strcspn(s, "("), s);
        if (parse_count(head, 1, 99999, &v) == 0)
            return (int)v;
    }
    const char *t = env("SLURM_NTASKS");
    if (!t || !*t)
        t = env("SLURM_NPROCS");
    long max = 0;
    for (const char *p = env("SLURM_TASKS_PER_NODE"); p && *p;) {
        long n = strtol(p, NULL, 10);
        max = n > max && n < 100000 ? n : max;
        p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL;
    }
    if (t && *t) {
        if (max >= 1)
            return (int)max;
        int64_t tasks;
        if (parse_count(t, 1, 999999999, &tasks) == 0 && c->job_nodes > 0)
            return (int)((tasks + c->job_nodes - 1) / c->job_nodes);
    } else if (c->launcher == SV_MPIRUN && max >= 1) {
        return (int)max;
    }
    return 1;
}

/* ftrain's arguments: FTRAIN_ARGS then argv; --run-dir taken out (RUN_DIR
 * is it), --stop-signal checked, the node-local tier's directory added. */
static int ftrain_target(sv_config_t *c, sv_getenv_fn env, const sv_argv_t *args,
                         const char *ftrain, char *err, size_t cap)
{
    int rc = argv_push(&c->target, ftrain) || argv_push(&c->target, "--run-dir") ||
             argv_push(&c->target, c->run_dir);
    const char *asked = NULL;
    int want_local = 0, has_local = 0;
    for (int i = 0; rc == 0 && i < args->n; i++) {
        const char *a = args->v[i];
        if (strcmp(a, "--run-dir") == 0) {
            i++;
            continue;
        }
        if (strncmp(a, "--run-dir=", 10) == 0)
            continue;
        if (strcmp(a, "--stop-signal") == 0 && i + 1 < args->n)
            asked = args->v[i + 1];
        else if (strncmp(a, "--stop-signal=", 14) == 0)
            asked = a + 14;
        if (strncmp(a, "--ckpt-local-every", 18) == 0 ||
            strncmp(a, "--ckpt-local-interval", 21) == 0)
            want_local = 1;
        if (strcmp(a, "--ckpt-local") == 0 || strncmp(a, "--ckpt-local=", 13) == 0)
            has_local = 1;
        rc = argv_push(&c->target, a);
    }
    if (rc != 0)
        return util_fail(err, cap, -1, "out of memory");
    if (!asked)
        rc = argv_push(&c->target, "--stop-signal") || argv_push(&c->target, c->stop_name);
    else if (strcmp(strncmp(asked, "SIG", 3) == 0 ? asked + 3 : asked, c->stop_name) != 0)
        return util_fail(err, cap, -1,
                         "ftrain is given --stop-signal %s but FTRAIN_STOP_SIGNAL is %s: set "
                         "both the same",
                         asked, c->stop_name);
    if (rc != 0 || !want_local || has_local)
        return rc ? util_fail(err, cap, -1, "out of memory") : 0;
    /* The node-local tier: FTRAIN_LOCAL_ROOT/ftrain-job-<job id>/<node>. */
    const char *root = env("FTRAIN_LOCAL_ROOT");
    if (!root || !*root)
        root = "/dev/shm";
    if (root[0] != '/')
        return util_fail(err, cap, -1, "FTRAIN_LOCAL_ROOT must be an absolute path, got '%s'",
                         root);
    if (strchr(root, '%'))
        return util_fail(err, cap, -1,
                         "FTRAIN_LOCAL_ROOT must not hold '%%' (the script adds "
                         "/ftrain-job-<job id>/%%n), got '%s'",
                         root);
    if (strspn(c->job_id, "0123456789") != strlen(c->job_id))
        return util_fail(err, cap, -1, "SLURM_JOB_ID must be a job number, got '%s'",
                         c->job_id);
    size_t len = strlen(root);
    while (len > 1 && root[len - 1] == '/')
        len--;
    char local[sizeof c->local_dir + 8];
    snprintf(c->local_dir, sizeof c->local_dir, "%.*s/ftrain-job-%s", (int)len, root,
             c->job_id);
    snprintf(local, sizeof local, "%s/%%n", c->local_dir);
    if (argv_push(&c->target, "--ckpt-local") || argv_push(&c->target, local) ||
        argv_push(&c->target, "--ckpt-local-remove-at-end"))
        return util_fail(err, cap, -1, "out of memory");
    return 0;
}

/* The trainer: ftrain (FTRAIN, the submit directory's build, the
 * installed one, PATH) or FTRAIN_PROGRAM; RUN_DIR; the target. */
static int load_target(sv_config_t *c, sv_getenv_fn env, const sv_argv_t *args,
                       const char *installed, char *err, size_t cap)
{
    const char *program = env("FTRAIN_PROGRAM");
    const char *fargs = env("FTRAIN_ARGS");
    char ftrain[4096] = "", found[4096];
    int rc = 0;
    sv_argv_t all = {0};
    if (program && *program) {
        if (argv_push_words(&c->target, program) != 0)
            return util_fail(err, cap, -1, "out of memory");
        if (c->target.n == 0)
            return util_fail(err, cap, -1, "FTRAIN_PROGRAM is blank: set it to the command "
                                           "line of the program to run");
        if (!find_on_path(c->target.v[0], found, sizeof found))
            return util_fail(err, cap, -1,
                             "FTRAIN_PROGRAM's command '%s' is not found or not executable",
                             c->target.v[0]);
        if (fargs && *fargs)
            return util_fail(err, cap, -1,
                             "FTRAIN_ARGS holds ftrain's options, which FTRAIN_PROGRAM's "
                             "program does not get: put its arguments in FTRAIN_PROGRAM or "
                             "after the script's name");
        c->policy.program = 1;
        snprintf(c->trainer, sizeof c->trainer, "%s", util_base_name(c->target.v[0]));
    } else {
        const char *f = env("FTRAIN"), *submit = env("SLURM_SUBMIT_DIR");
        char cwd[4096] = ".", looked[8400] = "";
        if (!submit || !*submit)
            submit = getcwd(cwd, sizeof cwd) ? cwd : ".";
        if (f && *f) {
            snprintf(ftrain, sizeof ftrain, "%s", f);
        } else {
            snprintf(ftrain, sizeof ftrain, "%s/build/ftrain", submit);
            snprintf(looked, sizeof looked, "; none in %s/build%s%s, none on PATH", submit,
                     installed ? ", none at " : "", installed ? installed : "");
            if (!executable(ftrain)) {
                if (installed && executable(installed))
                    snprintf(ftrain, sizeof ftrain, "%s", installed);
                else if (find_on_path("ftrain", found, sizeof found))
                    snprintf(ftrain, sizeof ftrain, "%s", found);
            }
        }
        if (!executable(ftrain))
            return util_fail(err, cap, -1,
                             "ftrain binary '%s' is missing or not executable (set FTRAIN%s)",
                             ftrain, looked);
        snprintf(c->trainer, sizeof c->trainer, "ftrain");
    }
    /* --run-dir among ftrain's arguments becomes RUN_DIR. */
    if (argv_push_words(&all, c->policy.program ? "" : fargs) != 0)
        return util_fail(err, cap, -1, "out of memory");
    for (int i = 0; rc == 0 && i < args->n; i++)
        rc = argv_push(&all, args->v[i]);
    const char *arg_run_dir = NULL;
    for (int i = 0; !c->policy.program && i < all.n; i++) {
        if (strcmp(all.v[i], "--run-dir") == 0 && i + 1 < all.n)
            arg_run_dir = all.v[i + 1];
        else if (strncmp(all.v[i], "--run-dir=", 10) == 0)
            arg_run_dir = all.v[i] + 10;
    }
    const char *rd = env("RUN_DIR");
    if (rc == 0 && arg_run_dir && rd && *rd && strcmp(rd, arg_run_dir) != 0)
        rc = util_fail(err, cap, -1,
                       "ftrain is given --run-dir %s but RUN_DIR is %s: set one of them (the "
                       "script watches RUN_DIR; ftrain would use --run-dir)",
                       arg_run_dir, rd);
    if (rc == 0 && arg_run_dir)
        rd = arg_run_dir;
    if (rc == 0 && rd && *rd) {
        const char *user = env("SLURM_JOB_USER");
        struct passwd *pw = (!user || !*user) ? getpwuid(getuid()) : NULL;
        if (!user || !*user)
            user = env("USER") && *env("USER") ? env("USER") : pw ? pw->pw_name : "";
        const char *name = env("SLURM_JOB_NAME");
        rc = settings_expand_run_dir(c, rd, name && *name ? name : "ftrain", user, c->run_dir,
                                     sizeof c->run_dir, err, cap);
    } else if (rc == 0) {
        const char *submit = env("SLURM_SUBMIT_DIR");
        char cwd[4096] = ".";
        if (!submit || !*submit)
            submit = getcwd(cwd, sizeof cwd) ? cwd : ".";
        snprintf(c->run_dir, sizeof c->run_dir, "%s/runs/%s", submit, c->job_ref);
    }
    if (rc == 0 && util_mkdir_p(c->run_dir) != 0)
        rc = util_fail(err, cap, -1, "cannot create RUN_DIR '%s' (%s)", c->run_dir,
                       strerror(errno));
    if (rc == 0 && c->policy.program) {
        for (int i = 0; rc == 0 && i < args->n; i++)
            rc = argv_push(&c->target, args->v[i]);
    } else if (rc == 0) {
        rc = ftrain_target(c, env, &all, ftrain, err, cap);
    }
    argv_free(&all);
    return rc;
}

int settings_load(sv_config_t *c, int argc, char **argv, sv_getenv_fn env, char *err,
                  size_t cap)
{
    int rc = 0, i = 1;
    const char *installed_ftrain = NULL;
    sv_argv_t args = {0};
    memset(c, 0, sizeof *c);
    snprintf(c->log_name, sizeof c->log_name, "ftrain-supervise");
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            snprintf(err, cap, "%s", settings_usage);
            return 1;
        } else if (strcmp(argv[i], "--version") == 0) {
            snprintf(err, cap, "ftrain-supervise (ftrain) %s\n", FTRAIN_VERSION);
            return 1;
        } else if (strcmp(argv[i], "--installed-ftrain") == 0 && i + 1 < argc) {
            installed_ftrain = *argv[++i] ? argv[i] : NULL;
        } else if (strcmp(argv[i], "--log-name") == 0 && i + 1 < argc) {
            snprintf(c->log_name, sizeof c->log_name, "%s", argv[++i]);
        } else if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        } else {
            break;
        }
    }
    for (; i < argc; i++)
        if (argv_push(&args, argv[i]) != 0)
            return util_fail(err, cap, -1, "out of memory");
    const char *stop = env("FTRAIN_STOP_SIGNAL");
    const char *launch = env("FTRAIN_LAUNCH");
    stop = stop && *stop ? stop : "USR1";
    if (strncmp(stop, "SIG", 3) == 0)
        stop += 3;
    rc = load_job(c, env, err, cap);
    if (rc == 0 && strcmp(stop, "USR1") != 0 && strcmp(stop, "USR2") != 0)
        rc = util_fail(err, cap, -1, "FTRAIN_STOP_SIGNAL must be USR1 or USR2, got '%s'",
                       env("FTRAIN_STOP_SIGNAL"));
    c->stop_name = strcmp(stop, "USR2") == 0 ? "USR2" : "USR1";
    c->policy.stop_signal = strcmp(stop, "USR2") == 0 ? SIGUSR2 : SIGUSR1;
    launch = launch && *launch ? launch : "srun";
    if (rc == 0 && strcmp(launch, "srun") != 0 && strcmp(launch, "mpirun") != 0)
        rc = util_fail(err, cap, -1, "FTRAIN_LAUNCH must be srun or mpirun, got '%s'", launch);
    c->launcher = strcmp(launch, "mpirun") == 0 ? SV_MPIRUN : SV_SRUN;
    c->launcher_name = c->launcher == SV_MPIRUN ? "mpirun" : "srun";
    if (rc == 0)
        rc = load_numbers(c, env, err, cap);
    if (rc == 0)
        rc = load_target(c, env, &args, installed_ftrain, err, cap);
    if (rc == 0 &&
        argv_push_words(&c->launcher_args, env(c->launcher == SV_MPIRUN ? "FTRAIN_MPIRUN_ARGS"
                                                                        : "FTRAIN_SRUN_ARGS")))
        rc = util_fail(err, cap, -1, "out of memory");
    if (rc == 0)
        c->per_node = first_per(c, env);
    argv_free(&args);
    return rc;
}

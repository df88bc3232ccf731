/*
 * config.c - options, defaults, validation and the help text.
 *
 * Every option is parsed strictly: a number must be a whole number in range,
 * an enumeration one of its names.  Conflicting options are refused here, so
 * the rest of the program can trust a config_t.
 */
#include "ftrain/config.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ftrain/data.h"

void config_defaults(config_t *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->data, sizeof c->data, "fashion-mnist");
    c->nhidden = 2;
    c->hidden[0] = 256;
    c->hidden[1] = 128;
    c->act = ACT_RELU;
    optim_cfg_default(&c->opt);
    c->epochs = 1;
    c->global_batch = 128;
    c->micro_batch = 16;
    c->seed = 42;
    snprintf(c->resume, sizeof c->resume, "auto");
    snprintf(c->device, sizeof c->device, "auto");
    c->ckpt_keep = 3;
    c->ckpt_level = 1;
    c->stop_signal = SIGUSR1;
    c->grace = 30.0;
}

static const char config_help[] =
    "usage: ftrain [options]\n"
    "       mpirun -n N ftrain [options]     srun --mpi=pmix ftrain [options]\n"
    "\n"
    "Data-parallel training of an MLP that stops on SIGUSR1/SIGTERM/SIGINT with a\n"
    "collective checkpoint (exit 75) and resumes on any number of ranks.\n"
    "\n"
    "data and model:\n"
    "  --data NAME            fashion-mnist (default), line, sine\n"
    "  --data-dir DIR         where the fashion-mnist IDX .gz files are\n"
    "                         (default " DATA_FMNIST_DIR ")\n"
    "  --layers L1,L2,...     hidden layer widths (default 256,128; 'none' for\n"
    "                         a linear model)\n"
    "  --activation A         relu (default) or tanh\n"
    "optimisation:\n"
    "  --optimizer O          sgd, adam (default), adamw\n"
    "  --lr X                 learning rate (default 0.001)\n"
    "  --momentum X           SGD momentum (default 0.9)\n"
    "  --weight-decay X       L2 (sgd, adam) or decoupled (adamw) decay (default 0)\n"
    "  --schedule S           constant (default) or cosine\n"
    "  --warmup N             cosine: linear warm-up steps (default 0)\n"
    "  --min-lr X             cosine: final learning rate (default 0)\n"
    "  --epochs N | --steps N how long to train (default 1 epoch)\n"
    "  --global-batch N       samples per step, whatever the world size (128)\n"
    "  --micro-batch N        samples per micro-batch; divides the global batch (16)\n"
    "  --seed N               run seed: init, data order (default 42)\n"
    "  --deterministic        bit-identical results for any world size\n"
    "  --device D             auto (default: cuda when every rank can have a GPU\n"
    "                         of its own, else cpu for all), cpu, cuda (one GPU\n"
    "                         per local rank, or an error)\n"
    "  --threads N            BLAS threads per rank (default: the cores of the\n"
    "                         rank's CPU affinity / the ranks sharing them; 1\n"
    "                         with --deterministic)\n"
    "run directory and checkpoints:\n"
    "  --run-dir DIR          checkpoints in DIR/ckpt, metrics in DIR/metrics.jsonl\n"
    "  --resume R             auto (default with --run-dir), none, or a step dir\n"
    "  --ckpt-every N         save every N steps\n"
    "  --ckpt-interval SEC    save when SEC seconds passed since the last save\n"
    "  --ckpt-keep K          committed checkpoints to keep (default 3)\n"
    "  --ckpt-async           write periodic saves in the background\n"
    "  --ckpt-level N         zstd level 1..19 (default 1); 0 stores frames\n"
    "                         uncompressed (fast storage, slow CPUs)\n"
    "  --ckpt-threads N       compression threads per rank (default: as\n"
    "                         --threads without --deterministic)\n"
    "  --ckpt-buffered        write shards through the page cache instead of\n"
    "                         O_DIRECT (for filesystems where that is faster)\n"
    "  --ckpt-no-adapt        compress every frame even when the disk waits for\n"
    "                         the compressors (by default such frames are stored\n"
    "                         uncompressed); gives reproducible shard bytes\n"
    "signals and output:\n"
    "  --stop-signal SIG      USR1 (default) or USR2: stop, checkpoint, exit 75\n"
    "  --grace SEC            warn when a stop takes longer (default 30)\n"
    "  --log-every N          steps between progress lines (default: 10 a epoch)\n"
    "  --step-delay-ms MS     sleep per step (for tests and demos)\n"
    "  --trace-samples PFX    append each rank's trained sample indices to\n"
    "                         PFX.<rank> as 'epoch step index...' lines (tests)\n"
    "  --quiet                only the resume, stop and summary (done:) lines\n"
    "  --help, --version\n"
    "\n"
    "exit codes: 0 finished, 75 stopped after a committed checkpoint (requeue\n"
    "me), 2 bad options, 1 any other failure, 128+signal when stopped without a\n"
    "run directory.\n";

void config_usage(FILE *out) { fputs(config_help, out); }

enum {
    OPT_DATA = 256, OPT_DATA_DIR, OPT_LAYERS, OPT_ACT, OPT_OPTIM, OPT_LR,
    OPT_MOMENTUM, OPT_WD, OPT_SCHED, OPT_WARMUP, OPT_MINLR, OPT_EPOCHS,
    OPT_STEPS, OPT_GBATCH, OPT_MBATCH, OPT_SEED, OPT_DET, OPT_THREADS,
    OPT_RUNDIR, OPT_RESUME, OPT_CKEVERY, OPT_CKINT, OPT_CKKEEP, OPT_CKASYNC,
    OPT_CKLEVEL, OPT_STOPSIG, OPT_GRACE, OPT_LOGEVERY, OPT_DELAY, OPT_QUIET,
    OPT_TRACE, OPT_CKTHREADS, OPT_DEVICE, OPT_CKBUF, OPT_CKNOADAPT,
    OPT_HELP, OPT_VERSION
};

static const struct option config_opts[] = {
    {"data", required_argument, 0, OPT_DATA},
    {"data-dir", required_argument, 0, OPT_DATA_DIR},
    {"layers", required_argument, 0, OPT_LAYERS},
    {"activation", required_argument, 0, OPT_ACT},
    {"optimizer", required_argument, 0, OPT_OPTIM},
    {"lr", required_argument, 0, OPT_LR},
    {"momentum", required_argument, 0, OPT_MOMENTUM},
    {"weight-decay", required_argument, 0, OPT_WD},
    {"schedule", required_argument, 0, OPT_SCHED},
    {"warmup", required_argument, 0, OPT_WARMUP},
    {"min-lr", required_argument, 0, OPT_MINLR},
    {"epochs", required_argument, 0, OPT_EPOCHS},
    {"steps", required_argument, 0, OPT_STEPS},
    {"global-batch", required_argument, 0, OPT_GBATCH},
    {"micro-batch", required_argument, 0, OPT_MBATCH},
    {"seed", required_argument, 0, OPT_SEED},
    {"deterministic", no_argument, 0, OPT_DET},
    {"threads", required_argument, 0, OPT_THREADS},
    {"device", required_argument, 0, OPT_DEVICE},
    {"run-dir", required_argument, 0, OPT_RUNDIR},
    {"resume", required_argument, 0, OPT_RESUME},
    {"ckpt-every", required_argument, 0, OPT_CKEVERY},
    {"ckpt-interval", required_argument, 0, OPT_CKINT},
    {"ckpt-keep", required_argument, 0, OPT_CKKEEP},
    {"ckpt-async", no_argument, 0, OPT_CKASYNC},
    {"ckpt-level", required_argument, 0, OPT_CKLEVEL},
    {"ckpt-threads", required_argument, 0, OPT_CKTHREADS},
    {"ckpt-buffered", no_argument, 0, OPT_CKBUF},
    {"ckpt-no-adapt", no_argument, 0, OPT_CKNOADAPT},
    {"stop-signal", required_argument, 0, OPT_STOPSIG},
    {"grace", required_argument, 0, OPT_GRACE},
    {"log-every", required_argument, 0, OPT_LOGEVERY},
    {"step-delay-ms", required_argument, 0, OPT_DELAY},
    {"quiet", no_argument, 0, OPT_QUIET},
    {"trace-samples", required_argument, 0, OPT_TRACE},
    {"help", no_argument, 0, OPT_HELP},
    {"version", no_argument, 0, OPT_VERSION},
    {0, 0, 0, 0},
};

static int config_fail(char *err, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return CONFIG_EUSAGE;
}

/* A number as a person writes it: an optional sign, then a digit or a
 * point; no blanks, no hex ("0x10" would be 16), no "inf" or "nan". */
static int plain_number(const char *s, const char *allowed)
{
    const char *p = s + (*s == '-' || *s == '+');
    return (isdigit((unsigned char)*p) || *p == '.') && strspn(s, allowed) == strlen(s);
}

/* Parse a whole number in [lo, hi]. */
static int parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    if (!s || !*s || !plain_number(s, "+-0123456789"))
        return -1;
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* Parse a finite real number in [lo, hi]. */
static int parse_real(const char *s, double lo, double hi, double *out)
{
    if (!s || !*s || !plain_number(s, "+-0123456789.eE"))
        return -1;
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_layers(config_t *c, const char *s)
{
    if (strcmp(s, "none") == 0) {
        c->nhidden = 0;
        return 0;
    }
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end = NULL;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 1 || v > 65536 || n >= MODEL_MAX_LAYERS - 1)
            return -1;
        c->hidden[n++] = (int)v;
        if (*end == ',') {
            end++;
            if (!*end)
                return -1; /* a trailing comma */
        } else if (*end) {
            return -1;
        }
        p = end;
    }
    if (n == 0)
        return -1;
    c->nhidden = n;
    return 0;
}

static int parse_signal(const char *s)
{
    if (strncmp(s, "SIG", 3) == 0)
        s += 3;
    if (strcmp(s, "USR1") == 0)
        return SIGUSR1;
    if (strcmp(s, "USR2") == 0)
        return SIGUSR2;
    return -1;
}

const char *config_signal_name(int sig)
{
    switch (sig) {
    case SIGUSR1: return "USR1";
    case SIGUSR2: return "USR2";
    case SIGTERM: return "TERM";
    case SIGINT: return "INT";
    }
    return "?";
}

int config_parse(config_t *c, int argc, char **argv, char *err, size_t cap)
{
    int have_epochs = 0, have_steps = 0, have_resume = 0, have_momentum = 0;
    int64_t iv = 0;
    double dv = 0;
    optind = 1;
    opterr = 0;
    for (;;) {
        int longidx = 0;
        int o = getopt_long(argc, argv, "", config_opts, &longidx);
        if (o == -1)
            break;
        const char *a = optarg;
        switch (o) {
        case OPT_DATA:
            if (!data_known(a))
                return config_fail(err, cap, "--data: unknown data set '%s' (fashion-mnist, line, sine)", a);
            snprintf(c->data, sizeof c->data, "%s", a);
            break;
        case OPT_DATA_DIR:
            if (strlen(a) >= sizeof c->data_dir)
                return config_fail(err, cap, "--data-dir: path too long");
            snprintf(c->data_dir, sizeof c->data_dir, "%s", a);
            break;
        case OPT_LAYERS:
            if (parse_layers(c, a) != 0)
                return config_fail(err, cap, "--layers: expected widths like 256,128 (1..65536, at most %d layers) or 'none', got '%s'", MODEL_MAX_LAYERS - 1, a);
            break;
        case OPT_ACT: {
            int v = model_act_parse(a);
            if (v < 0)
                return config_fail(err, cap, "--activation: expected relu or tanh, got '%s'", a);
            c->act = (model_act_t)v;
            break;
        }
        case OPT_OPTIM: {
            int v = optim_kind_parse(a);
            if (v < 0)
                return config_fail(err, cap, "--optimizer: expected sgd, adam or adamw, got '%s'", a);
            c->opt.kind = (optim_kind_t)v;
            break;
        }
        case OPT_LR:
            if (parse_real(a, 1e-12, 1e3, &dv))
                return config_fail(err, cap, "--lr: expected a number in (0, 1000], got '%s'", a);
            c->opt.lr = dv;
            break;
        case OPT_MOMENTUM:
            if (parse_real(a, 0, 0.999999, &dv))
                return config_fail(err, cap, "--momentum: expected a number in [0, 1), got '%s'", a);
            c->opt.momentum = dv;
            have_momentum = 1;
            break;
        case OPT_WD:
            if (parse_real(a, 0, 10, &dv))
                return config_fail(err, cap, "--weight-decay: expected a number in [0, 10], got '%s'", a);
            c->opt.weight_decay = dv;
            break;
        case OPT_SCHED: {
            int v = optim_sched_parse(a);
            if (v < 0)
                return config_fail(err, cap, "--schedule: expected constant or cosine, got '%s'", a);
            c->opt.schedule = (sched_kind_t)v;
            break;
        }
        case OPT_WARMUP:
            if (parse_int(a, 0, INT64_C(1) << 40, &iv))
                return config_fail(err, cap, "--warmup: expected a whole number >= 0, got '%s'", a);
            c->opt.warmup_steps = iv;
            break;
        case OPT_MINLR:
            if (parse_real(a, 0, 1e3, &dv))
                return config_fail(err, cap, "--min-lr: expected a number >= 0, got '%s'", a);
            c->opt.min_lr = dv;
            break;
        case OPT_EPOCHS:
            if (parse_int(a, 1, 1000000, &iv))
                return config_fail(err, cap, "--epochs: expected a whole number >= 1, got '%s'", a);
            c->epochs = iv;
            have_epochs = 1;
            break;
        case OPT_STEPS:
            if (parse_int(a, 1, INT64_C(1) << 40, &iv))
                return config_fail(err, cap, "--steps: expected a whole number >= 1, got '%s'", a);
            c->steps = iv;
            have_steps = 1;
            break;
        case OPT_GBATCH:
            if (parse_int(a, 1, 1 << 20, &iv))
                return config_fail(err, cap, "--global-batch: expected a whole number in [1, 1048576], got '%s'", a);
            c->global_batch = iv;
            break;
        case OPT_MBATCH:
            if (parse_int(a, 1, 1 << 20, &iv))
                return config_fail(err, cap, "--micro-batch: expected a whole number in [1, 1048576], got '%s'", a);
            c->micro_batch = iv;
            break;
        case OPT_SEED:
            if (parse_int(a, 0, INT64_MAX, &iv))
                return config_fail(err, cap, "--seed: expected a whole number >= 0, got '%s'", a);
            c->seed = (uint64_t)iv;
            break;
        case OPT_DET: c->deterministic = 1; break;
        case OPT_THREADS:
            if (parse_int(a, 1, 1024, &iv))
                return config_fail(err, cap, "--threads: expected a whole number in [1, 1024], got '%s'", a);
            c->threads = (int)iv;
            break;
        case OPT_DEVICE:
            if (strcmp(a, "auto") && strcmp(a, "cpu") && strcmp(a, "cuda"))
                return config_fail(err, cap, "--device: expected auto, cpu or cuda, got '%s'", a);
            snprintf(c->device, sizeof c->device, "%s", a);
            break;
        case OPT_RUNDIR:
            if (!*a || strlen(a) >= sizeof c->run_dir - 64)
                return config_fail(err, cap, "--run-dir: empty or too long");
            snprintf(c->run_dir, sizeof c->run_dir, "%s", a);
            break;
        case OPT_RESUME:
            if (!*a || strlen(a) >= sizeof c->resume)
                return config_fail(err, cap, "--resume: expected auto, none or a checkpoint directory");
            snprintf(c->resume, sizeof c->resume, "%s", a);
            have_resume = 1;
            break;
        case OPT_CKEVERY:
            if (parse_int(a, 1, INT64_C(1) << 40, &iv))
                return config_fail(err, cap, "--ckpt-every: expected a whole number of steps >= 1, got '%s'", a);
            c->ckpt_every = iv;
            break;
        case OPT_CKINT:
            if (parse_real(a, 0.001, 1e9, &dv))
                return config_fail(err, cap, "--ckpt-interval: expected seconds > 0, got '%s'", a);
            c->ckpt_interval = dv;
            break;
        case OPT_CKKEEP:
            if (parse_int(a, 1, 1000000, &iv))
                return config_fail(err, cap, "--ckpt-keep: expected a whole number >= 1, got '%s'", a);
            c->ckpt_keep = (int)iv;
            break;
        case OPT_CKASYNC: c->ckpt_async = 1; break;
        case OPT_CKBUF: c->ckpt_buffered = 1; break;
        case OPT_CKNOADAPT: c->ckpt_no_adapt = 1; break;
        case OPT_CKLEVEL:
            if (parse_int(a, 0, 19, &iv))
                return config_fail(err, cap, "--ckpt-level: expected a zstd level in [0, 19], got '%s'", a);
            c->ckpt_level = (int)iv;
            break;
        case OPT_CKTHREADS:
            if (parse_int(a, 1, 64, &iv))
                return config_fail(err, cap, "--ckpt-threads: expected a whole number in [1, 64], got '%s'", a);
            c->ckpt_threads = (int)iv;
            break;
        case OPT_STOPSIG:
            if ((c->stop_signal = parse_signal(a)) < 0)
                return config_fail(err, cap, "--stop-signal: expected USR1 or USR2, got '%s'", a);
            break;
        case OPT_GRACE:
            if (parse_real(a, 0.001, 1e6, &dv))
                return config_fail(err, cap, "--grace: expected seconds > 0, got '%s'", a);
            c->grace = dv;
            break;
        case OPT_LOGEVERY:
            if (parse_int(a, 1, INT64_C(1) << 40, &iv))
                return config_fail(err, cap, "--log-every: expected a whole number >= 1, got '%s'", a);
            c->log_every = iv;
            break;
        case OPT_DELAY:
            if (parse_int(a, 0, 600000, &iv))
                return config_fail(err, cap, "--step-delay-ms: expected milliseconds in [0, 600000], got '%s'", a);
            c->step_delay_ms = (int)iv;
            break;
        case OPT_QUIET: c->quiet = 1; break;
        case OPT_TRACE:
            if (!*a || strlen(a) >= sizeof c->trace_samples - 16)
                return config_fail(err, cap, "--trace-samples: empty or too long");
            snprintf(c->trace_samples, sizeof c->trace_samples, "%s", a);
            break;
        case OPT_HELP: return CONFIG_HELP;
        case OPT_VERSION: return CONFIG_VERSION;
        case '?':
        default:
            /* optopt: a short option's letter (ftrain has none; in "-xy"
             * argv[optind - 1] is not the option), or the value of a long
             * option that lacks its argument or was given one it takes not. */
            if (optopt > 0 && optopt < 256)
                return config_fail(err, cap, "unknown option '-%c' (%s)", optopt,
                                   optopt == 'h' ? "did you mean --help?"
                                                 : "ftrain's options are long: --help lists them");
            for (const struct option *op = config_opts; optopt && op->name; op++)
                if (op->val == optopt)
                    return config_fail(err, cap, op->has_arg == required_argument
                                                     ? "option '--%s' needs a value"
                                                     : "option '--%s' takes no value",
                                       op->name);
            return config_fail(err, cap, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return config_fail(err, cap, "unexpected argument '%s'", argv[optind]);

    /* Conflicts between options. */
    if (have_epochs && have_steps)
        return config_fail(err, cap, "--epochs and --steps conflict: give one");
    if (have_steps)
        c->epochs = 0;
    if (c->micro_batch > c->global_batch)
        return config_fail(err, cap, "--micro-batch %lld is larger than --global-batch %lld",
                           (long long)c->micro_batch, (long long)c->global_batch);
    if (c->global_batch % c->micro_batch != 0)
        return config_fail(err, cap, "--micro-batch %lld does not divide --global-batch %lld",
                           (long long)c->micro_batch, (long long)c->global_batch);
    if (have_momentum && c->opt.kind != OPT_SGD)
        return config_fail(err, cap, "--momentum applies to --optimizer sgd only");
    if (c->opt.schedule != SCHED_COSINE && (c->opt.warmup_steps || c->opt.min_lr))
        return config_fail(err, cap, "--warmup and --min-lr need --schedule cosine");
    if (c->opt.min_lr > c->opt.lr)
        return config_fail(err, cap, "--min-lr is larger than --lr");
    if (!c->run_dir[0]) {
        if (c->ckpt_every || c->ckpt_interval || c->ckpt_async)
            return config_fail(err, cap, "--ckpt-every, --ckpt-interval and --ckpt-async need --run-dir");
        if (c->ckpt_buffered)
            return config_fail(err, cap, "--ckpt-buffered needs --run-dir");
        if (c->ckpt_no_adapt)
            return config_fail(err, cap, "--ckpt-no-adapt needs --run-dir");
        if (have_resume && strcmp(c->resume, "none") != 0 && strcmp(c->resume, "auto") == 0)
            return config_fail(err, cap, "--resume auto needs --run-dir");
        if (!have_resume)
            snprintf(c->resume, sizeof c->resume, "none");
    }
    if (c->ckpt_async && !c->ckpt_every && !c->ckpt_interval)
        return config_fail(err, cap, "--ckpt-async needs --ckpt-every or --ckpt-interval");
    if (strcmp(c->data, "fashion-mnist") != 0 && c->data_dir[0])
        return config_fail(err, cap, "--data-dir applies to --data fashion-mnist only");
    return CONFIG_RUN;
}

int config_to_json(const config_t *c, char *buf, size_t cap)
{
    json_t *o = json_object(), *layers = json_array();
    if (!o || !layers) {
        json_decref(o);
        json_decref(layers);
        return -1;
    }
    for (int i = 0; i < c->nhidden; i++)
        json_array_append_new(layers, json_integer(c->hidden[i]));
    json_object_set_new(o, "data", json_string(c->data));
    json_object_set_new(o, "layers", layers);
    json_object_set_new(o, "activation", json_string(model_act_name(c->act)));
    json_object_set_new(o, "optimizer", json_string(optim_kind_name(c->opt.kind)));
    json_object_set_new(o, "lr", json_real(c->opt.lr));
    json_object_set_new(o, "momentum", json_real(c->opt.momentum));
    json_object_set_new(o, "weight_decay", json_real(c->opt.weight_decay));
    json_object_set_new(o, "schedule", json_string(optim_sched_name(c->opt.schedule)));
    json_object_set_new(o, "warmup", json_integer(c->opt.warmup_steps));
    json_object_set_new(o, "min_lr", json_real(c->opt.min_lr));
    json_object_set_new(o, "epochs", json_integer(c->epochs));
    json_object_set_new(o, "steps", json_integer(c->steps));
    json_object_set_new(o, "global_batch", json_integer(c->global_batch));
    json_object_set_new(o, "micro_batch", json_integer(c->micro_batch));
    json_object_set_new(o, "seed", json_integer((json_int_t)c->seed));
    json_object_set_new(o, "deterministic", json_boolean(c->deterministic));
    size_t n = json_dumpb(o, buf, cap, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(o);
    if (n == 0 || n >= cap)
        return -1;
    buf[n] = '\0';
    return (int)n;
}

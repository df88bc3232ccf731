/*
 * config_table.c - the option table: every option of ftrain is one row of
 * config_opts[] below, which gives its name, its field of config_t, how
 * its value is read and checked, its default and its --help text, so that
 * none of these can drift from the others.  Also the name tables that are
 * the command line's own (--device, --ckpt-local-exchange, the stop
 * signals), and the rows' lookups.  Parsing and checks are config.c's, the
 * --help layout config_help.c's.
 */
#include "config/config.h"

#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "config/config_internal.h"
#include "nn/data.h"
#include "util/util.h"

/* ---- enumerations ---------------------------------------------------------
 * Activations, initialisations, optimizers, schedules and data sets have
 * their one name table in their own module, the stop signals theirs in
 * util.h (util_signals); the ones below are the command line's own, and
 * --device's is also the parallel layer's (device_choose). */

/* --device's names, the one table of them (config.h, config_device_t):
 * config_t keeps the name as text, device_choose() parses it. */
static const util_name_t device_names[] = {
    {.name = "auto", .value = CONFIG_DEVICE_AUTO},
    {.name = "cpu", .value = CONFIG_DEVICE_CPU},
    {.name = "cuda", .value = CONFIG_DEVICE_CUDA},
};

/* config_device_name(), config_device_parse(), config_device_names(). */
UTIL_NAME_FUNCTIONS(config_device, config_device_t, device_names)

static const util_name_t exchange_names[] = {
    {.name = "auto", .value = CONFIG_EXCHANGE_AUTO},
    {.name = "thread", .value = CONFIG_EXCHANGE_THREAD},
    {.name = "steps", .value = CONFIG_EXCHANGE_STEPS},
};

static int exchange_parse(const char *name)
{
    return util_name_parse(exchange_names, UTIL_COUNT(exchange_names), name);
}

static const char *exchange_names_join(char *buf, size_t cap)
{
    return util_names_join(exchange_names, UTIL_COUNT(exchange_names), buf, cap);
}

static int stop_signal_parse(const char *name)
{
    return util_name_parse(util_signals, UTIL_STOP_SIGNAL_CHOICES, name);
}

static const char *stop_signal_names(char *buf, size_t cap)
{
    return util_names_join(util_signals, UTIL_STOP_SIGNAL_CHOICES, buf, cap);
}

static const config_enum_t activations = {model_act_parse, model_act_names, NULL, NULL};
static const config_enum_t inits = {model_init_parse, model_init_names, NULL, NULL};
static const config_enum_t optimizers = {optim_kind_parse, optim_kind_names, NULL, NULL};
static const config_enum_t schedules = {optim_sched_parse, optim_sched_names, NULL, NULL};
static const config_enum_t stop_signals = {stop_signal_parse, stop_signal_names, "SIG", NULL};
static const config_enum_t exchanges = {exchange_parse, exchange_names_join, NULL, NULL};
static const config_enum_t devices = {config_device_parse, config_device_names, NULL, NULL};
static const config_enum_t data_sets = {data_set_parse, data_set_names, NULL, "data set"};

/* ---- the option table ------------------------------------------------------ */

/* A cap on step counts: far above any real run, it keeps steps times the
 * batch size and the like from overflowing further on. */
#define STEPS_CAP (INT64_C(1) << 40)
#define BATCH_MAX (1 << 20)
/* Room a run directory keeps for "/ckpt/step-<N>/shard-<R>.ftsh" and the
 * like, and a trace prefix for ".<rank>". */
#define RUN_DIR_SUFFIX_MAX 64
#define TRACE_SUFFIX_MAX 16

#define FIELD(member) .offset = offsetof(config_t, member), .size = sizeof(((config_t *)0)->member)

/* Each row's first line must stay {"name", ...: tests/train/cli.sh reads the
 * names from here to compare them with --help. */
static const config_option_t config_opts[] = {
    {"data", .kind = CONFIG_ARG_CHOICE, FIELD(data), .names = &data_sets, .metavar = "NAME",
     .default_text = "fashion-mnist", .section = "data and model",
     .help = "fashion-mnist (default), line, sine"},
    {"data-dir", .kind = CONFIG_ARG_TEXT, FIELD(data_dir),
     .text = {0, 1, "empty (leave it out for the default) or too long"},
     .metavar = "DIR",
     .help = "where the fashion-mnist IDX .gz files are\n(default " DATA_FMNIST_DIR ")"},
    {"layers", .kind = CONFIG_ARG_LAYERS, FIELD(hidden), .metavar = "L1,L2,...",
     .default_text = "256,128",
     .help = "hidden layer widths (default 256,128; 'none' for\na linear model)"},
    {"activation", .kind = CONFIG_ARG_ENUM, FIELD(act), .names = &activations, .metavar = "A",
     .default_text = "relu", .help = "relu (default) or tanh"},
    {"init", .kind = CONFIG_ARG_ENUM, FIELD(init), .names = &inits, .metavar = "I",
     .default_text = "torch",
     .help = "initial parameters: torch (default: PyTorch's\n"
             "nn.Linear, weights and biases U(-b, b) with\n"
             "b = 1/sqrt(fan_in)); kaiming (b = sqrt(6/fan_in))\n"
             "and xavier (b = sqrt(6/(fan_in+fan_out))) draw\n"
             "weights only, biases 0: the earlier rules of relu\n"
             "and tanh nets"},
    {"optimizer", .kind = CONFIG_ARG_ENUM, FIELD(opt.kind), .names = &optimizers, .metavar = "O",
     .default_text = "adam", .section = "optimisation", .help = "sgd, adam (default), adamw"},
    {"lr", .kind = CONFIG_ARG_REAL, FIELD(opt.lr), .reals = {0, 1000, CONFIG_OPEN_MIN},
     .metavar = "X", .default_text = "0.001", .help = "learning rate (default 0.001)"},
    {"momentum", .kind = CONFIG_ARG_REAL, FIELD(opt.momentum), .reals = {0, 1, CONFIG_OPEN_MAX},
     .metavar = "X", .default_text = "0.9", .help = "SGD momentum (default 0.9)"},
    {"weight-decay", .kind = CONFIG_ARG_REAL, FIELD(opt.weight_decay), .reals = {0, 10, 0},
     .metavar = "X", .default_text = "0",
     .help = "L2 (sgd, adam) or decoupled (adamw) decay (default 0)"},
    {"schedule", .kind = CONFIG_ARG_ENUM, FIELD(opt.schedule), .names = &schedules,
     .metavar = "S", .default_text = "constant", .help = "constant (default) or cosine"},
    {"warmup", .kind = CONFIG_ARG_INT, FIELD(opt.warmup_steps), .ints = {0, STEPS_CAP},
     .max_is_cap = 1, .metavar = "N", .default_text = "0",
     .help = "cosine: linear warm-up steps (default 0)"},
    {"min-lr", .kind = CONFIG_ARG_REAL, FIELD(opt.min_lr), .reals = {0, 1000, 0}, .max_is_cap = 1,
     .metavar = "X", .default_text = "0", .help = "cosine: final learning rate (default 0)"},
    {"epochs", .kind = CONFIG_ARG_INT, FIELD(epochs), .ints = {1, 1000000}, .max_is_cap = 1,
     .metavar = "N", .default_text = "1", .help = "how long to train (default 1 epoch)"},
    {"steps", .kind = CONFIG_ARG_INT, FIELD(steps), .ints = {1, STEPS_CAP}, .max_is_cap = 1,
     .metavar = "N", .join = " | "},
    {"global-batch", .kind = CONFIG_ARG_INT, FIELD(global_batch), .ints = {1, BATCH_MAX},
     .metavar = "N",
     .help = "samples per step, any world size (128, or what fits)"},
    {"micro-batch", .kind = CONFIG_ARG_INT, FIELD(micro_batch), .ints = {1, BATCH_MAX},
     .metavar = "N", .default_text = "16",
     .help = "samples per micro-batch; divides the global batch (16)"},
    {"seed", .kind = CONFIG_ARG_INT, FIELD(seed), .ints = {0, INT64_MAX}, .max_is_cap = 1,
     .metavar = "N", .default_text = "42", .help = "run seed: init, data order (default 42)"},
    {"deterministic", .kind = CONFIG_ARG_FLAG, FIELD(deterministic),
     .help = "bit-identical results for any world size"},
    {"device", .kind = CONFIG_ARG_CHOICE, FIELD(device), .names = &devices, .metavar = "D",
     .default_text = "auto",
     .help = "auto (default: cuda when every rank can have a GPU\n"
             "of its own, else cpu for all), cpu, cuda (one GPU\n"
             "per local rank, or an error)"},
    {"threads", .kind = CONFIG_ARG_INT, FIELD(threads), .ints = {1, 1024}, .metavar = "N",
     .help = "BLAS threads per rank (default: the cores of the\n"
             "rank's CPU affinity / the ranks sharing them; 1\n"
             "with --deterministic)"},
    {"run-dir", .kind = CONFIG_ARG_TEXT, FIELD(run_dir),
     .text = {RUN_DIR_SUFFIX_MAX, 1, "empty or too long"}, .metavar = "DIR",
     .section = "run directory and checkpoints",
     .help = "checkpoints in DIR/ckpt, metrics in DIR/metrics.jsonl"},
    {"resume", .kind = CONFIG_ARG_TEXT, FIELD(resume),
     .text = {0, 1, "expected auto, none or a checkpoint directory"}, .metavar = "R",
     .default_text = "auto", .help = "auto (default with --run-dir), none, or a step dir"},
    {"ckpt-every", .kind = CONFIG_ARG_INT, FIELD(ckpt_every), .ints = {1, STEPS_CAP},
     .max_is_cap = 1, .unit = "a whole number of steps", .metavar = "N",
     .help = "save every N steps"},
    {"ckpt-interval", .kind = CONFIG_ARG_REAL, FIELD(ckpt_interval),
     .reals = {0, 1e9, CONFIG_OPEN_MIN}, .max_is_cap = 1, .unit = "seconds", .metavar = "SEC",
     .help = "save when SEC seconds passed since the last save"},
    {"ckpt-keep", .kind = CONFIG_ARG_INT, FIELD(ckpt_keep), .ints = {1, 1000000},
     .max_is_cap = 1, .metavar = "K", .default_text = "3",
     .help = "committed checkpoints to keep (default 3)"},
    {"ckpt-async", .kind = CONFIG_ARG_FLAG, FIELD(ckpt_async),
     .help = "write periodic saves in the background"},
    {"ckpt-level", .kind = CONFIG_ARG_INT, FIELD(ckpt_level), .ints = {0, 19},
     .unit = "a zstd level", .metavar = "N", .default_text = "1",
     .help = "zstd level 1..19 (default 1); 0 stores frames\n"
             "uncompressed (fast storage, slow CPUs)"},
    {"ckpt-threads", .kind = CONFIG_ARG_INT, FIELD(ckpt_threads), .ints = {1, 64},
     .metavar = "N",
     .help = "compression threads per rank (default: as\n--threads without --deterministic)"},
    {"ckpt-buffered", .kind = CONFIG_ARG_FLAG, FIELD(ckpt_buffered),
     .help = "write shards through the page cache instead of\n"
             "O_DIRECT (for filesystems where that is faster)"},
    {"ckpt-no-adapt", .kind = CONFIG_ARG_FLAG, FIELD(ckpt_no_adapt),
     .help = "compress every frame even when the disk waits for\n"
             "the compressors (by default such frames are stored\n"
             "uncompressed); gives reproducible shard bytes"},
    {"ckpt-local", .kind = CONFIG_ARG_TEXT, FIELD(ckpt_local),
     .text = {0, 1, "empty or too long"}, .metavar = "DIR", .section = "node-local tier",
     .help = "node-local checkpoints in DIR on each node (%n: the\n"
             "node's name), with a partner copy on another node"},
    {"ckpt-local-every", .kind = CONFIG_ARG_INT, FIELD(ckpt_local_every), .ints = {1, STEPS_CAP},
     .max_is_cap = 1, .unit = "a whole number of steps", .metavar = "N",
     .help = "local checkpoint every N steps"},
    {"ckpt-local-interval", .kind = CONFIG_ARG_REAL, FIELD(ckpt_local_interval),
     .reals = {0, 1e9, CONFIG_OPEN_MIN}, .max_is_cap = 1, .unit = "seconds", .metavar = "SEC",
     .help = "local checkpoint SEC seconds after the last"},
    {"ckpt-local-keep", .kind = CONFIG_ARG_INT, FIELD(ckpt_local_keep), .ints = {1, 2},
     .metavar = "K", .default_text = "2", .help = "local checkpoints each node keeps (1 or 2; 2)"},
    {"ckpt-local-level", .kind = CONFIG_ARG_INT, FIELD(ckpt_local_level), .ints = {0, 19},
     .unit = "a zstd level", .metavar = "N", .default_text = "0",
     .help = "zstd level of local shards (default 0: stored)"},
    {"ckpt-local-exchange", .kind = CONFIG_ARG_ENUM, FIELD(ckpt_local_exchange),
     .names = &exchanges, .metavar = "WHO", .default_text = "auto",
     .help = "who moves the partner copies: thread (the tier's\n"
             "helper thread, MPI_THREAD_MULTIPLE), steps (the\n"
             "training thread at step boundaries) or auto (default:\n"
             "thread where every rank has a core to spare: a GPU\n"
             "run, or fewer BLAS threads than its cores)"},
    {"ckpt-flush-every", .kind = CONFIG_ARG_INT, FIELD(ckpt_flush_every), .ints = {1, STEPS_CAP},
     .max_is_cap = 1, .unit = "a whole number of local checkpoints", .metavar = "K",
     .help = "every K-th local checkpoint also goes to the shared\n"
             "tier (with --ckpt-async, in the background)"},
    {"ckpt-local-remove-at-end", .kind = CONFIG_ARG_FLAG, FIELD(ckpt_local_remove_at_end),
     .help = "when the run ends with its newest state on the\n"
             "shared tier (done, or a stop whose checkpoint\n"
             "committed), each node removes its --ckpt-local\n"
             "directory (the batch script passes it)"},
    {"stop-signal", .kind = CONFIG_ARG_ENUM, FIELD(stop_signal), .names = &stop_signals,
     .metavar = "SIG", .default_text = "USR1", .section = "signals and output",
     .help = "USR1 (default) or USR2: stop, checkpoint, exit 75"},
    {"grace", .kind = CONFIG_ARG_REAL, FIELD(grace), .reals = {0, 1e6, CONFIG_OPEN_MIN},
     .max_is_cap = 1, .unit = "seconds", .metavar = "SEC", .default_text = "30",
     .help = "warn when a stop takes longer (default 30)"},
    {"hang-timeout", .kind = CONFIG_ARG_REAL, FIELD(hang_timeout), .reals = {0, 1e6, 0},
     .max_is_cap = 1, .unit = "seconds", .metavar = "SEC",
     .help = "end the job (exit 76) when a rank makes no progress\n"
             "for SEC seconds (0: never; default: 10x the longest\n"
             "step, evaluation or save seen, at least 45)"},
    {"no-liveness", .kind = CONFIG_ARG_FLAG, FIELD(no_liveness),
     .help = "no connection from each rank to its neighbours\n"
             "(by default a rank that dies is noticed by them in\n"
             "0.1 s; without, only by --hang-timeout)"},
    {"log-every", .kind = CONFIG_ARG_INT, FIELD(log_every), .ints = {1, STEPS_CAP},
     .max_is_cap = 1, .metavar = "N",
     .help = "a progress line every N steps (default: by\n"
             "time, see --log-interval)"},
    {"log-interval", .kind = CONFIG_ARG_REAL, FIELD(log_interval),
     .reals = {0, 1e6, CONFIG_OPEN_MIN}, .max_is_cap = 1, .unit = "seconds", .metavar = "SEC",
     .default_text = "5",
     .help = "a progress line when SEC seconds passed since\n"
             "the last (default 5), and at the last step;\n"
             "--log-every N counts steps instead"},
    {"step-delay-ms", .kind = CONFIG_ARG_INT, FIELD(step_delay_ms), .ints = {0, 600000},
     .unit = "milliseconds", .metavar = "MS", .help = "sleep per step (for tests and demos)"},
    {"ckpt-local-copy-delay-ms", .kind = CONFIG_ARG_INT, FIELD(ckpt_local_copy_delay_ms),
     .ints = {0, 600000}, .unit = "milliseconds", .metavar = "MS",
     .help = "a local save's helper waits MS, then copies\n"
             "the state (tests)"},
    {"mtbf", .kind = CONFIG_ARG_REAL, FIELD(mtbf_hours), .reals = {0, 1e6, CONFIG_OPEN_MIN},
     .max_is_cap = 1, .unit = "hours", .metavar = "H", .default_text = "24",
     .help = "the job's mean time between failures, for the\n"
             "checkpoint interval it implies (Young/Daly; 24)"},
    {"fault", .kind = CONFIG_ARG_TEXT, FIELD(fault), .text = {0, 1, "expected KIND@STEP[:RANK]"},
     .metavar = "F",
     .help = "inject a failure (tests): KIND@STEP[:RANK], KIND\n"
             "kill, segv, abort or stop, raised by RANK (default\n"
             "every rank) once STEP steps are done"},
    {"trace-samples", .kind = CONFIG_ARG_TEXT, FIELD(trace_samples),
     .text = {TRACE_SUFFIX_MAX, 1, "empty or too long"}, .metavar = "PFX",
     .help = "append each rank's trained sample indices to\n"
             "PFX.<rank> as 'epoch step index...' lines (tests)"},
    {"quiet", .kind = CONFIG_ARG_FLAG, FIELD(quiet),
     .help = "only the resume, recovery, stop and summary\n(done:) lines"},
    {"help", .kind = CONFIG_ARG_ACTION, .action = CONFIG_HELP},
    {"version", .kind = CONFIG_ARG_ACTION, .action = CONFIG_VERSION, .join = ", "},
};
#define NOPTIONS UTIL_COUNT(config_opts)

_Static_assert(NOPTIONS <= CONFIG_OPTIONS_MAX, "config_given_t has one bit per option");
_Static_assert(CONFIG_OPTIONS_MAX <= sizeof(((config_given_t *)0)->rows) * CHAR_BIT,
               "CONFIG_OPTIONS_MAX bits fit in config_given_t");

/* ---- table lookups --------------------------------------------------------- */

const config_option_t *config_options(size_t *count)
{
    if (count)
        *count = NOPTIONS;
    return config_opts;
}

const config_option_t *config_option_find(const char *long_name)
{
    for (size_t i = 0; long_name && i < NOPTIONS; i++)
        if (strcmp(config_opts[i].name, long_name) == 0)
            return &config_opts[i];
    return NULL;
}

uint64_t config_row_bit(const config_option_t *row)
{
    return UINT64_C(1) << (size_t)(row - config_opts);
}

int config_given_add(config_given_t *given, const char *long_name)
{
    const config_option_t *row = config_option_find(long_name);
    if (!row)
        return CONFIG_EUSAGE;
    given->rows |= config_row_bit(row);
    return CONFIG_RUN;
}

int config_given_has(const config_given_t *given, const char *long_name)
{
    const config_option_t *row = config_option_find(long_name);
    return given && row && (given->rows & config_row_bit(row)) != 0;
}

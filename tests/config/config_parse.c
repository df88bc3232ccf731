/*
 * config_parse.c - the option table of config.h, row by row: every option
 * parses a valid value into its field; each kind of value refuses garbage
 * and out-of-range text with a message naming the option; --help lists
 * every row with its default and names; config_check() refuses the
 * conflicts between options.
 *
 * tests/train/cli.sh runs the ftrain binary on chosen examples (exit codes,
 * stderr, stdout); this calls the library on every row of the table, so a
 * new option is tested by its kind before anyone writes an example for it.
 */
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "tap.h"

/* Room for any message, one option's argument list and a value. */
#define ERR_MAX 1024
#define ARGS_MAX 8
#define VALUE_MAX (CONFIG_PATH_MAX + 8)
#define HELP_WIDTH_MAX 79

static const config_option_t *table;
static size_t table_rows;
/* Rows that a hand-written check below has parsed and read back; the
 * table has at most one row per bit of config_given_t. */
static int covered[sizeof(((config_given_t *)0)->rows) * CHAR_BIT];

static size_t row_index(const config_option_t *row)
{
    return (size_t)(row - table);
}

/* argv of "ftrain ARGS..." (args ends with NULL).  @return argc. */
static int make_argv(const char *const *args, char **argv)
{
    int argc = 1;
    argv[0] = "ftrain";
    while (args[argc - 1] && argc <= ARGS_MAX) {
        argv[argc] = (char *)args[argc - 1]; /* getopt moves pointers, not bytes */
        argc++;
    }
    argv[argc] = NULL;
    return argc;
}

/* Parse ARGS into cfg, from the defaults, option by option (no
 * config_check). */
static int parse_list(config_t *cfg, config_given_t *given, char *err, const char *const *args)
{
    char *argv[ARGS_MAX + 2];
    int argc = make_argv(args, argv);
    config_defaults(cfg);
    *given = (config_given_t){0};
    err[0] = '\0';
    return config_parse_options(cfg, given, argc, argv, err, ERR_MAX);
}
#define PARSE(cfg, given, err, ...) \
    parse_list((cfg), (given), (err), (const char *const[]){__VA_ARGS__, NULL})

/* The whole of config_parse(), conflicts included. */
static int parse_all(config_t *cfg, char *err, const char *const *args)
{
    char *argv[ARGS_MAX + 2];
    int argc = make_argv(args, argv);
    config_defaults(cfg);
    err[0] = '\0';
    return config_parse(cfg, argc, argv, err, ERR_MAX);
}
#define PARSE_ALL(cfg, err, ...) parse_all((cfg), (err), (const char *const[]){__VA_ARGS__, NULL})

/* "--NAME VALUE" (or "--NAME" for value NULL) alone; marks the row covered
 * when it parses. */
static int parse_one(config_t *cfg, const char *name, const char *value)
{
    char option[VALUE_MAX], err[ERR_MAX];
    config_given_t given;
    snprintf(option, sizeof option, "--%s", name);
    int rc = value ? PARSE(cfg, &given, err, option, value) : PARSE(cfg, &given, err, option);
    const config_option_t *row = config_option_find(name);
    if (rc == CONFIG_RUN && row && config_given_has(&given, name))
        covered[row_index(row)] = 1;
    else
        diag("--%s %s: rc %d: %s", name, value ? value : "", rc, err);
    return rc;
}

static int64_t field_int(const config_t *cfg, const config_option_t *row)
{
    const char *at = (const char *)cfg + row->offset;
    if (row->size == sizeof(int)) {
        int narrow;
        memcpy(&narrow, at, sizeof narrow);
        return narrow;
    }
    int64_t wide;
    memcpy(&wide, at, sizeof wide);
    return wide;
}

static double field_real(const config_t *cfg, const config_option_t *row)
{
    double real;
    memcpy(&real, (const char *)cfg + row->offset, sizeof real);
    return real;
}

static const char *field_text(const config_t *cfg, const config_option_t *row)
{
    return (const char *)cfg + row->offset;
}

/* Call visit on each name an enumerated row accepts ("a, b or c"). */
static void each_name(const config_option_t *row, void (*visit)(const config_option_t *row,
                                                                 const char *name, void *arg),
                      void *arg)
{
    char names[ERR_MAX];
    row->names->names(names, sizeof names);
    for (char *cursor = names; *cursor;) {
        size_t len = strcspn(cursor, ", ");
        char *next = cursor + len;
        while (*next == ',' || *next == ' ' || strncmp(next, "or ", 3) == 0)
            next += *next == 'o' ? 3 : 1;
        cursor[len] = '\0';
        visit(row, cursor, arg);
        cursor = next;
    }
}

/* ---- the table itself ---------------------------------------------------- */

static void test_table_shape(void)
{
    ok(table_rows >= 30 && table_rows <= sizeof covered / sizeof covered[0],
       "the table has %zu rows, one bit each in config_given_t", table_rows);
    for (size_t i = 0; i < table_rows; i++) {
        const config_option_t *row = &table[i];
        int valued = row->kind != CONFIG_ARG_FLAG && row->kind != CONFIG_ARG_ACTION;
        ok(config_option_find(row->name) == row, "--%s: found by name, once", row->name);
        ok(!valued == !row->metavar, "--%s: a metavar exactly when it takes a value", row->name);
        ok((row->help != NULL) != (row->join != NULL) || row->kind == CONFIG_ARG_ACTION,
           "--%s: a help text of its own, or joined to the row above", row->name);
        if (row->kind == CONFIG_ARG_INT && row->size == sizeof(int))
            ok(row->ints.min >= INT_MIN && row->ints.max <= INT_MAX,
               "--%s: its range fits its int field", row->name);
        if (row->kind == CONFIG_ARG_TEXT)
            ok(row->size > row->text.reserve + 1 && row->text.refusal,
               "--%s: room for text, and a refusal", row->name);
    }
    ok(config_option_find("no-such-option") == NULL, "an unknown name has no row");
    config_given_t given = {0};
    is_int(config_given_add(&given, "no-such-option"), CONFIG_EUSAGE,
           "config_given_add refuses an unknown name");
    is_int(config_given_add(&given, "steps"), CONFIG_RUN, "config_given_add takes --steps");
    ok(config_given_has(&given, "steps") && !config_given_has(&given, "epochs"),
       "config_given_has sees --steps only");
}

/* ---- defaults -------------------------------------------------------------- */

static void test_defaults(void)
{
    config_t cfg;
    char err[ERR_MAX] = "";
    config_given_t none = {0};
    config_defaults(&cfg);
    is_str(cfg.data, "fashion-mnist", "default --data");
    ok(cfg.data_dir[0] == '\0' && cfg.run_dir[0] == '\0' && cfg.trace_samples[0] == '\0',
       "no default --data-dir, --run-dir, --trace-samples");
    ok(cfg.nhidden == 2 && cfg.hidden[0] == 256 && cfg.hidden[1] == 128,
       "default --layers 256,128");
    is_int(cfg.act, ACT_RELU, "default --activation relu");
    is_int(cfg.init, INIT_TORCH, "default --init torch (PyTorch's nn.Linear)");
    is_int(cfg.opt.kind, OPT_ADAM, "default --optimizer adam");
    is_double(cfg.opt.lr, 0.001, 0, "default --lr 0.001");
    is_double(cfg.opt.momentum, 0.9, 0, "default --momentum 0.9");
    ok(cfg.opt.weight_decay == 0 && cfg.opt.min_lr == 0 && cfg.opt.warmup_steps == 0,
       "default --weight-decay, --min-lr, --warmup 0");
    is_int(cfg.opt.schedule, SCHED_CONSTANT, "default --schedule constant");
    ok(cfg.opt.beta1 == 0.9 && cfg.opt.beta2 == 0.999 && cfg.opt.eps == 1e-8,
       "the betas and eps no option names come from optim_cfg_default");
    ok(cfg.epochs == 1 && cfg.steps == 0, "default 1 epoch, no --steps");
    ok(cfg.global_batch == CONFIG_BATCH_AUTO && cfg.micro_batch == 16,
       "default batches: global resolved from the data (CONFIG_BATCH_AUTO), micro 16");
    {
        /* The default resolved: 128 where it fits, else the largest
         * multiple of the micro-batch (sine: 100 samples -> 96); a given
         * value is kept as it is. */
        config_t c = cfg;
        is_int(config_resolve_batch(&c, 60000), 0, "resolve for 60000 samples: not lowered");
        ok(c.global_batch == 128, "  -> 128");
        c = cfg;
        is_int(config_resolve_batch(&c, 100), 1, "resolve for 100 samples: lowered");
        ok(c.global_batch == 96, "  -> 96, a multiple of 16 (%lld)", (long long)c.global_batch);
        c = cfg;
        c.micro_batch = 32;
        config_resolve_batch(&c, 100);
        ok(c.global_batch == 96, "  micro 32 -> 96 (%lld)", (long long)c.global_batch);
        c = cfg;
        is_int(config_resolve_batch(&c, 7), 0, "7 samples, micro 16: not lowered (none fits)");
        ok(c.global_batch == 128, "  left at 128 for the sampler to refuse, naming the micro-batch");
        c = cfg;
        c.global_batch = 512;
        is_int(config_resolve_batch(&c, 100), 0, "a given --global-batch is kept");
        ok(c.global_batch == 512, "  512 stays 512");
    }
    is_int(cfg.seed, 42, "default --seed 42");
    is_str(cfg.device, "auto", "default --device auto");
    is_str(cfg.resume, "auto", "default --resume auto (before the run directory is known)");
    ok(cfg.threads == 0 && cfg.ckpt_threads == 0 && cfg.log_every == 0 && cfg.ckpt_every == 0 &&
           cfg.ckpt_interval == 0 && cfg.step_delay_ms == 0,
       "the automatic and off settings are 0");
    ok(cfg.ckpt_keep == 3 && cfg.ckpt_level == 1, "default --ckpt-keep 3, --ckpt-level 1");
    ok(!cfg.deterministic && !cfg.ckpt_async && !cfg.ckpt_buffered && !cfg.ckpt_no_adapt &&
           !cfg.quiet,
       "flags are off");
    is_int(cfg.stop_signal, SIGUSR1, "default --stop-signal USR1");
    is_double(cfg.grace, 30, 0, "default --grace 30");
    is_double(cfg.hang_timeout, CONFIG_HANG_AUTO, 0, "default --hang-timeout: derived");
    is_int(config_check(&cfg, &none, err, sizeof err), CONFIG_RUN, "the defaults agree");
}

/* ---- each option parses a valid value into its field ------------------------ */

static void test_valid_values(void)
{
    config_t cfg;
    ok(parse_one(&cfg, "data", "line") == CONFIG_RUN && strcmp(cfg.data, "line") == 0,
       "--data line");
    ok(parse_one(&cfg, "data-dir", "/some/where") == CONFIG_RUN &&
           strcmp(cfg.data_dir, "/some/where") == 0,
       "--data-dir /some/where");
    ok(parse_one(&cfg, "layers", "32,16,8") == CONFIG_RUN && cfg.nhidden == 3 &&
           cfg.hidden[0] == 32 && cfg.hidden[1] == 16 && cfg.hidden[2] == 8,
       "--layers 32,16,8");
    ok(parse_one(&cfg, "layers", "none") == CONFIG_RUN && cfg.nhidden == 0, "--layers none");
    ok(parse_one(&cfg, "activation", "tanh") == CONFIG_RUN && cfg.act == ACT_TANH,
       "--activation tanh");
    ok(parse_one(&cfg, "init", "kaiming") == CONFIG_RUN && cfg.init == INIT_KAIMING,
       "--init kaiming");
    ok(parse_one(&cfg, "init", "xavier") == CONFIG_RUN && cfg.init == INIT_XAVIER,
       "--init xavier");
    ok(parse_one(&cfg, "optimizer", "adamw") == CONFIG_RUN && cfg.opt.kind == OPT_ADAMW,
       "--optimizer adamw");
    ok(parse_one(&cfg, "lr", "0.25") == CONFIG_RUN && cfg.opt.lr == 0.25, "--lr 0.25");
    ok(parse_one(&cfg, "momentum", "0.5") == CONFIG_RUN && cfg.opt.momentum == 0.5,
       "--momentum 0.5");
    ok(parse_one(&cfg, "weight-decay", "1e-2") == CONFIG_RUN && cfg.opt.weight_decay == 0.01,
       "--weight-decay 1e-2");
    ok(parse_one(&cfg, "schedule", "cosine") == CONFIG_RUN && cfg.opt.schedule == SCHED_COSINE,
       "--schedule cosine");
    ok(parse_one(&cfg, "warmup", "7") == CONFIG_RUN && cfg.opt.warmup_steps == 7, "--warmup 7");
    ok(parse_one(&cfg, "min-lr", "0.0001") == CONFIG_RUN && cfg.opt.min_lr == 0.0001,
       "--min-lr 0.0001");
    ok(parse_one(&cfg, "epochs", "9") == CONFIG_RUN && cfg.epochs == 9, "--epochs 9");
    ok(parse_one(&cfg, "steps", "123") == CONFIG_RUN && cfg.steps == 123, "--steps 123");
    ok(parse_one(&cfg, "global-batch", "256") == CONFIG_RUN && cfg.global_batch == 256,
       "--global-batch 256");
    ok(parse_one(&cfg, "micro-batch", "8") == CONFIG_RUN && cfg.micro_batch == 8,
       "--micro-batch 8");
    ok(parse_one(&cfg, "seed", "9223372036854775807") == CONFIG_RUN &&
           cfg.seed == (uint64_t)INT64_MAX,
       "--seed 2^63-1");
    ok(parse_one(&cfg, "deterministic", NULL) == CONFIG_RUN && cfg.deterministic == 1,
       "--deterministic");
    ok(parse_one(&cfg, "device", "cuda") == CONFIG_RUN && strcmp(cfg.device, "cuda") == 0,
       "--device cuda");
    ok(parse_one(&cfg, "threads", "3") == CONFIG_RUN && cfg.threads == 3, "--threads 3");
    ok(parse_one(&cfg, "run-dir", "runs/x") == CONFIG_RUN && strcmp(cfg.run_dir, "runs/x") == 0,
       "--run-dir runs/x");
    ok(parse_one(&cfg, "resume", "runs/x/ckpt/step-00000004") == CONFIG_RUN &&
           strcmp(cfg.resume, "runs/x/ckpt/step-00000004") == 0,
       "--resume STEPDIR");
    ok(parse_one(&cfg, "ckpt-every", "50") == CONFIG_RUN && cfg.ckpt_every == 50,
       "--ckpt-every 50");
    ok(parse_one(&cfg, "ckpt-interval", "2.5") == CONFIG_RUN && cfg.ckpt_interval == 2.5,
       "--ckpt-interval 2.5");
    ok(parse_one(&cfg, "ckpt-keep", "1") == CONFIG_RUN && cfg.ckpt_keep == 1, "--ckpt-keep 1");
    ok(parse_one(&cfg, "ckpt-async", NULL) == CONFIG_RUN && cfg.ckpt_async == 1, "--ckpt-async");
    ok(parse_one(&cfg, "ckpt-level", "0") == CONFIG_RUN && cfg.ckpt_level == 0,
       "--ckpt-level 0");
    ok(parse_one(&cfg, "ckpt-threads", "4") == CONFIG_RUN && cfg.ckpt_threads == 4,
       "--ckpt-threads 4");
    ok(parse_one(&cfg, "ckpt-buffered", NULL) == CONFIG_RUN && cfg.ckpt_buffered == 1,
       "--ckpt-buffered");
    ok(parse_one(&cfg, "ckpt-no-adapt", NULL) == CONFIG_RUN && cfg.ckpt_no_adapt == 1,
       "--ckpt-no-adapt");
    ok(parse_one(&cfg, "stop-signal", "SIGUSR2") == CONFIG_RUN && cfg.stop_signal == SIGUSR2,
       "--stop-signal SIGUSR2");
    ok(parse_one(&cfg, "grace", "4") == CONFIG_RUN && cfg.grace == 4, "--grace 4");
    ok(parse_one(&cfg, "hang-timeout", "2.5") == CONFIG_RUN && cfg.hang_timeout == 2.5,
       "--hang-timeout 2.5");
    ok(parse_one(&cfg, "hang-timeout", "0") == CONFIG_RUN && cfg.hang_timeout == 0,
       "--hang-timeout 0 (off)");
    config_defaults(&cfg);
    is_int(cfg.no_liveness, 0, "the liveness ring is on by default");
    ok(parse_one(&cfg, "no-liveness", NULL) == CONFIG_RUN && cfg.no_liveness == 1,
       "--no-liveness");
    ok(parse_one(&cfg, "log-every", "5") == CONFIG_RUN && cfg.log_every == 5, "--log-every 5");
    {
        config_t dflt;
        config_defaults(&dflt);
        ok(dflt.log_every == 0 && dflt.log_interval == 5,
           "by default progress comes by time: --log-every unset, --log-interval 5");
    }
    ok(parse_one(&cfg, "log-interval", "0.5") == CONFIG_RUN && cfg.log_interval == 0.5,
       "--log-interval 0.5");
    ok(parse_one(&cfg, "log-interval", "0") == CONFIG_EUSAGE, "--log-interval 0 is refused");
    ok(parse_one(&cfg, "step-delay-ms", "20") == CONFIG_RUN && cfg.step_delay_ms == 20,
       "--step-delay-ms 20");
    ok(parse_one(&cfg, "ckpt-local-copy-delay-ms", "300") == CONFIG_RUN &&
           cfg.ckpt_local_copy_delay_ms == 300,
       "--ckpt-local-copy-delay-ms 300");
    ok(parse_one(&cfg, "trace-samples", "runs/x/trace") == CONFIG_RUN &&
           strcmp(cfg.trace_samples, "runs/x/trace") == 0,
       "--trace-samples runs/x/trace");
    ok(parse_one(&cfg, "quiet", NULL) == CONFIG_RUN && cfg.quiet == 1, "--quiet");
    ok(parse_one(&cfg, "mtbf", "2.5") == CONFIG_RUN && cfg.mtbf_hours == 2.5, "--mtbf 2.5");
    ok(parse_one(&cfg, "ckpt-local", "/dev/shm/x/%n") == CONFIG_RUN &&
           strcmp(cfg.ckpt_local, "/dev/shm/x/%n") == 0,
       "--ckpt-local /dev/shm/x/%%n");
    ok(parse_one(&cfg, "ckpt-local-every", "4") == CONFIG_RUN && cfg.ckpt_local_every == 4,
       "--ckpt-local-every 4");
    ok(parse_one(&cfg, "ckpt-local-interval", "30") == CONFIG_RUN &&
           cfg.ckpt_local_interval == 30,
       "--ckpt-local-interval 30");
    ok(parse_one(&cfg, "ckpt-local-keep", "1") == CONFIG_RUN && cfg.ckpt_local_keep == 1,
       "--ckpt-local-keep 1");
    ok(parse_one(&cfg, "ckpt-local-level", "3") == CONFIG_RUN && cfg.ckpt_local_level == 3,
       "--ckpt-local-level 3");
    ok(parse_one(&cfg, "ckpt-flush-every", "5") == CONFIG_RUN && cfg.ckpt_flush_every == 5,
       "--ckpt-flush-every 5");
    ok(parse_one(&cfg, "ckpt-local-remove-at-end", NULL) == CONFIG_RUN &&
           cfg.ckpt_local_remove_at_end == 1,
       "--ckpt-local-remove-at-end");
    ok(parse_one(&cfg, "ckpt-local-exchange", "steps") == CONFIG_RUN &&
           cfg.ckpt_local_exchange == CONFIG_EXCHANGE_STEPS,
       "--ckpt-local-exchange steps");
    ok(parse_one(&cfg, "ckpt-local-exchange", "thread") == CONFIG_RUN &&
           cfg.ckpt_local_exchange == CONFIG_EXCHANGE_THREAD,
       "--ckpt-local-exchange thread");
    ok(parse_one(&cfg, "ckpt-local-exchange", "auto") == CONFIG_RUN &&
           cfg.ckpt_local_exchange == CONFIG_EXCHANGE_AUTO,
       "--ckpt-local-exchange auto");
    config_defaults(&cfg);
    is_int(cfg.ckpt_local_exchange, CONFIG_EXCHANGE_AUTO, "--ckpt-local-exchange is auto by default");
    ok(parse_one(&cfg, "ckpt-local-exchange", "helper") == CONFIG_EUSAGE,
       "--ckpt-local-exchange helper is refused");
    ok(parse_one(&cfg, "fault", "kill@12") == CONFIG_RUN && strcmp(cfg.fault, "kill@12") == 0,
       "--fault kill@12");

    config_given_t given;
    char err[ERR_MAX];
    is_int(PARSE(&cfg, &given, err, "--help"), CONFIG_HELP, "--help returns CONFIG_HELP");
    covered[row_index(config_option_find("help"))] = 1;
    is_int(PARSE(&cfg, &given, err, "--version"), CONFIG_VERSION,
           "--version returns CONFIG_VERSION");
    covered[row_index(config_option_find("version"))] = 1;
    ok(PARSE(&cfg, &given, err, "--lr=0.5", "--data=sine") == CONFIG_RUN && cfg.opt.lr == 0.5 &&
           strcmp(cfg.data, "sine") == 0,
       "--NAME=VALUE works too");

    for (size_t i = 0; i < table_rows; i++)
        ok(covered[i], "--%s has a hand-written check above", table[i].name);
}

static void check_enum_name(const config_option_t *row, const char *name, void *arg)
{
    (void)arg;
    config_t cfg;
    ok(parse_one(&cfg, row->name, name) == CONFIG_RUN &&
           (row->kind == CONFIG_ARG_ENUM ? field_int(&cfg, row) == row->names->parse(name)
                                         : strcmp(field_text(&cfg, row), name) == 0),
       "--%s %s is stored", row->name, name);
}

/* Values at the edges of each row's range are accepted and land in the
 * field the row names, read back through the table. */
static void test_edges_accepted(void)
{
    config_t cfg;
    char value[VALUE_MAX];
    for (size_t i = 0; i < table_rows; i++) {
        const config_option_t *row = &table[i];
        switch (row->kind) {
        case CONFIG_ARG_INT:
            snprintf(value, sizeof value, "%" PRId64, row->ints.min);
            ok(parse_one(&cfg, row->name, value) == CONFIG_RUN &&
                   field_int(&cfg, row) == row->ints.min,
               "--%s takes its minimum %s", row->name, value);
            snprintf(value, sizeof value, "%" PRId64, row->ints.max);
            ok(parse_one(&cfg, row->name, value) == CONFIG_RUN &&
                   field_int(&cfg, row) == row->ints.max,
               "--%s takes its maximum %s", row->name, value);
            break;
        case CONFIG_ARG_REAL:
            snprintf(value, sizeof value, "%.17g", (row->reals.min + row->reals.max) / 2);
            ok(parse_one(&cfg, row->name, value) == CONFIG_RUN &&
                   field_real(&cfg, row) == strtod(value, NULL),
               "--%s takes %s", row->name, value);
            if (!(row->reals.open & CONFIG_OPEN_MIN)) {
                snprintf(value, sizeof value, "%.17g", row->reals.min);
                ok(parse_one(&cfg, row->name, value) == CONFIG_RUN, "--%s takes its minimum",
                   row->name);
            }
            if (!(row->reals.open & CONFIG_OPEN_MAX)) {
                snprintf(value, sizeof value, "%.17g", row->reals.max);
                ok(parse_one(&cfg, row->name, value) == CONFIG_RUN, "--%s takes its maximum",
                   row->name);
            }
            break;
        case CONFIG_ARG_TEXT: {
            size_t longest = row->size - row->text.reserve - 1;
            memset(value, 'a', longest);
            value[longest] = '\0';
            ok(parse_one(&cfg, row->name, value) == CONFIG_RUN &&
                   strcmp(field_text(&cfg, row), value) == 0,
               "--%s takes %zu bytes of text", row->name, longest);
            if (!row->text.nonempty)
                ok(parse_one(&cfg, row->name, "") == CONFIG_RUN, "--%s takes ''", row->name);
            break;
        }
        case CONFIG_ARG_ENUM:
        case CONFIG_ARG_CHOICE:
            each_name(row, check_enum_name, NULL);
            break;
        case CONFIG_ARG_FLAG:
            ok(parse_one(&cfg, row->name, NULL) == CONFIG_RUN && field_int(&cfg, row) == 1,
               "--%s sets its field to 1", row->name);
            break;
        case CONFIG_ARG_LAYERS:
            ok(parse_one(&cfg, row->name, "1,2,3,4,5,6,7,8,9,10,11,12,13,14,65536") ==
                       CONFIG_RUN &&
                   cfg.nhidden == MODEL_MAX_LAYERS - 1 && cfg.hidden[14] == 65536,
               "--%s takes %d layers up to 65536 wide", row->name, MODEL_MAX_LAYERS - 1);
            break;
        case CONFIG_ARG_ACTION:
            break;
        }
    }
}

/* ---- refusals -------------------------------------------------------------- */

/* "--NAME VALUE" is refused with a message that starts "--NAME: " (and
 * names `mention` too, when given). */
static void refused_saying(const config_option_t *row, const char *value, const char *why,
                           const char *mention)
{
    config_t cfg;
    config_given_t given;
    char option[VALUE_MAX], err[ERR_MAX], prefix[VALUE_MAX];
    snprintf(option, sizeof option, "--%s", row->name);
    snprintf(prefix, sizeof prefix, "--%s: ", row->name);
    int rc = PARSE(&cfg, &given, err, option, value);
    if (!ok(rc == CONFIG_EUSAGE && strncmp(err, prefix, strlen(prefix)) == 0 &&
                (!mention || strstr(err, mention)),
            "--%s refuses %s, naming the option%s%s", row->name, why,
            mention ? " and " : "", mention ? mention : ""))
        diag("value '%.40s': rc %d, message: %s", value, rc, err);
}

static void refused(const config_option_t *row, const char *value, const char *why)
{
    refused_saying(row, value, why, NULL);
}

static void refused_name(const config_option_t *row, const char *name, void *message)
{
    ok(strstr(message, name) != NULL, "--%s: the refusal lists '%s'", row->name, name);
}

static void refuse_number(const config_option_t *row)
{
    char value[VALUE_MAX], limit[VALUE_MAX];
    static const char *const garbage[] = {"abc", "", "0x10", " 5", "5 ", "5x", "--5", "+"};
    for (size_t i = 0; i < sizeof garbage / sizeof garbage[0]; i++) {
        snprintf(value, sizeof value, "'%s'", garbage[i]);
        refused(row, garbage[i], value);
    }
    if (row->kind == CONFIG_ARG_INT) {
        refused(row, "1.5", "a fraction");
        refused(row, "1e3", "an exponent");
        if (row->ints.min > INT64_MIN) {
            snprintf(value, sizeof value, "%" PRId64, row->ints.min - 1);
            snprintf(limit, sizeof limit, "%" PRId64, row->ints.min);
            refused_saying(row, value, "one below its minimum", limit);
        }
        if (row->ints.max < INT64_MAX)
            snprintf(value, sizeof value, "%" PRId64, row->ints.max + 1);
        else
            snprintf(value, sizeof value, "9223372036854775808");
        snprintf(limit, sizeof limit, "%" PRId64 "]", row->ints.max);
        refused_saying(row, value, "one above its maximum", limit);
        refused(row, "99999999999999999999999", "a number past int64");
        return;
    }
    refused(row, "nan", "nan");
    refused(row, "inf", "inf");
    refused(row, "-inf", "-inf");
    refused(row, "1e9999", "a number past double");
    snprintf(value, sizeof value, "%.17g",
             row->reals.open & CONFIG_OPEN_MIN ? row->reals.min : row->reals.min - 1);
    refused(row, value, "its minimum when open, or below it");
    snprintf(value, sizeof value, "%.17g",
             row->reals.open & CONFIG_OPEN_MAX ? row->reals.max : row->reals.max * 2 + 1);
    snprintf(limit, sizeof limit, "%.15g%c", row->reals.max,
             row->reals.open & CONFIG_OPEN_MAX ? ')' : ']');
    refused_saying(row, value, "its maximum when open, or above it", limit);
}

static void refuse_value(const config_option_t *row)
{
    char value[VALUE_MAX], err[ERR_MAX];
    config_t cfg;
    config_given_t given;
    switch (row->kind) {
    case CONFIG_ARG_INT:
    case CONFIG_ARG_REAL:
        refuse_number(row);
        break;
    case CONFIG_ARG_TEXT: {
        size_t too_long = row->size - row->text.reserve;
        memset(value, 'a', too_long);
        value[too_long] = '\0';
        refused(row, value, "text one byte too long");
        if (row->text.nonempty)
            refused(row, "", "''");
        break;
    }
    case CONFIG_ARG_ENUM:
    case CONFIG_ARG_CHOICE:
        refused(row, "bogus", "an unknown name");
        refused(row, "", "''");
        if (row->names->prefix)
            refused(row, row->names->prefix, "its prefix alone");
        snprintf(value, sizeof value, "--%s", row->name);
        PARSE(&cfg, &given, err, value, "bogus");
        each_name(row, refused_name, err);
        break;
    case CONFIG_ARG_LAYERS: {
        static const char *const bad[] = {"", "0", "abc", "256,,128", ",128", "256,",
                                          "256,-1", "65537",
                                          "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16"};
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            snprintf(value, sizeof value, "'%s'", bad[i]);
            refused(row, bad[i], value);
        }
        break;
    }
    case CONFIG_ARG_FLAG:
    case CONFIG_ARG_ACTION:
        break;
    }
}

static void test_refusals(void)
{
    config_t cfg;
    config_given_t given;
    char option[VALUE_MAX], err[ERR_MAX], want[ERR_MAX];
    for (size_t i = 0; i < table_rows; i++) {
        const config_option_t *row = &table[i];
        int valued = row->kind != CONFIG_ARG_FLAG && row->kind != CONFIG_ARG_ACTION;
        if (valued) {
            snprintf(option, sizeof option, "--%s", row->name);
            snprintf(want, sizeof want, "option '--%s' needs a value", row->name);
            PARSE(&cfg, &given, err, option);
        } else {
            snprintf(option, sizeof option, "--%s=1", row->name);
            snprintf(want, sizeof want, "option '--%s' takes no value", row->name);
            PARSE(&cfg, &given, err, option);
        }
        is_str(err, want, "--%s: %s", row->name, valued ? "a missing value" : "a value given");
        refuse_value(row);
    }
}

/* The wording of each kind of message, pinned. */
static void test_messages(void)
{
    static const struct {
        const char *option, *value, *message;
    } cases[] = {
        {"--epochs", "0", "--epochs: expected a whole number >= 1, got '0'"},
        {"--steps", "1099511627777",
         "--steps: expected a whole number in [1, 1099511627776], got '1099511627777'"},
        {"--ckpt-every", "0", "--ckpt-every: expected a whole number of steps >= 1, got '0'"},
        {"--ckpt-level", "20", "--ckpt-level: expected a zstd level in [0, 19], got '20'"},
        {"--lr", "0", "--lr: expected a number in (0, 1000], got '0'"},
        {"--momentum", "1", "--momentum: expected a number in [0, 1), got '1'"},
        {"--min-lr", "-1", "--min-lr: expected a number >= 0, got '-1'"},
        {"--grace", "0", "--grace: expected seconds > 0, got '0'"},
        {"--hang-timeout", "-1", "--hang-timeout: expected seconds >= 0, got '-1'"},
        {"--mtbf", "0", "--mtbf: expected hours > 0, got '0'"},
        {"--ckpt-local-keep", "3", "--ckpt-local-keep: expected a whole number in [1, 2], got '3'"},
        {"--fault", "", "--fault: expected KIND@STEP[:RANK]"},
        {"--ckpt-interval", "2e9",
         "--ckpt-interval: expected seconds in (0, 1000000000], got '2e9'"},
        {"--activation", "gelu", "--activation: expected relu or tanh, got 'gelu'"},
        {"--optimizer", "lion", "--optimizer: expected sgd, adam or adamw, got 'lion'"},
        {"--stop-signal", "TERM", "--stop-signal: expected USR1 or USR2, got 'TERM'"},
        {"--device", "gpu", "--device: expected auto, cpu or cuda, got 'gpu'"},
        {"--data", "cifar", "--data: unknown data set 'cifar' (fashion-mnist, line or sine)"},
        {"--run-dir", "", "--run-dir: empty or too long"},
        {"--data-dir", "", "--data-dir: empty (leave it out for the default) or too long"},
        {"--resume", "", "--resume: expected auto, none or a checkpoint directory"},
        {"--layers", "0",
         "--layers: expected widths like 256,128 (1..65536, at most 15 layers) or 'none', got '0'"},
    };
    config_t cfg;
    config_given_t given;
    char err[ERR_MAX];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        PARSE(&cfg, &given, err, cases[i].option, cases[i].value);
        is_str(err, cases[i].message, "%s '%s': the message", cases[i].option, cases[i].value);
    }
    /* --fault is read whole by config_parse: kind, step and rank. */
    char ferr[ERR_MAX];
    ok(PARSE_ALL(&cfg, ferr, "--fault", "kill@12") == CONFIG_RUN && cfg.fault_signal == SIGKILL &&
           cfg.fault_step == 12 && cfg.fault_rank == -1,
       "--fault kill@12: SIGKILL after step 12 on every rank");
    ok(PARSE_ALL(&cfg, ferr, "--fault", "stop@3:2") == CONFIG_RUN && cfg.fault_signal == SIGSTOP &&
           cfg.fault_step == 3 && cfg.fault_rank == 2,
       "--fault stop@3:2: SIGSTOP after step 3 on rank 2");
    ok(PARSE_ALL(&cfg, ferr, "--lr", "0.5") == CONFIG_RUN && cfg.fault_signal == 0,
       "no --fault: no fault");
    static const char *const bad_faults[] = {"kill", "kill@", "kill@0", "boom@3", "kill@3:",
                                             "kill@3:x", "kill@3:-1", "kill@3x", "@3",
                                             "kill@99999999999999999999"};
    for (size_t i = 0; i < sizeof bad_faults / sizeof bad_faults[0]; i++) {
        char want[ERR_MAX];
        snprintf(want, sizeof want, "--fault: expected KIND@STEP[:RANK] with KIND kill, segv, "
                 "abort or stop, STEP from 1 and RANK from 0, got '%s'", bad_faults[i]);
        is_int(PARSE_ALL(&cfg, ferr, "--fault", bad_faults[i]), CONFIG_EUSAGE,
               "--fault %s: refused", bad_faults[i]);
        is_str(ferr, want, "  with a message naming it");
    }
    /* A refused cluster must not leave getopt inside it for the next parse. */
    PARSE(&cfg, &given, err, "-xy");
    is_str(err, "unknown option '-x' (ftrain's options are long: --help lists them)",
           "-xy names -x");
    ok(PARSE(&cfg, &given, err, "--lr", "0.5") == CONFIG_RUN && cfg.opt.lr == 0.5,
       "a parse after a refused cluster starts afresh");
    is_int(PARSE(&cfg, &given, err, "--lr", "0.5", "extra"), CONFIG_EUSAGE, "a stray argument");
    is_str(err, "unexpected argument 'extra'", "a stray argument is named");
}

/* ---- --help ---------------------------------------------------------------- */

/* @return 1 when help has "--name" not followed by more of a name. */
static int help_names(const char *help, const char *name)
{
    char option[VALUE_MAX];
    snprintf(option, sizeof option, "--%s", name);
    for (const char *at = strstr(help, option); at; at = strstr(at + 1, option)) {
        char after = at[strlen(option)];
        if (!(after >= 'a' && after <= 'z') && !(after >= '0' && after <= '9') && after != '-')
            return 1;
    }
    return 0;
}

static void help_lists_name(const config_option_t *row, const char *name, void *unused)
{
    (void)unused;
    ok(strstr(row->help ? row->help : "", name) != NULL, "--%s: its help names '%s'",
       row->name, name);
}

static void test_help(void)
{
    char *help = NULL;
    size_t help_len = 0;
    FILE *out = open_memstream(&help, &help_len);
    if (!out) {
        skip("open_memstream failed");
        return;
    }
    config_usage(out);
    fclose(out);
    ok(strncmp(help, "usage: ftrain", 13) == 0, "--help starts with the usage line");
    ok(strstr(help, "\nexit codes: 0 finished, 75") != NULL, "--help ends with the exit codes");
    /* Every code README.md and the man page list, the watchdog's too. */
    const char *codes = strstr(help, "\nexit codes:");
    static const char *const code_words[] = {" 0 finished", " 75 stopped", " 76 a hang",
                                             " 2 bad options", " 1 any other", "128+signal"};
    for (size_t i = 0; i < sizeof code_words / sizeof code_words[0]; i++) {
        char flat[ERR_MAX] = "";
        for (size_t k = 0; codes && codes[k] && k + 1 < sizeof flat; k++)
            flat[k] = codes[k] == '\n' ? ' ' : codes[k];
        ok(strstr(flat, code_words[i]) != NULL, "--help's exit codes list '%s'", code_words[i]);
    }
    for (size_t i = 0; i < table_rows; i++) {
        const config_option_t *row = &table[i];
        char option[VALUE_MAX];
        ok(help_names(help, row->name), "--help lists --%s", row->name);
        if (row->metavar) {
            snprintf(option, sizeof option, "--%s %s", row->name, row->metavar);
            ok(strstr(help, option) != NULL, "--help shows '%s'", option);
        }
        if (row->section) {
            snprintf(option, sizeof option, "\n%s:\n", row->section);
            ok(strstr(help, option) != NULL, "--help has the heading '%s'", row->section);
        }
        if (row->default_text && row->help)
            ok(strstr(row->help, row->default_text) != NULL, "--%s: its help says its default %s",
               row->name, row->default_text);
        if (row->names)
            each_name(row, help_lists_name, NULL);
    }
    size_t longest = 0;
    for (const char *line = help; *line;) {
        size_t len = strcspn(line, "\n");
        longest = len > longest ? len : longest;
        line += len + (line[len] == '\n');
    }
    ok(longest <= HELP_WIDTH_MAX, "--help lines fit %d columns (longest %zu)", HELP_WIDTH_MAX,
       longest);
    free(help);
}

/* ---- conflicts --------------------------------------------------------------- */

/* Messages more than one case expects. */
#define MOMENTUM_SGD "--momentum applies to --optimizer sgd only"
#define NEED_COSINE "--warmup and --min-lr need --schedule cosine"
#define NEED_LOCAL                                                                         \
    "--ckpt-local-every, --ckpt-local-interval, --ckpt-local-keep, --ckpt-local-level, "  \
    "--ckpt-local-exchange, --ckpt-flush-every and --ckpt-local-remove-at-end need "       \
    "--ckpt-local"
#define APART                                                                             \
    " (--run-dir's ckpt): each tier would delete the other's checkpoints; give a node-local " \
    "directory outside it"
#define NEED_RUN_DIR "--ckpt-every, --ckpt-interval and --ckpt-async need --run-dir"

static void test_conflicts(void)
{
    /* Each command line parses option by option; config_check judges it. */
    static const struct {
        const char *what;
        const char *args[ARGS_MAX + 1];
        const char *want; /* the message; NULL: no conflict */
    } cases[] = {
        {"--epochs with --steps", {"--epochs", "2", "--steps", "5"},
         "--epochs and --steps conflict: give one"},
        {"--steps alone", {"--steps", "5"}, NULL},
        {"a micro-batch that does not divide", {"--global-batch", "32", "--micro-batch", "5"},
         "--micro-batch 5 does not divide --global-batch 32"},
        {"a micro-batch above the global batch", {"--global-batch", "8", "--micro-batch", "16"},
         "--micro-batch 16 is larger than --global-batch 8"},
        {"--momentum with adam", {"--optimizer", "adam", "--momentum", "0.9"}, MOMENTUM_SGD},
        {"--momentum with the default optimizer", {"--momentum", "0.5"}, MOMENTUM_SGD},
        {"--momentum with sgd", {"--optimizer", "sgd", "--momentum", "0.5"}, NULL},
        {"--warmup without cosine", {"--warmup", "10"}, NEED_COSINE},
        {"--warmup with cosine", {"--warmup", "10", "--schedule", "cosine"}, NULL},
        {"--min-lr without cosine", {"--min-lr", "0.0001"}, NEED_COSINE},
        {"--min-lr above --lr", {"--schedule", "cosine", "--lr", "0.001", "--min-lr", "0.01"},
         "--min-lr is larger than --lr"},
        {"--ckpt-every without --run-dir", {"--ckpt-every", "5"}, NEED_RUN_DIR},
        {"--ckpt-interval without --run-dir", {"--ckpt-interval", "60"}, NEED_RUN_DIR},
        {"--ckpt-async without --run-dir", {"--ckpt-async"}, NEED_RUN_DIR},
        {"--ckpt-buffered without --run-dir", {"--ckpt-buffered"},
         "--ckpt-buffered needs --run-dir"},
        {"--ckpt-no-adapt without --run-dir", {"--ckpt-no-adapt"},
         "--ckpt-no-adapt needs --run-dir"},
        {"--resume auto without --run-dir", {"--resume", "auto"}, "--resume auto needs --run-dir"},
        {"--resume STEPDIR without --run-dir", {"--resume", "/x/ckpt/step-00000001"}, NULL},
        /* Checkpoint options that nothing would use without --run-dir. */
        {"--ckpt-keep without --run-dir", {"--ckpt-keep", "5"}, "--ckpt-keep needs --run-dir"},
        {"--ckpt-level without --run-dir", {"--ckpt-level", "5"},
         "--ckpt-level needs --run-dir"},
        {"--ckpt-level 1 (the default, given) without --run-dir", {"--ckpt-level", "1"},
         "--ckpt-level needs --run-dir"},
        {"--ckpt-threads without --run-dir", {"--ckpt-threads", "2"},
         "--ckpt-threads needs --run-dir (or --resume with a checkpoint directory, which it "
         "reads)"},
        {"--ckpt-threads with --resume STEPDIR (it reads it)",
         {"--ckpt-threads", "2", "--resume", "/x/ckpt/step-00000001"}, NULL},
        {"--ckpt-threads with --resume none, no --run-dir",
         {"--ckpt-threads", "2", "--resume", "none"},
         "--ckpt-threads needs --run-dir (or --resume with a checkpoint directory, which it "
         "reads)"},
        {"--ckpt-keep, --ckpt-level, --ckpt-threads with --run-dir",
         {"--run-dir", "r", "--ckpt-keep", "5", "--ckpt-level", "5", "--ckpt-threads", "2"},
         NULL},
        {"--ckpt-async without a save trigger", {"--run-dir", "r", "--ckpt-async"},
         "--ckpt-async needs --ckpt-every, --ckpt-interval or --ckpt-flush-every"},
        {"checkpoint options with --run-dir",
         {"--run-dir", "r", "--ckpt-async", "--ckpt-every", "5", "--ckpt-buffered",
          "--ckpt-no-adapt"},
         NULL},
        {"--data-dir with --data line", {"--data", "line", "--data-dir", "/x"},
         "--data-dir applies to --data fashion-mnist only"},
        {"--data-dir with --data fashion-mnist", {"--data-dir", "/x"}, NULL},
        {"--ckpt-local without --run-dir", {"--ckpt-local", "/l", "--ckpt-local-every", "2"},
         "--ckpt-local needs --run-dir (the shared tier stays the source of truth)"},
        {"--ckpt-local without a frequency", {"--run-dir", "r", "--ckpt-local", "/l"},
         "--ckpt-local needs --ckpt-local-every or --ckpt-local-interval"},
        {"--ckpt-local-every without --ckpt-local", {"--run-dir", "r", "--ckpt-local-every", "2"},
         NEED_LOCAL},
        {"--ckpt-flush-every without --ckpt-local", {"--run-dir", "r", "--ckpt-flush-every", "2"},
         NEED_LOCAL},
        {"--ckpt-local-exchange without --ckpt-local",
         {"--run-dir", "r", "--ckpt-local-exchange", "steps"}, NEED_LOCAL},
        {"--ckpt-local-remove-at-end without --ckpt-local",
         {"--run-dir", "r", "--ckpt-local-remove-at-end"}, NEED_LOCAL},
        /* The local tier at, inside or around the shared root: each tier
         * would prune the other's step directories. */
        {"--ckpt-local at the shared root",
         {"--run-dir", "r", "--ckpt-local", "r/ckpt", "--ckpt-local-every", "2"},
         "--ckpt-local 'r/ckpt' is the shared checkpoint root 'r/ckpt'" APART},
        {"--ckpt-local at the shared root, spelled otherwise",
         {"--run-dir", "/a//r/", "--ckpt-local", "/a/./r/ckpt/", "--ckpt-local-every", "2"},
         "--ckpt-local '/a/./r/ckpt/' is the shared checkpoint root '/a//r//ckpt'" APART},
        {"--ckpt-local inside the shared root",
         {"--run-dir", "r", "--ckpt-local", "r/ckpt/local", "--ckpt-local-every", "2"},
         "--ckpt-local 'r/ckpt/local' lies inside the shared checkpoint root 'r/ckpt'" APART},
        {"--ckpt-local per node inside the shared root",
         {"--run-dir", "r", "--ckpt-local", "./r/ckpt/%n", "--ckpt-local-every", "2"},
         "--ckpt-local './r/ckpt/%n' lies inside the shared checkpoint root 'r/ckpt'" APART},
        {"--ckpt-local holding the shared root",
         {"--run-dir", "r", "--ckpt-local", "r", "--ckpt-local-every", "2"},
         "--ckpt-local 'r' contains the shared checkpoint root 'r/ckpt'" APART},
        {"--ckpt-local '.' holding a relative shared root",
         {"--run-dir", "r", "--ckpt-local", ".", "--ckpt-local-every", "2"},
         "--ckpt-local '.' contains the shared checkpoint root 'r/ckpt'" APART},
        {"--ckpt-local '/' holding an absolute shared root",
         {"--run-dir", "/a/r", "--ckpt-local", "/", "--ckpt-local-every", "2"},
         "--ckpt-local '/' contains the shared checkpoint root '/a/r/ckpt'" APART},
        {"--ckpt-local beside the shared root",
         {"--run-dir", "r", "--ckpt-local", "r/ckpt2", "--ckpt-local-every", "2"}, NULL},
        {"--ckpt-local in the run directory, beside its ckpt",
         {"--run-dir", "r", "--ckpt-local", "r/local/%n", "--ckpt-local-every", "2"}, NULL},
        {"--ckpt-local with %n glued to ckpt (only the node's name tells)",
         {"--run-dir", "r", "--ckpt-local", "r/ckpt%n", "--ckpt-local-every", "2"}, NULL},
        {"--ckpt-local with '..' (only the real path tells)",
         {"--run-dir", "r", "--ckpt-local", "r/../r/ckpt", "--ckpt-local-every", "2"}, NULL},
        {"--ckpt-local absolute, --run-dir relative (only the real paths tell)",
         {"--run-dir", "r", "--ckpt-local", "/r/ckpt", "--ckpt-local-every", "2"}, NULL},
        {"the local tier with its options",
         {"--run-dir", "r", "--ckpt-local", "/l/%n", "--ckpt-local-every", "2",
          "--ckpt-flush-every", "3", "--ckpt-async"},
         NULL},
        {"--ckpt-local-exchange with --ckpt-local",
         {"--run-dir", "r", "--ckpt-local", "/l/%n", "--ckpt-local-every", "2",
          "--ckpt-local-exchange", "steps"},
         NULL},
    };
    config_t cfg;
    config_given_t given;
    char err[ERR_MAX];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int parsed = parse_list(&cfg, &given, err, cases[i].args);
        int rc = parsed == CONFIG_RUN ? config_check(&cfg, &given, err, sizeof err) : parsed;
        if (!cases[i].want)
            ok(rc == CONFIG_RUN, "config_check accepts %s", cases[i].what);
        else if (!ok(rc == CONFIG_EUSAGE && parsed == CONFIG_RUN, "config_check refuses %s",
                     cases[i].what))
            diag("rc %d, message: %s", rc, err);
        else
            is_str(err, cases[i].want, "%s: the message", cases[i].what);
    }
    /* A config_t made by hand, not by the parser. */
    config_defaults(&cfg);
    cfg.micro_batch = 0;
    is_int(config_check(&cfg, &(config_given_t){0}, err, sizeof err), CONFIG_EUSAGE,
           "config_check refuses a micro-batch of 0");

    /* config_parse: the check, then what one option implies for another. */
    is_int(PARSE_ALL(&cfg, err, "--steps", "5", "--epochs", "2"), CONFIG_EUSAGE,
           "config_parse runs config_check");
    ok(PARSE_ALL(&cfg, err, "--steps", "5") == CONFIG_RUN && cfg.epochs == 0 && cfg.steps == 5,
       "--steps sets the epochs to 0");
    ok(PARSE_ALL(&cfg, err, "--data", "line") == CONFIG_RUN && strcmp(cfg.resume, "none") == 0,
       "without --run-dir the resume is none");
    ok(PARSE_ALL(&cfg, err, "--run-dir", "runs/x") == CONFIG_RUN &&
           strcmp(cfg.resume, "auto") == 0,
       "with --run-dir the resume is auto");
}

/* Path text compared component by component. */
static void test_path_within(void)
{
    static const struct {
        const char *inner, *outer;
        int want;
    } cases[] = {
        {"r/ckpt", "r/ckpt", 1},   {"r/ckpt/a", "r/ckpt", 1}, {"r/ckpt2", "r/ckpt", 0},
        {"r", "r/ckpt", 0},        {"r/ckpt", "", 1},         {"/a", "/", 1},
        {"/r/ckpt", "r/ckpt", 0},  {"r/ckpt", "/r/ckpt", 0},  {"/a/b", "/a", 1},
        {"/ab", "/a", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        is_int(config_path_within(cases[i].inner, cases[i].outer), cases[i].want,
               "'%s' within '%s': %d", cases[i].inner, cases[i].outer, cases[i].want);
}

/* The warning a cosine warm-up as long as the run gets. */
static void test_schedule_warning(void)
{
    config_t cfg;
    char err[ERR_MAX], msg[ERR_MAX] = "";
    PARSE_ALL(&cfg, err, "--schedule", "cosine", "--warmup", "100", "--steps", "3");
    ok(config_schedule_warning(&cfg, 3, msg, sizeof msg) == 1 &&
           strstr(msg, "--warmup 100 is not shorter than the run's 3 steps"),
       "a warm-up of 100 steps in a run of 3 is warned about: %s", msg);
    PARSE_ALL(&cfg, err, "--schedule", "cosine", "--warmup", "3", "--steps", "3");
    ok(config_schedule_warning(&cfg, 3, msg, sizeof msg) == 1,
       "a warm-up as long as the run is warned about");
    PARSE_ALL(&cfg, err, "--schedule", "cosine", "--warmup", "2", "--steps", "3");
    is_int(config_schedule_warning(&cfg, 3, msg, sizeof msg), 0,
           "a warm-up shorter than the run is not");
    PARSE_ALL(&cfg, err, "--schedule", "cosine", "--steps", "3");
    is_int(config_schedule_warning(&cfg, 3, msg, sizeof msg), 0, "no warm-up is not");
}

/* ---- names printed back ------------------------------------------------------ */

static void test_printing(void)
{
    is_str(config_signal_name(SIGUSR1), "USR1", "USR1 named");
    is_str(config_signal_name(SIGUSR2), "USR2", "USR2 named");
    is_str(config_signal_name(SIGTERM), "TERM", "TERM named");
    is_str(config_signal_name(SIGINT), "INT", "INT named");
    is_str(config_signal_name(SIGKILL), "?", "an unexpected signal is '?'");

    config_t cfg;
    char err[ERR_MAX], json[ERR_MAX], tiny[8];
    PARSE_ALL(&cfg, err, "--activation", "tanh", "--optimizer", "sgd", "--schedule", "cosine");
    ok(config_to_json(&cfg, json, sizeof json) > 0 && strstr(json, "\"activation\":\"tanh\"") &&
           strstr(json, "\"optimizer\":\"sgd\"") && strstr(json, "\"schedule\":\"cosine\""),
       "config_to_json prints the names the options parsed");
    is_int(config_to_json(&cfg, tiny, sizeof tiny), CONFIG_ENOSPACE,
           "config_to_json into a small buffer is CONFIG_ENOSPACE");
}

int main(void)
{
    table = config_options(&table_rows);
    test_table_shape();
    test_defaults();
    test_valid_values();
    test_edges_accepted();
    test_refusals();
    test_messages();
    test_help();
    test_conflicts();
    test_path_within();
    test_schedule_warning();
    test_printing();
    return done_testing();
}

/*
 * config.c - parsing and validation of the options: each value read by its
 * row of the option table (config_table.c) and checked strictly (a number
 * must be a whole (or finite) number in range, an enumeration one of its
 * names), the defaults applied from the table, the command line walked
 * with getopt_long, and conflicting options refused by config_check(), so
 * the rest of the program can trust a config_t.  Also the options written
 * back as JSON.  The --help text is config_help.c's.
 */
#include "config/config.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"
#include "nn/data.h"
#include "util/util.h"

static int takes_value(const config_option_t *row)
{
    return row->kind != CONFIG_ARG_FLAG && row->kind != CONFIG_ARG_ACTION;
}

/* ---- messages -------------------------------------------------------------- */

/* Room for a number as "%.15g" or an int64_t, a range of two, and the
 * names of any enumeration. */
#define NUMBER_TEXT_MAX 32
#define RANGE_TEXT_MAX (2 * NUMBER_TEXT_MAX + 8)
#define NAMES_TEXT_MAX 256

/* "--NAME: expected UNIT RANGE, got 'TEXT'".  An option whose maximum is
 * only a cap says ">= min" unless the value is above that cap. */
static int refuse_number(const config_option_t *row, const char *text, int above_max,
                         char *err, size_t cap)
{
    int whole = row->kind == CONFIG_ARG_INT;
    const char *unit = row->unit ? row->unit : whole ? "a whole number" : "a number";
    int full = above_max || !row->max_is_cap;
    char range[RANGE_TEXT_MAX];
    if (whole && full)
        snprintf(range, sizeof range, "in [%" PRId64 ", %" PRId64 "]", row->ints.min,
                 row->ints.max);
    else if (whole)
        snprintf(range, sizeof range, ">= %" PRId64, row->ints.min);
    else if (full)
        snprintf(range, sizeof range, "in %c%.15g, %.15g%c",
                 row->reals.open & CONFIG_OPEN_MIN ? '(' : '[', row->reals.min, row->reals.max,
                 row->reals.open & CONFIG_OPEN_MAX ? ')' : ']');
    else
        snprintf(range, sizeof range, "%s %.15g",
                 row->reals.open & CONFIG_OPEN_MIN ? ">" : ">=", row->reals.min);
    return util_fail(err, cap, CONFIG_EUSAGE, "--%s: expected %s %s, got '%s'", row->name, unit,
                     range, text);
}

/* "--NAME: expected a, b or c, got 'TEXT'", or with a noun
 * "--NAME: unknown NOUN 'TEXT' (a, b or c)". */
static int refuse_name(const config_option_t *row, const char *text, char *err, size_t cap)
{
    char names[NAMES_TEXT_MAX];
    row->names->names(names, sizeof names);
    if (row->names->noun)
        return util_fail(err, cap, CONFIG_EUSAGE, "--%s: unknown %s '%s' (%s)", row->name,
                         row->names->noun, text, names);
    return util_fail(err, cap, CONFIG_EUSAGE, "--%s: expected %s, got '%s'", row->name, names,
                     text);
}

/* ---- values ---------------------------------------------------------------- */

typedef enum {
    NUMBER_OK,
    NUMBER_REFUSED,  /* not a number, or below the minimum */
    NUMBER_ABOVE_MAX
} number_status_t;

/* A number as a person writes it: an optional sign, then a digit or a
 * point; no blanks, no hex ("0x10" would be 16), no "inf" or "nan". */
static int plain_number(const char *text, const char *allowed)
{
    const char *digits = text + (*text == '-' || *text == '+');
    return (isdigit((unsigned char)*digits) || *digits == '.') &&
           strspn(text, allowed) == strlen(text);
}

static number_status_t parse_whole(const char *text, const config_int_range_t *range,
                                   int64_t *out)
{
    if (!plain_number(text, "+-0123456789"))
        return NUMBER_REFUSED;
    errno = 0;
    char *end = NULL;
    long long value = strtoll(text, &end, 10);
    if (*end)
        return NUMBER_REFUSED;
    if ((errno == ERANGE && value > 0) || value > range->max)
        return NUMBER_ABOVE_MAX;
    if (errno || value < range->min)
        return NUMBER_REFUSED;
    *out = value;
    return NUMBER_OK;
}

static number_status_t parse_real(const char *text, const config_real_range_t *range,
                                  double *out)
{
    if (!plain_number(text, "+-0123456789.eE"))
        return NUMBER_REFUSED;
    errno = 0;
    char *end = NULL;
    double value = strtod(text, &end);
    if (*end)
        return NUMBER_REFUSED;
    int overflow = errno == ERANGE && value > 1;
    if (overflow || value > range->max ||
        (value == range->max && (range->open & CONFIG_OPEN_MAX)))
        return NUMBER_ABOVE_MAX;
    if (errno || !isfinite(value) || value < range->min ||
        (value == range->min && (range->open & CONFIG_OPEN_MIN)))
        return NUMBER_REFUSED;
    *out = value;
    return NUMBER_OK;
}

/* Store into an int or a 64-bit field (an enum is an int). */
static int store_int(const config_option_t *row, void *field, int64_t value, char *err,
                     size_t cap)
{
    if (row->size == sizeof(int)) {
        int narrow = (int)value;
        memcpy(field, &narrow, sizeof narrow);
    } else if (row->size == sizeof(int64_t)) {
        memcpy(field, &value, sizeof value);
    } else {
        return util_fail(err, cap, CONFIG_EUSAGE,
                         "--%s: the option table gives it a field of %zu bytes", row->name,
                         row->size);
    }
    return CONFIG_RUN;
}

static int store_text(const config_option_t *row, void *field, const char *text)
{
    snprintf(field, row->size, "%s", text);
    return CONFIG_RUN;
}

/* text without the prefix its enumeration allows ("SIGUSR1" -> "USR1"). */
static const char *strip_prefix(const config_enum_t *choices, const char *text)
{
    size_t prefix_len = choices->prefix ? strlen(choices->prefix) : 0;
    return prefix_len && strncmp(text, choices->prefix, prefix_len) == 0 ? text + prefix_len
                                                                           : text;
}

static int refuse_layers(const config_option_t *row, const char *text, char *err, size_t cap)
{
    return util_fail(err, cap, CONFIG_EUSAGE,
                     "--%s: expected widths like 256,128 (1..%d, at most %d layers) or "
                     "'none', got '%s'",
                     row->name, LAYER_WIDTH_MAX, HIDDEN_LAYERS_MAX, text);
}

/* "256,128" (1..LAYER_WIDTH_MAX each, at most HIDDEN_LAYERS_MAX) or "none"
 * for a linear model; cfg is changed only when all of text is good. */
static int parse_layers(config_t *cfg, const config_option_t *row, const char *text, char *err,
                        size_t cap)
{
    int widths[HIDDEN_LAYERS_MAX];
    int count = 0;
    if (strcmp(text, "none") == 0) {
        cfg->nhidden = 0;
        return CONFIG_RUN;
    }
    const char *cursor = text;
    do {
        char *end = NULL;
        errno = 0;
        long width = strtol(cursor, &end, 10);
        if (end == cursor || errno || width < 1 || width > LAYER_WIDTH_MAX ||
            count >= HIDDEN_LAYERS_MAX)
            return refuse_layers(row, text, err, cap);
        widths[count++] = (int)width;
        if (*end == ',' && end[1]) /* a comma, and not a trailing one */
            end++;
        else if (*end)
            return refuse_layers(row, text, err, cap);
        cursor = end;
    } while (*cursor);
    cfg->nhidden = count;
    memcpy(cfg->hidden, widths, (size_t)count * sizeof widths[0]);
    return CONFIG_RUN;
}

/* Set the row's field of cfg from text (NULL for a flag). */
static int apply_value(config_t *cfg, const config_option_t *row, const char *text, char *err,
                       size_t cap)
{
    void *field = (char *)cfg + row->offset;
    int64_t whole = 0;
    double real = 0;
    number_status_t status = NUMBER_OK;
    switch (row->kind) {
    case CONFIG_ARG_FLAG:
        return store_int(row, field, 1, err, cap);
    case CONFIG_ARG_INT:
        status = parse_whole(text, &row->ints, &whole);
        if (status != NUMBER_OK)
            return refuse_number(row, text, status == NUMBER_ABOVE_MAX, err, cap);
        return store_int(row, field, whole, err, cap);
    case CONFIG_ARG_REAL:
        status = parse_real(text, &row->reals, &real);
        if (status != NUMBER_OK)
            return refuse_number(row, text, status == NUMBER_ABOVE_MAX, err, cap);
        memcpy(field, &real, sizeof real);
        return CONFIG_RUN;
    case CONFIG_ARG_TEXT:
        if ((row->text.nonempty && !*text) || strlen(text) >= row->size - row->text.reserve)
            return util_fail(err, cap, CONFIG_EUSAGE, "--%s: %s", row->name, row->text.refusal);
        return store_text(row, field, text);
    case CONFIG_ARG_ENUM:
    case CONFIG_ARG_CHOICE: {
        const char *name = strip_prefix(row->names, text);
        int value = row->names->parse(name);
        if (value < 0)
            return refuse_name(row, text, err, cap);
        if (row->kind == CONFIG_ARG_ENUM)
            return store_int(row, field, value, err, cap);
        return store_text(row, field, name);
    }
    case CONFIG_ARG_LAYERS:
        return parse_layers(cfg, row, text, err, cap);
    case CONFIG_ARG_ACTION:
        break;
    }
    return util_fail(err, cap, CONFIG_EUSAGE, "--%s: the option table gives it no value to set",
                     row->name);
}

/* ---- defaults -------------------------------------------------------------- */

/* Room for the message about a bad default. */
#define DEFAULT_ERR_MAX 256

void config_defaults(config_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    /* Betas and eps have no option; the table sets the rest. */
    optim_cfg_default(&cfg->opt);
    cfg->hang_timeout = CONFIG_HANG_AUTO; /* derived: a value no option takes */
    cfg->mtbf_hours = 24;
    cfg->ckpt_local_keep = 2;
    cfg->fault_rank = -1;
    size_t count;
    const config_option_t *rows = config_options(&count);
    for (size_t i = 0; i < count; i++) {
        const config_option_t *row = &rows[i];
        char err[DEFAULT_ERR_MAX];
        if (!row->default_text ||
            apply_value(cfg, row, row->default_text, err, sizeof err) == CONFIG_RUN)
            continue;
        /* A bad default is a bug in the table, true for every run: say so loudly. */
        fprintf(stderr, "ftrain: the default of --%s is refused: %s\n", row->name, err);
        abort();
    }
}

int config_resolve_batch(config_t *cfg, int64_t samples)
{
    if (cfg->global_batch != CONFIG_BATCH_AUTO)
        return 0;
    cfg->global_batch = CONFIG_BATCH_DEFAULT;
    int64_t fit = cfg->micro_batch > 0 ? samples / cfg->micro_batch * cfg->micro_batch : 0;
    if (fit >= CONFIG_BATCH_DEFAULT || fit < 1)
        return 0;
    cfg->global_batch = fit;
    return 1;
}

/* ---- parsing --------------------------------------------------------------- */

/* getopt_long's value for a long option: above every short option's char. */
#define LONG_OPTION_BASE 256
/* Each short option's letter, with ':' when it takes a value. */
#define SHORT_OPTIONS_MAX (2 * CONFIG_OPTIONS_MAX + 1)

static const config_option_t *row_of_getopt(int val)
{
    size_t count;
    const config_option_t *rows = config_options(&count);
    if (val >= LONG_OPTION_BASE && (size_t)(val - LONG_OPTION_BASE) < count)
        return &rows[val - LONG_OPTION_BASE];
    for (size_t i = 0; val > 0 && i < count; i++)
        if (rows[i].short_name == val)
            return &rows[i];
    return NULL;
}

/* longs holds CONFIG_OPTIONS_MAX + 1 entries, shorts SHORT_OPTIONS_MAX. */
static void build_getopt_tables(struct option *longs, char *shorts)
{
    size_t nshort = 0, count;
    const config_option_t *rows = config_options(&count);
    for (size_t i = 0; i < count; i++) {
        const config_option_t *row = &rows[i];
        int has_arg = takes_value(row) ? required_argument : no_argument;
        longs[i] = (struct option){row->name, has_arg, NULL, LONG_OPTION_BASE + (int)i};
        if (row->short_name) {
            shorts[nshort++] = row->short_name;
            if (has_arg == required_argument)
                shorts[nshort++] = ':';
        }
    }
    longs[count] = (struct option){0, 0, 0, 0};
    shorts[nshort] = '\0';
}

/* getopt_long returned '?'.  optopt is a short option's letter (in "-xy"
 * argv[optind - 1] is not the option), the value of a long option that
 * lacks its argument or was given one it does not take, or 0. */
static int refuse_getopt_error(char **argv, char *err, size_t cap)
{
    const config_option_t *row = optopt > 0 ? row_of_getopt(optopt) : NULL;
    int letter = optopt > 0 && optopt < LONG_OPTION_BASE;
    if (row && letter)
        return util_fail(err, cap, CONFIG_EUSAGE, "option '-%c' needs a value", optopt);
    if (letter)
        return util_fail(err, cap, CONFIG_EUSAGE, "unknown option '-%c' (%s)", optopt,
                         optopt == 'h' ? "did you mean --help?"
                                       : "ftrain's options are long: --help lists them");
    if (row)
        return util_fail(err, cap, CONFIG_EUSAGE,
                         takes_value(row) ? "option '--%s' needs a value"
                                          : "option '--%s' takes no value",
                         row->name);
    return util_fail(err, cap, CONFIG_EUSAGE, "unknown option '%s'", argv[optind - 1]);
}

int config_parse_options(config_t *cfg, config_given_t *given, int argc, char **argv,
                         char *err, size_t cap)
{
    struct option longs[CONFIG_OPTIONS_MAX + 1];
    char shorts[SHORT_OPTIONS_MAX];
    build_getopt_tables(longs, shorts);
    optind = 0; /* 0, not 1: also forgets a cluster left by an earlier call */
    opterr = 0;
    for (;;) {
        int val = getopt_long(argc, argv, shorts, longs, NULL);
        if (val == -1)
            break;
        const config_option_t *row = val == '?' ? NULL : row_of_getopt(val);
        if (!row)
            return refuse_getopt_error(argv, err, cap);
        given->rows |= config_row_bit(row);
        if (row->kind == CONFIG_ARG_ACTION)
            return row->action;
        int rc = apply_value(cfg, row, optarg, err, cap);
        if (rc != CONFIG_RUN)
            return rc;
    }
    if (optind < argc)
        return util_fail(err, cap, CONFIG_EUSAGE, "unexpected argument '%s'", argv[optind]);
    return CONFIG_RUN;
}

/* ---- options against each other -------------------------------------------- */

/* Without --run-dir nothing is saved: an option that only shapes the saves
 * would be ignored in silence. */
static int check_without_run_dir(const config_t *cfg, const config_given_t *given, char *err,
                                 size_t cap)
{
    static const char *const save_only[] = {"ckpt-keep", "ckpt-level"};
    if (cfg->ckpt_every || cfg->ckpt_interval || cfg->ckpt_async)
        return util_fail(err, cap, CONFIG_EUSAGE,
                         "--ckpt-every, --ckpt-interval and --ckpt-async need --run-dir");
    if (cfg->ckpt_buffered)
        return util_fail(err, cap, CONFIG_EUSAGE, "--ckpt-buffered needs --run-dir");
    if (cfg->ckpt_no_adapt)
        return util_fail(err, cap, CONFIG_EUSAGE, "--ckpt-no-adapt needs --run-dir");
    for (size_t i = 0; i < UTIL_COUNT(save_only); i++)
        if (config_given_has(given, save_only[i]))
            return util_fail(err, cap, CONFIG_EUSAGE, "--%s needs --run-dir", save_only[i]);
    /* The threads also read the checkpoint a --resume DIR names. */
    int resume_dir = strcmp(cfg->resume, "auto") != 0 && strcmp(cfg->resume, "none") != 0;
    if (config_given_has(given, "ckpt-threads") && !resume_dir)
        return util_fail(err, cap, CONFIG_EUSAGE,
                         "--ckpt-threads needs --run-dir (or --resume with a checkpoint "
                         "directory, which it reads)");
    /* Only the default "auto" is quietly turned into "none". */
    if (config_given_has(given, "resume") && strcmp(cfg->resume, "auto") == 0)
        return util_fail(err, cap, CONFIG_EUSAGE, "--resume auto needs --run-dir");
    return CONFIG_RUN;
}

/* Path text with its "." components and repeated or trailing slashes
 * dropped: "/" stays "/", "." and "./" become "" (the working directory).
 * @return 0, or -1 when it has a ".." (only the real path tells where that
 * leads: a link's parent is not the lexical one) or does not fit. */
static int path_lexical(const char *path, char *out, size_t cap)
{
    size_t len = 0;
    if (cap < 2)
        return -1;
    if (path[0] == '/')
        out[len++] = '/';
    for (const char *p = path; *p;) {
        while (*p == '/')
            p++;
        size_t n = strcspn(p, "/");
        if (n == 2 && p[0] == '.' && p[1] == '.')
            return -1;
        if (n && !(n == 1 && p[0] == '.')) {
            int slash = len > 0 && out[len - 1] != '/';
            if (len + slash + n >= cap)
                return -1;
            if (slash)
                out[len++] = '/';
            memcpy(out + len, p, n);
            len += n;
        }
        p += n;
    }
    out[len] = '\0';
    return 0;
}

int config_path_within(const char *inner, const char *outer)
{
    if ((inner[0] == '/') != (outer[0] == '/'))
        return 0; /* one relative, one absolute: not decided by the text */
    size_t n = strlen(outer);
    if (n == 0 || strcmp(outer, "/") == 0)
        return 1; /* the working directory, or the root, holds every path */
    return strncmp(inner, outer, n) == 0 && (inner[n] == '\0' || inner[n] == '/');
}

/* The part of a --ckpt-local pattern that every node shares: the whole path
 * ("%%" is a '%') when it has no %n, else the directories before the first
 * %n (*per_node set).  @return 0, or -1 for another '%' or no room. */
static int local_fixed_part(const char *pattern, char *out, size_t cap, int *per_node)
{
    size_t len = 0, dir_end = 0;
    *per_node = 0;
    for (const char *p = pattern; *p && !*per_node; p++) {
        if (*p == '%' && p[1] == 'n') {
            *per_node = 1;
            break;
        }
        if (*p == '%' && p[1] != '%')
            return -1;
        p += *p == '%';
        if (len + 1 >= cap)
            return -1;
        out[len++] = *p;
        if (*p == '/')
            dir_end = len;
    }
    out[*per_node ? dir_end : len] = '\0';
    return 0;
}

/* --ckpt-local that is, contains or lies inside --run-dir's ckpt: each
 * tier would prune the other's step-<N> directories, deleting committed
 * shared checkpoints.  Decided here when the text tells (no "..", both
 * relative or both absolute); tier_open() checks the real paths, links
 * and %n resolved, on every node. */
static int check_local_apart(const config_t *cfg, char *err, size_t cap)
{
    char shared[CONFIG_PATH_MAX + sizeof "/ckpt"], fixed[CONFIG_PATH_MAX];
    char local_text[CONFIG_PATH_MAX], shared_text[sizeof shared];
    int per_node = 0;
    snprintf(shared, sizeof shared, "%s/ckpt", cfg->run_dir);
    if (local_fixed_part(cfg->ckpt_local, fixed, sizeof fixed, &per_node) != 0 ||
        path_lexical(fixed, local_text, sizeof local_text) != 0 ||
        path_lexical(shared, shared_text, sizeof shared_text) != 0 ||
        (local_text[0] == '/') != (shared_text[0] == '/'))
        return CONFIG_RUN;
    /* With %n the node's directory lies below `fixed`, never at it. */
    int inside = config_path_within(local_text, shared_text);
    int contains = !per_node && config_path_within(shared_text, local_text);
    if (!inside && !contains)
        return CONFIG_RUN;
    const char *how = inside && contains ? "is" : inside ? "lies inside" : "contains";
    return util_fail(err, cap, CONFIG_EUSAGE,
                     "--ckpt-local '%s' %s the shared checkpoint root '%s' (--run-dir's ckpt): "
                     "each tier would delete the other's checkpoints; give a node-local "
                     "directory outside it",
                     cfg->ckpt_local, how, shared);
}

int config_check(const config_t *cfg, const config_given_t *given, char *err, size_t cap)
{
    long long micro = cfg->micro_batch,
              global = cfg->global_batch == CONFIG_BATCH_AUTO ? CONFIG_BATCH_DEFAULT
                                                              : cfg->global_batch;
    if (config_given_has(given, "epochs") && config_given_has(given, "steps"))
        return util_fail(err, cap, CONFIG_EUSAGE, "--epochs and --steps conflict: give one");
    if (micro > global)
        return util_fail(err, cap, CONFIG_EUSAGE,
                         "--micro-batch %lld is larger than --global-batch %lld", micro, global);
    if (micro < 1 || global % micro != 0)
        return util_fail(err, cap, CONFIG_EUSAGE,
                         "--micro-batch %lld does not divide --global-batch %lld", micro, global);
    /* Adam's betas are not --momentum: a given one would be ignored. */
    if (config_given_has(given, "momentum") && cfg->opt.kind != OPT_SGD)
        return util_fail(err, cap, CONFIG_EUSAGE, "--momentum applies to --optimizer sgd only");
    if (cfg->opt.schedule != SCHED_COSINE && (cfg->opt.warmup_steps || cfg->opt.min_lr))
        return util_fail(err, cap, CONFIG_EUSAGE,
                         "--warmup and --min-lr need --schedule cosine");
    if (cfg->opt.min_lr > cfg->opt.lr)
        return util_fail(err, cap, CONFIG_EUSAGE, "--min-lr is larger than --lr");
    if (!cfg->run_dir[0] && check_without_run_dir(cfg, given, err, cap) != CONFIG_RUN)
        return CONFIG_EUSAGE;
    int local_freq = cfg->ckpt_local_every || cfg->ckpt_local_interval;
    if (cfg->ckpt_local[0] && !cfg->run_dir[0])
        return util_fail(err, cap, CONFIG_EUSAGE,
                         "--ckpt-local needs --run-dir (the shared tier stays the source of "
                         "truth)");
    if (cfg->ckpt_local[0] && !local_freq)
        return util_fail(err, cap, CONFIG_EUSAGE,
                         "--ckpt-local needs --ckpt-local-every or --ckpt-local-interval");
    if (cfg->ckpt_local[0] && check_local_apart(cfg, err, cap) != CONFIG_RUN)
        return CONFIG_EUSAGE;
    if (!cfg->ckpt_local[0] && (local_freq || cfg->ckpt_flush_every ||
                                config_given_has(given, "ckpt-local-keep") ||
                                config_given_has(given, "ckpt-local-level") ||
                                config_given_has(given, "ckpt-local-exchange") ||
                                cfg->ckpt_local_remove_at_end))
        return util_fail(err, cap, CONFIG_EUSAGE,
                         "--ckpt-local-every, --ckpt-local-interval, --ckpt-local-keep, "
                         "--ckpt-local-level, --ckpt-local-exchange, --ckpt-flush-every and "
                         "--ckpt-local-remove-at-end need --ckpt-local");
    if (cfg->ckpt_async && !cfg->ckpt_every && !cfg->ckpt_interval && !cfg->ckpt_flush_every)
        return util_fail(err, cap, CONFIG_EUSAGE,
                         "--ckpt-async needs --ckpt-every, --ckpt-interval or "
                         "--ckpt-flush-every");
    if (strcmp(cfg->data, "fashion-mnist") != 0 && cfg->data_dir[0])
        return util_fail(err, cap, CONFIG_EUSAGE,
                         "--data-dir applies to --data fashion-mnist only");
    return CONFIG_RUN;
}

int config_schedule_warning(const config_t *cfg, int64_t total_steps, char *msg, size_t cap)
{
    int64_t warmup = cfg->opt.warmup_steps;
    if (cfg->opt.schedule != SCHED_COSINE || warmup == 0 || warmup < total_steps)
        return 0;
    snprintf(msg, cap, "--warmup %lld is not shorter than the run's %lld steps: the learning "
             "rate only ramps up and the cosine decay never starts (give a shorter --warmup)",
             (long long)warmup, (long long)total_steps);
    return 1;
}

/* The values one option implies for another, once they agree. */
static void apply_implied(config_t *cfg, const config_given_t *given)
{
    if (config_given_has(given, "steps"))
        cfg->epochs = 0; /* the default epoch count gives way */
    if (!cfg->run_dir[0] && !config_given_has(given, "resume"))
        snprintf(cfg->resume, sizeof cfg->resume, "none"); /* nothing to resume from */
}

/* --fault KIND@STEP[:RANK] into fault_signal, fault_step, fault_rank. */
static int parse_fault(config_t *cfg, char *err, size_t cap)
{
    static const struct {
        const char *name;
        int sig;
    } kinds[] = {{"kill", SIGKILL}, {"segv", SIGSEGV}, {"abort", SIGABRT}, {"stop", SIGSTOP}};
    cfg->fault_signal = 0;
    cfg->fault_rank = -1;
    if (!cfg->fault[0])
        return CONFIG_RUN;
    const char *at = strchr(cfg->fault, '@');
    size_t klen = at ? (size_t)(at - cfg->fault) : 0;
    for (size_t i = 0; at && i < UTIL_COUNT(kinds); i++)
        if (strlen(kinds[i].name) == klen && strncmp(cfg->fault, kinds[i].name, klen) == 0)
            cfg->fault_signal = kinds[i].sig;
    char *end = NULL;
    long long step = -1, rank = -1;
    if (cfg->fault_signal && isdigit((unsigned char)at[1])) {
        errno = 0;
        step = strtoll(at + 1, &end, 10);
        if (errno || step < 1)
            step = -1;
        if (step > 0 && *end == ':' && isdigit((unsigned char)end[1])) {
            errno = 0;
            rank = strtoll(end + 1, &end, 10);
            if (errno || rank > INT_MAX)
                step = -1;
        }
    }
    if (!cfg->fault_signal || step < 1 || !end || *end)
        return util_fail(err, cap, CONFIG_EUSAGE,
                         "--fault: expected KIND@STEP[:RANK] with KIND kill, segv, abort or "
                         "stop, STEP from 1 and RANK from 0, got '%s'", cfg->fault);
    cfg->fault_step = step;
    cfg->fault_rank = (int)rank;
    return CONFIG_RUN;
}

int config_parse(config_t *cfg, int argc, char **argv, char *err, size_t cap)
{
    config_given_t given = {0};
    int rc = config_parse_options(cfg, &given, argc, argv, err, cap);
    if (rc == CONFIG_RUN)
        rc = config_check(cfg, &given, err, cap);
    if (rc == CONFIG_RUN)
        rc = parse_fault(cfg, err, cap);
    if (rc == CONFIG_RUN)
        apply_implied(cfg, &given);
    return rc;
}

/* ---- printing back ---------------------------------------------------------- */

int config_to_json(const config_t *cfg, char *buf, size_t cap)
{
    json_t *doc = json_object(), *layers = json_array();
    if (!doc || !layers) {
        json_decref(doc);
        json_decref(layers);
        return CONFIG_ENOSPACE;
    }
    for (int i = 0; i < cfg->nhidden; i++)
        json_array_append_new(layers, json_integer(cfg->hidden[i]));
    json_object_set_new(doc, "data", json_string(cfg->data));
    json_object_set_new(doc, "layers", layers);
    json_object_set_new(doc, "activation", json_string(model_act_name(cfg->act)));
    /* --init is not here: it shapes step 0 only, and a resume takes the
     * weights from the checkpoint whatever it says.  The record keeps it
     * beside this object ("init"), so that old records resume as before. */
    json_object_set_new(doc, "optimizer", json_string(optim_kind_name(cfg->opt.kind)));
    json_object_set_new(doc, "lr", json_real(cfg->opt.lr));
    json_object_set_new(doc, "momentum", json_real(cfg->opt.momentum));
    json_object_set_new(doc, "weight_decay", json_real(cfg->opt.weight_decay));
    json_object_set_new(doc, "schedule", json_string(optim_sched_name(cfg->opt.schedule)));
    json_object_set_new(doc, "warmup", json_integer(cfg->opt.warmup_steps));
    json_object_set_new(doc, "min_lr", json_real(cfg->opt.min_lr));
    json_object_set_new(doc, "epochs", json_integer(cfg->epochs));
    json_object_set_new(doc, "steps", json_integer(cfg->steps));
    json_object_set_new(doc, "global_batch", json_integer(cfg->global_batch));
    json_object_set_new(doc, "micro_batch", json_integer(cfg->micro_batch));
    json_object_set_new(doc, "seed", json_integer((json_int_t)cfg->seed));
    json_object_set_new(doc, "deterministic", json_boolean(cfg->deterministic));
    size_t len = json_dumpb(doc, buf, cap, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(doc);
    if (len == 0 || len >= cap)
        return CONFIG_ENOSPACE;
    buf[len] = '\0';
    return (int)len;
}

const char *config_signal_name(int sig)
{
    return util_name_of(util_signals, UTIL_COUNT(util_signals), sig, "?");
}

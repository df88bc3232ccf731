/*
 * ckptctl.c - the command-line tool over the checkpoint library: list,
 * inspect, verify, diff, export, import and prune checkpoints, and flush
 * node-local ones into a shared root.
 *
 * This file holds main, the command table and the helpers the commands
 * share (ckptctl.h); the commands are in ckptctl_show.c, ckptctl_diff.c and
 * ckptctl_move.c.
 *
 * Every subcommand is one row of the `commands` table below; the same table
 * dispatches, checks the options a subcommand accepts and the number of its
 * arguments, and prints `--help`, so the help cannot drift from the code.
 *
 * Output: results go to stdout (one JSON document with --json), diagnostics
 * to stderr as "ckptctl: <what failed>: '<path>': <why>".  Exit codes:
 *
 *     0  success: checkpoints good, no differences
 *     1  a checkpoint or archive is bad (corrupt, incomplete, unsafe), or
 *        diff found differences
 *     2  usage error (unknown command or option, wrong arguments)
 *     3  any other error: not found, already exists, I/O, out of memory
 *
 * The user's manual is docs/ckptctl.md.
 */
#include "ckptctl.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* ---- options and the command table ------------------------------------------- */

typedef struct {
    unsigned bit;
    const char *name;  /* "--json" */
    const char *value; /* the value's name in help, NULL for a flag */
    const char *help;
} opt_def_t;

static const opt_def_t options[] = {
    {OPT_JSON, "--json", NULL, "print one JSON document on stdout"},
    {OPT_VERIFY, "--verify", NULL,
     "fully verify every committed checkpoint (re-read every byte)"},
    {OPT_KEEP, "--keep", "K", "keep the newest K committed checkpoints (default 3)"},
    {OPT_FORCE, "--force", NULL, "replace FILE if it exists"},
    {OPT_LOCAL, "--local", NULL,
     "DIR is a node-local root: its steps hold only some shards"},
    {OPT_TO, "--to", "DIR", "the shared root to write into (required)"},
    {OPT_STEP, "--step", "N",
     "the step (default: the newest the roots hold completely)"},
    {OPT_SET_ASIDE, "--set-aside", NULL,
     "also remove the checkpoints set aside as damaged (step-<N>.corrupt)"},
};
#define NOPTIONS (sizeof options / sizeof options[0])

/* An option and its value's name as help shows them: "--keep K". */
#define OPT_LABEL_MAX 32

typedef struct {
    const char *name;
    const char *synopsis; /* arguments after the name */
    const char *summary;  /* one line for the command list */
    const char *details;  /* paragraph for `help CMD` */
    unsigned opts;        /* OPT_* accepted */
    int min_operands, max_operands;
    int (*run)(const args_t *args);
} cmd_def_t;

static int cmd_help(const args_t *args);
static bool parse_digits(const char *text, uint64_t *value);
static bool parse_step(const char *text, uint64_t *step);

static const cmd_def_t commands[] = {
    {"list", "[--json] [--verify] [--local] [DIR]",
     "list the checkpoints under DIR (default .)",
     "Print one line per checkpoint under DIR: name, step, epoch (from the\n"
     "record), world size, raw and stored size, creation time and status\n"
     "(committed, incomplete or corrupt); LATEST marks the one LATEST names.\n"
     "With --local, DIR is a node-local root: each step also shows how many\n"
     "of its shards are present, and the bytes held; missing shards are not\n"
     "corruption (--verify checks the shards present).  A run directory\n"
     "(ftrain --run-dir) stands for its ckpt/, unless --local is given.\n"
     "Exits 1 when a checkpoint is corrupt, or with --verify does not verify.",
     OPT_JSON | OPT_VERIFY | OPT_LOCAL, 0, 1, cmd_list},
    {"inspect", "[--json] CKPT", "show a checkpoint's tensors, shards and record",
     "Print the tensors (dtype, shape, offset, bytes), the shards (byte range\n"
     "of the flat space, file size, frames, checksum) and the record: data\n"
     "cursor, lineage and configuration.  Reads only the manifest.",
     OPT_JSON, 1, 2, cmd_inspect},
    {"verify", "[--json] [--local] CKPT|DIR",
     "re-read every checksum of a checkpoint, or of each under DIR",
     "Re-read every shard and check every frame checksum, every shard\n"
     "checksum and size against the manifest.  Given a root DIR, verify every\n"
     "checkpoint in it (temp dirs of unfinished saves, and checkpoints pruned\n"
     "while verify runs, are reported, not counted).  With --local, the\n"
     "checkpoints are a node-local root's: the shards present are verified\n"
     "and the missing ones reported, which does not make a step bad.  Exits\n"
     "0 when all are good, 1 when one is bad.",
     OPT_JSON | OPT_LOCAL, 1, 2, cmd_verify},
    {"diff", "[--json] A B", "compare two checkpoints tensor by tensor",
     "For each tensor: identical, or the largest absolute and relative\n"
     "difference and how many elements differ; tensors missing from B, extra\n"
     "in B, and dtype or shape mismatches are listed.  The record is not\n"
     "compared.  Exits 0 when identical, 1 when different.",
     OPT_JSON, 2, 2, cmd_diff},
    {"export", "[--force] CKPT FILE.tar[.zst]",
     "verify a checkpoint and write it to a tar (or tar.zst) file",
     "Verify the checkpoint, then write its manifest and shards as\n"
     "step-<N>/... into FILE, zstd-compressed when FILE ends in .tar.zst.\n"
     "FILE appears complete or not at all.  An existing FILE is kept unless\n"
     "--force is given.",
     OPT_FORCE, 2, 3, cmd_export},
    {"import", "FILE DIR", "extract an exported checkpoint into the root DIR",
     "Check every archive entry (no absolute paths, '..', links, devices, or\n"
     "anything outside one step-<N>/ directory), extract into a temp dir\n"
     "under DIR, verify, and rename into DIR/step-<N>.  An existing\n"
     "checkpoint of that step is never replaced.  LATEST is not changed.  A run\n"
     "directory (ftrain --run-dir) stands for its ckpt/; a checkpoint is not a\n"
     "root.  A refused import leaves nothing, not even the DIR it created.",
     0, 2, 2, cmd_import},
    {"prune", "[--keep K] [--set-aside] DIR",
     "remove all but the newest K committed checkpoints (default 3)",
     "Remove all but the newest K committed checkpoints under DIR, and temp\n"
     "dirs of crashed saves older than the newest committed step.  The\n"
     "checkpoint LATEST names is never removed, nor the newest one that\n"
     "verifies (checkpoints are read, newest first, until one does).  K is\n"
     "from 1 to 2147483647.  Checkpoints set aside as damaged (step-<N>.corrupt,\n"
     "left by a resume from an older one) stay for inspection unless\n"
     "--set-aside is given.  A run directory (ftrain --run-dir) stands for its\n"
     "ckpt/; a checkpoint is not a root.",
     OPT_KEEP | OPT_SET_ASIDE, 1, 1, cmd_prune},
    {"flush", "[--json] LOCAL_ROOT... --to DIR [--step N]",
     "copy a step from node-local roots into the root DIR, complete",
     "Assemble one complete checkpoint from the step directories of the\n"
     "node-local roots given (each shard from the first root whose copy is\n"
     "good), verify it and commit it as DIR/step-<N> (LATEST updated).  The\n"
     "step is N, or the newest step the roots hold completely between them.\n"
     "Nothing is written when a shard is held by none of them, or when DIR\n"
     "already has the step, or is not a root (a file, a checkpoint).  A run\n"
     "directory DIR stands for its ckpt/.",
     OPT_JSON | OPT_TO | OPT_STEP, 1, INT_MAX, cmd_flush},
    {"help", "[COMMAND]", "show help for ckptctl or a command",
     "Print the list of commands, or one command's usage and options.", 0, 0, 1,
     cmd_help},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static const char ckpt_forms[] =
    "CKPT names one checkpoint: a step directory (ROOT/step-00000042),\n"
    "ROOT/42, ROOT 42 (two arguments), or ROOT alone for its latest one.\n"
    "A run directory (ftrain --run-dir DIR: DIR/ckpt and no checkpoint of its\n"
    "own) stands for the root DIR/ckpt wherever a ROOT or DIR is taken.\n";

static const char exit_codes[] =
    "exit codes:\n"
    "  0  success: checkpoints good, no differences\n"
    "  1  a checkpoint or archive is bad, or diff found differences\n"
    "  2  usage error\n"
    "  3  other error: not found, already exists, I/O, out of memory\n";

static const cmd_def_t *find_command(const char *name)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

static void print_usage(FILE *out)
{
    fprintf(out, "usage: ckptctl <command> [options] [arguments]\n\n"
                 "Inspect, verify, compare, export, import and prune ftrain "
                 "checkpoints,\nand flush node-local ones into a shared root."
                 "\n\ncommands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n%s\n%s\n", ckpt_forms, exit_codes);
    fprintf(out, "Run 'ckptctl help COMMAND' for a command's usage and options.\n");
    fprintf(out, "ckptctl --version prints the version.\n");
}

static void print_command_help(FILE *out, const cmd_def_t *command)
{
    fprintf(out, "usage: ckptctl %s %s\n\n%s\n", command->name, command->synopsis,
            command->summary);
    fprintf(out, "\n%s\n", command->details);
    fprintf(out, "\noptions:\n");
    for (size_t i = 0; i < NOPTIONS; i++) {
        const opt_def_t *opt = &options[i];
        if (!(command->opts & opt->bit))
            continue;
        char label[OPT_LABEL_MAX];
        snprintf(label, sizeof label, "%s%s%s", opt->name, opt->value ? " " : "",
                 opt->value ? opt->value : "");
        fprintf(out, "  %-12s %s\n", label, opt->help);
    }
    fprintf(out, "  %-12s %s\n", "--help", "show this help");
    if (strstr(command->synopsis, "CKPT"))
        fprintf(out, "\n%s", ckpt_forms);
    fprintf(out, "\n%s", exit_codes);
}

static int cmd_help(const args_t *args)
{
    if (args->noperands == 0) {
        print_usage(stdout);
        return EXIT_GOOD;
    }
    const cmd_def_t *command = find_command(args->operands[0]);
    if (!command)
        return ctl_usage_error("help", "unknown command '%s'", args->operands[0]);
    print_command_help(stdout, command);
    return EXIT_GOOD;
}

/* ---- parsing ------------------------------------------------------------------- */

/* The option arg names ("--keep", or "--keep=2" for one that takes a value,
 * the value then going to *value).  @return NULL when there is none. */
static const opt_def_t *find_option(const char *arg, const char **value)
{
    for (size_t i = 0; i < NOPTIONS; i++) {
        size_t name_len = strlen(options[i].name);
        if (strcmp(arg, options[i].name) == 0)
            return &options[i];
        if (options[i].value && strncmp(arg, options[i].name, name_len) == 0 &&
            arg[name_len] == '=') {
            *value = arg + name_len + 1;
            return &options[i];
        }
    }
    return NULL;
}

/* Record option opt (with its value, if it takes one) in args. */
static int set_option(const cmd_def_t *command, const opt_def_t *opt, const char *value,
                      args_t *args)
{
    if (opt->bit == OPT_KEEP) {
        uint64_t keep;
        /* Digits only: strtol would take " 2" and "+2" too. */
        if (!parse_digits(value, &keep) || keep < 1 || keep > INT_MAX)
            return ctl_usage_error(command->name,
                                   "--keep needs a whole number from 1 to %d, not '%s'",
                                   INT_MAX, value);
        args->keep = (int)keep;
    } else if (opt->bit == OPT_STEP) {
        /* The library takes steps up to INT64_MAX; a bigger one is a bad
         * value, refused here like any other. */
        if (!parse_step(value, &args->step) || args->step > INT64_MAX)
            return ctl_usage_error(command->name,
                                   "--step needs a step number from 0 to %" PRId64
                                   ", not '%s'", INT64_MAX, value);
    } else if (opt->bit == OPT_TO) {
        if (!*value)
            return ctl_usage_error(command->name, "--to needs a directory");
        args->to = value;
    }
    args->set |= opt->bit;
    return EXIT_GOOD;
}

/* Parse a command's arguments (those after its name) against its table row
 * into args.  --help stops parsing there and sets args->help. */
static int parse_args(const cmd_def_t *command, int argc, char **argv, args_t *args)
{
    bool only_operands = false; /* after "--" */
    for (int i = 0; i < argc; i++) {
        char *arg = argv[i];
        if (only_operands || arg[0] != '-' || arg[1] == '\0') {
            args->operands[args->noperands++] = arg;
            continue;
        }
        if (strcmp(arg, "--") == 0) {
            only_operands = true;
            continue;
        }
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            args->help = true;
            return EXIT_GOOD;
        }
        const char *value = NULL;
        const opt_def_t *opt = find_option(arg, &value);
        if (!opt) {
            /* --json=1: a known option that takes no value. */
            const char *eq = strchr(arg, '=');
            const opt_def_t *bare = NULL;
            if (eq) {
                char name_only[64];
                snprintf(name_only, sizeof name_only, "%.*s", (int)(eq - arg), arg);
                bare = find_option(name_only, &value);
            }
            if (bare && !bare->value)
                return ctl_usage_error(command->name, "option '%s' takes no value", bare->name);
            return ctl_usage_error(command->name, "unknown option '%s'", arg);
        }
        if (!(command->opts & opt->bit))
            return ctl_usage_error(command->name, "option '%s' does not apply to '%s'",
                                   opt->name, command->name);
        if (opt->value && !value) {
            if (i + 1 >= argc)
                return ctl_usage_error(command->name, "option '%s' needs a value",
                                       opt->name);
            value = argv[++i];
        }
        int rc = set_option(command, opt, value, args);
        if (rc != EXIT_GOOD)
            return rc;
    }
    if (args->noperands < command->min_operands)
        return ctl_usage_error(command->name, "missing argument (usage: ckptctl %s %s)",
                               command->name, command->synopsis);
    if (args->noperands > command->max_operands)
        return ctl_usage_error(command->name, "too many arguments (usage: ckptctl %s %s)",
                               command->name, command->synopsis);
    /* An empty argument (an unset shell variable, say) names no path: say
     * which one, before any of them is looked at. */
    for (int i = 0; i < args->noperands; i++)
        if (!args->operands[i][0])
            return ctl_usage_error(command->name, "argument %d is empty (usage: ckptctl %s %s)",
                                   i + 1, command->name, command->synopsis);
    return EXIT_GOOD;
}

/* ---- messages ------------------------------------------------------------------ */

int ctl_usage_error(const char *command, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("ckptctl: ", stderr);
    if (command)
        fprintf(stderr, "%s: ", command);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (command)
        fprintf(stderr, "try 'ckptctl help %s'\n", command);
    else
        fprintf(stderr, "try 'ckptctl --help'\n");
    return EXIT_USAGE;
}

void ctl_error(const char *what, const char *path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ckptctl: %s: '%s': ", what, path);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

const char *ctl_lib_why(int rc, const char *what, const char *path)
{
    const char *msg = ckpt_last_error();
    if (!msg || !*msg)
        return ckpt_strerror(rc);
    size_t what_len = strlen(what), path_len = strlen(path);
    if (strncmp(msg, what, what_len) == 0 && strncmp(msg + what_len, ": ", 2) == 0)
        msg += what_len + 2;
    if (msg[0] == '\'' && strncmp(msg + 1, path, path_len) == 0 &&
        strncmp(msg + 1 + path_len, "': ", 3) == 0)
        msg += path_len + 4;
    /* Some library messages start with the path unquoted ("ckpts: cannot
     * open: ..."). */
    else if (strncmp(msg, path, path_len) == 0 && strncmp(msg + path_len, ": ", 2) == 0)
        msg += path_len + 2;
    return msg;
}

int ctl_exit_for(int rc)
{
    switch (rc) {
    case CKPT_OK:
        return EXIT_GOOD;
    case CKPT_ECORRUPT:
    case CKPT_EFORMAT:
    case CKPT_EINCOMPLETE:
    case CKPT_EVERSION:
    case CKPT_EARCHIVE:
        return EXIT_BAD;
    default:
        return EXIT_ERROR;
    }
}

int ctl_lib_fail(const char *what, const char *path, int rc)
{
    ctl_error(what, path, "%s", ctl_lib_why(rc, what, path));
    return ctl_exit_for(rc);
}

/* ---- formatting ---------------------------------------------------------------- */

void ctl_fmt_bytes(uint64_t bytes, char *buf, size_t cap)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    const size_t nunits = sizeof units / sizeof units[0];
    if (bytes < 1024) {
        snprintf(buf, cap, "%" PRIu64 " B", bytes);
        return;
    }
    double scaled = (double)bytes;
    size_t unit = 0;
    while (scaled >= 1024.0 && unit + 1 < nunits) {
        scaled /= 1024.0;
        unit++;
    }
    snprintf(buf, cap, "%.1f %s", scaled, units[unit]);
}

void ctl_fmt_time_local(int64_t seconds, char *buf, size_t cap)
{
    time_t when = (time_t)seconds;
    struct tm fields;
    if (seconds < 0 || !localtime_r(&when, &fields) ||
        strftime(buf, cap, "%Y-%m-%d %H:%M:%S", &fields) == 0)
        snprintf(buf, cap, "-");
}

bool ctl_fmt_time_utc(int64_t seconds, char *buf, size_t cap)
{
    time_t when = (time_t)seconds;
    struct tm fields;
    if (seconds < 0 || !gmtime_r(&when, &fields) ||
        strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &fields) == 0) {
        snprintf(buf, cap, "-");
        return false;
    }
    return true;
}

void ctl_shape_text(const ckpt_tensor_t *tensor, char *buf, size_t cap)
{
    size_t len = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < tensor->ndim && len < cap; d++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%" PRId64, d ? ", " : "",
                                tensor->shape[d]);
    if (len < cap)
        snprintf(buf + len, cap - len, "]");
}

/* ---- JSON output --------------------------------------------------------------- */

/* Strings of the current output that ctl_json_str could not carry
 * exactly (ctl_json_print says so in the document). */
static size_t lossy_strings;

/* The length of the valid UTF-8 sequence that starts at p, as RFC 3629
 * defines it (no overlong forms, no surrogates, nothing past U+10FFFF);
 * 0 when there is none. */
static size_t utf8_sequence(const unsigned char *p)
{
    if (p[0] < 0x80)
        return 1;
    size_t len = p[0] >= 0xc2 && p[0] <= 0xdf   ? 2
                 : p[0] >= 0xe0 && p[0] <= 0xef ? 3
                 : p[0] >= 0xf0 && p[0] <= 0xf4 ? 4
                                                : 0;
    for (size_t i = 1; i < len; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    /* The second byte's range rules out the overlong, surrogate and too
     * large forms. */
    if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] > 0x9f) ||
        (p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] > 0x8f))
        return 0;
    return len;
}

json_t *ctl_json_str(const char *text)
{
    /* JSON carries any valid UTF-8 exactly (jansson escapes the controls),
     * so a path comes back as the same bytes. */
    json_t *str = json_string(text);
    if (str)
        return str;
    /* Not UTF-8 (json_string refuses it, and the key would silently go
     * missing): each byte that is not part of a valid sequence becomes the
     * text \xNN, and the document says that it is not exact. */
    size_t cap = strlen(text) * CTL_CLEAN_GROWTH + 1, len = 0;
    char *shown = malloc(cap);
    if (!shown)
        return NULL;
    for (const unsigned char *p = (const unsigned char *)text; *p;) {
        size_t seq = utf8_sequence(p);
        if (seq) {
            memcpy(shown + len, p, seq);
            len += seq;
            p += seq;
        } else {
            len += (size_t)snprintf(shown + len, cap - len, "\\x%02x", *p++);
        }
    }
    shown[len] = '\0';
    str = json_string(shown);
    free(shown);
    lossy_strings++;
    return str;
}

json_t *ctl_json_uint(uint64_t value)
{
    return json_integer(value > (uint64_t)LLONG_MAX ? LLONG_MAX : (json_int_t)value);
}

json_t *ctl_json_hex64(uint64_t value)
{
    char hex[2 * sizeof value + 1];
    snprintf(hex, sizeof hex, "%016" PRIx64, value);
    return ctl_json_str(hex);
}

int ctl_json_print(json_t *doc)
{
    int rc = EXIT_GOOD;
    /* Every document names paths, which are anyone's bytes: a script must
     * be able to tell a path it can use from one shown with \xNN. */
    if (doc)
        json_object_set_new(doc, "paths_exact", json_boolean(lossy_strings == 0));
    if (!doc || json_dumpf(doc, stdout, JSON_INDENT(2)) != 0) {
        fprintf(stderr, "ckptctl: cannot write json output\n");
        rc = EXIT_ERROR;
    } else {
        fputc('\n', stdout);
    }
    json_decref(doc);
    return rc;
}

/* ---- naming checkpoints -------------------------------------------------------- */

#define STEP_PREFIX "step-"
#define TMP_STEP_PREFIX ".tmp-step-"
#define LATEST_NAME "LATEST"
/* Digits of the largest step, 2^64 - 1. */
#define STEP_DIGITS_MAX 20

/* Parse a whole number of decimal digits only (no sign, no space) into
 * *value.  @return false when text is not one or does not fit 64 bits. */
static bool parse_digits(const char *text, uint64_t *value)
{
    if (!*text || strlen(text) > STEP_DIGITS_MAX)
        return false;
    for (const char *p = text; *p; p++)
        if (*p < '0' || *p > '9')
            return false;
    errno = 0;
    unsigned long long parsed = strtoull(text, NULL, 10);
    if (errno == ERANGE)
        return false;
    *value = (uint64_t)parsed;
    return true;
}

/* Parse a step number: "42" or "step-42".  @return false when text is not
 * one. */
static bool parse_step(const char *text, uint64_t *step)
{
    if (strncmp(text, STEP_PREFIX, strlen(STEP_PREFIX)) == 0)
        text += strlen(STEP_PREFIX);
    /* A step is at most INT64_MAX (docs/checkpoint-format.md): a larger
     * number is no step, as --step says too. */
    return parse_digits(text, step) && *step <= (uint64_t)INT64_MAX;
}

bool ctl_dir_gone(const char *dir)
{
    struct stat st;
    return lstat(dir, &st) != 0 && errno == ENOENT;
}

bool ctl_is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool path_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

const char *ctl_base_name(const char *path, char *buf, size_t cap)
{
    size_t end = strlen(path);
    while (end > 1 && path[end - 1] == '/')
        end--;
    size_t start = end;
    while (start > 0 && path[start - 1] != '/')
        start--;
    snprintf(buf, cap, "%.*s", (int)(end - start), path + start);
    return buf;
}

/* Is the last component of path a checkpoint's name: step-<N> (in any
 * spelling of N) or .tmp-step-<N>? */
static bool has_checkpoint_name(const char *path)
{
    char base[CTL_BASE_NAME_MAX];
    uint64_t step;
    ctl_base_name(path, base, sizeof base);
    return ckpt_parse_dirname(base, 0, &step) || ckpt_parse_dirname(base, 1, &step) ||
           (strncmp(base, STEP_PREFIX, strlen(STEP_PREFIX)) == 0 &&
            parse_step(base, &step));
}

bool ctl_is_checkpoint_dir(const char *dir)
{
    char manifest[CKPT_PATH_MAX];
    if (!ctl_is_dir(dir))
        return false;
    if (snprintf(manifest, sizeof manifest, "%s/%s", dir, CKPT_MANIFEST_NAME) <
            (int)sizeof manifest &&
        path_exists(manifest))
        return true;
    return has_checkpoint_name(dir);
}

/* The directory that holds path (trailing slashes ignored), into buf: "."
 * for a bare name. */
static const char *parent_of(const char *path, char *buf, size_t cap)
{
    size_t end = strlen(path);
    while (end > 1 && path[end - 1] == '/')
        end--;
    while (end > 0 && path[end - 1] != '/')
        end--;
    while (end > 1 && path[end - 1] == '/')
        end--;
    if (end == 0)
        snprintf(buf, cap, ".");
    else
        snprintf(buf, cap, "%.*s", (int)end, path);
    return buf;
}

int ctl_check_root(const char *what, const char *dir, bool writing)
{
    char parent[CKPT_PATH_MAX];
    struct stat st;
    parent_of(dir, parent, sizeof parent);
    if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
        ctl_error(what, dir, "not a directory");
        return EXIT_ERROR;
    }
    /* A checkpoint written into another one goes when that one is pruned;
     * a root of a checkpoint's name would be listed as an unfinished step. */
    if (ctl_is_checkpoint_dir(dir)) {
        ctl_error(what, dir, "is a checkpoint, not a root (its root is '%s')", parent);
        return EXIT_ERROR;
    }
    if (writing && has_checkpoint_name(dir)) {
        ctl_error(what, dir, "is named like a checkpoint (step-<N>), not a root");
        return EXIT_ERROR;
    }
    if (writing && ctl_is_checkpoint_dir(parent)) {
        ctl_error(what, dir, "is inside the checkpoint '%s', not a root", parent);
        return EXIT_ERROR;
    }
    return EXIT_GOOD;
}

bool ctl_is_run_dir(const char *dir)
{
    char sub[CKPT_PATH_MAX];
    if (!ctl_is_dir(dir) || ctl_is_checkpoint_dir(dir) ||
        snprintf(sub, sizeof sub, "%s/%s", dir, CTL_RUN_CKPT) >= (int)sizeof sub ||
        !ctl_is_dir(sub))
        return false;
    DIR *d = opendir(dir);
    if (!d)
        return false;
    bool own = false; /* a checkpoint, a save or LATEST of its own: a root */
    struct dirent *e;
    while (!own && (e = readdir(d)) != NULL)
        own = strncmp(e->d_name, STEP_PREFIX, strlen(STEP_PREFIX)) == 0 ||
              strncmp(e->d_name, TMP_STEP_PREFIX, strlen(TMP_STEP_PREFIX)) == 0 ||
              strcmp(e->d_name, LATEST_NAME) == 0;
    closedir(d);
    return !own;
}

const char *ctl_root_arg(const char *arg, char *buf, size_t cap)
{
    if (!ctl_is_run_dir(arg))
        return arg;
    size_t len = strlen(arg);
    while (len > 1 && arg[len - 1] == '/')
        len--;
    if (snprintf(buf, cap, "%.*s%s%s", (int)len, arg, arg[len - 1] == '/' ? "" : "/",
                 CTL_RUN_CKPT) >= (int)cap)
        return arg;
    fprintf(stderr, "ckptctl: using the checkpoint root '%s'\n", buf);
    return buf;
}

/* Join root and the canonical directory name of step into out.  Silent:
 * @return EXIT_ERROR when it does not fit. */
static int step_path(const char *root, uint64_t step, char *out, size_t cap)
{
    char name[CKPT_FILE_NAME_MAX];
    ckpt_step_dirname(step, name, sizeof name);
    return snprintf(out, cap, "%s/%s", root, name) < (int)cap ? EXIT_GOOD : EXIT_ERROR;
}

/* Pick the latest committed checkpoint of a root: the one LATEST names if it
 * is committed, else the newest committed; a note says which. */
static int latest_in_root(const char *what, const char *root, char *out, size_t cap)
{
    ckpt_entry_t *entries = NULL;
    size_t count = 0;
    int rc = ckpt_list(root, 0, &entries, &count);
    if (rc != CKPT_OK)
        return ctl_lib_fail(what, root, rc);
    const ckpt_entry_t *pick = NULL;
    for (size_t i = 0; i < count; i++) {
        if (entries[i].status != CKPT_ST_COMMITTED)
            continue;
        if (entries[i].is_latest) {
            pick = &entries[i];
            break;
        }
        if (!pick || entries[i].step > pick->step)
            pick = &entries[i];
    }
    int result = EXIT_GOOD;
    if (!pick) {
        ctl_error(what, root, "no committed checkpoint in this directory");
        result = EXIT_ERROR;
    } else if (snprintf(out, cap, "%s/%s", root, pick->name) >= (int)cap) {
        ctl_error(what, root, "path too long");
        result = EXIT_ERROR;
    } else {
        fprintf(stderr, "ckptctl: note: using '%s', the latest checkpoint in '%s'\n",
                out, root);
    }
    free(entries);
    return result;
}

/* The form "DIR STEP" of ctl_resolve_ckpt. */
static int resolve_root_step(const char *what, const char *root, const char *step_arg,
                             char *out, size_t cap)
{
    uint64_t step;
    char run_root[CKPT_PATH_MAX];
    if (!parse_step(step_arg, &step))
        return ctl_usage_error(what, "'%s' is not a step number (0 to %" PRId64 ")", step_arg,
                               INT64_MAX);
    root = ctl_root_arg(root, run_root, sizeof run_root);
    if (step_path(root, step, out, cap) != EXIT_GOOD) {
        ctl_error(what, root, "path too long");
        return EXIT_ERROR;
    }
    if (!ctl_is_dir(out)) {
        ctl_error(what, out, "no such checkpoint (try 'ckptctl list %s')", root);
        return EXIT_ERROR;
    }
    return EXIT_GOOD;
}

/* The form "ROOT/42" (or ROOT/step-42) that does not exist as written.
 * Silent: @return EXIT_ERROR when arg is not one or names no checkpoint. */
static int resolve_root_slash_step(const char *arg, char *out, size_t cap)
{
    const char *slash = strrchr(arg, '/');
    char root[CKPT_PATH_MAX];
    uint64_t step;
    if (path_exists(arg) || !parse_step(slash ? slash + 1 : arg, &step))
        return EXIT_ERROR;
    if (slash)
        snprintf(root, sizeof root, "%.*s", (int)(slash - arg), arg);
    else
        snprintf(root, sizeof root, ".");
    char run_root[CKPT_PATH_MAX];
    const char *in = ctl_is_run_dir(root) ? run_root : root;
    if (in == run_root && snprintf(run_root, sizeof run_root, "%s/%s", root,
                                   CTL_RUN_CKPT) >= (int)sizeof run_root)
        return EXIT_ERROR;
    if (step_path(in, step, out, cap) != EXIT_GOOD || !ctl_is_dir(out))
        return EXIT_ERROR;
    if (in == run_root)
        fprintf(stderr, "ckptctl: using the checkpoint root '%s'\n", run_root);
    return EXIT_GOOD;
}

int ctl_resolve_ckpt(const char *what, const char *arg, const char *step_arg,
                     bool latest_ok, char *out, size_t cap)
{
    if (step_arg)
        return resolve_root_step(what, arg, step_arg, out, cap);
    if (ctl_is_checkpoint_dir(arg)) {
        if (snprintf(out, cap, "%s", arg) >= (int)cap) {
            ctl_error(what, arg, "path too long");
            return EXIT_ERROR;
        }
        return EXIT_GOOD;
    }
    if (ctl_is_dir(arg)) {
        char run_root[CKPT_PATH_MAX];
        if (latest_ok) {
            const char *root = ctl_root_arg(arg, run_root, sizeof run_root);
            return latest_in_root(what, root, out, cap);
        }
        ctl_error(what, arg, "not a checkpoint directory");
        return EXIT_ERROR;
    }
    if (resolve_root_slash_step(arg, out, cap) == EXIT_GOOD)
        return EXIT_GOOD;
    if (path_exists(arg))
        return ctl_usage_error(what, "'%s' is a file, not a checkpoint directory (give a step "
                               "directory, ROOT STEP or ROOT)", arg);
    ctl_error(what, arg, "no such checkpoint (give a step directory, ROOT STEP or ROOT)");
    return EXIT_ERROR;
}

/* ---- main ---------------------------------------------------------------------- */

/* stdout is buffered: a full disk or a closed pipe shows only at the flush,
 * and must not pass for success. */
static int flush_stdout(int rc)
{
    if (fflush(stdout) != 0 && rc == EXIT_GOOD) {
        fprintf(stderr, "ckptctl: cannot write to stdout: %s\n", strerror(errno));
        return EXIT_ERROR;
    }
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "ckptctl: no command given\n\n");
        print_usage(stderr);
        return EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
        print_usage(stdout);
        return EXIT_GOOD;
    }
    if (strcmp(name, "--version") == 0) {
        printf("ckptctl %s\n", FTRAIN_VERSION);
        return flush_stdout(EXIT_GOOD);
    }
    const cmd_def_t *command = find_command(name);
    if (!command) {
        if (name[0] == '-')
            return ctl_usage_error(NULL, "unknown option '%s' (options follow the command)",
                                   name);
        return ctl_usage_error(NULL, "unknown command '%s'", name);
    }
    args_t args = {.name = command->name};
    /* Every argument may be an operand. */
    args.operands = calloc((size_t)argc, sizeof *args.operands);
    if (!args.operands) {
        fprintf(stderr, "ckptctl: out of memory\n");
        return EXIT_ERROR;
    }
    int rc = parse_args(command, argc - 2, argv + 2, &args);
    if (rc == EXIT_GOOD && args.help)
        print_command_help(stdout, command);
    else if (rc == EXIT_GOOD)
        rc = command->run(&args);
    free(args.operands);
    return flush_stdout(rc);
}

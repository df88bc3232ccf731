/*
 * ckptctl.c - the command-line tool over the checkpoint library: list,
 * inspect, verify, diff, export, import and prune checkpoints.
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
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_internal.h"
#include "ftrain/ckpt.h"

enum {
    EXIT_GOOD = 0,  /* success */
    EXIT_BAD = 1,   /* checkpoint or archive bad, or differences found */
    EXIT_USAGE = 2, /* usage error */
    EXIT_ERROR = 3  /* not found, exists, I/O, memory */
};

/* ---- options and the command table ------------------------------------- */

enum {
    OPT_JSON = 1u << 0,
    OPT_VERIFY = 1u << 1,
    OPT_KEEP = 1u << 2,
    OPT_FORCE = 1u << 3
};

typedef struct {
    unsigned bit;
    const char *name; /* "--json" */
    const char *arg;  /* value name, NULL for a flag */
    const char *help;
} opt_def_t;

static const opt_def_t options[] = {
    {OPT_JSON, "--json", NULL, "print one JSON document on stdout"},
    {OPT_VERIFY, "--verify", NULL,
     "fully verify every committed checkpoint (re-read every byte)"},
    {OPT_KEEP, "--keep", "K", "keep the newest K committed checkpoints (default 3)"},
    {OPT_FORCE, "--force", NULL, "replace FILE if it exists"},
};
#define NOPTIONS (sizeof options / sizeof options[0])

typedef struct {
    const char *cmd; /* the subcommand, for messages */
    unsigned set;    /* OPT_* given */
    int keep;
    int npos;
    char **pos; /* positional arguments */
} args_t;

typedef struct {
    const char *name;
    const char *synopsis; /* arguments after the name */
    const char *summary;  /* one line for the command list */
    const char *details;  /* paragraph for `help CMD` */
    unsigned opts;        /* OPT_* accepted */
    int min_pos, max_pos;
    int (*run)(const args_t *a);
} cmd_def_t;

static int cmd_list(const args_t *a);
static int cmd_inspect(const args_t *a);
static int cmd_verify(const args_t *a);
static int cmd_diff(const args_t *a);
static int cmd_export(const args_t *a);
static int cmd_import(const args_t *a);
static int cmd_prune(const args_t *a);
static int cmd_help(const args_t *a);

static const cmd_def_t commands[] = {
    {"list", "[--json] [--verify] [DIR]", "list the checkpoints under DIR (default .)",
     "Print one line per checkpoint under DIR: name, step, epoch (from the\n"
     "record), world size, raw and stored size, creation time and status\n"
     "(committed, incomplete or corrupt); LATEST marks the one LATEST names.\n"
     "Exits 1 when a checkpoint is corrupt.",
     OPT_JSON | OPT_VERIFY, 0, 1, cmd_list},
    {"inspect", "[--json] CKPT", "show a checkpoint's tensors, shards and record",
     "Print the tensors (dtype, shape, offset, bytes), the shards (byte range\n"
     "of the flat space, file size, frames, checksum) and the record: data\n"
     "cursor, lineage and configuration.  Reads only the manifest.",
     OPT_JSON, 1, 2, cmd_inspect},
    {"verify", "[--json] CKPT|DIR",
     "re-read every checksum of a checkpoint, or of each under DIR",
     "Re-read every shard and check every frame checksum, every shard\n"
     "checksum and size against the manifest.  Given a root DIR, verify every\n"
     "checkpoint in it (temp dirs of unfinished saves are reported, not\n"
     "counted).  Exits 0 when all are good, 1 when one is bad.",
     OPT_JSON, 1, 2, cmd_verify},
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
     "checkpoint of that step is never replaced.  LATEST is not changed.",
     0, 2, 2, cmd_import},
    {"prune", "[--keep K] DIR",
     "remove all but the newest K committed checkpoints (default 3)",
     "Remove all but the newest K committed checkpoints under DIR, and temp\n"
     "dirs of crashed saves older than the newest committed step.  The\n"
     "checkpoint LATEST names is never removed, nor the newest one that\n"
     "verifies (checkpoints are read, newest first, until one does).  K must\n"
     "be at least 1.",
     OPT_KEEP, 1, 1, cmd_prune},
    {"help", "[COMMAND]", "show help for ckptctl or a command",
     "Print the list of commands, or one command's usage and options.", 0, 0, 1,
     cmd_help},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static const char ckpt_forms[] =
    "CKPT names one checkpoint: a step directory (ROOT/step-00000042),\n"
    "ROOT/42, ROOT 42 (two arguments), or ROOT alone for its latest one.\n";

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

static void print_usage(FILE *f)
{
    fprintf(f, "usage: ckptctl <command> [options] [arguments]\n\n"
               "Inspect, verify, compare, export, import and prune ftrain "
               "checkpoints.\n\ncommands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++) {
        char left[64];
        snprintf(left, sizeof left, "%s", commands[i].name);
        fprintf(f, "  %-10s %s\n", left, commands[i].summary);
    }
    fprintf(f, "\n%s\n%s\n", ckpt_forms, exit_codes);
    fprintf(f, "Run 'ckptctl help COMMAND' for a command's usage and options.\n");
}

static void print_command_help(FILE *f, const cmd_def_t *c)
{
    fprintf(f, "usage: ckptctl %s %s\n\n%s\n", c->name, c->synopsis, c->summary);
    fprintf(f, "\n%s\n", c->details);
    fprintf(f, "\noptions:\n");
    {
        for (size_t i = 0; i < NOPTIONS; i++) {
            if (!(c->opts & options[i].bit))
                continue;
            char left[32];
            snprintf(left, sizeof left, "%s%s%s", options[i].name,
                     options[i].arg ? " " : "", options[i].arg ? options[i].arg : "");
            fprintf(f, "  %-12s %s\n", left, options[i].help);
        }
    }
    fprintf(f, "  %-12s %s\n", "--help", "show this help");
    if (strstr(c->synopsis, "CKPT"))
        fprintf(f, "\n%s", ckpt_forms);
    fprintf(f, "\n%s", exit_codes);
}

/* ---- messages ------------------------------------------------------------ */

static int usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Print "ckptctl: [cmd: ]<message>" and a hint to stderr.  @return 2. */
static int usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("ckptctl: ", stderr);
    if (cmd)
        fprintf(stderr, "%s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (cmd)
        fprintf(stderr, "try 'ckptctl help %s'\n", cmd);
    else
        fprintf(stderr, "try 'ckptctl --help'\n");
    return EXIT_USAGE;
}

/* Print "ckptctl: <what>: '<path>': <why>" to stderr. */
static void errorf(const char *what, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void errorf(const char *what, const char *path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ckptctl: %s: '%s': ", what, path);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* The library's message for rc, without a leading "<what>: " and
 * "'<path>': " that would repeat what errorf already says. */
static const char *lib_why(int rc, const char *what, const char *path)
{
    const char *m = ckpt_last_error();
    if (!m || !*m)
        return ckpt_strerror(rc);
    size_t wl = strlen(what), pl = strlen(path);
    if (strncmp(m, what, wl) == 0 && strncmp(m + wl, ": ", 2) == 0)
        m += wl + 2;
    if (m[0] == '\'' && strncmp(m + 1, path, pl) == 0 &&
        strncmp(m + 1 + pl, "': ", 3) == 0)
        m += pl + 4;
    return m;
}

/* Exit code for a library error. */
static int exit_for(int rc)
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

/* Report a library failure and return its exit code. */
static int lib_fail(const char *what, const char *path, int rc)
{
    errorf(what, path, "%s", lib_why(rc, what, path));
    return exit_for(rc);
}

/* ---- small helpers --------------------------------------------------------- */

static void fmt_bytes(uint64_t v, char *buf, size_t cap)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    if (v < 1024) {
        snprintf(buf, cap, "%" PRIu64 " B", v);
        return;
    }
    double d = (double)v;
    int u = 0;
    while (d >= 1024.0 && u < 5) {
        d /= 1024.0;
        u++;
    }
    snprintf(buf, cap, "%.1f %s", d, units[u]);
}

static void fmt_time_local(int64_t t, char *buf, size_t cap)
{
    time_t tt = (time_t)t;
    struct tm tm;
    if (t < 0 || !localtime_r(&tt, &tm) ||
        strftime(buf, cap, "%Y-%m-%d %H:%M:%S", &tm) == 0)
        snprintf(buf, cap, "-");
}

/* @return 1, or 0 with "-" in buf when t cannot be shown as a date. */
static int fmt_time_utc(int64_t t, char *buf, size_t cap)
{
    time_t tt = (time_t)t;
    struct tm tm;
    if (t < 0 || !gmtime_r(&tt, &tm) ||
        strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0) {
        snprintf(buf, cap, "-");
        return 0;
    }
    return 1;
}

/* A JSON string of s, made valid UTF-8 without control codes first
 * (paths and names are anyone's bytes; json_string would refuse them and
 * the key would silently go missing). */
static json_t *jstr(const char *s)
{
    size_t cap = strlen(s) * 4 + 1;
    char *b = malloc(cap);
    json_t *j;
    if (!b)
        return NULL;
    ckpt_text_clean(s, b, cap);
    j = json_string(b);
    free(b);
    return j;
}

static json_t *jint(uint64_t v)
{
    return json_integer(v > (uint64_t)LLONG_MAX ? LLONG_MAX : (json_int_t)v);
}

static json_t *jhex64(uint64_t v)
{
    char b[17];
    snprintf(b, sizeof b, "%016" PRIx64, v);
    return jstr(b);
}

/* Print a JSON document on stdout.  @return 0, or 3 if it cannot. */
static int json_print(json_t *doc)
{
    int r = EXIT_GOOD;
    if (!doc || json_dumpf(doc, stdout, JSON_INDENT(2)) != 0) {
        fprintf(stderr, "ckptctl: cannot write json output\n");
        r = EXIT_ERROR;
    } else {
        fputc('\n', stdout);
    }
    json_decref(doc);
    return r;
}

/* Parse a step number: "42" or "step-42".  @return 1 on success. */
static int parse_step(const char *s, uint64_t *out)
{
    if (strncmp(s, "step-", 5) == 0)
        s += 5;
    if (!*s || strlen(s) > 20)
        return 0;
    for (const char *p = s; *p; p++)
        if (*p < '0' || *p > '9')
            return 0;
    errno = 0;
    unsigned long long v = strtoull(s, NULL, 10);
    if (errno == ERANGE)
        return 0;
    *out = (uint64_t)v;
    return 1;
}

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int path_exists(const char *p)
{
    struct stat st;
    return lstat(p, &st) == 0;
}

/* Copy the last component of path p (trailing slashes ignored) into buf. */
static const char *base_name(const char *p, char *buf, size_t cap)
{
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        n--;
    size_t start = n;
    while (start > 0 && p[start - 1] != '/')
        start--;
    snprintf(buf, cap, "%.*s", (int)(n - start), p + start);
    return buf;
}

/* Does dir look like one checkpoint (manifest present or step-like name)? */
static int is_checkpoint_dir(const char *dir)
{
    char m[CKPT_PATH_MAX];
    uint64_t step;
    if (!is_dir(dir))
        return 0;
    if (snprintf(m, sizeof m, "%s/%s", dir, CKPT_MANIFEST_NAME) < (int)sizeof m &&
        path_exists(m))
        return 1;
    char base[256];
    base_name(dir, base, sizeof base);
    return ckpt_parse_dirname(base, 0, &step) || ckpt_parse_dirname(base, 1, &step) ||
           (strncmp(base, "step-", 5) == 0 && parse_step(base, &step));
}

/* Join root and the canonical directory name of step. */
static int step_path(const char *root, uint64_t step, char *out, size_t cap)
{
    char name[64];
    ckpt_step_dirname(step, name, sizeof name);
    return snprintf(out, cap, "%s/%s", root, name) < (int)cap ? 0 : -1;
}

/* Pick the latest committed checkpoint of a root: the one LATEST names if it
 * is committed, else the newest committed.  @return 0 or an exit code. */
static int latest_in_root(const char *what, const char *root, char *out, size_t cap)
{
    ckpt_entry_t *e = NULL;
    size_t n = 0;
    int rc = ckpt_list(root, 0, &e, &n);
    if (rc != CKPT_OK)
        return lib_fail(what, root, rc);
    const ckpt_entry_t *pick = NULL;
    for (size_t i = 0; i < n; i++) {
        if (e[i].status != CKPT_ST_COMMITTED)
            continue;
        if (e[i].is_latest) {
            pick = &e[i];
            break;
        }
        if (!pick || e[i].step > pick->step)
            pick = &e[i];
    }
    int r = EXIT_GOOD;
    if (!pick) {
        errorf(what, root, "no committed checkpoint in this directory");
        r = EXIT_ERROR;
    } else if (snprintf(out, cap, "%s/%s", root, pick->name) >= (int)cap) {
        errorf(what, root, "path too long");
        r = EXIT_ERROR;
    } else {
        fprintf(stderr, "ckptctl: note: using '%s', the latest checkpoint in '%s'\n",
                out, root);
    }
    free(e);
    return r;
}

/*
 * Resolve the CKPT argument forms to a checkpoint directory:
 *   DIR STEP       -> DIR/step-<STEP>
 *   step dir       -> itself
 *   ROOT/42        -> ROOT/step-00000042 (when ROOT/42 does not exist)
 *   ROOT           -> its latest committed checkpoint (when latest_ok)
 * @return 0 with out filled, or the exit code after printing why.
 */
static int resolve_ckpt(const char *what, const char *arg, const char *step_arg,
                        int latest_ok, char *out, size_t cap)
{
    uint64_t step;
    if (step_arg) {
        if (!parse_step(step_arg, &step))
            return usage_error(what, "'%s' is not a step number", step_arg);
        if (step_path(arg, step, out, cap) != 0) {
            errorf(what, arg, "path too long");
            return EXIT_ERROR;
        }
        if (!is_dir(out)) {
            errorf(what, out, "no such checkpoint (try 'ckptctl list %s')", arg);
            return EXIT_ERROR;
        }
        return EXIT_GOOD;
    }
    if (is_checkpoint_dir(arg)) {
        if (snprintf(out, cap, "%s", arg) >= (int)cap) {
            errorf(what, arg, "path too long");
            return EXIT_ERROR;
        }
        return EXIT_GOOD;
    }
    if (is_dir(arg)) {
        if (latest_ok)
            return latest_in_root(what, arg, out, cap);
        errorf(what, arg, "not a checkpoint directory");
        return EXIT_ERROR;
    }
    /* ROOT/42 or ROOT/step-42 that does not exist as such. */
    const char *slash = strrchr(arg, '/');
    if (!path_exists(arg) && parse_step(slash ? slash + 1 : arg, &step)) {
        char root[CKPT_PATH_MAX];
        if (slash)
            snprintf(root, sizeof root, "%.*s", (int)(slash - arg), arg);
        else
            snprintf(root, sizeof root, ".");
        if (step_path(root, step, out, cap) == 0 && is_dir(out))
            return EXIT_GOOD;
    }
    errorf(what, arg, "no such checkpoint (give a step directory, ROOT STEP or ROOT)");
    return EXIT_ERROR;
}

/* Find an integer member named key in obj or one level of nested objects. */
static int record_int(json_t *obj, const char *key, long long *out)
{
    json_t *v = json_object_get(obj, key);
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return 1;
    }
    const char *k;
    json_t *sub;
    json_object_foreach (obj, k, sub) {
        v = json_is_object(sub) ? json_object_get(sub, key) : NULL;
        if (json_is_integer(v)) {
            *out = json_integer_value(v);
            return 1;
        }
    }
    return 0;
}

static const char *status_name(ckpt_status_t s)
{
    switch (s) {
    case CKPT_ST_COMMITTED:
        return "committed";
    case CKPT_ST_INCOMPLETE:
        return "incomplete";
    default:
        return "corrupt";
    }
}

/* ---- list ------------------------------------------------------------------ */

static int cmd_list(const args_t *a)
{
    const char *root = a->npos ? a->pos[0] : ".";
    int json = !!(a->set & OPT_JSON);
    ckpt_entry_t *e = NULL;
    size_t n = 0;
    int rc = ckpt_list(root, !!(a->set & OPT_VERIFY), &e, &n);
    if (rc != CKPT_OK)
        return lib_fail("cannot list", root, rc);

    json_t *arr = json ? json_array() : NULL;
    int bad = 0;
    if (!json && n > 0)
        printf("%-20s %10s %6s %5s %10s %10s  %-19s  %s\n", "NAME", "STEP", "EPOCH",
               "WORLD", "RAW", "STORED", "CREATED", "STATUS");
    for (size_t i = 0; i < n; i++) {
        long long epoch = -1;
        int have_epoch = 0;
        if (e[i].status == CKPT_ST_COMMITTED) {
            char path[CKPT_PATH_MAX];
            ckpt_t *c = NULL;
            snprintf(path, sizeof path, "%s/%s", root, e[i].name);
            if (ckpt_open(path, &c) == CKPT_OK) {
                json_t *rec = json_loads(ckpt_record_json(c), 0, NULL);
                have_epoch = rec && record_int(rec, "epoch", &epoch);
                json_decref(rec);
            }
            ckpt_close(c);
        }
        if (e[i].status == CKPT_ST_CORRUPT)
            bad = 1;
        if (json) {
            char utc[32];
            int dated = fmt_time_utc(e[i].created, utc, sizeof utc);
            json_t *o = json_object();
            json_object_set_new(o, "name", jstr(e[i].name));
            json_object_set_new(o, "step", jint(e[i].step));
            json_object_set_new(o, "status", jstr(status_name(e[i].status)));
            json_object_set_new(o, "latest", json_boolean(e[i].is_latest));
            json_object_set_new(o, "epoch",
                                have_epoch ? json_integer(epoch) : json_null());
            /* Known only when a manifest was read; null otherwise. */
            int known = e[i].world_size > 0;
            json_object_set_new(o, "world_size",
                                known ? json_integer(e[i].world_size) : json_null());
            json_object_set_new(o, "raw_bytes", known ? jint(e[i].raw_bytes) : json_null());
            json_object_set_new(o, "file_bytes", known ? jint(e[i].file_bytes) : json_null());
            json_object_set_new(o, "created", known ? json_integer(e[i].created) : json_null());
            json_object_set_new(o, "created_utc", known && dated ? jstr(utc) : json_null());
            json_object_set_new(
                o, "why",
                e[i].status == CKPT_ST_COMMITTED ? json_null() : jstr(e[i].why));
            json_array_append_new(arr, o);
            continue;
        }
        char raw[32], stored[32], when[32], ep[24], world[16];
        int committed = e[i].status == CKPT_ST_COMMITTED;
        fmt_bytes(e[i].raw_bytes, raw, sizeof raw);
        fmt_bytes(e[i].file_bytes, stored, sizeof stored);
        fmt_time_local(e[i].created, when, sizeof when);
        snprintf(ep, sizeof ep, have_epoch ? "%lld" : "-", epoch);
        snprintf(world, sizeof world, e[i].world_size > 0 ? "%d" : "-",
                 e[i].world_size);
        printf("%-20s %10" PRIu64 " %6s %5s %10s %10s  %-19s  %s%s%s%s\n", e[i].name,
               e[i].step, ep, world, committed ? raw : "-", committed ? stored : "-",
               committed ? when : "-", status_name(e[i].status),
               e[i].is_latest ? " LATEST" : "", committed || !e[i].why[0] ? "" : ": ",
               committed ? "" : e[i].why);
    }
    int r = bad ? EXIT_BAD : EXIT_GOOD;
    if (json) {
        json_t *doc = json_object();
        json_object_set_new(doc, "root", jstr(root));
        json_object_set_new(doc, "verified", json_boolean(a->set & OPT_VERIFY));
        json_object_set_new(doc, "checkpoints", arr);
        int jr = json_print(doc);
        if (jr != EXIT_GOOD)
            r = jr;
    } else if (n == 0) {
        printf("no checkpoints in '%s'\n", root);
    }
    free(e);
    return r;
}

/* ---- inspect ----------------------------------------------------------------- */

static void print_shape(const ckpt_tensor_t *t, char *buf, size_t cap)
{
    size_t off = 0;
    off += (size_t)snprintf(buf + off, cap - off, "[");
    for (int d = 0; d < t->ndim && off < cap; d++)
        off += (size_t)snprintf(buf + off, cap - off, "%s%" PRId64, d ? ", " : "",
                                t->shape[d]);
    if (off < cap)
        snprintf(buf + off, cap - off, "]");
}

/* s with control characters (a record is anyone's JSON; it must not
 * drive the terminal) written as \xNN, into buf (ckpt_text_clean). */
static const char *clean(const char *s, char *buf, size_t cap)
{
    ckpt_text_clean(s, buf, cap);
    return buf;
}

/* Print "  key value" for one record value that is not flattened further. */
static void print_record_leaf(const char *prefix, json_t *v)
{
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    char kb[1100], vb[4100];
    if (json_is_string(v))
        printf("  %-28s %s\n", clean(prefix, kb, sizeof kb),
               clean(json_string_value(v), vb, sizeof vb));
    else
        printf("  %-28s %.200s%s\n", clean(prefix, kb, sizeof kb),
               s ? clean(s, vb, 210) : "?", s && strlen(s) > 200 ? "..." : "");
    free(s);
}

/* Objects nested deeper than this are printed as compact JSON, not
 * flattened: a record is anyone's JSON, and jansson accepts 2048 levels. */
#define RECORD_FLATTEN_DEPTH 8

/* Print one record value as "  prefix.key = value", flattening objects. */
static void print_record_value(const char *prefix, json_t *v, int depth)
{
    if (json_is_object(v) && json_object_size(v) > 0 && depth < RECORD_FLATTEN_DEPTH) {
        const char *k;
        json_t *sub;
        json_object_foreach (v, k, sub) {
            char key[256];
            snprintf(key, sizeof key, "%s.%s", prefix, k);
            print_record_value(key, sub, depth + 1);
        }
        return;
    }
    print_record_leaf(prefix, v);
}

/* Sections of the record shown by inspect, by top-level key. */
static const struct {
    const char *title;
    const char *keys[10];
} record_sections[] = {
    {"data cursor",
     {"epoch", "cursor", "steps_per_epoch", "samples_seen", "step", "rng", "schedule",
      "data", NULL}},
    {"lineage",
     {"lineage", "slurm", "saved_at", "run_seconds", "ftrain_version", "world_size",
      NULL}},
    {"config", {"config", NULL}},
};
#define NSECTIONS (sizeof record_sections / sizeof record_sections[0])

static int in_section(const char *key)
{
    for (size_t s = 0; s < NSECTIONS; s++)
        for (int i = 0; record_sections[s].keys[i]; i++)
            if (strcmp(record_sections[s].keys[i], key) == 0)
                return 1;
    return 0;
}

static void print_record(json_t *rec)
{
    for (size_t s = 0; s < NSECTIONS; s++) {
        int printed = 0;
        for (int i = 0; record_sections[s].keys[i]; i++) {
            const char *k = record_sections[s].keys[i];
            json_t *v = json_object_get(rec, k);
            if (!v)
                continue;
            if (!printed)
                printf("\n%s:\n", record_sections[s].title);
            printed = 1;
            print_record_value(strcmp(k, "config") == 0 ? "config" : k, v, 0);
        }
    }
    int printed = 0;
    const char *k;
    json_t *v;
    json_object_foreach (rec, k, v) {
        if (in_section(k))
            continue;
        if (!printed)
            printf("\nrecord (other):\n");
        printed = 1;
        print_record_value(k, v, 0);
    }
}

static int cmd_inspect(const args_t *a)
{
    char dir[CKPT_PATH_MAX];
    int r = resolve_ckpt("inspect", a->pos[0], a->npos > 1 ? a->pos[1] : NULL, 1, dir,
                         sizeof dir);
    if (r != EXIT_GOOD)
        return r;
    ckpt_t *c = NULL;
    int rc = ckpt_open(dir, &c);
    if (rc != CKPT_OK)
        return lib_fail("cannot open checkpoint", dir, rc);

    json_error_t jerr;
    json_t *rec = json_loads(ckpt_record_json(c), 0, &jerr);
    if (!rec)
        rec = json_object();
    uint64_t stored = 0;
    for (int i = 0; i < ckpt_world_size(c); i++)
        stored += ckpt_shard_at(c, i)->file_bytes;

    if (a->set & OPT_JSON) {
        char utc[32];
        int dated = fmt_time_utc(ckpt_created(c), utc, sizeof utc);
        json_t *doc = json_object(), *ts = json_array(), *ss = json_array();
        json_object_set_new(doc, "path", jstr(dir));
        json_object_set_new(doc, "step", jint(ckpt_step(c)));
        json_object_set_new(doc, "created", json_integer(ckpt_created(c)));
        json_object_set_new(doc, "created_utc", dated ? jstr(utc) : json_null());
        json_object_set_new(doc, "world_size", json_integer(ckpt_world_size(c)));
        json_object_set_new(doc, "total_bytes", jint(ckpt_total_bytes(c)));
        json_object_set_new(doc, "file_bytes", jint(stored));
        json_object_set_new(doc, "manifest_checksum",
                            jstr(ckpt_manifest_checksummed(c) ? "verified" : "none"));
        for (size_t i = 0; i < ckpt_num_tensors(c); i++) {
            const ckpt_tensor_t *t = ckpt_tensor_at(c, i);
            json_t *o = json_object(), *shape = json_array();
            for (int d = 0; d < t->ndim; d++)
                json_array_append_new(shape, json_integer(t->shape[d]));
            json_object_set_new(o, "name", jstr(t->name));
            json_object_set_new(o, "dtype", jstr(ckpt_dtype_name(t->dtype)));
            json_object_set_new(o, "shape", shape);
            json_object_set_new(o, "offset", jint(t->offset));
            json_object_set_new(o, "nbytes", jint(t->nbytes));
            json_array_append_new(ts, o);
        }
        for (int i = 0; i < ckpt_world_size(c); i++) {
            const ckpt_shard_info_t *s = ckpt_shard_at(c, i);
            char file[64];
            ckpt_shard_name(i, file, sizeof file);
            json_t *o = json_object();
            json_object_set_new(o, "index", json_integer(i));
            json_object_set_new(o, "file", jstr(file));
            json_object_set_new(o, "raw_offset", jint(s->raw_offset));
            json_object_set_new(o, "raw_bytes", jint(s->raw_bytes));
            json_object_set_new(o, "file_bytes", jint(s->file_bytes));
            json_object_set_new(o, "nframes", json_integer(s->nframes));
            json_object_set_new(o, "xxh64", jhex64(s->xxh64));
            json_array_append_new(ss, o);
        }
        json_object_set_new(doc, "tensors", ts);
        json_object_set_new(doc, "shards", ss);
        json_object_set_new(doc, "record", rec);
        ckpt_close(c);
        return json_print(doc);
    }

    char when[32], raw[32], st[32];
    fmt_time_local(ckpt_created(c), when, sizeof when);
    fmt_bytes(ckpt_total_bytes(c), raw, sizeof raw);
    fmt_bytes(stored, st, sizeof st);
    printf("checkpoint   %s\n", dir);
    printf("step         %" PRIu64 "\n", ckpt_step(c));
    printf("created      %s (%" PRId64 ")\n", when, ckpt_created(c));
    printf("world size   %d shards\n", ckpt_world_size(c));
    printf("flat bytes   %" PRIu64 " (%s), stored %" PRIu64 " (%s)\n",
           ckpt_total_bytes(c), raw, stored, st);
    printf("manifest     %s\n", ckpt_manifest_checksummed(c)
                                    ? "checksum verified"
                                    : "no checksum (written by an older ftrain)");

    printf("\ntensors (%zu):\n", ckpt_num_tensors(c));
    printf("  %-32s %-5s %-20s %14s %14s\n", "NAME", "DTYPE", "SHAPE", "OFFSET",
           "BYTES");
    for (size_t i = 0; i < ckpt_num_tensors(c); i++) {
        const ckpt_tensor_t *t = ckpt_tensor_at(c, i);
        char shape[128];
        print_shape(t, shape, sizeof shape);
        printf("  %-32s %-5s %-20s %14" PRIu64 " %14" PRIu64 "\n", t->name,
               ckpt_dtype_name(t->dtype), shape, t->offset, t->nbytes);
    }
    printf("\nshards (%d):\n", ckpt_world_size(c));
    printf("  %-16s %-31s %14s %7s  %s\n", "FILE", "RAW RANGE", "FILE BYTES", "FRAMES",
           "XXH64");
    for (int i = 0; i < ckpt_world_size(c); i++) {
        const ckpt_shard_info_t *s = ckpt_shard_at(c, i);
        char file[64], range[64];
        ckpt_shard_name(i, file, sizeof file);
        snprintf(range, sizeof range, "[%" PRIu64 ", %" PRIu64 ")", s->raw_offset,
                 s->raw_offset + s->raw_bytes);
        printf("  %-16s %-31s %14" PRIu64 " %7u  %016" PRIx64 "\n", file, range,
               s->file_bytes, s->nframes, s->xxh64);
    }
    print_record(rec);
    json_decref(rec);
    ckpt_close(c);
    return EXIT_GOOD;
}

/* ---- verify ------------------------------------------------------------------ */

/* Verify one checkpoint dir; add its result to arr (JSON) or print a line.
 * @return 1 when it is good. */
/* Report one checkpoint's verdict (rc, why) on stdout or into arr; c is its
 * open handle, or NULL when its manifest could not be read. */
static void verify_report(const char *dir, const char *name, ckpt_t *c, int rc,
                          const char *why, json_t *arr)
{
    const char *status = rc == CKPT_OK ? "ok"
                         : (rc == CKPT_EINCOMPLETE || rc == CKPT_ENOTFOUND)
                             ? "incomplete"
                             : "corrupt";
    if (arr) {
        json_t *o = json_object();
        json_object_set_new(o, "name", jstr(name));
        json_object_set_new(o, "path", jstr(dir));
        uint64_t named;
        json_object_set_new(o, "step", c ? jint(ckpt_step(c))
                                       : ckpt_parse_dirname(name, 0, &named) ? jint(named)
                                                                             : json_null());
        json_object_set_new(o, "status", jstr(status));
        json_object_set_new(o, "ok", json_boolean(rc == CKPT_OK));
        json_object_set_new(
            o, "error", rc == CKPT_OK ? json_null() : jstr(ckpt_strerror(rc)));
        json_object_set_new(o, "why", rc == CKPT_OK ? json_null() : jstr(why));
        json_object_set_new(o, "world_size", c ? json_integer(ckpt_world_size(c)) : json_null());
        json_object_set_new(o, "total_bytes", c ? jint(ckpt_total_bytes(c)) : json_null());
        json_array_append_new(arr, o);
    } else if (rc == CKPT_OK) {
        char raw[32];
        fmt_bytes(ckpt_total_bytes(c), raw, sizeof raw);
        printf("%s: ok (%d shards, %s)\n", name, ckpt_world_size(c), raw);
    } else {
        printf("%s: %s: %s\n", name, status, why);
    }
}

static int verify_one(const char *dir, const char *name, json_t *arr)
{
    ckpt_t *c = NULL;
    int rc = ckpt_open(dir, &c);
    if (rc == CKPT_OK)
        rc = ckpt_verify(c);
    verify_report(dir, name, c, rc, rc == CKPT_OK ? "" : lib_why(rc, "verify", dir), arr);
    ckpt_close(c);
    return rc == CKPT_OK;
}

static int cmd_verify(const args_t *a)
{
    const char *arg = a->pos[0];
    int json = !!(a->set & OPT_JSON);
    char dir[CKPT_PATH_MAX];
    json_t *arr = json ? json_array() : NULL;
    size_t good = 0, total = 0, skipped = 0;
    int r;

    if (a->npos > 1 || is_checkpoint_dir(arg) || !is_dir(arg)) {
        r = resolve_ckpt("verify", arg, a->npos > 1 ? a->pos[1] : NULL, 0, dir,
                         sizeof dir);
        if (r != EXIT_GOOD) {
            json_decref(arr);
            return r;
        }
        total = 1;
        char base[256];
        good = (size_t)verify_one(dir, base_name(dir, base, sizeof base), arr);
    } else {
        ckpt_entry_t *e = NULL;
        size_t n = 0;
        int rc = ckpt_list(arg, 0, &e, &n);
        if (rc != CKPT_OK) {
            json_decref(arr);
            return lib_fail("cannot list", arg, rc);
        }
        for (size_t i = 0; i < n; i++) {
            uint64_t step;
            if (ckpt_parse_dirname(e[i].name, 1, &step)) {
                skipped++;
                if (json) {
                    json_t *o = json_object();
                    json_object_set_new(o, "name", jstr(e[i].name));
                    json_object_set_new(o, "path", snprintf(dir, sizeof dir, "%s/%s", arg,
                                                            e[i].name) < (int)sizeof dir
                                                       ? jstr(dir) : json_null());
                    json_object_set_new(o, "step", jint(e[i].step));
                    json_object_set_new(o, "status", jstr("skipped"));
                    json_object_set_new(o, "ok", json_null());
                    json_object_set_new(o, "error", json_null());
                    json_object_set_new(o, "why",
                                        jstr("temp dir of an unfinished save"));
                    json_object_set_new(o, "world_size", json_null());
                    json_object_set_new(o, "total_bytes", json_null());
                    json_array_append_new(arr, o);
                } else {
                    printf("%s: skipped: temp dir of an unfinished save\n", e[i].name);
                }
                continue;
            }
            if (snprintf(dir, sizeof dir, "%s/%s", arg, e[i].name) >= (int)sizeof dir)
                continue;
            total++;
            if (e[i].is_link) { /* listed corrupt; never opened through the link */
                verify_report(dir, e[i].name, NULL, CKPT_ECORRUPT, e[i].why, arr);
                continue;
            }
            good += (size_t)verify_one(dir, e[i].name, arr);
        }
        free(e);
        if (total == 0 && !json) {
            errorf("verify", arg, "no checkpoints in this directory");
            json_decref(arr);
            return EXIT_ERROR;
        }
    }
    r = good == total && total > 0 ? EXIT_GOOD : EXIT_BAD;
    if (json) {
        json_t *doc = json_object();
        json_object_set_new(doc, "path", jstr(arg));
        json_object_set_new(doc, "ok", json_boolean(r == EXIT_GOOD));
        json_object_set_new(doc, "good", json_integer((json_int_t)good));
        json_object_set_new(doc, "bad", json_integer((json_int_t)(total - good)));
        json_object_set_new(doc, "skipped", json_integer((json_int_t)skipped));
        json_object_set_new(doc, "checkpoints", arr);
        int jr = json_print(doc);
        if (jr != EXIT_GOOD)
            return jr;
        if (total == 0)
            return EXIT_ERROR;
    }
    if (r != EXIT_GOOD)
        errorf("verify", arg, "%zu of %zu checkpoints bad", total - good, total);
    return r;
}

/* ---- diff -------------------------------------------------------------------- */

#define DIFF_CHUNK (4u << 20)

typedef struct {
    double max_abs, max_rel;
    uint64_t ndiff; /* elements whose bytes differ */
    uint64_t at;    /* element index of max_abs */
} diff_stat_t;

static double elem_value(ckpt_dtype_t d, const unsigned char *p)
{
    switch (d) {
    case CKPT_F32: {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    case CKPT_F64: {
        double f;
        memcpy(&f, p, 8);
        return f;
    }
    case CKPT_I64: {
        int64_t v;
        memcpy(&v, p, 8);
        return (double)v;
    }
    case CKPT_I32: {
        int32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    case CKPT_U8:
        return *p;
    }
    return 0;
}

/* Compare one tensor of two checkpoints chunk by chunk.  @return CKPT_OK or
 * the read error (*which says which checkpoint). */
static int diff_tensor(ckpt_t *ca, ckpt_t *cb, const ckpt_tensor_t *ta,
                       const ckpt_tensor_t *tb, unsigned char *ba, unsigned char *bb,
                       diff_stat_t *st, int *which)
{
    size_t es = ckpt_dtype_size(ta->dtype);
    uint64_t chunk = DIFF_CHUNK / es * es;
    memset(st, 0, sizeof *st);
    for (uint64_t off = 0; off < ta->nbytes; off += chunk) {
        uint64_t len = ta->nbytes - off < chunk ? ta->nbytes - off : chunk;
        int rc = ckpt_read_range(ca, ta->offset + off, len, ba);
        *which = 0;
        if (rc == CKPT_OK) {
            rc = ckpt_read_range(cb, tb->offset + off, len, bb);
            *which = 1;
        }
        if (rc != CKPT_OK)
            return rc;
        if (memcmp(ba, bb, (size_t)len) == 0)
            continue;
        for (uint64_t i = 0; i < len; i += es) {
            if (memcmp(ba + i, bb + i, es) == 0)
                continue;
            st->ndiff++;
            double x = elem_value(ta->dtype, ba + i), y = elem_value(ta->dtype, bb + i);
            double ad = fabs(x - y);
            if (isnan(ad))
                ad = (isnan(x) && isnan(y)) ? 0.0 : INFINITY;
            double m = fmax(fabs(x), fabs(y));
            double rel = ad == 0.0 ? 0.0 : (m > 0 && isfinite(m) ? ad / m : INFINITY);
            if (st->ndiff == 1 || ad > st->max_abs) {
                st->max_abs = ad;
                st->at = (off + i) / es;
            }
            if (rel > st->max_rel)
                st->max_rel = rel;
        }
    }
    return CKPT_OK;
}

static int same_shape(const ckpt_tensor_t *x, const ckpt_tensor_t *y)
{
    if (x->dtype != y->dtype || x->ndim != y->ndim)
        return 0;
    for (int d = 0; d < x->ndim; d++)
        if (x->shape[d] != y->shape[d])
            return 0;
    return 1;
}

static json_t *diff_entry(const char *name, const char *status)
{
    json_t *o = json_object();
    json_object_set_new(o, "name", jstr(name));
    json_object_set_new(o, "status", jstr(status));
    return o;
}

static int cmd_diff(const args_t *a)
{
    char da[CKPT_PATH_MAX], db[CKPT_PATH_MAX];
    int json = !!(a->set & OPT_JSON);
    int r = resolve_ckpt("diff", a->pos[0], NULL, 1, da, sizeof da);
    if (r == EXIT_GOOD)
        r = resolve_ckpt("diff", a->pos[1], NULL, 1, db, sizeof db);
    if (r != EXIT_GOOD)
        return r;
    ckpt_t *ca = NULL, *cb = NULL;
    unsigned char *ba = NULL, *bb = NULL;
    json_t *arr = json ? json_array() : NULL;
    size_t nsame = 0, ndiff = 0, nmissing = 0, nextra = 0, nmismatch = 0;
    int rc = ckpt_open(da, &ca);
    if (rc != CKPT_OK) {
        r = lib_fail("cannot open checkpoint", da, rc);
        goto fail;
    }
    rc = ckpt_open(db, &cb);
    if (rc != CKPT_OK) {
        r = lib_fail("cannot open checkpoint", db, rc);
        goto fail;
    }
    ba = malloc(DIFF_CHUNK);
    bb = malloc(DIFF_CHUNK);
    if (!ba || !bb) {
        fprintf(stderr, "ckptctl: diff: out of memory\n");
        r = EXIT_ERROR;
        goto fail;
    }
    for (size_t i = 0; i < ckpt_num_tensors(ca); i++) {
        const ckpt_tensor_t *ta = ckpt_tensor_at(ca, i);
        const ckpt_tensor_t *tb = ckpt_find(cb, ta->name);
        char sa[128], sb[128];
        print_shape(ta, sa, sizeof sa);
        if (!tb) {
            nmissing++;
            if (json)
                json_array_append_new(arr, diff_entry(ta->name, "missing"));
            else
                printf("missing    %s (only in A)\n", ta->name);
            continue;
        }
        print_shape(tb, sb, sizeof sb);
        if (!same_shape(ta, tb)) {
            nmismatch++;
            if (json) {
                json_t *o = diff_entry(ta->name, "mismatch");
                char da_s[160], db_s[160];
                snprintf(da_s, sizeof da_s, "%s %s", ckpt_dtype_name(ta->dtype), sa);
                snprintf(db_s, sizeof db_s, "%s %s", ckpt_dtype_name(tb->dtype), sb);
                json_object_set_new(o, "a", jstr(da_s));
                json_object_set_new(o, "b", jstr(db_s));
                json_array_append_new(arr, o);
            } else {
                printf("mismatch   %s: %s %s vs %s %s\n", ta->name,
                       ckpt_dtype_name(ta->dtype), sa, ckpt_dtype_name(tb->dtype), sb);
            }
            continue;
        }
        diff_stat_t st;
        int which = 0;
        rc = diff_tensor(ca, cb, ta, tb, ba, bb, &st, &which);
        if (rc != CKPT_OK) {
            r = lib_fail("cannot read tensor", which ? db : da, rc);
            goto fail;
        }
        uint64_t nelem = ta->nbytes / ckpt_dtype_size(ta->dtype);
        if (st.ndiff == 0) {
            nsame++;
            if (json)
                json_array_append_new(arr, diff_entry(ta->name, "identical"));
            else
                printf("identical  %s %s %s\n", ta->name, ckpt_dtype_name(ta->dtype),
                       sa);
            continue;
        }
        ndiff++;
        if (json) {
            json_t *o = diff_entry(ta->name, "different");
            json_object_set_new(o, "max_abs",
                                isfinite(st.max_abs) ? json_real(st.max_abs)
                                                     : jstr("inf"));
            json_object_set_new(o, "max_rel",
                                isfinite(st.max_rel) ? json_real(st.max_rel)
                                                     : jstr("inf"));
            json_object_set_new(o, "max_abs_at", jint(st.at));
            json_object_set_new(o, "ndiff", jint(st.ndiff));
            json_object_set_new(o, "nelem", jint(nelem));
            json_array_append_new(arr, o);
        } else {
            printf("different  %s %s %s: max abs %.6g at element %" PRIu64
                   ", max rel %.6g, %" PRIu64 " of %" PRIu64 " elements differ\n",
                   ta->name, ckpt_dtype_name(ta->dtype), sa, st.max_abs, st.at,
                   st.max_rel, st.ndiff, nelem);
        }
    }
    for (size_t i = 0; i < ckpt_num_tensors(cb); i++) {
        const ckpt_tensor_t *tb = ckpt_tensor_at(cb, i);
        if (ckpt_find(ca, tb->name))
            continue;
        nextra++;
        if (json)
            json_array_append_new(arr, diff_entry(tb->name, "extra"));
        else
            printf("extra      %s (only in B)\n", tb->name);
    }
    int same = ndiff == 0 && nmissing == 0 && nextra == 0 && nmismatch == 0;
    r = same ? EXIT_GOOD : EXIT_BAD;
    if (json) {
        json_t *doc = json_object();
        json_object_set_new(doc, "a", jstr(da));
        json_object_set_new(doc, "b", jstr(db));
        json_object_set_new(doc, "identical", json_boolean(same));
        json_object_set_new(doc, "tensors", arr);
        arr = NULL;
        int jr = json_print(doc);
        if (jr != EXIT_GOOD)
            r = jr;
    } else {
        printf("%s: %zu identical, %zu different, %zu missing in B, %zu extra in B, "
               "%zu mismatched\n",
               same ? "identical" : "different", nsame, ndiff, nmissing, nextra,
               nmismatch);
    }
fail:
    json_decref(arr);
    free(ba);
    free(bb);
    ckpt_close(ca);
    ckpt_close(cb);
    return r;
}

/* ---- export / import ------------------------------------------------------- */

static int has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static int cmd_export(const args_t *a)
{
    const char *file = a->pos[a->npos - 1];
    char dir[CKPT_PATH_MAX];
    if (!has_suffix(file, ".tar") && !has_suffix(file, ".tar.zst") &&
        !has_suffix(file, ".tzst"))
        return usage_error("export", "'%s': the file name must end in .tar or .tar.zst",
                           file);
    int r = resolve_ckpt("export", a->pos[0], a->npos > 2 ? a->pos[1] : NULL, 1, dir,
                         sizeof dir);
    if (r != EXIT_GOOD)
        return r;
    /* Without --force the library refuses an existing FILE, before it
     * starts and again, atomically, at the rename. */
    int rc = ckpt_export(dir, file, !!(a->set & OPT_FORCE));
    if (rc == CKPT_EEXIST) {
        errorf("export", file, "file exists (use --force to replace it)");
        return EXIT_ERROR;
    }
    if (rc != CKPT_OK)
        return lib_fail("export", dir, rc);
    struct stat st;
    char size[32] = "?";
    if (stat(file, &st) == 0)
        fmt_bytes((uint64_t)st.st_size, size, sizeof size);
    printf("exported '%s' to '%s' (%s)\n", dir, file, size);
    return EXIT_GOOD;
}

static int cmd_import(const args_t *a)
{
    const char *file = a->pos[0], *root = a->pos[1];
    char out[CKPT_PATH_MAX];
    int rc = ckpt_import(file, root, out, sizeof out);
    if (rc != CKPT_OK)
        return lib_fail("import", file, rc);
    printf("imported '%s' as '%s'\n", file, out);
    /* LATEST stays as it was, but a trainer resuming with --resume auto
     * takes the newest checkpoint that verifies: say so when the import
     * is newer than checkpoints that were already here (a run's own). */
    ckpt_entry_t *e = NULL;
    size_t n = 0;
    char base[256];
    const char *mine = base_name(out, base, sizeof base);
    if (ckpt_list(root, 0, &e, &n) == CKPT_OK) {
        uint64_t step = 0, newest_other = 0;
        int others = 0;
        for (size_t i = 0; i < n; i++) {
            if (e[i].status != CKPT_ST_COMMITTED || e[i].name[0] == '.')
                continue;
            if (strcmp(e[i].name, mine) == 0)
                step = e[i].step;
            else {
                others++;
                if (e[i].step > newest_other)
                    newest_other = e[i].step;
            }
        }
        if (others > 0 && step > newest_other)
            fprintf(stderr, "ckptctl: import: note: %s is now the newest checkpoint in "
                    "'%s' (the newest before was step %" PRIu64 "): a run resumed "
                    "with --resume auto from this directory continues from it\n",
                    mine, root, newest_other);
    }
    free(e);
    return EXIT_GOOD;
}

/* ---- prune ------------------------------------------------------------------- */

static int cmd_prune(const args_t *a)
{
    const char *root = a->pos[0];
    int keep = (a->set & OPT_KEEP) ? a->keep : 3;
    ckpt_entry_t *before = NULL, *after = NULL;
    size_t nb = 0, na = 0;
    int removed = 0;
    int rc = ckpt_list(root, 0, &before, &nb);
    if (rc != CKPT_OK)
        return lib_fail("cannot list", root, rc);
    /* Never remove the checkpoint LATEST names, even when it is not among
     * the newest K (after a fallback, or an import of a newer step). */
    const char *in_use = NULL;
    for (size_t i = 0; i < nb; i++)
        if (before[i].is_latest)
            in_use = before[i].name;
    /* Nor the newest one that verifies: newer ones with damaged shards
     * would otherwise count among the K and the only good one could go. */
    char good[CKPT_PATH_MAX];
    rc = ckpt_prune_keep_good(root, keep, in_use, &removed, good, sizeof good);
    if (rc != CKPT_OK) {
        free(before);
        return lib_fail("cannot prune", root, rc);
    }
    rc = ckpt_list(root, 0, &after, &na);
    if (rc == CKPT_OK) {
        for (size_t i = 0; i < nb; i++) {
            int still = 0;
            for (size_t j = 0; j < na && !still; j++)
                still = strcmp(before[i].name, after[j].name) == 0;
            if (!still)
                printf("removed %s\n", before[i].name);
        }
    }
    size_t kept = 0;
    for (size_t j = 0; j < na; j++)
        kept += after[j].status == CKPT_ST_COMMITTED;
    printf("removed %d, %zu committed checkpoint%s left in '%s'\n", removed, kept,
           kept == 1 ? "" : "s", root);
    const char *newest = NULL; /* the newest committed checkpoint before */
    for (size_t i = 0; i < nb; i++)
        if (before[i].status == CKPT_ST_COMMITTED)
            newest = before[i].name;
    if (!good[0])
        printf("note: no checkpoint in '%s' verifies\n", root);
    else if (newest && strcmp(strrchr(good, '/') ? strrchr(good, '/') + 1 : good, newest) != 0)
        printf("kept %s: the newest checkpoint that verifies\n", good);
    free(before);
    free(after);
    return EXIT_GOOD;
}

/* ---- help and main ----------------------------------------------------------- */

static int cmd_help(const args_t *a)
{
    if (a->npos == 0) {
        print_usage(stdout);
        return EXIT_GOOD;
    }
    const cmd_def_t *c = find_command(a->pos[0]);
    if (!c)
        return usage_error("help", "unknown command '%s'", a->pos[0]);
    print_command_help(stdout, c);
    return EXIT_GOOD;
}

/* Parse a command's arguments against its table row.  @return -1 to run,
 * or an exit code (help printed, or a usage error). */
static int parse_args(const cmd_def_t *c, int argc, char **argv, args_t *a)
{
    int only_pos = 0;
    a->cmd = c->name;
    for (int i = 0; i < argc; i++) {
        char *s = argv[i];
        if (only_pos || s[0] != '-' || s[1] == '\0') {
            a->pos[a->npos++] = s;
            continue;
        }
        if (strcmp(s, "--") == 0) {
            only_pos = 1;
            continue;
        }
        if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) {
            print_command_help(stdout, c);
            return EXIT_GOOD;
        }
        const opt_def_t *o = NULL;
        const char *val = NULL;
        for (size_t k = 0; k < NOPTIONS && !o; k++) {
            size_t nl = strlen(options[k].name);
            if (strcmp(s, options[k].name) == 0)
                o = &options[k];
            else if (options[k].arg && strncmp(s, options[k].name, nl) == 0 &&
                     s[nl] == '=') {
                o = &options[k];
                val = s + nl + 1;
            }
        }
        if (!o)
            return usage_error(c->name, "unknown option '%s'", s);
        if (!(c->opts & o->bit))
            return usage_error(c->name, "option '%s' does not apply to '%s'", o->name,
                               c->name);
        if (o->arg && !val) {
            if (i + 1 >= argc)
                return usage_error(c->name, "option '%s' needs a value", o->name);
            val = argv[++i];
        }
        if (o->bit == OPT_KEEP) {
            char *end = NULL;
            errno = 0;
            long k = strtol(val, &end, 10);
            if (!*val || *end || errno || k < 1 || k > INT_MAX)
                return usage_error(c->name,
                                   "--keep needs a whole number >= 1, not '%s'", val);
            a->keep = (int)k;
        }
        a->set |= o->bit;
    }
    if (a->npos < c->min_pos)
        return usage_error(c->name, "missing argument (usage: ckptctl %s %s)", c->name,
                           c->synopsis);
    if (a->npos > c->max_pos)
        return usage_error(c->name, "too many arguments (usage: ckptctl %s %s)",
                           c->name, c->synopsis);
    return -1;
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
    const cmd_def_t *c = find_command(name);
    if (!c) {
        if (name[0] == '-')
            return usage_error(NULL, "unknown option '%s' (options follow the command)",
                               name);
        return usage_error(NULL, "unknown command '%s'", name);
    }
    args_t a;
    memset(&a, 0, sizeof a);
    a.pos = calloc((size_t)argc, sizeof *a.pos);
    if (!a.pos) {
        fprintf(stderr, "ckptctl: out of memory\n");
        return EXIT_ERROR;
    }
    int r = parse_args(c, argc - 2, argv + 2, &a);
    if (r < 0)
        r = c->run(&a);
    free(a.pos);
    if (fflush(stdout) != 0 && r == EXIT_GOOD) {
        fprintf(stderr, "ckptctl: cannot write to stdout: %s\n", strerror(errno));
        r = EXIT_ERROR;
    }
    return r;
}

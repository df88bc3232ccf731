/*
 * ckptctl.h - what the files of the ckptctl tool share: exit codes, the
 * arguments a command runs with, the commands themselves, and the helpers
 * for messages, formatting, JSON output and naming checkpoints.
 *
 *   ckptctl.c       main, the command table (it drives parsing and help),
 *                   the helpers declared below
 *   ckptctl_show.c  the commands that show checkpoints and whether they
 *                   are good: list, inspect, verify (with --local, of a
 *                   node-local root, whose steps hold only some shards)
 *   ckptctl_diff.c  diff, which compares two checkpoints
 *   ckptctl_move.c  the commands that write or remove them: export,
 *                   import, prune, flush (node-local roots into a shared
 *                   one)
 *
 * ckptctl uses the checkpoint library only through its public header.
 * Error convention: every function here that can fail returns an exit code
 * (EXIT_GOOD on success) and has already printed what failed, unless its
 * comment says it is silent; predicates return bool.
 */
#ifndef FTRAIN_CKPTCTL_H
#define FTRAIN_CKPTCTL_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ftrain/ckpt.h"

/* Exit codes (docs/ckptctl.md, "Exit codes"). */
enum {
    EXIT_GOOD = 0,  /* success */
    EXIT_BAD = 1,   /* checkpoint or archive bad, or differences found */
    EXIT_USAGE = 2, /* usage error */
    EXIT_ERROR = 3  /* not found, exists, I/O, memory */
};

/* Options, as bits: a command's table row says which it accepts. */
enum {
    OPT_JSON = 1u << 0,
    OPT_VERIFY = 1u << 1,
    OPT_KEEP = 1u << 2,
    OPT_FORCE = 1u << 3,
    OPT_LOCAL = 1u << 4,
    OPT_TO = 1u << 5,
    OPT_STEP = 1u << 6,
    OPT_SET_ASIDE = 1u << 7
};

/* A command's parsed arguments. */
typedef struct {
    const char *name;  /* the command, for messages */
    unsigned set;      /* OPT_* given */
    int keep;          /* the value of --keep, when set has OPT_KEEP */
    const char *to;    /* the value of --to, when set has OPT_TO */
    uint64_t step;     /* the value of --step, when set has OPT_STEP */
    bool help;         /* --help given: its help is printed, nothing run */
    int noperands;
    char **operands;   /* the arguments that are not options, in order */
} args_t;

/* The commands; each returns its exit code. */
int cmd_list(const args_t *args);
int cmd_inspect(const args_t *args);
int cmd_verify(const args_t *args);
int cmd_diff(const args_t *args);
int cmd_export(const args_t *args);
int cmd_import(const args_t *args);
int cmd_prune(const args_t *args);
int cmd_flush(const args_t *args);

/* ---- limits of what is formatted ------------------------------------------- */

/* A short formatted field: a size ("1023.9 KiB"), a time, a number. */
#define CTL_FIELD_MAX 32
/* The last component of a path (a file name) and its NUL. */
#define CTL_BASE_NAME_MAX (NAME_MAX + 1)
/* The text of a tensor's shape, "[256, 1]": CKPT_MAX_DIMS of the longest
 * int64 with separators, the brackets and the NUL. */
#define CTL_SHAPE_TEXT_MAX (CKPT_MAX_DIMS * sizeof ", -9223372036854775808" + sizeof "[]")
/* ckpt_text_clean writes at most this many bytes for each byte it reads
 * (a control or a byte that is not UTF-8 becomes \xNN). */
#define CTL_CLEAN_GROWTH 4

/* ---- messages ---------------------------------------------------------------- */

/* Print "ckptctl: [command: ]<message>" and where to find help to stderr;
 * command is NULL for an error before one is known.  @return EXIT_USAGE. */
int ctl_usage_error(const char *command, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Print "ckptctl: <what>: '<path>': <message>" to stderr. */
void ctl_error(const char *what, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The library's message for its error rc, without a leading "<what>: " and
 * "'<path>': " that would repeat what ctl_error already says. */
const char *ctl_lib_why(int rc, const char *what, const char *path);

/* The exit code for the library's error rc. */
int ctl_exit_for(int rc);

/* Report the library's error rc as ctl_error does.  @return its exit code. */
int ctl_lib_fail(const char *what, const char *path, int rc);

/* ---- formatting -------------------------------------------------------------- */

/* A byte count for people: "812 B", "393.0 KiB". */
void ctl_fmt_bytes(uint64_t bytes, char *buf, size_t cap);
/* Seconds since the epoch as local "YYYY-MM-DD HH:MM:SS", or "-". */
void ctl_fmt_time_local(int64_t seconds, char *buf, size_t cap);
/* The same as ISO 8601 UTC.  @return false, with "-" in buf, when it cannot
 * be shown as a date. */
bool ctl_fmt_time_utc(int64_t seconds, char *buf, size_t cap);

/* A tensor's global shape as "[256, 1]" (CTL_SHAPE_TEXT_MAX bytes). */
void ctl_shape_text(const ckpt_tensor_t *tensor, char *buf, size_t cap);

/* ---- JSON output ------------------------------------------------------------- */

/* A JSON string of text: exact when text is valid UTF-8; otherwise each
 * byte that is not becomes the text \xNN, and the document printed next
 * says "paths_exact": false (paths are anyone's bytes). */
json_t *ctl_json_str(const char *text);
/* A JSON integer of an unsigned value (clamped to the largest JSON one). */
json_t *ctl_json_uint(uint64_t value);
/* A checksum as 16 lowercase hex digits. */
json_t *ctl_json_hex64(uint64_t value);
/* Print doc on stdout, indented, with "paths_exact" added last (false when
 * a string was not UTF-8), and release it (NULL: out of memory). */
int ctl_json_print(json_t *doc);

/* ---- naming checkpoints ------------------------------------------------------ */

bool ctl_is_dir(const char *path);
/** Is the directory dir of a listed step no longer there?  A step removed
 *  (by a prune, the trainer's or another ckptctl's) after the root was
 *  listed is gone, not damaged.  A prune renames a step before it deletes
 *  the files, so a step that failed because its files went is gone too. */
bool ctl_dir_gone(const char *dir);
/* Does dir look like one checkpoint (a manifest, or a step-like name)? */
bool ctl_is_checkpoint_dir(const char *dir);
/* Check that dir can be a checkpoint root: not a file, not a checkpoint.
 * When writing (import, flush; dir need not exist yet), not named like one
 * (step-<N>, .tmp-step-<N>) either, nor directly inside one. */
int ctl_check_root(const char *what, const char *dir, bool writing);
/* The last component of path (trailing slashes ignored), copied into buf. */
const char *ctl_base_name(const char *path, char *buf, size_t cap);

/* The checkpoint root inside a run directory (ftrain --run-dir DIR). */
#define CTL_RUN_CKPT "ckpt"

/* Is dir a run directory: one that holds the directory ckpt/, as ftrain's
 * --run-dir makes it, and no step-<N>, .tmp-step-<N> or LATEST of its own
 * (which would make it a checkpoint root itself)? */
bool ctl_is_run_dir(const char *dir);

/* The checkpoint root an argument names: a run directory stands for its
 * ckpt/ (written into buf, and said on stderr: "ckptctl: using the
 * checkpoint root 'runs/x/ckpt'"), anything else for itself.  @return arg
 * or buf. */
const char *ctl_root_arg(const char *arg, char *buf, size_t cap);

/*
 * Resolve the CKPT argument forms to a checkpoint directory, into out:
 *   DIR STEP       -> DIR/step-<STEP>    (step_arg not NULL)
 *   step dir       -> itself
 *   ROOT/42        -> ROOT/step-00000042 (when ROOT/42 does not exist)
 *   ROOT           -> its latest committed checkpoint (when latest_ok)
 * where ROOT may be a run directory, standing for its ckpt/ (ctl_root_arg).
 * what names the command in messages.
 */
int ctl_resolve_ckpt(const char *what, const char *arg, const char *step_arg,
                     bool latest_ok, char *out, size_t cap);

#endif

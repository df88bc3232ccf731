/*
 * ckptctl_verify.c - ckptctl verify: re-read every checksum of a checkpoint,
 * or of each under a root, changing nothing; with --local, of a node-local
 * root (ckpt_local.h), whose steps hold only some shards (the missing ones
 * are reported, not counted as damage).  Its output, text and --json, is
 * specified in docs/ckptctl.md.
 */
#include "ckptctl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ftrain/ckpt_local.h"

/* Shard indices a text line names before "... (N more)". */
#define SHARDS_NAMED_MAX 16

/* ---- verify ------------------------------------------------------------------------ */

/* What verify found so far. */
typedef struct {
    json_t *results; /* --json: one object per checkpoint; NULL for text */
    size_t good;     /* checkpoints that verified */
    size_t total;    /* checkpoints verified, good or bad */
    size_t skipped;  /* temp dirs of unfinished saves */
    size_t removed;  /* listed in the root, then removed before verified */
    bool local;      /* --local: node-local steps, shards may be missing */
} verify_tally_t;

/* With --local, which shards of a step have no file (ckpt_local_verify's
 * "missing"). */
typedef struct {
    int nshards;
    int nmissing;
    int *missing; /* nmissing indices, ascending */
} held_t;

/* Find the missing shards of the step at dir, whose manifest ckpt holds.
 * @return false when out of memory. */
static bool find_missing(const char *dir, const ckpt_t *ckpt, held_t *held)
{
    held->nshards = ckpt_world_size(ckpt);
    held->nmissing = 0;
    held->missing = malloc((size_t)held->nshards * sizeof *held->missing);
    if (!held->missing)
        return false;
    for (int i = 0; i < held->nshards; i++) {
        char name[CKPT_FILE_NAME_MAX], path[CKPT_PATH_MAX];
        struct stat st;
        ckpt_shard_name(i, name, sizeof name);
        if (snprintf(path, sizeof path, "%s/%s", dir, name) < (int)sizeof path &&
            lstat(path, &st) != 0 && errno == ENOENT)
            held->missing[held->nmissing++] = i;
    }
    return true;
}

/* " (3 of 4 shards present; missing: 1)" for a text line. */
static void held_text(const held_t *held, char *buf, size_t cap)
{
    size_t len = (size_t)snprintf(buf, cap, "%d of %d shard%s present",
                                  held->nshards - held->nmissing, held->nshards,
                                  held->nshards == 1 ? "" : "s");
    for (int i = 0; i < held->nmissing && len < cap; i++) {
        if (i == SHARDS_NAMED_MAX) {
            len += (size_t)snprintf(buf + len, cap - len, ", ... (%d more)",
                                    held->nmissing - i);
            break;
        }
        len += (size_t)snprintf(buf + len, cap - len, "%s%d", i ? ", " : "; missing: ",
                                held->missing[i]);
    }
}

/* Report one checkpoint's verdict (rc, why) on stdout or into the results;
 * ckpt is its open handle, or NULL when its manifest could not be read.
 * With --local (local), held is what the step holds (NULL: unknown). */
static void verify_report(const char *dir, const char *name, ckpt_t *ckpt, int rc,
                          const char *why, json_t *results, bool local,
                          const held_t *held)
{
    char held_line[CKPT_ENTRY_WHY_MAX] = "";
    if (held)
        held_text(held, held_line, sizeof held_line);
    const char *status = rc == CKPT_OK ? "ok"
                         : (rc == CKPT_EINCOMPLETE || rc == CKPT_ENOTFOUND)
                             ? "incomplete"
                             : "corrupt";
    if (results) {
        uint64_t named_step;
        json_t *obj = json_object();
        json_object_set_new(obj, "name", ctl_json_str(name));
        json_object_set_new(obj, "path", ctl_json_str(dir));
        json_object_set_new(obj, "step",
                            ckpt ? ctl_json_uint(ckpt_step(ckpt))
                            : ckpt_parse_dirname(name, 0, &named_step)
                                ? ctl_json_uint(named_step)
                                : json_null());
        json_object_set_new(obj, "status", ctl_json_str(status));
        json_object_set_new(obj, "ok", json_boolean(rc == CKPT_OK));
        json_object_set_new(obj, "error",
                            rc == CKPT_OK ? json_null() : ctl_json_str(ckpt_strerror(rc)));
        json_object_set_new(obj, "why", rc == CKPT_OK ? json_null() : ctl_json_str(why));
        json_object_set_new(obj, "world_size",
                            ckpt ? json_integer(ckpt_world_size(ckpt)) : json_null());
        json_object_set_new(obj, "total_bytes",
                            ckpt ? ctl_json_uint(ckpt_total_bytes(ckpt)) : json_null());
        if (local) {
            json_t *missing = held ? json_array() : json_null();
            for (int i = 0; held && i < held->nmissing; i++)
                json_array_append_new(missing, json_integer(held->missing[i]));
            json_object_set_new(obj, "shards_present",
                                held ? json_integer(held->nshards - held->nmissing)
                                     : json_null());
            json_object_set_new(obj, "missing", missing);
        }
        json_array_append_new(results, obj);
    } else if (rc == CKPT_OK && held) {
        char raw[CTL_FIELD_MAX];
        ctl_fmt_bytes(ckpt_total_bytes(ckpt), raw, sizeof raw);
        printf("%s: ok (%s; %s)\n", name, held_line, raw);
    } else if (rc == CKPT_OK) {
        char raw[CTL_FIELD_MAX];
        ctl_fmt_bytes(ckpt_total_bytes(ckpt), raw, sizeof raw);
        printf("%s: ok (%d shard%s, %s)\n", name, ckpt_world_size(ckpt),
               ckpt_world_size(ckpt) == 1 ? "" : "s", raw);
    } else {
        printf("%s: %s: %s%s%s%s\n", name, status, why, held ? " (" : "", held_line,
               held ? ")" : "");
    }
}

/* An entry of verify's output for a checkpoint it did not judge (status
 * "removed" or "skipped", with why): text, or a JSON object whose fields are
 * those of a verified one, null. */
static void verify_not_judged(const char *name, const char *path, json_t *step,
                              const char *status, const char *why, verify_tally_t *tally)
{
    if (!tally->results) {
        printf("%s: %s: %s\n", name, status, why);
        json_decref(step);
        return;
    }
    json_t *obj = json_object();
    json_object_set_new(obj, "name", ctl_json_str(name));
    json_object_set_new(obj, "path", path ? ctl_json_str(path) : json_null());
    json_object_set_new(obj, "step", step);
    json_object_set_new(obj, "status", ctl_json_str(status));
    json_object_set_new(obj, "ok", json_null());
    json_object_set_new(obj, "error", json_null());
    json_object_set_new(obj, "why", ctl_json_str(why));
    json_object_set_new(obj, "world_size", json_null());
    json_object_set_new(obj, "total_bytes", json_null());
    if (tally->local) {
        json_object_set_new(obj, "shards_present", json_null());
        json_object_set_new(obj, "missing", json_null());
    }
    json_array_append_new(tally->results, obj);
}

/* Report a checkpoint of a root that went between the listing and its
 * verification (a prune ran meanwhile): it is not counted, good or bad. */
static void verify_removed(const char *dir, const char *name, verify_tally_t *tally)
{
    uint64_t step;
    bool named = ckpt_parse_dirname(name, 0, &step);
    tally->removed++;
    verify_not_judged(name, dir, named ? ctl_json_uint(step) : json_null(), "removed",
                      "gone since the root was listed (pruned meanwhile)", tally);
}

/* Verify the checkpoint at dir and count it: every shard, or with --local
 * the shards present (ckpt_local_verify), the missing ones reported.  In a
 * root (in_root), one whose directory went meanwhile is reported removed. */
static void verify_one(const char *dir, const char *name, bool in_root,
                       verify_tally_t *tally)
{
    ckpt_t *ckpt = NULL;
    held_t held = {0, 0, NULL};
    bool known = false;
    int rc = ckpt_open(dir, &ckpt);
    if (rc == CKPT_OK && tally->local) {
        if (!(known = find_missing(dir, ckpt, &held)))
            rc = CKPT_ENOMEM;
        else
            rc = ckpt_local_verify(dir, NULL);
    } else if (rc == CKPT_OK) {
        rc = ckpt_verify(ckpt);
    }
    if (rc != CKPT_OK && in_root && ctl_dir_gone(dir)) {
        verify_removed(dir, name, tally);
        free(held.missing);
        ckpt_close(ckpt);
        return;
    }
    verify_report(dir, name, ckpt, rc,
                  rc == CKPT_OK ? "" : ctl_lib_why(rc, "verify", dir), tally->results,
                  tally->local, known ? &held : NULL);
    free(held.missing);
    ckpt_close(ckpt);
    tally->total++;
    if (rc == CKPT_OK)
        tally->good++;
}

/* Report a temp dir of an unfinished save under root, which is not counted. */
static void verify_skip(const char *root, const ckpt_entry_t *entry,
                        verify_tally_t *tally)
{
    char dir[CKPT_PATH_MAX];
    bool fits = snprintf(dir, sizeof dir, "%s/%s", root, entry->name) < (int)sizeof dir;
    tally->skipped++;
    verify_not_judged(entry->name, fits ? dir : NULL, ctl_json_uint(entry->step), "skipped",
                      "temp dir of an unfinished save", tally);
}

/* verify of every checkpoint under root. */
static int verify_root(const char *root, verify_tally_t *tally)
{
    ckpt_entry_t *entries = NULL;
    size_t count = 0;
    int rc = ckpt_list(root, CKPT_LIST_SET_ASIDE, &entries, &count);
    if (rc != CKPT_OK)
        return ctl_lib_fail("verify", root, rc);
    for (size_t i = 0; i < count; i++) {
        const ckpt_entry_t *entry = &entries[i];
        char dir[CKPT_PATH_MAX];
        uint64_t step;
        if (ckpt_parse_dirname(entry->name, 1, &step)) {
            verify_skip(root, entry, tally);
            continue;
        }
        if (entry->status == CKPT_ST_SET_ASIDE) { /* known bad: shown, not counted */
            bool fits = snprintf(dir, sizeof dir, "%s/%s", root, entry->name) < (int)sizeof dir;
            tally->skipped++;
            verify_not_judged(entry->name, fits ? dir : NULL, ctl_json_uint(entry->step),
                              "set-aside", entry->why, tally);
            continue;
        }
        if (snprintf(dir, sizeof dir, "%s/%s", root, entry->name) >= (int)sizeof dir)
            continue;
        if (entry->is_link) { /* listed corrupt; never opened through the link */
            verify_report(dir, entry->name, NULL, CKPT_ECORRUPT, entry->why,
                          tally->results, tally->local, NULL);
            tally->total++;
            continue;
        }
        verify_one(dir, entry->name, true, tally);
    }
    free(entries);
    if (tally->total > 0)
        return EXIT_GOOD;
    ctl_error("verify", root, "no checkpoints in this directory%s",
              tally->skipped ? " (only temp dirs of unfinished saves)" : "");
    /* --json still prints its (empty) document; verify_summary fails it. */
    return tally->results ? EXIT_GOOD : EXIT_ERROR;
}

/* The document of verify --json, or the line saying how many were bad. */
static int verify_summary(const char *arg, verify_tally_t *tally)
{
    int result = tally->good == tally->total && tally->total > 0 ? EXIT_GOOD : EXIT_BAD;
    if (tally->results) {
        json_t *doc = json_object();
        json_object_set_new(doc, "path", ctl_json_str(arg));
        json_object_set_new(doc, "ok", json_boolean(result == EXIT_GOOD));
        json_object_set_new(doc, "good", json_integer((json_int_t)tally->good));
        json_object_set_new(doc, "bad",
                            json_integer((json_int_t)(tally->total - tally->good)));
        json_object_set_new(doc, "skipped", json_integer((json_int_t)tally->skipped));
        json_object_set_new(doc, "removed", json_integer((json_int_t)tally->removed));
        if (tally->local)
            json_object_set_new(doc, "local", json_true());
        json_object_set_new(doc, "checkpoints", tally->results);
        tally->results = NULL;
        int print_rc = ctl_json_print(doc);
        if (print_rc != EXIT_GOOD)
            return print_rc;
        if (tally->total == 0)
            return EXIT_ERROR;
    }
    if (result != EXIT_GOOD)
        ctl_error("verify", arg, "%zu of %zu checkpoints bad", tally->total - tally->good,
                  tally->total);
    return result;
}

int cmd_verify(const args_t *args)
{
    const char *arg = args->operands[0];
    const char *step_arg = args->noperands > 1 ? args->operands[1] : NULL;
    verify_tally_t tally = {(args->set & OPT_JSON) ? json_array() : NULL, 0, 0, 0, 0,
                            !!(args->set & OPT_LOCAL)};
    int result;
    char run_root[CKPT_PATH_MAX];
    if (!step_arg && !tally.local)
        arg = ctl_root_arg(arg, run_root, sizeof run_root);
    if (step_arg || ctl_is_checkpoint_dir(arg) || !ctl_is_dir(arg)) {
        char dir[CKPT_PATH_MAX], base[CTL_BASE_NAME_MAX];
        result = ctl_resolve_ckpt("verify", arg, step_arg, false, dir, sizeof dir);
        if (result == EXIT_GOOD)
            verify_one(dir, ctl_base_name(dir, base, sizeof base), false, &tally);
    } else {
        result = verify_root(arg, &tally);
    }
    if (result != EXIT_GOOD) {
        json_decref(tally.results);
        return result;
    }
    return verify_summary(arg, &tally);
}

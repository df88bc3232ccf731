/*
 * ckptctl_move.c - the ckptctl commands that write or remove checkpoints:
 * export (to a tar file), import (from one), prune, and flush (a step of
 * node-local roots into a shared root).  The library does the work
 * (ckpt_export, ckpt_import, ckpt_prune_keep_good, ckpt_local_flush); these
 * say what was done, as docs/ckptctl.md specifies.
 */
#include "ckptctl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ftrain/ckpt_local.h"

/* ---- export / import ------------------------------------------------------------- */

static bool has_suffix(const char *text, const char *suffix)
{
    size_t text_len = strlen(text), suffix_len = strlen(suffix);
    return text_len >= suffix_len && strcmp(text + text_len - suffix_len, suffix) == 0;
}

int cmd_export(const args_t *args)
{
    const char *file = args->operands[args->noperands - 1];
    char dir[CKPT_PATH_MAX];
    if (!has_suffix(file, ".tar") && !has_suffix(file, ".tar.zst") &&
        !has_suffix(file, ".tzst"))
        return ctl_usage_error("export", "'%s': the file name must end in .tar, .tar.zst or .tzst",
                               file);
    int result = ctl_resolve_ckpt("export", args->operands[0],
                                  args->noperands > 2 ? args->operands[1] : NULL, true,
                                  dir, sizeof dir);
    if (result != EXIT_GOOD)
        return result;
    /* Without --force the library refuses an existing FILE, before it
     * starts and again, atomically, at the rename. */
    int rc = ckpt_export(dir, file, !!(args->set & OPT_FORCE));
    if (rc == CKPT_EEXIST) {
        ctl_error("export", file, "file exists (use --force to replace it)");
        return EXIT_ERROR;
    }
    if (rc != CKPT_OK)
        return ctl_lib_fail("export", dir, rc);
    struct stat st;
    char size[CTL_FIELD_MAX] = "?";
    if (stat(file, &st) == 0)
        ctl_fmt_bytes((uint64_t)st.st_size, size, sizeof size);
    printf("exported '%s' to '%s' (%s)\n", dir, file, size);
    return EXIT_GOOD;
}

/* LATEST stays as it was, but a trainer resuming with --resume auto takes
 * the newest checkpoint that verifies: say so when the one imported as
 * `imported` is newer than checkpoints that were already in root (a run's
 * own). */
static void note_if_newest(const char *root, const char *imported)
{
    ckpt_entry_t *entries = NULL;
    size_t count = 0;
    char base[CTL_BASE_NAME_MAX];
    const char *name = ctl_base_name(imported, base, sizeof base);
    if (ckpt_list(root, 0, &entries, &count) != CKPT_OK) {
        free(entries);
        return;
    }
    uint64_t step = 0, newest_other = 0;
    int others = 0;
    for (size_t i = 0; i < count; i++) {
        if (entries[i].status != CKPT_ST_COMMITTED || entries[i].name[0] == '.')
            continue;
        if (strcmp(entries[i].name, name) == 0) {
            step = entries[i].step;
        } else {
            others++;
            if (entries[i].step > newest_other)
                newest_other = entries[i].step;
        }
    }
    if (others > 0 && step > newest_other)
        fprintf(stderr, "ckptctl: import: note: %s is now the newest checkpoint in "
                "'%s' (the newest before was step %" PRIu64 "): a run resumed "
                "with --resume auto from this directory continues from it\n",
                name, root, newest_other);
    free(entries);
}

int cmd_import(const args_t *args)
{
    const char *file = args->operands[0], *root = args->operands[1];
    char imported[CKPT_PATH_MAX], run_root[CKPT_PATH_MAX];
    root = ctl_root_arg(root, run_root, sizeof run_root);
    int result = ctl_check_root("import", root, true);
    if (result != EXIT_GOOD)
        return result;
    int rc = ckpt_import(file, root, imported, sizeof imported);
    if (rc != CKPT_OK)
        return ctl_lib_fail("import", file, rc);
    printf("imported '%s' as '%s'\n", file, imported);
    note_if_newest(root, imported);
    return EXIT_GOOD;
}

/* ---- prune ------------------------------------------------------------------------- */

/* Checkpoints prune keeps when --keep is not given. */
#define PRUNE_KEEP_DEFAULT 3
/* Room for the library's message of a failed prune: a path and some words. */
#define PRUNE_WHY_MAX (CKPT_PATH_MAX + 256)

/* The entry of entries named name, or NULL. */
static const ckpt_entry_t *find_entry(const ckpt_entry_t *entries, size_t count,
                                      const char *name)
{
    for (size_t i = 0; i < count; i++)
        if (strcmp(entries[i].name, name) == 0)
            return &entries[i];
    return NULL;
}

/* Print "removed NAME" for each entry of before that after lacks.  A
 * checkpoint is renamed to .tmp-step-<N> before it is deleted: when that
 * temp dir is new in after, the deletion stopped partway, and the line
 * says where what is left lies. */
static void print_removed(const ckpt_entry_t *before, size_t nbefore,
                          const ckpt_entry_t *after, size_t nafter)
{
    for (size_t i = 0; i < nbefore; i++) {
        if (find_entry(after, nafter, before[i].name))
            continue;
        const ckpt_entry_t *left = NULL;
        for (size_t j = 0; j < nafter && !left && before[i].name[0] != '.'; j++)
            if (after[j].name[0] == '.' && after[j].step == before[i].step &&
                !find_entry(before, nbefore, after[j].name))
                left = &after[j];
        if (left)
            printf("partly removed %s: what is left is in %s\n", before[i].name,
                   left->name);
        else
            printf("removed %s\n", before[i].name);
    }
}

/* Say what is left in root, and which checkpoint was kept as the newest
 * that verifies (good; "" when none does) when it was not the newest. */
static void print_prune_summary(const char *root, int removed, const ckpt_entry_t *before,
                                size_t nbefore, const ckpt_entry_t *after, size_t nafter,
                                const char *good)
{
    size_t kept = 0;
    for (size_t j = 0; j < nafter; j++)
        kept += after[j].status == CKPT_ST_COMMITTED;
    printf("removed %d, %zu committed checkpoint%s left in '%s'\n", removed, kept,
           kept == 1 ? "" : "s", root);
    size_t aside = 0;
    for (size_t j = 0; j < nafter; j++)
        aside += after[j].status == CKPT_ST_SET_ASIDE;
    if (aside)
        printf("%zu set aside as damaged left for inspection (prune --set-aside removes "
               "them)\n", aside);
    const char *newest = NULL; /* the newest committed checkpoint before */
    for (size_t i = 0; i < nbefore; i++)
        if (before[i].status == CKPT_ST_COMMITTED)
            newest = before[i].name;
    const char *good_name = strrchr(good, '/');
    good_name = good_name ? good_name + 1 : good;
    /* With no committed checkpoint there was nothing to verify. */
    if (!good[0] && newest)
        fprintf(stderr, "ckptctl: prune: note: no checkpoint in '%s' verifies\n", root);
    else if (good[0] && newest && strcmp(good_name, newest) != 0)
        printf("kept %s: the newest checkpoint that verifies\n", good);
}

int cmd_prune(const args_t *args)
{
    char run_root[CKPT_PATH_MAX];
    const char *root = ctl_root_arg(args->operands[0], run_root, sizeof run_root);
    int keep = (args->set & OPT_KEEP) ? args->keep : PRUNE_KEEP_DEFAULT;
    ckpt_entry_t *before = NULL, *after = NULL;
    size_t nbefore = 0, nafter = 0;
    int removed = 0;
    int result = ctl_check_root("prune", root, false);
    if (result != EXIT_GOOD)
        return result;
    int rc = ckpt_list(root, CKPT_LIST_SET_ASIDE, &before, &nbefore);
    if (rc != CKPT_OK)
        return ctl_lib_fail("prune", root, rc);
    /* Never remove the checkpoint LATEST names, even when it is not among
     * the newest K (after a fallback, or an import of a newer step). */
    const char *in_use = NULL;
    for (size_t i = 0; i < nbefore; i++)
        if (before[i].is_latest)
            in_use = before[i].name;
    /* Nor the newest one that verifies: newer ones with damaged shards
     * would otherwise count among the K and the only good one could go. */
    char good[CKPT_PATH_MAX];
    rc = ckpt_prune_keep_good(root, keep, in_use, &removed, good, sizeof good);
    int removed_aside = 0;
    if (rc == CKPT_OK && (args->set & OPT_SET_ASIDE))
        rc = ckpt_prune_set_aside(root, &removed_aside);
    removed += removed_aside;
    /* The listing below replaces the library's message: keep it for the
     * end (a message is at most a path and some words). */
    char why[PRUNE_WHY_MAX] = "";
    if (rc != CKPT_OK)
        snprintf(why, sizeof why, "%s", ctl_lib_why(rc, "prune", root));
    /* What is gone is what a second listing lacks, said on failure too:
     * what went before it stays gone.  If that listing fails, only the
     * count is known. */
    if (ckpt_list(root, CKPT_LIST_SET_ASIDE, &after, &nafter) == CKPT_OK)
        print_removed(before, nbefore, after, nafter);
    if (rc == CKPT_OK) {
        print_prune_summary(root, removed, before, nbefore, after, nafter, good);
    } else {
        fflush(stdout); /* the lines first, then why it stopped */
        ctl_error("prune", root, "%s", why);
        result = ctl_exit_for(rc);
    }
    free(before);
    free(after);
    return result;
}

/* ---- flush ------------------------------------------------------------------------- */

/* What the local roots hold between them: one scan per root. */
typedef struct {
    ckpt_local_step_t **steps; /* per root, newest first */
    size_t *counts;
    size_t nroots;
} holdings_t;

static void holdings_free(holdings_t *h)
{
    for (size_t r = 0; h->steps && r < h->nroots; r++)
        ckpt_local_scan_free(h->steps[r], h->counts[r]);
    free(h->steps);
    free(h->counts);
}

/* Shards of step, of nshards, that none of the roots holds; their indices
 * go to missing (room for nshards) when not NULL. */
static int count_unheld(const holdings_t *h, uint64_t step, int nshards, int *missing)
{
    int unheld = 0;
    for (int i = 0; i < nshards; i++) {
        bool held = false;
        for (size_t r = 0; r < h->nroots && !held; r++)
            for (size_t k = 0; k < h->counts[r] && !held; k++)
                held = h->steps[r][k].step == step && h->steps[r][k].nshards == nshards &&
                       h->steps[r][k].present[i];
        if (!held) {
            if (missing)
                missing[unheld] = i;
            unheld++;
        }
    }
    return unheld;
}

/* The newest step that the roots hold completely between them (a step's
 * shard count is the first root's that holds it; the library checks that
 * their manifests agree).  When there is none, say why. */
static int pick_step(const holdings_t *h, const char *what, uint64_t *step)
{
    uint64_t best = 0, newest = 0;
    int newest_nshards = 0;
    bool found = false, any = false;
    for (size_t r = 0; r < h->nroots; r++)
        for (size_t k = 0; k < h->counts[r]; k++) {
            const ckpt_local_step_t *cand = &h->steps[r][k];
            if (!any || cand->step > newest) {
                newest = cand->step;
                newest_nshards = cand->nshards;
            }
            any = true;
            if ((!found || cand->step > best) &&
                count_unheld(h, cand->step, cand->nshards, NULL) == 0) {
                best = cand->step;
                found = true;
            }
        }
    if (found) {
        *step = best;
        return EXIT_GOOD;
    }
    if (!any) {
        fprintf(stderr, "ckptctl: %s: no sealed step in the %zu local root%s given\n",
                what, h->nroots, h->nroots == 1 ? "" : "s");
        return EXIT_ERROR;
    }
    int *missing = malloc((size_t)newest_nshards * sizeof *missing);
    int unheld = missing ? count_unheld(h, newest, newest_nshards, missing) : 0;
    fprintf(stderr, "ckptctl: %s: no step is held completely by the %zu local root%s "
            "given; the newest, step %" PRIu64 ", lacks %d of its %d shards:", what,
            h->nroots, h->nroots == 1 ? "" : "s", newest, unheld, newest_nshards);
    for (int i = 0; i < unheld && i < 16; i++)
        fprintf(stderr, " %d", missing[i]);
    fprintf(stderr, "%s\n", unheld > 16 ? " ..." : "");
    free(missing);
    return EXIT_BAD;
}

int cmd_flush(const args_t *args)
{
    const char *const *roots = (const char *const *)args->operands;
    size_t nroots = (size_t)args->noperands;
    char path[CKPT_PATH_MAX];
    uint64_t step = args->step;
    if (!(args->set & OPT_TO))
        return ctl_usage_error("flush", "--to DIR is required: the shared root to write "
                               "into");
    for (size_t r = 0; r < nroots; r++)
        if (!ctl_is_dir(roots[r])) {
            ctl_error("flush", roots[r], "no such directory");
            return EXIT_ERROR;
        }
    char run_root[CKPT_PATH_MAX];
    const char *to = ctl_root_arg(args->to, run_root, sizeof run_root);
    int result = ctl_check_root("flush", to, true);
    if (result != EXIT_GOOD)
        return result;
    if (!(args->set & OPT_STEP)) {
        holdings_t h = {calloc(nroots, sizeof *h.steps), calloc(nroots, sizeof *h.counts),
                        nroots};
        result = h.steps && h.counts ? EXIT_GOOD : EXIT_ERROR;
        if (result != EXIT_GOOD)
            fprintf(stderr, "ckptctl: out of memory\n");
        for (size_t r = 0; result == EXIT_GOOD && r < nroots; r++) {
            int rc = ckpt_local_scan(roots[r], &h.steps[r], &h.counts[r]);
            if (rc != CKPT_OK)
                result = ctl_lib_fail("flush", roots[r], rc);
        }
        if (result == EXIT_GOOD)
            result = pick_step(&h, "flush", &step);
        holdings_free(&h);
        if (result != EXIT_GOOD)
            return result;
    }
    int rc = ckpt_local_flush(roots, nroots, step, to, path, sizeof path);
    if (rc == CKPT_EEXIST) {
        ctl_error("flush", to, "step %" PRIu64 " is already there (step-%08" PRIu64
                  "); nothing written", step, step);
        return EXIT_ERROR;
    }
    if (rc != CKPT_OK)
        return ctl_lib_fail("flush", to, rc);
    if (args->set & OPT_JSON) {
        json_t *doc = json_object(), *list = json_array();
        for (size_t r = 0; r < nroots; r++)
            json_array_append_new(list, ctl_json_str(roots[r]));
        json_object_set_new(doc, "path", ctl_json_str(path));
        json_object_set_new(doc, "step", ctl_json_uint(step));
        json_object_set_new(doc, "local_roots", list);
        return ctl_json_print(doc);
    }
    printf("flushed step %" PRIu64 " to '%s'\n", step, path);
    return EXIT_GOOD;
}

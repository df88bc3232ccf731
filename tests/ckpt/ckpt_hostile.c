/*
 * ckpt_hostile.c - a root that holds links, FIFOs and stale names never
 * makes the library write, delete or hang outside what it owns:
 *
 *   - prune of a .tmp-step-<N> or step-<N> that is a symbolic link removes
 *     the link, never the files it points to;
 *   - a save through a planted .tmp-step-<N> link, shard link or LATEST.tmp
 *     link writes nothing through it;
 *   - a FIFO as manifest.json, shard or LATEST is refused, never waited on;
 *   - a stray subdirectory in a crashed save's temp dir is removed;
 *   - "root/step-N/" with a trailing slash still gets the step check;
 *   - a shard copied from another checkpoint of the same size is refused
 *     (the manifest's table_xxh64), while a manifest without it still reads;
 *   - ckpt_set_aside_after moves bad newer checkpoints out of the way so the
 *     same steps can be saved again, and LATEST follows;
 *   - a step-<N> that is a link is listed as corrupt and never resumed
 *     from, even when it points to a good checkpoint; ckpt_open refuses it
 *     by that name, with or without a trailing slash, and follows a link
 *     of another name;
 *   - an open checkpoint keeps reading the directory it opened when another
 *     checkpoint is renamed into its place (shards are opened lazily).
 *
 * Every call that could block runs under alarm(20): a hang fails the test.
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <xxhash.h>

#include "ftrain/ckpt.h"
#include "ckpt_test.h"
#include "tap.h"

static char root[256];
static float wts[5000];
static unsigned salt; /* two checkpoints of one step with other values */

/* Save one f32 tensor (values from the step) at dir_root/step. */
static int save_at(const char *dir_root, uint64_t step, int level)
{
    ckpt_tensor_t t;
    ckpt_opts_t o;
    ckpt_coll_t coll = SOLO_COLL;
    for (size_t i = 0; i < 5000; i++)
        wts[i] = (float)((i * 2654435761u + step * 977 + salt) % 1000) / 997.0f;
    memset(&t, 0, sizeof t);
    snprintf(t.name, CKPT_NAME_MAX, "w");
    t.dtype = CKPT_F32, t.ndim = 1, t.shape[0] = 5000, t.data = wts;
    ckpt_opts_default(&o);
    o.level = level;
    o.frame_bytes = 4096;
    o.fsync = 0;
    o.adapt = 0;
    return ckpt_save(dir_root, step, &t, 1, "{\"epoch\":1}", &o, &coll);
}

static void path_of(char *buf, size_t cap, const char *a, const char *b)
{
    if (snprintf(buf, cap, "%s/%s", a, b) >= (int)cap) {
        printf("Bail out! path too long: %s/%s\n", a, b);
        exit(1);
    }
}

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    int rc = f && fputs(text, f) >= 0 ? 0 : -1;
    if (f && fclose(f) != 0)
        rc = -1;
    return rc;
}

static char *read_text(const char *path)
{
    static char buf[4096];
    FILE *f = fopen(path, "r");
    size_t n;
    if (!f)
        return NULL;
    n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static int is_link(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

static int is_real_dir(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

static int read_ckpt(const char *dir)
{
    ckpt_t *c = NULL;
    float back[5000];
    int rc = ckpt_open(dir, &c);
    if (rc == CKPT_OK)
        rc = ckpt_read_tensor(c, "w", back, sizeof back);
    ckpt_close(c);
    return rc;
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "not ok - a call blocked for 20 s (a FIFO?)\n";
    if (write(1, msg, sizeof msg - 1) < 0) {
        /* nothing to do */
    }
    _exit(1);
}

static int nmoved;
static char moved_to[256];
static void on_moved(void *ctx, const char *from, const char *to)
{
    (void)ctx;
    nmoved++;
    diag("moved %s -> %s", from, to);
    snprintf(moved_to, sizeof moved_to, "%s", to);
}

int main(void)
{
    char victim[400], vfile[600], p[2048], q[2048], out[1024];
    int rc, removed = 0;

    signal(SIGALRM, on_alarm);
    tap_tmpdir(root, sizeof root, "ckpt_hostile");
    snprintf(victim, sizeof victim, "%s/victim", root);
    mkdir(victim, 0755);
    path_of(vfile, sizeof vfile, victim, "precious.txt");
    write_text(vfile, "keep me\n");
    char r1[400];
    snprintf(r1, sizeof r1, "%s/r1", root);

    /* ---- prune never follows links ---------------------------------- */
    is_int(save_at(r1, 2, 1), CKPT_OK, "save step 2");
    path_of(p, sizeof p, r1, ".tmp-step-00000001");
    ok(symlink(victim, p) == 0, "plant .tmp-step-00000001 -> victim dir");
    {
        char ext[400];
        snprintf(ext, sizeof ext, "%s/elsewhere", root);
        is_int(save_at(ext, 3, 1), CKPT_OK, "a checkpoint elsewhere (step 3)");
        path_of(q, sizeof q, ext, "step-00000003");
        path_of(p, sizeof p, r1, "step-00000003");
        ok(symlink(q, p) == 0, "link r1/step-00000003 -> it");
        is_int(save_at(r1, 4, 1), CKPT_OK, "save step 4");
        alarm(20);
        rc = ckpt_prune(r1, 1, NULL, &removed);
        alarm(0);
        diag("prune: %s (%s), removed %d", ckpt_strerror(rc),
             ckpt_last_error(), removed);
        ok(exists(vfile) && strcmp(read_text(vfile), "keep me\n") == 0,
           "prune left the file behind the .tmp-step link alone");
        path_of(p, sizeof p, q, "manifest.json");
        ok(exists(p) && read_ckpt(q) == CKPT_OK,
           "prune left the checkpoint behind the step-00000003 link whole");
        path_of(p, sizeof p, r1, ".tmp-step-00000001");
        ok(!exists(p), "the .tmp-step link itself is gone");
        path_of(p, sizeof p, r1, "step-00000004");
        ok(read_ckpt(p) == CKPT_OK, "the newest checkpoint is kept");
    }

    /* ---- saves write nothing through links -------------------------- */
    path_of(p, sizeof p, r1, ".tmp-step-00000005");
    ok(symlink(victim, p) == 0, "plant .tmp-step-00000005 -> victim dir");
    is_int(save_at(r1, 5, 1), CKPT_OK, "save step 5 through the planted name");
    path_of(p, sizeof p, r1, "step-00000005");
    ok(is_real_dir(p) && read_ckpt(p) == CKPT_OK,
       "step-00000005 is a real directory that reads");
    path_of(p, sizeof p, victim, "shard-0.ftsh");
    ok(exists(vfile) && !exists(p), "the victim dir got no shard and lost "
       "nothing");

    path_of(p, sizeof p, r1, ".tmp-step-00000006");
    mkdir(p, 0755);
    path_of(q, sizeof q, p, "shard-0.ftsh");
    ok(symlink(vfile, q) == 0, "plant .tmp-step-00000006/shard-0.ftsh -> "
       "victim file");
    path_of(p, sizeof p, r1, "LATEST.tmp");
    ok(symlink(vfile, p) == 0, "plant LATEST.tmp -> victim file");
    is_int(save_at(r1, 6, 1), CKPT_OK, "save step 6");
    ok(strcmp(read_text(vfile), "keep me\n") == 0,
       "the victim file is unchanged");
    path_of(p, sizeof p, r1, "LATEST");
    ok(!is_link(p) && strcmp(read_text(p), "step-00000006\n") == 0,
       "LATEST is a regular file naming step-00000006");
    path_of(p, sizeof p, r1, "step-00000006");
    is_int(read_ckpt(p), CKPT_OK, "step 6 reads");

    /* A stray subdirectory in a crashed save's temp dir. */
    path_of(p, sizeof p, r1, ".tmp-step-00000007");
    mkdir(p, 0755);
    path_of(q, sizeof q, p, "sub");
    mkdir(q, 0755);
    path_of(q, sizeof q, p, "sub/x");
    write_text(q, "stray\n");
    is_int(save_at(r1, 7, 1), CKPT_OK, "save step 7 over a crashed attempt "
           "with a subdirectory");
    path_of(p, sizeof p, r1, "step-00000007/sub");
    ok(!exists(p), "the committed step holds no stray subdirectory");

    /* ---- FIFOs are refused, never waited on ------------------------- */
    {
        char r2[400];
        snprintf(r2, sizeof r2, "%s/r2", root);
        is_int(save_at(r2, 1, 1), CKPT_OK, "r2: save step 1");
        path_of(p, sizeof p, r2, "step-00000002");
        mkdir(p, 0755);
        path_of(q, sizeof q, p, "manifest.json");
        ok(mkfifo(q, 0644) == 0, "r2: step-00000002/manifest.json is a FIFO");
        alarm(20);
        {
            ckpt_t *c = NULL;
            rc = ckpt_open(p, &c);
            ckpt_close(c);
        }
        ok(rc != CKPT_OK, "open refuses it: %s (%s)", ckpt_strerror(rc),
           ckpt_last_error());
        rc = ckpt_latest_good(r2, out, sizeof out, NULL, NULL);
        alarm(0);
        ok(rc == CKPT_OK && strstr(out, "step-00000001"),
           "latest_good passes over it to step 1");

        path_of(p, sizeof p, r2, "step-00000003");
        is_int(save_at(r2, 3, 1), CKPT_OK, "r2: save step 3");
        path_of(q, sizeof q, p, "shard-0.ftsh");
        unlink(q);
        ok(mkfifo(q, 0644) == 0, "r2: step-00000003/shard-0.ftsh is a FIFO");
        alarm(20);
        rc = read_ckpt(p);
        alarm(0);
        is_int(rc, CKPT_ECORRUPT, "reading it fails: %s", ckpt_last_error());

        path_of(p, sizeof p, r2, "LATEST");
        unlink(p);
        ok(mkfifo(p, 0644) == 0, "r2: LATEST is a FIFO");
        alarm(20);
        {
            ckpt_entry_t *v = NULL;
            size_t n = 0;
            rc = ckpt_list(r2, 0, &v, &n);
            free(v);
            is_int(rc, CKPT_OK, "list does not wait on it");
            rc = save_at(r2, 4, 1);
        }
        alarm(0);
        ok(rc == CKPT_OK || rc == CKPT_EIO, "a save does not wait on it "
           "either: %s (%s)", ckpt_strerror(rc), ckpt_last_error());
    }

    /* ---- the step check with a trailing slash ----------------------- */
    {
        char r3[400];
        snprintf(r3, sizeof r3, "%s/r3", root);
        is_int(save_at(r3, 1, 1), CKPT_OK, "r3: save step 1");
        path_of(p, sizeof p, r3, "step-00000001");
        path_of(q, sizeof q, r3, "step-00000009");
        rename(p, q);
        snprintf(p, sizeof p, "%s/step-00000009/", r3);
        rc = read_ckpt(p);
        ok(rc == CKPT_EFORMAT && strstr(ckpt_last_error(), "step is 1"),
           "step 1's manifest under step-00000009/ (trailing slash): %s",
           ckpt_last_error());
    }

    /* ---- a shard from another checkpoint ---------------------------- */
    {
        char r4[400], a[2048], b[2048];
        struct stat sa, sb;
        snprintf(r4, sizeof r4, "%s/r4", root);
        is_int(save_at(r4, 10, 0), CKPT_OK, "r4: save step 10 (level 0)");
        is_int(save_at(r4, 11, 0), CKPT_OK, "r4: save step 11 (level 0)");
        snprintf(a, sizeof a, "%s/step-00000010/shard-0.ftsh", r4);
        snprintf(b, sizeof b, "%s/step-00000011/shard-0.ftsh", r4);
        ok(stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_size == sb.st_size,
           "both shards have the same size");
        {
            char cmd[4200];
            snprintf(cmd, sizeof cmd, "cp '%s' '%s'", a, b);
            ok(system(cmd) == 0, "copy step 10's shard over step 11's");
        }
        snprintf(p, sizeof p, "%s/step-00000011", r4);
        rc = read_ckpt(p);
        ok(rc == CKPT_ECORRUPT && strstr(ckpt_last_error(), "not this "
           "checkpoint's shard"), "reading step 11 refuses it: %s",
           ckpt_last_error());
        /* An older writer's manifest (no table_xxh64, no manifest_xxh64):
         * opens and reads, the file checksum left to verify. */
        path_of(q, sizeof q, p, "manifest.json");
        {
            json_t *j = json_load_file(q, 0, NULL);
            json_t *sh = json_array_get(json_object_get(j, "shards"), 0);
            json_object_del(sh, "table_xxh64");
            json_object_del(j, "manifest_xxh64");
            json_dump_file(j, q, JSON_INDENT(1));
            json_decref(j);
        }
        is_int(read_ckpt(p), CKPT_OK, "without table_xxh64 (an older "
               "writer) it reads");
        {
            ckpt_t *c = NULL;
            rc = ckpt_open(p, &c);
            if (rc == CKPT_OK)
                rc = ckpt_verify(c);
            ckpt_close(c);
            is_int(rc, CKPT_ECORRUPT, "and verify still catches it");
        }
        snprintf(p, sizeof p, "%s/step-00000010", r4);
        is_int(read_ckpt(p), CKPT_OK, "step 10 itself reads");
    }

    /* ---- moving bad newer checkpoints aside ------------------------- */
    {
        char r5[400];
        snprintf(r5, sizeof r5, "%s/r5", root);
        for (uint64_t s = 20; s <= 22; s++)
            save_at(r5, s, 1);
        snprintf(p, sizeof p, "%s/step-00000022/shard-0.ftsh", r5);
        truncate(p, 100);
        rc = ckpt_latest_good(r5, out, sizeof out, NULL, NULL);
        ok(rc == CKPT_OK && strstr(out, "step-00000021"),
           "latest_good falls back to step 21");
        is_int(save_at(r5, 22, 1), CKPT_EEXIST, "saving step 22 again: "
               "EEXIST while the bad one has the name");
        nmoved = 0;
        is_int(ckpt_set_aside_after(r5, 21, on_moved, NULL), CKPT_OK,
               "set_aside_after(21)");
        ok(nmoved == 1 && strcmp(moved_to, "step-00000022.corrupt") == 0,
           "step-00000022 moved to step-00000022.corrupt");
        snprintf(p, sizeof p, "%s/step-00000022.corrupt/shard-0.ftsh", r5);
        ok(exists(p), "its files are kept");
        is_int(save_at(r5, 22, 1), CKPT_OK, "step 22 saves anew");
        snprintf(p, sizeof p, "%s/LATEST", r5);
        ok(strcmp(read_text(p), "step-00000022\n") == 0, "LATEST names it");
        snprintf(p, sizeof p, "%s/step-00000022/shard-0.ftsh", r5);
        truncate(p, 100);
        nmoved = 0;
        is_int(ckpt_set_aside_after(r5, 21, on_moved, NULL), CKPT_OK,
               "set aside again");
        ok(nmoved == 1 && strcmp(moved_to, "step-00000022.corrupt-2") == 0,
           "the second goes to step-00000022.corrupt-2");
        {
            ckpt_entry_t *v = NULL;
            size_t n = 0;
            ckpt_list(r5, 0, &v, &n);
            ok(n == 2 && v[1].step == 21, "list shows steps 20 and 21 only");
            free(v);
            /* With CKPT_LIST_SET_ASIDE, the two set aside too, after the
             * live entries, never opened; a name that only looks like one
             * is not listed. */
            snprintf(p, sizeof p, "%s/step-00000022.corruptx", r5);
            mkdir(p, 0755);
            snprintf(p, sizeof p, "%s/step-00000022.corrupt-0", r5);
            mkdir(p, 0755);
            v = NULL;
            n = 0;
            is_int(ckpt_list(r5, CKPT_LIST_SET_ASIDE, &v, &n), CKPT_OK,
                   "list with CKPT_LIST_SET_ASIDE");
            ok(n == 4 && v[2].status == CKPT_ST_SET_ASIDE && v[2].step == 22 &&
                   strcmp(v[2].name, "step-00000022.corrupt") == 0 &&
                   v[3].status == CKPT_ST_SET_ASIDE &&
                   strcmp(v[3].name, "step-00000022.corrupt-2") == 0 && v[3].world_size == 0,
               "  shows step-00000022.corrupt and .corrupt-2 as set aside (not the look-alikes)");
            free(v);
            int nremoved = -1;
            is_int(ckpt_prune_set_aside(r5, &nremoved), CKPT_OK, "prune_set_aside");
            ok(nremoved == 2, "  removed the 2 set aside (%d)", nremoved);
            snprintf(p, sizeof p, "%s/step-00000022.corrupt", r5);
            snprintf(q, sizeof q, "%s/step-00000022.corruptx", r5);
            ok(!exists(p) && exists(q), "  and nothing else (the look-alike stays)");
            v = NULL;
            n = 0;
            ckpt_list(r5, CKPT_LIST_SET_ASIDE, &v, &n);
            ok(n == 2 && v[0].step == 20 && v[1].step == 21, "  steps 20 and 21 are left");
            free(v);
            is_int(ckpt_prune_set_aside(r5, &nremoved), CKPT_OK, "prune_set_aside again");
            ok(nremoved == 0, "  removes nothing (%d)", nremoved);
            snprintf(p, sizeof p, "%s/no-such-root", r5);
            is_int(ckpt_prune_set_aside(p, &nremoved), CKPT_ENOTFOUND,
                   "prune_set_aside of a missing root: CKPT_ENOTFOUND");
        }
        /* LATEST names a step that no longer exists: the next commit of an
         * older step moves it back. */
        snprintf(p, sizeof p, "%s/LATEST", r5);
        ok(strcmp(read_text(p), "step-00000022\n") == 0,
           "LATEST still names the moved step");
        is_int(save_at(r5, 21 + 0, 1), CKPT_EEXIST, "step 21 exists");
        {
            char r6[400];
            snprintf(r6, sizeof r6, "%s/r6", root);
            save_at(r6, 1, 1);
            snprintf(p, sizeof p, "%s/LATEST", r6);
            write_text(p, "step-00000030\n");
            is_int(save_at(r6, 2, 1), CKPT_OK, "r6: LATEST names step 30, "
                   "which does not exist; save step 2");
            ok(strcmp(read_text(p), "step-00000002\n") == 0,
               "LATEST now names step 2");
            write_text(p, "step-00000001\n");
            snprintf(q, sizeof q, "%s/step-00000005", r6);
            save_at(r6, 5, 1);
            save_at(r6, 3, 1); /* an older step committing late */
            ok(strcmp(read_text(p), "step-00000005\n") == 0,
               "LATEST never moves back to an older step that exists");
        }
    }

    /* ---- a step-<N> link is never resumed from ----------------------- */
    {
        char r9[400], ext[400], got[1024];
        ckpt_entry_t *v = NULL;
        size_t n = 0;
        snprintf(r9, sizeof r9, "%s/r9", root);
        snprintf(ext, sizeof ext, "%s/elsewhere9", root);
        save_at(r9, 2, 1);
        is_int(save_at(ext, 6, 1), CKPT_OK, "a good checkpoint elsewhere (step 6)");
        path_of(q, sizeof q, ext, "step-00000006");
        path_of(p, sizeof p, r9, "step-00000006");
        ok(symlink(q, p) == 0, "link r9/step-00000006 -> it");
        is_int(ckpt_list(r9, 0, &v, &n), CKPT_OK, "list r9");
        ok(n == 2 && v[1].step == 6 && v[1].status == CKPT_ST_CORRUPT &&
               strstr(v[1].why, "symbolic link") != NULL,
           "the link is listed as corrupt: %s", n == 2 ? v[1].why : "?");
        free(v);
        is_int(ckpt_latest_good(r9, got, sizeof got, NULL, NULL), CKPT_OK, "latest good");
        path_of(p, sizeof p, r9, "step-00000002");
        is_str(got, p, "the latest good checkpoint is step 2, not the link");
        nmoved = 0;
        is_int(ckpt_set_aside_after(r9, 2, on_moved, NULL), CKPT_OK,
               "set aside what is newer than step 2");
        path_of(p, sizeof p, r9, "step-00000006.corrupt");
        ok(nmoved == 1 && is_link(p), "the link itself was moved to step-00000006.corrupt");
        ok(read_ckpt(q) == CKPT_OK, "the checkpoint it points to is whole");
    }

    /* ---- ckpt_open and links; a reader keeps its directory (I10) ------ */
    {
        char ra[400], rb[400], best[2100], want[5000 * sizeof(float)];
        float back[5000];
        ckpt_t *c = NULL;
        snprintf(ra, sizeof ra, "%s/r10", root);
        snprintf(rb, sizeof rb, "%s/r10b", root);
        salt = 0;
        is_int(save_at(ra, 7, 0), CKPT_OK, "checkpoint A of step 7");
        memcpy(want, wts, sizeof want);
        salt = 1;
        is_int(save_at(rb, 7, 0), CKPT_OK, "checkpoint B of step 7, other values, same size");
        salt = 0;
        ok(memcmp(want, wts, sizeof want) != 0, "A and B hold different values");

        path_of(p, sizeof p, ra, "step-00000007");
        is_int(ckpt_open(p, &c), CKPT_OK, "open A");
        path_of(q, sizeof q, ra, "old-a");
        ok(rename(p, q) == 0, "rename A away while it is open");
        path_of(q, sizeof q, rb, "step-00000007");
        ok(rename(q, p) == 0, "rename B into A's place");
        rc = c ? ckpt_read_tensor(c, "w", back, sizeof back) : -1;
        ok(rc == CKPT_OK && memcmp(back, want, sizeof want) == 0,
           "the open reader still reads A's values (rc %d)", rc);
        is_int(c ? ckpt_verify(c) : -1, CKPT_OK, "and A verifies through it");
        ckpt_close(c);
        c = NULL;

        path_of(q, sizeof q, ra, "old-a");
        path_of(p, sizeof p, rb, "step-00000007");
        ok(symlink(q, p) == 0, "link r10b/step-00000007 -> A");
        rc = ckpt_open(p, &c);
        ok(rc == CKPT_ECORRUPT && strstr(ckpt_last_error(), "symbolic link") != NULL,
           "ckpt_open refuses a step-<N> that is a link: %s", ckpt_last_error());
        ckpt_close(c);
        c = NULL;
        snprintf(best, sizeof best, "%s/", p);
        rc = ckpt_open(best, &c);
        ok(rc == CKPT_ECORRUPT, "the same with a trailing slash (rc %d)", rc);
        ckpt_close(c);
        c = NULL;
        path_of(best, sizeof best, rb, "best");
        ok(symlink(q, best) == 0, "link r10b/best -> A");
        is_int(read_ckpt(best), CKPT_OK, "a link of another name is followed");
        is_int(ckpt_open(rb, &c), CKPT_EINCOMPLETE, "a root is not a checkpoint");
        ckpt_close(c);
    }

    /* ---- a step that appears between the phases; export's own names -- */
    {
        char r11[400], arc[600], name[700];
        ckpt_tensor_t t;
        ckpt_opts_t o;
        ckpt_coll_t coll = SOLO_COLL;
        ckpt_shard_info_t info;
        snprintf(r11, sizeof r11, "%s/r11", root);
        memset(&t, 0, sizeof t);
        snprintf(t.name, CKPT_NAME_MAX, "w");
        t.dtype = CKPT_F32, t.ndim = 1, t.shape[0] = 5000, t.data = wts;
        ckpt_opts_default(&o);
        o.fsync = 0;
        memset(&info, 0, sizeof info);
        uint64_t total = 0;
        rc = ckpt_layout(&t, 1, &total);
        if (rc == CKPT_OK)
            rc = ckpt_shard_write(r11, 5, 0, 1, &t, 1, &o, &info);
        is_int(rc, CKPT_OK, "phase one of step 5");
        path_of(p, sizeof p, r11, "step-00000005");
        ok(mkdir(p, 0755) == 0, "step-00000005 appears before the commit (an import)");
        rc = ckpt_commit(r11, 5, &t, 1, "{}", &o, rc, &info, &coll);
        is_int(rc, CKPT_EEXIST, "the commit fails: exists");
        path_of(q, sizeof q, r11, ".tmp-step-00000005");
        ok(!exists(q), "and removes its own temp dir");
        ok(is_real_dir(p), "the step-00000005 that appeared is left alone");

        is_int(save_at(r11, 6, 1), CKPT_OK, "a checkpoint to export (step 6)");
        path_of(p, sizeof p, r11, "step-00000006");
        snprintf(arc, sizeof arc, "%s/out.tar", r11);
        ok(write_text(arc, "someone's file\n") == 0, "an existing out.tar");
        is_int(ckpt_export(p, arc, 0), CKPT_EEXIST, "export without replace: exists");
        is_str(read_text(arc), "someone's file\n", "the existing file is untouched");
        snprintf(name, sizeof name, "%s.tmp", arc);
        ok(mkfifo(name, 0644) == 0, "a FIFO named out.tar.tmp");
        alarm(20);
        is_int(ckpt_export(p, arc, 1), CKPT_OK, "export with replace, never blocking on it");
        alarm(0);
        ok(read_text(arc) && strcmp(read_text(arc), "someone's file\n") != 0,
           "out.tar is the archive now");
        ok(exists(name) && !is_real_dir(name), "the FIFO is not touched");
        {
            char cmd[1400];
            snprintf(cmd, sizeof cmd, "ls %s | grep -F 'out.tar.tmp.' >/dev/null", r11);
            ok(system(cmd) != 0, "no temporary file is left behind");
        }
    }

    tap_rmtree(root);
    return done_testing();
}

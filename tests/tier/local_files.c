/*
 * local_files.c - the node-local tier's files for the save in place
 * (src/tier/local_inplace.c), white-box: a file adopted into a save keeps its
 * mapping, read-only, while its step is sealed (tier_files_retire), and is
 * writable again, at the same address, with no new mapping, when the step
 * is taken back (tier_files_reclaim); a file replaced or removed meanwhile
 * loses its kept mapping instead of handing out the wrong pages; no more
 * than TIER_KEPT_MAX mappings are kept per file; and unmapping or freeing
 * releases them all but removes only the spares.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tier/local_inplace_internal.h"
#include "ftrain/ckpt.h"
#include "tap.h"

#define LEN ((uint64_t)3 * 4096 + 100)

/* The permissions /proc/self/maps gives the mapping that holds p ("rw-s"),
 * or "" when p is not mapped. */
static const char *perms_of(const void *p)
{
    static char perms[8];
    perms[0] = '\0';
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[4096];
    while (maps && fgets(line, sizeof line, maps)) {
        unsigned long lo, hi;
        char pr[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, pr) == 3 && (uintptr_t)p >= lo &&
            (uintptr_t)p < hi) {
            snprintf(perms, sizeof perms, "%s", pr);
            break;
        }
    }
    if (maps)
        fclose(maps);
    return perms;
}

static int kept_count(const tier_files_t *f, int k)
{
    int n = 0;
    for (int j = 0; j < TIER_KEPT_MAX; j++)
        n += f->kept[k * TIER_KEPT_MAX + j].fd >= 0;
    return n;
}

static int kept_has(const tier_files_t *f, int k, int64_t step)
{
    for (int j = 0; j < TIER_KEPT_MAX; j++)
        if (f->kept[k * TIER_KEPT_MAX + j].fd >= 0 && f->kept[k * TIER_KEPT_MAX + j].step == step)
            return 1;
    return 0;
}

/* Seal by hand what ckpt_local_seal would: .tmp-step-N becomes step-N. */
static int seal(const char *root, uint64_t step)
{
    char name[64], from[4096], to[4096];
    ckpt_step_dirname(step, name, sizeof name);
    snprintf(from, sizeof from, "%s/.tmp-%s", root, name);
    snprintf(to, sizeof to, "%s/%s", root, name);
    return rename(from, to);
}

static void shard_path(char *buf, size_t cap, const char *root, uint64_t step, int index)
{
    char name[64], shard[64];
    ckpt_step_dirname(step, name, sizeof name);
    ckpt_shard_name(index, shard, sizeof shard);
    snprintf(buf, cap, "%s/%s/%s", root, name, shard);
}

/* Map file k, fill it with byte b, adopt it into step as shard index, seal. */
static int save(tier_files_t *f, int k, const char *root, uint64_t step, int index,
                unsigned char b)
{
    char err[512] = "";
    if (tier_files_map(f, k, LEN, err, sizeof err) != 0) {
        diag("map: %s", err);
        return 1;
    }
    memset(f->files[k].map, b, LEN);
    if (tier_files_adopt(f, k, root, step, index, err, sizeof err) != 0) {
        diag("adopt: %s", err);
        return 1;
    }
    tier_files_retire(f, (int64_t)step);
    return seal(root, step);
}

static int all_bytes(const unsigned char *p, uint64_t n, unsigned char b)
{
    for (uint64_t i = 0; i < n; i++)
        if (p[i] != b)
            return 0;
    return 1;
}

int main(void)
{
    char root[512], err[512] = "", path[4096];
    tap_tmpdir(root, sizeof root, "local_files");
    tier_files_t f;
    ok(tier_files_init(&f, root, 3, 2, err, sizeof err) == 0, "init: %s", err);

    /* 1. Adopted, sealed, retired: kept read-only; taken back: the same
     *    pages, writable, no new mapping. */
    ok(tier_files_map(&f, 0, LEN, err, sizeof err) == 0, "file 0 mapped: %s", err);
    unsigned char *first = f.files[0].map;
    is_str(perms_of(first), "rw-s", "a spare is mapped shared and writable");
    memset(first, 0xA5, LEN);
    ok(tier_files_adopt(&f, 0, root, 5, 3, err, sizeof err) == 0, "adopted into step 5: %s", err);
    tier_files_retire(&f, 5);
    ok(f.files[0].map == NULL && f.files[0].fd < 0 && !f.files[0].adopted,
       "retired: file 0 is no longer a spare");
    ok(kept_count(&f, 0) == 1 && kept_has(&f, 0, 5), "its mapping is kept for step 5");
    is_str(perms_of(first), "r--s", "a sealed step's kept mapping is read-only");
    ok(seal(root, 5) == 0, "step 5 sealed (renamed by hand)");
    ok(!tier_files_ready(&f, 0, LEN), "no spare is ready before the step is taken back");
    ok(tier_files_reclaim(&f, 0, root, 5, 3) == 0, "step 5's shard 3 taken back");
    ok(f.files[0].map == first, "the spare has the same mapping again (no new one)");
    ok(tier_files_ready(&f, 0, LEN), "and is ready at its size");
    is_str(perms_of(first), "rw-s", "writable again");
    ok(kept_count(&f, 0) == 0, "the kept entry is free again");
    ok(all_bytes(first, LEN, 0xA5), "the pages are the file's (its bytes as written)");
    first[0] = 0x11; /* would fault were it still read-only */
    shard_path(path, sizeof path, root, 5, 3);
    ok(access(path, F_OK) != 0 && errno == ENOENT, "the shard left step 5");
    ok(access(f.files[0].path, F_OK) == 0, "and is the spare at its path");
    ok(tier_files_map(&f, 0, LEN, err, sizeof err) == 0 && f.files[0].map == first,
       "mapping a ready spare again keeps its mapping: %s", err);

    /* 2. The sealed file replaced by another (same size) meanwhile: that
     *    one is taken back, the kept mapping is not handed out. */
    ok(save(&f, 1, root, 6, 4, 0x5A) == 0, "file 1 saved into step 6");
    unsigned char *second = f.kept[1 * TIER_KEPT_MAX].map;
    ok(second && kept_has(&f, 1, 6), "file 1's mapping kept for step 6");
    shard_path(path, sizeof path, root, 6, 4);
    char other[sizeof path + 8];
    snprintf(other, sizeof other, "%s.other", path);
    int fd = open(other, O_RDWR | O_CREAT | O_TRUNC, 0644);
    unsigned char fill[LEN];
    memset(fill, 0x77, sizeof fill);
    ok(fd >= 0 && write(fd, fill, sizeof fill) == (ssize_t)sizeof fill && close(fd) == 0 &&
           rename(other, path) == 0,
       "step 6's shard 4 replaced by another file of the same size");
    ok(tier_files_reclaim(&f, 1, root, 6, 4) == 0, "that file is taken back");
    ok(f.files[1].map == NULL && kept_count(&f, 1) == 0,
       "the kept mapping (another file's pages) is dropped, not handed out");
    is_str(perms_of(second), "", "and unmapped");
    ok(tier_files_map(&f, 1, LEN, err, sizeof err) == 0 && all_bytes(f.files[1].map, LEN, 0x77),
       "the next map maps the file taken back: %s", err);

    /* 3. The sealed file removed meanwhile: nothing taken, the kept
     *    mapping dropped. */
    ok(save(&f, 0, root, 7, 3, 0x33) == 0, "file 0 saved into step 7");
    unsigned char *third = f.kept[0].fd >= 0 ? f.kept[0].map : f.kept[1].map;
    shard_path(path, sizeof path, root, 7, 3);
    ok(unlink(path) == 0, "step 7's shard 3 removed by hand");
    ok(tier_files_reclaim(&f, 0, root, 7, 3) == 1, "nothing to take back: says so");
    ok(kept_count(&f, 0) == 0, "the kept mapping is dropped");
    is_str(perms_of(third), "", "and unmapped (its memory is freed)");

    /* 4. Never more than TIER_KEPT_MAX kept per file: the oldest goes. */
    int fine = 1;
    for (uint64_t step = 10; step < 10 + TIER_KEPT_MAX + 2; step++)
        fine &= save(&f, 0, root, step, 3, (unsigned char)step) == 0;
    ok(fine, "%d saves of file 0 sealed and never taken back", TIER_KEPT_MAX + 2);
    ok(kept_count(&f, 0) == TIER_KEPT_MAX, "%d mappings kept", TIER_KEPT_MAX);
    ok(!kept_has(&f, 0, 10) && !kept_has(&f, 0, 11) && kept_has(&f, 0, 12) &&
           kept_has(&f, 0, 10 + TIER_KEPT_MAX + 1),
       "the oldest steps' went, the newest stay");
    ok(tier_files_reclaim(&f, 0, root, 10, 3) == 0 && f.files[0].map == NULL,
       "the oldest step taken back without a kept mapping: the spare is mapped anew later");
    ok(tier_files_map(&f, 0, LEN, err, sizeof err) == 0 && all_bytes(f.files[0].map, LEN, 10),
       "with step 10's bytes: %s", err);
    /* Steps the prune removes without their files taken back keep no
     *  mapping: drop_before. */
    ok(save(&f, 1, root, 30, 4, 0x30) == 0 && save(&f, 1, root, 31, 4, 0x31) == 0 &&
           save(&f, 1, root, 32, 4, 0x32) == 0 && kept_count(&f, 1) == 3,
       "three saves of file 1 kept");
    unsigned char *gone30 = NULL;
    for (int j = 0; j < TIER_KEPT_MAX; j++)
        if (f.kept[TIER_KEPT_MAX + j].fd >= 0 && f.kept[TIER_KEPT_MAX + j].step == 30)
            gone30 = f.kept[TIER_KEPT_MAX + j].map;
    tier_files_drop_before(&f, 32);
    ok(kept_count(&f, 1) == 1 && kept_has(&f, 1, 32), "drop_before(32) leaves step 32's only");
    is_str(perms_of(gone30), "", "step 30's mapping is gone");
    ok(kept_count(&f, 0) == 0, "and file 0's steps, all older, too");
    tier_files_unmap_all(&f);
    ok(kept_count(&f, 0) == 0 && kept_count(&f, 1) == 0 && f.files[0].map == NULL,
       "unmap_all drops the kept mappings too");

    /* 5. Freeing removes the spares only, never a sealed step's file. */
    ok(save(&f, 1, root, 20, 4, 0x20) == 0 && kept_count(&f, 1) == 1, "a last save kept");
    ok(tier_files_map(&f, 0, LEN, err, sizeof err) == 0, "a spare mapped: %s", err);
    char spare0[sizeof f.files[0].path];
    snprintf(spare0, sizeof spare0, "%s", f.files[0].path);
    tier_files_free(&f, 1);
    ok(access(spare0, F_OK) != 0, "free removed the spare");
    shard_path(path, sizeof path, root, 20, 4);
    struct stat st;
    ok(stat(path, &st) == 0 && (uint64_t)st.st_size == LEN, "and left step 20's shard alone");
    tap_rmtree(root);
    done_testing();
    return 0;
}

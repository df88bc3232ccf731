/*
 * ckpt_inplace.c - stored shards built in place (ckpt_local.h): for several
 * tensor sets (alignment gaps between tensors), frame sizes (64, 1000, the
 * default) and world sizes (empty slices, slices below one frame, exactly
 * N frames, and not a multiple), a shard made with ckpt_stored_shard_bytes
 * and ckpt_stored_shard_finish is byte for byte, and info for info, the
 * file ckpt_shard_write writes at level 0; shards built so and adopted
 * (ckpt_shard_adopt) seal into a node-local step that scans, verifies and
 * reads back; ckpt_shard_check accepts good bytes and refuses damaged or
 * short ones; adopt moves and replaces files and refuses bad input without
 * touching anything; ckpt_local_reclaim takes a shard back out of a
 * committed step; and the bad arguments of the size and finish functions.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ftrain/ckpt.h"
#include "ftrain/ckpt_local.h"
#include "ckpt_test.h"
#include "tap.h"

#define MAXT 4

typedef struct {
    const char *label;
    ckpt_tensor_t t[MAXT];
    size_t n;
    uint64_t total;
    unsigned char *flat; /* the flat space, gaps zero */
} tset_t;

static char tmp[256];

/* Add a 1-d tensor of count elements filled with a pattern of seed. */
static void add(tset_t *s, const char *name, ckpt_dtype_t dt, int64_t count, unsigned seed)
{
    ckpt_tensor_t *t = &s->t[s->n++];
    size_t es = ckpt_dtype_size(dt), bytes = (size_t)count * es;
    unsigned char *d = malloc(bytes ? bytes : 1);
    if (!d) {
        printf("Bail out! out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < bytes; i++)
        d[i] = (unsigned char)((i * 131u + seed * 29u + (i >> 8) * 7u) & 0xff);
    memset(t, 0, sizeof *t);
    snprintf(t->name, CKPT_NAME_MAX, "%s", name);
    t->dtype = dt, t->ndim = 1, t->shape[0] = count, t->data = d;
}

/* Lay the set out and build its flat space. */
static void finish_set(tset_t *s)
{
    if (ckpt_layout(s->t, s->n, &s->total) != CKPT_OK ||
        !(s->flat = calloc(1, s->total ? s->total : 1))) {
        printf("Bail out! layout of %s: %s\n", s->label, ckpt_last_error());
        exit(1);
    }
    for (size_t i = 0; i < s->n; i++)
        memcpy(s->flat + s->t[i].offset, s->t[i].data, s->t[i].nbytes);
}

static void free_set(tset_t *s)
{
    for (size_t i = 0; i < s->n; i++)
        free((void *)s->t[i].data);
    free(s->flat);
}

static int write_file(const char *path, const void *bytes, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t put = fwrite(bytes, 1, len, f);
    return fclose(f) == 0 && put == len ? 0 : -1;
}

static int exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* Where ckpt_shard_write puts shard r of step: <root>/.tmp-<stepdir>/<shard>. */
static void shard_path(char *buf, size_t cap, const char *root, int committed,
                       uint64_t step, int r)
{
    char dir[CKPT_FILE_NAME_MAX], name[CKPT_FILE_NAME_MAX];
    ckpt_step_dirname(step, dir, sizeof dir);
    ckpt_shard_name(r, name, sizeof name);
    snprintf(buf, cap, "%s/%s%s/%s", root, committed ? "" : ".tmp-", dir, name);
}

/* The name of the first field where a and b differ, or NULL. */
static const char *info_diff(const ckpt_shard_info_t *a, const ckpt_shard_info_t *b)
{
    return a->raw_offset != b->raw_offset     ? "raw_offset"
           : a->raw_bytes != b->raw_bytes     ? "raw_bytes"
           : a->file_bytes != b->file_bytes   ? "file_bytes"
           : a->xxh64 != b->xxh64             ? "xxh64"
           : a->table_xxh64 != b->table_xxh64 ? "table_xxh64"
           : a->nframes != b->nframes         ? "nframes"
           : a->flags != b->flags             ? "flags"
                                              : NULL;
}

/* Shard r of w of s built in place in frames of frame: *buf (malloc'd)
 * of *len bytes, and its info.  @return the finish's result. */
static int build(const tset_t *s, int r, int w, size_t frame, unsigned char **buf,
                 size_t *len, ckpt_shard_info_t *info)
{
    uint64_t lo = (uint64_t)r * s->total / (uint64_t)w,
             hi = (uint64_t)(r + 1) * s->total / (uint64_t)w;
    *len = (size_t)ckpt_stored_shard_bytes(hi - lo, frame);
    if (*len == 0 || !(*buf = malloc(*len)))
        return CKPT_ENOMEM;
    memset(*buf, 0xa5, *len); /* finish must write all around the data */
    memcpy(*buf + CKPT_STORED_DATA_OFFSET, s->flat + lo, hi - lo);
    return ckpt_stored_shard_finish(*buf, *len, lo, hi, frame, info);
}

/* Slice kinds seen, for the coverage check. */
static int n_empty, n_small, n_exact, n_ragged;

/* Part 1: every rank of world w, in place vs ckpt_shard_write. */
static void compare(const tset_t *s, size_t frame, int w, uint64_t step)
{
    char root[512], path[1024];
    ckpt_opts_t opts;
    int rc = CKPT_OK, same = 1, sized = 1, r;
    const char *diff = NULL;

    ckpt_opts_default(&opts);
    opts.level = 0, opts.adapt = 0, opts.fsync = 0;
    if (frame)
        opts.frame_bytes = frame;
    frame = opts.frame_bytes;
    snprintf(root, sizeof root, "%s/cmp", tmp);
    for (r = 0; r < w && rc == CKPT_OK && same && !diff && sized; r++) {
        unsigned char *buf = NULL, *file = NULL;
        size_t len = 0, flen = 0;
        ckpt_shard_info_t in = {0}, wr = {0};
        rc = build(s, r, w, frame, &buf, &len, &in);
        if (rc == CKPT_OK)
            rc = ckpt_shard_write(root, step, r, w, s->t, s->n, &opts, &wr);
        shard_path(path, sizeof path, root, 0, step, r);
        if (rc == CKPT_OK && read_file(path, &file, &flen) != 0)
            rc = CKPT_EIO;
        if (rc == CKPT_OK) {
            same = flen == len && memcmp(file, buf, len) == 0;
            diff = info_diff(&in, &wr);
            sized = wr.file_bytes == flen && ckpt_stored_shard_bytes(wr.raw_bytes, frame) == flen;
            uint64_t raw = wr.raw_bytes;
            n_empty += raw == 0;
            n_small += raw > 0 && raw < frame;
            n_exact += raw >= frame && raw % frame == 0;
            n_ragged += raw > frame && raw % frame != 0;
        }
        free(buf);
        free(file);
    }
    r--;
    if (!ok(rc == CKPT_OK && same, "%s, frames of %zu, world %d: in place == shard_write, "
            "byte for byte", s->label, frame, w))
        diag("rank %d: rc %d (%s), same %d", r, rc, rc ? ckpt_last_error() : "", same);
    if (!ok(rc == CKPT_OK && !diff, "  every info field equal"))
        diag("rank %d: %s differs", r, diff ? diff : "-");
    ok(rc == CKPT_OK && sized, "  ckpt_stored_shard_bytes is the written file size");
}

int main(void)
{
    char root[512], path[1024], path2[1024], stage[512];
    tset_t sets[5];
    ckpt_local_step_t *steps = NULL;
    size_t nsteps = 0;
    int rc, present = -1, missing = -1;

    tap_tmpdir(tmp, sizeof tmp, "ckpt_inplace");
    memset(sets, 0, sizeof sets);
    /* A: 152 bytes, gaps after a (4) and c (5). */
    sets[0].label = "f32[7] i64[5] u8[3] f64[9]";
    add(&sets[0], "a", CKPT_F32, 7, 1), add(&sets[0], "b", CKPT_I64, 5, 2);
    add(&sets[0], "c", CKPT_U8, 3, 3), add(&sets[0], "d", CKPT_F64, 9, 4);
    /* B: 16 bytes, for worlds above the total (empty slices). */
    sets[1].label = "u8[3] i64[1]";
    add(&sets[1], "x", CKPT_U8, 3, 5), add(&sets[1], "y", CKPT_I64, 1, 6);
    /* C: 256 bytes = 4 frames of 64. */
    sets[2].label = "f32[31] i64[16]";
    add(&sets[2], "p", CKPT_F32, 31, 7), add(&sets[2], "q", CKPT_I64, 16, 8);
    /* D: 4000 bytes = 4 frames of 1000. */
    sets[3].label = "f32[997] i64[1]";
    add(&sets[3], "w", CKPT_F32, 997, 9), add(&sets[3], "n", CKPT_I64, 1, 10);
    /* E: 8 MiB = 2 default frames of 4 MiB. */
    sets[4].label = "f32[1] f32[2M-4] i64[1]";
    add(&sets[4], "s", CKPT_F32, 1, 11), add(&sets[4], "big", CKPT_F32, (2 << 20) - 4, 12);
    add(&sets[4], "k", CKPT_I64, 1, 13);
    for (int i = 0; i < 5; i++)
        finish_set(&sets[i]);

    plan(129);

    /* ---- 1. byte equality with the writer ------------------------------ */
    is_int(sets[0].t[1].offset, 32, "layout: a 4-byte gap after f32[7] (the i64 at 32)");
    is_int(sets[4].total, 8 << 20, "set E is exactly 8 MiB");
    static const struct {
        int set;
        size_t frame;
        int worlds[6];
    } cases[] = {
        {0, 64, {1, 3, 7, 0}},        {1, 64, {1, 16, 20, 0}},
        {2, 64, {1, 2, 3, 4, 0}},     {2, 1000, {2, 0}},
        {3, 1000, {1, 2, 3, 5, 8, 0}}, {3, 64, {3, 0}},
        {4, 0, {1, 2, 3, 0}},
    };
    uint64_t step = 1;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int k = 0; cases[c].worlds[k]; k++)
            compare(&sets[cases[c].set], cases[c].frame, cases[c].worlds[k], step++);
    ok(n_empty && n_small && n_exact && n_ragged,
       "slices compared: %d empty, %d below a frame, %d exact frames, %d ragged", n_empty,
       n_small, n_exact, n_ragged);

    /* ---- 2. built in place, adopted, sealed, read back ----------------- */
    enum { W = 3 };
    const tset_t *s = &sets[3];
    unsigned char *bufs[W] = {0};
    size_t lens[W] = {0};
    ckpt_shard_info_t infos[W];
    ckpt_opts_t opts;
    ckpt_opts_default(&opts);
    opts.level = 0, opts.adapt = 0, opts.frame_bytes = 1000;
    snprintf(root, sizeof root, "%s/local", tmp);
    snprintf(stage, sizeof stage, "%s/stage", tmp);
    rc = mkdir(stage, 0755) == 0 ? CKPT_OK : CKPT_EIO;
    for (int r = 0; r < W && rc == CKPT_OK; r++) {
        rc = build(s, r, W, 1000, &bufs[r], &lens[r], &infos[r]);
        snprintf(path, sizeof path, "%s/in-%d", stage, r);
        if (rc == CKPT_OK)
            rc = write_file(path, bufs[r], lens[r]) == 0 ? CKPT_OK : CKPT_EIO;
        if (rc == CKPT_OK)
            rc = ckpt_shard_adopt(root, 7, r, path);
    }
    is_int(rc, CKPT_OK, "3 shards built in place and adopted into a missing root");
    rc = ckpt_local_seal(root, 7, s->t, s->n, "{}", &opts, infos, W, 2, &present);
    ok(rc == CKPT_OK && present == W, "local_seal of step 7 holds 3 shards (rc %d, %d: %s)",
       rc, present, rc ? ckpt_last_error() : "");
    rc = ckpt_local_scan(root, &steps, &nsteps);
    ok(rc == CKPT_OK && nsteps == 1 && steps[0].step == 7 && steps[0].nshards == W &&
           steps[0].npresent == W && steps[0].present_bytes == lens[0] + lens[1] + lens[2],
       "local_scan lists step 7 with every shard present");
    ckpt_local_scan_free(steps, nsteps);
    char stepdir[600];
    snprintf(stepdir, sizeof stepdir, "%s/step-00000007", root);
    rc = ckpt_local_verify(stepdir, &missing);
    ok(rc == CKPT_OK && missing == 0, "local_verify passes, none missing (rc %d: %s)", rc,
       rc ? ckpt_last_error() : "");
    {
        ckpt_t *c = NULL;
        static unsigned char got[4000];
        int same = 1;
        rc = ckpt_open(stepdir, &c);
        if (rc == CKPT_OK)
            rc = ckpt_verify(c);
        is_int(rc, CKPT_OK, "ckpt_open and ckpt_verify accept it");
        for (size_t i = 0; i < s->n && rc == CKPT_OK; i++) {
            rc = ckpt_read_tensor(c, s->t[i].name, got, sizeof got);
            same &= rc == CKPT_OK && memcmp(got, s->t[i].data, s->t[i].nbytes) == 0;
        }
        ok(rc == CKPT_OK && same, "  each tensor reads back as it was");
        rc = c ? ckpt_read_range(c, 0, s->total, got) : -1;
        ok(rc == CKPT_OK && memcmp(got, s->flat, s->total) == 0,
           "  and the whole flat space, gaps zero");
        ckpt_close(c);
    }

    /* ---- 3. ckpt_shard_check ------------------------------------------- */
    {
        unsigned char *bad = malloc(lens[2]), *empty = NULL;
        size_t elen = 0;
        ckpt_shard_info_t einfo;
        memcpy(bad, bufs[2], lens[2]);
        is_int(ckpt_shard_check(bufs[2], lens[2], infos[2].xxh64, 7, 2), CKPT_OK,
               "shard_check accepts the right bytes");
        bad[lens[2] / 2] ^= 0x10;
        is_int(ckpt_shard_check(bad, lens[2], infos[2].xxh64, 7, 2), CKPT_ECORRUPT,
               "  refuses one flipped byte");
        ok(strstr(ckpt_last_error(), "shard-2.ftsh") != NULL, "  naming the shard: %s",
           ckpt_last_error());
        is_int(ckpt_shard_check(bufs[2], 63, XXH64(bufs[2], 63, 0), 9, 2), CKPT_ECORRUPT,
               "  refuses 63 bytes (below header and footer) whose checksum matches");
        ok(strstr(ckpt_last_error(), "shard-2.ftsh") != NULL &&
               strstr(ckpt_last_error(), "too short"),
           "  naming the shard: %s", ckpt_last_error());
        rc = build(&sets[1], 0, 20, 64, &empty, &elen, &einfo);
        ok(rc == CKPT_OK && elen == 64 &&
               ckpt_shard_check(empty, elen, einfo.xxh64, 9, 0) == CKPT_OK,
           "  accepts an empty slice's shard (64 bytes, header and footer)");
        is_int(ckpt_shard_check(NULL, lens[2], infos[2].xxh64, 7, 2), CKPT_EINVAL,
               "  NULL data is EINVAL");
        is_int(ckpt_shard_check(bufs[2], lens[2], infos[2].xxh64, 7, -1), CKPT_EINVAL,
               "  index -1 is EINVAL");
        free(bad);
        free(empty);
    }

    /* ---- 4. ckpt_shard_adopt ------------------------------------------- */
    {
        char aroot[512], dest[1024], src[600], tdir[1024];
        const unsigned char one[100] = {1, 2, 3}, two[200] = {9, 8, 7};
        snprintf(aroot, sizeof aroot, "%s/adopt", tmp);
        snprintf(src, sizeof src, "%s/src", stage);
        shard_path(dest, sizeof dest, aroot, 0, 3, 0);
        snprintf(tdir, sizeof tdir, "%s/.tmp-step-00000003", aroot);
        ok(write_file(src, one, sizeof one) == 0 && !exists(aroot), "a source file; no root yet");
        rc = ckpt_shard_adopt(aroot, 3, 0, src);
        is_int(rc, CKPT_OK, "shard_adopt into a missing root");
        ok(!exists(src) && same_bytes(dest, one, sizeof one),
           "  moves it: the source is gone, %s holds its bytes", dest);
        rc = write_file(src, two, sizeof two) == 0 ? ckpt_shard_adopt(aroot, 3, 0, src) : -1;
        ok(rc == CKPT_OK && !exists(src) && same_bytes(dest, two, sizeof two),
           "  a second adopt replaces the file of that name");
        char nroot[600];
        snprintf(nroot, sizeof nroot, "%s/never", tmp);
        ok(write_file(src, one, sizeof one) == 0, "a source for the bad calls");
        const struct { const char *root; uint64_t step; int index; const char *path, *what; }
            bad[] = {{NULL, 3, 0, src, "NULL root"},        {"", 3, 0, src, "an empty root"},
                     {nroot, 3, 0, NULL, "a NULL path"},    {nroot, 3, 0, "", "an empty path"},
                     {nroot, 3, -1, src, "index -1"},       {nroot, 3, 65536, src, "index 65536"},
                     {nroot, (uint64_t)INT64_MAX + 1, 0, src, "step INT64_MAX + 1"}};
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
            is_int(ckpt_shard_adopt(bad[i].root, bad[i].step, bad[i].index, bad[i].path),
                   CKPT_EINVAL, "adopt: %s is EINVAL", bad[i].what);
        ok(strstr(ckpt_last_error(), "9223372036854775808") != NULL, "  saying so: %s",
           ckpt_last_error());
        ok(!exists(nroot) && same_bytes(src, one, sizeof one),
           "  and none of them created the root or moved the source");
        snprintf(path, sizeof path, "%s/no-such-file", stage);
        rc = ckpt_shard_adopt(aroot, 3, 1, path);
        is_int(rc, CKPT_EIO, "adopt of a source that does not exist is EIO");
        ok(strstr(ckpt_last_error(), "no-such-file") != NULL,
           "  the message names it: %s", ckpt_last_error());
        shard_path(path2, sizeof path2, aroot, 0, 3, 1);
        ok(!exists(path2) && same_bytes(dest, two, sizeof two),
           "  no shard-1 appears, shard-0 is untouched");
        is_int(ckpt_shard_adopt(nroot, 3, 1, path), CKPT_EIO,
               "adopt of a missing source into a missing root is EIO");
        ok(!exists(nroot), "  and makes nothing for it (no root, no temp directory)");
        is_int(ckpt_shard_adopt(nroot, 3, 1, stage), CKPT_EIO,
               "adopt of a directory is EIO");
        ok(strstr(ckpt_last_error(), "not a regular file") != NULL && !exists(nroot) &&
               exists(stage),
           "  saying so, with nothing made or moved: %s", ckpt_last_error());
        snprintf(path, sizeof path, "%s/a/b", tmp);
        is_int(ckpt_shard_adopt(path, 3, 0, src), CKPT_EIO,
               "adopt into a root two levels missing is EIO");
        ok(same_bytes(src, one, sizeof one), "  and the source stays where it was");
    }

    /* ---- 5. ckpt_local_reclaim ----------------------------------------- */
    {
        char out[600];
        snprintf(out, sizeof out, "%s/reclaimed", stage);
        shard_path(path, sizeof path, root, 1, 7, 1);
        rc = ckpt_local_reclaim(root, 7, 1, out);
        is_int(rc, CKPT_OK, "local_reclaim of shard 1 of step 7");
        ok(same_bytes(out, bufs[1], lens[1]) && !exists(path),
           "  moves it out: the bytes at the destination, none left in the step");
        rc = ckpt_local_scan(root, &steps, &nsteps);
        ok(rc == CKPT_OK && nsteps == 1 && steps[0].npresent == W - 1 && !steps[0].present[1] &&
               steps[0].present[0] && steps[0].present[2],
           "  local_scan: 2 present, shard 1 absent");
        ckpt_local_scan_free(steps, nsteps);
        rc = ckpt_local_verify(stepdir, &missing);
        ok(rc == CKPT_OK && missing == 1, "  local_verify: good, 1 missing (rc %d, %d)", rc,
           missing);
        snprintf(path2, sizeof path2, "%s/again", stage);
        is_int(ckpt_local_reclaim(root, 7, 1, path2), CKPT_ENOTFOUND,
               "reclaim of a shard no longer there is ENOTFOUND");
        is_int(ckpt_local_reclaim(root, 8, 0, path2), CKPT_ENOTFOUND,
               "  of a step that does not exist, ENOTFOUND");
        const struct { const char *root; int index; const char *path, *what; } bad[] = {
            {NULL, 0, path2, "a NULL root"}, {root, 0, NULL, "a NULL path"},
            {root, 0, "", "an empty path"},  {root, -1, path2, "index -1"},
            {root, 65536, path2, "index 65536"}};
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
            is_int(ckpt_local_reclaim(bad[i].root, 7, bad[i].index, bad[i].path), CKPT_EINVAL,
                   "  %s, EINVAL", bad[i].what);
        shard_path(path, sizeof path, root, 1, 7, 0);
        ok(!exists(path2) && same_bytes(path, bufs[0], lens[0]),
           "  none of them moved anything");
        shard_path(path, sizeof path, root, 1, 7, 1);
        ok(mkdir(path, 0755) == 0, "a directory named shard-1.ftsh in step 7");
        is_int(ckpt_local_reclaim(root, 7, 1, path2), CKPT_ENOTFOUND,
               "  reclaim of it is ENOTFOUND");
        struct stat st;
        ok(lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && !exists(path2),
           "  and nothing moved");
        rmdir(path);
    }

    /* ---- 6. bad input to the size and finish functions ------------------ */
    {
        unsigned char buf[256] = {0};
        ckpt_shard_info_t info;
        uint64_t need = ckpt_stored_shard_bytes(100, 64);
        is_int(need, 16 + 100 + 2 * 48 + 48, "stored_shard_bytes(100, 64) is 260");
        is_int(ckpt_stored_shard_bytes(0, 64), 64, "  (0, 64): header and footer only");
        is_int(ckpt_stored_shard_bytes(100, 0), 0, "  frame_bytes 0 gives 0");
        is_int(ckpt_stored_shard_bytes(100, (256u << 20) + 1), 0,
               "  frame_bytes 256 MiB + 1 gives 0");
        ok(ckpt_stored_shard_bytes(100, 256u << 20) == 16 + 100 + 48 + 48,
           "  frame_bytes 256 MiB is allowed");
        unsigned char big[300] = {0};
        is_int(ckpt_stored_shard_finish(big, 260, 0, 100, 64, &info), CKPT_OK,
               "stored_shard_finish of 260 bytes for 100 in frames of 64");
        is_int(ckpt_stored_shard_finish(NULL, 260, 0, 100, 64, &info), CKPT_EINVAL,
               "  NULL file is EINVAL");
        is_int(ckpt_stored_shard_finish(big, 260, 0, 100, 64, NULL), CKPT_EINVAL,
               "  NULL info is EINVAL");
        is_int(ckpt_stored_shard_finish(big, 260, 100, 0, 64, &info), CKPT_EINVAL,
               "  hi < lo is EINVAL");
        is_int(ckpt_stored_shard_finish(big, 261, 0, 100, 64, &info), CKPT_EINVAL,
               "  one byte too many is EINVAL");
        is_int(ckpt_stored_shard_finish(big, 259, 0, 100, 64, &info), CKPT_EINVAL,
               "  one byte too few is EINVAL");
        is_int(ckpt_stored_shard_finish(buf, 64, 0, 0, 0, &info), CKPT_EINVAL,
               "  frame_bytes 0 is EINVAL");
        ok(memcmp(buf, (unsigned char[256]){0}, sizeof buf) == 0,
           "  which left the buffer untouched");
    }

    for (int r = 0; r < W; r++)
        free(bufs[r]);
    for (int i = 0; i < 5; i++)
        free_set(&sets[i]);
    tap_rmtree(tmp);
    return done_testing();
}

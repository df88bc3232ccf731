/*
 * ckpt_archive.c - TAP tests of ckpt_export / ckpt_import: good round trips
 * (.tar and .tar.zst), no overwrite on import, no partial file on a failed
 * export, and malicious archives built here with libarchive's writer
 * (absolute paths, "..", links, devices, fifos, two top-level directories,
 * forged sizes, garbage, truncation...).  Each bad archive must be refused,
 * leave the target root and its parent exactly as they were, and leave no
 * temp directory behind.
 */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ftrain/ckpt.h"
#include "tap.h"

static char base[256];     /* the test's scratch directory */
static char src_root[512]; /* where the source checkpoint lives */
static char src_dir[600];  /* its step directory */
static char *manifest;     /* the good manifest's text */
static size_t manifest_len;
static char *shard0; /* the good shard-0.ftsh */
static size_t shard0_len;

#define STEP 7
#define NW 3000

static float w_data[NW];
static int64_t cursor_data[3] = {3, 1280, 42};

/* ---- a one-rank collective ---------------------------------------------- */

static int one_allgather(void *ctx, const void *send, void *recv, size_t bytes)
{
    (void)ctx;
    memcpy(recv, send, bytes);
    return 0;
}

static int one_bcast(void *ctx, void *buf, size_t bytes, int root)
{
    (void)ctx;
    (void)buf;
    (void)bytes;
    (void)root;
    return 0;
}

static int save_fixture(const char *root, uint64_t step)
{
    ckpt_tensor_t t[2];
    memset(t, 0, sizeof t);
    for (int i = 0; i < NW; i++)
        w_data[i] = (float)i * 0.25f - 100.0f;
    snprintf(t[0].name, sizeof t[0].name, "w");
    t[0].dtype = CKPT_F32;
    t[0].ndim = 2;
    t[0].shape[0] = 30;
    t[0].shape[1] = 100;
    t[0].data = w_data;
    snprintf(t[1].name, sizeof t[1].name, "cursor");
    t[1].dtype = CKPT_I64;
    t[1].ndim = 1;
    t[1].shape[0] = 3;
    t[1].data = cursor_data;
    ckpt_opts_t o;
    ckpt_opts_default(&o);
    o.fsync = 0;
    ckpt_coll_t coll = {NULL, 0, 1, one_allgather, one_bcast};
    return ckpt_save(root, step, t, 2, "{\"epoch\":3}", &o, &coll);
}

/* ---- files ------------------------------------------------------------------ */

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        *len = (size_t)n;
    }
    return buf;
}

static int spit(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int r = fwrite(data, 1, len, f) == len ? 0 : -1;
    return fclose(f) == 0 ? r : -1;
}

/* Append "relpath type size" for every entry under dir to buf, recursively,
 * in readdir order sorted afterwards by the caller via a stable string. */
static void snapshot_rec(const char *dir, const char *rel, char *buf, size_t cap)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    char *names[256];
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL && n < 256) {
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            names[n++] = strdup(de->d_name);
    }
    closedir(d);
    /* Sort names so the snapshot does not depend on readdir order. */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char *tmp = names[j];
            names[j] = names[j - 1];
            names[j - 1] = tmp;
        }
    for (int i = 0; i < n; i++) {
        char path[1024], r2[1024];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        snprintf(r2, sizeof r2, "%s%s%s", rel, *rel ? "/" : "", names[i]);
        if (lstat(path, &st) == 0) {
            size_t used = strlen(buf);
            snprintf(buf + used, cap - used, "%s:%o:%lld\n", r2, (unsigned)st.st_mode,
                     S_ISDIR(st.st_mode) ? 0LL : (long long)st.st_size);
            if (S_ISDIR(st.st_mode))
                snapshot_rec(path, r2, buf, cap);
        }
        free(names[i]);
    }
}

static char *snapshot(const char *dir)
{
    size_t cap = 1 << 16;
    char *buf = calloc(1, cap);
    if (buf)
        snapshot_rec(dir, "", buf, cap);
    return buf;
}

/* Count entries of dir whose name starts with prefix. */
static int count_prefix(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    int n = 0;
    if (!d)
        return 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (strncmp(de->d_name, prefix, strlen(prefix)) == 0)
            n++;
    closedir(d);
    return n;
}

static int exists(const char *p)
{
    struct stat st;
    return lstat(p, &st) == 0;
}

/* ---- building archives ------------------------------------------------------ */

enum { E_FILE, E_DIR, E_SYMLINK, E_HARDLINK, E_CHR, E_FIFO };

typedef struct {
    int type;
    const char *name;
    const char *target; /* link target */
    const void *data;
    size_t size;
} ent_t;

static int write_tar(const char *path, const ent_t *e, size_t n)
{
    struct archive *a = archive_write_new();
    int r = -1;
    if (!a || archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
        archive_write_open_filename(a, path) != ARCHIVE_OK)
        goto out;
    for (size_t i = 0; i < n; i++) {
        struct archive_entry *ae = archive_entry_new();
        archive_entry_set_pathname(ae, e[i].name);
        archive_entry_set_perm(ae, 0644);
        switch (e[i].type) {
        case E_FILE:
            archive_entry_set_filetype(ae, AE_IFREG);
            archive_entry_set_size(ae, (la_int64_t)e[i].size);
            break;
        case E_DIR:
            archive_entry_set_filetype(ae, AE_IFDIR);
            archive_entry_set_perm(ae, 0755);
            break;
        case E_SYMLINK:
            archive_entry_set_filetype(ae, AE_IFLNK);
            archive_entry_set_symlink(ae, e[i].target);
            break;
        case E_HARDLINK:
            archive_entry_set_filetype(ae, AE_IFREG);
            archive_entry_set_hardlink(ae, e[i].target);
            archive_entry_set_size(ae, 0);
            break;
        case E_CHR:
            archive_entry_set_filetype(ae, AE_IFCHR);
            archive_entry_set_rdevmajor(ae, 1);
            archive_entry_set_rdevminor(ae, 3);
            break;
        case E_FIFO:
            archive_entry_set_filetype(ae, AE_IFIFO);
            break;
        }
        int hr = archive_write_header(a, ae);
        archive_entry_free(ae);
        if (hr != ARCHIVE_OK)
            goto out;
        if (e[i].type == E_FILE && e[i].size &&
            archive_write_data(a, e[i].data, e[i].size) != (la_ssize_t)e[i].size)
            goto out;
    }
    if (archive_write_close(a) != ARCHIVE_OK)
        goto out;
    r = 0;
out:
    if (r != 0)
        diag("cannot build %s: %s", path, a ? archive_error_string(a) : "no memory");
    archive_write_free(a);
    return r;
}

/* A one-entry ustar archive whose size field declares `size` bytes in GNU
 * base-256 form (beyond what the writer would let us build without actually
 * writing that many bytes), followed by one block of data and the end. */
static int write_giant(const char *path, const char *name, uint64_t size)
{
    unsigned char blk[512 * 4];
    memset(blk, 0, sizeof blk);
    snprintf((char *)blk, 100, "%s", name);
    memcpy(blk + 100, "0000644", 8);
    memcpy(blk + 108, "0000000", 8);
    memcpy(blk + 116, "0000000", 8);
    blk[124] = 0x80; /* base-256 size */
    for (int i = 0; i < 8; i++)
        blk[135 - i] = (unsigned char)(size >> (8 * i));
    memcpy(blk + 136, "00000000000", 12);
    blk[156] = '0';
    memcpy(blk + 257, "ustar", 6);
    memcpy(blk + 263, "00", 2);
    memset(blk + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += blk[i];
    snprintf((char *)blk + 148, 8, "%06o", sum);
    blk[155] = ' ';
    memset(blk + 512, 'A', 512);
    return spit(path, blk, sizeof blk);
}

/* ---- the bad-archive check ---------------------------------------------------- */

static char victim_parent[600]; /* parent of the target root */
static char victim_root[700];   /* the target root, created empty */

/* Import path into the victim root, expect failure with want (0: any
 * error), and check nothing changed anywhere around it. */
static void expect_refused(const char *label, const char *path, int want)
{
    char *before = snapshot(base);
    char out[1024] = "";
    int rc = ckpt_import(path, victim_root, out, sizeof out);
    if (want)
        is_int(rc, want, "%s: refused with %s", label, ckpt_strerror(want));
    else
        ok(rc != CKPT_OK, "%s: refused (%s)", label, ckpt_strerror(rc));
    const char *msg = ckpt_last_error();
    ok(msg && *msg, "%s: error message: %s", label, msg ? msg : "(none)");
    char *after = snapshot(base);
    int same = before && after && strcmp(before, after) == 0;
    ok(same, "%s: nothing created or changed under the test dir", label);
    if (!same)
        diag("before:\n%s\nafter:\n%s", before ? before : "", after ? after : "");
    is_int(count_prefix(victim_root, ".import-"), 0, "%s: no temp dir left", label);
    free(before);
    free(after);
}

/* ---- main --------------------------------------------------------------------------
 */

int main(void)
{
    char path[2200], path2[2400], out[2200];
    tap_tmpdir(base, sizeof base, "ckpt_archive");
    snprintf(src_root, sizeof src_root, "%s/src", base);
    snprintf(victim_parent, sizeof victim_parent, "%s/v", base);
    snprintf(victim_root, sizeof victim_root, "%s/root", victim_parent);

    int rc = save_fixture(src_root, STEP);
    is_int(rc, CKPT_OK, "fixture saved");
    if (rc != CKPT_OK)
        return done_testing();
    char name[64];
    ckpt_step_dirname(STEP, name, sizeof name);
    snprintf(src_dir, sizeof src_dir, "%s/%s", src_root, name);
    snprintf(path, sizeof path, "%s/manifest.json", src_dir);
    manifest = slurp(path, &manifest_len);
    snprintf(path, sizeof path, "%s/shard-0.ftsh", src_dir);
    shard0 = slurp(path, &shard0_len);
    ok(manifest && shard0, "fixture files read");
    if (!manifest || !shard0)
        return done_testing();

    /* ---- good round trips ---- */
    const char *kinds[] = {"good.tar", "good.tar.zst"};
    for (int k = 0; k < 2; k++) {
        char arch[1024], root[1024];
        snprintf(arch, sizeof arch, "%s/%s", base, kinds[k]);
        snprintf(root, sizeof root, "%s/dst%d/nested", base, k);
        rc = ckpt_export(src_dir, arch);
        is_int(rc, CKPT_OK, "export to %s", kinds[k]);
        if (rc != CKPT_OK)
            diag("%s", ckpt_last_error());
        snprintf(path, sizeof path, "%s.tmp", arch);
        ok(!exists(path), "%s: no .tmp left after export", kinds[k]);
        if (k == 1) {
            /* A zstd stream starts with the zstd magic. */
            size_t len = 0;
            unsigned char *b = (unsigned char *)slurp(arch, &len);
            ok(b && len > 4 && b[0] == 0x28 && b[1] == 0xb5 && b[2] == 0x2f &&
                   b[3] == 0xfd,
               "%s is zstd-compressed", kinds[k]);
            free(b);
        }
        rc = ckpt_import(arch, root, out, sizeof out);
        is_int(rc, CKPT_OK, "import %s into a missing root", kinds[k]);
        if (rc != CKPT_OK)
            diag("%s", ckpt_last_error());
        snprintf(path, sizeof path, "%s/%s", root, name);
        is_str(out, path, "import reports the new checkpoint's path");
        ckpt_t *c = NULL;
        rc = ckpt_open(path, &c);
        if (rc == CKPT_OK)
            rc = ckpt_verify(c);
        is_int(rc, CKPT_OK, "imported checkpoint opens and verifies");
        float back[NW];
        memset(back, 0, sizeof back);
        rc = c ? ckpt_read_tensor(c, "w", back, sizeof back) : -1;
        ok(rc == CKPT_OK && memcmp(back, w_data, sizeof back) == 0,
           "imported tensor equals the saved one");
        ok(c && ckpt_step(c) == STEP, "imported step is %d", STEP);
        ckpt_close(c);
        is_int(count_prefix(root, ".import-"), 0, "no temp dir left after import");

        /* Importing the same step again never replaces it. */
        snprintf(path2, sizeof path2, "%s/manifest.json", path);
        struct stat st0, st1;
        stat(path2, &st0);
        rc = ckpt_import(arch, root, out, sizeof out);
        is_int(rc, CKPT_EEXIST, "second import of step %d: exists", STEP);
        ok(stat(path2, &st1) == 0 && st0.st_ino == st1.st_ino,
           "the existing checkpoint was left in place");
        is_int(count_prefix(root, ".import-"), 0, "no temp dir left after refusal");
    }

    /* ---- export failures leave no file ---- */
    snprintf(path, sizeof path, "%s/bad.zip", base);
    is_int(ckpt_export(src_dir, path), CKPT_EINVAL, "export refuses a .zip name");
    ok(!exists(path), "no .zip written");
    snprintf(path, sizeof path, "%s/no-such-dir/x.tar", base);
    ok(ckpt_export(src_dir, path) != CKPT_OK, "export into a missing dir fails");
    {
        /* A corrupt checkpoint is not exported. */
        char croot[1024], cdir[1200];
        snprintf(croot, sizeof croot, "%s/corrupt", base);
        rc = save_fixture(croot, STEP);
        snprintf(cdir, sizeof cdir, "%s/%s", croot, name);
        snprintf(path, sizeof path, "%s/shard-0.ftsh", cdir);
        char *bytes = malloc(shard0_len);
        memcpy(bytes, shard0, shard0_len);
        bytes[shard0_len / 2] ^= 0x40;
        spit(path, bytes, shard0_len);
        free(bytes);
        snprintf(path, sizeof path, "%s/corrupt.tar", base);
        rc = ckpt_export(cdir, path);
        ok(rc != CKPT_OK, "export of a corrupt checkpoint fails (%s)",
           ckpt_strerror(rc));
        ok(!exists(path), "no archive written for it");
        snprintf(path2, sizeof path2, "%s.tmp", path);
        ok(!exists(path2), "and no temp file");
    }

    /* ---- malicious archives ---- */
    mkdir(victim_parent, 0755);
    mkdir(victim_root, 0755);
    char evil[1024], abs_target[1024], rel_esc[1024];
    snprintf(abs_target, sizeof abs_target, "%s/abs-x", base);
    const char *m = "step-00000007/manifest.json";
    const char *s0 = "step-00000007/shard-0.ftsh";

#define EVIL(label, want, ...)                                                         \
    do {                                                                               \
        ent_t e_[] = {__VA_ARGS__};                                                    \
        snprintf(evil, sizeof evil, "%s/evil.tar", base);                              \
        if (write_tar(evil, e_, sizeof e_ / sizeof e_[0]) == 0)                        \
            expect_refused(label, evil, want);                                         \
        else                                                                           \
            ok(0, "%s: archive built", label);                                         \
        unlink(evil);                                                                  \
    } while (0)

    EVIL("absolute path", CKPT_EARCHIVE, {E_FILE, abs_target, NULL, "x", 1});
    ok(!exists(abs_target), "absolute path: target not created");
    EVIL("../x", CKPT_EARCHIVE, {E_FILE, "../x", NULL, "x", 1});
    snprintf(rel_esc, sizeof rel_esc, "%s/x", victim_parent);
    ok(!exists(rel_esc), "../x: nothing next to the root");
    EVIL("step-1/../../x", CKPT_EARCHIVE, {E_FILE, m, NULL, manifest, manifest_len},
         {E_FILE, "step-00000007/../../x", NULL, "x", 1});
    EVIL("symlink entry", CKPT_EARCHIVE, {E_FILE, m, NULL, manifest, manifest_len},
         {E_SYMLINK, s0, "/etc/passwd", NULL, 0});
    EVIL("symlink as the top dir", CKPT_EARCHIVE,
         {E_SYMLINK, "step-00000007", "/tmp", NULL, 0},
         {E_FILE, m, NULL, manifest, manifest_len});
    EVIL("hard link", CKPT_EARCHIVE, {E_FILE, m, NULL, manifest, manifest_len},
         {E_HARDLINK, s0, m, NULL, 0});
    EVIL("character device", CKPT_EARCHIVE, {E_FILE, m, NULL, manifest, manifest_len},
         {E_CHR, s0, NULL, NULL, 0});
    EVIL("fifo", CKPT_EARCHIVE, {E_FILE, m, NULL, manifest, manifest_len},
         {E_FIFO, s0, NULL, NULL, 0});
    EVIL("two top-level dirs", CKPT_EARCHIVE, {E_FILE, m, NULL, manifest, manifest_len},
         {E_FILE, "step-00000008/manifest.json", NULL, manifest, manifest_len});
    EVIL("file outside a step dir", CKPT_EARCHIVE,
         {E_FILE, "manifest.json", NULL, manifest, manifest_len});
    EVIL("nested directory", CKPT_EARCHIVE,
         {E_FILE, "step-00000007/sub/manifest.json", NULL, manifest, manifest_len});
    EVIL("unknown file name", CKPT_EARCHIVE, {E_FILE, m, NULL, manifest, manifest_len},
         {E_FILE, "step-00000007/run.sh", NULL, "#!/bin/sh\n", 10});
    EVIL("duplicate entry", CKPT_EARCHIVE, {E_FILE, m, NULL, manifest, manifest_len},
         {E_FILE, m, NULL, manifest, manifest_len});
    EVIL("'.' component", CKPT_EARCHIVE,
         {E_FILE, "step-00000007/./manifest.json", NULL, manifest, manifest_len});
    EVIL("top dir of another step than the manifest", 0,
         {E_FILE, "step-00000009/manifest.json", NULL, manifest, manifest_len},
         {E_FILE, "step-00000009/shard-0.ftsh", NULL, shard0, shard0_len});
    EVIL("shard missing", 0, {E_FILE, m, NULL, manifest, manifest_len});
    {
        /* A shard with one flipped byte fails verification. */
        char *bytes = malloc(shard0_len);
        memcpy(bytes, shard0, shard0_len);
        bytes[shard0_len / 3] ^= 1;
        EVIL("corrupt shard", CKPT_ECORRUPT, {E_FILE, m, NULL, manifest, manifest_len},
             {E_FILE, s0, NULL, bytes, shard0_len});
        free(bytes);
    }
    EVIL("directory entry only", CKPT_EARCHIVE,
         {E_DIR, "step-00000007/", NULL, NULL, 0});
    snprintf(evil, sizeof evil, "%s/empty.tar", base);
    if (write_tar(evil, NULL, 0) == 0)
        expect_refused("tar with no entries", evil, CKPT_EARCHIVE);
    unlink(evil);

    snprintf(evil, sizeof evil, "%s/giant.tar", base);
    write_giant(evil, s0, UINT64_C(1) << 50);
    expect_refused("giant declared size (1 PiB)", evil, CKPT_EARCHIVE);
    write_giant(evil, m, UINT64_C(1) << 30);
    expect_refused("giant manifest (1 GiB)", evil, CKPT_EARCHIVE);
    unlink(evil);

    snprintf(evil, sizeof evil, "%s/garbage.tar", base);
    {
        unsigned char junk[4096];
        uint64_t x = 0x1234567;
        for (size_t i = 0; i < sizeof junk; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            junk[i] = (unsigned char)(x >> 56);
        }
        spit(evil, junk, sizeof junk);
    }
    expect_refused("non-tar garbage", evil, CKPT_EARCHIVE);
    spit(evil, "", 0);
    expect_refused("empty file", evil, CKPT_EARCHIVE);
    unlink(evil);

    /* Truncated archives: cut the good one (plain and zstd) in the middle of
     * the shard data. */
    for (int k = 0; k < 2; k++) {
        size_t len = 0;
        snprintf(path, sizeof path, "%s/%s", base, kinds[k]);
        char *b = slurp(path, &len);
        snprintf(evil, sizeof evil, "%s/trunc%s", base, k ? ".tar.zst" : ".tar");
        spit(evil, b, len * 2 / 3);
        free(b);
        char label[64];
        snprintf(label, sizeof label, "truncated %s", kinds[k]);
        expect_refused(label, evil, CKPT_EARCHIVE);
        unlink(evil);
    }
    ok(!exists(abs_target), "no stray file appeared at the absolute target");

    /* ---- clean up ---- */
    tap_rmtree(base);
    free(manifest);
    free(shard0);
    return done_testing();
}

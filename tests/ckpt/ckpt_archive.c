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
#include <jansson.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
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

/* Fill blk with a ustar header for a regular file: the size in octal, or in
 * GNU base-256 form when it does not fit in 11 octal digits (beyond what the
 * writer would let us build without actually writing that many bytes). */
static void tar_header(unsigned char blk[512], const char *name, uint64_t size)
{
    memset(blk, 0, 512);
    snprintf((char *)blk, 100, "%s", name);
    memcpy(blk + 100, "0000644", 8);
    memcpy(blk + 108, "0000000", 8);
    memcpy(blk + 116, "0000000", 8);
    if (size < (UINT64_C(1) << 33)) {
        snprintf((char *)blk + 124, 12, "%011llo", (unsigned long long)size);
    } else {
        blk[124] = 0x80; /* base-256 size */
        for (int i = 0; i < 8; i++)
            blk[135 - i] = (unsigned char)(size >> (8 * i));
    }
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
}

/* Append the ustar header and data (padded to 512) of one file to f. */
static int put_file(FILE *f, const char *name, const void *data, size_t len)
{
    unsigned char blk[512];
    tar_header(blk, name, len);
    size_t pad = (512 - len % 512) % 512;
    static const unsigned char zeros[512];
    return fwrite(blk, 1, 512, f) == 512 && fwrite(data, 1, len, f) == len &&
                   fwrite(zeros, 1, pad, f) == pad
               ? 0
               : -1;
}

/* An archive whose entry `name` declares `size` bytes, followed by one block
 * of data and the end (no end-of-archive blocks).  With manifest_first, the
 * good manifest comes first, as import requires. */
static int write_giant(const char *path, const char *name, uint64_t size,
                       int manifest_first)
{
    unsigned char blk[512 * 2];
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int r = manifest_first ? put_file(f, "step-00000007/manifest.json", manifest,
                                      manifest_len)
                           : 0;
    tar_header(blk, name, size);
    memset(blk + 512, 'A', 512);
    if (fwrite(blk, 1, sizeof blk, f) != sizeof blk)
        r = -1;
    return fclose(f) == 0 ? r : -1;
}

/* ---- a .tar.zst of zeros, written by hand ---------------------------------- */

/* One zstd block: 3-byte header (last flag, type, size) and its content.  A
 * raw block (type 0) holds n bytes; an RLE block (type 1) holds one byte to
 * repeat n times, so 128 KiB of zeros cost 4 bytes. */
static int zst_block(FILE *f, int last, int type, const void *data, size_t n)
{
    uint32_t h = (uint32_t)last | (uint32_t)type << 1 | (uint32_t)n << 3;
    unsigned char b[3] = {(unsigned char)h, (unsigned char)(h >> 8),
                          (unsigned char)(h >> 16)};
    size_t body = type == 1 ? 1 : n;
    return fwrite(b, 1, 3, f) == 3 && fwrite(data, 1, body, f) == body ? 0 : -1;
}

#define ZST_BLOCK (128u << 10)

static int zst_raw(FILE *f, const void *data, size_t n)
{
    for (size_t off = 0; off < n; off += ZST_BLOCK) {
        size_t k = n - off < ZST_BLOCK ? n - off : ZST_BLOCK;
        if (zst_block(f, 0, 0, (const char *)data + off, k) != 0)
            return -1;
    }
    return 0;
}

static int zst_zeros(FILE *f, uint64_t n)
{
    static const unsigned char zero = 0;
    for (uint64_t off = 0; off < n; off += ZST_BLOCK) {
        size_t k = n - off < ZST_BLOCK ? (size_t)(n - off) : ZST_BLOCK;
        if (zst_block(f, 0, 1, &zero, k) != 0)
            return -1;
    }
    return 0;
}

/* A .tar.zst holding step-00000007/manifest.json (the given text) and then
 * `shard` declaring `size` bytes of zeros: the tiny archive that expands to
 * a huge file on extraction (2 GiB in about 64 KiB). */
static int write_zst_zeros(const char *path, const char *mtext, size_t mlen,
                           const char *shard, uint64_t size)
{
    static const unsigned char frame[] = {0x28, 0xb5, 0x2f, 0xfd, /* magic */
                                          0x00,  /* no content size, no checksum */
                                          0x38}; /* window 128 KiB */
    unsigned char hdr[512];
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t pad = (512 - mlen % 512) % 512;
    int r = fwrite(frame, 1, sizeof frame, f) == sizeof frame ? 0 : -1;
    tar_header(hdr, "step-00000007/manifest.json", mlen);
    if (r == 0)
        r = zst_raw(f, hdr, 512);
    if (r == 0)
        r = zst_raw(f, mtext, mlen);
    if (r == 0)
        r = zst_zeros(f, pad);
    tar_header(hdr, shard, size);
    if (r == 0)
        r = zst_raw(f, hdr, 512);
    /* The data, its padding to 512 and the two end-of-archive blocks. */
    if (r == 0)
        r = zst_zeros(f, size + (512 - size % 512) % 512 + 1024);
    if (r == 0)
        r = zst_block(f, 1, 0, "", 0);
    return fclose(f) == 0 ? r : -1;
}

/* A pax archive with the good manifest and step-00000007/shard-0.ftsh as a
 * sparse entry of the real shard's size: only its first `data` bytes are
 * stored, the rest is a hole libarchive would fill with zeros. */
static int write_sparse(const char *path, size_t data)
{
    struct archive *a = archive_write_new();
    struct archive_entry *ae = NULL;
    int r = -1;
    if (!a || archive_write_set_format_pax(a) != ARCHIVE_OK ||
        archive_write_open_filename(a, path) != ARCHIVE_OK)
        goto out;
    ae = archive_entry_new();
    archive_entry_set_pathname(ae, "step-00000007/manifest.json");
    archive_entry_set_filetype(ae, AE_IFREG);
    archive_entry_set_perm(ae, 0644);
    archive_entry_set_size(ae, (la_int64_t)manifest_len);
    if (archive_write_header(a, ae) != ARCHIVE_OK ||
        archive_write_data(a, manifest, manifest_len) != (la_ssize_t)manifest_len)
        goto out;
    archive_entry_clear(ae);
    archive_entry_set_pathname(ae, "step-00000007/shard-0.ftsh");
    archive_entry_set_filetype(ae, AE_IFREG);
    archive_entry_set_perm(ae, 0644);
    archive_entry_set_size(ae, (la_int64_t)shard0_len);
    archive_entry_sparse_add_entry(ae, 0, (la_int64_t)data);
    if (archive_write_header(a, ae) != ARCHIVE_OK ||
        archive_write_data(a, shard0, data) != (la_ssize_t)data)
        goto out;
    if (archive_write_close(a) != ARCHIVE_OK)
        goto out;
    r = 0;
out:
    if (r != 0)
        diag("cannot build %s: %s", path, a ? archive_error_string(a) : "no memory");
    archive_entry_free(ae);
    archive_write_free(a);
    return r;
}

/* Does the archive's reader see a sparse entry in it (so the test tests
 * what it means to)? */
static int has_sparse_entry(const char *path)
{
    struct archive *a = archive_read_new();
    struct archive_entry *e;
    int found = 0;
    archive_read_support_format_tar(a);
    if (archive_read_open_filename(a, path, 10240) == ARCHIVE_OK)
        while (archive_read_next_header(a, &e) == ARCHIVE_OK)
            found |= archive_entry_sparse_count(e) > 0;
    archive_read_free(a);
    return found;
}

/* The fixture's manifest rewritten as a valid one (no manifest_xxh64, which
 * is optional) naming nshards shards of file_bytes each: shard 0 covers the
 * tensors, the others are empty.  malloc'd text, or NULL. */
static char *forge_manifest(int nshards, uint64_t file_bytes, size_t *len)
{
    json_error_t jerr;
    json_t *root = json_loadb(manifest, manifest_len, 0, &jerr);
    char *text = NULL;
    if (!root)
        return NULL;
    json_object_del(root, "manifest_xxh64");
    json_t *shards = json_object_get(root, "shards");
    json_t *s0 = json_array_get(shards, 0);
    uint64_t total = (uint64_t)json_integer_value(json_object_get(root, "total_bytes"));
    json_object_set_new(s0, "file_bytes", json_integer((json_int_t)file_bytes));
    for (int i = 1; i < nshards; i++) {
        char name[64];
        snprintf(name, sizeof name, "shard-%d.ftsh", i);
        json_array_append_new(
            shards, json_pack("{s:s, s:I, s:I, s:I, s:I, s:s}", "file", name,
                              "raw_offset", (json_int_t)total, "raw_bytes",
                              (json_int_t)0, "file_bytes", (json_int_t)file_bytes,
                              "nframes", (json_int_t)0, "xxh64", "0000000000000000"));
    }
    text = json_dumps(root, JSON_INDENT(2));
    json_decref(root);
    if (text)
        *len = strlen(text);
    return text;
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
    /* An archive imported by mistake would make every later one fail with
     * EEXIST: remove it so that each case is judged on its own. */
    if (rc == CKPT_OK && out[0])
        tap_rmtree(out);
    free(before);
    free(after);
}

/* After expect_refused: does the error message say what it should? */
static void msg_has(const char *label, const char *want)
{
    const char *msg = ckpt_last_error();
    ok(msg && strstr(msg, want), "%s: the message says \"%s\"", label, want);
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
        rc = ckpt_export(src_dir, arch, 1);
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
    is_int(ckpt_export(src_dir, path, 1), CKPT_EINVAL, "export refuses a .zip name");
    ok(!exists(path), "no .zip written");
    snprintf(path, sizeof path, "%s/no-such-dir/x.tar", base);
    ok(ckpt_export(src_dir, path, 1) != CKPT_OK, "export into a missing dir fails");
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
        rc = ckpt_export(cdir, path, 1);
        ok(rc != CKPT_OK, "export of a corrupt checkpoint fails (%s)",
           ckpt_strerror(rc));
        ok(!exists(path), "no archive written for it");
        snprintf(path2, sizeof path2, "%s.tmp", path);
        ok(!exists(path2), "and no temp file");
    }

    /* ---- malicious archives ---- */
    mkdir(victim_parent, 0755);
    mkdir(victim_root, 0755);
    /* No import below may write a file over 64 MiB (the good shard is a few
     * KiB): a write past the limit fails with EFBIG instead of filling the
     * disk, so an import that extracts a forged size shows up as an EIO
     * instead of the refusal each test expects. */
    struct rlimit fsize_was, fsize_cap;
    getrlimit(RLIMIT_FSIZE, &fsize_was);
    fsize_cap = fsize_was;
    if (fsize_cap.rlim_max == RLIM_INFINITY || fsize_cap.rlim_max > (64u << 20))
        fsize_cap.rlim_cur = 64u << 20;
    signal(SIGXFSZ, SIG_IGN);
    ok(setrlimit(RLIMIT_FSIZE, &fsize_cap) == 0, "file size capped at 64 MiB");
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
    write_giant(evil, s0, UINT64_C(1) << 50, 1);
    expect_refused("giant declared size (1 PiB)", evil, CKPT_EARCHIVE);
    msg_has("giant declared size (1 PiB)", "exceeds the limit");
    write_giant(evil, m, UINT64_C(1) << 30, 0);
    expect_refused("giant manifest (1 GiB)", evil, CKPT_EARCHIVE);
    unlink(evil);

    /* ---- the manifest comes first, and every shard is held to it ---- */
    {
        /* Accepted: a directory entry for step-<N>/ before the manifest,
         * "./" prefixes. */
        char root[1024];
        snprintf(root, sizeof root, "%s/dst-dir-entry", base);
        ent_t e[] = {{E_DIR, "./step-00000007/", NULL, NULL, 0},
                     {E_FILE, "./step-00000007/manifest.json", NULL, manifest,
                      manifest_len},
                     {E_FILE, "./step-00000007/shard-0.ftsh", NULL, shard0, shard0_len}};
        snprintf(evil, sizeof evil, "%s/dir-first.tar", base);
        write_tar(evil, e, 3);
        rc = ckpt_import(evil, root, out, sizeof out);
        is_int(rc, CKPT_OK, "a step-<N>/ directory entry may precede the manifest");
        if (rc != CKPT_OK)
            diag("%s", ckpt_last_error());
        unlink(evil);
        tap_rmtree(root);
    }
    EVIL("manifest not first", CKPT_EARCHIVE, {E_FILE, s0, NULL, shard0, shard0_len},
         {E_FILE, m, NULL, manifest, manifest_len});
    msg_has("manifest not first", "the manifest must be the first file");
    msg_has("manifest not first",
            "tar cf X.tar step-00000007/manifest.json step-00000007/shard-*.ftsh");
    EVIL("shard-foo.ftsh", CKPT_EARCHIVE, {E_FILE, m, NULL, manifest, manifest_len},
         {E_FILE, "step-00000007/shard-foo.ftsh", NULL, shard0, shard0_len});
    msg_has("shard-foo.ftsh", "shard-foo.ftsh': not a checkpoint file name");
    EVIL("shard-00.ftsh (leading zero)", CKPT_EARCHIVE,
         {E_FILE, m, NULL, manifest, manifest_len},
         {E_FILE, "step-00000007/shard-00.ftsh", NULL, shard0, shard0_len});
    msg_has("shard-00.ftsh (leading zero)", "not a checkpoint file name");
    EVIL("shard-7.ftsh in a 1-shard checkpoint", CKPT_EARCHIVE,
         {E_FILE, m, NULL, manifest, manifest_len},
         {E_FILE, "step-00000007/shard-7.ftsh", NULL, shard0, shard0_len});
    msg_has("shard-7.ftsh in a 1-shard checkpoint",
            "shard-7.ftsh': shard 7, but the manifest names 1 shard");
    {
        char want[160];
        snprintf(want, sizeof want,
                 "declares %zu bytes, the manifest's shards[0].file_bytes is %zu",
                 shard0_len - 1, shard0_len);
        EVIL("shard one byte shorter than the manifest says", CKPT_EARCHIVE,
             {E_FILE, m, NULL, manifest, manifest_len},
             {E_FILE, s0, NULL, shard0, shard0_len - 1});
        msg_has("shard one byte shorter than the manifest says", want);
    }
    {
        /* 2 GiB of zeros in a ~64 KiB .tar.zst: refused from its header,
         * before a byte of it is written (the 64 MiB cap would turn any
         * extraction into EIO). */
        const char *label = "shard of 2 GiB of zeros in a small .tar.zst";
        struct stat st;
        snprintf(evil, sizeof evil, "%s/zeros.tar.zst", base);
        int built = write_zst_zeros(evil, manifest, manifest_len, s0,
                                    UINT64_C(2) << 30) == 0 &&
                    stat(evil, &st) == 0;
        ok(built && st.st_size < (1 << 20), "%s: archive built (%lld bytes)", label,
           built ? (long long)st.st_size : -1LL);
        expect_refused(label, evil, CKPT_EARCHIVE);
        msg_has(label, "declares 2147483648 bytes, the manifest's shards[0].file_bytes");

        /* The same shard behind a manifest that does not parse, or whose
         * checksum does not match: the manifest's own error, before the
         * shard is touched. */
        const char *bad = "{\"format\": \"ftrain-ckpt\", \"version\": ";
        write_zst_zeros(evil, bad, strlen(bad), s0, UINT64_C(2) << 30);
        expect_refused("corrupt JSON manifest", evil, CKPT_EFORMAT);
        msg_has("corrupt JSON manifest", "manifest.json: not valid JSON");

        char *edited = malloc(manifest_len + 1);
        memcpy(edited, manifest, manifest_len + 1);
        char *key = strstr(edited, "\"epoch\"");
        char *ep = key ? strchr(key, '3') : NULL;
        ok(ep && ep - key < 12, "edited manifest: the record's epoch found");
        if (ep)
            *ep = '4';
        write_zst_zeros(evil, edited, manifest_len, s0, UINT64_C(2) << 30);
        expect_refused("manifest edited by hand", evil, CKPT_ECORRUPT);
        msg_has("manifest edited by hand", "manifest_xxh64 is");
        free(edited);
        unlink(evil);
    }
    {
        const char *label = "sparse shard entry";
        snprintf(evil, sizeof evil, "%s/sparse.tar", base);
        if (write_sparse(evil, 1024) == 0) {
            ok(has_sparse_entry(evil), "%s: libarchive reads it as sparse", label);
            expect_refused(label, evil, CKPT_EARCHIVE);
            msg_has(label, "shard-0.ftsh': sparse file");
        } else {
            ok(0, "%s: archive built", label);
        }
        unlink(evil);
    }
    {
        /* A valid manifest (without the optional manifest_xxh64) naming
         * 4096 shards of 1 TiB: no file system has 4 PiB free. */
        size_t flen = 0;
        char *forged = forge_manifest(4096, UINT64_C(1) << 40, &flen);
        ok(forged != NULL, "forged manifest of 4096 x 1 TiB shards");
        if (forged) {
            EVIL("not enough space", CKPT_EIO, {E_FILE, m, NULL, forged, flen},
                 {E_FILE, s0, NULL, shard0, shard0_len});
            msg_has("not enough space", "not enough space in '");
            msg_has("not enough space", "the checkpoint needs 4503599627370496 bytes");
        }
        free(forged);
        /* One shard of 2 TiB: over the per-entry limit, never satisfiable. */
        forged = forge_manifest(1, UINT64_C(2) << 40, &flen);
        if (forged) {
            EVIL("manifest names a 2 TiB shard", CKPT_EARCHIVE,
                 {E_FILE, m, NULL, forged, flen},
                 {E_FILE, s0, NULL, shard0, shard0_len});
            msg_has("manifest names a 2 TiB shard", "exceeds the limit");
        } else {
            ok(0, "forged manifest of one 2 TiB shard");
        }
        free(forged);
    }

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
    setrlimit(RLIMIT_FSIZE, &fsize_was);
    signal(SIGXFSZ, SIG_DFL);

    /* ---- clean up ---- */
    tap_rmtree(base);
    free(manifest);
    free(shard0);
    return done_testing();
}

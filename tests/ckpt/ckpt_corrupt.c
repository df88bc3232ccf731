/*
 * ckpt_corrupt.c - every kind of bad checkpoint gives the right error code,
 * never a crash, and reading one writes nothing: truncated, bit-flipped,
 * missing and symlinked shards; manifests with wrong types, huge or negative
 * sizes, offsets out of range, overlaps, gaps and unsafe shard names; frames
 * that decompress to more than declared; bad footer magic; wrong versions;
 * manifests edited without a matching manifest_xxh64 (and ones re-indented,
 * or of older writers without one, that still open);
 * latest_good falling back past corrupt checkpoints.
 */
#define _XOPEN_SOURCE 700
#include <fcntl.h>
#include <stdarg.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <xxhash.h>
#include <zstd.h>

#include "ftrain/ckpt.h"
#include "ckpt_test.h"
#include "tap.h"

static char root[256];

static float wts[20000];
static int64_t ids[300];

/* Save a 2-rank-shaped state (written here by one rank) at root/step. */
static int save(const char *dir_root, uint64_t step, size_t frame)
{
    ckpt_tensor_t t[2];
    ckpt_opts_t o;
    ckpt_coll_t coll = SOLO_COLL;
    for (size_t i = 0; i < 20000; i++)
        wts[i] = (float)((i * 2654435761u + step) % 1000) / 997.0f;
    for (size_t i = 0; i < 300; i++)
        ids[i] = (int64_t)(i * step);
    memset(t, 0, sizeof t);
    snprintf(t[0].name, CKPT_NAME_MAX, "w");
    t[0].dtype = CKPT_F32, t[0].ndim = 1, t[0].shape[0] = 20000,
    t[0].data = wts;
    snprintf(t[1].name, CKPT_NAME_MAX, "ids");
    t[1].dtype = CKPT_I64, t[1].ndim = 1, t[1].shape[0] = 300, t[1].data = ids;
    ckpt_opts_default(&o);
    o.frame_bytes = frame;
    o.fsync = 0;
    return ckpt_save(dir_root, step, t, 2, "{\"epoch\":3}", &o, &coll);
}

static void sh(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    if (system(cmd) != 0)
        diag("command failed: %s", cmd);
}

/* ---- a fingerprint of a tree, to show readers write nothing ------------ */

static char *fp;
static size_t fp_len, fp_cap;

static int fp_add(const char *path, const struct stat *st, int flag,
                  struct FTW *ftw)
{
    char line[1200];
    int k;
    (void)flag, (void)ftw;
    k = snprintf(line, sizeof line, "%s %lld %lld.%09ld\n", path,
                 (long long)st->st_size, (long long)st->st_mtim.tv_sec,
                 st->st_mtim.tv_nsec);
    if (fp_len + (size_t)k + 1 > fp_cap) {
        fp_cap = (fp_len + (size_t)k + 1) * 2;
        fp = realloc(fp, fp_cap);
    }
    memcpy(fp + fp_len, line, (size_t)k + 1);
    fp_len += (size_t)k;
    return 0;
}

static char *fingerprint(const char *dir)
{
    fp = NULL;
    fp_len = fp_cap = 0;
    nftw(dir, fp_add, 16, FTW_PHYS);
    return fp ? fp : strdup("");
}

/* ---- manifest mutations ----------------------------------------------- */

/* Set root[a][b][c] (dotted path, numbers index arrays) to the JSON value. */
static int set_path(json_t *j, const char *path, const char *value)
{
    char buf[128], *save = NULL, *tok, *next;
    json_t *v = json_loads(value, JSON_DECODE_ANY, NULL);
    if (!v)
        return -1;
    snprintf(buf, sizeof buf, "%s", path);
    tok = strtok_r(buf, ".", &save);
    while (tok) {
        next = strtok_r(NULL, ".", &save);
        if (json_is_array(j)) {
            size_t i = strtoul(tok, NULL, 10);
            if (!next)
                return json_array_set_new(j, i, v);
            j = json_array_get(j, i);
        } else {
            if (!next)
                return json_object_set_new(j, tok, v);
            j = json_object_get(j, tok);
        }
        tok = next;
    }
    return -1;
}

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    int rc = f && fputs(text, f) >= 0 ? 0 : -1;
    if (f)
        fclose(f);
    return rc;
}

/* Copy good/ to bad/, mutate its manifest (resealed when `sealed`), and
 * return ckpt_open's code. */
static int open_edited(const char *good, const char *bad, const char *path,
                       const char *value, int sealed, char *msg, size_t cap)
{
    char mp[600];
    json_t *j;
    ckpt_t *c = NULL;
    int rc;
    snprintf(mp, sizeof mp, "rm -rf '%s' && cp -r '%s' '%s'", bad, good, bad);
    if (system(mp) != 0)
        return -100;
    snprintf(mp, sizeof mp, "%s/manifest.json", bad);
    j = json_load_file(mp, 0, NULL);
    if (!j || set_path(j, path, value) != 0) {
        json_decref(j);
        return -101;
    }
    if (sealed)
        manifest_reseal(j);
    json_dump_file(j, mp, 0);
    json_decref(j);
    rc = ckpt_open(bad, &c);
    snprintf(msg, cap, "%s", ckpt_last_error());
    ckpt_close(c);
    return rc;
}

static int open_mutated(const char *good, const char *bad, const char *path,
                        const char *value, char *msg, size_t cap)
{
    return open_edited(good, bad, path, value, 1, msg, cap);
}

/* Open dir and read everything: the first error, or CKPT_OK. */
static int read_all(const char *dir)
{
    ckpt_t *c = NULL;
    int rc = ckpt_open(dir, &c);
    void *buf = NULL;
    if (rc == CKPT_OK) {
        buf = malloc(ckpt_total_bytes(c) + 1);
        rc = ckpt_read_range(c, 0, ckpt_total_bytes(c), buf);
    }
    free(buf);
    ckpt_close(c);
    return rc;
}

static int verify_dir(const char *dir)
{
    ckpt_t *c = NULL;
    int rc = ckpt_open(dir, &c);
    if (rc == CKPT_OK)
        rc = ckpt_verify(c);
    ckpt_close(c);
    return rc;
}

static void patch(const char *file, long off, const void *bytes, size_t n,
                  int whence)
{
    int fd = open(file, O_WRONLY);
    off_t at = lseek(fd, off, whence);
    if (fd < 0 || at < 0 || pwrite(fd, bytes, n, at) != (ssize_t)n)
        diag("patch %s failed", file);
    if (fd >= 0)
        close(fd);
}

static void flip_bit(const char *file, long off)
{
    unsigned char b;
    int fd = open(file, O_RDWR);
    if (fd < 0 || pread(fd, &b, 1, off) != 1)
        diag("flip %s failed", file);
    b ^= 0x10;
    if (fd >= 0 && pwrite(fd, &b, 1, off) != 1)
        diag("flip %s failed", file);
    if (fd >= 0)
        close(fd);
}

/* ---- a hand-made shard whose frame decompresses to more than declared -- */

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* Write dir/ with one u8 tensor of `declared` bytes whose single frame holds
 * `actual` bytes (with or without a content size in the zstd header). */
static void make_liar(const char *dir, size_t declared, size_t actual,
                      int with_size)
{
    unsigned char raw[4096], comp[8192], tab[48], foot[48], hdr[16];
    char path[600], man[2048], hex[17];
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    size_t csz;
    XXH64_state_t *h = XXH64_createState();
    FILE *f;

    memset(raw, 'x', sizeof raw);
    ZSTD_CCtx_setParameter(cc, ZSTD_c_contentSizeFlag, with_size);
    if (!with_size) {
        ZSTD_CCtx_setPledgedSrcSize(cc, ZSTD_CONTENTSIZE_UNKNOWN);
        {
            ZSTD_inBuffer in = {raw, actual, 0};
            ZSTD_outBuffer out = {comp, sizeof comp, 0};
            ZSTD_compressStream2(cc, &out, &in, ZSTD_e_end);
            csz = out.pos;
        }
    } else {
        csz = ZSTD_compress2(cc, comp, sizeof comp, raw, actual);
    }
    memcpy(hdr, "FTCKSHRD", 8);
    put32(hdr + 8, 1);
    put32(hdr + 12, 0);
    put64(tab, 0);
    put64(tab + 8, declared);
    put64(tab + 16, 16);
    put64(tab + 24, csz);
    put64(tab + 32, XXH64(raw, declared, 0));
    put32(tab + 40, 0);
    put32(tab + 44, 0);
    put64(foot, 16 + csz);
    put64(foot + 8, 1);
    put64(foot + 16, declared);
    put64(foot + 24, XXH64(tab, 48, 0));
    put32(foot + 32, 1);
    put32(foot + 36, 0);
    memcpy(foot + 40, "FTCKFOOT", 8);
    XXH64_reset(h, 0);
    XXH64_update(h, hdr, 16);
    XXH64_update(h, comp, csz);
    XXH64_update(h, tab, 48);
    XXH64_update(h, foot, 48);
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)XXH64_digest(h));
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/shard-0.ftsh", dir);
    f = fopen(path, "wb");
    fwrite(hdr, 1, 16, f);
    fwrite(comp, 1, csz, f);
    fwrite(tab, 1, 48, f);
    fwrite(foot, 1, 48, f);
    fclose(f);
    snprintf(man, sizeof man,
             "{\"format\":\"ftrain-ckpt\",\"version\":1,\"step\":1,"
             "\"created\":1,\"total_bytes\":%zu,\"tensors\":[{\"name\":\"b\","
             "\"dtype\":\"u8\",\"shape\":[%zu],\"offset\":0,\"nbytes\":%zu}],"
             "\"shards\":[{\"file\":\"shard-0.ftsh\",\"raw_offset\":0,"
             "\"raw_bytes\":%zu,\"file_bytes\":%zu,\"xxh64\":\"%s\","
             "\"nframes\":1}],\"record\":{}}",
             declared, declared, declared, declared, 16 + csz + 96, hex);
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    write_text(path, man);
    ZSTD_freeCCtx(cc);
    XXH64_freeState(h);
}

static int nskip;
static char skipped_names[512];
static void on_skip(void *ctx, const char *name, const char *why)
{
    (void)ctx;
    nskip++;
    strncat(skipped_names, name, sizeof skipped_names - strlen(skipped_names) - 2);
    strcat(skipped_names, " ");
    diag("skipped %s: %s", name, why);
}

int main(void)
{
    char good[600], bad[600], shard[700], path[700], msg[512], *before, *after;
    int rc;

    tap_tmpdir(root, sizeof root, "ckpt_corrupt");
    snprintf(good, sizeof good, "%s/step-00000001", root);
    snprintf(bad, sizeof bad, "%s/bad/step-00000001", root);
    sh("mkdir -p '%s/bad'", root);
    is_int(save(root, 1, 1000), CKPT_OK, "save a good checkpoint");
    is_int(verify_dir(good), CKPT_OK, "it verifies");
    snprintf(shard, sizeof shard, "%s/shard-0.ftsh", bad);

    /* Shard damage. */
    before = fingerprint(root);
    sh("rm -rf '%s' && cp -r '%s' '%s/bad/'", bad, good, root);
    {
        struct stat st;
        stat(shard, &st);
        if (truncate(shard, st.st_size - 10) != 0)
            diag("truncate failed");
    }
    is_int(read_all(bad), CKPT_ECORRUPT, "truncated shard: read fails");
    is_int(verify_dir(bad), CKPT_ECORRUPT, "truncated shard: verify fails");
    ok(strstr(ckpt_last_error(), "shard-0.ftsh") != NULL,
       "message names the file: %s", ckpt_last_error());

    sh("rm -rf '%s' && cp -r '%s' '%s/bad/'", bad, good, root);
    flip_bit(shard, 16 + 30); /* inside frame 0 */
    {
        ckpt_t *c = NULL;
        float w[10];
        int64_t ids_back[300];
        is_int(ckpt_open(bad, &c), CKPT_OK, "flipped bit: open is lazy");
        is_int(ckpt_read_range(c, 0, 40, w), CKPT_ECORRUPT,
               "flipped bit: reading frame 0 fails");
        is_int(ckpt_read_tensor(c, "ids", ids_back, sizeof ids_back), CKPT_OK,
               "flipped bit: other frames still read (only overlapping frames "
               "are touched)");
        ok(ids_back[299] == 299, "and give the right data");
        is_int(ckpt_verify(c), CKPT_ECORRUPT, "flipped bit: verify fails");
        ckpt_close(c);
    }

    sh("rm -rf '%s' && cp -r '%s' '%s/bad/'", bad, good, root);
    unlink(shard);
    is_int(read_all(bad), CKPT_EINCOMPLETE, "missing shard: read");
    is_int(verify_dir(bad), CKPT_EINCOMPLETE, "missing shard: verify");

    sh("rm -rf '%s' && cp -r '%s' '%s/bad/'", bad, good, root);
    snprintf(path, sizeof path, "%s/shard-0.ftsh", good);
    unlink(shard);
    if (symlink(path, shard) != 0)
        diag("symlink failed");
    is_int(read_all(bad), CKPT_ECORRUPT, "shard that is a symlink refused");

    sh("rm -rf '%s' && cp -r '%s' '%s/bad/'", bad, good, root);
    patch(shard, -8, "XXXXXXXX", 8, SEEK_END);
    is_int(read_all(bad), CKPT_ECORRUPT, "bad footer magic");
    ok(strstr(ckpt_last_error(), "footer magic") != NULL, "message: %s",
       ckpt_last_error());

    sh("rm -rf '%s' && cp -r '%s' '%s/bad/'", bad, good, root);
    patch(shard, 0, "NOTSHARD", 8, SEEK_SET);
    is_int(read_all(bad), CKPT_ECORRUPT, "bad header magic");

    sh("rm -rf '%s' && cp -r '%s' '%s/bad/'", bad, good, root);
    {
        unsigned char v2[4] = {2, 0, 0, 0};
        patch(shard, 8, v2, 4, SEEK_SET);
        patch(shard, -16, v2, 4, SEEK_END);
    }
    is_int(read_all(bad), CKPT_EVERSION, "shard format version 2");

    sh("rm -rf '%s' && cp -r '%s' '%s/bad/'", bad, good, root);
    {
        struct stat st;
        stat(shard, &st);
        flip_bit(shard, st.st_size - 48 - 20); /* inside the seek table */
    }
    is_int(read_all(bad), CKPT_ECORRUPT, "flipped bit in the seek table");

    /* Frames that decompress to more than declared. */
    tap_rmtree(bad);
    make_liar(bad, 100, 100, 1);
    is_int(read_all(bad), CKPT_OK, "hand-made shard reads when honest");
    is_int(verify_dir(bad), CKPT_OK, "and verifies");
    tap_rmtree(bad);
    make_liar(bad, 100, 200, 1);
    is_int(read_all(bad), CKPT_ECORRUPT, "frame declaring 200 bytes where 100 "
           "are expected");
    tap_rmtree(bad);
    make_liar(bad, 100, 3000, 0);
    is_int(read_all(bad), CKPT_ECORRUPT, "frame without a content size that "
           "decompresses to 3000 bytes where 100 are expected");
    is_int(verify_dir(bad), CKPT_ECORRUPT, "verify agrees");

    /* Manifest damage: each gives the code and names the field. */
    {
        static const struct {
            const char *path, *value, *field;
            int want;
        } cases[] = {
            {"step", "\"12\"", "step", CKPT_EFORMAT},
            {"step", "-1", "step", CKPT_EFORMAT},
            {"step", "2", "step", CKPT_EFORMAT}, /* dir is step-00000001 */
            {"created", "1.5", "created", CKPT_EFORMAT},
            {"total_bytes", "-5", "total_bytes", CKPT_EFORMAT},
            {"total_bytes", "1152921504606846976", "total_bytes", CKPT_EFORMAT},
            {"total_bytes", "null", "total_bytes", CKPT_EFORMAT},
            {"version", "2", "version", CKPT_EVERSION},
            {"version", "\"1\"", "version", CKPT_EFORMAT},
            {"format", "\"other\"", "format", CKPT_EFORMAT},
            {"tensors", "{}", "tensors", CKPT_EFORMAT},
            {"tensors.0", "7", "tensors[0]", CKPT_EFORMAT},
            {"tensors.0.name", "\"\"", "tensors[0].name", CKPT_EFORMAT},
            {"tensors.0.name", "\"w\\u001b[2J\"", "tensors[0].name",
             CKPT_EFORMAT},
            {"tensors.0.name", "\"ids\"", "tensors[1].name", CKPT_EFORMAT},
            {"tensors.0.dtype", "\"f16\"", "tensors[0].dtype", CKPT_EFORMAT},
            {"tensors.0.shape", "\"x\"", "tensors[0].shape", CKPT_EFORMAT},
            {"tensors.0.shape", "[1,2,3,4,5]", "tensors[0].shape", CKPT_EFORMAT},
            {"tensors.0.shape", "[-20000]", "tensors[0].shape", CKPT_EFORMAT},
            {"tensors.0.shape", "[4611686018427387904, 4]", "tensors[0].shape",
             CKPT_EFORMAT},
            {"tensors.0.nbytes", "79996", "tensors[0].nbytes", CKPT_EFORMAT},
            {"tensors.0.nbytes", "-80000", "tensors[0].nbytes", CKPT_EFORMAT},
            {"tensors.1.offset", "8", "tensors[1].offset", CKPT_EFORMAT},
            {"tensors.1.offset", "9000000", "tensors[1]", CKPT_EFORMAT},
            {"tensors.1.offset", "9007199254740992", "tensors[1]", CKPT_EFORMAT},
            {"shards", "[]", "shards", CKPT_EFORMAT},
            {"shards.0.file", "\"../shard-0.ftsh\"", "shards[0].file",
             CKPT_EFORMAT},
            {"shards.0.file", "\"x/shard-0.ftsh\"", "shards[0].file",
             CKPT_EFORMAT},
            {"shards.0.file", "\"/etc/passwd\"", "shards[0].file", CKPT_EFORMAT},
            {"shards.0.file", "\"shard-1.ftsh\"", "shards[0].file",
             CKPT_EFORMAT},
            {"shards.0.file", "\"..\"", "shards[0].file", CKPT_EFORMAT},
            {"shards.0.file", "3", "shards[0].file", CKPT_EFORMAT},
            {"shards.0.raw_offset", "1", "shards[0].raw_offset", CKPT_EFORMAT},
            {"shards.0.raw_bytes", "80001", "total_bytes", CKPT_EFORMAT},
            {"shards.0.raw_bytes", "-1", "shards[0].raw_bytes", CKPT_EFORMAT},
            {"shards.0.file_bytes", "3", "shards[0].file_bytes", CKPT_EFORMAT},
            {"shards.0.nframes", "0", "shards[0].nframes", CKPT_EFORMAT},
            {"shards.0.nframes", "4294967296", "shards[0].nframes",
             CKPT_EFORMAT},
            {"shards.0.xxh64", "\"xyz\"", "shards[0].xxh64", CKPT_EFORMAT},
            {"shards.0.xxh64", "12", "shards[0].xxh64", CKPT_EFORMAT},
            {"options", "[]", "options", CKPT_EFORMAT},
            {"record", "[1]", "record", CKPT_EFORMAT},
            {"record", "\"{}\"", "record", CKPT_EFORMAT},
        };
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
            rc = open_mutated(good, bad, cases[i].path, cases[i].value, msg,
                              sizeof msg);
            ok(rc == cases[i].want && strstr(msg, cases[i].field) != NULL,
               "manifest %s = %s: %s (%s)", cases[i].path, cases[i].value,
               ckpt_strerror(rc), msg);
        }
    }
    /* Damage that the manifest alone cannot show: caught when reading. */
    rc = open_mutated(good, bad, "shards.0.file_bytes", "999999", msg,
                      sizeof msg);
    is_int(rc, CKPT_OK, "file_bytes that is merely wrong opens");
    is_int(read_all(bad), CKPT_ECORRUPT, "and fails on read");
    rc = open_mutated(good, bad, "shards.0.xxh64", "\"0123456789abcdef\"", msg,
                      sizeof msg);
    is_int(read_all(bad), CKPT_OK, "wrong file checksum: frames still read");
    is_int(verify_dir(bad), CKPT_ECORRUPT, "but verify catches it");

    /* The manifest's own checksum: any changed value without a matching
     * manifest_xxh64 is corrupt; layout changes are not. */
    {
        static const struct {
            const char *path, *value;
        } edits[] = {
            {"record.epoch", "4"},       /* the data cursor's epoch */
            {"record.extra", "1"},       /* an added key */
            {"step", "1"},               /* the same value: still matches */
            {"shards.0.file_bytes", "999999"},
            {"tensors.1.name", "\"idz\""},
            {"created", "2"},
        };
        for (size_t i = 0; i < sizeof edits / sizeof *edits; i++) {
            int same = strcmp(edits[i].path, "step") == 0;
            rc = open_edited(good, bad, edits[i].path, edits[i].value, 0, msg,
                             sizeof msg);
            ok(same ? rc == CKPT_OK
                    : rc == CKPT_ECORRUPT && strstr(msg, "manifest_xxh64") &&
                          strstr(msg, "manifest.json"),
               "unsealed edit %s = %s: %s (%s)", edits[i].path, edits[i].value,
               ckpt_strerror(rc), msg);
        }
        rc = open_edited(good, bad, "manifest_xxh64", "\"0123456789ABCDEF\"", 0,
                         msg, sizeof msg);
        ok(rc == CKPT_EFORMAT && strstr(msg, "manifest_xxh64"),
           "manifest_xxh64 in capitals: %s (%s)", ckpt_strerror(rc), msg);
        rc = open_edited(good, bad, "manifest_xxh64", "7", 0, msg, sizeof msg);
        ok(rc == CKPT_EFORMAT && strstr(msg, "manifest_xxh64"),
           "manifest_xxh64 a number: %s (%s)", ckpt_strerror(rc), msg);
        /* Reformatted (sorted keys, 4-space indent): same values, opens. */
        {
            json_t *j;
            snprintf(path, sizeof path, "%s/manifest.json", bad);
            sh("rm -rf '%s' && cp -r '%s' '%s/bad/'", bad, good, root);
            j = json_load_file(path, 0, NULL);
            json_dump_file(j, path, JSON_INDENT(4) | JSON_SORT_KEYS);
            json_decref(j);
            is_int(read_all(bad), CKPT_OK, "manifest re-indented with sorted "
                   "keys: still opens and reads");
            /* An older writer's manifest, without the field: opens. */
            j = json_load_file(path, 0, NULL);
            json_object_del(j, "manifest_xxh64");
            json_dump_file(j, path, JSON_INDENT(1));
            json_decref(j);
            is_int(verify_dir(bad), CKPT_OK, "manifest without manifest_xxh64 "
                   "(an older writer): opens and verifies");
        }
    }
    {
        static const char *texts[] = {
            "", "{", "[]", "nul", "{\"format\":\"ftrain-ckpt\",\"format\":1}",
            "{\"format\":\"ftrain-ckpt\",\"version\":1,\"step\":"
            "99999999999999999999999}",
        };
        for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
            ckpt_t *c = NULL;
            sh("rm -rf '%s' && cp -r '%s' '%s/bad/'", bad, good, root);
                    snprintf(path, sizeof path, "%s/manifest.json", bad);
            write_text(path, texts[i]);
            is_int(ckpt_open(bad, &c), CKPT_EFORMAT, "manifest text '%.30s'",
                   texts[i]);
            ckpt_close(c);
        }
        sh("rm -rf '%s' && cp -r '%s' '%s/bad/'", bad, good, root);
            snprintf(path, sizeof path, "%s/manifest.json", bad);
        unlink(path);
        is_int(read_all(bad), CKPT_EINCOMPLETE, "no manifest: incomplete");
    }
    snprintf(path, sizeof path, "%s/bad", root);
    tap_rmtree(path);
    after = fingerprint(good);
    free(before);
    before = fingerprint(good);
    ok(strcmp(before, after) == 0, "good checkpoint untouched");
    free(after);
    free(before);

    /* latest_good falls back past corrupt ones; readers write nothing. */
    {
        char out[1024], want[700], s2[700];
        is_int(save(root, 2, 4096), CKPT_OK, "save step 2");
        is_int(save(root, 3, 4096), CKPT_OK, "save step 3");
        snprintf(s2, sizeof s2, "%s/step-00000003/shard-0.ftsh", root);
        flip_bit(s2, 100);
        before = fingerprint(root);
        nskip = 0;
        skipped_names[0] = '\0';
        is_int(ckpt_latest_good(root, out, sizeof out, on_skip, NULL), CKPT_OK,
               "latest_good with the newest corrupt");
        snprintf(want, sizeof want, "%s/step-00000002", root);
        is_str(out, want, "falls back to step 2");
        ok(nskip == 1 && strstr(skipped_names, "step-00000003"),
           "step 3 reported as skipped");
        {
            ckpt_entry_t *v = NULL;
            size_t n = 0;
            is_int(ckpt_list(root, 1, &v, &n), CKPT_OK, "list with verify");
            ok(n == 3 && v[2].status == CKPT_ST_CORRUPT && v[2].is_latest &&
                   v[1].status == CKPT_ST_COMMITTED && strlen(v[2].why) > 0,
               "list: step 3 corrupt (and LATEST), step 2 committed");
            free(v);
        }
        snprintf(s2, sizeof s2, "%s/step-00000002/shard-0.ftsh", root);
        if (truncate(s2, 100) != 0)
            diag("truncate failed");
        snprintf(s2, sizeof s2, "%s/step-00000001/manifest.json", root);
        write_text(s2, "{\"format\":7}");
        after = fingerprint(root);
        free(before);
        before = after;
        nskip = 0;
        is_int(ckpt_latest_good(root, out, sizeof out, on_skip, NULL),
               CKPT_ECORRUPT, "none good: ECORRUPT");
        is_int(nskip, 3, "all three reported");
        after = fingerprint(root);
        ok(strcmp(before, after) == 0, "reading corrupt checkpoints wrote "
           "nothing");
        free(before);
        free(after);
    }

    tap_rmtree(root);
    return done_testing();
}

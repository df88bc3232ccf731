/*
 * ckpt_fuzz.c - randomly damaged checkpoints and archives never crash the
 * reader and never yield wrong bytes.
 *
 * Three small checkpoints (byte-plane frames at level 1, stored frames at
 * level 0, plain zstd frames at level 3 without shuffle; 4 KiB frames, so
 * each shard has dozens) are damaged thousands of times, each time in a
 * fresh copy: bits flipped, bytes overwritten, inserted, deleted or copied
 * from elsewhere in the file, files truncated or extended; manifests
 * damaged as text, or as JSON (a value replaced by a hostile one, a key
 * removed or added), half of those re-sealed with a matching
 * manifest_xxh64 as a forger would.  Each damaged checkpoint is opened,
 * read whole, read by tensor and by random ranges (with 1 and 3 decoding
 * threads), verified, and listed.  The properties:
 *
 *   1. every read that reports success returns exactly the original bytes;
 *   2. a checkpoint whose shard bytes changed never verifies;
 *   3. every failure has a known error code and a message;
 *   4. nothing crashes (under `make SANITIZE=1 check`: no ASan/UBSan report).
 *
 * Exported archives (.tar and .tar.zst) are damaged the same way and
 * imported: an import either fails and leaves its root empty, or yields a
 * checkpoint identical to the original; nothing appears outside the root.
 *
 * FTRAIN_FUZZ_ITERS (default 1500 per checkpoint, 400 per archive) and
 * FTRAIN_FUZZ_SEED (default 1) make a run longer or different; the seed is
 * printed so that a failure can be replayed.
 */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
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

#define NFIX 3
#define NT 4

static char root[256];
static uint64_t rng_state;

static uint64_t rnd(void)
{
    uint64_t x = (rng_state += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static size_t below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

/* ---- files ------------------------------------------------------------ */

typedef struct {
    unsigned char *p;
    size_t n;
} blob_t;

static int slurp(const char *path, blob_t *b)
{
    FILE *f = fopen(path, "rb");
    long n;
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    b->p = malloc((size_t)n + 1);
    b->n = (size_t)n;
    if (!b->p || fread(b->p, 1, b->n, f) != b->n) {
        fclose(f);
        return -1;
    }
    b->p[b->n] = 0;
    fclose(f);
    return 0;
}

static int spit(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    int rc = f && fwrite(p, 1, n, f) == n ? 0 : -1;
    if (f && fclose(f) != 0)
        rc = -1;
    return rc;
}

/* Names in dir other than "." and "..": how many, and the first in *first. */
static int count_entries(const char *dir, char *first, size_t cap)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    if (first)
        first[0] = 0;
    if (!d)
        return -1;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (n++ == 0 && first)
            snprintf(first, cap, "%s", e->d_name);
    }
    closedir(d);
    return n;
}

/* ---- the fixtures ----------------------------------------------------- */

typedef struct {
    uint64_t step;
    char dir[400];
    blob_t manifest, shard;
    unsigned char *flat; /* the flat space as the good checkpoint reads */
    uint64_t total;
} fixture_t;

static fixture_t fx[NFIX];
static float w[6000];
static int64_t ids[500];
static unsigned char text[3000];
static double dbl[700];

static int make_fixture(fixture_t *f, uint64_t step, int level, int shuffle)
{
    ckpt_tensor_t t[NT];
    ckpt_opts_t o;
    ckpt_coll_t coll = SOLO_COLL;
    ckpt_t *c = NULL;
    char path[600];
    int rc;

    for (size_t i = 0; i < sizeof w / sizeof *w; i++) /* weight-like floats */
        w[i] = (float)(((double)(rnd() >> 48) + (double)(rnd() >> 48) -
                        65536.0) / 65536.0 * 0.05);
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++)
        ids[i] = (int64_t)(i * 7 + step) - 100;
    for (size_t i = 0; i < sizeof text; i++)
        text[i] = (unsigned char)"the quick brown fox "[i % 20];
    for (size_t i = 0; i < sizeof dbl / sizeof *dbl; i++)
        dbl[i] = (double)i / 3.0;
    memset(t, 0, sizeof t);
    snprintf(t[0].name, CKPT_NAME_MAX, "model.w");
    t[0].dtype = CKPT_F32, t[0].ndim = 2, t[0].shape[0] = 60,
    t[0].shape[1] = 100, t[0].data = w;
    snprintf(t[1].name, CKPT_NAME_MAX, "sampler.ids");
    t[1].dtype = CKPT_I64, t[1].ndim = 1, t[1].shape[0] = 500, t[1].data = ids;
    snprintf(t[2].name, CKPT_NAME_MAX, "notes");
    t[2].dtype = CKPT_U8, t[2].ndim = 1, t[2].shape[0] = 3000, t[2].data = text;
    snprintf(t[3].name, CKPT_NAME_MAX, "optim.d");
    t[3].dtype = CKPT_F64, t[3].ndim = 1, t[3].shape[0] = 700, t[3].data = dbl;
    ckpt_opts_default(&o);
    o.level = level;
    o.shuffle = shuffle;
    o.frame_bytes = 4096;
    o.threads = 2;
    o.fsync = 0;
    o.direct = 0;
    o.adapt = 0;
    rc = ckpt_save(root, step, t, NT,
                   "{\"epoch\":2,\"cursor\":1234,\"rng\":\"00ff00ff00ff00ff\","
                   "\"lr\":0.001}", &o, &coll);
    if (rc != CKPT_OK)
        return rc;
    f->step = step;
    snprintf(f->dir, sizeof f->dir, "%s/step-%08llu", root,
             (unsigned long long)step);
    snprintf(path, sizeof path, "%s/manifest.json", f->dir);
    if (slurp(path, &f->manifest) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/shard-0.ftsh", f->dir);
    if (slurp(path, &f->shard) != 0)
        return -1;
    if ((rc = ckpt_open(f->dir, &c)) != CKPT_OK)
        return rc;
    f->total = ckpt_total_bytes(c);
    f->flat = malloc(f->total);
    rc = f->flat ? ckpt_read_range(c, 0, f->total, f->flat) : CKPT_ENOMEM;
    ckpt_close(c);
    return rc;
}

/* ---- damage ----------------------------------------------------------- */

/* Apply one random byte-level change to b (reallocated as needed). */
static void damage_bytes(blob_t *b)
{
    size_t n = b->n, at = below(n + 1), len;
    unsigned char *p;
    switch (below(8)) {
    case 0: /* flip 1-3 bits */
    case 1:
        for (int k = 1 + (int)below(3); k > 0 && n; k--)
            b->p[below(n)] ^= (unsigned char)(1u << below(8));
        break;
    case 2: /* overwrite 1-64 bytes with random ones */
        len = 1 + below(64);
        for (size_t i = at; i < at + len && i < n; i++)
            b->p[i] = (unsigned char)rnd();
        break;
    case 3: /* truncate */
        b->n = below(n);
        break;
    case 4: /* insert 1-64 random bytes */
    case 5: /* append 1-4096 random bytes */
        len = below(2) ? 1 + below(64) : 1 + below(4096);
        if (below(2) == 0 || n == 0)
            at = n;
        p = realloc(b->p, n + len + 1);
        if (!p)
            return;
        memmove(p + at + len, p + at, n - at);
        for (size_t i = 0; i < len; i++)
            p[at + i] = (unsigned char)rnd();
        b->p = p;
        b->n = n + len;
        break;
    case 6: /* delete 1-64 bytes */
        len = 1 + below(64);
        if (at + len > n)
            len = n - at;
        memmove(b->p + at, b->p + at + len, n - at - len);
        b->n = n - len;
        break;
    default: { /* copy a chunk from elsewhere (another frame, the table) */
        size_t from = below(n);
        len = 1 + below(512);
        if (from + len > n)
            len = n - from;
        if (at + len > n)
            len = n - at;
        memmove(b->p + at, b->p + from, len);
        break;
    }
    }
}

/* Every value node of j, depth first, with its parent and key/index. */
typedef struct {
    json_t *parent;
    const char *key; /* NULL: array element */
    size_t index;
} slot_t;

static void collect(json_t *j, slot_t *s, size_t *n, size_t cap)
{
    const char *k;
    json_t *v;
    size_t i;
    if (json_is_object(j)) {
        json_object_foreach(j, k, v) {
            if (*n < cap)
                s[(*n)++] = (slot_t){j, k, 0};
            collect(v, s, n, cap);
        }
    } else if (json_is_array(j)) {
        json_array_foreach(j, i, v) {
            if (*n < cap)
                s[(*n)++] = (slot_t){j, NULL, i};
            collect(v, s, n, cap);
        }
    }
}

static json_t *hostile_value(void)
{
    static const char *vals[] = {
        "0", "-1", "1", "7", "4096", "9007199254740992", "9007199254740993",
        "9223372036854775807", "-9223372036854775808", "18446744073709551615",
        "1e300", "0.5", "-0.0", "\"\"", "\"x\"", "\"../shard-0.ftsh\"",
        "\"shard-0.ftsh\"", "\"f32\"", "\"u8\"", "\"0000000000000000\"",
        "null", "true", "false", "[]", "{}", "[1,2,3,4,5,6]",
        "[4294967296,4294967296]", "[0]", "\"\\u0000\"",
    };
    return json_loads(vals[below(sizeof vals / sizeof *vals)], JSON_DECODE_ANY,
                      NULL);
}

/* Change one JSON value of the manifest in b; re-seal when asked. */
static void damage_json(blob_t *b, int sealed)
{
    json_t *j = json_loadb((const char *)b->p, b->n, 0, NULL);
    slot_t s[512];
    size_t n = 0;
    char *out;
    if (!j)
        return;
    collect(j, s, &n, 512);
    if (n) {
        slot_t *t = &s[below(n)];
        int op = (int)below(6);
        if (op == 0 && t->key)
            json_object_del(t->parent, t->key);
        else if (op == 1 && t->key)
            json_object_set_new(t->parent, "extra", hostile_value());
        else if (op == 2 && !t->key)
            json_array_remove(t->parent, t->index);
        else if (t->key)
            json_object_set_new(t->parent, t->key, hostile_value());
        else
            json_array_set_new(t->parent, t->index, hostile_value());
    }
    if (sealed)
        manifest_reseal(j);
    out = json_dumps(j, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    json_decref(j);
    if (!out)
        return;
    free(b->p);
    b->p = (unsigned char *)out;
    b->n = strlen(out);
}

/* ---- reading a damaged checkpoint ------------------------------------- */

typedef struct {
    int runs, opened, read_ok, verified, wrong, unverified_change, bad_code;
    char first_wrong[512];
} tally_t;

static int known_code(int rc)
{
    return rc == CKPT_EINVAL || rc == CKPT_EIO || rc == CKPT_ENOMEM ||
           rc == CKPT_EFORMAT || rc == CKPT_ECORRUPT || rc == CKPT_EINCOMPLETE ||
           rc == CKPT_EVERSION || rc == CKPT_ENOTFOUND;
}

static void note_rc(tally_t *t, int rc, const char *what)
{
    const char *m = ckpt_last_error();
    if (rc == CKPT_OK)
        return;
    if (!known_code(rc) || !m || !*m) {
        if (t->bad_code++ < 3)
            diag("%s: code %d message '%s'", what, rc, m ? m : "(null)");
    }
}

static void wrong(tally_t *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void wrong(tally_t *t, const char *fmt, ...)
{
    va_list ap;
    if (t->wrong++ == 0) {
        va_start(ap, fmt);
        vsnprintf(t->first_wrong, sizeof t->first_wrong, fmt, ap);
        va_end(ap);
    }
}

/* Open, read and verify dir; check the properties against f.  shard_changed:
 * the shard file differs from the good one. */
static void exercise(const fixture_t *f, const char *dir, int shard_changed,
                     int iter, tally_t *t)
{
    ckpt_t *c = NULL;
    unsigned char *buf;
    uint64_t total;
    int rc;

    t->runs++;
    rc = ckpt_open(dir, &c);
    note_rc(t, rc, "open");
    if (rc != CKPT_OK)
        return;
    t->opened++;
    ckpt_set_read_threads(c, iter % 2 ? 3 : 1);
    total = ckpt_total_bytes(c);
    buf = malloc(f->total + 1);
    if (!buf) {
        ckpt_close(c);
        return;
    }
    /* The whole space, when it is no larger than the original. */
    if (total <= f->total) {
        rc = ckpt_read_range(c, 0, total, buf);
        note_rc(t, rc, "read all");
        if (rc == CKPT_OK) {
            t->read_ok++;
            if (total != f->total)
                wrong(t, "iteration %d: read of %llu bytes succeeded, the "
                      "shard holds %llu", iter, (unsigned long long)total,
                      (unsigned long long)f->total);
            else if (memcmp(buf, f->flat, total) != 0)
                wrong(t, "iteration %d: read all returned other bytes", iter);
        }
    }
    /* Each tensor as the (possibly forged) manifest places it. */
    for (size_t i = 0; i < ckpt_num_tensors(c); i++) {
        const ckpt_tensor_t *x = ckpt_tensor_at(c, i);
        if (x->offset + x->nbytes > f->total)
            continue;
        rc = ckpt_read_tensor(c, x->name, buf, f->total);
        note_rc(t, rc, "read tensor");
        if (rc == CKPT_OK && memcmp(buf, f->flat + x->offset, x->nbytes) != 0)
            wrong(t, "iteration %d: tensor %s returned other bytes", iter,
                  x->name);
    }
    /* Random ranges. */
    for (int k = 0; k < 3 && total; k++) {
        uint64_t a = below(total), len = 1 + below(total - a);
        if (a + len > f->total)
            continue;
        rc = ckpt_read_range(c, a, len, buf);
        note_rc(t, rc, "read range");
        if (rc == CKPT_OK && memcmp(buf, f->flat + a, len) != 0)
            wrong(t, "iteration %d: range [%llu, +%llu) returned other bytes",
                  iter, (unsigned long long)a, (unsigned long long)len);
    }
    rc = ckpt_verify(c);
    note_rc(t, rc, "verify");
    if (rc == CKPT_OK) {
        t->verified++;
        if (shard_changed && t->unverified_change++ == 0)
            diag("iteration %d: a changed shard verified", iter);
    }
    free(buf);
    ckpt_close(c);
}

/* ---- archives --------------------------------------------------------- */

typedef struct {
    int runs, imported, identical, leftover, outside, wrong, bad_code;
} atally_t;

static void fuzz_archive(const fixture_t *f, const char *name, int iters,
                         const char *scratch)
{
    char arc[700], bad[700], imp[700], out[1024], first[256];
    blob_t good, b;
    atally_t t;
    int rc;

    memset(&t, 0, sizeof t);
    snprintf(arc, sizeof arc, "%s/%s", scratch, name);
    rc = ckpt_export(f->dir, arc, 1);
    is_int(rc, CKPT_OK, "export %s", name);
    if (rc != CKPT_OK || slurp(arc, &good) != 0)
        return;
    snprintf(bad, sizeof bad, "%s/bad-%s", scratch, name);
    snprintf(imp, sizeof imp, "%s/imp", scratch);
    for (int it = 0; it < iters; it++) {
        b.n = good.n;
        b.p = malloc(good.n + 1);
        memcpy(b.p, good.p, good.n);
        for (int k = 1 + (int)below(2); k > 0; k--)
            damage_bytes(&b);
        spit(bad, b.p, b.n);
        free(b.p);
        tap_rmtree(imp);
        mkdir(imp, 0755);
        t.runs++;
        rc = ckpt_import(bad, imp, out, sizeof out);
        if (rc == CKPT_OK) {
            ckpt_t *c = NULL;
            unsigned char *buf = malloc(f->total);
            t.imported++;
            if (buf && ckpt_open(out, &c) == CKPT_OK &&
                ckpt_total_bytes(c) == f->total && ckpt_verify(c) == CKPT_OK &&
                ckpt_read_range(c, 0, f->total, buf) == CKPT_OK &&
                memcmp(buf, f->flat, f->total) == 0)
                t.identical++;
            else if (t.wrong++ == 0)
                diag("%s iteration %d: an import succeeded with other "
                     "content", name, it);
            ckpt_close(c);
            free(buf);
        } else {
            const char *m = ckpt_last_error();
            if ((rc != CKPT_EARCHIVE && rc != CKPT_ECORRUPT &&
                 rc != CKPT_EFORMAT && rc != CKPT_EINCOMPLETE &&
                 rc != CKPT_EIO && rc != CKPT_EVERSION && rc != CKPT_EINVAL) ||
                !m || !*m) {
                if (t.bad_code++ < 3)
                    diag("%s iteration %d: code %d message '%s'", name, it, rc,
                         m ? m : "(null)");
            }
            if (count_entries(imp, first, sizeof first) != 0 &&
                t.leftover++ < 3)
                diag("%s iteration %d: failed import left '%s' in the root",
                     name, it, first);
        }
        /* The scratch dir holds exactly: the two archives, bad copies, imp. */
        if (count_entries(scratch, NULL, 0) > 5 && t.outside++ < 3)
            diag("%s iteration %d: something appeared beside the root", name,
                 it);
    }
    diag("%s: %d damaged archives, %d imported (%d identical)", name, t.runs,
         t.imported, t.identical);
    ok(t.wrong == 0, "%s: no damaged archive imported as a different "
       "checkpoint", name);
    ok(t.leftover == 0, "%s: every failed import left its root empty", name);
    ok(t.outside == 0, "%s: nothing written beside the import root", name);
    ok(t.bad_code == 0, "%s: every failure has a known code and a message",
       name);
    free(good.p);
}

int main(void)
{
    char bad_root[400], bad_dir[600], path[700], scratch[400];
    const char *env;
    int iters = 1500, aiters = 400;
    uint64_t seed = 1;

    if ((env = getenv("FTRAIN_FUZZ_ITERS")) && atoi(env) > 0)
        iters = atoi(env), aiters = iters / 4 + 1;
    if ((env = getenv("FTRAIN_FUZZ_SEED")))
        seed = strtoull(env, NULL, 10);
    rng_state = seed * 0x2545F4914F6CDD1Dull;
    diag("seed %llu (FTRAIN_FUZZ_SEED), %d iterations per checkpoint "
         "(FTRAIN_FUZZ_ITERS)", (unsigned long long)seed, iters);

    tap_tmpdir(root, sizeof root, "ckpt_fuzz");
    is_int(make_fixture(&fx[0], 1, 1, 1), CKPT_OK,
           "fixture 1: level 1, byte planes, 4 KiB frames");
    is_int(make_fixture(&fx[1], 2, 0, 1), CKPT_OK,
           "fixture 2: level 0, stored frames");
    is_int(make_fixture(&fx[2], 3, 3, 0), CKPT_OK,
           "fixture 3: level 3, plain zstd frames");
    snprintf(bad_root, sizeof bad_root, "%s/bad", root);
    mkdir(bad_root, 0755);

    for (int k = 0; k < NFIX; k++) {
        fixture_t *f = &fx[k];
        tally_t ts, tm;
        if (!f->flat)
            continue;
        memset(&ts, 0, sizeof ts);
        memset(&tm, 0, sizeof tm);
        snprintf(bad_dir, sizeof bad_dir, "%s/step-%08llu", bad_root,
                 (unsigned long long)f->step);
        for (int it = 0; it < iters; it++) {
            blob_t m = {malloc(f->manifest.n + 1), f->manifest.n},
                   s = {malloc(f->shard.n + 1), f->shard.n};
            int on_shard = below(10) < 6, changed;
            memcpy(m.p, f->manifest.p, m.n);
            memcpy(s.p, f->shard.p, s.n);
            if (on_shard) {
                for (int r = 1 + (int)below(2); r > 0; r--)
                    damage_bytes(&s);
            } else if (below(3) == 0) {
                damage_bytes(&m);
            } else {
                damage_json(&m, (int)below(2));
            }
            changed = s.n != f->shard.n || memcmp(s.p, f->shard.p, s.n) != 0;
            tap_rmtree(bad_dir);
            mkdir(bad_dir, 0755);
            snprintf(path, sizeof path, "%s/manifest.json", bad_dir);
            spit(path, m.p, m.n);
            snprintf(path, sizeof path, "%s/shard-0.ftsh", bad_dir);
            spit(path, s.p, s.n);
            exercise(f, bad_dir, changed, it, on_shard ? &ts : &tm);
            if (it % 97 == 0) { /* the root-level readers too */
                ckpt_entry_t *v = NULL;
                size_t n = 0;
                char out[1024];
                ckpt_list(bad_root, 1, &v, &n);
                free(v);
                ckpt_latest_good(bad_root, out, sizeof out, NULL, NULL);
            }
            free(m.p);
            free(s.p);
        }
        diag("fixture %d, shard damage: %d runs, %d opened, %d read whole, "
             "%d verified", k + 1, ts.runs, ts.opened, ts.read_ok,
             ts.verified);
        diag("fixture %d, manifest damage: %d runs, %d opened, %d read whole, "
             "%d verified", k + 1, tm.runs, tm.opened, tm.read_ok,
             tm.verified);
        ok(ts.wrong == 0, "fixture %d: no read of a damaged shard returned "
           "wrong bytes%s%s", k + 1, ts.wrong ? ": " : "", ts.first_wrong);
        ok(tm.wrong == 0, "fixture %d: no read under a damaged or forged "
           "manifest returned wrong bytes%s%s", k + 1, tm.wrong ? ": " : "",
           tm.first_wrong);
        ok(ts.unverified_change == 0, "fixture %d: no changed shard verified",
           k + 1);
        ok(ts.bad_code + tm.bad_code == 0, "fixture %d: every failure has a "
           "known code and a message", k + 1);
        ok(ts.opened > 0 && ts.read_ok < ts.runs, "fixture %d: the damage "
           "reached the frames (%d of %d shard runs opened, %d read whole)",
           k + 1, ts.opened, ts.runs, ts.read_ok);
    }

    snprintf(scratch, sizeof scratch, "%s/arc", root);
    mkdir(scratch, 0755);
    fuzz_archive(&fx[0], "a.tar", aiters, scratch);
    fuzz_archive(&fx[0], "a.tar.zst", aiters, scratch);

    for (int k = 0; k < NFIX; k++) {
        free(fx[k].manifest.p);
        free(fx[k].shard.p);
        free(fx[k].flat);
    }
    tap_rmtree(root);
    return done_testing();
}

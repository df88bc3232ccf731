/*
 * ckpt_format.c - round trips through the checkpoint library: layout, saves
 * by 1..5 simulated ranks (threads sharing an in-process collective), reads
 * of every tensor and of random ranges, loads by other world sizes, shuffle on
 * and off, frame sizes down to a few bytes so tensors span many frames, a
 * rank failing phase one, EEXIST on re-save, and list/latest_good/prune;
 * the size fields of ckpt_opts_t and ckpt_entry_t, and a size the library
 * does not know refused with a message naming it.
 */
#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ftrain/ckpt.h"
#include "tap.h"
#include "../ckpt/manifest.h"

/* ---- an in-process collective over threads ---------------------------- */

typedef struct {
    pthread_barrier_t bar;
    unsigned char buf[1 << 16];
    int size;
} shared_t;

typedef struct {
    shared_t *sh;
    int rank;
    const char *root;
    uint64_t step;
    ckpt_tensor_t t[8];
    size_t n;
    const char *record;
    const ckpt_opts_t *opts;
    int fail;  /* simulate a phase-one failure on this rank */
    int rc;
} rank_t;

static int allgather(void *ctx, const void *send, void *recv, size_t bytes)
{
    rank_t *r = ctx;
    if (bytes * (size_t)r->sh->size > sizeof r->sh->buf)
        return -1;
    memcpy(r->sh->buf + (size_t)r->rank * bytes, send, bytes);
    pthread_barrier_wait(&r->sh->bar);
    memcpy(recv, r->sh->buf, bytes * (size_t)r->sh->size);
    pthread_barrier_wait(&r->sh->bar);
    return 0;
}

static int bcast(void *ctx, void *buf, size_t bytes, int root)
{
    rank_t *r = ctx;
    if (r->rank == root)
        memcpy(r->sh->buf, buf, bytes);
    pthread_barrier_wait(&r->sh->bar);
    if (r->rank != root)
        memcpy(buf, r->sh->buf, bytes);
    pthread_barrier_wait(&r->sh->bar);
    return 0;
}

static void *rank_main(void *arg)
{
    rank_t *r = arg;
    ckpt_coll_t coll = {r, r->rank, r->sh->size, allgather, bcast};
    if (r->fail) {
        ckpt_shard_info_t info;
        uint64_t total;
        memset(&info, 0, sizeof info);
        ckpt_layout(r->t, r->n, &total);
        r->rc = ckpt_commit(r->root, r->step, r->t, r->n, r->record, r->opts,
                            CKPT_EIO, &info, &coll);
    } else {
        r->rc = ckpt_save(r->root, r->step, r->t, r->n, r->record, r->opts,
                          &coll);
    }
    return NULL;
}

/* Save with `world` threads; rcs[r] gets each rank's result.  Each rank gets
 * its own copy of the tensor array, as separate processes would. */
static void save_world(const char *root, uint64_t step, const ckpt_tensor_t *t,
                       size_t n, const char *record, const ckpt_opts_t *o,
                       int world, int fail_rank, int *rcs)
{
    shared_t *sh = calloc(1, sizeof *sh);
    rank_t *ranks = calloc((size_t)world, sizeof *ranks);
    pthread_t *th = calloc((size_t)world, sizeof *th);
    sh->size = world;
    pthread_barrier_init(&sh->bar, NULL, (unsigned)world);
    for (int r = 0; r < world; r++) {
        ranks[r].sh = sh;
        ranks[r].rank = r;
        ranks[r].root = root;
        ranks[r].step = step;
        memcpy(ranks[r].t, t, n * sizeof *t);
        ranks[r].n = n;
        ranks[r].record = record;
        ranks[r].opts = o;
        ranks[r].fail = r == fail_rank;
        pthread_create(&th[r], NULL, rank_main, &ranks[r]);
    }
    for (int r = 0; r < world; r++) {
        pthread_join(th[r], NULL);
        rcs[r] = ranks[r].rc;
    }
    pthread_barrier_destroy(&sh->bar);
    free(sh);
    free(ranks);
    free(th);
}

static int all_equal(const int *rcs, int world, int want)
{
    for (int r = 0; r < world; r++)
        if (rcs[r] != want)
            return 0;
    return 1;
}

/* ---- test state ------------------------------------------------------- */

static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

enum { NT = 5 };
static float w1[3001];
static int64_t counts[517];
static unsigned char bytes[13];
static double dbl[7];
static int32_t i32s[5][3];

static void make_state(ckpt_tensor_t *t, uint64_t seed)
{
    rng = seed * 2654435761ull + 1;
    for (size_t i = 0; i < 3001; i++)
        w1[i] = (float)((double)(next_rand() >> 40) / 16777216.0 - 0.5) * 0.1f;
    for (size_t i = 0; i < 517; i++)
        counts[i] = (int64_t)(next_rand() % 1000) - 500;
    for (size_t i = 0; i < 13; i++)
        bytes[i] = (unsigned char)next_rand();
    for (size_t i = 0; i < 7; i++)
        dbl[i] = (double)next_rand() / 3.0;
    for (size_t i = 0; i < 15; i++)
        i32s[i / 3][i % 3] = (int32_t)next_rand();
    memset(t, 0, NT * sizeof *t);
    snprintf(t[0].name, CKPT_NAME_MAX, "model.w1");
    t[0].dtype = CKPT_F32, t[0].ndim = 1, t[0].shape[0] = 3001, t[0].data = w1;
    snprintf(t[1].name, CKPT_NAME_MAX, "counts");
    t[1].dtype = CKPT_I64, t[1].ndim = 2, t[1].shape[0] = 11,
    t[1].shape[1] = 47, t[1].data = counts;
    snprintf(t[2].name, CKPT_NAME_MAX, "bytes");
    t[2].dtype = CKPT_U8, t[2].ndim = 1, t[2].shape[0] = 13, t[2].data = bytes;
    snprintf(t[3].name, CKPT_NAME_MAX, "dbl");
    t[3].dtype = CKPT_F64, t[3].ndim = 1, t[3].shape[0] = 7, t[3].data = dbl;
    snprintf(t[4].name, CKPT_NAME_MAX, "i32s");
    t[4].dtype = CKPT_I32, t[4].ndim = 2, t[4].shape[0] = 5,
    t[4].shape[1] = 3, t[4].data = i32s;
}

/* The flat space as the tensors lay it out (zeros in the gaps). */
static unsigned char *flatten(const ckpt_tensor_t *t, size_t n, uint64_t total)
{
    unsigned char *f = calloc(1, total ? total : 1);
    for (size_t i = 0; i < n; i++)
        memcpy(f + t[i].offset, t[i].data, t[i].nbytes);
    return f;
}

static char root[256];

static int exists(const char *dir, const char *name)
{
    char p[1024];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return lstat(p, &st) == 0;
}

/* Check everything readable from a committed checkpoint against flat. */
static int check_readback(const char *dir, const ckpt_tensor_t *t, size_t n,
                          const unsigned char *flat, uint64_t total)
{
    ckpt_t *c = NULL;
    int good = 1, rc;
    unsigned char *buf = malloc(total + 1);
    if ((rc = ckpt_open(dir, &c)) != CKPT_OK) {
        diag("open %s: %s", dir, ckpt_last_error());
        free(buf);
        return 0;
    }
    good &= ckpt_total_bytes(c) == total && ckpt_num_tensors(c) == n;
    for (size_t i = 0; i < n && good; i++) {
        const ckpt_tensor_t *m = ckpt_find(c, t[i].name);
        good &= m && m->offset == t[i].offset && m->nbytes == t[i].nbytes &&
                m->dtype == t[i].dtype && m->ndim == t[i].ndim;
        good &= ckpt_read_tensor(c, t[i].name, buf, total + 1) == CKPT_OK &&
                memcmp(buf, t[i].data, t[i].nbytes) == 0;
    }
    for (int k = 0; k < 40 && good; k++) {
        uint64_t a = total ? next_rand() % total : 0;
        uint64_t len = total ? next_rand() % (total - a + 1) : 0;
        if (k % 3 == 0 && len > 64)
            len = len % 64; /* many short reads inside one frame */
        good &= ckpt_read_range(c, a, len, buf) == CKPT_OK &&
                memcmp(buf, flat + a, len) == 0;
    }
    /* Load by other world sizes: each reader rank takes its own slice. */
    for (int m = 1; m <= 4 && good; m++) {
        memset(buf, 0xAA, total);
        for (int j = 0; j < m; j++) {
            uint64_t lo = total * (uint64_t)j / (uint64_t)m,
                     hi = total * (uint64_t)(j + 1) / (uint64_t)m;
            good &= ckpt_read_range(c, lo, hi - lo, buf + lo) == CKPT_OK;
        }
        good &= memcmp(buf, flat, total) == 0;
    }
    good &= ckpt_read_range(c, total, 1, buf) == CKPT_EINVAL;
    good &= ckpt_read_range(c, UINT64_MAX, 2, buf) == CKPT_EINVAL;
    good &= ckpt_verify(c) == CKPT_OK;
    if (!good)
        diag("readback of %s failed: %s", dir, ckpt_last_error());
    ckpt_close(c);
    free(buf);
    return good;
}

static int nskipped;
static void on_skip(void *ctx, const char *name, const char *why)
{
    (void)ctx;
    nskipped++;
    diag("skipped %s: %s", name, why);
}

/* One f32 tensor of 4 elements named name, laid out; rc of ckpt_layout. */
static int one_tensor(ckpt_tensor_t *t, const char *name, float *data)
{
    uint64_t total;
    memset(t, 0, sizeof *t);
    snprintf(t->name, CKPT_NAME_MAX, "%s", name);
    t->dtype = CKPT_F32, t->ndim = 1, t->shape[0] = 4, t->data = data;
    return ckpt_layout(t, 1, &total);
}

/* Tensor names must be UTF-8, as the manifest is JSON: refused by
 * ckpt_layout, naming the tensor, before any rank writes anything.  A
 * record number JSON cannot hold is said to be out of range. */
static void names_and_records(void)
{
    static const char *const bad[] = {
        "a\xff", "\xc0\xaf", "w\xed\xa0\x80", "w\xe2\x82", "w\xf4\x90\x80\x80", "\x80w",
    };
    static const char *const good[] = {"w\xc3\xa9", "\xe2\x82\xac", "p\xf0\x9f\x98\x80"};
    float data[4] = {1, 2, 3, 4};
    char names[600], *text = NULL;
    ckpt_tensor_t t;
    ckpt_manifest_t m;
    int rc;

    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        rc = one_tensor(&t, bad[i], data);
        ok(rc == CKPT_EINVAL && strstr(ckpt_last_error(), "tensor 0: name is not valid UTF-8"),
           "layout refuses a name that is not UTF-8 (#%zu): %d %s", i, rc, ckpt_last_error());
    }
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        is_int(one_tensor(&t, good[i], data), CKPT_OK, "layout takes a UTF-8 name (#%zu)", i);

    snprintf(names, sizeof names, "%s/names", root);
    mkdir(names, 0755);
    memset(&t, 0, sizeof t);
    snprintf(t.name, CKPT_NAME_MAX, "a\xff");
    t.dtype = CKPT_F32, t.ndim = 1, t.shape[0] = 4, t.data = data;
    rc = ckpt_save(names, 1, &t, 1, "{}", NULL, NULL);
    ok(rc == CKPT_EINVAL && strstr(ckpt_last_error(), "not valid UTF-8"),
       "ckpt_save of that name: EINVAL, not out of memory (%d %s)", rc, ckpt_last_error());
    ok(!exists(names, "step-00000001") && !exists(names, ".tmp-step-00000001"),
       "  and nothing was written");

    /* The manifest's own check, for a table that did not pass ckpt_layout. */
    memset(&m, 0, sizeof m);
    m.ntensors = 1, m.tensors = &t;
    rc = ckpt_manifest_dump(&m, &text);
    ok(rc == CKPT_EINVAL && text == NULL && strstr(ckpt_last_error(), "not valid UTF-8"),
       "the manifest says a name is not UTF-8, not out of memory: %d %s", rc,
       ckpt_last_error());
    free(text);
    text = NULL;
    t.dtype = (ckpt_dtype_t)42;
    snprintf(t.name, CKPT_NAME_MAX, "w");
    rc = ckpt_manifest_dump(&m, &text);
    ok(rc == CKPT_EINVAL && strstr(ckpt_last_error(), "dtype is unknown"),
       "  and that a dtype is unknown: %d %s", rc, ckpt_last_error());
    free(text);

    is_int(one_tensor(&t, "w", data), CKPT_OK, "a good tensor");
    rc = ckpt_save(names, 2, &t, 1, "{\"seed\":9223372036854775808}", NULL, NULL);
    ok(rc == CKPT_EINVAL && strstr(ckpt_last_error(), "out of range") &&
           strstr(ckpt_last_error(), "9223372036854775808") &&
           !strstr(ckpt_last_error(), "not a JSON object"),
       "a record integer of 2^63: EINVAL saying it is out of range: %s", ckpt_last_error());
    rc = ckpt_save(names, 2, &t, 1, "{\"s\":-9223372036854775809}", NULL, NULL);
    ok(rc == CKPT_EINVAL && strstr(ckpt_last_error(), "out of range"),
       "  and one of -2^63-1: %s", ckpt_last_error());
    ok(!exists(names, "step-00000002"), "  nothing committed");
    is_int(ckpt_save(names, 2, &t, 1, "{\"seed\":9223372036854775807}", NULL, NULL), CKPT_OK,
           "a record integer of 2^63-1 is kept");

    /* A collective that cannot commit is refused before a byte is written. */
    ckpt_coll_t broken = {NULL, 0, 1, NULL, NULL};
    rc = ckpt_save(names, 3, &t, 1, "{}", NULL, &broken);
    ok(rc == CKPT_EINVAL && strstr(ckpt_last_error(), "bad collective") &&
           !exists(names, ".tmp-step-00000003") && !exists(names, "step-00000003"),
       "ckpt_save with a collective lacking its callbacks: EINVAL, no temp dir left: %s",
       ckpt_last_error());

    /* ckpt_prune_keep_good never cuts the good path short, and then removes
     * nothing. */
    is_int(ckpt_save(names, 3, &t, 1, "{}", NULL, NULL), CKPT_OK, "step 3 saved");
    char small[8];
    int removed = -1;
    rc = ckpt_prune_keep_good(names, 1, NULL, &removed, small, sizeof small);
    ok(rc == CKPT_EINVAL && strstr(ckpt_last_error(), "too small") &&
           exists(names, "step-00000002"),
       "ckpt_prune_keep_good with a short output buffer: EINVAL, step 2 kept: %s",
       ckpt_last_error());
}

/* The public slice rule: floor(r * T / W), the slices of a world cover the
 * flat space end to end, and bad arguments are refused, not asserted. */
static void test_slice_rule(void)
{
    const uint64_t totals[] = {0, 1, 7, 4096, 1000003, (uint64_t)1 << 53};
    int good = 1;
    for (size_t i = 0; i < sizeof totals / sizeof totals[0]; i++)
        for (int w = 1; w <= 9; w++) {
            uint64_t end = 0;
            for (int r = 0; r < w; r++) {
                uint64_t lo = 1, hi = 0;
                if (ckpt_slice(r, w, totals[i], &lo, &hi) != CKPT_OK || lo != end ||
                    lo != (uint64_t)((unsigned __int128)totals[i] * (unsigned)r / (unsigned)w) ||
                    hi < lo)
                    good = 0;
                end = hi;
            }
            if (end != totals[i])
                good = 0;
        }
    ok(good, "ckpt_slice: floor(r*T/W), slices of worlds 1-9 cover [0, T) end to end");
    uint64_t lo, hi;
    ok(ckpt_slice(0, 0, 10, &lo, &hi) == CKPT_EINVAL && ckpt_slice(3, 3, 10, &lo, &hi) == CKPT_EINVAL &&
           ckpt_slice(-1, 3, 10, &lo, &hi) == CKPT_EINVAL && ckpt_slice(0, 1, 10, NULL, &hi) == CKPT_EINVAL,
       "ckpt_slice: a world of 0, a rank outside it, a NULL output: EINVAL");
}

/* The structures that may grow (ckpt.h, "structures that grow"): their
 * size field is filled and checked, and a size the library does not know
 * is refused with CKPT_EINVAL, a message naming both sizes, and nothing
 * written. */
static void test_struct_sizes(void)
{
    union { /* room for a ckpt_opts_t of a newer header */
        ckpt_opts_t opts;
        unsigned char bytes[sizeof(ckpt_opts_t) + 64];
    } big;
    ckpt_opts_t o;
    ckpt_tensor_t t;
    ckpt_entry_t *v = NULL;
    size_t n = 0;
    float data[4] = {1, 2, 3, 4};
    char sroot[512], msg[64];

    is_int(ckpt_opts_default(&o), CKPT_OK, "ckpt_opts_default: CKPT_OK");
    is_int(o.size, sizeof o, "  and the options hold the caller's sizeof(ckpt_opts_t)");
    is_int(ckpt_opts_init(&big.opts, sizeof big.opts + 16), CKPT_EINVAL,
           "ckpt_opts_init with a larger size (a newer header): CKPT_EINVAL");
    snprintf(msg, sizeof msg, "ckpt_opts_t of %zu bytes is not a size", sizeof big.opts + 16);
    ok(strstr(ckpt_last_error(), msg) != NULL, "  the message names the size: %s",
       ckpt_last_error());
    snprintf(msg, sizeof msg, "its ckpt_opts_t has %zu bytes", sizeof big.opts);
    ok(strstr(ckpt_last_error(), msg) != NULL, "  and the library's");
    is_int(big.opts.size, sizeof big.opts + 16, "  and the size is kept in the options");
    is_int(ckpt_opts_init(&o, sizeof o - sizeof(int)), CKPT_EINVAL,
           "ckpt_opts_init with a smaller size: CKPT_EINVAL");
    is_int(ckpt_opts_init(NULL, sizeof o), CKPT_EINVAL, "ckpt_opts_init(NULL): CKPT_EINVAL");

    snprintf(sroot, sizeof sroot, "%s/sizes", root);
    one_tensor(&t, "w", data);
    ckpt_opts_default(&o);
    o.fsync = 0;
    o.size = sizeof o + 8;
    is_int(ckpt_save(sroot, 1, &t, 1, "{}", &o, NULL), CKPT_EINVAL,
           "ckpt_save with options of a size the library does not know: CKPT_EINVAL");
    snprintf(msg, sizeof msg, "ckpt_opts_t of %zu bytes", sizeof o + 8);
    ok(strstr(ckpt_last_error(), msg) && strstr(ckpt_last_error(), "ftrain/ckpt.h"),
       "  the message names the size and the header: %s", ckpt_last_error());
    ok(!exists(sroot, "step-00000001") && !exists(sroot, ".tmp-step-00000001"),
       "  and no step was written");
    o.size = 0; /* options not filled by ckpt_opts_default */
    is_int(ckpt_save(sroot, 1, &t, 1, "{}", &o, NULL), CKPT_EINVAL,
           "ckpt_save with options never filled (size 0): CKPT_EINVAL");
    ok(strstr(ckpt_last_error(), "not filled by ckpt_opts_default()") != NULL,
       "  the message says how to fill them: %s", ckpt_last_error());

    ckpt_opts_default(&o);
    o.fsync = 0;
    is_int(ckpt_save(sroot, 1, &t, 1, "{}", &o, NULL), CKPT_OK, "the same save, size right");
    is_int(ckpt_list(sroot, 0, &v, &n), CKPT_OK, "ckpt_list");
    ok(n == 1 && v[0].size == sizeof(ckpt_entry_t) && v[0].step == 1,
       "  each entry holds the caller's sizeof(ckpt_entry_t)");
    free(v);
    v = NULL;
    is_int(ckpt_list_sized(sroot, 0, sizeof(ckpt_entry_t) + 8, &v, &n), CKPT_EINVAL,
           "ckpt_list_sized with an entry size the library does not know: CKPT_EINVAL");
    snprintf(msg, sizeof msg, "ckpt_entry_t of %zu bytes", sizeof(ckpt_entry_t) + 8);
    ok(strstr(ckpt_last_error(), msg) != NULL && v == NULL && n == 0,
       "  the message names the size, and nothing is returned: %s", ckpt_last_error());
}

int main(void)
{
    ckpt_tensor_t t[NT], bad[2];
    ckpt_opts_t o;
    uint64_t total = 0, step = 0;
    int rcs[8];
    char dir[512], name[64];
    const size_t frames[] = {7, 100, 4096, 4u << 20};

    tap_tmpdir(root, sizeof root, "ckpt_format");
    test_slice_rule();
    test_struct_sizes();

    /* Names and codes. */
    is_int(ckpt_dtype_size(CKPT_F32), 4, "f32 is 4 bytes");
    is_int(ckpt_dtype_size(CKPT_I64), 8, "i64 is 8 bytes");
    is_int(ckpt_dtype_size((ckpt_dtype_t)99), 0, "unknown dtype has size 0");
    is_str(ckpt_dtype_name(CKPT_U8), "u8", "u8 name");
    ok(strlen(ckpt_strerror(CKPT_ECORRUPT)) > 0 &&
           strcmp(ckpt_strerror(CKPT_ECORRUPT), ckpt_strerror(CKPT_EIO)),
       "strerror names codes apart");
    ckpt_step_dirname(42, name, sizeof name);
    is_str(name, "step-00000042", "step dirname is zero-padded");

    /* Layout. */
    make_state(t, 1);
    is_int(ckpt_layout(t, NT, &total), CKPT_OK, "layout");
    is_int(t[0].offset, 0, "first tensor at 0");
    is_int(t[1].offset, 12008, "second tensor aligned to 8 (12004 -> 12008)");
    is_int(t[1].nbytes, 11 * 47 * 8, "nbytes from shape and dtype");
    ok(t[2].offset % 8 == 0 && t[3].offset % 8 == 0 && t[4].offset % 8 == 0,
       "all offsets 8-aligned");
    is_int(total, t[4].offset + t[4].nbytes, "total ends at the last tensor");
    memcpy(bad, t, sizeof bad);
    snprintf(bad[1].name, CKPT_NAME_MAX, "model.w1");
    is_int(ckpt_layout(bad, 2, &total), CKPT_EINVAL, "duplicate name refused");
    memcpy(bad, t, sizeof bad);
    bad[1].shape[0] = -1;
    is_int(ckpt_layout(bad, 2, &total), CKPT_EINVAL, "negative shape refused");
    memcpy(bad, t, sizeof bad);
    bad[1].dtype = (ckpt_dtype_t)17;
    is_int(ckpt_layout(bad, 2, &total), CKPT_EINVAL, "unknown dtype refused");
    memcpy(bad, t, sizeof bad);
    bad[1].name[0] = '\0';
    is_int(ckpt_layout(bad, 2, &total), CKPT_EINVAL, "empty name refused");
    memcpy(bad, t, sizeof bad);
    snprintf(bad[1].name, CKPT_NAME_MAX, "w\033[2J");
    is_int(ckpt_layout(bad, 2, &total), CKPT_EINVAL,
           "name with a control character refused");
    memcpy(bad, t, sizeof bad);
    bad[1].shape[0] = INT64_MAX / 2, bad[1].shape[1] = 1 << 20;
    is_int(ckpt_layout(bad, 2, &total), CKPT_EINVAL, "overflowing shape refused");
    ckpt_layout(t, NT, &total);
    names_and_records();

    /* Saves by 1..5 ranks with every frame size, shuffle on and off. */
    ckpt_opts_default(&o);
    o.fsync = 0; /* the crash test covers fsync; keep this one fast */
    for (int world = 1; world <= 5; world++)
        for (size_t fi = 0; fi < sizeof frames / sizeof *frames; fi++)
            for (int shuffle = 0; shuffle <= 1; shuffle++) {
                unsigned char *flat;
                char rec[128];
                step++;
                make_state(t, step);
                ckpt_layout(t, NT, &total);
                flat = flatten(t, NT, total);
                o.frame_bytes = frames[fi];
                o.shuffle = shuffle;
                o.level = 1 + (int)(step % 3) * 2;
                o.fsync = step == 7;
                snprintf(rec, sizeof rec, "{\"epoch\":%llu,\"cursor\":640}",
                         (unsigned long long)step);
                save_world(root, step, t, NT, rec, &o, world, -1, rcs);
                ok(all_equal(rcs, world, CKPT_OK), "save step %llu by %d ranks, "
                   "frames of %zu bytes, shuffle %d",
                   (unsigned long long)step, world, frames[fi], shuffle);
                ckpt_step_dirname(step, name, sizeof name);
                snprintf(dir, sizeof dir, "%s/%s", root, name);
                ok(check_readback(dir, t, NT, flat, total),
                   "read back step %llu (every tensor, random ranges, worlds "
                   "1..4, verify)", (unsigned long long)step);
                free(flat);
            }

    /* Manifest details of the last one. */
    {
        ckpt_t *c = NULL;
        is_int(ckpt_open(dir, &c), CKPT_OK, "open the last checkpoint");
        if (c) {
            is_int(ckpt_step(c), step, "manifest step");
            is_int(ckpt_world_size(c), 5, "five shards");
            ok(strstr(ckpt_record_json(c), "\"cursor\":640") != NULL,
               "record kept verbatim: %s", ckpt_record_json(c));
            ok(ckpt_created(c) > 0, "created time set");
            ok(ckpt_shard_at(c, 5) == NULL && ckpt_tensor_at(c, NT) == NULL &&
                   ckpt_find(c, "nope") == NULL,
               "out-of-range lookups give NULL");
            is_int(ckpt_read_tensor(c, "nope", dir, 1), CKPT_ENOTFOUND,
                   "read of an unknown tensor");
            is_int(ckpt_read_tensor(c, "model.w1", dir, 4), CKPT_EINVAL,
                   "read into a too-small buffer");
            for (int i = 0; i < 5; i++) {
                const ckpt_shard_info_t *s = ckpt_shard_at(c, i);
                uint64_t lo = total * (uint64_t)i / 5;
                ok(s && s->raw_offset == lo, "shard %d starts at floor(%d*T/5)",
                   i, i);
            }
            ckpt_close(c);
        }
    }

    /* Tiny state with fewer bytes than ranks: empty shards. */
    {
        unsigned char two[2] = {7, 9}, out[2] = {0, 0};
        ckpt_tensor_t tiny;
        ckpt_t *c = NULL;
        memset(&tiny, 0, sizeof tiny);
        snprintf(tiny.name, CKPT_NAME_MAX, "two");
        tiny.dtype = CKPT_U8, tiny.ndim = 1, tiny.shape[0] = 2, tiny.data = two;
        o.frame_bytes = 1;
        save_world(root, ++step, &tiny, 1, "{}", &o, 5, -1, rcs);
        ok(all_equal(rcs, 5, CKPT_OK), "save 2 bytes over 5 ranks");
        ckpt_step_dirname(step, name, sizeof name);
        snprintf(dir, sizeof dir, "%s/%s", root, name);
        ok(ckpt_open(dir, &c) == CKPT_OK &&
               ckpt_read_tensor(c, "two", out, 2) == CKPT_OK && out[0] == 7 &&
               out[1] == 9 && ckpt_verify(c) == CKPT_OK,
           "read back through empty shards");
        ckpt_close(c);
        o.frame_bytes = 4096;
    }

    /* Re-saving a committed step: EEXIST everywhere, nothing changed. */
    {
        char mpath[600], *before = NULL, *after = NULL;
        FILE *f;
        long len;
        snprintf(mpath, sizeof mpath, "%s/manifest.json", dir);
        f = fopen(mpath, "rb");
        fseek(f, 0, SEEK_END);
        len = ftell(f);
        rewind(f);
        before = calloc(1, (size_t)len + 1);
        if (fread(before, 1, (size_t)len, f) != (size_t)len)
            diag("short read");
        fclose(f);
        make_state(t, 1000);
        ckpt_layout(t, NT, &total);
        save_world(root, step, t, NT, "{}", &o, 3, -1, rcs);
        ok(all_equal(rcs, 3, CKPT_EEXIST), "re-save of step %llu: EEXIST on "
           "every rank", (unsigned long long)step);
        f = fopen(mpath, "rb");
        after = calloc(1, (size_t)len + 2);
        ok(f && fread(after, 1, (size_t)len + 1, f) == (size_t)len &&
               strcmp(before, after) == 0,
           "committed manifest unchanged");
        if (f)
            fclose(f);
        snprintf(name, sizeof name, ".tmp-step-%08llu",
                 (unsigned long long)step);
        ok(!exists(root, name), "no temp dir left by the refused save");
        free(before);
        free(after);
    }

    /* A rank failing phase one: nobody commits. */
    {
        make_state(t, 5000);
        ckpt_layout(t, NT, &total);
        save_world(root, 5000, t, NT, "{}", &o, 4, 2, rcs);
        ok(rcs[2] == CKPT_EIO && rcs[0] == CKPT_EPEER && rcs[1] == CKPT_EPEER &&
               rcs[3] == CKPT_EPEER,
           "rank 2 fails: it returns its error, the others EPEER (%d %d %d %d)",
           rcs[0], rcs[1], rcs[2], rcs[3]);
        ok(!exists(root, "step-00005000") && !exists(root, ".tmp-step-00005000"),
           "nothing committed and the temp dir removed");
        save_world(root, 5001, t, NT, "[1,2]", &o, 2, -1, rcs);
        ok(rcs[0] == CKPT_EINVAL && rcs[1] != CKPT_OK,
           "a record that is not an object fails the save (%d %d)", rcs[0],
           rcs[1]);
        ok(!exists(root, "step-00005001"), "and commits nothing");
    }

    /* list, latest_good, prune. */
    {
        ckpt_entry_t *v = NULL;
        size_t n = 0, ncommitted = 0, nlatest = 0;
        char path[1024], junk[600];
        int removed = -1;
        FILE *f;
        uint64_t newest = step;

        is_int(ckpt_list(root, 1, &v, &n), CKPT_OK, "list with verify");
        for (size_t i = 0; i < n; i++) {
            ncommitted += v[i].status == CKPT_ST_COMMITTED;
            nlatest += v[i].is_latest;
            if (i > 0 && v[i].step < v[i - 1].step)
                ncommitted = 0;
        }
        is_int(ncommitted, step, "every step listed as committed, in order");
        ok(nlatest == 1 && n > 0 && v[n - 1].is_latest,
           "exactly the newest one is marked LATEST");
        ok(n > 0 && v[n - 1].world_size == 5 && v[n - 1].raw_bytes == 2,
           "entry carries world size and bytes");
        free(v);
        nskipped = 0;
        is_int(ckpt_latest_good(root, path, sizeof path, on_skip, NULL),
               CKPT_OK, "latest_good");
        ckpt_step_dirname(newest, name, sizeof name);
        snprintf(dir, sizeof dir, "%s/%s", root, name);
        is_str(path, dir, "latest_good is the newest");
        is_int(nskipped, 0, "nothing skipped");
        is_int(ckpt_latest_good(root, path, 5, NULL, NULL), CKPT_EINVAL,
               "latest_good with a tiny buffer");

        /* Crashed-save leftovers, a newer temp dir and unrelated files. */
        snprintf(junk, sizeof junk, "%s/.tmp-step-00000003", root);
        mkdir(junk, 0755);
        snprintf(junk, sizeof junk, "%s/.tmp-step-00000003/shard-0.ftsh", root);
        f = fopen(junk, "w");
        if (f)
            fclose(f);
        snprintf(junk, sizeof junk, "%s/.tmp-step-99999999", root);
        mkdir(junk, 0755);
        snprintf(junk, sizeof junk, "%s/step-xyz", root);
        mkdir(junk, 0755);
        snprintf(junk, sizeof junk, "%s/notes.txt", root);
        f = fopen(junk, "w");
        if (f)
            fclose(f);
        is_int(ckpt_list(root, 0, &v, &n), CKPT_OK, "list with temp dirs");
        ok(n == step + 2 && v[2].status == CKPT_ST_INCOMPLETE &&
               strcmp(v[2].name, ".tmp-step-00000003") == 0,
           "temp dirs listed as incomplete, sorted by step");
        free(v);

        snprintf(path, sizeof path, "%s/step-00000001/", root);
        is_int(ckpt_prune(root, 3, path, &removed), CKPT_OK, "prune keep 3");
        is_int(removed, (int)step - 4 + 1, "removed all but 3 newest and "
               "in_use, plus the old temp dir");
        ok(exists(root, "step-00000001"), "in_use kept");
        ok(!exists(root, "step-00000002"), "old one removed");
        for (uint64_t s = newest - 2; s <= newest; s++) {
            ckpt_step_dirname(s, name, sizeof name);
            ok(exists(root, name), "newest %s kept", name);
        }
        ok(!exists(root, ".tmp-step-00000003"), "old temp dir removed");
        ok(exists(root, ".tmp-step-99999999"), "newer temp dir kept");
        ok(exists(root, "step-xyz") && exists(root, "notes.txt") &&
               exists(root, "LATEST"),
           "unrelated names untouched");
        is_int(ckpt_list(root, 1, &v, &n), CKPT_OK, "list after prune");
        is_int(n, 5, "four checkpoints and one temp dir left");
        free(v);
        is_int(ckpt_prune(root, -1, NULL, NULL), CKPT_EINVAL, "negative keep");
    }

    /* Empty and missing roots. */
    {
        char path[1024], empty[600];
        ckpt_entry_t *v = NULL;
        size_t n = 9;
        snprintf(empty, sizeof empty, "%s/empty", root);
        mkdir(empty, 0755);
        is_int(ckpt_latest_good(empty, path, sizeof path, NULL, NULL),
               CKPT_ENOTFOUND, "latest_good on an empty root");
        snprintf(empty, sizeof empty, "%s/missing", root);
        is_int(ckpt_list(empty, 0, &v, &n), CKPT_ENOTFOUND, "list a missing "
               "root");
        is_int(ckpt_open(empty, (ckpt_t **)&v), CKPT_ENOTFOUND,
               "open a missing directory");
        /* A file is no checkpoint: the caller's mistake, not "corrupt". */
        snprintf(empty, sizeof empty, "%s/a-file", root);
        FILE *f = fopen(empty, "w");
        if (f)
            fclose(f);
        ok(ckpt_open(empty, (ckpt_t **)&v) == CKPT_EINVAL &&
               strstr(ckpt_last_error(), "not a directory, so not a checkpoint"),
           "open a regular file: EINVAL, not a checkpoint directory: %s",
           ckpt_last_error());
    }

    tap_rmtree(root);
    return done_testing();
}

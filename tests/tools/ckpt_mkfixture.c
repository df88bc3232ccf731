/*
 * ckpt_mkfixture - write a committed checkpoint for tests to read.
 *
 *   ckpt_mkfixture ROOT STEP [--world W] [--mb MiB] [--seed S] [--note TEXT]
 *
 * The checkpoint holds a few named tensors whose contents derive only from
 * the seed and the step (see fill() below), written by W simulated ranks
 * (threads sharing an in-process collective), and the record
 * {"epoch":1,"cursor":640,"world_size":W} (plus "note":TEXT with --note;
 * "\e" in TEXT stands for the escape character).  Tensors:
 *
 *   model.fc1.weight  f32 [rows, 256]  rows = max(1, MiB * 1024)
 *   model.fc1.bias    f32 [256]
 *   optim.step        i64 [1]          the step
 *   sampler.state     i64 [4]          seed, step, 640, W
 *
 * Element i of an f32 tensor t is ((splitmix64(seed*1000003 + step*7919 +
 * t*1000000007 + i) >> 40) / 2^24 - 0.5) as a float.  Exit status: 0 written,
 * 1 error (message on stderr), 2 usage.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ftrain/ckpt.h"

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
    ckpt_tensor_t *t;
    size_t n;
    const char *record;
    int rc;
    char err[512];
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
    if (bytes > sizeof r->sh->buf)
        return -1;
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
    ckpt_opts_t o;
    ckpt_opts_default(&o);
    r->rc = ckpt_save(r->root, r->step, r->t, r->n, r->record, &o, &coll);
    snprintf(r->err, sizeof r->err, "%s", ckpt_last_error());
    return NULL;
}

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static void fill(float *p, size_t n, uint64_t seed, uint64_t step, uint64_t t)
{
    uint64_t base = seed * 1000003ull + step * 7919ull + t * 1000000007ull;
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((double)(splitmix64(base + i) >> 40) / 16777216.0 - 0.5);
}

static int usage(void)
{
    fprintf(stderr, "usage: ckpt_mkfixture ROOT STEP [--world W] [--mb MiB] "
                    "[--seed S] [--note TEXT]\n");
    return 2;
}

int main(int argc, char **argv)
{
    int world = 1, rc = 0;
    double mb = 1.0;
    uint64_t seed = 1, step, rows;
    char *end, record[1024], note[256] = "";
    float *w = NULL, *b = NULL;
    int64_t ostep[1], sstate[4];
    shared_t sh;
    rank_t *ranks = NULL;
    pthread_t *th = NULL;

    if (argc < 3)
        return usage();
    step = strtoull(argv[2], &end, 10);
    if (*end || argv[2][0] == '-')
        return usage();
    for (int i = 3; i < argc; i++) {
        if (i + 1 >= argc)
            return usage();
        if (strcmp(argv[i], "--world") == 0)
            world = atoi(argv[++i]);
        else if (strcmp(argv[i], "--mb") == 0)
            mb = strtod(argv[++i], NULL);
        else if (strcmp(argv[i], "--note") == 0) {
            /* a JSON string; "\e" becomes \u001b */
            const char *p = argv[++i];
            size_t o = 0;
            note[o++] = '"';
            for (; *p && o + 8 < sizeof note; p++) {
                if (p[0] == '\\' && p[1] == 'e') {
                    o += (size_t)snprintf(note + o, sizeof note - o, "\\u001b");
                    p++;
                } else if (*p == '"' || *p == '\\') {
                    note[o++] = '\\';
                    note[o++] = *p;
                } else {
                    note[o++] = *p;
                }
            }
            note[o++] = '"';
            note[o] = '\0';
        } else if (strcmp(argv[i], "--seed") == 0)
            seed = strtoull(argv[++i], NULL, 10);
        else
            return usage();
    }
    if (world < 1 || world > 64 || !(mb >= 0 && mb <= 4096))
        return usage();
    rows = (uint64_t)(mb * 1024.0);
    if (rows < 1)
        rows = 1;
    ckpt_tensor_t t[4];
    memset(t, 0, sizeof t);
    w = malloc(rows * 256 * sizeof *w);
    b = malloc(256 * sizeof *b);
    ranks = calloc((size_t)world, sizeof *ranks);
    th = calloc((size_t)world, sizeof *th);
    if (!w || !b || !ranks || !th) {
        fprintf(stderr, "ckpt_mkfixture: out of memory\n");
        return 1;
    }
    fill(w, rows * 256, seed, step, 0);
    fill(b, 256, seed, step, 1);
    ostep[0] = (int64_t)step;
    sstate[0] = (int64_t)seed;
    sstate[1] = (int64_t)step;
    sstate[2] = 640;
    sstate[3] = world;
    snprintf(t[0].name, CKPT_NAME_MAX, "model.fc1.weight");
    t[0].dtype = CKPT_F32;
    t[0].ndim = 2;
    t[0].shape[0] = (int64_t)rows;
    t[0].shape[1] = 256;
    t[0].data = w;
    snprintf(t[1].name, CKPT_NAME_MAX, "model.fc1.bias");
    t[1].dtype = CKPT_F32;
    t[1].ndim = 1;
    t[1].shape[0] = 256;
    t[1].data = b;
    snprintf(t[2].name, CKPT_NAME_MAX, "optim.step");
    t[2].dtype = CKPT_I64;
    t[2].ndim = 1;
    t[2].shape[0] = 1;
    t[2].data = ostep;
    snprintf(t[3].name, CKPT_NAME_MAX, "sampler.state");
    t[3].dtype = CKPT_I64;
    t[3].ndim = 1;
    t[3].shape[0] = 4;
    t[3].data = sstate;
    snprintf(record, sizeof record,
             "{\"epoch\":1,\"cursor\":640,\"world_size\":%d%s%s}", world,
             note[0] ? ",\"note\":" : "", note);

    sh.size = world;
    pthread_barrier_init(&sh.bar, NULL, (unsigned)world);
    for (int r = 0; r < world; r++) {
        ranks[r] = (rank_t){&sh, r, argv[1], step, t, 4, record, 0, ""};
        pthread_create(&th[r], NULL, rank_main, &ranks[r]);
    }
    for (int r = 0; r < world; r++)
        pthread_join(th[r], NULL);
    pthread_barrier_destroy(&sh.bar);
    if (ranks[0].rc != 0) {
        fprintf(stderr, "ckpt_mkfixture: save of step %llu in '%s' failed: "
                "%s: %s\n", (unsigned long long)step, argv[1],
                ckpt_strerror(ranks[0].rc), ranks[0].err);
        rc = 1;
    }
    free(w);
    free(b);
    free(ranks);
    free(th);
    return rc;
}

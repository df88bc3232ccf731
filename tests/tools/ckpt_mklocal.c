/*
 * ckpt_mklocal - write one step of a checkpoint into node-local roots, as a
 * trainer's node-local tier would (include/ftrain/ckpt_local.h), for tests.
 *
 *   ckpt_mklocal STEP NODE_ROOT... [--world W] [--mb MiB] [--seed S]
 *                [--keep K] [--no-partner R]... [--reference DIR]
 *
 * W ranks (default 4) are spread over the K node roots given in blocks
 * (rank r lives on node r*K/W).  Each rank writes its own shard into its
 * node's root (ckpt_shard_write); when K > 1, its partner copy is put on the
 * next node, (node + 1) mod K (ckpt_shard_put), unless --no-partner R names
 * it.  Then every node root is sealed (ckpt_local_seal, keep K, default 3).
 * --reference DIR also puts every shard into DIR and seals it there: a root
 * that holds the whole checkpoint, to compare a flush with.
 *
 * The state: "model.fc1.weight" f32 [rows, 256] (rows = max(1, MiB * 1024),
 * default 0.25 MiB) and "optim.step" i64 [1], both functions of the seed and
 * the step; the record {"epoch":1,"cursor":640,"world_size":W}.  Files are
 * written with adapt off, so the same arguments give the same bytes.
 * Exit status: 0 written, 1 error (message on stderr), 2 usage.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ftrain/ckpt.h"
#include "ftrain/ckpt_local.h"
#include "ckpt_test.h"

#define MAX_NODES 64
#define MAX_WORLD 64

static int usage(void)
{
    fprintf(stderr, "usage: ckpt_mklocal STEP NODE_ROOT... [--world W] [--mb MiB] "
                    "[--seed S] [--keep K] [--no-partner R]... [--reference DIR]\n");
    return 2;
}

static int fail(const char *what, const char *root)
{
    fprintf(stderr, "ckpt_mklocal: %s '%s': %s\n", what, root, ckpt_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    const char *nodes[MAX_NODES], *reference = NULL;
    int nnodes = 0, world = 4, keep = 3, no_partner[MAX_WORLD] = {0}, rc = 0;
    double mb = 0.25;
    uint64_t seed = 1, step, rows;
    char *end, record[128], path[4200];
    ckpt_shard_info_t info[MAX_WORLD];
    unsigned char *bytes[MAX_WORLD] = {NULL};
    size_t len[MAX_WORLD];

    if (argc < 3)
        return usage();
    step = strtoull(argv[1], &end, 10);
    if (*end || argv[1][0] == '-' || !argv[1][0])
        return usage();
    for (int i = 2; i < argc; i++) {
        if (argv[i][0] != '-') {
            if (nnodes == MAX_NODES)
                return usage();
            nodes[nnodes++] = argv[i];
            continue;
        }
        if (i + 1 >= argc)
            return usage();
        if (strcmp(argv[i], "--world") == 0)
            world = atoi(argv[++i]);
        else if (strcmp(argv[i], "--mb") == 0)
            mb = strtod(argv[++i], NULL);
        else if (strcmp(argv[i], "--seed") == 0)
            seed = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--keep") == 0)
            keep = atoi(argv[++i]);
        else if (strcmp(argv[i], "--reference") == 0)
            reference = argv[++i];
        else if (strcmp(argv[i], "--no-partner") == 0) {
            int r = atoi(argv[++i]);
            if (r < 0 || r >= MAX_WORLD)
                return usage();
            no_partner[r] = 1;
        } else
            return usage();
    }
    if (nnodes < 1 || world < 1 || world > MAX_WORLD || !(mb >= 0 && mb <= 1024))
        return usage();

    rows = (uint64_t)(mb * 1024.0);
    if (rows < 1)
        rows = 1;
    float *w = malloc(rows * 256 * sizeof *w);
    int64_t ostep = (int64_t)step;
    if (!w) {
        fprintf(stderr, "ckpt_mklocal: out of memory\n");
        return 1;
    }
    for (uint64_t i = 0; i < rows * 256; i++) {
        uint64_t x = (seed * 1000003u + step * 7919u + i) * 0x9E3779B97F4A7C15ull;
        x ^= x >> 31;
        w[i] = (float)((double)(x >> 40) / 16777216.0 - 0.5);
    }
    ckpt_tensor_t t[2];
    memset(t, 0, sizeof t);
    snprintf(t[0].name, CKPT_NAME_MAX, "model.fc1.weight");
    t[0].dtype = CKPT_F32, t[0].ndim = 2, t[0].shape[0] = (int64_t)rows,
    t[0].shape[1] = 256, t[0].data = w;
    snprintf(t[1].name, CKPT_NAME_MAX, "optim.step");
    t[1].dtype = CKPT_I64, t[1].ndim = 1, t[1].shape[0] = 1, t[1].data = &ostep;
    snprintf(record, sizeof record, "{\"epoch\":1,\"cursor\":640,\"world_size\":%d}",
             world);
    uint64_t total;
    ckpt_opts_t o;
    ckpt_opts_default(&o);
    o.adapt = 0;
    o.frame_bytes = 64 << 10;
    if (ckpt_layout(t, 2, &total) != CKPT_OK)
        return fail("layout", "-");

    for (int r = 0; r < world && rc == 0; r++) {
        int node = (int)((long)r * nnodes / world);
        if (ckpt_shard_write(nodes[node], step, r, world, t, 2, &o, &info[r]) != CKPT_OK)
            rc = fail("write shard into", nodes[node]);
        snprintf(path, sizeof path, "%s/.tmp-step-%08llu/shard-%d.ftsh", nodes[node],
                 (unsigned long long)step, r);
        if (rc == 0 && read_file(path, &bytes[r], &len[r]) != 0) {
            fprintf(stderr, "ckpt_mklocal: cannot read '%s'\n", path);
            rc = 1;
        }
        int partner = (node + 1) % nnodes;
        if (rc == 0 && nnodes > 1 && !no_partner[r] &&
            ckpt_shard_put(nodes[partner], step, r, bytes[r], len[r], info[r].xxh64) !=
                CKPT_OK)
            rc = fail("put a partner copy into", nodes[partner]);
        if (rc == 0 && reference &&
            ckpt_shard_put(reference, step, r, bytes[r], len[r], info[r].xxh64) != CKPT_OK)
            rc = fail("put a shard into", reference);
    }
    for (int n = 0; n < nnodes && rc == 0; n++)
        if (ckpt_local_seal(nodes[n], step, t, 2, record, &o, info, world, keep, NULL) !=
            CKPT_OK)
            rc = fail("seal", nodes[n]);
    if (rc == 0 && reference &&
        ckpt_local_seal(reference, step, t, 2, record, &o, info, world, keep, NULL) !=
            CKPT_OK)
        rc = fail("seal", reference);
    for (int r = 0; r < world; r++)
        free(bytes[r]);
    free(w);
    return rc;
}

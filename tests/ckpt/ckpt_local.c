/*
 * ckpt_local.c - the node-local checkpoint tier (ckpt_local.h): 4 simulated
 * ranks on 2 "nodes" write their own shards into their node's root, put
 * partner copies on the other node, and each node seals its step; then
 * scan, verify, flush (the union of the nodes into a shared root, compared
 * byte for byte with what the ranks wrote), and the faults: a missing
 * partner copy, a copy damaged in transfer (refused by ckpt_shard_put), a
 * copy damaged on disk (caught by ckpt_local_verify, skipped by flush for
 * the other node's good one, refused when there is none), a truncated file,
 * a torn save, seal's keep and its replacement of a stale step, the
 * trainer's seal-then-prune (seal with no pruning, ckpt_prune after), dropping
 * steps after a resume, manifests that disagree, and bad arguments.
 */
#include <dirent.h>
#include <fcntl.h>
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

enum { WORLD = 4, NW = 48 * 1024, NB = 100, NMETA = 4 };

/* One checkpoint's state and what its 4 ranks wrote. */
typedef struct {
    float w[NW], b[NB];
    int64_t meta[NMETA];
    ckpt_tensor_t t[3];
    ckpt_shard_info_t info[WORLD];
    unsigned char *bytes[WORLD]; /* each shard file as written */
    size_t len[WORLD];
} state_t;

static ckpt_opts_t opts;
static char record[] = "{\"epoch\":1,\"cursor\":640}";

static void make_state(state_t *s, uint64_t seed, uint64_t step)
{
    memset(s->t, 0, sizeof s->t);
    for (size_t i = 0; i < NW; i++)
        s->w[i] = (float)((i * 2654435761u + seed * 97u) % 10007u) / 7.0f;
    for (size_t i = 0; i < NB; i++)
        s->b[i] = (float)(seed * 1000 + i);
    s->meta[0] = (int64_t)step, s->meta[1] = (int64_t)seed, s->meta[2] = 640,
    s->meta[3] = WORLD;
    snprintf(s->t[0].name, CKPT_NAME_MAX, "model.w");
    s->t[0].dtype = CKPT_F32, s->t[0].ndim = 1, s->t[0].shape[0] = NW,
    s->t[0].data = s->w;
    snprintf(s->t[1].name, CKPT_NAME_MAX, "model.b");
    s->t[1].dtype = CKPT_F32, s->t[1].ndim = 1, s->t[1].shape[0] = NB,
    s->t[1].data = s->b;
    snprintf(s->t[2].name, CKPT_NAME_MAX, "meta");
    s->t[2].dtype = CKPT_I64, s->t[2].ndim = 1, s->t[2].shape[0] = NMETA,
    s->t[2].data = s->meta;
    uint64_t total;
    if (ckpt_layout(s->t, 3, &total) != CKPT_OK) {
        printf("Bail out! layout: %s\n", ckpt_last_error());
        exit(1);
    }
}

/* Invert the byte at the middle of the file. */
static void flip_middle(const char *path)
{
    int fd = open(path, O_RDWR);
    struct stat st;
    unsigned char byte;
    if (fd < 0 || fstat(fd, &st) != 0 ||
        pread(fd, &byte, 1, st.st_size / 2) != 1)
        goto bail;
    byte ^= 0xff;
    if (pwrite(fd, &byte, 1, st.st_size / 2) != 1)
        goto bail;
    close(fd);
    return;
bail:
    printf("Bail out! cannot flip a byte of %s\n", path);
    exit(1);
}

static int exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* Entries of dir other than ., .. and .locks (-1 when it cannot be read). */
static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    if (!d)
        return -1;
    /* The root's lock file (".locks"), which a save may create, holds no
     * step: not counted. */
    while ((e = readdir(d)))
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
             strcmp(e->d_name, ".locks") != 0;
    closedir(d);
    return n;
}

/* Rank r writes its own shard of step into root (as the trainer would into
 * its node's root) and keeps its bytes. */
static int write_own(state_t *s, const char *root, uint64_t step, int r)
{
    char path[1024];
    int rc = ckpt_shard_write(root, step, r, WORLD, s->t, 3, &opts, &s->info[r]);
    if (rc != CKPT_OK)
        return rc;
    snprintf(path, sizeof path, "%s/.tmp-step-%08llu/shard-%d.ftsh", root,
             (unsigned long long)step, r);
    free(s->bytes[r]);
    return read_file(path, &s->bytes[r], &s->len[r]) == 0 ? CKPT_OK : CKPT_EIO;
}

/* The bytes of every rank's shard of state s, without writing to a root
 * that is tested (a scratch root of its own). */
static int make_all(state_t *s, const char *scratch, uint64_t step)
{
    int rc = CKPT_OK;
    for (int r = 0; r < WORLD && rc == CKPT_OK; r++)
        rc = write_own(s, scratch, step, r);
    return rc;
}

static int put(const state_t *s, const char *root, uint64_t step, int r)
{
    return ckpt_shard_put(root, step, r, s->bytes[r], s->len[r], s->info[r].xxh64);
}

static int seal(const state_t *s, const char *root, uint64_t step, int keep,
                int *present)
{
    return ckpt_local_seal(root, step, s->t, 3, record, &opts, s->info, WORLD, keep,
                           present);
}

static void free_state(state_t *s)
{
    for (int r = 0; r < WORLD; r++)
        free(s->bytes[r]);
}

static state_t s1, s2; /* two checkpoints of different contents */

int main(void)
{
    char tmp[256], A[512], B[512], D[512], path[1024], path2[1100], out[1024];
    ckpt_local_step_t *steps = NULL;
    size_t nsteps = 0;
    int rc, present = -1, missing = -1, removed = -1;

    tap_tmpdir(tmp, sizeof tmp, "ckpt_local");
    ckpt_opts_default(&opts);
    opts.frame_bytes = 16 << 10; /* several frames per shard */
    opts.adapt = 0;              /* reproducible bytes */
    snprintf(A, sizeof A, "%s/nodeA", tmp);
    snprintf(B, sizeof B, "%s/nodeB", tmp);
    snprintf(D, sizeof D, "%s/shared", tmp);
    make_state(&s1, 1, 10);
    make_state(&s2, 2, 10);
    plan(103);

    /* ---- one save on two nodes ---------------------------------------- */
    /* Node A runs ranks 0 and 1, node B ranks 2 and 3; rank 1's partner
     * copy goes to B, rank 2's to A: A = {0,1,2}, B = {1,2,3}. */
    rc = write_own(&s1, A, 10, 0);
    if (rc == CKPT_OK)
        rc = write_own(&s1, A, 10, 1);
    if (rc == CKPT_OK)
        rc = write_own(&s1, B, 10, 2);
    if (rc == CKPT_OK)
        rc = write_own(&s1, B, 10, 3);
    is_int(rc, CKPT_OK, "each rank writes its own shard into its node's root");
    is_int(put(&s1, B, 10, 1), CKPT_OK, "rank 1's partner copy is put on node B");
    is_int(put(&s1, A, 10, 2), CKPT_OK, "rank 2's partner copy is put on node A");
    snprintf(path, sizeof path, "%s/.tmp-step-00000010/shard-1.ftsh", B);
    ok(same_bytes(path, s1.bytes[1], s1.len[1]), "  the copy on B is rank 1's bytes");
    snprintf(path, sizeof path, "%s/.tmp-step-00000010/shard-1.ftsh.tmp", B);
    ok(!exists(path), "  and no temp file is left beside it");
    rc = seal(&s1, A, 10, 3, &present);
    ok(rc == CKPT_OK && present == 3, "node A seals step 10 holding 3 shards (rc %d, %d)",
       rc, present);
    rc = seal(&s1, B, 10, 3, &present);
    ok(rc == CKPT_OK && present == 3, "node B seals step 10 holding 3 shards (rc %d, %d)",
       rc, present);
    snprintf(path, sizeof path, "%s/.tmp-step-00000010", A);
    ok(!exists(path), "  the temp dir became step-00000010");

    /* ---- scan and verify ---------------------------------------------- */
    rc = ckpt_local_scan(A, &steps, &nsteps);
    ok(rc == CKPT_OK && nsteps == 1 && steps[0].step == 10 && steps[0].nshards == 4,
       "scan of A finds step 10 of 4 shards");
    ok(nsteps == 1 && steps[0].npresent == 3 && steps[0].present[0] &&
           steps[0].present[1] && steps[0].present[2] && !steps[0].present[3],
       "  with shards 0, 1, 2 present and 3 absent");
    ok(nsteps == 1 && steps[0].present_bytes ==
                          s1.info[0].file_bytes + s1.info[1].file_bytes +
                              s1.info[2].file_bytes &&
           steps[0].total_bytes == (uint64_t)NW * 4 + NB * 4 + 8 * NMETA,
       "  present_bytes and total_bytes are right");
    ckpt_local_scan_free(steps, nsteps);
    rc = ckpt_local_scan(B, &steps, &nsteps);
    ok(rc == CKPT_OK && nsteps == 1 && !steps[0].present[0] && steps[0].present[1] &&
           steps[0].present[2] && steps[0].present[3],
       "scan of B: shards 1, 2, 3 present, 0 absent");
    ckpt_local_scan_free(steps, nsteps);
    snprintf(path, sizeof path, "%s/step-00000010", A);
    rc = ckpt_local_verify(path, &missing);
    ok(rc == CKPT_OK && missing == 1, "local_verify of A's step: good, 1 missing (rc %d, %d)",
       rc, missing);
    {
        ckpt_t *c = NULL;
        float got[16];
        rc = ckpt_open(path, &c);
        ok(rc == CKPT_OK && ckpt_world_size(c) == 4,
           "ckpt_open of a node's step dir (the whole checkpoint's manifest)");
        rc = c ? ckpt_read_range(c, 0, sizeof got, got) : -1;
        ok(rc == CKPT_OK && memcmp(got, s1.w, sizeof got) == 0,
           "  reads a range of a shard present");
        rc = c ? ckpt_read_range(c, ckpt_shard_at(c, 3)->raw_offset, 8, got) : -1;
        is_int(rc, CKPT_EINCOMPLETE, "  and a range of a shard absent is incomplete");
        ckpt_close(c);
    }

    /* ---- flush -------------------------------------------------------- */
    const char *only_a[] = {A}, *both[] = {A, B}, *b_then_a[] = {B, A};
    rc = ckpt_local_flush(only_a, 1, 10, D, out, sizeof out);
    is_int(rc, CKPT_EINCOMPLETE, "flush of A alone (rank 3's copy missing) is incomplete");
    ok(strstr(ckpt_last_error(), "shard-3.ftsh") != NULL, "  the message names shard-3.ftsh: %s",
       ckpt_last_error());
    ok(!exists(D), "  and nothing was created at the destination");
    {
        /* A path cut to fit would name another directory: refused first. */
        char small[8] = "x";
        rc = ckpt_local_flush(both, 2, 10, D, small, sizeof small);
        ok(rc == CKPT_EINVAL && strstr(ckpt_last_error(), "too small") != NULL,
           "flush with a too small output buffer: EINVAL (rc %d: %s)", rc, ckpt_last_error());
        is_str(small, "", "  the buffer holds no cut path");
        ok(!exists(D), "  and nothing was created at the destination");
    }
    rc = ckpt_local_flush(both, 2, 10, D, out, sizeof out);
    snprintf(path, sizeof path, "%s/step-00000010", D);
    ok(rc == CKPT_OK && strcmp(out, path) == 0, "flush of A and B commits %s (rc %d: %s)",
       path, rc, rc ? ckpt_last_error() : "");
    {
        ckpt_t *c = NULL;
        static float w[NW];
        int64_t meta[NMETA];
        rc = ckpt_open(path, &c);
        if (rc == CKPT_OK)
            rc = ckpt_verify(c);
        is_int(rc, CKPT_OK, "  ckpt_verify accepts the flushed checkpoint");
        int same = 1;
        for (int r = 0; r < WORLD; r++) {
            snprintf(path2, sizeof path2, "%s/shard-%d.ftsh", path, r);
            same &= same_bytes(path2, s1.bytes[r], s1.len[r]);
        }
        ok(same, "  every shard file's bytes equal what its rank wrote");
        ok(c && ckpt_read_tensor(c, "model.w", w, sizeof w) == CKPT_OK &&
               memcmp(w, s1.w, sizeof w) == 0 &&
               ckpt_read_tensor(c, "meta", meta, sizeof meta) == CKPT_OK &&
               memcmp(meta, s1.meta, sizeof meta) == 0,
           "  and its tensors read back as saved");
        ok(c && strcmp(ckpt_record_json(c), record) == 0, "  with the record");
        ckpt_close(c);
    }
    snprintf(path2, sizeof path2, "%s/LATEST", D);
    {
        unsigned char *latest = NULL;
        size_t len = 0;
        ok(read_file(path2, &latest, &len) == 0 && len == 14 &&
               memcmp(latest, "step-00000010\n", 14) == 0,
           "  LATEST names it");
        free(latest);
    }
    is_int(count_entries(D), 2, "  nothing else in the destination (no temp dir)");
    rc = ckpt_local_flush(both, 2, 10, D, out, sizeof out);
    is_int(rc, CKPT_EEXIST, "a second flush of step 10 is refused: it exists");

    /* ---- damaged copies ----------------------------------------------- */
    {
        char C[512];
        unsigned char *bad = malloc(s1.len[1]);
        snprintf(C, sizeof C, "%s/nodeC", tmp);
        memcpy(bad, s1.bytes[1], s1.len[1]);
        bad[s1.len[1] / 2] ^= 0x01;
        rc = ckpt_shard_put(C, 20, 1, bad, s1.len[1], s1.info[1].xxh64);
        is_int(rc, CKPT_ECORRUPT, "a copy damaged in transfer is refused by shard_put");
        ok(strstr(ckpt_last_error(), "checksum") != NULL, "  naming the checksum: %s",
           ckpt_last_error());
        snprintf(path, sizeof path, "%s/.tmp-step-00000020", C);
        ok(count_entries(path) <= 0, "  and nothing of it is on disk");
        rc = ckpt_shard_put(C, 20, 1, bad, 10, XXH64(bad, 10, 0));
        is_int(rc, CKPT_ECORRUPT, "  10 bytes with a matching checksum are too short");
        free(bad);
    }
    snprintf(path, sizeof path, "%s/step-00000010/shard-1.ftsh", A);
    flip_middle(path);
    snprintf(path, sizeof path, "%s/step-00000010", A);
    rc = ckpt_local_verify(path, &missing);
    ok(rc == CKPT_ECORRUPT && missing == 1 && strstr(ckpt_last_error(), "shard-1.ftsh"),
       "a copy damaged on disk on A is caught by local_verify: %s", ckpt_last_error());
    snprintf(D, sizeof D, "%s/shared2", tmp);
    rc = ckpt_local_flush(both, 2, 10, D, out, sizeof out);
    snprintf(path2, sizeof path2, "%s/step-00000010/shard-1.ftsh", D);
    ok(rc == CKPT_OK && same_bytes(path2, s1.bytes[1], s1.len[1]),
       "flush skips A's bad shard-1 for B's good one (rc %d: %s)", rc,
       rc ? ckpt_last_error() : "");
    snprintf(path, sizeof path, "%s/step-00000010", D);
    {
        ckpt_t *c = NULL;
        rc = ckpt_open(path, &c);
        if (rc == CKPT_OK)
            rc = ckpt_verify(c);
        ckpt_close(c);
        is_int(rc, CKPT_OK, "  and the result verifies");
    }
    snprintf(path, sizeof path, "%s/step-00000010/shard-1.ftsh", B);
    flip_middle(path);
    snprintf(D, sizeof D, "%s/shared3", tmp);
    rc = ckpt_local_flush(b_then_a, 2, 10, D, out, sizeof out);
    ok(rc == CKPT_ECORRUPT && strstr(ckpt_last_error(), "shard-1.ftsh"),
       "with both copies of shard 1 bad the flush is refused: %s", ckpt_last_error());
    is_int(count_entries(D), 0, "  and leaves nothing in the destination");
    ok(out[0] == '\0', "  and no path");
    {
        FILE *f = fopen(path, "wb"); /* B's shard-1 made good again */
        ok(f && fwrite(s1.bytes[1], 1, s1.len[1], f) == s1.len[1] && fclose(f) == 0,
           "B's shard-1 rewritten with its good bytes");
    }

    /* ---- a truncated file, a torn save -------------------------------- */
    snprintf(path, sizeof path, "%s/step-00000010/shard-3.ftsh", B);
    ok(truncate(path, (off_t)s1.len[3] - 10) == 0, "B's shard-3 truncated by 10 bytes");
    rc = ckpt_local_scan(B, &steps, &nsteps);
    ok(rc == CKPT_OK && nsteps == 1 && steps[0].npresent == 2 && !steps[0].present[3],
       "  scan counts it absent");
    ckpt_local_scan_free(steps, nsteps);
    snprintf(path, sizeof path, "%s/step-00000010", B);
    rc = ckpt_local_verify(path, &missing);
    ok(rc == CKPT_ECORRUPT && missing == 1 && strstr(ckpt_last_error(), "shard-3.ftsh"),
       "  local_verify calls it corrupt, not missing (rc %d, %d missing: shard 0): %s", rc,
       missing, ckpt_last_error());
    snprintf(D, sizeof D, "%s/shared4", tmp);
    rc = ckpt_local_flush(both, 2, 10, D, out, sizeof out);
    ok(rc == CKPT_EINCOMPLETE && strstr(ckpt_last_error(), "shard-3.ftsh"),
       "  flush: no root holds shard 3 any more: %s", ckpt_last_error());
    rc = write_own(&s1, A, 30, 0);
    if (rc == CKPT_OK)
        rc = put(&s1, A, 30, 3);
    is_int(rc, CKPT_OK, "a torn save: shards of step 30 written on A, never sealed");
    rc = ckpt_local_scan(A, &steps, &nsteps);
    ok(rc == CKPT_OK && nsteps == 1 && steps[0].step == 10,
       "  scan does not see it");
    ckpt_local_scan_free(steps, nsteps);
    const char *a_only30[] = {A};
    snprintf(D, sizeof D, "%s/shared5", tmp);
    is_int(ckpt_local_flush(a_only30, 1, 30, D, out, sizeof out), CKPT_EINCOMPLETE,
           "  nor does flush");

    /* ---- seal: keep, stale steps, leftovers, failures ------------------- */
    {
        char K[512], scratch[512];
        snprintf(K, sizeof K, "%s/keep", tmp);
        snprintf(scratch, sizeof scratch, "%s/scratch", tmp);
        rc = CKPT_OK;
        for (uint64_t step = 1; step <= 4 && rc == CKPT_OK; step++) {
            rc = put(&s1, K, step, 0);
            if (rc == CKPT_OK)
                rc = seal(&s1, K, step, 2, &present);
        }
        is_int(rc, CKPT_OK, "steps 1 to 4 sealed with keep 2");
        rc = ckpt_local_scan(K, &steps, &nsteps);
        ok(rc == CKPT_OK && nsteps == 2 && steps[0].step == 4 && steps[1].step == 3,
           "  only the newest two are left, newest first");
        ckpt_local_scan_free(steps, nsteps);

        /* The trainer's background save seals with a keep no root reaches
         * (nothing pruned on the training thread) and prunes afterwards on
         * its helper thread, naming the step just sealed. */
        char P[512], leftover[600];
        snprintf(P, sizeof P, "%s/prune-after", tmp);
        rc = CKPT_OK;
        for (uint64_t step = 1; step <= 4 && rc == CKPT_OK; step++) {
            rc = put(&s1, P, step, 0);
            if (rc == CKPT_OK)
                rc = seal(&s1, P, step, INT_MAX, &present);
        }
        rc = rc == CKPT_OK ? ckpt_local_scan(P, &steps, &nsteps) : rc;
        ok(rc == CKPT_OK && nsteps == 4, "seal with keep INT_MAX prunes nothing (%zu steps)",
           nsteps);
        ckpt_local_scan_free(steps, nsteps);
        /* A crashed save's leftovers: an older step's temp dir, and a
         * newer one (a save in flight). */
        snprintf(leftover, sizeof leftover, "%s/.tmp-step-00000002", P);
        mkdir(leftover, 0755);
        snprintf(leftover, sizeof leftover, "%s/.tmp-step-00000005", P);
        mkdir(leftover, 0755);
        rc = ckpt_prune(P, 2, "step-00000004", &removed);
        is_int(rc, CKPT_OK, "  then ckpt_prune(keep 2, the sealed step in use)");
        rc = ckpt_local_scan(P, &steps, &nsteps);
        ok(rc == CKPT_OK && nsteps == 2 && steps[0].step == 4 && steps[1].step == 3 &&
               removed == 3, "  keeps steps 4 and 3 (%d removed: steps 1, 2 and the older temp dir)",
           removed);
        ckpt_local_scan_free(steps, nsteps);
        snprintf(leftover, sizeof leftover, "%s/.tmp-step-00000002", P);
        ok(!exists(leftover), "  the older save's temp dir is gone");
        snprintf(leftover, sizeof leftover, "%s/.tmp-step-00000005", P);
        ok(exists(leftover), "  a newer save's temp dir (in flight) stays");
        rc = ckpt_prune(P, 1, "step-00000003", &removed);
        rc = rc == CKPT_OK ? ckpt_local_scan(P, &steps, &nsteps) : rc;
        ok(rc == CKPT_OK && nsteps == 2 && removed == 0,
           "  keep 1 never removes the step named in use (3), nor the newest (4)");
        ckpt_local_scan_free(steps, nsteps);

        /* A stale step 5 (state 1, shards 0-2), then a new save of step 5
         * (state 2, shard 3 only) replaces it. */
        for (int r = 0; r < 3; r++)
            put(&s1, K, 5, r);
        rc = seal(&s1, K, 5, 10, &present);
        ok(rc == CKPT_OK && present == 3, "a step 5 sealed with 3 shards");
        rc = make_all(&s2, scratch, 5);
        if (rc == CKPT_OK)
            rc = put(&s2, K, 5, 3);
        is_int(rc, CKPT_OK, "a new save of step 5, with other contents, puts shard 3");
        rc = seal(&s2, K, 5, 10, &present);
        ok(rc == CKPT_OK && present == 1, "  seal replaces the stale step 5 (rc %d: %s)", rc,
           rc ? ckpt_last_error() : "");
        rc = ckpt_local_scan(K, &steps, &nsteps);
        ok(rc == CKPT_OK && nsteps == 3 && steps[0].step == 5 && steps[0].npresent == 1 &&
               steps[0].present[3],
           "  step 5 now holds only shard 3");
        ckpt_local_scan_free(steps, nsteps);
        snprintf(path, sizeof path, "%s/step-00000005", K);
        {
            ckpt_t *c = NULL;
            rc = ckpt_open(path, &c);
            ok(rc == CKPT_OK && ckpt_shard_at(c, 3)->xxh64 == s2.info[3].xxh64,
               "  its manifest is the new save's");
            ckpt_close(c);
        }
        is_int(ckpt_local_verify(path, &missing), CKPT_OK, "  and it verifies");
        snprintf(path, sizeof path, "%s/.tmp-step-00000005", K);
        ok(!exists(path), "  the stale one is gone (no temp dir left)");
        is_int(count_entries(K), 3, "  the root holds steps 3, 4 and 5 only");

        /* Manifests of two roots that disagree about step 5. */
        snprintf(D, sizeof D, "%s/shared6", tmp);
        {
            char S[512];
            const char *disagree[] = {K, S};
            snprintf(S, sizeof S, "%s/other5", tmp);
            for (int r = 0; r < 3; r++)
                put(&s1, S, 5, r);
            rc = seal(&s1, S, 5, 3, &present);
            is_int(rc, CKPT_OK, "another root holds a different step 5 (shards 0-2)");
            rc = ckpt_local_flush(disagree, 2, 5, D, out, sizeof out);
            ok(rc == CKPT_ECORRUPT && strstr(ckpt_last_error(), "not the same checkpoint"),
               "  flush of both is refused: %s", ckpt_last_error());
            ok(!exists(D), "  before anything is written");
        }

        /* After a resume from step 4: steps 5 and later are stale. */
        rc = put(&s1, K, 6, 0);
        if (rc == CKPT_OK)
            rc = seal(&s1, K, 6, 10, &present);
        if (rc == CKPT_OK)
            rc = put(&s1, K, 7, 1); /* a crashed save of step 7 */
        is_int(rc, CKPT_OK, "step 6 sealed and a temp dir of step 7 left");
        ckpt_shard_info_t info;
        rc = ckpt_shard_write(K, 6, 0, WORLD, s1.t, 3, &opts, &info);
        is_int(rc, CKPT_EEXIST, "  a new save of step 6 cannot write its shard (stale step-6)");
        rc = ckpt_local_drop_after(K, 4, &removed);
        ok(rc == CKPT_OK && removed == 3, "drop_after(4) removes steps 5, 6 and the temp dir "
           "of 7 (rc %d, removed %d)", rc, removed);
        rc = ckpt_local_scan(K, &steps, &nsteps);
        ok(rc == CKPT_OK && nsteps == 2 && steps[0].step == 4, "  steps 3 and 4 are left");
        ckpt_local_scan_free(steps, nsteps);
        is_int(count_entries(K), 2, "  and nothing else");
        rc = ckpt_shard_write(K, 6, 0, WORLD, s1.t, 3, &opts, &info);
        is_int(rc, CKPT_OK, "  now the save of step 6 writes its shard");
        snprintf(path, sizeof path, "%s/no-such-root", tmp);
        is_int(ckpt_local_drop_after(path, 4, &removed), CKPT_OK,
               "drop_after of a missing root is fine");

        /* Seal failures. */
        rc = seal(&s1, K, 8, 3, &present);
        ok(rc == CKPT_EINCOMPLETE && present == 0, "seal with no shard written: incomplete");
        rc = put(&s2, K, 9, 0); /* another save's shard 0 ... */
        if (rc == CKPT_OK)
            rc = seal(&s1, K, 9, 3, &present); /* ... sealed with s1's infos */
        ok(rc == CKPT_ECORRUPT, "seal refuses a file that is another checkpoint's: %s",
           ckpt_last_error());
        snprintf(path, sizeof path, "%s/.tmp-step-00000009", K);
        ok(!exists(path), "  and removes the temp dir");
        snprintf(path2, sizeof path2, "%s/step-00000009", K);
        ok(!exists(path2), "  nothing sealed");
        rc = put(&s1, K, 9, 0);
        snprintf(path, sizeof path, "%s/.tmp-step-00000009/shard-0.ftsh", K);
        ok(rc == CKPT_OK && truncate(path, 100) == 0, "a shard of step 9 cut to 100 bytes");
        rc = seal(&s1, K, 9, 3, &present);
        ok(rc == CKPT_ECORRUPT && strstr(ckpt_last_error(), "shard-0.ftsh"),
           "  seal refuses the file of the wrong size: %s", ckpt_last_error());
        rc = put(&s1, K, 9, 1);
        snprintf(path, sizeof path, "%s/.tmp-step-00000009/stray.txt", K);
        FILE *f = fopen(path, "w");
        if (f)
            fclose(f);
        snprintf(path, sizeof path, "%s/.tmp-step-00000009/shard-7.ftsh", K);
        f = fopen(path, "w");
        if (f)
            fclose(f);
        rc = seal(&s1, K, 9, 3, &present);
        snprintf(path, sizeof path, "%s/step-00000009", K);
        ok(rc == CKPT_OK && present == 1 && count_entries(path) == 2,
           "seal removes strays (a stray file, a shard index past the world)");

        /* Bad arguments: nothing is touched. */
        rc = put(&s1, K, 11, 0);
        ckpt_shard_info_t swapped[WORLD];
        memcpy(swapped, s1.info, sizeof swapped);
        swapped[0] = s1.info[1];
        swapped[1] = s1.info[0];
        is_int(ckpt_local_seal(K, 11, s1.t, 3, record, &opts, s1.info, WORLD, 0, NULL),
               CKPT_EINVAL, "seal: keep 0");
        is_int(ckpt_local_seal(K, 11, s1.t, 3, record, &opts, s1.info, 0, 3, NULL),
               CKPT_EINVAL, "seal: no shards");
        is_int(ckpt_local_seal(K, 11, s1.t, 3, record, &opts, NULL, WORLD, 3, NULL),
               CKPT_EINVAL, "seal: NULL infos");
        is_int(ckpt_local_seal(NULL, 11, s1.t, 3, record, &opts, s1.info, WORLD, 3, NULL),
               CKPT_EINVAL, "seal: NULL root");
        is_int(ckpt_local_seal(K, 11, s1.t, 3, record, &opts, swapped, WORLD, 3, NULL),
               CKPT_EINVAL, "seal: infos that are not the ranks' slices");
        is_int(ckpt_local_seal(K, 11, s1.t, 3, "[1]", &opts, s1.info, WORLD, 3, NULL),
               CKPT_EINVAL, "seal: a record that is not an object");
        snprintf(path, sizeof path, "%s/.tmp-step-00000011/shard-0.ftsh", K);
        ok(rc == CKPT_OK && exists(path), "  and the temp dir is untouched");
        is_int(ckpt_shard_put(NULL, 1, 0, s1.bytes[0], s1.len[0], s1.info[0].xxh64),
               CKPT_EINVAL, "put: NULL root");
        is_int(ckpt_shard_put(K, 1, -1, s1.bytes[0], s1.len[0], s1.info[0].xxh64),
               CKPT_EINVAL, "put: index -1");
        is_int(ckpt_shard_put(K, 1, 65536, s1.bytes[0], s1.len[0], s1.info[0].xxh64),
               CKPT_EINVAL, "put: index 65536");
        is_int(ckpt_shard_put(K, 1, 0, NULL, s1.len[0], s1.info[0].xxh64), CKPT_EINVAL,
               "put: NULL data");
        is_int(ckpt_shard_put(K, (uint64_t)INT64_MAX + 1, 0, s1.bytes[0], s1.len[0],
                              s1.info[0].xxh64),
               CKPT_EINVAL, "put: a step above INT64_MAX");
    }
    is_int(ckpt_local_scan(NULL, &steps, &nsteps), CKPT_EINVAL, "scan: NULL root");
    is_int(ckpt_local_scan(A, NULL, &nsteps), CKPT_EINVAL, "scan: NULL out");
    snprintf(path, sizeof path, "%s/no-such-root", tmp);
    rc = ckpt_local_scan(path, &steps, &nsteps);
    ok(rc == CKPT_OK && nsteps == 0 && !steps, "scan of a missing root: no step");
    ckpt_local_scan_free(NULL, 0);
    is_int(ckpt_local_verify(NULL, NULL), CKPT_EINVAL, "verify: NULL");
    snprintf(path, sizeof path, "%s/step-00000099", A);
    is_int(ckpt_local_verify(path, NULL), CKPT_ENOTFOUND, "verify of a missing step");
    is_int(ckpt_local_flush(both, 0, 10, D, out, sizeof out), CKPT_EINVAL,
           "flush: no local roots");
    is_int(ckpt_local_flush(NULL, 2, 10, D, out, sizeof out), CKPT_EINVAL,
           "flush: NULL roots");
    is_int(ckpt_local_flush(both, 2, 10, NULL, out, sizeof out), CKPT_EINVAL,
           "flush: NULL destination");
    {
        const char *with_null[] = {A, NULL};
        is_int(ckpt_local_flush(with_null, 2, 10, D, out, sizeof out), CKPT_EINVAL,
               "flush: a NULL local root");
    }
    is_int(ckpt_local_drop_after(NULL, 1, NULL), CKPT_EINVAL, "drop_after: NULL root");

    free_state(&s1);
    free_state(&s2);
    tap_rmtree(tmp);
    return done_testing();
}

/*
 * ckpt_read_threads.c - frame-parallel reading (ckpt_set_read_threads): any
 * number of decoding threads reads the same bytes as one, for whole ranges
 * and for ranges that start and end inside frames, at levels 0 and 1; with
 * two corrupt frames every thread count fails with CKPT_ECORRUPT and names
 * the same, lower, frame; the bytes outside the bad frames are not needed
 * for a range that avoids them.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ftrain/ckpt.h"
#include "tap.h"

#define FB (64 * 1024)          /* frame bytes: many frames */
#define NW (700 * 1000)         /* floats: about 43 frames of them */
#define ND 3001                 /* doubles, an odd count */

static char root[256];
static float *w;
static double *d;

static int save(uint64_t step, int level)
{
    ckpt_tensor_t t[2];
    memset(t, 0, sizeof t);
    snprintf(t[0].name, sizeof t[0].name, "w");
    t[0].dtype = CKPT_F32, t[0].ndim = 1, t[0].shape[0] = NW, t[0].data = w;
    snprintf(t[1].name, sizeof t[1].name, "d");
    t[1].dtype = CKPT_F64, t[1].ndim = 1, t[1].shape[0] = ND, t[1].data = d;
    ckpt_opts_t o;
    ckpt_opts_default(&o);
    o.level = level;
    o.threads = 2;
    o.frame_bytes = FB;
    o.direct = 0;
    return ckpt_save(root, step, t, 2, "{\"test\":\"read_threads\"}", &o, NULL);
}

static void step_dir(uint64_t step, char *out, size_t cap)
{
    char name[64];
    ckpt_step_dirname(step, name, sizeof name);
    snprintf(out, cap, "%s/%s", root, name);
}

/* Read [off, off+len) of step with `threads` threads; rc. */
static int read_with(uint64_t step, int threads, uint64_t off, uint64_t len, void *dst)
{
    char dir[400];
    ckpt_t *c = NULL;
    step_dir(step, dir, sizeof dir);
    int rc = ckpt_open(dir, &c);
    if (rc != CKPT_OK)
        return rc;
    ckpt_set_read_threads(c, threads);
    rc = ckpt_read_range(c, off, len, dst);
    ckpt_close(c);
    return rc;
}

int main(void)
{
    tap_tmpdir(root, sizeof root, "ckpt_read_threads");
    w = malloc(NW * sizeof *w);
    d = malloc(ND * sizeof *d);
    uint32_t x = 2463534242u;
    for (int i = 0; i < NW; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        w[i] = (float)((int)(x >> 8) - (1 << 23)) * 2e-9f;
    }
    for (int i = 0; i < ND; i++)
        d[i] = i * 0.25 - 300.0;

    is_int(save(1, 1), CKPT_OK, "save level 1 (shuffled, compressed frames)");
    is_int(save(2, 0), CKPT_OK, "save level 0 (stored frames)");

    char dir[400];
    ckpt_t *c = NULL;
    step_dir(1, dir, sizeof dir);
    uint64_t total = 0;
    if (ckpt_open(dir, &c) == CKPT_OK) {
        total = ckpt_total_bytes(c);
        ckpt_close(c);
    }
    ok(total > 40 * (uint64_t)FB, "the state spans %llu frames",
       (unsigned long long)(total / FB));
    unsigned char *ref = malloc(total), *got = malloc(total);
    if (!ref || !got || total == 0)
        skip_all("out of memory");

    /* One thread is the reference; every other count reads the same bytes. */
    int counts[] = {2, 3, 4, 8, 64};
    for (uint64_t step = 1; step <= 2; step++) {
        int rc = read_with(step, 1, 0, total, ref);
        is_int(rc, CKPT_OK, "step %llu: whole range with 1 thread", (unsigned long long)step);
        ok(memcmp(ref, w, (size_t)NW * sizeof *w) == 0, "step %llu: the floats came back",
           (unsigned long long)step);
        for (size_t k = 0; k < sizeof counts / sizeof *counts; k++) {
            memset(got, 0xa5, total);
            rc = read_with(step, counts[k], 0, total, got);
            ok(rc == CKPT_OK && memcmp(got, ref, total) == 0,
               "step %llu: %d threads read the same %llu bytes", (unsigned long long)step,
               counts[k], (unsigned long long)total);
        }
        /* A range that starts and ends inside frames: partial frames at both
         * ends, whole ones between. */
        uint64_t off = 3 * FB + 1234, len = 17 * FB + 999;
        memset(got, 0xa5, total);
        rc = read_with(step, 4, off, len, got);
        ok(rc == CKPT_OK && memcmp(got, ref + off, len) == 0,
           "step %llu: 4 threads, a range from inside frame 3 to inside frame 20",
           (unsigned long long)step);
        ok(got[len] == 0xa5, "step %llu: nothing was written past the range",
           (unsigned long long)step);
    }

    /* Two bad frames in the stored shard (step 2): frames 30 and 10. */
    char shard[500];
    step_dir(2, dir, sizeof dir);
    snprintf(shard, sizeof shard, "%s/shard-0.ftsh", dir);
    int fd = open(shard, O_RDWR), flipped = 0;
    int bad[] = {30, 10};
    for (int i = 0; i < 2 && fd >= 0; i++) {
        unsigned char byte = 0;
        off_t at = 16 + (off_t)bad[i] * FB + 777; /* header, then stored frames */
        flipped += pread(fd, &byte, 1, at) == 1 && (byte ^= 0x04, pwrite(fd, &byte, 1, at) == 1);
    }
    if (fd >= 0)
        close(fd);
    ok(flipped == 2, "flipped a bit in stored frames 10 and 30");
    int threads[] = {1, 2, 4, 8};
    for (size_t k = 0; k < sizeof threads / sizeof *threads; k++) {
        int rc = read_with(2, threads[k], 0, total, got);
        is_int(rc, CKPT_ECORRUPT, "%d thread(s): the whole range is corrupt", threads[k]);
        ok(strstr(ckpt_last_error(), "frame 10 ") != NULL,
           "%d thread(s): the message names the lower bad frame: %s", threads[k],
           ckpt_last_error());
    }
    int rc = read_with(2, 4, 11 * (uint64_t)FB, 19 * (uint64_t)FB, got);
    ok(rc == CKPT_OK && memcmp(got, ref + 11 * FB, 19 * FB) == 0,
       "4 threads: frames 11-29, between the bad ones, still read");

    free(ref);
    free(got);
    free(w);
    free(d);
    tap_rmtree(root);
    return done_testing();
}

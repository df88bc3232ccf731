/*
 * ckpt_stored.c - level 0 (stored, uncompressed) frames and the
 * frame-parallel encoder: round trips for 1..8 encoder threads and both
 * levels give the same bytes; a stored frame with a flipped bit is reported
 * corrupt by a range read and by verify; stored shards are as large as the
 * data they hold; a lying byte-plane header (level 1) is reported corrupt;
 * level 1 stores float weights in fewer bytes than plain zstd level 1 of
 * each byte plane (the writer's entropy-leaning compressor wins on the
 * sign/exponent bytes and the level's own compressor is never worse).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zstd.h>

#include "ftrain/ckpt.h"
#include "tap.h"

#define NF (300 * 1000) /* floats per tensor: several frames of 64 KiB */

static char root[256];

static int save(uint64_t step, int level, int threads, float *a, double *b)
{
    ckpt_tensor_t t[2];
    memset(t, 0, sizeof t);
    snprintf(t[0].name, sizeof t[0].name, "w");
    t[0].dtype = CKPT_F32;
    t[0].ndim = 1;
    t[0].shape[0] = NF;
    t[0].data = a;
    snprintf(t[1].name, sizeof t[1].name, "d");
    t[1].dtype = CKPT_F64;
    t[1].ndim = 1;
    t[1].shape[0] = 1000;
    t[1].data = b;
    ckpt_opts_t o;
    ckpt_opts_default(&o);
    o.level = level;
    o.threads = threads;
    o.frame_bytes = 64 * 1024;
    uint64_t total = 0;
    if (ckpt_layout(t, 2, &total) != CKPT_OK)
        return -1;
    return ckpt_save(root, step, t, 2, "{\"epoch\":0}", &o, NULL);
}

static int read_back(uint64_t step, const float *a, const double *b, uint64_t *file_bytes)
{
    char dir[512], name[64];
    ckpt_step_dirname(step, name, sizeof name);
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    ckpt_t *c = NULL;
    int rc = ckpt_open(dir, &c);
    float *ra = malloc(NF * sizeof *ra);
    double *rb = malloc(1000 * sizeof *rb);
    if (rc == CKPT_OK)
        rc = ckpt_verify(c);
    if (rc == CKPT_OK)
        rc = ckpt_read_tensor(c, "w", ra, NF * sizeof *ra);
    if (rc == CKPT_OK)
        rc = ckpt_read_tensor(c, "d", rb, 1000 * sizeof *rb);
    if (rc == CKPT_OK && (memcmp(ra, a, NF * sizeof *a) || memcmp(rb, b, 1000 * sizeof *b)))
        rc = -100;
    if (rc == CKPT_OK && file_bytes)
        *file_bytes = ckpt_shard_at(c, 0)->file_bytes;
    free(ra);
    free(rb);
    ckpt_close(c);
    return rc;
}

/* Gaussian-like float weights (sum of four uniforms, sigma about 0.02):
 * random mantissas, a low-entropy sign/exponent byte. */
static void gaussian(float *w, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        double s = 0;
        for (int k = 0; k < 4; k++) {
            seed = seed * 1664525u + 1013904223u;
            s += (double)(seed >> 8) / (double)(1u << 24);
        }
        w[i] = (float)((s - 2.0) * 0.034);
    }
}

/* What plain zstd level 1 of each byte plane would take for the frames of
 * n floats cut into frames of fb bytes: per frame the 20-byte plane header
 * and each plane compressed (or stored when that is not smaller), plus the
 * shard's header, seek table and footer.  0 on a zstd failure. */
static uint64_t plain_planes_bytes(const float *w, size_t n, size_t fb)
{
    const unsigned char *raw = (const unsigned char *)w;
    size_t ne = fb / 4, frames = (n * 4 + fb - 1) / fb;
    unsigned char *plane = malloc(ne), *out = malloc(ZSTD_compressBound(ne));
    uint64_t total = 16 + 48 * (uint64_t)frames + 48;
    for (size_t f = 0; f < frames && plane && out; f++) {
        size_t m = (n * 4 - f * fb < fb ? n * 4 - f * fb : fb) / 4;
        total += 20;
        for (int p = 0; p < 4; p++) {
            for (size_t i = 0; i < m; i++)
                plane[i] = raw[f * fb + 4 * i + (size_t)p];
            size_t z = ZSTD_compress(out, ZSTD_compressBound(m), plane, m, 1);
            if (ZSTD_isError(z))
                return 0;
            total += z < m ? z : m;
        }
    }
    free(plane);
    free(out);
    return total;
}

/* Level 1 against plain zstd level 1 per plane, on Gaussian weights. */
static void planes_against_zstd(void)
{
    const size_t n = (size_t)1 << 20, fb = (size_t)1 << 20;
    float *w = malloc(n * sizeof *w), *back = malloc(n * sizeof *back);
    gaussian(w, n, 777);
    ckpt_tensor_t t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "weights");
    t.dtype = CKPT_F32;
    t.ndim = 1;
    t.shape[0] = n;
    t.data = w;
    ckpt_opts_t o;
    ckpt_opts_default(&o);
    o.level = 1;
    o.threads = 2;
    o.frame_bytes = fb;
    o.adapt = 0; /* every frame compressed */
    uint64_t total = 0;
    int rc = ckpt_layout(&t, 1, &total);
    if (rc == CKPT_OK)
        rc = ckpt_save(root, 100, &t, 1, "{\"epoch\":0}", &o, NULL);
    ok(rc == CKPT_OK, "level 1 save of 4 MiB of Gaussian weights");
    char dir[512], name[64];
    ckpt_step_dirname(100, name, sizeof name);
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    ckpt_t *c = NULL;
    if (rc == CKPT_OK)
        rc = ckpt_open(dir, &c);
    if (rc == CKPT_OK)
        rc = ckpt_read_tensor(c, "weights", back, n * sizeof *back);
    ok(rc == CKPT_OK && memcmp(back, w, n * sizeof *w) == 0, "they read back bit for bit");
    uint64_t got = rc == CKPT_OK ? ckpt_shard_at(c, 0)->file_bytes : 0;
    uint64_t plain = plain_planes_bytes(w, n, fb);
    ok(got > 0 && plain > 0 && got < plain,
       "the shard (%llu bytes) is smaller than zstd level 1 of each plane (%llu)",
       (unsigned long long)got, (unsigned long long)plain);
    ok(got > 0 && got < n * 4 * 10 / 11, "and smaller than the raw bytes by over 9%% (%llu of %zu)",
       (unsigned long long)got, n * 4);
    ckpt_close(c);
    free(w);
    free(back);
}

int main(void)
{
    tap_tmpdir(root, sizeof root, "ckpt_stored");
    float *a = malloc(NF * sizeof *a);
    double b[1000];
    uint32_t x = 12345;
    for (int i = 0; i < NF; i++) {
        x = x * 1664525u + 1013904223u;
        a[i] = (float)((int)(x >> 8) - (1 << 23)) * 1e-9f;
    }
    for (int i = 0; i < 1000; i++)
        b[i] = i * 0.5;

    uint64_t step = 1, stored_bytes = 0, zbytes = 0;
    int threads[] = {1, 2, 3, 8};
    for (int lv = 0; lv <= 1; lv++)
        for (int k = 0; k < 4; k++, step++) {
            int rc = save(step, lv, threads[k], a, b);
            ok(rc == CKPT_OK, "save level %d with %d encoder thread(s)", lv, threads[k]);
            if (rc != CKPT_OK)
                diag("%s", ckpt_last_error());
            uint64_t fb = 0;
            rc = read_back(step, a, b, &fb);
            ok(rc == CKPT_OK, "level %d, %d thread(s): verify and read back the same bytes",
               lv, threads[k]);
            if (lv == 0)
                stored_bytes = fb;
            else
                zbytes = fb;
        }
    ok(stored_bytes >= NF * 4 + 8000, "a stored shard holds all %d raw bytes (%llu)",
       NF * 4 + 8000, (unsigned long long)stored_bytes);
    ok(zbytes < stored_bytes, "a level-1 shard is smaller (%llu < %llu)",
       (unsigned long long)zbytes, (unsigned long long)stored_bytes);

    /* Flip one bit inside the stored data of step 1 (level 0, 1 thread). */
    char shard[600], dir[512], name[64];
    ckpt_step_dirname(1, name, sizeof name);
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    snprintf(shard, sizeof shard, "%s/shard-0.ftsh", dir);
    int fd = open(shard, O_RDWR);
    unsigned char byte = 0;
    off_t at = 16 + 100000; /* past the header, inside frame 1 */
    int flipped = fd >= 0 && pread(fd, &byte, 1, at) == 1 &&
                  (byte ^= 0x10, pwrite(fd, &byte, 1, at) == 1);
    if (fd >= 0)
        close(fd);
    ok(flipped, "flipped a bit in a stored frame");
    ckpt_t *c = NULL;
    int rc = ckpt_open(dir, &c);
    float *buf = malloc(NF * sizeof *buf);
    int rr = rc == CKPT_OK ? ckpt_read_range(c, 0, NF * sizeof *buf, buf) : rc;
    is_int(rr, CKPT_ECORRUPT, "a range read over the flipped stored frame is corrupt");
    ok(strstr(ckpt_last_error(), "checksum") != NULL, "the message says checksum: %s",
       ckpt_last_error());
    int rv = rc == CKPT_OK ? ckpt_verify(c) : rc;
    is_int(rv, CKPT_ECORRUPT, "verify reports the flipped stored frame");
    int r0 = rc == CKPT_OK ? ckpt_read_range(c, 0, 4096, buf) : rc;
    is_int(r0, CKPT_OK, "frame 0 of the same shard still reads");
    ckpt_close(c);
    free(buf);
    free(a);

    /* Level 1 writes float frames as byte planes; lie in frame 0's plane
     * header of step 5 (level 1, 1 thread): a bad mask, then a plane length
     * that does not add up.  Both must be reported, never decoded. */
    ckpt_step_dirname(5, name, sizeof name);
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    snprintf(shard, sizeof shard, "%s/shard-0.ftsh", dir);
    const struct { off_t at; unsigned char v; const char *what, *says; } lies[] = {
        {16 + 16, 0xff, "a plane mask with unknown bits", "plane mask"},
        {16 + 1, 0x7f, "a wrong plane length", "plane 0"},
    };
    for (int k = 0; k < 2; k++) {
        fd = open(shard, O_RDWR);
        unsigned char old = 0;
        int done = fd >= 0 && pread(fd, &old, 1, lies[k].at) == 1 &&
                   pwrite(fd, &lies[k].v, 1, lies[k].at) == 1;
        c = NULL;
        rc = done ? ckpt_open(dir, &c) : -1;
        float *f0 = malloc(4096);
        rr = rc == CKPT_OK ? ckpt_read_range(c, 0, 4096, f0) : rc;
        is_int(rr, CKPT_ECORRUPT, "%s is corrupt", lies[k].what);
        ok(strstr(ckpt_last_error(), lies[k].says) != NULL, "the message names it: %s",
           ckpt_last_error());
        ckpt_close(c);
        free(f0);
        if (done && pwrite(fd, &old, 1, lies[k].at) != 1)
            diag("could not restore the byte");
        if (fd >= 0)
            close(fd);
    }

    planes_against_zstd();

    tap_rmtree(root);
    return done_testing();
}

/*
 * ckpt_direct.c - shard writes with O_DIRECT (ckpt_opts_t.direct) and their
 * fallbacks.  A direct save must produce the same bytes as a buffered one,
 * and when the filesystem refuses O_DIRECT (at open, at the first write or in
 * the middle of a file) or writes short, the save still succeeds with the
 * same bytes.  A write error that is not a refusal fails the save cleanly:
 * no shard left behind, the previous checkpoint untouched.
 *
 * The refusals are simulated by interposing open(2) and write(2) in this
 * program: the library's calls resolve to the definitions below, which count
 * O_DIRECT use (so a test cannot pass with the direct path switched off) and
 * inject the failure the current case asks for before calling the kernel.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ftrain/ckpt.h"
#include "tap.h"

/* ---- the interposer ------------------------------------------------------ */

enum { FAULT_NONE, FAULT_OPEN, FAULT_WRITE, FAULT_SHORT, FAULT_ENOSPC };
static int fault;           /* what to inject */
static int fault_after;     /* FAULT_WRITE/ENOSPC: direct writes let through first */
static int n_direct_opens, n_direct_writes, n_injected;
static int direct_fd = -1;      /* the last descriptor opened with O_DIRECT */
static long direct_delay_us;    /* a slow disk: sleep this long per direct write */
static size_t n_buffered_bytes; /* written to it after O_DIRECT was cleared */

int open(const char *path, int flags, ...)
{
    mode_t mode = 0;
    if (flags & O_CREAT) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    if (flags & O_DIRECT) {
        n_direct_opens++;
        if (fault == FAULT_OPEN) {
            n_injected++;
            errno = EINVAL;
            return -1;
        }
    }
    int fd = (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
    if (fd >= 0 && (flags & O_DIRECT))
        direct_fd = fd;
    else if (fd == direct_fd)
        direct_fd = -1;
    return fd;
}

ssize_t write(int fd, const void *buf, size_t len)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && (fl & O_DIRECT)) {
        int k = n_direct_writes++;
        if (direct_delay_us > 0)
            usleep((useconds_t)direct_delay_us);
        if ((fault == FAULT_WRITE || fault == FAULT_ENOSPC) && k >= fault_after) {
            n_injected++;
            errno = fault == FAULT_WRITE ? EINVAL : ENOSPC;
            return -1;
        }
        if (fault == FAULT_SHORT && k == 0 && len > 4096) {
            n_injected++;
            len = 4096; /* an aligned short write, as on a nearly full disk */
        }
    } else if (fl >= 0 && fd == direct_fd) {
        n_buffered_bytes += len;
    }
    return (ssize_t)syscall(SYS_write, fd, buf, len);
}

/* ---- a state of odd sizes, larger than two 8 MiB staging chunks --------- */

#define ROWS 5003
#define COLS 1111
#define NB 12345
#define NI 777

static float *w, *b;
static int64_t *meta;
static ckpt_tensor_t t[3];
static char root[512];

static void make_state(void)
{
    uint64_t x = 88172645463325252ull;
    w = malloc(sizeof *w * ROWS * COLS);
    b = malloc(sizeof *b * NB);
    meta = malloc(sizeof *meta * NI);
    if (!w || !b || !meta)
        skip_all("out of memory");
    for (size_t i = 0; i < (size_t)ROWS * COLS; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        /* weight-like: small, varied mantissas, few exponents */
        w[i] = (float)(((double)(x >> 11) / 9007199254740992.0 - 0.5) * 0.04);
    }
    for (size_t i = 0; i < NB; i++)
        b[i] = (float)((double)(i % 97) * 0.001 - 0.05);
    for (size_t i = 0; i < NI; i++)
        meta[i] = (int64_t)(i * i) - 5000;
    memset(t, 0, sizeof t);
    snprintf(t[0].name, CKPT_NAME_MAX, "model.w");
    t[0].dtype = CKPT_F32, t[0].ndim = 2, t[0].shape[0] = ROWS, t[0].shape[1] = COLS;
    t[0].data = w;
    snprintf(t[1].name, CKPT_NAME_MAX, "meta");
    t[1].dtype = CKPT_I64, t[1].ndim = 1, t[1].shape[0] = NI, t[1].data = meta;
    snprintf(t[2].name, CKPT_NAME_MAX, "model.b");
    t[2].dtype = CKPT_F32, t[2].ndim = 1, t[2].shape[0] = NB, t[2].data = b;
}

/* Save step 1 under root/<sub> with the given options; rc of ckpt_save. */
static size_t frame_bytes = 1u << 20;

static int save_adapt(const char *sub, int level, int direct, int adapt)
{
    char dir[600];
    ckpt_opts_t o;
    ckpt_opts_default(&o);
    o.level = level;
    o.direct = direct;
    o.adapt = adapt;
    o.frame_bytes = frame_bytes;
    o.threads = 2;
    snprintf(dir, sizeof dir, "%s/%s", root, sub);
    mkdir(dir, 0755);
    n_direct_opens = n_direct_writes = n_injected = 0;
    n_buffered_bytes = 0;
    direct_fd = -1;
    return ckpt_save(dir, 1, t, 3, "{\"test\":\"direct\"}", &o, NULL); /* one process */
}

/* The byte comparisons below need reproducible files: adapt off. */
static int save(const char *sub, int level, int direct)
{
    return save_adapt(sub, level, direct, 0);
}

/* Frames of root/sub's shard 0, and how many of them are stored, from the
 * footer and seek table (docs/checkpoint-format.md): -1 when unreadable. */
static int stored_frames(const char *sub, int *nframes)
{
    char path[700];
    unsigned char foot[48], e[48];
    snprintf(path, sizeof path, "%s/%s/step-00000001/shard-0.ftsh", root, sub);
    int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY, 0), n = -1;
    struct stat st;
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) == 0 && pread(fd, foot, sizeof foot, st.st_size - 48) == 48) {
        uint64_t table = 0, nf = 0;
        for (int i = 7; i >= 0; i--)
            table = (table << 8) | foot[i], nf = (nf << 8) | foot[8 + i];
        n = 0;
        for (uint64_t f = 0; f < nf; f++) {
            if (pread(fd, e, sizeof e, (off_t)(table + 48 * f)) != 48) {
                n = -1;
                break;
            }
            uint32_t flags = e[40] | (uint32_t)e[41] << 8 | (uint32_t)e[42] << 16 |
                             (uint32_t)e[43] << 24;
            n += (flags & 2u) != 0; /* CKPT_FRAME_STORED */
        }
        *nframes = (int)nf;
    }
    close(fd);
    return n;
}

/* Read a whole file; NULL when it cannot. */
static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    unsigned char *p = NULL;
    long n;
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (p = malloc((size_t)n + 1)) && fread(p, 1, (size_t)n, f) == (size_t)n) {
        *len = (size_t)n;
    } else {
        free(p);
        p = NULL;
    }
    fclose(f);
    return p;
}

/* Do the shards of root/a and root/b hold the same bytes? */
static int same_shard(const char *a, const char *bname)
{
    char pa[700], pb[700];
    size_t la = 0, lb = 0;
    snprintf(pa, sizeof pa, "%s/%s/step-00000001/shard-0.ftsh", root, a);
    snprintf(pb, sizeof pb, "%s/%s/step-00000001/shard-0.ftsh", root, bname);
    unsigned char *x = slurp(pa, &la), *y = slurp(pb, &lb);
    int same = x && y && la == lb && la > 0 && memcmp(x, y, la) == 0;
    if (!same)
        diag("%s (%zu bytes) and %s (%zu bytes) differ", pa, la, pb, lb);
    free(x);
    free(y);
    return same;
}

/* Does root/sub verify and hold the state? */
static int reads_back(const char *sub)
{
    char dir[700];
    ckpt_t *c = NULL;
    float *w2 = malloc(sizeof *w2 * ROWS * COLS);
    int64_t m2[NI];
    float b2[NB];
    int good = 0;
    snprintf(dir, sizeof dir, "%s/%s/step-00000001", root, sub);
    if (w2 && ckpt_open(dir, &c) == CKPT_OK) {
        good = ckpt_verify(c) == CKPT_OK &&
               ckpt_read_tensor(c, "model.w", w2, sizeof *w2 * ROWS * COLS) == CKPT_OK &&
               ckpt_read_tensor(c, "meta", m2, sizeof m2) == CKPT_OK &&
               ckpt_read_tensor(c, "model.b", b2, sizeof b2) == CKPT_OK &&
               memcmp(w2, w, sizeof *w2 * ROWS * COLS) == 0 &&
               memcmp(m2, meta, sizeof m2) == 0 && memcmp(b2, b, sizeof b2) == 0;
        if (!good)
            diag("%s: %s", dir, ckpt_last_error());
        ckpt_close(c);
    }
    free(w2);
    return good;
}

int main(void)
{
    char path[700];
    struct stat st;

    tap_tmpdir(root, sizeof root, "ckpt_direct");
    make_state();

    /* Buffered references, compressed and stored. */
    is_int(save("buf1", 1, 0), CKPT_OK, "buffered save, level 1");
    is_int(n_direct_opens + n_direct_writes, 0, "buffered save uses no O_DIRECT");
    is_int(save("buf0", 0, 0), CKPT_OK, "buffered save, level 0 (stored)");
    ok(reads_back("buf1") && reads_back("buf0"), "buffered saves verify and read back");

    /* Direct saves: same bytes. */
    is_int(save("dir1", 1, 1), CKPT_OK, "direct save, level 1");
    ok(n_direct_opens == 1 && n_direct_writes >= 1,
       "direct save opened with O_DIRECT and wrote through it (%d writes)", n_direct_writes);
    ok(n_buffered_bytes > 0 && n_buffered_bytes < 4096,
       "only the last partial block was written buffered (%zu bytes)", n_buffered_bytes);
    ok(same_shard("buf1", "dir1"), "direct and buffered shards are byte-identical (level 1)");
    is_int(save("dir0", 0, 1), CKPT_OK, "direct save, level 0");
    ok(n_buffered_bytes > 0 && n_buffered_bytes < 4096,
       "level 0: only the last partial block was written buffered (%zu bytes)",
       n_buffered_bytes);
    ok(n_direct_writes >= 2, "a stored state of %d MB took %d direct writes",
       (int)((size_t)ROWS * COLS * 4 / 1000000), n_direct_writes);
    ok(same_shard("buf0", "dir0"), "direct and buffered shards are byte-identical (level 0)");
    ok(reads_back("dir1") && reads_back("dir0"), "direct saves verify and read back");

    /* Refusals fall back to buffered writes, same bytes. */
    fault = FAULT_OPEN;
    is_int(save("fo", 0, 1), CKPT_OK, "O_DIRECT refused at open: save succeeds");
    ok(n_injected == 1 && n_direct_writes == 0, "the refusal happened and nothing went direct");
    ok(same_shard("buf0", "fo") && reads_back("fo"), "... with the same bytes");

    fault = FAULT_WRITE, fault_after = 0;
    is_int(save("fw0", 0, 1), CKPT_OK, "O_DIRECT refused at the first write: save succeeds");
    ok(n_injected == 1, "one refusal, then buffered (%d injected)", n_injected);
    ok(same_shard("buf0", "fw0") && reads_back("fw0"), "... with the same bytes");

    fault = FAULT_WRITE, fault_after = 1;
    is_int(save("fw1", 0, 1), CKPT_OK, "O_DIRECT refused in the middle of a file: save succeeds");
    ok(n_injected == 1 && n_direct_writes == 2, "one direct write went through, the next was refused");
    ok(same_shard("buf0", "fw1") && reads_back("fw1"), "... with the same bytes");

    fault = FAULT_SHORT;
    is_int(save("fs", 1, 1), CKPT_OK, "a short direct write: save succeeds");
    ok(n_injected == 1 && n_direct_writes >= 2, "the short write was followed by the rest");
    ok(same_shard("buf1", "fs") && reads_back("fs"), "... with the same bytes");

    /* opts.adapt: frames are stored while the disk waits for the encoders.
     * Slow encoders (zstd level 19, slower than any disk): many frames after
     * the first chunk are stored.  A slow disk (0.2 s per 8 MiB write) and fast
     * encoders (level 1): none or nearly none are. */
    {
        int nf = 0, nstored;
        fault = FAULT_NONE;
        frame_bytes = 256u << 10; /* 88 frames, 32 to an 8 MiB chunk */
        is_int(save_adapt("ad9", 19, 1, 1), CKPT_OK, "adapt, level 19 (slow encoders): save");
        nstored = stored_frames("ad9", &nf);
        ok(nstored >= nf / 4, "%d of %d frames were stored (the disk waited for zstd)",
           nstored, nf);
        ok(reads_back("ad9"), "... and the checkpoint verifies and reads back");
        is_int(save_adapt("ad9off", 19, 1, 0), CKPT_OK, "adapt off, level 19: save");
        nstored = stored_frames("ad9off", &nf);
        is_int(nstored, 0, "adapt off: no frame stored at level 19");
        direct_delay_us = 200000;
        is_int(save_adapt("ad1", 1, 1, 1), CKPT_OK, "adapt, level 1, a slow disk: save");
        direct_delay_us = 0;
        nstored = stored_frames("ad1", &nf);
        ok(nstored >= 0 && nstored <= 2, "%d of %d frames were stored (the encoders were ahead)",
           nstored, nf);
        ok(reads_back("ad1"), "... and the checkpoint verifies and reads back");
        frame_bytes = 1u << 20;
    }

    /* A real write error: the save fails, nothing is left, the previous
     * checkpoint stays the latest. */
    fault = FAULT_NONE;
    is_int(save("full", 1, 1), CKPT_OK, "a good checkpoint first");
    {
        char dir[600];
        ckpt_opts_t o;
        ckpt_opts_default(&o);
        o.frame_bytes = 1u << 20;
        snprintf(dir, sizeof dir, "%s/full", root);
        fault = FAULT_ENOSPC, fault_after = 1;
        n_injected = n_direct_writes = 0;
        int rc = ckpt_save(dir, 2, t, 3, "{\"test\":\"direct\"}", &o, NULL);
        fault = FAULT_NONE;
        is_int(rc, CKPT_EIO, "ENOSPC in a direct write fails the save with CKPT_EIO");
        ok(n_injected == 1, "the error was injected once");
        ok(strstr(ckpt_last_error(), "shard-0.ftsh") &&
               strstr(ckpt_last_error(), strerror(ENOSPC)),
           "the message names the shard and the error: %s", ckpt_last_error());
        snprintf(path, sizeof path, "%s/.tmp-step-00000002/shard-0.ftsh", dir);
        ok(stat(path, &st) != 0 && errno == ENOENT, "the partial shard was removed");
        snprintf(path, sizeof path, "%s/step-00000002", dir);
        ok(stat(path, &st) != 0 && errno == ENOENT, "no step-2 was committed");
        char latest[700];
        ok(ckpt_latest_good(dir, latest, sizeof latest, NULL, NULL) == CKPT_OK &&
               strstr(latest, "step-00000001") != NULL,
           "the latest good checkpoint is still step 1");
        ok(reads_back("full"), "and it still verifies and reads back");
    }

    free(w);
    free(b);
    free(meta);
    tap_rmtree(root);
    return done_testing();
}

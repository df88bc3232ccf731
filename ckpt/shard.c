/*
 * shard.c - the shard file format: a slice of the flat byte space cut into
 * independent zstd frames of bounded raw size, each optionally byte-shuffled
 * (4-byte elements) and checksummed, followed by a seek table and a fixed
 * footer, so that any raw range can be read by decoding only the frames that
 * overlap it.  The layout is described in ckpt_internal.h and specified in
 * docs/checkpoint-format.md.
 *
 * The writer makes one pass: encoder threads (opts.threads of them, at least
 * one) gather frames' bytes from the tensors, shuffle and compress them in
 * parallel, and the calling thread writes the frames in order through a
 * sink: O_DIRECT from an aligned staging buffer by default (no kernel copy,
 * no dirty page cache), or buffered writes with early writeback
 * (sync_file_range); either way compression and disk I/O overlap and the
 * final fsync has little left to do.  The reader trusts nothing in the file:
 * every size and offset is checked against the file size and the manifest.
 */
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>
#include <zstd.h>

#include "ckpt_internal.h"

/* ---- big buffers ------------------------------------------------------ */

/* The encoder's frame buffers and the sink's staging buffers (tens of MiB per
 * rank) are fresh memory at every save: in 4 KiB pages that is thousands of
 * page faults per rank, which cost more than the copying on some virtual
 * machines.  Allocate them 2 MiB-aligned and ask for transparent huge pages
 * (honoured where THP is "always" or "madvise", ignored elsewhere).  Free
 * with free().  The shard reader's frame buffers come from here too. */
#define BIG_ALIGN ((size_t)2 << 20)

static void *big_alloc(size_t n)
{
    if (n < BIG_ALIGN / 2) /* small: a huge page would cost more than it saves */
        return malloc(n ? n : 1);
    size_t len = (n + BIG_ALIGN - 1) & ~(BIG_ALIGN - 1);
    void *p = aligned_alloc(BIG_ALIGN, len);
#ifdef MADV_HUGEPAGE
    if (p)
        (void)madvise(p, len, MADV_HUGEPAGE);
#endif
    return p;
}

/* ---- little-endian fields --------------------------------------------- */

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* ---- byte shuffle ----------------------------------------------------- */

/* Split len bytes of 4-byte elements into four planes (byte 0 of every
 * element, then byte 1, ...); a tail of len % 4 bytes is copied as is. */
static void shuffle4(unsigned char *dst, const unsigned char *src, size_t len)
{
    size_t ne = len / 4;
    unsigned char *p0 = dst, *p1 = dst + ne, *p2 = dst + 2 * ne,
                  *p3 = dst + 3 * ne;
    for (size_t i = 0; i < ne; i++) {
        const unsigned char *s = src + 4 * i;
        p0[i] = s[0];
        p1[i] = s[1];
        p2[i] = s[2];
        p3[i] = s[3];
    }
    memcpy(dst + 4 * ne, src + 4 * ne, len - 4 * ne);
}

/* The inverse of shuffle4. */
static void unshuffle4(unsigned char *dst, const unsigned char *src,
                       size_t len)
{
    size_t ne = len / 4;
    const unsigned char *p0 = src, *p1 = src + ne, *p2 = src + 2 * ne,
                        *p3 = src + 3 * ne;
    for (size_t i = 0; i < ne; i++) {
        unsigned char *d = dst + 4 * i;
        d[0] = p0[i];
        d[1] = p1[i];
        d[2] = p2[i];
        d[3] = p3[i];
    }
    memcpy(dst + 4 * ne, src + 4 * ne, len - 4 * ne);
}

/* ---- writing ---------------------------------------------------------- */

/* Copy flat bytes [off, off+len) out of the tensors into dst, zeros for the
 * alignment gaps.  *bytes4 gets how many of them belong to 4-byte dtypes.
 * *cursor is the first tensor that may overlap (the caller walks forward). */
static void gather(unsigned char *dst, uint64_t off, size_t len,
                   const ckpt_tensor_t *t, size_t n, size_t *cursor,
                   size_t *bytes4)
{
    uint64_t end = off + len, pos = off; /* [off, pos) is filled */
    size_t i = *cursor;
    *bytes4 = 0;
    while (i < n && t[i].offset + t[i].nbytes <= off)
        i++;
    *cursor = i;
    for (; i < n && t[i].offset < end; i++) {
        uint64_t a = t[i].offset > off ? t[i].offset : off;
        uint64_t b = t[i].offset + t[i].nbytes < end ? t[i].offset + t[i].nbytes
                                                     : end;
        if (b <= a)
            continue;
        if (a > pos) /* an alignment gap: zeros */
            memset(dst + (pos - off), 0, (size_t)(a - pos));
        memcpy(dst + (a - off), (const unsigned char *)t[i].data +
                                    (a - t[i].offset), (size_t)(b - a));
        if (ckpt_dtype_size(t[i].dtype) == 4)
            *bytes4 += (size_t)(b - a);
        pos = b;
    }
    if (end > pos)
        memset(dst + (pos - off), 0, (size_t)(end - pos));
}

/* The frame's raw bytes [off, off+len): a pointer into the one tensor that
 * holds all of them (the common case: no copy), else dst after gather(). */
static const unsigned char *frame_bytes(unsigned char *dst, uint64_t off, size_t len,
                                        const ckpt_tensor_t *t, size_t n, size_t *cursor,
                                        size_t *bytes4)
{
    size_t i = *cursor;
    while (i < n && t[i].offset + t[i].nbytes <= off)
        i++;
    if (i < n && t[i].offset <= off && off + len <= t[i].offset + t[i].nbytes) {
        *cursor = i;
        *bytes4 = ckpt_dtype_size(t[i].dtype) == 4 ? len : 0;
        return (const unsigned char *)t[i].data + (off - t[i].offset);
    }
    gather(dst, off, len, t, n, cursor, bytes4);
    return dst;
}

/* Frame-parallel encoding.  K worker threads take frames f = k, k+K, ...:
 * each gathers, shuffles and compresses its frame into ring slot f % S and
 * fills the frame's seek-table row (all but the file offset).  The calling
 * thread writes the frames in order, fills in their offsets, hashes the file
 * and starts writeback early (sync_file_range), so compression of several
 * frames and the disk I/O overlap.  A slot is reused only after its frame
 * was written: frame f may start once frame f - S is on its way to disk. */
#define ENC_MAX_WORKERS 32

typedef struct enc enc_t;

typedef struct {
    enc_t *e;
    int k;
    pthread_t th;
    int started;
} enc_worker_t;

struct enc {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const char *path;
    uint64_t lo, hi, nframes;
    const ckpt_tensor_t *tensors;
    size_t n, fb, cap_out;
    const ckpt_opts_t *opts;
    unsigned char *table;
    int K, S;
    unsigned char **buf;    /* S compressed-frame buffers */
    size_t *len;            /* compressed length of the frame in a slot */
    int64_t *filled;        /* the frame a slot holds, -1 when free */
    uint64_t written;       /* frames written so far (in order) */
    /* adapt (opts.adapt, direct writes, level > 0): measured rates, under mu */
    int adapt;
    double z_spb, z_ratio;  /* compressed frames: encoder CPU seconds per raw
                               byte, raw / stored bytes (moving averages) */
    double h_spb;           /* hashing alone, CPU seconds per byte */
    double disk_bps;        /* the I/O thread's rate, bytes/s (0: not yet) */
    int stored_run;         /* frames stored since the last compressed one */
    int rc;                 /* first failure (ckpt_err_t), 0 when none */
    char msg[384];          /* its message: workers cannot use ckpt_seterr,
                               whose buffer is per thread */
};

static void enc_fail(enc_t *e, int rc, const char *msg)
{
    pthread_mutex_lock(&e->mu);
    if (!e->rc) {
        e->rc = rc;
        snprintf(e->msg, sizeof e->msg, "%s", msg);
    }
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

/* Encode a shuffled frame (four planes of ne bytes, then the tail) plane by
 * plane.  Each plane's first 16 KiB are compressed by both compressors:
 * cctx (zstd at the chosen level) and ectx (zstd with the smallest match
 * finder: hash table of 64 entries, matches of 7 bytes or more, so nearly
 * all bytes go to zstd's Huffman literals).  The sign/exponent byte of
 * float weights is low-entropy noise with few long repeats: there ectx is
 * both smaller (about 2.96x against 2.73x at level 1) and about 2.5x
 * faster, and its frames decode twice as fast.  The plane is compressed
 * whole by the one whose probe came out smaller (ectx on a tie: faster); a
 * plane that neither shrinks by 5% (the low mantissa bytes of trained
 * weights are noise) is stored as it is, so the compressors spend their time
 * only where it pays.  Returns the payload size, or a zstd error code. */
static size_t encode_planes(ZSTD_CCtx *cctx, ZSTD_CCtx *ectx, unsigned char *dst,
                            size_t cap, const unsigned char *shuf, size_t len)
{
    size_t ne = len / 4, tail = len - 4 * ne, pos = CKPT_PLANES_HEADER_BYTES;
    uint32_t mask = 0;
    unsigned char probe[ZSTD_COMPRESSBOUND(16384)];
    for (int p = 0; p < 4; p++) {
        const unsigned char *plane = shuf + (size_t)p * ne;
        size_t n = ne < 16384 ? ne : 16384, z;
        ZSTD_CCtx *best = ectx;
        int pack = 0;
        size_t ze = ZSTD_compress2(ectx, probe, sizeof probe, plane, n);
        if (ZSTD_isError(ze))
            return ze;
        size_t zc = ZSTD_compress2(cctx, probe, sizeof probe, plane, n);
        if (ZSTD_isError(zc))
            return zc;
        if (zc < ze) {
            best = cctx;
            ze = zc;
        }
        if (ze * 20 < n * 19) {
            z = ZSTD_compress2(best, dst + pos, cap - pos, plane, ne);
            if (ZSTD_isError(z))
                return z;
            pack = z < ne;
        }
        if (!pack) {
            memcpy(dst + pos, plane, ne);
            z = ne;
        }
        put_u32(dst + 4 * (size_t)p, (uint32_t)z);
        mask |= (uint32_t)pack << p;
        pos += z;
    }
    put_u32(dst + 16, mask);
    memcpy(dst + pos, shuf + 4 * ne, tail);
    return pos + tail;
}

/* The entropy-leaning compressor of encode_planes: zstd's fast strategy with
 * the smallest hash table and the longest minimum match it allows. */
static size_t ectx_setup(ZSTD_CCtx *ectx)
{
    size_t zr = ZSTD_CCtx_setParameter(ectx, ZSTD_c_compressionLevel, 1);
    if (!ZSTD_isError(zr))
        zr = ZSTD_CCtx_setParameter(ectx, ZSTD_c_strategy, ZSTD_fast);
    if (!ZSTD_isError(zr))
        zr = ZSTD_CCtx_setParameter(ectx, ZSTD_c_hashLog, 6);
    if (!ZSTD_isError(zr))
        zr = ZSTD_CCtx_setParameter(ectx, ZSTD_c_minMatch, 7);
    if (!ZSTD_isError(zr))
        zr = ZSTD_CCtx_setParameter(ectx, ZSTD_c_contentSizeFlag, 1);
    return zr;
}

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double mono_s(void)
{
    return clock_s(CLOCK_MONOTONIC);
}

/* CPU time of the calling thread: what a frame cost, whoever else ran. */
static double cpu_s(void)
{
    return clock_s(CLOCK_THREAD_CPUTIME_ID);
}

static double ewma(double avg, double x)
{
    return avg > 0 ? 0.75 * avg + 0.25 * x : x;
}

/* Adaptive storing: should the next frame be stored?  Called under e->mu.
 * The encoders are given K cores (the caller's share), which the writer
 * thread shares: per raw byte, a mode costs the encoder's CPU time plus the
 * writer's copy and hash of the bytes it produces; a stored frame's own
 * encoder cost is a copy and a hash too.  A copy runs at about the speed of
 * XXH64, so each is costed as twice the measured hash time.  The raw bytes
 * per second a mode can deliver are then
 *     min(K / (encoder + writer / ratio), disk rate x ratio)
 * with ratio 1 for a stored frame, and the faster mode wins: compression
 * pays only while the disk is the limit.  CPU times, not wall times, so
 * that a frame preempted by the writer or another rank is not taken for
 * slow (a stored frame's few copies are not timed: one page-faulting
 * outlier would stop all storing, with nothing left to correct it).
 * While storing, every 32nd frame is compressed all the same, so that the
 * compression cost and ratio stay current.  Nothing is stored before a
 * compressed frame and a disk write were measured. */
static int adapt_store(enc_t *e)
{
    if (!e->adapt || e->z_spb <= 0 || e->disk_bps <= 0)
        return 0;
    double w = 2 * e->h_spb, s_spb = w;
    double zc = e->K / (e->z_spb + w / e->z_ratio), zd = e->disk_bps * e->z_ratio;
    double sc = e->K / (s_spb + w), sd = e->disk_bps;
    double rate_z = zc < zd ? zc : zd, rate_s = sc < sd ? sc : sd;
    if (rate_s <= 1.05 * rate_z || e->stored_run >= 31) {
        e->stored_run = 0;
        return 0;
    }
    e->stored_run++;
    return 1;
}

static void *enc_worker(void *arg)
{
    enc_worker_t *w = arg;
    enc_t *e = w->e;
    const ckpt_opts_t *opts = e->opts;
    char msg[384];
    size_t cursor = 0, zr;
    ZSTD_CCtx *cctx = ZSTD_createCCtx(), *ectx = ZSTD_createCCtx();
    unsigned char *raw = big_alloc(e->fb), *shuf = big_alloc(e->fb);
    if (!cctx || !ectx || !raw || !shuf) {
        snprintf(msg, sizeof msg, "%s: out of memory for a shard encoder", e->path);
        enc_fail(e, CKPT_ENOMEM, msg);
        goto out;
    }
    zr = ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, opts->level ? opts->level : 1);
    if (!ZSTD_isError(zr))
        zr = ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 1);
    if (!ZSTD_isError(zr))
        zr = ectx_setup(ectx);
    if (ZSTD_isError(zr)) {
        snprintf(msg, sizeof msg, "%s: zstd level %d: %s", e->path, opts->level,
                 ZSTD_getErrorName(zr));
        enc_fail(e, CKPT_EZSTD, msg);
        goto out;
    }
    for (uint64_t f = (uint64_t)w->k; f < e->nframes; f += (uint64_t)e->K) {
        uint64_t roff = e->lo + f * e->fb;
        size_t len = (size_t)(e->hi - roff < e->fb ? e->hi - roff : e->fb), b4;
        const unsigned char *src;
        uint32_t flags = 0;
        unsigned char *row = e->table + f * CKPT_SHARD_ENTRY_BYTES;
        int slot = (int)(f % (uint64_t)e->S);

        double t0 = cpu_s();
        const unsigned char *fr = frame_bytes(raw, roff, len, e->tensors, e->n, &cursor, &b4);
        double t1 = cpu_s();
        pthread_mutex_lock(&e->mu);
        while (!e->rc && f >= e->written + (uint64_t)e->S)
            pthread_cond_wait(&e->cv, &e->mu);
        int stop = e->rc != 0;
        /* Stored: level 0, or (adapt) when storing is faster; decided now,
         * when the frame's slot is free, on the latest rates. */
        int store = opts->level == 0 || (!stop && adapt_store(e));
        pthread_mutex_unlock(&e->mu);
        if (stop)
            break;
        double t2 = cpu_s();
        src = fr;
        if (!store && opts->shuffle && len >= 8 && b4 * 2 >= len) {
            shuffle4(shuf, fr, len);
            src = shuf;
            flags |= CKPT_FRAME_SHUFFLE4;
        }
        if (store) { /* stored: checksummed and seekable, no zstd */
            memcpy(e->buf[slot], fr, len);
            zr = len;
            flags |= CKPT_FRAME_STORED;
        } else if (flags & CKPT_FRAME_SHUFFLE4) {
            zr = encode_planes(cctx, ectx, e->buf[slot], e->cap_out, shuf, len);
            flags = CKPT_FRAME_PLANES;
        } else {
            zr = ZSTD_compress2(cctx, e->buf[slot], e->cap_out, src, len);
        }
        if (ZSTD_isError(zr)) {
            snprintf(msg, sizeof msg, "%s: compressing frame %llu: %s", e->path,
                     (unsigned long long)f, ZSTD_getErrorName(zr));
            enc_fail(e, CKPT_EZSTD, msg);
            break;
        }
        put_u64(row, roff - e->lo);
        put_u64(row + 8, len);
        put_u64(row + 24, zr);
        double th = cpu_s();
        put_u64(row + 32, XXH64(fr, len, 0));
        put_u32(row + 40, flags);
        put_u32(row + 44, 0);
        double t3 = cpu_s(), spb = ((t1 - t0) + (t3 - t2)) / (double)len;
        pthread_mutex_lock(&e->mu);
        if (e->adapt) {
            e->h_spb = ewma(e->h_spb, (t3 - th) / (double)len);
            if (!store) {
                e->z_spb = ewma(e->z_spb, spb);
                e->z_ratio = ewma(e->z_ratio, (double)len / (double)(zr ? zr : 1));
            }
        }
        e->len[slot] = zr;
        e->filled[slot] = (int64_t)f;
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
    }
out:
    ZSTD_freeCCtx(cctx);
    ZSTD_freeCCtx(ectx);
    free(raw);
    free(shuf);
    return NULL;
}

static int enc_workers_for(const ckpt_opts_t *opts, uint64_t nframes)
{
    int k = opts->threads > 0 ? opts->threads : 1;
    if (k > ENC_MAX_WORKERS)
        k = ENC_MAX_WORKERS;
    if ((uint64_t)k > nframes)
        k = nframes ? (int)nframes : 1;
    return k;
}

/* The output sink.  Buffered: write(2) into the page cache, with early
 * writeback (sync_file_range) every 8 MiB.  Direct (opts.direct): the bytes
 * collect in one of two aligned staging buffers; each time one holds 8 MiB,
 * its whole 4 KiB blocks go to an I/O thread that writes them with O_DIRECT
 * (no kernel copy, no dirty pages) while the caller fills the other buffer,
 * so the device never waits for the copy and the hashing.  At close the
 * staged whole blocks (the last frames, the seek table, the footer) go direct
 * as well; only the last partial block is written buffered, after O_DIRECT
 * is cleared.  A filesystem that refuses O_DIRECT (EINVAL at open or at a
 * write) gets buffered writes instead; the bytes are the same. */
#define SINK_ALIGN 4096u
#define SINK_CHUNK (8u << 20)
#define SINK_CAP (SINK_CHUNK + SINK_ALIGN)
_Static_assert(SINK_CAP >= BIG_ALIGN / 2, "staging buffers must come 2 MiB-aligned from big_alloc");

typedef struct {
    int fd;
    int direct;             /* staging + I/O thread in use */
    int do_fsync;
    unsigned char *stage[2];
    int cur;                /* the buffer being filled */
    size_t fill;            /* bytes in stage[cur] */
    uint64_t pos;           /* bytes accepted so far */
    uint64_t synced;        /* buffered: bytes handed to writeback */
    /* the I/O thread (direct) */
    pthread_t io;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const unsigned char *job;
    size_t job_len;
    int busy, quit, err;    /* err: errno of a failed write, 0 when none */
    double bps;             /* its write rate, bytes/s (moving average; 0: none yet) */
} sink_t;

/* Clear O_DIRECT: what follows goes through the page cache. */
static int fd_undirect(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_DIRECT) < 0)
        return -1;
    return 0;
}

/* Write n bytes; a refusal of O_DIRECT (EINVAL: not supported, or misaligned
 * after a short write) switches the descriptor to buffered writes. */
static int write_direct(int fd, const unsigned char *p, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t k = write(fd, p + done, n - done);
        if (k < 0) {
            int e = errno;
            if (e == EINTR)
                continue;
            int fl = fcntl(fd, F_GETFL);
            if (e == EINVAL && fl >= 0 && (fl & O_DIRECT) && fd_undirect(fd) == 0)
                continue;
            errno = e;
            return -1;
        }
        done += (size_t)k;
    }
    return 0;
}

static void *sink_io(void *arg)
{
    sink_t *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->busy && !s->quit)
            pthread_cond_wait(&s->cv, &s->mu);
        if (!s->busy)
            break;
        const unsigned char *p = s->job;
        size_t n = s->job_len;
        pthread_mutex_unlock(&s->mu);
        double t0 = mono_s();
        int rc = write_direct(s->fd, p, n), e = errno;
        double dt = mono_s() - t0;
        pthread_mutex_lock(&s->mu);
        if (rc != 0 && !s->err)
            s->err = e ? e : EIO;
        if (rc == 0 && n > 0)
            s->bps = ewma(s->bps, (double)n / (dt > 1e-9 ? dt : 1e-9));
        s->busy = 0;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Wait for the I/O thread to finish its job.  @return 0, or -1 with errno of
 * the first failed write. */
static int sink_wait(sink_t *s)
{
    pthread_mutex_lock(&s->mu);
    while (s->busy)
        pthread_cond_wait(&s->cv, &s->mu);
    int e = s->err;
    pthread_mutex_unlock(&s->mu);
    errno = e;
    return e ? -1 : 0;
}

/* The I/O thread's write rate in bytes/s; 0 before its first write. */
static double sink_rate(sink_t *s)
{
    pthread_mutex_lock(&s->mu);
    double bps = s->bps;
    pthread_mutex_unlock(&s->mu);
    return bps;
}

/* Stop the I/O thread (after its job) and free the staging buffers. */
static void sink_stop(sink_t *s)
{
    if (s->direct) {
        pthread_mutex_lock(&s->mu);
        while (s->busy)
            pthread_cond_wait(&s->cv, &s->mu);
        s->quit = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->io, NULL);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        s->direct = 0;
    }
    free(s->stage[0]);
    free(s->stage[1]);
    s->stage[0] = s->stage[1] = NULL;
}

/* Start direct mode on an O_DIRECT descriptor; 0, or -1 when it cannot
 * (the caller then writes buffered). */
static int sink_start_direct(sink_t *s)
{
    s->stage[0] = big_alloc(SINK_CAP); /* 2 MiB-aligned: fine for O_DIRECT */
    s->stage[1] = big_alloc(SINK_CAP);
    if (!s->stage[0] || !s->stage[1])
        return -1;
    if (pthread_mutex_init(&s->mu, NULL) != 0)
        return -1;
    if (pthread_cond_init(&s->cv, NULL) != 0) {
        pthread_mutex_destroy(&s->mu);
        return -1;
    }
    if (pthread_create(&s->io, NULL, sink_io, s) != 0) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        return -1;
    }
    s->direct = 1;
    return 0;
}

/* Create path anew: whatever has the name (a crashed attempt's shard, or a
 * link or FIFO someone planted) is removed, never followed or written
 * through. */
static int create_fresh(const char *path, int flags)
{
    if (unlink(path) != 0 && errno != ENOENT)
        return -1;
    return open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | flags,
                0644);
}

static int sink_open(sink_t *s, const char *path, const ckpt_opts_t *opts)
{
    memset(s, 0, sizeof *s);
    s->do_fsync = opts->fsync;
    s->fd = -1;
    if (opts->direct) {
        s->fd = create_fresh(path, O_DIRECT);
        if (s->fd < 0 && errno != EINVAL)
            return -1;
        if (s->fd >= 0 && sink_start_direct(s) != 0) {
            sink_stop(s);
            if (fd_undirect(s->fd) != 0)
                return -1;
        }
    }
    if (s->fd < 0)
        s->fd = create_fresh(path, 0);
    return s->fd < 0 ? -1 : 0;
}

/* Hand the whole blocks of stage[cur] to the I/O thread and carry the rest
 * over to the other buffer, which becomes the one being filled. */
static int sink_handoff(sink_t *s)
{
    size_t n = s->fill & ~(size_t)(SINK_ALIGN - 1);
    if (sink_wait(s) != 0)
        return -1;
    unsigned char *full = s->stage[s->cur], *next = s->stage[s->cur ^ 1];
    pthread_mutex_lock(&s->mu);
    s->job = full;
    s->job_len = n;
    s->busy = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    memcpy(next, full + n, s->fill - n); /* the I/O thread reads [0, n) only */
    s->fill -= n;
    s->cur ^= 1;
    return 0;
}

static int sink_put(sink_t *s, const void *data, size_t len)
{
    const unsigned char *p = data;
    s->pos += len;
    if (!s->direct) {
        if (ckpt_write_all(s->fd, p, len) != 0)
            return -1;
        if (s->do_fsync && s->pos - s->synced >= (8u << 20)) {
            (void)sync_file_range(s->fd, (off_t)s->synced, (off_t)(s->pos - s->synced),
                                  SYNC_FILE_RANGE_WRITE);
            s->synced = s->pos;
        }
        return 0;
    }
    while (len > 0) {
        size_t take = SINK_CAP - s->fill;
        if (take > len)
            take = len;
        memcpy(s->stage[s->cur] + s->fill, p, take);
        s->fill += take;
        p += take;
        len -= take;
        if (s->fill >= SINK_CHUNK && sink_handoff(s) != 0)
            return -1;
    }
    return 0;
}

/* Write what is left, fsync (opts.fsync) and close.  @return 0 or -1 with
 * errno set; the descriptor is closed and the buffers freed either way. */
static int sink_close(sink_t *s)
{
    int rc = 0, saved = 0;
    if (s->direct) {
        /* The whole blocks still staged go direct too (a buffered write of up
         * to 8 MiB here would leave the fsync below that much to flush); only
         * the last partial block goes through the page cache. */
        if ((s->fill >= SINK_ALIGN && sink_handoff(s) != 0) || sink_wait(s) != 0 ||
            fd_undirect(s->fd) != 0 ||
            ckpt_write_all(s->fd, s->stage[s->cur], s->fill) != 0)
            rc = -1;
        saved = errno;
        sink_stop(s);
        errno = saved;
    }
    if (rc == 0 && s->do_fsync && fsync(s->fd) != 0)
        rc = -1;
    saved = errno;
    if (close(s->fd) != 0 && rc == 0) {
        rc = -1;
        saved = errno;
    }
    s->fd = -1;
    errno = saved;
    return rc;
}

/* Drop a sink after a failure (the caller unlinks the file). */
static void sink_abort(sink_t *s)
{
    sink_stop(s);
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
}

int ckpt_shard_encode(const char *path, uint64_t lo, uint64_t hi,
                      const ckpt_tensor_t *tensors, size_t n,
                      const ckpt_opts_t *opts, ckpt_shard_info_t *info)
{
    int rc = CKPT_OK, saved, sync_init = 0;
    unsigned char hdr[CKPT_SHARD_HEADER_BYTES], foot[CKPT_SHARD_FOOTER_BYTES];
    XXH64_state_t *fh = NULL;
    sink_t sk;
    enc_t e;
    enc_worker_t w[ENC_MAX_WORKERS];
    int werr = 0;

    memset(&e, 0, sizeof e);
    memset(w, 0, sizeof w);
    memset(&sk, 0, sizeof sk);
    sk.fd = -1;
    e.path = path;
    e.lo = lo;
    e.hi = hi;
    e.tensors = tensors;
    e.n = n;
    e.opts = opts;
    e.fb = opts->frame_bytes;
    e.nframes = hi > lo ? (hi - lo + e.fb - 1) / e.fb : 0;
    if (e.nframes > UINT32_MAX)
        return ckpt_seterr(CKPT_EINVAL, "%s: too many frames (%llu)", path,
                           (unsigned long long)e.nframes);
    e.K = enc_workers_for(opts, e.nframes);
    e.S = 2 * e.K + 1;
    e.cap_out = ZSTD_compressBound(e.fb) + CKPT_PLANES_HEADER_BYTES + 4 * ZSTD_compressBound(0) + 64;
    fh = XXH64_createState();
    e.table = calloc(e.nframes ? e.nframes : 1, CKPT_SHARD_ENTRY_BYTES);
    e.buf = calloc((size_t)e.S, sizeof *e.buf);
    e.len = calloc((size_t)e.S, sizeof *e.len);
    e.filled = malloc((size_t)e.S * sizeof *e.filled);
    int ok = fh && e.table && e.buf && e.len && e.filled;
    for (int i = 0; ok && i < e.S; i++) {
        e.buf[i] = big_alloc(e.cap_out);
        ok = e.buf[i] != NULL;
        e.filled[i] = -1;
    }
    if (!ok) {
        rc = ckpt_seterr(CKPT_ENOMEM, "%s: out of memory for a shard writer", path);
        goto fail;
    }
    XXH64_reset(fh, 0);

    if (sink_open(&sk, path, opts) != 0) {
        rc = ckpt_seterr(CKPT_EIO, "%s: cannot create: %s", path, strerror(errno));
        goto fail;
    }
    e.adapt = opts->adapt && opts->level > 0 && sk.direct;
    memcpy(hdr, CKPT_SHARD_MAGIC, 8);
    put_u32(hdr + 8, CKPT_SHARD_VERSION);
    put_u32(hdr + 12, 0);
    XXH64_update(fh, hdr, sizeof hdr);
    if (sink_put(&sk, hdr, sizeof hdr) != 0) {
        werr = errno;
        goto werr;
    }

    if (pthread_mutex_init(&e.mu, NULL) != 0)
        goto nothread;
    if (pthread_cond_init(&e.cv, NULL) != 0) {
        pthread_mutex_destroy(&e.mu);
        goto nothread;
    }
    sync_init = 1;
    for (int k = 0; k < e.K; k++) {
        w[k].e = &e;
        w[k].k = k;
        if (pthread_create(&w[k].th, NULL, enc_worker, &w[k]) != 0) {
            enc_fail(&e, CKPT_ENOMEM, "cannot start a shard encoder thread");
            break;
        }
        w[k].started = 1;
    }

    /* The writer: frames in order; with adapt it passes the I/O thread's
     * write rate on to the encoders (adapt_store). */
    for (uint64_t f = 0; f < e.nframes; f++) {
        int slot = (int)(f % (uint64_t)e.S);
        pthread_mutex_lock(&e.mu);
        while (!e.rc && e.filled[slot] != (int64_t)f)
            pthread_cond_wait(&e.cv, &e.mu);
        int stop = e.rc != 0;
        size_t len = e.len[slot];
        pthread_mutex_unlock(&e.mu);
        if (stop)
            break;
        put_u64(e.table + f * CKPT_SHARD_ENTRY_BYTES + 16, sk.pos);
        XXH64_update(fh, e.buf[slot], len);
        if (sink_put(&sk, e.buf[slot], len) != 0) {
            char msg[384];
            werr = errno ? errno : EIO;
            snprintf(msg, sizeof msg, "%s: write failed: %s", path, strerror(werr));
            enc_fail(&e, CKPT_EIO, msg);
            break;
        }
        double bps = e.adapt ? sink_rate(&sk) : 0;
        pthread_mutex_lock(&e.mu);
        e.disk_bps = bps;
        e.filled[slot] = -1;
        e.written = f + 1;
        pthread_cond_broadcast(&e.cv);
        pthread_mutex_unlock(&e.mu);
    }
    for (int k = 0; k < e.K; k++)
        if (w[k].started)
            pthread_join(w[k].th, NULL);
    if (e.rc) {
        rc = ckpt_seterr(e.rc, "%s", e.msg);
        goto fail;
    }

    uint64_t pos = sk.pos; /* end of the frames: where the seek table starts */
    XXH64_update(fh, e.table, e.nframes * CKPT_SHARD_ENTRY_BYTES);
    if (e.nframes && sink_put(&sk, e.table, e.nframes * CKPT_SHARD_ENTRY_BYTES) != 0) {
        werr = errno;
        goto werr;
    }
    put_u64(foot, pos);
    put_u64(foot + 8, e.nframes);
    put_u64(foot + 16, hi - lo);
    put_u64(foot + 24, XXH64(e.table, e.nframes * CKPT_SHARD_ENTRY_BYTES, 0));
    put_u32(foot + 32, CKPT_SHARD_VERSION);
    put_u32(foot + 36, 0);
    memcpy(foot + 40, CKPT_FOOTER_MAGIC, 8);
    XXH64_update(fh, foot, sizeof foot);
    if (sink_put(&sk, foot, sizeof foot) != 0 || sink_close(&sk) != 0) {
        werr = errno;
        goto werr;
    }

    memset(info, 0, sizeof *info);
    info->raw_offset = lo;
    info->raw_bytes = hi - lo;
    info->file_bytes = pos + e.nframes * CKPT_SHARD_ENTRY_BYTES + sizeof foot;
    info->xxh64 = XXH64_digest(fh);
    info->table_xxh64 = get_u64(foot + 24);
    info->nframes = (uint32_t)e.nframes;
    info->flags = CKPT_SHARD_TABLE_KNOWN;
    goto done;

nothread:
    rc = ckpt_seterr(CKPT_ENOMEM, "%s: cannot start the encoder threads", path);
    goto fail;
werr:
    errno = werr;
    rc = ckpt_seterr(CKPT_EIO, "%s: write failed: %s", path, strerror(werr));
fail:
    saved = errno;
    sink_abort(&sk);
    unlink(path);
    errno = saved;
done:
    if (sync_init) {
        pthread_mutex_destroy(&e.mu);
        pthread_cond_destroy(&e.cv);
    }
    XXH64_freeState(fh);
    free(e.table);
    for (int i = 0; e.buf && i < e.S; i++)
        free(e.buf[i]);
    free(e.buf);
    free(e.len);
    free(e.filled);
    return rc;
}

/* ---- reading ---------------------------------------------------------- */

void ckpt_decoder_free(ckpt_decoder_t *d)
{
    if (!d)
        return;
    ZSTD_freeDCtx(d->dctx);
    free(d->comp);
    free(d->scratch);
    memset(d, 0, sizeof *d);
}

/* Make d able to decode every frame of r.  @return 0, or -1 out of memory. */
static int decoder_fit(ckpt_decoder_t *d, const ckpt_shard_reader_t *r)
{
    if (!d->dctx && !(d->dctx = ZSTD_createDCtx()))
        return -1;
    if (!d->comp || d->comp_cap < r->max_comp) {
        free(d->comp);
        d->comp_cap = r->max_comp ? (size_t)r->max_comp : 1;
        if (!(d->comp = big_alloc(d->comp_cap)))
            return -1;
    }
    if (!d->scratch || d->scratch_cap < r->max_raw) {
        free(d->scratch);
        d->scratch_cap = r->max_raw ? (size_t)r->max_raw : 1;
        if (!(d->scratch = big_alloc(d->scratch_cap)))
            return -1;
    }
    return 0;
}

void ckpt_shard_reader_close(ckpt_shard_reader_t *r)
{
    if (!r)
        return;
    if (r->fd >= 0)
        close(r->fd);
    free(r->frames);
    ckpt_decoder_free(&r->dec);
    memset(r, 0, sizeof *r);
    r->fd = -1;
}

/* Check one parsed seek table entry against what came before it. */
static int check_entry(const ckpt_shard_reader_t *r, uint32_t i,
                       const ckpt_frame_t *f, uint64_t raw_pos,
                       uint64_t comp_pos, uint64_t table_off, uint32_t resv)
{
    const char *p = r->path;
    if (f->raw_offset != raw_pos)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u raw offset %llu, "
                           "expected %llu", p, i,
                           (unsigned long long)f->raw_offset,
                           (unsigned long long)raw_pos);
    if (f->raw_size == 0 || f->raw_size > CKPT_FRAME_MAX ||
        f->raw_size > r->raw_bytes - raw_pos)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u raw size %llu out of "
                           "range", p, i, (unsigned long long)f->raw_size);
    if (f->comp_offset != comp_pos)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u file offset %llu, "
                           "expected %llu", p, i,
                           (unsigned long long)f->comp_offset,
                           (unsigned long long)comp_pos);
    if (f->comp_size == 0 || f->comp_size > ZSTD_compressBound(CKPT_FRAME_MAX) ||
        f->comp_size > table_off - comp_pos)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u compressed size %llu "
                           "out of range", p, i,
                           (unsigned long long)f->comp_size);
    if ((f->flags & ~(CKPT_FRAME_SHUFFLE4 | CKPT_FRAME_STORED | CKPT_FRAME_PLANES)) != 0 ||
        resv != 0 ||
        ((f->flags & CKPT_FRAME_STORED) &&
         (f->flags != CKPT_FRAME_STORED || f->comp_size != f->raw_size)) ||
        ((f->flags & CKPT_FRAME_PLANES) &&
         (f->flags != CKPT_FRAME_PLANES || f->raw_size < 8 ||
          f->comp_size < CKPT_PLANES_HEADER_BYTES + f->raw_size % 4)))
        return ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u has unknown flags "
                           "0x%x", p, i, f->flags);
    return CKPT_OK;
}

int ckpt_shard_reader_open(ckpt_shard_reader_t *r, int dirfd, const char *name,
                           const char *path, const ckpt_shard_info_t *expect)
{
    int rc = CKPT_OK;
    unsigned char hdr[CKPT_SHARD_HEADER_BYTES], foot[CKPT_SHARD_FOOTER_BYTES];
    unsigned char *table = NULL;
    struct stat st;
    uint64_t table_off, nframes, raw_bytes, tbytes, raw_pos = 0,
             comp_pos = CKPT_SHARD_HEADER_BYTES, maxraw = 0, maxcomp = 0;
    uint32_t ver;

    memset(r, 0, sizeof *r);
    r->fd = -1;
    if (strlen(path) >= sizeof r->path)
        return ckpt_seterr(CKPT_EINVAL, "shard path too long");
    strcpy(r->path, path);
    /* O_NOFOLLOW: a shard that is a symbolic link could lead outside the
     * checkpoint directory.  O_NONBLOCK: a FIFO in its place must not block
     * the open; it is refused below as not a regular file. */
    r->fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (r->fd < 0) {
        rc = ckpt_seterr(errno == ENOENT ? CKPT_EINCOMPLETE
                         : errno == ELOOP ? CKPT_ECORRUPT : CKPT_EIO,
                         "%s: cannot open shard: %s", path,
                         errno == ELOOP ? "it is a symbolic link"
                                        : strerror(errno));
        goto fail;
    }
    if (fstat(r->fd, &st) != 0) {
        rc = ckpt_seterr(CKPT_EIO, "%s: stat: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = ckpt_seterr(CKPT_ECORRUPT, "%s: not a regular file", path);
        goto fail;
    }
    r->file_bytes = (uint64_t)st.st_size;
    if (r->file_bytes != expect->file_bytes) {
        rc = ckpt_seterr(CKPT_ECORRUPT, "%s: size %llu bytes, manifest says "
                         "%llu (truncated or replaced)", path,
                         (unsigned long long)r->file_bytes,
                         (unsigned long long)expect->file_bytes);
        goto fail;
    }
    if (r->file_bytes < CKPT_SHARD_HEADER_BYTES + CKPT_SHARD_FOOTER_BYTES) {
        rc = ckpt_seterr(CKPT_ECORRUPT, "%s: too short for a shard", path);
        goto fail;
    }
    if (ckpt_pread_all(r->fd, hdr, sizeof hdr, 0) != 0 ||
        ckpt_pread_all(r->fd, foot, sizeof foot,
                       r->file_bytes - sizeof foot) != 0) {
        rc = ckpt_seterr(CKPT_EIO, "%s: read: %s", path, strerror(errno));
        goto fail;
    }
    if (memcmp(hdr, CKPT_SHARD_MAGIC, 8) != 0) {
        rc = ckpt_seterr(CKPT_ECORRUPT, "%s: bad header magic", path);
        goto fail;
    }
    if (memcmp(foot + 40, CKPT_FOOTER_MAGIC, 8) != 0) {
        rc = ckpt_seterr(CKPT_ECORRUPT, "%s: bad footer magic", path);
        goto fail;
    }
    ver = get_u32(hdr + 8);
    if (ver != CKPT_SHARD_VERSION || get_u32(foot + 32) != ver) {
        rc = ckpt_seterr(CKPT_EVERSION, "%s: shard format version %u, this "
                         "build reads %u", path,
                         ver != CKPT_SHARD_VERSION ? ver : get_u32(foot + 32),
                         CKPT_SHARD_VERSION);
        goto fail;
    }
    if (get_u32(hdr + 12) != 0 || get_u32(foot + 36) != 0) {
        rc = ckpt_seterr(CKPT_ECORRUPT, "%s: unknown header or footer flags",
                         path);
        goto fail;
    }
    table_off = get_u64(foot);
    nframes = get_u64(foot + 8);
    raw_bytes = get_u64(foot + 16);
    if (nframes != expect->nframes || raw_bytes != expect->raw_bytes) {
        rc = ckpt_seterr(CKPT_ECORRUPT, "%s: footer says %llu frames, %llu "
                         "bytes; manifest says %u frames, %llu bytes", path,
                         (unsigned long long)nframes,
                         (unsigned long long)raw_bytes, expect->nframes,
                         (unsigned long long)expect->raw_bytes);
        goto fail;
    }
    tbytes = nframes * CKPT_SHARD_ENTRY_BYTES; /* nframes < 2^32 here */
    if (table_off < CKPT_SHARD_HEADER_BYTES ||
        table_off > r->file_bytes - CKPT_SHARD_FOOTER_BYTES ||
        r->file_bytes - CKPT_SHARD_FOOTER_BYTES - table_off != tbytes) {
        rc = ckpt_seterr(CKPT_ECORRUPT, "%s: seek table offset %llu does not "
                         "fit the file", path, (unsigned long long)table_off);
        goto fail;
    }
    r->raw_bytes = raw_bytes;
    r->nframes = (uint32_t)nframes;
    table = malloc(tbytes ? tbytes : 1);
    r->frames = calloc(nframes ? nframes : 1, sizeof *r->frames);
    if (!table || !r->frames) {
        rc = ckpt_seterr(CKPT_ENOMEM, "%s: out of memory for the seek table",
                         path);
        goto fail;
    }
    if (tbytes && ckpt_pread_all(r->fd, table, tbytes, table_off) != 0) {
        rc = ckpt_seterr(CKPT_EIO, "%s: read: %s", path, strerror(errno));
        goto fail;
    }
    if (XXH64(table, tbytes, 0) != get_u64(foot + 24)) {
        rc = ckpt_seterr(CKPT_ECORRUPT, "%s: seek table checksum mismatch",
                         path);
        goto fail;
    }
    /* The table lists every frame's offsets and checksum, so a table that
     * matches the manifest ties every byte read to this checkpoint. */
    if ((expect->flags & CKPT_SHARD_TABLE_KNOWN) &&
        get_u64(foot + 24) != expect->table_xxh64) {
        rc = ckpt_seterr(CKPT_ECORRUPT, "%s: seek table checksum %016" PRIx64
                         ", the manifest says %016" PRIx64 ": the file is "
                         "not this checkpoint's shard (another step's or "
                         "rank's?)", path, get_u64(foot + 24),
                         expect->table_xxh64);
        goto fail;
    }
    for (uint32_t i = 0; i < r->nframes; i++) {
        const unsigned char *e = table + (size_t)i * CKPT_SHARD_ENTRY_BYTES;
        ckpt_frame_t *f = &r->frames[i];
        f->raw_offset = get_u64(e);
        f->raw_size = get_u64(e + 8);
        f->comp_offset = get_u64(e + 16);
        f->comp_size = get_u64(e + 24);
        f->xxh64 = get_u64(e + 32);
        f->flags = get_u32(e + 40);
        rc = check_entry(r, i, f, raw_pos, comp_pos, table_off,
                         get_u32(e + 44));
        if (rc != CKPT_OK)
            goto fail;
        raw_pos += f->raw_size;
        comp_pos += f->comp_size;
        if (f->raw_size > maxraw)
            maxraw = f->raw_size;
        if (f->comp_size > maxcomp)
            maxcomp = f->comp_size;
    }
    if (raw_pos != raw_bytes || comp_pos != table_off) {
        rc = ckpt_seterr(CKPT_ECORRUPT, "%s: frames do not cover the shard",
                         path);
        goto fail;
    }
    r->max_comp = maxcomp;
    r->max_raw = maxraw;
    if (decoder_fit(&r->dec, r) != 0) {
        rc = ckpt_seterr(CKPT_ENOMEM, "%s: out of memory for frame buffers",
                         path);
        goto fail;
    }
    free(table);
    return CKPT_OK;
fail:
    free(table);
    ckpt_shard_reader_close(r);
    return rc;
}

uint32_t ckpt_shard_find_frame(const ckpt_shard_reader_t *r, uint64_t off)
{
    uint32_t lo = 0, hi = r->nframes; /* answer in [lo, hi) */
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (r->frames[mid].raw_offset <= off)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Decode the compressed bytes of frame i (already in d->comp) into dst. */
/* A PLANES frame: check the header against the seek table, decode each
 * plane into the scratch buffer (a zstd plane must be exactly one frame of
 * exactly ne bytes), then unshuffle into dst and verify the checksum. */
static int decode_planes(const ckpt_shard_reader_t *r, ckpt_decoder_t *d, uint32_t i,
                         void *dst)
{
    const ckpt_frame_t *f = &r->frames[i];
    const unsigned char *c = d->comp;
    size_t ne = (size_t)(f->raw_size / 4), tail = (size_t)(f->raw_size % 4);
    uint32_t mask = get_u32(c + 16);
    uint64_t sum = CKPT_PLANES_HEADER_BYTES + tail;
    if (mask > 15)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u: bad plane mask 0x%x", r->path, i,
                           mask);
    for (int p = 0; p < 4; p++) {
        uint32_t len = get_u32(c + 4 * (size_t)p);
        if (!((mask >> p) & 1) && len != ne)
            return ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u: stored plane %d has %u bytes, "
                               "expected %zu", r->path, i, p, len, ne);
        sum += len;
    }
    if (sum != f->comp_size)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u: plane sizes add up to %llu, the seek "
                           "table says %llu", r->path, i, (unsigned long long)sum,
                           (unsigned long long)f->comp_size);
    size_t pos = CKPT_PLANES_HEADER_BYTES;
    for (int p = 0; p < 4; p++) {
        uint32_t len = get_u32(c + 4 * (size_t)p);
        unsigned char *out = (unsigned char *)d->scratch + (size_t)p * ne;
        if ((mask >> p) & 1) {
            unsigned long long csz = ZSTD_getFrameContentSize(c + pos, len);
            size_t fsz = ZSTD_findFrameCompressedSize(c + pos, len), got;
            if (csz == ZSTD_CONTENTSIZE_ERROR || ZSTD_isError(fsz) || fsz != len)
                return ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u: plane %d is not one valid "
                                   "zstd frame", r->path, i, p);
            if (csz != ne)
                return ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u: plane %d declares %llu bytes, "
                                   "expected %zu", r->path, i, p, csz, ne);
            got = ZSTD_decompressDCtx(d->dctx, out, ne, c + pos, len);
            if (ZSTD_isError(got) || got != ne)
                return ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u: plane %d does not decompress "
                                   "to %zu bytes", r->path, i, p, ne);
        } else {
            memcpy(out, c + pos, ne);
        }
        pos += len;
    }
    memcpy((unsigned char *)d->scratch + 4 * ne, c + pos, tail);
    unshuffle4(dst, d->scratch, (size_t)f->raw_size);
    if (XXH64(dst, f->raw_size, 0) != f->xxh64)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u checksum mismatch", r->path, i);
    return CKPT_OK;
}

static int decode_frame(const ckpt_shard_reader_t *r, ckpt_decoder_t *d, uint32_t i,
                        void *dst)
{
    const ckpt_frame_t *f = &r->frames[i];
    if (f->flags & CKPT_FRAME_STORED) { /* sizes were checked at open */
        memcpy(dst, d->comp, f->raw_size);
        if (XXH64(dst, f->raw_size, 0) != f->xxh64)
            return ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u checksum mismatch",
                               r->path, i);
        return CKPT_OK;
    }
    if (f->flags & CKPT_FRAME_PLANES)
        return decode_planes(r, d, i, dst);
    unsigned char *out = (f->flags & CKPT_FRAME_SHUFFLE4) ? d->scratch : dst;
    unsigned long long csz = ZSTD_getFrameContentSize(d->comp, f->comp_size);
    size_t fsz = ZSTD_findFrameCompressedSize(d->comp, f->comp_size), got;

    if (csz == ZSTD_CONTENTSIZE_ERROR || ZSTD_isError(fsz) ||
        fsz != f->comp_size)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u is not one valid zstd "
                           "frame", r->path, i);
    if (csz != f->raw_size)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u declares %llu bytes, "
                           "seek table says %llu", r->path, i, csz,
                           (unsigned long long)f->raw_size);
    got = ZSTD_decompressDCtx(d->dctx, out, f->raw_size, d->comp,
                              f->comp_size);
    if (ZSTD_isError(got))
        return ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u does not decompress: "
                           "%s", r->path, i, ZSTD_getErrorName(got));
    if (got != f->raw_size)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u decompressed to %zu "
                           "bytes, expected %llu", r->path, i, got,
                           (unsigned long long)f->raw_size);
    if (out != dst)
        unshuffle4(dst, out, f->raw_size);
    if (XXH64(dst, f->raw_size, 0) != f->xxh64)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u checksum mismatch",
                           r->path, i);
    return CKPT_OK;
}

int ckpt_shard_read_frame(ckpt_shard_reader_t *r, uint32_t i, void *dst)
{
    return ckpt_shard_read_frame_dec(r, &r->dec, i, dst);
}

int ckpt_shard_read_frame_dec(const ckpt_shard_reader_t *r, ckpt_decoder_t *d, uint32_t i,
                              void *dst)
{
    const ckpt_frame_t *f;
    if (i >= r->nframes)
        return ckpt_seterr(CKPT_EINVAL, "%s: no frame %u", r->path, i);
    if (decoder_fit(d, r) != 0)
        return ckpt_seterr(CKPT_ENOMEM, "%s: out of memory for frame buffers", r->path);
    f = &r->frames[i];
    /* A stored frame is read straight into place and checked there. */
    void *into = (f->flags & CKPT_FRAME_STORED) ? dst : d->comp;
    if (ckpt_pread_all(r->fd, into, f->comp_size, f->comp_offset) != 0)
        return ckpt_seterr(errno == EIO ? CKPT_ECORRUPT : CKPT_EIO,
                           "%s: reading frame %u: %s", r->path, i,
                           strerror(errno));
    if (f->flags & CKPT_FRAME_STORED)
        return XXH64(dst, f->raw_size, 0) == f->xxh64
                   ? CKPT_OK
                   : ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u checksum mismatch",
                                 r->path, i);
    return decode_frame(r, d, i, dst);
}

int ckpt_shard_verify(ckpt_shard_reader_t *r, const ckpt_shard_info_t *expect)
{
    int rc = CKPT_OK;
    XXH64_state_t *h = XXH64_createState();
    unsigned char *raw = big_alloc(r->max_raw ? (size_t)r->max_raw : 1), *tail = NULL;
    uint64_t tail_off = r->nframes ? r->frames[r->nframes - 1].comp_offset +
                                         r->frames[r->nframes - 1].comp_size
                                   : CKPT_SHARD_HEADER_BYTES;
    size_t tail_len = (size_t)(r->file_bytes - tail_off);
    unsigned char hdr[CKPT_SHARD_HEADER_BYTES];

    tail = malloc(tail_len);
    if (!h || !raw || !tail) {
        rc = ckpt_seterr(CKPT_ENOMEM, "%s: out of memory", r->path);
        goto fail;
    }
    XXH64_reset(h, 0);
    if (ckpt_pread_all(r->fd, hdr, sizeof hdr, 0) != 0)
        goto rerr;
    XXH64_update(h, hdr, sizeof hdr);
    for (uint32_t i = 0; i < r->nframes; i++) {
        const ckpt_frame_t *f = &r->frames[i];
        if (ckpt_pread_all(r->fd, r->dec.comp, f->comp_size, f->comp_offset) != 0)
            goto rerr;
        XXH64_update(h, r->dec.comp, f->comp_size);
        rc = decode_frame(r, &r->dec, i, raw);
        if (rc != CKPT_OK)
            goto fail;
    }
    if (ckpt_pread_all(r->fd, tail, tail_len, tail_off) != 0)
        goto rerr;
    XXH64_update(h, tail, tail_len);
    if (XXH64_digest(h) != expect->xxh64) {
        rc = ckpt_seterr(CKPT_ECORRUPT, "%s: file checksum mismatch", r->path);
        goto fail;
    }
    goto done;
rerr:
    rc = ckpt_seterr(errno == EIO ? CKPT_ECORRUPT : CKPT_EIO,
                     "%s: read: %s", r->path, strerror(errno));
fail:
done:
    XXH64_freeState(h);
    free(raw);
    free(tail);
    return rc;
}

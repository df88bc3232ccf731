/*
 * shard.c - the shard file format: a slice of the flat byte space cut into
 * independent zstd frames of bounded raw size, each optionally byte-shuffled
 * (4-byte elements) and checksummed, followed by a seek table and a fixed
 * footer, so that any raw range can be read by decoding only the frames that
 * overlap it.  The layout is described in ckpt_internal.h and specified in
 * docs/checkpoint-format.md.
 *
 * The writer makes one pass: gather a frame's bytes from the tensors, shuffle,
 * compress with one reused ZSTD_CCtx, and hand the whole compressed frame to
 * a writer thread that issues one write(2) per frame and starts writeback
 * early (sync_file_range), so compression, copying and disk I/O overlap and
 * the final fsync has little left to do.  The reader trusts nothing in the file: every
 * size and offset is checked against the file size and the manifest.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>
#include <zstd.h>

#include "ckpt_internal.h"

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
    uint64_t end = off + len;
    size_t i = *cursor;
    *bytes4 = 0;
    memset(dst, 0, len);
    while (i < n && t[i].offset + t[i].nbytes <= off)
        i++;
    *cursor = i;
    for (; i < n && t[i].offset < end; i++) {
        uint64_t a = t[i].offset > off ? t[i].offset : off;
        uint64_t b = t[i].offset + t[i].nbytes < end ? t[i].offset + t[i].nbytes
                                                     : end;
        if (b <= a)
            continue;
        memcpy(dst + (a - off), (const unsigned char *)t[i].data +
                                    (a - t[i].offset), (size_t)(b - a));
        if (ckpt_dtype_size(t[i].dtype) == 4)
            *bytes4 += (size_t)(b - a);
    }
}

/* A small ring of compressed-frame buffers between the compressing thread
 * and the writing thread. */
#define WQ_NBUF 3

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int fd;
    int do_sync;
    unsigned char *buf[WQ_NBUF];
    size_t len[WQ_NBUF];
    int head, count; /* filled slots are head .. head+count-1 (mod NBUF) */
    int done;        /* no more frames will be queued */
    int err;         /* errno of the first failed write, 0 if none */
    uint64_t pos, synced;
} wq_t;

static void *wq_writer(void *arg)
{
    wq_t *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        int slot;
        size_t len;
        while (q->count == 0 && !q->done)
            pthread_cond_wait(&q->cv, &q->mu);
        if (q->count == 0)
            break;
        slot = q->head;
        len = q->len[slot];
        pthread_mutex_unlock(&q->mu);
        if (!q->err) {
            if (ckpt_write_all(q->fd, q->buf[slot], len) != 0) {
                q->err = errno ? errno : EIO;
            } else {
                q->pos += len;
                if (q->do_sync && q->pos - q->synced >= (8u << 20)) {
                    (void)sync_file_range(q->fd, (off_t)q->synced,
                                          (off_t)(q->pos - q->synced),
                                          SYNC_FILE_RANGE_WRITE);
                    q->synced = q->pos;
                }
            }
        }
        pthread_mutex_lock(&q->mu);
        q->head = (q->head + 1) % WQ_NBUF;
        q->count--;
        pthread_cond_broadcast(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

/* Wait for a free slot.  @return its index. */
static int wq_acquire(wq_t *q)
{
    int slot;
    pthread_mutex_lock(&q->mu);
    while (q->count == WQ_NBUF)
        pthread_cond_wait(&q->cv, &q->mu);
    slot = (q->head + q->count) % WQ_NBUF;
    pthread_mutex_unlock(&q->mu);
    return slot;
}

/* Queue the filled slot for writing.  @return the writer's errno so far. */
static int wq_push(wq_t *q, int slot, size_t len)
{
    int err;
    pthread_mutex_lock(&q->mu);
    q->len[slot] = len;
    q->count++;
    err = q->err;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    return err;
}

/* Tell the writer to finish and wait for it.  @return its errno (0 = ok). */
static int wq_finish(wq_t *q, pthread_t th)
{
    pthread_mutex_lock(&q->mu);
    q->done = 1;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    pthread_join(th, NULL);
    return q->err;
}

int ckpt_shard_encode(const char *path, uint64_t lo, uint64_t hi,
                      const ckpt_tensor_t *tensors, size_t n,
                      const ckpt_opts_t *opts, ckpt_shard_info_t *info)
{
    int rc = CKPT_OK, fd = -1, saved, started = 0, werr = 0, qinit = 0;
    ZSTD_CCtx *cctx = NULL;
    unsigned char *raw = NULL, *shuf = NULL, *table = NULL;
    XXH64_state_t *fh = NULL;
    size_t fb = opts->frame_bytes, cap_out, cursor = 0;
    uint64_t nframes = hi > lo ? (hi - lo + fb - 1) / fb : 0;
    uint64_t pos = CKPT_SHARD_HEADER_BYTES;
    unsigned char hdr[CKPT_SHARD_HEADER_BYTES], foot[CKPT_SHARD_FOOTER_BYTES];
    size_t zr;
    wq_t q;
    pthread_t th;

    memset(&q, 0, sizeof q);
    if (nframes > UINT32_MAX)
        return ckpt_seterr(CKPT_EINVAL, "%s: too many frames (%llu)", path,
                           (unsigned long long)nframes);
    cap_out = ZSTD_compressBound(fb);
    cctx = ZSTD_createCCtx();
    fh = XXH64_createState();
    raw = malloc(fb);
    shuf = malloc(fb);
    table = calloc(nframes ? nframes : 1, CKPT_SHARD_ENTRY_BYTES);
    for (int i = 0; i < WQ_NBUF; i++)
        q.buf[i] = malloc(cap_out);
    if (!cctx || !fh || !raw || !shuf || !table || !q.buf[0] || !q.buf[1] ||
        !q.buf[2]) {
        rc = ckpt_seterr(CKPT_ENOMEM, "%s: out of memory for a shard writer",
                         path);
        goto fail;
    }
    zr = ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, opts->level);
    if (!ZSTD_isError(zr))
        zr = ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 1);
    if (!ZSTD_isError(zr) && opts->threads > 0)
        zr = ZSTD_CCtx_setParameter(cctx, ZSTD_c_nbWorkers, opts->threads);
    if (ZSTD_isError(zr)) {
        rc = ckpt_seterr(CKPT_EZSTD, "%s: zstd parameters (level %d, %d "
                         "threads): %s", path, opts->level, opts->threads,
                         ZSTD_getErrorName(zr));
        goto fail;
    }
    XXH64_reset(fh, 0);

    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = ckpt_seterr(CKPT_EIO, "%s: cannot create: %s", path,
                         strerror(errno));
        goto fail;
    }
    memcpy(hdr, CKPT_SHARD_MAGIC, 8);
    put_u32(hdr + 8, CKPT_SHARD_VERSION);
    put_u32(hdr + 12, 0);
    XXH64_update(fh, hdr, sizeof hdr);
    if (ckpt_write_all(fd, hdr, sizeof hdr) != 0) {
        werr = errno;
        goto werr;
    }

    q.fd = fd;
    q.do_sync = opts->fsync;
    q.pos = q.synced = CKPT_SHARD_HEADER_BYTES;
    if (pthread_mutex_init(&q.mu, NULL) != 0)
        goto nothread;
    if (pthread_cond_init(&q.cv, NULL) != 0) {
        pthread_mutex_destroy(&q.mu);
        goto nothread;
    }
    qinit = 1;
    if (pthread_create(&th, NULL, wq_writer, &q) != 0) {
nothread:
        rc = ckpt_seterr(CKPT_ENOMEM, "%s: cannot start the writer thread",
                         path);
        goto fail;
    }
    started = 1;

    for (uint64_t f = 0; f < nframes; f++) {
        uint64_t roff = lo + f * fb;
        size_t len = (size_t)(hi - roff < fb ? hi - roff : fb), b4;
        const unsigned char *src = raw;
        uint32_t flags = 0;
        unsigned char *e = table + f * CKPT_SHARD_ENTRY_BYTES;
        int slot;

        gather(raw, roff, len, tensors, n, &cursor, &b4);
        if (opts->shuffle && len >= 8 && b4 * 2 >= len) {
            shuffle4(shuf, raw, len);
            src = shuf;
            flags |= CKPT_FRAME_SHUFFLE4;
        }
        slot = wq_acquire(&q);
        zr = ZSTD_compress2(cctx, q.buf[slot], cap_out, src, len);
        if (ZSTD_isError(zr)) {
            rc = ckpt_seterr(CKPT_EZSTD, "%s: compressing frame %llu: %s",
                             path, (unsigned long long)f,
                             ZSTD_getErrorName(zr));
            goto fail;
        }
        put_u64(e, roff - lo);
        put_u64(e + 8, len);
        put_u64(e + 16, pos);
        put_u64(e + 24, zr);
        put_u64(e + 32, XXH64(raw, len, 0));
        put_u32(e + 40, flags);
        put_u32(e + 44, 0);
        XXH64_update(fh, q.buf[slot], zr);
        pos += zr;
        if ((werr = wq_push(&q, slot, zr)) != 0)
            goto werr;
    }
    started = 0;
    if ((werr = wq_finish(&q, th)) != 0)
        goto werr;

    XXH64_update(fh, table, nframes * CKPT_SHARD_ENTRY_BYTES);
    if (nframes &&
        ckpt_write_all(fd, table, nframes * CKPT_SHARD_ENTRY_BYTES) != 0) {
        werr = errno;
        goto werr;
    }
    put_u64(foot, pos);
    put_u64(foot + 8, nframes);
    put_u64(foot + 16, hi - lo);
    put_u64(foot + 24, XXH64(table, nframes * CKPT_SHARD_ENTRY_BYTES, 0));
    put_u32(foot + 32, CKPT_SHARD_VERSION);
    put_u32(foot + 36, 0);
    memcpy(foot + 40, CKPT_FOOTER_MAGIC, 8);
    XXH64_update(fh, foot, sizeof foot);
    if (ckpt_write_all(fd, foot, sizeof foot) != 0 ||
        (opts->fsync && fsync(fd) != 0)) {
        werr = errno;
        goto werr;
    }
    if (close(fd) != 0) {
        werr = errno;
        fd = -1;
        goto werr;
    }
    fd = -1;

    memset(info, 0, sizeof *info);
    info->raw_offset = lo;
    info->raw_bytes = hi - lo;
    info->file_bytes = pos + nframes * CKPT_SHARD_ENTRY_BYTES + sizeof foot;
    info->xxh64 = XXH64_digest(fh);
    info->nframes = (uint32_t)nframes;
    goto done;

werr:
    errno = werr;
    rc = ckpt_seterr(CKPT_EIO, "%s: write failed: %s", path, strerror(werr));
fail:
    saved = errno;
    if (started)
        (void)wq_finish(&q, th);
    if (fd >= 0)
        close(fd);
    unlink(path);
    errno = saved;
done:
    if (qinit) {
        pthread_mutex_destroy(&q.mu);
        pthread_cond_destroy(&q.cv);
    }
    ZSTD_freeCCtx(cctx);
    XXH64_freeState(fh);
    free(raw);
    free(shuf);
    free(table);
    for (int i = 0; i < WQ_NBUF; i++)
        free(q.buf[i]);
    return rc;
}

/* ---- reading ---------------------------------------------------------- */

void ckpt_shard_reader_close(ckpt_shard_reader_t *r)
{
    if (!r)
        return;
    if (r->fd >= 0)
        close(r->fd);
    free(r->frames);
    ZSTD_freeDCtx(r->dctx);
    free(r->comp);
    free(r->scratch);
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
    if ((f->flags & ~CKPT_FRAME_SHUFFLE4) != 0 || resv != 0)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u has unknown flags "
                           "0x%x", p, i, f->flags);
    return CKPT_OK;
}

int ckpt_shard_reader_open(ckpt_shard_reader_t *r, const char *path,
                           const ckpt_shard_info_t *expect)
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
     * checkpoint directory. */
    r->fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
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
    r->dctx = ZSTD_createDCtx();
    r->comp_cap = maxcomp ? maxcomp : 1;
    r->comp = malloc(r->comp_cap);
    r->scratch_cap = maxraw ? maxraw : 1;
    r->scratch = malloc(r->scratch_cap);
    if (!r->dctx || !r->comp || !r->scratch) {
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

/* Decode the compressed bytes of frame i (already in r->comp) into dst. */
static int decode_frame(ckpt_shard_reader_t *r, uint32_t i, void *dst)
{
    const ckpt_frame_t *f = &r->frames[i];
    unsigned char *out = (f->flags & CKPT_FRAME_SHUFFLE4) ? r->scratch : dst;
    unsigned long long csz = ZSTD_getFrameContentSize(r->comp, f->comp_size);
    size_t fsz = ZSTD_findFrameCompressedSize(r->comp, f->comp_size), got;

    if (csz == ZSTD_CONTENTSIZE_ERROR || ZSTD_isError(fsz) ||
        fsz != f->comp_size)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u is not one valid zstd "
                           "frame", r->path, i);
    if (csz != f->raw_size)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u declares %llu bytes, "
                           "seek table says %llu", r->path, i, csz,
                           (unsigned long long)f->raw_size);
    got = ZSTD_decompressDCtx(r->dctx, out, f->raw_size, r->comp,
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
    const ckpt_frame_t *f;
    if (i >= r->nframes)
        return ckpt_seterr(CKPT_EINVAL, "%s: no frame %u", r->path, i);
    f = &r->frames[i];
    if (ckpt_pread_all(r->fd, r->comp, f->comp_size, f->comp_offset) != 0)
        return ckpt_seterr(errno == EIO ? CKPT_ECORRUPT : CKPT_EIO,
                           "%s: reading frame %u: %s", r->path, i,
                           strerror(errno));
    return decode_frame(r, i, dst);
}

int ckpt_shard_verify(ckpt_shard_reader_t *r, const ckpt_shard_info_t *expect)
{
    int rc = CKPT_OK;
    XXH64_state_t *h = XXH64_createState();
    unsigned char *raw = malloc(r->scratch_cap), *tail = NULL;
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
        if (ckpt_pread_all(r->fd, r->comp, f->comp_size, f->comp_offset) != 0)
            goto rerr;
        XXH64_update(h, r->comp, f->comp_size);
        rc = decode_frame(r, i, raw);
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

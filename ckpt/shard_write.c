/*
 * shard_write.c - writing one shard in one pass.  Encoder threads
 * (opts.threads of them, at least one) gather frames' bytes from the
 * tensors and encode them in parallel; the calling thread writes the
 * encoded frames in order through the sink (sink.c), which hashes the file
 * and overlaps the disk I/O with the encoding.  Then the seek table and the
 * footer follow.  Also the writer's options.
 */
#include "shard.h"

#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "ftrain/ckpt_local.h"
#include "layout.h"
#include "sink.h"
#include "util.h"

/* ---- options ---------------------------------------------------------- */

#define OPTS_LEVEL_MAX 19     /* zstd's highest regular level */
#define OPTS_THREADS_MAX 256

int ckpt_opts_init(ckpt_opts_t *opts, size_t size)
{
    int rc;
    if (!opts)
        return ckpt_seterr(CKPT_EINVAL, "opts_init: NULL options");
    /* An unknown size is kept, so that a save given these options is
     * refused with the same message. */
    if (size >= sizeof opts->size)
        opts->size = size;
    if ((rc = ckpt_check_size("ckpt_opts_t", size, sizeof *opts, "")) != CKPT_OK)
        return rc;
    /* Level 1: higher levels cost far more time for little gain on
     * shuffled float data; see docs/checkpoint-format.md. */
    opts->level = 1;
    /* One encoder thread per CPU this process may use: frames are
     * independent.  Processes sharing those CPUs should pass their share. */
    opts->threads = ckpt_default_threads();
    opts->shuffle = 1;
    opts->frame_bytes = CKPT_FRAME_DEFAULT;
    opts->fsync = 1;
    opts->direct = 1;
    opts->adapt = 1;
    return CKPT_OK;
}

int ckpt_check_opts(const ckpt_opts_t *opts)
{
    /* The size first: no other field is read from options of another size. */
    int rc = ckpt_check_size("ckpt_opts_t", opts->size, sizeof *opts,
                             ", or the options were not filled by ckpt_opts_default()");
    if (rc != CKPT_OK)
        return rc;
    if (opts->level < 0 || opts->level > OPTS_LEVEL_MAX)
        return ckpt_seterr(CKPT_EINVAL, "zstd level %d is not in 0..%d "
                           "(0: stored)", opts->level, OPTS_LEVEL_MAX);
    if (opts->threads < 0 || opts->threads > OPTS_THREADS_MAX)
        return ckpt_seterr(CKPT_EINVAL, "threads %d is not in 0..%d",
                           opts->threads, OPTS_THREADS_MAX);
    if (opts->frame_bytes < 1 || opts->frame_bytes > CKPT_FRAME_MAX)
        return ckpt_seterr(CKPT_EINVAL, "frame_bytes %zu is not in 1..%u",
                           opts->frame_bytes, CKPT_FRAME_MAX);
    return CKPT_OK;
}

/* ---- a frame's raw bytes ---------------------------------------------- */

/* Copy flat bytes [off, off+len) out of the tensors into dst, zeros for the
 * alignment gaps.  *bytes4 gets how many belong to 4-byte dtypes.  *cursor
 * is the first tensor that may overlap (the caller walks forward). */
static void gather(unsigned char *dst, uint64_t off, size_t len,
                   const ckpt_tensor_t *tensors, size_t ntensors, size_t *cursor,
                   size_t *bytes4)
{
    uint64_t end = off + len, filled = off; /* [off, filled) is done */
    size_t at = *cursor;
    *bytes4 = 0;
    while (at < ntensors && tensors[at].offset + tensors[at].nbytes <= off)
        at++;
    *cursor = at;
    for (; at < ntensors && tensors[at].offset < end; at++) {
        const ckpt_tensor_t *tensor = &tensors[at];
        uint64_t from = tensor->offset > off ? tensor->offset : off;
        uint64_t to = tensor->offset + tensor->nbytes < end
                          ? tensor->offset + tensor->nbytes : end;
        if (to <= from)
            continue;
        if (from > filled) /* an alignment gap: zeros */
            memset(dst + (filled - off), 0, (size_t)(from - filled));
        memcpy(dst + (from - off),
               (const unsigned char *)tensor->data + (from - tensor->offset),
               (size_t)(to - from));
        if (ckpt_dtype_size(tensor->dtype) == 4)
            *bytes4 += (size_t)(to - from);
        filled = to;
    }
    if (end > filled)
        memset(dst + (filled - off), 0, (size_t)(end - filled));
}

/* The frame's raw bytes [off, off+len): a pointer into the one tensor that
 * holds all of them (the common case: no copy), else dst after gather(). */
static const unsigned char *frame_source(unsigned char *dst, uint64_t off,
                                         size_t len, const ckpt_tensor_t *tensors,
                                         size_t ntensors, size_t *cursor, size_t *bytes4)
{
    size_t at = *cursor;
    while (at < ntensors && tensors[at].offset + tensors[at].nbytes <= off)
        at++;
    if (at < ntensors && tensors[at].offset <= off &&
        off + len <= tensors[at].offset + tensors[at].nbytes) {
        *cursor = at;
        *bytes4 = ckpt_dtype_size(tensors[at].dtype) == 4 ? len : 0;
        return (const unsigned char *)tensors[at].data + (off - tensors[at].offset);
    }
    gather(dst, off, len, tensors, ntensors, cursor, bytes4);
    return dst;
}

/* ---- the writer ------------------------------------------------------- */

/* Frame-parallel encoding.  Encoder thread k of K takes frames k, k+K, ...
 * and encodes frame f into ring slot f % S with its seek table row (all but
 * the file offset).  The calling thread writes the frames in order and
 * fills in their offsets.  A slot is reused only after its frame was
 * written: frame f may start once frame f - S is on its way to disk. */
#define ENCODERS_MAX 32

/* Adaptive storing: a frame is stored when that is this much faster, and
 * one in this many is compressed anyway to keep the rates current. */
#define ADAPT_MARGIN 1.05
#define ADAPT_RECHECK_EVERY 32

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    const char *path;
    uint64_t lo, hi;          /* the slice of the flat space */
    uint64_t nframes;
    const ckpt_tensor_t *tensors;
    size_t ntensors;
    const ckpt_opts_t *opts;
    size_t frame_bytes;       /* raw bytes per frame (the last may be less) */
    ckpt_frame_t *frames;     /* the seek table, in memory */
    unsigned char *table;     /* and in the file's bytes */
    int nencoders;
    int nslots;
    size_t slot_cap;          /* room for one encoded frame */
    unsigned char **slot;     /* nslots encoded-frame buffers */
    int64_t *slot_frame;      /* the frame a slot holds, -1 when free */
    uint64_t written;         /* frames written so far, in order */
    /* adapt (opts.adapt, direct writes, level > 0): measured rates */
    int adapt;
    double zstd_spb;          /* encoder CPU seconds per raw byte of a
                                 compressed frame (moving average) */
    double zstd_ratio;        /* raw / stored bytes (moving average) */
    double hash_spb;          /* hashing alone, CPU seconds per byte */
    double disk_bps;          /* the I/O thread's rate (0: not yet) */
    int stored_run;           /* frames stored since the last compressed one */
    int rc;                   /* first failure (ckpt_err_t), 0 when none */
    char msg[CKPT_ERRMSG_MAX];/* its message: ckpt_seterr's is per thread */
} shard_writer_t;

typedef struct {
    shard_writer_t *writer;
    int index;
    pthread_t thread;
    int started;
} encoder_thread_t;

/* Record the first failure and wake everyone waiting. */
static void writer_fail(shard_writer_t *writer, int rc, const char *msg)
{
    pthread_mutex_lock(&writer->lock);
    if (!writer->rc) {
        writer->rc = rc;
        snprintf(writer->msg, sizeof writer->msg, "%s", msg);
    }
    pthread_cond_broadcast(&writer->changed);
    pthread_mutex_unlock(&writer->lock);
}

/* Should the next frame be stored?  Called under the lock.  The encoders
 * have K cores (the caller's share), which the writer thread shares: per
 * raw byte a mode costs the encoder's CPU time plus the writer's copy and
 * hash of what it produces; a copy is costed like a hash.  A mode delivers
 *     min(K / (encoder + writer / ratio), disk rate x ratio)
 * raw bytes per second (ratio 1 when stored), so compression pays only
 * while the disk is the limit.  CPU times, not wall times, so that a frame
 * preempted by another thread is not taken for slow.  Nothing is stored
 * before a compressed frame and a disk write were measured. */
static int adapt_store(shard_writer_t *writer)
{
    if (!writer->adapt || writer->zstd_spb <= 0 || writer->disk_bps <= 0)
        return 0;
    double copy_spb = 2 * writer->hash_spb, stored_spb = copy_spb;
    double zstd_cpu = writer->nencoders /
                      (writer->zstd_spb + copy_spb / writer->zstd_ratio),
           zstd_disk = writer->disk_bps * writer->zstd_ratio;
    double stored_cpu = writer->nencoders / (stored_spb + copy_spb),
           stored_disk = writer->disk_bps;
    double zstd_rate = zstd_cpu < zstd_disk ? zstd_cpu : zstd_disk,
           stored_rate = stored_cpu < stored_disk ? stored_cpu : stored_disk;
    if (stored_rate <= ADAPT_MARGIN * zstd_rate ||
        writer->stored_run >= ADAPT_RECHECK_EVERY - 1) {
        writer->stored_run = 0;
        return 0;
    }
    writer->stored_run++;
    return 1;
}

/* Wait until frame f's slot is free and decide, on the latest rates,
 * whether to store it.  @return 1 to go on, 0 when the write failed. */
static int claim_slot(shard_writer_t *writer, uint64_t frame, int *store)
{
    pthread_mutex_lock(&writer->lock);
    while (!writer->rc && frame >= writer->written + (uint64_t)writer->nslots)
        pthread_cond_wait(&writer->changed, &writer->lock);
    int go_on = writer->rc == 0;
    *store = writer->opts->level == 0 || (go_on && adapt_store(writer));
    pthread_mutex_unlock(&writer->lock);
    return go_on;
}

/* Encode frame `index` (its raw bytes at raw, gathered in gather_secs of
 * CPU time) into its slot, fill its seek table row and hand it to the
 * writer.  @return CKPT_OK or CKPT_EZSTD. */
static int encode_frame(shard_writer_t *writer, ckpt_frame_encoder_t *encoder,
                        uint64_t index, const unsigned char *raw, size_t len,
                        size_t bytes4, int store, double gather_secs)
{
    const ckpt_opts_t *opts = writer->opts;
    int slot = (int)(index % (uint64_t)writer->nslots), rc;
    ckpt_frame_t *frame = &writer->frames[index];
    ckpt_encode_mode_t mode = CKPT_ENCODE_ZSTD;
    size_t comp_size;
    uint32_t flags;

    if (store)
        mode = CKPT_ENCODE_STORED;
    else if (opts->shuffle && ckpt_frame_wants_planes(len, bytes4))
        mode = CKPT_ENCODE_PLANES;
    double start = ckpt_clock_cpu();
    rc = ckpt_frame_encode(encoder, mode, raw, len, writer->slot[slot],
                           writer->slot_cap, &comp_size, &flags, writer->path,
                           index);
    if (rc != CKPT_OK)
        return rc;
    double hash_start = ckpt_clock_cpu();
    frame->xxh64 = XXH64(raw, len, 0);
    double end = ckpt_clock_cpu();
    frame->raw_offset = index * writer->frame_bytes;
    frame->raw_size = len;
    frame->comp_size = comp_size;
    frame->flags = flags;

    pthread_mutex_lock(&writer->lock);
    if (writer->adapt) {
        writer->hash_spb = ckpt_ewma(writer->hash_spb,
                                     (end - hash_start) / (double)len);
        if (!store) {
            writer->zstd_spb = ckpt_ewma(writer->zstd_spb,
                                         (gather_secs + end - start) / (double)len);
            writer->zstd_ratio = ckpt_ewma(writer->zstd_ratio,
                                           (double)len /
                                           (double)(comp_size ? comp_size : 1));
        }
    }
    writer->slot_frame[slot] = (int64_t)index;
    pthread_cond_broadcast(&writer->changed);
    pthread_mutex_unlock(&writer->lock);
    return CKPT_OK;
}

static void *encoder_main(void *arg)
{
    encoder_thread_t *self = arg;
    shard_writer_t *writer = self->writer;
    ckpt_frame_encoder_t encoder;
    size_t cursor = 0;
    unsigned char *gathered = ckpt_big_alloc(writer->frame_bytes);
    int rc = ckpt_frame_encoder_init(&encoder, writer->opts->level,
                                     writer->frame_bytes, writer->path);

    if (rc == CKPT_OK && !gathered)
        rc = ckpt_seterr(CKPT_ENOMEM, "%s: out of memory for a shard encoder",
                         writer->path);
    for (uint64_t frame_index = (uint64_t)self->index;
         rc == CKPT_OK && frame_index < writer->nframes;
         frame_index += (uint64_t)writer->nencoders) {
        uint64_t start = writer->lo + frame_index * writer->frame_bytes;
        size_t len = (size_t)(writer->hi - start < writer->frame_bytes
                                  ? writer->hi - start : writer->frame_bytes);
        size_t bytes4;
        int store;
        double gather_start = ckpt_clock_cpu();
        const unsigned char *raw = frame_source(gathered, start, len, writer->tensors,
                                                writer->ntensors, &cursor, &bytes4);
        double gather_secs = ckpt_clock_cpu() - gather_start;
        if (!claim_slot(writer, frame_index, &store))
            break;
        rc = encode_frame(writer, &encoder, frame_index, raw, len, bytes4, store,
                          gather_secs);
    }
    if (rc != CKPT_OK)
        writer_fail(writer, rc, ckpt_last_error());
    ckpt_frame_encoder_free(&encoder);
    free(gathered);
    return NULL;
}

/* Write the encoded frames in order as they come; with adapt, pass the I/O
 * thread's write rate on to the encoders.  A failure is recorded in
 * writer->rc, which stops the encoders. */
static void write_frames(shard_writer_t *writer, ckpt_sink_t *sink)
{
    for (uint64_t frame_index = 0; frame_index < writer->nframes; frame_index++) {
        int slot = (int)(frame_index % (uint64_t)writer->nslots);
        pthread_mutex_lock(&writer->lock);
        while (!writer->rc && writer->slot_frame[slot] != (int64_t)frame_index)
            pthread_cond_wait(&writer->changed, &writer->lock);
        int stop = writer->rc != 0;
        pthread_mutex_unlock(&writer->lock);
        if (stop)
            return;
        ckpt_frame_t *frame = &writer->frames[frame_index];
        frame->comp_offset = ckpt_sink_pos(sink);
        assert(frame->raw_offset == frame_index * writer->frame_bytes);
        if (ckpt_sink_put(sink, writer->slot[slot], frame->comp_size) != CKPT_OK) {
            writer_fail(writer, CKPT_EIO, ckpt_last_error());
            return;
        }
        double rate = writer->adapt ? ckpt_sink_rate(sink) : 0;
        pthread_mutex_lock(&writer->lock);
        writer->disk_bps = rate;
        writer->slot_frame[slot] = -1;
        writer->written = frame_index + 1;
        pthread_cond_broadcast(&writer->changed);
        pthread_mutex_unlock(&writer->lock);
    }
}

/* Start the encoders, write the frames as they come, join the encoders.
 * @return CKPT_OK or the first failure. */
static int run_encoders(shard_writer_t *writer, ckpt_sink_t *sink)
{
    encoder_thread_t threads[ENCODERS_MAX];

    memset(threads, 0, sizeof threads);
    if (pthread_mutex_init(&writer->lock, NULL) != 0)
        goto nothread;
    if (pthread_cond_init(&writer->changed, NULL) != 0) {
        pthread_mutex_destroy(&writer->lock);
        goto nothread;
    }
    for (int k = 0; k < writer->nencoders; k++) {
        threads[k].writer = writer;
        threads[k].index = k;
        if (pthread_create(&threads[k].thread, NULL, encoder_main, &threads[k]) != 0) {
            writer_fail(writer, CKPT_ENOMEM, "cannot start a shard encoder thread");
            break;
        }
        threads[k].started = 1;
    }
    write_frames(writer, sink);
    for (int k = 0; k < writer->nencoders; k++)
        if (threads[k].started)
            pthread_join(threads[k].thread, NULL);
    pthread_mutex_destroy(&writer->lock);
    pthread_cond_destroy(&writer->changed);
    return writer->rc ? ckpt_seterr(writer->rc, "%s", writer->msg) : CKPT_OK;
nothread:
    return ckpt_seterr(CKPT_ENOMEM, "%s: cannot start the encoder threads",
                       writer->path);
}

static void writer_free(shard_writer_t *writer)
{
    free(writer->frames);
    free(writer->table);
    for (int i = 0; writer->slot && i < writer->nslots; i++)
        free(writer->slot[i]);
    free(writer->slot);
    free(writer->slot_frame);
}

static int writer_init(shard_writer_t *writer, const char *path, uint64_t lo,
                       uint64_t hi, const ckpt_tensor_t *tensors, size_t ntensors,
                       const ckpt_opts_t *opts)
{
    uint64_t nframes;
    int ok;

    memset(writer, 0, sizeof *writer);
    writer->path = path;
    writer->lo = lo;
    writer->hi = hi;
    writer->tensors = tensors;
    writer->ntensors = ntensors;
    writer->opts = opts;
    writer->frame_bytes = opts->frame_bytes;
    nframes = hi > lo ? (hi - lo + writer->frame_bytes - 1) / writer->frame_bytes : 0;
    if (nframes > UINT32_MAX)
        return ckpt_seterr(CKPT_EINVAL, "%s: too many frames (%llu)", path,
                           (unsigned long long)nframes);
    writer->nframes = nframes;
    writer->nencoders = opts->threads > 0 ? opts->threads : 1;
    if (writer->nencoders > ENCODERS_MAX)
        writer->nencoders = ENCODERS_MAX;
    if ((uint64_t)writer->nencoders > nframes)
        writer->nencoders = nframes ? (int)nframes : 1;
    writer->nslots = 2 * writer->nencoders + 1;
    writer->slot_cap = ckpt_frame_encode_bound(writer->frame_bytes);
    writer->frames = calloc(nframes ? nframes : 1, sizeof *writer->frames);
    writer->table = malloc(nframes ? nframes * CKPT_SHARD_ENTRY_BYTES : 1);
    writer->slot = calloc((size_t)writer->nslots, sizeof *writer->slot);
    writer->slot_frame = malloc((size_t)writer->nslots * sizeof *writer->slot_frame);
    ok = writer->frames && writer->table && writer->slot && writer->slot_frame;
    for (int i = 0; ok && i < writer->nslots; i++) {
        writer->slot[i] = ckpt_big_alloc(writer->slot_cap);
        ok = writer->slot[i] != NULL;
        writer->slot_frame[i] = -1;
    }
    if (!ok) {
        writer_free(writer);
        return ckpt_seterr(CKPT_ENOMEM, "%s: out of memory for a shard writer",
                           path);
    }
    return CKPT_OK;
}

/* After the frames: the seek table and the footer.  *footer gets what the
 * footer says. */
static int write_tail(shard_writer_t *writer, ckpt_sink_t *sink,
                      ckpt_shard_footer_t *footer)
{
    size_t table_bytes = (size_t)writer->nframes * CKPT_SHARD_ENTRY_BYTES;
    unsigned char footer_bytes[CKPT_SHARD_FOOTER_BYTES];
    int rc = CKPT_OK;

    footer->table_offset = ckpt_sink_pos(sink);
    for (uint64_t f = 0; f < writer->nframes; f++)
        ckpt_frame_pack(&writer->frames[f],
                        writer->table + f * CKPT_SHARD_ENTRY_BYTES);
    /* Frames lie back to back from the header to the table. */
    assert(writer->nframes == 0 ||
           writer->frames[writer->nframes - 1].comp_offset +
                   writer->frames[writer->nframes - 1].comp_size ==
               footer->table_offset);
    footer->nframes = writer->nframes;
    footer->raw_bytes = writer->hi - writer->lo;
    footer->table_xxh64 = XXH64(writer->table, table_bytes, 0);
    if (table_bytes > 0)
        rc = ckpt_sink_put(sink, writer->table, table_bytes);
    ckpt_shard_footer_pack(footer, footer_bytes);
    if (rc == CKPT_OK)
        rc = ckpt_sink_put(sink, footer_bytes, sizeof footer_bytes);
    return rc;
}

int ckpt_shard_encode(const char *path, uint64_t lo, uint64_t hi,
                      const ckpt_tensor_t *tensors, size_t ntensors,
                      const ckpt_opts_t *opts, ckpt_shard_info_t *info)
{
    shard_writer_t writer;
    ckpt_sink_t *sink = NULL;
    ckpt_shard_footer_t footer;
    unsigned char header[CKPT_SHARD_HEADER_BYTES];
    uint64_t file_bytes = 0, file_xxh64 = 0;
    int rc;

    assert(lo <= hi);
    memset(&footer, 0, sizeof footer);
    if ((rc = writer_init(&writer, path, lo, hi, tensors, ntensors, opts)) != CKPT_OK)
        return rc;
    rc = ckpt_sink_open(&sink, path, opts);
    if (rc == CKPT_OK) {
        writer.adapt = opts->adapt && opts->level > 0 && ckpt_sink_direct(sink);
        ckpt_shard_header_pack(header);
        rc = ckpt_sink_put(sink, header, sizeof header);
    }
    if (rc == CKPT_OK)
        rc = run_encoders(&writer, sink);
    if (rc == CKPT_OK)
        rc = write_tail(&writer, sink, &footer);
    if (rc == CKPT_OK) {
        file_bytes = ckpt_sink_pos(sink);
        rc = ckpt_sink_close(sink, &file_xxh64);
        sink = NULL;
    }
    ckpt_sink_abort(sink); /* NULL once closed */
    writer_free(&writer);
    if (rc != CKPT_OK)
        return rc;
    assert(file_bytes == footer.table_offset + writer.nframes * CKPT_SHARD_ENTRY_BYTES +
                             CKPT_SHARD_FOOTER_BYTES);
    memset(info, 0, sizeof *info);
    info->raw_offset = lo;
    info->raw_bytes = hi - lo;
    info->file_bytes = file_bytes;
    info->xxh64 = file_xxh64;
    info->table_xxh64 = footer.table_xxh64;
    info->nframes = (uint32_t)writer.nframes;
    info->flags = CKPT_SHARD_TABLE_KNOWN;
    return CKPT_OK;
}

/* ---- a stored shard built in place ------------------------------------ */

_Static_assert(CKPT_STORED_DATA_OFFSET == CKPT_SHARD_HEADER_BYTES,
               "a stored shard's raw bytes begin after its header");

uint64_t ckpt_stored_shard_bytes(uint64_t raw_bytes, size_t frame_bytes)
{
    if (frame_bytes < 1 || frame_bytes > CKPT_FRAME_MAX)
        return 0;
    uint64_t nframes = (raw_bytes + frame_bytes - 1) / frame_bytes;
    if (nframes > UINT32_MAX || raw_bytes > UINT64_MAX / 2)
        return 0;
    return CKPT_SHARD_HEADER_BYTES + raw_bytes + nframes * CKPT_SHARD_ENTRY_BYTES +
           CKPT_SHARD_FOOTER_BYTES;
}

int ckpt_stored_shard_finish(void *file, uint64_t file_bytes, uint64_t lo, uint64_t hi,
                             size_t frame_bytes, ckpt_shard_info_t *info)
{
    if (!file || !info || hi < lo)
        return ckpt_seterr(CKPT_EINVAL, "stored_shard_finish: NULL file or info, or slice "
                           "[%llu, %llu)", (unsigned long long)lo, (unsigned long long)hi);
    uint64_t raw = hi - lo, want = ckpt_stored_shard_bytes(raw, frame_bytes);
    if (want == 0 || file_bytes != want || (uint64_t)(size_t)file_bytes != file_bytes)
        return ckpt_seterr(CKPT_EINVAL, "stored_shard_finish: %llu bytes for a slice of %llu "
                           "in frames of %zu, which needs %llu", (unsigned long long)file_bytes,
                           (unsigned long long)raw, frame_bytes, (unsigned long long)want);
    unsigned char *bytes = file, *table = bytes + CKPT_SHARD_HEADER_BYTES + raw;
    uint64_t nframes = (raw + frame_bytes - 1) / frame_bytes;
    XXH64_state_t whole;
    XXH64_reset(&whole, 0);
    ckpt_shard_header_pack(bytes);
    XXH64_update(&whole, bytes, CKPT_SHARD_HEADER_BYTES);
    /* Frame by frame, each frame's bytes hashed twice while they are in
     * the cache: its own checksum, then the file's. */
    for (uint64_t f = 0; f < nframes; f++) {
        const unsigned char *data = bytes + CKPT_SHARD_HEADER_BYTES + f * frame_bytes;
        size_t len = f + 1 < nframes ? frame_bytes : (size_t)(raw - f * frame_bytes);
        ckpt_frame_t frame = {.raw_offset = f * frame_bytes,
                              .raw_size = len,
                              .comp_offset = CKPT_SHARD_HEADER_BYTES + f * frame_bytes,
                              .comp_size = len,
                              .xxh64 = XXH64(data, len, 0),
                              .flags = CKPT_FRAME_STORED};
        XXH64_update(&whole, data, len);
        ckpt_frame_pack(&frame, table + f * CKPT_SHARD_ENTRY_BYTES);
    }
    size_t table_bytes = (size_t)nframes * CKPT_SHARD_ENTRY_BYTES;
    ckpt_shard_footer_t footer = {.table_offset = CKPT_SHARD_HEADER_BYTES + raw,
                                  .nframes = nframes,
                                  .raw_bytes = raw,
                                  .table_xxh64 = XXH64(table, table_bytes, 0)};
    ckpt_shard_footer_pack(&footer, table + table_bytes);
    XXH64_update(&whole, table, table_bytes + CKPT_SHARD_FOOTER_BYTES);
    memset(info, 0, sizeof *info);
    info->raw_offset = lo;
    info->raw_bytes = raw;
    info->file_bytes = file_bytes;
    info->xxh64 = XXH64_digest(&whole);
    info->table_xxh64 = footer.table_xxh64;
    info->nframes = (uint32_t)nframes;
    info->flags = CKPT_SHARD_TABLE_KNOWN;
    return CKPT_OK;
}

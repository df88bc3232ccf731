/*
 * shard_read.c - reading one shard: open it and load its seek table,
 * decode frames, re-read the whole file for ckpt_verify.  The reader trusts
 * nothing in the file: every size and offset is checked against the file
 * size and the manifest before it is used.
 */
#include "shard.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "util.h"

void ckpt_shard_reader_close(ckpt_shard_reader_t *reader)
{
    if (!reader)
        return;
    if (reader->fd >= 0)
        close(reader->fd);
    free(reader->frames);
    ckpt_decoder_free(&reader->decoder);
    memset(reader, 0, sizeof *reader);
    reader->fd = -1;
}

/* Open the file and check that it is a regular file of the manifest's
 * size. */
static int open_file(ckpt_shard_reader_t *reader, int dirfd, const char *name,
                     const ckpt_shard_info_t *expect)
{
    const char *path = reader->path;
    struct stat st;
    /* O_NOFOLLOW: a shard that is a symbolic link could lead outside the
     * checkpoint directory.  O_NONBLOCK: a FIFO in its place must not block
     * the open; it is refused below as not a regular file. */
    reader->fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (reader->fd < 0)
        return ckpt_seterr(errno == ENOENT ? CKPT_EINCOMPLETE
                           : errno == ELOOP ? CKPT_ECORRUPT : CKPT_EIO,
                           "%s: cannot open shard: %s", path,
                           errno == ELOOP ? "it is a symbolic link"
                                          : strerror(errno));
    if (fstat(reader->fd, &st) != 0)
        return ckpt_seterr(CKPT_EIO, "%s: stat: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return ckpt_seterr(CKPT_ECORRUPT, "%s: not a regular file", path);
    reader->file_bytes = (uint64_t)st.st_size;
    if (reader->file_bytes != expect->file_bytes)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: size %llu bytes, manifest says "
                           "%llu (truncated or replaced)", path,
                           (unsigned long long)reader->file_bytes,
                           (unsigned long long)expect->file_bytes);
    if (reader->file_bytes < CKPT_SHARD_HEADER_BYTES + CKPT_SHARD_FOOTER_BYTES)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: too short for a shard", path);
    return CKPT_OK;
}

/* Read the header and footer and check the footer against the manifest
 * and the file's size. */
static int read_ends(ckpt_shard_reader_t *reader, const ckpt_shard_info_t *expect,
                     ckpt_shard_footer_t *footer)
{
    const char *path = reader->path;
    unsigned char header[CKPT_SHARD_HEADER_BYTES],
                  footer_bytes[CKPT_SHARD_FOOTER_BYTES];
    uint64_t table_bytes;
    int rc;

    if ((rc = ckpt_pread_all(reader->fd, header, sizeof header, 0, path)) ||
        (rc = ckpt_pread_all(reader->fd, footer_bytes, sizeof footer_bytes,
                             reader->file_bytes - sizeof footer_bytes, path)) ||
        (rc = ckpt_shard_ends_unpack(header, footer_bytes, path, footer)))
        return rc;
    if (footer->nframes != expect->nframes || footer->raw_bytes != expect->raw_bytes)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: footer says %llu frames, %llu "
                           "bytes; manifest says %u frames, %llu bytes", path,
                           (unsigned long long)footer->nframes,
                           (unsigned long long)footer->raw_bytes, expect->nframes,
                           (unsigned long long)expect->raw_bytes);
    table_bytes = footer->nframes * CKPT_SHARD_ENTRY_BYTES; /* nframes < 2^32 */
    if (footer->table_offset < CKPT_SHARD_HEADER_BYTES ||
        footer->table_offset > reader->file_bytes - CKPT_SHARD_FOOTER_BYTES ||
        reader->file_bytes - CKPT_SHARD_FOOTER_BYTES - footer->table_offset !=
            table_bytes)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: seek table offset %llu does not "
                           "fit the file", path,
                           (unsigned long long)footer->table_offset);
    return CKPT_OK;
}

/* Check the seek table's bytes against the footer and the manifest, and
 * read every entry into reader->frames. */
static int parse_table(ckpt_shard_reader_t *reader, const unsigned char *table,
                       const ckpt_shard_footer_t *footer,
                       const ckpt_shard_info_t *expect)
{
    const char *path = reader->path;
    uint64_t table_bytes = footer->nframes * CKPT_SHARD_ENTRY_BYTES,
             raw_pos = 0, comp_pos = CKPT_SHARD_HEADER_BYTES;
    int rc;

    if (XXH64(table, table_bytes, 0) != footer->table_xxh64)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: seek table checksum mismatch", path);
    /* The table lists every frame's offsets and checksum, so a table that
     * matches the manifest ties every byte read to this checkpoint. */
    if ((expect->flags & CKPT_SHARD_TABLE_KNOWN) &&
        footer->table_xxh64 != expect->table_xxh64)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: seek table checksum %016" PRIx64
                           ", the manifest says %016" PRIx64 ": the file is "
                           "not this checkpoint's shard (another step's or "
                           "rank's?)", path, footer->table_xxh64,
                           expect->table_xxh64);
    for (uint32_t i = 0; i < reader->nframes; i++) {
        ckpt_frame_t *frame = &reader->frames[i];
        rc = ckpt_frame_unpack(table + (size_t)i * CKPT_SHARD_ENTRY_BYTES, i,
                               raw_pos, comp_pos, footer->table_offset,
                               reader->raw_bytes, path, frame);
        if (rc != CKPT_OK)
            return rc;
        raw_pos += frame->raw_size;
        comp_pos += frame->comp_size;
        if (frame->raw_size > reader->max_raw)
            reader->max_raw = frame->raw_size;
        if (frame->comp_size > reader->max_comp)
            reader->max_comp = frame->comp_size;
    }
    if (raw_pos != footer->raw_bytes || comp_pos != footer->table_offset)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: frames do not cover the shard",
                           path);
    return CKPT_OK;
}

int ckpt_shard_reader_open(ckpt_shard_reader_t *reader, int dirfd,
                           const char *name, const char *path,
                           const ckpt_shard_info_t *expect)
{
    ckpt_shard_footer_t footer;
    unsigned char *table = NULL;
    uint64_t table_bytes;
    int rc;

    memset(reader, 0, sizeof *reader);
    reader->fd = -1;
    if (strlen(path) >= sizeof reader->path)
        return ckpt_seterr(CKPT_EINVAL, "shard path too long");
    strcpy(reader->path, path);
    if ((rc = open_file(reader, dirfd, name, expect)) != CKPT_OK ||
        (rc = read_ends(reader, expect, &footer)) != CKPT_OK)
        goto out;
    reader->raw_bytes = footer.raw_bytes;
    reader->nframes = (uint32_t)footer.nframes;
    table_bytes = footer.nframes * CKPT_SHARD_ENTRY_BYTES;
    table = malloc(table_bytes ? table_bytes : 1);
    reader->frames = calloc(footer.nframes ? footer.nframes : 1,
                            sizeof *reader->frames);
    if (!table || !reader->frames) {
        rc = ckpt_seterr(CKPT_ENOMEM, "%s: out of memory for the seek table", path);
        goto out;
    }
    if (table_bytes &&
        (rc = ckpt_pread_all(reader->fd, table, table_bytes, footer.table_offset,
                             path)) != CKPT_OK)
        goto out;
    if ((rc = parse_table(reader, table, &footer, expect)) != CKPT_OK)
        goto out;
    rc = ckpt_decoder_fit(&reader->decoder, reader->max_comp, reader->max_raw, path);
out:
    free(table);
    if (rc != CKPT_OK)
        ckpt_shard_reader_close(reader);
    return rc;
}

uint32_t ckpt_shard_find_frame(const ckpt_shard_reader_t *reader, uint64_t off)
{
    uint32_t lo = 0, hi = reader->nframes; /* answer in [lo, hi) */
    assert(off < reader->raw_bytes && reader->nframes > 0);
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (reader->frames[mid].raw_offset <= off)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

int ckpt_shard_read_frame(ckpt_shard_reader_t *reader, uint32_t index, void *dst)
{
    return ckpt_shard_read_frame_dec(reader, &reader->decoder, index, dst);
}

/* A failed read of frame bytes: a short read means the file changed under
 * the reader (its size was checked), so the data is corrupt. */
static int frame_read_failed(const char *path, uint32_t index)
{
    return ckpt_seterr(errno == EIO ? CKPT_ECORRUPT : CKPT_EIO,
                       "%s: reading frame %u: %s", path, index, strerror(errno));
}

int ckpt_shard_read_frame_dec(const ckpt_shard_reader_t *reader,
                              ckpt_decoder_t *decoder, uint32_t index, void *dst)
{
    const ckpt_frame_t *frame;
    int rc;

    if (index >= reader->nframes)
        return ckpt_seterr(CKPT_EINVAL, "%s: no frame %u", reader->path, index);
    rc = ckpt_decoder_fit(decoder, reader->max_comp, reader->max_raw, reader->path);
    if (rc != CKPT_OK)
        return rc;
    frame = &reader->frames[index];
    /* A stored frame is read straight into place and checked there. */
    if (frame->flags & CKPT_FRAME_STORED) {
        if (ckpt_pread_all(reader->fd, dst, frame->comp_size, frame->comp_offset,
                           reader->path) != CKPT_OK)
            return frame_read_failed(reader->path, index);
        return ckpt_frame_check_sum(frame, dst, reader->path, index);
    }
    if (ckpt_pread_all(reader->fd, decoder->comp, frame->comp_size,
                       frame->comp_offset, reader->path) != CKPT_OK)
        return frame_read_failed(reader->path, index);
    return ckpt_frame_decode(frame, decoder, dst, reader->path, index);
}

int ckpt_shard_verify(ckpt_shard_reader_t *reader, const ckpt_shard_info_t *expect)
{
    int rc = CKPT_OK;
    XXH64_state_t hash;
    unsigned char header[CKPT_SHARD_HEADER_BYTES], *tail = NULL,
                  *raw = ckpt_big_alloc(reader->max_raw ? (size_t)reader->max_raw : 1);
    const ckpt_frame_t *last = reader->nframes ? &reader->frames[reader->nframes - 1]
                                               : NULL;
    /* The seek table and the footer follow the frames. */
    uint64_t tail_off = last ? last->comp_offset + last->comp_size
                             : CKPT_SHARD_HEADER_BYTES;
    size_t tail_len = (size_t)(reader->file_bytes - tail_off);

    tail = malloc(tail_len);
    if (!raw || !tail) {
        rc = ckpt_seterr(CKPT_ENOMEM, "%s: out of memory", reader->path);
        goto out;
    }
    XXH64_reset(&hash, 0);
    if ((rc = ckpt_pread_all(reader->fd, header, sizeof header, 0,
                             reader->path)) != CKPT_OK)
        goto read_failed;
    XXH64_update(&hash, header, sizeof header);
    for (uint32_t i = 0; i < reader->nframes; i++) {
        const ckpt_frame_t *frame = &reader->frames[i];
        if ((rc = ckpt_pread_all(reader->fd, reader->decoder.comp, frame->comp_size,
                                 frame->comp_offset, reader->path)) != CKPT_OK)
            goto read_failed;
        XXH64_update(&hash, reader->decoder.comp, frame->comp_size);
        rc = ckpt_frame_decode(frame, &reader->decoder, raw, reader->path, i);
        if (rc != CKPT_OK)
            goto out;
    }
    if ((rc = ckpt_pread_all(reader->fd, tail, tail_len, tail_off,
                             reader->path)) != CKPT_OK)
        goto read_failed;
    XXH64_update(&hash, tail, tail_len);
    if (XXH64_digest(&hash) != expect->xxh64)
        rc = ckpt_seterr(CKPT_ECORRUPT, "%s: file checksum mismatch", reader->path);
    goto out;
read_failed:
    /* A short read: the file changed since its size was checked. */
    rc = ckpt_seterr(errno == EIO ? CKPT_ECORRUPT : CKPT_EIO, "%s: read: %s",
                     reader->path, strerror(errno));
out:
    free(raw);
    free(tail);
    return rc;
}

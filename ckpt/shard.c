/*
 * shard.c - the shard codec: the byte layout of a shard's header, seek
 * table and footer, and encoding and decoding one frame (zstd, stored, or
 * byte-shuffled into four planes).  It holds the byte (un)shuffle loops,
 * which the Makefile compiles with gcc's dynamic vectorizer cost model.
 *
 * Nothing read from a file is trusted: every size and offset in a seek
 * table entry is checked before a byte of the frame is used.
 */
#include "shard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>
#include <zstd.h>

#include "util.h"

/* ---- little-endian fields --------------------------------------------- */

static void put_u32(unsigned char *bytes, uint32_t value)
{
    for (int i = 0; i < 4; i++)
        bytes[i] = (unsigned char)(value >> (8 * i));
}

static void put_u64(unsigned char *bytes, uint64_t value)
{
    for (int i = 0; i < 8; i++)
        bytes[i] = (unsigned char)(value >> (8 * i));
}

static uint32_t get_u32(const unsigned char *bytes)
{
    uint32_t value = 0;
    for (int i = 3; i >= 0; i--)
        value = (value << 8) | bytes[i];
    return value;
}

static uint64_t get_u64(const unsigned char *bytes)
{
    uint64_t value = 0;
    for (int i = 7; i >= 0; i--)
        value = (value << 8) | bytes[i];
    return value;
}

/* ---- header, seek table and footer ------------------------------------ */

/* Field offsets in a seek table entry and in the footer. */
enum {
    ENTRY_RAW_OFFSET = 0, ENTRY_RAW_SIZE = 8, ENTRY_COMP_OFFSET = 16,
    ENTRY_COMP_SIZE = 24, ENTRY_XXH64 = 32, ENTRY_FLAGS = 40, ENTRY_RESERVED = 44
};
enum {
    FOOTER_TABLE_OFFSET = 0, FOOTER_NFRAMES = 8, FOOTER_RAW_BYTES = 16,
    FOOTER_TABLE_XXH64 = 24, FOOTER_VERSION = 32, FOOTER_FLAGS = 36,
    FOOTER_MAGIC = 40
};
enum { HEADER_VERSION = 8, HEADER_FLAGS = 12 };

void ckpt_shard_header_pack(unsigned char *header)
{
    memcpy(header, CKPT_SHARD_MAGIC, CKPT_MAGIC_BYTES);
    put_u32(header + HEADER_VERSION, CKPT_SHARD_VERSION);
    put_u32(header + HEADER_FLAGS, 0);
}

void ckpt_frame_pack(const ckpt_frame_t *frame, unsigned char *entry)
{
    put_u64(entry + ENTRY_RAW_OFFSET, frame->raw_offset);
    put_u64(entry + ENTRY_RAW_SIZE, frame->raw_size);
    put_u64(entry + ENTRY_COMP_OFFSET, frame->comp_offset);
    put_u64(entry + ENTRY_COMP_SIZE, frame->comp_size);
    put_u64(entry + ENTRY_XXH64, frame->xxh64);
    put_u32(entry + ENTRY_FLAGS, frame->flags);
    put_u32(entry + ENTRY_RESERVED, 0);
}

void ckpt_shard_footer_pack(const ckpt_shard_footer_t *footer,
                            unsigned char *bytes)
{
    put_u64(bytes + FOOTER_TABLE_OFFSET, footer->table_offset);
    put_u64(bytes + FOOTER_NFRAMES, footer->nframes);
    put_u64(bytes + FOOTER_RAW_BYTES, footer->raw_bytes);
    put_u64(bytes + FOOTER_TABLE_XXH64, footer->table_xxh64);
    put_u32(bytes + FOOTER_VERSION, CKPT_SHARD_VERSION);
    put_u32(bytes + FOOTER_FLAGS, 0);
    memcpy(bytes + FOOTER_MAGIC, CKPT_FOOTER_MAGIC, CKPT_MAGIC_BYTES);
}

int ckpt_shard_ends_unpack(const unsigned char *header,
                           const unsigned char *footer_bytes, const char *path,
                           ckpt_shard_footer_t *footer)
{
    uint32_t version = get_u32(header + HEADER_VERSION),
             footer_version = get_u32(footer_bytes + FOOTER_VERSION);
    if (memcmp(header, CKPT_SHARD_MAGIC, CKPT_MAGIC_BYTES) != 0)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: bad header magic", path);
    if (memcmp(footer_bytes + FOOTER_MAGIC, CKPT_FOOTER_MAGIC, CKPT_MAGIC_BYTES) != 0)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: bad footer magic", path);
    if (version != CKPT_SHARD_VERSION || footer_version != version)
        return ckpt_seterr(CKPT_EVERSION, "%s: shard format version %u, this "
                           "build reads %u", path,
                           version != CKPT_SHARD_VERSION ? version : footer_version,
                           CKPT_SHARD_VERSION);
    if (get_u32(header + HEADER_FLAGS) != 0 ||
        get_u32(footer_bytes + FOOTER_FLAGS) != 0)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: unknown header or footer flags",
                           path);
    footer->table_offset = get_u64(footer_bytes + FOOTER_TABLE_OFFSET);
    footer->nframes = get_u64(footer_bytes + FOOTER_NFRAMES);
    footer->raw_bytes = get_u64(footer_bytes + FOOTER_RAW_BYTES);
    footer->table_xxh64 = get_u64(footer_bytes + FOOTER_TABLE_XXH64);
    return CKPT_OK;
}

/* Are a frame's flags one known encoding, consistent with its sizes? */
static int frame_flags_valid(const ckpt_frame_t *frame, uint32_t reserved)
{
    const uint32_t known = CKPT_FRAME_SHUFFLE4 | CKPT_FRAME_STORED | CKPT_FRAME_PLANES;
    if ((frame->flags & ~known) != 0 || reserved != 0)
        return 0;
    if ((frame->flags & CKPT_FRAME_STORED) &&
        (frame->flags != CKPT_FRAME_STORED || frame->comp_size != frame->raw_size))
        return 0;
    if ((frame->flags & CKPT_FRAME_PLANES) &&
        (frame->flags != CKPT_FRAME_PLANES || frame->raw_size < 8 ||
         frame->comp_size < CKPT_PLANES_HEADER_BYTES + frame->raw_size % 4))
        return 0;
    return 1;
}

int ckpt_frame_unpack(const unsigned char *entry, uint32_t index,
                      uint64_t raw_pos, uint64_t comp_pos,
                      uint64_t table_offset, uint64_t raw_bytes,
                      const char *path, ckpt_frame_t *frame)
{
    frame->raw_offset = get_u64(entry + ENTRY_RAW_OFFSET);
    frame->raw_size = get_u64(entry + ENTRY_RAW_SIZE);
    frame->comp_offset = get_u64(entry + ENTRY_COMP_OFFSET);
    frame->comp_size = get_u64(entry + ENTRY_COMP_SIZE);
    frame->xxh64 = get_u64(entry + ENTRY_XXH64);
    frame->flags = get_u32(entry + ENTRY_FLAGS);
    if (frame->raw_offset != raw_pos)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u raw offset %llu, "
                           "expected %llu", path, index,
                           (unsigned long long)frame->raw_offset,
                           (unsigned long long)raw_pos);
    if (frame->raw_size == 0 || frame->raw_size > CKPT_FRAME_MAX ||
        frame->raw_size > raw_bytes - raw_pos)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u raw size %llu out of "
                           "range", path, index,
                           (unsigned long long)frame->raw_size);
    if (frame->comp_offset != comp_pos)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u file offset %llu, "
                           "expected %llu", path, index,
                           (unsigned long long)frame->comp_offset,
                           (unsigned long long)comp_pos);
    if (frame->comp_size == 0 ||
        frame->comp_size > ZSTD_compressBound(CKPT_FRAME_MAX) ||
        frame->comp_size > table_offset - comp_pos)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u compressed size %llu "
                           "out of range", path, index,
                           (unsigned long long)frame->comp_size);
    if (!frame_flags_valid(frame, get_u32(entry + ENTRY_RESERVED)))
        return ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u has unknown flags "
                           "0x%x", path, index, frame->flags);
    return CKPT_OK;
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
        const unsigned char *elem = src + 4 * i;
        p0[i] = elem[0];
        p1[i] = elem[1];
        p2[i] = elem[2];
        p3[i] = elem[3];
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
        unsigned char *elem = dst + 4 * i;
        elem[0] = p0[i];
        elem[1] = p1[i];
        elem[2] = p2[i];
        elem[3] = p3[i];
    }
    memcpy(dst + 4 * ne, src + 4 * ne, len - 4 * ne);
}

/* ---- encoding --------------------------------------------------------- */

/* The bytes of each plane that both compressors try before one is chosen,
 * and how much the better one must shrink them for the plane to be
 * compressed rather than stored. */
#define PLANE_PROBE_BYTES 16384
#define PLANE_MIN_SHRINK_PERCENT 5

/* Encode shuffled bytes (four planes of len / 4 bytes, then the tail) plane
 * by plane.  The sign/exponent byte of float weights is low-entropy noise
 * with few long repeats, where the entropy-leaning compressor is smaller
 * and faster than a zstd level; the low mantissa bytes are noise nothing
 * shrinks.  So each plane is compressed whole by whichever compressor's
 * probe came out smaller (the entropy-leaning one on a tie), and stored
 * when that probe did not shrink enough.  @return the payload size, or a
 * zstd error code. */
static size_t encode_planes(ZSTD_CCtx *level_cctx, ZSTD_CCtx *entropy_cctx,
                            unsigned char *dst, size_t cap,
                            const unsigned char *shuffled, size_t len)
{
    size_t plane_len = len / 4, tail = len - 4 * plane_len,
           pos = CKPT_PLANES_HEADER_BYTES;
    uint32_t mask = 0;
    unsigned char probe[ZSTD_COMPRESSBOUND(PLANE_PROBE_BYTES)];
    for (int p = 0; p < 4; p++) {
        const unsigned char *plane = shuffled + (size_t)p * plane_len;
        size_t probe_len = plane_len < PLANE_PROBE_BYTES ? plane_len
                                                         : PLANE_PROBE_BYTES;
        size_t payload = plane_len;
        ZSTD_CCtx *best = entropy_cctx;
        int packed = 0;
        size_t best_probe = ZSTD_compress2(entropy_cctx, probe, sizeof probe,
                                           plane, probe_len);
        if (ZSTD_isError(best_probe))
            return best_probe;
        size_t level_probe = ZSTD_compress2(level_cctx, probe, sizeof probe,
                                            plane, probe_len);
        if (ZSTD_isError(level_probe))
            return level_probe;
        if (level_probe < best_probe) {
            best = level_cctx;
            best_probe = level_probe;
        }
        if (best_probe * 100 < probe_len * (100 - PLANE_MIN_SHRINK_PERCENT)) {
            payload = ZSTD_compress2(best, dst + pos, cap - pos, plane, plane_len);
            if (ZSTD_isError(payload))
                return payload;
            packed = payload < plane_len;
        }
        if (!packed) {
            memcpy(dst + pos, plane, plane_len);
            payload = plane_len;
        }
        put_u32(dst + 4 * (size_t)p, (uint32_t)payload);
        mask |= (uint32_t)packed << p;
        pos += payload;
    }
    put_u32(dst + 16, mask);
    memcpy(dst + pos, shuffled + 4 * plane_len, tail);
    return pos + tail;
}

/* The entropy-leaning compressor of encode_planes: zstd's fast strategy
 * with the smallest hash table and the longest minimum match it allows, so
 * nearly every byte goes to the Huffman-coded literals. */
static size_t entropy_cctx_setup(ZSTD_CCtx *cctx)
{
    size_t zr = ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, 1);
    if (!ZSTD_isError(zr))
        zr = ZSTD_CCtx_setParameter(cctx, ZSTD_c_strategy, ZSTD_fast);
    if (!ZSTD_isError(zr))
        zr = ZSTD_CCtx_setParameter(cctx, ZSTD_c_hashLog, 6);
    if (!ZSTD_isError(zr))
        zr = ZSTD_CCtx_setParameter(cctx, ZSTD_c_minMatch, 7);
    if (!ZSTD_isError(zr))
        zr = ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 1);
    return zr;
}

int ckpt_frame_encoder_init(ckpt_frame_encoder_t *encoder, int level,
                            size_t frame_bytes, const char *path)
{
    size_t zr;
    memset(encoder, 0, sizeof *encoder);
    encoder->level_cctx = ZSTD_createCCtx();
    encoder->entropy_cctx = ZSTD_createCCtx();
    encoder->shuffled = ckpt_big_alloc(frame_bytes);
    if (!encoder->level_cctx || !encoder->entropy_cctx || !encoder->shuffled)
        return ckpt_seterr(CKPT_ENOMEM, "%s: out of memory for a shard encoder",
                           path);
    zr = ZSTD_CCtx_setParameter(encoder->level_cctx, ZSTD_c_compressionLevel,
                                level ? level : 1);
    if (!ZSTD_isError(zr))
        zr = ZSTD_CCtx_setParameter(encoder->level_cctx, ZSTD_c_contentSizeFlag, 1);
    if (!ZSTD_isError(zr))
        zr = entropy_cctx_setup(encoder->entropy_cctx);
    if (ZSTD_isError(zr))
        return ckpt_seterr(CKPT_EZSTD, "%s: zstd level %d: %s", path, level,
                           ZSTD_getErrorName(zr));
    return CKPT_OK;
}

void ckpt_frame_encoder_free(ckpt_frame_encoder_t *encoder)
{
    ZSTD_freeCCtx(encoder->level_cctx);
    ZSTD_freeCCtx(encoder->entropy_cctx);
    free(encoder->shuffled);
    memset(encoder, 0, sizeof *encoder);
}

size_t ckpt_frame_encode_bound(size_t frame_bytes)
{
    /* The larger of one zstd frame and four planes with their header and
     * tail, with room to spare. */
    return ZSTD_compressBound(frame_bytes) + CKPT_PLANES_HEADER_BYTES +
           4 * ZSTD_compressBound(0) + 64;
}

int ckpt_frame_wants_planes(size_t len, size_t bytes4)
{
    return len >= 8 && bytes4 * 2 >= len;
}

int ckpt_frame_encode(ckpt_frame_encoder_t *encoder, ckpt_encode_mode_t mode,
                      const unsigned char *raw, size_t len, unsigned char *dst,
                      size_t cap, size_t *comp_size, uint32_t *flags,
                      const char *path, uint64_t index)
{
    size_t written;
    switch (mode) {
    case CKPT_ENCODE_STORED: /* checksummed and seekable, no zstd */
        memcpy(dst, raw, len);
        *comp_size = len;
        *flags = CKPT_FRAME_STORED;
        return CKPT_OK;
    case CKPT_ENCODE_PLANES:
        shuffle4(encoder->shuffled, raw, len);
        written = encode_planes(encoder->level_cctx, encoder->entropy_cctx, dst,
                                cap, encoder->shuffled, len);
        *flags = CKPT_FRAME_PLANES;
        break;
    default:
        written = ZSTD_compress2(encoder->level_cctx, dst, cap, raw, len);
        *flags = 0;
        break;
    }
    if (ZSTD_isError(written))
        return ckpt_seterr(CKPT_EZSTD, "%s: compressing frame %llu: %s", path,
                           (unsigned long long)index, ZSTD_getErrorName(written));
    *comp_size = written;
    return CKPT_OK;
}

/* ---- decoding --------------------------------------------------------- */

int ckpt_decoder_fit(ckpt_decoder_t *decoder, uint64_t max_comp,
                     uint64_t max_raw, const char *path)
{
    if (!decoder->dctx && !(decoder->dctx = ZSTD_createDCtx()))
        goto nomem;
    if (!decoder->comp || decoder->comp_cap < max_comp) {
        free(decoder->comp);
        decoder->comp_cap = max_comp ? (size_t)max_comp : 1;
        if (!(decoder->comp = ckpt_big_alloc(decoder->comp_cap)))
            goto nomem;
    }
    if (!decoder->scratch || decoder->scratch_cap < max_raw) {
        free(decoder->scratch);
        decoder->scratch_cap = max_raw ? (size_t)max_raw : 1;
        if (!(decoder->scratch = ckpt_big_alloc(decoder->scratch_cap)))
            goto nomem;
    }
    return CKPT_OK;
nomem:
    return ckpt_seterr(CKPT_ENOMEM, "%s: out of memory for frame buffers", path);
}

void ckpt_decoder_free(ckpt_decoder_t *decoder)
{
    if (!decoder)
        return;
    ZSTD_freeDCtx(decoder->dctx);
    free(decoder->comp);
    free(decoder->scratch);
    memset(decoder, 0, sizeof *decoder);
}

int ckpt_frame_check_sum(const ckpt_frame_t *frame, const void *raw,
                         const char *path, uint32_t index)
{
    if (XXH64(raw, frame->raw_size, 0) != frame->xxh64)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u checksum mismatch",
                           path, index);
    return CKPT_OK;
}

/* Decompress exactly one zstd frame of comp_len bytes that must declare and
 * produce exactly raw_len bytes.  what names it in messages ("frame 3",
 * "frame 3: plane 1"). */
static int zstd_decode_exact(ZSTD_DCtx *dctx, unsigned char *out, size_t raw_len,
                             const unsigned char *comp, size_t comp_len,
                             const char *path, const char *what)
{
    unsigned long long declared = ZSTD_getFrameContentSize(comp, comp_len);
    size_t frame_len = ZSTD_findFrameCompressedSize(comp, comp_len), got;
    if (declared == ZSTD_CONTENTSIZE_ERROR || ZSTD_isError(frame_len) ||
        frame_len != comp_len)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: %s is not one valid zstd "
                           "frame", path, what);
    if (declared != raw_len)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: %s declares %llu bytes, "
                           "seek table says %zu", path, what, declared, raw_len);
    got = ZSTD_decompressDCtx(dctx, out, raw_len, comp, comp_len);
    if (ZSTD_isError(got))
        return ckpt_seterr(CKPT_ECORRUPT, "%s: %s does not decompress: %s",
                           path, what, ZSTD_getErrorName(got));
    if (got != raw_len)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: %s decompressed to %zu bytes, "
                           "expected %zu", path, what, got, raw_len);
    return CKPT_OK;
}

/* A PLANES frame: check its header against the seek table, decode each
 * plane into the scratch buffer, then unshuffle into dst. */
static int decode_planes(const ckpt_frame_t *frame, ckpt_decoder_t *decoder,
                         void *dst, const char *path, uint32_t index)
{
    const unsigned char *comp = decoder->comp;
    size_t plane_len = (size_t)(frame->raw_size / 4),
           tail = (size_t)(frame->raw_size % 4), pos = CKPT_PLANES_HEADER_BYTES;
    uint32_t mask = get_u32(comp + 16);
    uint64_t sum = CKPT_PLANES_HEADER_BYTES + tail;
    char what[sizeof "frame 4294967295: plane 3"];
    int rc;

    if (mask > 15)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u: bad plane mask 0x%x",
                           path, index, mask);
    for (int p = 0; p < 4; p++) {
        uint32_t len = get_u32(comp + 4 * (size_t)p);
        if (!((mask >> p) & 1) && len != plane_len)
            return ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u: stored plane %d has "
                               "%u bytes, expected %zu", path, index, p, len,
                               plane_len);
        sum += len;
    }
    if (sum != frame->comp_size)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: frame %u: plane sizes add up to "
                           "%llu, the seek table says %llu", path, index,
                           (unsigned long long)sum,
                           (unsigned long long)frame->comp_size);
    for (int p = 0; p < 4; p++) {
        uint32_t len = get_u32(comp + 4 * (size_t)p);
        unsigned char *out = decoder->scratch + (size_t)p * plane_len;
        if ((mask >> p) & 1) {
            snprintf(what, sizeof what, "frame %u: plane %d", index, p);
            rc = zstd_decode_exact(decoder->dctx, out, plane_len, comp + pos, len,
                                   path, what);
            if (rc != CKPT_OK)
                return rc;
        } else {
            memcpy(out, comp + pos, plane_len);
        }
        pos += len;
    }
    memcpy(decoder->scratch + 4 * plane_len, comp + pos, tail);
    unshuffle4(dst, decoder->scratch, (size_t)frame->raw_size);
    return ckpt_frame_check_sum(frame, dst, path, index);
}

int ckpt_frame_decode(const ckpt_frame_t *frame, ckpt_decoder_t *decoder,
                      void *dst, const char *path, uint32_t index)
{
    char what[sizeof "frame 4294967295"];
    unsigned char *out;
    int rc;

    if (frame->flags & CKPT_FRAME_STORED) { /* sizes were checked at open */
        memcpy(dst, decoder->comp, frame->raw_size);
        return ckpt_frame_check_sum(frame, dst, path, index);
    }
    if (frame->flags & CKPT_FRAME_PLANES)
        return decode_planes(frame, decoder, dst, path, index);
    out = (frame->flags & CKPT_FRAME_SHUFFLE4) ? decoder->scratch : dst;
    snprintf(what, sizeof what, "frame %u", index);
    rc = zstd_decode_exact(decoder->dctx, out, (size_t)frame->raw_size,
                           decoder->comp, (size_t)frame->comp_size, path, what);
    if (rc != CKPT_OK)
        return rc;
    if (out != dst)
        unshuffle4(dst, out, (size_t)frame->raw_size);
    return ckpt_frame_check_sum(frame, dst, path, index);
}

/*
 * shard.h - the shard file (.ftsh): its format, the codec of its frames
 * (shard.c), the writer (shard_write.c) and the reader (shard_read.c).
 * Specified in docs/checkpoint-format.md, section 4.
 *
 * A shard file is:   header | frame 0 | ... | frame n-1 | seek table | footer
 *
 *   header  16 bytes  "FTCKSHRD", u32 version, u32 flags (0)
 *   frame   one independent zstd frame (content size recorded), or the raw
 *           bytes (flag STORED), or four byte planes (flag PLANES): a
 *           20-byte header of u32 length of each plane's payload and u32
 *           mask (bit p: plane p is a zstd frame, else stored), the four
 *           payloads, then the raw_size % 4 tail bytes as they are
 *   table   n entries of 48 bytes: u64 raw_offset (in the shard's slice),
 *           u64 raw_size, u64 comp_offset (in the file), u64 comp_size,
 *           u64 xxh64 of the raw (unshuffled) bytes, u32 flags, u32 reserved
 *   footer  48 bytes: u64 table_offset, u64 nframes, u64 raw_bytes,
 *           u64 xxh64 of the table, u32 version, u32 flags (0), "FTCKFOOT"
 *
 * All integers are little-endian.  The shard files depend on util.h,
 * layout.h and sink.h.
 */
#ifndef FTRAIN_CKPT_SHARD_H
#define FTRAIN_CKPT_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "ftrain/ckpt.h"

#define CKPT_SHARD_MAGIC "FTCKSHRD"
#define CKPT_FOOTER_MAGIC "FTCKFOOT"
#define CKPT_MAGIC_BYTES 8u
#define CKPT_SHARD_VERSION 1u
#define CKPT_SHARD_HEADER_BYTES 16u
#define CKPT_SHARD_ENTRY_BYTES 48u
#define CKPT_SHARD_FOOTER_BYTES 48u
#define CKPT_FRAME_SHUFFLE4 1u         /* frame flag: 4-byte byte shuffle */
#define CKPT_FRAME_STORED 2u           /* frame flag: raw bytes, no zstd */
#define CKPT_FRAME_PLANES 4u           /* frame flag: 4 byte planes, each
                                          zstd or stored */
#define CKPT_PLANES_HEADER_BYTES 20u
#define CKPT_FRAME_MAX (256u << 20)    /* largest raw frame accepted */
#define CKPT_FRAME_DEFAULT (4u << 20)

/* ---- the format (shard.c) --------------------------------------------- */

/* One frame's seek table entry, in memory. */
typedef struct {
    uint64_t raw_offset;
    uint64_t raw_size;
    uint64_t comp_offset;
    uint64_t comp_size;
    uint64_t xxh64;
    uint32_t flags;
} ckpt_frame_t;

/* The footer's fields, in memory (version and flags are fixed). */
typedef struct {
    uint64_t table_offset;
    uint64_t nframes;
    uint64_t raw_bytes;
    uint64_t table_xxh64;
} ckpt_shard_footer_t;

/* Write the header's, a seek table entry's or the footer's bytes. */
void ckpt_shard_header_pack(unsigned char *header);
void ckpt_frame_pack(const ckpt_frame_t *frame, unsigned char *entry);
void ckpt_shard_footer_pack(const ckpt_shard_footer_t *footer,
                            unsigned char *bytes);

/* Check the header and footer bytes of the shard path (magics, versions,
 * flags) and read the footer's fields.  @return CKPT_OK, CKPT_ECORRUPT or
 * CKPT_EVERSION. */
int ckpt_shard_ends_unpack(const unsigned char *header,
                           const unsigned char *footer_bytes, const char *path,
                           ckpt_shard_footer_t *footer);

/* Read entry `index` of a seek table and check it against what came before
 * it: raw_pos and comp_pos where it must start, table_offset where the
 * frames end, raw_bytes the shard's slice.  @return CKPT_OK or
 * CKPT_ECORRUPT. */
int ckpt_frame_unpack(const unsigned char *entry, uint32_t index,
                      uint64_t raw_pos, uint64_t comp_pos,
                      uint64_t table_offset, uint64_t raw_bytes,
                      const char *path, ckpt_frame_t *frame);

/* ---- encoding frames (shard.c) ---------------------------------------- */

typedef enum {
    CKPT_ENCODE_ZSTD,    /* one zstd frame */
    CKPT_ENCODE_PLANES,  /* four byte planes, each zstd or stored */
    CKPT_ENCODE_STORED   /* the raw bytes */
} ckpt_encode_mode_t;

/* One encoder thread's compression contexts and shuffle buffer. */
typedef struct {
    void *level_cctx;        /* ZSTD_CCtx at the chosen level */
    void *entropy_cctx;      /* ZSTD_CCtx that leans on entropy coding */
    unsigned char *shuffled; /* a frame's bytes cut into planes */
} ckpt_frame_encoder_t;

/* Set an encoder up for frames of at most frame_bytes at zstd level (0:
 * frames are stored; the contexts are made at level 1).  path names the
 * shard in messages.  @return CKPT_OK, CKPT_ENOMEM or CKPT_EZSTD. */
int ckpt_frame_encoder_init(ckpt_frame_encoder_t *encoder, int level,
                            size_t frame_bytes, const char *path);
/* Release an encoder (safe on a zeroed one). */
void ckpt_frame_encoder_free(ckpt_frame_encoder_t *encoder);

/* The room an encoded frame of frame_bytes raw bytes may need. */
size_t ckpt_frame_encode_bound(size_t frame_bytes);

/* Should a frame of len bytes, bytes4 of them in 4-byte dtypes, be cut
 * into byte planes (when shuffling is on)? */
int ckpt_frame_wants_planes(size_t len, size_t bytes4);

/* Encode len raw bytes into dst (cap bytes, ckpt_frame_encode_bound) as
 * mode says; *comp_size and *flags get the seek table's fields.  index
 * names the frame in messages.  @return CKPT_OK or CKPT_EZSTD. */
int ckpt_frame_encode(ckpt_frame_encoder_t *encoder, ckpt_encode_mode_t mode,
                      const unsigned char *raw, size_t len, unsigned char *dst,
                      size_t cap, size_t *comp_size, uint32_t *flags,
                      const char *path, uint64_t index);

/* ---- decoding frames (shard.c) ---------------------------------------- */

/* What decoding a frame needs besides the reader: a zstd context and two
 * frame buffers.  One per thread; buffers grow to the largest frame seen. */
typedef struct {
    void *dctx;              /* ZSTD_DCtx */
    unsigned char *comp;     /* compressed frame buffer */
    size_t comp_cap;
    unsigned char *scratch;  /* shuffled raw bytes */
    size_t scratch_cap;
} ckpt_decoder_t;

/* Make a decoder able to hold frames of max_comp compressed and max_raw
 * raw bytes.  @return CKPT_OK or CKPT_ENOMEM (message naming path). */
int ckpt_decoder_fit(ckpt_decoder_t *decoder, uint64_t max_comp,
                     uint64_t max_raw, const char *path);
/* Release a decoder's context and buffers (safe on a zeroed one). */
void ckpt_decoder_free(ckpt_decoder_t *decoder);

/* Decode frame `index` of the shard path, whose comp_size bytes are in
 * decoder->comp, into dst (room for its raw_size) and check its checksum.
 * @return CKPT_OK or CKPT_ECORRUPT. */
int ckpt_frame_decode(const ckpt_frame_t *frame, ckpt_decoder_t *decoder,
                      void *dst, const char *path, uint32_t index);

/* Check the raw bytes of a frame against its checksum.  @return CKPT_OK or
 * CKPT_ECORRUPT. */
int ckpt_frame_check_sum(const ckpt_frame_t *frame, const void *raw,
                         const char *path, uint32_t index);

/* ---- writing a shard (shard_write.c) ---------------------------------- */

/* Check options from a caller.  @return CKPT_OK or CKPT_EINVAL. */
int ckpt_check_opts(const ckpt_opts_t *opts);

/* Write the flat-space slice [lo, hi) of laid-out tensors to path (created
 * afresh), fsync'd when opts->fsync.  Fills *info (raw_offset = lo).  The
 * file is removed on failure.  @return CKPT_OK, CKPT_EINVAL, CKPT_EIO,
 * CKPT_ENOMEM or CKPT_EZSTD. */
int ckpt_shard_encode(const char *path, uint64_t lo, uint64_t hi,
                      const ckpt_tensor_t *tensors, size_t ntensors,
                      const ckpt_opts_t *opts, ckpt_shard_info_t *info);

/* ---- reading a shard (shard_read.c) ----------------------------------- */

/* An open shard.  Its fields are read-only after open, so several threads
 * may decode frames of one reader at once, each with its own decoder
 * (ckpt_shard_read_frame_dec); reader->decoder is for one thread only. */
typedef struct {
    char path[CKPT_PATH_MAX];
    int fd;
    uint64_t file_bytes;
    uint64_t raw_bytes;
    uint32_t nframes;
    ckpt_frame_t *frames;
    uint64_t max_comp;       /* the largest frame, compressed and raw */
    uint64_t max_raw;
    ckpt_decoder_t decoder;
} ckpt_shard_reader_t;

/* Open name under dirfd (path: its full name, for messages) and load its
 * seek table, checking the header, footer, table checksum and every entry
 * against expect (file_bytes, raw_bytes, nframes, table_xxh64).
 * @return CKPT_OK, CKPT_EINCOMPLETE (file missing), CKPT_EINVAL, CKPT_EIO,
 * CKPT_ECORRUPT, CKPT_EVERSION or CKPT_ENOMEM.  Close with
 * ckpt_shard_reader_close, also after a failure. */
int ckpt_shard_reader_open(ckpt_shard_reader_t *reader, int dirfd,
                           const char *name, const char *path,
                           const ckpt_shard_info_t *expect);
/* Release a reader (safe on a zeroed or half-opened one). */
void ckpt_shard_reader_close(ckpt_shard_reader_t *reader);

/* Decode frame `index` into dst (room for its raw_size), checking its size
 * and checksum.  @return CKPT_OK, CKPT_EINVAL, CKPT_EIO, CKPT_ECORRUPT or
 * CKPT_ENOMEM. */
int ckpt_shard_read_frame(ckpt_shard_reader_t *reader, uint32_t index,
                          void *dst);
/* The same with the caller's decoder: threads may call it at once on one
 * reader with different decoders.  Errors are set for the calling thread. */
int ckpt_shard_read_frame_dec(const ckpt_shard_reader_t *reader,
                              ckpt_decoder_t *decoder, uint32_t index,
                              void *dst);
/* Index of the frame holding raw byte off of the slice (off < raw_bytes). */
uint32_t ckpt_shard_find_frame(const ckpt_shard_reader_t *reader, uint64_t off);
/* Re-read the whole file: its xxh64 against expect->xxh64 and every frame.
 * @return CKPT_OK or the first error. */
int ckpt_shard_verify(ckpt_shard_reader_t *reader,
                      const ckpt_shard_info_t *expect);

#endif

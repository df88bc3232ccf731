/*
 * ckpt_internal.h - declarations shared by the files of the checkpoint
 * library (ckpt.c, shard.c, manifest.c, archive.c) and ckptctl: the
 * thread-local error message, the shard file format constants, the manifest
 * in memory, small I/O helpers and the names of things in a checkpoint root.
 *
 * Nothing here is a public API: other programs use include/ftrain/ckpt.h.
 * The on-disk formats are specified in docs/checkpoint-format.md.
 */
#ifndef FTRAIN_CKPT_INTERNAL_H
#define FTRAIN_CKPT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "ftrain/ckpt.h"

/* ---- errors ----------------------------------------------------------- */

/* Set the calling thread's last error message (printf format) and return rc,
 * so that failures read `rc = ckpt_seterr(CKPT_EIO, "...", ...)`.  errno is
 * preserved across the call. */
int ckpt_seterr(int rc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- names ------------------------------------------------------------ */

#define CKPT_MANIFEST_NAME "manifest.json"
#define CKPT_MANIFEST_TMP "manifest.json.tmp"
#define CKPT_LATEST_NAME "LATEST"
#define CKPT_LATEST_TMP "LATEST.tmp"
#define CKPT_STEP_PREFIX "step-"
#define CKPT_TMP_PREFIX ".tmp-step-"
#define CKPT_FORMAT_NAME "ftrain-ckpt"
#define CKPT_MANIFEST_MAX (64u << 20) /* refuse bigger manifest files */
#define CKPT_MAX_SHARDS 65536
#define CKPT_MAX_TENSORS 1000000

/* Parse "step-<digits>" (canonical, as ckpt_step_dirname writes it) or, when
 * tmp is non-zero, ".tmp-step-<digits>".  @return 1 and *step on a match, 0
 * otherwise. */
int ckpt_parse_dirname(const char *name, int tmp, uint64_t *step);
/* 1 when name has no control character (bytes below 0x20, and 0x7f). */
int ckpt_name_printable(const char *name);
/* Copy s into buf (cap bytes, NUL-terminated) as valid UTF-8 without
 * control codes: C0, DEL and C1 controls and bytes that are not UTF-8 are
 * written as \xNN; a character is never cut in two when s does not fit.
 * @return the length written. */
size_t ckpt_text_clean(const char *s, char *buf, size_t cap);

/* Write the shard file name of a rank ("shard-<rank>.ftsh") into buf. */
void ckpt_shard_name(int rank, char *buf, size_t cap);

/* ---- I/O helpers (ckpt.c) --------------------------------------------- */

/* write(2) all of buf, retrying short writes and EINTR.  @return 0 or -1
 * with errno set. */
int ckpt_write_all(int fd, const void *buf, size_t len);
/* pread(2) exactly len bytes at off.  @return 0, or -1 with errno set (EIO
 * is used for a short read at end of file). */
int ckpt_pread_all(int fd, void *buf, size_t len, uint64_t off);
/* rename(2) that fails with EEXIST when to exists (renameat2
 * RENAME_NOREPLACE; where the filesystem lacks it, a check then rename).
 * @return 0 or -1 with errno set. */
int ckpt_rename_noreplace(const char *from, const char *to);
/* fsync a directory by path.  @return 0 or -1 with errno set. */
int ckpt_fsync_dir(const char *dir);
/* Read a whole small file (at most max bytes) into a NUL-terminated malloc'd
 * buffer.  @return CKPT_OK, CKPT_ENOTFOUND (ENOENT), CKPT_EIO, CKPT_EFORMAT
 * (too big) or CKPT_ENOMEM; the message names the file. */
int ckpt_read_small_file(const char *path, size_t max, char **out,
                         size_t *len);
/* The same for name under dirfd (AT_FDCWD: the working directory); path is
 * the file's full name, for messages. */
int ckpt_read_small_file_at(int dirfd, const char *name, const char *path,
                            size_t max, char **out, size_t *len);
/* Write data to dir/name via dir/tmpname: write, fsync (if do_fsync), rename,
 * fsync dir.  The temp file is removed on failure.  @return CKPT_OK or
 * CKPT_EIO with errno kept. */
int ckpt_write_file_atomic(const char *dir, const char *name,
                           const char *tmpname, const void *data, size_t len,
                           int do_fsync);
/* Join dir and name into buf.  @return CKPT_OK or CKPT_EINVAL (too long). */
int ckpt_path_join(char *buf, size_t cap, const char *dir, const char *name);

/* ---- shard format (shard.c) ------------------------------------------- */

/*
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
 * All integers are little-endian.
 */
#define CKPT_SHARD_MAGIC "FTCKSHRD"
#define CKPT_FOOTER_MAGIC "FTCKFOOT"
#define CKPT_SHARD_VERSION 1u
#define CKPT_SHARD_HEADER_BYTES 16u
#define CKPT_SHARD_ENTRY_BYTES 48u
#define CKPT_SHARD_FOOTER_BYTES 48u
#define CKPT_FRAME_SHUFFLE4 1u         /* frame flag: 4-byte byte shuffle */
#define CKPT_FRAME_STORED 2u           /* frame flag: raw bytes, no zstd */
#define CKPT_FRAME_PLANES 4u           /* frame flag: 4 byte planes, each
                                          zstd or stored (shard.c) */
#define CKPT_PLANES_HEADER_BYTES 20u
#define CKPT_FRAME_MAX (256u << 20)    /* largest raw frame accepted */
#define CKPT_FRAME_DEFAULT (4u << 20)

/* One frame's seek table entry, in memory. */
typedef struct {
    uint64_t raw_offset;
    uint64_t raw_size;
    uint64_t comp_offset;
    uint64_t comp_size;
    uint64_t xxh64;
    uint32_t flags;
} ckpt_frame_t;

/* What decoding a frame needs besides the reader: a zstd context and two
 * frame buffers.  One per thread; buffers grow to the largest frame seen. */
typedef struct {
    void *dctx;        /* ZSTD_DCtx */
    void *comp;        /* compressed frame buffer */
    size_t comp_cap;
    void *scratch;     /* shuffled raw bytes */
    size_t scratch_cap;
} ckpt_decoder_t;

/* Release a decoder's context and buffers (safe on a zeroed one). */
void ckpt_decoder_free(ckpt_decoder_t *d);

/* An open shard for reading.  Its fields are read-only after open, so several
 * threads may decode frames of one reader at once, each with its own
 * decoder (ckpt_shard_read_frame_dec); r->dec is for one thread only. */
typedef struct {
    char path[CKPT_PATH_MAX];
    int fd;
    uint64_t file_bytes;
    uint64_t raw_bytes;
    uint32_t nframes;
    ckpt_frame_t *frames;
    uint64_t max_comp; /* the largest frame, compressed and raw */
    uint64_t max_raw;
    ckpt_decoder_t dec;
} ckpt_shard_reader_t;

/* Write the flat-space slice [lo, hi) of laid-out tensors to path (created or
 * truncated), fsync'd when opts->fsync.  Fills *info (raw_offset = lo).  The
 * file is removed on failure.  @return CKPT_OK, CKPT_EIO, CKPT_ENOMEM or
 * CKPT_EZSTD. */
int ckpt_shard_encode(const char *path, uint64_t lo, uint64_t hi,
                      const ckpt_tensor_t *tensors, size_t n,
                      const ckpt_opts_t *opts, ckpt_shard_info_t *info);

/* Open name under dirfd (path: its full name, for messages) and load its seek table, checking the header, footer, table
 * checksum and every entry against expect (file_bytes, raw_bytes, nframes).
 * @return CKPT_OK, CKPT_EINCOMPLETE (file missing), CKPT_EIO, CKPT_ECORRUPT,
 * CKPT_EVERSION or CKPT_ENOMEM.  Close with ckpt_shard_reader_close. */
int ckpt_shard_reader_open(ckpt_shard_reader_t *r, int dirfd, const char *name,
                           const char *path, const ckpt_shard_info_t *expect);
/* Release a reader (safe on a zeroed or half-opened one). */
void ckpt_shard_reader_close(ckpt_shard_reader_t *r);
/* Decode frame i into dst (room for its raw_size), checking its size and
 * checksum.  @return CKPT_OK, CKPT_EIO, CKPT_ECORRUPT or CKPT_ENOMEM. */
int ckpt_shard_read_frame(ckpt_shard_reader_t *r, uint32_t i, void *dst);
/* The same with the caller's decoder: threads may call it at once on one
 * reader with different decoders.  Errors are set for the calling thread. */
int ckpt_shard_read_frame_dec(const ckpt_shard_reader_t *r, ckpt_decoder_t *d, uint32_t i,
                              void *dst);
/* Index of the frame holding raw byte off of the slice (off < raw_bytes). */
uint32_t ckpt_shard_find_frame(const ckpt_shard_reader_t *r, uint64_t off);
/* Re-read the whole file: its xxh64 against expect->xxh64 and every frame.
 * @return CKPT_OK or the first error. */
int ckpt_shard_verify(ckpt_shard_reader_t *r, const ckpt_shard_info_t *expect);

/* ---- manifest (manifest.c) -------------------------------------------- */

typedef struct {
    int version;
    uint64_t step;
    int64_t created;
    uint64_t total_bytes;
    size_t ntensors;
    ckpt_tensor_t *tensors;      /* data NULL */
    int nshards;
    ckpt_shard_info_t *shards;
    ckpt_opts_t opts;            /* as recorded; informational */
    char *record;                /* compact JSON object text */
    int checksummed;             /* manifest_xxh64 present and verified */
} ckpt_manifest_t;

/* Serialise m to JSON text (malloc'd, NUL-terminated).  m->record must be a
 * JSON object's text.  @return CKPT_OK, CKPT_EINVAL (record not an object)
 * or CKPT_ENOMEM. */
int ckpt_manifest_dump(const ckpt_manifest_t *m, char **text);

/* Parse and validate manifest text as untrusted input; `what` names the file
 * in messages.  On failure *m is left empty.  @return CKPT_OK, CKPT_EFORMAT,
 * CKPT_EVERSION or CKPT_ENOMEM. */
int ckpt_manifest_parse(const char *text, size_t len, const char *what,
                        ckpt_manifest_t *m);

/* Free what m owns and zero it (accepts a zeroed m). */
void ckpt_manifest_free(ckpt_manifest_t *m);

/* Check the tensor array as ckpt_layout would lay it out: names, dtypes,
 * shapes, offsets in order, 8-byte aligned, nbytes.  @return CKPT_OK and
 * *total, or CKPT_EINVAL. */
int ckpt_check_layout(const ckpt_tensor_t *t, size_t n, uint64_t *total);

#endif

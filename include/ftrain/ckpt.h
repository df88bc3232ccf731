/*
 * ckpt.h - sharded, zstd-compressed, checksummed checkpoints with one atomic
 * commit point and resharding on load.
 *
 * HowTo (save).  A checkpoint is a set of named tensors laid out one after the
 * other in one flat logical byte space, plus a JSON "record" chosen by the
 * caller (the trainer's epoch, data cursor, configuration, ...).  Every one of
 * the W saving ranks holds the whole state (data parallel) and writes one
 * contiguous slice of the flat space into its own shard file:
 *
 *     ckpt_layout(tensors, n, &total);             offsets, same on every rank
 *     ckpt_shard_write(root, step, rank, W, ...)   local I/O only: this rank's
 *                                                  slice -> .tmp-step-<N>/shard
 *     ckpt_commit(root, step, ..., &coll)          collective: gather shard
 *                                                  infos; rank 0 writes the
 *                                                  manifest and commits
 *
 * ckpt_save() does both phases.  The split lets a caller run phase one in a
 * background thread (it touches no communicator) and phase two on the main
 * thread at a step boundary.  ckpt knows nothing of MPI: the caller passes a
 * ckpt_coll_t with allgather/bcast callbacks.
 *
 * HowTo (load).  ckpt_open() a committed step directory (it validates the
 * manifest as untrusted input), look tensors up with ckpt_find(), and read any
 * byte range of the flat space with ckpt_read_range(): only the zstd frames
 * that overlap the range are read and decompressed, and each frame's checksum
 * is verified.  A reader of any world size M can therefore load a checkpoint
 * written by any N ranks.
 *
 * HowTo (manage).  ckpt_list() reports every checkpoint under a root with its
 * status; ckpt_latest_good() finds the newest one that verifies; ckpt_prune()
 * keeps the last K; ckpt_verify() re-reads every byte.
 *
 * HowTo (structures that grow).  The two structures a caller allocates and
 * the library reads or fills, ckpt_opts_t and ckpt_entry_t, begin with a
 * `size_t size`: the size of the structure as the caller was compiled.
 * ckpt_opts_default(&opts) is a macro that passes sizeof opts to
 * ckpt_opts_init(), and ckpt_list() one that passes sizeof(ckpt_entry_t) to
 * ckpt_list_sized(), so a caller writes neither size by hand.  A later
 * version of this library may append fields under the same SONAME: it
 * keeps accepting every size an earlier version wrote (the fields such a
 * caller lacks take their defaults, an entry is filled up to its size) and
 * refuses, with CKPT_EINVAL and a message naming both sizes, a size it does
 * not know, such as that of a program compiled against a newer header than
 * the library it loaded, or of options never filled by ckpt_opts_default().
 * A leading size was chosen over opaque handles with setters and getters:
 * the structures stay plain data that a caller may keep on its stack and
 * copy, that a language binding (ctypes) mirrors field by field, and whose
 * growth costs one size check per call.  ckpt_tensor_t, ckpt_coll_t,
 * ckpt_shard_info_t and ckpt_local_step_t have no size: their layout is part
 * of the SONAME (a change of it is a new major version).
 *
 * Errors.  Every function returns CKPT_OK (0) or a negative ckpt_err_t code;
 * ckpt_strerror() names it, and ckpt_last_error() gives a message naming the
 * file and what is wrong for the calling thread's last failure.  Nothing here
 * exits or prints.  The on-disk format is specified in docs/checkpoint-format.md.
 */
#ifndef FTRAIN_CKPT_H
#define FTRAIN_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "ftrain/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the library's public functions.  The shared library
 * (libftrain-ckpt.so) is compiled with -fvisibility=hidden and exports
 * these and nothing else: the helpers its files share stay internal. */
#if defined(__GNUC__) && __GNUC__ >= 4
#define CKPT_API __attribute__((visibility("default")))
#else
#define CKPT_API
#endif

#define CKPT_FORMAT_VERSION 1
#define CKPT_MAX_DIMS 4
#define CKPT_NAME_MAX 128 /* tensor name, including the terminating NUL */
#define CKPT_PATH_MAX 4096

typedef enum {
    CKPT_OK = 0,
    CKPT_EIO = -1,        /* open/read/write/fsync/rename failed (errno kept) */
    CKPT_ENOMEM = -2,     /* allocation failed */
    CKPT_EINVAL = -3,     /* bad argument from the caller */
    CKPT_ECORRUPT = -4,   /* checksum mismatch, bad magic, bad frame */
    CKPT_EFORMAT = -5,    /* manifest malformed: wrong types, out-of-range */
    CKPT_ENOTFOUND = -6,  /* no such checkpoint, tensor or file */
    CKPT_EINCOMPLETE = -7,/* not committed (no manifest) or shard missing */
    CKPT_EVERSION = -8,   /* format version this build cannot read */
    CKPT_EEXIST = -9,     /* a committed checkpoint of this step exists */
    CKPT_EPEER = -10,     /* another rank failed during a collective phase */
    CKPT_EZSTD = -11,     /* compression library error */
    CKPT_EARCHIVE = -12   /* archive error or unsafe archive entry */
} ckpt_err_t;

/** @return a static, lowercase name for an error code ("checksum mismatch"). */
CKPT_API const char *ckpt_strerror(int err);

/** @return the version of the library that is loaded, FTRAIN_VERSION_NUMBER
 *  as it was built (ftrain/version.h): a program compares it with the
 *  FTRAIN_VERSION_NUMBER it was compiled with. */
CKPT_API int ckpt_version(void);

/** @return the calling thread's last detailed error message ("" if none).
 *  It is not cleared by a successful call: read it only after a failure. */
CKPT_API const char *ckpt_last_error(void);

typedef enum {
    CKPT_F32 = 0,
    CKPT_F64 = 1,
    CKPT_I64 = 2,
    CKPT_U8 = 3,
    CKPT_I32 = 4
} ckpt_dtype_t;

/** @return bytes per element of a dtype, 0 for an unknown value. */
CKPT_API size_t ckpt_dtype_size(ckpt_dtype_t dtype);
/** @return the dtype's manifest name ("f32"), NULL for an unknown value. */
CKPT_API const char *ckpt_dtype_name(ckpt_dtype_t dtype);

/* One named tensor.  On save, data points at the whole tensor (every rank has
 * it); offset and nbytes are filled by ckpt_layout().  On load (ckpt_tensor_at,
 * ckpt_find) data is NULL. */
typedef struct {
    char name[CKPT_NAME_MAX];
    ckpt_dtype_t dtype;
    int ndim;
    int64_t shape[CKPT_MAX_DIMS]; /* global shape */
    uint64_t offset;              /* byte offset in the flat space */
    uint64_t nbytes;              /* product(shape) * dtype size */
    const void *data;
} ckpt_tensor_t;

/* Collective callbacks supplied by the caller (for example over MPI).  Each
 * returns 0 on success, non-zero on failure.  All ranks call them in the same
 * order.  allgather: every rank contributes `bytes` bytes at send and receives
 * size*bytes at recv, rank-ordered.  bcast: root's buffer to every rank.
 * In ckpt_commit both can wait long (peers still writing their shards, rank
 * 0 writing the manifest): implementations should wait without spinning, as
 * ftrain's do (comm_wait_all first), so that a rank that is done leaves its
 * core to the ranks on its node that are not. */
typedef struct {
    void *ctx;
    int rank;
    int size;
    int (*allgather)(void *ctx, const void *send, void *recv, size_t bytes);
    int (*bcast)(void *ctx, void *buf, size_t bytes, int root);
} ckpt_coll_t;

typedef struct {
    size_t size;          /* sizeof(ckpt_opts_t) as the caller was compiled:
                             set by ckpt_opts_default(), checked by every
                             call that takes options (see "structures that
                             grow" above); fields are only appended */
    int level;            /* zstd level 1..19 (default 1); 0 stores frames
                             uncompressed (still checksummed, seekable) */
    int threads;          /* frame encoder threads per rank (default: the
                             CPUs of the process's affinity mask, at most 8);
                             0 = 1 */
    int shuffle;          /* byte-shuffle 4-byte elements before zstd (default 1) */
    size_t frame_bytes;   /* raw bytes per zstd frame, default 4 MiB */
    int fsync;            /* fsync files and directories (default 1) */
    int direct;           /* write shard data with O_DIRECT, past the page
                             cache (default 1): no kernel copy, no dirty pages
                             evicting the training data; falls back to
                             buffered writes where the filesystem refuses */
    int adapt;            /* with direct writes, store frames uncompressed
                             when, by the rates measured during the save,
                             that is faster than compressing them: the disk
                             outruns the encoders (default 1).  Which frames are stored
                             depends on timing, so two saves of the same
                             state may differ in bytes (never in content);
                             0 gives reproducible files */
} ckpt_opts_t;

/**
 * Fill the first size bytes of opts with the defaults above and set
 * opts->size to size, the caller's sizeof(ckpt_opts_t); call it through
 * ckpt_opts_default(), which passes that size.  On a size this library does
 * not know, opts->size is still set to it (when it has room for the field),
 * so that a call given these options is refused as well.
 * @return CKPT_OK, or CKPT_EINVAL (opts NULL, or size not that of a
 *         ckpt_opts_t this library knows: the message names both sizes).
 */
CKPT_API int ckpt_opts_init(ckpt_opts_t *opts, size_t size);

/** Fill opts (a ckpt_opts_t *) with the defaults, for the ckpt_opts_t this
 *  program was compiled with.  @return as ckpt_opts_init. */
#define ckpt_opts_default(opts) ckpt_opts_init((opts), sizeof *(opts))

/* What one rank wrote; gathered to rank 0 by ckpt_commit. */
typedef struct {
    uint64_t raw_offset;   /* start of this rank's slice in the flat space */
    uint64_t raw_bytes;    /* length of the slice */
    uint64_t file_bytes;   /* shard file size */
    uint64_t xxh64;        /* checksum of the whole shard file */
    uint64_t table_xxh64;  /* checksum of its seek table (valid when flags
                              has CKPT_SHARD_TABLE_KNOWN) */
    uint32_t nframes;
    uint32_t flags;        /* CKPT_SHARD_TABLE_KNOWN */
} ckpt_shard_info_t;

/* table_xxh64 is known: the manifest carries it (every writer since it was
 * added), and a reader refuses a shard whose seek table differs, such as the
 * same rank's shard of another checkpoint. */
#define CKPT_SHARD_TABLE_KNOWN 1u

/**
 * Assign each tensor an offset in the flat space (in array order, each
 * aligned to 8 bytes) and its nbytes.
 * @return CKPT_OK and *total_bytes, or CKPT_EINVAL (bad name, dtype, shape,
 *         duplicate name, overflow).
 */
CKPT_API int ckpt_layout(ckpt_tensor_t *tensors, size_t ntensors, uint64_t *total_bytes);

/**
 * The format's slice rule (docs/checkpoint-format.md, section 2): writer
 * `rank` of `world` holds bytes [*lo, *hi) of a flat space of total bytes,
 * lo = floor(rank * total / world), hi = floor((rank + 1) * total / world).
 * A caller that places data by rank (a partner copy, a node-local shard)
 * takes the rule from here rather than deriving it again.
 * @return CKPT_OK, or CKPT_EINVAL when world < 1, rank is outside
 *         [0, world) or lo or hi is NULL.
 */
CKPT_API int ckpt_slice(int rank, int world, uint64_t total, uint64_t *lo, uint64_t *hi);

/**
 * Phase one, local: write rank `rank` of `world`'s slice of the flat space
 * into <root>/.tmp-step-<step>/shard-<rank>.ftsh and fsync it.  Touches no
 * collective; safe in a background thread.  Tensors must have been laid out.
 * root is made when it is missing, but not its parent directories.  The
 * save holds a lock on step's byte of <root>/.locks until ckpt_commit of the
 * same step ends (docs/checkpoint-format.md: a prune leaves it alone).
 * @return CKPT_OK and *info, or CKPT_EIO / CKPT_ENOMEM / CKPT_EZSTD /
 *         CKPT_EEXIST (step already committed).
 */
CKPT_API int ckpt_shard_write(const char *root, uint64_t step, int rank, int world,
                              const ckpt_tensor_t *tensors, size_t ntensors,
                              const ckpt_opts_t *opts, ckpt_shard_info_t *info);

/**
 * Phase two, collective: gather every rank's info (or failure) to rank 0,
 * which writes manifest.json (temp, fsync, rename), renames .tmp-step-<N> to
 * step-<N>, fsyncs the root and atomically replaces LATEST.  record_json must
 * be a JSON object (text); it is stored as the manifest's "record".
 * local_rc is this rank's phase-one result: if any rank failed, nothing is
 * committed; a rank whose own phase one failed returns its own error and the
 * others CKPT_EPEER.  coll may be NULL for a single process.
 * @return success or failure the same on every rank: CKPT_OK, the local
 *         error, CKPT_EPEER, or rank 0's commit error.
 */
CKPT_API int ckpt_commit(const char *root, uint64_t step, const ckpt_tensor_t *tensors,
                         size_t ntensors, const char *record_json, const ckpt_opts_t *opts,
                         int local_rc, const ckpt_shard_info_t *info,
                         const ckpt_coll_t *coll);

/** Both phases.  @return as ckpt_commit. */
CKPT_API int ckpt_save(const char *root, uint64_t step, ckpt_tensor_t *tensors,
                       size_t ntensors, const char *record_json, const ckpt_opts_t *opts,
                       const ckpt_coll_t *coll);

/* ---- reading ---------------------------------------------------------- */

typedef struct ckpt ckpt_t;

/**
 * Open a committed checkpoint directory (.../step-<N>) and validate its
 * manifest: types, sizes, offsets, shard names (no '/' or ".."), coverage of
 * the flat space without gaps or overlaps; then the manifest's own
 * checksum (manifest_xxh64), when it has one.  Shard files are opened lazily.
 * @return CKPT_OK and *out, or CKPT_EINVAL (dir or out NULL, a path too
 *         long, dir a file and not a directory) / CKPT_ENOTFOUND /
 *         CKPT_EINCOMPLETE (no manifest) / CKPT_EFORMAT / CKPT_ECORRUPT
 *         (manifest checksum mismatch) / CKPT_EVERSION / CKPT_ENOMEM.
 */
CKPT_API int ckpt_open(const char *dir, ckpt_t **out);
/** Close; accepts NULL. */
CKPT_API void ckpt_close(ckpt_t *ckpt);

CKPT_API uint64_t ckpt_step(const ckpt_t *ckpt);
CKPT_API uint64_t ckpt_total_bytes(const ckpt_t *ckpt);
CKPT_API int ckpt_world_size(const ckpt_t *ckpt); /* number of shards */
CKPT_API size_t ckpt_num_tensors(const ckpt_t *ckpt);
/** @return tensor `index` (data NULL), or NULL when out of range. */
CKPT_API const ckpt_tensor_t *ckpt_tensor_at(const ckpt_t *ckpt, size_t index);
/** @return the tensor named name, or NULL. */
CKPT_API const ckpt_tensor_t *ckpt_find(const ckpt_t *ckpt, const char *name);
/** @return the record as compact JSON text owned by ckpt. */
CKPT_API const char *ckpt_record_json(const ckpt_t *ckpt);
/** @return shard `index`'s info as written in the manifest, or NULL. */
CKPT_API const ckpt_shard_info_t *ckpt_shard_at(const ckpt_t *ckpt, int index);
/** @return the manifest's creation time (seconds since the epoch). */
CKPT_API int64_t ckpt_created(const ckpt_t *ckpt);
/** @return 1 when the manifest had a checksum (it matched, or open would
 * have failed), 0 for a manifest of an older writer that has none. */
CKPT_API int ckpt_manifest_checksummed(const ckpt_t *ckpt);

/**
 * Read bytes [offset, offset+len) of the flat space into dst.  Reads and
 * verifies only the frames that overlap; a frame that decompresses to other
 * than its declared size is corrupt.
 * @return CKPT_OK, or CKPT_EINVAL (range) / CKPT_EIO / CKPT_ECORRUPT /
 *         CKPT_EINCOMPLETE (shard missing).
 */
CKPT_API int ckpt_read_range(ckpt_t *ckpt, uint64_t offset, uint64_t len, void *dst);

/** Threads that ckpt_read_range decodes whole frames with (frames are
 * independent): default the CPUs of the process's affinity mask, at most 8;
 * processes sharing those CPUs should pass their share.  Clamped to 1..64. */
CKPT_API void ckpt_set_read_threads(ckpt_t *ckpt, int threads);

/** Read a whole tensor into dst, which holds cap bytes (at least its
 *  nbytes).  @return as read_range, or CKPT_ENOTFOUND (no such tensor). */
CKPT_API int ckpt_read_tensor(ckpt_t *ckpt, const char *name, void *dst, uint64_t cap);

/**
 * Re-read every shard, check each frame and each shard checksum and size
 * against the manifest.  @return CKPT_OK or the first error.
 */
CKPT_API int ckpt_verify(ckpt_t *ckpt);

/* ---- names in a checkpoint root --------------------------------------- */

/* The manifest's file name inside a step directory. */
#define CKPT_MANIFEST_NAME "manifest.json"

/* Room for any name this library gives an entry of a root or of a step
 * directory ("step-<N>", ".tmp-step-<N>", "step-<N>.corrupt-<k>",
 * "shard-<i>.ftsh", "LATEST"), with its NUL. */
#define CKPT_FILE_NAME_MAX 64

/** Step directory name for a step: "step-%08llu".  buf should hold
 *  CKPT_FILE_NAME_MAX bytes; a shorter one gets a truncated name. */
CKPT_API void ckpt_step_dirname(uint64_t step, char *buf, size_t cap);

/** Shard file name of a shard index, as the manifest's "file" field:
 *  "shard-<index>.ftsh".  buf should hold CKPT_FILE_NAME_MAX bytes. */
CKPT_API void ckpt_shard_name(int index, char *buf, size_t cap);

/**
 * Parse a step directory name exactly as ckpt_step_dirname writes it
 * ("step-00000042"; "step-42" and "step-x" are not checkpoints), or with tmp
 * non-zero the name of a save in progress (".tmp-step-00000042").
 * @return 1 and *step on a match, 0 otherwise (*step untouched).
 */
CKPT_API int ckpt_parse_dirname(const char *name, int tmp, uint64_t *step);

/**
 * Copy text into buf (cap bytes, always NUL-terminated when cap > 0) as
 * valid UTF-8 without control codes, for terminals and JSON: C0 and C1
 * controls, DEL and bytes that are not UTF-8 become "\xNN"; a character is
 * never cut in two when text does not fit.  Paths and names in checkpoints
 * are anyone's bytes; every message of ckpt_last_error() is already clean.
 * @return the length written.
 */
CKPT_API size_t ckpt_text_clean(const char *text, char *buf, size_t cap);

/* ---- managing a root -------------------------------------------------- */

typedef enum {
    CKPT_ST_COMMITTED = 0,  /* manifest present and valid (not re-verified) */
    CKPT_ST_INCOMPLETE = 1, /* temp dir or step dir without manifest */
    CKPT_ST_CORRUPT = 2,    /* manifest invalid, or verify failed */
    CKPT_ST_SET_ASIDE = 3   /* step-<N>.corrupt[-k]: moved out of the way as
                               damaged (ckpt_set_aside_after); never read.
                               Listed only with CKPT_LIST_SET_ASIDE */
} ckpt_status_t;

/* Flags of ckpt_list (its verify argument; 0 and 1 keep their meaning). */
#define CKPT_LIST_VERIFY 1    /* fully verify every committed checkpoint */
#define CKPT_LIST_SET_ASIDE 2 /* also the directories set aside as damaged */

/* Room for an entry's reason, with its NUL. */
#define CKPT_ENTRY_WHY_MAX 256

typedef struct {
    size_t size;                   /* the entry size the caller asked for
                                      (ckpt_list_sized); fields are only
                                      appended */
    char name[CKPT_FILE_NAME_MAX]; /* "step-00000042" or ".tmp-step-..." */
    uint64_t step;
    ckpt_status_t status;
    int is_latest;
    int is_link;            /* a symbolic link: CKPT_ST_CORRUPT, never opened */
    int world_size;
    uint64_t raw_bytes;
    uint64_t file_bytes;
    int64_t created;
    char why[CKPT_ENTRY_WHY_MAX]; /* reason when not committed */
} ckpt_entry_t;

/**
 * List checkpoints under root, sorted by step (incomplete temp dirs too).
 * verify holds flags: with CKPT_LIST_VERIFY (1) every committed one is
 * fully verified; with CKPT_LIST_SET_ASIDE the directories set aside as
 * damaged (step-<N>.corrupt[-k]) are listed too, as CKPT_ST_SET_ASIDE,
 * after any other entry of their step, with nothing read from them.  Other
 * bits are ignored.  *out is an array
 * of *nentries entries of entry_size bytes each (the caller's
 * sizeof(ckpt_entry_t)), each with its size field set to entry_size; it is
 * malloc'd: free() it.  Call it through ckpt_list(), which passes that size.
 * @return CKPT_OK, or CKPT_ENOTFOUND (no such root) / CKPT_EIO / CKPT_ENOMEM
 *         / CKPT_EINVAL (root, out or nentries NULL, or entry_size not that
 *         of a ckpt_entry_t this library knows: the message names both).
 */
CKPT_API int ckpt_list_sized(const char *root, int verify, size_t entry_size,
                             ckpt_entry_t **out, size_t *nentries);

/** ckpt_list_sized() for the ckpt_entry_t this program was compiled with:
 *  ckpt_list(root, verify, &entries, &n).  @return as ckpt_list_sized. */
#define ckpt_list(root, verify, out, nentries) \
    ckpt_list_sized((root), (verify), sizeof(ckpt_entry_t), (out), (nentries))

/**
 * Find the newest checkpoint that fully verifies, writing its directory to
 * path.  Each skipped one is reported through skipped(ctx, name, why) when
 * skipped is not NULL.  A checkpoint that cannot be read at all (an I/O
 * error opening a file, no memory or descriptors) is not skipped: whether
 * it is good is not known, so the walk stops there with that error.
 * @return CKPT_OK, CKPT_ENOTFOUND (no checkpoint at all), CKPT_ECORRUPT
 *         (checkpoints exist but none is good), or CKPT_EIO / CKPT_ENOMEM
 *         (a newer one could not be read; path empty).
 */
CKPT_API int ckpt_latest_good(const char *root, char *path, size_t cap,
                              void (*skipped)(void *ctx, const char *name,
                                              const char *why),
                              void *ctx);

/**
 * Move every step-<N> directory with N > step out of the way, renaming it to
 * step-<N>.corrupt (or .corrupt-2, -3, ...; a name that readers, prune and
 * saves never touch).  For a run that resumes from `step` because every
 * newer checkpoint failed to verify (ckpt_latest_good): its later saves of
 * those steps would otherwise meet CKPT_EEXIST.  Nothing is deleted; each
 * move is reported through moved(ctx, from, to) when moved is not NULL.
 * @return CKPT_OK, or CKPT_EIO (what was moved stays moved).
 */
CKPT_API int ckpt_set_aside_after(const char *root, uint64_t step,
                                  void (*moved)(void *ctx, const char *from,
                                                const char *to),
                                  void *ctx);

/**
 * Remove all but the newest `keep` committed checkpoints, never the one named
 * in_use (may be NULL), and temp dirs of crashed saves older than the newest
 * committed step.  *removed gets the count when not NULL.
 * @return CKPT_OK or CKPT_EIO.
 */
CKPT_API int ckpt_prune(const char *root, int keep, const char *in_use, int *removed);

/**
 * Remove every directory set aside as damaged (step-<N>.corrupt[-k],
 * ckpt_set_aside_after) under root: they are kept for inspection only, and
 * nothing reads them.  Nothing else is touched.  *removed gets the count
 * when not NULL.
 * @return CKPT_OK (also when there is none), CKPT_ENOTFOUND (no such
 *         root) or CKPT_EIO (what was removed stays removed).
 */
CKPT_API int ckpt_prune_set_aside(const char *root, int *removed);

/**
 * ckpt_prune that also never removes the newest checkpoint that verifies
 * (found with ckpt_latest_good, which reads checkpoints fully, newest first,
 * until one verifies): "committed" only means a valid manifest, so newer
 * checkpoints with damaged shards would otherwise count among the `keep`
 * and the only good one could go.  For callers that do not know which
 * checkpoint is good (a person, a script); a trainer that has just
 * committed one knows, and uses ckpt_prune.  Its path goes to good (when
 * not NULL; "" when none verifies).
 * @return as ckpt_prune; CKPT_EINVAL, nothing removed, when good's cap is
 *         too small for the path; CKPT_EIO when a newer checkpoint could
 *         not be read (ckpt_latest_good), nothing removed.
 */
CKPT_API int ckpt_prune_keep_good(const char *root, int keep, const char *in_use,
                                  int *removed, char *good, size_t cap);

/* ---- archives (libarchive) -------------------------------------------- */

/**
 * Write a committed checkpoint directory into a tar file (.tar, or .tar.zst
 * when the name ends so).  Verifies before exporting.  The archive is
 * written under a temporary name of its own (so that exports at once never
 * share one) and renamed into place: over an existing file only when
 * replace is non-zero, else that file is kept and the result is
 * CKPT_EEXIST.
 * @return CKPT_OK or an error code.
 */
CKPT_API int ckpt_export(const char *ckpt_dir, const char *archive_path, int replace);

/**
 * Extract an exported checkpoint into root (created if missing).  Refuses
 * absolute paths, "..", links, devices and anything outside one step-<N>/
 * directory; manifest.json must come first, and each shard entry must be
 * one the manifest lists, of the size it gives (so a forged size writes
 * nothing); never overwrites an existing checkpoint; extracts into a temp
 * dir, verifies, then renames into place.  The new dir's path goes to out.
 * @return CKPT_OK, CKPT_EARCHIVE (unsafe or malformed entry), CKPT_EEXIST,
 *         CKPT_EFORMAT / CKPT_EVERSION (the manifest), CKPT_ECORRUPT, or
 *         CKPT_EIO (including not enough free space).
 */
CKPT_API int ckpt_import(const char *archive_path, const char *root, char *out,
                         size_t cap);

#ifdef __cplusplus
}
#endif
#endif

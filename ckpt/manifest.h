/*
 * manifest.h - manifest.json in memory: writing it and reading it back as
 * untrusted input.  Specified in docs/checkpoint-format.md, section 3.
 * Depends on util.h, layout.h and shard.h (the shard size limits).
 */
#ifndef FTRAIN_CKPT_MANIFEST_H
#define FTRAIN_CKPT_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "ftrain/ckpt.h"

#define CKPT_MANIFEST_TMP "manifest.json.tmp"
#define CKPT_FORMAT_NAME "ftrain-ckpt"
#define CKPT_MANIFEST_MAX (64u << 20) /* refuse bigger manifest files */
#define CKPT_MAX_TENSORS 1000000

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

/* Serialise manifest to JSON text (malloc'd, NUL-terminated).  Its record
 * must be a JSON object's text (NULL: an empty one).  @return CKPT_OK,
 * CKPT_EINVAL (record not an object, or a number in it out of range; a
 * tensor name that is not UTF-8, an unknown dtype: each named) or
 * CKPT_ENOMEM (only when memory ran out). */
int ckpt_manifest_dump(const ckpt_manifest_t *manifest, char **text);

/* Parse and validate manifest text as untrusted input; `what` names the file
 * in messages.  On failure *manifest is left empty.  @return CKPT_OK,
 * CKPT_EFORMAT, CKPT_ECORRUPT (its checksum), CKPT_EVERSION or
 * CKPT_ENOMEM. */
int ckpt_manifest_parse(const char *text, size_t len, const char *what,
                        ckpt_manifest_t *manifest);

/* Free what manifest owns and zero it (accepts a zeroed one). */
void ckpt_manifest_free(ckpt_manifest_t *manifest);

#endif

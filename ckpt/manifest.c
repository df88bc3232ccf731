/*
 * manifest.c - manifest.json: writing it from a ckpt_manifest_t and reading
 * it back as untrusted input.  Every field is type-checked and range-checked;
 * sizes and offsets are checked for overflow; tensors must lie in order inside
 * the flat space without overlapping; shards must cover [0, total_bytes)
 * exactly and in order and be named exactly "shard-<index>.ftsh".  A failure
 * names the field.  The fields are specified in docs/checkpoint-format.md.
 *
 * The manifest carries its own checksum, "manifest_xxh64": XXH64 of the
 * canonical text of the document without that key (jansson's compact dump
 * with sorted keys), so whitespace and key order may change but no value
 * can.  A reader checks it after every field has passed, so a bad field is
 * reported by name and a valid-looking but altered value as a checksum
 * mismatch.  Manifests written before the field existed have none and are
 * read without it.
 */
#include "manifest.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <xxhash.h>

#include "layout.h"
#include "shard.h"
#include "util.h"

#define CHECKSUM_KEY "manifest_xxh64"
#define HEX64_DIGITS 16
/* The most of an untrusted string value that a message quotes. */
#define QUOTE_MAX 80

/* "tensors[<index>]." or "shards[<index>].": where a field is, in messages. */
#define FIELD_CONTEXT_MAX (sizeof "tensors[]." + CKPT_STEP_DIGITS_MAX)

/* XXH64 of the canonical text of root (which must not hold CHECKSUM_KEY).
 * @return CKPT_OK or CKPT_ENOMEM (message naming what). */
static int canonical_xxh64(const json_t *root, const char *what, uint64_t *out)
{
    char *text = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    if (!text)
        return ckpt_seterr(CKPT_ENOMEM, "%s: out of memory", what);
    *out = XXH64(text, strlen(text), 0);
    free(text);
    return CKPT_OK;
}

/* 1 when text is exactly HEX64_DIGITS lowercase hex digits. */
static int is_hex64(const char *text)
{
    return strlen(text) == HEX64_DIGITS &&
           strspn(text, "0123456789abcdef") == HEX64_DIGITS;
}

/* ---- writing ---------------------------------------------------------- */

/* Set obj[key] = value, taking the reference; *ok becomes 0 on failure
 * (value NULL: out of memory, or obj NULL). */
static void put(json_t *obj, const char *key, json_t *value, int *ok)
{
    if (!obj || !value) {
        json_decref(value);
        *ok = 0;
    } else if (json_object_set_new(obj, key, value) != 0) {
        *ok = 0;
    }
}

static json_t *hex64_json(uint64_t value)
{
    char hex[HEX64_DIGITS + 1];
    snprintf(hex, sizeof hex, "%016" PRIx64, value);
    return json_string(hex);
}

/* json_string of a tensor's name or dtype, or NULL with *rc set when the
 * cause is not memory: json_string refuses text that is not UTF-8 (JSON
 * holds nothing else; ckpt_layout refuses such a name first) and a NULL
 * (an unknown dtype has no name).  Only a NULL from the _nocheck form,
 * which skips the UTF-8 check, means out of memory. */
static json_t *text_json(const char *text, const char *field, size_t index, int *rc)
{
    json_t *value, *unchecked;
    if (text && (value = json_string(text)) != NULL)
        return value;
    unchecked = text ? json_string_nocheck(text) : NULL;
    if (*rc == CKPT_OK && (!text || unchecked)) /* the first cause is the one told */
        *rc = ckpt_seterr(CKPT_EINVAL, "manifest: tensor %zu: %s %s", index, field,
                          text ? "is not valid UTF-8" : "is unknown");
    json_decref(unchecked);
    return NULL;
}

/* Tensor index as JSON; NULL on failure, with *rc set unless memory ran
 * out. */
static json_t *tensor_json(const ckpt_tensor_t *tensor, size_t index, int *rc)
{
    json_t *obj = json_object(), *shape = json_array();
    int ok = 1;
    for (int d = 0; shape && d < tensor->ndim; d++)
        ok &= json_array_append_new(shape, json_integer(tensor->shape[d])) == 0;
    put(obj, "name", text_json(tensor->name, "name", index, rc), &ok);
    put(obj, "dtype", text_json(ckpt_dtype_name(tensor->dtype), "dtype", index, rc), &ok);
    put(obj, "shape", shape, &ok);
    put(obj, "offset", json_integer((json_int_t)tensor->offset), &ok);
    put(obj, "nbytes", json_integer((json_int_t)tensor->nbytes), &ok);
    if (!ok) {
        json_decref(obj);
        return NULL;
    }
    return obj;
}

static json_t *shard_json(const ckpt_shard_info_t *shard, int index)
{
    json_t *obj = json_object();
    char name[CKPT_FILE_NAME_MAX];
    int ok = 1;
    ckpt_shard_name(index, name, sizeof name);
    put(obj, "file", json_string(name), &ok);
    put(obj, "raw_offset", json_integer((json_int_t)shard->raw_offset), &ok);
    put(obj, "raw_bytes", json_integer((json_int_t)shard->raw_bytes), &ok);
    put(obj, "file_bytes", json_integer((json_int_t)shard->file_bytes), &ok);
    put(obj, "xxh64", hex64_json(shard->xxh64), &ok);
    put(obj, "nframes", json_integer(shard->nframes), &ok);
    if (shard->flags & CKPT_SHARD_TABLE_KNOWN)
        put(obj, "table_xxh64", hex64_json(shard->table_xxh64), &ok);
    if (!ok) {
        json_decref(obj);
        return NULL;
    }
    return obj;
}

/* The manifest without its checksum, in the order the format lists the
 * fields; record is the parsed record object (a reference is taken).  NULL
 * on failure, with *rc and the message set (CKPT_EINVAL for a field that
 * JSON cannot hold, else CKPT_ENOMEM). */
static json_t *manifest_json(const ckpt_manifest_t *manifest, json_t *record, int *rc)
{
    json_t *root = json_object(), *tensors = json_array(), *shards = json_array(),
           *opts = json_object();
    int ok = tensors && shards;
    put(root, "format", json_string(CKPT_FORMAT_NAME), &ok);
    put(root, "version", json_integer(CKPT_FORMAT_VERSION), &ok);
    put(root, "step", json_integer((json_int_t)manifest->step), &ok);
    put(root, "created", json_integer(manifest->created), &ok);
    put(root, "total_bytes", json_integer((json_int_t)manifest->total_bytes), &ok);
    for (size_t i = 0; ok && i < manifest->ntensors; i++) {
        json_t *tensor = tensor_json(&manifest->tensors[i], i, rc);
        ok = tensor && json_array_append_new(tensors, tensor) == 0;
    }
    for (int i = 0; ok && i < manifest->nshards; i++) {
        json_t *shard = shard_json(&manifest->shards[i], i);
        ok = shard && json_array_append_new(shards, shard) == 0;
    }
    put(opts, "level", json_integer(manifest->opts.level), &ok);
    put(opts, "threads", json_integer(manifest->opts.threads), &ok);
    put(opts, "shuffle", json_boolean(manifest->opts.shuffle), &ok);
    put(opts, "frame_bytes", json_integer((json_int_t)manifest->opts.frame_bytes), &ok);
    put(root, "tensors", tensors, &ok);
    put(root, "shards", shards, &ok);
    put(root, "options", opts, &ok);
    put(root, "record", json_incref(record), &ok);
    if (!ok) {
        json_decref(root);
        if (*rc == CKPT_OK)
            *rc = ckpt_seterr(CKPT_ENOMEM, "out of memory building the manifest");
        return NULL;
    }
    return root;
}

/* 1 when json_loads failed on a number that JSON here cannot hold: an
 * integer outside json_int_t (int64_t), or a real that overflows. */
static int number_overflow(const json_error_t *jerr)
{
#if JANSSON_VERSION_HEX >= 0x020b00
    return json_error_code(jerr) == json_error_numeric_overflow;
#else
    return strstr(jerr->text, "too big") != NULL || strstr(jerr->text, "overflow") != NULL;
#endif
}

/* Load the record to write, which must be a JSON object's text. */
static int load_record(const char *text, json_t **record)
{
    json_error_t jerr;
    *record = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    if (*record && json_is_object(*record))
        return CKPT_OK;
    if (*record) {
        json_decref(*record);
        *record = NULL;
        return ckpt_seterr(CKPT_EINVAL, "record is not a JSON object");
    }
    if (number_overflow(&jerr))
        return ckpt_seterr(CKPT_EINVAL, "record: a number is out of range (integers "
                           "must lie in -2^63..2^63-1): %s", jerr.text);
    return ckpt_seterr(CKPT_EINVAL, "record is not a JSON object: %s", jerr.text);
}

int ckpt_manifest_dump(const ckpt_manifest_t *manifest, char **text)
{
    int rc = CKPT_OK;
    uint64_t sum;
    json_t *root = NULL, *record;

    *text = NULL;
    if ((rc = load_record(manifest->record ? manifest->record : "{}", &record)))
        return rc;
    root = manifest_json(manifest, record, &rc);
    json_decref(record);
    if (!root)
        return rc;
    rc = canonical_xxh64(root, CKPT_MANIFEST_NAME, &sum);
    if (rc == CKPT_OK) {
        int ok = 1;
        put(root, CHECKSUM_KEY, hex64_json(sum), &ok);
        if (ok)
            *text = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
        if (!*text)
            rc = ckpt_seterr(CKPT_ENOMEM, "out of memory building the manifest");
    }
    json_decref(root);
    return rc;
}

/* ---- reading ---------------------------------------------------------- */

/* Field accessors: each sets the error naming `what`, ctx and the field. */
static int field_u64(json_t *obj, const char *key, const char *what,
                     const char *ctx, uint64_t max, uint64_t *out)
{
    json_t *value = json_object_get(obj, key);
    json_int_t number;
    if (!value)
        return ckpt_seterr(CKPT_EFORMAT, "%s: %s%s is missing", what, ctx, key);
    if (!json_is_integer(value))
        return ckpt_seterr(CKPT_EFORMAT, "%s: %s%s is not an integer", what,
                           ctx, key);
    number = json_integer_value(value);
    if (number < 0 || (uint64_t)number > max)
        return ckpt_seterr(CKPT_EFORMAT, "%s: %s%s = %lld is out of range",
                           what, ctx, key, (long long)number);
    *out = (uint64_t)number;
    return CKPT_OK;
}

static int field_str(json_t *obj, const char *key, const char *what,
                     const char *ctx, const char **out)
{
    json_t *value = json_object_get(obj, key);
    if (!value)
        return ckpt_seterr(CKPT_EFORMAT, "%s: %s%s is missing", what, ctx, key);
    if (!json_is_string(value))
        return ckpt_seterr(CKPT_EFORMAT, "%s: %s%s is not a string", what,
                           ctx, key);
    *out = json_string_value(value);
    if (strlen(*out) != json_string_length(value))
        return ckpt_seterr(CKPT_EFORMAT, "%s: %s%s contains a NUL byte", what,
                           ctx, key);
    return CKPT_OK;
}

/* Read a shape array into tensor and check nbytes against it. */
static int parse_shape(json_t *shape, const char *what, const char *ctx,
                       ckpt_tensor_t *tensor)
{
    uint64_t elems = 1, elem_size;
    if (!json_is_array(shape) || json_array_size(shape) > CKPT_MAX_DIMS)
        return ckpt_seterr(CKPT_EFORMAT, "%s: %sshape is not an array of at "
                           "most %d integers", what, ctx, CKPT_MAX_DIMS);
    tensor->ndim = (int)json_array_size(shape);
    for (int d = 0; d < tensor->ndim; d++) {
        json_t *value = json_array_get(shape, (size_t)d);
        json_int_t extent = json_is_integer(value) ? json_integer_value(value) : -1;
        if (extent < 0 || (uint64_t)extent > CKPT_MAX_FLAT_BYTES)
            return ckpt_seterr(CKPT_EFORMAT, "%s: %sshape[%d] is not a size",
                               what, ctx, d);
        tensor->shape[d] = extent;
        if (extent != 0 && elems > CKPT_MAX_FLAT_BYTES / (uint64_t)extent)
            return ckpt_seterr(CKPT_EFORMAT, "%s: %sshape overflows", what, ctx);
        elems *= (uint64_t)extent;
    }
    elem_size = ckpt_dtype_size(tensor->dtype);
    if (elems > CKPT_MAX_FLAT_BYTES / elem_size || elems * elem_size != tensor->nbytes)
        return ckpt_seterr(CKPT_EFORMAT, "%s: %snbytes %llu does not match the "
                           "shape and dtype", what, ctx,
                           (unsigned long long)tensor->nbytes);
    return CKPT_OK;
}

static int parse_tensor(json_t *obj, size_t index, const char *what,
                        uint64_t total, uint64_t *prev_end, ckpt_tensor_t *tensor)
{
    int rc;
    char ctx[FIELD_CONTEXT_MAX];
    const char *name, *dtype;

    snprintf(ctx, sizeof ctx, "tensors[%zu].", index);
    if (!json_is_object(obj))
        return ckpt_seterr(CKPT_EFORMAT, "%s: tensors[%zu] is not an object",
                           what, index);
    if ((rc = field_str(obj, "name", what, ctx, &name)) != CKPT_OK ||
        (rc = field_str(obj, "dtype", what, ctx, &dtype)) != CKPT_OK ||
        (rc = field_u64(obj, "offset", what, ctx, CKPT_MAX_FLAT_BYTES,
                        &tensor->offset)) ||
        (rc = field_u64(obj, "nbytes", what, ctx, CKPT_MAX_FLAT_BYTES,
                        &tensor->nbytes)))
        return rc;
    if (name[0] == '\0' || strlen(name) >= CKPT_NAME_MAX)
        return ckpt_seterr(CKPT_EFORMAT, "%s: %sname is empty or longer than "
                           "%d bytes", what, ctx, CKPT_NAME_MAX - 1);
    /* Names are printed by ckptctl: no terminal control sequences. */
    if (!ckpt_name_printable(name))
        return ckpt_seterr(CKPT_EFORMAT, "%s: %sname holds a control "
                           "character", what, ctx);
    strcpy(tensor->name, name);
    if (!ckpt_dtype_from_name(dtype, &tensor->dtype))
        return ckpt_seterr(CKPT_EFORMAT, "%s: %sdtype \"%s\" is unknown", what,
                           ctx, dtype);
    if ((rc = parse_shape(json_object_get(obj, "shape"), what, ctx, tensor)))
        return rc;
    if (tensor->offset < *prev_end)
        return ckpt_seterr(CKPT_EFORMAT, "%s: %soffset %llu overlaps the "
                           "previous tensor", what, ctx,
                           (unsigned long long)tensor->offset);
    if (tensor->offset > total || tensor->nbytes > total - tensor->offset)
        return ckpt_seterr(CKPT_EFORMAT, "%s: %s[offset, offset+nbytes) lies "
                           "outside total_bytes %llu", what, ctx,
                           (unsigned long long)total);
    *prev_end = tensor->offset + tensor->nbytes;
    tensor->data = NULL;
    return CKPT_OK;
}

static int parse_tensors(json_t *root, const char *what,
                         ckpt_manifest_t *manifest)
{
    json_t *tensors = json_object_get(root, "tensors");
    uint64_t prev_end = 0;
    size_t dup;
    int rc;

    if (!json_is_array(tensors) || json_array_size(tensors) > CKPT_MAX_TENSORS)
        return ckpt_seterr(CKPT_EFORMAT, "%s: tensors is not an array of at "
                           "most %d objects", what, CKPT_MAX_TENSORS);
    manifest->ntensors = json_array_size(tensors);
    manifest->tensors = calloc(manifest->ntensors ? manifest->ntensors : 1,
                               sizeof *manifest->tensors);
    if (!manifest->tensors)
        return ckpt_seterr(CKPT_ENOMEM, "%s: out of memory", what);
    for (size_t i = 0; i < manifest->ntensors; i++) {
        rc = parse_tensor(json_array_get(tensors, i), i, what,
                          manifest->total_bytes, &prev_end, &manifest->tensors[i]);
        if (rc != CKPT_OK)
            return rc;
    }
    if (ckpt_find_duplicate(manifest->tensors, manifest->ntensors, &dup) != CKPT_OK)
        return ckpt_seterr(CKPT_ENOMEM, "%s: out of memory", what);
    if (dup < manifest->ntensors)
        return ckpt_seterr(CKPT_EFORMAT, "%s: tensors[%zu].name \"%s\" is "
                           "a duplicate", what, dup, manifest->tensors[dup].name);
    return CKPT_OK;
}

/* A hex checksum field: 16 lowercase hex digits. */
static int parse_hex64(json_t *obj, const char *key, const char *what,
                       const char *ctx, uint64_t *out)
{
    const char *hex;
    int rc = field_str(obj, key, what, ctx, &hex);
    if (rc != CKPT_OK)
        return rc;
    if (!is_hex64(hex))
        return ckpt_seterr(CKPT_EFORMAT, "%s: %s%s is not 16 lowercase hex "
                           "digits", what, ctx, key);
    *out = strtoull(hex, NULL, 16);
    return CKPT_OK;
}

static int parse_shard(json_t *obj, int index, const char *what, uint64_t *pos,
                       ckpt_shard_info_t *shard)
{
    int rc;
    char ctx[FIELD_CONTEXT_MAX], want[CKPT_FILE_NAME_MAX];
    const char *file, *hex;
    uint64_t nframes;

    snprintf(ctx, sizeof ctx, "shards[%d].", index);
    if (!json_is_object(obj))
        return ckpt_seterr(CKPT_EFORMAT, "%s: shards[%d] is not an object",
                           what, index);
    if ((rc = field_str(obj, "file", what, ctx, &file)) != CKPT_OK ||
        (rc = field_str(obj, "xxh64", what, ctx, &hex)) != CKPT_OK ||
        (rc = field_u64(obj, "raw_offset", what, ctx, CKPT_MAX_FLAT_BYTES,
                        &shard->raw_offset)) ||
        (rc = field_u64(obj, "raw_bytes", what, ctx, CKPT_MAX_FLAT_BYTES,
                        &shard->raw_bytes)) ||
        (rc = field_u64(obj, "file_bytes", what, ctx, CKPT_MAX_FLAT_BYTES,
                        &shard->file_bytes)) ||
        (rc = field_u64(obj, "nframes", what, ctx, UINT32_MAX, &nframes)))
        return rc;
    ckpt_shard_name(index, want, sizeof want);
    if (strchr(file, '/') || strstr(file, "..") || strcmp(file, want) != 0)
        return ckpt_seterr(CKPT_EFORMAT, "%s: %sfile \"%.*s\" is not the "
                           "expected \"%s\"", what, ctx, QUOTE_MAX, file, want);
    if (!is_hex64(hex))
        return ckpt_seterr(CKPT_EFORMAT, "%s: %sxxh64 is not 16 lowercase hex "
                           "digits", what, ctx);
    shard->xxh64 = strtoull(hex, NULL, 16);
    shard->nframes = (uint32_t)nframes;
    shard->flags = 0;
    shard->table_xxh64 = 0;
    if (json_object_get(obj, "table_xxh64")) { /* absent from older manifests */
        rc = parse_hex64(obj, "table_xxh64", what, ctx, &shard->table_xxh64);
        if (rc != CKPT_OK)
            return rc;
        shard->flags = CKPT_SHARD_TABLE_KNOWN;
    }
    if (shard->raw_offset != *pos)
        return ckpt_seterr(CKPT_EFORMAT, "%s: %sraw_offset %llu leaves a gap "
                           "or overlap (expected %llu)", what, ctx,
                           (unsigned long long)shard->raw_offset,
                           (unsigned long long)*pos);
    if ((shard->raw_bytes == 0) != (nframes == 0) || nframes > shard->raw_bytes)
        return ckpt_seterr(CKPT_EFORMAT, "%s: %snframes %llu does not fit "
                           "raw_bytes %llu", what, ctx,
                           (unsigned long long)nframes,
                           (unsigned long long)shard->raw_bytes);
    if (shard->file_bytes < CKPT_SHARD_HEADER_BYTES + CKPT_SHARD_FOOTER_BYTES +
                                nframes * CKPT_SHARD_ENTRY_BYTES)
        return ckpt_seterr(CKPT_EFORMAT, "%s: %sfile_bytes %llu is too small",
                           what, ctx, (unsigned long long)shard->file_bytes);
    *pos += shard->raw_bytes;
    return CKPT_OK;
}

static int parse_shards(json_t *root, const char *what, ckpt_manifest_t *manifest)
{
    json_t *shards = json_object_get(root, "shards");
    uint64_t pos = 0, stored = 0;
    int rc;

    if (!json_is_array(shards) || json_array_size(shards) == 0 ||
        json_array_size(shards) > CKPT_MAX_SHARDS)
        return ckpt_seterr(CKPT_EFORMAT, "%s: shards is not an array of 1 to %d "
                           "objects", what, CKPT_MAX_SHARDS);
    manifest->nshards = (int)json_array_size(shards);
    manifest->shards = calloc((size_t)manifest->nshards, sizeof *manifest->shards);
    if (!manifest->shards)
        return ckpt_seterr(CKPT_ENOMEM, "%s: out of memory", what);
    for (int i = 0; i < manifest->nshards; i++) {
        rc = parse_shard(json_array_get(shards, (size_t)i), i, what, &pos,
                         &manifest->shards[i]);
        if (rc != CKPT_OK)
            return rc;
        /* The files together stay within what one number can hold, so
         * every sum of file sizes a reader makes is exact. */
        stored += manifest->shards[i].file_bytes;
        if (stored > CKPT_MAX_FLAT_BYTES)
            return ckpt_seterr(CKPT_EFORMAT, "%s: the shards' file_bytes add up "
                               "to more than %llu", what,
                               (unsigned long long)CKPT_MAX_FLAT_BYTES);
    }
    if (pos != manifest->total_bytes)
        return ckpt_seterr(CKPT_EFORMAT, "%s: shards cover %llu bytes, "
                           "total_bytes is %llu", what, (unsigned long long)pos,
                           (unsigned long long)manifest->total_bytes);
    return CKPT_OK;
}

/* "options" is informational and optional: the defaults fill what is
 * missing. */
static int parse_options(json_t *root, const char *what, ckpt_opts_t *opts)
{
    json_t *obj = json_object_get(root, "options");
    ckpt_opts_default(opts);
    if (!obj)
        return CKPT_OK;
    json_t *level = json_object_get(obj, "level"),
           *threads = json_object_get(obj, "threads"),
           *shuffle = json_object_get(obj, "shuffle"),
           *frame_bytes = json_object_get(obj, "frame_bytes");
    if (!json_is_object(obj) || (level && !json_is_integer(level)) ||
        (threads && !json_is_integer(threads)) ||
        (shuffle && !json_is_boolean(shuffle)) ||
        (frame_bytes && !json_is_integer(frame_bytes)))
        return ckpt_seterr(CKPT_EFORMAT, "%s: options has a field of the "
                           "wrong type", what);
    if (level)
        opts->level = (int)json_integer_value(level);
    if (threads)
        opts->threads = (int)json_integer_value(threads);
    if (shuffle)
        opts->shuffle = json_is_true(shuffle);
    if (frame_bytes)
        opts->frame_bytes = (size_t)json_integer_value(frame_bytes);
    return CKPT_OK;
}

/* "format", "version", "step", "created" and "total_bytes". */
static int parse_header(json_t *root, const char *what, ckpt_manifest_t *manifest)
{
    const char *format;
    uint64_t value;
    int rc;

    if ((rc = field_str(root, "format", what, "", &format)) != CKPT_OK)
        return rc;
    if (strcmp(format, CKPT_FORMAT_NAME) != 0)
        return ckpt_seterr(CKPT_EFORMAT, "%s: format is \"%.*s\", not \"%s\"",
                           what, QUOTE_MAX, format, CKPT_FORMAT_NAME);
    if ((rc = field_u64(root, "version", what, "", INT32_MAX, &value)) != CKPT_OK)
        return rc;
    if (value != CKPT_FORMAT_VERSION)
        return ckpt_seterr(value > CKPT_FORMAT_VERSION ? CKPT_EVERSION
                                                       : CKPT_EFORMAT,
                           "%s: format version %llu, this build reads %d", what,
                           (unsigned long long)value, CKPT_FORMAT_VERSION);
    manifest->version = (int)value;
    if ((rc = field_u64(root, "step", what, "", INT64_MAX, &manifest->step)) ||
        (rc = field_u64(root, "created", what, "", INT64_MAX, &value)) ||
        (rc = field_u64(root, "total_bytes", what, "", CKPT_MAX_FLAT_BYTES,
                        &manifest->total_bytes)))
        return rc;
    manifest->created = (int64_t)value;
    return CKPT_OK;
}

static int parse_record(json_t *root, const char *what, ckpt_manifest_t *manifest)
{
    json_t *record = json_object_get(root, "record");
    if (!json_is_object(record))
        return ckpt_seterr(CKPT_EFORMAT, "%s: record is %s", what,
                           record ? "not an object" : "missing");
    manifest->record = json_dumps(record, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!manifest->record)
        return ckpt_seterr(CKPT_ENOMEM, "%s: out of memory", what);
    return CKPT_OK;
}

/* Check root's CHECKSUM_KEY, if present, against its canonical text (the
 * key is removed from root).  *checked says whether there was one. */
static int check_sum(json_t *root, const char *what, int *checked)
{
    json_t *value = json_object_get(root, CHECKSUM_KEY);
    char stored_hex[HEX64_DIGITS + 1];
    uint64_t stored, actual;
    int rc;

    *checked = 0;
    if (!value)
        return CKPT_OK; /* written before manifests had a checksum */
    if (!json_is_string(value) || json_string_length(value) != HEX64_DIGITS ||
        !is_hex64(json_string_value(value)))
        return ckpt_seterr(CKPT_EFORMAT, "%s: %s is not a string of 16 "
                           "lowercase hex digits", what, CHECKSUM_KEY);
    memcpy(stored_hex, json_string_value(value), sizeof stored_hex); /* value
        dies with the key */
    stored = strtoull(stored_hex, NULL, 16);
    json_object_del(root, CHECKSUM_KEY);
    if ((rc = canonical_xxh64(root, what, &actual)) != CKPT_OK)
        return rc;
    if (actual != stored)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: %s is %s but the content "
                           "hashes to %016" PRIx64 ": the manifest was damaged "
                           "or edited", what, CHECKSUM_KEY, stored_hex, actual);
    *checked = 1;
    return CKPT_OK;
}

int ckpt_manifest_parse(const char *text, size_t len, const char *what,
                        ckpt_manifest_t *manifest)
{
    int rc;
    json_error_t jerr;
    json_t *root;

    memset(manifest, 0, sizeof *manifest);
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return ckpt_seterr(CKPT_EFORMAT, "%s: not valid JSON: line %d: %s",
                           what, jerr.line, jerr.text);
    if (!json_is_object(root))
        rc = ckpt_seterr(CKPT_EFORMAT, "%s: not a JSON object", what);
    else if ((rc = parse_header(root, what, manifest)) == CKPT_OK &&
             (rc = parse_tensors(root, what, manifest)) == CKPT_OK &&
             (rc = parse_shards(root, what, manifest)) == CKPT_OK &&
             (rc = parse_options(root, what, &manifest->opts)) == CKPT_OK &&
             (rc = parse_record(root, what, manifest)) == CKPT_OK)
        rc = check_sum(root, what, &manifest->checksummed);
    json_decref(root);
    if (rc != CKPT_OK)
        ckpt_manifest_free(manifest);
    return rc;
}

void ckpt_manifest_free(ckpt_manifest_t *manifest)
{
    if (!manifest)
        return;
    free(manifest->tensors);
    free(manifest->shards);
    free(manifest->record);
    memset(manifest, 0, sizeof *manifest);
}

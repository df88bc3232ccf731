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
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <xxhash.h>

#include "ckpt_internal.h"

/* Largest size or offset accepted: 2^53, exact in every JSON reader. */
#define MAX_JSON_U64 ((uint64_t)1 << 53)

#define CHECKSUM_KEY "manifest_xxh64"

/* XXH64 of the canonical text of root (which must not hold CHECKSUM_KEY).
 * @return 0, or -1 when out of memory. */
static int canonical_xxh64(const json_t *root, uint64_t *out)
{
    char *text = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    if (!text)
        return -1;
    *out = XXH64(text, strlen(text), 0);
    free(text);
    return 0;
}

/* ---- writing ---------------------------------------------------------- */

/* Set obj[key] = value, taking the reference; returns -1 on failure. */
static int put(json_t *obj, const char *key, json_t *value)
{
    return value ? json_object_set_new(obj, key, value) : -1;
}

int ckpt_manifest_dump(const ckpt_manifest_t *m, char **text)
{
    int rc = CKPT_ENOMEM, bad = 0;
    json_t *root = json_object(), *tens = json_array(), *shards = json_array(),
           *opts = json_object(), *rec = NULL;
    json_error_t jerr;

    *text = NULL;
    if (!root || !tens || !shards || !opts)
        goto fail;
    rec = json_loads(m->record ? m->record : "{}", JSON_REJECT_DUPLICATES,
                     &jerr);
    if (!rec || !json_is_object(rec)) {
        rc = ckpt_seterr(CKPT_EINVAL, "record is not a JSON object%s%s",
                         rec ? "" : ": ", rec ? "" : jerr.text);
        goto fail;
    }
    bad |= put(root, "format", json_string(CKPT_FORMAT_NAME));
    bad |= put(root, "version", json_integer(CKPT_FORMAT_VERSION));
    bad |= put(root, "step", json_integer((json_int_t)m->step));
    bad |= put(root, "created", json_integer(m->created));
    bad |= put(root, "total_bytes", json_integer((json_int_t)m->total_bytes));
    for (size_t i = 0; i < m->ntensors; i++) {
        const ckpt_tensor_t *t = &m->tensors[i];
        json_t *o = json_object(), *shape = json_array();
        for (int d = 0; shape && d < t->ndim; d++)
            bad |= json_array_append_new(shape, json_integer(t->shape[d]));
        bad |= put(o, "name", json_string(t->name));
        bad |= put(o, "dtype", json_string(ckpt_dtype_name(t->dtype)));
        bad |= put(o, "shape", shape);
        bad |= put(o, "offset", json_integer((json_int_t)t->offset));
        bad |= put(o, "nbytes", json_integer((json_int_t)t->nbytes));
        bad |= o ? json_array_append_new(tens, o) : -1;
    }
    for (int i = 0; i < m->nshards; i++) {
        const ckpt_shard_info_t *s = &m->shards[i];
        json_t *o = json_object();
        char name[64], hex[17];
        ckpt_shard_name(i, name, sizeof name);
        snprintf(hex, sizeof hex, "%016" PRIx64, s->xxh64);
        bad |= put(o, "file", json_string(name));
        bad |= put(o, "raw_offset", json_integer((json_int_t)s->raw_offset));
        bad |= put(o, "raw_bytes", json_integer((json_int_t)s->raw_bytes));
        bad |= put(o, "file_bytes", json_integer((json_int_t)s->file_bytes));
        bad |= put(o, "xxh64", json_string(hex));
        bad |= put(o, "nframes", json_integer(s->nframes));
        if (s->flags & CKPT_SHARD_TABLE_KNOWN) {
            snprintf(hex, sizeof hex, "%016" PRIx64, s->table_xxh64);
            bad |= put(o, "table_xxh64", json_string(hex));
        }
        bad |= o ? json_array_append_new(shards, o) : -1;
    }
    bad |= put(opts, "level", json_integer(m->opts.level));
    bad |= put(opts, "threads", json_integer(m->opts.threads));
    bad |= put(opts, "shuffle", json_boolean(m->opts.shuffle));
    bad |= put(opts, "frame_bytes", json_integer((json_int_t)m->opts.frame_bytes));
    bad |= json_object_set(root, "tensors", tens);
    bad |= json_object_set(root, "shards", shards);
    bad |= json_object_set(root, "options", opts);
    bad |= json_object_set(root, "record", rec);
    if (bad)
        goto fail;
    {
        uint64_t h;
        char hex[17];
        if (canonical_xxh64(root, &h) != 0)
            goto fail;
        snprintf(hex, sizeof hex, "%016" PRIx64, h);
        if (put(root, CHECKSUM_KEY, json_string(hex)) != 0)
            goto fail;
    }
    *text = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    if (!*text)
        goto fail;
    rc = CKPT_OK;
fail:
    if (rc == CKPT_ENOMEM)
        ckpt_seterr(rc, "out of memory building the manifest");
    json_decref(root);
    json_decref(tens);
    json_decref(shards);
    json_decref(opts);
    json_decref(rec);
    return rc;
}

/* ---- reading ---------------------------------------------------------- */

/* Field accessors: each sets the error naming `what` and the field. */
static int get_u64(json_t *obj, const char *key, const char *what,
                   const char *ctx, uint64_t max, uint64_t *out)
{
    json_t *v = json_object_get(obj, key);
    json_int_t x;
    if (!v)
        return ckpt_seterr(CKPT_EFORMAT, "%s: %s%s is missing", what, ctx, key);
    if (!json_is_integer(v))
        return ckpt_seterr(CKPT_EFORMAT, "%s: %s%s is not an integer", what,
                           ctx, key);
    x = json_integer_value(v);
    if (x < 0 || (uint64_t)x > max)
        return ckpt_seterr(CKPT_EFORMAT, "%s: %s%s = %lld is out of range",
                           what, ctx, key, (long long)x);
    *out = (uint64_t)x;
    return CKPT_OK;
}

static int get_str(json_t *obj, const char *key, const char *what,
                   const char *ctx, const char **out)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return ckpt_seterr(CKPT_EFORMAT, "%s: %s%s is missing", what, ctx, key);
    if (!json_is_string(v))
        return ckpt_seterr(CKPT_EFORMAT, "%s: %s%s is not a string", what,
                           ctx, key);
    *out = json_string_value(v);
    if (strlen(*out) != json_string_length(v))
        return ckpt_seterr(CKPT_EFORMAT, "%s: %s%s contains a NUL byte", what,
                           ctx, key);
    return CKPT_OK;
}

static int dtype_from_name(const char *s, ckpt_dtype_t *d)
{
    for (int i = 0; i <= CKPT_I32; i++)
        if (strcmp(s, ckpt_dtype_name((ckpt_dtype_t)i)) == 0) {
            *d = (ckpt_dtype_t)i;
            return 1;
        }
    return 0;
}

static int parse_tensor(json_t *o, size_t i, const char *what,
                        uint64_t total, uint64_t *prev_end, ckpt_tensor_t *t)
{
    int rc;
    char ctx[64];
    const char *name, *dtype;
    json_t *shape;
    uint64_t elems = 1, esz;

    snprintf(ctx, sizeof ctx, "tensors[%zu].", i);
    if (!json_is_object(o))
        return ckpt_seterr(CKPT_EFORMAT, "%s: tensors[%zu] is not an object",
                           what, i);
    if ((rc = get_str(o, "name", what, ctx, &name)) != CKPT_OK ||
        (rc = get_str(o, "dtype", what, ctx, &dtype)) != CKPT_OK ||
        (rc = get_u64(o, "offset", what, ctx, MAX_JSON_U64, &t->offset)) ||
        (rc = get_u64(o, "nbytes", what, ctx, MAX_JSON_U64, &t->nbytes)))
        return rc;
    if (name[0] == '\0' || strlen(name) >= CKPT_NAME_MAX)
        return ckpt_seterr(CKPT_EFORMAT, "%s: %sname is empty or longer than "
                           "%d bytes", what, ctx, CKPT_NAME_MAX - 1);
    /* Names are printed by ckptctl: no terminal control sequences. */
    if (!ckpt_name_printable(name))
        return ckpt_seterr(CKPT_EFORMAT, "%s: %sname holds a control "
                           "character", what, ctx);
    strcpy(t->name, name);
    if (!dtype_from_name(dtype, &t->dtype))
        return ckpt_seterr(CKPT_EFORMAT, "%s: %sdtype \"%s\" is unknown", what,
                           ctx, dtype);
    shape = json_object_get(o, "shape");
    if (!json_is_array(shape) || json_array_size(shape) > CKPT_MAX_DIMS)
        return ckpt_seterr(CKPT_EFORMAT, "%s: %sshape is not an array of at "
                           "most %d integers", what, ctx, CKPT_MAX_DIMS);
    t->ndim = (int)json_array_size(shape);
    for (int d = 0; d < t->ndim; d++) {
        json_t *v = json_array_get(shape, (size_t)d);
        json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
        if (x < 0 || (uint64_t)x > MAX_JSON_U64)
            return ckpt_seterr(CKPT_EFORMAT, "%s: %sshape[%d] is not a size",
                               what, ctx, d);
        t->shape[d] = x;
        if (x != 0 && elems > MAX_JSON_U64 / (uint64_t)x)
            return ckpt_seterr(CKPT_EFORMAT, "%s: %sshape overflows", what,
                               ctx);
        elems *= (uint64_t)x;
    }
    esz = ckpt_dtype_size(t->dtype);
    if (elems > MAX_JSON_U64 / esz || elems * esz != t->nbytes)
        return ckpt_seterr(CKPT_EFORMAT, "%s: %snbytes %llu does not match the "
                           "shape and dtype", what, ctx,
                           (unsigned long long)t->nbytes);
    if (t->offset < *prev_end)
        return ckpt_seterr(CKPT_EFORMAT, "%s: %soffset %llu overlaps the "
                           "previous tensor", what, ctx,
                           (unsigned long long)t->offset);
    if (t->offset > total || t->nbytes > total - t->offset)
        return ckpt_seterr(CKPT_EFORMAT, "%s: %s[offset, offset+nbytes) lies "
                           "outside total_bytes %llu", what, ctx,
                           (unsigned long long)total);
    *prev_end = t->offset + t->nbytes;
    t->data = NULL;
    return CKPT_OK;
}

static int parse_shard(json_t *o, int i, const char *what, uint64_t *pos,
                       ckpt_shard_info_t *s)
{
    int rc;
    char ctx[64], want[64];
    const char *file, *hex;
    uint64_t nframes;

    snprintf(ctx, sizeof ctx, "shards[%d].", i);
    if (!json_is_object(o))
        return ckpt_seterr(CKPT_EFORMAT, "%s: shards[%d] is not an object",
                           what, i);
    if ((rc = get_str(o, "file", what, ctx, &file)) != CKPT_OK ||
        (rc = get_str(o, "xxh64", what, ctx, &hex)) != CKPT_OK ||
        (rc = get_u64(o, "raw_offset", what, ctx, MAX_JSON_U64,
                      &s->raw_offset)) ||
        (rc = get_u64(o, "raw_bytes", what, ctx, MAX_JSON_U64,
                      &s->raw_bytes)) ||
        (rc = get_u64(o, "file_bytes", what, ctx, MAX_JSON_U64,
                      &s->file_bytes)) ||
        (rc = get_u64(o, "nframes", what, ctx, UINT32_MAX, &nframes)))
        return rc;
    ckpt_shard_name(i, want, sizeof want);
    if (strchr(file, '/') || strstr(file, "..") || strcmp(file, want) != 0)
        return ckpt_seterr(CKPT_EFORMAT, "%s: %sfile \"%.80s\" is not the "
                           "expected \"%s\"", what, ctx, file, want);
    if (strlen(hex) != 16 || strspn(hex, "0123456789abcdef") != 16)
        return ckpt_seterr(CKPT_EFORMAT, "%s: %sxxh64 is not 16 lowercase hex "
                           "digits", what, ctx);
    s->xxh64 = strtoull(hex, NULL, 16);
    s->nframes = (uint32_t)nframes;
    s->flags = 0;
    s->table_xxh64 = 0;
    if (json_object_get(o, "table_xxh64")) { /* absent from older manifests */
        if ((rc = get_str(o, "table_xxh64", what, ctx, &hex)) != CKPT_OK)
            return rc;
        if (strlen(hex) != 16 || strspn(hex, "0123456789abcdef") != 16)
            return ckpt_seterr(CKPT_EFORMAT, "%s: %stable_xxh64 is not 16 "
                               "lowercase hex digits", what, ctx);
        s->table_xxh64 = strtoull(hex, NULL, 16);
        s->flags = CKPT_SHARD_TABLE_KNOWN;
    }
    if (s->raw_offset != *pos)
        return ckpt_seterr(CKPT_EFORMAT, "%s: %sraw_offset %llu leaves a gap "
                           "or overlap (expected %llu)", what, ctx,
                           (unsigned long long)s->raw_offset,
                           (unsigned long long)*pos);
    if ((s->raw_bytes == 0) != (nframes == 0) || nframes > s->raw_bytes)
        return ckpt_seterr(CKPT_EFORMAT, "%s: %snframes %llu does not fit "
                           "raw_bytes %llu", what, ctx,
                           (unsigned long long)nframes,
                           (unsigned long long)s->raw_bytes);
    if (s->file_bytes < CKPT_SHARD_HEADER_BYTES + CKPT_SHARD_FOOTER_BYTES +
                            nframes * CKPT_SHARD_ENTRY_BYTES)
        return ckpt_seterr(CKPT_EFORMAT, "%s: %sfile_bytes %llu is too small",
                           what, ctx, (unsigned long long)s->file_bytes);
    *pos += s->raw_bytes;
    return CKPT_OK;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp((*(const ckpt_tensor_t *const *)a)->name,
                  (*(const ckpt_tensor_t *const *)b)->name);
}

/* Reject duplicate tensor names (sorting pointers: n may be large). */
static int check_unique(const ckpt_tensor_t *t, size_t n, const char *what)
{
    int rc = CKPT_OK;
    const ckpt_tensor_t **p = malloc((n ? n : 1) * sizeof *p);
    if (!p)
        return ckpt_seterr(CKPT_ENOMEM, "%s: out of memory", what);
    for (size_t i = 0; i < n; i++)
        p[i] = &t[i];
    qsort(p, n, sizeof *p, cmp_name);
    for (size_t i = 1; i < n; i++)
        if (strcmp(p[i - 1]->name, p[i]->name) == 0) {
            rc = ckpt_seterr(CKPT_EFORMAT, "%s: tensors[%zu].name \"%s\" is "
                             "a duplicate", what, (size_t)(p[i] - t),
                             p[i]->name);
            break;
        }
    free(p);
    return rc;
}

/* Check root's CHECKSUM_KEY, if present, against its canonical text (the
 * key is removed from root).  *checked says whether there was one. */
static int check_sum(json_t *root, const char *what, int *checked)
{
    json_t *v = json_object_get(root, CHECKSUM_KEY);
    const char *hex;
    char copy[17];
    uint64_t stored, actual;

    *checked = 0;
    if (!v)
        return CKPT_OK; /* written before manifests had a checksum */
    if (!json_is_string(v) || json_string_length(v) != 16)
        return ckpt_seterr(CKPT_EFORMAT, "%s: %s is not a string of 16 "
                           "lowercase hex digits", what, CHECKSUM_KEY);
    hex = json_string_value(v);
    if (strspn(hex, "0123456789abcdef") != 16)
        return ckpt_seterr(CKPT_EFORMAT, "%s: %s is not a string of 16 "
                           "lowercase hex digits", what, CHECKSUM_KEY);
    stored = strtoull(hex, NULL, 16);
    memcpy(copy, hex, sizeof copy); /* v dies with the key */
    json_object_del(root, CHECKSUM_KEY);
    if (canonical_xxh64(root, &actual) != 0)
        return ckpt_seterr(CKPT_ENOMEM, "%s: out of memory", what);
    if (actual != stored)
        return ckpt_seterr(CKPT_ECORRUPT, "%s: %s is %s but the content "
                           "hashes to %016" PRIx64 ": the manifest was damaged "
                           "or edited", what, CHECKSUM_KEY, copy, actual);
    *checked = 1;
    return CKPT_OK;
}

int ckpt_manifest_parse(const char *text, size_t len, const char *what,
                        ckpt_manifest_t *m)
{
    int rc = CKPT_OK;
    json_error_t jerr;
    json_t *root = NULL, *tens, *shards, *opts, *rec;
    const char *fmt;
    uint64_t v, prev_end = 0, pos = 0, stored = 0;

    memset(m, 0, sizeof *m);
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        rc = ckpt_seterr(CKPT_EFORMAT, "%s: not valid JSON: line %d: %s",
                         what, jerr.line, jerr.text);
        goto fail;
    }
    if (!json_is_object(root)) {
        rc = ckpt_seterr(CKPT_EFORMAT, "%s: not a JSON object", what);
        goto fail;
    }
    if ((rc = get_str(root, "format", what, "", &fmt)) != CKPT_OK)
        goto fail;
    if (strcmp(fmt, CKPT_FORMAT_NAME) != 0) {
        rc = ckpt_seterr(CKPT_EFORMAT, "%s: format is \"%.40s\", not \"%s\"",
                         what, fmt, CKPT_FORMAT_NAME);
        goto fail;
    }
    if ((rc = get_u64(root, "version", what, "", INT32_MAX, &v)) != CKPT_OK)
        goto fail;
    if (v != CKPT_FORMAT_VERSION) {
        rc = ckpt_seterr(v > CKPT_FORMAT_VERSION ? CKPT_EVERSION : CKPT_EFORMAT,
                         "%s: format version %llu, this build reads %d", what,
                         (unsigned long long)v, CKPT_FORMAT_VERSION);
        goto fail;
    }
    m->version = (int)v;
    if ((rc = get_u64(root, "step", what, "", INT64_MAX, &m->step)) ||
        (rc = get_u64(root, "created", what, "", INT64_MAX, &v)) ||
        (rc = get_u64(root, "total_bytes", what, "", MAX_JSON_U64,
                      &m->total_bytes)))
        goto fail;
    m->created = (int64_t)v;

    tens = json_object_get(root, "tensors");
    if (!json_is_array(tens) || json_array_size(tens) > CKPT_MAX_TENSORS) {
        rc = ckpt_seterr(CKPT_EFORMAT, "%s: tensors is not an array of at "
                         "most %d objects", what, CKPT_MAX_TENSORS);
        goto fail;
    }
    m->ntensors = json_array_size(tens);
    m->tensors = calloc(m->ntensors ? m->ntensors : 1, sizeof *m->tensors);
    if (!m->tensors)
        goto nomem;
    for (size_t i = 0; i < m->ntensors; i++) {
        rc = parse_tensor(json_array_get(tens, i), i, what, m->total_bytes,
                          &prev_end, &m->tensors[i]);
        if (rc != CKPT_OK)
            goto fail;
    }
    if ((rc = check_unique(m->tensors, m->ntensors, what)) != CKPT_OK)
        goto fail;

    shards = json_object_get(root, "shards");
    if (!json_is_array(shards) || json_array_size(shards) == 0 ||
        json_array_size(shards) > CKPT_MAX_SHARDS) {
        rc = ckpt_seterr(CKPT_EFORMAT, "%s: shards is not an array of 1 to %d "
                         "objects", what, CKPT_MAX_SHARDS);
        goto fail;
    }
    m->nshards = (int)json_array_size(shards);
    m->shards = calloc((size_t)m->nshards, sizeof *m->shards);
    if (!m->shards)
        goto nomem;
    for (int i = 0; i < m->nshards; i++) {
        rc = parse_shard(json_array_get(shards, (size_t)i), i, what, &pos,
                         &m->shards[i]);
        if (rc != CKPT_OK)
            goto fail;
        /* The files together stay within what one number can hold, so
         * every sum of file sizes a reader makes is exact. */
        stored += m->shards[i].file_bytes;
        if (stored > MAX_JSON_U64) {
            rc = ckpt_seterr(CKPT_EFORMAT, "%s: the shards' file_bytes add up to "
                             "more than %llu", what, (unsigned long long)MAX_JSON_U64);
            goto fail;
        }
    }
    if (pos != m->total_bytes) {
        rc = ckpt_seterr(CKPT_EFORMAT, "%s: shards cover %llu bytes, "
                         "total_bytes is %llu", what, (unsigned long long)pos,
                         (unsigned long long)m->total_bytes);
        goto fail;
    }

    opts = json_object_get(root, "options");
    ckpt_opts_default(&m->opts);
    if (opts) {
        json_t *lv = json_object_get(opts, "level"),
               *th = json_object_get(opts, "threads"),
               *sh = json_object_get(opts, "shuffle"),
               *fb = json_object_get(opts, "frame_bytes");
        if (!json_is_object(opts) || (lv && !json_is_integer(lv)) ||
            (th && !json_is_integer(th)) || (sh && !json_is_boolean(sh)) ||
            (fb && !json_is_integer(fb))) {
            rc = ckpt_seterr(CKPT_EFORMAT, "%s: options has a field of the "
                             "wrong type", what);
            goto fail;
        }
        if (lv)
            m->opts.level = (int)json_integer_value(lv);
        if (th)
            m->opts.threads = (int)json_integer_value(th);
        if (sh)
            m->opts.shuffle = json_is_true(sh);
        if (fb)
            m->opts.frame_bytes = (size_t)json_integer_value(fb);
    }

    rec = json_object_get(root, "record");
    if (!json_is_object(rec)) {
        rc = ckpt_seterr(CKPT_EFORMAT, "%s: record is %s", what,
                         rec ? "not an object" : "missing");
        goto fail;
    }
    m->record = json_dumps(rec, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!m->record)
        goto nomem;
    if ((rc = check_sum(root, what, &m->checksummed)) != CKPT_OK)
        goto fail;
    json_decref(root);
    return CKPT_OK;
nomem:
    rc = ckpt_seterr(CKPT_ENOMEM, "%s: out of memory", what);
fail:
    json_decref(root);
    ckpt_manifest_free(m);
    return rc;
}

void ckpt_manifest_free(ckpt_manifest_t *m)
{
    if (!m)
        return;
    free(m->tensors);
    free(m->shards);
    free(m->record);
    memset(m, 0, sizeof *m);
}

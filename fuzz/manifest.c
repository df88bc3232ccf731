/*
 * manifest.c - libFuzzer target: the manifest parser (ckpt_manifest_parse,
 * ckpt/manifest.c) on untrusted manifest.json text.
 *
 * Each input is the text of a manifest.json.  Properties:
 *
 *   1. nothing crashes, leaks or reaches undefined behaviour (ASan, LSan,
 *      UBSan in `make fuzz`);
 *   2. a refusal has a documented code (EFORMAT, ECORRUPT, EVERSION,
 *      ENOMEM), a message that is clean text (valid UTF-8, no control
 *      codes: messages quote the manifest's own strings), and leaves the
 *      manifest empty;
 *   3. an accepted manifest obeys every rule of docs/checkpoint-format.md,
 *      section 3, checked here again from the parsed values: the version,
 *      each tensor's name, dtype, shape, size and place in the flat space,
 *      the shards' coverage of it, their names' indices, frame counts and
 *      sizes, the record being a JSON object; and it says whether it was
 *      checksummed exactly when the text has a manifest_xxh64;
 *   4. an accepted manifest round-trips: ckpt_manifest_dump writes it,
 *      ckpt_manifest_parse reads that back with its checksum verified and
 *      every value equal, and dumping that again gives the same text.
 *
 * Nothing is written to disk.  The seeds are manifests of real checkpoints,
 * with and without manifest_xxh64 (older writers had none, so the fuzzer
 * can change values and still reach the code after the checksum).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fuzz_util.h"
#include "manifest.h"
#include "shard.h"
#include "util.h"

/* What the format allows (docs/checkpoint-format.md, section 3). */
#define MAX_FLAT ((uint64_t)1 << 53)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int is_zeroed(const ckpt_manifest_t *m)
{
    static const ckpt_manifest_t zero;
    return memcmp(m, &zero, sizeof zero) == 0;
}

/* Property 2. */
static void check_refusal(int rc, const ckpt_manifest_t *m)
{
    const char *msg = ckpt_last_error();
    FUZZ_CHECK(rc == CKPT_EFORMAT || rc == CKPT_ECORRUPT || rc == CKPT_EVERSION ||
               rc == CKPT_ENOMEM, "undocumented code %d (%s)", rc, msg);
    FUZZ_CHECK(msg[0] != '\0', "code %d without a message", rc);
    FUZZ_CHECK(fuzz_text_is_clean(msg), "message is not clean text: %s", msg);
    FUZZ_CHECK(is_zeroed(m), "a refused manifest was left filled in");
}

static void check_tensor(const ckpt_tensor_t *t, size_t i, uint64_t total,
                         uint64_t *prev_end)
{
    size_t len = strnlen(t->name, CKPT_NAME_MAX);
    unsigned __int128 bytes = ckpt_dtype_size(t->dtype);
    FUZZ_CHECK(len >= 1 && len < CKPT_NAME_MAX, "tensors[%zu].name length %zu",
               i, len);
    for (size_t k = 0; k < len; k++)
        FUZZ_CHECK((unsigned char)t->name[k] >= 0x20 &&
                   (unsigned char)t->name[k] != 0x7f,
                   "tensors[%zu].name holds control byte 0x%02x", i,
                   (unsigned char)t->name[k]);
    FUZZ_CHECK(bytes > 0, "tensors[%zu].dtype %d unknown", i, (int)t->dtype);
    FUZZ_CHECK(t->ndim >= 0 && t->ndim <= CKPT_MAX_DIMS, "tensors[%zu].ndim %d",
               i, t->ndim);
    for (int d = 0; d < t->ndim; d++) {
        FUZZ_CHECK(t->shape[d] >= 0, "tensors[%zu].shape[%d] %lld", i, d,
                   (long long)t->shape[d]);
        /* 128 bits: no product of up to four extents of at most 2^53
         * bytes and an 8-byte element overflows them... */
        bytes *= (uint64_t)t->shape[d];
        if (bytes > MAX_FLAT) /* ...once capped: every larger one is wrong */
            bytes = MAX_FLAT + 1;
    }
    FUZZ_CHECK(bytes == t->nbytes, "tensors[%zu].nbytes %llu is not "
               "product(shape) * dtype size", i, (unsigned long long)t->nbytes);
    FUZZ_CHECK(t->offset >= *prev_end, "tensors[%zu].offset %llu overlaps", i,
               (unsigned long long)t->offset);
    FUZZ_CHECK(t->offset <= total && t->nbytes <= total - t->offset,
               "tensors[%zu] ends past total_bytes %llu", i,
               (unsigned long long)total);
    FUZZ_CHECK(t->data == NULL, "tensors[%zu].data is set", i);
    *prev_end = t->offset + t->nbytes;
}

/* Property 3. */
static void check_rules(const ckpt_manifest_t *m, const uint8_t *data, size_t size)
{
    uint64_t prev_end = 0, pos = 0, stored = 0;
    json_t *root, *record;

    FUZZ_CHECK(m->version == CKPT_FORMAT_VERSION, "version %d", m->version);
    FUZZ_CHECK(m->step <= INT64_MAX && m->created >= 0 && m->total_bytes <= MAX_FLAT,
               "step %llu, created %lld, total_bytes %llu",
               (unsigned long long)m->step, (long long)m->created,
               (unsigned long long)m->total_bytes);
    FUZZ_CHECK(m->ntensors <= CKPT_MAX_TENSORS && (m->tensors || !m->ntensors),
               "%zu tensors", m->ntensors);
    for (size_t i = 0; i < m->ntensors; i++)
        check_tensor(&m->tensors[i], i, m->total_bytes, &prev_end);
    for (size_t i = 0; i < m->ntensors; i++)
        for (size_t j = i + 1; j < m->ntensors; j++)
            FUZZ_CHECK(strcmp(m->tensors[i].name, m->tensors[j].name) != 0,
                       "tensors[%zu] and [%zu] are both \"%s\"", i, j,
                       m->tensors[i].name);

    FUZZ_CHECK(m->nshards >= 1 && m->nshards <= CKPT_MAX_SHARDS && m->shards,
               "%d shards", m->nshards);
    for (int i = 0; i < m->nshards; i++) {
        const ckpt_shard_info_t *s = &m->shards[i];
        FUZZ_CHECK(s->raw_offset == pos, "shards[%d].raw_offset %llu, expected "
                   "%llu", i, (unsigned long long)s->raw_offset,
                   (unsigned long long)pos);
        FUZZ_CHECK((s->raw_bytes == 0) == (s->nframes == 0) &&
                   s->nframes <= s->raw_bytes, "shards[%d]: %u frames for %llu "
                   "bytes", i, s->nframes, (unsigned long long)s->raw_bytes);
        FUZZ_CHECK(s->file_bytes >= CKPT_SHARD_HEADER_BYTES +
                                        CKPT_SHARD_FOOTER_BYTES +
                                        (uint64_t)s->nframes * CKPT_SHARD_ENTRY_BYTES,
                   "shards[%d].file_bytes %llu too small for %u frames", i,
                   (unsigned long long)s->file_bytes, s->nframes);
        FUZZ_CHECK(s->flags == 0 || s->flags == CKPT_SHARD_TABLE_KNOWN,
                   "shards[%d].flags %u", i, s->flags);
        FUZZ_CHECK(s->raw_bytes <= MAX_FLAT - pos && s->file_bytes <= MAX_FLAT - stored,
                   "shards[%d]: sizes past 2^53", i);
        pos += s->raw_bytes;
        stored += s->file_bytes;
    }
    FUZZ_CHECK(pos == m->total_bytes, "shards cover %llu of %llu bytes",
               (unsigned long long)pos, (unsigned long long)m->total_bytes);

    FUZZ_CHECK(m->record != NULL, "no record");
    record = json_loads(m->record, 0, NULL);
    FUZZ_CHECK(json_is_object(record), "record is not an object: %.200s", m->record);
    json_decref(record);

    /* The input parses (it was accepted); its checksum key decides
     * whether the manifest was checked. */
    root = json_loadb((const char *)data, size, 0, NULL);
    FUZZ_CHECK(json_is_object(root), "an accepted text is not a JSON object");
    FUZZ_CHECK(m->checksummed == (json_object_get(root, "manifest_xxh64") != NULL),
               "checksummed is %d", m->checksummed);
    json_decref(root);
}

/* Property 4: a and b hold the same values. */
static void check_same(const ckpt_manifest_t *a, const ckpt_manifest_t *b)
{
    FUZZ_CHECK(a->version == b->version && a->step == b->step &&
               a->created == b->created && a->total_bytes == b->total_bytes &&
               a->ntensors == b->ntensors && a->nshards == b->nshards,
               "round trip changed the header or the counts");
    for (size_t i = 0; i < a->ntensors; i++) {
        const ckpt_tensor_t *x = &a->tensors[i], *y = &b->tensors[i];
        FUZZ_CHECK(strcmp(x->name, y->name) == 0 && x->dtype == y->dtype &&
                   x->ndim == y->ndim && x->offset == y->offset &&
                   x->nbytes == y->nbytes &&
                   memcmp(x->shape, y->shape, (size_t)x->ndim * sizeof *x->shape) == 0,
                   "round trip changed tensors[%zu]", i);
    }
    for (int i = 0; i < a->nshards; i++) {
        const ckpt_shard_info_t *x = &a->shards[i], *y = &b->shards[i];
        FUZZ_CHECK(x->raw_offset == y->raw_offset && x->raw_bytes == y->raw_bytes &&
                   x->file_bytes == y->file_bytes && x->xxh64 == y->xxh64 &&
                   x->nframes == y->nframes && x->flags == y->flags &&
                   x->table_xxh64 == y->table_xxh64,
                   "round trip changed shards[%d]", i);
    }
    FUZZ_CHECK(a->opts.level == b->opts.level && a->opts.threads == b->opts.threads &&
               a->opts.shuffle == b->opts.shuffle &&
               a->opts.frame_bytes == b->opts.frame_bytes,
               "round trip changed the options");
    FUZZ_CHECK(strcmp(a->record, b->record) == 0, "round trip changed the "
               "record: %.200s -> %.200s", a->record, b->record);
}

static void check_round_trip(const ckpt_manifest_t *m)
{
    ckpt_manifest_t again;
    char *text = NULL, *text2 = NULL;
    int rc = ckpt_manifest_dump(m, &text);
    if (rc == CKPT_ENOMEM)
        return;
    FUZZ_CHECK(rc == CKPT_OK, "dump of an accepted manifest: %s",
               ckpt_last_error());
    rc = ckpt_manifest_parse(text, strlen(text), "dumped", &again);
    FUZZ_CHECK(rc == CKPT_OK || rc == CKPT_ENOMEM, "the dump of an accepted "
               "manifest is refused: %s", ckpt_last_error());
    if (rc == CKPT_OK) {
        FUZZ_CHECK(again.checksummed == 1, "the dump has no checksum");
        check_same(m, &again);
        rc = ckpt_manifest_dump(&again, &text2);
        FUZZ_CHECK(rc == CKPT_OK || rc == CKPT_ENOMEM, "second dump: %s",
                   ckpt_last_error());
        FUZZ_CHECK(!text2 || strcmp(text, text2) == 0,
                   "dumping the same values twice gave two texts");
    }
    free(text2);
    free(text);
    ckpt_manifest_free(&again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ckpt_manifest_t m;
    int rc = ckpt_manifest_parse((const char *)data, size, "manifest.json", &m);
    if (rc != CKPT_OK) {
        check_refusal(rc, &m);
        return 0;
    }
    check_rules(&m, data, size);
    check_round_trip(&m);
    ckpt_manifest_free(&m);
    return 0;
}

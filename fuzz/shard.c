/*
 * shard.c - libFuzzer target: the shard reader (ckpt/shard_read.c) and the
 * frame codec (ckpt/shard.c) on an untrusted shard file, through the public
 * reading API (ckpt_open, ckpt_read_range, ckpt_read_tensor, ckpt_verify).
 *
 * Each input is the bytes of a shard-0.ftsh.  The target writes it into a
 * one-shard checkpoint whose manifest agrees with the shard's own footer
 * (frame count, raw bytes, table checksum) and with the file (its size and
 * XXH64), as a forger who rewrote both would: that way every input reaches
 * the seek table and the frames instead of stopping at the comparison with
 * a manifest.  Inputs whose footer no valid manifest could match (more than
 * 2^32-1 frames, more frames than bytes, a table that cannot fit) are
 * skipped, and so are shards of more than SHARD_RAW_MAX raw bytes, to keep
 * every run small.  An input whose seek table checksum does not match is
 * run twice: as it is, and with the footer's checksum made to match, so the
 * entries themselves are fuzzed too.
 *
 * Properties, for every input:
 *
 *   1. nothing crashes, leaks or reaches undefined behaviour (ASan, LSan,
 *      UBSan in `make fuzz`), with 1 or 3 decoding threads;
 *   2. a failed read has a documented code (ECORRUPT, EVERSION, ENOMEM) and
 *      a message;
 *   3. frames whose seek table entries do not chain (raw offsets, sizes,
 *      coverage of the shard) are never read: every read fails;
 *   4. a read that succeeds returns bytes the seek table vouches for: each
 *      frame read alone hashes to its entry's xxh64 (checked here, apart
 *      from the reader's own check), and every range read (the whole
 *      shard with 1 and 3 threads, the tensor, ranges derived from the
 *      input, some through the reader's one-frame cache) equals those
 *      frames' bytes;
 *   5. reads agree with each other: a range read succeeds exactly when
 *      every frame it touches reads alone, and ckpt_verify passes exactly
 *      when the whole shard reads.
 *
 * One scratch directory per process (fuzz_util.h), emptied after every
 * input.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "fuzz_util.h"
#include "manifest.h"
#include "shard.h"

/* The most raw bytes of a shard run: the reads below allocate them a few
 * times over. */
#define SHARD_RAW_MAX ((uint64_t)4 << 20)
/* Ranges read per input. */
#define RANGES 6
#define STEP_DIR "step-00000001"
#define TENSOR_NAME "shard"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* One seek table entry, as the harness reads it (apart from the reader). */
typedef struct {
    uint64_t raw_offset, raw_size, xxh64;
    int read_ok; /* the frame read alone succeeded */
} entry_t;

/* One input under test. */
typedef struct {
    const uint8_t *bytes;
    size_t size;
    uint64_t nframes, raw_bytes, table_offset;
    entry_t *entries;
    int chained;          /* the entries chain and cover the shard */
    unsigned char *truth; /* each frame that read alone, at its offset */
    unsigned char *buf;
    uint64_t rng;
} case_t;

static char dir[1100], manifest_path[1200], shard_path[1200];

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *tmp = fuzz_tmpdir("shard");
    (void)argc, (void)argv;
    FUZZ_CHECK(strlen(tmp) < 1024, "TMPDIR too long: %s", tmp);
    snprintf(dir, sizeof dir, "%s/" STEP_DIR, tmp);
    if (mkdir(dir, 0755) != 0)
        fuzz_fail(__FILE__, __LINE__, "mkdir", "cannot make %s", dir);
    snprintf(manifest_path, sizeof manifest_path, "%s/%s", dir, CKPT_MANIFEST_NAME);
    snprintf(shard_path, sizeof shard_path, "%s/shard-0.ftsh", dir);
    return 0;
}

/* The manifest of a one-shard checkpoint holding these bytes as one u8
 * tensor, agreeing with the shard's footer. */
static void write_manifest(const case_t *c, uint64_t table_xxh64)
{
    ckpt_tensor_t tensor;
    ckpt_shard_info_t shard;
    ckpt_manifest_t m;
    char *text = NULL;
    int rc;

    memset(&tensor, 0, sizeof tensor);
    snprintf(tensor.name, sizeof tensor.name, TENSOR_NAME);
    tensor.dtype = CKPT_U8;
    tensor.ndim = 1;
    tensor.shape[0] = (int64_t)c->raw_bytes;
    tensor.nbytes = c->raw_bytes;
    memset(&shard, 0, sizeof shard);
    shard.raw_bytes = c->raw_bytes;
    shard.file_bytes = c->size;
    shard.xxh64 = XXH64(c->bytes, c->size, 0);
    shard.table_xxh64 = table_xxh64;
    shard.nframes = (uint32_t)c->nframes;
    shard.flags = CKPT_SHARD_TABLE_KNOWN;
    memset(&m, 0, sizeof m);
    m.version = CKPT_FORMAT_VERSION;
    m.step = 1;
    m.total_bytes = c->raw_bytes;
    m.ntensors = 1;
    m.tensors = &tensor;
    m.nshards = 1;
    m.shards = &shard;
    ckpt_opts_default(&m.opts);
    rc = ckpt_manifest_dump(&m, &text);
    FUZZ_CHECK(rc == CKPT_OK, "dump: %s", ckpt_last_error());
    fuzz_write_file(manifest_path, text, strlen(text));
    free(text);
}

/* Read the seek table as the format describes it; set c->chained. */
static void load_entries(case_t *c)
{
    uint64_t pos = 0;
    c->chained = 1;
    for (uint64_t i = 0; i < c->nframes; i++) {
        const uint8_t *e = c->bytes + c->table_offset + i * CKPT_SHARD_ENTRY_BYTES;
        entry_t *x = &c->entries[i];
        x->raw_offset = le64(e);
        x->raw_size = le64(e + 8);
        x->xxh64 = le64(e + 32);
        x->read_ok = 0;
        if (x->raw_offset != pos || x->raw_size == 0 ||
            x->raw_size > c->raw_bytes - pos)
            c->chained = 0;
        else
            pos += x->raw_size;
    }
    if (pos != c->raw_bytes)
        c->chained = 0;
}

static void check_failure(int rc, const char *what)
{
    const char *msg = ckpt_last_error();
    FUZZ_CHECK(rc == CKPT_ECORRUPT || rc == CKPT_EVERSION || rc == CKPT_ENOMEM,
               "%s: undocumented code %d (%s)", what, rc, msg);
    FUZZ_CHECK(msg[0] != '\0', "%s: code %d without a message", what, rc);
}

/* Do the frames of [a, a+len) all read alone?  (c->chained) */
static int frames_ok(const case_t *c, uint64_t a, uint64_t len)
{
    for (uint64_t i = 0; i < c->nframes; i++) {
        const entry_t *x = &c->entries[i];
        if (x->raw_offset < a + len && x->raw_offset + x->raw_size > a && !x->read_ok)
            return 0;
    }
    return 1;
}

/* Read [a, a+len) and check it against the frames read alone.
 * @return 1 when the read succeeded. */
static int check_range(ckpt_t *ck, case_t *c, uint64_t a, uint64_t len,
                       int threads)
{
    int rc;
    ckpt_set_read_threads(ck, threads);
    rc = ckpt_read_range(ck, a, len, c->buf);
    if (!c->chained) {
        FUZZ_CHECK(rc != CKPT_OK, "read [%llu, +%llu) of a shard whose frames "
                   "do not chain succeeded", (unsigned long long)a,
                   (unsigned long long)len);
    } else {
        int want = frames_ok(c, a, len);
        FUZZ_CHECK((rc == CKPT_OK) == want, "read [%llu, +%llu), %d threads: %s, "
                   "but its frames %s alone", (unsigned long long)a,
                   (unsigned long long)len, threads,
                   rc == CKPT_OK ? "ok" : ckpt_last_error(),
                   want ? "all read" : "do not all read");
    }
    if (rc != CKPT_OK) {
        check_failure(rc, "read range");
        return 0;
    }
    FUZZ_CHECK(memcmp(c->buf, c->truth + a, len) == 0, "read [%llu, +%llu), "
               "%d threads, returned other bytes than its frames",
               (unsigned long long)a, (unsigned long long)len, threads);
    return 1;
}

/* Run one shard (its footer's table checksum is table_xxh64). */
static void run_case(case_t *c, uint64_t table_xxh64)
{
    ckpt_t *ck = NULL;
    int rc, whole_ok;
    uint64_t raw = c->raw_bytes;

    fuzz_write_file(shard_path, c->bytes, c->size);
    write_manifest(c, table_xxh64);
    rc = ckpt_open(dir, &ck);
    FUZZ_CHECK(rc == CKPT_OK, "the harness's manifest is refused: %s",
               ckpt_last_error());
    load_entries(c);

    /* Each frame alone (property 4: its bytes hash to its entry). */
    memset(c->truth, 0, raw ? raw : 1);
    for (uint64_t i = 0; c->chained && i < c->nframes; i++) {
        entry_t *x = &c->entries[i];
        rc = ckpt_read_range(ck, x->raw_offset, x->raw_size, c->truth + x->raw_offset);
        if (rc != CKPT_OK) {
            check_failure(rc, "read frame");
            memset(c->truth + x->raw_offset, 0, x->raw_size);
            continue;
        }
        FUZZ_CHECK(XXH64(c->truth + x->raw_offset, x->raw_size, 0) == x->xxh64,
                   "frame %llu read, but its bytes do not hash to its seek "
                   "table entry", (unsigned long long)i);
        x->read_ok = 1;
    }

    /* The whole shard, with one thread and with three. */
    whole_ok = check_range(ck, c, 0, raw, 1);
    FUZZ_CHECK(check_range(ck, c, 0, raw, 3) == whole_ok, "the whole shard "
               "read with 1 thread %s, with 3 %s", whole_ok ? "ok" : "failed",
               whole_ok ? "failed" : "ok");

    /* The tensor covers the shard. */
    rc = ckpt_read_tensor(ck, TENSOR_NAME, c->buf, raw);
    FUZZ_CHECK((rc == CKPT_OK) == whole_ok, "read tensor %s, read whole %s",
               rc == CKPT_OK ? "ok" : "failed", whole_ok ? "ok" : "failed");
    FUZZ_CHECK(rc != CKPT_OK || memcmp(c->buf, c->truth, raw) == 0,
               "read tensor returned other bytes");

    /* Ranges from the input: partial frames go through the reader's
     * one-frame cache; each range is read again after another one. */
    for (int k = 0; k < RANGES && raw > 0; k++) {
        uint64_t a = fuzz_rand(&c->rng) % raw;
        uint64_t len = 1 + fuzz_rand(&c->rng) % (raw - a);
        check_range(ck, c, a, len, k % 2 ? 3 : 1);
        if (k % 3 == 2)
            check_range(ck, c, a, len, 1);
    }

    /* An empty read opens no shard: verify is the first to look at an
     * empty shard's file. */
    rc = ckpt_verify(ck);
    FUZZ_CHECK(raw == 0 || (rc == CKPT_OK) == whole_ok, "verify %s (%s), read whole %s",
               rc == CKPT_OK ? "passed" : "failed",
               rc == CKPT_OK ? "" : ckpt_last_error(), whole_ok ? "ok" : "failed");
    if (rc != CKPT_OK)
        check_failure(rc, "verify");
    ckpt_close(ck);
    unlink(shard_path);
    unlink(manifest_path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const size_t ends = CKPT_SHARD_HEADER_BYTES + CKPT_SHARD_FOOTER_BYTES;
    case_t c;
    uint64_t table_bytes, table_sum, actual;
    uint8_t *sealed;

    if (!dir[0])
        LLVMFuzzerInitialize(NULL, NULL);
    if (size < ends)
        return 0;
    memset(&c, 0, sizeof c);
    c.bytes = data;
    c.size = size;
    c.nframes = le64(data + size - CKPT_SHARD_FOOTER_BYTES + 8);
    c.raw_bytes = le64(data + size - CKPT_SHARD_FOOTER_BYTES + 16);
    table_sum = le64(data + size - CKPT_SHARD_FOOTER_BYTES + 24);
    /* What a valid manifest can say (section 3), and what runs fast. */
    if (c.nframes > (size - ends) / CKPT_SHARD_ENTRY_BYTES ||
        c.nframes > c.raw_bytes || (c.nframes == 0) != (c.raw_bytes == 0) ||
        c.raw_bytes > SHARD_RAW_MAX)
        return 0;
    table_bytes = c.nframes * CKPT_SHARD_ENTRY_BYTES;
    c.table_offset = size - CKPT_SHARD_FOOTER_BYTES - table_bytes;
    c.entries = calloc(c.nframes ? c.nframes : 1, sizeof *c.entries);
    c.truth = malloc(c.raw_bytes ? c.raw_bytes : 1);
    c.buf = malloc(c.raw_bytes ? c.raw_bytes : 1);
    FUZZ_CHECK(c.entries && c.truth && c.buf, "out of memory");
    c.rng = XXH64(data, size, 0);

    run_case(&c, table_sum);
    /* The same entries behind a footer whose table checksum matches. */
    actual = XXH64(data + c.table_offset, table_bytes, 0);
    if (actual != table_sum && (sealed = malloc(size)) != NULL) {
        memcpy(sealed, data, size);
        for (int i = 0; i < 8; i++)
            sealed[size - CKPT_SHARD_FOOTER_BYTES + 24 + i] = (uint8_t)(actual >> (8 * i));
        c.bytes = sealed;
        run_case(&c, actual);
        free(sealed);
    }
    free(c.entries);
    free(c.truth);
    free(c.buf);
    return 0;
}

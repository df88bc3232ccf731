/*
 * state.c - ftrain's checkpoint contents: tensors and record; resume.
 *
 * INVARIANTS (resume with reshard)
 *   R1  Nothing in a checkpoint depends on the world size that wrote it:
 *       tensors have global shapes, the data position is (epoch, cursor) in
 *       samples, the RNG is (seed, stream) and the schedule position is the
 *       update count.  The saving world size is recorded only as a fact.
 *   R2  A reader of world size M reads the byte range [r*T/M, (r+1)*T/M) of
 *       the flat space (only the zstd frames it overlaps, each verified),
 *       straight into the tensors that range covers, then the ranks exchange
 *       their pieces tensor by tensor, so every rank holds the whole
 *       replicated state after one read of the checkpoint in total, with no
 *       staging copy of it.
 *   R3  Every rank reaches the same verdict: local failures are combined
 *       with comm_any_failed() before anything is used, so no rank trains
 *       on while another gave up.
 *   R4  A checkpoint whose architecture or trajectory options differ from
 *       the run's is refused, naming the difference; only --epochs/--steps
 *       may change (to extend or shorten a run), with a warning when a
 *       cosine schedule, which spans the total, changes shape.
 *
 *   resolve:  rank 0 ckpt_latest_good() -> bcast path -> all ckpt_open()
 *   load:     check record and tensors -> read own range into the tensors
 *             -> allgatherv each tensor in place
 */
#include "ftrain/state.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ftrain/ckpt.h"

/* Parameters and the optimizer's two moment buffers, a weight and a bias
 * per layer each (state_tensors). */
#define STATE_MAX_TENSORS (3 * 2 * MODEL_MAX_LAYERS)

/* The record's own format (docs/checkpoint-format.md, section 9). */
#define STATE_RECORD_FORMAT "ftrain-state"
#define STATE_RECORD_VERSION 1

/* The commit's collectives can wait long: the peers may still be writing
 * (allgather) or rank 0 writing the manifest (bcast).  Wait idle first, so a
 * rank that is done does not take a core from one that is not. */
static int coll_allgather(void *ctx, const void *send, void *recv, size_t bytes)
{
    return comm_wait_all((comm_t *)ctx) != COMM_OK ||
           comm_allgather((comm_t *)ctx, send, recv, bytes) != COMM_OK;
}

static int coll_bcast(void *ctx, void *buf, size_t bytes, int root)
{
    return comm_wait_all((comm_t *)ctx) != COMM_OK ||
           comm_bcast((comm_t *)ctx, buf, bytes, root) != COMM_OK;
}

ckpt_coll_t state_ckpt_coll(comm_t *c)
{
    ckpt_coll_t coll = {c, comm_rank(c), comm_size(c), coll_allgather, coll_bcast};
    return coll;
}

/* Describe the model parameters and the optimizer moments as tensors. */
static size_t state_tensors(const state_t *st, ckpt_tensor_t *t)
{
    const model_arch_t *a = model_arch(st->model);
    float *p = model_params(st->model);
    float *bufs[3] = {p, optim_state_m(st->optim), optim_state_v(st->optim)};
    const char *prefix[3] = {"model", "optim.m", "optim.v"};
    size_t n = 0;
    for (int b = 0; b < 3; b++) {
        if (!bufs[b])
            continue;
        for (int l = 0; l < a->nlayers && l < MODEL_MAX_LAYERS; l++) {
            size_t w_off, b_off;
            model_layer_offsets(a, l, &w_off, &b_off);
            for (int k = 0; k < 2; k++) {
                ckpt_tensor_t *x = &t[n++];
                memset(x, 0, sizeof *x);
                snprintf(x->name, sizeof x->name, "%s/l%d.%s", prefix[b], l,
                         k ? "bias" : "weight");
                x->dtype = CKPT_F32;
                x->ndim = k ? 1 : 2;
                x->shape[0] = a->dims[l + 1];
                x->shape[1] = k ? 0 : a->dims[l];
                x->data = bufs[b] + (k ? b_off : w_off);
            }
        }
    }
    return n;
}

static json_t *state_arch_json(const model_arch_t *a)
{
    json_t *dims = json_array();
    for (int i = 0; i <= a->nlayers; i++)
        json_array_append_new(dims, json_integer(a->dims[i]));
    char fp[17], str[256];
    snprintf(fp, sizeof fp, "%016llx", (unsigned long long)model_arch_fingerprint(a));
    model_arch_string(a, str, sizeof str);
    return json_pack("{s:o, s:s, s:s, s:s, s:s}", "dims", dims, "activation",
                     model_act_name(a->act), "loss",
                     a->loss == LOSS_XENT ? "xent" : "mse", "fingerprint", fp,
                     "string", str);
}

static char *state_record(const state_t *st, int world)
{
    char cfgbuf[4096];
    if (config_to_json(st->cfg, cfgbuf, sizeof cfgbuf) < 0)
        return NULL;
    json_t *cfg = json_loads(cfgbuf, 0, NULL);
    json_t *slurm = json_object();
    const char *job = getenv("SLURM_JOB_ID"), *rc = getenv("SLURM_RESTART_COUNT");
    const char *arr = getenv("SLURM_ARRAY_JOB_ID"), *task = getenv("SLURM_ARRAY_TASK_ID");
    if (job)
        json_object_set_new(slurm, "job_id", json_string(job));
    if (arr && task) {
        json_object_set_new(slurm, "array_job_id", json_string(arr));
        json_object_set_new(slurm, "array_task_id", json_string(task));
    }
    json_object_set_new(slurm, "restart_count", json_integer(rc ? atoll(rc) : 0));
    char dfp[17];
    snprintf(dfp, sizeof dfp, "%016llx", (unsigned long long)st->data_fp);
    json_t *rec = json_pack(
        "{s:s, s:i, s:I, s:I, s:I, s:I, s:I, s:o, s:{s:s, s:I, s:I}, "
        "s:{s:I, s:f}, s:{s:s, s:I}, s:o, s:{s:s, s:I, s:s}, s:i, s:i, s:b, s:o, "
        "s:{s:o}, s:f, s:I, s:s, s:b}",
        "format", STATE_RECORD_FORMAT, "version", STATE_RECORD_VERSION,
        "step", (json_int_t)st->step,
        "epoch", (json_int_t)st->epoch,
        "cursor", (json_int_t)st->cursor,
        "steps_per_epoch", (json_int_t)st->steps_per_epoch,
        "samples_seen", (json_int_t)(st->epoch * st->n_train + st->cursor),
        "config", cfg ? cfg : json_object(),
        "rng", "generator", "splitmix64-counter", "seed", (json_int_t)st->cfg->seed,
        "stream", (json_int_t)st->epoch,
        "schedule", "update", (json_int_t)st->step, "lr",
        optim_lr(optim_config(st->optim), st->step),
        "optimizer", "kind", optim_kind_name(st->cfg->opt.kind), "updates",
        (json_int_t)optim_updates(st->optim),
        "arch", state_arch_json(model_arch(st->model)),
        "data", "name", st->cfg->data, "train_samples", (json_int_t)st->n_train,
        "fingerprint", dfp,
        "world_size", world,
        "threads", st->threads,
        "deterministic", st->cfg->deterministic,
        "slurm", slurm,
        "lineage", "resumed_from",
        st->resumed_from[0] ? json_string(st->resumed_from) : json_null(),
        "run_seconds", st->run_seconds,
        "saved_at", (json_int_t)time(NULL),
        "ftrain_version", FTRAIN_VERSION,
        "eval_pending", st->eval_pending);
    if (!rec)
        return NULL;
    char *s = json_dumps(rec, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(rec);
    return s;
}

struct state_snapshot {
    ckpt_tensor_t t[STATE_MAX_TENSORS];
    size_t n;
    uint64_t step;
    char *record;
    ckpt_opts_t opts;
    ckpt_shard_info_t info;
    int write_rc;
    char write_err[512];
};

size_t state_floats(const state_t *st)
{
    ckpt_tensor_t t[STATE_MAX_TENSORS];
    size_t n = state_tensors(st, t), floats = 0;
    for (size_t i = 0; i < n; i++)
        floats += (size_t)t[i].shape[0] * (size_t)(t[i].ndim == 2 ? t[i].shape[1] : 1);
    return floats;
}

void state_snapshot_free(state_snapshot_t *s)
{
    if (!s)
        return;
    free(s->record);
    free(s);
}

/* ---- the snapshot copy, on several threads ---------------------------- */

/* Bytes [from, to) of the concatenation of n source ranges, copied to the
 * same offsets of dst. */
typedef struct {
    const ckpt_tensor_t *t;
    size_t n;
    unsigned char *dst;
    size_t from, to;
} copy_part_t;

static void *copy_part(void *arg)
{
    copy_part_t *c = arg;
    size_t base = 0;
    for (size_t i = 0; i < c->n && base < c->to; i++) {
        size_t len = (size_t)c->t[i].nbytes;
        size_t a = c->from > base ? c->from - base : 0;
        size_t b = c->to - base < len ? c->to - base : len;
        if (a < b)
            memcpy(c->dst + base + a, (const unsigned char *)c->t[i].data + a, b - a);
        base += len;
    }
    return NULL;
}

/* Copy the tensors' bytes, back to back, into dst: the training stall of
 * an asynchronous save, so it uses up to `threads` threads (a slice of at
 * least 4 MiB each; a thread that cannot start is done by this one). */
static void copy_tensors(const ckpt_tensor_t *t, size_t n, void *dst, size_t total,
                         int threads)
{
    enum { MAX_COPY_THREADS = 32 };
    const size_t min_slice = (size_t)4 << 20;
    int k = threads < 1 ? 1 : threads > MAX_COPY_THREADS ? MAX_COPY_THREADS : threads;
    if ((size_t)k > total / min_slice)
        k = total / min_slice > 0 ? (int)(total / min_slice) : 1;
    copy_part_t part[MAX_COPY_THREADS];
    pthread_t th[MAX_COPY_THREADS];
    int started[MAX_COPY_THREADS] = {0};
    for (int i = 0; i < k; i++) {
        part[i] = (copy_part_t){t, n, dst, total * (size_t)i / (size_t)k,
                                total * (size_t)(i + 1) / (size_t)k};
        if (i > 0)
            started[i] = pthread_create(&th[i], NULL, copy_part, &part[i]) == 0;
    }
    copy_part(&part[0]);
    for (int i = 1; i < k; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
        else
            copy_part(&part[i]);
    }
}

int state_snapshot_take(const state_t *st, int world, float *copy, size_t copy_floats,
                        int level, state_snapshot_t **out, char *err, size_t cap)
{
    *out = NULL;
    state_snapshot_t *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, cap, "out of memory for a snapshot");
        return STATE_EFAIL;
    }
    s->n = state_tensors(st, s->t);
    s->step = (uint64_t)st->step;
    uint64_t total = 0;
    if (ckpt_layout(s->t, s->n, &total) != CKPT_OK) {
        snprintf(err, cap, "cannot lay out the state: %s", ckpt_last_error());
        goto fail;
    }
    if (copy) {
        /* The copy is the training stall of an asynchronous save; the
         * caller's buffer is reused from save to save, so no page is
         * faulted in again. */
        size_t floats = 0;
        for (size_t i = 0; i < s->n; i++)
            floats += (size_t)(s->t[i].nbytes / sizeof(float));
        if (floats > copy_floats) {
            snprintf(err, cap, "snapshot buffer of %zu floats is too small for %zu", copy_floats,
                     floats);
            goto fail;
        }
        int threads = st->cfg->ckpt_threads ? st->cfg->ckpt_threads : st->ckpt_threads;
        copy_tensors(s->t, s->n, copy, floats * sizeof(float), threads);
        float *p = copy;
        for (size_t i = 0; i < s->n; i++) {
            s->t[i].data = p;
            p += s->t[i].nbytes / sizeof(float);
        }
    }
    s->record = state_record(st, world);
    if (!s->record) {
        snprintf(err, cap, "cannot build the checkpoint record");
        goto fail;
    }
    ckpt_opts_default(&s->opts);
    s->opts.level = level;
    /* Default: this rank's share of the node's cores, as for BLAS. */
    s->opts.threads = st->cfg->ckpt_threads ? st->cfg->ckpt_threads : st->ckpt_threads;
    s->opts.direct = !st->cfg->ckpt_buffered;
    s->opts.adapt = !st->cfg->ckpt_no_adapt;
    *out = s;
    return STATE_OK;
fail:
    state_snapshot_free(s);
    return STATE_EFAIL;
}

int state_snapshot_write(state_snapshot_t *s, const char *root, int rank, int world)
{
    s->write_rc = ckpt_shard_write(root, s->step, rank, world, s->t, s->n, &s->opts, &s->info);
    if (s->write_rc != CKPT_OK)
        snprintf(s->write_err, sizeof s->write_err, "%s: %s", ckpt_strerror(s->write_rc),
                 ckpt_last_error());
    return s->write_rc == CKPT_OK ? STATE_OK : STATE_EFAIL;
}

int state_snapshot_commit(state_snapshot_t *s, comm_t *c, const char *root, char *out,
                          size_t outcap, char *err, size_t cap)
{
    ckpt_coll_t coll = state_ckpt_coll(c);
    int rc = ckpt_commit(root, s->step, s->t, s->n, s->record, &s->opts, s->write_rc,
                         &s->info, &coll);
    char name[64];
    ckpt_step_dirname(s->step, name, sizeof name);
    snprintf(out, outcap, "%s/%s", root, name);
    if (rc != CKPT_OK) {
        if (s->write_rc != CKPT_OK)
            snprintf(err, cap, "checkpoint '%s' not saved: this rank's shard: %s", out,
                     s->write_err);
        else
            snprintf(err, cap, "checkpoint '%s' not saved: %s: %s", out, ckpt_strerror(rc),
                     ckpt_last_error());
        return STATE_EFAIL;
    }
    return STATE_OK;
}

int state_save(const state_t *st, comm_t *c, const char *root, int level,
               char *out, size_t outcap, char *err, size_t cap)
{
    state_snapshot_t *s = NULL;
    int rc = state_snapshot_take(st, comm_size(c), NULL, 0, level, &s, err, cap);
    if (comm_any_failed(c, rc)) {
        if (rc == STATE_OK)
            snprintf(err, cap, "another rank could not describe its state");
        state_snapshot_free(s);
        return STATE_EFAIL;
    }
    state_snapshot_write(s, root, comm_rank(c), comm_size(c));
    rc = state_snapshot_commit(s, c, root, out, outcap, err, cap);
    state_snapshot_free(s);
    return rc;
}

static void state_report_skip(void *ctx, const char *name, const char *why)
{
    (void)ctx;
    fprintf(stderr, "ftrain: resume: skipping checkpoint '%s': %s\n", name, why);
}

static void state_report_aside(void *ctx, const char *from, const char *to)
{
    (void)ctx;
    fprintf(stderr, "ftrain: resume: moved the bad checkpoint '%s' aside to '%s' (kept for "
                    "inspection; this run saves that step anew)\n", from, to);
}

/* The run resumes from `found` because every newer checkpoint failed to
 * verify: move those out of the way, or this run's own save of their
 * steps would find the names taken and fail (and a requeued job would
 * fail the same way each time). */
static void state_set_aside_newer(const char *root, const char *found)
{
    ckpt_t *k = NULL;
    if (ckpt_open(found, &k) != CKPT_OK)
        return; /* it verified a moment ago; the load will say what is wrong */
    if (ckpt_set_aside_after(root, ckpt_step(k), state_report_aside, NULL) != CKPT_OK)
        fprintf(stderr, "ftrain: resume: could not move bad checkpoints aside: %s\n",
                ckpt_last_error());
    ckpt_close(k);
}

/* The newest step-<N> under root (any status), into *step and name; 0 when
 * there is none (or no root). */
static int state_newest_step(const char *root, uint64_t *step, char *name, size_t cap)
{
    ckpt_entry_t *v = NULL;
    size_t n = 0;
    int found = 0;
    if (!root || !root[0] || ckpt_list(root, 0, &v, &n) != CKPT_OK)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (v[i].name[0] != '.') {
            *step = v[i].step;
            snprintf(name, cap, "%s", v[i].name);
            found = 1;
        }
    free(v);
    return found;
}

int state_resolve(const config_t *cfg, comm_t *c, const char *root, char *path,
                  size_t cap, char *err, size_t errcap)
{
    /* msg[0] carries the verdict so one broadcast tells every rank. */
    char msg[STATE_PATH_MAX + 512];
    memset(msg, 0, sizeof msg);
    if (comm_rank(c) == 0) {
        int verdict = STATE_ENONE;
        char found[STATE_PATH_MAX] = "";
        uint64_t newest = 0;
        char newest_name[128];
        int have = state_newest_step(root, &newest, newest_name, sizeof newest_name);
        if (strcmp(cfg->resume, "none") == 0) {
            verdict = STATE_ENONE;
            /* A fresh run would save steps that exist, or be pruned away
             * beside newer ones: never mix two runs in one directory. */
            if (have) {
                verdict = STATE_EFAIL;
                snprintf(found, sizeof found,
                         "--resume none: '%.600s' already holds checkpoints (newest %s); a fresh "
                         "run would save beside them: use a new --run-dir, or move them away to "
                         "start over", root, newest_name);
            }
        } else if (strcmp(cfg->resume, "auto") == 0) {
            int rc = ckpt_latest_good(root, found, sizeof found, state_report_skip, NULL);
            if (rc == CKPT_OK) {
                verdict = STATE_OK;
                state_set_aside_newer(root, found);
            }
            else if (rc == CKPT_ENOTFOUND)
                verdict = STATE_ENONE;
            else {
                verdict = STATE_EFAIL;
                snprintf(found, sizeof found,
                         "checkpoints exist under '%s' but none is good (%s); refusing to start over: "
                         "move them away, or use a new --run-dir, to start fresh", root,
                         ckpt_strerror(rc));
            }
        } else {
            ckpt_t *k = NULL;
            int rc = ckpt_open(cfg->resume, &k);
            if (rc == CKPT_OK)
                rc = ckpt_verify(k);
            if (rc == CKPT_OK && have && newest > ckpt_step(k)) {
                /* This run would save steps that exist (and fail), or have
                 * its own checkpoints pruned beside the newer ones. */
                verdict = STATE_EFAIL;
                snprintf(found, sizeof found,
                         "--resume '%.300s' is step %llu, but '%.300s' already holds newer "
                         "checkpoints (newest %s); move them away, use another --run-dir, or "
                         "--resume auto to continue from the newest", cfg->resume,
                         (unsigned long long)ckpt_step(k), root, newest_name);
            } else if (rc == CKPT_OK) {
                verdict = STATE_OK;
                snprintf(found, sizeof found, "%s", cfg->resume);
            } else {
                verdict = STATE_EFAIL;
                snprintf(found, sizeof found, "--resume '%.500s': %s: %.400s", cfg->resume,
                         ckpt_strerror(rc), ckpt_last_error());
            }
            ckpt_close(k);
        }
        msg[0] = (char)(verdict == STATE_OK ? 'o' : verdict == STATE_ENONE ? 'n' : 'f');
        snprintf(msg + 1, sizeof msg - 1, "%s", found);
    }
    if (comm_bcast(c, msg, sizeof msg, 0) != COMM_OK) {
        snprintf(err, errcap, "resume: broadcast failed: %s", comm_last_error());
        return STATE_EFAIL;
    }
    msg[sizeof msg - 1] = '\0';
    if (msg[0] == 'o') {
        snprintf(path, cap, "%s", msg + 1);
        return STATE_OK;
    }
    if (msg[0] == 'n')
        return STATE_ENONE;
    snprintf(err, errcap, "%s", msg + 1);
    return STATE_EFAIL;
}

/* A string from a checkpoint's record, for a message: at most cap - 1
 * bytes, control characters shown as '?', so a record cannot drive the
 * terminal. */
static const char *printable(const char *str, char *buf, size_t cap)
{
    size_t i = 0;
    for (; str && str[i] && i + 1 < cap; i++)
        buf[i] = (unsigned char)str[i] < 0x20 || str[i] == 0x7f ? '?' : str[i];
    buf[i] = '\0';
    return buf;
}

/* The training data must be the data the checkpoint was trained on: the
 * cursor and the sampler's permutation index into it.  Records written
 * before the fingerprint existed have no "data" object and are not checked. */
static int state_check_data(const state_t *st, json_t *data, char *err, size_t cap)
{
    if (!data)
        return STATE_OK;
    json_int_t n = -1;
    const char *fp = NULL;
    char mine[17], pb[17];
    snprintf(mine, sizeof mine, "%016llx", (unsigned long long)st->data_fp);
    if (json_unpack(data, "{s:I, s:s}", "train_samples", &n, "fingerprint", &fp) != 0) {
        snprintf(err, cap, "checkpoint record's \"data\" object lacks train_samples "
                           "(integer) or fingerprint (string)");
        return STATE_EMISMATCH;
    }
    if (n != st->n_train || strcmp(fp, mine) != 0) {
        snprintf(err, cap,
                 "training data differs: the checkpoint was trained on %lld samples "
                 "(fingerprint %s), this run loaded %lld (fingerprint %s); resume with the "
                 "same data (--data-dir), or use a new --run-dir",
                 (long long)n, printable(fp, pb, sizeof pb), (long long)st->n_train, mine);
        return STATE_EMISMATCH;
    }
    return STATE_OK;
}

/* Compare the checkpoint's record with this run; R4. */
static int state_check_record(const state_t *st, json_t *rec, char *err, size_t cap)
{
    const char *format = json_string_value(json_object_get(rec, "format"));
    json_t *version = json_object_get(rec, "version");
    if (!format || strcmp(format, STATE_RECORD_FORMAT) != 0 || !json_is_integer(version)) {
        char fb[65];
        snprintf(err, cap, "not an ftrain training checkpoint: its record's format is %s%s%s "
                           "(expected \"%s\" with an integer version)",
                 format ? "\"" : "", format ? printable(format, fb, sizeof fb) : "missing",
                 format ? "\"" : "", STATE_RECORD_FORMAT);
        return STATE_EMISMATCH;
    }
    if (json_integer_value(version) < 1 || json_integer_value(version) > STATE_RECORD_VERSION) {
        snprintf(err, cap, "record version %lld: this ftrain reads version %d%s",
                 (long long)json_integer_value(version), STATE_RECORD_VERSION,
                 json_integer_value(version) > STATE_RECORD_VERSION
                     ? " (the checkpoint was written by a newer ftrain)" : "");
        return STATE_EMISMATCH;
    }
    json_t *arch = json_object_get(rec, "arch");
    const char *fp = json_string_value(json_object_get(arch, "fingerprint"));
    const char *astr = json_string_value(json_object_get(arch, "string"));
    const model_arch_t *a = model_arch(st->model);
    char mine[17], mystr[256];
    snprintf(mine, sizeof mine, "%016llx", (unsigned long long)model_arch_fingerprint(a));
    model_arch_string(a, mystr, sizeof mystr);
    if (!fp || strcmp(fp, mine) != 0) {
        char ab[256];
        snprintf(err, cap, "architecture differs: the checkpoint has %s, this run asks for %s",
                 astr ? printable(astr, ab, sizeof ab) : "(unknown)", mystr);
        return STATE_EMISMATCH;
    }
    char cfgbuf[4096];
    json_t *theirs = json_object_get(rec, "config");
    if (config_to_json(st->cfg, cfgbuf, sizeof cfgbuf) < 0 || !json_is_object(theirs)) {
        snprintf(err, cap, "checkpoint record has no config object");
        return STATE_EMISMATCH;
    }
    json_t *ours = json_loads(cfgbuf, 0, NULL);
    const char *key;
    json_t *val;
    int rc = STATE_OK;
    json_object_foreach(ours, key, val) {
        if (!strcmp(key, "epochs") || !strcmp(key, "steps"))
            continue;
        json_t *tv = json_object_get(theirs, key);
        if (!tv || !json_equal(tv, val)) {
            char *a1 = tv ? json_dumps(tv, JSON_ENCODE_ANY) : NULL;
            char *a2 = json_dumps(val, JSON_ENCODE_ANY);
            snprintf(err, cap,
                     "option '%s' differs: the checkpoint has %s, this run has %s "
                     "(use the same options, or a new --run-dir)",
                     key, a1 ? a1 : "nothing", a2 ? a2 : "?");
            free(a1);
            free(a2);
            rc = STATE_EMISMATCH;
            break;
        }
    }
    json_decref(ours);
    if (rc == STATE_OK)
        rc = state_check_data(st, json_object_get(rec, "data"), err, cap);
    /* Deterministic mode promises bit-identical weights, and OpenBLAS gives
     * other bits with another thread count (docs/determinism.md). */
    json_t *th = json_object_get(rec, "threads");
    if (rc == STATE_OK && st->cfg->deterministic && json_is_integer(th) &&
        json_integer_value(th) != st->threads) {
        snprintf(err, cap,
                 "BLAS threads differ: the checkpoint was written with %lld per rank, this run "
                 "has %d; --deterministic results depend on it (pass --threads %lld, or use a "
                 "new --run-dir)",
                 (long long)json_integer_value(th), st->threads,
                 (long long)json_integer_value(th));
        rc = STATE_EMISMATCH;
    }
    return rc;
}

/* R4 lets --steps/--epochs change, but the cosine schedule is spread over
 * the run's total steps: another total reshapes it from the resumed step on
 * (the rate there jumps).  Allowed, as extending a run is legitimate, but
 * said, naming both totals and the rate before and after. */
static void state_warn_schedule(const state_t *st, json_t *rec, int64_t step)
{
    const optim_cfg_t *oc = optim_config(st->optim);
    json_t *cfg = json_object_get(rec, "config");
    json_int_t steps = json_integer_value(json_object_get(cfg, "steps"));
    json_int_t epochs = json_integer_value(json_object_get(cfg, "epochs"));
    json_int_t spe = json_integer_value(json_object_get(rec, "steps_per_epoch"));
    json_t *lr = json_object_get(json_object_get(rec, "schedule"), "lr");
    int64_t theirs = steps > 0 ? steps : epochs * spe;
    if (oc->schedule != SCHED_COSINE || theirs <= 0 || theirs == oc->total_steps)
        return;
    fprintf(stderr,
            "ftrain: warning: resume: this run has %lld steps in all, the checkpoint's run had "
            "%lld; the cosine learning-rate schedule spans the total, so from step %lld on it "
            "follows the new one (%.3g there",
            (long long)oc->total_steps, (long long)theirs, (long long)step, optim_lr(oc, step));
    if (json_is_number(lr))
        fprintf(stderr, ", the old one gave %.3g", json_number_value(lr));
    fprintf(stderr, ")\n");
}

/* The part of the byte range [lo, hi) of the flat space that falls in a
 * tensor at [off, off + nb): *count bytes from *displ into the tensor. */
static void overlap(uint64_t lo, uint64_t hi, uint64_t off, uint64_t nb,
                    uint64_t *count, uint64_t *displ)
{
    uint64_t a = lo > off ? lo : off, b = hi < off + nb ? hi : off + nb;
    *count = b > a ? b - a : 0;
    *displ = b > a ? a - off : 0;
}

int state_load(state_t *st, comm_t *c, const char *dir, int *saved_world,
               char *err, size_t cap)
{
    int rank = comm_rank(c), size = comm_size(c);
    ckpt_t *k = NULL;
    json_t *rec = NULL;
    uint64_t *counts = NULL, *displs = NULL;
    int rc = ckpt_open(dir, &k), ret = STATE_EFAIL;
    if (rc != CKPT_OK)
        snprintf(err, cap, "cannot open checkpoint '%s': %s: %s", dir,
                 ckpt_strerror(rc), ckpt_last_error());
    if (comm_any_failed(c, rc))
        goto fail;
    /* Decode with this rank's share of the node's cores, as saves encode. */
    ckpt_set_read_threads(k, st->cfg->ckpt_threads ? st->cfg->ckpt_threads : st->ckpt_threads);

    /* Check the record and every tensor before reading a byte. */
    json_error_t jerr;
    rec = json_loads(ckpt_record_json(k), 0, &jerr);
    rc = rec ? state_check_record(st, rec, err, cap) : STATE_EFAIL;
    if (!rec)
        snprintf(err, cap, "checkpoint '%s': record is not JSON: %s", dir, jerr.text);
    json_int_t step = 0, epoch = 0, cursor = 0, updates = 0;
    if (rc == STATE_OK &&
        json_unpack(rec, "{s:I, s:I, s:I, s:{s:I}}", "step", &step, "epoch", &epoch,
                    "cursor", &cursor, "optimizer", "updates", &updates) != 0) {
        snprintf(err, cap, "checkpoint '%s': record lacks step/epoch/cursor/optimizer.updates", dir);
        rc = STATE_EFAIL;
    }
    if (rc == STATE_OK && (step < 0 || epoch < 0 || cursor < 0 || updates != step ||
                           cursor % st->cfg->global_batch != 0)) {
        snprintf(err, cap, "checkpoint '%s': inconsistent position (step %lld, epoch %lld, cursor %lld, updates %lld)",
                 dir, (long long)step, (long long)epoch, (long long)cursor, (long long)updates);
        rc = STATE_EFAIL;
    }
    ckpt_tensor_t t[STATE_MAX_TENSORS];
    const ckpt_tensor_t *src[STATE_MAX_TENSORS];
    size_t n = rc == STATE_OK ? state_tensors(st, t) : 0;
    for (size_t i = 0; i < n && rc == STATE_OK; i++) {
        const ckpt_tensor_t *s = src[i] = ckpt_find(k, t[i].name);
        uint64_t want = (uint64_t)t[i].shape[0] * (uint64_t)(t[i].ndim == 2 ? t[i].shape[1] : 1) * 4;
        if (!s || s->dtype != CKPT_F32 || s->ndim != t[i].ndim || s->nbytes != want ||
            s->shape[0] != t[i].shape[0] || (t[i].ndim == 2 && s->shape[1] != t[i].shape[1])) {
            snprintf(err, cap, "checkpoint '%s': tensor '%s' missing or of another shape", dir, t[i].name);
            rc = STATE_EMISMATCH;
        }
    }
    if (rc == STATE_OK) {
        counts = calloc((size_t)size, sizeof *counts);
        displs = calloc((size_t)size, sizeof *displs);
        if (!counts || !displs) {
            snprintf(err, cap, "out of memory loading '%s'", dir);
            rc = STATE_EFAIL;
        }
    }
    if (comm_any_failed(c, rc != STATE_OK)) {
        ret = rc == STATE_OK ? STATE_EFAIL : rc;
        if (rc == STATE_OK)
            snprintf(err, cap, "another rank could not load '%s'", dir);
        goto fail;
    }

    /* R2: this rank reads its 1/M of the flat space straight into the
     * tensors it overlaps; then each tensor's pieces are exchanged in place. */
    uint64_t total = ckpt_total_bytes(k);
    uint64_t lo = total * (uint64_t)rank / (uint64_t)size,
             hi = total * (uint64_t)(rank + 1) / (uint64_t)size;
    rc = CKPT_OK;
    for (size_t i = 0; i < n && rc == CKPT_OK; i++) {
        uint64_t cnt, dsp;
        overlap(lo, hi, src[i]->offset, src[i]->nbytes, &cnt, &dsp);
        if (cnt)
            rc = ckpt_read_range(k, src[i]->offset + dsp, cnt, (char *)t[i].data + dsp);
        if (rc != CKPT_OK)
            snprintf(err, cap, "reading checkpoint '%s': %s: %s", dir,
                     ckpt_strerror(rc), ckpt_last_error());
    }
    if (comm_any_failed(c, rc))
        goto fail;
    for (size_t i = 0; i < n; i++) {
        for (int r = 0; r < size; r++)
            overlap(total * (uint64_t)r / (uint64_t)size,
                    total * (uint64_t)(r + 1) / (uint64_t)size, src[i]->offset,
                    src[i]->nbytes, &counts[r], &displs[r]);
        if (comm_allgatherv_inplace(c, (void *)t[i].data, counts, displs) != COMM_OK) {
            snprintf(err, cap, "exchanging checkpoint ranges: %s", comm_last_error());
            goto fail;
        }
    }

    st->step = step;
    st->epoch = epoch;
    st->cursor = cursor;
    optim_set_updates(st->optim, updates);
    json_t *rs = json_object_get(rec, "run_seconds");
    st->run_seconds = json_is_number(rs) ? json_number_value(rs) : 0;
    /* Absent in records written before it: those resumes go on as they
     * did then, without evaluating first. */
    st->eval_pending = json_is_true(json_object_get(rec, "eval_pending"));
    if (rank == 0)
        state_warn_schedule(st, rec, step);
    snprintf(st->resumed_from, sizeof st->resumed_from, "%s", dir);
    *saved_world = ckpt_world_size(k);
    ret = STATE_OK;
fail:
    json_decref(rec);
    free(counts);
    free(displs);
    ckpt_close(k);
    return ret;
}

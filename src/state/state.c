/*
 * state.c - ftrain's checkpoint contents: tensors and record; resume.
 *
 * INVARIANTS (resume with reshard)
 *   R1  Nothing in a checkpoint depends on the world size that wrote it:
 *       tensors have global shapes, the data position is (epoch, cursor) in
 *       samples, the RNG is (seed, stream) and the schedule position is the
 *       update count.  The saving world size is recorded only as a fact.
 *   R2  When the ranks run on several nodes, a reader of world size M reads
 *       the byte range [r*T/M, (r+1)*T/M) of the flat space (only the zstd
 *       frames it overlaps, each verified), straight into the tensors that
 *       range covers, then the ranks exchange their pieces tensor by tensor,
 *       so every rank holds the whole replicated state after one read of the
 *       checkpoint from storage in total, with no staging copy of it.  When
 *       all of them run on one node, each rank reads the whole flat space
 *       itself, verified, beginning with its own 1/M, and nothing is
 *       exchanged: the node's page cache holds the files once for all of
 *       them, so storage is still read once, the ranks' reads of it spread
 *       over the files, and a rank pays one copy out of the page cache and
 *       the checksums where MPI's shared memory would cost a copy in and a
 *       copy out (without single-copy support) and the sender on a core at
 *       the same moment (docs/bench-log.md, "The shared-tier restore on one
 *       node").
 *   R3  Every rank reaches the same verdict: local failures are combined
 *       with comm_any_failed() before anything is used, so no rank trains
 *       on while another gave up.
 *   R4  A checkpoint whose architecture or trajectory options differ from
 *       the run's is refused, naming the difference; only --epochs/--steps
 *       may change (to extend or shorten a run), with a warning when a
 *       cosine schedule, which spans the total, changes shape.
 *
 *   resolve:  rank 0 ckpt_latest_good() -> bcast path -> all ckpt_open()
 *             (state_resolve.c)
 *   load:     check record and tensors -> one node? (load_one_node)
 *             -> yes: read the whole flat space into the tensors
 *             -> no:  read own range into the tensors -> allgatherv each
 *                     tensor in place
 */
#include "state/state.h"
#include "state/state_internal.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ftrain/ckpt.h"
#include "util/util.h"
#include "fault/watchdog.h"

/* The host arrays (parameters and the optimizer's two moments), a weight
 * and a bias per layer each (state_tensors). */
#define STATE_MAX_TENSORS (STATE_ARRAYS * 2 * MODEL_MAX_LAYERS)

/* A message about one rank's shard, or a refusal of a resume. */
#define STATE_MSG_MAX 512
/* A step directory's name ("step-" and up to 20 digits). */
#define STATE_STEP_NAME_MAX 64
/* Room for a node's name (SLURMD_NODENAME, or the host name). */
#define STATE_HOST_MAX 256

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

ckpt_coll_t state_ckpt_coll(comm_t *comm)
{
    ckpt_coll_t coll = {comm, comm_rank(comm), comm_size(comm), coll_allgather, coll_bcast};
    return coll;
}

void state_host_arrays(model_t *model, optim_t *opt, float *arrays[STATE_ARRAYS])
{
    arrays[STATE_PARAMS] = model_params(model);
    arrays[STATE_MOMENT1] = optim_state_m(opt);
    arrays[STATE_MOMENT2] = optim_state_v(opt);
}

/* Describe the host arrays (state_host_arrays) as tensors, named after
 * their array.  @return their number. */
static size_t state_tensors(const state_t *st, ckpt_tensor_t *tensors)
{
    static const char *const prefix[STATE_ARRAYS] = {
        [STATE_PARAMS] = "model", [STATE_MOMENT1] = "optim.m", [STATE_MOMENT2] = "optim.v"};
    const model_arch_t *arch = model_arch(st->model);
    float *bufs[STATE_ARRAYS];
    state_host_arrays(st->model, st->optim, bufs);
    size_t count = 0;
    for (int buf = 0; buf < STATE_ARRAYS; buf++) {
        if (!bufs[buf])
            continue;
        for (int layer = 0; layer < arch->nlayers && layer < MODEL_MAX_LAYERS; layer++) {
            size_t w_off, b_off;
            model_layer_offsets(arch, layer, &w_off, &b_off);
            for (int is_bias = 0; is_bias < 2; is_bias++) {
                ckpt_tensor_t *tensor = &tensors[count++];
                memset(tensor, 0, sizeof *tensor);
                snprintf(tensor->name, sizeof tensor->name, "%s/l%d.%s", prefix[buf], layer,
                         is_bias ? "bias" : "weight");
                tensor->dtype = CKPT_F32;
                tensor->ndim = is_bias ? 1 : 2;
                tensor->shape[0] = arch->dims[layer + 1];
                tensor->shape[1] = is_bias ? 0 : arch->dims[layer];
                tensor->data = bufs[buf] + (is_bias ? b_off : w_off);
            }
        }
    }
    return count;
}

const char *state_hex64(uint64_t value, char *buf)
{
    snprintf(buf, STATE_HEX64_SIZE, "%016llx", (unsigned long long)value);
    return buf;
}

static json_t *state_arch_json(const model_arch_t *arch)
{
    json_t *dims = json_array();
    for (int i = 0; i <= arch->nlayers; i++)
        json_array_append_new(dims, json_integer(arch->dims[i]));
    char fp[STATE_HEX64_SIZE], str[MODEL_ARCH_STRING_MAX];
    model_arch_string(arch, str, sizeof str);
    return json_pack("{s:o, s:s, s:s, s:s, s:s}", "dims", dims, "activation",
                     model_act_name(arch->act), "loss", model_loss_name(arch->loss),
                     "fingerprint", state_hex64(model_arch_fingerprint(arch), fp), "string", str);
}

/* The SLURM job this rank runs in, for the record. */
static json_t *state_slurm_json(void)
{
    json_t *slurm = json_object();
    const char *job = getenv("SLURM_JOB_ID"), *restarts = getenv("SLURM_RESTART_COUNT");
    const char *array = getenv("SLURM_ARRAY_JOB_ID"), *task = getenv("SLURM_ARRAY_TASK_ID");
    if (job)
        json_object_set_new(slurm, "job_id", json_string(job));
    if (array && task) {
        json_object_set_new(slurm, "array_job_id", json_string(array));
        json_object_set_new(slurm, "array_task_id", json_string(task));
    }
    json_object_set_new(slurm, "restart_count", json_integer(restarts ? atoll(restarts) : 0));
    return slurm;
}

static char *state_record(const state_t *st, int world)
{
    char cfgbuf[STATE_CONFIG_JSON_MAX];
    if (config_to_json(st->cfg, cfgbuf, sizeof cfgbuf) < 0)
        return NULL;
    json_t *cfg = json_loads(cfgbuf, 0, NULL);
    char dfp[STATE_HEX64_SIZE];
    json_t *rec = json_pack(
        "{s:s, s:i, s:I, s:I, s:I, s:I, s:I, s:o, s:{s:s, s:I, s:I}, "
        "s:{s:I, s:f}, s:{s:s, s:I}, s:o, s:{s:s, s:I, s:s}, s:i, s:i, s:b, s:o, "
        "s:{s:o}, s:f, s:I, s:s, s:b, s:s, s:o}",
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
        "fingerprint", state_hex64(st->data_fp, dfp),
        "world_size", world,
        "threads", st->threads,
        "deterministic", st->cfg->deterministic,
        "slurm", state_slurm_json(),
        "lineage", "resumed_from",
        st->resumed_from[0] ? json_string(st->resumed_from) : json_null(),
        "run_seconds", st->run_seconds,
        "saved_at", (json_int_t)time(NULL),
        "ftrain_version", FTRAIN_VERSION,
        "eval_pending", st->eval_pending,
        "init", model_init_name(st->init),
        "root_id", st->root_id[0] ? json_string(st->root_id) : json_null());
    if (!rec)
        return NULL;
    char *text = json_dumps(rec, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(rec);
    return text;
}

struct state_snapshot {
    ckpt_tensor_t tensors[STATE_MAX_TENSORS];
    size_t count;
    uint64_t step;
    char *record;
    ckpt_opts_t opts;
    ckpt_shard_info_t info;
    int write_rc;
    char write_err[STATE_MSG_MAX];
};

/* The floats of one tensor of state_tensors(). */
static size_t tensor_floats(const ckpt_tensor_t *tensor)
{
    return (size_t)tensor->shape[0] * (size_t)(tensor->ndim == 2 ? tensor->shape[1] : 1);
}

size_t state_floats(const state_t *st)
{
    ckpt_tensor_t tensors[STATE_MAX_TENSORS];
    size_t count = state_tensors(st, tensors), floats = 0;
    for (size_t i = 0; i < count; i++)
        floats += tensor_floats(&tensors[i]);
    return floats;
}

void state_snapshot_free(state_snapshot_t *snap)
{
    if (!snap)
        return;
    free(snap->record);
    free(snap);
}

/* ---- the snapshot copy, on several threads ---------------------------- */

/* Copy the tensors' bytes, back to back, into dst: the training stall of
 * an asynchronous save, so it uses up to `threads` threads
 * (util_copy_ranges); a tensor already at its place in the copy
 * (downloaded there) stays. */
static void copy_tensors(const ckpt_tensor_t *tensors, size_t count, void *dst,
                         size_t total, int threads)
{
    util_copy_range_t *ranges = malloc((count + 1) * sizeof *ranges);
    size_t base = 0;
    for (size_t i = 0; i < count; i++) {
        util_copy_range_t r = {(unsigned char *)dst + base, tensors[i].data,
                               (size_t)tensors[i].nbytes};
        if (ranges)
            ranges[i] = r;
        else if (r.dst != r.src) /* no memory for the plan: one thread */
            memcpy(r.dst, r.src, r.n);
        base += r.n;
    }
    if (ranges)
        util_copy_ranges(ranges, count, total, threads);
    free(ranges);
}

/* The checkpoint encoder threads: --ckpt-threads, else this rank's share
 * of the node's cores, as for BLAS. */
static int state_ckpt_threads(const state_t *st)
{
    return st->cfg->ckpt_threads ? st->cfg->ckpt_threads : st->ckpt_threads;
}

/* Point the tensors that lie in one of the placed host arrays at their
 * place in the copy, where they are already.  A placed array must land in
 * the copy as it lies in memory (its tensors back to back, in order), or
 * its bytes in the copy would not be the tensors'.  @return STATE_OK or
 * STATE_EFAIL (err set). */
static int snapshot_redirect(state_snapshot_t *snap, float *copy, const state_placed_t *placed,
                             size_t nplaced, char *err, size_t cap)
{
    for (size_t k = 0; k < nplaced; k++) {
        const float *base = placed[k].host;
        float *at = copy, *start = NULL;
        for (size_t i = 0; i < snap->count; i++) {
            const float *data = snap->tensors[i].data;
            size_t floats = tensor_floats(&snap->tensors[i]);
            if (data >= base && data < base + placed[k].floats) {
                if (!start)
                    start = at - (data - base);
                if (start < copy || at != start + (data - base))
                    return util_fail(err, cap, STATE_EFAIL, "snapshot: tensor '%s' is not laid "
                                     "out in the copy as in its host array",
                                     snap->tensors[i].name);
                snap->tensors[i].data = at;
            }
            at += floats;
        }
    }
    return STATE_OK;
}

/* Copy the snapshot's tensors into copy (copy_floats floats) and point the
 * tensors at the copy; those in the placed host arrays are in the copy
 * already.  @return STATE_OK or STATE_EFAIL (err set). */
static int snapshot_copy(state_snapshot_t *snap, const state_t *st, float *copy,
                         size_t copy_floats, const state_placed_t *placed, size_t nplaced,
                         char *err, size_t cap)
{
    /* The copy is the training stall of an asynchronous save; the caller's
     * buffer is reused from save to save, so no page is faulted in again. */
    size_t floats = 0;
    for (size_t i = 0; i < snap->count; i++)
        floats += (size_t)(snap->tensors[i].nbytes / sizeof(float));
    if (floats > copy_floats)
        return util_fail(err, cap, STATE_EFAIL,
                         "snapshot buffer of %zu floats is too small for %zu", copy_floats,
                         floats);
    if (snapshot_redirect(snap, copy, placed, nplaced, err, cap) != STATE_OK)
        return STATE_EFAIL;
    copy_tensors(snap->tensors, snap->count, copy, floats * sizeof(float),
                 state_ckpt_threads(st));
    float *next = copy;
    for (size_t i = 0; i < snap->count; i++) {
        snap->tensors[i].data = next;
        next += snap->tensors[i].nbytes / sizeof(float);
    }
    return STATE_OK;
}

int state_copy_offset(const state_t *st, const void *host_data, size_t *offset)
{
    ckpt_tensor_t tensors[STATE_MAX_TENSORS];
    size_t count = state_tensors(st, tensors), floats = 0;
    for (size_t i = 0; i < count; i++) {
        if (tensors[i].data == host_data) {
            *offset = floats;
            return STATE_OK;
        }
        floats += tensor_floats(&tensors[i]);
    }
    return STATE_EFAIL;
}

int state_snapshot_take(const state_t *st, int world, float *copy, size_t copy_floats,
                        const state_placed_t *placed, size_t nplaced, int level,
                        state_snapshot_t **out, char *err, size_t cap)
{
    *out = NULL;
    state_snapshot_t *snap = calloc(1, sizeof *snap);
    if (!snap)
        return util_fail(err, cap, STATE_EFAIL, "out of memory for a snapshot");
    snap->count = state_tensors(st, snap->tensors);
    snap->step = (uint64_t)st->step;
    uint64_t total = 0;
    int rc = STATE_OK;
    if (ckpt_layout(snap->tensors, snap->count, &total) != CKPT_OK)
        rc = util_fail(err, cap, STATE_EFAIL, "cannot lay out the state: %s",
                       ckpt_last_error());
    if (rc == STATE_OK && copy)
        rc = snapshot_copy(snap, st, copy, copy_floats, placed, nplaced, err, cap);
    if (rc == STATE_OK) {
        snap->record = state_record(st, world);
        if (!snap->record)
            rc = util_fail(err, cap, STATE_EFAIL, "cannot build the checkpoint record");
    }
    if (rc != STATE_OK) {
        state_snapshot_free(snap);
        return rc;
    }
    ckpt_opts_default(&snap->opts);
    snap->opts.level = level;
    snap->opts.threads = state_ckpt_threads(st);
    snap->opts.direct = !st->cfg->ckpt_buffered;
    snap->opts.adapt = !st->cfg->ckpt_no_adapt;
    *out = snap;
    return STATE_OK;
}

int state_snapshot_write(state_snapshot_t *snap, const char *root, int rank, int world)
{
    snap->write_rc = ckpt_shard_write(root, snap->step, rank, world, snap->tensors,
                                      snap->count, &snap->opts, &snap->info);
    if (snap->write_rc != CKPT_OK)
        snprintf(snap->write_err, sizeof snap->write_err, "%s: %s",
                 ckpt_strerror(snap->write_rc), ckpt_last_error());
    return snap->write_rc == CKPT_OK ? STATE_OK : STATE_EFAIL;
}

int state_snapshot_commit(state_snapshot_t *snap, comm_t *comm, const char *root, char *out,
                          size_t outcap, char *err, size_t cap)
{
    /* This rank's shard is written (or failed): what follows waits for
     * the others, and a rank still writing is the one behind. */
    watchdog_phase(WATCHDOG_SAVE_SYNC, snap->step);
    ckpt_coll_t coll = state_ckpt_coll(comm);
    int rc = ckpt_commit(root, snap->step, snap->tensors, snap->count, snap->record,
                         &snap->opts, snap->write_rc, &snap->info, &coll);
    char name[STATE_STEP_NAME_MAX];
    ckpt_step_dirname(snap->step, name, sizeof name);
    snprintf(out, outcap, "%s/%s", root, name);
    if (rc == CKPT_OK)
        return STATE_OK;
    if (snap->write_rc != CKPT_OK)
        return util_fail(err, cap, STATE_EFAIL,
                         "checkpoint '%s' not saved: this rank's shard: %s", out,
                         snap->write_err);
    return util_fail(err, cap, STATE_EFAIL, "checkpoint '%s' not saved: %s: %s", out,
                     ckpt_strerror(rc), ckpt_last_error());
}

int state_snapshot_local(const state_snapshot_t *snap, state_local_view_t *view)
{
    view->step = snap->step;
    view->tensors = snap->tensors;
    view->ntensors = snap->count;
    view->record = snap->record;
    view->opts = &snap->opts;
    view->info = snap->info;
    return snap->write_rc == CKPT_OK ? STATE_OK : STATE_EFAIL;
}

const char *state_snapshot_error(const state_snapshot_t *snap)
{
    return snap->write_err;
}

int state_save(const state_t *st, comm_t *comm, const char *root, int level,
               char *out, size_t outcap, char *err, size_t cap)
{
    state_snapshot_t *snap = NULL;
    int rc = state_snapshot_take(st, comm_size(comm), NULL, 0, NULL, 0, level, &snap, err, cap);
    if (comm_any_failed(comm, rc)) {
        if (rc == STATE_OK)
            snprintf(err, cap, "another rank could not describe its state");
        state_snapshot_free(snap);
        return STATE_EFAIL;
    }
    state_snapshot_write(snap, root, comm_rank(comm), comm_size(comm));
    rc = state_snapshot_commit(snap, comm, root, out, outcap, err, cap);
    state_snapshot_free(snap);
    return rc;
}

/* ---- load: check the record (state_check.c), then read ------------------ */

/* The part of the byte range [lo, hi) of the flat space that falls in a
 * tensor at [off, off + nb): *count bytes from *displ into the tensor. */
static void overlap(uint64_t lo, uint64_t hi, uint64_t off, uint64_t nb,
                    uint64_t *count, uint64_t *displ)
{
    uint64_t begin = lo > off ? lo : off, end = hi < off + nb ? hi : off + nb;
    *count = end > begin ? end - begin : 0;
    *displ = end > begin ? begin - off : 0;
}

/* A load in progress: the checkpoint, its record, and this run's tensors
 * with the checkpoint's tensor of the same name beside each. */
typedef struct {
    ckpt_t *ck;
    json_t *rec;
    json_int_t step, epoch, cursor, updates;
    ckpt_tensor_t tensors[STATE_MAX_TENSORS];
    const ckpt_tensor_t *saved[STATE_MAX_TENSORS];
    size_t count;
} load_t;

/* This rank's checks of the record and of every tensor, before a byte is
 * read.  @return STATE_OK, STATE_EMISMATCH or STATE_EFAIL (err set). */
static int load_check(load_t *ld, const state_t *st, const char *dir, char *err, size_t cap)
{
    json_error_t jerr;
    ld->rec = json_loads(ckpt_record_json(ld->ck), 0, &jerr);
    if (!ld->rec)
        return util_fail(err, cap, STATE_EFAIL, "checkpoint '%s': record is not JSON: %s",
                         dir, jerr.text);
    int rc = state_check_record(st, ld->rec, err, cap);
    if (rc != STATE_OK)
        return rc;
    if (json_unpack(ld->rec, "{s:I, s:I, s:I, s:{s:I}}", "step", &ld->step, "epoch",
                    &ld->epoch, "cursor", &ld->cursor, "optimizer", "updates",
                    &ld->updates) != 0)
        return util_fail(err, cap, STATE_EFAIL,
                         "checkpoint '%s': record lacks step/epoch/cursor/optimizer.updates",
                         dir);
    if (ld->step < 0 || ld->epoch < 0 || ld->cursor < 0 || ld->updates != ld->step ||
        ld->cursor % st->cfg->global_batch != 0)
        return util_fail(err, cap, STATE_EFAIL,
                         "checkpoint '%s': inconsistent position (step %lld, epoch %lld, "
                         "cursor %lld, updates %lld)", dir, (long long)ld->step,
                         (long long)ld->epoch, (long long)ld->cursor, (long long)ld->updates);
    ld->count = state_tensors(st, ld->tensors);
    for (size_t i = 0; i < ld->count; i++) {
        const ckpt_tensor_t *mine = &ld->tensors[i];
        const ckpt_tensor_t *saved = ld->saved[i] = ckpt_find(ld->ck, mine->name);
        uint64_t want = (uint64_t)tensor_floats(mine) * sizeof(float);
        if (!saved || saved->dtype != CKPT_F32 || saved->ndim != mine->ndim ||
            saved->nbytes != want || saved->shape[0] != mine->shape[0] ||
            (mine->ndim == 2 && saved->shape[1] != mine->shape[1]))
            return util_fail(err, cap, STATE_EMISMATCH,
                             "checkpoint '%s': tensor '%s' missing or of another shape", dir,
                             mine->name);
    }
    return STATE_OK;
}

/* A node-local checkpoint (a planned load) is this run's only when it was
 * saved under this run's checkpoint root: a local directory can hold
 * another run's, newer than anything of ours (a new --run-dir, or a root
 * moved away to start afresh).  Records without root_id (older writers)
 * are not taken either.  @return STATE_OK or STATE_EFAIL (err set). */
static int load_check_root(const load_t *ld, const state_t *st, const char *dir, char *err,
                           size_t cap)
{
    const char *theirs = json_string_value(json_object_get(ld->rec, "root_id"));
    if (theirs && strcmp(theirs, st->root_id) == 0)
        return STATE_OK;
    return util_fail(err, cap, STATE_EFAIL,
                     "checkpoint '%s' is another run's: it was saved under the checkpoint "
                     "root %s, this run's is %s (.root-id)", dir, theirs ? theirs : "(unknown)",
                     st->root_id[0] ? st->root_id : "(none)");
}

/* Collective, with a plan (holder[s]: the rank that reads saved shard s,
 * from its own copy of the step directory): each holder reads its shards'
 * byte ranges into the tensors they overlap, then each shard's pieces are
 * broadcast from their holder.  @return as load_read. */
static int load_read_planned(load_t *ld, comm_t *comm, const char *dir, const int *holder,
                             char *err, size_t cap)
{
    int rank = comm_rank(comm), nshards = ckpt_world_size(ld->ck);
    int rc = CKPT_OK;
    for (int s = 0; s < nshards && rc == CKPT_OK; s++) {
        const ckpt_shard_info_t *sh = ckpt_shard_at(ld->ck, s);
        for (size_t i = 0; i < ld->count && rc == CKPT_OK && holder[s] == rank; i++) {
            uint64_t count, displ;
            overlap(sh->raw_offset, sh->raw_offset + sh->raw_bytes, ld->saved[i]->offset,
                    ld->saved[i]->nbytes, &count, &displ);
            if (count)
                rc = ckpt_read_range(ld->ck, ld->saved[i]->offset + displ, count,
                                     (char *)ld->tensors[i].data + displ);
            if (rc != CKPT_OK)
                snprintf(err, cap, "reading shard %d of '%s': %s: %s", s, dir,
                         ckpt_strerror(rc), ckpt_last_error());
        }
    }
    watchdog_phase(WATCHDOG_LOAD_SYNC, 0); /* our shards are read: now the others' */
    if (comm_any_failed(comm, rc))
        return rc == CKPT_OK ? util_fail(err, cap, STATE_EFAIL,
                                         "another rank could not read its shards of '%s'",
                                         dir)
                             : STATE_EFAIL;
    for (int s = 0; s < nshards; s++) {
        const ckpt_shard_info_t *sh = ckpt_shard_at(ld->ck, s);
        for (size_t i = 0; i < ld->count; i++) {
            uint64_t count, displ;
            overlap(sh->raw_offset, sh->raw_offset + sh->raw_bytes, ld->saved[i]->offset,
                    ld->saved[i]->nbytes, &count, &displ);
            if (count && comm_bcast(comm, (char *)ld->tensors[i].data + displ, count,
                                    holder[s]) != COMM_OK)
                return util_fail(err, cap, STATE_EFAIL, "sending shard %d of '%s': %s", s,
                                 dir, comm_last_error());
        }
    }
    return STATE_OK;
}

/* Collective: whether every rank of comm runs on this rank's node, named
 * as world.c and the local tier name it (SLURMD_NODENAME when set, else
 * the host name).  The ranks compare a 62-bit FNV-1a hash of the name: the
 * MAX of the hash and the MAX of its negation meet only when all are
 * equal.  Two nodes whose names collide would each read the whole
 * checkpoint: more reading, the same bytes.  @return 1 or 0, the same on
 * every rank, or -1 when the reduction failed (comm_last_error() says
 * why). */
static int load_one_node(comm_t *comm)
{
    if (comm_size(comm) == 1)
        return 1;
    char host[STATE_HOST_MAX] = "";
    const char *node = getenv("SLURMD_NODENAME");
    if (node && *node)
        snprintf(host, sizeof host, "%s", node);
    else if (gethostname(host, sizeof host - 1) != 0)
        host[0] = '\0'; /* nameless nodes all look alike: see above */
    uint64_t hash = 0xcbf29ce484222325u;
    for (const unsigned char *p = (const unsigned char *)host; *p; p++)
        hash = (hash ^ *p) * 0x100000001b3u;
    int64_t both[2] = {(int64_t)(hash >> 2), -(int64_t)(hash >> 2)};
    if (comm_allreduce(comm, both, 2, COMM_I64, COMM_MAX) != COMM_OK)
        return -1;
    return both[0] == -both[1];
}

/* R2, collective: on one node, every rank reads the whole flat space
 * straight into its tensors; else this rank reads its 1/M of it and each
 * tensor's pieces are exchanged in place.  @return STATE_OK or STATE_EFAIL
 * (err set), the same on every rank. */
static int load_read(load_t *ld, comm_t *comm, const char *dir, char *err, size_t cap)
{
    int rank = comm_rank(comm), size = comm_size(comm);
    int whole = load_one_node(comm);
    if (whole < 0)
        return util_fail(err, cap, STATE_EFAIL, "loading '%s': comparing the ranks' nodes: %s",
                         dir, comm_last_error());
    uint64_t total = ckpt_total_bytes(ld->ck);
    uint64_t lo = total * (uint64_t)rank / (uint64_t)size,
             hi = total * (uint64_t)(rank + 1) / (uint64_t)size;
    /* Our 1/M first; on one node then the rest, from the end of ours to
     * the end and from the start to ours: ranks reading at once begin at
     * different places, so a cold page cache is filled from storage by all
     * of them together. */
    uint64_t begin[3] = {lo, hi, 0}, end[3] = {hi, whole ? total : hi, whole ? lo : 0};
    int rc = CKPT_OK;
    for (int part = 0; part < 3 && rc == CKPT_OK; part++) {
        for (size_t i = 0; i < ld->count && rc == CKPT_OK; i++) {
            uint64_t count, displ;
            overlap(begin[part], end[part], ld->saved[i]->offset, ld->saved[i]->nbytes, &count,
                    &displ);
            if (count)
                rc = ckpt_read_range(ld->ck, ld->saved[i]->offset + displ, count,
                                     (char *)ld->tensors[i].data + displ);
            if (rc != CKPT_OK)
                snprintf(err, cap, "reading checkpoint '%s': %s: %s", dir, ckpt_strerror(rc),
                         ckpt_last_error());
        }
    }
    watchdog_phase(WATCHDOG_LOAD_SYNC, 0); /* our part is read: now the others' */
    if (comm_any_failed(comm, rc))
        return rc == CKPT_OK ? util_fail(err, cap, STATE_EFAIL,
                                         "another rank could not read '%s'", dir)
                             : STATE_EFAIL;
    if (whole)
        return STATE_OK;
    uint64_t *counts = calloc((size_t)size, sizeof *counts);
    uint64_t *displs = calloc((size_t)size, sizeof *displs);
    if (comm_any_failed(comm, !counts || !displs)) {
        free(counts);
        free(displs);
        return util_fail(err, cap, STATE_EFAIL, "out of memory loading '%s' on some rank",
                         dir);
    }
    rc = STATE_OK;
    for (size_t i = 0; i < ld->count && rc == STATE_OK; i++) {
        for (int r = 0; r < size; r++)
            overlap(total * (uint64_t)r / (uint64_t)size,
                    total * (uint64_t)(r + 1) / (uint64_t)size, ld->saved[i]->offset,
                    ld->saved[i]->nbytes, &counts[r], &displs[r]);
        if (comm_allgatherv_inplace(comm, (void *)ld->tensors[i].data, counts, displs) !=
            COMM_OK)
            rc = util_fail(err, cap, STATE_EFAIL, "exchanging checkpoint ranges: %s",
                           comm_last_error());
    }
    free(counts);
    free(displs);
    return rc;
}

/* Adopt what was loaded: the position, the update count, the run time. */
static void load_apply(const load_t *ld, state_t *st, int rank, const char *dir)
{
    st->step = ld->step;
    st->epoch = ld->epoch;
    st->cursor = ld->cursor;
    optim_set_updates(st->optim, ld->updates);
    json_t *run_seconds = json_object_get(ld->rec, "run_seconds");
    st->run_seconds = json_is_number(run_seconds) ? json_number_value(run_seconds) : 0;
    /* Absent in records written before it: those resumes go on as they
     * did then, without evaluating first. */
    st->eval_pending = json_is_true(json_object_get(ld->rec, "eval_pending"));
    if (rank == 0)
        state_warn_schedule(st, ld->rec, ld->step);
    state_adopt_init(st, ld->rec, rank);
    snprintf(st->resumed_from, sizeof st->resumed_from, "%s", dir);
}

int state_load(state_t *st, comm_t *comm, const char *dir, int *saved_world,
               char *err, size_t cap)
{
    return state_load_planned(st, comm, dir, NULL, 0, saved_world, err, cap);
}

int state_load_planned(state_t *st, comm_t *comm, const char *dir, const int *holder,
                       int nholder, int *saved_world, char *err, size_t cap)
{
    load_t ld;
    memset(&ld, 0, sizeof ld);
    int rc = ckpt_open(dir, &ld.ck);
    if (rc != CKPT_OK)
        snprintf(err, cap, "cannot open checkpoint '%s': %s: %s", dir, ckpt_strerror(rc),
                 ckpt_last_error());
    if (comm_any_failed(comm, rc))
        return STATE_EFAIL;
    /* Decode with this rank's share of the node's cores, as saves encode. */
    ckpt_set_read_threads(ld.ck, state_ckpt_threads(st));
    rc = load_check(&ld, st, dir, err, cap);
    if (rc == STATE_OK && holder)
        rc = load_check_root(&ld, st, dir, err, cap);
    if (comm_any_failed(comm, rc != STATE_OK)) {
        if (rc == STATE_OK)
            snprintf(err, cap, "another rank could not load '%s'", dir);
        rc = rc == STATE_OK ? STATE_EFAIL : rc;
    } else if (!holder) {
        rc = load_read(&ld, comm, dir, err, cap);
    } else if (comm_any_failed(comm, nholder != ckpt_world_size(ld.ck))) {
        rc = util_fail(err, cap, STATE_EFAIL, "checkpoint '%s' has %d shards, the plan %d "
                       "(on some rank)", dir, ckpt_world_size(ld.ck), nholder);
    } else {
        rc = load_read_planned(&ld, comm, dir, holder, err, cap);
    }
    if (rc == STATE_OK) {
        load_apply(&ld, st, comm_rank(comm), dir);
        *saved_world = ckpt_world_size(ld.ck);
    }
    json_decref(ld.rec);
    ckpt_close(ld.ck);
    return rc;
}

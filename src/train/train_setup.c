/*
 * train_setup.c - the trainer's start and end: the run directory, this
 * rank's data, model, optimizer and buffers (and GPU mirror), the
 * description every checkpoint records, the resume, and the release.
 */
#include "train/train_internal.h"

#include <cblas.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ftrain/ckpt.h"
#include "ftrain/ckpt_local.h"
#include "util/util.h"

/* ---- the run directory --------------------------------------------------- */

/* Rank 0: create the run directory and its checkpoint root and open the
 * metrics file; err names the path that failed.  The root is checked now,
 * not at the first save: util_mkdir_p takes an existing name for success,
 * so a file in its place (or a root we cannot write) would otherwise only
 * show when the stop's save fails, after all the training. */
static int prepare_run_dir(trainer_t *t, char *err, size_t cap)
{
    const char *why = NULL;
    struct stat info;
    if (util_mkdir_p(t->ckpt.root) != 0)
        why = strerror(errno);
    else if (stat(t->ckpt.root, &info) != 0)
        why = strerror(errno);
    else if (!S_ISDIR(info.st_mode))
        why = "not a directory";
    else if (access(t->ckpt.root, W_OK | X_OK) != 0)
        why = strerror(errno);
    if (why) {
        snprintf(err, cap, "cannot use the checkpoint directory '%s': %s", t->ckpt.root, why);
        return TRAIN_EFAIL;
    }
    if (state_root_id(t->ckpt.root, t->state.root_id, err, cap) != STATE_OK)
        return TRAIN_EFAIL;
    if (metrics_open(&t->metrics, t->cfg->run_dir) != 0) {
        snprintf(err, cap, "cannot open the metrics file '%s/metrics.jsonl': %s",
                 t->cfg->run_dir, strerror(errno));
        return TRAIN_EFAIL;
    }
    return TRAIN_OK;
}

/* 1 when `from` is this run's own checkpoint of `step`: the very directory
 * root/step-<N>, however either path is spelled (relative, through a link,
 * with "..").  No run directory (root "") has no checkpoint of its own. */
static int is_own_checkpoint(const char *root, int64_t step, const char *from)
{
    char name[TRAIN_STEP_NAME_MAX], mine[TRAIN_CKPT_DIR_MAX];
    struct stat mine_info, from_info;
    if (!root[0])
        return 0;
    ckpt_step_dirname((uint64_t)step, name, sizeof name);
    snprintf(mine, sizeof mine, "%s/%s", root, name);
    return stat(mine, &mine_info) == 0 && stat(from, &from_info) == 0 &&
           mine_info.st_dev == from_info.st_dev && mine_info.st_ino == from_info.st_ino;
}

/* ---- this rank's data, model and buffers --------------------------------- */

/* R^2's divisor: the sum over a regression set of each target's squared
 * deviation from its output's mean (0 for classification).  In double and
 * in a fixed order, so that every rank has the same. */
static double sum_squared_deviations(const dataset_t *set)
{
    double total = 0;
    size_t n = (size_t)set->samples, out = (size_t)set->out_dim;
    for (size_t j = 0; !set->classification && n > 0 && j < out; j++) {
        double mean = 0;
        for (size_t i = 0; i < n; i++)
            mean += set->targets[i * out + j];
        mean /= (double)n;
        for (size_t i = 0; i < n; i++) {
            double dev = set->targets[i * out + j] - mean;
            total += dev * dev;
        }
    }
    return total;
}

/* The data set and its sampler; the run's length in steps. */
static int load_data(trainer_t *t, char *err, size_t cap)
{
    const config_t *cfg = t->cfg;
    char derr[TRAIN_ERR_MAX] = "";
    int rc = data_load(cfg->data, cfg->data_dir[0] ? cfg->data_dir : NULL, &t->data.train,
                       &t->data.test, derr, sizeof derr);
    if (comm_any_failed(t->comm, rc)) {
        snprintf(err, cap, "%s", derr[0] ? derr : "data loading failed on another rank");
        return TRAIN_EDATA;
    }
    t->data.test_sst = sum_squared_deviations(&t->data.test);
    /* The default global batch, lowered to fit a small set (sine's 100). */
    if (config_resolve_batch(&t->cfg_own, t->data.train.samples) && t->rank == 0 &&
        !cfg->quiet)
        printf("train: --global-batch %lld: the default %d is more than the %lld training "
               "samples; the largest multiple of --micro-batch %lld that fits\n",
               (long long)cfg->global_batch, CONFIG_BATCH_DEFAULT,
               (long long)t->data.train.samples, (long long)cfg->micro_batch);
    if (sampler_init(&t->data.sampler, t->data.train.samples, cfg->global_batch,
                     cfg->micro_batch, cfg->seed, err, cap) != SAMPLER_OK)
        return TRAIN_EFAIL;
    t->run.steps_per_epoch = sampler_steps_per_epoch(&t->data.sampler);
    t->run.total_steps = cfg->steps ? cfg->steps : cfg->epochs * t->run.steps_per_epoch;
    int64_t micros = (cfg->global_batch + cfg->micro_batch - 1) / cfg->micro_batch;
    t->run.max_rank_micros = (micros + t->size - 1) / t->size;
    return TRAIN_OK;
}

/* Samples of one forward pass: a micro-batch in deterministic mode, else
 * all of this rank's micro-batches of a step. */
static int max_batch(const trainer_t *t)
{
    return (int)(t->cfg->deterministic ? t->cfg->micro_batch
                                       : t->run.max_rank_micros * t->cfg->micro_batch);
}

/* The MLP the options and the data set describe, and its optimizer. */
static int build_model(trainer_t *t, char *err, size_t cap)
{
    const config_t *cfg = t->cfg;
    model_arch_t arch;
    memset(&arch, 0, sizeof arch);
    arch.nlayers = cfg->nhidden + 1;
    arch.dims[0] = t->data.train.in_dim;
    for (int i = 0; i < cfg->nhidden; i++)
        arch.dims[i + 1] = cfg->hidden[i];
    arch.dims[arch.nlayers] = t->data.train.out_dim;
    arch.act = cfg->act;
    arch.loss = t->data.train.classification ? LOSS_XENT : LOSS_MSE;
    if (model_init_with(&t->nn.model, &arch, cfg->init, cfg->seed, max_batch(t), err, cap) !=
        MODEL_OK)
        return TRAIN_EFAIL;
    t->nn.n_params = model_num_params(t->nn.model);
    optim_cfg_t oc = cfg->opt;
    oc.total_steps = t->run.total_steps;
    if (optim_init(&t->nn.opt, &oc, t->nn.n_params, err, cap) != OPTIM_OK)
        return TRAIN_EFAIL;
    return TRAIN_OK;
}

/* The device copy of the model and optimizer; batches are staged in its
 * pinned buffers. */
static int open_gpu_mirror(trainer_t *t, char *err, size_t cap)
{
    gpu_mirror_spec_t spec = {
        .ctx = t->dev.ctx,
        .model = t->nn.model,
        .opt = t->nn.opt,
        .opt_cfg = optim_config(t->nn.opt),
        .train = &t->data.train,
        .max_batch = max_batch(t),
        .micro_slots = t->cfg->deterministic ? t->run.max_rank_micros : 0,
        .rank = t->rank,
        .alone = t->size == 1,
        .report = t->rank == 0 && !t->cfg->quiet,
    };
    return gpu_mirror_open(&t->dev.mirror, &spec, &t->buf.batch_x, &t->buf.batch_labels,
                           &t->buf.batch_y, err, cap);
}

/* The step's buffers: gradients, the deterministic mode's per micro-batch
 * ones, and (on the CPU) the batch staging. */
static int alloc_buffers(trainer_t *t, char *err, size_t cap)
{
    size_t n = t->nn.n_params, batch = (size_t)max_batch(t);
    size_t micros = (size_t)t->run.max_rank_micros;
    int det = t->cfg->deterministic;
    t->buf.grad = calloc(n + 2, sizeof *t->buf.grad);
    if (det)
        t->buf.micro_loss = calloc(micros, sizeof *t->buf.micro_loss);
    if (!t->dev.ctx) {
        t->buf.batch_x = malloc(batch * (size_t)t->data.train.in_dim * sizeof *t->buf.batch_x);
        t->buf.batch_y = malloc(batch * (size_t)t->data.train.out_dim * sizeof *t->buf.batch_y);
        t->buf.batch_labels = malloc(batch * sizeof *t->buf.batch_labels);
        if (det) {
            t->buf.micro_grads = malloc(micros * n * sizeof *t->buf.micro_grads);
            t->buf.fixed_sum = malloc((n + 2) * sizeof *t->buf.fixed_sum);
        }
    }
    int cpu_missing = !t->dev.ctx && (!t->buf.batch_x || !t->buf.batch_y || !t->buf.batch_labels ||
                                      (det && (!t->buf.micro_grads || !t->buf.fixed_sum)));
    if (!t->buf.grad || (det && !t->buf.micro_loss) || cpu_missing) {
        snprintf(err, cap, "out of memory for %zu parameters", n);
        return TRAIN_EFAIL;
    }
    return TRAIN_OK;
}

/* Data, model, optimizer and buffers on this rank. */
static int build_trainer(trainer_t *t, char *err, size_t cap)
{
    int rc = load_data(t, err, cap);
    if (rc == TRAIN_OK)
        rc = build_model(t, err, cap);
    if (rc == TRAIN_OK)
        rc = alloc_buffers(t, err, cap);
    if (rc == TRAIN_OK && t->dev.ctx)
        rc = open_gpu_mirror(t, err, cap);
    return rc;
}

/* ---- set up and resume --------------------------------------------------- */

static void trainer_init(trainer_t *t, const config_t *cfg, const world_t *world, comm_t *comm,
                         gpu_ctx_t *gpu)
{
    memset(t, 0, sizeof *t);
    t->cfg_own = *cfg;
    t->cfg = &t->cfg_own;
    t->world = world;
    t->comm = comm;
    t->dev.ctx = gpu;
    t->rank = comm_rank(comm);
    t->size = comm_size(comm);
    t->metrics.fd = -1;
    t->trace_fd = -1;
    t->ckpt.last_saved = -1;
    t->run.evaluated_step = -1;
    t->run.last_loss = NAN;
    t->clock.started = util_mono_s();
}

/* Collective: rank 0 creates the run directory; everyone learns whether
 * that worked. */
static int open_run_dir(trainer_t *t, char *err, size_t cap)
{
    const config_t *cfg = t->cfg;
    if (!cfg->run_dir[0])
        return TRAIN_OK;
    snprintf(t->ckpt.root, sizeof t->ckpt.root, "%s/ckpt", cfg->run_dir);
    int rc = t->rank == 0 ? prepare_run_dir(t, err, cap) : TRAIN_OK;
    if (comm_any_failed(t->comm, rc)) {
        if (rc == TRAIN_OK)
            snprintf(err, cap, "rank 0 could not set up run directory '%s'", cfg->run_dir);
        return TRAIN_EFAIL;
    }
    /* Every rank's records carry the root's identity (state_root_id). */
    if (comm_bcast(t->comm, t->state.root_id, sizeof t->state.root_id, 0) != COMM_OK) {
        snprintf(err, cap, "run directory: broadcast failed: %s", comm_last_error());
        return TRAIN_EFAIL;
    }
    return TRAIN_OK;
}

/* Test aid (--trace-samples PATH): this rank's samples go to PATH.<rank>.
 * A trace asked for and not written would make its test pass on nothing. */
static int open_trace(trainer_t *t, char *err, size_t cap)
{
    if (!t->cfg->trace_samples[0])
        return TRAIN_OK;
    char path[CONFIG_PATH_MAX + sizeof ".-2147483648"];
    snprintf(path, sizeof path, "%s.%d", t->cfg->trace_samples, t->rank);
    t->trace_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (t->trace_fd < 0)
        return util_fail(err, cap, TRAIN_EFAIL, "cannot open the --trace-samples file "
                         "'%s': %s", path, strerror(errno));
    return TRAIN_OK;
}

/* What every checkpoint records besides the tensors and the position. */
static void describe_state(trainer_t *t)
{
    state_t *st = &t->state;
    st->model = t->nn.model;
    st->optim = t->nn.opt;
    st->cfg = t->cfg;
    st->steps_per_epoch = t->run.steps_per_epoch;
    st->n_train = t->data.train.samples;
    st->data_fp = data_fingerprint(&t->data.train);
    st->threads = t->blas_threads;
    st->ckpt_threads = world_default_threads(t->world);
    st->init = t->cfg->init; /* a resume replaces it with the checkpoint's */
}

/* Who moves the partner copies, and why not the helper thread where it
 * does not. */
static const char *exchange_by(const tier_t *tr)
{
    if (tier_exchange_on_thread(tr))
        return "by the helper thread";
    if (tr->exchange == CONFIG_EXCHANGE_STEPS)
        return "at step boundaries";
    if (tr->exchange == CONFIG_EXCHANGE_THREAD || !comm_threads_multiple())
        return "at step boundaries (MPI gave no MPI_THREAD_MULTIPLE)";
    return "at step boundaries (a rank has no core to spare for the helper thread: "
           "--ckpt-local-exchange thread moves them there anyway)";
}

/* Rank 0: where the node-local tier keeps what, or that it cannot survive
 * the loss of the only node. */
static void announce_tier(const trainer_t *t)
{
    const tier_t *tr = &t->local.tier;
    if (t->rank != 0 || t->cfg->quiet)
        return;
    const char *how = tier_in_place(tr) ? "; saved in place (memory file system)" : "";
    if (tr->nnodes < 2)
        printf("local tier: %s on one node (%s): no partner copies, so a local checkpoint "
               "does not survive the loss of this node; keeps %d%s\n", t->cfg->ckpt_local,
               tr->hosts[0], tr->keep, how);
    else
        printf("local tier: %s on %d nodes, each rank's shard copied to a rank of the next "
               "node (%s -> %s -> ...) %s; keeps %d per node%s\n", t->cfg->ckpt_local,
               tr->nnodes, tr->hosts[0], tr->hosts[1], exchange_by(tr), tr->keep, how);
    fflush(stdout);
}

int trainer_open(trainer_t *t, const config_t *cfg, const world_t *world, comm_t *comm,
                 gpu_ctx_t *gpu, char *err, size_t cap)
{
    trainer_init(t, cfg, world, comm, gpu);
    t->blas_threads = cfg->threads ? cfg->threads
                      : cfg->deterministic ? 1 : world_default_threads(t->world);
    openblas_set_num_threads(t->blas_threads);
    int rc = open_run_dir(t, err, cap);
    if (rc != TRAIN_OK)
        return rc;
    /* Set-up fails on one rank alone (memory, the device): every rank must
     * learn it here, before the first collective of the resume, or the
     * others would wait there for ever. */
    char trace_err[TRAIN_ERR_MAX] = "";
    int traced = open_trace(t, trace_err, sizeof trace_err);
    rc = build_trainer(t, err, cap); /* on every rank: it may take part in collectives */
    if (rc == TRAIN_OK && traced != TRAIN_OK) {
        rc = traced;
        snprintf(err, cap, "%s", trace_err);
    }
    if (comm_any_failed(t->comm, rc != TRAIN_OK)) {
        if (rc == TRAIN_OK || !err[0])
            snprintf(err, cap, "set-up failed on another rank");
        /* The data's own failure keeps its kind (the same on every rank:
         * load_data agreed on it). */
        return rc == TRAIN_EDATA ? TRAIN_EDATA : TRAIN_EFAIL;
    }
    describe_state(t);
    if (cfg->ckpt_local[0]) {
        /* A core the training does not fill, for the tier's helper. */
        int spare_core = t->dev.mirror != NULL || t->blas_threads < t->world->rank_cores;
        if (tier_open(&t->local.tier, cfg, t->comm, t->world->host, spare_core, err, cap) !=
            TIER_OK)
            return TRAIN_EFAIL;
        t->local.on = 1;
        announce_tier(t);
    }
    if (cfg->ckpt_async) {
        /* On a GPU the snapshot is page-locked: the device state is
         * downloaded straight into it at each save. */
        float *pinned = t->dev.mirror
                            ? gpu_mirror_snapshot_buffer(t->dev.mirror, state_floats(&t->state))
                            : NULL;
        return async_save_reserve(&t->async.save, &t->state, t->comm, pinned, err, cap);
    }
    return TRAIN_OK;
}

/* Rank 0: the resume line and event.  pick: a node-local checkpoint's
 * plan (which node read which shards), else NULL. */
static void report_resume(trainer_t *t, const char *from, const tier_pick_t *pick,
                          int saved_world, double seconds)
{
    const state_t *st = &t->state;
    char where[sizeof pick->where + 64] = "";
    if (pick)
        snprintf(where, sizeof where, "the node-local tier (%s) ", pick->where);
    printf("resume: from %s%s step %lld (epoch %lld, cursor %lld), world %d -> %d, loaded in "
           "%.3f s\n", where, pick ? util_base_name(from) : from, (long long)st->step,
           (long long)st->epoch, (long long)st->cursor, saved_world, t->size, seconds);
    char extra[STATE_PATH_MAX + REPORT_MAX];
    snprintf(extra, sizeof extra, "\"from_world\":%d,\"from\":\"%s\",\"tier\":\"%s\"",
             saved_world, util_base_name(from), pick ? "local" : "shared");
    metrics_event(&t->metrics, "resume", st->step, t->size, extra);
}

/* Collective: load the checkpoint `from` (a node-local one with its plan
 * when pick is not NULL) and continue at its step. */
static int load_checkpoint(trainer_t *t, const char *from, const tier_pick_t *pick, char *err,
                           size_t cap)
{
    double t0 = util_mono_s();
    int saved_world = 0;
    int rc = pick ? state_load_planned(&t->state, t->comm, pick->dir, pick->holder,
                                       pick->nshards, &saved_world, err, cap)
                  : state_load(&t->state, t->comm, from, &saved_world, err, cap);
    if (rc != STATE_OK)
        return rc == STATE_EMISMATCH ? TRAIN_EMISMATCH : TRAIN_EFAIL;
    rc = t->dev.mirror ? gpu_mirror_upload(t->dev.mirror, err, cap) : TRAIN_OK;
    if (comm_any_failed(t->comm, rc)) {
        if (!err[0])
            snprintf(err, cap, "another rank could not copy the restored state to its GPU");
        return TRAIN_EFAIL;
    }
    int64_t step = t->state.step;
    /* A checkpoint of this step exists in our root only when we resumed
     * from our own root (--resume DIR may name another, or ours by another
     * spelling).  Rank 0 looks and tells: the saves this decides are
     * collective. */
    int own = t->rank == 0 && is_own_checkpoint(t->ckpt.root, step, from);
    if (comm_bcast(t->comm, &own, sizeof own, 0) != COMM_OK) {
        snprintf(err, cap, "resume: broadcast failed: %s", comm_last_error());
        return TRAIN_EFAIL;
    }
    t->ckpt.last_saved = own ? step : -1;
    if (step / t->run.steps_per_epoch != t->state.epoch ||
        (step % t->run.steps_per_epoch) * t->cfg->global_batch != t->state.cursor) {
        snprintf(err, cap, "checkpoint '%s': position (epoch %lld, cursor %lld) does not match "
                 "step %lld", from, (long long)t->state.epoch, (long long)t->state.cursor,
                 (long long)step);
        return TRAIN_EFAIL;
    }
    t->run.step = step;
    t->run.resumed_step = step;
    t->stats.load_seconds = util_mono_s() - t0;
    if (t->rank == 0)
        report_resume(t, from, pick, saved_world, t->stats.load_seconds);
    return TRAIN_OK;
}

/* The state of step 0 again: a node-local load that failed part way may
 * have written some tensors, and a run that then starts fresh must start
 * from its true initial weights and zero moments. */
static int reset_to_initial(trainer_t *t, char *err, size_t cap)
{
    model_t *fresh = NULL;
    if (model_init_with(&fresh, model_arch(t->nn.model), t->cfg->init, t->cfg->seed, 1, err, cap) !=
        MODEL_OK)
        return TRAIN_EFAIL;
    float *arrays[STATE_ARRAYS];
    state_host_arrays(t->nn.model, t->nn.opt, arrays);
    size_t bytes = t->nn.n_params * sizeof(float);
    memcpy(arrays[STATE_PARAMS], model_params(fresh), bytes);
    model_free(fresh);
    for (int i = STATE_MOMENT1; i < STATE_ARRAYS; i++)
        if (arrays[i])
            memset(arrays[i], 0, bytes);
    optim_set_updates(t->nn.opt, 0);
    return TRAIN_OK;
}

/* Collective: a node-local checkpoint newer than the shared tier's `from`
 * ("" for none), if the nodes now running hold one between them; loaded
 * (*loaded set).  A step that cannot be read gives way to the next older
 * one (a damaged newest copy must not cost the good step before it).
 * *tried is set when a load was attempted and failed.  When there is none
 * or none could be read, *loaded stays 0 and the shared tier is used
 * (said why).  @return TRAIN_OK or TRAIN_EMISMATCH. */
static int resume_local(trainer_t *t, const char *from, int *loaded, int *tried, char *err,
                        size_t cap)
{
    uint64_t shared = 0;
    int64_t newer_than = -1, older_than = INT64_MAX;
    if (from[0] && ckpt_parse_dirname(util_base_name(from), 0, &shared))
        newer_than = (int64_t)shared;
    for (;;) {
        tier_pick_t pick;
        int rc = tier_pick(&t->local.tier, t->comm, newer_than, older_than, &pick, err, cap);
        if (rc != TIER_OK || pick.step < 0) {
            if (rc != TIER_OK && t->rank == 0)
                fprintf(stderr, "ftrain: resume: the node-local tier cannot be used (%s); using "
                        "the shared tier\n", err);
            err[0] = '\0';
            return TRAIN_OK;
        }
        rc = load_checkpoint(t, pick.dir, &pick, err, cap);
        if (rc == TRAIN_EFAIL && t->rank == 0)
            fprintf(stderr, "ftrain: resume: the node-local checkpoint of step %lld cannot be "
                    "used (%s); trying an older one\n", (long long)pick.step, err);
        older_than = pick.step;
        tier_pick_free(&t->local.tier, &pick);
        if (rc != TRAIN_EFAIL) {
            *loaded = rc == TRAIN_OK;
            return rc;
        }
        *tried = 1;
        err[0] = '\0';
    }
}

int trainer_resume(trainer_t *t, char *err, size_t cap)
{
    const config_t *cfg = t->cfg;
    if (!cfg->run_dir[0] && strcmp(cfg->resume, "none") == 0)
        return TRAIN_OK;
    char from[STATE_PATH_MAX] = "";
    int rc = state_resolve(cfg, t->comm, t->ckpt.root, from, sizeof from, err, cap);
    if (rc != STATE_OK && rc != STATE_FRESH)
        return TRAIN_EFAIL;
    if (rc == STATE_FRESH)
        from[0] = '\0';
    /* The fastest complete tier: a newer node-local checkpoint first, for
     * --resume auto only (a named checkpoint is what the user asked for). */
    rc = TRAIN_OK;
    int loaded = 0, tried = 0;
    if (t->local.on && strcmp(cfg->resume, "auto") == 0)
        rc = resume_local(t, from, &loaded, &tried, err, cap);
    if (rc == TRAIN_OK && !loaded && !from[0] && tried) {
        rc = reset_to_initial(t, err, cap);
        if (comm_any_failed(t->comm, rc != TRAIN_OK)) {
            if (rc == TRAIN_OK)
                snprintf(err, cap, "another rank could not reset its state for a fresh start");
            rc = TRAIN_EFAIL;
        }
    } else if (rc == TRAIN_OK && !loaded && from[0]) {
        rc = load_checkpoint(t, from, NULL, err, cap);
    }
    /* Local checkpoints newer than where training goes on are of another
     * history now: each node drops them, so that its saves of those steps
     * are not refused. */
    if (rc == TRAIN_OK && t->local.on && t->local.tier.leader) {
        int dropped = 0;
        if (ckpt_local_drop_after(t->local.tier.root, (uint64_t)t->run.step, &dropped) != CKPT_OK)
            fprintf(stderr, "ftrain: warning: local tier %s: cannot drop the checkpoints after "
                    "step %lld: %s\n", t->local.tier.root, (long long)t->run.step,
                    ckpt_last_error());
    }
    return rc;
}

void trainer_close(trainer_t *t)
{
    async_save_free(&t->async.save); /* a failure path: never commit, just stop the writer */
    if (t->local.on)
        tier_close(&t->local.tier);
    gpu_mirror_close(t->dev.mirror);   /* before the host arrays it page-locked go */
    data_free(&t->data.train);
    data_free(&t->data.test);
    sampler_free(&t->data.sampler);
    model_free(t->nn.model);
    optim_free(t->nn.opt);
    free(t->buf.grad);
    free(t->buf.micro_grads);
    free(t->buf.micro_loss);
    free(t->buf.fixed_sum);
    if (!t->dev.ctx) { /* on the GPU the staging buffers are the mirror's */
        free(t->buf.batch_x);
        free(t->buf.batch_y);
        free(t->buf.batch_labels);
    }
    metrics_close(&t->metrics);
    if (t->trace_fd >= 0)
        close(t->trace_fd);
}

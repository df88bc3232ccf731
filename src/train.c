/*
 * train.c - the training loop, read top to bottom.
 *
 *   setup:  data -> sampler -> model -> optimizer -> resume (state.c)
 *   step:   this rank's micro-batches -> forward/backward -> control
 *           reduction (stop votes, save-now vote, gradient max) -> gradient
 *           reduction -> optimizer update -> log -> maybe evaluate -> maybe
 *           save -> maybe stop
 *
 * Gradient reduction, two modes (docs/determinism.md):
 *   fast           each rank runs its micro-batches as one batch, and the
 *                  float gradients are summed with one allreduce.
 *   deterministic  each micro-batch's gradient is computed alone (same
 *                  shapes, one BLAS thread), scaled by a power of two chosen
 *                  from the global max |g| (from the control reduction) and
 *                  rounded to int64; int64 sums are exact and associative, so
 *                  the reduced gradient has the same bits for any world size.
 *
 * Every rank makes the same collectives in the same order; the decision to
 * stop or save comes out of a reduction, never from a local flag (stop.c).
 */
#include "ftrain/train.h"

#include <cblas.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "ftrain/ckpt.h"
#include "ftrain/data.h"
#include "ftrain/gpu.h"
#include "ftrain/metrics.h"
#include "ftrain/model.h"
#include "ftrain/optim.h"
#include "ftrain/sampler.h"
#include "ftrain/state.h"
#include "ftrain/stop.h"

/* The control vector reduced with MAX each step.  CTL_BAD: this rank's
 * loss was not finite or too large for the deterministic fixed-point sum
 * (1), or its device failed (2).  Nothing NaN enters the reduction: MPI's
 * MAX drops a NaN unless it sits on the last rank. */
enum { CTL_GMAX, CTL_STOP, CTL_SAVE, CTL_SIG_TIME, CTL_ASYNC_BUSY, CTL_BAD, CTL_N };

/* An asynchronous save (--ckpt-async): at most one in flight.  The
 * background thread only writes this rank's shard (local I/O); the commit,
 * a collective, runs on the main thread at the step boundary where the
 * control reduction shows every rank's writer is done. */
typedef struct {
    pthread_t th;
    int active;               /* a save is in flight (same on every rank) */
    atomic_int done;          /* this rank's writer finished */
    state_snapshot_t *snap;
    int64_t step;
    double t_begin, stall_s;  /* stall: snapshot copy + commit, main thread */
    double gpu_copy_s;        /* the device -> host part of the snapshot */
    const char *root;
    int rank, world;
} async_save_t;

typedef struct {
    const config_t *cfg;
    const world_t *w;
    comm_t *c;
    int rank, size;
    dataset_t train, test;
    sampler_t smp;
    model_t *model;
    optim_t *opt;
    size_t P;
    int64_t spe, total_steps, max_micro_local;
    float *grad;       /* P + 2 floats: gradient, loss sum, correct */
    float *mgrad;      /* deterministic: max_micro_local * P */
    double *mloss;     /* deterministic: per micro-batch loss sums */
    int64_t *acc;      /* deterministic: P + 2 */
    float *xb, *yb;    /* batch staging (pinned host memory on the GPU path) */
    int32_t *lb;
    /* The GPU path (NULL gpu on the CPU): device model, optimizer and
     * gradient buffers; the host model/optim above hold the initial values
     * and the checkpoint snapshots. */
    gpu_ctx_t *gpu;
    gpu_model_t *gm;
    gpu_optim_t *go;
    float *dgrad;      /* P */
    void *pinned[3];   /* host params, m, v page-locked for the state copy */
    int dev_data;      /* the training set is on the GPU: batches gathered there */
    float *dmgrad;     /* deterministic: max_micro_local slots of mslot floats */
    size_t mslot;      /* P rounded up to 64 floats (256 bytes) */
    int64_t *dacc;     /* deterministic: P */
    double dl_s;       /* device -> host copy time of the last snapshot */
    metrics_t met;
    int trace_fd;      /* --trace-samples, -1 when off */
    state_t st;
    char root[1200];
    int64_t last_saved;
    int64_t evaluated_step; /* the last epoch end whose evaluation ran, -1 */
    double last_save_time;
    double run_base;   /* training seconds of earlier processes (the record's) */
    double run_start;  /* when this process's training loop began; 0 before */
    double ctl_last;   /* when the last control reduction (stop check) ended */
    double ctl_gap_max; /* the longest time between two stop checks: a step,
                           with any evaluation or save in between */
    async_save_t async;
    float *snap_buf;   /* --ckpt-async: the snapshot copy, reused */
    size_t snap_floats;
    int async_failures, async_saves, async_skipped;
    double async_stall_s;
    double reduce_s, control_s;
    int64_t reduce_n;
    int dev_failed;    /* a device call failed on this rank: voted at the next
                          control reduction (CTL_BAD), never acted on alone */
} trainer_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

uint64_t train_param_hash(const float *p, size_t n)
{
    return (uint64_t)XXH64(p, n * sizeof *p, 0);
}

static int mkdir_p(const char *path)
{
    char tmp[1200];
    if (strlen(path) >= sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    snprintf(tmp, sizeof tmp, "%.1199s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(tmp, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* Rank 0: create the run directory and its checkpoint root and open the
 * metrics file; err names the path that failed.  The root is checked now,
 * not at the first save: mkdir_p takes an existing name for success, so a
 * file in its place (or a root we cannot write) would otherwise only show
 * when the stop's save fails, after all the training. */
static int run_dir_setup(trainer_t *t, char *err, size_t cap)
{
    const char *why = NULL;
    struct stat sb;
    if (mkdir_p(t->root) != 0)
        why = strerror(errno);
    else if (stat(t->root, &sb) != 0)
        why = strerror(errno);
    else if (!S_ISDIR(sb.st_mode))
        why = "not a directory";
    else if (access(t->root, W_OK | X_OK) != 0)
        why = strerror(errno);
    if (why) {
        snprintf(err, cap, "cannot use the checkpoint directory '%s': %s", t->root, why);
        return -1;
    }
    if (metrics_open(&t->met, t->cfg->run_dir) != 0) {
        snprintf(err, cap, "cannot open the metrics file '%s/metrics.jsonl': %s",
                 t->cfg->run_dir, strerror(errno));
        return -1;
    }
    return 0;
}

/* 1 when `from` is this run's own checkpoint of `step`: the very directory
 * root/step-<N>, however either path is spelled (relative, through a link,
 * with "..").  No run directory (root "") has no checkpoint of its own. */
static int own_checkpoint(const char *root, int64_t step, const char *from)
{
    char dn[64], mine[1300];
    struct stat a, b;
    if (!root[0])
        return 0;
    ckpt_step_dirname((uint64_t)step, dn, sizeof dn);
    snprintf(mine, sizeof mine, "%s/%s", root, dn);
    return stat(mine, &a) == 0 && stat(from, &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

/* Copy the samples idx[0..n) into the batch buffers. */
static void gather(trainer_t *t, const dataset_t *d, const int64_t *idx, int64_t n)
{
    size_t in = (size_t)d->in_dim, out = (size_t)d->out_dim;
    for (int64_t i = 0; i < n; i++) {
        int64_t s = idx ? idx[i] : i;
        memcpy(t->xb + (size_t)i * in, d->x + (size_t)s * in, in * sizeof(float));
        if (d->classification)
            t->lb[i] = d->labels[s];
        else
            memcpy(t->yb + (size_t)i * out, d->y + (size_t)s * out, out * sizeof(float));
    }
}

/* Test aid: log the samples this rank trains on at (epoch, step j). */
static void trace(trainer_t *t, int64_t epoch, int64_t j, const int64_t *idx, int64_t n)
{
    if (t->trace_fd < 0 || n <= 0)
        return;
    size_t cap = 64 + (size_t)n * 21, len = 0;
    char *buf = malloc(cap);
    if (!buf)
        return;
    len += (size_t)snprintf(buf, cap, "%lld %lld", (long long)epoch, (long long)j);
    for (int64_t i = 0; i < n; i++)
        len += (size_t)snprintf(buf + len, cap - len, " %lld", (long long)idx[i]);
    buf[len++] = '\n';
    ssize_t wr = write(t->trace_fd, buf, len);
    (void)wr;
    free(buf);
}

/* ---- setup ------------------------------------------------------------- */

/* The GPU half of the setup: the device model starts from the host model's
 * initial parameters; batches are gathered straight into its pinned staging
 * buffers. */
static int trainer_setup_gpu(trainer_t *t, int max_batch, char *err, size_t cap)
{
    optim_cfg_t oc = t->cfg->opt;
    oc.total_steps = t->total_steps;
    int rc = gpu_model_create(&t->gm, t->gpu, model_arch(t->model), max_batch,
                              model_params(t->model));
    if (rc == GPU_OK)
        rc = gpu_optim_create(&t->go, t->gpu, &oc, t->P);
    if (rc == GPU_OK)
        rc = gpu_model_batch_buffers(t->gm, &t->xb, &t->lb, &t->yb);
    if (rc == GPU_OK)
        rc = gpu_alloc(t->gpu, t->P * sizeof(float), (void **)&t->dgrad);
    if (rc == GPU_OK && t->cfg->deterministic) {
        /* Every micro-batch's gradient slot starts 256-byte aligned, as
         * cudaMalloc's memory does: which slot a micro-batch lands in
         * depends on the world size, and cuBLAS may pick another kernel
         * (another summation order) for another alignment of its output. */
        t->mslot = (t->P + 63) / 64 * 64;
        rc = gpu_alloc(t->gpu, (size_t)t->max_micro_local * t->mslot * sizeof(float),
                       (void **)&t->dmgrad);
        if (rc == GPU_OK)
            rc = gpu_alloc(t->gpu, t->P * sizeof(int64_t), (void **)&t->dacc);
        t->mloss = calloc((size_t)t->max_micro_local, sizeof *t->mloss);
        if (!t->mloss)
            rc = GPU_ENOMEM;
    }
    if (rc != GPU_OK) {
        snprintf(err, cap, "gpu: %s: %s", gpu_strerror(rc), gpu_last_error());
        return TRAIN_EFAIL;
    }
    /* The training set on the device when it fits: a step then sends only
     * its sample indices, not the samples (the host gather and copy of a
     * 4096-sample Fashion-MNIST batch cost more than its forward pass).
     * Otherwise batches go through the pinned staging buffers. */
    const dataset_t *d = &t->train;
    if (d->n > 0 && gpu_model_set_data(t->gm, d->x, d->classification ? d->labels : NULL,
                                       d->classification ? NULL : d->y, d->n) == GPU_OK)
        t->dev_data = 1;
    else if (t->rank == 0 && !t->cfg->quiet)
        printf("gpu: the training set stays on the host (%s); batches are copied each step\n",
               gpu_last_error());
    /* The host parameters and moments receive the device state at every
     * save (the training stall): page-locked, that copy runs at the pinned
     * rate, about 4x the pageable one for 1 GB on an H200.  Small states
     * gain nothing (and may share heap pages, which cannot be registered
     * twice); a failure only makes the copy slower. */
    void *host[3] = {model_params(t->model), optim_state_m(t->opt), optim_state_v(t->opt)};
    size_t bytes = t->P * sizeof(float);
    for (int i = 0; i < 3 && bytes >= ((size_t)4 << 20); i++) {
        if (!host[i])
            continue;
        if (gpu_host_register(t->gpu, host[i], bytes) == GPU_OK) {
            t->pinned[i] = host[i];
        } else {
            fprintf(stderr, "ftrain: rank %d: warning: cannot page-lock the host copy of the "
                    "state (%s); checkpoint copies from the GPU run slower\n", t->rank,
                    gpu_last_error());
            break;
        }
    }
    return TRAIN_DONE;
}

/* Copy the device parameters and optimizer state into the host model and
 * optimizer, which the checkpoint code reads.  This copy is the training
 * stall of a GPU checkpoint. */
static int gpu_to_host(trainer_t *t, char *err, size_t cap)
{
    if (!t->gpu)
        return 0;
    size_t bytes = t->P * sizeof(float);
    double s1 = 0, s2 = 0, s3 = 0;
    int rc = gpu_download(t->gpu, model_params(t->model), gpu_model_params(t->gm), bytes, &s1);
    if (rc == GPU_OK)
        rc = gpu_download(t->gpu, optim_state_m(t->opt), gpu_optim_state_m(t->go), bytes, &s2);
    if (rc == GPU_OK && optim_state_v(t->opt))
        rc = gpu_download(t->gpu, optim_state_v(t->opt), gpu_optim_state_v(t->go), bytes, &s3);
    optim_set_updates(t->opt, gpu_optim_updates(t->go));
    t->dl_s = s1 + s2 + s3;
    if (rc != GPU_OK) {
        snprintf(err, cap, "gpu: copying the state to the host: %s", gpu_last_error());
        return -1;
    }
    return 0;
}

/* After a resume: the host state goes back to the device. */
static int host_to_gpu(trainer_t *t, char *err, size_t cap)
{
    if (!t->gpu)
        return 0;
    size_t bytes = t->P * sizeof(float);
    int rc = gpu_upload(t->gpu, gpu_model_params(t->gm), model_params(t->model), bytes);
    if (rc == GPU_OK)
        rc = gpu_upload(t->gpu, gpu_optim_state_m(t->go), optim_state_m(t->opt), bytes);
    if (rc == GPU_OK && optim_state_v(t->opt))
        rc = gpu_upload(t->gpu, gpu_optim_state_v(t->go), optim_state_v(t->opt), bytes);
    gpu_optim_set_updates(t->go, optim_updates(t->opt));
    if (rc != GPU_OK) {
        snprintf(err, cap, "gpu: copying the restored state to the device: %s", gpu_last_error());
        return -1;
    }
    return 0;
}

static int trainer_setup(trainer_t *t, char *err, size_t cap)
{
    const config_t *cfg = t->cfg;
    char derr[512] = "";
    int rc = data_load(cfg->data, cfg->data_dir[0] ? cfg->data_dir : NULL, &t->train,
                       &t->test, derr, sizeof derr);
    if (comm_any_failed(t->c, rc)) {
        snprintf(err, cap, "%s", derr[0] ? derr : "data loading failed on another rank");
        return TRAIN_EFAIL;
    }
    if (sampler_init(&t->smp, t->train.n, cfg->global_batch, cfg->micro_batch, cfg->seed) != 0) {
        snprintf(err, cap, "sampler: bad sizes or no memory");
        return TRAIN_EFAIL;
    }
    t->spe = sampler_steps_per_epoch(&t->smp);
    t->total_steps = cfg->steps ? cfg->steps : cfg->epochs * t->spe;
    int64_t m_max = (cfg->global_batch + cfg->micro_batch - 1) / cfg->micro_batch;
    t->max_micro_local = (m_max + t->size - 1) / t->size;

    model_arch_t a;
    memset(&a, 0, sizeof a);
    a.nlayers = cfg->nhidden + 1;
    a.dims[0] = t->train.in_dim;
    for (int i = 0; i < cfg->nhidden; i++)
        a.dims[i + 1] = cfg->hidden[i];
    a.dims[a.nlayers] = t->train.out_dim;
    a.act = cfg->act;
    a.loss = t->train.classification ? LOSS_XENT : LOSS_MSE;
    int max_batch = (int)(cfg->deterministic ? cfg->micro_batch
                                             : t->max_micro_local * cfg->micro_batch);
    if (model_init(&t->model, &a, cfg->seed, max_batch) != MODEL_OK) {
        snprintf(err, cap, "model: cannot create %d-layer MLP", a.nlayers);
        return TRAIN_EFAIL;
    }
    t->P = model_num_params(t->model);
    optim_cfg_t oc = cfg->opt;
    oc.total_steps = t->total_steps;
    if (optim_init(&t->opt, &oc, t->P) != 0) {
        snprintf(err, cap, "optimizer: bad configuration");
        return TRAIN_EFAIL;
    }
    size_t in = (size_t)t->train.in_dim, out = (size_t)t->train.out_dim;
    t->grad = calloc(t->P + 2, sizeof *t->grad);
    if (!t->grad) {
        snprintf(err, cap, "out of memory for %zu parameters", t->P);
        return TRAIN_EFAIL;
    }
    if (t->gpu)
        return trainer_setup_gpu(t, max_batch, err, cap);
    t->xb = malloc((size_t)max_batch * in * sizeof *t->xb);
    t->yb = malloc((size_t)max_batch * out * sizeof *t->yb);
    t->lb = malloc((size_t)max_batch * sizeof *t->lb);
    if (cfg->deterministic) {
        t->mgrad = malloc((size_t)t->max_micro_local * t->P * sizeof *t->mgrad);
        t->mloss = calloc((size_t)t->max_micro_local, sizeof *t->mloss);
        t->acc = malloc((t->P + 2) * sizeof *t->acc);
    }
    if (!t->grad || !t->xb || !t->yb || !t->lb ||
        (cfg->deterministic && (!t->mgrad || !t->mloss || !t->acc))) {
        snprintf(err, cap, "out of memory for %zu parameters", t->P);
        return TRAIN_EFAIL;
    }
    return TRAIN_DONE;
}

/* ---- one step ------------------------------------------------------------ */

/* Forward/backward of this rank's share of step j; fills t->grad (fast mode)
 * or t->mgrad (deterministic).  Returns the local max |g| for the control
 * reduction and the local loss and hit counts. */
static void step_compute(trainer_t *t, int64_t j, int64_t nmicro_first, int64_t nmicro,
                         double *gmax, double *loss, int64_t *correct)
{
    const config_t *cfg = t->cfg;
    *gmax = 0;
    *loss = 0;
    *correct = 0;
    if (cfg->deterministic) {
        for (int64_t i = 0; i < nmicro; i++) {
            int64_t len = 0;
            const int64_t *idx = sampler_micro(&t->smp, j, nmicro_first + i, &len);
            if (!t->dev_data)
                gather(t, &t->train, idx, len);
            trace(t, t->smp.epoch, j, idx, len);
            double ls = 0;
            int64_t hit = 0;
            if (t->gpu) {
                float *dg = t->dmgrad + (size_t)i * t->mslot, m = 0;
                int rc = gpu_memset0(t->gpu, dg, t->P * sizeof(float));
                if (rc == GPU_OK)
                    rc = t->dev_data
                             ? gpu_model_forward_backward_idx(t->gm, idx, (int)len, dg, &ls, &hit)
                             : gpu_model_forward_backward(t->gm, t->xb, t->lb, t->yb, (int)len,
                                                          dg, &ls, &hit);
                if (rc == GPU_OK)
                    rc = gpu_maxabs(t->gpu, dg, t->P, &m);
                t->mloss[i] = ls;
                *loss += ls;
                *correct += hit;
                /* A device failure is voted (CTL_BAD): every rank stops with an error. */
                if (rc != GPU_OK)
                    t->dev_failed = 1;
                else if (m != m || m > *gmax)
                    *gmax = m;
                continue;
            }
            float *g = t->mgrad + (size_t)i * t->P;
            memset(g, 0, t->P * sizeof *g);
            model_forward_backward(t->model, t->xb, t->lb, t->yb, (int)len, g, &ls, &hit);
            t->mloss[i] = ls;
            *loss += ls;
            *correct += hit;
            float m = 0;
            for (size_t k = 0; k < t->P; k++) {
                float a = fabsf(g[k]);
                m = a > m || a != a ? a : m; /* NaN propagates */
            }
            if (m > *gmax || m != m)
                *gmax = m;
        }
        return;
    }
    memset(t->grad, 0, (t->P + 2) * sizeof *t->grad);
    if (t->gpu && gpu_memset0(t->gpu, t->dgrad, t->P * sizeof(float)) != GPU_OK)
        t->dev_failed = 1; /* voted: CTL_BAD */
    if (nmicro == 0)
        return;
    /* This rank's micro-batches are consecutive in the permutation. */
    int64_t len0 = 0, len = 0;
    const int64_t *idx = sampler_micro(&t->smp, j, nmicro_first, &len0);
    for (int64_t i = 0; i < nmicro; i++) {
        int64_t l = 0;
        sampler_micro(&t->smp, j, nmicro_first + i, &l);
        len += l;
    }
    if (!t->dev_data)
        gather(t, &t->train, idx, len);
    trace(t, t->smp.epoch, j, idx, len);
    if (t->gpu) {
        int rc = t->dev_data
                     ? gpu_model_forward_backward_idx(t->gm, idx, (int)len, t->dgrad, loss, correct)
                     : gpu_model_forward_backward(t->gm, t->xb, t->lb, t->yb, (int)len, t->dgrad,
                                                  loss, correct);
        if (rc != GPU_OK)
            t->dev_failed = 1; /* voted: CTL_BAD */
        return;
    }
    model_forward_backward(t->model, t->xb, t->lb, t->yb, (int)len, t->grad, loss, correct);
}

/* Micro-batches per step, rounded up to a power of two: 2^m. */
static int micro_bits(const trainer_t *t)
{
    int64_t micros = (t->cfg->global_batch + t->cfg->micro_batch - 1) / t->cfg->micro_batch;
    int m = 0;
    while ((INT64_C(1) << m) < micros)
        m++;
    return m;
}

/* 1 when this rank's loss cannot be reduced: not finite, or (deterministic
 * mode) a micro-batch loss so large that its 2^24 fixed-point form could
 * overflow the int64 sum over all micro-batches (|loss| >= 2^(38-m)); such
 * a loss only comes from a run that has diverged. */
static int step_loss_bad(const trainer_t *t, int64_t nmicro, double loss)
{
    if (!isfinite(loss))
        return 1;
    if (!t->cfg->deterministic)
        return 0;
    double lim = ldexp(1.0, 38 - micro_bits(t));
    for (int64_t i = 0; i < nmicro; i++)
        if (!(fabs(t->mloss[i]) < lim))
            return 1;
    return 0;
}

/* The deterministic reduction on the GPU: fixed point on the device, the
 * int64 sum through the device communicator (NCCL), loss and hits on the
 * host (MPI). */
static int step_reduce_gpu_det(trainer_t *t, int64_t nmicro, int e, int64_t nstep,
                               double *loss, int64_t *correct)
{
    int rc = gpu_memset0(t->gpu, t->dacc, t->P * sizeof(int64_t));
    int64_t v[2] = {0, *correct};
    for (int64_t i = 0; i < nmicro && rc == GPU_OK; i++) {
        rc = gpu_fixed_accumulate(t->gpu, t->dacc, t->dmgrad + (size_t)i * t->mslot, t->P, e);
        v[0] += llrint(ldexp(t->mloss[i], 24));
    }
    /* A device failure here is this rank's alone: it still takes part in
     * both reductions (the others are in them), and the failure is voted
     * at the next control reduction, where every rank stops together. */
    if (rc != GPU_OK)
        t->dev_failed = 1;
    if (comm_allreduce(t->c, t->dacc, t->P, COMM_I64, COMM_SUM) != COMM_OK ||
        comm_allreduce(t->c, v, 2, COMM_I64, COMM_SUM) != COMM_OK)
        return -1;
    if (!t->dev_failed &&
        gpu_fixed_to_float(t->gpu, t->dgrad, t->dacc, t->P, e, nstep) != GPU_OK)
        t->dev_failed = 1;
    *loss = ldexp((double)v[0], -24);
    *correct = v[1];
    return 0;
}

/* Sum the gradient over all ranks and average it over the step's samples.
 * On return t->grad holds the averaged gradient. */
static int step_reduce(trainer_t *t, int64_t nmicro, double gmax, int64_t nstep,
                       double *loss, int64_t *correct)
{
    double t0 = now_s();
    if (t->cfg->deterministic) {
        /* Pick e so that the sum of all micro-batches fits in 62 bits:
         * |g| < 2^k, micro-batches < 2^m  =>  |sum * 2^e| < 2^(k+m+e) <= 2^62. */
        int k = 0, m = micro_bits(t);
        if (gmax > 0)
            frexp(gmax, &k);
        int e = gmax > 0 ? 62 - k - m : 0;
        if (e > 1000)
            e = 1000;
        if (t->gpu)
            return step_reduce_gpu_det(t, nmicro, e, nstep, loss, correct);
        double scale = ldexp(1.0, e);
        memset(t->acc, 0, (t->P + 2) * sizeof *t->acc);
        int64_t lsum = 0;
        for (int64_t i = 0; i < nmicro; i++) {
            const float *g = t->mgrad + (size_t)i * t->P;
            for (size_t q = 0; q < t->P; q++)
                t->acc[q] += llrint((double)g[q] * scale);
            lsum += llrint(ldexp(t->mloss[i], 24));
        }
        t->acc[t->P] = lsum;
        t->acc[t->P + 1] = *correct;
        if (comm_allreduce(t->c, t->acc, t->P + 2, COMM_I64, COMM_SUM) != COMM_OK)
            return -1;
        double inv = ldexp(1.0, -e) / (double)nstep;
        for (size_t q = 0; q < t->P; q++)
            t->grad[q] = (float)((double)t->acc[q] * inv);
        *loss = ldexp((double)t->acc[t->P], -24);
        *correct = t->acc[t->P + 1];
    } else if (t->gpu) {
        double v[2] = {*loss, (double)*correct};
        if (comm_allreduce(t->c, t->dgrad, t->P, COMM_F32, COMM_SUM) != COMM_OK ||
            comm_allreduce(t->c, v, 2, COMM_F64, COMM_SUM) != COMM_OK)
            return -1;
        *loss = v[0];
        *correct = (int64_t)llrint(v[1]);
        if (gpu_scale(t->gpu, t->dgrad, t->P, 1.0f / (float)nstep) != GPU_OK)
            t->dev_failed = 1; /* voted at the next control reduction */
    } else {
        t->grad[t->P] = (float)*loss;
        t->grad[t->P + 1] = (float)*correct;
        if (comm_allreduce(t->c, t->grad, t->P + 2, COMM_F32, COMM_SUM) != COMM_OK)
            return -1;
        *loss = t->grad[t->P];
        *correct = (int64_t)llrintf(t->grad[t->P + 1]);
        float inv = 1.0f / (float)nstep;
        for (size_t q = 0; q < t->P; q++)
            t->grad[q] *= inv;
    }
    t->reduce_s += now_s() - t0;
    t->reduce_n++;
    return 0;
}

/* ---- evaluation ---------------------------------------------------------- */

/* Evaluate on the test set, chunks dealt to ranks.  Returns 1 if a stop
 * signal cut it short (on every rank), 0 when done, -1 on failure. */
static int evaluate(trainer_t *t, double *loss, double *acc, char *err, size_t cap)
{
    int64_t C = t->cfg->deterministic ? t->cfg->micro_batch
                                      : t->max_micro_local * t->cfg->micro_batch;
    int64_t N = t->test.n, K = (N + C - 1) / C;
    int64_t a = K * t->rank / t->size, b = K * (t->rank + 1) / t->size;
    /* loss (fixed point), hits, samples, ranks cut short by a stop signal,
     * ranks whose device failed, ranks with a loss out of range: summed, so
     * the last three count ranks (two ranks stopping are 2 stops, never a
     * device failure). */
    int64_t v[6] = {0, 0, 0, 0, 0, 0};
    /* A chunk loss below 2^(38-kb), with K <= 2^kb chunks, keeps the sum of
     * all chunks in 2^24 fixed point below 2^62.  Only a diverged model
     * goes past it; its loss is reported as infinite, not as garbage. */
    int kb = 0;
    while ((INT64_C(1) << kb) < K)
        kb++;
    double lim = ldexp(1.0, 38 - kb);
    for (int64_t k = a; k < b; k++) {
        if (stop_local_signal()) {
            v[3] = 1;
            break;
        }
        int64_t s = k * C, n = N - s < C ? N - s : C;
        /* The test set is used in order: point the batch at the slice. */
        const float *x = t->test.x + (size_t)s * (size_t)t->test.in_dim;
        const int32_t *lb = t->test.classification ? t->test.labels + s : NULL;
        const float *y = t->test.classification ? NULL : t->test.y + (size_t)s * (size_t)t->test.out_dim;
        double ls = 0;
        int64_t hit = 0;
        if (t->gpu) {
            if (gpu_model_evaluate(t->gm, x, lb, y, (int)n, &ls, &hit) != GPU_OK) {
                v[4] = 1; /* a device failure: reported below on every rank */
                break;
            }
        } else {
            model_evaluate(t->model, x, lb, y, (int)n, &ls, &hit);
        }
        if (!(fabs(ls) < lim))
            v[5] = 1;
        else
            v[0] += llrint(ldexp(ls, 24));
        v[1] += hit;
        v[2] += n;
    }
    if (comm_allreduce(t->c, v, 6, COMM_I64, COMM_SUM) != COMM_OK) {
        snprintf(err, cap, "evaluation reduction failed: %s", comm_last_error());
        return -1;
    }
    if (v[4]) {
        const char *why = gpu_last_error();
        snprintf(err, cap, "gpu evaluation failed on %lld rank(s)%s%s", (long long)v[4],
                 why && why[0] ? ": " : "", why ? why : "");
        return -1;
    }
    if (v[3])
        return 1;
    *loss = v[5] ? INFINITY : v[2] ? ldexp((double)v[0], -24) / (double)v[2] : 0;
    *acc = v[2] ? (double)v[1] / (double)v[2] : 0;
    return 0;
}

/* Collective, once a stop is agreed: which rank saw a signal first (the
 * lowest such rank on a tie) and which signal it was.  neg_first is the
 * agreed -(earliest signal time); the rank whose own time gives it exactly
 * is the first.  (A MAX of rank numbers would name the highest rank that
 * had a signal, and of signal numbers the largest.) */
static int first_stop(trainer_t *t, double neg_first, int *signo, int *rank, char *err,
                      size_t cap)
{
    int sig = stop_local_signal();
    int mine = sig && -stop_local_time() == neg_first;
    double v[2] = {mine ? -(double)t->rank : -1e300, mine ? (double)sig : 0};
    if (comm_allreduce(t->c, v, 2, COMM_F64, COMM_MAX) != COMM_OK) {
        snprintf(err, cap, "control reduction failed: %s", comm_last_error());
        return -1;
    }
    *rank = v[0] > -1e300 ? (int)-v[0] : 0;
    *signo = (int)v[1];
    return 0;
}

/* ---- saving -------------------------------------------------------------- */

/* Collective: bring the state of `step` to the host (from the GPU when there
 * is one) and set the position the checkpoint records.  Returns 0 or -1. */
static int state_at(trainer_t *t, int64_t step, char *err, size_t cap)
{
    err[0] = '\0';
    int local = 0;
    if (t->dev_failed) {
        snprintf(err, cap, "gpu: a device call failed: %s", gpu_last_error());
        local = -1;
    } else {
        local = gpu_to_host(t, err, cap);
    }
    if (comm_any_failed(t->c, local)) {
        if (!err[0])
            snprintf(err, cap, "another rank could not copy its state from the GPU");
        return -1;
    }
    t->st.step = step;
    t->st.epoch = step / t->spe;
    t->st.cursor = (step % t->spe) * t->cfg->global_batch;
    /* A stop at an epoch end saves before that epoch's evaluation; the
     * record says so, and the resumed run evaluates first. */
    t->st.eval_pending = step > 0 && step % t->spe == 0 && t->evaluated_step != step;
    t->st.run_seconds = t->run_base + (t->run_start > 0 ? now_s() - t->run_start : 0);
    return 0;
}

/* After a commit: remember it, prune old checkpoints, report (rank 0). */
static void committed(trainer_t *t, int64_t step, const char *dir, train_result_t *res,
                      const char *how, const char *extra_json)
{
    if (step > t->last_saved)
        t->last_saved = step;
    t->last_save_time = now_s();
    snprintf(res->ckpt, sizeof res->ckpt, "%s", dir);
    if (t->rank != 0)
        return;
    int removed = 0;
    ckpt_prune(t->root, t->cfg->ckpt_keep, t->st.resumed_from[0] ? t->st.resumed_from : NULL,
               &removed);
    if (!t->cfg->quiet)
        printf("checkpoint: %s committed %s%s\n", dir, how, removed ? " (older ones pruned)" : "");
    metrics_event(&t->met, "checkpoint", step, t->size, extra_json);
    fflush(stdout);
}

static int save(trainer_t *t, int64_t step, train_result_t *res, char *err, size_t cap)
{
    double t0 = now_s();
    char dir[1024], how[96], extra[160];
    if (state_at(t, step, err, cap) != 0 ||
        state_save(&t->st, t->c, t->root, t->cfg->ckpt_level, dir, sizeof dir, err, cap) !=
            STATE_OK)
        return -1;
    double dt = now_s() - t0;
    if (t->gpu) {
        snprintf(how, sizeof how, "in %.3f s (GPU copy %.1f ms)", dt, 1e3 * t->dl_s);
        snprintf(extra, sizeof extra, "\"seconds\":%.4f,\"gpu_copy_ms\":%.3f", dt, 1e3 * t->dl_s);
    } else {
        snprintf(how, sizeof how, "in %.3f s", dt);
        snprintf(extra, sizeof extra, "\"seconds\":%.4f", dt);
    }
    committed(t, step, dir, res, how, extra);
    return 0;
}

static void *async_main(void *arg)
{
    async_save_t *a = arg;
    state_snapshot_write(a->snap, a->root, a->rank, a->world);
    atomic_store(&a->done, 1);
    return NULL;
}

/* Collective: snapshot the state at `step` and start writing it in the
 * background.  Returns 0, or -1 when any rank could not start (nothing is in
 * flight then). */
static int async_start(trainer_t *t, int64_t step, char *err, size_t cap)
{
    async_save_t *a = &t->async;
    double t0 = now_s();
    if (state_at(t, step, err, cap) != 0)
        return -1;
    if (!t->snap_buf) { /* once per run: later saves reuse the pages */
        t->snap_floats = state_floats(&t->st);
        t->snap_buf = malloc(t->snap_floats * sizeof(float) + 1);
    }
    int rc = t->snap_buf ? state_snapshot_take(&t->st, t->size, t->snap_buf, t->snap_floats,
                                               t->cfg->ckpt_level, &a->snap, err, cap)
                         : (snprintf(err, cap, "out of memory for the snapshot"), STATE_EFAIL);
    a->root = t->root;
    a->rank = t->rank;
    a->world = t->size;
    a->step = step;
    atomic_store(&a->done, 0);
    if (rc == STATE_OK && pthread_create(&a->th, NULL, async_main, a) != 0) {
        snprintf(err, cap, "cannot start the checkpoint writer thread");
        rc = STATE_EFAIL;
    }
    if (comm_any_failed(t->c, rc)) {
        if (rc == STATE_OK) { /* we started, another rank did not */
            pthread_join(a->th, NULL);
            snprintf(err, cap, "another rank could not start its checkpoint writer");
        }
        state_snapshot_free(a->snap);
        a->snap = NULL;
        return -1;
    }
    a->active = 1;
    a->t_begin = t0;
    a->stall_s = now_s() - t0;
    a->gpu_copy_s = t->gpu ? t->dl_s : -1;
    return 0;
}

/* Collective: wait for the writer and commit.  A failed commit is reported
 * and counted (it changes the exit code) but training goes on: the previous
 * checkpoint is still good. */
static void async_finish(trainer_t *t, train_result_t *res)
{
    async_save_t *a = &t->async;
    if (!a->active)
        return;
    double t0 = now_s();
    pthread_join(a->th, NULL);
    char dir[1024], err[1024] = "";
    int rc = state_snapshot_commit(a->snap, t->c, t->root, dir, sizeof dir, err, sizeof err);
    double stall = a->stall_s + (now_s() - t0);
    a->active = 0;
    state_snapshot_free(a->snap);
    a->snap = NULL;
    t->async_saves++;
    t->async_stall_s += stall;
    if (rc != STATE_OK) {
        t->async_failures++;
        if (t->rank == 0)
            fprintf(stderr, "ftrain: asynchronous checkpoint of step %lld failed: %s\n",
                    (long long)a->step, err);
        return;
    }
    char how[192], copy[48] = "", extra[192], copy_json[40] = "";
    if (a->gpu_copy_s >= 0) {
        snprintf(copy, sizeof copy, " (GPU copy %.1f)", 1e3 * a->gpu_copy_s);
        snprintf(copy_json, sizeof copy_json, ",\"gpu_copy_ms\":%.3f", 1e3 * a->gpu_copy_s);
    }
    snprintf(how, sizeof how, "(async: %.3f s in the background, training stall %.1f ms: "
             "snapshot %.1f%s, commit %.1f)", now_s() - a->t_begin, 1e3 * stall,
             1e3 * a->stall_s, copy, 1e3 * (stall - a->stall_s));
    snprintf(extra, sizeof extra, "\"seconds\":%.4f,\"async\":true,\"stall_ms\":%.3f%s",
             now_s() - a->t_begin, 1e3 * stall, copy_json);
    committed(t, a->step, dir, res, how, extra);
}

/* After an agreed stop at `step`: finish an in-flight save, save this step
 * (none if it is already committed), report the stop's timing.  Collective.
 * Returns 0, or -1 when the save failed (err set). */
static int stop_and_save(trainer_t *t, int64_t step, int signo, int first_rank,
                         double t_sig, double t_agreed, train_result_t *res, char *err,
                         size_t cap)
{
    const config_t *cfg = t->cfg;
    res->stop_signal = signo;
    if (t_sig < 0 || t_sig > t_agreed)
        t_sig = t_agreed;
    res->stop_time = t_sig;
    double c1 = wall_s();
    async_finish(t, res); /* wait for an in-flight save, commit it */
    if (cfg->run_dir[0] && t->last_saved != step) {
        if (save(t, step, res, err, cap) != 0)
            return -1;
    } else if (t->last_saved == step) {
        char dn[64];
        ckpt_step_dirname((uint64_t)step, dn, sizeof dn);
        snprintf(res->ckpt, sizeof res->ckpt, "%.950s/%.63s", t->root, dn);
    }
    res->saved = t->last_saved == step;
    double t_end = wall_s();
    if (t->rank == 0) {
        double total = t_end - t_sig;
        printf("stop: signal %s (first seen by rank %d) at step %lld: agreed %.3f s after "
               "the signal, checkpoint %.3f s, total %.3f s; longest step %.3f s%s\n",
               config_signal_name(signo), first_rank, (long long)step, t_agreed - t_sig,
               t_end - c1, total, t->ctl_gap_max,
               res->saved ? "" : " (no run directory: nothing saved)");
        if (total > cfg->grace)
            fprintf(stderr, "ftrain: warning: the stop took %.1f s, more than --grace %.1f s: "
                    "raise the signal lead time (see docs/slurm.md)\n", total, cfg->grace);
        char extra[160];
        snprintf(extra, sizeof extra,
                 "\"signal\":\"%s\",\"seconds\":%.4f,\"longest_step_seconds\":%.4f",
                 config_signal_name(signo), total, t->ctl_gap_max);
        metrics_event(&t->met, "stop", step, t->size, extra);
        fflush(stdout);
    }
    return 0;
}

/* Collective: the evaluation at the end of the epoch that `step` completes,
 * reported (rank 0) and remembered.  It reads the weights only: no
 * parameter or random stream changes.  Returns evaluate()'s 1 (cut short by
 * a stop signal), 0 or -1. */
static int epoch_eval(trainer_t *t, int64_t step, train_result_t *res, char *err, size_t cap)
{
    double tl = 0, ta = 0;
    int e = evaluate(t, &tl, &ta, err, cap);
    if (e == 1 && t->rank == 0 && !t->cfg->quiet)
        printf("eval: epoch %lld cut short by a stop signal\n", (long long)(step / t->spe));
    if (e != 0)
        return e;
    res->test_loss = tl;
    res->test_acc = ta;
    res->evaluated = 1;
    t->evaluated_step = step;
    if (t->rank == 0) {
        if (!t->cfg->quiet)
            printf("eval: epoch %lld test_loss %.4f test_acc %.4f\n",
                   (long long)(step / t->spe), tl, ta);
        char extra[128];
        snprintf(extra, sizeof extra, "\"test_loss\":%.6g,\"test_acc\":%.6g", tl, ta);
        metrics_event(&t->met, "eval", step, t->size, extra);
        fflush(stdout);
    }
    return 0;
}

/* Collective, after an evaluation outside the loop's steps was cut short by
 * a stop signal: agree on the first signal (there is no control reduction
 * to carry it) and stop at `step`, saving it unless it is saved.  Returns 0
 * or -1 (err set). */
static int stop_after_eval(trainer_t *t, int64_t step, train_result_t *res, char *err,
                           size_t cap)
{
    int sig = stop_local_signal(), first_sig = 0, first_rank = 0;
    double when = sig ? -stop_local_time() : -1e300;
    if (comm_allreduce(t->c, &when, 1, COMM_F64, COMM_MAX) != COMM_OK) {
        snprintf(err, cap, "control reduction failed: %s", comm_last_error());
        return -1;
    }
    if (first_stop(t, when, &first_sig, &first_rank, err, cap) != 0)
        return -1;
    return stop_and_save(t, step, first_sig, first_rank, -when, wall_s(), res, err, cap);
}

/* ---- the loop ------------------------------------------------------------ */

static void fmt_eta(double s, char *buf, size_t cap)
{
    if (s < 0 || !isfinite(s))
        s = 0;
    long v = (long)s;
    if (v >= 3600)
        snprintf(buf, cap, "%ldh%02ldm", v / 3600, v / 60 % 60);
    else
        snprintf(buf, cap, "%ldm%02lds", v / 60, v % 60);
}

static void trainer_free(trainer_t *t)
{
    if (t->async.active) { /* a failure path: never commit, just stop the writer */
        pthread_join(t->async.th, NULL);
        state_snapshot_free(t->async.snap);
        t->async.active = 0;
    }
    data_free(&t->train);
    data_free(&t->test);
    sampler_free(&t->smp);
    for (int i = 0; i < 3; i++)
        gpu_host_unregister(t->gpu, t->pinned[i]);
    model_free(t->model);
    optim_free(t->opt);
    if (t->gpu) { /* the staging buffers belong to the device model */
        t->xb = t->yb = NULL;
        t->lb = NULL;
        gpu_dfree(t->gpu, t->dgrad);
        gpu_dfree(t->gpu, t->dmgrad);
        gpu_dfree(t->gpu, t->dacc);
        gpu_optim_free(t->go);
        gpu_model_free(t->gm);
    }
    free(t->snap_buf);
    free(t->grad);
    free(t->mgrad);
    free(t->mloss);
    free(t->acc);
    free(t->xb);
    free(t->yb);
    free(t->lb);
    metrics_close(&t->met);
    if (t->trace_fd >= 0)
        close(t->trace_fd);
}

int train_run(const config_t *cfg, const world_t *w, comm_t *c, gpu_ctx_t *gpu,
              train_result_t *res, char *err, size_t cap)
{
    trainer_t T, *t = &T;
    memset(t, 0, sizeof *t);
    memset(res, 0, sizeof *res);
    t->met.fd = -1;
    t->trace_fd = -1;
    t->gpu = gpu;
    t->cfg = cfg;
    t->w = w;
    t->c = c;
    t->rank = comm_rank(c);
    t->size = comm_size(c);
    t->last_saved = -1;
    t->evaluated_step = -1;
    int ret = TRAIN_EFAIL;
    double t_start = now_s();

    int threads = cfg->threads ? cfg->threads : cfg->deterministic ? 1 : world_default_threads(w);
    openblas_set_num_threads(threads);

    /* Run directory: rank 0 creates it; everyone learns whether that worked. */
    int rc = 0;
    if (cfg->run_dir[0]) {
        snprintf(t->root, sizeof t->root, "%s/ckpt", cfg->run_dir);
        if (t->rank == 0)
            rc = run_dir_setup(t, err, cap);
        if (comm_any_failed(c, rc)) {
            if (!rc)
                snprintf(err, cap, "rank 0 could not set up run directory '%s'", cfg->run_dir);
            goto out;
        }
    }
    if (cfg->trace_samples[0]) {
        char tp[CONFIG_PATH_MAX + 16];
        snprintf(tp, sizeof tp, "%s.%d", cfg->trace_samples, t->rank);
        t->trace_fd = open(tp, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    }
    /* Set-up fails on one rank alone (memory, the device): every rank must
     * learn it here, before the first collective of the resume, or the
     * others would wait there for ever. */
    ret = trainer_setup(t, err, cap);
    if (comm_any_failed(c, ret != TRAIN_DONE)) {
        if (ret == TRAIN_DONE || !err[0])
            snprintf(err, cap, "set-up failed on another rank");
        ret = TRAIN_EFAIL;
        goto out;
    }
    ret = TRAIN_EFAIL;

    t->st.model = t->model;
    t->st.optim = t->opt;
    t->st.cfg = cfg;
    t->st.steps_per_epoch = t->spe;
    t->st.n_train = t->train.n;
    t->st.data_fp = data_fingerprint(&t->train);
    t->st.threads = threads;
    t->st.ckpt_threads = world_default_threads(w);

    /* --ckpt-async: the snapshot buffer is allocated and touched now, so no
     * save pays for faulting its pages in during training. */
    if (cfg->ckpt_async) {
        t->snap_floats = state_floats(&t->st);
        t->snap_buf = malloc(t->snap_floats * sizeof(float) + 1);
        if (t->snap_buf)
            memset(t->snap_buf, 0, t->snap_floats * sizeof(float));
        if (comm_any_failed(c, !t->snap_buf)) {
            snprintf(err, cap, "out of memory for the --ckpt-async snapshot (%zu bytes)",
                     t->snap_floats * sizeof(float));
            goto out;
        }
    }

    /* Resume. */
    int64_t step = 0;
    char from[STATE_PATH_MAX] = "";
    if (cfg->run_dir[0] || strcmp(cfg->resume, "none") != 0) {
        rc = state_resolve(cfg, c, t->root, from, sizeof from, err, cap);
        if (rc == STATE_EFAIL)
            goto out;
        if (rc == STATE_OK) {
            double t0 = now_s();
            int saved_world = 0;
            rc = state_load(&t->st, c, from, &saved_world, err, cap);
            if (rc != STATE_OK) {
                ret = rc == STATE_EMISMATCH ? TRAIN_EMISMATCH : TRAIN_EFAIL;
                goto out;
            }
            if (comm_any_failed(c, host_to_gpu(t, err, cap))) {
                if (!err[0])
                    snprintf(err, cap, "another rank could not copy the restored state to its GPU");
                goto out;
            }
            step = t->st.step;
            /* A checkpoint of this step exists in our root only when we
             * resumed from our own root (--resume DIR may name another, or
             * ours by another spelling).  Rank 0 looks and tells: the
             * saves this decides are collective. */
            int own = t->rank == 0 && own_checkpoint(t->root, step, from);
            if (comm_bcast(c, &own, sizeof own, 0) != COMM_OK) {
                snprintf(err, cap, "resume: broadcast failed: %s", comm_last_error());
                goto out;
            }
            t->last_saved = own ? step : -1;
            if (step / t->spe != t->st.epoch || (step % t->spe) * cfg->global_batch != t->st.cursor) {
                snprintf(err, cap, "checkpoint '%s': position (epoch %lld, cursor %lld) does not match step %lld",
                         from, (long long)t->st.epoch, (long long)t->st.cursor, (long long)step);
                goto out;
            }
            if (t->rank == 0) {
                printf("resume: from %s step %lld (epoch %lld, cursor %lld), world %d -> %d, loaded in %.3f s\n",
                       from, (long long)step, (long long)t->st.epoch, (long long)t->st.cursor,
                       saved_world, t->size, now_s() - t0);
                char extra[1400];
                snprintf(extra, sizeof extra, "\"from_world\":%d,\"from\":\"%s\"", saved_world,
                         strrchr(from, '/') ? strrchr(from, '/') + 1 : from);
                metrics_event(&t->met, "resume", step, t->size, extra);
            }
        }
    }
    if (t->rank == 0) {
        char arch[256];
        model_arch_string(model_arch(t->model), arch, sizeof arch);
        if (!cfg->quiet)
            printf("train: %s, %zu parameters, data %s (%d train / %d test), global batch %lld "
                   "(%lld x %lld), %lld steps (%lld per epoch), %s, %d BLAS thread%s per rank\n",
                   arch, t->P, cfg->data, t->train.n, t->test.n, (long long)cfg->global_batch,
                   (long long)(cfg->global_batch / cfg->micro_batch), (long long)cfg->micro_batch,
                   (long long)t->total_steps, (long long)t->spe,
                   cfg->deterministic ? "deterministic" : "fast reduction", threads,
                   threads == 1 ? "" : "s");
        metrics_event(&t->met, "start", step, t->size, "");
        fflush(stdout);
    }

    int64_t log_every = cfg->log_every ? cfg->log_every : (t->spe >= 10 ? t->spe / 10 : 1);
    int64_t epochs_total = (t->total_steps + t->spe - 1) / t->spe;
    double win_loss = 0, win_t0 = now_s();
    int64_t win_hits = 0, win_n = 0, run_samples = 0;
    double run_t0 = now_s(), loop_t0 = now_s(), t_loop_end = 0;
    t->run_base = t->st.run_seconds; /* 0, or what state_load read */
    t->run_start = run_t0;
    t->ctl_last = run_t0;
    t->last_save_time = now_s();
    double last_loss = NAN;
    int evaluated_at_end = 0;
    double ctl[CTL_N];

    /* Resumed at an epoch end whose evaluation the stop skipped: run it
     * now, on the restored weights, so the epoch is evaluated once. */
    if (t->st.eval_pending && step > 0 && step % t->spe == 0) {
        int e = epoch_eval(t, step, res, err, cap);
        if (e < 0)
            goto out;
        if (e == 1) { /* still pending in the checkpoint of this step */
            if (stop_after_eval(t, step, res, err, cap) != 0)
                goto out;
            ret = TRAIN_STOPPED;
            goto finish;
        }
        evaluated_at_end = step == t->total_steps;
    } else {
        t->evaluated_step = step; /* done before that checkpoint was saved */
    }

    while (step < t->total_steps) {
        int64_t epoch = step / t->spe, j = step % t->spe;
        sampler_set_epoch(&t->smp, epoch);
        int64_t first = 0, nm = 0;
        sampler_rank_micros(&t->smp, j, t->rank, t->size, &first, &nm);
        int64_t nstep = sampler_step_size(&t->smp, j);

        double gmax = 0, loss = 0;
        int64_t hits = 0;
        step_compute(t, j, first, nm, &gmax, &loss, &hits);
        int bad = t->dev_failed ? 2 : step_loss_bad(t, nm, loss);
        if (gmax != gmax)
            gmax = INFINITY;

        /* Control reduction: stop votes, save-now vote, global max |g|. */
        double c0 = now_s();
        int sig = stop_local_signal();
        ctl[CTL_GMAX] = gmax;
        ctl[CTL_STOP] = sig != 0;
        ctl[CTL_SAVE] = t->rank == 0 && cfg->ckpt_interval > 0 &&
                        now_s() - t->last_save_time >= cfg->ckpt_interval;
        ctl[CTL_SIG_TIME] = sig ? -stop_local_time() : -1e300;
        ctl[CTL_ASYNC_BUSY] = t->async.active && !atomic_load(&t->async.done);
        ctl[CTL_BAD] = bad;
        if (comm_allreduce(c, ctl, CTL_N, COMM_F64, COMM_MAX) != COMM_OK) {
            snprintf(err, cap, "control reduction failed: %s", comm_last_error());
            goto out;
        }
        double t_agreed = wall_s();
        double c1 = now_s();
        t->control_s += c1 - c0;
        if (c1 - t->ctl_last > t->ctl_gap_max)
            t->ctl_gap_max = c1 - t->ctl_last;
        t->ctl_last = c1;
        if (ctl[CTL_BAD] >= 2) {
            snprintf(err, cap, "a device failed at step %lld%s%s", (long long)step,
                     t->dev_failed && gpu_last_error() ? ": " : " (on another rank)",
                     t->dev_failed && gpu_last_error() ? gpu_last_error() : "");
            goto out;
        }
        if (ctl[CTL_BAD] > 0) {
            snprintf(err, cap, "non-finite or runaway loss at step %lld: training diverged "
                     "(lower --lr?)", (long long)step);
            goto out;
        }
        if (!isfinite(ctl[CTL_GMAX])) {
            snprintf(err, cap, "non-finite gradient at step %lld: training diverged (lower --lr?)",
                     (long long)step);
            goto out;
        }
        if (step_reduce(t, nm, ctl[CTL_GMAX], nstep, &loss, &hits) != 0) {
            snprintf(err, cap, "gradient reduction failed: %s", comm_last_error());
            goto out;
        }
        if (!isfinite(loss)) {
            snprintf(err, cap, "non-finite loss at step %lld: training diverged (lower --lr?)",
                     (long long)step);
            goto out;
        }
        if (t->gpu)
            gpu_optim_step(t->go, gpu_model_params(t->gm), t->dgrad, step); /* errors surface at the next sync */
        else
            optim_step(t->opt, model_params(t->model), t->grad, step);
        step++;
        if (t->async.active && ctl[CTL_ASYNC_BUSY] == 0)
            async_finish(t, res); /* every rank's writer is done: commit */
        run_samples += nstep;
        win_loss += loss;
        win_hits += hits;
        win_n += nstep;
        last_loss = loss / (double)nstep;

        if (t->rank == 0 && (step % log_every == 0 || step == t->total_steps)) {
            double dt = now_s() - win_t0;
            double sps = dt > 0 ? (double)win_n / dt : 0;
            double eta = (double)(t->total_steps - step) * (now_s() - loop_t0) /
                         (double)(run_samples ? (double)run_samples / (double)cfg->global_batch : 1);
            char etab[32];
            fmt_eta(eta, etab, sizeof etab);
            double lr = optim_lr(optim_config(t->opt), step - 1);
            if (!cfg->quiet)
                printf("epoch %lld/%lld step %lld/%lld loss %.4f acc %.4f lr %.2e %.0f samples/s eta %s\n",
                       (long long)((step - 1) / t->spe + 1), (long long)epochs_total, (long long)step,
                       (long long)t->total_steps, win_loss / (double)win_n,
                       (double)win_hits / (double)win_n, lr, sps, etab);
            metrics_row_t row = {step, (step - 1) / t->spe, win_loss / (double)win_n,
                                 (double)win_hits / (double)win_n, lr, sps, t->size};
            metrics_step(&t->met, &row);
            fflush(stdout);
            win_loss = 0;
            win_hits = 0;
            win_n = 0;
            win_t0 = now_s();
        }

        int stop = ctl[CTL_STOP] > 0;
        /* A stop skips the epoch's evaluation (it would delay the save);
         * the checkpoint records it as pending and the resume runs it. */
        if (!stop && step % t->spe == 0) {
            /* A stop signal that cuts the evaluation short (1) is left to
             * the next step's control reduction. */
            int e = epoch_eval(t, step, res, err, cap);
            if (e < 0)
                goto out;
            if (e == 0)
                evaluated_at_end = step == t->total_steps;
        }

        if (stop) {
            int first_sig = 0, first_rank = 0;
            if (first_stop(t, ctl[CTL_SIG_TIME], &first_sig, &first_rank, err, cap) != 0)
                goto out;
            if (stop_and_save(t, step, first_sig, first_rank, -ctl[CTL_SIG_TIME], t_agreed, res,
                              err, cap) != 0)
                goto out;
            ret = TRAIN_STOPPED;
            goto finish;
        }

        if (cfg->run_dir[0] && step < t->total_steps &&
            ((cfg->ckpt_every && step % cfg->ckpt_every == 0) || ctl[CTL_SAVE] > 0)) {
            if (cfg->ckpt_async && t->async.active) {
                /* At most one in flight, and never a stall waiting for it:
                 * this save is skipped; the one being written still lands. */
                t->async_skipped++;
                if (t->rank == 0 && !cfg->quiet)
                    printf("checkpoint: step %lld skipped: the save of step %lld is still being "
                           "written\n", (long long)step, (long long)t->async.step);
            } else if (cfg->ckpt_async) {
                if (async_start(t, step, err, cap) != 0) {
                    t->async_failures++;
                    if (t->rank == 0)
                        fprintf(stderr, "ftrain: asynchronous checkpoint of step %lld not started: %s\n",
                                (long long)step, err);
                }
                t->last_save_time = now_s();
            } else if (save(t, step, res, err, cap) != 0) {
                goto out;
            }
        }
        if (cfg->step_delay_ms) {
            struct timespec d = {cfg->step_delay_ms / 1000, (long)(cfg->step_delay_ms % 1000) * 1000000L};
            nanosleep(&d, NULL); /* a signal cuts it short, as it should */
        }
    }

    t_loop_end = now_s();
    /* The end: save first, so the final weights are safe, then a last
     * evaluation when the run did not end on an epoch.  A stop signal that
     * cuts this evaluation short makes the run exit 75 like any stop: the
     * requeued job resumes at the last step and only evaluates. */
    async_finish(t, res);
    if (cfg->run_dir[0] && t->last_saved != step) {
        if (save(t, step, res, err, cap) != 0)
            goto out;
    }
    res->saved = t->last_saved == step;
    if (!evaluated_at_end) {
        double tl = 0, ta = 0;
        int e = evaluate(t, &tl, &ta, err, cap);
        if (e < 0)
            goto out;
        if (e == 1) {
            if (t->rank == 0 && !cfg->quiet)
                printf("eval: final evaluation cut short by a stop signal\n");
            if (stop_after_eval(t, step, res, err, cap) != 0)
                goto out;
            ret = TRAIN_STOPPED;
            goto finish;
        }
        res->test_loss = tl;
        res->test_acc = ta;
        res->evaluated = 1;
    }
    ret = TRAIN_DONE;

finish:
    res->step = step;
    res->epoch = step / t->spe;
    res->loss = last_loss;
    if (t->gpu && gpu_to_host(t, err, cap) != 0)
        ret = TRAIN_EFAIL;
    res->param_hash = train_param_hash(model_params(t->model), t->P);
    res->reduce_ms_per_step = t->reduce_n ? 1e3 * t->reduce_s / (double)t->reduce_n : 0;
    res->control_ms_per_step = t->reduce_n ? 1e3 * t->control_s / (double)t->reduce_n : 0;
    /* Training throughput: the loop only, without the final evaluation. */
    if (t_loop_end == 0)
        t_loop_end = now_s();
    res->async_saves = t->async_saves;
    res->async_failures = t->async_failures;
    res->async_skipped = t->async_skipped;
    res->async_stall_ms = t->async_saves ? 1e3 * t->async_stall_s / t->async_saves : 0;
    res->samples_per_s = t_loop_end > run_t0 ? (double)run_samples / (t_loop_end - run_t0) : 0;
    if (t->rank == 0) {
        char extra[128];
        snprintf(extra, sizeof extra, "\"param_hash\":\"%016llx\",\"seconds\":%.3f",
                 (unsigned long long)res->param_hash, now_s() - t_start);
        metrics_event(&t->met, ret == TRAIN_DONE ? "done" : "exit", step, t->size, extra);
    }
out:
    trainer_free(t);
    return ret;
}

/*
 * main.c - ftrain: parse options, start the world, agree on the device and
 * the communicator, train, map the outcome to an exit code.
 *
 * Exit codes: include/ftrain/exit_codes.h (the table: docs/exit-codes.md).
 * 0 done, 75 requeue me (a committed stop checkpoint), 76 a hang the
 * watchdog ended, 2 bad options, 1 any other failure, 128+N stopped by
 * signal N with no run directory (nothing saved).  A failure also leaves a
 * structured record in RUN/failures (fault/failure.h) for the supervisor.
 */
#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ftrain/exit_codes.h"
#include "parallel/comm.h"
#include "parallel/comm_nccl.h"
#include "config/config.h"
#include "parallel/device.h"
#include "parallel/liveness.h"
#include "gpu/gpu.h"
#include "app/run_lock.h"
#include "fault/failure.h"
#include "fault/stop.h"
#include "train/train.h"
#include "fault/watchdog.h"
#include "parallel/world.h"
#include "util/util.h"

/* How long MPI_Abort may take after a hang before the process ends itself. */
#define HANG_ABORT_WAIT_S 10
/* The most a rank waits to learn whether its failure message is the others'. */
#define SAME_TEXT_TIMEOUT_S 10.0
/* How long NCCL's communicator set-up and each device collective may take. */
#define NCCL_TIMEOUT_S 300.0

/* What agree_device_and_comm returns: ok, failed on some rank (every rank
 * returns this, err says why or is "" where this rank has nothing to add),
 * or failed so that the world cannot agree (the caller aborts it). */
typedef enum { AGREE_OK = 0, AGREE_EFAIL = -1, AGREE_EABORT = -2 } agree_rc_t;

/* A device choice's reason, or what failed. */
#define DEVICE_WHY_MAX 512

/* One rank's device. */
typedef struct {
    device_kind_t kind;
    int ordinal;              /* GPU index, -1 for the CPU */
    gpu_ctx_t *gpu;           /* NULL on the CPU */
    char why[DEVICE_WHY_MAX]; /* the choice and its reason, or what failed */
} device_pick_t;

/* Runs before any shared library's constructor (cuBLAS, NCCL, Open MPI and
 * OpenBLAS take most of a second to load): a stop signal sent to a rank
 * that is still starting waits, blocked, for main's handlers instead of
 * killing it (the batch script forwards and repeats the signal as soon as
 * the launcher runs). */
__attribute__((no_sanitize("address", "undefined")))
static void preinit_block(int argc, char **argv, char **envp)
{
    (void)argc, (void)argv, (void)envp;
    stop_block_early();
}
__attribute__((section(".preinit_array"), used))
static void (*const ftrain_preinit)(int, char **, char **) = preinit_block;

/* Falls back to the CPU under --device auto. */
static void use_cpu(device_pick_t *dev, const char *why)
{
    gpu_close(dev->gpu);
    dev->gpu = NULL;
    dev->kind = DEVICE_CPU;
    snprintf(dev->why, sizeof dev->why, "cpu: %s", why);
}

/* This rank's choice, with the GPU opened.  @return a device_err_t. */
static int pick_device(const config_t *cfg, const world_t *world, device_pick_t *dev)
{
    int is_auto = strcmp(cfg->device, "auto") == 0;
    int rc = device_choose(cfg->device, world->local_rank, world->local_size, &dev->kind,
                           &dev->ordinal, dev->why, sizeof dev->why);
    if (rc != DEVICE_OK || dev->kind != DEVICE_CUDA)
        return rc;
    if (gpu_init(&dev->gpu, dev->ordinal) == GPU_OK)
        return DEVICE_OK;
    char why[DEVICE_WHY_MAX];
    if (!is_auto) {
        snprintf(dev->why, sizeof dev->why, "cuda: cannot use GPU %d: %s", dev->ordinal,
                 gpu_last_error());
        return DEVICE_ENODEV;
    }
    snprintf(why, sizeof why, "GPU %d cannot be used: %s", dev->ordinal, gpu_last_error());
    use_cpu(dev, why);
    return DEVICE_OK;
}

/* Two ranks on one physical GPU (more ranks on a node than GPUs, or a
 * binding that gave two ranks the same one): NCCL refuses that, and only
 * the ranks together can see it.  Every rank gathers every rank's GPU UUID
 * and reaches the same verdict: --device cuda fails, auto uses the CPU. */
static int check_gpus_unshared(const config_t *cfg, const world_t *world, device_pick_t *dev,
                               char *err, size_t cap)
{
    device_gpu_ref_t mine, *refs = calloc((size_t)world->size, sizeof *refs);
    device_gpu_ref(dev->kind == DEVICE_CUDA ? dev->ordinal : -1, world->host, &mine);
    if (!refs || world_allgather(world, &mine, sizeof mine, refs) != 0) {
        snprintf(err, cap, "rank %d: cannot gather the ranks' devices", world->rank);
        free(refs);
        return AGREE_EABORT;
    }
    char shared[DEVICE_WHY_MAX] = "";
    int first = 0, second = 0;
    int share = device_find_shared(refs, world->size, &first, &second, shared, sizeof shared);
    free(refs);
    if (share && strcmp(cfg->device, "auto") != 0) {
        if (world->rank == 0)
            snprintf(err, cap, "--device cuda: %s (give each rank its own GPU: srun "
                     "--gpus-per-task=1, or no more ranks on a node than its GPUs)", shared);
        return AGREE_EFAIL;
    }
    if (share && dev->kind == DEVICE_CUDA)
        use_cpu(dev, shared);
    return AGREE_OK;
}

/* Collective: every rank picks its device (--device), all agree on one
 * kind and open the communicator of that kind: NCCL ranks and MPI ranks
 * would each wait in their own communicator's set-up for ever.  Rank 0
 * prints the choice.  On success *gpu (NULL on the CPU) and *comm are set;
 * whatever the result the caller closes both. */
static int agree_device_and_comm(const config_t *cfg, const world_t *world, gpu_ctx_t **gpu,
                                 comm_t **comm, char *err, size_t cap)
{
    device_pick_t dev = {.kind = DEVICE_CPU, .ordinal = -1};
    int drc = pick_device(cfg, world, &dev);
    *gpu = dev.gpu;
    /* Agree before any rank enters the communicator's set-up. */
    if (!world_all_ok(world, drc == DEVICE_OK)) {
        if (drc != DEVICE_OK)
            snprintf(err, cap, "rank %d: %s", world->rank, dev.why);
        return AGREE_EFAIL;
    }
    int rc = check_gpus_unshared(cfg, world, &dev, err, cap);
    *gpu = dev.gpu;
    if (rc != AGREE_OK)
        return rc;
    /* Only auto can differ (cuda fails on a rank without a GPU): then every
     * rank uses the CPU. */
    if (!world_all_ok(world, dev.kind == DEVICE_CUDA) && dev.kind == DEVICE_CUDA)
        use_cpu(&dev, "not every rank can use a GPU, so every rank uses the CPU (--device auto)");
    *gpu = dev.gpu;
    int crc = dev.kind == DEVICE_CUDA
                  ? comm_open_nccl(comm, world, dev.ordinal, gpu_stream(dev.gpu), NCCL_TIMEOUT_S)
                  : comm_open_mpi(comm, world);
    if (!world_all_ok(world, crc == COMM_OK)) {
        snprintf(err, cap, "rank %d: cannot create the communicator: %s", world->rank,
                 crc != COMM_OK ? comm_last_error() : "another rank failed");
        return AGREE_EFAIL;
    }
    if (world->rank == 0 && !cfg->quiet) {
        printf("device: %s\n", dev.why);
        char warn[DEVICE_WHY_MAX];
        if (dev.kind == DEVICE_CUDA && device_nccl_warning(warn, sizeof warn))
            fprintf(stderr, "ftrain: warning: %s\n", warn);
    }
    return AGREE_OK;
}

/* ---- hangs ----------------------------------------------------------------- */

/* What a hang aborts: the communicator while it is open (NCCL's kernels
 * would wait for a dead peer for ever), and the world. */
static comm_t *_Atomic hang_comm;
static const world_t *hang_world;

/* MPI_Abort has no timeout of its own: the job ends within
 * HANG_ABORT_WAIT_S even when it does not return. */
static void *hang_last_resort(void *unused)
{
    (void)unused;
    struct timespec wait = {HANG_ABORT_WAIT_S, 0};
    nanosleep(&wait, NULL);
    _exit(FTRAIN_EXIT_HANG);
}

/* The watchdog's verdict, on its thread: print it (stderr reaches the
 * job's output), abort the device communicator and the MPI job.  Nothing
 * is saved: the newest committed checkpoint stays the one to resume. */
static void end_job_on_hang(const char *report, void *arg)
{
    (void)arg;
    liveness_bye(); /* the neighbours: this rank ends on purpose */
    fprintf(stderr, "%sftrain: %s: ending the job with exit code %d; the newest committed "
            "checkpoint is kept\n", report,
            strncmp(report, "ftrain: peer lost:", 18) == 0 ? "peer lost" : "hang",
            FTRAIN_EXIT_HANG);
    fflush(stderr);
    pthread_t last;
    if (pthread_create(&last, NULL, hang_last_resort, NULL) == 0)
        pthread_detach(last);
    comm_abort(atomic_load(&hang_comm));
    world_abort(hang_world, FTRAIN_EXIT_HANG);
    _exit(FTRAIN_EXIT_HANG);
}

/* ---- failure records ------------------------------------------------------- */

/* Where this rank was when its failure was found (watchdog_where). */
typedef struct {
    watchdog_phase_t phase;
    int64_t step;
} where_t;

/* Write this rank's failure record of kind with msg into the run directory
 * (none without --run-dir); one that cannot be written is a warning: the
 * exit code still says that the launch failed. */
static void note_failure(const config_t *cfg, int rank, failure_kind_t kind, const where_t *at,
                         const char *msg)
{
    if (!cfg->run_dir[0])
        return;
    failure_t rec;
    char err[512];
    failure_init(&rec, kind, rank);
    if (at) {
        rec.phase = at->phase;
        rec.step = at->phase == WATCHDOG_START ? FAILURE_NO_STEP : at->step;
    }
    failure_set_message(&rec, msg);
    if (failure_write(cfg->run_dir, &rec, err, sizeof err) != FAILURE_OK)
        fprintf(stderr, "ftrain: warning: rank %d: %s\n", rank, err);
}

/* One rank at the start: who it is, and when (the job's token). */
typedef struct {
    watchdog_peer_t peer;
    uint64_t started_ns;
    liveness_card_t live; /* where it listens for the liveness ring ("" none) */
} rank_card_t;

/* Collective, after the cards are gathered: form the liveness ring (unless
 * --no-liveness).  A ring that does not form is a warning, on every rank
 * that saw why: the watchdog's heartbeats still notice a dead rank. */
static void start_liveness(const config_t *cfg, const world_t *world, const rank_card_t *cards,
                           uint64_t token)
{
    if (cfg->no_liveness || world->size <= 1)
        return;
    liveness_card_t *live = calloc((size_t)world->size, sizeof *live);
    int ready = live != NULL;
    for (int r = 0; ready && r < world->size; r++) {
        live[r] = cards[r].live;
        ready = live[r].text[0] != '\0';
    }
    char err[512] = "a rank could not listen";
    if (!ready || liveness_connect(world->rank, world->size, live, token, LIVENESS_CONNECT_S,
                                   err, sizeof err) != LIVENESS_OK) {
        liveness_close(); /* the listener too */
        fprintf(stderr, "ftrain: warning: rank %d: %s: a rank that dies is noticed by the "
                "heartbeats only (--hang-timeout)\n", world->rank, err);
    }
    free(live);
}

/* Collective: gather every rank's pid and host, start the watchdog and the
 * liveness ring.  A rank whose watchdog does not start trains on, with a
 * warning. */
static void start_watchdog(const config_t *cfg, const world_t *world)
{
    struct timespec ts;
    char lerr[256];
    clock_gettime(CLOCK_REALTIME, &ts);
    rank_card_t me = {.peer.pid = (int)getpid(),
                      .started_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec};
    snprintf(me.peer.host, sizeof me.peer.host, "%s", world->host);
    if (!cfg->no_liveness && world->size > 1 &&
        liveness_listen(&me.live, lerr, sizeof lerr) != LIVENESS_OK)
        fprintf(stderr, "ftrain: warning: rank %d: %s\n", world->rank, lerr);
    rank_card_t *cards = calloc((size_t)world->size, sizeof *cards);
    watchdog_peer_t *peers = calloc((size_t)world->size, sizeof *peers);
    int gathered = cards && peers && world_allgather(world, &me, sizeof me, cards) == WORLD_OK;
    for (int r = 0; gathered && r < world->size; r++)
        peers[r] = cards[r].peer;
    char dir[CONFIG_PATH_MAX + sizeof "/heartbeat"] = "";
    if (cfg->run_dir[0])
        snprintf(dir, sizeof dir, "%s/heartbeat", cfg->run_dir);
    /* Rank 0's pid and start time: heartbeats of an earlier job in the same
     * run directory are not this one's. */
    uint64_t token = gathered ? cards[0].started_ns ^ ((uint64_t)cards[0].peer.pid << 40) : 0;
    if (gathered)
        start_liveness(cfg, world, cards, token);
    watchdog_opts_t opts = {
        .rank = world->rank, .size = world->size, .peers = gathered ? peers : NULL,
        .timeout_s = cfg->hang_timeout, .heartbeat_dir = gathered ? dir : NULL,
        .token = token, .fire = end_job_on_hang, .stop_requested = stop_local_signal,
        .run_dir = cfg->run_dir,
    };
    hang_world = world;
    char err[TRAIN_ERR_MAX];
    if (watchdog_start(&opts, err, sizeof err) != WATCHDOG_OK)
        fprintf(stderr, "ftrain: warning: rank %d: %s\n", world->rank, err);
    free(cards);
    free(peers);
}

/* The timing line of a process that trained. */
static void print_timing(const train_result_t *res)
{
    printf("timing: %.0f samples/s, gradient reduction %.3f ms/step, stop/control "
           "reduction %.3f ms/step, evaluation %.3f s",
           res->samples_per_s, res->reduce_ms_per_step, res->control_ms_per_step,
           res->eval_seconds);
    if (res->first_step_seconds > 0)
        printf(", first step %.3f s (neither in samples/s)\n", res->first_step_seconds);
    else
        printf(" (not in samples/s)\n");
}

/* Rank 0: the done, timing and async checkpoint lines of a run that ended. */
static void print_result(const config_t *cfg, const train_result_t *res)
{
    /* A loss of nan means this process trained no step (a resume at or
     * past the last step: train_report.c says so in a note); the line then says
     * "loss=none", and the timing line has no samples/s to give.  test_acc
     * (test_r2) is that of the weights the line ends with, or "none" when
     * they were not evaluated (a stop before the epoch's or the final
     * evaluation: the resume runs it); an earlier epoch's score is in its
     * eval line.  Regression reports R^2, and its loss with %g: a good
     * fit's MSE is far below what six decimals show. */
    int trained = !isnan(res->loss);
    char loss[32] = "none", score[32] = "none";
    if (trained)
        snprintf(loss, sizeof loss, res->regression ? "%.6g" : "%.6f", res->loss);
    if (res->evaluated && res->eval_step == res->step)
        snprintf(score, sizeof score, res->regression ? "%.6f" : "%.4f",
                 res->regression ? res->test_r2 : res->test_acc);
    printf("done: step=%lld epoch=%lld loss=%s %s=%s param_hash=%016llx\n",
           (long long)res->step, (long long)res->epoch, loss,
           res->regression ? "test_r2" : "test_acc", score, (unsigned long long)res->param_hash);
    if (cfg->quiet)
        return;
    if (!trained)
        printf("timing: no step trained in this process, evaluation %.3f s\n",
               res->eval_seconds);
    else
        print_timing(res);
    /* "skipped": a save due while the one before was still in flight. */
    if (res->async_saves)
        printf("async checkpoints: %d, failed %d, skipped %d%s, mean training stall %.1f ms "
               "per save\n", res->async_saves, res->async_failures, res->async_skipped,
               res->async_skipped ? " (the one before still in flight)" : "",
               res->async_stall_ms);
    if (res->local_sealed || res->local_failed || res->local_skipped)
        printf("local checkpoints: %d sealed, failed %d, skipped %d%s; per sealed save, mean "
               "training stall %.1f ms, mean helper CPU %.1f ms\n", res->local_sealed,
               res->local_failed, res->local_skipped,
               res->local_skipped ? " (the one before still in flight)" : "",
               res->local_stall_ms, res->local_cpu_ms);
}

/* The failure record's kind of a train_run error. */
static failure_kind_t failure_kind_of(int rc)
{
    switch (rc) {
    case TRAIN_EMISMATCH:
        return FAILURE_RESUME_REFUSED;
    case TRAIN_EDIVERGED:
        return FAILURE_NAN;
    case TRAIN_EDEVICE:
        return FAILURE_DEVICE;
    case TRAIN_EDATA:
        return FAILURE_BAD_DATA;
    default:
        return FAILURE_OTHER;
    }
}

/* Report the result of train_run (its error rc and err, or the outcome in
 * res; the rank was at *at when it returned) and map it to the exit code.
 * Collective on failure. */
static int report_outcome(const config_t *cfg, const world_t *world, int rc,
                          const train_result_t *res, const char *err, const where_t *at)
{
    if (rc != TRAIN_OK) {
        /* Every rank returns the same failure; rank 0 reports it, and other
         * ranks only when their message differs (a local cause) or when
         * that cannot be known in time; the same ranks write a record
         * whose kind the return code gives. */
        int same = world_same_text(world, err, SAME_TEXT_TIMEOUT_S); /* every rank takes part */
        if (world->rank == 0 || same != 1) {
            fprintf(stderr, "ftrain: rank %d: %s\n", world->rank, err);
            note_failure(cfg, world->rank, failure_kind_of(rc), at, err);
        }
        return FTRAIN_EXIT_FAILURE;
    }
    if (world->rank == 0)
        print_result(cfg, res);
    if (res->outcome == TRAIN_STOPPED)
        return res->saved ? FTRAIN_EXIT_REQUEUE : FTRAIN_EXIT_SIGNAL(res->stop_signal);
    if (res->async_failures) {
        if (world->rank == 0) {
            char msg[128];
            snprintf(msg, sizeof msg, "%d asynchronous checkpoint%s failed",
                     res->async_failures, res->async_failures == 1 ? "" : "s");
            fprintf(stderr, "ftrain: %s (see above)\n", msg);
            note_failure(cfg, world->rank, FAILURE_IO, at, msg);
        }
        return FTRAIN_EXIT_FAILURE;
    }
    return FTRAIN_EXIT_DONE;
}

/* Options, then the signal handlers' final form.  @return 1 to run, or 0
 * to exit at once with *exit_code (help, version, an error). */
static int parse_options(config_t *cfg, int argc, char **argv, int *exit_code)
{
    char err[TRAIN_ERR_MAX] = "";
    int rc = config_parse(cfg, argc, argv, err, sizeof err);
    *exit_code = FTRAIN_EXIT_DONE;
    if (rc == CONFIG_HELP) {
        config_usage(stdout);
        return 0;
    }
    if (rc == CONFIG_VERSION) {
        char dev[DEVICE_WHY_MAX];
        printf("ftrain %s (C11; Open MPI; OpenBLAS %s; %s)\n", FTRAIN_VERSION,
               openblas_get_config(), device_build_info(dev, sizeof dev));
        return 0;
    }
    *exit_code = FTRAIN_EXIT_FAILURE;
    if (rc != CONFIG_RUN) {
        fprintf(stderr, "ftrain: %s\nTry 'ftrain --help'.\n", err);
        *exit_code = FTRAIN_EXIT_USAGE;
        return 0;
    }
    /* The handlers are final: what came while loading is delivered now. */
    int rc_signal = cfg->stop_signal == SIGUSR1
                        ? STOP_OK /* installed before the options were read */
                        : stop_install(cfg->stop_signal, err, sizeof err);
    if (rc_signal == STOP_OK)
        rc_signal = stop_unblock(err, sizeof err);
    if (rc_signal != STOP_OK) {
        fprintf(stderr, "ftrain: %s\n", err);
        return 0;
    }
    return 1;
}

int main(int argc, char **argv)
{
    /* Line by line, as on a terminal: with `> log 2>&1` a fully buffered
     * stdout would put the world and device lines after the error they
     * came before. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    config_t cfg;
    config_defaults(&cfg);
    /* Handlers first, so a signal during start-up is not lost. */
    char err[TRAIN_ERR_MAX] = "";
    if (stop_install(cfg.stop_signal, err, sizeof err) != STOP_OK) {
        fprintf(stderr, "ftrain: %s\n", err);
        return FTRAIN_EXIT_FAILURE;
    }
    int code = FTRAIN_EXIT_FAILURE;
    if (!parse_options(&cfg, argc, argv, &code))
        return code;
    world_t world;
    /* MPI_THREAD_MULTIPLE only where a helper thread may call MPI (auto
     * decides once the device and the BLAS threads are known). */
    world_threads_t threads = cfg.ckpt_local[0] && cfg.ckpt_local_exchange !=
                              CONFIG_EXCHANGE_STEPS ? WORLD_THREADS_MULTIPLE
                                                    : WORLD_THREADS_FUNNELED;
    if (world_init_threads(&world, &argc, &argv, threads, err, sizeof err) != WORLD_OK) {
        fprintf(stderr, "ftrain: %s\n", err);
        return FTRAIN_EXIT_FAILURE;
    }
    if (!cfg.quiet)
        world_print(&world, stdout);
    /* One launch per run directory (run_lock.h): before anything of the
     * run directory is read, the heartbeats first, which a live launch's
     * would otherwise look like an earlier crash. */
    if (cfg.run_dir[0]) {
        int locked = world.rank == 0 ? run_lock_take(cfg.run_dir, world.host, RUN_LOCK_WAIT_S,
                                                     err, sizeof err)
                                     : RUN_LOCK_OK;
        if (!world_all_ok(&world, locked == RUN_LOCK_OK)) {
            if (world.rank == 0)
                fprintf(stderr, "ftrain: %s\n", locked == RUN_LOCK_OK
                        ? "the ranks could not agree on the run directory's lock" : err);
            /* A checkpoint root given for the run directory is no run
             * directory: nothing is written into it, a record neither. */
            if (locked == RUN_LOCK_EBUSY)
                note_failure(&cfg, world.rank, FAILURE_RUN_LOCK, NULL, err);
            world_free(&world);
            return FTRAIN_EXIT_FAILURE;
        }
    }
    /* Heartbeats an earlier launch left: it ended unplanned.  Rank 0 reads
     * them before start_watchdog's gather, so no rank of this launch has
     * written its own yet. */
    watchdog_leftover_t before = {0};
    if (world.rank == 0 && cfg.run_dir[0]) {
        char dir[CONFIG_PATH_MAX + sizeof "/heartbeat"];
        snprintf(dir, sizeof dir, "%s/heartbeat", cfg.run_dir);
        watchdog_leftovers(dir, &before);
    }
    start_watchdog(&cfg, &world);

    gpu_ctx_t *gpu = NULL;
    comm_t *comm = NULL;
    train_result_t res;
    int stopped = 0; /* train_run ended by an agreed stop */
    int agreed = agree_device_and_comm(&cfg, &world, &gpu, &comm, err, sizeof err);
    if (agreed == AGREE_OK) {
        atomic_store(&hang_comm, comm);
        int rc = train_run(&cfg, &world, comm, gpu, &before, &res, err, sizeof err);
        where_t at;
        watchdog_where(&at.phase, &at.step);
        watchdog_phase(WATCHDOG_FINISH, 0);
        stopped = rc == TRAIN_OK && res.outcome == TRAIN_STOPPED;
        code = report_outcome(&cfg, &world, rc, &res, err, &at);
    } else {
        if (err[0]) {
            fprintf(stderr, "ftrain: %s\n", err);
            note_failure(&cfg, world.rank, FAILURE_DEVICE, NULL, err);
        }
        if (agreed == AGREE_EABORT)
            world_abort(&world, FTRAIN_EXIT_FAILURE);
        code = FTRAIN_EXIT_FAILURE;
    }
    atomic_store(&hang_comm, NULL);
    watchdog_stop(); /* before the communicator it would abort is closed */
    comm_close(comm);
    gpu_close(gpu);
    world_free(&world);
    run_lock_release(); /* after the last save of the run directory */
    if (stopped && world.rank == 0) {
        printf("stop: exit %d, %.3f s after the signal\n", code,
               util_wall_s() - res.stop_time);
    }
    fflush(stdout);
    return code;
}

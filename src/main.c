/*
 * main.c - ftrain: parse options, start the world, train, map the outcome to
 * an exit code.
 *
 * Exit codes (docs/exit-codes in README.md):
 *   0   training finished
 *   75  stopped by a signal after a committed checkpoint: requeue me
 *   2   bad options
 *   1   any other failure (data, checkpoint, collective)
 *   128+signal  stopped by a signal with no run directory (nothing saved)
 */
#include <cblas.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ftrain/comm.h"
#include "ftrain/comm_nccl.h"
#include "ftrain/config.h"
#include "ftrain/device.h"
#include "ftrain/gpu.h"
#include "ftrain/stop.h"
#include "ftrain/train.h"
#include "ftrain/world.h"

#define EXIT_REQUEUE 75

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

int main(int argc, char **argv)
{
    config_t cfg;
    config_defaults(&cfg);
    /* Handlers first, so a signal during start-up is not lost. */
    if (stop_install(cfg.stop_signal) != 0) {
        perror("ftrain: sigaction");
        return 1;
    }
    char err[2048] = "";
    int prc = config_parse(&cfg, argc, argv, err, sizeof err);
    if (prc == CONFIG_HELP) {
        config_usage(stdout);
        return 0;
    }
    if (prc == CONFIG_VERSION) {
        char dev[512];
        printf("ftrain %s (C11; Open MPI; OpenBLAS %s; %s)\n", FTRAIN_VERSION,
               openblas_get_config(), device_build_info(dev, sizeof dev));
        return 0;
    }
    if (prc != CONFIG_RUN) {
        fprintf(stderr, "ftrain: %s\nTry 'ftrain --help'.\n", err);
        return 2;
    }
    if (cfg.stop_signal != SIGUSR1 && stop_install(cfg.stop_signal) != 0) {
        perror("ftrain: sigaction");
        return 1;
    }
    /* The handlers are final: what came while loading is delivered now. */
    if (stop_unblock() != 0) {
        perror("ftrain: sigprocmask");
        return 1;
    }

    world_t w;
    if (world_init(&w, &argc, &argv) != 0) {
        fprintf(stderr, "ftrain: MPI start failed (launch with mpirun or srun --mpi=pmix)\n");
        return 1;
    }
    if (!cfg.quiet)
        world_print(&w, stdout);

    /* The device: every rank chooses, and all must succeed. */
    device_kind_t kind = DEVICE_CPU;
    int ordinal = -1;
    char why[512] = "";
    int drc = device_choose(cfg.device, w.local_rank, w.local_size, &kind, &ordinal, why,
                            sizeof why);
    int is_auto = strcmp(cfg.device, "auto") == 0;
    gpu_ctx_t *gpu = NULL;
    if (drc == DEVICE_OK && kind == DEVICE_CUDA && gpu_init(&gpu, ordinal) != GPU_OK) {
        if (is_auto) { /* auto: a GPU that cannot be used means the CPU */
            snprintf(why, sizeof why, "cpu: GPU %d cannot be used: %s", ordinal,
                     gpu_last_error());
            kind = DEVICE_CPU;
        } else {
            snprintf(why, sizeof why, "cuda: cannot use GPU %d: %s", ordinal, gpu_last_error());
            drc = DEVICE_ENODEV;
        }
    }
    /* Agree before any rank enters the communicator's set-up. */
    if (!world_all_ok(&w, drc == DEVICE_OK)) {
        if (drc != DEVICE_OK)
            fprintf(stderr, "ftrain: rank %d: %s\n", w.rank, why);
        gpu_close(gpu);
        world_free(&w);
        return 1;
    }
    /* Two ranks on one physical GPU (more ranks on a node than GPUs, or a
     * binding that gave two ranks the same one): NCCL refuses that, and
     * only the ranks together can see it.  Every rank gathers every rank's
     * GPU UUID and reaches the same verdict. */
    device_gpu_ref_t mine, *refs = calloc((size_t)w.size, sizeof *refs);
    device_gpu_ref(kind == DEVICE_CUDA ? ordinal : -1, w.host, &mine);
    char shared[512] = "";
    if (!refs || world_allgather(&w, &mine, sizeof mine, refs) != 0) {
        fprintf(stderr, "ftrain: rank %d: cannot gather the ranks' devices\n", w.rank);
        free(refs);
        gpu_close(gpu);
        world_abort(&w, 1);
        return 1;
    }
    int sa = 0, sb = 0;
    int share = device_find_shared(refs, w.size, &sa, &sb, shared, sizeof shared);
    free(refs);
    if (share && !is_auto) {
        if (w.rank == 0)
            fprintf(stderr, "ftrain: --device cuda: %s (give each rank its own GPU: srun "
                    "--gpus-per-task=1, or no more ranks on a node than its GPUs)\n", shared);
        gpu_close(gpu);
        world_free(&w);
        return 1;
    }
    if (share && kind == DEVICE_CUDA) {
        gpu_close(gpu);
        gpu = NULL;
        kind = DEVICE_CPU;
        snprintf(why, sizeof why, "cpu: %s", shared);
    }
    /* One kind for all: NCCL ranks and MPI ranks would each wait in their
     * own communicator's set-up for ever.  Only auto can differ (cuda fails
     * on a rank without a GPU): then every rank uses the CPU. */
    if (!world_all_ok(&w, kind == DEVICE_CUDA) && kind == DEVICE_CUDA) {
        gpu_close(gpu);
        gpu = NULL;
        kind = DEVICE_CPU;
        snprintf(why, sizeof why, "cpu: not every rank can use a GPU, so every rank uses "
                 "the CPU (--device auto)");
    }
    comm_t *comm = NULL;
    int crc = kind == DEVICE_CUDA ? comm_open_nccl(&comm, &w, ordinal, gpu_stream(gpu), 300.0)
                                  : comm_open_mpi(&comm, &w);
    if (!world_all_ok(&w, crc == COMM_OK)) {
        fprintf(stderr, "ftrain: rank %d: cannot create the communicator: %s\n", w.rank,
                crc != COMM_OK ? comm_last_error() : "another rank failed");
        comm_close(comm);
        gpu_close(gpu);
        world_free(&w);
        return 1;
    }
    if (w.rank == 0 && !cfg.quiet) {
        printf("device: %s\n", why);
        char warn[512];
        if (kind == DEVICE_CUDA && device_nccl_warning(warn, sizeof warn))
            fprintf(stderr, "ftrain: warning: %s\n", warn);
    }

    train_result_t res;
    int rc = train_run(&cfg, &w, comm, gpu, &res, err, sizeof err);
    int code = 1;
    if (rc == TRAIN_DONE || rc == TRAIN_STOPPED) {
        if (w.rank == 0) {
            /* nan means "not measured by this process": test_acc when it
             * stopped before any evaluation, loss when it trained no step
             * (a resume at or past the last step). */
            printf("done: step=%lld epoch=%lld loss=%.6f test_acc=%.4f param_hash=%016llx\n",
                   (long long)res.step, (long long)res.epoch, res.loss,
                   res.evaluated ? res.test_acc : NAN, (unsigned long long)res.param_hash);
            if (!cfg.quiet)
                printf("timing: %.0f samples/s, gradient reduction %.3f ms/step, stop/control "
                       "reduction %.3f ms/step\n",
                       res.samples_per_s, res.reduce_ms_per_step, res.control_ms_per_step);
        }
        if (w.rank == 0 && res.async_saves && !cfg.quiet)
            printf("async checkpoints: %d, failed %d, skipped %d (one in flight), mean training "
                   "stall %.1f ms per save\n", res.async_saves, res.async_failures,
                   res.async_skipped, res.async_stall_ms);
        if (rc == TRAIN_DONE && res.async_failures) {
            if (w.rank == 0)
                fprintf(stderr, "ftrain: %d asynchronous checkpoint%s failed (see above)\n",
                        res.async_failures, res.async_failures == 1 ? "" : "s");
            code = 1;
        } else if (rc == TRAIN_DONE)
            code = 0;
        else if (res.saved)
            code = EXIT_REQUEUE;
        else
            code = 128 + res.stop_signal;
    } else {
        /* Every rank returns the same failure; rank 0 reports it, and other
         * ranks only when their message differs (a local cause) or when
         * that cannot be known within 10 s. */
        int same = world_same_text(&w, err, 10.0); /* every rank takes part */
        if (w.rank == 0 || same != 1)
            fprintf(stderr, "ftrain: rank %d: %s\n", w.rank, err);
        code = 1;
    }
    comm_close(comm);
    gpu_close(gpu);
    world_free(&w);
    if (rc == TRAIN_STOPPED && w.rank == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        printf("stop: exit %d, %.3f s after the signal\n", code,
               (double)ts.tv_sec + ts.tv_nsec * 1e-9 - res.stop_time);
    }
    fflush(stdout);
    return code;
}

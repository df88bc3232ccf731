/*
 * device.h - where a rank computes (--device auto|cpu|cuda) and what GPU
 * support this binary carries (ftrain --version).
 *
 * HowTo: device_choose(cfg_device, w->local_rank, w->local_size, &kind, &ordinal, why,
 * sizeof why) on every rank after world_init; print `why` on rank 0 (or
 * each rank with world_print); then gpu_init(&ctx, ordinal) when kind is
 * DEVICE_CUDA.  Ranks of one node spread over its GPUs round-robin
 * (ordinal = local_rank % visible GPUs), so CUDA_VISIBLE_DEVICES and SLURM's
 * --gpus-per-task both work.  Whether two ranks landed on one physical GPU
 * (which NCCL refuses) only the ranks together can tell: each fills a
 * device_gpu_ref_t (device_gpu_ref), the world allgathers them, and
 * device_find_shared() finds a pair.  device_build_info() gives one line for
 * --version; device_nccl_warning() a warning to print before training when
 * the loaded NCCL is one known to take over SIGUSR1, ftrain's default stop
 * signal.
 */
#ifndef FTRAIN_DEVICE_H
#define FTRAIN_DEVICE_H

#include <stddef.h>

#include "parallel/world.h"

typedef enum { DEVICE_CPU = 0, DEVICE_CUDA = 1 } device_kind_t;

/** Room for a `why` line of device_choose(). */
#define DEVICE_WHY_MAX 512

typedef enum {
    DEVICE_OK = 0,
    DEVICE_EINVAL = -1,   /* not "auto", "cpu" or "cuda", or bad arguments */
    DEVICE_ENODEV = -2    /* "cuda" asked for, but no GPU (or no CUDA build);
                             a GPU whose properties cannot be read */
} device_err_t;

/**
 * Pick the device for this rank, local rank local_rank of local_size on its
 * node.  want is "auto" (a GPU when one can serve this rank, else the CPU),
 * "cpu" or "cuda" (a GPU or an error).  A visible GPU cannot serve it when
 * the build lacks NCCL or when the GPU is older than the device code built
 * (sm_80).  More ranks on the node than GPUs visible to this rank is not a
 * refusal here: with SLURM's --gpus-per-task=1 every rank sees one GPU, a
 * different one; ranks that would share one are found together
 * (device_find_shared).  Ranks may still choose differently (one node without a GPU):
 * main agrees on one kind for all.  On success *kind and
 * *ordinal (GPU index, -1 for the CPU) are set and why gets one line saying
 * what was chosen and why, e.g.
 *   "cuda: 4 GPUs visible, local rank 1 -> GPU 1 (<the GPU's name>)"
 *   "cpu: no GPU visible (cudaGetDeviceCount: no CUDA-capable device is detected)"
 *   "cpu: built without CUDA"
 *   "cpu: --device cpu"
 * On failure why says what is wrong.
 * @return DEVICE_OK, DEVICE_EINVAL (unknown want, local_rank not in
 *         [0, local_size), NULL outputs) or DEVICE_ENODEV (want "cuda" and no
 *         GPU usable).
 */
int device_choose(const char *want, int local_rank, int local_size, device_kind_t *kind,
                  int *ordinal, char *why, size_t cap);

/** What one rank runs on, as the world allgathers it (fixed size, no
 *  pointers).  uuid is the GPU's UUID (zero on the CPU). */
typedef struct {
    int on_gpu;                 /* 1: this rank uses GPU uuid */
    int ordinal;                /* its index among the rank's visible GPUs */
    unsigned char uuid[16];
    char host[WORLD_HOST_MAX];
} device_gpu_ref_t;

/**
 * Fill *ref for this rank: on the CPU (ordinal < 0) on_gpu is 0; on a GPU,
 * its UUID (cudaDeviceProp.uuid), which names the physical GPU whatever
 * CUDA_VISIBLE_DEVICES or SLURM's binding made its index.  host is copied
 * for messages.
 * @return DEVICE_OK, DEVICE_EINVAL for a NULL ref, or DEVICE_ENODEV when
 *         the GPU's properties cannot be read (ref then says the CPU).
 */
int device_gpu_ref(int ordinal, const char *host, device_gpu_ref_t *ref);

/**
 * Among the n ranks' refs, the first pair of ranks *rank_a < *rank_b on one
 * physical GPU (same UUID; CPU ranks are ignored).  When found and why is not NULL,
 * why gets "ranks A and B would share one GPU (GPU-xxxxxxxx, host H, index
 * I): NCCL needs a GPU of its own for each rank".
 * @return 1 when such a pair exists, else 0.
 */
int device_find_shared(const device_gpu_ref_t *refs, int n, int *rank_a, int *rank_b,
                       char *why, size_t cap);

/**
 * The number of visible GPUs; 0 when none, when CUDA reports an error (its
 * message goes to why when why is not NULL) or when built without CUDA.
 * @return the count, >= 0.
 */
int device_gpu_count(char *why, size_t cap);

/**
 * One line for --version: "CUDA 13.0 (runtime 13.0), NCCL 2.28.9 (loaded
 * 2.28.9)", "CUDA 13.0 (runtime: no driver ...), NCCL: not built in" or
 * "CUDA: not built in; NCCL: not built in".  The build versions come from
 * the headers at compile time, the runtime ones from the loaded libraries.
 * @return buf.
 */
const char *device_build_info(char *buf, size_t cap);

/** @return 1 when built with CUDA (make CUDA=auto/1 with nvcc), else 0. */
int device_cuda_built(void);
/** @return 1 when built with NCCL, else 0. */
int device_nccl_built(void);

/**
 * The SIGUSR1 check for an NCCL version code as ncclGetVersion() returns it
 * (2.12.10 -> 21210; before 2.9 the code was X*1000+Y*100+Z).  When the
 * version is 2.12.x or 2.13.x, writes a warning to buf.
 * @return 1 when a warning was written, else 0.
 */
int device_nccl_sigusr1_check(int version_code, char *buf, size_t cap);

/**
 * The same check for the NCCL this process has loaded (ncclGetVersion).
 * @return 1 when a warning was written to buf, 0 when none is needed or
 *         NCCL is not built in.
 */
int device_nccl_warning(char *buf, size_t cap);

/** @return a static name for an error code. */
const char *device_strerror(int err);

#endif

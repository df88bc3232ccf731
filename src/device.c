/*
 * device.c - --device selection, the GPU/NCCL lines of --version, and the
 * warning about NCCL versions that install their own SIGUSR1 handler.
 *
 * Everything CUDA-specific sits under #ifdef FTRAIN_CUDA / FTRAIN_NCCL, so
 * the file builds without the toolkit and then reports "built without CUDA".
 * Only the CUDA runtime API is used (cudaGetDeviceCount,
 * cudaGetDeviceProperties, cudaRuntimeGetVersion), so a binary built with
 * CUDA still starts on a machine with no GPU or no driver: the count is 0
 * and the reason is CUDA's own message.
 */
#include "ftrain/device.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#ifdef FTRAIN_CUDA
#include <cuda_runtime_api.h>
#endif
#ifdef FTRAIN_NCCL
#include <nccl.h>
#endif

/* The oldest GPU the device code is built for (mk/cuda.mk's CUDA_GENCODE:
 * sm_80 machine code is the oldest image in it). */
#define FTRAIN_MIN_CC 80

int device_cuda_built(void)
{
#ifdef FTRAIN_CUDA
    return 1;
#else
    return 0;
#endif
}

int device_nccl_built(void)
{
#ifdef FTRAIN_NCCL
    return 1;
#else
    return 0;
#endif
}

int device_gpu_count(char *why, size_t cap)
{
    if (why && cap)
        why[0] = '\0';
#ifdef FTRAIN_CUDA
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        if (why && cap)
            snprintf(why, cap, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
        /* Clear the sticky last error for later callers. */
        cudaGetLastError();
        return 0;
    }
    if (n <= 0 && why && cap)
        snprintf(why, cap, "cudaGetDeviceCount: 0 devices");
    return n > 0 ? n : 0;
#else
    if (why && cap)
        snprintf(why, cap, "built without CUDA");
    return 0;
#endif
}

/* Write the chosen GPU's line into why. */
static void describe_gpu(int count, int local_rank, int ordinal, char *why,
                         size_t cap)
{
    char name[256] = "unknown GPU";
#ifdef FTRAIN_CUDA
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, ordinal) == cudaSuccess)
        snprintf(name, sizeof name, "%s", prop.name);
    else
        cudaGetLastError();
#endif
    snprintf(why, cap, "cuda: %d GPU%s visible, local rank %d -> GPU %d (%s)",
             count, count == 1 ? "" : "s", local_rank, ordinal, name);
}

/* The compute capability of GPU ordinal as major * 10 + minor; -1 unknown. */
static int gpu_capability(int ordinal)
{
#ifdef FTRAIN_CUDA
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, ordinal) == cudaSuccess)
        return prop.major * 10 + prop.minor;
    cudaGetLastError();
#else
    (void)ordinal;
#endif
    return -1;
}

int device_choose(const char *want, int local_rank, int local_size, device_kind_t *kind,
                  int *ordinal, char *why, size_t cap)
{
    char reason[512] = "";
    char scratch[8];
    int rc = DEVICE_OK;

    if (!why || cap == 0) {
        why = scratch;
        cap = sizeof scratch;
    }
    why[0] = '\0';
    if (!kind || !ordinal || !want || local_rank < 0 || local_size <= local_rank) {
        snprintf(why, cap, "device: bad arguments");
        return DEVICE_EINVAL;
    }
    *kind = DEVICE_CPU;
    *ordinal = -1;
    int is_auto = strcmp(want, "auto") == 0;
    int is_cuda = strcmp(want, "cuda") == 0;
    if (strcmp(want, "cpu") == 0) {
        snprintf(why, cap, "cpu: --device cpu");
        return DEVICE_OK;
    }
    if (!is_auto && !is_cuda) {
        snprintf(why, cap, "unknown device '%s' (expected auto, cpu or cuda)", want);
        return DEVICE_EINVAL;
    }
    if (!device_cuda_built()) {
        if (is_cuda) {
            snprintf(why, cap, "--device cuda: built without CUDA (rebuild with CUDA=1)");
            rc = DEVICE_ENODEV;
            goto fail;
        }
        snprintf(why, cap, "cpu: built without CUDA");
        return DEVICE_OK;
    }
    /* Reasons no GPU can serve this rank: auto takes the CPU with the
     * reason, cuda fails with it. */
    char cant[600] = "";
    int count = device_gpu_count(reason, sizeof reason);
    int cc = count > 0 ? gpu_capability(local_rank % count) : -1;
    if (count == 0)
        snprintf(cant, sizeof cant, "no GPU visible (%s)", reason);
    else if (!device_nccl_built())
        snprintf(cant, sizeof cant, "built without NCCL, which the GPU path needs");
    else if (cc >= 0 && cc < FTRAIN_MIN_CC)
        snprintf(cant, sizeof cant, "GPU %d is sm_%d; this build carries code for "
                 "sm_%d and newer", local_rank % count, cc, FTRAIN_MIN_CC);
    if (cant[0]) {
        if (is_cuda) {
            snprintf(why, cap, "--device cuda: %s", cant);
            rc = DEVICE_ENODEV;
            goto fail;
        }
        snprintf(why, cap, "cpu: %s", cant);
        return DEVICE_OK;
    }
    *kind = DEVICE_CUDA;
    *ordinal = local_rank % count;
    describe_gpu(count, local_rank, *ordinal, why, cap);
    return DEVICE_OK;

fail:
    *kind = DEVICE_CPU;
    *ordinal = -1;
    return rc;
}

int device_gpu_ref(int ordinal, const char *host, device_gpu_ref_t *ref)
{
    if (!ref)
        return -1;
    memset(ref, 0, sizeof *ref);
    ref->ordinal = ordinal;
    snprintf(ref->host, sizeof ref->host, "%s", host ? host : "");
    if (ordinal < 0)
        return 0;
#ifdef FTRAIN_CUDA
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, ordinal) == cudaSuccess) {
        memcpy(ref->uuid, prop.uuid.bytes, sizeof ref->uuid);
        ref->on_gpu = 1;
        return 0;
    }
    cudaGetLastError();
#endif
    return -1;
}

int device_find_shared(const device_gpu_ref_t *refs, int n, int *a, int *b, char *why,
                       size_t cap)
{
    if (why && cap)
        why[0] = '\0';
    if (!refs || n < 2)
        return 0;
    for (int i = 0; i < n; i++) {
        if (!refs[i].on_gpu)
            continue;
        for (int j = i + 1; j < n; j++) {
            if (!refs[j].on_gpu || memcmp(refs[i].uuid, refs[j].uuid, sizeof refs[i].uuid))
                continue;
            if (a)
                *a = i;
            if (b)
                *b = j;
            if (why && cap) {
                const unsigned char *u = refs[i].uuid;
                snprintf(why, cap, "ranks %d and %d would share one GPU (GPU-%02x%02x%02x%02x, "
                         "host %.64s, index %d): NCCL needs a GPU of its own for each rank",
                         i, j, u[0], u[1], u[2], u[3], refs[i].host, refs[i].ordinal);
            }
            return 1;
        }
    }
    return 0;
}

/* Append printf-style to buf at *len, never past cap. */
static void append(char *buf, size_t cap, size_t *len, const char *fmt, ...)
{
    va_list ap;
    if (*len >= cap)
        return;
    va_start(ap, fmt);
    int w = vsnprintf(buf + *len, cap - *len, fmt, ap);
    va_end(ap);
    if (w > 0)
        *len += (size_t)w;
    if (*len > cap)
        *len = cap;
}

/* Split an NCCL version code into major, minor, patch. */
static void nccl_split(int code, int *x, int *y, int *z)
{
    if (code >= 10000) {
        *x = code / 10000;
        *y = code / 100 % 100;
        *z = code % 100;
    } else {
        *x = code / 1000;
        *y = code / 100 % 10;
        *z = code % 100;
    }
}

const char *device_build_info(char *buf, size_t cap)
{
    size_t len = 0;
    if (!buf || cap == 0)
        return buf;
    buf[0] = '\0';
#ifdef FTRAIN_CUDA
    int rt = 0, drv = 0;
    append(buf, cap, &len, "CUDA %d.%d", CUDART_VERSION / 1000,
           CUDART_VERSION % 1000 / 10);
    if (cudaRuntimeGetVersion(&rt) == cudaSuccess)
        append(buf, cap, &len, " (runtime %d.%d", rt / 1000, rt % 1000 / 10);
    else
        append(buf, cap, &len, " (runtime unavailable");
    /* The driver version is 0 when no driver is installed. */
    if (cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0)
        append(buf, cap, &len, ", driver supports %d.%d)", drv / 1000, drv % 1000 / 10);
    else
        append(buf, cap, &len, ", no driver)");
#else
    append(buf, cap, &len, "CUDA: not built in");
#endif
#ifdef FTRAIN_NCCL
    int x, y, z, v = 0;
    nccl_split(NCCL_VERSION_CODE, &x, &y, &z);
    append(buf, cap, &len, "; NCCL %d.%d.%d", x, y, z);
    if (ncclGetVersion(&v) == ncclSuccess) {
        nccl_split(v, &x, &y, &z);
        append(buf, cap, &len, " (loaded %d.%d.%d)", x, y, z);
    }
#else
    append(buf, cap, &len, "; NCCL: not built in");
#endif
    return buf;
}

int device_nccl_sigusr1_check(int version_code, char *buf, size_t cap)
{
    int x, y, z;
    if (version_code <= 0)
        return 0;
    nccl_split(version_code, &x, &y, &z);
    if (x != 2 || (y != 12 && y != 13))
        return 0;
    if (buf && cap)
        snprintf(buf, cap,
                 "NCCL %d.%d.%d installs its own SIGUSR1 handler, which can take "
                 "the stop signal away from ftrain: use --stop-signal USR2 (and "
                 "sbatch --signal=USR2@...) or another NCCL version",
                 x, y, z);
    return 1;
}

int device_nccl_warning(char *buf, size_t cap)
{
#ifdef FTRAIN_NCCL
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess)
        return 0;
    return device_nccl_sigusr1_check(v, buf, cap);
#else
    (void)buf;
    (void)cap;
    return 0;
#endif
}

const char *device_strerror(int err)
{
    switch (err) {
    case DEVICE_OK: return "success";
    case DEVICE_EINVAL: return "invalid device";
    case DEVICE_ENODEV: return "no GPU available";
    }
    return "unknown error";
}

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
#include "parallel/device.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "util/util.h"

#ifdef FTRAIN_CUDA
#include <cuda_runtime_api.h>
#endif
#ifdef FTRAIN_NCCL
#include <nccl.h>
#endif

/* The oldest GPU the device code is built for (mk/cuda.mk's CUDA_GENCODE:
 * sm_80 machine code is the oldest image in it). */
#define FTRAIN_MIN_CC 80
/* A GPU's name, as cudaDeviceProp.name holds it. */
#define DEVICE_GPU_NAME_MAX 256

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

#ifdef FTRAIN_CUDA
/* Is the NVIDIA driver's library (libcuda.so.1, which the CUDA runtime
 * loads) on this machine? */
static int nvidia_driver_present(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (lib)
        dlclose(lib);
    return lib != NULL;
}
#endif

int device_gpu_count(char *why, size_t cap)
{
    if (why && cap)
        why[0] = '\0';
#ifdef FTRAIN_CUDA
    int count = 0;
    cudaError_t cerr = cudaGetDeviceCount(&count);
    if (cerr != cudaSuccess) {
        /* Without any NVIDIA driver (a CPU-only machine) the runtime says
         * "driver version is insufficient", which reads like a driver to
         * fix: say what it is.  With a driver, its answer stands. */
        if (why && cap && cerr == cudaErrorInsufficientDriver && !nvidia_driver_present())
            snprintf(why, cap, "no NVIDIA driver on this machine");
        else if (why && cap)
            snprintf(why, cap, "cudaGetDeviceCount: %s", cudaGetErrorString(cerr));
        /* Clear the sticky last error for later callers. */
        cudaGetLastError();
        return 0;
    }
    if (count <= 0 && why && cap)
        snprintf(why, cap, "cudaGetDeviceCount: 0 devices");
    return count > 0 ? count : 0;
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
    char name[DEVICE_GPU_NAME_MAX] = "unknown GPU";
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

/* Why no visible GPU can serve local rank local_rank, into cant (empty
 * when one can); *count gets the GPUs visible. */
static void gpu_unusable(int local_rank, int *count, char *cant, size_t cap)
{
    char reason[DEVICE_WHY_MAX] = "";
    cant[0] = '\0';
    *count = device_gpu_count(reason, sizeof reason);
    int capability = *count > 0 ? gpu_capability(local_rank % *count) : -1;
    if (*count == 0)
        snprintf(cant, cap, "no GPU visible (%s)", reason);
    else if (!device_nccl_built())
        snprintf(cant, cap, "built without NCCL, which the GPU path needs");
    else if (capability >= 0 && capability < FTRAIN_MIN_CC)
        snprintf(cant, cap, "GPU %d is sm_%d; this build carries code for sm_%d and newer",
                 local_rank % *count, capability, FTRAIN_MIN_CC);
}

int device_choose(const char *want, int local_rank, int local_size, device_kind_t *kind,
                  int *ordinal, char *why, size_t cap)
{
    char scratch[1];
    char names[DEVICE_WHY_MAX];

    if (!why || cap == 0) {
        why = scratch;
        cap = sizeof scratch;
    }
    why[0] = '\0';
    if (!kind || !ordinal || !want || local_rank < 0 || local_size <= local_rank)
        return util_fail(why, cap, DEVICE_EINVAL, "device: bad arguments");
    *kind = DEVICE_CPU;
    *ordinal = -1;
    int wanted = config_device_parse(want); /* the names are config's */
    if (wanted < 0)
        return util_fail(why, cap, DEVICE_EINVAL, "unknown device '%s' (expected %s)", want,
                         config_device_names(names, sizeof names));
    if (wanted == CONFIG_DEVICE_CPU) {
        snprintf(why, cap, "cpu: --device cpu");
        return DEVICE_OK;
    }
    if (!device_cuda_built() && wanted == CONFIG_DEVICE_CUDA)
        return util_fail(why, cap, DEVICE_ENODEV,
                         "--device cuda: built without CUDA (rebuild with CUDA=1)");
    if (!device_cuda_built()) {
        snprintf(why, cap, "cpu: built without CUDA");
        return DEVICE_OK;
    }
    /* Reasons no GPU can serve this rank: auto takes the CPU with the
     * reason, cuda fails with it. */
    char cant[DEVICE_WHY_MAX + 64];
    int count = 0;
    gpu_unusable(local_rank, &count, cant, sizeof cant);
    if (cant[0] && wanted == CONFIG_DEVICE_CUDA)
        return util_fail(why, cap, DEVICE_ENODEV, "--device cuda: %s", cant);
    if (cant[0]) {
        snprintf(why, cap, "cpu: %s", cant);
        return DEVICE_OK;
    }
    *kind = DEVICE_CUDA;
    *ordinal = local_rank % count;
    describe_gpu(count, local_rank, *ordinal, why, cap);
    return DEVICE_OK;
}

int device_gpu_ref(int ordinal, const char *host, device_gpu_ref_t *ref)
{
    if (!ref)
        return DEVICE_EINVAL;
    memset(ref, 0, sizeof *ref);
    ref->ordinal = ordinal;
    snprintf(ref->host, sizeof ref->host, "%s", host ? host : "");
    if (ordinal < 0)
        return DEVICE_OK;
#ifdef FTRAIN_CUDA
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, ordinal) == cudaSuccess) {
        memcpy(ref->uuid, prop.uuid.bytes, sizeof ref->uuid);
        ref->on_gpu = 1;
        return DEVICE_OK;
    }
    cudaGetLastError();
#endif
    return DEVICE_ENODEV;
}

int device_find_shared(const device_gpu_ref_t *refs, int n, int *rank_a, int *rank_b,
                       char *why, size_t cap)
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
            if (rank_a)
                *rank_a = i;
            if (rank_b)
                *rank_b = j;
            if (why && cap) {
                const unsigned char *uuid = refs[i].uuid;
                snprintf(why, cap, "ranks %d and %d would share one GPU (GPU-%02x%02x%02x%02x, "
                         "host %.*s, index %d): NCCL needs a GPU of its own for each rank",
                         i, j, uuid[0], uuid[1], uuid[2], uuid[3], WORLD_HOST_MAX - 1,
                         refs[i].host, refs[i].ordinal);
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
    int wrote = vsnprintf(buf + *len, cap - *len, fmt, ap);
    va_end(ap);
    if (wrote > 0)
        *len += (size_t)wrote;
    if (*len > cap)
        *len = cap;
}

/* An NCCL version. */
typedef struct {
    int major, minor, patch;
} nccl_version_t;

/* Split an NCCL version code (2.12.10 -> 21210; before 2.9 the code was
 * X*1000+Y*100+Z). */
static nccl_version_t nccl_split(int code)
{
    nccl_version_t version;
    if (code >= 10000) {
        version.major = code / 10000;
        version.minor = code / 100 % 100;
    } else {
        version.major = code / 1000;
        version.minor = code / 100 % 10;
    }
    version.patch = code % 100;
    return version;
}

const char *device_build_info(char *buf, size_t cap)
{
    size_t len = 0;
    if (!buf || cap == 0)
        return buf;
    buf[0] = '\0';
#ifdef FTRAIN_CUDA
    int runtime = 0, driver = 0;
    append(buf, cap, &len, "CUDA %d.%d", CUDART_VERSION / 1000,
           CUDART_VERSION % 1000 / 10);
    if (cudaRuntimeGetVersion(&runtime) == cudaSuccess)
        append(buf, cap, &len, " (runtime %d.%d", runtime / 1000, runtime % 1000 / 10);
    else
        append(buf, cap, &len, " (runtime unavailable");
    /* The driver version is 0 when no driver is installed. */
    if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0)
        append(buf, cap, &len, ", driver supports %d.%d)", driver / 1000,
               driver % 1000 / 10);
    else
        append(buf, cap, &len, ", no driver)");
#else
    append(buf, cap, &len, "CUDA: not built in");
#endif
#ifdef FTRAIN_NCCL
    int loaded = 0;
    nccl_version_t built = nccl_split(NCCL_VERSION_CODE);
    append(buf, cap, &len, "; NCCL %d.%d.%d", built.major, built.minor, built.patch);
    if (ncclGetVersion(&loaded) == ncclSuccess) {
        nccl_version_t version = nccl_split(loaded);
        append(buf, cap, &len, " (loaded %d.%d.%d)", version.major, version.minor,
               version.patch);
    }
#else
    append(buf, cap, &len, "; NCCL: not built in");
#endif
    return buf;
}

int device_nccl_sigusr1_check(int version_code, char *buf, size_t cap)
{
    if (version_code <= 0)
        return 0;
    nccl_version_t version = nccl_split(version_code);
    if (version.major != 2 || (version.minor != 12 && version.minor != 13))
        return 0;
    if (buf && cap)
        snprintf(buf, cap,
                 "NCCL %d.%d.%d installs its own SIGUSR1 handler, which can take "
                 "the stop signal away from ftrain: use --stop-signal USR2 (and "
                 "sbatch --signal=USR2@...) or another NCCL version",
                 version.major, version.minor, version.patch);
    return 1;
}

int device_nccl_warning(char *buf, size_t cap)
{
#ifdef FTRAIN_NCCL
    int loaded = 0;
    if (ncclGetVersion(&loaded) != ncclSuccess)
        return 0;
    return device_nccl_sigusr1_check(loaded, buf, cap);
#else
    (void)buf;
    (void)cap;
    return 0;
#endif
}

static const util_name_t device_errors[] = {
    {"success", DEVICE_OK},
    {"invalid device", DEVICE_EINVAL},
    {"no GPU available", DEVICE_ENODEV},
};

const char *device_strerror(int err)
{
    return util_name_of(device_errors, UTIL_COUNT(device_errors), err, "unknown error");
}

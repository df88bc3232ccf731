/*
 * device.c - checks --device selection (device.h) on a machine where no GPU
 * is visible, the --version build line against how this test was built, the
 * NCCL SIGUSR1 version check, and the "built without" stubs.
 *
 * CUDA_VISIBLE_DEVICES is emptied before any CUDA call, so the checks hold
 * on GPU machines too: CUDA then reports that no device is visible.  The GPU
 * side of device_choose is checked by gpu_kernels.c where a GPU exists.
 * device_find_shared (ranks on one physical GPU) is checked on made-up refs.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config/config.h"
#include "parallel/comm_nccl.h"
#include "parallel/device.h"
#include "gpu/gpu.h"
#include "tap.h"

#ifdef FTRAIN_CUDA
#define BUILT_CUDA 1
#else
#define BUILT_CUDA 0
#endif

/* Is the NVIDIA driver's library on this machine (a CPU-only one has none)? */
static int driver_present(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (lib)
        dlclose(lib);
    return lib != NULL;
}
#ifdef FTRAIN_NCCL
#define BUILT_NCCL 1
#else
#define BUILT_NCCL 0
#endif

int main(void)
{
    char why[512], info[512], warn[512];
    device_kind_t kind;
    int ord = 7, rc;

    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    plan(33 + 9 + 2);

    rc = device_choose("cpu", 0, 1, &kind, &ord, why, sizeof why);
    is_int(rc, DEVICE_OK, "--device cpu: ok");
    ok(kind == DEVICE_CPU && ord == -1, "--device cpu: the CPU, no ordinal");
    ok(strncmp(why, "cpu:", 4) == 0, "--device cpu: says cpu ('%s')", why);

    rc = device_choose("auto", 3, 4, &kind, &ord, why, sizeof why);
    is_int(rc, DEVICE_OK, "--device auto without a GPU: ok");
    ok(kind == DEVICE_CPU && ord == -1, "--device auto without a GPU: the CPU");
    ok(strncmp(why, "cpu:", 4) == 0, "auto: says cpu ('%s')", why);
    if (BUILT_CUDA && !driver_present())
        ok(strstr(why, "no GPU visible (no NVIDIA driver on this machine)") != NULL,
           "auto on a machine without a driver: says so, not CUDA's 'driver version is "
           "insufficient' ('%s')", why);
    else if (BUILT_CUDA)
        ok(strstr(why, "no GPU") && strstr(why, "cudaGetDeviceCount"),
           "auto: reason names no GPU and CUDA's answer");
    else
        ok(strstr(why, "built without CUDA") != NULL, "auto: reason is the build");

    ord = 5;
    rc = device_choose("cuda", 0, 1, &kind, &ord, why, sizeof why);
    is_int(rc, DEVICE_ENODEV, "--device cuda without a GPU: an error");
    ok(kind == DEVICE_CPU && ord == -1, "--device cuda failed: outputs reset");
    ok(strstr(why, BUILT_CUDA ? "no GPU visible" : "built without CUDA") != NULL,
       "--device cuda: reason given ('%s')", why);
    ok(strstr(device_strerror(rc), "GPU") != NULL, "device_strerror names it");

    rc = device_choose("bogus", 0, 1, &kind, &ord, why, sizeof why);
    is_int(rc, DEVICE_EINVAL, "--device bogus: invalid");
    ok(strstr(why, "'bogus'") && strstr(why, "auto, cpu or cuda"),
       "bogus: message quotes it and lists the choices ('%s')", why);
    is_int(device_choose("", 0, 1, &kind, &ord, why, sizeof why), DEVICE_EINVAL,
           "empty device: invalid");
    is_int(device_choose("auto", -1, 1, &kind, &ord, why, sizeof why), DEVICE_EINVAL,
           "negative local rank: invalid");
    is_int(device_choose("auto", 2, 2, &kind, &ord, why, sizeof why), DEVICE_EINVAL,
           "local rank not below the local size: invalid");
    is_int(device_choose("auto", 0, 1, NULL, &ord, why, sizeof why), DEVICE_EINVAL,
           "NULL kind: invalid");
    is_int(device_choose(NULL, 0, 1, &kind, &ord, NULL, 0), DEVICE_EINVAL,
           "NULL want and no message buffer: invalid, no crash");
    is_int(config_device_parse(config_device_name(CONFIG_DEVICE_CUDA)), CONFIG_DEVICE_CUDA,
           "cuda round trip (config's one table of the device names)");
    is_str(config_device_names(info, sizeof info), "auto, cpu or cuda", "device names");

    why[0] = 'x';
    is_int(device_gpu_count(why, sizeof why), 0, "no GPU counted");
    ok(why[0] != '\0' && why[0] != 'x', "gpu count gives a reason ('%s')", why);

    device_build_info(info, sizeof info);
    diag("build info: %s", info);
    is_int(device_cuda_built(), BUILT_CUDA, "device_cuda_built matches the build");
    is_int(device_nccl_built(), BUILT_NCCL, "device_nccl_built matches the build");
    ok((strstr(info, "CUDA: not built in") == NULL) == BUILT_CUDA,
       "build info says CUDA built in exactly when it is");
    ok((strstr(info, "NCCL: not built in") == NULL) == BUILT_NCCL,
       "build info says NCCL built in exactly when it is");
    {
        char small[8];
        device_build_info(small, sizeof small);
        ok(strlen(small) < sizeof small, "build info truncates to the buffer");
    }

    ok(device_nccl_sigusr1_check(21205, warn, sizeof warn) == 1 &&
           strstr(warn, "2.12.5") && strstr(warn, "SIGUSR1"),
       "NCCL 2.12.5: SIGUSR1 warning ('%s')", warn);
    ok(device_nccl_sigusr1_check(21319, warn, sizeof warn) == 1 &&
           strstr(warn, "2.13.19"), "NCCL 2.13.19: warning");
    ok(device_nccl_sigusr1_check(21400, warn, sizeof warn) == 0 &&
           device_nccl_sigusr1_check(21104, warn, sizeof warn) == 0 &&
           device_nccl_sigusr1_check(22809, warn, sizeof warn) == 0 &&
           device_nccl_sigusr1_check(2803, warn, sizeof warn) == 0 &&
           device_nccl_sigusr1_check(0, warn, sizeof warn) == 0,
       "NCCL 2.14, 2.11, 2.28, 2.8 and unknown: no warning");
    rc = device_nccl_warning(warn, sizeof warn);
    ok(rc == 0 || rc == 1, "warning for the loaded NCCL: %s", rc ? warn : "none");

    /* The GPU entry points fail cleanly with no GPU or no CUDA build. */
    gpu_ctx_t *ctx = (gpu_ctx_t *)&ord;
    rc = gpu_init(&ctx, 0);
    is_int(rc, BUILT_CUDA ? GPU_ENODEV : GPU_ENOTBUILT, "gpu_init: %s (%s)",
           gpu_strerror(rc), gpu_last_error());
    ok(ctx == NULL, "gpu_init failure leaves no context");
    /* The frees must accept NULL (every error path calls them on what it
     * may not have made).  They run in a child, so that a crash fails this
     * check instead of ending the test. */
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        gpu_close(NULL);
        gpu_model_free(NULL);
        gpu_optim_free(NULL);
        _exit(0);
    }
    int status = -1;
    int clean = pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
                WEXITSTATUS(status) == 0;
    ok(clean, "gpu frees accept NULL (child status %#x)", status);
    comm_t *c = (comm_t *)&ord;
    rc = comm_open_nccl(&c, NULL, 0, NULL, 10.0);
    ok(c == NULL && rc == (BUILT_NCCL ? COMM_EINVAL : COMM_EFAIL),
       "comm_open_nccl without a world: %s (%s)", comm_strerror(rc), comm_last_error());

    /* Ranks on one physical GPU, found from the gathered refs. */
    device_gpu_ref_t r[4];
    rc = device_gpu_ref(-1, "node-a", &r[0]);
    ok(rc == DEVICE_OK && !r[0].on_gpu && r[0].ordinal == -1 && strcmp(r[0].host, "node-a") == 0,
       "device_gpu_ref of the CPU: not on a GPU, host kept");
    rc = device_gpu_ref(0, "node-a", &r[1]);
    ok(rc == DEVICE_ENODEV && !r[1].on_gpu,
       "device_gpu_ref of a GPU that is not there: DEVICE_ENODEV, says the CPU");
    char longhost[200];
    memset(longhost, 'h', sizeof longhost - 1);
    longhost[sizeof longhost - 1] = '\0';
    device_gpu_ref(-1, longhost, &r[2]);
    ok(strlen(r[2].host) == sizeof r[2].host - 1, "a long host name is cut to the field");

    memset(r, 0, sizeof r);
    for (int i = 0; i < 4; i++) {
        snprintf(r[i].host, sizeof r[i].host, "gpu-node-%d", i / 2);
        r[i].ordinal = 0;
        r[i].on_gpu = 1;
        r[i].uuid[0] = 0xab;
        r[i].uuid[15] = (unsigned char)i; /* four different GPUs */
    }
    int a = -1, b = -1;
    char msg[512];
    ok(device_find_shared(r, 4, &a, &b, msg, sizeof msg) == 0 && msg[0] == '\0',
       "four ranks on four GPUs, each seen as index 0 (--gpus-per-task=1): nobody shares");
    r[3].uuid[15] = 1; /* rank 3 on rank 1's GPU */
    rc = device_find_shared(r, 4, &a, &b, msg, sizeof msg);
    ok(rc == 1 && a == 1 && b == 3, "ranks 1 and 3 on one GPU: found (%d, %d)", a, b);
    ok(strstr(msg, "ranks 1 and 3 would share one GPU (GPU-ab000000, host gpu-node-0, "
                   "index 0)") && strstr(msg, "NCCL needs a GPU of its own"),
       "the message names the ranks, the GPU and the host ('%s')", msg);
    r[3].on_gpu = 0;
    ok(device_find_shared(r, 4, &a, &b, NULL, 0) == 0,
       "the same UUID on a rank that runs on the CPU: no sharing");
    r[2].uuid[15] = 0;
    r[0].uuid[15] = 0;
    rc = device_find_shared(r, 4, &a, &b, msg, 10);
    ok(rc == 1 && a == 0 && b == 2 && strlen(msg) == 9,
       "the first pair in rank order (0, 2), message cut to the buffer");
    ok(device_find_shared(r, 1, &a, &b, msg, sizeof msg) == 0 &&
           device_find_shared(NULL, 4, &a, &b, msg, sizeof msg) == 0,
       "one rank, or no refs: no sharing");
    return done_testing();
}

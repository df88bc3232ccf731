/*
 * gpu_blas_load.c - cuBLAS is loaded when a GPU is first used, not when
 * ftrain starts (TAP; needs no GPU): a process linked as ftrain is has no
 * libcublas mapped at start (its constructors cost about 0.6 s of CPU in
 * every process, a CPU-only run's too); gpu_blas_load(), what gpu_init()
 * calls, maps it and finds every function ftrain calls; a second call is
 * the same load.  Built without CUDA: skipped, saying so.
 */
#include <stdio.h>
#include <string.h>

#include "gpu/gpu.h"
#include "tap.h"

#ifndef FTRAIN_CUDA
int main(void)
{
    skip_all("built without CUDA (make CUDA=0 or no nvcc)");
}
#else
/* 1 when a mapping of this process names NAME (/proc/self/maps). */
static int mapped(const char *name)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    int found = 0;
    if (!f)
        return -1;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, name) != NULL;
    fclose(f);
    return found;
}

int main(void)
{
    plan(4);
    is_int(mapped("libcublas"), 0, "at start no libcublas is mapped (it is not linked)");
    int rc = gpu_blas_load();
    if (!ok(rc == GPU_OK, "gpu_blas_load(): %s", rc ? gpu_last_error() : "ok"))
        diag("%s", gpu_last_error());
    is_int(mapped("libcublas"), 1, "after it, libcublas is mapped");
    is_int(gpu_blas_load(), GPU_OK, "a second call is the same load");
    return done_testing();
}
#endif

/*
 * gpu_internal.h - what gpu_model.cu, gpu_kernels.cu and gpu_blas.cu share
 * (not a public header): the context struct, error helpers and kernel
 * launchers.  The cuBLAS table is in gpu_blas.h.
 *
 * Error convention: a function keeps one `int rc` and one `fail:` label;
 * GPU_CUDA(call) / GPU_BLAS(call) record "file:line: call: message" in this
 * thread's error buffer (gpu_last_error()) and jump to fail with rc set.
 * Kernel launchers only enqueue; the caller checks with
 * GPU_CUDA(cudaGetLastError()) right after.
 */
#ifndef FTRAIN_GPU_INTERNAL_H
#define FTRAIN_GPU_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "gpu/gpu.h"

struct gpu_ctx {
    int ordinal;
    cudaStream_t stream;
    cublasHandle_t blas;
    unsigned int *d_max;   /* device scratch of gpu_maxabs */
    unsigned int *h_max;   /* pinned host copy of it */
};

/* Record a failed CUDA call; returns GPU_ECUDA (GPU_ENOMEM for allocation
 * failures). */
int gpu_fail_cuda(const char *file, int line, const char *call, cudaError_t e);
/* Record a failed cuBLAS call; returns GPU_ECUBLAS. */
int gpu_fail_cublas(const char *file, int line, const char *call,
                    cublasStatus_t s);
/* Record a plain message; returns rc. */
int gpu_fail_msg(int rc, const char *file, int line, const char *msg);
/* Record msg as it is, without file:line; returns rc. */
int gpu_fail_text(int rc, const char *msg);

#define GPU_CUDA(call)                                                       \
    do {                                                                     \
        cudaError_t e_ = (call);                                             \
        if (e_ != cudaSuccess) {                                             \
            rc = gpu_fail_cuda(__FILE__, __LINE__, #call, e_);               \
            goto fail;                                                       \
        }                                                                    \
    } while (0)

#define GPU_BLAS(call)                                                       \
    do {                                                                     \
        cublasStatus_t s_ = (call);                                          \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                   \
            rc = gpu_fail_cublas(__FILE__, __LINE__, #call, s_);             \
            goto fail;                                                       \
        }                                                                    \
    } while (0)

#define GPU_FAIL(code, msg)                                                  \
    do {                                                                     \
        rc = gpu_fail_msg((code), __FILE__, __LINE__, (msg));                \
        goto fail;                                                           \
    } while (0)

/* Activation modes of gpuk_bias_act. */
enum { GPUK_LINEAR = 0, GPUK_RELU = 1, GPUK_TANH = 2 };

/* z[i][j] = act(z[i][j] + b[j]) for an n x dout row-major z. */
void gpuk_bias_act(cudaStream_t s, float *z, const float *b, int n, int dout,
                   int mode);
/* Softmax cross-entropy per sample over n x k logits: loss[i], hit[i]; with
 * want_grad the logits are replaced by softmax - onehot. */
void gpuk_xent(cudaStream_t s, float *z, const int32_t *labels, int n, int k,
               int want_grad, double *loss, int *hit);
/* Mean squared error per sample; with want_grad the predictions are
 * replaced by 2 (z - y) / k. */
void gpuk_mse(cudaStream_t s, float *z, const float *y, int n, int k,
              int want_grad, double *loss, int *hit);
/* dst[i][0..w) = src[idx[i]][0..w) for i < n (rows of w 4-byte words). */
void gpuk_gather_rows(cudaStream_t s, void *dst, const void *src,
                      const int64_t *idx, int n, int w);
/* gb[j] += sum_i delta[i][j] (add) or gb[j] = that sum, in a fixed order
 * that depends on n only (16 row lanes, then the lanes in order): not the
 * CPU's order. */
void gpuk_colsum_acc(cudaStream_t s, float *gb, const float *delta, int n,
                     int dout, int add);
/* da *= act'(a) for cnt elements given the post-activation a. */
void gpuk_act_back(cudaStream_t s, float *da, const float *a, size_t cnt,
                   int mode);

#endif

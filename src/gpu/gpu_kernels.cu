/*
 * gpu_kernels.cu - the CUDA kernels of the GPU path: bias + activation,
 * losses, bias-gradient column sums, activation backward, max |g|, the
 * fixed-point gradient conversion and the SGD / Adam / AdamW updates.
 *
 * Bit-for-bit rules.  Every kernel that must match the CPU writes its float
 * and double arithmetic with the round-to-nearest intrinsics (__fadd_rn,
 * __fmul_rn, __fdiv_rn, __fsqrt_rn, __dmul_rn, ...), which the compiler never
 * fuses into an FMA, in the operation order of model.c / optim.c /
 * train_step.c; the build adds -fmad=false as well.  Conversions use the
 * round-to-nearest-even forms (__double2ll_rn, __ll2double_rn,
 * __double2float_rn) that llrint and the C casts use on the host.  The
 * transcendental functions (expf, tanhf, log) are CUDA's, accurate to a few
 * ulp but not glibc's bits, so the losses and the forward pass agree with the
 * CPU to float tolerance only.
 *
 * Determinism: no float atomics anywhere.  Per-sample kernels run one thread
 * per sample looping over outputs in order; column sums add 16 row lanes,
 * each in row order, then the lanes in lane order; max |g| combines blocks with an integer
 * atomicMax on the float bit patterns, which is exact and order-free.
 */
#include "gpu/gpu_internal.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "nn/optim.h"
}

#define GPUK_THREADS 256

/* Blocks for a grid-stride loop over n elements. */
static unsigned int gpuk_blocks(size_t n)
{
    size_t b = (n + GPUK_THREADS - 1) / GPUK_THREADS;
    if (b < 1)
        b = 1;
    return b > 65535 ? 65535u : (unsigned int)b;
}

#define GRID_STRIDE(i, n)                                                    \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);  \
         i += (size_t)blockDim.x * gridDim.x)

/* ---- forward ------------------------------------------------------------- */

/* One thread per column (its bias in a register), the rows strided over
 * gridDim.y: no division per element, and a warp's loads and stores are
 * consecutive floats of one row. */
__global__ static void k_bias_act(float *z, const float *b, int n, int dout,
                                  int mode)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= dout)
        return;
    const float bj = b[j];
    for (int i = blockIdx.y * blockDim.y + threadIdx.y; i < n;
         i += gridDim.y * blockDim.y) {
        float *zi = z + (size_t)i * (size_t)dout + j;
        float v = __fadd_rn(*zi, bj);
        if (mode == GPUK_RELU)
            v = v > 0.0f ? v : 0.0f;
        else if (mode == GPUK_TANH)
            v = tanhf(v);
        *zi = v;
    }
}

/* Blocks of 256 threads: up to 256 columns wide (a multiple of 32), the
 * rest rows; enough row blocks to fill the GPU, each looping over a few. */
void gpuk_bias_act(cudaStream_t s, float *z, const float *b, int n, int dout,
                   int mode)
{
    if (n <= 0 || dout <= 0)
        return;
    const int tx = dout >= GPUK_THREADS ? GPUK_THREADS : (dout + 31) / 32 * 32;
    const int ty = GPUK_THREADS / tx;
    const unsigned int gx = (unsigned int)((dout + tx - 1) / tx);
    int gy = (n + ty - 1) / ty;
    const int max_gy = (int)(8192u / gx) > 1 ? (int)(8192u / gx) : 1;
    if (gy > max_gy)
        gy = max_gy;
    k_bias_act<<<dim3(gx, (unsigned int)gy), dim3((unsigned int)tx, (unsigned int)ty), 0, s>>>(
        z, b, n, dout, mode);
}

/* ---- losses: one thread per sample, the CPU's loop order ----------------- */

__global__ static void k_xent(float *z, const int32_t *labels, int n, int k,
                              int want_grad, double *loss, int *hit)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float *zr = z + (size_t)i * (size_t)k;
    const int lab = labels[i];
    float mx = zr[0];
    int arg = 0;
    for (int j = 1; j < k; j++)
        if (zr[j] > mx) {
            mx = zr[j];
            arg = j;
        }
    hit[i] = arg == lab;
    const float zy = zr[lab];
    float s = 0.0f;
    if (want_grad) {
        for (int j = 0; j < k; j++) {
            float e = expf(__fsub_rn(zr[j], mx));
            zr[j] = e;
            s = __fadd_rn(s, e);
        }
        const float inv = __fdiv_rn(1.0f, s);
        for (int j = 0; j < k; j++)
            zr[j] = __fmul_rn(zr[j], inv);
        zr[lab] = __fsub_rn(zr[lab], 1.0f);
    } else {
        for (int j = 0; j < k; j++)
            s = __fadd_rn(s, expf(__fsub_rn(zr[j], mx)));
    }
    loss[i] = __dadd_rn(log((double)s), __dsub_rn((double)mx, (double)zy));
}

void gpuk_xent(cudaStream_t s, float *z, const int32_t *labels, int n, int k,
               int want_grad, double *loss, int *hit)
{
    unsigned int blocks = (unsigned int)((n + GPUK_THREADS - 1) / GPUK_THREADS);
    k_xent<<<blocks ? blocks : 1, GPUK_THREADS, 0, s>>>(z, labels, n, k,
                                                          want_grad, loss, hit);
}

__global__ static void k_mse(float *z, const float *y, int n, int k,
                             int want_grad, double *loss, int *hit)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float *zr = z + (size_t)i * (size_t)k;
    const float *t = y + (size_t)i * (size_t)k;
    const float g2 = __fdiv_rn(2.0f, (float)k);
    double l = 0.0;
    int all = 1;
    for (int j = 0; j < k; j++) {
        float d = __fsub_rn(zr[j], t[j]);
        l = __dadd_rn(l, __dmul_rn((double)d, (double)d));
        all &= fabsf(d) < 0.05f;
        if (want_grad)
            zr[j] = __fmul_rn(g2, d);
    }
    loss[i] = __ddiv_rn(l, (double)k);
    hit[i] = all;
}

void gpuk_mse(cudaStream_t s, float *z, const float *y, int n, int k,
              int want_grad, double *loss, int *hit)
{
    unsigned int blocks = (unsigned int)((n + GPUK_THREADS - 1) / GPUK_THREADS);
    k_mse<<<blocks ? blocks : 1, GPUK_THREADS, 0, s>>>(z, y, n, k, want_grad,
                                                         loss, hit);
}

/* ---- backward ------------------------------------------------------------ */

/* ---- gather -------------------------------------------------------------- */

/* One block row per sample; threads stride over its words. */
__global__ static void k_gather_rows(uint32_t *dst, const uint32_t *src,
                                     const int64_t *idx, int n, int w)
{
    for (int i = blockIdx.x; i < n; i += gridDim.x) {
        const uint32_t *from = src + (size_t)idx[i] * (size_t)w;
        uint32_t *to = dst + (size_t)i * (size_t)w;
        for (int c = threadIdx.x; c < w; c += blockDim.x)
            to[c] = from[c];
    }
}

void gpuk_gather_rows(cudaStream_t s, void *dst, const void *src,
                      const int64_t *idx, int n, int w)
{
    if (n <= 0 || w <= 0)
        return;
    unsigned int blocks = (unsigned int)(n < 65535 ? n : 65535);
    k_gather_rows<<<blocks, GPUK_THREADS, 0, s>>>((uint32_t *)dst, (const uint32_t *)src,
                                                  idx, n, w);
}

/* ---- bias gradient --------------------------------------------------------- */

/* gb[j] += (add) or = sum over rows i of delta[i][j].  A block takes 32 columns and
 * COLSUM_LANES row lanes: lane r adds rows r, r + LANES, ... in order from
 * 0, then lane 0 adds the lanes' sums in lane order and adds that to gb[j].
 * The order depends only on n (no atomics), so the bits are the same in
 * every run, and the work is spread over dout/32 blocks instead of one
 * thread per column walking all n rows (which left most of the GPU idle on
 * wide layers). */
#define COLSUM_LANES 16
__global__ static void k_colsum_acc(float *gb, const float *delta, int n,
                                    int dout, int add)
{
    __shared__ float part[COLSUM_LANES][33];
    int tx = threadIdx.x, ty = threadIdx.y;
    int j = blockIdx.x * 32 + tx;
    float acc = 0.0f;
    if (j < dout) {
        /* Eight loads in flight before their adds (in the same order as
         * one at a time): one block per 32 columns leaves few threads per
         * SM on a wide layer, so each must keep several loads going. */
        const size_t step = (size_t)COLSUM_LANES * (size_t)dout;
        const float *p = delta + (size_t)ty * (size_t)dout + (size_t)j;
        int i = ty;
        for (; i + 7 * COLSUM_LANES < n; i += 8 * COLSUM_LANES, p += 8 * step) {
            float v[8];
#pragma unroll
            for (int u = 0; u < 8; u++)
                v[u] = p[(size_t)u * step];
#pragma unroll
            for (int u = 0; u < 8; u++)
                acc = __fadd_rn(acc, v[u]);
        }
        for (; i < n; i += COLSUM_LANES, p += step)
            acc = __fadd_rn(acc, *p);
    }
    part[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && j < dout) {
        float sum = part[0][tx];
        for (int r = 1; r < COLSUM_LANES; r++)
            sum = __fadd_rn(sum, part[r][tx]);
        gb[j] = add ? __fadd_rn(gb[j], sum) : sum;
    }
}

void gpuk_colsum_acc(cudaStream_t s, float *gb, const float *delta, int n,
                     int dout, int add)
{
    unsigned int blocks = (unsigned int)((dout + 31) / 32);
    k_colsum_acc<<<blocks ? blocks : 1, dim3(32, COLSUM_LANES), 0, s>>>(gb, delta, n, dout,
                                                                         add);
}

__device__ static float act_back1(float d, float a, int mode)
{
    if (mode == GPUK_RELU)
        return a > 0.0f ? d : 0.0f;
    return __fmul_rn(d, __fsub_rn(1.0f, __fmul_rn(a, a)));
}

/* Four elements a thread (16-byte loads and stores) when cnt is a multiple
 * of 4 and both arrays start on 16 bytes; one otherwise.  The same
 * operation on every element either way. */
__global__ static void k_act_back4(float4 *da, const float4 *a, size_t cnt4, int mode)
{
    GRID_STRIDE(i, cnt4) {
        float4 d = da[i];
        const float4 x = a[i];
        d.x = act_back1(d.x, x.x, mode);
        d.y = act_back1(d.y, x.y, mode);
        d.z = act_back1(d.z, x.z, mode);
        d.w = act_back1(d.w, x.w, mode);
        da[i] = d;
    }
}

__global__ static void k_act_back(float *da, const float *a, size_t cnt,
                                  int mode)
{
    GRID_STRIDE(i, cnt) {
        da[i] = act_back1(da[i], a[i], mode);
    }
}

void gpuk_act_back(cudaStream_t s, float *da, const float *a, size_t cnt,
                   int mode)
{
    if (cnt % 4 == 0 && ((uintptr_t)da | (uintptr_t)a) % 16 == 0)
        k_act_back4<<<gpuk_blocks(cnt / 4), GPUK_THREADS, 0, s>>>(
            (float4 *)da, (const float4 *)a, cnt / 4, mode);
    else
        k_act_back<<<gpuk_blocks(cnt), GPUK_THREADS, 0, s>>>(da, a, cnt, mode);
}

/* ---- max |g| ------------------------------------------------------------- */

/* The bit pattern of |x| orders like |x| for every non-negative float, and
 * every NaN pattern is above +inf, so an unsigned max is the float max with
 * NaN propagating. */
__global__ static void k_maxabs(const float *d, size_t n, unsigned int *out)
{
    __shared__ unsigned int sm[GPUK_THREADS];
    unsigned int m = 0;
    GRID_STRIDE(i, n) {
        unsigned int b = __float_as_uint(d[i]) & 0x7fffffffu;
        m = b > m ? b : m;
    }
    sm[threadIdx.x] = m;
    __syncthreads();
    for (unsigned int w = GPUK_THREADS / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w && sm[threadIdx.x + w] > sm[threadIdx.x])
            sm[threadIdx.x] = sm[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        atomicMax(out, sm[0]);
}

extern "C" int gpu_maxabs(gpu_ctx_t *ctx, const float *d, size_t n, float *out)
{
    int rc = GPU_OK;
    unsigned int bits = 0;
    if (!ctx || !out || (n > 0 && !d))
        return GPU_EINVAL;
    GPU_CUDA(cudaMemsetAsync(ctx->d_max, 0, sizeof(unsigned int), ctx->stream));
    if (n > 0) {
        k_maxabs<<<gpuk_blocks(n), GPUK_THREADS, 0, ctx->stream>>>(d, n, ctx->d_max);
        GPU_CUDA(cudaGetLastError());
    }
    GPU_CUDA(cudaMemcpyAsync(ctx->h_max, ctx->d_max, sizeof(unsigned int),
                             cudaMemcpyDeviceToHost, ctx->stream));
    GPU_CUDA(cudaStreamSynchronize(ctx->stream));
    bits = *ctx->h_max;
    memcpy(out, &bits, sizeof bits);
    return GPU_OK;
fail:
    return rc;
}

/* ---- fixed point --------------------------------------------------------- */

__global__ static void k_fixed_acc(long long *acc, const float *g, size_t n,
                                   double scale)
{
    GRID_STRIDE(i, n) {
        acc[i] += __double2ll_rn(__dmul_rn((double)g[i], scale));
    }
}

extern "C" int gpu_fixed_accumulate(gpu_ctx_t *ctx, int64_t *acc,
                                    const float *g, size_t n, int e)
{
    int rc = GPU_OK;
    if (!ctx || (n > 0 && (!acc || !g)))
        return GPU_EINVAL;
    if (n == 0)
        return GPU_OK;
    k_fixed_acc<<<gpuk_blocks(n), GPUK_THREADS, 0, ctx->stream>>>(
        (long long *)acc, g, n, ldexp(1.0, e));
    GPU_CUDA(cudaGetLastError());
    return GPU_OK;
fail:
    return rc;
}

/* The first micro-batch of a step: a store, so the sum needs no clearing
 * pass first (0 + x is x exactly). */
__global__ static void k_fixed_store(long long *acc, const float *g, size_t n,
                                     double scale)
{
    GRID_STRIDE(i, n) {
        acc[i] = __double2ll_rn(__dmul_rn((double)g[i], scale));
    }
}

extern "C" int gpu_fixed_store(gpu_ctx_t *ctx, int64_t *acc, const float *g,
                               size_t n, int e)
{
    int rc = GPU_OK;
    if (!ctx || (n > 0 && (!acc || !g)))
        return GPU_EINVAL;
    if (n == 0)
        return GPU_OK;
    k_fixed_store<<<gpuk_blocks(n), GPUK_THREADS, 0, ctx->stream>>>(
        (long long *)acc, g, n, ldexp(1.0, e));
    GPU_CUDA(cudaGetLastError());
    return GPU_OK;
fail:
    return rc;
}

/* One rank, one micro-batch: the fixed-point sum is the one term, so the
 * store, the (identity) reduction and the conversion back are one pass with
 * the very operations of the three, and no int64 array. */
__global__ static void k_fixed_round(float *out, const float *g, size_t n,
                                     double scale, double inv)
{
    GRID_STRIDE(i, n) {
        long long q = __double2ll_rn(__dmul_rn((double)g[i], scale));
        out[i] = __double2float_rn(__dmul_rn(__ll2double_rn(q), inv));
    }
}

extern "C" int gpu_fixed_round(gpu_ctx_t *ctx, float *out, const float *g,
                               size_t n, int e, int64_t nstep)
{
    int rc = GPU_OK;
    if (!ctx || nstep < 1 || (n > 0 && (!out || !g)))
        return GPU_EINVAL;
    if (n == 0)
        return GPU_OK;
    k_fixed_round<<<gpuk_blocks(n), GPUK_THREADS, 0, ctx->stream>>>(
        out, g, n, ldexp(1.0, e), ldexp(1.0, -e) / (double)nstep);
    GPU_CUDA(cudaGetLastError());
    return GPU_OK;
fail:
    return rc;
}

__global__ static void k_fixed_to_float(float *g, const long long *acc,
                                        size_t n, double inv)
{
    GRID_STRIDE(i, n) {
        g[i] = __double2float_rn(__dmul_rn(__ll2double_rn(acc[i]), inv));
    }
}

extern "C" int gpu_fixed_to_float(gpu_ctx_t *ctx, float *g, const int64_t *acc,
                                  size_t n, int e, int64_t nstep)
{
    int rc = GPU_OK;
    if (!ctx || nstep < 1 || (n > 0 && (!acc || !g)))
        return GPU_EINVAL;
    if (n == 0)
        return GPU_OK;
    /* train_step.c: inv = ldexp(1.0, -e) / (double)nstep, on the host. */
    k_fixed_to_float<<<gpuk_blocks(n), GPUK_THREADS, 0, ctx->stream>>>(
        g, (const long long *)acc, n, ldexp(1.0, -e) / (double)nstep);
    GPU_CUDA(cudaGetLastError());
    return GPU_OK;
fail:
    return rc;
}

__global__ static void k_scale(float *g, size_t n, float s)
{
    GRID_STRIDE(i, n) {
        g[i] = __fmul_rn(g[i], s);
    }
}

extern "C" int gpu_scale(gpu_ctx_t *ctx, float *g, size_t n, float s)
{
    int rc = GPU_OK;
    if (!ctx || (n > 0 && !g))
        return GPU_EINVAL;
    if (n == 0)
        return GPU_OK;
    k_scale<<<gpuk_blocks(n), GPUK_THREADS, 0, ctx->stream>>>(g, n, s);
    GPU_CUDA(cudaGetLastError());
    return GPU_OK;
fail:
    return rc;
}

/* ---- optimizers: optim.c's formulas, one element per thread --------------- */

struct gpu_optim {
    gpu_ctx_t *ctx;
    optim_cfg_t cfg;
    size_t n;
    float *m;   /* device: SGD momentum or Adam first moment */
    float *v;   /* device: Adam second moment; NULL for SGD */
    int64_t updates;
};

/* Each kernel reads the gradient as grad * gs (optim.c's
 * optim_step_consume: gs is 1, an exact multiply, or the fast mode's 1/nstep)
 * and, when zero is not NULL, stores 0 where it read it (zero == grad): the
 * next step's sum starts from a cleared gradient without a pass of its own. */

/* Each element's loads come first and its stores last: zero may be grad
 * (and the compiler must assume any store may alias a later load), so a
 * store between the loads would hold the later loads back. */

/* FIXED kernels (gpu_optim_step_fixed) read the gradient element through
 * k_fixed_round's operations, in registers: the same bits as that pass
 * followed by the plain kernel with gs = 1, without the pass's write and
 * read of the whole gradient. */
struct fixed_k {
    double scale, inv;
};

template <bool FIXED>
__device__ static inline float grad_in(float g, const fixed_k &fx)
{
    if (!FIXED)
        return g;
    long long q = __double2ll_rn(__dmul_rn((double)g, fx.scale));
    return __double2float_rn(__dmul_rn(__ll2double_rn(q), fx.inv));
}

/* First SGD update: buf = g, p -= lr * g with g = grad * gs + wd * p. */
template <bool FIXED>
__global__ static void k_sgd_first(float *p, const float *grad, float gs, float *zero,
                                   float *buf, size_t n, float flr, float wd, fixed_k fx)
{
    GRID_STRIDE(i, n) {
        const float pi = p[i], gi = grad_in<FIXED>(grad[i], fx);
        float g = __fadd_rn(__fmul_rn(gi, gs), __fmul_rn(wd, pi));
        buf[i] = g;
        p[i] = __fsub_rn(pi, __fmul_rn(flr, g));
        if (zero)
            zero[i] = 0.0f;
    }
}

/* Later SGD updates: buf = mu * buf + (grad * gs + wd * p), p -= lr * buf. */
template <bool FIXED>
__global__ static void k_sgd(float *p, const float *grad, float gs, float *zero, float *buf,
                             size_t n, float flr, float mu, float wd, fixed_k fx)
{
    GRID_STRIDE(i, n) {
        const float pi = p[i], gi = grad_in<FIXED>(grad[i], fx), bi = buf[i];
        float b = __fadd_rn(__fmul_rn(mu, bi),
                            __fadd_rn(__fmul_rn(gi, gs), __fmul_rn(wd, pi)));
        buf[i] = b;
        p[i] = __fsub_rn(pi, __fmul_rn(flr, b));
        if (zero)
            zero[i] = 0.0f;
    }
}

/* Adam / AdamW with the constants optim.c computes once per step. */
struct adam_k {
    float gs, shrink, l2, b1, c1, b2, c2, eps, ss, rs;
};

/* One element: p, m, v updated in place from gradient element gi. */
__device__ static void adam1(float &p, float &m, float &v, float gi, const adam_k &k)
{
    float w = __fmul_rn(p, k.shrink);
    float g = __fadd_rn(__fmul_rn(gi, k.gs), __fmul_rn(k.l2, w));
    float mi = __fadd_rn(__fmul_rn(k.b1, m), __fmul_rn(k.c1, g));
    float vi = __fadd_rn(__fmul_rn(k.b2, v), __fmul_rn(k.c2, __fmul_rn(g, g)));
    float den = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), k.rs), k.eps);
    m = mi;
    v = vi;
    p = __fsub_rn(w, __fmul_rn(k.ss, __fdiv_rn(mi, den)));
}

template <bool FIXED>
__global__ static void k_adam(float *p, const float *grad, float *zero, float *m,
                              float *v, size_t n, adam_k k, fixed_k fx)
{
    GRID_STRIDE(i, n) {
        float pi = p[i], mi = m[i], vi = v[i];
        const float gi = grad_in<FIXED>(grad[i], fx);
        adam1(pi, mi, vi, gi, k);
        m[i] = mi;
        v[i] = vi;
        p[i] = pi;
        if (zero)
            zero[i] = 0.0f;
    }
}

/* Four elements a thread, 16-byte loads and stores (every array on 16
 * bytes), no clearing: the same arithmetic per element as k_adam. */
template <bool FIXED>
__global__ static void k_adam4(float4 *p, const float4 *grad, float4 *m, float4 *v,
                               size_t n4, adam_k k, fixed_k fx)
{
    GRID_STRIDE(i, n4) {
        float4 pi = p[i], mi = m[i], vi = v[i];
        const float4 gi = grad[i];
        adam1(pi.x, mi.x, vi.x, grad_in<FIXED>(gi.x, fx), k);
        adam1(pi.y, mi.y, vi.y, grad_in<FIXED>(gi.y, fx), k);
        adam1(pi.z, mi.z, vi.z, grad_in<FIXED>(gi.z, fx), k);
        adam1(pi.w, mi.w, vi.w, grad_in<FIXED>(gi.w, fx), k);
        m[i] = mi;
        v[i] = vi;
        p[i] = pi;
    }
}

extern "C" int gpu_optim_create(gpu_optim_t **out, gpu_ctx_t *ctx,
                                const optim_cfg_t *cfg, size_t nparams)
{
    int rc = GPU_OK;
    gpu_optim_t *go = NULL;
    optim_t *probe = NULL;

    if (!out)
        return GPU_EINVAL;
    *out = NULL;
    if (!ctx || !cfg || nparams == 0 || nparams > SIZE_MAX / sizeof(float))
        return GPU_EINVAL;
    /* optim_init is the one judge of a valid configuration; a 1-element
     * probe keeps the rules in one place. */
    if (optim_init(&probe, cfg, 1, NULL, 0) != OPTIM_OK)
        return gpu_fail_msg(GPU_EINVAL, __FILE__, __LINE__,
                            "gpu_optim_create: bad optimizer configuration");
    optim_free(probe);

    go = (gpu_optim_t *)calloc(1, sizeof(*go));
    if (!go)
        GPU_FAIL(GPU_ENOMEM, "gpu_optim_create: out of host memory");
    go->ctx = ctx;
    go->cfg = *cfg;
    go->n = nparams;
    GPU_CUDA(cudaSetDevice(ctx->ordinal));
    GPU_CUDA(cudaMalloc((void **)&go->m, nparams * sizeof(float)));
    GPU_CUDA(cudaMemsetAsync(go->m, 0, nparams * sizeof(float), ctx->stream));
    if (cfg->kind != OPT_SGD) {
        GPU_CUDA(cudaMalloc((void **)&go->v, nparams * sizeof(float)));
        GPU_CUDA(cudaMemsetAsync(go->v, 0, nparams * sizeof(float), ctx->stream));
    }
    GPU_CUDA(cudaStreamSynchronize(ctx->stream));
    *out = go;
    return GPU_OK;
fail:
    gpu_optim_free(go);
    return rc;
}

extern "C" void gpu_optim_free(gpu_optim_t *go)
{
    if (!go)
        return;
    cudaFree(go->m);
    cudaFree(go->v);
    free(go);
}

extern "C" int gpu_optim_step(gpu_optim_t *go, float *dparams, const float *dgrad,
                              int64_t step)
{
    return gpu_optim_step_consume(go, dparams, (float *)dgrad, 1.0f, 0, step);
}

/* The kernels of one update, FIXED or not (fx then unused). */
template <bool FIXED>
static void launch_step(gpu_optim_t *go, float *dparams, const float *dgrad, float gs,
                        float *zero, fixed_k fx, int64_t step)
{
    const optim_cfg_t *c = &go->cfg;
    const double lr = optim_lr(c, step);
    cudaStream_t s = go->ctx->stream;
    const unsigned int blocks = gpuk_blocks(go->n);

    if (c->kind == OPT_SGD) {
        const float flr = (float)lr, mu = (float)c->momentum;
        const float wd = (float)c->weight_decay;
        if (go->updates == 0)
            k_sgd_first<FIXED><<<blocks, GPUK_THREADS, 0, s>>>(dparams, dgrad, gs, zero,
                                                               go->m, go->n, flr, wd, fx);
        else
            k_sgd<FIXED><<<blocks, GPUK_THREADS, 0, s>>>(dparams, dgrad, gs, zero, go->m,
                                                         go->n, flr, mu, wd, fx);
        return;
    }
    /* The scalars exactly as optim.c's step_adam computes them. */
    const double t = (double)step + 1.0;
    const double bc1 = 1.0 - pow(c->beta1, t);
    const double bc2 = 1.0 - pow(c->beta2, t);
    adam_k k;
    k.gs = gs;
    k.b1 = (float)c->beta1;
    k.c1 = (float)(1.0 - c->beta1);
    k.b2 = (float)c->beta2;
    k.c2 = (float)(1.0 - c->beta2);
    k.eps = (float)c->eps;
    k.ss = (float)(lr / bc1);
    k.rs = (float)(1.0 / sqrt(bc2));
    const int adamw = c->kind == OPT_ADAMW;
    k.shrink = adamw ? (float)(1.0 - lr * c->weight_decay) : 1.0f;
    k.l2 = adamw ? 0.0f : (float)c->weight_decay;
    const uintptr_t addr = (uintptr_t)dparams | (uintptr_t)dgrad | (uintptr_t)go->m |
                           (uintptr_t)go->v;
    /* Whole groups of four by the vector kernel, the tail by the other. */
    const size_t n4 = !zero && addr % 16 == 0 ? go->n / 4 : 0, done = 4 * n4;
    if (n4 > 0)
        k_adam4<FIXED><<<gpuk_blocks(n4), GPUK_THREADS, 0, s>>>(
            (float4 *)dparams, (const float4 *)dgrad, (float4 *)go->m, (float4 *)go->v, n4,
            k, fx);
    if (done < go->n)
        k_adam<FIXED><<<gpuk_blocks(go->n - done), GPUK_THREADS, 0, s>>>(
            dparams + done, dgrad + done, zero ? zero + done : NULL, go->m + done,
            go->v + done, go->n - done, k, fx);
}

extern "C" int gpu_optim_step_consume(gpu_optim_t *go, float *dparams, float *dgrad,
                                      float gs, int clear, int64_t step)
{
    int rc = GPU_OK;
    if (!go || !dparams || !dgrad || step < 0)
        return GPU_EINVAL;
    launch_step<false>(go, dparams, dgrad, gs, clear ? dgrad : NULL, fixed_k{0.0, 0.0}, step);
    GPU_CUDA(cudaGetLastError());
    go->updates++;
    return GPU_OK;
fail:
    return rc;
}

extern "C" int gpu_optim_step_fixed(gpu_optim_t *go, float *dparams, const float *g, int e,
                                    int64_t nstep, int64_t step)
{
    int rc = GPU_OK;
    if (!go || !dparams || !g || step < 0 || nstep < 1)
        return GPU_EINVAL;
    /* gpu_fixed_round's two factors, then the update's gs = 1 (exact). */
    const fixed_k fx = {ldexp(1.0, e), ldexp(1.0, -e) / (double)nstep};
    launch_step<true>(go, dparams, g, 1.0f, NULL, fx, step);
    GPU_CUDA(cudaGetLastError());
    go->updates++;
    return GPU_OK;
fail:
    return rc;
}

extern "C" float *gpu_optim_state_m(gpu_optim_t *go)
{
    return go ? go->m : NULL;
}

extern "C" float *gpu_optim_state_v(gpu_optim_t *go)
{
    return go ? go->v : NULL;
}

extern "C" int64_t gpu_optim_updates(const gpu_optim_t *go)
{
    return go ? go->updates : 0;
}

extern "C" void gpu_optim_set_updates(gpu_optim_t *go, int64_t n)
{
    if (go && n >= 0)
        go->updates = n;
}

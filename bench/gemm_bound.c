/*
 * gemm_bound.c - the matrix products of one fast-mode training step alone,
 * for `make bench` section 1 (bench/run.sh): the samples/s a step could
 * reach if everything but OpenBLAS's sgemm cost nothing.
 *
 *   gemm_bound [--dims 784,256,128,10] [--batch 128] [--threads 1]
 *              [--steps 400] [--repeat 5]
 *
 * One step makes the sgemm calls of model.c's forward and backward passes,
 * with the same shapes, transposes, leading dimensions, betas and OpenBLAS
 * thread count, on buffers laid out as the model's are:
 *
 *   forward, each layer l:   Z = A_l W_l^T           (n x dout, beta 0)
 *   backward, l = L-1 .. 0:  dW_l += delta^T A_l     (dout x din, beta 1)
 *                            dA_l = delta W_l        (n x din, beta 0; l > 0)
 *
 * A run is one untimed step (OpenBLAS allocates its buffers on first use)
 * and then `steps` timed steps; the best of `repeat` runs is the bound.
 * Prints one line that bench/run.sh parses:
 *
 *   gemm_bound: S samples/s dims D batch B threads T steps N runs R1 R2 ...
 *
 * Exit status: 0, 2 on a bad argument, 1 when out of memory.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_clock.h"

#define GB_MAX_LAYERS 16

typedef struct {
    int nlayers;
    int dims[GB_MAX_LAYERS + 1];
    int batch, threads, steps, repeat;
} gb_args_t;

/* The step's operands: the input batch, each layer's weights, gradient and
 * output, and two delta buffers, as separate allocations like model.c's. */
typedef struct {
    float *input;
    float *weights[GB_MAX_LAYERS], *grad_w[GB_MAX_LAYERS];
    float *act[GB_MAX_LAYERS + 1];
    float *work[2];
} gb_bufs_t;

static void usage(void)
{
    fprintf(stderr, "usage: gemm_bound [--dims 784,256,128,10] [--batch 128] [--threads 1] "
                    "[--steps 400] [--repeat 5]\n");
    exit(2);
}

/* A whole number in [1, max] from text, or the usage message. */
static int parse_int(const char *text, int max)
{
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (!text[0] || (*end && *end != ',') || v < 1 || v > max)
        usage();
    return (int)v;
}

static void parse_dims(const char *text, gb_args_t *a)
{
    a->nlayers = -1;
    for (const char *p = text; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
        if (a->nlayers >= GB_MAX_LAYERS)
            usage();
        a->dims[++a->nlayers] = parse_int(p, 1 << 24);
    }
    if (a->nlayers < 1)
        usage();
}

static void parse_args(int argc, char **argv, gb_args_t *a)
{
    parse_dims("784,256,128,10", a);
    a->batch = 128;
    a->threads = 1;
    a->steps = 400;
    a->repeat = 5;
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc)
            usage();
        if (!strcmp(argv[i], "--dims"))
            parse_dims(argv[i + 1], a);
        else if (!strcmp(argv[i], "--batch"))
            a->batch = parse_int(argv[i + 1], 1 << 20);
        else if (!strcmp(argv[i], "--threads"))
            a->threads = parse_int(argv[i + 1], 1024);
        else if (!strcmp(argv[i], "--steps"))
            a->steps = parse_int(argv[i + 1], 1 << 30);
        else if (!strcmp(argv[i], "--repeat"))
            a->repeat = parse_int(argv[i + 1], 1000);
        else
            usage();
    }
}

/* count floats, uniform in [-scale, scale): normal numbers, no denormals. */
static float *filled(size_t count, float scale, unsigned *seed)
{
    float *p = malloc(count * sizeof *p);
    if (!p) {
        fprintf(stderr, "gemm_bound: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < count; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        p[i] = scale * ((float)(*seed >> 8) * (1.0f / 8388608.0f) - 1.0f);
    }
    return p;
}

static void alloc_bufs(const gb_args_t *a, gb_bufs_t *b)
{
    unsigned seed = 1;
    size_t n = (size_t)a->batch, widest = 0;
    b->input = filled(n * (size_t)a->dims[0], 1.0f, &seed);
    for (int l = 0; l < a->nlayers; l++) {
        size_t din = (size_t)a->dims[l], dout = (size_t)a->dims[l + 1];
        b->weights[l] = filled(dout * din, 0.05f, &seed);
        b->grad_w[l] = filled(dout * din, 0.01f, &seed);
        b->act[l + 1] = filled(n * dout, 0.5f, &seed);
        if (l + 1 < a->nlayers && dout > widest)
            widest = dout;
    }
    b->work[0] = widest ? filled(n * widest, 0.01f, &seed) : NULL;
    b->work[1] = widest ? filled(n * widest, 0.01f, &seed) : NULL;
}

/* The sgemm calls of one step of model.c, in its order. */
static void gemm_step(const gb_args_t *a, gb_bufs_t *b)
{
    const int n = a->batch, nlayers = a->nlayers;
    for (int l = 0; l < nlayers; l++) {
        const int din = a->dims[l], dout = a->dims[l + 1];
        const float *in = l == 0 ? b->input : b->act[l];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, dout, din, 1.0f, in, din,
                    b->weights[l], din, 0.0f, b->act[l + 1], dout);
    }
    const float *delta = b->act[nlayers];
    int ping = 0;
    for (int l = nlayers - 1; l >= 0; l--) {
        const int din = a->dims[l], dout = a->dims[l + 1];
        const float *in = l == 0 ? b->input : b->act[l];
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, dout, din, n, 1.0f, delta, dout,
                    in, din, 1.0f, b->grad_w[l], din);
        if (l == 0)
            break;
        float *dact = b->work[ping];
        ping ^= 1;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, din, dout, 1.0f, delta, dout,
                    b->weights[l], din, 0.0f, dact, din);
        delta = dact;
    }
}

int main(int argc, char **argv)
{
    gb_args_t a;
    gb_bufs_t b;
    parse_args(argc, argv, &a);
    openblas_set_num_threads(a.threads);
    alloc_bufs(&a, &b);
    gemm_step(&a, &b);

    double best = 0;
    char runs[4096] = "";
    size_t len = 0;
    for (int r = 0; r < a.repeat; r++) {
        double t0 = now_s();
        for (int s = 0; s < a.steps; s++)
            gemm_step(&a, &b);
        double sps = (double)a.batch * a.steps / (now_s() - t0);
        best = sps > best ? sps : best;
        if (len < sizeof runs - 16)
            len += (size_t)snprintf(runs + len, sizeof runs - len, " %.0f", sps);
    }
    printf("gemm_bound: %.0f samples/s dims", best);
    for (int l = 0; l <= a.nlayers; l++)
        printf("%c%d", l ? '-' : ' ', a.dims[l]);
    printf(" batch %d threads %d steps %d runs%s\n", a.batch, a.threads, a.steps, runs);
    return 0;
}

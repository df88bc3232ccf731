/*
 * ckpt_bench.c - checkpoint save and load speed of the ckpt library, for
 * `make bench` (bench/run.sh).
 *
 *   ckpt_bench save ROOT MB      every rank builds the same state of about MB
 *                                MiB and saves it with ckpt_save(), default
 *                                options, as step 1 under ROOT
 *   ckpt_bench load STEPDIR      each of M ranks opens the checkpoint and reads
 *                                its 1/M byte range with ckpt_read_range(),
 *                                then checks the bytes against the generator
 *   ckpt_bench raw FILE MB       write the same state's flat bytes to FILE and
 *                                its tensor table to FILE.json (for zstd and
 *                                the PyTorch peer)
 *
 * Environment for save: BENCH_CKPT_LEVEL (zstd level, 0 stored),
 * BENCH_CKPT_THREADS (encoder threads per rank; default cores / ranks),
 * BENCH_CKPT_DIRECT=0 (buffered writes, as --ckpt-buffered), BENCH_CKPT_ADAPT=0
 * (never store frames to keep up with the disk), BENCH_CKPT_FSYNC=0
 * (no fsync: the CPU-bound rate, for profiling), BENCH_CKPT_PHASES=1 (each
 * rank prints, on stderr, its shard phase's wall and CPU time, context
 * switches and page faults, and the commit's wait).  Environment for load:
 * BENCH_LOAD_INTO=existing (read into memory allocated and touched before
 * the timer, as a resume reads into existing tensors; default: fresh memory
 * allocated inside the timer, as torch.load does), BENCH_READ_THREADS
 * (decoding threads per reader; default cores / readers).
 *
 * Run under mpirun for several ranks; without a launcher it is a world of one.
 * Rank 0 prints one line of "key value" pairs that bench/run.sh parses:
 *
 *   ckpt_save: ranks W raw_bytes B stored_bytes S seconds T mb_per_s X
 *   ckpt_load: readers M saved_by W raw_bytes B seconds T mb_per_s X verified yes
 *              into fresh|existing
 *
 * MB/s are 10^6 bytes of raw state per second, as dd prints them.  The save
 * is timed from a barrier with the state in memory to the return of
 * ckpt_save() on every rank (committed: shards, manifest and directories
 * fsync'd).  The load is timed from a barrier to every rank holding its range,
 * ckpt_open() included; the verification afterwards is not timed.
 *
 * The state.  Three groups shaped like an MLP's parameters and its Adam
 * moments, each four [rows, 4096] weight matrices and four [4096] biases:
 *
 *   model.*    approximately Gaussian, sigma 0.02 (weights) and 0.01 (biases)
 *   optim.m.*  approximately Gaussian, sigma 1e-4
 *   optim.v.*  the square of an approximately Gaussian value of sigma 1e-4
 *
 * "Approximately Gaussian" is the sum of four uniform 16-bit lanes of
 * splitmix64(seed + element index), centred and scaled to unit variance
 * (Irwin-Hall with four terms): trained-weight-like floats with full random
 * mantissas, neither zeros nor random bit patterns, and any byte range can be
 * regenerated on its own for the check.
 *
 * Exit status: 0, 1 on any failure (message on stderr), 2 usage.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>

#include "ftrain/ckpt.h"
#include "parallel/comm.h"
#include "state/state.h"
#include "parallel/world.h"

#include "bench_clock.h"

#define BENCH_COLS 4096
#define BENCH_LAYERS 4
#define BENCH_GROUPS 3
#define BENCH_NT (BENCH_GROUPS * BENCH_LAYERS * 2)
#define BENCH_SEED UINT64_C(0x5eedf00d)

/* Print where and what failed, then leave with status 1 (a tool, not a
 * library: exiting here is fine). */
#define BENCH_CHECK(cond, ...)                                              \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "ckpt_bench: %s:%d: ", __FILE__, __LINE__);     \
            fprintf(stderr, __VA_ARGS__);                                   \
            fputc('\n', stderr);                                            \
            exit(1);                                                        \
        }                                                                   \
    } while (0)

static double tv_s(const struct timeval *tv)
{
    return (double)tv->tv_sec + tv->tv_usec * 1e-6;
}

static uint64_t splitmix64(uint64_t x)
{
    x += UINT64_C(0x9e3779b97f4a7c15);
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

/* A unit-variance, approximately Gaussian value for element i. */
static float gauss_at(uint64_t i)
{
    uint64_t h = splitmix64(BENCH_SEED + i);
    uint32_t s = (uint32_t)(h & 0xffff) + (uint32_t)((h >> 16) & 0xffff) +
                 (uint32_t)((h >> 32) & 0xffff) + (uint32_t)(h >> 48);
    /* Four uniforms on [0, 1) sum to mean 2, variance 4/12. */
    return ((float)s * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

/* How a tensor's values are made, from its name. */
static void kind_of(const char *name, float *sigma, int *square)
{
    int bias = strlen(name) > 2 && strcmp(name + strlen(name) - 2, ".b") == 0;
    *square = 0;
    if (strncmp(name, "optim.m.", 8) == 0) {
        *sigma = 1e-4f;
    } else if (strncmp(name, "optim.v.", 8) == 0) {
        *sigma = 1e-4f;
        *square = 1;
    } else {
        *sigma = bias ? 0.01f : 0.02f;
    }
}

/* The tensor table of a state of about mb MiB; returns the total bytes. */
static uint64_t bench_layout(ckpt_tensor_t *t, int mb)
{
    static const char *group[BENCH_GROUPS] = {"model", "optim.m", "optim.v"};
    int64_t per = (int64_t)mb * 1048576 / (BENCH_NT * BENCH_COLS * 4 / 2);
    int64_t rows = per > 2 ? per - 1 : 1;
    size_t k = 0;
    memset(t, 0, BENCH_NT * sizeof *t);
    for (int g = 0; g < BENCH_GROUPS; g++)
        for (int l = 0; l < BENCH_LAYERS; l++) {
            snprintf(t[k].name, CKPT_NAME_MAX, "%s.l%d.w", group[g], l);
            t[k].dtype = CKPT_F32;
            t[k].ndim = 2;
            t[k].shape[0] = rows;
            t[k].shape[1] = BENCH_COLS;
            k++;
            snprintf(t[k].name, CKPT_NAME_MAX, "%s.l%d.b", group[g], l);
            t[k].dtype = CKPT_F32;
            t[k].ndim = 1;
            t[k].shape[0] = BENCH_COLS;
            k++;
        }
    uint64_t total = 0;
    int rc = ckpt_layout(t, k, &total);
    BENCH_CHECK(rc == CKPT_OK, "layout: %s", ckpt_last_error());
    return total;
}

/* Fill dst with the expected bytes [off, off+len) of the flat space described
 * by the n tensors t (padding between tensors is zero). */
static void bench_expect(const ckpt_tensor_t *t, size_t n, uint64_t off, uint64_t len,
                         unsigned char *dst)
{
    memset(dst, 0, len);
    for (size_t k = 0; k < n; k++) {
        uint64_t a = t[k].offset, b = t[k].offset + t[k].nbytes;
        uint64_t lo = a > off ? a : off, hi = b < off + len ? b : off + len;
        if (t[k].dtype != CKPT_F32 || lo >= hi)
            continue;
        float sigma;
        int square;
        kind_of(t[k].name, &sigma, &square);
        /* Whole elements only: ranges may cut an element in two. */
        uint64_t e0 = (lo - a) / 4, e1 = (hi - a + 3) / 4;
        for (uint64_t e = e0; e < e1; e++) {
            float z = gauss_at(t[k].offset / 4 + e) * sigma;
            float v = square ? z * z : z;
            unsigned char bytes[4];
            memcpy(bytes, &v, 4);
            for (int q = 0; q < 4; q++) {
                uint64_t pos = a + e * 4 + (uint64_t)q;
                if (pos >= lo && pos < hi)
                    dst[pos - off] = bytes[q];
            }
        }
    }
}

static int parse_mb(const char *s)
{
    char *end = NULL;
    long v = strtol(s, &end, 10);
    BENCH_CHECK(end != s && *end == '\0' && v >= 1 && v <= 1048576,
                "size '%s': expected whole MiB in [1, 1048576]", s);
    return (int)v;
}

static int cmd_save(comm_t *c, const char *root, int mb)
{
    ckpt_tensor_t t[BENCH_NT];
    uint64_t total = bench_layout(t, mb);
    unsigned char *buf = malloc(total);
    BENCH_CHECK(buf != NULL, "out of memory for %llu bytes", (unsigned long long)total);
    bench_expect(t, BENCH_NT, 0, total, buf);
    for (size_t k = 0; k < BENCH_NT; k++)
        t[k].data = buf + t[k].offset;
    mkdir(root, 0755);

    ckpt_opts_t opts;
    ckpt_opts_default(&opts);
    /* Each rank gets its share of the node's cores, as ftrain does. */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    opts.threads = cpus / comm_size(c) > 1 ? (int)(cpus / comm_size(c)) : 1;
    const char *th = getenv("BENCH_CKPT_THREADS"); /* encoder threads per rank */
    if (th && *th)
        opts.threads = atoi(th);
    const char *lv = getenv("BENCH_CKPT_LEVEL"); /* 0: stored frames */
    if (lv && *lv)
        opts.level = atoi(lv);
    const char *fs = getenv("BENCH_CKPT_FSYNC"); /* 0: no fsync, CPU-bound rate */
    if (fs && *fs)
        opts.fsync = atoi(fs) != 0;
    const char *ad = getenv("BENCH_CKPT_ADAPT"); /* 0: never store frames to keep up */
    if (ad && *ad)
        opts.adapt = atoi(ad) != 0;
    const char *dr = getenv("BENCH_CKPT_DIRECT"); /* 0: buffered (--ckpt-buffered) */
    if (dr && *dr)
        opts.direct = atoi(dr) != 0;
    ckpt_coll_t coll = state_ckpt_coll(c); /* ftrain's own commit collectives */
    BENCH_CHECK(comm_barrier(c) == COMM_OK, "barrier: %s", comm_last_error());
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    double t0 = now_s();
    /* The two phases of ckpt_save(), timed apart: this rank's shard, then the
     * collective commit (waiting for the slowest rank, rank 0's manifest). */
    ckpt_shard_info_t info;
    memset(&info, 0, sizeof info);
    int rc = ckpt_shard_write(root, 1, comm_rank(c), comm_size(c), t, BENCH_NT, &opts, &info);
    double t1 = now_s();
    getrusage(RUSAGE_SELF, &ru1);
    rc = ckpt_commit(root, 1, t, BENCH_NT, "{\"bench\":true}", &opts, rc, &info, &coll);
    double t2 = now_s();
    if (getenv("BENCH_CKPT_PHASES"))
        fprintf(stderr, "ckpt_phases: rank %d shard %.3f s (cpu user %.3f s sys %.3f s, "
                "switches %ld voluntary %ld involuntary, minor faults %ld) commit %.3f s\n", comm_rank(c),
                t1 - t0, tv_s(&ru1.ru_utime) - tv_s(&ru0.ru_utime),
                tv_s(&ru1.ru_stime) - tv_s(&ru0.ru_stime), ru1.ru_nvcsw - ru0.ru_nvcsw,
                ru1.ru_nivcsw - ru0.ru_nivcsw, ru1.ru_minflt - ru0.ru_minflt, t2 - t1);
    BENCH_CHECK(rc == CKPT_OK, "ckpt_save %s: %s: %s", root, ckpt_strerror(rc),
                ckpt_last_error());
    BENCH_CHECK(comm_barrier(c) == COMM_OK, "barrier: %s", comm_last_error());
    double dt = now_s() - t0;

    if (comm_rank(c) == 0) {
        char dir[CKPT_PATH_MAX], name[64];
        ckpt_step_dirname(1, name, sizeof name);
        snprintf(dir, sizeof dir, "%s/%s", root, name);
        ckpt_t *ck = NULL;
        rc = ckpt_open(dir, &ck);
        BENCH_CHECK(rc == CKPT_OK, "ckpt_open %s: %s", dir, ckpt_last_error());
        uint64_t stored = 0;
        for (int i = 0; i < ckpt_world_size(ck); i++)
            stored += ckpt_shard_at(ck, i)->file_bytes;
        ckpt_close(ck);
        printf("ckpt_save: ranks %d raw_bytes %llu stored_bytes %llu seconds %.3f "
               "mb_per_s %.1f level %d shuffle %d frame_bytes %zu\n",
               comm_size(c), (unsigned long long)total, (unsigned long long)stored, dt,
               (double)total / dt / 1e6, opts.level, opts.shuffle, opts.frame_bytes);
    }
    free(buf);
    return 0;
}

static int cmd_load(comm_t *c, const char *dir)
{
    int rank = comm_rank(c), size = comm_size(c);
    /* BENCH_LOAD_INTO=existing: read into memory that exists and was touched
     * before the timer, as a resume reads into the model's and optimizer's
     * tensors; by default into fresh memory, as torch.load allocates. */
    const char *into = getenv("BENCH_LOAD_INTO");
    int existing = into && strcmp(into, "existing") == 0;
    unsigned char *dst = NULL;
    uint64_t total = 0, a = 0, b = 0;
    ckpt_t *ck = NULL;
    int rc;
    if (existing) {
        rc = ckpt_open(dir, &ck);
        BENCH_CHECK(rc == CKPT_OK, "ckpt_open %s: %s", dir, ckpt_last_error());
        total = ckpt_total_bytes(ck);
        ckpt_close(ck);
        ck = NULL;
        b = total * (uint64_t)(rank + 1) / (uint64_t)size;
        a = total * (uint64_t)rank / (uint64_t)size;
        dst = malloc(b - a ? b - a : 1);
        BENCH_CHECK(dst != NULL, "out of memory for %llu bytes", (unsigned long long)(b - a));
        memset(dst, 0, b - a);
    }
    BENCH_CHECK(comm_barrier(c) == COMM_OK, "barrier: %s", comm_last_error());
    double t0 = now_s();
    rc = ckpt_open(dir, &ck);
    BENCH_CHECK(rc == CKPT_OK, "ckpt_open %s: %s", dir, ckpt_last_error());
    /* Each reader decodes with its share of the node's cores, as ftrain. */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = cpus / size > 1 ? (int)(cpus / size) : 1;
    const char *rt = getenv("BENCH_READ_THREADS");
    if (rt && *rt)
        threads = atoi(rt);
    ckpt_set_read_threads(ck, threads);
    total = ckpt_total_bytes(ck);
    a = total * (uint64_t)rank / (uint64_t)size;
    b = total * (uint64_t)(rank + 1) / (uint64_t)size;
    if (!existing) {
        dst = malloc(b - a ? b - a : 1);
        BENCH_CHECK(dst != NULL, "out of memory for %llu bytes", (unsigned long long)(b - a));
    }
    rc = ckpt_read_range(ck, a, b - a, dst);
    BENCH_CHECK(rc == CKPT_OK, "read range [%llu, %llu) of %s: %s", (unsigned long long)a,
                (unsigned long long)b, dir, ckpt_last_error());
    BENCH_CHECK(comm_barrier(c) == COMM_OK, "barrier: %s", comm_last_error());
    double dt = now_s() - t0;

    /* Untimed: the range must hold what the generator made. */
    size_t n = ckpt_num_tensors(ck);
    ckpt_tensor_t *t = calloc(n ? n : 1, sizeof *t);
    unsigned char *want = malloc(b - a ? b - a : 1);
    BENCH_CHECK(t && want, "out of memory");
    for (size_t i = 0; i < n; i++)
        t[i] = *ckpt_tensor_at(ck, i);
    bench_expect(t, n, a, b - a, want);
    int bad = memcmp(dst, want, b - a) != 0;
    int any = comm_any_failed(c, bad);
    if (rank == 0)
        printf("ckpt_load: readers %d saved_by %d raw_bytes %llu seconds %.3f mb_per_s %.1f "
               "verified %s into %s\n",
               size, ckpt_world_size(ck), (unsigned long long)total, dt,
               (double)total / dt / 1e6, any ? "NO" : "yes", existing ? "existing" : "fresh");
    free(want);
    free(t);
    free(dst);
    ckpt_close(ck);
    return any ? 1 : 0;
}

static int cmd_raw(const char *path, int mb)
{
    ckpt_tensor_t t[BENCH_NT];
    uint64_t total = bench_layout(t, mb);
    unsigned char *buf = malloc(total);
    BENCH_CHECK(buf != NULL, "out of memory for %llu bytes", (unsigned long long)total);
    bench_expect(t, BENCH_NT, 0, total, buf);
    FILE *f = fopen(path, "wb");
    BENCH_CHECK(f != NULL, "cannot create '%s'", path);
    BENCH_CHECK(fwrite(buf, 1, total, f) == total && fclose(f) == 0, "cannot write '%s'", path);
    char jpath[CKPT_PATH_MAX];
    snprintf(jpath, sizeof jpath, "%s.json", path);
    f = fopen(jpath, "w");
    BENCH_CHECK(f != NULL, "cannot create '%s'", jpath);
    fprintf(f, "{\"total_bytes\": %llu, \"tensors\": [\n", (unsigned long long)total);
    for (size_t k = 0; k < BENCH_NT; k++) {
        fprintf(f, "  {\"name\": \"%s\", \"dtype\": \"f32\", \"offset\": %llu, \"shape\": [",
                t[k].name, (unsigned long long)t[k].offset);
        for (int d = 0; d < t[k].ndim; d++)
            fprintf(f, "%s%lld", d ? ", " : "", (long long)t[k].shape[d]);
        fprintf(f, "]}%s\n", k + 1 < BENCH_NT ? "," : "");
    }
    fprintf(f, "]}\n");
    BENCH_CHECK(fclose(f) == 0, "cannot write '%s'", jpath);
    printf("ckpt_raw: raw_bytes %llu file %s\n", (unsigned long long)total, path);
    free(buf);
    return 0;
}

static void usage(FILE *out)
{
    fputs("usage: ckpt_bench save ROOT MB\n"
          "       ckpt_bench load STEPDIR\n"
          "       ckpt_bench raw FILE MB\n"
          "(mpirun -n N ckpt_bench ... for N ranks)\n",
          out);
}

int main(int argc, char **argv)
{
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(stdout);
        return 0;
    }
    int ok = argc >= 3 && ((strcmp(argv[1], "save") == 0 && argc == 4) ||
                           (strcmp(argv[1], "load") == 0 && argc == 3) ||
                           (strcmp(argv[1], "raw") == 0 && argc == 4));
    if (!ok) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "raw") == 0)
        return cmd_raw(argv[2], parse_mb(argv[3]));

    world_t w;
    char err[256] = "";
    BENCH_CHECK(world_init(&w, &argc, &argv, err, sizeof err) == WORLD_OK,
                "%s (launch with mpirun, or with no launcher)", err);
    comm_t *c = NULL;
    BENCH_CHECK(comm_open_mpi(&c, &w) == COMM_OK, "communicator: %s", comm_last_error());
    int rc = strcmp(argv[1], "save") == 0 ? cmd_save(c, argv[2], parse_mb(argv[3]))
                                          : cmd_load(c, argv[2]);
    fflush(stdout);
    comm_close(c);
    world_free(&w);
    return rc;
}

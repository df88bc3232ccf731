/*
 * data_idx.c - tests for data.c: the real Fashion-MNIST loads with the
 * right shapes and class balance, the synthetic sets hold exactly the
 * documented values, and malformed IDX files written here (wrong magic,
 * truncations, trailing bytes, bad labels and dimensions, huge headers,
 * corrupt gzip, missing files) each give the right error code and a
 * message that names the file.
 */
#include "nn/data.h"
#include "tap.h"

#include <errno.h>
#include <stdint.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#define N_TRAIN 20
#define N_TEST 10
#define SIDE 28

static const char *const fmnist_files[] = {
    "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz",
    "plain-labels.idx",
};
#define N_FILES (sizeof fmnist_files / sizeof fmnist_files[0])

static char tmpdir[4096];

/* The pixel byte a fixture stores for sample i, pixel p. */
static uint8_t pixel(int i, int p)
{
    return (uint8_t)((i * 31 + p * 7) % 256);
}

/* Path of a fixture file in the temp dir. */
static const char *fpath(const char *name)
{
    static char buf[8192];
    snprintf(buf, sizeof buf, "%s/%s", tmpdir, name);
    return buf;
}

/* Write bytes to a fixture file, gzip-compressed or plain. */
static int write_bytes(const char *name, int gz, const uint8_t *b, size_t n)
{
    const char *p = fpath(name);
    if (gz) {
        gzFile f = gzopen(p, "wb");
        if (!f)
            return -1;
        if (n && gzwrite(f, b, (unsigned)n) != (int)n) {
            gzclose(f);
            return -1;
        }
        return gzclose(f) == Z_OK ? 0 : -1;
    }
    FILE *f = fopen(p, "wb");
    if (!f)
        return -1;
    if (n && fwrite(b, 1, n, f) != n) {
        fclose(f);
        return -1;
    }
    return fclose(f) == 0 ? 0 : -1;
}

/* Put a big-endian 32-bit value at p. */
static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/*
 * Write an IDX file: magic, ndims sizes, then payload bytes from fill (or
 * 'payload' bytes of pattern when fill is NULL), truncated or extended by
 * delta bytes relative to what the header describes.
 */
static int write_idx(const char *name, int gz, uint32_t magic, int ndims,
                     const uint32_t *dims, const uint8_t *payload,
                     size_t payload_len)
{
    size_t hl = 4 + 4 * (size_t)ndims;
    uint8_t *b = malloc(hl + payload_len + 1);
    int r;
    if (!b)
        return -1;
    put_be32(b, magic);
    for (int i = 0; i < ndims; i++)
        put_be32(b + 4 + 4 * i, dims[i]);
    if (payload_len)
        memcpy(b + hl, payload, payload_len);
    r = write_bytes(name, gz, b, hl + payload_len);
    free(b);
    return r;
}

/* Images file for n samples of rows x cols, payload length adjusted by
 * delta (negative: truncated, positive: trailing bytes). */
static int write_images(const char *name, int gz, int n, int rows, int cols,
                        long delta)
{
    uint32_t dims[3] = {(uint32_t)n, (uint32_t)rows, (uint32_t)cols};
    size_t len = (size_t)((long)n * rows * cols + delta);
    uint8_t *pay = malloc(len + 1);
    int r;
    if (!pay)
        return -1;
    for (size_t k = 0; k < len; k++)
        pay[k] = pixel((int)(k / (size_t)(rows * cols)),
                       (int)(k % (size_t)(rows * cols)));
    r = write_idx(name, gz, 0x00000803, 3, dims, pay, len);
    free(pay);
    return r;
}

/* Labels file of n labels i % 10, with label bad_at set to bad_val. */
static int write_labels(const char *name, int gz, int n, int bad_at,
                        uint8_t bad_val)
{
    uint32_t dims[1] = {(uint32_t)n};
    uint8_t *pay = malloc((size_t)n + 1);
    int r;
    if (!pay)
        return -1;
    for (int i = 0; i < n; i++)
        pay[i] = (uint8_t)(i % 10);
    if (bad_at >= 0 && bad_at < n)
        pay[bad_at] = bad_val;
    r = write_idx(name, gz, 0x00000801, 1, dims, pay, (size_t)n);
    free(pay);
    return r;
}

/* A complete valid small fashion-mnist directory. */
static int write_valid_set(int gz)
{
    return write_images(fmnist_files[0], gz, N_TRAIN, SIDE, SIDE, 0) ||
           write_labels(fmnist_files[1], gz, N_TRAIN, -1, 0) ||
           write_images(fmnist_files[2], gz, N_TEST, SIDE, SIDE, 0) ||
           write_labels(fmnist_files[3], gz, N_TEST, -1, 0);
}

/* Load the temp dir; expect rc, an error naming file, containing word,
 * and both sets left empty. */
static void expect_fail(const char *what, int want_rc, const char *file,
                        const char *word)
{
    dataset_t tr, te;
    char err[512] = "";
    memset(&tr, 0xab, sizeof tr);
    memset(&te, 0xab, sizeof te);
    int rc = data_load("fashion-mnist", tmpdir, &tr, &te, err, sizeof err);
    is_int(rc, want_rc, "%s: error code %s", what, data_strerror(want_rc));
    ok(strstr(err, file) != NULL, "%s: message names %s", what, file);
    ok(!word || strstr(err, word) != NULL, "%s: message says '%s'", what,
       word ? word : "");
    diag("%s", err);
    ok(tr.samples == 0 && tr.features == NULL && tr.labels == NULL && te.samples == 0 &&
           te.features == NULL && te.labels == NULL,
       "%s: train and test left empty", what);
    data_free(&tr);
    data_free(&te);
}

/* Read a file into a malloc'd buffer. */
static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    uint8_t *b = NULL;
    long len;
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 &&
        fseek(f, 0, SEEK_SET) == 0 && (b = malloc((size_t)len + 1)) &&
        fread(b, 1, (size_t)len, f) == (size_t)len)
        *n = (size_t)len;
    else {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void test_synthetic(void)
{
    dataset_t tr, te;
    char err[256];
    int bad;

    is_int(data_load("line", NULL, &tr, &te, err, sizeof err), DATA_OK,
           "line loads");
    ok(tr.samples == 1000 && tr.in_dim == 1 && tr.out_dim == 1 &&
           tr.classification == 0 && tr.features && tr.targets && !tr.labels,
       "line train: 1000 points, 1 -> 1, regression");
    ok(te.samples == 100 && te.in_dim == 1 && te.out_dim == 1 &&
           te.classification == 0 && te.features && te.targets && !te.labels,
       "line test: 100 points, 1 -> 1, regression");
    bad = 0;
    for (int i = 0; i < tr.samples && tr.features; i++) {
        double x = i / 1000.0;
        if (tr.features[i] != (float)x || tr.targets[i] != (float)(0.7 * x + 0.3) ||
            fabs(tr.targets[i] - (0.7 * tr.features[i] + 0.3)) > 1e-6)
            bad++;
    }
    is_int(bad, 0, "line train: x = i/1000, y = 0.7x + 0.3");
    is_double(tr.features[999], 0.999, 1e-7, "line train: last x is 0.999");
    bad = 0;
    for (int k = 0; k < te.samples && te.features; k++) {
        double x = 0.0005 + 0.01 * k;
        if (te.features[k] != (float)x || te.targets[k] != (float)(0.7 * x + 0.3))
            bad++;
    }
    is_int(bad, 0, "line test: x = 0.0005 + 0.01k, y = 0.7x + 0.3");
    data_free(&tr);
    data_free(&te);
    ok(tr.samples == 0 && tr.features == NULL && tr.targets == NULL, "data_free empties a set");

    is_int(data_load("sine", NULL, &tr, &te, err, sizeof err), DATA_OK,
           "sine loads");
    ok(tr.samples == 100 && tr.in_dim == 1 && tr.out_dim == 1 &&
           tr.classification == 0 && tr.features && tr.targets,
       "sine train: 100 points, 1 -> 1, regression");
    ok(te.samples == 99 && te.in_dim == 1 && te.out_dim == 1 &&
           te.classification == 0 && te.features && te.targets,
       "sine test: 99 points, 1 -> 1, regression");
    bad = 0;
    for (int k = 0; k < tr.samples && tr.features; k++) {
        double x = k / 99.0;
        if (tr.features[k] != (float)x || fabs(tr.targets[k] - sin(2 * M_PI * x)) > 1e-6)
            bad++;
    }
    is_int(bad, 0, "sine train: x = k/99, y = sin(2 pi x)");
    ok(tr.features[0] == 0.0f && tr.features[99] == 1.0f, "sine train spans [0,1]");
    bad = 0;
    for (int k = 0; k < te.samples && te.features; k++) {
        double x = (k + 0.5) / 99.0;
        if (te.features[k] != (float)x || fabs(te.targets[k] - sin(2 * M_PI * x)) > 1e-6)
            bad++;
    }
    is_int(bad, 0, "sine test: midpoints, y = sin(2 pi x)");
    data_free(&tr);
    data_free(&te);

    char e2[256] = "";
    memset(&tr, 0xab, sizeof tr);
    is_int(data_load("mnist-digits", NULL, &tr, &te, e2, sizeof e2),
           DATA_EINVAL, "unknown data set name is DATA_EINVAL");
    ok(strstr(e2, "mnist-digits") != NULL, "message names the unknown set");
    ok(tr.samples == 0 && tr.features == NULL, "unknown name leaves train empty");
    ok(data_known("fashion-mnist") && data_known("line") &&
           data_known("sine") && !data_known("mnist") && !data_known(""),
       "data_known");
    is_int(data_set_parse(data_set_name(DATA_SET_SINE)), DATA_SET_SINE, "sine round trip");
    is_int(data_set_parse("mnist"), -1, "unknown data set is -1");
    is_str(data_set_names(e2, sizeof e2), "fashion-mnist, line or sine", "data set names");
    /* data_free empties the set it frees (checked above), so that a second
     * data_free (an error path freeing what a caller already freed) frees
     * nothing; and data_free(NULL) does nothing.  These run in a child, so
     * that a crash or a double free (which the allocator or ASan aborts)
     * fails this check instead of ending the test. */
    is_int(data_load("line", NULL, &tr, &te, err, sizeof err), DATA_OK, "line loads again");
    data_free(&tr);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        data_free(&tr); /* already freed: must not free again */
        data_free(&te);
        data_free(&te);
        data_free(NULL);
        _exit(0);
    }
    int status = -1;
    int clean = pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
                WEXITSTATUS(status) == 0;
    ok(clean, "data_free twice on a set, and data_free(NULL), are harmless (child status %#x)",
       status);
    data_free(&te);
    ok(strcmp(data_strerror(DATA_EFORMAT), data_strerror(DATA_EIO)) != 0 &&
           data_strerror(12345) != NULL,
       "data_strerror names codes");
}

static void test_real(void)
{
    dataset_t tr, te;
    char err[512] = "";
    char p[512];
    int hist_tr[10] = {0}, hist_te[10] = {0}, bad = 0, rc;
    float lo = 1, hi = 0;

    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", DATA_FMNIST_DIR);
    if (access(p, R_OK) != 0) {
        skip("dataset-fashion-mnist is not installed (apt-get install "
             "dataset-fashion-mnist)");
        return;
    }
    double t0 = now_s();
    rc = data_load("fashion-mnist", NULL, &tr, &te, err, sizeof err);
    double dt = now_s() - t0;
    if (!ok(rc == DATA_OK, "real fashion-mnist loads")) {
        diag("%s", err);
        return;
    }
    diag("fashion-mnist loaded in %.3f s", dt);
    ok(tr.samples == 60000 && te.samples == 10000, "60000 train, 10000 test");
    ok(tr.in_dim == 784 && te.in_dim == 784 && tr.out_dim == 10 &&
           te.out_dim == 10 && tr.classification && te.classification &&
           tr.labels && te.labels,
       "784 features, 10 classes, classification");
    for (int i = 0; i < tr.samples; i++) {
        if (tr.labels[i] < 0 || tr.labels[i] > 9)
            bad++;
        else
            hist_tr[tr.labels[i]]++;
    }
    for (int i = 0; i < te.samples; i++) {
        if (te.labels[i] < 0 || te.labels[i] > 9)
            bad++;
        else
            hist_te[te.labels[i]]++;
    }
    is_int(bad, 0, "all labels in [0,10)");
    for (int c = 0; c < 10; c++)
        if (hist_tr[c] != 6000 || hist_te[c] != 1000)
            bad++;
    is_int(bad, 0, "every class has 6000 train and 1000 test samples");
    for (size_t i = 0; i < (size_t)tr.samples * 784; i++) {
        if (tr.features[i] < lo)
            lo = tr.features[i];
        if (tr.features[i] > hi)
            hi = tr.features[i];
    }
    ok(lo == 0.0f && hi == 1.0f, "train pixels span exactly [0,1]");
    bad = 0;
    for (size_t i = 0; i < (size_t)tr.samples * 784; i++) {
        float v = tr.features[i] * 255.0f;
        if (fabsf(v - roundf(v)) > 1e-3f)
            bad++;
    }
    is_int(bad, 0, "train pixels are bytes / 255");
    ok(dt < 10.0, "loads in reasonable time (%.3f s)", dt);
    data_free(&tr);
    data_free(&te);
}

static void test_fixtures(void)
{
    dataset_t tr, te;
    char err[512] = "";
    uint32_t dims[3];
    uint8_t *data = NULL;
    int rc;

    /* A valid small set, gzip-compressed. */
    ok(write_valid_set(1) == 0, "fixture written");
    rc = data_load("fashion-mnist", tmpdir, &tr, &te, err, sizeof err);
    is_int(rc, DATA_OK, "small gzip set loads");
    if (rc != DATA_OK)
        diag("%s", err);
    ok(rc == DATA_OK && tr.samples == N_TRAIN && te.samples == N_TEST &&
           tr.in_dim == 784,
       "small set: shapes");
    int bad = 0;
    for (int i = 0; rc == DATA_OK && i < tr.samples; i++) {
        if (tr.labels[i] != i % 10)
            bad++;
        for (int p = 0; p < 784; p++)
            if (tr.features[(size_t)i * 784 + p] != (float)pixel(i, p) / 255.0f)
                bad++;
    }
    ok(rc == DATA_OK && bad == 0, "small set: pixels byte/255, labels kept");
    data_free(&tr);
    data_free(&te);

    /* The same set uncompressed, under the .gz names. */
    ok(write_valid_set(0) == 0, "uncompressed fixture written");
    rc = data_load("fashion-mnist", tmpdir, &tr, &te, err, sizeof err);
    is_int(rc, DATA_OK, "uncompressed IDX files are accepted");
    if (rc != DATA_OK)
        diag("%s", err);
    ok(rc == DATA_OK && tr.samples == N_TRAIN && te.samples == N_TEST &&
           tr.features[785] == (float)pixel(1, 1) / 255.0f,
       "uncompressed set: same contents");
    data_free(&tr);
    data_free(&te);

    /* data_read_idx directly on a plain labels file. */
    write_labels(fmnist_files[4], 0, 7, -1, 0);
    rc = data_read_idx(fpath(fmnist_files[4]), 1, dims, &data, err,
                       sizeof err);
    ok(rc == DATA_OK && dims[0] == 7 && data && data[6] == 6,
       "data_read_idx reads a plain labels file");
    free(data);
    data = NULL;
    rc = data_read_idx(fpath(fmnist_files[4]), 3, dims, &data, err,
                       sizeof err);
    ok(rc == DATA_EFORMAT && !data && strstr(err, fmnist_files[4]),
       "data_read_idx: labels file where images expected is rejected");

    /* Wrong magic. */
    write_valid_set(1);
    {
        uint32_t d3[3] = {N_TRAIN, SIDE, SIDE};
        size_t len = (size_t)N_TRAIN * SIDE * SIDE;
        uint8_t *pay = calloc(len, 1);
        write_idx(fmnist_files[0], 1, 0x00000c03, 3, d3, pay, len);
        free(pay);
    }
    expect_fail("wrong magic", DATA_EFORMAT, fmnist_files[0], "magic");

    /* Truncated header: magic and one dimension only. */
    write_valid_set(1);
    {
        uint8_t h[8];
        put_be32(h, 0x00000803);
        put_be32(h + 4, N_TRAIN);
        write_bytes(fmnist_files[0], 1, h, sizeof h);
    }
    expect_fail("truncated header", DATA_EFORMAT, fmnist_files[0],
                "truncated header");

    /* Truncated data. */
    write_valid_set(1);
    write_images(fmnist_files[2], 1, N_TEST, SIDE, SIDE, -1234);
    expect_fail("truncated data", DATA_EFORMAT, fmnist_files[2],
                "truncated");
    {
        char e2[512] = "";
        dataset_t a, b;
        data_load("fashion-mnist", tmpdir, &a, &b, e2, sizeof e2);
        ok(strstr(e2, "7840 bytes") && strstr(e2, "6606"),
           "truncated data: message gives expected and found byte counts");
        data_free(&a);
        data_free(&b);
    }

    /* Trailing bytes. */
    write_valid_set(1);
    write_images(fmnist_files[0], 1, N_TRAIN, SIDE, SIDE, 3);
    expect_fail("trailing bytes", DATA_EFORMAT, fmnist_files[0], "trailing");

    /* Label out of range. */
    write_valid_set(1);
    write_labels(fmnist_files[3], 1, N_TEST, 4, 10);
    expect_fail("label out of range", DATA_EFORMAT, fmnist_files[3],
                "out of range");

    /* Count mismatch between images and labels. */
    write_valid_set(1);
    write_labels(fmnist_files[1], 1, N_TRAIN - 1, -1, 0);
    expect_fail("count mismatch", DATA_EFORMAT, fmnist_files[1], "labels");

    /* Huge dimensions: header only, must fail before allocating. */
    write_valid_set(1);
    {
        uint32_t d3[3] = {0xffffffffu, 0xffffffffu, 0xffffffffu};
        write_idx(fmnist_files[0], 1, 0x00000803, 3, d3, NULL, 0);
    }
    expect_fail("huge dims", DATA_EFORMAT, fmnist_files[0], "header says");
    write_valid_set(1);
    {
        uint32_t d3[3] = {3000000, SIDE, SIDE};
        write_idx(fmnist_files[0], 1, 0x00000803, 3, d3, NULL, 0);
    }
    expect_fail("2.35 GB of images", DATA_EFORMAT, fmnist_files[0],
                "header says");
    write_valid_set(1);
    {
        uint32_t d1[1] = {0xfffffff0u};
        write_idx(fmnist_files[1], 1, 0x00000801, 1, d1, NULL, 0);
    }
    expect_fail("huge label count", DATA_EFORMAT, fmnist_files[1],
                "header says");

    /* A header that promises more than the file can hold is refused
     * before the loader allocates room for it (here 784 MB of bytes and
     * 3.1 GB of floats), gzip or plain. */
    write_valid_set(1);
    {
        static const uint8_t some[1000];
        uint32_t d3[3] = {1000000, SIDE, SIDE};
        write_idx(fmnist_files[0], 1, 0x00000803, 3, d3, some, sizeof some);
    }
    expect_fail("small gzip file, header of 784 MB", DATA_EFORMAT, fmnist_files[0],
                "more than a gzip file of");
    write_valid_set(1);
    {
        static const uint8_t some[1000];
        uint32_t d3[3] = {1000000, SIDE, SIDE};
        write_idx(fmnist_files[2], 0, 0x00000803, 3, d3, some, sizeof some);
    }
    expect_fail("small plain file, header of 784 MB", DATA_EFORMAT, fmnist_files[2],
                "but the file has 1000");

    /* Zero-length file. */
    write_valid_set(1);
    write_bytes(fmnist_files[3], 0, NULL, 0);
    expect_fail("zero-length file", DATA_EFORMAT, fmnist_files[3], "empty");

    /* Corrupt gzip: an invalid deflate block right after the header. */
    write_valid_set(1);
    {
        size_t n = 0;
        uint8_t *b = slurp(fpath(fmnist_files[0]), &n);
        ok(b && n > 20 && b[0] == 0x1f && b[1] == 0x8b,
           "gzip fixture to corrupt");
        if (b && n > 20) {
            b[10] = 0xff; /* BFINAL=1, BTYPE=11: reserved, invalid */
            b[11] = 0xff;
            write_bytes(fmnist_files[0], 0, b, n);
        }
        free(b);
    }
    expect_fail("corrupt gzip stream", DATA_EFORMAT, fmnist_files[0],
                "corrupt gzip");

    /* Corrupt gzip: a wrong CRC in the trailer. */
    write_valid_set(1);
    {
        size_t n = 0;
        uint8_t *b = slurp(fpath(fmnist_files[1]), &n);
        if (b && n > 20) {
            b[n - 8] ^= 0x5a;
            write_bytes(fmnist_files[1], 0, b, n);
        }
        free(b);
    }
    expect_fail("gzip crc mismatch", DATA_EFORMAT, fmnist_files[1],
                "corrupt gzip");

    /* A gzip stream cut short. */
    write_valid_set(1);
    {
        size_t n = 0;
        uint8_t *b = slurp(fpath(fmnist_files[2]), &n);
        if (b && n > 40)
            write_bytes(fmnist_files[2], 0, b, n / 2);
        free(b);
    }
    expect_fail("gzip stream cut short", DATA_EFORMAT, fmnist_files[2],
                "truncated");

    /* Missing file. */
    write_valid_set(1);
    unlink(fpath(fmnist_files[3]));
    expect_fail("missing file", DATA_EIO, fmnist_files[3], "cannot open");

    /* Wrong image dimensions for fashion-mnist. */
    write_valid_set(1);
    write_images(fmnist_files[0], 1, N_TRAIN, 27, 29, 0);
    expect_fail("27x29 images", DATA_EFORMAT, fmnist_files[0], "28x28");
    write_valid_set(1);
    write_images(fmnist_files[2], 1, N_TEST, 784, 1, 0);
    expect_fail("784x1 images", DATA_EFORMAT, fmnist_files[2], "28x28");

    /* A missing directory. */
    {
        dataset_t a, b;
        char e2[512] = "";
        rc = data_load("fashion-mnist", "/nonexistent-ftrain-dir", &a, &b,
                       e2, sizeof e2);
        ok(rc == DATA_EIO &&
               strstr(e2, "/nonexistent-ftrain-dir/train-images"),
           "missing directory: DATA_EIO naming the path");
    }
}

int main(void)
{
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/ftrain-data-XXXXXX",
             t && *t ? t : "/tmp");
    if (!mkdtemp(tmpdir)) {
        printf("Bail out! cannot create a temp dir under %s: %s\n",
               t && *t ? t : "/tmp", strerror(errno));
        return 1;
    }

    test_synthetic();
    test_real();
    test_fixtures();

    for (size_t i = 0; i < N_FILES; i++)
        unlink(fpath(fmnist_files[i]));
    ok(rmdir(tmpdir) == 0, "temp dir cleaned up");
    return done_testing();
}

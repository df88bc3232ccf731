/*
 * data.c - the data sets ftrain trains on: Fashion-MNIST from IDX files and
 * two small synthetic regression sets (line, sine).
 *
 * IDX files are untrusted input.  A file is read through zlib's gzread, which
 * also reads uncompressed files, straight into one buffer sized from the
 * header; the header's sizes are bounded before anything is allocated, and
 * the file must hold exactly the bytes the header describes: a short file
 * is "truncated", a long one has "trailing bytes".  A header that promises
 * more than the file can hold (its own size when plain; 1032 times it when
 * gzip, deflate's largest ratio) is refused as truncated before anything is
 * allocated.  Every message starts with the file's path.
 */
#include "nn/data.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zlib.h>

#include "util/util.h"

/* The largest payload one IDX file may describe: room for Fashion-MNIST
 * many times over, without letting a forged header make us allocate
 * terabytes. */
#define DATA_IDX_MAX_BYTES ((uint64_t)1 << 30)
/* An IDX header: a 4-byte magic, then one 4-byte size per dimension. */
#define DATA_IDX_MAX_DIMS 3
#define DATA_IDX_HEADER_MAX (4 + 4 * DATA_IDX_MAX_DIMS)
/* deflate's largest expansion: a gzip file of N bytes holds at most this
 * many times N bytes of payload. */
#define DATA_GZIP_MAX_RATIO 1032
/* gzread takes an unsigned length: one call reads at most this much. */
#define DATA_READ_MAX ((uint64_t)1 << 30)
/* Bytes read at a time when scaling a payload to floats or counting what
 * follows it, and zlib's input buffer. */
#define DATA_CHUNK (1u << 16)
#define DATA_GZ_BUFFER (1u << 18)
/* A description of a header for messages: "4294967295 images of
 * 4294967295x4294967295". */
#define DATA_WHAT_MAX (3 * 10 + 32)
/* The names of all data sets, joined for a message. */
#define DATA_NAMES_MAX 64

#define DATA_FMNIST_CLASSES 10
#define DATA_FMNIST_SIDE 28
#define DATA_PATH_MAX UTIL_PATH_MAX

static const util_name_t data_sets[] = {
    {"fashion-mnist", DATA_SET_FASHION_MNIST},
    {"line", DATA_SET_LINE},
    {"sine", DATA_SET_SINE},
};

/* After gzread failed: the message of a read error (DATA_EIO) or of a
 * corrupt gzip stream (DATA_EFORMAT) into err.  @return the code. */
static int read_error(gzFile gz, const char *path, char *err, size_t errcap)
{
    int zerr = 0;
    const char *msg = gzerror(gz, &zerr);

    if (zerr == Z_ERRNO)
        return util_fail(err, errcap, DATA_EIO, "%s: read error: %s", path,
                         strerror(errno));
    /* zlib prefixes its message with the path: drop it. */
    size_t path_len = strlen(path);
    if (msg && strncmp(msg, path, path_len) == 0 && strncmp(msg + path_len, ": ", 2) == 0)
        msg += path_len + 2;
    return util_fail(err, errcap, DATA_EFORMAT, "%s: corrupt gzip stream: %s", path,
                     msg ? msg : "unknown zlib error");
}

/*
 * Read up to len bytes from gz into buf, looping over short reads.  *got is
 * the number of bytes read.  A read error (including a corrupt gzip stream)
 * returns DATA_EIO or DATA_EFORMAT with err set; reaching the end of the
 * file early is not an error here, the caller judges *got.
 */
static int read_full(gzFile gz, const char *path, void *buf, uint64_t len,
                     uint64_t *got, char *err, size_t errcap)
{
    uint8_t *dst = buf;

    *got = 0;
    while (*got < len) {
        uint64_t want = len - *got;

        if (want > DATA_READ_MAX)
            want = DATA_READ_MAX;
        int nread = gzread(gz, dst + *got, (unsigned)want);
        if (nread < 0)
            return read_error(gz, path, err, errcap);
        if (nread == 0)
            break;
        *got += (uint64_t)nread;
    }
    return DATA_OK;
}

/*
 * After a short read, tell a gzip stream that ends early (zlib reports
 * Z_BUF_ERROR) from a plain file that is simply short.  Returns a suffix
 * for the "truncated" message.
 */
static const char *short_reason(gzFile gz)
{
    int zerr = 0;

    gzerror(gz, &zerr);
    return zerr == Z_BUF_ERROR ? " (the gzip stream ends early)" : "";
}

/* Describe what a header promises, for messages: "60000 images of 28x28". */
static void describe(char *buf, size_t cap, int ndims, const uint32_t *dims)
{
    if (ndims == 3)
        snprintf(buf, cap, "%lu images of %lux%lu", (unsigned long)dims[0],
                 (unsigned long)dims[1], (unsigned long)dims[2]);
    else
        snprintf(buf, cap, "%lu labels", (unsigned long)dims[0]);
}

/* A big-endian 32-bit number. */
static uint32_t be32(const uint8_t *bytes)
{
    return (uint32_t)bytes[0] << 24 | (uint32_t)bytes[1] << 16 |
           (uint32_t)bytes[2] << 8 | bytes[3];
}

/*
 * Read and check an IDX header: magic 0x000008NN (unsigned bytes, NN =
 * expect_dims dimensions), then NN big-endian 32-bit sizes into dims.
 */
static int idx_header(gzFile gz, const char *path, int expect_dims, uint32_t dims[3],
                      char *err, size_t errcap)
{
    uint8_t hdr[DATA_IDX_HEADER_MAX];
    uint64_t hdr_len = 4 + 4 * (uint64_t)expect_dims, got = 0;

    int rc = read_full(gz, path, hdr, hdr_len, &got, err, errcap);
    if (rc != DATA_OK)
        return rc;
    if (got == 0)
        return util_fail(err, errcap, DATA_EFORMAT, "%s: the file is empty%s", path,
                         short_reason(gz));
    if (got >= 4) {
        uint32_t magic = be32(hdr);
        uint32_t want = 0x00000800u | (uint32_t)expect_dims;

        if (magic != want)
            return util_fail(err, errcap, DATA_EFORMAT,
                             "%s: bad magic 0x%08lx, expected 0x%08lx (an IDX file "
                             "of unsigned bytes with %d dimension%s)",
                             path, (unsigned long)magic, (unsigned long)want,
                             expect_dims, expect_dims == 1 ? "" : "s");
    }
    if (got < hdr_len)
        return util_fail(err, errcap, DATA_EFORMAT,
                         "%s: truncated header: expected %lu bytes, the file has "
                         "%lu%s",
                         path, (unsigned long)hdr_len, (unsigned long)got,
                         short_reason(gz));
    for (int i = 0; i < expect_dims; i++)
        dims[i] = be32(hdr + 4 + 4 * i);
    return DATA_OK;
}

/*
 * The payload size the header's dims describe, into *total: bounded by
 * DATA_IDX_MAX_BYTES (each partial product stays at or below it: no
 * overflow) and, for a regular file of sb's size, by what the file can hold.
 */
static int idx_payload_size(gzFile gz, const char *path, int expect_dims,
                            const uint32_t dims[3], const char *what,
                            const struct stat *sb, uint64_t *total, char *err,
                            size_t errcap)
{
    uint64_t hdr_len = 4 + 4 * (uint64_t)expect_dims, payload = 1, room;

    for (int i = 0; i < expect_dims; i++) {
        if (dims[i] == 0) {
            payload = 0;
            break;
        }
        if (payload > DATA_IDX_MAX_BYTES / dims[i])
            return util_fail(err, errcap, DATA_EFORMAT,
                             "%s: header says %s, more than the %lu bytes an IDX "
                             "file may hold",
                             path, what, (unsigned long)DATA_IDX_MAX_BYTES);
        payload *= dims[i];
    }
    /* What the file can hold at most; regular files only (a pipe or a
     * device has no size to judge by). */
    room = (uint64_t)sb->st_size;
    if (!gzdirect(gz))
        room = room > UINT64_MAX / DATA_GZIP_MAX_RATIO ? UINT64_MAX
                                                       : room * DATA_GZIP_MAX_RATIO;
    if (S_ISREG(sb->st_mode) && hdr_len + payload > room) {
        if (gzdirect(gz))
            return util_fail(err, errcap, DATA_EFORMAT,
                             "%s: truncated: header says %s (%lu bytes) but the file "
                             "has %lu", path, what, (unsigned long)payload,
                             (unsigned long)(sb->st_size > (off_t)hdr_len
                                             ? (uint64_t)sb->st_size - hdr_len : 0));
        return util_fail(err, errcap, DATA_EFORMAT,
                         "%s: truncated: header says %s (%lu bytes), more than a "
                         "gzip file of %lu bytes can hold (deflate expands at most "
                         "%d times)", path, what, (unsigned long)payload,
                         (unsigned long)sb->st_size, DATA_GZIP_MAX_RATIO);
    }
    *total = payload;
    return DATA_OK;
}

/*
 * Open an IDX file and check its header (idx_header, idx_payload_size).
 * On success *out is the open file positioned at the payload, *total the
 * payload's size and what a description of it for messages.
 */
static int idx_open(const char *path, int expect_dims, uint32_t dims[3],
                    uint64_t *total, gzFile *out, char *what, size_t whatcap,
                    char *err, size_t errcap)
{
    struct stat sb;

    *out = NULL;
    *total = 0;
    dims[0] = dims[1] = dims[2] = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &sb) != 0) {
        int rc = util_fail(err, errcap, DATA_EIO, "%s: cannot open: %s", path,
                           strerror(errno));
        if (fd >= 0)
            close(fd);
        return rc;
    }
    errno = 0;
    gzFile gz = gzdopen(fd, "rb");
    if (!gz) {
        int rc = errno ? util_fail(err, errcap, DATA_EIO, "%s: cannot open: %s", path,
                                   strerror(errno))
                       : util_fail(err, errcap, DATA_ENOMEM,
                                   "%s: cannot open: out of memory", path);
        close(fd);
        return rc;
    }
    gzbuffer(gz, DATA_GZ_BUFFER);
    int rc = idx_header(gz, path, expect_dims, dims, err, errcap);
    if (rc == DATA_OK) {
        describe(what, whatcap, expect_dims, dims);
        rc = idx_payload_size(gz, path, expect_dims, dims, what, &sb, total, err,
                              errcap);
    }
    if (rc != DATA_OK) {
        gzclose(gz); /* closes fd */
        return rc;
    }
    *out = gz;
    return DATA_OK;
}

/* Read total payload bytes through a small buffer into floats, each byte
 * scaled to [0,1] (this skips a second copy of a large file). */
static int read_scaled(gzFile gz, const char *path, float *floats, uint64_t total,
                       uint64_t *got, char *err, size_t errcap)
{
    uint8_t chunk[DATA_CHUNK];
    float scale[256];

    for (int value = 0; value < 256; value++)
        scale[value] = (float)value / 255.0f;
    *got = 0;
    while (*got < total) {
        uint64_t want = total - *got, nread = 0;

        if (want > sizeof chunk)
            want = sizeof chunk;
        int rc = read_full(gz, path, chunk, want, &nread, err, errcap);
        if (rc != DATA_OK)
            return rc;
        for (uint64_t i = 0; i < nread; i++)
            floats[*got + i] = scale[chunk[i]];
        *got += nread;
        if (nread < want)
            break;
    }
    return DATA_OK;
}

/*
 * Read an IDX payload of total bytes: into bytes when it is not NULL,
 * otherwise scaled into floats (read_scaled).  Then check that nothing
 * follows the payload.
 */
static int idx_payload(gzFile gz, const char *path, const char *what,
                       uint64_t total, uint8_t *bytes, float *floats,
                       char *err, size_t errcap)
{
    uint64_t got = 0, extra = 0;
    uint8_t chunk[DATA_CHUNK];

    int rc = bytes ? read_full(gz, path, bytes, total, &got, err, errcap)
                   : read_scaled(gz, path, floats, total, &got, err, errcap);
    if (rc != DATA_OK)
        return rc;
    if (got < total)
        return util_fail(err, errcap, DATA_EFORMAT,
                         "%s: truncated: header says %s (%lu bytes) but the file "
                         "has %lu%s",
                         path, what, (unsigned long)total, (unsigned long)got,
                         short_reason(gz));

    /* Exactly as long as the header says: count what follows, if any. */
    for (;;) {
        uint64_t nread = 0;

        rc = read_full(gz, path, chunk, sizeof chunk, &nread, err, errcap);
        if (rc != DATA_OK)
            return rc;
        extra += nread;
        if (nread < sizeof chunk)
            break;
    }
    if (extra > 0)
        return util_fail(err, errcap, DATA_EFORMAT,
                         "%s: %lu trailing bytes after the %lu bytes the header "
                         "describes (%s)",
                         path, (unsigned long)extra, (unsigned long)total, what);
    return DATA_OK;
}

int data_read_idx(const char *path, int expect_dims, uint32_t dims[3],
                  uint8_t **data, char *err, size_t errcap)
{
    gzFile gz = NULL;
    uint64_t total = 0;
    char what[DATA_WHAT_MAX];

    if (data)
        *data = NULL;
    if (!path || !dims || !data || (expect_dims != 1 && expect_dims != 3))
        return util_fail(err, errcap, DATA_EINVAL, "%s: data_read_idx: bad arguments",
                         path ? path : "(null)");
    int rc = idx_open(path, expect_dims, dims, &total, &gz, what, sizeof what, err,
                      errcap);
    if (rc != DATA_OK)
        return rc;
    uint8_t *buf = malloc(total ? (size_t)total : 1);
    if (!buf)
        rc = util_fail(err, errcap, DATA_ENOMEM, "%s: out of memory for %lu bytes", path,
                       (unsigned long)total);
    else
        rc = idx_payload(gz, path, what, total, buf, NULL, err, errcap);
    gzclose(gz);
    if (rc != DATA_OK) {
        free(buf);
        return rc;
    }
    *data = buf;
    return DATA_OK;
}

/* Release one set's buffers and reset it to empty. */
void data_free(dataset_t *set)
{
    if (!set)
        return;
    free(set->features);
    free(set->labels);
    free(set->targets);
    memset(set, 0, sizeof *set);
}

/* ---- the synthetic regression sets ------------------------------------- */

/* One synthetic set: training sample k at x = train_x(k), test sample k at
 * x = test_x(k), target y = target(x), each value computed in double and
 * rounded to float once. */
typedef struct {
    data_set_t set;
    int train_samples, test_samples;
    double (*train_x)(int k);
    double (*test_x)(int k);
    double (*target)(double x);
} synthetic_t;

/* line: y = 0.7x + 0.3; train x = k/1000, test x = 0.0005 + 0.01k. */
static double line_train_x(int k) { return k / 1000.0; }
static double line_test_x(int k) { return 0.0005 + 0.01 * k; }
static double line_target(double x) { return 0.7 * x + 0.3; }

/* sine: y = sin(2 pi x); train x = k/99 (k = 0..99), test the 99 midpoints
 * x = (k + 0.5)/99. */
static double sine_train_x(int k) { return k / 99.0; }
static double sine_test_x(int k) { return (k + 0.5) / 99.0; }
static double sine_target(double x)
{
    const double two_pi = 6.283185307179586476925286766559;
    return sin(two_pi * x);
}

static const synthetic_t synthetic_line = {
    DATA_SET_LINE, 1000, 100, line_train_x, line_test_x, line_target,
};
static const synthetic_t synthetic_sine = {
    DATA_SET_SINE, 100, 99, sine_train_x, sine_test_x, sine_target,
};

/* Fill set with the `samples` one-dimensional points x = at(k). */
static int fill_synthetic(dataset_t *set, int samples, double (*at)(int k),
                          double (*target)(double x), const char *name, char *err,
                          size_t errcap)
{
    memset(set, 0, sizeof *set);
    set->samples = samples;
    set->in_dim = 1;
    set->out_dim = 1;
    set->classification = 0;
    set->features = malloc(sizeof(float) * (size_t)samples);
    set->targets = malloc(sizeof(float) * (size_t)samples);
    if (!set->features || !set->targets) {
        data_free(set);
        return util_fail(err, errcap, DATA_ENOMEM, "%s: out of memory", name);
    }
    for (int k = 0; k < samples; k++) {
        double x = at(k);

        set->features[k] = (float)x;
        set->targets[k] = (float)target(x);
    }
    return DATA_OK;
}

static int load_synthetic(const synthetic_t *spec, dataset_t *train, dataset_t *test,
                          char *err, size_t errcap)
{
    const char *name = data_set_name(spec->set);
    int rc = fill_synthetic(train, spec->train_samples, spec->train_x, spec->target,
                            name, err, errcap);
    if (rc == DATA_OK)
        rc = fill_synthetic(test, spec->test_samples, spec->test_x, spec->target, name,
                            err, errcap);
    return rc;
}

/* ---- Fashion-MNIST ----------------------------------------------------- */

/* Join dir and file into out, or fail if the path does not fit. */
static int join_path(char *out, size_t cap, const char *dir, const char *file,
                     char *err, size_t errcap)
{
    int len = snprintf(out, cap, "%s/%s", dir, file);

    if (len < 0 || (size_t)len >= cap)
        return util_fail(err, errcap, DATA_EINVAL, "%s/%s: path too long", dir, file);
    return DATA_OK;
}

/* Read the labels file at path, which must hold `images` labels in
 * [0, DATA_FMNIST_CLASSES) for the images of image_path.  *out gets them. */
static int read_fmnist_labels(const char *path, const char *image_path, uint32_t images,
                              uint8_t **out, char *err, size_t errcap)
{
    uint32_t dims[3];
    uint8_t *labels = NULL;

    int rc = data_read_idx(path, 1, dims, &labels, err, errcap);
    if (rc != DATA_OK)
        return rc;
    if (dims[0] != images)
        rc = util_fail(err, errcap, DATA_EFORMAT, "%s: %lu labels, but %s has %lu images",
                       path, (unsigned long)dims[0], image_path, (unsigned long)images);
    for (uint32_t i = 0; rc == DATA_OK && i < dims[0]; i++)
        if (labels[i] >= DATA_FMNIST_CLASSES)
            rc = util_fail(err, errcap, DATA_EFORMAT,
                           "%s: label %u of sample %lu is out of range [0,%d)", path,
                           (unsigned)labels[i], (unsigned long)i, DATA_FMNIST_CLASSES);
    if (rc != DATA_OK) {
        free(labels);
        return rc;
    }
    *out = labels;
    return DATA_OK;
}

/*
 * Load one Fashion-MNIST split (an images file and a labels file) into set:
 * 28x28 images scaled to [0,1], labels in [0,10), equal counts.  The labels
 * are read first so the image bytes can go straight into floats.
 */
static int load_fmnist_split(dataset_t *set, const char *dir, const char *img,
                             const char *lbl, char *err, size_t errcap)
{
    char ipath[DATA_PATH_MAX], lpath[DATA_PATH_MAX], what[DATA_WHAT_MAX];
    uint32_t idims[3];
    uint8_t *label_bytes = NULL;
    uint64_t total = 0;
    gzFile gz = NULL;

    memset(set, 0, sizeof *set);
    int rc = join_path(ipath, sizeof ipath, dir, img, err, errcap);
    if (rc == DATA_OK)
        rc = join_path(lpath, sizeof lpath, dir, lbl, err, errcap);
    if (rc == DATA_OK)
        rc = idx_open(ipath, 3, idims, &total, &gz, what, sizeof what, err, errcap);
    if (rc != DATA_OK)
        return rc;
    if (idims[1] != DATA_FMNIST_SIDE || idims[2] != DATA_FMNIST_SIDE)
        rc = util_fail(err, errcap, DATA_EFORMAT,
                       "%s: images are %lux%lu, fashion-mnist's are %dx%d", ipath,
                       (unsigned long)idims[1], (unsigned long)idims[2],
                       DATA_FMNIST_SIDE, DATA_FMNIST_SIDE);
    else if (idims[0] == 0)
        rc = util_fail(err, errcap, DATA_EFORMAT, "%s: the file holds no images", ipath);
    else
        rc = read_fmnist_labels(lpath, ipath, idims[0], &label_bytes, err, errcap);
    if (rc != DATA_OK)
        goto fail;

    /* The payload bound keeps samples * 784 within 1 GiB: it fits an int. */
    set->samples = (int)idims[0];
    set->in_dim = DATA_FMNIST_SIDE * DATA_FMNIST_SIDE;
    set->out_dim = DATA_FMNIST_CLASSES;
    set->classification = 1;
    set->features = malloc(sizeof(float) * (size_t)total);
    set->labels = malloc(sizeof(int32_t) * (size_t)set->samples);
    if (!set->features || !set->labels) {
        rc = util_fail(err, errcap, DATA_ENOMEM, "%s: out of memory for %lu samples", ipath,
                       (unsigned long)set->samples);
        goto fail;
    }
    for (int i = 0; i < set->samples; i++)
        set->labels[i] = label_bytes[i];
    rc = idx_payload(gz, ipath, what, total, NULL, set->features, err, errcap);
    if (rc != DATA_OK)
        goto fail;

    gzclose(gz);
    free(label_bytes);
    return DATA_OK;
fail:
    gzclose(gz);
    free(label_bytes);
    data_free(set);
    return rc;
}

static int load_fmnist(const char *dir, dataset_t *train, dataset_t *test, char *err,
                       size_t errcap)
{
    int rc = load_fmnist_split(train, dir ? dir : DATA_FMNIST_DIR,
                               "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                               err, errcap);
    if (rc == DATA_OK)
        rc = load_fmnist_split(test, dir ? dir : DATA_FMNIST_DIR,
                               "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz",
                               err, errcap);
    return rc;
}

int data_load(const char *name, const char *dir, dataset_t *train,
              dataset_t *test, char *err, size_t errcap)
{
    char known[DATA_NAMES_MAX];
    int rc;

    if (err && errcap)
        err[0] = '\0';
    if (!train || !test)
        return util_fail(err, errcap, DATA_EINVAL,
                         "data_load: train and test must not be NULL");
    memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);
    if (!name)
        return util_fail(err, errcap, DATA_EINVAL, "data_load: no data set name given");
    switch (data_set_parse(name)) {
    case DATA_SET_FASHION_MNIST:
        rc = load_fmnist(dir, train, test, err, errcap);
        break;
    case DATA_SET_LINE:
        rc = load_synthetic(&synthetic_line, train, test, err, errcap);
        break;
    case DATA_SET_SINE:
        rc = load_synthetic(&synthetic_sine, train, test, err, errcap);
        break;
    default:
        return util_fail(err, errcap, DATA_EINVAL, "unknown data set '%s' (known: %s)", name,
                         data_set_names(known, sizeof known));
    }
    if (rc != DATA_OK) {
        data_free(train);
        data_free(test);
    }
    return rc;
}

uint64_t data_fingerprint(const dataset_t *set)
{
    if (!set)
        return 0;
    /* Sizes as fixed-width little-endian fields, then each array hashed with
     * the hash so far as its seed (no hashing state to allocate). */
    int64_t head[4] = {set->samples, set->in_dim, set->out_dim, set->classification};
    uint8_t le[sizeof head];
    for (int i = 0; i < 4; i++)
        for (int b = 0; b < 8; b++)
            le[8 * i + b] = (uint8_t)((uint64_t)head[i] >> (8 * b));
    uint64_t hash = XXH64(le, sizeof le, 0);
    size_t samples = set->samples > 0 ? (size_t)set->samples : 0;
    if (set->features)
        hash = XXH64(set->features,
                     samples * (size_t)set->in_dim * sizeof *set->features, hash);
    if (set->classification && set->labels)
        hash = XXH64(set->labels, samples * sizeof *set->labels, hash);
    if (!set->classification && set->targets)
        hash = XXH64(set->targets,
                     samples * (size_t)set->out_dim * sizeof *set->targets, hash);
    return hash;
}

/* data_set_name(), data_set_parse(), data_set_names(). */
UTIL_NAME_FUNCTIONS(data_set, data_set_t, data_sets)

int data_known(const char *name)
{
    return data_set_parse(name) >= 0;
}

static const util_name_t data_errors[] = {
    {"success", DATA_OK},
    {"i/o error", DATA_EIO},
    {"malformed data file", DATA_EFORMAT},
    {"out of memory", DATA_ENOMEM},
    {"invalid argument or unknown data set", DATA_EINVAL},
};

const char *data_strerror(int err)
{
    return util_name_of(data_errors, UTIL_COUNT(data_errors), err, "unknown data error");
}

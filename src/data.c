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
#include "ftrain/data.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zlib.h>

/* The largest payload one IDX file may describe; Fashion-MNIST's biggest
 * file holds 47 MB, so 1 GiB leaves room without letting a forged header
 * make us allocate terabytes. */
#define DATA_IDX_MAX_BYTES ((uint64_t)1 << 30)

#define DATA_FMNIST_CLASSES 10
#define DATA_FMNIST_SIDE 28
#define DATA_PATH_MAX 4096

/* Format a message into err, if the caller gave room for one. */
static void set_err(char *err, size_t errcap, const char *fmt, ...)
{
    va_list ap;

    if (!err || errcap == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errcap, fmt, ap);
    va_end(ap);
}

/*
 * Read up to len bytes from f into buf, looping over short reads.  *got is
 * the number of bytes read.  A read error (including a corrupt gzip stream)
 * returns DATA_EIO or DATA_EFORMAT with err set; reaching the end of the
 * file early is not an error here, the caller judges *got.
 */
static int read_full(gzFile f, const char *path, void *buf, uint64_t len,
                     uint64_t *got, char *err, size_t errcap)
{
    int rc = DATA_OK;
    uint8_t *p = buf;
    uint64_t done = 0;

    while (done < len) {
        uint64_t want = len - done;
        int n;

        if (want > ((uint64_t)1 << 30))
            want = (uint64_t)1 << 30;
        n = gzread(f, p + done, (unsigned)want);
        if (n < 0) {
            int zerr = 0;
            const char *msg = gzerror(f, &zerr);

            if (zerr == Z_ERRNO) {
                set_err(err, errcap, "%s: read error: %s", path,
                        strerror(errno));
                rc = DATA_EIO;
            } else {
                size_t pl = strlen(path);

                /* zlib prefixes its message with the path: drop it. */
                if (msg && strncmp(msg, path, pl) == 0 &&
                    strncmp(msg + pl, ": ", 2) == 0)
                    msg += pl + 2;
                set_err(err, errcap, "%s: corrupt gzip stream: %s", path,
                        msg ? msg : "unknown zlib error");
                rc = DATA_EFORMAT;
            }
            goto fail;
        }
        if (n == 0)
            break;
        done += (uint64_t)n;
    }
fail:
    *got = done;
    return rc;
}

/*
 * After a short read, tell a gzip stream that ends early (zlib reports
 * Z_BUF_ERROR) from a plain file that is simply short.  Returns a suffix
 * for the "truncated" message.
 */
static const char *short_reason(gzFile f)
{
    int zerr = 0;

    gzerror(f, &zerr);
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

/*
 * Open an IDX file and check its header: magic 0x000008NN (unsigned bytes,
 * NN = expect_dims dimensions), then NN big-endian 32-bit sizes whose
 * product is bounded before anyone allocates it.  On success *out is the
 * open file positioned at the payload, *total the payload's size and what
 * a description of it for messages.
 */
static int idx_open(const char *path, int expect_dims, uint32_t dims[3],
                    uint64_t *total, gzFile *out, char *what, size_t whatcap,
                    char *err, size_t errcap)
{
    int rc = DATA_OK;
    gzFile f = NULL;
    uint8_t hdr[16];
    uint64_t hdr_len, got = 0, n = 1, room;
    int fd = -1;
    struct stat st;

    *out = NULL;
    *total = 0;
    dims[0] = dims[1] = dims[2] = 0;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0) {
        set_err(err, errcap, "%s: cannot open: %s", path, strerror(errno));
        rc = DATA_EIO;
        goto fail;
    }
    errno = 0;
    f = gzdopen(fd, "rb");
    if (!f) {
        set_err(err, errcap, "%s: cannot open: %s", path,
                errno ? strerror(errno) : "out of memory");
        rc = errno ? DATA_EIO : DATA_ENOMEM;
        goto fail;
    }
    fd = -1; /* f owns it */
    gzbuffer(f, 1u << 18);

    hdr_len = 4 + 4 * (uint64_t)expect_dims;
    rc = read_full(f, path, hdr, hdr_len, &got, err, errcap);
    if (rc != DATA_OK)
        goto fail;
    if (got == 0) {
        set_err(err, errcap, "%s: the file is empty%s", path,
                short_reason(f));
        rc = DATA_EFORMAT;
        goto fail;
    }
    if (got >= 4) {
        uint32_t magic = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 |
                         (uint32_t)hdr[2] << 8 | hdr[3];
        uint32_t want = 0x00000800u | (uint32_t)expect_dims;

        if (magic != want) {
            set_err(err, errcap,
                    "%s: bad magic 0x%08lx, expected 0x%08lx (an IDX file "
                    "of unsigned bytes with %d dimension%s)",
                    path, (unsigned long)magic, (unsigned long)want,
                    expect_dims, expect_dims == 1 ? "" : "s");
            rc = DATA_EFORMAT;
            goto fail;
        }
    }
    if (got < hdr_len) {
        set_err(err, errcap,
                "%s: truncated header: expected %lu bytes, the file has "
                "%lu%s",
                path, (unsigned long)hdr_len, (unsigned long)got,
                short_reason(f));
        rc = DATA_EFORMAT;
        goto fail;
    }
    for (int i = 0; i < expect_dims; i++) {
        const uint8_t *q = hdr + 4 + 4 * i;

        dims[i] = (uint32_t)q[0] << 24 | (uint32_t)q[1] << 16 |
                  (uint32_t)q[2] << 8 | q[3];
    }
    describe(what, whatcap, expect_dims, dims);

    /* Each partial product stays at or below the limit: no overflow. */
    for (int i = 0; i < expect_dims; i++) {
        if (dims[i] == 0) {
            n = 0;
            break;
        }
        if (n > DATA_IDX_MAX_BYTES / dims[i]) {
            set_err(err, errcap,
                    "%s: header says %s, more than the %lu bytes an IDX "
                    "file may hold",
                    path, what, (unsigned long)DATA_IDX_MAX_BYTES);
            rc = DATA_EFORMAT;
            goto fail;
        }
        n *= dims[i];
    }
    /* What the file can hold at most; regular files only (a pipe or a
     * device has no size to judge by). */
    room = (uint64_t)st.st_size;
    if (!gzdirect(f))
        room = room > UINT64_MAX / 1032 ? UINT64_MAX : room * 1032;
    if (S_ISREG(st.st_mode) && hdr_len + n > room) {
        if (gzdirect(f))
            set_err(err, errcap, "%s: truncated: header says %s (%lu bytes) "
                    "but the file has %lu", path, what, (unsigned long)n,
                    (unsigned long)(st.st_size > (off_t)hdr_len
                                    ? (uint64_t)st.st_size - hdr_len : 0));
        else
            set_err(err, errcap, "%s: truncated: header says %s (%lu bytes), "
                    "more than a gzip file of %lu bytes can hold (deflate "
                    "expands at most 1032 times)", path, what,
                    (unsigned long)n, (unsigned long)st.st_size);
        rc = DATA_EFORMAT;
        goto fail;
    }
    *total = n;
    *out = f;
    return DATA_OK;
fail:
    if (f)
        gzclose(f);
    if (fd >= 0)
        close(fd);
    return rc;
}

/*
 * Read an IDX payload of total bytes.  Into bytes when it is not NULL;
 * otherwise through a small buffer into floats, each byte scaled to [0,1]
 * (this skips a second copy of a large file).  Then check that nothing
 * follows the payload.
 */
static int idx_payload(gzFile f, const char *path, const char *what,
                       uint64_t total, uint8_t *bytes, float *floats,
                       char *err, size_t errcap)
{
    int rc = DATA_OK;
    uint64_t got = 0, extra = 0;
    uint8_t chunk[1u << 16];

    if (bytes) {
        rc = read_full(f, path, bytes, total, &got, err, errcap);
        if (rc != DATA_OK)
            goto fail;
    } else {
        float scale[256];

        for (int v = 0; v < 256; v++)
            scale[v] = (float)v / 255.0f;
        while (got < total) {
            uint64_t want = total - got, n = 0;

            if (want > sizeof chunk)
                want = sizeof chunk;
            rc = read_full(f, path, chunk, want, &n, err, errcap);
            if (rc != DATA_OK)
                goto fail;
            for (uint64_t i = 0; i < n; i++)
                floats[got + i] = scale[chunk[i]];
            got += n;
            if (n < want)
                break;
        }
    }
    if (got < total) {
        set_err(err, errcap,
                "%s: truncated: header says %s (%lu bytes) but the file "
                "has %lu%s",
                path, what, (unsigned long)total, (unsigned long)got,
                short_reason(f));
        rc = DATA_EFORMAT;
        goto fail;
    }

    /* Exactly as long as the header says: count what follows, if any. */
    for (;;) {
        uint64_t n = 0;

        rc = read_full(f, path, chunk, sizeof chunk, &n, err, errcap);
        if (rc != DATA_OK)
            goto fail;
        extra += n;
        if (n < sizeof chunk)
            break;
    }
    if (extra > 0) {
        set_err(err, errcap,
                "%s: %lu trailing bytes after the %lu bytes the header "
                "describes (%s)",
                path, (unsigned long)extra, (unsigned long)total, what);
        rc = DATA_EFORMAT;
        goto fail;
    }
fail:
    return rc;
}

int data_read_idx(const char *path, int expect_dims, uint32_t dims[3],
                  uint8_t **data, char *err, size_t errcap)
{
    int rc = DATA_OK;
    gzFile f = NULL;
    uint8_t *buf = NULL;
    uint64_t total = 0;
    char what[96];

    if (data)
        *data = NULL;
    if (!path || !dims || !data || (expect_dims != 1 && expect_dims != 3)) {
        set_err(err, errcap, "%s: data_read_idx: bad arguments",
                path ? path : "(null)");
        rc = DATA_EINVAL;
        goto fail;
    }
    rc = idx_open(path, expect_dims, dims, &total, &f, what, sizeof what,
                  err, errcap);
    if (rc != DATA_OK)
        goto fail;
    buf = malloc(total ? (size_t)total : 1);
    if (!buf) {
        set_err(err, errcap, "%s: out of memory for %lu bytes", path,
                (unsigned long)total);
        rc = DATA_ENOMEM;
        goto fail;
    }
    rc = idx_payload(f, path, what, total, buf, NULL, err, errcap);
    if (rc != DATA_OK)
        goto fail;
    *data = buf;
    buf = NULL;
fail:
    free(buf);
    if (f)
        gzclose(f);
    return rc;
}

/* Release one set's buffers and reset it to empty. */
void data_free(dataset_t *d)
{
    if (!d)
        return;
    free(d->x);
    free(d->labels);
    free(d->y);
    memset(d, 0, sizeof *d);
}

/* Allocate an empty regression set of n one-dimensional points. */
static int alloc_reg(dataset_t *d, int n, char *err, size_t errcap,
                     const char *name)
{
    int rc = DATA_OK;

    memset(d, 0, sizeof *d);
    d->n = n;
    d->in_dim = 1;
    d->out_dim = 1;
    d->classification = 0;
    d->x = malloc(sizeof(float) * (size_t)n);
    d->y = malloc(sizeof(float) * (size_t)n);
    if (!d->x || !d->y) {
        set_err(err, errcap, "%s: out of memory", name);
        rc = DATA_ENOMEM;
        goto fail;
    }
    return DATA_OK;
fail:
    data_free(d);
    return rc;
}

/* y = 0.7x + 0.3; train x = i/1000, test x = 0.0005 + 0.01k.  Each value
 * is computed in double and rounded to float once. */
static int load_line(dataset_t *train, dataset_t *test, char *err,
                     size_t errcap)
{
    int rc;

    rc = alloc_reg(train, 1000, err, errcap, "line");
    if (rc != DATA_OK)
        goto fail;
    rc = alloc_reg(test, 100, err, errcap, "line");
    if (rc != DATA_OK)
        goto fail;
    for (int i = 0; i < train->n; i++) {
        double x = i / 1000.0;

        train->x[i] = (float)x;
        train->y[i] = (float)(0.7 * x + 0.3);
    }
    for (int k = 0; k < test->n; k++) {
        double x = 0.0005 + 0.01 * k;

        test->x[k] = (float)x;
        test->y[k] = (float)(0.7 * x + 0.3);
    }
    return DATA_OK;
fail:
    data_free(train);
    data_free(test);
    return rc;
}

/* y = sin(2 pi x); train x = k/99 (k = 0..99), test the 99 midpoints
 * x = (k + 0.5)/99.  Computed in double, rounded to float once. */
static int load_sine(dataset_t *train, dataset_t *test, char *err,
                     size_t errcap)
{
    const double two_pi = 6.283185307179586476925286766559;
    int rc;

    rc = alloc_reg(train, 100, err, errcap, "sine");
    if (rc != DATA_OK)
        goto fail;
    rc = alloc_reg(test, 99, err, errcap, "sine");
    if (rc != DATA_OK)
        goto fail;
    for (int k = 0; k < train->n; k++) {
        double x = k / 99.0;

        train->x[k] = (float)x;
        train->y[k] = (float)sin(two_pi * x);
    }
    for (int k = 0; k < test->n; k++) {
        double x = (k + 0.5) / 99.0;

        test->x[k] = (float)x;
        test->y[k] = (float)sin(two_pi * x);
    }
    return DATA_OK;
fail:
    data_free(train);
    data_free(test);
    return rc;
}

/* Join dir and file into out, or fail if the path does not fit. */
static int join_path(char *out, size_t cap, const char *dir, const char *file,
                     char *err, size_t errcap)
{
    int n = snprintf(out, cap, "%s/%s", dir, file);

    if (n < 0 || (size_t)n >= cap) {
        set_err(err, errcap, "%s/%s: path too long", dir, file);
        return DATA_EIO;
    }
    return DATA_OK;
}

/*
 * Load one Fashion-MNIST split (an images file and a labels file) into d:
 * 28x28 images scaled to [0,1], labels in [0,10), equal counts.  The labels
 * are read first so the image bytes can go straight into floats.
 */
static int load_fmnist_split(dataset_t *d, const char *dir, const char *img,
                             const char *lbl, char *err, size_t errcap)
{
    int rc;
    char ipath[DATA_PATH_MAX], lpath[DATA_PATH_MAX], what[96];
    uint32_t idims[3], ldims[3];
    uint8_t *lbuf = NULL;
    uint64_t total = 0;
    gzFile f = NULL;

    memset(d, 0, sizeof *d);
    rc = join_path(ipath, sizeof ipath, dir, img, err, errcap);
    if (rc != DATA_OK)
        goto fail;
    rc = join_path(lpath, sizeof lpath, dir, lbl, err, errcap);
    if (rc != DATA_OK)
        goto fail;
    rc = idx_open(ipath, 3, idims, &total, &f, what, sizeof what, err,
                  errcap);
    if (rc != DATA_OK)
        goto fail;
    if (idims[1] != DATA_FMNIST_SIDE || idims[2] != DATA_FMNIST_SIDE) {
        set_err(err, errcap,
                "%s: images are %lux%lu, fashion-mnist's are %dx%d", ipath,
                (unsigned long)idims[1], (unsigned long)idims[2],
                DATA_FMNIST_SIDE, DATA_FMNIST_SIDE);
        rc = DATA_EFORMAT;
        goto fail;
    }
    if (idims[0] == 0) {
        set_err(err, errcap, "%s: the file holds no images", ipath);
        rc = DATA_EFORMAT;
        goto fail;
    }
    rc = data_read_idx(lpath, 1, ldims, &lbuf, err, errcap);
    if (rc != DATA_OK)
        goto fail;
    if (ldims[0] != idims[0]) {
        set_err(err, errcap, "%s: %lu labels, but %s has %lu images", lpath,
                (unsigned long)ldims[0], ipath, (unsigned long)idims[0]);
        rc = DATA_EFORMAT;
        goto fail;
    }
    for (uint32_t i = 0; i < ldims[0]; i++) {
        if (lbuf[i] >= DATA_FMNIST_CLASSES) {
            set_err(err, errcap,
                    "%s: label %u of sample %lu is out of range [0,%d)",
                    lpath, (unsigned)lbuf[i], (unsigned long)i,
                    DATA_FMNIST_CLASSES);
            rc = DATA_EFORMAT;
            goto fail;
        }
    }

    /* The payload bound keeps n * 784 within 1 GiB, so n fits an int. */
    d->n = (int)idims[0];
    d->in_dim = DATA_FMNIST_SIDE * DATA_FMNIST_SIDE;
    d->out_dim = DATA_FMNIST_CLASSES;
    d->classification = 1;
    d->x = malloc(sizeof(float) * (size_t)total);
    d->labels = malloc(sizeof(int32_t) * (size_t)d->n);
    if (!d->x || !d->labels) {
        set_err(err, errcap, "%s: out of memory for %lu samples", ipath,
                (unsigned long)d->n);
        rc = DATA_ENOMEM;
        goto fail;
    }
    for (int i = 0; i < d->n; i++)
        d->labels[i] = lbuf[i];
    rc = idx_payload(f, ipath, what, total, NULL, d->x, err, errcap);
    if (rc != DATA_OK)
        goto fail;

    gzclose(f);
    free(lbuf);
    return DATA_OK;
fail:
    if (f)
        gzclose(f);
    free(lbuf);
    data_free(d);
    return rc;
}

int data_load(const char *name, const char *dir, dataset_t *train,
              dataset_t *test, char *err, size_t errcap)
{
    int rc = DATA_OK;

    if (err && errcap)
        err[0] = '\0';
    if (!train || !test) {
        set_err(err, errcap, "data_load: train and test must not be NULL");
        return DATA_EINVAL;
    }
    memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);
    if (!name) {
        set_err(err, errcap, "data_load: no data set name given");
        rc = DATA_EINVAL;
        goto fail;
    }
    if (strcmp(name, "fashion-mnist") == 0) {
        if (!dir)
            dir = DATA_FMNIST_DIR;
        rc = load_fmnist_split(train, dir, "train-images-idx3-ubyte.gz",
                               "train-labels-idx1-ubyte.gz", err, errcap);
        if (rc != DATA_OK)
            goto fail;
        rc = load_fmnist_split(test, dir, "t10k-images-idx3-ubyte.gz",
                               "t10k-labels-idx1-ubyte.gz", err, errcap);
        if (rc != DATA_OK)
            goto fail;
    } else if (strcmp(name, "line") == 0) {
        rc = load_line(train, test, err, errcap);
        if (rc != DATA_OK)
            goto fail;
    } else if (strcmp(name, "sine") == 0) {
        rc = load_sine(train, test, err, errcap);
        if (rc != DATA_OK)
            goto fail;
    } else {
        set_err(err, errcap,
                "unknown data set '%s' (known: fashion-mnist, line, sine)",
                name);
        rc = DATA_EINVAL;
        goto fail;
    }
    return DATA_OK;
fail:
    data_free(train);
    data_free(test);
    return rc;
}

uint64_t data_fingerprint(const dataset_t *d)
{
    if (!d)
        return 0;
    /* Sizes as fixed-width little-endian fields, then each array hashed with
     * the hash so far as its seed (no hashing state to allocate). */
    int64_t head[4] = {d->n, d->in_dim, d->out_dim, d->classification};
    uint8_t le[32];
    for (int i = 0; i < 4; i++)
        for (int b = 0; b < 8; b++)
            le[8 * i + b] = (uint8_t)((uint64_t)head[i] >> (8 * b));
    uint64_t h = XXH64(le, sizeof le, 0);
    size_t n = d->n > 0 ? (size_t)d->n : 0;
    if (d->x)
        h = XXH64(d->x, n * (size_t)d->in_dim * sizeof *d->x, h);
    if (d->classification && d->labels)
        h = XXH64(d->labels, n * sizeof *d->labels, h);
    if (!d->classification && d->y)
        h = XXH64(d->y, n * (size_t)d->out_dim * sizeof *d->y, h);
    return h;
}

int data_known(const char *name)
{
    return name && (strcmp(name, "fashion-mnist") == 0 ||
                    strcmp(name, "line") == 0 || strcmp(name, "sine") == 0);
}

const char *data_strerror(int err)
{
    switch (err) {
    case DATA_OK:
        return "success";
    case DATA_EIO:
        return "i/o error";
    case DATA_EFORMAT:
        return "malformed data file";
    case DATA_ENOMEM:
        return "out of memory";
    case DATA_EINVAL:
        return "invalid argument or unknown data set";
    default:
        return "unknown data error";
    }
}

/*
 * data.h - the data sets ftrain trains on.
 *
 * HowTo: data_load("fashion-mnist", dir_or_NULL, &train, &test, err, sizeof err)
 * fills two in-memory data sets; data_free() releases each.  Every rank loads
 * the whole set (it is small); which samples a rank uses is the sampler's job.
 *
 *   fashion-mnist  the IDX .gz files of Debian's dataset-fashion-mnist
 *                  (train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,
 *                  t10k-...), 60000 train / 10000 test, 784 features scaled
 *                  to [0,1], 10 classes.  dir defaults to DATA_FMNIST_DIR.
 *   line           y = 0.7x + 0.3, x = 0, 0.001, ..., 0.999 (1000 points);
 *                  test: 100 points at x = 0.0005 + 0.01 k.
 *   sine           y = sin(2 pi x), 100 points x = k/99 in [0,1];
 *                  test: 99 points at the midpoints.
 *
 * Files are untrusted: a truncated or malformed file is an error whose
 * message names the file and what is wrong.
 */
#ifndef FTRAIN_DATA_H
#define FTRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

#define DATA_FMNIST_DIR "/usr/share/datasets/fashion-mnist"

typedef enum {
    DATA_OK = 0,
    DATA_EIO = -1,      /* a file could not be opened or read */
    DATA_EFORMAT = -2,  /* bad magic, dimensions, truncated, trailing bytes */
    DATA_ENOMEM = -3,
    DATA_EINVAL = -4    /* unknown data set name, a path too long, bad arguments */
} data_err_t;

/** The data sets data_load() knows. */
typedef enum {
    DATA_SET_FASHION_MNIST = 0,
    DATA_SET_LINE = 1,
    DATA_SET_SINE = 2
} data_set_t;

typedef struct {
    int samples;           /* number of samples */
    int in_dim;            /* features per sample */
    int out_dim;           /* classes (classification) or targets */
    int classification;    /* 1: labels used, loss softmax cross-entropy */
    float *features;       /* samples * in_dim, row-major */
    int32_t *labels;       /* samples, in [0, out_dim) when classification */
    float *targets;        /* samples * out_dim when !classification */
} dataset_t;

/**
 * Load a named data set (see above).  dir may be NULL for the default.
 * @return DATA_OK, or a negative data_err_t with a message in err naming the
 *         file and the problem; train and test are then left empty.
 */
int data_load(const char *name, const char *dir, dataset_t *train,
              dataset_t *test, char *err, size_t errcap);

/**
 * Parse one IDX file (optionally gzip-compressed; zlib detects it).
 * expect_dims is 1 (labels) or 3 (images).  On success *dims holds the
 * dimension sizes and *data a malloc'd buffer of the unsigned bytes.
 * @return DATA_OK, or DATA_EIO / DATA_EFORMAT / DATA_ENOMEM / DATA_EINVAL
 *         (bad arguments) with err set.
 */
int data_read_idx(const char *path, int expect_dims, uint32_t dims[3],
                  uint8_t **data, char *err, size_t errcap);

/**
 * A data set's fingerprint: h = XXH64 (seed 0) of its four sizes (samples,
 * in_dim, out_dim, classification as 8-byte little-endian integers), then
 * h = XXH64(features, seed h), then h = XXH64(labels or targets, seed h),
 * the arrays as loaded (floats and int32 in host byte order).  A checkpoint
 * stores it for its training set so that a resume on other data is
 * refused.  Allocates nothing and cannot fail.
 * @return the fingerprint (0 for set == NULL).
 */
uint64_t data_fingerprint(const dataset_t *set);

/** The one name table of the data sets: "fashion-mnist", "line", "sine".
 *  _name: "unknown" for a value outside the table; _parse: the value, or
 *  -1 for an unknown name; _names: all names as "fashion-mnist, line or
 *  sine" into buf, for messages (returns buf). */
const char *data_set_name(data_set_t set);
int data_set_parse(const char *name);
const char *data_set_names(char *buf, size_t cap);

/** @return 1 if name is a known data set (data_set_parse(name) >= 0), else 0. */
int data_known(const char *name);

/** Release a data set's buffers; accepts NULL and empty sets. */
void data_free(dataset_t *set);

/** @return a static name for an error code. */
const char *data_strerror(int err);

#endif

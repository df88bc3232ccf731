/*
 * ckptctl_diff.c - the ckptctl command that compares two checkpoints tensor
 * by tensor: diff.  Its output, text and --json, is specified in
 * docs/ckptctl.md.
 */
#include "ckptctl.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A dtype name and a shape, "f32 [256, 1]". */
#define TYPE_TEXT_MAX (sizeof "f32 " + CTL_SHAPE_TEXT_MAX)
/* Bytes of each checkpoint read at a time: any size compares in bounded
 * memory. */
#define DIFF_CHUNK (4u << 20)

/* One of the two checkpoints compared. */
typedef struct {
    char path[CKPT_PATH_MAX];
    ckpt_t *ckpt;
    unsigned char *chunk; /* DIFF_CHUNK bytes */
} diff_side_t;

/* How two tensors of the same dtype and shape differ. */
typedef struct {
    double max_abs, max_rel;
    uint64_t ndiff;      /* elements whose bytes differ */
    uint64_t max_abs_at; /* element index of max_abs */
} diff_stat_t;

/* How many tensors came out which way. */
typedef struct {
    size_t identical, different, missing, extra, mismatched;
} diff_counts_t;

static bool same_shape(const ckpt_tensor_t *left, const ckpt_tensor_t *right)
{
    if (left->dtype != right->dtype || left->ndim != right->ndim)
        return false;
    for (int d = 0; d < left->ndim; d++)
        if (left->shape[d] != right->shape[d])
            return false;
    return true;
}

static double elem_value(ckpt_dtype_t dtype, const unsigned char *bytes)
{
    switch (dtype) {
    case CKPT_F32: {
        float value;
        memcpy(&value, bytes, sizeof value);
        return value;
    }
    case CKPT_F64: {
        double value;
        memcpy(&value, bytes, sizeof value);
        return value;
    }
    case CKPT_I64: {
        int64_t value;
        memcpy(&value, bytes, sizeof value);
        return (double)value;
    }
    case CKPT_I32: {
        int32_t value;
        memcpy(&value, bytes, sizeof value);
        return value;
    }
    case CKPT_U8:
        return *bytes;
    }
    return 0;
}

/* Add the elements of one chunk that differ (index first_elem onwards) to
 * stat. */
static void diff_chunk(ckpt_dtype_t dtype, const unsigned char *left,
                       const unsigned char *right, uint64_t len, uint64_t first_elem,
                       diff_stat_t *stat)
{
    size_t elem_size = ckpt_dtype_size(dtype);
    for (uint64_t at = 0; at < len; at += elem_size) {
        if (memcmp(left + at, right + at, elem_size) == 0)
            continue;
        stat->ndiff++;
        double left_value = elem_value(dtype, left + at);
        double right_value = elem_value(dtype, right + at);
        double abs_diff = fabs(left_value - right_value);
        if (isnan(abs_diff)) /* a NaN against a number differs infinitely */
            abs_diff = (isnan(left_value) && isnan(right_value)) ? 0.0 : INFINITY;
        double scale = fmax(fabs(left_value), fabs(right_value));
        double rel_diff = abs_diff == 0.0 ? 0.0
                          : (scale > 0 && isfinite(scale) ? abs_diff / scale : INFINITY);
        if (stat->ndiff == 1 || abs_diff > stat->max_abs) {
            stat->max_abs = abs_diff;
            stat->max_abs_at = first_elem + at / elem_size;
        }
        if (rel_diff > stat->max_rel)
            stat->max_rel = rel_diff;
    }
}

/* Compare tensor left_tensor of left with right_tensor of right (same dtype
 * and shape) chunk by chunk into stat. */
static int diff_tensor(diff_side_t *left, diff_side_t *right,
                       const ckpt_tensor_t *left_tensor,
                       const ckpt_tensor_t *right_tensor, diff_stat_t *stat)
{
    size_t elem_size = ckpt_dtype_size(left_tensor->dtype);
    uint64_t piece = DIFF_CHUNK / elem_size * elem_size; /* whole elements */
    uint64_t nbytes = left_tensor->nbytes;
    memset(stat, 0, sizeof *stat);
    for (uint64_t off = 0; off < nbytes; off += piece) {
        uint64_t len = nbytes - off < piece ? nbytes - off : piece;
        int rc = ckpt_read_range(left->ckpt, left_tensor->offset + off, len, left->chunk);
        const char *path = left->path;
        if (rc == CKPT_OK) {
            rc = ckpt_read_range(right->ckpt, right_tensor->offset + off, len,
                                 right->chunk);
            path = right->path;
        }
        if (rc != CKPT_OK) {
            ctl_error("diff", path, "cannot read tensor %s: %s", left_tensor->name,
                      ctl_lib_why(rc, "diff", path));
            return ctl_exit_for(rc);
        }
        if (memcmp(left->chunk, right->chunk, (size_t)len) != 0)
            diff_chunk(left_tensor->dtype, left->chunk, right->chunk, len,
                       off / elem_size, stat);
    }
    return EXIT_GOOD;
}

static json_t *diff_entry(const char *name, const char *status)
{
    json_t *obj = json_object();
    json_object_set_new(obj, "name", ctl_json_str(name));
    json_object_set_new(obj, "status", ctl_json_str(status));
    return obj;
}

/* Report tensors of equal dtype and shape that differ (stat). */
static void report_different(const ckpt_tensor_t *tensor, const char *shape,
                             const diff_stat_t *stat, json_t *results)
{
    uint64_t nelem = tensor->nbytes / ckpt_dtype_size(tensor->dtype);
    if (!results) {
        printf("different  %s %s %s: max abs %.6g at element %" PRIu64
               ", max rel %.6g, %" PRIu64 " of %" PRIu64 " elements differ\n",
               tensor->name, ckpt_dtype_name(tensor->dtype), shape, stat->max_abs,
               stat->max_abs_at, stat->max_rel, stat->ndiff, nelem);
        return;
    }
    json_t *obj = diff_entry(tensor->name, "different");
    json_object_set_new(obj, "max_abs", isfinite(stat->max_abs)
                                            ? json_real(stat->max_abs)
                                            : ctl_json_str("inf"));
    json_object_set_new(obj, "max_rel", isfinite(stat->max_rel)
                                            ? json_real(stat->max_rel)
                                            : ctl_json_str("inf"));
    json_object_set_new(obj, "max_abs_at", ctl_json_uint(stat->max_abs_at));
    json_object_set_new(obj, "ndiff", ctl_json_uint(stat->ndiff));
    json_object_set_new(obj, "nelem", ctl_json_uint(nelem));
    json_array_append_new(results, obj);
}

/* Report tensors of one name whose dtype or shape differ. */
static void report_mismatch(const ckpt_tensor_t *left_tensor, const char *left_shape,
                            const ckpt_tensor_t *right_tensor, const char *right_shape,
                            json_t *results)
{
    const char *left_dtype = ckpt_dtype_name(left_tensor->dtype);
    const char *right_dtype = ckpt_dtype_name(right_tensor->dtype);
    if (!results) {
        printf("mismatch   %s: %s %s vs %s %s\n", left_tensor->name, left_dtype,
               left_shape, right_dtype, right_shape);
        return;
    }
    char left_type[TYPE_TEXT_MAX], right_type[TYPE_TEXT_MAX];
    snprintf(left_type, sizeof left_type, "%s %s", left_dtype, left_shape);
    snprintf(right_type, sizeof right_type, "%s %s", right_dtype, right_shape);
    json_t *obj = diff_entry(left_tensor->name, "mismatch");
    json_object_set_new(obj, "a", ctl_json_str(left_type));
    json_object_set_new(obj, "b", ctl_json_str(right_type));
    json_array_append_new(results, obj);
}

/* Compare the tensor of left named like left_tensor with right's, report it
 * and count it. */
static int diff_named(diff_side_t *left, diff_side_t *right,
                      const ckpt_tensor_t *left_tensor, diff_counts_t *counts,
                      json_t *results)
{
    const ckpt_tensor_t *right_tensor = ckpt_find(right->ckpt, left_tensor->name);
    char left_shape[CTL_SHAPE_TEXT_MAX], right_shape[CTL_SHAPE_TEXT_MAX];
    ctl_shape_text(left_tensor, left_shape, sizeof left_shape);
    if (!right_tensor) {
        counts->missing++;
        if (results)
            json_array_append_new(results, diff_entry(left_tensor->name, "missing"));
        else
            printf("missing    %s (only in A)\n", left_tensor->name);
        return EXIT_GOOD;
    }
    ctl_shape_text(right_tensor, right_shape, sizeof right_shape);
    if (!same_shape(left_tensor, right_tensor)) {
        counts->mismatched++;
        report_mismatch(left_tensor, left_shape, right_tensor, right_shape, results);
        return EXIT_GOOD;
    }
    diff_stat_t stat;
    int result = diff_tensor(left, right, left_tensor, right_tensor, &stat);
    if (result != EXIT_GOOD)
        return result;
    if (stat.ndiff > 0) {
        counts->different++;
        report_different(left_tensor, left_shape, &stat, results);
    } else {
        counts->identical++;
        if (results)
            json_array_append_new(results, diff_entry(left_tensor->name, "identical"));
        else
            printf("identical  %s %s %s\n", left_tensor->name,
                   ckpt_dtype_name(left_tensor->dtype), left_shape);
    }
    return EXIT_GOOD;
}

/* Compare every tensor of the two open checkpoints; report, then the
 * summary line or the document. */
static int diff_sides(diff_side_t *left, diff_side_t *right, bool json)
{
    json_t *results = json ? json_array() : NULL;
    diff_counts_t counts = {0};
    for (size_t i = 0; i < ckpt_num_tensors(left->ckpt); i++) {
        int result = diff_named(left, right, ckpt_tensor_at(left->ckpt, i), &counts,
                                results);
        if (result != EXIT_GOOD) {
            json_decref(results);
            return result;
        }
    }
    for (size_t i = 0; i < ckpt_num_tensors(right->ckpt); i++) {
        const ckpt_tensor_t *right_tensor = ckpt_tensor_at(right->ckpt, i);
        if (ckpt_find(left->ckpt, right_tensor->name))
            continue;
        counts.extra++;
        if (results)
            json_array_append_new(results, diff_entry(right_tensor->name, "extra"));
        else
            printf("extra      %s (only in B)\n", right_tensor->name);
    }
    bool same = counts.different == 0 && counts.missing == 0 && counts.extra == 0 &&
                counts.mismatched == 0;
    int result = same ? EXIT_GOOD : EXIT_BAD;
    if (json) {
        json_t *doc = json_object();
        json_object_set_new(doc, "a", ctl_json_str(left->path));
        json_object_set_new(doc, "b", ctl_json_str(right->path));
        json_object_set_new(doc, "identical", json_boolean(same));
        json_object_set_new(doc, "tensors", results);
        int print_rc = ctl_json_print(doc);
        if (print_rc != EXIT_GOOD)
            result = print_rc;
    } else {
        printf("%s: %zu identical, %zu different, %zu missing in B, %zu extra in B, "
               "%zu mismatched\n",
               same ? "identical" : "different", counts.identical, counts.different,
               counts.missing, counts.extra, counts.mismatched);
    }
    return result;
}

static int diff_open(diff_side_t *side)
{
    int rc = ckpt_open(side->path, &side->ckpt);
    if (rc != CKPT_OK)
        return ctl_lib_fail("diff", side->path, rc);
    return EXIT_GOOD;
}

int cmd_diff(const args_t *args)
{
    diff_side_t left = {.ckpt = NULL}, right = {.ckpt = NULL};
    /* Both are resolved before either is opened: a CKPT that names nothing
     * is reported first. */
    int result = ctl_resolve_ckpt("diff", args->operands[0], NULL, true, left.path,
                                  sizeof left.path);
    if (result == EXIT_GOOD)
        result = ctl_resolve_ckpt("diff", args->operands[1], NULL, true, right.path,
                                  sizeof right.path);
    if (result == EXIT_GOOD)
        result = diff_open(&left);
    if (result == EXIT_GOOD)
        result = diff_open(&right);
    if (result == EXIT_GOOD) {
        left.chunk = malloc(DIFF_CHUNK);
        right.chunk = malloc(DIFF_CHUNK);
        if (!left.chunk || !right.chunk) {
            fprintf(stderr, "ckptctl: diff: out of memory\n");
            result = EXIT_ERROR;
        }
    }
    if (result == EXIT_GOOD)
        result = diff_sides(&left, &right, args->set & OPT_JSON);
    free(left.chunk);
    free(right.chunk);
    ckpt_close(left.ckpt);
    ckpt_close(right.ckpt);
    return result;
}

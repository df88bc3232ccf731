/*
 * layout.c - the flat byte space: tensor k starts at the first multiple of
 * 8 at or after the end of tensor k-1, and writer i of W holds bytes
 * [floor(i*T/W), floor((i+1)*T/W)) of its T bytes.
 */
#include "layout.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define LAYOUT_ALIGN 8u

size_t ckpt_dtype_size(ckpt_dtype_t dtype)
{
    switch (dtype) {
    case CKPT_F32: return 4;
    case CKPT_F64: return 8;
    case CKPT_I64: return 8;
    case CKPT_U8: return 1;
    case CKPT_I32: return 4;
    }
    return 0;
}

const char *ckpt_dtype_name(ckpt_dtype_t dtype)
{
    switch (dtype) {
    case CKPT_F32: return "f32";
    case CKPT_F64: return "f64";
    case CKPT_I64: return "i64";
    case CKPT_U8: return "u8";
    case CKPT_I32: return "i32";
    }
    return NULL;
}

int ckpt_dtype_from_name(const char *name, ckpt_dtype_t *dtype)
{
    for (int i = CKPT_F32; i <= CKPT_I32; i++)
        if (strcmp(name, ckpt_dtype_name((ckpt_dtype_t)i)) == 0) {
            *dtype = (ckpt_dtype_t)i;
            return 1;
        }
    return 0;
}

/* 1 when text is valid UTF-8 (no overlong form, surrogate or code point
 * past U+10FFFF).  The manifest is JSON, which holds only UTF-8: a name
 * that is not must be refused here, before any rank writes its shard, not
 * when rank 0 builds the manifest at the commit. */
static int valid_utf8(const char *text)
{
    const unsigned char *p = (const unsigned char *)text;
    size_t left = strlen(text);
    while (left > 0) {
        size_t len = ckpt_utf8_len(p, left);
        if (len == 0)
            return 0;
        p += len;
        left -= len;
    }
    return 1;
}

/* Check tensor `index`'s name, dtype and shape; *nbytes gets its size. */
static int check_tensor(const ckpt_tensor_t *tensor, size_t index,
                        uint64_t *nbytes)
{
    uint64_t elems = 1, elem_size = ckpt_dtype_size(tensor->dtype);
    size_t name_len = strnlen(tensor->name, CKPT_NAME_MAX);
    if (name_len == 0 || name_len >= CKPT_NAME_MAX)
        return ckpt_seterr(CKPT_EINVAL, "tensor %zu: name is empty or not "
                           "NUL-terminated within %d bytes", index, CKPT_NAME_MAX);
    if (!ckpt_name_printable(tensor->name))
        return ckpt_seterr(CKPT_EINVAL, "tensor %zu: name holds a control "
                           "character", index);
    if (!valid_utf8(tensor->name))
        return ckpt_seterr(CKPT_EINVAL, "tensor %zu: name is not valid UTF-8",
                           index);
    if (elem_size == 0)
        return ckpt_seterr(CKPT_EINVAL, "tensor \"%s\": unknown dtype %d",
                           tensor->name, (int)tensor->dtype);
    if (tensor->ndim < 0 || tensor->ndim > CKPT_MAX_DIMS)
        return ckpt_seterr(CKPT_EINVAL, "tensor \"%s\": ndim %d is not in "
                           "0..%d", tensor->name, tensor->ndim, CKPT_MAX_DIMS);
    for (int d = 0; d < tensor->ndim; d++) {
        int64_t extent = tensor->shape[d];
        if (extent < 0)
            return ckpt_seterr(CKPT_EINVAL, "tensor \"%s\": negative shape",
                               tensor->name);
        if (extent != 0 && elems > CKPT_MAX_FLAT_BYTES / (uint64_t)extent)
            return ckpt_seterr(CKPT_EINVAL, "tensor \"%s\": shape overflows",
                               tensor->name);
        elems *= (uint64_t)extent;
    }
    if (elems > CKPT_MAX_FLAT_BYTES / elem_size)
        return ckpt_seterr(CKPT_EINVAL, "tensor \"%s\": too large", tensor->name);
    *nbytes = elems * elem_size;
    return CKPT_OK;
}

static int cmp_tensor_name(const void *left, const void *right)
{
    return strcmp((*(const ckpt_tensor_t *const *)left)->name,
                  (*(const ckpt_tensor_t *const *)right)->name);
}

int ckpt_find_duplicate(const ckpt_tensor_t *tensors, size_t ntensors, size_t *dup)
{
    /* Sorting pointers: there may be many tensors, and they must not move. */
    const ckpt_tensor_t **sorted = malloc((ntensors ? ntensors : 1) * sizeof *sorted);
    if (!sorted)
        return ckpt_seterr(CKPT_ENOMEM, "out of memory");
    for (size_t i = 0; i < ntensors; i++)
        sorted[i] = &tensors[i];
    qsort(sorted, ntensors, sizeof *sorted, cmp_tensor_name);
    *dup = ntensors;
    for (size_t i = 1; i < ntensors && *dup == ntensors; i++)
        if (strcmp(sorted[i - 1]->name, sorted[i]->name) == 0)
            *dup = (size_t)(sorted[i] - tensors);
    free(sorted);
    return CKPT_OK;
}

/* Lay out the tensors into out (when not NULL), or check that they are laid
 * out (out NULL). */
static int lay_out(ckpt_tensor_t *out, const ckpt_tensor_t *tensors, size_t ntensors,
                   uint64_t *total)
{
    int rc;
    uint64_t end = 0, nbytes = 0, offset;
    size_t dup;

    if (!tensors && ntensors > 0)
        return ckpt_seterr(CKPT_EINVAL, "tensors is NULL");
    for (size_t i = 0; i < ntensors; i++) {
        if ((rc = check_tensor(&tensors[i], i, &nbytes)) != CKPT_OK)
            return rc;
        offset = (end + LAYOUT_ALIGN - 1) & ~(uint64_t)(LAYOUT_ALIGN - 1);
        if (offset + nbytes > CKPT_MAX_FLAT_BYTES)
            return ckpt_seterr(CKPT_EINVAL, "tensors exceed 2^53 bytes");
        if (out) {
            out[i].offset = offset;
            out[i].nbytes = nbytes;
        } else if (tensors[i].offset != offset || tensors[i].nbytes != nbytes) {
            return ckpt_seterr(CKPT_EINVAL, "tensor \"%s\" is not laid out "
                               "(call ckpt_layout)", tensors[i].name);
        }
        end = offset + nbytes;
    }
    if ((rc = ckpt_find_duplicate(tensors, ntensors, &dup)) != CKPT_OK)
        return rc;
    if (dup < ntensors)
        return ckpt_seterr(CKPT_EINVAL, "duplicate tensor name \"%s\"",
                           tensors[dup].name);
    *total = end;
    return CKPT_OK;
}

int ckpt_layout(ckpt_tensor_t *tensors, size_t ntensors, uint64_t *total_bytes)
{
    if (!total_bytes)
        return ckpt_seterr(CKPT_EINVAL, "total_bytes is NULL");
    return lay_out(tensors, tensors, ntensors, total_bytes);
}

int ckpt_check_layout(const ckpt_tensor_t *tensors, size_t ntensors, uint64_t *total)
{
    return lay_out(NULL, tensors, ntensors, total);
}

uint64_t ckpt_slice_start(int rank, int world, uint64_t total)
{
    assert(world >= 1 && rank >= 0 && rank <= world);
    /* total * rank needs up to 53 + 16 bits. */
    return (uint64_t)((unsigned __int128)total * (unsigned)rank / (unsigned)world);
}

int ckpt_slice(int rank, int world, uint64_t total, uint64_t *lo, uint64_t *hi)
{
    if (world < 1 || rank < 0 || rank >= world || !lo || !hi)
        return ckpt_seterr(CKPT_EINVAL, "slice of rank %d in a world of %d", rank, world);
    *lo = ckpt_slice_start(rank, world, total);
    *hi = ckpt_slice_start(rank + 1, world, total);
    return CKPT_OK;
}

/*
 * layout.h - the flat byte space: dtypes, checking tensor descriptions,
 * laying tensors out one after another (8-byte aligned), and cutting the
 * space into the writers' slices.  Specified in docs/checkpoint-format.md,
 * section 2.  Depends only on util.h.
 */
#ifndef FTRAIN_CKPT_LAYOUT_H
#define FTRAIN_CKPT_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "ftrain/ckpt.h"

/* Largest size or offset in the flat space: 2^53, exact in every JSON
 * reader. */
#define CKPT_MAX_FLAT_BYTES ((uint64_t)1 << 53)

/* Look a dtype up by its manifest name ("f32").  @return 1 and *dtype, or
 * 0 for an unknown name. */
int ckpt_dtype_from_name(const char *name, ckpt_dtype_t *dtype);

/* Check that the tensors are laid out as ckpt_layout would lay them out:
 * names, dtypes, shapes, offsets in order, 8-byte aligned, nbytes, unique
 * names.  @return CKPT_OK and *total, or CKPT_EINVAL / CKPT_ENOMEM. */
int ckpt_check_layout(const ckpt_tensor_t *tensors, size_t ntensors, uint64_t *total);

/* Find a name that two of the tensors share.  @return CKPT_OK with *dup
 * the index of one of them, or ntensors when the names are unique; CKPT_ENOMEM
 * (message set). */
int ckpt_find_duplicate(const ckpt_tensor_t *tensors, size_t ntensors, size_t *dup);

/* Where writer `rank` of `world` starts in a flat space of total bytes:
 * writer i holds [slice_start(i), slice_start(i + 1)).  rank may be world
 * (the end of the last slice). */
uint64_t ckpt_slice_start(int rank, int world, uint64_t total);

#endif

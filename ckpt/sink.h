/*
 * sink.h - where the shard writer's bytes go: a file written in order,
 * with the running XXH64 of every byte put through it (kept by the sink
 * itself, so no caller can write a byte it forgot to hash), and either
 * O_DIRECT writes from aligned staging buffers on an I/O thread or buffered
 * writes with early writeback.  Both produce the same bytes.
 */
#ifndef FTRAIN_CKPT_SINK_H
#define FTRAIN_CKPT_SINK_H

#include <stddef.h>
#include <stdint.h>

#include "ftrain/ckpt.h"

typedef struct ckpt_sink ckpt_sink_t;

/* Create path afresh (ckpt_create_fresh) for writing as opts say: direct
 * (falling back to buffered writes where the file system refuses
 * O_DIRECT) and fsync at close.  @return CKPT_OK and *out, CKPT_EIO or
 * CKPT_ENOMEM. */
int ckpt_sink_open(ckpt_sink_t **out, const char *path, const ckpt_opts_t *opts);

/* Append len bytes and hash them.  @return CKPT_OK or CKPT_EIO. */
int ckpt_sink_put(ckpt_sink_t *sink, const void *data, size_t len);

/* Bytes put so far: the file offset the next byte goes to. */
uint64_t ckpt_sink_pos(const ckpt_sink_t *sink);

/* 1 while the writes go direct (O_DIRECT through the I/O thread). */
int ckpt_sink_direct(const ckpt_sink_t *sink);

/* The I/O thread's write rate in bytes/s (a moving average); 0 before its
 * first write, and for buffered writes. */
double ckpt_sink_rate(ckpt_sink_t *sink);

/* Write what is left, fsync (when asked) and close; *xxh64 gets the hash
 * of every byte put.  The sink is freed whatever happens; on failure the
 * file is removed.  @return CKPT_OK or CKPT_EIO. */
int ckpt_sink_close(ckpt_sink_t *sink, uint64_t *xxh64);

/* Give up: stop, close, remove the file and free the sink (accepts NULL). */
void ckpt_sink_abort(ckpt_sink_t *sink);

#endif

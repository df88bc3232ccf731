/*
 * state_internal.h - what state.c (save, snapshot, load) and state_check.c
 * (the record's checks at a resume) share: the record's format and the
 * checks' entry points.
 */
#ifndef FTRAIN_STATE_INTERNAL_H
#define FTRAIN_STATE_INTERNAL_H

#include <jansson.h>
#include <stdint.h>

#include "state/state.h"

/* The record's own format (docs/checkpoint-format.md, section 9). */
#define STATE_RECORD_FORMAT "ftrain-state"
#define STATE_RECORD_VERSION 1

/* Room for config_to_json() of any configuration: its text fields (paths
 * of CONFIG_PATH_MAX) and the numbers and names around them. */
#define STATE_CONFIG_JSON_MAX (4 * CONFIG_PATH_MAX)
/* A 64-bit value as 16 hex digits and a NUL. */
#define STATE_HEX64_SIZE 17
/* The most of a record's string (its format, a key) a message quotes. */
#define STATE_QUOTE_MAX 64

/** A 64-bit value as 16 hex digits into buf (STATE_HEX64_SIZE bytes).
 *  @return buf. */
const char *state_hex64(uint64_t value, char *buf);

/** Compare the checkpoint's record rec with this run (R4): format and
 *  version, architecture, options, data, deterministic BLAS threads.
 *  @return STATE_OK, or STATE_EMISMATCH with every difference in err. */
int state_check_record(const state_t *st, json_t *rec, char *err, size_t cap);

/** Warn on stderr when the cosine schedule's total differs from the
 *  checkpoint's run (allowed, but it reshapes the rate from step on). */
void state_warn_schedule(const state_t *st, json_t *rec, int64_t step);

/** Adopt the checkpoint's --init for later saves; rank 0 notes a
 *  different one given now. */
void state_adopt_init(state_t *st, json_t *rec, int rank);

#endif

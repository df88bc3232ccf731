/*
 * local_async_internal.h - what local_tier.c needs of local_async.c, the
 * node-local tier's save in the background (not a public header: the
 * save's own API is in local_tier.h).
 */
#ifndef FTRAIN_LOCAL_ASYNC_INTERNAL_H
#define FTRAIN_LOCAL_ASYNC_INTERNAL_H

#include <stddef.h>

#include "parallel/comm.h"
#include "tier/local_tier.h"

/** Collective, at the end of tier_open: the save's state and the tier's
 *  own channel for the partner exchange (comm_xfer_open: a duplicate of
 *  comm's MPI communicator).
 *  @return TIER_OK or TIER_EFAIL (err set; the same everywhere). */
int tier_async_open(tier_t *t, comm_t *comm, char *err, size_t cap);

/** Release the save's state (tier_close): a save in flight is abandoned,
 *  never sealed.  Accepts a tier whose async part was never opened. */
void tier_async_close(tier_t *t);

#endif

#!/bin/sh
# local_tier_steps.sh - tests/tier/local_tier.sh in its variant "steps": the
# partner exchange moved at step boundaries by the training thread
# (--ckpt-local-exchange steps, MPI_THREAD_FUNNELED) instead of by the
# tier's helper thread (local_tier_shm.sh), on /dev/shm where the tier saves
# in place.  local_tier.sh's header lists the scenarios each variant runs:
# here those that depend on who moves the exchange (a lost node, a kill or
# a stop with a save in flight, a failing save, the shard bytes, a full
# tmpfs, a stopped rank, a copy damaged in transfer, no wait for the
# helper's copy), a damaged partner copy's stale step saved again in
# place, and a relaunch reusing the killed run's files.  local_tier.sh (a
# disk) runs the default, auto.  local_tier_shm.sh checks that /dev/shm is
# a memory file system (or skips, saying why).
FTRAIN_TEST_LOCAL_EXCHANGE=steps exec sh "$(dirname "$0")/local_tier_shm.sh"

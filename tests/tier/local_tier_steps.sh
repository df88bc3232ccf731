#!/bin/sh
# local_tier_steps.sh - tests/tier/local_tier.sh again with the partner exchange
# moved at step boundaries by the training thread (--ckpt-local-exchange
# steps, MPI_THREAD_FUNNELED) instead of by the tier's helper thread
# (local_tier_shm.sh), on /dev/shm where the tier saves in place: every
# scenario of local_tier.sh (a lost node, a kill or a stop with a save in
# flight, a failing save, the files reused) on that path.  local_tier.sh
# (a disk) runs the default, auto.  local_tier_shm.sh checks that /dev/shm
# is a memory file system (or skips, saying why).
FTRAIN_TEST_LOCAL_EXCHANGE=steps exec sh "$(dirname "$0")/local_tier_shm.sh"

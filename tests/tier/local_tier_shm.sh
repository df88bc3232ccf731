#!/bin/sh
# local_tier_shm.sh - tests/tier/local_tier.sh in its variant "thread": the
# fake nodes' directories on /dev/shm, a memory file system, where the
# node-local tier saves in place (src/tier/local_inplace.c), with the
# partner exchange moved by the tier's helper thread (--ckpt-local-exchange
# thread).  local_tier.sh's header lists the scenarios each variant runs:
# here those that depend on the save's path or on who moves the exchange
# (a lost node, a kill or a stop with a save in flight, a failing save, the
# shard bytes equal to the shared tier's, a full tmpfs, a stopped rank, a
# copy damaged in transfer, the update waiting for the helper's copy), and
# its section 13's files reused over many saves.  local_tier.sh itself
# runs on the test's temporary directory (a disk here), where the tier
# writes shards with write(), with the default exchange (auto);
# local_tier_steps.sh runs this file with the exchange on the training
# thread (FTRAIN_TEST_LOCAL_EXCHANGE=steps).
. "$(dirname "$0")/../lib.sh"
[ -d /dev/shm ] && [ -w /dev/shm ] || skip_all "no writable /dev/shm"
case "$(stat -f -c %T /dev/shm)" in
tmpfs | ramfs) ;;
*) skip_all "/dev/shm is not a memory file system" ;;
esac
rm -rf "$T"
FTRAIN_TEST_LOCAL_BASE=/dev/shm FTRAIN_TEST_LOCAL_EXCHANGE=${FTRAIN_TEST_LOCAL_EXCHANGE:-thread} exec sh "$(dirname "$0")/local_tier.sh"

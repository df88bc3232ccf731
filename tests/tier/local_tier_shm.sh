#!/bin/sh
# local_tier_shm.sh - tests/tier/local_tier.sh again with the fake nodes'
# directories on /dev/shm, a memory file system, where the node-local tier
# saves in place (src/tier/local_inplace.c), with the partner exchange moved by
# the tier's helper thread (--ckpt-local-exchange thread): each scenario of
# local_tier.sh (a lost node, a kill or a stop with a save in flight, a
# failing save, the shard bytes equal to the shared tier's) then runs on
# that path, and its section 13 checks that the files are reused.
# local_tier.sh itself runs on the test's temporary directory (a disk
# here), where the tier writes shards with write(), with the default
# exchange (auto); local_tier_steps.sh runs this file with the exchange on
# the training thread (FTRAIN_TEST_LOCAL_EXCHANGE=steps).
. "$(dirname "$0")/../lib.sh"
[ -d /dev/shm ] && [ -w /dev/shm ] || skip_all "no writable /dev/shm"
case "$(stat -f -c %T /dev/shm)" in
tmpfs | ramfs) ;;
*) skip_all "/dev/shm is not a memory file system" ;;
esac
rm -rf "$T"
FTRAIN_TEST_LOCAL_BASE=/dev/shm FTRAIN_TEST_LOCAL_EXCHANGE=${FTRAIN_TEST_LOCAL_EXCHANGE:-thread} exec sh "$(dirname "$0")/local_tier.sh"

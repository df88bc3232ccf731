#!/bin/sh
# alloc_failure.sh - an allocation that fails on one rank ends the whole
# job quickly, with a reason, instead of hanging the other ranks: during
# set-up, and in a checkpoint commit (the table of the ranks' shard
# descriptions), where nothing is committed and the earlier checkpoint
# stays; several ranks of one process failing in one commit do not
# deadlock each other.
#
# The failures come from the failalloc LD_PRELOAD shim
# (tests/preload/failalloc.c), which cannot replace a sanitizer's
# allocator: a sanitized build skips this file.
. "$(dirname "$0")/../lib.sh"
: "${FTRAIN_TIMEOUT:=60}"
need_mpi
FAILALLOC="$BUILD/tests/preload/failalloc.so"
LINE="--data line --global-batch 32 --micro-batch 8 --lr 0.01"
if ldd "$FTRAIN" 2>/dev/null | grep -q 'libasan\|libtsan'; then
    skip_all "sanitized build: the allocation-failure shim cannot replace the sanitizer's allocator"
fi

# ---- out of memory on one rank during set-up ------------------------------
t0=$(date +%s)
FAILALLOC_RANK=1 FAILALLOC_MIN=30000000 \
    timeout -k 5 60 mpirun --oversubscribe -n 2 -x LD_PRELOAD="$FAILALLOC" \
    -x FAILALLOC_RANK -x FAILALLOC_MIN "$FTRAIN" --data line --layers 3000,3000 --steps 2 \
    --run-dir "$T/oom" >"$T/oom.out" 2>"$T/oom.err"
rc=$?
secs=$(($(date +%s) - t0))
ok "$([ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] && [ "$secs" -lt 45 ]; echo $?)" \
    "out of memory on rank 1 during set-up: the job ends (exit $rc after ${secs} s), no hang" ||
    why "$(tail -n 3 "$T/oom.err")"
like "$(cat "$T/oom.err")" "rank 1: .*cannot create|rank 0: set-up failed on another rank" \
    "  and the ranks say why"

# ---- out of memory on one rank in a commit ---------------------------------
# The commit's table of the ranks' shard descriptions (2 x 56 bytes)
# cannot be allocated on rank 1: it still takes part in the allgather
# (the others would wait for ever), and nothing is committed.
d="$T/commit-oom"
mpi 2 $LINE --steps 2 --run-dir "$d" >/dev/null 2>&1
before=$(ls "$d/ckpt" | tr '\n' ' ')
t0=$(date +%s)
FAILALLOC_RANK=1 FAILALLOC_CALLOC=2,56 \
    timeout -k 5 60 mpirun --oversubscribe -n 2 -x LD_PRELOAD="$FAILALLOC" \
    -x FAILALLOC_RANK -x FAILALLOC_CALLOC "$FTRAIN" $LINE --steps 4 --run-dir "$d" \
    >"$T/coom.out" 2>"$T/coom.err"
rc=$?
secs=$(($(date +%s) - t0))
ok "$([ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] && [ "$secs" -lt 45 ]; echo $?)" \
    "out of memory on rank 1 in the commit: the job ends (exit $rc after ${secs} s), no hang" ||
    why "$(tail -n 3 "$T/coom.err")"
like "$(cat "$T/coom.err")" "out of memory for 2 ranks' shard descriptions" "  and rank 1 says why"
is "$(ls "$d/ckpt" | tr '\n' ' ')" "$before" "  nothing was committed, the earlier checkpoint stays"

# ---- several in-process ranks out of memory in one commit -------------------
# Three ranks in one process (threads sharing a collective) all out of
# memory in one commit: each takes its own spare table, none waits for
# another's (a single shared spare would deadlock them).
OMPI_COMM_WORLD_RANK=0 FAILALLOC_RANK=0 FAILALLOC_CALLOC=3,56 \
    LD_PRELOAD="$FAILALLOC" timeout 20 \
    "$BUILD/tests/tools/ckpt_mkfixture" "$T/fx" 5 --world 3 >"$T/fx.out" 2>"$T/fx.err"
rc=$?
ok "$([ "$rc" -eq 1 ] && grep -q "out of memory for 3 ranks' shard descriptions" "$T/fx.err" &&
    [ -z "$(ls "$T/fx" 2>/dev/null | grep '^step-')" ]; echo $?)" \
    "3 in-process ranks out of memory in one commit: all fail (exit $rc), none hangs, nothing committed" ||
    why "$(cat "$T/fx.err")"

done_testing

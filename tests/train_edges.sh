#!/bin/sh
# train_edges.sh - the trainer at its edges: the deepest model (15 hidden
# layers) with Adam saves and resumes; a diverging deterministic run stops
# with an error instead of printing a wrapped-around negative loss; a
# deterministic resume with another BLAS thread count is refused; the
# cosine schedule's rate is what is logged; --resume none and an explicit
# older --resume refuse a run directory that holds (newer) checkpoints and
# leave them untouched; a set-up failure on one rank ends the whole job
# quickly instead of hanging it, and so does one that cannot allocate the
# commit's table of shard descriptions; of two ranks signalled in one step the
# first is named, and the stop line gives the longest step; --stop-signal
# USR2 leaves SIGUSR1 alone.
. "$(dirname "$0")/lib.sh"
: "${FTRAIN_TIMEOUT:=60}"
need_mpi
CKPTCTL="$BUILD/ckptctl"
LINE="--data line --global-batch 32 --micro-batch 8 --lr 0.01"

# ---- 15 hidden layers, Adam: every tensor of the state is saved ---------
d="$T/deep"
layers=4,4,4,4,4,4,4,4,4,4,4,4,4,4,4
mpi 2 $LINE --layers $layers --steps 4 --ckpt-every 2 --run-dir "$d" >"$d.out" 2>"$d.err"
rc=$?
is "$rc" 0 "15 hidden layers with Adam: trains and saves (exit $rc)" || why "$(tail -n 3 "$d.err")"
"$CKPTCTL" inspect --json "$d/ckpt" >"$T/deep.json" 2>/dev/null
is "$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(len(d["tensors"]))' "$T/deep.json" 2>&1)" 96 \
    "  its checkpoint holds 96 tensors (16 layers x weight, bias x parameters, 2 moments)"
mpi 3 $LINE --layers $layers --steps 6 --run-dir "$d" >"$d.res" 2>"$d.reserr"
rc=$?
ok "$([ "$rc" -eq 0 ] && grep -q '^resume: ' "$d.res"; echo $?)" "  and resumes on 3 ranks to the end (exit $rc)" ||
    why "$(tail -n 3 "$d.reserr")"

# ---- a diverging deterministic run ------------------------------------
mpi 2 --data sine --deterministic --optimizer sgd --lr 3 --steps 60 --layers 16 >"$T/div.out" 2>"$T/div.err"
rc=$?
ok "$([ "$rc" -eq 1 ] && grep -q 'runaway loss at step [0-9]*: training diverged' "$T/div.err"; echo $?)" \
    "diverging deterministic run: exit 1, 'training diverged' (exit $rc)" || why "$(tail -n 2 "$T/div.err")"
ok "$(! grep -Eq '(loss|test_loss) -[0-9]' "$T/div.out"; echo $?)" \
    "  no negative (wrapped-around) loss was printed" || why "$(grep -E 'loss -' "$T/div.out" | head -n 2)"

# ---- a deterministic resume with another BLAS thread count ------------
d="$T/thr"
mpi 1 --data line --deterministic --steps 4 --run-dir "$d" >"$d.out" 2>&1
mpi 1 --data line --deterministic --steps 6 --threads 2 --run-dir "$d" >"$d.res" 2>"$d.err"
rc=$?
ok "$([ "$rc" -ne 0 ] && grep -q 'BLAS threads differ: the checkpoint was written with 1 per rank, this run has 2' "$d.err"; echo $?)" \
    "--deterministic resume with --threads 2 after 1: refused (exit $rc), bits would differ" || why "$(cat "$d.err")"
mpi 1 --data line --deterministic --steps 6 --run-dir "$d" >"$d.res2" 2>&1
is "$?" 0 "  the same resume with the same thread count runs"

# ---- the cosine schedule's rate is logged ------------------------------
mpi 1 $LINE --schedule cosine --lr 0.1 --steps 6 --log-every 1 >"$T/cos.out" 2>&1
lrs=$(sed -n 's/^epoch .* lr \([0-9.e+-]*\) .*/\1/p' "$T/cos.out" | tr '\n' ' ')
is "$lrs" "1.00e-01 9.33e-02 7.50e-02 5.00e-02 2.50e-02 6.70e-03 " \
    "cosine over 6 steps: the logged rates follow the schedule"

# ---- --resume none / an older --resume into a directory with checkpoints ----
d="$T/two"
mpi 2 $LINE --steps 8 --ckpt-every 2 --run-dir "$d" >"$d.out" 2>&1
before=$(ls "$d/ckpt" | tr '\n' ' ')
mpi 2 $LINE --steps 3 --ckpt-every 1 --run-dir "$d" --resume none >"$T/none.out" 2>"$T/none.err"
rc=$?
ok "$([ "$rc" -ne 0 ] && [ "$rc" -ne 75 ] && grep -q "already holds checkpoints (newest step-00000008)" "$T/none.err"; echo $?)" \
    "--resume none into a run directory with checkpoints: refused (exit $rc), naming the newest" ||
    why "$(cat "$T/none.err")"
ok "$(! grep -q '^epoch ' "$T/none.out"; echo $?)" "  before any training"
is "$(ls "$d/ckpt" | tr '\n' ' ')" "$before" "  the checkpoints are untouched"
mpi 2 $LINE --steps 8 --ckpt-every 2 --run-dir "$d" --resume "$d/ckpt/step-00000004" >"$T/old.out" 2>"$T/old.err"
rc=$?
ok "$([ "$rc" -ne 0 ] && grep -q "is step 4, but .* already holds newer checkpoints (newest step-00000008)" "$T/old.err"; echo $?)" \
    "--resume of an older checkpoint beside newer ones: refused (exit $rc)" || why "$(cat "$T/old.err")"
is "$(ls "$d/ckpt" | tr '\n' ' ')" "$before" "  the checkpoints are untouched"
mpi 2 $LINE --steps 8 --ckpt-every 2 --run-dir "$T/branch" --resume "$d/ckpt/step-00000004" >"$T/br.out" 2>"$T/br.err"
is "$?" 0 "  the same --resume into a new --run-dir runs"

# ---- a set-up failure on one rank ends the job ------------------------
if ldd "$FTRAIN" 2>/dev/null | grep -q 'libasan'; then
    skip "sanitized build: the allocation-failure shim cannot replace ASan's allocator" 6
else
    t0=$(date +%s)
    FAILALLOC_RANK=1 FAILALLOC_MIN=30000000 \
        timeout -k 5 60 mpirun --oversubscribe -n 2 -x LD_PRELOAD="$BUILD/tests/preload/failalloc.so" \
        -x FAILALLOC_RANK -x FAILALLOC_MIN "$FTRAIN" --data line --layers 3000,3000 --steps 2 \
        --run-dir "$T/oom" >"$T/oom.out" 2>"$T/oom.err"
    rc=$?
    secs=$(($(date +%s) - t0))
    ok "$([ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] && [ "$secs" -lt 45 ]; echo $?)" \
        "out of memory on rank 1 during set-up: the job ends (exit $rc after ${secs} s), no hang" ||
        why "$(tail -n 3 "$T/oom.err")"
    like "$(cat "$T/oom.err")" "rank 1: .*cannot create|rank 0: set-up failed on another rank" \
        "  and the ranks say why"

    # The commit's table of the ranks' shard descriptions (2 x 56 bytes)
    # cannot be allocated on rank 1: it still takes part in the allgather
    # (the others would wait for ever), and nothing is committed.
    d="$T/commit-oom"
    mpi 2 $LINE --steps 2 --run-dir "$d" >/dev/null 2>&1
    before=$(ls "$d/ckpt" | tr '\n' ' ')
    t0=$(date +%s)
    FAILALLOC_RANK=1 FAILALLOC_CALLOC=2,56 \
        timeout -k 5 60 mpirun --oversubscribe -n 2 -x LD_PRELOAD="$BUILD/tests/preload/failalloc.so" \
        -x FAILALLOC_RANK -x FAILALLOC_CALLOC "$FTRAIN" $LINE --steps 4 --run-dir "$d" \
        >"$T/coom.out" 2>"$T/coom.err"
    rc=$?
    secs=$(($(date +%s) - t0))
    ok "$([ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] && [ "$secs" -lt 45 ]; echo $?)" \
        "out of memory on rank 1 in the commit: the job ends (exit $rc after ${secs} s), no hang" ||
        why "$(tail -n 3 "$T/coom.err")"
    like "$(cat "$T/coom.err")" "out of memory for 2 ranks' shard descriptions" "  and rank 1 says why"
    is "$(ls "$d/ckpt" | tr '\n' ' ')" "$before" "  nothing was committed, the earlier checkpoint stays"

    # Three ranks in one process (threads sharing a collective) all out of
    # memory in one commit: each takes its own spare table, none waits for
    # another's (a single shared spare would deadlock them).
    OMPI_COMM_WORLD_RANK=0 FAILALLOC_RANK=0 FAILALLOC_CALLOC=3,56 \
        LD_PRELOAD="$BUILD/tests/preload/failalloc.so" timeout 20 \
        "$BUILD/tests/tools/ckpt_mkfixture" "$T/fx" 5 --world 3 >"$T/fx.out" 2>"$T/fx.err"
    rc=$?
    ok "$([ "$rc" -eq 1 ] && grep -q "out of memory for 3 ranks' shard descriptions" "$T/fx.err" &&
        [ -z "$(ls "$T/fx" 2>/dev/null | grep '^step-')" ]; echo $?)" \
        "3 in-process ranks out of memory in one commit: all fail (exit $rc), none hangs, nothing committed" ||
        why "$(cat "$T/fx.err")"
fi

# ---- two ranks signalled within one step: the first one is named -------
d="$T/first"
: >"$d.out"
mpi_bg 2 $LINE --steps 100000 --log-every 1 --step-delay-ms 1500 --run-dir "$d" >>"$d.out" 2>"$d.err"
_ge() { [ "$(grep -c '^epoch ' "$1")" -ge "$2" ]; }
# After the second step: the first 1.5 s delay (a whole step) is behind.
if wait_for 30 _ge "$d.out" 2; then
    kill -USR1 "$(rank_pid "$d.out" 0)"
    sleep 0.3
    kill -TERM "$(rank_pid "$d.out" 1)"
fi
wait "$MPI_PID"
rc=$?
MPI_PID=
like "$(grep '^stop:' "$d.out")" "stop: signal USR1 \(first seen by rank 0\)" \
    "USR1 to rank 0, then TERM to rank 1 within the step: the stop names USR1 and rank 0 (exit $rc)"
ls=$(sed -n 's/^stop: .*; longest step \([0-9.]*\) s.*/\1/p' "$d.out")
ok "$(awk -v v="$ls" 'BEGIN { exit !(v >= 1.4 && v < 30) }'; echo $?)" \
    "  the stop line gives the longest step, at least the 1.5 s step delay ($ls s)" ||
    why "$(grep '^stop:' "$d.out")"
like "$(grep '"event":"stop"' "$d/metrics.jsonl")" '"longest_step_seconds":1\.[4-9]|"longest_step_seconds":[2-9]' \
    "  and so does the metrics file's stop event"

# ---- --stop-signal USR2: SIGUSR1 is not a stop signal -----------------
d="$T/usr2"
: >"$d.out"
mpi_bg 2 $LINE --steps 100000 --log-every 1 --step-delay-ms 20 --stop-signal USR2 --run-dir "$d" >>"$d.out" 2>"$d.err"
_ge() { [ "$(grep -c '^epoch ' "$1")" -ge "$2" ]; }
if wait_for 20 _ge "$d.out" 3; then
    kill -USR1 "$(rank_pid "$d.out" 1)"
    sleep 1
    p0=$(rank_pid "$d.out" 0)
    kill -USR2 "$p0"
fi
wait "$MPI_PID"
rc=$?
MPI_PID=
ok "$([ "$rc" -ne 75 ] && ! grep -q '^stop: signal USR1' "$d.out"; echo $?)" \
    "--stop-signal USR2: SIGUSR1 is not taken as a stop (exit $rc, no 'stop: signal USR1')" ||
    why "$(grep '^stop:' "$d.out")"

# ---- the same failure on every rank is said once ------------------------
mpi 3 --data fashion-mnist --data-dir "$T/no-such-dir" --steps 2 >"$T/same.out" 2>"$T/same.err"
rc=$?
ok "$([ "$rc" -eq 1 ] && [ "$(grep -c '^ftrain: rank' "$T/same.err")" -eq 1 ] &&
    grep -q '^ftrain: rank 0: .*no-such-dir' "$T/same.err"; echo $?)" \
    "the same error on 3 ranks is printed once, by rank 0 (exit $rc)" || why "$(cat "$T/same.err")"

done_testing

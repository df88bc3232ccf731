#!/bin/sh
# make demo: the whole stop/requeue/resume path on one machine, no SLURM.
#
# A deterministic Fashion-MNIST run on 4 ranks gets SIGUSR1 on ONE non-zero
# rank mid-epoch; the ranks agree, checkpoint collectively and exit 75.  It
# resumes on 3 ranks, is stopped again, resumes on 2 ranks and finishes.
# Then an uninterrupted 4-rank run shows the same final param_hash, and the
# loss curve of the whole run is drawn to runs/demo/loss.svg by ftrain-plot.
set -eu
B=${BUILD:-build}
RUN=${DEMO_DIR:-runs/demo}
REF=${RUN}-reference
EPOCHS=${DEMO_EPOCHS:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ARGS="--deterministic --epochs $EPOCHS --seed 7 --lr 0.002 --schedule cosine --warmup 50 --ckpt-every 200 --log-every 20"
rm -rf "$RUN" "$REF"
mkdir -p "$RUN"

say() { printf '\n=== %s\n' "$*"; }

# launch N LOG: start an N-rank run in the background; sets PID.
launch() {
    mpirun --oversubscribe -n "$1" "$B/ftrain" $ARGS --run-dir "$RUN" >"$2" 2>&1 &
    PID=$!
}

# wait_step STEP: wait until metrics.jsonl has a logged step >= STEP.
wait_step() {
    i=0
    while :; do
        last=$(grep '"loss"' "$RUN/metrics.jsonl" 2>/dev/null | tail -1 |
               sed 's/.*"step":\([0-9]*\).*/\1/')
        [ -n "$last" ] && [ "$last" -ge "$1" ] && return 0
        kill -0 "$PID" 2>/dev/null || { echo "demo: run ended early" >&2; return 1; }
        i=$((i + 1)); [ $i -gt 3000 ] && { echo "demo: timeout" >&2; return 1; }
        sleep 0.1
    done
}

# signal_rank LOG RANK: send SIGUSR1 to one rank, found in the world lines.
signal_rank() {
    pid=$(sed -n "s/^world: rank $2 local [0-9]* host [^ ]* pid \([0-9]*\).*/\1/p" "$1")
    echo "demo: kill -USR1 $pid  (rank $2 only)"
    kill -USR1 "$pid"
}

# finish LOG: wait for the run; print its key lines; return its exit code.
finish() {
    set +e
    wait "$PID"; rc=$?
    set -e
    grep -E '^(resume|stop|checkpoint|done|eval):' "$1" || true
    echo "demo: exit code $rc"
    return 0
}

say "1. 4 ranks, deterministic; SIGUSR1 to rank 2 only, mid-epoch"
launch 4 "$RUN/seg1.log"
wait_step 300
signal_rank "$RUN/seg1.log" 2
finish "$RUN/seg1.log"; [ "$rc" = 75 ] || { echo "demo: expected exit 75"; exit 1; }

say "2. resume on 3 ranks; SIGUSR1 to rank 1 only"
launch 3 "$RUN/seg2.log"
wait_step 600
signal_rank "$RUN/seg2.log" 1
finish "$RUN/seg2.log"; [ "$rc" = 75 ] || { echo "demo: expected exit 75"; exit 1; }

say "3. resume on 2 ranks and finish"
launch 2 "$RUN/seg3.log"
finish "$RUN/seg3.log"; [ "$rc" = 0 ] || { echo "demo: expected exit 0"; exit 1; }

say "checkpoints (ckptctl list)"
if [ -x "$B/ckptctl" ]; then "$B/ckptctl" list "$RUN/ckpt"; else ls -l "$RUN/ckpt"; fi

say "4. the same run uninterrupted on 4 ranks"
mpirun --oversubscribe -n 4 "$B/ftrain" $ARGS --run-dir "$REF" --quiet >"$REF.log" 2>&1
cat "$REF.log"

h1=$(sed -n 's/^done: .*param_hash=\([0-9a-f]*\)$/\1/p' "$RUN/seg3.log")
h2=$(sed -n 's/^done: .*param_hash=\([0-9a-f]*\)$/\1/p' "$REF.log")
python3 scripts/ftrain-plot "$RUN" --reference "$REF"
say "result"
echo "stopped twice, resumed 4 -> 3 -> 2 ranks: param_hash=$h1"
echo "uninterrupted on 4 ranks:                 param_hash=$h2"
echo "loss curve with stops and world sizes:    $RUN/loss.svg"
if [ -n "$h1" ] && [ "$h1" = "$h2" ]; then
    echo "IDENTICAL: bit-for-bit the same weights"
else
    echo "DIFFERENT: determinism is broken" >&2
    exit 1
fi

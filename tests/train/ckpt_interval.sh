#!/bin/sh
# ckpt_interval.sh - TAP tests of --ckpt-interval and --grace beyond their
# parsing (the parsing is config_parse.c's and cli.sh's).
#
# --ckpt-interval SEC: rank 0 votes for a save in a step's control
# reduction once SEC seconds have passed since the last save committed (or
# since training started), and every rank saves after that step; never at
# the last step, which the end saves anyway.  So with steps held
# --step-delay-ms D each:
#   1. a run that crosses the interval several times saves periodically:
#      each save comes at least SEC after the one before (or the start),
#      by metrics.jsonl's clock, and at most ceil(SEC / D) steps after it
#      (ceil(SEC / D) + 1 for the first: a step takes at least D, so the
#      interval has passed by then), on every rank (2 shards each);
#   2. a run shorter than the interval saves only at its end.
# --grace SEC: rank 0 warns on stderr when a stop (signal to committed
# checkpoint) took longer than SEC:
#   3. a stop well within --grace: no warning;
#   4. a stop whose save's fsync is held longer than --grace (the stallio
#      shim, tests/preload/stallio.c): the warning, naming the stop's time
#      (the stop line's total) and the grace.
#
# Reads $BUILD (default build) for ftrain and the shim.  About 30 s.
. "$(dirname "$0")/../lib.sh"
need_mpi

plan 17

LINE="--data line --layers 4 --global-batch 10 --micro-batch 10"
# events NAME FILE: "step time" of each NAME event in metrics.jsonl FILE.
events() {
    sed -n "s/^{\"event\":\"$1\",\"step\":\([0-9]*\),.*\"time\":\([0-9.]*\).*/\1 \2/p" "$2"
}
# steps_in ROOT: the steps of the committed checkpoints under ROOT, one a line.
steps_in() {
    for _d in "$1"/step-*; do
        [ -f "$_d/manifest.json" ] && basename "$_d" | sed 's/^step-0*//'
    done
}

# ---- 1. a run that crosses the interval several times ---------------------------
SEC=1 D=200 STEPS=30
mpi 2 $LINE --steps $STEPS --step-delay-ms $D --ckpt-interval $SEC --ckpt-keep 1000 \
    --run-dir "$T/a" >"$T/a.out" 2>"$T/a.err"
is "$?" 0 "$STEPS steps of $D ms with --ckpt-interval $SEC: exit 0" || why "$(tail -n 5 "$T/a.err")"
saves=$(events checkpoint "$T/a/metrics.jsonl")
start=$(events start "$T/a/metrics.jsonl" | head -n 1)
periodic=$(printf '%s\n' "$saves" | awk -v last=$STEPS '$1 != last { print $1 }' | tr '\n' ' ')
diag "checkpoint events (step time): $(printf '%s\n' "$saves" | tr '\n' ',')"
# The bound in steps: a step takes at least D ms, so ceil(SEC / D) steps after
# a commit the interval has passed; the first save has one step more (the
# clock starts before step 1, whose delay comes after it).
per=$(awk -v s=$SEC -v d=$D 'BEGIN { n = s * 1000 / d; printf "%d", (n == int(n)) ? n : int(n) + 1 }')
want_min=$(((STEPS - 2) / per))
n_periodic=$(printf '%s' "$periodic" | wc -w)
ok "$([ "$n_periodic" -ge "$want_min" ]; echo $?)" \
    "periodic saves before the end: $n_periodic (steps $periodic), at least $want_min" ||
    why "$(cat "$T/a.out")"
judged=$(printf '%s\n%s\n' "$start" "$saves" | awk -v sec=$SEC -v per=$per -v last=$STEPS '
    NR == 1 { ps = $1; pt = $2; next }
    $1 == last { next }
    {
        gap = $2 - pt; steps = $1 - ps; lim = (NR == 2) ? per + 1 : per
        # 0.05 s: the event is logged after the prune that follows the
        # commit from which the next interval counts.
        if (gap < sec - 0.05) print "step " $1 ": " gap " s after step " ps ", under " sec " s"
        if (steps > lim) print "step " $1 ": " steps " steps after step " ps ", more than " lim
        ps = $1; pt = $2
    }')
is "$judged" "" "each periodic save came at least $SEC s and at most $per steps after the one before"
last=$(printf '%s\n' "$saves" | tail -n 1 | cut -d' ' -f1)
is "$last" "$STEPS" "and the end saved step $STEPS"
is "$(steps_in "$T/a/ckpt" | tr '\n' ' ')" "$periodic$STEPS " \
    "the committed checkpoints on disk are those steps"
bad=""
for s in $periodic; do
    d=$(printf '%s/step-%08d' "$T/a/ckpt" "$s")
    [ -f "$d/shard-0.ftsh" ] && [ -f "$d/shard-1.ftsh" ] || bad="$bad $s"
done
is "$bad" "" "every rank saved at each periodic save (2 shards each)"

# ---- 2. a run shorter than the interval ---------------------------------------------
mpi 2 $LINE --steps 10 --step-delay-ms 100 --ckpt-interval 60 --run-dir "$T/b" \
    >"$T/b.out" 2>"$T/b.err"
is "$?" 0 "10 steps of 100 ms with --ckpt-interval 60: exit 0" || why "$(tail -n 5 "$T/b.err")"
is "$(steps_in "$T/b/ckpt" | tr '\n' ' ')" "10 " "only the end's checkpoint (step 10) was written"
is "$(events checkpoint "$T/b/metrics.jsonl" | cut -d' ' -f1 | tr '\n' ' ')" "10 " \
    "and metrics.jsonl logs that one save only"

# ---- 3 and 4. --grace -------------------------------------------------------------------
# stop_run NAME ARGS...: a run of 1000 steps of 100 ms, SIGUSR1 to rank 0
# once it is training; its exit code in $rc, output in $T/NAME.out/.err.
# $MPIRUN_OPTS (words without spaces) go to mpirun before the program.
stop_run() {
    _n=$1
    shift
    timeout -k 5 "$FTRAIN_TIMEOUT" sh "$LAUNCH" mpirun --oversubscribe -n 2 ${MPIRUN_OPTS:-} "$FTRAIN" \
        --device cpu $LINE --steps 1000 --step-delay-ms 100 --log-every 1 \
        --run-dir "$T/$_n" "$@" >"$T/$_n.out" 2>"$T/$_n.err" &
    MPI_PID=$!
    track_bg "$MPI_PID"
    if wait_for 60 grep -q '^epoch ' "$T/$_n.out"; then
        kill -USR1 "$(rank_pid "$T/$_n.out" 0)"
    else
        why "$_n: no progress line within 60 s"
    fi
    wait "$MPI_PID"
    rc=$?
    MPI_PID=
}
# total NAME: the stop line's total seconds.
total() { sed -n 's/^stop: signal .* total \([0-9.]*\) s;.*/\1/p' "$T/$1.out"; }

stop_run c --grace 5
is "$rc" 75 "a stop with --grace 5: exit 75" || why "$(tail -n 5 "$T/c.err")"
ok "$(below "$(total c)" 5; echo $?)" "the stop took $(total c) s, within the grace"
ok "$(! grep -q 'more than --grace' "$T/c.err"; echo $?)" "no --grace warning" ||
    why "$(cat "$T/c.err")"

if have_shim stallio; then
    # The fsync of rank 0's shard of the stop's save is held 6 s.
    MPIRUN_OPTS="-x LD_PRELOAD=$SHIM -x STALLIO_RANK=0 -x STALLIO_OP=fsync -x STALLIO_SECONDS=6
        -x STALLIO_MARK=$T/d.mark"
    stop_run d --grace 5
    MPIRUN_OPTS=
    is "$rc" 75 "a stop whose save is held 6 s, --grace 5: exit 75" || why "$(tail -n 5 "$T/d.err")"
    ok "$([ -s "$T/d.mark" ]; echo $?)" "the stop's save was held in its fsync"
    t=$(total d)
    ok "$(below "$t" 6; [ $? -ne 0 ]; echo $?)" "the stop took ${t:-?} s, past the grace"
    like "$(cat "$T/d.err")" \
        "^ftrain: warning: the stop took [0-9]+\\.[0-9] s, more than --grace 5\\.0 s: raise the signal lead time \\(see docs/slurm.md\\)\$" \
        "the --grace warning names the grace and what to do"
    w=$(sed -n 's/^ftrain: warning: the stop took \([0-9.]*\) s, .*/\1/p' "$T/d.err")
    ok "$(awk -v w="${w:-0}" -v t="${t:-99}" 'BEGIN { d = w - t; exit !(d < 0.051 && d > -0.051) }'
        echo $?)" "  and the stop's time: ${w:-?} s, the stop line's ${t:-?} s to a tenth"
else
    for n in 1 2 3 4 5; do
        skip "a stop past --grace, check $n" "$SHIM_WHY"
    done
fi

done_testing

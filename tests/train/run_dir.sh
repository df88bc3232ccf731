#!/bin/sh
# run_dir.sh - a run directory the trainer cannot use is refused at
# start-up, on every rank, before any training, with a message naming the
# path and what is wrong: a checkpoint root that is a file, a checkpoint
# root no one may write to, a metrics file that cannot be opened, a
# --trace-samples file that cannot be opened (on the rank that cannot);
# heartbeats that cannot be written are said to be off, once.  One launch
# at a time per run directory: a second one, while the first trains, waits
# RUN_LOCK_WAIT_S (10 s) and refuses, naming the first, which trains on;
# a holder of the same SLURM job (a lost node's process) is passed with a
# warning, one of another job is not.
#
# The three launches that wait 10 s for a lock wait side by side (each on
# a run directory of its own), and the refusals at start-up run while
# they wait: the file takes about the first launch's 24 s, not 30 s of
# waits on top of the rest.
. "$(dirname "$0")/../lib.sh"
: "${FTRAIN_TIMEOUT:=60}"
need_mpi
TINY="--data line --layers 8"

# ---- the lock waits, started first -------------------------------------------
# A first launch that trains 24 s; a second on its run directory once it
# trains (checked after the refusals below).
d="$T/twice"
mpi_bg 1 $TINY --steps 400 --step-delay-ms 60 --ckpt-every 20 --run-dir "$d" >"$d.1.out" 2>"$d.1.err"
first_pid=$MPI_PID
MPI_PID=
wait_for 30 grep -q '^world: rank 0 .* pid' "$d.1.out"
first=$(rank_pid "$d.1.out" 0)
wait_for 30 test -f "$d/heartbeat/rank-0"
# Whether the first's heartbeat is there is noted as the second ends (the
# first removes it at its own end).
(
    mpi 1 $TINY --steps 400 --ckpt-every 20 --run-dir "$d" >"$d.2.out" 2>"$d.2.err"
    rc=$?
    [ -f "$d/heartbeat/rank-0" ] && echo there >"$d.2.beat"
    exit "$rc"
) &
second_pid=$!
track_bg "$second_pid"
# A lock held by a process of SLURM job 77 (as one on a lost node would
# hold it), on two run directories: a launch of job 78 on one, of job 77
# on the other.
lost="$T/lost"
mkdir -p "$lost.78" "$lost.77"
hold_lock "$lost.78/launch.lock" "pid=4242 host=gone job=77 started=1700000000"
holder78=$HOLDER_PID
hold_lock "$lost.77/launch.lock" "pid=4242 host=gone job=77 started=1700000000"
holder77=$HOLDER_PID
SLURM_JOB_ID=78 mpi 1 $TINY --steps 3 --run-dir "$lost.78" >"$lost.78.out" 2>"$lost.78.err" &
job78_pid=$!
track_bg "$job78_pid"
SLURM_JOB_ID=77 mpi 1 $TINY --steps 3 --run-dir "$lost.77" >"$lost.77.out" 2>"$lost.77.err" &
job77_pid=$!
track_bg "$job77_pid"

# ---- a checkpoint root that is not a directory ---------------------------
# Found at start-up on every rank, not at the first save after the training.
d="$T/rootfile"
mkdir -p "$d"
echo x >"$d/ckpt"
mpi 2 $TINY --steps 3 --log-every 1 --run-dir "$d" >"$d.out" 2>"$d.err"
rc=$?
ok "$([ "$rc" -ne 0 ] && [ "$rc" -ne 75 ] && ! grep -q '^epoch ' "$d.out"; echo $?)" \
    "RUN_DIR/ckpt is a file: refused before training (exit $rc)" ||
    why "$(grep -c '^epoch ' "$d.out") progress lines" "$(cat "$d.err")"
like "$(cat "$d.err")" "rank 0: cannot use the checkpoint directory '$d/ckpt': not a directory" \
    "  rank 0 names the path and what is wrong"
like "$(cat "$d.err")" "rank 1: rank 0 could not set up run directory" "  and rank 1 agrees"

# ---- a checkpoint root no one may write to (immutable: even root cannot) ----
d="$T/rootro"
mkdir -p "$d/ckpt"
if chattr +i "$d/ckpt" 2>/dev/null; then
    mpi 2 $TINY --steps 3 --log-every 1 --run-dir "$d" >"$d.out" 2>"$d.err"
    rc=$?
    chattr -i "$d/ckpt"
    ok "$([ "$rc" -ne 0 ] && [ "$rc" -ne 75 ] && ! grep -q '^epoch ' "$d.out"; echo $?)" \
        "RUN_DIR/ckpt cannot be written: refused before training (exit $rc)" || why "$(cat "$d.err")"
    like "$(cat "$d.err")" "cannot use the checkpoint directory '$d/ckpt': " "  naming it"
else
    skip "an unwritable checkpoint root" "chattr +i is not supported on this file system"
    skip "  naming it" "chattr +i is not supported on this file system"
fi

# ---- a metrics file that cannot be opened ---------------------------------
d="$T/metricsdir"
mkdir -p "$d/metrics.jsonl"
mpi 1 $TINY --steps 2 --run-dir "$d" >"$d.out" 2>"$d.err"
rc=$?
ok "$([ "$rc" -ne 0 ] && ! grep -q '^epoch ' "$d.out"; echo $?)" \
    "metrics.jsonl is a directory: refused before training (exit $rc)"
like "$(cat "$d.err")" "cannot open the metrics file '$d/metrics.jsonl': Is a directory" \
    "  the message names the metrics file, not the run directory" || why "$(cat "$d.err")"

# ---- a --trace-samples file that cannot be opened ---------------------------
# Rank 1's name is taken by a directory: rank 1 says so, every rank stops.
d="$T/trace"
mkdir -p "$d.p.1"
mpi 2 $TINY --steps 3 --trace-samples "$d.p" >"$d.out" 2>"$d.err"
rc=$?
ok "$([ "$rc" -eq 1 ] && ! grep -q '^epoch ' "$d.out"; echo $?)" \
    "--trace-samples that rank 1 cannot open: refused before training (exit $rc)" || why "$(cat "$d.err")"
like "$(cat "$d.err")" "rank 1: cannot open the --trace-samples file '$d.p.1': Is a directory" \
    "  rank 1 names its file" || why "$(cat "$d.err")"

# ---- heartbeats that cannot be written ---------------------------------------
# RUN_DIR/heartbeat is a file: the run trains on and says, once, that a
# relaunch will not be able to name the rank that went silent.
d="$T/beats"
mkdir -p "$d"
echo x >"$d/heartbeat"
mpi 1 $TINY --steps 40 --step-delay-ms 100 --hang-timeout 10 --run-dir "$d" >"$d.out" 2>"$d.err"
rc=$?
ok "$([ "$rc" -eq 0 ] && [ "$(grep -c 'cannot write heartbeats' "$d.err")" -eq 1 ]; echo $?)" \
    "heartbeats that cannot be written: the run ends (exit $rc) and says so once" || why "$(cat "$d.err")"
like "$(cat "$d.err")" "rank 0: cannot write heartbeats in '$d/heartbeat' \\(Not a directory\\)" \
    "  naming the directory and why" || why "$(cat "$d.err")"

# ---- two launches on one run directory ----------------------------------------
d="$T/twice"
wait "$second_pid"
rc=$?
ok "$([ "$rc" -eq 1 ] && ! grep -q '^epoch ' "$d.2.out" &&
    grep -q "run directory '$d' is in use by another launch: pid $first on host [^ ]* (not under SLURM, since [0-9-]* [0-9:]* UTC), which still held '$d/launch.lock' after 10 s" "$d.2.err"; echo $?)" \
    "a second launch while the first trains: exit 1 before training, naming the first (exit $rc)" ||
    why "$(cat "$d.2.err")"
ok "$([ -s "$d.2.beat" ] && ! grep -q 'ended unplanned' "$d.2.out" "$d.2.err"; echo $?)" \
    "  the first launch's heartbeats are left alone" || why "$(ls "$d/heartbeat"; cat "$d.2.out")"
wait "$first_pid"
rc=$?
is "$rc" 0 "  the first launch trains on to its end" || why "$(tail -n 3 "$d.1.err")"

# A lock held by a process of SLURM job 77: a launch of job 78 is refused,
# one of job 77 goes on with a warning.
wait "$job78_pid"
rc=$?
ok "$([ "$rc" -eq 1 ] && grep -q "in use by another launch: pid 4242 on host gone (SLURM job 77, since 2023-11-14 22:13:20 UTC)" "$lost.78.err"; echo $?)" \
    "a lock held by SLURM job 77: a launch of job 78 is refused (exit $rc)" || why "$(cat "$lost.78.err")"
wait "$job77_pid"
rc=$?
ok "$([ "$rc" -eq 0 ] && grep -q "warning: run directory '$lost.77': the launch before in this job (pid 4242 on gone) still holds launch.lock after 10 s" "$lost.77.err"; echo $?)" \
    "  a launch of job 77 itself goes on, with a warning (exit $rc)" || why "$(cat "$lost.77.err")"
kill "$holder78" "$holder77" 2>/dev/null
wait "$holder78" 2>/dev/null
wait "$holder77" 2>/dev/null

done_testing

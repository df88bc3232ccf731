#!/bin/sh
# run_dir.sh - a run directory the trainer cannot use is refused at
# start-up, on every rank, before any training, with a message naming the
# path and what is wrong: a checkpoint root that is a file, a checkpoint
# root no one may write to, a metrics file that cannot be opened, a
# --trace-samples file that cannot be opened (on the rank that cannot);
# heartbeats that cannot be written are said to be off, once.
. "$(dirname "$0")/lib.sh"
: "${FTRAIN_TIMEOUT:=60}"
need_mpi
TINY="--data line --layers 8"

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

done_testing

#!/bin/sh
# hang_phases.sh - a rank stuck inside a file operation of the checkpoint
# path (a hung file system: the process lives and its watchdog thread runs,
# but one call never returns) ends the whole job with exit 76, says where,
# and leaves the checkpoints as a resume needs them.
#
# The stall comes from the stallio LD_PRELOAD shim (tests/preload/stallio.c):
# on one rank, one chosen call sleeps.  It records when and where it stalled
# (STALLIO_MARK), so each check knows that the stall really happened there.
#
# 1. A save: rank 1 of 3 stalls in the fsync of its shard of the second
#    save (step 10).  The job ends with 76 soon after the stall, the report
#    names the checkpoint save of step 10 and rank 1; the checkpoint before
#    (step 5) verifies, nothing of step 10 is committed, and a deterministic
#    resume on 2 ranks ends with the uninterrupted run's param_hash.
# 2. A save, in a write(2): rank 2 of 3 stalls writing its shard of step 10.
# 3. A resume's load: rank 1 of 3 stalls reading its shard (pread) of the
#    checkpoint left by 2.  The job ends with 76 and the report names the
#    checkpoint load and rank 1; the checkpoint is untouched, and a resume
#    without the shim ends with the uninterrupted run's param_hash.
#
# Allowances (watchdog_allowance): an explicit --hang-timeout T limits a
# save only once this rank has measured one (the first save of a run gets
# 300 s, WATCHDOG_FIRST_S), so the stalls are in the second save; it limits
# a resume's load at once.  A rank whose own part of a save or load is done
# marks the commit (or the wait for the others' load) as a phase of its own,
# so the report singles out the rank still in its I/O.
. "$(dirname "$0")/../lib.sh"
: "${FTRAIN_TIMEOUT:=60}"
need_mpi
CKPTCTL="$BUILD/ckptctl"
have_shim stallio || skip_all "$SHIM_WHY"
STALLIO=$SHIM

RUN="--data line --layers 8 --global-batch 32 --micro-batch 8 --lr 0.01 --deterministic --steps 60"
HT=3            # --hang-timeout
BOUND=15        # seconds from the stall to the job's end: HT, the diagnosis' 1.5 s, the abort
LIMIT=18        # seconds a stalled job may run at all before `timeout` ends it
MARK="$T/stall.mark"


# stalled NAME RANKS STALL_RANK OP MATCH AFTER ARGS...: ftrain ARGS on RANKS
# ranks under the shim, rank STALL_RANK stalling in OP on a file whose path
# holds MATCH after AFTER such calls; output in $T/NAME.out and .err.  Sets
# rc, stall_pid and stall_at (the stalled call and its file, "" when there
# was no stall) and took (seconds from the stall to the job's end).
stalled() {
    _name=$1 _ranks=$2 _rank=$3 _op=$4 _match=$5 _after=$6
    shift 6
    rm -f "$MARK"
    timeout -k 5 "$LIMIT" sh "$LAUNCH" mpirun --oversubscribe -n "$_ranks" -x LD_PRELOAD="$STALLIO" \
        -x STALLIO_RANK="$_rank" -x STALLIO_OP="$_op" -x STALLIO_MATCH="$_match" \
        -x STALLIO_AFTER="$_after" -x STALLIO_SECONDS=120 -x STALLIO_MARK="$MARK" \
        "$FTRAIN" --device cpu "$@" >"$T/$_name.out" 2>"$T/$_name.err"
    rc=$?
    _end=$(now)
    stall_pid=$(awk 'NR == 1 { print $1 }' "$MARK" 2>/dev/null)
    stall_at=$(awk 'NR == 1 { print $3, $4 }' "$MARK" 2>/dev/null)
    _t0=$(awk 'NR == 1 { print $2 }' "$MARK" 2>/dev/null)
    took=$([ -n "$_t0" ] && secs "$_t0" "$_end")
}

# committed DIR: the names of the checkpoints `ckptctl list` calls committed
# in DIR, on one line.
committed() {
    "$CKPTCTL" list "$1" --json 2>/dev/null |
        awk -F'"' '$2 == "name" { name = $4 } $2 == "status" && $4 == "committed" { printf "%s%s", sep, name; sep = " " }'
}

# sums DIR: a checksum of every file under DIR, with its relative path.
sums() { (cd "$1" && find . -type f | LC_ALL=C sort | xargs cksum); }

# resumed_hash NAME DIR: resume DIR on 2 ranks without the shim; prints
# "rc:param_hash" (output in $T/NAME.res and .reserr).
resumed_hash() {
    mpi 2 $RUN --run-dir "$2" >"$T/$1.res" 2>"$T/$1.reserr"
    echo "$?:$(hash_of "$T/$1.res")"
}

mpi 2 $RUN >"$T/ref.out" 2>&1
REF=$(hash_of "$T/ref.out")
[ -n "$REF" ] || { echo "Bail out! the uninterrupted run failed: $(tail -n 3 "$T/ref.out")"; exit 1; }

# ---- 1. a stall in a save's fsync ----------------------------------------------
d="$T/save"
stalled save 3 1 fsync shard- 1 $RUN --ckpt-every 5 --hang-timeout "$HT" --run-dir "$d"
like "$stall_at" "^fsync .*/ckpt/\.tmp-step-00000010/shard-1\.ftsh$" \
    "save: rank 1 of 3 stalled in the fsync of its shard of step 10 (the second save)" ||
    why "$(tail -n 5 "$T/save.err")"
ok "$([ "$rc" -eq 76 ] && [ -n "$took" ] && below "$took" "$BOUND"; echo $?)" \
    "  the job ended with exit $rc (76) ${took:-?} s after the stall (< $BOUND s, --hang-timeout $HT)" ||
    why "$(tail -n 8 "$T/save.err")"
like "$(cat "$T/save.err")" "hang: rank [0-2] \(host [^,]+, pid [0-9]+\) made no progress for [0-9.]+ s \(limit $HT\.0 s\) in the checkpoint save of step 10" \
    "  the report names the checkpoint save of step 10"
like "$(cat "$T/save.err")" "hang: rank 1 \(host [^,]+, pid ${stall_pid:-none}\) made no progress .* in the checkpoint save of step 10" \
    "  rank 1 (pid ${stall_pid:-?}) reports itself stuck in it"
ok "$(grep -Eq "hang: rank 1 \(host [^,]+, pid ${stall_pid:-none}\) (stopped making progress|is behind the others)" "$T/save.err" &&
    ! grep -q 'every rank is alive and at the same point' "$T/save.err"; echo $?)" \
    "  the waiting ranks (in the commit) single out rank 1 (still in its shard)" ||
    why "$(grep 'hang:' "$T/save.err")"
"$CKPTCTL" verify "$d/ckpt" >"$T/save.verify" 2>&1
vrc=$?
is "$vrc:$(committed "$d/ckpt"):$(cat "$d/ckpt/LATEST" 2>/dev/null):$([ -e "$d/ckpt/step-00000010" ] && echo step-10)" \
    "0:step-00000005:step-00000005:" \
    "  ckptctl verify accepts the checkpoints; step 5 is the only one committed and LATEST" ||
    why "$(cat "$T/save.verify")"
is "$(resumed_hash save "$d")" "0:$REF" \
    "  a deterministic resume on 2 ranks ends with the uninterrupted run's param_hash" ||
    why "$(tail -n 3 "$T/save.reserr")"

# ---- 2. a stall in a save's write ----------------------------------------------
d="$T/write"
stalled write 3 2 write .tmp-step-00000010/shard- 0 $RUN --ckpt-every 5 --hang-timeout "$HT" --run-dir "$d"
like "$stall_at" "^write .*/ckpt/\.tmp-step-00000010/shard-2\.ftsh$" \
    "save: rank 2 of 3 stalled in a write of its shard of step 10" ||
    why "$(tail -n 5 "$T/write.err")"
ok "$([ "$rc" -eq 76 ] && [ -n "$took" ] && below "$took" "$BOUND" &&
    grep -Eq "hang: rank 2 \(host [^,]+, pid ${stall_pid:-none}\) made no progress for [0-9.]+ s \(limit $HT\.0 s\) in the checkpoint save of step 10" "$T/write.err"
    echo $?)" \
    "  the job ended with exit $rc (76) ${took:-?} s after the stall (< $BOUND s), in the checkpoint save of step 10" ||
    why "$(tail -n 8 "$T/write.err")"

# ---- 3. a stall in a resume's load ---------------------------------------------
# The checkpoint 2 left (step 5, saved by 3 ranks), resumed on 3 ranks.
sums "$d/ckpt" >"$T/load.before"
stalled load 3 1 read step-00000005/shard- 0 $RUN --ckpt-every 5 --hang-timeout "$HT" --run-dir "$d"
like "$stall_at" "^pread .*/ckpt/step-00000005/shard-1\.ftsh$" \
    "load: rank 1 of 3 stalled reading its shard of step 5 in a resume" ||
    why "$(tail -n 5 "$T/load.err")"
ok "$([ "$rc" -eq 76 ] && [ -n "$took" ] && below "$took" "$BOUND"; echo $?)" \
    "  the job ended with exit $rc (76) ${took:-?} s after the stall (< $BOUND s, --hang-timeout $HT holds for the load; 124: ended by timeout after $LIMIT s)" ||
    why "$(tail -n 4 "$T/load.err")"
ok "$(grep -Eq "hang: rank [0-2] \(host [^,]+, pid [0-9]+\) made no progress for [0-9.]+ s \(limit $HT\.0 s\) in the (checkpoint load|wait for the other ranks' checkpoint load)" "$T/load.err"; echo $?)" \
    "  the report names the checkpoint load" || why "$(grep 'hang:' "$T/load.err")"
ok "$(grep -Eq "hang: rank 1 \(host [^,]+, pid ${stall_pid:-none}\) (stopped making progress|is behind the others)" "$T/load.err"; echo $?)" \
    "  the report singles out rank 1 (still reading; the others wait for it)" || why "$(grep 'hang:' "$T/load.err")"
sums "$d/ckpt" >"$T/load.after"
"$CKPTCTL" verify "$d/ckpt" >"$T/load.verify" 2>&1
vrc=$?
ok "$([ "$vrc" -eq 0 ] && cmp -s "$T/load.before" "$T/load.after"; echo $?)" \
    "  the checkpoint is untouched (every file the same) and verifies" ||
    why "$(cat "$T/load.verify")" "$(diff "$T/load.before" "$T/load.after")"
is "$(resumed_hash load "$d")" "0:$REF" \
    "  a resume without the shim, on 2 ranks, ends with the uninterrupted run's param_hash" ||
    why "$(tail -n 3 "$T/load.reserr")"

done_testing

#!/bin/sh
# local_tier_recover.sh - what a node-local tier written by ftrain itself
# gives back after a node is lost, when its newest step is damaged:
#
# 1. A run on fake nodes a and b killed after its local saves: `ckptctl
#    flush` puts one step together from both nodes' directories (their
#    manifests are the same: every node seals with rank 0's record), and
#    the flushed checkpoint verifies.
# 2. Node b lost and node a's copy of the newest step damaged (a shard of
#    the older step in its place): the resume says why that step cannot be
#    used, takes the older complete step instead of the shared tier (which
#    is empty), and ends bit-exactly.
# 3. Every local step damaged (shard 1 of each) and the shared tier empty:
#    the run starts fresh, from its true initial weights (each failed load
#    had written shard 0's part of them), and ends as a fresh run does.
# 4. Two nodes given one directory (no %n on a file system both see):
#    refused before training, naming both nodes and the directory, where
#    every local save used to fail with errors that named none of this.
# 5. A local file system too small (a 64 KiB tmpfs): saves fail, training
#    goes on, and no failed save's temp dir is left holding space.
# 6. A --ckpt-local that is a file: refused, saying so.
# 7. --ckpt-local-remove-at-end: the tier goes at a good end (done, a
#    planned stop), stays after a failure, and keeps a file ftrain did not
#    make.
. "$(dirname "$0")/../lib.sh"
need_mpi
C="$BUILD/ckptctl"
[ -x "$C" ] || skip_all "$C not built"
RUN="--data line --layers 8 --deterministic --threads 1 --steps 24 --ckpt-every 100"
LOCAL="--ckpt-local-every 4 --step-delay-ms 30"

# two ARGS...: one rank on node a and one on node b.
two() {
    timeout -k 5 "$FTRAIN_TIMEOUT" sh "$LAUNCH" mpirun --oversubscribe -n 1 -x SLURMD_NODENAME=a "$FTRAIN" \
        --device cpu "$@" : -n 1 -x SLURMD_NODENAME=b "$FTRAIN" --device cpu "$@"
}

# ona ARGS...: two ranks, both on node a.
ona() {
    timeout -k 5 "$FTRAIN_TIMEOUT" sh "$LAUNCH" mpirun --oversubscribe -n 2 -x SLURMD_NODENAME=a "$FTRAIN" \
        --device cpu "$@"
}

# The uninterrupted run on 1 rank: --deterministic gives the same
# param_hash on any world size (train_det.sh), for less CPU.
mpi 1 $RUN --run-dir "$T/whole" >"$T/whole.out" 2>&1
want=$(hash_of "$T/whole.out")
ok "$([ -n "$want" ]; echo $?)" "the uninterrupted run ends ($want)" || why "$(cat "$T/whole.out")"

# ---- 1. ckptctl flush of ftrain's own node directories ----------------------
L="$T/L"
two $RUN $LOCAL --run-dir "$T/r" --ckpt-local "$L/%n" --fault kill@18:1 >"$T/r1.out" 2>&1
ok "$([ -d "$L/a/step-00000012" ] && [ -d "$L/b/step-00000012" ]; echo $?)" \
    "killed after step 18: step 12 sealed on both nodes" || why "$(ls -R "$L")"
"$C" flush "$L/a" "$L/b" --to "$T/S" --step 12 >"$T/flush.out" 2>"$T/flush.err"
rc=$?
ok "$([ "$rc" -eq 0 ] && "$C" verify "$T/S/step-00000012" >/dev/null 2>&1; echo $?)" \
    "ckptctl flush of both nodes' step 12: committed and it verifies (exit $rc)" ||
    why "$(cat "$T/flush.err")"

# ---- 2. the newest local step damaged: the older one is used ----------------
# Node a keeps two steps (--ckpt-local-keep 2): 8 and 12, or 12 and 16 when
# step 16's save was sealed before the kill after step 18 (that depends on
# the machine's load); the newer one gets the older one's shard 1.
new=$(ls -d "$L"/a/step-* | tail -n 1)
old=$(ls -d "$L"/a/step-* | tail -n 2 | head -n 1)
new_n=$(echo "${new##*step-}" | sed 's/^0*//')
old_n=$(echo "${old##*step-}" | sed 's/^0*//')
cp "$old/shard-1.ftsh" "$new/shard-1.ftsh"
rm -rf "$L/b"
ona $RUN $LOCAL --run-dir "$T/r" --ckpt-local "$L/%n" >"$T/r2.out" 2>"$T/r2.err"
rc=$?
ok "$([ "$old_n" -lt "$new_n" ] && [ "$rc" -eq 0 ] &&
    grep -q "node-local checkpoint of step $new_n cannot be used (.*); trying an older one" "$T/r2.err" &&
    grep -q "^resume: from the node-local tier .* step $old_n " "$T/r2.out"; echo $?)" \
    "step ${new_n:-?} damaged: said, and resumed from the local step ${old_n:-?}, not from scratch (exit $rc)" ||
    why "$(ls "$L/a"; cat "$T/r2.err"; grep '^resume' "$T/r2.out")"
is "$(hash_of "$T/r2.out")" "$want" "  and it ends bit-exactly"

# ---- 3. every local step damaged, no shared checkpoint: a true fresh start ----
L="$T/L3"
two $RUN $LOCAL --run-dir "$T/r3" --ckpt-local "$L/%n" --fault kill@18:1 >"$T/r3a.out" 2>&1
rm -rf "$L/b"
# Only shard 1 of each: shard 0 reads well, so a failed load has written
# its part of the state on the rank that read it.
for f in "$L"/a/step-*/shard-1.ftsh; do
    flip "$f"
done
ona $RUN $LOCAL --run-dir "$T/r3" --ckpt-local "$L/%n" >"$T/r3b.out" 2>"$T/r3b.err"
rc=$?
ok "$([ "$rc" -eq 0 ] && [ "$(grep -c 'cannot be used' "$T/r3b.err")" -eq 2 ] && ! grep -q '^resume: from' "$T/r3b.out"; echo $?)" \
    "every local step damaged, the shared tier empty: both said, a fresh start (exit $rc)" ||
    why "$(cat "$T/r3b.err"; grep '^resume' "$T/r3b.out")"
is "$(hash_of "$T/r3b.out")" "$want" "  from the true initial weights: it ends as a fresh run"

# ---- 4. two nodes, one directory --------------------------------------------
two $RUN $LOCAL --run-dir "$T/r4" --ckpt-local "$T/L4" >"$T/r4.out" 2>"$T/r4.err"
rc=$?
ok "$([ "$rc" -ne 0 ] && ! grep -q '^epoch ' "$T/r4.out" &&
    grep -q "rank 0: --ckpt-local: nodes a and b were given the same directory '$T/L4' .*put %n" "$T/r4.err"; echo $?)" \
    "two nodes given one local directory: refused before training, naming both (exit $rc)" ||
    why "$(cat "$T/r4.err")"

# ---- 5. a full local file system --------------------------------------------
L="$T/L5"
mkdir -p "$L"
if mount -t tmpfs -o size=64k tmpfs "$L" 2>/dev/null; then
    two $RUN $LOCAL --layers 32,32 --run-dir "$T/r5" --ckpt-local "$L/%n" >"$T/r5.out" 2>"$T/r5.err"
    rc=$?
    left=$(find "$L" -name '.tmp-step-*' | wc -l)
    ok "$([ "$rc" -eq 0 ] && grep -q 'No space left on device' "$T/r5.err" && [ "$left" -eq 0 ]; echo $?)" \
        "a full local file system: saves fail, the run ends (exit $rc), no temp dir left ($left)" ||
        why "$(cat "$T/r5.err"; find "$L")"
    umount "$L"
else
    skip "a full local file system" "cannot mount a tmpfs here"
fi

# ---- 6. a --ckpt-local that is a file ----------------------------------------
: >"$T/afile"
mpi 1 $RUN $LOCAL --run-dir "$T/r6" --ckpt-local "$T/afile" >"$T/r6.out" 2>"$T/r6.err"
rc=$?
ok "$([ "$rc" -eq 1 ] && grep -q -- "--ckpt-local: '$T/afile' on [^ ]* is not a directory" "$T/r6.err"; echo $?)" \
    "a --ckpt-local that is a file: exit 1, saying it is not a directory (exit $rc)" || why "$(cat "$T/r6.err")"

# ---- 7. --ckpt-local-remove-at-end ---------------------------------------------
# At an end with the newest state on the shared tier (done, or a planned
# stop), every node removes its directory, and the per-job parent once it is
# empty (the batch script's layout); after a failure the tier stays for the
# relaunch; a file ftrain did not make is kept, with a warning naming it.
J="$T/L7/ftrain-job-7"
two $RUN $LOCAL --run-dir "$T/r7" --ckpt-local "$J/%n" --ckpt-local-remove-at-end >"$T/r7.out" 2>"$T/r7.err"
rc=$?
ok "$([ "$rc" -eq 0 ] && [ ! -e "$J" ] && [ -d "$T/L7" ] &&
      grep -q '^local checkpoints: removed the node-local tier on every node' "$T/r7.out"; echo $?)" \
    "--ckpt-local-remove-at-end, done (exit $rc): both nodes' directories and the per-job one gone" ||
    why "$(cat "$T/r7.err"; find "$T/L7")"
two $RUN $LOCAL --steps 200 --run-dir "$T/r7s" --ckpt-local "$J/%n" --ckpt-local-remove-at-end \
    >"$T/r7s.out" 2>"$T/r7s.err" &
s_pid=$!
track_bg "$s_pid"
# Any sealed step will do: step 8 alone is there for only a few steps
# (two are kept), and a loaded machine's poll could miss it.
sealed_b() { ls -d "$J"/b/step-* >/dev/null 2>&1; }
wait_for 30 sealed_b
kill -USR1 "$(rank_pid "$T/r7s.out" 1)" 2>/dev/null
wait "$s_pid"
rc=$?
ok "$([ "$rc" -eq 75 ] && [ ! -e "$J" ] && "$C" verify "$T/r7s/ckpt" >/dev/null 2>&1; echo $?)" \
    "  a planned stop (exit $rc): the tier is gone, the shared tier has the stop's checkpoint" ||
    why "$(cat "$T/r7s.err"; find "$T/L7")"
two $RUN $LOCAL --run-dir "$T/r7k" --ckpt-local "$J/%n" --ckpt-local-remove-at-end \
    --fault kill@18:1 >"$T/r7k.out" 2>&1
ok "$([ -d "$J/a/step-00000016" ] || [ -d "$J/a/step-00000012" ]; echo $?)" \
    "  a rank killed: the tier stays for the relaunch" || why "$(find "$T/L7")"
echo mine >"$J/b/notes.txt"
two $RUN $LOCAL --run-dir "$T/r7k" --ckpt-local "$J/%n" --ckpt-local-remove-at-end >"$T/r7r.out" 2>"$T/r7r.err"
rc=$?
ok "$([ "$rc" -eq 0 ] && [ ! -e "$J/a" ] && [ -f "$J/b/notes.txt" ] && [ -z "$(ls "$J/b" | grep step-)" ] &&
      grep -q "the node-local tier was not removed at the end: kept '$J/b': it holds 'notes.txt'" "$T/r7r.err"; echo $?)" \
    "  the relaunch resumes and ends (exit $rc); node b keeps the file ftrain did not make, and says so" ||
    why "$(cat "$T/r7r.err"; find "$T/L7")"
mpi 1 $RUN --run-dir "$T/r7u" --ckpt-local-remove-at-end >"$T/r7u.out" 2>"$T/r7u.err"
rc=$?
ok "$([ "$rc" -eq 2 ] && grep -q -- '--ckpt-local-remove-at-end need --ckpt-local' "$T/r7u.err"; echo $?)" \
    "  without --ckpt-local: a usage error (exit $rc)" || why "$(cat "$T/r7u.err")"

done_testing

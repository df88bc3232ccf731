#!/bin/sh
# resume_record.sh - what a resume checks in the checkpoint's trainer
# record besides the architecture and options.  A checkpoint remembers the training data it was trained
# on (sample count and an XXH64 fingerprint in its record), and a resume on
# other data is refused with a message naming both, leaving the run
# directory untouched: the same Fashion-MNIST files with one pixel changed,
# and a set with fewer samples (whose cursor and permutation would index
# other samples).  The same files in another directory resume; a record of
# a writer from before the fingerprint (no "data" object) still resumes.
# A record of a newer version, or of another format, is refused by name.
# The record's run_seconds adds up the training time across resumes.
. "$(dirname "$0")/../lib.sh"
: "${FTRAIN_TIMEOUT:=120}"
need_mpi
CKPTCTL="$BUILD/ckptctl"
EDIT="$BUILD/tests/tools/manifest_edit"
SRC=/usr/share/datasets/fashion-mnist
[ -r "$SRC/train-images-idx3-ubyte.gz" ] || skip_all "Fashion-MNIST is not installed in $SRC"
command -v python3 >/dev/null 2>&1 || skip_all "python3 is needed to write altered IDX files"
ARGS="--layers 16 --global-batch 64 --micro-batch 32 --ckpt-every 2"

# The runs of the last three parts (a record without "data", run_seconds,
# the record's version and format) share nothing with the first part's
# run directory: they go on in the background beside it, each part in
# order in its own directory, their outcomes (exit statuses) in files;
# the checks come in their place below.
d2="$T/old"
part_old() {
    mpi 1 $ARGS --steps 2 --run-dir "$d2" >"$T/e.out" 2>"$T/e.err"
    echo "$?" >"$T/e.rc"
    "$EDIT" "$d2/ckpt/step-00000002/manifest.json" record.data 2>"$T/del.err"
    echo "$?" >"$T/del.rc"
    "$CKPTCTL" verify "$d2/ckpt/step-00000002" >/dev/null 2>&1
    echo "$?" >"$T/verify.rc"
    mpi 2 $ARGS --data-dir "$T/pixel" --steps 4 --run-dir "$d2" >"$T/f.out" 2>"$T/f.err"
    echo "$?" >"$T/f.rc"
}
d4="$T/secs"
rsec() { "$CKPTCTL" inspect --json "$d4/ckpt" 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["record"]["run_seconds"])'; }
part_secs() {
    mpi 1 --data line --steps 4 --step-delay-ms 100 --run-dir "$d4" >"$T/s1.out" 2>&1
    echo "exit $?" >>"$T/s1.out"
    rsec >"$T/s1" 2>>"$T/s1.out"
    mpi 2 --data line --steps 7 --step-delay-ms 100 --run-dir "$d4" >"$T/s2.out" 2>&1
    echo "exit $?" >>"$T/s2.out"
    rsec >"$T/s2" 2>>"$T/s2.out"
}
d3="$T/ver"
m="$d3/ckpt/step-00000002/manifest.json"
part_ver() {
    mpi 1 --data line --steps 2 --run-dir "$d3" >"$T/g.out" 2>"$T/g.err"
    "$EDIT" "$m" record.version 2
    mpi 1 --data line --steps 4 --run-dir "$d3" >"$T/h.out" 2>"$T/h.err"
    echo "$?" >"$T/h.rc"
    "$EDIT" "$m" record.format '"other-trainer"'
    mpi 1 --data line --steps 4 --run-dir "$d3" >"$T/i.out" 2>"$T/i.err"
    echo "$?" >"$T/i.rc"
    "$EDIT" "$m" record.format '"x\u001b[31my"'
    mpi 1 --data line --steps 4 --run-dir "$d3" >"$T/j.out" 2>"$T/j.err"
}
part_secs &
pid_secs=$!
track_bg "$pid_secs"
part_ver &
pid_ver=$!
track_bg "$pid_ver"

# Three copies of the data: as shipped, one pixel changed, 512 fewer samples.
mkdir "$T/same" "$T/pixel" "$T/fewer"
cp "$SRC"/*.gz "$T/same/"
cp "$SRC"/*.gz "$T/pixel/"
cp "$SRC"/*.gz "$T/fewer/"
python3 - "$T" <<'EOF'
import gzip, struct, sys
t = sys.argv[1]
def rd(p):
    with gzip.open(p) as f:
        return bytearray(f.read())
def wr(p, b):
    # Level 1: the reader does not care, and level 9 (gzip's default) took
    # most of this file's time.
    with gzip.open(p, "wb", compresslevel=1) as f:
        f.write(b)
img = rd(t + "/same/train-images-idx3-ubyte.gz")
lab = rd(t + "/same/train-labels-idx1-ubyte.gz")
px = bytearray(img)
px[16 + 784 * 30000 + 400] ^= 0x01
wr(t + "/pixel/train-images-idx3-ubyte.gz", px)
n = struct.unpack(">I", img[4:8])[0] - 512
wr(t + "/fewer/train-images-idx3-ubyte.gz", img[:4] + struct.pack(">I", n) + img[8:16 + 784 * n])
wr(t + "/fewer/train-labels-idx1-ubyte.gz", lab[:4] + struct.pack(">I", n) + lab[8:8 + n])
EOF
is "$?" 0 "wrote the altered data sets"
part_old &
pid_old=$!
track_bg "$pid_old"

d="$T/run"
mpi 2 $ARGS --data-dir "$T/same" --steps 4 --run-dir "$d" >"$T/a.out" 2>"$T/a.err"
is "$?" 0 "trained 4 steps on 2 ranks with a copy of the data" || why "$(tail -n 3 "$T/a.err")"
"$CKPTCTL" inspect --json "$d/ckpt" >"$T/a.json" 2>/dev/null
rec=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["record"]["data"]; print(d["name"], d["train_samples"], len(d["fingerprint"]))' "$T/a.json" 2>&1)
is "$rec" "fashion-mnist 60000 16" "the record names the data set, its 60000 samples and a 16-digit fingerprint"
fp=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["record"]["data"]["fingerprint"])' "$T/a.json" 2>/dev/null)
"$CKPTCTL" inspect "$d/ckpt" >"$T/a.txt" 2>&1
like "$(cat "$T/a.txt")" "data\.fingerprint +$fp" "ckptctl inspect shows it"

snap() { (cd "$d/ckpt" && find . -type f -exec cksum {} + | sort); }
before=$(snap)

# One pixel changed: same count, other bytes.
mpi 2 $ARGS --data-dir "$T/pixel" --steps 6 --run-dir "$d" >"$T/b.out" 2>"$T/b.err"
rc=$?
ok "$([ "$rc" -ne 0 ] && grep -q "training data differs: the checkpoint was trained on 60000 samples (fingerprint $fp), this run loaded 60000 (fingerprint [0-9a-f]\{16\})" "$T/b.err"; echo $?)" \
    "resume on data with one pixel changed: refused, naming both fingerprints (exit $rc)" || why "$(tail -n 3 "$T/b.err")"
ok "$(! grep -q '^step\|^epoch ' "$T/b.out"; echo $?)" "  no step was trained"
is "$(snap)" "$before" "  the checkpoints are untouched"

# Fewer samples.
mpi 2 $ARGS --data-dir "$T/fewer" --steps 6 --run-dir "$d" >"$T/c.out" 2>"$T/c.err"
rc=$?
ok "$([ "$rc" -ne 0 ] && grep -q 'training data differs: the checkpoint was trained on 60000 samples .*, this run loaded 59488 ' "$T/c.err"; echo $?)" \
    "resume on 512 fewer samples: refused, naming both counts (exit $rc)" || why "$(tail -n 3 "$T/c.err")"
is "$(snap)" "$before" "  the checkpoints are untouched"

# The same data from the default directory: resumes, on another world size.
mpi 3 $ARGS --steps 6 --run-dir "$d" >"$T/d.out" 2>"$T/d.err"
rc=$?
ok "$([ "$rc" -eq 0 ] && grep -q '^resume: ' "$T/d.out"; echo $?)" \
    "the same data in another directory: resumes on 3 ranks (exit $rc)" || why "$(tail -n 3 "$T/d.err")"

# A record without "data" (a writer from before the fingerprint) resumes.
wait "$pid_old"
is "$(cat "$T/e.rc")" 0 "a 2-step run on 1 rank saved step 2" || why "$(tail -n 3 "$T/e.err")"
is "$(cat "$T/del.rc")" 0 "removed the data object from a record and re-sealed the manifest" || why "$(cat "$T/del.err")"
is "$(cat "$T/verify.rc")" 0 "  the edited checkpoint verifies"
rc=$(cat "$T/f.rc")
ok "$([ "$rc" -eq 0 ] && grep -q '^resume: ' "$T/f.out"; echo $?)" \
    "  and resumes (nothing to compare the data with; exit $rc)" || why "$(tail -n 3 "$T/f.err")"
"$CKPTCTL" inspect --json "$d2/ckpt" >"$T/f.json" 2>/dev/null
is "$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["record"]["data"]["fingerprint"]))' "$T/f.json" 2>&1)" 16 \
    "  and its next checkpoint records the data again"
is "$(ls "$d2/ckpt" | grep -c '^step-')" 2 "  (steps 2 and 4 are there)"

# run_seconds: the run's training time, carried across a resume.
wait "$pid_secs"
s1=$(cat "$T/s1") s2=$(cat "$T/s2")
ok "$(awk -v a="$s1" -v b="$s2" 'BEGIN { exit !(a >= 0.35 && b >= a + 0.25) }'; echo $?)" \
    "run_seconds counts the training time of both processes: $s1 s after 4 steps of 0.1 s, $s2 s after 3 more" ||
    why "$(tail -n 6 "$T/s1.out")" "$(tail -n 6 "$T/s2.out")"

# A newer record version, or a record that is not ftrain's.
wait "$pid_ver"
rc=$(cat "$T/h.rc")
ok "$([ "$rc" -ne 0 ] && grep -q 'record version 2: this ftrain reads version 1 (the checkpoint was written by a newer ftrain)' "$T/h.err"; echo $?)" \
    "a record of version 2: refused, naming the versions (exit $rc)" || why "$(tail -n 3 "$T/h.err")"
rc=$(cat "$T/i.rc")
ok "$([ "$rc" -ne 0 ] && grep -q 'not an ftrain training checkpoint: its record.s format is "other-trainer"' "$T/i.err"; echo $?)" \
    "a record of another format: refused, naming it (exit $rc)" || why "$(tail -n 3 "$T/i.err")"
ok "$(grep -q 'format is "x?\[31my"' "$T/j.err" && ! grep -q "$(printf '\033')" "$T/j.err"; echo $?)" \
    "  a control character from the record is shown as '?', never printed" || why "$(cat "$T/j.err")"
is "$(ls "$d3/ckpt" | grep -c '^step-')" 1 "  nothing was written"

done_testing

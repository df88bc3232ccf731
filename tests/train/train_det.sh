#!/bin/sh
# train_det.sh - --deterministic gives the same parameters (param_hash) for
# any world size; a fast (non-deterministic) run ends near the deterministic
# one; a run with no launcher equals mpirun -n 1; metrics.jsonl has its
# required fields; a diverging deterministic run stops with an error instead
# of printing a wrapped-around (fixed-point overflow) negative loss.
#
# The line set has 1000 samples and B=32, so every epoch ends with a short
# step of 8 samples (one micro-batch: on 2..5 ranks some ranks are idle).
. "$(dirname "$0")/../lib.sh"
need_mpi
command -v python3 >/dev/null 2>&1 || skip_all "python3 not installed"
plan 15

LINE="--data line --layers 16 --global-batch 32 --micro-batch 8 --lr 0.01"

# Line data, 2 epochs, 1..5 ranks (5 > the 4 micro-batches a step: one idle).
ref=""
for n in 1 2 3 4 5; do
    mpi "$n" $LINE --epochs 2 --deterministic --quiet >"$T/line.$n" 2>"$T/err.$n"
    rc=$?
    h=$(hash_of "$T/line.$n")
    if [ "$n" -eq 1 ]; then
        ref=$h
        ok "$([ "$rc" -eq 0 ] && [ -n "$h" ]; echo $?)" "line, 1 rank: finishes with a param_hash ($h)" ||
            why "exit $rc: $(cat "$T/err.$n")"
    else
        is "$h" "$ref" "line, $n ranks: same param_hash as 1 rank" ||
            why "exit $rc: $(cat "$T/err.$n")"
    fi
done

# The same without a launcher: a singleton MPI process.
timeout -k 5 "$FTRAIN_TIMEOUT" "$FTRAIN" $LINE --epochs 2 --deterministic --quiet >"$T/plain" 2>"$T/err"
is "$(hash_of "$T/plain")" "$ref" "line, plain ftrain (no mpirun): same param_hash as mpirun -n 1"

# Another seed must change the hash, or the checks above prove nothing.
mpi 2 $LINE --epochs 2 --deterministic --quiet --seed 7 >"$T/seed" 2>&1
h=$(hash_of "$T/seed")
ok "$([ -n "$h" ] && [ "$h" != "$ref" ]; echo $?)" "line, --seed 7: another param_hash ($h)"

# Fashion-MNIST, 30 steps, with metrics in a run directory.
FM="--data fashion-mnist --layers 64 --steps 30"
if [ -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
    for n in 1 2 3 4; do
        mpi "$n" $FM --deterministic --quiet >"$T/fm.$n.out" 2>"$T/fm.$n.err"
        rc=$?
        h=$(hash_of "$T/fm.$n.out")
        if [ "$n" -eq 1 ]; then
            fref=$h
            ok "$([ "$rc" -eq 0 ] && [ -n "$h" ]; echo $?)" "fashion-mnist, 1 rank: finishes ($h)" ||
                why "exit $rc: $(cat "$T/fm.$n.err")"
        else
            is "$h" "$fref" "fashion-mnist, $n ranks: same param_hash as 1 rank" ||
                why "exit $rc: $(cat "$T/fm.$n.err")"
        fi
    done
    # A fast-reduction run follows nearly the same trajectory.
    mpi 2 $FM --quiet >"$T/fast" 2>"$T/fast.err"
    python3 - "$T/fm.1.out" "$T/fast" >"$T/fastpy" 2>&1 <<'EOF'
import re, sys
def last(path):
    m = None
    for line in open(path):
        m = re.match(r"done: step=(\d+) epoch=\d+ loss=([0-9.eE+-]+) test_acc=([0-9.]+)", line) or m
    return m
d, f = last(sys.argv[1]), last(sys.argv[2])
if not d or not f:
    print("bad\n# no done line"); sys.exit()
ld, lf = float(d.group(2)), float(f.group(2))
ad, af = float(d.group(3)), float(f.group(3))
good = d.group(1) == f.group(1) and abs(ld - lf) <= 0.02 * ld + 1e-6 and abs(ad - af) <= 0.02
print("good" if good else "bad")
print("# loss %g (fast) vs %g (deterministic), test_acc %g vs %g" % (lf, ld, af, ad))
EOF
    is "$(head -n 1 "$T/fastpy")" good "fashion-mnist: a fast run (2 ranks) ends within 2% of the deterministic loss" ||
        why "$(tail -n +2 "$T/fastpy")" "$(cat "$T/fast.err")"
else
    for i in 1 2 3 4 5; do
        skip "fashion-mnist determinism" "the data set is not installed"
    done
fi

# metrics.jsonl: every progress row has step, epoch, loss, lr, samples_per_s
# and world_size of the right types, steps increase, world_size is the
# launcher's; and there are start, eval and done events.  The line set is a
# regression: its eval events give R^2 (test_r2), no row or event an
# accuracy.
mpi 3 $LINE --epochs 1 --deterministic --quiet --log-every 4 --run-dir "$T/m" >"$T/m.out" 2>&1
python3 - "$T/m/metrics.jsonl" 3 32 >"$T/py" 2>&1 <<'EOF'
import json, sys
path, world, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows, events, errs = [], [], []
for i, line in enumerate(open(path), 1):
    try:
        o = json.loads(line)
    except ValueError as e:
        errs.append("line %d is not JSON: %s" % (i, e)); continue
    (events if "event" in o else rows).append(o)
need = {"step": int, "epoch": int, "loss": (int, float), "lr": (int, float),
        "samples_per_s": (int, float), "world_size": int}
for o in rows:
    for k, t in need.items():
        if k not in o or not isinstance(o[k], t) or isinstance(o[k], bool):
            errs.append("row %r: field %s missing or of the wrong type" % (o, k))
    if o.get("world_size") != world:
        errs.append("row at step %s: world_size %s, expected %d" % (o.get("step"), o.get("world_size"), world))
    if not (o.get("loss", -1) >= 0 and o.get("lr", 0) > 0 and o.get("samples_per_s", -1) >= 0):
        errs.append("row at step %s: implausible loss/lr/samples_per_s" % o.get("step"))
st = [o.get("step") for o in rows]
if not rows: errs.append("no progress rows")
elif st != sorted(set(st)) or st[-1] != steps:
    errs.append("steps not increasing or not ending at %d: %s" % (steps, st))
kinds = [e.get("event") for e in events]
for k in ("start", "done", "eval"):
    if k not in kinds: errs.append("no %r event (events: %s)" % (k, kinds))
# A regression reports R^2 (a number <= 1), never an accuracy.
for o in rows:
    if "acc" in o: errs.append("row at step %s has an acc" % o.get("step"))
for e in events:
    if e.get("event") != "eval": continue
    r2 = e.get("test_r2")
    if "test_acc" in e or not isinstance(r2, (int, float)) or isinstance(r2, bool) or r2 > 1:
        errs.append("eval event without a test_r2 <= 1, or with a test_acc: %r" % e)
print("ok" if not errs else "not ok")
for e in errs[:10]: print("# " + e)
EOF
is "$(head -n 1 "$T/py")" ok "metrics.jsonl: rows have step, epoch, loss, lr, samples_per_s, world_size; start, eval and done events; a regression's eval has test_r2, nothing has an accuracy" ||
    why "$(tail -n +2 "$T/py")"

# A diverging deterministic run: its losses are summed in 2^24 fixed point,
# which a runaway loss would overflow; the run must stop with an error, not
# print a wrapped-around negative loss.
mpi 2 --data sine --global-batch 100 --micro-batch 20 --deterministic --optimizer sgd --lr 3 --steps 60 --layers 16 >"$T/div.out" 2>"$T/div.err"
rc=$?
ok "$([ "$rc" -eq 1 ] && grep -q 'runaway loss at step [0-9]*: training diverged' "$T/div.err"; echo $?)" \
    "diverging deterministic run: exit 1, 'training diverged' (exit $rc)" || why "$(tail -n 2 "$T/div.err")"
ok "$(! grep -Eq '(loss|test_loss) -[0-9]' "$T/div.out"; echo $?)" \
    "  no negative (wrapped-around) loss was printed" || why "$(grep -E 'loss -' "$T/div.out" | head -n 2)"

done_testing

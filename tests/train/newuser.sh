#!/bin/sh
# newuser.sh - what a new user tripped over, each fixed and kept fixed:
# one version everywhere (ftrain --version, ckptctl --version, the loaded
# library's ckpt_version()), ckptctl's --json=1 told that --json takes no
# value, counts that agree with their nouns ("1 shard"), a checkpoint root
# given as the run directory is refused, --resume takes ckptctl's forms
# (RUN, RUN/ckpt, RUN/N, RUN/ckpt/step-N), and a launch that waits for a run
# directory's lock says so at once, not after 10 s; progress comes by time
# (and at the last step) with rates measured over a second or more, and the
# --log-every N lines still come every N steps.
. "$(dirname "$0")/../lib.sh"
need_mpi
SRC=$(cd "$(dirname "$0")/../.." && pwd)
CTL="$BUILD/ckptctl"
plan 31

want=$(sed -n 's/^#define FTRAIN_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' \
    "$SRC/include/ftrain/version.h" | paste -sd. -)
like "$want" '^[0-9]+\.[0-9]+\.[0-9]+$' "include/ftrain/version.h gives a version ($want)"
run "$FTRAIN" --version
like "$(cat "$T/out")" "^ftrain $want( |\$)" "ftrain --version says $want" || why "$(cat "$T/out" "$T/err")"
run "$CTL" --version
is "$rc $(cat "$T/out")" "0 ckptctl $want" "ckptctl --version says $want, exit 0" || why "$(cat "$T/err")"

num=$(echo "$want" | awk -F. '{ print $1 * 10000 + $2 * 100 + $3 }')
got=$(python3 -c 'import ctypes, sys; print(ctypes.CDLL(sys.argv[1]).ckpt_version())' \
    "$BUILD/libftrain-ckpt.so.2" 2>"$T/err")
is "$got" "$num" "the loaded library's ckpt_version() is $num" || why "$(cat "$T/err")"

run "$CTL" list --json=1 "$T"
is "$rc $(cat "$T/err" | head -n 1)" "2 ckptctl: list: option '--json' takes no value" \
    "list --json=1: exit 2, --json takes no value (not 'unknown option')"
run "$CTL" list --jsn "$T"
is "$rc $(head -n 1 "$T/err")" "2 ckptctl: list: unknown option '--jsn'" "  an unknown option is still named as such"

mpi 1 --data line --layers 4 --steps 2 --ckpt-every 2 --run-dir "$T/run" >"$T/train.out" 2>&1 ||
    why "$(tail -n 5 "$T/train.out")"
run "$CTL" verify "$T/run"
like "$(cat "$T/out")" '^step-00000002: ok \(1 shard, ' "verify of a world of one: '1 shard', not '1 shards'" ||
    why "$(cat "$T/out" "$T/err")"
run "$CTL" inspect "$T/run/ckpt/step-00000002"
like "$(grep '^world size' "$T/out")" '^world size +1$' "inspect: 'world size   1', not 'world size 1 shards'" ||
    why "$(head -n 12 "$T/out")"

# --resume takes the forms ckptctl takes: a run directory or a checkpoint
# root (the newest checkpoint there that verifies), ROOT/N and ROOT/step-N
# (ROOT a root or a run directory), and the step directory itself.
for form in "$T/run" "$T/run/ckpt" "$T/run/ckpt/2" "$T/run/2" "$T/run/step-2" \
    "$T/run/ckpt/step-00000002"; do
    run "$FTRAIN" --device cpu --data line --layers 4 --steps 3 --resume "$form"
    is "$rc $(grep -c "^resume: from $T/run/ckpt/step-00000002 step 2 " "$T/out")" "0 1" \
        "--resume ${form#"$T"/}: resumes from run/ckpt/step-00000002" || why "$(cat "$T/out" "$T/err")"
done
run "$FTRAIN" --device cpu --data line --layers 4 --steps 3 --resume "$T/run/7"
is "$rc $(grep -c "^ftrain: rank 0: --resume '$T/run/7': '$T/run/ckpt' holds no step 7 (ckptctl list '$T/run/ckpt' shows what it holds)$" "$T/err")" "1 1" \
    "--resume RUN/7 (no such step): exit 1, naming the root and the step" || why "$(cat "$T/err")"
mkdir "$T/nockpt"
run "$FTRAIN" --device cpu --data line --layers 4 --steps 3 --resume "$T/nockpt"
is "$rc $(grep -c "no checkpoint in '$T/nockpt' (give a step directory, a checkpoint root, a run directory or ROOT/STEP)" "$T/err")" "1 1" \
    "--resume of a directory without checkpoints: exit 1, saying which forms it takes" || why "$(cat "$T/err")"

# The defaults work for every built-in data set: sine has 100 training
# samples, fewer than the default global batch of 128, which is lowered to
# 96 (a multiple of the micro-batch) and said so.  A given --global-batch
# that is too large is refused with advice that is itself accepted.
run "$FTRAIN" --device cpu --data sine --steps 4
ok "$([ "$rc" -eq 0 ] && grep -q '^train: --global-batch 96: the default 128 is more than the 100 training samples; the largest multiple of --micro-batch 16 that fits$' "$T/out" &&
    grep -q 'global batch 96 (6 x 16)' "$T/out"; echo $?)" \
    "ftrain --data sine with the defaults: trains (exit $rc), with global batch 96, saying why" ||
    why "$(cat "$T/out" "$T/err")"
run "$FTRAIN" --device cpu --data sine --steps 4 --global-batch 128
advice=$(sed -n 's/.*give --global-batch \([0-9]*\) or less, a multiple of --micro-batch 16$/\1/p' "$T/err")
is "$rc $advice" "1 96" "--data sine --global-batch 128: refused (exit 1), advising 96" || why "$(cat "$T/err")"
run "$FTRAIN" --device cpu --data sine --steps 4 --global-batch "${advice:-0}"
is "$rc" 0 "  and the advice is accepted (--global-batch ${advice:-none}: exit $rc)" || why "$(cat "$T/err")"

# One epoch convention, epochs done: after 100 steps of 8 per epoch the
# progress line, the done line, the metrics, the record (ckptctl list) and
# the last eval all say 12 (12.5 where tenths are shown).
run "$FTRAIN" --device cpu --data line --layers 4 --global-batch 125 --micro-batch 25 --steps 100 \
    --ckpt-every 100 --log-every 1 --run-dir "$T/ep"
ok "$([ "$rc" -eq 0 ] && grep -q '^epoch 12\.5/12\.5 step 100/100 ' "$T/out" &&
    grep -q '^epoch 1/12\.5 step 8/100 ' "$T/out" && grep -q '^epoch 1\.1/12\.5 step 9/100 ' "$T/out" &&
    grep -q '^done: step=100 epoch=12 ' "$T/out" && grep -q '^eval: epoch 12 ' "$T/out" &&
    ! grep -q '^eval: epoch 13' "$T/out"; echo $?)" \
    "epochs done: the progress lines (1 at step 8, 12.5 at 100), done: epoch=12, the last eval epoch 12" ||
    why "$(grep -E '^(epoch|eval|done)' "$T/out" | sed -n '1p;8p;9p;$p')"
ok "$(grep '"step":100,' "$T/ep/metrics.jsonl" | grep -q '"epoch":12,' &&
    "$CTL" list "$T/ep" 2>/dev/null | grep -q '^step-00000100  *100  *12 '; echo $?)" \
    "  the metrics row of step 100 and ckptctl list say epoch 12 too" ||
    why "$(grep '"step":100,' "$T/ep/metrics.jsonl")" "$("$CTL" list "$T/ep" 2>&1)"

# A resume refusal names every option that differs (not the first one
# only), and the architecture's says how to go on.
run "$FTRAIN" --device cpu --data line --layers 4 --steps 4 --run-dir "$T/run" --lr 0.01 --optimizer sgd
is "$rc $(grep -c "2 options differ from the checkpoint's: --lr (the checkpoint has 0.001, this run 0.01); --optimizer (the checkpoint has \"adam\", this run \"sgd\"); resume with the checkpoint's options" "$T/err")" "1 1" \
    "a resume with another --lr and --optimizer: exit 1, naming both" || why "$(cat "$T/err")"
run "$FTRAIN" --device cpu --data line --layers 5 --steps 4 --run-dir "$T/run"
is "$rc $(grep -c "architecture differs: the checkpoint has 1-4-1 relu mse, this run asks for 1-5-1 relu mse (resume with the checkpoint's --layers and --activation, or use a new --run-dir" "$T/err")" "1 1" \
    "a resume with other --layers: exit 1, naming both and what to do" || why "$(cat "$T/err")"

# Output to one file (> log 2>&1) keeps the terminal's order: the device
# line before the error that followed it.
"$FTRAIN" --device cpu --data fashion-mnist --data-dir "$T/nodata" --steps 2 >"$T/both.log" 2>&1
dev=$(grep -n '^device: ' "$T/both.log" | head -n 1 | cut -d: -f1)
bad=$(grep -n "nodata/train-images-idx3-ubyte.gz: cannot open" "$T/both.log" | head -n 1 | cut -d: -f1)
ok "$([ -n "$dev" ] && [ -n "$bad" ] && [ "$dev" -lt "$bad" ]; echo $?)" \
    "> log 2>&1: the device line (line ${dev:-none}) comes before the error (line ${bad:-none})" ||
    why "$(cat "$T/both.log")"

# A checkpoint root given as the run directory (RUN/ckpt for RUN): refused,
# pointing at RUN, and nothing written into the root.
ls -A "$T/run/ckpt" >"$T/root.before"
run "$FTRAIN" --device cpu --data line --layers 4 --steps 4 --run-dir "$T/run/ckpt/"
is "$rc $(grep -c "is a checkpoint root (it holds LATEST or step-N), not a run directory; give the directory that holds it (--run-dir '$T/run')" "$T/err")" "1 1" \
    "--run-dir RUN/ckpt/: exit 1, naming RUN as the run directory" || why "$(cat "$T/err")"
ls -A "$T/run/ckpt" >"$T/root.after"
is "$(cat "$T/root.after")" "$(cat "$T/root.before")" "  and nothing is written into the checkpoint root" || why "$(diff "$T/root.before" "$T/root.after")"

# Progress by time, not a wall of text: the README's small run (well under
# the 5 s --log-interval) prints one progress line, its last step's.
run "$FTRAIN" --device cpu --data line --layers 16 --steps 200
ok "$([ "$rc" -eq 0 ] && [ "$(grep -c '^epoch ' "$T/out")" -eq 1 ] &&
    grep -q '^epoch 25/25 step 200/200 ' "$T/out" && [ "$(wc -l <"$T/out")" -lt 40 ]; echo $?)" \
    "ftrain --data line --layers 16 --steps 200: one progress line (the last step), $(wc -l <"$T/out") lines in all" ||
    why "$(grep -c '^epoch ' "$T/out") progress lines" "$(head -n 8 "$T/out")"
# --log-interval 1 on a run of 30 steps of 100 ms: a line about every 10
# steps (never two within 8 steps: the clock, not the step count, decides)
# and the last step's.
run "$FTRAIN" --device cpu --data line --layers 4 --steps 30 --step-delay-ms 100 --log-interval 1
steps=$(sed -n 's/^epoch [0-9.]*\/[0-9.]* step \([0-9]*\)\/30 .*/\1/p' "$T/out" | tr '\n' ' ')
ok "$([ "$rc" -eq 0 ] && echo "$steps" | awk '{ if (NF < 2 || NF > 4 || $NF != 30) exit 1
        for (i = 2; i < NF; i++) if ($i - $(i - 1) < 8) exit 1 }'; echo $?)" \
    "--log-interval 1, 30 steps of 100 ms: lines at steps ${steps:-none}(a second apart, and the last)" ||
    why "$(grep '^epoch ' "$T/out")"
# --log-every 1 prints every step; steps of about 1 ms for 3 s: the rate of
# a line is that of the last full second, so the last 1000 lines (about one
# second, a few on a loaded machine) show a figure a second at most (a rate
# per step would give hundreds), each within 3x of the timing line's.
run "$FTRAIN" --device cpu --data line --layers 4 --steps 3000 --step-delay-ms 1 --log-every 1
rates=$(grep '^epoch ' "$T/out" | tail -n 1000 | sed -n 's/.* \([0-9]*\) samples\/s .*/\1/p' | sort -u | wc -l)
is "$rc $(grep -c '^epoch ' "$T/out")" "0 3000" "--log-every 1: a progress line for each of 3000 steps" ||
    why "$(tail -n 3 "$T/out")"
last=$(grep '^epoch ' "$T/out" | tail -n 1 | sed -n 's/.* \([0-9]*\) samples\/s .*/\1/p')
mean=$(sed -n 's/^timing: \([0-9]*\) samples\/s.*/\1/p' "$T/out")
ok "$([ "$rates" -ge 1 ] && [ "$rates" -le 8 ] &&
    awk -v a="${last:-0}" -v m="${mean:-0}" 'BEGIN { exit !(m > 0 && a > m / 3 && a < m * 3) }'; echo $?)" \
    "  the last 1000 lines show $rates rate figure(s) (over a second each), the last ${last:-none} samples/s near the run's ${mean:-none}" ||
    why "$(grep '^epoch ' "$T/out" | tail -n 1000 | sed -n 's/.* \([0-9]*\) samples\/s .*/\1/p' | sort -u | head -n 5)"

# A lock held by another launch: the wait is announced at once, naming it.
d="$T/locked"
mkdir -p "$d"
hold_lock "$d/launch.lock" "pid=4242 host=elsewhere job=77 started=1700000000"
SLURM_JOB_ID=78 "$FTRAIN" --device cpu --data line --layers 4 --steps 2 --run-dir "$d" \
    >"$T/lock.out" 2>"$T/lock.err" &
waiter=$!
track_bg "$waiter"
said() { grep -q "run directory '$d' is in use by another launch (pid 4242 on host elsewhere, SLURM job 77); waiting up to 10 s" "$T/lock.err"; }
t0=$(now)
wait_for 5 said
ok "$?" "a locked run directory: the wait is announced within $(secs "$t0" "$(now)") s, naming the holder" ||
    why "$(cat "$T/lock.err")"
kill -9 "$waiter" 2>/dev/null # it blocks TERM while it starts
done_testing

#!/bin/sh
# cli_edges.sh - runs whose options are fine one by one but not for this
# run, and the messages they get: a node-local tier that resolves to the
# shared checkpoint root (a link, a ".."), a global batch larger than the
# data set, a resume at or past the run's last step, a warm-up as long as
# the run, a stop whose own checkpoint fails, the done line of a stop after
# an evaluation, --ckpt-keep after a resume, and the final evaluation of a
# run that ends mid-epoch.  tests/train/cli.sh has the refusals the option text alone shows.
#
# A world of one, started without a launcher.
. "$(dirname "$0")/../lib.sh"
[ -x "$FTRAIN" ] || skip_all "$FTRAIN not built (make $FTRAIN)"
L="--device cpu --data line --layers 4"
LIMIT=60

# ftrain_run NAME ARGS...: ftrain ARGS, bounded by $LIMIT seconds, stdout to
# $T/NAME.out, stderr to $T/NAME.err; sets rc.  (Not lib.sh's run: each run
# keeps its own files.)
ftrain_run() {
    _name=$1
    shift
    timeout -k 5 "$LIMIT" "$FTRAIN" "$@" >"$T/$_name.out" 2>"$T/$_name.err"
    rc=$?
}

# steps_in ROOT: the committed step directories under ROOT, oldest first.
steps_in() {
    ls "$1" 2>/dev/null | grep -E '^step-[0-9]+$' | tr '\n' ' '
}

# ---- the node-local tier resolves to the shared root ------------------------
# The option text cannot show it (a link, a ".."); the node finds it when it
# resolves its directory, before it makes it, and nothing shared is touched.
ftrain_run lt0 $L --steps 10 --ckpt-every 5 --run-dir "$T/lt" --quiet
is "$rc" 0 "a run with shared checkpoints at steps 5 and 10"
ln -s "$T/lt/ckpt" "$T/loclink"
ftrain_run lt1 $L --steps 30 --ckpt-every 5 --ckpt-keep 5 --run-dir "$T/lt" \
    --ckpt-local "$T/loclink" --ckpt-local-every 2
ok "$([ "$rc" -eq 1 ] && grep -q "node-local directory '$T/loclink' ($T/lt/ckpt on [^)]*) is the shared checkpoint root '$T/lt/ckpt' ($T/lt/ckpt)" "$T/lt1.err"; echo $?)" \
    "--ckpt-local through a link to RUN_DIR/ckpt: exit 1, naming both paths (exit $rc)" ||
    why "$(cat "$T/lt1.err")"
ftrain_run lt2 $L --steps 30 --ckpt-every 5 --run-dir "$T/lt" --ckpt-local "$T/lt/no/../ckpt/%n" \
    --ckpt-local-every 2
ok "$([ "$rc" -eq 1 ] && grep -q "lies inside the shared checkpoint root '$T/lt/ckpt'" "$T/lt2.err"; echo $?)" \
    "--ckpt-local RUN_DIR/no/../ckpt/%n: exit 1, it lies inside the shared root (exit $rc)" ||
    why "$(cat "$T/lt2.err")"
ln -s "$T/lt" "$T/runlink"
ftrain_run lt3 $L --steps 30 --ckpt-every 5 --run-dir "$T/runlink" --ckpt-local "$T/lt" \
    --ckpt-local-every 2
ok "$([ "$rc" -eq 1 ] && grep -q "contains the shared checkpoint root '$T/runlink/ckpt' ($T/lt/ckpt)" "$T/lt3.err"; echo $?)" \
    "--ckpt-local RUN_DIR's real path, --run-dir a link: exit 1, it contains the root (exit $rc)" ||
    why "$(cat "$T/lt3.err")"
is "$(steps_in "$T/lt/ckpt")" "step-00000005 step-00000010 " \
    "  the shared checkpoints are untouched, nothing was added"
others=$(ls "$T/lt/ckpt" | grep -Ev '^(step-[0-9]+|LATEST)$' | tr '\n' ' ')
ok "$([ ! -e "$T/lt/no" ] && [ -z "$others" ]; echo $?)" "  no local directory was made" ||
    why "in $T/lt/ckpt: $others"
"$BUILD/ckptctl" verify "$T/lt/ckpt" >"$T/v.out" 2>&1
is "$?" 0 "  and they verify"
# The same directory beside the root is fine.
ftrain_run lt4 $L --steps 12 --ckpt-every 5 --run-dir "$T/lt" --ckpt-local "$T/lt/local/%n" \
    --ckpt-local-every 2 --quiet
is "$rc" 0 "--ckpt-local RUN_DIR/local/%n, beside the shared root, runs"

# ---- a global batch larger than the data set ---------------------------------
ftrain_run gb $L --steps 2 --global-batch 4096 --micro-batch 16
ok "$([ "$rc" -ne 0 ] && grep -q -- "--global-batch 4096 is larger than the training set, which has 1000 samples" "$T/gb.err"; echo $?)" \
    "--global-batch 4096 on 1000 samples: refused, naming the option and the size (exit $rc)" ||
    why "$(cat "$T/gb.err")"
ok "$(! grep -q '^done:' "$T/gb.out"; echo $?)" "  nothing was trained"
ftrain_run gb2 $L --steps 1 --global-batch 1000 --micro-batch 125 --quiet
is "$rc" 0 "--global-batch 1000 on 1000 samples runs"

# ---- a resume with nothing left to train -------------------------------------
ftrain_run rp0 $L --steps 8 --ckpt-every 4 --run-dir "$T/rp" --quiet
is "$rc" 0 "a run of 8 steps"
ftrain_run rp1 $L --steps 6 --run-dir "$T/rp"
is "$rc" 0 "resumed with --steps 6, below the checkpoint's step 8: exit 0"
like "$(cat "$T/rp1.out")" "^resume: note: the checkpoint's step 8 is past the 6 steps this run asks for \(--steps 6\): nothing is trained" \
    "  a note says that the checkpoint is past the run's steps"
like "$(grep '^done:' "$T/rp1.out")" "^done: step=8 epoch=1 loss=none test_r2=-?[0-9]" \
    "  the done line says loss=none, and the evaluation's R^2"
ok "$(! grep -Eiq 'nan| 0 samples/s' "$T/rp1.out"; echo $?)" "  no nan and no '0 samples/s' anywhere" ||
    why "$(grep -Ei 'nan|samples/s' "$T/rp1.out")"
like "$(grep '^timing:' "$T/rp1.out")" "^timing: no step trained in this process" \
    "  the timing line says no step was trained"
ftrain_run rp2 $L --epochs 1 --run-dir "$T/rp" --quiet
is "$rc" 0 "resumed with --epochs 1 (8 steps), the checkpoint's own: exit 0"
like "$(cat "$T/rp2.out")" "^resume: note: the checkpoint's step 8 is the last of the 8 steps this run asks for \(--epochs 1: 8 steps\): nothing is left to train" \
    "  a note says that nothing is left to train, under --quiet too"
like "$(grep '^done:' "$T/rp2.out")" "loss=none" "  done says loss=none"

# ---- a warm-up at least as long as the run -------------------------------------
ftrain_run wu $L --steps 3 --schedule cosine --warmup 100 --quiet
ok "$([ "$rc" -eq 0 ] && grep -q "^ftrain: warning: --warmup 100 is not shorter than the run's 3 steps" "$T/wu.err"; echo $?)" \
    "--warmup 100 in a run of 3 steps: a warning (exit $rc)" || why "$(cat "$T/wu.err")"
ftrain_run wu2 $L --epochs 1 --schedule cosine --warmup 8 --quiet
like "$(cat "$T/wu2.err")" "warning: --warmup 8 is not shorter than the run's 8 steps" \
    "--warmup 8 in a run of one epoch (8 steps): a warning"
ftrain_run wu3 $L --steps 3 --schedule cosine --warmup 2 --quiet
ok "$(! grep -q warmup "$T/wu3.err"; echo $?)" "--warmup 2 in a run of 3 steps: no warning"

# ---- a stop whose own checkpoint fails ------------------------------------------
# Step directories made while it trains stand in the way of the stop's save
# (as a full disk would): the message must say that a stop was under way and
# that the job ends with 1, not 75.
ftrain_run sf0 $L --steps 4 --run-dir "$T/sf" --quiet
is "$rc" 0 "a run with a checkpoint at step 4"
timeout -k 5 "$LIMIT" "$FTRAIN" $L --steps 100000 --step-delay-ms 50 --run-dir "$T/sf" \
    >"$T/sf1.out" 2>"$T/sf1.err" &
sf_pid=$!
track_bg "$sf_pid"
wait_for 30 grep -q '^train:' "$T/sf1.out"
# (One awk, not a printf per name: 1996 command substitutions took 20 s
# on a loaded machine while the run trained on.)
names=$(awk -v d="$T/sf/ckpt" 'BEGIN { for (i = 5; i <= 2000; i++) printf "%s/step-%08d\n", d, i }')
# shellcheck disable=SC2086 # the names hold no blanks
mkdir $names
# The stop comes after a step of this run (5 or later), whose directory is
# there.
wait_for 30 grep -q '^epoch ' "$T/sf1.out"
kill -USR1 "$(rank_pid "$T/sf1.out" 0)" 2>/dev/null
wait "$sf_pid"
rc=$?
ok "$([ "$rc" -eq 1 ] && grep -q "stop (signal USR1) at step [0-9]*: its checkpoint failed, so this job exits 1 and is not requeued (the newest committed checkpoint, of step 4, is kept): checkpoint " "$T/sf1.err"; echo $?)" \
    "a stop whose save fails: exit 1, the message says a stop was under way, no requeue, step 4 kept (exit $rc)" ||
    why "$(cat "$T/sf1.err")"
rmdir $names 2>/dev/null
"$BUILD/ckptctl" verify "$T/sf/ckpt/step-00000004" >"$T/v.out" 2>&1
is "$?" 0 "  the checkpoint of step 4 verifies"

# ---- a stop after an epoch's evaluation: the done line's score -------------------
# The weights the stopped run ends with were not evaluated: the done line
# says test_r2=none, not the score of an earlier epoch's weights.
timeout -k 5 "$LIMIT" "$FTRAIN" $L --steps 100000 --step-delay-ms 50 --run-dir "$T/ev" \
    >"$T/ev.out" 2>"$T/ev.err" &
ev_pid=$!
track_bg "$ev_pid"
wait_for 30 grep -q '^eval: epoch 1 ' "$T/ev.out"
kill -USR1 "$(rank_pid "$T/ev.out" 0)" 2>/dev/null
wait "$ev_pid"
rc=$?
like "$(grep '^done:' "$T/ev.out")" "^done: step=[0-9]+ epoch=[0-9]+ loss=[0-9.e+-]+ test_r2=none param_hash=" \
    "a stop after epoch 1's evaluation (exit $rc): the done line's test_r2 is none, not epoch 1's" ||
    why "$(grep -E '^(eval|stop|done)' "$T/ev.out")"

# ---- --ckpt-keep after a resume --------------------------------------------------
# The checkpoint resumed from counts among K once a newer one is committed.
ftrain_run kp0 $L --steps 10 --ckpt-every 2 --ckpt-keep 2 --run-dir "$T/kp" --quiet
is "$(steps_in "$T/kp/ckpt")" "step-00000008 step-00000010 " "--ckpt-keep 2: steps 8 and 10 kept"
ftrain_run kp1 $L --steps 20 --ckpt-every 2 --ckpt-keep 2 --run-dir "$T/kp" --quiet
is "$rc" 0 "resumed from step 10 and trained to 20"
is "$(steps_in "$T/kp/ckpt")" "step-00000018 step-00000020 " \
    "  --ckpt-keep 2 holds after the resume: the step resumed from (10) was pruned too"

# ---- the final evaluation of a run that ends mid-epoch -------------------------
# It is printed, logged and timed like an epoch's: a script reading
# metrics.jsonl finds the run's last score there, not only on the done line.
ftrain_run fe $L --steps 5 --run-dir "$T/fe"
like "$(grep '^eval:' "$T/fe.out")" "^eval: final, step 5 \(epoch 0\.[0-9], mid-epoch\) test_loss [0-9.e+-]+ test_r2 [0-9.e+-]+$" \
    "a run of 5 steps (mid-epoch): an 'eval: final' line (exit $rc)" || why "$(cat "$T/fe.out" "$T/fe.err")"
r2=$(sed -n 's/^eval: final.* test_r2 \([^ ]*\)$/\1/p' "$T/fe.out")
like "$(grep '^done:' "$T/fe.out")" " test_r2=${r2:-missing} param_hash=" "  the done line's test_r2 is that line's"
like "$(grep '"event":"eval"' "$T/fe/metrics.jsonl")" '^\{"event":"eval","step":5,.*"test_r2":[0-9.e+-]+,"final":true\}$' \
    "  metrics.jsonl has its eval event, step 5, final" || why "$(cat "$T/fe/metrics.jsonl")"
# Its time, on a test set large enough to show in milliseconds (Fashion-MNIST's
# 10,000 images; the line's 64 points take less than 0.5 ms).
ftrain_run ft --device cpu --steps 3
like "$(grep '^timing:' "$T/ft.out")" "evaluation (0\.00[1-9]|0\.0[1-9][0-9]|0\.[1-9][0-9]{2}|[1-9][0-9]*\.[0-9]{3}) s" \
    "  the timing line counts its time (Fashion-MNIST, 3 steps; exit $rc)" || why "$(cat "$T/ft.out" "$T/ft.err")"
ftrain_run fo $L --epochs 1 --run-dir "$T/fo"
is "$(grep -c '^eval:' "$T/fo.out") $(grep -c '^eval: epoch 1 ' "$T/fo.out")" "1 1" \
    "a run that ends on an epoch: its epoch's eval line only, no final one (exit $rc)"

done_testing

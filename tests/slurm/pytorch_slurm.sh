#!/bin/bash
# pytorch_slurm.sh: examples/pytorch_ddp.py, a PyTorch DDP script made safe
# with ftrain_ckpt, survives a lost node inside one SLURM job, on the real
# one-machine test cluster (TAP).
#
# A 3-node job (slurm/train.sbatch, FTRAIN_PROGRAM running the example
# under srun, FTRAIN_TASKS_PER_NODE=1: ranks 0-2 on three fake nodes) saves
# into the node-local tier every 4 steps (fc.LocalTier, --local-root
# $W/local/%n: each node its own directory, a partner copy of the node
# before it in the ring) and into the shared tier rarely (every 4th local
# save is flushed: steps 16 and 32, and the end).  Its watchdog (fc.Watchdog,
# --hang-timeout 20: a heartbeat every 0.67 s) writes ftrain's heartbeats in
# RUN_DIR/heartbeat.  At step 21 (before the flush at 32) a node that
# is NOT the batch host is lost:
#
#   - with tests/slurm/lab/lab-kill-node.sh (when the lab has it): powered
#     off, every process of that fake node killed at once (its slurmd, its
#     slurmstepd, the rank), its TmpFS and its node-local directory wiped;
#   - else: its rank killed (SIGKILL) and its node-local directory and TmpFS
#     wiped (as slurm_relaunch.sh's case f, which wipes without a kill);
#
# and then marked DOWN at once (scontrol update state=down, as a health check
# would; the lab's SlurmdTimeout, 30 s, would only make the test longer).
# Expected:
#
#   1. the batch script sees the failure, at the step the heartbeats reached
#      (not "start-up": the watchdog's heartbeats are what it reads), and
#      relaunches once, in the same job, on the 2 nodes left;
#   2. the example resumes from the node-local tier, not the shared one: a
#      local step (20, 24 or 28) newer than the shared tier's 16, its 3
#      shards assembled on 2 nodes (the lost node's from the partner copy on
#      the node after it); world 3 -> 2; its recovery line (from the
#      heartbeats the lost launch left) counts the steps redone;
#   3. it finishes with the samples_hash and lr of an uninterrupted run (one
#      process; the order of the samples does not depend on the world size)
#      and its test_loss within 1e-4 relative (DDP's sums are not
#      bit-exact across world sizes: docs/python.md, "What is bit-exact");
#      the heartbeats are gone at the clean end;
#   4. the job COMPLETED, exit 0:0, in one allocation (Restarts 0);
#   5. the node is back (its slurmd started again where it was powered off,
#      resumed): 4 nodes idle for the tests that follow.
#
# Skips without root, the SLURM packages, numpy or torch with gloo
# ($PYTHON, default /usr/bin/python3), or a built library; takes the lock of
# the SLURM tests (one test cluster per machine).  About 32 s on the busy
# 2-core test machine (load average 6), most of it the 6 Python processes
# importing torch; more when another SLURM test holds the lock.
. "$(dirname "$0")/lab/common.sh" pytorch

PROG=$root/examples/pytorch_ddp.py
need_torch_gloo
need_ckpt_lib

plan 9
lab_up
# The ranks: this tree's package; sbatch passes the environment to the job,
# srun to the tasks.  The fake nodes' names do not resolve: the ranks meet
# on this host (MASTER_ADDR).
export PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}"
export GLOO_SOCKET_IFNAME=lo PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1 MASTER_ADDR=127.0.0.1
export FTRAIN_TASKS_PER_NODE=1 FTRAIN_PROGRAM="$PY $PROG"
unset FTRAIN_ARGS MASTER_PORT
STEPS=40
ARGS="--steps $STEPS --log-every 1 --step-delay 0.15 --local-every 4 --flush-every 4 --hang-timeout 20"

# The uninterrupted run (one process), while the job starts.
"$PY" "$PROG" --run-dir "$W/ref" --steps $STEPS --log-every 0 >"$W/ref.out" 2>&1 &
ref=$!
track_bg "$ref"

out=$W/job.out
export RUN_DIR=$W/run
# shellcheck disable=SC2086
job=$(sbatch --parsable -N 3 --time=5 -o "$out" -J pytorch-local "$root/slurm/train.sbatch" \
	$ARGS --local-root "$W/local/%n" 2>"$W/sbatch.err")
jobs_started="$jobs_started $job"
log() { grep -E 'train\.sbatch|^(resume|recovery|local tier|done|world):|Error' "$out" | tail -n 20; }
field_of() { printf '%s\n' "$2" | sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }

node="" how="" powered_off=0
# A node powered off and not yet back gets its slurmd again at exit.
at_exit '[ "$powered_off" = 1 ] && [ "$was_up" = 1 ] && "$here/lab/lab-up.sh" >/dev/null 2>&1 9>&-'
# The node to lose, chosen while the job warms up (every rank has said
# where it runs once rank 0 trains): not the batch host; rank 1's, else
# rank 2's.  Then, as soon as step 21 is logged (well before the flush at
# 32), the loss.
if [ -n "$job" ] && wait_line "$out" "^step 5/$STEPS " 150; then
	batch=$(field "$job" BatchHost)
	for r in 1 2; do
		h=$(sed -n "s/^world: rank $r of 3 (srun) host \\([^ ]*\\) pid.*/\\1/p" "$out" | head -n 1)
		[ -n "$h" ] && [ "$h" != "$batch" ] && { node=$h; break; }
	done
fi
if [ -n "$node" ] && wait_line "$out" "^step 21/$STEPS " 60; then
	if [ -x "$here/lab/lab-kill-node.sh" ]; then
		how="powered off (lab-kill-node.sh)"
		"$here/lab/lab-kill-node.sh" "$node" "$W/local/$node" >"$W/kill.out" 2>&1
		rc=$?
		powered_off=1
	else
		how="its rank killed, its local space wiped"
		pids=$(sed -n "s/^world: rank [0-9]* of 3 (srun) host $node pid \\([0-9]*\\).*/\\1/p" "$out")
		# shellcheck disable=SC2086
		kill -KILL $pids >"$W/kill.out" 2>&1
		rc=$?
		rm -rf "${W:?}/local/$node"
		find "$LAB/tmp/$node" -mindepth 1 -delete 2>/dev/null
		powered_off=0
	fi
	downed="$downed $node"
	scontrol update nodename="$node" state=down reason=ftrain-pytorch-test
	at=$(sed -n "s|^step \\([0-9]*\\)/$STEPS .*|\\1|p" "$out" | tail -n 1)
	[ "$rc" = 0 ] && ! grep -q '^done:' "$out"
	ok $? "3 nodes train; node $node (not the batch host $batch) lost at step ${at:-?}: $how, marked DOWN" ||
		why "$(cat "$W/kill.out")" "$(log)"
else
	ok 1 "3 nodes train past step 21 (job ${job:-none}), a node other than the batch host to lose" ||
		why "$(cat "$W/sbatch.err" 2>/dev/null)" "$(tail -n 20 "$out" 2>/dev/null)"
fi

[ -n "$job" ] && wait_end "$job" 240
st=$(field "$job" JobState) restarts=$(field "$job" Restarts) code=$(field "$job" ExitCode)

# 1. The failure, at the step the heartbeats reached, and one relaunch on 2.
fail=$(grep -E 'train\.sbatch.*failure at step ' "$out" | head -n 1)
printf '%s\n' "$fail" | grep -Eq "failure at step [0-9]+: (node $node failed|a rank died: $node: task [0-9]: Killed)" &&
	grep -Eq 'train\.sbatch.*relaunch 1 of at most 3 on 2 node' "$out" &&
	[ "$(grep -c 'train\.sbatch.*launch: ' "$out")" = 2 ]
ok $? "the batch script names the failure at the step the watchdog's heartbeats reached and relaunches once on the 2 nodes left" ||
	why "${fail:-no failure line}" "$(grep 'train\.sbatch' "$out" | tail -n 12)"
diag "${fail#*]: }"

# 2. Restored from the node-local tier: a local step newer than the shared 16.
line=$(grep '^resume:' "$out" | head -n 1)
tier_line=$(grep '^local tier: resuming from local step' "$out" | head -n 1)
printf '%s\n' "$line" | grep -Eq '^resume: from the node-local tier \(.*/\.restore/step-000000(20|24|28)\) step (20|24|28) .*world 3 -> 2,' &&
	printf '%s\n' "$tier_line" | grep -Eq '^local tier: resuming from local step (20|24|28) \(n[0-9]+: .*; n[0-9]+: .*\), newer than the shared tier.s step 16$'
ok $? "resumed from the node-local tier (3 shards from the 2 nodes left: the lost node's from its partner copy), newer than the shared tier's step 16, world 3 -> 2" ||
	why "${line:-no resume line}" "${tier_line:-no local tier line}" "$(grep -E '^(local tier|checkpoint):' "$out" | tail -n 8)"
diag "$tier_line"
diag "$line"
rec=$(grep '^recovery:' "$out" | head -n 1)
redone=$(printf '%s\n' "$rec" | sed -n 's/.*: \([0-9]*\) step(s) redone$/\1/p')
[ -n "$redone" ] && [ "$redone" -le 8 ]
ok $? "its recovery line, from the heartbeats the lost launch left: ${redone:-?} step(s) redone" || why "${rec:-no recovery line}"
diag "$rec"

# 3. The uninterrupted run's samples, learning rate and (to rounding) loss.
wait "$ref"
R=$(grep "^done: step=$STEPS " "$W/ref.out")
D=$(grep "^done: step=$STEPS " "$out" | tail -n 1)
[ -n "$R" ] && [ -n "$D" ] &&
	[ "$(field_of samples_hash "$D") $(field_of lr "$D")" = "$(field_of samples_hash "$R") $(field_of lr "$R")" ] &&
	awk -v a="$(field_of test_loss "$D")" -v b="$(field_of test_loss "$R")" \
		'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b > 0 && d / b <= 1e-4) }'
ok $? "finished with the uninterrupted run's samples_hash and lr, test_loss within 1e-4 relative" ||
	why "job: ${D:-no done line}" "ref: ${R:-no done line: $(tail -n 3 "$W/ref.out")}"
[ -n "$D" ] && [ ! -e "$RUN_DIR/heartbeat" ]
ok $? "  the watchdog closed cleanly: no heartbeat left" || why "$(ls "$RUN_DIR/heartbeat" 2>&1)"

# 4. In one allocation.
[ "$st" = COMPLETED ] && [ "$code" = 0:0 ] && [ "$restarts" = 0 ]
ok $? "job $job COMPLETED (exit $code) in one allocation (Restarts $restarts)" || why "state $st" "$(log)"

# 5. The node back for the tests that follow.
if [ -n "$node" ]; then
	[ "$powered_off" = 1 ] && "$here/lab/lab-up.sh" >"$W/lab-back.log" 2>&1 9>&- && powered_off=0
	scontrol update nodename="$node" state=resume 2>/dev/null
	downed=""
fi
wait_for 30 sh -c '[ "$(sinfo -h -o "%D %T")" = "4 idle" ]'
ok $? "node ${node:-?} is back: 4 nodes idle" || why "$(sinfo 2>&1)" "$(tail -n 3 "$W/lab-back.log" 2>/dev/null)"
done_testing

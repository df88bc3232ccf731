#!/bin/bash
# slurm_batch_host.sh: the batch host's loss is survived, on the real
# one-machine test cluster (TAP).
#
# A 3-node job (slurm/train.sbatch, --deterministic, the node-local tier
# every 4 steps, the shared tier only at step 40) loses its batch host
# mid-run: every process of that fake node (its slurmd, its slurmstepd
# daemons and their children: the batch script, ftrain-supervise, srun,
# rank 0) is killed at once and its node-local space wiped
# (lab/lab-kill-node.sh), as in a power loss.  SLURM marks the node
# NOT_RESPONDING, then DOWN after SlurmdTimeout (30 s), and under --no-kill
# keeps the job RUNNING on the two nodes left with nothing running.  The
# deputy step (ftrain-supervise --deputy, on the job's last node) sees the
# supervisor's heartbeat go silent (FTRAIN_DEPUTY_STALE=10 here), asks
# SLURM, and requeues the job.  Expected:
#
#   1. the deputy names what happened: the batch host lost (silent N s,
#      SLURM says DOWN or NOT_RESPONDING), requeue, restart 1;
#   2. the job comes back (Restarts 1) on 3 nodes without the lost one;
#   3. it resumes from the node-local tier (the nodes left hold every shard:
#      their own and the partner copies), 3 -> 3 ranks, at step 20, 24 or 28
#      (the shared tier has none yet);
#   4. it finishes COMPLETED with the uninterrupted run's param_hash;
#   5. a healthy run is left alone: the requeued run's deputy requeues
#      nothing and leaves when the supervisor ends the job;
#   6. the node comes back (its slurmd started again): 4 nodes idle for the
#      tests that follow.
#
# Takes about 1.5 minutes, most of it SLURM's SlurmdTimeout.  Needs root
# and the SLURM packages (it skips without them), and takes the lock of
# the SLURM tests: one test cluster per machine.
. "$(dirname "$0")/lab/common.sh" batch-host

plan 8
lab_up
export FTRAIN=$bdir/ftrain FTRAIN_TASKS_PER_NODE=1 FTRAIN_DEPUTY_STALE=10
RUN="--device cpu --data line --layers 8 --global-batch 32 --micro-batch 8 --deterministic --steps 48 --log-every 1"
"$FTRAIN" $RUN >"$W/ref.out" 2>&1
REF=$(sed -n 's/^done: .*param_hash=\([0-9a-f]*\).*/\1/p' "$W/ref.out")
[ -n "$REF" ] || { echo "Bail out! the uninterrupted run failed: $(tail -n 3 "$W/ref.out")"; exit 1; }

# The node-local tier where train.sbatch puts it by default (every fake node
# has its own directory in it, %n).
LOCAL_ROOT=/dev/shm/ftrain-test-$$-batch-host
export FTRAIN_LOCAL_ROOT=$LOCAL_ROOT
at_exit 'rm -rf "$LOCAL_ROOT"'
export FTRAIN_ARGS="$RUN --step-delay-ms 200 --ckpt-every 40 --ckpt-local-every 4"
out=$W/job.out
export RUN_DIR=$W/run
job=$(sbatch --parsable -N 3 --time=5 -o "$out" -J batch-host "$root/slurm/train.sbatch" 2>"$W/sbatch.err")
jobs_started="$jobs_started $job"
log() { grep -E 'train\.sbatch|^(resume|done|world: [0-9])' "$out" | tail -n "${1:-20}"; }

# The batch host, once the job runs; then, at step 22, its power off.
host=""
wait_line "$out" 'train\.sbatch.*deputy: started on ' 60 && host=$(field "$job" BatchHost)
if [ -n "$host" ] && wait_line "$out" '^epoch [0-9.]+/[0-9.]+ step 22/' 90; then
	kill_node "$host" "$LOCAL_ROOT/ftrain-job-$job/$host" >"$W/kill.out" 2>&1
	t_kill=$(date +%s)
	grep -q 'deputy: started on n[0-9]* .*this batch host' "$out" && ! grep -q "deputy: started on $host " "$out" &&
		grep -Eq '^killed: .*\(slurmd, [1-9][0-9]* slurmstepd of' "$W/kill.out" && ! grep -q '^done:' "$out"
	ok $? "the job trains on 3 nodes, its deputy on another node than the batch host $host; $host powered off at step 22, mid-run" ||
		why "$(cat "$W/kill.out")" "$(log)"
	# The deputy's word, then the job back and finished (the requeue delay
	# is cred_expire + 1 s here: 6 s).
	lost="train\\.sbatch\\[$job\\]: deputy on n[0-9]+: the batch host $host is lost \\(the supervisor silent for [0-9]+ s, SLURM says (DOWN|NOT_RESPONDING)\\): requeue job $job \\(restart 1 of at most 20\\)"
	# The node is NOT_RESPONDING 15-30 s after the loss, DOWN after 40.
	wait_line "$out" "$lost" 90
	ok $? "the deputy names it: the batch host $host lost, the job requeued ($(($(date +%s) - t_kill)) s after the loss)" &&
		bound=150 || { bound=5; why "$(log)" "$(tail -n 5 "$LAB/log/slurmctld.log")"; }
	diag "$(grep -E "deputy on .*: the batch host .* is lost" "$out" | cut -c1-200)"
	# Without the requeue the job would hold its allocation to the time
	# limit: no long wait then.
	wait_end "$job" "$bound"
	st=$(field "$job" JobState) restarts=$(field "$job" Restarts) code=$(field "$job" ExitCode)
	second=$(sed -n "s/.*train\\.sbatch\\[$job\\]: start: job $job restart 1\\/20 nodes 3 (\\([^)]*\\)).*/\\1/p" "$out")
	nodes=$(scontrol show hostnames "$second" 2>/dev/null | paste -sd, -)
	[ "$restarts" = 1 ] && [ -n "$nodes" ] && ! printf ',%s,' "$nodes" | grep -q ",$host,"
	ok $? "  requeued once (Restarts $restarts), back on 3 nodes without $host (${nodes:-none})" || why "$(log)"
	line=$(grep '^resume:' "$out" | head -n 1)
	diag "$line"
	printf '%s\n' "$line" | grep -Eq '^resume: from the node-local tier \(shards [0-9,-]+ read on n[0-9]+(; shards [0-9,-]+ read on n[0-9]+)*\) step-0*(20|24|28) step (20|24|28) .*world 3 -> 3'
	ok $? "  resumed from the node-local tier the nodes left hold (step 20, 24 or 28; the shared tier has none), 3 -> 3 ranks" ||
		why "${line:-no resume line}" "$(grep -E '^local|train\.sbatch' "$out" | tail -n 8)"
	hash=$(sed -n 's/^done: .*param_hash=\([0-9a-f]*\).*/\1/p' "$out" | tail -n 1)
	[ "$st" = COMPLETED ] && [ "$code" = 0:0 ] && [ "$hash" = "$REF" ]
	ok $? "  COMPLETED with the uninterrupted run's param_hash" ||
		why "state $st exit $code hash ${hash:-none} want $REF" "$(log)"
	# The requeued run is healthy: its deputy leaves at the end, having
	# requeued nothing (one loss in the log, the first run's).
	[ "$(grep -Ec "$lost|deputy on .*: the batch host .* is lost" "$out")" = 1 ] &&
		grep -Eq "train\\.sbatch\\[$job\\]: deputy on n[0-9]+ left \\(status 0\\)" "$out" &&
		grep -q 'train\.sbatch.*: done: training finished' "$out"
	ok $? "  a healthy run is left alone: the requeued run's deputy requeued nothing and left at the end" ||
		why "$(grep deputy "$out")"
else
	ok 1 "the job did not reach step 22: $(tail -n 5 "$out" 2>/dev/null)"
	ok 1 "  the deputy names the loss"
	ok 1 "  requeued"
	ok 1 "  resumed from the node-local tier"
	ok 1 "  param_hash"
	ok 1 "  a healthy run is left alone"
fi
scancel "$job" 2>/dev/null # ended already, unless the deputy failed
node_back
ok $? "the powered-off node is back: its slurmd started again, 4 nodes idle" || why "$(tail -n 3 "$W/lab-back.log")"
done_testing

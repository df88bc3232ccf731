#!/bin/bash
# slurm_relaunch.sh: slurm/train.sbatch carries on inside ONE job after an
# unplanned failure (same job id, no requeue: SLURM's Restarts stays 0), on
# the real one-machine test cluster, and ends with the uninterrupted run's
# param_hash (deterministic mode, any world size) (TAP):
#
#   a. SIGKILL to rank 1 -> relaunch without its node -> finishes bit-exactly;
#      the resumed run reports the recovery (steps redone, seconds lost).
#   a2. the same with FTRAIN_LAUNCH=mpirun (the relaunch's mpirun gets
#      SLURM_TASKS_PER_NODE for its nodes).
#   b. the node of rank 1 marked DOWN (scontrol update state=down) mid-run ->
#      the job keeps its allocation (--no-kill) -> relaunch on the 2 nodes
#      left, 3 -> 2 ranks -> finishes bit-exactly.
#   c. rank 1 stopped (SIGSTOP) -> ftrain's watchdog ends the step (76) ->
#      relaunch without that node -> finishes bit-exactly.
#   d. a fault that repeats at the same step (--fault kill@12:0) -> one
#      relaunch, the same failure, and the job gives up with a clear message.
#   e. a planned stop (USR1 to the batch shell) still checkpoints, requeues
#      (Restarts 1) and finishes bit-exactly.
#   f. the node-local tier (a local checkpoint every 4 steps, the shared
#      tier every 40): a node marked DOWN and its local directory deleted
#      -> relaunch on the 2 nodes left -> restored from the local tier (the
#      lost node's shards from their partner copies) -> finishes bit-exactly;
#      the local tier (FTRAIN_LOCAL_ROOT/ftrain-job-<job id>) is removed at
#      the end of the job, and a file of the user's in FTRAIN_LOCAL_ROOT is
#      kept.  The tier is on
#      /dev/shm where that is a memory file system (train.sbatch's default
#      place), so it saves in place there, and the run must say so; each
#      fake node has a core to spare, so the helper thread moves the
#      partner copies, and the run must say that too.
#   g. rank 1 dies (SIGSEGV) at start-up, before ftrain runs, once -> its
#      node is kept for one more try -> relaunch on all 3 nodes -> finishes
#      bit-exactly.
#   h. the same twice on that node -> kept once, then left out -> relaunch
#      on the other 2 -> finishes bit-exactly (no "deterministic fault").
#   i. as g with FTRAIN_MAX_RELAUNCHES=1 -> no spare try (a bad node must
#      still get the relaunch without it): left out at once -> finishes.
#
# Needs root and the SLURM packages (it skips without them), and takes the
# same lock as the other SLURM tests: one test cluster per machine.
. "$(dirname "$0")/lab/common.sh" relaunch

plan 33
lab_up
export FTRAIN=$bdir/ftrain FTRAIN_TASKS_PER_NODE=1
RUN="--device cpu --data line --layers 8 --global-batch 32 --micro-batch 8 --deterministic --steps 48 --log-every 1"
export FTRAIN_ARGS="$RUN --step-delay-ms 150 --ckpt-every 5"

"$FTRAIN" $RUN >"$W/ref.out" 2>&1
REF=$(sed -n 's/^done: .*param_hash=\([0-9a-f]*\).*/\1/p' "$W/ref.out")
[ -n "$REF" ] || { echo "Bail out! the uninterrupted run failed: $(tail -n 3 "$W/ref.out")"; exit 1; }

# submit NAME NODES [ftrain options]: start a job on NODES nodes; sets job,
# out and RUN_DIR.
submit() {
	local name=$1 nodes=$2
	shift 2
	out=$W/$name.out
	export RUN_DIR=$W/$name
	job=$(sbatch --parsable -N "$nodes" --time=5 -o "$out" -J "rl-$name" "$root/slurm/train.sbatch" "$@" 2>"$W/$name.sbatch.err")
	jobs_started="$jobs_started $job"
}
# rank1 STEP: wait for step STEP of the first launch; print rank 1's pid and
# host as "PID HOST".
rank1() {
	wait_line "$out" "^epoch [0-9.]+/[0-9.]+ step $1/" 60 || return 1
	sed -n 's/^world: rank 1 local [0-9]* host \([^ ]*\) pid \([0-9]*\).*/\2 \1/p' "$out" | head -n 1
}
# finished_exactly NAME: the job completed, in one allocation, with the
# uninterrupted run's param_hash; its deputy (a healthy batch host) never
# acted.
finished_exactly() {
	wait_end "$job" 180
	local st restarts code hash
	st=$(field "$job" JobState) restarts=$(field "$job" Restarts) code=$(field "$job" ExitCode)
	hash=$(sed -n 's/^done: .*param_hash=\([0-9a-f]*\).*/\1/p' "$out" | tail -n 1)
	[ "$st" = COMPLETED ] && [ "$code" = 0:0 ] && [ "$restarts" = 0 ] && [ "$hash" = "$REF" ] &&
		! grep -Eq 'deputy on .*: the batch host .* is lost' "$out"
	ok $? "  $1: job $job COMPLETED in one allocation (Restarts $restarts) with the uninterrupted param_hash, its deputy idle" ||
		why "state $st exit $code restarts $restarts hash ${hash:-none} want $REF" "$(grep -E 'train\.sbatch|^done|error' "$out" | tail -n 12)"
}

# ---- a. a rank killed ---------------------------------------------------------------
submit kill 2
if v=$(rank1 12) && [ -n "$v" ]; then
	kill -KILL "${v%% *}"
	finished_exactly "SIGKILL to rank 1 on ${v#* }"
	grep -Eq "train\.sbatch.*failure record: rank [02] on n[0-9]+: peer_lost at step 1[0-9], points at ${v#* }" "$out" &&
		grep -Eq "train\.sbatch.*failure at step 1[0-9]: a rank died: ${v#* }: task 1: Killed" "$out"
	ok $? "  the script names the failed rank and its node (its neighbour's peer_lost record, srun's signal)" ||
		why "$(grep 'train\.sbatch' "$out")"
	grep -Eq "train\.sbatch.*node ${v#* } left out: the failure points at it" "$out" &&
		grep -Eq 'train\.sbatch.*relaunch 1 of at most 3 on 1 node' "$out"
	ok $? "  relaunched once, without that node" || why "$(grep 'train\.sbatch' "$out")"
	line=$(grep -E '^recovery: ' "$out" | head -n 1)
	redone=$(printf '%s\n' "$line" | sed -n 's/.* \([0-9]*\) steps\{0,1\} redone.*/\1/p')
	[ -n "$redone" ] && [ "$redone" -le 5 ] && grep -q '"event":"recovery"' "$RUN_DIR/metrics.jsonl"
	ok $? "  the recovery line and event: $redone step(s) redone (at most --ckpt-every 5)" || why "${line:-no recovery line}"
else
	ok 1 "SIGKILL: the job did not train: $(tail -n 5 "$out" 2>/dev/null)"
	ok 1 "  names the rank"
	ok 1 "  relaunched"
	ok 1 "  recovery line"
fi

# ---- a2. the same under FTRAIN_LAUNCH=mpirun --------------------------------------------
# Open MPI's SLURM allocator needs SLURM_TASKS_PER_NODE for the relaunch's
# nodes: without it every mpirun relaunch failed at once.
FTRAIN_LAUNCH=mpirun submit kill-mpirun 2
if v=$(rank1 12) && [ -n "$v" ]; then
	kill -KILL "${v%% *}"
	finished_exactly "mpirun: SIGKILL to rank 1 on ${v#* }"
	grep -Eq 'train\.sbatch.*relaunch 1 of at most 3 on 1 node' "$out" &&
		grep -Eq 'train\.sbatch.*launch: mpirun --host [^ ]*:1 ' "$out"
	ok $? "  relaunched once with mpirun, without that node" || why "$(grep 'train\.sbatch' "$out")"
else
	ok 1 "mpirun: the job did not train: $(tail -n 5 "$out" 2>/dev/null)"
	ok 1 "  relaunched with mpirun"
fi

# ---- b. a node marked DOWN ------------------------------------------------------------
submit down 3
if v=$(rank1 12) && [ -n "$v" ]; then
	node=${v#* }
	downed="$downed $node"
	scontrol update nodename="$node" state=down reason=ftrain-test
	finished_exactly "node $node marked DOWN"
	grep -Eq "train\.sbatch.*failure at step [0-9]+: node $node failed" "$out" &&
		grep -Eq 'train\.sbatch.*relaunch 1 of at most 3 on 2 node' "$out"
	ok $? "  the script saw the node failure and relaunched on the 2 nodes left" || why "$(grep 'train\.sbatch' "$out")"
	grep -Eq '^resume: .* world 3 -> 2,' "$out"
	ok $? "  ftrain resumed 3 -> 2 ranks" || why "$(grep '^resume' "$out")"
	scontrol update nodename="$node" state=resume 2>/dev/null
	downed=""
else
	ok 1 "node down: the job did not train: $(tail -n 5 "$out" 2>/dev/null)"
	ok 1 "  relaunched on 2 nodes"
	ok 1 "  resumed 3 -> 2"
fi

# ---- c. a hung rank -------------------------------------------------------------------------
submit hang 2 --hang-timeout 3
if v=$(rank1 12) && [ -n "$v" ]; then
	kill -STOP "${v%% *}"
	finished_exactly "SIGSTOP to rank 1"
	kill -CONT "${v%% *}" 2>/dev/null # only if it outlived its step
	grep -Eq "train\.sbatch.*ftrain exited with status 76" "$out" &&
		grep -Eq "train\.sbatch.*failure at step [0-9]+: a hang: rank 1 \(host ${v#* }\) stopped making progress" "$out"
	ok $? "  the watchdog ended the step (76) and the script names rank 1 and its node" || why "$(grep -E 'train\.sbatch|hang:' "$out")"
	grep -Eq "train\.sbatch.*node ${v#* } left out: the failure points at it" "$out" &&
		grep -Eq 'train\.sbatch.*relaunch 1 of at most 3 on 1 node' "$out"
	ok $? "  relaunched without that node" || why "$(grep 'train\.sbatch' "$out")"
else
	ok 1 "SIGSTOP: the job did not train: $(tail -n 5 "$out" 2>/dev/null)"
	ok 1 "  76 and the rank named"
	ok 1 "  relaunched"
fi

# ---- d. the same failure twice ------------------------------------------------------------
submit repeat 2 --fault kill@12:0
if wait_end "$job" 180; then
	st=$(field "$job" JobState) restarts=$(field "$job" Restarts)
	[ "$st" = FAILED ] && [ "$restarts" = 0 ]
	ok $? "--fault kill@12:0: the job FAILED in one allocation (state $st, Restarts $restarts)" || why "$(grep 'train\.sbatch' "$out")"
	[ "$(grep -c 'train\.sbatch.*launch: ' "$out")" = 2 ]
	ok $? "  launched twice: one relaunch, not a loop" || why "$(grep 'train\.sbatch.*launch' "$out")"
	grep -Eq 'train\.sbatch.*failed again at step [0-9]+ .* before getting past step [0-9]+, where the launch before failed the same way: a deterministic fault' "$out"
	ok $? "  it says why it gave up" || why "$(grep 'train\.sbatch' "$out" | tail -n 4)"
	"$bdir/ckptctl" verify "$RUN_DIR/ckpt" >"$W/repeat.verify" 2>&1
	ok $? "  the checkpoints left behind verify" || why "$(cat "$W/repeat.verify")"
else
	ok 1 "--fault: the job did not end within 180 s: $(grep 'train\.sbatch' "$out" | tail -n 4)"
	ok 1 "  launched twice"
	ok 1 "  says why"
	ok 1 "  checkpoints verify"
fi

# ---- e. a planned stop still requeues -------------------------------------------------------
submit stop 2
if wait_line "$out" '^epoch [0-9.]+/[0-9.]+ step 12/' 60; then
	scancel --batch --signal=USR1 "$job"
	wait_line "$out" 'train\.sbatch.*requeue job' 60
	ok $? "USR1: checkpointed and requeued" || why "$(grep 'train\.sbatch' "$out")"
	# Back from the requeue (Restarts 1), it must finish.
	end=$(($(date +%s) + 120))
	while [ "$(date +%s)" -le "$end" ] && [ "$(field "$job" Restarts)" != 1 ]; do sleep 0.5; done
	wait_end "$job" 180
	st=$(field "$job" JobState) restarts=$(field "$job" Restarts)
	hash=$(sed -n 's/^done: .*param_hash=\([0-9a-f]*\).*/\1/p' "$out" | tail -n 1)
	[ "$st" = COMPLETED ] && [ "$restarts" = 1 ] && [ "$hash" = "$REF" ]
	ok $? "  the requeued job (Restarts $restarts) COMPLETED with the uninterrupted param_hash" ||
		why "state $st restarts $restarts hash ${hash:-none} want $REF"
	! grep -Eq 'train\.sbatch.*relaunch [0-9]+ of|^recovery:' "$out"
	ok $? "  a planned stop is not a failure: no relaunch, no recovery line" || why "$(grep -E 'relaunch [0-9]+ of|^recovery' "$out")"
else
	ok 1 "USR1: the job did not train"
	ok 1 "  the requeued job completed"
	ok 1 "  no relaunch"
fi
# ---- f. a node lost, restored from the node-local tier -------------------------------------
# Where train.sbatch puts it by default, a memory file system, where the
# tier saves in place (the run says so); else under the test's directory.
SHM_ROOT=/dev/shm/ftrain-test-$$-local-f
case "$(stat -f -c %T /dev/shm 2>/dev/null)" in
tmpfs | ramfs) export FTRAIN_LOCAL_ROOT=$SHM_ROOT INPLACE=1 ;;
*) export FTRAIN_LOCAL_ROOT=$W/local-f INPLACE=0 ;;
esac
mkdir -p "$FTRAIN_LOCAL_ROOT/datasets" && echo data >"$FTRAIN_LOCAL_ROOT/datasets/keep.bin"
FTRAIN_ARGS="$RUN --step-delay-ms 150 --ckpt-every 40 --ckpt-local-every 4" submit local 3
if v=$(rank1 22) && [ -n "$v" ]; then
	node=${v#* }
	downed="$downed $node"
	scontrol update nodename="$node" state=down reason=ftrain-test
	rm -rf "${FTRAIN_LOCAL_ROOT:?}/ftrain-job-${job:?}/${node:?}"
	finished_exactly "node $node DOWN, its local directory gone"
	line=$(grep '^resume:' "$out" | head -n 1)
	said=0
	grep -q '^local tier: .*; saved in place (memory file system)$' "$out" && said=1
	printf '%s\n' "$line" | grep -Eq '^resume: from the node-local tier \(shards [0-9,-]+ read on n[0-9]+(; shards [0-9,-]+ read on n[0-9]+)*\) step-0*(20|24) step (20|24) .*world 3 -> 2' &&
		[ "$said" = "$INPLACE" ]
	ok $? "  restored from the local tier's newest step (20 or 24; the shared tier has none), 3 -> 2 ranks (saved in place: $said, as expected for $FTRAIN_LOCAL_ROOT)" ||
		why "${line:-no resume line}" "$(grep -E 'local|train\.sbatch' "$out" | tail -n 8)"
	# Each fake node has 2 CPUs and --deterministic trains on 1 BLAS thread:
	# a core to spare, so the helper thread moves the partner copies (with
	# its short pause, local_exchange.c).
	cores=$(sed -n 's/^world: rank 0 .* cores \([0-9]*\).*/\1/p' "$out" | head -n 1)
	if [ "${cores:-0}" -ge 2 ]; then
		grep -q '^local tier: .* by the helper thread;' "$out"
		ok $? "  a core to spare on each node ($cores a rank): the helper thread moved the partner copies" ||
			why "$(grep -E '^(local tier|world):' "$out")"
	else
		skip "  a core to spare on each node: the helper thread moved the partner copies" \
			"${cores:-no} core(s) a rank: no core to spare for the helper thread"
	fi
	ok "$([ ! -e "$FTRAIN_LOCAL_ROOT/ftrain-job-$job" ]; echo $?)" "  the node-local tier ftrain-job-$job is removed at the end of the job" ||
		why "$(ls -R "$FTRAIN_LOCAL_ROOT" | head)" "$(grep 'train\.sbatch.*tier' "$out")"
	ok "$([ -f "$FTRAIN_LOCAL_ROOT/datasets/keep.bin" ]; echo $?)" "  and nothing else in FTRAIN_LOCAL_ROOT: a file of the user's there is kept" ||
		why "$(ls -R "$FTRAIN_LOCAL_ROOT" | head)"
	scontrol update nodename="$node" state=resume 2>/dev/null
	downed=""
else
	ok 1 "local tier: the job did not train: $(tail -n 5 "$out" 2>/dev/null)"
	ok 1 "  restored from the local tier"
	ok 1 "  the helper thread moved the partner copies"
	ok 1 "  removed at the end"
	ok 1 "  the user's file kept"
fi
unset FTRAIN_LOCAL_ROOT
rm -rf "$SHM_ROOT"

# ---- g, h. a rank that dies at start-up -------------------------------------------------------
# crashy NAME N: a stand-in for ftrain whose rank 1 dies by SIGSEGV before
# ftrain starts, in the first N launches of job NAME; it runs ftrain
# otherwise.  Prints its path.
crashy() {
	local f=$W/crashy-$1
	cat >"$f" <<-EOF
	#!/bin/sh
	n=\$(cat "$f.count" 2>/dev/null || echo 0)
	if [ "\${SLURM_PROCID:-}" = 1 ] && [ "\$n" -lt $2 ]; then
	    echo \$((n + 1)) >"$f.count"
	    kill -SEGV \$\$
	fi
	exec "$bdir/ftrain" "\$@"
	EOF
	chmod +x "$f"
	printf '%s\n' "$f"
}
# g. Once: its node is kept for one more try, and the job ends on all 3.
FTRAIN=$(crashy once 1) submit startup-once 3
finished_exactly "rank 1 died at start-up once"
node=$(sed -n 's/.*failure at step start-up: a rank died: \([^:]*\): task 1: Segmentation fault.*/\1/p' "$out" | head -n 1)
[ -n "$node" ] && grep -Eq "train\.sbatch.*node $node kept for one more try" "$out"
ok $? "  the script names the node (${node:-none}) and keeps it for one more try" || why "$(grep 'train\.sbatch' "$out")"
grep -Eq 'train\.sbatch.*relaunch 1 of at most 3 on 3 node' "$out" && ! grep -q 'left out: ' "$out" &&
	grep -Eq '^world: 3 ranks' "$out"
ok $? "  relaunched on all 3 nodes, 3 ranks" || why "$(grep -E 'train\.sbatch|^world: [0-9]' "$out")"
# h. Twice on the same node: left out then, and the job ends on the other 2.
FTRAIN=$(crashy twice 2) submit startup-twice 3
finished_exactly "rank 1 died at start-up twice on its node"
node=$(sed -n 's/.*failure at step start-up: a rank died: \([^:]*\): task 1: Segmentation fault.*/\1/p' "$out" | head -n 1)
[ "$(grep -c 'train\.sbatch.*failure at step start-up: a rank died' "$out")" = 2 ] &&
	[ "$(grep -c "train\.sbatch.*node $node kept for one more try" "$out")" = 1 ] &&
	grep -Eq "train\.sbatch.*node $node left out: the failure points at it" "$out"
ok $? "  kept once, then left out after the second death there (${node:-none})" || why "$(grep 'train\.sbatch' "$out")"
grep -Eq 'train\.sbatch.*relaunch 2 of at most 3 on 2 node' "$out" && ! grep -q 'deterministic fault' "$out"
ok $? "  relaunched on the 2 other nodes, not taken for a deterministic fault" || why "$(grep 'train\.sbatch' "$out")"
# i. Once, with one relaunch allowed: no try to spare for it, so the node is
# left out at once (a bad node must still get the relaunch without it).
FTRAIN=$(crashy one-relaunch 1) FTRAIN_MAX_RELAUNCHES=1 submit startup-one-relaunch 3
finished_exactly "rank 1 died at start-up, FTRAIN_MAX_RELAUNCHES=1"
! grep -q 'kept for one more try' "$out" && grep -Eq 'train\.sbatch.*node n[0-9]+ left out: the failure points at it' "$out" &&
	grep -Eq 'train\.sbatch.*relaunch 1 of at most 1 on 2 node' "$out"
ok $? "  one relaunch allowed: the node is left out at once, relaunch on 2 nodes" || why "$(grep 'train\.sbatch' "$out")"
done_testing

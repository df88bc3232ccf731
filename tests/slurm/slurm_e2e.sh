#!/bin/bash
# slurm_e2e.sh: end-to-end test of ftrain under a real SLURM (TAP).
#
# Starts the one-machine test cluster (tests/slurm/lab/lab-up.sh), then:
#   1. submits slurm/train.sbatch on -N 2 with --time=3 and
#      --signal=B:USR1@120, running a slowed-down ftrain (--step-delay-ms)
#      that would take longer than the time limit, so SLURM's own warning
#      signal comes first (60 to 90 s after the start: SLURM checks every
#      30 s), with a minute of slack before the limit;
#   2. checks that the batch shell forwarded USR1, that ftrain stopped on it,
#      committed a checkpoint (ckptctl verify) and exited 75, and that the job
#      requeued itself;
#   3. checks that the requeued run has SLURM_RESTART_COUNT=1 and resumed
#      (world 2 -> 2); it stops that run with USR1 to the batch shell, and
#      since FTRAIN_MAX_RESTARTS=1 the job then ends without a requeue;
#   4. resubmits by hand on -N 3 with the same RUN_DIR: it must resume with
#      world 2 -> 3 and finish (exit 0), with the same parameter hash as an
#      uninterrupted one-rank run (--deterministic); the deputies of both
#      jobs (docs/supervisor.md) never act on these healthy runs.  Should a rank die at
#      start-up there (the batch script then tries its node once more), the
#      crash and its stack are shown.
# The jobs run in the work directory with no core size limit: a rank that
# crashes leaves a core there, and a failing test shows its stack (gdb).
# The cluster is stopped at the end if this test started it.  Takes about
# 1.5 to 2 minutes.
#
# Needs root and the slurmd, slurmctld, slurm-client and munge packages;
# otherwise it skips.  Environment: BUILD (build), FTRAIN_SLURM_LAB (the
# cluster's state directory), SLURM_E2E_PROGRAM=probe to run the MPI stand-in
# tests/tools/sigprobe.c (compiled here with mpicc) instead of ftrain, to
# test the SLURM plumbing alone.
#
# TAP comes from tests/lib.sh; the OMPI_* environment is left as it is (the
# jobs' ranks span fake nodes, not lib.sh's one machine).
set -u

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck disable=SC2034 # read by lib.sh
LIB_KEEP_MPI_ENV=1
# shellcheck disable=SC1091
. "$here/../lib.sh"
case $BUILD in /*) bdir=$BUILD ;; *) bdir=$root/$BUILD ;; esac
# slurm/train.sbatch execs ftrain-supervise: this tree's.
export FTRAIN_SUPERVISE=$bdir/ftrain-supervise
program=${SLURM_E2E_PROGRAM:-ftrain}
export FTRAIN_SLURM_LAB=${FTRAIN_SLURM_LAB:-/tmp/ftrain-slurm-lab}
LAB=$FTRAIN_SLURM_LAB
STEPS=1500

[ "$(id -u)" = 0 ] || skip_all "needs root to run slurmctld and slurmd"
for c in slurmctld slurmd sbatch srun scontrol scancel squeue munge flock; do
	command -v "$c" >/dev/null 2>&1 || skip_all "'$c' not found (apt-get install slurmd slurmctld slurm-client munge)"
done
case $program in
ftrain)
	prog=$bdir/ftrain
	[ -x "$prog" ] || skip_all "$prog not built"
	help=$("$prog" --help 2>&1)
	for o in --run-dir --step-delay-ms --stop-signal --deterministic; do
		case $help in *"$o"*) ;; *) skip_all "$prog --help does not list $o" ;; esac
	done
	[ -x "$bdir/ckptctl" ] || skip_all "$bdir/ckptctl not built"
	;;
probe)
	command -v mpicc >/dev/null 2>&1 || skip_all "mpicc not found"
	prog=$bdir/tests/slurm/sigprobe-mpi
	mkdir -p "$(dirname "$prog")"
	mpicc -std=c11 -D_GNU_SOURCE -O2 -DUSE_MPI "$root/tests/tools/sigprobe.c" -o "$prog" ||
		{ echo "Bail out! mpicc failed on tests/tools/sigprobe.c"; exit 1; }
	;;
*) echo "Bail out! SLURM_E2E_PROGRAM must be ftrain or probe"; exit 1 ;;
esac

# One test cluster per machine: serialise concurrent runs of this test.
exec 9>"$LAB.lock"
flock -w 900 9 || { echo "Bail out! another slurm_e2e holds $LAB.lock"; exit 1; }

# show_logs: the jobs' output and the cluster's log tails, on stderr.
show_logs() {
	why "--- job A output (last 60 lines) ---" "$(tail -n 60 "${out_a:-/dev/null}" 2>/dev/null)"
	[ -n "${out_b:-}" ] && why "--- job B output (last 60 lines) ---" "$(tail -n 60 "$out_b" 2>/dev/null)"
	why "--- slurmctld.log (last 15 lines) ---" "$(tail -n 15 "$LAB/log/slurmctld.log" 2>/dev/null)"
	show_cores
}
# show_cores: a stack trace from each core file the jobs left in $W (their
# working directory; the test raises the core size limit, which sbatch and
# srun pass on), when gdb is there.
show_cores() {
	local c
	for c in "$W"/core*; do
		[ -f "$c" ] || continue
		if command -v gdb >/dev/null 2>&1; then
			# shellcheck disable=SC2016 # $sp is gdb's
			why "--- stack of $(basename "$c") ---" \
				"$(gdb -batch -nx -ex 'bt 20' -ex 'x/4a $sp' "$prog" "$c" 2>&1 | grep -vE '^\[|^$|^warning' | tail -n 30)"
		else
			why "a core file $c was left (no gdb to show its stack)"
		fi
	done
}
# bail REASON: stop here (later steps depend on this one), showing the logs.
bail() {
	show_logs
	echo "Bail out! $*"
	exit 1
}
t0=$(date +%s)
elapsed() { echo $(($(date +%s) - t0)); }

# job_field JOBID FIELD: a field of `scontrol show job` (empty once it is gone).
job_field() { scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n1; }
# wait_state JOBID REGEX SECONDS: poll until JobState matches.
wait_state() {
	local end=$(($(date +%s) + $3))
	while [ "$(date +%s)" -le "$end" ]; do
		[[ "$(job_field "$1" JobState)" =~ ^($2)$ ]] && return 0
		sleep 0.5
	done
	return 1
}

was_up=0
lab_down=0
[ -n "$(cat "$LAB/run/slurmctld.pid" 2>/dev/null)" ] && [ "$(cat "/proc/$(cat "$LAB/run/slurmctld.pid")/comm" 2>/dev/null)" = slurmctld ] && was_up=1
W=$(mktemp -d /tmp/ftrain-e2e.XXXXXX)
chmod 755 "$W"
cleanup() {
	if [ "$was_up" = 1 ]; then
		# Not our cluster to stop: cancel only our jobs.
		for j in ${job_a:-} ${job_b:-}; do SLURM_CONF=$LAB/etc/slurm.conf scancel "$j" 2>/dev/null; done
	elif [ "$lab_down" = 0 ]; then
		"$here/lab/lab-down.sh" >/dev/null 2>&1
	fi
	if all_passed; then rm -rf "$W"; else echo "# kept $W and $LAB/log for inspection"; fi
}
# After lib.sh's own cleanup has stopped the test's background processes.
at_exit cleanup

plan 19
diag "program: $prog; work dir $W; cluster state $LAB"

FTRAIN_SLURM_CLEAN=1 "$here/lab/lab-up.sh" >"$W/lab-up.log" 2>&1 9>&-
rc=$?
ok $rc "test cluster is up (4 idle fake nodes)"
if [ $rc != 0 ]; then
	why "$(cat "$W/lab-up.log")"
	echo "Bail out! the SLURM test cluster did not start"
	exit 1
fi
# shellcheck disable=SC1091
. "$LAB/env"

run=$W/run
export FTRAIN=$prog RUN_DIR=$run FTRAIN_TASKS_PER_NODE=1 FTRAIN_MAX_RESTARTS=1
export FTRAIN_ARGS="--data sine --steps $STEPS --global-batch 48 --seed 7 --deterministic --log-every 1000"
out_a=$W/job-a.out

# --- 1. SLURM's own USR1 stops the run; the job requeues itself. ---
# A rank that crashes leaves a core in $W (the jobs' working directory).
ulimit -c unlimited 2>/dev/null || ulimit -c "$(ulimit -Hc)" 2>/dev/null
job_a=$(sbatch --parsable --chdir="$W" -N 2 --time=3 --signal=B:USR1@120 -o "$out_a" -J e2e-a \
	"$root/slurm/train.sbatch" --step-delay-ms 150 2>"$W/sbatch-a.err")
ok $? "sbatch -N 2 --time=3 --signal=B:USR1@120 slurm/train.sbatch (job ${job_a:-none})"
[ -n "$job_a" ] || bail "sbatch failed: $(cat "$W/sbatch-a.err")"

# The ranks must be training before SLURM's warning comes (60 s after the
# start): a failure here is a launch problem, not a signal problem.
if [ "$program" = ftrain ]; then start_re='^train: '; else start_re='sigprobe: rank 0/2 .* start at step'; fi
wait_line "$out_a" "$start_re" 55
ok $? "the ranks started (2 ranks, $(elapsed) s)" || why "job A has not started training: $(tail -n 5 "$out_a" 2>/dev/null)"

wait_line "$out_a" 'train\.sbatch.*got USR1: forwarded USR1 to srun' 110
ok $? "batch shell got USR1 from SLURM and forwarded it to srun ($(elapsed) s)" || bail "no USR1 forwarded"

if [ "$program" = ftrain ]; then stop_re='^stop: signal USR1'; else stop_re='got SIGUSR1'; fi
wait_line "$out_a" 'train\.sbatch.*ftrain exited with status' 60
ok $? "the ftrain step ended ($(elapsed) s)" || bail "the ftrain step did not end"
grep -Eq -- "$stop_re" "$out_a"
ok $? "the ftrain ranks stopped on USR1"
first_exit=$(grep -E 'train\.sbatch.*ftrain exited with status' "$out_a" | head -n1)
case $first_exit in *"status 75 (after USR1)"*) r=0 ;; *) r=1 ;; esac
# The status seen goes into the test's name: a CI log shows "not ok" lines.
ok $r "ftrain exited 75 after USR1 (saw: ${first_exit#*ftrain exited with })" ||
	why "ranks' messages:" "$(grep -vE 'train\.sbatch|^(epoch|eval):' "$out_a" | tail -n 15)"

if [ "$program" = ftrain ]; then
	stop_step=$(sed -n 's/^stop: signal USR1.* at step \([0-9]*\).*/\1/p' "$out_a" | head -n1)
	step_dir=$run/ckpt/$(printf 'step-%08d' "${stop_step:-0}")
	"$bdir/ckptctl" verify "$step_dir" >"$W/verify.log" 2>&1
	r=$?
	ok $r "checkpoint of the stop step ${stop_step:-?} is committed and verifies"
	[ $r = 0 ] || why "$(cat "$W/verify.log")"
else
	ls "$run"/ckpt/step-*/manifest.json >/dev/null 2>&1
	ok $? "a checkpoint step-*/manifest.json was committed"
fi

grep -Eq "train\.sbatch.*requeue job $job_a \(restart 1 of at most 1\)" "$out_a"
ok $? "the batch script requeued job $job_a"

# --- 2. The requeued run resumes; a second stop hits the restart cap. ---
wait_line "$out_a" "train\.sbatch.*start: job $job_a restart 1/1 " 60
ok $? "the job ran again with SLURM_RESTART_COUNT=1 ($(elapsed) s)" || bail "job $job_a did not run again"
[ "$(job_field "$job_a" Restarts)" = 1 ]
ok $? "scontrol shows Restarts=1 for job $job_a"

second=$W/job-a.second
wait_line "$out_a" '^resume: .*world 2 -> 2' 60
sed -n "/start: job $job_a restart 1\/1 /,\$p" "$out_a" >"$second"
grep -Eq '^resume: .*world 2 -> 2' "$second"
ok $? "the requeued run printed resume: (world 2 -> 2)"

sleep 2
scancel --batch --signal=USR1 "$job_a"
wait_state "$job_a" 'FAILED|COMPLETED|CANCELLED|TIMEOUT|PENDING' 60
state=$(job_field "$job_a" JobState) code=$(job_field "$job_a" ExitCode)
grep -Eq 'restart cap reached \(1 of FTRAIN_MAX_RESTARTS=1\)' "$out_a" && [ "$state" = FAILED ] && [ "$code" = 75:0 ]
ok $? "second stop: exit 75, restart cap reached, no requeue (JobState=$state ExitCode=$code)"

# --- 3. A manual resubmission on 3 nodes resumes on the same run dir. ---
out_b=$W/job-b.out
job_b=$(sbatch --parsable --chdir="$W" -N 3 --time=5 -o "$out_b" -J e2e-b "$root/slurm/train.sbatch" 2>"$W/sbatch-b.err")
[ -n "$job_b" ] || why "$(cat "$W/sbatch-b.err")"
wait_state "$job_b" 'FAILED|COMPLETED|CANCELLED|TIMEOUT' 180
state=$(job_field "$job_b" JobState) code=$(job_field "$job_b" ExitCode)
# A rank that dies at start-up is tried once more on its node (the batch
# script's rule; tests/slurm/slurm_relaunch.sh tests it), so the job can still
# resume on 3 nodes; the crash is shown in full all the same, with the
# stack from its core.
if grep -Eq 'train\.sbatch.*failure at step start-up' "$out_b"; then
	why "job $job_b: a rank died at start-up; its launch:" \
		"$(sed -n '/launch: /,/failure at step start-up/{p;/failure at step start-up/q}' "$out_b" | head -n 30)"
	show_cores
fi
grep -Eq '^resume: .*world 2 -> 3' "$out_b"
ok $? "sbatch -N 3 on the same RUN_DIR resumed with world 2 -> 3"
[ "$state" = COMPLETED ] && [ "$code" = 0:0 ] && grep -q 'train\.sbatch.*done: training finished' "$out_b"
ok $? "the resumed job finished (JobState=$state ExitCode=$code)"
done_line=$(grep -E "^done: step=$STEPS " "$out_b" | tail -n1)
[ -n "$done_line" ]
ok $? "ftrain printed done: step=$STEPS"
# Healthy runs are left alone: a deputy watched each job (both have more
# than one node) through the stops, the requeue and the resize, acted in
# none, and left job B at its end.
grep -q 'train\.sbatch.*deputy: started on ' "$out_a" && grep -Eq 'train\.sbatch.*deputy on n[0-9]+ left \(status 0\)' "$out_b" &&
	! grep -Eq 'deputy on .*: the batch host .* is lost' "$out_a" "$out_b"
ok $? "the deputies watched both jobs and never acted; job B's left at its end" || why "$(grep -h deputy "$out_a" "$out_b")"

if [ "$program" = ftrain ]; then
	# shellcheck disable=SC2086
	ref=$(srun -N 1 -n 1 --mpi=pmix "$prog" $FTRAIN_ARGS --quiet 2>"$W/ref.err" | grep -E '^done: ' | tail -n1)
	got_hash=${done_line##*param_hash=} ref_hash=${ref##*param_hash=}
	[ -n "$ref" ] && [ "${got_hash%% *}" = "${ref_hash%% *}" ]
	ok $? "stopped, requeued and resized run matches an uninterrupted 1-rank run (param_hash ${got_hash%% *})"
	[ -n "$ref" ] || why "reference run: $(cat "$W/ref.err")"
else
	skip "parameter hash" "the probe has no parameters"
fi

all_passed || show_logs

# --- 4. The cluster goes away again. ---
if [ "$was_up" = 0 ]; then
	pids=$(cat "$LAB"/run/slurmctld.pid "$LAB"/run/slurmd-*.pid 2>/dev/null)
	"$here/lab/lab-down.sh" >"$W/lab-down.log" 2>&1 9>&-
	lab_down=1
	r=0
	for p in $pids; do
		# Still there and not a zombie: not stopped.  (A daemon that ends
		# between the two reads is stopped: its status file is gone.)
		case $(cat "/proc/$p/comm" 2>/dev/null) in
		slurmctld | slurmd)
			st=$(grep '^State:' "/proc/$p/status" 2>/dev/null) || st="gone"
			case $st in gone | *Z*) ;; *) r=1 ;; esac
			;;
		esac
	done
	ok $r "lab-down.sh stopped the cluster's daemons"
else
	skip "lab-down.sh stopped the cluster's daemons" "the cluster was already up before this test, left running"
fi
diag "total $(elapsed) s"
done_testing

#!/bin/bash
# sbatch_relaunch_stub.sh - slurm/train.sbatch's relaunch, requeue and
# clean-up decisions, with srun, mpirun, scontrol and squeue replaced by
# stubs on PATH (no SLURM needed, a few seconds a case; tests/slurm/slurm_relaunch.sh
# runs the same paths on a real cluster) (TAP):
#
#   1. the node-local tier is FTRAIN_LOCAL_ROOT/ftrain-job-<job id>/<node>,
#      and only ftrain-job-<job id> is removed: what else is in the root
#      stays;
#   2. heartbeats are read in ftrain's own format ("ftrain-heartbeat 2
#      token T ..."): an earlier launch's or job's do not count for a launch
#      that fails at start-up;
#   3. a relaunch keeps the first launch's ranks per node (sbatch -n 8 on 4
#      nodes: 2), under srun and under mpirun;
#   4. the tier is removed at the restart cap, after TERM then exit 75, on
#      nodes left out or drained but still held; nodes it cannot be removed
#      from, and a controller that does not answer, are said in the log;
#   5. a task that exited with a status of its own before any rank was
#      killed is the user's failure: not relaunched, no node blamed;
#   6. one query for the nodes' states per decision, bounded by
#      FTRAIN_SLURM_TIMEOUT, whatever the node count;
#   7. the first forward waits until the launcher is 2 s old, to the
#      millisecond; a launcher the forwarded stop signal killed is requeued;
#   8. a TERM or a stop warning while the script decides on a relaunch:
#      the failed launch's status is kept, nothing is "checkpointed", the
#      tier is removed;
#  16. a RUN_DIR that some nodes do not see (the probe step fails there):
#      refused, exit 2, naming them, before anything is launched; the
#      probe's files removed; a probe step that did not run: a warning; a
#      1-node job is not probed;
#  17. the deputy: started before the launch on the last node that is not
#      the batch host, watching it through a heartbeat file (version 1); at
#      the job's end the heartbeat says "ended" and the deputy leaves by
#      itself; FTRAIN_DEPUTY=0: none; its step ended (its node lost): a
#      warning, and the relaunch starts another on a node it keeps.
#
# SBATCH_SCRIPT=FILE runs the cases against another copy of the script.
. "$(dirname "$0")/../lib.sh"
SCRIPT=${SBATCH_SCRIPT:-$(cd "$(dirname "$0")/../.." && pwd)/slurm/train.sbatch}
# The script execs ftrain-supervise: this tree's unless FTRAIN_SUPERVISE says.
case $BUILD in /*) sup=$BUILD ;; *) sup=$(cd "$(dirname "$0")/../.." && pwd)/$BUILD ;; esac
export FTRAIN_SUPERVISE=${FTRAIN_SUPERVISE:-$sup/ftrain-supervise}
[ -x "$FTRAIN_SUPERVISE" ] || { echo "Bail out! $FTRAIN_SUPERVISE is not built (make)"; exit 1; }
B=$T/bin
mkdir -p "$B"
export T
# A FIFO no one writes: `read -t SEC <>"$T/tick"` waits SEC seconds without
# starting a process (a sleep each time was most of this file's CPU).
mkfifo "$T/tick" || { echo "Bail out! mkfifo $T/tick"; exit 1; }

# srun stub (also mpirun's): records its arguments.  The node-local tier's
# removal (rm -rf -- DIR) is done for real when DIR is under $T.  Launch N
# of a case records its start ($ST/started.N) and the batch shell's pid,
# then runs $ST/launch.N, a snippet that may write srun's messages, make
# the tier (mk_tier NODES), change the nodes' states and exit; without one,
# or when it does not exit, it waits 10 s and exits 0.  The stop signals
# make it exit 75 as ftrain does after a checkpoint.
cat >"$B/srun" <<'EOF'
#!/bin/bash
echo "${0##*/} $*" >>"$LOG"
# tick SEC: wait SEC seconds on $T/tick (a sleep if it cannot be opened:
# the test ended and removed $T while this stub still runs).
tick() { read -rt "$1" _ 2>/dev/null <>"$T/tick"; [ $? -gt 128 ] || sleep "$1"; }
case " $* " in
*" --job-name=ftrain-probe "*)
	# The RUN_DIR probe (sh -c SCRIPT TOKEN): the script once per node of
	# $ST/nodelist, as that node; a node in STUB_PROBE_MISS (n2,n3) does
	# not see RUN_DIR.
	args=("$@") st=0
	for i in "${!args[@]}"; do [ "${args[$i]}" = -c ] && break; done
	nodes=$(<"$ST/nodelist")
	for n in ${nodes//,/ }; do
		case ",${STUB_PROBE_MISS:-}," in *",$n,"*) st=1; continue ;; esac
		SLURMD_NODENAME=$n sh -c "${args[$((i + 1))]}" "${args[$((i + 2))]}" || st=1
	done
	exit $st ;;
*" --job-name=ftrain-deputy "*)
	# The deputy step: the deputy runs here as the node of --nodelist, and
	# ends with the batch shell, as a job's steps end with the job.
	args=("$@") node=""
	for i in "${!args[@]}"; do
		case ${args[$i]} in --nodelist=*) node=${args[$i]#--nodelist=} ;; --deputy) break ;; esac
	done
	SLURMD_NODENAME=$node "${args[@]:$((i - 1))}" &
	d=$! sh=$PPID
	echo $$ >"$ST/deputy.pid"
	trap 'kill -TERM $d 2>/dev/null' TERM
	(while kill -0 "$sh" 2>/dev/null; do tick 0.5; done; kill -TERM "$d" 2>/dev/null) &
	w=$!
	wait "$d"
	st=$?
	while kill -0 "$d" 2>/dev/null; do wait "$d"; st=$?; done
	kill "$w" 2>/dev/null
	exit $st ;;
esac
case " $* " in *" rm -rf -- "*)
	[ -n "${SRUN_RM_FAIL:-}" ] && exit 1 # no step runs: after a TERM
	d=${!#}
	case $d in "$T"/*) rm -rf -- "$d" ;; esac
	exit 0 ;;
esac
# As mpirun: Open MPI's SLURM allocator (ras/slurm) needs SLURM_NODELIST
# and SLURM_TASKS_PER_NODE in a job, and refuses to start without them.
if [ "${0##*/}" = mpirun ] && [ -n "${SLURM_JOB_ID:-}" ]; then
	echo "mpirun env: SLURM_NODELIST=${SLURM_NODELIST-unset} SLURM_TASKS_PER_NODE=${SLURM_TASKS_PER_NODE-unset}" >>"$LOG"
	if [ -z "${SLURM_NODELIST:-}" ] || [ -z "${SLURM_TASKS_PER_NODE:-}" ]; then
		echo "the SLURM resource allocator expects to find SLURM_NODELIST and SLURM_TASKS_PER_NODE" >&2
		exit 1
	fi
fi
echo "$EPOCHREALTIME" >"$ST/started.tmp"
n=0
[ -f "$ST/count" ] && n=$(<"$ST/count")
n=$((n + 1))
echo "$n" >"$ST/count"
echo "$PPID" >"$ST/shell.pid"
mv "$ST/started.tmp" "$ST/started.$n"
ckpt_local="" prev=""
for a in "$@"; do [ "$prev" = --ckpt-local ] && ckpt_local=$a; prev=$a; done
mk_tier() { # mk_tier n1,n2: each node's local directory, with a file
	local n
	for n in ${1//,/ }; do mkdir -p "${ckpt_local//%n/$n}" && echo shard >"${ckpt_local//%n/$n}/shard"; done
}
trap 'echo "launcher got USR1" >>"$LOG"; exit 75' USR1
trap 'echo "launcher got USR2" >>"$LOG"; exit 75' USR2
[ -f "$ST/launch.$n" ] && . "$ST/launch.$n"
for _ in {1..100}; do tick 0.1; done
exit 0
EOF
# scontrol stub: the job's NodeList is $ST/nodelist, a node's state
# $ST/state.NODE (ALLOCATED); `show node` takes SCONTROL_SLEEP seconds;
# while $ST/noanswer exists every `show` fails, as with a controller that
# does not answer.  A requeue TERMs the batch shell, as a real one does.
cat >"$B/scontrol" <<'EOF'
#!/bin/bash
echo "scontrol $*" >>"$LOG"
[ "$1" = show ] && [ -e "$ST/noanswer" ] && exit 1
case "$1 ${2:-}" in
"show job")
	# STUB_ARRAY="A T": this job is task T of array A.
	set -- ${STUB_ARRAY:-}
	echo "JobId=$SLURM_JOB_ID ${1:+ArrayJobId=$1 ArrayTaskId=$2 }JobName=ftrain"
	echo "   NodeList=$(<"$ST/nodelist") BatchHost=n1" ;;
"show hostnames") printf '%s\n' ${3//,/ } ;;
"show node")
	[ -n "${SCONTROL_SLEEP:-}" ] && sleep "$SCONTROL_SLEEP" </dev/null >/dev/null 2>&1
	list=${!#}
	for n in ${list//,/ }; do
		state=ALLOCATED
		[ -f "$ST/state.$n" ] && state=$(<"$ST/state.$n")
		echo "NodeName=$n Arch=x86_64 State=$state Partitions=main"
	done ;;
"requeue "*) [ -n "${SCONTROL_FAIL:-}" ] && exit 1; kill -TERM "$PPID" ;;
esac
exit 0
EOF
cat >"$B/squeue" <<'EOF'
#!/bin/bash
echo "squeue $*" >>"$LOG"
case " $* " in *" %l "*) echo "${SQUEUE_LIM:-1:00:00}" ;; *) echo "${SQUEUE_L:-50:00}" ;; esac
EOF
# mkdir stub: with ALIGN_DIR, creating that directory (the script's RUN_DIR)
# first waits for the wall clock's next x.80 s, so the launch that follows
# starts late in a second.
cat >"$B/mkdir" <<'EOF'
#!/bin/bash
if [ -n "${ALIGN_DIR:-}" ] && [ "${!#}" = "$ALIGN_DIR" ]; then
	while :; do
		f=${EPOCHREALTIME#*[.,]}
		[ "${f:0:2}" = 80 ] && break
		sleep 0.005
	done
fi
exec /bin/mkdir "$@"
EOF
cp "$B/srun" "$B/mpirun"
chmod +x "$B"/*
printf '#!/bin/sh\nexit 0\n' >"$T/ftrain"
chmod +x "$T/ftrain"

# case_dir NAME: make $T/st-NAME the current case ($ST, with nodes n1,n2,n3
# unless $ST/nodelist says otherwise) and its stub log ($LOG).
case_dir() {
	ST=$T/st-$1 LOG=$T/st-$1/stub.log
	export ST LOG
	mkdir -p "$ST"
	[ -f "$ST/nodelist" ] || echo n1,n2,n3 >"$ST/nodelist"
	: >"$LOG"
}
# start VAR=VALUE...: run the batch script for the current case in the
# background (at most LIMIT s, 60), output in $ST/out; sets SPID.  The
# batch host is the first node.
start() {
	local n nl nodes
	nl=$(<"$ST/nodelist")
	IFS=, read -ra nodes <<<"$nl"
	n=${#nodes[@]}
	env PATH="$B:$PATH" SLURM_JOB_ID=4242 SLURM_SUBMIT_DIR="$T" FTRAIN="$T/ftrain" \
		SLURMD_NODENAME="${nodes[0]}" \
		SLURM_JOB_NODELIST="$nl" SLURM_NODELIST="$nl" \
		SLURM_JOB_NUM_NODES="$n" SLURM_NNODES="$n" SLURM_TASKS_PER_NODE="1(x$n)" \
		RUN_DIR="$ST/run" "$@" timeout -k 5 "${LIMIT:-60}" bash "$SCRIPT" --data line ${ARGS:-} >"$ST/out" 2>&1 &
	SPID=$!
}
# finish: wait for it; sets rc, t (whole seconds it took) and, after run,
# tr (the same to a hundredth of a second).
finish() {
	wait "$SPID"
	rc=$?
	t=$((EPOCHSECONDS - t0))
	local cs=$(((${EPOCHREALTIME/[.,]/} - ${t0r:-0}) / 10000))
	printf -v tr '%d.%02d' $((cs / 100)) $((cs % 100))
}
# t0 (whole seconds) and t0r (microseconds) of a case's start.
t0r=0
# run_case NAME VAR=VALUE...: the case NAME to its end (lib.sh's run is another thing).
run_case() {
	case_dir "$1"
	shift
	t0=$EPOCHSECONDS t0r=${EPOCHREALTIME/[.,]/}
	start "$@"
	finish
}
launches() { grep -c '^\(srun\|mpirun\) .*--data line' "$LOG"; }
launch_line() { grep '^\(srun\|mpirun\) .*--data line' "$LOG" | sed -n "${1}p"; }
rm_step() { grep -- ' rm -rf -- ' "$LOG"; }
says() { grep -Eq "$1" "$ST/out"; }
show() { why "exit $rc after $t s" "$(grep -v '^ *$' "$ST/out" | tail -n 15)" "$(grep -v '^scontrol show hostnames' "$LOG" | tail -n 12)"; }
# tier_gone: the tier's files (mk_tier) are all gone, $ST/shm itself kept.
tier_gone() { [ -d "$ST/shm" ] && [ -z "$(find "$ST/shm" -name shard)" ]; }
# Snippets for launch.N.
killed() { echo "echo 'srun: error: $1: task ${2:-1}: Killed' >&2; exit 137"; }
queries() { grep -E '^(scontrol (show job|requeue|update)|squeue) ' "$LOG"; }

# The cases run side by side, at most POOL_MAX at a time (each has its own
# $T/st-NAME: snippets, stub log, nodes' states), started in the order of
# this file by pool, in the background; the checks read each case's
# outcome in that order (join).  The cases whose checks depend on the
# script's own timing (6, 7, 15, and the deputy's loss in 17) run in this
# shell, one at a time as before, once the pool has ended.
POOL_MAX=${POOL_MAX:-4}
# bg_case NAME VAR=VALUE...: run_case in the background, its outcome
# ("rc t tr") in $ST/result; first waits while POOL_MAX cases run.
bg_case() {
	local running
	while mapfile -t running < <(jobs -rp) && [ "${#running[@]}" -ge "$POOL_MAX" ]; do wait -n; done
	case_dir "$1"
	shift
	(
		t0=$EPOCHSECONDS t0r=${EPOCHREALTIME/[.,]/}
		start "$@"
		finish
		echo "$rc $t $tr" >"$ST/result.tmp" && mv "$ST/result.tmp" "$ST/result"
	) &
}
# join NAME: wait for case NAME of the pool; sets ST, LOG, rc, t and tr as
# run_case does (rc 255 when the pool ended without its outcome).
join() {
	ST=$T/st-$1 LOG=$T/st-$1/stub.log
	export ST LOG
	while [ ! -f "$ST/result" ] && kill -0 "$POOL_PID" 2>/dev/null; do read -rt 0.1 _ <>"$T/tick"; done
	read -r rc t tr <"$ST/result" 2>/dev/null || { rc=255 t=0 tr=0; }
}
# Section 10's cases (the pool starts them, the checks read them).
PER_CASES=("srun --nodelist=n1,n3 --ntasks-per-node=1 " "mpirun --host n1:2,n3:2 --map-by ppr:2:node "
	"srun --nodelist=n1,n3 --ntasks-per-node=3 SLURM_NTASKS_PER_NODE=3 SLURM_NTASKS=9")
# pool: the setup of each case that runs in the pool, and its start; the
# sections' numbers are those of the checks below.  A case with no
# launch.1 snippet that is launched gets 'exit 0' (the stub's default
# waits 10 s, which no check of theirs needs).
pool() {
# 1.
case_dir root
mkdir -p "$ST/ssd/me/datasets"
echo data >"$ST/ssd/me/datasets/imagenet.tar"
echo 'mk_tier n1,n2,n3; exit 0' >"$ST/launch.1"
bg_case root FTRAIN_ARGS="--ckpt-local-every 100" FTRAIN_LOCAL_ROOT="$ST/ssd/me"
# 2.
case_dir hb
cat >"$ST/launch.1" <<'EOF'
mkdir -p "$ST/run/heartbeat"
for r in 0 1 2; do
	echo "ftrain-heartbeat 2 token 00000000000000aa rank $r pid 10$r seq 9 phase 6 step 12 idle 0.000 host n$((r + 1))" >"$ST/run/heartbeat/rank-$r"
done
echo "srun: error: n2: task 1: Killed" >&2; exit 137
EOF
killed n3 2 >"$ST/launch.2"
echo 'exit 0' >"$ST/launch.3"
bg_case hb
case_dir hb-job
mkdir -p "$ST/run/heartbeat"
echo "ftrain-heartbeat 2 token 00000000000000bb rank 0 pid 7 seq 3 phase 4 step 30 idle 0.000 host n1" >"$ST/run/heartbeat/rank-0"
killed n2 >"$ST/launch.1"
echo 'exit 0' >"$ST/launch.2"
bg_case hb-job
# 3.
for l in srun mpirun; do
	case_dir "tpn-$l"
	echo n1,n2,n3,n4 >"$ST/nodelist"
	echo 'echo "srun: error: Node failure on n4" >&2; echo DOWN >"$ST/state.n4"; echo n1,n2,n3 >"$ST/nodelist"; exit 1' >"$ST/launch.1"
	echo 'exit 0' >"$ST/launch.2"
	bg_case "tpn-$l" FTRAIN_LAUNCH=$l SLURM_NTASKS=8 SLURM_NPROCS=8 SLURM_TASKS_PER_NODE='2(x4)'
done
# 4.
case_dir cap
echo 'mk_tier n1,n2,n3; exit 75' >"$ST/launch.1"
bg_case cap SLURM_RESTART_COUNT=20 FTRAIN_ARGS="--ckpt-local-every 2" FTRAIN_LOCAL_ROOT="$ST/shm"
case_dir term
echo 'mk_tier n1,n2,n3; kill -TERM $PPID; sleep 0.5; exit 75' >"$ST/launch.1"
bg_case term FTRAIN_ARGS="--ckpt-local-every 2" FTRAIN_LOCAL_ROOT="$ST/shm"
case_dir held
{ echo 'mk_tier n1,n2,n3; echo ALLOCATED+DRAIN >"$ST/state.n3"'; killed n2; } >"$ST/launch.1"
echo 'exit 0' >"$ST/launch.2"
bg_case held FTRAIN_MAX_RELAUNCHES=1 FTRAIN_ARGS="--ckpt-local-every 2" FTRAIN_LOCAL_ROOT="$ST/shm"
case_dir down
echo 'mk_tier n1,n2,n3; echo DOWN >"$ST/state.n3"; exit 0' >"$ST/launch.1"
bg_case down FTRAIN_ARGS="--ckpt-local-every 2" FTRAIN_LOCAL_ROOT="$ST/shm"
case_dir noanswer
echo 'mk_tier n1,n2,n3; touch "$ST/noanswer"; exit 0' >"$ST/launch.1"
bg_case noanswer FTRAIN_ARGS="--ckpt-local-every 2" FTRAIN_LOCAL_ROOT="$ST/shm"
# 5.
case_dir user
for i in 1 2 3 4; do
	printf '%s\n' 'echo "ftrain: data: cannot open /data/missing.bin" >&2' \
		'echo "srun: error: n2: task 1: Exited with exit code 1" >&2' \
		'echo "srun: error: n1: task 0: Killed" >&2' 'exit 1' >"$ST/launch.$i"
done
bg_case user
case_dir killed-first
{ echo 'echo "srun: error: n2: task 1: Killed" >&2'; echo 'echo "srun: error: n1: task 0: Exited with exit code 1" >&2'; echo 'exit 137'; } >"$ST/launch.1"
echo 'exit 0' >"$ST/launch.2"
bg_case killed-first
# 8. The signal comes 1 s after the launch failed, while the decision's
# node query takes 3 s (SCONTROL_SLEEP): a slow machine only delays the
# signal further into the query.
case_dir termrl
{ echo 'mk_tier n1,n2,n3; bs=$PPID; (sleep 1; kill -TERM $bs) &'; killed n2; } >"$ST/launch.1"
bg_case termrl SCONTROL_SLEEP=3 FTRAIN_ARGS="--ckpt-local-every 2" FTRAIN_LOCAL_ROOT="$ST/shm"
case_dir usr1rl
{ echo 'mk_tier n1,n2,n3; bs=$PPID; (sleep 1; kill -USR1 $bs) &'; killed n2; } >"$ST/launch.1"
bg_case usr1rl SCONTROL_SLEEP=3 SLURM_RESTART_COUNT=20 FTRAIN_ARGS="--ckpt-local-every 2" FTRAIN_LOCAL_ROOT="$ST/shm"
case_dir usr1rq
{ echo 'bs=$PPID; (sleep 1; kill -USR1 $bs) &'; killed n2; } >"$ST/launch.1"
bg_case usr1rq SCONTROL_SLEEP=3
# 10.
for c in "${PER_CASES[@]}"; do
	l=${c%% *} extra=""
	case $c in *SLURM*) extra=${c##* --ntasks-per-node=3 } ;; esac
	case_dir "per-$l-${extra:+given}"
	echo 'echo "srun: error: Node failure on n2" >&2; echo DOWN >"$ST/state.n2"; exit 1' >"$ST/launch.1"
	echo 'exit 0' >"$ST/launch.2"
	# shellcheck disable=SC2086
	bg_case "per-$l-${extra:+given}" FTRAIN_LAUNCH="$l" SLURM_TASKS_PER_NODE='2(x3)' $extra
done
# 11.
case_dir srunkilled
echo 'exit 137' >"$ST/launch.1"
echo 'exit 0' >"$ST/launch.2"
bg_case srunkilled
case_dir noctl
for i in 1 2; do
	printf '%s\n' 'echo "srun: error: Unable to confirm allocation for job 4242: Socket timed out on send/recv operation" >&2' \
		'echo "srun: Check SLURM_JOB_ID environment variable. Expired or invalid job 4242" >&2' 'exit 1' >"$ST/launch.$i"
done
echo 'exit 0' >"$ST/launch.3"
bg_case noctl
# 12.
case_dir rdarg
cat >"$ST/launch.1" <<'EOF2'
mkdir -p "$ST/mine/heartbeat"
echo "ftrain-heartbeat 2 token 00000000000000cc rank 1 pid 9 seq 9 phase 6 step 12 idle 0.000 host n2" >"$ST/mine/heartbeat/rank-1"
echo "srun: error: n2: task 1: Killed" >&2; exit 137
EOF2
echo 'exit 0' >"$ST/launch.2"
ARGS="--run-dir $ST/mine" bg_case rdarg RUN_DIR=
case_dir rdeq
echo 'exit 0' >"$ST/launch.1"
bg_case rdeq FTRAIN_ARGS="--run-dir=$ST/run"
case_dir rdboth
bg_case rdboth FTRAIN_ARGS="--run-dir $ST/other"
case_dir pct
echo 'exit 0' >"$ST/launch.1"
bg_case pct RUN_DIR="$ST/r-%j-%x-%u-%%" SLURM_JOB_NAME=mnist SLURM_JOB_USER=ann
case_dir pcta
echo 'exit 0' >"$ST/launch.1"
bg_case pcta RUN_DIR="$ST/sw-%A_%a" SLURM_ARRAY_JOB_ID=4242 SLURM_ARRAY_TASK_ID=1
case_dir pctbad
bg_case pctbad RUN_DIR="$ST/r-%N"
# 13.
case_dir minnodes
echo n1,n2 >"$ST/nodelist"
killed n2 >"$ST/launch.1"
bg_case minnodes FTRAIN_MIN_NODES=3 FTRAIN_MAX_RELAUNCHES=1 FTRAIN_REQUEUE_EXCLUDE=1
case_dir shortleft
killed n2 >"$ST/launch.1"
bg_case shortleft SQUEUE_L=0:40 FTRAIN_MAX_RELAUNCHES=1 FTRAIN_REQUEUE_EXCLUDE=1
case_dir noexclude
killed n2 >"$ST/launch.1"
bg_case noexclude SQUEUE_L=0:40 FTRAIN_MAX_RELAUNCHES=1
# 14.
case_dir termnostep
echo 'mk_tier n1,n2,n3; kill -TERM $PPID; sleep 0.5; exit 75' >"$ST/launch.1"
bg_case termnostep SRUN_RM_FAIL=1 FTRAIN_ARGS="--ckpt-local-every 2" FTRAIN_LOCAL_ROOT="$ST/shm"
case_dir termfail
{ echo 'mk_tier n1,n2,n3; kill -TERM $PPID; sleep 0.5'; killed n2; } >"$ST/launch.1"
bg_case termfail SRUN_RM_FAIL=1 FTRAIN_ARGS="--ckpt-local-every 2" FTRAIN_LOCAL_ROOT="$ST/shm"
# 16.
case_dir notshared
bg_case notshared STUB_PROBE_MISS=n2,n3
case_dir probenorun
echo 'exit 0' >"$ST/launch.1"
bg_case probenorun STUB_PROBE_MISS=n1,n2,n3
case_dir onenode
echo n1 >"$ST/nodelist"
echo 'exit 0' >"$ST/launch.1"
bg_case onenode
# 17.
case_dir nodeputy
echo 'exit 0' >"$ST/launch.1"
bg_case nodeputy FTRAIN_DEPUTY=0
# 9.
arr_case() { # NAME VAR=VALUE...: the case, with the tier under $ST/shm
	local name=$1
	shift
	case_dir "$name"
	{ echo 'mk_tier n1,n2,n3'; killed n2; } >"$ST/launch.1"
	echo 'exit 75' >"$ST/launch.2"
	bg_case "$name" FTRAIN_ARGS="--ckpt-local-every 2" FTRAIN_LOCAL_ROOT="$ST/shm" "$@"
}
arr_case arr-own SLURM_ARRAY_JOB_ID=4242 SLURM_ARRAY_TASK_ID=1 STUB_ARRAY="4242 1"
arr_case arr-other SLURM_JOB_ID=4243 SLURM_ARRAY_JOB_ID=4242 SLURM_ARRAY_TASK_ID=0 STUB_ARRAY="4242 0"
# Its own submit directory, since its runs/4242 would be case rdarg's
# (12: no $T/runs/4242).
arr_case arr-inherited RUN_DIR= SLURM_SUBMIT_DIR="$T/st-arr-inherited" SLURM_ARRAY_JOB_ID=4000 SLURM_ARRAY_TASK_ID=3
wait
}
pool &
POOL_PID=$!
track_bg "$POOL_PID"

# ---- 1. only the job's directory is removed, never FTRAIN_LOCAL_ROOT ------------
join root
like "$(launch_line 1)" "--ckpt-local $ST/ssd/me/ftrain-job-4242/%n( |\$)" \
	"1. the tier is FTRAIN_LOCAL_ROOT/ftrain-job-<job id>/<node>" || show
ok "$([ "$rc" = 0 ] && [ -f "$ST/ssd/me/datasets/imagenet.tar" ] && [ -d "$ST/ssd/me" ] && [ ! -e "$ST/ssd/me/ftrain-job-4242" ]; echo $?)" \
	"  at the end ftrain-job-4242 is removed, the root and a dataset in it are kept (exit $rc)" || show
like "$(rm_step)" "^srun -N 3 --nodelist=n1,n2,n3 .* rm -rf -- $ST/ssd/me/ftrain-job-4242\$" \
	"  the removal step names that directory alone, on every node" || show

# ---- 2. heartbeats in ftrain's format ------------------------------------------------
join hb
ok "$(says 'failure at step 12: a rank died: n2' && says 'failure at step start-up: a rank died: n3'; echo $?)" \
	"2. a relaunch that dies at start-up fails at 'start-up', not at the launch before's step 12" || show
ok "$([ "$rc" = 0 ] && says 'node n3 kept for one more try' && ! says 'deterministic'; echo $?)" \
	"  so it is no deterministic fault: the node gets its try and the job ends (exit $rc)" || show
join hb-job
ok "$(says 'failure at step start-up: a rank died: n2'; echo $?)" \
	"  an earlier job's heartbeat (step 30) does not count for this job's first launch" || show

# ---- 3. ranks per node on a relaunch ------------------------------------------------------
for l in srun mpirun; do
	join "tpn-$l"
	if [ $l = srun ]; then
		want="-N 3 --nodelist=n1,n2,n3 --ntasks-per-node=2 "
	else
		want="--host n1:2,n2:2,n3:2 --map-by ppr:2:node "
	fi
	ok "$([ "$rc" = 0 ] && launch_line 2 | grep -qF -- "$want"; echo $?)" \
		"3. $l: sbatch -N 4 -n 8, a node lost: the relaunch on 3 nodes keeps 2 ranks a node ($want)" || show
done
# Open MPI's SLURM allocator needs SLURM_TASKS_PER_NODE: the relaunch's.
like "$(grep '^mpirun env' "$T/st-tpn-mpirun/stub.log" | sed -n 2p)" \
	'^mpirun env: SLURM_NODELIST=n1,n2,n3 SLURM_TASKS_PER_NODE=2\(x3\)$' \
	"  mpirun: the relaunch gets SLURM_NODELIST and SLURM_TASKS_PER_NODE of the nodes it runs on"

# ---- 4. the tier is removed on every way out -------------------------------------------
join cap
ok "$([ "$rc" = 75 ] && says 'restart cap reached' && [ -d "$ST/shm" ] && tier_gone; echo $?)" \
	"4. exit 75 at the restart cap: the tier is removed (exit $rc)" || show
join term
ok "$([ "$rc" = 75 ] && says 'TERM came before' && tier_gone; echo $?)" \
	"  TERM, then exit 75: the tier is removed (exit $rc)" || show
join held
ok "$([ "$rc" = 0 ] && launch_line 2 | grep -q -- '-N 1 --nodelist=n1 ' &&
	rm_step | grep -q -- '-N 3 --nodelist=n1,n2,n3 ' && tier_gone; echo $?)" \
	"  relaunched on n1 alone (n2 left out, n3 drained): the tier is still removed on all three (exit $rc)" || show
join down
ok "$([ "$rc" = 0 ] && rm_step | grep -q -- '-N 2 --nodelist=n1,n2 ' && says 'tier .*ftrain-job-4242 is left on n3 .*down'; echo $?)" \
	"  a node SLURM says is DOWN: removed on the others, and the log says it is left on that one" || show
join noanswer
ok "$([ "$rc" = 0 ] && says 'SLURM did not say within 20 s' && rm_step | grep -q -- '--nodelist=n1,n2,n3 ' && tier_gone; echo $?)" \
	"  a controller that does not answer at the end: said in the log, the tier removed on the job's nodes" || show

# ---- 5. a task that exits with its own status: the user's failure -------------------------
join user
ok "$([ "$rc" = 1 ] && [ "$(launches)" = 1 ] && says 'not relaunching' && ! says 'kept for one more try|left out'; echo $?)" \
	"5. 'task 1: Exited with exit code 1', then the others Killed: one launch, no node blamed (exit $rc)" || show
join killed-first
ok "$([ "$rc" = 0 ] && [ "$(launches)" = 2 ] && says 'a rank died: n2: task 1: Killed'; echo $?)" \
	"  a rank Killed first (a task exiting after it): relaunched as before (exit $rc)" || show

# ---- 6. one bounded query for the nodes' states ---------------------------------------------
# The cases that time the script run from here on, the pool ended.
wait "$POOL_PID"
case_dir states
echo n1,n2,n3,n4,n5,n6 >"$ST/nodelist"
echo 'echo DOWN >"$ST/state.n5"; echo "srun: error: Node failure on n6" >&2; exit 1' >"$ST/launch.1"
echo 'exit 0' >"$ST/launch.2"
run_case states
prompt=$tr
ok "$([ "$rc" = 0 ] && [ "$(grep -c '^scontrol show node' "$LOG")" = 1 ] && launch_line 2 | grep -q -- '-N 4 --nodelist=n1,n2,n3,n4 '; echo $?)" \
	"6. 6 nodes: one 'scontrol show node' for the decision; n5 (DOWN) and n6 (failed) left out (exit $rc)" || show
case_dir slow
echo n1,n2,n3,n4,n5,n6 >"$ST/nodelist"
echo 'echo "srun: error: Node failure on n6" >&2; exit 1' >"$ST/launch.1"
echo 'exit 0' >"$ST/launch.2"
LIMIT=40 run_case slow SCONTROL_SLEEP=30 FTRAIN_SLURM_TIMEOUT=2
# The same case as the one above, whose controller answers at once, but
# for the one query, which gives up after FTRAIN_SLURM_TIMEOUT=2 s: one
# query, one warning, and at most 2 s longer than that case (1.5 s more are
# headroom for a loaded machine).  (It may take less: the relaunch's own
# pause can overlap the wait.)  A query that waited for the stub's 30 s, or
# several queries in turn, take longer.
extra=$(awk -v a="$prompt" -v b="$tr" 'BEGIN { printf "%.2f", b - a }')
ok "$([ "$rc" = 0 ] && [ "$(grep -c '^scontrol show node' "$LOG")" = 1 ] &&
	[ "$(grep -c 'did not say within 2 s' "$ST/out")" = 1 ] && below "$extra" 3.5 &&
	launch_line 2 | grep -q -- '-N 5 --nodelist=n1,n2,n3,n4,n5 '; echo $?)" \
	"  a controller slower than FTRAIN_SLURM_TIMEOUT=2: the decision waits once (one query, $extra s more than with a prompt one: under 3.5), relaunches without n6 (exit $rc)" || show

# ---- 7. the 2-s grace, and a launcher killed by the stop signal -------------------------------
# sleep_until T: sleep until the wall clock (EPOCHREALTIME) reaches T.
sleep_until() {
	local now us
	now=${EPOCHREALTIME/[.,]/}
	us=$(printf '%.0f' "$(echo "$1 * 1000000" | bc)")
	[ "$us" -gt "$now" ] && sleep "$(echo "scale=6; ($us - $now) / 1000000" | bc)"
}
# A launcher that sets its handler 1.5 s after it starts (USR1's default
# action, death, until then), told to stop 1.3 s after its start, late in a
# wall-clock second: whole seconds would take it for 2 s old.
case_dir grace
printf '%s\n' 'trap - USR1 USR2; sleep 1.5' \
	'trap '\''echo "launcher got USR1" >>"$LOG"; exit 75'\'' USR1' >"$ST/launch.1"
t0=$(date +%s)
start ALIGN_DIR="$ST/run"
if wait_for 10 test -s "$ST/started.1"; then
	sleep_until "$(echo "$(cat "$ST/started.1") + 1.3" | bc)"
	kill -USR1 "$(cat "$ST/shell.pid")"
fi
finish
ok "$(says 'has just started; forwarding USR1 in [01]\.[0-9]{3} s' && grep -q 'launcher got USR1' "$LOG" &&
	grep -q '^scontrol requeue 4242' "$LOG"; echo $?)" \
	"7. a stop 1.3 s after the launch: forwarded at 2 s to the millisecond, taken, requeued (exit $rc)" || show
case_dir stopkill
echo 'trap - USR1 USR2; sleep 10; exit 0' >"$ST/launch.1"
t0=$(date +%s)
start
if wait_for 10 test -s "$ST/started.1"; then
	sleep_until "$(echo "$(cat "$ST/started.1") + 2.3" | bc)"
	kill -USR1 "$(cat "$ST/shell.pid")"
fi
finish
ok "$(says 'ended by the forwarded USR1 \(status 138\) before it could take it' && grep -q '^scontrol requeue 4242' "$LOG"; echo $?)" \
	"  a launcher the forwarded USR1 killed (138): requeued, it left the checkpoint before (exit $rc)" || show

# ---- 8. a signal while the script decides on a relaunch ---------------------------------------
join termrl
ok "$([ "$rc" = 137 ] && [ "$(launches)" = 1 ] && says 'TERM came before relaunch 1 could start' && ! says 'TERM before launch' &&
	tier_gone; echo $?)" \
	"8. TERM during the decision: not relaunched, the failure's status kept, the tier removed (exit $rc)" || show
join usr1rl
ok "$([ "$rc" = 137 ] && [ "$(launches)" = 1 ] && says 'failed with status 137, then USR1 came.*restart cap reached' &&
	! says 'checkpointed' && tier_gone; echo $?)" \
	"  USR1 during the decision at the restart cap: not 'checkpointed', the failure's status kept, the tier removed (exit $rc)" || show
join usr1rq
ok "$([ "$(launches)" = 1 ] && grep -q '^scontrol requeue 4242' "$LOG" && says 'failed with status 137, then USR1 came.*: requeue job'; echo $?)" \
	"  USR1 during the decision: requeued, saying the launch failed (exit $rc)" || show

# ---- 10. ranks per node when sbatch was given none ------------------------------------------
# Under --exclusive SLURM_TASKS_PER_NODE is the nodes' CPU count (2 here);
# without -n or --ntasks-per-node srun starts one rank per node, mpirun one
# per slot.
for c in "${PER_CASES[@]}"; do
	l=${c%% *} want=${c%% SLURM*} extra=""
	want=${want#srun }
	case $c in *SLURM*) extra=${c##* --ntasks-per-node=3 } ;; esac
	join "per-$l-${extra:+given}"
	n=$(printf '%s\n' "$want" | sed -E 's/.*(=|ppr:)([0-9]+).*/\2/')
	ok "$([ "$rc" = 0 ] && launch_line 2 | grep -qF -- "$want" && says "\(on a relaunch $n\)"; echo $?)" \
		"10. $l ${extra:-without -n or --ntasks-per-node} under --exclusive (SLURM_TASKS_PER_NODE=2(x3)): the relaunch has $n a node, and the start line says so" || show
done

# ---- 11. the launcher's own failures: not the user's -------------------------------------------
join srunkilled
ok "$([ "$rc" = 0 ] && [ "$(launches)" = 2 ] && says 'srun itself was killed by signal KILL \(status 137\)' &&
	! says 'bad options' && launch_line 2 | grep -q -- '-N 3 --nodelist=n1,n2,n3 '; echo $?)" \
	"11. srun killed (137, no rank's message): relaunched on every node, saying the launcher died (exit $rc)" || show
join noctl
ok "$([ "$rc" = 0 ] && [ "$(launches)" = 3 ] && says 'srun could not reach the SLURM controller' && ! says 'bad options|deterministic'; echo $?)" \
	"  srun that cannot reach the controller (status 1), twice: relaunched within FTRAIN_MAX_RELAUNCHES, no deterministic fault (exit $rc)" || show

# ---- 12. --run-dir among ftrain's arguments, sbatch patterns in RUN_DIR -------------------------
run_dirs() { launch_line 1 | grep -oE -- '--run-dir(=| )[^ ]+' | paste -sd' ' -; }
join rdarg
ok "$([ "$rc" = 0 ] && [ "$(run_dirs)" = "--run-dir $ST/mine" ] && says "run_dir $ST/mine " &&
	says 'failure at step 12: ' && [ ! -e "$T/runs/4242" ]; echo $?)" \
	"12. --run-dir DIR after the script's name, RUN_DIR unset: DIR is RUN_DIR, watched and passed once (exit $rc)" || { show; why "$(run_dirs)"; }
join rdeq
ok "$([ "$rc" = 0 ] && [ "$(run_dirs)" = "--run-dir $ST/run" ]; echo $?)" \
	"  --run-dir=RUN_DIR in FTRAIN_ARGS: the same directory, passed once (exit $rc)" || { show; why "$(run_dirs)"; }
join rdboth
ok "$([ "$rc" = 2 ] && [ "$(launches)" = 0 ] && says "error: ftrain is given --run-dir $ST/other but RUN_DIR is $ST/run"; echo $?)" \
	"  --run-dir in FTRAIN_ARGS that differs from RUN_DIR: refused (exit $rc), naming both" || show
join pct
ok "$([ "$rc" = 0 ] && [ "$(run_dirs)" = "--run-dir $ST/r-4242-mnist-ann-%" ] && [ -d "$ST/r-4242-mnist-ann-%" ]; echo $?)" \
	"  RUN_DIR with %j, %x, %u and %%: expanded as sbatch does (exit $rc)" || { show; why "$(run_dirs)"; }
join pcta
ok "$([ "$rc" = 0 ] && [ "$(run_dirs)" = "--run-dir $ST/sw-4242_1" ]; echo $?)" \
	"  RUN_DIR with %A_%a in an array task: sw-4242_1 (exit $rc)" || { show; why "$(run_dirs)"; }
join pctbad
ok "$([ "$rc" = 2 ] && [ "$(launches)" = 0 ] && says "RUN_DIR '$ST/r-%N' holds '%N'" && [ ! -e "$ST/r-%N" ]; echo $?)" \
	"  RUN_DIR with a pattern the script does not expand (%N): refused (exit $rc)" || show

# ---- 13. FTRAIN_MIN_NODES above the job's nodes; a requeue leaves the suspect out ------------------
join minnodes
ok "$(says 'warning: FTRAIN_MIN_NODES=3 is more than the 2 node\(s\) this job has: an unplanned failure requeues'; echo $?)" \
	"13. FTRAIN_MIN_NODES=3 on a 2-node job: a warning at the start" || show
ok "$(says 'node n2 left out: the failure points at it' && says '1 healthy node\(s\) left \(n1\), fewer than FTRAIN_MIN_NODES=3: requeue job 4242 .*without node\(s\) n2' &&
	! says '2 healthy node'; echo $?)" \
	"  n2 left out, then '1 healthy node(s) left (n1)', not '2 ... (n1,n2)'" || show
ok "$([ "$rc" = 143 ] && grep -A1 '^scontrol requeue 4242$' "$LOG" | grep -q '^scontrol update JobId=4242 ExcNodeList=n2$'; echo $?)" \
	"  the requeued job gets ExcNodeList=n2, set after the requeue (exit $rc)" || { show; why "$(queries)"; }
join shortleft
ok "$([ "$rc" = 143 ] && says '40 s left in the allocation, and a launch needs FTRAIN_RELAUNCH_NEED=60 s' &&
	grep -q '^scontrol update JobId=4242 ExcNodeList=n2$' "$LOG"; echo $?)" \
	"  too little time left: the log names FTRAIN_RELAUNCH_NEED (nothing was measured), and the requeue leaves n2 out (exit $rc)" || { show; why "$(queries)"; }
join noexclude
ok "$([ "$rc" = 143 ] && ! grep -q 'ExcNodeList' "$LOG" &&
	says 'the failures pointed at n2; the requeued job may run there again \(FTRAIN_REQUEUE_EXCLUDE=1 leaves them out\)'; echo $?)" \
	"  by default (FTRAIN_REQUEUE_EXCLUDE unset) no ExcNodeList: the log names n2 and the option (exit $rc)" || { show; why "$(queries)"; }

# ---- 14. after a TERM no step runs: the clean-up's message --------------------------------------
join termnostep
ok "$([ "$rc" = 75 ] && ! says 'could not remove' && says "ftrain's ranks removed it at their end \(--ckpt-local-remove-at-end\)"; echo $?)" \
	"14. TERM, exit 75, no step for the clean-up: no warning that the tier is left (ftrain removed it) (exit $rc)" || show
join termfail
ok "$([ "$rc" = 137 ] && says 'warning: could not remove the node-local tier'; echo $?)" \
	"  TERM, then a failure (137): the warning stays (exit $rc)" || show

# ---- 15. a time-limit warning in the job's first minute ----------------------------------------------
case_dir early
t0=$(date +%s)
start SQUEUE_LIM=1:00 SQUEUE_L=0:57
if wait_for 10 test -s "$ST/started.1"; then
	sleep 2.2
	kill -USR1 "$(cat "$ST/shell.pid")"
fi
finish
ok "$([ "$rc" = 143 ] && says 'note: USR1 came [0-9]+ s after the job started and its time limit is 60 s: if that is .*time limit is within the signal lead' &&
	grep -q '^squeue -h -j 4242 -o %l$' "$LOG" && grep -q '^scontrol requeue 4242$' "$LOG"; echo $?)" \
	"15. USR1 2 s into a job with a 1-minute limit: the log says the limit is within the signal lead, then requeues (exit $rc)" || show

# ---- 16. RUN_DIR not shared across the job's nodes -----------------------------------------
join notshared
ok "$([ "$rc" = 2 ] && [ "$(launches)" = 0 ] && ! grep -q 'ftrain-deputy' "$LOG" &&
	says "error: RUN_DIR $ST/run is not shared across the job's 3 nodes: a file written there on this node is not seen on n2,n3 \(the probe step, one 'test -f' per node, exited 1\)" &&
	[ -z "$(ls -A "$ST/run" | grep probe)" ]; echo $?)" \
	"16. RUN_DIR not seen on n2 and n3: refused (exit $rc) naming them, nothing launched, the probe's files removed" || show
ok "$(grep -q "^srun --overlap -N 3 -n 3 --ntasks-per-node=1 --mpi=none --kill-on-bad-exit=0 --job-name=ftrain-probe sh -c " "$T/st-root/stub.log" &&
	[ "$(grep -n 'ftrain-probe' "$T/st-root/stub.log" | cut -d: -f1)" -lt "$(grep -n -- '--data line' "$T/st-root/stub.log" | head -n 1 | cut -d: -f1)" ] &&
	grep -q 'RUN_DIR is shared: all 3 nodes of the job see it' "$T/st-root/out"; echo $?)" \
	"  a shared RUN_DIR: one probe step, one task a node, before the launch, and the log says so" ||
	why "$(grep -v hostnames "$T/st-root/stub.log")"
join probenorun
ok "$([ "$rc" = 0 ] && [ "$(launches)" = 1 ] && says 'warning: could not tell whether every node sees RUN_DIR .*: the probe step exited 1 and no task of it left its marker'; echo $?)" \
	"  a probe step that did not run at all (no marker, not even the batch host's): a warning, the job goes on (exit $rc)" || show
join onenode
ok "$([ "$rc" = 0 ] && ! grep -Eq -- 'ftrain-probe|ftrain-deputy' "$LOG" && [ "$(launches)" = 1 ]; echo $?)" \
	"  a 1-node job: no probe, no deputy (exit $rc)" || show

# ---- 17. the deputy ------------------------------------------------------------------------
hb=$T/st-root/run/.supervisor-4242.heartbeat
dep=$(grep -- '--job-name=ftrain-deputy' "$T/st-root/stub.log")
ok "$(printf '%s\n' "$dep" | grep -q -- "^srun --overlap -N 1 -n 1 --nodelist=n3 --mpi=none --kill-on-bad-exit=0 --job-name=ftrain-deputy $FTRAIN_SUPERVISE --deputy --heartbeat $hb --watch n1 --job 4242 --log-job 4242 --restart 0 --max-restarts 20 --stale 60 " &&
	grep -q 'deputy: started on n3 .*this batch host (n1)' "$T/st-root/out" &&
	grep -q 'deputy on n3: watching the supervisor on n1' "$T/st-root/out"; echo $?)" \
	"17. the deputy step: on n3 (the last node but the batch host n1), watching n1's heartbeat, started and watching" ||
	why "$dep" "$(cat "$T/st-root/out")"
ok "$(grep -Eq '^ftrain-supervisor 1 job 4242 restart 0 host n1 pid [0-9]+ seq [0-9]+ state ended +$' "$hb" &&
	[ "$(wc -c <"$hb")" = 256 ] && grep -q 'deputy on n3 left (status 0)' "$T/st-root/out" &&
	! grep -q 'deputy on n3: .*requeue job' "$T/st-root/out"; echo $?)" \
	"  at the end the heartbeat (version 1, 256 bytes) says ended, and the deputy leaves by itself (status 0), having requeued nothing" ||
	why "$(cat "$hb")" "$(cat "$T/st-root/out")"
join nodeputy
ok "$([ "$rc" = 0 ] && ! grep -q 'ftrain-deputy' "$LOG" && says 'FTRAIN_DEPUTY=0: no deputy' && [ ! -e "$ST/run/.supervisor-4242.heartbeat" ]; echo $?)" \
	"  FTRAIN_DEPUTY=0: no deputy step, no heartbeat file, and the log says so (exit $rc)" || show
case_dir deplost
echo 'kill -TERM "$(cat "$ST/deputy.pid")"; sleep 0.5; echo "srun: error: Node failure on n3" >&2; echo DOWN >"$ST/state.n3"; exit 1' >"$ST/launch.1"
echo 'exit 0' >"$ST/launch.2"
run_case deplost
ok "$([ "$rc" = 0 ] && says 'warning: the deputy step on n3 ended' && says 'deputy: started on n2 ' &&
	[ "$(grep -c -- '--job-name=ftrain-deputy' "$LOG")" = 2 ] &&
	launch_line 2 | grep -q -- '-N 2 --nodelist=n1,n2 '; echo $?)" \
	"  the deputy's node lost: a warning, and the relaunch on n1,n2 starts another deputy on n2 (exit $rc)" || show

# ---- 9. array tasks: each names itself alone ----------------------------------------------
# SLURM gives one task the array's own id as its SLURM_JOB_ID, and that id
# names the whole array: `scontrol requeue 4242` would requeue every task.
# A node lost, a relaunch (queries), then a stop and a requeue.
join arr-own
ok "$([ "$rc" = 143 ] && grep -q '^scontrol requeue 4242_1$' "$LOG" && ! queries | grep -qE ' 4242( |$)' &&
	queries | grep -qE '^scontrol show job (-o )?4242_1$' && queries | grep -q '^squeue -h -j 4242_1 ' &&
	says 'train.sbatch\[4242_1\]: .*requeue job 4242_1 '; echo $?)" \
	"9. the task holding the array's own id (4242_1, SLURM_JOB_ID 4242): requeued and queried as 4242_1, never 4242 (exit $rc)" ||
	{ show; why "$(queries)"; }
like "$(launch_line 1)" "--ckpt-local $ST/shm/ftrain-job-4242/%n " "  its node-local tier is ftrain-job-4242"
join arr-other
ok "$([ "$rc" = 143 ] && grep -q '^scontrol requeue 4243$' "$LOG" && ! queries | grep -qE ' 4242(_0)?( |$)' &&
	says 'train.sbatch\[4242_0\]: start' && launch_line 1 | grep -q -- "--ckpt-local $ST/shm/ftrain-job-4243/%n "; echo $?)" \
	"  another task (4242_0, id 4243): requeued as 4243, its tier ftrain-job-4243 (one per task) (exit $rc)" ||
	{ show; why "$(queries)"; }
join arr-inherited
ok "$([ "$rc" = 143 ] && grep -q '^scontrol requeue 4242$' "$LOG" && says 'train.sbatch\[4242\]: start.* run_dir '"$ST"'/runs/4242 '; echo $?)" \
	"  a plain job with array variables inherited from the task that submitted it: job 4242, runs/4242 (exit $rc)" ||
	{ show; why "$(queries)"; }

done_testing

#!/bin/bash
# supervise_cli.sh - ftrain-supervise on its own, with srun, scontrol and
# squeue replaced by stubs on PATH (no SLURM needed) (TAP):
#
#   1. bad input (no SLURM_JOB_ID, a missing ftrain, an unknown launcher, a
#      negative cap, a cap that is not a number, a bad RUN_DIR pattern, a
#      bad stop signal) is refused with a message naming it and exit 2,
#      before anything is launched: the srun stub notes every run, and
#      must not have run;
#   2. a run directory and an argument with a space (and quotes) reach
#      ftrain intact, one argument each; FTRAIN_LAUNCH_ID is 1 for the
#      first launch; --stop-signal is added;
#   3. a failure record that is truncated, garbage, or of another launch
#      is named in the log and the decision falls back to the exit status
#      (exit 1: the user's; one launch, no relaunch), never a crash; a good
#      record of this launch (kind device) is taken: a relaunch with
#      FTRAIN_LAUNCH_ID 2;
#   4. --help prints the usage and exits 0; the stop signal is forwarded
#      to srun and exit 75 requeues (scontrol requeue 4242);
#   5. the deputy (--deputy) on its own, with --stale 1: a silent
#      heartbeat and SLURM saying the batch host is DOWN requeue the job,
#      naming why; the host ALLOCATED (a slow supervisor): no requeue; an
#      "ended" heartbeat: it leaves at once, asking SLURM nothing; the job
#      no longer RUNNING: it leaves; at the restart cap it cancels the job;
#      bad options: exit 2.
. "$(dirname "$0")/../lib.sh"
SUP=$(cd "$(dirname "$0")/../.." && pwd)/$BUILD/ftrain-supervise
[ -x "$SUP" ] || { echo "Bail out! $SUP is not built (make)"; exit 1; }
B=$T/bin
mkdir -p "$B"
export LOG=$T/stub.log
plan 28

# srun stub (also mpirun's): notes its run, then runs the command after its
# own options as one task (exec: signals reach the command).
cat >"$B/srun" <<'EOF'
#!/bin/bash
echo "${0##*/} $*" >>"$LOG"
while [ $# -gt 0 ]; do
	case $1 in
	--mca) shift 3 ;;
	-x | -N | --host | --map-by) shift 2 ;;
	-*) shift ;;
	*) break ;;
	esac
done
exec "$@"
EOF
cp "$B/srun" "$B/mpirun"
# scontrol and squeue stubs: one node, n1, allocated; 50 minutes left; a
# requeue is noted.
cat >"$B/scontrol" <<'EOF'
#!/bin/bash
echo "scontrol $*" >>"$LOG"
case "$1 $2" in
"show job") echo "JobId=$SLURM_JOB_ID JobName=ftrain JobState=${STUB_JOB_STATE:-RUNNING} Restarts=${STUB_RESTARTS:-0} NodeList=n1 BatchHost=n1" ;;
"show hostnames") echo "$3" | tr ',' '\n' ;;
"show node") echo "NodeName=n1 Arch=x86_64 State=${STUB_NODE_STATE:-ALLOCATED} Partitions=main" ;;
esac
exit 0
EOF
printf '#!/bin/sh\necho "squeue $*" >>"$LOG"\necho 50:00\n' >"$B/squeue"
# scancel: noted; it TERMs its caller, as SLURM's cancel of the job does.
printf '#!/bin/sh\necho "scancel $*" >>"$LOG"\nkill -TERM "$PPID"\n' >"$B/scancel"
# The ftrain stub: writes its arguments one a line and its launch id, then
# runs $T/act.N (N: the launch id) if there is one; exits 0 otherwise.
cat >"$T/ftrain" <<'EOF'
#!/bin/bash
printf '%s\n' "$@" >"$T/args.$FTRAIN_LAUNCH_ID"
echo "$FTRAIN_LAUNCH_ID" >>"$T/launches"
[ -f "$T/act.$FTRAIN_LAUNCH_ID" ] && . "$T/act.$FTRAIN_LAUNCH_ID"
exit 0
EOF
chmod +x "$B"/* "$T/ftrain"
export T

# sup VAR=VALUE... -- ARGS...: run ftrain-supervise (at most 30 s) in job
# 4242 on n1; output in $T/out, status in rc.
sup() {
	local vars=()
	while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=("$1"); shift; done
	[ "${1:-}" = -- ] && shift
	: >"$LOG"
	rm -f "$T/launches" "$T"/args.*
	env PATH="$B:$PATH" SLURM_JOB_ID=4242 SLURM_JOB_NODELIST=n1 SLURM_JOB_NUM_NODES=1 \
		SLURM_SUBMIT_DIR="$T" FTRAIN="$T/ftrain" RUN_DIR="$T/run" "${vars[@]}" \
		timeout -k 5 30 "$SUP" --log-name train.sbatch -- "$@" >"$T/out" 2>&1 </dev/null
	rc=$?
}
ran() { grep -q '^\(srun\|mpirun\) ' "$LOG"; }
says() { grep -Eq -- "$1" "$T/out"; }
show() { why "exit $rc" "$(tail -n 8 "$T/out")" "$(tail -n 5 "$LOG")"; }

# ---- 1. bad input: exit 2, nothing launched ---------------------------------
bad() { # NAME PATTERN VAR=VALUE...
	local name=$1 pattern=$2
	shift 2
	sup "$@" -- --data line
	ok "$([ "$rc" = 2 ] && ! ran && says "train.sbatch\[[0-9_a-z]+\]: error: .*$pattern"; echo $?)" \
		"bad input: $name: exit 2, a message, nothing launched" || show
}
bad "no SLURM_JOB_ID" 'SLURM_JOB_ID is not set' SLURM_JOB_ID=
bad "a missing ftrain" "ftrain binary '$T/nope' is missing" FTRAIN="$T/nope"
bad "an unknown launcher" "FTRAIN_LAUNCH must be srun or mpirun, got 'pdsh'" FTRAIN_LAUNCH=pdsh
bad "a negative relaunch cap" "FTRAIN_MAX_RELAUNCHES must be .*, got '-1'" FTRAIN_MAX_RELAUNCHES=-1
bad "a negative restart cap" "FTRAIN_MAX_RESTARTS must be .*, got '-3'" FTRAIN_MAX_RESTARTS=-3
bad "a cap that is not a number" "FTRAIN_MIN_NODES must be .*, got 'two'" FTRAIN_MIN_NODES=two
bad "a RUN_DIR with %N" "RUN_DIR '$T/run-%N' holds '%N'" RUN_DIR="$T/run-%N"
ok "$([ ! -e "$T/run-%N" ] && [ ! -e "$T/run-" ]; echo $?)" "bad input: no directory made for a refused RUN_DIR"
bad "a bad stop signal" "FTRAIN_STOP_SIGNAL must be USR1 or USR2, got 'TERM'" FTRAIN_STOP_SIGNAL=TERM
bad "a missing FTRAIN_PROGRAM" "FTRAIN_PROGRAM's command 'no-such-trainer' is not found" FTRAIN_PROGRAM="no-such-trainer --x"
bad "--stop-signal against FTRAIN_STOP_SIGNAL" "given --stop-signal USR2 but FTRAIN_STOP_SIGNAL is USR1" FTRAIN_ARGS="--stop-signal USR2"

# ---- 2. arguments reach ftrain intact -----------------------------------------
mkdir -p "$T/my runs"
sup RUN_DIR="$T/my runs/r %j" -- --data line --note "a b  \"c\" 'd'" --epochs 1
want=$(printf '%s\n' --run-dir "$T/my runs/r 4242" --data line --note "a b  \"c\" 'd'" --epochs 1 --stop-signal USR1)
ok "$([ "$rc" = 0 ] && [ "$(cat "$T/args.1" 2>/dev/null)" = "$want" ]; echo $?)" \
	"a run directory and an argument with blanks and quotes reach ftrain intact" ||
	why "exit $rc" "got: $(cat "$T/args.1" 2>/dev/null)" "want: $want"
ok "$([ -d "$T/my runs/r 4242" ] && [ "$(cat "$T/launches")" = 1 ] && says 'done: training finished'; echo $?)" \
	"RUN_DIR's %j expanded and made; FTRAIN_LAUNCH_ID=1 for the first launch; done logged" || show
sup FTRAIN_PROGRAM="$T/ftrain --first 'x'" -- "two words"
want=$(printf '%s\n' --first "'x'" "two words")
ok "$([ "$rc" = 0 ] && [ "$(cat "$T/args.1" 2>/dev/null)" = "$want" ]; echo $?)" \
	"FTRAIN_PROGRAM: split on blanks, then the arguments, each intact" ||
	why "exit $rc" "got: $(cat "$T/args.1" 2>/dev/null)"

# ---- 3. failure records: refused or stale ones fall back to the status --------
rec() { # LAUNCH_ID KIND: a well-formed record of job 4242, restart 0
	printf '{"format":"ftrain-failure","version":1,"launch":{"job":"4242","restart":0,"id":%s},"kind":"%s","rank":0,"host":"n1","pid":4000,"step":3,"phase":"compute","time":1700000000.25,"culprit":{"rank":-1,"host":""},"message":"m"}' "$1" "$2"
}
record_case() { # NAME PATTERN CONTENT
	rm -rf "$T/run/failures"
	mkdir -p "$T/run/failures"
	printf '%s' "$3" >"$T/rec.json"
	printf 'cp "$T/rec.json" "$RUN_DIR_F/j4242-r0-l1-rank0.json"; exit 1\n' >"$T/act.1"
	sup RUN_DIR_F="$T/run/failures" -- --data line
	ok "$([ "$rc" = 1 ] && [ "$(cat "$T/launches")" = 1 ] && says "$2" &&
		says 'ftrain failed with status 1: not a lost rank'; echo $?)" \
		"a failure record $1: logged, the status decides (exit 1, no relaunch)" || show
}
export RUN_DIR_F
good=$(rec 1 device)
record_case "cut in half" 'failure record\(s\) in .* refused \(' "${good:0:90}"
record_case "that is garbage" 'failure record\(s\) in .* refused \(' $'\x01\x02garbage{{{'
record_case "of another launch (id 7)" '1 failure record\(s\) of other launches ignored' "$(rec 7 device)"
record_case "of another restart" '1 failure record\(s\) of other launches ignored' "$(rec 1 device | sed 's/"restart":0/"restart":5/')"
# The same record of this very launch is taken: a device failure is not the
# user's, and is relaunched (launch 2), then done.
rm -rf "$T/run/failures"
printf '%s' "$good" >"$T/rec.json"
printf 'mkdir -p "$RUN_DIR_F"; cp "$T/rec.json" "$RUN_DIR_F/j4242-r0-l1-rank0.json"; exit 1\n' >"$T/act.1"
sup RUN_DIR_F="$T/run/failures" -- --data line
ok "$([ "$rc" = 0 ] && [ "$(cat "$T/launches" | paste -sd,)" = 1,2 ] && says 'failure record: rank 0 on n1: device' &&
	says 'relaunch 1 of at most 3'; echo $?)" \
	"a good record of this launch decides: device, relaunched with FTRAIN_LAUNCH_ID 2" || show
rm -f "$T/act.1"

# ---- 4. help, the stop signal, the requeue ------------------------------------
"$SUP" --help >"$T/out" 2>&1
rc=$?
ok "$([ "$rc" = 0 ] && says '^usage: ftrain-supervise'; echo $?)" "--help: the usage on stdout, exit 0"
# ftrain stub that exits 75 on USR1 (after a checkpoint, as ftrain does);
# a requeue TERMs the supervisor, as SLURM's does.
printf 'trap "echo got-usr1 >>\\"\\$LOG\\"; exit 75" USR1\nfor i in $(seq 100); do sleep 0.1; done\n' >"$T/act.1"
sed -i 's/^exit 0$/[ "$1" = requeue ] \&\& kill -TERM "$PPID"\nexit 0/' "$B/scontrol"
: >"$LOG"
rm -f "$T/launches"
env PATH="$B:$PATH" SLURM_JOB_ID=4242 SLURM_JOB_NODELIST=n1 SLURM_JOB_NUM_NODES=1 \
	SLURM_SUBMIT_DIR="$T" FTRAIN="$T/ftrain" RUN_DIR="$T/run" \
	"$SUP" --log-name train.sbatch -- --data line >"$T/out" 2>&1 </dev/null &
spid=$!
sleep 3
kill -USR1 "$spid"
for _ in $(seq 200); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
kill -KILL "$spid" 2>/dev/null
wait "$spid"
rc=$?
ok "$([ "$rc" = 143 ] && says 'got USR1: forwarded USR1 to srun' && grep -q got-usr1 "$LOG" &&
	says 'ftrain exited with status 75 \(after USR1\)' && grep -q '^scontrol requeue 4242$' "$LOG" &&
	says 'checkpointed: requeue job 4242 \(restart 1 of at most 20\)'; echo $?)" \
	"the stop signal forwarded to srun, exit 75 requeued; the requeue's TERM ends it" || show
rm -f "$T/act.1"

# ---- 5. the deputy on its own -------------------------------------------------
# beat STATE [RESTART]: a heartbeat file of job 4242 on n1, as beat.c writes it.
beat() {
	mkdir -p "$T/run"
	printf '%-255s\n' "ftrain-supervisor 1 job 4242 restart ${2:-0} host n1 pid 7 seq 1 state $1" >"$T/run/.supervisor-4242.heartbeat"
}
# deputy LIMIT VAR=VALUE... -- ARGS...: the deputy of job 4242 on n3, watching
# n1 (at most LIMIT s); output in $T/out, status in rc, seconds in secs.
deputy() {
	local limit=$1 vars=()
	shift
	while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=("$1"); shift; done
	[ "${1:-}" = -- ] && shift
	: >"$LOG"
	local t0=$SECONDS
	env PATH="$B:$PATH" SLURM_JOB_ID=4242 SLURMD_NODENAME=n3 "${vars[@]}" timeout -k 2 "$limit" \
		"$SUP" --deputy --heartbeat "$T/run/.supervisor-4242.heartbeat" --watch n1 --job 4242 \
		--restart 0 --stale 1 --log-name train.sbatch "$@" >"$T/out" 2>&1 </dev/null
	rc=$? secs=$((SECONDS - t0))
}
beat running
deputy 20 STUB_NODE_STATE='DOWN*'
ok "$([ "$rc" = 0 ] && grep -q '^scontrol requeue 4242$' "$LOG" &&
	says 'deputy on n3: the batch host n1 is lost \(the supervisor silent for [0-9]+ s, SLURM says DOWN\): requeue job 4242 \(restart 1 of at most 20\)'; echo $?)" \
	"deputy: a silent heartbeat and n1 DOWN*: requeue, naming why (exit $rc, $secs s)" || show
beat running
deputy 3 STUB_NODE_STATE='ALLOCATED'
ok "$([ "$rc" = 124 ] && ! grep -q 'requeue' "$LOG" && grep -q '^scontrol show node -o n1$' "$LOG" &&
	says "but SLURM does not say n1 is down or not responding: waiting"; echo $?)" \
	"deputy: silent, but n1 ALLOCATED (a slow supervisor): it waits, no requeue (exit $rc)" || show
beat ended
deputy 20 STUB_NODE_STATE='DOWN*'
ok "$([ "$rc" = 0 ] && [ "$secs" -le 2 ] && ! grep -q . "$LOG"; echo $?)" \
	"deputy: the heartbeat says ended: it leaves at once, asking SLURM nothing (exit $rc, $secs s)" || show
beat running 1
deputy 20 STUB_NODE_STATE='DOWN*'
ok "$([ "$rc" = 0 ] && ! grep -q . "$LOG" && says 'restart 1.s, a later run'; echo $?)" \
	"deputy: a later restart's heartbeat: it leaves (exit $rc)" || show
beat running
deputy 20 STUB_NODE_STATE='DOWN*' STUB_JOB_STATE=PENDING
ok "$([ "$rc" = 0 ] && ! grep -q 'requeue' "$LOG" && says 'is not running .*: this run of it .* is over: leaving'; echo $?)" \
	"deputy: SLURM says the job is no longer RUNNING: it leaves, no requeue (exit $rc)" || show
beat running 20
deputy 20 STUB_NODE_STATE='DOWN*' STUB_RESTARTS=20 -- --restart 20 --max-restarts 20
ok "$([ "$rc" = 0 ] && grep -q '^scancel 4242$' "$LOG" && ! grep -q 'requeue' "$LOG" &&
	says 'restart cap reached \(20 of FTRAIN_MAX_RESTARTS=20\): cancelling job 4242'; echo $?)" \
	"deputy: the batch host lost at the restart cap: it cancels the job rather than hold it (exit $rc)" || show
deputy 5 -- --stale 0
ok "$([ "$rc" = 2 ] && says 'deputy: bad option or value: --stale 0'; echo $?)" \
	"deputy: a bad option is refused, exit 2 (exit $rc)" || show
